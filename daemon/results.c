/*
 * results.c: the runner's results on the loop thread: trials recorded in
 * the cache, better plans published as new versions, crashes and hangs
 * quarantined, jobs finished, watchers and waiting fetches told.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kgen.h"
#include "server.h"

#define NOISE 0.03 /* a new version must be at least 3% faster */

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

static void record_trial(tuned_daemon *d, tuned_job *job, const tuned_result *r,
			 const char *plan)
{
	cache_trial trial = {job->key, d->device, KGEN_CODEGEN_VERSION, plan,
			     outcome_of(r->outcome),
			     json_number_value(json_object_get(r->answer, "total_ms")),
			     r->detail};
	cache_error err = {0};

	if (cache_record_trial(d->cache, &trial, &err) < 0)
		tuned_log(TUNED_ERROR, "job %lld: cannot record a trial: %s",
			  (long long)job->id, err.message);
	if (trial.outcome == CACHE_TRIAL_CRASH || trial.outcome == CACHE_TRIAL_TIMEOUT) {
		cache_quarantine_entry q = {job->key, d->device, KGEN_CODEGEN_VERSION,
					    plan, r->detail, NULL};

		cache_quarantine(d->cache, &q, NULL);
	}
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

/* A verified trial faster than the job's best by more than the noise of
 * timing becomes the next version. */
static void publish_if_better(tuned_daemon *d, tuned_job *job, const tuned_result *r,
			      const char *plan)
{
	double median = json_number_value(json_object_get(r->answer, "total_ms"));
	double spread = json_number_value(json_object_get(r->answer, "total_spread_ms"));
	char *sources = array_text(json_object_get(r->answer, "sources"));
	char *launch = launch_text(r->answer);
	cache_plan p = {job->key, d->device, KGEN_CODEGEN_VERSION, 0, plan, sources,
			NULL, 0, launch, median, spread, "default", 0};
	cache_error err = {0};
	int version;

	if (job->best_ms > 0 && median >= job->best_ms * (1 - NOISE)) {
		free(sources);
		free(launch);
		return;
	}
	if (cache_publish(d->cache, &p, &version, &err) < 0) {
		tuned_log(TUNED_ERROR, "job %lld: cannot publish: %s", (long long)job->id,
			  err.message);
	} else {
		job->best_ms = median;
		job->version = version;
		tuned_log(TUNED_INFO, "job %lld: %s version %d, %.4f ms", (long long)job->id,
			  job->key, version, median);
		tuned_broadcast(d, job->key, PROTO_EVENT_VERSION,
				json_pack("{s:s, s:i, s:s, s:f, s:f, s:I}", "key", job->key,
					  "version", version, "device", d->device,
					  "median_ms", median, "spread_ms", spread,
					  "job", (json_int_t)job->id));
		tuned_wake_waiters(d, job->key, version);
	}
	free(sources);
	free(launch);
}

static void on_trial(tuned_daemon *d, tuned_job *job, const tuned_result *r)
{
	char *plan = plan_text(r);

	job->trials++;
	record_trial(d, job, r, plan ? plan : "null");
	if (!strcmp(r->outcome, "ok"))
		publish_if_better(d, job, r, plan ? plan : "null");
	else
		snprintf(job->error, sizeof(job->error), "%.15s: %.230s", r->outcome, r->detail);
	tuned_broadcast(d, job->key, PROTO_EVENT_PROGRESS,
			json_pack("{s:I, s:s, s:i, s:o, s:i}", "job", (json_int_t)job->id,
				  "key", job->key, "trials", job->trials,
				  "best_ms", job->best_ms > 0 ? json_real(job->best_ms) : json_null(),
				  "version", job->version));
	free(plan);
}

/* The job is over: done when a trial was published, failed otherwise;
 * left running when the daemon is stopping, so that it resumes. */
static void on_end(tuned_daemon *d, tuned_job *job, const tuned_result *r)
{
	if (r->stopped)
		return;
	if (r->cancelled)
		tuned_job_finish(job, TUNED_JOB_CANCELLED, "cancelled");
	else if (job->version > 0)
		tuned_job_finish(job, TUNED_JOB_DONE, NULL);
	else
		tuned_job_finish(job, TUNED_JOB_FAILED, job->error[0] ? job->error :
				 "no candidate verified");
	tuned_log(TUNED_INFO, "job %lld %s", (long long)job->id,
		  tuned_job_state_name(job->state));
	tuned_broadcast(d, job->key, PROTO_EVENT_JOB, tuned_job_json(job));
	if (job->state == TUNED_JOB_CANCELLED)
		tuned_fail_waiters(d, job->key, PROTO_ECANCELLED, "the job was cancelled");
	else if (job->state == TUNED_JOB_FAILED)
		tuned_fail_waiters(d, job->key, PROTO_EINTERNAL, job->error);
}

void tuned_on_results(uv_async_t *async)
{
	tuned_daemon *d = async->data;
	tuned_result *r = tuned_runner_take_results(&d->runner), *next;

	for (; r; r = next) {
		tuned_job *job = tuned_jobs_find(&d->jobs, r->job);

		next = r->next;
		if (job && r->started && job->state == TUNED_JOB_QUEUED) {
			job->state = TUNED_JOB_RUNNING;
			tuned_broadcast(d, job->key, PROTO_EVENT_JOB, tuned_job_json(job));
		} else if (job && r->last)
			on_end(d, job, r);
		else if (job)
			on_trial(d, job, r);
		tuned_result_free(r);
	}
	if (tuned_jobs_save(&d->jobs) < 0)
		tuned_log(TUNED_ERROR, "cannot save the job queue to '%s'", d->jobs.path);
}
