/*
 * handlers.c: what the daemon answers to each request (docs/protocol.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#include "kgen.h"
#include "tuner.h"
#include "scheduler.h"
#include "server.h"
#include "transfer.h"
#include "writer.h"

/* Trials read back for a job from the cache, newest first, at most. */
#define MAX_KNOWN_TRIALS 20000
/* Tuned keys compared with a new one for its nearest, at most. */
#define MAX_NEIGHBOURS 256

static void reply(tuned_client *client, proto_request *req, json_t *result)
{
	tuned_client_send(client, proto_reply_result(req->id, result));
	proto_session_done(&client->session);
}

static void reply_error(tuned_client *client, proto_request *req, int code,
			const char *message)
{
	tuned_client_send(client, proto_reply_error(req->id, code, "%s", message));
	proto_session_done(&client->session);
}

/* A request answered after this call returns (off the loop, or once
 * stored): "*held" gets the request with its own references to id and
 * params, and the client is held, for it may close meanwhile. */
static void hold_request(tuned_client *client, const proto_request *req,
			 proto_request *held)
{
	*held = *req;
	json_incref(held->id);
	json_incref(held->params);
	tuned_client_hold(client);
}

static void release_request(tuned_client *client, proto_request *held)
{
	tuned_client_release(client);
	proto_request_release(held);
}

/* A reply held until the writes handed to the writer thread before it
 * are over: what it says is stored then. */
typedef struct held_reply {
	tuned_client *client;
	proto_request req; /* its own references to id and params */
	json_t *result;
} held_reply;

static void send_held(void *data)
{
	held_reply *h = data;

	reply(h->client, &h->req, h->result);
	release_request(h->client, &h->req);
	free(h);
}

static void reply_once_stored(tuned_client *client, proto_request *req, json_t *result)
{
	held_reply *h = malloc(sizeof(*h));

	if (!h)
		return reply(client, req, result);
	*h = (held_reply){.client = client, .result = result};
	if (tuned_write(client->daemon->writer, NULL, send_held, h) < 0) {
		free(h);
		return reply(client, req, result);
	}
	hold_request(client, req, &h->req);
}

/* A write of the job queue (tuned_save_jobs). */
typedef struct jobs_write {
	tuned_daemon *d;
	tuned_jobs_changes *changes;
	int rc;
	char why[600];
} jobs_write;

static void write_jobs(cache *c, void *data)
{
	jobs_write *j = data;

	j->rc = tuned_jobs_changes_write(j->changes, c, j->why, sizeof(j->why));
}

static void wrote_jobs(void *data)
{
	jobs_write *j = data;

	if (j->rc < 0) {
		tuned_log(TUNED_ERROR, "cannot save the job queue: %s", j->why);
		tuned_jobs_changes_lost(&j->d->jobs, j->changes);
	} else if (j->rc > 0) {
		tuned_jobs_changes_ended(&j->d->jobs, j->changes);
	}
	tuned_jobs_changes_free(j->changes);
	free(j);
}

void tuned_save_jobs(tuned_daemon *d)
{
	jobs_write *j = calloc(1, sizeof(*j));

	if (j && (j->changes = tuned_jobs_take_changes(&d->jobs))) {
		j->d = d;
		if (tuned_write(d->writer, write_jobs, wrote_jobs, j) == 0)
			return;
		tuned_jobs_changes_lost(&d->jobs, j->changes);
		tuned_jobs_changes_free(j->changes);
	}
	free(j);
	tuned_log(TUNED_ERROR, "cannot hand the job queue to the cache's writer "
		  "(out of memory, or stopping): it is saved at the next change, or "
		  "at the stop");
}

/* The parser has refused other versions already (version_mismatch). */
static void on_hello(tuned_client *client, proto_request *req)
{
	tuned_client_ready(client);
	reply(client, req, proto_hello_result(TUNED_VERSION));
}

/* The graph of a submit as text, whether it came as an object or text. */
static char *graph_text(const json_t *graph)
{
	if (json_is_string(graph))
		return strdup(json_string_value(graph));
	return json_dumps(graph, JSON_COMPACT | JSON_PRESERVE_ORDER);
}

/* The best version the cache holds for "key" on this device and code
 * generator, or NULL. */
static cache_plan *best_version(tuned_daemon *d, const char *key)
{
	cache_plan *plan = NULL;

	if (cache_fetch_best(d->cache, key, d->device, KGEN_CODEGEN_VERSION, 0, &plan,
			     NULL) > 0)
		return plan;
	cache_plan_free(plan);
	return NULL;
}

int tuned_cached_version(tuned_daemon *d, const char *key)
{
	cache_plan *plan = best_version(d, key);
	int version = plan ? plan->version : 0;

	cache_plan_free(plan);
	return version;
}

static void subscribe(tuned_client *client, const char *key)
{
	for (int i = 0; i < client->nwatches; i++)
		if (!strcmp(client->watches[i], key))
			return;
	if (client->nwatches < TUNED_MAX_WATCHES)
		snprintf(client->watches[client->nwatches++], PROTO_KEY_HEX + 1, "%s", key);
}

/* The plan of the key's best version on "c" (the daemon's cache or its
 * reader), or NULL. */
static json_t *incumbent_plan(tuned_daemon *d, cache *c, const char *key)
{
	cache_plan *plan = NULL;
	json_t *json = NULL;

	if (cache_fetch_best(c, key, d->device, KGEN_CODEGEN_VERSION, 0, &plan, NULL) > 0)
		json = json_loads(plan->plan, JSON_DECODE_ANY, NULL);
	cache_plan_free(plan);
	return json;
}

/* Keys with a version on this device and code generator, at most
 * MAX_NEIGHBOURS, for nearest_key (which cannot read the cache inside
 * cache_list). */
typedef struct neighbours {
	const tuned_daemon *d;
	int n;
	char keys[MAX_NEIGHBOURS][PROTO_KEY_HEX + 1];
} neighbours;

static int add_neighbour(void *user, const cache_entry *e)
{
	neighbours *nb = user;

	if (!strcmp(e->device, nb->d->device) && !strcmp(e->codegen, KGEN_CODEGEN_VERSION))
		snprintf(nb->keys[nb->n++], PROTO_KEY_HEX + 1, "%s", e->graph);
	return nb->n == MAX_NEIGHBOURS;
}

/* The canonical text of "key" in the cache "c", or NULL (free it). */
static char *canonical_of(cache *c, const char *key)
{
	json_t *shown = NULL;
	char *canonical = NULL;

	if (cache_show(c, key, &shown, NULL) == 0 &&
	    json_string_value(json_object_get(shown, "canonical")))
		canonical = strdup(json_string_value(json_object_get(shown, "canonical")));
	json_decref(shown);
	return canonical;
}

/* How far the graph of "key" is from "canonical" (INFINITY: not of the
 * same form). */
static double distance_to(cache *c, const char *key, const char *canonical)
{
	char *theirs = canonical_of(c, key);
	double distance = INFINITY;

	if (!theirs || !sched_canonical_distance(theirs, canonical, &distance))
		distance = INFINITY;
	free(theirs);
	return distance;
}

/* The key nearest "key" of the same form (the same ops on other shapes)
 * among those tuned on this device, into "nearest"; false when none. */
static bool nearest_key(tuned_daemon *d, cache *c, const char *key,
			char nearest[PROTO_KEY_HEX + 1])
{
	neighbours *nb = calloc(1, sizeof(*nb));
	char *canonical = canonical_of(c, key);
	double best = INFINITY;

	if (nb && canonical) {
		nb->d = d;
		cache_list(c, add_neighbour, nb, NULL);
	}
	for (int i = 0; nb && canonical && i < nb->n; i++) {
		double distance = strcmp(nb->keys[i], key) ?
				  distance_to(c, nb->keys[i], canonical) : INFINITY;

		if (distance < best) {
			best = distance;
			snprintf(nearest, PROTO_KEY_HEX + 1, "%s", nb->keys[i]);
		}
	}
	free(canonical);
	free(nb);
	return best < INFINITY;
}

/* What the runner is told of a queued job, read from the cache off the
 * loop thread (prepare_job) and handed over on it (on_job_prepared). */
typedef struct job_work {
	uv_work_t work;
	tuned_daemon *d;
	int64_t job;
	char key[PROTO_KEY_HEX + 1];
	tuned_job_spec spec;
	char nearest[PROTO_KEY_HEX + 1]; /* the key spec.neighbour is of */
	char why[300]; /* set: the job cannot run, and why */
	char trials_error[220]; /* set: it runs without its trials, and why */
	bool helping;           /* the search helps the daemon that holds the job */
} job_work;

/* Versions a read found failing their checksum are marked bad by the
 * writer thread, which this wakes. */
static void mark_found_bad(tuned_daemon *d)
{
	if (cache_found_bad_waiting(d->cache))
		tuned_write(d->writer, NULL, NULL, NULL);
}

/* The runner searches from what this device measured of the key before:
 * no plan is measured twice, and the best ones seed the search; a key
 * never tuned starts from the plan of the nearest key of its form. Plans
 * that crashed or hung a worker are never tried again, even once their
 * trials are pruned: a job whose quarantine cannot be read fails, saying
 * so. */
static void prepare_job(uv_work_t *work)
{
	job_work *w = work->data;
	tuned_daemon *d = w->d;
	cache_error err = {0};

	tuned_thread_background();
	uv_mutex_lock(&d->reader_lock);
	if (cache_quarantined_plans(d->reader, w->key, d->device, KGEN_CODEGEN_VERSION,
				    &w->spec.quarantined, &err) < 0) {
		snprintf(w->why, sizeof(w->why), "the quarantine cannot be read: %.200s",
			 err.message);
		uv_mutex_unlock(&d->reader_lock);
		return;
	}
	w->spec.incumbent = incumbent_plan(d, d->reader, w->key);
	if (!w->spec.incumbent && nearest_key(d, d->reader, w->key, w->nearest))
		w->spec.neighbour = incumbent_plan(d, d->reader, w->nearest);
	if (cache_trials(d->reader, w->key, d->device, KGEN_CODEGEN_VERSION,
			 MAX_KNOWN_TRIALS, &w->spec.known, &err) < 0)
		snprintf(w->trials_error, sizeof(w->trials_error), "%.200s", err.message);
	uv_mutex_unlock(&d->reader_lock);
}

static void job_work_free(job_work *w)
{
	json_decref(w->spec.known);
	json_decref(w->spec.incumbent);
	json_decref(w->spec.neighbour);
	json_decref(w->spec.quarantined);
	free(w);
}

/* The job failed before it started: its waiters and watchers are told. */
static void fail_job(tuned_daemon *d, tuned_job *job, const char *why)
{
	tuned_log(TUNED_ERROR, "job %lld: %s: %s", (long long)job->id, job->key, why);
	tuned_job_finish(job, TUNED_JOB_FAILED, why);
	tuned_save_jobs(d);
	tuned_broadcast(d, job->key, PROTO_EVENT_JOB, tuned_job_json(job));
	tuned_fail_waiters(d, job->key, PROTO_EINTERNAL, why);
}

/* Whether the job prepared is still to go to the runner: queued (not
 * cancelled meanwhile) and still this daemon's (on a shared queue, its
 * lease not lost meanwhile); or, helped, still running on the daemon
 * that holds it, and still helped. */
static bool still_wanted(const job_work *w, const tuned_job *job)
{
	if (w->helping)
		return job->helping && !job->help_stopped && !job->claimed &&
		       job->state == TUNED_JOB_RUNNING &&
		       !tuned_runner_holds(w->d->runner, job->id);
	return job->state == TUNED_JOB_QUEUED && job->claimed;
}

/* A helped job whose search cannot start here: the daemon that holds it
 * goes on alone. */
static void help_not_started(tuned_job *job, const char *why)
{
	job->helping = false;
	tuned_log(TUNED_WARN, "job %lld: %s: cannot help its search here: %s",
		  (long long)job->id, job->key, why);
}

/* Back on the loop: the job goes to the runner if it is still wanted
 * and the daemon is not stopping. */
static void on_job_prepared(uv_work_t *work, int status)
{
	job_work *w = work->data;
	tuned_daemon *d = w->d;
	tuned_job *job = tuned_jobs_find(&d->jobs, w->job);

	if (job && w->helping && (status < 0 || d->stopping || !still_wanted(w, job)))
		job->helping = false;
	if (status < 0 || d->stopping || !job || !still_wanted(w, job))
		return job_work_free(w);
	if (w->why[0]) {
		if (w->helping)
			help_not_started(job, w->why);
		else
			fail_job(d, job, w->why);
		return job_work_free(w);
	}
	if (w->trials_error[0])
		tuned_log(TUNED_WARN, "job %lld: the trials of %s cannot be read: %s",
			  (long long)job->id, job->key, w->trials_error);
	if (w->spec.neighbour)
		tuned_log(TUNED_INFO, "job %lld: %s starts from the plan of %s, the nearest "
			  "key of the same form", (long long)job->id, job->key, w->nearest);
	mark_found_bad(d);
	w->spec.graph = job->graph;
	if (tuned_runner_submit(d->runner, &w->spec) == 0)
		tuned_update_waited(d);
	else if (w->helping)
		help_not_started(job, "out of memory");
	else
		fail_job(d, job, "cannot hand it to the runner: out of memory");
	free(w); /* the runner took the spec's parts */
}

/* Prepares "job" for the runner off the loop; "max_trials" is its limit
 * there. False when out of memory. */
static bool prepare(tuned_daemon *d, const tuned_job *job, int max_trials, bool helping)
{
	job_work *w = calloc(1, sizeof(*w));

	if (!w) {
		tuned_log(TUNED_ERROR, "job %lld: cannot prepare it: out of memory",
			  (long long)job->id);
		return false;
	}
	w->work.data = w;
	w->d = d;
	w->spec = (tuned_job_spec){.job = job->id,
				   .budget_s = job->budget_s,
				   .max_trials = max_trials,
				   .priority = job->priority};
	w->job = job->id;
	w->helping = helping;
	snprintf(w->key, sizeof(w->key), "%s", job->key);
	uv_queue_work(d->loop, &w->work, prepare_job, on_job_prepared);
	return true;
}

void tuned_run_job(tuned_daemon *d, const tuned_job *job)
{
	prepare(d, job, job->max_trials, false);
}

/* A helper measures at most the trials the job has left, as its row
 * said; its budget is the job's (it stops when the job ends). */
void tuned_help_job(tuned_daemon *d, tuned_job *job)
{
	if (!prepare(d, job, job->max_trials ? job->max_trials - job->trials : 0, true))
		job->helping = false;
}

/* A graph of a submit, copied out of its sched_graph: its key, name and
 * canonical forms. */
typedef struct submitted_graph {
	char key[PROTO_KEY_HEX + 1];
	char *name;
	char *canonical;      /* the canonical text */
	char *canonical_json; /* the graph.json of the key */
	cache_error kept;     /* code < 0: the graph.json was not kept */
	int64_t job;          /* the job it queued, or the key's active one */
	bool new_job;         /* it queued the job */
} submitted_graph;

/* A submit, read off the loop thread (read_submit, on libuv's
 * threadpool): its graph parsed and checked within the daemon's limits,
 * its key and canonical forms, and with "grad" its backward graph too; on
 * the loop (queue_submitted), the jobs are queued; on the writer thread
 * (store_submitted), the graphs and the jobs are stored; back on the loop
 * (submitted), the jobs run and the client is answered. */
typedef struct submit_work {
	uv_work_t work;
	tuned_client *client; /* held until the reply */
	proto_request req;    /* its own references to id and params */
	sched_limits limits;
	submitted_graph forward;
	submitted_graph backward; /* with "grad" */
	char *grad_json;      /* the backward graph.json, as autodiff wrote it */
	char *saving_json;    /* with "save": the forward graph.json that also
			       * outputs what the backward graph reads saved,
			       * which "forward" is then, or NULL */
	const char *refused;  /* the param refused ("params.graph"), or NULL */
	sched_error err;      /* why it was refused */
	tuned_jobs_changes *changes; /* the queue's changes, the new jobs' rows */
	cache_error stored;   /* code < 0: a graph or a job was not stored */
} submit_work;

static int copy_graph(submitted_graph *g, const sched_graph *graph)
{
	snprintf(g->key, sizeof(g->key), "%s", sched_graph_key(graph));
	g->name = strdup(sched_graph_name(graph));
	g->canonical = strdup(sched_graph_canonical(graph));
	g->canonical_json = sched_graph_canonical_json(graph);
	return g->name && g->canonical && g->canonical_json ? 0 : -1;
}

static void submitted_graph_free(submitted_graph *g)
{
	free(g->name);
	free(g->canonical);
	free(g->canonical_json);
}

static void refuse_submit(submit_work *w, const char *param, const char *why)
{
	w->refused = param;
	if (why)
		snprintf(w->err.message, sizeof(w->err.message), "%s", why);
}

/* The forward graph that outputs the saved tensors, read within the
 * submit's limits: the forward graph tuned from now on. */
static void take_saving(submit_work *w)
{
	sched_graph *saving = NULL;

	if (sched_graph_read_limited(w->saving_json, &w->limits, &saving, &w->err) < 0)
		return refuse_submit(w, "params.save: the forward graph", NULL);
	submitted_graph_free(&w->forward);
	memset(&w->forward, 0, sizeof(w->forward));
	if (copy_graph(&w->forward, saving) < 0)
		refuse_submit(w, "params.save", "out of memory");
	sched_graph_free(saving);
}

/* The backward graph of "graph" with respect to the names of "grad", read
 * back within the same limits as the graph itself; with "save", the
 * forward graph that also outputs the tensors it reads saved. */
static void differentiate(submit_work *w, const sched_graph *graph)
{
	size_t n = json_array_size(w->req.grad);
	const char *wrt[PROTO_GRAD_MAX];
	sched_graph *backward = NULL;
	enum sched_grad_save save = w->req.save == PROTO_SAVE_ALL  ? SCHED_SAVE_ALL :
				    w->req.save == PROTO_SAVE_AUTO ? SCHED_SAVE_AUTO :
								     SCHED_SAVE_NONE;

	for (size_t i = 0; i < n; i++)
		wrt[i] = json_string_value(json_array_get(w->req.grad, i));
	if (sched_graph_grad_saving(graph, wrt, (int)n, save, &w->grad_json,
				    &w->saving_json, &w->err) < 0)
		return refuse_submit(w, "params.grad", NULL);
	if (sched_graph_read_limited(w->grad_json, &w->limits, &backward, &w->err) < 0)
		return refuse_submit(w, "params.grad: the backward graph", NULL);
	if (copy_graph(&w->backward, backward) < 0)
		refuse_submit(w, "params.grad", "out of memory");
	sched_graph_free(backward);
	if (!w->refused && w->saving_json)
		take_saving(w);
}

/* What the loop needs of the graph, copied out of it: the graph itself
 * (hundreds of megabytes for the largest) is freed here too. The job
 * runs the key's canonical graph.json, which the runner then reads once
 * (docs/cache.md, "Canonical numbering"). */
static void read_submit(uv_work_t *work)
{
	submit_work *w = work->data;
	sched_graph *graph = NULL;
	char *text;
	int rc;

	tuned_thread_background();
	if (!(text = graph_text(w->req.graph)))
		return refuse_submit(w, "params.graph", "out of memory");
	rc = sched_graph_read_limited(text, &w->limits, &graph, &w->err);
	free(text);
	if (rc < 0)
		return refuse_submit(w, "params.graph", NULL);
	if (copy_graph(&w->forward, graph) < 0)
		refuse_submit(w, "params.graph", "out of memory");
	else if (w->req.grad)
		differentiate(w, graph);
	sched_graph_free(graph);
}

static void submit_work_free(submit_work *w)
{
	release_request(w->client, &w->req);
	tuned_jobs_changes_free(w->changes);
	submitted_graph_free(&w->forward);
	submitted_graph_free(&w->backward);
	free(w->grad_json);
	free(w->saving_json);
	free(w);
}

static bool has_backward(const submit_work *w)
{
	return w->backward.canonical != NULL;
}

/* On the writer thread: the graphs (their canonical text, and the
 * graph.json an export carries), then the queue with the jobs. */
static void store_submitted(cache *c, void *data)
{
	submit_work *w = data;
	char why[sizeof(w->stored.message)];
	int rc;

	if (cache_put_graph(c, w->forward.key, w->forward.canonical, w->forward.name,
			    &w->stored) < 0)
		return;
	cache_keep_graph_json(c, w->forward.key, w->forward.canonical_json,
			      &w->forward.kept);
	if (has_backward(w)) {
		if (cache_put_graph(c, w->backward.key, w->backward.canonical,
				    w->backward.name, &w->stored) < 0)
			return;
		cache_keep_graph_json(c, w->backward.key, w->backward.canonical_json,
				      &w->backward.kept);
	}
	rc = tuned_jobs_changes_write(w->changes, c, why, sizeof(why));
	if (rc < 0) {
		w->stored.code = rc;
		snprintf(w->stored.message, sizeof(w->stored.message),
			 "cannot queue the job: %.480s", why);
	}
}

/* A job this submit queued fails, saying why, so that no job runs that a
 * restart would lose. */
static void fail_new_job(tuned_daemon *d, const submitted_graph *g, const char *why)
{
	tuned_job *job = g->new_job ? tuned_jobs_find(&d->jobs, g->job) : NULL;

	if (job && job->state == TUNED_JOB_QUEUED) {
		tuned_job_finish(job, TUNED_JOB_FAILED, why);
		tuned_save_jobs(d);
	}
}

/* The jobs could not be stored: they fail, and the client is told why. */
static void submit_failed(tuned_daemon *d, submit_work *w)
{
	tuned_log(TUNED_ERROR, "submit of %s by pid %d: %s", w->forward.key,
		  (int)w->client->peer.pid, w->stored.message);
	if (w->changes)
		tuned_jobs_changes_lost(&d->jobs, w->changes);
	fail_new_job(d, &w->forward, w->stored.message);
	fail_new_job(d, &w->backward, w->stored.message);
	reply_error(w->client, &w->req, PROTO_EINTERNAL, w->stored.message);
}

/* The job of "g", run if this submit queued it, and its reply object. */
static json_t *start_submitted(tuned_client *client, const submitted_graph *g,
			       tuned_job *job, const char *what)
{
	tuned_daemon *d = client->daemon;
	json_t *result;

	if (g->kept.code < 0)
		tuned_log(TUNED_WARN, "%s: cannot keep its graph.json: %s", g->key,
			  g->kept.message);
	/* on a shared queue, the job goes to whichever daemon claims it */
	if (g->new_job && job->state == TUNED_JOB_QUEUED && !d->stopping) {
		if (d->jobs.shared)
			tuned_fleet_kick(d);
		else
			tuned_run_job(d, job);
	}
	tuned_log(TUNED_INFO, "job %lld: '%s' %s%s submitted by pid %d",
		  (long long)job->id, job->name, job->key, what,
		  (int)client->peer.pid);
	subscribe(client, job->key);
	result = tuned_job_json(job);
	json_object_set_new(result, "cached_version",
			    json_integer(tuned_cached_version(d, job->key)));
	return result;
}

/* A job forgotten between its queueing and its store (cancelled and
 * pruned meanwhile) fails the submit. */
static bool jobs_found(tuned_daemon *d, submit_work *w, tuned_job **forward,
		       tuned_job **backward)
{
	*forward = tuned_jobs_find(&d->jobs, w->forward.job);
	*backward = has_backward(w) ? tuned_jobs_find(&d->jobs, w->backward.job) : NULL;
	if (*forward && (*backward || !has_backward(w)))
		return true;
	snprintf(w->stored.message, sizeof(w->stored.message),
		 "job %lld was forgotten meanwhile",
		 (long long)(*forward ? w->backward.job : w->forward.job));
	return false;
}

static void submitted(void *data)
{
	submit_work *w = data;
	tuned_client *client = w->client;
	tuned_daemon *d = client->daemon;
	tuned_job *forward, *backward;
	json_t *result, *grad;

	if (w->stored.code < 0 || !jobs_found(d, w, &forward, &backward)) {
		submit_failed(d, w);
		return submit_work_free(w);
	}
	result = start_submitted(client, &w->forward, forward, "");
	if (backward) {
		grad = start_submitted(client, &w->backward, backward,
				       " (its backward graph)");
		json_object_set_new(grad, "graph", json_string(w->grad_json));
		json_object_set_new(result, "grad", grad);
		if (w->saving_json)
			json_object_set_new(result, "graph",
					    json_string(w->saving_json));
	}
	if (!d->stopping)
		tuned_update_waited(d);
	reply(client, &w->req, result);
	submit_work_free(w);
}

/* A new job of the client's uid for "g", or the one already queued or
 * running for the same key (which stays its first submitter's). */
static tuned_job *queue_graph(tuned_client *client, const proto_request *req,
			      submitted_graph *g)
{
	tuned_daemon *d = client->daemon;
	tuned_job *job = tuned_jobs_find_active(&d->jobs, g->key);

	if (!job) {
		job = tuned_jobs_add(&d->jobs, client->peer.uid, g->key, g->name,
				     g->canonical_json, req->budget_s, (int)req->trials,
				     (int)req->priority);
		g->new_job = job != NULL;
	}
	if (job)
		g->job = job->id;
	return job;
}

/* The jobs, stored by the writer thread before the client is answered. */
static void queue_submitted(tuned_client *client, submit_work *w)
{
	tuned_daemon *d = client->daemon;
	bool queued = queue_graph(client, &w->req, &w->forward) &&
		      (!has_backward(w) || queue_graph(client, &w->req, &w->backward));

	if (!queued || !(w->changes = tuned_jobs_take_changes(&d->jobs)) ||
	    tuned_write(d->writer, store_submitted, submitted, w) < 0) {
		w->stored = (cache_error){CACHE_ENOMEM, "cannot queue the job: out of memory"};
		if (!queued && d->jobs.error[0])
			snprintf(w->stored.message, sizeof(w->stored.message),
				 "cannot queue the job: %.480s", d->jobs.error);
		submit_failed(d, w);
		return submit_work_free(w);
	}
}

static void on_submit_read(uv_work_t *work, int status)
{
	submit_work *w = work->data;
	tuned_client *client = w->client;
	char message[600];

	if (status < 0 || client->daemon->stopping) {
		/* not queued: the client is gone with the daemon */
	} else if (w->refused) {
		snprintf(message, sizeof(message), "%s: %s", w->refused, w->err.message);
		if (w->forward.key[0])
			tuned_log(TUNED_WARN, "submit of %s by pid %d refused: %s",
				  w->forward.key, (int)client->peer.pid, message);
		else if (w->err.code == SCHED_ELIMIT)
			tuned_log(TUNED_WARN, "submit by pid %d refused: %s",
				  (int)client->peer.pid, w->err.message);
		reply_error(client, &w->req, PROTO_EBAD_REQUEST, message);
	} else {
		return queue_submitted(client, w);
	}
	submit_work_free(w);
}

static void on_submit(tuned_client *client, proto_request *req)
{
	const tuned_options *o = &client->daemon->options;
	submit_work *w = calloc(1, sizeof(*w));

	if (!w)
		return reply_error(client, req, PROTO_EINTERNAL, "out of memory");
	w->work.data = w;
	w->client = client;
	hold_request(client, req, &w->req);
	w->limits = (sched_limits){
		{o->max_graph_bytes, "tuned --max-graph-bytes"},
		{o->max_graph_ops, "tuned --max-graph-ops"},
		{o->max_tensor_elements, "tuned --max-tensor-elements"},
		{o->max_graph_elements, "tuned --max-graph-elements"}};
	uv_queue_work(client->daemon->loop, &w->work, read_submit, on_submit_read);
}

static tuned_job *find_job(tuned_client *client, proto_request *req)
{
	tuned_job *job = tuned_jobs_find(&client->daemon->jobs, req->job);

	if (!job) {
		char message[64];

		snprintf(message, sizeof(message), "no job %lld", (long long)req->job);
		reply_error(client, req, PROTO_ENOT_FOUND, message);
	}
	return job;
}

static void on_status(tuned_client *client, proto_request *req)
{
	tuned_job *job = find_job(client, req);

	if (job)
		reply(client, req, tuned_job_json(job));
}

static void on_list(tuned_client *client, proto_request *req)
{
	json_t *list = json_array();

	for (tuned_job *job = client->daemon->jobs.head; job; job = job->next)
		json_array_insert_new(list, 0, tuned_job_json(job));
	reply(client, req, json_pack("{s:o}", "jobs", list));
}

/* What a client that is not an admin is told it needs. */
#define ADMIN_IS "the daemon's own user, root, or a member of a group given " \
		 "with tuned --admin-gid"

/* Only its submitter (the first, when others submitted the same key
 * since) and the admins may cancel a job: another's cancel is refused,
 * saying so, and logged. */
static bool may_cancel(tuned_client *client, proto_request *req,
		       const tuned_job *job)
{
	char message[PROTO_MESSAGE_MAX], owner[48] = "an unknown user";

	if (client->admin || (job->uid != TUNED_UID_UNKNOWN &&
			      job->uid == client->peer.uid))
		return true;
	if (job->uid != TUNED_UID_UNKNOWN)
		snprintf(owner, sizeof(owner), "uid %d", (int)job->uid);
	snprintf(message, sizeof(message), "job %lld (%s) was submitted by %s: only "
		 "its submitter or an admin (" ADMIN_IS ") may cancel it, not uid %d",
		 (long long)job->id, job->key, owner, (int)client->peer.uid);
	tuned_log(TUNED_WARN, "cancel refused: %s", message);
	reply_error(client, req, PROTO_EUNAUTHORIZED, message);
	return false;
}

static void on_cancel(tuned_client *client, proto_request *req)
{
	tuned_daemon *d = client->daemon;
	tuned_job *job = find_job(client, req);

	if (!job || !may_cancel(client, req, job))
		return;
	if (job->state == TUNED_JOB_QUEUED || job->state == TUNED_JOB_RUNNING) {
		/* cancelled now, not when the runner ends it: what it still
		 * finds is dropped (results.c), and the reply waits for the
		 * versions being stored, so no version follows the reply */
		tuned_runner_cancel(d->runner, job->id);
		tuned_job_finish(job, TUNED_JOB_CANCELLED, "cancelled");
		tuned_broadcast(d, job->key, PROTO_EVENT_JOB, tuned_job_json(job));
		tuned_fail_waiters(d, job->key, PROTO_ECANCELLED, "the job was cancelled");
		tuned_save_jobs(d);
		tuned_log(TUNED_INFO, "job %lld cancelled by uid %d", (long long)job->id,
			  (int)client->peer.uid);
	}
	reply_once_stored(client, req, tuned_job_json(job));
}

/* A number, or null for the cache's NaN (unknown); JSON has no NaN. */
static json_t *number_or_null(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

/* The stored plan "text" marked with the key in whose canonical
 * numbering its ops are given (kgen_graph_for_plan reads the mark). */
static json_t *plan_of_key(const char *text, const char *key)
{
	json_t *plan = json_loads(text, 0, NULL);

	if (!json_is_object(plan)) {
		json_decref(plan);
		return json_null();
	}
	json_object_set_new(plan, "key", json_string(key));
	return plan;
}

/* A fetch's result: the kernel of "plan", a version of "key" (freed). */
static json_t *kernel_result(tuned_daemon *d, const char *key, cache_plan *plan)
{
	json_t *result = json_pack(
		"{s:s, s:i, s:s, s:s, s:o, s:o, s:s, s:o, s:o, s:o}", "key", key,
		"version", plan->version, "device", d->device, "codegen",
		KGEN_CODEGEN_VERSION, "median_ms", number_or_null(plan->median_ms),
		"spread_ms", number_or_null(plan->spread_ms), "found_by",
		plan->found_by ?: "", "plan", plan_of_key(plan->plan, key), "sources",
		json_loads(plan->sources ?: "[]", 0, NULL) ?: json_array(), "launch",
		plan->launch ? json_loads(plan->launch, 0, NULL) ?: json_array() :
			       json_array());
	cache_plan_free(plan);
	return result;
}

/* The fetch result: the newest good plan of "key" on this daemon's device
 * and code generator, if it is at least "min_version". NULL when none,
 * with *err (may be NULL) saying why. */
static json_t *fetch_result(tuned_daemon *d, const char *key, int64_t min_version,
			    cache_error *err)
{
	cache_plan *plan = NULL;

	if (cache_fetch_best(d->cache, key, d->device, KGEN_CODEGEN_VERSION,
			     (int)min_version, &plan, err) < 0)
		return NULL;
	return kernel_result(d, key, plan);
}

static void on_waiter_closed(uv_handle_t *handle)
{
	tuned_waiter *w = handle->data;

	json_decref(w->id);
	free(w);
}

static void unlink_waiter(tuned_daemon *d, tuned_waiter *w)
{
	for (tuned_waiter **at = &d->waiters; *at; at = &(*at)->next)
		if (*at == w) {
			*at = w->next;
			break;
		}
	uv_close((uv_handle_t *)&w->timer, on_waiter_closed);
	tuned_update_waited(d);
}

static void on_waiter_timeout(uv_timer_t *timer)
{
	tuned_waiter *w = timer->data;
	tuned_daemon *d = w->client->daemon;

	tuned_client_send(w->client, proto_reply_error(w->id, PROTO_ETIMEOUT,
		"no version of %s newer than %lld came in time", w->key,
		(long long)(w->min_version > 0 ? w->min_version - 1 : 0)));
	proto_session_done(&w->client->session);
	unlink_waiter(d, w);
}

/* A fetch of "key" that waits for a version: at least min_version, or,
 * with a run, the first, which the run then pins. */
static void add_waiter(tuned_client *client, proto_request *req, const char *key)
{
	tuned_daemon *d = client->daemon;
	tuned_waiter *w;

	/* a waiter must not outlive its client, nor keep a stopping loop alive */
	if (client->closing)
		return;
	if (d->stopping)
		return reply_error(
			client, req, PROTO_EINTERNAL,
			"the daemon is stopping: no version of this key is awaited");
	w = calloc(1, sizeof(*w));
	if (!w)
		return reply_error(client, req, PROTO_EINTERNAL, "out of memory");
	w->client = client;
	w->id = json_incref(req->id);
	w->min_version = req->min_version;
	snprintf(w->key, sizeof(w->key), "%s", key);
	snprintf(w->run, sizeof(w->run), "%s", req->run);
	uv_timer_init(d->loop, &w->timer);
	w->timer.data = w;
	uv_timer_start(&w->timer, on_waiter_timeout, (uint64_t)req->timeout_ms, 0);
	w->next = d->waiters;
	d->waiters = w;
	tuned_update_waited(d);
}

static void fetch_pinned(tuned_client *client, proto_request *req, const char *key);

/* A run's fetch that waited for the key's first version: it is pinned
 * now, through the writer, as a fetch that found one at once. */
static void wake_run_waiter(tuned_daemon *d, tuned_waiter *w)
{
	proto_request req = {.op = PROTO_OP_FETCH, .id = w->id};

	snprintf(req.run, sizeof(req.run), "%s", w->run);
	fetch_pinned(w->client, &req, w->key);
	unlink_waiter(d, w);
}

void tuned_wake_waiters(tuned_daemon *d, const char *key, int version)
{
	for (tuned_waiter *w = d->waiters, *next; w; w = next) {
		json_t *result;

		next = w->next;
		if (!strcmp(w->key, key) && w->run[0] && version > 0) {
			wake_run_waiter(d, w);
			continue;
		}
		if (strcmp(w->key, key) || version < w->min_version ||
		    !(result = fetch_result(d, key, w->min_version, NULL)))
			continue;
		tuned_client_send(w->client, proto_reply_result(w->id, result));
		proto_session_done(&w->client->session);
		unlink_waiter(d, w);
	}
}

void tuned_fail_waiters(tuned_daemon *d, const char *key, int code,
			const char *message)
{
	for (tuned_waiter *w = d->waiters, *next; w; w = next) {
		next = w->next;
		if (strcmp(w->key, key))
			continue;
		tuned_client_send(w->client, proto_reply_error(w->id, code, "%s", message));
		proto_session_done(&w->client->session);
		unlink_waiter(d, w);
	}
}

void tuned_drop_waiters(tuned_daemon *d, tuned_client *client)
{
	for (tuned_waiter *w = d->waiters, *next; w; w = next) {
		next = w->next;
		if (w->client == client)
			unlink_waiter(d, w);
	}
}

/* A fetch of "key" that found no version: it waits (timeout_ms), or is
 * told why not. "err" says what the cache found. */
static void fetch_missed(tuned_client *client, proto_request *req, const char *key,
			 const cache_error *err)
{
	tuned_daemon *d = client->daemon;
	char message[PROTO_MESSAGE_MAX];

	/* On a shared queue, a key may be tuned by another daemon whose job
	 * this one learns of only at its next pass: a fetch that may wait
	 * does, and asks for that pass now. */
	if (d->jobs.shared && req->timeout_ms > 0 && req->job <= 0) {
		add_waiter(client, req, key);
		tuned_fleet_kick(d);
		return;
	}
	/* the cache's message when it names a version that failed its checksum */
	if (!tuned_jobs_find_active(&d->jobs, key) && !tuned_cached_version(d, key) &&
	    req->job <= 0) {
		snprintf(message, sizeof(message), "%s%s%s", req->run[0] ? "run '" : "",
			 req->run, req->run[0] ? "': " : "");
		snprintf(message + strlen(message), sizeof(message) - strlen(message),
			 "%s",
			 strstr(err->message, "failed its checksum") ?
				 err->message :
				 "no job and no cached kernel for this key");
		reply_error(client, req, PROTO_ENOT_FOUND, message);
	} else if (req->timeout_ms > 0) {
		add_waiter(client, req, key);
	} else {
		reply_error(client, req, PROTO_ETIMEOUT,
			    req->run[0] ?
				    "no version of this key yet for the run to pin" :
				    "no version of this key at least min_version yet");
	}
}

static void on_fetch(tuned_client *client, proto_request *req)
{
	tuned_daemon *d = client->daemon;
	const char *key = req->key;
	cache_error err = {0};
	json_t *result;

	if (req->job > 0) {
		tuned_job *job = find_job(client, req);

		if (!job)
			return;
		key = job->key;
	}
	if (req->run[0])
		return fetch_pinned(client, req, key);
	if ((result = fetch_result(d, key, req->min_version, &err))) {
		d->fetch_hits++;
		return reply(client, req, result);
	}
	d->fetch_misses++;
	fetch_missed(client, req, key, &err);
}

static void on_watch(tuned_client *client, proto_request *req)
{
	if (client->nwatches == TUNED_MAX_WATCHES)
		return reply_error(client, req, PROTO_ETOO_MANY, "at most 64 watches "
				   "per connection");
	subscribe(client, req->key);
	tuned_update_waited(client->daemon);
	reply(client, req, json_pack("{s:s, s:i}", "key", req->key,
				     "version", tuned_cached_version(client->daemon, req->key)));
}

static bool is_watched(const tuned_daemon *d, const char *key)
{
	for (const tuned_client *c = d->clients; c; c = c->next)
		for (int i = 0; i < c->nwatches && !c->closing; i++)
			if (!strcmp(c->watches[i], key))
				return true;
	for (const tuned_waiter *w = d->waiters; w; w = w->next)
		if (!strcmp(w->key, key))
			return true;
	return false;
}

void tuned_update_waited(tuned_daemon *d)
{
	for (tuned_job *job = d->jobs.head; job && d->runner; job = job->next)
		if (job->state == TUNED_JOB_QUEUED || job->state == TUNED_JOB_RUNNING)
			tuned_runner_set_waited(d->runner, job->id, is_watched(d, job->key));
}

void tuned_broadcast(tuned_daemon *d, const char *key, const char *event,
		     json_t *data)
{
	for (tuned_client *c = d->clients; c; c = c->next)
		for (int i = 0; i < c->nwatches && !c->closing; i++)
			if (!strcmp(c->watches[i], key)) {
				tuned_client_send(c, proto_event(event, json_incref(data)));
				break;
			}
	json_decref(data);
}

/* Resident memory from /proc/self/statm, in bytes. */
static long long resident_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long long pages = 0, resident = 0;

	if (f && fscanf(f, "%lld %lld", &pages, &resident) != 2)
		resident = 0;
	if (f)
		fclose(f);
	return resident * sysconf(_SC_PAGESIZE);
}

/* The measurement worker's load, the peaks the cost model uses, and
 * whether library steps are searched. */
static json_t *pipeline_json(const tuned_runner_stats *rs)
{
	return json_pack("{s:i, s:f, s:f, s:f, s:b, s:o}", "compile_workers",
			 rs->compile_workers, "device_busy_s", rs->busy_s, "up_s", rs->up_s,
			 "device_busy", rs->up_s > 0 ? rs->busy_s / rs->up_s : 0.0,
			 "library", rs->library,
			 "peaks", rs->probed ?
			 json_pack("{s:f, s:f, s:f, s:i}", "bandwidth_gbs",
				   rs->peaks.bandwidth_gbs, "gflops", rs->peaks.gflops,
				   "launch_ms", rs->peaks.launch_ms, "cores",
				   rs->peaks.cores) : json_null());
}

static void on_stats(tuned_client *client, proto_request *req)
{
	tuned_daemon *d = client->daemon;
	int states[TUNED_JOB_CANCELLED + 1] = {0};
	tuned_runner_stats rs;
	cache_stats cs = {0};
	json_t *jobs = json_object();

	for (tuned_job *job = d->jobs.head; job; job = job->next)
		states[job->state]++;
	for (int s = 0; s <= TUNED_JOB_CANCELLED; s++)
		json_object_set_new(jobs, tuned_job_state_name(s), json_integer(states[s]));
	cache_stat(d->cache, &cs, NULL);
	tuned_runner_stats_get(d->runner, &rs);
	reply(client, req, json_pack("{s:s, s:s, s:I, s:i, s:I, s:o, "
		"s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}, s:{s:i, s:i}, s:o}",
		"server", "tuned " TUNED_VERSION, "device", d->device,
		"uptime_s", (json_int_t)(uv_now(d->loop) / 1000 - d->started_ms / 1000),
		"clients", d->nclients, "resident_bytes", (json_int_t)resident_bytes(),
		"jobs", jobs, "cache", "entries", (json_int_t)cs.graphs,
		"bytes", (json_int_t)(cs.file_bytes + cs.wal_bytes),
		"hits", (json_int_t)d->fetch_hits, "misses", (json_int_t)d->fetch_misses,
		"graphs", (json_int_t)cs.graphs, "devices", (json_int_t)cs.devices,
		"plans", (json_int_t)cs.plans, "trials", (json_int_t)cs.trials,
		"quarantine", (json_int_t)cs.quarantine, "wal_bytes", (json_int_t)cs.wal_bytes,
		"workers", "running", rs.running, "restarts", rs.restarts,
		"pipeline", pipeline_json(&rs)));
}

static int add_entry(void *user, const cache_entry *e)
{
	json_array_append_new(user, json_pack("{s:s, s:s, s:s, s:s, s:i, s:o, s:o, s:I}",
		"key", e->graph, "name", e->name ? e->name : "", "device", e->device,
		"codegen", e->codegen, "version", e->version,
		"median_ms", number_or_null(e->median_ms),
		"updated_at", tuned_rfc3339((double)e->updated_at),
		"bytes", (json_int_t)e->bytes));
	return 0;
}

/* A limit the request left out is no limit of that kind: the cache's 0. */
static int64_t prune_limit(int64_t given)
{
	return given > 0 ? given : 0;
}

static json_t *prune_result(tuned_daemon *d, const cache_prune_stats *ps)
{
	cache_stats cs = {0};

	cache_stat(d->cache, &cs, NULL);
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}",
			 "removed", (json_int_t)ps->graphs,
			 "freed_bytes", (json_int_t)(ps->bytes_before - ps->bytes_after),
			 "entries", (json_int_t)cs.graphs, "bytes", (json_int_t)ps->bytes_after,
			 "trials_removed", (json_int_t)ps->trials,
			 "versions_removed", (json_int_t)ps->plans);
}

/* A prune or an import, run on the writer thread; the client is answered
 * back on the loop. */
typedef struct cache_write {
	tuned_client *client; /* held until the reply */
	proto_request req;    /* its own references to id and params */
	int rc;
	cache_prune_stats pruned;
	json_t *imported;
	int pinned;       /* fetch with a run: the version it is pinned to */
	json_t *advanced; /* advance: the pins moved */
	char why[PROTO_MESSAGE_MAX];
} cache_write;

static void cache_write_free(cache_write *w)
{
	release_request(w->client, &w->req);
	json_decref(w->imported);
	json_decref(w->advanced);
	free(w);
}

static void hand_cache_write(tuned_client *client, proto_request *req,
			     tuned_write_fn *run, tuned_write_done *done)
{
	cache_write *w = calloc(1, sizeof(*w));

	if (!w)
		return reply_error(client, req, PROTO_EINTERNAL, "out of memory");
	w->client = client;
	hold_request(client, req, &w->req);
	if (tuned_write(client->daemon->writer, run, done, w) < 0) {
		reply_error(client, req, PROTO_EINTERNAL, "out of memory");
		cache_write_free(w);
	}
}

static void prune(cache *c, void *data)
{
	cache_write *w = data;
	cache_error err = {0};

	w->rc = cache_prune(c, prune_limit(w->req.max_age_s), prune_limit(w->req.max_bytes),
			    &w->pruned, &err);
	snprintf(w->why, sizeof(w->why), "%s", err.message);
}

static void pruned(void *data)
{
	cache_write *w = data;
	const cache_prune_stats *ps = &w->pruned;

	if (w->rc < 0) {
		reply_error(w->client, &w->req, PROTO_EINTERNAL, w->why);
		return cache_write_free(w);
	}
	tuned_log(TUNED_INFO, "cache pruned (max age %lld s, max %lld bytes; 0: no "
		  "limit): %lld keys, %lld versions, %lld trials removed",
		  (long long)prune_limit(w->req.max_age_s),
		  (long long)prune_limit(w->req.max_bytes), (long long)ps->graphs,
		  (long long)ps->plans, (long long)ps->trials);
	reply(w->client, &w->req, prune_result(w->client->daemon, ps));
	cache_write_free(w);
}

/* Training runs (docs/protocol.md, "Runs"): a fetch with a run gets the
 * version the run is pinned to, pinned through the writer at the run's
 * first fetch of the key, then read on the loop; advance moves the run's
 * pins. */

static void pin(cache *c, void *data)
{
	cache_write *w = data;
	cache_error err = {0};

	w->rc = cache_pin(c, w->req.run, w->req.key, w->client->daemon->device,
			  KGEN_CODEGEN_VERSION, &w->pinned, &err);
	snprintf(w->why, sizeof(w->why), "%s", err.message);
}

/* The fetch result of the version the run is pinned to, with "run". */
static void reply_pinned(cache_write *w)
{
	tuned_daemon *d = w->client->daemon;
	const char *key = w->req.key, *run = w->req.run;
	cache_plan *plan = NULL;
	cache_error err = {0};
	char message[PROTO_MESSAGE_MAX];
	json_t *result;

	if (cache_fetch_version(d->cache, key, d->device, KGEN_CODEGEN_VERSION,
				w->pinned, &plan, &err) < 0) {
		d->fetch_misses++;
		snprintf(message, sizeof(message),
			 "run '%s' is pinned to version "
			 "%d of %s, which is not served: %s; advance the run to "
			 "move it to the latest",
			 run, w->pinned, key, err.message);
		return reply_error(w->client, &w->req, PROTO_ENOT_FOUND, message);
	}
	d->fetch_hits++;
	result = kernel_result(d, key, plan);
	json_object_set_new(result, "run", json_string(run));
	reply(w->client, &w->req, result);
}

static void pinned(void *data)
{
	cache_write *w = data;

	/* the client left, or the daemon stops, while the pin was written */
	if (w->client->closing || w->client->daemon->stopping)
		return cache_write_free(w);
	if (w->rc == CACHE_NOT_FOUND &&
	    tuned_cached_version(w->client->daemon, w->req.key) > 0) {
		/* a first version landed between the pin and now: pin it */
		fetch_pinned(w->client, &w->req, w->req.key);
	} else if (w->rc == CACHE_NOT_FOUND) {
		cache_error err = {0};

		w->client->daemon->fetch_misses++;
		fetch_missed(w->client, &w->req, w->req.key, &err);
	} else if (w->rc < 0) {
		tuned_log(TUNED_ERROR, "fetch of %s by run '%s': %s", w->req.key,
			  w->req.run, w->why);
		reply_error(w->client, &w->req, PROTO_EINTERNAL, w->why);
	} else {
		reply_pinned(w);
	}
	cache_write_free(w);
}

/* "key" for the fetch "req" of a run (the key of its job, for a fetch by
 * job), pinned through the writer, then answered. */
static void fetch_pinned(tuned_client *client, proto_request *req, const char *key)
{
	proto_request with_key = *req;

	snprintf(with_key.key, sizeof(with_key.key), "%s", key);
	hand_cache_write(client, &with_key, pin, pinned);
}

static void advance(cache *c, void *data)
{
	cache_write *w = data;
	size_t n = json_array_size(w->req.keys);
	const char **keys = calloc(n + 1, sizeof(*keys));
	cache_error err = {0};
	json_t *key;
	size_t i;

	if (!keys) {
		w->rc = CACHE_ENOMEM;
		snprintf(w->why, sizeof(w->why),
			 "cannot advance run '%s': out of "
			 "memory",
			 w->req.run);
		return;
	}
	json_array_foreach(w->req.keys, i, key)
		keys[i] = json_string_value(key);
	w->rc = cache_advance(c, w->req.run, w->client->daemon->device,
			      KGEN_CODEGEN_VERSION, keys, (int)n, &w->advanced, &err);
	snprintf(w->why, sizeof(w->why), "%s", err.message);
	free(keys);
}

static void advanced(void *data)
{
	cache_write *w = data;

	if (w->rc < 0) {
		if (w->rc != CACHE_NOT_FOUND)
			tuned_log(TUNED_ERROR, "advance of run '%s': %s", w->req.run,
				  w->why);
		reply_error(w->client, &w->req,
			    w->rc == CACHE_NOT_FOUND ? PROTO_ENOT_FOUND :
						       PROTO_EINTERNAL,
			    w->why);
		return cache_write_free(w);
	}
	tuned_log(TUNED_INFO, "run '%s' advanced: %zu key(s)", w->req.run,
		  json_array_size(w->advanced));
	reply(w->client, &w->req,
	      json_pack("{s:s, s:O}", "run", w->req.run, "pins", w->advanced));
	cache_write_free(w);
}

/* The quarantine, each entry's "created_at" in RFC 3339. */
static int quarantine_entries(tuned_daemon *d, const char *key, json_t **out,
			      cache_error *err)
{
	json_t *entries = NULL, *entry;
	size_t i;
	int rc = cache_quarantine_entries(d->cache, key, &entries, err);

	json_array_foreach(entries, i, entry)
		json_object_set_new(entry, "created_at", tuned_rfc3339((double)
			json_integer_value(json_object_get(entry, "created_at"))));
	*out = rc < 0 ? NULL : json_pack("{s:o}", "entries", entries);
	return rc;
}

static void on_cache(tuned_client *client, proto_request *req)
{
	tuned_daemon *d = client->daemon;
	cache_error err = {0};
	json_t *out = NULL;
	int rc;

	if (req->op == PROTO_OP_CACHE_LIST) {
		out = json_array();
		rc = cache_list(d->cache, add_entry, out, &err);
		out = json_pack("{s:o}", "entries", out);
	} else if (req->op == PROTO_OP_CACHE_SHOW) {
		rc = cache_show(d->cache, req->key, &out, &err);
	} else if (req->op == PROTO_OP_CACHE_QUARANTINE) {
		rc = quarantine_entries(d, req->key[0] ? req->key : NULL, &out, &err);
	} else {
		return hand_cache_write(client, req, prune, pruned);
	}
	if (rc < 0) {
		json_decref(out);
		return reply_error(client, req, rc == CACHE_NOT_FOUND ? PROTO_ENOT_FOUND :
				   PROTO_EINTERNAL, err.message);
	}
	reply(client, req, out);
}

/* Logs what an import did, and answers the fetches waiting on the keys
 * it brought. */
static void imported(tuned_daemon *d, json_t *result)
{
	json_t *entry;
	size_t i;

	json_array_foreach(json_object_get(result, "imported"), i, entry) {
		const char *key = json_string_value(json_object_get(entry, "key"));

		tuned_log(TUNED_INFO, "cache import: %s: %lld version(s) imported, %zu "
			  "device/codegen pair(s) kept as they were", key,
			  (long long)json_integer_value(json_object_get(entry, "versions")),
			  json_array_size(json_object_get(entry, "kept")));
		tuned_wake_waiters(d, key, tuned_cached_version(d, key));
	}
	json_array_foreach(json_object_get(result, "refused"), i, entry)
		tuned_log(TUNED_WARN, "cache import: %s refused: %s",
			  json_string_value(json_object_get(entry, "key")),
			  json_string_value(json_object_get(entry, "reason")));
}

/* On the writer thread: the bundle is read and checked there too. */
static void import(cache *c, void *data)
{
	cache_write *w = data;

	w->rc = tuned_import(c, w->req.bundle, &w->imported, w->why, sizeof(w->why));
}

static void on_imported(void *data)
{
	cache_write *w = data;
	char message[sizeof(w->why) + 16];

	if (w->rc < 0) {
		snprintf(message, sizeof(message), "params.export: %s", w->why);
		tuned_log(TUNED_WARN, "cache.import refused: %s", message);
		reply_error(w->client, &w->req, w->rc, message);
		return cache_write_free(w);
	}
	imported(w->client->daemon, w->imported);
	reply(w->client, &w->req, json_incref(w->imported));
	cache_write_free(w);
}

static void on_cache_export(tuned_client *client, proto_request *req)
{
	tuned_daemon *d = client->daemon;
	char why[PROTO_MESSAGE_MAX] = "";
	json_t *out = NULL;
	int rc = tuned_export(d->cache, "tuned " TUNED_VERSION, d->device, req->keys,
			      &out, why, sizeof(why));

	if (rc < 0) {
		tuned_log(TUNED_WARN, "cache.export refused: %s", why);
		return reply_error(client, req, rc, why);
	}
	tuned_log(TUNED_INFO, "cache export: %zu key(s)",
		  json_array_size(json_object_get(out, "entries")));
	reply(client, req, out);
}

/* Ops that change or reveal the whole cache: pruning it, importing into
 * it, and the quarantine, whose bundles hold every user's graphs,
 * sources and worker logs. */
static bool is_admin_op(enum proto_op op)
{
	return op == PROTO_OP_CACHE_PRUNE || op == PROTO_OP_CACHE_IMPORT ||
	       op == PROTO_OP_CACHE_QUARANTINE;
}

static void refuse_admin_op(tuned_client *client, proto_request *req)
{
	char message[PROTO_MESSAGE_MAX];

	snprintf(message, sizeof(message), "%s needs an admin (" ADMIN_IS "); "
		 "uid %d is not one", proto_op_name(req->op), (int)client->peer.uid);
	tuned_log(TUNED_WARN, "%s refused: %s", proto_op_name(req->op), message);
	reply_error(client, req, PROTO_EUNAUTHORIZED, message);
}

static void dispatch(tuned_client *client, proto_request *req)
{
	switch (req->op) {
	case PROTO_OP_HELLO: return on_hello(client, req);
	case PROTO_OP_PING: return reply(client, req, json_object());
	case PROTO_OP_SUBMIT: return on_submit(client, req);
	case PROTO_OP_STATUS: return on_status(client, req);
	case PROTO_OP_LIST: return on_list(client, req);
	case PROTO_OP_CANCEL: return on_cancel(client, req);
	case PROTO_OP_FETCH: return on_fetch(client, req);
	case PROTO_OP_WATCH: return on_watch(client, req);
	case PROTO_OP_STATS: return on_stats(client, req);
	case PROTO_OP_CACHE_EXPORT: return on_cache_export(client, req);
	case PROTO_OP_ADVANCE: return hand_cache_write(client, req, advance, advanced);
	case PROTO_OP_CACHE_IMPORT:
		return hand_cache_write(client, req, import, on_imported);
	default: return on_cache(client, req);
	}
}

void tuned_handle(tuned_client *client, proto_request *req)
{
	if (is_admin_op(req->op) && !client->admin)
		return refuse_admin_op(client, req);
	dispatch(client, req);
	mark_found_bad(client->daemon);
}
