/*
 * test_kept_graphs.c: the graphs a worker keeps across its requests
 * (tuner_graphs): the same text gives the same graph, with what was
 * analysed on it; the one asked for least recently is forgotten first;
 * a text that does not read is refused with the reason and kept nowhere.
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "kgen.h"
#include "tuner.h"

/* A graph of "n" elements: each n gives another text. */
static void graph_text(char *text, size_t size, int n)
{
	snprintf(text, size,
		 "{\"version\": 1, \"tensors\": {\"x\": {\"shape\": [%d], "
		 "\"dtype\": \"f32\", \"role\": \"input\"}, \"y\": {\"shape\": [%d], "
		 "\"dtype\": \"f32\", \"role\": \"output\"}}, \"ops\": "
		 "[\"y[i] = x[i] * 2 + 1\"]}",
		 n, n);
}

static const sched_graph *read_ok(tuner_graphs *graphs, int n)
{
	char text[512];
	const sched_graph *graph = NULL;
	sched_error err = {0};

	graph_text(text, sizeof(text), n);
	cr_assert_eq(tuner_graphs_read(graphs, text, &graph, &err), SCHED_OK, "%s",
		     err.message);
	cr_assert_not_null(graph);
	return graph;
}

Test(kept_graphs, the_same_text_gives_the_same_graph)
{
	tuner_graphs *graphs = tuner_graphs_new();
	const sched_graph *first = read_ok(graphs, 64);

	cr_assert_eq(read_ok(graphs, 64), first);
	cr_assert_neq(read_ok(graphs, 32), first);
	cr_assert_eq(read_ok(graphs, 64), first);
	tuner_graphs_free(graphs);
}

Test(kept_graphs, the_graph_asked_for_least_recently_is_forgotten_first)
{
	tuner_graphs *graphs = tuner_graphs_new();
	const sched_graph *kept[TUNER_KEPT_GRAPHS];

	for (int i = 0; i < TUNER_KEPT_GRAPHS; i++)
		kept[i] = read_ok(graphs, 16 + i);
	/* Asked for again, the first read is now the most recent: a new text
	 * takes the second's place, and every other graph stays. */
	cr_assert_eq(read_ok(graphs, 16), kept[0]);
	read_ok(graphs, 100);
	cr_assert_eq(read_ok(graphs, 16), kept[0]);
	for (int i = 2; i < TUNER_KEPT_GRAPHS; i++)
		cr_assert_eq(read_ok(graphs, 16 + i), kept[i], "graph %d", i);
	tuner_graphs_free(graphs);
}

Test(kept_graphs, a_text_that_does_not_read_is_refused_with_the_reason)
{
	tuner_graphs *graphs = tuner_graphs_new();
	const sched_graph *graph = read_ok(graphs, 64), *bad = graph;
	sched_error err = {0};

	cr_assert_lt(tuner_graphs_read(graphs, "{\"version\": 1", &bad, &err), 0);
	cr_assert_null(bad);
	cr_assert_str_neq(err.message, "");
	cr_assert_eq(read_ok(graphs, 64), graph);
	tuner_graphs_free(graphs);
}
