/*
 * tunectl.h: the commands of tunectl, one file each.
 */
#ifndef TUNECTL_H
#define TUNECTL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#define EXIT_INVALID 1
#define EXIT_USAGE 2

/* Prints "obj" (taken) indented, on stdout. */
void tunectl_print_json(json_t *obj);

/* explain_fusion.c: adds to "obj" (tunectl explain's JSON) what the fusion
 * planner makes of "graph": "dependences" (each with its width), "merges"
 * (each merge the planner tried, tuner_fusion_edges), "groups" and "plan";
 * with "dot_path", writes them as a Graphviz file there. -1 with the
 * reason in "why" on failure. */
struct sched_graph;
int tunectl_explain_fusion(const struct sched_graph *graph, json_t *obj,
			   const char *dot_path, char *why, size_t size);
/* Prints those keys of "obj" as text. */
void tunectl_print_fusion(json_t *obj);

/* The command line (options.c). Each module describes its commands in a
 * table, one tunectl_command each: its name, argument, help and options;
 * options.c reads argv with getopt_long (options before or after the
 * command), checks it against the command's entry, prints the usages from
 * the same entries, and calls the command's run. */

#define TUNECTL_MAX_OPTIONS 12

/* An option of one command: --name VALUE, or --name alone (a flag). */
typedef struct tunectl_option {
	const char *name;  /* without the dashes: "budget"; NULL ends a list */
	const char *value; /* what its value is ("S", "cpu|cuda"); NULL: a flag */
	const char *help;  /* what it does for this command; lines end in \n */
	bool required;     /* the command needs it */
} tunectl_option;

/* Entries of a command's options: a flag, an option with a value, and
 * one the command cannot do without. */
#define TUNECTL_FLAG(name, help) {name, NULL, help, false}
#define TUNECTL_VALUE(name, value, help) {name, value, help, false}
#define TUNECTL_REQUIRED(name, value, help) {name, value, help, true}

struct tunectl_command;

/* What the command line gave a command. */
typedef struct tunectl_args {
	const struct tunectl_command *command;
	const char *arg; /* its FILE, JOB or KEY; NULL when it takes none */
	/* for an argument named with "..." ("[KEY...]"): every word given,
	 * none or more (arg is the first) */
	char *const *words;
	int nwords;
	/* the value of each of its options, by index: NULL when not given,
	 * "" for a flag given */
	const char *values[TUNECTL_MAX_OPTIONS];
} tunectl_args;

typedef struct tunectl_command {
	const char *name; /* "submit", or "cache ls" for a subcommand */
	const char *arg;  /* the name of its one argument ("FILE"), or NULL;
			   * with "..." ("[KEY...]") it takes any number */
	const char *help; /* what it does; lines end in \n */
	tunectl_option options[TUNECTL_MAX_OPTIONS]; /* up to a NULL name */
	/* Runs it; returns the exit status. */
	int (*run)(const struct tunectl_command *command, const tunectl_args *args);
} tunectl_command;

/* Commands listed under a title in the usage. */
typedef struct tunectl_group {
	const char *title; /* NULL ends a list of groups */
	/* the i-th command of the group, NULL past the last */
	const tunectl_command *(*command)(size_t i);
} tunectl_group;

/* Runs the command "argv" names among "groups"; returns the exit status:
 * 0 for --help, help and --version (stdout); 2 for a usage error, said on
 * stderr. */
int tunectl_main(int argc, char **argv, const tunectl_group *groups);

/* The value of the option "name" in "args": NULL when it was not given,
 * "" for a flag given. */
const char *tunectl_option_value(const tunectl_args *args, const char *name);
bool tunectl_flag(const tunectl_args *args, const char *name);

/* Says on stderr what is wrong with the command line of "command" (as
 * printf), and its synopsis; returns EXIT_USAGE. */
__attribute__((format(printf, 2, 3)))
int tunectl_usage_error(const tunectl_command *command, const char *fmt, ...);

/* Option values: "text" as a number, with an optional unit letter among
 * "units" multiplying it by its factor (units and factors may be NULL);
 * as an integer within [lo, hi]. 0, or -1 when it is not one. */
int tunectl_parse_number(const char *text, const char *units,
			 const double *factors, double *out);
int tunectl_parse_int(const char *text, double lo, double hi, double *out);

/* run.c: tunectl run FILE [options]: compile, verify and time a plan in a
 * worker process. */
int tunectl_run(const tunectl_command *command, const tunectl_args *args);

/* sources.c: tunectl sources FILE --out DIR [options]: a plan's code, and
 * for cuda its PTX and cubin, written without a GPU. */
int tunectl_sources(const tunectl_command *command, const tunectl_args *args);

/* grad.c: tunectl grad FILE --wrt X[,Y...] [--out OUT]: the backward
 * graph as graph.json. */
int tunectl_grad(const tunectl_command *command, const tunectl_args *args);

/* service.c: the commands that talk to a daemon (submit, status, list,
 * wait, cancel, watch, fetch, stats, cache
 * ls|show|prune|export|import|quarantine): the i-th, NULL past the last. */
const tunectl_command *tunectl_service_command(size_t i);

#endif
