/*
 * print_cuda.c: a kernel as CUDA C, for NVRTC.
 *
 *   extern "C" __global__ void NAME(T0 *t_a, T1 *t_b, ...)  one pointer per
 *                                                          tensor, graph order
 *
 * One block per output tile (blockIdx.x walks the tiles row-major); the
 * block's threads are laid over the tile's dims. How one element's
 * reduction is split: "thread", each thread reduces its elements alone;
 * "warp", a warp per element, lanes split the reduction and combine with
 * shuffles; "block", the whole block per element, combined through shared
 * memory. With "parts" P, each element's reduction points are cut into P
 * ranges, and P blocks per tile (block b: tile b / P, part b % P) each
 * fold one range; their partial results go to the kernel's scratch
 * memory, after a counter per tile, and the last block of the tile to
 * count itself done resets the counter and combines the parts in their
 * order (so results do not depend on which block came last).
 */
#include <stdio.h>
#include <stdlib.h>

#include "print_int.h"

typedef struct cuda_kernel {
	kgen_printer pr;
	const kgen_kernel *kernel;
	const sched_tensor *target;
	sched_buf *buf;
	unsigned threads;
	bool wrapped;
} cuda_kernel;

static const char *var_name(const cuda_kernel *k, int v)
{
	return k->pr.op->vars[v].name;
}

static int64_t tiles_along(const cuda_kernel *k, int d)
{
	int64_t tile = k->kernel->schedule.tile[d];

	return (k->target->shape[d] + tile - 1) / tile;
}

/* A tensor-core kernel: a block per bm x bn tile of C. */
static void mma_launch_shape(const sched_graph *graph, const kgen_kernel *kernel,
			     int64_t *blocks, int64_t *threads)
{
	const kgen_mma *mma = &kernel->schedule.mma;
	sched_contraction c;

	if (!kgen_mma_product(graph, kgen_kernel_op(graph, kernel)->index, &c))
		return;
	*blocks = kgen_mma_tiles(&c, mma) * (mma->split_k > 1 ? mma->split_k : 1);
	*threads = kgen_mma_threads(mma);
}

void kgen_cuda_launch_shape(const sched_graph *graph, const kgen_kernel *kernel,
			    unsigned *blocks, unsigned *threads)
{
	const sched_tensor *t = kgen_kernel_target(graph, kernel);
	int64_t b = kgen_kernel_tiles(graph, kernel), n = 1;
	sched_group *group;

	for (int d = 0; d < t->rank; d++)
		n *= kernel->schedule.threads[d];
	if (kernel->nops > 1 && kgen_kernel_group(graph, kernel, true, &group, NULL) == 0) {
		b = group->blocks;
		sched_group_free(group);
	}
	if (kernel->schedule.mma.bm && kernel->nops > 1)
		n = kgen_mma_threads(&kernel->schedule.mma);
	else if (kernel->schedule.mma.bm)
		mma_launch_shape(graph, kernel, &b, &n);
	b *= kernel->schedule.parts > 1 ? kernel->schedule.parts : 1;
	*blocks = (unsigned)b;
	*threads = (unsigned)n;
}


static bool in_parts(const cuda_kernel *k)
{
	return k->kernel->schedule.parts > 1;
}

static int64_t tile_elements(const cuda_kernel *k)
{
	return kgen_tile_elements(k->pr.graph, k->kernel);
}

static void print_params(const cuda_kernel *k)
{
	const sched_graph *g = k->pr.graph;
	char bounds[16];

	snprintf(bounds, sizeof(bounds), "%u", k->threads);
	kgen_print_cuda_entry(k->buf, k->kernel->name, bounds, k->wrapped);
	for (int t = 0; t < g->ntensors; t++)
		sched_buf_printf(k->buf, "%s%s%s *__restrict__ t_%s", t ? ",\n\t" : "",
				 t == k->pr.op->target ? "" : "const ",
				 kgen_ctype(g->tensors[t].dtype, true), g->tensors[t].name);
	if (in_parts(k))
		sched_buf_printf(k->buf, ",\n\tfloat *__restrict__ scratch");
	kgen_print_cuda_entry_end(k->buf, k->wrapped);
}

/* With parts: the block's part of its tile, "whole" the tile's index,
 * r0 to r1 the part's reduction points, and where its partial results
 * go. */
static void print_part(const cuda_kernel *k)
{
	int parts = k->kernel->schedule.parts;
	int64_t points = sched_op_reduction_points(k->pr.op);
	long long chunk = (long long)((points + parts - 1) / parts);

	sched_buf_printf(k->buf, "\tconst idx_t part = tile %% %d;\n\ttile /= %d;\n"
			 "\tconst idx_t whole = tile;\n"
			 "\tconst idx_t r0 = part * %lld, r1 = kmin(r0 + %lld, %lld);\n"
			 "\tfloat *const partial = scratch + %lld + (whole * %d + part) * %lld;\n",
			 parts, parts, chunk, chunk, (long long)points,
			 (long long)kgen_kernel_tiles(k->pr.graph, k->kernel), parts,
			 (long long)tile_elements(k));
}

/* o_d: the origin of this block's tile; h_d: this thread's place in it. */
static void print_coordinates(const cuda_kernel *k)
{
	const kgen_schedule *s = &k->kernel->schedule;

	sched_buf_printf(k->buf, "\tidx_t tile = %s;\n\tint lane = threadIdx.x;\n",
			 kgen_cuda_tile(k->wrapped));
	if (in_parts(k))
		print_part(k);
	for (int d = k->target->rank - 1; d >= 0; d--)
		sched_buf_printf(k->buf, "\tconst idx_t o_%d = (tile %% %lld) * %lld;\n"
				 "\ttile /= %lld;\n\tconst int h_%d = lane %% %d;\n"
				 "\tlane /= %d;\n", d, (long long)tiles_along(k, d),
				 (long long)s->tile[d], (long long)tiles_along(k, d), d,
				 s->threads[d], s->threads[d]);
	sched_buf_printf(k->buf, "\t(void)tile;\n\t(void)lane;\n");
}

static void print_end(const cuda_kernel *k, int d, const char *what)
{
	sched_buf_printf(k->buf, "kmin(o_%d + %lld, %lld)%s", d,
			 (long long)k->kernel->schedule.tile[d],
			 (long long)k->target->shape[d], what);
}

static void print_store(const cuda_kernel *k, const char *indent, const char *value)
{
	sched_buf_printf(k->buf, "%st_%s[", indent, k->target->name);
	kgen_print_target_offset(k->buf, &k->pr);
	sched_buf_printf(k->buf, "] = %s%s);\n", kgen_store_open(k->target), value);
}

/* An element's reduced value: stored, or with parts its part's partial
 * result, at the element's row-major place in the tile. */
static void print_result(const cuda_kernel *k, const char *indent, const char *value)
{
	if (!in_parts(k))
		return print_store(k, indent, value);
	sched_buf_printf(k->buf, "%spartial[%s", indent, k->target->rank ? "" : "0");
	for (int d = 1; d < k->target->rank; d++)
		sched_buf_printf(k->buf, "(");
	for (int d = 0; d < k->target->rank; d++) {
		if (d)
			sched_buf_printf(k->buf, " * %lld + ",
					 (long long)k->kernel->schedule.tile[d]);
		sched_buf_printf(k->buf, "(v_%s - o_%d)%s", var_name(k, d), d, d ? ")" : "");
	}
	sched_buf_printf(k->buf, "] = %s;\n", value);
}

/* The element's reduction into "acc": over all its points, or with parts
 * over its part's, from "lane" on in steps of "step". */
static void print_reduction(const cuda_kernel *k, const char *lane, const char *step,
			    const char *indent)
{
	char first[64];

	snprintf(first, sizeof(first), in_parts(k) ? "r0 + %s" : "%s", lane);
	kgen_print_strided_reduction(k->buf, &k->pr, k->kernel->schedule.unroll, "acc",
				     NULL, first, step, in_parts(k) ? "r1" : NULL, indent);
}

/* Split "thread": each thread walks its elements of the tile, "vector"
 * consecutive ones along the last dim at a time. */
static void print_thread_split(const cuda_kernel *k)
{
	const kgen_schedule *s = &k->kernel->schedule;
	int last = k->target->rank - 1;

	for (int d = 0; d < last; d++) {
		sched_buf_printf(k->buf, "\tfor (idx_t v_%s = o_%d + h_%d; v_%s < ",
				 var_name(k, d), d, d, var_name(k, d));
		print_end(k, d, "; ");
		sched_buf_printf(k->buf, "v_%s += %d)\n", var_name(k, d), s->threads[d]);
	}
	sched_buf_printf(k->buf, "\t{\n");
	if (last >= 0) {
		sched_buf_printf(k->buf, "\tfor (idx_t c = o_%d + h_%d * %d; c < ", last,
				 last, s->vector);
		print_end(k, last, "; ");
		sched_buf_printf(k->buf, "c += %d)\n\t#pragma unroll\n\tfor (int w = 0; w < %d; w++) {\n"
				 "\t\tconst idx_t v_%s = c + w;\n\t\tif (v_%s >= ",
				 s->threads[last] * s->vector, s->vector,
				 var_name(k, last), var_name(k, last));
		print_end(k, last, ")\n\t\t\tbreak;\n");
	} else {
		sched_buf_printf(k->buf, "\t{\n");
	}
	sched_buf_printf(k->buf, "\t\t{\n");
	if (k->pr.op->reducer == SCHED_RED_NONE) {
		sched_buf_printf(k->buf, "\t\t\tconst float acc = ");
		kgen_print_value(k->buf, &k->pr, k->pr.op->body);
		sched_buf_printf(k->buf, ";\n");
	} else {
		print_reduction(k, "0", "1", "\t\t\t");
	}
	print_result(k, "\t\t\t", "acc");
	sched_buf_printf(k->buf, "\t\t}\n\t}\n\t}\n");
}

/* Sets the target variables from "e", a flat index into the tile, and
 * skips elements past the tensor's edge. */
static void print_element_decode(const cuda_kernel *k)
{
	const kgen_schedule *s = &k->kernel->schedule;
	int64_t stride = 1;

	for (int d = k->target->rank - 1; d >= 0; d--) {
		sched_buf_printf(k->buf, "\t\tconst idx_t v_%s = o_%d + (e / %lld) %% %lld;\n"
				 "\t\tif (v_%s >= %lld)\n\t\t\tcontinue;\n",
				 var_name(k, d), d, (long long)stride,
				 (long long)s->tile[d], var_name(k, d),
				 (long long)k->target->shape[d]);
		stride *= s->tile[d];
	}
}

/* Split "warp": warp w takes the tile's elements w, w + warps, ...; its
 * lanes split each reduction and combine by shuffles. */
static void print_warp_split(const cuda_kernel *k)
{
	sched_buf_printf(k->buf, "\tconst int warp = threadIdx.x / 32, wlane = threadIdx.x %% 32;\n"
			 "\tfor (idx_t e = warp; e < %lld; e += %u) {\n",
			 (long long)tile_elements(k), k->threads / 32);
	print_element_decode(k);
	print_reduction(k, "wlane", "32", "\t\t");
	sched_buf_printf(k->buf, "\t\tfor (int offset = 16; offset > 0; offset /= 2) {\n"
			 "\t\t\tconst float x = __shfl_down_sync(0xffffffffu, acc, offset);\n\t\t\t");
	kgen_print_combine(k->buf, k->pr.op->reducer, "acc", "x");
	sched_buf_printf(k->buf, "\n\t\t}\n\t\tif (wlane == 0)\n\t\t{\n");
	print_result(k, "\t\t\t", "acc");
	sched_buf_printf(k->buf, "\t\t}\n\t}\n");
}

static unsigned power_of_two_below(unsigned n)
{
	unsigned p = 1;

	while (p * 2 <= n)
		p *= 2;
	return p;
}

/* Split "block": the block takes the tile's elements one by one, its
 * threads split the reduction and combine through shared memory. */
static void print_block_split(const cuda_kernel *k)
{
	unsigned p = power_of_two_below(k->threads);

	sched_buf_printf(k->buf, "\t__shared__ float shared[%u];\n"
			 "\tfor (idx_t e = 0; e < %lld; e++) {\n", k->threads,
			 (long long)tile_elements(k));
	print_element_decode(k);
	print_reduction(k, "threadIdx.x", "blockDim.x", "\t\t");
	sched_buf_printf(k->buf, "\t\tshared[threadIdx.x] = acc;\n\t\t__syncthreads();\n");
	if (p < k->threads) {
		char folded[64];

		snprintf(folded, sizeof(folded), "shared[threadIdx.x - %u]", p);
		sched_buf_printf(k->buf, "\t\tif (threadIdx.x >= %u)\n\t\t{\n\t\t\t", p);
		kgen_print_combine(k->buf, k->pr.op->reducer, folded,
				   "shared[threadIdx.x]");
		sched_buf_printf(k->buf, "\n\t\t}\n\t\t__syncthreads();\n");
	}
	sched_buf_printf(k->buf, "\t\tfor (unsigned s = %u; s > 0; s /= 2) {\n"
			 "\t\t\tif (threadIdx.x < s)\n\t\t\t{\n\t\t\t\t", p / 2);
	kgen_print_combine(k->buf, k->pr.op->reducer, "shared[threadIdx.x]",
			   "shared[threadIdx.x + s]");
	sched_buf_printf(k->buf, "\n\t\t\t}\n\t\t\t__syncthreads();\n\t\t}\n"
			 "\t\tif (threadIdx.x == 0)\n\t\t{\n");
	print_result(k, "\t\t\t", "shared[0]");
	sched_buf_printf(k->buf, "\t\t}\n\t\t__syncthreads();\n\t}\n");
}

/* With parts, after the block's partial results: the last block of the
 * tile to count itself done resets the count and combines the tile's
 * parts in their order, the others leave. */
static void print_parts_combine(const cuda_kernel *k)
{
	int parts = k->kernel->schedule.parts;

	sched_buf_printf(k->buf,
		"\t__threadfence();\n"
		"\t__syncthreads();\n"
		"\t{\n"
		"\t__shared__ int last;\n"
		"\tunsigned *const done = (unsigned *)scratch + whole;\n"
		"\tif (threadIdx.x == 0) {\n"
		"\t\tlast = atomicAdd(done, 1u) == %du;\n"
		"\t\tif (last)\n"
		"\t\t\t*done = 0;\n"
		"\t}\n"
		"\t__syncthreads();\n"
		"\tif (!last)\n"
		"\t\treturn;\n"
		"\t__threadfence();\n"
		"\tconst float *const parts = partial - part * %lld;\n"
		"\tfor (idx_t e = threadIdx.x; e < %lld; e += blockDim.x) {\n",
		parts - 1, (long long)tile_elements(k), (long long)tile_elements(k));
	print_element_decode(k);
	sched_buf_printf(k->buf,
		"\t\tfloat acc = __ldcg(parts + e);\n"
		"\t\tfor (int s = 1; s < %d; s++) {\n"
		"\t\t\tconst float x = __ldcg(parts + s * %lld + e);\n\t\t\t",
		parts, (long long)tile_elements(k));
	kgen_print_combine(k->buf, k->pr.op->reducer, "acc", "x");
	sched_buf_printf(k->buf, "\n\t\t}\n");
	print_store(k, "\t\t", "acc");
	sched_buf_printf(k->buf, "\t}\n\t}\n");
}

/* A kernel of one op from its tiles. */
static char *print_tiled(const sched_graph *graph, const kgen_kernel *kernel, bool wrapped)
{
	const sched_op *op = kgen_kernel_op(graph, kernel);
	sched_buf buf = {0};
	cuda_kernel k = {{graph, op, NULL, NULL}, kernel, &graph->tensors[op->target], &buf, 0,
			 wrapped};
	unsigned blocks;

	kgen_cuda_launch_shape(graph, kernel, &blocks, &k.threads);
	kgen_print_helpers(&buf, true, kgen_wide_indices(graph));
	kgen_print_header(&buf, &k.pr, kernel->name);
	print_params(&k);
	print_coordinates(&k);
	if (kernel->schedule.split == KGEN_SPLIT_WARP)
		print_warp_split(&k);
	else if (kernel->schedule.split == KGEN_SPLIT_BLOCK)
		print_block_split(&k);
	else
		print_thread_split(&k);
	if (in_parts(&k))
		print_parts_combine(&k);
	sched_buf_printf(&buf, "}\n");
	return buf.str;
}

static char *print_body(const sched_graph *graph, const kgen_kernel *kernel, bool wrapped)
{
	if (kernel->nops > 1)
		return kgen_print_fused(graph, kernel, true, wrapped);
	if (kernel->schedule.mma.bm)
		return kgen_print_mma(graph, kernel, wrapped);
	return print_tiled(graph, kernel, wrapped);
}

char *kgen_print_cuda(const sched_graph *graph, const kgen_plan *plan, int index)
{
	bool wrapped = kgen_sync_wraps(plan, index);
	char *body;
	sched_buf buf = {0};

	if (plan->kernels[index].schedule.library)
		return kgen_print_library_cuda(graph, &plan->kernels[index]);
	body = print_body(graph, &plan->kernels[index], wrapped);
	if (!body || !wrapped)
		return body;
	sched_buf_printf(&buf, "%s", body);
	free(body);
	if (!kgen_print_sync(&buf, graph, plan, index))
		sched_buf_release(&buf);
	return buf.str;
}
