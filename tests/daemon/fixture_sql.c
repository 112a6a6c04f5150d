/*
 * fixture_sql.c: raw SQLite on a daemon's cache, behind its back, for the
 * tests that link it (with sqlite); declared in fixture.h.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>

#include "fixture.h"

void fixture_sql(const char *path, const char *statement)
{
	sqlite3 *db;

	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	cr_assert_eq(sqlite3_exec(db, statement, NULL, NULL, NULL), SQLITE_OK, "%s: %s",
		     statement, sqlite3_errmsg(db));
	sqlite3_close(db);
}

long long fixture_sql_count(const char *path, const char *query)
{
	sqlite3 *db;
	sqlite3_stmt *stmt;
	long long n = -1;

	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	cr_assert_eq(sqlite3_prepare_v2(db, query, -1, &stmt, NULL), SQLITE_OK, "%s: %s",
		     query, sqlite3_errmsg(db));
	if (sqlite3_step(stmt) == SQLITE_ROW)
		n = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	sqlite3_close(db);
	return n;
}

struct sqlite3 *fixture_sql_lock(const char *path)
{
	sqlite3 *db;

	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	cr_assert_eq(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK,
		     "cannot lock %s: %s", path, sqlite3_errmsg(db));
	return db;
}

void fixture_sql_unlock(struct sqlite3 *db)
{
	cr_assert_eq(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK, "%s",
		     sqlite3_errmsg(db));
	sqlite3_close(db);
}
