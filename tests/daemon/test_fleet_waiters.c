/*
 * test_fleet_waiters.c: a fetch waiting on a job of a shared queue
 * (PostgreSQL) that another daemon holds ends when the job is cancelled
 * there, as it does for a job this daemon holds (docs/protocol.md,
 * "fetch"), not at its timeout. The other daemon is the database itself:
 * the test takes the job's lease, then cancels the job, behind the
 * daemon's back.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "fixture.h"
#include "pg_fixture.h"

/* Runs "fmt" (one %lld: the job) on database "uri"; the rows it changed. */
static int change(const char *uri, const char *fmt, json_int_t job)
{
	PGconn *conn = PQconnectdb(uri);
	PGresult *res;
	char sql[256];
	int n;

	snprintf(sql, sizeof(sql), fmt, (long long)job);
	res = PQexec(conn, sql);
	cr_assert_eq(PQresultStatus(res), PGRES_COMMAND_OK, "%s: %s", sql,
		     PQerrorMessage(conn));
	n = atoi(PQcmdTuples(res));
	PQclear(res);
	PQfinish(conn);
	return n;
}

/* The reply to request "id", skipping events; NULL when none came
 * within 8 s. */
static json_t *fetch_reply(conn *c, int id)
{
	json_t *reply;

	while ((reply = conn_read(c, 8000))) {
		if (!json_object_get(reply, "event") &&
		    json_integer_value(json_object_get(reply, "id")) == id)
			return reply;
		json_decref(reply);
	}
	return NULL;
}

static const char *const daemon_args[] = {"--lease",           "1.5", "--jobs", "1",
					  "--compile-workers", "1",   NULL};

Test(fleet_waiters, a_job_cancelled_on_another_daemon_fails_the_fetches_here,
     .init = pg_fixture_start, .fini = pg_fixture_stop, .timeout = 120)
{
	char uri[128], *text;
	json_t *reply, *request;
	json_int_t job;
	fixture f;
	conn c;

	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "waiters", uri, sizeof(uri)),
		     0, "%s", uri);
	setenv("TUNED_WORKER", getenv("SCRIPTED_WORKER"), 1);
	setenv("SCRIPTED_TIMES", "hash", 1);
	setenv("SCRIPTED_DELAY_MS", "200", 1);
	fixture_init(&f);
	snprintf(f.cache, sizeof(f.cache), "%s", uri);
	fixture_start(&f, daemon_args);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	text = example_text("softmax_scores_small");
	reply = conn_call(&c, "submit",
			  json_pack("{s:s, s:f, s:i}", "graph", text, "budget", 30.0,
				    "trials", 4000));
	free(text);
	job = json_integer_value(json_object_get(result_of(reply), "id"));
	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);

	cr_assert_eq(change(uri,
			    "UPDATE jobs SET claimed_by = 'a daemon "
			    "elsewhere', lease_until = 1e12 WHERE id = %lld",
			    job),
		     1);
	for (int i = 0; i < 100 && !fixture_log_contains(&f, "another daemon "
							     "holds the job now");
	     i++)
		usleep(100 * 1000);
	cr_assert(fixture_log_contains(&f, "another daemon holds the job now"));
	request = json_pack("{s:i, s:s, s:{s:I, s:i, s:i}}", "id", 9, "op", "fetch",
			    "params", "job", job, "min_version", 1000, "timeout_ms",
			    20000);
	text = json_dumps(request, JSON_COMPACT);
	conn_send(&c, text);
	conn_send(&c, "\n");
	free(text);
	json_decref(request);
	cr_assert_eq(change(uri,
			    "UPDATE jobs SET state = 'cancelled', error = "
			    "'cancelled' WHERE id = %lld",
			    job),
		     1);
	reply = fetch_reply(&c, 9);
	cr_expect_not_null(reply, "the fetch still waits 8 s after the job was "
				  "cancelled on another daemon");
	if (reply)
		cr_expect_str_eq(error_code(reply), "cancelled", "%s",
				 json_dumps(reply, 0));
	json_decref(reply);
	conn_close(&c);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
}
