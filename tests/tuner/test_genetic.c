/*
 * test_genetic.c: the genetic search: every proposal is a legal plan and
 * new, the same seed gives the same search, the default plan comes first,
 * and with a fitness to minimise it finds better than the default.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kgen.h"
#include "random_graph.h"
#include "tuner.h"

static sched_graph *example(const char *name)
{
	char path[512];
	sched_graph *g = NULL;
	sched_error err = {0};

	snprintf(path, sizeof(path), "%s/examples/%s.json", getenv("TUNED_SOURCE_ROOT"),
		 name);
	cr_assert_eq(sched_graph_read_file(path, &g, &err), SCHED_OK, "%s", err.message);
	return g;
}

/* A made-up time for a plan: lowest with tiles of 4 and unroll 2, so that
 * the search has something to find. */
static double fake_ms(const sched_graph *g, json_t *plan_json)
{
	kgen_plan *plan = NULL;
	kgen_error err = {0};
	double ms = 1;

	cr_assert_eq(kgen_plan_from_json(g, plan_json, &plan, &err), KGEN_OK,
		     "an illegal plan was proposed: %s", err.message);
	for (int k = 0; k < plan->nkernels; k++) {
		const kgen_schedule *s = &plan->kernels[k].schedule;

		ms += fabs((double)s->tile[0] - 4) + abs(s->unroll - 2);
	}
	kgen_plan_free(plan);
	return ms;
}

static json_t *answer_for(double ms)
{
	return json_pack("{s:s, s:f}", "kind", "ok", "total_ms", ms);
}

/* Runs "n" proposals, answering each with fake_ms; the texts proposed go
 * to "texts" (may be NULL); returns how many were proposed. */
static int search(const sched_graph *g, unsigned seed, int n, char **texts,
		  double *first_ms, double *best_ms)
{
	tuner_genetic *ga = tuner_genetic_new(g, seed);
	json_t *answer = NULL, *plan;
	int proposed = 0;

	cr_assert_not_null(ga);
	while (proposed < n && (plan = tuner_genetic_next(ga, answer))) {
		double ms = fake_ms(g, plan);

		if (proposed == 0)
			*first_ms = ms;
		if (texts)
			texts[proposed] = json_dumps(plan, JSON_COMPACT | JSON_SORT_KEYS);
		json_decref(answer);
		answer = answer_for(ms);
		json_decref(plan);
		proposed++;
	}
	json_decref(tuner_genetic_next(ga, answer));
	json_decref(answer);
	*best_ms = tuner_genetic_best(ga);
	tuner_genetic_free(ga);
	return proposed;
}

Test(genetic, proposals_are_legal_new_and_start_with_the_default)
{
	sched_graph *g = example("bert_qkv_small");
	char *texts[120] = {0};
	double first, best;
	kgen_plan *def = kgen_plan_default(g);
	json_t *def_json = kgen_plan_to_json(g, def);
	char *def_text = json_dumps(def_json, JSON_COMPACT | JSON_SORT_KEYS);
	int n = search(g, 7, 120, texts, &first, &best);

	cr_expect_eq(n, 120);
	cr_expect_str_eq(texts[0], def_text, "the default plan comes first");
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++)
			cr_expect_str_neq(texts[i], texts[j], "proposals %d and %d are equal", j, i);
	for (int i = 0; i < n; i++)
		free(texts[i]);
	free(def_text);
	json_decref(def_json);
	kgen_plan_free(def);
	sched_graph_free(g);
}

Test(genetic, the_same_seed_gives_the_same_search)
{
	sched_graph *g = example("conv_pair_small");
	char *a[40] = {0}, *b[40] = {0};
	double f1, b1, f2, b2;
	int n1 = search(g, 11, 40, a, &f1, &b1), n2 = search(g, 11, 40, b, &f2, &b2);

	cr_assert_eq(n1, n2);
	for (int i = 0; i < n1; i++) {
		cr_expect_str_eq(a[i], b[i], "proposal %d differs", i);
		free(a[i]);
		free(b[i]);
	}
	sched_graph_free(g);
}

Test(genetic, it_finds_better_than_the_default)
{
	sched_graph *g = example("llama_mlp_small");
	double first, best;

	search(g, 3, 200, NULL, &first, &best);
	cr_expect_lt(best, first, "best %.1f, default %.1f", best, first);
	sched_graph_free(g);
}

Test(genetic, random_graphs_only_get_legal_plans)
{
	for (unsigned seed = 1; seed <= 30; seed++) {
		char *text = random_graph_json(seed);
		sched_graph *g = NULL;
		sched_error err = {0};
		double first, best;

		cr_assert_eq(sched_graph_read_string(text, &g, &err), SCHED_OK);
		search(g, seed, 40, NULL, &first, &best);
		sched_graph_free(g);
		free(text);
	}
}
