/*
 * service.h: what tunectl's commands that talk to a daemon share: their
 * options, how they report, and the commands each file runs. service.c
 * holds their table; the commands of one idea are one file each.
 */
#ifndef TUNECTL_SERVICE_H
#define TUNECTL_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "tunectl.h"
#include "tuned_client.h"

/* What the command line gave one of these commands, read and checked. */
typedef struct service_options {
	const char *command; /* "submit", ..., "cache ls" */
	const char *arg;     /* FILE, JOB, KEY; the first KEY of [KEY...] */
	char *const *keys;   /* [KEY...]: every one, "nkeys" of them */
	int nkeys;
	const char *socket;
	bool as_json;
	bool wait;
	bool until_done;
	bool all;            /* cache export: every key */
	const char *cache_path; /* cache export, import: this file, offline */
	double budget_s;
	int priority;
	int64_t trials;
	const char *grad;    /* submit: tensor names ("x,w") for a backward job */
	const char *out_dir; /* fetch: the folder; cache export: the file */
	int64_t min_version;
	const char *run; /* fetch, advance: a training run's id */
	int timeout_ms;
	int64_t max_age_s, max_bytes;
} service_options;

/* service_options.c: "o" from the command line of "cmd", its values and
 * argument checked; 0, or the exit status of a usage error (said). */
int service_read_options(const tunectl_command *cmd, const tunectl_args *args,
			 service_options *o);
/* "text" as a job id: a positive integer; 0 when it is not one. */
int64_t service_job_id(const char *text);

/* service.c: reporting. The error "err" of "o"'s command on stderr, and
 * as JSON with --json (one line after the events of a watch, an indented
 * object otherwise); returns EXIT_INVALID. */
int service_fail(const service_options *o, const tuned_client_error *err);
__attribute__((format(printf, 2, 3)))
int service_fail_with(const service_options *o, const char *fmt, ...);
/* "obj" (taken) as one compact line on stdout, at once: NDJSON. */
void service_print_json_line(json_t *obj);
/* The member "key" of "obj": a string ("" when none), a number (NAN when
 * none), an integer (0 when none). */
const char *service_str(json_t *obj, const char *key);
double service_num(json_t *obj, const char *key);
long long service_int(json_t *obj, const char *key);
/* Appends to the text "out" of "size" bytes, cutting what does not fit. */
__attribute__((format(printf, 3, 4)))
void service_append(char *out, size_t size, const char *fmt, ...);
/* "s" unless n is 1. */
const char *service_plural(long long n);

/* events.c: jobs and events as text. One line for the event "ev" (an
 * event this tunectl does not know as its name and data); the line of a
 * generation event's data; "running, 120 trials, best 0.0123 ms, ..."
 * for a job. */
void service_event_text(const tuned_client_event *ev, char *out, size_t size);
void service_generation_text(json_t *data, char *out, size_t size);
void service_describe_job(json_t *job, char *out, size_t size);
long long service_job_number(json_t *job);

/* follow.c: submit (with --wait, its progress), wait and watch. */
int service_submit(tuned_client *client, const service_options *o);
int service_wait(tuned_client *client, const service_options *o);
int service_watch(tuned_client *client, const service_options *o);

/* results.c: fetch (for a run too), advance and cache quarantine, with
 * --out their files; a JSON
 * value written as a file, indented. */
int service_fetch(tuned_client *client, const service_options *o);
int service_advance(tuned_client *client, const service_options *o);
int service_cache_quarantine(tuned_client *client, const service_options *o);
int service_write_json(const char *path, json_t *value);

/* export.c: cache export and import through the daemon, or offline on
 * the --cache file. */
int service_cache_export(tuned_client *client, const service_options *o);
int service_cache_import(tuned_client *client, const service_options *o);
int service_offline_export(const service_options *o);
int service_offline_import(const service_options *o);

#endif
