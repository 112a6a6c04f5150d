/*
 * grad.c: the backward graph of a graph (docs/autodiff.md).
 *
 * Ops are visited in reverse dependence order. When an op is reached its
 * target's adjoint is final: the sum of what the target's readers gave it
 * (and d_<target>, the gradient flowing in, for an output). Each group of
 * reads of one tensor at one index in the op's body then gives that
 * tensor a contribution: the op's seed (the adjoint, through the reducer)
 * times the body's derivative with respect to those reads, summed over
 * the op's points that read each element. Which points those are comes
 * from inverting the read's index (grad_index.c): variables solved for in
 * terms of the element's index, the others summed over, a select keeping
 * the solved ones in range. The result is printed as graph.json and
 * read back, so everything it says is checked as any graph is (bounds
 * with isl included).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad.h"

/* A call computed once as an intermediate: its text, the index
 * variables it is written with, the tensor whose shape it has. */
typedef struct shared_call {
	const char *call, *vars, *name;
	int like;
	struct shared_call *next;
} shared_call;

/* One contribution to a tensor's adjoint, waiting for the adjoint's name:
 * the target's variables and the op's text after "=". */
typedef struct contribution {
	const char *vars;
	const char *body;
	bool shareable; /* neither guard nor reduction: may read shared calls */
	struct contribution *next;
} contribution;

typedef struct grad_build {
	grad_ctx ctx;
	const sched_graph *graph;
	sched_error *err;
	const char **tensor_names;
	bool *wrt;
	bool *needs;             /* depends on a tensor of wrt */
	contribution **pending;  /* per tensor, newest first */
	int *npending;
	int *nshared;            /* per tensor, subexpressions it shares */
	struct shared_call *shared;
	json_t *tensors;         /* the backward graph's own tensors */
	json_t *ops;
	enum sched_grad_save save;
	bool *saved; /* a forward result the backward graph reads */
} grad_build;

/* "name" as a new tensor of the backward graph, shaped as forward tensor
 * "like"; refused when the forward graph or an earlier one uses it. */
static int declare(grad_build *b, const char *name, int like,
		   enum sched_dtype dtype, const char *role)
{
	const sched_tensor *t = &b->graph->tensors[like];
	json_t *decl, *shape;

	if (sched_tensor_find(b->graph, name) >= 0 || json_object_get(b->tensors, name))
		return sched_fail(b->err, SCHED_EGRAPH, -1, 0,
				  "the backward graph needs the name '%s' for the "
				  "gradient of '%s', but the graph has a tensor of "
				  "that name; rename it", name, t->name);
	shape = json_array();
	for (int d = 0; d < t->rank; d++)
		json_array_append_new(shape, json_integer(t->shape[d]));
	decl = json_pack("{s:o, s:s}", "shape", shape, "dtype", sched_dtype_name(dtype));
	if (decl && role)
		json_object_set_new(decl, "role", json_string(role));
	if (!decl || json_object_set_new(b->tensors, name, decl))
		return sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	return SCHED_OK;
}

/* "base", or base_1, base_2, ... if the graph or the backward graph has
 * it: the names of intermediates of the backward graph, which no one
 * outside it needs (a backward graph's own d_<t> when it is
 * differentiated again). */
static const char *fresh_name(grad_build *b, const char *base)
{
	const char *name = base;

	for (int n = 1; sched_tensor_find(b->graph, name) >= 0 ||
			json_object_get(b->tensors, name); n++)
		name = grad_printf(&b->ctx, "%s_%d", base, n);
	return name;
}

/* A new f32 intermediate named after "base" (fresh_name), shaped as
 * tensor "like"; its name. */
static const char *declare_intermediate(grad_build *b, const char *base,
					int like, int *rc)
{
	const char *name = fresh_name(b, base);

	*rc = declare(b, name, like, SCHED_F32, NULL);
	return name;
}

static int emit(grad_build *b, const char *name, const char *vars,
		const char *body)
{
	const char *text = grad_printf(&b->ctx, "%s[%s] = %s", name, vars, body);

	if (b->ctx.nomem || json_array_append_new(b->ops, json_string(text)))
		return sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	return SCHED_OK;
}

/* The sum of d_<t> (when "with_input") and the contributions "parts" as
 * the op writing "name". */
static int emit_sum(grad_build *b, int t, const char *name, bool with_input,
		    const char *const *parts, int count)
{
	const sched_tensor *tensor = &b->graph->tensors[t];
	const char *vars = grad_index_vars(&b->ctx, "i", tensor->rank);
	sched_buf buf = {0};
	int rc = SCHED_OK;

	sched_buf_printf(&buf, "%s", "");
	if (with_input)
		sched_buf_printf(&buf, "d_%s[%s]", tensor->name, vars);
	for (int k = 0; k < count; k++)
		sched_buf_printf(&buf, "%s%s[%s]", with_input || k ? " + " : "",
				 parts[k], vars);
	if (!buf.str)
		rc = sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	else
		rc = emit(b, name, vars, buf.str);
	sched_buf_release(&buf);
	return rc;
}

static bool same_shape(const sched_graph *graph, int a, int b)
{
	const sched_tensor *x = &graph->tensors[a], *y = &graph->tensors[b];

	return x->rank == y->rank &&
	       !memcmp(x->shape, y->shape, x->rank * sizeof(*x->shape));
}

/* "e" with the calls already shared (the same text over the same index
 * variables and shape) read from their intermediates. */
static void reuse_shared(grad_build *b, int t, const char *vars,
			 const char **text)
{
	for (shared_call *s = b->shared; s; s = s->next)
		if (!strcmp(s->vars, vars) && same_shape(b->graph, s->like, t))
			*text = grad_replace_call(&b->ctx, *text, s->call,
						  grad_printf(&b->ctx, "%s[%s]",
							      s->name, vars));
}

/* "e" with each call it computes more than once computed once, as an
 * intermediate d_<t>__s<k> shaped as tensor t (the planner then keeps it
 * or recomputes it inline, as for any intermediate), and reused by later
 * contributions; only for a contribution with neither guard nor
 * reduction, where every point of the intermediate is one the
 * contribution evaluates. */
static int share_calls(grad_build *b, int t, const char *vars, grad_ex *e)
{
	const char *call;
	shared_call *s;
	int rc = SCHED_OK;

	reuse_shared(b, t, vars, &e->text);
	while (rc == SCHED_OK && (call = grad_repeated_call(&b->ctx, e->text))) {
		if (!(s = sched_arena_alloc(&b->ctx.arena, sizeof(*s))))
			return sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
		*s = (shared_call){call, vars, NULL, t, b->shared};
		s->name = declare_intermediate(b, grad_printf(&b->ctx, "d_%s__s%d",
						b->graph->tensors[t].name,
						b->nshared[t]++), t, &rc);
		b->shared = s;
		if (rc == SCHED_OK)
			rc = emit(b, s->name, vars, call);
		reuse_shared(b, t, vars, &e->text);
	}
	return rc;
}

/* Writes the contributions waiting for "t" as ops: into "name", or with
 * "parts" each into its own tensor d_<t>__<k>, named in parts[k]. */
static int emit_contributions(grad_build *b, int t, const char *name,
			      const char **parts)
{
	const sched_tensor *tensor = &b->graph->tensors[t];
	int k = b->npending[t], rc = SCHED_OK;

	for (contribution *c = b->pending[t]; c && rc == SCHED_OK; c = c->next) {
		const char *part = name;

		if (parts) {
			--k;
			part = parts[k] = declare_intermediate(b,
					grad_printf(&b->ctx, "d_%s__%d", tensor->name, k),
					t, &rc);
		}
		if (c->shareable)
			reuse_shared(b, t, c->vars, &c->body);
		if (rc == SCHED_OK)
			rc = emit(b, part, c->vars, c->body);
	}
	return rc;
}

/* The adjoint that contribution "c" copies element for element (all of
 * it: the shapes agree, or the read would have needed a guard), or NULL:
 * an adjoint that is such a copy is that adjoint, with no op of its own. */
static const char *copied_adjoint(grad_build *b, const contribution *c)
{
	const char *open = strchr(c->body, '[');
	size_t n = open ? (size_t)(open - c->body) : 0;

	if (!n || strcmp(open + 1, grad_printf(&b->ctx, "%s]", c->vars)) ||
	    strcspn(c->body, " (") < n)
		return NULL;
	return grad_printf(&b->ctx, "%.*s", (int)n, c->body);
}

/* Makes the adjoint of "t" final and names it in *name: NULL when it is
 * zero (nothing reads "t" that leads to an output, and it is not wanted).
 * The adjoint of a tensor of wrt is the output d_<t>; of an output the
 * input d_<t>, plus what its readers give it (d_<t>__all); of an
 * intermediate d_<t>, an f32 intermediate. */
static int finalize_adjoint(grad_build *b, int t, const char **name)
{
	const sched_tensor *tensor = &b->graph->tensors[t];
	bool with_input = tensor->role == SCHED_OUTPUT;
	int count = b->npending[t], rc;
	bool sum = with_input || count > 1;
	const char **parts;

	*name = NULL;
	if (!count && !with_input && !b->wrt[t])
		return SCHED_OK;
	if (!count && with_input) {
		*name = grad_printf(&b->ctx, "d_%s", tensor->name);
		return SCHED_OK;
	}
	if (count == 1 && !with_input && !b->wrt[t] &&
	    (*name = copied_adjoint(b, b->pending[t])))
		return SCHED_OK;
	*name = grad_printf(&b->ctx, with_input ? "d_%s__all" : "d_%s", tensor->name);
	if (b->wrt[t])
		rc = declare(b, *name, t, tensor->dtype, "output");
	else
		*name = declare_intermediate(b, *name, t, &rc);
	if (rc != SCHED_OK)
		return rc;
	if (!count)
		return emit(b, *name, grad_index_vars(&b->ctx, "i", tensor->rank), "0");
	if (!(parts = sum ? sched_arena_alloc(&b->ctx.arena, count * sizeof(*parts))
			  : NULL) && sum)
		return sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	rc = emit_contributions(b, t, *name, parts);
	if (rc == SCHED_OK && sum)
		rc = emit_sum(b, t, *name, with_input, parts, count);
	return rc;
}

/* The adjoint at the op's target element, through the reducer: the
 * adjoint for sum (and none); for max and min only where the body is the
 * result; for prod the result over the body. */
static grad_ex seed(grad_build *b, const sched_op *op, const char *adjoint)
{
	grad_ctx *g = &b->ctx;
	sched_buf buf = {0};
	grad_ex adj, result, body;

	sched_buf_printf(&buf, "%s", "");
	for (int v = 0; v < op->ntarget_vars; v++)
		sched_buf_printf(&buf, "%s%s", v ? ", " : "", g->names.vars[v]);
	if (!buf.str) {
		g->nomem = true;
		return grad_num(g, 0);
	}
	adj = grad_text(g, grad_printf(&b->ctx, "%s[%s]", adjoint, buf.str));
	result = grad_text(g, grad_printf(&b->ctx, "%s[%s]", b->tensor_names[op->target],
					   buf.str));
	sched_buf_release(&buf);
	body = grad_forward(g, op->body);
	g->whole_call = op->body->kind == SCHED_NODE_CALL &&
			op->reducer == SCHED_RED_NONE ? op->body : NULL;
	g->result = result;
	switch (op->reducer) {
	case SCHED_RED_MAX:
	case SCHED_RED_MIN:
		return grad_select(g, grad_text(g, grad_printf(&b->ctx, "%s == %s",
				   body.text, result.text)), adj, grad_num(g, 0));
	case SCHED_RED_PROD:
		return grad_div(g, grad_mul(g, adj, result), body);
	default:
		return adj;
	}
}

/* The reduction over the forward variables not solved for, as the
 * beginning of the contribution's body ("" when there are none). */
static const char *reduction(grad_build *b, const sched_op *op,
			     const grad_inverse *inv)
{
	sched_buf buf = {0};
	const char *text;
	bool any = false;

	sched_buf_printf(&buf, "%s", "");
	for (int v = 0; v < op->nvars; v++) {
		if (inv->solved[v])
			continue;
		sched_buf_printf(&buf, "%s%s in %lld:%lld", any ? ", " : "sum(",
				 op->vars[v].name, (long long)op->vars[v].lo,
				 (long long)op->vars[v].hi);
		any = true;
	}
	for (int e = 0; e < inv->nextra; e++) {
		sched_buf_printf(&buf, "%s%s in %lld:%lld", any ? ", " : "sum(",
				 inv->extra[e], (long long)inv->extra_lo[e],
				 (long long)inv->extra_hi[e]);
		any = true;
	}
	sched_buf_printf(&buf, any ? ") " : "");
	text = buf.str ? grad_printf(&b->ctx, "%s", buf.str) : "";
	b->ctx.nomem |= !buf.str;
	sched_buf_release(&buf);
	return text;
}

/* The contribution of the reads marked in ctx.match (all of "access"'s
 * tensor at its index) to that tensor's adjoint. */
static int contribute(grad_build *b, const sched_op *op, const char *adjoint,
		      const sched_node *access)
{
	grad_ctx *g = &b->ctx;
	contribution *c;
	grad_ex e, s;
	grad_inverse inv;
	bool shareable;
	int rc;

	if ((rc = grad_invert(g, b->graph, op, access, &inv, b->err)) != SCHED_OK)
		return rc;
	g->names.vars = inv.vars;
	g->names.value_vars = inv.value_vars;
	s = seed(b, op, adjoint);
	e = grad_derivative(g, op->body);
	if (e.value == GRAD_ZERO)
		return SCHED_OK;
	e = grad_mul(g, s, e);
	shareable = !inv.guard && !*reduction(b, op, &inv);
	if (shareable &&
	    (rc = share_calls(b, access->tensor, inv.target_vars, &e)) != SCHED_OK)
		return rc;
	if (inv.guard)
		e = grad_select(g, grad_text(g, inv.guard), e, grad_num(g, 0));
	c = sched_arena_alloc(&g->arena, sizeof(*c));
	if (!c || g->nomem)
		return sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	c->vars = inv.target_vars;
	c->shareable = shareable;
	c->body = grad_printf(&b->ctx, "%s%s", reduction(b, op, &inv), e.text);
	c->next = b->pending[access->tensor];
	b->pending[access->tensor] = c;
	b->npending[access->tensor]++;
	return SCHED_OK;
}

typedef struct access_list {
	const sched_node **nodes;
	int n;
} access_list;

static void collect_access(const sched_node *access, void *user)
{
	access_list *list = user;

	list->nodes[list->n++] = access;
}

static bool same_read(const sched_node *a, const sched_node *b,
		      const sched_names *names)
{
	sched_buf ta = {0}, tb = {0};
	bool same;

	sched_node_print(&ta, a, names);
	sched_node_print(&tb, b, names);
	same = ta.str && tb.str && !strcmp(ta.str, tb.str);
	sched_buf_release(&ta);
	sched_buf_release(&tb);
	return same;
}

/* Gives every tensor the op reads that depends on wrt its contribution. */
static int op_adjoint(grad_build *b, const sched_op *op)
{
	const char *adjoint;
	const sched_node *nodes[op->naccesses + 1];
	bool match[op->naccesses + 1], done[op->naccesses + 1];
	access_list list = {nodes, 0};
	sched_names forward = {b->tensor_names, NULL, NULL};
	const char *names[GRAD_MAX_VARS];
	int rc;

	if (!b->needs[op->target])
		return SCHED_OK;
	if ((rc = finalize_adjoint(b, op->target, &adjoint)) != SCHED_OK || !adjoint)
		return rc;
	for (int v = 0; v < op->nvars; v++)
		names[v] = op->vars[v].name;
	forward.vars = names;
	sched_node_each_access(op->body, collect_access, &list);
	memset(done, 0, sizeof(done));
	b->ctx.match = match;
	for (int a = 0; a < list.n && rc == SCHED_OK; a++) {
		if (done[nodes[a]->access_id] || !b->needs[nodes[a]->tensor])
			continue;
		memset(match, 0, sizeof(match));
		for (int o = a; o < list.n; o++)
			if (same_read(nodes[a], nodes[o], &forward))
				match[nodes[o]->access_id] = done[nodes[o]->access_id] = true;
		rc = contribute(b, op, adjoint, nodes[a]);
	}
	return rc;
}

static int mark_wrt(grad_build *b, const char *const *wrt, int nwrt)
{
	for (int i = 0; i < nwrt; i++) {
		int t = sched_tensor_find(b->graph, wrt[i]);

		if (t < 0)
			return sched_fail(b->err, SCHED_EGRAPH, -1, 0,
					  "cannot differentiate with respect to "
					  "'%s': the graph has no such tensor", wrt[i]);
		if (b->graph->tensors[t].role == SCHED_OUTPUT)
			return sched_fail(b->err, SCHED_EGRAPH, -1, 0,
					  "cannot differentiate with respect to "
					  "'%s': it is an output, whose gradient is "
					  "the input d_%s", wrt[i], wrt[i]);
		if (b->graph->tensors[t].dtype == SCHED_I32)
			return sched_fail(b->err, SCHED_EGRAPH, -1, 0,
					  "cannot differentiate with respect to "
					  "'%s': it is i32, and integers have no "
					  "gradient", wrt[i]);
		b->wrt[t] = true;
	}
	if (nwrt < 1)
		return sched_fail(b->err, SCHED_EGRAPH, -1, 0,
				  "name at least one tensor to differentiate "
				  "with respect to");
	return SCHED_OK;
}

typedef struct needed_read {
	const bool *needs;
	bool found;
} needed_read;

static void find_needed_read(const sched_node *access, void *user)
{
	needed_read *r = user;

	r->found |= r->needs[access->tensor];
}

/* A tensor needs an adjoint when it depends on a tensor of wrt; i32
 * tensors stop gradients (their rounding is piecewise constant). */
static void mark_needs(grad_build *b)
{
	const sched_graph *graph = b->graph;

	for (int t = 0; t < graph->ntensors; t++)
		b->needs[t] = b->wrt[t];
	for (int n = 0; n < graph->nops; n++) {
		const sched_op *op = &graph->ops[graph->order[n]];
		needed_read r = {b->needs, false};

		sched_node_each_access(op->body, find_needed_read, &r);
		b->needs[op->target] |= r.found &&
					graph->tensors[op->target].dtype != SCHED_I32;
	}
}

/* Marks the forward tensors named in the backward ops' text (a name
 * followed by '['). */
static void mark_text_reads(grad_build *b, const char *text, bool *read)
{
	for (const char *p = text; *p;) {
		size_t n = 0;

		while (p[n] == '_' || (p[n] >= 'a' && p[n] <= 'z') ||
		       (p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= '0' && p[n] <= '9'))
			n++;
		if (n && p[n] == '[') {
			char name[72];
			int t;

			snprintf(name, sizeof(name), "%.*s", (int)n, p);
			if ((t = sched_tensor_find(b->graph, name)) >= 0)
				read[t] = true;
		}
		p += n ? n : 1;
	}
}

static void mark_access_read(const sched_node *access, void *user)
{
	((bool *)user)[access->tensor] = true;
}

/* How many elementwise ops recomputing an intermediate may take before
 * --save auto keeps it instead. */
#define GRAD_RECOMPUTE_MAX 4

typedef struct recompute_cost {
	const bool *saved;
	const int *ops;
	bool *seen;
	int sum;
} recompute_cost;

static void add_read_cost(const sched_node *access, void *user)
{
	recompute_cost *c = user;

	if (c->seen[access->tensor])
		return;
	c->seen[access->tensor] = true;
	if (!c->saved[access->tensor])
		c->sum += c->ops[access->tensor];
}

/* Which forward results the backward graph reads saved rather than
 * recomputes, should it read them: none, all, or (auto) the outputs
 * (written anyway), the results of reductions and contractions, and an
 * elementwise result whose recomputation, with the unsaved results it
 * reads, takes more than GRAD_RECOMPUTE_MAX ops; a cheap elementwise
 * one is recomputed, inlined where the backward reads it. */
static int choose_saved(grad_build *b)
{
	const sched_graph *graph = b->graph;
	int *ops = calloc(graph->ntensors, sizeof(int));
	bool *seen = calloc(graph->ntensors, sizeof(bool));

	if (!ops || !seen) {
		free(ops);
		free(seen);
		return sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	}
	for (int n = 0; n < graph->nops; n++) {
		const sched_op *op = &graph->ops[graph->order[n]];
		recompute_cost c = {b->saved, ops, seen, 1};

		memset(seen, 0, graph->ntensors * sizeof(bool));
		sched_node_each_access(op->body, add_read_cost, &c);
		ops[op->target] = c.sum;
		b->saved[op->target] = b->save == SCHED_SAVE_ALL ||
				       (b->save == SCHED_SAVE_AUTO &&
					(graph->tensors[op->target].role ==
						 SCHED_OUTPUT ||
					 op->reducer != SCHED_RED_NONE ||
					 c.sum > GRAD_RECOMPUTE_MAX));
	}
	free(ops);
	free(seen);
	return SCHED_OK;
}

/* The declaration of forward tensor "t" with role "role" (NULL: none). */
static json_t *forward_decl(const sched_tensor *tensor, const char *role)
{
	json_t *decl = json_pack("{s:o, s:s}", "shape", json_array(), "dtype",
				 sched_dtype_name(tensor->dtype));

	for (int d = 0; decl && d < tensor->rank; d++)
		json_array_append_new(json_object_get(decl, "shape"),
				      json_integer(tensor->shape[d]));
	if (decl && role)
		json_object_set_new(decl, "role", json_string(role));
	return decl;
}

/* The forward tensors the backward ops read, and the forward ops that
 * compute those not saved (recomputed in the backward graph; the planner
 * decides what of them is stored), into "out" (tensors object) and
 * b->ops; a saved one is an input of the backward graph, by its name.
 * b->saved is left marking the saved tensors actually read. */
static int add_forward(grad_build *b, json_t *out)
{
	const sched_graph *graph = b->graph;
	bool *read = calloc(graph->ntensors, sizeof(bool));
	size_t nbackward = json_array_size(b->ops);
	int rc = SCHED_OK;

	if (!read)
		return sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	for (size_t i = 0; i < nbackward; i++)
		mark_text_reads(b, json_string_value(json_array_get(b->ops, i)), read);
	for (int n = graph->nops - 1; n >= 0; n--) {
		const sched_op *op = &graph->ops[graph->order[n]];

		if (read[op->target] && !b->saved[op->target])
			sched_node_each_access(op->body, mark_access_read, read);
	}
	for (int n = 0, at = 0; n < graph->nops; n++) {
		const sched_op *op = &graph->ops[graph->order[n]];

		if (read[op->target] && !b->saved[op->target])
			json_array_insert_new(b->ops, at++, json_string(op->text));
	}
	for (int t = 0; t < graph->ntensors; t++) {
		const sched_tensor *tensor = &graph->tensors[t];
		json_t *decl;

		b->saved[t] &= read[t];
		if (!read[t] && tensor->role != SCHED_INPUT)
			continue;
		decl = forward_decl(tensor, tensor->role == SCHED_INPUT || b->saved[t] ?
						    "input" :
						    NULL);
		if (!decl || json_object_set_new(out, tensor->name, decl))
			rc = sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	}
	free(read);
	return rc;
}

/* d_<output> for each output, the gradients flowing in. */
static int declare_incoming(grad_build *b)
{
	int rc = SCHED_OK;

	for (int t = 0; t < b->graph->ntensors && rc == SCHED_OK; t++)
		if (b->graph->tensors[t].role == SCHED_OUTPUT)
			rc = declare(b, grad_printf(&b->ctx, "d_%s", b->graph->tensors[t].name),
				     t, b->graph->tensors[t].dtype, "input");
	return rc;
}

static int walk_backward(grad_build *b)
{
	const sched_graph *graph = b->graph;
	const char *name;
	int rc = declare_incoming(b);

	for (int n = graph->nops - 1; n >= 0 && rc == SCHED_OK; n--)
		rc = op_adjoint(b, &graph->ops[graph->order[n]]);
	for (int t = 0; t < graph->ntensors && rc == SCHED_OK; t++)
		if (b->wrt[t] && graph->tensors[t].role == SCHED_INPUT)
			rc = finalize_adjoint(b, t, &name);
	return rc;
}

/* "text" as a JSON string (caller frees), or NULL. */
static char *quoted(const char *text)
{
	json_t *string = json_string(text);
	char *dumped = string ? json_dumps(string, JSON_ENCODE_ANY) : NULL;

	json_decref(string);
	return dumped;
}

/* The graph as graph.json text laid out as examples/ are: one line per
 * tensor (inputs, intermediates, outputs) and per op. */
static char *format_graph(const char *name, json_t *tensors, json_t *ops,
			  bool allow_tf32)
{
	sched_buf buf = {0};
	const char *key;
	json_t *value;
	size_t i, n = 0;
	char *text = quoted(name);
	bool ok = text;

	sched_buf_printf(&buf, "{\n  \"version\": 1,\n  \"name\": %s,\n",
			 ok ? text : "");
	free(text);
	if (allow_tf32)
		sched_buf_printf(&buf, "  \"options\": {\"allow_tf32\": true},\n");
	sched_buf_printf(&buf, "  \"tensors\": {\n");
	for (int pass = 0; pass < 3; pass++) {
		json_object_foreach(tensors, key, value) {
			const char *role = json_string_value(json_object_get(value, "role"));
			int rank = !role ? 1 : !strcmp(role, "input") ? 0 : 2;
			char *decl;

			if (rank != pass)
				continue;
			decl = json_dumps(value, 0);
			text = quoted(key);
			ok &= decl && text;
			sched_buf_printf(&buf, "    %s: %s%s\n", text ? text : "",
					 decl ? decl : "",
					 ++n < json_object_size(tensors) ? "," : "");
			free(text);
			free(decl);
		}
	}
	sched_buf_printf(&buf, "  },\n  \"ops\": [\n");
	json_array_foreach(ops, i, value) {
		text = json_dumps(value, JSON_ENCODE_ANY);
		ok &= text != NULL;
		sched_buf_printf(&buf, "    %s%s\n", text ? text : "",
				 i + 1 < json_array_size(ops) ? "," : "");
		free(text);
	}
	sched_buf_printf(&buf, "  ]\n}");
	if (!ok)
		sched_buf_release(&buf);
	return ok ? buf.str : NULL;
}

/* Whether reading the backward graph failed on a limit of the format
 * (ops, their length, their nesting) rather than on what it says. */
static bool over_a_limit(const sched_error *err)
{
	return err->code == SCHED_ESCHEMA || (err->code == SCHED_ESYNTAX &&
					      strstr(err->message, "nested more than"));
}

/* The graph read back from "text", to check it: a failure on a limit of
 * graph.json is the user's, any other a bug. */
static int check_written(grad_build *b, const char *text, const char *what)
{
	sched_graph *check = NULL;
	sched_error err = {0};
	int rc = sched_graph_read_string(text, &check, &err);

	sched_graph_free(check);
	if (rc == SCHED_OK)
		return SCHED_OK;
	if (over_a_limit(&err))
		return sched_fail(b->err, SCHED_ELIMIT, -1, 0,
				  "cannot differentiate: the %s graph is over "
				  "a limit of graph.json (%s); write the forward ops "
				  "as more, smaller ops",
				  what, err.message);
	return sched_fail(b->err, SCHED_EINTERNAL, -1, 0,
			  "the %s graph does not validate (a bug in "
			  "tuned's autodiff): %s",
			  what, err.message);
}

/* The forward graph that also outputs the tensors the backward graph
 * reads saved: named <name>_fwd, its ops unchanged. */
static int write_forward(grad_build *b, char **out_json)
{
	const sched_graph *graph = b->graph;
	json_t *tensors = json_object(), *ops = json_array();
	const char *name = grad_printf(&b->ctx, "%s_fwd",
				       graph->name && *graph->name ? graph->name :
								     "graph");
	bool ok = tensors && ops;
	int rc;

	for (int t = 0; ok && t < graph->ntensors; t++) {
		const sched_tensor *tensor = &graph->tensors[t];
		const char *role = tensor->role == SCHED_INPUT ? "input" :
				   tensor->role == SCHED_OUTPUT || b->saved[t] ?
								 "output" :
								 NULL;

		ok = !json_object_set_new(tensors, tensor->name,
					  forward_decl(tensor, role));
	}
	for (int n = 0; ok && n < graph->nops; n++)
		ok = !json_array_append_new(ops, json_string(graph->ops[n].text));
	*out_json = ok ? format_graph(name, tensors, ops, graph->allow_tf32) : NULL;
	json_decref(tensors);
	json_decref(ops);
	if (!*out_json)
		return sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	if ((rc = check_written(b, *out_json, "forward")) != SCHED_OK) {
		free(*out_json);
		*out_json = NULL;
	}
	return rc;
}

static bool any_saved(const grad_build *b)
{
	for (int t = 0; t < b->graph->ntensors; t++)
		if (b->saved[t])
			return true;
	return false;
}

/* The backward graph as graph.json text, read back to check it, and
 * (when "forward_json") the forward graph with the saved tensors as
 * outputs, or NULL when none is saved. */
static int write_graph(grad_build *b, char **out_json, char **forward_json)
{
	json_t *tensors = json_object();
	const char *name = grad_printf(&b->ctx, "%s_grad",
				       b->graph->name && *b->graph->name
				       ? b->graph->name : "graph");
	int rc;

	if (!tensors || (rc = add_forward(b, tensors)) != SCHED_OK) {
		json_decref(tensors);
		return tensors ? rc : sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	}
	json_object_update(tensors, b->tensors);
	*out_json = format_graph(name, tensors, b->ops, b->graph->allow_tf32);
	json_decref(tensors);
	if (!*out_json)
		return sched_fail(b->err, SCHED_ENOMEM, -1, 0, "out of memory");
	rc = check_written(b, *out_json, "backward");
	if (rc == SCHED_OK && forward_json && any_saved(b))
		rc = write_forward(b, forward_json);
	if (rc == SCHED_OK)
		return SCHED_OK;
	free(*out_json);
	*out_json = NULL;
	return rc;
}

/* The backward graph of the graph in "text" (every extremum in it exact). */
static int grad_of_text(const char *text, const char *const *wrt, int nwrt,
			enum sched_grad_save save, char **out_json, char **forward_json,
			sched_error *err)
{
	sched_graph *graph;
	sched_error why = {0};
	int rc = sched_graph_read_string(text, &graph, &why);

	if (rc != SCHED_OK)
		return sched_fail(err, SCHED_EINTERNAL, -1, 0,
				  "the graph with its max and min reductions split "
				  "does not validate (a bug in tuned's autodiff): %s",
				  why.message);
	rc = sched_graph_grad_saving(graph, wrt, nwrt, save, out_json, forward_json,
				     err);
	sched_graph_free(graph);
	return rc;
}

int sched_graph_grad(const sched_graph *graph, const char *const *wrt, int nwrt,
		     char **out_json, sched_error *err)
{
	return sched_graph_grad_saving(graph, wrt, nwrt, SCHED_SAVE_NONE, out_json,
				       NULL, err);
}

int sched_graph_grad_saving(const sched_graph *graph, const char *const *wrt, int nwrt,
			    enum sched_grad_save save, char **out_json,
			    char **forward_json, sched_error *err)
{
	int n = graph->ntensors;
	grad_build b = {.graph = graph, .err = err, .save = save};
	char *split = NULL;
	int rc;

	*out_json = NULL;
	if (forward_json)
		*forward_json = NULL;
	b.tensor_names = calloc(n, sizeof(char *));
	b.wrt = calloc(n, sizeof(bool));
	b.needs = calloc(n, sizeof(bool));
	b.saved = calloc(n, sizeof(bool));
	b.pending = calloc(n, sizeof(contribution *));
	b.npending = calloc(n, sizeof(int));
	b.nshared = calloc(n, sizeof(int));
	b.tensors = json_object();
	b.ops = json_array();
	if (!b.tensor_names || !b.wrt || !b.needs || !b.saved || !b.pending ||
	    !b.npending || !b.nshared || !b.tensors || !b.ops) {
		rc = sched_fail(err, SCHED_ENOMEM, -1, 0, "out of memory");
		goto out;
	}
	for (int t = 0; t < n; t++)
		b.tensor_names[t] = graph->tensors[t].name;
	b.ctx.names.tensors = b.tensor_names;
	if ((rc = mark_wrt(&b, wrt, nwrt)) == SCHED_OK) {
		mark_needs(&b);
		rc = grad_split_extrema(graph, b.needs, &split, err);
	}
	if (rc == SCHED_OK && split) {
		rc = grad_of_text(split, wrt, nwrt, save, out_json, forward_json, err);
		free(split);
		goto out;
	}
	if (rc == SCHED_OK)
		rc = choose_saved(&b);
	if (rc == SCHED_OK)
		rc = walk_backward(&b);
	if (rc == SCHED_OK && b.ctx.nomem)
		rc = sched_fail(err, SCHED_ENOMEM, -1, 0, "out of memory");
	if (rc == SCHED_OK)
		rc = write_graph(&b, out_json, forward_json);
out:
	json_decref(b.tensors);
	json_decref(b.ops);
	free(b.tensor_names);
	free(b.wrt);
	free(b.needs);
	free(b.saved);
	free(b.pending);
	free(b.npending);
	free(b.nshared);
	sched_arena_release(&b.ctx.arena);
	return rc;
}
