/*
 * results.c: fetch and cache quarantine: a result or the quarantined
 * plans shown, or with --out written as files.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "service.h"

/* Files. */

static int write_bytes(const char *path, const void *bytes, size_t len)
{
	FILE *f = fopen(path, "wb");
	int rc;

	if (!f)
		return -1;
	rc = fwrite(bytes, 1, len, f) == len ? 0 : -1;
	if (fclose(f) != 0)
		rc = -1;
	return rc;
}

int service_write_json(const char *path, json_t *value)
{
	char *text = json_dumps(value, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
				       JSON_ENCODE_ANY);
	size_t len = text ? strlen(text) : 0;
	int rc;

	if (!text)
		return -1;
	text[len] = '\n'; /* over the NUL: the dump ends with a newline */
	rc = write_bytes(path, text, len + 1);
	free(text);
	return rc;
}

/* fetch --out: the files of a result. */

typedef struct out_files {
	const char *dir;
	bool cuda;       /* from the device: "cuda: ..." */
	json_t *written; /* array of paths */
	char path[4096]; /* the file being written */
	char why[160];   /* why it failed */
} out_files;

__attribute__((format(printf, 2, 3)))
static int refuse_file(out_files *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(f->why, sizeof(f->why), fmt, ap);
	va_end(ap);
	return -1;
}

/* Writes DIR/"name": "value" as JSON, or else "len" bytes at "bytes". */
static int put_file(out_files *f, const char *name, json_t *value,
		    const void *bytes, size_t len)
{
	snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
	if ((value ? service_write_json(f->path, value) :
		     write_bytes(f->path, bytes, len)) < 0)
		return refuse_file(f, "%s", strerror(errno));
	json_array_append_new(f->written, json_string(f->path));
	return 0;
}

/* kernel_<n>.cu or .c: by the source's language, else the device; a
 * library step's cuBLASLt call is JSON, kernel_<n>.library.json. */
static void source_name(const out_files *f, json_t *item, size_t i,
			char *name, size_t size)
{
	const char *language = service_str(item, "language");
	bool cuda = *language ? !strcmp(language, "cuda") : f->cuda;
	bool call = cuda && json_is_true(json_object_get(item, "library"));

	snprintf(name, size, "kernel_%zu.%s", i, call ? "library.json" : cuda ? "cu" : "c");
}

/* "sources": one per kernel, {kernel, language, source} or a string. */
static int write_sources(out_files *f, json_t *result)
{
	json_t *item;
	char name[64];
	size_t i;

	json_array_foreach(json_object_get(result, "sources"), i, item) {
		const char *text = json_is_string(item) ? json_string_value(item) :
				   json_string_value(json_object_get(item, "source"));

		source_name(f, item, i, name, sizeof(name));
		snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
		if (!text)
			return refuse_file(f, "source %zu has no text", i);
		if (put_file(f, name, NULL, text, strlen(text)) < 0)
			return -1;
	}
	return 0;
}

/* A launch description from the plan, for a result without "launch":
 * per kernel, its source file, ops, schedule and signature (the grid
 * needs the graph's shapes, which the result does not hold). */
static json_t *launch_from_plan(const out_files *f, json_t *result)
{
	json_t *kernels = json_object_get(json_object_get(result, "plan"), "kernels");
	json_t *launch = json_array(), *k;
	char source[64];
	size_t i;

	json_array_foreach(kernels, i, k) {
		source_name(f, json_array_get(json_object_get(result, "sources"), i),
			    i, source, sizeof(source));
		json_array_append_new(launch, json_pack(
			"{s:s, s:s, s:O*, s:O*, s:s}", "kernel", service_str(k, "name"),
			"source", source, "ops", json_object_get(k, "ops"),
			"schedule", json_object_get(k, "schedule"), "signature",
			f->cuda ? "extern \"C\" __global__: one pointer per tensor, in "
				  "the order of the key's canonical form (t0, t1, ...)" :
				  "void NAME(void **tensors): one pointer per tensor, in "
				  "the order of the key's canonical form (t0, t1, ...)"));
	}
	return launch;
}

static int write_launch(out_files *f, json_t *result)
{
	json_t *launch = json_object_get(result, "launch");
	int rc;

	if (launch && !json_is_null(launch))
		return put_file(f, "launch.json", launch, NULL, 0);
	launch = launch_from_plan(f, result);
	rc = put_file(f, "launch.json", launch, NULL, 0);
	json_decref(launch);
	return rc;
}

static int write_result(const service_options *o, json_t *result,
			json_t *written)
{
	out_files f = {.dir = o->out_dir, .written = written,
		       .cuda = !strncmp(service_str(result, "device"), "cuda", 4)};
	json_t *plan = json_object_get(result, "plan");

	if (mkdir(o->out_dir, 0777) < 0 && errno != EEXIST)
		return service_fail_with(o, "%s: cannot make the folder (%s)", o->out_dir,
					 strerror(errno));
	if (!json_is_object(plan))
		return service_fail_with(o, "the result for %s has no plan", o->arg);
	if (put_file(&f, "plan.json", plan, NULL, 0) < 0 ||
	    write_sources(&f, result) < 0 || write_launch(&f, result) < 0)
		return service_fail_with(o, "%s: %s", f.path, f.why);
	return 0;
}

static void print_fetched(json_t *result, json_t *written)
{
	json_t *path;
	size_t i;

	if (json_object_get(result, "run"))
		printf("run       %s\n", service_str(result, "run"));
	printf("key       %s\n", service_str(result, "key"));
	printf("version   %lld\n",
	       (long long)json_integer_value(json_object_get(result, "version")));
	if (isnan(service_num(result, "spread_ms")))
		printf("median_ms %.4f\n", service_num(result, "median_ms"));
	else
		printf("median_ms %.4f (spread %.4f)\n", service_num(result, "median_ms"),
		       service_num(result, "spread_ms"));
	printf("device    %s\n", service_str(result, "device"));
	json_array_foreach(written, i, path)
		printf("wrote     %s\n", json_string_value(path));
}

int service_fetch(tuned_client *client, const service_options *o)
{
	json_t *result, *written = json_array();
	tuned_client_error err;
	int status = EXIT_SUCCESS;

	if ((o->run ? tuned_client_fetch_run(client, o->arg, o->run, o->timeout_ms,
					     &result, &err) :
		      tuned_client_fetch(client, o->arg, o->min_version, o->timeout_ms,
					 &result, &err)) < 0) {
		json_decref(written);
		return service_fail(o, &err);
	}
	if (o->out_dir && write_result(o, result, written) != 0)
		status = EXIT_INVALID;
	else if (o->as_json) {
		if (o->out_dir) {
			json_object_del(result, "sources");
			json_object_set(result, "files", written);
		}
		tunectl_print_json(json_incref(result));
	} else
		print_fetched(result, written);
	json_decref(written);
	json_decref(result);
	return status;
}

/* advance: the run's pins moved to the latest versions, one line each. */
int service_advance(tuned_client *client, const service_options *o)
{
	json_t *result, *pin;
	tuned_client_error err;
	size_t i;

	if (tuned_client_advance(client, o->run, (const char *const *)o->keys, o->nkeys,
				 &result, &err) < 0)
		return service_fail(o, &err);
	if (o->as_json) {
		tunectl_print_json(result);
		return EXIT_SUCCESS;
	}
	json_array_foreach(json_object_get(result, "pins"), i, pin) {
		long long was = service_int(pin, "previous"),
			  now = service_int(pin, "version");

		if (!was)
			printf("run %s: %s version %lld (pinned now)\n", o->run,
			       service_str(pin, "key"), now);
		else if (was == now)
			printf("run %s: %s version %lld (the latest already)\n", o->run,
			       service_str(pin, "key"), now);
		else
			printf("run %s: %s version %lld -> %lld\n", o->run,
			       service_str(pin, "key"), was, now);
	}
	json_decref(result);
	return EXIT_SUCCESS;
}

/* cache quarantine: the plans that crashed or hung a worker, listed, or
 * with --out exported one folder per entry. */

/* "12 kernels: k0_y, k1_z, ..." for the list. */
static void plan_summary(json_t *plan, char *out, size_t size)
{
	json_t *kernels = json_object_get(plan, "kernels"), *k;
	size_t i, n = 0;

	n += (size_t)snprintf(out, size, "%zu kernel%s:", json_array_size(kernels),
			      json_array_size(kernels) == 1 ? "" : "s");
	json_array_foreach(kernels, i, k) {
		if (n + 8 >= size || i == 4) {
			snprintf(out + n, size - n, " ...");
			return;
		}
		n += (size_t)snprintf(out + n, size - n, "%s %s", i ? "," : "",
				      service_str(k, "name"));
	}
}

/* "crash (signal 11)", "timeout (12.0 s)", or the reason alone for an
 * entry from before causes were kept. */
static void cause_text(json_t *e, char *out, size_t size)
{
	if (!strcmp(service_str(e, "cause"), "crash") &&
	    json_integer_value(json_object_get(e, "signal")))
		snprintf(out, size, "crash (signal %lld)",
			 (long long)json_integer_value(json_object_get(e, "signal")));
	else if (!strcmp(service_str(e, "cause"), "timeout"))
		snprintf(out, size, "timeout (%.1f s)", service_num(e, "time_limit_s"));
	else
		snprintf(out, size, "%s", *service_str(e, "cause") ?
			 service_str(e, "cause") : service_str(e, "reason"));
}

static void print_quarantined(json_t *e)
{
	char plan[120], cause[64];

	plan_summary(json_object_get(e, "plan"), plan, sizeof(plan));
	cause_text(e, cause, sizeof(cause));
	printf("%-64s  %-20s  %-20s  %-20s  %s\n", service_str(e, "key"),
	       service_str(e, "name"), cause, service_str(e, "created_at"), plan);
}

/* info.json: everything of the entry that has no file of its own. */
static json_t *quarantine_info(json_t *e)
{
	json_t *info = json_deep_copy(e);

	json_object_del(info, "graph");
	json_object_del(info, "plan");
	json_object_del(info, "sources");
	json_object_del(info, "worker_log");
	return info;
}

/* DIR/<id>-<key>: graph.json, plan.json, kernel_<n>.c or .cu,
 * worker.log and info.json; what the entry lacks is not written. */
static int export_entry(out_files *f, json_t *e, char *folder, size_t size)
{
	const char *graph = service_str(e, "graph"), *log = service_str(e, "worker_log");
	json_t *info = quarantine_info(e);
	int rc;

	snprintf(folder, size, "%s/%lld-%.64s", f->dir,
		 (long long)json_integer_value(json_object_get(e, "id")),
		 service_str(e, "key"));
	f->dir = folder;
	f->cuda = !strncmp(service_str(e, "device"), "cuda", 4);
	if (mkdir(folder, 0777) < 0 && errno != EEXIST)
		rc = refuse_file(f, "cannot make the folder (%s)", strerror(errno));
	else
		rc = put_file(f, "plan.json", json_object_get(e, "plan"), NULL, 0);
	if (rc == 0 && *graph)
		rc = put_file(f, "graph.json", NULL, graph, strlen(graph));
	if (rc == 0)
		rc = write_sources(f, e);
	if (rc == 0 && *log)
		rc = put_file(f, "worker.log", NULL, log, strlen(log));
	if (rc == 0)
		rc = put_file(f, "info.json", info, NULL, 0);
	json_decref(info);
	return rc;
}

static int export_quarantine(const service_options *o, json_t *entries, json_t *written)
{
	json_t *e;
	size_t i;

	if (mkdir(o->out_dir, 0777) < 0 && errno != EEXIST)
		return service_fail_with(o, "%s: cannot make the folder (%s)", o->out_dir,
					 strerror(errno));
	json_array_foreach(entries, i, e) {
		out_files f = {.dir = o->out_dir, .written = written};
		char folder[4096];

		if (export_entry(&f, e, folder, sizeof(folder)) < 0)
			return service_fail_with(o, "%s: %s", f.path, f.why);
	}
	return 0;
}

int service_cache_quarantine(tuned_client *client, const service_options *o)
{
	json_t *result, *entries, *written = json_array(), *e, *path;
	tuned_client_error err;
	int status = EXIT_SUCCESS;
	size_t i;

	if (tuned_client_cache_quarantine(client, NULL, &result, &err) < 0) {
		json_decref(written);
		return service_fail(o, &err);
	}
	entries = json_object_get(result, "entries");
	if (o->out_dir && export_quarantine(o, entries, written) != 0) {
		status = EXIT_INVALID;
	} else if (o->as_json) {
		if (o->out_dir)
			json_object_set(result, "files", written);
		tunectl_print_json(json_incref(result));
	} else {
		printf("%-64s  %-20s  %-20s  %-20s  %s\n", "key", "name", "cause", "when",
		       "plan");
		json_array_foreach(entries, i, e)
			print_quarantined(e);
		json_array_foreach(written, i, path)
			printf("wrote %s\n", json_string_value(path));
	}
	json_decref(written);
	json_decref(result);
	return status;
}
