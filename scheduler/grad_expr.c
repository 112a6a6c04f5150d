/*
 * grad_expr.c: expressions of the backward graph as text, built with the
 * zero and one terms dropped, and the derivative of an op's body with
 * respect to some of its accesses (docs/design/autodiff.md has the rules).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad.h"

#define ADD_PRECEDENCE 5
#define MUL_PRECEDENCE 6
#define UNARY_PRECEDENCE 7
#define PRIMARY_PRECEDENCE 8

static const grad_ex zero = {"0", PRIMARY_PRECEDENCE, GRAD_ZERO};
static const grad_ex one = {"1", PRIMARY_PRECEDENCE, GRAD_ONE};

/* printf into a new arena string: measured in "first" (a va_list used
 * once), written from "second". */
static const char *arena_vprintf(grad_ctx *g, const char *fmt, va_list first,
				 va_list second)
{
	char probe[1];
	int n = vsnprintf(probe, sizeof(probe), fmt, first);
	char *text = n < 0 ? NULL : sched_arena_alloc(&g->arena, n + 1);

	if (!text) {
		g->nomem = true;
		return "";
	}
	vsnprintf(text, n + 1, fmt, second);
	return text;
}

const char *grad_printf(grad_ctx *g, const char *fmt, ...)
{
	va_list first, second;
	const char *text;

	va_start(first, fmt);
	va_copy(second, first);
	text = arena_vprintf(g, fmt, first, second);
	va_end(second);
	va_end(first);
	return text;
}

const char *grad_index_vars(grad_ctx *g, const char *prefix, int rank)
{
	const char *text = "";

	for (int d = 0; d < rank; d++)
		text = grad_printf(g, "%s%s%s%d", text, d ? ", " : "", prefix, d);
	return text;
}

/* A new expression of precedence "prec" from printf-style text, in the
 * arena ("0" after an allocation failure, which sets g->nomem). */
static grad_ex make(grad_ctx *g, int prec, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static grad_ex make(grad_ctx *g, int prec, const char *fmt, ...)
{
	grad_ex e = {"0", prec, GRAD_OTHER};
	va_list first, second;
	const char *text;

	va_start(first, fmt);
	va_copy(second, first);
	text = arena_vprintf(g, fmt, first, second);
	va_end(second);
	va_end(first);
	if (!g->nomem)
		e.text = text;
	return e;
}

/* The text of "e", in parentheses when it binds looser than "min". */
static grad_ex paren(grad_ctx *g, grad_ex e, int min)
{
	return e.prec < min ? make(g, PRIMARY_PRECEDENCE, "(%s)", e.text) : e;
}

/* "a op b" for a left-associative operator of precedence "prec". */
static grad_ex binary(grad_ctx *g, int prec, const char *op, grad_ex a, grad_ex b)
{
	return make(g, prec, "%s %s %s", paren(g, a, prec).text, op,
		    paren(g, b, prec + 1).text);
}

grad_ex grad_num(grad_ctx *g, double num)
{
	char text[32];
	grad_ex e;

	if (num == 0)
		return zero;
	if (num == 1)
		return one;
	snprintf(text, sizeof(text), "%.17g", fabs(num));
	e = make(g, num < 0 ? UNARY_PRECEDENCE : PRIMARY_PRECEDENCE, "%s%s",
		 num < 0 ? "-" : "", text);
	if (num == -1)
		e.value = GRAD_MINUS_ONE;
	return e;
}

grad_ex grad_text(grad_ctx *g, const char *text)
{
	return make(g, PRIMARY_PRECEDENCE, "%s", text);
}

grad_ex grad_add(grad_ctx *g, grad_ex a, grad_ex b)
{
	if (a.value == GRAD_ZERO)
		return b;
	if (b.value == GRAD_ZERO)
		return a;
	if (!strcmp(a.text, b.text))
		return grad_mul(g, grad_num(g, 2), a);
	return binary(g, ADD_PRECEDENCE, "+", a, b);
}

grad_ex grad_neg(grad_ctx *g, grad_ex a)
{
	if (a.value == GRAD_ZERO)
		return a;
	if (a.value == GRAD_ONE || a.value == GRAD_MINUS_ONE)
		return grad_num(g, a.value == GRAD_ONE ? -1 : 1);
	return make(g, UNARY_PRECEDENCE, "-%s",
		    paren(g, a, PRIMARY_PRECEDENCE).text);
}

grad_ex grad_sub(grad_ctx *g, grad_ex a, grad_ex b)
{
	if (b.value == GRAD_ZERO)
		return a;
	if (b.value == GRAD_MINUS_ONE && a.value == GRAD_OTHER)
		return grad_add(g, a, grad_num(g, 1));
	if (a.value == GRAD_ZERO)
		return grad_neg(g, b);
	return binary(g, ADD_PRECEDENCE, "-", a, b);
}

grad_ex grad_mul(grad_ctx *g, grad_ex a, grad_ex b)
{
	if (a.value == GRAD_ZERO || b.value == GRAD_ONE)
		return a;
	if (b.value == GRAD_ZERO || a.value == GRAD_ONE)
		return b;
	if (a.value == GRAD_MINUS_ONE)
		return grad_neg(g, b);
	if (b.value == GRAD_MINUS_ONE)
		return grad_neg(g, a);
	return binary(g, MUL_PRECEDENCE, "*", a, b);
}

grad_ex grad_div(grad_ctx *g, grad_ex a, grad_ex b)
{
	if (a.value == GRAD_ZERO || b.value == GRAD_ONE)
		return a;
	return binary(g, MUL_PRECEDENCE, "/", a, b);
}

grad_ex grad_call(grad_ctx *g, const char *func, grad_ex a)
{
	return make(g, PRIMARY_PRECEDENCE, "%s(%s)", func, a.text);
}

grad_ex grad_select(grad_ctx *g, grad_ex cond, grad_ex a, grad_ex b)
{
	if (a.value == GRAD_ZERO && b.value == GRAD_ZERO)
		return a;
	return make(g, PRIMARY_PRECEDENCE, "select(%s, %s, %s)", cond.text,
		    a.text, b.text);
}

/* A comparison of "a" and "b" (op one of "<", ">=", ...), for conditions. */
static grad_ex compare(grad_ctx *g, grad_ex a, const char *op, grad_ex b)
{
	return make(g, 4, "%s %s %s", paren(g, a, ADD_PRECEDENCE).text, op,
		    paren(g, b, ADD_PRECEDENCE).text);
}

grad_ex grad_forward(grad_ctx *g, const sched_node *node)
{
	sched_buf buf = {0};
	grad_ex e;
	int prec = PRIMARY_PRECEDENCE;

	sched_node_print(&buf, node, &g->names);
	if (node->kind == SCHED_NODE_UNARY)
		prec = UNARY_PRECEDENCE;
	else if (node->kind == SCHED_NODE_BINARY)
		prec = node->op <= SCHED_SUB ? ADD_PRECEDENCE
		     : node->op <= SCHED_MOD ? MUL_PRECEDENCE : 1;
	if (node->kind == SCHED_NODE_NUM && node->num < 0)
		prec = UNARY_PRECEDENCE;
	if (!buf.str) {
		g->nomem = true;
		return zero;
	}
	e = make(g, prec, "%s", buf.str);
	sched_buf_release(&buf);
	return e;
}

/* The value of call "func" of "a": the op's target element when the
 * call is the op's whole body (the forward result, shared), else the call
 * again. */
static grad_ex call_value(grad_ctx *g, const sched_node *node, int func, grad_ex a)
{
	if (node == g->whole_call && node->op == func)
		return g->result;
	return grad_call(g, sched_func_name(func), a);
}

/* The derivative of call "node" of one argument "a" (whose derivative is
 * "da") as f'(a) * da. */
static grad_ex unary_call(grad_ctx *g, const sched_node *node, grad_ex a,
			  grad_ex da)
{
	int func = node->op;
	grad_ex f;

	switch (func) {
	case SCHED_EXP:
		f = call_value(g, node, SCHED_EXP, a);
		break;
	case SCHED_LOG:
		return grad_div(g, da, a);
	case SCHED_SQRT:
		f = grad_div(g, grad_num(g, 0.5), call_value(g, node, SCHED_SQRT, a));
		break;
	case SCHED_RSQRT:
		f = grad_div(g, grad_mul(g, grad_num(g, -0.5),
					 call_value(g, node, SCHED_RSQRT, a)), a);
		break;
	case SCHED_TANH: {
		grad_ex t = call_value(g, node, SCHED_TANH, a);

		f = grad_sub(g, one, grad_mul(g, t, t));
		break;
	}
	case SCHED_SIGMOID: {
		grad_ex s = call_value(g, node, SCHED_SIGMOID, a);

		f = grad_mul(g, s, grad_sub(g, one, s));
		break;
	}
	case SCHED_RELU:
		return grad_select(g, compare(g, a, ">", zero), da, zero);
	case SCHED_GELU:
		/* Phi(a) + a phi(a) */
		f = grad_add(g, grad_mul(g, grad_num(g, 0.5),
					 grad_add(g, one, grad_call(g, "erf",
					 grad_mul(g, a, grad_num(g, M_SQRT1_2))))),
			     grad_mul(g, grad_mul(g, a, grad_call(g, "exp",
					 grad_mul(g, grad_mul(g, grad_num(g, -0.5), a), a))),
				  grad_num(g, 0.5 * M_2_SQRTPI * M_SQRT1_2)));
		break;
	case SCHED_GELU_TANH: {
		/* t = tanh(c (a + k a^3)): 0.5 (1 + t) + 0.5 a (1 - t^2) c (1 + 3k a^2) */
		const double c = M_2_SQRTPI * M_SQRT1_2, k = 0.044715;
		grad_ex t = grad_call(g, "tanh", grad_mul(g, grad_num(g, c),
				grad_add(g, a, grad_mul(g, grad_mul(g,
				grad_mul(g, grad_num(g, k), a), a), a))));
		grad_ex inner = grad_add(g, one, grad_mul(g, grad_mul(g,
					grad_num(g, 3 * k), a), a));

		f = grad_add(g, grad_mul(g, grad_num(g, 0.5), grad_add(g, one, t)),
			     grad_mul(g, grad_mul(g, grad_mul(g, grad_num(g, 0.5 * c), a),
				       grad_sub(g, one, grad_mul(g, t, t))), inner));
		break;
	}
	case SCHED_SILU: {
		grad_ex s = grad_call(g, "sigmoid", a);

		f = grad_mul(g, s, grad_add(g, one, grad_mul(g, a, grad_sub(g, one, s))));
		break;
	}
	case SCHED_ERF:
		f = grad_mul(g, grad_num(g, M_2_SQRTPI), grad_call(g, "exp",
			     grad_neg(g, grad_mul(g, a, a))));
		break;
	default: /* SCHED_ABS */
		return grad_select(g, compare(g, a, ">", zero), da,
				   grad_select(g, compare(g, a, "<", zero),
					       grad_neg(g, da), zero));
	}
	return grad_mul(g, f, da);
}

/* pow(a, b): b pow(a, b - 1) da + pow(a, b) log(a) db; the second term
 * only where the exponent depends on what is differentiated. */
static grad_ex pow_call(grad_ctx *g, grad_ex a, grad_ex b, grad_ex da, grad_ex db)
{
	grad_ex by_a = zero, by_b = zero;

	if (da.value != GRAD_ZERO)
		by_a = grad_mul(g, grad_mul(g, b, make(g, PRIMARY_PRECEDENCE,
				"pow(%s, %s)", a.text, grad_sub(g, b, one).text)), da);
	if (db.value != GRAD_ZERO)
		by_b = grad_mul(g, grad_mul(g, make(g, PRIMARY_PRECEDENCE,
				"pow(%s, %s)", a.text, b.text), grad_call(g, "log", a)), db);
	return grad_add(g, by_a, by_b);
}

static grad_ex call_derivative(grad_ctx *g, const sched_node *node)
{
	grad_ex d[3], a[3];

	for (int i = 0; i < node->nargs; i++) {
		d[i] = grad_derivative(g, node->args[i]);
		a[i] = grad_forward(g, node->args[i]);
	}
	switch (node->op) {
	case SCHED_SELECT:
		return grad_select(g, a[0], d[1], d[2]);
	case SCHED_MAX2:
		return grad_select(g, compare(g, a[0], ">=", a[1]), d[0], d[1]);
	case SCHED_MIN2:
		return grad_select(g, compare(g, a[0], "<=", a[1]), d[0], d[1]);
	case SCHED_POW:
		return pow_call(g, a[0], a[1], d[0], d[1]);
	}
	if (d[0].value == GRAD_ZERO)
		return zero;
	return unary_call(g, node, a[0], d[0]);
}

/* (a % b)' = a' - floor(a / b) b', with floor(a / b) = (a - a % b) / b. */
static grad_ex mod_derivative(grad_ctx *g, grad_ex a, grad_ex b, grad_ex mod,
			      grad_ex da, grad_ex db)
{
	grad_ex floor_q = grad_div(g, grad_sub(g, a, mod), b);

	return grad_sub(g, da, grad_mul(g, floor_q, db));
}

static grad_ex binary_derivative(grad_ctx *g, const sched_node *node)
{
	grad_ex da, db, a, b;

	if (node->op > SCHED_MOD) /* comparisons and logic: piecewise constant */
		return zero;
	da = grad_derivative(g, node->args[0]);
	db = grad_derivative(g, node->args[1]);
	if (da.value == GRAD_ZERO && db.value == GRAD_ZERO)
		return zero;
	a = grad_forward(g, node->args[0]);
	b = grad_forward(g, node->args[1]);
	switch (node->op) {
	case SCHED_ADD:
		return grad_add(g, da, db);
	case SCHED_SUB:
		return grad_sub(g, da, db);
	case SCHED_MUL:
		return grad_add(g, grad_mul(g, da, b), grad_mul(g, a, db));
	case SCHED_DIV:
		/* da / b - a db / (b b) */
		return grad_sub(g, grad_div(g, da, b),
				grad_div(g, grad_mul(g, a, db), grad_mul(g, b, b)));
	default:
		return mod_derivative(g, a, b, grad_forward(g, node), da, db);
	}
}

grad_ex grad_derivative(grad_ctx *g, const sched_node *node)
{
	switch (node->kind) {
	case SCHED_NODE_ACCESS:
		return g->match[node->access_id] ? one : zero;
	case SCHED_NODE_CALL:
		return call_derivative(g, node);
	case SCHED_NODE_UNARY:
		if (node->op == SCHED_NOT)
			return zero;
		return grad_neg(g, grad_derivative(g, node->args[0]));
	case SCHED_NODE_BINARY:
		return binary_derivative(g, node);
	default: /* numbers and variables */
		return zero;
	}
}

/* The length of the call starting at "p" (a name, then balanced
 * parentheses), or 0. */
static size_t call_length(const char *p)
{
	size_t n = 0;
	int depth = 0;

	while ((p[n] >= 'a' && p[n] <= 'z') || p[n] == '_')
		n++;
	if (!n || p[n] != '(')
		return 0;
	do {
		depth += p[n] == '(';
		depth -= p[n] == ')';
		n++;
	} while (p[n] && depth);
	return depth ? 0 : n;
}

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_';
}

/* The first occurrence of "what" in "text" from "from" on that does not
 * continue a name (sqrt( in rsqrt( does), or NULL. */
static const char *find_call(const char *text, const char *from, const char *what)
{
	for (const char *p = from; (p = strstr(p, what)); p++)
		if (p == text || !name_char(p[-1]))
			return p;
	return NULL;
}

/* How many times the call "what" (of length n) occurs in "text", apart. */
static int occurrences(const char *text, const char *what, size_t n)
{
	int count = 0;

	for (const char *p = text; (p = find_call(text, p, what)); p += n)
		count++;
	return count;
}

const char *grad_repeated_call(grad_ctx *g, const char *text)
{
	const char *best = NULL;
	size_t best_n = 0;

	for (const char *p = text; *p; p++) {
		size_t n;
		char *call;

		if ((p > text && name_char(p[-1])) ||
		    !(n = call_length(p)) || n <= best_n || !strncmp(p, "select(", 7))
			continue;
		call = strndup(p, n);
		if (call && !strstr(call, "select(") && occurrences(text, call, n) > 1) {
			best = p;
			best_n = n;
		}
		free(call);
	}
	return best ? grad_printf(g, "%.*s", (int)best_n, best) : NULL;
}

const char *grad_replace_call(grad_ctx *g, const char *text, const char *what,
			      const char *with)
{
	sched_buf buf = {0};
	size_t n = strlen(what);
	const char *from = text, *at, *out;

	sched_buf_printf(&buf, "%s", "");
	while ((at = find_call(text, from, what))) {
		sched_buf_printf(&buf, "%.*s%s", (int)(at - from), from, with);
		from = at + n;
	}
	sched_buf_printf(&buf, "%s", from);
	out = buf.str ? grad_printf(g, "%s", buf.str) : text;
	g->nomem |= !buf.str;
	sched_buf_release(&buf);
	return out;
}
