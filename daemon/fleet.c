/*
 * fleet.c: the job queue shared by the daemons of one PostgreSQL cache
 * (docs/design/cache.md, "A shared job queue"; docs/operations.md,
 * "Several daemons on one database").
 *
 * A job is claimed whole: the runner holds a job's search in memory and
 * interleaves the generations of the jobs it holds, so it claims a job
 * and keeps it to its end, while every trial it measures and every
 * version it publishes is written to the shared cache as it comes. Those
 * are the job's checkpoints: a daemon that claims a job another left
 * (dead: its lease ran out) starts its search from every trial measured
 * of the key on this device signature (tuned_run_job reads them), so no
 * plan is measured twice, and publishes only over the fastest version.
 *
 * Every third of --lease, and when a submit queued a job, a pass on the
 * writer thread (cache_pass_jobs) renews the leases of the jobs this
 * daemon holds and knows (one it could not take, out of memory, runs out
 * and goes to another daemon), claims jobs of its device while it has
 * room (--jobs: counting the rows held, as the last pass read them, until
 * the jobs end here), and reads the queue's open jobs, those new to it
 * and those it watches. At each of those ticks the leases are renewed
 * on a connection of their own too (cache_renew_jobs on libuv's
 * threadpool), so that a writer backed up behind a slow database does
 * not lose them. With room left, the daemon helps the search of jobs
 * others hold (start_helping). Back on the
 * loop the daemon's list follows the table: the jobs it claimed go to the
 * runner; a job another daemon cancelled ends here; a job whose lease
 * this daemon lost (the database was out of its reach for longer than
 * the lease) stops here, for another daemon holds it now.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cache.h"
#include "runner.h"
#include "server.h"
#include "writer.h"

/* A pass no more often than this, whatever the lease. */
#define MIN_INTERVAL_MS 50

typedef struct fleet_pass {
	tuned_daemon *d;
	cache_job_pass pass;
	int64_t *watch, *help;
	tuned_jobs read; /* the rows read, as jobs */
	bool out_of_memory;
	int rc;
	cache_error err;
} fleet_pass;

static void start_pass(tuned_daemon *d);

/* Jobs this daemon holds: those it works on, and those whose rows the
 * last pass read held by it (a job lost and claimed again starts only
 * once the runner let go of it), until they end here. */
static int held(const tuned_daemon *d)
{
	int n = 0;

	for (const tuned_job *job = d->jobs.head; job; job = job->next)
		n += (job->claimed || job->row_claimed) && tuned_job_is_active(job);
	return n;
}

/* Jobs whose search this daemon helps, less those told to stop (their
 * places are free once their trials in flight end). */
static int helping(const tuned_daemon *d)
{
	int n = 0;

	for (const tuned_job *job = d->jobs.head; job; job = job->next)
		n += job->helping && !job->help_stopped;
	return n;
}

/* The searches this daemon may start now, of its jobs or to help. */
static int room(const tuned_daemon *d)
{
	return d->options.jobs - held(d) - helping(d);
}

/* A job another daemon holds and searches (a budget of 0 measures one
 * plan), that this daemon has not helped yet, with trials left, and
 * whose search the runner does not hold (one this daemon lost ends
 * there first). */
static bool may_help(tuned_daemon *d, const tuned_job *job)
{
	return job->held_elsewhere && job->state == TUNED_JOB_RUNNING &&
	       !job->claimed && !job->helped && job->budget_s > 0 &&
	       (job->max_trials == 0 || job->trials < job->max_trials) &&
	       !tuned_runner_holds(d->runner, job->id);
}

/* The helper's search of "job" ends here (after the trials in flight,
 * or at once when it had not started: then no end comes from the
 * runner): "why" says why. */
static void stop_helping(tuned_daemon *d, tuned_job *job, const char *why)
{
	job->help_stopped = true;
	tuned_runner_cancel(d->runner, job->id);
	if (!tuned_runner_holds(d->runner, job->id))
		job->helping = false;
	tuned_log(TUNED_INFO, "job %lld: %s: stops helping: %s", (long long)job->id,
		  job->key, why);
}

/* A job claimed here needs the place of a search this daemon helps with. */
static void make_room(tuned_daemon *d)
{
	for (tuned_job *job = d->jobs.head; job && room(d) < 0; job = job->next)
		if (job->helping && !job->help_stopped)
			stop_helping(d, job, "this daemon claimed a job of its own");
}

/* The pass gave the graph of a job this daemon asked to help: with a
 * place free, its runner searches the key too, from every trial measured
 * of it, sharing the work (runner.c, claim_plans). */
static void start_helping(tuned_daemon *d, tuned_job *job, tuned_job *row)
{
	if (!row->graph || !may_help(d, job) || room(d) <= 0)
		return;
	free(job->graph);
	job->graph = row->graph;
	row->graph = NULL;
	job->helping = job->helped = true;
	job->help_stopped = false;
	job->helped_trials = 0;
	tuned_log(TUNED_INFO,
		  "job %lld: %s: helps the daemon that holds it: searches "
		  "the key too, sharing its trials",
		  (long long)job->id, job->key);
	tuned_help_job(d, job);
}

/* A job helped here ended, or is no longer held by the daemon helped. */
static void keep_helping(tuned_daemon *d, tuned_job *job, const tuned_job *row)
{
	if (!tuned_job_is_active(row))
		stop_helping(d, job, "the job ended on the daemon that holds it");
	else if (row->claimed)
		stop_helping(d, job,
			     "this daemon holds the job now: it goes on with it");
	else if (!row->held_elsewhere)
		stop_helping(d, job, "the daemon that held it gave it back");
}

/* On the writer thread: each row, as a job. */
static int collect(void *user, const cache_job *row)
{
	fleet_pass *p = user;

	if (tuned_jobs_add_row(&p->read, row))
		return 0;
	p->out_of_memory = true;
	return 1;
}

static void run_pass(cache *c, void *data)
{
	fleet_pass *p = data;

	p->rc = cache_pass_jobs(c, &p->pass, collect, p, &p->err);
	if (p->rc == 0 && p->out_of_memory)
		p->err = (cache_error){CACHE_ENOMEM, "out of memory"}, p->rc = -1;
}

/* The fields of "job" that change, as "row" read them. */
static void copy_fields(tuned_job *job, const tuned_job *row)
{
	job->state = row->state;
	job->trials = row->trials;
	job->best_ms = row->best_ms;
	job->first_ms = row->first_ms;
	job->version = row->version;
	job->finished_at = row->finished_at;
	snprintf(job->error, sizeof(job->error), "%s", row->error);
}

/* A job this daemon claimed goes to the runner, queued here whatever
 * its row said (a job taken over was running on the daemon that died). */
static void start_claimed(tuned_daemon *d, tuned_job *job, tuned_job *row)
{
	job->claimed = true;
	make_room(d);
	if (!job->graph) {
		job->graph = row->graph;
		row->graph = NULL;
	}
	tuned_log(TUNED_INFO, "job %lld: %s claimed%s", (long long)job->id, job->key,
		  row->state == TUNED_JOB_RUNNING ?
			  ", from a daemon whose lease "
			  "ran out: its search resumes from every trial measured" :
			  "");
	job->state = TUNED_JOB_QUEUED;
	tuned_run_job(d, job);
}

/* Another daemon cancelled a job this one works on. */
static void cancelled_elsewhere(tuned_daemon *d, tuned_job *job)
{
	tuned_runner_cancel(d->runner, job->id);
	tuned_job_finish(job, TUNED_JOB_CANCELLED, "cancelled");
	tuned_log(TUNED_INFO, "job %lld: %s cancelled through another daemon",
		  (long long)job->id, job->key);
	tuned_broadcast(d, job->key, PROTO_EVENT_JOB, tuned_job_json(job));
	tuned_fail_waiters_of_job(d, job);
}

/* This daemon's lease of a job ran out and another daemon holds it: the
 * job stops here and goes on there; what it still finds here is dropped
 * (results.c). */
static void lost(tuned_daemon *d, tuned_job *job, const tuned_job *row)
{
	job->claimed = false;
	tuned_runner_cancel(d->runner, job->id);
	tuned_log(TUNED_WARN,
		  "job %lld: %s: this daemon's lease ran out (the "
		  "database was out of reach longer than --lease %g s): another "
		  "daemon holds the job now, and it stops here",
		  (long long)job->id, job->key, d->options.lease_s);
	copy_fields(job, row);
}

/* A job another daemon holds, or none, or one whose row ended otherwise
 * than this daemon wrote: this daemon shows it as its row says, unless it
 * changed it and has not written it yet. */
static void follow(tuned_daemon *d, tuned_job *job, const tuned_job *row)
{
	enum tuned_job_state was = job->state;

	if (job->dirty)
		return;
	job->reread = false;
	copy_fields(job, row);
	if (job->state == was)
		return;
	tuned_broadcast(d, job->key, PROTO_EVENT_JOB, tuned_job_json(job));
	tuned_fail_waiters_of_job(d, job);
}

/* One row read; "row" stays the pass's (its graph may be taken). */
static void merge(tuned_daemon *d, tuned_job *row)
{
	tuned_job *job = tuned_jobs_find(&d->jobs, row->id);

	if (!job) {
		job = tuned_jobs_add_copy(&d->jobs, row);
		if (!job) {
			tuned_log(TUNED_ERROR,
				  "job %lld: %s: cannot follow it: out "
				  "of memory%s",
				  (long long)row->id, row->key,
				  row->claimed ?
					  "; its lease is not renewed, and it "
					  "goes to another daemon when it runs out" :
					  "");
			return;
		}
		job->row_claimed = row->claimed;
		if (row->claimed && tuned_job_is_active(row))
			start_claimed(d, job, row);
		return;
	}
	job->row_claimed = row->claimed;
	job->held_elsewhere = row->held_elsewhere;
	if (job->helping && !job->help_stopped)
		keep_helping(d, job, row);
	if (job->reread)
		return follow(d, job, row);
	if (!job->claimed) {
		/* a job this daemon lost and claimed again, or helped, starts
		 * once the runner let go of it (a later pass: the claim is
		 * renewed) */
		if (row->claimed && tuned_job_is_active(row) &&
		    tuned_job_is_active(job) && !job->helping &&
		    !tuned_runner_holds(d->runner, job->id))
			return start_claimed(d, job, row);
		follow(d, job, row);
		return start_helping(d, job, row);
	}
	if (!tuned_job_is_active(job))
		return;
	if (!row->claimed)
		return lost(d, job, row);
	if (row->state == TUNED_JOB_CANCELLED)
		cancelled_elsewhere(d, job);
}

static void fleet_pass_free(fleet_pass *p)
{
	tuned_jobs_release(&p->read);
	free(p->watch);
	free(p->help);
	free(p);
}

/* Back on the loop. */
static void passed(void *data)
{
	fleet_pass *p = data;
	tuned_daemon *d = p->d;

	d->fleet.passing = false;
	if (d->stopping)
		return fleet_pass_free(p);
	if (p->rc < 0 && !d->fleet.failing)
		tuned_log(TUNED_ERROR,
			  "cannot reach the shared job queue: %s; the "
			  "jobs held go on, and go to other daemons if this lasts "
			  "over --lease %g s",
			  p->err.message, d->options.lease_s);
	else if (p->rc == 0 && d->fleet.failing)
		tuned_log(TUNED_INFO, "the shared job queue is reachable again");
	d->fleet.failing = p->rc < 0;
	for (tuned_job *row = p->read.head; p->rc == 0 && row; row = row->next)
		merge(d, row);
	fleet_pass_free(p);
	if (d->fleet.again) {
		d->fleet.again = false;
		start_pass(d);
	}
}

/* The pass: the rows new to this daemon (above the largest id it knows),
 * and those of the jobs it shows active, to follow them to their end, or
 * that ended otherwise than it wrote. */
static fleet_pass *new_pass(tuned_daemon *d)
{
	fleet_pass *p = calloc(1, sizeof(*p));
	int n = 0;

	if (!p)
		return NULL;
	for (tuned_job *job = d->jobs.head; job; job = job->next)
		n++;
	p->watch = calloc((size_t)n + 1, sizeof(int64_t));
	p->help = calloc((size_t)n + 1, sizeof(int64_t));
	if (!p->watch || !p->help) {
		fleet_pass_free(p);
		return NULL;
	}
	p->d = d;
	p->pass = (cache_job_pass){.device = d->device,
				   .lease_s = d->options.lease_s,
				   .claim = d->options.jobs - held(d),
				   .watch = p->watch,
				   .help = p->help};
	for (tuned_job *job = d->jobs.head; job; job = job->next) {
		if (job->id > p->pass.known_max)
			p->pass.known_max = job->id;
		if (tuned_job_is_active(job) || job->reread)
			p->watch[p->pass.nwatch++] = job->id;
		if (may_help(d, job) && p->pass.nhelp < room(d))
			p->help[p->pass.nhelp++] = job->id;
	}
	return p;
}

static void start_pass(tuned_daemon *d)
{
	fleet_pass *p;

	if (d->stopping)
		return;
	if (d->fleet.passing) {
		d->fleet.again = true;
		return;
	}
	if (!(p = new_pass(d))) {
		tuned_log(TUNED_ERROR, "cannot pass over the shared job queue: out "
				       "of memory");
		return;
	}
	if (tuned_write(d->writer, run_pass, passed, p) < 0)
		return fleet_pass_free(p);
	d->fleet.passing = true;
}

/* A renewal of the leases held, on libuv's threadpool. */
typedef struct renewal {
	uv_work_t work;
	tuned_daemon *d;
	int64_t *ids;
	int n, rc;
	cache_error err;
} renewal;

static void renew(uv_work_t *work)
{
	renewal *w = work->data;

	w->rc = cache_renew_jobs(w->d->fleet.renewer, w->d->options.lease_s, w->ids,
				 w->n, &w->err);
}

static void renewed(uv_work_t *work, int status)
{
	renewal *w = work->data;
	tuned_fleet *f = &w->d->fleet;

	f->renewing = false;
	if (status == 0 && w->rc < 0 && !f->renewals_failing)
		tuned_log(TUNED_WARN,
			  "cannot renew the leases of the jobs this daemon holds: "
			  "%s; the passes renew them, behind the cache's writes",
			  w->err.message);
	else if (status == 0 && w->rc >= 0 && f->renewals_failing)
		tuned_log(TUNED_INFO, "the leases of the jobs this daemon holds are "
				      "renewed again");
	if (status == 0)
		f->renewals_failing = w->rc < 0;
	free(w->ids);
	free(w);
}

/* The leases of the jobs this daemon holds and knows, renewed on the
 * renewer's connection: a writer thread backed up behind a slow database
 * or a large import does not lose them (the passes renew them too). */
static void start_renewal(tuned_daemon *d)
{
	renewal *w;
	int n = 0;

	if (!d->fleet.renewer || d->fleet.renewing || !(w = calloc(1, sizeof(*w))))
		return;
	for (tuned_job *job = d->jobs.head; job; job = job->next)
		n += job->claimed && tuned_job_is_active(job);
	if (!n || !(w->ids = calloc((size_t)n, sizeof(int64_t)))) {
		free(w);
		return;
	}
	for (tuned_job *job = d->jobs.head; job; job = job->next)
		if (job->claimed && tuned_job_is_active(job))
			w->ids[w->n++] = job->id;
	w->work.data = w;
	w->d = d;
	if (uv_queue_work(d->loop, &w->work, renew, renewed) < 0) {
		free(w->ids);
		free(w);
		return;
	}
	d->fleet.renewing = true;
}

static void on_tick(uv_timer_t *timer)
{
	start_renewal(timer->data);
	start_pass(timer->data);
}

void tuned_fleet_start(tuned_daemon *d)
{
	uint64_t ms = (uint64_t)(d->options.lease_s * 1000 / 3);
	cache_error err = {0};

	uv_timer_init(d->loop, &d->fleet.timer);
	d->fleet.timer.data = d;
	if (!d->jobs.shared)
		return;
	if (cache_open_reader(d->cache, &d->fleet.renewer, &err) < 0)
		tuned_log(TUNED_WARN,
			  "cannot connect the renewals of leases: %s; the passes "
			  "renew them, behind the cache's writes",
			  err.message);
	d->jobs.device = d->device;
	uv_timer_start(&d->fleet.timer, on_tick, 0,
		       ms > MIN_INTERVAL_MS ? ms : MIN_INTERVAL_MS);
}

void tuned_fleet_kick(tuned_daemon *d)
{
	if (d->jobs.shared)
		start_pass(d);
}

void tuned_fleet_stop(tuned_daemon *d)
{
	uv_close((uv_handle_t *)&d->fleet.timer, NULL);
}

void tuned_fleet_release(tuned_daemon *d)
{
	cache_error err = {0};

	cache_close(d->fleet.renewer);
	d->fleet.renewer = NULL;
	if (d->jobs.shared && cache_release_jobs(d->cache, &err) < 0)
		tuned_log(TUNED_ERROR,
			  "cannot give back the jobs this daemon held: "
			  "%s; they go to other daemons when their lease runs out",
			  err.message);
}
