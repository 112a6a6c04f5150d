/*
 * test_grad.c: backward graphs (sched_graph_grad) against central finite
 * differences. For random inputs x and incoming gradients d_out, the
 * backward graph's d_x must be the derivative of L = sum(d_out * out)
 * with respect to x, both run by the reference interpreter in double
 * precision throughout (sched_interp_run_exact).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_builder.h"
#include "../kernels/random_graph.h"
#include "scheduler.h"

#define MAX_WRT 32

typedef struct check {
	sched_graph *fwd, *bwd;
	enum sched_grad_save save;
	sched_graph *saving; /* the forward graph with the saved outputs */
	double **fv, **bv;
	uint64_t rng;
	const char *wrt[MAX_WRT];
	int nwrt;
	char wrt_text[256];
} check;

static double uniform(check *c, double lo, double hi)
{
	c->rng ^= c->rng << 13;
	c->rng ^= c->rng >> 7;
	c->rng ^= c->rng << 17;
	return lo + (hi - lo) * (double)(c->rng >> 11) / 9007199254740992.0;
}

static void split_wrt(check *c, const char *wrt)
{
	snprintf(c->wrt_text, sizeof(c->wrt_text), "%s", wrt);
	for (char *t = strtok(c->wrt_text, ","); t; t = strtok(NULL, ",")) {
		cr_assert_lt(c->nwrt, MAX_WRT, "more than %d names in %s", MAX_WRT, wrt);
		c->wrt[c->nwrt++] = t;
	}
}

/* Takes the backward graph of c->fwd and checks its interface: its
 * inputs the forward inputs and d_<output>, its outputs d_<wrt> shaped
 * and typed as the tensors they are the gradients of. */
static void take_grad(check *c)
{
	sched_error err = {0};
	char *json = NULL, *forward = NULL, name[80];

	cr_assert_eq(sched_graph_grad_saving(c->fwd, c->wrt, c->nwrt, c->save, &json,
					     &forward, &err),
		     SCHED_OK, "%s", err.message);
	cr_assert_eq(sched_graph_read_string(json, &c->bwd, &err), SCHED_OK, "%s",
		     err.message);
	free(json);
	cr_assert(!forward || c->save != SCHED_SAVE_NONE, "saved with --save none");
	if (forward)
		cr_assert_eq(sched_graph_read_string(forward, &c->saving, &err),
			     SCHED_OK, "%s", err.message);
	free(forward);
	for (int t = 0; t < sched_graph_tensor_count(c->bwd); t++) {
		const char *n = sched_tensor_name(c->bwd, t);
		int f = sched_tensor_find(c->fwd, n);
		int s = c->saving ? sched_tensor_find(c->saving, n) : -1;

		if (sched_tensor_role(c->bwd, t) == SCHED_INPUT && s >= 0 &&
		    sched_tensor_role(c->saving, s) == SCHED_OUTPUT) {
			continue; /* saved by the forward graph */
		} else if (sched_tensor_role(c->bwd, t) == SCHED_INPUT && f < 0) {
			cr_assert(!strncmp(n, "d_", 2), "input %s", n);
			f = sched_tensor_find(c->fwd, n + 2);
			cr_assert(f >= 0 && sched_tensor_role(c->fwd, f) == SCHED_OUTPUT,
				  "input %s is no output's gradient", n);
		} else if (sched_tensor_role(c->bwd, t) == SCHED_INPUT) {
			cr_assert_eq(sched_tensor_role(c->fwd, f), SCHED_INPUT, "%s", n);
		}
	}
	for (int i = 0; i < c->nwrt; i++) {
		int f = sched_tensor_find(c->fwd, c->wrt[i]), b;

		snprintf(name, sizeof(name), "d_%s", c->wrt[i]);
		b = sched_tensor_find(c->bwd, name);
		cr_assert(b >= 0, "no %s", name);
		cr_assert_eq(sched_tensor_role(c->bwd, b), SCHED_OUTPUT);
		cr_assert_eq(sched_tensor_dtype(c->bwd, b), sched_tensor_dtype(c->fwd, f));
		cr_assert_eq(sched_tensor_rank(c->bwd, b), sched_tensor_rank(c->fwd, f));
		cr_assert_eq(sched_tensor_size(c->bwd, b), sched_tensor_size(c->fwd, f));
	}
}

/* The forward graph with the saved outputs run on the forward inputs:
 * its values (NULL without one). */
static double **run_saving(check *c)
{
	double **sv;

	if (!c->saving)
		return NULL;
	sv = sched_values_new(c->saving);
	for (int t = 0; t < sched_graph_tensor_count(c->saving); t++)
		if (sched_tensor_role(c->saving, t) == SCHED_INPUT)
			memcpy(sv[t],
			       c->fv[sched_tensor_find(
				       c->fwd, sched_tensor_name(c->saving, t))],
			       sched_tensor_size(c->saving, t) * sizeof(double));
	cr_assert_eq(sched_interp_run_exact(c->saving, sv), SCHED_OK);
	return sv;
}

/* Random forward inputs in [lo, hi), the same in the backward graph, the
 * saved tensors as the forward graph that saves them writes them, and
 * random incoming gradients. */
static void fill_inputs(check *c, double lo, double hi)
{
	double **sv;

	c->rng = 0x9e3779b97f4a7c15ull;
	c->fv = sched_values_new(c->fwd);
	c->bv = sched_values_new(c->bwd);
	for (int t = 0; t < sched_graph_tensor_count(c->fwd); t++)
		if (sched_tensor_role(c->fwd, t) == SCHED_INPUT)
			for (int64_t e = 0; e < sched_tensor_size(c->fwd, t); e++)
				c->fv[t][e] = uniform(c, lo, hi);
	sv = run_saving(c);
	for (int t = 0; t < sched_graph_tensor_count(c->bwd); t++) {
		const char *name = sched_tensor_name(c->bwd, t);
		int f = sched_tensor_find(c->fwd, name);
		int s = c->saving ? sched_tensor_find(c->saving, name) : -1;

		if (sched_tensor_role(c->bwd, t) != SCHED_INPUT)
			continue;
		for (int64_t e = 0; e < sched_tensor_size(c->bwd, t); e++)
			c->bv[t][e] = s >= 0 ? sv[s][e] :
				      f >= 0 ? c->fv[f][e] :
					       uniform(c, -1, 1);
	}
	if (sv)
		sched_values_free(c->saving, sv);
	cr_assert_eq(sched_interp_run_exact(c->bwd, c->bv), SCHED_OK);
}

/* L = sum over outputs of d_out * out, the forward graph run again. */
static double loss(check *c)
{
	char name[80];
	double sum = 0;

	cr_assert_eq(sched_interp_run_exact(c->fwd, c->fv), SCHED_OK);
	for (int t = 0; t < sched_graph_tensor_count(c->fwd); t++) {
		const double *d;

		if (sched_tensor_role(c->fwd, t) != SCHED_OUTPUT)
			continue;
		snprintf(name, sizeof(name), "d_%s", sched_tensor_name(c->fwd, t));
		d = c->bv[sched_tensor_find(c->bwd, name)];
		for (int64_t e = 0; e < sched_tensor_size(c->fwd, t); e++)
			sum += d[e] * c->fv[t][e];
	}
	return sum;
}

/* d_<name> against central differences of L, on about "samples" elements
 * spread over the tensor (all: 0). */
static void compare_gradient(check *c, const char *name, int samples)
{
	int t = sched_tensor_find(c->fwd, name);
	char dname[80];
	const double *got;
	int64_t n = sched_tensor_size(c->fwd, t), step;

	snprintf(dname, sizeof(dname), "d_%s", name);
	got = c->bv[sched_tensor_find(c->bwd, dname)];
	step = samples && n > samples ? n / samples : 1;
	for (int64_t e = 0; e < n; e += step) {
		double x = c->fv[t][e], h = 1e-6 * fmax(1, fabs(x)), up, down, want;

		c->fv[t][e] = x + h;
		up = loss(c);
		c->fv[t][e] = x - h;
		down = loss(c);
		c->fv[t][e] = x;
		want = (up - down) / (2 * h);
		cr_expect(fabs(got[e] - want) <= 1e-6 * (1 + fabs(want)),
			  "d_%s[%lld] = %.12g, finite differences give %.12g",
			  name, (long long)e, got[e], want);
	}
}

static void finish(check *c)
{
	sched_values_free(c->fwd, c->fv);
	sched_values_free(c->bwd, c->bv);
	sched_graph_free(c->fwd);
	sched_graph_free(c->bwd);
	sched_graph_free(c->saving);
}

static void check_loaded(check *c, const char *wrt, double lo, double hi,
			 int samples)
{
	split_wrt(c, wrt);
	take_grad(c);
	fill_inputs(c, lo, hi);
	for (int i = 0; i < c->nwrt; i++)
		compare_gradient(c, c->wrt[i], samples);
	finish(c);
}

/* The gradient of the graph of "tensors" and "ops" with respect to the
 * comma-separated "wrt", on inputs drawn from [lo, hi). */
static void check_graph(const char *tensors, const char *const *ops,
			const char *wrt, double lo, double hi)
{
	check c = {0};
	sched_error err = {0};

	cr_assert_eq(load_graph(tensors, ops, &c.fwd, &err), SCHED_OK, "%s",
		     err.message);
	check_loaded(&c, wrt, lo, hi, 0);
}

static void check_example_saving(const char *name, const char *wrt, int samples,
				 enum sched_grad_save save)
{
	check c = {.save = save};
	sched_error err = {0};

	cr_assert_eq(load_example(name, &c.fwd, &err), SCHED_OK, "%s", err.message);
	check_loaded(&c, wrt, -1, 1, samples);
}

static void check_example(const char *name, const char *wrt, int samples)
{
	check c = {0};
	sched_error err = {0};

	cr_assert_eq(load_example(name, &c.fwd, &err), SCHED_OK, "%s", err.message);
	check_loaded(&c, wrt, -1, 1, samples);
}

/* The one-line error of differentiating the graph with respect to "wrt". */
static void expect_refusal(const char *tensors, const char *const *ops,
			   const char *wrt, int code, const char *message)
{
	check c = {0};
	sched_error err = {0};
	char *json = (char *)"untouched";

	cr_assert_eq(load_graph(tensors, ops, &c.fwd, &err), SCHED_OK, "%s",
		     err.message);
	split_wrt(&c, wrt);
	cr_expect_eq(sched_graph_grad(c.fwd, c.wrt, c.nwrt, &json, &err), code,
		     "%s", err.message);
	cr_expect_null(json);
	cr_expect_str_eq(err.message, message);
	sched_graph_free(c.fwd);
}

#define UNARY "x f32 6 in; y f32 6 out"

Test(grad, arithmetic)
{
	check_graph("a f32 3,4 in; b f32 3,4 in; y f32 3,4 out",
		    OPS("y[i, j] = -(a[i, j] * b[i, j]) + a[i, j] / b[i, j] - "
			"3 * b[i, j] + 2.5 * i - a[i, j] % 0.75"),
		    "a,b", 0.5, 2);
}

Test(grad, remainder_by_a_tensor)
{
	check_graph("a f32 5 in; b f32 5 in; y f32 5 out",
		    OPS("y[i] = (a[i] * 7) % b[i]"), "a,b", 0.5, 2);
}

Test(grad, exp_log_sqrt_rsqrt)
{
	check_graph(UNARY, OPS("y[i] = exp(x[i]) + log(x[i]) + sqrt(x[i]) + rsqrt(x[i])"),
		    "x", 0.2, 3);
}

Test(grad, tanh_sigmoid_erf)
{
	check_graph(UNARY, OPS("y[i] = tanh(x[i]) * 2 + sigmoid(x[i] * 3) - erf(x[i])"),
		    "x", -2, 2);
}

Test(grad, gelu_both_forms_and_silu)
{
	check_graph(UNARY, OPS("y[i] = gelu(x[i])"), "x", -3, 3);
	check_graph(UNARY, OPS("y[i] = gelu_tanh(x[i])"), "x", -3, 3);
	check_graph(UNARY, OPS("y[i] = silu(x[i])"), "x", -3, 3);
}

Test(grad, relu_and_abs)
{
	check_graph(UNARY, OPS("y[i] = relu(x[i]) + abs(x[i] * x[i] - 0.5)"), "x", -2, 2);
}

Test(grad, max_and_min_as_selects)
{
	check_graph("a f32 8 in; b f32 8 in; y f32 8 out",
		    OPS("y[i] = max(a[i], b[i]) * 2 + min(a[i] * 0.5, b[i])"), "a,b", -1, 1);
}

Test(grad, pow_of_both_arguments)
{
	check_graph("a f32 5 in; b f32 5 in; y f32 5 out",
		    OPS("y[i] = pow(a[i], b[i]) + pow(a[i], 3)"), "a,b", 0.5, 2);
}

/* A padded window: the guard passes the adjoint only where the read was
 * taken; the window's offset is solved for and guarded. */
Test(grad, select_guard_padding_window)
{
	check_graph("x f32 2,10 in; w f32 3 in; y f32 2,10 out",
		    OPS("y[n, p] = sum(r < 3) select(p + r >= 1 && p + r <= 10, "
			"x[n, p + r - 1], 0) * w[r]"),
		    "x,w", -1, 1);
}

Test(grad, sum_reducer_and_broadcast)
{
	check_graph("x f32 3,5 in; b f32 5 in; y f32 3 out",
		    OPS("y[i] = sum(j) x[i, j] * b[j] + b[j]"), "x,b", -1, 1);
}

Test(grad, max_reducer_through_the_argmax_mask)
{
	check_graph("x f32 4,6 in; m f32 4 out", OPS("m[i] = max(j) x[i, j]"), "x", -1, 1);
}

Test(grad, min_reducer_through_the_argmin_mask)
{
	check_graph("x f32 4,6 in; s f32 4,6; m f32 4 out",
		    OPS("s[i, j] = x[i, j] * x[i, j]", "m[i] = min(j) s[i, j]"), "x", -1, 1);
}

Test(grad, prod_reducer)
{
	check_graph("x f32 3,4 in; p f32 3 out", OPS("p[i] = prod(j) x[i, j] + 1"),
		    "x", 0.5, 2);
}

Test(grad, contraction_both_factors)
{
	check_graph("a f32 3,4 in; b f32 4,5 in; c f32 3,5 out",
		    OPS("c[m, n] = sum(k) a[m, k] * b[k, n]"), "a,b", -1, 1);
}

Test(grad, batched_contraction_transposed)
{
	check_graph("q f32 2,3,4 in; k f32 2,5,4 in; s f32 2,3,5 out",
		    OPS("s[h, i, j] = sum(d) q[h, i, d] * k[h, j, d] * 0.5"), "q,k", -1, 1);
}

Test(grad, transpose_and_reversal)
{
	check_graph("x f32 3,4 in; y f32 4,3 out",
		    OPS("y[j, i] = x[i, 3 - j] * x[i, j]"), "x", -1, 1);
}

/* Offsets that read part of a tensor (the LSTM's gates), a constant index
 * and a strided head layout (h * 4 + d). */
Test(grad, offsets_constants_and_strided_layouts)
{
	check_graph("g f32 2,12 in; y f32 2,4 out",
		    OPS("y[n, j] = g[n, j + 4] * sigmoid(g[n, j + 8]) + g[0, j]"), "g", -1, 1);
	check_graph("x f32 3,8 in; q f32 2,3,4 out",
		    OPS("q[h, s, d] = x[s, h * 4 + d]"), "x", -1, 1);
}

/* A tensor read twice in one op, by two ops, and an output read by
 * another op: the contributions add up. */
Test(grad, repeated_reads_accumulate)
{
	check_graph("x f32 6 in; t f32 6; y f32 6 out; z f32 5 out",
		    OPS("t[i] = x[i] * x[i]", "y[i] = t[i] + exp(x[i])",
			"z[i] = y[i] * x[i + 1] + x[i] * x[i]"),
		    "x", -1, 1);
}

/* A tensor of wrt that no output depends on gets a zero gradient; an i32
 * intermediate stops the gradient. */
Test(grad, unreachable_and_integer_paths)
{
	check_graph("x f32 4 in; u f32 4 in; y f32 4 out",
		    OPS("y[i] = x[i] * 2"), "x,u", -1, 1);
	check_graph("x f32 4 in; k i32 4; y f32 4 out",
		    OPS("k[i] = x[i] * 10", "y[i] = k[i] + x[i]"), "x", -1, 1);
}

/* The gradient with respect to an intermediate is the gradient with
 * respect to it made an input, at the value the forward graph gives it
 * (which the finite differences check in the second graph). */
Test(grad, intermediate_as_if_it_were_an_input)
{
	check whole = {0}, cut = {0};
	sched_error err = {0};
	int t, x, dt_whole, dt_cut;

	cr_assert_eq(load_graph("x f32 6 in; t f32 6; y f32 6 out",
				OPS("t[i] = x[i] * x[i]", "y[i] = tanh(t[i]) * x[i]"),
				&whole.fwd, &err), SCHED_OK, "%s", err.message);
	cr_assert_eq(load_graph("x f32 6 in; t f32 6 in; y f32 6 out",
				OPS("y[i] = tanh(t[i]) * x[i]"), &cut.fwd, &err),
		     SCHED_OK, "%s", err.message);
	split_wrt(&whole, "t");
	split_wrt(&cut, "t");
	take_grad(&whole);
	take_grad(&cut);
	fill_inputs(&whole, -1, 1);
	cr_assert_eq(sched_interp_run_exact(whole.fwd, whole.fv), SCHED_OK);
	cut.fv = sched_values_new(cut.fwd);
	cut.bv = sched_values_new(cut.bwd);
	t = sched_tensor_find(whole.fwd, "t");
	x = sched_tensor_find(whole.fwd, "x");
	for (int i = 0; i < 6; i++) {
		cut.fv[sched_tensor_find(cut.fwd, "x")][i] = whole.fv[x][i];
		cut.fv[sched_tensor_find(cut.fwd, "t")][i] = whole.fv[t][i];
		cut.bv[sched_tensor_find(cut.bwd, "x")][i] = whole.fv[x][i];
		cut.bv[sched_tensor_find(cut.bwd, "t")][i] = whole.fv[t][i];
		cut.bv[sched_tensor_find(cut.bwd, "d_y")][i] =
			whole.bv[sched_tensor_find(whole.bwd, "d_y")][i];
	}
	cr_assert_eq(sched_interp_run_exact(cut.bwd, cut.bv), SCHED_OK);
	compare_gradient(&cut, "t", 0);
	dt_whole = sched_tensor_find(whole.bwd, "d_t");
	dt_cut = sched_tensor_find(cut.bwd, "d_t");
	for (int i = 0; i < 6; i++)
		cr_expect_float_eq(whole.bv[dt_whole][i], cut.bv[dt_cut][i], 1e-12,
				   "d_t[%d]", i);
	finish(&whole);
	finish(&cut);
}

static int count(const char *text, const char *what)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, what)); p++)
		n++;
	return n;
}

/* A call the derivative needs twice is computed once, as an intermediate
 * that the contributions of the same shape and index read (and the
 * finite differences still hold). */
Test(grad, common_calls_are_computed_once)
{
	const char *tensors = "x f32 5 in; b f32 5 in; y f32 5 out";
	const char *const *ops = OPS("y[i] = sigmoid(x[i] * 2) * b[i] + tanh(x[i] + b[i]) * x[i]");
	const char *wrt[] = {"x", "b"};
	sched_graph *g;
	sched_error err = {0};
	char *json;

	cr_assert_eq(load_graph(tensors, ops, &g, &err), SCHED_OK, "%s", err.message);
	cr_assert_eq(sched_graph_grad(g, wrt, 2, &json, &err), SCHED_OK, "%s", err.message);
	cr_expect(strstr(json, "\"d_x__s0[i0] = tanh(x[i0] + b[i0])\""), "%s", json);
	cr_expect(strstr(json, "\"d_x__s1[i0] = sigmoid(x[i0] * 2)\""), "%s", json);
	cr_expect_eq(count(json, "tanh("), 1, "%s", json);
	cr_expect_eq(count(json, "sigmoid("), 1, "%s", json);
	free(json);
	sched_graph_free(g);
	check_graph(tensors, ops, "x,b", -1, 1);
}

Test(grad, scalars)
{
	check_graph("x f32 5 in; s f32 - in; y f32 - out",
		    OPS("y[] = sum(i) x[i] * s[]"), "x,s", -1, 1);
}

/* Quasi-affine reads: an upsampling (i / 2), a tiling (i % 4, also read
 * where the tiled tensor is longer than the period), offsets inside both,
 * a constant one, a reversed quotient and two such dims in one read. */
Test(grad, floor_division_and_remainder_indices)
{
	check_graph("x f32 4 in; y f32 8 out", OPS("y[i] = x[i / 2] * x[i / 2]"),
		    "x", -1, 1);
	check_graph("x f32 4 in; y f32 7 out", OPS("y[i] = tanh(x[(i + 1) / 2])"),
		    "x", -1, 1);
	check_graph("x f32 4 in; y f32 12 out", OPS("y[i] = x[i % 4] * i"), "x", -1, 1);
	check_graph("x f32 6 in; y f32 10 out", OPS("y[i] = exp(x[(i + 3) % 4])"),
		    "x", -1, 1);
	check_graph("x f32 3 in; y f32 5 out", OPS("y[i] = x[7 / 3] * x[i % 3]"),
		    "x", -1, 1);
	check_graph("x f32 2,3 in; y f32 3,6 out",
		    OPS("y[h, w] = x[h / 2, w % 3] + x[(h + 1) / 2, (5 - w) / 2]"), "x", -1, 1);
}

/* The backward graph of "tensors" and "ops" with respect to x holds the
 * op "text" (quoted, as graph.json writes it). */
static void expect_adjoint_x(const char *tensors, const char *const *ops,
			     const char *text)
{
	const char *wrt[] = {"x"};
	sched_graph *g;
	sched_error err = {0};
	char *json;

	cr_assert_eq(load_graph(tensors, ops, &g, &err), SCHED_OK, "%s", err.message);
	cr_assert_eq(sched_graph_grad(g, wrt, 1, &json, &err), SCHED_OK, "%s",
		     err.message);
	cr_expect(strstr(json, text), "%s", json);
	free(json);
	sched_graph_free(g);
}

/* A quotient and a remainder of one form and divisor in one read (the
 * heads of attention split apart, x[i, r / 4, r % 4]) solve together,
 * r = 4 j1 + j2: the adjoint reads its one point, summing over none. */
Test(grad, a_quotient_and_remainder_of_one_form_solve_together)
{
	const char *tensors = "x f32 2,3,4 in; y f32 2,12 out";
	const char *const *ops = OPS("y[i, r] = x[i, r / 4, r % 4] * 2");

	expect_adjoint_x(tensors, ops,
			 "\"d_x[i0, i1, i2] = d_y[i0, (4 * i1 + i2)] * 2\"");
	check_graph(tensors, ops, "x", -1, 1);
	check_graph("x f32 5,4 in; y f32 10 out",
		    OPS("y[r] = exp(x[r / 3 + 1, r % 3 + 1])"), "x", -1, 1);
	check_graph("x f32 3,4 in; y f32 3,10 out",
		    OPS("y[h, r] = x[h, r % 4] * x[(r + 2) / 4, (r + 2) % 4]"), "x", -1,
		    1);
}

/* Two variables merged into one dim, the smaller of range at most the
 * other's coefficient (heads merged back, x[i, h * 4 + d]), solve as the
 * quotient and remainder of the adjoint's index: one point, summing over
 * none, guarded where the remainder or the quotient can leave its range. */
Test(grad, a_merged_index_solves_as_quotient_and_remainder)
{
	const char *tensors = "x f32 2,8 in; y f32 2,2,4 out";
	const char *const *ops = OPS("y[i, h, d] = x[i, h * 4 + d] * 2");

	expect_adjoint_x(tensors, ops,
			 "\"d_x[i0, i1] = d_y[i0, (i1 / 4), (i1 % 4)] * 2\"");
	check_graph(tensors, ops, "x", -1, 1);
	check_graph("x f32 12 in; y f32 2,3 out",
		    OPS("y[h, d] = exp(x[5 * h + d + 1])"), "x", -1, 1);
	check_graph("x f32 9 in; y f32 2,4 out", OPS("y[h, d] = x[8 - 4 * h - d] * d"),
		    "x", -1, 1);
	check_graph("x f32 8 in; y f32 2,4 out", OPS("y[h, d] = x[4 * h - d + 3] * h"),
		    "x", -1, 1);
	check_graph("x f32 3,11 in; y f32 3,4 out",
		    OPS("y[i, j] = sum(h in 1:3, d in 2:5) x[i, 3 * h + d] * (h + d)"),
		    "x", -1, 1);
}

Test(grad, refuses_an_index_it_cannot_invert)
{
	expect_refusal("x f32 4 in; y f32 8 out", OPS("y[i] = x[i / 2 / 1]"), "x",
		       SCHED_EMEANING,
		       "op 0, column 10: cannot differentiate the read 'x[i / 2 / 1]': "
		       "its index 'i / 2 / 1' is not an affine form, nor one divided "
		       "by or taken modulo a constant, so its inverse is not built");
	expect_refusal("x f32 2,3,4 in; y f32 4,6 out",
		       OPS("y[h, w] = x[h / 2, w / 2, (h % 2) * 2 + w % 2]"), "x",
		       SCHED_EMEANING,
		       "op 0, column 27: cannot differentiate the read 'x[h / 2, w / 2, "
		       "(h % 2) * 2 + w % 2]': its index '(h % 2) * 2 + w % 2' is not an "
		       "affine form, nor one divided by or taken modulo a constant, so "
		       "its inverse is not built");
}

/* One variable in several dims (a diagonal, shifted copies) solves in one
 * and guards the others; a strided read solves with a divisibility guard. */
Test(grad, diagonals_and_strides)
{
	check_graph("x f32 4,4 in; y f32 4 out", OPS("y[i] = x[i, i] * 3"), "x", -1, 1);
	check_graph("x f32 6,7 in; y f32 3 out",
		    OPS("y[w] = exp(x[w + 2, w + 4] - x[w, w + 1])"), "x", -1, 1);
	check_graph("x f32 9 in; y f32 4 out", OPS("y[k] = x[2 * k + 1] * x[8 - 2 * k]"),
		    "x", -1, 1);
	check_graph("x f32 5 in; y f32 7 out", OPS("y[c] = x[(12 - 2 * c) / 3]"), "x",
		    -1, 1);
}

Test(grad, refuses_an_unsolvable_variable)
{
	expect_refusal("x f32 8,8 in; y f32 4 out", OPS("y[i] = x[2 * i, 2 * i]"), "x",
		       SCHED_EMEANING,
		       "op 0, column 10: cannot differentiate the read 'x[2 * i, 2 * i]': "
		       "its index '2 * i' leaves a variable that no index solves for "
		       "(its coefficient is not 1 or -1 and other indices use it), so "
		       "its inverse is not built");
}

/* A max or min whose body is an expression, or a read its target does not
 * hold exactly, is split into its body, an exact f32 extremum and a copy;
 * the adjoint goes through the split one. */
Test(grad, extrema_of_expressions)
{
	check_graph("x f32 4,6 in; m f32 4 out", OPS("m[i] = max(j) x[i, j] * 2 + x[i, 0]"),
		    "x", -1, 1);
	check_graph("x f32 4,6 in; w f32 6 in; m f16 4 out",
		    OPS("m[i] = min(j in 1:5) exp(x[i, j] * w[j])"), "x,w", -1, 1);
	check_graph("x f32 4,6 in; m bf16 4 out", OPS("m[i] = max(j) x[i, j]"), "x", -1, 1);
	expect_refusal("x f32 4,6 in; m__body f32 4 in; m f32 4 out",
		       OPS("m[i] = max(j) x[i, j] * m__body[i]"), "x", SCHED_EGRAPH,
		       "op 0, column 1: cannot differentiate the max reduction into "
		       "'m': it is split into 'm__body', a name the graph uses; "
		       "rename that tensor");
}

/* Run with rounding as the kernels round (the result f16, the body
 * f32), the mask still finds the argmax: each row of d_x has one element,
 * 3 d_m, the rest 0. Unsplit, "x * 3 == m" would hold nowhere. */
Test(grad, extrema_masks_hold_under_rounding)
{
	check c = {0};
	sched_error err = {0};
	double *dx, *dm;

	cr_assert_eq(load_graph("x f32 4,6 in; m f16 4 out",
				OPS("m[i] = max(j) x[i, j] * 3"), &c.fwd, &err),
		     SCHED_OK, "%s", err.message);
	split_wrt(&c, "x");
	take_grad(&c);
	fill_inputs(&c, -1, 1);
	cr_assert_eq(sched_interp_run(c.bwd, c.bv), SCHED_OK);
	dx = c.bv[sched_tensor_find(c.bwd, "d_x")];
	dm = c.bv[sched_tensor_find(c.bwd, "d_m")];
	for (int i = 0; i < 4; i++) {
		int nonzero = 0;

		for (int j = 0; j < 6; j++)
			if (dx[i * 6 + j] != 0) {
				nonzero++;
				cr_expect_eq(dx[i * 6 + j], (double)(float)(3 * dm[i]));
			}
		cr_expect_eq(nonzero, 1, "row %d", i);
	}
	finish(&c);
}

/* A derivative that outgrows an op's 16384 characters is refused as over
 * a limit of the format, not as a bug. */
Test(grad, refuses_a_backward_graph_over_the_format_s_limits)
{
	char body[1200] = "y[i] = x[i]";
	check c = {0};
	sched_error err = {0};
	char *json = NULL;

	for (int k = 1; k < 150; k++)
		strcat(body, " * x[i]");
	cr_assert_eq(load_graph("x f32 4 in; y f32 4 out", OPS(body), &c.fwd, &err),
		     SCHED_OK, "%s", err.message);
	split_wrt(&c, "x");
	cr_expect_eq(sched_graph_grad(c.fwd, c.wrt, c.nwrt, &json, &err), SCHED_ELIMIT,
		     "%s", err.message);
	cr_expect_null(json);
	cr_expect_str_eq(err.message, "cannot differentiate: the backward graph is "
			 "over a limit of graph.json (op 0: is longer than 16384 "
			 "characters); write the forward ops as more, smaller ops");
	sched_graph_free(c.fwd);
}

Test(grad, refuses_bad_wrt)
{
	const char *const *ops = OPS("y[i] = x[i] + k[i]");

	expect_refusal("x f32 4 in; k i32 4 in; y f32 4 out", ops, "nope",
		       SCHED_EGRAPH, "cannot differentiate with respect to 'nope': "
		       "the graph has no such tensor");
	expect_refusal("x f32 4 in; k i32 4 in; y f32 4 out", ops, "y",
		       SCHED_EGRAPH, "cannot differentiate with respect to 'y': it "
		       "is an output, whose gradient is the input d_y");
	expect_refusal("x f32 4 in; k i32 4 in; y f32 4 out", ops, "k",
		       SCHED_EGRAPH, "cannot differentiate with respect to 'k': it "
		       "is i32, and integers have no gradient");
}

Test(grad, refuses_a_taken_name)
{
	expect_refusal("x f32 4 in; d_x f32 4 in; y f32 4 out",
		       OPS("y[i] = x[i] * d_x[i]"), "x", SCHED_EGRAPH,
		       "the backward graph needs the name 'd_x' for the gradient "
		       "of 'x', but the graph has a tensor of that name; rename it");
}

Test(grad, example_ln_residual)
{
	check_example("ln_residual_small", "x,r,gamma,beta", 8);
}

Test(grad, example_softmax_scores)
{
	check_example("softmax_scores_small", "P", 8);
}

Test(grad, example_gpt3_mlp)
{
	check_example("gpt3_mlp_small", "X,W1,W2", 6);
}

Test(grad, example_lstm_cell)
{
	check_example("lstm_cell_small", "x,h,c,Wx,Wh,b", 6);
}

/* The backward graphs that read saved forward results (auto: the costly
 * ones; all) match finite differences too, the saved tensors written by
 * the forward graph that outputs them; with extrema split (softmax), the
 * forward graph is the split one. */
Test(grad, saved_results_match_finite_differences)
{
	static const char *const examples[][2] = {
		{"ln_residual_small", "x,r,gamma,beta"},
		{"softmax_scores_small", "P"},
		{"gpt3_mlp_small", "X,W1,W2"},
		{"lstm_cell_small", "x,h,c,Wx,Wh,b"},
	};

	for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
		check_example_saving(examples[i][0], examples[i][1], 6,
				     SCHED_SAVE_AUTO);
		check_example_saving(examples[i][0], examples[i][1], 6, SCHED_SAVE_ALL);
	}
}

/* The names of the inputs of "g" that "saving" outputs and "fwd" does
 * not have as an input, sorted as "g" declares them, comma-separated. */
static void saved_inputs(const check *c, char *out, size_t size)
{
	size_t len = 0;

	out[0] = 0;
	for (int t = 0; t < sched_graph_tensor_count(c->bwd); t++) {
		const char *n = sched_tensor_name(c->bwd, t);
		int f = sched_tensor_find(c->fwd, n);

		if (sched_tensor_role(c->bwd, t) == SCHED_INPUT && f >= 0 &&
		    sched_tensor_role(c->fwd, f) != SCHED_INPUT)
			len += snprintf(out + len, size - len, "%s%s", len ? "," : "",
					n);
	}
}

/* What --save auto keeps in the LSTM cell: the contractions gx and gh
 * and the output c_new, read saved; the gates, cheap elementwise ops of
 * those, recomputed. --save all keeps every result the backward reads
 * directly (so not gx, gh, gates, which only the recomputation read);
 * the forward graph outputs what is saved and computes what it did. */
Test(grad, save_auto_keeps_contractions_and_recomputes_elementwise)
{
	static const char *const want[] = {"gx,gh,c_new", "ig,fg,gg,og,c_new"};
	enum sched_grad_save modes[] = {SCHED_SAVE_AUTO, SCHED_SAVE_ALL};
	int recomputed[2];

	for (int m = 0; m < 2; m++) {
		check c = {.save = modes[m]};
		sched_error err = {0};
		char saved[256];

		cr_assert_eq(load_example("lstm_cell_small", &c.fwd, &err), SCHED_OK,
			     "%s", err.message);
		split_wrt(&c, "x,h,c,Wx,Wh,b");
		take_grad(&c);
		saved_inputs(&c, saved, sizeof(saved));
		cr_expect_str_eq(saved, want[m]);
		cr_assert(c.saving);
		cr_expect_str_eq(sched_graph_name(c.saving), "lstm_cell_small_fwd");
		cr_expect_eq(sched_graph_op_count(c.saving),
			     sched_graph_op_count(c.fwd));
		for (int t = 0; t < sched_graph_tensor_count(c.saving); t++) {
			int b = sched_tensor_find(c.bwd,
						  sched_tensor_name(c.saving, t));
			bool read_saved = b >= 0 &&
					  sched_tensor_role(c.bwd, b) == SCHED_INPUT;

			if (sched_tensor_role(c.saving, t) != SCHED_INPUT)
				cr_expect_eq(
					sched_tensor_role(c.saving, t) == SCHED_OUTPUT,
					read_saved ||
						!strcmp(sched_tensor_name(c.saving, t),
							"h_new"),
					"%s", sched_tensor_name(c.saving, t));
		}
		recomputed[m] = sched_graph_op_count(c.bwd);
		sched_graph_free(c.fwd);
		sched_graph_free(c.bwd);
		sched_graph_free(c.saving);
	}
	cr_expect_lt(recomputed[1], recomputed[0], "all: %d ops, auto: %d",
		     recomputed[1], recomputed[0]);
}

/* Nothing saved: no forward graph, and the backward graph is the one
 * that recomputes (sched_graph_grad's). */
Test(grad, save_none_recomputes)
{
	check c = {.save = SCHED_SAVE_NONE};
	sched_error err = {0};
	char *json = NULL;
	sched_graph *plain;

	cr_assert_eq(load_example("lstm_cell_small", &c.fwd, &err), SCHED_OK, "%s",
		     err.message);
	split_wrt(&c, "x,h,c,Wx,Wh,b");
	take_grad(&c);
	cr_expect_null(c.saving);
	cr_assert_eq(sched_graph_grad(c.fwd, c.wrt, c.nwrt, &json, &err), SCHED_OK);
	cr_assert_eq(sched_graph_read_string(json, &plain, &err), SCHED_OK);
	cr_expect_str_eq(sched_graph_key(plain), sched_graph_key(c.bwd));
	free(json);
	sched_graph_free(plain);
	sched_graph_free(c.fwd);
	sched_graph_free(c.bwd);
}

/* A backward graph is a graph like any other: differentiated again with
 * respect to the incoming gradients (its inputs' d_<x> are its outputs
 * already; its own intermediates' names taken, the new ones get a
 * suffix), the derivatives match finite differences. */
Test(grad, backward_graphs_differentiate_again)
{
	check_example("softmax_scores_small_grad", "d_y", 8);
	check_example("gpt3_mlp_small_grad", "d_Y", 6);
	check_example("lstm_cell_small_grad", "d_h_new,d_c_new", 6);
}

/* The backward graphs in examples/ are what sched_graph_grad writes now:
 * the same key as the graph it gives for their forward graph. */
Test(grad, examples_are_current)
{
	static const char *const examples[][2] = {
		{"ln_residual", "x,r,gamma,beta"},
		{"ln_residual_small", "x,r,gamma,beta"},
		{"softmax_scores", "P"}, {"softmax_scores_small", "P"},
		{"gpt3_mlp_m256", "X,W1,W2"}, {"gpt3_mlp_small", "X,W1,W2"},
		{"lstm_cell", "x,h,c,Wx,Wh,b"}, {"lstm_cell_small", "x,h,c,Wx,Wh,b"},
	};

	for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
		check c = {0};
		sched_graph *stored;
		sched_error err = {0};
		char name[96];

		snprintf(name, sizeof(name), "%s_grad", examples[i][0]);
		cr_assert_eq(load_example(examples[i][0], &c.fwd, &err), SCHED_OK,
			     "%s", err.message);
		cr_assert_eq(load_example(name, &stored, &err), SCHED_OK, "%s",
			     err.message);
		split_wrt(&c, examples[i][1]);
		take_grad(&c);
		cr_expect_str_eq(sched_graph_key(c.bwd), sched_graph_key(stored),
				 "examples/%s.json is not what tunectl grad %s.json "
				 "--wrt %s writes", name, examples[i][0], examples[i][1]);
		sched_graph_free(stored);
		sched_graph_free(c.fwd);
		sched_graph_free(c.bwd);
	}
}

/* The float inputs of "g", comma-separated, into "out"; false if none. */
static bool float_inputs(const sched_graph *g, char *out, size_t size)
{
	size_t len = 0;

	out[0] = 0;
	for (int t = 0; t < sched_graph_tensor_count(g) && len < size; t++)
		if (sched_tensor_role(g, t) == SCHED_INPUT &&
		    sched_tensor_dtype(g, t) != SCHED_I32)
			len += snprintf(out + len, size - len, "%s%s", len ? "," : "",
					sched_tensor_name(g, t));
	return len > 0;
}

/* Random graphs (every call, reducer and index form across seeds), with
 * respect to every float input: the backward graph validates and matches
 * finite differences, or the graph is refused for one of the documented
 * reasons (an op, a read and why); never an invalid backward graph. */
Test(grad, random_graphs)
{
	int checked = 0, refused = 0;

	for (unsigned seed = 1; seed <= 150; seed++) {
		char *text = random_graph_json(seed), wrt[256];
		check c = {0};
		sched_error err = {0};
		char *json = NULL;
		int rc;

		cr_assert_eq(sched_graph_read_string(text, &c.fwd, &err), SCHED_OK,
			     "seed %u: %s", seed, err.message);
		free(text);
		if (!float_inputs(c.fwd, wrt, sizeof(wrt))) {
			sched_graph_free(c.fwd);
			continue;
		}
		split_wrt(&c, wrt);
		rc = sched_graph_grad(c.fwd, c.wrt, c.nwrt, &json, &err);
		free(json);
		if (rc != SCHED_OK) {
			cr_expect_eq(rc, SCHED_EMEANING, "seed %u: %s", seed, err.message);
			cr_expect(strstr(err.message, "cannot differentiate"), "seed %u: %s",
				  seed, err.message);
			refused++;
			sched_graph_free(c.fwd);
			continue;
		}
		take_grad(&c);
		fill_inputs(&c, -1, 1);
		for (int i = 0; i < c.nwrt; i++)
			compare_gradient(&c, c.wrt[i], 4);
		finish(&c);
		checked++;
	}
	cr_log_info("random graphs: %d checked, %d refused", checked, refused);
	cr_expect_gt(checked, 3 * refused, "%d checked, %d refused", checked, refused);
}

/* Random graphs with the forward results saved (auto and all, by turns):
 * the backward graph, reading them from the forward graph that outputs
 * them, matches finite differences. */
Test(grad, random_graphs_saving)
{
	int checked = 0;

	for (unsigned seed = 1; seed <= 60; seed++) {
		char *text = random_graph_json(seed), wrt[256], *json = NULL;
		check c = {.save = seed % 2 ? SCHED_SAVE_ALL : SCHED_SAVE_AUTO};
		sched_error err = {0};
		int rc;

		cr_assert_eq(sched_graph_read_string(text, &c.fwd, &err), SCHED_OK,
			     "seed %u: %s", seed, err.message);
		free(text);
		if (!float_inputs(c.fwd, wrt, sizeof(wrt)) ||
		    (split_wrt(&c, wrt),
		     rc = sched_graph_grad(c.fwd, c.wrt, c.nwrt, &json, &err)) !=
			    SCHED_OK) {
			free(json);
			sched_graph_free(c.fwd);
			continue;
		}
		free(json);
		take_grad(&c);
		fill_inputs(&c, -1, 1);
		for (int i = 0; i < c.nwrt; i++)
			compare_gradient(&c, c.wrt[i], 4);
		finish(&c);
		checked++;
	}
	cr_expect_gt(checked, 40, "%d checked", checked);
}
