/*
 * test_search.c: the generation-wise search, with made-up times, and the
 * cost model. Every proposal is a legal plan never proposed or known
 * before; generation 0 is the default plan; the same seed gives the same
 * search; the best never gets worse and beats the default; known plans
 * seed the first population; a flat fitness stalls; the cost model drops
 * candidates it estimates too slow; and its estimates are what NeoFlow's
 * roofline says.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kgen.h"
#include "random_graph.h"
#include "genome.h"
#include "seeds.h"
#include "tuner_int.h"

static const char *const examples[] = {
	"bert_qkv", "bert_qkv_small", "conv_pair", "conv_pair_small",
	"gpt3_mlp_m256", "gpt3_mlp_m2048", "gpt3_mlp_small", "llama_mlp_m512",
	"llama_mlp_small", "lstm_cell", "lstm_cell_small", "mi_lstm_cell",
	"mi_lstm_cell_small", "ln_residual", "ln_residual_small",
	"softmax_scores", "softmax_scores_small", "ln_grad_params", "ln_grad_params_small",
	"ln_residual_grad", "ln_residual_small_grad", "softmax_scores_grad",
	"softmax_scores_small_grad", "gpt3_mlp_m256_grad", "gpt3_mlp_small_grad",
	"lstm_cell_grad", "lstm_cell_small_grad",
	NULL,
};

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

static sched_graph *graph_of(const char *text)
{
	sched_graph *g = NULL;
	sched_error err = {0};

	cr_assert_eq(sched_graph_read_string(text, &g, &err), SCHED_OK, "%s",
		     err.message);
	return g;
}

/* The plan in "json", which must be legal for "g". */
static kgen_plan *legal(const sched_graph *g, json_t *json)
{
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	cr_assert_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_OK,
		     "an illegal plan was proposed for '%s': %s",
		     sched_graph_name(g), err.message);
	return plan;
}

/* A made-up time for a plan: lowest with tiles of 4 and unroll 2 for
 * every op (fused or not), so that the search has something to find. */
static double fake_ms(const sched_graph *g, json_t *json)
{
	kgen_plan *plan = legal(g, json);
	double ms = 1;

	for (int k = 0; k < plan->nkernels; k++) {
		const kgen_schedule *s = &plan->kernels[k].schedule;

		ms += plan->kernels[k].nops *
		      (fabs((double)s->tile[0] - 4) + abs(s->unroll - 2));
	}
	kgen_plan_free(plan);
	return ms;
}

static double flat_ms(const sched_graph *g, json_t *json)
{
	kgen_plan_free(legal(g, json));
	return 5;
}

static const kgen_peaks four_cores = {.bandwidth_gbs = 20, .gflops = 100,
				      .launch_ms = 0.005, .cores = 4};

/* The cost model's own estimate as the time: the filter then drops what
 * is truly slow. */
static double estimated_ms(const sched_graph *g, json_t *json)
{
	kgen_plan *plan = legal(g, json);
	double ms = tuner_optimistic_ms(g, plan, &four_cores, 0);

	kgen_plan_free(plan);
	return ms;
}

static char *text_of(json_t *json)
{
	return json_dumps(json, JSON_COMPACT | JSON_SORT_KEYS);
}

static char *default_text(const sched_graph *g)
{
	kgen_plan *plan = kgen_plan_default(g);
	json_t *json = kgen_plan_to_json(g, plan);
	char *text = text_of(json);

	json_decref(json);
	kgen_plan_free(plan);
	return text;
}

/* What a search proposed: every plan's text, each generation's size, and
 * the best time before each generation and after the last. */
#define MAX_GENERATIONS 64
typedef struct trace {
	char **texts;
	int ntexts, cap;
	int generations;
	int sizes[MAX_GENERATIONS];
	double best[MAX_GENERATIONS + 1];
} trace;

static void keep_text(trace *t, json_t *plan)
{
	if (t->ntexts == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 64;
		t->texts = realloc(t->texts, t->cap * sizeof(char *));
		cr_assert_not_null(t->texts);
	}
	t->texts[t->ntexts++] = text_of(plan);
}

/* Runs up to "max" generations of "s", timing each plan with "time". */
static void run(tuner_search *s, const sched_graph *g, int max,
		double (*time)(const sched_graph *, json_t *), trace *t)
{
	json_t *generation, *plan;
	size_t i;

	while (t->generations < max && (generation = tuner_search_generation(s))) {
		t->best[t->generations] = tuner_search_best(s);
		t->sizes[t->generations++] = (int)json_array_size(generation);
		json_array_foreach(generation, i, plan) {
			keep_text(t, plan);
			tuner_search_record(s, (int)i, time(g, plan));
		}
		json_decref(generation);
	}
	t->best[t->generations] = tuner_search_best(s);
}

static void trace_release(trace *t)
{
	for (int i = 0; i < t->ntexts; i++)
		free(t->texts[i]);
	free(t->texts);
}

static tuner_search *search_new(const sched_graph *g, unsigned seed)
{
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){.seed = seed});

	cr_assert_not_null(s);
	return s;
}

static int compare_texts(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void expect_all_different(const trace *t)
{
	char **sorted = malloc((t->ntexts + 1) * sizeof(char *));

	memcpy(sorted, t->texts, t->ntexts * sizeof(char *));
	qsort(sorted, t->ntexts, sizeof(char *), compare_texts);
	for (int i = 1; i < t->ntexts; i++)
		cr_expect_str_neq(sorted[i - 1], sorted[i], "a plan was proposed twice");
	free(sorted);
}

static bool in_trace(const trace *t, const char *text)
{
	for (int i = 0; i < t->ntexts; i++)
		if (!strcmp(t->texts[i], text))
			return true;
	return false;
}

Test(search, generation_0_is_the_default_plan)
{
	sched_graph *g = example("bert_qkv_small");
	tuner_search *s = search_new(g, 7);
	char *def = default_text(g);
	trace t = {0};

	run(s, g, 2, fake_ms, &t);
	cr_assert_eq(t.generations, 2);
	cr_expect_eq(t.sizes[0], 1, "generation 0 has %d plans", t.sizes[0]);
	cr_expect_str_eq(t.texts[0], def);
	cr_expect_gt(t.sizes[1], 1);
	cr_expect_leq(t.sizes[1], TUNER_POPULATION);
	cr_expect_eq(tuner_search_generations(s), 2);
	cr_expect_eq(tuner_search_measured(s), t.ntexts);
	trace_release(&t);
	free(def);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* One test per example, so that they run side by side; the parameter is
 * the example's index (criterion copies parameters to other processes). */
ParameterizedTestParameters(search, proposals_are_legal_and_new_on_every_example)
{
	size_t n = sizeof(examples) / sizeof(*examples) - 1;
	int *indices = cr_malloc(n * sizeof(*indices));

	for (size_t i = 0; i < n; i++)
		indices[i] = (int)i;
	return cr_make_param_array(int, indices, n);
}

ParameterizedTest(int *index, search, proposals_are_legal_and_new_on_every_example)
{
	sched_graph *g = example(examples[*index]);
	tuner_search *s = search_new(g, 1 + (unsigned)*index);
	trace t = {0};

	run(s, g, 10, fake_ms, &t);
	cr_expect_gt(t.generations, 2, "%s", examples[*index]);
	expect_all_different(&t);
	trace_release(&t);
	tuner_search_free(s);
	sched_graph_free(g);
}

Test(search, random_graphs_only_get_legal_plans)
{
	for (unsigned seed = 1; seed <= 30; seed++) {
		char *text = random_graph_json(seed);
		sched_graph *g = graph_of(text);
		tuner_search *s = search_new(g, seed);
		trace t = {0};

		run(s, g, 5, fake_ms, &t);
		expect_all_different(&t);
		trace_release(&t);
		tuner_search_free(s);
		sched_graph_free(g);
		free(text);
	}
}

Test(search, the_same_seed_gives_the_same_generations)
{
	sched_graph *g = example("conv_pair_small");
	tuner_search *s1 = search_new(g, 11), *s2 = search_new(g, 11);
	trace a = {0}, b = {0};

	run(s1, g, 6, fake_ms, &a);
	run(s2, g, 6, fake_ms, &b);
	cr_assert_eq(a.generations, b.generations);
	cr_assert_eq(a.ntexts, b.ntexts);
	for (int i = 0; i < a.generations; i++)
		cr_expect_eq(a.sizes[i], b.sizes[i]);
	for (int i = 0; i < a.ntexts; i++)
		cr_expect_str_eq(a.texts[i], b.texts[i], "proposal %d differs", i);
	trace_release(&a);
	trace_release(&b);
	tuner_search_free(s1);
	tuner_search_free(s2);
	sched_graph_free(g);
}

Test(search, the_best_never_gets_worse_and_beats_the_default)
{
	sched_graph *g = example("llama_mlp_small");
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){
		.seed = 3, .stall_generations = 100});
	trace t = {0};

	run(s, g, 20, fake_ms, &t);
	cr_assert_eq(t.generations, 20);
	for (int i = 2; i <= t.generations; i++)
		cr_expect_leq(t.best[i], t.best[i - 1], "generation %d", i);
	cr_expect_lt(t.best[t.generations], t.best[1], "best %.1f, default %.1f",
		     t.best[t.generations], t.best[1]);
	trace_release(&t);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* A plan far better than any the fake time gives the default: every
 * kernel with the default tile but unroll 2 and its first tile 4 where
 * the extent allows. */
static json_t *good_plan(const sched_graph *g)
{
	kgen_plan *plan = kgen_plan_default(g);
	json_t *json;

	for (int k = 0; k < plan->nkernels; k++) {
		kgen_schedule *s = &plan->kernels[k].schedule;

		s->unroll = 2;
		s->tile[0] = 4;
		s->threads[0] = s->threads[0] < 4 ? s->threads[0] : 4;
	}
	json = kgen_plan_to_json(g, plan);
	kgen_plan_free(plan);
	return json;
}

Test(search, known_plans_are_never_proposed_and_seed_the_search)
{
	sched_graph *g = example("gpt3_mlp_small");
	tuner_search *first = search_new(g, 5), *again = search_new(g, 5);
	json_t *good = good_plan(g), *best;
	char *good_text = text_of(good);
	double good_ms = fake_ms(g, good);
	trace t1 = {0}, t2 = {0};

	run(first, g, 4, fake_ms, &t1);
	for (int i = 0; i < t1.ntexts; i++) {
		json_t *plan = json_loads(t1.texts[i], 0, NULL);

		tuner_search_know(again, plan, fake_ms(g, plan));
		json_decref(plan);
	}
	tuner_search_know(again, good, good_ms);
	cr_expect_eq(tuner_search_best(again), good_ms);
	run(again, g, 4, fake_ms, &t2);
	cr_assert_gt(t2.ntexts, 0);
	cr_expect_eq(tuner_search_measured(again), t2.ntexts);
	for (int i = 0; i < t2.ntexts; i++) {
		cr_expect(!in_trace(&t1, t2.texts[i]), "known plan %d proposed", i);
		cr_expect_str_neq(t2.texts[i], good_text, "the known best proposed");
	}
	/* the best is the known good plan, or a plan as good (a fused one) */
	best = tuner_search_best_plans(again, 3);
	cr_expect_eq(fake_ms(g, json_array_get(best, 0)), good_ms);
	cr_expect_leq(tuner_search_best(again), good_ms);
	json_decref(best);
	free(good_text);
	json_decref(good);
	trace_release(&t1);
	trace_release(&t2);
	tuner_search_free(first);
	tuner_search_free(again);
	sched_graph_free(g);
}

Test(search, a_known_plan_outside_the_genome_is_remembered)
{
	sched_graph *g = example("ln_residual_small");
	tuner_search *s = search_new(g, 6);
	kgen_plan *plan = kgen_plan_default(g);
	json_t *json, *best;
	char *text, *best_text;
	trace t = {0};

	plan->kernels[0].schedule.unroll = 16;
	json = kgen_plan_to_json(g, plan);
	text = text_of(json);
	tuner_search_know(s, json, 0.5);
	run(s, g, 3, fake_ms, &t);
	cr_expect_eq(t.generations, 3);
	cr_expect(!in_trace(&t, text));
	cr_expect_eq(tuner_search_best(s), 0.5);
	best = tuner_search_best_plans(s, 1);
	best_text = text_of(json_array_get(best, 0));
	cr_expect_str_eq(best_text, text);
	free(best_text);
	json_decref(best);
	free(text);
	json_decref(json);
	kgen_plan_free(plan);
	trace_release(&t);
	tuner_search_free(s);
	sched_graph_free(g);
}

Test(search, a_known_default_plan_skips_generation_0)
{
	sched_graph *g = example("softmax_scores_small");
	tuner_search *s = search_new(g, 2);
	char *def = default_text(g);
	json_t *def_json = json_loads(def, 0, NULL);
	trace t = {0};

	tuner_search_know(s, def_json, 3);
	run(s, g, 1, fake_ms, &t);
	cr_assert_eq(t.generations, 1);
	cr_expect_gt(t.sizes[0], 1, "the first population comes at once");
	cr_expect(!in_trace(&t, def));
	json_decref(def_json);
	free(def);
	trace_release(&t);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* A flat fitness brings no gain after generation 0: every
 * stall_generations generations the search restarts, and goes on with
 * new plans. */
Test(search, a_flat_fitness_restarts_and_goes_on)
{
	sched_graph *g = example("gpt3_mlp_small");
	tuner_search *s = tuner_search_new(
		g, &(tuner_search_options){.seed = 4,
					   .population = 8,
					   .stall_generations = 3});
	trace t = {0};

	run(s, g, 12, flat_ms, &t);
	cr_expect_eq(t.generations, 12, "the search ended after %d generations",
		     t.generations);
	/* generation 0 gains; 1 to 3 do not, nor 4 to 6, nor 7 to 9 */
	cr_expect_eq(tuner_search_restarts(s), 3);
	for (int i = 1; i < t.generations; i++)
		cr_expect_gt(t.sizes[i], 0, "generation %d proposed nothing", i);
	cr_expect(!tuner_search_exhausted(s));
	expect_all_different(&t);
	trace_release(&t);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* Every plan of trace "t" estimated within "factor" of the best before
 * its generation. */
static void expect_not_filtered(const sched_graph *g, const trace *t, double factor)
{
	for (int gen = 0, i = 0; gen < t->generations; gen++)
		for (int end = i + t->sizes[gen]; i < end; i++) {
			json_t *json = json_loads(t->texts[i], 0, NULL);
			double ms = estimated_ms(g, json);

			cr_expect(!isfinite(t->best[gen]) || ms <= factor * t->best[gen],
				  "plan %d estimated %g ms, best %g ms", i, ms, t->best[gen]);
			json_decref(json);
		}
}

Test(search, the_cost_model_filters_slow_candidates)
{
	sched_graph *g = example("gpt3_mlp_m256");
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){
		.seed = 9, .peaks = &four_cores, .filter_factor = 1.2});
	trace t = {0};

	run(s, g, 8, estimated_ms, &t);
	cr_expect_gt(tuner_search_filtered(s), 0);
	cr_expect_gt(t.generations, 2);
	cr_expect_eq(tuner_search_measured(s), t.ntexts, "filtered is not measured");
	expect_not_filtered(g, &t, 1.2);
	expect_all_different(&t);
	trace_release(&t);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* A generation whose genomes the cost model all drops comes back empty
 * when proposed a few genomes at a time, not as the end of the search:
 * it counts why; the filter then steps aside for the next generation,
 * which proposes plans (some of them filtered before), and the search
 * goes on. */
Test(search, an_empty_generation_is_not_the_end)
{
	sched_graph *g = example("gpt3_mlp_m256");
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){
		.seed = 3, .peaks = &four_cores, .stall_generations = 3});
	json_t *g0 = tuner_search_generation(s), *plans;
	tuner_search_drops drops;
	tuner_search_model model;

	cr_assert_eq(json_array_size(g0), 1);
	/* far faster than any estimate: every other plan is filtered */
	tuner_search_record(s, 0, 1e-9);
	cr_assert_eq(tuner_search_begin(s), 0);
	tuner_search_cost_model(s, &model);
	cr_expect(model.filtering);
	cr_assert_not_null(plans = tuner_search_propose(s, 100));
	cr_expect_eq(json_array_size(plans), 0, "a plan slower than the filter");
	cr_expect(!tuner_search_full(s) && !tuner_search_exhausted(s));
	cr_expect_eq(tuner_search_proposed(s), 0);
	json_decref(plans);
	tuner_search_drops_get(s, &drops);
	cr_expect_gt(drops.filtered, 0);
	cr_expect_eq(drops.filtered, tuner_search_filtered(s));
	cr_expect_eq(drops.invalid, 0);

	cr_assert_eq(tuner_search_begin(s), 0, "an empty generation ended the search");
	tuner_search_cost_model(s, &model);
	cr_expect(!model.filtering, "the filter starved the search and stays");
	cr_assert_not_null(plans = tuner_search_propose(s, 100));
	cr_expect_gt(json_array_size(plans), 0, "the filter stepped aside for nothing");
	json_decref(plans);
	json_decref(g0);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* Plans are recorded by their handle, their place in the generation:
 * the time of plan i is plan i's, whatever the others'. */
Test(search, plans_are_recorded_by_handle)
{
	sched_graph *g = example("softmax_scores_small");
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){.seed = 2});
	json_t *g0 = tuner_search_generation(s), *g1, *best;
	char *expected, *got;

	tuner_search_record(s, 0, 10);
	g1 = tuner_search_generation(s);
	cr_assert_geq(json_array_size(g1), 4);
	for (size_t i = 0; i < json_array_size(g1); i++)
		tuner_search_record(s, (int)i, i == 3 ? 1 : 20);
	tuner_search_record(s, (int)json_array_size(g1), 0.5); /* no such plan */
	tuner_search_record(s, -1, 0.5);
	cr_expect_eq(tuner_search_best(s), 1);
	best = tuner_search_best_plans(s, 1);
	expected = text_of(json_array_get(g1, 3));
	got = text_of(json_array_get(best, 0));
	cr_expect_str_eq(got, expected);
	free(expected);
	free(got);
	json_decref(best);
	json_decref(g0);
	json_decref(g1);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* A search that has proposed every plan there is is exhausted: TRIES
 * genomes per place in a row gave plans seen before, each counted. */
Test(search, a_search_out_of_new_plans_is_exhausted)
{
	static const char tiny[] = "{\"version\": 1, \"tensors\": {"
		"\"x\": {\"shape\": [2], \"dtype\": \"f32\", \"role\": \"input\"}, "
		"\"y\": {\"shape\": [2], \"dtype\": \"f32\", \"role\": \"output\"}}, "
		"\"ops\": [\"y[i] = 2 * x[i]\"]}";
	sched_graph *g = graph_of(tiny);
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){
		.seed = 5, .stall_generations = 1000});
	tuner_search_drops drops;
	int plans = 0;

	while (!tuner_search_exhausted(s) && tuner_search_begin(s) == 0) {
		cr_assert_lt(tuner_search_generations(s), 100, "never exhausted");
		while (!tuner_search_full(s) && !tuner_search_exhausted(s)) {
			json_t *out = tuner_search_propose(s, 16);

			cr_assert_not_null(out);
			json_decref(out);
		}
		for (int i = 0; i < tuner_search_proposed(s); i++)
			tuner_search_record(s, i, 1000.0 / ++plans);
	}
	tuner_search_drops_get(s, &drops);
	cr_expect(tuner_search_exhausted(s));
	cr_expect_gt(plans, 0);
	cr_expect_geq(drops.seen + drops.measured, TUNER_POPULATION,
		      "%d genomes gave a plan seen before", drops.seen);
	cr_expect_null(tuner_search_generation(s), "an exhausted search proposes nothing");
	tuner_search_free(s);
	sched_graph_free(g);
}

/* The C code of "plan" for graph "g", every kernel's. */
static char *plan_source(const sched_graph *g, const kgen_plan *plan)
{
	char *all = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&all, &len);

	cr_assert_not_null(f);
	for (int k = 0; k < plan->nkernels; k++) {
		char *source = kgen_print_c(g, plan, k);

		fputs(source ? source : "", f);
		free(source);
	}
	fclose(f);
	return all;
}

/* The distinct plans (by their C code) of every genome of "g", counted
 * by walking them all. */
static int distinct_plans(const sched_graph *g)
{
	tuner_genome *genome = genome_new(g, NULL, 0, 0);
	int *genes, n = 0, cap = 64, distinct = 1;
	char **codes = malloc(cap * sizeof(char *));
	bool more = true;

	cr_assert_not_null(genome);
	genes = calloc(genome->ngenes + 1, sizeof(int));
	while (more) {
		const kgen_plan *plan = genome_decode(genome, genes);

		if (plan) {
			if (n == cap)
				codes = realloc(codes, (cap *= 2) * sizeof(char *));
			codes[n++] = plan_source(g, plan);
		}
		more = false;
		for (int i = genome->ngenes - 1; i >= 0 && !more; i--) {
			more = ++genes[i] < genome->domain[i];
			genes[i] = more ? genes[i] : 0;
		}
	}
	qsort(codes, n, sizeof(char *), compare_texts);
	for (int i = 1; i < n; i++)
		distinct += strcmp(codes[i - 1], codes[i]) != 0;
	for (int i = 0; i < n; i++)
		free(codes[i]);
	free(codes);
	free(genes);
	genome_free(genome);
	return n ? distinct : 0;
}

static const char small_space[] =
	"{\"version\": 1, \"tensors\": {"
	"\"x\": {\"shape\": [8, 8], \"dtype\": \"f32\", \"role\": \"input\"}, "
	"\"y\": {\"shape\": [8, 8], \"dtype\": \"f32\", \"role\": \"output\"}}, "
	"\"ops\": [\"y[i, j] = 2 * x[i, j]\"]}";

/* A small space with a flat fitness: the search does not stop when it
 * stalls, but goes on until every plan of the space is measured, and
 * then says so. */
Test(search, a_small_space_is_searched_until_every_plan_is_measured)
{
	sched_graph *g = graph_of(small_space);
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){.seed = 6});
	int space = distinct_plans(g), seen, measured;
	trace t = {0};

	cr_assert_gt(space, TUNER_POPULATION, "the space is too small to stall in");
	run(s, g, MAX_GENERATIONS, flat_ms, &t);
	cr_assert_lt(t.generations, MAX_GENERATIONS, "the space never ran out");
	cr_expect_gt(t.generations, TUNER_STALL + 1,
		     "the search stopped when it stalled");
	cr_expect(tuner_search_exhausted(s));
	cr_expect_null(tuner_search_generation(s),
		       "an exhausted search proposes nothing");
	seen = tuner_search_space(s, &measured);
	cr_expect_eq(t.ntexts, space, "%d plans measured of %d", t.ntexts, space);
	cr_expect_eq(seen, space);
	cr_expect_eq(measured, space);
	expect_all_different(&t);
	trace_release(&t);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* Times that rank the plans the other way round from the cost model,
 * the default plan's its estimate: once it has enough trials to tell,
 * the filter steps aside and admits plans it would have dropped. */
static double reversed_ms(const sched_graph *g, json_t *json)
{
	kgen_plan *def = kgen_plan_default(g);
	double default_ms = tuner_optimistic_ms(g, def, &four_cores, 0);

	kgen_plan_free(def);
	return default_ms * default_ms / estimated_ms(g, json);
}

Test(search, a_model_that_ranks_poorly_does_not_filter)
{
	sched_graph *g = example("gpt3_mlp_m256");
	tuner_search *s = tuner_search_new(
		g, &(tuner_search_options){.seed = 9,
					   .peaks = &four_cores,
					   .filter_factor = 1.2});
	tuner_search_model model;
	trace t = {0};
	int admitted = 0;

	run(s, g, 4, reversed_ms, &t);
	tuner_search_cost_model(s, &model);
	cr_expect_lt(model.rank_correlation, TUNER_MIN_RANK_CORRELATION, "%g",
		     model.rank_correlation);
	cr_expect(!model.filtering, "a model that ranks poorly still filters");
	for (int gen = 0, i = 0; gen < t.generations; gen++)
		for (int end = i + t.sizes[gen]; i < end; i++) {
			json_t *json = json_loads(t.texts[i], 0, NULL);

			/* from generation 2, with the trials of generation 1 */
			admitted += gen >= 2 &&
				    estimated_ms(g, json) > 1.2 * t.best[gen];
			json_decref(json);
		}
	cr_expect_gt(admitted, 0, "no plan the model would drop was proposed");
	trace_release(&t);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* Times of a device unlike its peaks: bytes at 2 GB/s, flops at 400
 * GFLOP/s, each kernel 5 us (the launch the peaks measured). */
static const tuner_cost_rates unlike_peaks = {1 / 2e6, 1 / 400e6, 0.005};

static double unlike_peaks_ms(const sched_graph *g, json_t *json)
{
	kgen_plan *plan = legal(g, json);
	tuner_cost_terms terms;

	cr_assert_eq(tuner_cost_terms_of(g, plan, &four_cores, 0, &terms), 0);
	kgen_plan_free(plan);
	return tuner_calibrated_ms(&terms, &unlike_peaks);
}

/* The filter's model is fitted to the trials: the rates of the device,
 * not its peaks', and it ranks the trials as they are. */
Test(search, the_filter_calibrates_on_its_trials)
{
	sched_graph *g = example("lstm_cell_small");
	tuner_search *s = tuner_search_new(g,
					   &(tuner_search_options){.seed = 2,
								   .peaks = &four_cores,
								   .population = 16});
	tuner_search_model model;
	trace t = {0};

	run(s, g, 3, unlike_peaks_ms, &t);
	tuner_search_cost_model(s, &model);
	cr_expect(model.calibrated);
	cr_expect(model.filtering);
	cr_expect_float_eq(model.rates.ms_per_byte, unlike_peaks.ms_per_byte,
			   1e-6 * unlike_peaks.ms_per_byte);
	cr_expect_float_eq(model.rates.ms_per_flop, unlike_peaks.ms_per_flop,
			   1e-6 * unlike_peaks.ms_per_flop);
	cr_expect_float_eq(model.rank_correlation, 1, 1e-9);
	cr_expect_lt(model.peaks_rank_correlation, 1);
	trace_release(&t);
	tuner_search_free(s);
	sched_graph_free(g);
}

Test(search, the_random_kind_proposes_new_legal_plans)
{
	sched_graph *g = example("lstm_cell_small");
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){
		.kind = TUNER_RANDOM, .seed = 8, .population = 16,
		.stall_generations = 100});
	trace t = {0};

	run(s, g, 6, fake_ms, &t);
	cr_assert_eq(t.generations, 6);
	cr_expect_eq(t.sizes[0], 1);
	for (int i = 1; i < t.generations; i++)
		cr_expect_eq(t.sizes[i], 16, "generation %d has %d plans", i, t.sizes[i]);
	expect_all_different(&t);
	trace_release(&t);
	tuner_search_free(s);
	sched_graph_free(g);
}

static const char *matmul =
	"{\"version\": 1, \"tensors\": {"
	"\"a\": {\"shape\": [512, 512], \"dtype\": \"f32\", \"role\": \"input\"},"
	"\"b\": {\"shape\": [512, 512], \"dtype\": \"f32\", \"role\": \"input\"},"
	"\"c\": {\"shape\": [512, 512], \"dtype\": \"f32\", \"role\": \"output\"}},"
	"\"ops\": [\"c[i, j] = sum(k) a[i, k] * b[k, j]\"]}";

/* The default plan of "g" with "parallel" loops in every kernel. */
static double estimate_with(const sched_graph *g, int parallel,
			    const kgen_peaks *peaks)
{
	kgen_plan *plan = kgen_plan_default(g);
	double ms;

	for (int k = 0; k < plan->nkernels; k++)
		plan->kernels[k].schedule.parallel = parallel;
	ms = tuner_optimistic_ms(g, plan, peaks, 0);
	kgen_plan_free(plan);
	return ms;
}

/* The C source of every kernel of "json", one text. */
static char *c_sources(const sched_graph *g, json_t *json)
{
	kgen_plan *plan = legal(g, json);
	size_t len = 0;
	char *all = calloc(1, 1);

	for (int k = 0; k < plan->nkernels; k++) {
		char *source = kgen_print_c(g, plan, k);

		cr_assert_not_null(source);
		all = realloc(all, len + strlen(source) + 1);
		memcpy(all + len, source, strlen(source) + 1);
		len += strlen(source);
		free(source);
	}
	kgen_plan_free(plan);
	return all;
}

/* How many of the proposals of 12 generations (cpu or cuda genes) print
 * the same C code as an earlier one. */
static int same_code(const sched_graph *g, int cuda)
{
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){.seed = 5,
								   .cuda = cuda});
	trace t = {0};
	char **code;
	int same = 0;

	run(s, g, 12, fake_ms, &t);
	code = calloc(t.ntexts + 1, sizeof(char *));
	for (int i = 0; i < t.ntexts; i++) {
		json_t *plan = json_loads(t.texts[i], 0, NULL);

		code[i] = c_sources(g, plan);
		json_decref(plan);
	}
	qsort(code, t.ntexts, sizeof(char *), compare_texts);
	for (int i = 1; i < t.ntexts; i++)
		same += !strcmp(code[i - 1], code[i]);
	for (int i = 0; i < t.ntexts; i++)
		free(code[i]);
	free(code);
	trace_release(&t);
	tuner_search_free(s);
	return same;
}

/* The cpu's code has no threads per block and no split reduction: those
 * genes are fixed there, or a search would measure the same kernels again
 * and again; on cuda they are live. */
Test(search, cpu_proposals_differ_in_their_code)
{
	sched_graph *g = example("bert_qkv_small");

	cr_expect_eq(same_code(g, 0), 0);
	cr_expect_gt(same_code(g, 1), 0, "the cuda genes changed no plan");
	sched_graph_free(g);
}

/* The default plan of "g" with every kernel unrolled 8 times, as JSON. */
static json_t *unrolled_8(const sched_graph *g)
{
	kgen_plan *plan = kgen_plan_default(g);
	json_t *json;

	for (int k = 0; k < plan->nkernels; k++)
		plan->kernels[k].schedule.unroll = 8;
	json = kgen_plan_to_json(g, plan);
	kgen_plan_free(plan);
	return json;
}

/* A plan of the same graph on other shapes joins generation 0, mapped to
 * this graph's domains; a plan of another graph is ignored. */
Test(search, a_plan_of_the_same_form_joins_generation_0)
{
	sched_graph *big = example("bert_qkv"), *small = example("bert_qkv_small");
	sched_graph *other = example("softmax_scores");
	json_t *from_big = unrolled_8(big), *from_other = unrolled_8(other), *g0;
	tuner_search *s = search_new(small, 3);
	kgen_plan *plan;

	tuner_search_suggest(s, from_other);
	tuner_search_suggest(s, from_big);
	g0 = tuner_search_generation(s);
	cr_assert_eq(json_array_size(g0), 2, "the default plan and the suggestion");
	plan = legal(small, json_array_get(g0, 1));
	for (int k = 0; k < plan->nkernels; k++)
		cr_expect_eq(plan->kernels[k].schedule.unroll, 8);
	kgen_plan_free(plan);
	json_decref(g0);
	json_decref(from_big);
	json_decref(from_other);
	tuner_search_free(s);
	sched_graph_free(big);
	sched_graph_free(small);
	sched_graph_free(other);
}

/* The kernel of "plan" that computes op "op". */
static const kgen_kernel *kernel_of(const kgen_plan *plan, int op)
{
	for (int k = 0; k < plan->nkernels; k++)
		for (int i = 0; i < plan->kernels[k].nops; i++)
			if (plan->kernels[k].ops[i] == op)
				return &plan->kernels[k];
	return NULL;
}

/* How many ops of "json" run otherwise than in "def": fused, or on
 * another schedule. */
static int ops_changed(const sched_graph *g, const kgen_plan *def, json_t *json)
{
	kgen_plan *plan = legal(g, json);
	int changed = 0;

	for (int op = 0; op < sched_graph_op_count(g); op++) {
		const kgen_kernel *now = kernel_of(plan, op), *was = kernel_of(def, op);

		changed += now->nops > 1 || memcmp(&now->schedule, &was->schedule,
						   sizeof(kgen_schedule)) != 0;
	}
	kgen_plan_free(plan);
	return changed;
}

/* The first population looks near the default (mutants: an op or two
 * changed, three when a fusion gene joins two ops and a schedule gene
 * changes too) and far from it (random genomes: most ops changed). */
Test(search, the_first_population_holds_mutants_of_the_default)
{
	sched_graph *g = example("bert_qkv_small");
	tuner_search *s = search_new(g, 11);
	kgen_plan *def = kgen_plan_default(g);
	json_t *generation, *plan;
	int near = 0, far = 0;
	size_t i;

	generation = tuner_search_generation(s);
	tuner_search_record(s, 0, 1);
	json_decref(generation);
	generation = tuner_search_generation(s);
	json_array_foreach(generation, i, plan) {
		int changed = ops_changed(g, def, plan);

		near += changed <= 3;
		far += changed > 4;
	}
	cr_expect_geq(near, 8, "%d mutants of the default", near);
	cr_expect_geq(far, 8, "%d random genomes", far);
	json_decref(generation);
	kgen_plan_free(def);
	tuner_search_free(s);
	sched_graph_free(g);
}

Test(cost, no_parallel_loop_is_no_faster_on_a_matmul)
{
	sched_graph *g = graph_of(matmul);
	double serial = estimate_with(g, 0, &four_cores);
	double parallel = estimate_with(g, 1, &four_cores);

	cr_expect_geq(serial, parallel);
	/* 2 * 512^3 flops on one core of four at 100 GFLOP/s in all. */
	cr_expect_float_eq(serial, 2.0 * 512 * 512 * 512 / (25 * 1e6) + 0.005, 1e-9);
	sched_graph_free(g);
}

/* Trials made up from known rates, on terms spread over three orders
 * of magnitude, memory-bound and compute-bound ones mixed. */
static void synthetic_trials(const tuner_cost_rates *rates, tuner_cost_terms *terms,
			     double *ms, int n)
{
	for (int i = 0; i < n; i++) {
		terms[i] = (tuner_cost_terms){.bytes = 1e5 * (1 + (i * 37) % 1000),
					      .flops = 1e6 * (1 + (i * 91) % 997),
					      .launches = 1 + i % 3};
		ms[i] = tuner_calibrated_ms(&terms[i], rates);
	}
}

Test(cost, the_fit_recovers_known_rates)
{
	/* 10 GB/s and 50 GFLOP/s; a launch of 5 us */
	tuner_cost_rates known = {1 / 10e6, 1 / 50e6, 0.005}, fitted = {0};
	tuner_cost_terms terms[40];
	double ms[40];

	synthetic_trials(&known, terms, ms, 40);
	cr_assert(tuner_cost_fit(terms, ms, 40, known.launch_ms, &fitted));
	cr_expect_float_eq(fitted.ms_per_byte, known.ms_per_byte,
			   1e-9 * known.ms_per_byte);
	cr_expect_float_eq(fitted.ms_per_flop, known.ms_per_flop,
			   1e-9 * known.ms_per_flop);
	cr_expect_eq(fitted.launch_ms, known.launch_ms);
}

Test(cost, the_fit_of_noisy_trials_is_near_the_rates)
{
	tuner_cost_rates known = {1 / 20e6, 1 / 100e6, 0}, fitted = {0};
	tuner_cost_terms terms[200];
	double ms[200];

	synthetic_trials(&known, terms, ms, 200);
	for (int i = 0; i < 200; i++)
		ms[i] *= 1 + 0.05 * ((i * 7919) % 21 - 10) / 10.0; /* within 5% */
	cr_assert(tuner_cost_fit(terms, ms, 200, 0, &fitted));
	cr_expect_lt(fabs(fitted.ms_per_byte / known.ms_per_byte - 1), 0.05);
	cr_expect_lt(fabs(fitted.ms_per_flop / known.ms_per_flop - 1), 0.05);
}

/* Times that only bytes explain: the flop rate comes out free (0), not
 * negative, and the bandwidth is fitted alone. */
Test(cost, a_rate_that_explains_nothing_is_free)
{
	tuner_cost_rates known = {1 / 10e6, 0, 0}, fitted = {0};
	tuner_cost_terms terms[20];
	double ms[20];

	synthetic_trials(&known, terms, ms, 20);
	cr_assert(tuner_cost_fit(terms, ms, 20, 0, &fitted));
	cr_expect_float_eq(fitted.ms_per_byte, known.ms_per_byte,
			   1e-9 * known.ms_per_byte);
	cr_expect_eq(fitted.ms_per_flop, 0);
}

Test(cost, too_few_trials_fit_nothing)
{
	tuner_cost_rates known = {1 / 10e6, 1 / 50e6, 0}, fitted = {7, 7, 7};
	tuner_cost_terms terms[3];
	double ms[3];

	synthetic_trials(&known, terms, ms, 3);
	ms[1] = INFINITY; /* failed trials are left out */
	ms[2] = NAN;
	cr_expect(!tuner_cost_fit(terms, ms, 3, 0, &fitted));
	cr_expect_eq(fitted.ms_per_byte, 7, "rates changed by a failed fit");
}

/* Spearman's rho on the textbook example (IQ against hours of TV a week,
 * Wikipedia's "Spearman's rank correlation coefficient"): -29/165. */
Test(cost, spearman_of_known_data)
{
	double iq[] = {106, 100, 86, 101, 99, 103, 97, 113, 112, 110};
	double tv[] = {7, 27, 2, 50, 28, 29, 20, 12, 6, 17};
	double up[] = {1, 2, 3, 4, 5}, down[] = {50, 40, 30, 20, 10};
	double tied[] = {5, 6, 7, 8, 7}, flat[] = {3, 3, 3, 3, 3};

	cr_expect_float_eq(tuner_spearman(iq, tv, 10), -29.0 / 165, 1e-12);
	cr_expect_float_eq(tuner_spearman(up, up, 5), 1, 1e-12);
	cr_expect_float_eq(tuner_spearman(up, down, 5), -1, 1e-12);
	/* ties share their mean rank: ranks 1 2 3.5 5 3.5 */
	cr_expect_float_eq(tuner_spearman(up, tied, 5), 8 / sqrt(95), 1e-12);
	cr_expect(isnan(tuner_spearman(up, flat, 5)), "a constant ranks nothing");
	cr_expect(isnan(tuner_spearman(up, down, 2)), "two pairs rank nothing");
}

Test(cost, estimates_are_positive)
{
	for (int e = 0; examples[e]; e++) {
		sched_graph *g = example(examples[e]);
		kgen_plan *plan = kgen_plan_default(g);

		cr_expect_gt(tuner_optimistic_ms(g, plan, &four_cores, 0), 0, "%s",
			     examples[e]);
		cr_expect_gt(tuner_optimistic_ms(g, plan, &four_cores, 1), 0, "%s",
			     examples[e]);
		kgen_plan_free(plan);
		sched_graph_free(g);
	}
}

Test(cost, a_memory_bound_op_moves_its_bytes_at_the_peak)
{
	sched_graph *g = graph_of(
		"{\"version\": 1, \"tensors\": {"
		"\"x\": {\"shape\": [1024, 1024], \"dtype\": \"f16\", \"role\": \"input\"},"
		"\"y\": {\"shape\": [1024, 1024], \"dtype\": \"f32\", \"role\": \"output\"}},"
		"\"ops\": [\"y[i, j] = x[i, j] * x[i, j] + 1\"]}");
	double bytes = 1024.0 * 1024 * (2 + 4);

	cr_expect_float_eq(estimate_with(g, 2, &four_cores),
			   bytes / (20 * 1e6) + 0.005, 1e-9);
	sched_graph_free(g);
}

static const char relu_of_a_product[] =
	"{\"version\": 1, \"tensors\": {"
	"\"a\": {\"shape\": [512, 512], \"dtype\": \"f16\", \"role\": \"input\"},"
	"\"b\": {\"shape\": [512, 512], \"dtype\": \"f16\", \"role\": \"input\"},"
	"\"c\": {\"shape\": [512, 512], \"dtype\": \"f16\"},"
	"\"y\": {\"shape\": [512, 512], \"dtype\": \"f16\", \"role\": \"output\"}},"
	"\"ops\": [\"c[i, j] = sum(k) a[i, k] * b[k, j]\", \"y[i, j] = relu(c[i, j])\"]}";

/* The probe measures f32 multiply-adds, not tensor cores: a product on
 * them is bounded by its bytes alone, as is a fused kernel's product on
 * them (its epilogue's flops still count). */
Test(cost, a_product_on_tensor_cores_is_bounded_by_its_bytes)
{
	sched_graph *g = graph_of(relu_of_a_product);
	kgen_plan *plan = kgen_plan_default(g);
	kgen_kernel fused = {.nops = 2, .ops = {0, 1}};
	const kgen_mma blocking = {64, 64, 32, 32, 32, 2, 0, 0, 0};
	double generic = tuner_kernel_ms(g, &plan->kernels[0], &four_cores, 1);

	plan->kernels[0].schedule.mma = blocking;
	cr_expect_float_eq(tuner_kernel_ms(g, &plan->kernels[0], &four_cores, 1),
			   512.0 * 512 * 2 * 3 / (20 * 1e6) + 0.005, 1e-9);
	cr_expect_gt(generic, 1.0, "2 * 512^3 flops at 100 GFLOP/s");
	fused.schedule = plan->kernels[1].schedule;
	memcpy(fused.schedule.tile, (int64_t[]){64, 64}, 2 * sizeof(int64_t));
	cr_assert(kgen_fused_mma_fit(g, &fused, &blocking));
	cr_expect_lt(tuner_kernel_ms(g, &fused, &four_cores, 1), 0.2);
	kgen_plan_free(plan);
	sched_graph_free(g);
}

/* A library step with an epilogue moves its factors and its output, not
 * the result between, which stays unwritten; on cuda it counts no flops,
 * on the cpu its product's on the whole device. */
Test(cost, a_library_step_with_an_epilogue_skips_the_result_between)
{
	sched_graph *g = graph_of(relu_of_a_product);
	kgen_kernel step = {.nops = 2, .ops = {0, 1}, .schedule = {.library = true}};

	cr_expect_float_eq(tuner_kernel_ms(g, &step, &four_cores, 1),
			   512.0 * 512 * 2 * 3 / (20 * 1e6) + 0.005, 1e-9);
	cr_expect_float_eq(tuner_kernel_ms(g, &step, &four_cores, 0),
			   2.0 * 512 * 512 * 512 / (100 * 1e6) + 0.005, 1e-9);
	sched_graph_free(g);
}

typedef struct fusion_seen {
	int fused;      /* plans with a kernel of several ops */
	int whole;      /* plans of one kernel */
	int vertical;   /* plans whose fused kernel shares a lane among branches */
	int horizontal; /* plans with a kernel of several branches, each its own lane */
} fusion_seen;

static void count_fusion(const sched_graph *g, json_t *json, fusion_seen *seen)
{
	kgen_plan *plan = legal(g, json);
	bool fused = false;

	for (int k = 0; k < plan->nkernels; k++) {
		const kgen_kernel *kernel = &plan->kernels[k];
		sched_group *group;

		fused |= kernel->nops > 1;
		if (kernel->nops < 2 ||
		    kgen_kernel_group(g, kernel, false, &group, NULL) != KGEN_OK)
			continue;
		seen->vertical += group->nlanes < group->nbranches;
		seen->horizontal += group->nbranches > 1 && group->nlanes == group->nbranches;
		sched_group_free(group);
	}
	seen->fused += fused;
	seen->whole += plan->nkernels == 1;
	kgen_plan_free(plan);
}

/* The fusion genes are searched: the first populations hold fused plans,
 * whole-graph kernels where the planner allows them, and both placements
 * of BERT's sibling projections. */
Test(search, fusion_genes_give_fused_plans_and_both_placements, .timeout = 120)
{
	static const char *const names[] = {"ln_residual_small", "bert_qkv_small"};
	fusion_seen seen[2] = {{0}};

	for (int e = 0; e < 2; e++) {
		sched_graph *g = example(names[e]);
		tuner_search *s = search_new(g, 5);
		json_t *generation, *plan;
		size_t i;

		for (int n = 0; n < 3 && (generation = tuner_search_generation(s)); n++) {
			json_array_foreach(generation, i, plan) {
				count_fusion(g, plan, &seen[e]);
				tuner_search_record(s, (int)i, fake_ms(g, plan));
			}
			json_decref(generation);
		}
		tuner_search_free(s);
		sched_graph_free(g);
	}
	cr_expect_geq(seen[0].fused, 10, "%d fused plans of ln_residual", seen[0].fused);
	cr_expect_geq(seen[0].whole, 1, "no single-kernel ln_residual");
	cr_expect_geq(seen[1].fused, 10, "%d fused plans of bert_qkv", seen[1].fused);
	cr_expect_geq(seen[1].vertical, 1, "no vertical placement");
	cr_expect_geq(seen[1].horizontal, 1, "no horizontal placement");
}

/* The first tile of "plan"'s one kernel, or 0 when it has more. */
static int64_t whole_graph_rows(const sched_graph *g, json_t *json)
{
	kgen_plan *plan = legal(g, json);
	int64_t rows = plan->nkernels == 1 ? plan->kernels[0].schedule.tile[0] : 0;

	kgen_plan_free(plan);
	return rows;
}

/* On the cpu, the first population holds the whole-graph kernel of a
 * softmax in tasks of 2 and 4 rows beside the default's 8. */
Test(search, the_first_population_tiles_the_whole_graph_kernel_in_fewer_rows)
{
	sched_graph *g = example("softmax_scores");
	tuner_search *s = search_new(g, 3);
	json_t *generation, *plan;
	bool seen[9] = {false};
	size_t i;

	for (int n = 0; n < 2 && (generation = tuner_search_generation(s)); n++) {
		json_array_foreach(generation, i, plan) {
			int64_t rows = whole_graph_rows(g, plan);

			if (rows > 0 && rows <= 8)
				seen[rows] = true;
			tuner_search_record(s, (int)i, 1 + (double)i);
		}
		json_decref(generation);
	}
	cr_expect(seen[2], "no whole-graph kernel in tasks of 2 rows");
	cr_expect(seen[4], "no whole-graph kernel in tasks of 4 rows");
	cr_expect(seen[8], "no whole-graph kernel in tasks of 8 rows (the default)");
	tuner_search_free(s);
	sched_graph_free(g);
}

/* The kernels of "plan" as compact texts without their names (which
 * number them), sorted, into "texts". */
static int kernel_texts(json_t *plan, char **texts)
{
	json_t *kernel;
	size_t i;

	json_array_foreach(json_object_get(plan, "kernels"), i, kernel) {
		json_t *unnamed = json_deep_copy(kernel);

		json_object_del(unnamed, "name");
		texts[i] = text_of(unnamed);
		json_decref(unnamed);
	}
	qsort(texts, i, sizeof(char *), compare_texts);
	return (int)i;
}

/* Whether "plan" is "base" with two of its kernels merged into one and
 * every other kernel unchanged, schedule included. */
static bool one_fusion_away(json_t *base, json_t *plan)
{
	char *a[64], *b[64];
	int na = kernel_texts(base, a), nb = kernel_texts(plan, b), kept = 0;

	for (int i = 0, j = 0; i < na && j < nb;) {
		int c = strcmp(a[i], b[j]);

		kept += c == 0;
		i += c <= 0;
		j += c >= 0;
	}
	for (int i = 0; i < na; i++)
		free(a[i]);
	for (int j = 0; j < nb; j++)
		free(b[j]);
	return nb == na - 1 && kept == na - 2;
}

/* When the best plan is the unfused default, the next generation opens
 * with its fusion neighbours: the default with one more fusion and the
 * same schedules elsewhere. */
Test(search, the_best_plan_s_fusion_neighbours_come_first)
{
	sched_graph *g = example("lstm_cell_small");
	tuner_search *s = search_new(g, 9);
	json_t *g0 = tuner_search_generation(s), *g1, *g2, *plan;
	size_t i;

	tuner_search_record(s, 0, 1);
	g1 = tuner_search_generation(s);
	json_array_foreach(g1, i, plan)
		tuner_search_record(s, (int)i, 10);
	g2 = tuner_search_generation(s);
	cr_assert_geq(json_array_size(g2), 4);
	for (i = 0; i < 4; i++)
		cr_expect(one_fusion_away(json_array_get(g0, 0), json_array_get(g2, i)),
			  "plan %zu of the generation is no fusion neighbour", i);
	json_decref(g0);
	json_decref(g1);
	json_decref(g2);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* The kernels with micro-kernels (cpu) and with tensor-core tiles (cuda)
 * among a generation's "plans" of "g"; "seeds" counts those with the
 * seed blocking of gpt3_mlp_small's first product (micro 6 x 32, kc =
 * K = 32, mc 12 (M = 8 rounded up to rows), nc 32, packed; without
 * AVX-512 its 16 registers hold 2 rows beside 4 B vectors of 8 floats:
 * micro 2 x 32, mc 8; mma 128 x 128 x 32, 64 x 64 warps, 2 stages, the 3
 * of the seed repaired to fit shared memory). */
static void count_blockings(const sched_graph *g, json_t *plans, int *micro, int *mma,
			    int *seeds, int *rastered)
{
	bool avx512 = kgen_cpu_vector_floats() == 16;
	const kgen_micro micro_seed = {avx512 ? 6 : 2, 32, 32, avx512 ? 12 : 8, 32, 1};
	static const kgen_mma mma_seed = {128, 128, 32, 64, 64, 2, 0, 0, 0};
	json_t *json;
	size_t i;

	*micro = *mma = *seeds = *rastered = 0;
	json_array_foreach(plans, i, json) {
		kgen_plan *plan = legal(g, json);

		for (int k = 0; k < plan->nkernels; k++) {
			const kgen_schedule *sch = &plan->kernels[k].schedule;

			*micro += sch->micro.mr > 0;
			*mma += sch->mma.bm > 0;
			*rastered += sch->mma.raster > 1;
			*seeds += !memcmp(&sch->micro, &micro_seed, sizeof(micro_seed)) ||
				  !memcmp(&sch->mma, &mma_seed, sizeof(mma_seed));
		}
		kgen_plan_free(plan);
	}
}

/* A matrix product gets micro-kernel genes on the cpu, tensor-core genes
 * on cuda (rasters among them); the first population holds the seed
 * blocking. */
Test(search, products_get_the_blockings_of_their_backend)
{
	sched_graph *g = example("gpt3_mlp_small");

	for (int cuda = 0; cuda < 2; cuda++) {
		tuner_search *s = tuner_search_new(g, &(tuner_search_options){
						    .seed = 4, .cuda = cuda});
		json_t *g0 = tuner_search_generation(s), *g1;
		int micro, mma, seeds, rastered;

		tuner_search_record(s, 0, 1);
		g1 = tuner_search_generation(s);
		count_blockings(g, g1, &micro, &mma, &seeds, &rastered);
		cr_expect_geq(cuda ? mma : micro, 8, "%s: %d", cuda ? "mma" : "micro",
			      cuda ? mma : micro);
		cr_expect_eq(cuda ? micro : mma, 0);
		cr_expect_geq(seeds, 1, "%s: no seed blocking", cuda ? "cuda" : "cpu");
		cr_expect(cuda ? rastered > 0 : rastered == 0, "%d rastered", rastered);
		json_decref(g0);
		json_decref(g1);
		tuner_search_free(s);
	}
	sched_graph_free(g);
}

/* Kernels of a generation's "plans" of "g" that wait on the kernel
 * before them; each plan is legal (its sync proved). */
static int count_synced(const sched_graph *g, json_t *plans, bool *known_policy)
{
	json_t *json;
	size_t i;
	int synced = 0;

	json_array_foreach(plans, i, json) {
		kgen_plan *plan = legal(g, json);

		for (int k = 0; k < plan->nkernels; k++) {
			synced += plan->kernels[k].sync.on;
			*known_policy |= plan->kernels[k].sync.on &&
					 plan->kernels[k].sync.policy == SCHED_SYNC_ROW;
		}
		kgen_plan_free(plan);
	}
	return synced;
}

/* On cuda, the genes choose how kernels overlap: the first population
 * already holds plans whose products wait on their producers row by row
 * (mutants of the synced seed: 8 seeds of 1 to 12 have one in the first
 * two generations, this one among them); on the cpu no plan waits
 * (kernels run in order there). */
Test(search, sync_policies_are_searched_on_cuda_only)
{
	sched_graph *g = example("gpt3_mlp_small");

	for (int cuda = 0; cuda < 2; cuda++) {
		tuner_search *s = tuner_search_new(g, &(tuner_search_options){
						    .seed = 7, .cuda = cuda});
		json_t *g0 = tuner_search_generation(s), *g1;
		bool row = false;
		int synced;

		tuner_search_record(s, 0, 1);
		g1 = tuner_search_generation(s);
		synced = count_synced(g, g0, &row) + count_synced(g, g1, &row);
		if (cuda) {
			cr_expect_geq(synced, 4, "cuda: %d synced kernels", synced);
			cr_expect(row, "no product waited on its producer's rows");
		} else {
			cr_expect_eq(synced, 0, "cpu: %d synced kernels", synced);
		}
		json_decref(g0);
		json_decref(g1);
		tuner_search_free(s);
	}
	sched_graph_free(g);
}

/* A chain of "n" elementwise ops on tensors of "shape" (JSON), t0 in,
 * t<n> out. */
static sched_graph *chain_of(int n, const char *shape)
{
	sched_buf text = {0};
	sched_graph *g;

	sched_buf_printf(&text, "{\"version\": 1, \"name\": \"chain\", \"tensors\": {");
	for (int t = 0; t <= n; t++)
		sched_buf_printf(&text,
				 "%s\"t%d\": {\"shape\": %s, \"dtype\": \"f32\"%s}",
				 t ? ", " : "", t, shape,
				 t == 0 ? ", \"role\": \"input\"" :
				 t == n ? ", \"role\": \"output\"" :
					  "");
	sched_buf_printf(&text, "}, \"ops\": [");
	for (int o = 0; o < n; o++)
		sched_buf_printf(&text, "%s\"t%d[%s] = t%d[%s] * 0.5 + 1\"",
				 o ? ", " : "", o + 1,
				 strchr(shape, ',') ? "i, j" : "i", o,
				 strchr(shape, ',') ? "i, j" : "i");
	sched_buf_printf(&text, "]}");
	g = graph_of(text.str);
	sched_buf_release(&text);
	return g;
}

/* A graph of more ops than TUNER_FUSION_MAX_OPS gets no fusion genes: its
 * plans keep a kernel per op, and the search runs as before. */
Test(search, a_graph_too_large_for_fusion_genes_is_searched_unfused)
{
	int n = TUNER_FUSION_MAX_OPS + 6;
	sched_graph *g = chain_of(n, "[64]");
	tuner_search *s = search_new(g, 2);
	json_t *generation, *plan;
	size_t i;

	for (int gen = 0; gen < 2 && (generation = tuner_search_generation(s)); gen++) {
		json_array_foreach(generation, i, plan) {
			kgen_plan *p = legal(g, plan);

			cr_expect_eq(p->nkernels, n);
			kgen_plan_free(p);
			tuner_search_record(s, (int)i, 1 + (double)i);
		}
		json_decref(generation);
	}
	cr_expect_eq(tuner_search_generations(s), 2);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* Builds "plan" on the cpu backend and verifies it against the reference
 * interpreter. */
static void expect_verified_on_cpu(const sched_graph *g, json_t *plan)
{
	kgen_plan *p = legal(g, plan);
	kgen_backend *backend = NULL;
	kgen_program *prog = NULL;
	kgen_check checks[4];
	kgen_error err = {0};
	int rc = kgen_backend_open("cpu", &backend, &err);

	if (rc == KGEN_OK)
		rc = kgen_program_build(backend, g, p, NULL, &prog, &err);
	if (rc == KGEN_OK)
		rc = kgen_verify(prog, 1, checks, &err);
	cr_expect_eq(rc, KGEN_OK, "%s: %s", json_dumps(plan, JSON_COMPACT),
		     err.message);
	kgen_program_free(prog);
	kgen_backend_close(backend);
	kgen_plan_free(p);
	kgen_error_release(&err);
}

/* Whether every kernel of "plan" (JSON) runs its loops serially. */
static bool all_serial(const sched_graph *g, json_t *plan)
{
	kgen_plan *p = legal(g, plan);
	bool serial = true;

	for (int k = 0; k < p->nkernels; k++)
		serial &= p->kernels[k].schedule.parallel == 0;
	kgen_plan_free(p);
	return serial;
}

/* A graph of more ops than the old bound of 64 gets fusion genes, and, of
 * at least SEEDS_FIRST_FUSED_OPS ops, its generation 0 holds before the
 * default plan (a kernel per op, in parallel where large; last, since it
 * compiles longest) the largest fusion with every kernel serial (the
 * cpu's): fewer kernels than ops, verified against the reference. */
Test(search, a_large_graph_fuses_in_generation_0)
{
	int n = 70;
	sched_graph *g = chain_of(n, "[256, 512]");
	tuner_search *s = search_new(g, 2);
	json_t *g0 = tuner_search_generation(s), *plan;
	char *def = default_text(g);
	size_t i;

	cr_assert_gt(n, SEEDS_FIRST_FUSED_OPS);
	cr_assert_eq(json_array_size(g0), 2, "fused serially, the default plan");
	json_array_foreach(g0, i, plan) {
		kgen_plan *p = legal(g, plan);
		char *text = json_dumps(plan, JSON_COMPACT | JSON_SORT_KEYS);

		if (i == 1) {
			cr_expect_str_eq(text, def);
			cr_expect_eq(p->nkernels, n);
			cr_expect_not(all_serial(g, plan),
				      "large ops run in parallel by default");
		} else {
			cr_expect_lt(p->nkernels, n / 4, "plan %zu: %d kernels", i,
				     p->nkernels);
			cr_expect(all_serial(g, plan));
			expect_verified_on_cpu(g, plan);
		}
		free(text);
		kgen_plan_free(p);
	}
	free(def);
	json_decref(g0);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* Kernels of "plans" (each legal for "g") that are library steps, and
 * in *epilogues those with an epilogue; every one of them one the
 * library makes (on cuda: cuBLASLt). */
static int count_library_steps(const sched_graph *g, json_t *plans, bool cuda,
			       int *epilogues)
{
	json_t *json;
	size_t i;
	int steps = 0;

	json_array_foreach(plans, i, json) {
		kgen_plan *plan = legal(g, json);

		for (int k = 0; k < plan->nkernels; k++)
			if (plan->kernels[k].schedule.library) {
				const char *why = kgen_library_kernel_unfit(g, &plan->kernels[k],
									    cuda);

				cr_expect_null(why, "%s", why);
				*epilogues += plan->kernels[k].nops > 1;
				steps++;
			}
		kgen_plan_free(plan);
	}
	return steps;
}

/* Library steps are searched only when the options offer them, and
 * only on products the library can make: llama_mlp_small's f16 products
 * on cuda (cuBLASLt) and on the cpu (sgemm, on f32 copies),
 * lstm_cell_small's f32 ones on the cpu, but never conv_pair_small's
 * convolutions (gathered products, no GEMM). Three generations, all
 * legal. */
Test(search, library_steps_only_where_offered_and_the_library_fits)
{
	static const struct {
		const char *example;
		int cuda, library;
		bool expect_steps;
	} cases[] = {
		{"lstm_cell_small", 0, 1, true}, {"lstm_cell_small", 0, 0, false},
		{"llama_mlp_small", 1, 1, true}, {"llama_mlp_small", 0, 1, true},
		{"conv_pair_small", 0, 1, false},
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(*cases); c++) {
		sched_graph *g = example(cases[c].example);
		tuner_search *s = tuner_search_new(g, &(tuner_search_options){
			.seed = 6, .cuda = cases[c].cuda, .library = cases[c].library});
		json_t *generation, *plan;
		int steps = 0, epilogues = 0;
		size_t i;

		cr_assert_not_null(s);
		for (int n = 0; n < 3 && (generation = tuner_search_generation(s)); n++) {
			steps += count_library_steps(g, generation, cases[c].cuda, &epilogues);
			json_array_foreach(generation, i, plan)
				tuner_search_record(s, (int)i, 1 + (double)i);
			json_decref(generation);
		}
		if (cases[c].expect_steps)
			cr_expect_geq(steps, 2, "%s, cuda %d: %d library steps", cases[c].example,
				      cases[c].cuda, steps);
		else
			cr_expect_eq(steps, 0, "%s, cuda %d, library %d: %d library steps",
				     cases[c].example, cases[c].cuda, cases[c].library, steps);
		tuner_search_free(s);
		sched_graph_free(g);
	}
}

/* On cuda, a fused kernel whose first op is a product that its own
 * kernel would run on tensor cores runs it on them with the rest of the
 * group as its epilogue: BERT's first population and the next
 * generation hold such kernels, and every plan is legal. */
Test(search, fused_products_on_tensor_cores_on_cuda)
{
	sched_graph *g = example("bert_qkv");
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){.seed = 6, .cuda = 1});
	json_t *g0 = tuner_search_generation(s), *g1, *json;
	int fused_mma = 0;
	size_t i;

	tuner_search_record(s, 0, 1);
	g1 = tuner_search_generation(s);
	json_array_extend(g0, g1);
	json_array_foreach(g0, i, json) {
		kgen_plan *plan = legal(g, json);

		for (int k = 0; k < plan->nkernels; k++)
			fused_mma += plan->kernels[k].nops > 1 && plan->kernels[k].schedule.mma.bm;
		kgen_plan_free(plan);
	}
	cr_expect_geq(fused_mma, 4, "%d fused kernels on tensor cores", fused_mma);
	json_decref(g0);
	json_decref(g1);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* A known plan whose fused kernel runs its products on tensor cores is a
 * genome (encoded through its first product's genes), so the first
 * population holds mutants of it that keep its tile and blocking. */
Test(search, a_known_fused_plan_on_tensor_cores_is_a_genome)
{
	static const char known[] = "{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], "
		"\"schedule\": {\"tile\": [1, 32, 64], \"mma\": {\"bm\": 32, \"bn\": 64, "
		"\"bk\": 32, \"wm\": 32, \"wn\": 32, \"stages\": 2}}}]}";
	sched_graph *g = example("bert_qkv");
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){.seed = 7, .cuda = 1});
	json_t *plan = json_loads(known, 0, NULL), *g0, *g1, *json;
	int kept = 0;
	size_t i;

	kgen_plan_free(legal(g, plan));
	tuner_search_know(s, plan, 0.001);
	g0 = tuner_search_generation(s);
	json_array_foreach(g0, i, json)
		tuner_search_record(s, (int)i, 1);
	g1 = tuner_search_generation(s);
	json_array_foreach(g1, i, json) {
		kgen_plan *p = legal(g, json);

		for (int k = 0; k < p->nkernels; k++)
			kept += p->kernels[k].nops > 1 && p->kernels[k].schedule.tile[1] == 32 &&
				p->kernels[k].schedule.mma.bm == 32 &&
				p->kernels[k].schedule.mma.bn == 64;
		kgen_plan_free(p);
	}
	cr_expect_geq(kept, 3, "%d fused kernels keep the known tile and blocking", kept);
	json_decref(g0);
	json_decref(g1);
	json_decref(plan);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* The library steps with an epilogue in the second generation of "s"
 * (the first holds the first version alone) of gpt3_mlp_small "g". */
static int epilogues_in_second_generation(tuner_search *s, const sched_graph *g, bool cuda)
{
	json_t *g0 = tuner_search_generation(s), *g1;
	int epilogues = 0;

	tuner_search_record(s, 0, 1);
	g1 = tuner_search_generation(s);
	count_library_steps(g, g1, cuda, &epilogues);
	json_decref(g0);
	json_decref(g1);
	return epilogues;
}

/* A product the library makes takes the ops after it that its epilogue
 * can apply: gpt3_mlp_small's first product with its gelu_tanh, on the
 * cpu and on cuda. */
Test(search, library_steps_take_their_epilogues)
{
	sched_graph *g = example("gpt3_mlp_small");

	for (int cuda = 0; cuda < 2; cuda++) {
		tuner_search *s = tuner_search_new(g, &(tuner_search_options){
			.seed = 9, .cuda = cuda, .library = 1});

		cr_expect_geq(epilogues_in_second_generation(s, g, cuda), 1,
			      "cuda %d: no library step with an epilogue", cuda);
		tuner_search_free(s);
	}
	sched_graph_free(g);
}

/* A known plan with a library step and its epilogue is a genome (encoded
 * as its product's library gene and a fusion gene): the first population
 * holds mutants of it, most keeping the step. */
Test(search, a_known_library_step_with_its_epilogue_is_a_genome)
{
	static const char known[] = "{\"kernels\": [{\"ops\": [0, 1], \"schedule\": "
		"{\"library\": true}}, {\"ops\": [2]}]}";
	sched_graph *g = example("gpt3_mlp_small");
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){.seed = 10, .library = 1});
	json_t *plan = json_loads(known, 0, NULL);
	int epilogues;

	kgen_plan_free(legal(g, plan));
	tuner_search_know(s, plan, 0.001);
	epilogues = epilogues_in_second_generation(s, g, false);
	cr_expect_geq(epilogues, 6, "%d library steps with an epilogue", epilogues);
	json_decref(plan);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* A bias's and a scale's gradients: reductions along the columns of a
 * 4096 x 96 f16 gradient, 3 tiles of 32 columns each. */
static const char column_sums[] =
	"{\"version\": 1, \"tensors\": {"
	"\"dy\": {\"shape\": [4096, 96], \"dtype\": \"f16\", \"role\": \"input\"},"
	"\"x\": {\"shape\": [4096, 96], \"dtype\": \"f16\", \"role\": \"input\"},"
	"\"s\": {\"shape\": [4096, 96], \"dtype\": \"f16\"},"
	"\"db\": {\"shape\": [96], \"dtype\": \"f32\", \"role\": \"output\"},"
	"\"dg\": {\"shape\": [96], \"dtype\": \"f32\", \"role\": \"output\"}},"
	"\"ops\": [\"db[j] = sum(i) dy[i, j]\", \"s[i, j] = dy[i, j] * x[i, j]\","
	"\"dg[j] = sum(i) s[i, j]\"]}";

/* Kernels of plans in "plans" whose reductions are cut in parts. Each
 * plan must be legal, which a kernel in parts is only when it is of one
 * reducing op and does not sync. */
static int count_parts(const sched_graph *g, json_t *plans)
{
	json_t *json;
	size_t i;
	int cut = 0;

	json_array_foreach(plans, i, json) {
		kgen_plan *plan = legal(g, json);

		for (int k = 0; k < plan->nkernels; k++)
			cut += plan->kernels[k].schedule.parts > 1;
		kgen_plan_free(plan);
	}
	return cut;
}

/* On cuda the genes cut reductions among blocks (the decoding repairs
 * fused and synced kernels, which legal() would refuse); on the cpu
 * never. */
Test(search, reductions_are_cut_in_parts_on_cuda_only)
{
	sched_graph *g = graph_of(column_sums);

	for (int cuda = 0; cuda < 2; cuda++) {
		tuner_search *s = tuner_search_new(g, &(tuner_search_options){
						    .seed = 3, .cuda = cuda});
		json_t *g0 = tuner_search_generation(s), *g1;
		int cut;

		tuner_search_record(s, 0, 1);
		g1 = tuner_search_generation(s);
		cut = count_parts(g, g0) + count_parts(g, g1);
		if (cuda)
			cr_expect_geq(cut, 4, "cuda: %d kernels cut in parts", cut);
		else
			cr_expect_eq(cut, 0, "cpu: %d kernels cut in parts", cut);
		json_decref(g0);
		json_decref(g1);
		tuner_search_free(s);
	}
	sched_graph_free(g);
}

/* A known plan with reductions in parts is a genome: the first
 * population holds mutants of it, many keeping its parts. */
Test(search, a_known_plan_in_parts_is_a_genome)
{
	static const char known[] = "{\"kernels\": [{\"ops\": [1]}, {\"ops\": [2], "
		"\"schedule\": {\"parts\": 64}}, {\"ops\": [0], \"schedule\": "
		"{\"parts\": 16}}]}";
	sched_graph *g = graph_of(column_sums);
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){.seed = 4, .cuda = 1});
	json_t *plan = json_loads(known, 0, NULL), *g0, *g1;
	int cut;

	kgen_plan_free(legal(g, plan));
	tuner_search_know(s, plan, 0.001);
	g0 = tuner_search_generation(s);
	tuner_search_record(s, 0, 1);
	g1 = tuner_search_generation(s);
	cut = count_parts(g, g1);
	cr_expect_geq(cut, 20, "%d kernels cut in parts", cut);
	json_decref(g0);
	json_decref(g1);
	json_decref(plan);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* Few tiles keep few of a GPU's multiprocessors busy: cutting a column
 * sum's reduction in parts multiplies its blocks, up to the device; on
 * the cpu parts change nothing. */
Test(cost, parts_multiply_the_blocks_of_a_reduction)
{
	static const kgen_peaks gpu = {.bandwidth_gbs = 3000, .gflops = 50000,
				       .launch_ms = 0.005, .cores = 132};
	sched_graph *g = graph_of(column_sums);
	kgen_plan *plan = kgen_plan_default(g);
	kgen_kernel *sum = &plan->kernels[2];
	double flops_ms = 4096.0 * 96 / (50000 * 1e6), bytes_ms = (4096.0 * 96 * 2 + 96 * 4) /
								   (3000 * 1e6);
	double cpu = tuner_kernel_ms(g, sum, &four_cores, 0);

	cr_assert_eq(sum->ops[0], 0);
	cr_assert_eq(sum->schedule.tile[0], 32);
	cr_expect_float_eq(tuner_kernel_ms(g, sum, &gpu, 1),
			   fmax(bytes_ms, flops_ms * 132 / 3) + 0.005, 1e-9, "3 blocks");
	sum->schedule.parts = 2;
	cr_expect_float_eq(tuner_kernel_ms(g, sum, &gpu, 1),
			   fmax(bytes_ms, flops_ms * 132 / 6) + 0.005, 1e-9, "6 blocks");
	sum->schedule.parts = 64;
	cr_expect_float_eq(tuner_kernel_ms(g, sum, &gpu, 1),
			   fmax(bytes_ms, flops_ms) + 0.005, 1e-9, "the whole device");
	cr_expect_float_eq(tuner_kernel_ms(g, sum, &four_cores, 0), cpu, 1e-12);
	kgen_plan_free(plan);
	sched_graph_free(g);
}

/* On cuda the first population (the second generation) holds the default
 * plan with reductions of few tiles cut in parts: ln_grad_params' column
 * sums, 24 tiles of 32 columns each, in 16 parts for 132 multiprocessors
 * (384 blocks). */
Test(search, few_tiles_seed_a_plan_in_parts)
{
	static const kgen_peaks h100 = {.bandwidth_gbs = 3000, .gflops = 50000,
					.launch_ms = 0.005, .cores = 132};
	sched_graph *g = example("ln_grad_params");
	tuner_search *s = tuner_search_new(g, &(tuner_search_options){
					    .seed = 1, .cuda = 1, .peaks = &h100});
	json_t *g0 = tuner_search_generation(s), *g1, *json;
	size_t i;
	bool seeded = false;

	tuner_search_record(s, 0, 1);
	g1 = tuner_search_generation(s);
	json_array_foreach(g1, i, json) {
		kgen_plan *plan = legal(g, json);
		int cut = 0;

		for (int k = 0; k < plan->nkernels; k++)
			cut += plan->kernels[k].schedule.parts == 16 &&
			       plan->kernels[k].schedule.tile[0] == 32;
		seeded |= plan->nkernels == 2 && cut == 2;
		kgen_plan_free(plan);
	}
	cr_expect(seeded, "no plan with both column sums in 16 parts");
	json_decref(g0);
	json_decref(g1);
	tuner_search_free(s);
	sched_graph_free(g);
}

/* A batch of products (attention's P V per head) and an f16 convolution
 * (an implicit GEMM) get tensor-core genes on cuda, whose seeds run them
 * on tensor cores; the cpu's micro-kernels take no batch, and only the
 * convolution. */
Test(search, batches_and_convolutions_get_tensor_cores_on_cuda)
{
	static const char *const graphs[] = {
		"{\"version\": 1, \"tensors\": {"
		"\"p\": {\"shape\": [12, 384, 384], \"dtype\": \"f16\", \"role\": \"input\"},"
		"\"v\": {\"shape\": [12, 384, 64], \"dtype\": \"f16\", \"role\": \"input\"},"
		"\"o\": {\"shape\": [12, 384, 64], \"dtype\": \"f16\", \"role\": \"output\"}},"
		"\"ops\": [\"o[h, i, d] = sum(j) p[h, i, j] * v[h, j, d]\"]}",
		"{\"version\": 1, \"tensors\": {"
		"\"x\": {\"shape\": [1, 64, 56, 56], \"dtype\": \"f16\", \"role\": \"input\"},"
		"\"w\": {\"shape\": [64, 64, 3, 3], \"dtype\": \"f16\", \"role\": \"input\"},"
		"\"y\": {\"shape\": [1, 64, 56, 56], \"dtype\": \"f16\", \"role\": \"output\"}},"
		"\"ops\": [\"y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 56 "
		"&& q + s >= 1 && q + s <= 56, x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]\"]}",
	};

	for (size_t e = 0; e < sizeof(graphs) / sizeof(*graphs); e++) {
		sched_graph *g = graph_of(graphs[e]);

		for (int cuda = 0; cuda < 2; cuda++) {
			tuner_search *s = tuner_search_new(g, &(tuner_search_options){
							    .seed = 2, .cuda = cuda});
			json_t *g0 = tuner_search_generation(s), *g1, *json;
			size_t i;
			int mma = 0, micro = 0;

			tuner_search_record(s, 0, 1);
			g1 = tuner_search_generation(s);
			json_array_foreach(g1, i, json) {
				kgen_plan *plan = legal(g, json);

				mma += plan->kernels[0].schedule.mma.bm > 0;
				micro += plan->kernels[0].schedule.micro.mr > 0;
				kgen_plan_free(plan);
			}
			if (cuda)
				cr_expect_geq(mma, 4, "graph %zu: %d plans on tensor cores", e, mma);
			else
				cr_expect(e == 0 ? micro == 0 : micro >= 4,
					  "graph %zu: %d plans on micro-kernels", e, micro);
			json_decref(g0);
			json_decref(g1);
			tuner_search_free(s);
		}
		sched_graph_free(g);
	}
}

/* A population smaller than the seeds of the first one (the blocked,
 * fused, library, synced and cut defaults on cuda): a generation holds at
 * most the population, and the seeds do not overrun it (a heap overflow
 * found by the plan fuzzer, tests/fuzz). */
Test(search, a_population_smaller_than_the_seeds)
{
	sched_graph *g = example("gpt3_mlp_small");

	for (int population = 1; population <= 8; population++) {
		tuner_search *s = tuner_search_new(g, &(tuner_search_options){
			.seed = 7, .population = population, .cuda = 1, .library = 1});
		json_t *g0, *g1;

		cr_assert_not_null(s);
		g0 = tuner_search_generation(s);
		tuner_search_record(s, 0, 1);
		g1 = tuner_search_generation(s);
		cr_assert_not_null(g1);
		cr_expect_leq(json_array_size(g1), (size_t)population,
			      "population %d: %zu plans", population, json_array_size(g1));
		json_decref(g0);
		json_decref(g1);
		tuner_search_free(s);
	}
	sched_graph_free(g);
}
