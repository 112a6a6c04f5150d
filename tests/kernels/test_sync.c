/*
 * test_sync.c: "sync" in plans (kernels/sync.c, print_sync.c). Plans with
 * sync read back as written; plans whose waits would hang, race or cycle
 * are refused with the reason; every sync variant of every example
 * compiles with NVRTC for sm_90 (skipped where libnvrtc is absent; only
 * printed in the sanitizer build); on
 * the cpu a synced plan runs in order and matches the reference. They
 * run on a GPU in the GPU suite (tests/gpu/run-gpu-suite).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_builder.h"
#include "kgen.h"

static const kgen_mma blocking = {64, 64, 32, 32, 32, 3, 0, 0, 0};

/* Under AddressSanitizer the sources are printed but not compiled:
 * LeakSanitizer's tracer crashes on the thread-local storage NVRTC
 * leaves behind. The strict build compiles every one. */
#ifdef __SANITIZE_ADDRESS__
#define COMPILE_WITH_NVRTC false
#else
#define COMPILE_WITH_NVRTC true
#endif

static sched_graph *example(const char *name)
{
	sched_graph *g = NULL;
	sched_error err = {0};

	cr_assert_eq(load_example(name, &g, &err), SCHED_OK, "%s: %s", name, err.message);
	return g;
}

/* The plan "text" of "g" read, or the refusal's message in "why". */
static int read_plan(const sched_graph *g, const char *text, kgen_plan **plan,
		     char *why, size_t size)
{
	json_t *json = json_loads(text, 0, NULL);
	kgen_error err = {0};
	int rc;

	cr_assert_not_null(json, "%s", text);
	rc = kgen_plan_from_json(g, json, plan, &err);
	snprintf(why, size, "%s", err.message);
	json_decref(json);
	return rc;
}

/* gpt3_mlp_small as three kernels h, g, y, g in 4 x 4 tiles (four to a
 * row): y waits on g by "y_sync", g on h by "g_sync" (JSON, or NULL). */
static char *mlp_plan(const char *g_sync, const char *y_sync)
{
	char *text = NULL;

	cr_assert(asprintf(&text, "{\"kernels\": [{\"name\": \"h\", \"ops\": [0]}, "
			   "{\"name\": \"g\", \"ops\": [1], \"schedule\": {\"tile\": [4, 4], "
			   "\"threads\": [4, 4]}%s%s}, {\"name\": \"y\", \"ops\": [2]%s%s}]}",
			   g_sync ? ", \"sync\": " : "", g_sync ? g_sync : "",
			   y_sync ? ", \"sync\": " : "", y_sync ? y_sync : "") > 0);
	return text;
}

static void expect_refused(const char *g_sync, const char *y_sync, const char *because)
{
	sched_graph *g = example("gpt3_mlp_small");
	char *text = mlp_plan(g_sync, y_sync), why[512];
	kgen_plan *plan = NULL;

	cr_expect_eq(read_plan(g, text, &plan, why, sizeof(why)), KGEN_EPLAN, "%s was read", text);
	cr_expect(strstr(why, because), "%s: %s", text, why);
	kgen_plan_free(plan);
	free(text);
	sched_graph_free(g);
}

Test(sync, a_plan_with_sync_reads_back_as_written)
{
	sched_graph *g = example("gpt3_mlp_small");
	char *text = mlp_plan("{\"after\": \"h\", \"policy\": \"tile\"}",
			      "{\"after\": \"g\", \"policy\": \"row\", \"wait_kernel\": false, "
			      "\"ordered\": false}");
	kgen_plan *plan = NULL;
	char why[512], *again;
	json_t *written;

	cr_assert_eq(read_plan(g, text, &plan, why, sizeof(why)), KGEN_OK, "%s", why);
	cr_expect(plan->kernels[2].sync.on && plan->kernels[2].sync.policy == SCHED_SYNC_ROW);
	cr_expect(!plan->kernels[2].sync.wait_kernel && !plan->kernels[2].sync.ordered);
	cr_expect(plan->kernels[1].sync.wait_kernel && plan->kernels[1].sync.ordered,
		  "the wait-kernel and the ordered tiles are on unless turned off");
	written = kgen_plan_to_json(g, plan);
	again = json_dumps(written, JSON_SORT_KEYS);
	cr_expect(strstr(again, "\"sync\": {\"after\": \"g\", \"ordered\": false, "
			 "\"policy\": \"row\", \"wait_kernel\": false}"), "%s", again);
	free(again);
	json_decref(written);
	kgen_plan_free(plan);
	free(text);
	sched_graph_free(g);
}

Test(sync, waits_that_would_cycle_are_refused)
{
	expect_refused(NULL, "{\"after\": \"y\", \"policy\": \"row\"}",
		       "kernel 'y' would wait on 'y', itself: a cycle of waits");
	expect_refused("{\"after\": \"y\", \"policy\": \"tile\"}", NULL,
		       "kernel 'g' would wait on 'y', launched after it: a cycle of waits");
}

Test(sync, only_the_kernel_just_before_can_be_waited_on)
{
	expect_refused(NULL, "{\"after\": \"h\", \"policy\": \"tile\"}",
		       "kernel 'y' may wait only on the kernel launched just before it ('g'), "
		       "not 'h'");
	expect_refused(NULL, "{\"after\": \"nobody\", \"policy\": \"tile\"}",
		       "which is no kernel of the plan");
	expect_refused(NULL, "{\"policy\": \"tile\"}", "'sync' needs 'after'");
}

Test(sync, a_policy_the_dependence_does_not_offer_is_refused)
{
	expect_refused("{\"after\": \"h\", \"policy\": \"row\"}", NULL,
		       "kernel 'g': policy 'row' does not fit its tile dependence on 'h' "
		       "(it offers tile)");
	expect_refused(NULL, "{\"after\": \"g\", \"policy\": \"diagonal\"}",
		       "'policy' must be tile, row, strided or conv2d");
	expect_refused(NULL, "{\"after\": \"g\", \"policy\": \"row\", \"eager\": true}",
		       "unknown key 'eager'");
	expect_refused(NULL, "{\"after\": \"g\", \"policy\": \"row\", \"ordered\": 1}",
		       "'ordered' must be true or false");
}

Test(sync, early_loads_need_a_tensor_core_product)
{
	expect_refused(NULL, "{\"after\": \"g\", \"policy\": \"row\", \"early_loads\": true}",
		       "kernel 'y': 'early_loads' needs a tensor-core product ('mma')");
}

/* A kernel whose reductions are cut in parts among blocks finishes its
 * tiles in no order: it neither waits nor is waited on. */
Test(sync, a_kernel_in_parts_does_not_sync)
{
	sched_graph *g = example("gpt3_mlp_small");
	char why[512];
	kgen_plan *plan = NULL;

	cr_expect_eq(read_plan(g, "{\"kernels\": [{\"name\": \"h\", \"ops\": [0]}, "
			       "{\"name\": \"g\", \"ops\": [1]}, {\"name\": \"y\", \"ops\": [2], "
			       "\"schedule\": {\"parts\": 2}, \"sync\": {\"after\": \"g\", "
			       "\"policy\": \"row\"}}]}", &plan, why, sizeof(why)), KGEN_EPLAN);
	cr_expect_str_eq(why, "kernel 'y': its reductions are cut in 2 parts, whose tiles "
			 "finish in no order");
	cr_expect_eq(read_plan(g, "{\"kernels\": [{\"name\": \"h\", \"ops\": [0], "
			       "\"schedule\": {\"parts\": 4}}, {\"name\": \"g\", \"ops\": [1], "
			       "\"sync\": {\"after\": \"h\", \"policy\": \"tile\"}}, "
			       "{\"name\": \"y\", \"ops\": [2]}]}", &plan, why, sizeof(why)),
		     KGEN_EPLAN);
	cr_expect_str_eq(why, "kernel 'h': its reductions are cut in 4 parts, whose tiles "
			 "finish in no order");
	kgen_plan_free(plan);
	sched_graph_free(g);
}

/* A consumer that reads a member of the producer's group other than the
 * root: its elements are not where the producer's tiles say. */
Test(sync, reading_a_producer_s_untiled_output_is_refused)
{
	sched_graph *g = NULL;
	sched_error serr = {0};
	kgen_plan *plan = NULL;
	char why[512];

	cr_assert_eq(load_graph("x f32 64,64 in; a f32 64,64; b f32 64,64; c f32 64,64 out",
				OPS("a[i, j] = x[i, j] * 2", "b[i, j] = a[i, j] + 1",
				    "c[i, j] = a[i, j] * b[i, j]"), &g, &serr), SCHED_OK,
		     "%s", serr.message);
	cr_expect_eq(read_plan(g, "{\"kernels\": [{\"name\": \"ab\", \"ops\": [0, 1]}, "
			       "{\"name\": \"c\", \"ops\": [2], \"sync\": {\"after\": \"ab\", "
			       "\"policy\": \"tile\"}}]}", &plan, why, sizeof(why)), KGEN_EPLAN);
	cr_expect(strstr(why, "kernel 'c' reads 'a', which kernel 'ab' writes outside its tiles"),
		  "%s", why);
	kgen_plan_free(plan);
	sched_graph_free(g);
}

Test(sync, both_grids_on_the_device_at_once)
{
	cr_expect(kgen_sync_co_resident(66, 2, 132, 2, 132), "33 + 66 multiprocessors of 132");
	cr_expect(!kgen_sync_co_resident(200, 2, 132, 2, 132), "100 + 66 of 132");
	cr_expect(!kgen_sync_co_resident(1, 0, 1, 1, 132), "a kernel that cannot run at all");
}

/* The default plan of "g", with "blocking" on every product that fits
 * tensor cores when "mma". */
static kgen_plan *plan_of(const sched_graph *g, bool mma)
{
	kgen_plan *plan = kgen_plan_default(g);

	for (int k = 0; mma && k < plan->nkernels; k++) {
		sched_contraction c;

		if (sched_op_contraction(g, plan->kernels[k].ops[0], &c) &&
		    !kgen_mma_operands_unfit(g, &c))
			plan->kernels[k].schedule.mma = blocking;
	}
	return plan;
}

/* Kernels k - 1 and k of "plan", with k's "sync", read back from JSON
 * (so proved) and compiled; false where NVRTC is absent. */
static bool expect_sync_compiles(const sched_graph *g, kgen_plan *plan, int k,
				 kgen_sync sync, const char *what)
{
	kgen_plan *read = NULL;
	kgen_error err = {0};
	json_t *json;
	bool nvrtc = true;

	plan->kernels[k].sync = sync;
	json = kgen_plan_to_json(g, plan);
	cr_assert_eq(kgen_plan_from_json(g, json, &read, &err), KGEN_OK, "%s: %s", what,
		     err.message);
	for (int i = k - 1; i <= k && nvrtc; i++) {
		char *source = kgen_print_cuda(g, read, i);
		int rc;

		cr_assert_not_null(source, "%s: kernel %d", what, i);
		cr_expect(strstr(source, i == k ? "ksync_wait(ksync_in" : "ksync_post(ksync_out"),
			  "%s: kernel %d neither waits nor posts", what, i);
		rc = COMPILE_WITH_NVRTC ? kgen_nvrtc_check(source, "sm_90", &err) : KGEN_OK;
		nvrtc = rc != KGEN_EBACKEND;
		cr_expect(rc == KGEN_OK || !nvrtc, "%s, kernel %d: %s\n%s\n%s", what, i,
			  err.message, err.log ? err.log : "", source);
		kgen_error_release(&err);
		free(source);
	}
	kgen_plan_free(read);
	json_decref(json);
	plan->kernels[k].sync = (kgen_sync){0};
	return nvrtc;
}

/* Every policy kernel k's dependence offers, with the defaults and with
 * every flag turned the other way. */
static int compile_every_variant(const sched_graph *g, kgen_plan *plan, int k,
				 const char *name)
{
	sched_sync *sync;
	int variants = 0;

	if (kgen_sync_analyse(g, plan, k, &sync, NULL) < 0)
		return 0;
	for (int i = 0; i < sync->npolicies; i++) {
		enum sched_sync_kind kind = sync->policies[i].kind;
		bool mma = plan->kernels[k].schedule.mma.bm != 0;
		char what[128];

		snprintf(what, sizeof(what), "%s kernel %d %s", name, k, sched_sync_kind_name(kind));
		if (!expect_sync_compiles(g, plan, k, (kgen_sync){true, kind, true, true, false},
					  what))
			cr_skip_test("NVRTC checks skipped: libnvrtc cannot be opened");
		/* without the wait-kernel: proved co-resident only on a device */
		expect_sync_compiles(g, plan, k, (kgen_sync){true, kind, false, false, mma}, what);
		variants += 2;
	}
	sched_sync_free(sync);
	return variants;
}

static const char *const examples[] = {
	"bert_qkv", "conv_pair", "gpt3_mlp_m256", "gpt3_mlp_m2048", "llama_mlp_m512",
	"lstm_cell", "mi_lstm_cell", "ln_residual", "softmax_scores",
};

ParameterizedTestParameters(sync, every_sync_variant_of_every_example_compiles)
{
	size_t n = sizeof(examples) / sizeof(*examples);
	int *indices = cr_malloc(n * sizeof(*indices));

	for (size_t i = 0; i < n; i++)
		indices[i] = (int)i;
	return cr_make_param_array(int, indices, n);
}

/* Examples with a global dependence between kernels have variants:
 * every one compiles. */
ParameterizedTest(int *index, sync, every_sync_variant_of_every_example_compiles)
{
	sched_graph *g = example(examples[*index]);
	int variants = 0;

	for (int mma = 0; mma < 2; mma++) {
		kgen_plan *plan = plan_of(g, mma);

		for (int k = 1; k < plan->nkernels; k++)
			variants += compile_every_variant(g, plan, k, examples[*index]);
		kgen_plan_free(plan);
	}
	cr_expect_gt(variants, 0, "%s: no kernel can wait on the one before it",
		     examples[*index]);
	sched_graph_free(g);
}

/* The cpu runs kernels in order whatever their sync says. */
Test(sync, on_the_cpu_a_synced_plan_runs_in_order)
{
	sched_graph *g = example("gpt3_mlp_small");
	char *text = mlp_plan("{\"after\": \"h\", \"policy\": \"tile\"}",
			      "{\"after\": \"g\", \"policy\": \"row\"}"), why[512];
	kgen_plan *plan = NULL;
	kgen_backend *cpu = NULL;
	kgen_program *program = NULL;
	kgen_error err = {0};
	kgen_check checks[4];

	cr_assert_eq(read_plan(g, text, &plan, why, sizeof(why)), KGEN_OK, "%s", why);
	cr_assert_eq(kgen_backend_open("cpu", &cpu, &err), KGEN_OK, "%s", err.message);
	cr_assert_eq(kgen_program_build(cpu, g, plan, NULL, &program, &err), KGEN_OK, "%s",
		     err.message);
	cr_expect_eq(kgen_verify(program, 7, checks, &err), KGEN_OK, "%s", err.message);
	kgen_program_free(program);
	kgen_backend_close(cpu);
	kgen_plan_free(plan);
	free(text);
	sched_graph_free(g);
}
