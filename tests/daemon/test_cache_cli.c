/*
 * test_cache_cli.c: tunectl's cache commands against a real tuned on a
 * temporary socket and cache: prune with each combination of limits,
 * the bytes of cache ls, export from one daemon and import into another
 * (served there, run from the fetched files), tampered files refused
 * naming the key, and versions of another device kept apart.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"

/* The entries of tunectl cache ls --json. */
static json_t *cache_ls(const fixture *f)
{
	int status;
	json_t *out = fixture_tunectl_json(f, &status, (const char *const[]){
		"cache", "ls", NULL});
	json_t *list;

	cr_assert_eq(status, 0, "cache ls failed");
	list = json_incref(json_object_get(out, "entries"));
	cr_assert(json_is_array(list), "%s", json_dumps(out, 0));
	json_decref(out);
	return list;
}

static size_t entries(const fixture *f)
{
	json_t *list = cache_ls(f);
	size_t n = json_array_size(list);

	json_decref(list);
	return n;
}

/* tunectl cache prune with "args"; asserts it succeeds, returns the keys
 * it removed. */
static json_int_t prune(const fixture *f, const char *const *args)
{
	const char *argv[8] = {"cache", "prune"};
	json_int_t removed;
	json_t *out;
	int status, n = 2;

	for (int i = 0; args[i]; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	out = fixture_tunectl_json(f, &status, argv);
	cr_assert_eq(status, 0, "cache prune %s %s failed: %s", args[0] ?: "",
		     args[0] && args[1] ? args[1] : "", json_dumps(out, 0));
	cr_assert(json_is_integer(json_object_get(out, "removed")), "%s",
		  json_dumps(out, 0));
	removed = json_integer_value(json_object_get(out, "removed"));
	json_decref(out);
	return removed;
}

/* The daemons of a test, stopped by the suite's fini even when an
 * assertion ends the test early (a daemon left running would hold the
 * test's output open). */
static fixture *running[4];

static void start(fixture *f, conn *c)
{
	fixture_init(f);
	fixture_start(f, NULL);
	for (int i = 0; i < 4; i++)
		if (!running[i]) {
			running[i] = f;
			break;
		}
	cr_assert(conn_open(c, f->socket));
	conn_hello(c);
}

/* Removes the folder of "f", whose daemon is stopped. */
static void cleanup(fixture *f)
{
	fixture_cleanup(f);
	for (int i = 0; i < 4; i++)
		if (running[i] == f)
			running[i] = NULL;
}

static void stop(fixture *f, conn *c)
{
	conn_close(c);
	cr_expect_eq(fixture_stop(f, SIGTERM, NULL), 0);
	cleanup(f);
}

static void stop_all(void)
{
	for (int i = 0; i < 4; i++)
		if (running[i])
			fixture_cleanup(running[i]);
}

TestSuite(cache_cli, .fini = stop_all);

/* Each limit alone, both, and limits that keep everything: entries go
 * exactly when a limit says so. */
Test(cache_cli, prune_with_either_limit_or_both, .timeout = 120)
{
	fixture f;
	conn c;

	char *output;

	start(&f, &c);
	free(tune_example(&c, "softmax_scores_small", 120));
	cr_expect_eq(entries(&f), 1);
	cr_expect_eq(fixture_tunectl(&f, &output, (const char *const[]){"cache", "prune",
				     NULL}), 2, "no limit is a usage error");
	cr_expect(strstr(output, "--max-age S") && strstr(output, "--max-bytes N"),
		  "the error does not say what to give: %s", output);
	free(output);
	cr_expect_eq(fixture_tunectl(&f, NULL, (const char *const[]){"cache", "prune",
				     "--max-age", "0", NULL}), 2, "--max-age 0 means nothing");
	cr_expect_eq(prune(&f, (const char *const[]){"--max-age", "1d", NULL}), 0);
	cr_expect_eq(prune(&f, (const char *const[]){"--max-bytes", "1G", NULL}), 0);
	cr_expect_eq(prune(&f, (const char *const[]){"--max-age", "1d", "--max-bytes",
					       "1G", NULL}), 0);
	cr_expect_eq(entries(&f), 1, "a limit that keeps everything removed something");

	sleep(2); /* then the entry is older than 1 s */
	cr_expect_eq(prune(&f, (const char *const[]){"--max-age", "1", NULL}), 1);
	cr_expect_eq(entries(&f), 0, "--max-age 1 left the entry");

	free(tune_example(&c, "softmax_scores_small", 120));
	free(tune_example(&c, "ln_residual_small", 120));
	cr_expect_eq(entries(&f), 2);
	cr_expect_eq(prune(&f, (const char *const[]){"--max-bytes", "1", NULL}), 2);
	cr_expect_eq(entries(&f), 0, "--max-bytes 1 left entries");
	stop(&f, &c);
}

/* The protocol's prune with no limit removes nothing and succeeds. */
Test(cache_cli, prune_request_without_limits_removes_nothing, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *reply;

	start(&f, &c);
	free(tune_example(&c, "softmax_scores_small", 120));
	reply = conn_call(&c, "cache.prune", NULL);
	cr_expect_eq(json_integer_value(json_object_get(result_of(reply), "removed")), 0,
		     "%s", json_dumps(reply, 0));
	cr_expect_eq(json_integer_value(json_object_get(result_of(reply), "entries")), 1,
		     "%s", json_dumps(reply, 0));
	json_decref(reply);
	stop(&f, &c);
}

static json_int_t bytes_of(json_t *list, const char *key)
{
	json_t *entry;
	size_t i;

	json_array_foreach(list, i, entry)
		if (!strcmp(json_string_value(json_object_get(entry, "key")), key))
			return json_integer_value(json_object_get(entry, "bytes"));
	cr_assert_fail("no entry for %s", key);
	return -1;
}

/* cache ls shows what an entry holds: more than its sources, and more
 * once it has more trials. */
Test(cache_cli, ls_shows_the_bytes_of_each_entry, .timeout = 120)
{
	fixture f;
	conn c;
	json_t *list, *reply;
	json_int_t before, sources;
	char *key, *text;

	start(&f, &c);
	key = tune_example(&c, "softmax_scores_small", 120);
	list = cache_ls(&f);
	before = bytes_of(list, key);
	json_decref(list);
	reply = conn_call(&c, "fetch", json_pack("{s:s}", "key", key));
	text = json_dumps(json_object_get(result_of(reply), "sources"), JSON_COMPACT);
	sources = (json_int_t)strlen(text);
	free(text);
	json_decref(reply);
	cr_expect_gt(before, sources, "%lld bytes, its sources alone %lld",
		     (long long)before, (long long)sources);

	/* a search of the same key adds trials (and maybe versions) */
	reply = conn_call(&c, "submit", json_pack("{s:s, s:f}", "graph",
		text = example_text("softmax_scores_small"), "budget", 3.0));
	free(text);
	json_decref(wait_job(&c, json_integer_value(json_object_get(result_of(reply),
								     "id")), 120));
	json_decref(reply);
	list = cache_ls(&f);
	cr_expect_gt(bytes_of(list, key), before, "the trials of a search added nothing");
	json_decref(list);
	free(key);
	stop(&f, &c);
}

/* Exports "key" from "f" into "path" with tunectl. */
static void export_key(const fixture *f, const char *key, const char *path)
{
	char *output;
	int status = fixture_tunectl(f, &output, (const char *const[]){
		"cache", "export", key, "--out", path, NULL});

	cr_assert_eq(status, 0, "cache export: %s", output);
	free(output);
}

/* Imports "path" into "f" with tunectl: its exit status, *output its
 * text. */
static int import_file(const fixture *f, const char *path, char **output)
{
	return fixture_tunectl(f, output, (const char *const[]){
		"cache", "import", path, NULL});
}

static void expect_contains(const char *text, const char *part)
{
	cr_expect(strstr(text, part), "'%s' not in:\n%s", part, text);
}

/* What the first daemon tuned is served by the second, whose fetched
 * plan runs and verifies. */
Test(cache_cli, export_then_import_serves_the_key_elsewhere, .timeout = 180)
{
	fixture a, b;
	conn ca, cb;
	char file[200], dir[200], plan[220], graph[300], *key, *output;

	start(&a, &ca);
	start(&b, &cb);
	key = tune_example(&ca, "softmax_scores_small", 120);
	snprintf(file, sizeof(file), "%s/export.json", a.dir);
	export_key(&a, key, file);
	cr_expect_eq(import_file(&b, file, &output), 0, "%s", output);
	expect_contains(output, key);
	free(output);
	snprintf(dir, sizeof(dir), "%s/fetched", b.dir);
	cr_expect_eq(fixture_tunectl(&b, &output, (const char *const[]){
		"fetch", key, "--out", dir, NULL}), 0, "%s", output);
	free(output);
	snprintf(plan, sizeof(plan), "%s/plan.json", dir);
	snprintf(graph, sizeof(graph), "%s/examples/softmax_scores_small.json",
		 getenv("TUNED_SOURCE_ROOT"));
	cr_expect_eq(fixture_tunectl(NULL, &output, (const char *const[]){
		"run", graph, "--backend", "cpu", "--plan", plan, NULL}), 0,
		"the imported plan does not run: %s", output);
	free(output);
	/* --all exports the same key */
	cr_expect_eq(fixture_tunectl(&a, &output, (const char *const[]){"cache", "export",
		"--all", "--out", file, NULL}), 0, "%s", output);
	expect_contains(output, "exported 1 key to");
	free(output);
	/* a second import keeps what is there: the same version, as fast */
	cr_expect_eq(import_file(&b, file, &output), 0, "%s", output);
	expect_contains(output, "is as fast");
	free(output);
	free(key);
	stop(&a, &ca);
	stop(&b, &cb);
}

/* Loads "path", lets "edit" change its first entry, writes it back. */
static void tamper(const char *path, void (*edit)(json_t *entry))
{
	json_t *file = json_load_file(path, 0, NULL);

	cr_assert_not_null(file, "%s is not JSON", path);
	edit(json_array_get(json_object_get(file, "entries"), 0));
	cr_assert_eq(json_dump_file(file, path, JSON_INDENT(1)), 0);
	json_decref(file);
}

static json_t *first_version(json_t *entry)
{
	return json_array_get(json_object_get(entry, "versions"), 0);
}

/* Another graph under the key: a shape changed. */
static void change_graph(json_t *entry)
{
	json_t *tensors = json_object_get(json_object_get(entry, "graph"), "tensors");
	const char *name;
	json_t *tensor;

	json_object_foreach(tensors, name, tensor) {
		json_t *shape = json_object_get(tensor, "shape");

		json_array_set_new(shape, 0, json_integer(json_integer_value(
			json_array_get(shape, 0)) * 2));
	}
}

/* A plan whose kernel computes an op the graph does not have. */
static void break_plan(json_t *entry)
{
	json_t *kernel = json_array_get(json_object_get(json_object_get(
		first_version(entry), "plan"), "kernels"), 0);

	json_object_set_new(kernel, "ops", json_pack("[i]", 99));
}

static void other_device(json_t *entry)
{
	json_object_set_new(first_version(entry), "device",
			    json_string("cpu: another machine"));
}

static void expect_not_served(const fixture *f, const char *key)
{
	char *output;

	cr_expect_eq(fixture_tunectl(f, &output, (const char *const[]){"fetch", key,
				     NULL}), 1, "%s", output);
	free(output);
}

/* A tampered file is refused, naming the key and the cause; the daemon
 * goes on serving; nothing of the entry is stored. */
Test(cache_cli, a_tampered_export_is_refused_naming_the_key, .timeout = 180)
{
	fixture a, b;
	conn ca, cb;
	char file[200], *key, *output;
	json_t *list, *reply;

	start(&a, &ca);
	start(&b, &cb);
	key = tune_example(&ca, "softmax_scores_small", 120);
	snprintf(file, sizeof(file), "%s/export.json", a.dir);

	export_key(&a, key, file);
	tamper(file, change_graph);
	cr_expect_eq(import_file(&b, file, &output), 1, "%s", output);
	expect_contains(output, key);
	expect_contains(output, "not the entry's");
	free(output);

	export_key(&a, key, file);
	tamper(file, break_plan);
	cr_expect_eq(import_file(&b, file, &output), 1, "%s", output);
	expect_contains(output, key);
	expect_contains(output, "does not fit the graph");
	free(output);

	expect_not_served(&b, key);
	list = cache_ls(&b);
	cr_expect_eq(json_array_size(list), 0, "a refused entry was stored");
	json_decref(list);
	/* an object that is no export */
	reply = conn_call(&cb, "cache.import", json_pack("{s:{s:s}}", "export",
							 "format", "trt-timing-cache"));
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(reply, "error"),
							   "message")),
			 "params.export: not a cache export: it needs \"format\": "
			 "\"tuned-cache-export\", \"format_version\": 1 and \"entries\"");
	json_decref(reply);
	reply = conn_call(&cb, "ping", NULL);
	cr_expect_not_null(result_of(reply), "the daemon stopped serving");
	json_decref(reply);
	/* a key the daemon does not have is named */
	cr_expect_eq(fixture_tunectl(&b, &output, (const char *const[]){"cache",
		"export", key, "--out", file, NULL}), 1, "%s", output);
	expect_contains(output, key);
	expect_contains(output, "is not in the cache");
	free(output);
	free(key);
	stop(&a, &ca);
	stop(&b, &cb);
}

/* Versions of another device signature are stored under it, listed, and
 * never served to this device. */
Test(cache_cli, another_device_s_versions_are_kept_apart, .timeout = 180)
{
	fixture a, b;
	conn ca, cb;
	char file[200], *key, *output;
	json_t *list;

	start(&a, &ca);
	start(&b, &cb);
	key = tune_example(&ca, "softmax_scores_small", 120);
	snprintf(file, sizeof(file), "%s/export.json", a.dir);
	export_key(&a, key, file);
	tamper(file, other_device);
	cr_expect_eq(import_file(&b, file, &output), 0, "%s", output);
	free(output);
	expect_not_served(&b, key);
	list = cache_ls(&b);
	cr_expect_eq(json_array_size(list), 1);
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(list, 0),
							   "device")),
			 "cpu: another machine");
	json_decref(list);
	free(key);
	stop(&a, &ca);
	stop(&b, &cb);
}

/* --cache works on a cache file no daemon holds, and is refused, saying
 * so, on one a daemon holds. */
Test(cache_cli, export_and_import_offline_on_cache_files, .timeout = 180)
{
	fixture a, b;
	conn ca, cb;
	char file[200], *key, *output;

	start(&a, &ca);
	start(&b, &cb);
	key = tune_example(&ca, "softmax_scores_small", 120);
	snprintf(file, sizeof(file), "%s/export.json", a.dir);
	cr_expect_eq(fixture_tunectl(NULL, &output, (const char *const[]){"cache",
		"export", key, "--out", file, "--cache", a.cache, NULL}), 1);
	expect_contains(output, "a daemon holds it");
	free(output);
	conn_close(&ca);
	cr_assert_eq(fixture_stop(&a, SIGTERM, NULL), 0);
	cr_expect_eq(fixture_tunectl(NULL, &output, (const char *const[]){"cache",
		"export", key, "--out", file, "--cache", a.cache, NULL}), 0, "%s", output);
	free(output);

	conn_close(&cb);
	cr_assert_eq(fixture_stop(&b, SIGTERM, NULL), 0);
	cr_expect_eq(fixture_tunectl(NULL, &output, (const char *const[]){"cache",
		"import", file, "--cache", b.cache, NULL}), 0, "%s", output);
	expect_contains(output, key);
	free(output);
	fixture_start(&b, NULL);
	cr_expect_eq(fixture_tunectl(&b, &output, (const char *const[]){"fetch", key,
		NULL}), 0, "the key imported offline is not served: %s", output);
	free(output);
	free(key);
	cleanup(&a);
	stop(&b, &cb);
}
