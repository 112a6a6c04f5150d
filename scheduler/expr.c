/*
 * expr.c: the recursive-descent parser of op expressions.
 *
 *   op     := target '=' body
 *   target := NAME '[' [var {',' var}] ']'
 *   body   := [reducer '(' rvar {',' rvar} ')'] expr
 *   rvar   := NAME [ 'in' INT ':' INT | '<' INT ]
 *   expr   := or;  or := and {'||' and};  and := eq {'&&' eq}
 *   eq     := rel {('=='|'!=') rel};  rel := add {('<'|'<='|'>'|'>=') add}
 *   add    := mul {('+'|'-') mul};  mul := unary {('*'|'/'|'%') unary}
 *   unary  := ('-'|'!') unary | primary
 *   primary:= NUM | '(' expr ')' | NAME '[' [expr {',' expr}] ']'
 *           | NAME '(' expr {',' expr} ')' | NAME
 *
 * Names are resolved while parsing (tensors, functions, variables), so each
 * error carries the column of the text it is about.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

#define MAX_VARS (2 * SCHED_MAX_RANK)
#define MAX_ARGS 64
#define MAX_DEPTH 200
#define MAX_CONSTANT (INT64_C(1) << 40)

enum tok_kind { TOK_END, TOK_NAME, TOK_NUM, TOK_PUNCT };

typedef struct token {
	enum tok_kind kind;
	int pos, len;
	double num;
	bool is_int;
} token;

typedef struct parser {
	sched_graph *graph;
	sched_op *op;
	const char *text;
	int pos;
	int prev_end;
	token tok;
	sched_error *err;
	int rc;
	int depth;
	int nvars;
	sched_var vars[MAX_VARS];
} parser;

static const struct {
	const char *name;
	int arity;
} funcs[SCHED_FUNC_COUNT] = {
	[SCHED_EXP] = {"exp", 1},	  [SCHED_LOG] = {"log", 1},
	[SCHED_SQRT] = {"sqrt", 1},	  [SCHED_RSQRT] = {"rsqrt", 1},
	[SCHED_TANH] = {"tanh", 1},	  [SCHED_SIGMOID] = {"sigmoid", 1},
	[SCHED_RELU] = {"relu", 1},	  [SCHED_GELU] = {"gelu", 1},
	[SCHED_GELU_TANH] = {"gelu_tanh", 1}, [SCHED_SILU] = {"silu", 1},
	[SCHED_ERF] = {"erf", 1},	  [SCHED_ABS] = {"abs", 1},
	[SCHED_MAX2] = {"max", 2},	  [SCHED_MIN2] = {"min", 2},
	[SCHED_POW] = {"pow", 2},	  [SCHED_SELECT] = {"select", 3},
};

static const char *const reducer_names[] = {
	[SCHED_RED_NONE] = "", [SCHED_RED_SUM] = "sum", [SCHED_RED_MAX] = "max",
	[SCHED_RED_MIN] = "min", [SCHED_RED_PROD] = "prod",
};

/* Words that may name neither a tensor nor a variable: ours and isl's. */
static const char *const reserved[] = {
	"sum", "prod", "in", "and", "or", "not", "implies", "mod", "floor",
	"ceil", "exists", "true", "false", "infty", "nan", "rat", "domain",
	"range", NULL,
};

const char *sched_func_name(enum sched_func func)
{
	return funcs[func].name;
}

const char *sched_reducer_name(enum sched_reducer reducer)
{
	return reducer_names[reducer];
}

bool sched_name_is_reserved(const char *name)
{
	for (int i = 0; reserved[i]; i++)
		if (!strcmp(name, reserved[i]))
			return true;
	for (int f = 0; f < SCHED_FUNC_COUNT; f++)
		if (!strcmp(name, funcs[f].name))
			return true;
	return false;
}

/* Records the first error; later ones are consequences and are dropped. */
static void *parse_error(parser *p, int code, int pos, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void *parse_error(parser *p, int code, int pos, const char *fmt, ...)
{
	char what[sizeof(p->err->message)];
	va_list ap;

	if (p->rc != 0)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	p->rc = sched_fail(p->err, code, p->op->index, pos + 1, "%s", what);
	return NULL;
}

static bool tok_is(const parser *p, const char *punct)
{
	size_t n = strlen(punct);

	return p->tok.kind == TOK_PUNCT && (size_t)p->tok.len == n &&
	       !strncmp(p->text + p->tok.pos, punct, n);
}

static bool tok_is_name(const parser *p, const char *name)
{
	size_t n = strlen(name);

	return p->tok.kind == TOK_NAME && (size_t)p->tok.len == n &&
	       !strncmp(p->text + p->tok.pos, name, n);
}

static const char *const two_char_puncts[] = {"<=", ">=", "==", "!=", "&&",
					      "||", NULL};

static int lex_punct(const char *s)
{
	for (int i = 0; two_char_puncts[i]; i++)
		if (!strncmp(s, two_char_puncts[i], 2))
			return 2;
	if (strchr("[](),=+-*/%<>!:", *s))
		return 1;
	return 0;
}

static int skip_digits(const char *s, int i)
{
	while (isdigit((unsigned char)s[i]))
		i++;
	return i;
}

/* Decimal numbers only: digits [. digits] [e [+-] digits]. */
static void lex_number(parser *p, const char *s)
{
	int n = skip_digits(s, 0);

	p->tok.is_int = s[n] != '.';
	if (s[n] == '.')
		n = skip_digits(s, n + 1);
	if ((s[n] == 'e' || s[n] == 'E') &&
	    (isdigit((unsigned char)s[n + 1]) ||
	     ((s[n + 1] == '+' || s[n + 1] == '-') && isdigit((unsigned char)s[n + 2])))) {
		p->tok.is_int = false;
		n = skip_digits(s, n + 2);
	}
	p->tok.kind = TOK_NUM;
	p->tok.len = n;
	p->tok.num = strtod(s, NULL);
}

/* The length of the UTF-8 character at "s" (1 for a stray byte). */
static int utf8_length(const char *s)
{
	unsigned char c = *s;
	int n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;

	for (int i = 1; i < n; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			return 1;
	return n;
}

/* Reads the next token into p->tok. */
static void next(parser *p)
{
	const char *s;

	p->prev_end = p->tok.pos + p->tok.len;
	while (isspace((unsigned char)p->text[p->pos]))
		p->pos++;
	s = p->text + p->pos;
	p->tok = (token){.pos = p->pos};
	if (!*s) {
		p->tok.kind = TOK_END;
	} else if (isalpha((unsigned char)*s) || *s == '_') {
		p->tok.kind = TOK_NAME;
		while (isalnum((unsigned char)s[p->tok.len]) || s[p->tok.len] == '_')
			p->tok.len++;
	} else if (isdigit((unsigned char)*s) ||
		   (*s == '.' && isdigit((unsigned char)s[1]))) {
		lex_number(p, s);
	} else if ((p->tok.len = lex_punct(s))) {
		p->tok.kind = TOK_PUNCT;
	} else {
		p->tok.kind = TOK_PUNCT;
		p->tok.len = utf8_length(s);
		parse_error(p, SCHED_ESYNTAX, p->pos, "unexpected character '%.*s'",
			    p->tok.len, s);
	}
	p->pos += p->tok.len;
}

static char *tok_text(parser *p)
{
	return sched_arena_strndup(&p->graph->arena, p->text + p->tok.pos,
				   p->tok.len);
}

/* The current token quoted, or "the end of the op". */
static const char *tok_describe(parser *p)
{
	char *quoted;

	if (p->tok.kind == TOK_END)
		return "the end of the op";
	quoted = sched_arena_alloc(&p->graph->arena, p->tok.len + 3);
	if (quoted)
		snprintf(quoted, p->tok.len + 3, "'%.*s'", p->tok.len,
			 p->text + p->tok.pos);
	return quoted ? quoted : "?";
}

static bool expect(parser *p, const char *punct)
{
	if (tok_is(p, punct)) {
		next(p);
		return true;
	}
	parse_error(p, SCHED_ESYNTAX, p->tok.pos, "expected '%s' but found %s",
		    punct, tok_describe(p));
	return false;
}

static sched_node *node_new(parser *p, enum sched_node_kind kind, int pos,
			    int nargs)
{
	sched_node *node = sched_arena_alloc(&p->graph->arena, sizeof(*node));

	if (!node || !(node->args = sched_arena_alloc(&p->graph->arena,
						      (nargs + 1) * sizeof(sched_node *))))
		return parse_error(p, SCHED_ENOMEM, pos, "out of memory");
	node->kind = kind;
	node->col = pos + 1;
	node->nargs = nargs;
	return node;
}

static sched_node *node_finish(parser *p, sched_node *node)
{
	if (node)
		node->end_col = p->prev_end + 1;
	return node;
}

static sched_node *parse_expr(parser *p);
static bool starts_primary(const token *tok, const char *text);
static token token_after_parens(const parser *p);

static int find_var(const parser *p, const char *name, int len)
{
	for (int i = 0; i < p->nvars; i++)
		if ((int)strlen(p->vars[i].name) == len &&
		    !strncmp(p->vars[i].name, name, len))
			return i;
	return -1;
}

/* Parses a comma-separated list up to "close" into args; returns the count
 * or -1. */
static int parse_list(parser *p, const char *close, sched_node **args)
{
	int n = 0;

	if (tok_is(p, close))
		return next(p), 0;
	do {
		if (n == MAX_ARGS)
			return parse_error(p, SCHED_ESYNTAX, p->tok.pos,
					   "more than 64 arguments%s", ""), -1;
		if (n > 0)
			next(p);
		if (!(args[n++] = parse_expr(p)))
			return -1;
	} while (tok_is(p, ","));
	return expect(p, close) ? n : -1;
}

static sched_node *parse_access(parser *p, int pos, const char *name)
{
	sched_node *args[MAX_ARGS], *node;
	int t = sched_tensor_find(p->graph, name);
	int n;

	if (t < 0)
		return parse_error(p, SCHED_EMEANING, pos, "unknown tensor '%s'",
				   name);
	next(p);
	if ((n = parse_list(p, "]", args)) < 0)
		return NULL;
	if (n != p->graph->tensors[t].rank)
		return parse_error(p, SCHED_EMEANING, pos,
				   "tensor '%s' has %d dims, indexed with %d",
				   name, p->graph->tensors[t].rank, n);
	if (!(node = node_new(p, SCHED_NODE_ACCESS, pos, n)))
		return NULL;
	node->tensor = t;
	node->access_id = p->op->naccesses++;
	memcpy(node->args, args, n * sizeof(*args));
	return node_finish(p, node);
}

static int find_func(const char *name)
{
	for (int f = 0; f < SCHED_FUNC_COUNT; f++)
		if (!strcmp(name, funcs[f].name))
			return f;
	return -1;
}

static sched_node *parse_call(parser *p, int pos, const char *name)
{
	sched_node *args[MAX_ARGS], *node;
	int f = find_func(name), n;

	if ((f < 0 && (!strcmp(name, "sum") || !strcmp(name, "prod"))) ||
	    ((f == SCHED_MAX2 || f == SCHED_MIN2) &&
	     starts_primary((token[]){token_after_parens(p)}, p->text)))
		return parse_error(p, SCHED_ESYNTAX, pos,
				   "reducer '%s' must begin the op's body, "
				   "and an op has at most one", name);
	if (f < 0)
		return parse_error(p, SCHED_EMEANING, pos,
				   "unknown function '%s'", name);
	next(p);
	if ((n = parse_list(p, ")", args)) < 0)
		return NULL;
	if (n != funcs[f].arity)
		return parse_error(p, SCHED_EMEANING, pos,
				   "'%s' takes %d argument%s, given %d", name,
				   funcs[f].arity, funcs[f].arity == 1 ? "" : "s", n);
	if (!(node = node_new(p, SCHED_NODE_CALL, pos, n)))
		return NULL;
	node->op = f;
	memcpy(node->args, args, n * sizeof(*args));
	return node_finish(p, node);
}

static sched_node *parse_var(parser *p, int pos, const char *name)
{
	sched_node *node;
	int v = find_var(p, name, (int)strlen(name));

	if (v < 0 && sched_tensor_find(p->graph, name) >= 0)
		return parse_error(p, SCHED_EMEANING, pos,
				   "'%s' is a tensor: access it as %s[...]", name, name);
	if (v < 0)
		return parse_error(p, SCHED_EMEANING, pos,
				   "unknown variable '%s'", name);
	if (!(node = node_new(p, SCHED_NODE_VAR, pos, 0)))
		return NULL;
	node->var = v;
	return node_finish(p, node);
}

static sched_node *parse_name(parser *p)
{
	int pos = p->tok.pos;
	char *name = tok_text(p);

	if (!name)
		return parse_error(p, SCHED_ENOMEM, pos, "out of memory");
	next(p);
	if (tok_is(p, "["))
		return parse_access(p, pos, name);
	if (tok_is(p, "("))
		return parse_call(p, pos, name);
	return parse_var(p, pos, name);
}

static sched_node *parse_primary(parser *p)
{
	sched_node *node;
	int pos = p->tok.pos;

	if (p->tok.kind == TOK_NUM) {
		if (!isfinite(p->tok.num)) /* 1e999: no double holds it */
			return parse_error(p, SCHED_ESYNTAX, pos,
					   "number '%.*s' is out of range",
					   p->tok.len < 40 ? p->tok.len : 40, p->text + pos);
		if (!(node = node_new(p, SCHED_NODE_NUM, pos, 0)))
			return NULL;
		node->num = p->tok.num;
		next(p);
		return node_finish(p, node);
	}
	if (p->tok.kind == TOK_NAME)
		return parse_name(p);
	if (tok_is(p, "(")) {
		next(p);
		node = parse_expr(p);
		if (!node || !expect(p, ")"))
			return NULL;
		node->col = pos + 1;
		return node_finish(p, node);
	}
	return parse_error(p, SCHED_ESYNTAX, pos,
			   "expected a number, a name or '(' but found %s",
			   tok_describe(p));
}

static sched_node *parse_unary(parser *p)
{
	sched_node *node;
	int pos = p->tok.pos;
	enum sched_unop op;

	if (tok_is(p, "-"))
		op = SCHED_NEG;
	else if (tok_is(p, "!"))
		op = SCHED_NOT;
	else
		return parse_primary(p);
	next(p);
	if (!(node = node_new(p, SCHED_NODE_UNARY, pos, 1)))
		return NULL;
	node->op = op;
	if (p->depth++ == MAX_DEPTH)
		return parse_error(p, SCHED_ESYNTAX, pos,
				   "expression nested more than %s deep", "200");
	if (!(node->args[0] = parse_unary(p)))
		return NULL;
	p->depth--;
	return node_finish(p, node);
}

/* One level of binary operators, left-associative. */
typedef struct binary_level {
	const char *puncts[5];
	enum sched_binop ops[5];
} binary_level;

static const binary_level levels[] = {
	{{"||"}, {SCHED_OR}},
	{{"&&"}, {SCHED_AND}},
	{{"==", "!="}, {SCHED_EQ, SCHED_NE}},
	{{"<=", ">=", "<", ">"}, {SCHED_LE, SCHED_GE, SCHED_LT, SCHED_GT}},
	{{"+", "-"}, {SCHED_ADD, SCHED_SUB}},
	{{"*", "/", "%"}, {SCHED_MUL, SCHED_DIV, SCHED_MOD}},
};

#define LEVEL_COUNT ((int)(sizeof(levels) / sizeof(levels[0])))

static int level_match(const parser *p, int level)
{
	for (int i = 0; levels[level].puncts[i]; i++)
		if (tok_is(p, levels[level].puncts[i]))
			return i;
	return -1;
}

static sched_node *parse_level(parser *p, int level)
{
	sched_node *left, *node;
	int m;

	if (level == LEVEL_COUNT)
		return parse_unary(p);
	left = parse_level(p, level + 1);
	while (left && (m = level_match(p, level)) >= 0) {
		next(p);
		if (!(node = node_new(p, SCHED_NODE_BINARY, left->col - 1, 2)))
			return NULL;
		node->op = levels[level].ops[m];
		node->args[0] = left;
		if (!(node->args[1] = parse_level(p, level + 1)))
			return NULL;
		left = node_finish(p, node);
	}
	return left;
}

static sched_node *parse_expr(parser *p)
{
	sched_node *node;

	if (p->depth == MAX_DEPTH)
		return parse_error(p, SCHED_ESYNTAX, p->tok.pos,
				   "expression nested more than %s deep", "200");
	p->depth++;
	node = parse_level(p, 0);
	p->depth--;
	return node;
}

/* Adds variable named by the current token; "what" names its kind. */
static bool add_var(parser *p, bool reduction)
{
	char *name = tok_text(p);
	sched_var *var = &p->vars[p->nvars];

	if (!name)
		return parse_error(p, SCHED_ENOMEM, p->tok.pos, "out of memory"), false;
	if (sched_name_is_reserved(name))
		return parse_error(p, SCHED_ESYNTAX, p->tok.pos,
				   "'%s' is a reserved word and cannot name a variable",
				   name), false;
	if (find_var(p, name, p->tok.len) >= 0)
		return parse_error(p, SCHED_EMEANING, p->tok.pos,
				   "variable '%s' is used twice", name), false;
	if (p->nvars == MAX_VARS)
		return parse_error(p, SCHED_EMEANING, p->tok.pos,
				   "too many variables at '%s'", name), false;
	*var = (sched_var){.name = name, .col = p->tok.pos + 1,
			   .reduction = reduction};
	p->nvars++;
	next(p);
	return true;
}

static bool parse_target(parser *p)
{
	sched_tensor *t;
	char *name;

	if (p->tok.kind != TOK_NAME)
		return parse_error(p, SCHED_ESYNTAX, p->tok.pos,
				   "expected the target tensor but found %s",
				   tok_describe(p)), false;
	if (!(name = tok_text(p)))
		return false;
	if ((p->op->target = sched_tensor_find(p->graph, name)) < 0)
		return parse_error(p, SCHED_EMEANING, p->tok.pos,
				   "unknown tensor '%s'", name), false;
	p->op->target_col = p->tok.pos + 1;
	next(p);
	if (!expect(p, "["))
		return false;
	if (!tok_is(p, "]"))
		do {
			if (p->tok.kind != TOK_NAME)
				return parse_error(p, SCHED_ESYNTAX, p->tok.pos,
						   "expected a variable but found %s",
						   tok_describe(p)), false;
			if (!add_var(p, false))
				return false;
		} while (tok_is(p, ",") && (next(p), true));
	if (!expect(p, "]"))
		return false;
	t = &p->graph->tensors[p->op->target];
	if (p->nvars != t->rank)
		return parse_error(p, SCHED_EMEANING, p->op->target_col - 1,
				   "target '%s' has %d dims, given %d variable%s",
				   t->name, t->rank, p->nvars,
				   p->nvars == 1 ? "" : "s"), false;
	return expect(p, "=");
}

/* Reads a possibly negative integer literal. */
static bool parse_int(parser *p, int64_t *value)
{
	bool negative = tok_is(p, "-");

	if (negative)
		next(p);
	if (p->tok.kind != TOK_NUM || !p->tok.is_int)
		return parse_error(p, SCHED_ESYNTAX, p->tok.pos,
				   "expected an integer but found %s",
				   tok_describe(p)), false;
	if (p->tok.num > INT32_MAX)
		return parse_error(p, SCHED_EMEANING, p->tok.pos,
				   "range bound %s is above 2^31 - 1",
				   tok_describe(p)), false;
	*value = (int64_t)p->tok.num * (negative ? -1 : 1);
	next(p);
	return true;
}

static bool parse_rvar_range(parser *p)
{
	sched_var *var = &p->vars[p->nvars - 1];
	int pos = p->tok.pos;

	if (tok_is(p, "<")) {
		next(p);
		var->lo = 0;
		if (!parse_int(p, &var->hi))
			return false;
	} else if (tok_is_name(p, "in")) {
		next(p);
		if (!parse_int(p, &var->lo) || !expect(p, ":") ||
		    !parse_int(p, &var->hi))
			return false;
	} else {
		var->inferred = true;
		return true;
	}
	if (var->hi <= var->lo)
		return parse_error(p, SCHED_EMEANING, pos,
				   "reduction variable '%s' has an empty range",
				   var->name), false;
	return true;
}

static bool starts_primary(const token *tok, const char *text)
{
	return tok->kind == TOK_NAME || tok->kind == TOK_NUM ||
	       (tok->kind == TOK_PUNCT && text[tok->pos] == '(');
}

static bool starts_expr(const parser *p)
{
	return starts_primary(&p->tok, p->text) || tok_is(p, "-") || tok_is(p, "!");
}

/* With the current token on '(', the token after its closing ')'. */
static token token_after_parens(const parser *p)
{
	parser probe = *p;
	int depth = 0;

	probe.err = NULL;
	do {
		if (tok_is(&probe, "(") || tok_is(&probe, "["))
			depth++;
		else if (tok_is(&probe, ")") || tok_is(&probe, "]"))
			depth--;
		next(&probe);
	} while (depth > 0 && probe.tok.kind != TOK_END);
	return probe.tok;
}

/* How "max(...)" or "min(...)" at the current token is meant: a reducer
 * when an operand follows the parentheses, a call when an operator or the
 * end does, and maybe either before '-' or '!'. */
enum reading { READ_CALL, READ_REDUCER, READ_EITHER };

static enum reading read_max_min(const parser *p)
{
	parser probe = *p;
	token after;

	probe.err = NULL;
	next(&probe);
	if (!tok_is(&probe, "("))
		return READ_CALL;
	after = token_after_parens(&probe);
	if (starts_primary(&after, p->text))
		return READ_REDUCER;
	if (after.kind == TOK_PUNCT && strchr("-!", p->text[after.pos]) &&
	    after.len == 1)
		return READ_EITHER;
	return READ_CALL;
}

static bool parse_rvars(parser *p)
{
	if (!expect(p, "("))
		return false;
	do {
		if (p->tok.kind != TOK_NAME)
			return parse_error(p, SCHED_ESYNTAX, p->tok.pos,
					   "expected a reduction variable but found %s",
					   tok_describe(p)), false;
		if (!add_var(p, true) || !parse_rvar_range(p))
			return false;
	} while (tok_is(p, ",") && (next(p), true));
	if (!expect(p, ")"))
		return false;
	if (!starts_expr(p))
		return parse_error(p, SCHED_ESYNTAX, p->tok.pos,
				   "expected the reduced expression but found %s",
				   tok_describe(p)), false;
	return true;
}

/* Parses "reducer(rvars)" if the body starts with one. Where max or min
 * could be either (an operand after the parentheses starting with '-' or
 * '!'), they are a reducer when the parentheses hold only fresh variables;
 * otherwise the parser backs up and reads a call. */
static bool parse_reducer(parser *p)
{
	parser saved = *p;
	enum reading reading = READ_REDUCER;
	enum sched_reducer r;

	for (r = SCHED_RED_SUM; r <= SCHED_RED_PROD; r++)
		if (tok_is_name(p, reducer_names[r]))
			break;
	if (r > SCHED_RED_PROD)
		return true;
	if (r == SCHED_RED_MAX || r == SCHED_RED_MIN)
		reading = read_max_min(p);
	if (reading == READ_CALL)
		return true;
	if (reading == READ_EITHER)
		p->err = NULL;
	next(p);
	if (parse_rvars(p)) {
		p->err = saved.err;
		p->op->reducer = r;
		return true;
	}
	if (reading == READ_EITHER)
		return *p = saved, true;
	return false;
}

/* Evaluates a subtree free of variables and accesses with integer
 * arithmetic (floor division and remainder). False if it is not one. */
bool sched_node_int_const(const sched_node *node, int64_t *value)
{
	int64_t a, b;

	switch (node->kind) {
	case SCHED_NODE_NUM:
		*value = (int64_t)node->num;
		return node->num == floor(node->num) && fabs(node->num) <= MAX_CONSTANT;
	case SCHED_NODE_UNARY:
		if (node->op != SCHED_NEG || !sched_node_int_const(node->args[0], &a))
			return false;
		*value = -a;
		return true;
	case SCHED_NODE_BINARY:
		if (!sched_node_int_const(node->args[0], &a) ||
		    !sched_node_int_const(node->args[1], &b))
			return false;
		return sched_int_binop(node->op, a, b, value);
	default:
		return false;
	}
}

/* Integer arithmetic of indices; false on overflow past MAX_CONSTANT or a
 * division by a non-positive number. */
bool sched_int_binop(int op, int64_t a, int64_t b, int64_t *value)
{
	switch (op) {
	case SCHED_ADD:
		*value = a + b;
		return llabs(*value) <= MAX_CONSTANT;
	case SCHED_SUB:
		*value = a - b;
		return llabs(*value) <= MAX_CONSTANT;
	case SCHED_MUL:
		return !__builtin_mul_overflow(a, b, value) &&
		       llabs(*value) <= MAX_CONSTANT;
	case SCHED_DIV:
		if (b <= 0)
			return false;
		*value = a >= 0 ? a / b : -((-a + b - 1) / b);
		return true;
	case SCHED_MOD:
		if (b <= 0)
			return false;
		*value = ((a % b) + b) % b;
		return true;
	default:
		return false;
	}
}

static bool has_var(const sched_node *node)
{
	if (node->kind == SCHED_NODE_VAR)
		return true;
	for (int i = 0; i < node->nargs; i++)
		if (has_var(node->args[i]))
			return true;
	return false;
}

static const char *product_problem(const sched_node *node);

/* Why "node" is not a quasi-affine index, or NULL if it is one. */
const char *sched_index_problem(const sched_node *node)
{
	int64_t c;

	switch (node->kind) {
	case SCHED_NODE_NUM:
		if (node->num != floor(node->num))
			return "has a non-integer constant";
		return sched_node_int_const(node, &c) ? NULL
						      : "has a constant larger than 2^40";
	case SCHED_NODE_VAR:
		return NULL;
	case SCHED_NODE_ACCESS:
		return "reads a tensor";
	case SCHED_NODE_CALL:
		return "calls a function";
	case SCHED_NODE_UNARY:
		return node->op == SCHED_NEG ? sched_index_problem(node->args[0])
					     : "uses '!'";
	case SCHED_NODE_BINARY:
		break;
	}
	switch (node->op) {
	case SCHED_ADD:
	case SCHED_SUB: {
		const char *why = sched_index_problem(node->args[0]);

		return why ? why : sched_index_problem(node->args[1]);
	}
	case SCHED_MUL:
		return product_problem(node);
	case SCHED_DIV:
	case SCHED_MOD:
		if (!sched_node_int_const(node->args[1], &c) || c <= 0)
			return "divides by something other than a positive integer constant";
		return sched_index_problem(node->args[0]);
	default:
		return "uses a comparison or logic";
	}
}

/* A product is affine when one factor is an integer constant and the
 * other affine. */
static const char *product_problem(const sched_node *node)
{
	const sched_node *factor = node->args[0], *other = node->args[1];
	const char *why;
	int64_t c;

	if (has_var(factor) && has_var(other))
		return "multiplies two variables";
	if (has_var(factor)) {
		factor = node->args[1];
		other = node->args[0];
	}
	if (!sched_node_int_const(factor, &c) && (why = sched_index_problem(factor)))
		return why;
	if (!sched_node_int_const(factor, &c))
		return "has a constant larger than 2^40";
	if ((why = sched_index_problem(other)))
		return why;
	if (!has_var(other) && !sched_node_int_const(node, &c))
		return "has a constant larger than 2^40";
	return NULL;
}

static void check_indices(const sched_node *access, void *user)
{
	parser *p = user;

	for (int i = 0; i < access->nargs && p->rc == 0; i++) {
		const sched_node *index = access->args[i];
		const char *why = sched_index_problem(index);
		char excerpt[SCHED_EXCERPT];

		if (!why)
			continue;
		parse_error(p, SCHED_EMEANING, index->col - 1,
			    "index '%s' of '%s' is not affine: it %s",
			    sched_node_excerpt(index, p->text, excerpt),
			    p->graph->tensors[access->tensor].name, why);
	}
}

typedef struct range_search {
	const sched_graph *graph;
	int var;
	int64_t size;
	int tensor;
	int conflict;
} range_search;

/* Looks for dims indexed by variable "var" alone. */
static void find_var_dims(const sched_node *access, void *user)
{
	range_search *s = user;
	const sched_tensor *t = &s->graph->tensors[access->tensor];

	for (int i = 0; i < access->nargs; i++) {
		const sched_node *index = access->args[i];

		if (index->kind != SCHED_NODE_VAR || index->var != s->var)
			continue;
		if (s->tensor < 0) {
			s->tensor = access->tensor;
			s->size = t->shape[i];
		} else if (t->shape[i] != s->size && s->conflict < 0) {
			s->conflict = access->tensor;
		}
	}
}

static bool infer_range(parser *p, int v)
{
	sched_var *var = &p->vars[v];
	range_search s = {p->graph, v, 0, -1, -1};

	sched_node_each_access(p->op->body, find_var_dims, &s);
	if (s.tensor < 0)
		return parse_error(p, SCHED_EMEANING, var->col - 1,
				   "cannot infer the range of reduction variable "
				   "'%s': no access indexes a dim with it alone; "
				   "write it as 'var < N'", var->name), false;
	if (s.conflict >= 0)
		return parse_error(p, SCHED_EMEANING, var->col - 1,
				   "reduction variable '%s' indexes dims of "
				   "different sizes in '%s' and '%s'", var->name,
				   p->graph->tensors[s.tensor].name,
				   p->graph->tensors[s.conflict].name), false;
	var->lo = 0;
	var->hi = s.size;
	return true;
}

/* Gives the target variables their ranges and infers the reducer's. */
static bool set_ranges(parser *p)
{
	const sched_tensor *t = &p->graph->tensors[p->op->target];

	for (int v = 0; v < p->nvars; v++) {
		if (!p->vars[v].reduction) {
			p->vars[v].lo = 0;
			p->vars[v].hi = t->shape[v];
		} else if (p->vars[v].inferred && !infer_range(p, v)) {
			return false;
		}
	}
	return true;
}

static bool store_vars(parser *p)
{
	sched_op *op = p->op;

	op->nvars = p->nvars;
	op->ntarget_vars = p->graph->tensors[op->target].rank;
	op->vars = sched_arena_alloc(&p->graph->arena,
				     (p->nvars + 1) * sizeof(sched_var));
	if (!op->vars)
		return parse_error(p, SCHED_ENOMEM, 0, "out of memory"), false;
	memcpy(op->vars, p->vars, p->nvars * sizeof(sched_var));
	return true;
}

int sched_op_parse(sched_graph *graph, int index, const char *text,
		   sched_error *err)
{
	parser p = {.graph = graph, .op = &graph->ops[index], .text = text,
		    .err = err};

	p.op->index = index;
	p.op->text = text;
	next(&p);
	if (!parse_target(&p) || !parse_reducer(&p))
		return p.rc;
	if (!(p.op->body = parse_expr(&p)))
		return p.rc;
	if (p.tok.kind != TOK_END)
		return parse_error(&p, SCHED_ESYNTAX, p.tok.pos,
				   "unexpected %s after the expression",
				   tok_describe(&p)), p.rc;
	sched_node_each_access(p.op->body, check_indices, &p);
	if (p.rc == 0 && set_ranges(&p))
		store_vars(&p);
	return p.rc;
}

bool sched_node_mentions(const sched_node *node, int var)
{
	if (node->kind == SCHED_NODE_VAR)
		return node->var == var;
	for (int i = 0; i < node->nargs; i++)
		if (sched_node_mentions(node->args[i], var))
			return true;
	return false;
}

bool sched_node_same(const sched_node *a, const sched_node *b)
{
	if (a == b)
		return true;
	if (a->kind != b->kind || a->num != b->num || a->var != b->var ||
	    a->tensor != b->tensor || a->op != b->op || a->nargs != b->nargs)
		return false;
	for (int i = 0; i < a->nargs; i++)
		if (!sched_node_same(a->args[i], b->args[i]))
			return false;
	return true;
}

void sched_node_each_access(const sched_node *node, sched_access_fn fn,
			    void *user)
{
	if (node->kind == SCHED_NODE_ACCESS)
		fn(node, user);
	for (int i = 0; i < node->nargs; i++)
		sched_node_each_access(node->args[i], fn, user);
}
