/*
 * runner.c: the threads that run jobs.
 *
 * The loop thread hands a job to the runner; one of its threads asks its
 * strategy for plans and has each measured by its own tuned-worker
 * process (tuner_worker_ask, which blocks that thread only). Every trial's
 * outcome goes back to the loop thread through a queue and a uv_async
 * wake-up; the loop thread alone touches jobs, the cache and clients.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "runner.h"
#include "scheduler.h"
#include "tuner.h"

/* A candidate whose first run is this many times slower than the best is
 * not timed further (tuner/measure.c, cutoff_ms). */
#define CUTOFF 3.0

typedef struct runner_task {
	int64_t job;
	char *graph;
	double budget_s;
	int priority;
	struct runner_task *next;
} runner_task;

static void push_result(tuned_runner *r, tuned_result *result)
{
	uv_mutex_lock(&r->lock);
	if (r->results_tail)
		r->results_tail->next = result;
	else
		r->results_head = result;
	r->results_tail = result;
	uv_mutex_unlock(&r->lock);
	uv_async_send(r->notify);
}

static bool is_cancelled(tuned_runner *r, int64_t job)
{
	bool cancelled = false;

	uv_mutex_lock(&r->lock);
	for (int i = 0; i < r->ncancelled; i++)
		cancelled |= r->cancelled[i] == job;
	cancelled |= r->stopping;
	uv_mutex_unlock(&r->lock);
	return cancelled;
}

/* A job that ended needs no cancel mark any more: the marks stay few. */
static void forget_cancel(tuned_runner *r, int64_t job)
{
	uv_mutex_lock(&r->lock);
	for (int i = 0; i < r->ncancelled; i++)
		if (r->cancelled[i] == job)
			r->cancelled[i--] = r->cancelled[--r->ncancelled];
	uv_mutex_unlock(&r->lock);
}

/* The outcome's name as the cache and clients know it. */
static void describe_reply(const tuner_reply *reply, tuned_result *result)
{
	static const char *const outcomes[] = {
		[TUNER_ANSWERED] = "ok", [TUNER_CRASHED] = "crash",
		[TUNER_TIMED_OUT] = "timeout", [TUNER_GARBLED] = "error",
	};
	const char *kind = json_string_value(json_object_get(reply->answer, "kind"));

	snprintf(result->outcome, sizeof(result->outcome), "%s",
		 reply->answer ? (kind ? kind : "error") : outcomes[reply->outcome]);
	snprintf(result->detail, sizeof(result->detail), "%s",
		 json_string_value(json_object_get(reply->answer, "error")) ?:
		 reply->answer ? "" : reply->detail);
	result->answer = json_incref(reply->answer);
}

static tuned_result *result_new(int64_t job)
{
	tuned_result *result = calloc(1, sizeof(*result));

	if (result)
		result->job = job;
	return result;
}

/* One candidate measured by the worker of this thread; returns the
 * worker's answer (NULL when there was none) for the strategy. */
static json_t *run_trial(tuned_runner *r, tuner_worker *worker, runner_task *task,
			 json_t *plan, int trial, double limit_s, double best_ms)
{
	json_t *request = json_pack("{s:s, s:O, s:i}", "graph", task->graph,
				    "plan", plan, "seed", trial + 1);

	if (request && isfinite(best_ms))
		json_object_set_new(request, "cutoff_ms", json_real(CUTOFF * best_ms));
	tuned_result *result = result_new(task->job);
	tuner_reply reply = {0};

	if (!request || !result || tuner_worker_ask(worker, request, limit_s, &reply) < 0) {
		if (result)
			snprintf(result->outcome, sizeof(result->outcome), "error");
		if (result)
			snprintf(result->detail, sizeof(result->detail), "%s",
				 reply.detail[0] ? reply.detail : "out of memory");
	} else {
		describe_reply(&reply, result);
	}
	if (result) {
		result->plan = json_incref(plan);
		push_result(r, result);
	}
	json_decref(request);
	return reply.answer;
}

/* A job with a budget is searched (genetic); without, it runs the
 * default plan once. */
static tuner_strategy *strategy_for(const runner_task *task,
				    const sched_graph *graph)
{
	return tuner_strategy_new(task->budget_s > 0 ? "genetic" : "default", graph,
				  (unsigned)task->job);
}

/* Runs the strategy until it is done, the budget is spent (the first
 * trial always runs), the job is cancelled or the daemon stops; then says
 * the job is over. */
static void run_job(tuned_runner *r, tuner_worker *worker, runner_task *task)
{
	sched_graph *graph = NULL;
	tuner_strategy *strategy = NULL;
	double limit = 10;
	tuned_result *end = result_new(task->job), *start = result_new(task->job);
	uint64_t deadline = uv_hrtime() + (uint64_t)(task->budget_s * 1e9);
	json_t *plan, *answer = NULL;
	int trial = 0;

	if (sched_graph_read_string(task->graph, &graph, NULL) == 0) {
		limit = tuner_time_limit(graph, r->backend);
		strategy = strategy_for(task, graph);
	}
	if (start) {
		start->started = true;
		push_result(r, start);
	}
	while (strategy && !is_cancelled(r, task->job) &&
	       (task->budget_s <= 0 || trial == 0 || uv_hrtime() < deadline) &&
	       (plan = tuner_strategy_next(strategy, answer))) {
		json_decref(answer);
		answer = run_trial(r, worker, task, plan, trial++, limit,
				   tuner_strategy_best(strategy));
		json_decref(plan);
	}
	json_decref(answer);
	if (end) {
		end->last = true;
		end->stopped = r->stopping;
		end->cancelled = !r->stopping && is_cancelled(r, task->job);
		push_result(r, end);
	}
	forget_cancel(r, task->job);
	tuner_strategy_free(strategy);
	sched_graph_free(graph);
}

static runner_task *take_task(tuned_runner *r)
{
	runner_task *task;

	uv_mutex_lock(&r->lock);
	while (!r->stopping && !r->tasks)
		uv_cond_wait(&r->wake, &r->lock);
	task = r->stopping ? NULL : r->tasks;
	if (task)
		r->tasks = task->next;
	uv_mutex_unlock(&r->lock);
	return task;
}

typedef struct runner_thread {
	tuned_runner *runner;
	tuner_worker *worker;
} runner_thread;

static void thread_main(void *arg)
{
	runner_thread *t = arg;
	runner_task *task;

	while ((task = take_task(t->runner))) {
		run_job(t->runner, t->worker, task);
		free(task->graph);
		free(task);
	}
}

int tuned_runner_start(tuned_runner *r, uv_async_t *notify, int nthreads,
		       const char *backend, const char *worker_path)
{
	const char *argv[] = {"tuned-worker", "--backend", backend, NULL};

	*r = (tuned_runner){.notify = notify, .nthreads = nthreads};
	snprintf(r->backend, sizeof(r->backend), "%s", backend);
	if (uv_mutex_init(&r->lock) || uv_cond_init(&r->wake))
		return -1;
	r->threads = calloc(nthreads, sizeof(runner_thread));
	r->handles = calloc(nthreads, sizeof(uv_thread_t));
	if (!r->threads || !r->handles)
		return -1;
	for (int i = 0; i < nthreads; i++) {
		runner_thread *t = &((runner_thread *)r->threads)[i];

		t->runner = r;
		if (!(t->worker = tuner_worker_new(worker_path, argv)) ||
		    uv_thread_create(&r->handles[i], thread_main, t))
			return -1;
		r->started++;
	}
	return 0;
}

/* Queues the job behind those of the same or higher priority. */
int tuned_runner_submit(tuned_runner *r, int64_t job, const char *graph,
			double budget_s, int priority)
{
	runner_task *task = calloc(1, sizeof(*task)), **at;

	if (!task || !(task->graph = strdup(graph))) {
		free(task);
		return -1;
	}
	task->job = job;
	task->budget_s = budget_s;
	task->priority = priority;
	uv_mutex_lock(&r->lock);
	for (at = &r->tasks; *at && (*at)->priority >= priority; at = &(*at)->next)
		;
	task->next = *at;
	*at = task;
	uv_cond_signal(&r->wake);
	uv_mutex_unlock(&r->lock);
	return 0;
}

/* A job not yet taken is dropped; a running one stops after its trial. */
void tuned_runner_cancel(tuned_runner *r, int64_t job)
{
	uv_mutex_lock(&r->lock);
	for (runner_task **at = &r->tasks; *at; at = &(*at)->next)
		if ((*at)->job == job) {
			runner_task *task = *at;

			*at = task->next;
			free(task->graph);
			free(task);
			uv_mutex_unlock(&r->lock);
			return;
		}
	if (r->ncancelled < TUNED_MAX_CANCELLED)
		r->cancelled[r->ncancelled++] = job;
	uv_mutex_unlock(&r->lock);
}

tuned_result *tuned_runner_take_results(tuned_runner *r)
{
	tuned_result *results;

	uv_mutex_lock(&r->lock);
	results = r->results_head;
	r->results_head = r->results_tail = NULL;
	uv_mutex_unlock(&r->lock);
	return results;
}

void tuned_result_free(tuned_result *result)
{
	json_decref(result->answer);
	json_decref(result->plan);
	free(result);
}

/* Stops the threads: no new job starts, running workers are killed (their
 * trial is abandoned and its job stays queued in the saved state). */
void tuned_runner_stop(tuned_runner *r)
{
	runner_thread *threads = r->threads;

	uv_mutex_lock(&r->lock);
	r->stopping = true;
	uv_cond_broadcast(&r->wake);
	for (int i = 0; i < r->started; i++)
		if (tuner_worker_pid(threads[i].worker) > 0)
			kill(tuner_worker_pid(threads[i].worker), SIGKILL);
	uv_mutex_unlock(&r->lock);
	for (int i = 0; i < r->started; i++)
		uv_thread_join(&r->handles[i]);
	for (int i = 0; i < r->nthreads && threads; i++)
		tuner_worker_free(threads[i].worker);
	while (r->tasks) {
		runner_task *next = r->tasks->next;

		free(r->tasks->graph);
		free(r->tasks);
		r->tasks = next;
	}
	for (tuned_result *res = tuned_runner_take_results(r), *next; res; res = next) {
		next = res->next;
		tuned_result_free(res);
	}
	free(r->threads);
	free(r->handles);
	uv_cond_destroy(&r->wake);
	uv_mutex_destroy(&r->lock);
}

struct tuner_worker *tuned_runner_worker(tuned_runner *r, int i)
{
	return ((runner_thread *)r->threads)[i].worker;
}
