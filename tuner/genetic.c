/*
 * genetic.c: the genetic search over schedules (strategy "genetic").
 *
 * The genome has one gene per decision of each kernel's schedule: a tile
 * and a thread count per output dim, the parallel loops, unroll, vector
 * width and reduction split, each an index into a finite domain. Decoding
 * repairs what would be illegal (threads per block, threads within tiles,
 * whole warps, the cpu's tile of accumulators), so every genome becomes a
 * plan kgen accepts. The first candidate is the default plan, so that a
 * first version comes at once; then generations of tournament selection,
 * crossover of whole kernels, mutation, elitism and random immigrants.
 * No genome is proposed twice: the search remembers every fitness.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/kgen_int.h"
#include "tuner.h"

#define MAX_TILES 12
#define THREAD_CHOICES 9 /* 1, 2, 4, ... 256 */
#define POPULATION 12
#define ELITES 2
#define IMMIGRANTS 2
#define TOURNAMENT 3
#define MAX_BLOCK 1024
#define MAX_CPU_TILE 16384

static const int unrolls[] = {1, 2, 4, 8};
static const int vectors[] = {1, 2, 4, 8};

typedef struct kernel_space {
	int rank;
	bool reduces;
	int first_gene;
	int ntiles[SCHED_MAX_RANK];
	int64_t tiles[SCHED_MAX_RANK][MAX_TILES];
} kernel_space;

typedef struct candidate {
	int *genes;
	char *plan;     /* the plan it decodes to, once proposed */
	double fitness; /* ms; NAN not measured yet; INFINITY failed */
} candidate;

struct tuner_genetic {
	const sched_graph *graph;
	kgen_plan *plan;    /* decoded into, reused */
	kernel_space *kernels;
	int nkernels, ngenes;
	uint64_t rng;
	candidate *seen;    /* every genome proposed */
	int nseen, capseen;
	int population[POPULATION]; /* indices into seen */
	int npopulation;
	int next;           /* the next of the population to propose */
	int proposed;       /* index in seen of the last proposal, or -1 */
};

static uint64_t rng_next(tuner_genetic *g)
{
	g->rng ^= g->rng >> 12;
	g->rng ^= g->rng << 25;
	g->rng ^= g->rng >> 27;
	return g->rng * 0x2545f4914f6cdd1dULL;
}

static int rng_below(tuner_genetic *g, int n)
{
	return n > 1 ? (int)(rng_next(g) % (uint64_t)n) : 0;
}

static int gene_domain(const tuner_genetic *g, int gene)
{
	for (int k = g->nkernels - 1; k >= 0; k--) {
		const kernel_space *ks = &g->kernels[k];
		int i = gene - ks->first_gene;

		if (i < 0)
			continue;
		if (i < ks->rank)
			return ks->ntiles[i];
		if (i < 2 * ks->rank)
			return THREAD_CHOICES;
		return (int[]){ks->rank + 1, 4, 4, ks->reduces ? 3 : 1}[i - 2 * ks->rank];
	}
	return 1;
}

/* Tile sizes of a dim: the powers of two up to 256, the extent itself
 * when it is smaller (an exactly-sized tile), and the default tile. */
static void tile_choices(int64_t extent, int64_t fallback, int *n, int64_t *tiles)
{
	*n = 0;
	for (int64_t t = 1; t <= extent && t <= 256; t *= 2)
		tiles[(*n)++] = t;
	if (extent <= 256 && (extent & (extent - 1)))
		tiles[(*n)++] = extent;
	for (int i = 0; i < *n; i++)
		if (tiles[i] == fallback)
			return;
	tiles[(*n)++] = fallback;
}

static int index_of(const int *values, int n, int value)
{
	for (int i = 0; i < n; i++)
		if (values[i] == value)
			return i;
	return 0;
}

static int log2_of(int x)
{
	int n = 0;

	while (x > 1 && n < THREAD_CHOICES - 1) {
		x /= 2;
		n++;
	}
	return n;
}

/* The genes of kernel k's default schedule, into "genes". */
static void encode_default(const tuner_genetic *g, int k, int *genes)
{
	const kernel_space *ks = &g->kernels[k];
	const kgen_schedule *s = &g->plan->kernels[k].schedule;
	int *at = genes + ks->first_gene;

	for (int d = 0; d < ks->rank; d++) {
		for (int i = 0; i < ks->ntiles[d]; i++)
			if (ks->tiles[d][i] == s->tile[d])
				at[d] = i;
		at[ks->rank + d] = log2_of(s->threads[d]);
	}
	at[2 * ks->rank] = s->parallel;
	at[2 * ks->rank + 1] = index_of(unrolls, 4, s->unroll);
	at[2 * ks->rank + 2] = index_of(vectors, 4, s->vector);
	at[2 * ks->rank + 3] = s->split;
}

static void build_space(tuner_genetic *g)
{
	int gene = 0;

	for (int k = 0; k < g->nkernels; k++) {
		const kgen_kernel *kernel = &g->plan->kernels[k];
		const sched_op *op = kgen_kernel_op(g->graph, kernel);
		const sched_tensor *t = &g->graph->tensors[op->target];
		kernel_space *ks = &g->kernels[k];

		ks->rank = t->rank;
		ks->reduces = op->reducer != SCHED_RED_NONE;
		ks->first_gene = gene;
		for (int d = 0; d < t->rank; d++)
			tile_choices(t->shape[d], kernel->schedule.tile[d], &ks->ntiles[d],
				     ks->tiles[d]);
		gene += 2 * t->rank + 4;
	}
	g->ngenes = gene;
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

/* Kernel k's schedule from its genes, repaired to be legal. */
static void decode_kernel(const tuner_genetic *g, int k, const int *genes,
			  kgen_schedule *s)
{
	const kernel_space *ks = &g->kernels[k];
	const int *at = genes + ks->first_gene;
	int64_t threads[SCHED_MAX_RANK];
	int r = ks->rank;

	for (int d = 0; d < r; d++) {
		s->tile[d] = ks->tiles[d][at[d]];
		threads[d] = (int64_t)1 << at[r + d];
	}
	while (ks->reduces && product(s->tile, r) > MAX_CPU_TILE)
		halve_largest(s->tile, r);
	for (int d = 0; d < r; d++)
		threads[d] = threads[d] < s->tile[d] ? threads[d] : s->tile[d];
	while (product(threads, r) > MAX_BLOCK)
		halve_largest(threads, r);
	for (int d = 0; d < r; d++)
		s->threads[d] = (int)threads[d];
	s->parallel = at[2 * r] <= r ? at[2 * r] : r;
	s->unroll = unrolls[at[2 * r + 1]];
	s->vector = vectors[at[2 * r + 2]];
	s->split = ks->reduces ? at[2 * r + 3] : KGEN_SPLIT_THREAD;
	if (s->split == KGEN_SPLIT_WARP && product(threads, r) % 32)
		s->split = KGEN_SPLIT_THREAD;
}

static json_t *decode(tuner_genetic *g, const int *genes)
{
	for (int k = 0; k < g->nkernels; k++)
		decode_kernel(g, k, genes, &g->plan->kernels[k].schedule);
	return kgen_plan_to_json(g->graph, g->plan);
}

/* The index in "seen" of "genes" (copied in when new), or -1 when out of
 * memory. */
static int remember(tuner_genetic *g, const int *genes)
{
	size_t bytes = g->ngenes * sizeof(int);

	for (int i = 0; i < g->nseen; i++)
		if (!memcmp(g->seen[i].genes, genes, bytes))
			return i;
	if (g->nseen == g->capseen) {
		int cap = g->capseen ? 2 * g->capseen : 64;
		candidate *seen = realloc(g->seen, cap * sizeof(candidate));

		if (!seen)
			return -1;
		g->seen = seen;
		g->capseen = cap;
	}
	if (!(g->seen[g->nseen].genes = malloc(bytes)))
		return -1;
	memcpy(g->seen[g->nseen].genes, genes, bytes);
	g->seen[g->nseen].plan = NULL;
	g->seen[g->nseen].fitness = NAN;
	return g->nseen++;
}

static void random_genes(tuner_genetic *g, int *genes)
{
	for (int i = 0; i < g->ngenes; i++)
		genes[i] = rng_below(g, gene_domain(g, i));
}

/* Lower is better; unmeasured and failed candidates last. */
static double score(const tuner_genetic *g, int index)
{
	double f = g->seen[index].fitness;

	return isnan(f) ? INFINITY : f;
}

static int tournament(tuner_genetic *g)
{
	int best = g->population[rng_below(g, g->npopulation)];

	for (int i = 1; i < TOURNAMENT; i++) {
		int other = g->population[rng_below(g, g->npopulation)];

		if (score(g, other) < score(g, best))
			best = other;
	}
	return best;
}

/* A child takes each kernel's genes whole from one parent or the other
 * (the genes of a kernel belong together), then about two genes mutate. */
static void breed(tuner_genetic *g, int *child)
{
	const int *a = g->seen[tournament(g)].genes;
	const int *b = g->seen[tournament(g)].genes;

	for (int k = 0; k < g->nkernels; k++) {
		const kernel_space *ks = &g->kernels[k];
		const int *from = rng_below(g, 2) ? a : b;

		memcpy(child + ks->first_gene, from + ks->first_gene,
		       (2 * ks->rank + 4) * sizeof(int));
	}
	for (int i = 0; i < g->ngenes; i++)
		if (rng_below(g, g->ngenes) < 2)
			child[i] = rng_below(g, gene_domain(g, i));
}

/* Sorts the population best first (insertion sort: it is small). */
static void sort_population(tuner_genetic *g)
{
	for (int i = 1; i < g->npopulation; i++)
		for (int j = i; j > 0 && score(g, g->population[j]) <
					 score(g, g->population[j - 1]); j--) {
			int t = g->population[j];

			g->population[j] = g->population[j - 1];
			g->population[j - 1] = t;
		}
}

static bool in_list(const int *list, int n, int value)
{
	for (int i = 0; i < n; i++)
		if (list[i] == value)
			return true;
	return false;
}

/* The next generation: the elites stay (measured already), immigrants
 * and children of tournaments fill the rest with genomes never seen.
 * Returns false when no new genome can be found. */
static bool evolve(tuner_genetic *g)
{
	int next[POPULATION], n = 0, fresh = 0, *genes = malloc(g->ngenes * sizeof(int));

	if (!genes)
		return false;
	sort_population(g);
	for (int i = 0; i < ELITES && i < g->npopulation; i++)
		next[n++] = g->population[i];
	for (int tries = 0; n < POPULATION && tries < 50 * POPULATION; tries++) {
		int index;

		if (fresh < IMMIGRANTS)
			random_genes(g, genes);
		else
			breed(g, genes);
		index = remember(g, genes);
		if (index < 0)
			break;
		if (!isnan(g->seen[index].fitness) || in_list(next, n, index))
			continue;
		next[n++] = index;
		fresh++;
	}
	free(genes);
	memcpy(g->population, next, n * sizeof(int));
	g->npopulation = n;
	g->next = ELITES < n ? ELITES : n;
	return fresh > 0;
}

/* The first generation: the default plan, then random genomes. */
static bool first_generation(tuner_genetic *g)
{
	int *genes = calloc(g->ngenes + 1, sizeof(int));
	int index;

	if (!genes)
		return false;
	for (int k = 0; k < g->nkernels; k++)
		encode_default(g, k, genes);
	index = remember(g, genes);
	free(genes);
	if (index < 0)
		return false;
	g->population[0] = index;
	g->npopulation = 1;
	g->next = 0;
	for (int tries = 0; g->npopulation < POPULATION && tries < 50 * POPULATION; tries++) {
		int *random = malloc(g->ngenes * sizeof(int));

		if (!random)
			return false;
		random_genes(g, random);
		index = remember(g, random);
		free(random);
		if (index >= 0 && !in_list(g->population, g->npopulation, index))
			g->population[g->npopulation++] = index;
	}
	return true;
}

tuner_genetic *tuner_genetic_new(const sched_graph *graph, unsigned seed)
{
	tuner_genetic *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->graph = graph;
	g->plan = kgen_plan_default(graph);
	g->nkernels = g->plan ? g->plan->nkernels : 0;
	g->kernels = calloc(g->nkernels + 1, sizeof(kernel_space));
	g->rng = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)seed * 0xbf58476d1ce4e5b9ULL);
	g->proposed = -1;
	if (!g->plan || !g->kernels) {
		tuner_genetic_free(g);
		return NULL;
	}
	build_space(g);
	if (!first_generation(g)) {
		tuner_genetic_free(g);
		return NULL;
	}
	return g;
}

/* Records the fitness of the last proposal: the median of the whole plan
 * when it verified, INFINITY otherwise. */
static void record(tuner_genetic *g, const json_t *answer)
{
	const char *kind = json_string_value(json_object_get(answer, "kind"));
	double ms = json_number_value(json_object_get(answer, "total_ms"));

	if (g->proposed < 0)
		return;
	g->seen[g->proposed].fitness = kind && !strcmp(kind, "ok") && ms > 0 ? ms : INFINITY;
	g->proposed = -1;
}

/* The candidate proposed before whose plan is "text", or -1: genomes that
 * repair to the same plan share its measurement. */
static int same_plan(const tuner_genetic *g, const char *text)
{
	for (int i = 0; i < g->nseen; i++)
		if (g->seen[i].plan && !strcmp(g->seen[i].plan, text))
			return i;
	return -1;
}

json_t *tuner_genetic_next(tuner_genetic *g, const json_t *last_answer)
{
	record(g, last_answer);
	for (;;) {
		json_t *plan;
		char *text;
		int index, twin;

		if (g->next >= g->npopulation && !evolve(g))
			return NULL;
		index = g->population[g->next++];
		plan = decode(g, g->seen[index].genes);
		text = json_dumps(plan, JSON_COMPACT | JSON_SORT_KEYS);
		if (!text) {
			json_decref(plan);
			return NULL;
		}
		if ((twin = same_plan(g, text)) < 0) {
			g->seen[index].plan = text;
			g->proposed = index;
			return plan;
		}
		g->seen[index].fitness = g->seen[twin].fitness;
		free(text);
		json_decref(plan);
	}
}

double tuner_genetic_best(const tuner_genetic *g)
{
	double best = INFINITY;

	for (int i = 0; i < g->nseen; i++)
		if (score(g, i) < best)
			best = score(g, i);
	return best;
}

int tuner_genetic_measured(const tuner_genetic *g)
{
	int n = 0;

	for (int i = 0; i < g->nseen; i++)
		n += !isnan(g->seen[i].fitness);
	return n;
}

void tuner_genetic_free(tuner_genetic *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->nseen; i++) {
		free(g->seen[i].genes);
		free(g->seen[i].plan);
	}
	free(g->seen);
	free(g->kernels);
	kgen_plan_free(g->plan);
	free(g);
}
