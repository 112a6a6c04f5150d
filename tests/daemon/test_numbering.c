/*
 * test_numbering.c: one kernel per key for every client. Two clients
 * submit the same graph with other tensor names and other listing
 * orders (one key): the plan one of them tuned, fetched from a real
 * tuned, runs for the other through the executor (tuned_exec.h) and
 * matches the reference interpreter on random inputs; a plan for
 * another graph is refused with the reason and never run.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <jansson.h>

#include "fixture.h"
#include "kgen.h"
#include "tuned_exec.h"

/* Op text "op" with every tensor access "name[" written "prefix name[". */
static char *renamed_op(const char *op, json_t *tensors, const char *prefix)
{
	size_t size = strlen(op) * (strlen(prefix) + 1) + 1, n = 0;
	char *out = malloc(size);

	while (*op) {
		const char *end = op;
		const char *after;

		if (!isalpha((unsigned char)*op) && *op != '_') {
			out[n++] = *op++;
			continue;
		}
		while (isalnum((unsigned char)*end) || *end == '_')
			end++;
		for (after = end; *after == ' '; after++)
			;
		if (*after == '[') {
			char name[128];

			snprintf(name, sizeof(name), "%.*s", (int)(end - op), op);
			if (json_object_get(tensors, name))
				n += (size_t)sprintf(out + n, "%s", prefix);
		}
		memcpy(out + n, op, (size_t)(end - op));
		n += (size_t)(end - op);
		op = end;
	}
	out[n] = '\0';
	return out;
}

/* A random permutation of 0 .. n-1 from "seed". */
static int *shuffled(int n, unsigned seed)
{
	int *order = malloc(sizeof(int) * (size_t)n);

	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = (int)(rand_r(&seed) % (unsigned)(i + 1)), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	return order;
}

/* The graph of "text" with each tensor renamed "prefix name" and its
 * tensors and ops listed in another order, drawn from "seed". */
static char *variant(const char *text, const char *prefix, unsigned seed)
{
	json_t *graph = json_loads(text, 0, NULL);
	json_t *tensors = json_object_get(graph, "tensors"), *ops = json_object_get(graph, "ops");
	json_t *new_tensors = json_object(), *new_ops = json_array();
	int nt = (int)json_object_size(tensors), no = (int)json_array_size(ops);
	int *tensor_order = shuffled(nt, seed), *op_order = shuffled(no, seed + 1);
	const char **names = malloc(sizeof(char *) * (size_t)nt);
	const char *name;
	json_t *decl;
	char *out;
	int i = 0;

	json_object_foreach(tensors, name, decl)
		names[i++] = name;
	for (i = 0; i < nt; i++) {
		char renamed[160];

		snprintf(renamed, sizeof(renamed), "%s%s", prefix, names[tensor_order[i]]);
		json_object_set(new_tensors, renamed, json_object_get(tensors, names[tensor_order[i]]));
	}
	for (i = 0; i < no; i++) {
		char *op = renamed_op(json_string_value(json_array_get(ops, (size_t)op_order[i])),
				      tensors, prefix);

		json_array_append_new(new_ops, json_string(op));
		free(op);
	}
	json_object_set_new(graph, "tensors", new_tensors);
	json_object_set_new(graph, "ops", new_ops);
	out = json_dumps(graph, JSON_INDENT(1));
	json_decref(graph);
	free(tensor_order);
	free(op_order);
	free(names);
	return out;
}

static sched_graph *read_graph(const char *text)
{
	sched_graph *g = NULL;
	sched_error err = {0};

	cr_assert_eq(sched_graph_read_string(text, &g, &err), SCHED_OK, "%s", err.message);
	return g;
}

/* Element i of a host buffer of "dtype" (the examples here: f32, f16). */
static double load(const void *buffer, enum sched_dtype dtype, int64_t i)
{
	return dtype == SCHED_F16 ? (double)((const _Float16 *)buffer)[i]
				  : (double)((const float *)buffer)[i];
}

/* Stores "x" and returns it as stored. */
static double store(void *buffer, enum sched_dtype dtype, int64_t i, double x)
{
	if (dtype == SCHED_F16)
		((_Float16 *)buffer)[i] = (_Float16)x;
	else
		((float *)buffer)[i] = (float)x;
	return load(buffer, dtype, i);
}

/* Runs "exec" for graph "g" on random inputs from "seed" and checks every
 * output element against the reference interpreter; their number. */
static int64_t run_and_check(tuned_exec *exec, const sched_graph *g, unsigned seed,
			     const char *what)
{
	int64_t checked = 0;
	int n = sched_graph_tensor_count(g);
	double **values = sched_values_new(g);
	void **tensors = calloc((size_t)n, sizeof(void *));
	char why[512] = "";

	for (int t = 0; t < n; t++) {
		enum sched_dtype dtype = sched_tensor_dtype(g, t);

		cr_assert(dtype == SCHED_F32 || dtype == SCHED_F16, "%s: a dtype this test "
			  "does not fill", what);
		if (sched_tensor_role(g, t) == SCHED_INTERMEDIATE)
			continue;
		tensors[t] = calloc((size_t)sched_tensor_size(g, t), 4);
		for (int64_t i = 0; sched_tensor_role(g, t) == SCHED_INPUT &&
				    i < sched_tensor_size(g, t); i++)
			values[t][i] = store(tensors[t], dtype, i,
					     (double)rand_r(&seed) / RAND_MAX - 0.5);
	}
	cr_assert_eq(sched_interp_run(g, values), SCHED_OK);
	cr_assert_eq(tuned_exec_run(exec, NULL, tensors, why, sizeof(why)), 0, "%s: %s",
		     what, why);
	for (int t = 0; t < n; t++) {
		enum sched_dtype dtype = sched_tensor_dtype(g, t);
		double tol = kgen_tolerance(g, dtype);

		for (int64_t i = 0; sched_tensor_role(g, t) == SCHED_OUTPUT &&
				    i < sched_tensor_size(g, t); i++)
			cr_assert_leq(fabs(load(tensors[t], dtype, i) - values[t][i]),
				      tol * (1 + fabs(values[t][i])), "%s: %s[%lld] is %g, "
				      "the reference %g", what, sched_tensor_name(g, t),
				      (long long)i, load(tensors[t], dtype, i), values[t][i]);
		checked += sched_tensor_role(g, t) == SCHED_OUTPUT ? sched_tensor_size(g, t) : 0;
		free(tensors[t]);
	}
	free(tensors);
	sched_values_free(g, values);
	return checked;
}

/* Tunes "submitted" on the daemon for a few seconds; its best plan. */
static json_t *tune_and_fetch(conn *c, const char *submitted)
{
	json_t *reply = conn_call(c, "submit", json_pack("{s:s, s:f}", "graph", submitted,
							 "budget", 4.0));
	json_int_t job = json_integer_value(json_object_get(json_object_get(reply, "result"),
							    "id"));

	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	json_decref(wait_job(c, job, 120));
	reply = conn_call(c, "fetch", json_pack("{s:I}", "job", job));
	cr_assert_not_null(json_object_get(reply, "result"), "fetch failed: %s",
			   json_dumps(reply, 0));
	return reply;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "cannot write %s", path);
	fputs(text, f);
	fclose(f);
}

/* "tunectl run GRAPH --plan PLAN" (in a worker, verified against the
 * reference); its exit status, and its output in "out". */
static int tunectl_run(const fixture *f, const char *graph, json_t *plan, char *out,
		       size_t size)
{
	char graph_path[256], plan_path[256], command[1024];
	char *plan_text = json_dumps(plan, 0);
	size_t n;
	FILE *p;

	snprintf(graph_path, sizeof(graph_path), "%s/graph.json", f->dir);
	snprintf(plan_path, sizeof(plan_path), "%s/plan.json", f->dir);
	write_file(graph_path, graph);
	write_file(plan_path, plan_text);
	free(plan_text);
	snprintf(command, sizeof(command), "%s run %s --plan %s --backend cpu 2>&1",
		 getenv("TUNECTL"), graph_path, plan_path);
	cr_assert_not_null(p = popen(command, "r"));
	n = fread(out, 1, size - 1, p);
	out[n] = '\0';
	return WEXITSTATUS(pclose(p));
}

/* The plan fetched for variant "a" of "example" runs for variant "b",
 * through the executor and through tunectl run --plan. */
static void check_example(const fixture *f, conn *c, const char *example)
{
	char *text = example_text(example);
	char *a = variant(text, "a_", 7), *b = variant(text, "b_", 11);
	sched_graph *ga = read_graph(a), *gb = read_graph(b);
	json_t *reply = tune_and_fetch(c, a);
	char *fetched = json_dumps(json_object_get(reply, "result"), 0), why[512] = "";
	json_t *result = json_object_get(reply, "result");
	tuned_exec *exec = NULL;
	int64_t checked = 0;

	cr_assert_str_eq(sched_graph_key(ga), sched_graph_key(gb));
	cr_assert_eq(tuned_exec_load(b, fetched, "cpu", &exec, why, sizeof(why)), 0,
		     "%s: %s", example, why);
	for (unsigned seed = 1; seed <= 2; seed++)
		checked += run_and_check(exec, gb, seed, example);
	tuned_exec_free(exec);
	cr_assert_eq(tuned_exec_load(a, fetched, "cpu", &exec, why, sizeof(why)), 0,
		     "%s: %s", example, why);
	checked += run_and_check(exec, ga, 3, example);
	tuned_exec_free(exec);
	cr_assert_eq(tunectl_run(f, b, json_object_get(result, "plan"), why, sizeof(why)), 0,
		     "tunectl run of variant b: %s", why);
	cr_log_info("%s: version %lld of key %.12s (%zu kernels), tuned for variant a, "
		    "ran for variants b and a: %lld output elements match the reference",
		    example, (long long)json_integer_value(json_object_get(result, "version")),
		    sched_graph_key(ga),
		    json_array_size(json_object_get(json_object_get(result, "plan"), "kernels")),
		    (long long)checked);
	json_decref(reply);
	free(fetched);
	sched_graph_free(ga);
	sched_graph_free(gb);
	free(a);
	free(b);
	free(text);
}

Test(numbering, a_plan_tuned_for_one_variant_runs_for_another, .timeout = 600)
{
	static const char *const examples[] = {"bert_qkv_small", "lstm_cell_small",
					       "conv_pair_small"};
	fixture f;
	conn c;

	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	for (int i = 0; i < 3; i++)
		check_example(&f, &c, examples[i]);
	conn_close(&c);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
}

/* Loading "result" (a fetch) for "graph" fails, saying "reason". */
static void expect_refused(const char *graph, json_t *result, const char *reason)
{
	char *fetched = json_dumps(result, 0), why[512] = "";
	tuned_exec *exec = NULL;

	cr_expect_eq(tuned_exec_load(graph, fetched, "cpu", &exec, why, sizeof(why)), -1);
	cr_expect_null(exec);
	cr_expect(strstr(why, reason) != NULL, "'%s' does not say '%s'", why, reason);
	free(fetched);
}

/* A fetched plan names its key: loaded for another graph, with a key
 * that is not one, or with a kernel of an op the graph lacks, it is
 * refused with the reason. */
Test(numbering, a_plan_that_does_not_fit_is_refused, .timeout = 300)
{
	char *text = example_text("lstm_cell_small"), *other = example_text("ln_residual_small");
	char why[2048], *key;
	json_t *reply, *result, *plan;
	fixture f;
	conn c;

	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	reply = tune_and_fetch(&c, text);
	result = json_object_get(reply, "result");
	plan = json_object_get(result, "plan");
	cr_assert_str_eq(json_string_value(json_object_get(plan, "key")),
			 json_string_value(json_object_get(result, "key")));
	expect_refused(other, result, "not for this graph");
	cr_expect_eq(tunectl_run(&f, other, plan, why, sizeof(why)), 1);
	cr_expect(strstr(why, "not for this graph") != NULL, "tunectl run says: %s", why);
	key = strdup(json_string_value(json_object_get(plan, "key")));
	json_object_set_new(plan, "key", json_string("0e87\n4ef8"));
	expect_refused(text, result, "is not a graph's key (64 hex digits)");
	json_object_set_new(plan, "key", json_string(key));
	free(key);
	json_array_append_new(json_object_get(json_array_get(json_object_get(plan, "kernels"), 0),
					      "ops"), json_integer(99));
	expect_refused(text, result, "does not fit");
	json_decref(reply);
	conn_close(&c);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
	free(text);
	free(other);
}
