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
			bytes += (double)graph->tensors[i].size *
				 sched_dtype_bytes(graph->tensors[i].dtype);
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

/* A fused kernel: the bytes of the tensors it reads from or writes to
 * memory (not those its members keep in block-local memory), the flops
 * of its members (a recomputed one counted once per read), its blocks. */
static double fused_ms(const sched_graph *graph, const kgen_kernel *kernel,
		       const kgen_peaks *peaks, int cuda)
{
	sched_group *group;
	bool *seen = calloc(graph->ntensors, sizeof(bool));
	double bytes = 0, flops = 0, cores = peaks->cores > 0 ? peaks->cores : 1;
	double items;

	if (!seen || kgen_kernel_group(graph, kernel, cuda != 0, &group, NULL) < 0) {
		free(seen);
		return INFINITY;
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
	bytes = seen_bytes(graph, seen);
	items = cuda || kernel->schedule.parallel > 0 ? (double)group->blocks : 1;
	sched_group_free(group);
	free(seen);
	return fmax(bytes / (peaks->bandwidth_gbs * 1e6),
		    flops / (peaks->gflops * fmin(items, cores) / cores * 1e6)) +
	       peaks->launch_ms;
}

/* A kernel of one op, or a library step: its product's flops (those of
 * its epilogue, if any, are not counted) over what its work items can
 * keep busy, the whole device for a library step; its bytes, without
 * the results between a library step's ops, which stay unwritten. */
double tuner_kernel_ms(const sched_graph *graph, const kgen_kernel *kernel,
		       const kgen_peaks *peaks, int cuda)
{
	const sched_op *op = &graph->ops[kernel->ops[0]];
	const sched_tensor *t = &graph->tensors[op->target];
	double share, memory_ms, compute_ms;

	if (kernel->nops > 1 && !kernel->schedule.library)
		return fused_ms(graph, kernel, peaks, cuda);
	share = kernel->schedule.library ? 1 : device_share(t, &kernel->schedule, peaks, cuda);
	memory_ms = kernel_bytes(graph, kernel, kernel->nops - 1) / (peaks->bandwidth_gbs * 1e6);
	compute_ms = kernel->schedule.mma.bm || (cuda && kernel->schedule.library) ? 0 :
		     (double)sched_op_flops(op) / (peaks->gflops * share * 1e6);
	return fmax(memory_ms, compute_ms) + peaks->launch_ms;
}

double tuner_optimistic_ms(const sched_graph *graph, const kgen_plan *plan,
			   const kgen_peaks *peaks, int cuda)
{
	double ms = 0;

	for (int k = 0; k < plan->nkernels; k++)
		ms += tuner_kernel_ms(graph, &plan->kernels[k], peaks, cuda);
	return ms;
}
