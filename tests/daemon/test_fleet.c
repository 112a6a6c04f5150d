/*
 * test_fleet.c: several daemons on one PostgreSQL database tune together
 * (docs/operations.md, "Several daemons on one database"). Three daemons,
 * each on its own socket, share a private server's database; jobs for four
 * keys are submitted to different daemons; the daemon working on a job is
 * killed with SIGKILL mid-work and started again. Every acknowledged job
 * ends done (the killed one's finished by whichever daemon claimed it once
 * its lease ran out), every daemon shows every job, and the database is
 * consistent: each key's versions numbered 1..n with no number twice,
 * each faster than the one before, none failing its checksum, no job left
 * open, and no plan measured twice on the device. A cancel on one daemon
 * reaches the daemon that holds the job, and a daemon whose lease was
 * taken stops its job, which another daemon finishes. The workers are the
 * scripted one (made-up times), so that the tests take seconds.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "fixture.h"
#include "pg_server.h"

#define DAEMONS 3
#define KEYS 4

static pg_server server;

static void start_server(void)
{
	int rc = pg_server_start(&server);

	if (rc > 0)
		cr_skip_test("%s", server.why);
	cr_assert_eq(rc, 0, "%s", server.why);
}

static void stop_server(void)
{
	pg_server_stop(&server);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The first field of "sql"'s first row on database "uri", as text into
 * "out" ("" when no row). */
static void query_text(const char *uri, const char *sql, char *out, size_t size)
{
	PGconn *conn = PQconnectdb(uri);
	PGresult *res = PQexec(conn, sql);

	cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", sql,
		     PQerrorMessage(conn));
	snprintf(out, size, "%s", PQntuples(res) ? PQgetvalue(res, 0, 0) : "");
	PQclear(res);
	PQfinish(conn);
}

static long long query_count(const char *uri, const char *sql)
{
	char text[64];

	query_text(uri, sql, text, sizeof(text));
	return atoll(text);
}

/* The daemons: the scripted worker, each measurement taking "delay_ms",
 * leases of 1.5 s, one job at a time each, so that the jobs spread over
 * them. */
static const char *const daemon_args[] = {"--lease", "1.5", "--jobs", "1",
					  "--compile-workers", "1", NULL};

static void start_fleet(fixture *f, int n, const char *uri, const char *delay_ms)
{
	setenv("TUNED_WORKER", getenv("SCRIPTED_WORKER"), 1);
	setenv("SCRIPTED_TIMES", "hash", 1);
	setenv("SCRIPTED_DELAY_MS", delay_ms, 1);
	for (int i = 0; i < n; i++) {
		fixture_init(&f[i]);
		snprintf(f[i].cache, sizeof(f[i].cache), "%s", uri);
		fixture_start(&f[i], daemon_args);
	}
}

static json_int_t submit(const fixture *f, const char *example, double budget)
{
	char *text = example_text(example);
	json_t *reply;
	json_int_t job;
	conn c;

	cr_assert(conn_open(&c, f->socket));
	conn_hello(&c);
	reply = conn_call(&c, "submit", json_pack("{s:s, s:f, s:i}", "graph", text,
						  "budget", budget, "trials", 4000));
	job = json_integer_value(json_object_get(result_of(reply), "id"));
	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	conn_close(&c);
	free(text);
	return job;
}

/* Which of the "n" daemons of "f" holds the lease that "sql" names
 * (claimed_by), waited for; -1 when none did within 30 s. */
static int holder(const fixture *f, int n, const char *uri, const char *sql)
{
	char holder[256], pid[32];
	double start = now_s();

	while (now_s() - start < 30) {
		query_text(uri, sql, holder, sizeof(holder));
		for (int i = 0; holder[0] && i < n; i++) {
			snprintf(pid, sizeof(pid), " pid %d ", (int)f[i].pid);
			if (strstr(holder, pid))
				return i;
		}
		usleep(50 * 1000);
	}
	return -1;
}

/* The daemon that holds a job running with a few trials done. */
static int working_daemon(const fixture *f, const char *uri)
{
	return holder(f, DAEMONS, uri, "SELECT claimed_by FROM jobs WHERE state = "
		      "'running' AND trials >= 3 AND lease_until > extract(epoch "
		      "FROM clock_timestamp()) ORDER BY id LIMIT 1");
}

/* Waits until the jobs "ids" (a SQL list) are all done or failed: the
 * seconds it took, or -1 after "timeout_s". */
static double wait_finished(const char *uri, const char *ids, int n, int timeout_s)
{
	char sql[512];
	double start = now_s();

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM jobs WHERE id IN (%s) AND "
		 "state IN ('done', 'failed', 'cancelled')", ids);
	while (now_s() - start < timeout_s) {
		if (query_count(uri, sql) == n)
			return now_s() - start;
		usleep(100 * 1000);
	}
	return -1;
}

static bool any_log_contains(const fixture *f, const char *text)
{
	for (int i = 0; i < DAEMONS; i++)
		if (fixture_log_contains(&f[i], text))
			return true;
	return false;
}

static void print_logs(const fixture *f, int n)
{
	for (int i = 0; i < n; i++)
		fixture_print_log(&f[i]);
}

/* Every daemon shows every job, done; each key's version is served. */
static void expect_all_done_everywhere(const fixture *f, const json_int_t *jobs)
{
	for (int i = 0; i < DAEMONS; i++) {
		conn c;

		cr_assert(conn_open(&c, f[i].socket));
		conn_hello(&c);
		for (int k = 0; k < KEYS; k++) {
			json_t *reply = wait_job(&c, jobs[k], 10);
			const char *state = json_string_value(json_object_get(
				result_of(reply), "state"));

			cr_expect_str_eq(state ? state : "(none)", "done",
					 "daemon %d, job %lld: %s", i,
					 (long long)jobs[k], json_dumps(reply, 0));
			json_decref(reply);
		}
		conn_close(&c);
	}
}

/* What the database holds once the fleet is done. */
static void expect_consistent(const char *uri)
{
	cr_expect_eq(query_count(uri, "SELECT count(DISTINCT graph) FROM plans"), KEYS,
		     "every key has a version");
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM (SELECT 1 FROM plans "
				 "GROUP BY graph, device, codegen, version HAVING "
				 "count(*) > 1) d"), 0, "a version number published twice");
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM (SELECT 1 FROM plans "
				 "GROUP BY graph, device, codegen HAVING max(version) "
				 "<> count(*)) d"), 0, "versions not numbered 1..n");
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM plans p JOIN plans q "
				 "USING (graph, device, codegen) WHERE q.version > "
				 "p.version AND q.median_ms >= p.median_ms"), 0,
		     "a version not faster than the one before it");
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM plans WHERE bad IS NOT "
				 "NULL OR checksum IS NULL"), 0);
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM jobs WHERE state IN "
				 "('queued', 'running')"), 0, "a job left open");
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM jobs WHERE device IS "
				 "NULL"), 0);
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM (SELECT 1 FROM trials "
				 "GROUP BY graph, device, codegen, plan HAVING "
				 "count(*) > 1) d"), 0, "a plan measured twice");
}

/* Each key's version, fetched through a daemon (which checks its
 * checksum), is the latest in the database. */
static void expect_versions_served(const fixture *f, const char *uri)
{
	PGconn *db = PQconnectdb(uri);
	PGresult *res = PQexec(db, "SELECT graph, max(version) FROM plans GROUP BY "
			       "graph");
	conn c;

	cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(db));
	cr_assert(conn_open(&c, f->socket));
	conn_hello(&c);
	for (int i = 0; i < PQntuples(res); i++) {
		json_t *reply = conn_call(&c, "fetch", json_pack("{s:s}", "key",
								 PQgetvalue(res, i, 0)));

		cr_expect_eq(json_integer_value(json_object_get(result_of(reply),
								"version")),
			     atoll(PQgetvalue(res, i, 1)), "%s", json_dumps(reply, 0));
		json_decref(reply);
	}
	conn_close(&c);
	PQclear(res);
	PQfinish(db);
}

Test(fleet, daemons_share_one_database_and_survive_a_kill,
     .init = start_server, .fini = stop_server, .timeout = 180)
{
	static const char *const examples[KEYS] = {
		"softmax_scores_small", "ln_residual_small", "gpt3_mlp_small",
		"lstm_cell_small"};
	fixture f[DAEMONS];
	json_int_t jobs[KEYS];
	char uri[128], ids[128] = "";
	int victim;
	double took;

	cr_assert_eq(pg_server_create_db(server.uri, "fleet", uri, sizeof(uri)), 0,
		     "%s", uri);
	start_fleet(f, DAEMONS, uri, "40");
	for (int k = 0; k < KEYS; k++) {
		jobs[k] = submit(&f[k % DAEMONS], examples[k], 4.0);
		snprintf(ids + strlen(ids), sizeof(ids) - strlen(ids), "%s%lld",
			 k ? ", " : "", (long long)jobs[k]);
	}
	victim = working_daemon(f, uri);
	cr_assert_geq(victim, 0, "no daemon got to work on a job");
	cr_expect_eq(fixture_stop(&f[victim], SIGKILL, NULL), 128 + SIGKILL);
	fixture_start(&f[victim], daemon_args);
	took = wait_finished(uri, ids, KEYS, 50);
	if (took < 0)
		print_logs(f, DAEMONS);
	cr_assert_geq(took, 0, "the jobs did not end in 50 s");
	expect_all_done_everywhere(f, jobs);
	expect_consistent(uri);
	expect_versions_served(&f[(victim + 1) % DAEMONS], uri);
	if (getenv("FLEET_LOGS"))
		print_logs(f, DAEMONS);
	cr_expect(any_log_contains(f, "from a daemon whose lease ran out"),
		  "no daemon took over the killed one's job");
	for (int i = 0; i < DAEMONS; i++) {
		cr_expect_eq(fixture_stop(&f[i], SIGTERM, NULL), 0, "daemon %d", i);
		fixture_cleanup(&f[i]);
	}
}

/* Which of the "n" daemons holds job "job" running, with a few trials. */
static int holder_of(const fixture *f, int n, const char *uri, json_int_t job)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "SELECT claimed_by FROM jobs WHERE id = %lld AND "
		 "state = 'running' AND trials >= 2", (long long)job);
	return holder(f, n, uri, sql);
}

static bool log_soon(const fixture *f, const char *text, int timeout_s)
{
	double start = now_s();

	while (now_s() - start < timeout_s) {
		if (fixture_log_contains(f, text))
			return true;
		usleep(50 * 1000);
	}
	return false;
}

static json_t *cancel(const fixture *f, json_int_t job)
{
	json_t *reply;
	conn c;

	cr_assert(conn_open(&c, f->socket));
	conn_hello(&c);
	reply = conn_call(&c, "cancel", json_pack("{s:I}", "job", job));
	conn_close(&c);
	return reply;
}

/* A job cancelled on the daemon that does not hold it ends on the one
 * that does, and stays cancelled; a daemon whose lease another took
 * (behind its back, as if the database had been out of its reach past
 * --lease) stops the job and writes nothing more of it, and once the
 * lease is free again a daemon claims the job and finishes it. */
Test(fleet, a_cancel_and_a_lost_lease_reach_the_daemon_that_holds_the_job,
     .init = start_server, .fini = stop_server, .timeout = 180)
{
	fixture f[2];
	char uri[128], sql[256];
	json_int_t a, b;
	json_t *reply;
	long long trials;
	int ha, hb;

	cr_assert_eq(pg_server_create_db(server.uri, "fleet", uri, sizeof(uri)), 0,
		     "%s", uri);
	start_fleet(f, 2, uri, "40");
	a = submit(&f[0], "softmax_scores_small", 6.0);
	b = submit(&f[0], "ln_residual_small", 6.0);
	ha = holder_of(f, 2, uri, a);
	hb = holder_of(f, 2, uri, b);
	cr_assert(ha >= 0 && hb >= 0 && ha != hb, "holders %d and %d", ha, hb);

	reply = cancel(&f[1 - ha], a);
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "cancelled", "%s", json_dumps(reply, 0));
	json_decref(reply);
	cr_expect(log_soon(&f[ha], "cancelled through another daemon", 10));

	snprintf(sql, sizeof(sql), "UPDATE jobs SET claimed_by = 'a daemon "
		 "elsewhere', lease_until = 1e12 WHERE id = %lld RETURNING id",
		 (long long)b);
	cr_assert_eq(query_count(uri, sql), b);
	cr_expect(log_soon(&f[hb], "another daemon holds the job now", 10));
	snprintf(sql, sizeof(sql), "SELECT trials FROM jobs WHERE id = %lld",
		 (long long)b);
	trials = query_count(uri, sql);
	usleep(1500 * 1000);
	cr_expect_eq(query_count(uri, sql), trials, "the daemon that lost the "
		     "lease wrote the job's progress");
	snprintf(sql, sizeof(sql), "UPDATE jobs SET claimed_by = NULL WHERE id = "
		 "%lld RETURNING id", (long long)b);
	cr_assert_eq(query_count(uri, sql), b);
	snprintf(sql, sizeof(sql), "%lld", (long long)b);
	if (wait_finished(uri, sql, 1, 40) < 0 || getenv("FLEET_LOGS"))
		print_logs(f, 2);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM jobs WHERE (id = %lld AND "
		 "state = 'cancelled') OR (id = %lld AND state = 'done')",
		 (long long)a, (long long)b);
	cr_expect_eq(query_count(uri, sql), 2);
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(fixture_stop(&f[i], SIGTERM, NULL), 0, "daemon %d", i);
		fixture_cleanup(&f[i]);
	}
}

/* A daemon that lost a job's lease, then claims it again (it was freed
 * while the runner still wound the job down: a measurement takes 1.5 s),
 * finishes it: the end of its first run does not cancel the second. */
Test(fleet, a_job_lost_and_claimed_again_by_one_daemon_is_finished,
     .init = start_server, .fini = stop_server, .timeout = 120)
{
	char uri[128], sql[256];
	json_int_t job;
	fixture f;

	cr_assert_eq(pg_server_create_db(server.uri, "fleet", uri, sizeof(uri)), 0,
		     "%s", uri);
	start_fleet(&f, 1, uri, "1500");
	job = submit(&f, "softmax_scores_small", 4.0);
	cr_assert_eq(holder_of(&f, 1, uri, job), 0);
	usleep(700 * 1000); /* within a measurement */
	snprintf(sql, sizeof(sql), "UPDATE jobs SET claimed_by = 'a daemon "
		 "elsewhere', lease_until = 1e12 WHERE id = %lld RETURNING id",
		 (long long)job);
	cr_assert_eq(query_count(uri, sql), job);
	cr_expect(log_soon(&f, "another daemon holds the job now", 10));
	snprintf(sql, sizeof(sql), "UPDATE jobs SET claimed_by = NULL WHERE id = "
		 "%lld RETURNING id", (long long)job);
	cr_assert_eq(query_count(uri, sql), job);
	snprintf(sql, sizeof(sql), "%lld", (long long)job);
	if (wait_finished(uri, sql, 1, 40) < 0 || getenv("FLEET_LOGS"))
		print_logs(&f, 1);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM jobs WHERE id = %lld AND "
		 "state = 'done'", (long long)job);
	cr_expect_eq(query_count(uri, sql), 1);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
}
