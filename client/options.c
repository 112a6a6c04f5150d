/*
 * options.c: tunectl's command line, read with getopt_long against the
 * commands' tables (tunectl_command, in tunectl.h).
 *
 *   tunectl [options] COMMAND [ARGUMENT] [options]
 *   tunectl help [COMMAND]     = tunectl COMMAND --help
 *   tunectl --help | --version
 *
 * Every option of every command is one long option for getopt_long, so
 * options may come before or after the command; once the command is known,
 * an option that is not its own is a usage error. The usages are printed
 * from the same tables, so that they list exactly the options that exist.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tunectl.h"

#ifndef TUNED_VERSION
#error "TUNED_VERSION: meson's project version, defined by client/meson.build"
#endif

#define MAX_LONG_OPTIONS 64
#define FIRST_LONG 256 /* getopt_long's value of long option 0 */
#define HELP 'h' /* -h; --help and --version follow the commands' long
		 * options, so that no short option reads as one of them */
#define WORD 1 /* getopt_long's value of a word, for optstring "-" */
#define HELP_COLUMN 24 /* where an option's help starts */
#define WIDTH 78

/* argv as getopt_long read it. */
typedef struct command_line {
	const tunectl_group *groups;
	struct option longs[MAX_LONG_OPTIONS + 3]; /* and help, version, end */
	int nlongs;
	const char *values[MAX_LONG_OPTIONS]; /* by long option; "" a flag */
	int order[MAX_LONG_OPTIONS];          /* the long options given, in turn */
	int ngiven;
	bool help, version;
	char **words; /* what is not an option: the command and its argument */
	int nwords;
} command_line;

/* Walking the commands. */

static const tunectl_command *command_at(const tunectl_group *g, size_t i)
{
	return g->command(i);
}

/* The command named "name" ("cache ls"), or NULL. */
static const tunectl_command *find_command(const tunectl_group *groups,
					   const char *name)
{
	const tunectl_command *c;

	for (const tunectl_group *g = groups; g->title; g++)
		for (size_t i = 0; (c = command_at(g, i)); i++)
			if (!strcmp(c->name, name))
				return c;
	return NULL;
}

/* Whether "word" is the first word of commands of two words ("cache"). */
static bool is_family(const tunectl_group *groups, const char *word)
{
	size_t len = strlen(word);
	const tunectl_command *c;

	for (const tunectl_group *g = groups; g->title; g++)
		for (size_t i = 0; (c = command_at(g, i)); i++)
			if (!strncmp(c->name, word, len) && c->name[len] == ' ')
				return true;
	return false;
}

/* The index of the option "name" in "command"'s list, or -1. */
static int option_index(const tunectl_command *command, const char *name)
{
	for (int i = 0; i < TUNECTL_MAX_OPTIONS && command->options[i].name; i++)
		if (!strcmp(command->options[i].name, name))
			return i;
	return -1;
}

const char *tunectl_option_value(const tunectl_args *args, const char *name)
{
	int i = option_index(args->command, name);

	return i < 0 ? NULL : args->values[i];
}

bool tunectl_flag(const tunectl_args *args, const char *name)
{
	return tunectl_option_value(args, name) != NULL;
}

/* Usages. */

/* "text"'s lines, each after "indent" spaces (the first after "first"). */
static void print_indented(FILE *out, const char *text, int first, int indent)
{
	int pad = first;

	while (*text) {
		size_t len = strcspn(text, "\n");

		fprintf(out, "%*s%.*s\n", pad, "", (int)len, text);
		text += len + (text[len] == '\n');
		pad = indent;
	}
}

/* " word" on the synopsis line; on a new line under "indent" when it
 * would pass WIDTH. */
static void put_word(FILE *out, const char *word, int indent, int *column)
{
	int len = (int)strlen(word);

	if (*column > indent && *column + 1 + len > WIDTH) {
		fprintf(out, "\n%*s%s", indent, "", word);
		*column = indent + len;
		return;
	}
	*column += fprintf(out, " %s", word);
}

/* "LEAD submit FILE [--wait] [--budget S] ...": the command and its
 * argument and options, after "lead". */
static void print_synopsis(FILE *out, const char *lead,
			   const tunectl_command *c)
{
	int column = fprintf(out, "%s%s", lead, c->name);
	int indent = column + 1;
	char word[128];

	if (c->arg)
		put_word(out, c->arg, indent, &column);
	for (int i = 0; i < TUNECTL_MAX_OPTIONS && c->options[i].name; i++) {
		const tunectl_option *o = &c->options[i];

		snprintf(word, sizeof(word), "%s--%s%s%s%s", o->required ? "" : "[",
			 o->name, o->value ? " " : "", o->value ? o->value : "",
			 o->required ? "" : "]");
		put_word(out, word, indent, &column);
	}
	fputc('\n', out);
}

static void print_option(FILE *out, const char *name, const char *value,
			 const char *help)
{
	char head[64];
	int len = snprintf(head, sizeof(head), "  %s%s%s", name, value ? " " : "",
			   value ? value : "");

	fputs(head, out);
	if (len + 1 > HELP_COLUMN) {
		fputc('\n', out);
		len = 0;
	}
	print_indented(out, help, HELP_COLUMN - len, HELP_COLUMN);
}

/* tunectl COMMAND --help: its synopsis, what it does, its options. */
static void print_command_usage(FILE *out, const tunectl_command *c)
{
	char name[64];

	print_synopsis(out, "usage: tunectl ", c);
	fputc('\n', out);
	print_indented(out, c->help, 0, 0);
	fputs("\noptions (before or after the command):\n", out);
	for (int i = 0; i < TUNECTL_MAX_OPTIONS && c->options[i].name; i++) {
		snprintf(name, sizeof(name), "--%s", c->options[i].name);
		print_option(out, name, c->options[i].value, c->options[i].help);
	}
	print_option(out, "-h, --help", NULL, "show this help\n");
}

/* tunectl cache --help: the usage of each cache command. */
static void print_family_usage(FILE *out, const tunectl_group *groups,
			       const char *word)
{
	size_t len = strlen(word);
	const tunectl_command *c;
	bool first = true;

	for (const tunectl_group *g = groups; g->title; g++)
		for (size_t i = 0; (c = command_at(g, i)); i++) {
			if (strncmp(c->name, word, len) || c->name[len] != ' ')
				continue;
			if (!first)
				fputc('\n', out);
			print_command_usage(out, c);
			first = false;
		}
}

static const char exit_status[] =
	"exit status: 0 success (a valid graph, a verified run, a daemon command\n"
	"that succeeded), 1 invalid graph, failed run, failed command or no\n"
	"daemon, 2 usage error (said on stderr)\n";

/* tunectl --help: every command, its synopsis and what it does. */
static void print_usage(FILE *out, const tunectl_group *groups)
{
	const tunectl_command *c;

	fputs("usage: tunectl COMMAND [ARGUMENT] [options]\n"
	      "       tunectl help [COMMAND]  what COMMAND does, and each of its\n"
	      "                               options (tunectl COMMAND --help)\n"
	      "       tunectl --version\n"
	      "options may come before or after the command:\n"
	      "       tunectl --socket S status 3\n", out);
	for (const tunectl_group *g = groups; g->title; g++) {
		fprintf(out, "\n%s:\n", g->title);
		for (size_t i = 0; (c = command_at(g, i)); i++) {
			print_synopsis(out, "  ", c);
			print_indented(out, c->help, 4, 4);
		}
	}
	fprintf(out, "\n%s", exit_status);
}

static void print_version(void)
{
	printf("tunectl (tuned) %s\n", TUNED_VERSION);
}

int tunectl_usage_error(const tunectl_command *command, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tunectl %s: ", command->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	print_synopsis(stderr, "usage: tunectl ", command);
	return EXIT_USAGE;
}

/* A usage error before a command is known. */
__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("tunectl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(tunectl help lists the commands and their options)\n", stderr);
	return EXIT_USAGE;
}

/* Option values. */

int tunectl_parse_number(const char *text, const char *units,
			 const double *factors, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(text, &end);
	if (end == text || errno || !isfinite(v))
		return -1;
	if (*end && units && strchr(units, *end) && !end[1])
		v *= factors[strchr(units, *end) - units];
	else if (*end)
		return -1;
	*out = v;
	return 0;
}

int tunectl_parse_int(const char *text, double lo, double hi, double *out)
{
	if (tunectl_parse_number(text, NULL, NULL, out) < 0 ||
	    *out != floor(*out) || *out < lo || *out > hi)
		return -1;
	return 0;
}

/* Reading argv. */

/* The long option "name", or -1. */
static int long_index(const command_line *cl, const char *name)
{
	for (int i = 0; i < cl->nlongs; i++)
		if (!strcmp(cl->longs[i].name, name))
			return i;
	return -1;
}

/* Adds the options of "c" to getopt_long's list; an option is a flag for
 * every command or takes a value for every command, since getopt_long
 * reads it before the command is known. -1 after saying so. */
static int add_options(command_line *cl, const tunectl_command *c)
{
	for (int i = 0; i < TUNECTL_MAX_OPTIONS && c->options[i].name; i++) {
		const tunectl_option *o = &c->options[i];
		int has_arg = o->value ? required_argument : no_argument;
		int k = long_index(cl, o->name);

		if (k >= 0 && cl->longs[k].has_arg != has_arg)
			return fprintf(stderr, "tunectl: internal error: --%s takes a "
				       "value for one command and not for another\n",
				       o->name), -1;
		if (k >= 0)
			continue;
		if (cl->nlongs == MAX_LONG_OPTIONS)
			return fprintf(stderr, "tunectl: internal error: more than %d "
				       "options\n", MAX_LONG_OPTIONS), -1;
		cl->longs[cl->nlongs] = (struct option){o->name, has_arg, NULL,
							FIRST_LONG + cl->nlongs};
		cl->nlongs++;
	}
	return 0;
}

static int collect_options(command_line *cl)
{
	const tunectl_command *c;

	for (const tunectl_group *g = cl->groups; g->title; g++)
		for (size_t i = 0; (c = command_at(g, i)); i++)
			if (add_options(cl, c) < 0)
				return -1;
	cl->longs[cl->nlongs] = (struct option){"help", no_argument, NULL,
						 FIRST_LONG + cl->nlongs};
	cl->longs[cl->nlongs + 1] = (struct option){"version", no_argument, NULL,
						    FIRST_LONG + cl->nlongs + 1};
	return 0;
}

/* When "text" (--ma) begins the names of several long options, says
 * which; returns whether it did. */
static bool ambiguous(const command_line *cl, const char *text)
{
	size_t len = strncmp(text, "--", 2) ? 0 : strcspn(text + 2, "=");
	char names[512] = "";
	int n = 0;

	for (int i = 0; len && i < cl->nlongs + 2; i++) {
		size_t used = strlen(names);

		if (strncmp(cl->longs[i].name, text + 2, len))
			continue;
		snprintf(names + used, sizeof(names) - used, "%s--%s",
			 n++ ? ", " : "", cl->longs[i].name);
	}
	if (n > 1)
		usage_error("ambiguous option '%.*s': %s?", (int)len + 2, text, names);
	return n > 1;
}

/* What getopt_long refused: "text" is the argument it stopped at. */
static int bad_option(const command_line *cl, int code, const char *text)
{
	int k = optopt - FIRST_LONG;
	const char *name = k >= 0 && k < cl->nlongs + 2 ? cl->longs[k].name : NULL;

	if (code == ':')
		return usage_error("a value is missing after '--%s'", name ? name : text);
	if (name)
		return usage_error("'--%s' takes no value: '%s'", name, text);
	if (optopt)
		return usage_error("unknown option '-%c'", optopt);
	return ambiguous(cl, text) ? EXIT_USAGE :
	       usage_error("unknown option '%s'", text);
}

/* Reads argv's options into "cl", its other words into cl->words, in
 * turn: optstring "-" returns each word as WORD, so that options may
 * follow the command even where POSIXLY_CORRECT would stop getopt_long
 * at it; the words after "--" are words too. 0, or the exit status of a
 * usage error. */
static int read_options(command_line *cl, int argc, char **argv)
{
	int code, k;

	opterr = 0;
	while ((code = getopt_long(argc, argv, "-:h", cl->longs, NULL)) != -1) {
		k = code - FIRST_LONG;
		if (code == WORD)
			cl->words[cl->nwords++] = optarg;
		else if (code == HELP || k == cl->nlongs)
			cl->help = true;
		else if (k == cl->nlongs + 1)
			cl->version = true;
		else if (k >= 0 && k < cl->nlongs) {
			if (!cl->values[k])
				cl->order[cl->ngiven++] = k;
			cl->values[k] = optarg ? optarg : "";
		} else
			return bad_option(cl, code, argv[optind - 1]);
	}
	while (optind < argc)
		cl->words[cl->nwords++] = argv[optind++];
	return 0;
}

/* Running a command. */

/* "c"'s arguments from "cl": its options, each its own, and its one
 * argument when it takes one (or every word, for an argument named with
 * "..."). 0, or the exit status of a usage error. */
static int bind_args(const command_line *cl, const tunectl_command *c,
		     int used, tunectl_args *args)
{
	*args = (tunectl_args){.command = c};
	for (int n = 0; n < cl->ngiven; n++) {
		const char *name = cl->longs[cl->order[n]].name;
		int i = option_index(c, name);

		if (i < 0)
			return tunectl_usage_error(c, "unknown option '--%s'", name);
		args->values[i] = cl->values[cl->order[n]];
	}
	for (int i = 0; i < TUNECTL_MAX_OPTIONS && c->options[i].name; i++)
		if (c->options[i].required && !args->values[i])
			return tunectl_usage_error(c, "needs --%s %s", c->options[i].name,
						   c->options[i].value);
	if (c->arg && strstr(c->arg, "...")) {
		args->words = cl->words + used;
		args->nwords = cl->nwords - used;
		args->arg = args->nwords ? args->words[0] : NULL;
		return 0;
	}
	if (c->arg && used < cl->nwords)
		args->arg = cl->words[used++];
	else if (c->arg)
		return tunectl_usage_error(c, "needs %s", c->arg);
	if (used < cl->nwords)
		return tunectl_usage_error(c, "unexpected argument '%s'",
					   cl->words[used]);
	return 0;
}

/* "tunectl cache" alone: says which subcommands there are. */
static int family_error(const tunectl_group *groups, const char *word)
{
	size_t len = strlen(word), used;
	const tunectl_command *c;
	char names[256] = "";

	for (const tunectl_group *g = groups; g->title; g++)
		for (size_t i = 0; (c = command_at(g, i)); i++) {
			if (strncmp(c->name, word, len) || c->name[len] != ' ')
				continue;
			used = strlen(names);
			snprintf(names + used, sizeof(names) - used, "%s%s",
				 used ? ", " : "", c->name + len + 1);
		}
	return usage_error("'%s' needs a subcommand: %s", word, names);
}

/* The command that "words" name: one word, or two ("cache ls"); *used is
 * how many. NULL after a usage error, whose exit status is *status. */
static const tunectl_command *name_command(const command_line *cl, char **words,
					   int nwords, int *used, int *status)
{
	const tunectl_command *c;
	char name[128];

	*used = 1;
	if (is_family(cl->groups, words[0])) {
		if (nwords < 2) {
			*status = family_error(cl->groups, words[0]);
			return NULL;
		}
		snprintf(name, sizeof(name), "%s %s", words[0], words[1]);
		*used = 2;
	} else {
		snprintf(name, sizeof(name), "%s", words[0]);
	}
	if (!(c = find_command(cl->groups, name)))
		*status = usage_error("unknown command '%s'", name);
	return c;
}

/* tunectl help [COMMAND]: the usage of COMMAND, or of all. */
static int help(const command_line *cl)
{
	const tunectl_command *c;
	int used, status;

	if (cl->ngiven || cl->version)
		return usage_error("help takes a command, not options");
	if (cl->nwords == 1)
		return print_usage(stdout, cl->groups), EXIT_SUCCESS;
	if (cl->nwords == 2 && is_family(cl->groups, cl->words[1]))
		return print_family_usage(stdout, cl->groups, cl->words[1]),
		       EXIT_SUCCESS;
	if (!(c = name_command(cl, cl->words + 1, cl->nwords - 1, &used, &status)))
		return status;
	if (used + 1 < cl->nwords)
		return usage_error("help: unexpected argument '%s'",
				   cl->words[used + 1]);
	print_command_usage(stdout, c);
	return EXIT_SUCCESS;
}

/* What the words and options ask for, once read. */
static int dispatch(const command_line *cl)
{
	const tunectl_command *c;
	tunectl_args args;
	int used, status;

	if (cl->nwords == 0 && cl->help)
		return print_usage(stdout, cl->groups), EXIT_SUCCESS;
	if (cl->nwords == 0 && cl->version)
		return cl->ngiven ? usage_error("--version takes no other option") :
		       (print_version(), EXIT_SUCCESS);
	if (cl->nwords == 0)
		return usage_error("no command given");
	if (!strcmp(cl->words[0], "help"))
		return help(cl);
	if (cl->help && cl->nwords == 1 && is_family(cl->groups, cl->words[0]))
		return print_family_usage(stdout, cl->groups, cl->words[0]),
		       EXIT_SUCCESS;
	if (!(c = name_command(cl, cl->words, cl->nwords, &used, &status)))
		return status;
	if (cl->help)
		return print_command_usage(stdout, c), EXIT_SUCCESS;
	if (cl->version)
		return tunectl_usage_error(c, "unknown option '--version' (an "
					   "option of tunectl alone)");
	if ((status = bind_args(cl, c, used, &args)))
		return status;
	return c->run(c, &args);
}

int tunectl_main(int argc, char **argv, const tunectl_group *groups)
{
	command_line cl = {.groups = groups};
	int status;

	if (collect_options(&cl) < 0)
		return EXIT_INVALID;
	if (!(cl.words = calloc(argc, sizeof(*cl.words)))) {
		fprintf(stderr, "tunectl: out of memory\n");
		return EXIT_INVALID;
	}
	status = read_options(&cl, argc, argv);
	if (!status)
		status = dispatch(&cl);
	free(cl.words);
	return status;
}
