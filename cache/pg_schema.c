/*
 * pg_schema.c: the PostgreSQL schema, as a list of migrations applied in
 * order, as schema.c does for SQLite.
 *
 * Table tuned_schema holds one row, the number of steps applied. Step n
 * (from 1) runs in its own transaction, under an advisory lock taken for
 * the transaction, that also sets the number to n: daemons that open one
 * database at once migrate it once, and a crash leaves it at a whole
 * version. A new step is appended to "migrations"; a step, once released,
 * never changes.
 */
#include <string.h>

#include <libpq-fe.h>

#include "cache_int.h"

/* The lock the migrations take, any number of our own. */
#define MIGRATION_LOCK "7415839"

/* What SQLite's schema holds at its version 6, then its later steps. Times are unix seconds
 * (fractional in jobs). The quarantine's plans are unique by their md5:
 * a btree entry holds at most about 2700 bytes, and plans can be longer. */
static const char *const migrations[] = {
	/* 1: the first schema. */
	"CREATE TABLE graphs ("
	" key TEXT PRIMARY KEY,"
	" canonical TEXT NOT NULL,"
	" name TEXT,"
	" first_seen BIGINT NOT NULL,"
	" last_used BIGINT NOT NULL,"
	" graph TEXT);"
	"CREATE TABLE devices ("
	" id BIGSERIAL PRIMARY KEY,"
	" signature TEXT NOT NULL UNIQUE,"
	" first_seen BIGINT NOT NULL);"
	"CREATE TABLE plans ("
	" id BIGSERIAL PRIMARY KEY,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device BIGINT NOT NULL REFERENCES devices(id),"
	" codegen TEXT NOT NULL,"
	" version INTEGER NOT NULL CHECK (version >= 1),"
	" plan TEXT NOT NULL,"
	" sources TEXT NOT NULL,"
	" binaries BYTEA,"
	" launch TEXT,"
	" median_ms DOUBLE PRECISION,"
	" spread_ms DOUBLE PRECISION,"
	" found_by TEXT NOT NULL,"
	" created_at BIGINT NOT NULL,"
	" checksum TEXT,"
	" bad TEXT,"
	" UNIQUE (graph, device, codegen, version));"
	"CREATE TABLE trials ("
	" id BIGSERIAL PRIMARY KEY,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device BIGINT NOT NULL REFERENCES devices(id),"
	" codegen TEXT NOT NULL,"
	" plan TEXT NOT NULL,"
	" outcome TEXT NOT NULL CHECK (outcome IN"
	"  ('ok', 'wrong', 'compile_error', 'timeout', 'crash', 'error')),"
	" median_ms DOUBLE PRECISION,"
	" detail TEXT CHECK (octet_length(detail) <= 200)," /* DETAIL_MAX */
	" created_at BIGINT NOT NULL);"
	"CREATE INDEX trials_key ON trials (graph, device, codegen);"
	"CREATE TABLE quarantine ("
	" id BIGSERIAL PRIMARY KEY,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device BIGINT NOT NULL REFERENCES devices(id),"
	" codegen TEXT NOT NULL,"
	" plan TEXT NOT NULL,"
	" reason TEXT NOT NULL,"
	" source TEXT,"
	" created_at BIGINT NOT NULL,"
	" cause TEXT CHECK (cause IN ('crash', 'timeout')),"
	" signal INTEGER,"
	" time_limit_s DOUBLE PRECISION,"
	" seed BIGINT,"
	" graph_json TEXT,"
	" sources TEXT,"
	" worker_log TEXT);"
	"CREATE UNIQUE INDEX quarantine_plan ON quarantine"
	" (graph, device, codegen, md5(plan));"
	"CREATE TABLE jobs ("
	" id BIGINT PRIMARY KEY CHECK (id >= 1),"
	" key TEXT NOT NULL,"
	" name TEXT NOT NULL,"
	" graph TEXT NOT NULL,"
	" state TEXT NOT NULL CHECK (state IN"
	"  ('queued', 'running', 'done', 'failed', 'cancelled')),"
	" budget_s DOUBLE PRECISION NOT NULL,"
	" max_trials INTEGER NOT NULL,"
	" priority INTEGER NOT NULL,"
	" trials INTEGER NOT NULL,"
	" best_ms DOUBLE PRECISION,"
	" first_ms DOUBLE PRECISION,"
	" version INTEGER NOT NULL,"
	" error TEXT NOT NULL,"
	" created_at DOUBLE PRECISION NOT NULL,"
	" finished_at DOUBLE PRECISION,"
	" uid BIGINT);",
	/* 2: the job queue shared by the daemons of a fleet (pg_jobs.c):
	 * the device signature a job runs on, the cache instance that holds
	 * its lease and until when (the server's unix seconds), and job ids
	 * from one sequence. */
	"ALTER TABLE jobs ADD COLUMN device TEXT,"
	" ADD COLUMN claimed_by TEXT,"
	" ADD COLUMN lease_until DOUBLE PRECISION;"
	"CREATE INDEX jobs_open ON jobs (device, priority DESC, id)"
	" WHERE state IN ('queued', 'running');"
	"CREATE SEQUENCE job_ids;"
	"SELECT setval('job_ids', coalesce((SELECT max(id) FROM jobs), 0) + 1,"
	" false);",
	/* 3: the pins of training runs (SQLite's version 7). */
	"CREATE TABLE pins ("
	" run TEXT NOT NULL,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device TEXT NOT NULL,"
	" codegen TEXT NOT NULL,"
	" version INTEGER NOT NULL CHECK (version >= 1),"
	" pinned_at BIGINT NOT NULL,"
	" PRIMARY KEY (run, graph, device, codegen));",
	/* 4: the claims of the daemons that tune one key together on plans
	 * they are about to measure (pg_share.c): a plan's md5, claimed
	 * until a time (the server's unix seconds); and the trials found
	 * by their plan's md5, which a claim looks up. */
	"CREATE TABLE plan_claims ("
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device TEXT NOT NULL,"
	" codegen TEXT NOT NULL,"
	" plan_md5 TEXT NOT NULL,"
	" until DOUBLE PRECISION NOT NULL,"
	" PRIMARY KEY (graph, device, codegen, plan_md5));"
	"CREATE INDEX trials_plan ON trials (graph, codegen, md5(plan));",
};

#define MIGRATIONS ((int)(sizeof(migrations) / sizeof(migrations[0])))

/* Creates table tuned_schema where there is none: only then, for a role
 * allowed no CREATE opens an up-to-date database. */
static int make_schema_table(cache *c, cache_error *err)
{
	PGresult *res = NULL;
	int rc;

	rc = pg_run(c, c->pg_writer, "SELECT to_regclass('tuned_schema') IS NULL",
		    NULL, &res, "cannot read the schema version", err);
	if (rc == 0 && strcmp(pg_value(res, 0, 0), "t") == 0)
		rc = pg_run(c, c->pg_writer, "CREATE TABLE tuned_schema (version "
			    "INTEGER NOT NULL)", NULL, NULL,
			    "cannot make the schema version's table", err);
	PQclear(res);
	return rc;
}

/* The version under the migration lock (another daemon may have migrated
 * meanwhile), inside the step's transaction. */
static int locked_version(cache *c, int64_t *version, cache_error *err)
{
	PGresult *res = NULL;
	int rc;

	rc = pg_run(c, c->pg_writer, "SELECT pg_advisory_xact_lock("
		    MIGRATION_LOCK ")", NULL, NULL, "cannot lock the schema", err);
	if (rc == 0)
		rc = make_schema_table(c, err);
	if (rc == 0)
		rc = pg_run(c, c->pg_writer, "SELECT max(version) FROM "
			    "tuned_schema", NULL, &res,
			    "cannot read the schema version", err);
	if (rc == 0)
		*version = pg_int_at(res, 0, 0);
	PQclear(res);
	return rc;
}

/* Sets *version to the version found, and applies the next step when
 * there is one (*migrated, *version one more). */
static int migrate_step(cache *c, int64_t *version, bool *migrated,
			cache_error *err)
{
	pg_args a = {0};
	int rc;

	*migrated = false;
	rc = pg_begin(c, err);
	if (rc == 0)
		rc = locked_version(c, version, err);
	if (rc || *version >= MIGRATIONS)
		return pg_end(c, rc, err);
	rc = pg_run(c, c->pg_writer, migrations[*version], NULL, NULL,
		    "cannot migrate the cache schema", err);
	pg_int(&a, *version + 1);
	if (rc == 0)
		rc = pg_run(c, c->pg_writer, "DELETE FROM tuned_schema", NULL,
			    NULL, "cannot migrate the cache schema", err);
	if (rc == 0)
		rc = pg_run(c, c->pg_writer, "INSERT INTO tuned_schema VALUES ($1)",
			    &a, NULL, "cannot migrate the cache schema", err);
	rc = pg_end(c, rc, err);
	if (rc == 0) {
		++*version;
		*migrated = true;
	}
	return rc;
}

int pg_migrate(cache *c, cache_error *err)
{
	int64_t version = 0, from = -1;
	bool migrated;
	int rc;

	do {
		rc = migrate_step(c, &version, &migrated, err);
		if (from < 0)
			from = version - migrated;
	} while (rc == 0 && migrated && version < MIGRATIONS);
	if (rc)
		return rc;
	if (version > MIGRATIONS) {
		cache_set_error(err, CACHE_ESCHEMA, "PostgreSQL cache %s has "
				"schema version %lld, newer than this build's %d",
				c->path, (long long)version, MIGRATIONS);
		return CACHE_ESCHEMA;
	}
	if (version != from)
		cache_log(&c->options, CACHE_LOG_INFO, "PostgreSQL cache %s: "
			  "schema migrated from version %lld to %lld", c->path,
			  (long long)from, (long long)version);
	return 0;
}
