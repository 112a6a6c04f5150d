/*
 * random_graph.c: random valid graph.json v1 texts for property tests.
 *
 * A graph is grown op by op. Each op comes from a template (elementwise
 * map, reduction, matmul-like contraction, padded window, quasi-affine
 * reshape, slice, integer op) around a "primary" tensor: preferably an
 * intermediate nobody has read yet, so that ops chain, else an existing or
 * a new input. Around the primary access the template grows a random
 * expression whose leaves read other tensors (broadcasts, slices, scalars,
 * guarded shifted windows, any tensor through a random quasi-affine index),
 * variables and constants.
 *
 * Validity by construction:
 * - every index is built with its range over the op's box in view, so it
 *   stays in [0, size); shifted accesses that may leave the tensor sit in
 *   the branch of a select whose affine guard keeps them inside;
 * - a reduction variable's range is left to inference only when the
 *   variable indexes, alone, dims of one size equal to its range;
 * - intermediates that no later op reads become outputs.
 *
 * Tame values: every expression carries an interval that bounds its value
 * (inputs are in [-1, 1]). Reads of tensors whose bound exceeds 4 are
 * scaled down, exp and products see tamed arguments, log, sqrt, rsqrt and
 * fractional pow only see arguments positive by construction, divisions are
 * by constants or by expressions >= 1, prod folds values near 1 over at
 * most 4 points per variable. i32 tensors only hold integers computed
 * exactly from i32 tensors, variables and integer constants, or from
 * comparisons of inputs.
 */
#define _GNU_SOURCE
#include "random_graph.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSORS 256
#define MAX_OPS 6
#define MAX_RANK 4
#define MAX_VARS 8
#define MAX_DIM 12
#define MAX_WORK 50000
#define READ_LIMIT 4.0    /* reads of larger tensors are scaled to this */
#define VALUE_LIMIT 1e4   /* bound on stored float values (f16 safe) */
#define INT_LIMIT 1000.0  /* bound on i32 operands before clamping */

enum dtype { F32, F16, BF16, I32 };
static const char *const dtype_names[] = {"f32", "f16", "bf16", "i32"};

enum reducer { RED_NONE, RED_SUM, RED_MAX, RED_MIN, RED_PROD };
static const char *const reducer_names[] = {"", "sum", "max", "min", "prod"};

/* Precedence levels of the op grammar, lowest first. */
enum { P_OR = 1, P_AND, P_EQ, P_REL, P_ADD, P_MUL, P_UNARY, P_ATOM };

typedef struct tensor {
	char name[24];
	int rank;
	int shape[MAX_RANK];
	int dtype;
	bool input;
	bool read;
	bool output;
	double lo, hi; /* bounds on its values */
} tensor;

typedef struct var {
	const char *name;
	int lo, hi; /* lo <= var < hi */
	/* 0: never alone in an index; D > 0: alone only in dims of size D;
	 * -1: alone in dims of different sizes. */
	int alone;
} var;

/* An expression: its text, bounds on its value, its precedence level. */
typedef struct ex {
	char *s;
	double lo, hi;
	int prec;
} ex;

static const char *const var_pool[] = {
	"i", "j", "k", "l", "m", "n", "p", "q", "r", "s", "u",
	"v", "h", "w", "c", "row", "col", "b_1", "z_", "kk", "idx",
};
#define NVAR_POOL ((int)(sizeof(var_pool) / sizeof(var_pool[0])))

typedef struct gen {
	uint64_t state;
	tensor t[MAX_TENSORS];
	int nt;
	char *ops[MAX_OPS];
	int nops;
	int serial;
	/* The op being built: its variables, the target's first. */
	const char *names[NVAR_POOL];
	var v[MAX_VARS];
	int nv, ntv;
	/* Accesses in the op so far, and the number after which leaves are
	 * variables and numbers only: the bounds check costs per access. */
	int naccess, max_access;
} gen;

/* ---- randomness ---- */

static uint64_t next_u64(gen *g)
{
	uint64_t z = (g->state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static int rnd(gen *g, int n)
{
	return n <= 1 ? 0 : (int)(next_u64(g) % (uint64_t)n);
}

/* Uniform in [lo, hi]. */
static int between(gen *g, int lo, int hi)
{
	return hi <= lo ? lo : lo + rnd(g, hi - lo + 1);
}

static bool chance(gen *g, int percent)
{
	return rnd(g, 100) < percent;
}

static void shuffle(gen *g, int *a, int n)
{
	for (int i = n - 1; i > 0; i--) {
		int j = rnd(g, i + 1), x = a[i];

		a[i] = a[j];
		a[j] = x;
	}
}

/* A rank in 0..4, mostly 1 to 3: the bounds check costs more with rank. */
static int rand_rank(gen *g)
{
	int r = rnd(g, 100);

	return r < 10 ? 0 : r < 35 ? 1 : r < 70 ? 2 : r < 92 ? 3 : 4;
}

/* A dim size in 1..12, mostly small. */
static int rand_dim(gen *g)
{
	int r = rnd(g, 100);

	return r < 12 ? 1 : r < 82 ? between(g, 2, 8) : between(g, 9, MAX_DIM);
}

/* ---- strings and expressions ---- */

__attribute__((format(printf, 1, 2))) static char *sfmt(const char *f, ...)
{
	va_list ap;
	char *s;

	va_start(ap, f);
	if (vasprintf(&s, f, ap) < 0)
		abort();
	va_end(ap);
	return s;
}

/* "a" sep "b", freeing both; an empty "a" gives "b". */
static char *cat(char *a, const char *sep, char *b)
{
	char *s = *a ? sfmt("%s%s%s", a, sep, b) : sfmt("%s", b);

	free(a);
	free(b);
	return s;
}

/* "text" followed by "+ k" or "- k" (nothing for 0); frees text. */
static char *plus_const(char *text, long k)
{
	char *s;

	if (k == 0)
		return text;
	s = sfmt("%s %c %ld", text, k > 0 ? '+' : '-', labs(k));
	free(text);
	return s;
}

static ex mk(char *s, double lo, double hi, int prec)
{
	return (ex){s, fmin(lo, hi), fmax(lo, hi), prec};
}

static ex dup(ex e)
{
	return mk(sfmt("%s", e.s), e.lo, e.hi, e.prec);
}

static double mag(ex e)
{
	return fmax(fabs(e.lo), fabs(e.hi));
}

/* The least |value|. */
static double mag_lo(ex e)
{
	return e.lo >= 0 ? e.lo : e.hi <= 0 ? -e.hi : 0;
}

/* The text of "e" as an operand at level "prec": parenthesized if lower. */
static char *take(ex e, int prec)
{
	char *s;

	if (e.prec >= prec)
		return e.s;
	s = sfmt("(%s)", e.s);
	free(e.s);
	return s;
}

/* a op b, left associative at level "prec". */
static ex binop(ex a, const char *op, ex b, int prec, double lo, double hi)
{
	char *l = take(a, prec), *r = take(b, prec + 1);
	ex e = mk(sfmt("%s %s %s", l, op, r), lo, hi, prec);

	free(l);
	free(r);
	return e;
}

static ex call1(const char *f, ex a, double lo, double hi)
{
	ex e = mk(sfmt("%s(%s)", f, a.s), lo, hi, P_ATOM);

	free(a.s);
	return e;
}

static ex call2(const char *f, ex a, ex b, double lo, double hi)
{
	ex e = mk(sfmt("%s(%s, %s)", f, a.s, b.s), lo, hi, P_ATOM);

	free(a.s);
	free(b.s);
	return e;
}

static ex call3(const char *f, ex a, ex b, ex c, double lo, double hi)
{
	ex e = mk(sfmt("%s(%s, %s, %s)", f, a.s, b.s, c.s), lo, hi, P_ATOM);

	free(a.s);
	free(b.s);
	free(c.s);
	return e;
}

static ex neg(ex a)
{
	ex e;

	if (a.prec < P_UNARY || a.s[0] == '-')
		e = mk(sfmt("-(%s)", a.s), -a.hi, -a.lo, P_UNARY);
	else
		e = mk(sfmt("-%s", a.s), -a.hi, -a.lo, P_UNARY);
	free(a.s);
	return e;
}

static ex not_(ex a)
{
	char *s = take(a, P_UNARY);
	ex e = mk(sfmt("!%s", s), 0, 1, P_UNARY);

	free(s);
	return e;
}

static ex inum(long v)
{
	return v < 0 ? neg(mk(sfmt("%ld", -v), -v, -v, P_ATOM))
		     : mk(sfmt("%ld", v), v, v, P_ATOM);
}

/* A number written in one of the forms of the grammar. */
static ex const_leaf(gen *g)
{
	static const struct {
		const char *text;
		double value;
	} table[] = {
		{"0.5", 0.5}, {"2", 2}, {"1.5", 1.5}, {".25", 0.25},
		{"1e-1", 0.1}, {"3", 3}, {"0.125", 0.125}, {"2.5E-1", 0.25},
		{"1", 1}, {"0", 0}, {"0.75", 0.75}, {"1.25e+0", 1.25},
	};
	int i = rnd(g, (int)(sizeof(table) / sizeof(table[0])));
	ex e = mk(sfmt("%s", table[i].text), table[i].value, table[i].value,
		  P_ATOM);

	return chance(g, 20) ? neg(e) : e;
}

static ex pow2_num(int k)
{
	double v = ldexp(1, k);

	return mk(sfmt("%.17g", v), v, v, P_ATOM);
}

/* Scales "e" by a power of two so that |e| <= limit. */
static ex scale_to(gen *g, ex e, double limit)
{
	int k = 0;

	while (mag(e) * ldexp(1, -k) > limit)
		k++;
	if (k == 0)
		return e;
	if (chance(g, 50))
		return binop(e, "*", pow2_num(-k), P_MUL, e.lo * ldexp(1, -k),
			     e.hi * ldexp(1, -k));
	return binop(e, "/", pow2_num(k), P_MUL, e.lo * ldexp(1, -k),
		     e.hi * ldexp(1, -k));
}

/* "e" itself if |e| <= limit, else squashed by tanh or scaled. */
static ex tame(gen *g, ex e, double limit)
{
	if (mag(e) <= limit)
		return e;
	if (limit >= 1 && chance(g, 40))
		return call1("tanh", e, tanh(e.lo), tanh(e.hi));
	return scale_to(g, e, limit);
}

/* ---- tensors and variables ---- */

static int new_tensor(gen *g, bool input, int rank, const int *shape, int dtype)
{
	static const char *const inputs[] = {"x", "w", "a", "b", "g", "in_",
					     "sum_", "exp_", "x_in"};
	static const char *const computed[] = {"t", "y", "h", "mid", "out_",
					       "max_", "prod_", "tmp"};
	tensor *t;

	if (g->nt == MAX_TENSORS)
		abort();
	t = &g->t[g->nt];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s%d",
		 input ? inputs[rnd(g, 9)] : computed[rnd(g, 8)], g->serial++);
	t->rank = rank;
	if (rank)
		memcpy(t->shape, shape, rank * sizeof(int));
	t->dtype = dtype;
	t->input = input;
	t->lo = -1;
	t->hi = 1;
	return g->nt++;
}

static int float_dtype(gen *g)
{
	int r = rnd(g, 100);

	return r < 70 ? F32 : r < 85 ? F16 : BF16;
}

/* Inputs: mostly f32; i32 inputs hold -1, 0 or 1. */
static int input_dtype(gen *g)
{
	return chance(g, 6) ? I32 : float_dtype(g);
}

static int new_input(gen *g, int rank, const int *shape, int dtype)
{
	return new_tensor(g, true, rank, shape, dtype);
}

static int64_t tensor_size(const tensor *t)
{
	int64_t n = 1;

	for (int d = 0; d < t->rank; d++)
		n *= t->shape[d];
	return n;
}

/* An existing tensor to read (i32 only if int_only), preferring
 * intermediates nobody reads yet; -1 if none. */
static int pick_existing(gen *g, bool int_only)
{
	int cand[MAX_TENSORS], n = 0;

	for (int t = 0; t < g->nt; t++)
		if (!g->t[t].input && !g->t[t].read &&
		    (!int_only || g->t[t].dtype == I32))
			cand[n++] = t;
	if (n && chance(g, 70))
		return cand[rnd(g, n)];
	n = 0;
	for (int t = 0; t < g->nt; t++)
		if (!int_only || g->t[t].dtype == I32)
			cand[n++] = t;
	return n ? cand[rnd(g, n)] : -1;
}

/* The tensor an op is built around: an unread intermediate, an existing
 * tensor or a new input, of rank in [min_rank, max_rank]. */
static int pick_primary(gen *g, int min_rank, int max_rank, bool int_mode)
{
	int cand[MAX_TENSORS], n = 0, shape[MAX_RANK], rank;

	for (int t = 0; t < g->nt; t++)
		if (!g->t[t].input && !g->t[t].read && g->t[t].rank >= min_rank &&
		    g->t[t].rank <= max_rank && (g->t[t].dtype == I32) == int_mode)
			cand[n++] = t;
	if (n && chance(g, 80))
		return cand[rnd(g, n)];
	n = 0;
	for (int t = 0; t < g->nt; t++)
		if (g->t[t].rank >= min_rank && g->t[t].rank <= max_rank &&
		    (g->t[t].dtype == I32) == int_mode)
			cand[n++] = t;
	if (n && chance(g, 25))
		return cand[rnd(g, n)];
	do
		rank = rand_rank(g);
	while (rank < min_rank || rank > max_rank);
	for (int d = 0; d < rank; d++)
		shape[d] = rand_dim(g);
	return new_input(g, rank, shape, int_mode ? I32 : input_dtype(g));
}

static void begin_op(gen *g)
{
	int order[NVAR_POOL];

	for (int i = 0; i < NVAR_POOL; i++)
		order[i] = i;
	shuffle(g, order, NVAR_POOL);
	for (int i = 0; i < NVAR_POOL; i++)
		g->names[i] = var_pool[order[i]];
	g->nv = g->ntv = 0;
	g->naccess = 0;
	g->max_access = between(g, 2, 4);
}

static int add_var(gen *g, int lo, int hi)
{
	g->v[g->nv] = (var){g->names[g->nv], lo, hi, 0};
	return g->nv++;
}

static long op_work(const gen *g)
{
	long w = 1;

	for (int i = 0; i < g->nv; i++)
		w *= g->v[i].hi - g->v[i].lo;
	return w;
}

/* Variable "vi" indexes, alone, a dim of size D. */
static char *alone(gen *g, int vi, int D)
{
	var *v = &g->v[vi];

	v->alone = v->alone == 0 || v->alone == D ? D : -1;
	return sfmt("%s", v->name);
}

/* ---- indices ---- */

static long floor_div(long a, long q)
{
	return a >= 0 ? a / q : -((-a + q - 1) / q);
}

/* A random quasi-affine index in [0, D): one or two variables with
 * coefficients, then a shift into range, a remainder or a floor division. */
static char *affine_index(gen *g, int D)
{
	static const int coefs[] = {1, 1, 2, 3, -1, -2};
	int vars[2], n = g->nv >= 2 && chance(g, 40) ? 2 : 1, last_coef = 0;
	long tm = 0, tM = 0, k;
	char *text = sfmt("%s", "");
	int mode;

	vars[0] = rnd(g, g->nv);
	do
		vars[1] = rnd(g, g->nv);
	while (n == 2 && vars[1] == vars[0]);
	for (int t = 0; t < n; t++) {
		const var *v = &g->v[vars[t]];
		int c = coefs[rnd(g, 6)], a = abs(c);
		char *term;

		last_coef = c;
		tm += c > 0 ? (long)c * v->lo : (long)c * (v->hi - 1);
		tM += c > 0 ? (long)c * (v->hi - 1) : (long)c * v->lo;
		if (a == 1)
			term = sfmt("%s", v->name);
		else if (chance(g, 50))
			term = sfmt("%d * %s", a, v->name);
		else
			term = sfmt("%s * %d", v->name, a);
		if (t == 0)
			text = cat(text, "", c < 0 ? cat(sfmt("-"), "", term) : term);
		else
			text = cat(text, c < 0 ? " - " : " + ", term);
	}
	mode = rnd(g, 3);
	if (tM - tm + 1 > D && mode == 0)
		mode = 1 + rnd(g, 2);
	if (D < 2 && mode == 2) /* a floor division across 0 spans 2 values */
		mode = 1;
	if (mode == 0) {
		k = between(g, (int)-tm, (int)(D - 1 - tM));
		if (n == 1 && last_coef == 1 && k == 0) { /* the variable alone */
			free(text);
			return alone(g, vars[0], D);
		}
		return plus_const(text, k);
	}
	k = between(g, -3, 3);
	text = plus_const(text, k);
	if (strchr(text, '+') || strstr(text, " - ")) {
		char *s = sfmt("(%s)", text);

		free(text);
		text = s;
	}
	if (mode == 1) {
		int q = between(g, D < 2 || chance(g, 10) ? 1 : 2, D);
		char *s = sfmt("%s %% %d", text, q);

		free(text);
		return plus_const(s, between(g, 0, D - q));
	} else {
		long a = tm + k, b = tM + k, q = 2;
		char *s;

		while (floor_div(b, q) - floor_div(a, q) + 1 > D)
			q++;
		if (chance(g, 30) && floor_div(b, q + 1) - floor_div(a, q + 1) + 1 <= D)
			q++;
		s = sfmt("%s / %ld", text, q);
		free(text);
		return plus_const(s, between(g, (int)-floor_div(a, q),
					     (int)(D - 1 - floor_div(b, q))));
	}
}

/* An index in [0, D) over the op's variables. */
static char *gen_index(gen *g, int D)
{
	int r = rnd(g, 100), cand[MAX_VARS], n = 0, exact[MAX_VARS], ne = 0;

	if (g->nv == 0 || (r >= 55 && r < 62)) {
		int c = rnd(g, D), k = between(g, 1, 3);

		/* a constant, sometimes folded from an expression */
		return chance(g, 80) ? sfmt("%d", c) : sfmt("%d - %d", c + k, k);
	}
	for (int i = 0; i < g->nv; i++) {
		if (g->v[i].hi - g->v[i].lo <= D)
			cand[n++] = i;
		if (g->v[i].lo == 0 && g->v[i].hi == D)
			exact[ne++] = i;
	}
	if (r < 55 && ne && chance(g, 70))
		return alone(g, exact[rnd(g, ne)], D);
	if (r < 55 && n) {
		int vi = cand[rnd(g, n)];
		const var *v = &g->v[vi];
		int c = between(g, -v->lo, D - v->hi);

		if (c == 0)
			return alone(g, vi, D);
		return plus_const(sfmt("%s", v->name), c);
	}
	if (r >= 62 && r < 70 && n) {
		/* Reversed: c - v. */
		const var *v = &g->v[cand[rnd(g, n)]];

		return sfmt("%d - %s", between(g, v->hi - 1, D - 1 + v->lo), v->name);
	}
	return affine_index(g, D);
}

/* "name[i0, i1, ...]" with the given index texts (freed). */
static char *access_text(const tensor *t, char **idx)
{
	char *s = sfmt("%s", "");

	for (int d = 0; d < t->rank; d++)
		s = cat(s, ", ", idx[d]);
	{
		char *a = sfmt("%s[%s]", t->name, s);

		free(s);
		return a;
	}
}

/* An access of tensor "t" with the given indices: marks it read; in float
 * ops (limit > 0) scales it down if it can be large. */
static ex read_with(gen *g, int t, char **idx, double limit)
{
	tensor *T = &g->t[t];
	ex e = mk(access_text(T, idx), T->lo, T->hi, P_ATOM);

	T->read = true;
	g->naccess++;
	return limit > 0 ? scale_to(g, e, limit) : e;
}

/* An access of tensor "t" through random in-bounds indices. */
static ex read_any(gen *g, int t, double limit)
{
	char *idx[MAX_RANK];

	for (int d = 0; d < g->t[t].rank; d++)
		idx[d] = gen_index(g, g->t[t].shape[d]);
	return read_with(g, t, idx, limit);
}

/* ---- leaves ---- */

/* A new input indexed by a subset of the variables, each alone: a
 * broadcast (a scalar if the subset is empty). */
static ex broadcast_leaf(gen *g, int dtype, double limit)
{
	int order[MAX_VARS], k, shape[MAX_RANK] = {0}, t;
	char *idx[MAX_RANK];

	for (int i = 0; i < g->nv; i++)
		order[i] = i;
	shuffle(g, order, g->nv);
	k = rnd(g, (g->nv < 3 ? g->nv : 3) + 1);
	for (int d = 0; d < k; d++)
		shape[d] = g->v[order[d]].hi;
	t = new_input(g, k, shape, dtype);
	for (int d = 0; d < k; d++)
		idx[d] = alone(g, order[d], shape[d]);
	return read_with(g, t, idx, limit);
}

/* A new, bigger input read at an offset or with a stride. */
static ex slice_leaf(gen *g)
{
	int order[MAX_VARS], k, shape[MAX_RANK] = {0}, t;
	char *idx[MAX_RANK];

	if (g->nv == 0)
		return broadcast_leaf(g, input_dtype(g), READ_LIMIT);
	for (int i = 0; i < g->nv; i++)
		order[i] = i;
	shuffle(g, order, g->nv);
	k = between(g, 1, g->nv < 3 ? g->nv : 3);
	for (int d = 0; d < k; d++) {
		const var *v = &g->v[order[d]];

		if (v->hi <= 6 && chance(g, 30)) {
			int top = 2 * (v->hi - 1);

			shape[d] = between(g, top + 1, top + 3 < MAX_DIM ? top + 3 : MAX_DIM);
			idx[d] = plus_const(sfmt(chance(g, 50) ? "2 * %s" : "%s * 2", v->name),
					    between(g, -2 * v->lo, shape[d] - 1 - top));
		} else {
			int c;

			shape[d] = between(g, v->hi, v->hi + 4 < MAX_DIM ? v->hi + 4 : MAX_DIM);
			c = between(g, -v->lo, shape[d] - v->hi);
			idx[d] = c ? plus_const(sfmt("%s", v->name), c)
				   : alone(g, order[d], shape[d]);
		}
	}
	t = new_input(g, k, shape, input_dtype(g));
	return read_with(g, t, idx, READ_LIMIT);
}

/* A new input of random shape through random indices. */
static ex random_input_leaf(gen *g)
{
	int rank = between(g, 1, 3), shape[MAX_RANK] = {0};

	for (int d = 0; d < rank; d++)
		shape[d] = rand_dim(g);
	return read_any(g, new_input(g, rank, shape, input_dtype(g)), READ_LIMIT);
}

static ex scalar_leaf(gen *g)
{
	int cand[MAX_TENSORS], n = 0;
	char *none[1] = {NULL};

	for (int t = 0; t < g->nt; t++)
		if (g->t[t].rank == 0 && g->t[t].dtype != I32)
			cand[n++] = t;
	if (n && chance(g, 50))
		return read_with(g, cand[rnd(g, n)], none, READ_LIMIT);
	return read_with(g, new_input(g, 0, NULL, float_dtype(g)), none, READ_LIMIT);
}

/* A variable read as a number. */
static ex var_leaf(gen *g)
{
	const var *v = &g->v[rnd(g, g->nv)], *w = &g->v[rnd(g, g->nv)];
	double lo = v->lo, hi = v->hi - 1;

	switch (rnd(g, 6)) {
	case 0:
		return mk(sfmt("%s", v->name), lo, hi, P_ATOM);
	case 1:
		return mk(sfmt("%s * 0.25", v->name), lo / 4, hi / 4, P_MUL);
	case 2:
		return mk(sfmt("(%s + 1) * 0.125", v->name), (lo + 1) / 8,
			  (hi + 1) / 8, P_MUL);
	case 3:
		return mk(sfmt("%s %% 3", v->name), 0, 2, P_MUL);
	case 4:
		return mk(sfmt("%s / 4", v->name), lo / 4, hi / 4, P_MUL);
	default:
		return mk(sfmt("%s - %s", v->name, w->name), lo - (w->hi - 1),
			  hi - w->lo, P_ADD);
	}
}

/* A condition on variables only (affine, or quasi-affine with %). */
static ex var_cond(gen *g)
{
	const var *v = &g->v[rnd(g, g->nv)], *w = &g->v[rnd(g, g->nv)];
	int c = between(g, v->lo, v->hi);

	switch (rnd(g, 6)) {
	case 0:
		return mk(sfmt("%s < %d", v->name, c), 0, 1, P_REL);
	case 1:
		return mk(sfmt("%s >= %d", v->name, c), 0, 1, P_REL);
	case 2:
		return mk(sfmt("%s + %s > %d", v->name, w->name, c), 0, 1, P_REL);
	case 3:
		return mk(sfmt("%s %% 2 == 0", v->name), 0, 1, P_EQ);
	case 4:
		return mk(sfmt("%s != %d", v->name, c), 0, 1, P_EQ);
	default:
		return mk(sfmt("%s <= %s", v->name, w->name), 0, 1, P_REL);
	}
}

/* An input read compared with a constant: exact in any precision. */
static ex input_cond(gen *g)
{
	static const char *const ops[] = {">", "<", ">=", "<="};
	static const char *const consts[] = {"0", "0.5", "-0.25", ".125"};
	ex x = broadcast_leaf(g, float_dtype(g), 0);
	char *s = take(x, P_ADD);
	ex e = mk(sfmt("%s %s %s", s, ops[rnd(g, 4)], consts[rnd(g, 4)]), 0, 1,
		  P_REL);

	free(s);
	return e;
}

/* A condition for a select that needs no guard: on variables and inputs,
 * combined with && || !. */
static ex gen_cond(gen *g, int depth)
{
	int r = rnd(g, 100);

	if (depth > 0 && r < 25) {
		ex a = gen_cond(g, depth - 1), b = gen_cond(g, depth - 1);

		return chance(g, 50) ? binop(a, "&&", b, P_AND, 0, 1)
				     : binop(a, "||", b, P_OR, 0, 1);
	}
	if (depth > 0 && r < 32)
		return not_(gen_cond(g, depth - 1));
	if (g->nv && (r < 70 || g->naccess >= g->max_access))
		return var_cond(g);
	return input_cond(g);
}

static ex leaf(gen *g);

/* An access shifted along one variable, which may leave its tensor, in a
 * select whose guard keeps it inside. */
static ex guarded_leaf(gen *g)
{
	static const int shifts[] = {-2, -1, 1, 2};
	int vi, c, t, d, D, shape[MAX_RANK], lo_v, hi_v;
	char *idx[MAX_RANK];
	const var *v;
	char *lower[6], *upper[4], *nlower[2], *nupper[2], *sc;
	bool need_lo, need_hi;
	ex x;
	int form;

	if (g->nv == 0)
		return broadcast_leaf(g, input_dtype(g), READ_LIMIT);
	vi = rnd(g, g->nv);
	v = &g->v[vi];
	c = shifts[rnd(g, 4)];
	t = chance(g, 30) ? pick_existing(g, false) : -1;
	if (t >= 0 && g->t[t].rank > 0) {
		d = rnd(g, g->t[t].rank);
	} else {
		int rank = between(g, 1, 3);

		d = rnd(g, rank);
		for (int e = 0; e < rank; e++)
			shape[e] = rand_dim(g);
		if (chance(g, 60))
			shape[d] = v->hi;
		t = new_input(g, rank, shape, input_dtype(g));
	}
	D = g->t[t].shape[d];
	for (int e = 0; e < g->t[t].rank; e++)
		idx[e] = e == d ? plus_const(sfmt("%s", v->name), c)
				: gen_index(g, g->t[t].shape[e]);
	x = read_with(g, t, idx, 0);

	/* v + c >= 0 and v + c <= D - 1, written several ways. */
	lo_v = v->lo + c;
	hi_v = v->hi - 1 + c;
	need_lo = lo_v < 0;
	need_hi = hi_v > D - 1;
	sc = plus_const(sfmt("%s", v->name), c);
	lower[0] = sfmt("%s >= 0", sc);
	lower[1] = sfmt("%s >= %d", v->name, -c);
	lower[2] = sfmt("%s > -1", sc);
	lower[3] = sfmt("%d <= %s", -c, v->name);
	/* Stronger guards, != and quasi-affine (v >= 0 in the domain). */
	lower[4] = c == -1 ? sfmt("%s != 0", v->name) : sfmt("%s >= %d", v->name, -c);
	lower[5] = c < 0 ? sfmt("%s %% %d == %d", v->name, 1 - c, -c)
			 : sfmt("%s >= %d", v->name, -c);
	upper[0] = sfmt("%s < %d", sc, D);
	upper[1] = sfmt("%s <= %d", sc, D - 1);
	upper[2] = sfmt("%s < %d", v->name, D - c);
	upper[3] = sfmt("%d > %s", D - c, v->name);
	nlower[0] = sfmt("%s < 0", sc);
	nlower[1] = sfmt("%s <= %d", v->name, -c - 1);
	nupper[0] = sfmt("%s >= %d", sc, D);
	nupper[1] = sfmt("%s > %d", sc, D - 1);
	free(sc);

	form = rnd(g, 6);
	if (need_lo || need_hi || chance(g, 70)) {
		ex guard, alt = chance(g, 60)	? inum(0)
				: chance(g, 50) ? const_leaf(g)
						: leaf(g);
		double lo = fmin(x.lo, alt.lo), hi = fmax(x.hi, alt.hi);
		int a = rnd(g, 6), b = rnd(g, 4), na = rnd(g, 2), nb = rnd(g, 2);

		if (!need_lo && !need_hi)
			need_lo = true;
		if (form == 3 && !(need_lo && need_hi))
			form = 0;
		switch (form) {
		case 1: /* !(A) || !(B) picks the other branch */
			guard = need_lo ? not_(mk(sfmt("%s", lower[a]), 0, 1, P_REL))
					: not_(mk(sfmt("%s", upper[b]), 0, 1, P_REL));
			if (need_lo && need_hi)
				guard = binop(guard, "||",
					      not_(mk(sfmt("%s", upper[b]), 0, 1, P_REL)),
					      P_OR, 0, 1);
			x = call3("select", guard, alt, x, lo, hi);
			break;
		case 2: /* negated comparisons picking the other branch */
		case 5: /* the same, negated as a whole */
			guard = need_lo ? mk(sfmt("%s", nlower[na]), 0, 1, P_REL)
					: mk(sfmt("%s", nupper[nb]), 0, 1, P_REL);
			if (need_lo && need_hi)
				guard = binop(guard, "||",
					      mk(sfmt("%s", nupper[nb]), 0, 1, P_REL),
					      P_OR, 0, 1);
			if (form == 2)
				x = call3("select", guard, alt, x, lo, hi);
			else
				x = call3("select", not_(guard), x, alt, lo, hi);
			break;
		case 3: { /* nested selects, one bound each */
			ex inner = call3("select", mk(sfmt("%s", upper[b]), 0, 1, P_REL),
					 x, alt, lo, hi);

			alt = chance(g, 50) ? inum(0) : const_leaf(g);
			lo = fmin(lo, alt.lo);
			hi = fmax(hi, alt.hi);
			x = call3("select", mk(sfmt("%s", lower[a]), 0, 1, P_REL),
				  inner, alt, lo, hi);
			break;
		}
		default: /* A && B, sometimes && a condition on an input */
			guard = need_lo ? mk(sfmt("%s", lower[a]), 0, 1, P_REL)
					: mk(sfmt("%s", upper[b]), 0, 1, P_REL);
			if (need_lo && need_hi)
				guard = binop(guard, "&&",
					      mk(sfmt("%s", upper[b]), 0, 1, P_REL),
					      P_AND, 0, 1);
			if (form == 4)
				guard = binop(guard, "&&", input_cond(g), P_AND, 0, 1);
			x = call3("select", guard, x, alt, lo, hi);
			break;
		}
	}
	for (int i = 0; i < 6; i++)
		free(lower[i]);
	for (int i = 0; i < 4; i++)
		free(upper[i]);
	for (int i = 0; i < 2; i++) {
		free(nlower[i]);
		free(nupper[i]);
	}
	return scale_to(g, x, READ_LIMIT);
}

static ex leaf(gen *g)
{
	int r = rnd(g, 100), t;

	if (g->naccess >= g->max_access)
		return g->nv && chance(g, 50) ? var_leaf(g) : const_leaf(g);
	if (r < 25 && (t = pick_existing(g, false)) >= 0)
		return read_any(g, t, READ_LIMIT);
	if (r < 45)
		return broadcast_leaf(g, input_dtype(g), READ_LIMIT);
	if (r < 53)
		return slice_leaf(g);
	if (r < 59)
		return scalar_leaf(g);
	if (r < 67 && g->nv)
		return var_leaf(g);
	if (r < 74)
		return const_leaf(g);
	if (r < 87)
		return guarded_leaf(g);
	return random_input_leaf(g);
}

/* ---- float expressions ---- */

static double sigm(double x)
{
	return 1 / (1 + exp(-x));
}

/* An argument > 0 by construction, with its bounds. */
static ex positive(gen *g, ex a)
{
	switch (rnd(g, 4)) {
	case 0: {
		ex b = call1("abs", a, mag_lo(a), mag(a));

		return binop(b, "+", inum(1), P_ADD, b.lo + 1, b.hi + 1);
	}
	case 1: {
		ex b;

		a = tame(g, a, 100);
		b = binop(dup(a), "*", a, P_MUL, mag_lo(a) * mag_lo(a),
			  mag(a) * mag(a));
		return binop(b, "+", mk(sfmt("0.5"), 0.5, 0.5, P_ATOM), P_ADD,
			     b.lo + 0.5, b.hi + 0.5);
	}
	case 2:
		a = tame(g, a, 4);
		return call1("exp", a, exp(a.lo), exp(a.hi));
	default:
		a = tame(g, a, 8);
		return call1("sigmoid", a, sigm(a.lo), sigm(a.hi));
	}
}

static ex expr(gen *g, int depth, ex *primary);

static ex unary_call(gen *g, ex a)
{
	switch (rnd(g, 16)) {
	case 0:
		a = tame(g, a, 4);
		return call1("exp", a, exp(a.lo), exp(a.hi));
	case 1:
		if (chance(g, 40)) {
			/* log(1 + exp(a)), softplus */
			a = tame(g, a, 4);
			a = binop(inum(1), "+", call1("exp", a, exp(a.lo), exp(a.hi)),
				  P_ADD, 1 + exp(a.lo), 1 + exp(a.hi));
		} else {
			a = positive(g, a);
		}
		return call1("log", a, log(a.lo), log(a.hi));
	case 2:
		if (chance(g, 30)) {
			a = call1("abs", a, mag_lo(a), mag(a));
			return call1("sqrt", a, sqrt(a.lo), sqrt(a.hi));
		}
		a = positive(g, a);
		return call1("sqrt", a, sqrt(a.lo), sqrt(a.hi));
	case 3:
		a = positive(g, a);
		return call1("rsqrt", a, 1 / sqrt(a.hi), 1 / sqrt(a.lo));
	case 4:
		return call1("tanh", a, tanh(a.lo), tanh(a.hi));
	case 5:
		return call1("sigmoid", a, sigm(a.lo), sigm(a.hi));
	case 6:
		return call1("relu", a, fmax(a.lo, 0), fmax(a.hi, 0));
	case 7:
		return call1("gelu", a, a.lo >= 0 ? 0 : -0.2, fmax(a.hi, 0));
	case 8:
		return call1("gelu_tanh", a, a.lo >= 0 ? 0 : -0.2, fmax(a.hi, 0));
	case 9:
		return call1("silu", a, a.lo >= 0 ? 0 : -0.3, fmax(a.hi, 0));
	case 10:
		return call1("erf", a, erf(a.lo), erf(a.hi));
	case 11:
		return call1("abs", a, mag_lo(a), mag(a));
	case 12:
		return neg(a);
	case 13:
		a = tame(g, a, 8);
		return call2("pow", a, inum(2), mag_lo(a) * mag_lo(a), mag(a) * mag(a));
	case 14:
		a = tame(g, a, 4);
		return call2("pow", a, inum(3), pow(a.lo, 3), pow(a.hi, 3));
	default:
		switch (rnd(g, 3)) {
		case 0: /* pow(positive, 0.5 or 1.5) */
			a = positive(g, a);
			if (a.hi > 100)
				return call2("pow", a, mk(sfmt("0.5"), .5, .5, P_ATOM),
					     sqrt(a.lo), sqrt(a.hi));
			return call2("pow", a, mk(sfmt("1.5"), 1.5, 1.5, P_ATOM),
				     pow(a.lo, 1.5), pow(a.hi, 1.5));
		case 1: /* pow(2, a) */
			a = tame(g, a, 4);
			return call2("pow", inum(2), a, pow(2, a.lo), pow(2, a.hi));
		default: /* pow(abs(a) + 1, -1) */
			a = call1("abs", a, mag_lo(a), mag(a));
			a = binop(a, "+", inum(1), P_ADD, a.lo + 1, a.hi + 1);
			return call2("pow", a, neg(inum(1)), 1 / a.hi, 1 / a.lo);
		}
	}
}

static ex arith(gen *g, ex a, ex b)
{
	switch (rnd(g, 6)) {
	case 0:
		return binop(a, "+", b, P_ADD, a.lo + b.lo, a.hi + b.hi);
	case 1:
		return binop(a, "-", b, P_ADD, a.lo - b.hi, a.hi - b.lo);
	case 2:
	case 3: {
		double p[4];

		a = tame(g, a, READ_LIMIT);
		b = tame(g, b, READ_LIMIT);
		p[0] = a.lo * b.lo;
		p[1] = a.lo * b.hi;
		p[2] = a.hi * b.lo;
		p[3] = a.hi * b.hi;
		return binop(a, "*", b, P_MUL, fmin(fmin(p[0], p[1]), fmin(p[2], p[3])),
			     fmax(fmax(p[0], p[1]), fmax(p[2], p[3])));
	}
	case 4: {
		/* Division by something >= 1 or by a positive constant. */
		double lo = fmin(a.lo, 0), hi = fmax(a.hi, 0);

		switch (rnd(g, 4)) {
		case 0:
			b = call1("abs", b, mag_lo(b), mag(b));
			b = binop(b, "+", inum(1), P_ADD, b.lo + 1, b.hi + 1);
			break;
		case 1:
			b = tame(g, b, 100);
			b = binop(binop(dup(b), "*", b, P_MUL, 0, mag(b) * mag(b)), "+",
				  inum(1), P_ADD, 1, mag(b) * mag(b) + 1);
			break;
		case 2:
			b = tame(g, b, 4);
			b = binop(inum(1), "+", call1("exp", b, exp(b.lo), exp(b.hi)),
				  P_ADD, 1, 1 + exp(b.hi));
			break;
		default: {
			/* a / 4 + b or a / 0.5 + b */
			double c = rnd(g, 2) ? 4 : 0.5;

			a = binop(a, "/", mk(sfmt("%g", c), c, c, P_ATOM), P_MUL,
				  a.lo / c, a.hi / c);
			return binop(a, "+", b, P_ADD, a.lo + b.lo, a.hi + b.hi);
		}
		}
		return binop(a, "/", b, P_MUL, lo, hi);
	}
	default:
		if (chance(g, 50))
			return call2("max", a, b, fmax(a.lo, b.lo), fmax(a.hi, b.hi));
		return call2("min", a, b, fmin(a.lo, b.lo), fmin(a.hi, b.hi));
	}
}

/* A float expression of at most "depth" levels; uses *primary (and clears
 * it) at one of its leaves, maybe. */
static ex expr(gen *g, int depth, ex *primary)
{
	int r = rnd(g, 100);

	if (depth <= 0 || r < 20) {
		if (primary->s && chance(g, 60)) {
			ex e = *primary;

			primary->s = NULL;
			return e;
		}
		return leaf(g);
	}
	if (r < 45)
		return unary_call(g, expr(g, depth - 1, primary));
	if (r < 80) {
		ex a = expr(g, depth - 1, primary);

		return arith(g, a, expr(g, depth - 1, primary));
	}
	if (r < 92) {
		ex c = gen_cond(g, 1), a = expr(g, depth - 1, primary);
		ex b = expr(g, depth - 1, primary);

		return call3("select", c, a, b, fmin(a.lo, b.lo), fmax(a.hi, b.hi));
	}
	/* A condition as a number. */
	{
		ex c = gen_cond(g, 1), a = expr(g, depth - 1, primary);

		a = tame(g, a, READ_LIMIT);
		return binop(c, "*", a, P_MUL, fmin(a.lo, 0), fmax(a.hi, 0));
	}
}

/* A float body around "primary" (consumed). */
static ex body_around(gen *g, ex primary, int depth)
{
	ex e = expr(g, depth, &primary);

	if (!primary.s)
		return e;
	switch (rnd(g, 4)) {
	case 0:
		return binop(primary, "+", e, P_ADD, primary.lo + e.lo, primary.hi + e.hi);
	case 1:
		return arith(g, primary, e);
	case 2:
		return arith(g, unary_call(g, primary), e);
	default:
		return call2(chance(g, 50) ? "max" : "min", primary, e,
			     fmin(primary.lo, e.lo), fmax(primary.hi, e.hi));
	}
}

/* ---- integer expressions ---- */

static ex int_clamp(ex a)
{
	if (mag(a) <= INT_LIMIT)
		return a;
	return call2("max", call2("min", a, inum(100), fmin(a.lo, 100), fmin(a.hi, 100)),
		     neg(inum(100)), -100, 100);
}

static ex int_leaf(gen *g)
{
	int r = rnd(g, 100), t;

	if (g->naccess >= g->max_access)
		r = 70;
	if (r < 35 && (t = pick_existing(g, true)) >= 0)
		return int_clamp(read_any(g, t, 0));
	if (r < 65)
		return broadcast_leaf(g, I32, 0);
	if (r < 85 && g->nv) {
		const var *v = &g->v[rnd(g, g->nv)], *w = &g->v[rnd(g, g->nv)];

		switch (rnd(g, 3)) {
		case 0:
			return mk(sfmt("%s", v->name), v->lo, v->hi - 1, P_ATOM);
		case 1:
			return mk(sfmt("%s %% 3", v->name), 0, 2, P_MUL);
		default:
			return mk(sfmt("%s - %s", v->name, w->name), v->lo - (w->hi - 1),
				  v->hi - 1 - w->lo, P_ADD);
		}
	}
	return inum(between(g, -1, 3));
}

static ex int_expr(gen *g, int depth, ex *primary)
{
	int r = rnd(g, 100);
	ex a, b;

	if (depth <= 0 || r < 20) {
		if (primary->s && chance(g, 60)) {
			a = *primary;
			primary->s = NULL;
			return int_clamp(a);
		}
		return int_leaf(g);
	}
	a = int_expr(g, depth - 1, primary);
	if (r < 35) {
		switch (rnd(g, 4)) {
		case 0:
			return call1("abs", a, mag_lo(a), mag(a));
		case 1:
			return neg(a);
		case 2:
			if (mag(a) > 100)
				return call1("abs", a, mag_lo(a), mag(a));
			return call2("pow", a, inum(2), 0, mag(a) * mag(a));
		default:
			return binop(a, "%", inum(3), P_MUL, 0, 2);
		}
	}
	b = int_expr(g, depth - 1, primary);
	if (r < 80) {
		switch (rnd(g, 3)) {
		case 0:
			return binop(a, "+", b, P_ADD, a.lo + b.lo, a.hi + b.hi);
		case 1:
			return binop(a, "-", b, P_ADD, a.lo - b.hi, a.hi - b.lo);
		default:
			if (mag(a) * mag(b) > 1e4)
				return binop(a, "+", b, P_ADD, a.lo + b.lo, a.hi + b.hi);
			return binop(a, "*", b, P_MUL, -mag(a) * mag(b), mag(a) * mag(b));
		}
	}
	if (r < 90 && g->nv)
		return call3("select", var_cond(g), a, b, fmin(a.lo, b.lo),
			     fmax(a.hi, b.hi));
	if (chance(g, 50))
		return call2("max", a, b, fmax(a.lo, b.lo), fmax(a.hi, b.hi));
	return call2("min", a, b, fmin(a.lo, b.lo), fmin(a.hi, b.hi));
}

/* ---- ops ---- */

/* Writes the op "target[vars] = reducer(rvars) body" into a new tensor
 * shaped by the target variables. */
static void finish_op(gen *g, int reducer, ex body, int dtype)
{
	int shape[MAX_RANK], t;
	long count = 1;
	char *vars = sfmt("%s", ""), *text;
	tensor *T;

	for (int i = g->ntv; i < g->nv; i++)
		count *= g->v[i].hi - g->v[i].lo;
	/* Stored values stay far inside f16's range (max, min and no reducer
	 * commute with the scaling; prod folds values near 1). */
	if (reducer == RED_SUM && dtype != I32)
		body = scale_to(g, body, VALUE_LIMIT / count);
	else if (reducer != RED_PROD && dtype != I32)
		body = scale_to(g, body, VALUE_LIMIT);
	if (dtype == I32 && mag(body) > 1e4)
		body = int_clamp(body);
	for (int i = 0; i < g->ntv; i++) {
		shape[i] = g->v[i].hi;
		vars = cat(vars, ", ", sfmt("%s", g->v[i].name));
	}
	t = new_tensor(g, false, g->ntv, shape, dtype);
	T = &g->t[t];
	T->lo = body.lo;
	T->hi = body.hi;
	if (reducer == RED_SUM) {
		T->lo = body.lo * count;
		T->hi = body.hi * count;
	} else if (reducer == RED_PROD) {
		double m = pow(mag(body), (double)count);

		T->lo = body.lo > 0 ? pow(body.lo, (double)count) : -m;
		T->hi = m;
	}
	if (reducer == RED_NONE) {
		text = sfmt("%s[%s] = %s", T->name, vars, body.s);
	} else {
		char *rvars = sfmt("%s", "");

		for (int i = g->ntv; i < g->nv; i++) {
			const var *v = &g->v[i];
			char *spec;

			if (v->lo == 0 && v->alone == v->hi && chance(g, 50))
				spec = sfmt("%s", v->name);
			else if (v->lo == 0 && chance(g, 70))
				spec = sfmt("%s < %d", v->name, v->hi);
			else
				spec = sfmt("%s in %d:%d", v->name, v->lo, v->hi);
			rvars = cat(rvars, ", ", spec);
		}
		text = sfmt("%s[%s] = %s(%s) %s", T->name, vars,
			    reducer_names[reducer], rvars, body.s);
		free(rvars);
	}
	free(vars);
	free(body.s);
	g->ops[g->nops++] = text;
}

/* The access of primary tensor "p" whose dim d is indexed by variable
 * dim_var[d], alone. */
static ex primary_access(gen *g, int p, const int *dim_var, double limit)
{
	char *idx[MAX_RANK];

	for (int d = 0; d < g->t[p].rank; d++)
		idx[d] = alone(g, dim_var[d], g->t[p].shape[d]);
	return read_with(g, p, idx, limit);
}

static int pick_reducer(gen *g)
{
	int r = rnd(g, 100);

	return r < 45 ? RED_SUM : r < 65 ? RED_MAX : r < 80 ? RED_MIN : RED_PROD;
}

/* Values near 1, for prod. */
static ex near_one(gen *g, ex e)
{
	switch (rnd(g, 3)) {
	case 0:
		e = call1("tanh", e, tanh(e.lo), tanh(e.hi));
		e = binop(mk(sfmt("0.125"), .125, .125, P_ATOM), "*", e, P_MUL,
			  e.lo / 8, e.hi / 8);
		return binop(inum(1), "+", e, P_ADD, 1 + e.lo, 1 + e.hi);
	case 1:
		e = call1("sigmoid", e, sigm(e.lo), sigm(e.hi));
		return binop(e, "+", mk(sfmt("0.5"), .5, .5, P_ATOM), P_ADD,
			     e.lo + .5, e.hi + .5);
	default:
		e = call1("erf", e, erf(e.lo), erf(e.hi));
		e = binop(e, "*", mk(sfmt("0.25"), .25, .25, P_ATOM), P_MUL,
			  e.lo / 4, e.hi / 4);
		return call1("exp", e, exp(e.lo), exp(e.hi));
	}
}

/* Elementwise over the primary's shape, maybe transposed, maybe with a new
 * broadcast dim. */
static bool t_map(gen *g)
{
	int p = pick_primary(g, 0, MAX_RANK, false), rank = g->t[p].rank;
	int perm[MAX_RANK], dim_var[MAX_RANK], extra = -1;

	for (int d = 0; d < rank; d++)
		perm[d] = d;
	if (chance(g, 35))
		shuffle(g, perm, rank);
	if (rank < MAX_RANK && chance(g, 15))
		extra = rnd(g, rank + 1);
	begin_op(g);
	for (int k = 0, d = 0; k < rank + (extra >= 0); k++) {
		if (k == extra) {
			add_var(g, 0, rand_dim(g));
		} else {
			dim_var[perm[d]] = add_var(g, 0, g->t[p].shape[perm[d]]);
			d++;
		}
	}
	g->ntv = g->nv;
	if (op_work(g) > MAX_WORK)
		return false;
	finish_op(g, RED_NONE,
		  body_around(g, primary_access(g, p, dim_var, READ_LIMIT),
			      between(g, 1, 3)),
		  float_dtype(g));
	return true;
}

/* A reduction over one or two dims of the primary. */
static bool t_reduce(gen *g)
{
	int p = pick_primary(g, 1, MAX_RANK, false), rank = g->t[p].rank;
	int nred = rank >= 2 && chance(g, 35) ? 2 : 1, order[MAX_RANK];
	int reducer = pick_reducer(g), dim_var[MAX_RANK], kept[MAX_RANK], nk = 0;
	int lo[MAX_RANK], hi[MAX_RANK], budget = 8;
	ex body;

	for (int d = 0; d < rank; d++)
		order[d] = d;
	shuffle(g, order, rank);
	/* order[0..nred) are reduced */
	for (int i = 0; i < nred; i++) {
		int d = order[i], D = g->t[p].shape[d], len;

		if (reducer == RED_PROD) {
			len = between(g, 1, D < 4 ? D : 4);
			if (len > budget)
				len = budget;
			budget /= len;
		} else {
			len = chance(g, 25) ? between(g, 1, D) : D;
		}
		lo[d] = between(g, 0, D - len);
		hi[d] = lo[d] + len;
	}
	for (int i = nred; i < rank; i++)
		kept[nk++] = order[i];
	if (!chance(g, 30)) /* kept dims in their order, mostly */
		for (int a = 0; a < nk; a++)
			for (int b = a + 1; b < nk; b++)
				if (kept[b] < kept[a]) {
					int x = kept[a];

					kept[a] = kept[b];
					kept[b] = x;
				}
	begin_op(g);
	for (int i = 0; i < nk; i++)
		dim_var[kept[i]] = add_var(g, 0, g->t[p].shape[kept[i]]);
	g->ntv = g->nv;
	for (int i = 0; i < nred; i++)
		dim_var[order[i]] = add_var(g, lo[order[i]], hi[order[i]]);
	if (op_work(g) > MAX_WORK)
		return false;
	body = body_around(g, primary_access(g, p, dim_var, READ_LIMIT),
			   between(g, 0, 2));
	if (reducer == RED_PROD)
		body = near_one(g, body);
	finish_op(g, reducer, body, float_dtype(g));
	return true;
}

/* A contraction of the primary with a weight (a new input, or another
 * unread intermediate), batched sometimes. */
static bool t_matmul(gen *g)
{
	int p = pick_primary(g, 1, 3, false), rank = g->t[p].rank;
	int ncon = rank >= 2 && chance(g, 25) ? 2 : 1, order[MAX_RANK];
	int dim_var[MAX_RANK], wvar[MAX_RANK], wshape[MAX_RANK], wrank = 0;
	int nk = rank - ncon, nfree, batch = -1, w = -1, wd = -1;
	int free_ext[MAX_RANK], reducer = chance(g, 90) ? RED_SUM : RED_MAX;
	bool free_first = chance(g, 30);
	ex a, b;

	for (int d = 0; d < rank; d++)
		order[d] = d;
	shuffle(g, order, rank);
	/* order[0..ncon) are contracted. Another intermediate as the weight? */
	if (ncon == 1 && chance(g, 40)) {
		int cand[MAX_TENSORS], n = 0;

		for (int t = 0; t < g->nt; t++)
			if (t != p && !g->t[t].input && !g->t[t].read &&
			    g->t[t].dtype != I32 && g->t[t].rank >= 1 &&
			    nk + g->t[t].rank - 1 <= MAX_RANK)
				for (int d = 0; d < g->t[t].rank; d++)
					if (g->t[t].shape[d] == g->t[p].shape[order[0]]) {
						cand[n++] = t;
						break;
					}
		if (n) {
			w = cand[rnd(g, n)];
			do
				wd = rnd(g, g->t[w].rank);
			while (g->t[w].shape[wd] != g->t[p].shape[order[0]]);
		}
	}
	if (w >= 0) {
		nfree = 0;
		for (int d = 0; d < g->t[w].rank; d++)
			if (d != wd)
				free_ext[nfree++] = g->t[w].shape[d];
	} else {
		nfree = between(g, 0, 2);
		if (nk + nfree > MAX_RANK)
			nfree = MAX_RANK - nk;
		if (ncon + nfree > MAX_RANK)
			nfree = MAX_RANK - ncon;
		for (int i = 0; i < nfree; i++)
			free_ext[i] = rand_dim(g);
		if (nk && ncon + nfree < MAX_RANK && chance(g, 25))
			batch = order[ncon + rnd(g, nk)];
	}
	begin_op(g);
	{
		int free_vars[MAX_RANK];

		if (free_first)
			for (int i = 0; i < nfree; i++)
				free_vars[i] = add_var(g, 0, free_ext[i]);
		for (int d = 0; d < rank; d++) {
			bool contracted = false;

			for (int i = 0; i < ncon; i++)
				contracted |= order[i] == d;
			if (!contracted)
				dim_var[d] = add_var(g, 0, g->t[p].shape[d]);
		}
		if (!free_first)
			for (int i = 0; i < nfree; i++)
				free_vars[i] = add_var(g, 0, free_ext[i]);
		g->ntv = g->nv;
		for (int i = 0; i < ncon; i++)
			dim_var[order[i]] = add_var(g, 0, g->t[p].shape[order[i]]);
		if (op_work(g) > MAX_WORK)
			return false;
		if (w >= 0) {
			for (int d = 0, f = 0; d < g->t[w].rank; d++)
				wvar[d] = d == wd ? dim_var[order[0]] : free_vars[f++];
		} else {
			for (int i = 0; i < ncon; i++)
				wvar[wrank++] = dim_var[order[i]];
			for (int i = 0; i < nfree; i++)
				wvar[wrank++] = free_vars[i];
			if (batch >= 0)
				wvar[wrank++] = dim_var[batch];
			shuffle(g, wvar, wrank);
			for (int d = 0; d < wrank; d++)
				wshape[d] = g->v[wvar[d]].hi;
			w = new_input(g, wrank, wshape, input_dtype(g));
		}
	}
	a = primary_access(g, p, dim_var, READ_LIMIT);
	b = primary_access(g, w, wvar, READ_LIMIT);
	if (chance(g, 25))
		a = unary_call(g, a);
	if (reducer == RED_MAX) {
		a = binop(a, "+", b, P_ADD, a.lo + b.lo, a.hi + b.hi);
	} else {
		a = tame(g, a, READ_LIMIT);
		b = tame(g, b, READ_LIMIT);
		a = binop(a, "*", b, P_MUL, -mag(a) * mag(b), mag(a) * mag(b));
	}
	finish_op(g, reducer, a, float_dtype(g));
	return true;
}

/* A 1-D or 2-D window (3 taps mostly) over the primary, with padding
 * guarded by select, a stride sometimes, output channels sometimes. */
static bool t_conv(gen *g)
{
	int p = pick_primary(g, 1, MAX_RANK, false), rank = g->t[p].rank;
	int nsp = rank >= 2 && chance(g, 40) ? 2 : 1, order[MAX_RANK];
	int taps = chance(g, 85) ? 3 : chance(g, 50) ? 2 : 5, stride = chance(g, 20) ? 2 : 1;
	int pad[2], ext[2], sd[2], out = -1, oc = 0, dim_var[MAX_RANK], rv[2];
	int wvar[MAX_RANK], wshape[MAX_RANK], wrank = 0, w, form = rnd(g, 3);
	char *idx[MAX_RANK], *guard = sfmt("%s", ""), *nguard = sfmt("%s", "");
	ex x, wx, body;

	for (int d = 0; d < rank; d++)
		order[d] = d;
	shuffle(g, order, rank);
	for (int i = 0; i < nsp; i++) {
		int N = g->t[p].shape[order[i]], kind = rnd(g, 3);

		sd[i] = order[i];
		/* same, valid or full padding */
		pad[i] = kind == 0 ? (taps - 1) / 2 : kind == 1 ? 0 : taps - 1;
		if (N + 2 * pad[i] < taps)
			pad[i] = taps - 1;
		ext[i] = (N + 2 * pad[i] - taps) / stride + 1;
		if (ext[i] > MAX_DIM || ext[i] < 1) {
			free(guard);
			free(nguard);
			return false;
		}
	}
	if (rank < MAX_RANK && chance(g, 35)) {
		oc = between(g, 1, 4);
		out = chance(g, 50) ? 0 : 1;
	}
	begin_op(g);
	if (out == 0)
		out = add_var(g, 0, oc);
	for (int d = 0; d < rank; d++) {
		int e = g->t[p].shape[d];

		for (int i = 0; i < nsp; i++)
			if (sd[i] == d)
				e = ext[i];
		dim_var[d] = add_var(g, 0, e);
	}
	if (out == 1)
		out = add_var(g, 0, oc);
	g->ntv = g->nv;
	for (int i = 0; i < nsp; i++)
		rv[i] = add_var(g, 0, taps);
	if (op_work(g) > MAX_WORK) {
		free(guard);
		free(nguard);
		return false;
	}
	for (int d = 0; d < rank; d++) {
		int s = -1;

		for (int i = 0; i < nsp; i++)
			if (sd[i] == d)
				s = i;
		if (s < 0) {
			idx[d] = alone(g, dim_var[d], g->t[p].shape[d]);
		} else {
			const char *j = g->v[dim_var[d]].name, *r = g->v[rv[s]].name;
			char *pos = stride == 1 ? sfmt("%s + %s", j, r)
						: sfmt("2 * %s + %s", j, r);
			int N = g->t[p].shape[d], top = stride * (ext[s] - 1) + taps - 1;

			idx[d] = plus_const(sfmt("%s", pos), -pad[s]);
			if (pad[s] > 0) {
				char *c = rnd(g, 2) ? sfmt("%s >= %d", pos, pad[s])
						    : plus_const(sfmt("%s", pos), -pad[s]);

				if (strstr(c, ">=") == NULL) {
					char *cc = sfmt("%s >= 0", c);

					free(c);
					c = cc;
				}
				guard = cat(guard, " && ", c);
				nguard = cat(nguard, " || ", sfmt("%s < %d", pos, pad[s]));
			}
			if (top - pad[s] > N - 1) {
				char *c = rnd(g, 2) ? sfmt("%s <= %d", pos, N - 1 + pad[s])
						    : sfmt("%s < %d", pos, N + pad[s]);

				guard = cat(guard, " && ", c);
				nguard = cat(nguard, " || ", sfmt("%s > %d", pos, N - 1 + pad[s]));
			}
			free(pos);
		}
	}
	x = read_with(g, p, idx, READ_LIMIT);
	if (chance(g, 20))
		x = unary_call(g, x);
	if (out >= 0)
		wvar[wrank++] = out;
	for (int i = 0; i < nsp; i++)
		wvar[wrank++] = rv[i];
	for (int d = 0; d < wrank; d++)
		wshape[d] = g->v[wvar[d]].hi;
	w = new_input(g, wrank, wshape, input_dtype(g));
	x = tame(g, x, READ_LIMIT);
	wx = primary_access(g, w, wvar, READ_LIMIT);
	if (!*guard) {
		body = binop(x, "*", wx, P_MUL, -mag(x) * mag(wx), mag(x) * mag(wx));
	} else if (form == 0) {
		double m = mag(x);

		body = call3("select", mk(sfmt("%s", guard), 0, 1, P_AND), x, inum(0),
			     -m, m);
		body = binop(body, "*", wx, P_MUL, -m * mag(wx), m * mag(wx));
	} else if (form == 1) {
		double m = mag(x) * mag(wx);

		body = binop(x, "*", wx, P_MUL, -m, m);
		body = call3("select", mk(sfmt("%s", nguard), 0, 1, P_OR), inum(0),
			     body, -m, m);
	} else {
		double m = mag(x);

		body = call3("select", not_(mk(sfmt("%s", nguard), 0, 1, P_OR)), x,
			     inum(0), -m, m);
		body = binop(wx, "*", body, P_MUL, -m * mag(wx), m * mag(wx));
	}
	free(guard);
	free(nguard);
	finish_op(g, RED_SUM, body, float_dtype(g));
	return true;
}

/* The primary's elements in a new shape: row-major flat index of the
 * target, split into the primary's dims with / and %. */
static bool t_reshape(gen *g)
{
	int p = pick_primary(g, 1, MAX_RANK, false), rank = g->t[p].rank;
	int64_t size = tensor_size(&g->t[p]), rem = size, stride;
	int trank = between(g, 1, 3), shape[MAX_RANK];
	char *flat, *idx[MAX_RANK];

	for (int k = 0; k < trank - 1; k++) {
		int div[MAX_DIM], n = 0;

		for (int d = 1; d <= MAX_DIM; d++)
			if (rem % d == 0)
				div[n++] = d;
		shape[k] = div[rnd(g, n)];
		rem /= shape[k];
	}
	if (rem > MAX_DIM)
		return false;
	shape[trank - 1] = (int)rem;
	begin_op(g);
	for (int k = 0; k < trank; k++)
		add_var(g, 0, shape[k]);
	g->ntv = g->nv;
	flat = sfmt("%s", "");
	stride = size;
	for (int k = 0; k < trank; k++) {
		stride /= shape[k];
		if (stride == 1)
			flat = cat(flat, " + ", sfmt("%s", g->v[k].name));
		else
			flat = cat(flat, " + ", sfmt("%s * %ld", g->v[k].name, (long)stride));
	}
	if (strchr(flat, '+')) {
		char *s = sfmt("(%s)", flat);

		free(flat);
		flat = s;
	}
	stride = size;
	for (int d = 0; d < rank; d++) {
		int D = g->t[p].shape[d];

		stride /= D;
		if (d == 0 && stride == 1)
			idx[d] = sfmt("%s", flat);
		else if (d == 0)
			idx[d] = sfmt("%s / %ld", flat, (long)stride);
		else if (stride == 1)
			idx[d] = sfmt("%s %% %d", flat, D);
		else
			idx[d] = sfmt("%s / %ld %% %d", flat, (long)stride, D);
	}
	free(flat);
	finish_op(g, RED_NONE,
		  body_around(g, read_with(g, p, idx, READ_LIMIT), between(g, 0, 2)),
		  float_dtype(g));
	return true;
}

/* Part of the primary: offsets, strides, flips, fixed indices. */
static bool t_slice(gen *g)
{
	int p = pick_primary(g, 1, MAX_RANK, false), rank = g->t[p].rank;
	int mode[MAX_RANK], ext[MAX_RANK] = {0}, off[MAX_RANK] = {0};
	int order[MAX_RANK], nt = 0, var_of[MAX_RANK] = {0};
	char *idx[MAX_RANK];

	for (int d = 0; d < rank; d++) {
		int D = g->t[p].shape[d];

		mode[d] = rnd(g, 5);
		if (mode[d] == 2 && D < 2)
			mode[d] = 1;
		switch (mode[d]) {
		case 0: /* all */
		case 3: /* flipped */
			ext[d] = D;
			break;
		case 1: /* offset */
			ext[d] = between(g, 1, D);
			off[d] = between(g, 0, D - ext[d]);
			break;
		case 2: /* stride 2 */
			ext[d] = between(g, 1, (D + 1) / 2);
			off[d] = between(g, 0, D - 1 - 2 * (ext[d] - 1));
			break;
		default: /* fixed */
			off[d] = rnd(g, D);
			break;
		}
		if (mode[d] != 4)
			order[nt++] = d;
	}
	if (chance(g, 25))
		shuffle(g, order, nt);
	begin_op(g);
	for (int i = 0; i < nt; i++)
		var_of[order[i]] = add_var(g, 0, ext[order[i]]);
	g->ntv = g->nv;
	for (int d = 0; d < rank; d++) {
		const char *v = mode[d] == 4 ? NULL : g->v[var_of[d]].name;

		switch (mode[d]) {
		case 0:
			idx[d] = alone(g, var_of[d], g->t[p].shape[d]);
			break;
		case 1:
			idx[d] = plus_const(sfmt("%s", v), off[d]);
			break;
		case 2:
			idx[d] = plus_const(sfmt("2 * %s", v), off[d]);
			break;
		case 3:
			idx[d] = sfmt("%d - %s", g->t[p].shape[d] - 1, v);
			break;
		default:
			idx[d] = sfmt("%d", off[d]);
			break;
		}
	}
	finish_op(g, RED_NONE,
		  body_around(g, read_with(g, p, idx, READ_LIMIT), between(g, 0, 2)),
		  float_dtype(g));
	return true;
}

/* An i32 target: an integer matmul, map or reduction of i32 tensors, or
 * comparisons of an input. */
static bool t_int(gen *g)
{
	int variant = rnd(g, 4), dim_var[MAX_RANK];

	if (variant == 0) {
		int a = pick_primary(g, 2, 2, true), K = g->t[a].shape[1];
		int N = rand_dim(g), b, bv[2], bshape[2];
		bool tb = chance(g, 40);
		ex ea, eb, body;

		begin_op(g);
		dim_var[0] = add_var(g, 0, g->t[a].shape[0]);
		bv[tb ? 0 : 1] = add_var(g, 0, N);
		g->ntv = g->nv;
		dim_var[1] = bv[tb ? 1 : 0] = add_var(g, 0, K);
		if (op_work(g) > MAX_WORK)
			return false;
		bshape[0] = g->v[bv[0]].hi;
		bshape[1] = g->v[bv[1]].hi;
		b = new_input(g, 2, bshape, I32);
		ea = int_clamp(primary_access(g, a, dim_var, 0));
		eb = primary_access(g, b, bv, 0);
		body = binop(ea, "*", eb, P_MUL, -mag(ea) * mag(eb), mag(ea) * mag(eb));
		if (chance(g, 30))
			body = binop(body, "+", int_leaf(g), P_ADD, body.lo - INT_LIMIT,
				     body.hi + INT_LIMIT);
		finish_op(g, RED_SUM, body, I32);
		return true;
	}
	if (variant == 3) {
		/* From a float input, by comparisons: exact. */
		int cand[MAX_TENSORS], n = 0, rank, p;
		ex x, body;

		for (int t = 0; t < g->nt; t++)
			if (g->t[t].input && g->t[t].dtype != I32)
				cand[n++] = t;
		if (n && chance(g, 50)) {
			p = cand[rnd(g, n)];
		} else {
			int shape[MAX_RANK];

			rank = between(g, 0, 3);
			for (int d = 0; d < rank; d++)
				shape[d] = rand_dim(g);
			p = new_input(g, rank, shape, float_dtype(g));
		}
		rank = g->t[p].rank;
		begin_op(g);
		for (int d = 0; d < rank; d++)
			dim_var[d] = add_var(g, 0, g->t[p].shape[d]);
		g->ntv = g->nv;
		x = primary_access(g, p, dim_var, 0);
		switch (rnd(g, 3)) {
		case 0:
			body = mk(sfmt("select(%s > 0, 1, -1)", x.s), -1, 1, P_ATOM);
			break;
		case 1:
			body = mk(sfmt("(%s > 0.5) - (%s < -0.5) * 2", x.s, x.s), -2, 1,
				  P_ADD);
			break;
		default:
			if (g->nv)
				body = mk(sfmt("select(%s >= 0 && %s > 0, %s, 0)", x.s,
					       g->v[0].name, g->v[0].name),
					  0, g->v[0].hi, P_ATOM);
			else
				body = mk(sfmt("%s <= .25", x.s), 0, 1, P_REL);
			break;
		}
		free(x.s);
		finish_op(g, RED_NONE, body, I32);
		return true;
	}
	{
		int p = pick_primary(g, variant == 2 ? 1 : 0, 3, true);
		int rank = g->t[p].rank, rd = variant == 2 ? rnd(g, rank) : -1;
		int reducer = variant == 2 ? pick_reducer(g) : RED_NONE, lo = 0, hi = 0;
		ex primary, body;

		if (rd >= 0) {
			int D = g->t[p].shape[rd], len = reducer == RED_PROD
								 ? between(g, 1, D < 4 ? D : 4)
								 : D;

			lo = between(g, 0, D - len);
			hi = lo + len;
		}
		begin_op(g);
		for (int d = 0; d < rank; d++)
			if (d != rd)
				dim_var[d] = add_var(g, 0, g->t[p].shape[d]);
		g->ntv = g->nv;
		if (rd >= 0)
			dim_var[rd] = add_var(g, lo, hi);
		primary = primary_access(g, p, dim_var, 0);
		body = int_expr(g, between(g, 0, 2), &primary);
		if (primary.s)
			body = binop(int_clamp(primary), "+", body, P_ADD,
				     -INT_LIMIT + body.lo, INT_LIMIT + body.hi);
		if (reducer == RED_PROD)
			body = call2("max", call2("min", body, inum(1), fmin(body.lo, 1), 1),
				     neg(inum(1)), -1, 1);
		finish_op(g, reducer, body, I32);
		return true;
	}
}

static bool one_op(gen *g, int kind)
{
	switch (kind) {
	case 0: return t_map(g);
	case 1: return t_reduce(g);
	case 2: return t_matmul(g);
	case 3: return t_conv(g);
	case 4: return t_reshape(g);
	case 5: return t_slice(g);
	default: return t_int(g);
	}
}

/* ---- the JSON text ---- */

static void write_tensor(gen *g, FILE *f, const tensor *t)
{
	char shape[64] = "";
	int n = 0;

	for (int d = 0; d < t->rank; d++)
		n += snprintf(shape + n, sizeof(shape) - n, "%s%d", d ? ", " : "",
			      t->shape[d]);
	if (chance(g, 70))
		fprintf(f, "\"%s\": {\"shape\": [%s], \"dtype\": \"%s\"", t->name,
			shape, dtype_names[t->dtype]);
	else
		fprintf(f, "\"%s\": {\"dtype\": \"%s\", \"shape\": [%s]", t->name,
			dtype_names[t->dtype], shape);
	if (t->input)
		fprintf(f, ", \"role\": \"input\"}");
	else if (t->output)
		fprintf(f, ", \"role\": \"output\"}");
	else
		fprintf(f, "}");
}

static char *to_json(gen *g, unsigned seed)
{
	int order[MAX_TENSORS], oorder[MAX_OPS], parts[4] = {0, 1, 2, 3};
	bool options = chance(g, 15), tf32 = chance(g, 50);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		abort();
	for (int i = 0; i < g->nt; i++)
		order[i] = i;
	shuffle(g, order, g->nt);
	for (int i = 0; i < g->nops; i++)
		oorder[i] = i;
	if (chance(g, 50))
		shuffle(g, oorder, g->nops);
	if (chance(g, 30))
		shuffle(g, parts, 4);
	fprintf(f, "{\n");
	for (int k = 0; k < 4; k++) {
		const char *sep = k < 3 ? ",\n" : "\n";

		switch (parts[k]) {
		case 0:
			fprintf(f, "  \"version\": 1%s", sep);
			break;
		case 1:
			fprintf(f, "  \"name\": \"random_%u\"%s", seed, sep);
			break;
		case 2:
			fprintf(f, "  \"tensors\": {\n");
			for (int i = 0; i < g->nt; i++) {
				fprintf(f, "    ");
				write_tensor(g, f, &g->t[order[i]]);
				fprintf(f, i + 1 < g->nt ? ",\n" : "\n");
			}
			fprintf(f, "  }%s", options ? ",\n" : sep);
			if (options)
				fprintf(f, "  \"options\": {\"allow_tf32\": %s}%s",
					tf32 ? "true" : "false", sep);
			break;
		default:
			fprintf(f, "  \"ops\": [\n");
			for (int i = 0; i < g->nops; i++)
				fprintf(f, "    \"%s\"%s\n", g->ops[oorder[i]],
					i + 1 < g->nops ? "," : "");
			fprintf(f, "  ]%s", sep);
			break;
		}
	}
	fprintf(f, "}\n");
	if (fclose(f) != 0)
		abort();
	return buf;
}

char *random_graph_json(unsigned seed)
{
	gen *g = calloc(1, sizeof(*g));
	int nops;
	char *text;

	if (!g)
		return NULL;
	g->state = 0x5eed0000ULL ^ ((uint64_t)seed * 0x2545f4914f6cdd1dULL);
	nops = between(g, 1, MAX_OPS);
	for (int o = 0; o < nops; o++) {
		for (int tries = 0;; tries++) {
			int saved = g->nt, r = rnd(g, 100);
			int kind = tries >= 8 ? 0
				   : r < 24   ? 0
				   : r < 42   ? 1
				   : r < 56   ? 2
				   : r < 68   ? 3
				   : r < 78   ? 4
				   : r < 88   ? 5
					      : 6;

			if (one_op(g, kind))
				break;
			g->nt = saved;
		}
	}
	/* Intermediates nobody reads are outputs; so are a few that are read. */
	for (int t = 0; t < g->nt; t++)
		if (!g->t[t].input && (!g->t[t].read || chance(g, 15)))
			g->t[t].output = true;
	text = to_json(g, seed);
	for (int o = 0; o < g->nops; o++)
		free(g->ops[o]);
	free(g);
	return text;
}
