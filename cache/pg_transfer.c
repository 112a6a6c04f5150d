/*
 * pg_transfer.c: an import on PostgreSQL (transfer.c's steps on these
 * statements), in one write transaction. Its first statement puts the
 * graph, which locks the graph's row until the transaction ends, as a
 * publish does (pg_write.c): an import and the publishes of other
 * daemons run one after the other, so a version number the import takes
 * is never published twice. Each version imported is announced to the
 * watchers of every daemon, as a published one is.
 */
#include <libpq-fe.h>
#include <math.h>

#include "cache_int.h"

static int put_graph(cache *c, const char *key, const char *canonical, const char *name,
		     const char *graph, cache_error *err)
{
	return pg_insert_graph(c, key, canonical, name, graph, true, err);
}

static int newest_version(cache *c, const char *key, int64_t device,
			  const char *codegen, int *version, double *median_ms,
			  cache_error *err)
{
	PGresult *res = NULL;
	pg_args a = {0};
	int rc;

	pg_text(&a, key);
	pg_int(&a, device);
	pg_text(&a, codegen);
	rc = pg_run(c, c->pg_writer,
		    "SELECT version, median_ms FROM plans WHERE "
		    "graph = $1 AND device = $2 AND codegen = $3 ORDER BY version "
		    "DESC LIMIT 1",
		    &a, &res, "cannot read a version", err);
	*version = rc == 0 && PQntuples(res) > 0 ? (int)pg_int_at(res, 0, 0) : 0;
	*median_ms = rc == 0 && PQntuples(res) > 0 ? pg_real_at(res, 0, 1) : NAN;
	PQclear(res);
	return rc;
}

static int insert_version(cache *c, const char *signature, const cache_version_row *row,
			  cache_error *err)
{
	int rc = pg_insert_version(c, row, "cannot import a version", err);

	if (rc == 0)
		rc = pg_notify_version(c,
				       &(cache_plan){.graph = row->graph,
						     .device = signature,
						     .codegen = row->codegen},
				       row->version, err);
	return rc;
}

static const cache_import_store pg_store = {
	.begin = pg_begin,
	.end = pg_end,
	.device_id = pg_device_id,
	.put_graph = put_graph,
	.newest_version = newest_version,
	.insert_version = insert_version,
};

int cache_pg_import_graph(cache *c, json_t *entry, const char *canonical, json_t **out,
			  cache_error *err)
{
	return cache_import_entry(c, &pg_store, entry, canonical, out, err);
}
