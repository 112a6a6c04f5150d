/*
 * prune.c: keeping the cache small, and checkpoints; both on the writer.
 *
 * A prune is one write transaction: deletions by age, then by size, then
 * devices nothing refers to, then PRAGMA incremental_vacuum (the file is
 * created with auto_vacuum = INCREMENTAL) to give the freed pages back;
 * after the commit a truncating checkpoint shrinks the file itself.
 *
 * The size of the data is the pages in use, (page_count - freelist_count)
 * * page_size, read inside the transaction; it is what the file will
 * measure after the vacuum. Deleting a row frees a page only when the page
 * empties, so size deletions go in small steps and stop as soon as the
 * data fits.
 */
#include "cache_int.h"

/* Deletes everything created before ?1; graphs go when not used since. */
static const char *const age_steps[] = {
	"DELETE FROM trials WHERE created_at < ?1",
	"DELETE FROM plans WHERE created_at < ?1",
	"DELETE FROM quarantine WHERE created_at < ?1",
	"DELETE FROM graphs WHERE last_used < ?1",
};

/* Each deletes a little, oldest first (rowid order is insertion order);
 * each is repeated until the data fits or it deletes nothing. */
static const char *const size_steps[] = {
	/* trials: a sixteenth of them, at least 16 */
	"DELETE FROM trials WHERE id IN (SELECT id FROM trials ORDER BY id "
	"LIMIT max(16, (SELECT count(*) FROM trials) / 16))",
	/* one plan version that is not the latest of its key */
	"DELETE FROM plans WHERE id = (SELECT p.id FROM plans p WHERE "
	"p.version < (SELECT max(q.version) FROM plans q WHERE q.graph = "
	"p.graph AND q.device = p.device AND q.codegen = p.codegen) ORDER BY "
	"p.id LIMIT 1)",
	/* the least recently used graph, with its plans, trials, quarantine */
	"DELETE FROM graphs WHERE key = (SELECT key FROM graphs ORDER BY "
	"last_used, first_seen, rowid LIMIT 1)",
};

static const char rows_sql[] =
	"SELECT (SELECT count(*) FROM trials), (SELECT count(*) FROM plans), "
	"(SELECT count(*) FROM graphs), (SELECT count(*) FROM quarantine), "
	"(SELECT count(*) FROM devices)";

/* Rows per table, in the order of cache_prune_stats. */
static int count_rows(cache *c, int64_t rows[5], cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer, rows_sql, &stmt, err);
	if (rc)
		return rc;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		for (int i = 0; i < 5; i++)
			rows[i] = sqlite3_column_int64(stmt, i);
		rc = 0;
	} else {
		rc = cache_db_error(c->writer, rc, err, "cannot prune the cache");
	}
	sqlite3_finalize(stmt);
	return rc;
}

static int used_bytes(cache *c, int64_t *bytes, cache_error *err)
{
	return cache_query_int(c->writer, "SELECT ((SELECT page_count FROM "
			       "pragma_page_count) - (SELECT freelist_count "
			       "FROM pragma_freelist_count)) * (SELECT "
			       "page_size FROM pragma_page_size)", bytes, err);
}

/* The database's size, pages times page size: the file's size once the
 * wal is checkpointed. */
static int db_bytes(cache *c, int64_t *bytes, cache_error *err)
{
	return cache_query_int(c->writer, "SELECT page_count * page_size FROM "
			       "pragma_page_count, pragma_page_size", bytes, err);
}

/* Runs "sql" with ?1 bound to "arg"; *changes gets the rows deleted. */
static int delete_rows(cache *c, const char *sql, int64_t arg, int *changes,
		       cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer, sql, &stmt, err);
	if (rc)
		return rc;
	if (sqlite3_bind_parameter_count(stmt) > 0)
		sqlite3_bind_int64(stmt, 1, arg);
	rc = cache_run(c->writer, stmt, "cannot prune the cache", err);
	*changes = rc == 0 ? sqlite3_changes(c->writer) : 0;
	return rc;
}

static int prune_age(cache *c, int64_t cutoff, cache_error *err)
{
	int changes, rc = 0;

	for (size_t i = 0; rc == 0 && i < sizeof(age_steps) / sizeof(*age_steps); i++)
		rc = delete_rows(c, age_steps[i], cutoff, &changes, err);
	return rc;
}

static int prune_size(cache *c, int64_t max_bytes, cache_error *err)
{
	int64_t used;
	int changes = 1, rc;

	rc = used_bytes(c, &used, err);
	for (size_t i = 0; rc == 0 && i < sizeof(size_steps) / sizeof(*size_steps); i++) {
		for (changes = 1; rc == 0 && changes > 0 && used > max_bytes;) {
			rc = delete_rows(c, size_steps[i], 0, &changes, err);
			if (rc == 0)
				rc = used_bytes(c, &used, err);
		}
	}
	return rc;
}

/* The body of cache_prune, inside its transaction. */
static int prune(cache *c, int64_t max_age_s, int64_t max_bytes,
		 cache_prune_stats *st, cache_error *err)
{
	int64_t before[5], after[5];
	int changes, rc;

	rc = count_rows(c, before, err);
	if (rc == 0)
		rc = db_bytes(c, &st->bytes_before, err);
	if (rc == 0 && max_age_s > 0)
		rc = prune_age(c, cache_now(c) - max_age_s, err);
	if (rc == 0 && max_bytes > 0)
		rc = prune_size(c, max_bytes, err);
	if (rc == 0)
		rc = delete_rows(c, "DELETE FROM devices WHERE id NOT IN (SELECT "
				 "device FROM plans UNION SELECT device FROM "
				 "trials UNION SELECT device FROM quarantine)",
				 0, &changes, err);
	if (rc == 0)
		rc = count_rows(c, after, err);
	if (rc == 0)
		rc = cache_exec(c->writer, "PRAGMA incremental_vacuum",
				"cannot shrink the cache", err);
	if (rc)
		return rc;
	st->trials = before[0] - after[0];
	st->plans = before[1] - after[1];
	st->graphs = before[2] - after[2];
	st->quarantine = before[3] - after[3];
	st->devices = before[4] - after[4];
	return 0;
}

int cache_prune_check(cache *c, int64_t max_age_s, int64_t max_bytes,
		      cache_error *err)
{
	int rc = cache_check_owner(c, "prune the cache", err);

	if (rc == 0 && (max_age_s < 0 || max_bytes < 0)) {
		rc = CACHE_EINVAL;
		cache_set_error(err, rc, "cannot prune the cache: negative %s",
				max_age_s < 0 ? "age" : "size");
	}
	return rc;
}

int cache_sqlite_prune(__cache_keep cache *c, int64_t max_age_s, int64_t max_bytes,
		cache_prune_stats *stats, cache_error *err)
{
	cache_prune_stats st = { 0 };
	int rc;

	rc = cache_prune_check(c, max_age_s, max_bytes, err);
	if (rc)
		return rc;
	rc = cache_begin(c, err);
	if (rc)
		return rc;
	rc = prune(c, max_age_s, max_bytes, &st, err);
	rc = cache_end(c, rc, err);
	if (rc)
		return rc;
	rc = db_bytes(c, &st.bytes_after, err);
	if (rc)
		return rc;
	if (stats)
		*stats = st;
	/* A reader in the way only delays the shrinking of the file. */
	rc = cache_sqlite_checkpoint(c, err);
	return rc == CACHE_EBUSY ? 0 : rc;
}

int cache_sqlite_checkpoint(__cache_keep cache *c, cache_error *err)
{
	int rc;

	rc = sqlite3_wal_checkpoint_v2(c->writer, "main",
				       SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
	if (rc == SQLITE_BUSY) {
		cache_set_error(err, CACHE_EBUSY, "checkpoint of cache '%s' is "
				"incomplete: a reader holds the wal", c->path);
		return CACHE_EBUSY;
	}
	if (rc != SQLITE_OK)
		return cache_db_error(c->writer, rc, err, "cannot checkpoint "
				      "the cache");
	return 0;
}
