/*
 * service_options.c: the options and argument of a command that talks to
 * a daemon, read from what options.c gave it and checked: values in their
 * ranges, a JOB a job id, a KEY a key, what a command needs besides.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service.h"

/* "text" as a job id: a positive integer; 0 when it is not one. */
int64_t service_job_id(const char *text)
{
	char *end;
	long long n;

	errno = 0;
	n = strtoll(text, &end, 10);
	return *end || end == text || n <= 0 || errno ? 0 : n;
}

/* Whether "text" is a cache key: 64 hex digits, in either case. */
static bool is_key(const char *text)
{
	size_t n = 0;

	while (isxdigit((unsigned char)text[n]))
		n++;
	return n == PROTO_KEY_HEX && !text[n];
}

/* The argument of "cmd": a JOB a job id, a KEY|JOB a key or a job id;
 * --until-done needs a JOB. 0, or the exit status of a usage error. */
static int check_argument(const tunectl_command *cmd, const service_options *o)
{
	for (int i = 0; i < o->nkeys; i++) {
		if (!is_key(o->keys[i]))
			return tunectl_usage_error(cmd, "not a key (64 hex digits): "
						   "'%s'", o->keys[i]);
		for (char *c = o->keys[i]; *c; c++)
			*c = (char)tolower((unsigned char)*c);
	}
	if (!cmd->arg || o->nkeys)
		return 0;
	if (!strcmp(cmd->arg, "JOB") && !service_job_id(o->arg))
		return tunectl_usage_error(cmd, "not a job id: '%s'", o->arg);
	if (!strcmp(cmd->arg, "KEY|JOB") && !is_key(o->arg) && !service_job_id(o->arg))
		return tunectl_usage_error(cmd, "neither a key (64 hex digits) "
					   "nor a job id: '%s'", o->arg);
	if (o->until_done && !service_job_id(o->arg))
		return tunectl_usage_error(cmd, "--until-done follows a job: give "
					   "its id, not the key '%s'", o->arg);
	return 0;
}

/* Option values. */

static const double age_factors[] = {1, 60, 3600, 86400};
static const double byte_factors[] = {1024.0, 1048576.0, 1073741824.0,
				      1099511627776.0};

/* The options that take an integer, and their ranges. */
static const struct int_option {
	const char *name;
	double lo, hi;
} int_options[] = {
	{"priority", PROTO_PRIORITY_MIN, PROTO_PRIORITY_MAX},
	{"timeout", 0, PROTO_TIMEOUT_MAX_MS},
	{"min-version", 0, 9e18},
	{"trials", 1, PROTO_TRIALS_MAX},
};

#define NINT_OPTIONS (sizeof(int_options) / sizeof(int_options[0]))

static const struct int_option *find_int_option(const char *name)
{
	for (size_t i = 0; i < NINT_OPTIONS; i++)
		if (!strcmp(int_options[i].name, name))
			return &int_options[i];
	return NULL;
}

static int int_value(service_options *o, const char *name, const char *v)
{
	const struct int_option *opt = find_int_option(name);
	double x;

	if (!opt || tunectl_parse_int(v, opt->lo, opt->hi, &x) < 0)
		return -1;
	if (!strcmp(name, "priority"))
		o->priority = (int)x;
	else if (!strcmp(name, "timeout"))
		o->timeout_ms = (int)x;
	else if (!strcmp(name, "trials"))
		o->trials = (int64_t)x;
	else
		o->min_version = (int64_t)x;
	return 0;
}

/* Sets the option "name" of "o" from its value "v"; -1 when "v" is bad. */
static int option_value(service_options *o, const char *name, const char *v)
{
	double x;

	if (!strcmp(name, "budget"))
		return tunectl_parse_number(v, "smhd", age_factors, &o->budget_s) < 0 ||
		       !(o->budget_s >= 0) ? -1 : 0;
	if (!strcmp(name, "max-age"))
		return tunectl_parse_number(v, "smhd", age_factors, &x) < 0 ||
		       !(x >= 1) ? -1 : (o->max_age_s = (int64_t)x, 0);
	if (!strcmp(name, "max-bytes"))
		return tunectl_parse_number(v, "KMGT", byte_factors, &x) < 0 ||
		       !(x >= 1) || x > 9e18 ? -1 : (o->max_bytes = (int64_t)x, 0);
	if (!strcmp(name, "out"))
		return (o->out_dir = v), 0;
	if (!strcmp(name, "cache"))
		return (o->cache_path = v), 0;
	if (!strcmp(name, "grad"))
		return (o->grad = v), 0;
	if (!strcmp(name, "run"))
		return *v && strlen(v) <= PROTO_RUN_MAX ? (o->run = v, 0) : -1;
	return int_value(o, name, v);
}

/* What a good value of the option "name" looks like. */
static void expected(const char *name, char *out, size_t size)
{
	const struct int_option *opt = find_int_option(name);

	if (opt)
		snprintf(out, size, "an integer from %.0f to %.0f", opt->lo, opt->hi);
	else if (!strcmp(name, "max-bytes"))
		snprintf(out, size, "at least 1 byte, or a number with K, M, G or T");
	else if (!strcmp(name, "max-age"))
		snprintf(out, size, "at least 1 s, or a number with s, m, h or d");
	else if (!strcmp(name, "run"))
		snprintf(out, size, "1 to %d bytes", PROTO_RUN_MAX);
	else
		snprintf(out, size, "seconds, or a number with s, m, h or d");
}

/* What a command needs besides its argument: prune a limit, export its
 * keys or --all. 0, or the exit status of a usage error. */
static int check_needs(const tunectl_command *cmd, const service_options *o)
{
	if (!strcmp(cmd->name, "cache prune") && o->max_age_s < 0 && o->max_bytes < 0)
		return tunectl_usage_error(cmd, "give what to keep: --max-age S "
					   "(remove what is older), --max-bytes N "
					   "(shrink to N bytes), or both");
	if (!strcmp(cmd->name, "fetch") && o->run && o->min_version > 0)
		return tunectl_usage_error(cmd, "--min-version cannot go with "
						"--run: a run gets the version it is "
						"pinned to (tunectl advance moves it)");
	if (!strcmp(cmd->name, "cache export") && !o->nkeys == !o->all)
		return tunectl_usage_error(cmd, "give the keys to export or --all, "
					   "not both");
	return 0;
}

/* "o" from the command line of "cmd"; 0, or the exit status of a usage
 * error. */
int service_read_options(const tunectl_command *cmd, const tunectl_args *args,
			 service_options *o)
{
	char what[64];

	*o = (service_options){.command = cmd->name, .arg = args->arg,
			       .keys = args->words, .nkeys = args->nwords,
			       .max_age_s = -1, .max_bytes = -1};
	for (int i = 0; i < TUNECTL_MAX_OPTIONS && cmd->options[i].name; i++) {
		const char *name = cmd->options[i].name, *v = args->values[i];

		if (!v)
			continue;
		if (!strcmp(name, "json"))
			o->as_json = true;
		else if (!strcmp(name, "wait"))
			o->wait = true;
		else if (!strcmp(name, "until-done"))
			o->until_done = true;
		else if (!strcmp(name, "all"))
			o->all = true;
		else if (!strcmp(name, "socket"))
			o->socket = v;
		else if (option_value(o, name, v) < 0) {
			expected(name, what, sizeof(what));
			return tunectl_usage_error(cmd, "bad value for '--%s': '%s' "
						   "(%s)", name, v, what);
		}
	}
	return check_needs(cmd, o) ?: check_argument(cmd, o);
}
