/*
 * follow.c: submit, and following a job or a key: the progress of submit
 * --wait and wait (a bar redrawn on a terminal, lines elsewhere), and
 * watch's events as they come.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common.h"
#include "service.h"

#define POLL_MS 500
#define PLAIN_EVERY_S 10.0

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

/* Whether a job in "state" has ended. */
static bool is_final(const char *state)
{
	return !strcmp(state, "done") || !strcmp(state, "failed") ||
	       !strcmp(state, "cancelled");
}

/* The part of the budget spent, from 0 to 1, or -1 when unknown. */
static double fraction(const progress *pg)
{
	double budget = service_num(pg->job, "budget_s");

	if (!(budget > 0))
		budget = pg->budget_s;
	if (!strcmp(service_str(pg->job, "state"), "done"))
		return 1;
	if (!(budget > 0) || !(pg->running_since > 0))
		return -1;
	return fmin((now_s() - pg->running_since) / budget, 0.99);
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
 * generation line once there is one, else service_describe_job()'s text. */
static void bar_text(progress *pg, const char *described, char *out,
		     size_t size)
{
	long long version = service_int(json_object_get(pg->job, "progress"),
					"version");

	if (!pg->generation[0]) {
		snprintf(out, size, "%s", described);
		return;
	}
	snprintf(out, size, "%s", service_str(pg->job, "state"));
	if (version > 0)
		service_append(out, size, ", version %lld", version);
	service_append(out, size, ", %s", pg->generation);
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
	snprintf(line, sizeof(line), "job %lld [%s]%s ", service_job_number(pg->job),
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
	const char *state = service_str(pg->job, "state");

	if (!strcmp(state, pg->state) && version == pg->version &&
	    now_s() - pg->last_at < PLAIN_EVERY_S)
		return;
	fprintf(pg->out, "job %lld: %s\n", service_job_number(pg->job), text);
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
	fprintf(pg->out, "job %lld: %s\n", service_job_number(pg->job), pg->generation);
	fflush(pg->out);
	pg->printed_n = pg->generation_n;
	pg->printed_at = now_s();
}

static void render(progress *pg)
{
	char text[200];

	if (!pg->running_since && !strcmp(service_str(pg->job, "state"), "running"))
		pg->running_since = now_s();
	service_describe_job(pg->job, text, sizeof(text));
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
		service_generation_text(data, pg->generation, sizeof(pg->generation));
		pg->generation_n = service_int(data, "generation");
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
	const char *error = service_str(job, "error");
	char text[200];

	if (o->as_json) {
		tunectl_print_json(json_incref(job));
		return;
	}
	service_describe_job(job, text, sizeof(text));
	printf("job %lld %s: key %s%s%s\n", service_job_number(job), service_str(job, "state"), service_str(job, "key"), *error ? ": " : "", error);
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
		if (is_final(service_str(job, "state")) ||
		    (rc = follow_events(client, &pg, id, &err)) < 0)
			break;
	}
	if (pg.bar)
		fputc('\n', pg.out);
	if (rc < 0) {
		json_decref(pg.job);
		return service_fail(o, &err);
	}
	finish_line(o, &pg);
	status = strcmp(service_str(pg.job, "state"), "done") ? EXIT_INVALID :
		 EXIT_SUCCESS;
	json_decref(pg.job);
	return status;
}

/* "job 3 key ..." ("what": "" or "backward "), and the version the
 * cache holds already. */
static void print_submitted(const service_options *o, const char *what,
			    const tuned_client_job *job)
{
	FILE *out = o->as_json ? stderr : stdout;

	fprintf(out, "%sjob %lld key %s\n", what, (long long)job->id, job->key);
	if (job->cached_version > 0)
		fprintf(out, "version %lld is cached already: tunectl fetch %s\n",
			(long long)job->cached_version, job->key);
	fflush(out);
}

static json_t *submitted_json(const tuned_client_job *job)
{
	return json_pack("{s:I, s:s, s:I}", "job", (json_int_t)job->id, "key", job->key,
			 "cached_version", (json_int_t)job->cached_version);
}

/* What a submit prints, without --wait: the job (and the backward job,
 * "grad" in JSON). */
static void report_submitted(const service_options *o, const tuned_client_job *job,
			     const tuned_client_job *backward)
{
	json_t *json;

	if (!o->as_json) {
		print_submitted(o, "", job);
		if (backward->id)
			print_submitted(o, "backward ", backward);
		return;
	}
	json = submitted_json(job);
	if (backward->id)
		json_object_set_new(json, "grad", submitted_json(backward));
	tunectl_print_json(json);
}

/* With --wait: follows the job, then the backward job; exit 0 when both
 * ended done. */
static int follow_submitted(tuned_client *client, const service_options *o,
			    const tuned_client_job *job,
			    const tuned_client_job *backward)
{
	int status;

	print_submitted(o, "", job);
	if (backward->id)
		print_submitted(o, "backward ", backward);
	status = wait_job(client, o, job->id);
	if (backward->id && wait_job(client, o, backward->id) != EXIT_SUCCESS)
		status = EXIT_INVALID;
	return status;
}

int service_submit(tuned_client *client, const service_options *o)
{
	char *graph = tuned_read_file(o->arg, NULL);
	tuned_client_submit_options options = {.budget_s = o->budget_s,
					       .priority = o->priority,
					       .trials = o->trials};
	tuned_client_error err;
	tuned_client_job job, backward = {0};
	int rc;

	if (!graph)
		return service_fail_with(o, "%s: cannot read the file (%s)", o->arg,
					 strerror(errno));
	rc = o->grad ? tuned_client_submit_grad(client, graph, &options, o->grad, &job,
						&backward, &err) :
		       tuned_client_submit_with(client, graph, &options, &job, &err);
	free(graph);
	if (rc < 0)
		return service_fail(o, &err);
	if (o->wait)
		return follow_submitted(client, o, &job, &backward);
	report_submitted(o, &job, &backward);
	return EXIT_SUCCESS;
}

int service_wait(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	int64_t id = service_job_id(o->arg);
	json_t *job;
	int rc;

	if (tuned_client_status(client, id, &job, &err) < 0)
		return service_fail(o, &err);
	rc = is_final(service_str(job, "state")) ? 0 :
	     tuned_client_watch(client, service_str(job, "key"), &err);
	json_decref(job);
	return rc < 0 ? service_fail(o, &err) : wait_job(client, o, id);
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
		service_print_json_line(json_pack("{s:s, s:O}", "event", ev->name, "data",
					  ev->data));
		return;
	}
	service_event_text(ev, text, sizeof(text));
	puts(text);
	fflush(stdout);
}

/* Notes the end of the job followed, when "ev" says it ended. */
static void note_end(watcher *w, const tuned_client_event *ev)
{
	const char *state = service_str(ev->data, "state");

	if (w->until_done && !strcmp(ev->name, PROTO_EVENT_JOB) &&
	    service_int(ev->data, "id") == w->job && is_final(state))
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
	snprintf(w->key, sizeof(w->key), "%s", service_str(ev.data, "key"));
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

int service_watch(tuned_client *client, const service_options *o)
{
	watcher w = {.job = service_job_id(o->arg), .until_done = o->until_done};
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
		return service_fail(o, &err);
	return strcmp(w.ended, "failed") ? EXIT_SUCCESS : EXIT_INVALID;
}
