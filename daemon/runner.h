/*
 * runner.h: the threads that run jobs (runner.c).
 */
#ifndef TUNED_RUNNER_H
#define TUNED_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#define TUNED_MAX_CANCELLED 1024

/* What became of one trial of a job, or (last) of the job itself. */
typedef struct tuned_result {
	int64_t job;
	char outcome[16]; /* ok, wrong, compile_error, timeout, crash, error, ... */
	char detail[256];
	json_t *answer;   /* the worker's answer, when it gave one */
	json_t *plan;     /* the plan tried (null: the default plan) */
	bool started;     /* a thread took the job (no trial yet) */
	bool last;        /* the job is over: its strategy is done, or */
	bool cancelled;   /* it was cancelled, or */
	bool stopped;     /* the daemon is stopping */
	struct tuned_result *next;
} tuned_result;

typedef struct tuned_runner {
	uv_mutex_t lock;
	uv_cond_t wake;
	uv_async_t *notify;
	void *threads;
	uv_thread_t *handles;
	int nthreads, started;
	char backend[16];
	bool stopping;
	struct runner_task *tasks;
	tuned_result *results_head, *results_tail;
	int ncancelled;
	int64_t cancelled[TUNED_MAX_CANCELLED];
} tuned_runner;

/* Starts "nthreads" threads, each with its own tuned-worker process at
 * "worker_path" on "backend"; "notify" is signalled when results wait. */
int tuned_runner_start(tuned_runner *r, uv_async_t *notify, int nthreads,
		       const char *backend, const char *worker_path);
int tuned_runner_submit(tuned_runner *r, int64_t job, const char *graph,
			double budget_s, int priority);
void tuned_runner_cancel(tuned_runner *r, int64_t job);
/* The results so far, oldest first, now the caller's. */
tuned_result *tuned_runner_take_results(tuned_runner *r);
void tuned_result_free(tuned_result *result);
void tuned_runner_stop(tuned_runner *r);
/* The worker of thread "i", for counting (tuner_worker_pid, _starts). */
struct tuner_worker *tuned_runner_worker(tuned_runner *r, int i);

#endif
