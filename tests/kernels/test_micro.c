/*
 * test_micro.c: contractions as register-blocked micro-kernels on the
 * cpu: every blocking, edge and dtype matches the reference interpreter
 * on random inputs; the family holds one kernel per size of block that
 * occurs; products of one shape side by side share one kernel; plans
 * that misuse "micro" are refused with the reason.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_builder.h"
#include "kgen.h"

static sched_graph *gemm(const char *tensors, const char *op)
{
	sched_graph *g = NULL;
	sched_error err = {0};

	cr_assert_eq(load_graph(tensors, OPS(op), &g, &err), SCHED_OK, "%s", err.message);
	return g;
}

/* The one-kernel plan of "g" with micro-kernels "m"; NULL (and the
 * reason in "err") when it is refused. */
static kgen_plan *micro_plan(const sched_graph *g, kgen_micro m, kgen_error *err)
{
	char text[256];
	json_t *json;
	kgen_plan *plan = NULL;

	snprintf(text, sizeof(text),
		 "{\"kernels\": [{\"ops\": [0], \"schedule\": {\"micro\": {\"mr\": %d, "
		 "\"nr\": %d, \"kc\": %d, \"mc\": %d, \"nc\": %d, \"pack\": %d}}}]}",
		 m.mr, m.nr, m.kc, m.mc, m.nc, m.pack);
	json = json_loads(text, 0, NULL);
	if (kgen_plan_from_json(g, json, &plan, err) < 0)
		plan = NULL;
	json_decref(json);
	return plan;
}

/* Builds plan "m" of "g" and checks it against the reference on the
 * inputs of two seeds. */
static void expect_verified(const sched_graph *g, kgen_micro m)
{
	kgen_backend *backend = NULL;
	kgen_program *prog = NULL;
	kgen_check checks[4];
	kgen_error err = {0};
	kgen_plan *plan = micro_plan(g, m, &err);

	cr_assert_not_null(plan, "%s", err.message);
	cr_assert_eq(kgen_backend_open("cpu", &backend, &err), KGEN_OK, "%s", err.message);
	cr_assert_eq(kgen_program_build(backend, g, plan, NULL, &prog, &err), KGEN_OK,
		     "%s\n%s", err.message, err.log ? err.log : "");
	for (unsigned seed = 1; seed <= 2; seed++)
		cr_expect_eq(kgen_verify(prog, seed, checks, &err), KGEN_OK,
			     "mr %d nr %d kc %d mc %d nc %d pack %d: %s", m.mr, m.nr, m.kc,
			     m.mc, m.nc, m.pack, err.message);
	kgen_program_free(prog);
	kgen_backend_close(backend);
	kgen_plan_free(plan);
	kgen_error_release(&err);
}

/* Edges in M, N (also within a vector) and K, full blocks, one block;
 * A packed and read in place. */
Test(micro, every_blocking_matches_the_reference)
{
	static const kgen_micro blockings[] = {
		{6, 16, 32, 48, 64, 1}, {6, 16, 32, 48, 64, 0}, {4, 32, 50, 8, 32, 1},
		{8, 8, 7, 16, 8, 0}, {1, 24, 50, 3, 48, 1}, {14, 48, 16, 28, 96, 0},
		{3, 64, 13, 102, 128, 1},
	};
	sched_graph *g = gemm("a f32 100,50 in; b f32 50,70 in; y f32 100,70 out",
			      "y[i, j] = sum(k) a[i, k] * b[k, j]");

	for (size_t i = 0; i < sizeof(blockings) / sizeof(*blockings); i++)
		expect_verified(g, blockings[i]);
	sched_graph_free(g);
}

/* f16 and bf16 factors, an f16 product (summed over all of K at once),
 * transposed and shifted factors, dims that merge, an output contiguous
 * along its first dim. */
Test(micro, dtypes_strides_and_merged_dims)
{
	static const struct {
		const char *tensors, *op;
		kgen_micro m;
	} cases[] = {
		{"a f16 33,40 in; b bf16 40,20 in; y f32 33,20 out",
		 "y[i, j] = sum(k) a[i, k] * b[k, j]", {4, 16, 16, 8, 16, 1}},
		{"a f16 33,40 in; b f16 40,20 in; y f16 33,20 out",
		 "y[i, j] = sum(k) a[i, k] * b[k, j]", {4, 16, 40, 8, 16, 0}},
		/* outputs not f32 summed in f32 over slices of K (staged) */
		{"a f16 33,40 in; b f16 40,20 in; y f16 33,20 out",
		 "y[i, j] = sum(k) a[i, k] * b[k, j]", {4, 16, 7, 8, 16, 1}},
		{"a bf16 30,50 in; b bf16 50,21 in; y bf16 30,21 out",
		 "y[i, j] = sum(k) a[i, k] * b[k, j]", {6, 8, 16, 12, 16, 0}},
		{"a f32 30,12 in; b f32 12,19 in; y f16 19,30 out",
		 "y[j, i] = sum(k) a[i, k] * b[k, j]", {4, 8, 5, 8, 32, 1}},
		{"a f32 40,33 in; b f32 21,44 in; y f32 33,21 out",
		 "y[i, j] = sum(k < 40) a[k, i] * b[j, k + 4]", {5, 8, 16, 10, 16, 1}},
		{"x f32 2,9,12 in; w f32 12,17 in; y f32 2,9,17 out",
		 "y[b, s, j] = sum(c) x[b, s, c] * w[c, j]", {6, 16, 5, 12, 32, 0}},
		{"a f32 30,12 in; b f32 12,19 in; y f32 19,30 out",
		 "y[j, i] = sum(k) a[i, k] * b[k, j]", {4, 8, 12, 8, 32, 1}},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		sched_graph *g = gemm(cases[i].tensors, cases[i].op);

		expect_verified(g, cases[i].m);
		sched_graph_free(g);
	}
}

/* Random shapes and blockings, on random inputs. */
Test(micro, random_shapes_and_blockings)
{
	srand(17);
	for (int trial = 0; trial < 12; trial++) {
		int m = 1 + rand() % 70, n = 1 + rand() % 90, k = 1 + rand() % 60;
		kgen_micro b = {1 + rand() % 14, 8 * (1 + rand() % 8), 1 + rand() % k,
				0, 0, rand() % 2};
		char tensors[160];
		sched_graph *g;

		b.mc = b.mr * (1 + rand() % ((m + b.mr - 1) / b.mr));
		b.nc = b.nr * (1 + rand() % ((n + b.nr - 1) / b.nr));
		snprintf(tensors, sizeof(tensors), "a f32 %d,%d in; b f32 %d,%d in; "
			 "y f32 %d,%d out", m, k, k, n, m, n);
		g = gemm(tensors, "y[i, j] = sum(k) a[i, k] * b[k, j]");
		expect_verified(g, b);
		sched_graph_free(g);
	}
}

/* The family: one micro-kernel per size of block that occurs, each of
 * exact size (EXO), and no edge kernel where the blocks divide. */
Test(micro, one_kernel_per_block_size_that_occurs)
{
	sched_graph *edges = gemm("a f32 100,50 in; b f32 50,70 in; y f32 100,70 out",
				  "y[i, j] = sum(k) a[i, k] * b[k, j]");
	sched_graph *even = gemm("a f32 96,50 in; b f32 50,64 in; y f32 96,64 out",
				 "y[i, j] = sum(k) a[i, k] * b[k, j]");
	kgen_error err = {0};
	kgen_plan *p1 = micro_plan(edges, (kgen_micro){6, 16, 50, 48, 64, 1}, &err);
	kgen_plan *p2 = micro_plan(even, (kgen_micro){6, 16, 50, 48, 64, 1}, &err);
	char *s1 = kgen_print_c(edges, p1, 0), *s2 = kgen_print_c(even, p2, 0);

	cr_assert(s1 && s2);
	for (int i = 0; i < 4; i++) {
		static const char *const family[] = {"micro_6_16(", "micro_4_16(",
						     "micro_6_6(", "micro_4_6("};

		cr_expect_not_null(strstr(s1, family[i]), "no %s", family[i]);
		cr_expect_eq(strstr(s2, family[i]) != NULL, i == 0, "%s", family[i]);
	}
	free(s1);
	free(s2);
	kgen_plan_free(p1);
	kgen_plan_free(p2);
	sched_graph_free(edges);
	sched_graph_free(even);
}

static void expect_refused(const sched_graph *g, const char *plan_text,
			   const char *reason)
{
	json_t *json = json_loads(plan_text, 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	cr_assert_not_null(json);
	cr_expect_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_EPLAN, "%s", plan_text);
	cr_expect_not_null(strstr(err.message, reason), "'%s' for %s", err.message,
			   plan_text);
	kgen_plan_free(plan);
	json_decref(json);
}

#define MICRO(fields) "{\"kernels\": [{\"ops\": [0], \"schedule\": {\"micro\": {" fields "}}}]}"

Test(micro, misuses_are_refused_with_the_reason)
{
	sched_graph *g = gemm("a f32 10,8 in; b f32 8,12 in; y f32 10,12 out",
			      "y[i, j] = sum(k) a[i, k] * b[k, j]");
	sched_graph *row_sum = gemm("a f32 10,8 in; y f32 10 out", "y[i] = sum(k) a[i, k]");
	kgen_error err = {0};
	kgen_plan *fine;

	expect_refused(g, MICRO("\"mr\": 2, \"nr\": 12, \"kc\": 8, \"mc\": 4, \"nc\": 12, "
				"\"pack\": 1"), "multiple of 8");
	expect_refused(g, MICRO("\"mr\": 4, \"nr\": 8, \"kc\": 8, \"mc\": 6, \"nc\": 8, "
				"\"pack\": 1"), "'mc' must be a multiple of mr");
	expect_refused(g, MICRO("\"mr\": 2, \"nr\": 8, \"kc\": 8, \"mc\": 4, \"nc\": 24, "
				"\"pack\": 1"), "'nc' must be a multiple of nr (8) up to 16");
	expect_refused(g, MICRO("\"mr\": 2, \"nr\": 8, \"kc\": 9, \"mc\": 4, \"nc\": 8, "
				"\"pack\": 1"), "'kc' must be from 1 to K (8)");
	expect_refused(g, MICRO("\"mr\": 2, \"nr\": 8"), "object of mr, nr, kc, mc, nc and pack");
	expect_refused(g, MICRO("\"mr\": 2, \"nr\": 8, \"kc\": 8, \"mc\": 4, \"nc\": 8, "
				"\"pack\": 2"), "'pack' must be an integer from 0 to 1");
	expect_refused(row_sum, MICRO("\"mr\": 2, \"nr\": 8, \"kc\": 8, \"mc\": 4, \"nc\": 8, "
				      "\"pack\": 1"), "matrix products of one shape");
	fine = micro_plan(g, (kgen_micro){2, 8, 8, 4, 8, 1}, &err);
	cr_expect_not_null(fine, "a legal blocking refused: %s", err.message);
	kgen_plan_free(fine);
	sched_graph_free(g);
	sched_graph_free(row_sum);
}

/* A plan with micro-kernels reads back as it was written. */
Test(micro, plans_round_trip_through_json)
{
	sched_graph *g = gemm("a f32 10,8 in; b f32 8,12 in; y f32 10,12 out",
			      "y[i, j] = sum(k) a[i, k] * b[k, j]");
	kgen_error err = {0};
	kgen_plan *plan = micro_plan(g, (kgen_micro){2, 8, 5, 4, 16, 0}, &err), *back = NULL;
	json_t *json = kgen_plan_to_json(g, plan);

	cr_assert_eq(kgen_plan_from_json(g, json, &back, &err), KGEN_OK, "%s", err.message);
	cr_expect_eq(memcmp(&back->kernels[0].schedule.micro, &plan->kernels[0].schedule.micro,
			    sizeof(kgen_micro)), 0);
	json_decref(json);
	kgen_plan_free(plan);
	kgen_plan_free(back);
	sched_graph_free(g);
}

#define SIDE_BY_SIDE(ops) "{\"kernels\": [{\"ops\": " ops ", \"schedule\": {\"micro\": " \
	"{\"mr\": 4, \"nr\": 16, \"kc\": 16, \"mc\": 8, \"nc\": 32, \"pack\": 1}}}]}"

/* Two products of one shape (an LSTM's x W and h U) in one kernel, each
 * with its packing and driver, share the family of micro-kernels and
 * match the reference; products of two shapes, or one reading the
 * other, are refused. */
Test(micro, products_side_by_side_share_one_kernel)
{
	sched_graph *g = NULL, *chain = NULL, *shapes = NULL;
	sched_error serr = {0};
	json_t *json = json_loads(SIDE_BY_SIDE("[0, 1]"), 0, NULL);
	kgen_backend *backend = NULL;
	kgen_program *prog = NULL;
	kgen_plan *plan = NULL;
	kgen_check checks[4];
	kgen_error err = {0};
	char *source;

	cr_assert_eq(load_graph("x f32 20,24 in; h f32 20,24 in; w f32 24,40 in; "
				"u f32 24,40 in; wx f32 20,40 out; uh f32 20,40 out",
				OPS("wx[n, j] = sum(t) x[n, t] * w[t, j]",
				    "uh[n, j] = sum(t) h[n, t] * u[t, j]"), &g, &serr), SCHED_OK,
		     "%s", serr.message);
	cr_assert_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_OK, "%s", err.message);
	source = kgen_print_c(g, plan, 0);
	cr_expect(strstr(source, "pack_b_p0(") && strstr(source, "pack_b_p1("), "%s", source);
	cr_expect(strstr(source, "\tk0_wx_p0(tensors);\n\tk0_wx_p1(tensors);"), "%s", source);
	free(source);
	cr_assert_eq(kgen_backend_open("cpu", &backend, &err), KGEN_OK, "%s", err.message);
	cr_assert_eq(kgen_program_build(backend, g, plan, NULL, &prog, &err), KGEN_OK,
		     "%s\n%s", err.message, err.log ? err.log : "");
	cr_expect_eq(kgen_verify(prog, 3, checks, &err), KGEN_OK, "%s", err.message);
	cr_assert_eq(load_graph("x f32 20,24 in; w f32 24,24 in; y f32 20,24; z f32 20,24 out",
				OPS("y[n, j] = sum(t) x[n, t] * w[t, j]",
				    "z[n, j] = sum(t) y[n, t] * w[t, j]"), &chain, &serr), SCHED_OK);
	expect_refused(chain, SIDE_BY_SIDE("[0, 1]"), "matrix products of one shape, none "
		       "reading another");
	cr_assert_eq(load_graph("x f32 20,24 in; w f32 24,40 in; u f32 24,32 in; "
				"a f32 20,40 out; b f32 20,32 out",
				OPS("a[n, j] = sum(t) x[n, t] * w[t, j]",
				    "b[n, j] = sum(t) x[n, t] * u[t, j]"), &shapes, &serr), SCHED_OK);
	expect_refused(shapes, SIDE_BY_SIDE("[0, 1]"), "matrix products of one shape");
	kgen_program_free(prog);
	kgen_backend_close(backend);
	kgen_plan_free(plan);
	json_decref(json);
	kgen_error_release(&err);
	sched_graph_free(g);
	sched_graph_free(chain);
	sched_graph_free(shapes);
}

/* A convolution (a gathered product: its padded windows packed as B) on
 * micro-kernels, edges in M, N and K, matches the reference; so does one
 * whose B is an expression of two tensors. */
Test(micro, gathered_products_match_the_reference)
{
	sched_graph *conv = gemm("x f32 1,5,9,7 in; w f32 6,5,3,3 in; y f32 1,6,9,7 out",
				 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && "
				 "p + r <= 9 && q + s >= 1 && q + s <= 7, "
				 "x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]");
	sched_graph *mixed = gemm("a f32 6,5 in; b f32 5,7 in; d f32 7 in; y f32 6,7 out",
				  "y[i, j] = sum(k) a[i, k] * (b[k, j] + d[j])");

	expect_verified(conv, (kgen_micro){4, 16, 45, 8, 48, 1});
	expect_verified(conv, (kgen_micro){3, 32, 20, 6, 64, 0});
	expect_verified(mixed, (kgen_micro){4, 16, 5, 8, 16, 1});
	sched_graph_free(conv);
	sched_graph_free(mixed);
}

/* Whether the kernel of plan "m" of "g" reads B in place from a padded
 * copy (pad_window) rather than packing it (pack_b). */
static bool reads_windows_in_place(const sched_graph *g, kgen_micro m)
{
	kgen_error err = {0};
	kgen_plan *plan = micro_plan(g, m, &err);
	char *source;
	bool direct;

	cr_assert_not_null(plan, "%s", err.message);
	source = kgen_print_c(g, plan, 0);
	cr_assert_not_null(source);
	direct = strstr(source, "pad_window(") != NULL;
	cr_expect_neq(direct, strstr(source, "pack_b(") != NULL, "%s", source);
	free(source);
	kgen_plan_free(plan);
	return direct;
}

/* Convolutions whose windows are read in place from a zero-padded copy
 * (padding, no padding at all, dilation, an f16 input; edges
 * in M, along the rows of C and in K; A packed and not) match the
 * reference; so do those that keep im2row panels: a stride of 2 (columns
 * of B 2 apart), a condition beside the bounds that is none (a window cut
 * to a triangle, zeros inside x that padding cannot express), and an f16
 * output (staged). The last four have batches of 2 and 3, whose n var
 * joins p and q in C's columns (tiles of them cross from one image to the
 * next, the n-var offsets decoded across it) and output channels that no
 * tile of mr divides: y as k, n, p, q (C's columns contiguous) and as
 * n, p, q, k (C's columns K apart). */
Test(micro, convolutions_read_their_windows_in_place)
{
	/* The cases as a table, laid out by hand. */
	/* clang-format off */
	static const struct {
		const char *tensors, *op;
		kgen_micro m;
		bool direct;
	} cases[] = {
		{"x f32 1,5,9,7 in; w f32 6,5,3,3 in; y f32 1,6,9,7 out",
		 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 9 && "
		 "q + s >= 1 && q + s <= 7, x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]",
		 {4, 16, 45, 8, 48, 1}, true},
		{"x f32 1,3,6,20 in; w f32 5,3,3,3 in; y f32 1,5,6,20 out",
		 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 6 && "
		 "q + s >= 1 && q + s <= 20, x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]",
		 {4, 16, 10, 8, 32, 0}, true},
		{"x f32 1,4,8,21 in; w f32 3,4,2,3 in; y f32 1,3,7,19 out",
		 "y[n, k, p, q] = sum(c, r < 2, s < 3) x[n, c, p + r, q + s] * w[k, c, r, s]",
		 {2, 8, 7, 2, 16, 1}, true},
		{"x f32 1,3,10,11 in; w f32 4,3,3,3 in; y f32 1,4,10,11 out",
		 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + 2 * r >= 2 && "
		 "p + 2 * r <= 11 && q + 2 * s >= 2 && q + 2 * s <= 12, "
		 "x[n, c, p + 2 * r - 2, q + 2 * s - 2], 0) * w[k, c, r, s]",
		 {4, 8, 27, 4, 16, 1}, true},
		{"x f16 1,3,6,9 in; w f32 7,3,3,3 in; y f32 1,7,6,9 out",
		 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 6 && "
		 "q + s >= 1 && q + s <= 9, x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]",
		 {3, 8, 27, 6, 16, 1}, true},
		{"x f32 1,3,9,10 in; w f32 4,3,3,3 in; y f32 1,4,5,5 out",
		 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(2 * p + r >= 1 && "
		 "2 * p + r <= 9 && 2 * q + s >= 1 && 2 * q + s <= 10, "
		 "x[n, c, 2 * p + r - 1, 2 * q + s - 1], 0) * w[k, c, r, s]",
		 {4, 8, 27, 4, 16, 1}, false},
		{"x f32 1,3,6,9 in; w f32 4,3,3,3 in; y f32 1,4,6,9 out",
		 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 6 && "
		 "q + s >= 1 && q + s <= 9 && r + s <= 3, x[n, c, p + r - 1, q + s - 1], 0) * "
		 "w[k, c, r, s]",
		 {4, 8, 27, 4, 16, 1}, false},
		{"x f32 1,3,6,9 in; w f32 4,3,3,3 in; y f16 1,4,6,9 out",
		 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 6 && "
		 "q + s >= 1 && q + s <= 9, x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]",
		 {4, 8, 27, 4, 16, 1}, false},
		{"x f32 3,5,9,7 in; w f32 6,5,3,3 in; y f32 6,3,9,7 out",
		 "y[k, n, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 9 && "
		 "q + s >= 1 && q + s <= 7, x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]",
		 {4, 16, 45, 8, 48, 1}, true},
		{"x f32 2,3,6,20 in; w f32 10,3,3,3 in; y f32 2,6,20,10 out",
		 "y[n, p, q, k] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 6 && "
		 "q + s >= 1 && q + s <= 20, x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]",
		 {4, 16, 10, 8, 32, 0}, true},
		{"x f32 2,4,8,21 in; w f32 7,4,2,3 in; y f32 2,7,19,7 out",
		 "y[n, p, q, k] = sum(c, r < 2, s < 3) x[n, c, p + r, q + s] * w[k, c, r, s]",
		 {3, 8, 7, 6, 16, 1}, true},
		{"x f16 2,3,6,9 in; w f32 11,3,3,3 in; y f32 11,2,6,9 out",
		 "y[k, n, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 6 && "
		 "q + s >= 1 && q + s <= 9, x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]",
		 {4, 8, 27, 8, 16, 1}, true},
	};
	/* clang-format on */

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		sched_graph *g = gemm(cases[i].tensors, cases[i].op);

		cr_expect_eq(reads_windows_in_place(g, cases[i].m), cases[i].direct,
			     "case %zu: %s", i, cases[i].op);
		expect_verified(g, cases[i].m);
		sched_graph_free(g);
	}
}
