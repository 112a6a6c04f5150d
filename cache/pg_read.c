/*
 * pg_read.c: the reads on PostgreSQL, through the reader connection, as
 * read.c does on SQLite. Each read is one statement, so it sees one
 * snapshot; those that give JSON build it in the statement and make its
 * reals reals again (pg_json_at). Texts sort as bytes (COLLATE "C"), as
 * SQLite sorts them.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include "cache_int.h"

/* Whether the texts of the row still match the checksum stored with them. */
static bool checksum_holds(const char *plan, const char *sources,
			   const char *launch, const char *stored)
{
	char hex[65];

	return stored && plan && sources &&
	       cache_checksum(plan, sources, launch, hex) == 0 &&
	       strcmp(hex, stored) == 0;
}

/* The versions a fetch may serve, newest first: those not marked bad. */
static const char fetch_sql[] =
	"SELECT p.version, p.plan, p.sources, p.binaries, p.launch, "
	"p.median_ms, p.spread_ms, p.found_by, p.created_at, p.checksum, p.id "
	"FROM plans p JOIN devices d ON d.id = p.device "
	"WHERE p.graph = $1 AND d.signature = $2 AND p.codegen = $3 "
	"AND p.bad IS NULL AND p.version >= $4 AND p.version <= $5 "
	"ORDER BY p.version DESC";

static int plan_from_row(const PGresult *res, int i, const char *graph,
			 const char *device, const char *codegen,
			 cache_plan **out, cache_error *err)
{
	const char *hex = pg_value(res, i, 3);
	size_t len = 0;
	unsigned char *binaries = hex ? PQunescapeBytea((const unsigned char *)hex,
							&len) : NULL;
	cache_plan row = {
		.graph = graph, .device = device, .codegen = codegen,
		.version = (int)pg_int_at(res, i, 0),
		.plan = pg_value(res, i, 1), .sources = pg_value(res, i, 2),
		.binaries = binaries, .binaries_len = len,
		.launch = pg_value(res, i, 4),
		.median_ms = pg_real_at(res, i, 5), .spread_ms = pg_real_at(res, i, 6),
		.found_by = pg_value(res, i, 7), .created_at = pg_int_at(res, i, 8),
	};

	if (!hex || binaries)
		*out = cache_plan_copy(&row);
	PQfreemem(binaries);
	if (!*out) {
		cache_set_error(err, CACHE_ENOMEM, "cannot fetch a plan: out of "
				"memory");
		return CACHE_ENOMEM;
	}
	return 0;
}

/* Whether (graph, device, codegen) has a good version below those read. */
static bool has_older(cache *c, const pg_args *a)
{
	pg_args first4 = *a; /* graph, device, codegen, min_version */
	PGresult *res = NULL;
	bool older;

	first4.n = 4;
	if (pg_run(c, c->pg_reader,
		   "SELECT 1 FROM plans p JOIN devices d ON "
		   "d.id = p.device WHERE p.graph = $1 AND d.signature = $2 AND "
		   "p.codegen = $3 AND p.bad IS NULL AND p.version < $4",
		   &first4, &res, "cannot fetch a plan", NULL))
		return false;
	older = PQntuples(res) > 0;
	PQclear(res);
	return older;
}

/* The newest good version from "min_version" to "max_version". */
static int fetch_range(cache *c, const char *graph, const char *device,
		       const char *codegen, int min_version, int max_version,
		       cache_plan **out, cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc, failed = 0, i = 0, n;

	rc = cache_check_key(graph, device, codegen, err);
	if (rc)
		return rc;
	pg_text(&a, graph);
	pg_text(&a, device);
	pg_text(&a, codegen);
	pg_int(&a, min_version);
	pg_int(&a, max_version);
	rc = pg_run(c, c->pg_reader, fetch_sql, &a, &res, "cannot fetch a plan", err);
	if (rc)
		return rc;
	for (n = PQntuples(res); i < n && !checksum_holds(pg_value(res, i, 1),
		pg_value(res, i, 2), pg_value(res, i, 4), pg_value(res, i, 9)); i++) {
		cache_version_failed(c, graph, device, codegen,
				     (int)pg_int_at(res, i, 0),
				     pg_int_at(res, i, 10));
		failed = (int)pg_int_at(res, i, 0);
	}
	if (i < n) {
		rc = (int)pg_int_at(res, i, 0);
		if (out && plan_from_row(res, i, graph, device, codegen, out, err))
			rc = CACHE_ENOMEM;
	} else {
		cache_fetch_missed(graph, device, codegen, min_version,
				   min_version == max_version,
				   min_version != max_version && has_older(c, &a),
				   failed, err);
		rc = CACHE_NOT_FOUND;
	}
	PQclear(res);
	return rc;
}

int cache_pg_fetch_best(cache *c, const char *graph, const char *device,
			const char *codegen, int min_version, cache_plan **out,
			cache_error *err)
{
	return fetch_range(c, graph, device, codegen, min_version, INT_MAX, out, err);
}

int cache_pg_fetch_version(cache *c, const char *graph, const char *device,
			   const char *codegen, int version, cache_plan **out,
			   cache_error *err)
{
	return fetch_range(c, graph, device, codegen, version, version, out, err);
}

/* Runs "sql", one JSON value in one row, with "a" on the reader: *out
 * gets it; "what" says what could not be done. No row is
 * CACHE_NOT_FOUND (the caller says what was not found). */
static int read_json(cache *c, const char *sql, pg_args *a, json_t **out,
		     const char *what, cache_error *err)
{
	PGresult *res = NULL;
	int rc;

	*out = NULL;
	rc = pg_run(c, c->pg_reader, sql, a, &res, what, err);
	if (rc)
		return rc;
	if (PQntuples(res) == 0)
		rc = CACHE_NOT_FOUND;
	else if (!(*out = pg_json_at(res, 0, 0)))
		rc = CACHE_ENOMEM;
	if (rc == CACHE_ENOMEM)
		cache_set_error(err, rc, "%s: out of memory", what);
	PQclear(res);
	return rc;
}

bool cache_pg_is_quarantined(cache *c, const char *graph, const char *device,
			     const char *codegen, const char *plan_json,
			     cache_error *err)
{
	PGresult *res = NULL;
	char *plan = NULL;
	pg_args a = {0};
	bool found = false;
	int rc;

	cache_set_error(err, 0, "%s", "");
	rc = cache_check_key(graph, device, codegen, err);
	if (rc == 0)
		rc = cache_json_canonical(plan_json, "plan", false, &plan, err);
	pg_text(&a, graph);
	pg_text(&a, device);
	pg_text(&a, codegen);
	pg_text(&a, plan);
	if (rc == 0)
		rc = pg_run(c, c->pg_reader, "SELECT 1 FROM quarantine q JOIN "
			    "devices d ON d.id = q.device WHERE q.graph = $1 AND "
			    "d.signature = $2 AND q.codegen = $3 AND md5(q.plan) = "
			    "md5($4) AND q.plan = $4", &a, &res,
			    "cannot read the quarantine", err);
	if (rc == 0)
		found = PQntuples(res) > 0;
	PQclear(res);
	cache_json_free(plan);
	return found;
}

int cache_pg_quarantined_plans(cache *c, const char *graph, const char *device,
			       const char *codegen, json_t **out, cache_error *err)
{
	pg_args a = {0};
	int rc = cache_check_key(graph, device, codegen, err);

	if (rc)
		return rc;
	pg_text(&a, graph);
	pg_text(&a, device);
	pg_text(&a, codegen);
	return read_json(c, "SELECT coalesce(json_agg(q.plan::json ORDER BY q.id), "
			 "'[]') FROM quarantine q JOIN devices d ON d.id = q.device "
			 "WHERE q.graph = $1 AND d.signature = $2 AND q.codegen = $3",
			 &a, out, "cannot read the quarantine", err);
}

static const char entries_sql[] =
	"SELECT coalesce(json_agg(json_build_object('id', q.id, 'key', q.graph, "
	"'name', g.name, 'device', d.signature, 'codegen', q.codegen, "
	"'plan', q.plan::json, 'reason', q.reason, 'cause', q.cause, "
	"'signal', q.signal, 'time_limit_s', q.time_limit_s, 'seed', q.seed, "
	"'created_at', q.created_at, 'graph', q.graph_json, "
	"'sources', q.sources::json, 'worker_log', q.worker_log) ORDER BY q.id), "
	"'[]') FROM quarantine q JOIN graphs g ON g.key = q.graph "
	"JOIN devices d ON d.id = q.device WHERE $1::text IS NULL OR q.graph = $1";

int cache_pg_quarantine_entries(cache *c, const char *key, json_t **out,
				cache_error *err)
{
	pg_args a = {0};

	pg_text(&a, key);
	return read_json(c, entries_sql, &a, out, "cannot list the quarantine", err);
}

/* The bytes of an entry's rows, as list_sql of read.c counts them. */
#define ENTRY_BYTES_SQL                                                        \
	"(SELECT coalesce(sum(octet_length(q.plan) + octet_length(q.sources) " \
	"+ coalesce(octet_length(q.binaries), 0) + "                          \
	"coalesce(octet_length(q.launch), 0) + octet_length(q.found_by)), 0) " \
	"FROM plans q WHERE q.graph = p.graph AND q.device = p.device AND "   \
	"q.codegen = p.codegen) + "                                           \
	"(SELECT coalesce(sum(octet_length(t.plan) + "                        \
	"coalesce(octet_length(t.detail), 0)), 0) FROM trials t "             \
	"WHERE t.graph = p.graph AND t.device = p.device AND "                \
	"t.codegen = p.codegen) + octet_length(g.canonical) + "               \
	"coalesce(octet_length(g.graph), 0)"

static const char list_sql[] =
	"SELECT p.graph, g.name, d.signature, p.codegen, p.version, "
	"p.median_ms, p.created_at, " ENTRY_BYTES_SQL " "
	"FROM plans p JOIN graphs g ON g.key = p.graph "
	"JOIN devices d ON d.id = p.device "
	"WHERE p.version = (SELECT max(q.version) FROM plans q "
	" WHERE q.graph = p.graph AND q.device = p.device "
	" AND q.codegen = p.codegen AND q.bad IS NULL) "
	"ORDER BY p.graph COLLATE \"C\", d.signature COLLATE \"C\", "
	"p.codegen COLLATE \"C\"";

int cache_pg_list(cache *c, int (*fn)(void *user, const cache_entry *entry),
		  void *user, cache_error *err)
{
	PGresult *res = NULL;
	int rc, calls = 0;

	rc = pg_run(c, c->pg_reader, list_sql, NULL, &res,
		    "cannot list the cache", err);
	for (int i = 0; rc == 0 && i < PQntuples(res); i++) {
		cache_entry entry = {
			.graph = pg_value(res, i, 0), .name = pg_value(res, i, 1),
			.device = pg_value(res, i, 2), .codegen = pg_value(res, i, 3),
			.version = (int)pg_int_at(res, i, 4),
			.median_ms = pg_real_at(res, i, 5),
			.updated_at = pg_int_at(res, i, 6),
			.bytes = pg_int_at(res, i, 7),
		};

		calls++;
		if (fn(user, &entry) != 0)
			break;
	}
	PQclear(res);
	return rc ? rc : calls;
}

/* Graph $1 as cache_show gives it; each version also with its texts and
 * checksum ("_plan", "_sources", "_launch", "_checksum"), for show to
 * check and remove. */
static const char show_sql[] =
	"SELECT json_build_object('graph', g.key, 'name', g.name, "
	"'canonical', g.canonical, 'first_seen', g.first_seen, "
	"'last_used', g.last_used, 'plans', coalesce((SELECT json_agg("
	"json_build_object('device', d.signature, 'codegen', p.codegen, "
	"'version', p.version, 'plan', p.plan::json, "
	"'kernels', json_array_length(p.sources::json), "
	"'binary_bytes', coalesce(octet_length(p.binaries), 0), "
	"'median_ms', p.median_ms, 'spread_ms', p.spread_ms, "
	"'found_by', p.found_by, 'created_at', p.created_at, 'bad', p.bad, "
	"'_plan', p.plan, '_sources', p.sources, '_launch', p.launch, "
	"'_checksum', p.checksum) ORDER BY d.signature COLLATE \"C\", "
	"p.codegen COLLATE \"C\", p.version) FROM plans p JOIN devices d "
	"ON d.id = p.device WHERE p.graph = g.key), '[]'), "
	"'trials', coalesce((SELECT json_agg(json_build_object('device', s.signature, "
	"'codegen', s.codegen, 'total', s.total, 'outcomes', s.outcomes) "
	"ORDER BY s.signature COLLATE \"C\", s.codegen COLLATE \"C\") FROM "
	"(SELECT d.signature, t.codegen, count(*) AS total, json_build_object("
	"'ok', count(*) FILTER (WHERE t.outcome = 'ok'), "
	"'wrong', count(*) FILTER (WHERE t.outcome = 'wrong'), "
	"'compile_error', count(*) FILTER (WHERE t.outcome = 'compile_error'), "
	"'timeout', count(*) FILTER (WHERE t.outcome = 'timeout'), "
	"'crash', count(*) FILTER (WHERE t.outcome = 'crash'), "
	"'error', count(*) FILTER (WHERE t.outcome = 'error')) AS outcomes "
	"FROM trials t JOIN devices d ON d.id = t.device WHERE t.graph = g.key "
	"GROUP BY 1, 2) s), '[]'), "
	"'quarantined', (SELECT count(*) FROM quarantine q WHERE q.graph = g.key)) "
	"FROM graphs g WHERE g.key = $1";

/* Says why a version that fails its checksum now is not served, and
 * takes the texts out of "plan". */
static void check_shown(json_t *plan)
{
	const char *texts[4];
	static const char *const names[4] = {
		"_plan", "_sources", "_launch", "_checksum",
	};

	for (int i = 0; i < 4; i++)
		texts[i] = json_string_value(json_object_get(plan, names[i]));
	if (json_is_null(json_object_get(plan, "bad")) &&
	    !checksum_holds(texts[0], texts[1], texts[2], texts[3]))
		json_object_set_new(plan, "bad", json_string("fails its checksum"));
	for (int i = 0; i < 4; i++)
		json_object_del(plan, names[i]);
}

int cache_pg_show(cache *c, const char *key, json_t **out, cache_error *err)
{
	json_t *plan;
	pg_args a = {0};
	size_t i;
	int rc;

	rc = cache_check_text(key, "graph key", err);
	pg_text(&a, key);
	if (rc == 0)
		rc = read_json(c, show_sql, &a, out, "cannot show a graph", err);
	if (rc == CACHE_NOT_FOUND)
		cache_set_error(err, rc, "graph '%s' is not in the cache", key);
	json_array_foreach(json_object_get(*out, "plans"), i, plan)
		check_shown(plan);
	return rc;
}

int cache_pg_trials(cache *c, const char *graph, const char *device,
		    const char *codegen, int64_t limit, json_t **out,
		    cache_error *err)
{
	pg_args a = {0};
	int rc;

	rc = cache_check_key(graph, device, codegen, err);
	if (rc)
		return rc;
	pg_text(&a, graph);
	pg_text(&a, device);
	pg_text(&a, codegen);
	limit > 0 ? pg_int(&a, limit) : pg_text(&a, NULL);
	return read_json(c, "SELECT coalesce(json_agg(json_build_object('plan', "
			 "t.plan::json, 'outcome', t.outcome, 'median_ms', "
			 "t.median_ms) ORDER BY t.id DESC), '[]') FROM (SELECT "
			 "t.id, t.plan, t.outcome, t.median_ms FROM trials t JOIN "
			 "devices d ON d.id = t.device WHERE t.graph = $1 AND "
			 "d.signature = $2 AND t.codegen = $3 ORDER BY t.id DESC "
			 "LIMIT $4::bigint) t", &a, out, "cannot read the trials",
			 err);
}

/* The database's size stands for the file's; its pages for SQLite's. */
static const char stat_sql[] =
	"SELECT current_setting('block_size')::bigint, "
	"pg_database_size(current_database()) / "
	"current_setting('block_size')::bigint, 0, "
	"(SELECT count(*) FROM graphs), (SELECT count(*) FROM devices), "
	"(SELECT count(*) FROM plans), (SELECT count(*) FROM trials), "
	"(SELECT count(*) FROM quarantine), pg_database_size(current_database())";

int cache_pg_stat(cache *c, cache_stats *out, cache_error *err)
{
	PGresult *res = NULL;
	int64_t *fields[] = {
		&out->page_size, &out->page_count, &out->freelist_count,
		&out->graphs, &out->devices, &out->plans, &out->trials,
		&out->quarantine, &out->file_bytes,
	};
	int rc;

	memset(out, 0, sizeof(*out));
	rc = pg_run(c, c->pg_reader, stat_sql, NULL, &res,
		    "cannot read the cache's numbers", err);
	for (int i = 0; rc == 0 && i < 9; i++)
		*fields[i] = pg_int_at(res, 0, i);
	PQclear(res);
	return rc;
}

/* Graph $1 as an export entry: its versions, with their texts and
 * checksum for export to check and remove (see show_sql), and binaries
 * in base64 on one line. */
static const char export_sql[] =
	"SELECT json_build_object('key', g.key, 'name', g.name, "
	"'graph', g.graph::json, 'versions', coalesce((SELECT json_agg("
	"json_build_object('device', d.signature, 'codegen', p.codegen, "
	"'version', p.version, 'plan', p.plan::json, "
	"'sources', p.sources::json, 'launch', p.launch::json, "
	"'binaries', translate(encode(p.binaries, 'base64'), E'\\n', ''), "
	"'median_ms', p.median_ms, 'spread_ms', p.spread_ms, "
	"'found_by', p.found_by, 'created_at', p.created_at, "
	"'_plan', p.plan, '_sources', p.sources, '_launch', p.launch, "
	"'_checksum', p.checksum) ORDER BY d.signature COLLATE \"C\", "
	"p.codegen COLLATE \"C\", p.version) FROM plans p JOIN devices d "
	"ON d.id = p.device WHERE p.graph = g.key AND p.bad IS NULL), '[]')), "
	"g.graph IS NULL FROM graphs g WHERE g.key = $1";

/* Drops the versions that fail their checksum, and every version's
 * texts kept for the check; a missing launch is left out. */
static void keep_sound(json_t *versions)
{
	for (size_t i = json_array_size(versions); i-- > 0;) {
		json_t *v = json_array_get(versions, i);

		check_shown(v);
		if (json_is_string(json_object_get(v, "bad")))
			json_array_remove(versions, i);
		else
			json_object_del(v, "bad");
		if (json_is_null(json_object_get(v, "launch")))
			json_object_del(v, "launch"); /* as SQLite's export */
	}
}

int cache_pg_export_graph(cache *c, const char *key, json_t **out,
			  cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc;

	rc = cache_check_text(key, "graph key", err);
	pg_text(&a, key);
	if (rc == 0)
		rc = pg_run(c, c->pg_reader, export_sql, &a, &res,
			    "cannot export a graph", err);
	if (rc)
		return rc;
	if (PQntuples(res) == 0) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc, "graph '%s' is not in the cache", key);
	} else if (strcmp(PQgetvalue(res, 0, 1), "t") == 0) {
		rc = CACHE_EINVAL;
		cache_set_error(err, rc, "graph '%s' has no graph.json kept (it "
				"was cached before the cache kept them): submit "
				"it again to export it", key);
	} else if (!(*out = pg_json_at(res, 0, 0))) {
		rc = CACHE_ENOMEM;
		cache_set_error(err, rc, "cannot export graph '%s': out of "
				"memory", key);
	}
	PQclear(res);
	if (rc == 0)
		keep_sound(json_object_get(*out, "versions"));
	return rc;
}
