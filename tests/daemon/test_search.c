/*
 * test_search.c: the daemon's search, end to end: versions only on real
 * improvement, seen by watchers once and in order, concurrent jobs
 * interleaved, priorities honoured, a speedup over the first version
 * only from times measured together, versions found while the machine
 * slows from trial to trial, a resubmitted key resumed
 * without measuring a plan twice, the daemon answering while a search
 * proposes, and a generation that comes back empty not ending its job.
 *
 * Most tests run tuned with the scripted worker (made-up times, exact
 * outcomes); the last one runs the real cpu worker.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture.h"
#include "scripted_times.h"

/* Runs tuned with the scripted worker timing plans "mode" ("flat" or
 * "hash"), each measurement taking "delay_ms". */
static void start_scripted(fixture *f, const char *mode, const char *delay_ms,
			   const char *const *extra)
{
	setenv("TUNED_WORKER", getenv("SCRIPTED_WORKER"), 1);
	setenv("SCRIPTED_TIMES", mode, 1);
	setenv("SCRIPTED_DELAY_MS", delay_ms, 1);
	fixture_init(f);
	fixture_start(f, extra);
}

static json_int_t submit_for(conn *c, const char *example, double budget, int trials,
			     int priority)
{
	char *text = example_text(example);
	json_t *reply = conn_call(c, "submit", json_pack("{s:s, s:f, s:i, s:i}", "graph",
							 text, "budget", budget, "trials",
							 trials, "priority", priority));
	json_int_t job = json_integer_value(json_object_get(result_of(reply), "id"));

	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	free(text);
	return job;
}

static json_int_t submit(conn *c, const char *example, int trials, int priority)
{
	return submit_for(c, example, 120.0, trials, priority);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *event_name(json_t *event)
{
	return json_string_value(json_object_get(event, "event")) ?: "";
}

static json_int_t event_job(json_t *event)
{
	json_t *data = json_object_get(event, "data");

	return json_integer_value(json_object_get(data, !strcmp(event_name(event), "job") ?
							"id" : "job"));
}

/* A job event saying the job ended. */
static bool is_end(json_t *event)
{
	const char *state = json_string_value(json_object_get(json_object_get(event, "data"),
							      "state"));

	return !strcmp(event_name(event), "job") && state && strcmp(state, "queued") &&
	       strcmp(state, "running");
}

/* The events on "c" until "njobs" jobs ended, as an array. */
static json_t *events_until_done(conn *c, int njobs)
{
	json_t *events = json_array(), *event;
	int ended = 0;

	while (ended < njobs && (event = conn_read(c, 120000))) {
		ended += is_end(event);
		json_array_append_new(events, event);
	}
	cr_assert_eq(ended, njobs, "only %d of %d jobs ended", ended, njobs);
	return events;
}

/* A daemon on the scripted worker in "mode", connected as "c", and the
 * events until one job of "example" with "trials" trials ended; its id in
 * *job when not NULL. */
static json_t *one_job_events(fixture *f, conn *c, const char *mode, const char *example,
			      int trials, json_int_t *job)
{
	json_int_t id;

	start_scripted(f, mode, "0", NULL);
	cr_assert(conn_open(c, f->socket));
	conn_hello(c);
	id = submit(c, example, trials, 0);
	if (job)
		*job = id;
	return events_until_done(c, 1);
}

static int count_events(json_t *events, const char *name, json_int_t job)
{
	json_t *event;
	size_t i;
	int n = 0;

	json_array_foreach(events, i, event)
		n += !strcmp(event_name(event), name) && event_job(event) == job;
	return n;
}

static void stop(fixture *f)
{
	cr_expect_eq(fixture_stop(f, SIGTERM, NULL), 0);
	fixture_cleanup(f);
}

/* Every plan takes 1 ms: after the first version nothing beats it, so
 * the search goes on and never publishes again. */
Test(search, versions_come_only_from_real_improvement, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *events, *reply;
	json_int_t job;

	events = one_job_events(&f, &c, "flat", "softmax_scores_small", 40, &job);
	cr_expect_eq(count_events(events, "version", job), 1);
	cr_expect_geq(count_events(events, "generation", job), 2);
	reply = wait_job(&c, job, 10);
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "state")), "done");
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(
		result_of(reply), "progress"), "trials")), 40, "%s", json_dumps(reply, 0));
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(
		result_of(reply), "progress"), "version")), 1);
	json_decref(reply);
	json_decref(events);
	conn_close(&c);
	stop(&f);
}

/* Plans take 1 to 2 ms: versions come one by one, numbered in order, each
 * faster than the one before by more than the noise (3%), or, published
 * for fewer kernels, no slower. */
Test(search, watchers_see_each_version_once_and_in_order, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *events, *event;
	json_int_t job;
	double last_ms = INFINITY;
	int expected = 1;
	size_t i;

	events = one_job_events(&f, &c, "hash", "softmax_scores_small", 120, &job);
	json_array_foreach(events, i, event) {
		json_t *data = json_object_get(event, "data");
		json_t *retimed = json_object_get(data, "retimed");
		double ms = json_number_value(json_object_get(data, "median_ms"));
		double challenger = json_number_value(json_object_get(retimed, "challenger_ms"));
		double version = json_number_value(json_object_get(retimed, "version_ms"));
		bool fewer = json_is_true(json_object_get(retimed, "fewer_kernels"));

		if (!strcmp(event_name(event), "generation") &&
		    json_is_true(json_object_get(retimed, "published")))
			cr_expect(fewer ? challenger <= version : challenger < version * 0.97,
				  "published %g ms over %g ms (fewer kernels: %d)", challenger,
				  version, fewer);
		if (strcmp(event_name(event), "version"))
			continue;
		cr_expect_eq(json_integer_value(json_object_get(data, "version")), expected++);
		cr_expect_leq(ms, last_ms, "version %d: %g ms after %g ms", expected - 1, ms,
			      last_ms);
		last_ms = ms;
	}
	cr_expect_geq(expected, 3, "the search found no better version");
	cr_expect_gt(count_events(events, "generation", job), 2);
	json_decref(events);
	conn_close(&c);
	stop(&f);
}

/* A plan's time is 1 ms and 1 us per kernel: a fusion saves far less than
 * the noise (3%), yet wins every round. Versions come for fewer kernels
 * alone, each in fewer kernels than the one before. */
Test(search, no_slower_in_fewer_kernels_is_a_version, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *events, *event;
	json_int_t job;
	int versions = 0, fewer = 0;
	size_t i;

	events = one_job_events(&f, &c, "kernels", "lstm_cell_small", 120, &job);
	json_array_foreach(events, i, event) {
		json_t *retimed = json_object_get(json_object_get(event, "data"), "retimed");

		versions += !strcmp(event_name(event), "version");
		fewer += json_is_true(json_object_get(retimed, "published"));
		if (json_is_true(json_object_get(retimed, "published")))
			cr_expect(json_is_true(json_object_get(retimed, "fewer_kernels")),
				  "a version published by more than the noise");
	}
	cr_expect_geq(fewer, 1, "no version for fewer kernels");
	cr_expect_eq(versions, fewer + 1, "versions: the first, then one per fusion");
	cr_expect_gt(count_events(events, "generation", job), 2);
	json_decref(events);
	conn_close(&c);
	stop(&f);
}

/* The generation events' re-timings of "rounds" rounds that published. */
static int published_after(json_t *events, int rounds)
{
	json_t *event;
	size_t i;
	int n = 0;

	json_array_foreach(events, i, event) {
		json_t *retimed = json_object_get(json_object_get(event, "data"), "retimed");

		n += !strcmp(event_name(event), "generation") &&
		     json_integer_value(json_object_get(retimed, "rounds")) == rounds &&
		     json_is_true(json_object_get(retimed, "published"));
	}
	return n;
}

/* Every other re-timing is a close call (the challengers lose 2 of 7
 * rounds): the first is, and 7 more rounds settle it (12 of 14 won). */
Test(search, a_close_call_gets_more_rounds, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *events;

	setenv("SCRIPTED_CLOSE", "1", 1);
	events = one_job_events(&f, &c, "hash", "softmax_scores_small", 120, NULL);
	cr_expect_geq(published_after(events, 14), 1, "12 of 14 rounds publish");
	json_decref(events);
	conn_close(&c);
	stop(&f);
}

/* The plan of each version of the cache at "path", by version (1 first):
 * the plans, parsed. */
static json_t *cached_plans(const char *path)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *stmt = NULL;
	json_t *plans = json_array();

	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT version, plan FROM plans ORDER BY "
					"version", -1, &stmt, NULL), SQLITE_OK);
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		cr_assert_eq(sqlite3_column_int(stmt, 0), (int)json_array_size(plans) + 1);
		json_array_append_new(plans, json_loads((const char *)sqlite3_column_text(
			stmt, 1), 0, NULL));
	}
	sqlite3_finalize(stmt);
	sqlite3_close(db);
	return plans;
}

/* The speedup version "version" truly has over version 1: the ratio of
 * their scripted times. */
static double true_speedup(json_t *plans, json_int_t version)
{
	return scripted_ms(json_array_get(plans, 0), "hash") /
	       scripted_ms(json_array_get(plans, version - 1), "hash");
}

/* The first trial says 50 ms (the default plan's trial, noisy), and every
 * re-timing finds all plans slower than the one before (drifting load):
 * only a ratio of times measured together is the true speedup. The
 * version events, the generation events' gain and the job's progress say
 * the true speedup over version 1, never one from its trial or from
 * another re-timing. The example is one whose made-up times ("hash", a
 * hash of each plan) give three versions or more: softmax_scores_small's
 * gave two once the cpu's f16 code changed its plans' text. */
Test(search, the_speedup_is_over_the_first_version_timed_beside, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *events, *event, *plans, *reply, *progress;
	json_int_t job, version = 0;
	int generations = 0;
	size_t i;

	setenv("SCRIPTED_FIRST_MS", "50", 1);
	setenv("SCRIPTED_DRIFT", "1", 1);
	events = one_job_events(&f, &c, "hash", "lstm_cell_small", 120, &job);
	plans = cached_plans(f.cache);
	cr_assert_geq(json_array_size(plans), 3, "too few versions to tell");
	json_array_foreach(events, i, event) {
		json_t *data = json_object_get(event, "data");
		double speedup = json_number_value(json_object_get(data, "speedup"));
		double gain = json_number_value(json_object_get(data, "gain"));

		if (!strcmp(event_name(event), "version")) {
			version = json_integer_value(json_object_get(data, "version"));
			cr_expect(fabs(speedup - true_speedup(plans, version)) < 1e-6,
				  "version %lld: %gx, truly %gx", (long long)version, speedup,
				  true_speedup(plans, version));
		} else if (!strcmp(event_name(event), "generation") && version > 0) {
			generations++;
			cr_expect(fabs(gain - true_speedup(plans, version)) < 1e-6,
				  "generation %lld, version %lld: %gx, truly %gx",
				  json_integer_value(json_object_get(data, "generation")),
				  (long long)version, gain, true_speedup(plans, version));
		}
	}
	cr_expect_eq(version, (json_int_t)json_array_size(plans));
	cr_expect_geq(generations, 3);
	reply = wait_job(&c, job, 10);
	progress = json_object_get(result_of(reply), "progress");
	cr_expect(fabs(json_number_value(json_object_get(progress, "speedup")) -
		       true_speedup(plans, version)) < 1e-6, "%s", json_dumps(reply, 0));
	cr_expect_gt(json_number_value(json_object_get(progress, "first_ms")), 0);
	unsetenv("SCRIPTED_FIRST_MS");
	unsetenv("SCRIPTED_DRIFT");
	json_decref(reply);
	json_decref(plans);
	json_decref(events);
	conn_close(&c);
	stop(&f);
}

/* Each trial finds the machine slower than the one before (k + 1 times,
 * from the first), alike for a candidate and the version timed beside
 * it: on the trials' own times no candidate after the first version
 * would look faster than the version, none would be re-timed and the job
 * would end on its first version; on their ratios to the version it
 * goes on to find more. */
Test(search, trials_on_a_slowing_machine_still_find_versions, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *events, *plans;
	json_int_t job;

	setenv("SCRIPTED_TRIAL_DRIFT", "1", 1);
	events = one_job_events(&f, &c, "hash", "lstm_cell_small", 120, &job);
	unsetenv("SCRIPTED_TRIAL_DRIFT");
	plans = cached_plans(f.cache);
	cr_expect_geq(json_array_size(plans), 2, "versions: %zu",
		      json_array_size(plans));
	cr_expect_eq(count_events(events, "version", job), (int)json_array_size(plans));
	json_decref(plans);
	json_decref(events);
	conn_close(&c);
	stop(&f);
}

/* The index of the first (or last) event "name" of "job", or -1. */
static int index_of(json_t *events, const char *name, json_int_t job, bool last)
{
	json_t *event;
	size_t i;
	int at = -1;

	json_array_foreach(events, i, event)
		if (!strcmp(event_name(event), name) && event_job(event) == job &&
		    (last || at < 0))
			at = (int)i;
	return at;
}

Test(search, two_concurrent_jobs_both_progress, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *events;
	json_int_t a, b;

	start_scripted(&f, "hash", "20", NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	a = submit(&c, "softmax_scores_small", 48, 0);
	b = submit(&c, "ln_residual_small", 48, 0);
	events = events_until_done(&c, 2);
	cr_expect_geq(count_events(events, "generation", a), 2);
	cr_expect_geq(count_events(events, "generation", b), 2);
	cr_expect_lt(index_of(events, "generation", b, false),
		     index_of(events, "generation", a, true),
		     "job %lld ended its search before job %lld began", (long long)a,
		     (long long)b);
	cr_expect_lt(index_of(events, "generation", a, false),
		     index_of(events, "generation", b, true));
	json_decref(events);
	conn_close(&c);
	stop(&f);
}

/* Whether "event" is job "job"'s generation event for generation "n" or a
 * later one, or the event of its end. */
static bool generation_reached(json_t *event, json_int_t job, int n)
{
	json_t *data = json_object_get(event, "data");

	return event_job(event) == job &&
	       (is_end(event) || (!strcmp(event_name(event), "generation") &&
				  json_integer_value(json_object_get(data, "generation")) >= n));
}

/* The loop thread never waits on a search: while the first population of
 * bert_qkv (full size) is proposed, which takes the search thread about
 * a second, and measured, another client's stats come back at once. */
Test(search, the_daemon_answers_while_a_search_proposes, .timeout = 120)
{
	fixture f;
	conn c, other;
	json_t *reply, *event;
	json_int_t job;
	double slowest = 0;
	bool done = false;

	start_scripted(&f, "hash", "0", NULL);
	cr_assert(conn_open(&c, f.socket));
	cr_assert(conn_open(&other, f.socket));
	conn_hello(&c);
	conn_hello(&other);
	job = submit(&c, "bert_qkv", 40, 0);
	for (int polls = 0; !done && polls < 5000; polls++) {
		double asked = now_s(), took;

		reply = conn_call(&other, "stats", NULL);
		took = now_s() - asked;
		slowest = took > slowest ? took : slowest;
		cr_assert_not_null(result_of(reply), "stats failed: %s", json_dumps(reply, 0));
		json_decref(reply);
		while (!done && (event = conn_read(&c, 5))) {
			done = generation_reached(event, job, 1);
			json_decref(event);
		}
	}
	cr_expect(done, "the first population was never measured");
	cr_expect_lt(slowest, 0.3, "stats took %.0f ms while the search proposed",
		     slowest * 1e3);
	conn_close(&other);
	conn_close(&c);
	stop(&f);
}

/* A generation that the cost model empties (the first trial is far
 * faster than any plan can be) does not end the job: the search proposes
 * until the generation's time share ends, the generation comes back
 * empty, its event says why its plans were dropped, and the job goes on
 * until the search stalls, within its budget. */
Test(search, an_empty_generation_does_not_end_the_job, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *events, *event;
	json_int_t job;
	int generations = 0, empty = 0;
	double started;
	size_t i;

	setenv("SCRIPTED_FIRST_MS", "0.000001", 1);
	start_scripted(&f, "hash", "0", NULL);
	unsetenv("SCRIPTED_FIRST_MS");
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	started = now_s();
	job = submit_for(&c, "softmax_scores_small", 4.0, 200, 0);
	events = events_until_done(&c, 1);
	cr_expect_lt(now_s() - started, 4.0 + 5.0, "the job outlived its budget");
	json_array_foreach(events, i, event) {
		json_t *data = json_object_get(event, "data");
		const char *filled = json_string_value(json_object_get(data, "filled"));
		json_t *dropped = json_object_get(data, "dropped");

		if (strcmp(event_name(event), "generation") || event_job(event) != job)
			continue;
		generations++;
		if (json_integer_value(json_object_get(data, "generation")) == 0 ||
		    json_integer_value(json_object_get(data, "proposed")) > 0)
			continue;
		empty++;
		cr_expect(filled && (!strcmp(filled, "time_share") ||
				     !strcmp(filled, "exhausted")),
			  "an empty generation filled: %s", filled ? filled : "null");
		cr_expect_gt(json_integer_value(json_object_get(dropped, "filtered")), 0,
			     "no plan dropped by the filter: %s", json_dumps(data, 0));
	}
	cr_expect_geq(empty, 1, "no empty generation in %d", generations);
	cr_expect_geq(generations, 2, "the job ended with its first generation");
	json_decref(events);
	conn_close(&c);
	stop(&f);
}

static void expect_distinct_trials(const char *path, int expected);

/* Submits graph "text" for "budget" seconds, with no limit of trials. */
static json_int_t submit_text(conn *c, const char *text, double budget)
{
	json_t *reply = conn_call(c, "submit",
				  json_pack("{s:s, s:f}", "graph", text, "budget",
					    budget));
	json_int_t job = json_integer_value(json_object_get(result_of(reply), "id"));

	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	return job;
}

static const char *ended_of(json_t *reply)
{
	return json_string_value(json_object_get(result_of(reply), "ended")) ?:
									       "(none)";
}

/* Every plan takes 1 ms: the search never gains after the first, and
 * used to end when it stalled, after 6 generations. It goes on until its
 * budget is spent, and says so. */
Test(search, a_stalled_search_spends_its_budget, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *reply;
	json_int_t job;
	char *text = example_text("softmax_scores_small");
	double started;

	start_scripted(&f, "flat", "0", NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	started = now_s();
	job = submit_text(&c, text, 3.0);
	reply = wait_job(&c, job, 60);
	cr_expect_geq(now_s() - started, 3.0, "the job ended after %.1f s of 3",
		      now_s() - started);
	cr_expect_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "done");
	cr_expect_str_eq(ended_of(reply), "budget spent: 3 s");
	json_decref(reply);
	free(text);
	conn_close(&c);
	stop(&f);
}

/* A small space (192 plans of distinct code): the job ends long before
 * its budget once every plan of it is measured, each once, and says so. */
Test(search, a_job_ends_early_only_when_its_space_is_exhausted, .timeout = 120)
{
	static const char small_space[] =
		"{\"version\": 1, \"tensors\": {"
		"\"x\": {\"shape\": [8, 8], \"dtype\": \"f32\", \"role\": \"input\"}, "
		"\"y\": {\"shape\": [8, 8], \"dtype\": \"f32\", \"role\": "
		"\"output\"}}, "
		"\"ops\": [\"y[i, j] = 2 * x[i, j]\"]}";
	fixture f;
	conn c;
	json_t *reply;
	json_int_t job, trials;
	double started;
	char expected[128];

	start_scripted(&f, "flat", "0", NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	started = now_s();
	job = submit_text(&c, small_space, 100.0);
	reply = wait_job(&c, job, 90);
	cr_expect_lt(now_s() - started, 60, "the space took %.1f s", now_s() - started);
	trials = json_integer_value(
		json_object_get(json_object_get(result_of(reply), "progress"),
				"trials"));
	snprintf(expected, sizeof(expected),
		 "space exhausted: %lld of %lld plans measured", (long long)trials,
		 (long long)trials);
	cr_expect_str_eq(ended_of(reply), expected);
	cr_expect_eq(trials, 192, "%lld trials", (long long)trials);
	expect_distinct_trials(f.cache, 192);
	json_decref(reply);
	conn_close(&c);
	stop(&f);
}

/* One job at a time: of two queued, the higher priority runs first (the
 * order of their ends tells, as each job has the same work). */
Test(search, priority_goes_first, .timeout = 120)
{
	const char *const one_job[] = {"--jobs", "1", NULL};
	fixture f;
	conn c;
	json_t *events, *event;
	json_int_t first, low, high, ended[3];
	int nended = 0;
	size_t i;

	/* trials slow enough that the first job still runs when the other
	 * two are queued, even on a loaded machine */
	start_scripted(&f, "flat", "60", one_job);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	first = submit(&c, "softmax_scores_small", 8, 0);
	low = submit(&c, "ln_residual_small", 8, 0);
	high = submit(&c, "lstm_cell_small", 8, 5);
	events = events_until_done(&c, 3);
	json_array_foreach(events, i, event)
		if (is_end(event) && nended < 3)
			ended[nended++] = event_job(event);
	cr_assert_eq(nended, 3);
	cr_expect_eq(ended[0], first);
	cr_expect_eq(ended[1], high, "job %lld (priority 5) should run before %lld",
		     (long long)high, (long long)low);
	cr_expect_eq(ended[2], low);
	json_decref(events);
	conn_close(&c);
	stop(&f);
}

/* The trials of job "job" after its generation "n", from its event. */
static int trials_after(json_t *events, json_int_t job, int n)
{
	json_t *event;
	size_t i;

	json_array_foreach(events, i, event) {
		json_t *data = json_object_get(event, "data");

		if (!strcmp(event_name(event), "generation") && event_job(event) == job &&
		    json_integer_value(json_object_get(data, "generation")) == n)
			return (int)json_integer_value(json_object_get(data, "trials"));
	}
	return -1;
}

/* A key never tuned, of the same form as one tuned before (the same ops on
 * other shapes), measures that key's best plan beside the default in
 * generation 0. */
Test(search, a_new_key_starts_from_the_nearest_of_its_form, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *events;
	json_int_t first, second;

	events = one_job_events(&f, &c, "hash", "softmax_scores_small", 60, &first);
	cr_expect_eq(trials_after(events, first, 0), 1, "a first key: the default alone");
	json_decref(events);
	second = submit(&c, "softmax_scores", 4, 0);
	events = events_until_done(&c, 1);
	cr_expect_eq(trials_after(events, second, 0), 2,
		     "the default and the plan of softmax_scores_small");
	json_decref(events);
	conn_close(&c);
	stop(&f);
}

/* The trials of the cache at "path": "expected" of them, each plan once. */
static void expect_distinct_trials(const char *path, int expected)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *stmt = NULL;

	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT count(*), count(DISTINCT plan) "
					"FROM trials", -1, &stmt, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(stmt), SQLITE_ROW);
	cr_expect_eq(sqlite3_column_int(stmt, 0), expected, "%d trials, not %d",
		     sqlite3_column_int(stmt, 0), expected);
	cr_expect_eq(sqlite3_column_int(stmt, 1), sqlite3_column_int(stmt, 0),
		     "%d plans were measured twice",
		     sqlite3_column_int(stmt, 0) - sqlite3_column_int(stmt, 1));
	sqlite3_finalize(stmt);
	sqlite3_close(db);
}

static json_t *run_job(conn *c, const char *example, int trials)
{
	json_t *reply = wait_job(c, submit(c, example, trials, 0), 240);

	cr_assert_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "done", "%s", json_dumps(reply, 0));
	return reply;
}

/* With the real cpu worker: the same key twice; the second job resumes
 * from what the first measured, and no plan is measured twice. */
Test(search, a_resubmitted_key_resumes_without_measuring_twice, .timeout = 600)
{
	fixture f;
	conn c;
	json_t *first, *second, *stats, *pipeline, *watch;

	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	first = run_job(&c, "softmax_scores_small", 12);
	watch = conn_call(&c, "watch", json_pack("{s:O}", "key", json_object_get(
		result_of(first), "key")));
	cr_expect_geq(json_integer_value(json_object_get(result_of(watch), "version")), 1,
		      "watch answers the key's cached version");
	json_decref(watch);
	second = run_job(&c, "softmax_scores_small", 12);
	expect_distinct_trials(f.cache, 24);
	stats = conn_call(&c, "stats", NULL);
	pipeline = json_object_get(result_of(stats), "pipeline");
	cr_expect_gt(json_number_value(json_object_get(pipeline, "device_busy_s")), 0);
	cr_expect(json_is_object(json_object_get(pipeline, "peaks")),
		  "the device was not probed");
	cr_expect(json_is_boolean(json_object_get(pipeline, "library")),
		  "stats do not say whether library steps are searched");
	json_decref(stats);
	json_decref(first);
	json_decref(second);
	conn_close(&c);
	stop(&f);
}
