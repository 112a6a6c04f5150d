/*
 * dataflow.c: the checks that need every op at once: who writes and reads
 * each tensor, and an order of the ops that respects their dependences.
 */
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

static int record_writes(sched_graph *graph, sched_error *err)
{
	for (int i = 0; i < graph->nops; i++) {
		sched_op *op = &graph->ops[i];
		sched_tensor *t = &graph->tensors[op->target];

		if (t->role == SCHED_INPUT)
			return sched_fail(err, SCHED_EGRAPH, i, op->target_col,
					  "tensor '%s' is an input and cannot be written",
					  t->name);
		if (t->writer >= 0)
			return sched_fail(err, SCHED_EGRAPH, i, op->target_col,
					  "tensor '%s' is already written by op %d",
					  t->name, t->writer);
		t->writer = i;
	}
	return SCHED_OK;
}

typedef struct read_check {
	const sched_graph *graph;
	const sched_op *op;
	bool *read;
	sched_error *err;
	int rc;
} read_check;

static void check_read(const sched_node *access, void *user)
{
	read_check *c = user;
	const sched_tensor *t = &c->graph->tensors[access->tensor];

	c->read[access->tensor] = true;
	if (c->rc == SCHED_OK && t->role != SCHED_INPUT && t->writer < 0)
		c->rc = sched_fail(c->err, SCHED_EGRAPH, c->op->index, access->col,
				   "tensor '%s' is read, but it is not an input "
				   "and no op writes it", t->name);
}

static int check_tensor_use(const sched_graph *graph, const bool *read,
			    sched_error *err)
{
	bool any_output = false;

	for (int i = 0; i < graph->ntensors; i++) {
		const sched_tensor *t = &graph->tensors[i];

		any_output |= t->role == SCHED_OUTPUT;
		if (t->role == SCHED_OUTPUT && t->writer < 0)
			return sched_fail(err, SCHED_EGRAPH, -1, 0,
					  "output '%s' is never written", t->name);
		if (t->role == SCHED_INTERMEDIATE && t->writer < 0)
			return sched_fail(err, SCHED_EGRAPH, -1, 0,
					  "tensor '%s' is neither an input nor "
					  "written by any op", t->name);
		if (t->role == SCHED_INTERMEDIATE && !read[i])
			return sched_fail(err, SCHED_EGRAPH, t->writer,
					  graph->ops[t->writer].target_col,
					  "tensor '%s' is written but never read; "
					  "make it an output if it is wanted", t->name);
	}
	if (!any_output)
		return sched_fail(err, SCHED_EGRAPH, -1, 0,
				  "the graph has no output tensor");
	return SCHED_OK;
}

static int check_reads(const sched_graph *graph, sched_error *err)
{
	read_check c = {graph, NULL, calloc(graph->ntensors, sizeof(bool)), err,
			SCHED_OK};

	if (!c.read)
		return SCHED_ENOMEM;
	for (int i = 0; i < graph->nops && c.rc == SCHED_OK; i++) {
		c.op = &graph->ops[i];
		sched_node_each_access(c.op->body, check_read, &c);
	}
	if (c.rc == SCHED_OK)
		c.rc = check_tensor_use(graph, c.read, err);
	free(c.read);
	return c.rc;
}

typedef struct producers {
	const sched_graph *graph;
	const bool *done;
	int pending;
	int tensor;
} producers;

/* Counts reads of tensors whose writer has not run yet, and remembers the
 * last such tensor. */
static void count_pending(const sched_node *access, void *user)
{
	producers *s = user;
	int writer = s->graph->tensors[access->tensor].writer;

	if (writer >= 0 && !s->done[writer]) {
		s->pending++;
		s->tensor = access->tensor;
	}
}

static producers pending_of(const sched_graph *graph, const bool *done, int op)
{
	producers s = {graph, done, 0, -1};

	sched_node_each_access(graph->ops[op].body, count_pending, &s);
	return s;
}

/* Names the tensors of a cycle among the ops not done: after as many steps
 * back along reads as there are ops, the walk is inside a cycle; it goes
 * round once more to print it ("'a' -> 'b'" reads: a is computed from b). */
static int report_cycle(const sched_graph *graph, const bool *done,
			sched_error *err)
{
	int op = 0, start;
	sched_buf path = {0};
	int rc;

	while (done[op])
		op++;
	for (int step = 0; step < graph->nops; step++)
		op = graph->tensors[pending_of(graph, done, op).tensor].writer;
	start = op;
	sched_buf_printf(&path, "'%s'", graph->tensors[graph->ops[op].target].name);
	do {
		int t = pending_of(graph, done, op).tensor;

		sched_buf_printf(&path, " -> '%s'", graph->tensors[t].name);
		op = graph->tensors[t].writer;
	} while (op != start);
	rc = sched_fail(err, SCHED_EGRAPH, start, graph->ops[start].target_col,
			"ops form a cycle: %s", path.str ? path.str : "");
	sched_buf_release(&path);
	return rc;
}

/* Orders the ops so that each runs after the ops it reads from; among
 * those ready, the first listed runs first. */
static int order_ops(sched_graph *graph, sched_error *err)
{
	bool *done = calloc(graph->nops, sizeof(bool));
	int n = 0, rc = SCHED_OK;

	graph->order = sched_arena_alloc(&graph->arena, graph->nops * sizeof(int));
	if (!done || !graph->order) {
		free(done);
		return SCHED_ENOMEM;
	}
	while (n < graph->nops) {
		int i = 0;

		while (i < graph->nops && (done[i] || pending_of(graph, done, i).pending))
			i++;
		if (i == graph->nops) {
			rc = report_cycle(graph, done, err);
			break;
		}
		done[i] = true;
		graph->order[n++] = i;
	}
	free(done);
	return rc;
}

int sched_graph_check_dataflow(sched_graph *graph, sched_error *err)
{
	int rc;

	if ((rc = record_writes(graph, err)) < 0 ||
	    (rc = check_reads(graph, err)) < 0)
		return rc;
	return order_ops(graph, err);
}
