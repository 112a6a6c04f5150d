/*
 * test_commands.c: tunectl's commands that need no daemon, run as a
 * process beside this test in the build tree on the examples.
 *
 * explain: what it shows of the fusion planner (client/explain_fusion.c):
 * the width of every dependence, the planner's merges and fused groups
 * (tuner_fusion_edges'), their plan (read back with kgen_plan_from_json)
 * and the Graphviz file of --dot.
 *
 * sources (client/sources.c): a plan's code written without running it,
 * and for cuda NVRTC's PTX and cubin, read with bench/sass_mix where
 * nvdisasm is found.
 *
 * grad (client/grad.c): the backward graph of an example, written to a
 * file or printed, read back; what a refusal says.
 *
 * usage (client/options.c): --help, help, --version, options before or
 * after the command, and what each usage error says.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "kgen.h"
#include "scheduler.h"
#include "tuner.h"

static char folder[64];

static void make_folder(void)
{
	strcpy(folder, "/tmp/tunectl-explain-XXXXXX");
	cr_assert_not_null(mkdtemp(folder), "mkdtemp: %s", strerror(errno));
}

static void remove_folder(void)
{
	kgen_empty_folder(folder);
	rmdir(folder);
}

TestSuite(explain, .init = make_folder, .fini = remove_folder);
TestSuite(sources, .init = make_folder, .fini = remove_folder);
TestSuite(usage, .init = make_folder, .fini = remove_folder);
TestSuite(grad, .init = make_folder, .fini = remove_folder);

static void example(const char *name, char *out, size_t size)
{
	const char *root = getenv("TUNED_SOURCE_ROOT");

	snprintf(out, size, "%s/examples/%s.json", root ? root : ".", name);
}

/* tunectl, beside this test in the build tree: build/client/tunectl. */
static void tunectl_path(char *out, size_t size)
{
	char self[PATH_MAX] = "";
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	self[n > 0 ? n : 0] = 0;
	snprintf(out, size, "%s/../../client/tunectl", dirname(self));
	if (access(out, X_OK) != 0)
		cr_skip_test("no tunectl at %s", out);
}

/* Runs tunectl with "args" (NULL-terminated), its stdout into
 * folder/out and its stderr into folder/err; its exit status. */
static int tunectl(const char *const *args)
{
	char path[PATH_MAX + 32], out[128], err[128];
	const char *argv[16] = {"tunectl"};
	int i, status;
	pid_t pid;

	tunectl_path(path, sizeof(path));
	snprintf(out, sizeof(out), "%s/out", folder);
	snprintf(err, sizeof(err), "%s/err", folder);
	for (i = 0; args[i] && i < 14; i++)
		argv[i + 1] = args[i];
	argv[i + 1] = NULL;
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
			_exit(99);
		execv(path, (char *const *)argv);
		_exit(98);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "tunectl did not exit: status %d", status);
	return WEXITSTATUS(status);
}

static char *slurp(const char *name)
{
	char path[128];
	FILE *f;
	char *text = NULL;
	size_t len = 0;

	snprintf(path, sizeof(path), "%s/%s", folder, name);
	f = fopen(path, "rb");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	if (getdelim(&text, &len, '\0', f) < 0) {
		free(text);
		text = strdup("");
	}
	fclose(f);
	return text;
}

/* tunectl explain --json on example "name", parsed. */
static json_t *explain_json(const char *name)
{
	char file[PATH_MAX];
	json_error_t jerr;
	json_t *obj;
	char *text;

	example(name, file, sizeof(file));
	cr_assert_eq(tunectl((const char *const[]){"explain", "--json", file, NULL}), 0,
		     "explain %s failed: %s", name, slurp("err"));
	text = slurp("out");
	obj = json_loads(text, 0, &jerr);
	cr_assert_not_null(obj, "not JSON (%s):\n%s", jerr.text, text);
	free(text);
	return obj;
}

/* The dependence on tensor "tensor" in "obj", or NULL. */
static json_t *dependence(json_t *obj, const char *tensor, int consumer)
{
	json_t *dep;
	size_t i;

	json_array_foreach(json_object_get(obj, "dependences"), i, dep)
		if (!strcmp(json_string_value(json_object_get(dep, "tensor")), tensor) &&
		    (consumer < 0 ||
		     json_integer_value(json_object_get(dep, "consumer")) == consumer))
			return dep;
	return NULL;
}

static const char *width_of(json_t *dep)
{
	return json_string_value(json_object_get(dep, "width"));
}

/* The group holding op "op", or -1. */
static int group_of(json_t *obj, int op)
{
	json_t *group, *v;
	size_t i, j;

	json_array_foreach(json_object_get(obj, "groups"), i, group)
		json_array_foreach(json_object_get(group, "ops"), j, v)
			if (json_integer_value(v) == op)
				return (int)i;
	return -1;
}

/* The plan in "obj" is valid for the graph, one kernel per group. */
static void expect_plan_reads_back(const char *name, json_t *obj)
{
	char file[PATH_MAX];
	sched_graph *graph;
	kgen_plan *plan;
	kgen_error err = {0};

	example(name, file, sizeof(file));
	cr_assert_eq(sched_graph_read_file(file, &graph, NULL), 0);
	cr_expect_eq(kgen_plan_from_json(graph, json_object_get(obj, "plan"), &plan,
					 &err), 0, "%s: %s", name, err.message);
	if (plan)
		cr_expect_eq((size_t)plan->nkernels,
			     json_array_size(json_object_get(obj, "groups")));
	kgen_plan_free(plan);
	kgen_error_release(&err);
	sched_graph_free(graph);
}

Test(explain, bert_qkv_widths_are_thread_or_block_never_global)
{
	json_t *obj = explain_json("bert_qkv"), *dep;
	size_t i;

	cr_expect_eq(json_array_size(json_object_get(obj, "dependences")), 6);
	cr_assert_not_null(dependence(obj, "xq", 1));
	cr_expect_str_eq(width_of(dependence(obj, "xq", 1)), "thread");
	cr_assert_not_null(dependence(obj, "yq", 2));
	cr_expect(!strcmp(width_of(dependence(obj, "yq", 2)), "thread") ||
		  !strcmp(width_of(dependence(obj, "yq", 2)), "block"));
	json_array_foreach(json_object_get(obj, "dependences"), i, dep) {
		cr_expect_str_neq(width_of(dep), "global", "%s: %s",
				  json_string_value(json_object_get(dep, "tensor")),
				  json_string_value(json_object_get(dep, "reason")));
		cr_expect_null(json_object_get(dep, "reason"));
		cr_expect(json_is_string(json_object_get(dep, "relation")));
		cr_expect(strstr(json_string_value(json_object_get(dep, "relation")), "->"));
	}
	/* Each projection's chain is one group: xq, yq, q; xk, yk, k; ... */
	cr_expect_eq(json_array_size(json_object_get(obj, "groups")), 3);
	cr_expect_eq(group_of(obj, 0), group_of(obj, 2));
	cr_expect_neq(group_of(obj, 0), group_of(obj, 3));
	expect_plan_reads_back("bert_qkv", obj);
	json_decref(obj);
}

Test(explain, conv_pair_a1_to_y2_is_global)
{
	json_t *obj = explain_json("conv_pair"), *dep = dependence(obj, "a1", 2);
	json_t *group, *stage;
	size_t i, j;

	cr_assert_not_null(dep);
	cr_expect_str_eq(width_of(dep), "global");
	cr_expect(json_is_string(json_object_get(dep, "reason")));
	cr_expect_str_eq(width_of(dependence(obj, "y1", 1)), "thread");
	cr_expect_str_eq(width_of(dependence(obj, "y2", 3)), "thread");
	cr_expect_neq(group_of(obj, 1), group_of(obj, 2));
	json_array_foreach(json_object_get(obj, "groups"), i, group) {
		cr_expect_eq(json_array_size(json_object_get(group, "roots")), 1);
		cr_expect_gt(json_integer_value(json_object_get(group, "blocks")), 0);
		json_array_foreach(json_object_get(group, "stages"), j, stage)
			cr_expect(json_is_string(json_object_get(stage, "store")) &&
				  json_is_boolean(json_object_get(stage, "barrier")));
	}
	expect_plan_reads_back("conv_pair", obj);
	json_decref(obj);
}

Test(explain, every_example_plans_groups_that_read_back)
{
	static const char *const names[] = {"conv_pair_small", "gpt3_mlp_small",
		"llama_mlp_small", "lstm_cell_small", "ln_residual_small",
		"softmax_scores_small", "mi_lstm_cell_small", "ln_grad_params_small", NULL};

	for (int n = 0; names[n]; n++) {
		json_t *obj = explain_json(names[n]);

		expect_plan_reads_back(names[n], obj);
		json_decref(obj);
	}
}

/* explain's groups and plan are the fusion planner's own
 * (tuner_fusion_edges), where a walk of another kind would make others:
 * softmax_scores and ln_residual fuse whole, in a second pass. */
Test(explain, groups_are_the_planners)
{
	static const char *const names[] = {"softmax_scores", "ln_residual",
		"lstm_cell_small", "conv_pair", "bert_qkv", NULL};

	for (int n = 0; names[n]; n++) {
		json_t *obj = explain_json(names[n]), *expected;
		char file[PATH_MAX];
		sched_graph *graph;
		kgen_plan *plan;

		example(names[n], file, sizeof(file));
		cr_assert_eq(sched_graph_read_file(file, &graph, NULL), 0);
		plan = tuner_fusion_edges(graph, 1, NULL, NULL);
		cr_assert_not_null(plan);
		expected = kgen_plan_to_json(graph, plan);
		cr_expect(json_equal(json_object_get(obj, "plan"), expected),
			  "%s: explain's plan is not the planner's", names[n]);
		json_decref(expected);
		kgen_plan_free(plan);
		sched_graph_free(graph);
		json_decref(obj);
	}
}

/* The merges are the planner's tries as it made them: in ln_residual,
 * s -> mean leaves a cycle until mean and var have joined y, and fuses
 * in the second pass. */
Test(explain, merges_are_the_planners_passes)
{
	json_t *obj = explain_json("ln_residual"), *step;
	bool refused = false, fused_later = false;
	size_t i;

	json_array_foreach(json_object_get(obj, "merges"), i, step) {
		bool s_to_mean = json_integer_value(json_object_get(step, "producer")) == 0 &&
				 json_integer_value(json_object_get(step, "consumer")) == 1;
		long long pass = json_integer_value(json_object_get(step, "pass"));

		refused |= s_to_mean && pass == 1 &&
			   json_is_false(json_object_get(step, "fused")) &&
			   json_is_string(json_object_get(step, "reason"));
		fused_later |= s_to_mean && pass == 2 &&
			       json_is_true(json_object_get(step, "fused"));
	}
	cr_expect(refused, "ln_residual: s -> mean was not refused in the first pass");
	cr_expect(fused_later, "ln_residual: s -> mean did not fuse in the second pass");
	cr_expect_eq(json_array_size(json_object_get(obj, "groups")), 1);
	json_decref(obj);
}

Test(explain, text_has_the_fusion_sections)
{
	char file[PATH_MAX];
	char *text, *plan;
	json_t *parsed;

	example("conv_pair", file, sizeof(file));
	cr_assert_eq(tunectl((const char *const[]){"explain", file, NULL}), 0);
	text = slurp("out");
	cr_expect(strstr(text, "\ndependences"), "%s", text);
	cr_expect(strstr(text, "op 1 -> op 2 (a1): global"), "%s", text);
	cr_expect(strstr(text, "\nfusion groups"), "%s", text);
	plan = strstr(text, "\nplan\n");
	cr_assert_not_null(plan, "%s", text);
	parsed = json_loads(plan + strlen("\nplan\n"), 0, NULL);
	cr_expect(json_is_array(json_object_get(parsed, "kernels")),
		  "the plan section is not a plan: %s", plan);
	json_decref(parsed);
	free(text);
}

/* A chain of "n" ops, t1 = t0 + 1 ... tn = tn-1 + 1 (t1 ... tn-1
 * intermediates), written to "name" in the test's folder, whose path goes
 * into "path". */
static void write_chain(const char *name, int n, char *path, size_t size)
{
	FILE *f;

	snprintf(path, size, "%s/%s", folder, name);
	f = fopen(path, "w");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	fprintf(f, "{\"version\": 1, \"tensors\": {");
	for (int t = 0; t <= n; t++)
		fprintf(f, "%s\"t%d\": {\"shape\": [16], \"dtype\": \"f32\"%s}",
			t ? ", " : "", t,
			!t     ? ", \"role\": \"input\"" :
			t == n ? ", \"role\": \"output\"" :
				 "");
	fprintf(f, "}, \"ops\": [");
	for (int op = 1; op <= n; op++)
		fprintf(f, "%s\"t%d[i] = t%d[i] + 1\"", op > 1 ? ", " : "", op, op - 1);
	fprintf(f, "]}\n");
	fclose(f);
}

Test(explain, a_graph_too_large_to_fuse_says_so)
{
	char file[PATH_MAX], *text;

	write_chain("chain.json", 262, file, sizeof(file));
	cr_assert_eq(tunectl((const char *const[]){"explain", file, NULL}), 0);
	text = slurp("out");
	cr_expect(strstr(text, "not fused: the planner does not fuse graphs of "
			       "more than 256 ops (this one has 262)"),
		  "%s", text);
	free(text);
}

/* Every dependence of "obj" is an edge of "dot" coloured by its width. */
static void expect_edges(json_t *obj, const char *dot)
{
	static const char *const colors[][2] = {{"thread", "green"},
		{"block", "orange"}, {"global", "red"}};
	json_t *dep;
	size_t i;

	json_array_foreach(json_object_get(obj, "dependences"), i, dep) {
		char edge[128];
		const char *color = NULL;

		for (int c = 0; c < 3; c++)
			if (!strcmp(width_of(dep), colors[c][0]))
				color = colors[c][1];
		snprintf(edge, sizeof(edge), "op%lld -> op%lld [label=\"%s\", color=%s",
			 json_integer_value(json_object_get(dep, "producer")),
			 json_integer_value(json_object_get(dep, "consumer")),
			 width_of(dep), color);
		cr_expect(strstr(dot, edge), "no '%s' in\n%s", edge, dot);
	}
}

Test(explain, dot_writes_clusters_and_coloured_edges)
{
	static const char *const names[] = {"conv_pair", "softmax_scores", NULL};

	for (int n = 0; names[n]; n++) {
		char file[PATH_MAX], dot_path[128];
		json_t *obj = explain_json(names[n]);
		char *dot;

		example(names[n], file, sizeof(file));
		snprintf(dot_path, sizeof(dot_path), "%s/graph.dot", folder);
		cr_assert_eq(tunectl((const char *const[]){"explain", file, "--dot",
							   dot_path, NULL}), 0);
		dot = slurp("graph.dot");
		cr_expect(!strncmp(dot, "digraph ", 8), "%s", dot);
		cr_expect(strstr(dot, "subgraph cluster_0"), "%s", dot);
		for (size_t g = 1; g < json_array_size(json_object_get(obj, "groups")); g++) {
			char cluster[64];

			snprintf(cluster, sizeof(cluster), "subgraph cluster_%zu", g);
			cr_expect(strstr(dot, cluster), "no %s in\n%s", cluster, dot);
		}
		cr_expect(strstr(dot, "op2 [label=\"2: "), "%s", dot);
		expect_edges(obj, dot);
		free(dot);
		json_decref(obj);
	}
	/* conv_pair has thread and global edges; softmax_scores block ones. */
	{
		char file[PATH_MAX], dot_path[128];
		char *dot;

		example("softmax_scores", file, sizeof(file));
		snprintf(dot_path, sizeof(dot_path), "%s/graph.dot", folder);
		cr_assert_eq(tunectl((const char *const[]){"explain", "--json", file,
							   "--dot", dot_path, NULL}), 0);
		dot = slurp("graph.dot");
		cr_expect(strstr(dot, "color=green") && strstr(dot, "color=orange") &&
			  strstr(dot, "color=red"), "%s", dot);
		free(dot);
	}
}

Test(explain, bad_dot_path_is_a_clear_error)
{
	char file[PATH_MAX];
	char *err, *out;

	example("conv_pair_small", file, sizeof(file));
	cr_expect_eq(tunectl((const char *const[]){"explain", file, "--dot",
						   "/nonexistent/folder/graph.dot", NULL}), 1);
	err = slurp("err");
	out = slurp("out");
	cr_expect(strstr(err, "cannot write '/nonexistent/folder/graph.dot'"), "%s", err);
	cr_expect(strstr(err, "No such file or directory"), "%s", err);
	cr_expect_str_eq(out, "");
	free(err);
	free(out);
	cr_expect_eq(tunectl((const char *const[]){"explain", file, "--dot", NULL}), 2);
	cr_expect_eq(tunectl((const char *const[]){"validate", file, "--dot",
						   "x.dot", NULL}), 2);
}

/* The default plan's kernel count of example "name". */
static int default_kernels(const char *name)
{
	char file[PATH_MAX];
	sched_graph *graph;
	kgen_plan *plan;
	int n;

	example(name, file, sizeof(file));
	cr_assert_eq(sched_graph_read_file(file, &graph, NULL), 0);
	cr_assert_not_null(plan = kgen_plan_default(graph));
	n = plan->nkernels;
	kgen_plan_free(plan);
	sched_graph_free(graph);
	return n;
}

/* folder/kernel_<k>.<ext>'s first bytes; NULL when it is missing or empty. */
static char *kernel_file(int k, const char *ext)
{
	char name[64];
	struct stat st;
	char path[128];

	snprintf(name, sizeof(name), "kernel_%d.%s", k, ext);
	snprintf(path, sizeof(path), "%s/%s", folder, name);
	if (stat(path, &st) != 0 || st.st_size == 0)
		return NULL;
	return slurp(name);
}

/* "text" written as folder/name, whose path goes into "path". */
static void write_plan(const char *name, const char *text, char *path, size_t size)
{
	FILE *f;

	snprintf(path, size, "%s/%s", folder, name);
	cr_assert_not_null(f = fopen(path, "w"), "%s: %s", path, strerror(errno));
	fputs(text, f);
	cr_assert_eq(fclose(f), 0);
}

Test(sources, cpu_writes_one_c_file_per_kernel)
{
	char file[PATH_MAX], *c;
	int n = default_kernels("ln_residual");

	example("ln_residual", file, sizeof(file));
	cr_assert_eq(tunectl((const char *const[]){"sources", file, "--backend", "cpu",
						   "--out", folder, NULL}), 0,
		     "%s", slurp("err"));
	for (int k = 0; k < n; k++) {
		cr_assert_not_null(c = kernel_file(k, "c"), "no kernel_%d.c", k);
		cr_expect(strstr(c, "void **tensors"), "kernel_%d.c:\n%s", k, c);
		free(c);
	}
	cr_expect_null(kernel_file(n, "c"), "a file past the plan's %d kernels", n);
	cr_expect_null(kernel_file(0, "cubin"));
}

static void skip_without_nvrtc(void)
{
	kgen_error err = {0};

	if (kgen_nvrtc_check("extern \"C\" __global__ void k(void) {}", "sm_90", &err) ==
	    KGEN_EBACKEND)
		cr_skip_test("no libnvrtc: %s", err.message);
	kgen_error_release(&err);
}

/* bench/sass_mix on folder's cubins, its JSON parsed; NULL without nvdisasm. */
static json_t *sass_mix(void)
{
	const char *root = getenv("TUNED_SOURCE_ROOT");
	char command[PATH_MAX * 2];

	snprintf(command, sizeof(command),
		 "%s/bench/sass_mix --json %s/mix.json %s >%s/mix.out 2>&1",
		 root ? root : ".", folder, folder, folder);
	if (system(command) != 0)
		return NULL;
	snprintf(command, sizeof(command), "%s/mix.json", folder);
	return json_load_file(command, 0, NULL);
}

Test(sources, cuda_writes_source_ptx_and_cubin_without_a_gpu)
{
	char file[PATH_MAX], *cu, *ptx, *cubin;
	int n = default_kernels("softmax_scores");
	json_t *mix, *kernel;
	size_t i;

	skip_without_nvrtc();
	example("softmax_scores", file, sizeof(file));
	cr_assert_eq(tunectl((const char *const[]){"sources", file, "--arch", "sm_80",
						   "--out", folder, NULL}), 0,
		     "%s", slurp("err"));
	for (int k = 0; k < n; k++) {
		cr_assert_not_null(cu = kernel_file(k, "cu"), "no kernel_%d.cu", k);
		cr_assert_not_null(ptx = kernel_file(k, "ptx"), "no kernel_%d.ptx", k);
		cr_assert_not_null(cubin = kernel_file(k, "cubin"), "no kernel_%d.cubin", k);
		cr_expect(strstr(cu, "__global__"));
		cr_expect(strstr(ptx, ".target sm_80"), "kernel_%d.ptx:\n%.300s", k, ptx);
		cr_expect(!memcmp(cubin, "\177ELF", 4), "kernel_%d.cubin is no ELF file", k);
		free(cu);
		free(ptx);
		free(cubin);
	}
	if (!(mix = sass_mix()))
		cr_skip_test("bench/sass_mix did not run (no nvdisasm?): %s", slurp("mix.out"));
	cr_expect_eq(json_array_size(mix), (size_t)n);
	json_array_foreach(mix, i, kernel) {
		cr_expect_gt(json_integer_value(json_object_get(kernel, "registers")), 0);
		cr_expect_gt(json_integer_value(json_object_get(kernel, "instructions")), 0);
		cr_expect(json_object_get(json_object_get(kernel, "classes"), "global store"),
			  "kernel %zu stores nothing?", i);
	}
	json_decref(mix);
}

Test(sources, a_bad_plan_or_no_folder_is_a_clear_error)
{
	char file[PATH_MAX], plan[128], *err;

	example("softmax_scores", file, sizeof(file));
	write_plan("bad_plan.json", "{\"kernels\": [{\"name\": \"k\", \"ops\": [99]}]}",
		   plan, sizeof(plan));
	cr_expect_eq(tunectl((const char *const[]){"sources", file, "--plan", plan,
						   "--backend", "cpu", "--out", folder, NULL}),
		     1);
	err = slurp("err");
	cr_expect(strstr(err, "bad_plan.json"), "stderr: %s", err);
	free(err);
	cr_expect_null(kernel_file(0, "c"));
	cr_expect_eq(tunectl((const char *const[]){"sources", file, NULL}), 2);
	err = slurp("err");
	cr_expect(strstr(err, "--out"), "stderr: %s", err);
	free(err);
	cr_expect_eq(tunectl((const char *const[]){"sources", file, "--backend", "tpu",
						   "--out", folder, NULL}), 2);
}

/* A library step on cuda is its cuBLASLt call, written as JSON beside
 * the other kernels' CUDA, PTX and cubin. */
Test(sources, a_cuda_library_step_is_its_call)
{
	char file[PATH_MAX], plan[128], *call;

	skip_without_nvrtc();
	example("gpt3_mlp_small", file, sizeof(file));
	write_plan("library_plan.json", "{\"kernels\": [{\"ops\": [0], \"schedule\": "
		   "{\"library\": true}}, {\"ops\": [1]}, {\"ops\": [2]}]}", plan, sizeof(plan));
	cr_assert_eq(tunectl((const char *const[]){"sources", file, "--plan", plan,
						   "--out", folder, NULL}), 0,
		     "%s", slurp("err"));
	cr_assert_not_null(call = kernel_file(0, "library.json"));
	cr_expect(strstr(call, "\"cublasLt\""), "%s", call);
	free(call);
	cr_expect_null(kernel_file(0, "cubin"), "a cubin for a library step");
	for (int k = 1; k < 3; k++) {
		char *cubin = kernel_file(k, "cubin");

		cr_expect_not_null(cubin, "no kernel_%d.cubin", k);
		free(cubin);
	}
}

/* The graph in "text" has the tensor "name" with role "role". */
static void expect_tensor(const char *text, const char *name, enum sched_role role)
{
	sched_graph *graph;
	sched_error err = {0};
	int t;

	cr_assert_eq(sched_graph_read_string(text, &graph, &err), 0, "%s", err.message);
	t = sched_tensor_find(graph, name);
	cr_expect(t >= 0 && sched_tensor_role(graph, t) == role, "%s in\n%s", name, text);
	sched_graph_free(graph);
}

Test(grad, writes_the_backward_graph_to_out)
{
	char file[PATH_MAX], out[128], *line, *text;

	example("lstm_cell_small", file, sizeof(file));
	snprintf(out, sizeof(out), "%s/grad.json", folder);
	cr_assert_eq(tunectl((const char *const[]){"grad", file, "--wrt", "x,Wx",
						   "--out", out, NULL}), 0, "%s", slurp("err"));
	line = slurp("out");
	cr_expect(strstr(line, "backward graph 'lstm_cell_small_grad'"), "%s", line);
	text = slurp("grad.json");
	expect_tensor(text, "d_x", SCHED_OUTPUT);
	expect_tensor(text, "d_Wx", SCHED_OUTPUT);
	expect_tensor(text, "d_h_new", SCHED_INPUT);
	expect_tensor(text, "d_c_new", SCHED_INPUT);
	free(line);
	free(text);
}

/* --save auto: the backward graph reads the contractions saved, and
 * --forward gets the forward graph that outputs them; --save needs
 * --forward, and takes only none, auto or all. */
Test(grad, save_writes_the_forward_graph_that_saves)
{
	char file[PATH_MAX], out[128], fwd[128], *line, *text, *err;

	example("lstm_cell_small", file, sizeof(file));
	snprintf(out, sizeof(out), "%s/grad.json", folder);
	snprintf(fwd, sizeof(fwd), "%s/fwd.json", folder);
	cr_assert_eq(tunectl((const char *const[]){"grad", file, "--wrt", "x,Wx",
						   "--save", "auto", "--forward", fwd,
						   "--out", out, NULL}),
		     0, "%s", slurp("err"));
	line = slurp("out");
	cr_expect(strstr(line, "grad.json: backward graph 'lstm_cell_small_grad'"),
		  "%s", line);
	cr_expect(strstr(line,
			 "fwd.json: forward graph 'lstm_cell_small_fwd', 15 tensors, "
			 "9 ops"),
		  "%s", line);
	text = slurp("grad.json");
	expect_tensor(text, "gx", SCHED_INPUT);
	expect_tensor(text, "gates", SCHED_INTERMEDIATE);
	free(text);
	text = slurp("fwd.json");
	expect_tensor(text, "gx", SCHED_OUTPUT);
	expect_tensor(text, "gates", SCHED_INTERMEDIATE);
	expect_tensor(text, "h_new", SCHED_OUTPUT);
	free(text);
	free(line);
	cr_expect_eq(tunectl((const char *const[]){"grad", file, "--wrt", "x", "--save",
						   "all", NULL}),
		     2);
	err = slurp("err");
	cr_expect(strstr(err, "--save all needs --forward FWD"), "%s", err);
	free(err);
	cr_expect_eq(tunectl((const char *const[]){"grad", file, "--wrt", "x", "--save",
						   "most", "--forward", fwd, NULL}),
		     2);
	err = slurp("err");
	cr_expect(strstr(err, "--save takes none, auto or all, not 'most'"), "%s", err);
	free(err);
}

Test(grad, prints_the_backward_graph_without_out)
{
	char file[PATH_MAX], *text;

	example("softmax_scores_small", file, sizeof(file));
	cr_assert_eq(tunectl((const char *const[]){"grad", "--wrt", "P", file, NULL}), 0,
		     "%s", slurp("err"));
	text = slurp("out");
	expect_tensor(text, "d_P", SCHED_OUTPUT);
	expect_tensor(text, "d_y", SCHED_INPUT);
	free(text);
}

Test(grad, refusals_say_why)
{
	char file[PATH_MAX], *err;

	example("gpt3_mlp_small", file, sizeof(file));
	cr_expect_eq(tunectl((const char *const[]){"grad", file, "--wrt", "Y", NULL}), 1);
	err = slurp("err");
	cr_expect(strstr(err, "cannot differentiate with respect to 'Y': it is an "
			 "output, whose gradient is the input d_Y"), "%s", err);
	free(err);
	cr_expect_eq(tunectl((const char *const[]){"grad", file, "--wrt", "X,", NULL}), 2);
	err = slurp("err");
	cr_expect(strstr(err, "--wrt takes 1 to 64 tensor names"), "%s", err);
	free(err);
	cr_expect_eq(tunectl((const char *const[]){"grad", file, NULL}), 2);
}

/* usage: what tunectl says of itself and of a command line it refuses. */

/* Every command, as its usage names it. */
static const char *const all_commands[] = {"validate", "explain", "grad", "run",
	"sources", "submit", "status", "list", "wait", "cancel", "watch", "fetch",
	"stats", "cache ls", "cache show", "cache prune", "cache export",
	"cache import", NULL};

/* tunectl with the words of "line" (split at spaces) and then "more"
 * (NULL-terminated, may be NULL); its exit status. */
static int tunectl_line(const char *line, const char *const *more)
{
	const char *args[16];
	char *copy = strdup(line), *word, *save = NULL;
	int n = 0, status;

	for (word = strtok_r(copy, " ", &save); word && n < 14;
	     word = strtok_r(NULL, " ", &save))
		args[n++] = word;
	for (int i = 0; more && more[i] && n < 15; i++)
		args[n++] = more[i];
	args[n] = NULL;
	status = tunectl(args);
	free(copy);
	return status;
}

/* The output of "line", which must exit 0 and say nothing on stderr. */
static char *answer(const char *line)
{
	char *err;

	cr_assert_eq(tunectl_line(line, NULL), 0, "tunectl %s: %s", line,
		     slurp("err"));
	err = slurp("err");
	cr_expect_str_eq(err, "", "tunectl %s wrote on stderr", line);
	free(err);
	return slurp("out");
}

Test(usage, version_is_the_project_s)
{
	char *out = answer("--version");

	cr_expect_str_eq(out, "tunectl (tuned) " TUNED_VERSION "\n");
	free(out);
	cr_expect_eq(tunectl_line("--version --json", NULL), 2);
	cr_expect_eq(tunectl_line("status 3 --version", NULL), 2);
	out = slurp("err");
	cr_expect(strstr(out, "tunectl status: unknown option '--version'"), "%s", out);
	free(out);
}

Test(usage, help_dash_help_and_h_print_the_whole_usage)
{
	char *help = answer("help"), *dash = answer("--help"), *h = answer("-h");

	cr_expect_str_eq(dash, help);
	cr_expect_str_eq(h, help);
	cr_expect(!strncmp(help, "usage: tunectl COMMAND", 22), "%s", help);
	for (int i = 0; all_commands[i]; i++) {
		char line[64];

		snprintf(line, sizeof(line), "\n  %s ", all_commands[i]);
		cr_expect(strstr(help, line), "no '%s' in\n%s", line + 1, help);
	}
	cr_expect(strstr(help, "tunectl --version"), "%s", help);
	cr_expect(strstr(help, "exit status:"), "%s", help);
	free(help);
	free(dash);
	free(h);
}

/* The same usage, however asked for: CMD --help, --help CMD, CMD -h,
 * help CMD; it begins with the command's synopsis. */
Test(usage, every_command_answers_help_the_same_four_ways)
{
	for (int i = 0; all_commands[i]; i++) {
		const char *c = all_commands[i];
		char line[64], start[64], *first, *other;

		snprintf(line, sizeof(line), "%s --help", c);
		first = answer(line);
		snprintf(start, sizeof(start), "usage: tunectl %s ", c);
		cr_expect(!strncmp(first, start, strlen(start)), "%s:\n%s", line, first);
		cr_expect(strstr(first, "\n  -h, --help"), "%s:\n%s", line, first);
		snprintf(line, sizeof(line), "--help %s", c);
		other = answer(line);
		cr_expect_str_eq(other, first, "tunectl %s", line);
		free(other);
		snprintf(line, sizeof(line), "%s -h", c);
		other = answer(line);
		cr_expect_str_eq(other, first, "tunectl %s", line);
		free(other);
		snprintf(line, sizeof(line), "help %s", c);
		other = answer(line);
		cr_expect_str_eq(other, first, "tunectl %s", line);
		free(other);
		free(first);
	}
}

Test(usage, cache_help_shows_each_cache_command)
{
	char *help = answer("cache --help"), *other = answer("help cache");

	cr_expect_str_eq(other, help);
	cr_expect(strstr(help, "usage: tunectl cache ls"), "%s", help);
	cr_expect(strstr(help, "usage: tunectl cache show KEY"), "%s", help);
	cr_expect(strstr(help, "usage: tunectl cache prune [--max-age S]"), "%s", help);
	cr_expect_null(strstr(help, "usage: tunectl submit"), "%s", help);
	free(help);
	free(other);
}

Test(usage, every_usage_line_fits_80_columns)
{
	for (int i = -1; all_commands[i < 0 ? 0 : i]; i++) {
		char line[64], *out, *p, *end;

		snprintf(line, sizeof(line), "help %s", i < 0 ? "" : all_commands[i]);
		out = answer(line);
		for (p = out; *p; p = *end ? end + 1 : end) {
			end = p + strcspn(p, "\n");
			cr_expect_leq(end - p, 80, "tunectl %s: a line of %d columns: %.*s",
				      line, (int)(end - p), (int)(end - p), p);
		}
		free(out);
	}
}

/* The options a command's --help lists: "--name" and whether a value
 * follows, from its lines "  --name VALUE   help". */
typedef struct listed {
	char name[32];
	bool value;
} listed;

static int listed_options(const char *command, listed *out, int max)
{
	char line[64], *help, *p;
	int n = 0;

	snprintf(line, sizeof(line), "help %s", command);
	help = answer(line);
	p = strstr(help, "\noptions");
	cr_assert_not_null(p, "tunectl %s: no options section:\n%s", line, help);
	while ((p = strstr(p, "\n  --")) && n < max) {
		size_t len = strcspn(p + 5, " \n");

		snprintf(out[n].name, sizeof(out[n].name), "%.*s", (int)len, p + 5);
		out[n].value = p[5 + len] == ' ' && p[6 + len] != ' ';
		n++;
		p += 5;
	}
	free(help);
	return n;
}

static bool has_option(const listed *options, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(options[i].name, name))
			return true;
	return false;
}

/* A value of option "name" that its commands accept, written into the
 * test's folder where it names a file; "1" for a number or a flag's
 * unused value. */
static const char *sample_value(const char *name, char *buf, size_t size)
{
	static const char *const values[][2] = {
		{"backend", "cpu"},
		{"arch", "sm_90"},
		{"socket", "/nonexistent/tuned.sock"},
		{"plan", "/nonexistent/plan.json"},
		{"cache", "/nonexistent/cache.db"},
		{"wrt", "P"},
		{"save", "none"},
	};

	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++)
		if (!strcmp(name, values[i][0]))
			return values[i][1];
	if (!strcmp(name, "out"))
		return folder;
	if (!strcmp(name, "dot"))
		return snprintf(buf, size, "%s/graph.dot", folder), buf;
	return "1";
}

/* An argument of the kind "word" names in a usage (FILE, JOB, ...). */
static const char *sample_argument(const char *word, char *file, size_t size)
{
	static const char key[] = "00000000000000000000000000000000"
				  "00000000000000000000000000000000";

	if (!strcmp(word, "FILE"))
		return example("softmax_scores_small", file, size), file;
	if (!strcmp(word, "JOB") || !strcmp(word, "KEY|JOB"))
		return "3";
	if (!strcmp(word, "KEY"))
		return key;
	cr_assert_fail("no sample argument for %s", word);
	return NULL;
}

/* A command line that "command" takes, from its synopsis without its
 * optional parts ([...]): the command, its argument and its required
 * options with sample values, and what its synopsis cannot say it needs.
 * Into "words", NULL-terminated; they may point into "usage", "file" and
 * "value", which hold the strings they need. */
typedef struct sample_line {
	const char *words[16];
	char *usage, file[PATH_MAX], value[128];
} sample_line;

/* What a command needs besides its synopsis: cache export takes keys or
 * --all, cache prune --max-age or --max-bytes. */
static const char *const also_needed[][3] = {
	{"cache export", "--all", NULL},
	{"cache prune", "--max-age", "1d"},
};

static void read_synopsis(const char *command, sample_line *line)
{
	char help[64], *cut, *word, *save = NULL;
	int n = 0, command_words = 1 + (strchr(command, ' ') != NULL);
	bool optional = false;

	snprintf(help, sizeof(help), "help %s", command);
	line->usage = answer(help);
	if ((cut = strstr(line->usage, "\n\n")))
		*cut = 0;
	word = strtok_r(line->usage + strlen("usage: tunectl "), " \n", &save);
	for (; word && n < 10; word = strtok_r(NULL, " \n", &save)) {
		if (word[0] == '[' || optional)
			optional = word[strlen(word) - 1] != ']';
		else if (n < command_words)
			line->words[n++] = word;
		else if (!strncmp(word, "--", 2)) {
			line->words[n++] = word;
			line->words[n++] = sample_value(word + 2, line->value,
							sizeof(line->value));
			strtok_r(NULL, " \n", &save); /* its VALUE */
		} else
			line->words[n++] = sample_argument(word, line->file,
							   sizeof(line->file));
	}
	for (size_t i = 0; i < sizeof(also_needed) / sizeof(also_needed[0]); i++)
		for (int k = 1; k < 3 && !strcmp(command, also_needed[i][0]) &&
		     also_needed[i][k]; k++)
			line->words[n++] = also_needed[i][k];
	line->words[n] = NULL;
}

/* "command" with its own option "option" (and a sample value when it
 * takes one) is no usage error: it goes past the command line. */
static void expect_taken(const char *command, const listed *option)
{
	sample_line line;
	char name[48], buf[128], *err;
	int n = 0, status;

	read_synopsis(command, &line);
	while (line.words[n])
		n++;
	snprintf(name, sizeof(name), "--%.31s", option->name);
	line.words[n] = name;
	line.words[n + 1] = option->value ? sample_value(option->name, buf,
							 sizeof(buf)) : NULL;
	line.words[n + 2] = NULL;
	status = tunectl(line.words);
	err = slurp("err");
	cr_expect_neq(status, 2, "tunectl %s %s: a usage error: %s", command, name,
		      err);
	free(err);
	free(line.usage);
}

/* "command" with the option "option" of another command is refused as
 * unknown, before anything else is looked at. */
static void expect_refused(const char *command, const listed *option)
{
	char name[48], refused[128], *err;
	int status;

	snprintf(name, sizeof(name), "--%.31s", option->name);
	status = tunectl_line(command, (const char *const[]){name,
			      option->value ? "1" : NULL, NULL});
	err = slurp("err");
	snprintf(refused, sizeof(refused), "tunectl %s: unknown option '%s'",
		 command, name);
	cr_expect(status == 2 && strstr(err, refused),
		  "%s takes %s, which its help does not list (exit %d): %s",
		  command, name, status, err);
	free(err);
}

/* Each option a command's --help lists is taken by it, given its
 * argument and required options: no usage error; each option any other
 * command lists is refused by it as unknown. No daemon is reached:
 * --socket names none, nor does TUNED_SOCKET. */
Test(usage, help_lists_exactly_the_options_each_command_takes)
{
	listed every[64], mine[32];
	int nevery = 0;

	setenv("TUNED_SOCKET", "/nonexistent/tuned.sock", 1);
	for (int i = 0; all_commands[i]; i++) {
		int n = listed_options(all_commands[i], mine, 32);

		cr_expect_gt(n, 0, "%s lists no option", all_commands[i]);
		for (int k = 0; k < n; k++)
			if (!has_option(every, nevery, mine[k].name) && nevery < 64)
				every[nevery++] = mine[k];
	}
	/* json, socket, out, ...: the 17 options tunectl had when this was
	 * written, at least; fewer means the help lines were misread */
	cr_expect_geq(nevery, 17, "only %d options in all", nevery);
	for (int i = 0; all_commands[i]; i++) {
		int n = listed_options(all_commands[i], mine, 32);

		for (int k = 0; k < nevery; k++)
			if (has_option(mine, n, every[k].name))
				expect_taken(all_commands[i], &every[k]);
			else
				expect_refused(all_commands[i], &every[k]);
	}
}

Test(usage, options_may_come_before_the_command)
{
	char file[PATH_MAX], dot[128], *after, *before;

	example("softmax_scores_small", file, sizeof(file));
	cr_assert_eq(tunectl((const char *const[]){"validate", file, "--json",
						   NULL}), 0);
	after = slurp("out");
	cr_assert_eq(tunectl((const char *const[]){"--json", "validate", file,
						   NULL}), 0);
	before = slurp("out");
	cr_expect_str_eq(before, after);
	cr_expect(strstr(before, "\"valid\": true"), "%s", before);
	free(before);
	/* as getopt_long allows: a unique prefix of an option */
	cr_assert_eq(tunectl((const char *const[]){"--js", "validate", file,
						   NULL}), 0);
	before = slurp("out");
	cr_expect_str_eq(before, after);
	free(before);
	free(after);
	snprintf(dot, sizeof(dot), "%s/graph.dot", folder);
	cr_assert_eq(tunectl((const char *const[]){"--dot", dot, "explain", file,
						   NULL}), 0, "%s", slurp("err"));
	after = slurp("graph.dot");
	cr_expect(!strncmp(after, "digraph ", 8), "%s", after);
	free(after);
}

/* With POSIXLY_CORRECT set, getopt stops at the first word that is not
 * an option; tunectl takes options after the command all the same, and
 * the words after "--" as words. */
Test(usage, options_may_follow_the_command_under_posixly_correct)
{
	char file[PATH_MAX], *out;

	example("softmax_scores_small", file, sizeof(file));
	setenv("POSIXLY_CORRECT", "1", 1);
	cr_expect_eq(tunectl((const char *const[]){"validate", file, "--json",
						   NULL}), 0, "%s", slurp("err"));
	out = slurp("out");
	cr_expect(strstr(out, "\"valid\": true"), "%s", out);
	free(out);
	cr_expect_eq(tunectl((const char *const[]){"validate", "--json", "--",
						   file, NULL}), 0, "%s", slurp("err"));
	out = slurp("out");
	cr_expect(strstr(out, "\"valid\": true"), "%s", out);
	free(out);
	unsetenv("POSIXLY_CORRECT");
}

/* Each bad command line: exit 2, nothing on stdout, and on stderr what
 * was wrong. */
Test(usage, usage_errors_say_what_was_wrong)
{
	static const char *const cases[][2] = {
		{"", "tunectl: no command given"},
		{"frobnicate x.json", "tunectl: unknown command 'frobnicate'"},
		{"cache", "tunectl: 'cache' needs a subcommand: ls, show, prune, export, "
		 "import"},
		{"cache frob", "tunectl: unknown command 'cache frob'"},
		{"help frob", "tunectl: unknown command 'frob'"},
		{"help status 3", "tunectl: help: unexpected argument '3'"},
		{"--frob list", "tunectl: unknown option '--frob'"},
		{"-x list", "tunectl: unknown option '-x'"},
		{"-V", "tunectl: unknown option '-V'"},
		{"list --json -Vh", "tunectl: unknown option '-V'"},
		{"--version=1", "tunectl: '--version' takes no value: '--version=1'"},
		{"--help=1", "tunectl: '--help' takes no value: '--help=1'"},
		{"list --socket", "tunectl: a value is missing after '--socket'"},
		{"--json=1 list", "tunectl: '--json' takes no value: '--json=1'"},
		{"cache prune --max 3", "tunectl: ambiguous option '--max': "
		 "--max-age, --max-bytes?"},
		{"status 3 --wait", "tunectl status: unknown option '--wait'\n"
		 "usage: tunectl status JOB"},
		{"validate", "tunectl validate: needs FILE"},
		{"validate a.json b.json", "tunectl validate: unexpected argument "
		 "'b.json'"},
		{"sources a.json", "tunectl sources: needs --out DIR"},
		{"sources a.json --out d --backend tpu", "tunectl sources: unknown "
		 "backend 'tpu'"},
		{"run a.json --backend tpu", "tunectl run: unknown backend 'tpu'"},
		{"run a.json --seed x", "tunectl run: bad value for '--seed': 'x'"},
		{"run a.json --timeout 0", "tunectl run: bad value for '--timeout': "
		 "'0' (seconds, more than 0)"},
		{"status x", "tunectl status: not a job id: 'x'"},
		{"submit g.json --budget 5x", "tunectl submit: bad value for "
		 "'--budget': '5x' (seconds, or a number with s, m, h or d)"},
		{"submit g.json --priority 5000", "tunectl submit: bad value for "
		 "'--priority': '5000' (an integer from -1000 to 1000)"},
		{"cache prune --max-bytes 3Q", "tunectl cache prune: bad value for "
		 "'--max-bytes': '3Q' (at least 1 byte, or a number with K, M, G or T)"},
		{"cache prune --max-age 0", "tunectl cache prune: bad value for "
		 "'--max-age': '0' (at least 1 s, or a number with s, m, h or d)"},
		{"cache prune", "tunectl cache prune: give what to keep: --max-age S "
		 "(remove what is older), --max-bytes N (shrink to N bytes), or both"},
		{"cache export --out f.json", "tunectl cache export: give the keys "
		 "to export or --all, not both"},
		{"cache export 12ab --out f.json", "tunectl cache export: not a key "
		 "(64 hex digits): '12ab'"},
		{"cache export --all", "tunectl cache export: needs --out FILE"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int status = tunectl_line(cases[i][0], NULL);
		char *out = slurp("out"), *err = slurp("err");

		cr_expect_eq(status, 2, "tunectl %s: exit %d", cases[i][0], status);
		cr_expect(strstr(err, cases[i][1]), "tunectl %s: no '%s' in\n%s",
			  cases[i][0], cases[i][1], err);
		cr_expect_str_eq(out, "", "tunectl %s", cases[i][0]);
		free(out);
		free(err);
	}
}
