/*
 * graph_builder.h: graphs for tests, written compactly.
 *
 *   build_graph("x f32 4,8 in; y f32 4 out; t f32 4", ops)
 *
 * declares tensors (name, dtype, comma-separated shape or "-" for a scalar,
 * optional role "in" or "out") and a NULL-terminated list of ops, and
 * returns the graph.json text (caller frees).
 */
#ifndef GRAPH_BUILDER_H
#define GRAPH_BUILDER_H

#include "scheduler.h"

char *build_graph(const char *tensors, const char *const *ops);

/* Reads the graph built from tensors and ops; returns the sched code. */
int load_graph(const char *tensors, const char *const *ops,
	       sched_graph **graph, sched_error *err);

/* The same graph with "options": {"allow_tf32": true}. */
int load_graph_tf32(const char *tensors, const char *const *ops,
		    sched_graph **graph, sched_error *err);

/* Reads examples/NAME.json under $TUNED_SOURCE_ROOT; returns the sched
 * code. */
int load_example(const char *name, sched_graph **graph, sched_error *err);

#define OPS(...) ((const char *const[]){__VA_ARGS__, NULL})

#endif
