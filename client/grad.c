/*
 * grad.c: tunectl grad FILE --wrt X[,Y...] [--out OUT]
 *
 * Writes the backward graph of the graph in FILE with respect to the
 * tensors of --wrt (sched_graph_grad, docs/autodiff.md) as graph.json: on
 * stdout, or into OUT with a line on stdout saying what it holds. A graph
 * that cannot be differentiated exits 1 with the reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"
#include "tunectl.h"

#define MAX_WRT 64

/* Splits the comma-separated "text" (modified) into "names"; how many, or
 * -1 for an empty name or too many. */
static int split_names(char *text, const char **names)
{
	int n = 0;

	for (char *p = text, *comma; p; p = comma ? comma + 1 : NULL) {
		if ((comma = strchr(p, ',')))
			*comma = 0;
		if (!*p || n == MAX_WRT)
			return -1;
		names[n++] = p;
	}
	return n;
}

static int write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;

	if (f && fclose(f))
		ok = false;
	if (!ok)
		fprintf(stderr, "tunectl grad: cannot write '%s'\n", path);
	return ok ? EXIT_SUCCESS : EXIT_INVALID;
}

static int differentiate(const char *path, const char **wrt, int nwrt,
			 const char *out)
{
	sched_error err = {0};
	sched_graph *graph, *backward = NULL;
	char *json;
	int status;

	if (sched_graph_read_file(path, &graph, &err) < 0)
		return fprintf(stderr, "%s: %s\n", path, err.message), EXIT_INVALID;
	if (sched_graph_grad(graph, wrt, nwrt, &json, &err) < 0) {
		fprintf(stderr, "%s: %s\n", path, err.message);
		sched_graph_free(graph);
		return EXIT_INVALID;
	}
	if (!out) {
		puts(json);
		status = EXIT_SUCCESS;
	} else if ((status = write_text(out, json)) == EXIT_SUCCESS &&
		   sched_graph_read_string(json, &backward, &err) == SCHED_OK) {
		printf("%s: backward graph '%s', %d tensors, %d ops, key %s\n", out,
		       sched_graph_name(backward), sched_graph_tensor_count(backward),
		       sched_graph_op_count(backward), sched_graph_key(backward));
	}
	sched_graph_free(backward);
	sched_graph_free(graph);
	free(json);
	return status;
}

int tunectl_grad(const tunectl_command *command, const tunectl_args *args)
{
	char *names = strdup(tunectl_option_value(args, "wrt"));
	const char *wrt[MAX_WRT];
	int nwrt, status;

	if (!names)
		return fprintf(stderr, "tunectl: out of memory\n"), EXIT_INVALID;
	if ((nwrt = split_names(names, wrt)) < 0)
		status = tunectl_usage_error(command, "--wrt takes 1 to %d tensor "
					     "names separated by commas", MAX_WRT);
	else
		status = differentiate(args->arg, wrt, nwrt,
				       tunectl_option_value(args, "out"));
	free(names);
	return status;
}
