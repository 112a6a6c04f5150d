/*
 * seeds.c: the genomes a search starts from: the seeds of its first
 * population (beside its best known plans), and the genome nearest a plan
 * of another key of the same form (docs/design/tuning.md).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "seeds.h"

#define H100_SMS 132

/* A blocking that is seldom far off, for the first population: micro
 * 6 x 32, kc 256, mc 16 mr, nc 4 nr, packed; mma 128 x 128 tiles, bk 32,
 * 64 x 64 warps, 3 stages, row by row, padded, K whole. */
static const int blocking_seed[][BLOCKING_GENES] = {
	[BLOCKING_MICRO] = {2, 2, 2, 3, 1, 1, 0, 0, 0},
	[BLOCKING_MMA] = {2, 2, 0, 1, 1, 1, 0, 0, 0},
};

/* The seeding of one first population: the genome, the search's options,
 * where seeds go, and two genomes of scratch. */
typedef struct seeding {
	const tuner_genome *g;
	const tuner_search_options *o;
	seeds_join *join;
	void *search;
	int npop;  /* the population's size after the last seed joined */
	int *genes; /* the seed being made */
	int *from;  /* what it is made from */
} seeding;

static void join(seeding *z, const int *genes)
{
	z->npop = z->join(z->search, genes);
}

/* "genes" into "out" (may be the same). */
static int *copy(const tuner_genome *g, const int *genes, int *out)
{
	if (out != genes)
		memcpy(out, genes, g->ngenes * sizeof(int));
	return out;
}

/* "genes" with the seed blocking (blocking_seed) on every matrix product
 * and, with "synced", every kernel waiting on the one before it by the
 * most grouped policy its dependence offers. */
static void propose_blocked(seeding *z, const int *genes, bool synced)
{
	const tuner_genome *g = z->g;

	copy(g, genes, z->genes);
	for (int k = 0; synced && k < g->nkernels; k++)
		z->genes[genome_sync(g, k) + SYNC_POLICY] = SCHED_SYNC_KINDS;
	for (int k = 0; k < g->nkernels; k++) {
		const kernel_space *ks = &g->kernels[k];

		if (ks->blocking)
			memcpy(z->genes + ks->at.blocking, blocking_seed[ks->blocking],
			       BLOCKING_GENES * sizeof(int));
	}
	join(z, z->genes);
}

/* On cuda: the default schedules with each reducing kernel of fewer
 * tiles than the device has multiprocessors (the peaks' cores; an H100's
 * 132 without peaks) cut in the fewest parts that give it as many blocks,
 * or in the most it can be cut in; nothing when no kernel is cut. */
static void propose_parts(seeding *z)
{
	const tuner_genome *g = z->g;
	const kgen_peaks *peaks = z->o->peaks;
	int cores = peaks && peaks->cores > 0 ? peaks->cores : H100_SMS;
	bool cut = false;

	copy(g, g->defaults, z->genes);
	for (int k = 0; k < g->nkernels; k++) {
		int gene = g->kernels[k].at.parts, p = 0;
		int64_t tiles = kgen_kernel_tiles(g->graph, &g->base->kernels[k]);

		while (p + 1 < g->domain[gene] && tiles * genome_parts[p] < cores)
			p++;
		z->genes[gene] = p;
		cut |= p > 0;
	}
	if (cut)
		join(z, z->genes);
}

/* "genes" with every product the library can make as a library step. */
static void propose_library(seeding *z, const int *genes)
{
	const tuner_genome *g = z->g;

	copy(g, genes, z->genes);
	for (int k = 0; k < g->nkernels; k++)
		if (g->kernels[k].library)
			z->genes[g->kernels[k].at.library] = 1;
	join(z, z->genes);
}

/* The largest fusion's genes with the edges of layer "l" of producers
 * off, into "out" (returned). */
static int *layer_apart(const tuner_genome *g, int l, int *out)
{
	copy(g, g->fused, out);
	for (int i = 0; i < g->nfusion; i++)
		if (tuner_fusion_edge_layer(g->fusion, i) == l)
			out[g->first_fusion + i] = 0;
	return out;
}

/* The largest fusion's genes with every product a library step can make
 * kept apart from the ops around it, into "out" (returned). */
static int *products_apart(const tuner_genome *g, int *out)
{
	copy(g, g->fused, out);
	for (int k = 0; k < g->nkernels; k++)
		for (int i = 0; g->kernels[k].library && i < g->nfusion; i++)
			if (tuner_fusion_gene_touches(g->fusion, i, g->base->kernels[k].ops[0]))
				out[g->first_fusion + i] = 0;
	return out;
}

/* The default schedules with every fusion gene on, and, for each layer of
 * producers, the same with that layer's edges off (a matrix product kept
 * apart from the elementwise tail that follows it, which then fuses
 * whole), also with the seed blocking (sibling products side by side keep
 * it) and, where library steps are offered, with the products kept apart
 * as library steps; until half the population is there. Each repairs to
 * the largest such fusion the planner allows. */
static void propose_fused(seeding *z)
{
	const tuner_genome *g = z->g;
	int layers = 0;

	join(z, g->fused);
	for (int i = 0; i < g->nfusion; i++)
		if (tuner_fusion_edge_layer(g->fusion, i) + 1 > layers)
			layers = tuner_fusion_edge_layer(g->fusion, i) + 1;
	for (int l = 0; l < layers && z->npop < z->o->population / 2; l++) {
		layer_apart(g, l, z->from);
		join(z, z->from);
		propose_blocked(z, z->from, false);
		if (z->o->library)
			propose_library(z, z->from);
	}
}

/* "genes" with every kernel's last dim tiled whole, into "out"
 * (returned): rows that hold what a fused tail reads at other columns (an
 * LSTM's gates), which smaller tiles make a global dependence. */
static int *whole_rows(const tuner_genome *g, const int *genes, int *out)
{
	copy(g, genes, out);
	for (int k = 0; k < g->nkernels; k++) {
		const kernel_space *ks = &g->kernels[k];
		const sched_tensor *t = &g->graph->tensors[kgen_kernel_op(g->graph,
						&g->base->kernels[k])->target];
		int last = ks->rank - 1;
		int whole = last < 0 ? -1 : genome_index_of(ks->tiles[last], ks->ntiles[last],
							    t->shape[last]);

		if (whole >= 0)
			out[ks->at.tile + last] = whole;
	}
	return out;
}

/* "genes" with every kernel's tile of about "elements" elements into
 * "out", filled from the last dim ("whole_last": from the one before it,
 * the last keeping its tile): each dim the largest tile of its domain
 * (which holds 1) within what the dims after it leave. */
static void tiles_of(const tuner_genome *g, const int *genes, int64_t elements,
		     bool whole_last, int *out)
{
	copy(g, genes, out);
	for (int k = 0; k < g->nkernels; k++) {
		const kernel_space *ks = &g->kernels[k];
		int64_t left = elements;
		int d = ks->rank - 1;

		if (whole_last && d >= 0) {
			left /= ks->tiles[d][out[ks->at.tile + d]];
			d--;
		}
		for (; d >= 0; d--) {
			int best = genome_index_of(ks->tiles[d], ks->ntiles[d], 1);

			for (int i = 0; i < ks->ntiles[d]; i++)
				if (ks->tiles[d][i] <= left && ks->tiles[d][i] > ks->tiles[d][best])
					best = i;
			out[ks->at.tile + d] = best;
			left /= ks->tiles[d][best];
		}
	}
}

/* On cuda: the largest fusion with every kernel's tile of 64 x 64
 * elements and its products on tensor cores in the seed blocking with
 * warps of 32 x 32: a fused group's first product then runs in 4 warps
 * with the rest as its epilogue (kgen_fused_mma_fit), and its region and
 * the stages kept after it fit shared memory. */
static void propose_fused_mma(seeding *z)
{
	const tuner_genome *g = z->g;

	tiles_of(g, g->fused, 64 * 64, false, z->genes);
	for (int k = 0; k < g->nkernels; k++) {
		const kernel_space *ks = &g->kernels[k];
		int *blocking;

		if (ks->blocking != BLOCKING_MMA)
			continue;
		blocking = z->genes + ks->at.blocking;
		memcpy(blocking, blocking_seed[BLOCKING_MMA], BLOCKING_GENES * sizeof(int));
		blocking[MMA_WM] = blocking[MMA_WN] = genome_index_of(genome_mma_sides, 3, 32);
	}
	join(z, z->genes);
}

/* On the cpu: the largest fusion tiled in whole rows, tasks of about
 * 1,024 and 2,048 elements (rows of 384: 2 and 4 rows, beside the
 * default's 8): a softmax of rows of 384 f16 read and written once ran
 * 15 to 20% faster in tasks of two rows than of eight, and a search that
 * tried small tiles only once lost them to a noisy trial. */
static void propose_small_row_tasks(seeding *z)
{
	const tuner_genome *g = z->g;

	whole_rows(g, g->fused, z->from);
	for (int64_t elements = 1024; elements <= 2048; elements *= 2) {
		tiles_of(g, z->from, elements, true, z->genes);
		join(z, z->genes);
	}
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
static void nearest_kernel(const tuner_genome *g, int k, const json_t *sch, int *genes)
{
	static const char *const splits[] = {"thread", "warp", "block"};
	const kernel_space *ks = &g->kernels[k];
	const kernel_genes *at = &ks->at;
	const char *split = json_string_value(json_object_get(sch, "split"));
	const json_t *parallel = json_object_get(sch, "parallel");
	int r = ks->rank;

	for (int d = 0; d < r; d++) {
		set_nearest(genes, at->tile + d, ks->tiles[d], ks->ntiles[d],
			    json_array_get(json_object_get(sch, "tile"), d));
		set_nearest(genes, at->threads + d, ks->threads[d], ks->nthreads[d],
			    json_array_get(json_object_get(sch, "threads"), d));
	}
	if (json_is_integer(parallel) && json_integer_value(parallel) >= 0)
		genes[at->parallel] = json_integer_value(parallel) < r ?
				      (int)json_integer_value(parallel) : r;
	set_nearest(genes, at->unroll, genome_unrolls, 4, json_object_get(sch, "unroll"));
	set_nearest(genes, at->vector, genome_vectors, 4, json_object_get(sch, "vector"));
	for (int i = 0; split && i < g->domain[at->split]; i++)
		if (!strcmp(split, splits[i]))
			genes[at->split] = i;
	set_nearest(genes, at->parts, genome_parts, g->domain[at->parts],
		    json_object_get(sch, "parts"));
}

/* Kernel "kernel" (JSON) as kernel "k" of this graph's: its ops and lanes,
 * on its root's default schedule; false unless it holds ops of this graph
 * none of the kernels before it held ("seen", by op). */
static bool grouping_kernel(const tuner_genome *g, const json_t *kernel, kgen_kernel *k,
			    int *seen)
{
	const json_t *ops = json_object_get(kernel, "ops");
	const json_t *lanes = json_object_get(kernel, "lanes");
	int b = -1;

	for (size_t j = 0; j < json_array_size(ops) && j < KGEN_MAX_OPS; j++)
		k->ops[k->nops++] = (int)json_integer_value(json_array_get(ops, j));
	for (size_t j = 0; j < json_array_size(lanes) && j < KGEN_MAX_OPS; j++)
		k->lanes[k->nlanes++] = (int)json_integer_value(json_array_get(lanes, j));
	for (int j = 0; j < k->nops; j++)
		if (k->ops[j] < 0 || k->ops[j] >= g->nkernels || seen[k->ops[j]]++)
			k->nops = 0;
	if (k->nops > 0)
		b = genome_base_kernel(g, kgen_kernel_op(g->graph, k)->index);
	if (b < 0)
		return false;
	k->schedule = g->base->kernels[b].schedule;
	return true;
}

/* The kernels of a plan (JSON, possibly of a graph of the same form with
 * other shapes) as this graph's: their ops and lanes, each on its root's
 * default schedule; NULL unless they hold each of this graph's ops once. */
static kgen_plan *grouping_of(const tuner_genome *g, const json_t *kernels)
{
	kgen_plan *plan = calloc(1, sizeof(*plan));
	int *seen = calloc(g->nkernels, sizeof(int)), covered = 0;
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

		if (!grouping_kernel(g, kernel, k, seen))
			break;
		covered += k->nops;
	}
	free(seen);
	if (covered != g->nkernels) {
		kgen_plan_free(plan);
		return NULL;
	}
	return plan;
}

/* The schedule of the kernel of "kernels" (JSON) whose root is op "op",
 * the kernel itself when it has none (its defaults stay), or NULL when op
 * is a member of another root's kernel. */
static const json_t *schedule_of(const tuner_genome *g, const kgen_plan *grouping,
				 int op, const json_t *kernels)
{
	for (int k = 0; k < grouping->nkernels; k++) {
		const json_t *kernel = json_array_get(kernels, k);

		if (kgen_kernel_op(g->graph, &grouping->kernels[k])->index == op)
			return json_object_get(kernel, "schedule") ?: kernel;
	}
	return NULL;
}

bool seeds_nearest(const tuner_genome *g, const json_t *plan, int *genes)
{
	const json_t *kernels = json_object_get(plan, "kernels");
	kgen_plan *grouping = grouping_of(g, kernels);

	if (!grouping)
		return false;
	copy(g, g->defaults, genes);
	for (int k = 0; k < g->nkernels; k++) {
		const json_t *sch = schedule_of(g, grouping, g->base->kernels[k].ops[0], kernels);

		if (sch)
			nearest_kernel(g, k, sch, genes);
	}
	tuner_fusion_encode(g->fusion, grouping, genes + g->first_fusion);
	kgen_plan_free(grouping);
	return true;
}

/* "genes" with every kernel's loops serial, into "out" (returned). */
static int *serial(const tuner_genome *g, const int *genes, int *out)
{
	copy(g, genes, out);
	for (int k = 0; k < g->nkernels; k++)
		out[g->kernels[k].at.parallel] = 0;
	return out;
}

void seeds_first(const tuner_genome *g, const tuner_search_options *o,
		 seeds_join *join_fn, void *search)
{
	int *scratch;

	if (g->nkernels < SEEDS_FIRST_FUSED_OPS)
		return;
	if (!(scratch = malloc((g->ngenes + 1) * sizeof(int))))
		return;
	join_fn(search, o->cuda ? g->fused : serial(g, g->fused, scratch));
	free(scratch);
}

void seeds_propose(const tuner_genome *g, const tuner_search_options *o,
		   seeds_join *join_fn, void *search)
{
	int *scratch = malloc(2 * (g->ngenes + 1) * sizeof(int));
	seeding z = {g, o, join_fn, search, 0, scratch, NULL};

	if (!scratch)
		return;
	z.from = scratch + g->ngenes + 1;
	propose_blocked(&z, g->defaults, false);
	propose_blocked(&z, g->fused, false);
	if (o->library)
		propose_library(&z, products_apart(g, z.from));
	propose_blocked(&z, whole_rows(g, g->fused, z.from), false);
	if (o->cuda)
		propose_fused_mma(&z);
	else
		propose_small_row_tasks(&z);
	propose_fused(&z);
	if (o->cuda) {
		propose_blocked(&z, g->defaults, true);
		propose_parts(&z);
	}
	free(scratch);
}
