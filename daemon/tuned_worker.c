/*
 * tuned-worker: the process that compiles, verifies and times candidates.
 *
 *   tuned-worker [--backend cpu|cuda|auto] [--share DIR]
 *
 * Reads one JSON request per line on stdin, answers one JSON object per
 * line on stdout (tuner_serve in tuner/measure.c says what they hold: the
 * ops measure, compile, probe and retime). {"describe": true} is answered
 * with the backend and the device it drives. The last graphs read are
 * kept from request to request (tuner_graphs), with the fused groups
 * analysed on them, as the same graph is sent again and again. With
 * --share, compiled kernels are looked for in DIR and left there
 * (kgen_backend_share): the compile workers of a pipelined tuner fill
 * it, its measuring worker loads from it. A kernel that crashes or hangs
 * takes this process with it, and only it: the caller sees the process die
 * or time out, and starts another.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <jansson.h>

#include "kgen.h"
#include "tuner.h"

static const char usage[] =
	"usage: tuned-worker [--backend cpu|cuda|auto] [--share DIR]\n"
	"Reads requests (measure, compile, probe, retime), one JSON object per\n"
	"line, on stdin and answers each with one JSON object per line on\n"
	"stdout. --share DIR: compiled kernels are shared through the folder\n"
	"DIR (made if missing).\n";

static void reply(json_t *obj)
{
	char *text = json_dumps(obj, JSON_COMPACT);

	printf("%s\n", text ? text : "{\"kind\":\"error\",\"error\":\"out of memory\"}");
	fflush(stdout);
	free(text);
	json_decref(obj);
}

static json_t *handle_line(kgen_backend *backend, tuner_graphs *graphs,
			   const char *line)
{
	json_error_t jerr;
	json_t *request = json_loads(line, 0, &jerr), *obj;

	if (!json_is_object(request)) {
		json_decref(request);
		return json_pack("{s:s, s:b, s:s}", "kind", "invalid", "verified", 0,
				 "error", "the request is not a JSON object");
	}
	if (json_is_true(json_object_get(request, "describe")))
		obj = json_pack("{s:s, s:s, s:s}", "kind", "device",
				"backend", kgen_backend_name(backend),
				"device", kgen_backend_description(backend));
	else
		obj = tuner_serve(backend, graphs, request);
	json_decref(request);
	return obj;
}

static int serve(kgen_backend *backend)
{
	tuner_graphs *graphs = tuner_graphs_new();
	char *line = NULL;
	size_t cap = 0;

	if (!graphs) {
		fputs("tuned-worker: out of memory\n", stderr);
		return EXIT_FAILURE;
	}
	while (getline(&line, &cap, stdin) > 0)
		reply(handle_line(backend, graphs, line));
	free(line);
	tuner_graphs_free(graphs);
	return EXIT_SUCCESS;
}

/* A worker outlives nothing: it is killed with the process that started
 * it, even one that could not clean up (killed itself). */
static void die_with_parent(void)
{
	pid_t parent = getppid();

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(EXIT_FAILURE);
}

int main(int argc, char **argv)
{
	const char *name = "auto", *share = NULL;
	kgen_backend *backend;
	kgen_error err = {0};
	int status;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--backend") && i + 1 < argc)
			name = argv[++i];
		else if (!strcmp(argv[i], "--share") && i + 1 < argc)
			share = argv[++i];
		else
			return fputs(usage, strcmp(argv[i], "--help") ? stderr : stdout),
			       strcmp(argv[i], "--help") ? 2 : 0;
	}
	die_with_parent();
	if (kgen_backend_open(name, &backend, &err) < 0) {
		reply(json_pack("{s:s, s:b, s:s}", "kind", "backend_error",
				"verified", 0, "error", err.message));
		return EXIT_FAILURE;
	}
	if (share && kgen_backend_share(backend, share, &err) < 0) {
		fprintf(stderr, "tuned-worker: %s\n", err.message);
		kgen_backend_close(backend);
		return 2;
	}
	status = serve(backend);
	kgen_backend_close(backend);
	return status;
}
