/*
 * test_quarantine.c: the quarantine's repro bundles: kept with each plan,
 * listed whole or for one key, the plans of one (graph, device, codegen)
 * for the daemon to skip, and a cache file of schema version 1 migrated
 * with its entries kept.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>

#include "cache_test.h"

TestSuite(quarantine, .init = fx_setup, .fini = fx_teardown, .timeout = 60);

#define PLAN "{\"kernels\":[{\"name\":\"k0\",\"ops\":[0]}]}"
#define SOURCES "[{\"kernel\":\"k0\",\"language\":\"c\",\"source\":\"void k0(void **t) {}\"}]"
#define GRAPH_JSON "{\"name\": \"scale\", \"ops\": []}"

static cache_quarantine_entry crash_of(int graph, const char *plan)
{
	return (cache_quarantine_entry){
		.graph = graph_key(graph), .device = DEVICE_CPU, .codegen = CODEGEN,
		.plan = plan, .reason = "worker killed by signal 11 (Segmentation fault)",
		.cause = "crash", .signal = SIGSEGV, .seed = 7, .graph_json = GRAPH_JSON,
		.sources = SOURCES, .worker_log = "loading k0\nrunning k0\n"};
}

Test(quarantine, the_bundle_is_kept_and_listed)
{
	cache *c = fx_open();
	cache_quarantine_entry q = crash_of(1, PLAN);
	cache_error err = {0};
	json_t *entries = NULL, *e, *plans = NULL, *source, *plan;

	put_graph(c, 1, "scale");
	put_graph(c, 2, NULL);
	cr_assert_eq(cache_quarantine(c, &q, &err), 0, "%s", err.message);
	q = crash_of(2, "{\"kernels\":[]}");
	q.cause = "timeout";
	q.signal = 0;
	q.time_limit_s = 12.5;
	q.sources = q.worker_log = q.graph_json = NULL;
	cr_assert_eq(cache_quarantine(c, &q, &err), 0, "%s", err.message);

	cr_assert_eq(cache_quarantine_entries(c, NULL, &entries, &err), 0, "%s", err.message);
	cr_assert_eq(json_array_size(entries), 2);
	e = json_array_get(entries, 0);
	cr_expect_str_eq(json_string_value(json_object_get(e, "key")), graph_key(1));
	cr_expect_str_eq(json_string_value(json_object_get(e, "name")), "scale");
	cr_expect_str_eq(json_string_value(json_object_get(e, "device")), DEVICE_CPU);
	cr_expect_str_eq(json_string_value(json_object_get(e, "codegen")), CODEGEN);
	cr_expect_str_eq(json_string_value(json_object_get(e, "cause")), "crash");
	cr_expect_eq(json_integer_value(json_object_get(e, "signal")), SIGSEGV);
	cr_expect(json_is_null(json_object_get(e, "time_limit_s")));
	cr_expect_eq(json_integer_value(json_object_get(e, "seed")), 7);
	cr_expect_str_eq(json_string_value(json_object_get(e, "graph")), GRAPH_JSON);
	cr_expect_str_eq(json_string_value(json_object_get(e, "worker_log")),
			 "loading k0\nrunning k0\n");
	source = json_array_get(json_object_get(e, "sources"), 0);
	cr_expect_str_eq(json_string_value(json_object_get(source, "source")),
			 "void k0(void **t) {}");
	plan = json_loads(PLAN, 0, NULL);
	cr_expect(json_equal(json_object_get(e, "plan"), plan));
	e = json_array_get(entries, 1);
	cr_expect_str_eq(json_string_value(json_object_get(e, "cause")), "timeout");
	cr_expect(json_is_null(json_object_get(e, "signal")));
	cr_expect_eq(json_real_value(json_object_get(e, "time_limit_s")), 12.5);
	cr_expect(json_is_null(json_object_get(e, "sources")));
	cr_expect(json_is_null(json_object_get(e, "worker_log")));
	json_decref(entries);

	cr_assert_eq(cache_quarantine_entries(c, graph_key(2), &entries, &err), 0);
	cr_expect_eq(json_array_size(entries), 1);
	json_decref(entries);
	cr_assert_eq(cache_quarantine_entries(c, graph_key(3), &entries, &err), 0);
	cr_expect_eq(json_array_size(entries), 0);
	json_decref(entries);

	cr_assert_eq(cache_quarantined_plans(c, graph_key(1), DEVICE_CPU, CODEGEN, &plans,
					     &err), 0, "%s", err.message);
	cr_expect_eq(json_array_size(plans), 1);
	cr_expect(json_equal(json_array_get(plans, 0), plan));
	json_decref(plans);
	json_decref(plan);
	cr_assert_eq(cache_quarantined_plans(c, graph_key(1), DEVICE_GPU, CODEGEN, &plans,
					     &err), 0);
	cr_expect_eq(json_array_size(plans), 0, "another device's quarantine");
	json_decref(plans);
	cache_close(c);
}

Test(quarantine, a_bad_bundle_is_refused)
{
	cache *c = fx_open();
	cache_quarantine_entry q = crash_of(1, PLAN);
	cache_error err = {0};

	put_graph(c, 1, NULL);
	q.cause = "boredom";
	cr_expect_eq(cache_quarantine(c, &q, &err), CACHE_EINVAL);
	cr_expect(strstr(err.message, "'boredom'"), "%s", err.message);
	q = crash_of(1, PLAN);
	q.sources = "{\"k0\": 1}";
	cr_expect_eq(cache_quarantine(c, &q, &err), CACHE_EINVAL);
	cr_expect(strstr(err.message, "quarantined sources"), "%s", err.message);
	cr_expect(!cache_is_quarantined(c, graph_key(1), DEVICE_CPU, CODEGEN, PLAN, NULL));
	cache_close(c);
}

/* The first schema, as released: files written by earlier builds. */
static const char schema_v1[] =
	"CREATE TABLE graphs (key TEXT PRIMARY KEY NOT NULL, canonical TEXT NOT NULL,"
	" name TEXT, first_seen INTEGER NOT NULL, last_used INTEGER NOT NULL);"
	"CREATE TABLE devices (id INTEGER PRIMARY KEY, signature TEXT NOT NULL UNIQUE,"
	" first_seen INTEGER NOT NULL);"
	"CREATE TABLE plans (id INTEGER PRIMARY KEY,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device INTEGER NOT NULL REFERENCES devices(id), codegen TEXT NOT NULL,"
	" version INTEGER NOT NULL CHECK (version >= 1), plan TEXT NOT NULL,"
	" sources TEXT NOT NULL, binaries BLOB, launch TEXT, median_ms REAL,"
	" spread_ms REAL, found_by TEXT NOT NULL, created_at INTEGER NOT NULL,"
	" UNIQUE (graph, device, codegen, version));"
	"CREATE TABLE trials (id INTEGER PRIMARY KEY,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device INTEGER NOT NULL REFERENCES devices(id), codegen TEXT NOT NULL,"
	" plan TEXT NOT NULL, outcome TEXT NOT NULL CHECK (outcome IN"
	"  ('ok', 'wrong', 'compile_error', 'timeout', 'crash', 'error')),"
	" median_ms REAL, detail TEXT CHECK (length(CAST(detail AS BLOB)) <= 200),"
	" created_at INTEGER NOT NULL);"
	"CREATE INDEX trials_key ON trials (graph, device, codegen);"
	"CREATE TABLE quarantine (id INTEGER PRIMARY KEY,"
	" graph TEXT NOT NULL REFERENCES graphs(key) ON DELETE CASCADE,"
	" device INTEGER NOT NULL REFERENCES devices(id), codegen TEXT NOT NULL,"
	" plan TEXT NOT NULL, reason TEXT NOT NULL, source TEXT,"
	" created_at INTEGER NOT NULL, UNIQUE (graph, device, codegen, plan));"
	"PRAGMA user_version = 1;";

Test(quarantine, a_version_1_file_is_migrated_with_its_entries)
{
	sqlite3 *db = NULL;
	char *insert = sqlite3_mprintf(
		"INSERT INTO graphs VALUES ('%s', 'canonical', 'scale', 1, 1);"
		"INSERT INTO devices VALUES (1, '%s', 1);"
		"INSERT INTO quarantine (graph, device, codegen, plan, reason, created_at) "
		"VALUES ('%s', 1, '%s', '%s', 'worker killed by signal 11', 1);",
		graph_key(1), DEVICE_CPU, graph_key(1), CODEGEN, PLAN);
	json_t *entries = NULL, *e;
	cache_error err = {0};
	cache *c;

	fx_sqlite_only("a file of SQLite's schema version 1");

	cr_assert_eq(sqlite3_open(fx.path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, schema_v1, NULL, NULL, NULL), SQLITE_OK, "%s",
		     sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_exec(db, insert, NULL, NULL, NULL), SQLITE_OK, "%s",
		     sqlite3_errmsg(db));
	sqlite3_free(insert);
	sqlite3_close(db);

	c = fx_open();
	cr_expect(strstr(fx.last_log, "from version 1 to 7"), "%s", fx.last_log);
	cr_expect(cache_is_quarantined(c, graph_key(1), DEVICE_CPU, CODEGEN, PLAN, NULL));
	cr_assert_eq(cache_quarantine_entries(c, NULL, &entries, &err), 0, "%s", err.message);
	cr_assert_eq(json_array_size(entries), 1);
	e = json_array_get(entries, 0);
	cr_expect_str_eq(json_string_value(json_object_get(e, "reason")),
			 "worker killed by signal 11");
	cr_expect(json_is_null(json_object_get(e, "cause")));
	cr_expect(json_is_null(json_object_get(e, "seed")));
	cr_expect(json_is_null(json_object_get(e, "worker_log")));
	json_decref(entries);
	/* and the new columns take a bundle */
	{
		cache_quarantine_entry q = crash_of(1, "{\"kernels\":[]}");

		cr_expect_eq(cache_quarantine(c, &q, &err), 0, "%s", err.message);
	}
	cache_close(c);
}
