/*
 * grad.c: tunectl grad FILE --wrt X[,Y...] [--out OUT]
 *            [--save none|auto|all --forward FWD]
 *
 * Writes the backward graph of the graph in FILE with respect to the
 * tensors of --wrt (sched_graph_grad_saving, docs/autodiff.md) as
 * graph.json: on stdout, or into OUT with a line on stdout saying what it
 * holds. With --save, the forward results it reads saved are inputs of
 * it, and FWD is the forward graph that also outputs them. A graph that
 * cannot be differentiated exits 1 with the reason.
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

/* Writes "json" into "out" (stdout without one) with a line saying what
 * it holds. */
static int write_graph(const char *out, const char *json, const char *what)
{
	sched_graph *graph = NULL;
	sched_error err = {0};
	int status;

	if (!out)
		return puts(json) >= 0 ? EXIT_SUCCESS : EXIT_INVALID;
	if ((status = write_text(out, json)) == EXIT_SUCCESS &&
	    sched_graph_read_string(json, &graph, &err) == SCHED_OK)
		printf("%s: %s graph '%s', %d tensors, %d ops, key %s\n", out, what,
		       sched_graph_name(graph), sched_graph_tensor_count(graph),
		       sched_graph_op_count(graph), sched_graph_key(graph));
	sched_graph_free(graph);
	return status;
}

static int differentiate(const char *path, const char **wrt, int nwrt,
			 enum sched_grad_save save, const char *out,
			 const char *forward_out)
{
	sched_error err = {0};
	sched_graph *graph;
	char *json, *forward = NULL;
	int status;

	if (sched_graph_read_file(path, &graph, &err) < 0)
		return fprintf(stderr, "%s: %s\n", path, err.message), EXIT_INVALID;
	if (sched_graph_grad_saving(graph, wrt, nwrt, save, &json, &forward, &err) <
	    0) {
		fprintf(stderr, "%s: %s\n", path, err.message);
		sched_graph_free(graph);
		return EXIT_INVALID;
	}
	status = write_graph(out, json, "backward");
	/* with nothing saved, the forward graph is FILE's, unchanged */
	if (status == EXIT_SUCCESS && forward_out && forward)
		status = write_graph(forward_out, forward, "forward");
	else if (status == EXIT_SUCCESS && forward_out)
		printf("%s: not written: nothing is saved, the forward graph is "
		       "%s\n",
		       forward_out, path);
	sched_graph_free(graph);
	free(json);
	free(forward);
	return status;
}

/* The --save mode named "text", or -1. */
static int save_mode(const char *text)
{
	static const char *const names[] = {"none", "auto", "all"};

	for (int m = 0; m < 3; m++)
		if (!strcmp(text, names[m]))
			return m;
	return -1;
}

int tunectl_grad(const tunectl_command *command, const tunectl_args *args)
{
	char *names = strdup(tunectl_option_value(args, "wrt"));
	const char *save = tunectl_option_value(args, "save");
	const char *forward = tunectl_option_value(args, "forward");
	int mode = save ? save_mode(save) : SCHED_SAVE_NONE;
	const char *wrt[MAX_WRT];
	int nwrt, status;

	if (!names)
		return fprintf(stderr, "tunectl: out of memory\n"), EXIT_INVALID;
	if ((nwrt = split_names(names, wrt)) < 0)
		status = tunectl_usage_error(command, "--wrt takes 1 to %d tensor "
					     "names separated by commas", MAX_WRT);
	else if (mode < 0)
		status = tunectl_usage_error(command,
					     "--save takes none, auto or "
					     "all, not '%s'",
					     save);
	else if (mode != SCHED_SAVE_NONE && !forward)
		status = tunectl_usage_error(command,
					     "--save %s needs --forward FWD, "
					     "the forward graph that also outputs "
					     "the saved tensors",
					     save);
	else
		status = differentiate(args->arg, wrt, nwrt, mode,
				       tunectl_option_value(args, "out"), forward);
	free(names);
	return status;
}
