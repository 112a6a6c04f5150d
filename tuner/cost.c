/*
 * cost.c: NeoFlow's optimistic cost model of a plan (docs/design/tuning.md).
 *
 * A kernel cannot run faster than it takes to move the bytes it touches at
 * the device's peak bandwidth, nor faster than its flops at the compute its
 * parallel work can occupy: a kernel with 2 work items on 16 cores uses at
 * most 2/16 of the peak (a library step is taken to use the whole
 * device). Each launch costs one empty launch. The estimate
 * is a lower bound of the time only as far as the peaks are peaks: a probe
 * that measured less than the device can do makes it pessimistic. The
 * probe measures f32 multiply-adds, not tensor cores, so a product on
 * them (an "mma" schedule, a cuBLASLt step) is bounded by its bytes
 * alone.
 */
#include <math.h>
#include <stdlib.h>

#include "../kernels/kgen_int.h"
#include "tuner_int.h"

static void touch(const sched_node *access, void *seen)
{
	((bool *)seen)[access->tensor] = true;
}

/* The bytes of the tensors "seen". */
static double seen_bytes(const sched_graph *graph, const bool *seen)
{
	double bytes = 0;

	for (int i = 0; i < graph->ntensors; i++)
		if (seen[i])
			bytes += (double)sched_tensor_bytes(graph, i);
	return bytes;
}

/* Bytes of every distinct tensor the kernel's ops read or write, each
 * once, but the results its first "kept" ops keep to themselves. */
static double kernel_bytes(const sched_graph *graph, const kgen_kernel *kernel, int kept)
{
	bool *seen = calloc(graph->ntensors, sizeof(bool));
	double bytes;

	if (!seen)
		return 0;
	for (int i = 0; i < kernel->nops; i++) {
		seen[graph->ops[kernel->ops[i]].target] = true;
		sched_node_each_access(graph->ops[kernel->ops[i]].body, touch, seen);
	}
	for (int i = 0; i < kept; i++)
		seen[graph->ops[kernel->ops[i]].target] = false;
	bytes = seen_bytes(graph, seen);
	free(seen);
	return bytes;
}

/* The share of the device the kernel's work items can keep busy: on the
 * cpu the tiles of its first "parallel" output dims (OpenMP's collapsed
 * loops), on cuda the blocks of all its output dims, times the parts its
 * reductions are cut in. */
static double device_share(const sched_tensor *t, const kgen_schedule *s,
			   const kgen_peaks *peaks, int cuda)
{
	int dims = cuda ? t->rank : s->parallel;
	double items = cuda && s->parts > 1 ? s->parts : 1;
	double cores = peaks->cores > 0 ? peaks->cores : 1;

	for (int d = 0; d < dims; d++)
		items *= ceil((double)t->shape[d] / (double)s->tile[d]);
	return (items < cores ? items : cores) / cores;
}

/* A fused kernel's terms: the bytes of the tensors it reads from or
 * writes to memory (not those its members keep in block-local memory),
 * the flops of its members (a recomputed one counted once per read) over
 * the share of the device its blocks occupy. -1 when out of memory. */
static int fused_terms(const sched_graph *graph, const kgen_kernel *kernel,
		       const kgen_peaks *peaks, int cuda, tuner_cost_terms *t)
{
	sched_group *group;
	bool *seen = calloc(graph->ntensors, sizeof(bool));
	double flops = 0, cores = peaks->cores > 0 ? peaks->cores : 1;
	double items;

	if (!seen || kgen_kernel_group(graph, kernel, cuda != 0, &group, NULL) < 0) {
		free(seen);
		return -1;
	}
	for (int s = 0; s < group->nstages; s++) {
		const sched_op *op = &graph->ops[group->stages[s].op];
		bool on_tensor_cores = kernel->schedule.mma.bm && sched_group_starts_branch(group, s);

		sched_node_each_access(op->body, touch, seen);
		seen[op->target] = true;
		if (!on_tensor_cores)
			flops += (double)sched_op_flops(op) *
				 (group->stages[s].store == SCHED_STORE_INLINE ? op->naccesses : 1);
	}
	for (int s = 0; s < group->nstages; s++)
		if (group->stages[s].store == SCHED_STORE_LOCAL ||
		    group->stages[s].store == SCHED_STORE_INLINE)
			seen[graph->ops[group->stages[s].op].target] = false;
	t->bytes = seen_bytes(graph, seen);
	items = cuda || kernel->schedule.parallel > 0 ? (double)group->blocks : 1;
	t->flops = flops / (fmin(items, cores) / cores);
	sched_group_free(group);
	free(seen);
	return 0;
}

/* A kernel's terms (tuner_cost_terms, one launch). A kernel of one op,
 * or a library step: its product's flops (those of its epilogue, if
 * any, are not counted) over what its work items can keep busy, the
 * whole device for a library step; its bytes, without the results
 * between a library step's ops, which stay unwritten. -1 when out of
 * memory. */
static int kernel_terms(const sched_graph *graph, const kgen_kernel *kernel,
			const kgen_peaks *peaks, int cuda, tuner_cost_terms *t)
{
	const sched_op *op = &graph->ops[kernel->ops[0]];
	const sched_tensor *target = &graph->tensors[op->target];
	double share;

	t->launches = 1;
	if (kernel->nops > 1 && !kernel->schedule.library)
		return fused_terms(graph, kernel, peaks, cuda, t);
	share = kernel->schedule.library ?
			1 :
			device_share(target, &kernel->schedule, peaks, cuda);
	t->bytes = kernel_bytes(graph, kernel, kernel->nops - 1);
	t->flops = kernel->schedule.mma.bm || (cuda && kernel->schedule.library) ?
			   0 :
			   (double)sched_op_flops(op) / share;
	return 0;
}

double tuner_kernel_ms(const sched_graph *graph, const kgen_kernel *kernel,
		       const kgen_peaks *peaks, int cuda)
{
	tuner_cost_terms t;

	if (kernel_terms(graph, kernel, peaks, cuda, &t) < 0)
		return INFINITY;
	return fmax(t.bytes / (peaks->bandwidth_gbs * 1e6),
		    t.flops / (peaks->gflops * 1e6)) +
	       peaks->launch_ms;
}

double tuner_optimistic_ms(const sched_graph *graph, const kgen_plan *plan,
			   const kgen_peaks *peaks, int cuda)
{
	double ms = 0;

	for (int k = 0; k < plan->nkernels; k++)
		ms += tuner_kernel_ms(graph, &plan->kernels[k], peaks, cuda);
	return ms;
}

int tuner_cost_terms_of(const sched_graph *graph, const kgen_plan *plan,
			const kgen_peaks *peaks, int cuda, tuner_cost_terms *terms)
{
	*terms = (tuner_cost_terms){0};
	for (int k = 0; k < plan->nkernels; k++) {
		tuner_cost_terms t;

		if (kernel_terms(graph, &plan->kernels[k], peaks, cuda, &t) < 0)
			return -1;
		terms->bytes += t.bytes;
		terms->flops += t.flops;
		terms->launches += t.launches;
	}
	return 0;
}

double tuner_calibrated_ms(const tuner_cost_terms *t, const tuner_cost_rates *rates)
{
	return t->bytes * rates->ms_per_byte + t->flops * rates->ms_per_flop +
	       t->launches * rates->launch_ms;
}

/* The sums of the weighted normal equations of a fit of y = a m + c f. */
typedef struct normal_sums {
	double mm, mf, ff, my, fy;
	int n;
} normal_sums;

/* Each trial's time less its launches, weighted by its inverse square
 * (the relative error is what is minimized: a trial of 100 ms does not
 * outweigh one of 0.1 ms). Trials with no time left are skipped. */
static void add_trials(const tuner_cost_terms *terms, const double *ms, int n,
		       double launch_ms, normal_sums *s)
{
	*s = (normal_sums){0};
	for (int i = 0; i < n; i++) {
		double y = ms[i] - terms[i].launches * launch_ms;
		double m = terms[i].bytes, f = terms[i].flops, w;

		if (!isfinite(y) || y <= 0 || !isfinite(m) || !isfinite(f))
			continue;
		w = 1 / (y * y);
		s->mm += w * m * m;
		s->mf += w * m * f;
		s->ff += w * f * f;
		s->my += w * m * y;
		s->fy += w * f * y;
		s->n++;
	}
}

bool tuner_cost_fit(const tuner_cost_terms *terms, const double *ms, int n,
		    double launch_ms, tuner_cost_rates *rates)
{
	normal_sums s;
	double det, a, c;

	add_trials(terms, ms, n, launch_ms, &s);
	if (s.n < 2)
		return false;
	det = s.mm * s.ff - s.mf * s.mf;
	a = det > 1e-12 * s.mm * s.ff ? (s.my * s.ff - s.fy * s.mf) / det : -1;
	c = det > 1e-12 * s.mm * s.ff ? (s.fy * s.mm - s.my * s.mf) / det : -1;
	if (a <= 0 || c <= 0) {
		/* one term explains the times alone (or the two cannot be told
		 * apart): the one that fits them better, the other free */
		double a_only = s.mm > 0 ? s.my / s.mm : 0,
		       c_only = s.ff > 0 ? s.fy / s.ff : 0;
		double err_a = s.n - 2 * a_only * s.my + a_only * a_only * s.mm;
		double err_c = s.n - 2 * c_only * s.fy + c_only * c_only * s.ff;
		bool by_bytes = a_only > 0 && (c_only <= 0 || err_a <= err_c);

		a = by_bytes ? a_only : 0;
		c = by_bytes ? 0 : c_only;
	}
	if (a <= 0 && c <= 0)
		return false;
	*rates = (tuner_cost_rates){a, c, launch_ms};
	return true;
}

typedef struct ranked_value {
	double value;
	int index;
} ranked_value;

static int by_value(const void *x, const void *y)
{
	const ranked_value *a = x, *b = y;

	return (a->value > b->value) - (a->value < b->value);
}

/* The ranks of "v" (from 1; ties share their mean rank) into "rank";
 * -1 when out of memory. */
static int ranks(const double *v, int n, double *rank)
{
	ranked_value *r = malloc(n * sizeof(*r));

	if (!r)
		return -1;
	for (int i = 0; i < n; i++)
		r[i] = (ranked_value){v[i], i};
	qsort(r, n, sizeof(*r), by_value);
	for (int i = 0, j; i < n; i = j) {
		for (j = i + 1; j < n && r[j].value == r[i].value; j++)
			;
		for (int k = i; k < j; k++)
			rank[r[k].index] = (i + j + 1) / 2.0;
	}
	free(r);
	return 0;
}

/* Pearson's correlation of "x" and "y"; NAN when either is constant. */
static double pearson(const double *x, const double *y, int n)
{
	double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;

	for (int i = 0; i < n; i++) {
		mx += x[i] / n;
		my += y[i] / n;
	}
	for (int i = 0; i < n; i++) {
		sxy += (x[i] - mx) * (y[i] - my);
		sxx += (x[i] - mx) * (x[i] - mx);
		syy += (y[i] - my) * (y[i] - my);
	}
	return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

double tuner_spearman(const double *x, const double *y, int n)
{
	double *rx = n >= 3 ? malloc(2 * n * sizeof(double)) : NULL;
	double rho = NAN;

	if (rx && ranks(x, n, rx) == 0 && ranks(y, n, rx + n) == 0)
		rho = pearson(rx, rx + n, n);
	free(rx);
	return rho;
}
