/*
 * exec.c: a fetched plan loaded into a training process and run on its
 * tensors (tuned_exec.h). The plan is built with kgen from the sources
 * the fetch carries, so the process runs the kernels tuned verified.
 * The reference interpreter runs on the same tensors, without a plan,
 * to check a graph against the framework it came from.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kgen.h"
#include "tuned_exec.h"

/* "graph" is the caller's; a fetched plan runs on "canonical", the
 * canonical form of it (kgen_graph_for_plan), each call's tensors put in
 * its order. */
struct tuned_exec {
	sched_graph *graph;
	sched_graph *canonical;
	kgen_backend *backend;
	kgen_plan *plan;
	kgen_program *prog;
};

static int fail(char *why, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (why && size) {
		va_start(ap, fmt);
		vsnprintf(why, size, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* The language the backend's kernels are written in. */
static const char *language_of(const char *backend)
{
	return strcmp(backend, "cuda") ? "c" : "cuda";
}

/* The entry of "sources" for kernel "name", or NULL. */
static json_t *source_named(json_t *sources, const char *name)
{
	json_t *s;
	size_t i;

	json_array_foreach(sources, i, s)
		if (!strcmp(json_string_value(json_object_get(s, "kernel")) ?: "", name))
			return s;
	return NULL;
}

/* The fetched source of each kernel of the plan, by name, into
 * "sources"; all NULL when the fetch has none (kernels are printed
 * again). -1 when one is missing or of another backend's language. */
static int fetched_sources(json_t *fetched, const kgen_plan *plan, const char *backend,
			   const char **sources, char *why, size_t size)
{
	json_t *list = json_object_get(fetched, "sources");

	for (int k = 0; list && k < plan->nkernels; k++) {
		json_t *s = source_named(list, plan->kernels[k].name);
		const char *language = json_string_value(json_object_get(s, "language"));

		if (!s)
			return fail(why, size, "the fetch has no source for kernel '%s'",
				    plan->kernels[k].name);
		if (!language || strcmp(language, language_of(backend)))
			return fail(why, size, "kernel '%s' is %s, not for backend %s: "
				    "load the plan on the backend it was tuned for",
				    plan->kernels[k].name, language ? language : "of no language",
				    backend);
		sources[k] = json_string_value(json_object_get(s, "source"));
	}
	return 0;
}

/* The plan and its kernels' sources from "fetched", then built. */
static int build(tuned_exec *e, json_t *fetched, const char *backend, char *why,
		 size_t size)
{
	json_t *plan = json_object_get(fetched, "plan") ?: fetched;
	const sched_graph *graph;
	kgen_error err = {0};
	const char **sources = NULL;
	int rc = -1;

	if (kgen_graph_for_plan(e->graph, plan, &e->canonical, &err) < 0) {
		fail(why, size, "%s", err.message);
		kgen_error_release(&err);
		return -1;
	}
	graph = e->canonical ?: e->graph;
	if (kgen_plan_from_json(graph, plan, &e->plan, &err) < 0)
		fail(why, size, "the plan does not fit the graph: %s", err.message);
	else if (!(sources = calloc(e->plan->nkernels, sizeof(char *))))
		fail(why, size, "out of memory");
	else if (fetched_sources(fetched, e->plan, backend, sources, why, size) == 0) {
		if (kgen_backend_open(backend, &e->backend, &err) < 0 ||
		    kgen_program_build(e->backend, graph, e->plan, sources, &e->prog,
				       &err) < 0)
			fail(why, size, "%s", err.message);
		else
			rc = 0;
	}
	free(sources);
	kgen_error_release(&err);
	return rc;
}

int tuned_exec_load(const char *graph, const char *fetched, const char *backend,
		    tuned_exec **out, char *why, size_t size)
{
	tuned_exec *e = calloc(1, sizeof(*e));
	json_error_t jerr;
	json_t *json = fetched ? json_loads(fetched, 0, &jerr) : NULL;
	sched_error serr = {0};
	int rc = -1;

	*out = NULL;
	if (!e)
		fail(why, size, "out of memory");
	else if (!json)
		fail(why, size, "the fetched plan is not JSON: %s",
		     fetched ? jerr.text : "none given");
	else if (!backend || (strcmp(backend, "cpu") && strcmp(backend, "cuda")))
		fail(why, size, "unknown backend '%s': cpu or cuda", backend ? backend : "");
	else if (sched_graph_read_string(graph, &e->graph, &serr) < 0)
		fail(why, size, "the graph: %s", serr.message);
	else
		rc = build(e, json, backend, why, size);
	json_decref(json);
	if (rc < 0)
		tuned_exec_free(e);
	else
		*out = e;
	return rc;
}

int tuned_exec_tensor_count(const tuned_exec *e)
{
	return sched_graph_tensor_count(e->graph);
}

_Static_assert(TUNED_EXEC_MAX_RANK == SCHED_MAX_RANK,
	       "tuned_exec_tensor holds the scheduler's largest rank");

static const char *role_name(enum sched_role role)
{
	return role == SCHED_INPUT ? "input" : role == SCHED_OUTPUT ? "output" : "intermediate";
}

int tuned_exec_tensor_info(const tuned_exec *e, int t, tuned_exec_tensor *out)
{
	const int64_t *shape;

	if (t < 0 || t >= sched_graph_tensor_count(e->graph))
		return -1;
	shape = sched_tensor_shape(e->graph, t);
	*out = (tuned_exec_tensor){
		.name = sched_tensor_name(e->graph, t),
		.dtype = sched_dtype_name(sched_tensor_dtype(e->graph, t)),
		.role = role_name(sched_tensor_role(e->graph, t)),
		.rank = sched_tensor_rank(e->graph, t),
	};
	memcpy(out->shape, shape, out->rank * sizeof(*shape));
	return 0;
}

/* The caller's tensors (in its graph's order) in the plan's numbering,
 * into "args" (a call's own, so that calls on two streams do not mix). */
static void *const *in_plan_order(const tuned_exec *e, void *const *tensors, void **args)
{
	if (!e->canonical)
		return tensors;
	for (int t = 0; t < sched_graph_tensor_count(e->graph); t++)
		args[sched_tensor_canonical_number(e->graph, t)] = tensors[t];
	return args;
}

/* -1, saying which, when an input or output of "g" has no pointer. */
static int missing_pointer(const sched_graph *g, void *const *tensors, char *why,
			   size_t size)
{
	for (int t = 0; t < sched_graph_tensor_count(g); t++)
		if (!tensors[t] && sched_tensor_role(g, t) != SCHED_INTERMEDIATE)
			return fail(why, size, "tensor %d ('%s'), an %s, has no pointer", t,
				    sched_tensor_name(g, t),
				    sched_tensor_role(g, t) == SCHED_INPUT ? "input" : "output");
	return 0;
}

int tuned_exec_run(tuned_exec *e, void *stream, void *const *tensors, char *why,
		   size_t size)
{
	kgen_error err = {0};
	void **args;
	int rc = 0;

	if (missing_pointer(e->graph, tensors, why, size) < 0)
		return -1;
	if (!(args = calloc(sched_graph_tensor_count(e->graph), sizeof(void *))))
		return fail(why, size, "out of memory");
	if (kgen_program_run_on(e->prog, stream, in_plan_order(e, tensors, args), &err) < 0)
		rc = fail(why, size, "%s", err.message);
	kgen_error_release(&err);
	free(args);
	return rc;
}

/* Copies tensor "t" between the caller's buffer and the interpreter's
 * doubles, in the direction "to_values". */
static void copy_tensor(const sched_graph *g, int t, void *host, double *values,
			bool to_values)
{
	for (int64_t i = 0; i < sched_tensor_size(g, t); i++)
		if (to_values)
			values[i] = kgen_host_load(host, sched_tensor_dtype(g, t), i);
		else
			kgen_host_store(host, sched_tensor_dtype(g, t), i, values[i]);
}

/* Runs the interpreter on the caller's tensors: inputs read, the others
 * written back where the caller gave a buffer. */
static int interpret_on(const sched_graph *g, void *const *tensors, char *why,
			size_t size)
{
	double **values = sched_values_new(g);
	int n = sched_graph_tensor_count(g);

	if (!values)
		return fail(why, size, "out of memory");
	for (int t = 0; t < n; t++)
		if (sched_tensor_role(g, t) == SCHED_INPUT)
			copy_tensor(g, t, tensors[t], values[t], true);
	if (sched_interp_run(g, values) < 0) {
		sched_values_free(g, values);
		return fail(why, size, "out of memory in the interpreter");
	}
	for (int t = 0; t < n; t++)
		if (sched_tensor_role(g, t) != SCHED_INPUT && tensors[t])
			copy_tensor(g, t, tensors[t], values[t], false);
	sched_values_free(g, values);
	return 0;
}

int tuned_exec_interpret(const char *graph, void *const *tensors, char *why,
			 size_t size)
{
	sched_graph *g = NULL;
	sched_error serr = {0};
	int rc;

	if (sched_graph_read_string(graph, &g, &serr) < 0)
		return fail(why, size, "the graph: %s", serr.message);
	rc = missing_pointer(g, tensors, why, size);
	if (rc == 0)
		rc = interpret_on(g, tensors, why, size);
	sched_graph_free(g);
	return rc;
}

void tuned_exec_free(tuned_exec *e)
{
	if (!e)
		return;
	kgen_program_free(e->prog);
	kgen_plan_free(e->plan);
	kgen_backend_close(e->backend);
	sched_graph_free(e->canonical);
	sched_graph_free(e->graph);
	free(e);
}
