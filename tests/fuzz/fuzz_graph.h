/*
 * fuzz_graph.h: what must hold of any text read as a graph, for the fuzz
 * targets (tests/fuzz).
 */
#ifndef FUZZ_GRAPH_H
#define FUZZ_GRAPH_H

#include "scheduler.h"

/* Reads "text" as graph.json and asserts: a refusal returns a code of the
 * reader's (JSON, schema, syntax, meaning, graph or bounds: never an
 * internal error) with no graph and a message of one line, non-empty and
 * valid UTF-8; an accepted graph's canonical form reads back with the same
 * key and canonical text, and prints itself again byte for byte. The
 * graph (caller frees), or NULL when refused. */
sched_graph *fuzz_read_graph(const char *text);

#endif
