/*
 * pg_runs.c: the steps of runs.c on PostgreSQL, on the writer connection
 * inside its transaction. Two daemons pinning one key for one run race
 * only at the insert: the second waits for the first's row, inserts
 * nothing (ON CONFLICT DO NOTHING), and reads back, in a statement of its
 * own (READ COMMITTED), the version the first pinned.
 */
#include <string.h>

#include <libpq-fe.h>

#include "cache_int.h"

int cache_pg_write_begin(cache *c, cache_error *err)
{
	return pg_begin(c, err);
}

int cache_pg_write_end(cache *c, int rc, cache_error *err)
{
	return pg_end(c, rc, err);
}

static void key_args(pg_args *a, const char *run, const char *graph, const char *device,
		     const char *codegen)
{
	pg_text(a, run);
	pg_text(a, graph);
	pg_text(a, device);
	pg_text(a, codegen);
}

static int read_pin(cache *c, const pg_args *a, int *version, cache_error *err)
{
	PGresult *res = NULL;
	int rc;

	rc = pg_run(c, c->pg_writer,
		    "SELECT version FROM pins WHERE run = $1 "
		    "AND graph = $2 AND device = $3 AND codegen = $4",
		    a, &res, "cannot read a run's pin", err);
	*version = rc == 0 && PQntuples(res) ? (int)pg_int_at(res, 0, 0) : 0;
	PQclear(res);
	return rc;
}

/* As runs.c's pin_sql. */
static const char pin_sql[] =
	"INSERT INTO pins (run, graph, device, codegen, version, pinned_at) "
	"SELECT $1, $2, $3, $4, latest, $5 FROM (SELECT max(p.version) AS "
	"latest FROM plans p JOIN devices d ON d.id = p.device WHERE "
	"p.graph = $2 AND d.signature = $3 AND p.codegen = $4 AND "
	"p.bad IS NULL) AS newest WHERE latest IS NOT NULL ON CONFLICT ";

int cache_pg_pin_key(cache *c, const char *run, const char *graph, const char *device,
		     const char *codegen, bool move, int *previous, int *version,
		     cache_error *err)
{
	char sql[sizeof(pin_sql) + 128];
	pg_args a = {0};
	int rc;

	key_args(&a, run, graph, device, codegen);
	rc = read_pin(c, &a, previous, err);
	if (rc || (*previous && !move)) {
		*version = *previous;
		return rc;
	}
	strcpy(sql, pin_sql);
	strcat(sql,
	       move ? "(run, graph, device, codegen) DO UPDATE SET "
		      "version = EXCLUDED.version, pinned_at = EXCLUDED.pinned_at" :
		      "DO NOTHING");
	pg_int(&a, cache_now(c));
	rc = pg_change(c, sql, &a, "cannot pin a run's version", err);
	a.n = 4;
	return rc < 0 ? rc : read_pin(c, &a, version, err);
}

int cache_pg_run_keys(cache *c, const char *run, const char *device,
		      const char *codegen, json_t **out, cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc;

	pg_text(&a, run);
	pg_text(&a, device);
	pg_text(&a, codegen);
	rc = pg_run(c, c->pg_writer,
		    "SELECT graph FROM pins WHERE run = $1 AND "
		    "device = $2 AND codegen = $3 ORDER BY graph COLLATE \"C\"",
		    &a, &res, "cannot read a run's pins", err);
	if (rc == 0 && !(*out = json_array())) {
		rc = CACHE_ENOMEM;
		cache_set_error(err, rc,
				"cannot read the pins of run '%s': out "
				"of memory",
				run);
	}
	for (int i = 0; rc == 0 && i < PQntuples(res); i++)
		json_array_append_new(*out, json_string(pg_value(res, i, 0)));
	PQclear(res);
	return rc;
}
