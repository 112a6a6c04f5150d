/*
 * grad_split.c: the forward graph rewritten so that every max and min
 * reduction can pass its adjoint through the argmax mask (docs/design/autodiff.md).
 *
 * The mask is "body == result", which holds only where the result holds
 * the body exactly. An op m[i] = max(r in lo:hi) body whose body is not one
 * read of a tensor of a dtype m holds is split in three:
 *
 *   m__body[i, r] = body, with r + lo for r   (f32: every point of the body)
 *   m__max[i] = max(r in 0:hi-lo) m__body[i, r] (f32, exact)
 *   m[i] = m__max[i]                           (m's dtype, as before)
 *
 * The op keeps its index in "ops" (it becomes the copy) and the two new ops
 * go last, so that errors about the other ops name the same index.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad.h"

bool grad_extremum_exact(const sched_graph *graph, const sched_op *op)
{
	enum sched_dtype target = graph->tensors[op->target].dtype, body;

	if (op->reducer != SCHED_RED_MAX && op->reducer != SCHED_RED_MIN)
		return true;
	if (op->body->kind != SCHED_NODE_ACCESS)
		return false;
	body = graph->tensors[op->body->tensor].dtype;
	return body == target || (target == SCHED_F32 && body != SCHED_I32);
}

static json_t *declaration(const int64_t *shape, int rank, enum sched_dtype dtype,
			   enum sched_role role)
{
	static const char *const roles[] = {[SCHED_INPUT] = "input",
					     [SCHED_OUTPUT] = "output"};
	json_t *dims = json_array(), *decl;

	for (int d = 0; d < rank; d++)
		json_array_append_new(dims, json_integer(shape[d]));
	decl = json_pack("{s:o, s:s}", "shape", dims, "dtype", sched_dtype_name(dtype));
	if (decl && role != SCHED_INTERMEDIATE)
		json_object_set_new(decl, "role", json_string(roles[role]));
	return decl;
}

/* "<target>__<what>", refused when the graph has a tensor of that name. */
static int new_name(const sched_graph *graph, const sched_op *op,
		    const char *what, char *name, size_t size, sched_error *err)
{
	snprintf(name, size, "%s__%s", graph->tensors[op->target].name, what);
	if (sched_tensor_find(graph, name) >= 0)
		return sched_fail(err, SCHED_EGRAPH, op->index, 1,
				  "cannot differentiate the %s reduction into '%s': "
				  "it is split into '%s', a name the graph uses; "
				  "rename that tensor",
				  sched_reducer_name(op->reducer),
				  graph->tensors[op->target].name, name);
	return SCHED_OK;
}

/* The three ops' texts: the body over every var (each reduction var
 * shifted to start at 0), its extremum, the copy. */
static void split_texts(const sched_graph *graph, const sched_op *op,
			const char *body_name, const char *max_name,
			sched_buf text[3])
{
	const char *tensor_names[graph->ntensors], *vars[2 * SCHED_MAX_RANK];
	sched_names names = {tensor_names, vars, NULL};
	sched_buf tvars = {0}, all = {0}, ranges = {0};
	sched_arena arena = {0};

	for (int t = 0; t < graph->ntensors; t++)
		tensor_names[t] = graph->tensors[t].name;
	sched_buf_printf(&tvars, "%s", "");
	sched_buf_printf(&ranges, "%s", "");
	for (int v = 0; v < op->nvars; v++) {
		const sched_var *var = &op->vars[v];
		char shifted[96];

		snprintf(shifted, sizeof(shifted), "(%s + %lld)", var->name,
			 (long long)var->lo);
		vars[v] = var->reduction && var->lo
			? sched_arena_strndup(&arena, shifted, strlen(shifted)) : var->name;
		sched_buf_printf(&all, "%s%s", v ? ", " : "", var->name);
		if (!var->reduction)
			sched_buf_printf(&tvars, "%s%s", v ? ", " : "", var->name);
		else
			sched_buf_printf(&ranges, "%s%s in 0:%lld",
					 v > op->ntarget_vars ? ", " : "", var->name,
					 (long long)(var->hi - var->lo));
	}
	sched_buf_printf(&text[0], "%s[%s] = ", body_name, all.str);
	sched_node_print(&text[0], op->body, &names);
	sched_buf_printf(&text[1], "%s[%s] = %s(%s) %s[%s]", max_name, tvars.str,
			 sched_reducer_name(op->reducer), ranges.str, body_name,
			 all.str);
	sched_buf_printf(&text[2], "%s[%s] = %s[%s]",
			 graph->tensors[op->target].name, tvars.str, max_name,
			 tvars.str);
	sched_buf_release(&tvars);
	sched_buf_release(&all);
	sched_buf_release(&ranges);
	sched_arena_release(&arena);
}

/* Op "op" as its three ops in "ops" (the copy at "at", the others
 * appended) and its two tensors in "tensors". */
static int split_op(const sched_graph *graph, const sched_op *op, json_t *tensors,
		    json_t *ops, size_t at, sched_error *err)
{
	const sched_tensor *m = &graph->tensors[op->target];
	char body_name[160], max_name[160];
	int64_t shape[2 * SCHED_MAX_RANK];
	sched_buf text[3] = {{0}};
	int rc;

	if ((rc = new_name(graph, op, "body", body_name, sizeof(body_name), err)) ||
	    (rc = new_name(graph, op, "max", max_name, sizeof(max_name), err)))
		return rc;
	for (int v = 0; v < op->nvars; v++)
		shape[v] = op->vars[v].reduction ? op->vars[v].hi - op->vars[v].lo
						 : m->shape[v];
	split_texts(graph, op, body_name, max_name, text);
	rc = text[0].str && text[1].str && text[2].str &&
	     !json_object_set_new(tensors, body_name,
				  declaration(shape, op->nvars, SCHED_F32,
					      SCHED_INTERMEDIATE)) &&
	     !json_object_set_new(tensors, max_name,
				  declaration(m->shape, m->rank, SCHED_F32,
					      SCHED_INTERMEDIATE)) &&
	     !json_array_set_new(ops, at, json_string(text[2].str)) &&
	     !json_array_append_new(ops, json_string(text[0].str)) &&
	     !json_array_append_new(ops, json_string(text[1].str))
	     ? SCHED_OK : sched_fail(err, SCHED_ENOMEM, -1, 0, "out of memory");
	for (int i = 0; i < 3; i++)
		sched_buf_release(&text[i]);
	return rc;
}

/* The graph as graph.json: tensors and ops as it reads them. */
static json_t *graph_json(const sched_graph *graph)
{
	json_t *tensors = json_object(), *ops = json_array(), *root;

	for (int t = 0; t < graph->ntensors; t++) {
		const sched_tensor *tensor = &graph->tensors[t];

		json_object_set_new(tensors, tensor->name,
				    declaration(tensor->shape, tensor->rank,
						tensor->dtype, tensor->role));
	}
	for (int o = 0; o < graph->nops; o++)
		json_array_append_new(ops, json_string(graph->ops[o].text));
	root = json_pack("{s:i, s:o, s:o}", "version", 1, "tensors", tensors,
			 "ops", ops);
	if (root && graph->name)
		json_object_set_new(root, "name", json_string(graph->name));
	if (root && graph->allow_tf32)
		json_object_set_new(root, "options", json_pack("{s:b}", "allow_tf32", 1));
	return root;
}

int grad_split_extrema(const sched_graph *graph, const bool *needs,
		       char **text, sched_error *err)
{
	json_t *root = NULL;
	int rc = SCHED_OK;

	*text = NULL;
	for (int o = 0; o < graph->nops && rc == SCHED_OK; o++) {
		const sched_op *op = &graph->ops[o];

		if (!needs[op->target] || grad_extremum_exact(graph, op))
			continue;
		if (!root && !(root = graph_json(graph)))
			return sched_fail(err, SCHED_ENOMEM, -1, 0, "out of memory");
		rc = split_op(graph, op, json_object_get(root, "tensors"),
			      json_object_get(root, "ops"), o, err);
	}
	if (root && rc == SCHED_OK && !(*text = json_dumps(root, 0)))
		rc = sched_fail(err, SCHED_ENOMEM, -1, 0, "out of memory");
	json_decref(root);
	return rc;
}
