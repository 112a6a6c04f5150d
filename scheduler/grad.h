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

grad_ex grad_num(grad_ctx *g, double num);
grad_ex grad_text(grad_ctx *g, const char *text);
grad_ex grad_add(grad_ctx *g, grad_ex a, grad_ex b);
grad_ex grad_sub(grad_ctx *g, grad_ex a, grad_ex b);
grad_ex grad_neg(grad_ctx *g, grad_ex a);
grad_ex grad_mul(grad_ctx *g, grad_ex a, grad_ex b);
grad_ex grad_div(grad_ctx *g, grad_ex a, grad_ex b);
grad_ex grad_call(grad_ctx *g, const char *func, grad_ex a);
grad_ex grad_select(grad_ctx *g, grad_ex cond, grad_ex a, grad_ex b);

/* A forward node printed with the context's names. */
grad_ex grad_forward(grad_ctx *g, const sched_node *node);

/* The derivative of "node" with respect to the accesses marked in
 * g->match, every other access held constant. */
grad_ex grad_derivative(grad_ctx *g, const sched_node *node);

#endif
