/*
 * kept_graphs.c: the graphs a worker read last, kept across its requests.
 *
 * Each graph remembers the fused groups analysed on it (sched_group_recall)
 * and those isl analyses cost more than the rest of a compile request
 * whose kernels the shared folder already holds; the tuner sends one
 * graph's text with request after request. So a worker keeps the last
 * KEPT_GRAPHS graphs it read, found again by their exact text, and
 * forgets the one asked for least recently first. With each graph it
 * keeps the plan its candidates are timed beside, built (measure.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kgen.h"
#include "tuner.h"

/* The plan the candidates of a graph are timed beside, built. */
typedef struct kept_beside {
	char *plan_text; /* NULL: none */
	kgen_plan *plan;
	kgen_program *program;
} kept_beside;

typedef struct kept_graph {
	char *text; /* NULL: a free slot */
	sched_graph *graph;
	unsigned long used; /* the read that last asked for it */
	kept_beside beside;
} kept_graph;

struct tuner_graphs {
	kept_graph kept[TUNER_KEPT_GRAPHS];
	unsigned long reads;
};

tuner_graphs *tuner_graphs_new(void)
{
	return calloc(1, sizeof(tuner_graphs));
}

static void forget_beside(kept_beside *beside)
{
	kgen_program_free(beside->program);
	kgen_plan_free(beside->plan);
	free(beside->plan_text);
	*beside = (kept_beside){0};
}

static void forget(kept_graph *slot)
{
	forget_beside(&slot->beside);
	free(slot->text);
	sched_graph_free(slot->graph);
	*slot = (kept_graph){0};
}

void tuner_graphs_free(tuner_graphs *graphs)
{
	if (!graphs)
		return;
	for (int i = 0; i < TUNER_KEPT_GRAPHS; i++)
		forget(&graphs->kept[i]);
	free(graphs);
}

/* The slot holding "text", or NULL. */
static kept_graph *find(tuner_graphs *graphs, const char *text)
{
	for (int i = 0; i < TUNER_KEPT_GRAPHS; i++)
		if (graphs->kept[i].text && !strcmp(graphs->kept[i].text, text))
			return &graphs->kept[i];
	return NULL;
}

/* A free slot, or the one asked for least recently (a free slot was
 * never asked for: its "used" is 0). */
static kept_graph *stalest(tuner_graphs *graphs)
{
	kept_graph *slot = &graphs->kept[0];

	for (int i = 1; i < TUNER_KEPT_GRAPHS; i++)
		if (graphs->kept[i].used < slot->used)
			slot = &graphs->kept[i];
	return slot;
}

int tuner_graphs_read(tuner_graphs *graphs, const char *text, const sched_graph **graph,
		      sched_error *err)
{
	kept_graph *slot = find(graphs, text);
	sched_graph *fresh = NULL;
	char *copy;
	int rc;

	*graph = NULL;
	if (!slot) {
		if ((rc = sched_graph_read_string(text, &fresh, err)) < 0)
			return rc;
		if (!(copy = strdup(text))) {
			sched_graph_free(fresh);
			*err = (sched_error){.code = SCHED_ENOMEM, .op = -1};
			snprintf(err->message, sizeof(err->message), "out of memory");
			return SCHED_ENOMEM;
		}
		slot = stalest(graphs);
		forget(slot);
		*slot = (kept_graph){.text = copy, .graph = fresh};
	}
	slot->used = ++graphs->reads;
	*graph = slot->graph;
	return SCHED_OK;
}

/* The slot of the kept graph "graph", or NULL. */
static kept_graph *slot_of(tuner_graphs *graphs, const sched_graph *graph)
{
	for (int i = 0; i < TUNER_KEPT_GRAPHS; i++)
		if (graphs->kept[i].text && graphs->kept[i].graph == graph)
			return &graphs->kept[i];
	return NULL;
}

kgen_program *tuner_graphs_beside(tuner_graphs *graphs, const sched_graph *graph,
				  const char *plan_text)
{
	kept_graph *slot = slot_of(graphs, graph);

	return slot && slot->beside.plan_text &&
			       !strcmp(slot->beside.plan_text, plan_text) ?
		       slot->beside.program :
		       NULL;
}

void tuner_graphs_keep_beside(tuner_graphs *graphs, const sched_graph *graph,
			      const char *plan_text, kgen_plan *plan,
			      kgen_program *program)
{
	kept_graph *slot = slot_of(graphs, graph);
	kept_beside fresh = {slot ? strdup(plan_text) : NULL, plan, program};

	if (!fresh.plan_text) {
		forget_beside(&fresh);
		return;
	}
	forget_beside(&slot->beside);
	slot->beside = fresh;
}
