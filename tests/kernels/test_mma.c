/*
 * test_mma.c: tensor-core GEMM kernels (print_mma.c): every blocking of
 * every example's f16 products, and of odd shapes, compiles with NVRTC
 * for sm_90 (skipped, saying so, where libnvrtc is absent); plans that
 * misuse "mma" are refused with the reason. They run on a GPU in the GPU
 * suite (tests/gpu/run-gpu-suite), against the reference.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_builder.h"
#include "kgen.h"
#include "mma_products.h"

static const kgen_mma blockings[] = {
	{64, 64, 32, 32, 32, 3, 0, 0, 0}, {128, 128, 32, 64, 64, 2, 0, 1, 0},
	{128, 64, 32, 64, 32, 3, 0, 0, 0}, {32, 128, 16, 32, 32, 4, 0, 1, 0},
	{64, 256, 32, 64, 64, 2, 0, 0, 0}, {128, 128, 32, 64, 64, 2, 0, 0, 2},
	{64, 64, 32, 32, 32, 3, 0, 1, 4},
};

static char *mma_plan_text(const sched_graph *g, kgen_mma m)
{
	kgen_plan *plan = kgen_plan_default(g);
	json_t *json;
	char *text;

	for (int k = 0; k < plan->nkernels; k++) {
		sched_contraction c;
		const kgen_kernel *kernel = &plan->kernels[k];

		if (kgen_mma_product(g, kernel->ops[0], &c))
			plan->kernels[k].schedule.mma = m;
	}
	json = kgen_plan_to_json(g, plan);
	text = json_dumps(json, 0);
	json_decref(json);
	kgen_plan_free(plan);
	return text;
}

/* The plan of "g" with "m" on every product read back, and each
 * product's kernel compiled with NVRTC; false where NVRTC is absent. */
static bool expect_compiles(const sched_graph *g, kgen_mma m, const char *what)
{
	char *text = mma_plan_text(g, m);
	json_t *json = json_loads(text, 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};
	bool nvrtc = true;

	cr_assert_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_OK, "%s: %s", what,
		     err.message);
	for (int k = 0; k < plan->nkernels && nvrtc; k++) {
		char *source;
		int rc;

		if (!plan->kernels[k].schedule.mma.bm)
			continue;
		source = kgen_print_cuda(g, plan, k);
		cr_assert_not_null(strstr(source, "mma.sync.aligned.m16n8k16"));
		rc = kgen_nvrtc_check(source, "sm_90", &err);
		nvrtc = rc != KGEN_EBACKEND;
		cr_expect(rc == KGEN_OK || !nvrtc, "%s, kernel %d (bm %d bn %d bk %d wm %d "
			  "wn %d stages %d): %s\n%s", what, k, m.bm, m.bn, m.bk, m.wm, m.wn,
			  m.stages, err.message, err.log ? err.log : "");
		kgen_error_release(&err);
		free(source);
	}
	kgen_plan_free(plan);
	json_decref(json);
	free(text);
	return nvrtc;
}

Test(mma, every_blocking_of_the_examples_compiles)
{
	static const char *const names[] = {"bert_qkv", "gpt3_mlp_m256", "llama_mlp_small",
					    "gpt3_mlp_small"};

	for (size_t e = 0; e < sizeof(names) / sizeof(*names); e++) {
		sched_graph *g = NULL;
		sched_error serr = {0};

		cr_assert_eq(load_example(names[e], &g, &serr), SCHED_OK, "%s", serr.message);
		for (size_t b = 0; b < sizeof(blockings) / sizeof(*blockings); b++)
			if (!expect_compiles(g, blockings[b], names[e])) {
				sched_graph_free(g);
				cr_skip_test("libnvrtc is absent");
			}
		sched_graph_free(g);
	}
}

/* Shapes that no tile divides and one that all do, bf16 factors, f32
 * and bf16 outputs, a shifted B (mma_products.h). */
Test(mma, odd_shapes_and_dtypes_compile)
{
	for (size_t i = 0; i < NODD_PRODUCTS; i++) {
		sched_graph *g = NULL;
		sched_error serr = {0};

		cr_assert_eq(load_graph(odd_products[i][0], OPS(odd_products[i][1]), &g, &serr),
			     SCHED_OK, "%s", serr.message);
		if (!expect_compiles(g, blockings[0], odd_products[i][0])) {
			sched_graph_free(g);
			cr_skip_test("libnvrtc is absent");
		}
		sched_graph_free(g);
	}
}

/* A plan of "g"'s one op with blocking "mma" is refused for "reason";
 * frees "g". */
static void expect_refused_on(sched_graph *g, const char *mma, const char *reason)
{
	char text[512];
	json_t *json;
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	snprintf(text, sizeof(text), "{\"kernels\": [{\"ops\": [0], \"schedule\": "
		 "{\"mma\": {%s}}}]}", mma);
	json = json_loads(text, 0, NULL);
	cr_expect_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_EPLAN, "%s", mma);
	cr_expect_not_null(strstr(err.message, reason), "'%s', not '%s'", err.message,
			   reason);
	kgen_plan_free(plan);
	json_decref(json);
	sched_graph_free(g);
}

static void expect_refused(const char *tensors, const char *op, const char *mma,
			   const char *reason)
{
	sched_graph *g = NULL;
	sched_error serr = {0};

	cr_assert_eq(load_graph(tensors, OPS(op), &g, &serr), SCHED_OK, "%s", serr.message);
	expect_refused_on(g, mma, reason);
}

#define GOOD "\"bm\": 64, \"bn\": 64, \"bk\": 32, \"wm\": 32, \"wn\": 32, \"stages\": 2"

Test(mma, misuses_are_refused_with_the_reason)
{
	static const char f16[] = "a f16 64,32 in; b f16 32,64 in; y f16 64,64 out";
	static const char product[] = "y[i, j] = sum(k) a[i, k] * b[k, j]";

	expect_refused("a f32 64,32 in; b f32 32,64 in; y f32 64,64 out", product, GOOD,
		       "both f16 or both bf16");
	expect_refused("a f16 32,64 in; b f16 32,64 in; y f16 64,64 out",
		       "y[i, j] = sum(k) a[k, i] * b[k, j]", GOOD, "A with K contiguous");
	expect_refused("a f16 64,36 in; b f16 36,64 in; y f16 64,64 out", product, GOOD,
		       "rows starting on 8 elements");
	expect_refused(f16, product, "\"bm\": 64, \"bn\": 64, \"bk\": 32, \"wm\": 48, "
		       "\"wn\": 32, \"stages\": 2", "dividing bm");
	expect_refused(f16, product, "\"bm\": 256, \"bn\": 256, \"bk\": 64, \"wm\": 64, "
		       "\"wn\": 64, \"stages\": 2", "bytes of shared memory");
	expect_refused(f16, product, "\"bm\": 64, \"bn\": 64", "object of bm, bn, bk, wm, "
		       "wn and stages");
	expect_refused(f16, product, "\"bm\": 64, \"bn\": 64", "object of bm, bn, bk, wm, "
		       "wn and stages, and maybe raster, rotated, split_k");
	expect_refused(f16, product, "\"bm\": 64, \"bn\": 64, \"bk\": 32, \"wm\": 32, "
		       "\"wn\": 32, \"stage\": 2", "'mma' has no 'stages'");
	expect_refused("a f16 64,32 in; y f16 64 out", "y[i] = sum(k) a[i, k]", GOOD,
		       "one op that is a matrix product");
	expect_refused("x f16 8,10 in; m f16 8,10 in; w f16 16,8,3 in; y f16 16,8 out",
		       "y[k, p] = sum(c, r < 3) select(p + r >= 1 && p + r <= 8, "
		       "x[c, p + r - 1] * m[c, p + r - 1], 0) * w[k, c, r]", GOOD,
		       "one op that is a matrix product");
}

/* The launch shape: a block per bm x bn tile, a warp per wm x wn. */
Test(mma, a_block_per_tile_a_warp_per_warp_tile)
{
	sched_graph *g = NULL;
	sched_error serr = {0};
	kgen_plan *plan;
	unsigned blocks, threads;

	cr_assert_eq(load_graph("a f16 200,32 in; b f16 32,100 in; y f16 200,100 out",
				OPS("y[i, j] = sum(k) a[i, k] * b[k, j]"), &g, &serr), SCHED_OK);
	plan = kgen_plan_default(g);
	plan->kernels[0].schedule.mma = (kgen_mma){128, 64, 32, 64, 32, 2, 0, 0, 0};
	kgen_cuda_launch_shape(g, &plan->kernels[0], &blocks, &threads);
	cr_expect_eq(blocks, 2 * 2);
	cr_expect_eq(threads, 2 * 2 * 32);
	kgen_plan_free(plan);
	sched_graph_free(g);
}

static void expect_fused_refused(const char *example, const char *plan_text,
				 const char *reason)
{
	sched_graph *g = NULL;
	sched_error serr = {0};
	json_t *json = json_loads(plan_text, 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	cr_assert_eq(load_example(example, &g, &serr), SCHED_OK, "%s", serr.message);
	cr_expect_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_EPLAN, "%s", plan_text);
	cr_expect_not_null(strstr(err.message, reason), "'%s', not '%s'", err.message, reason);
	kgen_plan_free(plan);
	json_decref(json);
	sched_graph_free(g);
}

/* Kernel 0 of "plan" compiles with NVRTC for sm_90 (a warning where
 * libnvrtc is absent). */
static void expect_kernel_0_compiles(const sched_graph *g, const kgen_plan *plan)
{
	char *source = kgen_print_cuda(g, plan, 0);
	kgen_error err = {0};
	int rc = kgen_nvrtc_check(source, "sm_90", &err);

	if (rc == KGEN_EBACKEND)
		cr_log_warn("libnvrtc is absent: the kernel was not compiled");
	else
		cr_expect_eq(rc, KGEN_OK, "%s\n%s", err.message, err.log ? err.log : "");
	kgen_error_release(&err);
	free(source);
}

#define SMALL_MMA "\"mma\": {\"bm\": 16, \"bn\": 8, \"bk\": 16, \"wm\": 16, \"wn\": 8, " \
		  "\"stages\": 2}"

/* A fused kernel's "mma" runs its branches' first ops, matrix products,
 * on tensor cores (test_emulated.c runs such kernels): one that cannot is
 * refused with the reason; one that can compiles with NVRTC. */
Test(mma, fused_kernels_with_tensor_core_products)
{
	static const char qkv[] = "{\"kernels\": [{\"ops\": [0, 1, 2, 3, 4, 5, 6, 7, 8], "
		"\"lanes\": [0, 0, 1], \"schedule\": {\"tile\": [1, 4, 8], " SMALL_MMA "}}]}";
	sched_graph *g = NULL;
	sched_error serr = {0};
	json_t *json = json_loads(qkv, 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	expect_fused_refused("ln_residual_small", "{\"kernels\": [{\"ops\": [0, 1, 2, 3], "
			     "\"schedule\": {\"tile\": [2, 16], " SMALL_MMA "}}]}",
			     "each branch's first op a matrix product");
	expect_fused_refused("bert_qkv_small", "{\"kernels\": [{\"ops\": [0, 1, 2], "
			     "\"schedule\": {\"tile\": [2, 8, 8], " SMALL_MMA "}}, "
			     "{\"ops\": [3, 4, 5]}, {\"ops\": [6, 7, 8]}]}",
			     "region within bm x bn");
	expect_fused_refused("lstm_cell_small", "{\"kernels\": [{\"ops\": [0]}, "
			     "{\"ops\": [1, 2], \"schedule\": {\"tile\": [1, 8], " SMALL_MMA "}}, "
			     "{\"ops\": [3, 4, 5, 6, 7, 8]}]}", "both f16 or both bf16");
	cr_assert_eq(load_example("bert_qkv_small", &g, &serr), SCHED_OK, "%s", serr.message);
	cr_assert_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_OK, "%s", err.message);
	expect_kernel_0_compiles(g, plan);
	kgen_plan_free(plan);
	json_decref(json);
	sched_graph_free(g);
}

/* f32 factors take tensor cores (tf32, mma.sync m16n8k8) only where the
 * graph allows tf32: then the product compiles with NVRTC, its shared
 * memory counted for 4-byte elements; rows must start on 4 elements. */
Test(mma, tf32_where_the_graph_allows_it)
{
	static const char tensors[] = "a f32 64,32 in; b f32 32,64 in; y f32 64,64 out";
	static const char product[] = "y[i, j] = sum(k) a[i, k] * b[k, j]";
	const kgen_mma m = {64, 64, 32, 32, 32, 2, 0, 0, 0};
	sched_graph *g = NULL;
	sched_error serr = {0};
	kgen_plan *plan;
	char *source;

	expect_refused(tensors, product, GOOD, "both f32 where the graph allows tf32");
	cr_assert_eq(load_graph_tf32("a f32 64,30 in; b f32 30,64 in; y f32 64,64 out",
				     OPS(product), &g, &serr), SCHED_OK, "%s", serr.message);
	expect_refused_on(g, GOOD, "rows starting on 8 elements (4 of f32");
	cr_assert_eq(load_graph_tf32(tensors, OPS(product), &g, &serr), SCHED_OK);
	cr_expect_eq(kgen_mma_shared_bytes(&m, 4), 2 * (64 * 36 + 32 * 72) * 4);
	plan = kgen_plan_default(g);
	plan->kernels[0].schedule.mma = m;
	source = kgen_print_cuda(g, plan, 0);
	cr_expect_not_null(strstr(source, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
	expect_kernel_0_compiles(g, plan);
	free(source);
	kgen_plan_free(plan);
	sched_graph_free(g);
}

/* Field "key" of the first kernel's "mma" as kgen_plan_to_json writes it
 * back (0 when absent). */
static json_int_t written_back(const sched_graph *g, const kgen_plan *plan, const char *key)
{
	json_t *back = kgen_plan_to_json(g, plan);
	json_int_t value = json_integer_value(json_object_get(json_object_get(json_object_get(
		json_array_get(json_object_get(back, "kernels"), 0), "schedule"), "mma"), key));

	json_decref(back);
	return value;
}

/* Key "key" of "mma" at "value" on a product of 64 x 64: refused in a
 * fused kernel and at value "bad", written back, and no tiling to sync
 * on (the reason saying "why"). Returns the plan read, of graph *g. */
static kgen_plan *expect_one_product_key(sched_graph **g, const char *key, int value, int bad,
					 const char *why)
{
	static const char tensors[] = "a f16 64,32 in; b f16 32,64 in; y f16 64,64 out";
	static const char product[] = "y[i, j] = sum(k) a[i, k] * b[k, j]";
	char text[512], reason[96];
	sched_error serr = {0};
	kgen_plan *plan = NULL;
	kgen_error err = {0};
	sched_tiling tiling;
	json_t *json;

	snprintf(text, sizeof(text), "{\"kernels\": [{\"ops\": [0, 1, 2], \"schedule\": "
		 "{\"tile\": [1, 8, 8], \"mma\": {\"bm\": 16, \"bn\": 8, \"bk\": 16, "
		 "\"wm\": 16, \"wn\": 8, \"stages\": 2, \"%s\": 2}}}, {\"ops\": [3, 4, 5]}, "
		 "{\"ops\": [6, 7, 8]}]}", key);
	snprintf(reason, sizeof(reason), "'%s' is for a kernel of one matrix product", key);
	expect_fused_refused("bert_qkv_small", text, reason);
	snprintf(text, sizeof(text), GOOD ", \"%s\": %d", key, bad);
	snprintf(reason, sizeof(reason), "'%s'", key);
	expect_refused(tensors, product, text, reason);
	cr_assert_eq(load_graph(tensors, OPS(product), g, &serr), SCHED_OK);
	snprintf(text, sizeof(text), "{\"kernels\": [{\"ops\": [0], \"schedule\": {\"mma\": "
		 "{" GOOD ", \"%s\": %d}}}]}", key, value);
	json = json_loads(text, 0, NULL);
	cr_assert_eq(kgen_plan_from_json(*g, json, &plan, &err), KGEN_OK, "%s", err.message);
	json_decref(json);
	cr_expect_eq(written_back(*g, plan, key), value);
	cr_expect_eq(kgen_kernel_tiling(*g, &plan->kernels[0], &tiling, &err), KGEN_EPLAN);
	cr_expect_not_null(strstr(err.message, why), "%s", err.message);
	kgen_error_release(&err);
	return plan;
}

/* "raster" walks a product's tiles in groups of tile rows: written back
 * when above 1 (1 is row by row, as absent), refused in a fused kernel,
 * and a rastered kernel has no row-major tiling to sync on. */
Test(mma, raster_is_for_one_product_and_does_not_sync)
{
	sched_graph *g = NULL;
	kgen_plan *plan = expect_one_product_key(&g, "raster", 4, 0, "not row by row");

	cr_expect_eq(plan->kernels[0].schedule.mma.raster, 4);
	kgen_plan_free(plan);
	sched_graph_free(g);
}

/* Shared rows padded to an odd number of 16-byte chunks (none where B's
 * already is: bn 24), or rotated, which saves the padding; "rotated" is
 * written back when on and is 0 or 1. Both layouts compile (the
 * blockings above) and keep ldmatrix rows in different banks (the
 * emulated backend checks it). */
Test(mma, rotated_rows_save_the_padding)
{
	static const char tensors[] = "a f16 64,32 in; b f16 32,64 in; y f16 64,64 out";
	static const char product[] = "y[i, j] = sum(k) a[i, k] * b[k, j]";
	const kgen_mma padded = {64, 64, 32, 32, 32, 2, 0, 0, 0}, rotated = {64, 64, 32, 32, 32, 2, 0, 1, 0};
	const kgen_mma odd_b = {32, 24, 16, 16, 8, 2, 0, 0, 0};
	sched_graph *g = NULL;
	sched_error serr = {0};
	json_t *json = json_loads("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"mma\": "
				  "{" GOOD ", \"rotated\": 1}}}]}", 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	cr_expect_eq(kgen_mma_shared_bytes(&padded, 2), 2 * (64 * 40 + 32 * 72) * 2);
	cr_expect_eq(kgen_mma_shared_bytes(&rotated, 2), 2 * (64 * 32 + 32 * 64) * 2);
	cr_expect_eq(kgen_mma_shared_bytes(&odd_b, 2), 2 * (32 * 24 + 16 * 24) * 2);
	expect_refused(tensors, product, GOOD ", \"rotated\": 2", "'rotated'");
	cr_assert_eq(load_graph(tensors, OPS(product), &g, &serr), SCHED_OK);
	cr_assert_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_OK, "%s", err.message);
	cr_expect_eq(plan->kernels[0].schedule.mma.rotated, 1);
	cr_expect_eq(written_back(g, plan, "rotated"), 1);
	kgen_plan_free(plan);
	json_decref(json);
	sched_graph_free(g);
}

/* "split_k" cuts K in parts: written back when above 1 (1 is not cut, as
 * absent), refused in a fused kernel, no tiling to sync on, and scratch
 * memory for each part's tile and a counter per tile. */
Test(mma, split_k_is_for_one_product_and_does_not_sync)
{
	sched_graph *g = NULL;
	kgen_plan *plan = expect_one_product_key(&g, "split_k", 2, 17, "split_k");
	const kgen_mma *m = &plan->kernels[0].schedule.mma;
	size_t zeroed;

	cr_expect_eq(kgen_kernel_scratch_bytes(g, &plan->kernels[0], &zeroed),
		     (size_t)(64 / m->bm) * (64 / m->bn) * (2 * 4 * m->bm * m->bn + 4));
	cr_expect_eq(zeroed, (size_t)(64 / m->bm) * (64 / m->bn) * 4, "the counters alone");
	kgen_plan_free(plan);
	sched_graph_free(g);
}
