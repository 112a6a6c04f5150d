/*
 * test_clients.c: no client can lock the others out of a real tuned, and
 * clients may do only what their role allows.
 *
 * An idle connection is closed after --idle-timeout, saying why, but not
 * one that watches a job in progress nor one whose fetch waits; one uid
 * holds at most --max-clients-per-uid connections while another uid still
 * gets in; refusals are logged at most once a second, then counted. Only
 * a job's (first) submitter or an admin may cancel it, and only admins
 * (the daemon's user, root, members of --admin-gid) prune, import and
 * read the quarantine: tried with two users and an admin-group member,
 * across a restart. Tests with other uids need root (skipped otherwise).
 * Jobs run on the scripted worker, slowed, so that they stay in progress.
 */
#include <criterion/criterion.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "tuned_client.h"

#define EXAMPLE "softmax_scores_small"
#define OTHER_EXAMPLE "bert_qkv_small"
#define NO_SUCH_KEY "0000000000000000000000000000000000000000000000000000000000000000"

/* tuned on the scripted worker, each measurement slowed so that a job
 * with a budget stays in progress for the whole test. */
static void start_scripted(fixture *f, const char *const *extra)
{
	setenv("TUNED_WORKER", getenv("SCRIPTED_WORKER"), 1);
	setenv("SCRIPTED_TIMES", "hash", 1);
	setenv("SCRIPTED_DELAY_MS", "200", 1);
	fixture_start(f, extra);
}

/* The submit params of an example, tuned for 10 minutes at "priority". */
static json_t *submit_params(const char *example, int priority)
{
	char *text = example_text(example);
	json_t *params = json_pack("{s:s, s:f, s:i}", "graph", text, "budget", 600.0,
				   "priority", priority);

	free(text);
	return params;
}

static void hello_conn(conn *c, const fixture *f)
{
	cr_assert(conn_open(c, f->socket), "cannot connect to %s", f->socket);
	conn_hello(c);
}

/* Waits until the daemon counts "n" clients, the connection asking
 * included (the probes of fixture_start may still be closing). */
static void wait_clients(conn *c, int n)
{
	for (int i = 0; i < 100; i++) {
		json_t *reply = conn_call(c, "stats", NULL);
		json_int_t now = json_integer_value(json_object_get(result_of(reply),
								    "clients"));

		json_decref(reply);
		if (now == n)
			return;
		usleep(20000);
	}
	cr_assert_fail("the daemon does not count %d clients", n);
}

static json_t *status_of(conn *c, json_int_t job)
{
	return conn_call(c, "status", json_pack("{s:I}", "job", job));
}

/* The line the daemon sends before it closes "c", asserted to be the
 * error "code" with "text" in its message, then the end of the stream. */
static void expect_closed_with(conn *c, const char *code, const char *text)
{
	json_t *line = conn_read(c, 5000);

	cr_expect_str_eq(error_code(line), code, "%s", json_dumps(line, 0));
	cr_expect(strstr(error_message(line), text), "\"%s\" lacks \"%s\"",
		  error_message(line), text);
	cr_expect(json_is_null(json_object_get(line, "id")));
	json_decref(line);
	line = conn_read(c, 5000);
	cr_expect_null(line, "the connection stayed open: %s", json_dumps(line, 0));
	json_decref(line);
}

Test(clients, an_idle_client_is_closed_but_not_a_watcher_nor_a_waiting_fetch,
     .timeout = 120)
{
	const char *const extra[] = {"--idle-timeout", "1", "--jobs", "1",
				     "--compile-workers", "1", NULL};
	conn idle, idle_watcher, submitter, watcher, fetcher;
	json_t *reply, *queued;
	char request[300];
	const char *key, *queued_key;
	fixture f;

	fixture_init(&f);
	start_scripted(&f, extra);
	hello_conn(&submitter, &f);
	reply = conn_call(&submitter, "submit", submit_params(EXAMPLE, 0));
	key = json_string_value(json_object_get(result_of(reply), "key"));
	cr_assert_not_null(key, "submit failed: %s", json_dumps(reply, 0));
	/* Queued behind the first (--jobs 1), so its watcher gets no events:
	 * only its job in progress keeps it. */
	queued = conn_call(&submitter, "submit", submit_params(OTHER_EXAMPLE, -5));
	queued_key = json_string_value(json_object_get(result_of(queued), "key"));
	cr_assert_not_null(queued_key, "submit failed: %s", json_dumps(queued, 0));
	hello_conn(&idle, &f);
	hello_conn(&idle_watcher, &f);
	json_decref(conn_call(&idle_watcher, "watch", json_pack("{s:s}", "key",
								 NO_SUCH_KEY)));
	hello_conn(&watcher, &f);
	json_decref(conn_call(&watcher, "watch", json_pack("{s:s}", "key", queued_key)));
	hello_conn(&fetcher, &f);
	snprintf(request, sizeof(request), "{\"id\": 99, \"op\": \"fetch\", \"params\": "
		 "{\"key\": \"%s\", \"min_version\": 1000000, \"timeout_ms\": 4000}}\n",
		 key);
	conn_send(&fetcher, request);
	usleep(2500000);

	expect_closed_with(&idle, "timeout", "idle for 1 s");
	expect_closed_with(&idle_watcher, "timeout", "(tuned --idle-timeout 1)");
	cr_expect(fixture_log_contains(&f, "idle for 1 s: closed (--idle-timeout)"),
		  "the log does not say why the idle clients were closed");
	json_decref(reply);
	reply = conn_call(&submitter, "ping", NULL);
	cr_expect_not_null(result_of(reply), "the submitter, whose job runs, was closed");
	json_decref(reply);
	reply = conn_call(&watcher, "ping", NULL);
	cr_expect_not_null(result_of(reply), "the watcher of a queued job was closed");
	json_decref(reply);
	reply = status_of(&watcher, json_integer_value(json_object_get(result_of(queued),
									"id")));
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "queued", "the watched job did not stay queued: %s",
			 json_dumps(reply, 0));
	json_decref(reply);
	json_decref(queued);
	reply = conn_read(&fetcher, 5000);
	cr_expect_eq(json_integer_value(json_object_get(reply, "id")), 99,
		     "the waiting fetch did not end with its own timeout: %s",
		     json_dumps(reply, 0));
	cr_expect_str_eq(error_code(reply), "timeout");
	json_decref(reply);
	reply = conn_call(&fetcher, "ping", NULL);
	cr_expect_not_null(result_of(reply), "the client of a waiting fetch was closed");
	json_decref(reply);
	conn_close(&idle);
	conn_close(&idle_watcher);
	conn_close(&submitter);
	conn_close(&watcher);
	conn_close(&fetcher);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* Through the client library, a call after the daemon closed the idle
 * connection tells why, from the daemon's last line. */
Test(clients, the_client_library_says_why_an_idle_connection_was_closed,
     .timeout = 60)
{
	const char *const extra[] = {"--idle-timeout", "0.5", NULL};
	tuned_client_error err = {0};
	tuned_client *client;
	fixture f;

	fixture_init(&f);
	fixture_start(&f, extra);
	cr_assert_eq(tuned_client_connect(f.socket, NULL, &client, &err), 0, "%s",
		     err.message);
	usleep(1500000);
	cr_expect_eq(tuned_client_call(client, PROTO_OP_PING, NULL, 0, NULL, &err),
		     PROTO_ETIMEOUT, "%s", err.message);
	cr_expect(strstr(err.message, "idle for 0.5 s"), "\"%s\" does not say why",
		  err.message);
	tuned_client_close(client);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* A client of "uid" and group "gid" says hello: 0 when it is answered,
 * 1 when it is refused with too_many, more when something else failed. */
static int connect_as(const fixture *f, uid_t uid, gid_t gid)
{
	pid_t child;
	int status;

	if ((child = fork()) == 0) {
		json_t *reply;
		conn c;

		if (setgroups(1, &gid) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
			_exit(3);
		if (!conn_open(&c, f->socket))
			_exit(4);
		conn_send(&c, "{\"id\": 1, \"op\": \"hello\", \"params\": {\"version\": 1}}\n");
		if (!(reply = conn_read(&c, 5000)))
			_exit(5);
		_exit(result_of(reply) ? 0 : !strcmp(error_code(reply), "too_many") ? 1 : 6);
	}
	waitpid(child, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

Test(clients, one_uid_cannot_take_every_slot, .timeout = 120)
{
	const char *const extra[] = {"--max-clients", "8", "--max-clients-per-uid", "2",
				     "--allow-uid", "65534", NULL};
	char logged[64];
	conn a, b, over;
	fixture f;

	fixture_init(&f);
	fixture_start(&f, extra);
	hello_conn(&a, &f);
	wait_clients(&a, 1);
	hello_conn(&b, &f);
	cr_assert(conn_open(&over, f.socket));
	expect_closed_with(&over, "too_many", "(tuned --max-clients-per-uid 2)");
	conn_close(&over);
	snprintf(logged, sizeof(logged), "refused uid %d (pid", (int)geteuid());
	cr_expect(fixture_log_contains(&f, logged), "the refusal is not logged");
	cr_expect(fixture_log_contains(&f, "holds 2 connections already"),
		  "the log does not say why");
	if (geteuid() == 0) {
		fixture_open_folders(&f);
		cr_expect_eq(connect_as(&f, 65534, 65534), 0,
			     "another uid was refused while root held its share");
	}
	conn_close(&a);
	conn_close(&b);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* The refusals the log shows: lines of one refusal each, and the sum of
 * the counts of those not logged one by one. */
static void count_refusals(const fixture *f, int *lines, int *unlogged)
{
	FILE *log = fopen(f->log, "r");
	char line[2048], *more;

	*lines = *unlogged = 0;
	while (log && fgets(line, sizeof(line), log)) {
		if (strstr(line, "refused uid") && strstr(line, "--max-clients-per-uid"))
			++*lines;
		if ((more = strstr(line, "warning: ")) && strstr(line, "more connection(s) "
								  "refused in the last second (over "
								  "--max-clients-per-uid)"))
			*unlogged += atoi(more + strlen("warning: "));
	}
	if (log)
		fclose(log);
}

Test(clients, refusals_are_logged_once_a_second_then_counted, .timeout = 120)
{
	const char *const extra[] = {"--max-clients-per-uid", "2", NULL};
	int lines, unlogged;
	conn held, held_too;
	fixture f;

	fixture_init(&f);
	fixture_start(&f, extra);
	hello_conn(&held, &f);
	wait_clients(&held, 1);
	hello_conn(&held_too, &f);
	for (int i = 0; i < 20; i++) {
		conn over;

		cr_assert(conn_open(&over, f.socket));
		json_decref(conn_read(&over, 5000));
		conn_close(&over);
	}
	usleep(2500000);
	count_refusals(&f, &lines, &unlogged);
	cr_expect_geq(lines, 1, "no refusal is logged");
	cr_expect_leq(lines, 3, "%d refusals logged one by one in about a second", lines);
	cr_expect_eq(lines + unlogged, 20, "%d logged and %d counted, not 20 refusals",
		     lines, unlogged);
	if (lines + unlogged != 20)
		fixture_print_log(&f);
	conn_close(&held);
	conn_close(&held_too);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* Who a request is sent as. */
typedef struct user {
	uid_t uid;
	gid_t gid;
	gid_t group; /* a supplementary group */
} user;

#define ALICE ((user){65534, 65534, 65534})
#define BOB ((user){65533, 65533, 65533})
#define ADMIN_GROUP 4321
#define CAROL ((user){65532, 65532, ADMIN_GROUP}) /* of the admin group */

/* Sends "op" with "params" (taken) on a connection of its own as "who":
 * the reply. */
static json_t *call_as(const fixture *f, user who, const char *op, json_t *params)
{
	int out[2];
	pid_t child;
	char *text = NULL;
	size_t len = 0;
	FILE *in;
	json_t *reply;

	cr_assert_eq(pipe(out), 0);
	if ((child = fork()) == 0) {
		conn c;
		char *line;

		close(out[0]);
		if (setgroups(1, &who.group) < 0 || setgid(who.gid) < 0 ||
		    setuid(who.uid) < 0 || !conn_open(&c, f->socket))
			_exit(3);
		json_decref(conn_call(&c, "hello", json_pack("{s:i}", "version", 1)));
		line = json_dumps(conn_call(&c, op, params), JSON_COMPACT);
		_exit(line && write(out[1], line, strlen(line)) == (ssize_t)strlen(line) ? 0 : 4);
	}
	json_decref(params);
	close(out[1]);
	in = fdopen(out[0], "r");
	cr_assert_gt(getdelim(&text, &len, '\0', in), 0, "uid %d: no reply to %s",
		     (int)who.uid, op);
	fclose(in);
	waitpid(child, NULL, 0);
	reply = json_loads(text, 0, NULL);
	free(text);
	return reply;
}

static json_t *cancel_as(const fixture *f, user who, json_int_t job)
{
	return call_as(f, who, "cancel", json_pack("{s:I}", "job", job));
}

static json_int_t submit_as(const fixture *f, user who, const char *example)
{
	json_t *reply = call_as(f, who, "submit", submit_params(example, 0));
	json_int_t job = json_integer_value(json_object_get(result_of(reply), "id"));

	cr_assert_gt(job, 0, "uid %d could not submit: %s", (int)who.uid,
		     json_dumps(reply, 0));
	json_decref(reply);
	return job;
}

static void expect_refused(json_t *reply, const char *text)
{
	cr_expect_str_eq(error_code(reply), "unauthorized", "%s", json_dumps(reply, 0));
	cr_expect(strstr(error_message(reply), text), "\"%s\" lacks \"%s\"",
		  error_message(reply), text);
	cr_expect(strstr(error_message(reply), "--admin-gid"),
		  "\"%s\" does not say who may", error_message(reply));
	json_decref(reply);
}

static void expect_state(json_t *reply, const char *state)
{
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "state")) ?: "",
			 state, "%s", json_dumps(reply, 0));
	json_decref(reply);
}

/* What only admins may do, refused to "who". */
static void expect_not_admin(const fixture *f, user who, json_t *bundle)
{
	expect_refused(call_as(f, who, "cache.prune", json_pack("{s:i}", "max_age_s", 1)),
		       "cache.prune needs an admin");
	expect_refused(call_as(f, who, "cache.import", json_pack("{s:O}", "export", bundle)),
		       "cache.import needs an admin");
	expect_refused(call_as(f, who, "cache.quarantine", NULL),
		       "cache.quarantine needs an admin");
}

/* The reply to a cancel of "job" was the job, and the job ends cancelled
 * (a running one ends once its worker stops). */
static void expect_cancelled(const fixture *f, json_t *reply, json_int_t job)
{
	conn root;

	cr_expect_not_null(result_of(reply), "the cancel was refused: %s",
			   json_dumps(reply, 0));
	json_decref(reply);
	hello_conn(&root, f);
	expect_state(wait_job(&root, job, 60), "cancelled");
	conn_close(&root);
}

Test(clients, only_the_submitter_or_an_admin_cancels_and_admins_prune,
     .timeout = 240)
{
	const char *const extra[] = {"--allow-uid", "65534", "--allow-uid", "65533",
				     "--admin-gid", "4321", "--jobs", "1",
				     "--compile-workers", "1", NULL};
	json_int_t alices, alices_next;
	json_t *exported, *reply;
	fixture f;
	conn root;

	if (geteuid() != 0)
		cr_skip_test("needs root to make clients of other uids; skipped");
	fixture_init(&f);
	start_scripted(&f, extra);
	fixture_open_folders(&f);
	alices = submit_as(&f, ALICE, EXAMPLE);
	expect_refused(cancel_as(&f, BOB, alices), "submitted by uid 65534");
	cr_expect_eq(submit_as(&f, BOB, EXAMPLE), alices,
		     "bob's submit of the same key did not share alice's job");
	expect_refused(cancel_as(&f, BOB, alices), "not uid 65533");
	hello_conn(&root, &f);
	exported = conn_call(&root, "cache.export", NULL);
	cr_assert(json_is_object(result_of(exported)), "root cannot export: %s",
		  json_dumps(exported, 0));
	expect_not_admin(&f, BOB, result_of(exported));
	expect_not_admin(&f, ALICE, result_of(exported));
	json_decref(exported);
	expect_state(status_of(&root, alices), "running");
	conn_close(&root);

	/* The submitter is kept with the job, across a restart. */
	cr_assert_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	start_scripted(&f, extra);
	fixture_open_folders(&f);
	expect_refused(cancel_as(&f, BOB, alices), "submitted by uid 65534");
	expect_cancelled(&f, cancel_as(&f, ALICE, alices), alices);

	alices_next = submit_as(&f, ALICE, OTHER_EXAMPLE);
	expect_cancelled(&f, cancel_as(&f, CAROL, alices_next), alices_next);
	reply = call_as(&f, CAROL, "cache.prune", json_pack("{s:i}", "max_age_s", 100000));
	cr_expect_not_null(result_of(reply), "a member of the admin group cannot "
			   "prune: %s", json_dumps(reply, 0));
	json_decref(reply);
	reply = call_as(&f, CAROL, "cache.quarantine", NULL);
	cr_expect_not_null(result_of(reply), "a member of the admin group cannot read "
			   "the quarantine: %s", json_dumps(reply, 0));
	json_decref(reply);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}
