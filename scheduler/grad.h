/*
 * grad.h: the private forms of the backward graph builder (grad.c) and
 * its expressions (grad_expr.c).
 */
#ifndef GRAD_H
#define GRAD_H

#include "sched_int.h"

/* What an expression is known to be, for dropping zero and identity
 * terms. */
enum grad_value { GRAD_OTHER, GRAD_ZERO, GRAD_ONE, GRAD_MINUS_ONE };

/* An expression as text (in the context's arena) and the precedence of
 * its top operator, as print.c ranks them. */
typedef struct grad_ex {
	const char *text;
	int prec;
	enum grad_value value;
} grad_ex;

/* What building expressions needs: the arena their text lives in, the
 * names forward nodes print with (the variables may be replaced by
 * index expressions) and which accesses of the op are differentiated. */
typedef struct grad_ctx {
	sched_arena arena;
	sched_names names;
	const bool *match; /* per access_id */
	/* the op's body when it is one call and the op has no reducer, and
	 * the target's element, which holds that call's value */
	const sched_node *whole_call;
	grad_ex result;
	bool nomem;
} grad_ctx;

/* printf into the context's arena ("" after an allocation failure, which
 * sets g->nomem). */
const char *grad_printf(grad_ctx *g, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* "p0, p1, ..." for "rank" dims, with prefix "p": index variables. */
const char *grad_index_vars(grad_ctx *g, const char *prefix, int rank);

grad_ex grad_num(grad_ctx *g, double num);
grad_ex grad_text(grad_ctx *g, const char *text);
grad_ex grad_add(grad_ctx *g, grad_ex a, grad_ex b);
grad_ex grad_sub(grad_ctx *g, grad_ex a, grad_ex b);
grad_ex grad_neg(grad_ctx *g, grad_ex a);
grad_ex grad_mul(grad_ctx *g, grad_ex a, grad_ex b);
grad_ex grad_div(grad_ctx *g, grad_ex a, grad_ex b);
grad_ex grad_call(grad_ctx *g, const char *func, grad_ex a);
grad_ex grad_select(grad_ctx *g, grad_ex cond, grad_ex a, grad_ex b);

/* The longest call in "text" (other than a select, and holding none)
 * that occurs in it more than once, or NULL: a common subexpression. */
const char *grad_repeated_call(grad_ctx *g, const char *text);
/* "text" with every occurrence of the call "what" replaced by "with". */
const char *grad_replace_call(grad_ctx *g, const char *text, const char *what,
			      const char *with);

/* A forward node printed with the context's names. */
grad_ex grad_forward(grad_ctx *g, const sched_node *node);

/* The derivative of "node" with respect to the accesses marked in
 * g->match, every other access held constant. */
grad_ex grad_derivative(grad_ctx *g, const sched_node *node);

/* grad_index.c: the inverse of a read's index map. Per variable of the op,
 * the text that replaces it in the contribution (solved in terms of the
 * adjoint's index variables "target_vars", or its own name when it is
 * summed over; in indices, and outside them where a floor division must
 * be written exactly), the new variables that quasi-affine indices add (summed
 * over [extra_lo, extra_hi)), and the guard (NULL: none) that keeps the
 * solved variables in range. */
#define GRAD_MAX_VARS (2 * SCHED_MAX_RANK)

typedef struct grad_inverse {
	const char *vars[GRAD_MAX_VARS];
	const char *value_vars[GRAD_MAX_VARS]; /* the same outside indices */
	bool solved[GRAD_MAX_VARS];
	const char *target_vars;
	const char *guard;
	int nextra;
	const char *extra[SCHED_MAX_RANK];
	int64_t extra_lo[SCHED_MAX_RANK], extra_hi[SCHED_MAX_RANK];
} grad_inverse;

/* Inverts the index map of read "access" of "op"; a read it cannot
 * invert fails with SCHED_EMEANING, naming the op, the read and why. */
int grad_invert(grad_ctx *g, const sched_graph *graph, const sched_op *op,
		const sched_node *access, grad_inverse *inv, sched_error *err);

/* grad_split.c: whether the max or min reduction "op" (any other op: true)
 * can pass its adjoint through "body == result": its body is one read of
 * a tensor whose dtype the result holds exactly. */
bool grad_extremum_exact(const sched_graph *graph, const sched_op *op);
/* The graph with every such reduction that is not, among the ops whose
 * targets are "needs", split into its body, its exact f32 extremum and a
 * copy (graph.json text in *text, caller frees), or *text NULL when none
 * is. */
int grad_split_extrema(const sched_graph *graph, const bool *needs,
		       char **text, sched_error *err);

#endif
