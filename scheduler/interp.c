/*
 * interp.c: the reference interpreter, the oracle for every kernel.
 *
 * Each op is evaluated point by point over its domain, in double precision,
 * in dependence order: for every output element, the reducer folds the
 * body over the reduction variables, and the result is rounded to the
 * target's dtype as it is stored (tensors are storage). The only preparation is to turn each
 * access's indices into an element offset: affine indices become one linear
 * form in the variables; quasi-affine ones are evaluated per point. A
 * contraction runs as a matrix product over its flat K: the same products
 * added in the same order, without walking the expression. Marking what
 * sampled outputs need computes affine indices from linear forms too.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

#define MAX_VARS (2 * SCHED_MAX_RANK)

/* offset = base + sum of coef[k] * vars[var[k]], when linear; and each
 * index alike (dim_base, dim_coef per var), for bounds checks. */
typedef struct access_plan {
	const sched_node *node;
	bool linear;
	int nterms;
	int var[MAX_VARS];
	int64_t coef[MAX_VARS];
	int64_t base;
	int64_t stride[SCHED_MAX_RANK];
	int64_t dim_base[SCHED_MAX_RANK];
	int64_t dim_coef[SCHED_MAX_RANK][MAX_VARS];
} access_plan;

/* A contraction (sched_op_contraction) as a matrix product: its flat K
 * walks the reduction vars in the general loop's order, the last
 * fastest. */
typedef struct dot_plan {
	bool on;
	sched_contraction c;
} dot_plan;

typedef struct op_run {
	const sched_graph *graph;
	const sched_op *op;
	double **values;
	bool **needed;
	bool exact;  /* keep every float element in double, unrounded */
	access_plan *plans;
	dot_plan dot;
	int64_t vars[MAX_VARS];
} op_run;

/* Adds "scale" times the linear form of "node" to lin/base; false if the
 * node is not linear (has / or %). */
static bool linearize(const sched_node *node, int64_t scale, int64_t *lin,
		      int64_t *base)
{
	int64_t c;

	if (sched_node_int_const(node, &c)) {
		*base += scale * c;
		return true;
	}
	switch (node->kind) {
	case SCHED_NODE_VAR:
		lin[node->var] += scale;
		return true;
	case SCHED_NODE_UNARY:
		return linearize(node->args[0], -scale, lin, base);
	case SCHED_NODE_BINARY:
		if (node->op == SCHED_ADD || node->op == SCHED_SUB)
			return linearize(node->args[0], scale, lin, base) &&
			       linearize(node->args[1],
					 node->op == SCHED_ADD ? scale : -scale,
					 lin, base);
		if (node->op != SCHED_MUL)
			return false;
		if (sched_node_int_const(node->args[0], &c))
			return linearize(node->args[1], scale * c, lin, base);
		sched_node_int_const(node->args[1], &c);
		return linearize(node->args[0], scale * c, lin, base);
	default:
		return false;
	}
}

static void plan_access(const sched_node *access, void *user)
{
	op_run *run = user;
	const sched_tensor *t = &run->graph->tensors[access->tensor];
	access_plan *plan = &run->plans[access->access_id];
	int64_t lin[MAX_VARS] = {0};
	int64_t stride = 1;

	plan->node = access;
	plan->linear = true;
	for (int d = t->rank - 1; d >= 0; stride *= t->shape[d--]) {
		plan->stride[d] = stride;
		plan->linear &= linearize(access->args[d], stride, lin, &plan->base);
		linearize(access->args[d], 1, plan->dim_coef[d], &plan->dim_base[d]);
	}
	for (int v = 0; v < run->op->nvars; v++)
		if (lin[v]) {
			plan->var[plan->nterms] = v;
			plan->coef[plan->nterms++] = lin[v];
		}
}

static int64_t eval_index(const op_run *run, const sched_node *node)
{
	int64_t a, b, value = 0;

	switch (node->kind) {
	case SCHED_NODE_NUM:
		return (int64_t)node->num;
	case SCHED_NODE_VAR:
		return run->vars[node->var];
	case SCHED_NODE_UNARY:
		return -eval_index(run, node->args[0]);
	default:
		a = eval_index(run, node->args[0]);
		b = eval_index(run, node->args[1]);
		sched_int_binop(node->op, a, b, &value);
		return value;
	}
}

static int64_t access_offset(const op_run *run, const sched_node *access)
{
	const access_plan *plan = &run->plans[access->access_id];
	int64_t offset = plan->base;

	if (plan->linear) {
		for (int k = 0; k < plan->nterms; k++)
			offset += plan->coef[k] * run->vars[plan->var[k]];
		return offset;
	}
	offset = 0;
	for (int d = 0; d < access->nargs; d++)
		offset += plan->stride[d] * eval_index(run, access->args[d]);
	return offset;
}

static double sigmoid(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

static double apply_unary_func(int func, double x)
{
	switch (func) {
	case SCHED_EXP: return exp(x);
	case SCHED_LOG: return log(x);
	case SCHED_SQRT: return sqrt(x);
	case SCHED_RSQRT: return 1.0 / sqrt(x);
	case SCHED_TANH: return tanh(x);
	case SCHED_SIGMOID: return sigmoid(x);
	case SCHED_RELU: return x < 0 ? 0 : x;
	case SCHED_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
	case SCHED_GELU_TANH:
		return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) *
					     (x + 0.044715 * x * x * x)));
	case SCHED_SILU: return x * sigmoid(x);
	case SCHED_ERF: return erf(x);
	default: return fabs(x);
	}
}

static double eval(const op_run *run, const sched_node *node);

static double eval_call(const op_run *run, const sched_node *node)
{
	double a, b;

	if (node->op == SCHED_SELECT)
		return eval(run, node->args[eval(run, node->args[0]) != 0 ? 1 : 2]);
	a = eval(run, node->args[0]);
	if (node->nargs == 1)
		return apply_unary_func(node->op, a);
	b = eval(run, node->args[1]);
	if (node->op == SCHED_POW)
		return pow(a, b);
	return node->op == SCHED_MAX2 ? fmax(a, b) : fmin(a, b);
}

static double eval_binary(const op_run *run, const sched_node *node)
{
	double a = eval(run, node->args[0]), b;

	if (node->op == SCHED_AND && a == 0)
		return 0;
	if (node->op == SCHED_OR && a != 0)
		return 1;
	b = eval(run, node->args[1]);
	switch (node->op) {
	case SCHED_ADD: return a + b;
	case SCHED_SUB: return a - b;
	case SCHED_MUL: return a * b;
	case SCHED_DIV: return a / b;
	case SCHED_MOD: return a - b * floor(a / b);
	case SCHED_LT: return a < b;
	case SCHED_LE: return a <= b;
	case SCHED_GT: return a > b;
	case SCHED_GE: return a >= b;
	case SCHED_EQ: return a == b;
	case SCHED_NE: return a != b;
	default: return b != 0;
	}
}

static double eval(const op_run *run, const sched_node *node)
{
	switch (node->kind) {
	case SCHED_NODE_NUM:
		return node->num;
	case SCHED_NODE_VAR:
		return (double)run->vars[node->var];
	case SCHED_NODE_ACCESS:
		return run->values[node->tensor][access_offset(run, node)];
	case SCHED_NODE_CALL:
		return eval_call(run, node);
	case SCHED_NODE_UNARY:
		return node->op == SCHED_NEG ? -eval(run, node->args[0])
					     : eval(run, node->args[0]) == 0;
	default:
		return eval_binary(run, node);
	}
}

static double reducer_identity(enum sched_reducer reducer)
{
	switch (reducer) {
	case SCHED_RED_MAX: return -INFINITY;
	case SCHED_RED_MIN: return INFINITY;
	case SCHED_RED_PROD: return 1;
	default: return 0;
	}
}

static double reduce(enum sched_reducer reducer, double acc, double x)
{
	switch (reducer) {
	case SCHED_RED_MAX: return x > acc ? x : acc;
	case SCHED_RED_MIN: return x < acc ? x : acc;
	case SCHED_RED_PROD: return acc * x;
	default: return acc + x;
	}
}

/* Steps vars[first..last) like an odometer; false after the last point. */
static bool advance(const sched_op *op, int64_t *vars, int first, int last)
{
	for (int v = last - 1; v >= first; v--) {
		if (++vars[v] < op->vars[v].hi)
			return true;
		vars[v] = op->vars[v].lo;
	}
	return false;
}

static void plan_dot(op_run *run)
{
	run->dot.on = sched_op_contraction(run->graph, run->op->index, &run->dot.c);
}

/* The value of the target element at the current target variables. */
static double eval_element(op_run *run)
{
	const sched_op *op = run->op;
	double acc;

	if (op->reducer == SCHED_RED_NONE)
		return eval(run, op->body);
	acc = reducer_identity(op->reducer);
	for (int v = op->ntarget_vars; v < op->nvars; v++)
		run->vars[v] = op->vars[v].lo;
	do {
		acc = reduce(op->reducer, acc, eval(run, op->body));
	} while (advance(op, run->vars, op->ntarget_vars, op->nvars));
	return acc;
}

static double round_bf16(double x)
{
	float f = (float)x;
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return x;
	u = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
	memcpy(&f, &u, 4);
	return f;
}

/* What a tensor of "dtype" holds after "x" is stored in it: tensors are
 * storage, so the reference rounds where the kernels round. */
static double store_value(enum sched_dtype dtype, double x)
{
	switch (dtype) {
	case SCHED_F16: return (double)(_Float16)x;
	case SCHED_BF16: return round_bf16(x);
	case SCHED_I32: return trunc(x);
	default: return (double)(float)x;
	}
}

/* store_value, or in an exact run only the truncation of i32, which is
 * what the graph means rather than a loss of precision. */
static double store(const op_run *run, enum sched_dtype dtype, double x)
{
	if (run->exact && dtype != SCHED_I32)
		return x;
	return store_value(dtype, x);
}

/* Row m of a contraction, its needed columns "cols" (n of them): per
 * element the products of the general loop added in its order, but with
 * B's rows streamed (k outside, the columns inside). */
static void run_product_row(op_run *run, int64_t m, const int64_t *cols, int64_t n,
			    double *acc)
{
	const sched_contraction *c = &run->dot.c;
	const double *a = run->values[c->a] + c->a0 + m * c->a_m, *b = run->values[c->b] + c->b0;
	double *out = run->values[run->op->target] + c->c0 + m * c->c_m;
	enum sched_dtype dtype = run->graph->tensors[run->op->target].dtype;

	for (int64_t j = 0; j < n; j++)
		acc[j] = 0;
	for (int64_t k = 0; k < c->k; k++) {
		const double x = a[k * c->a_k], *row = b + k * c->b_k;

		for (int64_t j = 0; j < n; j++)
			acc[j] += x * row[cols[j] * c->b_n];
	}
	for (int64_t j = 0; j < n; j++)
		out[cols[j] * c->c_n] = store(run, dtype, acc[j]);
}

/* The columns of row m of a contraction's target that are needed (all,
 * without marks), into "cols"; how many. */
static int64_t needed_cols(const op_run *run, int64_t m, int64_t *cols)
{
	const sched_contraction *c = &run->dot.c;
	const bool *needed = run->needed ? run->needed[run->op->target] : NULL;
	int64_t n = 0;

	for (int64_t j = 0; j < c->n; j++)
		if (!needed || needed[c->c0 + m * c->c_m + j * c->c_n])
			cols[n++] = j;
	return n;
}

/* A contraction's needed elements, row by row. */
static int run_product(op_run *run)
{
	const sched_contraction *c = &run->dot.c;
	int64_t *cols = malloc(c->n * sizeof(int64_t)), n;
	double *acc = malloc(c->n * sizeof(double));

	for (int64_t m = 0; cols && acc && m < c->m; m++)
		if ((n = needed_cols(run, m, cols)))
			run_product_row(run, m, cols, n, acc);
	free(acc);
	free(cols);
	return cols && acc ? SCHED_OK : SCHED_ENOMEM;
}

/* Evaluates the target's elements, or only those marked needed. */
static int run_op(op_run *run)
{
	const sched_op *op = run->op;
	const sched_tensor *target = &run->graph->tensors[op->target];
	const bool *needed = run->needed ? run->needed[op->target] : NULL;
	double *out = run->values[op->target];

	if (run->dot.on)
		return run_product(run);
	memset(run->vars, 0, sizeof(run->vars));
	for (int64_t offset = 0; offset < target->size; offset++) {
		if (!needed || needed[offset]) {
			double value = eval_element(run);

			out[offset] = store(run, target->dtype, value);
		}
		advance(op, run->vars, 0, op->ntarget_vars);
	}
	return SCHED_OK;
}

/* Runs "fn" on op number "n" of the dependence order, its accesses
 * planned. */
static int with_op(const sched_graph *graph, int n, double **values,
		   bool **needed, bool exact, int (*fn)(op_run *run))
{
	const sched_op *op = &graph->ops[graph->order[n]];
	op_run run = {graph, op, values, needed, exact,
		      calloc(op->naccesses + 1, sizeof(access_plan)), {0}, {0}};
	int rc;

	if (!run.plans)
		return SCHED_ENOMEM;
	sched_node_each_access(op->body, plan_access, &run);
	plan_dot(&run);
	rc = fn(&run);
	free(run.plans);
	return rc;
}

int sched_interp_run(const sched_graph *graph, double **values)
{
	return sched_interp_run_needed(graph, values, NULL);
}

int sched_interp_run_needed(const sched_graph *graph, double **values,
			    bool **needed)
{
	int rc = SCHED_OK;

	for (int n = 0; n < graph->nops && rc == SCHED_OK; n++)
		rc = with_op(graph, n, values, needed, false, run_op);
	return rc;
}

int sched_interp_run_exact(const sched_graph *graph, double **values)
{
	int rc = SCHED_OK;

	for (int n = 0; n < graph->nops && rc == SCHED_OK; n++)
		rc = with_op(graph, n, values, NULL, true, run_op);
	return rc;
}

/* Index d of the access planned in "plan" at the current variables. */
static int64_t index_at(const op_run *run, const access_plan *plan, int d)
{
	int64_t i = plan->dim_base[d];

	if (!plan->linear)
		return eval_index(run, plan->node->args[d]);
	for (int v = 0; v < run->op->nvars; v++)
		i += plan->dim_coef[d][v] * run->vars[v];
	return i;
}

/* True if every index of the planned access is inside its tensor at the
 * current variables; stores the offset. */
static bool offset_inside(const op_run *run, const access_plan *plan, int64_t *offset)
{
	const sched_tensor *t = &run->graph->tensors[plan->node->tensor];

	*offset = 0;
	for (int d = 0; d < plan->node->nargs; d++) {
		int64_t i = index_at(run, plan, d);

		if (i < 0 || i >= t->shape[d])
			return false;
		*offset = *offset * t->shape[d] + i;
	}
	return true;
}

/* Marks what every access of the op reads at the current variables. */
static void mark_reads(const op_run *run)
{
	for (int a = 0; a < run->op->naccesses; a++) {
		const access_plan *plan = &run->plans[a];
		bool *needed = run->needed[plan->node->tensor];
		int64_t offset;

		if (needed && offset_inside(run, plan, &offset))
			needed[offset] = true;
	}
}

/* What a contraction's needed elements read: of A, the rows they are
 * in; of B, their columns. */
static int mark_product(op_run *run)
{
	const sched_contraction *c = &run->dot.c;
	bool *a = run->needed[c->a], *b = run->needed[c->b];
	int64_t *cols = malloc(c->n * sizeof(int64_t)), n;

	for (int64_t m = 0; cols && m < c->m; m++) {
		if (!(n = needed_cols(run, m, cols)))
			continue;
		for (int64_t k = 0; a && k < c->k; k++)
			a[c->a0 + m * c->a_m + k * c->a_k] = true;
		for (int64_t j = 0; b && j < n; j++)
			for (int64_t k = 0; k < c->k; k++)
				b[c->b0 + k * c->b_k + cols[j] * c->b_n] = true;
	}
	free(cols);
	return cols ? SCHED_OK : SCHED_ENOMEM;
}

/* Marks what the needed elements of the op's target read, at every point
 * of their reductions; accesses a select would skip are marked when they
 * are in bounds, which costs a little work and never misses any. */
static int mark_op(op_run *run)
{
	const sched_op *op = run->op;
	const sched_tensor *target = &run->graph->tensors[op->target];
	const bool *needed = run->needed[op->target];

	if (run->dot.on)
		return mark_product(run);
	memset(run->vars, 0, sizeof(run->vars));
	for (int64_t offset = 0; offset < target->size; offset++) {
		if (needed[offset]) {
			for (int v = op->ntarget_vars; v < op->nvars; v++)
				run->vars[v] = op->vars[v].lo;
			do {
				mark_reads(run);
			} while (advance(op, run->vars, op->ntarget_vars, op->nvars));
		}
		advance(op, run->vars, 0, op->ntarget_vars);
	}
	return SCHED_OK;
}

int sched_interp_mark_needed(const sched_graph *graph, bool **needed)
{
	int rc = SCHED_OK;

	for (int n = graph->nops - 1; n >= 0 && rc == SCHED_OK; n--)
		rc = with_op(graph, n, NULL, needed, false, mark_op);
	return rc;
}

double **sched_values_new(const sched_graph *graph)
{
	double **values = calloc(graph->ntensors, sizeof(double *));

	for (int t = 0; values && t < graph->ntensors; t++)
		if (!(values[t] = calloc(graph->tensors[t].size, sizeof(double)))) {
			sched_values_free(graph, values);
			return NULL;
		}
	return values;
}

void sched_values_free(const sched_graph *graph, double **values)
{
	for (int t = 0; values && t < graph->ntensors; t++)
		free(values[t]);
	free(values);
}
