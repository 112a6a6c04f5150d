/*
 * test_serving.c: the daemon keeps serving while one client's graph is
 * heavy. A graph of megabytes is parsed and checked off the loop thread:
 * another client's status is answered meanwhile, a client that closes
 * before its submit is answered is freed only after, and a restart with
 * such a job queued opens the socket at once. Graphs over a limit of
 * tuned --max-graph-* are refused, naming the limit. A cache whose
 * writes wait (its lock held elsewhere) stalls no other client.
 *
 * tuned runs the scripted worker with its probe held back 100 s: until
 * the probe answers, the runner starts no job, so what is measured is
 * the daemon's loop alone.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"

/* What another client may wait for a reply while a graph is read. */
#define MAX_WAIT_S 0.3

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void start_held(fixture *f, const char *const *extra)
{
	setenv("TUNED_WORKER", getenv("SCRIPTED_WORKER"), 1);
	setenv("SCRIPTED_TIMES", "flat", 1);
	setenv("SCRIPTED_PROBE_DELAY_MS", "100000", 1); /* the runner's limit: 120 s */
	fixture_init(f);
	fixture_start(f, extra);
}

/* A legal graph of "ops" independent elementwise ops, each a sum of
 * "terms" products (about 24 bytes each): megabytes that take seconds
 * to check. */
static char *big_graph(int ops, int terms)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	fprintf(out, "{\"version\": 1, \"name\": \"big\", \"tensors\": {\"t0\": "
		"{\"shape\": [64, 64], \"dtype\": \"f32\", \"role\": \"input\"}");
	for (int i = 1; i <= ops; i++)
		fprintf(out, ", \"t%d\": {\"shape\": [64, 64], \"dtype\": \"f32\", "
			"\"role\": \"output\"}", i);
	fprintf(out, "}, \"ops\": [");
	for (int i = 1; i <= ops; i++) {
		fprintf(out, "%s\"t%d[i, j] = t0[i, j] * 0.5", i > 1 ? ", " : "", i);
		for (int k = 1; k < terms; k++)
			fprintf(out, " + t0[i, j] * %d.5", k);
		fprintf(out, "\"");
	}
	fprintf(out, "]}");
	fclose(out);
	return text;
}

/* The submit request of "graph" (its text), with id "id", as one line
 * without its '\n' (send_line adds it). */
static char *submit_line(int id, const char *graph)
{
	json_t *req = json_pack("{s:i, s:s, s:{s:s, s:f}}", "id", id, "op", "submit",
				"params", "graph", graph, "budget", 60.0);
	char *line = json_dumps(req, JSON_COMPACT);

	json_decref(req);
	return line;
}

static void send_line(conn *c, const char *line)
{
	conn_send(c, line);
	conn_send(c, "\n");
}

static json_int_t submit_example(conn *c, const char *name)
{
	char *text = example_text(name);
	json_t *reply = conn_call(c, "submit", json_pack("{s:s, s:f}", "graph", text,
							 "budget", 60.0));
	json_int_t job = json_integer_value(json_object_get(json_object_get(reply, "result"),
							    "id"));

	cr_assert_gt(job, 0, "%s refused: %s", name, json_dumps(reply, 0));
	json_decref(reply);
	free(text);
	return job;
}

/* tuned started with "extra", two clients said hello, and the second
 * submitted a small job: its id, for statuses. */
static json_int_t start_two_clients(fixture *f, const char *const *extra, conn *a,
				    conn *b)
{
	start_held(f, extra);
	cr_assert(conn_open(a, f->socket) && conn_open(b, f->socket));
	conn_hello(a);
	conn_hello(b);
	return submit_example(b, "gpt3_mlp_small");
}

/* Status of "job", asserted to come; the seconds it took. */
static double timed_status(conn *c, json_int_t job)
{
	double start = now_s();
	json_t *reply = conn_call(c, "status", json_pack("{s:I}", "job", job));

	cr_assert_not_null(json_object_get(reply, "result"), "status failed");
	json_decref(reply);
	return now_s() - start;
}

/* The big graph is parsed (seconds) while another client asks for a
 * status every 20 ms: each is answered within MAX_WAIT_S. */
Test(serving, a_big_graph_does_not_stall_other_clients)
{
	const char *const extra[] = {"--max-graph-bytes", "4194304", NULL};
	char *graph = big_graph(1024, 100), *line = submit_line(1, graph);
	double start, worst = 0;
	json_t *reply = NULL;
	json_int_t job;
	int statuses = 0;
	fixture f;
	conn a, b;

	job = start_two_clients(&f, extra, &a, &b);
	send_line(&a, line);
	start = now_s();
	while (!(reply = conn_read(&a, 10))) {
		double took = timed_status(&b, job);

		worst = took > worst ? took : worst;
		statuses++;
		cr_assert_lt(now_s() - start, 300, "the submit was not answered in 300 s");
		usleep(20000);
	}
	fprintf(stderr, "a graph of %zu bytes answered after %.2f s; %d statuses "
		"meanwhile, the slowest in %.3f s\n", strlen(graph), now_s() - start,
		statuses, worst);
	cr_assert_not_null(json_object_get(json_object_get(reply, "result"), "key"),
			   "the big graph was refused: %s", json_dumps(reply, 0));
	cr_expect_gt(statuses, 2, "the graph was read too fast to measure anything");
	cr_expect_lt(worst, MAX_WAIT_S, "a status waited %.3f s for the graph", worst);
	json_decref(reply);
	conn_close(&a);
	conn_close(&b);
	free(line);
	free(graph);
	fixture_cleanup(&f);
}

/* Every write of the cache waits while another process holds its write
 * lock (here for 1.5 s of the daemon's 5 s busy timeout): a submit is
 * answered only once stored, but another client's statuses are answered
 * at once meanwhile, for no write runs on the loop thread. */
Test(serving, a_locked_cache_does_not_stall_other_clients)
{
	char *graph = example_text("ln_residual_small"), *line = submit_line(1, graph);
	double start, worst = 0;
	struct sqlite3 *lock;
	json_t *reply;
	json_int_t job;
	int statuses = 0;
	fixture f;
	conn a, b;

	job = start_two_clients(&f, NULL, &a, &b);
	lock = fixture_sql_lock(f.cache);
	send_line(&a, line);
	start = now_s();
	while (now_s() - start < 1.5) {
		double took = timed_status(&b, job);

		worst = took > worst ? took : worst;
		statuses++;
		cr_assert_null(conn_read(&a, 0), "the submit was answered before it was stored");
		usleep(20000);
	}
	fixture_sql_unlock(lock);
	reply = conn_read(&a, 10000);
	cr_assert_not_null(json_object_get(json_object_get(reply, "result"), "key"),
			   "the submit failed once the lock was gone: %s", json_dumps(reply, 0));
	cr_expect_eq(fixture_sql_count(f.cache, "SELECT count(*) FROM jobs"), 2,
		     "the job was answered but not stored");
	cr_expect_gt(statuses, 10);
	cr_expect_lt(worst, MAX_WAIT_S, "a status waited %.3f s for a write", worst);
	json_decref(reply);
	conn_close(&a);
	conn_close(&b);
	free(line);
	free(graph);
	fixture_cleanup(&f);
}

static json_int_t count_jobs(conn *c)
{
	json_t *reply = conn_call(c, "list", NULL);
	json_int_t n = (json_int_t)json_array_size(json_object_get(
		json_object_get(reply, "result"), "jobs"));

	json_decref(reply);
	return n;
}

/* A client that closes while its graph is read is answered by no one
 * and freed after (the sanitizer build sees a use after free); the job
 * is queued all the same. A stop while a graph is read exits cleanly. */
Test(serving, a_client_that_closes_during_its_submit)
{
	const char *const extra[] = {"--max-graph-bytes", "4194304", NULL};
	char *graph = big_graph(1024, 60), *line = submit_line(1, graph);
	double deadline;
	json_int_t job;
	fixture f;
	conn a, b, c;

	job = start_two_clients(&f, extra, &a, &b);
	send_line(&a, line);
	usleep(100000);
	conn_close(&a);
	cr_expect_lt(timed_status(&b, job), MAX_WAIT_S);
	deadline = now_s() + 300;
	while (count_jobs(&b) < 2 && now_s() < deadline)
		usleep(100000);
	cr_assert_eq(count_jobs(&b), 2, "the closed client's job was not queued");

	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	send_line(&c, line);
	usleep(100000);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0, "tuned did not exit cleanly "
		     "while it read a graph");
	conn_close(&b);
	conn_close(&c);
	free(line);
	free(graph);
	fixture_cleanup(&f);
}

/* Submits "graph" and expects a bad_request naming "limit" and holding
 * each of "words"; the connection goes on. */
static void expect_refused(conn *c, const char *graph, const char *limit,
			   const char *const *words)
{
	json_t *reply = conn_call(c, "submit", json_pack("{s:s}", "graph", graph));
	json_t *error = json_object_get(reply, "error");
	const char *message = json_string_value(json_object_get(error, "message")) ?: "";

	cr_assert_str_eq(json_string_value(json_object_get(error, "code")) ?: "",
			 "bad_request", "%s: %s", limit, json_dumps(reply, 0));
	cr_expect(strstr(message, limit), "'%s' does not name %s", message, limit);
	for (int i = 0; words[i]; i++)
		cr_expect(strstr(message, words[i]), "'%s' lacks '%s'", message, words[i]);
	json_decref(reply);
	reply = conn_call(c, "ping", NULL);
	cr_assert_not_null(json_object_get(reply, "result"), "no ping after %s", limit);
	json_decref(reply);
}

/* A graph of one tensor "t0" of "shape" (JSON) and "extra" more tensors
 * of the same shape, each the copy of t0. */
static char *shaped_graph(const char *shape, int extra)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	fprintf(out, "{\"version\": 1, \"tensors\": {\"t0\": {\"shape\": %s, \"dtype\": "
		"\"f32\", \"role\": \"input\"}", shape);
	for (int i = 1; i <= extra; i++)
		fprintf(out, ", \"t%d\": {\"shape\": %s, \"dtype\": \"f32\", \"role\": "
			"\"output\"}", i, shape);
	fprintf(out, "}, \"ops\": [");
	for (int i = 1; i <= extra; i++)
		fprintf(out, "%s\"t%d[i, j] = t0[i, j]\"", i > 1 ? ", " : "", i);
	fprintf(out, "]}");
	fclose(out);
	return text;
}

/* Each default limit: one graph just over it, refused before it is
 * parsed further, the message naming the value, the limit and the
 * option; every example is within them. */
Test(serving, graphs_over_a_limit_are_refused)
{
	char *too_long = big_graph(1024, 60), *too_many = big_graph(1025, 1);
	char *too_big = shaped_graph("[65536, 65537]", 1);
	char *too_much = shaped_graph("[65536, 65536]", 4);
	const char *const bytes[] = {"over the limit of 1048576",
				     "tuned --max-graph-bytes", NULL};
	const char *const ops[] = {"1025 ops", "over the limit of 1024",
				   "tuned --max-graph-ops", NULL};
	const char *const elements[] = {"tensor 't0' has 4295032832 elements",
					"over the limit of 4294967296",
					"tuned --max-tensor-elements", NULL};
	const char *const total[] = {"over the limit of 17179869184",
				     "tuned --max-graph-elements", NULL};
	const char *const examples[] = {"bert_qkv", "conv_pair", "gpt3_mlp_m2048",
					"gpt3_mlp_m256", "llama_mlp_m512", "ln_grad_params",
					"ln_residual", "lstm_cell", "mi_lstm_cell",
					"softmax_scores", NULL};
	fixture f;
	conn c;

	cr_assert_gt(strlen(too_long), 1 << 20);
	start_held(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	expect_refused(&c, too_long, "--max-graph-bytes", bytes);
	expect_refused(&c, too_many, "--max-graph-ops", ops);
	expect_refused(&c, too_big, "--max-tensor-elements", elements);
	expect_refused(&c, too_much, "--max-graph-elements", total);
	for (int i = 0; examples[i]; i++)
		submit_example(&c, examples[i]);
	conn_close(&c);
	free(too_long);
	free(too_many);
	free(too_big);
	free(too_much);
	fixture_cleanup(&f);
}

/* The reply to the next line of "c", asserted to have id "id"; its
 * error's message, or "" for a result. */
static const char *expect_reply(conn *c, int id, json_t **reply)
{
	*reply = conn_read(c, 10000);
	cr_assert_not_null(*reply, "no reply %d", id);
	cr_assert_eq(json_integer_value(json_object_get(*reply, "id")), id,
		     "reply %d came out of order: %s", id, json_dumps(*reply, 0));
	return json_string_value(json_object_get(json_object_get(*reply, "error"),
						 "message")) ?: "";
}

/* A line long enough to be parsed off the loop keeps its place: the
 * lines sent with it and after it are answered after it, in order, and
 * its error names the cause. */
Test(serving, requests_after_a_long_line_keep_their_order)
{
	size_t size = 257 * 1024;
	char *pad = calloc(1, 256 * 1024), *text = malloc(size);
	json_t *reply;
	fixture f;
	conn c;

	cr_assert(pad && text);
	memset(pad, 'x', 256 * 1024 - 1);
	snprintf(text, size, "{\"id\": 1, \"op\": \"ping\"}\n"
			   "{\"id\": 2, \"op\": \"ping\", \"params\": {\"pad\": \"%s\"}}\n"
			   "{\"id\": 3, \"op\": \"ping\"}\n", pad);
	start_held(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	conn_send(&c, text);
	cr_expect_str_eq(expect_reply(&c, 1, &reply), "");
	json_decref(reply);
	cr_expect(strstr(expect_reply(&c, 2, &reply), "unknown key 'pad'"),
		  "the long line's error: %s", json_dumps(reply, 0));
	json_decref(reply);
	cr_expect_str_eq(expect_reply(&c, 3, &reply), "");
	json_decref(reply);
	send_line(&c, "{\"id\": 4, \"op\": \"ping\"}");
	cr_expect_str_eq(expect_reply(&c, 4, &reply), "", "reads did not resume");
	json_decref(reply);
	conn_close(&c);
	free(text);
	free(pad);
	fixture_cleanup(&f);
}

/* With the big graph queued, a restart opens the socket and answers
 * hello and status at once: the job's reads come after, off the loop. */
Test(serving, a_restart_with_a_big_job_queued_answers_at_once)
{
	const char *const extra[] = {"--max-graph-bytes", "4194304", NULL};
	char *graph = big_graph(1024, 100);
	json_t *reply;
	json_int_t job;
	double start, took;
	fixture f;
	conn c;

	start_held(&f, extra);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	reply = conn_call(&c, "submit", json_pack("{s:s, s:f}", "graph", graph, "budget",
						  60.0));
	job = json_integer_value(json_object_get(json_object_get(reply, "result"), "id"));
	cr_assert_gt(job, 0, "the big graph was refused: %s", json_dumps(reply, 0));
	json_decref(reply);
	conn_close(&c);
	cr_assert_eq(fixture_stop(&f, SIGTERM, NULL), 0);

	start = now_s();
	fixture_start(&f, extra);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	reply = conn_call(&c, "status", json_pack("{s:I}", "job", job));
	took = now_s() - start;
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(reply, "result"),
							   "state")) ?: "", "queued");
	fprintf(stderr, "restarted with a graph of %zu bytes queued: hello and status "
		"answered after %.3f s\n", strlen(graph), took);
	cr_expect_lt(took, 2.0, "the restart answered after %.3f s", took);
	json_decref(reply);
	conn_close(&c);
	free(graph);
	fixture_cleanup(&f);
}
