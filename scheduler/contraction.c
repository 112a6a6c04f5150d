/*
 * contraction.c: whether an op is a matrix product, read off its isl
 * access relations (docs/design/kernels.md, "Micro-kernels").
 *
 * An op C[..] = sum(..) A[..] * B[..] is a contraction when each access's
 * element offset is affine in the op's vars and the vars fall in three
 * kinds: m (an output var that moves A and C, not B), n (moves B and C,
 * not A) and k (a reduction var that moves A and B, not C). The vars of
 * a kind merge into one when their strides chain (m = (s, t) with
 * stride(s) = stride(t) * extent(t) in both tensors it moves), so that
 * x[b, s, c] * w[c, j] is one product of (b s) x c by c x j.
 *
 * A batched contraction also has batch vars: output vars that move A, B
 * and C, merged alike.
 *
 * A gathered contraction lets B be any expression of the n and k vars:
 * a convolution, sum(c, r, s) select(in bounds, x[c, p + r - 1, ..], 0)
 * * w[k, c, r, s], is the product of w as (k) x (c r s) by the padded
 * windows of x as (c r s) x (p q), packed by evaluating that expression.
 */
#include <stdlib.h>
#include <string.h>

#include <isl/aff.h>
#include <isl/map.h>
#include <isl/val.h>

#include "sched_int.h"

enum { MOVES_A = 1, MOVES_B = 2, MOVES_C = 4, MOVES_ALL = 7 };

/* The element offset of an access as coefficients per op var and a
 * constant (row-major strides over the tensor's shape). */
typedef struct offset {
	int64_t coef[2 * SCHED_MAX_RANK];
	int64_t constant;
} offset;

static bool val_to_int(isl_val *v, int64_t *out)
{
	bool ok = v && isl_val_is_int(v);

	if (ok)
		*out = isl_val_get_num_si(v);
	isl_val_free(v);
	return ok;
}

/* Adds "scale" times the affine "aff" (over the op's vars) to "off". */
static bool add_aff(const sched_op *op, isl_aff *aff, int64_t scale, offset *off)
{
	int64_t c;

	if (isl_aff_dim(aff, isl_dim_div) != 0 ||
	    !val_to_int(isl_aff_get_constant_val(aff), &c))
		return false;
	off->constant += scale * c;
	for (int v = 0; v < op->nvars; v++) {
		if (!val_to_int(isl_aff_get_coefficient_val(aff, isl_dim_in, v), &c))
			return false;
		off->coef[v] += scale * c;
	}
	return true;
}

/* The offset of the tensor element "map" (one affine piece) sends each
 * point of the op's domain to. */
static bool offset_of(const sched_graph *graph, const sched_op *op, int tensor,
		      isl_map *map, offset *off)
{
	const sched_tensor *t = &graph->tensors[tensor];
	isl_pw_multi_aff *pma = isl_pw_multi_aff_from_map(map);
	isl_multi_aff *ma;
	int64_t stride = 1;
	bool ok;

	if (!pma || isl_pw_multi_aff_isa_multi_aff(pma) != isl_bool_true) {
		isl_pw_multi_aff_free(pma);
		return false;
	}
	ma = isl_pw_multi_aff_as_multi_aff(pma);
	ok = ma != NULL;
	for (int d = t->rank - 1; ok && d >= 0; stride *= t->shape[d--]) {
		isl_aff *aff = isl_multi_aff_get_at(ma, d);

		ok = aff && add_aff(op, aff, stride, off);
		isl_aff_free(aff);
	}
	isl_multi_aff_free(ma);
	return ok;
}

/* One kind of var merged into one: its extent and strides in A, B, C. */
typedef struct merged {
	int64_t extent, stride[3];
} merged;

/* Merges the vars of "op" whose movement is "kind" (outermost first) into
 * "out"; false when their strides do not chain. No var: extent 1. */
static bool merge_kind(const sched_op *op, const int *moves, const offset *offs,
		       int kind, merged *out)
{
	*out = (merged){.extent = 1};
	for (int v = op->nvars - 1; v >= 0; v--) {
		int64_t extent = op->vars[v].hi - op->vars[v].lo;

		if (moves[v] != kind)
			continue;
		for (int x = 0; x < 3; x++) {
			if (out->extent > 1 && offs[x].coef[v] != out->stride[x] * out->extent)
				return false;
			if (out->extent == 1)
				out->stride[x] = offs[x].coef[v];
		}
		out->extent *= extent;
	}
	return true;
}

/* Which of A, B, C each var moves. */
static void var_moves(const sched_op *op, const offset *offs, int *moves)
{
	for (int v = 0; v < op->nvars; v++) {
		moves[v] = 0;
		for (int x = 0; x < 3; x++)
			moves[v] |= offs[x].coef[v] ? 1 << x : 0;
	}
}

/* Whether every var is of a kind: m, n (output vars), k (reduction), and
 * with "batched" the batch (output vars that move all three). A var of
 * extent 1 moves nothing that matters and is taken as it comes. */
static bool kinds_are_valid(const sched_op *op, const int *moves, bool batched)
{
	for (int v = 0; v < op->nvars; v++) {
		bool reduces = v >= op->ntarget_vars;
		int m = moves[v];

		if (op->vars[v].hi - op->vars[v].lo == 1)
			continue;
		if (reduces ? m != (MOVES_A | MOVES_B)
			    : m != (MOVES_A | MOVES_C) && m != (MOVES_B | MOVES_C) &&
			      (!batched || m != MOVES_ALL))
			return false;
	}
	return true;
}

/* The offsets of the op's factors that are accesses (all of "factors"
 * but a NULL) and of its target, over its domain. */
static bool offsets_of(const sched_graph *graph, const sched_op *op,
		       const sched_node *const *factors, offset *offs)
{
	isl_ctx *ctx = sched_isl_ctx_new();
	bool ok = ctx != NULL;

	for (int x = 0; x < 2 && ok; x++)
		ok = !factors[x] || offset_of(graph, op, factors[x]->tensor,
					      sched_access_map(ctx, graph, op, factors[x]),
					      &offs[x]);
	ok = ok && offset_of(graph, op, op->target,
			     sched_op_write(ctx, graph, op->index), &offs[2]);
	isl_ctx_free(ctx);
	return ok;
}

/* The vars' lower bounds folded into the constants. */
static void fold_lower_bounds(const sched_op *op, offset *offs)
{
	for (int x = 0; x < 3; x++)
		for (int v = 0; v < op->nvars; v++)
			offs[x].constant += offs[x].coef[v] * op->vars[v].lo;
}

/* C = A B as C^T = B^T A^T: the factors trade places, m and n too, so
 * that n is the dim along which C is contiguous. */
static void transpose(sched_contraction *c)
{
	*c = (sched_contraction){
		.a = c->b, .b = c->a, .m = c->n, .n = c->m, .k = c->k,
		.a_m = c->b_n, .a_k = c->b_k, .b_k = c->a_k, .b_n = c->a_m,
		.c_m = c->c_n, .c_n = c->c_m, .a0 = c->b0, .b0 = c->a0, .c0 = c->c0,
		.batch = c->batch, .a_batch = c->b_batch, .b_batch = c->a_batch,
		.c_batch = c->c_batch,
	};
}

/* sum(..) X * Y */
static bool is_product(const sched_op *op)
{
	return op->reducer == SCHED_RED_SUM && op->body->kind == SCHED_NODE_BINARY &&
	       op->body->op == SCHED_MUL;
}

/* A contraction, batched or not as "batched" allows. */
static bool contraction_of(const sched_graph *graph, int index, bool batched,
			   sched_contraction *out)
{
	const sched_op *op = &graph->ops[index];
	const sched_node *body = op->body;
	offset offs[3];
	int moves[2 * SCHED_MAX_RANK];
	merged m, n, k, b;

	memset(offs, 0, sizeof(offs));
	if (!is_product(op) || body->args[0]->kind != SCHED_NODE_ACCESS ||
	    body->args[1]->kind != SCHED_NODE_ACCESS ||
	    !offsets_of(graph, op, (const sched_node *const *)body->args, offs))
		return false;
	fold_lower_bounds(op, offs);
	var_moves(op, offs, moves);
	if (!kinds_are_valid(op, moves, batched) ||
	    !merge_kind(op, moves, offs, MOVES_A | MOVES_C, &m) ||
	    !merge_kind(op, moves, offs, MOVES_B | MOVES_C, &n) ||
	    !merge_kind(op, moves, offs, MOVES_A | MOVES_B, &k) ||
	    !merge_kind(op, moves, offs, MOVES_ALL, &b))
		return false;
	*out = (sched_contraction){
		.a = body->args[0]->tensor, .b = body->args[1]->tensor,
		.m = m.extent, .n = n.extent, .k = k.extent,
		.a_m = m.stride[0], .a_k = k.stride[0], .b_k = k.stride[1],
		.b_n = n.stride[1], .c_m = m.stride[2], .c_n = n.stride[2],
		.a0 = offs[0].constant, .b0 = offs[1].constant, .c0 = offs[2].constant,
		.batch = b.extent, .a_batch = b.stride[0], .b_batch = b.stride[1],
		.c_batch = b.stride[2],
	};
	if (out->c_n != 1 && out->c_m == 1)
		transpose(out);
	return true;
}

bool sched_op_contraction(const sched_graph *graph, int index, sched_contraction *out)
{
	return contraction_of(graph, index, false, out);
}

bool sched_op_batched_contraction(const sched_graph *graph, int index,
				  sched_contraction *out)
{
	return contraction_of(graph, index, true, out);
}

/* The kinds of a gathered contraction's vars, as the moves of a plain
 * one: m moves A and C, not B; n moves C, not A (B may use it); k (the
 * reductions) moves A. Those of extent 1 are taken as they come. */
static bool gathered_kinds(const sched_op *op, const offset *offs,
			   const sched_node *b, int *moves)
{
	for (int v = 0; v < op->nvars; v++) {
		bool in_a = offs[0].coef[v] != 0, in_c = offs[2].coef[v] != 0;

		moves[v] = 0;
		if (op->vars[v].hi - op->vars[v].lo == 1)
			continue;
		if (v >= op->ntarget_vars)
			moves[v] = in_a && !in_c ? MOVES_A | MOVES_B : 0; /* k */
		else if (in_c && !in_a)
			moves[v] = MOVES_B | MOVES_C; /* n */
		else if (in_c && !sched_node_mentions(b, v))
			moves[v] = MOVES_A | MOVES_C; /* m */
		if (!moves[v])
			return false;
	}
	return true;
}

static void first_read(const sched_node *access, void *user)
{
	int *tensor = user;

	if (*tensor < 0)
		*tensor = access->tensor;
}

/* Gathered with factor "fb" as B, the other factor an access. */
static bool gathered_with(const sched_graph *graph, const sched_op *op, int fb,
			  sched_contraction *out)
{
	const sched_node *a = op->body->args[1 - fb], *b = op->body->args[fb];
	const sched_node *factors[2] = {a, NULL};
	offset offs[3];
	int moves[2 * SCHED_MAX_RANK], b_tensor = -1;
	merged m, n, k;

	memset(offs, 0, sizeof(offs));
	sched_node_each_access(b, first_read, &b_tensor);
	if (a->kind != SCHED_NODE_ACCESS || b_tensor < 0 ||
	    !offsets_of(graph, op, factors, offs))
		return false;
	fold_lower_bounds(op, offs);
	if (!gathered_kinds(op, offs, b, moves) ||
	    !merge_kind(op, moves, offs, MOVES_A | MOVES_C, &m) ||
	    !merge_kind(op, moves, offs, MOVES_B | MOVES_C, &n) ||
	    !merge_kind(op, moves, offs, MOVES_A | MOVES_B, &k))
		return false;
	*out = (sched_contraction){
		.a = a->tensor, .b = b_tensor, .m = m.extent, .n = n.extent, .k = k.extent,
		.a_m = m.stride[0], .a_k = k.stride[0], .c_m = m.stride[2],
		.c_n = n.stride[2], .a0 = offs[0].constant, .c0 = offs[2].constant,
		.gathered = true, .factor_b = fb,
	};
	return true;
}

bool sched_op_gathered_contraction(const sched_graph *graph, int index,
				   sched_contraction *out)
{
	const sched_op *op = &graph->ops[index];

	if (sched_op_contraction(graph, index, out))
		return true;
	return is_product(op) && (gathered_with(graph, op, 0, out) ||
				  gathered_with(graph, op, 1, out));
}
