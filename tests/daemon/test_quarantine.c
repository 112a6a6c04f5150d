/*
 * test_quarantine.c: plans that crashed a worker, through the real tuned
 * with the scripted worker: quarantined with their repro bundle, never
 * tried again even once their trials are pruned, listed by the
 * cache.quarantine request and exported by tunectl cache quarantine.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "scheduler.h"

extern char **environ;

#define EXAMPLE "softmax_scores_small"

/* Starts tuned with the scripted worker at "worker" (NULL: the built
 * one), whose first "crash_op" (NULL: none) dies of SIGSEGV. */
static void start_scripted_at(fixture *f, const char *worker, const char *crash_op)
{
	const char *const extra[] = {"--compile-workers", "1", NULL};
	char marker[160];

	snprintf(marker, sizeof(marker), "%s/crashed", f->dir);
	setenv("TUNED_WORKER", worker ? worker : getenv("SCRIPTED_WORKER"), 1);
	setenv("SCRIPTED_TIMES", "flat", 1);
	if (crash_op) {
		setenv("SCRIPTED_CRASH", marker, 1);
		setenv("SCRIPTED_CRASH_OP", crash_op, 1);
	} else {
		unsetenv("SCRIPTED_CRASH");
	}
	fixture_start(f, extra);
}

static void start_scripted(fixture *f, bool crash_once)
{
	start_scripted_at(f, NULL, crash_once ? "measure" : NULL);
}

static size_t quarantine_size(conn *c)
{
	json_t *reply = conn_call(c, "cache.quarantine", NULL);
	size_t n = json_array_size(json_object_get(result_of(reply), "entries"));

	json_decref(reply);
	return n;
}

/* Submits the example (no budget: one trial; else "budget" seconds and
 * at most "trials") and follows its events to the end of the job: its
 * last state, and the most candidates it said were skipped as
 * quarantined. */
static const char *run_job(conn *c, double budget, int trials, json_int_t *job,
			   json_int_t *quarantined)
{
	static char state[32];
	char *text = example_text(EXAMPLE);
	json_t *params = json_pack("{s:s}", "graph", text), *reply, *event;

	if (budget > 0)
		json_object_update_new(params, json_pack("{s:f, s:i}", "budget", budget,
							 "trials", trials));
	reply = conn_call(c, "submit", params);
	*job = json_integer_value(json_object_get(result_of(reply), "id"));
	cr_assert_gt(*job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	free(text);
	*quarantined = 0;
	state[0] = 0;
	while (!state[0] && (event = conn_read(c, 60000))) {
		json_t *data = json_object_get(event, "data");
		const char *name = json_string_value(json_object_get(event, "event")) ?: "";
		const char *s = json_string_value(json_object_get(data, "state")) ?: "";

		if (json_integer_value(json_object_get(data, "quarantined")) > *quarantined)
			*quarantined = json_integer_value(json_object_get(data, "quarantined"));
		if (!strcmp(name, "job") && strcmp(s, "queued") && strcmp(s, "running"))
			snprintf(state, sizeof(state), "%s", s);
		json_decref(event);
	}
	cr_assert(state[0], "job %lld did not end", (long long)*job);
	return state;
}

/* The example's graph as the worker ran it: in its canonical form. */
static char *canonical_example(void)
{
	char *text = example_text(EXAMPLE), *canonical;
	sched_graph *graph = NULL;

	cr_assert_eq(sched_graph_read_string(text, &graph, NULL), 0);
	canonical = sched_graph_canonical_json(graph);
	cr_assert_not_null(canonical);
	sched_graph_free(graph);
	free(text);
	return canonical;
}

/* The one entry of the quarantine, checked to hold its whole bundle. */
static void expect_bundle(conn *c, json_int_t job, const char *key)
{
	json_t *reply = conn_call(c, "cache.quarantine", NULL);
	json_t *entries = json_object_get(result_of(reply), "entries");
	json_t *e = json_array_get(entries, 0), *source;
	char *graph = canonical_example();

	cr_assert_eq(json_array_size(entries), 1, "%s", json_dumps(reply, 0));
	cr_expect_str_eq(json_string_value(json_object_get(e, "key")), key);
	cr_expect_str_eq(json_string_value(json_object_get(e, "cause")), "crash");
	cr_expect_eq(json_integer_value(json_object_get(e, "signal")), SIGSEGV);
	cr_expect_eq(json_integer_value(json_object_get(e, "seed")), job);
	cr_expect(strstr(json_string_value(json_object_get(e, "reason")) ?: "", "signal 11"));
	cr_expect(strstr(json_string_value(json_object_get(e, "device")) ?: "", "scripted"));
	cr_expect(json_is_object(json_object_get(e, "plan")));
	cr_expect_str_eq(json_string_value(json_object_get(e, "graph")) ?: "", graph);
	cr_expect(strstr(json_string_value(json_object_get(e, "worker_log")) ?: "",
			 "scripted worker: crashing on purpose"),
		  "worker_log: %s", json_dumps(json_object_get(e, "worker_log"), 0));
	source = json_array_get(json_object_get(e, "sources"), 0);
	cr_expect(strstr(json_string_value(json_object_get(source, "source")) ?: "", "void"),
		  "sources: %s", json_dumps(json_object_get(e, "sources"), 0));
	reply = (json_decref(reply), conn_call(c, "cache.quarantine",
					       json_pack("{s:s}", "key", key)));
	cr_expect_eq(json_array_size(json_object_get(result_of(reply), "entries")), 1);
	json_decref(reply);
	free(graph);
}

/* The text of "path", or NULL. */
static char *file_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = NULL;
	size_t len = 0;

	if (f && getdelim(&text, &len, '\0', f) < 0) {
		free(text);
		text = NULL;
	}
	if (f)
		fclose(f);
	return text;
}

/* Runs tunectl cache quarantine on the fixture's daemon, with "out" as
 * --out when not NULL, its stdout into DIR/listed: its exit status. */
static int tunectl_quarantine(const fixture *f, const char *out)
{
	const char *argv[] = {getenv("TUNECTL"), "cache", "quarantine", "--socket",
			      f->socket, out ? "--out" : NULL, out, NULL};
	posix_spawn_file_actions_t actions;
	char listed[160];
	pid_t pid;
	int status = -1;

	snprintf(listed, sizeof(listed), "%s/listed", f->dir);
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_addopen(&actions, 1, listed, O_WRONLY | O_CREAT | O_TRUNC,
					 0644);
	cr_assert_eq(posix_spawn(&pid, argv[0], &actions, NULL, (char **)argv, environ), 0);
	posix_spawn_file_actions_destroy(&actions);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* tunectl lists the entry and exports its bundle: one folder, its files
 * as the daemon holds them. */
static void expect_export(const fixture *f, json_int_t job, const char *key)
{
	char out[160], path[400], *text, *graph = canonical_example();
	json_t *info, *plan;

	cr_assert_eq(tunectl_quarantine(f, NULL), 0);
	snprintf(path, sizeof(path), "%s/listed", f->dir);
	text = file_text(path);
	cr_expect(text && strstr(text, key) && strstr(text, "crash (signal 11)") &&
		  strstr(text, EXAMPLE), "tunectl listed: %s", text);
	free(text);

	snprintf(out, sizeof(out), "%s/bundles", f->dir);
	cr_assert_eq(tunectl_quarantine(f, out), 0);
	snprintf(path, sizeof(path), "%s/1-%s/graph.json", out, key);
	text = file_text(path);
	cr_expect(text && !strcmp(text, graph), "%s differs from the graph", path);
	free(text);
	snprintf(path, sizeof(path), "%s/1-%s/worker.log", out, key);
	text = file_text(path);
	cr_expect(text && strstr(text, "crashing on purpose"), "%s: %s", path, text);
	free(text);
	snprintf(path, sizeof(path), "%s/1-%s/kernel_0.c", out, key);
	text = file_text(path);
	cr_expect(text && strstr(text, "void"), "%s: %s", path, text);
	free(text);
	snprintf(path, sizeof(path), "%s/1-%s/plan.json", out, key);
	plan = json_load_file(path, 0, NULL);
	cr_expect(json_is_array(json_object_get(plan, "kernels")), "%s", path);
	json_decref(plan);
	snprintf(path, sizeof(path), "%s/1-%s/info.json", out, key);
	info = json_load_file(path, 0, NULL);
	cr_expect_eq(json_integer_value(json_object_get(info, "seed")), job);
	cr_expect_eq(json_integer_value(json_object_get(info, "signal")), SIGSEGV);
	cr_expect_str_eq(json_string_value(json_object_get(info, "cause")) ?: "", "crash");
	cr_expect(strstr(json_string_value(json_object_get(info, "device")) ?: "", "scripted"));
	json_decref(info);
	free(graph);
}

/* The key of the example's job. */
static void job_key(conn *c, json_int_t job, char key[65])
{
	json_t *reply = conn_call(c, "status", json_pack("{s:I}", "job", job));

	snprintf(key, 65, "%s", json_string_value(json_object_get(result_of(reply), "key")));
	json_decref(reply);
}

Test(quarantine, a_crashed_plan_is_never_tried_again_even_once_its_trials_are_pruned,
     .timeout = 180)
{
	fixture f;
	conn c;
	json_int_t job, quarantined;
	char key[65], pattern[128];

	fixture_init(&f);
	start_scripted(&f, true);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	/* the default plan, the one trial of a job without budget, crashes */
	cr_expect_str_eq(run_job(&c, 0, 0, &job, &quarantined), "failed");
	job_key(&c, job, key);
	expect_bundle(&c, job, key);
	expect_export(&f, job, key);
	snprintf(pattern, sizeof(pattern), "job %lld: %s: worker crashed on plan ",
		 (long long)job, key);
	cr_expect(fixture_log_contains(&f, pattern), "the log lacks \"%s\"", pattern);
	snprintf(pattern, sizeof(pattern), "killed by signal 11 (Segmentation fault)");
	cr_expect(fixture_log_contains(&f, pattern), "the log lacks \"%s\"", pattern);
	conn_close(&c);
	cr_assert_eq(fixture_stop(&f, SIGTERM, NULL), 0);

	/* its trials pruned, the plan is known from the quarantine alone */
	fixture_sql(f.cache, "DELETE FROM trials");
	start_scripted(&f, false);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	cr_expect_str_eq(run_job(&c, 0, 0, &job, &quarantined), "done");
	cr_expect_eq(quarantined, 1, "progress said %lld skipped", (long long)quarantined);
	cr_expect_eq(fixture_sql_count(f.cache, "SELECT count(*) FROM trials WHERE plan IN "
			       "(SELECT plan FROM quarantine)"), 0,
		     "the quarantined plan was measured again");
	cr_expect_eq(fixture_sql_count(f.cache, "SELECT count(*) FROM trials"), 1);
	cr_expect(fixture_log_contains(&f, "is quarantined: not tried again"));
	conn_close(&c);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* A version whose plan is quarantined is not re-timed against: the job's
 * first candidate replaces it. */
Test(quarantine, a_quarantined_version_is_replaced_not_retimed, .timeout = 180)
{
	fixture f;
	conn c;
	json_int_t job, quarantined;
	json_t *reply;

	fixture_init(&f);
	start_scripted(&f, false);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	cr_assert_str_eq(run_job(&c, 0, 0, &job, &quarantined), "done");
	conn_close(&c);
	cr_assert_eq(fixture_stop(&f, SIGTERM, NULL), 0);

	/* as if version 1 had crashed a worker later */
	fixture_sql(f.cache, "INSERT INTO quarantine (graph, device, codegen, plan, reason, "
		     "created_at) SELECT graph, device, codegen, plan, 'planted', 0 "
		     "FROM plans WHERE version = 1");
	start_scripted(&f, false);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	/* flat times: no challenger ever beats a version it is re-timed with */
	cr_expect_str_eq(run_job(&c, 60, 3, &job, &quarantined), "done");
	cr_expect_eq(quarantined, 1);
	reply = conn_call(&c, "status", json_pack("{s:I}", "job", job));
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(
			     result_of(reply), "progress"), "version")), 2,
		     "version 1 was kept: %s", json_dumps(reply, 0));
	json_decref(reply);
	conn_close(&c);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* A worker that dies re-timing several plans side by side is logged, but
 * no plan is quarantined: which one killed it cannot be told. */
Test(quarantine, a_crash_while_retiming_is_logged_and_quarantines_nothing, .timeout = 180)
{
	fixture f;
	conn c;
	json_int_t job, quarantined;

	fixture_init(&f);
	start_scripted_at(&f, NULL, "retime");
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	cr_assert_str_eq(run_job(&c, 0, 0, &job, &quarantined), "done");
	/* with a version, the next generation is re-timed against it */
	run_job(&c, 60, 3, &job, &quarantined);
	cr_expect(fixture_log_contains(&f, "the worker died re-timing plans side by side (worker "
			       "killed by signal 11"), "the crash is not in the log");
	cr_expect_eq(quarantine_size(&c), 0);
	conn_close(&c);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* A worker that cannot even be started ran no plan: its trial is an
 * error, and nothing is quarantined. */
Test(quarantine, a_worker_that_cannot_start_quarantines_nothing, .timeout = 180)
{
	fixture f;
	conn c;
	json_int_t job, quarantined;
	char worker[160], command[400];

	fixture_init(&f);
	snprintf(worker, sizeof(worker), "%s/worker", f.dir);
	snprintf(command, sizeof(command), "cp '%s' '%s'", getenv("SCRIPTED_WORKER"), worker);
	cr_assert_eq(system(command), 0);
	start_scripted_at(&f, worker, NULL);
	cr_assert(conn_open(&c, f.socket));
	conn_hello(&c);
	/* the measurement worker runs (it probed the device); the compile
	 * worker starts at the first compile, and cannot */
	cr_assert_eq(unlink(worker), 0);
	cr_expect_str_eq(run_job(&c, 0, 0, &job, &quarantined), "failed");
	cr_expect_eq(quarantine_size(&c), 0, "a plan that never ran was quarantined");
	cr_expect_eq(fixture_sql_count(f.cache, "SELECT count(*) FROM trials WHERE outcome = "
			       "'error'"), 1);
	conn_close(&c);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}
