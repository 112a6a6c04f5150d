/*
 * conv_window.c: whether a gathered product's B is a window of one
 * tensor that a zero-padded copy of it makes affine (docs/design/kernels.md,
 * "Direct convolutions").
 *
 * conv_pair's B, select(p + r >= 1 && p + r <= 56 && q + s >= 1 &&
 * q + s <= 56, x[n, c, p + r - 1, q + s - 1], 0), is x read at affine
 * indices wherever they fall inside x and 0 wherever they fall outside:
 * each condition is one bound of one of x's dims, and every bound the
 * indices can cross over the op's domain is among them. Then B is
 * exactly xp[offset], xp being x with zeros around it, as wide on each
 * side as the indices reach past it, and offset affine in the op's vars.
 * Where the innermost n var moves that offset by 1, B's columns are
 * contiguous in xp and the micro-kernels read them in place (print_micro.c).
 */
#include <stdlib.h>
#include <string.h>

#include "print_int.h"

/* Windows whose padded copy has more elements, or whose indices have
 * larger coefficients, are packed as before: every sum and product of
 * the forms below then fits 64 bits. */
#define WINDOW_MAX_ELEMENTS ((int64_t)1 << 31)
#define WINDOW_MAX_COEF ((int64_t)1 << 40)

/* *acc += a * b; false on overflow. */
static bool mul_add(int64_t *acc, int64_t a, int64_t b)
{
	int64_t product;

	return !__builtin_mul_overflow(a, b, &product) &&
	       !__builtin_add_overflow(*acc, product, acc);
}

/* An integer affine form over the op's vars. */
typedef struct affine {
	int64_t coef[2 * SCHED_MAX_RANK];
	int64_t constant;
} affine;

/* Adds "scale" times "node" to "out"; false when it is not affine. */
static bool add_affine(const sched_node *node, int64_t scale, affine *out)
{
	const sched_node *other;
	int64_t c;

	if (sched_node_int_const(node, &c))
		return mul_add(&out->constant, scale, c);
	switch (node->kind) {
	case SCHED_NODE_VAR: return mul_add(&out->coef[node->var], scale, 1);
	case SCHED_NODE_UNARY:
		return node->op == SCHED_NEG && add_affine(node->args[0], -scale, out);
	case SCHED_NODE_BINARY:
		if (node->op == SCHED_ADD || node->op == SCHED_SUB)
			return add_affine(node->args[0], scale, out) &&
			       add_affine(node->args[1],
					  node->op == SCHED_ADD ? scale : -scale, out);
		if (node->op != SCHED_MUL)
			return false;
		if (sched_node_int_const(node->args[0], &c))
			other = node->args[1];
		else if (sched_node_int_const(node->args[1], &c))
			other = node->args[0];
		else
			return false;
		return !__builtin_mul_overflow(scale, c, &c) &&
		       add_affine(other, c, out);
	default: return false;
	}
}

/* "node" as an affine form with small coefficients into *out (zeroed). */
static bool affine_of(const sched_node *node, int nvars, affine *out)
{
	*out = (affine){0};
	if (!add_affine(node, 1, out) || llabs(out->constant) > WINDOW_MAX_COEF)
		return false;
	for (int v = 0; v < nvars; v++)
		if (llabs(out->coef[v]) > WINDOW_MAX_COEF)
			return false;
	return true;
}

static bool same_affine(const affine *a, const affine *b, int nvars)
{
	for (int v = 0; v < nvars; v++)
		if (a->coef[v] != b->coef[v])
			return false;
	return a->constant == b->constant;
}

/* The least and greatest value of "f" over the op's domain (a box);
 * false on overflow. */
static bool affine_range(const sched_op *op, const affine *f, int64_t *lo, int64_t *hi)
{
	*lo = *hi = f->constant;
	for (int v = 0; v < op->nvars; v++) {
		bool up = f->coef[v] > 0;

		if (!mul_add(lo, f->coef[v],
			     up ? op->vars[v].lo : op->vars[v].hi - 1) ||
		    !mul_add(hi, f->coef[v], up ? op->vars[v].hi - 1 : op->vars[v].lo))
			return false;
	}
	return true;
}

/* What a window's condition says of its tensor's dims: per dim, whether
 * its lower bound (index >= 0) and upper bound (index <= shape - 1) are
 * among the conjuncts. */
typedef struct window_bounds {
	const sched_op *op;
	const sched_tensor *t;
	const affine *index;
	bool lower[SCHED_MAX_RANK], upper[SCHED_MAX_RANK];
} window_bounds;

/* Marks the bound that "e >= 0" is; false when it is none. */
static bool mark_bound(window_bounds *w, const affine *e)
{
	for (int d = 0; d < w->t->rank; d++) {
		affine upper = {.constant = w->t->shape[d] - 1 - w->index[d].constant};

		for (int v = 0; v < w->op->nvars; v++)
			upper.coef[v] = -w->index[d].coef[v];
		if (same_affine(e, &w->index[d], w->op->nvars))
			return w->lower[d] = true;
		if (same_affine(e, &upper, w->op->nvars))
			return w->upper[d] = true;
	}
	return false;
}

/* Every conjunct of "cond" a bound of the window's tensor, marked. */
static bool conjuncts_are_bounds(window_bounds *w, const sched_node *cond)
{
	affine a, b, e = {0};
	int op = cond->op, sign;

	if (cond->kind != SCHED_NODE_BINARY)
		return false;
	if (op == SCHED_AND)
		return conjuncts_are_bounds(w, cond->args[0]) &&
		       conjuncts_are_bounds(w, cond->args[1]);
	if (op != SCHED_GE && op != SCHED_GT && op != SCHED_LE && op != SCHED_LT)
		return false;
	if (!affine_of(cond->args[0], w->op->nvars, &a) ||
	    !affine_of(cond->args[1], w->op->nvars, &b))
		return false;
	/* e >= 0: a - b for a >= b, b - a for a <= b, one less when strict */
	sign = op == SCHED_GE || op == SCHED_GT ? 1 : -1;
	for (int v = 0; v < w->op->nvars; v++)
		e.coef[v] = sign * (a.coef[v] - b.coef[v]);
	e.constant = sign * (a.constant - b.constant) -
		     (op == SCHED_GT || op == SCHED_LT);
	return mark_bound(w, &e);
}

/* The access a window reads: B itself, or select(cond, access, 0) with
 * *cond set. */
static const sched_node *window_access(const sched_node *b, const sched_node **cond)
{
	int64_t zero;

	*cond = NULL;
	if (b->kind == SCHED_NODE_ACCESS)
		return b;
	if (b->kind != SCHED_NODE_CALL || b->op != SCHED_SELECT ||
	    b->args[1]->kind != SCHED_NODE_ACCESS ||
	    !sched_node_int_const(b->args[2], &zero) || zero != 0)
		return NULL;
	*cond = b->args[0];
	return b->args[1];
}

/* The padding of each dim ("lo" and "hi": the least and greatest index
 * of each), and the offset in the padded copy as an affine form, from the
 * window's indices; false past WINDOW_MAX_ELEMENTS. */
static bool pad_window(const sched_op *op, const affine *index, const int64_t *lo,
		       const int64_t *hi, kgen_window *w)
{
	int64_t stride = 1;

	w->size = 1;
	for (int d = w->rank - 1; d >= 0; d--) {
		w->pad[d] = lo[d] < 0 ? -lo[d] : 0;
		w->padded[d] = w->pad[d] +
			       (hi[d] > w->shape[d] - 1 ? hi[d] : w->shape[d] - 1) + 1;
		if (w->padded[d] > WINDOW_MAX_ELEMENTS ||
		    (w->size *= w->padded[d]) > WINDOW_MAX_ELEMENTS)
			return false;
	}
	memset(w->coef, 0, sizeof(w->coef));
	w->constant = 0;
	for (int d = w->rank - 1; d >= 0; stride *= w->padded[d--]) {
		for (int v = 0; v < op->nvars; v++)
			if (!mul_add(&w->coef[v], stride, index[d].coef[v]))
				return false;
		if (!mul_add(&w->constant, stride, index[d].constant + w->pad[d]))
			return false;
	}
	return true;
}

bool kgen_conv_window(const sched_graph *graph, const sched_op *op,
		      const sched_contraction *c, kgen_window *out)
{
	const sched_node *cond, *access;
	affine index[SCHED_MAX_RANK];
	int64_t lo[SCHED_MAX_RANK], hi[SCHED_MAX_RANK];
	window_bounds bounds = {.op = op, .index = index};

	if (!c->gathered ||
	    !(access = window_access(op->body->args[c->factor_b], &cond)))
		return false;
	bounds.t = &graph->tensors[access->tensor];
	for (int d = 0; d < access->nargs; d++)
		if (!affine_of(access->args[d], op->nvars, &index[d]))
			return false;
	if (cond && !conjuncts_are_bounds(&bounds, cond))
		return false;
	for (int d = 0; d < bounds.t->rank; d++)
		if (!affine_range(op, &index[d], &lo[d], &hi[d]) ||
		    lo[d] < -WINDOW_MAX_ELEMENTS || hi[d] > WINDOW_MAX_ELEMENTS ||
		    (lo[d] < 0 && !bounds.lower[d]) ||
		    (hi[d] > bounds.t->shape[d] - 1 && !bounds.upper[d]))
			return false;
	*out = (kgen_window){.tensor = access->tensor, .rank = bounds.t->rank};
	memcpy(out->shape, bounds.t->shape, sizeof(out->shape));
	return pad_window(op, index, lo, hi, out);
}
