/*
 * ir.h: the graph IR as other modules read it (docs/overview.md, "The IR").
 *
 * scheduler.h is the graph's public interface, opaque; this header opens
 * it to the modules that lower, cost and search graphs (kernels/ and
 * tuner/): the tensors, the ops and their expression trees, as the
 * scheduler built them. They read these forms and never change them; the
 * scheduler's own machinery (parsing, checks, canonical forms) stays in
 * sched_int.h, which no file outside scheduler/ includes.
 */
#ifndef SCHED_IR_H
#define SCHED_IR_H

#include "scheduler.h"

/* Every allocation of one graph comes from its arena and is freed at once
 * (its functions: sched_int.h). */
typedef struct sched_arena_block sched_arena_block;
typedef struct sched_arena {
	sched_arena_block *head;
} sched_arena;

/* A growable string, in which the IR and the code lowered from it are
 * printed; str is NULL after an allocation failure. */
typedef struct sched_buf {
	char *str;
	size_t len, cap;
} sched_buf;

void sched_buf_printf(sched_buf *buf, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void sched_buf_release(sched_buf *buf);

enum sched_node_kind {
	SCHED_NODE_NUM,
	SCHED_NODE_VAR,
	SCHED_NODE_ACCESS,
	SCHED_NODE_CALL,
	SCHED_NODE_UNARY,
	SCHED_NODE_BINARY,
};

enum sched_binop {
	SCHED_ADD, SCHED_SUB, SCHED_MUL, SCHED_DIV, SCHED_MOD,
	SCHED_LT, SCHED_LE, SCHED_GT, SCHED_GE, SCHED_EQ, SCHED_NE,
	SCHED_AND, SCHED_OR,
};

enum sched_unop { SCHED_NEG, SCHED_NOT };

enum sched_func {
	SCHED_EXP, SCHED_LOG, SCHED_SQRT, SCHED_RSQRT, SCHED_TANH,
	SCHED_SIGMOID, SCHED_RELU, SCHED_GELU, SCHED_GELU_TANH, SCHED_SILU,
	SCHED_ERF, SCHED_ABS, SCHED_MAX2, SCHED_MIN2, SCHED_POW, SCHED_SELECT,
	SCHED_FUNC_COUNT,
};

enum sched_reducer {
	SCHED_RED_NONE, SCHED_RED_SUM, SCHED_RED_MAX, SCHED_RED_MIN,
	SCHED_RED_PROD,
};

/* One node of an op's expression. col and end_col delimit its source text
 * (1-based, end exclusive). access_id numbers an op's accesses from 0.
 * "op" is a sched_binop, sched_unop or sched_func. */
typedef struct sched_node {
	enum sched_node_kind kind;
	int col, end_col;
	double num;
	int var;
	int tensor;
	int access_id;
	int op;
	int nargs;
	struct sched_node **args;
} sched_node;

/* A variable of an op: the target's first, then the reducer's. Its range is
 * [lo, hi). */
typedef struct sched_var {
	const char *name;
	int64_t lo, hi;
	int col;
	bool reduction;
	bool inferred;
} sched_var;

typedef struct sched_op {
	const char *text;
	int index;
	int target;
	int target_col;
	int ntarget_vars;
	int nvars;
	sched_var *vars;
	enum sched_reducer reducer;
	sched_node *body;
	int naccesses;
} sched_op;

typedef struct sched_tensor {
	const char *name;
	int rank;
	int64_t shape[SCHED_MAX_RANK];
	int64_t size;
	enum sched_dtype dtype;
	enum sched_role role;
	int writer;
} sched_tensor;

/* The fused groups analysed on a graph (group_memo.c). */
typedef struct sched_group_memo sched_group_memo;

struct sched_graph {
	sched_arena arena;
	sched_group_memo *groups;
	const char *name;
	bool allow_tf32;
	int ntensors;
	sched_tensor *tensors;
	int nops;
	sched_op *ops;
	int *order;          /* the canonical order of the ops */
	int *tensor_number;  /* each tensor's number in the canonical form */
	char *canonical;
	char key[SCHED_KEY_HEX + 1];
};

/* expr.c: the value of a subtree free of variables and accesses, in
 * integer arithmetic (floor division and remainder), or false; why
 * "node" is not a quasi-affine index, or NULL if it is one. */
bool sched_node_int_const(const sched_node *node, int64_t *value);
const char *sched_index_problem(const sched_node *node);
/* Letters, digits and '_', not starting with a digit (graph.c). */
bool sched_is_identifier(const char *s);

/* explain.c: the arithmetic of "op" over its whole domain: every operator
 * and call on values per point, plus one per point for a reducer. */
int64_t sched_op_flops(const sched_op *op);
/* The points of the op's reduction (1 for an op without one). */
int64_t sched_op_reduction_points(const sched_op *op);

/* Whether the body of "op" reads "tensor" (fusion.c). */
bool sched_op_reads_tensor(const sched_op *op, int tensor);

/* Whether var "var" occurs under "node". */
bool sched_node_mentions(const sched_node *node, int var);

/* Whether "a" and "b" are the same expression: the same nodes, numbers,
 * vars, tensors and ops (vars by their index: the same only in ops whose
 * vars are the same). */
bool sched_node_same(const sched_node *a, const sched_node *b);

/* Visits every access node under "node" (pre-order). */
typedef void (*sched_access_fn)(const sched_node *access, void *user);
void sched_node_each_access(const sched_node *node, sched_access_fn fn,
			    void *user);

/* sched_group_new of "spec" remembered by "graph" under "key" (what
 * tells "spec" apart from the caller's other specs on this graph; NULL:
 * neither recalled nor remembered): a copy of the analysis made before,
 * refusals included, or a new one, kept until the graph is freed or,
 * past 512 analyses on the graph (GROUP_MEMO_SLOTS in group_memo.c), until
 * the oldest are forgotten to make room. */
int sched_group_recall(const sched_graph *graph, const char *key,
		       const sched_group_spec *spec, sched_group **out,
		       sched_error *err);

/* For readers of JSON beside a graph (plans): the first key of JSON
 * object "obj" not in the NULL-terminated "keys", or NULL. */
const char *sched_unknown_key(json_t *obj, const char *const *keys);

#endif
