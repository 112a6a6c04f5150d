/*
 * test_measure.c: tuned-worker under supervision: a planted crashing
 * kernel and a planted hanging kernel each kill only the worker, and the
 * next candidate is measured correctly by a fresh one; compile errors,
 * wrong kernels and bad requests come back as answers. The other ops:
 * compile into a shared folder that a second worker, with no compiler,
 * measures from; probe; retime; an unknown op; a library step; a
 * candidate timed beside another plan, cut short by a ratio to it, or
 * timed alone where that plan does not read.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kgen.h"
#include "tuner.h"

#define GRAPH "{\"version\": 1, \"tensors\": {\"x\": {\"shape\": [64], \"dtype\": " \
	      "\"f32\", \"role\": \"input\"}, \"y\": {\"shape\": [64], \"dtype\": " \
	      "\"f32\", \"role\": \"output\"}}, \"ops\": [\"y[i] = x[i] * 2 + 1\"]}"

static tuner_worker *cpu_worker(void)
{
	const char *argv[] = {"tuned-worker", "--backend", "cpu", NULL};
	tuner_worker *worker = tuner_worker_new(getenv("TUNED_WORKER"), argv);

	cr_assert_not_null(worker);
	return worker;
}

/* A request for the graph, with kernel 0's source replaced by "source"
 * unless it is NULL. */
static json_t *request(const char *graph, const char *source)
{
	json_t *req = json_pack("{s:s, s:i, s:{s:i, s:i, s:i, s:f}}", "graph", graph,
				"seed", 3, "timing", "warmup", 0, "min_runs", 2,
				"max_runs", 3, "budget_ms", 10.0);

	if (source)
		json_object_set_new(req, "sources", json_pack("[s]", source));
	return req;
}

static tuner_reply ask(tuner_worker *worker, json_t *req, double timeout_s)
{
	tuner_reply reply = {0};

	cr_assert_eq(tuner_worker_ask(worker, req, timeout_s, &reply), 0, "%s",
		     reply.detail);
	json_decref(req);
	return reply;
}

static const char *kind_of(const tuner_reply *reply)
{
	return json_string_value(json_object_get(reply->answer, "kind"));
}

static void expect_measured(tuner_worker *worker)
{
	tuner_reply reply = ask(worker, request(GRAPH, NULL), 60);

	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect_str_eq(kind_of(&reply), "ok");
	cr_expect(json_is_true(json_object_get(reply.answer, "verified")));
	cr_expect_gt(json_real_value(json_object_get(reply.answer, "total_ms")), 0);
	json_decref(reply.answer);
}

Test(measure, a_crashing_kernel_kills_only_the_worker)
{
	tuner_worker *worker = cpu_worker();
	tuner_reply reply = ask(worker, request(GRAPH, "void k0_y(void **t)\n"
					"{ (void)t; *(volatile int *)0 = 1; }\n"), 60);

	cr_expect_eq(reply.outcome, TUNER_CRASHED, "%s", reply.detail);
	cr_expect_eq(reply.term_signal, SIGSEGV, "%s", reply.detail);
	expect_measured(worker);
	cr_expect_eq(tuner_worker_starts(worker), 2);
	tuner_worker_free(worker);
}

Test(measure, a_hanging_kernel_times_out_and_the_next_is_measured)
{
	tuner_worker *worker = cpu_worker();
	tuner_reply reply = ask(worker, request(GRAPH, "void k0_y(void **t)\n"
					"{ (void)t; for (volatile int i = 0;; i++) ; }\n"), 5);

	cr_expect_eq(reply.outcome, TUNER_TIMED_OUT, "%s", reply.detail);
	expect_measured(worker);
	cr_expect_eq(tuner_worker_starts(worker), 2);
	tuner_worker_free(worker);
}

Test(measure, failures_are_answers)
{
	tuner_worker *worker = cpu_worker();
	tuner_reply reply = ask(worker, request(GRAPH, "void k0_y(void **t) { oops }\n"), 60);

	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect_str_eq(kind_of(&reply), "compile_error");
	cr_expect_not_null(json_object_get(reply.answer, "log"));
	json_decref(reply.answer);

	reply = ask(worker, request(GRAPH, "void k0_y(void **t)\n{ float *x = t[0], "
				    "*y = t[1]; for (int i = 0; i < 64; i++) y[i] = x[i]; }\n"), 60);
	cr_expect_str_eq(kind_of(&reply), "wrong");
	cr_expect(json_is_false(json_object_get(reply.answer, "verified")));
	json_decref(reply.answer);

	reply = ask(worker, request("{\"version\": 2}", NULL), 60);
	cr_expect_str_eq(kind_of(&reply), "invalid");
	json_decref(reply.answer);

	reply = ask(worker, json_pack("{s:s, s:{s:[]}}", "graph", GRAPH, "plan",
				      "kernels"), 60);
	cr_expect_str_eq(kind_of(&reply), "invalid_plan");
	json_decref(reply.answer);
	cr_expect_eq(tuner_worker_starts(worker), 1);
	tuner_worker_free(worker);
}

/* A first run slower than the cutoff ends the timing: the candidate is
 * verified, its one run is its time, and no kernel is timed alone. */
Test(measure, a_slow_candidate_is_cut_short)
{
	tuner_worker *worker = cpu_worker();
	json_t *req = request(GRAPH, NULL);
	tuner_reply reply;

	json_object_set_new(req, "cutoff_ms", json_real(1e-9));
	reply = ask(worker, req, 60);
	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect_str_eq(kind_of(&reply), "ok");
	cr_expect(json_is_true(json_object_get(reply.answer, "verified")));
	cr_expect(json_is_true(json_object_get(reply.answer, "cut")));
	cr_expect_eq(json_array_size(json_object_get(reply.answer, "kernels")), 0);
	cr_expect_eq(json_integer_value(json_object_get(reply.answer, "total_runs")), 1);
	json_decref(reply.answer);
	tuner_worker_free(worker);
}

/* The graph's one op computed by a kernel that first spins for
 * milliseconds: verified, and far slower than any plan of the graph. */
#define SLOW_SOURCE                                                                    \
	"void k0_y(void **t)\n{\n\tconst float *x = t[0];\n"                           \
	"\tfloat *y = t[1];\n\tfor (volatile int s = 0; s < 2000000; s++)\n"           \
	"\t\t;\n\tfor (int i = 0; i < 64; i++)\n\t\ty[i] = x[i] * 2 + 1;\n}\n"

/* The plan of the graph's op in tiles of 16: the plan timed beside. */
static json_t *tiled_plan(void)
{
	return json_pack("{s:[{s:[i], s:{s:[i]}}]}", "kernels", "ops", 0, "schedule",
			 "tile", 16);
}

/* A candidate timed beside another plan runs in turns with it: as many
 * runs of each, and the median of their ratios, which says the slow
 * kernel is slower by far; the same plan again is the one kept. */
Test(measure, a_candidate_is_timed_beside_another_plan)
{
	tuner_worker *worker = cpu_worker();

	for (int again = 0; again < 2; again++) {
		json_t *req = request(GRAPH, SLOW_SOURCE), *beside;
		tuner_reply reply;

		json_object_set_new(req, "beside", tiled_plan());
		reply = ask(worker, req, 60);
		cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
		cr_expect_str_eq(kind_of(&reply), "ok");
		beside = json_object_get(reply.answer, "beside");
		cr_assert_not_null(beside, "%s", json_dumps(reply.answer, 0));
		cr_expect_eq(json_integer_value(json_object_get(beside, "runs")),
			     json_integer_value(
				     json_object_get(reply.answer, "total_runs")));
		cr_expect_geq(json_integer_value(json_object_get(beside, "runs")), 2);
		cr_expect_gt(json_real_value(json_object_get(beside, "median_ms")), 0);
		cr_expect_gt(json_real_value(json_object_get(beside, "ratio")), 10,
			     "a kernel that spins for milliseconds, beside one of 64 "
			     "floats: %s",
			     json_dumps(beside, 0));
		json_decref(reply.answer);
	}
	cr_expect_eq(tuner_worker_starts(worker), 1);
	tuner_worker_free(worker);
}

/* Beside another plan, the cutoff is a ratio to that plan's first run. */
Test(measure, a_candidate_slower_than_the_ratio_beside_is_cut_short)
{
	tuner_worker *worker = cpu_worker();
	json_t *req = request(GRAPH, SLOW_SOURCE);
	tuner_reply reply;

	json_object_set_new(req, "beside", tiled_plan());
	json_object_set_new(req, "cutoff_ratio", json_real(2.0));
	reply = ask(worker, req, 60);
	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect(json_is_true(json_object_get(reply.answer, "cut")), "%s",
		  json_dumps(reply.answer, 0));
	cr_expect_eq(json_integer_value(json_object_get(reply.answer, "total_runs")),
		     1);
	cr_expect_gt(json_real_value(
			     json_object_get(json_object_get(reply.answer, "beside"),
					     "ratio")),
		     2.0);
	json_decref(reply.answer);
	tuner_worker_free(worker);
}

/* A plan to time beside that is not one of the graph's: the candidate is
 * timed alone, and the answer says why. */
Test(measure, a_plan_beside_that_does_not_read_is_named_and_the_candidate_timed_alone)
{
	tuner_worker *worker = cpu_worker();
	json_t *req = request(GRAPH, NULL);
	tuner_reply reply;
	const char *why;

	json_object_set_new(req, "beside",
			    json_pack("{s:[{s:[i]}]}", "kernels", "ops", 7));
	reply = ask(worker, req, 60);
	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect_str_eq(kind_of(&reply), "ok");
	cr_expect_gt(json_real_value(json_object_get(reply.answer, "total_ms")), 0);
	cr_expect_null(json_object_get(reply.answer, "beside"));
	why = json_string_value(json_object_get(reply.answer, "beside_error"));
	cr_expect(why && strstr(why, "op 7"), "%s", json_dumps(reply.answer, 0));
	json_decref(reply.answer);
	tuner_worker_free(worker);
}

static tuner_worker *shared_worker(const char *dir)
{
	const char *argv[] = {"tuned-worker", "--backend", "cpu", "--share", dir, NULL};
	tuner_worker *worker = tuner_worker_new(getenv("TUNED_WORKER"), argv);

	cr_assert_not_null(worker);
	return worker;
}

static void remove_share(const char *dir)
{
	kgen_empty_folder(dir);
	rmdir(dir);
}

static json_t *compile_request(const char *source)
{
	json_t *req = json_pack("{s:s, s:s, s:n}", "op", "compile", "graph", GRAPH,
				"plan");

	if (source)
		json_object_set_new(req, "sources", json_pack("[s]", source));
	return req;
}

/* A compile worker fills the shared folder; a measuring worker whose
 * compiler is gone (CC=/nonexistent) measures from it. */
Test(measure, compiled_kernels_are_measured_by_another_worker)
{
	char dir[] = "/tmp/tuned-test-share-XXXXXX";
	tuner_worker *compiler, *measurer;
	tuner_reply reply;

	cr_assert_not_null(mkdtemp(dir));
	compiler = shared_worker(dir);
	reply = ask(compiler, compile_request(NULL), 60);
	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect_str_eq(kind_of(&reply), "ok");
	cr_expect_gt(json_real_value(json_object_get(reply.answer, "ms")), 0);
	cr_expect(json_is_array(json_object_get(json_object_get(reply.answer, "plan"),
						"kernels")));
	json_decref(reply.answer);

	reply = ask(compiler, compile_request("void k0_y(void **t) { oops }\n"), 60);
	cr_expect_str_eq(kind_of(&reply), "compile_error");
	cr_expect_not_null(json_object_get(reply.answer, "log"));
	json_decref(reply.answer);
	tuner_worker_free(compiler);

	setenv("CC", "/nonexistent", 1);
	measurer = shared_worker(dir);
	expect_measured(measurer);
	tuner_worker_free(measurer);
	remove_share(dir);
}

Test(measure, compile_without_a_shared_folder_is_an_error)
{
	tuner_worker *worker = cpu_worker();
	tuner_reply reply = ask(worker, compile_request(NULL), 60);

	cr_expect_str_eq(kind_of(&reply), "error");
	cr_expect(strstr(json_string_value(json_object_get(reply.answer, "error")),
			 "shared folder") != NULL);
	json_decref(reply.answer);
	tuner_worker_free(worker);
}

Test(measure, the_probe_answers_positive_peaks)
{
	tuner_worker *worker = cpu_worker();
	tuner_reply reply = ask(worker, json_pack("{s:s}", "op", "probe"), 60);
	static const char *const fields[] = {"bandwidth_gbs", "gflops", "launch_ms"};

	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect_str_eq(kind_of(&reply), "ok");
	for (int i = 0; i < 3; i++)
		cr_expect_gt(json_real_value(json_object_get(reply.answer, fields[i])), 0,
			     "%s", fields[i]);
	cr_expect_gt(json_integer_value(json_object_get(reply.answer, "cores")), 0);
	cr_expect_eq(json_is_true(json_object_get(reply.answer, "library")),
		     kgen_library_available("cpu"));
	json_decref(reply.answer);
	tuner_worker_free(worker);
}

#define PRODUCT "{\"version\": 1, \"tensors\": {\"a\": {\"shape\": [8, 16], " \
		"\"dtype\": \"f32\", \"role\": \"input\"}, \"b\": {\"shape\": [16, 4], " \
		"\"dtype\": \"f32\", \"role\": \"input\"}, \"c\": {\"shape\": [8, 4], " \
		"\"dtype\": \"f32\", \"role\": \"output\"}}, " \
		"\"ops\": [\"c[i, j] = sum(k) a[i, k] * b[k, j]\"]}"

/* A library step is measured like any kernel, and its source says it is
 * one (docs/protocol.md, fetch). */
Test(measure, a_library_step_is_measured_and_marked)
{
	tuner_worker *worker;
	tuner_reply reply;
	json_t *req = request(PRODUCT, NULL), *source;

	if (!kgen_library_available("cpu"))
		cr_skip_test("no CBLAS here");
	worker = cpu_worker();
	json_object_set_new(req, "plan", json_loads("{\"kernels\": [{\"ops\": [0], "
				"\"schedule\": {\"library\": true}}]}", 0, NULL));
	reply = ask(worker, req, 60);
	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect_str_eq(kind_of(&reply), "ok", "%s", json_string_value(
				 json_object_get(reply.answer, "error")));
	cr_expect(json_is_true(json_object_get(reply.answer, "verified")));
	source = json_array_get(json_object_get(reply.answer, "sources"), 0);
	cr_expect(json_is_true(json_object_get(source, "library")));
	cr_expect(strstr(json_string_value(json_object_get(source, "source")), "cblas_sgemm"));
	json_decref(reply.answer);
	tuner_worker_free(worker);
}

/* Two plans, the default and another tiling, timed side by side; a plan
 * that does not read answers its error in its place. */
Test(measure, retime_times_plans_side_by_side)
{
	tuner_worker *worker = cpu_worker();
	json_t *req = json_pack("{s:s, s:s, s:[n, {s:[{s:[i], s:{s:[i]}}]}, {s:[]}], "
				"s:i, s:i}", "op", "retime", "graph", GRAPH, "plans",
				"kernels", "ops", 0, "schedule", "tile", 16,
				"kernels", "seed", 1, "rounds", 3);
	tuner_reply reply = ask(worker, req, 60);
	json_t *times;

	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect_str_eq(kind_of(&reply), "ok");
	times = json_object_get(reply.answer, "times");
	cr_assert_eq(json_array_size(times), 3);
	for (int i = 0; i < 2; i++) {
		json_t *t = json_array_get(times, i);

		cr_expect_gt(json_real_value(json_object_get(t, "median_ms")), 0,
			     "plan %d", i);
		cr_expect_geq(json_real_value(json_object_get(t, "spread_ms")), 0);
		cr_expect_eq(json_integer_value(json_object_get(t, "runs")), 3);
		cr_expect_eq(json_array_size(json_object_get(t, "rounds_ms")), 3,
			     "each round's time, for comparing round by round");
	}
	cr_expect_not_null(json_object_get(json_array_get(times, 2), "error"));
	json_decref(reply.answer);
	tuner_worker_free(worker);
}

Test(measure, an_unknown_op_is_refused_and_the_worker_serves_on)
{
	tuner_worker *worker = cpu_worker();
	tuner_reply reply = ask(worker, json_pack("{s:s}", "op", "frobnicate"), 60);

	cr_assert_eq(reply.outcome, TUNER_ANSWERED, "%s", reply.detail);
	cr_expect_str_eq(kind_of(&reply), "invalid");
	cr_expect(strstr(json_string_value(json_object_get(reply.answer, "error")),
			 "frobnicate") != NULL);
	json_decref(reply.answer);
	expect_measured(worker);
	cr_expect_eq(tuner_worker_starts(worker), 1);
	tuner_worker_free(worker);
}
