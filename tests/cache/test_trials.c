/*
 * test_trials.c: cache_trials, the trials of one (graph, device, codegen)
 * as the daemon reads them when a job starts: only that key's, newest
 * first, plans back as JSON, NULL times as null, the limit, unknown keys
 * and devices as an empty array, and bad arguments refused.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_test.h"

#define CODEGEN_NEXT "kgen 0.2"

TestSuite(trials, .init = fx_setup, .fini = fx_teardown, .timeout = 60);

/* Records a trial of graph "n" with the plan make_plan(2, "seed"). */
static void record(cache *c, int n, const char *device, const char *codegen,
		   int seed, enum cache_outcome outcome, double median)
{
	char *plan = make_plan(2, seed);
	cache_trial t = {
		.graph = graph_key(n), .device = device, .codegen = codegen,
		.plan = plan, .outcome = outcome, .median_ms = median,
	};
	cache_error err = { 0 };
	int rc = cache_record_trial(c, &t, &err);

	free(plan);
	cr_assert_eq(rc, 0, "cache_record_trial: %d %s", rc, err.message);
}

/* Graphs 1 and 2; graph 1 has trials with seeds 1 to 4 on the GPU with
 * CODEGEN (an ok, a wrong, a compile error, an ok), and one each with
 * seeds 5 to 7 on the CPU, with CODEGEN_NEXT, and for graph 2. */
static cache *fill(void)
{
	cache *c = fx_open();

	put_graph(c, 1, "bert_qkv");
	put_graph(c, 2, "gpt3_mlp");
	record(c, 1, DEVICE_GPU, CODEGEN, 1, CACHE_TRIAL_OK, 1.5);
	record(c, 1, DEVICE_GPU, CODEGEN, 2, CACHE_TRIAL_WRONG, 0.7);
	record(c, 1, DEVICE_CPU, CODEGEN, 5, CACHE_TRIAL_OK, 9.0);
	record(c, 1, DEVICE_GPU, CODEGEN, 3, CACHE_TRIAL_COMPILE_ERROR, NAN);
	record(c, 1, DEVICE_GPU, CODEGEN_NEXT, 6, CACHE_TRIAL_OK, 1.1);
	record(c, 2, DEVICE_GPU, CODEGEN, 7, CACHE_TRIAL_OK, 3.0);
	record(c, 1, DEVICE_GPU, CODEGEN, 4, CACHE_TRIAL_OK, 1.25);
	return c;
}

static json_t *trials_of(cache *c, int n, const char *device,
			 const char *codegen, int64_t limit)
{
	cache_error err = { 0 };
	json_t *out = NULL;
	int rc = cache_trials(c, graph_key(n), device, codegen, limit, &out,
			      &err);

	cr_assert_eq(rc, 0, "cache_trials: %d %s", rc, err.message);
	cr_assert(json_is_array(out));
	return out;
}

/* Whether "trial" is {plan: make_plan(2, "seed"), outcome, median_ms}
 * ("median" NaN: null). */
static void expect_trial(json_t *trial, int seed, const char *outcome,
			 double median)
{
	char *text = make_plan(2, seed);
	json_t *plan = json_loads(text, 0, NULL);
	json_t *ms = json_object_get(trial, "median_ms");

	cr_assert_not_null(plan);
	cr_expect(json_equal(json_object_get(trial, "plan"), plan),
		  "plan of seed %d differs", seed);
	cr_expect_str_eq(json_string_value(json_object_get(trial, "outcome")),
			 outcome);
	if (isnan(median))
		cr_expect(json_is_null(ms), "seed %d: median_ms not null", seed);
	else
		cr_expect_float_eq(json_number_value(ms), median, 1e-12);
	cr_expect_eq(json_object_size(trial), 3);
	json_decref(plan);
	free(text);
}

Test(trials, only_the_key_newest_first)
{
	cache *c = fill();
	json_t *got = trials_of(c, 1, DEVICE_GPU, CODEGEN, 0);

	cr_assert_eq(json_array_size(got), 4);
	expect_trial(json_array_get(got, 0), 4, "ok", 1.25);
	expect_trial(json_array_get(got, 1), 3, "compile_error", NAN);
	expect_trial(json_array_get(got, 2), 2, "wrong", 0.7);
	expect_trial(json_array_get(got, 3), 1, "ok", 1.5);
	json_decref(got);

	got = trials_of(c, 1, DEVICE_CPU, CODEGEN, 0);
	cr_assert_eq(json_array_size(got), 1);
	expect_trial(json_array_get(got, 0), 5, "ok", 9.0);
	json_decref(got);

	got = trials_of(c, 1, DEVICE_GPU, CODEGEN_NEXT, 0);
	cr_assert_eq(json_array_size(got), 1);
	expect_trial(json_array_get(got, 0), 6, "ok", 1.1);
	json_decref(got);

	got = trials_of(c, 2, DEVICE_GPU, CODEGEN, 0);
	cr_assert_eq(json_array_size(got), 1);
	expect_trial(json_array_get(got, 0), 7, "ok", 3.0);
	json_decref(got);
	cache_close(c);
}

Test(trials, limit_keeps_the_newest)
{
	cache *c = fill();
	json_t *got = trials_of(c, 1, DEVICE_GPU, CODEGEN, 2);

	cr_assert_eq(json_array_size(got), 2);
	expect_trial(json_array_get(got, 0), 4, "ok", 1.25);
	expect_trial(json_array_get(got, 1), 3, "compile_error", NAN);
	json_decref(got);

	got = trials_of(c, 1, DEVICE_GPU, CODEGEN, 1);
	cr_expect_eq(json_array_size(got), 1);
	json_decref(got);
	got = trials_of(c, 1, DEVICE_GPU, CODEGEN, 100);
	cr_expect_eq(json_array_size(got), 4);
	json_decref(got);
	cache_close(c);
}

Test(trials, unknown_keys_and_devices_give_an_empty_array)
{
	cache *c = fill();
	json_t *got;

	got = trials_of(c, 3, DEVICE_GPU, CODEGEN, 0); /* never put */
	cr_expect_eq(json_array_size(got), 0);
	json_decref(got);
	got = trials_of(c, 1, "cuda: NVIDIA B200 (sm_100)", CODEGEN, 0);
	cr_expect_eq(json_array_size(got), 0);
	json_decref(got);
	got = trials_of(c, 1, DEVICE_GPU, "kgen 9", 0);
	cr_expect_eq(json_array_size(got), 0);
	json_decref(got);
	cache_close(c);

	snprintf(fx.path, sizeof(fx.path), "%s/empty.db", fx.dir);
	c = fx_open(); /* an empty cache: no devices at all */
	got = trials_of(c, 1, DEVICE_GPU, CODEGEN, 0);
	cr_expect_eq(json_array_size(got), 0);
	json_decref(got);
	cache_close(c);
}

Test(trials, a_null_plan_stays_null)
{
	cache *c = fx_open();
	cache_trial t = {
		.graph = graph_key(1), .device = DEVICE_CPU, .codegen = CODEGEN,
		.plan = "null", .outcome = CACHE_TRIAL_ERROR, .median_ms = NAN,
	};
	json_t *got, *trial;

	put_graph(c, 1, NULL);
	cr_assert_eq(cache_record_trial(c, &t, NULL), 0);
	got = trials_of(c, 1, DEVICE_CPU, CODEGEN, 0);
	trial = json_array_get(got, 0);
	cr_assert_not_null(trial);
	cr_expect(json_is_null(json_object_get(trial, "plan")));
	cr_expect_str_eq(json_string_value(json_object_get(trial, "outcome")),
			 "error");
	json_decref(got);
	cache_close(c);
}

/* cache_trials(c, ...) is CACHE_EINVAL with "message" in err, *out NULL. */
static void expect_refused(cache *c, const char *graph, const char *device,
			   const char *codegen, int64_t limit, bool with_out,
			   const char *message)
{
	cache_error err = { 0 };
	json_t *out = json_true();
	int rc = cache_trials(c, graph, device, codegen, limit,
			      with_out ? &out : NULL, &err);

	cr_expect_eq(rc, CACHE_EINVAL, "%s: %d", message, rc);
	cr_expect_eq(err.code, CACHE_EINVAL);
	cr_expect(strstr(err.message, message), "'%s' lacks '%s'", err.message,
		  message);
	if (with_out)
		cr_expect_null(out, "%s: out not cleared", message);
}

Test(trials, bad_arguments_are_refused)
{
	cache *c = fill();

	expect_refused(NULL, graph_key(1), DEVICE_GPU, CODEGEN, 0, true,
		       "no cache");
	expect_refused(c, NULL, DEVICE_GPU, CODEGEN, 0, true,
		       "graph key is missing");
	expect_refused(c, graph_key(1), "", CODEGEN, 0, true,
		       "device signature is missing");
	expect_refused(c, graph_key(1), DEVICE_GPU, NULL, 0, true,
		       "codegen version is missing");
	expect_refused(c, graph_key(1), DEVICE_GPU, CODEGEN, -1, true,
		       "a negative limit");
	expect_refused(c, graph_key(1), DEVICE_GPU, CODEGEN, 0, false, "no out");
	cache_close(c);
}

Test(trials, the_read_leaves_no_snapshot_behind)
{
	cache *c = fill();
	json_t *got = trials_of(c, 1, DEVICE_GPU, CODEGEN, 0);

	json_decref(got);
	record(c, 1, DEVICE_GPU, CODEGEN, 8, CACHE_TRIAL_TIMEOUT, NAN);
	/* a read transaction left open would keep this from finishing */
	cr_expect_eq(cache_checkpoint(c, NULL), 0);
	got = trials_of(c, 1, DEVICE_GPU, CODEGEN, 1);
	expect_trial(json_array_get(got, 0), 8, "timeout", NAN);
	json_decref(got);
	cache_close(c);
}
