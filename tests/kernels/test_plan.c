/*
 * test_plan.c: plans as data: the default plan, round trips through JSON,
 * and every kind of invalid plan refused with its reason.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "graph_builder.h"
#include "kgen.h"

#define CHAIN "x f32 64,48 in; w f32 48,32 in; t f32 64,32; y f32 64,32 out"

static sched_graph *chain_graph(void)
{
	sched_graph *g = NULL;
	sched_error err = {0};

	cr_assert_eq(load_graph(CHAIN, OPS("t[i, j] = sum(k) x[i, k] * w[k, j]",
					   "y[i, j] = relu(t[i, j])"), &g, &err),
		     SCHED_OK, "%s", err.message);
	return g;
}

/* "plan_text" is refused on "g" with "message"; frees "g". */
static void expect_refused_on(sched_graph *g, const char *plan_text, const char *message)
{
	json_t *json = json_loads(plan_text, 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	cr_assert_not_null(json, "bad test JSON: %s", plan_text);
	cr_expect_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_EPLAN, "%s",
		     plan_text);
	cr_expect_null(plan);
	cr_expect_str_eq(err.message, message);
	json_decref(json);
	sched_graph_free(g);
}

static void expect_refused(const char *plan_text, const char *message)
{
	expect_refused_on(chain_graph(), plan_text, message);
}

Test(plan, default_plan_round_trips)
{
	sched_graph *g = chain_graph();
	kgen_plan *plan = kgen_plan_default(g), *again = NULL;
	json_t *json = kgen_plan_to_json(g, plan), *json2;
	kgen_error err = {0};

	cr_assert_eq(plan->nkernels, 2);
	cr_expect_str_eq(plan->kernels[0].name, "k0_t");
	cr_expect_eq(plan->kernels[0].schedule.tile[1], 32);
	cr_expect_eq(plan->kernels[0].schedule.threads[0], 8);
	cr_assert_eq(kgen_plan_from_json(g, json, &again, &err), KGEN_OK, "%s",
		     err.message);
	json2 = kgen_plan_to_json(g, again);
	cr_expect(json_equal(json, json2));
	json_decref(json);
	json_decref(json2);
	kgen_plan_free(plan);
	kgen_plan_free(again);
	sched_graph_free(g);
}

Test(plan, missing_fields_take_defaults)
{
	sched_graph *g = chain_graph();
	json_t *json = json_loads("{\"kernels\": [{\"ops\": [0], \"schedule\": "
				  "{\"tile\": [16, 16], \"split\": \"warp\"}}, "
				  "{\"ops\": [1], \"name\": \"relu\"}]}", 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	cr_assert_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_OK, "%s",
		     err.message);
	cr_expect_eq(plan->kernels[0].schedule.threads[1], 16);
	cr_expect_eq(plan->kernels[0].schedule.threads[0], 8);
	cr_expect_eq(plan->kernels[0].schedule.split, KGEN_SPLIT_WARP);
	cr_expect_str_eq(plan->kernels[1].name, "relu");
	kgen_plan_free(plan);
	json_decref(json);
	sched_graph_free(g);
}

Test(plan, invalid_plans_are_refused_with_a_reason)
{
	expect_refused("{\"kernels\": []}",
		       "a plan is an object whose 'kernels' lists 1 to 4096 kernels");
	expect_refused("{\"kernels\": [{\"ops\": [0]}, {\"ops\": [7]}]}",
		       "kernel 1: op 7 does not exist (the graph has 2 ops)");
	expect_refused("{\"kernels\": [{\"ops\": [0]}, {\"ops\": [0]}]}",
		       "op 0 is in kernels 0 and 1");
	expect_refused("{\"kernels\": [{\"ops\": [0]}]}", "op 1 is in no kernel");
	expect_refused("{\"kernels\": [{\"ops\": [1]}, {\"ops\": [0]}]}",
		       "kernel 'k0_y' reads 't' before any kernel writes it");
	expect_refused("{\"kernels\": [{\"ops\": [0, 1], \"lanes\": [0, 1]}]}",
		       "kernel 'k0_y': 'lanes' lists 2 lanes for 1 branches");
	expect_refused("{\"kernels\": [{\"ops\": [0], \"name\": \"a\"}, "
		       "{\"ops\": [1], \"name\": \"a\"}]}", "two kernels are named 'a'");
	expect_refused("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"tile\": [65, 8]}}, "
		       "{\"ops\": [1]}]}",
		       "kernel 'k0_t': tile 65 of dim 0 is outside 1..64");
	expect_refused("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"tile\": [8]}}, "
		       "{\"ops\": [1]}]}",
		       "kernel 'k0_t': 'tile' must list 2 integers, one per output dim");
	expect_refused("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"tile\": [64, 32], "
		       "\"threads\": [64, 32]}}, {\"ops\": [1]}]}",
		       "kernel 'k0_t': 2048 threads per block, more than 1024");
	expect_refused("{\"kernels\": [{\"ops\": [0]}, {\"ops\": [1], \"schedule\": "
		       "{\"split\": \"warp\"}}]}",
		       "kernel 'k1_y': split \"warp\" needs a reduction, and op 1 has none");
	expect_refused("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"split\": \"warp\", "
		       "\"threads\": [1, 20]}}, {\"ops\": [1]}]}",
		       "kernel 'k0_t': split \"warp\" needs whole warps, and 20 threads "
		       "is not a multiple of 32");
	expect_refused("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"vector\": 3}}, "
		       "{\"ops\": [1]}]}",
		       "kernel 'k0_t': 'vector' must be 1, 2, 4 or 8");
	expect_refused("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"shared\": [\"x\"]}}, "
		       "{\"ops\": [1]}]}",
		       "kernel 'k0_t': staging inputs in shared memory is not supported "
		       "yet; give \"shared\": []");
	expect_refused("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"tiles\": [8, 8]}}, "
		       "{\"ops\": [1]}]}", "kernel 'k0_t': unknown schedule key 'tiles'");
	expect_refused("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"parallel\": 3}}, "
		       "{\"ops\": [1]}]}",
		       "kernel 'k0_t': 'parallel' must be an integer from 0 to 2");
}

/* "parts" cuts the reduction of a kernel of one reducing op printed from
 * its tiles, a point at least per part, into partial results of at most
 * 256 MiB. */
Test(plan, parts_are_for_a_reduction_of_one_op)
{
	expect_refused("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"parts\": 0}}, "
		       "{\"ops\": [1]}]}",
		       "kernel 'k0_t': 'parts' must be an integer from 1 to 1024");
	expect_refused("{\"kernels\": [{\"ops\": [0]}, {\"ops\": [1], \"schedule\": "
		       "{\"parts\": 2}}]}",
		       "kernel 'k1_y': 'parts' cuts a reduction, and op 1 reduces nothing");
	expect_refused("{\"kernels\": [{\"ops\": [0], \"schedule\": {\"parts\": 49}}, "
		       "{\"ops\": [1]}]}",
		       "kernel 'k0_t': 49 parts for the 48 points of its reduction");
	expect_refused("{\"kernels\": [{\"ops\": [0, 1], \"schedule\": {\"parts\": 2}}]}",
		       "kernel 'k0_y': 'parts' is for a kernel of one op, not a fused one");
	sched_graph *g = NULL;
	sched_error serr = {0};

	cr_assert_eq(load_graph("x f16 64,48 in; w f16 48,32 in; t f16 64,32 out",
				OPS("t[i, j] = sum(k) x[i, k] * w[k, j]"), &g, &serr),
		     SCHED_OK, "%s", serr.message);
	expect_refused_on(g, "{\"kernels\": [{\"ops\": [0], \"schedule\": {\"parts\": 2, "
			  "\"mma\": {\"bm\": 64, \"bn\": 32, \"bk\": 16, \"wm\": 32, "
			  "\"wn\": 32, \"stages\": 2}}}]}",
			  "kernel 'k0_t': 'parts' does not go with 'mma' (its 'split_k' cuts K)");
	cr_assert_eq(load_graph("x f32 4096,4096 in; y f32 4096,4096 out",
				OPS("y[i, j] = sum(k) x[i, k] * x[k, j]"), &g, &serr),
		     SCHED_OK, "%s", serr.message);
	expect_refused_on(g, "{\"kernels\": [{\"ops\": [0], \"schedule\": {\"parts\": 1024}}]}",
			  "kernel 'k0_y': its 1024 parts' partial results take 65536 MiB, "
			  "more than 256");
}

Test(plan, cpu_tile_of_accumulators_is_bounded)
{
	sched_graph *g = NULL;
	sched_error serr = {0};
	json_t *json = json_loads("{\"kernels\": [{\"ops\": [0], \"schedule\": "
				  "{\"tile\": [256, 128], \"threads\": [8, 32]}}]}", 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};

	cr_assert_eq(load_graph("x f32 256,8 in; w f32 8,128 in; y f32 256,128 out",
				OPS("y[i, j] = sum(k) x[i, k] * w[k, j]"), &g, &serr),
		     SCHED_OK);
	cr_expect_eq(kgen_plan_from_json(g, json, &plan, &err), KGEN_EPLAN);
	cr_expect_str_eq(err.message, "kernel 'k0_y': a tile of 32768 elements, "
			 "more than 16384");
	json_decref(json);
	sched_graph_free(g);
}

/* Written plans keep only what differs from the defaults; reading one
 * back must give the same schedules, default or not. */
Test(plan, written_plans_read_back_the_same)
{
	sched_graph *g = chain_graph();
	kgen_plan *plan = kgen_plan_default(g), *again = NULL;
	kgen_error err = {0};
	json_t *json;

	plan->kernels[0].schedule.tile[0] = 16;
	plan->kernels[0].schedule.threads[1] = 4;
	plan->kernels[0].schedule.split = KGEN_SPLIT_BLOCK;
	plan->kernels[0].schedule.parts = 48;
	plan->kernels[1].schedule.vector = 4;
	plan->kernels[1].schedule.parallel = 1;
	json = kgen_plan_to_json(g, plan);
	cr_assert_eq(kgen_plan_from_json(g, json, &again, &err), KGEN_OK, "%s", err.message);
	for (int k = 0; k < 2; k++)
		cr_expect_eq(memcmp(&plan->kernels[k].schedule, &again->kernels[k].schedule,
				    sizeof(kgen_schedule)), 0, "kernel %d", k);
	json_decref(json);
	kgen_plan_free(plan);
	plan = kgen_plan_default(g);
	json = kgen_plan_to_json(g, plan);
	cr_expect_null(json_object_get(json_array_get(json_object_get(json, "kernels"), 0),
				       "schedule"), "a default schedule is written empty");
	json_decref(json);
	kgen_plan_free(plan);
	kgen_plan_free(again);
	sched_graph_free(g);
}
