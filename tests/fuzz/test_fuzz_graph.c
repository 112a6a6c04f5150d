/*
 * test_fuzz_graph.c: the graph reader fuzzed: mutants of the examples, of
 * the malformed graphs and of the graphs of corpus/graph, by structure and
 * by bytes, read with sched_graph_read_string. Every refusal has its code
 * and a message; every accepted graph has a canonical form that reads back
 * to the same key (fuzz_graph.h); nothing crashes or leaks.
 */
#include <criterion/criterion.h>

#include "fuzz.h"
#include "fuzz_graph.h"

static enum fuzz_outcome read_graph(const char *text, void *user)
{
	sched_graph *g = fuzz_read_graph(text);

	(void)user;
	sched_graph_free(g);
	return g ? FUZZ_ACCEPTED : FUZZ_REFUSED;
}

Test(fuzz, graph_reader)
{
	fuzz_corpus *corpus = fuzz_corpus_new();
	fuzz_target target = {"graph", read_graph, NULL, 8};
	fuzz_stats stats;

	cr_assert_gt(fuzz_corpus_add_dir(corpus, "examples", ".json"), 0);
	cr_assert_gt(fuzz_corpus_add_dir(corpus, "tests/scheduler/malformed", ".json"), 0);
	fuzz_corpus_add_dir(corpus, "tests/fuzz/corpus/graph", ".json");
	stats = fuzz_run(&target, corpus);
	cr_expect_gt(stats.accepted, 0);
	cr_expect_lt(stats.accepted, stats.executions);
	fuzz_corpus_free(corpus);
}
