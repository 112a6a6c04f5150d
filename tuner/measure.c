/*
 * measure.c: the requests a worker process serves (docs/kernels.md).
 *
 * measure: a graph, a plan (or the default one), a backend and a seed.
 * The plan is compiled, verified against the reference interpreter on
 * seeded random inputs, and only then timed. The answer says which of
 * these steps stopped it, if one did.
 *
 * compile: the plan's kernels compiled into the shared folder only, for a
 * measuring worker to load (the pipelined tuner's compile workers).
 * probe: the device's peaks, for the cost model.
 * retime: several plans timed side by side, round after round, so that
 * they are compared under the same conditions.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kgen.h"
#include "tuner.h"

/* {"kind": kind, "error": error (when not NULL)}, with the log of "err"
 * (when given and there is one). */
static json_t *outcome(const char *kind, const char *error, const kgen_error *err)
{
	json_t *obj = json_pack("{s:s}", "kind", kind);

	if (error)
		json_object_set_new(obj, "error", json_string(error));
	if (err && err->log)
		json_object_set_new(obj, "log", json_string(err->log));
	return obj;
}

/* A measure answer that stops short of verification. */
static json_t *answer(const char *kind, const char *error)
{
	json_t *obj = outcome(kind, error, NULL);

	json_object_set_new(obj, "verified", json_false());
	return obj;
}

static json_t *failure(const char *kind, const kgen_error *err)
{
	json_t *obj = outcome(kind, err->message, err);

	json_object_set_new(obj, "verified", json_false());
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

/* The plan "given" for "graph" (null or absent: the default one); or the
 * answer that refuses it. */
static json_t *read_plan(const sched_graph *graph, json_t *given, kgen_plan **plan)
{
	kgen_error err = {0};

	*plan = NULL;
	if (!given || json_is_null(given)) {
		*plan = kgen_plan_default(graph);
		return *plan ? NULL : outcome("error", "out of memory", NULL);
	}
	if (kgen_plan_from_json(graph, given, plan, &err) < 0)
		return outcome("invalid_plan", err.message, NULL);
	return NULL;
}

#define CUT 1

/* A trial's times: each kernel's, the whole plan's, and with a plan to
 * time it beside, that plan's and the median ratio of the two. */
typedef struct trial_times {
	kgen_time *kernels, total, beside;
	double ratio;
} trial_times;

/* Each kernel, then the whole plan: alone, or in turns with "beside"
 * when there is one. */
static int time_trial(kgen_program *prog, kgen_program *beside,
		      const kgen_timing *timing, trial_times *t, kgen_error *err)
{
	int rc;

	if (!beside)
		return kgen_program_time(prog, timing, t->kernels, &t->total, err);
	if ((rc = kgen_program_time(prog, timing, t->kernels, NULL, err)) < 0)
		return rc;
	return kgen_program_time_beside(prog, beside, timing, &t->total, &t->beside,
					&t->ratio, err);
}

/* Times the whole plan once first (and "beside" once after it): with a
 * "cutoff_ms" in the request and a run slower than it (with "beside" and
 * a "cutoff_ratio", a run slower than this many times the run of
 * "beside"), that run is the answer (CUT) and the candidate, no
 * contender, costs no more; otherwise time_trial. */
static int time_unless_slow(kgen_program *prog, kgen_program *beside,
			    const json_t *request, const kgen_timing *timing,
			    trial_times *t, kgen_error *err)
{
	double cutoff = json_number_value(json_object_get(request, "cutoff_ms"));
	double cutoff_ratio = json_number_value(
		json_object_get(request, "cutoff_ratio"));
	kgen_timing once = {.warmup = 0, .min_runs = 1, .max_runs = 1};
	int rc;

	if (beside && cutoff_ratio > 0) {
		if ((rc = kgen_program_time_beside(prog, beside, &once, &t->total,
						   &t->beside, &t->ratio, err)) < 0)
			return rc;
		if (t->ratio > cutoff_ratio)
			return CUT;
	} else if (cutoff > 0) {
		if ((rc = kgen_program_time(prog, &once, NULL, &t->total, err)) < 0)
			return rc;
		if (t->total.median_ms > cutoff)
			return CUT;
	}
	return time_trial(prog, beside, timing, t, err);
}

/* Reads, builds and runs once on the seed's inputs (verifying: the inputs
 * are set and the kernels warm) plan "given" into *plan and *prog; on
 * failure both NULL and "why" says why. */
static void build_verified(kgen_backend *backend, const sched_graph *graph,
			   json_t *given, unsigned seed, kgen_plan **plan,
			   kgen_program **prog, char *why, size_t len)
{
	kgen_check *checks = calloc(sched_graph_tensor_count(graph),
				    sizeof(kgen_check));
	json_t *refusal = read_plan(graph, given, plan);
	kgen_error err = {0};

	*prog = NULL;
	why[0] = 0;
	if (refusal)
		snprintf(why, len, "%s",
			 json_string_value(json_object_get(refusal, "error")));
	else if (!checks)
		snprintf(why, len, "out of memory");
	else if (kgen_program_build(backend, graph, *plan, NULL, prog, &err) < 0 ||
		 kgen_verify(*prog, seed, checks, &err) < 0)
		snprintf(why, len, "%s", err.message);
	if (why[0]) {
		kgen_program_free(*prog);
		kgen_plan_free(*plan);
		*prog = NULL;
		*plan = NULL;
	}
	json_decref(refusal);
	kgen_error_release(&err);
	free(checks);
}

/* The program of the request's "beside" plan: the one kept with the
 * graph, else built, verified and kept; NULL when there is no such plan
 * or it cannot be built ("why" then says why). */
static kgen_program *beside_program(kgen_backend *backend, tuner_graphs *graphs,
				    const sched_graph *graph, const json_t *request,
				    char *why, size_t len)
{
	json_t *given = json_object_get(request, "beside");
	char *text = given ? json_dumps(given, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	kgen_program *prog = NULL;
	kgen_plan *plan = NULL;

	why[0] = 0;
	if (given && !text)
		snprintf(why, len, "out of memory");
	if (text && !(prog = tuner_graphs_beside(graphs, graph, text))) {
		build_verified(backend, graph, given,
			       (unsigned)json_integer_value(
				       json_object_get(request, "seed")),
			       &plan, &prog, why, len);
		if (prog)
			tuner_graphs_keep_beside(graphs, graph, text, plan, prog);
		if (prog && !(prog = tuner_graphs_beside(graphs, graph, text)))
			snprintf(why, len, "out of memory");
	}
	free(text);
	return prog;
}

/* The answer's "beside": {"median_ms", "spread_ms", "runs", "ratio"}; or
 * "beside_error", why the plan could not be timed beside. */
static void add_beside(json_t *obj, const trial_times *t, const char *why)
{
	if (why[0])
		json_object_set_new(obj, "beside_error", json_string(why));
	else if (t->beside.runs)
		json_object_set_new(obj, "beside",
				    json_pack("{s:f, s:f, s:i, s:f}", "median_ms",
					      t->beside.median_ms, "spread_ms",
					      t->beside.spread_ms, "runs",
					      t->beside.runs, "ratio", t->ratio));
}

/* Times a verified candidate (beside the request's "beside" plan, when
 * it has one and it can be built): the answer. */
static json_t *time_verified(kgen_backend *backend, tuner_graphs *graphs,
			     kgen_program *prog, const sched_graph *graph,
			     const kgen_plan *plan, const json_t *request,
			     kgen_time *kernels, kgen_error *err)
{
	trial_times t = {.kernels = kernels};
	kgen_timing timing = timing_of(request);
	char why[512];
	kgen_program *beside = beside_program(backend, graphs, graph, request, why,
					      sizeof(why));
	int rc = time_unless_slow(prog, beside, request, &timing, &t, err);
	json_t *obj;

	if (rc < 0)
		return failure("error", err);
	obj = json_pack("{s:s, s:b, s:o, s:f, s:f, s:i, s:b}", "kind", "ok", "verified",
			1, "kernels",
			rc == CUT ? json_array() : times_json(plan, t.kernels),
			"total_ms", t.total.median_ms, "total_spread_ms",
			t.total.spread_ms, "total_runs", t.total.runs, "cut",
			rc == CUT);
	add_beside(obj, &t, why);
	return obj;
}

/* Verifies, then times; the answer's kind says how far it got. */
static json_t *verify_and_time(kgen_backend *backend, tuner_graphs *graphs,
			       kgen_program *prog, const sched_graph *graph,
			       const kgen_plan *plan, const json_t *request)
{
	kgen_check *checks = calloc(count_outputs(graph) + 1, sizeof(kgen_check));
	kgen_time *kernels = calloc(plan->nkernels, sizeof(kgen_time));
	unsigned seed = (unsigned)json_integer_value(json_object_get(request, "seed"));
	kgen_error err = {0};
	json_t *obj;
	int rc;

	if (!checks || !kernels)
		obj = answer("error", "out of memory");
	else if ((rc = kgen_verify(prog, seed, checks, &err)) < 0)
		obj = failure(rc == KGEN_EWRONG ? "wrong" : "error", &err);
	else
		obj = time_verified(backend, graphs, prog, graph, plan, request,
				    kernels, &err);
	if (checks)
		json_object_set_new(obj, "checks",
				    checks_json(graph, checks, count_outputs(graph)));
	kgen_error_release(&err);
	free(checks);
	free(kernels);
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

/* Each kernel's source as compiled: {kernel, language, source}, and
 * "library": true for a library step (its source makes or records a
 * library call: docs/design/kernels.md, "Library steps"). */
static json_t *printed_sources(const sched_graph *graph, const kgen_plan *plan,
			       bool cuda, const char **given)
{
	json_t *list = json_array();

	for (int k = 0; k < plan->nkernels; k++) {
		char *text = given && given[k] ? NULL :
			     cuda ? kgen_print_cuda(graph, plan, k) :
				    kgen_print_c(graph, plan, k);
		const char *source = text ? text : given && given[k] ? given[k] : "";

		json_t *entry = json_pack("{s:s, s:s, s:s}", "kernel", plan->kernels[k].name,
					  "language", cuda ? "cuda" : "c", "source", source);

		if (plan->kernels[k].schedule.library)
			json_object_set_new(entry, "library", json_true());
		json_array_append_new(list, entry);
		free(text);
	}
	return list;
}

static json_t *sources_json(kgen_backend *backend, const sched_graph *graph,
			    const kgen_plan *plan, const char **given)
{
	return printed_sources(graph, plan, !strcmp(kgen_backend_name(backend), "cuda"),
			       given);
}

json_t *tuner_plan_sources(const sched_graph *graph, json_t *plan_json, int cuda)
{
	kgen_plan *plan = NULL;
	kgen_error err = {0};
	json_t *sources = NULL;

	if (kgen_plan_from_json(graph, plan_json, &plan, &err) == 0)
		sources = printed_sources(graph, plan, cuda, NULL);
	kgen_plan_free(plan);
	kgen_error_release(&err);
	return sources;
}

/* How to launch each kernel: {kernel, grid, block, shared_bytes, args,
 * scratch_bytes}, args being every tensor in graph order, then scratch
 * memory of scratch_bytes when not 0 (docs/protocol.md, fetch). */
static json_t *launch_json(kgen_backend *backend, const sched_graph *graph,
			   const kgen_plan *plan)
{
	bool cuda = !strcmp(kgen_backend_name(backend), "cuda");
	json_t *list = json_array(), *args = json_array();

	for (int t = 0; t < sched_graph_tensor_count(graph); t++)
		json_array_append_new(args, json_string(sched_tensor_name(graph, t)));
	for (int k = 0; k < plan->nkernels; k++) {
		unsigned blocks = 1, threads = 1;
		size_t zeroed;

		if (cuda)
			kgen_cuda_launch_shape(graph, &plan->kernels[k], &blocks, &threads);
		json_array_append_new(list, json_pack("{s:s, s:[i,i,i], s:[i,i,i], s:i, s:O, s:I}",
			"kernel", plan->kernels[k].name, "grid", blocks, 1, 1,
			"block", threads, 1, 1, "shared_bytes", 0, "args", args, "scratch_bytes",
			(json_int_t)kgen_kernel_scratch_bytes(graph, &plan->kernels[k], &zeroed)));
	}
	json_decref(args);
	return list;
}

static json_t *run_plan(kgen_backend *backend, tuner_graphs *graphs,
			const sched_graph *graph, const kgen_plan *plan,
			const json_t *request)
{
	const char **sources = request_sources(request, plan->nkernels);
	kgen_program *prog = NULL;
	kgen_error err = {0};
	json_t *obj;
	int rc = kgen_program_build(backend, graph, plan, sources, &prog, &err);

	if (rc < 0)
		obj = failure(rc == KGEN_ECOMPILE ? "compile_error" : "error", &err);
	else
		obj = verify_and_time(backend, graphs, prog, graph, plan, request);
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

/* The request's "graph" text read (kept in "graphs"); or the answer that
 * refuses it. */
static json_t *read_graph(tuner_graphs *graphs, const json_t *request,
			  const sched_graph **graph)
{
	const char *text = json_string_value(json_object_get(request, "graph"));
	sched_error err = {0};

	*graph = NULL;
	if (!text)
		return outcome("invalid", "the request has no \"graph\" text", NULL);
	if (tuner_graphs_read(graphs, text, graph, &err) < 0)
		return outcome(err.code == SCHED_ENOMEM ? "error" : "invalid",
			       err.message, NULL);
	return NULL;
}

/* "graph" replaced by the graph whose numbering the plan "given" uses
 * (kgen_graph_for_plan: the canonical form for a fetched plan, kept in
 * "graphs" by its text too); or the answer that refuses the plan. */
static json_t *renumber_for_plan(tuner_graphs *graphs, json_t *given,
				 const sched_graph **graph)
{
	sched_graph *canonical = NULL;
	kgen_error err = {0};
	sched_error serr = {0};
	char *text = NULL;
	json_t *obj = NULL;

	if (kgen_graph_for_plan(*graph, given, &canonical, &err) < 0)
		obj = outcome("invalid_plan", err.message, NULL);
	else if (canonical && !(text = sched_graph_canonical_json(canonical)))
		obj = outcome("error", "out of memory", NULL);
	else if (canonical && tuner_graphs_read(graphs, text, graph, &serr) < 0)
		obj = outcome("invalid_plan", serr.message, NULL);
	free(text);
	sched_graph_free(canonical);
	kgen_error_release(&err);
	return obj;
}

json_t *tuner_measure(kgen_backend *backend, tuner_graphs *graphs,
		      const json_t *request)
{
	json_t *given = json_object_get(request, "plan");
	const sched_graph *graph = NULL;
	kgen_plan *plan = NULL;
	json_t *obj = read_graph(graphs, request, &graph);

	if (!obj)
		obj = renumber_for_plan(graphs, given, &graph);
	if (!obj)
		obj = read_plan(graph, given, &plan);
	if (obj)
		json_object_set_new(obj, "verified", json_false());
	else
		obj = run_plan(backend, graphs, graph, plan, request);
	json_object_set_new(obj, "backend", json_string(kgen_backend_name(backend)));
	json_object_set_new(obj, "device", json_string(kgen_backend_description(backend)));
	json_object_set_new(obj, "seed", json_integer(json_integer_value(
				    json_object_get(request, "seed"))));
	if (graph)
		json_object_set_new(obj, "key", json_string(sched_graph_key(graph)));
	kgen_plan_free(plan);
	return obj;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Compiles the kernels of "plan" into the shared folder: ok, or why not. */
static json_t *prepare_plan(kgen_backend *backend, const sched_graph *graph,
			    const kgen_plan *plan, const json_t *request)
{
	const char **sources = request_sources(request, plan->nkernels);
	kgen_error err = {0};
	double start = now_ms();
	int rc = kgen_program_prepare(backend, graph, plan, sources, &err);
	json_t *obj = rc == KGEN_OK ? outcome("ok", NULL, NULL) :
		      outcome(rc == KGEN_ECOMPILE ? "compile_error" : "error",
			      err.message, &err);

	json_object_set_new(obj, "ms", json_real(now_ms() - start));
	json_object_set_new(obj, "plan", kgen_plan_to_json(graph, plan));
	kgen_error_release(&err);
	free(sources);
	return obj;
}

/* {"op": "compile", "graph", "plan", "sources"}. */
static json_t *serve_compile(kgen_backend *backend, tuner_graphs *graphs,
			     const json_t *request)
{
	const sched_graph *graph = NULL;
	kgen_plan *plan = NULL;
	json_t *obj = read_graph(graphs, request, &graph);

	if (!obj)
		obj = read_plan(graph, json_object_get(request, "plan"), &plan);
	if (!obj)
		obj = prepare_plan(backend, graph, plan, request);
	kgen_plan_free(plan);
	return obj;
}

/* {"op": "probe"}. */
static json_t *serve_probe(kgen_backend *backend)
{
	kgen_error err = {0};
	kgen_peaks peaks;
	json_t *obj;

	if (kgen_probe(backend, &peaks, &err) < 0)
		obj = outcome("error", err.message, &err);
	else
		obj = json_pack("{s:s, s:f, s:f, s:f, s:i, s:b}", "kind", "ok",
				"bandwidth_gbs", peaks.bandwidth_gbs, "gflops",
				peaks.gflops, "launch_ms", peaks.launch_ms,
				"cores", peaks.cores, "library",
				kgen_library_available(kgen_backend_name(backend)));
	kgen_error_release(&err);
	return obj;
}

/* One plan of a retime: its program (NULL when it failed: "error" says
 * why) and the time of each round. */
typedef struct retimed {
	kgen_plan *plan;
	kgen_program *prog;
	double *ms;
	int runs;
	char error[512];
} retimed;

/* Plan "given" built into "r" (build_verified), with room for the times
 * of "rounds" rounds. */
static void retime_build(kgen_backend *backend, const sched_graph *graph,
			 json_t *given, unsigned seed, int rounds, retimed *r)
{
	if (!(r->ms = calloc(rounds, sizeof(double))))
		snprintf(r->error, sizeof(r->error), "out of memory");
	else
		build_verified(backend, graph, given, seed, &r->plan, &r->prog,
			       r->error, sizeof(r->error));
}

/* One round: each plan still standing timed in turn, its round's time the
 * median of the runs that fit in ROUND_MS (one run at least): a kernel of
 * microseconds is timed many times, so that a round is not one noisy run. */
#define ROUND_MS 20.0

static void retime_round(retimed *plans, int n)
{
	kgen_timing once = {.warmup = 0, .min_runs = 1, .max_runs = 50,
			    .budget_ms = ROUND_MS};

	for (int i = 0; i < n; i++) {
		kgen_error err = {0};
		kgen_time t;

		if (!plans[i].prog)
			continue;
		if (kgen_program_time(plans[i].prog, &once, NULL, &t, &err) < 0) {
			snprintf(plans[i].error, sizeof(plans[i].error), "%s", err.message);
			kgen_program_free(plans[i].prog);
			plans[i].prog = NULL;
		} else {
			plans[i].ms[plans[i].runs++] = t.median_ms;
		}
		kgen_error_release(&err);
	}
}

static int compare_ms(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* {"median_ms", "spread_ms" (largest minus smallest), "runs", "rounds_ms"
 * (each round's time, in round order, for paired comparisons)}, or
 * {"error"}. */
static json_t *retime_json(retimed *r)
{
	json_t *rounds = json_array();

	if (r->error[0]) {
		json_decref(rounds);
		return json_pack("{s:s}", "error", r->error);
	}
	for (int i = 0; i < r->runs; i++)
		json_array_append_new(rounds, json_real(r->ms[i]));
	qsort(r->ms, r->runs, sizeof(double), compare_ms);
	return json_pack("{s:f, s:f, s:i, s:o}", "median_ms", r->ms[r->runs / 2],
			 "spread_ms", r->ms[r->runs - 1] - r->ms[0], "runs", r->runs,
			 "rounds_ms", rounds);
}

/* Times every plan of "list" in "rounds" rounds. */
static json_t *retime_plans(kgen_backend *backend, const sched_graph *graph,
			    json_t *list, unsigned seed, int rounds)
{
	int n = (int)json_array_size(list);
	retimed *plans = calloc(n + 1, sizeof(retimed));
	json_t *times;

	if (!plans)
		return outcome("error", "out of memory", NULL);
	for (int i = 0; i < n; i++)
		retime_build(backend, graph, json_array_get(list, i), seed, rounds,
			     &plans[i]);
	for (int r = 0; r < rounds; r++)
		retime_round(plans, n);
	times = json_array();
	for (int i = 0; i < n; i++) {
		json_array_append_new(times, retime_json(&plans[i]));
		kgen_program_free(plans[i].prog);
		kgen_plan_free(plans[i].plan);
		free(plans[i].ms);
	}
	free(plans);
	return json_pack("{s:s, s:o}", "kind", "ok", "times", times);
}

/* {"op": "retime", "graph", "plans": [...], "seed", "rounds"}. */
static json_t *serve_retime(kgen_backend *backend, tuner_graphs *graphs,
			    const json_t *request)
{
	json_t *list = json_object_get(request, "plans");
	json_t *given = json_object_get(request, "rounds");
	int rounds = given ? (int)json_integer_value(given) : 5;
	const sched_graph *graph = NULL;
	json_t *obj;

	if (!json_is_array(list))
		return outcome("invalid", "the request has no \"plans\" array", NULL);
	if (rounds < 1 || rounds > 1000)
		return outcome("invalid", "\"rounds\" must be an integer from 1 to 1000",
			       NULL);
	if (!(obj = read_graph(graphs, request, &graph)))
		obj = retime_plans(backend, graph, list, (unsigned)json_integer_value(
					   json_object_get(request, "seed")), rounds);
	return obj;
}

json_t *tuner_serve(kgen_backend *backend, tuner_graphs *graphs, const json_t *request)
{
	json_t *op = json_object_get(request, "op");
	const char *name = op ? json_string_value(op) : "measure";
	char error[160];

	if (name && !strcmp(name, "measure"))
		return tuner_measure(backend, graphs, request);
	if (name && !strcmp(name, "compile"))
		return serve_compile(backend, graphs, request);
	if (name && !strcmp(name, "probe"))
		return serve_probe(backend);
	if (name && !strcmp(name, "retime"))
		return serve_retime(backend, graphs, request);
	if (!name)
		return outcome("invalid", "\"op\" is not a string", NULL);
	snprintf(error, sizeof(error), "unknown op '%.64s': use measure, compile, "
		 "probe or retime", name);
	return outcome("invalid", error, NULL);
}

double tuner_time_limit(const sched_graph *graph, const char *backend)
{
	json_t *explain = sched_graph_explain(graph);
	double flops = (double)json_integer_value(json_object_get(explain, "flops"));
	double rate = strcmp(backend, "cuda") ? 2e8 : 1e12;
	double limit = 20 * flops / rate + 2.0 * sched_graph_op_count(graph) +
		       kgen_reference_seconds(graph);

	json_decref(explain);
	return limit > 10 ? limit : 10;
}
