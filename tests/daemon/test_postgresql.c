/*
 * test_postgresql.c: a real tuned on a PostgreSQL cache (--cache
 * postgresql://...): a job from submit to fetch, its version in the
 * database, and a daemon started again on the database after the first
 * stopped serving it (several at once: test_fleet.c); tunectl's import
 * into the database and its prune by size. The
 * server is a private one (tests/cache/pg_server.h); the test is skipped
 * where no PostgreSQL is installed.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "fixture.h"
#include "pg_fixture.h"

/* The rows of "sql" on database "uri", a count. */
static long long count_rows(const char *uri, const char *sql)
{
	PGconn *conn = PQconnectdb(uri);
	PGresult *res = PQexec(conn, sql);
	long long n = PQresultStatus(res) == PGRES_TUPLES_OK ?
		      atoll(PQgetvalue(res, 0, 0)) : -1;

	cr_assert_geq(n, 0, "%s: %s", sql, PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
	return n;
}

static json_t *fetch_key(conn *c, const char *key)
{
	return conn_call(c, "fetch", json_pack("{s:s}", "key", key));
}

Test(postgresql, a_daemon_tunes_into_the_database_and_another_serves_it,
     .init = pg_fixture_start, .fini = pg_fixture_stop, .timeout = 300)
{
	json_t *reply;
	fixture f;
	conn c;
	char *key;

	fixture_init(&f);
	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "tuned", f.cache,
					 sizeof(f.cache)),
		     0, "%s", f.cache);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	key = tune_example(&c, "softmax_scores_small", 240);
	reply = fetch_key(&c, key);
	cr_expect_eq(json_integer_value(json_object_get(result_of(reply), "version")),
		     1, "%s", json_dumps(reply, 0));
	cr_expect_gt(json_array_size(json_object_get(result_of(reply), "sources")), 0);
	json_decref(reply);
	conn_close(&c);
	if (fixture_stop(&f, SIGTERM, NULL) != 0)
		fixture_print_log(&f);
	cr_expect(!fixture_log_contains(&f, "postgresql://"), "the log shows "
		  "the connection string");
	cr_expect_eq(count_rows(f.cache, "SELECT count(*) FROM plans"), 1);
	cr_expect_eq(count_rows(f.cache, "SELECT count(*) FROM jobs WHERE state = "
				"'done'"), 1);

	/* Another daemon on the database serves the version. */
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	reply = fetch_key(&c, key);
	cr_expect_eq(json_integer_value(json_object_get(result_of(reply), "version")),
		     1, "%s", json_dumps(reply, 0));
	json_decref(reply);
	conn_close(&c);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
	free(key);
}

/* tunectl cache prune with "max_bytes"; the keys it removed. */
static json_int_t prune_to(const fixture *f, const char *max_bytes)
{
	int status;
	json_t *out = fixture_tunectl_json(f, &status,
					   (const char *const[]){"cache", "prune",
								 "--max-bytes",
								 max_bytes, NULL});
	json_int_t removed = json_integer_value(json_object_get(out, "removed"));

	cr_assert_eq(status, 0, "cache prune --max-bytes %s: %s", max_bytes,
		     json_dumps(out, 0));
	cr_assert(json_is_integer(json_object_get(out, "removed")), "%s",
		  json_dumps(out, 0));
	json_decref(out);
	return removed;
}

/* What a daemon on a SQLite file tuned, exported with tunectl, is
 * imported by a daemon on PostgreSQL, which serves it; tunectl cache
 * prune --max-bytes then bounds the database, and the daemon goes on. */
Test(postgresql, an_export_is_imported_served_and_pruned_by_size,
     .init = pg_fixture_start, .fini = pg_fixture_stop, .timeout = 300)
{
	char file[200], *key, *output;
	json_t *reply;
	fixture a, b;
	conn ca, cb;

	fixture_init(&a);
	fixture_start(&a, NULL);
	cr_assert(conn_open(&ca, a.socket));
	conn_hello(&ca);
	key = tune_example(&ca, "softmax_scores_small", 240);
	snprintf(file, sizeof(file), "%s/export.json", a.dir);
	cr_assert_eq(fixture_tunectl(&a, &output,
				     (const char *const[]){"cache", "export", key,
							   "--out", file, NULL}),
		     0, "%s", output);
	free(output);
	conn_close(&ca);
	cr_expect_eq(fixture_stop(&a, SIGTERM, NULL), 0);

	fixture_init(&b);
	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "imported", b.cache,
					 sizeof(b.cache)),
		     0, "%s", b.cache);
	fixture_start(&b, NULL);
	cr_assert(conn_open(&cb, b.socket));
	conn_hello(&cb);
	cr_expect_eq(fixture_tunectl(&b, &output,
				     (const char *const[]){"cache", "import", file,
							   NULL}),
		     0, "%s", output);
	cr_expect(strstr(output, key), "the import does not name the key: %s", output);
	free(output);
	reply = fetch_key(&cb, key);
	cr_expect_eq(json_integer_value(json_object_get(result_of(reply), "version")),
		     1, "%s", json_dumps(reply, 0));
	json_decref(reply);
	cr_expect_eq(count_rows(b.cache, "SELECT count(*) FROM plans"), 1);

	cr_expect_eq(prune_to(&b, "1G"), 0, "a limit that keeps everything");
	cr_expect_eq(prune_to(&b, "1"), 1);
	cr_expect_eq(count_rows(b.cache, "SELECT count(*) FROM graphs"), 0);
	cr_expect_eq(count_rows(b.cache, "SELECT count(*) FROM plans"), 0);
	reply = fetch_key(&cb, key);
	cr_expect_null(result_of(reply), "a pruned key is served: %s",
		       json_dumps(reply, 0));
	json_decref(reply);
	conn_close(&cb);
	cr_expect_eq(fixture_stop(&b, SIGTERM, NULL), 0);
	fixture_cleanup(&b);
	fixture_cleanup(&a);
	free(key);
}
