/*
 * trial.c: a trial measured as the daemon measures one, and the helpers
 * the benchmarks share (trial.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trial.h"

/* A candidate whose first run is this many times slower than the best is
 * not timed further, as in the daemon (daemon/runner.c). */
#define CUTOFF 3.0

double bench_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int bench_positive_int(const char *text, int *out)
{
	char *end;
	long v = strtol(text, &end, 10);

	if (*text == 0 || *end || v <= 0 || v > 1000000)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

tuner_worker *bench_worker_new(const char *backend)
{
	const char *argv[] = {"tuned-worker", "--backend", backend, NULL};
	char path[4096];

	tuner_worker_default_path(path, sizeof(path));
	return tuner_worker_new(path, argv);
}

int bench_describe_device(const char *program, const char *backend)
{
	tuner_worker *w = bench_worker_new(backend);
	json_t *request = json_pack("{s:b}", "describe", 1);
	tuner_reply reply = {0};
	int rc = w && request ? tuner_worker_ask(w, request, 60, &reply) : -ENOMEM;

	if (rc == 0 && reply.answer)
		printf("backend %s: %s\n", backend,
		       json_string_value(json_object_get(reply.answer, "device")));
	else
		fprintf(stderr, "%s: no tuned-worker: %s\n", program, reply.detail);
	rc = rc == 0 && reply.answer ? 0 : -1;
	json_decref(reply.answer);
	json_decref(request);
	tuner_worker_free(w);
	return rc;
}

/* The time of an "ok" answer: beside a plan timed at "beside_ms", its
 * median ratio times that; else its own. */
static double answer_ms(const json_t *answer, double beside_ms)
{
	double ratio = json_number_value(
		json_object_get(json_object_get(answer, "beside"), "ratio"));

	return ratio > 0 ? ratio * beside_ms :
			   json_number_value(json_object_get(answer, "total_ms"));
}

double bench_measure(tuner_worker *w, const char *text, double limit_s, json_t *plan,
		     double best_ms, json_t *beside, double beside_ms)
{
	json_t *request = json_pack("{s:s, s:O, s:i, s:{s:f}}", "graph", text,
				    "plan", plan, "seed", 1, "timing", "budget_ms",
				    TRIAL_TIMING_MS);
	tuner_reply reply = {0};
	const char *kind;
	double ms = INFINITY;

	if (request && isfinite(best_ms))
		json_object_set_new(request, "cutoff_ms", json_real(CUTOFF * best_ms));
	if (request && beside && beside_ms > 0) {
		json_object_set(request, "beside", beside);
		if (isfinite(best_ms))
			json_object_set_new(request, "cutoff_ratio",
					    json_real(CUTOFF * best_ms / beside_ms));
	}
	if (request && tuner_worker_ask(w, request, limit_s, &reply) == 0 &&
	    (kind = json_string_value(json_object_get(reply.answer, "kind"))) &&
	    !strcmp(kind, "ok"))
		ms = answer_ms(reply.answer, beside_ms);
	json_decref(reply.answer);
	json_decref(request);
	return ms > 0 ? ms : INFINITY;
}
