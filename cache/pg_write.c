/*
 * pg_write.c: the writes on PostgreSQL, by the owner thread through the
 * writer connection, one transaction each, as write.c does on SQLite.
 *
 * Publish is a compare-and-set on the latest version of its (graph,
 * device, codegen). Its first statement marks the graph used, which locks
 * the graph's row until the transaction ends: publishes of one graph, from
 * any connection, run one after the other, and each then reads the latest
 * version as the one before it committed it (READ COMMITTED: each
 * statement sees what committed before it). It refuses a plan not faster
 * than the latest good version (CACHE_ESTALE: times of one device
 * signature compare) and inserts the next number, which the unique
 * (graph, device, codegen, version) guards besides. So two connections
 * never publish one version number, and a slower plan never follows a
 * faster one, whichever daemon measured it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include "cache_int.h"

/* Marks graph "key" as used at "now"; CACHE_NOT_FOUND when it is unknown. */
static int touch_graph(cache *c, const char *key, int64_t now, cache_error *err)
{
	pg_args a = {0};
	int rc;

	pg_text(&a, key);
	pg_int(&a, now);
	rc = pg_change(c, "UPDATE graphs SET last_used = $2 WHERE key = $1", &a,
		       "cannot update a graph", err);
	if (rc == 0) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc, "graph '%s' is not in the cache "
				"(put it first)", key);
	}
	return rc < 0 ? rc : 0;
}

/* One statement: the insert, on a signature there already, updates it to
 * itself, which locks its row until the transaction ends, so a prune of
 * another connection cannot delete it between the lookup and its use;
 * either way RETURNING gives the row's id. */
int pg_device_id(cache *c, const char *signature, int64_t now, int64_t *id,
		 cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc;

	pg_text(&a, signature);
	pg_int(&a, now);
	rc = pg_run(c, c->pg_writer, "INSERT INTO devices (signature, first_seen) "
		    "VALUES ($1, $2) ON CONFLICT (signature) DO UPDATE SET "
		    "signature = EXCLUDED.signature RETURNING id", &a, &res,
		    "cannot add a device", err);
	if (rc == 0)
		*id = pg_int_at(res, 0, 0);
	PQclear(res);
	return rc;
}

int pg_insert_graph(cache *c, const char *key, const char *canonical, const char *name,
		    const char *graph_json, bool import, cache_error *err)
{
	pg_args a = {0};
	int rc;

	pg_text(&a, key);
	pg_text(&a, canonical);
	pg_text(&a, name);
	pg_int(&a, cache_now(c));
	pg_text(&a, graph_json);
	pg_text(&a, import ? "true" : "false");
	rc = pg_change(c,
		       "INSERT INTO graphs (key, canonical, name, first_seen, "
		       "last_used, graph) VALUES ($1, $2, $3, $4, $4, $5) ON "
		       "CONFLICT (key) DO UPDATE SET last_used = $4, name = CASE "
		       "WHEN $6 THEN graphs.name ELSE coalesce($3, graphs.name) "
		       "END, graph = coalesce(graphs.graph, $5) WHERE "
		       "graphs.canonical = $2",
		       &a, import ? "cannot import a graph" : "cannot put a graph",
		       err);
	if (rc == 0) {
		rc = CACHE_EINVAL;
		cache_set_error(err, rc, "graph '%s': canonical text differs "
				"from the cached one", key);
	}
	return rc < 0 ? rc : 0;
}

int cache_pg_put_graph(cache *c, const char *key, const char *canonical,
		       const char *name, cache_error *err)
{
	int rc;

	rc = cache_check_text(key, "graph key", err);
	if (rc == 0)
		rc = cache_check_text(canonical, "canonical text", err);
	if (rc == 0)
		rc = pg_begin(c, err);
	if (rc)
		return rc;
	return pg_end(c, pg_insert_graph(c, key, canonical, name, NULL, false, err),
		      err);
}

static int insert_trial(cache *c, const cache_trial *t, const char *plan,
			cache_error *err)
{
	int64_t now = cache_now(c), device;
	char detail[CACHE_DETAIL_MAX + 1] = "";
	pg_args a = {0};
	int rc;

	rc = touch_graph(c, t->graph, now, err);
	if (rc == 0)
		rc = pg_device_id(c, t->device, now, &device, err);
	if (rc)
		return rc;
	if (t->detail)
		snprintf(detail, sizeof(detail), "%.*s",
			 (int)cache_utf8_cut(t->detail, CACHE_DETAIL_MAX), t->detail);
	pg_text(&a, t->graph);
	pg_int(&a, device);
	pg_text(&a, t->codegen);
	pg_text(&a, plan);
	pg_text(&a, cache_outcome_name(t->outcome));
	pg_real(&a, t->median_ms);
	pg_text(&a, *detail ? detail : NULL);
	pg_int(&a, now);
	return pg_run(c, c->pg_writer, "INSERT INTO trials (graph, device, codegen, "
		      "plan, outcome, median_ms, detail, created_at) VALUES ($1, "
		      "$2, $3, $4, $5, $6, $7, $8)", &a, NULL,
		      "cannot record a trial", err);
}

int cache_pg_record_trial(cache *c, const cache_trial *trial, cache_error *err)
{
	char *plan = NULL;
	int rc;

	rc = cache_trial_check(trial, &plan, err);
	if (rc == 0)
		rc = pg_begin(c, err);
	if (rc == 0)
		rc = pg_end(c, insert_trial(c, trial, plan, err), err);
	cache_json_free(plan);
	return rc;
}

/* The latest of (graph, device, codegen): its number ("latest", 0: none)
 * and the number and median of the latest good one. */
typedef struct latest {
	int version, good;
	double good_ms;
} latest;

static int read_latest(cache *c, const cache_plan *p, int64_t device,
		       latest *l, cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc;

	pg_text(&a, p->graph);
	pg_int(&a, device);
	pg_text(&a, p->codegen);
	rc = pg_run(c, c->pg_writer, "SELECT (SELECT coalesce(max(version), 0) "
		    "FROM plans WHERE graph = $1 AND device = $2 AND codegen = $3), "
		    "version, median_ms FROM plans WHERE graph = $1 AND device = "
		    "$2 AND codegen = $3 AND bad IS NULL ORDER BY version DESC "
		    "LIMIT 1", &a, &res, "cannot number a plan", err);
	if (rc)
		return rc;
	*l = (latest){0, 0, NAN};
	if (PQntuples(res) > 0)
		*l = (latest){(int)pg_int_at(res, 0, 0), (int)pg_int_at(res, 0, 1),
			      pg_real_at(res, 0, 2)};
	PQclear(res);
	return 0;
}

int pg_insert_version(cache *c, const cache_version_row *row, const char *what,
		      cache_error *err)
{
	char checksum[65];
	pg_args a = {0};

	if (cache_checksum(row->plan, row->sources, row->launch, checksum) < 0) {
		cache_set_error(err, CACHE_ENOMEM, "%s: out of memory", what);
		return CACHE_ENOMEM;
	}
	pg_text(&a, row->graph);
	pg_int(&a, row->device);
	pg_text(&a, row->codegen);
	pg_int(&a, row->version);
	pg_text(&a, row->plan);
	pg_text(&a, row->sources);
	if (row->binaries)
		pg_bytes(&a, row->binaries, row->binaries_len);
	else
		pg_text(&a, NULL);
	pg_text(&a, row->launch);
	pg_real(&a, row->median_ms);
	pg_real(&a, row->spread_ms);
	pg_text(&a, row->found_by);
	pg_int(&a, row->created_at);
	pg_text(&a, checksum);
	return pg_run(c, c->pg_writer,
		      "INSERT INTO plans (graph, device, codegen, "
		      "version, plan, sources, binaries, launch, median_ms, "
		      "spread_ms, found_by, created_at, checksum) VALUES ($1, $2, "
		      "$3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
		      &a, NULL, what, err);
}

/* A plan as fast as the latest good version, or slower, is refused. */
static int check_faster(const cache_plan *p, const latest *l, cache_error *err)
{
	if (!l->good || isnan(l->good_ms) || isnan(p->median_ms) ||
	    p->median_ms < l->good_ms)
		return 0;
	cache_set_error(err, CACHE_ESTALE, "graph '%s' on '%s' (codegen '%s'): "
			"version %d, %.4g ms, is as fast as this plan (%.4g ms) or "
			"faster: not published", p->graph, p->device, p->codegen,
			l->good, l->good_ms, p->median_ms);
	return CACHE_ESTALE;
}

/* The publish, in its own transaction; touch_graph takes the lock. */
static int publish_locked(cache *c, const cache_plan *p, const plan_texts *t,
			  int *version, cache_error *err)
{
	int64_t now = cache_now(c), device;
	latest l = {0, 0, NAN};
	cache_version_row row;
	int rc;

	rc = pg_begin(c, err);
	if (rc)
		return rc;
	rc = touch_graph(c, p->graph, now, err);
	if (rc == 0)
		rc = pg_device_id(c, p->device, now, &device, err);
	if (rc == 0)
		rc = read_latest(c, p, device, &l, err);
	if (rc == 0)
		rc = check_faster(p, &l, err);
	if (rc == 0) {
		row = cache_version_row_of(p, t, device, l.version + 1, now);
		rc = pg_insert_version(c, &row, "cannot publish a plan", err);
	}
	if (rc == 0)
		rc = pg_notify_version(c, p, l.version + 1, err);
	rc = pg_end(c, rc, err);
	if (rc == 0)
		*version = l.version + 1;
	return rc;
}

int cache_pg_publish(cache *c, const cache_plan *plan, int *version,
		     cache_error *err)
{
	plan_texts texts = {NULL, NULL, NULL};
	int v = 0, rc;

	rc = cache_plan_check(plan, &texts, err);
	if (rc == 0)
		rc = publish_locked(c, plan, &texts, &v, err);
	if (rc == 0 && version)
		*version = v;
	cache_plan_texts_release(&texts);
	return rc;
}

static int insert_quarantine(cache *c, const cache_quarantine_entry *q,
			     const char *plan, const char *sources,
			     cache_error *err)
{
	int64_t now = cache_now(c), device;
	pg_args a = {0};
	int rc;

	rc = touch_graph(c, q->graph, now, err);
	if (rc == 0)
		rc = pg_device_id(c, q->device, now, &device, err);
	if (rc)
		return rc;
	pg_text(&a, q->graph);
	pg_int(&a, device);
	pg_text(&a, q->codegen);
	pg_text(&a, plan);
	pg_text(&a, q->reason && *q->reason ? q->reason : "no reason given");
	pg_text(&a, q->source);
	pg_int(&a, now);
	pg_text(&a, q->cause);
	q->signal ? pg_int(&a, q->signal) : pg_text(&a, NULL);
	q->time_limit_s > 0 ? pg_real(&a, q->time_limit_s) : pg_text(&a, NULL);
	q->seed ? pg_int(&a, q->seed) : pg_text(&a, NULL);
	pg_text(&a, q->graph_json);
	pg_text(&a, sources);
	pg_text(&a, q->worker_log);
	return pg_run(c, c->pg_writer, "INSERT INTO quarantine (graph, device, "
		      "codegen, plan, reason, source, created_at, cause, signal, "
		      "time_limit_s, seed, graph_json, sources, worker_log) VALUES "
		      "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) "
		      "ON CONFLICT DO NOTHING", &a, NULL,
		      "cannot quarantine a plan", err);
}

int cache_pg_quarantine(cache *c, const cache_quarantine_entry *entry,
			cache_error *err)
{
	char *plan = NULL, *sources = NULL;
	int rc;

	rc = cache_quarantine_check(entry, &plan, &sources, err);
	if (rc == 0)
		rc = pg_begin(c, err);
	if (rc == 0)
		rc = pg_end(c, insert_quarantine(c, entry, plan, sources, err), err);
	cache_json_free(plan);
	cache_json_free(sources);
	return rc;
}

int cache_pg_keep_graph_json(cache *c, const char *key, const char *graph_json,
			     cache_error *err)
{
	pg_args a = {0};
	int rc;

	rc = cache_check_text(key, "graph key", err);
	if (rc == 0)
		rc = cache_check_text(graph_json, "graph.json", err);
	if (rc)
		return rc;
	pg_text(&a, key);
	pg_text(&a, graph_json);
	rc = pg_change(c, "UPDATE graphs SET graph = coalesce(graph, $2) WHERE "
		       "key = $1", &a, "cannot keep a graph", err);
	if (rc == 0) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc, "graph '%s' is not in the cache (put "
				"it first)", key);
	}
	return rc < 0 ? rc : 0;
}

/* Marks the version in row "id" bad, saying "why"; the owner's. */
void cache_pg_mark_bad(cache *c, int64_t id, const char *why)
{
	cache_error err = {0};
	pg_args a = {0};
	int rc;

	pg_int(&a, id);
	pg_text(&a, why);
	rc = pg_change(c, "UPDATE plans SET bad = $2 WHERE id = $1", &a,
		       "cannot mark a version bad", &err);
	if (rc < 0)
		cache_log(&c->options, CACHE_LOG_ERR, "PostgreSQL cache %s: %s",
			  c->path, err.message);
}
