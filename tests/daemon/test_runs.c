/*
 * test_runs.c: training runs against a real tuned (docs/protocol.md,
 * "Runs"): every rank of a run that fetches a key gets one version while
 * newer ones land (written into the cache behind the daemon's back, as
 * another daemon of a shared database would), until the run advances;
 * two runs move apart; a run's fetch that waits for a key's first
 * version pins it; errors name the run and the key; tunectl fetch --run
 * and tunectl advance.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"

#define RANKS 3

static fixture f;
static conn ranks[RANKS];

static void start(void)
{
	fixture_init(&f);
	fixture_start(&f, NULL);
	for (int i = 0; i < RANKS; i++) {
		cr_assert(conn_open(&ranks[i], f.socket));
		conn_hello(&ranks[i]);
	}
}

static void stop(void)
{
	for (int i = 0; i < RANKS; i++)
		conn_close(&ranks[i]);
	if (f.pid > 0)
		fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

TestSuite(runs, .init = start, .fini = stop, .timeout = 240);

/* Submits examples/NAME.json with a short budget; its job id. */
static json_int_t submit(conn *c, const char *example)
{
	char *text = example_text(example);
	json_t *reply = conn_call(c, "submit",
				  json_pack("{s:s, s:f, s:i}", "graph", text, "budget",
					    2.0, "trials", 24));
	json_int_t job = json_integer_value(json_object_get(result_of(reply), "id"));

	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	free(text);
	return job;
}

/* Tunes examples/NAME.json to the end; its key into "key". */
static void tune(conn *c, const char *example, char key[65])
{
	json_t *reply = wait_job(c, submit(c, example), 180);

	cr_assert_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "done", "%s", json_dumps(reply, 0));
	snprintf(key, 65, "%s",
		 json_string_value(json_object_get(result_of(reply), "key")));
	json_decref(reply);
}

/* The version a fetch of "key" (with "run", may be NULL) got; asserted
 * to succeed, and to name the run. */
static int fetch(conn *c, const char *key, const char *run)
{
	json_t *params = json_pack("{s:s}", "key", key), *reply, *result;
	int version;

	if (run)
		json_object_set_new(params, "run", json_string(run));
	reply = conn_call(c, "fetch", params);
	result = result_of(reply);
	cr_assert_not_null(result, "fetch %s: %s", run ?: "", json_dumps(reply, 0));
	version = (int)json_integer_value(json_object_get(result, "version"));
	if (run)
		cr_expect_str_eq(json_string_value(json_object_get(result, "run")),
				 run);
	cr_expect_gt(json_array_size(json_object_get(result, "sources")), 0);
	json_decref(reply);
	return version;
}

/* A newer version of "key" lands: its latest version, copied as the next,
 * written into the cache file behind the daemon's back. */
static void land(const char *key)
{
	char sql[1024];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO plans (graph, device, codegen, "
		 "version, plan, sources, binaries, launch, median_ms, spread_ms, "
		 "found_by, created_at, checksum) SELECT graph, device, codegen, "
		 "version + 1, plan, sources, binaries, launch, median_ms / 2, "
		 "spread_ms, 'landed', created_at, checksum FROM plans WHERE "
		 "graph = '%s' ORDER BY version DESC LIMIT 1",
		 key);
	fixture_sql(f.cache, sql);
}

/* Every rank's fetch of "key" with "run" gets "version". */
static void expect_ranks_get(const char *key, const char *run, int version)
{
	for (int i = 0; i < RANKS; i++)
		cr_expect_eq(fetch(&ranks[i], key, run), version, "rank %d of %s", i,
			     run);
}

static json_t *advance(conn *c, const char *run, json_t *keys)
{
	json_t *params = json_pack("{s:s}", "run", run);

	if (keys)
		json_object_set_new(params, "keys", keys);
	return conn_call(c, "advance", params);
}

Test(runs, ranks_of_a_run_get_one_version_until_it_advances)
{
	char key[65];
	json_t *reply, *pins;
	int first;

	tune(&ranks[0], "softmax_scores_small", key);
	first = fetch(&ranks[0], key, NULL);
	expect_ranks_get(key, "run-a", first);
	land(key);
	cr_assert_eq(fetch(&ranks[0], key, NULL), first + 1, "the version landed");
	expect_ranks_get(key, "run-a", first);
	expect_ranks_get(key, "run-b", first + 1);
	land(key);
	expect_ranks_get(key, "run-a", first);
	expect_ranks_get(key, "run-b", first + 1);

	reply = advance(&ranks[1], "run-a", NULL);
	cr_assert_not_null(result_of(reply), "%s", json_dumps(reply, 0));
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "run")),
			 "run-a");
	pins = json_object_get(result_of(reply), "pins");
	cr_assert_eq(json_array_size(pins), 1, "%s", json_dumps(reply, 0));
	cr_expect_str_eq(json_string_value(
				 json_object_get(json_array_get(pins, 0), "key")),
			 key);
	cr_expect_eq(json_integer_value(
			     json_object_get(json_array_get(pins, 0), "version")),
		     first + 2);
	cr_expect_eq(json_integer_value(
			     json_object_get(json_array_get(pins, 0), "previous")),
		     first);
	json_decref(reply);
	expect_ranks_get(key, "run-a", first + 2);
	expect_ranks_get(key, "run-b", first + 1);
}

Test(runs, a_run_waiting_for_the_first_version_pins_it)
{
	json_int_t job = submit(&ranks[0], "lstm_cell_small");
	json_t *status = conn_call(&ranks[0], "status", json_pack("{s:I}", "job", job));
	const char *key = json_string_value(json_object_get(result_of(status), "key"));
	json_t *reply;
	int version;

	reply = conn_call(&ranks[1], "fetch",
			  json_pack("{s:I, s:s, s:i}", "job", job, "run", "run-w",
				    "timeout_ms", 120000));
	cr_assert_not_null(result_of(reply), "%s", json_dumps(reply, 0));
	version = (int)json_integer_value(json_object_get(result_of(reply), "version"));
	cr_expect_geq(version, 1);
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "run")),
			 "run-w");
	json_decref(reply);
	json_decref(wait_job(&ranks[0], job, 180));
	land(key);
	expect_ranks_get(key, "run-w", version);
	json_decref(status);
}

/* A run's fetch whose pin is still being written when its client leaves
 * and the daemon is told to stop: the pin's completion must not leave a
 * waiter behind (on a freed client, its timer keeping the loop alive
 * for the fetch's whole timeout). The cache is locked so that the pin
 * is in flight across the disconnect and the SIGTERM. */
Test(runs, a_pin_in_flight_when_the_client_leaves_does_not_hold_the_stop)
{
	json_int_t job = submit(&ranks[0], "lstm_cell_small");
	struct sqlite3 *lock = fixture_sql_lock(f.cache);
	char line[256];
	double seconds;

	snprintf(line, sizeof(line),
		 "{\"id\": 7, \"op\": \"fetch\", \"params\": {\"job\": %lld, "
		 "\"run\": \"run-gone\", \"timeout_ms\": 60000}}\n",
		 (long long)job);
	conn_send(&ranks[1], line);
	usleep(200000);
	conn_close(&ranks[1]);
	usleep(200000);
	kill(f.pid, SIGTERM);
	usleep(300000);
	fixture_sql_unlock(lock);
	/* signal 0: only waits for the stop the SIGTERM above began */
	cr_expect_eq(fixture_stop(&f, 0, &seconds), 0);
	cr_expect_lt(seconds, 20.0, "the stop waited %.1f s for a left client's fetch",
		     seconds);
}

Test(runs, errors_name_the_run_and_the_key_and_the_daemon_serves_on)
{
	static const char unknown[] =
		"0000000000000000000000000000000000000000000000000000000000000000";
	char key[65], sql[128];
	json_t *reply;
	int latest;

	reply = advance(&ranks[0], "run-none", NULL);
	cr_expect_str_eq(error_code(reply), "not_found");
	cr_expect(strstr(error_message(reply), "run 'run-none' has pinned no key"),
		  "%s", error_message(reply));
	json_decref(reply);
	reply = conn_call(&ranks[0], "fetch",
			  json_pack("{s:s, s:s}", "key", unknown, "run", "run-x"));
	cr_expect_str_eq(error_code(reply), "not_found");
	cr_expect(strstr(error_message(reply), "run 'run-x': no job and no cached "
					       "kernel"),
		  "%s", error_message(reply));
	json_decref(reply);
	reply = conn_call(&ranks[0], "fetch",
			  json_pack("{s:s, s:s, s:i}", "key", unknown, "run", "run-x",
				    "min_version", 2));
	cr_expect_str_eq(error_code(reply), "bad_request");
	json_decref(reply);

	tune(&ranks[0], "softmax_scores_small", key);
	reply = advance(&ranks[0], "run-x", json_pack("[s, s]", key, unknown));
	cr_expect_str_eq(error_code(reply), "not_found");
	cr_expect(strstr(error_message(reply), "run 'run-x' cannot pin graph") &&
			  strstr(error_message(reply), unknown),
		  "%s", error_message(reply));
	json_decref(reply);
	latest = fetch(&ranks[0], key, NULL);
	cr_expect_eq(fetch(&ranks[0], key, "run-x"), latest);
	/* the version the run is pinned to, gone: the run is told to advance */
	land(key);
	snprintf(sql, sizeof(sql), "DELETE FROM plans WHERE version = %d", latest);
	fixture_sql(f.cache, sql);
	reply = conn_call(&ranks[1], "fetch",
			  json_pack("{s:s, s:s}", "key", key, "run", "run-x"));
	cr_expect_str_eq(error_code(reply), "not_found");
	snprintf(sql, sizeof(sql), "run 'run-x' is pinned to version %d of ", latest);
	cr_expect(strstr(error_message(reply), sql) &&
			  strstr(error_message(reply), key) &&
			  strstr(error_message(reply), "advance the run"),
		  "%s", error_message(reply));
	json_decref(reply);
	reply = advance(&ranks[0], "run-x", json_pack("[s]", key));
	cr_expect_not_null(result_of(reply), "%s", json_dumps(reply, 0));
	json_decref(reply);
	cr_expect_eq(fetch(&ranks[1], key, "run-x"), latest + 1);
}

/* The version tunectl --json printed. */
static int tunectl_version(json_t *out)
{
	return (int)json_integer_value(json_object_get(out, "version"));
}

Test(runs, tunectl_fetches_with_a_run_and_advances_it)
{
	char key[65], moved[64], *output = NULL;
	json_t *out;
	int status, latest;

	tune(&ranks[0], "softmax_scores_small", key);
	latest = fetch(&ranks[0], key, NULL);
	out = fixture_tunectl_json(&f, &status,
				   (const char *const[]){"fetch", key, "--run", "run-t",
							 NULL});
	cr_assert_eq(status, 0, "%s", json_dumps(out, 0));
	cr_expect_eq(tunectl_version(out), latest);
	cr_expect_str_eq(json_string_value(json_object_get(out, "run")), "run-t");
	json_decref(out);
	land(key);
	out = fixture_tunectl_json(&f, &status,
				   (const char *const[]){"fetch", key, "--run", "run-t",
							 NULL});
	cr_expect_eq(tunectl_version(out), latest, "%s", json_dumps(out, 0));
	json_decref(out);
	cr_expect_eq(fixture_tunectl(&f, &output,
				     (const char *const[]){"advance", "--run", "run-t",
							   NULL}),
		     0, "%s", output);
	snprintf(moved, sizeof(moved), "version %d -> %d", latest, latest + 1);
	cr_expect(strstr(output, key) && strstr(output, moved), "%s", output);
	free(output);
	out = fixture_tunectl_json(&f, &status,
				   (const char *const[]){"fetch", key, "--run", "run-t",
							 NULL});
	cr_expect_eq(tunectl_version(out), latest + 1, "%s", json_dumps(out, 0));
	json_decref(out);
	cr_expect_eq(fixture_tunectl(&f, &output,
				     (const char *const[]){"advance", "--run",
							   "run-none", NULL}),
		     1, "%s", output);
	cr_expect(strstr(output, "run 'run-none'"), "%s", output);
	free(output);
}
