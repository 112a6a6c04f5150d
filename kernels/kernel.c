/*
 * kernel.c: what one kernel of a plan computes: its root op, its tiles,
 * its fused group (remembered), its products and its scratch memory.
 */
#include <stdlib.h>

#include "kgen_int.h"

static bool read_by_member(const sched_graph *graph, const kgen_kernel *kernel,
			   int tensor)
{
	for (int i = 0; i < kernel->nops; i++)
		if (graph->ops[kernel->ops[i]].target != tensor &&
		    kgen_op_touches(&graph->ops[kernel->ops[i]], tensor))
			return true;
	return false;
}

const sched_op *kgen_kernel_op(const sched_graph *graph, const kgen_kernel *kernel)
{
	int root = -1;

	for (int i = 0; i < kernel->nops; i++) {
		int op = kernel->ops[i];

		if ((root < 0 || op < root) &&
		    !read_by_member(graph, kernel, graph->ops[op].target))
			root = op;
	}
	return &graph->ops[root < 0 ? kernel->ops[0] : root];
}

const sched_tensor *kgen_kernel_target(const sched_graph *graph,
				       const kgen_kernel *kernel)
{
	return &graph->tensors[kgen_kernel_op(graph, kernel)->target];
}

int64_t kgen_kernel_tiles(const sched_graph *graph, const kgen_kernel *kernel)
{
	const sched_tensor *t = kgen_kernel_target(graph, kernel);
	int64_t n = 1;

	for (int d = 0; d < t->rank; d++)
		n *= (t->shape[d] + kernel->schedule.tile[d] - 1) / kernel->schedule.tile[d];
	return n;
}

int64_t kgen_tile_elements(const sched_graph *graph, const kgen_kernel *kernel)
{
	int64_t n = 1;

	for (int d = 0; d < kgen_kernel_target(graph, kernel)->rank; d++)
		n *= kernel->schedule.tile[d];
	return n;
}

/* What tells the analysis of "kernel" on "threads" apart from others on
 * its graph (sched_group_recall): its ops, tile, lanes and threads. */
static char *group_key(const sched_graph *graph, const kgen_kernel *kernel, int threads)
{
	sched_buf buf = {0};

	for (int i = 0; i < kernel->nops; i++)
		sched_buf_printf(&buf, "%d,", kernel->ops[i]);
	for (int d = 0; d < kgen_kernel_target(graph, kernel)->rank; d++)
		sched_buf_printf(&buf, "t%lld,", (long long)kernel->schedule.tile[d]);
	for (int l = 0; l < kernel->nlanes; l++)
		sched_buf_printf(&buf, "l%d,", kernel->lanes[l]);
	sched_buf_printf(&buf, "x%d", threads);
	return buf.str;
}

int kgen_kernel_group(const sched_graph *graph, const kgen_kernel *kernel,
		      bool cuda, sched_group **out, kgen_error *err)
{
	const sched_tensor *t = kgen_kernel_target(graph, kernel);
	int threads = 1;
	sched_group_spec spec = {kernel->nops, kernel->ops, kernel->schedule.tile,
				 kernel->nlanes ? kernel->lanes : NULL, 0,
				 KGEN_LOCAL_BYTES};
	sched_error why = {0};
	char *key;
	int rc;

	for (int d = 0; cuda && d < t->rank; d++)
		threads *= kernel->schedule.threads[d];
	if (kernel->schedule.mma.bm)
		threads = kgen_mma_threads(&kernel->schedule.mma);
	spec.threads = cuda ? threads : 0;
	key = group_key(graph, kernel, spec.threads);
	rc = sched_group_recall(graph, key, &spec, out, &why);
	free(key);
	if (rc < 0)
		return kgen_fail(err, rc == SCHED_ENOMEM ? KGEN_ENOMEM : KGEN_EPLAN,
				 "kernel '%s': %s", kernel->name, why.message);
	return KGEN_OK;
}

static bool same_product(const sched_graph *graph, const sched_contraction *a,
			 int a_target, const sched_contraction *b, int b_target)
{
	const sched_tensor *t = graph->tensors;

	return a->gathered == b->gathered && a->m == b->m && a->n == b->n &&
	       a->k == b->k && a->a_m == b->a_m &&
	       a->a_k == b->a_k && a->c_m == b->c_m && a->c_n == b->c_n &&
	       t[a->a].dtype == t[b->a].dtype && t[a->b].dtype == t[b->b].dtype &&
	       t[a_target].dtype == t[b_target].dtype;
}

bool kgen_kernel_products(const sched_graph *graph, const kgen_kernel *kernel,
			  sched_contraction *c)
{
	const sched_op *root = kgen_kernel_op(graph, kernel);

	if (!sched_op_gathered_contraction(graph, root->index, c))
		return false;
	for (int i = 0; i < kernel->nops; i++) {
		const sched_op *op = &graph->ops[kernel->ops[i]];
		sched_contraction other;

		if (!sched_op_gathered_contraction(graph, op->index, &other) ||
		    !same_product(graph, c, root->target, &other, op->target) ||
		    read_by_member(graph, kernel, op->target))
			return false;
	}
	return true;
}

/* A counter per tile, then the partial results of the tile's elements,
 * part after part. */
static size_t parts_scratch_bytes(const sched_graph *graph, const kgen_kernel *kernel,
				  size_t *zeroed)
{
	size_t tiles = (size_t)kgen_kernel_tiles(graph, kernel);

	*zeroed = tiles * sizeof(unsigned);
	return *zeroed + tiles * (size_t)kernel->schedule.parts *
			 (size_t)kgen_tile_elements(graph, kernel) * sizeof(float);
}

size_t kgen_kernel_scratch_bytes(const sched_graph *graph, const kgen_kernel *kernel,
				 size_t *zeroed)
{
	const kgen_mma *m = &kernel->schedule.mma;
	sched_contraction c;
	size_t tiles;

	*zeroed = 0;
	if (kernel->schedule.parts > 1)
		return parts_scratch_bytes(graph, kernel, zeroed);
	if (m->split_k < 2 || kernel->nops > 1 || !kgen_mma_product(graph, kernel->ops[0], &c))
		return 0;
	tiles = (size_t)kgen_mma_tiles(&c, m);
	*zeroed = tiles * sizeof(unsigned);
	return *zeroed + tiles * (size_t)m->split_k * (size_t)m->bm * (size_t)m->bn * sizeof(float);
}
