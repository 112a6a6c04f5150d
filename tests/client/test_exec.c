/*
 * test_exec.c: a fetched plan run by a training process (tuned_exec.h):
 * on the caller's tensors, with the fetched kernels, and every misuse
 * refused with the reason.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kgen.h"
#include "tuned_exec.h"

/* h = x w (a matrix product), y = relu(h + b): tensors x, w, b, h, y. */
static const char graph_text[] =
	"{\"version\": 1, \"name\": \"mlp\", \"tensors\": {"
	"\"x\": {\"shape\": [9, 20], \"dtype\": \"f32\", \"role\": \"input\"},"
	"\"w\": {\"shape\": [20, 13], \"dtype\": \"f32\", \"role\": \"input\"},"
	"\"b\": {\"shape\": [13], \"dtype\": \"f32\", \"role\": \"input\"},"
	"\"h\": {\"shape\": [9, 13], \"dtype\": \"f32\"},"
	"\"y\": {\"shape\": [9, 13], \"dtype\": \"f32\", \"role\": \"output\"}},"
	"\"ops\": [\"h[i, j] = sum(k) x[i, k] * w[k, j]\","
	" \"y[i, j] = relu(h[i, j] + b[j])\"]}";

/* A fetch reply for "plan_text" of the graph above: the plan and the C
 * source of each kernel, as the daemon serves them. */
static char *fetch_of(const char *plan_text)
{
	sched_graph *g = NULL;
	kgen_plan *plan = NULL;
	json_t *given = json_loads(plan_text, 0, NULL), *sources = json_array(), *reply;
	char *text;

	cr_assert_eq(sched_graph_read_string(graph_text, &g, NULL), SCHED_OK);
	cr_assert_eq(kgen_plan_from_json(g, given, &plan, NULL), KGEN_OK);
	for (int k = 0; k < plan->nkernels; k++) {
		char *source = kgen_print_c(g, plan, k);

		json_array_append_new(sources, json_pack("{s:s, s:s, s:s}", "kernel",
							 plan->kernels[k].name, "language", "c",
							 "source", source));
		free(source);
	}
	reply = json_pack("{s:o, s:o}", "plan", kgen_plan_to_json(g, plan), "sources", sources);
	text = json_dumps(reply, 0);
	json_decref(reply);
	json_decref(given);
	kgen_plan_free(plan);
	sched_graph_free(g);
	return text;
}

static void fill(float *v, int n, unsigned seed)
{
	srand(seed);
	for (int i = 0; i < n; i++)
		v[i] = (float)rand() / RAND_MAX - 0.5f;
}

/* y as the definition gives it, in double. */
static double expected(const float *x, const float *w, const float *b, int i, int j)
{
	double h = 0;

	for (int k = 0; k < 20; k++)
		h += (double)x[i * 20 + k] * w[k * 13 + j];
	return h + b[j] > 0 ? h + b[j] : 0;
}

static tuned_exec *load(const char *fetched)
{
	tuned_exec *e = NULL;
	char why[512] = "";

	cr_assert_eq(tuned_exec_load(graph_text, fetched, "cpu", &e, why, sizeof(why)), 0,
		     "%s", why);
	return e;
}

/* Two kernels (one with micro-kernels) and one fused kernel, each run
 * twice on new inputs in the caller's buffers, the intermediate in
 * scratch. */
Test(exec, a_fetched_plan_runs_on_the_caller_s_tensors)
{
	static const char *const plans[] = {
		"{\"kernels\": [{\"ops\": [0], \"schedule\": {\"micro\": {\"mr\": 4, "
		"\"nr\": 8, \"kc\": 7, \"mc\": 8, \"nc\": 16, \"pack\": 1}}}, {\"ops\": [1]}]}",
		"{\"kernels\": [{\"ops\": [0, 1]}]}",
		/* a library step: its source calls cblas_sgemm (where there is one) */
		"{\"kernels\": [{\"ops\": [0], \"schedule\": {\"library\": true}}, "
		"{\"ops\": [1]}]}",
	};

	for (int p = 0; p < 3 && (p < 2 || kgen_library_available("cpu")); p++) {
		char *fetched = fetch_of(plans[p]), why[512] = "";
		tuned_exec *e = load(fetched);
		float x[9 * 20], w[20 * 13], b[13], y[9 * 13];
		void *tensors[] = {x, w, b, NULL, y};

		cr_expect_eq(tuned_exec_tensor_count(e), 5);
		for (unsigned seed = 1; seed <= 2; seed++) {
			fill(x, 9 * 20, seed);
			fill(w, 20 * 13, seed + 10);
			fill(b, 13, seed + 20);
			cr_assert_eq(tuned_exec_run(e, NULL, tensors, why, sizeof(why)), 0,
				     "%s", why);
			for (int i = 0; i < 9; i++)
				for (int j = 0; j < 13; j++)
					cr_expect_float_eq(y[i * 13 + j], expected(x, w, b, i, j),
							   1e-5, "plan %d y[%d, %d]", p, i, j);
		}
		tuned_exec_free(e);
		free(fetched);
	}
}

/* A loaded plan describes its graph's tensors, in graph order, as the
 * graph declares them; an index out of range is refused. */
Test(exec, the_tensors_of_the_graph_are_described)
{
	char *fetched = fetch_of("{\"kernels\": [{\"ops\": [0, 1]}]}");
	tuned_exec *e = load(fetched);
	static const char *const names[] = {"x", "w", "b", "h", "y"};
	static const char *const roles[] = {"input", "input", "input", "intermediate", "output"};
	static const int ranks[] = {2, 2, 1, 2, 2};
	static const int64_t shapes[][2] = {{9, 20}, {20, 13}, {13}, {9, 13}, {9, 13}};
	tuned_exec_tensor t;

	for (int i = 0; i < 5; i++) {
		cr_assert_eq(tuned_exec_tensor_info(e, i, &t), 0);
		cr_expect_str_eq(t.name, names[i]);
		cr_expect_str_eq(t.dtype, "f32");
		cr_expect_str_eq(t.role, roles[i]);
		cr_assert_eq(t.rank, ranks[i], "tensor %s", names[i]);
		for (int d = 0; d < t.rank; d++)
			cr_expect_eq(t.shape[d], shapes[i][d], "tensor %s dim %d", names[i], d);
	}
	cr_expect_eq(tuned_exec_tensor_info(e, 5, &t), -1);
	cr_expect_eq(tuned_exec_tensor_info(e, -1, &t), -1);
	tuned_exec_free(e);
	free(fetched);
}

/* The kernels run are the fetched sources, not kernels printed again: a
 * planted source that writes 42 shows in the output. */
Test(exec, the_fetched_sources_are_the_kernels_run)
{
	char *fetched = fetch_of("{\"kernels\": [{\"ops\": [0]}, {\"ops\": [1]}]}");
	json_t *reply = json_loads(fetched, 0, NULL);
	json_t *second = json_array_get(json_object_get(reply, "sources"), 1);
	char *planted, why[512] = "";
	float x[9 * 20] = {0}, w[20 * 13] = {0}, b[13] = {0}, y[9 * 13];
	void *tensors[] = {x, w, b, NULL, y};
	tuned_exec *e;

	json_object_set_new(second, "source", json_string(
		"void k1_y(void **tensors)\n{\n\tfloat *y = tensors[4];\n"
		"\tfor (int i = 0; i < 9 * 13; i++)\n\t\ty[i] = 42.0f;\n}\n"));
	planted = json_dumps(reply, 0);
	e = load(planted);
	cr_assert_eq(tuned_exec_run(e, NULL, tensors, why, sizeof(why)), 0, "%s", why);
	cr_expect_float_eq(y[0], 42.0f, 0);
	cr_expect_float_eq(y[9 * 13 - 1], 42.0f, 0);
	tuned_exec_free(e);
	free(planted);
	json_decref(reply);
	free(fetched);
}

static void expect_load_refused(const char *graph, const char *fetched, const char *backend,
				const char *reason)
{
	tuned_exec *e = NULL;
	char why[512] = "";

	cr_expect_eq(tuned_exec_load(graph, fetched, backend, &e, why, sizeof(why)), -1);
	cr_expect_null(e);
	cr_expect_not_null(strstr(why, reason), "'%s', not '%s'", why, reason);
}

Test(exec, misuses_are_refused_with_the_reason)
{
	char *fetched = fetch_of("{\"kernels\": [{\"ops\": [0]}, {\"ops\": [1]}]}");
	char *cuda = strdup(fetched), *at, why[512] = "";
	float x[9 * 20] = {0}, y[9 * 13];
	void *no_w[] = {x, NULL, x, NULL, y};
	tuned_exec *e;

	while ((at = strstr(cuda, "\"language\": \"c\"")))
		memcpy(at, "\"language\": \"?\"", 15);
	expect_load_refused(graph_text, "{not json", "cpu", "not JSON");
	expect_load_refused(graph_text, fetched, "tpu", "unknown backend 'tpu'");
	expect_load_refused("{\"version\": 1}", fetched, "cpu", "the graph:");
	expect_load_refused(graph_text, "{\"plan\": {\"kernels\": [{\"ops\": [0]}]}}", "cpu",
			    "the plan does not fit the graph");
	expect_load_refused(graph_text, cuda, "cpu", "not for backend cpu");
	expect_load_refused(graph_text, "{\"plan\": {\"kernels\": [{\"ops\": [0]}, "
			    "{\"ops\": [1]}]}, \"sources\": []}", "cpu",
			    "no source for kernel 'k0_h'");
	e = load(fetched);
	cr_expect_eq(tuned_exec_run(e, NULL, no_w, why, sizeof(why)), -1);
	cr_expect_not_null(strstr(why, "tensor 1 ('w'), an input, has no pointer"), "%s", why);
	tuned_exec_free(e);
	free(cuda);
	free(fetched);
}

/* y as the interpreter gives it: in double, h and y each rounded to f32
 * as they are stored. */
static float interpreted(const float *x, const float *w, const float *b, int i, int j)
{
	double h = 0;

	for (int k = 0; k < 20; k++)
		h += (double)x[i * 20 + k] * w[k * 13 + j];
	h = (float)h;
	return (float)(h + b[j] > 0 ? h + b[j] : 0);
}

/* The reference interpreter on the caller's buffers, no plan: y exactly
 * as the definition rounded gives it, h written when a buffer is given
 * and left to the interpreter when not. */
Test(exec, the_interpreter_runs_on_the_caller_s_tensors)
{
	float x[9 * 20], w[20 * 13], b[13], h[9 * 13], y[9 * 13];
	void *with_h[] = {x, w, b, h, y}, *without_h[] = {x, w, b, NULL, y};
	char why[512] = "";

	fill(x, 9 * 20, 5);
	fill(w, 20 * 13, 6);
	fill(b, 13, 7);
	for (int run = 0; run < 2; run++) {
		memset(y, 0, sizeof(y));
		cr_assert_eq(tuned_exec_interpret(graph_text, run ? without_h : with_h, why,
						  sizeof(why)), 0, "%s", why);
		for (int i = 0; i < 9; i++)
			for (int j = 0; j < 13; j++)
				cr_expect_eq(y[i * 13 + j], interpreted(x, w, b, i, j),
					     "run %d y[%d, %d]", run, i, j);
	}
	cr_expect_eq((float)((double)h[0] + b[0] > 0 ? (double)h[0] + b[0] : 0), y[0]);
}

/* f16 tensors are read and written as 16-bit halves. */
Test(exec, the_interpreter_stores_in_the_tensors_dtypes)
{
	static const char half_graph[] =
		"{\"version\": 1, \"tensors\": {"
		"\"a\": {\"shape\": [3], \"dtype\": \"f16\", \"role\": \"input\"},"
		"\"s\": {\"shape\": [], \"dtype\": \"f32\", \"role\": \"output\"},"
		"\"d\": {\"shape\": [3], \"dtype\": \"f16\", \"role\": \"output\"}},"
		"\"ops\": [\"s[] = sum(i) a[i]\", \"d[i] = a[i] / 3\"]}";
	_Float16 a[3] = {1, 2, 0.5}, d[3];
	float s = 0;
	void *tensors[] = {a, &s, d};
	char why[512] = "";

	cr_assert_eq(tuned_exec_interpret(half_graph, tensors, why, sizeof(why)), 0, "%s", why);
	cr_expect_eq(s, 3.5f);
	cr_expect_eq(d[0], (_Float16)(1.0 / 3));
	cr_expect_eq(d[2], (_Float16)(0.5 / 3));
}

Test(exec, the_interpreter_refuses_with_the_reason)
{
	float x[9 * 20] = {0}, y[9 * 13];
	void *no_w[] = {x, NULL, x, NULL, y};
	char why[512] = "";

	cr_expect_eq(tuned_exec_interpret("{\"version\": 1}", no_w, why, sizeof(why)), -1);
	cr_expect_not_null(strstr(why, "the graph:"), "%s", why);
	cr_expect_eq(tuned_exec_interpret(graph_text, no_w, why, sizeof(why)), -1);
	cr_expect_not_null(strstr(why, "tensor 1 ('w'), an input, has no pointer"), "%s", why);
}
