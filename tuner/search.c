/*
 * search.c: the search over the schedules of a graph, a generation at a
 * time (docs/tuning.md).
 *
 * The genome has one gene per decision of each op's schedule: a tile and
 * a thread count per output dim, the parallel loops, unroll, vector width,
 * reduction split and parts, each an index into a finite domain; for a matrix
 * product, whether it is a library step (where offered) and its blocking
 * (micro-kernels on the cpu, tensor cores on cuda); on cuda, the
 * sync genes: how the kernel rooted at each op overlaps the kernel before
 * it (docs/sync.md); then the fusion genes (fuse.c): which ops share a
 * kernel, and how. A fused
 * kernel runs on the schedule of its root. Decoding repairs what would be
 * illegal (threads per block, threads within tiles, whole warps, the
 * cpu's tile of accumulators, fusions the planner refuses, sync policies
 * the tile dependence does not offer), so every genome becomes a plan
 * kgen accepts.
 *
 * Every plan the search has seen (proposed, known from earlier trials, or
 * dropped by the cost model) is a candidate, found by its identity in a
 * hash set (its text; on the cpu, its C code), so no plan is proposed
 * twice however many genomes repair to it.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner_int.h"

#define MAX_TILES 12   /* powers of two to 256, the extent, the default */
#define THREAD_CHOICES 10 /* 1, 2, 4, ... 256 and the default */
#define TOURNAMENT 3
#define TRIES 50       /* genomes drawn per place in a generation, at most */
#define FUSION_NEIGHBOURS 8 /* at most population / 8 of them per generation */

static const int64_t unrolls[] = {1, 2, 4, 8};
static const int64_t vectors[] = {1, 2, 4, 8};
static const int64_t parts_of_reductions[] = {1, 4, 16, 64};
#define PARTS_MAX_OUTPUT 65536
#define H100_SMS 132

/* The blocking genes of a contraction, nine after the kernel's others:
 * on the cpu its micro-kernels (kgen_micro): mr (0: none, the tiles
 * rule), nr, kc (0: all of K), mc and nc as multiples of mr and nr, pack
 * (and three genes of a single value); on cuda, where its factors fit,
 * its tensor-core tiles (kgen_mma): bm (0: none), bn, bk, wm, wn,
 * stages, raster (row by row, or groups of 8 tile rows), rotated (padded
 * or rotated rows in shared memory), split_k (1, 2 or 4 parts of K). */
#define BLOCKING_GENES 9
enum blocking { BLOCKING_NONE, BLOCKING_MICRO, BLOCKING_MMA };
static const int64_t micro_mrs[] = {0, 4, 6, 8, 12, 14};
static const int64_t micro_nrs[] = {8, 16, 32, 48, 64};
static const int64_t micro_kcs[] = {64, 128, 256, 512, 0};
static const int64_t micro_blocks[] = {1, 4, 8, 16, 32};
static const int64_t mma_bms[] = {0, 64, 128};
static const int64_t mma_sides[] = {32, 64, 128};
static const int64_t mma_splits[] = {1, 2, 4};
static const int blocking_domain[][BLOCKING_GENES] = {
	[BLOCKING_MICRO] = {6, 5, 5, 5, 5, 2, 1, 1, 1},
	[BLOCKING_MMA] = {3, 3, 2, 2, 2, 3, 2, 2, 3},
};
/* A blocking that is seldom far off, for the first population: micro
 * 6 x 32, kc 256, mc 16 mr, nc 4 nr, packed; mma 128 x 128 tiles, bk 32,
 * 64 x 64 warps, 3 stages, row by row, padded, K whole. */
static const int blocking_seed[][BLOCKING_GENES] = {
	[BLOCKING_MICRO] = {2, 2, 2, 3, 1, 1, 0, 0, 0},
	[BLOCKING_MMA] = {2, 2, 0, 1, 1, 1, 0, 0, 0},
};

/* The sync genes of each base kernel, after all kernels' other genes:
 * when the plan's kernel rooted at its op waits on the kernel before it,
 * the policy (0: stream order; else a sched_sync_kind + 1), then the
 * wait-kernel, the ordered tiles and the early loads, each 0 for its
 * default (on, on, off). cuda only: the cpu runs kernels in order. */
#define SYNC_GENES 4
static const int sync_domain[SYNC_GENES] = {SCHED_SYNC_KINDS + 1, 2, 2, 2};

/* Where a kernel's parts gene sits among its genes, after those of its
 * tiles, threads, parallel, unroll, vector and split; then its library
 * gene; its blocking genes follow it (or sit there, without a library
 * gene). */
#define PARTS_GENE(rank) (2 * (rank) + 4)
#define LIBRARY_GENE(rank) (2 * (rank) + 5)

typedef struct kernel_space {
	int rank;
	bool reduces;
	int first_gene;
	int ngenes;
	bool library;           /* a library gene (0: generated, 1: library
				 * step) follows the others, then the blocking */
	enum blocking blocking; /* blocking genes come last */
	sched_contraction product;
	int factor_bytes;       /* of an element of the product's factors */
	int ntiles[SCHED_MAX_RANK], nthreads[SCHED_MAX_RANK];
	int64_t tiles[SCHED_MAX_RANK][MAX_TILES];
	int64_t threads[SCHED_MAX_RANK][THREAD_CHOICES];
} kernel_space;

/* What the open generation draws next: the plans proposed at once
 * (generation 0, the seeds of the first population, the elites and
 * fusion neighbours of the next), then genomes one at a time until the
 * generation is full. */
enum fill {
	FILL_START,    /* nothing drawn yet */
	FILL_MUTANTS,  /* mutants of the best known plan (first population) */
	FILL_RANDOM,   /* random genomes */
	FILL_CHILDREN, /* immigrants, then children of tournaments */
	FILL_DONE,     /* full, or generation 0 */
};

/* A plan seen: proposed (generation >= 0), known, or filtered (no genes,
 * never measured). */
typedef struct candidate {
	char *text;     /* compact JSON with sorted keys */
	char *code;     /* cpu: the SHA-256 of its C code, its identity; else NULL */
	uint64_t hash;  /* of its identity: code, or else text */
	int *genes;     /* NULL when the plan is no genome's */
	double ms;      /* NAN: not measured; INFINITY: failed */
	int generation; /* the generation that proposed it, or -1 */
} candidate;

struct tuner_search {
	const sched_graph *graph;
	tuner_search_options o; /* with the defaults filled in */
	int elites, immigrants;
	kgen_plan *base;        /* one kernel per op: the default plan */
	kgen_plan *plan;        /* the last genome decoded */
	kgen_schedule *schedules; /* scratch: one per kernel of the base */
	tuner_fusion *fusion;
	kernel_space *kernels;
	int nkernels, ngenes;
	int first_sync_gene;
	int first_fusion_gene;
	int *domain;            /* per gene, the size of its domain */
	int *defaults;          /* the default plan's genome */
	int *fused;             /* the same with every fusion gene on */
	int *suggested;         /* genomes for generation 0 beside it */
	int nsuggested;
	int *genes;             /* scratch */
	uint64_t rng;
	candidate *cands;
	int ncands, capcands;
	int *slots;             /* the hash set: indices into cands, or -1 */
	int capslots;
	int *pop, *next;        /* the population and the one being built */
	int npop, nnext;
	bool seeded;            /* the first population is drawn */
	bool open;              /* a generation is out and not closed */
	enum fill fill;         /* what the open generation draws next */
	int fill_tries;         /* genomes drawn in that phase so far */
	int mutants_until;      /* FILL_MUTANTS: the places they fill */
	int parent;             /* FILL_MUTANTS: the candidate they mutate */
	int fresh;              /* FILL_CHILDREN: new plans so far */
	int stale;              /* genomes in a row that gave no new plan */
	int *proposed;          /* the open generation's candidates, by handle */
	int nproposed;
	int generations, measured;
	tuner_search_drops drops;
	int first_of_generation; /* its first candidate */
	double best, best_before; /* now, and when the generation began */
	int since_gain;         /* generations closed without a gain */
};

static uint64_t rng_next(tuner_search *s)
{
	s->rng ^= s->rng >> 12;
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	return s->rng * 0x2545f4914f6cdd1dULL;
}

static int rng_below(tuner_search *s, int n)
{
	return n > 1 ? (int)(rng_next(s) % (uint64_t)n) : 0;
}

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
static enum blocking blocking_of(const tuner_search *s, int k, sched_contraction *product)
{
	const sched_op *op = kgen_kernel_op(s->graph, &s->base->kernels[k]);

	if (!s->o.cuda)
		return sched_op_gathered_contraction(s->graph, op->index, product)
		       ? BLOCKING_MICRO : BLOCKING_NONE;
	if (!kgen_mma_product(s->graph, op->index, product))
		return BLOCKING_NONE;
	return kgen_mma_operands_unfit(s->graph, product) ? BLOCKING_NONE : BLOCKING_MMA;
}

/* How many of parts_of_reductions op's reduction can be cut in: at most
 * one point per part; none for an output of more than PARTS_MAX_OUTPUT
 * elements, whose tiles are blocks enough (and whose partial results
 * would take much memory). */
static int parts_domain(const sched_graph *graph, const sched_op *op)
{
	int n = 1;

	if (graph->tensors[op->target].size > PARTS_MAX_OUTPUT)
		return 1;
	while (n < 4 && parts_of_reductions[n] <= sched_op_reduction_points(op))
		n++;
	return n;
}

/* The domains of kernel k's genes, from gene "first" on; the next free
 * gene. */
static int kernel_genes(tuner_search *s, int k, int first)
{
	const kgen_kernel *kernel = &s->base->kernels[k];
	const sched_op *op = kgen_kernel_op(s->graph, kernel);
	const sched_tensor *t = &s->graph->tensors[op->target];
	kernel_space *ks = &s->kernels[k];
	int r = t->rank;

	ks->rank = r;
	ks->reduces = op->reducer != SCHED_RED_NONE;
	ks->first_gene = first;
	for (int d = 0; d < r; d++) {
		dim_choices(ks, d, t->shape[d], &kernel->schedule, s->o.cuda);
		s->domain[first + d] = ks->ntiles[d];
		s->domain[first + r + d] = ks->nthreads[d];
	}
	s->domain[first + 2 * r] = r + 1;
	s->domain[first + 2 * r + 1] = 4;
	s->domain[first + 2 * r + 2] = 4;
	/* the split of a reduction among threads, and among blocks: cuda only */
	s->domain[first + 2 * r + 3] = ks->reduces && s->o.cuda ? 3 : 1;
	s->domain[first + PARTS_GENE(r)] = ks->reduces && s->o.cuda ?
					   parts_domain(s->graph, op) : 1;
	ks->ngenes = LIBRARY_GENE(r);
	if (ks->library)
		s->domain[first + ks->ngenes++] = 2;
	if (ks->blocking)
		for (int g = 0; g < BLOCKING_GENES; g++)
			s->domain[first + ks->ngenes++] = blocking_domain[ks->blocking][g];
	return first + ks->ngenes;
}

/* The genome's layout, from the default plan in s->base: each kernel's
 * genes (its blocking first, which decides how many), then the fusion
 * genes. */
static int build_space(tuner_search *s)
{
	int gene = 0;

	s->nkernels = s->base->nkernels;
	if (!(s->kernels = calloc(s->nkernels + 1, sizeof(kernel_space))))
		return -1;
	for (int k = 0; k < s->nkernels; k++) {
		kernel_space *ks = &s->kernels[k];
		const sched_op *op = kgen_kernel_op(s->graph, &s->base->kernels[k]);

		ks->blocking = blocking_of(s, k, &ks->product);
		ks->factor_bytes = ks->blocking ?
			sched_dtype_bytes(s->graph->tensors[ks->product.a].dtype) : 0;
		ks->library = s->o.library && !kgen_library_unfit(s->graph, op->index,
								   s->o.cuda);
		s->ngenes += LIBRARY_GENE(s->graph->tensors[op->target].rank) + ks->library;
		s->ngenes += ks->blocking ? BLOCKING_GENES : 0;
	}
	s->first_sync_gene = s->ngenes;
	s->ngenes += SYNC_GENES * s->nkernels;
	s->first_fusion_gene = s->ngenes;
	s->ngenes += tuner_fusion_genes(s->fusion);
	s->schedules = calloc(s->nkernels + 1, sizeof(kgen_schedule));
	s->domain = calloc(s->ngenes + 1, sizeof(int));
	s->defaults = calloc(s->ngenes + 1, sizeof(int));
	s->fused = calloc(s->ngenes + 1, sizeof(int));
	s->genes = calloc(s->ngenes + 1, sizeof(int));
	if (!s->schedules || !s->domain || !s->defaults || !s->fused || !s->genes)
		return -1;
	for (int k = 0; k < s->nkernels; k++)
		gene = kernel_genes(s, k, gene);
	for (int g = 0; g < SYNC_GENES * s->nkernels; g++)
		s->domain[gene++] = s->o.cuda ? sync_domain[g % SYNC_GENES] : 1;
	for (int g = 0; g < tuner_fusion_genes(s->fusion); g++)
		s->domain[gene + g] = tuner_fusion_domain(s->fusion, g);
	return 0;
}

/* The base kernel that computes op "op". */
static int base_kernel(const tuner_search *s, int op)
{
	for (int k = 0; k < s->nkernels; k++)
		if (s->base->kernels[k].ops[0] == op)
			return k;
	return -1;
}

static int index_of(const int64_t *values, int n, int64_t value)
{
	for (int i = 0; i < n; i++)
		if (values[i] == value)
			return i;
	return -1;
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
	m.mc = (int)(micro_blocks[at[3]] * m.mr < kgen_round_up(c->m, m.mr)
		     ? micro_blocks[at[3]] * m.mr : kgen_round_up(c->m, m.mr));
	m.nc = (int)(micro_blocks[at[4]] * m.nr < kgen_round_up(c->n, m.nr)
		     ? micro_blocks[at[4]] * m.nr : kgen_round_up(c->n, m.nr));
	m.pack = at[5];
	return m;
}

/* The tensor-core tiles of genes "at" for factors of "factor_bytes",
 * repaired: warps within the tile, then kgen_mma_repair. */
static kgen_mma decode_mma(const int *at, int factor_bytes)
{
	kgen_mma m = {.bm = (int)mma_bms[at[0]], .bn = (int)mma_sides[at[1]],
		      .bk = (int)mma_sides[at[2]], .wm = (int)mma_sides[at[3]],
		      .wn = (int)mma_sides[at[4]], .stages = 2 + at[5],
		      .raster = at[6] ? 8 : 0, .rotated = at[7],
		      .split_k = at[8] ? (int)mma_splits[at[8]] : 0};

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

	for (int g = 0; g < BLOCKING_GENES; g++)
		n *= blocking_domain[b][g];
	return n;
}

static void blocking_setting(enum blocking b, int i, int *at)
{
	for (int g = BLOCKING_GENES - 1; g >= 0; i /= blocking_domain[b][g--])
		at[g] = i % blocking_domain[b][g];
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

/* The genes of schedule "sch" of kernel k into "genes": each value's index
 * in its domain; false when a value is in none. */
static bool encode_kernel(const tuner_search *s, int k, const kgen_schedule *sch,
			  int *genes)
{
	const kernel_space *ks = &s->kernels[k];
	int *at = genes + ks->first_gene, r = ks->rank;
	bool ok = true;

	for (int d = 0; d < r; d++) {
		at[d] = index_of(ks->tiles[d], ks->ntiles[d], sch->tile[d]);
		at[r + d] = index_of(ks->threads[d], ks->nthreads[d], sch->threads[d]);
		ok = ok && at[d] >= 0 && at[r + d] >= 0;
	}
	at[2 * r] = sch->parallel;
	at[2 * r + 1] = index_of(unrolls, 4, sch->unroll);
	at[2 * r + 2] = index_of(vectors, 4, sch->vector);
	at[2 * r + 3] = (int)sch->split;
	at[PARTS_GENE(r)] = index_of(parts_of_reductions, 4, sch->parts);
	if (ks->library)
		at[LIBRARY_GENE(r)] = sch->library;
	else
		ok = ok && !sch->library;
	if (ks->blocking)
		ok = ok && encode_blocking(ks, sch, at + LIBRARY_GENE(r) + ks->library);
	else
		ok = ok && !sch->micro.mr && !sch->mma.bm;
	return ok && at[2 * r + 1] >= 0 && at[2 * r + 2] >= 0 &&
	       at[2 * r + 3] < s->domain[ks->first_gene + 2 * r + 3] &&
	       at[PARTS_GENE(r)] >= 0 &&
	       at[PARTS_GENE(r)] < s->domain[ks->first_gene + PARTS_GENE(r)];
}

/* The first tensor-core genes of base kernel "p", a product, into
 * "genes" under which fused kernel "kernel" fits its products on tensor
 * cores (kgen_fused_mma_fit, as decoding does) to the blocking it has;
 * false if none do. */
static bool encode_fused_mma(const tuner_search *s, int p, const kgen_kernel *kernel,
			     int *genes)
{
	const kernel_space *ks = p >= 0 ? &s->kernels[p] : NULL;
	int *at = ks ? genes + ks->first_gene + LIBRARY_GENE(ks->rank) + ks->library : NULL;
	int n = blocking_settings(BLOCKING_MMA);

	for (int i = 0; ks && ks->blocking == BLOCKING_MMA && i < n; i++) {
		kgen_kernel fitted = *kernel;
		kgen_mma m;

		blocking_setting(BLOCKING_MMA, i, at);
		m = decode_mma(at, ks->factor_bytes);
		if (m.bm && kgen_fused_mma_fit(s->graph, &fitted, &m) &&
		    !memcmp(&fitted.schedule.mma, &kernel->schedule.mma, sizeof(m)))
			return true;
	}
	return false;
}

/* The sync genes of the base kernel "b" for "sync". */
static void encode_sync(const tuner_search *s, int b, const kgen_sync *sync, int *genes)
{
	int *at = genes + s->first_sync_gene + SYNC_GENES * b;

	at[0] = sync->on ? (int)sync->policy + 1 : 0;
	at[1] = sync->on && !sync->wait_kernel;
	at[2] = sync->on && !sync->ordered;
	at[3] = sync->on && sync->early_loads;
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
static bool encode_library_step(const tuner_search *s, const kgen_kernel *kernel, int *genes)
{
	int p = base_kernel(s, kernel->ops[0]);

	if (p < 0 || !s->kernels[p].library)
		return false;
	genes[s->kernels[p].first_gene + LIBRARY_GENE(s->kernels[p].rank)] = 1;
	return true;
}

/* The genes of "plan": each kernel's schedule and sync as its root's
 * genes (the other members' keep their defaults), a fused kernel's
 * products on tensor cores, or its library step, as its first op's (as
 * tuner/fuse.c decodes them), its grouping as fusion genes. */
static bool encode(const tuner_search *s, const kgen_plan *plan, int *genes)
{
	if (genes != s->defaults)
		memcpy(genes, s->defaults, s->ngenes * sizeof(int));
	for (int k = 0; k < plan->nkernels; k++) {
		const kgen_kernel *kernel = &plan->kernels[k];
		int b = base_kernel(s, kgen_kernel_op(s->graph, kernel)->index);
		bool fused_mma = kernel->nops > 1 && kernel->schedule.mma.bm;
		kgen_schedule root = kernel->schedule;

		if (kernel->nops > 1 && kernel->schedule.library) {
			if (!encode_library_step(s, kernel, genes))
				return false;
			continue;
		}

		root.mma = fused_mma ? (kgen_mma){0} : root.mma;
		if (b < 0 || !encode_kernel(s, b, &root, genes) ||
		    (fused_mma && !encode_fused_mma(s, base_kernel(s, first_op(kernel)),
						    kernel, genes)))
			return false;
		encode_sync(s, b, &kernel->sync, genes);
	}
	tuner_fusion_encode(s->fusion, plan, genes + s->first_fusion_gene);
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
static void decode_kernel(const tuner_search *s, int k, const int *genes,
			  kgen_schedule *sch)
{
	const kernel_space *ks = &s->kernels[k];
	const int *at = genes + ks->first_gene;
	int64_t threads[SCHED_MAX_RANK];
	int r = ks->rank;

	for (int d = 0; d < r; d++) {
		sch->tile[d] = ks->tiles[d][at[d]];
		threads[d] = ks->threads[d][at[r + d]];
	}
	while (ks->reduces && product(sch->tile, r) > KGEN_MAX_CPU_TILE)
		halve_largest(sch->tile, r);
	for (int d = 0; d < r; d++)
		threads[d] = threads[d] < sch->tile[d] ? threads[d] : sch->tile[d];
	while (product(threads, r) > KGEN_MAX_THREADS)
		halve_largest(threads, r);
	for (int d = 0; d < r; d++)
		sch->threads[d] = (int)threads[d];
	sch->parallel = at[2 * r];
	sch->unroll = (int)unrolls[at[2 * r + 1]];
	sch->vector = (int)vectors[at[2 * r + 2]];
	sch->split = at[2 * r + 3];
	if (sch->split == KGEN_SPLIT_WARP && product(threads, r) % 32)
		sch->split = KGEN_SPLIT_THREAD;
	sch->library = ks->library && at[LIBRARY_GENE(r)];
	decode_blocking(ks, at + LIBRARY_GENE(r) + ks->library, sch);
	sch->parts = sch->mma.bm ? 1 : (int)parts_of_reductions[at[PARTS_GENE(r)]];
}

/* Kernel k of s->plan waits on the kernel before it as the sync genes of
 * its root's base kernel say, repaired: the policy when its dependence
 * offers it, else the most grouped one offered (offers come in the order
 * of sched_sync_kind); early loads only where they are legal; stream
 * order where no sync is. The dependence is analysed once, offering the
 * policy asked for alone when it fits (all only when it does not). A kernel
 * that syncs keeps K and its reductions whole; one that cannot sync keeps
 * them as its genes cut them. */
static void decode_sync(tuner_search *s, int k, const int *genes)
{
	kgen_kernel *kernel = &s->plan->kernels[k];
	int b = base_kernel(s, kgen_kernel_op(s->graph, kernel)->index);
	const int *at = genes + s->first_sync_gene + SYNC_GENES * b;
	const kgen_schedule cut = kernel->schedule;
	sched_sync *sync;
	enum sched_sync_kind kind;
	int rc = -1;

	kernel->sync = (kgen_sync){0};
	if (b < 0 || at[0] == 0)
		return;
	kernel->schedule.mma.split_k = 0;
	kernel->schedule.parts = 1;
	if (kgen_sync_analyse_for(s->graph, s->plan, k, at[0] - 1, &sync, NULL) == 0) {
		kind = sched_sync_policy_of(sync, at[0] - 1) ? (enum sched_sync_kind)(at[0] - 1)
							      : sync->policies[sync->npolicies - 1].kind;
		kernel->sync = (kgen_sync){true, kind, !at[1], !at[2], at[3]};
		rc = kgen_sync_prove(s->graph, s->plan, k, sync, NULL);
		if (rc < 0 && kernel->sync.early_loads) {
			kernel->sync.early_loads = false;
			rc = kgen_sync_prove(s->graph, s->plan, k, sync, NULL);
		}
		sched_sync_free(sync);
	}
	if (rc < 0) {
		kernel->sync = (kgen_sync){0};
		kernel->schedule = cut;
	}
}

/* s->plan from "genes"; NULL when out of memory. */
static void decode(tuner_search *s, const int *genes)
{
	for (int k = 0; k < s->nkernels; k++) {
		s->schedules[k] = s->base->kernels[k].schedule;
		decode_kernel(s, k, genes, &s->schedules[k]);
	}
	kgen_plan_free(s->plan);
	s->plan = tuner_fusion_plan(s->fusion, s->schedules, genes + s->first_fusion_gene);
	for (int k = 0; s->plan && k < s->plan->nkernels; k++) {
		kgen_kernel *kernel = &s->plan->kernels[k];

		if (kernel->nops > 1 && kernel->schedule.library &&
		    kgen_library_kernel_unfit(s->graph, kernel, s->o.cuda))
			kernel->schedule.library = false; /* its root's gene */
		if (kernel->nops > 1)
			kernel->schedule.parts = 1; /* a fused kernel's rows stay whole */
	}
	for (int k = 1; s->o.cuda && s->plan && k < s->plan->nkernels; k++)
		decode_sync(s, k, genes);
}

/* The text plans are compared by; NULL when out of memory. */
static char *plan_text(const tuner_search *s, const kgen_plan *plan)
{
	json_t *json = kgen_plan_to_json(s->graph, plan);
	char *text = json ? json_dumps(json, JSON_COMPACT | JSON_SORT_KEYS) : NULL;

	json_decref(json);
	return text;
}

/* On the cpu, plans are the same candidate when they print the same C:
 * some genes change no code there (unroll without a reduction, a vector
 * wider than the tile...), and a plan measured is never measured again.
 * The SHA-256 of every kernel's source, or NULL on cuda (the plan's text
 * is its identity there) or when out of memory. */
static char *plan_code(const tuner_search *s, const kgen_plan *plan)
{
	char *all = NULL, *key = NULL;
	size_t len = 0;
	FILE *f;

	if (s->o.cuda || !(f = open_memstream(&all, &len)))
		return NULL;
	for (int k = 0; k < plan->nkernels; k++) {
		char *source = kgen_print_c(s->graph, plan, k);

		fputs(source ? source : "", f);
		free(source);
	}
	if (fclose(f) == 0 && (key = malloc(SCHED_KEY_HEX + 1)))
		sched_sha256_hex(all, len, key);
	free(all);
	return key;
}

static const char *identity(const candidate *c)
{
	return c->code ? c->code : c->text;
}

/* FNV-1a. */
static uint64_t text_hash(const char *text)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *text; text++)
		h = (h ^ (unsigned char)*text) * 0x100000001b3ULL;
	return h;
}

/* The slot of identity "id" in the hash set, or the empty slot where it
 * would go. */
static int slot_of(const tuner_search *s, const char *id, uint64_t hash)
{
	int mask = s->capslots - 1, i = (int)(hash & (uint64_t)mask);

	while (s->slots[i] >= 0 && (s->cands[s->slots[i]].hash != hash ||
				    strcmp(identity(&s->cands[s->slots[i]]), id)))
		i = (i + 1) & mask;
	return i;
}

static int find(const tuner_search *s, const char *id, uint64_t hash)
{
	return s->slots[slot_of(s, id, hash)];
}

/* Doubles the hash set (kept at most half full) and re-inserts. */
static int grow_slots(tuner_search *s)
{
	int cap = s->capslots ? 2 * s->capslots : 256;
	int *slots = malloc(cap * sizeof(int));

	if (!slots)
		return -1;
	free(s->slots);
	s->slots = slots;
	s->capslots = cap;
	memset(slots, 0xff, cap * sizeof(int));
	for (int i = 0; i < s->ncands; i++)
		s->slots[slot_of(s, identity(&s->cands[i]), s->cands[i].hash)] = i;
	return 0;
}

/* A new candidate for "text" and "code" (both taken; code may be NULL)
 * with a copy of "genes" (may be NULL); its index, or -1 when out of
 * memory. */
static int add_candidate(tuner_search *s, char *text, char *code, uint64_t hash,
			 const int *genes)
{
	size_t bytes = s->ngenes * sizeof(int);
	candidate *c;

	if (s->ncands == s->capcands) {
		int cap = 2 * s->capcands;
		candidate *cands = realloc(s->cands, cap * sizeof(candidate));

		if (!cands)
			goto fail;
		s->cands = cands;
		s->capcands = cap;
	}
	if (2 * (s->ncands + 1) > s->capslots && grow_slots(s) < 0)
		goto fail;
	c = &s->cands[s->ncands];
	*c = (candidate){text, code, hash, NULL, NAN, -1};
	if (genes && !(c->genes = malloc(bytes)))
		goto fail;
	if (genes)
		memcpy(c->genes, genes, bytes);
	s->slots[slot_of(s, identity(c), hash)] = s->ncands;
	return s->ncands++;
fail:
	free(text);
	free(code);
	return -1;
}

/* Whether the cost model rules out the plan in s->plan: estimated slower
 * than filter_factor times the best time so far. */
static bool too_slow(const tuner_search *s)
{
	return s->o.peaks && isfinite(s->best) &&
	       tuner_optimistic_ms(s->graph, s->plan, s->o.peaks, s->o.cuda) >
		       s->o.filter_factor * s->best;
}

/* Counts why the plan of a genome was not proposed: candidate "seen"
 * was proposed or filtered before, or measured by an earlier search. */
static void count_seen(tuner_search *s, int seen)
{
	const candidate *c = &s->cands[seen];

	if (c->generation < 0 && !isnan(c->ms))
		s->drops.measured++;
	else
		s->drops.seen++;
	s->stale++;
}

/* Candidate "index" as the next plan of the open generation, into "out". */
static int hand_out(tuner_search *s, int index, json_t *out)
{
	int *proposed = realloc(s->proposed, (s->nproposed + 1) * sizeof(int));

	if (!proposed)
		return -1;
	s->proposed = proposed;
	s->proposed[s->nproposed++] = index;
	s->cands[index].generation = s->generations - 1;
	json_array_append_new(out, json_loads(s->cands[index].text, 0, NULL));
	return index;
}

/* Genome "genes" as a plan of the generation "out", unless its plan was
 * seen before or is too slow (then remembered as filtered). Returns its
 * candidate, or -1 when not proposed (s->drops says why). */
static int propose(tuner_search *s, const int *genes, json_t *out)
{
	char *text, *code;
	uint64_t hash;
	bool drop;
	int index;

	decode(s, genes);
	if (!s->plan || !(text = plan_text(s, s->plan))) {
		s->drops.invalid++;
		s->stale++;
		return -1;
	}
	code = plan_code(s, s->plan);
	hash = text_hash(code ? code : text);
	if ((index = find(s, code ? code : text, hash)) >= 0) {
		free(text);
		free(code);
		count_seen(s, index);
		return -1;
	}
	s->stale = 0;
	drop = too_slow(s);
	index = add_candidate(s, text, code, hash, drop ? NULL : genes);
	if (index < 0 || drop) {
		s->drops.filtered += drop;
		return -1;
	}
	return hand_out(s, index, out);
}

static void random_genes(tuner_search *s)
{
	for (int i = 0; i < s->ngenes; i++)
		s->genes[i] = rng_below(s, s->domain[i]);
}

/* Lower is better; unmeasured and failed candidates last. */
static double score(const tuner_search *s, int index)
{
	double ms = s->cands[index].ms;

	return isnan(ms) ? INFINITY : ms;
}

typedef struct ranked {
	double ms;
	int index;
} ranked;

static int by_time(const void *a, const void *b)
{
	const ranked *x = a, *y = b;

	if (x->ms != y->ms)
		return x->ms < y->ms ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

/* Sorts candidate indices best first (ties by age: reproducible). Left
 * as they are when out of memory. */
static void sort_by_time(const tuner_search *s, int *indices, int n)
{
	ranked *r = malloc((n + 1) * sizeof(ranked));

	if (!r)
		return;
	for (int i = 0; i < n; i++)
		r[i] = (ranked){score(s, indices[i]), indices[i]};
	qsort(r, n, sizeof(ranked), by_time);
	for (int i = 0; i < n; i++)
		indices[i] = r[i].index;
	free(r);
}

/* The candidates with a time (and genes, if "breeders"), best first, in
 * "*out" (the caller frees); how many, or -1 when out of memory. */
static int best_indices(const tuner_search *s, bool breeders, int **out)
{
	int n = 0;

	if (!(*out = malloc((s->ncands + 1) * sizeof(int))))
		return -1;
	for (int i = 0; i < s->ncands; i++)
		if (isfinite(s->cands[i].ms) && (s->cands[i].genes || !breeders))
			(*out)[n++] = i;
	sort_by_time(s, *out, n);
	return n;
}

/* About two genes of s->genes drawn again. */
static void mutate(tuner_search *s)
{
	for (int i = 0; i < s->ngenes; i++)
		if (rng_below(s, s->ngenes) < 2)
			s->genes[i] = rng_below(s, s->domain[i]);
}

/* "genes" proposed into out and, when new, into the population; not
 * proposed once the population is full (a population smaller than the
 * seeds of the first one: bench/tuning_curve --population 2). */
static void join_population(tuner_search *s, const int *genes, json_t *out)
{
	int index;

	if (s->npop >= s->o.population)
		return;
	if ((index = propose(s, genes, out)) >= 0)
		s->pop[s->npop++] = index;
}

/* Into the population: "genes" with the seed blocking (blocking_seed) on
 * every matrix product and, with "synced", every kernel waiting on the
 * one before it by the most grouped policy its dependence offers. */
static void propose_blocked(tuner_search *s, const int *genes, json_t *out, bool synced)
{
	memcpy(s->genes, genes, s->ngenes * sizeof(int));
	for (int k = 0; synced && k < s->nkernels; k++)
		s->genes[s->first_sync_gene + SYNC_GENES * k] = SCHED_SYNC_KINDS;
	for (int k = 0; k < s->nkernels; k++) {
		const kernel_space *ks = &s->kernels[k];

		if (ks->blocking)
			memcpy(s->genes + ks->first_gene + ks->ngenes - BLOCKING_GENES,
			       blocking_seed[ks->blocking], BLOCKING_GENES * sizeof(int));
	}
	join_population(s, s->genes, out);
}

/* Into the population, on cuda: the default schedules with each reducing
 * kernel of fewer tiles than the device has multiprocessors (the peaks'
 * cores; an H100's 132 without peaks) cut in the fewest parts that give
 * it as many blocks, or in the most it can be cut in; nothing when no
 * kernel is cut. */
static void propose_parts(tuner_search *s, json_t *out)
{
	int cores = s->o.peaks && s->o.peaks->cores > 0 ? s->o.peaks->cores : H100_SMS;
	bool cut = false;

	memcpy(s->genes, s->defaults, s->ngenes * sizeof(int));
	for (int k = 0; k < s->nkernels; k++) {
		int gene = s->kernels[k].first_gene + PARTS_GENE(s->kernels[k].rank), p = 0;
		int64_t tiles = kgen_kernel_tiles(s->graph, &s->base->kernels[k]);

		while (p + 1 < s->domain[gene] && tiles * parts_of_reductions[p] < cores)
			p++;
		s->genes[gene] = p;
		cut |= p > 0;
	}
	if (cut)
		join_population(s, s->genes, out);
}

/* Into the population: "genes" with every product the library can make
 * as a library step. */
static void propose_library(tuner_search *s, const int *genes, json_t *out)
{
	memcpy(s->genes, genes, s->ngenes * sizeof(int));
	for (int k = 0; k < s->nkernels; k++)
		if (s->kernels[k].library)
			s->genes[s->kernels[k].first_gene + LIBRARY_GENE(s->kernels[k].rank)] = 1;
	join_population(s, s->genes, out);
}

/* Into the population: the default schedules with every fusion gene on,
 * and, for each layer of producers, the same with that layer's edges off
 * (a matrix product kept apart from the elementwise tail that follows it,
 * which then fuses whole), also with the seed blocking (sibling products
 * side by side keep it) and, where library steps are offered, with the
 * products kept apart as library steps. Each repairs to the largest such
 * fusion the planner allows. */
/* The largest fusion's genes with the edges of layer "l" of producers
 * off, into "out" (returned). */
static int *layer_apart(const tuner_search *s, int l, int *out)
{
	memcpy(out, s->fused, s->ngenes * sizeof(int));
	for (int g = 0; g < s->ngenes - s->first_fusion_gene; g++)
		if (tuner_fusion_edge_layer(s->fusion, g) == l)
			out[s->first_fusion_gene + g] = 0;
	return out;
}

/* The largest fusion's genes with every product a library step can make
 * kept apart from the ops around it, into "out" (returned). */
static int *products_apart(const tuner_search *s, int *out)
{
	memcpy(out, s->fused, s->ngenes * sizeof(int));
	for (int k = 0; k < s->nkernels; k++)
		for (int g = 0; s->kernels[k].library &&
				g < s->ngenes - s->first_fusion_gene; g++)
			if (tuner_fusion_gene_touches(s->fusion, g, s->base->kernels[k].ops[0]))
				out[s->first_fusion_gene + g] = 0;
	return out;
}

static void propose_fused(tuner_search *s, json_t *out)
{
	int layers = 0, *layer = malloc(s->ngenes * sizeof(int));

	join_population(s, s->fused, out);
	for (int g = 0; g < s->ngenes - s->first_fusion_gene; g++)
		if (tuner_fusion_edge_layer(s->fusion, g) + 1 > layers)
			layers = tuner_fusion_edge_layer(s->fusion, g) + 1;
	for (int l = 0; layer && l < layers && s->npop < s->o.population / 2; l++) {
		layer_apart(s, l, layer);
		join_population(s, layer, out);
		propose_blocked(s, layer, out, false);
		if (s->o.library)
			propose_library(s, layer, out);
	}
	free(layer);
}

/* "genes" with every kernel's last dim tiled whole: rows that hold what
 * a fused tail reads at other columns (an LSTM's gates), which smaller
 * tiles make a global dependence. */
static const int *whole_rows(tuner_search *s, const int *genes, int *out)
{
	memcpy(out, genes, s->ngenes * sizeof(int));
	for (int k = 0; k < s->nkernels; k++) {
		const kernel_space *ks = &s->kernels[k];
		const sched_tensor *t = &s->graph->tensors[kgen_kernel_op(s->graph,
						&s->base->kernels[k])->target];
		int last = ks->rank - 1;
		int whole = last < 0 ? -1 : index_of(ks->tiles[last], ks->ntiles[last],
						      t->shape[last]);

		if (whole >= 0)
			out[ks->first_gene + last] = whole;
	}
	return out;
}

/* "genes" with every kernel's tile of about "elements" elements into
 * "out", filled from the last dim: each dim the largest tile of its
 * domain (which holds 1) within what the dims after it leave. */
static void tiles_of(const tuner_search *s, const int *genes, int64_t elements, int *out)
{
	memcpy(out, genes, s->ngenes * sizeof(int));
	for (int k = 0; k < s->nkernels; k++) {
		const kernel_space *ks = &s->kernels[k];
		int64_t left = elements;

		for (int d = ks->rank - 1; d >= 0; d--) {
			int best = index_of(ks->tiles[d], ks->ntiles[d], 1);

			for (int i = 0; i < ks->ntiles[d]; i++)
				if (ks->tiles[d][i] <= left && ks->tiles[d][i] > ks->tiles[d][best])
					best = i;
			out[ks->first_gene + d] = best;
			left /= ks->tiles[d][best];
		}
	}
}

/* Into the population on cuda: the largest fusion with every kernel's
 * tile of 64 x 64 elements and its products on tensor cores in the seed
 * blocking with warps of 32 x 32: a fused group's first product then
 * runs in 4 warps with the rest as its epilogue (kgen_fused_mma_fit),
 * and its region and the stages kept after it fit shared memory. */
static void propose_fused_mma(tuner_search *s, json_t *out)
{
	tiles_of(s, s->fused, 64 * 64, s->genes);
	for (int k = 0; k < s->nkernels; k++) {
		const kernel_space *ks = &s->kernels[k];
		int *blocking = s->genes + ks->first_gene + ks->ngenes - BLOCKING_GENES;

		if (ks->blocking != BLOCKING_MMA)
			continue;
		memcpy(blocking, blocking_seed[BLOCKING_MMA], BLOCKING_GENES * sizeof(int));
		blocking[3] = blocking[4] = index_of(mma_sides, 3, 32);
	}
	join_population(s, s->genes, out);
}

/* The first population: the best plans measured or known (a quarter of it
 * at most, and only those that are genomes), the default and the largest
 * fusion with the seed blocking on every matrix product
 * (propose_blocked), where library steps are offered every product
 * that can be one as a library step with the rest fused, the largest
 * fusion again blocked with whole rows (whole_rows), on cuda with its
 * products on tensor cores and their epilogues fused (propose_fused_mma),
 * the default
 * schedules with every fusion the planner allows and with one layer of
 * producers kept apart (propose_fused), and on cuda the default
 * so blocked with every kernel synced to the one before, on cuda the
 * default with reductions of few tiles cut in parts, mutants of the
 * best (the default plan, for a new key) in half the places left, then
 * random genomes: the search looks near what is known to be good and far
 * from it at once. The blocked and library seeds come first: where
 * products dominate they are fast, and once one is measured the slow
 * plans after it stop at their first run (the cutoff, 3 times the best). */
static void first_population(tuner_search *s, json_t *out)
{
	int *best, n = best_indices(s, true, &best), seeds = s->o.population / 4, *rows;

	if (n < 0)
		return;
	seeds = seeds > s->elites ? seeds : s->elites;
	s->npop = n < seeds ? n : seeds;
	memcpy(s->pop, best, s->npop * sizeof(int));
	free(best);
	propose_blocked(s, s->defaults, out, false);
	propose_blocked(s, s->fused, out, false);
	rows = malloc(s->ngenes * sizeof(int));
	if (rows && s->o.library)
		propose_library(s, products_apart(s, rows), out);
	if (rows)
		propose_blocked(s, whole_rows(s, s->fused, rows), out, false);
	free(rows);
	if (s->o.cuda)
		propose_fused_mma(s, out);
	propose_fused(s, out);
	if (s->o.cuda) {
		propose_blocked(s, s->defaults, out, true);
		propose_parts(s, out);
	}
	s->fill = s->npop > 0 ? FILL_MUTANTS : FILL_RANDOM;
	s->parent = s->npop > 0 ? s->pop[0] : -1;
	s->mutants_until = s->npop + (s->o.population - s->npop) / 2;
	s->seeded = true;
}

static int tournament(tuner_search *s)
{
	int best = s->pop[rng_below(s, s->npop)];

	for (int i = 1; i < TOURNAMENT; i++) {
		int other = s->pop[rng_below(s, s->npop)];

		if (score(s, other) < score(s, best))
			best = other;
	}
	return best;
}

/* A child into s->genes: each kernel's genes whole from one parent or the
 * other (the genes of a kernel belong together), the sync and fusion
 * genes whole from one of them, then about two genes mutate. */
static void breed(tuner_search *s)
{
	const int *a = s->cands[tournament(s)].genes;
	const int *b = s->cands[tournament(s)].genes;

	for (int k = 0; k < s->nkernels; k++) {
		const kernel_space *ks = &s->kernels[k];
		const int *from = rng_below(s, 2) ? a : b;

		memcpy(s->genes + ks->first_gene, from + ks->first_gene,
		       ks->ngenes * sizeof(int));
	}
	memcpy(s->genes + s->first_sync_gene, (rng_below(s, 2) ? a : b) + s->first_sync_gene,
	       (s->ngenes - s->first_sync_gene) * sizeof(int));
	mutate(s);
}

/* Fusion neighbours of "best" proposed into s->next from place n: its
 * genome with one more fusion gene as in the largest fusion, for the
 * genes that are not, from a random one on and until "until" places are
 * filled. A fusion one step away keeps the schedules already found good,
 * which a child of two parents seldom does. The places filled. */
static int fusion_neighbours(tuner_search *s, const int *best, json_t *out, int n,
			     int until)
{
	int nfusion = s->ngenes - s->first_fusion_gene;
	int start = nfusion > 0 ? rng_below(s, nfusion) : 0;

	for (int i = 0; i < nfusion && n < until; i++) {
		int g = s->first_fusion_gene + (start + i) % nfusion, index;

		if (best[g] == s->fused[g])
			continue;
		memcpy(s->genes, best, s->ngenes * sizeof(int));
		s->genes[g] = s->fused[g];
		if ((index = propose(s, s->genes, out)) >= 0)
			s->next[n++] = index;
	}
	return n;
}

/* The next population (s->next, the population when the generation
 * closes): the elites stay (measured already), fusion neighbours of the
 * best come next, then immigrants and children of tournaments
 * (FILL_CHILDREN) fill the rest with new plans. */
static void evolve(tuner_search *s, json_t *out)
{
	int n = 0;

	sort_by_time(s, s->pop, s->npop);
	while (n < s->elites && n < s->npop) {
		s->next[n] = s->pop[n];
		n++;
	}
	if (s->npop > 0 && s->cands[s->pop[0]].genes)
		n = fusion_neighbours(s, s->cands[s->pop[0]].genes, out, n,
				      n + s->o.population / FUSION_NEIGHBOURS);
	s->nnext = n;
	s->fresh = 0;
	s->fill = FILL_CHILDREN;
}

/* The next population becomes the population. */
static void replace_population(tuner_search *s)
{
	int *swap = s->pop;

	s->pop = s->next;
	s->next = swap;
	s->npop = s->nnext;
}

/* Ends the generation out: its unrecorded plans failed; it brought a gain
 * when its best beat the best before it by more than the noise (an empty
 * one brought none). */
static void close_generation(tuner_search *s)
{
	double best = INFINITY;

	if (!s->open)
		return;
	if (s->nnext >= 0)
		replace_population(s);
	for (int i = s->first_of_generation; i < s->ncands; i++) {
		candidate *c = &s->cands[i];

		if (c->generation != s->generations - 1)
			continue;
		if (isnan(c->ms))
			c->ms = INFINITY;
		best = c->ms < best ? c->ms : best;
	}
	s->since_gain = best < s->best_before * (1 - s->o.noise) ? 0 : s->since_gain + 1;
	s->open = false;
}

/* The plans the open generation proposes at once, into "out": generation
 * 0's, or else the seeds of the first population or the elites and
 * fusion neighbours of the next; then what it draws one at a time. */
static void start_fill(tuner_search *s, json_t *out)
{
	s->fill = FILL_DONE;
	s->fill_tries = 0;
	if (s->generations == 1) {
		propose(s, s->defaults, out);
		for (int i = 0; i < s->nsuggested; i++)
			propose(s, s->suggested + i * s->ngenes, out);
		if (json_array_size(out))
			return;
	}
	if (s->o.kind == TUNER_RANDOM) {
		s->npop = 0;
		s->fill = FILL_RANDOM;
	} else if (!s->seeded) {
		first_population(s, out);
	} else {
		evolve(s, out);
	}
}

/* The phase after "fill" is over. */
static void next_phase(tuner_search *s)
{
	s->fill = s->fill == FILL_MUTANTS ? FILL_RANDOM : FILL_DONE;
	s->fill_tries = 0;
}

/* One genome drawn for the open generation as its phase says, proposed
 * into "out" and, when new, into the population being built. A phase
 * ends when the generation is full, the mutants their share of it or
 * TRIES genomes per place, and, when "regular", the others too (a whole
 * generation at once; else they go on until it is full). */
static void fill_one(tuner_search *s, json_t *out, bool regular)
{
	bool tried_enough = s->fill_tries >= TRIES * s->o.population;
	int *into = s->fill == FILL_CHILDREN ? s->next : s->pop;
	int *n = s->fill == FILL_CHILDREN ? &s->nnext : &s->npop, index;

	if (*n >= s->o.population || (s->fill == FILL_MUTANTS && *n >= s->mutants_until) ||
	    ((regular || s->fill == FILL_MUTANTS) && tried_enough))
		return next_phase(s);
	if (s->fill == FILL_MUTANTS) {
		memcpy(s->genes, s->cands[s->parent].genes, s->ngenes * sizeof(int));
		mutate(s);
	} else if (s->fill == FILL_RANDOM || s->fresh < s->immigrants || s->npop == 0) {
		random_genes(s);
	} else {
		breed(s);
	}
	s->fill_tries++;
	if ((index = propose(s, s->genes, out)) >= 0) {
		into[(*n)++] = index;
		s->fresh += s->fill == FILL_CHILDREN;
	}
}

/* The open generation's next plans, from at most "tries" genomes drawn. */
static json_t *fill(tuner_search *s, int tries, bool regular)
{
	json_t *out = s->open ? json_array() : NULL;

	if (!out)
		return NULL;
	if (s->fill == FILL_START)
		start_fill(s, out);
	while (tries-- > 0 && s->fill != FILL_DONE && (regular || !tuner_search_exhausted(s)))
		fill_one(s, out, regular);
	return out;
}

int tuner_search_begin(tuner_search *s)
{
	close_generation(s);
	if (s->since_gain >= s->o.stall_generations)
		return -1;
	s->first_of_generation = s->ncands;
	s->best_before = s->best;
	s->nproposed = 0;
	s->nnext = -1;
	s->fill = FILL_START;
	s->generations++;
	s->open = true;
	return 0;
}

json_t *tuner_search_propose(tuner_search *s, int tries)
{
	return fill(s, tries, false);
}

bool tuner_search_full(const tuner_search *s)
{
	return !s->open || s->fill == FILL_DONE;
}

bool tuner_search_exhausted(const tuner_search *s)
{
	return s->stale >= TRIES * s->o.population;
}

int tuner_search_proposed(const tuner_search *s)
{
	return s->open ? s->nproposed : 0;
}

void tuner_search_drops_get(const tuner_search *s, tuner_search_drops *drops)
{
	*drops = s->drops;
}

json_t *tuner_search_generation(tuner_search *s)
{
	json_t *out;

	if (tuner_search_begin(s) < 0)
		return NULL;
	if (!(out = fill(s, INT_MAX, true)) || !json_array_size(out)) {
		json_decref(out);
		s->open = false;
		s->generations--;
		return NULL;
	}
	return out;
}

static void fill_defaults(tuner_search_options *o)
{
	if (o->population <= 0)
		o->population = TUNER_POPULATION;
	if (o->stall_generations <= 0)
		o->stall_generations = TUNER_STALL;
	if (o->noise <= 0)
		o->noise = TUNER_NOISE;
	if (o->filter_factor <= 0)
		o->filter_factor = TUNER_FILTER_FACTOR;
}

/* Elites: 2, or a sixteenth of a large population, fewer than the whole;
 * immigrants: an eighth of it, at least one. */
static void set_shares(tuner_search *s)
{
	int p = s->o.population;

	s->elites = p / 16 > 2 ? p / 16 : 2;
	s->elites = s->elites < p ? s->elites : p - 1;
	s->immigrants = p / 8 > 1 ? p / 8 : 1;
}

tuner_search *tuner_search_new(const sched_graph *graph,
			       const tuner_search_options *options)
{
	tuner_search *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->graph = graph;
	s->o = options ? *options : (tuner_search_options){0};
	fill_defaults(&s->o);
	set_shares(s);
	s->rng = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)s->o.seed * 0xbf58476d1ce4e5b9ULL);
	s->best = s->best_before = INFINITY;
	s->capcands = 64;
	s->cands = malloc(s->capcands * sizeof(candidate));
	s->pop = malloc(s->o.population * sizeof(int));
	s->next = malloc(s->o.population * sizeof(int));
	if (!s->cands || !s->pop || !s->next || grow_slots(s) < 0 ||
	    !(s->base = kgen_plan_default(graph)) ||
	    !(s->fusion = tuner_fusion_new(graph, s->base, s->o.peaks, s->o.cuda)) ||
	    build_space(s) < 0) {
		tuner_search_free(s);
		return NULL;
	}
	encode(s, s->base, s->defaults);
	memcpy(s->fused, s->defaults, s->ngenes * sizeof(int));
	for (int g = s->first_fusion_gene; g < s->ngenes; g++)
		s->fused[g] = 1;
	return s;
}

/* A candidate for known plan "plan", with genes when it is a genome: its
 * values are in their domains and its genes decode to it. */
static int add_known(tuner_search *s, const kgen_plan *plan, char *text,
		     char *code, uint64_t hash)
{
	bool genome = encode(s, plan, s->genes);

	if (genome) {
		char *again;

		decode(s, s->genes);
		again = plan_text(s, s->plan);
		genome = again && !strcmp(again, text);
		free(again);
	}
	return add_candidate(s, text, code, hash, genome ? s->genes : NULL);
}

/* The index of the value of "values" nearest "want", by ratio. */
static int nearest(const int64_t *values, int n, int64_t want)
{
	int best = 0;

	for (int i = 1; i < n; i++)
		if (fabs(log((double)values[i] / (double)want)) <
		    fabs(log((double)values[best] / (double)want)))
			best = i;
	return best;
}

/* Gene "gene" set to the nearest of "n" values to the integer "v", if
 * "v" is a positive integer. */
static void set_nearest(int *genes, int gene, const int64_t *values, int n,
			const json_t *v)
{
	if (json_is_integer(v) && json_integer_value(v) > 0)
		genes[gene] = nearest(values, n, json_integer_value(v));
}

/* The genes of kernel k nearest the schedule "sch" (JSON, any shapes). */
static void nearest_kernel(const tuner_search *s, int k, const json_t *sch, int *genes)
{
	static const char *const splits[] = {"thread", "warp", "block"};
	const kernel_space *ks = &s->kernels[k];
	int first = ks->first_gene, r = ks->rank;
	const char *split = json_string_value(json_object_get(sch, "split"));
	const json_t *parallel = json_object_get(sch, "parallel");

	for (int d = 0; d < r; d++) {
		set_nearest(genes, first + d, ks->tiles[d], ks->ntiles[d],
			    json_array_get(json_object_get(sch, "tile"), d));
		set_nearest(genes, first + r + d, ks->threads[d], ks->nthreads[d],
			    json_array_get(json_object_get(sch, "threads"), d));
	}
	if (json_is_integer(parallel) && json_integer_value(parallel) >= 0)
		genes[first + 2 * r] = json_integer_value(parallel) < r ?
				       (int)json_integer_value(parallel) : r;
	set_nearest(genes, first + 2 * r + 1, unrolls, 4, json_object_get(sch, "unroll"));
	set_nearest(genes, first + 2 * r + 2, vectors, 4, json_object_get(sch, "vector"));
	for (int i = 0; split && i < s->domain[first + 2 * r + 3]; i++)
		if (!strcmp(split, splits[i]))
			genes[first + 2 * r + 3] = i;
	set_nearest(genes, first + PARTS_GENE(r), parts_of_reductions,
		    s->domain[first + PARTS_GENE(r)], json_object_get(sch, "parts"));
}

/* The kernels of a plan (JSON, possibly of a graph of the same form with
 * other shapes) as this graph's: their ops and lanes, each on its root's
 * default schedule; NULL unless they hold each of this graph's ops once. */
static kgen_plan *grouping_of(const tuner_search *s, const json_t *kernels)
{
	kgen_plan *plan = calloc(1, sizeof(*plan));
	int *seen = calloc(s->nkernels, sizeof(int)), covered = 0;
	const json_t *kernel;
	size_t i;

	if (!plan || !seen ||
	    !(plan->kernels = calloc(json_array_size(kernels) + 1, sizeof(kgen_kernel)))) {
		free(plan);
		free(seen);
		return NULL;
	}
	json_array_foreach(kernels, i, kernel) {
		kgen_kernel *k = &plan->kernels[plan->nkernels++];
		const json_t *ops = json_object_get(kernel, "ops");
		const json_t *lanes = json_object_get(kernel, "lanes");
		int b = -1;

		for (size_t j = 0; j < json_array_size(ops) && j < KGEN_MAX_OPS; j++)
			k->ops[k->nops++] = (int)json_integer_value(json_array_get(ops, j));
		for (size_t j = 0; j < json_array_size(lanes) && j < KGEN_MAX_OPS; j++)
			k->lanes[k->nlanes++] = (int)json_integer_value(json_array_get(lanes, j));
		for (int j = 0; j < k->nops; j++)
			if (k->ops[j] < 0 || k->ops[j] >= s->nkernels || seen[k->ops[j]]++)
				k->nops = 0;
		if (k->nops > 0)
			b = base_kernel(s, kgen_kernel_op(s->graph, k)->index);
		if (b < 0)
			break;
		k->schedule = s->base->kernels[b].schedule;
		covered += k->nops;
	}
	free(seen);
	if (covered != s->nkernels) {
		kgen_plan_free(plan);
		return NULL;
	}
	return plan;
}

/* The schedule of the kernel of "kernels" (JSON) whose root is op "op",
 * the kernel itself when it has none (its defaults stay), or NULL when op
 * is a member of another root's kernel. */
static const json_t *schedule_of(const tuner_search *s, const kgen_plan *grouping,
				 int op, const json_t *kernels)
{
	for (int k = 0; k < grouping->nkernels; k++) {
		const json_t *kernel = json_array_get(kernels, k);

		if (kgen_kernel_op(s->graph, &grouping->kernels[k])->index == op)
			return json_object_get(kernel, "schedule") ?: kernel;
	}
	return NULL;
}

void tuner_search_suggest(tuner_search *s, const json_t *plan)
{
	const json_t *kernels = json_object_get(plan, "kernels");
	kgen_plan *grouping = grouping_of(s, kernels);
	int *genes;

	if (!grouping || !(genes = realloc(s->suggested,
					   (s->nsuggested + 1) * s->ngenes * sizeof(int)))) {
		kgen_plan_free(grouping);
		return;
	}
	s->suggested = genes;
	genes += s->nsuggested++ * s->ngenes;
	memcpy(genes, s->defaults, s->ngenes * sizeof(int));
	for (int k = 0; k < s->nkernels; k++) {
		const json_t *sch = schedule_of(s, grouping, s->base->kernels[k].ops[0], kernels);

		if (sch)
			nearest_kernel(s, k, sch, genes);
	}
	tuner_fusion_encode(s->fusion, grouping, genes + s->first_fusion_gene);
	kgen_plan_free(grouping);
}

void tuner_search_know(tuner_search *s, json_t *json, double ms)
{
	kgen_plan *plan = NULL;
	candidate *c;
	char *text, *code;
	uint64_t hash;
	int index;

	if (kgen_plan_from_json(s->graph, json, &plan, NULL) < 0)
		return;
	if (!(text = plan_text(s, plan))) {
		kgen_plan_free(plan);
		return;
	}
	code = plan_code(s, plan);
	hash = text_hash(code ? code : text);
	if ((index = find(s, code ? code : text, hash)) >= 0) {
		free(text);
		free(code);
	} else {
		index = add_known(s, plan, text, code, hash);
	}
	kgen_plan_free(plan);
	if (index < 0)
		return;
	c = &s->cands[index];
	ms = ms > 0 ? ms : INFINITY;
	c->ms = isnan(c->ms) || ms < c->ms ? ms : c->ms;
	s->best = c->ms < s->best ? c->ms : s->best;
}

void tuner_search_record(tuner_search *s, int handle, double ms)
{
	candidate *c;

	if (!s->open || handle < 0 || handle >= s->nproposed)
		return;
	c = &s->cands[s->proposed[handle]];
	s->measured += isnan(c->ms);
	c->ms = ms > 0 ? ms : INFINITY;
	s->best = c->ms < s->best ? c->ms : s->best;
}

int tuner_search_generations(const tuner_search *s)
{
	return s->generations;
}

int tuner_search_measured(const tuner_search *s)
{
	return s->measured;
}

int tuner_search_filtered(const tuner_search *s)
{
	return s->drops.filtered;
}

double tuner_search_best(const tuner_search *s)
{
	return s->best;
}

json_t *tuner_search_best_plans(const tuner_search *s, int n)
{
	json_t *plans = json_array();
	int *best, count = best_indices(s, false, &best);

	if (count < 0 || !plans) {
		json_decref(plans);
		free(best);
		return NULL;
	}
	for (int i = 0; i < count && i < n; i++)
		json_array_append_new(plans, json_loads(s->cands[best[i]].text, 0, NULL));
	free(best);
	return plans;
}

void tuner_search_free(tuner_search *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->ncands; i++) {
		free(s->cands[i].text);
		free(s->cands[i].code);
		free(s->cands[i].genes);
	}
	free(s->cands);
	free(s->slots);
	free(s->pop);
	free(s->next);
	free(s->kernels);
	free(s->domain);
	free(s->defaults);
	free(s->fused);
	free(s->suggested);
	free(s->proposed);
	free(s->genes);
	free(s->schedules);
	kgen_plan_free(s->plan);
	kgen_plan_free(s->base);
	tuner_fusion_free(s->fusion);
	free(s);
}
