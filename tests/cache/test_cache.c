/*
 * test_cache.c: the cache at work: schema and migrations, versions and
 * min_version, complete keys, trials and their size, quarantine, list,
 * show, stats, the single-writer rule, and pruning by age and by size.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_test.h"

TestSuite(cache, .init = fx_setup, .fini = fx_teardown, .timeout = 60);

Test(cache, migrates_a_new_file_and_reopens_idempotently)
{
	cache *c = fx_open();
	sqlite3 *db;
	char text[64];

	fx_sqlite_only("SQLite's pragmas and migrations (test_pg.c has PostgreSQL's)");

	cr_expect_eq(fx.logs, 1);
	cr_expect_eq(fx.last_level, CACHE_LOG_INFO);
	cr_expect(strstr(fx.last_log, "from version 0 to 7"), "%s", fx.last_log);
	put_graph(c, 1, "bert_qkv");
	cache_close(c);

	db = raw_open(fx.path);
	cr_expect_eq(raw_int(db, "PRAGMA user_version"), CACHE_SCHEMA_VERSION);
	cr_expect_eq(raw_int(db, "PRAGMA auto_vacuum"), 2); /* incremental */
	raw_text(db, "PRAGMA journal_mode", text, sizeof(text));
	cr_expect_str_eq(text, "wal");
	cr_expect_eq(raw_int(db, "SELECT count(*) FROM sqlite_schema WHERE "
			     "type = 'table' AND name IN ('graphs', 'devices', "
			     "'plans', 'trials', 'quarantine', 'jobs')"), 6);
	cr_expect_eq(raw_int(db, "SELECT count(*) FROM pragma_table_info('graphs') "
			     "WHERE name = 'graph'"), 1);
	sqlite3_close(db);

	c = fx_open();
	cr_expect_eq(fx.logs, 1, "a second open migrates nothing");
	db = raw_open(fx.path);
	cr_expect_eq(raw_int(db, "PRAGMA user_version"), CACHE_SCHEMA_VERSION);
	cr_expect_eq(raw_int(db, "SELECT count(*) FROM graphs"), 1);
	sqlite3_close(db);
	cache_close(c);
}

Test(cache, refuses_a_newer_schema_and_leaves_it_alone)
{
	cache_options o = fx_options();
	cache_error err = { 0 };
	cache *c = fx_open();
	sqlite3 *db;
	int rc;

	cache_close(c);
	db = raw_open(fx.path);
	sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL);
	sqlite3_close(db);
	rc = cache_open(fx.path, &o, &c, &err);
	cr_expect_eq(rc, CACHE_ESCHEMA, "%d %s", rc, err.message);
	cr_expect_null(c);
	cr_expect(strstr(err.message, "schema version 99"), "%s", err.message);
	db = raw_open(fx.path);
	cr_expect_eq(raw_int(db, "PRAGMA user_version"), 99);
	sqlite3_close(db);
}

/* Only a URI or a conninfo string is a database: a path with '=' in a
 * folder's name is a SQLite file. */
Test(cache, a_path_with_an_equals_sign_is_a_file)
{
	cache_options o = fx_options();
	cache_error err = { 0 };
	char folder[300], path[320];
	cache *c = NULL;

	fx_sqlite_only("it makes a SQLite file");
	cr_expect(cache_is_database("postgresql:///tuned"));
	cr_expect(cache_is_database("postgres://db/tuned"));
	cr_expect(cache_is_database(" host = db dbname=tuned"));
	cr_expect(cache_is_database("dbname=tuned"));
	cr_expect_not(cache_is_database("cache.db"));
	cr_expect_not(cache_is_database("./gpu=0.db"));
	snprintf(folder, sizeof(folder), "%s/gpu=0", fx.dir);
	snprintf(path, sizeof(path), "%s/cache.db", folder);
	cr_assert_eq(mkdir(folder, 0700), 0);
	cr_expect_not(cache_is_database(path));
	cr_assert_eq(cache_open(path, &o, &c, &err), 0, "%s", err.message);
	put_graph(c, 1, NULL);
	cache_close(c);
	cr_expect_eq(access(path, F_OK), 0, "the SQLite file is there");
}

/* Every function refuses a NULL cache, naming what it could not do, and
 * clears its out argument. */
Test(cache, a_null_cache_is_refused_naming_what)
{
	cache_error err = { 0 };
	json_t *out = (json_t *)&err; /* not freed: it must come back NULL */
	cache_stats st;
	cache *r = (cache *)&err;

	cr_expect_eq(cache_open_reader(NULL, &r, &err), CACHE_EINVAL);
	cr_expect_null(r);
	cr_expect_str_eq(err.message, "cannot open a reader: no cache");
	cr_expect_eq(cache_show(NULL, graph_key(1), &out, &err), CACHE_EINVAL);
	cr_expect_null(out);
	cr_expect_str_eq(err.message, "cannot show a graph: no cache");
	cr_expect_eq(cache_export_graph(NULL, graph_key(1), &out, &err),
		     CACHE_EINVAL);
	cr_expect_str_eq(err.message, "cannot export a graph: no cache");
	cr_expect_eq(cache_stat(NULL, &st, &err), CACHE_EINVAL);
	cr_expect_str_eq(err.message, "cannot read the cache's numbers: no cache");
	cr_expect_not(cache_is_quarantined(NULL, graph_key(1), DEVICE_GPU, CODEGEN,
					   "[]", &err));
	cr_expect_str_eq(err.message, "cannot read the quarantine: no cache");
	cr_expect_eq(cache_checkpoint(NULL, &err), CACHE_EINVAL);
	cr_expect_str_eq(err.message, "cannot checkpoint the cache: no cache");
	cache_close(NULL);
}

/* A missing out argument or callback is refused, by engine.c for both
 * engines, naming what could not be done. */
Test(cache, a_missing_out_or_callback_is_refused_naming_what)
{
	cache_error err = { 0 };
	cache *c = fx_open();

	cr_expect_eq(cache_show(c, graph_key(1), NULL, &err), CACHE_EINVAL);
	cr_expect_str_eq(err.message, "cannot show a graph: no out");
	cr_expect_eq(cache_stat(c, NULL, &err), CACHE_EINVAL);
	cr_expect_str_eq(err.message, "cannot read the cache's numbers: no out");
	cr_expect_eq(cache_list(c, NULL, NULL, &err), CACHE_EINVAL);
	cr_expect_str_eq(err.message, "cannot list the cache: no callback");
	cr_expect_eq(cache_jobs(c, NULL, NULL, &err), CACHE_EINVAL);
	cr_expect_str_eq(err.message, "cannot read the jobs: no callback");
	cr_expect_eq(cache_export_graph(c, graph_key(1), NULL, &err), CACHE_EINVAL);
	cr_expect_str_eq(err.message, "cannot export a graph: no out");
	cr_expect_eq(cache_open_reader(c, NULL, &err), CACHE_EINVAL);
	cr_expect_str_eq(err.message, "cannot open a reader: no out");
	cache_close(c);
}

Test(cache, publish_numbers_versions_and_fetch_returns_the_newest)
{
	cache *c = fx_open();
	cache_plan *got = NULL;
	cache_error err = { 0 };
	int rc;

	put_graph(c, 1, "gpt3_mlp");
	for (int v = 1; v <= 3; v++) {
		fx.now += 10;
		cr_expect_eq(publish(c, 1, DEVICE_CPU, CODEGEN, v, 100), v);
	}
	rc = cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0, &got, &err);
	cr_assert_eq(rc, 3, "%d %s", rc, err.message);
	cr_expect_eq(got->version, 3);
	cr_expect_str_eq(got->graph, graph_key(1));
	cr_expect_str_eq(got->device, DEVICE_CPU);
	cr_expect_str_eq(got->codegen, CODEGEN);
	char *plan = make_plan(3, 3);
	cr_expect_str_eq(got->plan, plan);
	free(plan);
	cr_expect_eq(strlen(got->sources), 104);
	cr_expect_eq(got->binaries_len, 16);
	cr_expect_eq(((const unsigned char *)got->binaries)[1], 3 * 31 + 1);
	cr_expect_str_eq(got->launch, "{\"grid\":[1,1,1]}");
	cr_expect_float_eq(got->median_ms, 0.25, 1e-12);
	cr_expect(isnan(got->spread_ms));
	cr_expect_str_eq(got->found_by, "genetic round 3");
	cr_expect_eq(got->created_at, 1700000030);
	cache_plan_free(got);

	/* min_version: a client holding version n asks for n + 1. */
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 1,
				      NULL, NULL), 3);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 3,
				      NULL, NULL), 3);
	got = (cache_plan *)&err; /* must be set to NULL */
	rc = cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 4, &got, &err);
	cr_expect_eq(rc, CACHE_NOT_FOUND);
	cr_expect_null(got);
	cr_expect(strstr(err.message, "newer"), "%s", err.message);
	cache_close(c);
}

Test(cache, a_plan_is_found_only_under_its_complete_key)
{
	cache *c = fx_open();
	cache_error err = { 0 };

	put_graph(c, 1, NULL);
	put_graph(c, 2, NULL);
	cr_expect_eq(publish(c, 1, DEVICE_CPU, CODEGEN, 1, 10), 1);
	cr_expect_eq(publish(c, 1, DEVICE_CPU, CODEGEN, 2, 10), 2);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_GPU, CODEGEN, 0,
				      NULL, &err), CACHE_NOT_FOUND);
	cr_expect(strstr(err.message, DEVICE_GPU), "%s", err.message);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, "kgen 0.2", 0,
				      NULL, NULL), CACHE_NOT_FOUND);
	cr_expect_eq(cache_fetch_best(c, graph_key(2), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), CACHE_NOT_FOUND);

	/* Each key numbers its own versions. */
	cr_expect_eq(publish(c, 1, DEVICE_GPU, CODEGEN, 3, 10), 1);
	cr_expect_eq(publish(c, 1, DEVICE_CPU, "kgen 0.2", 4, 10), 1);
	cr_expect_eq(publish(c, 2, DEVICE_CPU, CODEGEN, 5, 10), 1);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), 2);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_GPU, CODEGEN, 0,
				      NULL, NULL), 1);
	cache_close(c);
}

Test(cache, refuses_bad_writes_with_a_message)
{
	cache *c = fx_open();
	cache_error err = { 0 };
	cache_plan p = {
		.graph = graph_key(9), .device = DEVICE_CPU, .codegen = CODEGEN,
		.plan = "{\"kernels\":[]}", .sources = "[]", .found_by = "default",
		.median_ms = 1, .spread_ms = 0.1,
	};
	int version = -7;

	cr_expect_eq(cache_publish(c, &p, &version, &err), CACHE_NOT_FOUND);
	cr_expect(strstr(err.message, "is not in the cache"), "%s", err.message);
	cr_expect_eq(version, -7);
	put_graph(c, 9, NULL);
	p.plan = "{\"kernels\": [";
	cr_expect_eq(cache_publish(c, &p, NULL, &err), CACHE_EINVAL);
	cr_expect(strstr(err.message, "plan: not JSON"), "%s", err.message);
	p.plan = "{\"a\": 1, \"a\": 2}";
	cr_expect_eq(cache_publish(c, &p, NULL, &err), CACHE_EINVAL);
	p.plan = "{}";
	p.sources = "[1]";
	cr_expect_eq(cache_publish(c, &p, NULL, &err), CACHE_EINVAL);
	cr_expect_str_eq(err.message, "sources: not a JSON array of strings or "
			 "objects");
	p.sources = "{\"k0\": \"int x;\"}";
	cr_expect_eq(cache_publish(c, &p, NULL, &err), CACHE_EINVAL);
	p.sources = "[\"int x;\"]";
	p.found_by = "";
	cr_expect_eq(cache_publish(c, &p, NULL, &err), CACHE_EINVAL);
	p.found_by = "default";
	p.device = NULL;
	cr_expect_eq(cache_publish(c, &p, NULL, &err), CACHE_EINVAL);
	cr_expect_str_eq(err.message, "device signature is missing");
	p.device = DEVICE_CPU;
	p.launch = "nope";
	cr_expect_eq(cache_publish(c, &p, NULL, &err), CACHE_EINVAL);
	p.launch = NULL;
	cr_expect_eq(cache_publish(c, &p, &version, &err), 0, "%s", err.message);
	cr_expect_eq(version, 1);

	/* Same key, another canonical text: a collision or a bug. */
	cr_expect_eq(cache_put_graph(c, graph_key(9), "other", NULL, &err),
		     CACHE_EINVAL);
	cr_expect(strstr(err.message, "canonical text differs"), "%s", err.message);
	cr_expect_eq(cache_put_graph(NULL, graph_key(9), "x", NULL, &err),
		     CACHE_EINVAL);
	cache_close(c);
}

Test(cache, fetch_keeps_plans_as_published_in_canonical_form)
{
	cache *c = fx_open();
	cache_plan *got = NULL;
	char blob[3] = { 0, 1, 0 };
	cache_plan p = {
		.graph = graph_key(1), .device = DEVICE_GPU, .codegen = CODEGEN,
		.plan = "{ \"b\" : [1, 2],\n \"a\" : {\"y\": 1, \"x\": \"é\"} }",
		.sources = "[ \"__global__ void k0() {}\" ,\"\" ]",
		.binaries = blob, .binaries_len = 3, .found_by = "default",
		.median_ms = NAN, .spread_ms = NAN,
	};

	put_graph(c, 1, NULL);
	cr_assert_eq(cache_publish(c, &p, NULL, NULL), 0);
	cr_assert_eq(cache_fetch_best(c, graph_key(1), DEVICE_GPU, CODEGEN, 0,
				      &got, NULL), 1);
	cr_expect_str_eq(got->plan, "{\"a\":{\"x\":\"é\",\"y\":1},\"b\":[1,2]}");
	cr_expect_str_eq(got->sources, "[\"__global__ void k0() {}\",\"\"]");
	cr_expect_eq(got->binaries_len, 3);
	cr_expect_eq(memcmp(got->binaries, blob, 3), 0);
	cr_expect_null(got->launch);
	cr_expect(isnan(got->median_ms));
	cache_plan_free(got);

	/* Sources as the worker gives them: one object per kernel. */
	p.binaries = NULL;
	p.binaries_len = 0;
	p.sources = "[{\"source\": \"void k0(void **t) {}\", \"kernel\": "
		    "\"k0\", \"language\": \"c\"}]";
	cr_assert_eq(cache_publish(c, &p, NULL, NULL), 0);
	cr_assert_eq(cache_fetch_best(c, graph_key(1), DEVICE_GPU, CODEGEN, 0,
				      &got, NULL), 2);
	cr_expect_null(got->binaries);
	cr_expect_eq(got->binaries_len, 0);
	cr_expect_str_eq(got->sources, "[{\"kernel\":\"k0\",\"language\":\"c\","
			 "\"source\":\"void k0(void **t) {}\"}]");
	cache_plan_free(got);
	cache_close(c);
}

static void record(cache *c, int n, enum cache_outcome outcome,
		   const char *plan, double median, const char *detail)
{
	cache_trial t = {
		.graph = graph_key(n), .device = DEVICE_GPU, .codegen = CODEGEN,
		.plan = plan, .outcome = outcome, .median_ms = median,
		.detail = detail,
	};
	cache_error err = { 0 };
	int rc = cache_record_trial(c, &t, &err);

	cr_assert_eq(rc, 0, "cache_record_trial: %d %s", rc, err.message);
}

/* Bytes of the columns of the largest trial row, as length() counts. */
static int64_t largest_trial(sqlite3 *db)
{
	return raw_int(db, "SELECT max(length(CAST(graph AS BLOB)) + 8 + "
		       "length(CAST(codegen AS BLOB)) + length(CAST(plan AS BLOB)) "
		       "+ length(outcome) + 8 + coalesce(length(CAST(detail AS "
		       "BLOB)), 0) + 8 + 8) FROM trials");
}

Test(cache, trials_of_every_outcome_stay_small)
{
	cache *c = fx_open();
	char detail[600], *plan = make_plan(5, 1);
	sqlite3 *db;
	json_t *shown = NULL;

	/* 197 ASCII bytes, then two-byte characters across the cut. */
	memset(detail, 'e', 197);
	for (int i = 197; i < 597; i += 2)
		memcpy(detail + i, "\xc3\xa9", 2);
	detail[597] = 0;
	put_graph(c, 1, NULL);
	for (int o = 0; o < CACHE_TRIAL_OUTCOMES; o++)
		record(c, 1, o, plan, o == CACHE_TRIAL_OK ? 1.5 : NAN, detail);
	record(c, 1, CACHE_TRIAL_OK, plan, 1.25, NULL);

	cache_trial bad = { .graph = graph_key(1), .device = DEVICE_GPU,
			    .codegen = CODEGEN, .plan = plan, .outcome = 17 };
	cr_expect_eq(cache_record_trial(c, &bad, NULL), CACHE_EINVAL);

	db = raw_open(fx.path);
	cr_expect_eq(raw_int(db, "SELECT count(*) FROM trials"), 7);
	cr_expect_eq(raw_int(db, "SELECT count(DISTINCT outcome) FROM trials"), 6);
	/* Cut to 199 bytes: 200 would split a character. */
	cr_expect_eq(raw_int(db, "SELECT max(length(CAST(detail AS BLOB))) "
			     "FROM trials"), 199);
	cr_expect_eq(raw_int(db, "SELECT count(*) FROM trials WHERE median_ms "
			     "IS NULL"), 5);
	cr_expect_lt(largest_trial(db), 1024);
	cr_log_info("largest trial row, 5-kernel plan of %zu bytes and a full "
		    "detail: %lld bytes", strlen(plan),
		    (long long)largest_trial(db));
	sqlite3_close(db);

	cr_assert_eq(cache_show(c, graph_key(1), &shown, NULL), 0);
	json_t *group = json_array_get(json_object_get(shown, "trials"), 0);
	cr_expect_eq(json_integer_value(json_object_get(group, "total")), 7);
	json_t *outcomes = json_object_get(group, "outcomes");
	cr_expect_eq(json_integer_value(json_object_get(outcomes, "ok")), 2);
	cr_expect_eq(json_integer_value(json_object_get(outcomes, "crash")), 1);
	cr_expect_eq(json_integer_value(json_object_get(outcomes,
							"compile_error")), 1);
	json_decref(shown);
	free(plan);
	cache_close(c);
}

/* Row sizes for plans of 3, 5 and 9 kernels (the examples' default plans
 * are 416 to 1237 bytes), without a detail (a trial that went well) and
 * with a full one: the record as stored (dbstat's payload per cell) and
 * the pages per row, the index on (graph, device, codegen) included. */
static void measure_trials(cache *c, sqlite3 *db, int kernels,
			   const char *detail)
{
	char *plan = make_plan(kernels, 0);
	int64_t payload, pages;

	sqlite3_exec(db, "DELETE FROM trials", NULL, NULL, NULL);
	for (int i = 0; i < 100; i++) {
		char *p = make_plan(kernels, i);

		record(c, 1, detail ? CACHE_TRIAL_WRONG : CACHE_TRIAL_OK, p,
		       detail ? NAN : 1.0, detail);
		free(p);
	}
	payload = raw_int(db, "SELECT sum(payload) / sum(ncell) FROM dbstat "
			 "WHERE name = 'trials' AND pagetype = 'leaf'");
	pages = raw_int(db, "SELECT sum(pgsize) / (SELECT count(*) FROM "
			"trials) FROM dbstat WHERE name IN ('trials', "
			"'trials_key')");
	cr_log_info("trial rows, %d-kernel plan (%zu bytes), %s detail: "
		    "record %lld bytes (columns at most %lld), %lld bytes of "
		    "pages per row with its index", kernels, strlen(plan),
		    detail ? "a full" : "no", (long long)payload,
		    (long long)largest_trial(db), (long long)pages);
	if (kernels <= 5)
		cr_expect_lt(payload, 1024);
	free(plan);
}

Test(cache, trial_row_sizes)
{
	static const int kernels[] = { 3, 5, 9 };
	char detail[CACHE_DETAIL_MAX + 1];
	cache *c = fx_open();
	sqlite3 *db = raw_open(fx.path);

	memset(detail, 'd', CACHE_DETAIL_MAX);
	detail[CACHE_DETAIL_MAX] = 0;
	put_graph(c, 1, NULL);
	for (int k = 0; k < 3; k++) {
		measure_trials(c, db, kernels[k], NULL);
		measure_trials(c, db, kernels[k], detail);
	}
	sqlite3_close(db);
	cache_close(c);
}

Test(cache, quarantine_matches_any_formatting_of_the_same_plan)
{
	cache *c = fx_open();
	cache_error err = { 0 };
	cache_quarantine_entry q = {
		.graph = graph_key(1), .device = DEVICE_GPU, .codegen = CODEGEN,
		.plan = "{\"kernels\":[{\"name\":\"k0\",\"ops\":[0]}]}",
		.reason = "worker killed by signal 11 (Segmentation fault)",
		.source = "__global__ void k0() { *(int *)0 = 1; }",
	};
	json_t *shown = NULL;

	cr_expect_eq(cache_quarantine(c, &q, &err), CACHE_NOT_FOUND);
	put_graph(c, 1, NULL);
	cr_expect(!cache_is_quarantined(c, graph_key(1), DEVICE_GPU, CODEGEN,
					q.plan, &err));
	cr_expect_eq(err.code, 0);
	cr_assert_eq(cache_quarantine(c, &q, &err), 0, "%s", err.message);
	cr_assert_eq(cache_quarantine(c, &q, &err), 0, "%s", err.message);
	cr_expect(cache_is_quarantined(c, graph_key(1), DEVICE_GPU, CODEGEN,
				       " { \"kernels\" : [ { \"ops\": [0], "
				       "\"name\": \"k0\" } ] }", &err));
	cr_expect(!cache_is_quarantined(c, graph_key(1), DEVICE_CPU, CODEGEN,
					q.plan, &err));
	cr_expect(!cache_is_quarantined(c, graph_key(1), DEVICE_GPU, "kgen 0.2",
					q.plan, &err));
	cr_expect(!cache_is_quarantined(c, graph_key(1), DEVICE_GPU, CODEGEN,
					"{\"kernels\":[]}", &err));
	cr_expect(!cache_is_quarantined(c, graph_key(1), DEVICE_GPU, CODEGEN,
					"{oops", &err));
	cr_expect_eq(err.code, CACHE_EINVAL);

	q.reason = NULL; /* a missing reason must not lose the quarantine */
	q.plan = "{\"kernels\":[{\"name\":\"k1\",\"ops\":[0]}]}";
	cr_expect_eq(cache_quarantine(c, &q, &err), 0, "%s", err.message);
	cr_expect(cache_is_quarantined(c, graph_key(1), DEVICE_GPU, CODEGEN,
				       q.plan, NULL));
	cr_assert_eq(cache_show(c, graph_key(1), &shown, NULL), 0);
	cr_expect_eq(json_integer_value(json_object_get(shown, "quarantined")), 2);
	json_decref(shown);
	cache_close(c);
}

typedef struct listing {
	int calls, stop_after;
	char seen[16][256];
} listing;

static int on_entry(void *user, const cache_entry *e)
{
	listing *l = user;

	snprintf(l->seen[l->calls], sizeof(l->seen[0]), "%.8s %s %s %s v%d %g %lld",
		 e->graph, e->name ? e->name : "-", e->device, e->codegen,
		 e->version, e->median_ms, (long long)e->updated_at);
	return ++l->calls == l->stop_after;
}

Test(cache, list_gives_the_latest_version_of_every_key)
{
	cache *c = fx_open();
	listing l = { 0 };
	char expect[256];

	put_graph(c, 1, "bert_qkv");
	put_graph(c, 2, NULL);
	publish(c, 1, DEVICE_CPU, CODEGEN, 1, 10);
	fx.now += 5;
	publish(c, 1, DEVICE_CPU, CODEGEN, 3, 10);
	publish(c, 1, DEVICE_GPU, CODEGEN, 1, 10);
	publish(c, 2, DEVICE_CPU, "kgen 0.2", 7, 10);
	cr_assert_eq(cache_list(c, on_entry, &l, NULL), 3);
	/* In order of graph key (graph 2's sorts first), device, codegen. */
	cr_assert_lt(strcmp(graph_key(2), graph_key(1)), 0);
	snprintf(expect, sizeof(expect), "%.8s - %s kgen 0.2 v1 0.125 %lld",
		 graph_key(2), DEVICE_CPU, (long long)fx.now);
	cr_expect_str_eq(l.seen[0], expect);
	snprintf(expect, sizeof(expect), "%.8s bert_qkv %s %s v2 0.25 %lld",
		 graph_key(1), DEVICE_CPU, CODEGEN, (long long)fx.now);
	cr_expect_str_eq(l.seen[1], expect);
	snprintf(expect, sizeof(expect), "%.8s bert_qkv %s %s v1 0.5 %lld",
		 graph_key(1), DEVICE_GPU, CODEGEN, (long long)fx.now);
	cr_expect_str_eq(l.seen[2], expect);

	memset(&l, 0, sizeof(l));
	l.stop_after = 2;
	cr_expect_eq(cache_list(c, on_entry, &l, NULL), 2);
	cr_expect_eq(cache_list(c, NULL, NULL, NULL), CACHE_EINVAL);
	cache_close(c);
}

Test(cache, show_gives_every_version_and_trial_counts)
{
	cache *c = fx_open();
	cache_error err = { 0 };
	json_t *shown = NULL, *plans;
	char *plan = make_plan(3, 0);

	cr_expect_eq(cache_show(c, graph_key(1), &shown, &err), CACHE_NOT_FOUND);
	cr_expect_null(shown);
	put_graph(c, 1, "ln_residual");
	publish(c, 1, DEVICE_CPU, CODEGEN, 1, 10);
	publish(c, 1, DEVICE_CPU, CODEGEN, 2, 10);
	publish(c, 1, DEVICE_GPU, CODEGEN, 3, 10);
	record(c, 1, CACHE_TRIAL_TIMEOUT, plan, NAN, "no answer in 10 s");
	cr_assert_eq(cache_show(c, graph_key(1), &shown, &err), 0, "%s",
		     err.message);
	cr_expect_str_eq(json_string_value(json_object_get(shown, "name")),
			 "ln_residual");
	cr_expect_str_eq(json_string_value(json_object_get(shown, "canonical")),
			 graph_canonical(1));
	plans = json_object_get(shown, "plans");
	cr_assert_eq(json_array_size(plans), 3);
	json_t *v2 = json_array_get(plans, 1);
	cr_expect_eq(json_integer_value(json_object_get(v2, "version")), 2);
	cr_expect_str_eq(json_string_value(json_object_get(v2, "device")), DEVICE_CPU);
	cr_expect_eq(json_integer_value(json_object_get(v2, "kernels")), 1);
	cr_expect_eq(json_integer_value(json_object_get(v2, "binary_bytes")), 16);
	cr_expect(json_is_null(json_object_get(v2, "spread_ms")));
	cr_expect_eq(json_array_size(json_object_get(json_object_get(v2, "plan"),
						     "kernels")), 3);
	json_t *trials = json_object_get(shown, "trials");
	cr_expect_eq(json_array_size(trials), 1);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(
		json_array_get(trials, 0), "outcomes"), "timeout")), 1);
	json_decref(shown);
	free(plan);
	cache_close(c);
}

Test(cache, stats_count_rows_and_bytes)
{
	cache *c = fx_open();
	cache_stats st;
	char *plan = make_plan(3, 0);
	cache_quarantine_entry q = {
		.graph = graph_key(2), .device = DEVICE_GPU, .codegen = CODEGEN,
		.plan = plan, .reason = "hung",
	};

	fx_sqlite_only("the file, its pages and its wal");

	put_graph(c, 1, NULL);
	put_graph(c, 2, NULL);
	put_graph(c, 3, NULL);
	publish(c, 1, DEVICE_CPU, CODEGEN, 1, 50000);
	publish(c, 1, DEVICE_CPU, CODEGEN, 2, 50000);
	publish(c, 2, DEVICE_GPU, CODEGEN, 1, 10);
	for (int i = 0; i < 10; i++)
		record(c, 3, CACHE_TRIAL_OK, plan, 1.0, NULL);
	cr_assert_eq(cache_quarantine(c, &q, NULL), 0);
	cr_assert_eq(cache_stat(c, &st, NULL), 0);
	cr_expect_eq(st.graphs, 3);
	cr_expect_eq(st.devices, 2);
	cr_expect_eq(st.plans, 3);
	cr_expect_eq(st.trials, 10);
	cr_expect_eq(st.quarantine, 1);
	cr_expect_eq(st.page_size, 4096);
	cr_expect_gt(st.page_count * st.page_size, 100000);
	cr_expect_gt(st.wal_bytes, 100000, "wal %lld", (long long)st.wal_bytes);

	cr_assert_eq(cache_checkpoint(c, NULL), 0);
	cr_assert_eq(cache_stat(c, &st, NULL), 0);
	cr_expect_eq(st.wal_bytes, 0);
	cr_expect_eq(st.file_bytes, st.page_count * st.page_size);
	cr_expect_eq(st.file_bytes, file_size(fx.path));
	free(plan);
	cache_close(c);
}

typedef struct thread_job {
	cache *c;
	int rc[7];
	cache_error err;
	int fetched;
} thread_job;

/* graph_key is called here while the main thread waits in pthread_join. */
static void *write_from_elsewhere(void *arg)
{
	thread_job *job = arg;
	cache_trial t = { .graph = graph_key(1), .device = DEVICE_CPU,
			  .codegen = CODEGEN, .plan = "{}" };
	cache_quarantine_entry q = { .graph = graph_key(1), .device = DEVICE_CPU,
				     .codegen = CODEGEN, .plan = "{}",
				     .reason = "x" };
	cache_plan p = { .graph = graph_key(1), .device = DEVICE_CPU,
			 .codegen = CODEGEN, .plan = "{}", .sources = "[]",
			 .found_by = "x" };

	job->rc[0] = cache_put_graph(job->c, graph_key(2), "g", NULL, &job->err);
	job->rc[1] = cache_record_trial(job->c, &t, NULL);
	job->rc[2] = cache_publish(job->c, &p, NULL, NULL);
	job->rc[3] = cache_quarantine(job->c, &q, NULL);
	job->rc[4] = cache_prune(job->c, 1, 0, NULL, NULL);
	job->rc[5] = cache_checkpoint(job->c, NULL);
	/* Reads are for any thread. */
	job->rc[6] = cache_fetch_best(job->c, graph_key(1), DEVICE_CPU, CODEGEN,
				      0, NULL, NULL);
	return NULL;
}

Test(cache, writes_from_another_thread_are_refused)
{
	cache *c = fx_open();
	thread_job job = { .c = c };
	pthread_t thread;
	cache_stats st;

	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_CPU, CODEGEN, 1, 10);
	cr_assert_eq(pthread_create(&thread, NULL, write_from_elsewhere, &job), 0);
	pthread_join(thread, NULL);
	for (int i = 0; i < 6; i++)
		cr_expect_eq(job.rc[i], CACHE_ETHREAD, "write %d: %d", i, job.rc[i]);
	cr_expect(strstr(job.err.message, "written only by the thread that "
			 "owns it"), "%s", job.err.message);
	cr_expect_eq(job.rc[6], 1);
	cr_assert_eq(cache_stat(c, &st, NULL), 0);
	cr_expect_eq(st.graphs, 1);
	cr_expect_eq(st.trials, 0);
	cr_expect_eq(st.plans, 1);
	/* The owner still writes. */
	cr_expect_eq(publish(c, 1, DEVICE_CPU, CODEGEN, 2, 10), 2);
	cache_close(c);
}

/* The thread the cache is handed to writes, once handed it (the lock
 * orders the two); the opener no longer does. */
typedef struct handed {
	thread_job job;
	pthread_mutex_t lock;
} handed;

static void *write_as_new_owner(void *arg)
{
	handed *h = arg;

	pthread_mutex_lock(&h->lock);
	h->job.rc[0] = cache_put_graph(h->job.c, graph_key(2), "g", NULL, &h->job.err);
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

Test(cache, a_handed_over_cache_is_written_by_its_new_owner_only)
{
	cache *c = fx_open();
	handed h = { .job = { .c = c }, .lock = PTHREAD_MUTEX_INITIALIZER };
	cache_error err = { 0 };
	pthread_t thread;
	cache_stats st;

	pthread_mutex_lock(&h.lock);
	cr_assert_eq(pthread_create(&thread, NULL, write_as_new_owner, &h), 0);
	cache_hand_over(c, thread);
	pthread_mutex_unlock(&h.lock);
	pthread_join(thread, NULL);
	cr_expect_eq(h.job.rc[0], 0, "%s", h.job.err.message);
	cr_expect_eq(cache_put_graph(c, graph_key(1), "g", NULL, &err), CACHE_ETHREAD);
	cr_expect(strstr(err.message, "written only by the thread that owns it"),
		  "%s", err.message);
	/* handed back once the owner has ended */
	cache_hand_over(c, pthread_self());
	put_graph(c, 1, NULL);
	cr_assert_eq(cache_stat(c, &st, NULL), 0);
	cr_expect_eq(st.graphs, 2);
	cache_close(c);
}

/* A SQLite file has one writer; a PostgreSQL database any number of
 * owners, which share its job queue (test_pg.c). */
Test(cache, one_writer_per_file_many_per_database)
{
	cache_options o = fx_options();
	cache_error err = { 0 };
	cache *c = fx_open(), *second = NULL;
	int rc;

	rc = cache_open(fx.path, &o, &second, &err);
	if (fx_postgresql()) {
		cr_expect_eq(rc, 0, "%d %s", rc, err.message);
		cr_expect_not_null(second);
		put_graph(second, 1, NULL);
		cache_close(second);
	} else {
		cr_expect_eq(rc, CACHE_EBUSY, "%d %s", rc, err.message);
		cr_expect_null(second);
		cr_expect(strstr(err.message, "open for writing elsewhere"), "%s",
			  err.message);
	}
	cache_close(c);
	c = fx_open();
	cache_close(c);
}

Test(cache, prune_by_age_keeps_what_is_recent)
{
	cache *c = fx_open();
	char *plan = make_plan(3, 0);
	cache_prune_stats ps;
	cache_quarantine_entry q = {
		.graph = graph_key(1), .device = DEVICE_GPU, .codegen = CODEGEN,
		.plan = plan, .reason = "crash",
	};

	put_graph(c, 1, NULL); /* old and recent */
	put_graph(c, 2, NULL); /* old only */
	publish(c, 1, DEVICE_CPU, CODEGEN, 1, 1000);
	publish(c, 2, DEVICE_CPU, CODEGEN, 1, 1000);
	for (int i = 0; i < 20; i++)
		record(c, 1, CACHE_TRIAL_OK, plan, 1.0, NULL);
	cr_assert_eq(cache_quarantine(c, &q, NULL), 0);
	fx.now += 7200;
	publish(c, 1, DEVICE_CPU, CODEGEN, 2, 1000);
	record(c, 1, CACHE_TRIAL_WRONG, plan, NAN, "max error 0.5");

	cr_assert_eq(cache_prune(c, 3600, 0, &ps, NULL), 0);
	cr_expect_eq(ps.trials, 20);
	cr_expect_eq(ps.plans, 2);
	cr_expect_eq(ps.graphs, 1);
	cr_expect_eq(ps.quarantine, 1);
	cr_expect_eq(ps.devices, 0); /* the gpu still has a recent trial */
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), 2);
	cr_expect_eq(cache_fetch_best(c, graph_key(2), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), CACHE_NOT_FOUND);
	cr_expect(!cache_is_quarantined(c, graph_key(1), DEVICE_GPU, CODEGEN,
					plan, NULL));
	/* A latest version older than the limit goes too. */
	fx.now += 7200;
	put_graph(c, 1, NULL);
	cr_assert_eq(cache_prune(c, 3600, 0, &ps, NULL), 0);
	cr_expect_eq(ps.plans, 1);
	cr_expect_eq(ps.graphs, 0);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), CACHE_NOT_FOUND);
	cr_expect_eq(cache_prune(c, -1, 0, NULL, NULL), CACHE_EINVAL);
	free(plan);
	cache_close(c);
}

/* Three graphs, each with 8 versions of 20 KB of source on two devices
 * (SQLite: about 1 MB of plans; PostgreSQL compresses the sources). */
static void fill_versions(cache *c)
{
	for (int n = 1; n <= 3; n++) {
		put_graph(c, n, NULL);
		for (int v = 1; v <= 8; v++) {
			fx.now++;
			publish(c, n, DEVICE_CPU, CODEGEN, v, 20000);
			publish(c, n, DEVICE_GPU, CODEGEN, v, 20000);
		}
	}
}

/* 3000 trials of graph 1, about 700 bytes each, in bulk, behind the
 * cache's back, to keep the test fast. */
static void fill_trials(void)
{
	fx_sql("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
	       "WHERE i < 3000) INSERT INTO trials (graph, device, codegen, plan, "
	       "outcome, median_ms, detail, created_at) SELECT g.key, d.id, "
	       "'kgen 0.1', p.plan || i, 'ok', 1.0, NULL, 1700000000 FROM n, "
	       "(SELECT key FROM graphs LIMIT 1) g, (SELECT min(id) AS id FROM "
	       "devices) d, (SELECT plan FROM plans LIMIT 1) p");
	cr_assert_eq(fx_sql("SELECT count(*) FROM trials"), 3000);
}

/* The data's size as a prune measures it (one that deletes nothing). */
static int64_t pruned_size(cache *c)
{
	cache_prune_stats ps;

	cr_assert_eq(cache_prune(c, 0, INT64_MAX, &ps, NULL), 0);
	cr_assert_eq(ps.trials + ps.plans + ps.graphs, 0);
	return ps.bytes_after;
}

static void expect_latest(cache *c, int n)
{
	cr_expect_eq(cache_fetch_best(c, graph_key(n), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), 8, "graph %d cpu", n);
	cr_expect_eq(cache_fetch_best(c, graph_key(n), DEVICE_GPU, CODEGEN, 0,
				      NULL, NULL), 8, "graph %d gpu", n);
}

Test(cache, prune_by_size_trials_then_old_versions)
{
	cache *c = fx_open();
	cache_prune_stats ps;
	cache_stats st;
	int64_t versions, filled, max;

	fill_versions(c);
	versions = pruned_size(c);
	fill_trials();
	filled = pruned_size(c);
	cr_log_info("versions: %lld bytes, with the trials: %lld", (long long)versions,
		    (long long)filled);

	/* About half the trials must go, no plan. */
	max = versions + (filled - versions) / 2;
	cr_assert_eq(cache_prune(c, 0, max, &ps, NULL), 0);
	cr_expect_leq(ps.bytes_after, max);
	if (!fx_postgresql())
		cr_expect_eq(ps.bytes_after, file_size(fx.path));
	cr_expect_gt(ps.trials, 1000);
	cr_expect_lt(ps.trials, 3000);
	cr_expect_eq(ps.plans, 0);
	cr_log_info("prune to %lld: %lld trials, %lld bytes", (long long)max,
		    (long long)ps.trials, (long long)ps.bytes_after);

	/* Then every trial and some old versions; the latest stay. */
	max = versions - 1;
	cr_assert_eq(cache_prune(c, 0, max, &ps, NULL), 0);
	cr_expect_leq(ps.bytes_after, max);
	cr_expect_gt(ps.plans, 0);
	cr_expect_eq(ps.graphs, 0);
	cr_assert_eq(cache_stat(c, &st, NULL), 0);
	cr_expect_eq(st.trials, 0);
	cr_expect_eq(st.plans, 48 - ps.plans);
	for (int n = 1; n <= 3; n++)
		expect_latest(c, n);
	cr_log_info("prune to %lld: %lld plans, %lld bytes", (long long)max,
		    (long long)ps.plans, (long long)ps.bytes_after);
	cache_close(c);
}

Test(cache, prune_by_size_evicts_least_recently_used_graphs_last)
{
	cache *c = fx_open();
	cache_prune_stats ps;
	cache_stats st;
	int64_t versions;

	fill_versions(c);
	versions = pruned_size(c);
	fill_trials();
	fx.now += 100;
	put_graph(c, 1, NULL); /* graph 1 is used again: graph 2 goes first */
	fx.now += 100;
	put_graph(c, 3, NULL);
	/* Every trial, then down to the latest versions, one old version at
	 * a time. */
	cr_assert_eq(cache_prune(c, 0, versions - 1, &ps, NULL), 0);
	cr_assert_eq(ps.trials, 3000);
	for (int i = 0; i < 48; i++) {
		cr_assert_eq(cache_stat(c, &st, NULL), 0);
		if (st.plans == 6)
			break;
		cr_assert_eq(cache_prune(c, 0, ps.bytes_after - 1, &ps, NULL), 0);
		cr_assert_eq(ps.graphs, 0);
		cr_assert_eq(ps.plans, 1);
	}
	cr_assert_eq(st.plans, 6);
	/* Then one byte less evicts one graph, the least recently used. */
	cr_assert_eq(cache_prune(c, 0, ps.bytes_after - 1, &ps, NULL), 0);
	cr_expect_eq(ps.graphs, 1, "graphs %lld", (long long)ps.graphs);
	cr_expect_eq(ps.plans, 2);
	cr_expect_eq(cache_fetch_best(c, graph_key(2), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), CACHE_NOT_FOUND);
	expect_latest(c, 1);
	expect_latest(c, 3);
	cr_log_info("two graphs' latest versions: %lld bytes",
		    (long long)ps.bytes_after);
	/* Nothing fits in one byte: every graph goes, the schema stays. */
	cr_assert_eq(cache_prune(c, 0, 1, &ps, NULL), 0);
	cr_expect_eq(ps.graphs, 2);
	cr_assert_eq(cache_stat(c, &st, NULL), 0);
	cr_expect_eq(st.graphs + st.plans + st.trials + st.devices, 0);
	cr_log_info("an empty cache: %lld bytes", (long long)ps.bytes_after);
	cache_close(c);
}

typedef struct reader_job {
	cache *c;
	char key[65]; /* graph_key's buffers are not for two threads */
	volatile int stop;
	int reads, errors, backwards, last;
} reader_job;

/* Reads in a loop while the owner writes: never an error, never a
 * version older than one seen before. */
static void *read_while_writing(void *arg)
{
	reader_job *job = arg;

	while (!job->stop) {
		cache_plan *got = NULL;
		int v = cache_fetch_best(job->c, job->key, DEVICE_CPU, CODEGEN,
					 0, &got, NULL);

		if (v < 0 && v != CACHE_NOT_FOUND)
			job->errors++;
		if (v > 0 && (v < job->last || got->version != v))
			job->backwards++;
		if (v > 0)
			job->last = v;
		cache_plan_free(got);
		job->reads++;
	}
	return NULL;
}

Test(cache, reads_from_another_thread_while_the_owner_writes)
{
	cache *c = fx_open();
	reader_job job = { .c = c };
	pthread_t thread;

	snprintf(job.key, sizeof(job.key), "%s", graph_key(1));
	put_graph(c, 1, NULL);
	cr_assert_eq(pthread_create(&thread, NULL, read_while_writing, &job), 0);
	for (int v = 1; v <= 30; v++)
		cr_expect_eq(publish(c, 1, DEVICE_CPU, CODEGEN, v, 5000), v);
	job.stop = 1;
	pthread_join(thread, NULL);
	cr_expect_eq(job.errors, 0);
	cr_expect_eq(job.backwards, 0);
	cr_expect_gt(job.reads, 0);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), 30);
	cache_close(c);
}

/* A second handle (cache_open_reader) reads on its own thread while the
 * owner writes and reads on the first; it writes nothing. */
Test(cache, a_second_reader_reads_beside_the_first)
{
	cache *c = fx_open(), *r = NULL;
	reader_job job = { 0 };
	cache_error err = { 0 };
	pthread_t thread;

	put_graph(c, 1, NULL);
	cr_assert_eq(cache_open_reader(c, &r, &err), 0, "%s", err.message);
	job.c = r;
	snprintf(job.key, sizeof(job.key), "%s", graph_key(1));
	cr_assert_eq(pthread_create(&thread, NULL, read_while_writing, &job), 0);
	for (int v = 1; v <= 30; v++) {
		cr_expect_eq(publish(c, 1, DEVICE_CPU, CODEGEN, v, 5000), v);
		cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0,
					      NULL, NULL), v);
	}
	job.stop = 1;
	pthread_join(thread, NULL);
	cr_expect_eq(job.errors, 0);
	cr_expect_eq(job.backwards, 0);
	cr_expect_gt(job.reads, 0);
	cr_expect_eq(cache_fetch_best(r, graph_key(1), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), 30);
	cr_expect_eq(cache_put_graph(r, graph_key(2), graph_canonical(2), NULL, &err),
		     CACHE_ETHREAD);
	cr_expect(strstr(err.message, "only reads"), "%s", err.message);
	cache_close(r);
	cache_close(c);
}

static int never(void *user, const cache_notice *notice)
{
	(void)user;
	cr_assert_fail("a notice of version %d on SQLite", notice->version);
	return 0;
}

/* One writer per file: nothing to listen to, and no notice. */
Test(cache, a_sqlite_file_has_no_notices_to_listen_for)
{
	cache *c;
	cache_error err = {0};
	int fd = 0;

	fx_sqlite_only("PostgreSQL's notices are test_pg.c's");
	c = fx_open();
	cr_expect_eq(cache_listen(c, &fd, &err), 0, "%s", err.message);
	cr_expect_eq(fd, -1);
	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_CPU, CODEGEN, 1, 10);
	cr_expect_eq(cache_notices(c, never, NULL, &err), 0);
	cache_close(c);
}
