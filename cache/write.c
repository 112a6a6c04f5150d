/*
 * write.c: graphs, trials, published plans and quarantine, written by the
 * owner thread through the writer, one BEGIN IMMEDIATE transaction each.
 *
 * Every public write checks the owner, checks and canonicalizes its
 * arguments outside the transaction, then runs one static function of
 * statements inside it; cache_end commits or rolls back.
 */
#include <string.h>

#include "cache_int.h"

/* Marks graph "key" as used at "now"; CACHE_NOT_FOUND when it is unknown. */
static int touch_graph(cache *c, const char *key, int64_t now,
		       cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer, "UPDATE graphs SET last_used = ?2 "
			   "WHERE key = ?1", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, key);
	sqlite3_bind_int64(stmt, 2, now);
	rc = cache_run(c->writer, stmt, "cannot update a graph", err);
	if (rc == 0 && sqlite3_changes(c->writer) == 0) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc, "graph '%s' is not in the cache "
				"(put it first)", key);
	}
	return rc;
}

/* Sets *id to the row of device "signature", adding it when new (a
 * lookup first, so that a known device costs no write). */
int cache_device_id(cache *c, const char *signature, int64_t now,
		    int64_t *id, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer, "SELECT id FROM devices WHERE "
			   "signature = ?1", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, signature);
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW)
		*id = sqlite3_column_int64(stmt, 0);
	else if (rc != SQLITE_DONE)
		rc = cache_db_error(c->writer, rc, err, "cannot find a device");
	sqlite3_finalize(stmt);
	if (rc != SQLITE_DONE)
		return rc == SQLITE_ROW ? 0 : rc;
	rc = cache_prepare(c->writer, "INSERT INTO devices (signature, "
			   "first_seen) VALUES (?1, ?2)", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, signature);
	sqlite3_bind_int64(stmt, 2, now);
	rc = cache_run(c->writer, stmt, "cannot add a device", err);
	*id = sqlite3_last_insert_rowid(c->writer);
	return rc;
}

int cache_insert_graph(cache *c, const char *key, const char *canonical,
		       const char *name, const char *graph_json, bool import,
		       cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer,
			   "INSERT INTO graphs (key, canonical, "
			   "name, first_seen, last_used, graph) VALUES (?1, ?2, "
			   "?3, ?4, ?4, ?5) ON CONFLICT (key) DO UPDATE SET "
			   "last_used = ?4, name = CASE WHEN ?6 THEN name ELSE "
			   "coalesce(?3, name) END, graph = coalesce(graph, ?5) "
			   "WHERE canonical = ?2",
			   &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, key);
	cache_bind_text(stmt, 2, canonical);
	cache_bind_text(stmt, 3, name);
	sqlite3_bind_int64(stmt, 4, cache_now(c));
	cache_bind_text(stmt, 5, graph_json);
	sqlite3_bind_int(stmt, 6, import);
	rc = cache_run(c->writer, stmt,
		       import ? "cannot import a graph" : "cannot put a graph", err);
	if (rc == 0 && sqlite3_changes(c->writer) == 0) {
		rc = CACHE_EINVAL;
		cache_set_error(err, rc, "graph '%s': canonical text differs "
				"from the cached one", key);
	}
	return rc;
}

int cache_sqlite_put_graph(__cache_keep cache *c, const char *key,
		    const char *canonical, const char *name, cache_error *err)
{
	int rc;

	rc = cache_check_text(key, "graph key", err);
	if (rc)
		return rc;
	rc = cache_check_text(canonical, "canonical text", err);
	if (rc)
		return rc;
	rc = cache_begin(c, err);
	if (rc)
		return rc;
	rc = cache_insert_graph(c, key, canonical, name, NULL, false, err);
	return cache_end(c, rc, err);
}

/* "plan" is the trial's plan in canonical form. */
static int insert_trial(cache *c, const cache_trial *trial, const char *plan,
			cache_error *err)
{
	int64_t now = cache_now(c), device;
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = touch_graph(c, trial->graph, now, err);
	if (rc)
		return rc;
	rc = cache_device_id(c, trial->device, now, &device, err);
	if (rc)
		return rc;
	rc = cache_prepare(c->writer, "INSERT INTO trials (graph, device, "
			   "codegen, plan, outcome, median_ms, detail, created_at) "
			   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, trial->graph);
	sqlite3_bind_int64(stmt, 2, device);
	cache_bind_text(stmt, 3, trial->codegen);
	cache_bind_text(stmt, 4, plan);
	cache_bind_text(stmt, 5, cache_outcome_name(trial->outcome));
	cache_bind_real(stmt, 6, trial->median_ms);
	if (trial->detail && *trial->detail)
		sqlite3_bind_text(stmt, 7, trial->detail,
				  (int)cache_utf8_cut(trial->detail,
						      CACHE_DETAIL_MAX),
				  SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 8, now);
	return cache_run(c->writer, stmt, "cannot record a trial", err);
}

int cache_trial_check(const cache_trial *trial, char **plan, cache_error *err)
{
	int rc;

	*plan = NULL;
	if (!trial || !cache_outcome_name(trial->outcome)) {
		cache_set_error(err, CACHE_EINVAL, "cannot record a trial: %s",
				trial ? "unknown outcome" : "no trial");
		return CACHE_EINVAL;
	}
	rc = cache_check_key(trial->graph, trial->device, trial->codegen, err);
	if (rc)
		return rc;
	return cache_json_canonical(trial->plan, "trial plan", false, plan, err);
}

int cache_sqlite_record_trial(__cache_keep cache *c,
		       __cache_keep const cache_trial *trial, cache_error *err)
{
	char *plan = NULL;
	int rc;

	rc = cache_trial_check(trial, &plan, err);
	if (rc)
		goto out;
	rc = cache_begin(c, err);
	if (rc)
		goto out;
	rc = insert_trial(c, trial, plan, err);
	rc = cache_end(c, rc, err);
out:
	cache_json_free(plan);
	return rc;
}

void cache_plan_texts_release(plan_texts *t)
{
	cache_json_free(t->plan);
	cache_json_free(t->sources);
	cache_json_free(t->launch);
}

int cache_plan_check(const cache_plan *p, plan_texts *t, cache_error *err)
{
	int rc;

	rc = cache_check_key(p->graph, p->device, p->codegen, err);
	if (rc == 0)
		rc = cache_check_text(p->found_by, "found_by", err);
	if (rc == 0)
		rc = cache_json_canonical(p->plan, "plan", false, &t->plan, err);
	if (rc == 0)
		rc = cache_json_canonical(p->sources, "sources", true,
					  &t->sources, err);
	if (rc == 0 && p->launch)
		rc = cache_json_canonical(p->launch, "launch", false,
					  &t->launch, err);
	return rc;
}

/* Sets *version to the next version of the plan's (graph, device,
 * codegen): one more than the newest, 1 for the first. */
static int next_version(cache *c, const cache_plan *p, int64_t device,
			int *version, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer, "SELECT coalesce(max(version), 0) + 1 "
			   "FROM plans WHERE graph = ?1 AND device = ?2 AND "
			   "codegen = ?3", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, p->graph);
	sqlite3_bind_int64(stmt, 2, device);
	cache_bind_text(stmt, 3, p->codegen);
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		*version = sqlite3_column_int(stmt, 0);
		rc = 0;
	} else {
		rc = cache_db_error(c->writer, rc, err, "cannot number a plan");
	}
	sqlite3_finalize(stmt);
	return rc;
}

cache_version_row cache_version_row_of(const cache_plan *p, const plan_texts *t,
				       int64_t device, int version, int64_t now)
{
	return (cache_version_row){
		.graph = p->graph,
		.device = device,
		.codegen = p->codegen,
		.version = version,
		.plan = t->plan,
		.sources = t->sources,
		.launch = t->launch,
		.binaries = p->binaries,
		.binaries_len = p->binaries_len,
		.median_ms = p->median_ms,
		.spread_ms = p->spread_ms,
		.found_by = p->found_by,
		.created_at = now,
	};
}

int cache_insert_version(cache *c, const cache_version_row *row, const char *what,
			 cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer,
			   "INSERT INTO plans (graph, device, codegen, "
			   "version, plan, sources, binaries, launch, median_ms, "
			   "spread_ms, found_by, created_at, checksum) VALUES (?1, "
			   "?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
			   "plan_checksum(?5, ?6, ?8))",
			   &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, row->graph);
	sqlite3_bind_int64(stmt, 2, row->device);
	cache_bind_text(stmt, 3, row->codegen);
	sqlite3_bind_int(stmt, 4, row->version);
	cache_bind_text(stmt, 5, row->plan);
	cache_bind_text(stmt, 6, row->sources);
	if (row->binaries)
		sqlite3_bind_blob64(stmt, 7, row->binaries, row->binaries_len,
				    SQLITE_STATIC);
	cache_bind_text(stmt, 8, row->launch);
	cache_bind_real(stmt, 9, row->median_ms);
	cache_bind_real(stmt, 10, row->spread_ms);
	cache_bind_text(stmt, 11, row->found_by);
	sqlite3_bind_int64(stmt, 12, row->created_at);
	return cache_run(c->writer, stmt, what, err);
}

static int insert_plan(cache *c, const cache_plan *p, const plan_texts *t,
		       int *version, cache_error *err)
{
	int64_t now = cache_now(c), device;
	cache_version_row row;
	int rc;

	rc = touch_graph(c, p->graph, now, err);
	if (rc == 0)
		rc = cache_device_id(c, p->device, now, &device, err);
	if (rc == 0)
		rc = next_version(c, p, device, version, err);
	if (rc)
		return rc;
	row = cache_version_row_of(p, t, device, *version, now);
	return cache_insert_version(c, &row, "cannot publish a plan", err);
}

int cache_sqlite_publish(__cache_keep cache *c, __cache_keep const cache_plan *plan,
		  int *version, cache_error *err)
{
	plan_texts texts = { NULL, NULL, NULL };
	int v = 0, rc;

	rc = cache_plan_check(plan, &texts, err);
	if (rc)
		goto out;
	rc = cache_begin(c, err);
	if (rc)
		goto out;
	rc = insert_plan(c, plan, &texts, &v, err);
	rc = cache_end(c, rc, err);
	if (rc == 0 && version)
		*version = v;
out:
	cache_plan_texts_release(&texts);
	return rc;
}

static void bind_bundle(sqlite3_stmt *stmt, const cache_quarantine_entry *q,
			const char *sources)
{
	cache_bind_text(stmt, 8, q->cause);
	if (q->signal)
		sqlite3_bind_int(stmt, 9, q->signal);
	if (q->time_limit_s > 0)
		sqlite3_bind_double(stmt, 10, q->time_limit_s);
	if (q->seed)
		sqlite3_bind_int64(stmt, 11, q->seed);
	cache_bind_text(stmt, 12, q->graph_json);
	cache_bind_text(stmt, 13, sources);
	cache_bind_text(stmt, 14, q->worker_log);
}

static int insert_quarantine(cache *c, const cache_quarantine_entry *q,
			     const char *plan, const char *sources,
			     cache_error *err)
{
	int64_t now = cache_now(c), device;
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = touch_graph(c, q->graph, now, err);
	if (rc == 0)
		rc = cache_device_id(c, q->device, now, &device, err);
	if (rc == 0)
		rc = cache_prepare(c->writer, "INSERT INTO quarantine (graph, "
				   "device, codegen, plan, reason, source, "
				   "created_at, cause, signal, time_limit_s, seed, "
				   "graph_json, sources, worker_log) VALUES (?1, ?2, "
				   "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
				   "?14) ON CONFLICT DO NOTHING", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, q->graph);
	sqlite3_bind_int64(stmt, 2, device);
	cache_bind_text(stmt, 3, q->codegen);
	cache_bind_text(stmt, 4, plan);
	cache_bind_text(stmt, 5, q->reason && *q->reason ? q->reason :
			"no reason given");
	cache_bind_text(stmt, 6, q->source);
	sqlite3_bind_int64(stmt, 7, now);
	bind_bundle(stmt, q, sources);
	return cache_run(c->writer, stmt, "cannot quarantine a plan", err);
}

int cache_quarantine_check(const cache_quarantine_entry *entry, char **plan,
			   char **sources, cache_error *err)
{
	int rc;

	*plan = *sources = NULL;
	if (!entry) {
		cache_set_error(err, CACHE_EINVAL, "cannot quarantine: no entry");
		return CACHE_EINVAL;
	}
	rc = cache_check_key(entry->graph, entry->device, entry->codegen, err);
	if (rc)
		return rc;
	if (entry->cause && strcmp(entry->cause, "crash") &&
	    strcmp(entry->cause, "timeout")) {
		cache_set_error(err, CACHE_EINVAL, "cannot quarantine: cause '%s' is "
				"neither crash nor timeout", entry->cause);
		return CACHE_EINVAL;
	}
	rc = cache_json_canonical(entry->plan, "quarantined plan", false, plan,
				  err);
	if (rc == 0 && entry->sources)
		rc = cache_json_canonical(entry->sources, "quarantined sources", true,
					  sources, err);
	return rc;
}

int cache_sqlite_quarantine(__cache_keep cache *c,
		     __cache_keep const cache_quarantine_entry *entry,
		     cache_error *err)
{
	char *plan = NULL, *sources = NULL;
	int rc;

	rc = cache_quarantine_check(entry, &plan, &sources, err);
	if (rc)
		goto out;
	rc = cache_begin(c, err);
	if (rc)
		goto out;
	rc = insert_quarantine(c, entry, plan, sources, err);
	rc = cache_end(c, rc, err);
out:
	cache_json_free(plan);
	cache_json_free(sources);
	return rc;
}
