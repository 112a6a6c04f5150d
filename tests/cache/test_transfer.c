/*
 * test_transfer.c: what schema versions 2, 3 and 5 added: the daemon's job
 * queue (cache_put_jobs, cache_jobs) with each job's submitter, the graph.json kept for a key,
 * export and import between two caches, and the bytes of a listed entry;
 * and a version-1 file migrated with its data.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_test.h"

TestSuite(transfer, .init = fx_setup, .fini = fx_teardown, .timeout = 60);

#define GRAPH_JSON "{\"version\":1,\"name\":\"g\",\"tensors\":{},\"ops\":[]}"

static cache_job job(int64_t id, const char *state, int version)
{
	return (cache_job){
		.id = id, .key = graph_key((int)id), .name = "mlp",
		.graph = GRAPH_JSON, .state = state, .budget_s = 2.5,
		.max_trials = 40, .priority = -3, .trials = 7,
		.best_ms = version ? 0.5 : 0, .version = version,
		.error = NULL, .created_at = 1700000000.25,
		.finished_at = strcmp(state, "done") ? 0 : 1700000009.5,
	};
}

typedef struct seen_jobs {
	int n;
	int64_t ids[8];
	char states[8][16];
	cache_job first;
	char first_key[65], first_graph[128];
	int64_t last_uid;
} seen_jobs;

static int on_job(void *user, const cache_job *j)
{
	seen_jobs *s = user;

	if (s->n == 0) {
		s->first = *j;
		snprintf(s->first_key, sizeof(s->first_key), "%s", j->key);
		snprintf(s->first_graph, sizeof(s->first_graph), "%s", j->graph);
	}
	s->last_uid = j->uid;
	s->ids[s->n] = j->id;
	snprintf(s->states[s->n++], 16, "%s", j->state);
	return 0;
}

/* The shared queue (cache_pass_jobs: test_pg.c) and the shared search
 * (cache_claim_plan, cache_trials_after) are PostgreSQL's: a SQLite file,
 * one daemon's, refuses them, saying why. */
Test(transfer, a_sqlite_cache_refuses_the_shared_queue)
{
	cache_job_pass p = {.device = DEVICE_GPU, .lease_s = 1, .claim = 1};
	cache_error err = {0};
	seen_jobs s = {0};
	json_t *shared = NULL;
	int64_t id;
	cache *c;

	fx_sqlite_only("the shared queue is PostgreSQL's (test_pg.c)");
	c = fx_open();
	cr_expect(!cache_is_shared(c));
	cr_expect_eq(cache_pass_jobs(c, &p, on_job, &s, &err), CACHE_EINVAL);
	cr_expect(strstr(err.message, "shared on PostgreSQL only"), "%s", err.message);
	cr_expect_eq(cache_release_jobs(c, &err), CACHE_EINVAL);
	cr_expect_eq(cache_new_job_id(c, &id, &err), CACHE_EINVAL);
	cr_expect_eq(cache_renew_jobs(c, 30, &id, 1, &err), CACHE_EINVAL);
	cr_expect_eq(cache_claim_plan(c, graph_key(1), DEVICE_GPU, CODEGEN, "{}", 60,
				      &err),
		     CACHE_EINVAL);
	cr_expect(strstr(err.message, "shared on PostgreSQL only"), "%s", err.message);
	id = 0;
	cr_expect_eq(cache_trials_after(c, graph_key(1), DEVICE_GPU, CODEGEN, &id, 10,
					&shared, &err),
		     CACHE_EINVAL);
	cr_expect_null(shared);
	cr_expect_eq(s.n, 0);
	cache_close(c);
}

Test(transfer, jobs_are_written_whole_replaced_by_id_and_read_in_order)
{
	cache *c = fx_open();
	cache_job jobs[2] = {job(2, "queued", 0), job(1, "running", 0)};
	cache_error err = { 0 };
	seen_jobs s = { 0 };

	cr_assert_eq(cache_put_jobs(c, jobs, 2, 1000, &err), 0, "%s", err.message);
	jobs[0] = job(2, "done", 3);
	cr_assert_eq(cache_put_jobs(c, jobs, 1, 1000, &err), 0, "%s", err.message);
	cr_assert_eq(cache_jobs(c, on_job, &s, &err), 2, "%s", err.message);
	cr_expect_eq(s.ids[0], 1);
	cr_expect_eq(s.ids[1], 2);
	cr_expect_str_eq(s.states[0], "running");
	cr_expect_str_eq(s.states[1], "done", "the second put replaced the row");
	cr_expect_str_eq(s.first_key, graph_key(1));
	cr_expect_str_eq(s.first_graph, GRAPH_JSON);
	cr_expect_eq(s.first.budget_s, 2.5);
	cr_expect_eq(s.first.max_trials, 40);
	cr_expect_eq(s.first.priority, -3);
	cr_expect_eq(s.first.trials, 7);
	cr_expect_eq(s.first.best_ms, 0, "no best time reads back as 0");
	cr_expect_eq(s.first.created_at, 1700000000.25);
	cr_expect_eq(s.first.finished_at, 0);
	cache_close(c);
}

/* A job written before is updated without its graph, which stays; an
 * update of a job never written is refused, and nothing is written. */
Test(transfer, a_job_written_before_is_updated_without_its_graph)
{
	cache *c = fx_open();
	cache_job jobs[2] = {job(1, "queued", 0), job(2, "queued", 0)};
	cache_error err = { 0 };
	seen_jobs s = { 0 };

	cr_assert_eq(cache_put_jobs(c, jobs, 1, 1000, &err), 0, "%s", err.message);
	jobs[0] = job(1, "done", 3);
	jobs[0].graph = NULL;
	jobs[0].key = jobs[0].name = "changed";
	cr_assert_eq(cache_put_jobs(c, jobs, 1, 1000, &err), 0, "%s", err.message);
	cr_assert_eq(cache_jobs(c, on_job, &s, &err), 1, "%s", err.message);
	cr_expect_str_eq(s.states[0], "done");
	cr_expect_eq(s.first.version, 3);
	cr_expect_str_eq(s.first_graph, GRAPH_JSON, "the graph stays");
	cr_expect_str_eq(s.first_key, graph_key(1), "the key never changes");
	jobs[1].graph = NULL;
	jobs[0].state = "failed";
	cr_expect_eq(cache_put_jobs(c, jobs, 2, 1000, &err), CACHE_NOT_FOUND);
	cr_expect(strstr(err.message, "cannot update job 2: it was never written"),
		  "%s", err.message);
	s = (seen_jobs){ 0 };
	cr_assert_eq(cache_jobs(c, on_job, &s, &err), 1, "%s", err.message);
	cr_expect_str_eq(s.states[0], "done", "a refused put changed a row");
	cache_close(c);
}

/* Schema version 5: who submitted a job, or not known (-1, stored NULL). */
Test(transfer, a_job_keeps_its_submitter)
{
	cache *c = fx_open();
	cache_job jobs[2] = {job(1, "queued", 0), job(2, "queued", 0)};
	cache_error err = { 0 };
	seen_jobs s = { 0 };

	jobs[0].uid = 1000;
	jobs[1].uid = -1;
	cr_assert_eq(cache_put_jobs(c, jobs, 2, 1000, &err), 0, "%s", err.message);
	cr_assert_eq(cache_jobs(c, on_job, &s, &err), 2, "%s", err.message);
	cr_expect_eq(s.first.uid, 1000);
	cr_expect_eq(s.last_uid, -1, "an unknown submitter reads back as -1");
	cache_close(c);
}

/* Jobs queued before version 5 have no submitter: not known (-1). */
Test(transfer, a_version_4_file_keeps_its_jobs_without_submitter)
{
	cache *c = fx_open();
	cache_job queued = job(1, "queued", 0);
	cache_error err = { 0 };
	seen_jobs s = { 0 };
	sqlite3 *db;

	queued.uid = 1000;
	cr_assert_eq(cache_put_jobs(c, &queued, 1, 1000, &err), 0, "%s", err.message);
	cache_close(c);
	db = raw_open(fx.path);
	cr_assert_eq(sqlite3_exec(db,
				  "DROP TABLE pins; ALTER TABLE jobs DROP COLUMN uid; "
				  "ALTER TABLE plans DROP COLUMN checksum; "
				  "ALTER TABLE plans DROP COLUMN bad; "
				  "PRAGMA user_version = 4",
				  NULL, NULL, NULL),
		     SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_close(db);
	c = fx_open();
	cr_expect(strstr(fx.last_log, "from version 4 to 7"), "%s", fx.last_log);
	cr_assert_eq(cache_jobs(c, on_job, &s, &err), 1, "%s", err.message);
	cr_expect_str_eq(s.states[0], "queued");
	cr_expect_eq(s.first.uid, -1, "a job from before has a submitter: %lld",
		     (long long)s.first.uid);
	cache_close(c);
}

Test(transfer, only_the_newest_finished_jobs_are_kept)
{
	cache *c = fx_open();
	cache_job jobs[5] = {job(1, "done", 1), job(2, "queued", 0),
			     job(3, "done", 1), job(4, "done", 1),
			     job(5, "running", 0)};
	seen_jobs s = { 0 };

	cr_assert_eq(cache_put_jobs(c, jobs, 5, 1, NULL), 0);
	cr_assert_eq(cache_jobs(c, on_job, &s, NULL), 3);
	cr_expect_eq(s.ids[0], 2);
	cr_expect_eq(s.ids[1], 4, "the newest finished job stays");
	cr_expect_eq(s.ids[2], 5);
	cache_close(c);
}

Test(transfer, bad_jobs_are_refused_and_nothing_is_written)
{
	cache *c = fx_open();
	cache_job jobs[2] = {job(1, "queued", 0), job(2, "paused", 0)};
	cache_error err = { 0 };
	seen_jobs s = { 0 };

	cr_expect_eq(cache_put_jobs(c, jobs, 2, 1000, &err), CACHE_EINVAL);
	cr_expect(strstr(err.message, "CHECK"), "%s", err.message);
	jobs[1] = job(0, "queued", 0);
	cr_expect_eq(cache_put_jobs(c, jobs, 2, 1000, &err), CACHE_EINVAL);
	cr_expect(strstr(err.message, "id is not positive"), "%s", err.message);
	cr_expect_eq(cache_jobs(c, on_job, &s, NULL), 0, "a refused put left rows");
	cache_close(c);
}

static void keep_graph(cache *c, int n, const char *json)
{
	cache_error err = { 0 };

	cr_assert_eq(cache_keep_graph_json(c, graph_key(n), json, &err), 0, "%s",
		     err.message);
}

Test(transfer, the_first_graph_json_of_a_key_is_kept)
{
	cache *c = fx_open();
	cache_error err = { 0 };
	json_t *entry = NULL;

	cr_expect_eq(cache_keep_graph_json(c, graph_key(1), GRAPH_JSON, &err),
		     CACHE_NOT_FOUND);
	put_graph(c, 1, "one");
	cr_expect_eq(cache_export_graph(c, graph_key(1), &entry, &err), CACHE_EINVAL);
	cr_expect(strstr(err.message, "no graph.json kept"), "%s", err.message);
	keep_graph(c, 1, GRAPH_JSON);
	keep_graph(c, 1, "{\"other\":1}");
	cr_assert_eq(cache_export_graph(c, graph_key(1), &entry, &err), 0, "%s",
		     err.message);
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(entry,
		"graph"), "name")), "g", "the first graph.json stays");
	json_decref(entry);
	cr_expect_eq(cache_export_graph(c, graph_key(2), &entry, &err), CACHE_NOT_FOUND);
	cr_expect(strstr(err.message, graph_key(2)), "%s", err.message);
	cache_close(c);
}

/* Exports graph 1 from fx.path; the entry. */
static json_t *export_one(void)
{
	cache *c = fx_open();
	json_t *entry = NULL;
	cache_error err = { 0 };

	put_graph(c, 1, "one");
	keep_graph(c, 1, GRAPH_JSON);
	publish(c, 1, DEVICE_CPU, CODEGEN, 1, 100);
	fx.now += 10;
	publish(c, 1, DEVICE_CPU, CODEGEN, 2, 100);
	publish(c, 1, DEVICE_GPU, CODEGEN, 3, 100);
	cr_assert_eq(cache_export_graph(c, graph_key(1), &entry, &err), 0, "%s",
		     err.message);
	cache_close(c);
	return entry;
}

/* A second cache beside fx.path, of its engine. */
static cache *open_other(const char *name)
{
	cache_options o = fx_options();
	cache *c = NULL;
	char path[400];

	fx_other_cache_path(name, path, sizeof(path));
	cr_assert_eq(cache_open(path, &o, &c, NULL), 0);
	return c;
}

Test(transfer, an_export_imports_whole_into_another_cache)
{
	json_t *entry = export_one(), *versions = json_object_get(entry, "versions");
	cache *c = open_other("other");
	cache_plan *plan = NULL, *original = NULL;
	cache_error err = { 0 };
	json_t *out = NULL;
	cache *first;

	cr_assert_eq(json_array_size(versions), 3);
	cr_expect(json_is_string(json_object_get(json_array_get(versions, 0),
						 "binaries")), "binaries as base64");
	cr_assert_eq(cache_import_graph(c, entry, graph_canonical(1), &out, &err), 0,
		     "%s", err.message);
	cr_expect_eq(json_integer_value(json_object_get(out, "versions")), 3);
	cr_expect_eq(json_array_size(json_object_get(out, "kept")), 0);
	json_decref(out);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_GPU, CODEGEN, 0, NULL,
				      NULL), 1, "the other device's version, under it");
	cr_assert_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0, &plan,
				      &err), 2, "%s", err.message);
	cache_close(c);
	first = fx_open();
	cr_assert_eq(cache_fetch_best(first, graph_key(1), DEVICE_CPU, CODEGEN, 0,
				      &original, NULL), 2);
	cr_expect_str_eq(plan->plan, original->plan);
	cr_expect_str_eq(plan->sources, original->sources);
	cr_expect_str_eq(plan->launch, original->launch);
	cr_expect_str_eq(plan->found_by, original->found_by);
	cr_expect_eq(plan->created_at, original->created_at);
	cr_expect_eq(plan->median_ms, original->median_ms);
	cr_assert_eq(plan->binaries_len, original->binaries_len);
	cr_expect_eq(memcmp(plan->binaries, original->binaries, plan->binaries_len), 0);
	cache_plan_free(plan);
	cache_plan_free(original);
	cache_close(first);
	json_decref(entry);
}

Test(transfer, an_import_keeps_the_versions_a_cache_has)
{
	json_t *entry = export_one(), *out = NULL;
	cache *c = open_other("other");
	cache_error err = { 0 };

	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_CPU, CODEGEN, 9, 10);
	cr_assert_eq(cache_import_graph(c, entry, graph_canonical(1), &out, &err), 0,
		     "%s", err.message);
	cr_expect_eq(json_integer_value(json_object_get(out, "versions")), 1,
		     "only the other device's version: %s", json_dumps(out, 0));
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(
		json_object_get(out, "kept"), 0), "reason")),
		"the cache's version 1 is as fast (0.1 ms; the file's version 2: "
		"0.3333 ms)");
	json_decref(out);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0, NULL,
				      NULL), 1, "the cache's own version stays");
	/* a second import of the same entry changes nothing */
	cr_assert_eq(cache_import_graph(c, entry, graph_canonical(1), &out, &err), 0);
	cr_expect_eq(json_integer_value(json_object_get(out, "versions")), 0);
	cr_expect_eq(json_array_size(json_object_get(out, "kept")), 2);
	json_decref(out);
	cache_close(c);
	json_decref(entry);
}

/* A cache that has a slower version of a device and codegen gets the
 * file's newest as its next version. */
Test(transfer, a_faster_version_is_imported_as_the_next_one)
{
	json_t *entry = export_one(), *out = NULL;
	cache *c = open_other("other");
	cache_error err = { 0 };
	cache_plan *plan = NULL;

	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_CPU, CODEGEN, 0, 10); /* 1 ms; the file's 0.333 */
	cr_assert_eq(cache_import_graph(c, entry, graph_canonical(1), &out, &err), 0,
		     "%s", err.message);
	cr_expect_eq(json_integer_value(json_object_get(out, "versions")), 2,
		     "%s", json_dumps(out, 0));
	cr_expect_eq(json_array_size(json_object_get(out, "kept")), 0);
	json_decref(out);
	cr_assert_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0, &plan,
				      &err), 2, "%s", err.message);
	cr_expect_str_eq(plan->found_by, "imported: genetic round 2");
	cr_expect_eq(plan->median_ms, 1.0 / 3);
	cr_expect_eq(plan->created_at, fx.now, "published here now");
	cache_plan_free(plan);
	/* then the file is no longer faster */
	cr_assert_eq(cache_import_graph(c, entry, graph_canonical(1), &out, &err), 0);
	cr_expect_eq(json_integer_value(json_object_get(out, "versions")), 0);
	json_decref(out);
	cache_close(c);
	json_decref(entry);
}

Test(transfer, a_malformed_entry_is_refused_whole)
{
	json_t *entry = export_one(), *out = NULL;
	json_t *second = json_array_get(json_object_get(entry, "versions"), 1);
	cache *c = open_other("other");
	cache_error err = { 0 };
	cache_stats st;

	json_object_set_new(second, "sources", json_string("not an array"));
	cr_expect_eq(cache_import_graph(c, entry, graph_canonical(1), &out, &err),
		     CACHE_EINVAL);
	cr_expect(strstr(err.message, "versions[1]: sources"), "%s", err.message);
	cr_expect(strstr(err.message, graph_key(1)), "%s", err.message);
	cr_expect_null(out);
	json_object_set_new(second, "sources", json_pack("[s]", "x"));
	json_object_set_new(second, "binaries", json_string("not*base64"));
	cr_expect_eq(cache_import_graph(c, entry, graph_canonical(1), &out, &err),
		     CACHE_EINVAL);
	cr_expect(strstr(err.message, "binaries are not base64"), "%s", err.message);
	cr_assert_eq(cache_stat(c, &st, NULL), 0);
	cr_expect_eq(st.plans, 0, "a refused entry left versions");
	cr_expect_eq(st.graphs, 0, "a refused entry left its graph");
	json_object_del(second, "binaries");
	put_graph(c, 1, NULL);
	cr_expect_eq(cache_import_graph(c, entry, graph_canonical(2), &out, &err),
		     CACHE_EINVAL, "a canonical text that is not the cached one");
	cr_expect(strstr(err.message, "canonical text differs"), "%s", err.message);
	cr_assert_eq(cache_stat(c, &st, NULL), 0);
	cr_expect_eq(st.plans, 0, "a refused entry left versions");
	cache_close(c);
	json_decref(entry);
}

static int64_t listed_bytes;

static int on_entry(void *user, const cache_entry *e)
{
	(void)user;
	if (!strcmp(e->device, DEVICE_CPU))
		listed_bytes = e->bytes;
	return 0;
}

Test(transfer, a_listed_entry_counts_the_bytes_it_holds)
{
	cache *c = fx_open();
	cache_trial trial = {graph_key(1), DEVICE_CPU, CODEGEN, "{\"kernels\":[]}",
			     CACHE_TRIAL_OK, 1.0, "twelve bytes"};
	int64_t one, two;

	put_graph(c, 1, NULL);
	publish(c, 1, DEVICE_CPU, CODEGEN, 1, 1000);
	cr_assert_eq(cache_list(c, on_entry, NULL, NULL), 1);
	one = listed_bytes;
	cr_expect_gt(one, 1000, "less than its source: %lld", (long long)one);
	publish(c, 1, DEVICE_CPU, CODEGEN, 2, 1000);
	publish(c, 1, DEVICE_GPU, CODEGEN, 2, 5000);
	cr_assert_eq(cache_list(c, on_entry, NULL, NULL), 2);
	two = listed_bytes;
	cr_expect_gt(two - one, 1000, "a second version of 1000 bytes of source "
		     "added %lld", (long long)(two - one));
	cr_expect_lt(two - one, 2000, "the other device's version was counted");
	cr_assert_eq(cache_record_trial(c, &trial, NULL), 0);
	cr_assert_eq(cache_list(c, on_entry, NULL, NULL), 2);
	cr_expect_eq(listed_bytes - two, (int64_t)(strlen(trial.plan) + 12));
	cache_close(c);
}

Test(transfer, a_version_1_file_is_migrated_with_its_data)
{
	cache *c = fx_open();
	sqlite3 *db;
	seen_jobs s = { 0 };

	put_graph(c, 1, "one");
	publish(c, 1, DEVICE_CPU, CODEGEN, 1, 10);
	cache_close(c);
	db = raw_open(fx.path);
	cr_assert_eq(
		sqlite3_exec(
			db,
			"DROP TABLE pins; DROP TABLE jobs; ALTER TABLE graphs DROP "
			"COLUMN graph; ALTER TABLE quarantine DROP COLUMN cause; "
			"ALTER TABLE quarantine DROP COLUMN signal; ALTER TABLE "
			"quarantine DROP COLUMN time_limit_s; ALTER TABLE quarantine "
			"DROP COLUMN seed; ALTER TABLE quarantine DROP COLUMN "
			"graph_json; ALTER TABLE quarantine DROP COLUMN sources; "
			"ALTER TABLE quarantine DROP COLUMN worker_log; "
			"ALTER TABLE plans DROP COLUMN checksum; "
			"ALTER TABLE plans DROP COLUMN bad; "
			"PRAGMA user_version = 1",
			NULL, NULL, NULL),
		SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_close(db);
	c = fx_open();
	cr_expect(strstr(fx.last_log, "from version 1 to 7"), "%s", fx.last_log);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0, NULL,
				      NULL), 1, "the version 1 file's plan is gone");
	cr_expect_eq(cache_jobs(c, on_job, &s, NULL), 0);
	keep_graph(c, 1, GRAPH_JSON);
	cache_close(c);
}
