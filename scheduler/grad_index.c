/*
 * grad_index.c: the inverse of a read's index map, for the adjoint of the
 * read (docs/design/autodiff.md). Element j of the read tensor receives from
 * every point of the op that reads it: the points where each dim's index
 * equals j's coordinate. Each dim is an equation over the op's variables,
 * j and, for an index divided by or taken modulo a constant k, a new
 * variable (the remainder of inner / k = j, the quotient of inner % k = j).
 * An equation of two op variables merged into one index (x[h * 16 + d],
 * d's range at most h's coefficient) is solved first, as the quotient and
 * remainder of j. Gauss-Jordan elimination solves one op variable per
 * equation where it can (a coefficient of 1 or -1, or any coefficient for
 * a variable no other equation has, with a divisibility guard); the
 * variables left are summed over, equations left without a variable
 * become guards, and each solved variable is guarded to its range where
 * the ranges of what it is solved in do not keep it there.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad.h"

/* Columns of an equation: the op's variables, the new variables, the
 * adjoint's index variables, the constant. */
#define COL_EXTRA GRAD_MAX_VARS
#define COL_J (COL_EXTRA + SCHED_MAX_RANK)
#define COL_CONST (COL_J + SCHED_MAX_RANK)
#define NCOLS (COL_CONST + 1)

/* The equations of one read: sum k[c] col_c = 0 per dim, and each
 * column's name and range (inclusive). */
typedef struct equations {
	int64_t row[SCHED_MAX_RANK][NCOLS];
	int nrows;
	const char *name[NCOLS];
	int64_t min[NCOLS], max[NCOLS];
	int pivot[SCHED_MAX_RANK]; /* the op variable solved by each row, or -1 */
} equations;

/* Adds "scale" times the affine form of index "node" to "row" (columns of
 * the op's variables and the constant); false when it is not affine. */
static bool affine_form(const sched_node *node, int64_t scale, int64_t *row)
{
	int64_t k;

	if (sched_node_int_const(node, &k)) {
		row[COL_CONST] += scale * k;
		return true;
	}
	if (node->kind == SCHED_NODE_VAR) {
		row[node->var] += scale;
		return true;
	}
	if (node->kind == SCHED_NODE_UNARY)
		return affine_form(node->args[0], -scale, row);
	if (node->kind != SCHED_NODE_BINARY)
		return false;
	switch (node->op) {
	case SCHED_ADD:
		return affine_form(node->args[0], scale, row) &&
		       affine_form(node->args[1], scale, row);
	case SCHED_SUB:
		return affine_form(node->args[0], scale, row) &&
		       affine_form(node->args[1], -scale, row);
	case SCHED_MUL:
		if (sched_node_int_const(node->args[0], &k))
			return affine_form(node->args[1], scale * k, row);
		if (sched_node_int_const(node->args[1], &k))
			return affine_form(node->args[0], scale * k, row);
		return false;
	default:
		return false;
	}
}

static int64_t floor_div(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* The range of the affine form "row" over the columns' ranges. */
static void form_range(const equations *eq, const int64_t *row, int64_t *lo,
		       int64_t *hi)
{
	*lo = *hi = row[COL_CONST];
	for (int c = 0; c < COL_CONST; c++) {
		*lo += row[c] * (row[c] > 0 ? eq->min[c] : eq->max[c]);
		*hi += row[c] * (row[c] > 0 ? eq->max[c] : eq->min[c]);
	}
}

/* A quasi-affine dim: [const +] inner / k or inner % k [+- const]; its
 * divisor and operator, inner into "row" (scaled by 1) and the outer
 * constant into *outer. */
static bool quasi_form(const sched_node *node, int64_t *row, int *op,
		       int64_t *divisor, int64_t *outer)
{
	int64_t k;

	if (node->kind != SCHED_NODE_BINARY)
		return false;
	if ((node->op == SCHED_ADD || node->op == SCHED_SUB) &&
	    sched_node_int_const(node->args[1], &k)) {
		*outer += node->op == SCHED_ADD ? k : -k;
		return quasi_form(node->args[0], row, op, divisor, outer);
	}
	if (node->op == SCHED_ADD && sched_node_int_const(node->args[0], &k)) {
		*outer += k;
		return quasi_form(node->args[1], row, op, divisor, outer);
	}
	if ((node->op != SCHED_DIV && node->op != SCHED_MOD) ||
	    !sched_node_int_const(node->args[1], divisor) || *divisor <= 0)
		return false;
	*op = node->op;
	return affine_form(node->args[0], 1, row);
}

/* Dim d's quasi-affine form, as quasi_form reads it; op -1 if it has
 * none. */
typedef struct quasi {
	int op; /* SCHED_DIV, SCHED_MOD or -1 */
	int64_t k, outer;
	int64_t inner[NCOLS];
} quasi;

static void read_quasi(const sched_node *index, quasi *q)
{
	memset(q, 0, sizeof(*q));
	if (!quasi_form(index, q->inner, &q->op, &q->k, &q->outer))
		q->op = -1;
}

/* A new variable of the inverse (summed over), over [lo, hi]. */
static int add_extra(grad_ctx *g, equations *eq, grad_inverse *inv,
		     const char *prefix, int64_t lo, int64_t hi)
{
	int e = inv->nextra++, col = COL_EXTRA + e;

	eq->name[col] = grad_printf(g, "%sr%d", prefix, e);
	eq->min[col] = lo;
	eq->max[col] = hi;
	inv->extra[e] = eq->name[col];
	inv->extra_lo[e] = lo;
	inv->extra_hi[e] = hi + 1;
	return col;
}

static void add_guard(grad_ctx *g, grad_inverse *inv, const char *cond)
{
	inv->guard = inv->guard ? grad_printf(g, "%s && %s", inv->guard, cond) : cond;
}

/* "row" as text: its terms (the columns but "skip"), times "scale". */
static const char *form_text(grad_ctx *g, const equations *eq,
			     const int64_t *row, int skip, int64_t scale)
{
	sched_buf buf = {0};
	const char *text;
	bool first = true;

	sched_buf_printf(&buf, "%s", "");
	for (int c = 0; c <= COL_CONST; c++) {
		int64_t k = scale * row[c], mag = k < 0 ? -k : k;

		if (c == skip || !k)
			continue;
		sched_buf_printf(&buf, "%s", first ? (k < 0 ? "-" : "")
						   : (k < 0 ? " - " : " + "));
		if (c == COL_CONST)
			sched_buf_printf(&buf, "%lld", (long long)mag);
		else if (mag == 1)
			sched_buf_printf(&buf, "%s", eq->name[c]);
		else
			sched_buf_printf(&buf, "%lld * %s", (long long)mag, eq->name[c]);
		first = false;
	}
	if (first)
		sched_buf_printf(&buf, "0");
	text = buf.str ? grad_printf(g, "%s", buf.str) : "0";
	g->nomem |= !buf.str;
	sched_buf_release(&buf);
	return text;
}

/* Names dim d's index variable of the adjoint, over [0, extent). */
static void name_dim(grad_ctx *g, equations *eq, int d, int64_t extent,
		     const char *prefix)
{
	eq->name[COL_J + d] = grad_printf(g, "%s%d", prefix, d);
	eq->min[COL_J + d] = 0;
	eq->max[COL_J + d] = extent - 1;
}

/* The guards of a remainder dim d (inner % k + outer = j): outer <= j <
 * k + outer, where the dim's extent does not keep it there. */
static void remainder_guards(grad_ctx *g, equations *eq, grad_inverse *inv, int d,
			     const quasi *q, int64_t extent)
{
	if (q->outer > 0)
		add_guard(g, inv,
			  grad_printf(g, "%s >= %lld", eq->name[COL_J + d],
				      (long long)q->outer));
	if (extent - 1 - q->outer >= q->k)
		add_guard(g, inv,
			  grad_printf(g, "%s < %lld", eq->name[COL_J + d],
				      (long long)(q->k + q->outer)));
}

/* Dim d's equation (index - j = 0, or its quasi-affine form with a new
 * variable), and the guards a remainder needs; false when the index is
 * neither affine nor quasi-affine as quasi_form reads it. */
static bool dim_equation(grad_ctx *g, equations *eq, grad_inverse *inv,
			 const sched_node *index, const quasi *q, int d, int64_t extent,
			 const char *prefix)
{
	int64_t *row = eq->row[d], lo, hi;
	int col;

	name_dim(g, eq, d, extent, prefix);
	if (affine_form(index, 1, row)) {
		row[COL_J + d] = -1;
		return true;
	}
	if (q->op < 0)
		return false;
	memcpy(row, q->inner, sizeof(q->inner));
	form_range(eq, row, &lo, &hi);
	if (q->op == SCHED_DIV) {
		/* inner = k (j - outer) + t, t in [0, k) */
		col = add_extra(g, eq, inv, prefix, 0, q->k - 1);
		row[COL_J + d] = -q->k;
		row[COL_CONST] += q->k * q->outer;
		row[col] = -1;
		return true;
	}
	/* inner = k q + (j - outer), q over the quotients, 0 <= j - outer < k */
	col = add_extra(g, eq, inv, prefix, floor_div(lo, q->k), floor_div(hi, q->k));
	row[col] = -q->k;
	row[COL_J + d] = -1;
	row[COL_CONST] += q->outer;
	remainder_guards(g, eq, inv, d, q, extent);
	return true;
}

/* Dims a (inner / k + outer_a) and b (inner % k + outer_b) of the same
 * inner form and k, a head split such as x[r / 16, r % 16]: one equation,
 * inner = k (j_a - outer_a) + j_b - outer_b, with no new variable to sum
 * over; row b is left empty, which always holds. */
static void pair_equation(grad_ctx *g, equations *eq, grad_inverse *inv, const quasi *q,
			  int a, int b, const int64_t *extents, const char *prefix)
{
	int64_t *row = eq->row[a];

	name_dim(g, eq, a, extents[a], prefix);
	name_dim(g, eq, b, extents[b], prefix);
	memcpy(row, q[a].inner, sizeof(q[a].inner));
	row[COL_J + a] = -q[a].k;
	row[COL_J + b] = -1;
	row[COL_CONST] += q[a].k * q[a].outer + q[b].outer;
	remainder_guards(g, eq, inv, b, &q[b], extents[b]);
}

/* partner[d]: the dim that splits the same inner form with d, one by
 * quotient and the other by remainder, or -1. */
static void find_partners(const quasi *q, int rank, int *partner)
{
	for (int d = 0; d < rank; d++)
		partner[d] = -1;
	for (int a = 0; a < rank; a++)
		for (int b = 0; b < rank && q[a].op == SCHED_DIV && partner[a] < 0; b++)
			if (q[b].op == SCHED_MOD && partner[b] < 0 &&
			    q[a].k == q[b].k &&
			    !memcmp(q[a].inner, q[b].inner, sizeof(q[a].inner)))
				partner[a] = b, partner[b] = a;
}

/* Whether op variable v is in row d and no other. */
static bool only_in_row(const equations *eq, int d, int v)
{
	for (int e = 0; e < eq->nrows; e++)
		if (e != d && eq->row[e][v])
			return false;
	return eq->row[d][v] != 0;
}

/* Guards "s" (its range [lo, hi]) to [from, to): only the bounds that
 * the range does not keep. */
static void guard_span(grad_ctx *g, grad_inverse *inv, const char *s, int64_t lo,
		       int64_t hi, int64_t from, int64_t to)
{
	if (lo < from)
		add_guard(g, inv, grad_printf(g, "%s >= %lld", s, (long long)from));
	if (hi >= to)
		add_guard(g, inv, grad_printf(g, "%s < %lld", s, (long long)to));
}

/* Whether row d's op variables are two unsolved ones in no other row, *y
 * of coefficient 1 or -1 and *x of another. */
static bool split_pair(const equations *eq, const grad_inverse *inv, const sched_op *op,
		       int d, int *x, int *y)
{
	int nvars = 0;

	*x = *y = -1;
	for (int v = 0; v < op->nvars; v++) {
		int64_t c = eq->row[d][v];

		if (!c)
			continue;
		nvars++;
		if (inv->solved[v] || !only_in_row(eq, d, v) ||
		    ((c == 1 || c == -1) && *y >= 0))
			return false;
		*(c == 1 || c == -1 ? y : x) = v;
	}
	return nvars == 2 && *x >= 0 && *y >= 0;
}

/* Row d as y + a x + rest = 0, x and y in no other row, y over [lo, lo +
 * n) with n <= |a| (heads merged, x[s, h * 16 + d]): one point solves
 * it, y = lo + s % |a| and x = s / a rounded down (a > 0) or -(s / |a|)
 * (a < 0), with s = -rest - lo, where the remainder is below n and x in
 * its range; nothing to sum over. False when the row is not of that
 * shape. */
static bool split_row(grad_ctx *g, equations *eq, grad_inverse *inv, const sched_op *op,
		      int d)
{
	int x, y;
	int64_t num[NCOLS], a, k, n, lo, hi, sign;
	const char *s, *rem;

	if (!split_pair(eq, inv, op, d, &x, &y))
		return false;
	sign = eq->row[d][y];
	a = sign * eq->row[d][x];
	k = a < 0 ? -a : a;
	n = op->vars[y].hi - op->vars[y].lo;
	if (k < 2 || n > k)
		return false;
	for (int c = 0; c < NCOLS; c++)
		num[c] = c == x || c == y ? 0 : -sign * eq->row[d][c];
	num[COL_CONST] -= op->vars[y].lo;
	form_range(eq, num, &lo, &hi);
	s = form_text(g, eq, num, -1, 1);
	if (strchr(s, ' ') || s[0] == '-')
		s = grad_printf(g, "(%s)", s);
	rem = grad_printf(g, "%s %% %lld", s, (long long)k);
	inv->vars[y] = op->vars[y].lo ? grad_printf(g, "(%s + %lld)", rem,
						    (long long)op->vars[y].lo) :
					grad_printf(g, "(%s)", rem);
	inv->value_vars[y] = inv->vars[y];
	inv->vars[x] = grad_printf(g, a > 0 ? "(%s / %lld)" : "(-(%s / %lld))", s,
				   (long long)k);
	inv->value_vars[x] = grad_printf(g,
					 a > 0 ? "((%s - %s) / %lld)" :
						 "(-((%s - %s) / %lld))",
					 s, rem, (long long)k);
	if (n < k)
		add_guard(g, inv, grad_printf(g, "%s < %lld", rem, (long long)n));
	if (a > 0)
		guard_span(g, inv, s, lo, hi, k * op->vars[x].lo, k * op->vars[x].hi);
	else
		guard_span(g, inv, s, lo, hi, -k * (op->vars[x].hi - 1),
			   k * (1 - op->vars[x].lo));
	inv->solved[x] = inv->solved[y] = true;
	memset(eq->row[d], 0, sizeof(eq->row[d]));
	return true;
}

/* The op variable row d solves at "pass": 0, coefficient 1 or -1 and the
 * row's only op variable; 1, coefficient 1 or -1 (eliminated from the
 * other rows); 2, any coefficient if no other row has it. A target
 * variable first; -1 if none. */
static int choose_pivot(const equations *eq, const grad_inverse *inv,
			const sched_op *op, int d, int pass)
{
	int best = -1, nvars = 0;

	for (int v = 0; v < op->nvars; v++)
		nvars += eq->row[d][v] != 0;
	for (int v = 0; v < op->nvars; v++) {
		int64_t a = eq->row[d][v];
		bool alone = true, unit = a == 1 || a == -1;

		if (!a || inv->solved[v])
			continue;
		for (int e = 0; e < eq->nrows; e++)
			alone &= e == d || !eq->row[e][v];
		if ((pass == 0 ? unit && nvars == 1 : pass == 1 ? unit : alone) &&
		    (best < 0 || (v < op->ntarget_vars && best >= op->ntarget_vars)))
			best = v;
	}
	return best;
}

/* Removes column "v" from every row but d (its coefficient a in row d is
 * 1 or -1, or it is in no other row). */
static void eliminate(equations *eq, int d, int v)
{
	int64_t a = eq->row[d][v];

	for (int e = 0; e < eq->nrows; e++) {
		int64_t f = e == d ? 0 : eq->row[e][v] * a;

		for (int c = 0; f && c < NCOLS; c++)
			eq->row[e][c] -= f * eq->row[d][c];
	}
}

/* Row d solved for its pivot v: a v + rest = 0, v = num / |a| with num
 * = -sign(a) rest; v's text, and the guards that num is a multiple of
 * |a| and v in its range. */
static void solve_row(grad_ctx *g, equations *eq, grad_inverse *inv,
		      const sched_op *op, int d, int v)
{
	int64_t a = eq->row[d][v], mag = a < 0 ? -a : a, lo, hi;
	int64_t num[NCOLS];
	const char *text;

	for (int c = 0; c < NCOLS; c++)
		num[c] = c == v ? 0 : (a < 0 ? eq->row[d][c] : -eq->row[d][c]);
	text = form_text(g, eq, num, -1, 1);
	form_range(eq, num, &lo, &hi);
	inv->solved[v] = true;
	if (mag == 1)
		inv->vars[v] = strchr(text, ' ') || text[0] == '-'
			     ? grad_printf(g, "(%s)", text) : text;
	else
		inv->vars[v] = grad_printf(g, "((%s) / %lld)", text, (long long)mag);
	inv->value_vars[v] = inv->vars[v]; /* exact: guarded to a multiple */
	if (mag != 1)
		add_guard(g, inv, grad_printf(g, "(%s) %% %lld == 0", text, (long long)mag));
	if (lo < mag * op->vars[v].lo)
		add_guard(g, inv, grad_printf(g, "%s >= %lld", text,
					      (long long)(mag * op->vars[v].lo)));
	if (hi > mag * (op->vars[v].hi - 1))
		add_guard(g, inv, grad_printf(g, "%s < %lld", text,
					      (long long)(mag * (op->vars[v].hi - 1) + 1)));
}

/* A row with no op variable left: a condition on the adjoint's index
 * (and the new variables), unless it always holds. */
static bool guard_row(grad_ctx *g, equations *eq, grad_inverse *inv,
		      const sched_op *op, int d)
{
	int64_t lo, hi, left[NCOLS], right[NCOLS];
	bool any_left = false;

	for (int v = 0; v < op->nvars; v++)
		if (eq->row[d][v])
			return false;
	form_range(eq, eq->row[d], &lo, &hi);
	if (lo == 0 && hi == 0)
		return true;
	/* the positive terms == the negative ones, negated */
	for (int c = 0; c < NCOLS; c++) {
		left[c] = eq->row[d][c] > 0 ? eq->row[d][c] : 0;
		right[c] = eq->row[d][c] < 0 ? -eq->row[d][c] : 0;
		any_left |= left[c] && c != COL_CONST;
	}
	add_guard(g, inv, grad_printf(g, "%s == %s",
				      form_text(g, eq, any_left ? left : right, -1, 1),
				      form_text(g, eq, any_left ? right : left, -1, 1)));
	return true;
}

/* Chooses the rows' pivots, pass by pass (choose_pivot), each pass until
 * it finds no more (an elimination can free another row); whether every
 * row has one. */
static bool solve_rows(equations *eq, grad_inverse *inv, const sched_op *op)
{
	int left = eq->nrows;

	for (int d = 0; d < eq->nrows; d++)
		eq->pivot[d] = -1;
	for (int pass = 0; pass < 3; pass++) {
		bool progress = true;

		while (progress) {
			progress = false;
			for (int d = 0; d < eq->nrows; d++) {
				int v = eq->pivot[d] < 0 ? choose_pivot(eq, inv, op, d, pass) : -1;

				if (v < 0)
					continue;
				eq->pivot[d] = v;
				inv->solved[v] = true;
				eliminate(eq, d, v);
				progress = true;
				left--;
			}
		}
	}
	return !left;
}

/* A prefix p such that p0, p1, ... and pr0, pr1, ... name none of the
 * op's variables: the adjoint's index variables and the new ones. */
static const char *free_prefix(const sched_op *op, int rank)
{
	static const char *const prefixes[] = {"i", "j", "k", "q", "u", "v_"};
	char name[16];

	for (size_t p = 0; p < sizeof(prefixes) / sizeof(*prefixes); p++) {
		bool clash = false;

		for (int d = 0; d < 2 * rank && !clash; d++) {
			snprintf(name, sizeof(name), "%s%s%d", prefixes[p],
				 d < rank ? "" : "r", d % rank);
			for (int v = 0; v < op->nvars; v++)
				clash |= !strcmp(op->vars[v].name, name);
		}
		if (!clash)
			return prefixes[p];
	}
	return "i_grad_";
}

static int refuse(const sched_op *op, const sched_node *access,
		  const sched_node *index, const char *why, sched_error *err)
{
	char read[SCHED_EXCERPT], idx[SCHED_EXCERPT];

	return sched_fail(err, SCHED_EMEANING, op->index, index->col,
			  "cannot differentiate the read '%s': its index '%s' %s",
			  sched_node_excerpt(access, op->text, read),
			  sched_node_excerpt(index, op->text, idx), why);
}

/* The variables' names and ranges, and the index variables' list. */
static void start(grad_ctx *g, equations *eq, grad_inverse *inv,
		  const sched_op *op, const char *prefix, int rank)
{
	memset(eq, 0, sizeof(*eq));
	memset(inv, 0, sizeof(*inv));
	eq->nrows = rank;
	for (int v = 0; v < op->nvars; v++) {
		inv->vars[v] = inv->value_vars[v] = eq->name[v] = op->vars[v].name;
		eq->min[v] = op->vars[v].lo;
		eq->max[v] = op->vars[v].hi - 1;
	}
	inv->target_vars = grad_index_vars(g, prefix, rank);
}

int grad_invert(grad_ctx *g, const sched_graph *graph, const sched_op *op,
		const sched_node *access, grad_inverse *inv, sched_error *err)
{
	const sched_tensor *x = &graph->tensors[access->tensor];
	const char *prefix = free_prefix(op, x->rank);
	quasi q[SCHED_MAX_RANK];
	int partner[SCHED_MAX_RANK];
	equations eq;

	start(g, &eq, inv, op, prefix, x->rank);
	for (int d = 0; d < x->rank; d++)
		read_quasi(access->args[d], &q[d]);
	find_partners(q, x->rank, partner);
	for (int d = 0; d < x->rank; d++)
		if (partner[d] >= 0 && q[d].op == SCHED_DIV)
			pair_equation(g, &eq, inv, q, d, partner[d], x->shape, prefix);
		else if (partner[d] < 0 && !dim_equation(g, &eq, inv, access->args[d],
							 &q[d], d, x->shape[d], prefix))
			return refuse(op, access, access->args[d],
				      "is not an affine form, nor one divided by or "
				      "taken modulo a constant, so its inverse is not "
				      "built", err);
	for (int d = 0; d < x->rank; d++)
		split_row(g, &eq, inv, op, d);
	if (!solve_rows(&eq, inv, op))
		for (int d = 0; d < x->rank; d++)
			if (eq.pivot[d] < 0 && !guard_row(g, &eq, inv, op, d))
				return refuse(op, access, access->args[d],
					      "leaves a variable that no index solves "
					      "for (its coefficient is not 1 or -1 and "
					      "other indices use it), so its inverse is "
					      "not built", err);
	for (int d = 0; d < x->rank; d++)
		if (eq.pivot[d] >= 0)
			solve_row(g, &eq, inv, op, d, eq.pivot[d]);
	return g->nomem ? sched_fail(err, SCHED_ENOMEM, -1, 0, "out of memory")
			: SCHED_OK;
}
