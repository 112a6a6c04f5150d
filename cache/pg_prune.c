/*
 * pg_prune.c: keeping a PostgreSQL cache small, as prune.c does for
 * SQLite: one write transaction deletes by age (everything created
 * before the limit, the graphs not used since, with all they hold), then
 * by size, then the devices nothing refers to.
 *
 * The size is the bytes of the rows as the server stores them
 * (pg_column_size: compressed and out-of-line values at their stored
 * size), read once inside the transaction, then less the bytes each
 * step's statement says it deleted. It falls with every row deleted; the
 * server's files do not (it reuses the space for new rows, and gives it
 * back when it vacuums), so SQLite's pages are no measure here.
 */
#include <libpq-fe.h>

#include "cache_int.h"

/* Deletes everything created before $1; graphs go when not used since. */
static const char *const age_steps[] = {
	"DELETE FROM trials WHERE created_at < $1",
	"DELETE FROM plans WHERE created_at < $1",
	"DELETE FROM quarantine WHERE created_at < $1",
	"DELETE FROM graphs WHERE last_used < $1",
};

/* As prune.c's: each deletes a little, oldest first, and is repeated
 * until the data fits or it deletes nothing; each gives the rows it
 * deleted and their bytes, as data_bytes counts them. */
static const char *const size_steps[] = {
	/* trials: a sixteenth of them, at least 16 */
	"WITH d AS (DELETE FROM trials WHERE id IN (SELECT id FROM trials ORDER "
	"BY id LIMIT greatest(16, (SELECT count(*) FROM trials) / 16)) "
	"RETURNING pg_column_size(trials.*) AS b) "
	"SELECT count(*), coalesce(sum(b), 0) FROM d",
	/* one plan version that is not the latest of its key */
	"WITH d AS (DELETE FROM plans WHERE id = (SELECT p.id FROM plans p WHERE "
	"p.version < (SELECT max(q.version) FROM plans q WHERE q.graph = "
	"p.graph AND q.device = p.device AND q.codegen = p.codegen) ORDER BY "
	"p.id LIMIT 1) RETURNING pg_column_size(plans.*) AS b) "
	"SELECT count(*), coalesce(sum(b), 0) FROM d",
	/* the least recently used graph, with its plans, trials, quarantine
	 * and pins (their bytes read before the delete: the statement's one
	 * snapshot); one another connection has locked (a publish of it in
	 * flight) is passed over */
	"WITH g AS (SELECT key FROM graphs ORDER BY last_used, first_seen, key "
	"LIMIT 1 FOR UPDATE SKIP LOCKED), "
	"held AS (SELECT coalesce((SELECT sum(pg_column_size(p.*)) FROM plans p "
	"WHERE p.graph IN (SELECT key FROM g)), 0) + coalesce((SELECT "
	"sum(pg_column_size(t.*)) FROM trials t WHERE t.graph IN (SELECT key "
	"FROM g)), 0) + coalesce((SELECT sum(pg_column_size(q.*)) FROM "
	"quarantine q WHERE q.graph IN (SELECT key FROM g)), 0) + "
	"coalesce((SELECT sum(pg_column_size(r.*)) FROM pins r WHERE r.graph "
	"IN (SELECT key FROM g)), 0) AS b), "
	"d AS (DELETE FROM graphs WHERE key IN (SELECT key FROM g) RETURNING "
	"pg_column_size(graphs.*) AS b) "
	"SELECT count(*), coalesce(sum(b), 0) + (SELECT b FROM held) FROM d",
};

/* Rows per table, in the order of cache_prune_stats. */
static int count_rows(cache *c, int64_t rows[5], cache_error *err)
{
	PGresult *res = NULL;
	int rc;

	rc = pg_run(c, c->pg_writer,
		    "SELECT (SELECT count(*) FROM trials), "
		    "(SELECT count(*) FROM plans), (SELECT count(*) FROM graphs), "
		    "(SELECT count(*) FROM quarantine), (SELECT count(*) FROM "
		    "devices)",
		    NULL, &res, "cannot prune the cache", err);
	for (int i = 0; rc == 0 && i < 5; i++)
		rows[i] = pg_int_at(res, 0, i);
	PQclear(res);
	return rc;
}

/* The bytes of the rows a prune deletes (pins go with their graphs). */
static const char data_bytes_sql[] =
	"SELECT sum(bytes) FROM ("
	" SELECT coalesce(sum(pg_column_size(t.*)), 0) AS bytes FROM trials t"
	" UNION ALL SELECT coalesce(sum(pg_column_size(p.*)), 0) FROM plans p"
	" UNION ALL SELECT coalesce(sum(pg_column_size(g.*)), 0) FROM graphs g"
	" UNION ALL SELECT coalesce(sum(pg_column_size(q.*)), 0) FROM quarantine q"
	" UNION ALL SELECT coalesce(sum(pg_column_size(d.*)), 0) FROM devices d"
	" UNION ALL SELECT coalesce(sum(pg_column_size(r.*)), 0) FROM pins r"
	") AS tables";

static int data_bytes(cache *c, int64_t *bytes, cache_error *err)
{
	PGresult *res = NULL;
	int rc;

	rc = pg_run(c, c->pg_writer, data_bytes_sql, NULL, &res,
		    "cannot prune the cache", err);
	if (rc == 0)
		*bytes = pg_int_at(res, 0, 0);
	PQclear(res);
	return rc;
}

static int prune_age(cache *c, int64_t cutoff, cache_error *err)
{
	pg_args a = {0};
	int rc = 0;

	pg_int(&a, cutoff);
	for (size_t i = 0; rc >= 0 && i < sizeof(age_steps) / sizeof(*age_steps); i++)
		rc = pg_change(c, age_steps[i], &a, "cannot prune the cache", err);
	return rc < 0 ? rc : 0;
}

static int delete_unused_devices(cache *c, cache_error *err)
{
	int rc = pg_change(c,
			   "DELETE FROM devices WHERE id NOT IN (SELECT "
			   "device FROM plans UNION SELECT device FROM trials "
			   "UNION SELECT device FROM quarantine)",
			   NULL, "cannot prune the cache", err);

	return rc < 0 ? rc : 0;
}

/* Claims of plans that ran out hold nothing back (pg_share.c). */
static int delete_run_out_claims(cache *c, cache_error *err)
{
	int rc = pg_change(c, "DELETE FROM plan_claims WHERE until < " SERVER_NOW, NULL,
			   "cannot prune the cache", err);

	return rc < 0 ? rc : 0;
}

/* Runs size step "sql": *rows gets the rows it deleted, *bytes theirs. */
static int size_step(cache *c, const char *sql, int64_t *rows, int64_t *bytes,
		     cache_error *err)
{
	PGresult *res = NULL;
	int rc = pg_run(c, c->pg_writer, sql, NULL, &res, "cannot prune the cache",
			err);

	if (rc == 0) {
		*rows = pg_int_at(res, 0, 0);
		*bytes = pg_int_at(res, 0, 1);
	}
	PQclear(res);
	return rc;
}

/* The data measured once, then less what each step deleted. */
static int prune_size(cache *c, int64_t max_bytes, cache_error *err)
{
	int64_t used, rows, bytes;
	int rc;

	rc = data_bytes(c, &used, err);
	for (size_t i = 0; rc == 0 && i < sizeof(size_steps) / sizeof(*size_steps);
	     i++) {
		for (rows = 1; rc == 0 && rows > 0 && used > max_bytes;) {
			rc = size_step(c, size_steps[i], &rows, &bytes, err);
			used -= rc == 0 ? bytes : 0;
		}
	}
	return rc;
}

/* The body of cache_prune, inside its transaction. */
static int prune(cache *c, int64_t max_age_s, int64_t max_bytes, cache_prune_stats *st,
		 cache_error *err)
{
	int64_t before[5], after[5];
	int rc;

	rc = count_rows(c, before, err);
	if (rc == 0)
		rc = data_bytes(c, &st->bytes_before, err);
	if (rc == 0 && max_age_s > 0)
		rc = prune_age(c, cache_now(c) - max_age_s, err);
	if (rc == 0 && max_bytes > 0)
		rc = prune_size(c, max_bytes, err);
	if (rc == 0)
		rc = delete_unused_devices(c, err);
	if (rc == 0)
		rc = delete_run_out_claims(c, err);
	if (rc == 0)
		rc = count_rows(c, after, err);
	if (rc == 0)
		rc = data_bytes(c, &st->bytes_after, err);
	if (rc)
		return rc;
	st->trials = before[0] - after[0];
	st->plans = before[1] - after[1];
	st->graphs = before[2] - after[2];
	st->quarantine = before[3] - after[3];
	st->devices = before[4] - after[4];
	return 0;
}

int cache_pg_prune(cache *c, int64_t max_age_s, int64_t max_bytes,
		   cache_prune_stats *stats, cache_error *err)
{
	cache_prune_stats st = {0};
	int rc;

	rc = cache_prune_check(c, max_age_s, max_bytes, err);
	if (rc)
		return rc;
	rc = pg_begin(c, err);
	if (rc)
		return rc;
	rc = pg_end(c, prune(c, max_age_s, max_bytes, &st, err), err);
	if (rc == 0 && stats)
		*stats = st;
	return rc;
}

/* The server checkpoints its own write-ahead log: nothing to do. */
int cache_pg_checkpoint(cache *c, cache_error *err)
{
	(void)c;
	(void)err;
	return 0;
}
