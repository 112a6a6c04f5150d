/*
 * test_failures.c: every failure says why, through the real tuned with
 * the scripted worker: a failed job's reason reaches its status and a
 * waiting fetch, a worker's crash or hang is logged with the plan's hash
 * and the signal or time limit, a full cache is named as the cause, a
 * cancelled job publishes nothing after the reply, and a stored version
 * edited behind the cache's back is not served.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "scheduler.h"

#define EXAMPLE "softmax_scores_small"

static const char *event_name(json_t *event)
{
	return json_string_value(json_object_get(event, "event")) ?: "";
}

/* Starts tuned on the scripted worker with times "mode", each measurement
 * taking "delay_ms"; its first measurement dies ("crash") or hangs
 * ("hang") when "how" is not NULL. */
static void start_scripted(fixture *f, const char *mode, const char *delay_ms,
			   const char *how)
{
	const char *const extra[] = {"--compile-workers", "1", NULL};
	char marker[160];

	snprintf(marker, sizeof(marker), "%s/crashed", f->dir);
	setenv("TUNED_WORKER", getenv("SCRIPTED_WORKER"), 1);
	setenv("SCRIPTED_TIMES", mode, 1);
	setenv("SCRIPTED_DELAY_MS", delay_ms, 1);
	unsetenv("SCRIPTED_CRASH_OP");
	if (how) {
		setenv("SCRIPTED_CRASH", marker, 1);
		setenv("SCRIPTED_CRASH_HOW", how, 1);
	} else {
		unsetenv("SCRIPTED_CRASH");
		unsetenv("SCRIPTED_CRASH_HOW");
	}
	fixture_start(f, extra);
}

static void connect_to(const fixture *f, conn *c)
{
	cr_assert(conn_open(c, f->socket));
	conn_hello(c);
}

/* Submits the example: no budget (one trial), or "budget" seconds and at
 * most "trials" trials. */
static json_int_t submit(conn *c, double budget, int trials)
{
	char *text = example_text(EXAMPLE);
	json_t *params = json_pack("{s:s}", "graph", text), *reply;
	json_int_t job;

	if (budget > 0)
		json_object_update_new(params, json_pack("{s:f, s:i}", "budget", budget,
							 "trials", trials));
	reply = conn_call(c, "submit", params);
	job = json_integer_value(json_object_get(result_of(reply), "id"));
	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	free(text);
	return job;
}

static json_t *status(conn *c, json_int_t job)
{
	return conn_call(c, "status", json_pack("{s:I}", "job", job));
}

static const char *field(json_t *reply, const char *name)
{
	return json_string_value(json_object_get(result_of(reply), name)) ?: "";
}

/* The hash the log names a plan by: the first 12 hex digits of the
 * SHA-256 of its compact text with sorted keys. */
static void plan_hash(const json_t *plan, char hash[13])
{
	char *text = json_dumps(plan, JSON_COMPACT | JSON_SORT_KEYS);
	char hex[SCHED_KEY_HEX + 1];

	cr_assert_not_null(text);
	sched_sha256_hex(text, strlen(text), hex);
	snprintf(hash, 13, "%.12s", hex);
	free(text);
}

/* The plan of the one quarantine entry, hashed. */
static void quarantined_hash(conn *c, char hash[13])
{
	json_t *reply = conn_call(c, "cache.quarantine", NULL);
	json_t *entries = json_object_get(result_of(reply), "entries");

	cr_assert_eq(json_array_size(entries), 1, "%s", json_dumps(reply, 0));
	plan_hash(json_object_get(json_array_get(entries, 0), "plan"), hash);
	json_decref(reply);
}

/* The job fails, and both its status and the fetch that waits on it (on
 * "waiter") say why: with "why" and "more" in the message. */
static void expect_failure_told(conn *c, conn *waiter, json_int_t job, const char *why,
				const char *more)
{
	json_t *reply = conn_call(waiter, "fetch", json_pack("{s:I, s:i}", "job", job,
							     "timeout_ms", 60000));

	cr_expect_str_eq(error_code(reply), "internal", "%s", json_dumps(reply, 0));
	cr_expect(strstr(error_message(reply), why) && strstr(error_message(reply), more),
		  "the waiting fetch was told: %s", json_dumps(reply, 0));
	json_decref(reply);
	reply = wait_job(c, job, 60);
	cr_expect_str_eq(field(reply, "state"), "failed");
	cr_expect(strstr(field(reply, "error"), why) && strstr(field(reply, "error"), more),
		  "status says: %s", json_dumps(reply, 0));
	json_decref(reply);
}

/* The log has the worker's death ("crashed" or "hung") on the job's
 * quarantined plan, "how" after the plan's hash, then its quarantine. */
static void expect_death_logged(const fixture *f, conn *c, json_int_t job,
				const char *died, const char *how)
{
	json_t *reply = status(c, job);
	char hash[13], line[256];

	quarantined_hash(c, hash);
	snprintf(line, sizeof(line), "warning: job %lld: %s: worker %s on plan %s: %s",
		 (long long)job, field(reply, "key"), died, hash, how);
	cr_expect(fixture_log_contains(f, line), "the log lacks \"%s\"", line);
	snprintf(line, sizeof(line), "warning: job %lld: %s: plan %s quarantined (%s)",
		 (long long)job, field(reply, "key"), hash, died);
	cr_expect(fixture_log_contains(f, line), "the log lacks \"%s\"", line);
	json_decref(reply);
}

static void stop(fixture *f)
{
	cr_expect_eq(fixture_stop(f, SIGTERM, NULL), 0);
	fixture_cleanup(f);
}

/* The job's one trial crashes its worker: the job fails saying so, and
 * the fetch that waited on it gets that reason, not an empty message. */
Test(failures, a_failed_job_and_its_waiting_fetch_say_why, .timeout = 120)
{
	fixture f;
	conn c, waiter;
	json_int_t job;

	fixture_init(&f);
	start_scripted(&f, "flat", "0", "crash");
	connect_to(&f, &c);
	connect_to(&f, &waiter);
	job = submit(&c, 0, 0);
	expect_failure_told(&c, &waiter, job, "crash: ", "signal 11");
	expect_death_logged(&f, &c, job, "crashed", "killed by signal 11 (Segmentation "
			    "fault)");
	conn_close(&waiter);
	conn_close(&c);
	stop(&f);
}

/* The job's one trial hangs its worker: killed at the time limit, which
 * the log names with the plan. */
Test(failures, a_hung_worker_is_logged_with_its_time_limit, .timeout = 180)
{
	fixture f;
	conn c;
	json_t *reply;
	json_int_t job;

	fixture_init(&f);
	start_scripted(&f, "flat", "0", "hang");
	connect_to(&f, &c);
	job = submit(&c, 0, 0);
	reply = wait_job(&c, job, 150);
	cr_expect_str_eq(field(reply, "state"), "failed");
	cr_expect(strstr(field(reply, "error"), "timeout"), "status says: %s",
		  json_dumps(reply, 0));
	json_decref(reply);
	expect_death_logged(&f, &c, job, "hung", "no answer within its time limit of ");
	conn_close(&c);
	stop(&f);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The version fetch serves for the job's key now (0: none). */
static json_int_t served_version(conn *c, json_int_t job)
{
	json_t *reply = conn_call(c, "fetch", json_pack("{s:I}", "job", job));
	json_int_t version = json_integer_value(json_object_get(result_of(reply),
								"version"));

	json_decref(reply);
	return version;
}

/* A running job with slow trials, cancelled by tunectl: the reply says
 * cancelled, and for the next seconds no version is published and the
 * job stays cancelled, though the runner finishes its trials in flight. */
Test(failures, a_cancelled_job_publishes_nothing_after_the_reply, .timeout = 180)
{
	fixture f;
	conn c;
	json_t *reply, *event;
	json_int_t job, version;
	char id[32], expected[64], *output = NULL;
	const char *const cancel[] = {"cancel", id, NULL};
	double until;

	fixture_init(&f);
	start_scripted(&f, "hash", "400", NULL);
	connect_to(&f, &c);
	job = submit(&c, 120, 500);
	/* running, with a first version (the default plan's) */
	while ((event = conn_read(&c, 60000)) && strcmp(event_name(event), "version"))
		json_decref(event);
	cr_assert_not_null(event, "no version came");
	json_decref(event);

	snprintf(id, sizeof(id), "%lld", (long long)job);
	cr_assert_eq(fixture_tunectl(&f, &output, cancel), 0, "%s", output);
	snprintf(expected, sizeof(expected), "job %lld cancelled\n", (long long)job);
	cr_expect_str_eq(output, expected);
	free(output);
	version = served_version(&c, job);

	for (until = now_s() + 4; now_s() < until &&
	     (event = conn_read(&c, (int)((until - now_s()) * 1000) + 1));) {
		cr_expect_str_neq(event_name(event), "version",
				  "a version came after the cancel: %s", json_dumps(event, 0));
		json_decref(event);
	}
	reply = status(&c, job);
	cr_expect_str_eq(field(reply, "state"), "cancelled", "%s", json_dumps(reply, 0));
	json_decref(reply);
	cr_expect_eq(served_version(&c, job), version, "the cache got a version");
	conn_close(&c);
	stop(&f);
}

/* Mounts a small tmpfs where the fixture keeps its cache; false when it
 * cannot be (not root). */
static bool mount_small_disk(const fixture *f, char *dir, size_t size)
{
	snprintf(dir, size, "%s/state", f->dir);
	cr_assert(mkdir(dir, 0750) == 0 || errno == EEXIST);
	return mount("tuned-test", dir, "tmpfs", 0, "size=2m") == 0;
}

/* Fills the file system of "dir" with DIR/filler until it is full. */
static void fill(const char *dir)
{
	static const char block[65536];
	char path[200];
	int fd;

	snprintf(path, sizeof(path), "%s/filler", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	while (write(fd, block, sizeof(block)) > 0)
		;
	cr_assert_eq(errno, ENOSPC, "filling %s: %s", path, strerror(errno));
	close(fd);
}

/* The disk fills between the submit and the job's trial: the job fails
 * saying that the cache cannot store, and why, not that no candidate was
 * verified; so does the fetch that waited on it. */
Test(failures, a_full_disk_is_named_as_the_cause, .timeout = 120)
{
	fixture f;
	conn c, waiter;
	json_int_t job;
	char dir[160], filler[200];

	fixture_init(&f);
	if (!mount_small_disk(&f, dir, sizeof(dir))) {
		fixture_cleanup(&f);
		cr_skip_test("cannot mount a tmpfs (not root?): %s", strerror(errno));
	}
	start_scripted(&f, "flat", "900", NULL);
	connect_to(&f, &c);
	connect_to(&f, &waiter);
	job = submit(&c, 0, 0);
	fill(dir);
	expect_failure_told(&c, &waiter, job, "the cache cannot store ",
			    ": database or disk is full");
	conn_close(&waiter);
	conn_close(&c);
	snprintf(filler, sizeof(filler), "%s/filler", dir);
	unlink(filler);
	fixture_stop(&f, SIGTERM, NULL);
	umount(dir);
	fixture_cleanup(&f);
}

/* A version's kernel source edited in place through sqlite3 while tuned
 * serves it (same length: integrity_check passes it): the fetch does not
 * serve it and says why, the log names the key and version, and the
 * version is marked bad. With the real cpu worker, for real sources. */
Test(failures, a_source_edited_behind_the_cache_is_not_served, .timeout = 300)
{
	fixture f;
	conn c;
	json_t *reply;
	json_int_t job;
	char key[65], line[200], *sources;

	fixture_init(&f);
	fixture_start(&f, NULL);
	connect_to(&f, &c);
	job = submit(&c, 0, 0);
	reply = wait_job(&c, job, 240);
	cr_assert_str_eq(field(reply, "state"), "done", "%s", json_dumps(reply, 0));
	snprintf(key, sizeof(key), "%s", field(reply, "key"));
	json_decref(reply);
	reply = conn_call(&c, "fetch", json_pack("{s:s}", "key", key));
	cr_assert_eq(json_integer_value(json_object_get(result_of(reply), "version")), 1);
	sources = json_dumps(json_object_get(result_of(reply), "sources"), 0);
	cr_assert(sources && strstr(sources, "void"), "no kernel source: %s", sources);
	free(sources);
	json_decref(reply);

	/* "void" becomes "vOid" in the first kernel's source */
	fixture_sql(f.cache, "UPDATE plans SET sources = substr(sources, 1, instr(sources, "
		     "'void')) || 'O' || substr(sources, instr(sources, 'void') + 2) "
		     "WHERE version = 1");
	cr_assert_eq(fixture_sql_count(f.cache, "SELECT count(*) FROM pragma_integrity_check "
			       "WHERE integrity_check = 'ok'"), 1);
	reply = conn_call(&c, "fetch", json_pack("{s:s}", "key", key));
	cr_expect_str_eq(error_code(reply), "not_found", "the edited version was served: "
			 "%s", json_dumps(reply, 0));
	cr_expect(strstr(error_message(reply), "version 1 failed its checksum"),
		  "the fetch was told: %s", error_message(reply));
	json_decref(reply);
	snprintf(line, sizeof(line), "error: cache: graph '%s' version 1 on ", key);
	cr_expect(fixture_log_contains(&f, line), "the log lacks \"%s\"", line);
	cr_expect(fixture_log_contains(&f, "fails its checksum"));
	/* marked by the writer thread, which the fetch woke */
	for (int i = 0; i < 100 && !fixture_sql_count(f.cache, "SELECT count(*) FROM plans "
						      "WHERE bad IS NOT NULL"); i++)
		usleep(50 * 1000);
	cr_expect_eq(fixture_sql_count(f.cache, "SELECT count(*) FROM plans WHERE version = 1 "
			       "AND bad LIKE 'fails its checksum%'"), 1);
	conn_close(&c);
	stop(&f);
}
