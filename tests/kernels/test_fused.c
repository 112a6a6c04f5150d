/*
 * test_fused.c: fused kernels end to end. Plans that fuse ops of every
 * example's small variant and of random graphs -- runs of consecutive
 * ops, every producer with its consumer, whole graphs -- under several
 * tiles: each plan kgen_plan_from_json accepts must build on the cpu
 * backend and match the reference (no fusion may change a result), and
 * enough of them must be accepted that the tests cannot pass by refusing
 * everything. The placements of bert_qkv's three branches (horizontal,
 * vertical, mixed) give the same outputs bit for bit, and the CUDA of
 * every fused kernel compiles with NVRTC for sm_90; some run on the
 * emulated backend and match the reference.
 *
 * The tests set no criterion timeout (meson's applies): criterion 2.4's
 * runner now and then leaks a timeout's record, which the sanitizer build
 * reports.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_builder.h"
#include "kgen_int.h"
#include "random_graph.h"

/* A fused kernel to try: its ops, the tile of its root's output, whether
 * its blocks run in parallel (OpenMP), the consecutive elements a cuda
 * thread runs (vector; the cpu ignores it) and, when nlanes > 0, the
 * lane of each branch. */
typedef struct fusion {
	int nops;
	int ops[KGEN_MAX_OPS];
	int rank;
	int64_t tile[SCHED_MAX_RANK];
	bool parallel;
	int vector;
	int nlanes;
	int lanes[KGEN_MAX_OPS];
} fusion;

/* Accepted plans, as their JSON text (one each: a plan found twice is
 * kept once). */
typedef struct plans {
	int n, cap;
	char **text;
} plans;

static void plans_free(plans *p)
{
	for (int i = 0; i < p->n; i++)
		free(p->text[i]);
	free(p->text);
	*p = (plans){0};
}

static void plans_add(plans *p, char *text)
{
	cr_assert_not_null(text);
	for (int i = 0; i < p->n; i++)
		if (!strcmp(p->text[i], text)) {
			free(text);
			return;
		}
	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 16;
		p->text = realloc(p->text, p->cap * sizeof(char *));
		cr_assert_not_null(p->text);
	}
	p->text[p->n++] = text;
}

static sched_graph *example(const char *name)
{
	sched_graph *graph = NULL;
	sched_error err = {0};

	cr_assert_eq(load_example(name, &graph, &err), SCHED_OK, "%s: %s", name,
		     err.message);
	return graph;
}

/* ---- plans ---- */

static bool member(const fusion *f, int op)
{
	for (int i = 0; i < f->nops; i++)
		if (f->ops[i] == op)
			return true;
	return false;
}

/* The output the schedule of "f" cuts: its root's (kgen's choice). */
static const sched_tensor *root_target(const sched_graph *g, const fusion *f)
{
	kgen_kernel kernel = {.nops = f->nops};

	memcpy(kernel.ops, f->ops, f->nops * sizeof(int));
	return &g->tensors[kgen_kernel_op(g, &kernel)->target];
}

static json_t *ints_json(const int *values, int n)
{
	json_t *list = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(list, json_integer(values[i]));
	return list;
}

static json_t *fused_json(const fusion *f)
{
	json_t *tile = json_array();
	json_t *kernel;

	for (int d = 0; d < f->rank; d++)
		json_array_append_new(tile, json_integer(f->tile[d]));
	kernel = json_pack("{s:o, s:{s:o, s:i, s:i}}", "ops", ints_json(f->ops, f->nops),
			   "schedule", "tile", tile, "parallel", f->parallel, "vector", f->vector);
	if (f->nlanes)
		json_object_set_new(kernel, "lanes", ints_json(f->lanes, f->nlanes));
	return kernel;
}

/* The plan with "f" as one kernel and every other op alone, in graph
 * order; the fused kernel stands where its last member would. */
static json_t *plan_json(const sched_graph *g, const fusion *f)
{
	const int *order = sched_graph_order(g);
	int n = sched_graph_op_count(g), last = -1;
	json_t *kernels = json_array();

	for (int i = 0; i < n; i++)
		if (member(f, order[i]))
			last = i;
	for (int i = 0; i < n; i++)
		if (!member(f, order[i]))
			json_array_append_new(kernels, json_pack("{s:[i]}", "ops", order[i]));
		else if (i == last)
			json_array_append_new(kernels, fused_json(f));
	return json_pack("{s:o}", "kernels", kernels);
}

/* The plan of "f" if kgen accepts it, else NULL. */
static kgen_plan *accepted(const sched_graph *g, const fusion *f)
{
	json_t *json = plan_json(g, f);
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	if (kgen_plan_from_json(g, json, &plan, &err) < 0)
		plan = NULL;
	json_decref(json);
	kgen_error_release(&err);
	return plan;
}

/* Tiles to try on output "t", each once: the whole output in one block,
 * whole rows, halves, thirds (which seldom divide) and kgen's default
 * 8 x 32. Returns how many it wrote to tiles[]. */
#define MAX_TILES 5

static int tiles_for(const sched_tensor *t, int64_t tiles[MAX_TILES][SCHED_MAX_RANK])
{
	int n = 0;

	for (int v = 0; v < MAX_TILES; v++) {
		int64_t *tile = tiles[n];
		bool seen = false;

		for (int d = 0; d < t->rank; d++) {
			int64_t s = t->shape[d];
			int64_t want = d == t->rank - 1 ? 32 : d == t->rank - 2 ? 8 : 1;

			tile[d] = v == 0 ? s : v == 1 ? (d == t->rank - 1 ? s : 1) :
				  v == 2 ? (s + 1) / 2 : v == 3 ? (s + 2) / 3 :
				  s < want ? s : want;
		}
		for (int i = 0; i < n && !seen; i++)
			seen = !memcmp(tiles[i], tile, t->rank * sizeof(int64_t));
		n += !seen;
	}
	return n;
}

/* Tries "f" (ops set) under the first "ntiles" tiles for its root, every
 * other one with its blocks in parallel, each with a vector of its own
 * (whole rows 8 elements a thread); adds each accepted plan to "out"
 * (every tile, or only the first accepted when "first"). Returns how many
 * tiles were accepted. */
static int try_tiles(const sched_graph *g, fusion *f, int ntiles, bool first,
		     plans *out)
{
	static const int vectors[MAX_TILES] = {1, 8, 4, 2, 8};
	int64_t tiles[MAX_TILES][SCHED_MAX_RANK];
	const sched_tensor *t = root_target(g, f);
	int n = tiles_for(t, tiles), ok = 0;

	f->rank = t->rank;
	for (int v = 0; v < n && v < ntiles && !(first && ok); v++) {
		kgen_plan *plan;

		memcpy(f->tile, tiles[v], sizeof(tiles[v]));
		f->parallel = f->rank > 0 && v % 2 == 1;
		f->vector = vectors[v];
		if (!(plan = accepted(g, f)))
			continue;
		json_t *json = kgen_plan_to_json(g, plan);

		plans_add(out, json_dumps(json, JSON_SORT_KEYS | JSON_COMPACT));
		json_decref(json);
		kgen_plan_free(plan);
		ok++;
	}
	return ok;
}

static bool reads(const sched_graph *g, int consumer, int producer)
{
	return sched_op_reads_tensor(&g->ops[consumer], g->ops[producer].target);
}

/* The runs of consecutive ops in graph order: from each op, the longest
 * (of two ops or more) accepted under some tile. */
static void longest_runs(const sched_graph *g, int ntiles, plans *out)
{
	const int *order = sched_graph_order(g);
	int n = g->nops;

	for (int i = 0; i < n; i++)
		for (int j = (n - i > KGEN_MAX_OPS ? i + KGEN_MAX_OPS : n) - 1; j > i; j--) {
			fusion f = {.nops = j - i + 1};

			memcpy(f.ops, order + i, f.nops * sizeof(int));
			if (try_tiles(g, &f, ntiles, true, out))
				break;
		}
}

/* Every producer fused with each of its consumers. */
static void producer_consumer_pairs(const sched_graph *g, int ntiles, plans *out)
{
	for (int c = 0; c < g->nops; c++)
		for (int p = 0; p < g->nops; p++)
			if (p != c && reads(g, c, p)) {
				fusion f = {.nops = 2, .ops = {p, c}};

				try_tiles(g, &f, ntiles, false, out);
			}
}

/* The whole graph in one kernel: its branches side by side, a lane each,
 * and all in one lane (lanes must name every branch, so only the count
 * that matches is accepted). */
static void whole_graph(const sched_graph *g, int ntiles, plans *out)
{
	fusion f = {.nops = g->nops};

	if (g->nops < 2 || g->nops > KGEN_MAX_OPS)
		return;
	for (int i = 0; i < g->nops; i++)
		f.ops[i] = i;
	try_tiles(g, &f, ntiles, false, out);
	for (f.nlanes = 2; f.nlanes <= g->nops; f.nlanes++)
		try_tiles(g, &f, ntiles, false, out);
}

/* Every fused plan of the three kinds that kgen accepts for "g". */
static void fused_plans(const sched_graph *g, int ntiles, plans *out)
{
	longest_runs(g, ntiles, out);
	whole_graph(g, ntiles, out);
	producer_consumer_pairs(g, ntiles, out);
}

/* ---- running ---- */

/* The cpu backend, or $TUNED_FUSED_BACKEND ("emulated": every fused
 * plan's CUDA run on the cpu; minutes, so not in the default run). */
static kgen_backend *open_backend(void)
{
	const char *name = getenv("TUNED_FUSED_BACKEND");
	kgen_backend *backend = NULL;
	kgen_error err = {0};

	cr_assert_eq(kgen_backend_open(name && *name ? name : "cpu", &backend, &err), KGEN_OK,
		     "%s", err.message);
	return backend;
}

static kgen_plan *read_plan(const sched_graph *g, const char *text)
{
	json_t *json = json_loads(text, 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	cr_assert_not_null(json);
	cr_assert_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_OK,
		     "a plan read back: %s\n%s", err.message, text);
	json_decref(json);
	return plan;
}

/* Builds "text" on "backend" and verifies it against the reference;
 * "what" and "graph" (when not NULL) say where it came from. */
static void expect_verified(kgen_backend *backend, const sched_graph *g,
			    const char *text, unsigned seed, const char *what,
			    const char *graph)
{
	kgen_plan *plan = read_plan(g, text);
	kgen_program *prog = NULL;
	kgen_check checks[32];
	kgen_error err = {0};
	int rc = kgen_program_build(backend, g, plan, NULL, &prog, &err);

	if (rc == KGEN_OK)
		rc = kgen_verify(prog, seed, checks, &err);
	cr_expect_eq(rc, KGEN_OK, "%s: %s\nplan %s\n%s%s", what, err.message, text,
		     graph ? graph : "", err.log ? err.log : "");
	kgen_program_free(prog);
	kgen_plan_free(plan);
	kgen_error_release(&err);
}

/* ---- (a) the examples ---- */

static const char *const small_examples[] = {
	"bert_qkv_small", "conv_pair_small", "gpt3_mlp_small", "llama_mlp_small",
	"lstm_cell_small", "mi_lstm_cell_small", "ln_residual_small",
	"softmax_scores_small", "ln_grad_params_small",
};
#define NSMALL (sizeof(small_examples) / sizeof(small_examples[0]))

/* Fused plans the planner must accept, whatever else it accepts: the
 * groups the fusion tests analyse, on the small variants. */
static const struct {
	const char *example;
	const char *plan;
} must_accept[] = {
	{"bert_qkv_small", "{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], "
	 "\"schedule\": {\"tile\": [1, 4, 8]}}]}"},
	{"ln_residual_small", "{\"kernels\": [{\"ops\": [0, 1, 2, 3], "
	 "\"schedule\": {\"tile\": [2, 16]}}]}"},
	{"softmax_scores_small", "{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4], "
	 "\"schedule\": {\"tile\": [1, 8]}}]}"},
	{"lstm_cell_small", "{\"kernels\": [{\"ops\": [0]}, {\"ops\": [1]}, "
	 "{\"ops\": [2]}, {\"ops\": [3, 4, 5, 6, 7, 8], \"schedule\": "
	 "{\"tile\": [1, 4]}}]}"},
	{"conv_pair_small", "{\"kernels\": [{\"ops\": [0, 1], \"schedule\": "
	 "{\"tile\": [1, 2, 3, 3]}}, {\"ops\": [2, 3], \"schedule\": "
	 "{\"tile\": [1, 2, 3, 3]}}]}"},
};

/* At least this many distinct fused plans of the small examples are
 * accepted (165 today, from 8 to 44 an example), and some of each. */
#define MIN_EXAMPLE_PLANS 120

static int verify_example(kgen_backend *backend, const char *name)
{
	sched_graph *g = example(name);
	plans found = {0};
	int n;

	fused_plans(g, MAX_TILES, &found);
	for (int i = 0; i < found.n; i++)
		expect_verified(backend, g, found.text[i], 11 + i, name, NULL);
	n = found.n;
	plans_free(&found);
	sched_graph_free(g);
	return n;
}

Test(fused, every_accepted_fusion_of_the_examples_verifies)
{
	kgen_backend *backend = open_backend();
	int total = 0;

	for (size_t i = 0; i < NSMALL; i++) {
		int n = verify_example(backend, small_examples[i]);

		cr_log_info("%s: %d fused plans accepted", small_examples[i], n);
		cr_expect_gt(n, 0, "%s: no fused plan accepted", small_examples[i]);
		total += n;
	}
	cr_expect_geq(total, MIN_EXAMPLE_PLANS, "only %d fused plans accepted", total);
	kgen_backend_close(backend);
}

Test(fused, the_groups_the_planner_must_accept_verify)
{
	kgen_backend *backend = open_backend();

	for (size_t i = 0; i < sizeof(must_accept) / sizeof(must_accept[0]); i++) {
		sched_graph *g = example(must_accept[i].example);

		expect_verified(backend, g, must_accept[i].plan, 3, must_accept[i].example,
				NULL);
		sched_graph_free(g);
	}
	kgen_backend_close(backend);
}

/* ---- (b) random graphs ---- */

/* Verifies the unfused default plan of "g" on the inputs of "seed" (or of
 * a later try, seed + 1000 k): a fused plan can only be judged where the
 * single-op kernels match the reference. Some random graphs do not on
 * some inputs, whatever the fusion (f32 gelu of a large negative value
 * loses its relative precision). Returns the seed, or 0 when none. */
static unsigned baseline_seed(kgen_backend *backend, const sched_graph *g,
			      unsigned seed, const char *graph)
{
	kgen_plan *plan = kgen_plan_default(g);
	kgen_program *prog = NULL;
	kgen_check checks[32];
	kgen_error err = {0};
	unsigned found = 0;

	cr_assert_not_null(plan);
	cr_assert_eq(kgen_program_build(backend, g, plan, NULL, &prog, &err), KGEN_OK,
		     "the default plan: %s\n%s%s", err.message, graph,
		     err.log ? err.log : "");
	for (unsigned k = 0; k < 3 && !found; k++) {
		if (kgen_verify(prog, seed + 1000 * k, checks, &err) == KGEN_OK)
			found = seed + 1000 * k;
		else
			/* info, not warn: criterion fails a run that warns */
			cr_log_info("%s, inputs %u: the unfused plan does not verify: %s",
				    sched_graph_name(g), seed + 1000 * k, err.message);
	}
	kgen_program_free(prog);
	kgen_plan_free(plan);
	kgen_error_release(&err);
	return found;
}

/* What the random graphs of a range gave. */
typedef struct random_run {
	int plans;   /* fused plans accepted, built and verified */
	int skipped; /* graphs whose unfused plan never verified */
} random_run;

/* Fusing every producer with each consumer and the whole graph of seeds
 * [first, last], under two tiles (whole outputs, and whole rows with the
 * blocks in parallel): every accepted plan must verify. */
static random_run verify_random(unsigned first, unsigned last)
{
	kgen_backend *backend = open_backend();
	random_run run = {0, 0};

	for (unsigned seed = first; seed <= last; seed++) {
		char *text = random_graph_json(seed);
		sched_graph *g = NULL;
		sched_error serr = {0};
		plans found = {0};
		unsigned inputs;
		char what[64];

		cr_assert_eq(sched_graph_read_string(text, &g, &serr), SCHED_OK,
			     "seed %u: %s", seed, serr.message);
		whole_graph(g, 2, &found);
		producer_consumer_pairs(g, 2, &found);
		inputs = found.n ? baseline_seed(backend, g, seed, text) : seed;
		snprintf(what, sizeof(what), "random graph %u, inputs %u", seed, inputs);
		for (int i = 0; inputs && i < found.n; i++)
			expect_verified(backend, g, found.text[i], inputs, what, text);
		run.plans += inputs ? found.n : 0;
		run.skipped += !inputs;
		plans_free(&found);
		sched_graph_free(g);
		free(text);
	}
	kgen_backend_close(backend);
	return run;
}

/* Three parts of 50 seeds, which criterion runs side by side: the first
 * 20 of each, or all 50 with TUNED_TEST_FULL=1 (tests/run --full). A
 * part of 50 accepts about 120 fused plans, one of 20 about 50; a planner
 * that refused most of them would fail here. At most 2 graphs a part may
 * be left out. */
#define PART_SEEDS 50
#define QUICK_PART_SEEDS 20
#define MIN_RANDOM_PLANS_PER_SEED 1.8
#define MAX_RANDOM_SKIPPED 2

static void expect_random(unsigned first)
{
	const char *full = getenv("TUNED_TEST_FULL");
	unsigned seeds = full && !strcmp(full, "1") ? PART_SEEDS : QUICK_PART_SEEDS;
	unsigned last = first + seeds - 1;
	int min_plans = (int)(MIN_RANDOM_PLANS_PER_SEED * seeds);
	random_run run = verify_random(first, last);

	cr_log_info("random graphs %u to %u: %d fused plans accepted, %d graphs "
		    "left out",
		    first, last, run.plans, run.skipped);
	cr_expect_geq(run.plans, min_plans, "only %d fused plans accepted", run.plans);
	cr_expect_leq(run.skipped, MAX_RANDOM_SKIPPED, "%d graphs left out",
		      run.skipped);
}

Test(fused, random_graphs_from_1)
{
	expect_random(1);
}

Test(fused, random_graphs_from_51)
{
	expect_random(51);
}

Test(fused, random_graphs_from_101)
{
	expect_random(101);
}

/* ---- (c) placements ---- */

/* 4 blocks a branch, run in parallel. */
#define QKV_TILE "\"schedule\": {\"tile\": [1, 4, 8], \"parallel\": 1}"

static const char *const placements[] = {
	"{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], \"lanes\": [0, 1, 2], "
	QKV_TILE "}]}",
	"{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], \"lanes\": [0, 0, 0], "
	QKV_TILE "}]}",
	"{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], \"lanes\": [0, 0, 1], "
	QKV_TILE "}]}",
};
#define NPLACEMENTS (sizeof(placements) / sizeof(placements[0]))

/* One host buffer per tensor in its storage type: inputs drawn from
 * "seed" in [-1, 1], everything else zero. */
static void **host_buffers(const sched_graph *g, unsigned seed)
{
	void **host = calloc(sched_graph_tensor_count(g), sizeof(void *));

	cr_assert_not_null(host);
	for (int t = 0; t < sched_graph_tensor_count(g); t++) {
		int64_t n = sched_tensor_size(g, t);
		enum sched_dtype dtype = sched_tensor_dtype(g, t);
		unsigned char *p = calloc(n, sched_dtype_bytes(dtype));

		cr_assert_not_null(p);
		host[t] = p;
		if (sched_tensor_role(g, t) != SCHED_INPUT)
			continue;
		for (int64_t i = 0; i < n; i++) {
			float x = (float)rand_r(&seed) / RAND_MAX * 2 - 1;
			_Float16 h = (_Float16)x;
			uint32_t bits;
			uint16_t high;
			int32_t v = (int32_t)(x * 2);

			memcpy(&bits, &x, 4);
			high = (uint16_t)(bits >> 16);
			if (dtype == SCHED_F32)
				memcpy(p + 4 * i, &x, 4);
			else if (dtype == SCHED_F16)
				memcpy(p + 2 * i, &h, 2);
			else if (dtype == SCHED_BF16)
				memcpy(p + 2 * i, &high, 2);
			else
				memcpy(p + 4 * i, &v, 4);
		}
	}
	return host;
}

static void host_free(const sched_graph *g, void **host)
{
	for (int t = 0; t < sched_graph_tensor_count(g); t++)
		free(host[t]);
	free(host);
}

/* Runs plan "text" on the inputs of "seed" and returns the host buffers. */
static void **run_plan(kgen_backend *backend, const sched_graph *g,
		       const char *text, unsigned seed)
{
	kgen_plan *plan = read_plan(g, text);
	kgen_program *prog = NULL;
	kgen_error err = {0};
	void **host = host_buffers(g, seed);

	cr_assert_eq(kgen_program_build(backend, g, plan, NULL, &prog, &err), KGEN_OK,
		     "%s\n%s", err.message, err.log ? err.log : "");
	cr_assert_eq(kgen_program_run(prog, host, &err), KGEN_OK, "%s", err.message);
	kgen_program_free(prog);
	kgen_plan_free(plan);
	kgen_error_release(&err);
	return host;
}

Test(fused, placements_verify_and_agree_bit_for_bit)
{
	kgen_backend *backend = open_backend();
	sched_graph *g = example("bert_qkv_small");
	void **outputs[NPLACEMENTS];

	for (size_t i = 0; i < NPLACEMENTS; i++) {
		kgen_plan *plan = read_plan(g, placements[i]);

		cr_expect_eq(plan->nkernels, 1);
		cr_expect_eq(plan->kernels[0].nlanes, 3);
		kgen_plan_free(plan);
		expect_verified(backend, g, placements[i], 5, placements[i], NULL);
		outputs[i] = run_plan(backend, g, placements[i], 17);
	}
	for (int t = 0; t < sched_graph_tensor_count(g); t++) {
		size_t bytes = sched_tensor_bytes(g, t);

		if (sched_tensor_role(g, t) != SCHED_OUTPUT)
			continue;
		for (size_t i = 1; i < NPLACEMENTS; i++)
			cr_expect(memcmp(outputs[0][t], outputs[i][t], bytes) == 0,
				  "output '%s' differs between %s and %s",
				  sched_tensor_name(g, t), placements[0], placements[i]);
	}
	for (size_t i = 0; i < NPLACEMENTS; i++)
		host_free(g, outputs[i]);
	sched_graph_free(g);
	kgen_backend_close(backend);
}

/* A lanes list must name every branch, and only branches. */
Test(fused, lanes_must_match_the_branches)
{
	sched_graph *g = example("bert_qkv_small");
	static const struct {
		const char *plan, *why;
	} wrong[] = {
		{"{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], \"lanes\": [0, 0], "
		 QKV_TILE "}]}", "'lanes' lists 2 lanes for 3 branches"},
		{"{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], \"lanes\": [0, 3, 0], "
		 QKV_TILE "}]}", "lane 1 must be an integer from 0 to 2"},
	};

	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		json_t *json = json_loads(wrong[i].plan, 0, NULL);
		kgen_plan *plan = NULL;
		kgen_error err = {0};

		cr_expect_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_EPLAN, "%s",
			     wrong[i].plan);
		cr_expect_null(plan);
		cr_expect(strstr(err.message, wrong[i].why) != NULL, "'%s' does not say '%s'",
			  err.message, wrong[i].why);
		kgen_error_release(&err);
		json_decref(json);
	}
	sched_graph_free(g);
}

static int occurrences(const char *text, const char *what)
{
	int n = 0;

	for (const char *at = text; (at = strstr(at, what)); at += strlen(what))
		n++;
	return n;
}

/* ln_grad_params' two column sums in one lane, 128 columns a block: one
 * pass reads dy and xhat once (two chunk loads where their own lanes
 * make three), verifies, and sums in the same order as their own lanes
 * do, so the two plans agree bit for bit. */
Test(fused, sibling_column_sums_of_a_lane_run_in_one_pass)
{
	static const char *plan_of[] = {
		"{\"kernels\": [{\"name\": \"k0\", \"ops\": [0, 1], \"lanes\": [0, 0], "
		"\"schedule\": {\"tile\": [128]}}]}",
		"{\"kernels\": [{\"name\": \"k0\", \"ops\": [0, 1], \"lanes\": [0, 1], "
		"\"schedule\": {\"tile\": [128]}}]}",
	};
	kgen_backend *backend = open_backend();
	sched_graph *g = example("ln_grad_params");
	void **outputs[2];

	for (int i = 0; i < 2; i++) {
		kgen_plan *plan = read_plan(g, plan_of[i]);
		char *source = kgen_print_c(g, plan, 0);

		cr_assert_not_null(source);
		cr_expect_eq(occurrences(source,
					 "in one pass: op 0: dgamma, op 1: dbeta"),
			     i == 0, "%s", source);
		cr_expect_eq(occurrences(source, "kf16_load_vec(vec_"), i == 0 ? 2 : 3,
			     "%s", source);
		free(source);
		kgen_plan_free(plan);
		expect_verified(backend, g, plan_of[i], 7, plan_of[i], NULL);
		outputs[i] = run_plan(backend, g, plan_of[i], 19);
	}
	for (int t = 0; t < sched_graph_tensor_count(g); t++)
		if (sched_tensor_role(g, t) == SCHED_OUTPUT)
			cr_expect(memcmp(outputs[0][t], outputs[1][t],
					 sched_tensor_bytes(g, t)) == 0,
				  "'%s' differs between one pass and two lanes",
				  sched_tensor_name(g, t));
	host_free(g, outputs[0]);
	host_free(g, outputs[1]);
	sched_graph_free(g);
	kgen_backend_close(backend);
}

/* ---- (d) NVRTC ---- */

static void skip_without_nvrtc(void)
{
	kgen_error err = {0};

	if (kgen_nvrtc_check("extern \"C\" __global__ void k(void) {}", "sm_90",
			     &err) == KGEN_EBACKEND)
		cr_skip_test("NVRTC checks skipped: %s", err.message);
	kgen_error_release(&err);
}

/* The CUDA of every fused kernel of "text" compiles for sm_90. */
static int expect_cuda_compiles(const sched_graph *g, const char *text)
{
	kgen_plan *plan = read_plan(g, text);
	int n = 0;

	for (int k = 0; k < plan->nkernels; k++) {
		kgen_error err = {0};
		char *source;

		if (plan->kernels[k].nops < 2)
			continue;
		source = kgen_print_cuda(g, plan, k);
		cr_expect_not_null(source, "no CUDA for kernel %d of %s", k, text);
		if (source)
			cr_expect_eq(kgen_nvrtc_check(source, "sm_90", &err), KGEN_OK,
				     "%s\n%s\nplan %s\n%s", err.message,
				     err.log ? err.log : "", text, source);
		n++;
		kgen_error_release(&err);
		free(source);
	}
	kgen_plan_free(plan);
	return n;
}

Test(fused, every_fused_kernel_compiles_with_nvrtc)
{
	int kernels = 0;

	skip_without_nvrtc();
	for (size_t i = 0; i < NSMALL; i++) {
		sched_graph *g = example(small_examples[i]);
		plans found = {0};

		fused_plans(g, MAX_TILES, &found);
		for (int p = 0; p < found.n; p++)
			kernels += expect_cuda_compiles(g, found.text[p]);
		plans_free(&found);
		sched_graph_free(g);
	}
	sched_graph *g = example("bert_qkv_small");

	for (size_t i = 0; i < NPLACEMENTS; i++)
		kernels += expect_cuda_compiles(g, placements[i]);
	sched_graph_free(g);
	cr_expect_geq(kernels, MIN_EXAMPLE_PLANS + (int)NPLACEMENTS);
}

/* ln_residual fused, 4 rows a block: its two reductions have 4 elements
 * for 256 threads, so a warp shares each row (shuffles), with a barrier
 * before each stage; with 4 threads each row stays one thread's. */
Test(fused, few_reduced_elements_share_a_warp_on_cuda)
{
	static const char *plan_of[] = {
		"{\"kernels\": [{\"name\": \"k0\", \"ops\": [0, 1, 2, 3], "
		"\"schedule\": {\"tile\": [4, 768], \"threads\": [1, 256]}}]}",
		"{\"kernels\": [{\"name\": \"k0\", \"ops\": [0, 1, 2, 3], "
		"\"schedule\": {\"tile\": [4, 768], \"threads\": [1, 4]}}]}",
	};
	sched_graph *g = example("ln_residual");
	kgen_plan *warps = read_plan(g, plan_of[0]), *alone = read_plan(g, plan_of[1]);
	char *shared = kgen_print_cuda(g, warps, 0), *serial = kgen_print_cuda(g, alone, 0);

	cr_assert(shared && serial);
	cr_expect_eq(occurrences(shared, "__shfl_xor_sync"), 2, "mean and var\n%s", shared);
	cr_expect_eq(occurrences(shared, "for (idx_t r = threadIdx.x % 32; r < 768; r += 32)"), 2);
	cr_expect_eq(occurrences(shared, "__syncthreads()"), 3, "before mean, var and y");
	cr_expect_eq(occurrences(serial, "__shfl_xor_sync"), 0, "%s", serial);
	cr_expect_eq(occurrences(serial, "__syncthreads()"), 2, "the analysis' barriers");
	free(serial);
	kgen_plan_free(alone);
	skip_without_nvrtc();
	kgen_error err = {0};

	cr_expect_eq(kgen_nvrtc_check(shared, "sm_90", &err), KGEN_OK, "%s\n%s",
		     err.message, err.log ? err.log : "");
	kgen_error_release(&err);
	free(shared);
	kgen_plan_free(warps);
	sched_graph_free(g);
}

/* Plan "text" of "g", whose CUDA holds "marker" "times" times, verifies
 * on "backend". */
static void expect_cuda_verified(kgen_backend *backend, const sched_graph *g,
				 const char *text, const char *marker, int times)
{
	kgen_plan *plan = read_plan(g, text);
	char *source = kgen_print_cuda(g, plan, 0);

	cr_expect_eq(occurrences(source, marker), times, "'%s'\n%s", marker, source);
	expect_verified(backend, g, text, 5, marker, NULL);
	free(source);
	kgen_plan_free(plan);
}

/* The CUDA of the groups the planner must accept and of the placements
 * runs on the emulated backend (the GPU's code on the cpu) and matches
 * the reference; so does ln_residual's with 4 threads sharing each row's
 * reductions by shuffles, and with 16 threads, which divide its rows,
 * walking its elementwise stages row by row. */
Test(fused, fused_cuda_kernels_verify_emulated)
{
	static const char shared_rows[] = "{\"kernels\": [{\"ops\": [0, 1, 2, 3], "
		"\"schedule\": {\"tile\": [4, 16], \"threads\": [2, 16]}}]}";
	static const char by_rows[] = "{\"kernels\": [{\"ops\": [0, 1, 2, 3], "
		"\"schedule\": {\"tile\": [4, 16], \"threads\": [1, 16]}}]}";
	kgen_backend *backend = NULL;
	kgen_error err = {0};
	sched_graph *g;

	cr_assert_eq(kgen_backend_open("emulated", &backend, &err), KGEN_OK, "%s",
		     err.message);
	for (size_t i = 0; i < sizeof(must_accept) / sizeof(must_accept[0]); i++) {
		g = example(must_accept[i].example);
		expect_verified(backend, g, must_accept[i].plan, 5, must_accept[i].example,
				NULL);
		sched_graph_free(g);
	}
	g = example("bert_qkv_small");
	for (size_t i = 0; i < NPLACEMENTS; i++)
		expect_verified(backend, g, placements[i], 5, "a placement", NULL);
	sched_graph_free(g);
	g = example("ln_residual_small");
	expect_cuda_verified(backend, g, shared_rows, "__shfl_xor_sync", 2);
	expect_cuda_verified(backend, g, by_rows, "for (idx_t row = 0; row < 4; row++)", 2);
	sched_graph_free(g);
	kgen_backend_close(backend);
}
