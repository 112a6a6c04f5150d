/*
 * print.c: expressions back to text, with as few parentheses as the
 * grammar of expr.c needs.
 */
#include <stdio.h>
#include <stdlib.h>

#include "sched_int.h"

static const char *const binop_text[] = {
	[SCHED_ADD] = "+", [SCHED_SUB] = "-", [SCHED_MUL] = "*",
	[SCHED_DIV] = "/", [SCHED_MOD] = "%", [SCHED_LT] = "<",
	[SCHED_LE] = "<=", [SCHED_GT] = ">", [SCHED_GE] = ">=",
	[SCHED_EQ] = "==", [SCHED_NE] = "!=", [SCHED_AND] = "&&",
	[SCHED_OR] = "||",
};

static const int binop_precedence[] = {
	[SCHED_OR] = 1, [SCHED_AND] = 2, [SCHED_EQ] = 3, [SCHED_NE] = 3,
	[SCHED_LT] = 4, [SCHED_LE] = 4, [SCHED_GT] = 4, [SCHED_GE] = 4,
	[SCHED_ADD] = 5, [SCHED_SUB] = 5, [SCHED_MUL] = 6, [SCHED_DIV] = 6,
	[SCHED_MOD] = 6,
};

#define UNARY_PRECEDENCE 7
#define PRIMARY_PRECEDENCE 8

static int precedence(const sched_node *node)
{
	if (node->kind == SCHED_NODE_BINARY)
		return binop_precedence[node->op];
	if (node->kind == SCHED_NODE_UNARY)
		return UNARY_PRECEDENCE;
	return PRIMARY_PRECEDENCE;
}

static void print_operand(sched_buf *buf, const sched_node *node,
			  const sched_names *names, int min_precedence)
{
	bool parens = precedence(node) < min_precedence;

	sched_buf_printf(buf, parens ? "(" : "");
	sched_node_print(buf, node, names);
	sched_buf_printf(buf, parens ? ")" : "");
}

/* The shortest text that reads back as the same double. */
static void print_number(sched_buf *buf, double num)
{
	char text[32];

	snprintf(text, sizeof(text), "%.15g", num);
	if (strtod(text, NULL) != num)
		snprintf(text, sizeof(text), "%.17g", num);
	sched_buf_printf(buf, "%s", text);
}

static void print_args(sched_buf *buf, const sched_node *node,
		       const sched_names *names)
{
	for (int i = 0; i < node->nargs; i++) {
		sched_buf_printf(buf, i ? ", " : "");
		sched_node_print(buf, node->args[i], names);
	}
}

void sched_node_print(sched_buf *buf, const sched_node *node,
		      const sched_names *names)
{
	int p = precedence(node);

	switch (node->kind) {
	case SCHED_NODE_NUM:
		return print_number(buf, node->num);
	case SCHED_NODE_VAR:
		return sched_buf_printf(buf, "%s",
					(names->value_vars ? names->value_vars :
							     names->vars)[node->var]);
	case SCHED_NODE_ACCESS:
		sched_buf_printf(buf, "%s[", names->tensors[node->tensor]);
		print_args(buf, node,
			   &(sched_names){names->tensors, names->vars, NULL});
		return sched_buf_printf(buf, "]");
	case SCHED_NODE_CALL:
		sched_buf_printf(buf, "%s(", sched_func_name(node->op));
		print_args(buf, node, names);
		return sched_buf_printf(buf, ")");
	case SCHED_NODE_UNARY:
		sched_buf_printf(buf, node->op == SCHED_NEG ? "-" : "!");
		return print_operand(buf, node->args[0], names, p);
	case SCHED_NODE_BINARY:
		print_operand(buf, node->args[0], names, p);
		sched_buf_printf(buf, " %s ", binop_text[node->op]);
		return print_operand(buf, node->args[1], names, p + 1);
	}
}

/* The whole op, every reduction range written out. */
void sched_op_print(sched_buf *buf, const sched_op *op, const sched_names *names)
{
	sched_buf_printf(buf, "%s[", names->tensors[op->target]);
	for (int v = 0; v < op->ntarget_vars; v++)
		sched_buf_printf(buf, "%s%s", v ? ", " : "", names->vars[v]);
	sched_buf_printf(buf, "] = ");
	if (op->reducer != SCHED_RED_NONE) {
		sched_buf_printf(buf, "%s(", sched_reducer_name(op->reducer));
		for (int v = op->ntarget_vars; v < op->nvars; v++)
			sched_buf_printf(buf, "%s%s in %lld:%lld",
					 v > op->ntarget_vars ? ", " : "",
					 names->vars[v], (long long)op->vars[v].lo,
					 (long long)op->vars[v].hi);
		sched_buf_printf(buf, ") ");
	}
	sched_node_print(buf, op->body, names);
}
