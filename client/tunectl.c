/*
 * tunectl: the command-line client of tuned.
 *
 *   tunectl validate FILE [--json]   check a graph; exit 0, or 1 with the error
 *   tunectl explain FILE [--json] [--dot OUT]
 *                                    domains, accesses, ranges, FLOPs, bytes,
 *                                    key; dependences, fused groups and their
 *                                    plan (explain_fusion.c)
 *   tunectl run FILE [options]       compile, verify and time a plan (run.c)
 *   tunectl sources FILE --out DIR   a plan's code, and its PTX and cubin for
 *                                    cuda, without a GPU (sources.c)
 *   tunectl submit|status|list|wait|cancel|watch|fetch|stats|cache ...
 *                                    talk to a daemon (service.c)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "scheduler.h"
#include "tunectl.h"

static const char usage[] =
	"usage: tunectl COMMAND [FILE|JOB|KEY] [options]\n"
	"\n"
	"commands:\n"
	"  validate FILE   check FILE (graph.json v1); print its key, or the\n"
	"                  first error (op index and column) and exit 1\n"
	"  explain FILE    per op: iteration domain, write and read accesses as\n"
	"                  isl maps, reduction ranges, FLOPs and bytes; the key;\n"
	"                  then the fusion planner's view: every dependence (the\n"
	"                  consumer reads the producer's target) as an isl map with\n"
	"                  its width (thread, block, or global and why) for the\n"
	"                  pair fused under the consumer's default tile and 256\n"
	"                  threads; the groups a greedy walk over the dependences\n"
	"                  fuses (each legal under its root's default tile or that\n"
	"                  tile widened to the whole extent after the first dim),\n"
	"                  with tiles, blocks and each stage's store, width and\n"
	"                  barrier; and their plan, for run --plan\n"
	"  run FILE        compile the plan (the default one unless --plan), check\n"
	"                  every output against the reference interpreter on\n"
	"                  random inputs, and time each kernel and the whole plan,\n"
	"                  in a tuned-worker process; exit 1 unless all verified\n"
	"  sources FILE    write the code of the plan's kernels (the default plan\n"
	"                  unless --plan) into --out DIR without running them:\n"
	"                  kernel_<n>.c (--backend cpu), or kernel_<n>.cu and\n"
	"                  NVRTC's kernel_<n>.ptx and .cubin for --arch (cuda,\n"
	"                  the default; no GPU needed: read them with\n"
	"                  bench/sass_mix)\n"
	"\n"
	"commands that talk to a daemon (tuned):\n"
	"  submit FILE     queue FILE for tuning; print the job id and its key;\n"
	"                  with --wait, follow it and exit 1 unless it ends done\n"
	"  status JOB      the job's state, progress, best time and version\n"
	"  list            every job the daemon knows\n"
	"  wait JOB        follow the job as submit --wait does\n"
	"  cancel JOB      cancel the job\n"
	"  watch KEY|JOB   print the events of the key (of the job's key) as\n"
	"                  they come: generations, versions, job states; until\n"
	"                  interrupted, or with --until-done until the job ends\n"
	"  fetch KEY|JOB   the best result so far: key, version, median_ms and\n"
	"                  device; with --out DIR, write plan.json (for run\n"
	"                  --plan), kernel_<n>.c or .cu, launch.json and binaries\n"
	"  stats           the daemon's counters\n"
	"  cache ls        every cached key, its latest version and time\n"
	"  cache show KEY  one key's graph, versions and trials\n"
	"  cache prune     remove old entries (--max-age, --max-bytes)\n"
	"\n"
	"options:\n"
	"  --json               print one JSON object on stdout instead of text\n"
	"                       (watch: one JSON line per event; explain: adds the\n"
	"                       keys dependences, merges, groups and plan)\n"
	"  --dot OUT            explain: also write the ops, their dependences\n"
	"                       (coloured by width: thread green, block orange,\n"
	"                       global red) and the fused groups (clusters) as a\n"
	"                       Graphviz file OUT\n"
	"  --arch ARCH          sources: the GPU architecture (default sm_90)\n"
	"  --backend B          run: cpu, cuda, emulated (the CUDA run on the cpu,\n"
	"                       slowly: docs/kernels.md) or auto (default: auto,\n"
	"                       cuda where a GPU is usable); sources: cpu or cuda\n"
	"                       (default)\n"
	"  --plan PLAN.json     run, sources: the plan (docs/kernels.md)\n"
	"  --seed N             run: the seed of the random inputs (default 1)\n"
	"  --timeout SECONDS    run: the worker's time limit (default: 10 s, or\n"
	"                       20 times a pessimistic estimate of one run)\n"
	"  --socket PATH        daemon commands: the daemon's socket (default\n"
	"                       $TUNED_SOCKET, else /run/tuned/gpu0.sock for root,\n"
	"                       $XDG_RUNTIME_DIR/tuned/gpu0.sock otherwise)\n"
	"  --wait               submit: follow the job until it ends\n"
	"  --budget S           submit: tuning time (s; or with m, h, d)\n"
	"  --trials N           submit: at most N trials (1 to 1000000)\n"
	"  --priority N         submit: -1000 to 1000, higher first (default 0)\n"
	"  --until-done         watch JOB: exit when the job ends (1 if it failed)\n"
	"  --out DIR            fetch: write the result's files into DIR;\n"
	"                       sources: the folder of the kernels' files\n"
	"  --min-version N      fetch: only a version at least N\n"
	"  --timeout MS         fetch: wait up to MS for one (default: answer at\n"
	"                       once)\n"
	"  --max-age S          cache prune: remove what is older (s, m, h, d)\n"
	"  --max-bytes N        cache prune: shrink to N bytes (or K, M, G, T)\n"
	"  -h, --help           show this help\n"
	"\n"
	"exit status: 0 valid (and verified, or the daemon command succeeded),\n"
	"1 invalid graph, failed run, failed command or no daemon, 2 usage error\n";

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

char *tunectl_read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *text = NULL;
	size_t len = 0;

	if (!f)
		return NULL;
	if (getdelim(&text, &len, '\0', f) < 0) {
		free(text);
		text = NULL;
	}
	fclose(f);
	return text;
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

static int run_command(const char *command, const char *path, bool as_json,
		       const char *dot)
{
	sched_error err = {0};
	sched_graph *graph;
	int status;

	if (sched_graph_read_file(path, &graph, &err) < 0)
		return report_error(path, &err, as_json);
	if (!strcmp(command, "validate"))
		status = validate(path, graph, as_json);
	else
		status = explain(graph, as_json, dot);
	sched_graph_free(graph);
	return status;
}

int main(int argc, char **argv)
{
	const char *command = NULL, *path = NULL, *dot = NULL;
	bool as_json = false;

	if (argc > 1 && !strcmp(argv[1], "run"))
		return tunectl_run(argc - 2, argv + 2);
	if (argc > 1 && !strcmp(argv[1], "sources"))
		return tunectl_sources(argc - 2, argv + 2);
	if (argc > 1 && tunectl_is_service(argv[1]))
		return tunectl_service(argc - 1, argv + 1);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return fputs(usage, stdout), EXIT_SUCCESS;
		if (!strcmp(argv[i], "--dot")) {
			if (++i == argc || !argv[i][0])
				return fprintf(stderr, "tunectl: --dot needs a file\n"),
				       EXIT_USAGE;
			dot = argv[i];
			continue;
		}
		if (!strcmp(argv[i], "--json"))
			as_json = true;
		else if (argv[i][0] == '-' && argv[i][1])
			return fprintf(stderr, "tunectl: unknown option '%s'\n%s",
				       argv[i], usage), EXIT_USAGE;
		else if (!command)
			command = argv[i];
		else if (!path)
			path = argv[i];
		else
			return fprintf(stderr, "tunectl: unexpected argument '%s'\n",
				       argv[i]), EXIT_USAGE;
	}
	if (!command || (strcmp(command, "validate") && strcmp(command, "explain")))
		return fprintf(stderr, "tunectl: %s%s%s\n%s",
			       command ? "unknown command '" : "no command given",
			       command ? command : "", command ? "'" : "", usage),
		       EXIT_USAGE;
	if (!path)
		return fprintf(stderr, "tunectl: '%s' needs a FILE\n", command),
		       EXIT_USAGE;
	if (dot && strcmp(command, "explain"))
		return fprintf(stderr, "tunectl: --dot is an option of explain\n"),
		       EXIT_USAGE;
	return run_command(command, path, as_json, dot);
}
