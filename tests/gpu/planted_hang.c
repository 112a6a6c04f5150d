/*
 * planted_hang.c: on a GPU, a sync candidate whose wait can never end
 * hangs only its worker: the watchdog kills it within the time limit and
 * the next request is measured by a fresh worker (docs/design/sync.md).
 *
 *   planted_hang WORKER GRAPH.json
 *
 * The plan of gpt3_mlp_small with y waiting on g row by row is read (and
 * so proved); then y's source is replaced by the same source with the
 * target of its waits one above the posts they get, which the proof
 * refuses in a plan. Exit 0 when the hang is killed and the next request
 * answers "ok", 1 otherwise, 77 (skip) where no GPU is usable.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kgen.h"
#include "tuner.h"

#define PLAN "{\"kernels\": [{\"name\": \"h\", \"ops\": [0]}, {\"name\": \"g\", " \
	"\"ops\": [1], \"schedule\": {\"tile\": [4, 4], \"threads\": [4, 4]}}, " \
	"{\"name\": \"y\", \"ops\": [2], \"sync\": {\"after\": \"g\", \"policy\": \"row\"}}]}"
#define WAIT_TARGET "ksync_wait(ksync_in + (s), "

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
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

/* y's source with the target of its waits raised by one. */
static char *planted_source(const sched_graph *graph)
{
	json_t *json = json_loads(PLAN, 0, NULL);
	kgen_plan *plan = NULL;
	kgen_error err = {0};
	char *source = NULL, *at, *planted = NULL;

	if (kgen_plan_from_json(graph, json, &plan, &err) < 0)
		fprintf(stderr, "planted_hang: the plan: %s\n", err.message);
	else if ((source = kgen_print_cuda(graph, plan, 2)) &&
		 (at = strstr(source, WAIT_TARGET))) {
		long target = strtol(at + strlen(WAIT_TARGET), NULL, 10);
		char *rest = strchr(at, 'u');

		*at = 0;
		if (asprintf(&planted, "%s" WAIT_TARGET "%ld%s", source, target + 1, rest) < 0)
			planted = NULL;
	}
	free(source);
	kgen_plan_free(plan);
	json_decref(json);
	return planted;
}

static json_t *request(const char *graph_text, const char *source)
{
	json_t *r = json_pack("{s:s, s:s, s:o, s:i}", "op", "measure", "graph", graph_text,
			      "plan", json_loads(PLAN, 0, NULL), "seed", 1);

	if (source)
		json_object_set_new(r, "sources", json_pack("[n, n, s]", source));
	return r;
}

/* Asks once; "kind" gets the answer's kind (a copy: the answer is freed). */
static tuner_outcome ask(tuner_worker *worker, json_t *req, double timeout_s,
			 char kind[32])
{
	tuner_reply reply = {0};

	tuner_worker_ask(worker, req, timeout_s, &reply);
	snprintf(kind, 32, "%s", reply.answer ?
		 json_string_value(json_object_get(reply.answer, "kind")) ?: "none" : "none");
	printf("planted_hang: %s (%s)\n", reply.detail[0] ? reply.detail : "answered", kind);
	json_decref(reply.answer);
	json_decref(req);
	return reply.outcome;
}

int main(int argc, char **argv)
{
	const char *args[] = {"tuned-worker", "--backend", "cuda", NULL};
	char kind[32];
	kgen_backend *cuda = NULL;
	kgen_error err = {0};
	sched_graph *graph = NULL;
	sched_error serr = {0};
	char *text = argc == 3 ? read_text(argv[2]) : NULL, *planted;
	tuner_worker *worker;
	int failed;

	if (!text || sched_graph_read_string(text, &graph, &serr) < 0)
		return fprintf(stderr, "usage: planted_hang WORKER GRAPH.json\n"), 2;
	if (kgen_backend_open("cuda", &cuda, &err) < 0)
		return printf("planted_hang skipped: %s\n", err.message), 77;
	kgen_backend_close(cuda);
	if (!(planted = planted_source(graph)))
		return fprintf(stderr, "planted_hang: no wait to plant a hang in\n"), 1;
	worker = tuner_worker_new(argv[1], args);
	failed = ask(worker, request(text, planted), 20, kind) != TUNER_TIMED_OUT;
	failed |= ask(worker, request(text, NULL), 120, kind) != TUNER_ANSWERED ||
		  strcmp(kind, "ok") != 0;
	printf("planted_hang: %s\n", failed ? "FAILED" : "the hang was killed and the "
	       "next request measured");
	tuner_worker_free(worker);
	free(planted);
	free(text);
	sched_graph_free(graph);
	return failed;
}
