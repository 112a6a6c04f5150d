/*
 * test_daemon.c: a real tuned, driven over its socket: the protocol,
 * jobs from submit to fetch, events, limits, stopping and restarting.
 */
#include <criterion/criterion.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

static json_int_t submit(conn *c, const char *example)
{
	char *text = example_text(example);
	json_t *reply = conn_call(c, "submit", json_pack("{s:s}", "graph", text));
	json_int_t job = json_integer_value(json_object_get(result_of(reply), "id"));

	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	free(text);
	return job;
}

Test(daemon, protocol_basics, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *reply;

	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	reply = conn_call(&c, "ping", NULL);
	cr_expect_str_eq(error_code(reply), "not_ready");
	json_decref(reply);
	conn_hello(&c);
	reply = conn_call(&c, "ping", NULL);
	cr_expect_not_null(result_of(reply));
	json_decref(reply);
	reply = conn_call(&c, "frobnicate", NULL);
	cr_expect_str_eq(error_code(reply), "unknown_op");
	json_decref(reply);
	conn_send(&c, "{this is not json\n");
	reply = conn_read(&c, 5000);
	cr_expect_str_eq(error_code(reply), "bad_request");
	json_decref(reply);
	reply = conn_call(&c, "status", json_pack("{s:i}", "job", 999));
	cr_expect_str_eq(error_code(reply), "not_found");
	json_decref(reply);
	reply = conn_call(&c, "submit", json_pack("{s:s}", "graph", "{\"version\": 2}"));
	cr_expect_str_eq(error_code(reply), "bad_request");
	cr_expect(strstr(json_string_value(json_object_get(json_object_get(reply, "error"),
							   "message")), "version") != NULL);
	json_decref(reply);
	conn_close(&c);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
}

Test(daemon, submit_wait_fetch_watch, .timeout = 300)
{
	fixture f;
	conn c, w;
	json_t *reply, *event;
	json_int_t job;
	const char *key;
	bool saw_end = false;

	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket) && conn_open(&w, f.socket));
	conn_hello(&c);
	conn_hello(&w);
	job = submit(&c, "softmax_scores_small");
	reply = wait_job(&c, job, 240);
	cr_assert_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "done", "%s", json_dumps(reply, 0));
	key = json_string_value(json_object_get(result_of(reply), "key"));
	json_decref(conn_call(&w, "watch", json_pack("{s:s}", "key", key)));
	json_decref(reply);
	reply = conn_call(&c, "fetch", json_pack("{s:I}", "job", job));
	cr_expect_eq(json_integer_value(json_object_get(result_of(reply), "version")), 1);
	cr_expect_gt(json_array_size(json_object_get(result_of(reply), "sources")), 0);
	cr_expect_gt(json_number_value(json_object_get(result_of(reply), "median_ms")), 0);
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "found_by")),
			 "generation 0", "the default plan");
	json_decref(reply);
	reply = conn_call(&c, "fetch", json_pack("{s:I, s:i, s:i}", "job", job,
						 "min_version", 2, "timeout_ms", 200));
	cr_expect_str_eq(error_code(reply), "timeout");
	json_decref(reply);
	/* the same graph again: the watcher sees its progress and its end */
	job = submit(&c, "softmax_scores_small");
	while (!saw_end && (event = conn_read(&w, 240000))) {
		json_t *data = json_object_get(event, "data");

		saw_end = !strcmp(json_string_value(json_object_get(event, "event")) ?: "", "job") &&
			  !strcmp(json_string_value(json_object_get(data, "state")) ?: "", "done");
		json_decref(event);
	}
	cr_expect(saw_end, "the watcher did not see the second job end");
	reply = conn_call(&c, "stats", NULL);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(
		result_of(reply), "jobs"), "done")), 2, "%s", json_dumps(reply, 0));
	cr_expect_gt(json_integer_value(json_object_get(json_object_get(
		result_of(reply), "cache"), "plans")), 0);
	json_decref(reply);
	conn_close(&c);
	conn_close(&w);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
}

Test(daemon, an_oversized_frame_closes_only_its_client, .timeout = 120)
{
	const char *const extra[] = {"--max-frame", "1024", NULL};
	char big[2100];
	fixture f;
	conn a, b;
	json_t *reply;

	fixture_init(&f);
	fixture_start(&f, extra);
	cr_assert(conn_open(&a, f.socket) && conn_open(&b, f.socket));
	conn_hello(&a);
	conn_hello(&b);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	conn_send(&a, big);
	reply = conn_read(&a, 5000);
	cr_expect_str_eq(error_code(reply), "too_large");
	json_decref(reply);
	cr_expect_null(conn_read(&a, 2000), "the connection stayed open");
	reply = conn_call(&b, "ping", NULL);
	cr_expect_not_null(result_of(reply));
	json_decref(reply);
	conn_close(&a);
	conn_close(&b);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

Test(daemon, a_client_that_stops_reading_is_closed, .timeout = 120)
{
	const char *const extra[] = {"--max-unread", "65536", "--max-in-flight", "65536",
				     NULL};
	fixture f;
	conn a, b;
	json_t *reply;

	fixture_init(&f);
	fixture_start(&f, extra);
	cr_assert(conn_open(&a, f.socket) && conn_open(&b, f.socket));
	conn_hello(&a);
	conn_hello(&b);
	for (int i = 0; i < 40000; i++)
		conn_send(&a, "{\"id\": 1, \"op\": \"ping\"}\n");
	reply = conn_call(&b, "ping", NULL);
	cr_expect_not_null(result_of(reply), "the other client was affected");
	json_decref(reply);
	reply = conn_call(&b, "stats", NULL);
	cr_expect_eq(json_integer_value(json_object_get(result_of(reply), "clients")), 1,
		     "the silent reader is still connected");
	json_decref(reply);
	conn_close(&a);
	conn_close(&b);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

typedef struct pinger {
	const char *socket;
	int requests;
	int errors;
} pinger;

static void *ping_many(void *arg)
{
	pinger *p = arg;
	conn c;

	if (!conn_open(&c, p->socket)) {
		p->errors = p->requests;
		return NULL;
	}
	json_decref(conn_call(&c, "hello", json_pack("{s:i}", "version", 1)));
	for (int i = 0; i < p->requests; i++) {
		json_t *reply = conn_call(&c, "ping", NULL);

		p->errors += !reply || !json_object_get(reply, "result");
		json_decref(reply);
	}
	conn_close(&c);
	return NULL;
}

Test(daemon, fifty_clients_a_thousand_requests_each, .timeout = 300)
{
	enum { CLIENTS = 50, REQUESTS = 1000 };
	pthread_t threads[CLIENTS];
	pinger pingers[CLIENTS];
	fixture f;
	int errors = 0;

	fixture_init(&f);
	fixture_start(&f, NULL);
	for (int i = 0; i < CLIENTS; i++) {
		pingers[i] = (pinger){f.socket, REQUESTS, 0};
		pthread_create(&threads[i], NULL, ping_many, &pingers[i]);
	}
	for (int i = 0; i < CLIENTS; i++) {
		pthread_join(threads[i], NULL);
		errors += pingers[i].errors;
	}
	cr_expect_eq(errors, 0, "%d of %d requests failed", errors, CLIENTS * REQUESTS);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

static int64_t count_of(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	int64_t n;

	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
		     sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

static void expect_integrity(const char *path)
{
	sqlite3 *db;
	sqlite3_stmt *st;

	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_expect_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
	sqlite3_finalize(st);
	sqlite3_close(db);
}

/* The job queue lives in the cache: no queue file beside it, and after a
 * crash no job names a version its key lacks, nor is done without one. */
static void expect_queue_consistent(const fixture *f, json_int_t acknowledged_job)
{
	char queue_file[200], sql[100];
	sqlite3 *db;

	snprintf(queue_file, sizeof(queue_file), "%s.jobs.json", f->cache);
	cr_expect_neq(access(queue_file, F_OK), 0, "%s is back", queue_file);
	cr_assert_eq(sqlite3_open_v2(f->cache, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM jobs WHERE id = %lld",
		 (long long)acknowledged_job);
	cr_expect_eq(count_of(db, sql), 1, "job %lld, acknowledged, is not in the cache",
		     (long long)acknowledged_job);
	cr_expect_eq(count_of(db, "SELECT count(*) FROM jobs j WHERE j.version > "
			      "coalesce((SELECT max(p.version) FROM plans p WHERE "
			      "p.graph = j.key), 0)"), 0, "a job names a version "
		     "its key lacks");
	cr_expect_eq(count_of(db, "SELECT count(*) FROM jobs j WHERE j.state = 'done' "
			      "AND NOT EXISTS (SELECT 1 FROM plans p WHERE p.graph = "
			      "j.key)"), 0, "a job is done without a version");
	sqlite3_close(db);
}

Test(daemon, sigterm_during_a_job_then_it_resumes, .timeout = 300)
{
	fixture f;
	conn c;
	json_t *reply;
	json_int_t job;
	double seconds;

	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	job = submit(&c, "bert_qkv_small");
	usleep(500000);
	conn_close(&c);
	cr_expect_eq(fixture_stop(&f, SIGTERM, &seconds), 0);
	cr_expect_lt(seconds, 10, "stopping took %.1f s", seconds);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	reply = wait_job(&c, job, 240);
	if (strcmp(json_string_value(json_object_get(result_of(reply), "state")), "done"))
		cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "done", "%s", json_dumps(reply, 0));
	json_decref(reply);
	conn_close(&c);
	fixture_stop(&f, SIGTERM, NULL);
	expect_queue_consistent(&f, job);
	fixture_cleanup(&f);
}

/* A job status said was done is done in the cache. */
static void expect_job_done(const fixture *f, json_int_t job)
{
	char sql[100];
	sqlite3 *db;

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM jobs WHERE id = %lld AND "
		 "state = 'done'", (long long)job);
	cr_assert_eq(sqlite3_open_v2(f->cache, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	cr_expect_eq(count_of(db, sql), 1, "job %lld was done, not in the cache",
		     (long long)job);
	sqlite3_close(db);
}

/* kill -9 at moments spread over a job's writes: on restart the cache is
 * whole and every version acknowledged before the kill is still there;
 * the queue agrees with the versions. */
Test(daemon, kill_9_during_writes_loses_nothing_acknowledged, .timeout = 900)
{
	fixture f;
	conn c;
	json_t *reply;
	int acknowledged = 0;

	fixture_init(&f);
	for (int round = 0; round < 20; round++) {
		fixture_start(&f, NULL);
		cr_assert(conn_open(&c, f.socket));
		conn_hello(&c);
		if (acknowledged > 0) {
			reply = conn_call(&c, "fetch", json_pack("{s:s, s:i}", "key",
				"17e2c25a8a2ad708689d897eb8fcb7f988b952e1087524c32d83be98aa4cd0d6",
				"min_version", acknowledged));
			cr_expect_not_null(result_of(reply), "round %d: version %d lost: %s",
					   round, acknowledged, json_dumps(reply, 0));
			json_decref(reply);
		}
		json_int_t job = submit(&c, "softmax_scores_small");
		if (round % 2 == 0) {
			reply = wait_job(&c, job, 240);
			acknowledged = (int)json_integer_value(json_object_get(
				json_object_get(result_of(reply), "progress"), "version"));
			json_decref(reply);
		}
		usleep((useconds_t)(round * 37000 % 400000));
		conn_close(&c);
		fixture_stop(&f, SIGKILL, NULL);
		expect_integrity(f.cache);
		expect_queue_consistent(&f, job);
		if (round % 2 == 0)
			expect_job_done(&f, job);
	}
	fixture_cleanup(&f);
}

/* A client of uid and primary gid 65534 that is a member of "group" (a
 * supplementary group, as "usermod -aG" makes one): exits 0 when its hello
 * is answered, 1 when it is refused, more when something else failed. */
static int connect_as_member(const fixture *f, gid_t group)
{
	pid_t child;
	int status;

	if ((child = fork()) == 0) {
		conn c;
		json_t *reply;

		if (setgroups(1, &group) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(3);
		if (!conn_open(&c, f->socket))
			_exit(4);
		conn_send(&c, "{\"id\": 1, \"op\": \"hello\", \"params\": {\"version\": 1}}\n");
		reply = conn_read(&c, 5000);
		if (!reply)
			_exit(5);
		_exit(json_object_get(reply, "result") ? 0 :
		      !strcmp(error_code(reply), "unauthorized") ? 1 : 6);
	}
	waitpid(child, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

Test(daemon, other_users_are_refused, .timeout = 120)
{
	const char *const extra[] = {NULL};
	fixture f;
	pid_t child;
	int status;

	if (geteuid() != 0)
		cr_skip_test("needs root to switch to another uid; skipped");
	fixture_init(&f);
	fixture_start(&f, extra);
	/* The daemon's own check must refuse others even when the folders
	 * let them through. */
	fixture_open_folders(&f);
	if ((child = fork()) == 0) {
		conn c;
		json_t *reply;

		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(3);
		if (!conn_open(&c, f.socket))
			_exit(4);
		reply = conn_read(&c, 5000);
		_exit(reply && !strcmp(error_code(reply), "unauthorized") ? 0 : 5);
	}
	waitpid(child, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "uid 65534 was not refused (status %d)", WEXITSTATUS(status));
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

Test(daemon, members_of_an_allowed_group_connect, .timeout = 120)
{
	const char *const allow[] = {"--allow-gid", "4242", NULL};
	fixture f;

	if (geteuid() != 0)
		cr_skip_test("needs root to make a client of another uid and "
			     "groups; skipped");
	fixture_init(&f);
	fixture_start(&f, allow);
	fixture_open_folders(&f);
	cr_expect_eq(connect_as_member(&f, 4242), 0,
		     "a member of the allowed group 4242 was not let in");
	cr_expect_eq(connect_as_member(&f, 4343), 1,
		     "a member of group 4343 only was not refused");
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

static const char *state_of(json_t *reply)
{
	return json_string_value(json_object_get(result_of(reply), "state"));
}

Test(daemon, cancel_a_queued_and_a_running_job, .timeout = 300)
{
	const char *const one_job[] = {"--jobs", "1", NULL};
	fixture f;
	conn c;
	json_t *reply;
	json_int_t running, queued;

	fixture_init(&f);
	fixture_start(&f, one_job);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	running = submit(&c, "bert_qkv_small");
	queued = submit(&c, "softmax_scores_small");
	reply = conn_call(&c, "cancel", json_pack("{s:I}", "job", queued));
	cr_expect_str_eq(state_of(reply), "cancelled", "%s", json_dumps(reply, 0));
	json_decref(reply);
	reply = conn_call(&c, "cancel", json_pack("{s:I}", "job", running));
	json_decref(reply);
	reply = wait_job(&c, running, 240);
	cr_expect_str_eq(state_of(reply), "cancelled", "%s", json_dumps(reply, 0));
	json_decref(reply);
	reply = conn_call(&c, "cancel", json_pack("{s:I}", "job", running));
	cr_expect_str_eq(state_of(reply), "cancelled", "an ended job is returned as it is");
	json_decref(reply);
	conn_close(&c);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* With a budget, a job searches (genetic strategy): the default plan is
 * version 1 at once, then more candidates are measured until the budget
 * is spent. */
Test(daemon, a_budget_runs_the_genetic_search, .timeout = 300)
{
	fixture f;
	conn c;
	json_t *reply;
	json_int_t job;
	char *text = example_text("softmax_scores_small");

	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	reply = conn_call(&c, "submit", json_pack("{s:s, s:f}", "graph", text,
						  "budget", 8.0));
	job = json_integer_value(json_object_get(result_of(reply), "id"));
	json_decref(reply);
	reply = wait_job(&c, job, 240);
	cr_expect_str_eq(state_of(reply), "done", "%s", json_dumps(reply, 0));
	cr_expect_gt(json_integer_value(json_object_get(json_object_get(
		result_of(reply), "progress"), "trials")), 1, "%s", json_dumps(reply, 0));
	cr_expect_geq(json_integer_value(json_object_get(json_object_get(
		result_of(reply), "progress"), "version")), 1);
	json_decref(reply);
	free(text);
	conn_close(&c);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* A queue file of an older tuned is moved into the cache at start and
 * removed: its job that was running runs again, its finished job is
 * listed, ids go on after theirs. (The older tuned had put the graph in
 * the cache: a first start here does.) */
Test(daemon, an_old_queue_file_moves_into_the_cache, .timeout = 300)
{
	fixture f;
	conn c;
	json_t *queue, *reply;
	char path[200], *graph = example_text("softmax_scores_small");

	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	json_decref(wait_job(&c, submit(&c, "softmax_scores_small"), 120));
	conn_close(&c);
	cr_assert_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	snprintf(path, sizeof(path), "%s.jobs.json", f.cache);
	queue = json_pack("[{s:i, s:s, s:s, s:s, s:s, s:f, s:i, s:i, s:i, s:f, s:i, s:s, "
			  "s:f, s:f}, {s:i, s:s, s:s, s:s, s:s, s:f}]",
			  "id", 4, "key", "17e2c25a8a2ad708689d897eb8fcb7f988b952e1087524c32d83be98aa4cd0d6",
			  "name", "softmax_scores_small", "graph", graph, "state", "running",
			  "budget_s", 0.0, "max_trials", 0, "priority", 0, "trials", 0,
			  "best_ms", 0.0, "version", 0, "error", "", "created_at", 1.7e9,
			  "finished_at", 0.0,
			  "id", 2, "key", "00", "name", "old", "graph", "{}", "state",
			  "cancelled", "created_at", 1.6e9);
	cr_assert_eq(json_dump_file(queue, path, 0), 0);
	json_decref(queue);
	free(graph);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	cr_expect_neq(access(path, F_OK), 0, "the queue file is still there");
	reply = wait_job(&c, 4, 120);
	cr_expect_str_eq(state_of(reply), "done", "%s", json_dumps(reply, 0));
	json_decref(reply);
	reply = conn_call(&c, "status", json_pack("{s:i}", "job", 2));
	cr_expect_str_eq(state_of(reply), "cancelled", "%s", json_dumps(reply, 0));
	json_decref(reply);
	cr_expect_eq(submit(&c, "ln_residual_small"), 5, "ids go on after the moved jobs");
	conn_close(&c);
	fixture_stop(&f, SIGTERM, NULL);
	expect_queue_consistent(&f, 4);
	fixture_cleanup(&f);
}

static const char *message_of(json_t *reply)
{
	return error_message(reply) ?: "(no error)";
}

/* A submit with "grad" queues the graph and its backward graph: both are
 * tuned, the reply names the backward job and carries its graph.json,
 * and the key is that of the backward graph `tunectl grad` writes. A
 * name autodiff refuses is a bad request naming the cause, and the
 * daemon serves on. */
Test(daemon, submit_with_grad_tunes_the_backward_graph_too, .timeout = 300)
{
	fixture f;
	conn c;
	json_t *reply, *grad, *done;
	char *text = example_text("softmax_scores_small");
	char *backward = example_text("softmax_scores_small_grad");
	json_int_t job;

	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	reply = conn_call(&c, "submit", json_pack("{s:s, s:[s]}", "graph", text, "grad", "nope"));
	cr_expect_str_eq(error_code(reply), "bad_request");
	cr_expect_str_eq(message_of(reply), "params.grad: cannot differentiate with "
			 "respect to 'nope': the graph has no such tensor");
	json_decref(reply);
	reply = conn_call(&c, "submit", json_pack("{s:s, s:[s], s:i}", "graph", text,
						  "grad", "P", "budget", 2));
	grad = json_object_get(result_of(reply), "grad");
	cr_assert(json_is_object(grad), "no grad in %s", json_dumps(reply, 0));
	job = json_integer_value(json_object_get(grad, "id"));
	cr_expect_str_neq(json_string_value(json_object_get(grad, "key")),
			  json_string_value(json_object_get(result_of(reply), "key")));
	cr_expect(strstr(json_string_value(json_object_get(grad, "graph")), "\"d_P\""));
	json_decref(reply);
	done = wait_job(&c, job, 240);
	cr_expect_str_eq(json_string_value(json_object_get(result_of(done), "state")),
			 "done", "%s", json_dumps(done, 0));
	reply = conn_call(&c, "submit", json_pack("{s:s}", "graph", backward));
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "key")),
			 json_string_value(json_object_get(result_of(done), "key")),
			 "the backward graph is not the one tunectl grad writes");
	cr_expect_geq(json_integer_value(json_object_get(result_of(reply), "cached_version")),
		      1, "the backward graph was not tuned: %s", json_dumps(reply, 0));
	json_decref(reply);
	json_decref(done);
	cr_expect(fixture_log_contains(&f, "(its backward graph) submitted by pid"));
	cr_expect(fixture_log_contains(&f, "refused: params.grad: cannot differentiate with respect to 'nope'"));
	conn_close(&c);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
	free(text);
	free(backward);
}

/* A submit with "grad" and "save" tunes the forward graph that also
 * outputs what the backward graph reads saved: the reply's key is that
 * graph's (its graph.json in "graph"), the backward graph reads those
 * outputs as inputs; without "grad", "save" is a bad request. */
Test(daemon, submit_with_save_tunes_the_forward_graph_that_saves)
{
	fixture f;
	conn c;
	json_t *reply, *again, *saving, *backward;
	char *text = example_text("softmax_scores_small");
	json_error_t error;

	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	reply = conn_call(&c, "submit",
			  json_pack("{s:s, s:s}", "graph", text, "save", "all"));
	cr_expect_str_eq(error_code(reply), "bad_request");
	json_decref(reply);
	reply = conn_call(&c, "submit",
			  json_pack("{s:s, s:[s], s:s, s:i}", "graph", text, "grad",
				    "P", "save", "all", "trials", 1));
	cr_assert(json_is_string(json_object_get(result_of(reply), "graph")), "%s",
		  json_dumps(reply, 0));
	saving = json_loads(json_string_value(
				    json_object_get(result_of(reply), "graph")),
			    0, &error);
	backward = json_loads(json_string_value(json_object_get(
				      json_object_get(result_of(reply), "grad"),
				      "graph")),
			      0, &error);
	cr_assert(saving && backward);
	cr_expect_str_eq(json_string_value(json_object_get(saving, "name")),
			 "softmax_scores_small_fwd");
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "name")),
			 "softmax_scores_small_fwd");
	/* the softmax's exponentials: an output of one, an input of the other */
	cr_expect_str_eq(json_string_value(json_object_get(
				 json_object_get(json_object_get(saving, "tensors"),
						 "e"),
				 "role")),
			 "output");
	cr_expect_str_eq(json_string_value(json_object_get(
				 json_object_get(json_object_get(backward, "tensors"),
						 "e"),
				 "role")),
			 "input");
	again = conn_call(&c, "submit",
			  json_pack("{s:O, s:i}", "graph",
				    json_object_get(result_of(reply), "graph"),
				    "trials", 1));
	cr_expect_str_eq(json_string_value(json_object_get(result_of(again), "key")),
			 json_string_value(json_object_get(result_of(reply), "key")));
	json_decref(again);
	json_decref(saving);
	json_decref(backward);
	json_decref(reply);
	conn_close(&c);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
	free(text);
}

/* tunectl submit --grad queues both jobs, prints the backward one and,
 * with --wait, follows both to their end; a name autodiff refuses is the
 * daemon's message and exit 1. */
Test(daemon, tunectl_submit_grad_follows_both_jobs, .timeout = 300)
{
	char path[512], *output;
	const char *submit[] = {"submit",   path, "--grad", "P",
				"--budget", "2",  "--wait", NULL};
	const char *refused[] = {"submit", path, "--grad", "nope", NULL};
	fixture f;

	snprintf(path, sizeof(path), "%s/examples/softmax_scores_small.json",
		 getenv("TUNED_SOURCE_ROOT"));
	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_expect_eq(fixture_tunectl(&f, &output, submit), 0, "%s", output);
	cr_expect(strstr(output, "\nbackward job 2 key "), "%s", output);
	cr_expect(strstr(output, "job 1 done: key "), "%s", output);
	cr_expect(strstr(output, "job 2 done: key "), "%s", output);
	free(output);
	cr_expect_eq(fixture_tunectl(&f, &output, refused), 1, "%s", output);
	cr_expect(strstr(output, "params.grad: cannot differentiate with respect to "
				 "'nope': the graph has no such tensor"),
		  "%s", output);
	free(output);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
}
