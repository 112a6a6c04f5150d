/*
 * run.c: tunectl run FILE [--backend cpu|cuda|emulated|auto]
 *                         [--plan PLAN.json] [--seed N] [--timeout S] [--json]
 *
 * Compiles, verifies and times a plan (the default plan unless --plan names
 * one) in a tuned-worker process, without a daemon. A kernel that crashes
 * or hangs kills the worker, not tunectl. Exit 0 only when every output
 * matched the reference.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common.h"
#include "scheduler.h"
#include "tunectl.h"
#include "tuner.h"

typedef struct run_options {
	const char *file;
	const char *backend;
	const char *plan;
	unsigned seed;
	double timeout_s;
	bool as_json;
} run_options;

/* "o" from the command line; 0, or the exit status of a usage error. */
static int parse_run_options(const tunectl_command *command,
			     const tunectl_args *args, run_options *o)
{
	const char *backend = tunectl_option_value(args, "backend");
	const char *seed = tunectl_option_value(args, "seed");
	const char *timeout = tunectl_option_value(args, "timeout");
	double x;

	*o = (run_options){.file = args->arg, .backend = backend ? backend : "auto",
			   .plan = tunectl_option_value(args, "plan"), .seed = 1,
			   .as_json = tunectl_flag(args, "json")};
	if (strcmp(o->backend, "cpu") && strcmp(o->backend, "cuda") &&
	    strcmp(o->backend, "emulated") && strcmp(o->backend, "auto"))
		return tunectl_usage_error(command, "unknown backend '%s'", o->backend);
	if (seed && tunectl_parse_int(seed, 0, UINT_MAX, &x) < 0)
		return tunectl_usage_error(command, "bad value for '--seed': '%s' "
					   "(an integer from 0 to %u)", seed, UINT_MAX);
	if (seed)
		o->seed = (unsigned)x;
	if (timeout && (tunectl_parse_number(timeout, NULL, NULL, &x) < 0 ||
			!(x > 0)))
		return tunectl_usage_error(command, "bad value for '--timeout': '%s' "
					   "(seconds, more than 0)", timeout);
	if (timeout)
		o->timeout_s = x;
	return 0;
}

static json_t *build_request(const run_options *o, const char *graph_text)
{
	json_t *request = json_pack("{s:s, s:i}", "graph", graph_text, "seed", o->seed);
	json_error_t jerr;
	json_t *plan;

	if (!o->plan)
		return request;
	if (!(plan = json_load_file(o->plan, 0, &jerr))) {
		fprintf(stderr, "tunectl run: %s: line %d: %s\n", o->plan, jerr.line,
			jerr.text);
		json_decref(request);
		return NULL;
	}
	json_object_set_new(request, "plan", plan);
	return request;
}

static const char *outcome_kind(tuner_outcome outcome)
{
	switch (outcome) {
	case TUNER_CRASHED: return "crash";
	case TUNER_TIMED_OUT: return "timeout";
	case TUNER_GARBLED: return "garbled";
	default: return "ok";
	}
}

/* The worker's answer, or one made of what became of the worker; with
 * the keys scripts rely on always present. */
static json_t *result_of(const tuner_reply *reply, const sched_graph *graph,
			 const run_options *o)
{
	json_t *result = reply->answer ? json_incref(reply->answer) :
			 json_pack("{s:s, s:b, s:s, s:s}", "kind",
				   outcome_kind(reply->outcome), "verified", 0,
				   "error", reply->detail, "backend", o->backend);

	if (!json_object_get(result, "kernels"))
		json_object_set_new(result, "kernels", json_array());
	if (!json_object_get(result, "total_ms"))
		json_object_set_new(result, "total_ms", json_null());
	json_object_set_new(result, "key", json_string(sched_graph_key(graph)));
	json_object_set_new(result, "file", json_string(o->file));
	return result;
}

static void print_checks(json_t *result)
{
	json_t *check;
	size_t i;

	json_array_foreach(json_object_get(result, "checks"), i, check)
		printf("  %-12s rel. error %.2e (tolerance %.0e), %lld elements checked%s%s\n",
		       json_string_value(json_object_get(check, "tensor")),
		       json_real_value(json_object_get(check, "rel_error")),
		       json_real_value(json_object_get(check, "tolerance")),
		       json_integer_value(json_object_get(check, "checked")),
		       *json_string_value(json_object_get(check, "problem")) ? ": " : "",
		       json_string_value(json_object_get(check, "problem")));
}

static void print_times(json_t *result)
{
	json_t *kernel;
	size_t i;

	printf("%-24s %12s %12s %6s\n", "kernel", "median ms", "spread ms", "runs");
	json_array_foreach(json_object_get(result, "kernels"), i, kernel)
		printf("%-24s %12.4f %12.4f %6lld\n",
		       json_string_value(json_object_get(kernel, "name")),
		       json_real_value(json_object_get(kernel, "median_ms")),
		       json_real_value(json_object_get(kernel, "spread_ms")),
		       json_integer_value(json_object_get(kernel, "runs")));
	printf("%-24s %12.4f %12.4f %6lld\n", "total (whole plan)",
	       json_real_value(json_object_get(result, "total_ms")),
	       json_real_value(json_object_get(result, "total_spread_ms")),
	       json_integer_value(json_object_get(result, "total_runs")));
}

static void print_result(json_t *result)
{
	bool verified = json_is_true(json_object_get(result, "verified"));
	const char *error = json_string_value(json_object_get(result, "error"));
	const char *log = json_string_value(json_object_get(result, "log"));

	printf("%s: key %s\n", json_string_value(json_object_get(result, "file")),
	       json_string_value(json_object_get(result, "key")));
	if (json_object_get(result, "device"))
		printf("backend %s\n", json_string_value(json_object_get(result, "device")));
	if (verified)
		printf("verified: every output matches the reference (seed %lld)\n",
		       json_integer_value(json_object_get(result, "seed")));
	else
		fprintf(stderr, "not verified (%s): %s\n",
			json_string_value(json_object_get(result, "kind")),
			error ? error : "no reason given");
	if (log)
		fprintf(stderr, "%s\n", log);
	print_checks(result);
	if (verified)
		print_times(result);
}

static int ask_worker(const run_options *o, const sched_graph *graph,
		      json_t *request, json_t **result)
{
	const char *argv[] = {"tuned-worker", "--backend", o->backend, NULL};
	char path[PATH_MAX + 32];
	tuner_worker *worker;
	tuner_reply reply = {0};
	int rc;

	tuner_worker_default_path(path, sizeof(path));
	if (!(worker = tuner_worker_new(path, argv)))
		return fprintf(stderr, "tunectl run: out of memory\n"), -1;
	rc = tuner_worker_ask(worker, request,
			      o->timeout_s > 0 ? o->timeout_s :
			      tuner_time_limit(graph, o->backend), &reply);
	if (rc < 0)
		fprintf(stderr, "tunectl run: cannot start the worker: %s\n",
			reply.detail);
	else
		*result = result_of(&reply, graph, o);
	json_decref(reply.answer);
	tuner_worker_free(worker);
	return rc;
}

int tunectl_run(const tunectl_command *command, const tunectl_args *args)
{
	run_options o;
	sched_error err = {0};
	sched_graph *graph = NULL;
	json_t *request = NULL, *result = NULL;
	char *text;
	int status = EXIT_INVALID;

	if ((status = parse_run_options(command, args, &o)) != 0)
		return status;
	status = EXIT_INVALID;
	if (!(text = tuned_read_file(o.file, NULL)))
		return fprintf(stderr, "%s: cannot read the file\n", o.file), EXIT_INVALID;
	if (sched_graph_read_string(text, &graph, &err) < 0)
		fprintf(stderr, "%s: %s\n", o.file, err.message);
	else if ((request = build_request(&o, text)) &&
		 ask_worker(&o, graph, request, &result) == 0) {
		if (o.as_json)
			tunectl_print_json(json_incref(result));
		else
			print_result(result);
		status = json_is_true(json_object_get(result, "verified")) ?
			 EXIT_SUCCESS : EXIT_INVALID;
	}
	json_decref(result);
	json_decref(request);
	sched_graph_free(graph);
	free(text);
	return status;
}
