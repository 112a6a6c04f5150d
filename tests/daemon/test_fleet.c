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
 * taken stops its job, which another daemon finishes. And the fleet of
 * issue 25: four daemons, three keys tuning, two training runs of eight
 * ranks fetching every key with their run at each step, one daemon
 * killed mid-work: every rank of a run gets one version per key at each
 * step, a run that advances moves forward, and a watcher on one daemon
 * hears the versions another publishes. The workers are the scripted one
 * (made-up times), so that the tests take seconds.
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
#include "pg_fixture.h"

#define DAEMONS 3
#define KEYS 4

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
static const char *const daemon_args[] = {"--lease",           "1.5", "--jobs", "1",
					  "--compile-workers", "1",   NULL};

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

/* Submits examples/EXAMPLE.json to daemon "f": its job id, and its key
 * into "key" (may be NULL). */
static json_int_t submit(const fixture *f, const char *example, double budget,
			 char key[65])
{
	char *text = example_text(example);
	json_t *reply;
	json_int_t job;
	conn c;

	cr_assert(conn_open(&c, f->socket));
	conn_hello(&c);
	reply = conn_call(&c, "submit",
			  json_pack("{s:s, s:f, s:i}", "graph", text, "budget", budget,
				    "trials", 4000));
	job = json_integer_value(json_object_get(result_of(reply), "id"));
	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	if (key)
		snprintf(key, 65, "%s",
			 json_string_value(json_object_get(result_of(reply), "key")));
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

/* Which of the "n" daemons holds a job running with a few trials done. */
static int working_daemon(const fixture *f, int n, const char *uri)
{
	return holder(f, n, uri,
		      "SELECT claimed_by FROM jobs WHERE state = "
		      "'running' AND trials >= 3 AND lease_until > extract(epoch "
		      "FROM clock_timestamp()) ORDER BY id LIMIT 1");
}

/* Waits until the jobs "ids" (a SQL list) are all done or failed: the
 * seconds it took, or -1 after "timeout_s". */
static double wait_finished(const char *uri, const char *ids, int n, int timeout_s)
{
	char sql[512];
	double start = now_s();

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM jobs WHERE id IN (%s) AND "
		 "state IN ('done', 'failed', 'cancelled')",
		 ids);
	while (now_s() - start < timeout_s) {
		if (query_count(uri, sql) == n)
			return now_s() - start;
		usleep(100 * 1000);
	}
	return -1;
}

static bool any_log_contains(const fixture *f, int n, const char *text)
{
	for (int i = 0; i < n; i++)
		if (fixture_log_contains(&f[i], text))
			return true;
	return false;
}

static void print_logs(const fixture *f, int n)
{
	for (int i = 0; i < n; i++)
		fixture_print_log(&f[i]);
}

/* Each of the "n" daemons shows each of the "n_jobs" jobs, done. */
static void expect_all_done_everywhere(const fixture *f, int n, const json_int_t *jobs,
				       int n_jobs)
{
	for (int i = 0; i < n; i++) {
		conn c;

		cr_assert(conn_open(&c, f[i].socket));
		conn_hello(&c);
		for (int k = 0; k < n_jobs; k++) {
			json_t *reply = wait_job(&c, jobs[k], 10);
			const char *state = json_string_value(
				json_object_get(result_of(reply), "state"));

			cr_expect_str_eq(state ? state : "(none)", "done",
					 "daemon %d, job %lld: %s", i,
					 (long long)jobs[k], json_dumps(reply, 0));
			json_decref(reply);
		}
		conn_close(&c);
	}
}

/* What the database holds once the fleet is done tuning "keys" keys. */
static void expect_consistent(const char *uri, int keys)
{
	cr_expect_eq(query_count(uri, "SELECT count(DISTINCT graph) FROM plans"), keys,
		     "every key has a version");
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM (SELECT 1 FROM plans "
				      "GROUP BY graph, device, codegen, version HAVING "
				      "count(*) > 1) d"),
		     0, "a version number published twice");
	cr_expect_eq(query_count(uri,
				 "SELECT count(*) FROM (SELECT 1 FROM plans "
				 "GROUP BY graph, device, codegen HAVING max(version) "
				 "<> count(*)) d"),
		     0, "versions not numbered 1..n");
	cr_expect_eq(query_count(uri,
				 "SELECT count(*) FROM plans p JOIN plans q "
				 "USING (graph, device, codegen) WHERE q.version > "
				 "p.version AND q.median_ms >= p.median_ms"),
		     0, "a version not faster than the one before it");
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM plans WHERE bad IS NOT "
				      "NULL OR checksum IS NULL"),
		     0);
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM jobs WHERE state IN "
				      "('queued', 'running')"),
		     0, "a job left open");
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM jobs WHERE device IS "
				      "NULL"),
		     0);
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM (SELECT 1 FROM trials "
				      "GROUP BY graph, device, codegen, plan HAVING "
				      "count(*) > 1) d"),
		     0, "a plan measured twice");
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
		json_t *reply = conn_call(&c, "fetch",
					  json_pack("{s:s}", "key",
						    PQgetvalue(res, i, 0)));

		cr_expect_eq(json_integer_value(
				     json_object_get(result_of(reply), "version")),
			     atoll(PQgetvalue(res, i, 1)), "%s", json_dumps(reply, 0));
		json_decref(reply);
	}
	conn_close(&c);
	PQclear(res);
	PQfinish(db);
}

Test(fleet, daemons_share_one_database_and_survive_a_kill, .init = pg_fixture_start,
     .fini = pg_fixture_stop, .timeout = 180)
{
	static const char *const examples[KEYS] = {"softmax_scores_small",
						   "ln_residual_small",
						   "gpt3_mlp_small", "lstm_cell_small"};
	fixture f[DAEMONS];
	json_int_t jobs[KEYS];
	char uri[128], ids[128] = "";
	int victim;
	double took;

	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "fleet", uri, sizeof(uri)), 0,
		     "%s", uri);
	start_fleet(f, DAEMONS, uri, "40");
	for (int k = 0; k < KEYS; k++) {
		jobs[k] = submit(&f[k % DAEMONS], examples[k], 4.0, NULL);
		snprintf(ids + strlen(ids), sizeof(ids) - strlen(ids), "%s%lld",
			 k ? ", " : "", (long long)jobs[k]);
	}
	victim = working_daemon(f, DAEMONS, uri);
	cr_assert_geq(victim, 0, "no daemon got to work on a job");
	cr_expect_eq(fixture_stop(&f[victim], SIGKILL, NULL), 128 + SIGKILL);
	fixture_start(&f[victim], daemon_args);
	took = wait_finished(uri, ids, KEYS, 50);
	if (took < 0)
		print_logs(f, DAEMONS);
	cr_assert_geq(took, 0, "the jobs did not end in 50 s");
	expect_all_done_everywhere(f, DAEMONS, jobs, KEYS);
	expect_consistent(uri, KEYS);
	expect_versions_served(&f[(victim + 1) % DAEMONS], uri);
	if (getenv("FLEET_LOGS"))
		print_logs(f, DAEMONS);
	cr_expect(any_log_contains(f, DAEMONS, "from a daemon whose lease ran out"),
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

	snprintf(sql, sizeof(sql),
		 "SELECT claimed_by FROM jobs WHERE id = %lld AND "
		 "state = 'running' AND trials >= 2",
		 (long long)job);
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

/* The trials daemon "f" said it measured helping other daemons' jobs
 * ("helped with N trials"), waited for up to "timeout_s"; -1 if it never
 * said so. */
static int helped_trials(const fixture *f, int timeout_s)
{
	char line[1024];

	if (!log_soon(f, "helped with ", timeout_s) ||
	    !fixture_log_line(f, "helped with ", line, sizeof(line)))
		return -1;
	return atoi(strstr(line, "helped with ") + strlen("helped with "));
}

/* One key on two daemons: the one that does not hold the job helps its
 * search, so more trials are recorded than the holder measured, none of
 * a plan measured before, and the helper stops when the job ends. */
Test(fleet, an_idle_daemon_helps_the_search_of_a_job_another_holds,
     .init = pg_fixture_start, .fini = pg_fixture_stop, .timeout = 120)
{
	fixture f[2];
	char uri[128], sql[256], ids[32];
	json_int_t job;
	int owner, helper, helped;
	long long owned;

	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "help", uri, sizeof(uri)), 0,
		     "%s", uri);
	start_fleet(f, 2, uri, "40");
	job = submit(&f[0], "gpt3_mlp_small", 6.0, NULL);
	owner = holder_of(f, 2, uri, job);
	cr_assert_geq(owner, 0, "no daemon got to work on the job");
	helper = 1 - owner;
	snprintf(ids, sizeof(ids), "%lld", (long long)job);
	if (wait_finished(uri, ids, 1, 60) < 0)
		print_logs(f, 2);
	cr_assert(log_soon(&f[helper], "helps the daemon that holds it", 1),
		  "the idle daemon did not help");
	helped = helped_trials(&f[helper], 10);
	snprintf(sql, sizeof(sql),
		 "SELECT trials FROM jobs WHERE id = %lld AND state = 'done'",
		 (long long)job);
	owned = query_count(uri, sql);
	if (getenv("FLEET_LOGS"))
		print_logs(f, 2);
	cr_expect_gt(helped, 0, "the helper measured nothing");
	cr_expect_gt(owned, 0, "the job is not done, or measured nothing");
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM trials"), owned + helped,
		     "the trials recorded are not the holder's and the helper's");
	cr_expect(fixture_log_contains(&f[helper], "stops helping: the job ended"));
	cr_expect_eq(query_count(uri, "SELECT count(*) FROM (SELECT 1 FROM trials "
				      "GROUP BY graph, device, codegen, plan HAVING "
				      "count(*) > 1) d"),
		     0, "a plan measured twice");
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(fixture_stop(&f[i], SIGTERM, NULL), 0, "daemon %d", i);
		fixture_cleanup(&f[i]);
	}
}

/* Runs "sql" on connection "conn", asserted to succeed. */
static void run_sql(PGconn *conn, const char *sql)
{
	PGresult *res = PQexec(conn, sql);

	cr_assert_eq(PQresultStatus(res), PGRES_COMMAND_OK, "%s: %s", sql,
		     PQerrorMessage(conn));
	PQclear(res);
}

/* The writer of the daemon that holds a job is backed up for longer than
 * --lease (another connection locks the trials, so its next trial waits
 * 4 s): its leases are renewed on a connection of their own, so a daemon
 * started meanwhile does not take the job, which ends on its holder. */
Test(fleet, a_writer_backed_up_past_the_lease_keeps_its_jobs, .init = pg_fixture_start,
     .fini = pg_fixture_stop, .timeout = 120)
{
	fixture f[2];
	char uri[128], ids[32], sql[128];
	json_int_t job;
	PGconn *lock;

	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "backed_up", uri, sizeof(uri)),
		     0, "%s", uri);
	start_fleet(f, 1, uri, "40");
	job = submit(&f[0], "gpt3_mlp_small", 8.0, NULL);
	cr_assert_eq(holder_of(f, 1, uri, job), 0, "daemon 0 does not hold its job");
	lock = PQconnectdb(uri);
	run_sql(lock, "BEGIN");
	run_sql(lock, "LOCK TABLE trials IN EXCLUSIVE MODE");
	usleep(1500 * 1000);
	fixture_init(&f[1]);
	snprintf(f[1].cache, sizeof(f[1].cache), "%s", uri);
	fixture_start(&f[1], daemon_args);
	usleep(2500 * 1000);
	run_sql(lock, "COMMIT");
	PQfinish(lock);
	snprintf(ids, sizeof(ids), "%lld", (long long)job);
	cr_expect_geq(wait_finished(uri, ids, 1, 60), 0, "the job did not end");
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM jobs WHERE id = %lld AND state = 'done'",
		 (long long)job);
	cr_expect_eq(query_count(uri, sql), 1);
	if (getenv("FLEET_LOGS"))
		print_logs(f, 2);
	cr_expect(!fixture_log_contains(&f[1], "from a daemon whose lease ran out"),
		  "the new daemon took the job of a daemon whose writer waited");
	cr_expect(!fixture_log_contains(&f[0], "lease ran out"),
		  "daemon 0 lost its lease");
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(fixture_stop(&f[i], SIGTERM, NULL), 0, "daemon %d", i);
		fixture_cleanup(&f[i]);
	}
}

/* A job cancelled on the daemon that does not hold it ends on the one
 * that does, and stays cancelled; a daemon whose lease another took
 * (behind its back, as if the database had been out of its reach past
 * --lease) stops the job and writes nothing more of it, and once the
 * lease is free again a daemon claims the job and finishes it. */
Test(fleet, a_cancel_and_a_lost_lease_reach_the_daemon_that_holds_the_job,
     .init = pg_fixture_start, .fini = pg_fixture_stop, .timeout = 180)
{
	fixture f[2];
	char uri[128], sql[256];
	json_int_t a, b;
	json_t *reply;
	long long trials;
	int ha, hb;

	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "fleet", uri, sizeof(uri)), 0,
		     "%s", uri);
	start_fleet(f, 2, uri, "40");
	a = submit(&f[0], "softmax_scores_small", 6.0, NULL);
	b = submit(&f[0], "ln_residual_small", 6.0, NULL);
	ha = holder_of(f, 2, uri, a);
	hb = holder_of(f, 2, uri, b);
	cr_assert(ha >= 0 && hb >= 0 && ha != hb, "holders %d and %d", ha, hb);

	reply = cancel(&f[1 - ha], a);
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "cancelled", "%s", json_dumps(reply, 0));
	json_decref(reply);
	cr_expect(log_soon(&f[ha], "cancelled through another daemon", 10));

	snprintf(sql, sizeof(sql),
		 "UPDATE jobs SET claimed_by = 'a daemon "
		 "elsewhere', lease_until = 1e12 WHERE id = %lld RETURNING id",
		 (long long)b);
	cr_assert_eq(query_count(uri, sql), b);
	cr_expect(log_soon(&f[hb], "another daemon holds the job now", 10));
	snprintf(sql, sizeof(sql), "SELECT trials FROM jobs WHERE id = %lld",
		 (long long)b);
	trials = query_count(uri, sql);
	usleep(1500 * 1000);
	cr_expect_eq(query_count(uri, sql), trials,
		     "the daemon that lost the "
		     "lease wrote the job's progress");
	snprintf(sql, sizeof(sql),
		 "UPDATE jobs SET claimed_by = NULL WHERE id = "
		 "%lld RETURNING id",
		 (long long)b);
	cr_assert_eq(query_count(uri, sql), b);
	snprintf(sql, sizeof(sql), "%lld", (long long)b);
	if (wait_finished(uri, sql, 1, 40) < 0 || getenv("FLEET_LOGS"))
		print_logs(f, 2);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM jobs WHERE (id = %lld AND "
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
     .init = pg_fixture_start, .fini = pg_fixture_stop, .timeout = 120)
{
	char uri[128], sql[256];
	json_int_t job;
	fixture f;

	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "fleet", uri, sizeof(uri)), 0,
		     "%s", uri);
	start_fleet(&f, 1, uri, "1500");
	job = submit(&f, "softmax_scores_small", 4.0, NULL);
	cr_assert_eq(holder_of(&f, 1, uri, job), 0);
	usleep(700 * 1000); /* within a measurement */
	snprintf(sql, sizeof(sql),
		 "UPDATE jobs SET claimed_by = 'a daemon "
		 "elsewhere', lease_until = 1e12 WHERE id = %lld RETURNING id",
		 (long long)job);
	cr_assert_eq(query_count(uri, sql), job);
	cr_expect(log_soon(&f, "another daemon holds the job now", 10));
	snprintf(sql, sizeof(sql),
		 "UPDATE jobs SET claimed_by = NULL WHERE id = "
		 "%lld RETURNING id",
		 (long long)job);
	cr_assert_eq(query_count(uri, sql), job);
	snprintf(sql, sizeof(sql), "%lld", (long long)job);
	if (wait_finished(uri, sql, 1, 40) < 0 || getenv("FLEET_LOGS"))
		print_logs(&f, 1);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM jobs WHERE id = %lld AND "
		 "state = 'done'",
		 (long long)job);
	cr_expect_eq(query_count(uri, sql), 1);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
}

/* Training runs on a fleet (issue 25): four daemons, three keys tuning,
 * two runs of eight ranks each, rank r of a run talking to daemon r % 4. */
#define FLEET_DAEMONS 4
#define RUN_KEYS 3
#define RUNS 2
#define RANKS 8

typedef struct fleet_run {
	const char *name;
	conn ranks[RANKS];
	int pinned[RUN_KEYS]; /* the version the run has, 0 before its first fetch */
	int advanced;         /* pins its advances moved to a newer version */
} fleet_run;

static fixture fleet[FLEET_DAEMONS];
static fleet_run runs[RUNS] = {{.name = "run-a"}, {.name = "run-b"}};
static conn watchers[FLEET_DAEMONS];
static char run_keys[RUN_KEYS][65];
static int heard[FLEET_DAEMONS][RUN_KEYS]; /* the newest version event */
static int heard_from_another[RUN_KEYS];   /* version events with no job */

static int rank_daemon(int rank)
{
	return rank % FLEET_DAEMONS;
}

/* The fleet too, when an assertion ended the test early (left running,
 * its daemons would hold the test's output open). */
static void stop_fleet_and_server(void)
{
	for (int i = 0; i < FLEET_DAEMONS; i++)
		if (fleet[i].pid > 0)
			fixture_cleanup(&fleet[i]);
	pg_fixture_stop();
}

/* Connects "c" to daemon "f", with hello. */
static void connect_to(conn *c, const fixture *f)
{
	cr_assert(conn_open(c, f->socket), "cannot connect to %s", f->socket);
	conn_hello(c);
}

/* Connects the watcher of daemon "i" and watches every key (heard[]: the
 * version it has now). */
static void watch_keys(int i)
{
	connect_to(&watchers[i], &fleet[i]);
	for (int k = 0; k < RUN_KEYS; k++) {
		json_t *reply = conn_call(&watchers[i], "watch",
					  json_pack("{s:s}", "key", run_keys[k]));

		cr_assert_not_null(result_of(reply), "%s", json_dumps(reply, 0));
		heard[i][k] = (int)json_integer_value(
			json_object_get(result_of(reply), "version"));
		json_decref(reply);
	}
}

/* The version events the watchers got so far, into heard[]. */
static void drain_watchers(void)
{
	for (int i = 0; i < FLEET_DAEMONS; i++) {
		json_t *line;

		while ((line = conn_read(&watchers[i], 5))) {
			json_t *data = json_object_get(line, "data");
			const char *key = json_string_value(
				json_object_get(data, "key"));
			int version = (int)json_integer_value(
				json_object_get(data, "version"));

			for (int k = 0; key && k < RUN_KEYS; k++) {
				if (
					strcmp(json_string_value(json_object_get(line, "event")) ?:
						       "",
					       "version") ||
					strcmp(key, run_keys[k]))
					continue;
				if (version > heard[i][k])
					heard[i][k] = version;
				if (json_is_null(json_object_get(data, "job")))
					heard_from_another[k]++;
			}
			json_decref(line);
		}
	}
}

/* A rank's fetch of "key" with its run (waiting for a first version, on a
 * daemon that may not have heard of the key's job yet):
 * the version, asserted served (the daemon serves only a version whose
 * checksum holds) and to name the run. */
static int rank_fetch(conn *c, const char *key, const char *run)
{
	json_t *reply = conn_call(c, "fetch",
				  json_pack("{s:s, s:s, s:i}", "key", key, "run", run,
					    "timeout_ms", 30000));
	json_t *result = result_of(reply);
	int version;

	cr_assert_not_null(result, "fetch of %s by %s: %s", key, run,
			   json_dumps(reply, 0));
	cr_expect_str_eq(json_string_value(json_object_get(result, "run")) ?: "", run);
	version = (int)json_integer_value(json_object_get(result, "version"));
	json_decref(reply);
	return version;
}

/* Run "r" advances (on the daemon of its rank 0): each pin moved is to a
 * version at least the one it had, from the one it had. */
static void advance_run(fleet_run *r)
{
	json_t *reply = conn_call(&r->ranks[0], "advance",
				  json_pack("{s:s}", "run", r->name));
	json_t *pins = json_object_get(result_of(reply), "pins"), *pin;
	size_t i;

	cr_assert_not_null(result_of(reply), "advance of %s: %s", r->name,
			   json_dumps(reply, 0));
	json_array_foreach(pins, i, pin) {
		const char *key = json_string_value(json_object_get(pin, "key"));
		int version = (int)json_integer_value(json_object_get(pin, "version"));
		int previous = (int)json_integer_value(
			json_object_get(pin, "previous"));

		for (int k = 0; k < RUN_KEYS; k++) {
			if (strcmp(key, run_keys[k]))
				continue;
			cr_expect_eq(previous, r->pinned[k], "%s, key %d: %s", r->name,
				     k, json_dumps(pin, 0));
			cr_expect_geq(version, r->pinned[k], "%s went back on key %d",
				      r->name, k);
			r->advanced += version > r->pinned[k];
			r->pinned[k] = version;
		}
	}
	json_decref(reply);
}

/* One step of training: run-a advances every third step, then every rank
 * of each run fetches every key with its run (a few ms apart, so that
 * versions land within a step) and must get the run's one version. */
static void train_step(int step)
{
	if (step % 3 == 2)
		advance_run(&runs[0]);
	for (int r = 0; r < RUNS; r++) {
		for (int i = 0; i < RANKS; i++) {
			for (int k = 0; k < RUN_KEYS; k++) {
				int v = rank_fetch(&runs[r].ranks[i], run_keys[k],
						   runs[r].name);

				if (!runs[r].pinned[k])
					runs[r].pinned[k] = v;
				cr_expect_eq(v, runs[r].pinned[k],
					     "step %d: rank %d of %s got version %d of "
					     "key %d, the run has %d",
					     step, i, runs[r].name, v, k,
					     runs[r].pinned[k]);
			}
			usleep(2000);
		}
	}
	drain_watchers();
}

/* The daemon "victim", killed with SIGKILL and started again; its ranks
 * and watcher connect again. */
static void kill_and_restart(int victim)
{
	cr_expect_eq(fixture_stop(&fleet[victim], SIGKILL, NULL), 128 + SIGKILL);
	fixture_start(&fleet[victim], daemon_args);
	for (int r = 0; r < RUNS; r++)
		for (int i = 0; i < RANKS; i++)
			if (rank_daemon(i) == victim) {
				conn_close(&runs[r].ranks[i]);
				connect_to(&runs[r].ranks[i], &fleet[victim]);
			}
	conn_close(&watchers[victim]);
	watch_keys(victim);
}

/* Once the jobs are done: run-a advances to each key's latest version and
 * its ranks get it; run-b, which never advanced, is behind on some key
 * (else its pins held nothing back); every watcher that lived through the
 * kill heard each key's latest version, and some of these events crossed
 * daemons (no job: published by another daemon). */
static void expect_runs_end_at_latest(const char *uri, int victim, int step)
{
	char sql[256];
	int behind = 0, crossed = 0;

	advance_run(&runs[0]);
	train_step(step);
	cr_expect_gt(runs[0].advanced, 0, "no advance of run-a moved a key");
	for (int k = 0; k < RUN_KEYS; k++) {
		int latest;

		snprintf(sql, sizeof(sql),
			 "SELECT max(version) FROM plans WHERE "
			 "graph = '%s'",
			 run_keys[k]);
		latest = (int)query_count(uri, sql);
		cr_expect_eq(runs[0].pinned[k], latest,
			     "run-a after its last advance, "
			     "key %d",
			     k);
		cr_expect_leq(runs[1].pinned[k], latest);
		behind += runs[1].pinned[k] < latest;
		for (int i = 0; i < FLEET_DAEMONS; i++)
			if (i != victim)
				cr_expect_eq(heard[i][k], latest,
					     "the watcher on "
					     "daemon %d, key %d",
					     i, k);
		crossed += heard_from_another[k];
	}
	cr_expect_gt(behind, 0, "no version landed after run-b's first fetch");
	cr_expect_gt(crossed, 0, "no version event crossed daemons");
	cr_log_info("run-a moved %d pin(s); run-b behind on %d key(s); %d version "
		    "event(s) crossed daemons",
		    runs[0].advanced, behind, crossed);
}

Test(fleet, training_runs_keep_one_version_per_step_across_a_fleet_and_a_kill,
     .init = pg_fixture_start, .fini = stop_fleet_and_server, .timeout = 240)
{
	static const char *const examples[RUN_KEYS] = {"softmax_scores_small",
						       "ln_residual_small",
						       "gpt3_mlp_small"};
	json_int_t jobs[RUN_KEYS];
	char uri[128], ids[128] = "", sql[256];
	double start = now_s();
	int victim = -1, step;

	cr_assert_eq(pg_server_create_db(pg_fixture.uri, "fleet", uri, sizeof(uri)), 0,
		     "%s", uri);
	start_fleet(fleet, FLEET_DAEMONS, uri, "40");
	for (int k = 0; k < RUN_KEYS; k++) {
		jobs[k] = submit(&fleet[k], examples[k], 4.0, run_keys[k]);
		snprintf(ids + strlen(ids), sizeof(ids) - strlen(ids), "%s%lld",
			 k ? ", " : "", (long long)jobs[k]);
	}
	for (int i = 0; i < FLEET_DAEMONS; i++)
		watch_keys(i);
	for (int r = 0; r < RUNS; r++)
		for (int i = 0; i < RANKS; i++)
			connect_to(&runs[r].ranks[i], &fleet[rank_daemon(i)]);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM jobs WHERE id IN (%s) AND "
		 "state IN ('done', 'failed', 'cancelled')",
		 ids);
	for (step = 0; step < 6 || query_count(uri, sql) < RUN_KEYS; step++) {
		cr_assert_lt(now_s() - start, 90, "the jobs did not end in 90 s");
		train_step(step);
		if (step == 1) {
			victim = working_daemon(fleet, FLEET_DAEMONS, uri);
			cr_assert_geq(victim, 0, "no daemon got to work on a job");
			kill_and_restart(victim);
		}
	}
	expect_all_done_everywhere(fleet, FLEET_DAEMONS, jobs, RUN_KEYS);
	expect_consistent(uri, RUN_KEYS);
	expect_versions_served(&fleet[(victim + 1) % FLEET_DAEMONS], uri);
	expect_runs_end_at_latest(uri, victim, step);
	if (getenv("FLEET_LOGS"))
		print_logs(fleet, FLEET_DAEMONS);
	cr_log_info("%d steps in %.1f s", step, now_s() - start);
	for (int r = 0; r < RUNS; r++)
		for (int i = 0; i < RANKS; i++)
			conn_close(&runs[r].ranks[i]);
	for (int i = 0; i < FLEET_DAEMONS; i++) {
		conn_close(&watchers[i]);
		cr_expect_eq(fixture_stop(&fleet[i], SIGTERM, NULL), 0, "daemon %d", i);
		fixture_cleanup(&fleet[i]);
	}
}
