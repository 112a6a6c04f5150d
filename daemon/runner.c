/*
 * runner.c: the pipeline that tunes jobs.
 *
 * One measurement thread and N compile threads, each driving its own
 * tuned-worker process (tuner_worker_ask blocks that thread only), and a
 * search thread. All the state below is shared and guarded by one lock,
 * held only for work on the queues (O(jobs)); the threads wait on three
 * condition variables, one per kind of work.
 *
 * The search thread does what takes long in a search, without the lock:
 * it activates a job (reads its graph, starts its search, tells it the
 * key's trials) and proposes each generation, a few genomes at a time,
 * handing each new plan to the compile workers as soon as it is found, so
 * that the loop thread (submit, cancel, stats) never waits on a search
 * and the workers seldom do. A generation is proposed until it is full,
 * its time share (an eighth of the job's budget) is spent, the search
 * finds nothing new, or the job is over; a generation that comes back
 * short or empty is measured as it is, and the generation event says why
 * candidates were dropped. The search is told each outcome by its
 * candidate's handle when the next generation starts.
 *
 * An active job holds one generation of candidates at a time. Each
 * candidate is compiled by a compile worker into the shared folder (stage
 * TO_COMPILE → COMPILING → READY), then verified and timed by the
 * measurement worker (READY → MEASURING → DONE), which loads what the
 * compile worker left and so never waits on a compiler while compiled
 * candidates wait for it. On the cpu, whose cores are the device's,
 * compiles pause while candidates are timed, and a timing waits for the
 * compiles in flight. When a generation is done, its best candidates are
 * re-timed side by side with the key's version, round by round, and the
 * best becomes the next version only if it beats that version in nearly
 * every round; then the search proposes the next generation. The version
 * the job started from is re-timed with them, so that the speedup over it
 * is a ratio of two times measured together.
 *
 * A candidate whose plan is quarantined (it crashed or hung a worker
 * before: the job's spec lists them) is never compiled, measured or
 * re-timed: it fails at once, counted as skipped; a version whose plan is
 * quarantined is not re-timed, and the job's first candidate to be
 * measured replaces it as the next version.
 *
 * Work is taken from the jobs in order: priority, then jobs a client waits
 * on, then the job with the fewest generations, then the oldest; so the
 * generations of concurrent jobs interleave.
 */
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "daemon.h"
#include "runner.h"
#include "scheduler.h"
#include "tuner.h"

/* A candidate whose first run is this many times slower than the best
 * (beside the version: whose first run's ratio to the version's is this
 * many times the best's) is not timed further (tuner/measure.c,
 * cutoff_ms and cutoff_ratio). */
#define CUTOFF 3.0
/* Candidates of a generation re-timed against the version. */
#define CHALLENGERS 2
/* How long a trial times each kernel and the whole plan, at least 3 runs:
 * a trial only ranks candidates; versions are decided by the re-timing. */
#define TRIAL_TIMING_MS 100.0
#define COMPILE_LIMIT_S 120
#define PROBE_LIMIT_S 120
/* Genomes the search draws between hand-overs of what it found. */
#define PROPOSE_TRIES 4
/* A generation is proposed for an eighth of the job's budget at most,
 * and at least this long. */
#define SHARE_OF_BUDGET 8
#define MIN_SHARE_S 0.25
/* Known trials told to the search between looks at whether the runner
 * stops. */
#define KNOWN_BETWEEN_LOOKS 256
/* A shared cache: how long a claim of a plan lasts (a plan claimed by a
 * daemon that died before it recorded the trial, or by a job that ended
 * first, is claimed again after it), and the trials of the key read at
 * most before each generation. */
#define CLAIM_S 600.0
#define SHARED_TRIALS_READ 2000
/* Trials read again at each read (a trial numbered before the last one
 * read may commit after it), and the pause after the cache failed. */
#define SHARED_TRIALS_OVERLAP 64
#define SHARED_PAUSE_S 30

enum stage { TO_COMPILE, COMPILING, READY, MEASURING, DONE };
/* SEARCH_FILL: go on proposing the generation, after another job went
 * first. */
enum search_step { SEARCH_NONE, SEARCH_ACTIVATE, SEARCH_GENERATION, SEARCH_FILL };

/* A candidate of a job's open generation on its way through the
 * pipeline: compiled, then measured. */
typedef struct pipeline_plan {
	json_t *plan;
	enum stage stage;
	double ms;      /* INFINITY when it failed */
	json_t *answer; /* the measurement's answer, when ok */
} pipeline_plan;

typedef struct runner_job {
	int64_t id;
	char *graph_text;
	double budget_s;
	int max_trials, priority;
	json_t *known, *incumbent, *neighbour, *quarantined;
	int skipped; /* quarantined candidates not tried */
	bool active, waited, cancelled, retiming;
	bool beside_failed; /* the log said why the version cannot be timed beside */
	/* Active jobs: what the search thread is to do for it, and whether
	 * it works on it now (the generation does not end meanwhile). */
	enum search_step step;
	bool proposing;
	sched_graph *graph;
	tuner_search *search; /* the search thread's alone */
	double limit_s, best_ms;
	uint64_t deadline;
	int trials, generation, compile_failures;
	tuner_search_drops drops; /* the search's, when it last proposed */
	tuner_search_model model; /* its cost filter's, then */
	int restarts;             /* its restarts after a stall, then */
	const char *filled; /* how the generation's proposing ended */
	uint64_t share_ends; /* when its time share to propose ends */
	const char *failed; /* why the search cannot go on, or NULL: the job
			     * ends once no worker holds a candidate */
	/* The plan of the version the job started from (NULL until there is
	 * one), and the times of it and of the version now, measured side by
	 * side in the same re-timing (its trial's time, alone, until then). */
	json_t *first;
	double first_ms, version_ms;
	/* The version's time on the job's one scale, which trials timed
	 * beside it are put on (trial_ms): the first version's trial time,
	 * then times each new version's ratio to the one it replaced in the
	 * re-timing that published it; so that times found in minutes of
	 * different speed still compare. */
	double version_scale_ms;
	json_t *retimed;  /* what the last re-timing found, for the event */
	pipeline_plan *cands; /* the generation's, by the search's handles;
			       * ms NAN: claimed by another daemon */
	int ncands, open;
	/* A shared cache (the search thread's): the last trial of the key
	 * read (-1: none yet), and the generation's plans another daemon
	 * claimed. */
	int64_t shared_after;
	int claimed_elsewhere;
	int room;           /* the candidates the generation may have */
	struct runner_job *next;
} runner_job;

typedef struct worker_thread {
	tuned_runner *runner;
	tuner_worker *worker;
	uv_thread_t handle;
	bool measures;
} worker_thread;

struct tuned_runner {
	uv_mutex_t lock;
	uv_cond_t compile_wake, measure_wake, search_wake;
	uv_thread_t search_handle;
	bool search_started;
	uv_async_t *notify;
	char backend[16];
	char share[64];
	int active_jobs, nthreads, started;
	worker_thread *threads; /* [0] measures, the others compile */
	bool stopping, probe_done, probed;
	bool cuda;              /* the device is a GPU, not the cpu's cores */
	bool library;           /* its library (a CBLAS, cuBLASLt) is there */
	int compiling;          /* compiles in flight */
	bool timing;            /* the device wants a quiet machine */
	kgen_peaks peaks;
	uint64_t started_ns, busy_ns;
	cache *shared;    /* a shared cache's reader (the search thread's),
			   * or NULL */
	bool shared_failing;         /* it failed (said once) */
	uint64_t shared_pause_until; /* not used until then */
	char device[256]; /* the device's signature */
	runner_job *jobs;
	tuned_result *results_head, *results_tail;
};

/* Results. */

static tuned_result *result_new(const runner_job *job, enum tuned_result_kind kind)
{
	tuned_result *result = calloc(1, sizeof(*result));

	if (result) {
		result->job = job->id;
		result->kind = kind;
	}
	return result;
}

/* Under the lock. */
static void push_result(tuned_runner *r, tuned_result *result)
{
	if (!result)
		return;
	if (r->results_tail)
		r->results_tail->next = result;
	else
		r->results_head = result;
	r->results_tail = result;
	uv_async_send(r->notify);
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
	json_decref(result->data);
	json_decref(result->sources);
	free(result->graph);
	free(result->worker_log);
	free(result);
}

/* Which job goes first: the higher priority, a job a client waits on, the
 * fewest generations, the oldest. */
static bool goes_before(const runner_job *a, const runner_job *b)
{
	if (a->priority != b->priority)
		return a->priority > b->priority;
	if (a->waited != b->waited)
		return a->waited;
	if (a->generation != b->generation)
		return a->generation < b->generation;
	return a->id < b->id;
}

static void free_candidates(runner_job *job)
{
	for (int i = 0; i < job->ncands; i++) {
		json_decref(job->cands[i].plan);
		json_decref(job->cands[i].answer);
	}
	free(job->cands);
	job->cands = NULL;
	job->ncands = job->open = 0;
}

static void job_free(runner_job *job)
{
	free_candidates(job);
	tuner_search_free(job->search);
	sched_graph_free(job->graph);
	json_decref(job->known);
	json_decref(job->incumbent);
	json_decref(job->neighbour);
	json_decref(job->quarantined);
	json_decref(job->retimed);
	json_decref(job->first);
	free(job->graph_text);
	free(job);
}

static void unlink_job(tuned_runner *r, runner_job *job)
{
	for (runner_job **at = &r->jobs; *at; at = &(*at)->next)
		if (*at == job) {
			*at = job->next;
			return;
		}
}

static int count_active(const tuned_runner *r)
{
	int n = 0;

	for (const runner_job *job = r->jobs; job; job = job->next)
		n += job->active;
	return n;
}

static void activate_jobs(tuned_runner *r);

static bool out_of_budget(const runner_job *job)
{
	return job->budget_s > 0 && job->trials > 0 && uv_hrtime() > job->deadline;
}

static bool out_of_trials(const runner_job *job)
{
	return job->max_trials > 0 && job->trials >= job->max_trials;
}

/* Why a job that did not fail ended, into "ended": its space exhausted
 * (every plan of it measured), or its budget or trials spent. */
static void why_ended(const runner_job *job, char *ended, size_t size)
{
	int measured, plans;

	if (job->search && tuner_search_exhausted(job->search)) {
		plans = tuner_search_space(job->search, &measured);
		snprintf(ended, size, "space exhausted: %d of %d plans measured",
			 measured, plans);
	} else if (out_of_trials(job)) {
		snprintf(ended, size, "trials spent: %d of %d", job->trials,
			 job->max_trials);
	} else if (out_of_budget(job) || !job->search) {
		snprintf(ended, size, "budget spent: %g s", job->budget_s);
	}
}

/* The search thread: the job is over (why: "error", else its failure,
 * if any), said, and forgotten; a waiting job takes its place. The job is
 * freed without the lock: its search and known trials may be large. */
static void end_job(tuned_runner *r, runner_job *job, const char *error)
{
	tuned_result *end = result_new(job, TUNED_RESULT_END);
	const char *why = error ? error : job->failed;

	if (end) {
		end->cancelled = job->cancelled && !r->stopping;
		end->stopped = r->stopping;
		snprintf(end->detail, sizeof(end->detail), "%s", why ? why : "");
		if (!why && !job->cancelled && !r->stopping)
			why_ended(job, end->ended, sizeof(end->ended));
	}
	push_result(r, end);
	unlink_job(r, job);
	if (!count_active(r))
		kgen_empty_folder(r->share); /* no job needs its kernels */
	activate_jobs(r);
	uv_mutex_unlock(&r->lock);
	job_free(job);
	uv_mutex_lock(&r->lock);
}

/* No new candidate starts: cancelled, failed, stopping, or out of budget
 * (the first trial always runs). */
static bool expired(const tuned_runner *r, const runner_job *job)
{
	return job->cancelled || job->failed || r->stopping || out_of_budget(job) ||
	       out_of_trials(job);
}

/* Plans the search proposed, as the generation's next candidates, as many
 * as its room allows (the trial budget); the compile workers are woken.
 * A plan another daemon claimed ("mine" false) is done at once, its time
 * unknown (NAN) until its trial is read. */
static void add_candidates(tuned_runner *r, runner_job *job, json_t *plans,
			   const bool *mine)
{
	size_t i;
	json_t *plan;

	json_array_foreach(plans, i, plan) {
		if (job->ncands >= job->room)
			break;
		job->cands[job->ncands++] = (pipeline_plan){json_incref(plan),
							    mine[i] ? TO_COMPILE : DONE,
							    mine[i] ? INFINITY : NAN,
							    NULL};
		job->open += mine[i];
		job->claimed_elsewhere += !mine[i];
	}
	if (json_array_size(plans))
		uv_cond_broadcast(&r->compile_wake);
}

static json_t *real_or_null(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

/* The search's cost filter: whether it filters, the rank correlation of
 * its model with the trials (null until it has enough), and the rates
 * of that model, the peaks' or those fitted to the trials. */
static json_t *cost_model_data(const tuner_search_model *m)
{
	return json_pack("{s:b, s:b, s:o, s:o, s:o, s:o}", "filtering", m->filtering,
			 "calibrated", m->calibrated, "rank_correlation",
			 real_or_null(m->rank_correlation), "peaks_rank_correlation",
			 real_or_null(m->peaks_rank_correlation), "bandwidth_gbs",
			 m->calibrated && m->rates.ms_per_byte > 0 ?
				 json_real(1 / (m->rates.ms_per_byte * 1e6)) :
				 json_null(),
			 "gflops",
			 m->calibrated && m->rates.ms_per_flop > 0 ?
				 json_real(1 / (m->rates.ms_per_flop * 1e6)) :
				 json_null());
}

/* The counters of the generation just ended, for the generation event:
 * the best trial, and the gain of the version over the first, both as
 * the last re-timing measured them; the plans it proposed, how its
 * proposing ended, why the search's genomes gave no plan so far, its
 * restarts and its cost filter. */
static json_t *generation_data(const runner_job *job)
{
	double best = job->best_ms;

	return json_pack(
		"{s:I, s:i, s:i, s:i, s:i, s:i, s:i, s:s?, s:{s:i, s:i, s:i, s:i, s:i},"
		" s:o, s:o, s:o, s:o, s:o, s:i, s:o, s:i}",
		"job", (json_int_t)job->id, "generation", job->generation - 1, "trials",
		job->trials, "compile_failures", job->compile_failures, "filtered",
		job->drops.filtered, "quarantined", job->skipped, "proposed",
		job->ncands, "filled", job->filled, "dropped", "seen", job->drops.seen,
		"measured", job->drops.measured, "filtered", job->drops.filtered,
		"invalid", job->drops.invalid, "quarantined", job->skipped, "best_ms",
		isfinite(best) ? json_real(best) : json_null(), "first_ms",
		job->first_ms > 0 ? json_real(job->first_ms) : json_null(),
		"version_ms",
		job->version_ms > 0 ? json_real(job->version_ms) : json_null(), "gain",
		job->first_ms > 0 && job->version_ms > 0 ?
			json_real(job->first_ms / job->version_ms) :
			json_null(),
		"retimed", job->retimed ? json_incref(job->retimed) : json_null(),
		"restarts", job->restarts, "cost_model", cost_model_data(&job->model),
		"claimed_elsewhere", job->claimed_elsewhere);
}

/* A candidate becomes the key's version, at "median_ms" ("scale_ms" on
 * the job's scale: version_scale_ms), when the
 * version the job started from took "first_ms" beside it (the candidate's
 * own time when it is the first). */
static void publish(tuned_runner *r, runner_job *job, const pipeline_plan *c,
		    double median_ms, double spread_ms, double first_ms,
		    double scale_ms)
{
	tuned_result *version = result_new(job, TUNED_RESULT_VERSION);

	if (!version)
		return;
	version->plan = json_incref(c->plan);
	version->answer = json_incref(c->answer);
	version->median_ms = median_ms;
	version->spread_ms = spread_ms;
	version->first_ms = first_ms;
	version->generation = job->generation - 1;
	push_result(r, version);
	if (!job->first)
		job->first = json_incref(job->incumbent ? job->incumbent : c->plan);
	json_decref(job->incumbent);
	job->incumbent = json_incref(c->plan);
	job->version_ms = median_ms;
	job->first_ms = first_ms;
	job->version_scale_ms = scale_ms;
}

static int kernels_of(const json_t *plan)
{
	return (int)json_array_size(json_object_get(plan, "kernels"));
}

/* The index of the best measured candidate faster than "than" in fewer
 * kernels than "kernels" (INT_MAX: any), not among the "n" of "skip", or
 * -1. */
static int best_candidate(const runner_job *job, double than, int kernels,
			  const int *skip, int n)
{
	int best = -1;

	for (int i = 0; i < job->ncands; i++) {
		bool skipped = false;

		for (int j = 0; j < n; j++)
			skipped |= skip[j] == i;
		if (!skipped && job->cands[i].answer && job->cands[i].ms < than &&
		    (kernels == INT_MAX || kernels_of(job->cands[i].plan) < kernels) &&
		    (best < 0 || job->cands[i].ms < job->cands[best].ms))
			best = i;
	}
	return best;
}

/* The search thread is to do "step" for the job. */
static void want_search(tuned_runner *r, runner_job *job, enum search_step step)
{
	job->step = step;
	uv_cond_signal(&r->search_wake);
}

/* The generation event, then the next generation (the search thread). */
static void next_generation(tuned_runner *r, runner_job *job)
{
	tuned_result *event = result_new(job, TUNED_RESULT_GENERATION);

	if (event)
		event->data = generation_data(job);
	json_decref(job->retimed);
	job->retimed = NULL;
	push_result(r, event);
	want_search(r, job, SEARCH_GENERATION);
}

/* The generation is over. The first version is published at once; a
 * candidate that looks faster than the version is re-timed against it
 * first (the measurement thread, retime()). */
static void end_generation(tuned_runner *r, runner_job *job)
{
	double than = job->version_scale_ms > 0 ? job->version_scale_ms : INFINITY;
	int best = best_candidate(job, INFINITY, INT_MAX, NULL, 0);

	if (!job->incumbent && best >= 0) {
		publish(r, job, &job->cands[best], job->cands[best].ms,
			json_number_value(json_object_get(job->cands[best].answer,
							  "total_spread_ms")),
			job->cands[best].ms, job->cands[best].ms);
	} else if (job->incumbent && !job->cancelled && !r->stopping &&
		   best_candidate(job, than, INT_MAX, NULL, 0) >= 0) {
		job->retiming = true;
		uv_cond_signal(&r->measure_wake);
		return;
	}
	next_generation(r, job);
}

static bool stopping(tuned_runner *r)
{
	bool stop;

	uv_mutex_lock(&r->lock);
	stop = r->stopping;
	uv_mutex_unlock(&r->lock);
	return stop;
}

/* Known trials, as cache_trials lists them, told to the search (without
 * the lock: there may be thousands), until the runner stops. */
static void know_trials(tuned_runner *r, tuner_search *search, const json_t *known)
{
	size_t i;
	json_t *trial;

	json_array_foreach(known, i, trial) {
		const char *outcome = json_string_value(json_object_get(trial, "outcome"));
		double ms = json_number_value(json_object_get(trial, "median_ms"));

		if (i % KNOWN_BETWEEN_LOOKS == KNOWN_BETWEEN_LOOKS - 1 && stopping(r))
			return;
		tuner_search_know(search, json_object_get(trial, "plan"),
				  outcome && !strcmp(outcome, "ok") && ms > 0 ? ms : INFINITY);
	}
}

/* Whether the search thread may use the shared cache now: not for
 * SHARED_PAUSE_S after it failed, so that a database out of reach costs
 * one connection timeout per pause, not one per plan. */
static bool shared_usable(const tuned_runner *r)
{
	return r->shared && uv_hrtime() >= r->shared_pause_until;
}

/* The shared cache failed the job's search ("what": a claim or a read):
 * said once until it works again; meanwhile the searches go on with what
 * this daemon measures, and may measure a plan another daemon measures
 * too. */
static void shared_failed(tuned_runner *r, const runner_job *job, const char *what,
			  const cache_error *err)
{
	if (!r->shared_failing)
		tuned_log(TUNED_WARN,
			  "job %lld: %s: cannot %s: %s; the searches go on "
			  "with this daemon's own trials, and try again in %d s",
			  (long long)job->id, sched_graph_key(job->graph), what,
			  err->message, SHARED_PAUSE_S);
	r->shared_failing = true;
	r->shared_pause_until = uv_hrtime() + (uint64_t)SHARED_PAUSE_S * 1000000000u;
}

static void shared_worked(tuned_runner *r)
{
	if (r->shared_failing)
		tuned_log(TUNED_INFO,
			  "the shared cache works again: the searches share "
			  "their trials with the other daemons again");
	r->shared_failing = false;
}

/* The search thread, without the lock: the trials of the key recorded on
 * a shared cache since the job last read them (by any daemon that
 * searches it, this one included) told to its search. The last
 * SHARED_TRIALS_OVERLAP numbers are read again: a trial numbered before
 * one read may commit after it. The first read only finds where the
 * trials end (the job started from those before, cache_trials). */
static void read_shared_trials(tuned_runner *r, runner_job *job)
{
	int64_t from = job->shared_after > SHARED_TRIALS_OVERLAP ?
			       job->shared_after - SHARED_TRIALS_OVERLAP :
			       job->shared_after;
	cache_error err = {0};
	json_t *trials = NULL;

	if (!shared_usable(r))
		return;
	if (cache_trials_after(r->shared, sched_graph_key(job->graph), r->device,
			       KGEN_CODEGEN_VERSION, &from, SHARED_TRIALS_READ, &trials,
			       &err) < 0)
		return shared_failed(r, job, "read the trials other daemons measured",
				     &err);
	shared_worked(r);
	job->shared_after = from > job->shared_after ? from : job->shared_after;
	know_trials(r, job->search, trials);
	json_decref(trials);
}

/* The search thread, without the lock: which of "plans" this daemon is to
 * measure, as an array of flags (NULL when out of memory): on a shared
 * cache, those it claimed among the first "room" (the others are not
 * added), the rest another daemon claimed or measured; all of them
 * while the shared cache fails. */
static bool *claim_plans(tuned_runner *r, runner_job *job, json_t *plans, int room)
{
	bool *mine = calloc(json_array_size(plans) + 1, sizeof(bool));
	cache_error err = {0};
	size_t i;
	json_t *plan;

	json_array_foreach(plans, i, plan) {
		if (!mine || (int)i >= room)
			break;
		char *text = shared_usable(r) ? json_dumps(plan, JSON_COMPACT) : NULL;
		int rc = text ? cache_claim_plan(r->shared, sched_graph_key(job->graph),
						 r->device, KGEN_CODEGEN_VERSION, text,
						 CLAIM_S, &err) :
				1;

		free(text);
		if (rc < 0)
			shared_failed(r, job, "claim a plan before measuring it", &err);
		else if (text)
			shared_worked(r);
		mine[i] = rc != 0;
	}
	return mine;
}

/* Reads the job's graph in its canonical form, whatever names and order
 * it was submitted with: the plans, sources, launches and trials the job
 * stores then mean the same ops and tensors for every client of its key
 * (docs/cache.md, "Canonical numbering"). A submit queues the canonical
 * form, read once here; a job an older tuned queued is converted. */
static int read_canonical_graph(runner_job *job, sched_error *err)
{
	sched_graph *submitted = NULL;
	char *canonical;

	if (sched_graph_read_string(job->graph_text, &submitted, err) < 0)
		return -1;
	canonical = sched_graph_canonical_json(submitted);
	if (canonical && !strcmp(canonical, job->graph_text)) {
		free(canonical); /* queued in canonical form already: read once */
		job->graph = submitted;
		return 0;
	}
	sched_graph_free(submitted);
	if (!canonical) {
		snprintf(err->message, sizeof(err->message), "out of memory");
		return -1;
	}
	free(job->graph_text);
	job->graph_text = canonical;
	return sched_graph_read_string(job->graph_text, &job->graph, err);
}

static bool is_quarantined(const runner_job *job, const json_t *plan)
{
	size_t i;
	json_t *q;

	json_array_foreach(job->quarantined, i, q)
		if (json_equal(q, plan))
			return true;
	return false;
}

/* Tells the loop thread that the quarantined "plan" was not tried. */
static void push_skipped(tuned_runner *r, runner_job *job, json_t *plan)
{
	tuned_result *skipped = result_new(job, TUNED_RESULT_SKIPPED);

	job->skipped++;
	if (skipped) {
		skipped->plan = json_incref(plan);
		skipped->quarantined = job->skipped;
	}
	push_result(r, skipped);
}

/* A version whose plan is quarantined is never re-timed: the job goes on
 * as for a key without one. */
static void drop_quarantined_incumbent(tuned_runner *r, runner_job *job)
{
	if (!job->incumbent || !is_quarantined(job, job->incumbent))
		return;
	push_skipped(r, job, job->incumbent);
	json_decref(job->incumbent);
	job->incumbent = NULL;
}

/* The job's graph read and its search started, told the key's trials
 * and the neighbour's plan; without the lock (the job is the search
 * thread's until it is done). NULL, or why it failed. */
static const char *start_search(tuned_runner *r, runner_job *job, sched_error *err)
{
	/* on a shared cache, the searches of one key on several daemons draw
	 * apart */
	unsigned salt = r->shared ? (unsigned)getpid() * 2654435761u : 0;
	tuner_search_options options = {.kind = TUNER_GENETIC,
					.seed = (unsigned)job->id ^ salt,
					.peaks = r->probed ? &r->peaks : NULL,
					.cuda = r->cuda,
					.library = r->library};
	tuner_search *search;

	if (read_canonical_graph(job, err) < 0)
		return err->message;
	if (!(search = tuner_search_new(job->graph, &options)))
		return "cannot start the search: out of memory";
	know_trials(r, search, job->known);
	if (job->neighbour)
		tuner_search_suggest(search, job->neighbour);
	job->limit_s = tuner_time_limit(job->graph, r->backend);
	tuner_search_cost_model(search, &job->model);
	job->search = search;
	return NULL;
}

static void propose_generation(tuned_runner *r, runner_job *job);

/* The search thread: the job's search started (the lock released
 * meanwhile), then its first generation. */
static void activate(tuned_runner *r, runner_job *job)
{
	sched_error err = {0};
	const char *failed;

	job->step = SEARCH_NONE;
	if (expired(r, job))
		return end_job(r, job, NULL);
	job->proposing = true;
	uv_mutex_unlock(&r->lock);
	failed = start_search(r, job, &err);
	uv_mutex_lock(&r->lock);
	job->proposing = false;
	if (failed)
		return end_job(r, job, failed);
	job->best_ms = tuner_search_best(job->search);
	drop_quarantined_incumbent(r, job);
	job->deadline = uv_hrtime() + (uint64_t)(job->budget_s * 1e9);
	propose_generation(r, job);
}

/* Fills the free places among active jobs, best job first, once the
 * device probe is over (the searches filter with its peaks): each is
 * started, and the search thread activates it. */
static void activate_jobs(tuned_runner *r)
{
	while (r->probe_done && !r->stopping && count_active(r) < r->active_jobs) {
		runner_job *best = NULL;

		for (runner_job *job = r->jobs; job; job = job->next)
			if (!job->active && (!best || goes_before(job, best)))
				best = job;
		if (!best)
			return;
		best->active = true;
		push_result(r, result_new(best, TUNED_RESULT_STARTED));
		want_search(r, best, SEARCH_ACTIVATE);
	}
}

/* Whether the generation is over: every candidate done, and the search
 * proposes no more. */
static bool generation_over(const runner_job *job)
{
	return !job->open && !job->proposing && !job->retiming;
}

/* The candidates of an expired job that no worker holds are dropped; the
 * generation ends when none is left. */
static void drop_pending(tuned_runner *r, runner_job *job)
{
	for (int i = 0; i < job->ncands; i++)
		if (job->cands[i].stage == TO_COMPILE || job->cands[i].stage == READY) {
			job->cands[i].stage = DONE;
			job->open--;
		}
	if (generation_over(job))
		end_generation(r, job);
}

/* One candidate finished, at "ms" (INFINITY: failed); the generation may
 * be over. The search is told when the next one starts. */
static void candidate_done(tuned_runner *r, runner_job *job, pipeline_plan *c, double ms)
{
	c->stage = DONE;
	c->ms = ms;
	if (ms > 0 && ms < job->best_ms)
		job->best_ms = ms;
	job->open--;
	if (expired(r, job))
		drop_pending(r, job);
	else if (generation_over(job))
		end_generation(r, job);
	activate_jobs(r);
}

/* The outcomes of the generation out told to the search, by handle (a
 * plan another daemon claimed: by its trial, once read), then the trials
 * other daemons recorded, and the next generation opened, without the
 * lock; false when the search is over. The candidates are freed. */
static bool open_generation(tuned_runner *r, runner_job *job)
{
	int n = job->ncands;
	double *ms = malloc((n + 1) * sizeof(double));
	bool open;

	for (int i = 0; ms && i < n; i++)
		ms[i] = job->cands[i].ms;
	free_candidates(job);
	job->claimed_elsewhere = 0;
	uv_mutex_unlock(&r->lock);
	for (int i = 0; ms && i < n; i++)
		if (!isnan(ms[i]))
			tuner_search_record(job->search, i, ms[i]);
	free(ms);
	read_shared_trials(r, job);
	open = tuner_search_begin(job->search) == 0;
	uv_mutex_lock(&r->lock);
	return open;
}

/* The job the search thread serves first, in job order, or NULL. */
static runner_job *search_job(tuned_runner *r)
{
	runner_job *best = NULL;

	for (runner_job *job = r->jobs; job; job = job->next)
		if (job->step != SEARCH_NONE && (!best || goes_before(job, best)))
			best = job;
	return best;
}

/* Whether another job waits on the search thread and goes before "job". */
static bool goes_first(tuned_runner *r, const runner_job *job)
{
	runner_job *next = search_job(r);

	return next && next != job && goes_before(next, job);
}

/* How long the search may propose a generation. */
static uint64_t time_share_ns(const runner_job *job)
{
	double share_s = job->budget_s / SHARE_OF_BUDGET;

	return (uint64_t)((share_s > MIN_SHARE_S ? share_s : MIN_SHARE_S) * 1e9);
}

/* The generation's plans handed to the compile workers as the search
 * proposes them, a few genomes at a time (without the lock), until it is
 * full or has room for no more, its time share is spent, the search finds
 * nothing new, or the job is over; job->filled says which. Plans
 * proposed while the job expired are dropped. False when it stopped for
 * another job that goes first: it goes on later (SEARCH_FILL). */
static bool fill_generation(tuned_runner *r, runner_job *job)
{
	tuner_search *search = job->search;
	tuner_search_drops drops;
	tuner_search_model model;
	json_t *plans;
	bool *mine;
	int restarts, room;

	for (;;) {
		if (tuner_search_full(search) || job->ncands >= job->room)
			job->filled = "full";
		else if (expired(r, job))
			job->filled = "ended";
		else if (tuner_search_exhausted(search))
			job->filled = "exhausted";
		else if (uv_hrtime() > job->share_ends)
			job->filled = "time_share";
		else
			job->filled = NULL;
		if (job->filled)
			return true;
		if (goes_first(r, job))
			return false;
		room = job->room - job->ncands; /* this thread's alone to change */
		uv_mutex_unlock(&r->lock);
		plans = tuner_search_propose(search, PROPOSE_TRIES);
		mine = plans ? claim_plans(r, job, plans, room) : NULL;
		tuner_search_drops_get(search, &drops);
		tuner_search_cost_model(search, &model);
		restarts = tuner_search_restarts(search);
		uv_mutex_lock(&r->lock);
		job->drops = drops;
		job->model = model;
		job->restarts = restarts;
		if (!mine)
			job->failed = "cannot propose plans: out of memory";
		else if (!expired(r, job))
			add_candidates(r, job, plans, mine);
		json_decref(plans);
		free(mine);
	}
}

/* The search thread: the generation proposed on, as fill_generation
 * says; the job ends when the search finds no new plan. */
static void fill(tuned_runner *r, runner_job *job)
{
	job->step = SEARCH_NONE;
	if (!fill_generation(r, job))
		return want_search(r, job, SEARCH_FILL);
	job->proposing = false;
	if (!job->ncands && !strcmp(job->filled, "exhausted"))
		return end_job(r, job, NULL);
	if (expired(r, job))
		drop_pending(r, job);
	else if (generation_over(job))
		end_generation(r, job);
}

/* The search thread: the next generation, or the end of the job when it
 * is over. */
static void propose_generation(tuned_runner *r, runner_job *job)
{
	job->step = SEARCH_NONE;
	if (expired(r, job))
		return end_job(r, job, NULL);
	job->proposing = true;
	if (!open_generation(r, job)) {
		job->proposing = false;
		return end_job(r, job, NULL);
	}
	job->generation = tuner_search_generations(job->search);
	job->room = job->max_trials > 0 ? job->max_trials - job->trials : TUNER_POPULATION;
	job->room = job->room < TUNER_POPULATION ? job->room : TUNER_POPULATION;
	if (!(job->cands = calloc(job->room + 1, sizeof(pipeline_plan)))) {
		job->proposing = false;
		return end_job(r, job, "out of memory");
	}
	job->share_ends = uv_hrtime() + time_share_ns(job);
	fill(r, job);
}


static void search_thread(void *arg)
{
	tuned_runner *r = arg;
	runner_job *job;

	tuned_thread_background();
	uv_mutex_lock(&r->lock);
	while (!r->stopping) {
		if (!(job = search_job(r)))
			uv_cond_wait(&r->search_wake, &r->lock);
		else if (job->step == SEARCH_ACTIVATE)
			activate(r, job);
		else if (job->step == SEARCH_FILL)
			fill(r, job);
		else
			propose_generation(r, job);
	}
	uv_mutex_unlock(&r->lock);
}

/* The first candidate at "stage" of the first job in order, or NULL. */
static pipeline_plan *pick(tuned_runner *r, enum stage stage, runner_job **of)
{
	runner_job *best = NULL;
	pipeline_plan *found = NULL;

	for (runner_job *job = r->jobs; job; job = job->next) {
		if (!job->active || (best && !goes_before(job, best)))
			continue;
		for (int i = 0; i < job->ncands; i++)
			if (job->cands[i].stage == stage) {
				best = job;
				found = &job->cands[i];
				break;
			}
	}
	*of = best;
	return found;
}

static runner_job *retiming_job(tuned_runner *r)
{
	for (runner_job *job = r->jobs; job; job = job->next)
		if (job->retiming)
			return job;
	return NULL;
}

/* The outcome's name as the cache and clients know it. A request that
 * never reached a worker (it could not be started) is an error, not a
 * crash of the plan's. */
static void describe_reply(const tuner_reply *reply, bool delivered,
			   tuned_result *result)
{
	static const char *const outcomes[] = {
		[TUNER_ANSWERED] = "ok", [TUNER_CRASHED] = "crash",
		[TUNER_TIMED_OUT] = "timeout", [TUNER_GARBLED] = "error",
	};
	const char *kind = json_string_value(json_object_get(reply->answer, "kind"));

	snprintf(result->outcome, sizeof(result->outcome), "%s",
		 reply->answer ? (kind ? kind : "error") :
		 delivered ? outcomes[reply->outcome] : "error");
	snprintf(result->detail, sizeof(result->detail), "%s",
		 json_string_value(json_object_get(reply->answer, "error")) ?:
		 reply->answer ? "" : reply->detail);
}

/* Asks a worker with the lock released; a request that cannot be sent
 * reads as a crash. False when it never reached a worker. */
static bool ask(tuned_runner *r, tuner_worker *worker, json_t *request,
		double limit_s, tuner_reply *reply)
{
	bool delivered;

	uv_mutex_unlock(&r->lock);
	delivered = request && tuner_worker_ask(worker, request, limit_s, reply) == 0;
	if (!delivered) {
		reply->outcome = TUNER_CRASHED;
		if (!reply->detail[0])
			snprintf(reply->detail, sizeof(reply->detail), "out of memory");
	}
	json_decref(request);
	uv_mutex_lock(&r->lock);
	return delivered;
}

/* An ask of the measurement worker, its time counted as the device's. */
static bool ask_device(tuned_runner *r, tuner_worker *worker, json_t *request,
		       double limit_s, tuner_reply *reply)
{
	uint64_t started = uv_hrtime();
	bool delivered = ask(r, worker, request, limit_s, reply);

	r->busy_ns += uv_hrtime() - started;
	return delivered;
}

/* What it takes to reproduce a trial that crashed or hung its worker:
 * the graph as the worker read it (canonical, as the plan numbers it),
 * the kernels' sources, the worker's last words, how it died. */
static void add_bundle(tuned_runner *r, runner_job *job, const pipeline_plan *c,
		       tuner_worker *worker, const tuner_reply *reply, double limit_s,
		       tuned_result *trial)
{
	trial->graph = strdup(job->graph_text);
	trial->sources = tuner_plan_sources(job->graph, c->plan, r->cuda);
	trial->worker_log = tuner_worker_log(worker);
	trial->term_signal = reply->term_signal;
	trial->limit_s = limit_s;
}

/* A trial's result for the loop thread (the cache and clients). */
static void push_trial(tuned_runner *r, runner_job *job, const pipeline_plan *c,
		       tuner_worker *worker, const tuner_reply *reply, bool delivered,
		       double limit_s)
{
	tuned_result *trial = result_new(job, TUNED_RESULT_TRIAL);

	if (!trial)
		return;
	describe_reply(reply, delivered, trial);
	trial->plan = json_incref(c->plan);
	trial->answer = json_incref(reply->answer);
	trial->quarantined = job->skipped;
	if (!strcmp(trial->outcome, "crash") || !strcmp(trial->outcome, "timeout"))
		add_bundle(r, job, c, worker, reply, limit_s, trial);
	push_result(r, trial);
}

static bool answered_ok(const tuner_reply *reply)
{
	const char *kind = json_string_value(json_object_get(reply->answer, "kind"));

	return reply->outcome == TUNER_ANSWERED && kind && !strcmp(kind, "ok");
}

/* Compiles one candidate into the shared folder: success hands it to the
 * measurement thread; a failure is the candidate's trial. */
static void compile_one(tuned_runner *r, tuner_worker *worker, runner_job *job,
			pipeline_plan *c)
{
	json_t *request = json_pack("{s:s, s:s, s:O}", "op", "compile", "graph",
				    job->graph_text, "plan", c->plan);
	tuner_reply reply = {0};
	bool delivered;

	c->stage = COMPILING;
	r->compiling++;
	delivered = ask(r, worker, request, COMPILE_LIMIT_S, &reply);
	r->compiling--;
	uv_cond_signal(&r->measure_wake);
	if (answered_ok(&reply)) {
		c->stage = READY;
	} else {
		job->compile_failures++;
		job->trials++;
		push_trial(r, job, c, worker, &reply, delivered, COMPILE_LIMIT_S);
		candidate_done(r, job, c, INFINITY);
	}
	json_decref(reply.answer);
}

/* A quarantined candidate is not compiled (so never measured): it fails
 * at once. */
static void skip_candidate(tuned_runner *r, runner_job *job, pipeline_plan *c)
{
	push_skipped(r, job, c->plan);
	candidate_done(r, job, c, INFINITY);
}

/* Compile threads take the first candidate waiting, in job order. They
 * pause while the device wants a quiet machine: a re-timing, and on the
 * cpu every timing (the compilers would share its cores). */
static void compile_thread(worker_thread *t)
{
	tuned_runner *r = t->runner;
	runner_job *job;
	pipeline_plan *c;

	uv_mutex_lock(&r->lock);
	while (!r->stopping) {
		if (retiming_job(r) || (r->timing && !r->cuda) ||
		    !(c = pick(r, TO_COMPILE, &job)))
			uv_cond_wait(&r->compile_wake, &r->lock);
		else if (is_quarantined(job, c->plan))
			skip_candidate(r, job, c);
		else
			compile_one(r, t->worker, job, c);
	}
	uv_mutex_unlock(&r->lock);
}

/* A candidate's time for the search: its ratio to the version it was
 * timed beside times "scale_ms", the version's time on the job's scale
 * (version_scale_ms), so that trials of different minutes compare on a
 * machine whose speed drifts (docs/kernels.md, "Trials beside the
 * version"); its own time where it was timed alone. The log says why the
 * version could not be timed beside it, once a job. */
static double trial_ms(runner_job *job, const json_t *answer, double scale_ms)
{
	const char *why = json_string_value(json_object_get(answer, "beside_error"));
	double ratio = json_number_value(
		json_object_get(json_object_get(answer, "beside"), "ratio"));

	if (why && !job->beside_failed) {
		job->beside_failed = true;
		tuned_log(TUNED_WARN,
			  "job %lld: %s: the version's plan cannot be timed beside "
			  "the candidates, which are timed alone: %s",
			  (long long)job->id, sched_graph_key(job->graph), why);
	}
	if (ratio > 0 && scale_ms > 0)
		return ratio * scale_ms;
	return json_number_value(json_object_get(answer, "total_ms"));
}

/* Verifies and times one compiled candidate, beside the version once
 * there is one. Every candidate of a job is verified on the same inputs
 * (the job's id seeds them), so that the worker computes the reference
 * once (kernels/verify.c). */
static void measure_one(tuned_runner *r, tuner_worker *worker, runner_job *job,
			pipeline_plan *c)
{
	double best = job->best_ms,
	       scale_ms = job->incumbent ? job->version_scale_ms : 0;
	json_t *request = json_pack("{s:s, s:O, s:I, s:{s:f}}", "graph", job->graph_text,
				    "plan", c->plan, "seed", (json_int_t)job->id,
				    "timing", "budget_ms", TRIAL_TIMING_MS);
	tuner_reply reply = {0};
	bool ok, delivered;

	if (request && isfinite(best))
		json_object_set_new(request, "cutoff_ms", json_real(CUTOFF * best));
	if (request && scale_ms > 0)
		json_object_set(request, "beside", job->incumbent);
	if (request && scale_ms > 0 && isfinite(best))
		json_object_set_new(request, "cutoff_ratio",
				    json_real(CUTOFF * best / scale_ms));
	c->stage = MEASURING;
	delivered = ask_device(r, worker, request, job->limit_s, &reply);
	job->trials++;
	push_trial(r, job, c, worker, &reply, delivered, job->limit_s);
	if ((ok = answered_ok(&reply)))
		c->answer = json_incref(reply.answer);
	candidate_done(r, job, c,
		       ok ? trial_ms(job, reply.answer, scale_ms) : INFINITY);
	json_decref(reply.answer);
}

/* Whether the version the job started from is no longer the version. */
static bool first_replaced(const runner_job *job)
{
	return job->first && job->first != job->incumbent;
}

/* The version (entry 0) and the generation's challengers, to be timed in
 * turns: its best, then its best in fewer kernels than the version (else
 * its second best); last, the version the job started from when it is
 * not the version, so that the speedup over it is measured, not taken
 * from its trial or from another re-timing. */
static json_t *retime_plans(runner_job *job, int *picked, int *npicked)
{
	json_t *plans = json_array();

	json_array_append(plans, job->incumbent);
	*npicked = 0;
	while (*npicked < CHALLENGERS) {
		int i = *npicked == 1 ? best_candidate(job, INFINITY, kernels_of(job->incumbent),
							picked, 1) : -1;

		if (i < 0)
			i = best_candidate(job, INFINITY, INT_MAX, picked, *npicked);
		if (i < 0)
			break;
		picked[(*npicked)++] = i;
		json_array_append(plans, job->cands[i].plan);
	}
	if (first_replaced(job))
		json_array_append(plans, job->first);
	return plans;
}

/* The worker died re-timing plans: which plan killed it cannot be told,
 * so none is quarantined, but the log says it. */
static void push_lost(tuned_runner *r, runner_job *job, const tuner_reply *reply)
{
	tuned_result *lost = result_new(job, TUNED_RESULT_LOST);

	if (lost)
		snprintf(lost->detail, sizeof(lost->detail), "%s", reply->detail);
	push_result(r, lost);
}

/* "plans" (taken) timed side by side by the measurement worker: the
 * answer's "times", or NULL. */
static json_t *side_by_side(tuned_runner *r, tuner_worker *worker, runner_job *job,
			    json_t *plans)
{
	double limit_s = job->limit_s * (double)json_array_size(plans);
	json_t *request = json_pack("{s:s, s:s, s:o, s:I, s:i}", "op", "retime", "graph",
				    job->graph_text, "plans", plans, "seed",
				    (json_int_t)job->id, "rounds", TUNER_RETIME_ROUNDS);
	tuner_reply reply = {0};
	json_t *times;

	if (ask_device(r, worker, request, limit_s, &reply) &&
	    reply.outcome != TUNER_ANSWERED)
		push_lost(r, job, &reply);
	times = json_incref(json_object_get(reply.answer, "times"));
	json_decref(reply.answer);
	return times;
}

/* A close call (tuner_retime_close) gets TUNER_RETIME_ROUNDS more rounds
 * of the version and its best challenger, of the candidates "picked"
 * (and of the version the job started from, for the speedup); its
 * verdict then counts the rounds of both. */
static void extend_if_close(tuned_runner *r, tuner_worker *worker, runner_job *job,
			    const int *picked, tuner_verdict *v)
{
	json_t *plans, *more;

	if (!tuner_retime_close(v))
		return;
	plans = json_pack("[O, O]", job->incumbent, job->cands[picked[v->best]].plan);
	if (plans && first_replaced(job))
		json_array_append(plans, job->first);
	if (!(more = side_by_side(r, worker, job, plans)))
		return;
	tuner_retime_extend(v, &(tuner_retiming){more, 1, first_replaced(job), NULL});
	json_decref(more);
}

/* The kernels of the version, then of each of the candidates "picked",
 * into "kernels". */
static void kernels_of_retimed(const runner_job *job, const int *picked, int npicked,
			       int *kernels)
{
	kernels[0] = kernels_of(job->incumbent);
	for (int i = 0; i < npicked; i++)
		kernels[i + 1] = kernels_of(job->cands[picked[i]].plan);
}

/* The time on the job's scale of the challenger the verdict "v" picked:
 * the version's times its ratio to it, as the re-timing found them. */
static double scaled(const runner_job *job, const tuner_verdict *v)
{
	return v->version_ms > 0 && job->version_scale_ms > 0 ?
		       job->version_scale_ms * v->best_ms / v->version_ms :
		       v->best_ms;
}

/* Re-times the generation's challengers side by side with the version,
 * and publishes the one the verdict says (tuner_retime_publishes), if
 * any. */
static void retime(tuned_runner *r, tuner_worker *worker, runner_job *job)
{
	int picked[CHALLENGERS], npicked = 0, kernels[CHALLENGERS + 1];
	json_t *times = side_by_side(r, worker, job, retime_plans(job, picked, &npicked));
	tuner_retiming t = {times, npicked, first_replaced(job), kernels};
	tuner_verdict v;
	bool published;

	kernels_of_retimed(job, picked, npicked, kernels);
	tuner_retime_judge(&t, &v);
	extend_if_close(r, worker, job, picked, &v);
	published = tuner_retime_publishes(&t, &v);
	json_decref(times);
	job->retimed = json_pack("{s:o, s:o, s:o, s:i, s:i, s:b, s:b}",
		"version_ms", v.version_ms > 0 ? json_real(v.version_ms) : json_null(),
		"challenger_ms", v.best >= 0 ? json_real(v.best_ms) : json_null(),
		"first_ms", v.first_ms > 0 ? json_real(v.first_ms) : json_null(),
		"rounds_won", v.won, "rounds", v.rounds, "published", published,
		"fewer_kernels", v.fewer_kernels);
	if (published) {
		publish(r, job, &job->cands[picked[v.best]], v.best_ms, v.best_spread,
			v.first_ms, scaled(job, &v));
	} else if (v.version_ms > 0) {
		job->version_ms = v.version_ms;
		job->first_ms = v.first_ms;
		if (!(job->version_scale_ms > 0)) /* a version from before the job */
			job->version_scale_ms = v.version_ms;
	}
	job->retiming = false;
	uv_cond_broadcast(&r->compile_wake);
	next_generation(r, job);
	activate_jobs(r);
}

/* The device's peaks, for the cost model, and whether its library is
 * there; a failed probe leaves the searches without a filter and without
 * library steps. */
static void probe(tuned_runner *r, tuner_worker *worker)
{
	json_t *request = json_pack("{s:s}", "op", "probe");
	tuner_reply reply = {0};
	const json_t *a;

	ask(r, worker, request, PROBE_LIMIT_S, &reply);
	a = reply.answer;
	r->peaks = (kgen_peaks){
		json_number_value(json_object_get(a, "bandwidth_gbs")),
		json_number_value(json_object_get(a, "gflops")),
		json_number_value(json_object_get(a, "launch_ms")),
		(int)json_integer_value(json_object_get(a, "cores"))};
	r->probed = answered_ok(&reply) && r->peaks.bandwidth_gbs > 0 &&
		    r->peaks.gflops > 0 && r->peaks.cores > 0;
	r->library = json_is_true(json_object_get(a, "library"));
	r->probe_done = true;
	json_decref(reply.answer);
}

/* The measurement thread: a re-timing first, else the first compiled
 * candidate in job order. A re-timing, and on the cpu every timing, waits
 * for the compiles in flight and keeps new ones from starting. */
static void measure_thread(worker_thread *t)
{
	tuned_runner *r = t->runner;
	runner_job *job;
	pipeline_plan *c;

	uv_mutex_lock(&r->lock);
	probe(r, t->worker);
	activate_jobs(r);
	while (!r->stopping) {
		runner_job *retiming = retiming_job(r);
		bool quiet;

		c = retiming ? NULL : pick(r, READY, &job);
		quiet = retiming || (c && !r->cuda);
		if (r->timing && !quiet)
			uv_cond_broadcast(&r->compile_wake);
		r->timing = quiet;
		if (!retiming && !c)
			uv_cond_wait(&r->measure_wake, &r->lock);
		else if (quiet && r->compiling > 0)
			uv_cond_wait(&r->measure_wake, &r->lock);
		else if (retiming)
			retime(r, t->worker, retiming);
		else
			measure_one(r, t->worker, job, c);
	}
	uv_mutex_unlock(&r->lock);
}

static void thread_main(void *arg)
{
	worker_thread *t = arg;

	if (t->measures)
		measure_thread(t);
	else
		compile_thread(t);
}

static int start_threads(tuned_runner *r, const char *worker_path)
{
	const char *argv[] = {"tuned-worker", "--backend", r->backend, "--share",
			      r->share, NULL};

	for (int i = 0; i < r->nthreads; i++) {
		worker_thread *t = &r->threads[i];

		t->runner = r;
		t->measures = i == 0;
		if (!(t->worker = tuner_worker_new(worker_path, argv)) ||
		    uv_thread_create(&t->handle, thread_main, t))
			return -1;
		r->started++;
	}
	return 0;
}

tuned_runner *tuned_runner_start(uv_async_t *notify, const tuned_runner_options *o)
{
	tuned_runner *r = calloc(1, sizeof(*r));

	if (!r) {
		cache_close(o->shared);
		return NULL;
	}
	r->shared = o->shared;
	snprintf(r->device, sizeof(r->device), "%s", o->device);
	r->notify = notify;
	r->active_jobs = o->active_jobs;
	r->cuda = o->cuda;
	r->nthreads = 1 + (o->compile_workers > 0 ? o->compile_workers :
						    (int)sysconf(_SC_NPROCESSORS_ONLN));
	r->started_ns = uv_hrtime();
	snprintf(r->backend, sizeof(r->backend), "%s", o->backend);
	snprintf(r->share, sizeof(r->share), TUNED_SHARE_DIR "/" TUNED_SHARE_NAME
		 "%d-XXXXXX", (int)getpid());
	if (uv_mutex_init(&r->lock) || uv_cond_init(&r->compile_wake) ||
	    uv_cond_init(&r->measure_wake) || uv_cond_init(&r->search_wake) ||
	    !mkdtemp(r->share) ||
	    !(r->threads = calloc(r->nthreads, sizeof(worker_thread))) ||
	    !(r->search_started = !uv_thread_create(&r->search_handle, search_thread,
						    r)) ||
	    start_threads(r, o->worker_path) < 0) {
		tuned_runner_stop(r);
		return NULL;
	}
	return r;
}

/* Queues the job; it becomes active when a place is free. */
int tuned_runner_submit(tuned_runner *r, const tuned_job_spec *spec)
{
	runner_job *job = calloc(1, sizeof(*job)), **at;

	if (!job || !(job->graph_text = strdup(spec->graph))) {
		free(job);
		json_decref(spec->known);
		json_decref(spec->incumbent);
		json_decref(spec->neighbour);
		json_decref(spec->quarantined);
		return -1;
	}
	job->id = spec->job;
	job->shared_after = -1;
	job->budget_s = spec->budget_s;
	job->max_trials = spec->budget_s > 0 ? spec->max_trials : 1;
	job->priority = spec->priority;
	job->known = spec->known;
	job->incumbent = spec->incumbent;
	job->neighbour = spec->neighbour;
	job->quarantined = spec->quarantined ? spec->quarantined : json_array();
	uv_mutex_lock(&r->lock);
	for (at = &r->jobs; *at; at = &(*at)->next)
		;
	*at = job;
	activate_jobs(r);
	uv_mutex_unlock(&r->lock);
	return 0;
}

static runner_job *find_job(tuned_runner *r, int64_t id)
{
	for (runner_job *job = r->jobs; job; job = job->next)
		if (job->id == id)
			return job;
	return NULL;
}

bool tuned_runner_holds(tuned_runner *r, int64_t id)
{
	bool holds;

	uv_mutex_lock(&r->lock);
	holds = find_job(r, id) != NULL;
	uv_mutex_unlock(&r->lock);
	return holds;
}

void tuned_runner_cancel(tuned_runner *r, int64_t id)
{
	runner_job *job;

	uv_mutex_lock(&r->lock);
	if ((job = find_job(r, id)) && !job->active) {
		unlink_job(r, job);
		job_free(job);
	} else if (job && !job->cancelled) {
		job->cancelled = true;
		if (job->open)
			drop_pending(r, job);
		activate_jobs(r);
	}
	uv_mutex_unlock(&r->lock);
}

void tuned_runner_set_waited(tuned_runner *r, int64_t id, bool waited)
{
	runner_job *job;

	uv_mutex_lock(&r->lock);
	if ((job = find_job(r, id)))
		job->waited = waited;
	uv_mutex_unlock(&r->lock);
}

/* Stops the threads (running workers are killed: their trials are
 * abandoned and their jobs stay queued in the saved state), then frees
 * everything. */
void tuned_runner_stop(tuned_runner *r)
{
	if (!r)
		return;
	uv_mutex_lock(&r->lock);
	r->stopping = true;
	uv_cond_broadcast(&r->compile_wake);
	uv_cond_broadcast(&r->measure_wake);
	uv_cond_broadcast(&r->search_wake);
	for (int i = 0; i < r->started; i++)
		if (tuner_worker_pid(r->threads[i].worker) > 0)
			kill(tuner_worker_pid(r->threads[i].worker), SIGKILL);
	uv_mutex_unlock(&r->lock);
	if (r->search_started)
		uv_thread_join(&r->search_handle);
	for (int i = 0; i < r->started; i++)
		uv_thread_join(&r->threads[i].handle);
	for (int i = 0; i < r->nthreads && r->threads; i++)
		tuner_worker_free(r->threads[i].worker);
	while (r->jobs) {
		runner_job *next = r->jobs->next;

		job_free(r->jobs);
		r->jobs = next;
	}
	for (tuned_result *res = tuned_runner_take_results(r), *next; res; res = next) {
		next = res->next;
		tuned_result_free(res);
	}
	kgen_empty_folder(r->share);
	rmdir(r->share);
	cache_close(r->shared);
	free(r->threads);
	uv_cond_destroy(&r->compile_wake);
	uv_cond_destroy(&r->measure_wake);
	uv_cond_destroy(&r->search_wake);
	uv_mutex_destroy(&r->lock);
	free(r);
}

void tuned_runner_stats_get(tuned_runner *r, tuned_runner_stats *stats)
{
	*stats = (tuned_runner_stats){.workers = r->started,
				      .compile_workers = r->nthreads - 1};
	uv_mutex_lock(&r->lock);
	for (int i = 0; i < r->started; i++) {
		tuner_worker *w = r->threads[i].worker;
		int starts = tuner_worker_starts(w);

		stats->running += tuner_worker_pid(w) > 0;
		stats->restarts += starts > 1 ? starts - 1 : 0;
	}
	stats->busy_s = r->busy_ns / 1e9;
	stats->up_s = (uv_hrtime() - r->started_ns) / 1e9;
	stats->probed = r->probed;
	stats->peaks = r->peaks;
	stats->library = r->library;
	uv_mutex_unlock(&r->lock);
}
