/*
 * runs.c: the pins of training runs (docs/cache.md, "Runs"): cache_pin
 * and cache_advance, built once for both engines of the steps each
 * engine gives (a write transaction, one key's pin, the keys of a run),
 * and those steps on SQLite. pg_runs.c has them on PostgreSQL.
 *
 * A pin is a row of pins (run, graph, device signature, codegen) ->
 * version. A key's first pin by a run is the latest good version,
 * inserted only when the run has none (ON CONFLICT DO NOTHING) and then
 * read back, so that two ranks racing to pin a key get one version.
 */
#include <string.h>

#include "cache_int.h"

int cache_check_run(const char *run, cache_error *err)
{
	size_t len = run ? strlen(run) : 0;

	if (len == 0) {
		cache_set_error(err, CACHE_EINVAL,
				"a run id is 1 to %d bytes; it is missing",
				CACHE_RUN_MAX);
		return CACHE_EINVAL;
	}
	if (len > CACHE_RUN_MAX) {
		cache_set_error(err, CACHE_EINVAL,
				"run id '%.40s...' is %zu bytes; a run id is 1 to "
				"%d bytes",
				run, len, CACHE_RUN_MAX);
		return CACHE_EINVAL;
	}
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)run[i] < 0x20 || run[i] == 0x7f) {
			cache_set_error(err, CACHE_EINVAL,
					"run id '%.40s' has a "
					"control character",
					run);
			return CACHE_EINVAL;
		}
	return 0;
}

int cache_run_pin(cache *c, const char *run, const char *graph, const char *device,
		  const char *codegen, int *version, cache_error *err)
{
	int previous, rc;

	rc = c->engine->write_begin(c, err);
	if (rc == 0)
		rc = c->engine->pin_key(c, run, graph, device, codegen, false,
					&previous, version, err);
	if (rc == 0 && *version == 0) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc,
				"run '%s' cannot pin graph '%s' on '%s' "
				"(codegen '%s'): it has no version yet",
				run, graph, device, codegen);
	}
	return c->engine->write_end(c, rc, err);
}

/* Moves the pin of "key" and appends {key, version, previous} to "out". */
static int advance_key(cache *c, const char *run, const char *key, const char *device,
		       const char *codegen, bool listed, json_t *out, cache_error *err)
{
	int previous = 0, version = 0, rc;

	rc = cache_check_text(key, "graph key", err);
	if (rc == 0)
		rc = c->engine->pin_key(c, run, key, device, codegen, true, &previous,
					&version, err);
	if (rc == 0 && version == 0 && listed) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc,
				"run '%s' cannot pin graph '%s' on '%s' "
				"(codegen '%s'): it has no version yet",
				run, key, device, codegen);
	}
	if (rc == 0 && json_array_append_new(out, json_pack("{s:s, s:i, s:i}", "key",
							    key, "version", version,
							    "previous", previous))) {
		rc = CACHE_ENOMEM;
		cache_set_error(err, rc, "cannot advance run '%s': out of memory", run);
	}
	return rc;
}

int cache_run_advance(cache *c, const char *run, const char *device,
		      const char *codegen, const char *const *keys, int n, json_t **out,
		      cache_error *err)
{
	json_t *pinned = NULL, *moved = json_array();
	int rc = moved ? 0 : CACHE_ENOMEM, count;

	if (rc == 0)
		rc = c->engine->write_begin(c, err);
	else
		cache_set_error(err, rc, "cannot advance run '%s': out of memory", run);
	if (rc == 0 && n == 0)
		rc = c->engine->run_keys(c, run, device, codegen, &pinned, err);
	count = n ? n : (int)json_array_size(pinned);
	if (rc == 0 && count == 0) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc,
				"run '%s' has pinned no key on '%s' "
				"(codegen '%s'): fetch with the run first",
				run, device, codegen);
	}
	for (int i = 0; rc == 0 && i < count; i++)
		rc = advance_key(c, run,
				 n ? keys[i] :
				     json_string_value(json_array_get(pinned, i)),
				 device, codegen, n > 0, moved, err);
	if (moved)
		rc = c->engine->write_end(c, rc, err);
	json_decref(pinned);
	if (rc == 0)
		*out = moved;
	else
		json_decref(moved);
	return rc;
}

/* The steps on SQLite. */

int cache_sqlite_write_begin(cache *c, cache_error *err)
{
	return cache_begin(c, err);
}

int cache_sqlite_write_end(cache *c, int rc, cache_error *err)
{
	return cache_end(c, rc, err);
}

/* Binds the run and the key, ?1 to ?4. */
static void bind_pin(sqlite3_stmt *stmt, const char *run, const char *graph,
		     const char *device, const char *codegen)
{
	cache_bind_text(stmt, 1, run);
	cache_bind_text(stmt, 2, graph);
	cache_bind_text(stmt, 3, device);
	cache_bind_text(stmt, 4, codegen);
}

/* The pin of the key into *version, 0 when there is none. */
static int read_pin(cache *c, const char *run, const char *graph, const char *device,
		    const char *codegen, int *version, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer,
			   "SELECT version FROM pins WHERE run = ?1 "
			   "AND graph = ?2 AND device = ?3 AND codegen = ?4",
			   &stmt, err);
	if (rc)
		return rc;
	bind_pin(stmt, run, graph, device, codegen);
	rc = sqlite3_step(stmt);
	*version = rc == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : 0;
	if (rc == SQLITE_ROW || rc == SQLITE_DONE)
		rc = 0;
	else
		rc = cache_db_error(c->writer, rc, err, "cannot read a run's pin");
	sqlite3_finalize(stmt);
	return rc;
}

/* Pins the key's latest good version, when it has one: only when the run
 * has no pin, or over the pin when "move". */
static const char pin_sql[] =
	"INSERT INTO pins (run, graph, device, codegen, version, pinned_at) "
	"SELECT ?1, ?2, ?3, ?4, latest, ?5 FROM (SELECT max(p.version) AS "
	"latest FROM plans p JOIN devices d ON d.id = p.device WHERE "
	"p.graph = ?2 AND d.signature = ?3 AND p.codegen = ?4 AND "
	"p.bad IS NULL) WHERE latest IS NOT NULL ON CONFLICT ";

int cache_sqlite_pin_key(cache *c, const char *run, const char *graph,
			 const char *device, const char *codegen, bool move,
			 int *previous, int *version, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	char sql[sizeof(pin_sql) + 128];
	int rc;

	rc = read_pin(c, run, graph, device, codegen, previous, err);
	if (rc || (*previous && !move)) {
		*version = *previous;
		return rc;
	}
	strcpy(sql, pin_sql);
	strcat(sql,
	       move ? "(run, graph, device, codegen) DO UPDATE SET "
		      "version = excluded.version, pinned_at = excluded.pinned_at" :
		      "DO NOTHING");
	rc = cache_prepare(c->writer, sql, &stmt, err);
	if (rc)
		return rc;
	bind_pin(stmt, run, graph, device, codegen);
	sqlite3_bind_int64(stmt, 5, cache_now(c));
	rc = cache_run(c->writer, stmt, "cannot pin a run's version", err);
	return rc ? rc : read_pin(c, run, graph, device, codegen, version, err);
}

int cache_sqlite_run_keys(cache *c, const char *run, const char *device,
			  const char *codegen, json_t **out, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	*out = json_array();
	if (!*out) {
		cache_set_error(err, CACHE_ENOMEM,
				"cannot read the pins of run "
				"'%s': out of memory",
				run);
		return CACHE_ENOMEM;
	}
	rc = cache_prepare(c->writer,
			   "SELECT graph FROM pins WHERE run = ?1 AND "
			   "device = ?2 AND codegen = ?3 ORDER BY graph",
			   &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, run);
	cache_bind_text(stmt, 2, device);
	cache_bind_text(stmt, 3, codegen);
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
		json_array_append_new(
			*out, json_string((const char *)sqlite3_column_text(stmt, 0)));
	rc = rc == SQLITE_DONE ?
		     0 :
		     cache_db_error(c->writer, rc, err, "cannot read a run's pins");
	sqlite3_finalize(stmt);
	return rc;
}
