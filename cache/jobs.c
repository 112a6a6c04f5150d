/*
 * jobs.c: the daemon's job queue, a table of the cache.
 *
 * The queue lives in the cache's file so that a job and the versions it
 * published are written to one database: the daemon publishes a version
 * before it writes the job that names it, so after a crash no job claims
 * a version the cache lacks. Each change of the queue is one write
 * transaction (a handful of rows), never a rewrite of the whole queue.
 */
#include <math.h>

#include "cache_int.h"

static const char put_sql[] =
	"INSERT OR REPLACE INTO jobs (id, key, name, graph, state, budget_s, "
	"max_trials, priority, trials, best_ms, version, error, created_at, "
	"finished_at, first_ms, uid) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, "
	"?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)";

/* A job written before: everything but its key, name, graph, uid and
 * creation time, which never change. */
static const char update_sql[] =
	"UPDATE jobs SET state = ?5, budget_s = ?6, max_trials = ?7, "
	"priority = ?8, trials = ?9, best_ms = ?10, version = ?11, error = ?12, "
	"finished_at = ?14, first_ms = ?15 WHERE id = ?1";

/* The finished jobs beyond the newest ?1 of them. */
static const char forget_sql[] =
	"DELETE FROM jobs WHERE state IN ('done', 'failed', 'cancelled') AND "
	"id NOT IN (SELECT id FROM jobs WHERE state IN ('done', 'failed', "
	"'cancelled') ORDER BY id DESC LIMIT ?1)";

static int check_job(const cache_job *job, cache_error *err)
{
	if (!job || job->id < 1 || !job->key || !job->name || !job->state) {
		cache_set_error(err, CACHE_EINVAL, "cannot write a job: %s",
				!job ? "no job" : job->id < 1 ? "its id is not "
				"positive" : "a field is missing");
		return CACHE_EINVAL;
	}
	return 0;
}

/* Inserts the job, or replaces its row, when it comes with its graph;
 * updates its row otherwise (CACHE_NOT_FOUND when it has none). */
static int write_job(cache *c, const cache_job *job, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer, job->graph ? put_sql : update_sql, &stmt, err);
	if (rc)
		return rc;
	sqlite3_bind_int64(stmt, 1, job->id);
	cache_bind_text(stmt, 2, job->key);
	cache_bind_text(stmt, 3, job->name);
	if (job->graph)
		cache_bind_text(stmt, 4, job->graph);
	cache_bind_text(stmt, 5, job->state);
	sqlite3_bind_double(stmt, 6, job->budget_s);
	sqlite3_bind_int(stmt, 7, job->max_trials);
	sqlite3_bind_int(stmt, 8, job->priority);
	sqlite3_bind_int(stmt, 9, job->trials);
	cache_bind_real(stmt, 10, job->best_ms > 0 ? job->best_ms : NAN);
	sqlite3_bind_int(stmt, 11, job->version);
	cache_bind_text(stmt, 12, job->error ? job->error : "");
	sqlite3_bind_double(stmt, 13, job->created_at);
	cache_bind_real(stmt, 14, job->finished_at > 0 ? job->finished_at : NAN);
	cache_bind_real(stmt, 15, job->first_ms > 0 ? job->first_ms : NAN);
	if (job->uid >= 0)
		sqlite3_bind_int64(stmt, 16, job->uid);
	else
		sqlite3_bind_null(stmt, 16);
	rc = cache_run(c->writer, stmt, "cannot write a job", err);
	if (rc == 0 && sqlite3_changes(c->writer) == 0) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc, "cannot update job %lld: it was never "
				"written (write it with its graph first)",
				(long long)job->id);
	}
	return rc;
}

static int forget_finished(cache *c, int keep, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer, forget_sql, &stmt, err);
	if (rc)
		return rc;
	sqlite3_bind_int(stmt, 1, keep);
	return cache_run(c->writer, stmt, "cannot forget old jobs", err);
}

int cache_jobs_check(const cache_job *jobs, int n, int keep_finished,
		     cache_error *err)
{
	int rc = 0;

	for (int i = 0; rc == 0 && i < n; i++)
		rc = check_job(&jobs[i], err);
	if (rc == 0 && (n < 0 || keep_finished < 0)) {
		rc = CACHE_EINVAL;
		cache_set_error(err, rc, "cannot write jobs: a negative count");
	}
	return rc;
}

int cache_sqlite_put_jobs(__cache_keep cache *c, __cache_keep const cache_job *jobs,
		   int n, int keep_finished, cache_error *err)
{
	int rc;

	rc = cache_begin(c, err);
	if (rc)
		return rc;
	for (int i = 0; rc == 0 && i < n; i++)
		rc = write_job(c, &jobs[i], err);
	if (rc == 0)
		rc = forget_finished(c, keep_finished, err);
	return cache_end(c, rc, err);
}

static double real_or_zero(sqlite3_stmt *stmt, int i)
{
	return sqlite3_column_type(stmt, i) == SQLITE_NULL ? 0 :
	       sqlite3_column_double(stmt, i);
}

/* The job in the current row of "stmt" (the columns of put_sql); false
 * when a text did not come (out of memory). */
static bool job_from_row(sqlite3_stmt *stmt, cache_job *job)
{
	*job = (cache_job){
		.id = sqlite3_column_int64(stmt, 0),
		.key = (const char *)sqlite3_column_text(stmt, 1),
		.name = (const char *)sqlite3_column_text(stmt, 2),
		.graph = (const char *)sqlite3_column_text(stmt, 3),
		.state = (const char *)sqlite3_column_text(stmt, 4),
		.budget_s = sqlite3_column_double(stmt, 5),
		.max_trials = sqlite3_column_int(stmt, 6),
		.priority = sqlite3_column_int(stmt, 7),
		.trials = sqlite3_column_int(stmt, 8),
		.best_ms = real_or_zero(stmt, 9),
		.version = sqlite3_column_int(stmt, 10),
		.error = (const char *)sqlite3_column_text(stmt, 11),
		.created_at = sqlite3_column_double(stmt, 12),
		.finished_at = real_or_zero(stmt, 13),
		.first_ms = real_or_zero(stmt, 14),
		.uid = sqlite3_column_type(stmt, 15) == SQLITE_NULL ? -1 :
		       sqlite3_column_int64(stmt, 15),
	};
	return job->key && job->name && job->graph && job->state && job->error;
}

int cache_sqlite_jobs(__cache_keep cache *c,
	       int (*fn)(void *user, const cache_job *job), void *user,
	       cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	cache_job job;
	int rc, calls = 0;

	cache_read_end(c);
	rc = cache_prepare(c->reader, "SELECT id, key, name, graph, state, "
			   "budget_s, max_trials, priority, trials, best_ms, "
			   "version, error, created_at, finished_at, first_ms, uid FROM jobs "
			   "ORDER BY id", &stmt, err);
	if (rc)
		return rc;
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		if (!job_from_row(stmt, &job)) {
			rc = SQLITE_NOMEM;
			break;
		}
		calls++;
		if (fn(user, &job) != 0) {
			rc = SQLITE_DONE;
			break;
		}
	}
	if (rc == SQLITE_DONE)
		rc = calls;
	else
		rc = cache_db_error(c->reader, rc, err, "cannot read the jobs");
	sqlite3_finalize(stmt);
	return rc;
}
