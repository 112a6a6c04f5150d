/*
 * mma_geometry.c: the geometry of tensor-core blockings: which products
 * fit, a blocking's threads, tiles, pads and shared memory, its repair to
 * fit, and a fused kernel's blocking fitted to its group.
 */
#include "kgen_int.h"

static void count_tensor(const sched_node *access, void *user)
{
	int *tensors = user;

	tensors[1] += access->tensor != tensors[0];
}

bool kgen_mma_product(const sched_graph *graph, int op, sched_contraction *c)
{
	int others[2];

	if (sched_op_batched_contraction(graph, op, c))
		return true;
	if (!sched_op_gathered_contraction(graph, op, c))
		return false;
	others[0] = c->b;
	others[1] = 0;
	sched_node_each_access(graph->ops[op].body->args[c->factor_b], count_tensor, others);
	return others[1] == 0;
}

const char *kgen_mma_operands_unfit(const sched_graph *graph, const sched_contraction *c)
{
	enum sched_dtype a = graph->tensors[c->a].dtype, b = graph->tensors[c->b].dtype;
	int per_16_bytes = 16 / sched_dtype_bytes(a);
	bool b_fits = c->gathered || (c->b_n == 1 && c->b_k % per_16_bytes == 0 &&
				      c->b0 % per_16_bytes == 0);

	if (a != b || (a != SCHED_F16 && a != SCHED_BF16 &&
		       (a != SCHED_F32 || !graph->allow_tf32)))
		return "factors both f16 or both bf16 (or both f32 where the graph allows tf32)";
	if (c->a_k != 1 || !b_fits || c->a_m % per_16_bytes || c->a0 % per_16_bytes ||
	    (c->batch > 1 && (c->a_batch % per_16_bytes || c->b_batch % per_16_bytes)))
		return "A with K contiguous and B with N contiguous, rows starting on "
		       "8 elements (4 of f32: 16 bytes), and so each product of a batch";
	return NULL;
}

int kgen_mma_threads(const kgen_mma *m)
{
	return m->bm / m->wm * (m->bn / m->wn) * 32;
}

int64_t kgen_mma_tiles(const sched_contraction *c, const kgen_mma *m)
{
	return (c->m + m->bm - 1) / m->bm * ((c->n + m->bn - 1) / m->bn) *
	       (c->batch > 1 ? c->batch : 1);
}

void kgen_mma_pads(const kgen_mma *m, int factor_bytes, int *a_pad, int *b_pad)
{
	int chunk = 16 / factor_bytes;

	*a_pad = m->rotated ? 0 : chunk;
	*b_pad = m->rotated ? 0 : factor_bytes == 4 || m->bn / chunk % 2 == 0 ? 8 : 0;
}

int kgen_mma_shared_bytes(const kgen_mma *m, int factor_bytes)
{
	int a_pad, b_pad, stages, c_tile = m->bm * (m->bn + 8) * 2;

	kgen_mma_pads(m, factor_bytes, &a_pad, &b_pad);
	stages = m->stages * (m->bm * (m->bk + a_pad) + m->bk * (m->bn + b_pad)) * factor_bytes;

	return stages > c_tile ? stages : c_tile;
}

void kgen_mma_repair(kgen_mma *m, int factor_bytes)
{
	while (kgen_mma_shared_bytes(m, factor_bytes) > KGEN_LOCAL_BYTES && m->stages > 2)
		m->stages--;
	while (kgen_mma_shared_bytes(m, factor_bytes) > KGEN_LOCAL_BYTES && m->bk > 16)
		m->bk /= 2;
}

int kgen_mma_factor_bytes(const sched_graph *graph, const kgen_kernel *kernel)
{
	sched_contraction c;

	for (int i = 0; i < kernel->nops; i++)
		if (kgen_mma_product(graph, kernel->ops[i], &c))
			return sched_dtype_bytes(graph->tensors[c.a].dtype);
	return 2;
}

/* The first stage of each branch of "group" that is a matrix product
 * runs on tensor cores in a fused kernel of "mma" (docs/design/kernels.md,
 * "Fused epilogues"): why one cannot, or NULL. All must be products of
 * one shape whose factors fit, each writing an M x N matrix of its own
 * (row-major from its first element: its target variables are m and n)
 * over a region within bm x bn, kept for the stages after it. */
static const char *fused_products_unfit(const sched_graph *graph, const sched_group *group,
					const kgen_mma *mma)
{
	sched_contraction first = {0}, c;

	for (int s = 0; s < group->nstages; s++) {
		const sched_stage *st = &group->stages[s];
		const sched_tensor *t = &graph->tensors[graph->ops[st->op].target];

		if (!sched_group_starts_branch(group, s))
			continue;
		if (!sched_op_contraction(graph, st->op, &c))
			return "each branch's first op a matrix product";
		if (kgen_mma_operands_unfit(graph, &c))
			return kgen_mma_operands_unfit(graph, &c);
		if (t->rank != 2 || c.c_m != t->shape[1] || c.c_n != 1 || c.c0 != 0)
			return "each product's C a row-major M x N matrix of its own";
		if (st->store == SCHED_STORE_INLINE)
			return "each product kept, not recomputed";
		if (st->extent[0] > mma->bm || st->extent[1] > mma->bn)
			return "each product's region within bm x bn under the kernel's tile";
		if (s > 0 && (c.m != first.m || c.n != first.n || c.k != first.k ||
			      c.a_m != first.a_m || c.b_k != first.b_k ||
			      graph->tensors[c.a].dtype != graph->tensors[first.a].dtype))
			return "products of one shape, strides and dtype";
		if (s == 0)
			first = c;
	}
	return NULL;
}

const char *kgen_fused_mma_unfit(const sched_graph *graph, const kgen_kernel *kernel)
{
	sched_group *group;
	const char *why;

	if (kgen_kernel_group(graph, kernel, true, &group, NULL) < 0)
		return "a fused group that is legal on cuda";
	why = fused_products_unfit(graph, group, &kernel->schedule.mma);
	sched_group_free(group);
	return why;
}

/* "mma" repaired to fit the first product's region, "extent": warps no
 * larger than the region rounded up to whole mma tiles (16 x 8), the
 * block the region rounded up to whole warps, then kgen_mma_repair; its
 * blocks follow the group's, not a raster. */
static kgen_mma fitted_mma(const int64_t *extent, const kgen_mma *mma, int factor_bytes)
{
	kgen_mma m = *mma;

	m.raster = 0;
	m.split_k = 0;
	m.wm = m.wm < (int)kgen_round_up(extent[0], 16) ? m.wm : (int)kgen_round_up(extent[0], 16);
	m.wn = m.wn < (int)kgen_round_up(extent[1], 8) ? m.wn : (int)kgen_round_up(extent[1], 8);
	m.bm = (int)kgen_round_up(extent[0], m.wm);
	m.bn = (int)kgen_round_up(extent[1], m.wn);
	kgen_mma_repair(&m, factor_bytes);
	return m;
}

bool kgen_fused_mma_fit(const sched_graph *graph, kgen_kernel *kernel, const kgen_mma *mma)
{
	int factor_bytes = kgen_mma_factor_bytes(graph, kernel);
	sched_group *group;
	kgen_mma m;

	kernel->schedule.mma = (kgen_mma){0};
	if (kernel->nops < 2 || kgen_kernel_group(graph, kernel, true, &group, NULL) < 0)
		return false;
	m = group->stages[0].rank == 2 ?
		fitted_mma(group->stages[0].extent, mma, factor_bytes) : (kgen_mma){0};
	sched_group_free(group);
	if (!m.bm || kgen_mma_threads(&m) > KGEN_MAX_THREADS ||
	    kgen_mma_shared_bytes(&m, factor_bytes) > KGEN_LOCAL_BYTES || m.bm > 256 ||
	    m.bn > 256)
		return false;
	kernel->schedule.mma = m;
	if (kgen_fused_mma_unfit(graph, kernel)) {
		kernel->schedule.mma = (kgen_mma){0};
		return false;
	}
	return true;
}
