/*
 * numbering.c: which numbering of a graph's ops and tensors a plan uses.
 *
 * tuned stores each key's plans, sources and launches in the canonical
 * numbering of its graph (sched_graph_canonical_json), and marks a
 * fetched plan with that key; a plan without the mark (one written by
 * hand, tunectl explain's) uses the numbering of the graph it is given
 * with. Every consumer of a plan (the executor, tunectl run and sources,
 * the workers) goes through kgen_graph_for_plan, so that a client's own
 * names and listing order never meet another client's plan unmapped.
 */
#include <stdlib.h>
#include <string.h>

#include "kgen.h"
#include "kgen_int.h"

int kgen_graph_for_plan(const sched_graph *graph, json_t *plan,
			sched_graph **canonical, kgen_error *err)
{
	const char *key = json_string_value(json_object_get(plan, "key"));
	sched_error serr = {0};
	char *text;
	int rc;

	*canonical = NULL;
	if (!json_object_get(plan, "key"))
		return KGEN_OK;
	if (!key || !sched_is_key(key))
		return kgen_fail(err, KGEN_EPLAN,
				 "the plan's \"key\" is not a graph's key "
				 "(%d hex digits)",
				 SCHED_KEY_HEX);
	if (strcmp(key, sched_graph_key(graph)))
		return kgen_fail(err, KGEN_EPLAN,
				 "the plan is for the graph of key %s, "
				 "not for this graph (key %s)",
				 key, sched_graph_key(graph));
	if (!(text = sched_graph_canonical_json(graph)))
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	rc = sched_graph_read_string(text, canonical, &serr);
	free(text);
	if (rc < 0)
		return kgen_fail(err, KGEN_EPLAN, "the graph's canonical form: %s",
				 serr.message);
	return KGEN_OK;
}
