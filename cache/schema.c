/*
 * schema.c: the schema, as a list of migrations applied in order.
 *
 * PRAGMA user_version is the number of steps applied. Step n (from 1)
 * runs in its own BEGIN IMMEDIATE transaction that also sets user_version
 * to n, so a crash leaves the file at a whole version. A new step is
 * appended to "migrations"; a step, once released, never changes.
 */
#include <stdio.h>

#include "cache_int.h"

/* Times are unix seconds. graphs.last_used is the last put or write for
 * the graph (pruning evicts the least recently used). Plans are published
 * versions; trials the history of measured candidates, kept small (no
 * sources, no binaries); quarantine the plans never to try again. */
static const char *const migrations[] = {
	/* 1: the first schema. */
	"CREATE TABLE graphs ("
	" key TEXT PRIMARY KEY NOT NULL,"
	" canonical TEXT NOT NULL,"
	" name TEXT,"
	" first_seen INTEGER NOT NULL,"
	" last_used INTEGER NOT NULL);"
	"CREATE TABLE devices ("
	" id INTEGER PRIMARY KEY,"
	" signature TEXT NOT NULL UNIQUE,"
	" first_seen INTEGER NOT NULL);"
	"CREATE TABLE plans ("
	" id INTEGER PRIMARY KEY,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device INTEGER NOT NULL REFERENCES devices(id),"
	" codegen TEXT NOT NULL,"
	" version INTEGER NOT NULL CHECK (version >= 1),"
	" plan TEXT NOT NULL,"
	" sources TEXT NOT NULL,"
	" binaries BLOB,"
	" launch TEXT,"
	" median_ms REAL,"
	" spread_ms REAL,"
	" found_by TEXT NOT NULL,"
	" created_at INTEGER NOT NULL,"
	" UNIQUE (graph, device, codegen, version));"
	"CREATE TABLE trials ("
	" id INTEGER PRIMARY KEY,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device INTEGER NOT NULL REFERENCES devices(id),"
	" codegen TEXT NOT NULL,"
	" plan TEXT NOT NULL,"
	" outcome TEXT NOT NULL CHECK (outcome IN"
	"  ('ok', 'wrong', 'compile_error', 'timeout', 'crash', 'error')),"
	" median_ms REAL,"
	" detail TEXT CHECK (length(CAST(detail AS BLOB)) <= 200)," /* DETAIL_MAX */
	" created_at INTEGER NOT NULL);"
	"CREATE INDEX trials_key ON trials (graph, device, codegen);"
	"CREATE TABLE quarantine ("
	" id INTEGER PRIMARY KEY,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device INTEGER NOT NULL REFERENCES devices(id),"
	" codegen TEXT NOT NULL,"
	" plan TEXT NOT NULL,"
	" reason TEXT NOT NULL,"
	" source TEXT,"
	" created_at INTEGER NOT NULL,"
	" UNIQUE (graph, device, codegen, plan));",
	/* 2: the daemon's job queue (it was a JSON file beside the cache), so
	 * that a job and the versions it published commit to one file. Times
	 * are fractional unix seconds, as the protocol shows them. */
	"CREATE TABLE jobs ("
	" id INTEGER PRIMARY KEY CHECK (id >= 1),"
	" key TEXT NOT NULL,"
	" name TEXT NOT NULL,"
	" graph TEXT NOT NULL,"
	" state TEXT NOT NULL CHECK (state IN"
	"  ('queued', 'running', 'done', 'failed', 'cancelled')),"
	" budget_s REAL NOT NULL,"
	" max_trials INTEGER NOT NULL,"
	" priority INTEGER NOT NULL,"
	" trials INTEGER NOT NULL,"
	" best_ms REAL,"
	" first_ms REAL,"
	" version INTEGER NOT NULL,"
	" error TEXT NOT NULL,"
	" created_at REAL NOT NULL,"
	" finished_at REAL);",
	/* 3: the graph.json a key's plans number their ops by, so that an
	 * export carries what an importer needs to check them. NULL for
	 * graphs put before. */
	"ALTER TABLE graphs ADD COLUMN graph TEXT;",
	/* 4: a repro bundle with each quarantined plan: how the worker died
	 * (cause "crash" or "timeout", the signal, the time limit), the seed
	 * of its inputs, the graph.json text, the kernels' sources (a JSON
	 * array) and the end of the worker's stderr. Entries made before
	 * have none of them (NULL). */
	"ALTER TABLE quarantine ADD COLUMN cause TEXT"
	" CHECK (cause IN ('crash', 'timeout'));"
	"ALTER TABLE quarantine ADD COLUMN signal INTEGER;"
	"ALTER TABLE quarantine ADD COLUMN time_limit_s REAL;"
	"ALTER TABLE quarantine ADD COLUMN seed INTEGER;"
	"ALTER TABLE quarantine ADD COLUMN graph_json TEXT;"
	"ALTER TABLE quarantine ADD COLUMN sources TEXT;"
	"ALTER TABLE quarantine ADD COLUMN worker_log TEXT;",
	/* 5: who submitted each job (their uid), so that only they or an
	 * admin may cancel it. NULL: not known (jobs queued before). */
	"ALTER TABLE jobs ADD COLUMN uid INTEGER;",
	/* 6: each version's checksum (checksum.c), checked whenever it is
	 * served, and "bad": why a version that failed it is never served
	 * again, NULL while it is good. Versions stored before were trusted
	 * until now: they get the checksum of what they hold. */
	"ALTER TABLE plans ADD COLUMN checksum TEXT;"
	"ALTER TABLE plans ADD COLUMN bad TEXT;"
	"UPDATE plans SET checksum = plan_checksum(plan, sources, launch);",
	/* 7: the pins of training runs (runs.c): the version each run gets
	 * of a key on a device signature and codegen, until it advances. */
	"CREATE TABLE pins ("
	" run TEXT NOT NULL,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device TEXT NOT NULL,"
	" codegen TEXT NOT NULL,"
	" version INTEGER NOT NULL CHECK (version >= 1),"
	" pinned_at INTEGER NOT NULL,"
	" PRIMARY KEY (run, graph, device, codegen));",
};

#define MIGRATIONS ((int)(sizeof(migrations) / sizeof(migrations[0])))

_Static_assert(MIGRATIONS == CACHE_SCHEMA_VERSION,
	       "one migration per schema version");

/* Applies the step after the version found under the write lock (another
 * process may have migrated meanwhile) and sets *version to the result. */
static int migrate_step(cache *c, int64_t *version, cache_error *err)
{
	char sql[64];
	int rc;

	rc = cache_begin(c, err);
	if (rc)
		return rc;
	rc = cache_query_int(c->writer, "PRAGMA user_version", version, err);
	if (rc || *version >= MIGRATIONS)
		goto end;
	rc = cache_exec(c->writer, migrations[*version],
			"cannot migrate the cache schema", err);
	if (rc)
		goto end;
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", (int)*version + 1);
	rc = cache_exec(c->writer, sql, "cannot migrate the cache schema", err);
	if (!rc)
		++*version;
end:
	return cache_end(c, rc, err);
}

int cache_migrate(cache *c, cache_error *err)
{
	int64_t version, from;
	int rc;

	rc = cache_query_int(c->writer, "PRAGMA user_version", &version, err);
	if (rc)
		return rc;
	if (version > MIGRATIONS) {
		cache_set_error(err, CACHE_ESCHEMA,
				"cache '%s' has schema version %lld, newer than "
				"this build's %d", c->path, (long long)version,
				MIGRATIONS);
		return CACHE_ESCHEMA;
	}
	from = version;
	while (version < MIGRATIONS) {
		rc = migrate_step(c, &version, err);
		if (rc)
			return rc;
	}
	if (version != from)
		cache_log(&c->options, CACHE_LOG_INFO,
			  "cache '%s': schema migrated from version %lld to %lld",
			  c->path, (long long)from, (long long)version);
	return 0;
}
