/*
 * test_nvrtc.c: the generated CUDA of every example, in every way of
 * splitting reductions (among threads, and in parts among blocks), and
 * the device probe's kernels compile with NVRTC
 * for sm_90 (H100). No GPU is needed; where libnvrtc is absent the tests
 * are skipped, saying so.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "kgen_int.h"
#include "random_graph.h"

static void skip_without_nvrtc(void)
{
	kgen_error err = {0};

	if (kgen_nvrtc_check("extern \"C\" __global__ void k(void) {}", "sm_90",
			     &err) == KGEN_EBACKEND)
		cr_skip_test("NVRTC checks skipped: %s", err.message);
	kgen_error_release(&err);
}

/* Compiles every kernel of the default plan, with reductions split as
 * "split" where the op has one, and cut in "parts" where it has as many
 * points. */
static void expect_compiles(const sched_graph *g, enum kgen_split split, int parts,
			    const char *what)
{
	kgen_plan *plan = kgen_plan_default(g);

	for (int k = 0; k < plan->nkernels; k++) {
		kgen_error err = {0};
		kgen_kernel *kernel = &plan->kernels[k];
		unsigned blocks, threads;
		char *source;

		kgen_cuda_launch_shape(g, kernel, &blocks, &threads);
		if (split == KGEN_SPLIT_BLOCK || (split == KGEN_SPLIT_WARP && threads % 32 == 0))
			kernel->schedule.split = split;
		if (kgen_kernel_op(g, kernel)->reducer != SCHED_RED_NONE &&
		    sched_op_reduction_points(kgen_kernel_op(g, kernel)) >= parts)
			kernel->schedule.parts = parts;
		source = kgen_print_cuda(g, plan, k);
		cr_expect_eq(kgen_nvrtc_check(source, "sm_90", &err), KGEN_OK,
			     "%s kernel %s: %s\n%s\n%s", what, kernel->name, err.message,
			     err.log ? err.log : "", source);
		kgen_error_release(&err);
		free(source);
	}
	kgen_plan_free(plan);
}

Test(nvrtc, every_example_compiles_for_sm_90, .timeout = 600)
{
	static const char *const names[] = {
		"bert_qkv", "conv_pair", "gpt3_mlp_m256", "gpt3_mlp_m2048",
		"llama_mlp_m512", "lstm_cell", "mi_lstm_cell", "ln_residual",
		"softmax_scores", "ln_grad_params",
	};

	skip_without_nvrtc();
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		sched_graph *g = NULL;
		sched_error err = {0};
		char path[512];

		snprintf(path, sizeof(path), "%s/examples/%s.json",
			 getenv("TUNED_SOURCE_ROOT"), names[i]);
		cr_assert_eq(sched_graph_read_file(path, &g, &err), SCHED_OK, "%s",
			     err.message);
		for (int split = KGEN_SPLIT_THREAD; split <= KGEN_SPLIT_BLOCK; split++)
			expect_compiles(g, split, split == KGEN_SPLIT_THREAD ? 1 : 4, names[i]);
		sched_graph_free(g);
	}
}

Test(nvrtc, random_graphs_compile, .timeout = 600)
{
	skip_without_nvrtc();
	for (unsigned seed = 1; seed <= 20; seed++) {
		char *text = random_graph_json(seed);
		sched_graph *g = NULL;
		sched_error err = {0};

		cr_assert_eq(sched_graph_read_string(text, &g, &err), SCHED_OK, "%s",
			     err.message);
		expect_compiles(g, seed % 3, seed % 2 ? 3 : 1, "random graph");
		sched_graph_free(g);
		free(text);
	}
}

Test(nvrtc, a_compile_error_comes_back_with_the_log)
{
	kgen_error err = {0};

	skip_without_nvrtc();
	cr_expect_eq(kgen_nvrtc_check("extern \"C\" __global__ void k(void) { nope; }",
				      "sm_90", &err), KGEN_ECOMPILE);
	cr_assert_not_null(err.log);
	cr_expect(strstr(err.log, "nope") != NULL, "%s", err.log);
	kgen_error_release(&err);
}

Test(nvrtc, the_probe_kernels_compile)
{
	const char *const *sources = kgen_probe_sources("cuda");

	skip_without_nvrtc();
	for (int i = 0; sources[i]; i++) {
		kgen_error err = {0};

		cr_expect_eq(kgen_nvrtc_check(sources[i], "sm_90", &err), KGEN_OK,
			     "%s\n%s\n%s", err.message, err.log ? err.log : "",
			     sources[i]);
		kgen_error_release(&err);
	}
}
