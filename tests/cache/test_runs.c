/*
 * test_runs.c: the pins of training runs (runs.c): a run is pinned to the
 * latest version of a key at its first fetch and keeps it while newer
 * versions land, until it advances; runs, devices and codegens pin apart;
 * errors name the run and the key. On both engines (test_pg.c races
 * owners pinning one run on PostgreSQL).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_test.h"

TestSuite(runs, .init = fx_setup, .fini = fx_teardown, .timeout = 60);

static int pin(cache *c, const char *run, int n, const char *device)
{
	cache_error err = {0};
	int version = -1, rc;

	rc = cache_pin(c, run, graph_key(n), device, CODEGEN, &version, &err);
	cr_assert_eq(rc, 0, "cache_pin %s %d: %d %s", run, n, rc, err.message);
	return version;
}

/* The found_by of the version fetched, which publish() numbers by seed. */
static void expect_fetched(cache *c, int n, int version, const char *found_by)
{
	cache_plan *plan = NULL;
	cache_error err = {0};
	int rc = cache_fetch_version(c, graph_key(n), DEVICE_GPU, CODEGEN, version,
				     &plan, &err);

	cr_assert_eq(rc, version, "fetch version %d: %d %s", version, rc, err.message);
	cr_assert_eq(plan->version, version);
	cr_assert_str_eq(plan->found_by, found_by);
	cache_plan_free(plan);
}

Test(runs, a_run_keeps_its_first_version_while_newer_ones_land)
{
	cache *c = fx_open();

	put_graph(c, 1, "layer");
	cr_assert_eq(publish(c, 1, DEVICE_GPU, CODEGEN, 1, 100), 1);
	cr_assert_eq(pin(c, "run-a", 1, DEVICE_GPU), 1);
	cr_assert_eq(publish(c, 1, DEVICE_GPU, CODEGEN, 2, 100), 2);
	cr_assert_eq(publish(c, 1, DEVICE_GPU, CODEGEN, 3, 100), 3);
	for (int rank = 0; rank < 4; rank++)
		cr_assert_eq(pin(c, "run-a", 1, DEVICE_GPU), 1, "rank %d", rank);
	expect_fetched(c, 1, 1, "genetic round 1");
	/* a run that starts now pins the latest; the first keeps its own */
	cr_assert_eq(pin(c, "run-b", 1, DEVICE_GPU), 3);
	cr_assert_eq(pin(c, "run-a", 1, DEVICE_GPU), 1);
	cache_close(c);
}

/* The {key, version, previous} of "key" in what cache_advance gave. */
static json_t *moved_of(json_t *moved, const char *key)
{
	json_t *m;
	size_t i;

	json_array_foreach(moved, i, m)
		if (!strcmp(json_string_value(json_object_get(m, "key")), key))
			return m;
	cr_assert_fail("key %s not in what advance gave", key);
	return NULL;
}

static void expect_moved(json_t *moved, int n, int previous, int version)
{
	json_t *m = moved_of(moved, graph_key(n));

	cr_assert_eq(json_integer_value(json_object_get(m, "previous")), previous,
		     "graph %d", n);
	cr_assert_eq(json_integer_value(json_object_get(m, "version")), version,
		     "graph %d", n);
}

Test(runs, advance_moves_every_pin_of_the_run_and_no_other_run)
{
	cache *c = fx_open();
	cache_error err = {0};
	json_t *moved = NULL;

	for (int n = 1; n <= 3; n++) {
		put_graph(c, n, NULL);
		publish(c, n, DEVICE_GPU, CODEGEN, 1, 10);
		cr_assert_eq(pin(c, "run-a", n, DEVICE_GPU), 1);
	}
	cr_assert_eq(pin(c, "run-b", 1, DEVICE_GPU), 1);
	publish(c, 1, DEVICE_GPU, CODEGEN, 2, 10);
	publish(c, 2, DEVICE_GPU, CODEGEN, 2, 10);
	publish(c, 2, DEVICE_GPU, CODEGEN, 3, 10);
	cr_assert_eq(cache_advance(c, "run-a", DEVICE_GPU, CODEGEN, NULL, 0, &moved,
				   &err),
		     0, "%s", err.message);
	cr_assert_eq(json_array_size(moved), 3);
	expect_moved(moved, 1, 1, 2);
	expect_moved(moved, 2, 1, 3);
	expect_moved(moved, 3, 1, 1);
	json_decref(moved);
	cr_assert_eq(pin(c, "run-a", 1, DEVICE_GPU), 2);
	cr_assert_eq(pin(c, "run-a", 2, DEVICE_GPU), 3);
	cr_assert_eq(pin(c, "run-a", 3, DEVICE_GPU), 1);
	cr_assert_eq(pin(c, "run-b", 1, DEVICE_GPU), 1, "another run moves not");
	cache_close(c);
}

Test(runs, advance_of_listed_keys_pins_those_the_run_had_not)
{
	const char *keys[2];
	cache *c = fx_open();
	cache_error err = {0};
	json_t *moved = NULL;

	for (int n = 1; n <= 2; n++) {
		put_graph(c, n, NULL);
		publish(c, n, DEVICE_GPU, CODEGEN, 1, 10);
	}
	cr_assert_eq(pin(c, "run-a", 1, DEVICE_GPU), 1);
	publish(c, 1, DEVICE_GPU, CODEGEN, 2, 10);
	publish(c, 2, DEVICE_GPU, CODEGEN, 2, 10);
	keys[0] = strdup(graph_key(2));
	cr_assert_eq(cache_advance(c, "run-a", DEVICE_GPU, CODEGEN, keys, 1, &moved,
				   &err),
		     0, "%s", err.message);
	cr_assert_eq(json_array_size(moved), 1);
	expect_moved(moved, 2, 0, 2);
	json_decref(moved);
	cr_assert_eq(pin(c, "run-a", 1, DEVICE_GPU), 1, "not listed: not moved");
	/* a listed key with no version refuses the whole advance */
	put_graph(c, 3, NULL);
	keys[1] = strdup(graph_key(3));
	keys[0] = strcpy((char *)keys[0], graph_key(1));
	cr_assert_eq(cache_advance(c, "run-a", DEVICE_GPU, CODEGEN, keys, 2, &moved,
				   &err),
		     CACHE_NOT_FOUND);
	cr_assert_null(moved);
	cr_assert(strstr(err.message, "run 'run-a'") &&
			  strstr(err.message, graph_key(3)) &&
			  strstr(err.message, "no version yet"),
		  "%s", err.message);
	cr_assert_eq(pin(c, "run-a", 1, DEVICE_GPU), 1, "rolled back");
	free((char *)keys[0]);
	free((char *)keys[1]);
	cache_close(c);
}

Test(runs, devices_and_codegens_pin_apart)
{
	cache *c = fx_open();
	cache_error err = {0};
	int version = -1;

	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_GPU, CODEGEN, 1, 10);
	publish(c, 1, DEVICE_CPU, CODEGEN, 1, 10);
	cr_assert_eq(pin(c, "run-a", 1, DEVICE_GPU), 1);
	publish(c, 1, DEVICE_CPU, CODEGEN, 2, 10);
	cr_assert_eq(pin(c, "run-a", 1, DEVICE_CPU), 2);
	cr_assert_eq(cache_pin(c, "run-a", graph_key(1), DEVICE_GPU, "kgen 0.2",
			       &version, &err),
		     CACHE_NOT_FOUND);
	cr_assert_eq(version, 0);
	cache_close(c);
}

Test(runs, errors_name_the_run_and_the_key)
{
	cache *c = fx_open();
	cache_error err = {0};
	json_t *moved = NULL;
	char long_run[CACHE_RUN_MAX + 2], named[80];
	int version = -1;

	put_graph(c, 1, NULL);
	cr_assert_eq(cache_pin(c, "run-a", graph_key(1), DEVICE_GPU, CODEGEN, &version,
			       &err),
		     CACHE_NOT_FOUND);
	cr_assert(strstr(err.message, "run 'run-a' cannot pin graph") &&
			  strstr(err.message, graph_key(1)),
		  "%s", err.message);
	cr_assert_eq(cache_advance(c, "run-a", DEVICE_GPU, CODEGEN, NULL, 0, &moved,
				   &err),
		     CACHE_NOT_FOUND);
	cr_assert(strstr(err.message, "run 'run-a' has pinned no key"), "%s",
		  err.message);
	memset(long_run, 'r', sizeof(long_run) - 1);
	long_run[sizeof(long_run) - 1] = 0;
	cr_assert_eq(cache_pin(c, long_run, graph_key(1), DEVICE_GPU, CODEGEN, &version,
			       &err),
		     CACHE_EINVAL);
	cr_assert(strstr(err.message, "1 to 128 bytes"), "%s", err.message);
	/* the long run is named by its first 40 bytes, not "this one" */
	snprintf(named, sizeof(named), "run id '%.40s...' is %d bytes", long_run,
		 CACHE_RUN_MAX + 1);
	cr_assert(strstr(err.message, named), "%s", err.message);
	cr_assert_eq(cache_pin(c, "a\nb", graph_key(1), DEVICE_GPU, CODEGEN, &version,
			       &err),
		     CACHE_EINVAL);
	cr_assert(strstr(err.message, "control character"), "%s", err.message);
	cr_assert_eq(cache_pin(c, "", graph_key(1), DEVICE_GPU, CODEGEN, &version,
			       &err),
		     CACHE_EINVAL);
	cache_close(c);
}

Test(runs, a_version_no_longer_held_is_not_found_saying_which)
{
	cache *c = fx_open();
	cache_error err = {0};
	cache_plan *plan = NULL;

	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_GPU, CODEGEN, 1, 10);
	cr_assert_eq(cache_fetch_version(c, graph_key(1), DEVICE_GPU, CODEGEN, 2, &plan,
					 &err),
		     CACHE_NOT_FOUND);
	cr_assert_null(plan);
	cr_assert(strstr(err.message, "no version 2 of graph") &&
			  strstr(err.message, graph_key(1)),
		  "%s", err.message);
	cr_assert_eq(cache_fetch_version(c, graph_key(1), DEVICE_GPU, CODEGEN, 0, &plan,
					 &err),
		     CACHE_EINVAL);
	cache_close(c);
}

Test(runs, a_reader_cannot_pin)
{
	cache *c = fx_open(), *r = NULL;
	cache_error err = {0};
	int version;

	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_GPU, CODEGEN, 1, 10);
	cr_assert_eq(cache_open_reader(c, &r, &err), 0, "%s", err.message);
	cr_assert_eq(cache_pin(r, "run-a", graph_key(1), DEVICE_GPU, CODEGEN, &version,
			       &err),
		     CACHE_ETHREAD);
	cache_close(r);
	cache_close(c);
}
