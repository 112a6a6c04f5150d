/*
 * test_fuzz_plan.c: the plan reader fuzzed. An input is {"graph": NAME,
 * "plan": PLAN}, NAME one of the examples; seeds are each example's
 * default plan (in its own numbering and, marked with its key, in the
 * canonical one), plans the search proposes for it on the cpu and on cuda
 * (tiles, threads, micro-kernels, tensor cores, fusion, library steps),
 * the plans of tests/gpu/plans and those of corpus/plan. Mutants go
 * through kgen_graph_for_plan and kgen_plan_from_json as every consumer
 * of a plan does. A refusal is KGEN_EPLAN with a message of one line; an
 * accepted plan writes itself as JSON that reads back to the same plan,
 * each of its kernels prints as C and as CUDA, and the cost model gives
 * it a positive time.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "kgen.h"
#include "tuner.h"

#define MAX_GRAPHS 64
#define SEARCH_PLANS 6 /* of each generation the search proposes */

typedef struct graphs {
	int n;
	char *names[MAX_GRAPHS];
	sched_graph *graphs[MAX_GRAPHS];
} graphs;

static void check_refusal(int rc, kgen_error *err, const char *text)
{
	cr_assert_eq(rc, KGEN_EPLAN, "code %d (%s) for %s", rc, err->message,
		     fuzz_excerpt(text));
	cr_assert(err->message[0] && !strchr(err->message, '\n'),
		  "message '%s' for %s", err->message, fuzz_excerpt(text));
	kgen_error_release(err);
}

/* The cost model's estimate of "plan" on a device like an H100 and on a
 * cpu of 4 cores: the search estimates every plan it knows. */
static void check_estimates(const sched_graph *g, const kgen_plan *plan,
			    const char *text)
{
	static const kgen_peaks gpu = {.bandwidth_gbs = 3000, .gflops = 50000,
				       .launch_ms = 0.005, .cores = 132};
	static const kgen_peaks cpu = {.bandwidth_gbs = 20, .gflops = 100,
				       .launch_ms = 0.002, .cores = 4};
	double on_gpu = tuner_optimistic_ms(g, plan, &gpu, 1);
	double on_cpu = tuner_optimistic_ms(g, plan, &cpu, 0);

	cr_assert(on_gpu > 0 && on_cpu > 0, "estimates %g ms and %g ms for %s",
		  on_gpu, on_cpu, fuzz_excerpt(text));
}

/* "plan" writes itself as JSON that reads back the same, prints, and has
 * an estimate. */
static void check_accepted(const sched_graph *g, const kgen_plan *plan,
			   const char *text)
{
	json_t *json = kgen_plan_to_json(g, plan), *json2;
	kgen_plan *again = NULL;
	kgen_error err = {0};

	cr_assert_not_null(json);
	cr_assert_eq(kgen_plan_from_json(g, json, &again, &err), KGEN_OK,
		     "the plan as written is refused: %s, for %s", err.message,
		     fuzz_excerpt(text));
	json2 = kgen_plan_to_json(g, again);
	cr_assert(json_equal(json, json2), "the plan changes through JSON: %s",
		  fuzz_excerpt(text));
	for (int k = 0; k < plan->nkernels; k++) {
		char *c_source = kgen_print_c(g, plan, k);
		char *cuda_source = kgen_print_cuda(g, plan, k);

		cr_assert(c_source && cuda_source, "kernel %d does not print, for %s",
			  k, fuzz_excerpt(text));
		free(c_source);
		free(cuda_source);
	}
	check_estimates(g, plan, text);
	json_decref(json);
	json_decref(json2);
	kgen_plan_free(again);
}

static enum fuzz_outcome read_plan(const char *text, void *user)
{
	graphs *all = user;
	json_t *input = json_loads(text, 0, NULL);
	const char *name = json_string_value(json_object_get(input, "graph"));
	json_t *plan_json = json_object_get(input, "plan");
	sched_graph *g = NULL, *canonical = NULL;
	kgen_plan *plan = NULL;
	kgen_error err = {0};
	int rc;

	for (int i = 0; name && i < all->n && !g; i++)
		if (!strcmp(all->names[i], name))
			g = all->graphs[i];
	if (!g) { /* not an input of this target */
		json_decref(input);
		return FUZZ_REFUSED;
	}
	rc = kgen_graph_for_plan(g, plan_json, &canonical, &err);
	if (rc == KGEN_OK)
		rc = kgen_plan_from_json(canonical ? canonical : g, plan_json, &plan, &err);
	if (rc < 0) {
		cr_assert_null(plan);
		check_refusal(rc, &err, text);
	} else {
		check_accepted(canonical ? canonical : g, plan, text);
	}
	kgen_plan_free(plan);
	sched_graph_free(canonical);
	json_decref(input);
	return rc < 0 ? FUZZ_REFUSED : FUZZ_ACCEPTED;
}

static void add_input(fuzz_corpus *corpus, const char *name, json_t *plan)
{
	json_t *input = json_pack("{s:s, s:O}", "graph", name, "plan", plan);
	char *text = json_dumps(input, JSON_SORT_KEYS);

	fuzz_corpus_add(corpus, text);
	free(text);
	json_decref(input);
}

static void add_default_plan(fuzz_corpus *corpus, const char *name,
			     const sched_graph *g, const char *key)
{
	kgen_plan *plan = kgen_plan_default(g);
	json_t *json = kgen_plan_to_json(g, plan);

	if (key)
		json_object_set_new(json, "key", json_string(key));
	add_input(corpus, name, json);
	json_decref(json);
	kgen_plan_free(plan);
}

/* The first plans of the search's first population. */
static void add_search_plans(fuzz_corpus *corpus, const char *name,
			     const sched_graph *g, int cuda)
{
	tuner_search_options options = {.kind = TUNER_GENETIC, .seed = 7,
					 .population = SEARCH_PLANS, .cuda = cuda,
					 .library = 1};
	tuner_search *s = tuner_search_new(g, &options);
	json_t *generation, *plan;
	size_t i;

	cr_assert_not_null(s);
	json_decref(tuner_search_generation(s)); /* the default plan */
	generation = tuner_search_generation(s);
	json_array_foreach(generation, i, plan)
		add_input(corpus, name, plan);
	json_decref(generation);
	tuner_search_free(s);
}

/* The example "file" (NAME.json) read, and its seeds added. */
static void add_example(graphs *all, fuzz_corpus *corpus, const char *file)
{
	char path[512], *text, *name = strndup(file, strlen(file) - 5);
	sched_graph *g = NULL, *canonical = NULL;
	char *form;

	snprintf(path, sizeof(path), "examples/%s", file);
	text = fuzz_read_source(path);
	cr_assert_eq(sched_graph_read_string(text, &g, NULL), SCHED_OK, "%s", path);
	form = sched_graph_canonical_json(g);
	cr_assert_eq(sched_graph_read_string(form, &canonical, NULL), SCHED_OK);
	fuzz_corpus_add_word(corpus, name);
	add_default_plan(corpus, name, g, NULL);
	add_default_plan(corpus, name, canonical, sched_graph_key(g));
	if (strstr(name, "_small")) {
		add_search_plans(corpus, name, g, 0);
		add_search_plans(corpus, name, g, 1);
	}
	all->names[all->n] = name;
	all->graphs[all->n++] = g;
	sched_graph_free(canonical);
	free(form);
	free(text);
}

static void add_examples(graphs *all, fuzz_corpus *corpus)
{
	static const char *const files[] = {
		"bert_qkv_small.json", "conv_pair_small.json", "gpt3_mlp_small.json",
		"llama_mlp_small.json", "lstm_cell_small.json", "ln_residual_small.json",
		"softmax_scores_small.json", "ln_grad_params_small.json",
		"mi_lstm_cell_small.json", "gpt3_mlp_m256.json", "bert_qkv.json",
		"conv_pair.json", "llama_mlp_m512.json",
	};

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		add_example(all, corpus, files[i]);
}

/* tests/gpu/plans/NAME.KIND.json, each for example NAME. */
static void add_gpu_plans(fuzz_corpus *corpus)
{
	static const char *const files[] = {
		"bert_qkv.epilogue", "bert_qkv.mma", "bert_qkv_small.epilogue",
		"bert_qkv_small.mma", "bert_qkv_small.sync", "conv_pair.sync",
		"conv_pair_small.sync",
		"gpt3_mlp_m256.epilogue", "gpt3_mlp_m256.library",
		"gpt3_mlp_m256.library_epilogue", "gpt3_mlp_m256.mma",
		"gpt3_mlp_m256.split_k", "gpt3_mlp_m256.sync",
		"gpt3_mlp_small.library", "gpt3_mlp_small.library_epilogue",
		"gpt3_mlp_small.mma", "gpt3_mlp_small.split_k",
		"gpt3_mlp_small.sync", "llama_mlp_m512.library",
		"llama_mlp_m512.mma", "llama_mlp_m512.sync", "llama_mlp_small.mma",
	};

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char path[512], name[256];
		char *text;
		json_t *plan;

		snprintf(path, sizeof(path), "tests/gpu/plans/%s.json", files[i]);
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(files[i], "."), files[i]);
		text = fuzz_read_source(path);
		plan = json_loads(text ? text : "", 0, NULL);
		cr_assert_not_null(plan, "%s", path);
		add_input(corpus, name, plan);
		json_decref(plan);
		free(text);
	}
}

/* What a plan may say that its seeds may not. */
static const char *const plan_words[] = {
	"name", "ops", "lanes", "schedule", "sync", "library", "tile", "threads",
	"parallel", "unroll", "vector", "split", "parts", "shared", "micro", "mma",
	"mr", "nr", "kc", "mc", "nc", "pack", "bm", "bn", "bk", "wm", "wn",
	"stages", "raster", "rotated", "split_k", "after", "policy",
	"wait_kernel", "ordered", "early_loads", "key", "thread", "warp",
	"block", "row", "strided", "conv2d",
};

Test(fuzz, plan_reader)
{
	fuzz_corpus *corpus = fuzz_corpus_new();
	graphs all = {0};
	fuzz_target target = {"plan", read_plan, &all, 1};
	fuzz_stats stats;

	for (size_t i = 0; i < sizeof(plan_words) / sizeof(plan_words[0]); i++)
		fuzz_corpus_add_word(corpus, plan_words[i]);
	add_examples(&all, corpus);
	add_gpu_plans(corpus);
	fuzz_corpus_add_dir(corpus, "tests/fuzz/corpus/plan", ".json");
	stats = fuzz_run(&target, corpus);
	cr_expect_gt(stats.accepted, 0);
	cr_expect_lt(stats.accepted, stats.executions);
	for (int i = 0; i < all.n; i++) {
		free(all.names[i]);
		sched_graph_free(all.graphs[i]);
	}
	fuzz_corpus_free(corpus);
}
