/*
 * test_fuzz_validator.c: the checks after parsing fuzzed: shapes, affine
 * indices, ranges, writes and reads, bounds with isl. Valid graphs (the
 * examples, random graphs of tests/kernels/random_graph.c, corpus/validator)
 * are mutated by structure only, their ops token by token (names swapped,
 * numbers to edge values, indices shifted or scaled, accesses put under
 * select guards), so that mutants get past the parser and meet the
 * validator. A refusal is checked as the reader's (fuzz_graph.h); a graph
 * the validator accepts must be safe for everything after it: explained,
 * its ops' isl forms built, run by the reference interpreter (which reads
 * its buffers unchecked, so that under the sanitizers an access the bounds
 * check let through is a report), and given a default plan that reads
 * back and prints as C and CUDA.
 */
#include <criterion/criterion.h>
#include <isl/ctx.h>
#include <stdlib.h>

#include "fuzz.h"
#include "fuzz_graph.h"
#include "ir.h"
#include "kgen.h"
#include "random_graph.h"

#define RANDOM_GRAPHS 200
#define INTERP_POINTS 200000 /* domain points the interpreter runs at most */
#define INTERP_ELEMENTS 1000000

static int64_t domain_points(const sched_op *op)
{
	int64_t points = 1;

	for (int v = 0; v < op->nvars && points <= INTERP_POINTS; v++)
		points *= op->vars[v].hi - op->vars[v].lo;
	return points;
}

static bool small_enough(const sched_graph *g)
{
	int64_t points = 0, elements = 0;

	for (int o = 0; o < g->nops && points <= INTERP_POINTS; o++)
		points += domain_points(&g->ops[o]);
	for (int t = 0; t < g->ntensors && elements <= INTERP_ELEMENTS; t++)
		elements += g->tensors[t].size;
	return points <= INTERP_POINTS && elements <= INTERP_ELEMENTS;
}

static void check_isl_forms(const sched_graph *g, isl_ctx *ctx)
{
	sched_contraction c;

	for (int o = 0; o < g->nops; o++) {
		isl_set *domain = sched_op_domain(ctx, g, o);
		isl_map *write = sched_op_write(ctx, g, o);
		isl_union_map *reads = sched_op_reads(ctx, g, o);

		cr_assert(domain && write && reads, "op %d: no isl form", o);
		isl_set_free(domain);
		isl_map_free(write);
		isl_union_map_free(reads);
		sched_op_contraction(g, o, &c);
		sched_op_batched_contraction(g, o, &c);
		sched_op_gathered_contraction(g, o, &c);
	}
}

static void check_interpreter(const sched_graph *g, const char *text)
{
	double **values = sched_values_new(g);

	cr_assert_not_null(values);
	cr_assert_eq(sched_interp_run(g, values), 0, "%s", fuzz_excerpt(text));
	sched_values_free(g, values);
}

/* The default plan reads back and every kernel prints. */
static void check_default_plan(const sched_graph *g, const char *text)
{
	kgen_plan *plan = kgen_plan_default(g), *again = NULL;
	json_t *json;
	kgen_error err = {0};

	cr_assert_not_null(plan);
	json = kgen_plan_to_json(g, plan);
	cr_assert_eq(kgen_plan_from_json(g, json, &again, &err), KGEN_OK,
		     "the default plan is refused: %s, for %s", err.message,
		     fuzz_excerpt(text));
	for (int k = 0; k < plan->nkernels; k++) {
		char *c_source = kgen_print_c(g, plan, k);
		char *cuda_source = kgen_print_cuda(g, plan, k);

		cr_assert(c_source && cuda_source, "kernel %d of the default plan "
			  "does not print, for %s", k, fuzz_excerpt(text));
		free(c_source);
		free(cuda_source);
	}
	kgen_error_release(&err);
	kgen_plan_free(again);
	kgen_plan_free(plan);
	json_decref(json);
}

static enum fuzz_outcome validate(const char *text, void *user)
{
	sched_graph *g = fuzz_read_graph(text);
	json_t *explained;

	if (!g)
		return FUZZ_REFUSED;
	explained = sched_graph_explain(g);
	cr_assert_not_null(explained, "%s", fuzz_excerpt(text));
	json_decref(explained);
	check_isl_forms(g, user);
	if (small_enough(g))
		check_interpreter(g, text);
	check_default_plan(g, text);
	sched_graph_free(g);
	return FUZZ_ACCEPTED;
}

Test(fuzz, graph_validator)
{
	fuzz_corpus *corpus = fuzz_corpus_new();
	isl_ctx *ctx = isl_ctx_alloc();
	fuzz_target target = {"validator", validate, ctx, 0};
	fuzz_stats stats;

	cr_assert_gt(fuzz_corpus_add_dir(corpus, "examples", ".json"), 0);
	for (unsigned seed = 1; seed <= RANDOM_GRAPHS; seed++) {
		char *text = random_graph_json(seed);

		fuzz_corpus_add(corpus, text);
		free(text);
	}
	fuzz_corpus_add_dir(corpus, "tests/fuzz/corpus/validator", ".json");
	stats = fuzz_run(&target, corpus);
	cr_expect_gt(stats.accepted, 0);
	cr_expect_lt(stats.accepted, stats.executions);
	fuzz_corpus_free(corpus);
	isl_ctx_free(ctx);
}
