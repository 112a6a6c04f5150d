/*
 * test_checksum.c: each version's checksum of its plan, sources and
 * launch: a same-length edit behind the cache's back (integrity_check
 * passes it) is never served, is logged and marked bad, and a fetch falls
 * back to the newest good version; versions stored before the checksum
 * get one when the file is migrated.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cache_test.h"

TestSuite(checksum, .init = fx_setup, .fini = fx_teardown, .timeout = 60);

static int64_t length_of(sqlite3 *db, const char *column, int version)
{
	char *sql = sqlite3_mprintf("SELECT length(CAST(%s AS BLOB)) FROM plans "
				    "WHERE version = %d", column, version);
	int64_t n = raw_int(db, sql);

	sqlite3_free(sql);
	return n;
}

/* Changes one character of "column" of version "version" of graph 1, in
 * place: the text keeps its length. */
static void edit_behind_the_back(const char *column, int version)
{
	sqlite3 *db = raw_open(fx.path);
	char *sql = sqlite3_mprintf(
		"UPDATE plans SET %s = substr(%s, 1, 5) || CASE substr(%s, 6, 1) "
		"WHEN 'a' THEN 'b' ELSE 'a' END || substr(%s, 7) WHERE version = %d",
		column, column, column, column, version);
	int64_t before = length_of(db, column, version);
	char check[32];

	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s",
		     sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_changes(db), 1);
	cr_assert_eq(length_of(db, column, version), before,
		     "the edit changed the length");
	raw_text(db, "PRAGMA integrity_check", check, sizeof(check));
	cr_assert_str_eq(check, "ok", "integrity_check passes such an edit");
	sqlite3_free(sql);
	sqlite3_close(db);
}

static int64_t marked_bad(int version)
{
	sqlite3 *db = raw_open(fx.path);
	char *sql = sqlite3_mprintf("SELECT count(*) FROM plans WHERE version = %d "
				    "AND bad IS NOT NULL", version);
	int64_t n = raw_int(db, sql);

	sqlite3_free(sql);
	sqlite3_close(db);
	return n;
}

/* A cache with versions 1 and 2 of graph 1 on the cpu, closed. */
static void two_versions(void)
{
	cache *c = fx_open();

	put_graph(c, 1, "one");
	cr_assert_eq(publish(c, 1, DEVICE_CPU, CODEGEN, 1, 100), 1);
	cr_assert_eq(publish(c, 1, DEVICE_CPU, CODEGEN, 2, 100), 2);
	cache_close(c);
}

static int fetch(cache *c, int min_version, cache_error *err)
{
	return cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, min_version,
				NULL, err);
}

static const char *bad_of(json_t *shown, int version)
{
	json_t *plan;
	size_t i;

	json_array_foreach(json_object_get(shown, "plans"), i, plan)
		if (json_integer_value(json_object_get(plan, "version")) == version)
			return json_string_value(json_object_get(plan, "bad"));
	cr_assert_fail("no version %d shown", version);
	return NULL;
}

Test(checksum, an_edited_source_is_not_served_and_is_marked_bad)
{
	cache_error err = { 0 };
	json_t *shown = NULL, *entry = NULL;
	cache *c;

	two_versions();
	edit_behind_the_back("sources", 2);
	c = fx_open();
	cr_expect_eq(cache_show(c, graph_key(1), &shown, &err), 0, "%s", err.message);
	cr_expect_str_eq(bad_of(shown, 2) ?: "", "fails its checksum");
	cr_expect_null(bad_of(shown, 1));
	json_decref(shown);

	cr_expect_eq(fetch(c, 0, &err), 1, "the edited version 2 was served");
	cr_expect_eq(fx.error_logs, 1);
	cr_expect(strstr(fx.error_log, graph_key(1)) && strstr(fx.error_log, "version 2") &&
		  strstr(fx.error_log, "fails its checksum"), "logged: %s", fx.error_log);
	cr_expect_eq(marked_bad(2), 1, "version 2 is not marked bad");
	cr_expect_eq(marked_bad(1), 0);
	/* marked once: later fetches skip it without a word */
	cr_expect_eq(fetch(c, 0, &err), 1);
	cr_expect_eq(fx.error_logs, 1);
	cr_expect_eq(fetch(c, 2, &err), CACHE_NOT_FOUND);

	/* nor is it exported */
	cr_assert_eq(cache_keep_graph_json(c, graph_key(1), "{\"name\":\"g\"}", &err), 0,
		     "%s", err.message);
	cr_assert_eq(cache_export_graph(c, graph_key(1), &entry, &err), 0, "%s",
		     err.message);
	cr_expect_eq(json_array_size(json_object_get(entry, "versions")), 1);
	json_decref(entry);
	cr_expect_eq(cache_show(c, graph_key(1), &shown, &err), 0);
	cr_expect(strstr(bad_of(shown, 2) ?: "", "fails its checksum (found at "),
		  "%s", bad_of(shown, 2));
	json_decref(shown);
	/* the next version published is numbered after it, and served */
	cr_expect_eq(publish(c, 1, DEVICE_CPU, CODEGEN, 3, 100), 3);
	cr_expect_eq(fetch(c, 2, &err), 3);
	cache_close(c);
}

Test(checksum, an_edited_plan_or_launch_is_not_served_either)
{
	cache *c;

	two_versions();
	edit_behind_the_back("plan", 2);
	edit_behind_the_back("launch", 1);
	c = fx_open();
	cr_expect_eq(fetch(c, 0, NULL), CACHE_NOT_FOUND);
	cr_expect_eq(marked_bad(1) + marked_bad(2), 2);
	cache_close(c);
}

Test(checksum, with_no_good_version_left_the_error_says_why)
{
	cache_error err = { 0 };
	cache *c = fx_open();

	put_graph(c, 1, "one");
	cr_assert_eq(publish(c, 1, DEVICE_CPU, CODEGEN, 1, 100), 1);
	cache_close(c);
	edit_behind_the_back("sources", 1);
	c = fx_open();
	cr_expect_eq(fetch(c, 0, &err), CACHE_NOT_FOUND);
	cr_expect(strstr(err.message, "version 1 failed its checksum"), "%s", err.message);
	cache_close(c);
}

static void *fetch_elsewhere(void *arg)
{
	return (void *)(intptr_t)fetch(arg, 0, NULL);
}

/* A reader on another thread cannot write: it skips the version, which
 * the owner marks at its next fetch. */
Test(checksum, a_reader_thread_skips_it_and_the_owner_marks_it)
{
	pthread_t thread;
	void *version;
	cache *c;

	two_versions();
	edit_behind_the_back("sources", 2);
	c = fx_open();
	cr_assert_eq(pthread_create(&thread, NULL, fetch_elsewhere, c), 0);
	pthread_join(thread, &version);
	cr_expect_eq((intptr_t)version, 1);
	cr_expect_eq(marked_bad(2), 0);
	cr_expect_eq(fetch(c, 0, NULL), 1);
	cr_expect_eq(marked_bad(2), 1);
	cache_close(c);
}

/* A file from before the checksum: its versions were trusted, and get the
 * checksum of what they hold when it is migrated; an edit after that is
 * caught. */
Test(checksum, versions_stored_before_get_their_checksum_at_migration)
{
	sqlite3 *db;
	cache *c;

	two_versions();
	db = raw_open(fx.path);
	cr_assert_eq(
		sqlite3_exec(db,
			     "DROP TABLE pins; ALTER TABLE plans DROP COLUMN checksum; "
			     "ALTER TABLE plans DROP COLUMN bad; "
			     "ALTER TABLE jobs DROP COLUMN uid; "
			     "PRAGMA user_version = 4",
			     NULL, NULL, NULL),
		SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_close(db);
	c = fx_open();
	cr_expect(strstr(fx.last_log, "from version 4 to 7"), "%s", fx.last_log);
	cr_expect_eq(fetch(c, 0, NULL), 2);
	cache_close(c);
	db = raw_open(fx.path);
	cr_expect_eq(raw_int(db, "SELECT count(*) FROM plans WHERE length(checksum) = 64"),
		     2);
	sqlite3_close(db);
	edit_behind_the_back("sources", 2);
	c = fx_open();
	cr_expect_eq(fetch(c, 0, NULL), 1);
	cr_expect_eq(marked_bad(2), 1);
	cache_close(c);
}
