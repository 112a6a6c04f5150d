/*
 * service.c: the tunectl commands that talk to a daemon, through the
 * client library (tuned_client.h): their table, how they report, and the
 * commands that ask and print (service.h names the files of the others).
 *
 *   tunectl submit FILE [--wait] [--budget S] [--trials N] [--priority N]
 *                       [--grad X[,Y...]]
 *   tunectl status JOB | list | wait JOB | cancel JOB     (follow.c: submit,
 *   tunectl watch KEY|JOB [--until-done]                   wait, watch)
 *   tunectl fetch KEY|JOB [--out DIR] [--min-version N] [--timeout MS]
 *                         [--run ID]
 *   tunectl advance [KEY...] --run ID                      (results.c)
 *   tunectl stats | cache ls | cache show KEY | cache prune [--max-age S]
 *                                                          [--max-bytes N]
 *   tunectl cache export [KEY...] [--all] --out FILE [--cache DB]
 *   tunectl cache import FILE [--cache DB]                 (export.c)
 *   tunectl cache quarantine [--out DIR]        (results.c, with fetch)
 *
 * Each takes --json (one JSON object on stdout; for watch, one JSON line
 * per event) and --socket PATH (service_options.c reads them). cache
 * export and import with --cache work on that cache file instead of a
 * daemon's (one no daemon holds). Exit 0 on success, 1 on failure (no
 * daemon included), 2 for a usage error.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "service.h"

/* A command of the table below: what the command line sees of it, and
 * what it does once connected. */
typedef struct service_command {
	tunectl_command command; /* first: tunectl_service_command() gives it */
	int (*talk)(tuned_client *client, const service_options *o);
} service_command;

/* "obj" (taken) as one compact line on stdout, at once: NDJSON. */
void service_print_json_line(json_t *obj)
{
	char *text = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);

	if (text)
		puts(text);
	fflush(stdout);
	free(text);
	json_decref(obj);
}

/* The error "err" of "o"'s command: on stderr, and as JSON with --json
 * (one line after the events of a watch, an indented object otherwise). */
int service_fail(const service_options *o, const tuned_client_error *err)
{
	json_t *obj;

	fprintf(stderr, "tunectl %s: %s\n", o->command, err->message);
	if (!o->as_json)
		return EXIT_INVALID;
	obj = json_pack("{s:{s:s, s:s}}", "error", "code",
			tuned_client_code_name(err->code), "message",
			err->message);
	if (!strcmp(o->command, "watch"))
		service_print_json_line(obj);
	else
		tunectl_print_json(obj);
	return EXIT_INVALID;
}

int service_fail_with(const service_options *o, const char *fmt, ...)
{
	tuned_client_error err = {.code = TUNED_CLIENT_EIO};
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	return service_fail(o, &err);
}

const char *service_str(json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));

	return s ? s : "";
}

double service_num(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

long long service_int(json_t *obj, const char *key)
{
	return (long long)json_integer_value(json_object_get(obj, key));
}

/* Appends to the text "out" of "size" bytes, cutting what does not fit. */
void service_append(char *out, size_t size, const char *fmt, ...)
{
	size_t len = strlen(out);
	va_list ap;

	va_start(ap, fmt);
	if (len + 1 < size)
		vsnprintf(out + len, size - len, fmt, ap);
	va_end(ap);
}

const char *service_plural(long long n)
{
	return n == 1 ? "" : "s";
}

/* A scalar as text, for the flat printer. */
static void print_scalar(json_t *v)
{
	if (json_is_string(v))
		fputs(json_string_value(v), stdout);
	else if (json_is_integer(v))
		printf("%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		printf("%g", json_real_value(v));
	else if (json_is_boolean(v))
		fputs(json_is_true(v) ? "true" : "false", stdout);
	else
		fputs("null", stdout);
}

/* "obj" as lines "a.b.c value", for results whose shape is the daemon's. */
static void print_flat(const char *prefix, json_t *v)
{
	char name[256];
	const char *key;
	json_t *item;
	size_t i;

	if (json_is_object(v)) {
		json_object_foreach(v, key, item) {
			snprintf(name, sizeof(name), "%s%s%s", prefix,
				 *prefix ? "." : "", key);
			print_flat(name, item);
		}
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, item) {
			snprintf(name, sizeof(name), "%s[%zu]", prefix, i);
			print_flat(name, item);
		}
	} else {
		printf("%-32s ", prefix);
		print_scalar(v);
		putchar('\n');
	}
}

/* Results shown as they come: JSON, or flat lines. */
static int show(const service_options *o, int rc, json_t *result,
		const tuned_client_error *err)
{
	if (rc < 0)
		return service_fail(o, err);
	if (o->as_json)
		tunectl_print_json(result);
	else {
		print_flat("", result);
		json_decref(result);
	}
	return EXIT_SUCCESS;
}

static int cmd_stats(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result = NULL;
	int rc = tuned_client_stats(client, &result, &err);

	return show(o, rc, result, &err);
}

static void print_entry(json_t *e)
{
	printf("%-64s  %7lld  %12.4f  %10lld  %-20s  %s\n", service_str(e, "key"),
	       (long long)json_integer_value(json_object_get(e, "version")),
	       service_num(e, "median_ms"),
	       (long long)json_integer_value(json_object_get(e, "bytes")),
	       service_str(e, "updated_at"), service_str(e, "name"));
}

static int cmd_cache_ls(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result, *entry;
	size_t i;

	if (tuned_client_cache_list(client, &result, &err) < 0)
		return service_fail(o, &err);
	if (o->as_json)
		return tunectl_print_json(result), EXIT_SUCCESS;
	printf("%-64s  %7s  %12s  %10s  %-20s  %s\n", "key", "version",
	       "median ms", "bytes", "updated", "name");
	json_array_foreach(json_object_get(result, "entries"), i, entry)
		print_entry(entry);
	json_decref(result);
	return EXIT_SUCCESS;
}

static int cmd_cache_show(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result = NULL;
	int rc = tuned_client_cache_show(client, o->arg, &result, &err);

	return show(o, rc, result, &err);
}

static int cmd_cache_prune(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result = NULL;
	int rc = tuned_client_cache_prune(client, o->max_age_s, o->max_bytes,
					  &result, &err);

	return show(o, rc, result, &err);
}

static void print_job(json_t *job)
{
	char text[200];

	service_describe_job(job, text, sizeof(text));
	printf("job %lld: %s\n", service_job_number(job), text);
	printf("  key       %s\n", service_str(job, "key"));
	if (*service_str(job, "name"))
		printf("  name      %s\n", service_str(job, "name"));
	if (*service_str(job, "created_at"))
		printf("  created   %s\n", service_str(job, "created_at"));
	if (service_num(job, "budget_s") > 0)
		printf("  budget    %g s\n", service_num(job, "budget_s"));
	printf("  priority  %lld\n",
	       (long long)json_integer_value(json_object_get(job, "priority")));
	if (*service_str(job, "error"))
		printf("  error     %s\n", service_str(job, "error"));
}

static int cmd_status(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *job;
	int64_t id = service_job_id(o->arg);

	if (tuned_client_status(client, id, &job, &err) < 0)
		return service_fail(o, &err);
	if (o->as_json)
		tunectl_print_json(job);
	else {
		print_job(job);
		json_decref(job);
	}
	return EXIT_SUCCESS;
}

static int cmd_cancel(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	int64_t id = service_job_id(o->arg);
	json_t *job;

	if (tuned_client_cancel(client, id, &job, &err) < 0)
		return service_fail(o, &err);
	if (o->as_json)
		return tunectl_print_json(job), EXIT_SUCCESS;
	if (!strcmp(service_str(job, "state"), "cancelled"))
		printf("job %lld cancelled\n", (long long)id);
	else
		printf("job %lld had ended: %s\n", (long long)id,
		       service_str(job, "state"));
	json_decref(job);
	return EXIT_SUCCESS;
}

static int cmd_list(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result, *job;
	size_t i;

	if (tuned_client_list(client, &result, &err) < 0)
		return service_fail(o, &err);
	if (o->as_json)
		return tunectl_print_json(result), EXIT_SUCCESS;
	printf("%6s  %-9s  %8s  %7s  %12s  %7s  %s\n", "job", "state", "priority",
	       "trials", "best ms", "version", "name");
	json_array_foreach(json_object_get(result, "jobs"), i, job) {
		json_t *p = json_object_get(job, "progress");

		printf("%6lld  %-9s  %8lld  %7lld  %12.4f  %7lld  %s\n",
		       (long long)json_integer_value(json_object_get(job, "id")),
		       service_str(job, "state"),
		       (long long)json_integer_value(json_object_get(job, "priority")),
		       (long long)json_integer_value(json_object_get(p, "trials")),
		       service_num(p, "best_ms"),
		       (long long)json_integer_value(json_object_get(p, "version")),
		       service_str(job, "name"));
	}
	json_decref(result);
	return EXIT_SUCCESS;
}

/* Connects to the daemon and runs the command "command" of the table. */
static int run_service(const tunectl_command *command, const tunectl_args *args)
{
	const service_command *cmd = (const service_command *)command;
	tuned_client_options copts = {0};
	tuned_client_error err;
	tuned_client *client;
	service_options o;
	int status;

	if ((status = service_read_options(command, args, &o)))
		return status;
	if (tuned_client_connect(o.socket, &copts, &client, &err) < 0)
		return service_fail(&o, &err);
	status = cmd->talk(client, &o);
	tuned_client_close(client);
	return status;
}

/* cache export and import: on the --cache file when one is given, else
 * through the daemon. */
static int run_transfer(const tunectl_command *command, const tunectl_args *args)
{
	service_options o;
	int status;

	if ((status = service_read_options(command, args, &o)))
		return status;
	if (!o.cache_path)
		return run_service(command, args);
	return !strcmp(command->name, "cache export") ? service_offline_export(&o) :
	       service_offline_import(&o);
}

/* The commands: one entry each, with its options and their help, read
 * by options.c for the command line and the usages. */

#define JSON_OPTION \
	TUNECTL_FLAG("json", "print one JSON object on stdout instead of text\n")
#define SOCKET_OPTION \
	TUNECTL_VALUE("socket", "PATH", \
		      "the daemon's socket (default $TUNED_SOCKET,\n" \
		      "else /run/tuned-gpu/gpu0.sock for root;\n" \
		      "$XDG_RUNTIME_DIR/tuned/gpu0.sock otherwise,\n" \
		      "or the service's when it is installed and that\n" \
		      "one is not there in a folder of the user's own)\n")

/* The commands as a table, laid out by hand. */
/* clang-format off */
static const service_command commands[] = {
	{{"submit", "FILE",
	  "queue FILE (graph.json) for tuning; print the job id and its key;\n"
	  "with --wait, follow it and exit 1 unless it ends done\n",
	  {TUNECTL_FLAG("wait",
			"follow the job until it ends: its progress, then\n"
			"its end (docs/operations.md)\n"),
	   TUNECTL_VALUE("budget", "S",
			 "tuning time: seconds, or with m, h, d (without\n"
			 "it the default plan is measured once)\n"),
	   TUNECTL_VALUE("trials", "N",
			 "measure at most N candidates (1 to 1000000)\n"),
	   TUNECTL_VALUE("priority", "N",
			 "-1000 to 1000, higher first (default 0)\n"),
	   TUNECTL_VALUE("grad", "X[,Y...]",
			 "also tune its backward graph with respect to these\n"
			 "tensors, as a second job (tunectl grad --wrt;\n"
			 "docs/autodiff.md); --wait follows both\n"),
	   TUNECTL_FLAG("json",
			"print the job as one JSON object on stdout (with\n"
			"--wait, at its end; the progress goes to stderr)\n"),
	   SOCKET_OPTION},
	  run_service}, service_submit},
	{{"status", "JOB", "the job's state, progress, best time and version\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_status},
	{{"list", NULL, "every job the daemon knows\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_list},
	{{"wait", "JOB",
	  "follow the job as submit --wait does; exit 1 unless it ends done\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, service_wait},
	{{"cancel", "JOB", "cancel the job\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_cancel},
	{{"watch", "KEY|JOB",
	  "print the events of the key (of the job's key) as they come:\n"
	  "generations, versions, job states; until interrupted, or with\n"
	  "--until-done until the job ends\n",
	  {TUNECTL_FLAG("until-done",
			"JOB only: exit when the job ends (1 if it failed)\n"),
	   TUNECTL_FLAG("json", "one JSON line per event (NDJSON)\n"),
	   SOCKET_OPTION},
	  run_service}, service_watch},
	{{"fetch", "KEY|JOB",
	  "the best result so far: key, version, median_ms and device\n",
	  {TUNECTL_VALUE("out", "DIR",
			 "write plan.json (for run --plan), kernel_<n>.c\n"
			 "or .cu, and launch.json into DIR\n"),
	   TUNECTL_VALUE("min-version", "N", "only a version at least N\n"),
	   TUNECTL_VALUE("timeout", "MS",
			 "wait up to MS milliseconds for one (default:\n"
			 "answer at once)\n"),
	   TUNECTL_VALUE("run", "ID",
			 "the version training run ID is pinned to: the\n"
			 "latest at the run's first fetch of the key, the\n"
			 "same for all its ranks until tunectl advance\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_service}, service_fetch},
	{{"advance", "[KEY...]",
	  "move training run --run ID to the latest version of the keys it\n"
	  "fetched (or of the keys given): its ranks get those from then on\n",
	  {TUNECTL_REQUIRED("run", "ID", "the run\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_service}, service_advance},
	{{"stats", NULL, "the daemon's counters\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_stats},
	{{"cache ls", NULL,
	  "every cached key (per device and codegen): its latest version,\n"
	  "time and the bytes it holds\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_cache_ls},
	{{"cache show", "KEY", "one key's graph, versions and trials\n",
	  {JSON_OPTION, SOCKET_OPTION}, run_service}, cmd_cache_show},
	{{"cache prune", NULL,
	  "remove old entries: those older than --max-age, then the oldest\n"
	  "until the cache fits --max-bytes (give one or both)\n",
	  {TUNECTL_VALUE("max-age", "S",
			 "remove what is older: seconds, or with m, h, d\n"),
	   TUNECTL_VALUE("max-bytes", "N",
			 "shrink to N bytes (or with K, M, G, T)\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_service}, cmd_cache_prune},
	{{"cache export", "[KEY...]",
	  "write the keys' graphs and every version of their plans (every\n"
	  "device's) to --out FILE, a file another host imports\n",
	  {TUNECTL_REQUIRED("out", "FILE", "the file to write\n"),
	   TUNECTL_FLAG("all", "every key, instead of the keys given\n"),
	   TUNECTL_VALUE("cache", "DB",
			 "read the cache file DB itself, which no daemon\n"
			 "may hold (offline)\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_transfer}, service_cache_export},
	{{"cache import", "FILE",
	  "load an export: each key computed again from its graph and each\n"
	  "plan checked against it; a refused key is named with why (exit\n"
	  "1); other devices' versions are stored, never served here\n",
	  {TUNECTL_VALUE("cache", "DB",
			 "write the cache file DB itself, which no daemon\n"
			 "may hold (offline)\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_transfer}, service_cache_import},
	{{"cache quarantine", NULL,
	  "the plans that crashed or hung a worker, never tried again: key,\n"
	  "name, cause, when and plan\n",
	  {TUNECTL_VALUE("out", "DIR",
			 "write each one's repro bundle into DIR/<id>-<key>:\n"
			 "graph.json, plan.json, kernel_<n>.c or .cu,\n"
			 "worker.log and info.json\n"),
	   JSON_OPTION, SOCKET_OPTION},
	  run_service}, service_cache_quarantine},
};
/* clang-format on */

const tunectl_command *tunectl_service_command(size_t i)
{
	return i < sizeof(commands) / sizeof(commands[0]) ? &commands[i].command :
	       NULL;
}
