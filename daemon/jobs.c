/*
 * jobs.c: the job queue, kept in the cache's jobs table (cache/jobs.c) so
 * that it survives a restart and stays consistent with the versions it
 * names: a changed job is written in one transaction, after the versions
 * it names were published. On load, jobs that were running go back to the
 * queue. A queue file of an older tuned ("<cache>.jobs.json") is moved
 * into the table once, then removed; one that is not a queue is moved
 * aside, with a warning.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cache.h"
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
	if (job->ended[0])
		json_object_set_new(obj, "ended", json_string(job->ended));
	return obj;
}

static bool is_finished(const tuned_job *job)
{
	return job->state >= TUNED_JOB_DONE;
}

bool tuned_job_is_active(const tuned_job *job)
{
	return !is_finished(job);
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

/* The id of a new job: the next of the daemon's own, or on a shared
 * queue the database's (cache_new_job_id); 0 with jobs->error saying why. */
static int64_t new_id(tuned_jobs *jobs)
{
	cache_error err = {0};
	int64_t id;

	if (!jobs->shared)
		return jobs->next_id > 0 ? jobs->next_id : 1;
	if (cache_new_job_id(jobs->cache, &id, &err) < 0) {
		snprintf(jobs->error, sizeof(jobs->error), "%s", err.message);
		return 0;
	}
	return id;
}

tuned_job *tuned_jobs_add(tuned_jobs *jobs, uid_t uid, const char *key,
			  const char *name, const char *graph, double budget_s,
			  int max_trials, int priority)
{
	tuned_job *job = job_new();

	jobs->error[0] = 0;
	if (!job || !(job->graph = strdup(graph))) {
		snprintf(jobs->error, sizeof(jobs->error), "out of memory");
		free(job);
		return NULL;
	}
	if (!(job->id = new_id(jobs))) {
		job_free(job);
		return NULL;
	}
	job->claimed = !jobs->shared;
	job->uid = uid;
	snprintf(job->key, sizeof(job->key), "%s", key);
	snprintf(job->name, sizeof(job->name), "%s", name);
	job->budget_s = budget_s;
	job->max_trials = max_trials;
	job->priority = priority;
	job->created_at = now_s();
	job->dirty = true;
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
	job->dirty = true;
	/* "error" may be job->error itself: the reason found during the job */
	if (error != job->error)
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

/* "job" as the cache stores it, with copies of its texts (the loop
 * changes and frees jobs while the writer thread writes them): its graph
 * only while its row has not been written, for the graph never changes. */
static bool copy_row(const tuned_job *job, const char *device, cache_job *row)
{
	*row = (cache_job){
		.id = job->id,
		.uid = job->uid == TUNED_UID_UNKNOWN ? -1 : (int64_t)job->uid,
		.key = strdup(job->key),
		.name = strdup(job->name),
		.graph = job->stored ? NULL : strdup(job->graph),
		.state = state_names[job->state],
		.budget_s = job->budget_s,
		.max_trials = job->max_trials,
		.priority = job->priority,
		.trials = job->trials,
		.best_ms = job->best_ms,
		.first_ms = job->first_ms,
		.version = job->version,
		.error = strdup(job->error),
		.created_at = job->created_at,
		.finished_at = job->finished_at,
		.device = device,
	};
	return row->key && row->name && row->error && (job->stored || row->graph);
}

static void free_row(cache_job *row)
{
	free((char *)row->key);
	free((char *)row->name);
	free((char *)row->graph);
	free((char *)row->error);
}

struct tuned_jobs_changes {
	cache_job *rows;
	int n;
};

static int count_dirty(const tuned_jobs *jobs)
{
	int n = 0;

	for (const tuned_job *job = jobs->head; job; job = job->next)
		n += job->dirty;
	return n;
}

void tuned_jobs_changes_free(tuned_jobs_changes *changes)
{
	if (!changes)
		return;
	for (int i = 0; i < changes->n; i++)
		free_row(&changes->rows[i]);
	free(changes->rows);
	free(changes);
}

tuned_jobs_changes *tuned_jobs_take_changes(tuned_jobs *jobs)
{
	tuned_jobs_changes *changes = calloc(1, sizeof(*changes));
	int n;

	forget_old(jobs);
	n = count_dirty(jobs);
	if (!changes || !(changes->rows = calloc((size_t)n + 1, sizeof(cache_job)))) {
		free(changes);
		return NULL;
	}
	for (tuned_job *job = jobs->head; job; job = job->next) {
		if (!job->dirty)
			continue;
		if (!copy_row(job, jobs->device, &changes->rows[changes->n++])) {
			tuned_jobs_changes_free(changes);
			return NULL;
		}
	}
	for (tuned_job *job = jobs->head; job; job = job->next)
		if (job->dirty)
			job->dirty = false, job->stored = true;
	return changes;
}

int tuned_jobs_changes_write(const tuned_jobs_changes *changes, cache *c,
			     char *why, size_t why_size)
{
	cache_error err = {0};
	int rc;

	if (changes->n == 0)
		return 0;
	rc = cache_put_jobs(c, changes->rows, changes->n, KEEP_FINISHED, &err);
	if (rc < 0) {
		snprintf(why, why_size, "%s", err.message);
		return err.code < 0 ? err.code : -EIO;
	}
	return rc;
}

void tuned_jobs_changes_ended(tuned_jobs *jobs, const tuned_jobs_changes *changes)
{
	for (int i = 0; i < changes->n; i++) {
		tuned_job *job = tuned_jobs_find(jobs, changes->rows[i].id);

		if (job && !tuned_job_is_active(job))
			job->reread = true;
	}
}

void tuned_jobs_changes_lost(tuned_jobs *jobs, const tuned_jobs_changes *changes)
{
	for (int i = 0; i < changes->n; i++) {
		tuned_job *job = tuned_jobs_find(jobs, changes->rows[i].id);

		if (job) {
			job->dirty = true;
			job->stored &= !changes->rows[i].graph;
		}
	}
}

int tuned_jobs_save(tuned_jobs *jobs)
{
	tuned_jobs_changes *changes = tuned_jobs_take_changes(jobs);
	int rc;

	if (!changes) {
		snprintf(jobs->error, sizeof(jobs->error), "out of memory");
		return -ENOMEM;
	}
	rc = tuned_jobs_changes_write(changes, jobs->cache, jobs->error,
				      sizeof(jobs->error));
	if (rc < 0)
		tuned_jobs_changes_lost(jobs, changes);
	tuned_jobs_changes_free(changes);
	return rc < 0 ? rc : 0;
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

	if (!job || !graph || json_integer_value(json_object_get(obj, "id")) < 1 ||
	    !(job->graph = strdup(graph))) {
		free(job);
		return NULL;
	}
	job->dirty = true;
	job->id = json_integer_value(json_object_get(obj, "id"));
	job->uid = TUNED_UID_UNKNOWN; /* the queue file did not keep it */
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

/* Moves a queue file that does not read to "<path>.damaged-<time>" (with
 * "-2", "-3"... when that exists), as a damaged cache is moved, and warns:
 * the daemon starts without its jobs. 0, or a negative code with
 * jobs->error saying why (the file is then left alone). */
static int move_aside(tuned_jobs *jobs, const char *path, const char *damage)
{
	long long now = (long long)time(NULL);
	char to[400];
	struct stat st;
	int rc;

	snprintf(to, sizeof(to), "%s.damaged-%lld", path, now);
	for (int n = 2; lstat(to, &st) == 0; n++)
		snprintf(to, sizeof(to), "%s.damaged-%lld-%d", path, now, n);
	if (rename(path, to) < 0) {
		rc = -errno;
		snprintf(jobs->error, sizeof(jobs->error), "'%s' is not a job queue "
			 "(%s) and cannot be moved aside: %s", path, damage,
			 strerror(-rc));
		return rc;
	}
	tuned_log(TUNED_WARN, "'%s' is not a job queue (%s): moved it to '%s'; "
		  "starting without its jobs", path, damage, to);
	return 0;
}

/* Moves the jobs of an older tuned's queue file "path" into the cache
 * in one transaction, then removes the file: the number of jobs moved,
 * or a negative code with jobs->error saying why (the file is then left
 * alone). A file that cannot be read is reported; one that reads but is
 * not a queue is moved aside. */
static int move_queue_file(tuned_jobs *jobs, const char *path)
{
	json_error_t jerr;
	json_t *list, *obj;
	char temp[320];
	size_t i;
	int moved, rc;

	if (!path || access(path, F_OK) != 0)
		return 0;
	list = json_load_file(path, 0, &jerr);
	if (!list && json_error_code(&jerr) == json_error_cannot_open_file) {
		snprintf(jobs->error, sizeof(jobs->error), "cannot read the queue "
			 "file of an older tuned: %s", jerr.text);
		return -EIO;
	}
	if (!json_is_array(list)) {
		json_decref(list);
		return move_aside(jobs, path, list ? "not a JSON array" : jerr.text);
	}
	json_array_foreach(list, i, obj) {
		tuned_job *job = job_from_json(obj);

		if (job)
			append(jobs, job);
	}
	json_decref(list);
	moved = count_dirty(jobs);
	rc = tuned_jobs_save(jobs);
	tuned_jobs_release(jobs);
	if (rc < 0)
		return rc;
	snprintf(temp, sizeof(temp), "%s.tmp", path);
	unlink(temp);
	if (unlink(path) < 0) {
		rc = -errno;
		snprintf(jobs->error, sizeof(jobs->error), "cannot remove '%s' "
			 "once moved into the cache: %s", path, strerror(-rc));
		return rc;
	}
	return moved;
}

/* The fields of "job" that change, as "row" says. */
static void set_row(tuned_job *job, const cache_job *row)
{
	snprintf(job->error, sizeof(job->error), "%s", row->error ? row->error : "");
	job->state = state_of(row->state);
	job->budget_s = row->budget_s;
	job->max_trials = row->max_trials;
	job->priority = row->priority;
	job->trials = row->trials;
	job->best_ms = row->best_ms;
	job->first_ms = row->first_ms;
	job->version = row->version;
	job->finished_at = row->finished_at;
}

tuned_job *tuned_jobs_add_row(tuned_jobs *jobs, const cache_job *row)
{
	tuned_job *job = job_new();

	if (!job || (row->graph && !(job->graph = strdup(row->graph)))) {
		free(job);
		return NULL;
	}
	job->id = row->id;
	job->uid = row->uid < 0 ? TUNED_UID_UNKNOWN : (uid_t)row->uid;
	snprintf(job->key, sizeof(job->key), "%s", row->key);
	snprintf(job->name, sizeof(job->name), "%s", row->name);
	job->created_at = row->created_at;
	set_row(job, row);
	job->stored = true;
	job->claimed = row->claimed;
	job->held_elsewhere = row->claimed_by && !row->claimed;
	append(jobs, job);
	return job;
}

tuned_job *tuned_jobs_add_copy(tuned_jobs *jobs, const tuned_job *from)
{
	tuned_job *job = job_new();

	if (!job)
		return NULL;
	*job = *from;
	job->graph = NULL;
	job->next = NULL;
	job->claimed = false;
	append(jobs, job);
	return job;
}

/* A job of the daemon's own queue, loaded: one that was running is
 * queued again. */
static int add_row(void *user, const cache_job *row)
{
	tuned_jobs *jobs = user;
	tuned_job *job = tuned_jobs_add_row(jobs, row);

	if (!job) {
		snprintf(jobs->error, sizeof(jobs->error), "out of memory");
		return 1;
	}
	job->claimed = true;
	if (job->state == TUNED_JOB_RUNNING)
		job->state = TUNED_JOB_QUEUED;
	return 0;
}

static int count_queued(const tuned_jobs *jobs)
{
	int n = 0;

	for (const tuned_job *job = jobs->head; job; job = job->next)
		n += job->state == TUNED_JOB_QUEUED;
	return n;
}

int tuned_jobs_load(tuned_jobs *jobs, cache *c, const char *queue_file)
{
	cache_error err = {0};
	int rc;

	*jobs = (tuned_jobs){.next_id = 1, .cache = c, .shared = cache_is_shared(c)};
	if (jobs->shared)
		return 0;
	rc = move_queue_file(jobs, queue_file);
	if (rc < 0)
		return rc;
	jobs->moved = rc;
	if (cache_jobs(c, add_row, jobs, &err) < 0) {
		snprintf(jobs->error, sizeof(jobs->error), "%s", err.message);
		return err.code < 0 ? err.code : -EIO;
	}
	if (jobs->error[0])
		return -ENOMEM;
	return count_queued(jobs);
}

void tuned_jobs_release(tuned_jobs *jobs)
{
	while (jobs->head) {
		tuned_job *next = jobs->head->next;

		job_free(jobs->head);
		jobs->head = next;
	}
}
