/*
 * test_limits.c: sched_graph_read_limited: a graph at each limit is read,
 * one over it refused with SCHED_ELIMIT and a message naming the value,
 * the limit and the option that raises it; 0 is no limit.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "graph_builder.h"
#include "scheduler.h"

/* Two ops on "x f32 SHAPE in; y f32 SHAPE; z f32 SHAPE out". */
static char *two_ops(const char *shape)
{
	char tensors[160];

	snprintf(tensors, sizeof(tensors), "x f32 %s in; y f32 %s; z f32 %s out",
		 shape, shape, shape);
	return build_graph(tensors, OPS("y[i, j] = x[i, j] * 2", "z[i, j] = y[i, j] + 1"));
}

static void expect_read(const char *text, const sched_limits *limits)
{
	sched_graph *graph = NULL;
	sched_error err = {0};

	cr_expect_eq(sched_graph_read_limited(text, limits, &graph, &err), SCHED_OK,
		     "refused: %s", err.message);
	sched_graph_free(graph);
}

static void expect_refused(const char *text, const sched_limits *limits,
			   const char *message)
{
	sched_graph *graph = NULL;
	sched_error err = {0};

	cr_expect_eq(sched_graph_read_limited(text, limits, &graph, &err), SCHED_ELIMIT,
		     "not refused: %s", err.message);
	cr_expect_null(graph);
	cr_expect_str_eq(err.message, message);
	sched_graph_free(graph);
}

Test(limits, text_bytes)
{
	char *text = two_ops("4,8");
	sched_limits at = {.text_bytes = {(int64_t)strlen(text), "--max-graph-bytes"}};
	sched_limits under = {.text_bytes = {(int64_t)strlen(text) - 1, "--max-graph-bytes"}};
	char message[160];

	snprintf(message, sizeof(message), "the graph's text is %zu bytes, over the limit "
		 "of %zu (raise it with --max-graph-bytes)", strlen(text), strlen(text) - 1);
	expect_read(text, &at);
	expect_refused(text, &under, message);
	free(text);
}

Test(limits, ops)
{
	char *text = two_ops("4,8");

	expect_read(text, &(sched_limits){.ops = {2, "--max-graph-ops"}});
	expect_refused(text, &(sched_limits){.ops = {1, "--max-graph-ops"}},
		       "the graph has 2 ops, over the limit of 1 (raise it with "
		       "--max-graph-ops)");
	free(text);
}

Test(limits, tensor_elements)
{
	char *text = two_ops("4,8");

	expect_read(text, &(sched_limits){.tensor_elements = {32, "--max-tensor-elements"}});
	expect_refused(text, &(sched_limits){.tensor_elements = {31, "--max-tensor-elements"}},
		       "tensor 'x' has 32 elements, over the limit of 31 (raise it with "
		       "--max-tensor-elements)");
	free(text);
}

Test(limits, total_elements)
{
	char *text = two_ops("4,8");

	expect_read(text, &(sched_limits){.total_elements = {96, NULL}});
	expect_refused(text, &(sched_limits){.total_elements = {95, NULL}},
		       "the graph's tensors have 96 elements or more in all, over the "
		       "limit of 95");
	free(text);
}

/* A zero limit is none; the format's own still hold (at most 4096 ops). */
Test(limits, zero_is_no_limit)
{
	char *text = two_ops("65536,65536");
	sched_graph *graph = NULL;
	sched_error err = {0};

	expect_read(text, &(sched_limits){0});
	cr_expect_eq(sched_graph_read_limited("[]", &(sched_limits){0}, &graph, &err),
		     SCHED_ESCHEMA);
	free(text);
}
