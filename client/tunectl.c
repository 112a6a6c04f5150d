/*
 * tunectl: the command-line client of tuned.
 *
 *   tunectl validate FILE [--json]   check a graph; exit 0, or 1 with the error
 *   tunectl explain FILE [--json] [--dot OUT]
 *                                    domains, accesses, ranges, FLOPs, bytes,
 *                                    key; dependences, fused groups and their
 *                                    plan (explain_fusion.c)
 *   tunectl grad FILE --wrt X[,Y]    the backward graph as graph.json
 *                                    (grad.c)
 *   tunectl run FILE [options]       compile, verify and time a plan (run.c)
 *   tunectl sources FILE --out DIR   a plan's code, and its PTX and cubin for
 *                                    cuda, without a GPU (sources.c)
 *   tunectl submit|status|list|wait|cancel|watch|fetch|stats|cache ...
 *                                    talk to a daemon (service.c)
 *   tunectl help [COMMAND], --help, --version
 *
 * The commands that need no daemon are described here, those that talk to
 * one in service.c; options.c reads the command line against both.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "scheduler.h"
#include "tunectl.h"

static const char *code_name(int code)
{
	switch (code) {
	case SCHED_EIO: return "io";
	case SCHED_EJSON: return "json";
	case SCHED_ESCHEMA: return "schema";
	case SCHED_ESYNTAX: return "syntax";
	case SCHED_EMEANING: return "meaning";
	case SCHED_EGRAPH: return "graph";
	case SCHED_EBOUNDS: return "bounds";
	case SCHED_ENOMEM: return "nomem";
	default: return "internal";
	}
}

void tunectl_print_json(json_t *obj)
{
	char *text = json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	if (text)
		puts(text);
	free(text);
	json_decref(obj);
}

static int report_error(const char *path, const sched_error *err, bool as_json)
{
	if (as_json)
		tunectl_print_json(json_pack("{s:b, s:s, s:{s:s, s:i, s:i, s:s}}",
				     "valid", 0, "file", path,
				     "error", "code", code_name(err->code),
				     "op", err->op, "column", err->column,
				     "message", err->message));
	else
		fprintf(stderr, "%s: %s\n", path, err->message);
	return EXIT_INVALID;
}

static int validate(const char *path, const sched_graph *graph, bool as_json)
{
	if (as_json)
		tunectl_print_json(json_pack("{s:b, s:s, s:s, s:i, s:i, s:s}", "valid", 1,
				     "file", path, "name", sched_graph_name(graph),
				     "tensors", sched_graph_tensor_count(graph),
				     "ops", sched_graph_op_count(graph),
				     "key", sched_graph_key(graph)));
	else
		printf("%s: valid graph '%s', %d tensors, %d ops, key %s\n", path,
		       sched_graph_name(graph), sched_graph_tensor_count(graph),
		       sched_graph_op_count(graph), sched_graph_key(graph));
	return EXIT_SUCCESS;
}

static void print_op_text(json_t *op)
{
	json_t *reduction = json_object_get(op, "reduction"), *item;
	size_t i;

	printf("op %lld: %s\n", json_integer_value(json_object_get(op, "index")),
	       json_string_value(json_object_get(op, "text")));
	printf("  domain  %s\n", json_string_value(json_object_get(op, "domain")));
	printf("  write   %s\n", json_string_value(json_object_get(op, "write")));
	json_array_foreach(json_object_get(op, "reads"), i, item)
		printf("  read    %s\n", json_string_value(json_object_get(item, "map")));
	json_array_foreach(json_object_get(reduction, "ranges"), i, item)
		printf("  reduce  %s over %s in [%lld, %lld)%s\n",
		       json_string_value(json_object_get(reduction, "reducer")),
		       json_string_value(json_object_get(item, "var")),
		       json_integer_value(json_object_get(item, "lo")),
		       json_integer_value(json_object_get(item, "hi")),
		       json_is_true(json_object_get(item, "inferred")) ? ", inferred" : "");
	printf("  flops   %lld\n  bytes   %lld\n",
	       json_integer_value(json_object_get(op, "flops")),
	       json_integer_value(json_object_get(op, "bytes")));
}

static int explain(const sched_graph *graph, bool as_json, const char *dot)
{
	json_t *obj = sched_graph_explain(graph), *op;
	char why[600];
	size_t i;

	if (!obj)
		return fprintf(stderr, "tunectl: out of memory\n"), EXIT_INVALID;
	if (tunectl_explain_fusion(graph, obj, dot, why, sizeof(why)) < 0) {
		json_decref(obj);
		return fprintf(stderr, "tunectl: %s\n", why), EXIT_INVALID;
	}
	if (as_json)
		return tunectl_print_json(obj), EXIT_SUCCESS;
	printf("graph '%s'\nkey %s\n", sched_graph_name(graph), sched_graph_key(graph));
	json_array_foreach(json_object_get(obj, "ops"), i, op)
		print_op_text(op);
	printf("total: %lld flops, %lld bytes\n",
	       json_integer_value(json_object_get(obj, "flops")),
	       json_integer_value(json_object_get(obj, "bytes")));
	tunectl_print_fusion(obj);
	json_decref(obj);
	return EXIT_SUCCESS;
}

/* validate and explain: the graph FILE, read and checked. */
static int run_graph_command(const tunectl_command *command,
			     const tunectl_args *args)
{
	bool as_json = tunectl_flag(args, "json");
	sched_error err = {0};
	sched_graph *graph;
	int status;

	if (sched_graph_read_file(args->arg, &graph, &err) < 0)
		return report_error(args->arg, &err, as_json);
	if (!strcmp(command->name, "validate"))
		status = validate(args->arg, graph, as_json);
	else
		status = explain(graph, as_json, tunectl_option_value(args, "dot"));
	sched_graph_free(graph);
	return status;
}

#define JSON_OPTION \
	TUNECTL_FLAG("json", "print one JSON object on stdout instead of text\n")

/* The commands that need no daemon: one entry each, with its options and
 * their help, read by options.c for the command line and the usages. */
static const tunectl_command offline_commands[] = {
	{"validate",
	 "FILE",
	 "check FILE (graph.json v1); print its key, or the first error (op\n"
	 "index and column) and exit 1\n",
	 {JSON_OPTION},
	 run_graph_command},
	{"explain",
	 "FILE",
	 "per op: iteration domain, write and read accesses as isl maps,\n"
	 "reduction ranges, FLOPs and bytes; the key; then the fusion\n"
	 "planner's view: every dependence (the consumer reads the producer's\n"
	 "target) as an isl map with its width (thread, block, or global and\n"
	 "why) for the pair fused under the consumer's default tile and 256\n"
	 "threads; the fusion planner's merges along the dependences (each\n"
	 "producer's group joins its consumer's where the group is legal under\n"
	 "its root's default tile or that tile widened to whole rows, in\n"
	 "passes until none merges) and the groups it makes, with tiles,\n"
	 "blocks and each stage's store, width and barrier; and their plan,\n"
	 "for run --plan\n",
	 {TUNECTL_FLAG("json", "print one JSON object on stdout instead of text,\n"
			       "with the keys dependences, merges, groups and plan\n"),
	  TUNECTL_VALUE("dot", "OUT",
			"also write the ops, their dependences (coloured by\n"
			"width: thread green, block orange, global red) and\n"
			"the fused groups (clusters) as a Graphviz file OUT\n")},
	 run_graph_command},
	{"grad",
	 "FILE",
	 "write the backward graph of FILE as graph.json: its inputs are\n"
	 "FILE's inputs and d_<output> for each output (the gradient flowing\n"
	 "in), its outputs d_<name> for each tensor of --wrt, with its shape\n"
	 "and dtype; the forward intermediates it reads are recomputed in it,\n"
	 "or with --save read saved, as inputs of it.\n"
	 "Exit 1 with the op, the read and the reason when FILE cannot be\n"
	 "differentiated (docs/autodiff.md)\n",
	 {TUNECTL_REQUIRED("wrt", "X[,Y...]",
			   "the inputs or intermediates to differentiate\n"
			   "with respect to, separated by commas\n"),
	  TUNECTL_VALUE("out", "OUT",
			"write the graph into OUT, and say on stdout what\n"
			"it holds, instead of printing it\n"),
	  TUNECTL_VALUE("save", "none|auto|all",
			"which forward results the backward graph reads\n"
			"saved instead of recomputing them: none (the\n"
			"default), the costly ones (reductions, contractions,\n"
			"outputs, long elementwise chains), or all\n"),
	  TUNECTL_VALUE("forward", "FWD",
			"with --save: write the forward graph that also\n"
			"outputs the saved tensors into FWD\n")},
	 tunectl_grad},
	{"run",
	 "FILE",
	 "compile the plan (the default one unless --plan), check every output\n"
	 "against the reference interpreter on random inputs, and time each\n"
	 "kernel and the whole plan, in a tuned-worker process; exit 1 unless\n"
	 "all verified\n",
	 {TUNECTL_VALUE("backend", "cpu|cuda|emulated|auto",
			"the backend: emulated runs the CUDA on the cpu,\n"
			"slowly (docs/kernels.md); auto (the default) is\n"
			"cuda where a GPU is usable, else cpu\n"),
	  TUNECTL_VALUE("plan", "PLAN.json", "the plan to run (docs/kernels.md)\n"),
	  TUNECTL_VALUE("seed", "N", "the seed of the random inputs (default 1)\n"),
	  TUNECTL_VALUE("timeout", "SECONDS",
			"the worker's time limit (default: 10 s, or 20\n"
			"times a pessimistic estimate of one run)\n"),
	  JSON_OPTION},
	 tunectl_run},
	{"sources",
	 "FILE",
	 "write the code of the plan's kernels (the default plan unless\n"
	 "--plan) into the folder of --out without running them: kernel_<n>.c\n"
	 "(--backend cpu), or kernel_<n>.cu and NVRTC's kernel_<n>.ptx and\n"
	 ".cubin for --arch (cuda, the default; no GPU needed: read them with\n"
	 "bench/sass_mix); a library step on cuda as its cuBLASLt call,\n"
	 "kernel_<n>.library.json\n",
	 {TUNECTL_REQUIRED("out", "DIR",
			   "the folder of the kernels' files (made if missing)\n"),
	  TUNECTL_VALUE("plan", "PLAN.json", "the plan (docs/kernels.md)\n"),
	  TUNECTL_VALUE("backend", "cpu|cuda", "the backend (default cuda)\n"),
	  TUNECTL_VALUE("arch", "ARCH",
			"cuda: the GPU architecture (default sm_90)\n")},
	 tunectl_sources},
};

static const tunectl_command *offline_command(size_t i)
{
	size_t n = sizeof(offline_commands) / sizeof(offline_commands[0]);

	return i < n ? &offline_commands[i] : NULL;
}

int main(int argc, char **argv)
{
	static const tunectl_group groups[] = {
		{"commands", offline_command},
		{"commands that talk to a daemon (tuned)", tunectl_service_command},
		{NULL, NULL},
	};

	return tunectl_main(argc, argv, groups);
}
