/*
 * pg_prune.c: keeping a PostgreSQL cache small, by age, as prune.c does
 * for SQLite: one write transaction deletes everything created before the
 * limit, the graphs not used since (with all they hold), then the devices
 * nothing refers to. Pruning by size is not yet on PostgreSQL: the
 * server gives freed space back when it vacuums, not at the delete, so
 * "until the data fits" needs another measure than SQLite's pages.
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

/* Rows per table, in the order of cache_prune_stats, and the database's
 * size. */
static int count_rows(cache *c, int64_t rows[5], int64_t *bytes,
		      cache_error *err)
{
	PGresult *res = NULL;
	int rc;

	rc = pg_run(c, c->pg_writer, "SELECT (SELECT count(*) FROM trials), "
		    "(SELECT count(*) FROM plans), (SELECT count(*) FROM graphs), "
		    "(SELECT count(*) FROM quarantine), (SELECT count(*) FROM "
		    "devices), pg_database_size(current_database())", NULL, &res,
		    "cannot prune the cache", err);
	for (int i = 0; rc == 0 && i < 5; i++)
		rows[i] = pg_int_at(res, 0, i);
	if (rc == 0)
		*bytes = pg_int_at(res, 0, 5);
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
	if (rc >= 0)
		rc = pg_change(c, "DELETE FROM devices WHERE id NOT IN (SELECT "
			       "device FROM plans UNION SELECT device FROM trials "
			       "UNION SELECT device FROM quarantine)", NULL,
			       "cannot prune the cache", err);
	return rc < 0 ? rc : 0;
}

/* The body of cache_prune, inside its transaction. */
static int prune(cache *c, int64_t max_age_s, cache_prune_stats *st,
		 cache_error *err)
{
	int64_t before[5], after[5];
	int rc;

	rc = count_rows(c, before, &st->bytes_before, err);
	if (rc == 0 && max_age_s > 0)
		rc = prune_age(c, cache_now(c) - max_age_s, err);
	if (rc == 0)
		rc = count_rows(c, after, &st->bytes_after, err);
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
	if (max_bytes > 0) {
		cache_set_error(err, CACHE_EINVAL, "cannot prune the cache: "
				"pruning by size is not yet on PostgreSQL (prune "
				"by age, or use a SQLite cache)");
		return CACHE_EINVAL;
	}
	rc = pg_begin(c, err);
	if (rc)
		return rc;
	rc = pg_end(c, prune(c, max_age_s, &st, err), err);
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
