/*
 * print_sync.c: the device side of tile sync (cuda; docs/design/sync.md).
 *
 * A kernel under sync is printed as a device function NAME_tile that
 * computes one tile, and this file adds the entry NAME around it:
 *
 *   extern "C" __global__ void NAME(tensors..., unsigned *ksync_in,
 *       unsigned *ksync_out, unsigned *ksync_self, unsigned kiteration)
 *
 * ksync_in: the semaphores of the dependence on the kernel before (this
 * kernel waits on them); ksync_out: those of the kernel after (it posts
 * to them); ksync_self[0]: its tile counter, ksync_self[1]: the flag its
 * first block raises for the next kernel's wait-kernel. A NULL pointer
 * turns its part off (a kernel timed alone). kiteration counts
 * the program's runs from 1, so nothing is reset between runs: a
 * semaphore waited for "target" posts is ready at target * kiteration,
 * compared modulo 2^32. Inline PTX and NVRTC's built-in atomicAdd; no
 * toolkit header.
 */
#include <stdlib.h>

#include "print_int.h"

static const char runtime[] =
	"#ifdef KGEN_EMULATED\n"
	"#error \"sync overlaps kernels, which the emulated backend does not: it needs a GPU\"\n"
	"#endif\n"
	"__device__ __forceinline__ unsigned ksync_load_acquire(const unsigned *p)\n"
	"{\n"
	"\tunsigned v;\n"
	"\tasm volatile(\"ld.acquire.gpu.global.u32 %0, [%1];\" : \"=r\"(v) : \"l\"(p) : \"memory\");\n"
	"\treturn v;\n"
	"}\n"
	"/* One thread spins until *sem reaches value (modulo 2^32). */\n"
	"__device__ __forceinline__ void ksync_wait(const unsigned *sem, unsigned value)\n"
	"{\n"
	"\twhile ((int)(ksync_load_acquire(sem) - value) < 0)\n"
	"\t\tasm volatile(\"nanosleep.u32 64;\");\n"
	"}\n"
	"/* After the block's writes: visible to the device, then one post. */\n"
	"__device__ __forceinline__ void ksync_post(unsigned *sem)\n"
	"{\n"
	"\tasm volatile(\"fence.acq_rel.gpu;\\n\\tred.release.gpu.global.add.u32 [%0], 1;\"\n"
	"\t\t     :: \"l\"(sem) : \"memory\");\n"
	"}\n"
	"__device__ __forceinline__ void ksync_raise(unsigned *flag, unsigned value)\n"
	"{\n"
	"\tasm volatile(\"st.release.gpu.global.u32 [%0], %1;\" :: \"l\"(flag), \"r\"(value)\n"
	"\t\t     : \"memory\");\n"
	"}\n"
	"#define floord(n, d) kfloordiv(n, d)\n"
	"#define min(a, b) kmin(a, b)\n"
	"#define max(a, b) kmaxi(a, b)\n";

typedef struct sync_printer {
	sched_buf *buf;
	const sched_graph *graph;
	const kgen_plan *plan;
	int k;
	const kgen_kernel *kernel;
	unsigned blocks, threads;
	sched_sync *waits_on;  /* the dependence on kernel k - 1, when synced */
	sched_sync *posts_to;  /* the dependence of kernel k + 1, when synced */
} sync_printer;

static const sched_sync_policy *policy_of(const sched_sync *sync, const kgen_kernel *consumer)
{
	return sync ? sched_sync_policy_of(sync, consumer->sync.policy) : NULL;
}

static const kgen_kernel *next_kernel(const sync_printer *p)
{
	return &p->plan->kernels[p->k + 1];
}

/* Tiles come from the counter when either side of a sync asks for it. */
static bool ordered(const sync_printer *p)
{
	return (p->waits_on && p->kernel->sync.ordered) ||
	       (p->posts_to && next_kernel(p)->sync.ordered);
}

static void print_wait_kernel(const sync_printer *p)
{
	sched_buf_printf(p->buf,
		"/* Holds the stream until the producer's first block has started. */\n"
		"extern \"C\" __global__ void %s_wait(const unsigned *started, unsigned kiteration)\n"
		"{\n\tksync_wait(started, kiteration);\n}\n", p->kernel->name);
}

static void print_params(const sync_printer *p)
{
	const sched_graph *g = p->graph;

	sched_buf_printf(p->buf, "extern \"C\" __global__ void __launch_bounds__(%u)\n%s(",
			 p->threads, p->kernel->name);
	for (int t = 0; t < g->ntensors; t++)
		sched_buf_printf(p->buf, "%s *t_%s,\n\t", kgen_ctype(g->tensors[t].dtype, true),
				 g->tensors[t].name);
	sched_buf_printf(p->buf, "unsigned *ksync_in, unsigned *ksync_out, "
			 "unsigned *ksync_self, unsigned kiteration)\n{\n");
}

/* The tile this block computes: the next from the counter, or its own. */
static void print_tile(const sync_printer *p)
{
	sched_buf_printf(p->buf, "\t__shared__ unsigned ktile_shared;\n"
			 "\tif (threadIdx.x == 0)\n\t\tktile_shared = ");
	if (ordered(p))
		sched_buf_printf(p->buf, "ksync_self ? atomicAdd(ksync_self, 1u) - "
				 "(kiteration - 1u) * %uu : blockIdx.x;\n", p->blocks);
	else
		sched_buf_printf(p->buf, "blockIdx.x;\n");
	if (p->posts_to && next_kernel(p)->sync.wait_kernel)
		sched_buf_printf(p->buf, "\tif (ksync_self && threadIdx.x == 0 && blockIdx.x == 0)\n"
				 "\t\tksync_raise(ksync_self + 1, kiteration);\n");
	sched_buf_printf(p->buf, "\t__syncthreads();\n\tconst unsigned ktile = ktile_shared;\n");
}

/* const int NAME0 = ..., NAME1 = ...: the tile's coordinates in "t". */
static void print_coordinates(const sync_printer *p, const sched_tiling *t,
			      const char *name, const char *indent)
{
	int64_t stride = 1;

	for (int d = t->rank - 1; d >= 0; d--) {
		int64_t tiles = sched_tiles_along(t, d);

		sched_buf_printf(p->buf, "%sconst int %s%d = (int)(ktile / %lldu %% %lldu);\n"
				 "%s(void)%s%d;\n", indent, name, d, (long long)stride,
				 (long long)tiles, indent, name, d);
		stride *= tiles;
	}
}

static void print_waits(const sync_printer *p)
{
	const sched_sync_policy *policy = policy_of(p->waits_on, p->kernel);

	if (p->kernel->sync.early_loads)
		kgen_print_mma_prefetch(p->buf, p->graph, p->kernel, p->waits_on->producer.tensor);
	sched_buf_printf(p->buf, "\tif (ksync_in && threadIdx.x == 0) {\n");
	print_coordinates(p, &p->waits_on->consumer, "c", "\t\t");
	sched_buf_printf(p->buf, "#define KSYNC_WAIT(s) ksync_wait(ksync_in + (s), %lldu * kiteration)\n"
			 "%s#undef KSYNC_WAIT\n\t}\n\t__syncthreads();\n",
			 (long long)policy->target, policy->wait);
}

static void print_post(const sync_printer *p)
{
	const sched_sync_policy *policy = policy_of(p->posts_to, next_kernel(p));

	sched_buf_printf(p->buf, "\t__syncthreads();\n\tif (ksync_out && threadIdx.x == 0) {\n");
	print_coordinates(p, &p->posts_to->producer, "p", "\t\t");
	sched_buf_printf(p->buf, "\t\tksync_post(ksync_out + (%s));\n\t}\n", policy->post);
}

static void print_call(const sync_printer *p)
{
	sched_buf_printf(p->buf, "\t%s_tile(", p->kernel->name);
	for (int t = 0; t < p->graph->ntensors; t++)
		sched_buf_printf(p->buf, "t_%s, ", p->graph->tensors[t].name);
	sched_buf_printf(p->buf, "ktile);\n");
}

static int analyse_neighbours(sync_printer *p)
{
	int rc = KGEN_OK;

	if (p->kernel->sync.on)
		rc = kgen_sync_analyse(p->graph, p->plan, p->k, &p->waits_on, NULL);
	if (rc == KGEN_OK && p->k + 1 < p->plan->nkernels && next_kernel(p)->sync.on)
		rc = kgen_sync_analyse(p->graph, p->plan, p->k + 1, &p->posts_to, NULL);
	if (rc == KGEN_OK && ((p->waits_on && !policy_of(p->waits_on, p->kernel)) ||
			      (p->posts_to && !policy_of(p->posts_to, next_kernel(p)))))
		rc = KGEN_EPLAN;
	return rc;
}

bool kgen_print_sync(sched_buf *buf, const sched_graph *graph, const kgen_plan *plan,
		     int k)
{
	sync_printer p = {buf, graph, plan, k, &plan->kernels[k], 0, 0, NULL, NULL};
	bool ok = analyse_neighbours(&p) == KGEN_OK;

	kgen_cuda_launch_shape(graph, p.kernel, &p.blocks, &p.threads);
	if (ok) {
		sched_buf_printf(buf, "\n/* ---- sync (docs/design/sync.md) ---- */\n%s", runtime);
		if (p.waits_on && p.kernel->sync.wait_kernel)
			print_wait_kernel(&p);
		print_params(&p);
		print_tile(&p);
		if (p.waits_on)
			print_waits(&p);
		print_call(&p);
		if (p.posts_to)
			print_post(&p);
		sched_buf_printf(buf, "}\n");
	}
	sched_sync_free(p.waits_on);
	sched_sync_free(p.posts_to);
	return ok;
}
