/*
 * test_cpu.c: the cpu backend end to end: every example's small variant,
 * random graphs, schedules whose tiles do not divide the shapes, and
 * kernels planted to be wrong, to leave elements unwritten or not to
 * compile; kernels compiled into a shared folder and loaded from it by
 * another backend with no compiler; the device probe.
 */
#include <criterion/criterion.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph_builder.h"
#include "kgen.h"
#include "random_graph.h"

typedef struct bench {
	kgen_backend *backend;
	sched_graph *graph;
	kgen_plan *plan;
	kgen_program *prog;
	kgen_check checks[16];
	kgen_error err;
} bench;

static void open_cpu(bench *b)
{
	cr_assert_eq(kgen_backend_open("cpu", &b->backend, &b->err), KGEN_OK, "%s",
		     b->err.message);
}

static void close_bench(bench *b)
{
	kgen_program_free(b->prog);
	kgen_plan_free(b->plan);
	sched_graph_free(b->graph);
	kgen_backend_close(b->backend);
	kgen_error_release(&b->err);
	*b = (bench){0};
}

/* The default plan of a graph of one op, built. */
static void build_one_op(bench *b, const char *tensors, const char *op)
{
	sched_error serr = {0};

	cr_assert_eq(load_graph(tensors, OPS(op), &b->graph, &serr), SCHED_OK, "%s",
		     serr.message);
	b->plan = kgen_plan_default(b->graph);
	cr_assert_eq(kgen_program_build(b->backend, b->graph, b->plan, NULL, &b->prog, &b->err),
		     KGEN_OK, "%s", b->err.message);
}

/* Builds and verifies; returns the code and leaves the bench open. */
static int build_and_verify(bench *b, const char *const *sources, unsigned seed)
{
	int rc = kgen_program_build(b->backend, b->graph, b->plan, sources,
				    &b->prog, &b->err);

	return rc < 0 ? rc : kgen_verify(b->prog, seed, b->checks, &b->err);
}

static void expect_verified_file(const char *name)
{
	bench b = {0};
	sched_error serr = {0};
	char path[512];
	int rc;

	snprintf(path, sizeof(path), "%s/examples/%s.json", getenv("TUNED_SOURCE_ROOT"),
		 name);
	open_cpu(&b);
	cr_assert_eq(sched_graph_read_file(path, &b.graph, &serr), SCHED_OK, "%s",
		     serr.message);
	b.plan = kgen_plan_default(b.graph);
	rc = build_and_verify(&b, NULL, 7);
	cr_expect_eq(rc, KGEN_OK, "%s: %s\n%s", name, b.err.message,
		     b.err.log ? b.err.log : "");
	close_bench(&b);
}

Test(cpu, every_example_small_variant_verifies, .timeout = 300)
{
	static const char *const names[] = {
		"bert_qkv_small", "conv_pair_small", "gpt3_mlp_small", "llama_mlp_small",
		"lstm_cell_small", "mi_lstm_cell_small", "ln_residual_small",
		"softmax_scores_small", "ln_grad_params_small",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		expect_verified_file(names[i]);
}

Test(cpu, random_graphs_verify, .timeout = 600)
{
	for (unsigned seed = 1; seed <= 24; seed++) {
		char *text = random_graph_json(seed);
		bench b = {0};
		sched_error serr = {0};
		int rc;

		open_cpu(&b);
		cr_assert_eq(sched_graph_read_string(text, &b.graph, &serr), SCHED_OK,
			     "seed %u: %s", seed, serr.message);
		b.plan = kgen_plan_default(b.graph);
		rc = build_and_verify(&b, NULL, seed);
		cr_expect_eq(rc, KGEN_OK, "seed %u: %s\n%s\n%s", seed, b.err.message,
			     text, b.err.log ? b.err.log : "");
		close_bench(&b);
		free(text);
	}
}

#define ODD "x f32 37,29 in; w f32 29,23 in; b f32 23 in; y f32 37,23 out; " \
	    "z f32 37,23 out"

static void verify_with_plan(const char *plan_text)
{
	bench b = {0};
	sched_error serr = {0};
	json_t *json = json_loads(plan_text, 0, NULL);
	int rc;

	open_cpu(&b);
	cr_assert_eq(load_graph(ODD, OPS("y[i, j] = sum(k) x[i, k] * w[k, j]",
					 "z[i, j] = max(y[i, j] + b[j], 0)"),
				&b.graph, &serr), SCHED_OK);
	cr_assert_eq(kgen_plan_from_json(b.graph, json, &b.plan, &b.err), KGEN_OK,
		     "%s", b.err.message);
	rc = build_and_verify(&b, NULL, 3);
	cr_expect_eq(rc, KGEN_OK, "%s: %s", plan_text, b.err.message);
	json_decref(json);
	close_bench(&b);
}

Test(cpu, tiles_that_do_not_divide_the_shape)
{
	verify_with_plan("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"tile\": [5, 7], "
			 "\"parallel\": 2, \"unroll\": 8, \"vector\": 4}}, {\"ops\": [1], "
			 "\"schedule\": {\"tile\": [37, 23], \"parallel\": 0}}]}");
	verify_with_plan("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"tile\": [1, 1], "
			 "\"parallel\": 1}}, {\"ops\": [1], \"schedule\": {\"tile\": [3, 2], "
			 "\"vector\": 8}}]}");
}

static const char *const one_op[] = {"y[i] = x[i] * 2 + 1", NULL};

static bench planted(const char *source)
{
	bench b = {0};
	sched_error serr = {0};
	const char *sources[] = {source};

	open_cpu(&b);
	cr_assert_eq(load_graph("x f32 100 in; y f32 100 out", one_op, &b.graph, &serr),
		     SCHED_OK);
	b.plan = kgen_plan_default(b.graph);
	b.err.code = build_and_verify(&b, sources, 5);
	return b;
}

Test(cpu, a_wrong_kernel_is_caught)
{
	bench b = planted("void k0_y(void **t)\n{ float *x = t[0], *y = t[1];\n"
			  "for (int i = 0; i < 100; i++) y[i] = x[i] * 2 + (i == 42 ? 1.5f : 1); }\n");

	cr_expect_eq(b.err.code, KGEN_EWRONG);
	cr_expect_not(b.checks[0].passed);
	cr_expect(strstr(b.err.message, "relative error") != NULL, "%s", b.err.message);
	close_bench(&b);
}

/* The reference of the last graph and seed is kept for the next
 * verification: a wrong kernel after a right one is still caught, on the
 * same seed and on another. */
Test(cpu, a_kept_reference_still_catches_a_wrong_kernel)
{
	bench b = planted("void k0_y(void **t)\n{ float *x = t[0], *y = t[1];\n"
			  "for (int i = 0; i < 100; i++) y[i] = x[i] * 2 + 1; }\n");
	const char *wrong[] = {"void k0_y(void **t)\n{ float *x = t[0], *y = t[1];\n"
			       "for (int i = 0; i < 100; i++) y[i] = x[i] * 2 + 1.25f; }\n"};
	kgen_program *second = NULL;

	cr_assert_eq(b.err.code, KGEN_OK, "%s", b.err.message);
	cr_assert_eq(kgen_program_build(b.backend, b.graph, b.plan, wrong, &second,
					&b.err), KGEN_OK, "%s", b.err.message);
	cr_expect_eq(kgen_verify(second, 5, b.checks, &b.err), KGEN_EWRONG);
	cr_expect_eq(kgen_verify(b.prog, 5, b.checks, &b.err), KGEN_OK, "%s",
		     b.err.message);
	cr_expect_eq(kgen_verify(second, 6, b.checks, &b.err), KGEN_EWRONG);
	kgen_program_free(second);
	close_bench(&b);
}

/* An f16 output that overflows to infinity in the reference and in the
 * kernel alike matches; an infinity where the reference is finite does
 * not. */
Test(cpu, overflow_to_infinity_matches_only_itself)
{
	static const char *const overflow[] = {"y[i] = x[i] * 100000 + 100000", NULL};
	const char *planted_inf[] = {"#include <stdint.h>\n"
				     "void k0_y(void **t)\n{ uint16_t *y = t[1];\n"
				     "for (int i = 0; i < 100; i++) y[i] = 0x7c00; }\n"};
	bench b = {0};
	sched_error serr = {0};

	open_cpu(&b);
	cr_assert_eq(load_graph("x f32 100 in; y f16 100 out", overflow, &b.graph, &serr),
		     SCHED_OK);
	b.plan = kgen_plan_default(b.graph);
	cr_expect_eq(build_and_verify(&b, NULL, 5), KGEN_OK, "%s", b.err.message);
	close_bench(&b);
	open_cpu(&b);
	cr_assert_eq(load_graph("x f32 100 in; y f16 100 out", one_op, &b.graph, &serr),
		     SCHED_OK);
	b.plan = kgen_plan_default(b.graph);
	cr_expect_eq(build_and_verify(&b, planted_inf, 5), KGEN_EWRONG);
	cr_expect(strstr(b.err.message, "is inf where the reference is") != NULL, "%s",
		  b.err.message);
	close_bench(&b);
}

Test(cpu, an_unwritten_element_is_caught)
{
	bench b = planted("void k0_y(void **t)\n{ float *x = t[0], *y = t[1];\n"
			  "for (int i = 0; i < 99; i++) y[i] = x[i] * 2 + 1; }\n");

	cr_expect_eq(b.err.code, KGEN_EWRONG);
	cr_expect_str_eq(b.err.message, "output 'y' does not match the reference: "
			 "y[99] is NaN (not written, or not a number)");
	close_bench(&b);
}

Test(cpu, a_compile_error_comes_back_with_the_log)
{
	bench b = planted("void k0_y(void **t) { this is not C; }\n");

	cr_expect_eq(b.err.code, KGEN_ECOMPILE);
	cr_assert_not_null(b.err.log);
	cr_expect(strstr(b.err.log, "error") != NULL, "%s", b.err.log);
	close_bench(&b);
}

Test(cpu, timing_gives_medians_and_spreads)
{
	bench b = {0};
	sched_error serr = {0};
	kgen_timing timing = {.warmup = 1, .min_runs = 5, .max_runs = 9, .budget_ms = 50};
	kgen_time times[2], total;

	open_cpu(&b);
	cr_assert_eq(load_graph(ODD, OPS("y[i, j] = sum(k) x[i, k] * w[k, j]",
					 "z[i, j] = max(y[i, j] + b[j], 0)"),
				&b.graph, &serr), SCHED_OK);
	b.plan = kgen_plan_default(b.graph);
	cr_assert_eq(build_and_verify(&b, NULL, 1), KGEN_OK, "%s", b.err.message);
	cr_assert_eq(kgen_program_time(b.prog, &timing, times, &total, &b.err), KGEN_OK);
	for (int k = 0; k < 2; k++) {
		cr_expect_gt(times[k].median_ms, 0);
		cr_expect_geq(times[k].spread_ms, 0);
		cr_expect(times[k].runs >= 5 && times[k].runs <= 9);
	}
	cr_expect_gt(total.median_ms, 0);
	close_bench(&b);
}

#if defined(__x86_64__)
/* Before each timed run a cpu with CLFLUSHOPT evicts the plan's own
 * bytes, a few KB here, instead of sweeping a buffer of twice the
 * last-level cache (8 to 64 MiB, about half a millisecond at the least):
 * 50 runs of each kernel fit in 10 ms, which 50 sweeps do not. */
Test(cpu, timed_runs_evict_the_plan_s_bytes_not_a_cache_sweep)
{
	bench b = {0};
	sched_error serr = {0};
	kgen_timing timing = {.warmup = 1,
			      .min_runs = 3,
			      .max_runs = 50,
			      .budget_ms = 10};
	kgen_time times[2], total;
	unsigned eax, ebx, ecx, edx;

	if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(ebx >> 23 & 1))
		cr_skip_test(
			"this cpu has no CLFLUSHOPT: its timed runs sweep the caches");
	open_cpu(&b);
	cr_assert_eq(load_graph(ODD,
				OPS("y[i, j] = sum(k) x[i, k] * w[k, j]",
				    "z[i, j] = max(y[i, j] + b[j], 0)"),
				&b.graph, &serr),
		     SCHED_OK);
	b.plan = kgen_plan_default(b.graph);
	cr_assert_eq(build_and_verify(&b, NULL, 1), KGEN_OK, "%s", b.err.message);
	cr_assert_eq(kgen_program_time(b.prog, &timing, times, &total, &b.err),
		     KGEN_OK);
	for (int k = 0; k < 2; k++)
		cr_expect_eq(times[k].runs, 50, "kernel %d: %d runs in 10 ms", k,
			     times[k].runs);
	cr_expect_eq(total.runs, 50, "the plan: %d runs in 10 ms", total.runs);
	close_bench(&b);
}
#endif

/* The cpu kernels widen f16 by bit arithmetic (it vectorizes): it must
 * agree with the hardware conversion on all 65,536 patterns, NaNs as NaN. */
Test(cpu, f16_widening_is_exact_for_every_bit_pattern)
{
	bench b = {0};
	uint16_t *x = malloc(65536 * sizeof(uint16_t));
	float *y = malloc(65536 * sizeof(float));
	void *host[2] = {x, y};

	open_cpu(&b);
	build_one_op(&b, "x f16 65536 in; y f32 65536 out", "y[i] = x[i]");
	for (uint32_t i = 0; i < 65536; i++)
		x[i] = (uint16_t)i;
	cr_assert_eq(kgen_program_run(b.prog, host, &b.err), KGEN_OK);
	for (uint32_t i = 0; i < 65536; i++) {
		_Float16 h;
		float want;

		memcpy(&h, &x[i], 2);
		want = (float)h;
		if (want != want)
			cr_expect(y[i] != y[i], "0x%04x: %g, want NaN", i, y[i]);
		else
			cr_expect(memcmp(&y[i], &want, 4) == 0, "0x%04x: %a, want %a",
				  i, y[i], want);
	}
	free(x);
	free(y);
	close_bench(&b);
}

/* An f16 intermediate kept in a fused kernel's block-local memory is
 * rounded as its tensor would round it (f16_round, bit for bit), on a
 * spread of float bit patterns: normals, subnormals of f16, ties, values
 * that overflow to infinity, NaNs. */
/* Float bits spread over all 2^32 into "x": every other one a tie of
 * f16 rounding (the 13 bits it drops are 0x1000). */
static void rounding_cases(uint32_t *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		x[i] = i & 1 ? ((i * 1021u) & ~0x1fffu) | 0x1000u : i * 1021u;
}

Test(cpu, f16_rounding_in_block_local_memory_is_exact)
{
	enum { N = 1 << 22 };
	bench b = {0};
	sched_error serr = {0};
	uint32_t *x = malloc(N * sizeof(uint32_t));
	float *h = malloc(N * sizeof(float) / 2), *y = malloc(N * sizeof(float));
	void *host[3] = {x, h, y};
	json_t *json = json_loads("{\"kernels\": [{\"ops\": [0, 1]}]}", 0, NULL);

	open_cpu(&b);
	cr_assert_eq(load_graph("x f32 4194304 in; h f16 4194304; y f32 4194304 out",
				OPS("h[i] = x[i]", "y[i] = h[i]"), &b.graph, &serr), SCHED_OK);
	cr_assert_eq(kgen_plan_from_json(b.graph, json, &b.plan, &b.err), KGEN_OK, "%s",
		     b.err.message);
	cr_assert_eq(kgen_program_build(b.backend, b.graph, b.plan, NULL, &b.prog,
					&b.err), KGEN_OK, "%s", b.err.message);
	rounding_cases(x, N);
	cr_assert_eq(kgen_program_run(b.prog, host, &b.err), KGEN_OK);
	for (uint32_t i = 0; i < N; i++) {
		float in, want;

		memcpy(&in, &x[i], 4);
		want = (float)(_Float16)in;
		if (want != want)
			cr_expect(y[i] != y[i], "0x%08x: %a, want NaN", x[i], y[i]);
		else if (memcmp(&y[i], &want, 4) != 0)
			cr_expect_fail("0x%08x: %a, want %a", x[i], y[i], want);
	}
	json_decref(json);
	free(x);
	free(h);
	free(y);
	close_bench(&b);
}

/* y[i], stored from float bits x[i], holds the bits of the _Float16
 * conversion; a NaN stays a NaN. */
static void expect_f16_stores(const uint32_t *x, const uint16_t *y, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		float in;
		_Float16 want;
		uint16_t bits;

		memcpy(&in, &x[i], 4);
		want = (_Float16)in;
		memcpy(&bits, &want, 2);
		if (in != in)
			cr_expect((y[i] & 0x7c00u) == 0x7c00u && (y[i] & 0x3ffu),
				  "0x%08x: 0x%04x, want a NaN", x[i], y[i]);
		else if (y[i] != bits)
			cr_expect_fail("0x%08x: 0x%04x, want 0x%04x", x[i], y[i], bits);
	}
}

/* f16 stores (integer operations that vectorize) give the bits of the
 * _Float16 conversion, ties, subnormals, overflow and signed zeros
 * included; a NaN stays a NaN. */
Test(cpu, f16_stores_are_the_conversion_bit_for_bit)
{
	enum { N = 1 << 22 };
	bench b = {0};
	uint32_t *x = malloc(N * sizeof(uint32_t));
	uint16_t *y = malloc(N * sizeof(uint16_t));
	void *host[2] = {x, y};

	open_cpu(&b);
	build_one_op(&b, "x f32 4194304 in; y f16 4194304 out", "y[i] = x[i]");
	rounding_cases(x, N);
	cr_assert_eq(kgen_program_run(b.prog, host, &b.err), KGEN_OK);
	expect_f16_stores(x, y, N);
	free(x);
	free(y);
	close_bench(&b);
}

/* Kernel "k" of the bench's plan, as C, holds "text". */
static void expect_source_has(const bench *b, int k, const char *text)
{
	char *source = kgen_print_c(b->graph, b->plan, k);

	cr_expect(source && strstr(source, text), "no %s in\n%s", text, source);
	free(source);
}

/* f16 loads and stores along a loop run KVEC at a time through the cpu's
 * conversion instructions (print_chunks.c), the last elements of a tile
 * one at a time: the same bits as the _Float16 conversion either way, on
 * every f16 (loads) and on a spread of floats (stores), over lengths
 * with a tail that is not a multiple of the vector. */
Test(cpu, f16_moved_in_chunks_are_the_conversion_bit_for_bit)
{
	enum { LOADS = 65536 + 13, STORES = (1 << 20) + 7 };
	bench b = {0};
	uint16_t *h = malloc(LOADS * sizeof(uint16_t)),
		 *y16 = malloc(STORES * sizeof(uint16_t));
	float *y = malloc(LOADS * sizeof(float));
	uint32_t *x = malloc(STORES * sizeof(uint32_t));
	void *loads[2] = {h, y}, *stores[2] = {x, y16};
	char tensors[64];

	open_cpu(&b);
	snprintf(tensors, sizeof(tensors), "x f16 %d in; y f32 %d out", LOADS, LOADS);
	build_one_op(&b, tensors, "y[i] = x[i]");
	expect_source_has(&b, 0, "kf16_load_vec(");
	for (uint32_t i = 0; i < LOADS; i++)
		h[i] = (uint16_t)(i * 40503u);
	cr_assert_eq(kgen_program_run(b.prog, loads, &b.err), KGEN_OK, "%s",
		     b.err.message);
	for (uint32_t i = 0; i < LOADS; i++) {
		_Float16 in;
		float want;

		memcpy(&in, &h[i], 2);
		want = (float)in;
		if (want != want)
			cr_expect(y[i] != y[i], "0x%04x: %a, want NaN", h[i], y[i]);
		else if (memcmp(&y[i], &want, 4) != 0)
			cr_expect_fail("0x%04x: %a, want %a", h[i], y[i], want);
	}
	close_bench(&b);
	open_cpu(&b);
	snprintf(tensors, sizeof(tensors), "x f32 %d in; y f16 %d out", STORES, STORES);
	build_one_op(&b, tensors, "y[i] = x[i]");
	expect_source_has(&b, 0, "kf16_store_vec(");
	rounding_cases(x, STORES);
	cr_assert_eq(kgen_program_run(b.prog, stores, &b.err), KGEN_OK, "%s",
		     b.err.message);
	expect_f16_stores(x, y16, STORES);
	free(h);
	free(y);
	free(x);
	free(y16);
	close_bench(&b);
}

/* The kernel of "plan" (one kernel) for the graph "tensors", "ops" holds
 * each of "texts" (NULL-ended) and verifies. */
static void expect_fused_kernel(const char *tensors, const char *const *ops,
				const char *plan, const char *const *texts)
{
	bench b = {0};
	sched_error serr = {0};
	json_t *json = json_loads(plan, 0, NULL);

	open_cpu(&b);
	cr_assert_eq(load_graph(tensors, ops, &b.graph, &serr), SCHED_OK, "%s",
		     serr.message);
	cr_assert_eq(kgen_plan_from_json(b.graph, json, &b.plan, &b.err), KGEN_OK, "%s",
		     b.err.message);
	for (int i = 0; texts[i]; i++)
		expect_source_has(&b, 0, texts[i]);
	cr_expect_eq(build_and_verify(&b, NULL, 3), KGEN_OK, "%s", b.err.message);
	json_decref(json);
	close_bench(&b);
}

/* A fused layer norm whose rows of "n" are read from f16. */
static void expect_fused_layer_norm(int n)
{
	static const char *const texts[] = {"lanes[u] += y;",
					    "float x = 0.0f, lanes[4 * KVEC];",
					    "kf16_round_vec(vec_x);", "kf16_store_vec(",
					    NULL};
	char tensors[128], plan[128], mean[64], var[64];

	snprintf(tensors, sizeof(tensors),
		 "x f16 64,%d in; m f32 64; s f16 64,%d; v f32 64; y f16 64,%d out", n,
		 n, n);
	snprintf(plan, sizeof(plan),
		 "{\"kernels\": [{\"ops\": [0, 1, 2, 3], \"schedule\": {\"tile\": [4, "
		 "%d]}}]}",
		 n);
	snprintf(mean, sizeof(mean), "m[i] = sum(j) x[i, j] * %.9f", 1.0 / n);
	snprintf(var, sizeof(var), "v[i] = sum(j) x[i, j] * x[i, j] * %.9f", 1.0 / n);
	expect_fused_kernel(
		tensors,
		OPS(mean, "s[i, j] = x[i, j] - m[i]", var,
		    "y[i, j] = s[i, j] * rsqrt(v[i] - m[i] * m[i] + 0.00001)"),
		plan, texts);
}

/* A fused layer norm whose rows are read from f16: its row reductions
 * widen f16 chunks of four vectors and fold them into four vectors of
 * partial results kept across the row, its f16 intermediate is rounded
 * and its f16 result stored a chunk at a time, and it verifies: rows of
 * 37 (fewer than four vectors: the points left alone) and of 150 (whole
 * chunks, then the points left). */
Test(cpu, fused_row_reductions_read_f16_in_chunks)
{
	expect_fused_layer_norm(37);
	expect_fused_layer_norm(150);
}

/* A fused kernel's f16 results of 1 MiB or more stream past the caches
 * (kf16_stream_vec, then a fence) where no op reads them, and are stored
 * as any store where one does; both verify, rows of 1030 (chunks at
 * addresses of either alignment). */
Test(cpu, fused_results_no_op_reads_are_streamed)
{
	static const char *const texts[] = {"kf16_store_vec(&t_s[",
					    "kf16_stream_vec(&t_y[", "KSTREAM_FENCE();",
					    NULL};

	expect_fused_kernel("x f16 512,1030 in; s f16 512,1030 out; y f16 512,1030 out",
			    OPS("s[i, j] = 2 * x[i, j]", "y[i, j] = s[i, j] + x[i, j]"),
			    "{\"kernels\": [{\"ops\": [0, 1], \"schedule\": {\"tile\": "
			    "[4, 1030]}}]}",
			    texts);
}

/* A fused softmax's row maximum, over block-local values (no f16 read),
 * folds four vectors of partial results too, and verifies. */
Test(cpu, fused_row_maxima_of_block_local_values_fold_four_vectors)
{
	static const char *const texts[] = {"float x = -KINF, lanes[4 * KVEC];",
					    "lanes[u] = kmax(lanes[u], y);", NULL};

	expect_fused_kernel("x f16 32,150 in; s f16 32,150; m f32 32; y f16 32,150 out",
			    OPS("s[i, j] = 0.125 * x[i, j]", "m[i] = max(j) s[i, j]",
				"y[i, j] = exp(s[i, j] - m[i])"),
			    "{\"kernels\": [{\"ops\": [0, 1, 2], \"schedule\": "
			    "{\"tile\": [4, 150]}}]}",
			    texts);
}

/* The generated exp (kexp: a polynomial that vectorizes) within 2e-7 of
 * exp in double over [-180, 100] in steps of 2^-6, subnormal results and
 * the underflow to zero included; infinity past the overflow, NaN kept. */
Test(cpu, exp_is_within_2e_7_of_the_true_exp)
{
	enum { N = 280 * 64 + 1 };
	bench b = {0};
	float *x = malloc((N + 1) * sizeof(float)), *y = malloc((N + 1) * sizeof(float));
	void *host[2] = {x, y};
	char tensors[64];
	double worst = 0;

	open_cpu(&b);
	snprintf(tensors, sizeof(tensors), "x f32 %d in; y f32 %d out", N + 1, N + 1);
	build_one_op(&b, tensors, "y[i] = exp(x[i])");
	for (int i = 0; i < N; i++)
		x[i] = -180.0f + i / 64.0f;
	x[N] = NAN;
	cr_assert_eq(kgen_program_run(b.prog, host, &b.err), KGEN_OK);
	for (int i = 0; i < N; i++) {
		double want = exp((double)x[i]);

		if (want > FLT_MAX)
			cr_expect(isinf(y[i]), "exp(%g) = %g, want inf", x[i], y[i]);
		else if (want >= FLT_MIN)
			worst = fmax(worst, fabs(y[i] - want) / want);
		else
			cr_expect(fabs(y[i] - want) <= 0x1p-149, "exp(%g) = %a, want %a", x[i],
				  y[i], want);
	}
	cr_expect_lt(worst, 2e-7, "relative error %g", worst);
	cr_expect(isnan(y[N]), "exp(NaN) = %g", y[N]);
	free(x);
	free(y);
	close_bench(&b);
}

/* The bits of the f16 nearest exp(x), from double. */
static uint16_t exp_f16_bits(float x)
{
	_Float16 h = (_Float16)exp((double)x);
	uint16_t bits;

	memcpy(&bits, &h, 2);
	return bits;
}

/* An f16 op's exp (kexp_f16: x held in [-87, 88], one power of two, a
 * polynomial of degree 4; on a chunk, kexp_f16_vec, with AVX-512 its
 * holds, rounding and power by vmaxps, vminps, vrndscaleps and vscalefps)
 * rounds to the f16 of exp within an ulp, and to it exactly at nearly
 * every point, over [-120, 100] in steps of 2^-8: zero below -18,
 * infinity above 12 and at infinity, NaN kept. NaN and the infinities
 * come first, in the first chunk, and the last elements past the chunks
 * run kexp_f16 itself. */
Test(cpu, exp_rounded_to_f16_is_within_an_ulp_of_exp_in_f16)
{
	enum { SPECIALS = 3, STEPS = 220 * 256 + 1, N = SPECIALS + STEPS };
	bench b = {0};
	float *x = malloc(N * sizeof(float));
	uint16_t *y = malloc(N * sizeof(uint16_t));
	void *host[2] = {x, y};
	char tensors[64];
	int off = 0;

	open_cpu(&b);
	snprintf(tensors, sizeof(tensors), "x f32 %d in; y f16 %d out", N, N);
	build_one_op(&b, tensors, "y[i] = exp(x[i])");
	expect_source_has(&b, 0, "kexp_f16_vec(vec_x);");
	x[0] = NAN;
	x[1] = INFINITY;
	x[2] = -INFINITY;
	for (int i = 0; i < STEPS; i++)
		x[SPECIALS + i] = -120.0f + i / 256.0f;
	cr_assert_eq(kgen_program_run(b.prog, host, &b.err), KGEN_OK);
	for (int i = SPECIALS; i < N; i++) {
		uint16_t want = exp_f16_bits(x[i]);
		bool exact = x[i] < -18.0f || x[i] > 12.0f;

		off += y[i] != want;
		cr_expect(abs((int)y[i] - (int)want) <= (exact ? 0 : 1),
			  "exp(%g) in f16: 0x%04x, want 0x%04x", x[i], y[i], want);
	}
	cr_expect_lt(off, STEPS / 1000, "%d of %d off by an ulp", off, STEPS);
	cr_expect((y[0] & 0x7c00u) == 0x7c00u && (y[0] & 0x3ffu), "exp(NaN): 0x%04x",
		  y[0]);
	cr_expect(y[1] == 0x7c00u && y[2] == 0, "exp(+-inf): 0x%04x, 0x%04x", y[1],
		  y[2]);
	free(x);
	free(y);
	close_bench(&b);
}

/* The generated "name" (its C function "call") within "tolerance" of
 * "exact" in double over [-half, half] in steps of 1 / per_unit and at
 * small values down to 1e-30, relative; NaN kept, infinities give +-1
 * (tanh and erf: odd functions that tend to 1). */
static void expect_odd_saturating(const char *name, const char *call,
				  double (*exact)(double), int half, int per_unit,
				  double tolerance)
{
	const int steps = 2 * half * per_unit + 1, small = 60, n = steps + small + 3;
	bench b = {0};
	float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
	void *host[2] = {x, y};
	char tensors[64], op[64];
	double worst = 0;

	open_cpu(&b);
	snprintf(tensors, sizeof(tensors), "x f32 %d in; y f32 %d out", n, n);
	snprintf(op, sizeof(op), "y[i] = %s(x[i])", name);
	build_one_op(&b, tensors, op);
	expect_source_has(&b, 0, call);
	for (int i = 0; i < steps; i++)
		x[i] = (float)-half + (float)i / (float)per_unit;
	for (int i = 0; i < small; i++)
		x[steps + i] = (i % 2 ? -1.0f : 1.0f) * powf(10.0f, -(float)(i / 2));
	x[n - 3] = NAN;
	x[n - 2] = INFINITY;
	x[n - 1] = -INFINITY;
	cr_assert_eq(kgen_program_run(b.prog, host, &b.err), KGEN_OK);
	for (int i = 0; i < n - 3; i++)
		if (x[i] != 0)
			worst = fmax(worst,
				     fabs(y[i] - exact(x[i])) / fabs(exact(x[i])));
	cr_expect_lt(worst, tolerance, "%s: relative error %g", name, worst);
	cr_expect(isnan(y[n - 3]), "%s(NaN) = %g", name, y[n - 3]);
	cr_expect(y[n - 2] == 1.0f && y[n - 1] == -1.0f, "%s(+-inf) = %g, %g", name,
		  y[n - 2], y[n - 1]);
	free(x);
	free(y);
	close_bench(&b);
}

/* The generated tanh (ktanh: kexp and a polynomial near 0, which
 * vectorize) within 1e-6 of tanh over [-20, 20] in steps of 2^-10. */
Test(cpu, tanh_is_within_1e_6_of_the_true_tanh)
{
	expect_odd_saturating("tanh", "ktanh(", tanh, 20, 1024, 1e-6);
}

/* The generated erf (kerf: polynomials and kexp, which vectorize) within
 * 3e-7 of erf over [-6, 6] in steps of 2^-12. */
Test(cpu, erf_is_within_3e_7_of_the_true_erf)
{
	expect_odd_saturating("erf", "kerf(", erf, 6, 4096, 3e-7);
}

/* Kernels compiled once are reused by later programs of the same backend
 * (a search recompiles mostly the same kernels): each program still runs
 * its own buffers and verifies. */
Test(cpu, reused_kernels_still_verify)
{
	bench b = {0};
	sched_error serr = {0};
	kgen_program *second = NULL;
	kgen_check checks[4];

	open_cpu(&b);
	cr_assert_eq(load_graph(ODD, OPS("y[i, j] = sum(k) x[i, k] * w[k, j]",
					 "z[i, j] = max(y[i, j] + b[j], 0)"),
				&b.graph, &serr), SCHED_OK);
	b.plan = kgen_plan_default(b.graph);
	cr_assert_eq(build_and_verify(&b, NULL, 1), KGEN_OK, "%s", b.err.message);
	cr_assert_eq(kgen_program_build(b.backend, b.graph, b.plan, NULL, &second,
					&b.err), KGEN_OK, "%s", b.err.message);
	kgen_program_free(b.prog);
	b.prog = NULL;
	cr_expect_eq(kgen_verify(second, 2, checks, &b.err), KGEN_OK, "%s", b.err.message);
	kgen_program_free(second);
	b.plan->kernels[1].schedule.tile[1] = 7;
	cr_expect_eq(build_and_verify(&b, NULL, 3), KGEN_OK, "%s", b.err.message);
	close_bench(&b);
}

/* Counts the files of "dir" whose names end in "suffix" ("": all). */
static int count_files(const char *dir, const char *suffix)
{
	DIR *d = opendir(dir);
	struct dirent *entry;
	int n = 0;

	cr_assert_not_null(d);
	while ((entry = readdir(d))) {
		size_t len = strlen(entry->d_name), slen = strlen(suffix);

		n += entry->d_name[0] != '.' && len >= slen &&
		     !strcmp(entry->d_name + len - slen, suffix);
	}
	closedir(d);
	return n;
}

static void remove_share(const char *dir)
{
	kgen_empty_folder(dir);
	rmdir(dir);
}

/* A cpu backend sharing "dir", on the two-op graph with the default plan. */
static void open_shared(bench *b, const char *dir)
{
	sched_error serr = {0};

	open_cpu(b);
	cr_assert_eq(kgen_backend_share(b->backend, dir, &b->err), KGEN_OK, "%s",
		     b->err.message);
	cr_assert_eq(load_graph(ODD, OPS("y[i, j] = sum(k) x[i, k] * w[k, j]",
					 "z[i, j] = max(y[i, j] + b[j], 0)"),
				&b->graph, &serr), SCHED_OK);
	b->plan = kgen_plan_default(b->graph);
}

/* A compile worker prepares the kernels; a process whose compiler is gone
 * (CC=/nonexistent) still builds them, from the shared folder, and they
 * verify; without the folder the same process cannot build. */
Test(cpu, prepared_kernels_are_loaded_without_compiling)
{
	char dir[] = "/tmp/tuned-test-share-XXXXXX";
	bench b = {0};

	cr_assert_not_null(mkdtemp(dir));
	open_shared(&b, dir);
	cr_assert_eq(kgen_program_prepare(b.backend, b.graph, b.plan, NULL, &b.err),
		     KGEN_OK, "%s", b.err.message);
	cr_expect_eq(count_files(dir, ".so"), 2);
	cr_expect_eq(count_files(dir, ""), 2, "only the objects, no temporary file");
	cr_expect_eq(kgen_program_prepare(b.backend, b.graph, b.plan, NULL, &b.err),
		     KGEN_OK, "preparing again finds them: %s", b.err.message);
	close_bench(&b);

	setenv("CC", "/nonexistent", 1);
	open_shared(&b, dir);
	cr_expect_eq(build_and_verify(&b, NULL, 4), KGEN_OK, "%s", b.err.message);
	close_bench(&b);
	cr_expect_eq(count_files(dir, ".so"), 2, "the objects stay shared");

	open_cpu(&b);
	cr_assert_eq(load_graph(ODD, OPS("y[i, j] = sum(k) x[i, k] * w[k, j]",
					 "z[i, j] = max(y[i, j] + b[j], 0)"),
				&b.graph, &(sched_error){0}), SCHED_OK);
	b.plan = kgen_plan_default(b.graph);
	cr_expect_eq(build_and_verify(&b, NULL, 4), KGEN_EBACKEND);
	close_bench(&b);
	remove_share(dir);
}

/* Building with a shared folder compiles what is missing and leaves it. */
Test(cpu, building_with_a_shared_folder_fills_it)
{
	char dir[] = "/tmp/tuned-test-share-XXXXXX";
	bench b = {0};

	cr_assert_not_null(mkdtemp(dir));
	remove_share(dir);
	open_shared(&b, dir);
	cr_expect_eq(build_and_verify(&b, NULL, 2), KGEN_OK, "%s", b.err.message);
	cr_expect_eq(count_files(dir, ".so"), 2);
	close_bench(&b);
	remove_share(dir);
}

Test(cpu, prepare_needs_a_shared_folder)
{
	bench b = {0};
	sched_error serr = {0};

	open_cpu(&b);
	cr_assert_eq(load_graph("x f32 100 in; y f32 100 out", one_op, &b.graph, &serr),
		     SCHED_OK);
	b.plan = kgen_plan_default(b.graph);
	cr_expect_eq(kgen_program_prepare(b.backend, b.graph, b.plan, NULL, &b.err),
		     KGEN_EBACKEND);
	cr_expect(strstr(b.err.message, "kgen_backend_share") != NULL, "%s",
		  b.err.message);
	close_bench(&b);
}

Test(cpu, a_compile_error_through_prepare_comes_back_with_the_log)
{
	char dir[] = "/tmp/tuned-test-share-XXXXXX";
	const char *sources[] = {"void k0_y(void **t) { this is not C; }\n"};
	bench b = {0};
	sched_error serr = {0};

	cr_assert_not_null(mkdtemp(dir));
	open_cpu(&b);
	cr_assert_eq(kgen_backend_share(b.backend, dir, &b.err), KGEN_OK);
	cr_assert_eq(load_graph("x f32 100 in; y f32 100 out", one_op, &b.graph, &serr),
		     SCHED_OK);
	b.plan = kgen_plan_default(b.graph);
	cr_expect_eq(kgen_program_prepare(b.backend, b.graph, b.plan, sources, &b.err),
		     KGEN_ECOMPILE);
	cr_assert_not_null(b.err.log);
	cr_expect(strstr(b.err.log, "error") != NULL, "%s", b.err.log);
	cr_expect_eq(count_files(dir, ""), 0, "nothing is left behind");
	close_bench(&b);
	remove_share(dir);
}

Test(cpu, the_probe_measures_plausible_peaks)
{
	bench b = {0};
	kgen_peaks peaks;

	open_cpu(&b);
	cr_assert_eq(kgen_probe(b.backend, &peaks, &b.err), KGEN_OK, "%s\n%s",
		     b.err.message, b.err.log ? b.err.log : "");
	cr_expect(peaks.bandwidth_gbs > 0.1 && peaks.bandwidth_gbs < 10000, "%g GB/s",
		  peaks.bandwidth_gbs);
	cr_expect(peaks.gflops > 0.1 && peaks.gflops < 100000, "%g GFLOP/s",
		  peaks.gflops);
	cr_expect(peaks.launch_ms > 0 && peaks.launch_ms < 100, "%g ms",
		  peaks.launch_ms);
	cr_expect_eq(peaks.cores, sysconf(_SC_NPROCESSORS_ONLN));
	close_bench(&b);
}
