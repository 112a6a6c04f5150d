/*
 * pg_jobs.c: the job queue on PostgreSQL, shared by the daemons of one
 * database (docs/design/cache.md, "A shared job queue").
 *
 * A job's row says which device signature runs it, and which cache
 * instance (pg_open.c: one per daemon) holds its lease until when, in
 * the server's unix seconds, so that hosts whose clocks differ agree. A
 * daemon claims queued jobs of its device, and jobs whose lease ran out
 * (their daemon died), with FOR UPDATE SKIP LOCKED: two daemons never
 * claim one job, and neither waits on the other's claim. It renews its
 * leases at every pass, and only the holder of a job's lease writes its
 * progress: a write of a job another daemon holds, or that is finished,
 * changes nothing (a cancel excepted, which any daemon may write to a job
 * not finished). Job ids come from one sequence.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include "cache_int.h"

#define OPEN_STATES "('queued', 'running')"
#define FINISHED_STATES "('done', 'failed', 'cancelled')"

void pg_job_at(const PGresult *res, int i, const char *instance, cache_job *job)
{
	const char *claimed_by = pg_value(res, i, 17);

	*job = (cache_job){
		.id = pg_int_at(res, i, 0),
		.key = pg_value(res, i, 1),
		.name = pg_value(res, i, 2),
		.graph = pg_value(res, i, 3),
		.state = pg_value(res, i, 4),
		.budget_s = pg_real_at(res, i, 5),
		.max_trials = (int)pg_int_at(res, i, 6),
		.priority = (int)pg_int_at(res, i, 7),
		.trials = (int)pg_int_at(res, i, 8),
		.best_ms = pg_real_at(res, i, 9),
		.version = (int)pg_int_at(res, i, 10),
		.error = pg_value(res, i, 11),
		.created_at = pg_real_at(res, i, 12),
		.finished_at = pg_real_at(res, i, 13),
		.first_ms = pg_real_at(res, i, 14),
		.uid = pg_int_at(res, i, 15),
		.device = pg_value(res, i, 16),
		.claimed_by = claimed_by,
		.claimed = claimed_by && instance && !strcmp(claimed_by, instance),
	};
}

/* Calls "fn" for each row of "res" until it returns nonzero: the calls. */
static int each_job(cache *c, PGresult *res,
		    int (*fn)(void *user, const cache_job *job), void *user)
{
	cache_job job;
	int calls = 0;

	for (int i = 0; i < PQntuples(res); i++) {
		pg_job_at(res, i, c->instance, &job);
		calls++;
		if (fn(user, &job) != 0)
			break;
	}
	return calls;
}

int cache_pg_jobs(cache *c, int (*fn)(void *user, const cache_job *job), void *user,
		  cache_error *err)
{
	PGresult *res = NULL;
	int rc;

	rc = pg_run(c, c->pg_reader,
		    "SELECT " PG_JOB_COLUMNS " FROM jobs "
		    "ORDER BY id",
		    NULL, &res, "cannot read the jobs", err);
	if (rc == 0)
		rc = each_job(c, res, fn, user);
	PQclear(res);
	return rc;
}

/* A job with its graph, inserted; a row of its id already there (a job
 * dirty again before its first write landed) is updated as any other,
 * by update_sql, so that no holder's progress is written over. */
static const char insert_sql[] =
	"INSERT INTO jobs (id, key, name, graph, state, budget_s, max_trials, "
	"priority, trials, best_ms, version, error, finished_at, first_ms, "
	"created_at, uid, device) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
	"$10, $11, $12, $13, $14, $15, $16, $17) ON CONFLICT (id) DO NOTHING";

/* Column "col" set to "arg" by the holder of the job's lease ($12), or by
 * anyone while none holds it; kept by a daemon that cancels a job
 * another holds, whose copy of its progress may be stale. */
#define BY_HOLDER(col, arg)                                                            \
	col " = CASE WHEN claimed_by IS NULL OR claimed_by = $12 THEN " arg            \
	    " ELSE " col " END"

/* A job written before: all but its key, name, graph, uid, device and
 * creation time, which never change; only by the holder of its lease, or
 * by anyone while none holds it, or to cancel it (its state, error and
 * end only); never once it is finished. */
/* clang-format off */
static const char update_sql[] =
	"UPDATE jobs SET state = $2, error = $9, finished_at = $10, "
	BY_HOLDER("budget_s", "$3") ", "
	BY_HOLDER("max_trials", "$4") ", "
	BY_HOLDER("priority", "$5") ", "
	BY_HOLDER("trials", "$6") ", "
	BY_HOLDER("best_ms", "$7") ", "
	BY_HOLDER("version", "$8") ", "
	BY_HOLDER("first_ms", "$11")
	" WHERE id = $1 AND state NOT IN " FINISHED_STATES
	" AND (claimed_by IS NULL OR claimed_by = $12 OR $2 = 'cancelled')";
/* clang-format on */

/* The fields of a job that change, in the order of both statements. */
static void changing_fields(pg_args *a, const cache_job *job)
{
	pg_text(a, job->state);
	pg_real(a, job->budget_s);
	pg_int(a, job->max_trials);
	pg_int(a, job->priority);
	pg_int(a, job->trials);
	pg_real(a, job->best_ms > 0 ? job->best_ms : NAN);
	pg_int(a, job->version);
	pg_text(a, job->error ? job->error : "");
	pg_real(a, job->finished_at > 0 ? job->finished_at : NAN);
	pg_real(a, job->first_ms > 0 ? job->first_ms : NAN);
}

/* An update that changed nothing: CACHE_NOT_FOUND when the job has no
 * row; 1 when its row had finished (a cancel that lost to the holder's
 * end: the daemon reads the row again to show how it ended); 0 when
 * another daemon holds it (its holder writes it, and the daemon learns at
 * its next pass). */
static int unchanged(cache *c, const cache_job *job, cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc;

	pg_int(&a, job->id);
	rc = pg_run(c, c->pg_writer,
		    "SELECT state IN " FINISHED_STATES " FROM "
		    "jobs WHERE id = $1",
		    &a, &res, "cannot write a job", err);
	if (rc == 0 && PQntuples(res) == 0) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc,
				"cannot update job %lld: it was never "
				"written (write it with its graph first)",
				(long long)job->id);
	} else if (rc == 0) {
		rc = !strcmp(pg_value(res, 0, 0), "t");
	}
	PQclear(res);
	return rc;
}

static int update_job(cache *c, const cache_job *job, cache_error *err)
{
	pg_args a = {0};
	int rc;

	pg_int(&a, job->id);
	changing_fields(&a, job);
	pg_text(&a, c->instance);
	rc = pg_change(c, update_sql, &a, "cannot write a job", err);
	if (rc == 0)
		return unchanged(c, job, err);
	return rc < 0 ? rc : 0;
}

/* 0, 1 when the job's row had finished and was left as it was, or a
 * negative code. */
static int write_job(cache *c, const cache_job *job, cache_error *err)
{
	pg_args a = {0};
	int rc;

	if (!job->graph)
		return update_job(c, job, err);
	pg_int(&a, job->id);
	pg_text(&a, job->key);
	pg_text(&a, job->name);
	pg_text(&a, job->graph);
	changing_fields(&a, job);
	pg_real(&a, job->created_at);
	job->uid >= 0 ? pg_int(&a, job->uid) : pg_text(&a, NULL);
	pg_text(&a, job->device);
	rc = pg_change(c, insert_sql, &a, "cannot write a job", err);
	if (rc == 0)
		return update_job(c, job, err);
	return rc < 0 ? rc : 0;
}

static int forget_finished(cache *c, int keep, cache_error *err)
{
	pg_args a = {0};
	int rc;

	pg_int(&a, keep);
	rc = pg_change(
		c,
		"DELETE FROM jobs WHERE state IN " FINISHED_STATES
		" AND id NOT IN (SELECT id FROM jobs WHERE state IN " FINISHED_STATES
		" ORDER BY id DESC LIMIT $1)",
		&a, "cannot forget old jobs", err);
	return rc < 0 ? rc : 0;
}

int cache_pg_put_jobs(cache *c, const cache_job *jobs, int n, int keep_finished,
		      cache_error *err)
{
	int ended = 0, rc;

	rc = pg_begin(c, err);
	if (rc)
		return rc;
	for (int i = 0; rc >= 0 && i < n; i++) {
		rc = write_job(c, &jobs[i], err);
		ended += rc > 0;
	}
	if (rc >= 0)
		rc = forget_finished(c, keep_finished, err);
	rc = pg_end(c, rc, err);
	return rc < 0 ? rc : ended;
}

/* "{1,2,3}": the ids watched, as a PostgreSQL array; NULL when out of
 * memory. sqlite3_free it. */
static char *id_array(const int64_t *ids, int n)
{
	sqlite3_str *s = sqlite3_str_new(NULL);

	sqlite3_str_appendchar(s, 1, '{');
	for (int i = 0; i < n; i++)
		sqlite3_str_appendf(s, "%s%lld", i ? "," : "", (long long)ids[i]);
	sqlite3_str_appendchar(s, 1, '}');
	return sqlite3_str_finish(s);
}

/* The leases this cache holds of the jobs "watch" (a PostgreSQL array)
 * names last "lease_s" more: a job the daemon holds but does not know
 * (it could not take it: out of memory) is left to run out. */
static const char renew_sql[] = "UPDATE jobs SET lease_until = " SERVER_NOW
				" + $2 WHERE claimed_by = $1 AND "
				"state IN " OPEN_STATES " AND id = ANY($3::bigint[])";

/* The renewal on connection "conn": the number of leases renewed. */
static int renew(cache *c, struct pg_conn *conn, double lease_s, const char *watch,
		 cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc;

	pg_text(&a, c->instance);
	pg_real(&a, lease_s);
	pg_text(&a, watch);
	rc = pg_run(c, conn, renew_sql, &a, &res, "cannot renew the leases of jobs",
		    err);
	if (rc == 0)
		rc = atoi(PQcmdTuples(res));
	PQclear(res);
	return rc;
}

int pg_renew_jobs(cache *c, double lease_s, const int64_t *ids, int n, cache_error *err)
{
	char *watch = id_array(ids, n);
	int rc;

	if (!watch) {
		cache_set_error(err, CACHE_ENOMEM,
				"cannot renew the leases of jobs: out of memory");
		return CACHE_ENOMEM;
	}
	rc = renew(c, c->pg_reader, lease_s, watch, err);
	sqlite3_free(watch);
	return rc;
}

/* Claims up to pass->claim open jobs of the device that none holds, or
 * whose lease ran out; the rows others lock meanwhile are skipped. A job
 * queued before the queue was shared (schema version 1) has no device:
 * the first daemon to claim it makes it its device's. */
static int claim(cache *c, const cache_job_pass *pass, cache_error *err)
{
	pg_args a = {0};
	int rc;

	if (pass->claim <= 0)
		return 0;
	pg_text(&a, c->instance);
	pg_real(&a, pass->lease_s);
	pg_text(&a, pass->device);
	pg_int(&a, pass->claim);
	rc = pg_change(
		c,
		"UPDATE jobs SET claimed_by = $1, lease_until = " SERVER_NOW
		" + $2, device = $3 WHERE id IN (SELECT id FROM "
		"jobs WHERE (device = $3 OR device IS NULL) AND state IN " OPEN_STATES
		" AND (claimed_by "
		"IS NULL OR lease_until < " SERVER_NOW ") ORDER BY priority "
		"DESC, id LIMIT $4 FOR UPDATE SKIP LOCKED)",
		&a, "cannot claim jobs", err);
	return rc < 0 ? rc : 0;
}

/* The rows the daemon is to know: open, new to it, or watched; graphs
 * of the jobs it holds or is to help only. */
static const char read_pass_sql[] = "SELECT " PG_JOB_COLUMNS_GRAPH(
	"CASE WHEN claimed_by = $1 OR id = "
	"ANY($5::bigint[]) THEN graph END") " FROM jobs WHERE device = $2 AND (state "
					    "IN " OPEN_STATES
					    " OR id > $3 OR id = ANY($4::bigint[])) "
					    "ORDER BY id";

static int read_pass(cache *c, const cache_job_pass *pass, const char *watch,
		     const char *help, PGresult **res, cache_error *err)
{
	pg_args a = {0};

	pg_text(&a, c->instance);
	pg_text(&a, pass->device);
	pg_int(&a, pass->known_max);
	pg_text(&a, watch);
	pg_text(&a, help);
	return pg_run(c, c->pg_writer, read_pass_sql, &a, res, "cannot read the jobs",
		      err);
}

int pg_pass_jobs(cache *c, const cache_job_pass *pass,
		 int (*fn)(void *user, const cache_job *job), void *user,
		 cache_error *err)
{
	PGresult *res = NULL;
	char *watch, *help;
	int rc;

	rc = cache_check_text(pass->device, "device signature", err);
	if (rc)
		return rc;
	watch = id_array(pass->watch, pass->nwatch);
	help = id_array(pass->help, pass->nhelp);
	if (!watch || !help)
		rc = CACHE_ENOMEM;
	if (rc)
		cache_set_error(err, rc, "cannot read the jobs: out of memory");
	if (rc == 0)
		rc = pg_begin(c, err);
	if (rc == 0) {
		rc = renew(c, c->pg_writer, pass->lease_s, watch, err);
		if (rc >= 0)
			rc = claim(c, pass, err);
		if (rc == 0)
			rc = read_pass(c, pass, watch, help, &res, err);
		rc = pg_end(c, rc, err);
	}
	if (rc == 0)
		each_job(c, res, fn, user);
	PQclear(res);
	sqlite3_free(watch);
	sqlite3_free(help);
	return rc;
}

int pg_release_jobs(cache *c, cache_error *err)
{
	pg_args a = {0};
	int rc;

	pg_text(&a, c->instance);
	rc = pg_change(
		c,
		"UPDATE jobs SET claimed_by = NULL, lease_until = NULL, "
		"state = 'queued' WHERE claimed_by = $1 AND state IN " OPEN_STATES,
		&a, "cannot give back the leases of jobs", err);
	return rc < 0 ? rc : 0;
}

int pg_new_job_id(cache *c, int64_t *id, cache_error *err)
{
	PGresult *res = NULL;
	int rc;

	rc = pg_run(c, c->pg_reader, "SELECT nextval('job_ids')", NULL, &res,
		    "cannot number a job", err);
	if (rc == 0)
		*id = pg_int_at(res, 0, 0);
	PQclear(res);
	return rc;
}
