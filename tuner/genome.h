/*
 * genome.h: the genome of the search (genome.c), its layout and its
 * decoding into plans (docs/design/tuning.md, "The genome").
 *
 * A genome is an array of genes, each an index into a finite domain: for
 * each kernel of the base plan (one kernel per op), the genes of its
 * schedule, where kernel_genes says; then the sync genes of every kernel
 * (SYNC_GENES each, cuda only); then the fusion genes (fuse.c). The
 * layout is computed once, from the graph and its default plan.
 */
#ifndef TUNER_GENOME_H
#define TUNER_GENOME_H

#include "tuner_int.h"

#define MAX_TILES 12   /* powers of two to 256, the extent, the default */
#define THREAD_CHOICES 10 /* 1, 2, 4, ... 256 and the default */

/* The blocking genes of a contraction, after the kernel's others: on the
 * cpu its micro-kernels (kgen_micro): mr (0: none, the tiles rule), nr,
 * kc (0: all of K), mc and nc as multiples of mr and nr, pack (and three
 * genes of a single value); on cuda, where its factors fit, its
 * tensor-core tiles (kgen_mma), as enum mma_gene says. */
#define BLOCKING_GENES 9
enum blocking { BLOCKING_NONE, BLOCKING_MICRO, BLOCKING_MMA };
/* The tensor-core genes: bm (0: none), bn, bk, wm, wn, stages, raster
 * (row by row, or groups of 8 tile rows), rotated (padded or rotated rows
 * in shared memory), split_k (1, 2 or 4 parts of K). */
enum mma_gene {
	MMA_BM, MMA_BN, MMA_BK, MMA_WM, MMA_WN, MMA_STAGES, MMA_RASTER,
	MMA_ROTATED, MMA_SPLIT_K,
};

/* The sync genes of each base kernel: when the plan's kernel rooted at
 * its op waits on the kernel before it, the policy (0: stream order;
 * else a sched_sync_kind + 1), then the wait-kernel, the ordered tiles
 * and the early loads, each 0 for its default (on, on, off). */
enum sync_gene {
	SYNC_POLICY, SYNC_NO_WAIT_KERNEL, SYNC_UNORDERED, SYNC_EARLY_LOADS,
	SYNC_GENES,
};

/* Where the genes of one base kernel sit in the genome: the first of its
 * tiles and of its threads (one per output dim each), its parallel loops,
 * unroll, vector width, reduction split and parts, its library gene (-1:
 * none) and the first of its BLOCKING_GENES blocking genes (-1: none);
 * they run from "first" to "end" (excluded). */
typedef struct kernel_genes {
	int first;
	int tile, threads;
	int parallel, unroll, vector, split, parts;
	int library, blocking;
	int end;
} kernel_genes;

/* The genes of a base kernel: where they sit, and the values of their
 * domains where they are not fixed tables. */
typedef struct kernel_space {
	kernel_genes at;
	int rank;
	bool reduces;
	bool library;           /* a library gene (0: generated, 1: library step) */
	enum blocking blocking; /* which blocking genes it has */
	sched_contraction product;
	int factor_bytes;       /* of an element of the product's factors */
	int ntiles[SCHED_MAX_RANK], nthreads[SCHED_MAX_RANK];
	int64_t tiles[SCHED_MAX_RANK][MAX_TILES];
	int64_t threads[SCHED_MAX_RANK][THREAD_CHOICES];
} kernel_space;

/* The genome of a graph: its layout, each gene's domain, the genomes of
 * the default plan and of the largest fusion, and the plan last decoded. */
typedef struct tuner_genome {
	const sched_graph *graph;
	bool cuda;
	kgen_plan *base;          /* one kernel per op: the default plan */
	tuner_fusion *fusion;
	kernel_space *kernels;    /* one per kernel of the base */
	int nkernels;
	int ngenes;
	int first_sync;           /* SYNC_GENES per base kernel from here */
	int first_fusion, nfusion; /* the fusion genes */
	int *domain;              /* per gene, the size of its domain */
	int *defaults;            /* the default plan's genome */
	int *fused;               /* the same with every fusion gene on */
	kgen_plan *plan;          /* the last genome decoded */
	kgen_schedule *schedules; /* scratch: one per kernel of the base */
} tuner_genome;

/* The values of the unroll, vector and parts genes (4 each), and the
 * sides of the tensor-core tiles (3). */
extern const int64_t genome_unrolls[4], genome_vectors[4], genome_parts[4];
extern const int64_t genome_mma_sides[3];

/* The genome of "graph" (kept) and its default plan, with "peaks" for
 * the fusion's cost model (may be NULL), for the cuda backend (else the
 * cpu's), with library genes where "library"; NULL when out of memory or
 * the graph has no default plan. */
__tuner_give tuner_genome *genome_new(__tuner_keep const sched_graph *graph,
				      __tuner_keep const kgen_peaks *peaks,
				      bool cuda, bool library);
void genome_free(__tuner_take tuner_genome *g);

/* The sync genes of base kernel "b" (SYNC_GENES of them). */
int genome_sync(__tuner_keep const tuner_genome *g, int b);
/* The base kernel that computes op "op", or -1. */
int genome_base_kernel(__tuner_keep const tuner_genome *g, int op);
/* The index of "value" among the "n" of "values", or -1. */
int genome_index_of(const int64_t *values, int n, int64_t value);

/* The genes of "plan" into "genes": each kernel's schedule and sync as
 * its root's genes (the other members' keep their defaults), a fused
 * kernel's products on tensor cores, or its library step, as its first
 * op's (as fuse.c decodes them), its grouping as fusion genes; false when
 * a value is in no domain. */
bool genome_encode(__tuner_keep const tuner_genome *g,
		   __tuner_keep const kgen_plan *plan, int *genes);
/* The plan of "genes" (g->plan, the genome's until the next decode),
 * repaired to be legal; NULL when out of memory. */
kgen_plan *genome_decode(__tuner_keep tuner_genome *g, const int *genes);

#endif
