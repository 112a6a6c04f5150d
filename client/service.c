/*
 * service.c: the tunectl commands that talk to a daemon, through the
 * client library (tuned_client.h).
 *
 *   tunectl submit FILE [--wait] [--budget S] [--trials N] [--priority N]
 *   tunectl status JOB | list | wait JOB | cancel JOB
 *   tunectl watch KEY|JOB [--until-done]
 *   tunectl fetch KEY|JOB [--out DIR] [--min-version N] [--timeout MS]
 *   tunectl stats | cache ls | cache show KEY | cache prune [--max-age S]
 *                                                          [--max-bytes N]
 *   tunectl cache export [KEY...] [--all] --out FILE [--cache DB]
 *   tunectl cache import FILE [--cache DB]
 *   tunectl cache quarantine [--out DIR]
 *
 * Each takes --json (one JSON object on stdout; for watch, one JSON line
 * per event) and --socket PATH. cache export and import with --cache
 * work on that cache file instead of a daemon's (one no daemon holds). Exit 0 on success, 1 on failure (no
 * daemon included), 2 for a usage error.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cache.h"
#include "common.h"
#include "transfer.h"
#include "tunectl.h"
#include "tuned_client.h"

#define POLL_MS 500
#define PLAIN_EVERY_S 10.0

typedef struct service_options {
	const char *command; /* "submit", ..., "cache ls" */
	const char *arg;     /* FILE, JOB, KEY; the first KEY of [KEY...] */
	char *const *keys;   /* [KEY...]: every one, "nkeys" of them */
	int nkeys;
	const char *socket;
	bool as_json;
	bool wait;
	bool until_done;
	bool all;            /* cache export: every key */
	const char *cache_path; /* cache export, import: this file, offline */
	double budget_s;
	int priority;
	int64_t trials;
	const char *out_dir; /* fetch: the folder; cache export: the file */
	int64_t min_version;
	int timeout_ms;
	int64_t max_age_s, max_bytes;
} service_options;

/* A command of the table below: what the command line sees of it, and
 * what it does once connected. */
typedef struct service_command {
	tunectl_command command; /* first: tunectl_service_command() gives it */
	int (*talk)(tuned_client *client, const service_options *o);
} service_command;

/* Reporting. */

/* "obj" (taken) as one compact line on stdout, at once: NDJSON. */
static void print_json_line(json_t *obj)
{
	char *text = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);

	if (text)
		puts(text);
	fflush(stdout);
	free(text);
	json_decref(obj);
}

/* The error "err" of "o"'s command: on stderr, and as JSON with --json
 * (one line after the events of a watch, an indented object otherwise). */
static int fail(const service_options *o, const tuned_client_error *err)
{
	json_t *obj;

	fprintf(stderr, "tunectl %s: %s\n", o->command, err->message);
	if (!o->as_json)
		return EXIT_INVALID;
	obj = json_pack("{s:{s:s, s:s}}", "error", "code",
			tuned_client_code_name(err->code), "message",
			err->message);
	if (!strcmp(o->command, "watch"))
		print_json_line(obj);
	else
		tunectl_print_json(obj);
	return EXIT_INVALID;
}

__attribute__((format(printf, 2, 3)))
static int fail_with(const service_options *o, const char *fmt, ...)
{
	tuned_client_error err = {.code = TUNED_CLIENT_EIO};
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	return fail(o, &err);
}

static const char *str(json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));

	return s ? s : "";
}

static double num(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

static long long integer(json_t *obj, const char *key)
{
	return (long long)json_integer_value(json_object_get(obj, key));
}

/* Appends to the text "out" of "size" bytes, cutting what does not fit. */
__attribute__((format(printf, 3, 4)))
static void append(char *out, size_t size, const char *fmt, ...)
{
	size_t len = strlen(out);
	va_list ap;

	va_start(ap, fmt);
	if (len + 1 < size)
		vsnprintf(out + len, size - len, fmt, ap);
	va_end(ap);
}

/* A scalar as text, for the flat printer. */
static void print_scalar(json_t *v)
{
	if (json_is_string(v))
		fputs(json_string_value(v), stdout);
	else if (json_is_integer(v))
		printf("%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		printf("%g", json_real_value(v));
	else if (json_is_boolean(v))
		fputs(json_is_true(v) ? "true" : "false", stdout);
	else
		fputs("null", stdout);
}

/* "obj" as lines "a.b.c value", for results whose shape is the daemon's. */
static void print_flat(const char *prefix, json_t *v)
{
	char name[256];
	const char *key;
	json_t *item;
	size_t i;

	if (json_is_object(v)) {
		json_object_foreach(v, key, item) {
			snprintf(name, sizeof(name), "%s%s%s", prefix,
				 *prefix ? "." : "", key);
			print_flat(name, item);
		}
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, item) {
			snprintf(name, sizeof(name), "%s[%zu]", prefix, i);
			print_flat(name, item);
		}
	} else {
		printf("%-32s ", prefix);
		print_scalar(v);
		putchar('\n');
	}
}

/* Files. */

static int write_bytes(const char *path, const void *bytes, size_t len)
{
	FILE *f = fopen(path, "wb");
	int rc;

	if (!f)
		return -1;
	rc = fwrite(bytes, 1, len, f) == len ? 0 : -1;
	if (fclose(f) != 0)
		rc = -1;
	return rc;
}

static int write_json(const char *path, json_t *value)
{
	char *text = json_dumps(value, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
				       JSON_ENCODE_ANY);
	size_t len = text ? strlen(text) : 0;
	int rc;

	if (!text)
		return -1;
	text[len] = '\n'; /* over the NUL: the dump ends with a newline */
	rc = write_bytes(path, text, len + 1);
	free(text);
	return rc;
}

/* Events as text: for watch, and for the progress of submit --wait. */

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

static const char *plural(long long n)
{
	return n == 1 ? "" : "s";
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
			append(out, size, ", %lld proposed (%s)",
			       integer(data, "proposed"), ends[i][1]);
	for (size_t i = 0; i < sizeof(drops) / sizeof(drops[0]); i++) {
		long long n = integer(dropped, drops[i][0]);

		if (n > 0) {
			append(out, size, "%s%lld %s", sep, n, drops[i][1]);
			sep = ", ";
		}
	}
}

/* "gen 3: 96 trials, 2 compile failures, 5 filtered, best trial 1.198 ms,
 * version 1.234 ms (1.42x over the version this job started from)", from
 * a generation event's data, with proposing_text's part. */
static void generation_text(json_t *data, char *out, size_t size)
{
	long long trials = integer(data, "trials");
	long long failures = integer(data, "compile_failures");
	double best = num(data, "best_ms"), gain = num(data, "gain");
	double version = num(data, "version_ms");

	snprintf(out, size, "gen %lld: %lld trial%s, %lld compile failure%s, "
		 "%lld filtered", integer(data, "generation"), trials,
		 plural(trials), failures, plural(failures),
		 integer(data, "filtered"));
	if (integer(data, "quarantined") > 0)
		append(out, size, ", %lld quarantined (not tried)", integer(data, "quarantined"));
	proposing_text(data, out, size);
	if (isnan(best))
		append(out, size, ", nothing timed yet");
	else
		append(out, size, ", best trial %.*f ms", ms_decimals(best), best);
	if (!isnan(version))
		append(out, size, ", version %.*f ms", ms_decimals(version), version);
	if (!isnan(gain))
		append(out, size, " (%.2fx over the version this job started from)",
		       gain);
}

/* "version 4: 1.201 ms ± 0.010 (1.42x over the version this job started
 * from, 1.705 ms beside it)", from a version event's data. */
static void version_text(json_t *data, char *out, size_t size)
{
	double median = num(data, "median_ms"), spread = num(data, "spread_ms");
	double first = num(data, "first_ms"), speedup = num(data, "speedup");
	int decimals = ms_decimals(median);

	snprintf(out, size, "version %lld", integer(data, "version"));
	if (!isnan(median))
		append(out, size, ": %.*f ms", decimals, median);
	if (!isnan(median) && !isnan(spread))
		append(out, size, " \u00b1 %.*f", decimals, spread);
	if (!isnan(speedup) && !isnan(first) && integer(data, "version") > 1)
		append(out, size, " (%.2fx over the version this job started "
		       "from, %.*f ms beside it)", speedup, ms_decimals(first),
		       first);
}

/* "job 7: failed: no candidate verified", from a job event's data. */
static void job_text(json_t *job, char *out, size_t size)
{
	snprintf(out, size, "job %lld: %s", integer(job, "id"), str(job, "state"));
	if (*str(job, "error"))
		append(out, size, ": %s", str(job, "error"));
}

/* "job 7: 96 trials, best 0.800 ms, version 2", from a progress event. */
static void progress_text(json_t *data, char *out, size_t size)
{
	double best = num(data, "best_ms");

	snprintf(out, size, "job %lld: %lld trials", integer(data, "job"),
		 integer(data, "trials"));
	if (!isnan(best))
		append(out, size, ", best %.*f ms", ms_decimals(best), best);
	if (integer(data, "version") > 0)
		append(out, size, ", version %lld", integer(data, "version"));
}

/* One line for the event "ev"; an event this tunectl does not know is
 * shown as its name and data. */
static void event_text(const tuned_client_event *ev, char *out, size_t size)
{
	char *data;

	if (!strcmp(ev->name, PROTO_EVENT_GENERATION))
		generation_text(ev->data, out, size);
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

/* Progress of a job, for submit --wait and wait. */

typedef struct progress {
	FILE *out;
	bool bar;             /* a terminal: one line redrawn */
	json_t *job;          /* the last known state of the job */
	double budget_s;      /* asked for, or the job's; 0: unknown */
	double running_since; /* when it was first seen running */
	char state[16];       /* of the last plain line printed */
	int64_t version;
	double last_at;
	char generation[400]; /* the latest generation line, or "" */
	int64_t generation_n; /* its generation */
	int64_t printed_n;    /* the generation of the last plain one printed */
	double printed_at;    /* and when */
} progress;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool is_final(const char *state)
{
	return !strcmp(state, "done") || !strcmp(state, "failed") ||
	       !strcmp(state, "cancelled");
}

/* The part of the budget spent, from 0 to 1, or -1 when unknown. */
static double fraction(const progress *pg)
{
	double budget = num(pg->job, "budget_s");

	if (!(budget > 0))
		budget = pg->budget_s;
	if (!strcmp(str(pg->job, "state"), "done"))
		return 1;
	if (!(budget > 0) || !(pg->running_since > 0))
		return -1;
	return fmin((now_s() - pg->running_since) / budget, 0.99);
}

/* "running, 120 trials, best 0.0123 ms, version 3, 4.31x over the version
 * this job started from" (the speedup as measured beside that version
 * when the version was published). */
static void describe(json_t *job, char *out, size_t size)
{
	json_t *p = json_object_get(job, "progress");
	double best = num(p, "best_ms"), speedup = num(p, "speedup");

	snprintf(out, size, "%s, %lld trials", str(job, "state"), integer(p, "trials"));
	if (best > 0)
		append(out, size, ", best %.4f ms", best);
	if (integer(p, "version") > 0)
		append(out, size, ", version %lld", integer(p, "version"));
	if (speedup > 0 && integer(p, "version") > 1)
		append(out, size, ", %.2fx over the version this job started from",
		       speedup);
}

static long long job_number(json_t *job)
{
	return (long long)json_integer_value(json_object_get(job, "id"));
}

/* The columns of the terminal "out", 80 when it does not say. */
static int columns(FILE *out)
{
	struct winsize ws;

	if (ioctl(fileno(out), TIOCGWINSZ, &ws) < 0 || ws.ws_col == 0)
		return 80;
	return ws.ws_col;
}

/* What the bar says: the job's state and version and the latest
 * generation line once there is one, else describe()'s text. */
static void bar_text(progress *pg, const char *described, char *out,
		     size_t size)
{
	long long version = integer(json_object_get(pg->job, "progress"),
				    "version");

	if (!pg->generation[0]) {
		snprintf(out, size, "%s", described);
		return;
	}
	snprintf(out, size, "%s", str(pg->job, "state"));
	if (version > 0)
		append(out, size, ", version %lld", version);
	append(out, size, ", %s", pg->generation);
}

/* On a terminal: one line, redrawn, with a bar of the budget spent, cut
 * to the terminal's width so that it never wraps. */
static void render_bar(progress *pg, const char *described)
{
	double f = fraction(pg);
	int filled = f < 0 ? 0 : (int)(f * 30 + 0.5);
	char bar[31], percent[8] = "", line[512];
	int width = columns(pg->out);

	memset(bar, '#', filled);
	memset(bar + filled, '.', 30 - filled);
	bar[30] = 0;
	if (f >= 0)
		snprintf(percent, sizeof(percent), " %3d%%", (int)(f * 100));
	snprintf(line, sizeof(line), "job %lld [%s]%s ", job_number(pg->job),
		 bar, percent);
	bar_text(pg, described, line + strlen(line), sizeof(line) - strlen(line));
	if (width - 1 < (int)sizeof(line))
		line[width - 1] = 0;
	fprintf(pg->out, "\r\033[K%s", line);
	fflush(pg->out);
}

/* Elsewhere: a line when the state or the version changes, or now and
 * then. */
static void render_line(progress *pg, const char *text)
{
	json_t *p = json_object_get(pg->job, "progress");
	int64_t version = json_integer_value(json_object_get(p, "version"));
	const char *state = str(pg->job, "state");

	if (!strcmp(state, pg->state) && version == pg->version &&
	    now_s() - pg->last_at < PLAIN_EVERY_S)
		return;
	fprintf(pg->out, "job %lld: %s\n", job_number(pg->job), text);
	fflush(pg->out);
	snprintf(pg->state, sizeof(pg->state), "%s", state);
	pg->version = version;
	pg->last_at = now_s();
}

/* Elsewhere, the latest generation line too, at most every
 * PLAIN_EVERY_S. */
static void render_generation(progress *pg)
{
	if (!pg->generation[0] || pg->generation_n == pg->printed_n ||
	    now_s() - pg->printed_at < PLAIN_EVERY_S)
		return;
	fprintf(pg->out, "job %lld: %s\n", job_number(pg->job), pg->generation);
	fflush(pg->out);
	pg->printed_n = pg->generation_n;
	pg->printed_at = now_s();
}

static void render(progress *pg)
{
	char text[200];

	if (!pg->running_since && !strcmp(str(pg->job, "state"), "running"))
		pg->running_since = now_s();
	describe(pg->job, text, sizeof(text));
	if (pg->bar) {
		render_bar(pg, text);
	} else {
		render_line(pg, text);
		render_generation(pg);
	}
}

/* Merges what an event says of the job "id" into pg->job: a "job" event
 * is the job; "progress", "generation" and "version" events update its
 * progress, and a "generation" event is the latest generation line. */
static void merge_event(progress *pg, int64_t id, const tuned_client_event *ev)
{
	json_t *data = ev->data, *p = json_object_get(pg->job, "progress");
	json_t *which = json_object_get(data, "job");

	if (!strcmp(ev->name, PROTO_EVENT_JOB)) {
		if (json_integer_value(json_object_get(data, "id")) == id &&
		    json_is_string(json_object_get(data, "state"))) {
			json_decref(pg->job);
			pg->job = json_incref(data);
		}
		return;
	}
	if (json_integer_value(which) != id || !json_is_object(p))
		return;
	if (!strcmp(ev->name, PROTO_EVENT_GENERATION)) {
		generation_text(data, pg->generation, sizeof(pg->generation));
		pg->generation_n = integer(data, "generation");
	}
	if (json_is_integer(json_object_get(data, "trials")))
		json_object_set(p, "trials", json_object_get(data, "trials"));
	if (json_is_integer(json_object_get(data, "version")))
		json_object_set(p, "version", json_object_get(data, "version"));
	if (json_is_number(json_object_get(data, "best_ms")))
		json_object_set(p, "best_ms", json_object_get(data, "best_ms"));
	else if (json_is_number(json_object_get(data, "median_ms")))
		json_object_set(p, "best_ms", json_object_get(data, "median_ms"));
	if (!strcmp(ev->name, PROTO_EVENT_VERSION) &&
	    json_is_number(json_object_get(data, "speedup")))
		json_object_set(p, "speedup", json_object_get(data, "speedup"));
}

/* Events for up to POLL_MS; each one redraws. Connection errors end it. */
static int follow_events(tuned_client *client, progress *pg, int64_t id,
			 tuned_client_error *err)
{
	double until = now_s() + POLL_MS / 1000.0;
	tuned_client_event ev;
	int rc, left;

	while ((left = (int)((until - now_s()) * 1000)) > 0) {
		if ((rc = tuned_client_next_event(client, left, &ev, err)) <= 0)
			return rc;
		merge_event(pg, id, &ev);
		json_decref(ev.data);
		render(pg);
	}
	return 0;
}

/* The end of a job followed: its state and key, its progress, and the
 * latest generation line. */
static void finish_line(const service_options *o, const progress *pg)
{
	json_t *job = pg->job;
	const char *error = str(job, "error");
	char text[200];

	if (o->as_json) {
		tunectl_print_json(json_incref(job));
		return;
	}
	describe(job, text, sizeof(text));
	printf("job %lld %s: key %s%s%s\n", job_number(job), str(job, "state"), str(job, "key"), *error ? ": " : "", error);
	printf("  %s\n", strchr(text, ',') ? strchr(text, ',') + 2 : text);
	if (pg->generation[0])
		printf("  %s\n", pg->generation);
}

/* Follows the job "id" until it ends, with its events (the submitter
 * gets them; others watch the key) and its status every POLL_MS; exit 0
 * when it ended done. */
static int wait_job(tuned_client *client, const service_options *o, int64_t id)
{
	progress pg = {.out = o->as_json ? stderr : stdout,
		       .budget_s = o->budget_s};
	tuned_client_error err;
	int rc = 0, status;

	pg.bar = isatty(fileno(pg.out));
	for (;;) {
		json_t *job = NULL;

		if ((rc = tuned_client_status(client, id, &job, &err)) < 0)
			break;
		json_decref(pg.job);
		pg.job = job;
		render(&pg);
		if (is_final(str(job, "state")) ||
		    (rc = follow_events(client, &pg, id, &err)) < 0)
			break;
	}
	if (pg.bar)
		fputc('\n', pg.out);
	if (rc < 0) {
		json_decref(pg.job);
		return fail(o, &err);
	}
	finish_line(o, &pg);
	status = strcmp(str(pg.job, "state"), "done") ? EXIT_INVALID : EXIT_SUCCESS;
	json_decref(pg.job);
	return status;
}

/* The commands. */

/* "text" as a job id: a positive integer; 0 when it is not one. */
static int64_t job_id(const char *text)
{
	char *end;
	long long n;

	errno = 0;
	n = strtoll(text, &end, 10);
	return *end || end == text || n <= 0 || errno ? 0 : n;
}

static void print_submitted(const service_options *o,
			    const tuned_client_job *job)
{
	FILE *out = o->as_json ? stderr : stdout;

	fprintf(out, "job %lld key %s\n", (long long)job->id, job->key);
	if (job->cached_version > 0)
		fprintf(out, "version %lld is cached already: tunectl fetch %s\n",
			(long long)job->cached_version, job->key);
	fflush(out);
}

static int cmd_submit(tuned_client *client, const service_options *o)
{
	char *graph = tuned_read_file(o->arg, NULL);
	tuned_client_submit_options options = {.budget_s = o->budget_s,
					       .priority = o->priority,
					       .trials = o->trials};
	tuned_client_error err;
	tuned_client_job job;
	int rc;

	if (!graph)
		return fail_with(o, "%s: cannot read the file (%s)", o->arg,
				 strerror(errno));
	rc = tuned_client_submit_with(client, graph, &options, &job, &err);
	free(graph);
	if (rc < 0)
		return fail(o, &err);
	if (o->wait) {
		print_submitted(o, &job);
		return wait_job(client, o, job.id);
	}
	if (o->as_json)
		tunectl_print_json(json_pack("{s:I, s:s, s:I}", "job",
					     (json_int_t)job.id, "key", job.key,
					     "cached_version",
					     (json_int_t)job.cached_version));
	else
		print_submitted(o, &job);
	return EXIT_SUCCESS;
}

static void print_job(json_t *job)
{
	char text[200];

	describe(job, text, sizeof(text));
	printf("job %lld: %s\n", job_number(job), text);
	printf("  key       %s\n", str(job, "key"));
	if (*str(job, "name"))
		printf("  name      %s\n", str(job, "name"));
	if (*str(job, "created_at"))
		printf("  created   %s\n", str(job, "created_at"));
	if (num(job, "budget_s") > 0)
		printf("  budget    %g s\n", num(job, "budget_s"));
	printf("  priority  %lld\n",
	       (long long)json_integer_value(json_object_get(job, "priority")));
	if (*str(job, "error"))
		printf("  error     %s\n", str(job, "error"));
}

static int cmd_status(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *job;
	int64_t id = job_id(o->arg);

	if (tuned_client_status(client, id, &job, &err) < 0)
		return fail(o, &err);
	if (o->as_json)
		tunectl_print_json(job);
	else {
		print_job(job);
		json_decref(job);
	}
	return EXIT_SUCCESS;
}

static int cmd_wait(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	int64_t id = job_id(o->arg);
	json_t *job;
	int rc;

	if (tuned_client_status(client, id, &job, &err) < 0)
		return fail(o, &err);
	rc = is_final(str(job, "state")) ? 0 :
	     tuned_client_watch(client, str(job, "key"), &err);
	json_decref(job);
	return rc < 0 ? fail(o, &err) : wait_job(client, o, id);
}

static int cmd_cancel(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	int64_t id = job_id(o->arg);
	json_t *job;

	if (tuned_client_cancel(client, id, &job, &err) < 0)
		return fail(o, &err);
	if (o->as_json)
		return tunectl_print_json(job), EXIT_SUCCESS;
	if (!strcmp(str(job, "state"), "cancelled"))
		printf("job %lld cancelled\n", (long long)id);
	else
		printf("job %lld had ended: %s\n", (long long)id, str(job, "state"));
	json_decref(job);
	return EXIT_SUCCESS;
}

static int cmd_list(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result, *job;
	size_t i;

	if (tuned_client_list(client, &result, &err) < 0)
		return fail(o, &err);
	if (o->as_json)
		return tunectl_print_json(result), EXIT_SUCCESS;
	printf("%6s  %-9s  %8s  %7s  %12s  %7s  %s\n", "job", "state", "priority",
	       "trials", "best ms", "version", "name");
	json_array_foreach(json_object_get(result, "jobs"), i, job) {
		json_t *p = json_object_get(job, "progress");

		printf("%6lld  %-9s  %8lld  %7lld  %12.4f  %7lld  %s\n",
		       (long long)json_integer_value(json_object_get(job, "id")),
		       str(job, "state"),
		       (long long)json_integer_value(json_object_get(job, "priority")),
		       (long long)json_integer_value(json_object_get(p, "trials")),
		       num(p, "best_ms"),
		       (long long)json_integer_value(json_object_get(p, "version")),
		       str(job, "name"));
	}
	json_decref(result);
	return EXIT_SUCCESS;
}

/* watch: the events of a key as they come. */

/* The key watched, and the job followed with --until-done. */
typedef struct watcher {
	int64_t job;                 /* the JOB given; 0 for a KEY */
	bool until_done;             /* end when that job ends */
	char key[PROTO_KEY_HEX + 1]; /* lowercase */
	char ended[16];              /* the job's final state, once seen */
} watcher;

static volatile sig_atomic_t interrupted;

static void interrupt(int signo)
{
	(void)signo;
	interrupted = 1;
}

/* SIGINT and SIGTERM end a watch cleanly, with exit 0: they only set a
 * flag, which the loop reads at least every POLL_MS. */
static void catch_interrupts(void)
{
	struct sigaction sa = {.sa_handler = interrupt};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* One event: a line of text, or with --json the event as one JSON line. */
static void print_event(const service_options *o, const tuned_client_event *ev)
{
	char text[512];

	if (o->as_json) {
		print_json_line(json_pack("{s:s, s:O}", "event", ev->name, "data",
					  ev->data));
		return;
	}
	event_text(ev, text, sizeof(text));
	puts(text);
	fflush(stdout);
}

/* Notes the end of the job followed, when "ev" says it ended. */
static void note_end(watcher *w, const tuned_client_event *ev)
{
	const char *state = str(ev->data, "state");

	if (w->until_done && !strcmp(ev->name, PROTO_EVENT_JOB) &&
	    integer(ev->data, "id") == w->job && is_final(state))
		snprintf(w->ended, sizeof(w->ended), "%s", state);
}

/* Asks for the job followed: its key into w->key and, with --until-done,
 * when it has ended already, prints it as a job event and notes the end
 * (called before the watch and again after it, so that an end in
 * between is not missed). */
static int check_job(tuned_client *client, const service_options *o,
		     watcher *w, tuned_client_error *err)
{
	tuned_client_event ev = {.name = PROTO_EVENT_JOB};
	int rc = tuned_client_status(client, w->job, &ev.data, err);

	if (rc < 0)
		return rc;
	snprintf(w->key, sizeof(w->key), "%s", str(ev.data, "key"));
	note_end(w, &ev);
	if (w->ended[0])
		print_event(o, &ev);
	json_decref(ev.data);
	return 0;
}

/* Prints the events of the key until the job followed ends, a signal
 * comes, or the connection fails (a negative code). */
static int follow_key(tuned_client *client, const service_options *o,
		      watcher *w, tuned_client_error *err)
{
	tuned_client_event ev;
	int rc;

	while (!interrupted && !w->ended[0]) {
		if ((rc = tuned_client_next_event(client, POLL_MS, &ev, err)) < 0)
			return rc;
		if (rc == 0)
			continue;
		print_event(o, &ev);
		note_end(w, &ev);
		json_decref(ev.data);
	}
	return 0;
}

static int cmd_watch(tuned_client *client, const service_options *o)
{
	watcher w = {.job = job_id(o->arg), .until_done = o->until_done};
	tuned_client_error err;
	int rc = 0;

	catch_interrupts();
	if (w.job)
		rc = check_job(client, o, &w, &err);
	else
		for (size_t i = 0; i < PROTO_KEY_HEX; i++)
			w.key[i] = (char)tolower((unsigned char)o->arg[i]);
	if (rc == 0 && !w.ended[0])
		rc = tuned_client_watch(client, w.key, &err);
	if (rc == 0 && !w.ended[0] && w.until_done)
		rc = check_job(client, o, &w, &err);
	if (rc == 0)
		rc = follow_key(client, o, &w, &err);
	if (rc < 0)
		return fail(o, &err);
	return strcmp(w.ended, "failed") ? EXIT_SUCCESS : EXIT_INVALID;
}

/* fetch --out: the files of a result. */

typedef struct out_files {
	const char *dir;
	bool cuda;       /* from the device: "cuda: ..." */
	json_t *written; /* array of paths */
	char path[4096]; /* the file being written */
	char why[160];   /* why it failed */
} out_files;

__attribute__((format(printf, 2, 3)))
static int refuse_file(out_files *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(f->why, sizeof(f->why), fmt, ap);
	va_end(ap);
	return -1;
}

/* Writes DIR/"name": "value" as JSON, or else "len" bytes at "bytes". */
static int put_file(out_files *f, const char *name, json_t *value,
		    const void *bytes, size_t len)
{
	snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
	if ((value ? write_json(f->path, value) :
		     write_bytes(f->path, bytes, len)) < 0)
		return refuse_file(f, "%s", strerror(errno));
	json_array_append_new(f->written, json_string(f->path));
	return 0;
}

/* kernel_<n>.cu or .c: by the source's language, else the device; a
 * library step's cuBLASLt call is JSON, kernel_<n>.library.json. */
static void source_name(const out_files *f, json_t *item, size_t i,
			char *name, size_t size)
{
	const char *language = str(item, "language");
	bool cuda = *language ? !strcmp(language, "cuda") : f->cuda;
	bool call = cuda && json_is_true(json_object_get(item, "library"));

	snprintf(name, size, "kernel_%zu.%s", i, call ? "library.json" : cuda ? "cu" : "c");
}

/* "sources": one per kernel, {kernel, language, source} or a string. */
static int write_sources(out_files *f, json_t *result)
{
	json_t *item;
	char name[64];
	size_t i;

	json_array_foreach(json_object_get(result, "sources"), i, item) {
		const char *text = json_is_string(item) ? json_string_value(item) :
				   json_string_value(json_object_get(item, "source"));

		source_name(f, item, i, name, sizeof(name));
		snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
		if (!text)
			return refuse_file(f, "source %zu has no text", i);
		if (put_file(f, name, NULL, text, strlen(text)) < 0)
			return -1;
	}
	return 0;
}

/* A launch description from the plan, for a result without "launch":
 * per kernel, its source file, ops, schedule and signature (the grid
 * needs the graph's shapes, which the result does not hold). */
static json_t *launch_from_plan(const out_files *f, json_t *result)
{
	json_t *kernels = json_object_get(json_object_get(result, "plan"), "kernels");
	json_t *launch = json_array(), *k;
	char source[64];
	size_t i;

	json_array_foreach(kernels, i, k) {
		source_name(f, json_array_get(json_object_get(result, "sources"), i),
			    i, source, sizeof(source));
		json_array_append_new(launch, json_pack(
			"{s:s, s:s, s:O*, s:O*, s:s}", "kernel", str(k, "name"),
			"source", source, "ops", json_object_get(k, "ops"),
			"schedule", json_object_get(k, "schedule"), "signature",
			f->cuda ? "extern \"C\" __global__: one pointer per tensor, in "
				  "the order of the key's canonical form (t0, t1, ...)" :
				  "void NAME(void **tensors): one pointer per tensor, in "
				  "the order of the key's canonical form (t0, t1, ...)"));
	}
	return launch;
}

static int write_launch(out_files *f, json_t *result)
{
	json_t *launch = json_object_get(result, "launch");
	int rc;

	if (launch && !json_is_null(launch))
		return put_file(f, "launch.json", launch, NULL, 0);
	launch = launch_from_plan(f, result);
	rc = put_file(f, "launch.json", launch, NULL, 0);
	json_decref(launch);
	return rc;
}

static int write_result(const service_options *o, json_t *result,
			json_t *written)
{
	out_files f = {.dir = o->out_dir, .written = written,
		       .cuda = !strncmp(str(result, "device"), "cuda", 4)};
	json_t *plan = json_object_get(result, "plan");

	if (mkdir(o->out_dir, 0777) < 0 && errno != EEXIST)
		return fail_with(o, "%s: cannot make the folder (%s)", o->out_dir,
				 strerror(errno));
	if (!json_is_object(plan))
		return fail_with(o, "the result for %s has no plan", o->arg);
	if (put_file(&f, "plan.json", plan, NULL, 0) < 0 ||
	    write_sources(&f, result) < 0 || write_launch(&f, result) < 0)
		return fail_with(o, "%s: %s", f.path, f.why);
	return 0;
}

static void print_fetched(json_t *result, json_t *written)
{
	json_t *path;
	size_t i;

	printf("key       %s\n", str(result, "key"));
	printf("version   %lld\n",
	       (long long)json_integer_value(json_object_get(result, "version")));
	if (isnan(num(result, "spread_ms")))
		printf("median_ms %.4f\n", num(result, "median_ms"));
	else
		printf("median_ms %.4f (spread %.4f)\n", num(result, "median_ms"),
		       num(result, "spread_ms"));
	printf("device    %s\n", str(result, "device"));
	json_array_foreach(written, i, path)
		printf("wrote     %s\n", json_string_value(path));
}

static int cmd_fetch(tuned_client *client, const service_options *o)
{
	json_t *result, *written = json_array();
	tuned_client_error err;
	int status = EXIT_SUCCESS;

	if (tuned_client_fetch(client, o->arg, o->min_version, o->timeout_ms,
			       &result, &err) < 0) {
		json_decref(written);
		return fail(o, &err);
	}
	if (o->out_dir && write_result(o, result, written) != 0)
		status = EXIT_INVALID;
	else if (o->as_json) {
		if (o->out_dir) {
			json_object_del(result, "sources");
			json_object_set(result, "files", written);
		}
		tunectl_print_json(json_incref(result));
	} else
		print_fetched(result, written);
	json_decref(written);
	json_decref(result);
	return status;
}

/* cache quarantine: the plans that crashed or hung a worker, listed, or
 * with --out exported one folder per entry. */

/* "12 kernels: k0_y, k1_z, ..." for the list. */
static void plan_summary(json_t *plan, char *out, size_t size)
{
	json_t *kernels = json_object_get(plan, "kernels"), *k;
	size_t i, n = 0;

	n += (size_t)snprintf(out, size, "%zu kernel%s:", json_array_size(kernels),
			      json_array_size(kernels) == 1 ? "" : "s");
	json_array_foreach(kernels, i, k) {
		if (n + 8 >= size || i == 4) {
			snprintf(out + n, size - n, " ...");
			return;
		}
		n += (size_t)snprintf(out + n, size - n, "%s %s", i ? "," : "",
				      str(k, "name"));
	}
}

/* "crash (signal 11)", "timeout (12.0 s)", or the reason alone for an
 * entry from before causes were kept. */
static void cause_text(json_t *e, char *out, size_t size)
{
	if (!strcmp(str(e, "cause"), "crash") && json_integer_value(json_object_get(e, "signal")))
		snprintf(out, size, "crash (signal %lld)",
			 (long long)json_integer_value(json_object_get(e, "signal")));
	else if (!strcmp(str(e, "cause"), "timeout"))
		snprintf(out, size, "timeout (%.1f s)", num(e, "time_limit_s"));
	else
		snprintf(out, size, "%s", *str(e, "cause") ? str(e, "cause") : str(e, "reason"));
}

static void print_quarantined(json_t *e)
{
	char plan[120], cause[64];

	plan_summary(json_object_get(e, "plan"), plan, sizeof(plan));
	cause_text(e, cause, sizeof(cause));
	printf("%-64s  %-20s  %-20s  %-20s  %s\n", str(e, "key"), str(e, "name"), cause,
	       str(e, "created_at"), plan);
}

/* info.json: everything of the entry that has no file of its own. */
static json_t *quarantine_info(json_t *e)
{
	json_t *info = json_deep_copy(e);

	json_object_del(info, "graph");
	json_object_del(info, "plan");
	json_object_del(info, "sources");
	json_object_del(info, "worker_log");
	return info;
}

/* DIR/<id>-<key>: graph.json, plan.json, kernel_<n>.c or .cu,
 * worker.log and info.json; what the entry lacks is not written. */
static int export_entry(out_files *f, json_t *e, char *folder, size_t size)
{
	const char *graph = str(e, "graph"), *log = str(e, "worker_log");
	json_t *info = quarantine_info(e);
	int rc;

	snprintf(folder, size, "%s/%lld-%.64s", f->dir,
		 (long long)json_integer_value(json_object_get(e, "id")), str(e, "key"));
	f->dir = folder;
	f->cuda = !strncmp(str(e, "device"), "cuda", 4);
	if (mkdir(folder, 0777) < 0 && errno != EEXIST)
		rc = refuse_file(f, "cannot make the folder (%s)", strerror(errno));
	else
		rc = put_file(f, "plan.json", json_object_get(e, "plan"), NULL, 0);
	if (rc == 0 && *graph)
		rc = put_file(f, "graph.json", NULL, graph, strlen(graph));
	if (rc == 0)
		rc = write_sources(f, e);
	if (rc == 0 && *log)
		rc = put_file(f, "worker.log", NULL, log, strlen(log));
	if (rc == 0)
		rc = put_file(f, "info.json", info, NULL, 0);
	json_decref(info);
	return rc;
}

static int export_quarantine(const service_options *o, json_t *entries, json_t *written)
{
	json_t *e;
	size_t i;

	if (mkdir(o->out_dir, 0777) < 0 && errno != EEXIST)
		return fail_with(o, "%s: cannot make the folder (%s)", o->out_dir,
				 strerror(errno));
	json_array_foreach(entries, i, e) {
		out_files f = {.dir = o->out_dir, .written = written};
		char folder[4096];

		if (export_entry(&f, e, folder, sizeof(folder)) < 0)
			return fail_with(o, "%s: %s", f.path, f.why);
	}
	return 0;
}

static int cmd_cache_quarantine(tuned_client *client, const service_options *o)
{
	json_t *result, *entries, *written = json_array(), *e, *path;
	tuned_client_error err;
	int status = EXIT_SUCCESS;
	size_t i;

	if (tuned_client_cache_quarantine(client, NULL, &result, &err) < 0) {
		json_decref(written);
		return fail(o, &err);
	}
	entries = json_object_get(result, "entries");
	if (o->out_dir && export_quarantine(o, entries, written) != 0) {
		status = EXIT_INVALID;
	} else if (o->as_json) {
		if (o->out_dir)
			json_object_set(result, "files", written);
		tunectl_print_json(json_incref(result));
	} else {
		printf("%-64s  %-20s  %-20s  %-20s  %s\n", "key", "name", "cause", "when",
		       "plan");
		json_array_foreach(entries, i, e)
			print_quarantined(e);
		json_array_foreach(written, i, path)
			printf("wrote %s\n", json_string_value(path));
	}
	json_decref(written);
	json_decref(result);
	return status;
}

/* Results shown as they come: JSON, or flat lines. */
static int show(const service_options *o, int rc, json_t *result,
		const tuned_client_error *err)
{
	if (rc < 0)
		return fail(o, err);
	if (o->as_json)
		tunectl_print_json(result);
	else {
		print_flat("", result);
		json_decref(result);
	}
	return EXIT_SUCCESS;
}

static int cmd_stats(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result = NULL;
	int rc = tuned_client_stats(client, &result, &err);

	return show(o, rc, result, &err);
}

static void print_entry(json_t *e)
{
	printf("%-64s  %7lld  %12.4f  %10lld  %-20s  %s\n", str(e, "key"),
	       (long long)json_integer_value(json_object_get(e, "version")),
	       num(e, "median_ms"),
	       (long long)json_integer_value(json_object_get(e, "bytes")),
	       str(e, "updated_at"), str(e, "name"));
}

static int cmd_cache_ls(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result, *entry;
	size_t i;

	if (tuned_client_cache_list(client, &result, &err) < 0)
		return fail(o, &err);
	if (o->as_json)
		return tunectl_print_json(result), EXIT_SUCCESS;
	printf("%-64s  %7s  %12s  %10s  %-20s  %s\n", "key", "version",
	       "median ms", "bytes", "updated", "name");
	json_array_foreach(json_object_get(result, "entries"), i, entry)
		print_entry(entry);
	json_decref(result);
	return EXIT_SUCCESS;
}

static int cmd_cache_show(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result = NULL;
	int rc = tuned_client_cache_show(client, o->arg, &result, &err);

	return show(o, rc, result, &err);
}

static int cmd_cache_prune(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result = NULL;
	int rc = tuned_client_cache_prune(client, o->max_age_s, o->max_bytes,
					  &result, &err);

	return show(o, rc, result, &err);
}

/* Writes the export "result" (taken) to --out. */
static int write_export(const service_options *o, json_t *result)
{
	size_t n = json_array_size(json_object_get(result, "entries"));

	if (write_json(o->out_dir, result) < 0) {
		json_decref(result);
		return fail_with(o, "%s: cannot write the file (%s)", o->out_dir,
				 strerror(errno));
	}
	json_decref(result);
	if (o->as_json)
		tunectl_print_json(json_pack("{s:s, s:I}", "file", o->out_dir, "keys",
					     (json_int_t)n));
	else
		printf("exported %zu key%s to %s\n", n, n == 1 ? "" : "s", o->out_dir);
	return EXIT_SUCCESS;
}

static int cmd_cache_export(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result = NULL;

	if (tuned_client_cache_export(client, (const char *const *)o->keys, o->nkeys,
				      &result, &err) < 0)
		return fail(o, &err);
	return write_export(o, result);
}

/* "imported KEY: 2 versions", then what was kept as it was; "refused
 * KEY: why". */
static void print_imported(json_t *result)
{
	json_t *entry, *kept;
	size_t i, j;

	json_array_foreach(json_object_get(result, "imported"), i, entry) {
		long long n = integer(entry, "versions");

		printf("imported %s: %lld version%s\n", str(entry, "key"), n, plural(n));
		json_array_foreach(json_object_get(entry, "kept"), j, kept)
			printf("  kept %s, %s: %s\n", str(kept, "device"),
			       str(kept, "codegen"), str(kept, "reason"));
	}
	json_array_foreach(json_object_get(result, "refused"), i, entry)
		printf("refused %s: %s\n", str(entry, "key"), str(entry, "reason"));
}

/* Shows the import "result" (taken): exit 1 when a key was refused. */
static int show_imported(const service_options *o, json_t *result)
{
	int status = json_array_size(json_object_get(result, "refused")) ?
		     EXIT_INVALID : EXIT_SUCCESS;

	if (o->as_json)
		tunectl_print_json(result);
	else {
		print_imported(result);
		json_decref(result);
	}
	return status;
}

/* The export file --arg, or NULL after saying why. */
static json_t *read_export(const service_options *o)
{
	json_error_t jerr;
	json_t *bundle = json_load_file(o->arg, 0, &jerr);

	if (!bundle)
		fail_with(o, "%s: %s (line %d)", o->arg, jerr.text, jerr.line);
	return bundle;
}

static int cmd_cache_import(tuned_client *client, const service_options *o)
{
	json_t *bundle = read_export(o), *result = NULL;
	tuned_client_error err;
	int rc;

	if (!bundle)
		return EXIT_INVALID;
	rc = tuned_client_cache_import(client, bundle, &result, &err);
	json_decref(bundle);
	if (rc < 0)
		return fail(o, &err);
	return show_imported(o, result);
}

/* --cache: the cache file itself, which no daemon may hold. */
static cache *open_offline(const service_options *o)
{
	cache_error err = {0};
	cache *c = NULL;

	if (cache_open(o->cache_path, NULL, &c, &err) < 0) {
		fail_with(o, "%s%s", err.message, err.code == CACHE_EBUSY ?
			  "; a daemon holds it: leave out --cache to go through "
			  "the daemon" : "");
		return NULL;
	}
	return c;
}

static int offline_export(const service_options *o)
{
	json_t *keys = o->nkeys ? json_array() : NULL, *result = NULL;
	char why[PROTO_MESSAGE_MAX];
	cache *c = open_offline(o);
	int rc;

	for (int i = 0; i < o->nkeys; i++)
		json_array_append_new(keys, json_string(o->keys[i]));
	rc = c ? tuned_export(c, "tunectl (offline)", NULL, keys, &result, why,
			      sizeof(why)) : 0;
	cache_close(c);
	json_decref(keys);
	if (!c)
		return EXIT_INVALID;
	if (rc < 0)
		return fail_with(o, "%s", why);
	return write_export(o, result);
}

static int offline_import(const service_options *o)
{
	json_t *bundle = read_export(o), *result = NULL;
	char why[PROTO_MESSAGE_MAX];
	cache *c = bundle ? open_offline(o) : NULL;
	int rc = c ? tuned_import(c, bundle, &result, why, sizeof(why)) : 0;

	cache_close(c);
	json_decref(bundle);
	if (!c)
		return EXIT_INVALID;
	if (rc < 0)
		return fail_with(o, "%s: %s", o->arg, why);
	return show_imported(o, result);
}

/* Whether "text" is a cache key: 64 hex digits, in either case. */
static bool is_key(const char *text)
{
	size_t n = 0;

	while (isxdigit((unsigned char)text[n]))
		n++;
	return n == PROTO_KEY_HEX && !text[n];
}

/* The argument of "cmd": a JOB a job id, a KEY|JOB a key or a job id;
 * --until-done needs a JOB. 0, or the exit status of a usage error. */
static int check_argument(const tunectl_command *cmd, const service_options *o)
{
	for (int i = 0; i < o->nkeys; i++) {
		if (!is_key(o->keys[i]))
			return tunectl_usage_error(cmd, "not a key (64 hex digits): "
						   "'%s'", o->keys[i]);
		for (char *c = o->keys[i]; *c; c++)
			*c = (char)tolower((unsigned char)*c);
	}
	if (!cmd->arg || o->nkeys)
		return 0;
	if (!strcmp(cmd->arg, "JOB") && !job_id(o->arg))
		return tunectl_usage_error(cmd, "not a job id: '%s'", o->arg);
	if (!strcmp(cmd->arg, "KEY|JOB") && !is_key(o->arg) && !job_id(o->arg))
		return tunectl_usage_error(cmd, "neither a key (64 hex digits) "
					   "nor a job id: '%s'", o->arg);
	if (o->until_done && !job_id(o->arg))
		return tunectl_usage_error(cmd, "--until-done follows a job: give "
					   "its id, not the key '%s'", o->arg);
	return 0;
}

/* Option values. */

static const double age_factors[] = {1, 60, 3600, 86400};
static const double byte_factors[] = {1024.0, 1048576.0, 1073741824.0,
				      1099511627776.0};

/* The options that take an integer, and their ranges. */
static const struct int_option {
	const char *name;
	double lo, hi;
} int_options[] = {
	{"priority", PROTO_PRIORITY_MIN, PROTO_PRIORITY_MAX},
	{"timeout", 0, PROTO_TIMEOUT_MAX_MS},
	{"min-version", 0, 9e18},
	{"trials", 1, PROTO_TRIALS_MAX},
};

#define NINT_OPTIONS (sizeof(int_options) / sizeof(int_options[0]))

static const struct int_option *find_int_option(const char *name)
{
	for (size_t i = 0; i < NINT_OPTIONS; i++)
		if (!strcmp(int_options[i].name, name))
			return &int_options[i];
	return NULL;
}

static int int_value(service_options *o, const char *name, const char *v)
{
	const struct int_option *opt = find_int_option(name);
	double x;

	if (!opt || tunectl_parse_int(v, opt->lo, opt->hi, &x) < 0)
		return -1;
	if (!strcmp(name, "priority"))
		o->priority = (int)x;
	else if (!strcmp(name, "timeout"))
		o->timeout_ms = (int)x;
	else if (!strcmp(name, "trials"))
		o->trials = (int64_t)x;
	else
		o->min_version = (int64_t)x;
	return 0;
}

/* Sets the option "name" of "o" from its value "v"; -1 when "v" is bad. */
static int option_value(service_options *o, const char *name, const char *v)
{
	double x;

	if (!strcmp(name, "budget"))
		return tunectl_parse_number(v, "smhd", age_factors, &o->budget_s) < 0 ||
		       !(o->budget_s >= 0) ? -1 : 0;
	if (!strcmp(name, "max-age"))
		return tunectl_parse_number(v, "smhd", age_factors, &x) < 0 ||
		       !(x >= 1) ? -1 : (o->max_age_s = (int64_t)x, 0);
	if (!strcmp(name, "max-bytes"))
		return tunectl_parse_number(v, "KMGT", byte_factors, &x) < 0 ||
		       !(x >= 1) || x > 9e18 ? -1 : (o->max_bytes = (int64_t)x, 0);
	if (!strcmp(name, "out"))
		return (o->out_dir = v), 0;
	if (!strcmp(name, "cache"))
		return (o->cache_path = v), 0;
	return int_value(o, name, v);
}

/* What a good value of the option "name" looks like. */
static void expected(const char *name, char *out, size_t size)
{
	const struct int_option *opt = find_int_option(name);

	if (opt)
		snprintf(out, size, "an integer from %.0f to %.0f", opt->lo, opt->hi);
	else if (!strcmp(name, "max-bytes"))
		snprintf(out, size, "at least 1 byte, or a number with K, M, G or T");
	else if (!strcmp(name, "max-age"))
		snprintf(out, size, "at least 1 s, or a number with s, m, h or d");
	else
		snprintf(out, size, "seconds, or a number with s, m, h or d");
}

/* What a command needs besides its argument: prune a limit, export its
 * keys or --all. 0, or the exit status of a usage error. */
static int check_needs(const tunectl_command *cmd, const service_options *o)
{
	if (!strcmp(cmd->name, "cache prune") && o->max_age_s < 0 && o->max_bytes < 0)
		return tunectl_usage_error(cmd, "give what to keep: --max-age S "
					   "(remove what is older), --max-bytes N "
					   "(shrink to N bytes), or both");
	if (!strcmp(cmd->name, "cache export") && !o->nkeys == !o->all)
		return tunectl_usage_error(cmd, "give the keys to export or --all, "
					   "not both");
	return 0;
}

/* "o" from the command line of "cmd"; 0, or the exit status of a usage
 * error. */
static int read_service_options(const tunectl_command *cmd,
				const tunectl_args *args, service_options *o)
{
	char what[64];

	*o = (service_options){.command = cmd->name, .arg = args->arg,
			       .keys = args->words, .nkeys = args->nwords,
			       .max_age_s = -1, .max_bytes = -1};
	for (int i = 0; i < TUNECTL_MAX_OPTIONS && cmd->options[i].name; i++) {
		const char *name = cmd->options[i].name, *v = args->values[i];

		if (!v)
			continue;
		if (!strcmp(name, "json"))
			o->as_json = true;
		else if (!strcmp(name, "wait"))
			o->wait = true;
		else if (!strcmp(name, "until-done"))
			o->until_done = true;
		else if (!strcmp(name, "all"))
			o->all = true;
		else if (!strcmp(name, "socket"))
			o->socket = v;
		else if (option_value(o, name, v) < 0) {
			expected(name, what, sizeof(what));
			return tunectl_usage_error(cmd, "bad value for '--%s': '%s' "
						   "(%s)", name, v, what);
		}
	}
	return check_needs(cmd, o) ?: check_argument(cmd, o);
}

/* Connects to the daemon and runs the command "command" of the table. */
static int run_service(const tunectl_command *command, const tunectl_args *args)
{
	const service_command *cmd = (const service_command *)command;
	tuned_client_options copts = {0};
	tuned_client_error err;
	tuned_client *client;
	service_options o;
	int status;

	if ((status = read_service_options(command, args, &o)))
		return status;
	if (tuned_client_connect(o.socket, &copts, &client, &err) < 0)
		return fail(&o, &err);
	status = cmd->talk(client, &o);
	tuned_client_close(client);
	return status;
}

/* cache export and import: on the --cache file when one is given, else
 * through the daemon. */
static int run_transfer(const tunectl_command *command, const tunectl_args *args)
{
	service_options o;
	int status;

	if ((status = read_service_options(command, args, &o)))
		return status;
	if (!o.cache_path)
		return run_service(command, args);
	return !strcmp(command->name, "cache export") ? offline_export(&o) :
	       offline_import(&o);
}

/* The commands: one entry each, with its options and their help, read
 * by options.c for the command line and the usages. */

#define JSON_OPTION \
	TUNECTL_FLAG("json", "print one JSON object on stdout instead of text\n")
#define SOCKET_OPTION \
	TUNECTL_VALUE("socket", "PATH", \
		      "the daemon's socket (default $TUNED_SOCKET,\n" \
		      "else /run/tuned-gpu/gpu0.sock for root;\n" \
		      "$XDG_RUNTIME_DIR/tuned/gpu0.sock otherwise,\n" \
		      "or the service's when it is installed and that\n" \
		      "one is not there in a folder of the user's own)\n")

static const service_command commands[] = {
	{{"submit", "FILE",
	  "queue FILE (graph.json) for tuning; print the job id and its key;\n"
	  "with --wait, follow it and exit 1 unless it ends done\n",
	  {TUNECTL_FLAG("wait",
			"follow the job until it ends: its progress, then\n"
			"its end (docs/operations.md)\n"),
	   TUNECTL_VALUE("budget", "S",
			 "tuning time: seconds, or with m, h, d (without\n"
			 "it the default plan is measured once)\n"),
	   TUNECTL_VALUE("trials", "N",
			 "measure at most N candidates (1 to 1000000)\n"),
	   TUNECTL_VALUE("priority", "N",
			 "-1000 to 1000, higher first (default 0)\n"),
	   TUNECTL_FLAG("json",
			"print the job as one JSON object on stdout (with\n"
			"--wait, at its end; the progress goes to stderr)\n"),
	   SOCKET_OPTION},
	  run_service}, cmd_submit},
	{{"status", "JOB", "the job's state, progress, best time and version\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_status},
	{{"list", NULL, "every job the daemon knows\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_list},
	{{"wait", "JOB",
	  "follow the job as submit --wait does; exit 1 unless it ends done\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_wait},
	{{"cancel", "JOB", "cancel the job\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_cancel},
	{{"watch", "KEY|JOB",
	  "print the events of the key (of the job's key) as they come:\n"
	  "generations, versions, job states; until interrupted, or with\n"
	  "--until-done until the job ends\n",
	  {TUNECTL_FLAG("until-done",
			"JOB only: exit when the job ends (1 if it failed)\n"),
	   TUNECTL_FLAG("json", "one JSON line per event (NDJSON)\n"),
	   SOCKET_OPTION},
	  run_service}, cmd_watch},
	{{"fetch", "KEY|JOB",
	  "the best result so far: key, version, median_ms and device\n",
	  {TUNECTL_VALUE("out", "DIR",
			 "write plan.json (for run --plan), kernel_<n>.c\n"
			 "or .cu, and launch.json into DIR\n"),
	   TUNECTL_VALUE("min-version", "N", "only a version at least N\n"),
	   TUNECTL_VALUE("timeout", "MS",
			 "wait up to MS milliseconds for one (default:\n"
			 "answer at once)\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_service}, cmd_fetch},
	{{"stats", NULL, "the daemon's counters\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_stats},
	{{"cache ls", NULL,
	  "every cached key (per device and codegen): its latest version,\n"
	  "time and the bytes it holds\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_cache_ls},
	{{"cache show", "KEY", "one key's graph, versions and trials\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_cache_show},
	{{"cache prune", NULL,
	  "remove old entries: those older than --max-age, then the oldest\n"
	  "until the cache fits --max-bytes (give one or both)\n",
	  {TUNECTL_VALUE("max-age", "S",
			 "remove what is older: seconds, or with m, h, d\n"),
	   TUNECTL_VALUE("max-bytes", "N",
			 "shrink to N bytes (or with K, M, G, T)\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_service}, cmd_cache_prune},
	{{"cache export", "[KEY...]",
	  "write the keys' graphs and every version of their plans (every\n"
	  "device's) to --out FILE, a file another host imports\n",
	  {TUNECTL_REQUIRED("out", "FILE", "the file to write\n"),
	   TUNECTL_FLAG("all", "every key, instead of the keys given\n"),
	   TUNECTL_VALUE("cache", "DB",
			 "read the cache file DB itself, which no daemon\n"
			 "may hold (offline)\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_transfer}, cmd_cache_export},
	{{"cache import", "FILE",
	  "load an export: each key computed again from its graph and each\n"
	  "plan checked against it; a refused key is named with why (exit\n"
	  "1); other devices' versions are stored, never served here\n",
	  {TUNECTL_VALUE("cache", "DB",
			 "write the cache file DB itself, which no daemon\n"
			 "may hold (offline)\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_transfer}, cmd_cache_import},
	{{"cache quarantine", NULL,
	  "the plans that crashed or hung a worker, never tried again: key,\n"
	  "name, cause, when and plan\n",
	  {TUNECTL_VALUE("out", "DIR",
			 "write each one's repro bundle into DIR/<id>-<key>:\n"
			 "graph.json, plan.json, kernel_<n>.c or .cu,\n"
			 "worker.log and info.json\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_service}, cmd_cache_quarantine},
};

const tunectl_command *tunectl_service_command(size_t i)
{
	return i < sizeof(commands) / sizeof(commands[0]) ? &commands[i].command :
	       NULL;
}
