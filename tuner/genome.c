/*
 * genome.c: the genome of the search (docs/design/tuning.md, "The genome").
 *
 * The genome has one gene per decision of each op's schedule: a tile and
 * a thread count per output dim, the parallel loops, unroll, vector width,
 * reduction split and parts, each an index into a finite domain; for a matrix
 * product, whether it is a library step (where offered) and its blocking
 * (micro-kernels on the cpu, tensor cores on cuda); on cuda, the
 * sync genes: how the kernel rooted at each op overlaps the kernel before
 * it (docs/design/sync.md); then the fusion genes (fuse.c): which ops share a
 * kernel, and how. A fused
 * kernel runs on the schedule of its root. Decoding repairs what would be
 * illegal (threads per block, threads within tiles, whole warps, the
 * cpu's tile of accumulators, fusions the planner refuses, sync policies
 * the tile dependence does not offer), so every genome becomes a plan
 * kgen accepts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "genome.h"

#define PARTS_MAX_OUTPUT 65536

const int64_t genome_unrolls[4] = {1, 2, 4, 8};
const int64_t genome_vectors[4] = {1, 2, 4, 8};
const int64_t genome_parts[4] = {1, 4, 16, 64}; /* of a reduction */
const int64_t genome_mma_sides[3] = {32, 64, 128};

static const int64_t micro_mrs[] = {0, 4, 6, 8, 12, 14};
static const int64_t micro_nrs[] = {8, 16, 32, 48, 64};
static const int64_t micro_kcs[] = {64, 128, 256, 512, 0};
static const int64_t micro_blocks[] = {1, 4, 8, 16, 32};
static const int64_t mma_bms[] = {0, 64, 128};
static const int64_t mma_splits[] = {1, 2, 4};
static const int blocking_domain[][BLOCKING_GENES] = {
	[BLOCKING_MICRO] = {6, 5, 5, 5, 5, 2, 1, 1, 1},
	[BLOCKING_MMA] = {3, 3, 2, 2, 2, 3, 2, 2, 3},
};
static const int sync_domain[SYNC_GENES] = {SCHED_SYNC_KINDS + 1, 2, 2, 2};

static void add_choice(int64_t *values, int *n, int64_t value)
{
	for (int i = 0; i < *n; i++)
		if (values[i] == value)
			return;
	values[(*n)++] = value;
}

/* Tiles of a dim: the powers of two up to 256 (and the extent), the
 * extent itself (an exactly-sized tile; whole rows for fused groups), the
 * default;
 * threads: the powers of two up to 256 and the default on cuda, the
 * default alone on the cpu, whose code has no threads per block (a gene
 * that changes no code would only measure the same kernel again). */
static void dim_choices(kernel_space *ks, int d, int64_t extent,
			const kgen_schedule *def, bool cuda)
{
	for (int64_t t = 1; t <= extent && t <= 256; t *= 2)
		add_choice(ks->tiles[d], &ks->ntiles[d], t);
	add_choice(ks->tiles[d], &ks->ntiles[d], extent);
	add_choice(ks->tiles[d], &ks->ntiles[d], def->tile[d]);
	for (int64_t t = 1; cuda && t <= 256; t *= 2)
		add_choice(ks->threads[d], &ks->nthreads[d], t);
	add_choice(ks->threads[d], &ks->nthreads[d], def->threads[d]);
}

/* The blocking genes kernel k of the base gets, with its product. */
static enum blocking blocking_of(const tuner_genome *g, int k, sched_contraction *product)
{
	const sched_op *op = kgen_kernel_op(g->graph, &g->base->kernels[k]);

	if (!g->cuda)
		return sched_op_gathered_contraction(g->graph, op->index, product)
		       ? BLOCKING_MICRO : BLOCKING_NONE;
	if (!kgen_mma_product(g->graph, op->index, product))
		return BLOCKING_NONE;
	return kgen_mma_operands_unfit(g->graph, product) ? BLOCKING_NONE : BLOCKING_MMA;
}

/* How many of genome_parts op's reduction can be cut in: at most
 * one point per part; none for an output of more than PARTS_MAX_OUTPUT
 * elements, whose tiles are blocks enough (and whose partial results
 * would take much memory). */
static int parts_domain(const sched_graph *graph, const sched_op *op)
{
	int n = 1;

	if (graph->tensors[op->target].size > PARTS_MAX_OUTPUT)
		return 1;
	while (n < 4 && genome_parts[n] <= sched_op_reduction_points(op))
		n++;
	return n;
}

/* Where the genes of a kernel of rank "r" sit from gene "first" on: its
 * tiles, threads, parallel, unroll, vector, split and parts; then its
 * library gene, if any; then its blocking genes, if any. */
static kernel_genes kernel_layout(int first, int r, bool library, enum blocking blocking)
{
	kernel_genes at = {.first = first, .tile = first, .threads = first + r};
	int next = first + 2 * r;

	at.parallel = next++;
	at.unroll = next++;
	at.vector = next++;
	at.split = next++;
	at.parts = next++;
	at.library = library ? next++ : -1;
	at.blocking = blocking ? next : -1;
	at.end = blocking ? next + BLOCKING_GENES : next;
	return at;
}

/* Kernel k's place in the layout, from gene "first" on (its blocking
 * first, which decides how many genes it has); the next free gene. */
static int place_kernel(tuner_genome *g, int k, int first, bool library)
{
	kernel_space *ks = &g->kernels[k];
	const sched_op *op = kgen_kernel_op(g->graph, &g->base->kernels[k]);

	ks->rank = g->graph->tensors[op->target].rank;
	ks->reduces = op->reducer != SCHED_RED_NONE;
	ks->blocking = blocking_of(g, k, &ks->product);
	ks->factor_bytes = ks->blocking ?
		sched_dtype_bytes(g->graph->tensors[ks->product.a].dtype) : 0;
	ks->library = library && !kgen_library_unfit(g->graph, op->index, g->cuda);
	ks->at = kernel_layout(first, ks->rank, ks->library, ks->blocking);
	return ks->at.end;
}

/* The domains of kernel k's genes. */
static void kernel_domains(tuner_genome *g, int k)
{
	const kgen_kernel *kernel = &g->base->kernels[k];
	const sched_op *op = kgen_kernel_op(g->graph, kernel);
	const sched_tensor *t = &g->graph->tensors[op->target];
	kernel_space *ks = &g->kernels[k];
	const kernel_genes *at = &ks->at;
	/* the split of a reduction among threads, and among blocks: cuda only */
	bool cut = ks->reduces && g->cuda;

	for (int d = 0; d < ks->rank; d++) {
		dim_choices(ks, d, t->shape[d], &kernel->schedule, g->cuda);
		g->domain[at->tile + d] = ks->ntiles[d];
		g->domain[at->threads + d] = ks->nthreads[d];
	}
	g->domain[at->parallel] = ks->rank + 1;
	g->domain[at->unroll] = 4;
	g->domain[at->vector] = 4;
	g->domain[at->split] = cut ? 3 : 1;
	g->domain[at->parts] = cut ? parts_domain(g->graph, op) : 1;
	if (ks->library)
		g->domain[at->library] = 2;
	for (int i = 0; ks->blocking && i < BLOCKING_GENES; i++)
		g->domain[at->blocking + i] = blocking_domain[ks->blocking][i];
}

/* The genome's layout, from the default plan in g->base: each kernel's
 * genes, then the sync genes, then the fusion genes; and their domains. */
static int build_layout(tuner_genome *g, bool library)
{
	int gene = 0;

	g->nkernels = g->base->nkernels;
	if (!(g->kernels = calloc(g->nkernels + 1, sizeof(kernel_space))))
		return -1;
	for (int k = 0; k < g->nkernels; k++)
		gene = place_kernel(g, k, gene, library);
	g->first_sync = gene;
	g->first_fusion = g->first_sync + SYNC_GENES * g->nkernels;
	g->nfusion = tuner_fusion_genes(g->fusion);
	g->ngenes = g->first_fusion + g->nfusion;
	g->schedules = calloc(g->nkernels + 1, sizeof(kgen_schedule));
	g->domain = calloc(g->ngenes + 1, sizeof(int));
	g->defaults = calloc(g->ngenes + 1, sizeof(int));
	g->fused = calloc(g->ngenes + 1, sizeof(int));
	if (!g->schedules || !g->domain || !g->defaults || !g->fused)
		return -1;
	for (int k = 0; k < g->nkernels; k++)
		kernel_domains(g, k);
	for (int i = 0; i < SYNC_GENES * g->nkernels; i++)
		g->domain[g->first_sync + i] = g->cuda ? sync_domain[i % SYNC_GENES] : 1;
	for (int i = 0; i < g->nfusion; i++)
		g->domain[g->first_fusion + i] = tuner_fusion_domain(g->fusion, i);
	return 0;
}

int genome_sync(const tuner_genome *g, int b)
{
	return g->first_sync + SYNC_GENES * b;
}

int genome_base_kernel(const tuner_genome *g, int op)
{
	for (int k = 0; k < g->nkernels; k++)
		if (g->base->kernels[k].ops[0] == op)
			return k;
	return -1;
}

int genome_index_of(const int64_t *values, int n, int64_t value)
{
	for (int i = 0; i < n; i++)
		if (values[i] == value)
			return i;
	return -1;
}

static int64_t smaller(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* The micro-kernel of genes "at", repaired: the accumulators, the B
 * vectors and an A value fit the vector registers (32 with AVX-512, 16
 * else), kc within K, mc and nc within M and N rounded up. */
static kgen_micro decode_micro(const kernel_space *ks, const int *at)
{
	const sched_contraction *c = &ks->product;
	kgen_micro m = {.mr = (int)micro_mrs[at[0]], .nr = (int)micro_nrs[at[1]]};
	int registers = kgen_cpu_vector_floats() == 16 ? 32 : 16, width;

	if (!m.mr)
		return (kgen_micro){0};
	width = kgen_micro_vector_floats(m.nr);
	while (2 * (m.nr / width) + 1 > registers)
		m.nr /= 2;
	if (m.mr > (registers - 1 - m.nr / width) / (m.nr / width))
		m.mr = (registers - 1 - m.nr / width) / (m.nr / width);
	m.kc = (int)(micro_kcs[at[2]] && micro_kcs[at[2]] < c->k ? micro_kcs[at[2]] : c->k);
	m.mc = (int)smaller(micro_blocks[at[3]] * m.mr, kgen_round_up(c->m, m.mr));
	m.nc = (int)smaller(micro_blocks[at[4]] * m.nr, kgen_round_up(c->n, m.nr));
	m.pack = at[5];
	return m;
}

/* The tensor-core tiles of genes "at" for factors of "factor_bytes",
 * repaired: warps within the tile, then kgen_mma_repair. */
static kgen_mma decode_mma(const int *at, int factor_bytes)
{
	kgen_mma m = {.bm = (int)mma_bms[at[MMA_BM]],
		      .bn = (int)genome_mma_sides[at[MMA_BN]],
		      .bk = (int)genome_mma_sides[at[MMA_BK]],
		      .wm = (int)genome_mma_sides[at[MMA_WM]],
		      .wn = (int)genome_mma_sides[at[MMA_WN]],
		      .stages = 2 + at[MMA_STAGES], .raster = at[MMA_RASTER] ? 8 : 0,
		      .rotated = at[MMA_ROTATED],
		      .split_k = at[MMA_SPLIT_K] ? (int)mma_splits[at[MMA_SPLIT_K]] : 0};

	if (!m.bm)
		return (kgen_mma){0};
	m.wm = m.wm < m.bm ? m.wm : m.bm;
	m.wn = m.wn < m.bn ? m.wn : m.bn;
	kgen_mma_repair(&m, factor_bytes);
	return m;
}

/* Blocking genes "at" of kernel space "ks" into "sch". */
static void decode_blocking(const kernel_space *ks, const int *at, kgen_schedule *sch)
{
	if (ks->blocking == BLOCKING_MICRO)
		sch->micro = decode_micro(ks, at);
	else if (ks->blocking == BLOCKING_MMA)
		sch->mma = decode_mma(at, ks->factor_bytes);
}

/* How many settings the blocking genes of "b" have; the i-th into "at". */
static int blocking_settings(enum blocking b)
{
	int n = 1;

	for (int i = 0; i < BLOCKING_GENES; i++)
		n *= blocking_domain[b][i];
	return n;
}

static void blocking_setting(enum blocking b, int i, int *at)
{
	for (int j = BLOCKING_GENES - 1; j >= 0; i /= blocking_domain[b][j--])
		at[j] = i % blocking_domain[b][j];
}

/* The first blocking genes that decode to the blocking of "sch" into
 * "at"; false if none do. */
static bool encode_blocking(const kernel_space *ks, const kgen_schedule *sch, int *at)
{
	int n = blocking_settings(ks->blocking);

	for (int i = 0; i < n; i++) {
		kgen_schedule d = {0};

		blocking_setting(ks->blocking, i, at);
		decode_blocking(ks, at, &d);
		if (!memcmp(&d.micro, &sch->micro, sizeof(d.micro)) &&
		    !memcmp(&d.mma, &sch->mma, sizeof(d.mma)))
			return true;
	}
	return false;
}

/* Whether gene "gene" holds an index of its domain (an index not found
 * is -1). */
static bool in_domain(const tuner_genome *g, const int *genes, int gene)
{
	return genes[gene] >= 0 && genes[gene] < g->domain[gene];
}

/* The genes of schedule "sch" of kernel k into "genes": each value's index
 * in its domain; false when a value is in none. */
static bool encode_kernel(const tuner_genome *g, int k, const kgen_schedule *sch,
			  int *genes)
{
	const kernel_space *ks = &g->kernels[k];
	const kernel_genes *at = &ks->at;
	bool ok = true;

	for (int d = 0; d < ks->rank; d++) {
		genes[at->tile + d] = genome_index_of(ks->tiles[d], ks->ntiles[d], sch->tile[d]);
		genes[at->threads + d] = genome_index_of(ks->threads[d], ks->nthreads[d],
							 sch->threads[d]);
		ok = ok && genes[at->tile + d] >= 0 && genes[at->threads + d] >= 0;
	}
	genes[at->parallel] = sch->parallel;
	genes[at->unroll] = genome_index_of(genome_unrolls, 4, sch->unroll);
	genes[at->vector] = genome_index_of(genome_vectors, 4, sch->vector);
	genes[at->split] = (int)sch->split;
	genes[at->parts] = genome_index_of(genome_parts, 4, sch->parts);
	if (ks->library)
		genes[at->library] = sch->library;
	else
		ok = ok && !sch->library;
	if (ks->blocking)
		ok = ok && encode_blocking(ks, sch, genes + at->blocking);
	else
		ok = ok && !sch->micro.mr && !sch->mma.bm;
	return ok && genes[at->unroll] >= 0 && genes[at->vector] >= 0 &&
	       genes[at->split] < g->domain[at->split] && in_domain(g, genes, at->parts);
}

/* The first tensor-core genes of base kernel "p", a product, into
 * "genes" under which fused kernel "kernel" fits its products on tensor
 * cores (kgen_fused_mma_fit, as decoding does) to the blocking it has;
 * false if none do. */
static bool encode_fused_mma(const tuner_genome *g, int p, const kgen_kernel *kernel,
			     int *genes)
{
	const kernel_space *ks = p >= 0 ? &g->kernels[p] : NULL;
	int *at = ks && ks->blocking ? genes + ks->at.blocking : NULL;
	int n = blocking_settings(BLOCKING_MMA);

	for (int i = 0; ks && ks->blocking == BLOCKING_MMA && i < n; i++) {
		kgen_kernel fitted = *kernel;
		kgen_mma m;

		blocking_setting(BLOCKING_MMA, i, at);
		m = decode_mma(at, ks->factor_bytes);
		if (m.bm && kgen_fused_mma_fit(g->graph, &fitted, &m) &&
		    !memcmp(&fitted.schedule.mma, &kernel->schedule.mma, sizeof(m)))
			return true;
	}
	return false;
}

/* The sync genes of the base kernel "b" for "sync". */
static void encode_sync(const tuner_genome *g, int b, const kgen_sync *sync, int *genes)
{
	int *at = genes + genome_sync(g, b);

	at[SYNC_POLICY] = sync->on ? (int)sync->policy + 1 : 0;
	at[SYNC_NO_WAIT_KERNEL] = sync->on && !sync->wait_kernel;
	at[SYNC_UNORDERED] = sync->on && !sync->ordered;
	at[SYNC_EARLY_LOADS] = sync->on && sync->early_loads;
}

static int first_op(const kgen_kernel *kernel)
{
	int first = kernel->ops[0];

	for (int i = 1; i < kernel->nops; i++)
		first = kernel->ops[i] < first ? kernel->ops[i] : first;
	return first;
}

/* The library gene of the product that starts library step "kernel"
 * with an epilogue (as tuner/fuse.c decodes it); false if it has none. */
static bool encode_library_step(const tuner_genome *g, const kgen_kernel *kernel,
				int *genes)
{
	int p = genome_base_kernel(g, kernel->ops[0]);

	if (p < 0 || !g->kernels[p].library)
		return false;
	genes[g->kernels[p].at.library] = 1;
	return true;
}

bool genome_encode(const tuner_genome *g, const kgen_plan *plan, int *genes)
{
	if (genes != g->defaults)
		memcpy(genes, g->defaults, g->ngenes * sizeof(int));
	for (int k = 0; k < plan->nkernels; k++) {
		const kgen_kernel *kernel = &plan->kernels[k];
		int b = genome_base_kernel(g, kgen_kernel_op(g->graph, kernel)->index);
		bool fused_mma = kernel->nops > 1 && kernel->schedule.mma.bm;
		kgen_schedule root = kernel->schedule;

		if (kernel->nops > 1 && kernel->schedule.library) {
			if (!encode_library_step(g, kernel, genes))
				return false;
			continue;
		}

		root.mma = fused_mma ? (kgen_mma){0} : root.mma;
		if (b < 0 || !encode_kernel(g, b, &root, genes) ||
		    (fused_mma && !encode_fused_mma(g, genome_base_kernel(g, first_op(kernel)),
						    kernel, genes)))
			return false;
		encode_sync(g, b, &kernel->sync, genes);
	}
	tuner_fusion_encode(g->fusion, plan, genes + g->first_fusion);
	return true;
}

static int64_t product(const int64_t *v, int n)
{
	int64_t p = 1;

	for (int i = 0; i < n; i++)
		p *= v[i];
	return p;
}

/* Halves the largest of "v" (never below 1). */
static void halve_largest(int64_t *v, int n)
{
	int at = 0;

	for (int i = 1; i < n; i++)
		if (v[i] > v[at])
			at = i;
	v[at] = v[at] > 1 ? v[at] / 2 : 1;
}

/* Kernel k's schedule from its genes, repaired to be legal: a reducing
 * kernel's accumulators fit the cpu's tile, threads fit their tiles and a
 * block, a warp split has whole warps. A legal schedule is left as is. */
static void decode_kernel(const tuner_genome *g, int k, const int *genes,
			  kgen_schedule *sch)
{
	const kernel_space *ks = &g->kernels[k];
	const kernel_genes *at = &ks->at;
	int64_t threads[SCHED_MAX_RANK];
	int r = ks->rank;

	for (int d = 0; d < r; d++) {
		sch->tile[d] = ks->tiles[d][genes[at->tile + d]];
		threads[d] = ks->threads[d][genes[at->threads + d]];
	}
	while (ks->reduces && product(sch->tile, r) > KGEN_MAX_CPU_TILE)
		halve_largest(sch->tile, r);
	for (int d = 0; d < r; d++)
		threads[d] = threads[d] < sch->tile[d] ? threads[d] : sch->tile[d];
	while (product(threads, r) > KGEN_MAX_THREADS)
		halve_largest(threads, r);
	for (int d = 0; d < r; d++)
		sch->threads[d] = (int)threads[d];
	sch->parallel = genes[at->parallel];
	sch->unroll = (int)genome_unrolls[genes[at->unroll]];
	sch->vector = (int)genome_vectors[genes[at->vector]];
	sch->split = genes[at->split];
	if (sch->split == KGEN_SPLIT_WARP && product(threads, r) % 32)
		sch->split = KGEN_SPLIT_THREAD;
	sch->library = ks->library && genes[at->library];
	if (ks->blocking)
		decode_blocking(ks, genes + at->blocking, sch);
	sch->parts = sch->mma.bm ? 1 : (int)genome_parts[genes[at->parts]];
}

/* Kernel k of g->plan waits on the kernel before it as the sync genes of
 * its root's base kernel say, repaired: the policy when its dependence
 * offers it, else the most grouped one offered (offers come in the order
 * of sched_sync_kind); early loads only where they are legal; stream
 * order where no sync is. The dependence is analysed once, offering the
 * policy asked for alone when it fits (all only when it does not). A kernel
 * that syncs keeps K and its reductions whole; one that cannot sync keeps
 * them as its genes cut them. */
static void decode_sync(tuner_genome *g, int k, const int *genes)
{
	kgen_kernel *kernel = &g->plan->kernels[k];
	int b = genome_base_kernel(g, kgen_kernel_op(g->graph, kernel)->index);
	const int *at = b >= 0 ? genes + genome_sync(g, b) : NULL;
	const kgen_schedule cut = kernel->schedule;
	enum sched_sync_kind asked, kind;
	sched_sync *sync;
	int rc = -1;

	kernel->sync = (kgen_sync){0};
	if (!at || at[SYNC_POLICY] == 0)
		return;
	asked = (enum sched_sync_kind)(at[SYNC_POLICY] - 1);
	kernel->schedule.mma.split_k = 0;
	kernel->schedule.parts = 1;
	if (kgen_sync_analyse_for(g->graph, g->plan, k, asked, &sync, NULL) == 0) {
		kind = sched_sync_policy_of(sync, asked) ? asked
							 : sync->policies[sync->npolicies - 1].kind;
		kernel->sync = (kgen_sync){true, kind, !at[SYNC_NO_WAIT_KERNEL],
					   !at[SYNC_UNORDERED], at[SYNC_EARLY_LOADS]};
		rc = kgen_sync_prove(g->graph, g->plan, k, sync, NULL);
		if (rc < 0 && kernel->sync.early_loads) {
			kernel->sync.early_loads = false;
			rc = kgen_sync_prove(g->graph, g->plan, k, sync, NULL);
		}
		sched_sync_free(sync);
	}
	if (rc < 0) {
		kernel->sync = (kgen_sync){0};
		kernel->schedule = cut;
	}
}

kgen_plan *genome_decode(tuner_genome *g, const int *genes)
{
	for (int k = 0; k < g->nkernels; k++) {
		g->schedules[k] = g->base->kernels[k].schedule;
		decode_kernel(g, k, genes, &g->schedules[k]);
	}
	kgen_plan_free(g->plan);
	g->plan = tuner_fusion_plan(g->fusion, g->schedules, genes + g->first_fusion);
	for (int k = 0; g->plan && k < g->plan->nkernels; k++) {
		kgen_kernel *kernel = &g->plan->kernels[k];

		if (kernel->nops > 1 && kernel->schedule.library &&
		    kgen_library_kernel_unfit(g->graph, kernel, g->cuda))
			kernel->schedule.library = false; /* its root's gene */
		if (kernel->nops > 1)
			kernel->schedule.parts = 1; /* a fused kernel's rows stay whole */
	}
	for (int k = 1; g->cuda && g->plan && k < g->plan->nkernels; k++)
		decode_sync(g, k, genes);
	return g->plan;
}

tuner_genome *genome_new(const sched_graph *graph, const kgen_peaks *peaks, bool cuda,
			 bool library)
{
	tuner_genome *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->graph = graph;
	g->cuda = cuda;
	if (!(g->base = kgen_plan_default(graph)) ||
	    !(g->fusion = tuner_fusion_new(graph, g->base, peaks, cuda)) ||
	    build_layout(g, library) < 0) {
		genome_free(g);
		return NULL;
	}
	genome_encode(g, g->base, g->defaults);
	memcpy(g->fused, g->defaults, g->ngenes * sizeof(int));
	for (int i = 0; i < g->nfusion; i++)
		g->fused[g->first_fusion + i] = 1;
	return g;
}

void genome_free(tuner_genome *g)
{
	if (!g)
		return;
	free(g->kernels);
	free(g->domain);
	free(g->defaults);
	free(g->fused);
	free(g->schedules);
	kgen_plan_free(g->plan);
	kgen_plan_free(g->base);
	tuner_fusion_free(g->fusion);
	free(g);
}
