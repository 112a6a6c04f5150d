/*
 * pg_share.c: one key searched by several daemons of a PostgreSQL
 * database at once (docs/design/cache.md, "A search shared by daemons").
 *
 * A daemon claims each plan before it measures it: a row of plan_claims,
 * keyed by the plan's md5, inserted where none is (two daemons racing
 * on one plan: one inserts, the other conflicts), or taken over where
 * the claim ran out, and never where a trial of the plan is recorded on
 * the device. So no plan is measured twice on one device signature while
 * the claims hold, and a claim of a daemon that died runs out. Between
 * generations each daemon reads the trials recorded since it last looked,
 * the others' and its own, by their increasing ids.
 */
#include <libpq-fe.h>

#include "cache_int.h"

static const char claim_sql[] =
	"INSERT INTO plan_claims AS p (graph, device, codegen, plan_md5, until) "
	"SELECT $1, $2, $3, md5($4), " SERVER_NOW " + $5 WHERE NOT EXISTS ("
	"SELECT 1 FROM trials t JOIN devices d ON d.id = t.device WHERE "
	"t.graph = $1 AND t.codegen = $3 AND md5(t.plan) = md5($4) AND "
	"d.signature = $2) ON CONFLICT (graph, device, codegen, plan_md5) DO "
	"UPDATE SET until = excluded.until WHERE p.until < " SERVER_NOW " RETURNING 1";

/* $1, $2, $3: the key of the search. */
static void key_args(pg_args *a, const char *graph, const char *device,
		     const char *codegen)
{
	pg_text(a, graph);
	pg_text(a, device);
	pg_text(a, codegen);
}

int pg_claim_plan(cache *c, const char *graph, const char *device, const char *codegen,
		  const char *plan, double claim_s, cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc;

	key_args(&a, graph, device, codegen);
	pg_text(&a, plan);
	pg_real(&a, claim_s);
	rc = pg_run(c, c->pg_reader, claim_sql, &a, &res, "cannot claim a plan", err);
	if (rc == 0)
		rc = PQntuples(res) > 0;
	PQclear(res);
	return rc;
}

/* Row "i" of the trials read, as cache_trials lists one; NULL when out
 * of memory (json_object_set_new drops its value when it fails). */
static json_t *trial_at(const PGresult *res, int i)
{
	json_t *trial = json_object();
	json_t *ms = PQgetisnull(res, i, 3) ? json_null() :
					      json_real(pg_real_at(res, i, 3));
	bool made = !json_object_set_new(trial, "median_ms", ms) &&
		    !json_object_set_new(trial, "plan", pg_json_at(res, i, 1)) &&
		    !json_object_set_new(trial, "outcome",
					 json_string(pg_value(res, i, 2)));

	if (made)
		return trial;
	json_decref(trial);
	return NULL;
}

/* Where the trials of the key end: *after the newest's number, or 0. */
static int newest_trial(cache *c, const char *graph, const char *device,
			const char *codegen, int64_t *after, cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc;

	key_args(&a, graph, device, codegen);
	rc = pg_run(c, c->pg_reader,
		    "SELECT coalesce(max(t.id), 0) FROM trials t JOIN devices d ON "
		    "d.id = t.device WHERE t.graph = $1 AND d.signature = $2 AND "
		    "t.codegen = $3",
		    &a, &res, "cannot read the trials", err);
	if (rc == 0)
		*after = pg_int_at(res, 0, 0);
	PQclear(res);
	return rc;
}

int pg_trials_after(cache *c, const char *graph, const char *device,
		    const char *codegen, int64_t *after, int limit, json_t **out,
		    cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc;

	if (*after < 0) {
		rc = newest_trial(c, graph, device, codegen, after, err);
		if (rc == 0 && !(*out = json_array()))
			rc = CACHE_ENOMEM;
		if (rc == CACHE_ENOMEM)
			cache_set_error(err, rc,
					"cannot read the trials: out of memory");
		return rc;
	}

	key_args(&a, graph, device, codegen);
	pg_int(&a, *after);
	pg_int(&a, limit);
	rc = pg_run(c, c->pg_reader,
		    "SELECT t.id, t.plan, t.outcome, t.median_ms FROM trials t "
		    "JOIN devices d ON d.id = t.device WHERE t.graph = $1 AND "
		    "d.signature = $2 AND t.codegen = $3 AND t.id > $4 ORDER BY "
		    "t.id LIMIT $5",
		    &a, &res, "cannot read the trials", err);
	if (rc == 0 && !(*out = json_array()))
		rc = CACHE_ENOMEM;
	for (int i = 0; rc == 0 && i < PQntuples(res); i++) {
		if (json_array_append_new(*out, trial_at(res, i)) < 0)
			rc = CACHE_ENOMEM;
		else
			*after = pg_int_at(res, i, 0);
	}
	PQclear(res);
	if (rc == CACHE_ENOMEM) {
		json_decref(*out);
		*out = NULL;
		cache_set_error(err, rc, "cannot read the trials: out of memory");
	}
	return rc;
}
