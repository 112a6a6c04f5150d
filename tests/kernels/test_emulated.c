/*
 * test_emulated.c: the emulated backend (backend_emulated.c) runs the
 * CUDA the cuda backend would run, on the cpu, and kgen_verify checks it
 * against the reference: tensor-core products (ldmatrix, mma.sync,
 * cp.async emulated) in odd shapes, dtypes and blockings, alone and with
 * fused epilogues, as tf32 and rastered; fused stages that move vectors;
 * the generic kernels with each split of their reductions (shuffles,
 * shared memory). And the emulator can fail: planted bugs in fragments,
 * loads and stores are caught, threads that wait at barriers never all
 * reached are reported as a deadlock, and what it cannot run is refused
 * with the reason.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_builder.h"
#include "kgen_int.h"
#include "mma_products.h"

static kgen_backend *open_emulated(void)
{
	kgen_backend *backend = NULL;
	kgen_error err = {0};

	cr_assert_eq(kgen_backend_open("emulated", &backend, &err), KGEN_OK, "%s",
		     err.message);
	return backend;
}

/* "plan" written out and read back, so that kgen_plan_from_json checks
 * what the test changed in it. */
static kgen_plan *checked(const sched_graph *g, kgen_plan *plan)
{
	json_t *json = kgen_plan_to_json(g, plan);
	kgen_plan *back = NULL;
	kgen_error err = {0};

	cr_assert_eq(kgen_plan_from_json(g, json, &back, &err), KGEN_OK, "%s", err.message);
	json_decref(json);
	kgen_plan_free(plan);
	return back;
}

/* Builds "plan" (with "sources" where not NULL) and verifies it "runs"
 * times on other inputs (so that what a run leaves behind counts); the
 * code, the error in "err". */
static int build_and_verify_runs(kgen_backend *backend, const sched_graph *g,
				 const kgen_plan *plan, const char *const *sources,
				 unsigned runs, kgen_error *err)
{
	kgen_program *prog = NULL;
	kgen_check checks[32];
	int rc = kgen_program_build(backend, g, plan, sources, &prog, err);

	for (unsigned seed = 7; rc == KGEN_OK && seed < 7 + runs; seed++)
		rc = kgen_verify(prog, seed, checks, err);
	kgen_program_free(prog);
	return rc;
}

static int build_and_verify(kgen_backend *backend, const sched_graph *g,
			    const kgen_plan *plan, const char *const *sources,
			    kgen_error *err)
{
	return build_and_verify_runs(backend, g, plan, sources, 1, err);
}

static void expect_verified(kgen_backend *backend, const sched_graph *g,
			    const kgen_plan *plan, const char *what)
{
	kgen_error err = {0};

	cr_expect_eq(build_and_verify(backend, g, plan, NULL, &err), KGEN_OK, "%s: %s\n%s",
		     what, err.message, err.log ? err.log : "");
	kgen_error_release(&err);
}

/* The default plan of "g" with "m" on every product tensor cores take
 * (kgen_mma_product). */
static kgen_plan *mma_plan(const sched_graph *g, kgen_mma m)
{
	kgen_plan *plan = kgen_plan_default(g);

	for (int k = 0; k < plan->nkernels; k++) {
		sched_contraction c;

		if (kgen_mma_product(g, plan->kernels[k].ops[0], &c))
			plan->kernels[k].schedule.mma = m;
	}
	return checked(g, plan);
}

/* The first rotated (the planted bugs use it), the others padded. */
static const kgen_mma blockings[] = {
	{64, 32, 32, 32, 16, 3, 0, 1, 0},
	{32, 64, 16, 16, 32, 2, 0, 0, 0},
	{64, 64, 32, 32, 32, 4, 0, 0, 0},
};
#define NBLOCKINGS (sizeof(blockings) / sizeof(*blockings))


Test(emulated, tensor_core_products_match_the_reference)
{
	kgen_backend *backend = open_emulated();
	char what[160];

	for (size_t i = 0; i < NODD_PRODUCTS; i++) {
		sched_graph *g = NULL;
		sched_error serr = {0};

		cr_assert_eq(load_graph(odd_products[i][0], OPS(odd_products[i][1]), &g, &serr),
			     SCHED_OK, "%s", serr.message);
		for (size_t b = 0; b < NBLOCKINGS; b++) {
			kgen_plan *plan = mma_plan(g, blockings[b]);

			snprintf(what, sizeof(what), "%s, blocking %zu", odd_products[i][0], b);
			expect_verified(backend, g, plan, what);
			kgen_plan_free(plan);
		}
		sched_graph_free(g);
	}
	kgen_backend_close(backend);
}

/* Blocks that walk the tiles in groups of tile rows (raster): 7 tile
 * rows in groups of 4 (a short last group) and of 8 (one short group),
 * every tile computed once. */
Test(emulated, rastered_tiles_match)
{
	static const kgen_mma rastered[] = {{16, 32, 16, 16, 16, 2, 4, 0, 0},
					    {16, 32, 16, 16, 16, 2, 8, 1, 0}};
	kgen_backend *backend = open_emulated();
	sched_graph *g = NULL;
	sched_error serr = {0};

	cr_assert_eq(load_graph("a f16 112,32 in; b f16 32,96 in; y f16 112,96 out",
				OPS("y[i, j] = sum(k) a[i, k] * b[k, j]"), &g, &serr), SCHED_OK);
	for (size_t r = 0; r < sizeof(rastered) / sizeof(*rastered); r++) {
		kgen_plan *plan = mma_plan(g, rastered[r]);
		char *source = kgen_print_cuda(g, plan, 0);

		cr_expect_eq(plan->kernels[0].schedule.mma.raster, rastered[r].raster);
		cr_expect_not_null(strstr(source, "in_group %"), "%s", source);
		expect_verified(backend, g, plan, "rastered");
		free(source);
		kgen_plan_free(plan);
	}
	sched_graph_free(g);
	kgen_backend_close(backend);
}

Test(emulated, the_small_examples_products_on_tensor_cores_match)
{
	static const char *const names[] = {"bert_qkv_small", "gpt3_mlp_small",
					    "llama_mlp_small"};
	kgen_backend *backend = open_emulated();

	for (size_t e = 0; e < sizeof(names) / sizeof(*names); e++) {
		sched_graph *g = NULL;
		sched_error serr = {0};
		kgen_plan *plan;

		cr_assert_eq(load_example(names[e], &g, &serr), SCHED_OK, "%s", serr.message);
		plan = mma_plan(g, blockings[0]);
		expect_verified(backend, g, plan, names[e]);
		kgen_plan_free(plan);
		sched_graph_free(g);
	}
	kgen_backend_close(backend);
}

/* Fused kernels whose products run on tensor cores with the rest of the
 * group as their epilogue (kgen_fused_mma_unfit): a bias add and a
 * transposed store (BERT's projection, several blocks and slices), a row
 * reduction after the product (a barrier between), bf16 factors with a
 * GELU and a residual add in f32, and the BERT example's projections one
 * kernel each and all three in one launch, side by side, one after
 * another or mixed. */
static const struct {
	const char *tensors, *ops[3], *plan;
} fused_products[] = {
	{"x f16 64,32 in; w f16 32,48 in; b f16 48 in; y f16 64,48; z f16 64,48; "
	 "q f16 3,64,16 out",
	 {"y[s, j] = sum(c) x[s, c] * w[c, j]", "z[s, j] = y[s, j] + b[j]",
	  "q[h, s, d] = z[s, h * 16 + d]"},
	 "{\"kernels\": [{\"ops\": [0, 1, 2], \"schedule\": {\"tile\": [1, 32, 16], \"mma\": "
	 "{\"bm\": 32, \"bn\": 16, \"bk\": 16, \"wm\": 16, \"wn\": 8, \"stages\": 2}}}]}"},
	{"x f16 64,32 in; w f16 32,32 in; h f16 64,32; m f32 64; y f16 64,32 out",
	 {"h[i, j] = sum(c) x[i, c] * w[c, j]", "m[i] = sum(j) h[i, j] / 32.0",
	  "y[i, j] = h[i, j] - m[i]"},
	 "{\"kernels\": [{\"ops\": [0, 1, 2], \"schedule\": {\"tile\": [16, 32], \"mma\": "
	 "{\"bm\": 16, \"bn\": 32, \"bk\": 16, \"wm\": 16, \"wn\": 16, \"stages\": 3}}}]}"},
	{"x bf16 48,64 in; w bf16 64,40 in; r f32 48,40 in; h f32 48,40; g f32 48,40; "
	 "y f32 48,40 out",
	 {"h[i, j] = sum(c) x[i, c] * w[c, j]", "g[i, j] = gelu_tanh(h[i, j])",
	  "y[i, j] = g[i, j] + r[i, j]"},
	 "{\"kernels\": [{\"ops\": [0, 1, 2], \"schedule\": {\"tile\": [32, 16], \"mma\": "
	 "{\"bm\": 32, \"bn\": 16, \"bk\": 32, \"wm\": 16, \"wn\": 16, \"stages\": 2}}}]}"},
};

#define QKV_MMA "\"mma\": {\"bm\": 16, \"bn\": 8, \"bk\": 16, \"wm\": 16, \"wn\": 8, " \
		"\"stages\": 2}"
static const char *const qkv_plans[] = {
	"{\"kernels\": [{\"ops\": [0, 1, 2], \"schedule\": {\"tile\": [1, 8, 8], " QKV_MMA "}}, "
	"{\"ops\": [3, 4, 5], \"schedule\": {\"tile\": [1, 8, 8], " QKV_MMA "}}, "
	"{\"ops\": [6, 7, 8], \"schedule\": {\"tile\": [1, 8, 8], " QKV_MMA "}}]}",
	"{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], \"lanes\": [0, 1, 2], "
	"\"schedule\": {\"tile\": [1, 4, 8], " QKV_MMA "}}]}",
	"{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], \"lanes\": [0, 0, 0], "
	"\"schedule\": {\"tile\": [1, 4, 8], " QKV_MMA "}}]}",
	"{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], \"lanes\": [0, 0, 1], "
	"\"schedule\": {\"tile\": [1, 4, 8], " QKV_MMA "}}]}",
};

static kgen_plan *plan_of_text(const sched_graph *g, const char *text)
{
	json_t *json = json_loads(text, 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	cr_assert_not_null(json, "%s", text);
	cr_assert_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_OK, "%s\n%s", err.message,
		     text);
	json_decref(json);
	return plan;
}

/* "text"'s kernels print their products on tensor cores, and it matches
 * the reference on the emulated backend. */
static void expect_fused_products_verified(kgen_backend *backend, const sched_graph *g,
					   const char *text)
{
	kgen_plan *plan = plan_of_text(g, text);

	for (int k = 0; k < plan->nkernels; k++) {
		char *source = kgen_print_cuda(g, plan, k);

		cr_expect_not_null(strstr(source, "compute_slice(acc"), "%s", source);
		free(source);
	}
	expect_verified(backend, g, plan, text);
	kgen_plan_free(plan);
}

Test(emulated, fused_epilogues_of_tensor_core_products_match)
{
	kgen_backend *backend = open_emulated();
	sched_graph *g = NULL;
	sched_error serr = {0};

	for (size_t i = 0; i < sizeof(fused_products) / sizeof(*fused_products); i++) {
		cr_assert_eq(load_graph(fused_products[i].tensors, OPS(fused_products[i].ops[0],
			     fused_products[i].ops[1], fused_products[i].ops[2]), &g, &serr),
			     SCHED_OK, "%s", serr.message);
		expect_fused_products_verified(backend, g, fused_products[i].plan);
		sched_graph_free(g);
	}
	cr_assert_eq(load_example("bert_qkv_small", &g, &serr), SCHED_OK, "%s", serr.message);
	for (size_t i = 0; i < sizeof(qkv_plans) / sizeof(*qkv_plans); i++)
		expect_fused_products_verified(backend, g, qkv_plans[i]);
	sched_graph_free(g);
	kgen_backend_close(backend);
}

/* The graph of "tensors" and "ops" with tf32 allowed. */
static sched_graph *tf32_graph(const char *tensors, const char *const *ops)
{
	sched_graph *g = NULL;
	sched_error serr = {0};

	cr_assert_eq(load_graph_tf32(tensors, ops, &g, &serr), SCHED_OK, "%s", serr.message);
	return g;
}

/* f32 factors on tensor cores as tf32 where the graph allows it (a
 * looser tolerance, 5e-3): edge and interior tiles, an f32 and an f16
 * output, a fused epilogue. */
Test(emulated, tf32_products_match_where_the_graph_allows_them)
{
	static const char *const cases[][2] = {
		{"a f32 100,72 in; b f32 72,40 in; y f32 100,40 out",
		 "y[i, j] = sum(k) a[i, k] * b[k, j]"},
		{"a f32 64,32 in; b f32 32,64 in; y f16 64,64 out",
		 "y[i, j] = sum(k) a[i, k] * b[k, j]"},
	};
	kgen_backend *backend = open_emulated();
	sched_graph *g;

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		g = tf32_graph(cases[i][0], OPS(cases[i][1]));

		for (size_t b = 0; b < NBLOCKINGS; b++) {
			kgen_mma m = blockings[b];
			kgen_plan *plan;
			char *source;

			kgen_mma_repair(&m, 4);
			plan = mma_plan(g, m);
			source = kgen_print_cuda(g, plan, 0);
			cr_expect_not_null(strstr(source, "mma_tf32(acc"), "%s", source);
			expect_verified(backend, g, plan, cases[i][0]);
			free(source);
			kgen_plan_free(plan);
		}
		sched_graph_free(g);
	}
	g = tf32_graph("x f32 64,32 in; w f32 32,48 in; b f32 48 in; y f32 64,48; "
		       "z f32 64,48 out", OPS("y[i, j] = sum(c) x[i, c] * w[c, j]",
					      "z[i, j] = relu(y[i, j] + b[j])"));
	expect_fused_products_verified(backend, g, "{\"kernels\": [{\"ops\": [0, 1], "
		"\"schedule\": {\"tile\": [32, 16], \"mma\": {\"bm\": 32, \"bn\": 16, "
		"\"bk\": 16, \"wm\": 16, \"wn\": 8, \"stages\": 3}}}]}");
	sched_graph_free(g);
	kgen_backend_close(backend);
}

/* Threads over a tile of "rank" dims, a power of two along each dim from
 * the last, 32 in all; false when the tile holds fewer elements so. */
static bool one_warp(const int64_t *tile, int rank, int *threads)
{
	int left = 32;

	for (int d = rank - 1; d >= 0; d--) {
		threads[d] = 1;
		while (threads[d] * 2 <= left && threads[d] * 2 <= tile[d])
			threads[d] *= 2;
		left /= threads[d];
	}
	return left == 1;
}

/* The default plan with every reduction of at least 32 elements split
 * "split" (a warp per element with shuffles, or the block through shared
 * memory), a warp a block. */
static kgen_plan *split_plan(const sched_graph *g, enum kgen_split split)
{
	kgen_plan *plan = kgen_plan_default(g);

	for (int k = 0; k < plan->nkernels; k++) {
		const sched_op *op = &g->ops[plan->kernels[k].ops[0]];
		kgen_schedule *s = &plan->kernels[k].schedule;
		int threads[SCHED_MAX_RANK];

		if (op->reducer == SCHED_RED_NONE ||
		    !one_warp(s->tile, g->tensors[op->target].rank, threads))
			continue;
		s->split = split;
		memcpy(s->threads, threads, sizeof(threads));
	}
	return checked(g, plan);
}

Test(emulated, generic_kernels_match_with_every_split)
{
	static const char *const names[] = {"ln_residual_small", "softmax_scores_small",
					    "lstm_cell_small", "mi_lstm_cell_small",
					    "conv_pair_small"};
	static const enum kgen_split splits[] = {KGEN_SPLIT_WARP, KGEN_SPLIT_BLOCK};
	kgen_backend *backend = open_emulated();
	char what[96];

	for (size_t e = 0; e < sizeof(names) / sizeof(*names); e++) {
		sched_graph *g = NULL;
		sched_error serr = {0};

		cr_assert_eq(load_example(names[e], &g, &serr), SCHED_OK, "%s", serr.message);
		kgen_plan *plan = kgen_plan_default(g);

		expect_verified(backend, g, plan, names[e]);
		kgen_plan_free(plan);
		for (size_t s = 0; s < sizeof(splits) / sizeof(*splits); s++) {
			plan = split_plan(g, splits[s]);

			snprintf(what, sizeof(what), "%s, split %zu", names[e], s);
			expect_verified(backend, g, plan, what);
			kgen_plan_free(plan);
		}
		sched_graph_free(g);
	}
	kgen_backend_close(backend);
}

/* Kernel k's "source" with "from" replaced by "to" (of the same length)
 * fails verification on "g" and "plan", in one run or two. */
static void expect_bug_caught_in_kernel(kgen_backend *backend, const sched_graph *g,
					const kgen_plan *plan, int k, const char *source,
					const char *from, const char *to)
{
	char *planted = strdup(source), *at = strstr(planted, from);
	const char **sources = calloc(plan->nkernels, sizeof(*sources));
	kgen_error err = {0};

	cr_assert_not_null(at, "no '%s' in\n%s", from, source);
	cr_assert_eq(strlen(from), strlen(to));
	cr_assert_not_null(sources);
	memcpy(at, to, strlen(to));
	sources[k] = planted;
	cr_expect_eq(build_and_verify_runs(backend, g, plan, sources, 2, &err),
		     KGEN_EWRONG, "kernel %d, '%s' as '%s': %s", k, from, to, err.message);
	kgen_error_release(&err);
	free(sources);
	free(planted);
}

static void expect_planted_bug_caught(kgen_backend *backend, const sched_graph *g,
				      const kgen_plan *plan, const char *source,
				      const char *from, const char *to)
{
	expect_bug_caught_in_kernel(backend, g, plan, 0, source, from, to);
}

/* The plan of "g" split "split" (split_plan; thread: the default plan)
 * with each reduction of at least "parts" points cut in that many. */
static kgen_plan *parts_plan(const sched_graph *g, enum kgen_split split, int parts)
{
	kgen_plan *plan = split == KGEN_SPLIT_THREAD ? kgen_plan_default(g) :
			  split_plan(g, split);

	for (int k = 0; k < plan->nkernels; k++) {
		const sched_op *op = &g->ops[plan->kernels[k].ops[0]];

		if (op->reducer != SCHED_RED_NONE && sched_op_reduction_points(op) >= parts)
			plan->kernels[k].schedule.parts = parts;
	}
	return checked(g, plan);
}

/* Column reductions (a bias's and a scale's gradients) over 200 rows and
 * a reduction to a scalar: few blocks unless their rows are cut. */
static sched_graph *column_sums(void)
{
	sched_graph *g = NULL;
	sched_error serr = {0};

	cr_assert_eq(load_graph("dy f16 200,40 in; x f16 200,40 in; db f32 40 out; "
				"dg bf16 40 out; n f32 - out",
				OPS("db[j] = sum(i) dy[i, j]",
				    "dg[j] = max(i) dy[i, j] * x[i, j]",
				    "n[] = sum(i, j) x[i, j] * x[i, j]"), &g, &serr),
		     SCHED_OK, "%s", serr.message);
	return g;
}

/* "g" in each split with reductions cut in parts[p] for each p of
 * "which" (a bit each) match the reference, twice on one program, so the
 * last block of each tile resets its count for the next run (else no
 * block would store the tile and the poisoned outputs would show). */
static void expect_parts_verified(kgen_backend *backend, const sched_graph *g,
				  const char *name, unsigned which)
{
	static const int parts[] = {2, 3, 7};
	char what[96];

	for (int split = KGEN_SPLIT_THREAD; split <= KGEN_SPLIT_BLOCK; split++)
		for (size_t p = 0; p < sizeof(parts) / sizeof(*parts); p++) {
			kgen_plan *plan;
			kgen_error err = {0};

			if (!(which >> ((split + p) % 3) & 1))
				continue;
			plan = parts_plan(g, split, parts[p]);
			snprintf(what, sizeof(what), "%s, split %d, %d parts", name, split,
				 parts[p]);
			cr_expect_eq(build_and_verify_runs(backend, g, plan, NULL, 2, &err),
				     KGEN_OK, "%s: %s\n%s", what, err.message,
				     err.log ? err.log : "");
			kgen_error_release(&err);
			kgen_plan_free(plan);
		}
}

/* Reductions cut in 2, 3 and 7 parts, a block each: column_sums' (whose
 * points the parts do not divide) in every split, and the examples' in
 * each split with one of them, each example another. */
Test(emulated, reductions_cut_in_parts_match)
{
	static const char *const names[] = {"ln_residual_small", "softmax_scores_small",
					    "mi_lstm_cell_small", "conv_pair_small"};
	kgen_backend *backend = open_emulated();
	sched_graph *g = column_sums();

	expect_parts_verified(backend, g, "column sums", 7);
	sched_graph_free(g);
	for (size_t e = 0; e < sizeof(names) / sizeof(*names); e++) {
		sched_error serr = {0};

		cr_assert_eq(load_example(names[e], &g, &serr), SCHED_OK, "%s", serr.message);
		expect_parts_verified(backend, g, names[e], 1u << e % 3);
		sched_graph_free(g);
	}
	kgen_backend_close(backend);
}

/* Planted in reductions cut in parts: a part left out of the combination,
 * every part's results written to the first part's place, and a count
 * not reset (caught on the second run). */
Test(emulated, planted_bugs_in_parts_are_caught)
{
	static const char *const bugs[][2] = {{"int s = 1; s <", "int s = 2; s <"},
					       {"+ part) *", "+ 0   ) *"},
					       {"*done = 0;", "*done = 1;"}};
	kgen_backend *backend = open_emulated();
	sched_graph *g = column_sums();
	kgen_plan *plan = parts_plan(g, KGEN_SPLIT_WARP, 3);

	for (int k = 0; k < plan->nkernels; k++) {
		char *source = kgen_print_cuda(g, plan, k);

		for (size_t b = 0; b < sizeof(bugs) / sizeof(*bugs); b++)
			expect_bug_caught_in_kernel(backend, g, plan, k, source, bugs[b][0],
						    bugs[b][1]);
		free(source);
	}
	kgen_plan_free(plan);
	sched_graph_free(g);
	kgen_backend_close(backend);
}

/* The product of "g" printed in "blocking": verified as printed, and
 * each planted bug ("from" as "to") caught. Frees "g". */
static void expect_bugs_caught_in(kgen_backend *backend, sched_graph *g, kgen_mma blocking,
				  const char *const (*bugs)[2], int nbugs)
{
	kgen_plan *plan;
	char *source;

	plan = mma_plan(g, blocking);
	source = kgen_print_cuda(g, plan, 0);
	expect_verified(backend, g, plan, "the source as printed");
	for (int b = 0; b < nbugs; b++)
		expect_planted_bug_caught(backend, g, plan, source, bugs[b][0], bugs[b][1]);
	free(source);
	kgen_plan_free(plan);
	sched_graph_free(g);
}

/* The same in blocking 0. */
static void expect_bugs_caught(kgen_backend *backend, sched_graph *g,
			       const char *const (*bugs)[2], int nbugs)
{
	expect_bugs_caught_in(backend, g, blockings[0], bugs, nbugs);
}

/* Fused stages whose threads run "vector" consecutive elements and move
 * them at once (print_fused.c): f16, bf16 and f32 tensors (moves of 4 to
 * 32 bytes), local and global reads and keeps, a reversed read that
 * stays an element at a time, tiles whose columns the vector divides and
 * one it does not (no moves then); and ln_residual's reductions, shared
 * by threads, folding runs of "vector" points of their rows. */
static const char *const ln_vectors[] = {
	"{\"kernels\": [{\"ops\": [0, 1, 2, 3], \"schedule\": {\"tile\": [2, 16], "
	"\"threads\": [2, 16], \"vector\": 2}}]}",
	"{\"kernels\": [{\"ops\": [0, 1, 2, 3], \"schedule\": {\"tile\": [2, 16], "
	"\"threads\": [2, 16], \"vector\": 4}}]}",
	"{\"kernels\": [{\"ops\": [0, 1, 2, 3], \"schedule\": {\"tile\": [4, 16], "
	"\"threads\": [2, 16], \"vector\": 8}}]}",
};

static const struct {
	const char *plan;
	bool moves;
} mixed_vectors[] = {
	{"{\"kernels\": [{\"ops\": [0, 1], \"schedule\": {\"tile\": [3, 40], "
	 "\"threads\": [1, 32], \"vector\": 4}}]}", true},
	{"{\"kernels\": [{\"ops\": [0, 1], \"schedule\": {\"tile\": [3, 40], "
	 "\"threads\": [1, 32], \"vector\": 8}}]}", true},
	{"{\"kernels\": [{\"ops\": [0, 1], \"schedule\": {\"tile\": [2, 8], "
	 "\"threads\": [1, 8], \"vector\": 8}}]}", true},
	{"{\"kernels\": [{\"ops\": [0, 1], \"schedule\": {\"tile\": [3, 20], "
	 "\"threads\": [1, 16], \"vector\": 8}}]}", false},
};

/* Each plan verified, printed with moves where it should be. */
static void expect_vector_plans_verified(kgen_backend *backend, const sched_graph *g,
					 const char *plan_text, bool moves, bool folds)
{
	kgen_plan *plan = plan_of_text(g, plan_text);
	char *source = kgen_print_cuda(g, plan, 0);

	cr_expect_eq(strstr(source, "for (int u = 0; u <") != NULL, moves, "%s\n%s", plan_text, source);
	cr_expect_eq(strstr(source, "float xs = ") != NULL, folds, "%s\n%s", plan_text, source);
	expect_verified(backend, g, plan, plan_text);
	free(source);
	kgen_plan_free(plan);
}

static sched_graph *mixed_dtypes(void)
{
	sched_graph *g = NULL;
	sched_error serr = {0};

	cr_assert_eq(load_graph("x f16 6,40 in; b f32 40 in; s f32 6,40; y bf16 6,40 out",
				OPS("s[i, j] = x[i, j] * 2.0 + b[j]",
				    "y[i, j] = s[i, j] * x[i, 39 - j]"), &g, &serr),
		     SCHED_OK, "%s", serr.message);
	return g;
}

/* The moves' path of "plan_text" runs: bugs planted in it (every element
 * reading the first of its vector; a reduction's runs subtracted) are
 * caught. And the path of an element per thread, which runs where a
 * move would be off its width (planted: the conditions that open the
 * moves' paths made false), matches. */
static void expect_vector_path_checked(kgen_backend *backend, const sched_graph *g,
				       const char *plan_text)
{
	kgen_plan *plan = plan_of_text(g, plan_text);
	char *source = kgen_print_cuda(g, plan, 0), *fallback = strdup(source), *at;
	int conditions = 0;
	kgen_error err = {0};

	expect_planted_bug_caught(backend, g, plan, source, "vec_0[u]", "vec_0[0]");
	expect_planted_bug_caught(backend, g, plan, source, "x += term;", "x -= term;");
	for (at = fallback; (at = strstr(at, ") & 15) == 0")); conditions++)
		at[strlen(") & 15) == ")] = '9';
	cr_expect_geq(conditions, 4, "%s", source);
	cr_expect_eq(build_and_verify(backend, g, plan, (const char *const[]){fallback}, &err),
		     KGEN_OK, "%s\n%s", err.message, fallback);
	kgen_error_release(&err);
	free(fallback);
	free(source);
	kgen_plan_free(plan);
}

Test(emulated, fused_stages_moving_vectors_match)
{
	kgen_backend *backend = open_emulated();
	sched_graph *g = NULL;
	sched_error serr = {0};

	cr_assert_eq(load_example("ln_residual_small", &g, &serr), SCHED_OK, "%s", serr.message);
	for (size_t i = 0; i < sizeof(ln_vectors) / sizeof(*ln_vectors); i++)
		expect_vector_plans_verified(backend, g, ln_vectors[i], true, true);
	expect_vector_path_checked(backend, g, ln_vectors[2]);
	sched_graph_free(g);
	g = mixed_dtypes();
	for (size_t i = 0; i < sizeof(mixed_vectors) / sizeof(*mixed_vectors); i++)
		expect_vector_plans_verified(backend, g, mixed_vectors[i].plan,
					     mixed_vectors[i].moves, false);
	sched_graph_free(g);
	kgen_backend_close(backend);
}

static sched_graph *odd_product(size_t i)
{
	sched_graph *g = NULL;
	sched_error serr = {0};

	cr_assert_eq(load_graph(odd_products[i][0], OPS(odd_products[i][1]), &g, &serr),
		     SCHED_OK);
	return g;
}

/* K cut in 2 and 3 parts (split_k): every odd product matches the
 * reference, twice on one program, so the last block of each tile resets
 * its count for the next run (else no block would store the tile and the
 * poisoned outputs would show); a part left out of the sum is caught. */
Test(emulated, split_k_products_match)
{
	static const kgen_mma cut[] = {{32, 32, 16, 16, 16, 2, 0, 0, 2},
				       {16, 32, 16, 16, 8, 3, 0, 1, 3}};
	static const char *const bug[][2] = {{"for (int s = 0; s < SPLIT;",
					      "for (int s = 1; s < SPLIT;"}};
	kgen_backend *backend = open_emulated();
	char what[160];

	for (size_t i = 0; i < NODD_PRODUCTS; i++) {
		sched_graph *g = odd_product(i);

		for (size_t b = 0; b < sizeof(cut) / sizeof(*cut); b++) {
			kgen_plan *plan = mma_plan(g, cut[b]);
			kgen_program *prog = NULL;
			kgen_check checks[4];
			kgen_error err = {0};

			snprintf(what, sizeof(what), "%s, split_k %d", odd_products[i][0],
				 cut[b].split_k);
			cr_assert_eq(kgen_program_build(backend, g, plan, NULL, &prog, &err),
				     KGEN_OK, "%s: %s\n%s", what, err.message, err.log ? err.log : "");
			for (unsigned seed = 1; seed <= 2; seed++)
				cr_expect_eq(kgen_verify(prog, seed, checks, &err), KGEN_OK,
					     "%s, seed %u: %s", what, seed, err.message);
			kgen_error_release(&err);
			kgen_program_free(prog);
			kgen_plan_free(plan);
		}
		sched_graph_free(g);
	}
	expect_bugs_caught_in(backend, odd_product(0), cut[0], bug, 1);
	kgen_backend_close(backend);
}

/* A product on tensor cores of graph_builder's kind, f32 factors as tf32
 * where "tf32". */
typedef struct mma_case {
	const char *tensors, *op;
	bool tf32;
} mma_case;

/* Each case in blockings "cut" (two) verified, and "bug" planted in the
 * first case's first blocking caught. */
static void expect_cases_verified(const mma_case *cases, size_t ncases,
				  const kgen_mma *cut, const char *const (*bug)[2])
{
	kgen_backend *backend = open_emulated();
	char what[320];

	for (size_t i = 0; i < ncases; i++) {
		sched_graph *g = NULL;
		sched_error serr = {0};

		cr_assert_eq((cases[i].tf32 ? load_graph_tf32 : load_graph)(
				     cases[i].tensors, OPS(cases[i].op), &g, &serr),
			     SCHED_OK, "%s", serr.message);
		for (size_t b = 0; b < 2; b++) {
			kgen_plan *plan = mma_plan(g, cut[b]);

			cr_assert_gt(plan->kernels[0].schedule.mma.bm, 0, "%s", cases[i].tensors);
			snprintf(what, sizeof(what), "%s: %s, blocking %zu", cases[i].tensors,
				 cases[i].op, b);
			expect_verified(backend, g, plan, what);
			kgen_plan_free(plan);
		}
		if (i == 0)
			expect_bugs_caught_in(backend, g, cut[0], bug, 1);
		else
			sched_graph_free(g);
	}
	kgen_backend_close(backend);
}

/* Batches of products on tensor cores, a block per tile of one product:
 * P V per head (f16, C stored 16 bytes at a time), heads in the middle
 * of an f32 C (stored element by element), two batch vars as tf32; each
 * in a plain blocking and one with raster, rotated rows and K in parts;
 * and a planted bug, A's offset in the batch dropped, caught. */
Test(emulated, batched_products_match)
{
	static const mma_case cases[] = {
		{"p f16 3,40,32 in; v f16 3,32,48 in; o f16 3,40,48 out",
		 "o[h, i, d] = sum(j) p[h, i, j] * v[h, j, d]", false},
		{"p bf16 3,24,40 in; v bf16 3,40,16 in; o f32 24,3,16 out",
		 "o[i, h, d] = sum(j) p[h, i, j] * v[h, j, d]", false},
		{"a f32 2,3,20,16 in; b f32 2,3,16,24 in; y f32 2,3,20,24 out",
		 "y[s, t, i, j] = sum(k) a[s, t, i, k] * b[s, t, k, j]", true},
	};
	static const kgen_mma cut[] = {{32, 32, 16, 16, 16, 2, 0, 0, 0},
				       {32, 16, 16, 16, 8, 3, 2, 1, 2}};
	static const char *const bug[][2] = {{"+ batch * ", "+ 0     * "}};

	expect_cases_verified(cases, sizeof(cases) / sizeof(*cases), cut, bug);
}

#define CONV_6X6 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && " \
	"p + r <= 6 && q + s >= 1 && q + s <= 6, x[n, c, p + r - 1, q + s - 1], 0) * " \
	"w[k, c, r, s]"

/* Convolutions as implicit GEMMs on tensor cores: w as A, the padded
 * windows of x as B, evaluated as each slice is loaded (bf16 into an f32
 * output, f32 as tf32); in a plain blocking and one with rotated rows and
 * K in parts; and a planted bug, a window's column read from the wrong
 * tap, caught. */
Test(emulated, convolutions_run_as_implicit_gemms)
{
	static const mma_case cases[] = {
		{"x bf16 1,8,6,6 in; w bf16 24,8,3,3 in; y f32 1,24,6,6 out", CONV_6X6, false},
		{"x f32 1,4,6,6 in; w f32 8,4,3,3 in; y f32 1,8,6,6 out", CONV_6X6, true},
	};
	static const kgen_mma cut[] = {{32, 32, 16, 16, 16, 2, 0, 0, 0},
				       {16, 64, 16, 16, 32, 3, 0, 1, 2}};
	static const char *const bug[][2] = {{"k / 1 % 3", "k / 3 % 3"}};

	expect_cases_verified(cases, sizeof(cases) / sizeof(*cases), cut, bug);
}

/* Planted bugs the emulator must not pass: interior tiles whose slices
 * of A repeat rows (the exactly-sized path runs), a staged epilogue that
 * stores each pair of columns' first element twice (an f16 C), shared
 * rows not rotated (the results stay right, but ldmatrix rows share
 * banks), an epilogue that stores each pair swapped (an f32 C, stored
 * directly), and tf32 fragments of B whose second half repeats the
 * first. */
Test(emulated, planted_bugs_are_caught)
{
	static const char *const staged[][2] = {
		{"A + (m0 + row) * LDA", "A + (m0 + row/2)*LDA"},
		{"acc[i][j][2 * h + 1]", "acc[i][j][2 * h + 0]"},
		{"(r) / (g)", "(0) * (g)"},
	};
	static const char *const direct[][2] = {{"+ (r & 1);", "+ (r ^ 1);"}};
	static const char *const tf32[][2] = {{"B_AT(kk + t + 4, c)", "B_AT(kk + t + 0, c)"}};
	kgen_backend *backend = open_emulated();

	expect_bugs_caught(backend, odd_product(0), staged, 2);
	expect_bugs_caught(backend, odd_product(1), direct, 1);
	expect_bugs_caught(backend, tf32_graph("a f32 64,32 in; b f32 32,64 in; y f32 64,64 out",
					       OPS("y[i, j] = sum(k) a[i, k] * b[k, j]")),
			   tf32, 1);
	kgen_backend_close(backend);
}

/* Odd threads wait at __syncthreads() while even ones shuffle: no wait
 * can end, and the emulator says so instead of hanging. */
Test(emulated, a_deadlock_is_reported)
{
	static const char source[] =
		"extern \"C\" __global__ void k0_y(const float *__restrict__ t_x, "
		"float *__restrict__ t_y)\n"
		"{\n"
		"\tfloat v = t_x[threadIdx.x];\n"
		"\tif (threadIdx.x % 2)\n\t\t__syncthreads();\n"
		"\telse\n\t\tv = __shfl_xor_sync(0xffffffffu, v, 2);\n"
		"\tt_y[threadIdx.x] = v;\n"
		"}\n";
	sched_graph *g = NULL;
	sched_error serr = {0};
	kgen_backend *backend = open_emulated();
	kgen_plan *plan;
	kgen_error err = {0};

	cr_assert_eq(load_graph("x f32 32 in; y f32 32 out", OPS("y[i] = x[i]"), &g, &serr),
		     SCHED_OK);
	plan = kgen_plan_default(g);
	cr_expect_eq(build_and_verify(backend, g, plan, (const char *const[]){source}, &err),
		     KGEN_EWRONG);
	cr_expect_not_null(strstr(err.message, "deadlock"), "%s", err.message);
	kgen_error_release(&err);
	kgen_plan_free(plan);
	sched_graph_free(g);
	kgen_backend_close(backend);
}

static void expect_refused(kgen_backend *backend, const char *example, const char *plan_text,
			   int code, const char *reason)
{
	sched_graph *g = NULL;
	sched_error serr = {0};
	json_t *json = json_loads(plan_text, 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};
	const char *said;

	cr_assert_eq(load_example(example, &g, &serr), SCHED_OK, "%s", serr.message);
	cr_assert_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_OK, "%s", err.message);
	cr_expect_eq(build_and_verify(backend, g, plan, NULL, &err), code, "%s", err.message);
	said = code == KGEN_ECOMPILE ? err.log : err.message;
	cr_expect(said && strstr(said, reason), "'%s', not '%s'", said ? said : "", reason);
	kgen_error_release(&err);
	kgen_plan_free(plan);
	json_decref(json);
	sched_graph_free(g);
}

Test(emulated, sync_and_library_steps_are_refused)
{
	kgen_backend *backend = open_emulated();
	char *sync_plan = NULL;
	size_t size;
	FILE *f;
	char path[512];

	snprintf(path, sizeof(path), "%s/tests/gpu/plans/bert_qkv_small.sync.json",
		 getenv("TUNED_SOURCE_ROOT"));
	cr_assert_not_null(f = fopen(path, "r"), "%s", path);
	cr_assert_geq(getdelim(&sync_plan, &size, '\0', f), 0);
	fclose(f);
	expect_refused(backend, "bert_qkv_small", sync_plan, KGEN_ECOMPILE, "needs a GPU");
	expect_refused(backend, "gpt3_mlp_small", "{\"kernels\": [{\"ops\": [0], \"schedule\": "
		       "{\"library\": true}}, {\"ops\": [1]}, {\"ops\": [2]}]}",
		       KGEN_EBACKEND, "the emulated backend cannot run");
	free(sync_plan);
	kgen_backend_close(backend);
}
