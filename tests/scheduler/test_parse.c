/*
 * test_parse.c: every valid form of an op parses, and means what it says.
 */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "graph_builder.h"
#include "scheduler.h"

static sched_graph *must_load(const char *tensors, const char *const *ops)
{
	sched_graph *graph = NULL;
	sched_error err = {0};
	int rc = load_graph(tensors, ops, &graph, &err);

	cr_assert_eq(rc, SCHED_OK, "refused: %s", err.message);
	return graph;
}

static void expect_error(const char *tensors, const char *const *ops,
			 int code, const char *message)
{
	sched_graph *graph = NULL;
	sched_error err = {0};
	int rc = load_graph(tensors, ops, &graph, &err);

	cr_assert_eq(rc, code, "code %d, message: %s", rc, err.message);
	cr_assert_null(graph);
	cr_assert_str_eq(err.message, message);
}

static json_t *explain_op(const sched_graph *graph, int n)
{
	json_t *obj = sched_graph_explain(graph);
	json_t *op = json_incref(json_array_get(json_object_get(obj, "ops"), n));

	json_decref(obj);
	return op;
}

#define MM "a f32 4,3 in; b f32 3,5 in; c f32 4,5 out"

Test(parse, matmul_with_inferred_range)
{
	sched_graph *g = must_load(MM, OPS("c[i, j] = sum(k) a[i, k] * b[k, j]"));
	json_t *op = explain_op(g, 0);
	json_t *range = json_array_get(json_object_get(json_object_get(op, "reduction"),
						       "ranges"), 0);

	cr_expect_eq(json_integer_value(json_object_get(range, "lo")), 0);
	cr_expect_eq(json_integer_value(json_object_get(range, "hi")), 3);
	cr_expect(json_is_true(json_object_get(range, "inferred")));
	cr_expect_eq(json_integer_value(json_object_get(op, "flops")), 2 * 4 * 5 * 3);
	cr_expect_str_eq(json_string_value(json_object_get(op, "domain")),
			 "{ S0[i, j, k] : 0 <= i <= 3 and 0 <= j <= 4 and 0 <= k <= 2 }");
	json_decref(op);
	sched_graph_free(g);
}

Test(parse, explicit_ranges)
{
	sched_graph *g = must_load("x f32 10 in; y f32 - out; z f32 - out",
				   OPS("y[] = sum(k < 4) x[k + 2]",
				       "z[] = prod(k in 3:7) x[k]"));
	json_t *op = explain_op(g, 1);
	json_t *range = json_array_get(json_object_get(json_object_get(op, "reduction"),
						       "ranges"), 0);

	cr_expect_eq(json_integer_value(json_object_get(range, "lo")), 3);
	cr_expect_eq(json_integer_value(json_object_get(range, "hi")), 7);
	cr_expect_not(json_is_true(json_object_get(range, "inferred")));
	json_decref(op);
	sched_graph_free(g);
}

Test(parse, max_is_a_reducer_or_a_call)
{
	sched_graph *g = must_load("x f32 4,6 in; a f32 4 in; m f32 4 out; y f32 4 out",
				   OPS("m[i] = max(j) x[i, j]",
				       "y[i] = max(a[i], m[i]) - min(a[i], 0)"));
	json_t *op = explain_op(g, 0);
	json_t *reducer = json_object_get(json_object_get(op, "reduction"), "reducer");

	cr_expect_str_eq(json_string_value(reducer), "max");
	json_decref(op);
	sched_graph_free(g);
}

Test(parse, every_call_and_operator)
{
	sched_graph *g = must_load(
		"x f32 8 in; y f32 8 out",
		OPS("y[i] = exp(x[i]) + log(x[i]) + sqrt(x[i]) + rsqrt(x[i]) + "
		    "tanh(x[i]) + sigmoid(x[i]) + relu(x[i]) + gelu(x[i]) + "
		    "gelu_tanh(x[i]) + silu(x[i]) + erf(x[i]) + abs(x[i]) + "
		    "max(x[i], 1) + min(x[i], 2.5e-1) + pow(x[i], 2) + "
		    "select(i % 2 == 0 && !(i > 5) || i != 3, -x[i], x[i] / 3) + "
		    "(x[i] >= 1) * (x[i] <= 2) + (x[i] < .5) - 1.5e+2"));

	cr_expect_eq(sched_graph_op_count(g), 1);
	sched_graph_free(g);
}

Test(parse, quasi_affine_indices)
{
	sched_graph *g = must_load(
		"x f32 16,2,2 in; y f32 4,4,4 out",
		OPS("y[c, p, q] = x[4 * c + 2 * (p % 2) + q % 2, p / 2, (q) / 2]"));

	sched_graph_free(g);
}

Test(parse, scalars_and_whitespace)
{
	sched_graph *g = must_load("s f32 - in; x f32 3 in; y f32 3 out",
				   OPS("  y [ i ]=x[i]*s[ ]\t+ 1 "));

	sched_graph_free(g);
}

Test(parse, ops_in_any_order)
{
	sched_graph *g = must_load("x f32 4 in; t f32 4; y f32 4 out",
				   OPS("y[i] = t[i] * 2", "t[i] = x[i] + 1"));
	const int *order = sched_graph_order(g);

	cr_expect_eq(order[0], 1);
	cr_expect_eq(order[1], 0);
	sched_graph_free(g);
}

Test(parse, tensor_metadata)
{
	sched_graph *g = must_load("x bf16 2,3 in; y i32 2,3 out",
				   OPS("y[i, j] = x[i, j]"));
	int y = sched_tensor_find(g, "y");

	cr_expect_eq(sched_tensor_dtype(g, y), SCHED_I32);
	cr_expect_eq(sched_tensor_role(g, y), SCHED_OUTPUT);
	cr_expect_eq(sched_tensor_size(g, y), 6);
	cr_expect_eq(sched_tensor_shape(g, y)[1], 3);
	cr_expect_eq(sched_tensor_dtype(g, sched_tensor_find(g, "x")), SCHED_BF16);
	cr_expect_eq(sched_tensor_find(g, "nope"), -1);
	sched_graph_free(g);
}

Test(parse, options)
{
	const char *text = "{\"version\": 1, \"options\": {\"allow_tf32\": true},"
			   "\"tensors\": {\"x\": {\"shape\": [2], \"dtype\": \"f32\","
			   "\"role\": \"input\"}, \"y\": {\"shape\": [2], "
			   "\"dtype\": \"f32\", \"role\": \"output\"}},"
			   "\"ops\": [\"y[i] = x[i]\"]}";
	sched_graph *g = NULL;
	sched_error err = {0};

	cr_assert_eq(sched_graph_read_string(text, &g, &err), SCHED_OK, "%s", err.message);
	cr_expect(sched_graph_allows_tf32(g));
	cr_expect_str_eq(sched_graph_name(g), "");
	sched_graph_free(g);
}

Test(parse, errors_name_op_and_column)
{
	expect_error(MM, OPS("c[i, j] = sum(k) a[i, k] * b[k, j] +"), SCHED_ESYNTAX,
		     "op 0, column 37: expected a number, a name or '(' but found "
		     "the end of the op");
	expect_error(MM, OPS("c[i, j] = sum(k) a[i, k] * bb[k, j]"), SCHED_EMEANING,
		     "op 0, column 28: unknown tensor 'bb'");
	expect_error(MM, OPS("c[i, j] = a[i, j * i]"), SCHED_EMEANING,
		     "op 0, column 16: index 'j * i' of 'a' is not affine: it "
		     "multiplies two variables");
	expect_error(MM, OPS("c[i, j] = sum(k) a[i, k] * b[k, j] * sum(l) a[i, l]"),
		     SCHED_ESYNTAX,
		     "op 0, column 38: reducer 'sum' must begin the op's body, and "
		     "an op has at most one");
}

Test(parse, max_of_one_fresh_name_without_body_is_a_call)
{
	expect_error("x f32 4 in; y f32 4 out", OPS("y[i] = max(j) + x[i]"),
		     SCHED_EMEANING, "op 0, column 12: unknown variable 'j'");
	expect_error("x f32 4 in; y f32 4 out", OPS("y[i] = max(j) x[i]"),
		     SCHED_EMEANING,
		     "op 0, column 12: cannot infer the range of reduction variable "
		     "'j': no access indexes a dim with it alone; write it as 'var < N'");
}

/* A graph read from a pipe (sched_graph_read_file reads to the end, not
 * the size a seek would give): the same key as from its file. */
Test(parse, a_graph_file_may_be_a_pipe)
{
	char path[512], pipe_path[64];
	sched_graph *from_file = NULL, *from_pipe = NULL;
	sched_error err = {0};
	json_t *root;
	char *text;
	int fds[2];

	snprintf(path, sizeof(path), "%s/examples/softmax_scores_small.json",
		 getenv("TUNED_SOURCE_ROOT"));
	root = json_load_file(path, 0, NULL);
	cr_assert_not_null(root, "cannot read %s", path);
	text = json_dumps(root, JSON_COMPACT);
	cr_assert_lt(strlen(text), 4096, "too long for one write to a pipe");
	cr_assert_eq(pipe(fds), 0);
	cr_assert_eq(write(fds[1], text, strlen(text)), (ssize_t)strlen(text));
	close(fds[1]);
	snprintf(pipe_path, sizeof(pipe_path), "/dev/fd/%d", fds[0]);
	cr_assert_eq(sched_graph_read_file(pipe_path, &from_pipe, &err), SCHED_OK,
		     "%s", err.message);
	close(fds[0]);
	cr_assert_eq(sched_graph_read_file(path, &from_file, &err), SCHED_OK, "%s",
		     err.message);
	cr_expect_str_eq(sched_graph_key(from_pipe), sched_graph_key(from_file));
	sched_graph_free(from_pipe);
	sched_graph_free(from_file);
	free(text);
	json_decref(root);
}
