/*
 * poly.c: ops as isl sets and maps, and the bounds check.
 *
 * An op's domain is the box of its variables; each access is a map from the
 * domain to the tensor. An access is in bounds when the image of the part of
 * the domain where it is evaluated (the domain intersected with the guards
 * of the selects around it) lies in the tensor's box.
 */
#include <stdlib.h>

#include <isl/aff.h>
#include <isl/ctx.h>
#include <isl/ilp.h>
#include <isl/map.h>
#include <isl/options.h>
#include <isl/set.h>
#include <isl/union_map.h>
#include <isl/val.h>

#include "sched_int.h"

isl_ctx *sched_isl_ctx_new(void)
{
	isl_ctx *ctx = isl_ctx_alloc();

	if (ctx)
		isl_options_set_on_error(ctx, ISL_ON_ERROR_CONTINUE);
	return ctx;
}

static const char *const isl_binops[] = {
	[SCHED_ADD] = "+", [SCHED_SUB] = "-", [SCHED_MUL] = "*",
	[SCHED_LT] = "<", [SCHED_LE] = "<=", [SCHED_GT] = ">", [SCHED_GE] = ">=",
	[SCHED_EQ] = "=",
};

/* Prints a quasi-affine index in isl's syntax; constant parts folded. */
static void print_affine(sched_buf *buf, const sched_node *node,
			 const sched_op *op)
{
	int64_t c;

	if (sched_node_int_const(node, &c)) {
		sched_buf_printf(buf, "%lld", (long long)c);
	} else if (node->kind == SCHED_NODE_VAR) {
		sched_buf_printf(buf, "%s", op->vars[node->var].name);
	} else if (node->kind == SCHED_NODE_UNARY) {
		sched_buf_printf(buf, "-(");
		print_affine(buf, node->args[0], op);
		sched_buf_printf(buf, ")");
	} else if (node->op == SCHED_DIV || node->op == SCHED_MOD) {
		sched_buf_printf(buf, node->op == SCHED_DIV ? "floor((" : "((");
		print_affine(buf, node->args[0], op);
		sched_node_int_const(node->args[1], &c);
		sched_buf_printf(buf, node->op == SCHED_DIV ? ")/%lld)" : ") mod %lld)",
				 (long long)c);
	} else {
		sched_buf_printf(buf, "(");
		print_affine(buf, node->args[0], op);
		sched_buf_printf(buf, " %s ", isl_binops[node->op]);
		print_affine(buf, node->args[1], op);
		sched_buf_printf(buf, ")");
	}
}

static void print_tuple(sched_buf *buf, const sched_op *op)
{
	sched_buf_printf(buf, "S%d[", op->index);
	for (int v = 0; v < op->nvars; v++)
		sched_buf_printf(buf, "%s%s", v ? ", " : "", op->vars[v].name);
	sched_buf_printf(buf, "]");
}

static char *domain_str(const sched_op *op)
{
	sched_buf buf = {0};

	sched_buf_printf(&buf, "{ ");
	print_tuple(&buf, op);
	for (int v = 0; v < op->nvars; v++)
		sched_buf_printf(&buf, "%s%lld <= %s < %lld", v ? " and " : " : ",
				 (long long)op->vars[v].lo, op->vars[v].name,
				 (long long)op->vars[v].hi);
	sched_buf_printf(&buf, " }");
	return buf.str;
}

static char *access_str(const sched_graph *graph, const sched_op *op,
			const sched_node *access)
{
	sched_buf buf = {0};

	sched_buf_printf(&buf, "{ ");
	print_tuple(&buf, op);
	sched_buf_printf(&buf, " -> %s[", graph->tensors[access->tensor].name);
	for (int i = 0; i < access->nargs; i++) {
		sched_buf_printf(&buf, "%s", i ? ", " : "");
		print_affine(&buf, access->args[i], op);
	}
	sched_buf_printf(&buf, "] }");
	return buf.str;
}

static char *write_str(const sched_graph *graph, const sched_op *op)
{
	sched_buf buf = {0};

	sched_buf_printf(&buf, "{ ");
	print_tuple(&buf, op);
	sched_buf_printf(&buf, " -> %s[", graph->tensors[op->target].name);
	for (int v = 0; v < op->ntarget_vars; v++)
		sched_buf_printf(&buf, "%s%s", v ? ", " : "", op->vars[v].name);
	sched_buf_printf(&buf, "] }");
	return buf.str;
}

/* Reads the set "str" (taken, may be NULL). */
static isl_set *read_set(isl_ctx *ctx, char *str)
{
	isl_set *set = str ? isl_set_read_from_str(ctx, str) : NULL;

	free(str);
	return set;
}

static isl_map *read_map(isl_ctx *ctx, char *str)
{
	isl_map *map = str ? isl_map_read_from_str(ctx, str) : NULL;

	free(str);
	return map;
}

static isl_set *universe_of(isl_ctx *ctx, const sched_op *op)
{
	sched_buf buf = {0};

	sched_buf_printf(&buf, "{ ");
	print_tuple(&buf, op);
	sched_buf_printf(&buf, " }");
	return read_set(ctx, buf.str);
}

static bool has_division(const sched_node *node)
{
	if (node->kind == SCHED_NODE_BINARY && node->op == SCHED_DIV)
		return true;
	for (int i = 0; i < node->nargs; i++)
		if (has_division(node->args[i]))
			return true;
	return false;
}

/* A comparison of two affine sides. Division is real in conditions, not
 * floor division as in indices, so a side that divides does not count. */
static bool is_affine_comparison(const sched_node *cond)
{
	return cond->kind == SCHED_NODE_BINARY && cond->op >= SCHED_LT &&
	       cond->op <= SCHED_NE && !has_division(cond) &&
	       !sched_index_problem(cond->args[0]) &&
	       !sched_index_problem(cond->args[1]);
}

static isl_set *comparison_set(isl_ctx *ctx, const sched_op *op,
			       const sched_node *cond)
{
	sched_buf buf = {0};
	isl_set *set;

	sched_buf_printf(&buf, "{ ");
	print_tuple(&buf, op);
	sched_buf_printf(&buf, " : ");
	print_affine(&buf, cond->args[0], op);
	sched_buf_printf(&buf, " %s ", cond->op == SCHED_NE ? "=" : isl_binops[cond->op]);
	print_affine(&buf, cond->args[1], op);
	sched_buf_printf(&buf, " }");
	set = read_set(ctx, buf.str);
	return cond->op == SCHED_NE ? isl_set_complement(set) : set;
}

/* A set that contains every point where "cond" (or, if "negate", its
 * negation) holds: exact for affine conditions, the universe otherwise. */
static isl_set *guard_over(isl_ctx *ctx, const sched_op *op,
			   const sched_node *cond, bool negate)
{
	bool and_like;
	isl_set *a, *b;

	if (is_affine_comparison(cond)) {
		isl_set *set = comparison_set(ctx, op, cond);

		return negate ? isl_set_complement(set) : set;
	}
	if (cond->kind == SCHED_NODE_UNARY && cond->op == SCHED_NOT)
		return guard_over(ctx, op, cond->args[0], !negate);
	if (cond->kind != SCHED_NODE_BINARY ||
	    (cond->op != SCHED_AND && cond->op != SCHED_OR))
		return universe_of(ctx, op);
	and_like = (cond->op == SCHED_AND) != negate;
	a = guard_over(ctx, op, cond->args[0], negate);
	b = guard_over(ctx, op, cond->args[1], negate);
	return and_like ? isl_set_intersect(a, b) : isl_set_union(a, b);
}

typedef struct bounds_walk {
	const sched_graph *graph;
	const sched_op *op;
	isl_ctx *ctx;
	sched_error *err;
	int rc;
} bounds_walk;

static int report_outside(bounds_walk *w, const sched_node *access, int d,
			  isl_val *reach, bool past)
{
	const sched_tensor *t = &w->graph->tensors[access->tensor];
	char excerpt[SCHED_EXCERPT], *value = isl_val_to_str(reach);
	int rc;

	rc = sched_fail(w->err, SCHED_EBOUNDS, w->op->index, access->args[d]->col,
			"index '%s' of '%s' reaches %s, %s%lld",
			sched_node_excerpt(access->args[d], w->op->text, excerpt),
			t->name, value ? value : "?",
			past ? "past its size " : "below ", past ? (long long)t->shape[d] : 0LL);
	free(value);
	return rc;
}

/* Fails if dim "d" of "image" (taken) leaves [0, size). isl's values are
 * exact, however large. */
static int check_dim(bounds_walk *w, const sched_node *access, int d,
		     isl_set *image)
{
	const sched_tensor *t = &w->graph->tensors[access->tensor];
	isl_val *lo = isl_set_dim_min_val(isl_set_copy(image), d);
	isl_val *hi = isl_set_dim_max_val(image, d);
	int rc = SCHED_OK;

	if (!lo || !hi || !isl_val_is_int(lo) || !isl_val_is_int(hi))
		rc = sched_fail(w->err, SCHED_EINTERNAL, w->op->index,
				access->args[d]->col,
				"isl could not bound index %d of '%s'", d, t->name);
	else if (isl_val_cmp_si(hi, t->shape[d]) >= 0)
		rc = report_outside(w, access, d, hi, true);
	else if (isl_val_is_neg(lo))
		rc = report_outside(w, access, d, lo, false);
	isl_val_free(lo);
	isl_val_free(hi);
	return rc;
}

static int check_access(bounds_walk *w, const sched_node *access,
			__sched_keep isl_set *where)
{
	isl_map *map = sched_access_map(w->ctx, w->graph, w->op, access);
	isl_set *image = isl_set_apply(isl_set_copy(where), map);
	isl_bool empty = isl_set_is_empty(image);
	int rc = empty < 0 ? SCHED_EINTERNAL : SCHED_OK;

	for (int d = 0; d < access->nargs && rc == SCHED_OK && !empty; d++)
		rc = check_dim(w, access, d, isl_set_copy(image));
	isl_set_free(image);
	if (rc == SCHED_EINTERNAL && w->err && w->err->code != rc)
		sched_fail(w->err, rc, w->op->index, access->col,
			   "isl failed on an access of '%s'",
			   w->graph->tensors[access->tensor].name);
	return rc;
}

static void walk(bounds_walk *w, const sched_node *node, __sched_take isl_set *where);

static void walk_select(bounds_walk *w, const sched_node *node, isl_set *where)
{
	const sched_node *cond = node->args[0];

	walk(w, cond, isl_set_copy(where));
	walk(w, node->args[1], isl_set_intersect(isl_set_copy(where),
						   guard_over(w->ctx, w->op, cond, false)));
	walk(w, node->args[2], isl_set_intersect(where,
						   guard_over(w->ctx, w->op, cond, true)));
}

/* Checks every access under "node", evaluated on the points "where". */
static void walk(bounds_walk *w, const sched_node *node, isl_set *where)
{
	if (w->rc == SCHED_OK && !where)
		w->rc = sched_fail(w->err, SCHED_EINTERNAL, w->op->index, node->col,
				   "isl failed on a guard");
	if (w->rc != SCHED_OK) {
		isl_set_free(where);
		return;
	}
	if (node->kind == SCHED_NODE_CALL && node->op == SCHED_SELECT)
		return walk_select(w, node, where);
	if (node->kind == SCHED_NODE_ACCESS)
		w->rc = check_access(w, node, where);
	for (int i = 0; i < node->nargs; i++)
		walk(w, node->args[i], isl_set_copy(where));
	isl_set_free(where);
}

int sched_graph_check_bounds(const sched_graph *graph, sched_error *err)
{
	isl_ctx *ctx = sched_isl_ctx_new();
	bounds_walk w = {graph, NULL, ctx, err, SCHED_OK};

	if (!ctx)
		return sched_fail(err, SCHED_ENOMEM, -1, 0, "out of memory");
	for (int i = 0; i < graph->nops && w.rc == SCHED_OK; i++) {
		w.op = &graph->ops[i];
		walk(&w, w.op->body, sched_op_domain(ctx, graph, i));
	}
	isl_ctx_free(ctx);
	return w.rc;
}

isl_set *sched_op_domain(isl_ctx *ctx, const sched_graph *graph, int op)
{
	return read_set(ctx, domain_str(&graph->ops[op]));
}


isl_map *sched_op_write(isl_ctx *ctx, const sched_graph *graph, int op)
{
	return read_map(ctx, write_str(graph, &graph->ops[op]));
}

isl_map *sched_access_map(isl_ctx *ctx, const sched_graph *graph,
			  const sched_op *op, const sched_node *access)
{
	return read_map(ctx, access_str(graph, op, access));
}

typedef struct read_union {
	isl_ctx *ctx;
	const sched_graph *graph;
	const sched_op *op;
	isl_union_map *reads;
} read_union;

static void add_read_map(const sched_node *access, void *user)
{
	read_union *r = user;
	isl_map *map = sched_access_map(r->ctx, r->graph, r->op, access);

	r->reads = isl_union_map_add_map(r->reads, map);
}

isl_union_map *sched_op_reads(isl_ctx *ctx, const sched_graph *graph, int op)
{
	read_union r = {ctx, graph, &graph->ops[op], NULL};
	isl_set *domain = sched_op_domain(ctx, graph, op);

	r.reads = isl_union_map_empty(isl_set_get_space(domain));
	isl_set_free(domain);
	sched_node_each_access(r.op->body, add_read_map, &r);
	return r.reads;
}
