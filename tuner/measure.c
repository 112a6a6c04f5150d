/*
 * measure.c: the measurement protocol, as a worker process runs it.
 *
 * One request: a graph, a plan (or the default one), a backend and a seed.
 * The plan is compiled, verified against the reference interpreter on
 * seeded random inputs, and only then timed. The answer says which of
 * these steps stopped it, if one did.
 */
#include <stdlib.h>
#include <string.h>

#include "kgen.h"
#include "tuner.h"

static json_t *answer(const char *kind, const char *error)
{
	json_t *obj = json_pack("{s:s, s:b}", "kind", kind, "verified", 0);

	if (error)
		json_object_set_new(obj, "error", json_string(error));
	return obj;
}

static json_t *failure(const char *kind, const kgen_error *err)
{
	json_t *obj = answer(kind, err->message);

	if (err->log)
		json_object_set_new(obj, "log", json_string(err->log));
	return obj;
}

static kgen_timing timing_of(const json_t *request)
{
	json_t *t = json_object_get(request, "timing");
	kgen_timing timing = {.warmup = 1, .min_runs = 3, .max_runs = 50,
			      .budget_ms = 500};

	if (json_is_integer(json_object_get(t, "warmup")))
		timing.warmup = (int)json_integer_value(json_object_get(t, "warmup"));
	if (json_is_integer(json_object_get(t, "min_runs")))
		timing.min_runs = (int)json_integer_value(json_object_get(t, "min_runs"));
	if (json_is_integer(json_object_get(t, "max_runs")))
		timing.max_runs = (int)json_integer_value(json_object_get(t, "max_runs"));
	if (json_is_number(json_object_get(t, "budget_ms")))
		timing.budget_ms = json_number_value(json_object_get(t, "budget_ms"));
	if (timing.min_runs < 1)
		timing.min_runs = 1;
	if (timing.max_runs < timing.min_runs)
		timing.max_runs = timing.min_runs;
	return timing;
}

static json_t *checks_json(const sched_graph *graph, const kgen_check *checks, int n)
{
	json_t *list = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(list, json_pack("{s:s, s:f, s:f, s:I, s:b, s:s}",
			"tensor", sched_tensor_name(graph, checks[i].tensor),
			"rel_error", checks[i].rel_error, "tolerance", checks[i].tolerance,
			"checked", (json_int_t)checks[i].checked, "passed", checks[i].passed,
			"problem", checks[i].problem));
	return list;
}

static json_t *times_json(const kgen_plan *plan, const kgen_time *times)
{
	json_t *list = json_array();

	for (int k = 0; k < plan->nkernels; k++)
		json_array_append_new(list, json_pack("{s:s, s:f, s:f, s:i}",
			"name", plan->kernels[k].name, "median_ms", times[k].median_ms,
			"spread_ms", times[k].spread_ms, "runs", times[k].runs));
	return list;
}

static int count_outputs(const sched_graph *graph)
{
	int n = 0;

	for (int t = 0; t < sched_graph_tensor_count(graph); t++)
		n += sched_tensor_role(graph, t) == SCHED_OUTPUT;
	return n;
}

#define CUT 1

/* Times the whole plan once first: with a "cutoff_ms" in the request and a
 * run slower than it, that run is the answer (CUT) and the candidate, no
 * contender, costs no more; otherwise each kernel and the whole plan. */
static int time_unless_slow(kgen_program *prog, const json_t *request,
			    const kgen_timing *timing, kgen_time *times,
			    kgen_time *total, kgen_error *err)
{
	double cutoff = json_number_value(json_object_get(request, "cutoff_ms"));
	kgen_timing once = {.warmup = 0, .min_runs = 1, .max_runs = 1};
	int rc;

	if (cutoff > 0) {
		if ((rc = kgen_program_time(prog, &once, NULL, total, err)) < 0)
			return rc;
		if (total->median_ms > cutoff)
			return CUT;
	}
	return kgen_program_time(prog, timing, times, total, err);
}

/* Verifies, then times; the answer's kind says how far it got. */
static json_t *verify_and_time(kgen_program *prog, const sched_graph *graph,
			       const kgen_plan *plan, const json_t *request)
{
	kgen_check *checks = calloc(count_outputs(graph) + 1, sizeof(kgen_check));
	kgen_time *times = calloc(plan->nkernels, sizeof(kgen_time)), total;
	kgen_timing timing = timing_of(request);
	unsigned seed = (unsigned)json_integer_value(json_object_get(request, "seed"));
	kgen_error err = {0};
	json_t *obj;
	int rc;

	if (!checks || !times)
		obj = answer("error", "out of memory");
	else if ((rc = kgen_verify(prog, seed, checks, &err)) < 0)
		obj = failure(rc == KGEN_EWRONG ? "wrong" : "error", &err);
	else if ((rc = time_unless_slow(prog, request, &timing, times, &total, &err)) < 0)
		obj = failure("error", &err);
	else
		obj = json_pack("{s:s, s:b, s:o, s:f, s:f, s:i, s:b}", "kind", "ok",
				"verified", 1, "kernels",
				rc == CUT ? json_array() : times_json(plan, times),
				"total_ms", total.median_ms, "total_spread_ms",
				total.spread_ms, "total_runs", total.runs, "cut", rc == CUT);
	if (checks)
		json_object_set_new(obj, "checks",
				    checks_json(graph, checks, count_outputs(graph)));
	kgen_error_release(&err);
	free(checks);
	free(times);
	return obj;
}

/* sources[k]: the request's replacement source of kernel k, or NULL. */
static const char **request_sources(const json_t *request, int nkernels)
{
	json_t *list = json_object_get(request, "sources");
	const char **sources;

	if (!json_is_array(list))
		return NULL;
	if (!(sources = calloc(nkernels, sizeof(char *))))
		return NULL;
	for (int k = 0; k < nkernels && k < (int)json_array_size(list); k++)
		sources[k] = json_string_value(json_array_get(list, k));
	return sources;
}

/* Each kernel's source as compiled: {kernel, language, source}. */
static json_t *sources_json(kgen_backend *backend, const sched_graph *graph,
			    const kgen_plan *plan, const char **given)
{
	bool cuda = !strcmp(kgen_backend_name(backend), "cuda");
	json_t *list = json_array();

	for (int k = 0; k < plan->nkernels; k++) {
		char *text = given && given[k] ? NULL :
			     cuda ? kgen_print_cuda(graph, plan, k) :
				    kgen_print_c(graph, plan, k);
		const char *source = text ? text : given && given[k] ? given[k] : "";

		json_array_append_new(list, json_pack("{s:s, s:s, s:s}",
			"kernel", plan->kernels[k].name, "language", cuda ? "cuda" : "c",
			"source", source));
		free(text);
	}
	return list;
}

/* How to launch each kernel: {kernel, grid, block, shared_bytes, args},
 * args being every tensor in graph order (docs/protocol.md, fetch). */
static json_t *launch_json(kgen_backend *backend, const sched_graph *graph,
			   const kgen_plan *plan)
{
	bool cuda = !strcmp(kgen_backend_name(backend), "cuda");
	json_t *list = json_array(), *args = json_array();

	for (int t = 0; t < sched_graph_tensor_count(graph); t++)
		json_array_append_new(args, json_string(sched_tensor_name(graph, t)));
	for (int k = 0; k < plan->nkernels; k++) {
		unsigned blocks = 1, threads = 1;

		if (cuda)
			kgen_cuda_launch_shape(graph, &plan->kernels[k], &blocks, &threads);
		json_array_append_new(list, json_pack("{s:s, s:[i,i,i], s:[i,i,i], s:i, s:O}",
			"kernel", plan->kernels[k].name, "grid", blocks, 1, 1,
			"block", threads, 1, 1, "shared_bytes", 0, "args", args));
	}
	json_decref(args);
	return list;
}

static json_t *run_plan(kgen_backend *backend, const sched_graph *graph,
			const kgen_plan *plan, const json_t *request)
{
	const char **sources = request_sources(request, plan->nkernels);
	kgen_program *prog = NULL;
	kgen_error err = {0};
	json_t *obj;
	int rc = kgen_program_build(backend, graph, plan, sources, &prog, &err);

	if (rc < 0)
		obj = failure(rc == KGEN_ECOMPILE ? "compile_error" : "error", &err);
	else
		obj = verify_and_time(prog, graph, plan, request);
	if (rc == 0) {
		json_object_set_new(obj, "sources", sources_json(backend, graph, plan,
								 sources));
		json_object_set_new(obj, "launch", launch_json(backend, graph, plan));
	}
	json_object_set_new(obj, "plan", kgen_plan_to_json(graph, plan));
	kgen_program_free(prog);
	kgen_error_release(&err);
	free(sources);
	return obj;
}

static json_t *read_plan(const sched_graph *graph, const json_t *request,
			 kgen_plan **plan)
{
	json_t *given = json_object_get(request, "plan");
	kgen_error err = {0};

	if (!given || json_is_null(given)) {
		*plan = kgen_plan_default(graph);
		return *plan ? NULL : answer("error", "out of memory");
	}
	if (kgen_plan_from_json(graph, given, plan, &err) < 0)
		return failure("invalid_plan", &err);
	return NULL;
}

json_t *tuner_measure(kgen_backend *backend, const json_t *request)
{
	const char *text = json_string_value(json_object_get(request, "graph"));
	sched_graph *graph = NULL;
	kgen_plan *plan = NULL;
	sched_error err = {0};
	json_t *obj;

	if (!text)
		obj = answer("invalid", "the request has no \"graph\" text");
	else if (sched_graph_read_string(text, &graph, &err) < 0)
		obj = answer("invalid", err.message);
	else if (!(obj = read_plan(graph, request, &plan)))
		obj = run_plan(backend, graph, plan, request);
	json_object_set_new(obj, "backend", json_string(kgen_backend_name(backend)));
	json_object_set_new(obj, "device", json_string(kgen_backend_description(backend)));
	json_object_set_new(obj, "seed", json_integer(json_integer_value(
				    json_object_get(request, "seed"))));
	if (graph)
		json_object_set_new(obj, "key", json_string(sched_graph_key(graph)));
	kgen_plan_free(plan);
	sched_graph_free(graph);
	return obj;
}

double tuner_time_limit(const sched_graph *graph, const char *backend)
{
	json_t *explain = sched_graph_explain(graph);
	double flops = (double)json_integer_value(json_object_get(explain, "flops"));
	double rate = strcmp(backend, "cuda") ? 2e8 : 1e12;
	double limit = 20 * flops / rate + 2.0 * sched_graph_op_count(graph);

	json_decref(explain);
	return limit > 10 ? limit : 10;
}
