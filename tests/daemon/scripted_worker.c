/*
 * scripted_worker.c: a tuned-worker with made-up times, so that the
 * daemon's search, publishing and scheduling can be tested exactly.
 *
 * It answers the worker protocol (describe, probe, compile, measure,
 * retime; docs/kernels.md) without compiling anything. A plan's time
 * depends on $SCRIPTED_TIMES: "flat", "hash" or "kernels"
 * (scripted_times.h).
 * $SCRIPTED_DELAY_MS, when set, is slept before each measurement.
 * $SCRIPTED_PROBE_DELAY_MS, when set, is slept before the answer to the
 * probe: until then the runner starts no job, so a test sees the loop
 * thread's own work alone.
 * $SCRIPTED_CLOSE, when set, makes every other re-timing (the first, the
 * third...) a close call: the challengers lose its first two rounds.
 * $SCRIPTED_FIRST_MS, when set, is the time of the first measurement (the
 * default plan's trial): one noisy first trial.
 * $SCRIPTED_DRIFT, when set, makes re-timing k (from 0) find every plan
 * k + 1 times slower: load that drifts between re-timings, alike for every
 * plan within one.
 * $SCRIPTED_TRIAL_DRIFT, when set, makes measurement k (from 0) find its
 * plan k + 1 times slower: load that grows from trial to trial. A plan
 * timed beside another ("beside") takes the same drift, so its ratio to
 * it is exact.
 * $SCRIPTED_CRASH, when set, names a file: the first measurement made
 * while it does not exist creates it, says so on stderr and dies of
 * SIGSEGV, as a kernel that crashes its worker; later ones go on. With
 * $SCRIPTED_CRASH_OP=retime, the first re-timing does instead. With
 * $SCRIPTED_CRASH_HOW=hang it hangs instead of dying, as a kernel that
 * never returns, until the daemon kills it at the time limit.
 * $SCRIPTED_DEVICE, when set, is the device it describes (default
 * "scripted"): "cuda: ..." makes tuned search with the cuda genes.
 * Arguments are accepted and ignored, as tuned passes them.
 */
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scripted_times.h"

static double plan_ms(const json_t *plan)
{
	return scripted_ms(plan, getenv("SCRIPTED_TIMES"));
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};

	nanosleep(&ts, NULL);
}

static void pause_a_little(void)
{
	const char *ms = getenv("SCRIPTED_DELAY_MS");

	if (ms)
		sleep_ms(atol(ms) % 1000);
}

/* Dies once in "op", as $SCRIPTED_CRASH and $SCRIPTED_CRASH_OP say. */
static void crash_once(const char *op)
{
	const char *marker = getenv("SCRIPTED_CRASH");
	const char *when = getenv("SCRIPTED_CRASH_OP");
	FILE *f;

	if (!marker || strcmp(op, when ? when : "measure") || !(f = fopen(marker, "wx")))
		return;
	fclose(f);
	if (getenv("SCRIPTED_CRASH_HOW") && !strcmp(getenv("SCRIPTED_CRASH_HOW"), "hang")) {
		fprintf(stderr, "scripted worker: hanging on purpose\n");
		fflush(stderr);
		for (;;)
			pause();
	}
	fprintf(stderr, "scripted worker: crashing on purpose\n");
	fflush(stderr);
	signal(SIGSEGV, SIG_DFL);
	raise(SIGSEGV);
}

/* The answer's "beside", for a request that names a plan to time beside. */
static void add_beside(json_t *answer, const json_t *request, double ms, double drift)
{
	const json_t *beside = json_object_get(request, "beside");
	double theirs = plan_ms(beside) * drift;

	if (beside)
		json_object_set_new(answer, "beside",
				    json_pack("{s:f, s:f, s:i, s:f}", "median_ms",
					      theirs, "spread_ms", 0.001, "runs", 3,
					      "ratio", ms / theirs));
}

static json_t *measure(const json_t *request)
{
	static int measured;
	const json_t *plan = json_object_get(request, "plan");
	double drift = getenv("SCRIPTED_TRIAL_DRIFT") ? measured + 1 : 1;
	double ms = plan_ms(plan) * drift;
	json_t *answer;

	if (!measured && getenv("SCRIPTED_FIRST_MS"))
		ms = atof(getenv("SCRIPTED_FIRST_MS"));
	measured++;
	crash_once("measure");
	pause_a_little();
	answer = json_pack("{s:s, s:b, s:f, s:f, s:i, s:O, s:[], s:[], s:[]}", "kind",
			   "ok", "verified", 1, "total_ms", ms, "total_spread_ms",
			   0.001, "total_runs", 3, "plan", plan ? plan : json_null(),
			   "kernels", "sources", "launch");
	add_beside(answer, request, ms, drift);
	return answer;
}

/* Every round of a plan takes its time exactly (times the drift), but
 * for a close call. */
static json_t *retime(const json_t *request)
{
	static int retimes;
	bool close = getenv("SCRIPTED_CLOSE") && retimes % 2 == 0;
	double drift = getenv("SCRIPTED_DRIFT") ? retimes + 1 : 1;
	int rounds = (int)json_integer_value(json_object_get(request, "rounds"));
	json_t *times = json_array(), *plan;
	size_t i;

	crash_once("retime");
	retimes++;
	json_array_foreach(json_object_get(request, "plans"), i, plan) {
		double ms = plan_ms(plan) * drift;
		json_t *each = json_array();

		for (int r = 0; r < rounds; r++)
			json_array_append_new(each, json_real(ms * (close && i > 0 &&
								    r < 2 ? 3 : 1)));
		json_array_append_new(times, json_pack("{s:f, s:f, s:i, s:o}", "median_ms",
						       ms, "spread_ms", 0.0,
						       "runs", rounds, "rounds_ms", each));
	}
	return json_pack("{s:s, s:o}", "kind", "ok", "times", times);
}

static json_t *handle(const json_t *request)
{
	const char *op = json_string_value(json_object_get(request, "op"));

	if (json_object_get(request, "describe"))
		return json_pack("{s:s, s:s}", "backend", "cpu", "device",
				 getenv("SCRIPTED_DEVICE") ?: "scripted");
	if (!op || !strcmp(op, "measure"))
		return measure(request);
	if (!strcmp(op, "compile"))
		return json_pack("{s:s, s:O}", "kind", "ok", "plan",
				 json_object_get(request, "plan"));
	if (!strcmp(op, "probe") && getenv("SCRIPTED_PROBE_DELAY_MS"))
		sleep_ms(atol(getenv("SCRIPTED_PROBE_DELAY_MS")));
	if (!strcmp(op, "probe"))
		return json_pack("{s:s, s:f, s:f, s:f, s:i}", "kind", "ok",
				 "bandwidth_gbs", 10.0, "gflops", 100.0,
				 "launch_ms", 0.001, "cores", 2);
	if (!strcmp(op, "retime"))
		return retime(request);
	return json_pack("{s:s, s:s}", "kind", "invalid", "error", "unknown op");
}

int main(void)
{
	char *line = NULL;
	size_t size = 0;

	while (getline(&line, &size, stdin) > 0) {
		json_t *request = json_loads(line, 0, NULL);
		json_t *answer = handle(request);
		char *text = json_dumps(answer, JSON_COMPACT);

		printf("%s\n", text ? text : "{}");
		fflush(stdout);
		free(text);
		json_decref(answer);
		json_decref(request);
	}
	free(line);
	return 0;
}
