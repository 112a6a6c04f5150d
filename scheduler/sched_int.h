/*
 * sched_int.h: what is private to the scheduler's files: the arena's
 * functions, parsing, checking, canonical forms, isl forms of accesses and
 * printing. The IR itself, which other modules read, is in ir.h.
 */
#ifndef SCHED_INT_H
#define SCHED_INT_H

#include <isl/ctx.h>

#include "ir.h"

void *sched_arena_alloc(sched_arena *arena, size_t size);
char *sched_arena_strndup(sched_arena *arena, const char *s, size_t n);
void sched_arena_release(sched_arena *arena);

/* Fills "err" with code, op, column and a printf-style message; returns
 * code. Safe with err == NULL. */
int sched_fail(sched_error *err, int code, int op, int column,
	       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The source text of "node" in "text", cut to about 60 bytes with "..." on
 * a character boundary, for quoting in messages. */
#define SCHED_EXCERPT 72
const char *sched_node_excerpt(const sched_node *node, const char *text,
			       char out[SCHED_EXCERPT]);

/* expr.c: parses op "index" of "graph" from its text into graph->ops. */
int sched_op_parse(sched_graph *graph, int index, const char *text,
		   sched_error *err);
const char *sched_func_name(enum sched_func func);
bool sched_int_binop(int op, int64_t a, int64_t b, int64_t *value);
const char *sched_reducer_name(enum sched_reducer reducer);
bool sched_name_is_reserved(const char *name);

/* graph.c: checks that need the whole graph: writes, reads, cycles. */
int sched_graph_check_dataflow(sched_graph *graph, sched_error *err);

/* poly.c: isl forms of ops and the bounds check. */
isl_ctx *sched_isl_ctx_new(void);
isl_map *sched_access_map(isl_ctx *ctx, const sched_graph *graph,
			  const sched_op *op, const sched_node *access);
int sched_graph_check_bounds(const sched_graph *graph, sched_error *err);

/* print.c: expressions as text, with the names given for tensors and the
 * op's variables; outside indices, those of value_vars where it is not
 * NULL (a floor division is exact only in an index). */
typedef struct sched_names {
	const char *const *tensors;
	const char *const *vars;
	const char *const *value_vars;
} sched_names;

void sched_node_print(sched_buf *buf, const sched_node *node,
		      const sched_names *names);
void sched_op_print(sched_buf *buf, const sched_op *op,
		    const sched_names *names);

/* group_memo.c: a graph's memo of group analyses (sched_group_recall). */
sched_group_memo *sched_group_memo_new(void);
void sched_group_memo_free(sched_group_memo *memo);

/* canon.c */
int sched_graph_canonicalize(sched_graph *graph);

#endif
