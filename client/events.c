/*
 * events.c: jobs and events as text, for watch and for the progress of
 * submit --wait and wait.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "service.h"

/* The decimals that show "ms" to three significant digits, at least 3:
 * 1.234, 0.0812, 0.000800. */
static int ms_decimals(double ms)
{
	int decimals = 3;

	while (ms > 0 && ms < 0.1 && decimals < 9) {
		ms *= 10;
		decimals++;
	}
	return decimals;
}

/* Why a generation proposed fewer plans than a full one ("" when it was
 * full), and the genomes the job's search drew that gave no candidate,
 * for the reasons not counted elsewhere in the line: ", 12 proposed (its
 * time share ran out), dropped so far: 31 seen before, 9 invalid". */
static void proposing_text(json_t *data, char *out, size_t size)
{
	static const char *const ends[][2] = {
		{"time_share", "its time share ran out"},
		{"exhausted", "the search is exhausted"},
		{"ended", "the job ended"}};
	static const char *const drops[][2] = {
		{"seen", "seen before"}, {"measured", "measured before the job"},
		{"invalid", "invalid"}};
	const char *filled = json_string_value(json_object_get(data, "filled"));
	json_t *dropped = json_object_get(data, "dropped");
	const char *sep = ", dropped so far: ";

	for (size_t i = 0; filled && i < sizeof(ends) / sizeof(ends[0]); i++)
		if (!strcmp(filled, ends[i][0]))
			service_append(out, size, ", %lld proposed (%s)",
				       service_int(data, "proposed"), ends[i][1]);
	for (size_t i = 0; i < sizeof(drops) / sizeof(drops[0]); i++) {
		long long n = service_int(dropped, drops[i][0]);

		if (n > 0) {
			service_append(out, size, "%s%lld %s", sep, n, drops[i][1]);
			sep = ", ";
		}
	}
}

/* "gen 3: 96 trials, 2 compile failures, 5 filtered, best trial 1.198 ms,
 * version 1.234 ms (1.42x over the version this job started from)", from
 * a generation event's data, with proposing_text's part. */
void service_generation_text(json_t *data, char *out, size_t size)
{
	long long trials = service_int(data, "trials");
	long long failures = service_int(data, "compile_failures");
	double best = service_num(data, "best_ms"), gain = service_num(data, "gain");
	double version = service_num(data, "version_ms");

	snprintf(out, size, "gen %lld: %lld trial%s, %lld compile failure%s, "
		 "%lld filtered", service_int(data, "generation"), trials,
		 service_plural(trials), failures, service_plural(failures),
		 service_int(data, "filtered"));
	if (service_int(data, "quarantined") > 0)
		service_append(out, size, ", %lld quarantined (not tried)",
			       service_int(data, "quarantined"));
	proposing_text(data, out, size);
	if (isnan(best))
		service_append(out, size, ", nothing timed yet");
	else
		service_append(out, size, ", best trial %.*f ms", ms_decimals(best), best);
	if (!isnan(version))
		service_append(out, size, ", version %.*f ms", ms_decimals(version), version);
	if (!isnan(gain))
		service_append(out, size, " (%.2fx over the version this job "
			       "started from)", gain);
}

/* "version 4: 1.201 ms ± 0.010 (1.42x over the version this job started
 * from, 1.705 ms beside it)", from a version event's data. */
static void version_text(json_t *data, char *out, size_t size)
{
	double median = service_num(data, "median_ms");
	double spread = service_num(data, "spread_ms");
	double first = service_num(data, "first_ms");
	double speedup = service_num(data, "speedup");
	int decimals = ms_decimals(median);

	snprintf(out, size, "version %lld", service_int(data, "version"));
	if (!isnan(median))
		service_append(out, size, ": %.*f ms", decimals, median);
	if (!isnan(median) && !isnan(spread))
		service_append(out, size, " \u00b1 %.*f", decimals, spread);
	if (!isnan(speedup) && !isnan(first) && service_int(data, "version") > 1)
		service_append(out, size, " (%.2fx over the version this job started "
			       "from, %.*f ms beside it)", speedup, ms_decimals(first),
			       first);
}

/* "job 7: failed: no candidate verified", from a job event's data. */
static void job_text(json_t *job, char *out, size_t size)
{
	snprintf(out, size, "job %lld: %s", service_int(job, "id"),
		 service_str(job, "state"));
	if (*service_str(job, "error"))
		service_append(out, size, ": %s", service_str(job, "error"));
}

/* "job 7: 96 trials, best 0.800 ms, version 2", from a progress event. */
static void progress_text(json_t *data, char *out, size_t size)
{
	double best = service_num(data, "best_ms");

	snprintf(out, size, "job %lld: %lld trials", service_int(data, "job"),
		 service_int(data, "trials"));
	if (!isnan(best))
		service_append(out, size, ", best %.*f ms", ms_decimals(best), best);
	if (service_int(data, "version") > 0)
		service_append(out, size, ", version %lld", service_int(data, "version"));
}

/* One line for the event "ev"; an event this tunectl does not know is
 * shown as its name and data. */
void service_event_text(const tuned_client_event *ev, char *out, size_t size)
{
	char *data;

	if (!strcmp(ev->name, PROTO_EVENT_GENERATION))
		service_generation_text(ev->data, out, size);
	else if (!strcmp(ev->name, PROTO_EVENT_VERSION))
		version_text(ev->data, out, size);
	else if (!strcmp(ev->name, PROTO_EVENT_JOB))
		job_text(ev->data, out, size);
	else if (!strcmp(ev->name, PROTO_EVENT_PROGRESS))
		progress_text(ev->data, out, size);
	else {
		data = json_dumps(ev->data, JSON_COMPACT | JSON_PRESERVE_ORDER);
		snprintf(out, size, "%s: %s", ev->name, data ? data : "");
		free(data);
	}
}

/* "running, 120 trials, best 0.0123 ms, version 3, 4.31x over the version
 * this job started from" (the speedup as measured beside that version
 * when the version was published). */
void service_describe_job(json_t *job, char *out, size_t size)
{
	json_t *p = json_object_get(job, "progress");
	double best = service_num(p, "best_ms"), speedup = service_num(p, "speedup");

	snprintf(out, size, "%s, %lld trials", service_str(job, "state"),
		 service_int(p, "trials"));
	if (best > 0)
		service_append(out, size, ", best %.4f ms", best);
	if (service_int(p, "version") > 0)
		service_append(out, size, ", version %lld", service_int(p, "version"));
	if (speedup > 0 && service_int(p, "version") > 1)
		service_append(out, size, ", %.2fx over the version this job "
			       "started from", speedup);
}

long long service_job_number(json_t *job)
{
	return (long long)json_integer_value(json_object_get(job, "id"));
}
