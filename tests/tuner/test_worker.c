/*
 * test_worker.c: the supervision of worker processes against fake_worker
 * (its path in $FAKE_WORKER): answers, crashes, hangs, garbage, exits,
 * large lines both ways, restarts, and a program that does not exist.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "tuner.h"

static tuner_worker *fake_new(void)
{
	const char *path = getenv("FAKE_WORKER");
	const char *argv[] = { path, NULL };
	tuner_worker *worker;

	cr_assert_not_null(path, "FAKE_WORKER is not set");
	worker = tuner_worker_new(path, argv);
	cr_assert_not_null(worker);
	return worker;
}

/* Asks "worker" for "request", which it takes. */
static int ask(tuner_worker *worker, json_t *request, double timeout_s,
	       tuner_reply *reply)
{
	int rc;

	cr_assert_not_null(request);
	rc = tuner_worker_ask(worker, request, timeout_s, reply);
	json_decref(request);
	return rc;
}

static json_t *order(const char *what)
{
	return json_pack("{s:s}", "do", what);
}

/* An echo round trip that must work. */
static void expect_echo(tuner_worker *worker)
{
	json_t *request = json_pack("{s:s, s:i, s:[i,s]}", "do", "echo", "n",
				    42, "list", 1, "two");
	tuner_reply reply;

	cr_assert_eq(tuner_worker_ask(worker, request, 10.0, &reply), 0);
	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect_str_eq(json_string_value(json_object_get(reply.answer, "kind")),
			 "ok");
	cr_expect(json_equal(json_object_get(reply.answer, "echo"), request));
	json_decref(reply.answer);
	json_decref(request);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

Test(worker, echo_round_trip)
{
	tuner_worker *worker = fake_new();

	cr_expect_eq(tuner_worker_starts(worker), 0);
	expect_echo(worker);
	expect_echo(worker);
	expect_echo(worker);
	cr_expect_eq(tuner_worker_starts(worker), 1);
	tuner_worker_free(worker);
}

Test(worker, crash_then_restart)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;

	expect_echo(worker);
	cr_assert_eq(ask(worker, order("crash"), 10.0, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_CRASHED, "%s", reply.detail);
	cr_expect_eq(reply.term_signal, SIGSEGV);
	cr_expect_null(reply.answer);
	cr_expect_str_eq(reply.detail,
			 "worker killed by signal 11 (Segmentation fault)");
	expect_echo(worker);
	cr_expect_eq(tuner_worker_starts(worker), 2);
	tuner_worker_free(worker);
}

Test(worker, crash_as_first_request)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;

	cr_assert_eq(ask(worker, order("crash"), 10.0, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_CRASHED);
	cr_expect_eq(reply.term_signal, SIGSEGV);
	expect_echo(worker);
	cr_expect_eq(tuner_worker_starts(worker), 2);
	tuner_worker_free(worker);
}

Test(worker, hang_times_out)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;
	double start = now_s(), took;

	cr_assert_eq(ask(worker, order("hang"), 0.5, &reply), 0);
	took = now_s() - start;
	cr_expect_eq(reply.outcome, TUNER_TIMED_OUT, "%s", reply.detail);
	cr_expect_null(reply.answer);
	cr_expect_eq(reply.term_signal, 0);
	cr_expect_str_eq(reply.detail, "no answer within 0.5 s: worker killed");
	cr_expect(took >= 0.45 && took < 1.0, "took %.3f s", took);
	expect_echo(worker);
	cr_expect_eq(tuner_worker_starts(worker), 2);
	tuner_worker_free(worker);
}

/* The time limit counts from the ask, not from the last run of the loop. */
Test(worker, time_limit_starts_at_the_ask)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;
	double start;

	expect_echo(worker);
	usleep(600 * 1000);
	start = now_s();
	cr_assert_eq(ask(worker, order("hang"), 0.5, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_TIMED_OUT);
	cr_expect(now_s() - start >= 0.45, "took %.3f s", now_s() - start);
	tuner_worker_free(worker);
}

Test(worker, garbage_is_garbled)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;

	cr_assert_eq(ask(worker, order("garbage"), 10.0, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_GARBLED, "%s", reply.detail);
	cr_expect_null(reply.answer);
	cr_expect(strstr(reply.detail, "'this is not json'"), "%s", reply.detail);
	expect_echo(worker);
	cr_expect_eq(tuner_worker_starts(worker), 2);
	tuner_worker_free(worker);
}

Test(worker, json_not_an_object_is_garbled)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;

	cr_assert_eq(ask(worker, order("array"), 10.0, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_GARBLED, "%s", reply.detail);
	cr_expect(strstr(reply.detail, "not a json object"), "%s", reply.detail);
	expect_echo(worker);
	tuner_worker_free(worker);
}

Test(worker, exit_status)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;

	cr_assert_eq(ask(worker, json_pack("{s:s, s:i}", "do", "exit", "status", 3),
			 10.0, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_CRASHED, "%s", reply.detail);
	cr_expect_eq(reply.term_signal, 0);
	cr_expect_eq(reply.exit_status, 3);
	cr_expect_str_eq(reply.detail,
			 "worker exited with status 3 before answering");
	expect_echo(worker);
	cr_expect_eq(tuner_worker_starts(worker), 2);
	tuner_worker_free(worker);
}

/* A fresh process that exits 0 without answering has crashed: no retry. */
Test(worker, fresh_exit_zero_is_a_crash)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;

	cr_assert_eq(ask(worker, json_pack("{s:s, s:i}", "do", "exit", "status", 0),
			 10.0, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_CRASHED);
	cr_expect_eq(reply.exit_status, 0);
	cr_expect_eq(tuner_worker_starts(worker), 1);
	tuner_worker_free(worker);
}

/* Asked at once (the exit may not have happened) or after a pause (it has):
 * either way the next ask gets a fresh worker. */
Test(worker, answer_then_exit_restarts)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;

	for (int i = 0; i < 10; i++) {
		cr_assert_eq(ask(worker, order("answer_then_exit"), 10.0, &reply), 0);
		cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
		json_decref(reply.answer);
		if (i % 2)
			usleep(100 * 1000);
		expect_echo(worker);
	}
	cr_expect_eq(tuner_worker_starts(worker), 11);
	tuner_worker_free(worker);
}

static void on_sigpipe(int sig)
{
	(void)sig;
}

static void *sigpipe_handler(void)
{
	struct sigaction action;

	sigaction(SIGPIPE, NULL, &action);
	return (void *)action.sa_handler;
}

/* A default SIGPIPE is ignored from the first worker on; a handler of the
 * program's is left alone. */
Test(worker, sigpipe_disposition)
{
	tuner_worker *worker;

	signal(SIGPIPE, on_sigpipe);
	worker = fake_new();
	cr_expect_eq(sigpipe_handler(), (void *)on_sigpipe);
	tuner_worker_free(worker);
	signal(SIGPIPE, SIG_DFL);
	worker = fake_new();
	cr_expect_eq(sigpipe_handler(), (void *)SIG_IGN);
	tuner_worker_free(worker);
}

/* The request meets a closed stdin: EPIPE, not SIGPIPE (whose default
 * would kill this test), and a restart. */
Test(worker, write_to_a_closed_worker)
{
	tuner_worker *worker;
	tuner_reply reply;

	signal(SIGPIPE, SIG_DFL);
	worker = fake_new();

	cr_assert_eq(ask(worker, json_pack("{s:s, s:i, s:i}", "do",
					   "close_answer_exit", "ms", 300,
					   "status", 0), 10.0, &reply), 0);
	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	json_decref(reply.answer);
	expect_echo(worker);
	cr_expect_eq(tuner_worker_starts(worker), 2);
	tuner_worker_free(worker);
}

Test(worker, write_to_a_dying_worker_is_a_crash)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;

	cr_assert_eq(ask(worker, json_pack("{s:s, s:i, s:i}", "do",
					   "close_answer_exit", "ms", 300,
					   "status", 5), 10.0, &reply), 0);
	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	json_decref(reply.answer);
	cr_assert_eq(ask(worker, order("echo"), 10.0, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_CRASHED, "%s", reply.detail);
	cr_expect_eq(reply.exit_status, 5);
	cr_expect_str_eq(reply.detail, "worker exited with status 5 before "
			 "answering (request not delivered)");
	expect_echo(worker);
	cr_expect_eq(tuner_worker_starts(worker), 2);
	tuner_worker_free(worker);
}

static void expect_big(tuner_worker *worker, json_int_t size)
{
	tuner_reply reply;
	json_t *big;

	cr_assert_eq(ask(worker, json_pack("{s:s, s:I}", "do", "big", "size",
					   size), 10.0, &reply), 0);
	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	big = json_object_get(reply.answer, "big");
	cr_expect_eq(json_string_length(big), (size_t)size);
	cr_expect_eq(json_string_value(big)[size - 1], 'x');
	json_decref(reply.answer);
}

Test(worker, big_answers)
{
	tuner_worker *worker = fake_new();

	expect_big(worker, 1 << 20);
	expect_big(worker, 16 << 20);
	expect_big(worker, 10);
	expect_echo(worker);
	cr_expect_eq(tuner_worker_starts(worker), 1);
	tuner_worker_free(worker);
}

Test(worker, big_request)
{
	tuner_worker *worker = fake_new();
	char *pad = malloc((4 << 20) + 1);
	tuner_reply reply;
	json_t *request;

	memset(pad, 'y', 4 << 20);
	pad[4 << 20] = '\0';
	request = json_pack("{s:s, s:s}", "do", "echo", "pad", pad);
	cr_assert_eq(tuner_worker_ask(worker, request, 10.0, &reply), 0);
	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect(json_equal(json_object_get(reply.answer, "echo"), request));
	json_decref(reply.answer);
	json_decref(request);
	free(pad);
	expect_echo(worker);
	tuner_worker_free(worker);
}

Test(worker, missing_executable)
{
	const char *path = "/nonexistent/tuned-worker";
	const char *argv[] = { path, "--serve", NULL };
	tuner_worker *worker = tuner_worker_new(path, argv);
	tuner_reply reply;

	cr_assert_not_null(worker);
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(ask(worker, order("echo"), 1.0, &reply), UV_ENOENT);
		cr_expect_eq(reply.outcome, TUNER_CRASHED);
		cr_expect_null(reply.answer);
		cr_expect(strstr(reply.detail, path), "%s", reply.detail);
		cr_expect_str_eq(reply.detail, "cannot start worker "
				 "'/nonexistent/tuned-worker': no such file or "
				 "directory");
	}
	cr_expect_eq(tuner_worker_starts(worker), 0);
	tuner_worker_free(worker);
}

Test(worker, bad_arguments)
{
	tuner_worker *worker = fake_new();
	json_t *array = json_array();
	tuner_reply reply;

	cr_expect_eq(ask(worker, order("echo"), 0.0, &reply), UV_EINVAL);
	cr_expect_eq(reply.outcome, TUNER_CRASHED);
	cr_expect(strstr(reply.detail, "time limit"), "%s", reply.detail);
	cr_expect_eq(tuner_worker_ask(worker, array, 1.0, &reply), UV_EINVAL);
	cr_expect_str_eq(reply.detail, "the request is not a json object");
	cr_expect_eq(tuner_worker_starts(worker), 0);
	json_decref(array);
	expect_echo(worker);
	tuner_worker_free(worker);
}

/* Each worker has its loop; one's crash is not another's. */
Test(worker, workers_are_independent)
{
	tuner_worker *a = fake_new(), *b = fake_new();
	tuner_reply reply;

	expect_echo(a);
	expect_echo(b);
	cr_assert_eq(ask(b, order("crash"), 10.0, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_CRASHED);
	expect_echo(a);
	cr_assert_eq(ask(a, order("hang"), 0.2, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_TIMED_OUT);
	expect_echo(b);
	cr_expect_eq(tuner_worker_starts(a), 1);
	cr_expect_eq(tuner_worker_starts(b), 2);
	tuner_worker_free(a);
	tuner_worker_free(b);
}

/* Freeing kills a live worker, even one that never answers. */
Test(worker, free_kills_a_live_worker)
{
	tuner_worker *never = fake_new(), *live = fake_new();

	expect_echo(live);
	tuner_worker_free(live);
	tuner_worker_free(never);
	tuner_worker_free(NULL);
}

static json_t *order_saying(const char *what, const char *words)
{
	return json_pack("{s:s, s:s}", "do", what, "say", words);
}

static void expect_log(tuner_worker *worker, const char *expected)
{
	char *log = tuner_worker_log(worker);

	cr_assert_not_null(log);
	cr_expect_str_eq(log, expected);
	free(log);
}

/* What a worker wrote to stderr before it crashed or hung is kept, for
 * the quarantine's repro bundle; a fresh process starts a fresh log. */
Test(worker, the_last_words_of_a_crashed_or_hung_worker_are_kept)
{
	tuner_worker *worker = fake_new();
	tuner_reply reply;

	cr_assert_eq(ask(worker, order_saying("echo", "loading k0"), 10.0, &reply), 0);
	json_decref(reply.answer);
	cr_assert_eq(ask(worker, order_saying("crash", "running k0"), 10.0, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_CRASHED);
	expect_log(worker, "loading k0\nrunning k0\n");
	cr_assert_eq(ask(worker, order_saying("hang", "waiting on k1"), 0.5, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_TIMED_OUT);
	expect_log(worker, "waiting on k1\n");
	tuner_worker_free(worker);
}

/* The log keeps its last TUNER_LOG_MAX bytes, as valid UTF-8. */
Test(worker, the_log_keeps_its_end_as_utf8)
{
	tuner_worker *worker = fake_new();
	json_t *big = json_pack("{s:s, s:[i, i, i, i, i]}", "do", "crash", "say_bytes",
				'a', 0xff, 0xc3, 0xa9, '\n');
	char *words = malloc(TUNER_LOG_MAX + 1), *log;
	tuner_reply reply;

	memset(words, 'x', TUNER_LOG_MAX);
	words[TUNER_LOG_MAX] = 0;
	cr_assert_eq(ask(worker, order_saying("echo", words), 10.0, &reply), 0);
	json_decref(reply.answer);
	cr_assert_eq(ask(worker, big, 10.0, &reply), 0);
	cr_expect_eq(reply.outcome, TUNER_CRASHED);
	log = tuner_worker_log(worker);
	cr_assert_not_null(log);
	/* x... "\n" from the first, then a, 0xff read as '?', e acute, "\n" */
	cr_expect_eq(strlen(log), TUNER_LOG_MAX, "%zu bytes", strlen(log));
	cr_expect_str_eq(log + strlen(log) - 7, "x\na?\xc3\xa9\n");
	cr_expect_eq(strspn(log, "x"), TUNER_LOG_MAX - 6);
	free(log);
	free(words);
	tuner_worker_free(worker);
}
