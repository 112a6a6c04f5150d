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
#include <string.h>

#include "print_int.h"

/* An integer affine form over the op's vars. */
typedef struct affine {
	int64_t coef[2 * SCHED_MAX_RANK];
	int64_t constant;
} affine;

/* Adds "scale" times "node" to "out"; false when it is not affine. */
static bool add_affine(const sched_node *node, int64_t scale, affine *out)
{
	int64_t c;

	if (sched_node_int_const(node, &c)) {
		out->constant += scale * c;
		return true;
	}
	switch (node->kind) {
	case SCHED_NODE_VAR:
		out->coef[node->var] += scale;
		return true;
	case SCHED_NODE_UNARY:
		return node->op == SCHED_NEG && add_affine(node->args[0], -scale, out);
	case SCHED_NODE_BINARY:
		if (node->op == SCHED_ADD || node->op == SCHED_SUB)
			return add_affine(node->args[0], scale, out) &&
			       add_affine(node->args[1], node->op == SCHED_ADD ? scale : -scale,
					  out);
		if (node->op != SCHED_MUL)
			return false;
		if (sched_node_int_const(node->args[0], &c))
			return add_affine(node->args[1], scale * c, out);
		return sched_node_int_const(node->args[1], &c) &&
		       add_affine(node->args[0], scale * c, out);
	default:
		return false;
	}
}

static bool same_affine(const affine *a, const affine *b, int nvars)
{
	for (int v = 0; v < nvars; v++)
		if (a->coef[v] != b->coef[v])
			return false;
	return a->constant == b->constant;
}

/* The least and greatest value of "f" over the op's domain (a box). */
static void affine_range(const sched_op *op, const affine *f, int64_t *lo, int64_t *hi)
{
	*lo = *hi = f->constant;
	for (int v = 0; v < op->nvars; v++) {
		int64_t a = f->coef[v] * op->vars[v].lo, b = f->coef[v] * (op->vars[v].hi - 1);

		*lo += a < b ? a : b;
		*hi += a < b ? b : a;
	}
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
	affine e = {0};
	int op = cond->op;

	if (cond->kind != SCHED_NODE_BINARY)
		return false;
	if (op == SCHED_AND)
		return conjuncts_are_bounds(w, cond->args[0]) &&
		       conjuncts_are_bounds(w, cond->args[1]);
	if (op != SCHED_GE && op != SCHED_GT && op != SCHED_LE && op != SCHED_LT)
		return false;
	/* e >= 0: a - b for a >= b, b - a for a <= b, one less when strict */
	if (!add_affine(cond->args[0], op == SCHED_GE || op == SCHED_GT ? 1 : -1, &e) ||
	    !add_affine(cond->args[1], op == SCHED_GE || op == SCHED_GT ? -1 : 1, &e))
		return false;
	e.constant -= op == SCHED_GT || op == SCHED_LT;
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

/* The padding of each dim, and the offset in the padded copy as an
 * affine form, from the window's indices. */
static void pad_window(const sched_op *op, const affine *index, kgen_window *w)
{
	int64_t stride = 1;

	w->size = 1;
	for (int d = w->rank - 1; d >= 0; d--) {
		int64_t lo, hi;

		affine_range(op, &index[d], &lo, &hi);
		w->pad[d] = lo < 0 ? -lo : 0;
		w->padded[d] = w->pad[d] + (hi > w->shape[d] - 1 ? hi : w->shape[d] - 1) + 1;
		w->size *= w->padded[d];
	}
	memset(w->coef, 0, sizeof(w->coef));
	w->constant = 0;
	for (int d = w->rank - 1; d >= 0; stride *= w->padded[d--]) {
		for (int v = 0; v < op->nvars; v++)
			w->coef[v] += stride * index[d].coef[v];
		w->constant += stride * (index[d].constant + w->pad[d]);
	}
}

bool kgen_conv_window(const sched_graph *graph, const sched_op *op,
		      const sched_contraction *c, kgen_window *out)
{
	const sched_node *cond, *access;
	affine index[SCHED_MAX_RANK];
	window_bounds bounds = {.op = op, .index = index};

	if (!c->gathered ||
	    !(access = window_access(op->body->args[c->factor_b], &cond)))
		return false;
	bounds.t = &graph->tensors[access->tensor];
	memset(index, 0, sizeof(index));
	for (int d = 0; d < access->nargs; d++)
		if (!add_affine(access->args[d], 1, &index[d]))
			return false;
	if (cond && !conjuncts_are_bounds(&bounds, cond))
		return false;
	for (int d = 0; d < bounds.t->rank; d++) {
		int64_t lo, hi;

		affine_range(op, &index[d], &lo, &hi);
		if ((lo < 0 && !bounds.lower[d]) || (hi > bounds.t->shape[d] - 1 && !bounds.upper[d]))
			return false;
	}
	*out = (kgen_window){.tensor = access->tensor, .rank = bounds.t->rank};
	memcpy(out->shape, bounds.t->shape, sizeof(out->shape));
	pad_window(op, index, out);
	return true;
}
