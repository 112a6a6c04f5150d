/*
 * results.c: the runner's results: trials recorded in the cache, better
 * plans published as new versions, crashes and hangs quarantined (on the
 * writer thread, writer.h), then, back on the loop thread, jobs updated
 * and finished, watchers and waiting fetches told.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kgen.h"
#include "server.h"
#include "writer.h"

static bool is_active(const tuned_job *job)
{
	return job->state == TUNED_JOB_QUEUED || job->state == TUNED_JOB_RUNNING;
}

/* The cache could not store "what" the job found (a full disk, an I/O
 * error): the job fails with that cause, for what it found is lost. The
 * first such failure is the job's error; the log has each. */
static void store_failed(tuned_job *job, const char *what, const cache_error *err)
{
	const char *cause = strstr(err->message, ": ");

	tuned_log(TUNED_ERROR, "job %lld: %s: the cache cannot store %s: %s",
		  (long long)job->id, job->key, what, err->message);
	if (job->store_failed || !is_active(job) || job->helping)
		return; /* a job helped fails on the daemon that holds it */
	job->store_failed = true;
	snprintf(job->error, sizeof(job->error), "the cache cannot store %s: %.200s",
		 what, cause ? cause + 2 : err->message);
}

static enum cache_outcome outcome_of(const char *name)
{
	for (int o = 0; o < CACHE_TRIAL_OUTCOMES; o++)
		if (!strcmp(name, cache_outcome_name(o)))
			return o;
	return CACHE_TRIAL_ERROR;
}

static char *plan_text(const tuned_result *r)
{
	json_t *plan = json_object_get(r->answer, "plan");

	return json_dumps(plan ? plan : r->plan ? r->plan : json_null(),
			  JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
}

/* The name the log gives a plan: the first PLAN_HASH_HEX hex digits of
 * the SHA-256 of its canonical text (compact, keys sorted), so that the
 * lines about one plan can be found together (docs/operations.md). */
#define PLAN_HASH_HEX 12

static void plan_hash(const char *plan, char hash[PLAN_HASH_HEX + 1])
{
	char hex[SCHED_KEY_HEX + 1];

	sched_sha256_hex(plan, strlen(plan), hex);
	memcpy(hash, hex, PLAN_HASH_HEX);
	hash[PLAN_HASH_HEX] = 0;
}

/* How the worker died, for the log: the signal that killed it, or the
 * time limit it ran past. */
static void log_worker_death(const tuned_job *job, const tuned_result *r,
			     const char *hash)
{
	if (!strcmp(r->outcome, "timeout"))
		tuned_log(TUNED_WARN, "job %lld: %s: worker hung on plan %s: no answer "
			  "within its time limit of %.1f s (%s)", (long long)job->id,
			  job->key, hash, r->limit_s, r->detail);
	else if (r->term_signal)
		tuned_log(TUNED_WARN, "job %lld: %s: worker crashed on plan %s: killed by "
			  "signal %d (%s)", (long long)job->id, job->key, hash,
			  r->term_signal, strsignal(r->term_signal));
	else
		tuned_log(TUNED_WARN, "job %lld: %s: worker crashed on plan %s: %s",
			  (long long)job->id, job->key, hash, r->detail);
}

/* What the writer thread stores of one result, decided on the loop when
 * the results came (a version of a job cancelled by then is dropped), and
 * what came of it. */
typedef struct result_store {
	tuned_result *r;
	tuned_daemon *d;
	int64_t job;
	char key[PROTO_KEY_HEX + 1];
	bool publish;            /* VERSION: the job was active */
	bool helped;             /* found helping the job's holder (fleet.c) */
	int version;             /* VERSION: published as this version, or 0 */
	cache_error trial_err, quarantine_err, publish_err; /* code < 0: failed */
} result_store;

/* A plan that crashed or hung its worker, quarantined with its repro
 * bundle so that it is never tried again. */
static void store_quarantine(cache *c, result_store *st, const char *plan)
{
	const tuned_result *r = st->r;
	char *sources = r->sources ? json_dumps(r->sources, JSON_COMPACT) : NULL;
	bool hung = !strcmp(r->outcome, "timeout");
	cache_quarantine_entry q = {
		.graph = st->key, .device = st->d->device,
		.codegen = KGEN_CODEGEN_VERSION, .plan = plan, .reason = r->detail,
		.cause = r->outcome, .signal = r->term_signal,
		.time_limit_s = hung ? r->limit_s : 0, .seed = st->job,
		.graph_json = r->graph, .sources = sources,
		.worker_log = r->worker_log};

	cache_quarantine(c, &q, &st->quarantine_err);
	free(sources);
}

static bool killed_worker(const tuned_result *r)
{
	return !strcmp(r->outcome, "crash") || !strcmp(r->outcome, "timeout");
}

static void store_trial(cache *c, result_store *st)
{
	const tuned_result *r = st->r;
	char *plan = plan_text(r);
	cache_trial trial = {st->key, st->d->device, KGEN_CODEGEN_VERSION,
			     plan ? plan : "null", outcome_of(r->outcome),
			     json_number_value(json_object_get(r->answer, "total_ms")),
			     r->detail};

	cache_record_trial(c, &trial, &st->trial_err);
	if (killed_worker(r))
		store_quarantine(c, st, trial.plan);
	free(plan);
}

/* The log and the job's error after a plan killed its worker. */
static void told_quarantine(tuned_job *job, const result_store *st)
{
	const tuned_result *r = st->r;
	char *plan = plan_text(r), hash[PLAN_HASH_HEX + 1];

	plan_hash(plan ? plan : "null", hash);
	log_worker_death(job, r, hash);
	if (st->quarantine_err.code < 0)
		store_failed(job, "a quarantined plan", &st->quarantine_err);
	else
		tuned_log(TUNED_WARN, "job %lld: %s: plan %s quarantined (%s), never to be "
			  "tried again (tunectl cache quarantine)", (long long)job->id,
			  job->key, hash, !strcmp(r->outcome, "timeout") ? "hung" : "crashed");
	free(plan);
}

static void told_trial(tuned_job *job, const result_store *st)
{
	if (st->trial_err.code < 0)
		store_failed(job, "a trial", &st->trial_err);
	if (killed_worker(st->r))
		told_quarantine(job, st);
}

/* "array" as compact text, "[]" when it is missing. */
static char *array_text(const json_t *array)
{
	return array ? json_dumps(array, JSON_COMPACT) : strdup("[]");
}

/* The launch of each kernel, with the kernel's own median and spread. */
static char *launch_text(const json_t *answer)
{
	json_t *launch = json_deep_copy(json_object_get(answer, "launch")), *entry;
	const json_t *times = json_object_get(answer, "kernels");
	char *text;
	size_t i;

	json_array_foreach(launch, i, entry) {
		const json_t *t = json_array_get(times, i);

		json_object_set(entry, "median_ms", json_object_get(t, "median_ms"));
		json_object_set(entry, "spread_ms", json_object_get(t, "spread_ms"));
	}
	text = array_text(launch);
	json_decref(launch);
	return text;
}

/* A candidate the runner found faster than the key's version, by more
 * than the noise of timing them side by side, becomes the next version;
 * its speedup is over the version the job started from, timed beside it. */
static void store_version(cache *c, result_store *st)
{
	const tuned_result *r = st->r;
	char *plan = json_dumps(r->plan, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	char *sources = array_text(json_object_get(r->answer, "sources"));
	char *launch = launch_text(r->answer), found_by[32];
	cache_plan p = {st->key, st->d->device, KGEN_CODEGEN_VERSION, 0, plan, sources,
			NULL, 0, launch, r->median_ms, r->spread_ms, found_by, 0};

	snprintf(found_by, sizeof(found_by), "generation %d", r->generation);
	if (!plan || !sources || !launch)
		st->publish_err = (cache_error){CACHE_ENOMEM, "cannot publish a "
						"version: out of memory"};
	else
		cache_publish(c, &p, &st->version, &st->publish_err);
	free(plan);
	free(sources);
	free(launch);
}

/* A shared (PostgreSQL) cache holds a version as fast or faster, from
 * another daemon or an earlier run: not published, and the job goes on.
 * The log says why, naming the key and the plan. */
static void refused_stale(const tuned_job *job, const result_store *st)
{
	char *plan = plan_text(st->r), hash[PLAN_HASH_HEX + 1] = "?";

	if (plan)
		plan_hash(plan, hash);
	tuned_log(TUNED_INFO, "job %lld: %s: plan %s not published: %s",
		  (long long)job->id, job->key, hash, st->publish_err.message);
	free(plan);
}

/* The version stored, told: even to the watchers of a job cancelled
 * while it was being stored, for it was published before the cancel's
 * reply. */
static void on_version(tuned_daemon *d, tuned_job *job, const result_store *st)
{
	const tuned_result *r = st->r;

	if (st->publish_err.code == CACHE_ESTALE)
		return refused_stale(job, st);
	if (st->publish_err.code < 0)
		return store_failed(job, "the new version", &st->publish_err);
	job->best_ms = r->median_ms;
	job->first_ms = r->first_ms;
	job->version = st->version;
	tuned_log(TUNED_INFO, "job %lld: %s version %d, %.4f ms", (long long)job->id,
		  job->key, st->version, r->median_ms);
	tuned_broadcast(d, job->key, PROTO_EVENT_VERSION,
			json_pack("{s:s, s:i, s:s, s:f, s:f, s:o, s:o, s:I}", "key",
				  job->key, "version", st->version, "device", d->device,
				  "median_ms", r->median_ms, "spread_ms", r->spread_ms,
				  "first_ms", r->first_ms > 0 ? json_real(r->first_ms) :
							       json_null(),
				  "speedup", r->first_ms > 0 && r->median_ms > 0 ?
					     json_real(r->first_ms / r->median_ms) :
					     json_null(),
				  "job", (json_int_t)job->id));
	tuned_wake_waiters(d, job->key, st->version);
}

static void broadcast_progress(tuned_daemon *d, tuned_job *job, int quarantined)
{
	tuned_broadcast(d, job->key, PROTO_EVENT_PROGRESS,
			json_pack("{s:I, s:s, s:i, s:o, s:i, s:i}", "job", (json_int_t)job->id,
				  "key", job->key, "trials", job->trials,
				  "best_ms", job->best_ms > 0 ? json_real(job->best_ms) : json_null(),
				  "version", job->version, "quarantined", quarantined));
}

static void on_trial(tuned_daemon *d, tuned_job *job, const result_store *st)
{
	const tuned_result *r = st->r;

	job->trials++;
	told_trial(job, st);
	if (strcmp(r->outcome, "ok") && !job->store_failed)
		snprintf(job->error, sizeof(job->error), "%.15s: %.230s", r->outcome, r->detail);
	broadcast_progress(d, job, r->quarantined);
}

/* A quarantined candidate was skipped: not a trial, but progress. */
static void on_skipped(tuned_daemon *d, tuned_job *job, const tuned_result *r)
{
	char *plan = plan_text(r);
	char hash[PLAN_HASH_HEX + 1] = "?";

	if (plan)
		plan_hash(plan, hash);
	tuned_log(TUNED_INFO, "job %lld: %s: plan %s is quarantined: not tried again",
		  (long long)job->id, job->key, hash);
	broadcast_progress(d, job, r->quarantined);
	free(plan);
}

static void on_lost(const tuned_job *job, const tuned_result *r)
{
	tuned_log(TUNED_ERROR, "job %lld: %s: the worker died re-timing plans side by "
		  "side (%s); which plan killed it cannot be told, so none is quarantined",
		  (long long)job->id, job->key, r->detail);
}

/* The generation event; the log says what its re-timing found. */
static void on_generation(tuned_daemon *d, tuned_job *job, const tuned_result *r)
{
	json_t *data = json_deep_copy(r->data);
	json_t *retimed = json_object_get(data, "retimed");

	json_object_set_new(data, "key", json_string(job->key));
	if (json_is_object(retimed))
		tuned_log(TUNED_INFO, "job %lld: generation %lld re-timed: version %.4g ms, "
			  "challenger %.4g ms, faster in %lld of %lld rounds: %s",
			  (long long)job->id,
			  (long long)json_integer_value(json_object_get(data, "generation")),
			  json_number_value(json_object_get(retimed, "version_ms")),
			  json_number_value(json_object_get(retimed, "challenger_ms")),
			  (long long)json_integer_value(json_object_get(retimed, "rounds_won")),
			  (long long)json_integer_value(json_object_get(retimed, "rounds")),
			  json_is_true(json_object_get(retimed, "published")) ?
				  "published" : "kept the version");
	tuned_broadcast(d, job->key, PROTO_EVENT_GENERATION, data);
}

/* The job is over: done when the key has a version (this job's or an
 * earlier one), failed otherwise or when the cache could not store what
 * it found; left running when the daemon is stopping, so that it
 * resumes. */
static void on_end(tuned_daemon *d, tuned_job *job, const tuned_result *r)
{
	if (r->stopped || !is_active(job))
		return;
	if (r->cancelled)
		tuned_job_finish(job, TUNED_JOB_CANCELLED, "cancelled");
	else if (r->detail[0])
		tuned_job_finish(job, TUNED_JOB_FAILED, r->detail);
	else if (job->store_failed)
		tuned_job_finish(job, TUNED_JOB_FAILED, job->error);
	else if (job->version > 0 || tuned_cached_version(d, job->key) > 0)
		tuned_job_finish(job, TUNED_JOB_DONE, NULL);
	else
		tuned_job_finish(job, TUNED_JOB_FAILED, job->error[0] ? job->error :
				 "no candidate verified");
	snprintf(job->ended, sizeof(job->ended), "%s", r->ended);
	tuned_log(TUNED_INFO, "job %lld %s%s%s", (long long)job->id,
		  tuned_job_state_name(job->state), job->ended[0] ? ": " : "",
		  job->ended);
	tuned_broadcast(d, job->key, PROTO_EVENT_JOB, tuned_job_json(job));
	tuned_fail_waiters_of_job(d, job);
}

void tuned_fail_waiters_of_job(tuned_daemon *d, const tuned_job *job)
{
	if (job->state == TUNED_JOB_CANCELLED)
		tuned_fail_waiters(d, job->key, PROTO_ECANCELLED, "the job was cancelled");
	else if (job->state == TUNED_JOB_FAILED)
		tuned_fail_waiters(d, job->key, PROTO_EINTERNAL, job->error);
}

/* What the runner still sends for a job cancelled while it ran (it ends
 * after the trials in flight): the trials are kept, as what the plans
 * did, but the job is not changed and nothing is published, for cancel
 * promised that no version comes after its reply. */
static void on_result_after_cancel(tuned_job *job, const result_store *st)
{
	if (st->r->kind == TUNED_RESULT_VERSION)
		tuned_log(TUNED_INFO, "job %lld: %s: a version found after the job was "
			  "cancelled is dropped", (long long)job->id, job->key);
	if (st->r->kind == TUNED_RESULT_TRIAL)
		told_trial(job, st);
}

/* What the search of a job another daemon holds found here (fleet.c): its
 * trials and versions go to the shared cache and this daemon's watchers;
 * the job's row stays its holder's. */
static void on_helped_result(tuned_daemon *d, tuned_job *job, const result_store *st)
{
	const tuned_result *r = st->r;

	switch (r->kind) {
	case TUNED_RESULT_TRIAL: job->helped_trials++; return told_trial(job, st);
	case TUNED_RESULT_VERSION:
		if (st->publish)
			on_version(d, job, st);
		return;
	case TUNED_RESULT_GENERATION: return on_generation(d, job, r);
	case TUNED_RESULT_END:
		job->helping = false;
		tuned_log(TUNED_INFO, "job %lld: %s: helped with %d trials%s%s",
			  (long long)job->id, job->key, job->helped_trials,
			  r->ended[0] || r->detail[0] ? ", then " : "",
			  r->ended[0] ? r->ended : r->detail);
		return;
	case TUNED_RESULT_SKIPPED: return on_skipped(d, job, r);
	case TUNED_RESULT_LOST: return on_lost(job, r);
	case TUNED_RESULT_STARTED: return;
	}
}

static void on_result(tuned_daemon *d, tuned_job *job, const result_store *st)
{
	const tuned_result *r = st->r;

	if (st->helped)
		return on_helped_result(d, job, st);
	if (r->kind == TUNED_RESULT_VERSION && st->publish)
		return on_version(d, job, st);
	if (!is_active(job) && r->kind != TUNED_RESULT_END)
		return on_result_after_cancel(job, st);
	switch (r->kind) {
	case TUNED_RESULT_STARTED:
		if (job->state != TUNED_JOB_QUEUED)
			return;
		job->state = TUNED_JOB_RUNNING;
		return tuned_broadcast(d, job->key, PROTO_EVENT_JOB, tuned_job_json(job));
	case TUNED_RESULT_TRIAL: return on_trial(d, job, st);
	case TUNED_RESULT_VERSION: return; /* not published: the job had ended */
	case TUNED_RESULT_GENERATION: return on_generation(d, job, r);
	case TUNED_RESULT_END: return on_end(d, job, r);
	case TUNED_RESULT_SKIPPED: return on_skipped(d, job, r);
	case TUNED_RESULT_LOST: return on_lost(job, r);
	}
}

/* A batch of results, taken from the runner at one wake-up of the loop. */
typedef struct result_batch {
	tuned_daemon *d;
	int n;
	result_store stores[];
} result_batch;

/* On the writer thread. */
static void store_results(cache *c, void *data)
{
	result_batch *b = data;

	for (int i = 0; i < b->n; i++) {
		result_store *st = &b->stores[i];

		if (st->r->kind == TUNED_RESULT_TRIAL)
			store_trial(c, st);
		else if (st->r->kind == TUNED_RESULT_VERSION && st->publish)
			store_version(c, st);
	}
}

/* Back on the loop, once stored: the jobs change, then are saved. */
static void stored_results(void *data)
{
	result_batch *b = data;
	tuned_daemon *d = b->d;

	for (int i = 0; i < b->n; i++) {
		tuned_job *job = tuned_jobs_find(&d->jobs, b->stores[i].job);

		if (job) {
			on_result(d, job, &b->stores[i]);
			/* a helped job's row is its holder's to write */
			job->dirty |= !b->stores[i].helped;
		}
		tuned_result_free(b->stores[i].r);
	}
	free(b);
	tuned_save_jobs(d);
}

static int count_results(const tuned_result *r)
{
	int n = 0;

	for (; r; r = r->next)
		n++;
	return n;
}

/* What to store of each result, decided now: a version of a job that has
 * ended (cancelled) is not published. Results of jobs the daemon no
 * longer knows, or no longer holds (another daemon of a shared queue took
 * it: fleet.c), are dropped. */
static result_batch *batch_of(tuned_daemon *d, tuned_result *r)
{
	result_batch *b = calloc(1, sizeof(*b) + (size_t)count_results(r) *
				 sizeof(result_store));
	tuned_result *next;

	if (!b)
		return NULL;
	b->d = d;
	for (; r; r = next) {
		tuned_job *job = tuned_jobs_find(&d->jobs, r->job);

		next = r->next;
		if (!job || !(job->claimed || job->helping)) {
			tuned_result_free(r);
			continue;
		}
		b->stores[b->n++] = (result_store){
			.r = r,
			.d = d,
			.job = job->id,
			.publish = r->kind == TUNED_RESULT_VERSION && is_active(job),
			.helped = job->helping};
		snprintf(b->stores[b->n - 1].key, PROTO_KEY_HEX + 1, "%s", job->key);
	}
	return b;
}

static void free_results(tuned_result *r)
{
	for (tuned_result *next; r; r = next) {
		next = r->next;
		tuned_result_free(r);
	}
}

void tuned_on_results(uv_async_t *async)
{
	tuned_daemon *d = async->data;
	tuned_result *r = tuned_runner_take_results(d->runner);
	result_batch *b;

	if (!r)
		return;
	if (!(b = batch_of(d, r))) {
		tuned_log(TUNED_ERROR, "out of memory: the runner's results are lost");
		return free_results(r);
	}
	if (tuned_write(d->writer, store_results, stored_results, b) < 0) {
		tuned_log(TUNED_ERROR, "out of memory: the runner's results are lost");
		for (int i = 0; i < b->n; i++)
			tuned_result_free(b->stores[i].r);
		free(b);
	}
}
