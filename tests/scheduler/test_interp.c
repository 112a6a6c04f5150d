/*
 * test_interp.c: the reference interpreter against results computed by
 * hand.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "graph_builder.h"
#include "scheduler.h"

typedef struct run {
	sched_graph *graph;
	double **values;
} run;

static run start(const char *tensors, const char *const *ops)
{
	run r = {0};
	sched_error err = {0};

	cr_assert_eq(load_graph(tensors, ops, &r.graph, &err), SCHED_OK, "%s",
		     err.message);
	r.values = sched_values_new(r.graph);
	cr_assert_not_null(r.values);
	return r;
}

static double *tensor(run *r, const char *name)
{
	int t = sched_tensor_find(r->graph, name);

	cr_assert_geq(t, 0, "no tensor %s", name);
	return r->values[t];
}

static void set(run *r, const char *name, const double *data)
{
	int t = sched_tensor_find(r->graph, name);

	memcpy(r->values[t], data, sched_tensor_size(r->graph, t) * sizeof(double));
}

static void evaluate(run *r)
{
	cr_assert_eq(sched_interp_run(r->graph, r->values), SCHED_OK);
}

static void finish(run *r)
{
	sched_values_free(r->graph, r->values);
	sched_graph_free(r->graph);
}

/* The tensors here are f32: the reference stores each element rounded
 * to the nearest float, so it must equal the exact value so rounded. */
static void expect_values(const double *got, const double *want, int n)
{
	for (int i = 0; i < n; i++)
		cr_expect_eq(got[i], (double)(float)want[i], "element %d: %.9g, want %.9g",
			     i, got[i], (double)(float)want[i]);
}

Test(interp, matmul)
{
	run r = start("a f32 2,3 in; b f32 3,2 in; c f32 2,2 out",
		      OPS("c[i, j] = sum(k) a[i, k] * b[k, j]"));

	set(&r, "a", (double[]){1, 2, 3, 4, 5, 6});
	set(&r, "b", (double[]){7, 8, 9, 10, 11, 12});
	evaluate(&r);
	expect_values(tensor(&r, "c"), (double[]){58, 64, 139, 154}, 4);
	finish(&r);
}

Test(interp, padded_conv)
{
	/* 3x3 image 1..9, 3x3 kernel of ones, padding 1: each output is the
	 * sum of its in-image neighbours. */
	run r = start("x f32 1,1,3,3 in; w f32 1,1,3,3 in; y f32 1,1,3,3 out",
		      OPS("y[n, k, p, q] = sum(c, r < 3, s < 3) "
			  "select(p + r >= 1 && p + r <= 3 && q + s >= 1 && q + s <= 3, "
			  "x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]"));
	double ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};

	set(&r, "x", (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9});
	set(&r, "w", ones);
	evaluate(&r);
	expect_values(tensor(&r, "y"),
		      (double[]){12, 21, 16, 27, 45, 33, 24, 39, 28}, 9);
	finish(&r);
}

Test(interp, softmax)
{
	run r = start("x f32 1,3 in; m f32 1; e f32 1,3; z f32 1; y f32 1,3 out",
		      OPS("m[i] = max(j) x[i, j]", "e[i, j] = exp(x[i, j] - m[i])",
			  "z[i] = sum(j) e[i, j]", "y[i, j] = e[i, j] / z[i]"));
	double total = 1 + exp(1) + exp(2);

	set(&r, "x", (double[]){1, 2, 3});
	evaluate(&r);
	expect_values(tensor(&r, "m"), (double[]){3}, 1);
	expect_values(tensor(&r, "y"),
		      (double[]){1 / total, exp(1) / total, exp(2) / total}, 3);
	finish(&r);
}

Test(interp, layernorm)
{
	run r = start("x f32 1,4 in; g f32 4 in; b f32 4 in; mu f32 1; var f32 1; "
		      "y f32 1,4 out",
		      OPS("mu[i] = sum(j) x[i, j] / 4",
			  "var[i] = sum(j) (x[i, j] - mu[i]) * (x[i, j] - mu[i]) / 4",
			  "y[i, j] = (x[i, j] - mu[i]) * rsqrt(var[i] + 0) * g[j] + b[j]"));
	double s = sqrt(1.25);

	set(&r, "x", (double[]){1, 2, 3, 4});
	set(&r, "g", (double[]){1, 1, 2, 2});
	set(&r, "b", (double[]){0, 0, 0, 1});
	evaluate(&r);
	expect_values(tensor(&r, "mu"), (double[]){2.5}, 1);
	expect_values(tensor(&r, "var"), (double[]){1.25}, 1);
	expect_values(tensor(&r, "y"),
		      (double[]){-1.5 / s, -0.5 / s, 2 * 0.5 / s, 2 * 1.5 / s + 1}, 4);
	finish(&r);
}

Test(interp, quasi_affine_reshape)
{
	/* Space-to-depth: y[4c + 2(p%2) + q%2, p/2, q/2] = x[c, p, q]
	 * read the other way round. */
	run r = start("x f32 1,4,4 in; y f32 4,2,2 out",
		      OPS("y[c, p, q] = x[c / 4, 2 * p + (c % 4) / 2, 2 * q + c % 2]"));
	double in[16];

	for (int i = 0; i < 16; i++)
		in[i] = i;
	set(&r, "x", in);
	evaluate(&r);
	expect_values(tensor(&r, "y"),
		      (double[]){0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15},
		      16);
	finish(&r);
}

Test(interp, reducers_and_i32)
{
	run r = start("x f32 2,3 in; mx f32 2 out; mn f32 2 out; pr f32 2 out; "
		      "t i32 2,3 out",
		      OPS("mx[i] = max(j) x[i, j]", "mn[i] = min(j) x[i, j]",
			  "pr[i] = prod(j) x[i, j]", "t[i, j] = x[i, j] * 1.5"));

	set(&r, "x", (double[]){1, -2, 3, 4, 5, -6});
	evaluate(&r);
	expect_values(tensor(&r, "mx"), (double[]){3, 5}, 2);
	expect_values(tensor(&r, "mn"), (double[]){-2, -6}, 2);
	expect_values(tensor(&r, "pr"), (double[]){-6, -120}, 2);
	expect_values(tensor(&r, "t"), (double[]){1, -3, 4, 6, 7, -9}, 6);
	finish(&r);
}

Test(interp, calls)
{
	run r = start("x f32 1 in; y f32 13 out",
		      OPS("y[i] = select(i == 0, exp(x[0]), select(i == 1, log(x[0]), "
			  "select(i == 2, rsqrt(x[0]), select(i == 3, sigmoid(x[0]), "
			  "select(i == 4, relu(-x[0]), select(i == 5, gelu(x[0]), "
			  "select(i == 6, gelu_tanh(x[0]), select(i == 7, silu(x[0]), "
			  "select(i == 8, pow(x[0], 3), select(i == 9, max(x[0], 1), "
			  "select(i == 10, abs(-x[0]), select(i == 11, 7 % 3, "
			  "-7 / 2))))))))))))"));
	double x = 0.75;
	double sig = 1 / (1 + exp(-x));

	set(&r, "x", (double[]){x});
	evaluate(&r);
	expect_values(tensor(&r, "y"),
		      (double[]){exp(x), log(x), 1 / sqrt(x), sig, 0,
				 0.5 * x * (1 + erf(x / sqrt(2))),
				 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))),
				 x * sig, x * x * x, 1, x, 1, -3.5},
		      13);
	finish(&r);
}

Test(interp, selects_evaluate_only_the_branch_taken)
{
	run r = start("x f32 4 in; y f32 4 out",
		      OPS("y[i] = select(i >= 1, x[i - 1], 100) + (i > 2 && x[i] > 0)"));

	set(&r, "x", (double[]){1, 2, 3, 4});
	evaluate(&r);
	expect_values(tensor(&r, "y"), (double[]){100, 1, 2, 4}, 4);
	finish(&r);
}

Test(interp, stores_round_to_the_dtype)
{
	run r = start("x f32 4 in; h f16 4 out; b bf16 4 out; i i32 4 out",
		      OPS("h[k] = x[k] / 3", "b[k] = x[k] / 3", "i[k] = x[k] / 3"));

	set(&r, "x", (double[]){1, -2, 1000, 70000});
	evaluate(&r);
	for (int k = 0; k < 4; k++) {
		double exact = (double)(float)((double[]){1, -2, 1000, 70000})[k] / 3;

		cr_expect_eq(tensor(&r, "h")[k], (double)(_Float16)exact);
		cr_expect_eq(tensor(&r, "i")[k], trunc(exact));
	}
	/* bf16 keeps 8 bits of mantissa: 1/3 = 0.333984375 */
	cr_expect_eq(tensor(&r, "b")[0], 0.333984375);
	cr_expect_eq(tensor(&r, "b")[1], -0.66796875);
	finish(&r);
}

/* sched_interp_run_exact keeps every float element in double (a matrix
 * product too), and still truncates i32. */
Test(interp, exact_runs_keep_floats_in_double)
{
	run r = start("x f32 4 in; w f32 4,2 in; h f16 4; p f32 2 out; i i32 4 out",
		      OPS("h[k] = x[k] / 3", "p[n] = sum(k) h[k] * w[k, n]",
			  "i[k] = x[k] / 3"));
	double x[4] = {1, -2, 1000, 70000}, w[8] = {1, 0, 0, 1, 1, 0, 0, 1};

	set(&r, "x", x);
	set(&r, "w", w);
	cr_assert_eq(sched_interp_run_exact(r.graph, r.values), SCHED_OK);
	for (int k = 0; k < 4; k++) {
		cr_expect_eq(tensor(&r, "h")[k], x[k] / 3);
		cr_expect_eq(tensor(&r, "i")[k], trunc(x[k] / 3));
	}
	cr_expect_eq(tensor(&r, "p")[0], x[0] / 3 + x[2] / 3);
	cr_expect_eq(tensor(&r, "p")[1], x[1] / 3 + x[3] / 3);
	finish(&r);
}

/* Fills every input with values of no pattern. */
static void fill_inputs(run *r)
{
	unsigned x = 12345;

	for (int t = 0; t < sched_graph_tensor_count(r->graph); t++)
		if (sched_tensor_role(r->graph, t) == SCHED_INPUT)
			for (int64_t i = 0; i < sched_tensor_size(r->graph, t); i++) {
				x = x * 1103515245u + 12345u;
				r->values[t][i] = (double)(x >> 8) / (1 << 24) - 0.5;
			}
}

/* Contractions run as matrix products (k outside, the needed columns
 * inside); each element must be what the general loop gives, the same
 * products added in the same order: "* 1" makes a body no contraction,
 * with the same value. Also with only some elements needed. */
Test(interp, products_equal_the_general_loop)
{
	static const char *const cases[][3] = {
		{"a f32 5,7 in; b f32 7,6 in; c f32 5,6 out",
		 "c[i, j] = sum(k) a[i, k] * b[k, j]", "c[i, j] = sum(k) a[i, k] * b[k, j] * 1"},
		{"a f32 7,5 in; b f32 6,7 in; c f32 5,6 out", /* C^T = B^T A^T */
		 "c[j, i] = sum(k) a[k, j] * b[i, k]", "c[j, i] = sum(k) a[k, j] * b[i, k] * 1"},
		{"x f32 2,3,4,2 in; w f32 4,2,5 in; y f32 2,3,5 out", /* merged m and k */
		 "y[b, s, j] = sum(c, e < 2) x[b, s, c, e] * w[c, e, j]",
		 "y[b, s, j] = sum(c, e < 2) x[b, s, c, e] * w[c, e, j] * 1"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		run fast = start(cases[i][0], OPS(cases[i][1]));
		run general = start(cases[i][0], OPS(cases[i][2]));
		sched_contraction c;
		int out = sched_graph_tensor_count(fast.graph) - 1;
		int64_t size = sched_tensor_size(fast.graph, out);
		bool **needed = calloc(sched_graph_tensor_count(fast.graph), sizeof(bool *));

		cr_assert(sched_op_contraction(fast.graph, 0, &c), "case %zu", i);
		cr_assert_not(sched_op_contraction(general.graph, 0, &c), "case %zu", i);
		fill_inputs(&fast);
		fill_inputs(&general);
		evaluate(&fast);
		evaluate(&general);
		for (int64_t e = 0; e < size; e++)
			cr_expect_eq(fast.values[out][e], general.values[out][e], "case %zu, %lld",
				     i, (long long)e);
		needed[out] = calloc(size, sizeof(bool));
		needed[out][size / 2] = true;
		memset(fast.values[out], 0, size * sizeof(double));
		cr_assert_eq(sched_interp_run_needed(fast.graph, fast.values, needed), SCHED_OK);
		for (int64_t e = 0; e < size; e++)
			cr_expect_eq(fast.values[out][e], e == size / 2 ? general.values[out][e] : 0,
				     "case %zu, only the needed element, %lld", i, (long long)e);
		free(needed[out]);
		free(needed);
		finish(&fast);
		finish(&general);
	}
}

/* Marking what a few output elements need, then evaluating only that,
 * gives those elements exactly as a whole run does: through padded
 * windows (a select), quasi-affine indices, reductions and a product
 * chain. */
Test(interp, needed_elements_equal_the_whole_run)
{
	static const char *const cases[][2] = {
		{"x f32 1,3,6,5 in; w f32 4,3,3,3 in; a f32 1,4,6,5; w2 f32 2,4,3,3 in; "
		 "y f32 1,2,6,5 out",
		 "a[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 6 && "
		 "q + s >= 1 && q + s <= 5, x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s];"
		 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 6 && "
		 "q + s >= 1 && q + s <= 5, a[n, c, p + r - 1, q + s - 1], 0) * w2[k, c, r, s]"},
		{"x f32 2,8,8 in; t f32 8,4,4; y f32 8,4,4 out",
		 "t[c, p, q] = x[c / 4, 2 * p + (c % 4) / 2, 2 * q + c % 2];"
		 "y[c, p, q] = t[c, p, q] * 2"},
		{"x f32 6,7 in; w f32 7,5 in; h f32 6,5; m f32 6; y f32 6,5 out",
		 "h[i, j] = sum(k) x[i, k] * w[k, j]; m[i] = max(j) h[i, j];"
		 "y[i, j] = exp(h[i, j] - m[i])"},
		{"x f32 5,6 in; w f32 6,7 in; h f32 5,7; u f32 3,5 in; g f32 3,7; v f32 7,4 in; "
		 "y f32 3,4 out", /* products reading a product as B, then as A */
		 "h[i, j] = sum(k) x[i, k] * w[k, j]; g[i, j] = sum(k) u[i, k] * h[k, j];"
		 "y[i, j] = sum(k) g[i, k] * v[k, j]"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		const char *op_list[4] = {NULL, NULL, NULL, NULL};
		char *text = strdup(cases[i][1]), *save = NULL;
		int nops = 0;

		for (char *op = strtok_r(text, ";", &save); op && nops < 3;
		     op = strtok_r(NULL, ";", &save))
			op_list[nops++] = op;
		run whole = start(cases[i][0], op_list), part = start(cases[i][0], op_list);
		int nt = sched_graph_tensor_count(whole.graph), out = nt - 1;
		int64_t size = sched_tensor_size(whole.graph, out);
		bool **needed = calloc(nt, sizeof(bool *));

		fill_inputs(&whole);
		fill_inputs(&part);
		evaluate(&whole);
		for (int t = 0; t < nt; t++)
			if (sched_tensor_role(part.graph, t) != SCHED_INPUT)
				needed[t] = calloc(sched_tensor_size(part.graph, t), sizeof(bool));
		needed[out][0] = needed[out][size / 2] = needed[out][size - 1] = true;
		cr_assert_eq(sched_interp_mark_needed(part.graph, needed), SCHED_OK);
		cr_assert_eq(sched_interp_run_needed(part.graph, part.values, needed), SCHED_OK);
		for (int64_t e = 0; e < size; e += size / 2 ? size / 2 : 1)
			cr_expect_eq(part.values[out][e], whole.values[out][e], "case %zu, %lld",
				     i, (long long)e);
		cr_expect_eq(part.values[out][size - 1], whole.values[out][size - 1],
			     "case %zu, the last", i);
		for (int t = 0; t < nt; t++)
			free(needed[t]);
		free(needed);
		free(text);
		finish(&whole);
		finish(&part);
	}
}
