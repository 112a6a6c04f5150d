/*
 * explain.c: what tunectl explain shows of a graph, as JSON.
 */
#include <stdlib.h>

#include <isl/ctx.h>
#include <isl/map.h>
#include <isl/set.h>
#include <isl/val.h>

#include "sched_int.h"

static bool reads_values(const sched_node *node)
{
	if (node->kind == SCHED_NODE_ACCESS || node->kind == SCHED_NODE_CALL)
		return true;
	for (int i = 0; i < node->nargs; i++)
		if (reads_values(node->args[i]))
			return true;
	return false;
}

/* Arithmetic per domain point: every operator and call on values; index
 * arithmetic and conditions on variables alone are free, and so is the
 * choice a select makes. */
static int64_t node_flops(const sched_node *node)
{
	int64_t n = 0;

	if (!reads_values(node))
		return 0;
	if (node->kind == SCHED_NODE_BINARY || node->kind == SCHED_NODE_UNARY ||
	    (node->kind == SCHED_NODE_CALL && node->op != SCHED_SELECT))
		n = 1;
	for (int i = 0; i < node->nargs; i++)
		n += node_flops(node->args[i]);
	return n;
}

static int64_t domain_points(const sched_op *op)
{
	int64_t points = 1;

	for (int v = 0; v < op->nvars; v++)
		points *= op->vars[v].hi - op->vars[v].lo;
	return points;
}

int64_t sched_op_reduction_points(const sched_op *op)
{
	int64_t points = 1;

	for (int v = op->ntarget_vars; v < op->nvars; v++)
		points *= op->vars[v].hi - op->vars[v].lo;
	return points;
}

int64_t sched_op_flops(const sched_op *op)
{
	int64_t per_point = node_flops(op->body) + (op->reducer != SCHED_RED_NONE);

	return domain_points(op) * per_point;
}

static json_t *string_or_null(char *text)
{
	json_t *value = text ? json_string(text) : json_null();

	free(text);
	return value;
}

/* The map (taken) as isl prints it, simplified. */
static json_t *map_text(isl_map *map)
{
	json_t *value = string_or_null(isl_map_to_str(map));

	isl_map_free(map);
	return value;
}

static json_t *set_text(isl_set *set)
{
	json_t *value = string_or_null(isl_set_to_str(set));

	isl_set_free(set);
	return value;
}

typedef struct read_list {
	isl_ctx *ctx;
	const sched_graph *graph;
	const sched_op *op;
	json_t *reads;
	bool *seen;
} read_list;

static void add_read(const sched_node *access, void *user)
{
	read_list *r = user;
	const sched_tensor *t = &r->graph->tensors[access->tensor];

	json_array_append_new(r->reads, json_pack("{s:s, s:o}",
		"tensor", t->name,
		"map", map_text(sched_access_map(r->ctx, r->graph, r->op, access))));
	r->seen[access->tensor] = true;
}

/* Bytes of every distinct tensor the op reads and of its target. */
static int64_t op_bytes(const sched_graph *graph, const sched_op *op,
			const bool *seen)
{
	int64_t bytes = (int64_t)sched_tensor_bytes(graph, op->target);

	for (int t = 0; t < graph->ntensors; t++)
		if (seen[t])
			bytes += (int64_t)sched_tensor_bytes(graph, t);
	return bytes;
}

static json_t *explain_reduction(const sched_op *op)
{
	json_t *ranges = json_array();

	for (int v = op->ntarget_vars; v < op->nvars; v++)
		json_array_append_new(ranges, json_pack("{s:s, s:I, s:I, s:b}",
			"var", op->vars[v].name, "lo", (json_int_t)op->vars[v].lo,
			"hi", (json_int_t)op->vars[v].hi,
			"inferred", op->vars[v].inferred));
	return json_pack("{s:s, s:o}", "reducer",
			 op->reducer ? sched_reducer_name(op->reducer) : "none",
			 "ranges", ranges);
}

static json_t *explain_op(isl_ctx *ctx, const sched_graph *graph,
			  const sched_op *op)
{
	bool *seen = calloc(graph->ntensors, sizeof(bool));
	read_list r = {ctx, graph, op, json_array(), seen};
	json_t *obj;

	if (!seen)
		return NULL;
	sched_node_each_access(op->body, add_read, &r);
	obj = json_pack("{s:i, s:s, s:o, s:o, s:o, s:o, s:I, s:I}",
			"index", op->index, "text", op->text,
			"domain", set_text(sched_op_domain(ctx, graph, op->index)),
			"write", map_text(sched_op_write(ctx, graph, op->index)),
			"reads", r.reads, "reduction", explain_reduction(op),
			"flops", (json_int_t)sched_op_flops(op),
			"bytes", (json_int_t)op_bytes(graph, op, seen));
	free(seen);
	return obj;
}

static json_t *explain_tensor(const sched_tensor *t)
{
	static const char *const roles[] = {"intermediate", "input", "output"};
	json_t *shape = json_array();

	for (int d = 0; d < t->rank; d++)
		json_array_append_new(shape, json_integer(t->shape[d]));
	return json_pack("{s:s, s:o, s:s, s:s}", "name", t->name, "shape", shape,
			 "dtype", sched_dtype_name(t->dtype), "role", roles[t->role]);
}

json_t *sched_graph_explain(const sched_graph *graph)
{
	json_t *ops = json_array(), *tensors = json_array();
	json_int_t flops = 0, bytes = 0;
	isl_ctx *ctx = sched_isl_ctx_new();

	for (int t = 0; t < graph->ntensors; t++)
		json_array_append_new(tensors, explain_tensor(&graph->tensors[t]));
	for (int n = 0; n < graph->nops; n++) {
		json_t *op = explain_op(ctx, graph, &graph->ops[graph->order[n]]);

		flops += json_integer_value(json_object_get(op, "flops"));
		bytes += json_integer_value(json_object_get(op, "bytes"));
		json_array_append_new(ops, op);
	}
	isl_ctx_free(ctx);
	return json_pack("{s:s, s:s, s:b, s:o, s:o, s:I, s:I}",
			 "name", graph->name, "key", graph->key,
			 "allow_tf32", graph->allow_tf32, "tensors", tensors,
			 "ops", ops, "flops", flops, "bytes", bytes);
}
