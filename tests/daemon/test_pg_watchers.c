/*
 * test_pg_watchers.c: a real tuned on a PostgreSQL cache tells its
 * watchers, and the fetches waiting, of the versions another writer
 * publishes into the database: the test, writing as the engine does (the
 * version's row, then its notice on channel tuned_versions, in one
 * transaction), stands for a second daemon (two daemons on one database
 * come with the shared job queue). Another device's version is not
 * told, and neither is a notice that is no version. The server is a
 * private one (tests/cache/pg_server.h); skipped without PostgreSQL.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "cache.h"
#include "fixture.h"
#include "pg_fixture.h"

/* Notices published in one transaction: more than the daemon reads in a
 * turn. */
#define BURST 300

static fixture f;

/* The daemon too, when an assertion ended the test early (left running,
 * it would hold the test's output open). */
static void stop_server(void)
{
	if (f.pid > 0) {
		fixture_stop(&f, SIGKILL, NULL);
		fixture_cleanup(&f);
	}
	pg_fixture_stop();
}

/* Runs "sql" on database "uri", asserted to succeed. */
static void run_sql(const char *uri, const char *sql)
{
	PGconn *conn = PQconnectdb(uri);
	PGresult *res = PQexec(conn, sql);

	cr_assert(PQresultStatus(res) == PGRES_COMMAND_OK ||
			  PQresultStatus(res) == PGRES_TUPLES_OK,
		  "%s: %s", sql, PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
}

/* Another writer publishes the next version of "key" (a copy of its
 * latest, on "device" or the latest's own when NULL), as the engine does:
 * the row and its notice, committed together. */
static void publish_elsewhere(const char *uri, const char *key, const char *device)
{
	char sql[2048], on[200] = "d.signature";

	if (device)
		snprintf(on, sizeof(on), "'%s'", device);
	snprintf(sql, sizeof(sql),
		 "BEGIN;"
		 "INSERT INTO plans (graph, device, codegen, version, plan, sources, "
		 "binaries, launch, median_ms, spread_ms, found_by, created_at, "
		 "checksum) "
		 "SELECT graph, device, codegen, version + 1, plan, sources, binaries, "
		 "launch, median_ms / 2, spread_ms, 'another daemon', created_at, "
		 "checksum FROM plans WHERE graph = '%s' ORDER BY version DESC LIMIT 1;"
		 "SELECT pg_notify('" CACHE_VERSIONS_CHANNEL "', json_build_object("
		 "'key', p.graph, 'device', %s, 'codegen', p.codegen, 'version', "
		 "p.version)::text) FROM plans p JOIN devices d ON d.id = p.device "
		 "WHERE p.graph = '%s' ORDER BY p.version DESC LIMIT 1;"
		 "COMMIT",
		 key, on, key);
	run_sql(uri, sql);
}

/* Another writer publishes, in one transaction, a version of each of
 * "count" keys nobody watches (their notices only), then the next
 * version of "key" (its row and its notice). */
static void publish_burst_elsewhere(const char *uri, const char *key, int count)
{
	char sql[4096];

	snprintf(sql, sizeof(sql),
		 "BEGIN;"
		 "SELECT pg_notify('" CACHE_VERSIONS_CHANNEL "', json_build_object("
		 "'key', encode(sha256(g::text::bytea), 'hex'), 'device', "
		 "d.signature, 'codegen', p.codegen, 'version', 1)::text) FROM "
		 "(SELECT * FROM plans WHERE graph = '%s' ORDER BY version DESC "
		 "LIMIT 1) p JOIN devices d ON d.id = p.device, "
		 "generate_series(1, %d) g ORDER BY g;"
		 "INSERT INTO plans (graph, device, codegen, version, plan, sources, "
		 "binaries, launch, median_ms, spread_ms, found_by, created_at, "
		 "checksum) "
		 "SELECT graph, device, codegen, version + 1, plan, sources, binaries, "
		 "launch, median_ms / 2, spread_ms, 'another daemon', created_at, "
		 "checksum FROM plans WHERE graph = '%s' ORDER BY version DESC LIMIT 1;"
		 "SELECT pg_notify('" CACHE_VERSIONS_CHANNEL "', json_build_object("
		 "'key', p.graph, 'device', d.signature, 'codegen', p.codegen, "
		 "'version', p.version)::text) FROM plans p JOIN devices d ON d.id = "
		 "p.device WHERE p.graph = '%s' ORDER BY p.version DESC LIMIT 1;"
		 "COMMIT",
		 key, count, key, key);
	run_sql(uri, sql);
}

/* The next version event of "c" within 30 s (other events skipped). */
static json_t *next_version_event(conn *c)
{
	for (;;) {
		json_t *line = conn_read(c, 30000);

		cr_assert_not_null(line, "no version event within 30 s");
		if (!strcmp(json_string_value(json_object_get(line, "event")) ?: "",
			    "version"))
			return line;
		json_decref(line);
	}
}

Test(pg_watchers, a_watcher_hears_the_versions_another_writer_publishes,
     .init = pg_fixture_start, .fini = stop_server, .timeout = 300)
{
	char *text = example_text("softmax_scores_small"), key[80], request[200];
	json_t *reply, *event, *data;
	json_int_t job;
	int tuned;
	conn c, watcher, waiter;

	fixture_init(&f);
	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "tuned", f.cache,
					 sizeof(f.cache)),
		     0, "%s", f.cache);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	reply = conn_call(&c, "submit",
			  json_pack("{s:s, s:f}", "graph", text, "budget", 2.0));
	job = json_integer_value(json_object_get(result_of(reply), "id"));
	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	reply = wait_job(&c, job, 240);
	cr_assert_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "done", "%s", json_dumps(reply, 0));
	snprintf(key, sizeof(key), "%s",
		 json_string_value(json_object_get(result_of(reply), "key")));
	json_decref(reply);

	cr_assert(conn_open(&watcher, f.socket));
	conn_hello(&watcher);
	reply = conn_call(&watcher, "watch", json_pack("{s:s}", "key", key));
	tuned = (int)json_integer_value(json_object_get(result_of(reply), "version"));
	cr_assert_geq(tuned, 1, "%s", json_dumps(reply, 0));
	json_decref(reply);

	/* a notice of another device's version (its row is this one's version 2),
	 * and a notice that is no version: neither is told */
	publish_elsewhere(f.cache, key, "cuda: another device");
	run_sql(f.cache, "SELECT pg_notify('" CACHE_VERSIONS_CHANNEL "', 'hello')");
	publish_elsewhere(f.cache, key, NULL);
	event = next_version_event(&watcher);
	data = json_object_get(event, "data");
	cr_expect_str_eq(json_string_value(json_object_get(data, "key")), key);
	cr_expect_eq(json_integer_value(json_object_get(data, "version")), tuned + 2,
		     "%s", json_dumps(event, 0));
	cr_expect(json_is_real(json_object_get(data, "median_ms")), "%s",
		  json_dumps(event, 0));
	cr_expect(json_is_null(json_object_get(data, "job")), "%s",
		  json_dumps(event, 0));
	json_decref(event);

	/* a fetch waiting for a newer version is answered by one from elsewhere */
	cr_assert(conn_open(&waiter, f.socket));
	conn_hello(&waiter);
	snprintf(request, sizeof(request),
		 "{\"id\":9,\"op\":\"fetch\",\"params\":"
		 "{\"key\":\"%s\",\"min_version\":%d,\"timeout_ms\":30000}}\n",
		 key, tuned + 3);
	conn_send(&waiter, request);
	publish_elsewhere(f.cache, key, NULL);
	reply = conn_read(&waiter, 30000);
	cr_assert_not_null(result_of(reply), "%s", json_dumps(reply, 0));
	cr_expect_eq(json_integer_value(json_object_get(result_of(reply), "version")),
		     tuned + 3);
	json_decref(reply);
	event = next_version_event(&watcher);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(event, "data"),
							"version")),
		     tuned + 3);
	json_decref(event);
	snprintf(request, sizeof(request), "version %d: published by another daemon",
		 tuned + 3);
	cr_expect(fixture_log_contains(&f, request));

	/* more notices at once than the daemon reads in a turn, none of them
	 * told to a client (no write turns the loop again): the last is told
	 * at once all the same, not left queued until other traffic comes */
	publish_burst_elsewhere(f.cache, key, BURST);
	event = conn_read(&watcher, 5000);
	cr_assert_not_null(event, "a version published after %d others was not told",
			   BURST);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(event, "data"),
							"version")),
		     tuned + 4, "%s", json_dumps(event, 0));
	json_decref(event);

	conn_close(&waiter);
	conn_close(&watcher);
	conn_close(&c);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
	f.pid = 0;
	free(text);
}
