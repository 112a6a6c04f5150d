/*
 * test_postgresql.c: a real tuned on a PostgreSQL cache (--cache
 * postgresql://...): a job from submit to fetch, its version in the
 * database, and a daemon started again on the database after the first
 * stopped serving it (several at once: test_fleet.c). The
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
	char *text = example_text("softmax_scores_small"), key[80];
	json_t *reply;
	json_int_t job;
	fixture f;
	conn c;

	fixture_init(&f);
	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "tuned", f.cache,
					 sizeof(f.cache)),
		     0, "%s", f.cache);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	reply = conn_call(&c, "submit", json_pack("{s:s}", "graph", text));
	job = json_integer_value(json_object_get(result_of(reply), "id"));
	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	reply = wait_job(&c, job, 240);
	if (strcmp(json_string_value(json_object_get(result_of(reply), "state")) ?: "",
		   "done"))
		fixture_print_log(&f);
	cr_assert_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "done", "%s", json_dumps(reply, 0));
	snprintf(key, sizeof(key), "%s",
		 json_string_value(json_object_get(result_of(reply), "key")));
	json_decref(reply);
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
	free(text);
}
