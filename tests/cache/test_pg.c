/*
 * test_pg.c: what only the PostgreSQL engine does (the other cache tests
 * run on it too). Its schema migrates once, whoever opens it. Publish is
 * a compare-and-set on the latest version: connections that publish the
 * same key at once never take the same version number, and a plan slower
 * than the latest is refused (CACHE_ESTALE), whichever connection
 * measured it. Owners racing to pin a training run's version pin one.
 * A version edited in the database is never served. Any
 * number of owners open one database and share its job queue: a job is
 * claimed by one owner at a time, under a lease that the owner renews,
 * that runs out when it stops renewing (it died), and that it gives back
 * at a clean stop; only the holder writes a job's progress.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "cache_int.h"
#include "cache_test.h"

TestSuite(pg, .init = fx_setup, .fini = fx_teardown, .timeout = 120);

#define WRITERS 4
#define PUBLISHES 40

/* One writer: its own cache_open (it owns it), then PUBLISHES plans of
 * made-up medians, counting what was published and what refused. */
typedef struct writer {
	int id;
	int published, refused;
	int versions[PUBLISHES];
	double medians[PUBLISHES];
	char error[600];
} writer;

static pthread_barrier_t start;
static pthread_mutex_t opening = PTHREAD_MUTEX_INITIALIZER;

/* fx_open, one owner at a time. */
static cache *open_shared(void)
{
	cache *c;

	pthread_mutex_lock(&opening);
	c = fx_open();
	pthread_mutex_unlock(&opening);
	return c;
}

/* SQLite takes one writer per file: the race is PostgreSQL's. */
static void postgresql_only(void)
{
	if (!fx_postgresql())
		cr_skip_test("PostgreSQL only: one writer per SQLite file");
}

static int publish_ms(cache *c, int seed, double median_ms, int *version,
		      cache_error *err)
{
	char *plan = make_plan(2, seed);
	cache_plan p = {
		.graph = graph_key(1), .device = DEVICE_GPU, .codegen = CODEGEN,
		.plan = plan, .sources = "[\"k\"]", .median_ms = median_ms,
		.spread_ms = NAN, .found_by = "race",
	};
	int rc = cache_publish(c, &p, version, err);

	free(plan);
	return rc;
}

static void *run_writer(void *arg)
{
	writer *w = arg;
	cache_options o = fx_options();
	cache_error err = {0};
	cache *c = NULL;
	unsigned seed = (unsigned)w->id * 7919u;

	pthread_mutex_lock(&opening);
	if (cache_open(fx.path, &o, &c, &err) != 0) {
		pthread_mutex_unlock(&opening);
		snprintf(w->error, sizeof(w->error), "open: %s", err.message);
		pthread_barrier_wait(&start);
		return NULL;
	}
	pthread_mutex_unlock(&opening);
	pthread_barrier_wait(&start);
	for (int i = 0; i < PUBLISHES && !w->error[0]; i++) {
		/* Each step faster than the last, the writers' plans of one
		 * step in a random order: each publish has a chance, and
		 * they meet. */
		double ms = 1000.0 - i + (rand_r(&seed) % 1000) / 2000.0;
		int version = 0, rc = publish_ms(c, w->id * 1000 + i, ms, &version,
						 &err);

		if (rc == 0) {
			w->medians[w->published] = ms;
			w->versions[w->published++] = version;
		} else if (rc == CACHE_ESTALE) {
			w->refused++;
		} else {
			snprintf(w->error, sizeof(w->error), "publish: %d %s", rc,
				 err.message);
		}
	}
	cache_close(c);
	return NULL;
}

/* The median of every version, read back: medians[v]; returns how many
 * versions there are. */
static int read_medians(cache *c, double *medians, int max)
{
	cache_error err = {0};
	json_t *shown = NULL, *plan;
	size_t i;
	int n = 0;

	cr_assert_eq(cache_show(c, graph_key(1), &shown, &err), 0, "%s", err.message);
	json_array_foreach(json_object_get(shown, "plans"), i, plan) {
		int v = (int)json_integer_value(json_object_get(plan, "version"));

		cr_assert(v >= 1 && v <= max, "version %d", v);
		medians[v] = json_real_value(json_object_get(plan, "median_ms"));
		n++;
	}
	json_decref(shown);
	return n;
}

Test(pg, writers_never_share_a_version_and_never_publish_slower)
{
	writer w[WRITERS] = {0};
	pthread_t t[WRITERS];
	int total = 0, refused = 0;
	bool seen[WRITERS * PUBLISHES + 1] = {0};
	double medians[WRITERS * PUBLISHES + 1] = {0};
	cache *c;

	postgresql_only();
	c = open_shared();
	put_graph(c, 1, "raced");
	pthread_barrier_init(&start, NULL, WRITERS);
	for (int i = 0; i < WRITERS; i++) {
		w[i].id = i + 1;
		pthread_create(&t[i], NULL, run_writer, &w[i]);
	}
	for (int i = 0; i < WRITERS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&start);
	for (int i = 0; i < WRITERS; i++) {
		cr_assert_str_empty(w[i].error, "writer %d: %s", i, w[i].error);
		total += w[i].published;
		refused += w[i].refused;
	}
	cr_assert_eq(total + refused, WRITERS * PUBLISHES);
	cr_assert_gt(refused, 0, "writers at one step: some must be slower");
	cr_assert_geq(total, PUBLISHES, "one publish at least at each step");
	cr_assert_eq(read_medians(c, medians, WRITERS * PUBLISHES), total,
		     "one version per publish that succeeded");
	for (int i = 0; i < WRITERS; i++) {
		for (int j = 0; j < w[i].published; j++) {
			int v = w[i].versions[j];

			cr_assert(v >= 1 && v <= total, "version %d of %d", v, total);
			cr_assert_not(seen[v], "version %d published twice", v);
			seen[v] = true;
			cr_assert_eq(medians[v], w[i].medians[j],
				     "version %d holds another writer's plan", v);
		}
	}
	for (int v = 2; v <= total; v++)
		cr_assert_lt(medians[v], medians[v - 1], "version %d (%g ms) is not "
			     "faster than version %d (%g ms)", v, medians[v], v - 1,
			     medians[v - 1]);
	cache_close(c);
}

Test(pg, a_slower_plan_is_refused_saying_which_version_is_faster)
{
	cache_error err = {0};
	cache *a, *b;
	int v = 0;

	postgresql_only();
	a = open_shared();
	b = open_shared();
	put_graph(a, 1, NULL);
	cr_assert_eq(publish_ms(a, 1, 2.0, &v, &err), 0, "%s", err.message);
	cr_assert_eq(v, 1);
	cr_assert_eq(publish_ms(b, 2, 1.5, &v, &err), 0, "%s", err.message);
	cr_assert_eq(v, 2, "the second connection publishes the next version");
	cr_assert_eq(publish_ms(a, 3, 1.8, &v, &err), CACHE_ESTALE);
	cr_assert(strstr(err.message, "version 2, 1.5 ms"), "%s", err.message);
	cr_assert_eq(publish_ms(a, 4, 1.0, &v, &err), 0, "%s", err.message);
	cr_assert_eq(v, 3);
	cache_close(b);
	cache_close(a);
}

/* The first field of "fmt"'s first row on the test's database. */
static long long raw_pgf(const char *fmt, long long id)
{
	char sql[300];

	snprintf(sql, sizeof(sql), fmt, id);
	return fx_sql(sql);
}

/* A queued job of graph_key(n) on DEVICE_GPU, numbered by "c". */
static cache_job queued_job(cache *c, int n)
{
	cache_error err = {0};
	cache_job job = {.key = graph_key(n),
			 .name = "job",
			 .graph = "{}",
			 .state = "queued",
			 .budget_s = 1,
			 .uid = -1,
			 .device = DEVICE_GPU,
			 .created_at = 1};

	cr_assert_eq(cache_new_job_id(c, &job.id, &err), 0, "%s", err.message);
	return job;
}

/* What one pass read: the jobs by id, whether held, by whom. */
typedef struct passed {
	int n;
	int64_t ids[8];
	bool claimed[8], has_graph[8];
	char state[8][16], claimed_by[8][128];
} passed;

static int on_passed(void *user, const cache_job *job)
{
	passed *p = user;

	cr_assert_lt(p->n, 8);
	p->ids[p->n] = job->id;
	p->claimed[p->n] = job->claimed;
	p->has_graph[p->n] = job->graph != NULL;
	snprintf(p->state[p->n], 16, "%s", job->state);
	snprintf(p->claimed_by[p->n], 128, "%s", job->claimed_by ?: "");
	p->n++;
	return 0;
}

/* A pass of "c" claiming up to "claim" jobs under a lease of "lease_s". */
static passed pass(cache *c, int claim, double lease_s)
{
	cache_job_pass p = {.device = DEVICE_GPU, .lease_s = lease_s, .claim = claim};
	cache_error err = {0};
	passed out = {0};

	int rc = cache_pass_jobs(c, &p, on_passed, &out, &err);

	cr_assert_eq(rc, 0, "%d: %s", rc, err.message);
	return out;
}

static int held(const passed *p)
{
	int n = 0;

	for (int i = 0; i < p->n; i++)
		n += p->claimed[i];
	return n;
}

/* A queued job written by "writer", then claimed by "holder" under a
 * lease of "lease_s"; with its graph. */
static cache_job held_job(cache *writer, cache *holder, double lease_s)
{
	cache_error err = {0};
	cache_job job = queued_job(writer, 1);

	cr_assert_eq(cache_put_jobs(writer, &job, 1, 1000, &err), 0, "%s", err.message);
	cr_assert_eq(held((passed[]){pass(holder, 1, lease_s)}), 1);
	return job;
}

/* A daemon renews the leases of the jobs it watches only: one it holds
 * but could not take (out of memory) runs out, and goes to another. */
Test(pg, a_lease_not_watched_is_not_renewed)
{
	cache *a, *b;
	passed p;

	postgresql_only();
	a = open_shared();
	b = open_shared();
	held_job(a, a, 0.3);
	pass(a, 0, 30);
	usleep(400 * 1000);
	p = pass(b, 1, 30);
	cr_expect_eq(held(&p), 1,
		     "a did not renew a job it does not watch: b "
		     "holds it");
	cache_close(a);
	cache_close(b);
}

/* A reader of the holder renews its leases on a connection of its own
 * (the daemon's renewals, off its writer), and none of another owner's
 * jobs; a lease no longer renewed runs out. */
Test(pg, a_reader_renews_the_leases_of_its_owner)
{
	cache_error err = {0};
	cache *a, *b, *renewer;
	cache_job job;
	passed p;

	postgresql_only();
	a = open_shared();
	b = open_shared();
	job = held_job(a, a, 0.5);
	cr_assert_eq(cache_open_reader(a, &renewer, &err), 0, "%s", err.message);
	for (int i = 0; i < 4; i++) {
		usleep(250 * 1000);
		cr_expect_eq(cache_renew_jobs(renewer, 0.5, &job.id, 1, &err), 1, "%s",
			     err.message);
	}
	cr_expect_eq(held((passed[]){pass(b, 1, 30)}), 0, "b took a lease a renewed");
	cr_expect_eq(cache_renew_jobs(renewer, 0.5, NULL, 0, &err), 0, "%s",
		     err.message);
	usleep(600 * 1000);
	p = pass(b, 1, 30);
	cr_expect_eq(held(&p), 1, "the lease did not run out once no longer renewed");
	cr_expect_eq(cache_renew_jobs(renewer, 0.5, &job.id, 1, &err), 0,
		     "a renewed a lease b holds");
	cache_close(renewer);
	cache_close(a);
	cache_close(b);
}

/* Two owners on one database: ids never collide, each job is claimed by
 * one of them, the other sees it held, and only its holder writes its
 * progress (a cancel excepted). */
Test(pg, owners_share_the_queue_and_claim_each_job_once)
{
	cache_error err = {0};
	cache *a, *b;
	cache_job jobs[3], progress;
	passed pa, pb;

	postgresql_only();
	a = open_shared();
	b = open_shared();
	jobs[0] = queued_job(a, 1);
	jobs[1] = queued_job(b, 2);
	jobs[2] = queued_job(a, 3);
	cr_expect_neq(jobs[0].id, jobs[1].id);
	cr_expect_neq(jobs[1].id, jobs[2].id);
	cr_assert_eq(cache_put_jobs(a, jobs, 3, 1000, &err), 0, "%s", err.message);
	pa = pass(a, 2, 30);
	pb = pass(b, 2, 30);
	cr_expect_eq(pa.n, 3);
	cr_expect_eq(held(&pa), 2, "a claims two");
	cr_expect_eq(held(&pb), 1, "b claims the one left");
	for (int i = 0; i < pb.n; i++)
		cr_expect_eq(pb.has_graph[i], pb.claimed[i],
			     "graphs come with the jobs held only");
	/* b writes a's first job: nothing changes; a's write does. */
	progress = jobs[0];
	progress.graph = NULL;
	progress.state = "running";
	progress.trials = 7;
	cr_expect_eq(cache_put_jobs(b, &progress, 1, 1000, &err), 0, "%s", err.message);
	cr_expect_eq(raw_pgf("SELECT trials FROM jobs WHERE id = %lld",
			     (long long)jobs[0].id),
		     0);
	cr_expect_eq(cache_put_jobs(a, &progress, 1, 1000, &err), 0, "%s", err.message);
	cr_expect_eq(raw_pgf("SELECT trials FROM jobs WHERE id = %lld",
			     (long long)jobs[0].id),
		     7);
	/* b cancels it: a cancel is anyone's; then a's progress is not
	 * written over it, and a's write says the job had ended. */
	progress.state = "cancelled";
	cr_expect_eq(cache_put_jobs(b, &progress, 1, 1000, &err), 0, "%s", err.message);
	progress.state = "running";
	progress.trials = 9;
	cr_expect_eq(cache_put_jobs(a, &progress, 1, 1000, &err), 1, "%s", err.message);
	cr_expect_eq(raw_pgf("SELECT count(*) FROM jobs WHERE id = %lld AND "
			     "state = 'cancelled' AND trials = 7",
			     (long long)jobs[0].id),
		     1);
	cache_close(a);
	cache_close(b);
}

/* A job's holder "a" wrote its progress; "b" writes it again from the
 * copy it read before: "b"'s cancel ends the job, but its stale copy
 * does not write over the holder's trials and version. */
Test(pg, a_cancel_from_another_owner_keeps_the_holders_progress)
{
	cache_error err = {0};
	cache *a, *b;
	cache_job job, stale;

	postgresql_only();
	a = open_shared();
	b = open_shared();
	job = held_job(a, a, 30);
	stale = job;
	stale.graph = NULL;
	stale.trials = 3;
	stale.version = 1;
	job.graph = NULL;
	job.state = "running";
	job.trials = 7;
	job.version = 2;
	cr_assert_eq(cache_put_jobs(a, &job, 1, 1000, &err), 0, "%s", err.message);
	stale.state = "cancelled";
	stale.error = "cancelled";
	stale.finished_at = 5;
	cr_expect_eq(cache_put_jobs(b, &stale, 1, 1000, &err), 0, "%s", err.message);
	cr_expect_eq(raw_pgf("SELECT count(*) FROM jobs WHERE id = %lld AND "
			     "state = 'cancelled' AND finished_at = 5 AND "
			     "trials = 7 AND version = 2",
			     (long long)job.id),
		     1, "the cancel ends the job and keeps the holder's progress");
	cache_close(a);
	cache_close(b);
}

/* "b" cancels a job that its holder "a" finished meanwhile: the row
 * stays done, and the write says that one job had already ended, for
 * "b" to read it again. */
Test(pg, a_cancel_that_loses_to_the_jobs_end_is_reported)
{
	cache_error err = {0};
	cache *a, *b;
	cache_job job, cancel;

	postgresql_only();
	a = open_shared();
	b = open_shared();
	job = held_job(a, a, 30);
	job.graph = NULL;
	cancel = job;
	job.state = "done";
	job.finished_at = 4;
	cr_assert_eq(cache_put_jobs(a, &job, 1, 1000, &err), 0, "%s", err.message);
	cancel.state = "cancelled";
	cancel.finished_at = 5;
	cr_expect_eq(cache_put_jobs(b, &cancel, 1, 1000, &err), 1, "%s", err.message);
	cr_expect_eq(raw_pgf("SELECT count(*) FROM jobs WHERE id = %lld AND "
			     "state = 'done' AND finished_at = 4",
			     (long long)job.id),
		     1);
	cache_close(a);
	cache_close(b);
}

/* A job dirty again before its first write landed is written with its
 * graph again: once another owner holds it, that write is not the
 * holder's, and changes nothing. */
Test(pg, a_job_written_again_with_its_graph_keeps_the_holders_progress)
{
	cache_error err = {0};
	cache *a, *b;
	cache_job job, progress;

	postgresql_only();
	a = open_shared();
	b = open_shared();
	job = held_job(a, b, 30);
	progress = job;
	progress.graph = NULL;
	progress.state = "running";
	progress.trials = 7;
	cr_assert_eq(cache_put_jobs(b, &progress, 1, 1000, &err), 0, "%s", err.message);
	job.priority = 3;
	cr_expect_eq(cache_put_jobs(a, &job, 1, 1000, &err), 0, "%s", err.message);
	cr_expect_eq(raw_pgf("SELECT count(*) FROM jobs WHERE id = %lld AND "
			     "state = 'running' AND trials = 7 AND priority = 0",
			     (long long)job.id),
		     1);
	cache_close(a);
	cache_close(b);
}

/* A lease that runs out (its owner died) lets another owner claim the
 * job; one given back (a clean stop) is claimable at once, queued. */
Test(pg, a_job_whose_lease_runs_out_goes_to_another_owner)
{
	cache_error err = {0};
	cache *a, *b;
	cache_job job;
	passed p;

	postgresql_only();
	a = open_shared();
	b = open_shared();
	job = queued_job(a, 1);
	cr_assert_eq(cache_put_jobs(a, &job, 1, 1000, &err), 0, "%s", err.message);
	cr_expect_eq(held((p = pass(a, 1, 0.3), &p)), 1);
	cr_expect_eq(held((p = pass(b, 1, 30), &p)), 0, "a's lease holds");
	usleep(400 * 1000);
	p = pass(b, 1, 30);
	cr_expect_eq(held(&p), 1, "a's lease ran out: b holds the job");
	p = pass(a, 1, 30);
	cr_expect_eq(held(&p), 0, "a renews no lease it lost");
	cr_expect_neq(strstr(p.claimed_by[0], " pid "), NULL, "%s", p.claimed_by[0]);
	cr_expect_eq(cache_release_jobs(b, &err), 0, "%s", err.message);
	p = pass(a, 1, 30);
	cr_expect_eq(held(&p), 1, "b gave it back: a holds it");
	cr_expect_str_eq(p.state[0], "queued");
	cache_close(a);
	cache_close(b);
}

#define RANKS 4
#define RUNS 20

/* One rank of RUNS training runs, an owner of its own: at each run, the
 * version it is pinned to, while rank 0 publishes a newer version at
 * each run too. */
typedef struct rank {
	int id;
	int pinned[RUNS];
	char error[600];
} rank;

static void *run_rank(void *arg)
{
	rank *r = arg;
	cache *c = open_shared();
	cache_error err = {0};
	char run[32];

	pthread_barrier_wait(&start);
	for (int i = 0; i < RUNS && !r->error[0]; i++) {
		snprintf(run, sizeof(run), "run-%d", i);
		if (r->id == 0 && publish_ms(c, 100 + i, 100.0 - i, NULL, &err))
			snprintf(r->error, sizeof(r->error), "publish: %s",
				 err.message);
		else if (cache_pin(c, run, graph_key(1), DEVICE_GPU, CODEGEN,
				   &r->pinned[i], &err))
			snprintf(r->error, sizeof(r->error), "pin %s: %s", run,
				 err.message);
	}
	cache_close(c);
	return NULL;
}

/* Owners pinning one run at once, while versions land, all get one. */
Test(pg, ranks_of_a_run_racing_to_pin_get_one_version)
{
	rank r[RANKS] = {0};
	pthread_t t[RANKS];
	cache *c;

	postgresql_only();
	c = open_shared();
	put_graph(c, 1, "raced");
	cr_assert_eq(publish_ms(c, 1, 1000.0, NULL, NULL), 0);
	pthread_barrier_init(&start, NULL, RANKS);
	for (int i = 0; i < RANKS; i++) {
		r[i].id = i;
		pthread_create(&t[i], NULL, run_rank, &r[i]);
	}
	for (int i = 0; i < RANKS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&start);
	for (int i = 0; i < RANKS; i++)
		cr_assert_str_empty(r[i].error, "rank %d: %s", i, r[i].error);
	for (int run = 0; run < RUNS; run++)
		for (int i = 1; i < RANKS; i++)
			cr_assert_eq(r[i].pinned[run], r[0].pinned[run],
				     "run %d: "
				     "rank %d got version %d, rank 0 version %d",
				     run, i, r[i].pinned[run], r[0].pinned[run]);
	cr_assert_eq(fx_sql("SELECT count(*) FROM pins"), RUNS);
	cache_close(c);
}

/* The versions heard by a listening cache, at most 8. */
typedef struct heard {
	int n;
	int versions[8];
	char graph[8][65], device[8][128];
} heard;

static int hear(void *user, const cache_notice *notice)
{
	heard *h = user;

	if (h->n < 8) {
		snprintf(h->graph[h->n], sizeof(h->graph[0]), "%s", notice->graph);
		snprintf(h->device[h->n], sizeof(h->device[0]), "%s", notice->device);
		cr_expect_str_eq(notice->codegen, CODEGEN);
		h->versions[h->n] = notice->version;
	}
	h->n++;
	return 0;
}

/* The notices "c" hears within "ms" milliseconds, until "want" came. */
static void listen_for(cache *c, int fd, heard *h, int want, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	cache_error err = {0};

	for (int waited = 0; h->n < want && waited < ms; waited += 50) {
		poll(&p, 1, 50);
		cr_assert_geq(cache_notices(c, hear, h, &err), 0, "%s", err.message);
	}
}

/* A version another connection publishes is heard, with its key, device
 * and codegen; the cache's own are not; a listening connection lost is
 * said, and listening again hears the next. */
Test(pg, versions_other_connections_publish_are_heard)
{
	cache *a, *b;
	cache_error err = {0};
	heard h = {0};
	int fd = -1, version, rc = 0;
	char sql[128];

	postgresql_only();
	a = open_shared();
	b = open_shared();
	put_graph(a, 1, "heard");
	cr_assert_eq(cache_listen(a, &fd, &err), 0, "%s", err.message);
	cr_assert_geq(fd, 0);
	cr_assert_eq(publish_ms(a, 1, 30.0, &version, &err), 0, "%s", err.message);
	cr_assert_eq(version, 1);
	cr_assert_eq(publish_ms(b, 2, 20.0, &version, &err), 0, "%s", err.message);
	cr_assert_eq(version, 2);
	listen_for(a, fd, &h, 1, 5000);
	listen_for(a, fd, &h, 2, 300);
	cr_assert_eq(h.n, 1, "heard %d notices: its own too?", h.n);
	cr_expect_eq(h.versions[0], 2);
	cr_expect_str_eq(h.graph[0], graph_key(1));
	cr_expect_str_eq(h.device[0], DEVICE_GPU);

	snprintf(sql, sizeof(sql), "SELECT count(pg_terminate_backend(%d))",
		 a->pg_listen_pid);
	cr_expect_eq(fx_sql(sql), 1, "%s", sql);
	/* the socket turns readable with the server's last words, then its end */
	for (int waited = 0; rc != CACHE_EIO && waited < 5000; waited += 50) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		poll(&p, 1, 50);
		rc = cache_notices(a, hear, &h, &err);
	}
	cr_expect_eq(rc, CACHE_EIO);
	cr_expect(strstr(err.message, "the connection that listens for versions "
				      "was lost"),
		  "%s", err.message);
	cr_assert_eq(cache_listen(a, &fd, &err), 0, "%s", err.message);
	cr_assert_eq(publish_ms(b, 3, 10.0, &version, &err), 0, "%s", err.message);
	listen_for(a, fd, &h, 2, 5000);
	cr_assert_eq(h.n, 2);
	cr_expect_eq(h.versions[1], 3);
	cache_close(b);
	cache_close(a);
}

/* The cache's own version is not heard as another's when its writer
 * connects again between the publish and the reading of its notice
 * (its server process then differs from the one that sent it). */
Test(pg, its_own_notice_is_its_own_after_the_writer_connects_again)
{
	cache *a, *b;
	cache_error err = {0};
	heard h = {0};
	int fd = -1, version;
	char sql[128];

	postgresql_only();
	a = open_shared();
	b = open_shared();
	put_graph(a, 1, "heard");
	cr_assert_eq(cache_listen(a, &fd, &err), 0, "%s", err.message);
	cr_assert_eq(publish_ms(a, 1, 30.0, &version, &err), 0, "%s", err.message);
	snprintf(sql, sizeof(sql), "SELECT count(pg_terminate_backend(%d))",
		 PQbackendPID(a->pg_writer));
	cr_expect_eq(fx_sql(sql), 1, "%s", sql);
	cr_assert_eq(publish_ms(a, 2, 20.0, &version, &err), 0, "%s", err.message);
	cr_assert_eq(version, 2);
	cr_assert_eq(publish_ms(b, 3, 10.0, &version, &err), 0, "%s", err.message);
	listen_for(a, fd, &h, 1, 5000);
	listen_for(a, fd, &h, 2, 300);
	cr_assert_eq(h.n, 1, "heard %d notices: its own too?", h.n);
	cr_expect_eq(h.versions[0], 3);
	cache_close(b);
	cache_close(a);
}

Test(pg, migrates_once_and_reopens_idempotently)
{
	cache *c;

	postgresql_only();
	c = fx_open();
	cr_expect_eq(fx.logs, 1);
	cr_expect(strstr(fx.last_log, "from version 0 to 4"), "%s", fx.last_log);
	cr_expect(!strstr(fx.last_log, "postgresql://"), "the log names the "
		  "database, not its connection string: %s", fx.last_log);
	put_graph(c, 1, "bert_qkv");
	cache_close(c);
	c = fx_open();
	cr_expect_eq(fx.logs, 1, "a second open migrates nothing");
	cr_expect_eq(fx_sql("SELECT version FROM tuned_schema"), 4);
	cr_expect_eq(fx_sql("SELECT count(*) FROM tuned_schema"), 1);
	cr_expect_eq(fx_sql("SELECT count(*) FROM graphs"), 1);
	cache_close(c);
}

/* A database of schema version 1 (one daemon's queue, its own ids)
 * migrates to the shared queue: its jobs kept, new ids above theirs, and
 * its open jobs claimed by the first daemon, for its device. */
Test(pg, a_version_1_queue_migrates_to_the_shared_one)
{
	cache_error err = {0};
	int64_t id = 0;
	passed p;
	cache *c;

	postgresql_only();
	c = fx_open();
	cache_close(c);
	fx_sql("DROP TABLE plan_claims; DROP INDEX trials_plan; "
	       "DROP TABLE pins; DROP SEQUENCE job_ids; "
	       "ALTER TABLE jobs DROP COLUMN device, "
	       "DROP COLUMN claimed_by, DROP COLUMN lease_until; "
	       "UPDATE tuned_schema SET version = 1");
	fx_sql("INSERT INTO jobs VALUES (41, 'k', 'n', '{}', 'running', 1, 0, 0, "
	       "3, NULL, NULL, 1, '', 1, NULL, NULL)");
	c = fx_open();
	cr_expect(strstr(fx.last_log, "from version 1 to 4"), "%s", fx.last_log);
	cr_expect_eq(cache_new_job_id(c, &id, &err), 0, "%s", err.message);
	cr_expect_eq(id, 42, "a new id above the queue's");
	cr_expect_eq(fx_sql("SELECT trials FROM jobs WHERE id = 41 AND device IS "
			    "NULL"),
		     3);
	p = pass(c, 1, 30);
	cr_expect_eq(p.n, 1);
	cr_expect_eq(held(&p), 1, "the old running job is claimed");
	cr_expect_eq(raw_pgf("SELECT count(*) FROM jobs WHERE id = %lld AND "
			     "device IS NOT NULL",
			     41),
		     1);
	cache_close(c);
}

Test(pg, a_newer_schema_is_refused)
{
	cache_options o = fx_options();
	cache_error err = {0};
	cache *c;

	postgresql_only();
	c = fx_open();
	cache_close(c);
	fx_sql("UPDATE tuned_schema SET version = 99");
	c = NULL;
	cr_expect_eq(cache_open(fx.path, &o, &c, &err), CACHE_ESCHEMA);
	cr_expect_null(c);
	cr_expect(strstr(err.message, "schema version 99, newer than this "
				      "build's 4"),
		  "%s", err.message);
}

Test(pg, an_edited_source_is_not_served_and_is_marked_bad)
{
	cache_error err = {0};
	cache_plan *p = NULL;
	json_t *shown = NULL;
	cache *c;

	postgresql_only();
	c = fx_open();
	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_GPU, CODEGEN, 1, 10);
	publish(c, 1, DEVICE_GPU, CODEGEN, 2, 10);
	fx_sql("UPDATE plans SET sources = '[\"int y; \"]' WHERE version = 2");
	cr_assert_eq(cache_fetch_best(c, graph_key(1), DEVICE_GPU, CODEGEN, 0, &p,
				      &err), 1, "%s", err.message);
	cr_expect(strstr(fx.error_log, "version 2") &&
		  strstr(fx.error_log, "fails its checksum"), "%s", fx.error_log);
	cache_plan_free(p);
	cr_expect_eq(fx_sql("SELECT count(*) FROM plans WHERE bad IS NOT NULL"), 1,
		     "the owner marks it bad");
	cr_assert_eq(cache_show(c, graph_key(1), &shown, &err), 0, "%s", err.message);
	cr_expect(json_is_null(json_object_get(json_array_get(json_object_get(
		shown, "plans"), 0), "bad")));
	cr_expect(json_is_string(json_object_get(json_array_get(json_object_get(
		shown, "plans"), 1), "bad")));
	json_decref(shown);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_GPU, CODEGEN, 2, NULL,
				      &err), CACHE_NOT_FOUND);
	cr_expect(strstr(err.message, "newer"), "%s", err.message);
	cache_close(c);
}

/* A version another daemon imports takes the next number after the
 * published ones, is heard by the other daemons as a published one is,
 * and the next publish numbers after it. */
Test(pg, an_imported_version_is_numbered_with_the_published_and_heard)
{
	cache *a, *b;
	cache_error err = {0};
	json_t *entry = NULL, *out = NULL;
	heard h = {0};
	int fd = -1, version;

	postgresql_only();
	a = open_shared();
	b = open_shared();
	put_graph(a, 1, "imported");
	cr_assert_eq(cache_keep_graph_json(a, graph_key(1), "{}", &err), 0, "%s",
		     err.message);
	cr_assert_eq(publish_ms(a, 1, 30.0, &version, &err), 0, "%s", err.message);
	cr_assert_eq(cache_export_graph(a, graph_key(1), &entry, &err), 0, "%s",
		     err.message);
	json_object_set_new(json_array_get(json_object_get(entry, "versions"), 0),
			    "median_ms", json_real(5.0));
	cr_assert_eq(cache_listen(a, &fd, &err), 0, "%s", err.message);
	cr_assert_eq(cache_import_graph(b, entry, graph_canonical(1), &out, &err), 0,
		     "%s", err.message);
	cr_expect_eq(json_integer_value(json_object_get(out, "versions")), 1,
		     "the file's faster version, as the next one");
	listen_for(a, fd, &h, 1, 5000);
	cr_assert_eq(h.n, 1, "heard %d notices", h.n);
	cr_expect_eq(h.versions[0], 2);
	cr_expect_str_eq(h.graph[0], graph_key(1));
	cr_assert_eq(publish_ms(a, 2, 4.0, &version, &err), 0, "%s", err.message);
	cr_expect_eq(version, 3);
	cr_expect_eq(publish_ms(b, 3, 4.5, &version, &err), CACHE_ESTALE,
		     "slower than the publish after the import");
	cr_expect_eq(cache_checkpoint(a, &err), 0, "the server checkpoints itself");
	json_decref(out);
	json_decref(entry);
	cache_close(b);
	cache_close(a);
}

Test(pg, a_session_the_server_ended_is_opened_again)
{
	cache_error err = {0};
	cache *c;

	postgresql_only();
	c = fx_open();
	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_GPU, CODEGEN, 1, 10);
	/* as a server restart does: every other session of the database */
	cr_assert_eq(fx_sql("SELECT count(pg_terminate_backend(pid)) FROM "
			    "pg_stat_activity WHERE datname = current_database() "
			    "AND pid <> pg_backend_pid()"),
		     2, "the writer and the reader");
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_GPU, CODEGEN, 0, NULL,
				      &err), 1, "%s", err.message);
	cr_expect_eq(cache_put_graph(c, graph_key(2), graph_canonical(2), NULL, &err),
		     0, "%s", err.message);
	cr_expect_eq(publish(c, 2, DEVICE_GPU, CODEGEN, 1, 10), 1);
	cache_close(c);
}

/* "sql"'s one value on connection "conn", as text, into "out". */
static void show(PGconn *conn, const char *sql, char *out, size_t size)
{
	PGresult *res = PQexec(conn, sql);

	cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", sql,
		     PQerrorMessage(conn));
	snprintf(out, size, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
}

/* Option "key" that connection "conn" was made with; "" when none. */
static void connected_with(PGconn *conn, const char *key, char *out, size_t size)
{
	PQconninfoOption *o = PQconninfo(conn);

	out[0] = 0;
	for (PQconninfoOption *i = o; i->keyword; i++)
		if (strcmp(i->keyword, key) == 0 && i->val)
			snprintf(out, size, "%s", i->val);
	PQconninfoFree(o);
}

Test(pg, connections_bound_their_waits_and_keep_the_users_options)
{
	cache_options o = fx_options();
	cache_error err = {0};
	char uri[400], value[64];
	cache *c = NULL;

	postgresql_only();
	fx_sql("CREATE SCHEMA tuned");
	snprintf(uri, sizeof(uri), "%s&connect_timeout=2&options=-c%%20search_path"
		 "%%3Dtuned", fx.path);
	cr_assert_eq(cache_open(uri, &o, &c, &err), 0, "%s", err.message);
	put_graph(c, 1, NULL);
	cr_expect_eq(fx_sql("SELECT count(*) FROM tuned.graphs"), 1,
		     "the tables are in the user's search_path");
	cr_expect_eq(fx_sql("SELECT count(*) FROM pg_tables WHERE tablename = "
			    "'graphs' AND schemaname = 'public'"),
		     0);
	for (int i = 0; i < 2; i++) {
		PGconn *conn = i ? c->pg_reader : c->pg_writer;

		show(conn, "SHOW statement_timeout", value, sizeof(value));
		cr_expect_str_eq(value, "30s");
		show(conn, "SHOW lock_timeout", value, sizeof(value));
		cr_expect_str_eq(value, "5s");
		show(conn, "SHOW extra_float_digits", value, sizeof(value));
		cr_expect_str_eq(value, "3");
		connected_with(conn, "connect_timeout", value, sizeof(value));
		cr_expect_str_eq(value, "2", "the user's connect_timeout stays");
		connected_with(conn, "keepalives", value, sizeof(value));
		cr_expect_str_eq(value, "1");
		connected_with(conn, "keepalives_idle", value, sizeof(value));
		cr_expect_str_eq(value, "30");
	}
	cache_close(c);
	c = fx_open();
	connected_with(c->pg_writer, "connect_timeout", value, sizeof(value));
	cr_expect_str_eq(value, "5", "the engine's connect_timeout by default");
	cache_close(c);
}

/* Runs "sql" on the server's own database, outside the test's. */
static void on_server(const char *sql)
{
	PGconn *conn = PQconnectdb(getenv("TUNED_TEST_PG_URI"));
	PGresult *res = PQexec(conn, sql);
	int status = PQresultStatus(res);

	cr_assert(status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK, "%s: %s",
		  sql, PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
}

/* The server turns the test's database away, as one down would be, and
 * lets it in again. */
Test(pg, a_server_that_cannot_be_reached_is_an_io_error_naming_why)
{
	cache_error err = {0};
	char database[64], sql[300];
	cache *c;

	postgresql_only();
	c = fx_open();
	put_graph(c, 1, NULL);
	snprintf(database, sizeof(database), "%s", PQdb(c->pg_writer));
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" ALLOW_CONNECTIONS false",
		 database);
	on_server(sql);
	snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(pid) FROM "
		 "pg_stat_activity WHERE datname = '%s'", database);
	on_server(sql);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_GPU, CODEGEN, 0, NULL,
				      &err), CACHE_EIO, "%s", err.message);
	cr_expect(strstr(err.message, "not currently accepting connections"),
		  "%s", err.message);
	cr_expect_eq(cache_put_graph(c, graph_key(2), graph_canonical(2), NULL,
				     &err), CACHE_EIO, "%s", err.message);
	cr_expect(strstr(err.message, "not currently accepting connections"),
		  "%s", err.message);
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" ALLOW_CONNECTIONS true",
		 database);
	on_server(sql);
	put_graph(c, 2, NULL);
	cache_close(c);
}

/* A device looked up in a write locks its row until the write ends: a
 * prune of another connection waits, and cannot delete it in between. */
Test(pg, a_device_looked_up_is_locked_until_the_write_ends)
{
	cache_error err = {0};
	int64_t id = 0;
	PGconn *other;
	PGresult *res;
	cache *c;

	postgresql_only();
	c = fx_open();
	cr_assert_eq(pg_begin(c, &err), 0, "%s", err.message);
	cr_assert_eq(pg_device_id(c, DEVICE_GPU, 1, &id, &err), 0, "%s",
		     err.message);
	cr_assert_eq(pg_end(c, 0, &err), 0, "%s", err.message);
	cr_assert_eq(pg_begin(c, &err), 0, "%s", err.message);
	cr_assert_eq(pg_device_id(c, DEVICE_GPU, 2, &id, &err), 0, "%s",
		     err.message);
	cr_expect_eq(fx_sql("SELECT count(*) FROM devices"), 1, "one row");
	other = PQconnectdb(fx.path);
	res = PQexec(other, "SET lock_timeout = 200; DELETE FROM devices");
	cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "the delete waits");
	cr_expect_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE) ?: "", "55P03",
			 "%s", PQerrorMessage(other));
	PQclear(res);
	PQfinish(other);
	cr_assert_eq(pg_end(c, 0, &err), 0, "%s", err.message);
	cr_expect_eq(fx_sql("SELECT id FROM devices"), id);
	cache_close(c);
}

/* An import's first statement puts the graph, which locks its row until
 * the import ends, so that another connection's publish of the graph
 * waits for it and numbers after it; the name the cache has stays. */
Test(pg, a_graph_an_import_puts_is_locked_until_the_import_ends)
{
	cache_error err = {0};
	PGconn *other;
	PGresult *res;
	cache *c;

	postgresql_only();
	c = fx_open();
	put_graph(c, 1, "kept");
	cr_assert_eq(pg_begin(c, &err), 0, "%s", err.message);
	cr_assert_eq(pg_insert_graph(c, graph_key(1), graph_canonical(1), "imported",
				     "{}", true, &err),
		     0, "%s", err.message);
	other = PQconnectdb(fx.path);
	res = PQexec(other, "SET lock_timeout = 200; UPDATE graphs SET last_used = 0");
	cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "the update waits");
	cr_expect_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE) ?: "", "55P03", "%s",
			 PQerrorMessage(other));
	PQclear(res);
	PQfinish(other);
	cr_assert_eq(pg_end(c, 0, &err), 0, "%s", err.message);
	cr_expect_eq(fx_sql("SELECT count(*) FROM graphs WHERE name = 'kept' AND "
			    "graph = '{}'"),
		     1, "the name kept, the graph.json given");
	cache_close(c);
}

/* A prune by size passes over a graph another connection holds (as a
 * publish of it does) instead of waiting for it, and deletes the others. */
Test(pg, a_prune_by_size_passes_over_a_graph_in_use)
{
	cache_prune_stats ps;
	cache_error err = {0};
	PGconn *other;
	PGresult *res;
	char sql[200];
	cache *c;

	postgresql_only();
	c = fx_open();
	for (int n = 1; n <= 3; n++) {
		put_graph(c, n, NULL);
		publish(c, n, DEVICE_GPU, CODEGEN, 1, 100);
		fx.now++;
	}
	other = PQconnectdb(fx.path);
	snprintf(sql, sizeof(sql),
		 "BEGIN; SELECT key FROM graphs WHERE key = '%s' "
		 "FOR UPDATE",
		 graph_key(1));
	res = PQexec(other, sql);
	cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(other));
	PQclear(res);
	cr_assert_eq(cache_prune(c, 0, 1, &ps, &err), 0, "%s", err.message);
	cr_expect_eq(ps.graphs, 2, "graphs %lld", (long long)ps.graphs);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM graphs WHERE key = '%s'",
		 graph_key(1));
	cr_expect_eq(fx_sql(sql), 1, "the graph in use went");
	PQclear(PQexec(other, "COMMIT"));
	PQfinish(other);
	cache_close(c);
}

/* A role allowed to read and write the tables, not to create any, opens
 * a database whose schema is up to date. */
Test(pg, a_role_without_create_opens_an_up_to_date_database)
{
	cache_options o = fx_options();
	cache_error err = {0};
	char role[32], sql[300], uri[400];
	const char *user;
	cache *c = fx_open();

	postgresql_only();
	cache_close(c);
	snprintf(role, sizeof(role), "dml_%d", (int)getpid());
	snprintf(sql, sizeof(sql), "CREATE ROLE %s LOGIN; GRANT SELECT, INSERT, "
		 "UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO %s; GRANT "
		 "USAGE ON ALL SEQUENCES IN SCHEMA public TO %s", role, role, role);
	fx_sql(sql);
	snprintf(sql, sizeof(sql), "SELECT has_schema_privilege('%s', 'public', "
		 "'CREATE')::int", role);
	cr_expect_eq(fx_sql(sql), 0, "the role may not create tables");
	user = strstr(fx.path, "user=postgres");
	cr_assert_not_null(user, "%s", fx.path);
	snprintf(uri, sizeof(uri), "%.*suser=%s%s", (int)(user - fx.path), fx.path,
		 role, user + strlen("user=postgres"));
	cr_assert_eq(cache_open(uri, &o, &c, &err), 0, "%s", err.message);
	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_GPU, CODEGEN, 1, 10);
	cache_close(c);
	snprintf(sql, sizeof(sql), "DROP OWNED BY %s; DROP ROLE %s", role, role);
	fx_sql(sql);
}

static int claim(cache *c, int seed, double claim_s)
{
	char *plan = make_plan(2, seed);
	cache_error err = {0};
	int rc = cache_claim_plan(c, graph_key(1), DEVICE_GPU, CODEGEN, plan, claim_s,
				  &err);

	free(plan);
	cr_assert_geq(rc, 0, "cache_claim_plan: %s", err.message);
	return rc;
}

static void record_trial(cache *c, int seed, double ms)
{
	char *plan = make_plan(2, seed);
	cache_trial t = {.graph = graph_key(1),
			 .device = DEVICE_GPU,
			 .codegen = CODEGEN,
			 .plan = plan,
			 .outcome = CACHE_TRIAL_OK,
			 .median_ms = ms};
	cache_error err = {0};

	cr_assert_eq(cache_record_trial(c, &t, &err), 0, "%s", err.message);
	free(plan);
}

/* Two daemons claim one plan (each through a reader, as the runner's
 * search thread does): one wins; nobody claims a plan measured on the
 * device; a claim that ran out is taken again, by anyone. */
Test(pg, a_plan_is_claimed_once_and_never_once_measured)
{
	cache_error err = {0};
	cache *a, *b, *ra, *rb;

	postgresql_only();
	a = fx_open();
	b = fx_open();
	cr_assert_eq(cache_open_reader(a, &ra, &err), 0, "%s", err.message);
	cr_assert_eq(cache_open_reader(b, &rb, &err), 0, "%s", err.message);
	put_graph(a, 1, NULL);
	cr_expect_eq(claim(ra, 1, 60), 1);
	cr_expect_eq(claim(rb, 1, 60), 0, "a plan claimed twice");
	cr_expect_eq(claim(ra, 1, 60), 0, "a claim held is not claimed again");
	record_trial(b, 2, 3.0);
	cr_expect_eq(claim(ra, 2, 60), 0, "a plan measured claimed");
	cr_expect_eq(claim(rb, 3, 0.05), 1);
	usleep(100 * 1000);
	cr_expect_eq(claim(ra, 3, 60), 1, "a claim that ran out not taken again");
	cr_expect_eq(claim(rb, 4, 0.05), 1);
	record_trial(b, 4, 1.0);
	usleep(100 * 1000);
	cr_expect_eq(claim(ra, 4, 60), 0,
		     "a plan measured claimed once its claim ran out");
	cache_close(rb);
	cache_close(ra);
	cache_close(b);
	cache_close(a);
}

/* Each read of the trials after the last one read gives only the newer
 * ones, oldest first, whoever recorded them; a read from the end (-1)
 * gives none and says where they end. */
Test(pg, trials_are_read_after_the_last_one_read)
{
	cache_error err = {0};
	int64_t after = 0, last;
	json_t *out = NULL;
	cache *a, *b;

	postgresql_only();
	a = fx_open();
	b = fx_open();
	put_graph(a, 1, NULL);
	record_trial(a, 1, 2.0);
	record_trial(b, 2, 1.0);
	cr_assert_eq(cache_trials_after(b, graph_key(1), DEVICE_GPU, CODEGEN, &after,
					10, &out, &err),
		     0, "%s", err.message);
	cr_expect_eq(json_array_size(out), 2);
	cr_expect_eq(json_number_value(
			     json_object_get(json_array_get(out, 0), "median_ms")),
		     2.0);
	cr_expect_str_eq(json_string_value(
				 json_object_get(json_array_get(out, 1), "outcome")),
			 "ok");
	json_decref(out);
	last = after;
	cr_expect_gt(after, 0);
	cr_assert_eq(cache_trials_after(b, graph_key(1), DEVICE_GPU, CODEGEN, &after,
					10, &out, &err),
		     0, "%s", err.message);
	cr_expect_eq(json_array_size(out), 0);
	cr_expect_eq(after, last);
	json_decref(out);
	after = -1;
	cr_assert_eq(cache_trials_after(b, graph_key(1), DEVICE_GPU, CODEGEN, &after,
					10, &out, &err),
		     0, "%s", err.message);
	cr_expect_eq(json_array_size(out), 0, "a read from the end read trials");
	cr_expect_eq(after, last, "not positioned after the newest trial");
	json_decref(out);
	record_trial(a, 3, 0.5);
	record_trial(a, 4, 0.25);
	cr_assert_eq(cache_trials_after(b, graph_key(1), DEVICE_GPU, CODEGEN, &after, 1,
					&out, &err),
		     0, "%s", err.message);
	cr_expect_eq(json_array_size(out), 1, "the limit not kept");
	cr_expect_eq(json_number_value(
			     json_object_get(json_array_get(out, 0), "median_ms")),
		     0.5);
	json_decref(out);
	cache_close(b);
	cache_close(a);
}
