/*
 * sources.c: tunectl sources FILE --out DIR [--plan PLAN.json]
 *                                  [--backend cpu|cuda] [--arch ARCH]
 *
 * Writes the code of a plan's kernels (the default plan unless --plan)
 * without running them: kernel_<n>.c for the cpu; kernel_<n>.cu for cuda,
 * with NVRTC's kernel_<n>.ptx and kernel_<n>.cubin for ARCH (sm_90
 * unless told); a library step's cuBLASLt call as kernel_<n>.library.json.
 * No GPU is needed, so what a plan becomes on a device can be read on any
 * machine with libnvrtc: its registers and SASS instruction mix with
 * bench/sass_mix.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "kgen.h"
#include "scheduler.h"
#include "tunectl.h"

typedef struct sources_options {
	const char *file, *out, *plan, *backend, *arch;
} sources_options;

/* "o" from the command line; 0, or the exit status of a usage error. */
static int parse_sources_options(const tunectl_command *command,
				 const tunectl_args *args, sources_options *o)
{
	const char *backend = tunectl_option_value(args, "backend");
	const char *arch = tunectl_option_value(args, "arch");

	*o = (sources_options){.file = args->arg,
			       .out = tunectl_option_value(args, "out"),
			       .plan = tunectl_option_value(args, "plan"),
			       .backend = backend ? backend : "cuda",
			       .arch = arch ? arch : "sm_90"};
	if (strcmp(o->backend, "cpu") && strcmp(o->backend, "cuda"))
		return tunectl_usage_error(command, "unknown backend '%s'", o->backend);
	return 0;
}

/* The plan of --plan, or the default one; NULL after saying why. A
 * fetched plan (one with a key) replaces *graph by the canonical form
 * its numbering refers to (kgen_graph_for_plan). */
static kgen_plan *load_plan(const sources_options *o, sched_graph **graph)
{
	kgen_error err = {0};
	json_error_t jerr;
	kgen_plan *plan = NULL;
	sched_graph *canonical = NULL;
	json_t *json;

	if (!o->plan)
		return kgen_plan_default(*graph);
	if (!(json = json_load_file(o->plan, 0, &jerr)))
		return fprintf(stderr, "%s: line %d: %s\n", o->plan, jerr.line, jerr.text),
		       NULL;
	if (kgen_graph_for_plan(*graph, json, &canonical, &err) == KGEN_OK && canonical) {
		sched_graph_free(*graph);
		*graph = canonical;
	}
	if (err.code < 0 || kgen_plan_from_json(*graph, json, &plan, &err) < 0)
		fprintf(stderr, "%s: %s\n", o->plan, err.message);
	kgen_error_release(&err);
	json_decref(json);
	return plan;
}

static int write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	int rc = f && fputs(text, f) >= 0 ? 0 : -1;

	if (f && fclose(f) != 0)
		rc = -1;
	if (rc < 0)
		fprintf(stderr, "%s: cannot write (%s)\n", path, strerror(errno));
	return rc;
}

/* Kernel k's source, and for cuda its PTX and cubin; prints what it wrote. */
static int write_kernel(const sources_options *o, const sched_graph *graph,
			const kgen_plan *plan, int k)
{
	const kgen_kernel *kernel = &plan->kernels[k];
	bool cuda = !strcmp(o->backend, "cuda"), call = cuda && kernel->schedule.library;
	char *source = cuda ? kgen_print_cuda(graph, plan, k) : kgen_print_c(graph, plan, k);
	char path[PATH_MAX], ptx[PATH_MAX], cubin[PATH_MAX];
	kgen_error err = {0};
	int rc;

	snprintf(path, sizeof(path), "%s/kernel_%d.%s", o->out, k,
		 call ? "library.json" : cuda ? "cu" : "c");
	snprintf(ptx, sizeof(ptx), "%s/kernel_%d.ptx", o->out, k);
	snprintf(cubin, sizeof(cubin), "%s/kernel_%d.cubin", o->out, k);
	if (!source)
		return fprintf(stderr, "kernel %d (%s): cannot be printed%s%s\n", k,
			       kernel->name, kernel->schedule.library ? ": " : "",
			       kernel->schedule.library ?
			       kgen_library_unfit(graph, kernel->ops[0], cuda) : ""), -1;
	rc = write_text(path, source);
	if (rc == 0 && call)
		printf("kernel %d %s: %s (a library step: its cuBLASLt call)\n", k,
		       kernel->name, path);
	else if (rc == 0 && cuda && (rc = kgen_nvrtc_write(source, o->arch, ptx, cubin, &err)) < 0)
		fprintf(stderr, "kernel %d (%s): %s\n%s", k, kernel->name, err.message,
			err.log ? err.log : "");
	else if (rc == 0 && cuda)
		printf("kernel %d %s: %s, %s, %s\n", k, kernel->name, path, ptx, cubin);
	else if (rc == 0)
		printf("kernel %d %s: %s\n", k, kernel->name, path);
	kgen_error_release(&err);
	free(source);
	return rc;
}

int tunectl_sources(const tunectl_command *command, const tunectl_args *args)
{
	sources_options o;
	sched_error err = {0};
	sched_graph *graph = NULL;
	kgen_plan *plan = NULL;
	int status = parse_sources_options(command, args, &o);

	if (status != 0)
		return status;
	status = EXIT_INVALID;
	if (mkdir(o.out, 0777) < 0 && errno != EEXIST)
		fprintf(stderr, "%s: cannot make the folder (%s)\n", o.out, strerror(errno));
	else if (sched_graph_read_file(o.file, &graph, &err) < 0)
		fprintf(stderr, "%s: %s\n", o.file, err.message);
	else if ((plan = load_plan(&o, &graph))) {
		status = EXIT_SUCCESS;
		for (int k = 0; k < plan->nkernels; k++)
			if (write_kernel(&o, graph, plan, k) < 0)
				status = EXIT_INVALID;
	}
	kgen_plan_free(plan);
	sched_graph_free(graph);
	return status;
}
