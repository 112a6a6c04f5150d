/*
 * verify.c: a kernel counts only after it matched the reference.
 *
 * Inputs are drawn from a seeded generator and stored in their dtypes; the
 * reference interpreter reads the same stored values. Every other tensor
 * is poisoned (NaN, or INT32_MIN for i32) before the run, so an element a
 * kernel forgets to write cannot pass. Each output is compared with the
 * reference by ||out - ref|| / ||ref||. Small graphs are checked whole;
 * for large ones a sub-grid of at least 1,000 elements per output is
 * checked, and the reference computes only what those elements need.
 *
 * The reference of the last graph and seed verified is kept: a search
 * verifies candidate after candidate of one graph on the same inputs, and
 * the reference, seconds for a large graph, is computed once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kgen_int.h"

#define WHOLE_CHECK_POINTS 50000000.0 /* reference work checked whole */
/* The interpreter's pace, and a bound on the time of a sampled reference,
 * both for one core of the 2-core VM of docs/benchmarks.md: there the
 * sampled references of the examples took up to 3 s (conv_pair, whose
 * windows are no contraction; the MLPs' products run as such, under 1 s). */
#define REFERENCE_POINTS_PER_S 1e7
#define SAMPLED_REFERENCE_S 40.0
#define SAMPLE_ELEMENTS 1000
#define SAMPLE_LAST_DIM 256
#define I32_POISON INT32_MIN
#define RACE_REPEATS 3 /* runs again of a plan whose kernels overlap */

typedef struct rng {
	uint64_t state;
} rng;

static uint64_t rng_next(rng *r)
{
	r->state ^= r->state >> 12;
	r->state ^= r->state << 25;
	r->state ^= r->state >> 27;
	return r->state * 0x2545f4914f6cdd1dULL;
}

/* Uniform in [-1, 1). */
static double rng_uniform(rng *r)
{
	return (double)(rng_next(r) >> 11) / (double)(1ULL << 52) - 1.0;
}

static uint16_t bf16_from_float(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return 0x7fc0;
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static double bf16_to_double(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

double kgen_host_store(void *buffer, enum sched_dtype dtype, int64_t i, double x)
{
	switch (dtype) {
	case SCHED_F16:
		((_Float16 *)buffer)[i] = (_Float16)x;
		return (double)((_Float16 *)buffer)[i];
	case SCHED_BF16:
		((uint16_t *)buffer)[i] = bf16_from_float((float)x);
		return bf16_to_double(((uint16_t *)buffer)[i]);
	case SCHED_I32:
		((int32_t *)buffer)[i] = (int32_t)x;
		return ((int32_t *)buffer)[i];
	default:
		((float *)buffer)[i] = (float)x;
		return ((float *)buffer)[i];
	}
}

double kgen_host_load(const void *buffer, enum sched_dtype dtype, int64_t i)
{
	switch (dtype) {
	case SCHED_F16: return (double)((const _Float16 *)buffer)[i];
	case SCHED_BF16: return bf16_to_double(((const uint16_t *)buffer)[i]);
	case SCHED_I32: return ((const int32_t *)buffer)[i];
	default: return ((const float *)buffer)[i];
	}
}

/* An element of an output, the i32 poison read as NaN (never written). */
static double load(const void *buffer, enum sched_dtype dtype, int64_t i)
{
	if (dtype == SCHED_I32 && ((const int32_t *)buffer)[i] == I32_POISON)
		return NAN;
	return kgen_host_load(buffer, dtype, i);
}

static void fill_input(const sched_tensor *t, void *buffer, double *values, rng *r)
{
	for (int64_t i = 0; i < t->size; i++) {
		double x = t->dtype == SCHED_I32 ? floor(rng_uniform(r) * 5) : rng_uniform(r);

		values[i] = kgen_host_store(buffer, t->dtype, i, x);
	}
}

static void poison(const sched_tensor *t, void *buffer)
{
	for (int64_t i = 0; i < t->size; i++)
		if (t->dtype == SCHED_I32)
			((int32_t *)buffer)[i] = I32_POISON;
		else
			kgen_host_store(buffer, t->dtype, i, NAN);
}

double kgen_tolerance(const sched_graph *graph, enum sched_dtype dtype)
{
	if (dtype == SCHED_F32)
		return graph->allow_tf32 ? 5e-3 : 1e-4;
	return 1e-2;
}

typedef struct check_run {
	const sched_graph *graph;
	void **host;
	double **values;
	bool **needed;
	rng rng;
	bool kept; /* values and needed are the kept reference's */
} check_run;

/* The kept reference: the values and checked elements of every tensor of
 * the graph "key" (with these tensors, in this order) on inputs "seed". */
static struct kept_reference {
	char key[SCHED_KEY_HEX + 1];
	unsigned seed;
	int ntensors;
	char **names;
	double **values;
	bool **needed;
} kept;

static void free_arrays(void **arrays, int n)
{
	for (int t = 0; arrays && t < n; t++)
		free(arrays[t]);
	free(arrays);
}

static void forget_reference(void)
{
	free_arrays((void **)kept.names, kept.ntensors);
	free_arrays((void **)kept.values, kept.ntensors);
	free_arrays((void **)kept.needed, kept.ntensors);
	kept = (struct kept_reference){0};
}

static bool is_kept(const sched_graph *g, unsigned seed)
{
	if (!kept.values || kept.seed != seed || kept.ntensors != g->ntensors ||
	    strcmp(kept.key, sched_graph_key(g)))
		return false;
	for (int t = 0; t < g->ntensors; t++)
		if (strcmp(kept.names[t], g->tensors[t].name))
			return false;
	return true;
}

/* Keeps the reference "c" computed (its arrays move to the cache). */
static void keep_reference(check_run *c, unsigned seed)
{
	const sched_graph *g = c->graph;
	char **names = calloc(g->ntensors, sizeof(char *));

	for (int t = 0; names && t < g->ntensors; t++)
		if (!(names[t] = strdup(g->tensors[t].name))) {
			free_arrays((void **)names, g->ntensors);
			return;
		}
	if (!names)
		return;
	forget_reference();
	kept = (struct kept_reference){.seed = seed, .ntensors = g->ntensors,
				       .names = names, .values = c->values,
				       .needed = c->needed};
	snprintf(kept.key, sizeof(kept.key), "%s", sched_graph_key(g));
	c->kept = true;
}

static void release_run(check_run *c)
{
	free_arrays(c->host, c->graph->ntensors);
	if (c->kept)
		return;
	free_arrays((void **)c->needed, c->graph->ntensors);
	sched_values_free(c->graph, c->values);
}

static int prepare_run(check_run *c, kgen_error *err)
{
	const sched_graph *g = c->graph;

	c->host = calloc(g->ntensors, sizeof(void *));
	if (!c->kept) {
		c->needed = calloc(g->ntensors, sizeof(bool *));
		c->values = sched_values_new(g);
	}
	for (int t = 0; c->host && c->values && t < g->ntensors; t++) {
		const sched_tensor *tensor = &g->tensors[t];

		if (!(c->host[t] = malloc(sched_tensor_bytes(g, t))))
			break;
		if (tensor->role == SCHED_INPUT)
			fill_input(tensor, c->host[t], c->values[t], &c->rng);
		else
			poison(tensor, c->host[t]);
	}
	for (int t = 0; c->host && c->values && t < g->ntensors; t++)
		if (!c->host[t])
			return kgen_fail(err, KGEN_ENOMEM, "out of memory for tensor '%s'",
					 g->tensors[t].name);
	return c->host && c->values && c->needed ? KGEN_OK
						 : kgen_fail(err, KGEN_ENOMEM, "out of memory");
}

static double reference_points(const sched_graph *g)
{
	double points = 0;

	for (int i = 0; i < g->nops; i++) {
		double p = 1;

		for (int v = 0; v < g->ops[i].nvars; v++)
			p *= (double)(g->ops[i].vars[v].hi - g->ops[i].vars[v].lo);
		points += p;
	}
	return points;
}

double kgen_reference_seconds(const sched_graph *graph)
{
	double points = reference_points(graph);

	return points <= WHOLE_CHECK_POINTS ? points / REFERENCE_POINTS_PER_S
					    : SAMPLED_REFERENCE_S;
}

/* Picks "n" distinct indices below "size" into "picked" (sorted marks). */
static void pick_indices(rng *r, int64_t size, int64_t n, bool *picked)
{
	for (int64_t chosen = 0; chosen < n;) {
		int64_t i = (int64_t)(rng_next(r) % (uint64_t)size);

		if (!picked[i]) {
			picked[i] = true;
			chosen++;
		}
	}
}

/* Marks a random sub-grid of at least SAMPLE_ELEMENTS elements of "t":
 * up to SAMPLE_LAST_DIM along the last dim, then as few as needed along
 * the others, so that the sample shares what it depends on. */
static int mark_sample(const sched_tensor *t, bool *needed, rng *r)
{
	bool *picked[SCHED_MAX_RANK] = {0};
	int64_t want = SAMPLE_ELEMENTS, index[SCHED_MAX_RANK] = {0};
	int rc = KGEN_OK;

	for (int d = t->rank - 1; d >= 0; d--) {
		int64_t limit = d == t->rank - 1 ? SAMPLE_LAST_DIM : want;
		int64_t n = t->shape[d] < limit ? t->shape[d] : limit;

		if (!(picked[d] = calloc(t->shape[d], sizeof(bool))))
			rc = KGEN_ENOMEM;
		else
			pick_indices(r, t->shape[d], n, picked[d]);
		want = (want + n - 1) / n;
	}
	for (int64_t offset = 0; rc == KGEN_OK && offset < t->size; offset++) {
		bool in = true;

		for (int d = 0; d < t->rank; d++)
			in &= picked[d][index[d]];
		needed[offset] = in;
		for (int d = t->rank - 1; d >= 0 && ++index[d] == t->shape[d]; d--)
			index[d] = 0;
	}
	for (int d = 0; d < t->rank; d++)
		free(picked[d]);
	return rc;
}

/* Evaluates the reference: whole, or what sampled output elements need. */
static int run_reference(check_run *c, kgen_error *err)
{
	const sched_graph *g = c->graph;
	int rc = KGEN_OK;

	if (reference_points(g) <= WHOLE_CHECK_POINTS)
		return sched_interp_run(g, c->values) < 0 ?
		       kgen_fail(err, KGEN_ENOMEM, "out of memory in the reference") : KGEN_OK;
	for (int t = 0; t < g->ntensors && rc == KGEN_OK; t++) {
		const sched_tensor *tensor = &g->tensors[t];

		if (tensor->role == SCHED_INPUT)
			continue;
		if (!(c->needed[t] = calloc(tensor->size, sizeof(bool))))
			rc = KGEN_ENOMEM;
		else if (tensor->role == SCHED_OUTPUT)
			rc = mark_sample(tensor, c->needed[t], &c->rng);
	}
	if (rc == KGEN_OK && sched_interp_mark_needed(g, c->needed) < 0)
		rc = KGEN_ENOMEM;
	if (rc == KGEN_OK && sched_interp_run_needed(g, c->values, c->needed) < 0)
		rc = KGEN_ENOMEM;
	return rc < 0 ? kgen_fail(err, rc, "out of memory in the reference") : KGEN_OK;
}

static void describe_element(const sched_tensor *t, int64_t offset, char *out,
			     size_t size)
{
	int64_t index[SCHED_MAX_RANK];
	int n = snprintf(out, size, "%s[", t->name);

	for (int d = t->rank - 1; d >= 0; d--) {
		index[d] = offset % t->shape[d];
		offset /= t->shape[d];
	}
	for (int d = 0; d < t->rank && n < (int)size; d++)
		n += snprintf(out + n, size - n, "%s%lld", d ? ", " : "",
			      (long long)index[d]);
	if (n < (int)size)
		snprintf(out + n, size - n, "]");
}

/* Compares output "t" with the reference over the checked elements. */
static void compare_output(check_run *c, int t, kgen_check *check)
{
	const sched_tensor *tensor = &c->graph->tensors[t];
	const bool *needed = c->needed[t];
	double diff = 0, norm = 0;
	char where[96];

	*check = (kgen_check){.tensor = t,
			      .tolerance = kgen_tolerance(c->graph, tensor->dtype)};
	for (int64_t i = 0; i < tensor->size; i++) {
		double out, ref = c->values[t][i];

		if (needed && !needed[i])
			continue;
		out = load(c->host[t], tensor->dtype, i);
		check->checked++;
		norm += isfinite(ref) ? ref * ref : 0;
		if (out == ref || (isnan(out) && isnan(ref)))
			continue; /* equal, infinities (an f16 overflow) included */
		if (isfinite(out) && isfinite(ref)) {
			diff += (out - ref) * (out - ref);
			continue;
		}
		if (check->problem[0])
			continue;
		describe_element(tensor, i, where, sizeof(where));
		if (isnan(out))
			snprintf(check->problem, sizeof(check->problem), "%s is %s", where,
				 tensor->dtype == SCHED_I32 ? "not written" :
				 "NaN (not written, or not a number)");
		else
			snprintf(check->problem, sizeof(check->problem),
				 "%s is %g where the reference is %g", where, out, ref);
	}
	check->rel_error = sqrt(diff) / fmax(sqrt(norm), 1e-30);
	check->passed = !check->problem[0] && check->rel_error <= check->tolerance;
	if (!check->passed && !check->problem[0])
		snprintf(check->problem, sizeof(check->problem),
			 "relative error %.3g above the tolerance %.0e",
			 check->rel_error, check->tolerance);
}

/* Whether each output of a run on c's inputs is the bytes of "first". */
static int same_outputs(check_run *c, void **first, kgen_error *err)
{
	const sched_graph *g = c->graph;

	for (int t = 0; t < g->ntensors; t++)
		if (first[t] && memcmp(first[t], c->host[t], sched_tensor_bytes(g, t)))
			return kgen_fail(err, KGEN_EWRONG, "a race: output '%s' changed "
					 "between two runs on the same inputs",
					 g->tensors[t].name);
	return KGEN_OK;
}

/* A plan whose kernels overlap (docs/design/sync.md) runs again on the same
 * inputs: an output that changes from run to run is a race. */
static int check_repeatable(kgen_program *prog, check_run *c, kgen_error *err)
{
	const sched_graph *g = c->graph;
	void **first = calloc(g->ntensors, sizeof(void *));
	int rc = first ? KGEN_OK : kgen_fail(err, KGEN_ENOMEM, "out of memory");

	for (int t = 0; rc == KGEN_OK && t < g->ntensors; t++) {
		if (g->tensors[t].role != SCHED_OUTPUT)
			continue;
		if ((first[t] = malloc(sched_tensor_bytes(g, t))))
			memcpy(first[t], c->host[t], sched_tensor_bytes(g, t));
		else
			rc = kgen_fail(err, KGEN_ENOMEM, "out of memory");
	}
	for (int run = 0; rc == KGEN_OK && run < RACE_REPEATS; run++) {
		for (int t = 0; t < g->ntensors; t++)
			if (g->tensors[t].role != SCHED_INPUT)
				poison(&g->tensors[t], c->host[t]);
		if ((rc = kgen_program_run(prog, c->host, err)) == KGEN_OK)
			rc = same_outputs(c, first, err);
	}
	free_arrays(first, g->ntensors);
	return rc;
}

int kgen_verify(kgen_program *prog, unsigned seed, kgen_check *checks,
		kgen_error *err)
{
	check_run c = {kgen_program_graph(prog), NULL, NULL, NULL,
		       {0x9e3779b97f4a7c15ULL ^ ((uint64_t)seed * 0xbf58476d1ce4e5b9ULL)},
		       false};
	int rc, n = 0, failed = -1;

	if (is_kept(c.graph, seed)) {
		c.values = kept.values;
		c.needed = kept.needed;
		c.kept = true;
	}
	if ((rc = prepare_run(&c, err)) == KGEN_OK &&
	    (rc = kgen_program_run(prog, c.host, err)) == KGEN_OK && !c.kept &&
	    (rc = run_reference(&c, err)) == KGEN_OK)
		keep_reference(&c, seed);
	for (int t = 0; rc == KGEN_OK && t < c.graph->ntensors; t++)
		if (c.graph->tensors[t].role == SCHED_OUTPUT) {
			compare_output(&c, t, &checks[n]);
			if (!checks[n].passed && failed < 0)
				failed = n;
			n++;
		}
	if (rc == KGEN_OK && failed >= 0)
		rc = kgen_fail(err, KGEN_EWRONG, "output '%s' does not match the "
			       "reference: %s",
			       c.graph->tensors[checks[failed].tensor].name,
			       checks[failed].problem);
	if (rc == KGEN_OK && kgen_program_overlaps(prog))
		rc = check_repeatable(prog, &c, err);
	release_run(&c);
	return rc;
}
