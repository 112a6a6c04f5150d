/*
 * test_library.c: library steps (kernels/library.c): a matrix product of
 * every layout BLAS takes matches the reference interpreter through
 * cblas_sgemm on the cpu; products the library cannot make say why;
 * plans that misuse "library" are refused; the cuda step records the
 * cuBLASLt call; a library step neither waits on a kernel nor is waited
 * on. Epilogues (a bias, relu, gelu_tanh after the product) match the
 * reference on the cpu, the cuda step names them, and ops that are no
 * epilogue say why.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublaslt_int.h"
#include "graph_builder.h"
#include "kgen.h"

static sched_graph *graph(const char *tensors, const char *const *ops)
{
	sched_graph *g = NULL;
	sched_error err = {0};

	cr_assert_eq(load_graph(tensors, ops, &g, &err), SCHED_OK, "%s", err.message);
	return g;
}

static kgen_plan *plan_of(const sched_graph *g, const char *text, kgen_error *err)
{
	json_t *json = json_loads(text, 0, NULL);
	kgen_plan *plan = NULL;

	cr_assert_not_null(json, "%s", text);
	if (kgen_plan_from_json(g, json, &plan, err) < 0)
		plan = NULL;
	json_decref(json);
	return plan;
}

#define LIBRARY_STEP "{\"kernels\": [{\"ops\": [0], \"schedule\": {\"library\": true}}]}"

/* The graph's plan "text", built on the cpu and checked against the
 * reference on the inputs of two seeds. */
static void expect_plan_verified(const char *tensors, const char *const *ops,
				 const char *text)
{
	sched_graph *g = graph(tensors, ops);
	kgen_backend *backend = NULL;
	kgen_program *prog = NULL;
	kgen_check checks[2];
	kgen_error err = {0};
	kgen_plan *plan = plan_of(g, text, &err);

	cr_assert_not_null(plan, "%s: %s", ops[0], err.message);
	cr_assert_eq(kgen_backend_open("cpu", &backend, &err), KGEN_OK, "%s", err.message);
	cr_assert_eq(kgen_program_build(backend, g, plan, NULL, &prog, &err), KGEN_OK,
		     "%s: %s\n%s", ops[0], err.message, err.log ? err.log : "");
	for (unsigned seed = 1; seed <= 2; seed++)
		cr_expect_eq(kgen_verify(prog, seed, checks, &err), KGEN_OK, "%s: %s", ops[0],
			     err.message);
	kgen_program_free(prog);
	kgen_backend_close(backend);
	kgen_plan_free(plan);
	sched_graph_free(g);
	kgen_error_release(&err);
}

/* The one-op graph's library step, verified. */
static void expect_verified(const char *tensors, const char *op)
{
	expect_plan_verified(tensors, OPS(op), LIBRARY_STEP);
}

static void skip_without_blas(void)
{
	if (!kgen_library_available("cpu"))
		cr_skip_test("no CBLAS here (libopenblas.so.0, libblas.so.3)");
}

Test(library, every_layout_blas_takes_matches_the_reference)
{
	skip_without_blas();
	expect_verified("a f32 33,40 in; b f32 40,20 in; y f32 33,20 out",
			"y[i, j] = sum(k) a[i, k] * b[k, j]");
	/* A transposed; B transposed and read from column 4 on */
	expect_verified("a f32 40,33 in; b f32 21,44 in; y f32 33,21 out",
			"y[i, j] = sum(k < 40) a[k, i] * b[j, k + 4]");
	/* merged M dims */
	expect_verified("x f32 2,9,12 in; w f32 12,17 in; y f32 2,9,17 out",
			"y[b, s, j] = sum(c) x[b, s, c] * w[c, j]");
	/* C written transposed: C^T = B^T A^T, row-major */
	expect_verified("a f32 30,12 in; b f32 12,19 in; y f32 19,30 out",
			"y[j, i] = sum(k) a[i, k] * b[k, j]");
	/* a matrix-vector product, as an LSTM's */
	expect_verified("x f32 1,64 in; w f32 64,96 in; y f32 1,96 out",
			"y[n, j] = sum(t) x[n, t] * w[t, j]");
}

/* f16 and bf16 go through f32 copies: factors converted before the call,
 * C rounded after it, whatever their layouts. */
Test(library, f16_and_bf16_are_converted_around_the_call)
{
	skip_without_blas();
	expect_verified("a f16 33,40 in; b f16 40,20 in; y f16 33,20 out",
			"y[i, j] = sum(k) a[i, k] * b[k, j]");
	expect_verified("a bf16 40,33 in; b f32 21,44 in; y f32 33,21 out",
			"y[i, j] = sum(k < 40) a[k, i] * b[j, k + 4]");
	expect_verified("a f32 30,12 in; b f16 12,19 in; y bf16 19,30 out",
			"y[j, i] = sum(k) a[i, k] * b[k, j]");
}

Test(library, products_the_library_cannot_make_say_why)
{
	static const struct {
		const char *tensors, *op;
		bool cuda;
		const char *why; /* NULL: it fits */
	} cases[] = {
		{"a f16 8,4 in; b f16 4,6 in; y f16 8,6 out", "y[i, j] = sum(k) a[i, k] * b[k, j]",
		 false, NULL},
		{"a i32 8,4 in; b f32 4,6 in; y f32 8,6 out", "y[i, j] = sum(k) a[i, k] * b[k, j]",
		 false, "takes floats"},
		{"a f16 8,4 in; b f16 4,6 in; y f16 8,6 out", "y[i, j] = sum(k) a[i, k] * b[k, j]",
		 true, NULL},
		{"a bf16 8,4 in; b bf16 4,6 in; y f32 8,6 out", "y[i, j] = sum(k) a[i, k] * b[k, j]",
		 true, NULL},
		{"a f16 8,4 in; b bf16 4,6 in; y f32 8,6 out", "y[i, j] = sum(k) a[i, k] * b[k, j]",
		 true, "one dtype"},
		{"a f32 8,4 in; y f32 8 out", "y[i] = sum(k) a[i, k]", false,
		 "no matrix product"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		sched_graph *g = graph(cases[i].tensors, OPS(cases[i].op));
		const char *why = kgen_library_unfit(g, 0, cases[i].cuda);

		if (!cases[i].why)
			cr_expect_null(why, "case %zu: %s", i, why);
		else
			cr_expect(why && strstr(why, cases[i].why), "case %zu: '%s', not '%s'",
				  i, why ? why : "(fits)", cases[i].why);
		sched_graph_free(g);
	}
}

static void expect_refused(const sched_graph *g, const char *text, const char *reason)
{
	kgen_error err = {0};
	kgen_plan *plan = plan_of(g, text, &err);

	cr_expect_null(plan, "accepted: %s", text);
	cr_expect(strstr(err.message, reason), "'%s' for %s", err.message, text);
	kgen_plan_free(plan);
}

Test(library, misuses_are_refused_and_a_step_reads_back)
{
	sched_graph *g = graph("a f32 8,4 in; b f32 4,6 in; y f32 8,6; z f32 8,6 out",
			       OPS("y[i, j] = sum(k) a[i, k] * b[k, j]", "z[i, j] = y[i, j] + 1"));
	kgen_error err = {0};
	kgen_plan *plan;
	json_t *json;
	char *text;

	expect_refused(g, "{\"kernels\": [{\"ops\": [0, 1], \"schedule\": {\"library\": true}}]}",
		       "an op after the product is none of a bias");
	expect_refused(g, "{\"kernels\": [{\"ops\": [0, 1], \"lanes\": [0], \"schedule\": "
			  "{\"library\": true}}]}", "a library step has no lanes");
	expect_refused(g, "{\"kernels\": [{\"ops\": [0], \"schedule\": {\"library\": true, "
			  "\"unroll\": 2}}, {\"ops\": [1]}]}", "takes no other schedule key");
	expect_refused(g, "{\"kernels\": [{\"ops\": [0], \"schedule\": {\"library\": 1}}, "
			  "{\"ops\": [1]}]}", "'library' must be true or false");
	expect_refused(g, "{\"kernels\": [{\"ops\": [0]}, {\"ops\": [1], \"schedule\": "
			  "{\"library\": true}}]}", "no matrix product");
	plan = plan_of(g, "{\"kernels\": [{\"ops\": [0], \"schedule\": {\"library\": true}}, "
			  "{\"ops\": [1]}]}", &err);
	cr_assert_not_null(plan, "%s", err.message);
	cr_expect(plan->kernels[0].schedule.library);
	cr_expect(!plan->kernels[1].schedule.library);
	json = kgen_plan_to_json(g, plan);
	text = json_dumps(json_array_get(json_object_get(json, "kernels"), 0),
			  JSON_COMPACT | JSON_SORT_KEYS);
	cr_expect(strstr(text, "\"schedule\":{\"library\":true}"), "%s", text);
	free(text);
	json_decref(json);
	kgen_plan_free(plan);
	sched_graph_free(g);
}

/* The cuBLASLt call that plan "text"'s first kernel, a library step,
 * records (no GPU needed to print it). */
static json_t *cuda_call(const sched_graph *g, const char *text)
{
	kgen_error err = {0};
	kgen_plan *plan = plan_of(g, text, &err);
	json_t *call;
	char *source;

	cr_assert_not_null(plan, "%s", err.message);
	source = kgen_print_cuda(g, plan, 0);
	cr_assert_not_null(source);
	cr_expect(kgen_cublaslt_source(source));
	call = json_loads(source, 0, NULL);
	cr_assert_not_null(call, "not JSON: %s", source);
	free(source);
	kgen_plan_free(plan);
	return call;
}

/* The cuda step is the call's parameters: here A is read transposed and
 * B from element 4 of each row. */
Test(library, the_cuda_step_records_the_cublaslt_call)
{
	sched_graph *g = graph("a f16 40,33 in; b f16 21,44 in; y f32 33,21 out",
			       OPS("y[i, j] = sum(k < 40) a[k, i] * b[j, k + 4]"));
	json_t *call = cuda_call(g, LIBRARY_STEP), *a, *b, *c;

	a = json_object_get(call, "a");
	b = json_object_get(call, "b");
	c = json_object_get(call, "c");
	cr_expect_str_eq(json_string_value(json_object_get(call, "library")), "cublasLt");
	cr_expect_eq(json_integer_value(json_object_get(call, "m")), 33);
	cr_expect_eq(json_integer_value(json_object_get(call, "n")), 21);
	cr_expect_eq(json_integer_value(json_object_get(call, "k")), 40);
	cr_expect(json_is_true(json_object_get(a, "trans")));
	cr_expect_eq(json_integer_value(json_object_get(a, "ld")), 33);
	cr_expect(json_is_true(json_object_get(b, "trans")));
	cr_expect_eq(json_integer_value(json_object_get(b, "ld")), 44);
	cr_expect_eq(json_integer_value(json_object_get(b, "offset")), 4);
	cr_expect(json_is_false(json_object_get(c, "trans")) || !json_object_get(c, "trans"));
	cr_expect_eq(json_integer_value(json_object_get(c, "ld")), 21);
	cr_expect_str_eq(json_string_value(json_object_get(c, "dtype")), "f32");
	json_decref(call);
	sched_graph_free(g);
}

/* A library step has no tiles: the kernel after it cannot wait on its
 * tiles, and it cannot wait on the kernel before it. */
Test(library, a_library_step_neither_waits_nor_is_waited_on)
{
	sched_graph *g = graph("x f16 64,32 in; w f16 32,64 in; v f16 64,64 in; "
			       "h f16 64,64; y f16 64,64 out",
			       OPS("h[i, j] = sum(k) x[i, k] * w[k, j]",
				   "y[i, j] = sum(k) h[i, k] * v[k, j]"));
	static const char *const plans[] = {
		"{\"kernels\": [{\"name\": \"p\", \"ops\": [0], \"schedule\": {\"library\": "
		"true}}, {\"ops\": [1], \"sync\": {\"after\": \"p\", \"policy\": \"row\"}}]}",
		"{\"kernels\": [{\"name\": \"p\", \"ops\": [0]}, {\"ops\": [1], \"schedule\": "
		"{\"library\": true}, \"sync\": {\"after\": \"p\", \"policy\": \"row\"}}]}",
	};

	for (int i = 0; i < 2; i++)
		expect_refused(g, plans[i], "is a library step: it has no tiles");
	sched_graph_free(g);
}

/* The cuda backend takes a library step's source for a call, CUDA C for
 * a kernel; a call it cannot read is refused before cuBLASLt is opened. */
Test(library, the_cuda_backend_tells_calls_from_kernels)
{
	static const char *const garbled[] = {
		"{\"library\": \"cublasLt\", \"kernel\": \"k\", \"m\": 4, \"n\": 4, \"k\": 4}",
		"{\"library\": \"cublasLt\", \"kernel\": \"k\", \"m\": 0, \"n\": 4, \"k\": 4, "
		"\"a\": {\"tensor\": 0, \"dtype\": \"f16\", \"ld\": 4}, "
		"\"b\": {\"tensor\": 1, \"dtype\": \"f16\", \"ld\": 4}, "
		"\"c\": {\"tensor\": 2, \"dtype\": \"f16\", \"ld\": 4}}",
		"{\"library\": \"cublasLt\", \"kernel\": \"k\", \"m\": 4, \"n\": 4, \"k\": 4, "
		"\"a\": {\"tensor\": 0, \"dtype\": \"i32\", \"ld\": 4}, "
		"\"b\": {\"tensor\": 1, \"dtype\": \"f16\", \"ld\": 4}, "
		"\"c\": {\"tensor\": 2, \"dtype\": \"f16\", \"ld\": 4}}",
	};

	cr_expect(!kgen_cublaslt_source("extern \"C\" __global__ void k(float *x) {}"));
	cr_expect(!kgen_cublaslt_source("{\"library\": \"mkl\"}"));
	cr_expect(!kgen_cublaslt_source("{not json"));
	for (size_t i = 0; i < sizeof(garbled) / sizeof(*garbled); i++) {
		kgen_cublaslt_call *call = NULL;
		kgen_error err = {0};

		cr_expect(kgen_cublaslt_source(garbled[i]));
		cr_expect_eq(kgen_cublaslt_new(garbled[i], NULL, 0, &call, &err), KGEN_EPLAN,
			     "call %zu: %s", i, err.message);
		cr_expect(strstr(err.message, "garbled"), "call %zu: %s", i, err.message);
		kgen_cublaslt_free(call);
	}
}

#define EPILOGUE_STEP(ops) "{\"kernels\": [{\"ops\": " ops ", \"schedule\": {\"library\": true}}]}"

/* A product and the ops after it in one library step: the loop after the
 * call alone writes the output, so a step that skipped them would fail. */
Test(library, epilogues_match_the_reference)
{
	skip_without_blas();
	expect_plan_verified("a f16 33,40 in; b f16 40,20 in; bias f16 20 in; h f16 33,20; "
			     "y f16 33,20 out", OPS("h[i, j] = sum(k) a[i, k] * b[k, j]",
						    "y[i, j] = h[i, j] + bias[j]"),
			     EPILOGUE_STEP("[0, 1]"));
	expect_plan_verified("a f32 33,40 in; b f32 40,20 in; h f32 33,20; y f32 33,20 out",
			     OPS("h[i, j] = sum(k) a[i, k] * b[k, j]", "y[i, j] = relu(h[i, j])"),
			     EPILOGUE_STEP("[0, 1]"));
	/* A transposed, a bf16 output */
	expect_plan_verified("a f32 40,33 in; b f32 40,20 in; h f32 33,20; y bf16 33,20 out",
			     OPS("h[i, j] = sum(k) a[k, i] * b[k, j]",
				 "y[i, j] = gelu_tanh(h[i, j])"), EPILOGUE_STEP("[0, 1]"));
	/* the bias on the left, then gelu_tanh; then relu, in f16 */
	expect_plan_verified("a f16 17,24 in; b f16 24,48 in; bias f16 48 in; h f16 17,48; "
			     "g f16 17,48; y f16 17,48 out",
			     OPS("h[i, j] = sum(k) a[i, k] * b[k, j]", "g[i, j] = bias[j] + h[i, j]",
				 "y[i, j] = gelu_tanh(g[i, j])"), EPILOGUE_STEP("[0, 1, 2]"));
	expect_plan_verified("a f16 17,24 in; b f16 24,48 in; bias f16 48 in; h f16 17,48; "
			     "g f16 17,48; y f16 17,48 out",
			     OPS("h[i, j] = sum(k) a[i, k] * b[k, j]", "g[i, j] = h[i, j] + bias[j]",
				 "y[i, j] = relu(g[i, j])"), EPILOGUE_STEP("[0, 1, 2]"));
}

/* The factors and the product of the cases below. */
#define FACTORS "a f16 8,4 in; b f16 4,6 in; "
#define PRODUCT "h[i, j] = sum(k) a[i, k] * b[k, j]"

Test(library, ops_that_are_no_epilogue_say_why)
{
	static const struct {
		const char *tensors, *ops[3];
		int nops; /* of the kernel: the first ones */
		bool cuda;
		const char *why; /* NULL: it fits */
	} cases[] = {
		{FACTORS "c f16 6 in; h f16 8,6; y f16 8,6 out",
		 {PRODUCT, "y[i, j] = h[i, j] + c[j]"}, 2,
		 true, NULL},
		{FACTORS "c f32 6 in; h f16 8,6; y f16 8,6 out",
		 {PRODUCT, "y[i, j] = h[i, j] + c[j]"}, 2,
		 false, NULL},
		{FACTORS "c f32 6 in; h f16 8,6; y f16 8,6 out",
		 {PRODUCT, "y[i, j] = h[i, j] + c[j]"}, 2,
		 true, "bias in its output's dtype"},
		{FACTORS "h f16 8,6; y f16 8,6 out",
		 {PRODUCT, "y[i, j] = gelu(h[i, j])"}, 2,
		 false, "none of a bias"},
		{FACTORS "c f16 8 in; h f16 8,6; y f16 8,6 out",
		 {PRODUCT, "y[i, j] = h[i, j] + c[i]"}, 2,
		 false, "none of a bias"},
		{FACTORS "c f16 6 in; h f16 8,6; r f16 8,6; y f16 8,6 out",
		 {PRODUCT, "r[i, j] = relu(h[i, j])",
		  "y[i, j] = r[i, j] + c[j]"}, 3, false, "none of a bias"},
		{FACTORS "h f16 8,6; y f16 8,6 out; z f16 8,6 out",
		 {PRODUCT, "y[i, j] = relu(h[i, j])",
		  "z[i, j] = h[i, j] * 2"}, 2, false, "read by another op"},
		{FACTORS "h f16 8,6 out; y f16 8,6 out",
		 {PRODUCT, "y[i, j] = relu(h[i, j])"}, 2,
		 false, "is an output"},
		{FACTORS "h f16 8,6; y f16 8 out",
		 {PRODUCT, "y[i] = sum(j) h[i, j]"}, 2,
		 false, "not elementwise over C"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		sched_graph *g = graph(cases[i].tensors, cases[i].ops[2] ?
				       OPS(cases[i].ops[0], cases[i].ops[1], cases[i].ops[2]) :
				       OPS(cases[i].ops[0], cases[i].ops[1]));
		kgen_kernel kernel = {.nops = cases[i].nops, .ops = {0, 1, 2}};
		const char *why = kgen_library_kernel_unfit(g, &kernel, cases[i].cuda);

		if (!cases[i].why)
			cr_expect_null(why, "case %zu: %s", i, why);
		else
			cr_expect(why && strstr(why, cases[i].why), "case %zu: '%s', not '%s'",
				  i, why ? why : "(fits)", cases[i].why);
		sched_graph_free(g);
	}
}

/* With an epilogue, the call's C is the last op's output, and it names
 * the epilogue and its bias; a call naming none cuBLASLt has is refused. */
Test(library, the_cuda_step_names_its_epilogue)
{
	static const char *const garbled[] = {
		"{\"library\": \"cublasLt\", \"kernel\": \"k\", \"m\": 4, \"n\": 4, \"k\": 4, "
		"\"a\": {\"tensor\": 0, \"dtype\": \"f16\", \"ld\": 4}, "
		"\"b\": {\"tensor\": 1, \"dtype\": \"f16\", \"ld\": 4}, "
		"\"c\": {\"tensor\": 2, \"dtype\": \"f16\", \"ld\": 4}, \"epilogue\": \"tanh\"}",
		"{\"library\": \"cublasLt\", \"kernel\": \"k\", \"m\": 4, \"n\": 4, \"k\": 4, "
		"\"a\": {\"tensor\": 0, \"dtype\": \"f16\", \"ld\": 4}, "
		"\"b\": {\"tensor\": 1, \"dtype\": \"f16\", \"ld\": 4}, "
		"\"c\": {\"tensor\": 2, \"dtype\": \"f16\", \"ld\": 4}, \"epilogue\": \"bias\"}",
	};
	sched_graph *g = graph("a f16 17,24 in; b f16 24,48 in; bias f16 48 in; h f16 17,48; "
			       "g f16 17,48; y f16 17,48 out",
			       OPS("h[i, j] = sum(k) a[i, k] * b[k, j]",
				   "g[i, j] = bias[j] + h[i, j]", "y[i, j] = gelu_tanh(g[i, j])"));
	json_t *call = cuda_call(g, EPILOGUE_STEP("[0, 1, 2]"));
	kgen_error err = {0};

	cr_expect_str_eq(json_string_value(json_object_get(call, "epilogue")), "gelu_bias");
	cr_expect_eq(json_integer_value(json_object_get(call, "bias")), 2);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(call, "c"), "tensor")), 5);
	json_decref(call);
	for (size_t i = 0; i < sizeof(garbled) / sizeof(*garbled); i++) {
		kgen_cublaslt_call *lt_call = NULL;

		cr_expect_eq(kgen_cublaslt_new(garbled[i], NULL, 0, &lt_call, &err), KGEN_EPLAN,
			     "call %zu: %s", i, err.message);
		cr_expect(strstr(err.message, "garbled"), "call %zu: %s", i, err.message);
		kgen_cublaslt_free(lt_call);
	}
	kgen_error_release(&err);
	sched_graph_free(g);
}
