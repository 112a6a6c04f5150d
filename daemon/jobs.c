/*
 * jobs.c: the job queue, kept in a JSON file beside the cache so that it
 * survives a restart: each change is written to a temporary file, synced
 * and renamed over the old one. On load, jobs that were running go back to
 * the queue.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "daemon.h"

#define KEEP_FINISHED 1000

static const char *const state_names[] = {
	[TUNED_JOB_QUEUED] = "queued", [TUNED_JOB_RUNNING] = "running",
	[TUNED_JOB_DONE] = "done", [TUNED_JOB_FAILED] = "failed",
	[TUNED_JOB_CANCELLED] = "cancelled",
};

const char *tuned_job_state_name(enum tuned_job_state state)
{
	return state_names[state];
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

json_t *tuned_rfc3339(double seconds)
{
	time_t t = (time_t)seconds;
	struct tm tm;
	char text[32];

	strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	return json_string(text);
}

/* A time, or null when it is not known. */
static json_t *ms_or_null(double ms)
{
	return ms > 0 ? json_real(ms) : json_null();
}

/* A job as the protocol shows it (docs/protocol.md, "A job"): its
 * speedup is the first version's time over the version's, both as one
 * re-timing measured them when the version was published. */
json_t *tuned_job_json(const tuned_job *job)
{
	json_t *obj = json_pack("{s:I, s:s, s:s, s:s, s:{s:i, s:o, s:i, s:o, s:o}, s:o}",
				"id", (json_int_t)job->id, "key", job->key,
				"name", job->name, "state", state_names[job->state],
				"progress", "trials", job->trials,
				"best_ms", ms_or_null(job->best_ms),
				"version", job->version,
				"first_ms", ms_or_null(job->first_ms),
				"speedup", job->first_ms > 0 && job->best_ms > 0 ?
					   json_real(job->first_ms / job->best_ms) : json_null(),
				"created_at", tuned_rfc3339(job->created_at));

	if (job->state == TUNED_JOB_FAILED && job->error[0])
		json_object_set_new(obj, "error", json_string(job->error));
	return obj;
}

/* A job as the queue file keeps it: everything, times as numbers. */
static json_t *job_storage_json(const tuned_job *job)
{
	return json_pack("{s:I, s:s, s:s, s:s, s:s, s:f, s:i, s:i, s:i, s:f, s:f, "
			 "s:i, s:s, s:f, s:f}",
			 "id", (json_int_t)job->id, "key", job->key, "name", job->name,
			 "graph", job->graph, "state", state_names[job->state],
			 "budget_s", job->budget_s, "max_trials", job->max_trials,
			 "priority", job->priority,
			 "trials", job->trials, "best_ms", job->best_ms,
			 "first_ms", job->first_ms,
			 "version", job->version, "error", job->error,
			 "created_at", job->created_at, "finished_at", job->finished_at);
}

static bool is_finished(const tuned_job *job)
{
	return job->state >= TUNED_JOB_DONE;
}

static tuned_job *job_new(void)
{
	return calloc(1, sizeof(tuned_job));
}

static void job_free(tuned_job *job)
{
	free(job->graph);
	free(job);
}

/* Appends "job" at the end of the list. */
static void append(tuned_jobs *jobs, tuned_job *job)
{
	tuned_job **at = &jobs->head;

	while (*at)
		at = &(*at)->next;
	*at = job;
	if (job->id >= jobs->next_id)
		jobs->next_id = job->id + 1;
}

tuned_job *tuned_jobs_add(tuned_jobs *jobs, const char *key, const char *name,
			  const char *graph, double budget_s, int max_trials,
			  int priority)
{
	tuned_job *job = job_new();

	if (!job || !(job->graph = strdup(graph))) {
		free(job);
		return NULL;
	}
	job->id = jobs->next_id > 0 ? jobs->next_id : 1;
	snprintf(job->key, sizeof(job->key), "%s", key);
	snprintf(job->name, sizeof(job->name), "%s", name);
	job->budget_s = budget_s;
	job->max_trials = max_trials;
	job->priority = priority;
	job->created_at = now_s();
	append(jobs, job);
	return job;
}

tuned_job *tuned_jobs_find(const tuned_jobs *jobs, int64_t id)
{
	for (tuned_job *job = jobs->head; job; job = job->next)
		if (job->id == id)
			return job;
	return NULL;
}

tuned_job *tuned_jobs_find_active(const tuned_jobs *jobs, const char *key)
{
	for (tuned_job *job = jobs->head; job; job = job->next)
		if (job->state <= TUNED_JOB_RUNNING && !strcmp(job->key, key))
			return job;
	return NULL;
}

void tuned_job_finish(tuned_job *job, enum tuned_job_state state, const char *error)
{
	job->state = state;
	job->finished_at = now_s();
	snprintf(job->error, sizeof(job->error), "%s", error ? error : "");
}

/* Drops the oldest finished jobs beyond KEEP_FINISHED. */
static void forget_old(tuned_jobs *jobs)
{
	int finished = 0;

	for (tuned_job *job = jobs->head; job; job = job->next)
		finished += is_finished(job);
	for (tuned_job **at = &jobs->head; *at && finished > KEEP_FINISHED;) {
		tuned_job *job = *at;

		if (!is_finished(job)) {
			at = &job->next;
			continue;
		}
		*at = job->next;
		job_free(job);
		finished--;
	}
}

static int write_synced(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t len = strlen(text), done = 0;

	if (fd < 0)
		return -errno;
	while (done < len) {
		ssize_t n = write(fd, text + done, len - done);

		if (n < 0 && errno != EINTR) {
			close(fd);
			return -errno;
		}
		done += n > 0 ? (size_t)n : 0;
	}
	if (fsync(fd) < 0) {
		close(fd);
		return -errno;
	}
	return close(fd) < 0 ? -errno : 0;
}

int tuned_jobs_save(tuned_jobs *jobs)
{
	json_t *list = json_array();
	char temp[320];
	char *text;
	int rc;

	forget_old(jobs);
	for (tuned_job *job = jobs->head; job; job = job->next)
		json_array_append_new(list, job_storage_json(job));
	text = json_dumps(list, JSON_COMPACT);
	json_decref(list);
	if (!text)
		return -ENOMEM;
	snprintf(temp, sizeof(temp), "%s.tmp", jobs->path);
	rc = write_synced(temp, text);
	free(text);
	if (rc == 0 && rename(temp, jobs->path) < 0)
		rc = -errno;
	return rc;
}

static enum tuned_job_state state_of(const char *name)
{
	for (int s = TUNED_JOB_QUEUED; s <= TUNED_JOB_CANCELLED; s++)
		if (name && !strcmp(name, state_names[s]))
			return s;
	return TUNED_JOB_QUEUED;
}

static tuned_job *job_from_json(json_t *obj)
{
	tuned_job *job = job_new();
	const char *graph = json_string_value(json_object_get(obj, "graph"));

	if (!job || !graph || !(job->graph = strdup(graph))) {
		free(job);
		return NULL;
	}
	job->id = json_integer_value(json_object_get(obj, "id"));
	snprintf(job->key, sizeof(job->key), "%s", json_string_value(json_object_get(obj, "key")) ?: "");
	snprintf(job->name, sizeof(job->name), "%s", json_string_value(json_object_get(obj, "name")) ?: "");
	snprintf(job->error, sizeof(job->error), "%s", json_string_value(json_object_get(obj, "error")) ?: "");
	job->state = state_of(json_string_value(json_object_get(obj, "state")));
	job->budget_s = json_number_value(json_object_get(obj, "budget_s"));
	job->max_trials = (int)json_integer_value(json_object_get(obj, "max_trials"));
	job->priority = (int)json_integer_value(json_object_get(obj, "priority"));
	job->trials = (int)json_integer_value(json_object_get(obj, "trials"));
	job->best_ms = json_number_value(json_object_get(obj, "best_ms"));
	job->first_ms = json_number_value(json_object_get(obj, "first_ms"));
	job->version = (int)json_integer_value(json_object_get(obj, "version"));
	job->created_at = json_number_value(json_object_get(obj, "created_at"));
	job->finished_at = json_number_value(json_object_get(obj, "finished_at"));
	if (job->state == TUNED_JOB_RUNNING)
		job->state = TUNED_JOB_QUEUED;
	return job;
}

/* Loads the jobs of "path"; a missing file is an empty queue. Returns the
 * number of jobs put back in the queue, or a negative errno. */
int tuned_jobs_load(tuned_jobs *jobs, const char *path)
{
	json_error_t jerr;
	json_t *list, *obj;
	size_t i;
	int resumed = 0;

	*jobs = (tuned_jobs){.next_id = 1};
	snprintf(jobs->path, sizeof(jobs->path), "%s", path);
	if (access(path, F_OK) != 0)
		return 0;
	if (!(list = json_load_file(path, 0, &jerr)) || !json_is_array(list)) {
		json_decref(list);
		return -EINVAL;
	}
	json_array_foreach(list, i, obj) {
		tuned_job *job = job_from_json(obj);

		if (!job)
			continue;
		resumed += job->state == TUNED_JOB_QUEUED;
		append(jobs, job);
	}
	json_decref(list);
	return resumed;
}

void tuned_jobs_release(tuned_jobs *jobs)
{
	while (jobs->head) {
		tuned_job *next = jobs->head->next;

		job_free(jobs->head);
		jobs->head = next;
	}
}
