/*
 * search.c: the search over the schedules of a graph, a generation at a
 * time (docs/design/tuning.md): a genetic algorithm over the genomes of
 * genome.c, started from the seeds of seeds.c.
 *
 * Every plan the search has seen (proposed, known from earlier trials, or
 * dropped by the cost model) is a seen_plan, found by its identity in a
 * hash set (its text; on the cpu, its C code), so no plan is proposed
 * twice however many genomes repair to it.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "genome.h"
#include "seeds.h"

#define TOURNAMENT 3
#define TRIES 50       /* genomes drawn per place in a generation, at most */
#define FUSION_NEIGHBOURS 8 /* at most population / 8 of them per generation */

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

/* A plan seen: proposed (generation >= 0), known, or filtered (no genes
 * until the filter admits it, never measured before). */
typedef struct seen_plan {
	char *text;     /* compact JSON with sorted keys */
	char *code;     /* cpu: the SHA-256 of its C code, its identity; else NULL */
	uint64_t hash;  /* of its identity: code, or else text */
	int *genes;     /* NULL when the plan is no genome's */
	double ms;      /* NAN: not measured; INFINITY: failed */
	int generation; /* the generation that proposed it, or -1 */
	bool filtered;  /* dropped by the cost model, not proposed (yet) */
	bool costed;    /* with peaks: its estimates below are set */
	double optimistic_ms;   /* tuner_optimistic_ms */
	tuner_cost_terms terms; /* for the calibrated model */
} seen_plan;

/* The model the cost filter estimates with (docs/design/tuning.md). */
typedef struct cost_model {
	bool calibrated; /* rates fitted to the trials, and ranking them
				  * better than the peaks' roofline */
	tuner_cost_rates rates;
	double rho_peaks, rho; /* Spearman of the roofline's and of the
				  * model's estimates with the times (NAN:
				  * too few trials) */
	bool starved;          /* the last generation proposed nothing, its
				  * plans all filtered */
} cost_model;

struct tuner_search {
	const sched_graph *graph;
	tuner_search_options o; /* with the defaults filled in */
	int elites, immigrants;
	tuner_genome *g;        /* the layout, the default and fused genomes */
	int ngenes;             /* g->ngenes */
	int *suggested;         /* genomes for generation 0 beside the default */
	int nsuggested;
	int *genes;             /* scratch */
	uint64_t rng;
	seen_plan *cands;       /* every plan seen, by index */
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
	int filtered_before;     /* drops.filtered when the generation began */
	int first_of_generation; /* its first candidate */
	double best, best_before; /* now, and when the generation began */
	int since_gain;         /* generations closed without a gain */
	int restarts;           /* new first populations after a stall */
	int mutation;           /* genes a mutation draws again, about */
	cost_model model;
	/* The sweep: once random genomes stop giving new plans, every other
	 * genome drawn is the next in order (an odometer over the domains),
	 * until a whole pass gives no new plan: the space is exhausted. */
	bool sweeping, swept;
	int *sweep;    /* the next genome of the pass */
	int swept_new; /* plans the pass proposed so far */
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

static const char *identity(const seen_plan *c)
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
	seen_plan *c;

	if (s->ncands == s->capcands) {
		int cap = 2 * s->capcands;
		seen_plan *cands = realloc(s->cands, cap * sizeof(seen_plan));

		if (!cands)
			goto fail;
		s->cands = cands;
		s->capcands = cap;
	}
	if (2 * (s->ncands + 1) > s->capslots && grow_slots(s) < 0)
		goto fail;
	c = &s->cands[s->ncands];
	*c = (seen_plan){text, code, hash, NULL, NAN, -1, .filtered = false};
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

/* Whether the cost filter steps aside: it admits every plan while its
 * model ranks the trials poorly, after a generation it starved, and
 * while the search sweeps the space (every plan of it is to be
 * measured). */
static bool filter_aside(const tuner_search *s)
{
	return s->sweeping || s->model.starved ||
	       s->model.rho < TUNER_MIN_RANK_CORRELATION;
}

/* The estimate of candidate "c" by the filter's model. */
static double estimate(const tuner_search *s, const seen_plan *c)
{
	return s->model.calibrated ? tuner_calibrated_ms(&c->terms, &s->model.rates) :
				     c->optimistic_ms;
}

/* Whether the cost model rules out candidate "c": estimated slower than
 * filter_factor times the best time so far. */
static bool too_slow(const tuner_search *s, const seen_plan *c)
{
	return c->costed && isfinite(s->best) && !filter_aside(s) &&
	       estimate(s, c) > s->o.filter_factor * s->best;
}

/* The cost model's estimates of "plan" into "c", with peaks. */
static void cost(const tuner_search *s, const kgen_plan *plan, seen_plan *c)
{
	if (!s->o.peaks)
		return;
	c->optimistic_ms = tuner_optimistic_ms(s->graph, plan, s->o.peaks, s->o.cuda);
	c->costed = tuner_cost_terms_of(s->graph, plan, s->o.peaks, s->o.cuda,
					&c->terms) == 0 &&
		    isfinite(c->optimistic_ms);
}

/* Counts why the plan of a genome was not proposed: candidate "seen"
 * was proposed or filtered before, or measured by an earlier search. */
static void count_seen(tuner_search *s, int seen)
{
	const seen_plan *c = &s->cands[seen];

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

/* A plan the filter dropped before, with the genome "genes" that gave
 * it again, proposed into "out" if the filter admits it now (its model
 * changed, or it steps aside); -1 when not. */
static int admit(tuner_search *s, int index, const int *genes, json_t *out)
{
	seen_plan *c = &s->cands[index];
	size_t bytes = s->ngenes * sizeof(int);

	if (too_slow(s, c) || !(c->genes = malloc(bytes))) {
		count_seen(s, index);
		return -1;
	}
	memcpy(c->genes, genes, bytes);
	c->filtered = false;
	s->stale = 0;
	return hand_out(s, index, out);
}

/* Genome "genes" as a plan of the generation "out", unless its plan was
 * seen before or is too slow (then remembered as filtered). Returns its
 * candidate, or -1 when not proposed (s->drops says why). */
static int propose(tuner_search *s, const int *genes, json_t *out)
{
	const kgen_plan *plan = genome_decode(s->g, genes);
	char *text, *code;
	uint64_t hash;
	int index;

	if (!plan || !(text = plan_text(s, plan))) {
		s->drops.invalid++;
		s->stale++;
		return -1;
	}
	code = plan_code(s, plan);
	hash = text_hash(code ? code : text);
	if ((index = find(s, code ? code : text, hash)) >= 0) {
		free(text);
		free(code);
		if (s->cands[index].filtered)
			return admit(s, index, genes, out);
		count_seen(s, index);
		return -1;
	}
	s->stale = 0;
	if ((index = add_candidate(s, text, code, hash, NULL)) < 0)
		return -1;
	cost(s, plan, &s->cands[index]);
	if (too_slow(s, &s->cands[index])) {
		s->cands[index].filtered = true;
		s->drops.filtered++;
		return -1;
	}
	return admit(s, index, genes, out);
}

static void random_genes(tuner_search *s)
{
	for (int i = 0; i < s->ngenes; i++)
		s->genes[i] = rng_below(s, s->g->domain[i]);
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

/* About s->mutation genes of s->genes drawn again: two, twice as many
 * after each restart. */
static void mutate(tuner_search *s)
{
	for (int i = 0; i < s->ngenes; i++)
		if (rng_below(s, s->ngenes) < s->mutation)
			s->genes[i] = rng_below(s, s->g->domain[i]);
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

/* Where the seeds of the first population go (seeds_join). */
typedef struct seeding {
	tuner_search *s;
	json_t *out;
} seeding;

/* A seed joins the first population; after a restart, a mutant of it
 * (the seed itself was measured already). */
static int join_seed(void *to, const int *genes)
{
	seeding *z = to;
	tuner_search *s = z->s;

	if (s->restarts > 0) {
		memcpy(s->genes, genes, s->ngenes * sizeof(int));
		mutate(s);
		genes = s->genes;
	}
	join_population(s, genes, z->out);
	return s->npop;
}

/* Where generation 0's plans before the default go (seeds_first). */
static int join_first(void *to, const int *genes)
{
	seeding *z = to;

	propose(z->s, genes, z->out);
	return z->s->npop;
}

/* The first population: the best plans measured or known (a quarter of it
 * at most, and only those that are genomes), the seeds (seeds_propose),
 * mutants of the best (the default plan, for a new key) in half the
 * places left, then random genomes: the search looks near what is known
 * to be good and far from it at once. After a restart, the same with
 * mutants of the seeds, all mutants of the wider mutation. */
static void first_population(tuner_search *s, json_t *out)
{
	int *best, n = best_indices(s, true, &best), seeds = s->o.population / 4;
	seeding z = {s, out};

	if (n < 0)
		return;
	seeds = seeds > s->elites ? seeds : s->elites;
	s->npop = n < seeds ? n : seeds;
	memcpy(s->pop, best, s->npop * sizeof(int));
	free(best);
	seeds_propose(s->g, &s->o, join_seed, &z);
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
	int first_sync = s->g->first_sync;

	for (int k = 0; k < s->g->nkernels; k++) {
		const kernel_genes *at = &s->g->kernels[k].at;
		const int *from = rng_below(s, 2) ? a : b;

		memcpy(s->genes + at->first, from + at->first, (at->end - at->first) * sizeof(int));
	}
	memcpy(s->genes + first_sync, (rng_below(s, 2) ? a : b) + first_sync,
	       (s->ngenes - first_sync) * sizeof(int));
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
	int nfusion = s->g->nfusion;
	int start = nfusion > 0 ? rng_below(s, nfusion) : 0;

	for (int i = 0; i < nfusion && n < until; i++) {
		int gene = s->g->first_fusion + (start + i) % nfusion, index;

		if (best[gene] == s->g->fused[gene])
			continue;
		memcpy(s->genes, best, s->ngenes * sizeof(int));
		s->genes[gene] = s->g->fused[gene];
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
		seen_plan *c = &s->cands[i];

		if (c->generation != s->generations - 1)
			continue;
		if (isnan(c->ms))
			c->ms = INFINITY;
		best = c->ms < best ? c->ms : best;
	}
	s->since_gain = best < s->best_before * (1 - s->o.noise) ? 0 : s->since_gain + 1;
	s->model.starved = s->nproposed == 0 && s->drops.filtered > s->filtered_before;
	s->open = false;
}

/* The estimates and times of the candidates measured (with a finite
 * time) and costed, into new arrays; how many, or -1 when out of memory. */
typedef struct measured_costs {
	tuner_cost_terms *terms;
	double *ms, *peaks_ms, *model_ms;
} measured_costs;

static int collect_costs(const tuner_search *s, measured_costs *m)
{
	int n = 0;

	m->terms = malloc((s->ncands + 1) * sizeof(tuner_cost_terms));
	m->ms = malloc(3 * (s->ncands + 1) * sizeof(double));
	if (!m->terms || !m->ms)
		return -1;
	m->peaks_ms = m->ms + s->ncands + 1;
	m->model_ms = m->peaks_ms + s->ncands + 1;
	for (int i = 0; i < s->ncands; i++) {
		const seen_plan *c = &s->cands[i];

		if (!c->costed || !isfinite(c->ms))
			continue;
		m->terms[n] = c->terms;
		m->ms[n] = c->ms;
		m->peaks_ms[n++] = c->optimistic_ms;
	}
	return n;
}

/* The filter's model, again from every trial measured so far: the rates
 * fitted to them (tuner_cost_fit), taken when their estimates rank the
 * trials better than the peaks' roofline does; the rank correlation of
 * the model taken, unknown (NAN) until TUNER_CALIBRATION_TRIALS trials. */
static void fit_model(tuner_search *s)
{
	measured_costs m = {0};
	tuner_cost_rates rates;
	double rho_fit = NAN;
	int n;

	if (!s->o.peaks || (n = collect_costs(s, &m)) < TUNER_CALIBRATION_TRIALS) {
		free(m.terms);
		free(m.ms);
		return;
	}
	s->model.rho_peaks = tuner_spearman(m.peaks_ms, m.ms, n);
	if (tuner_cost_fit(m.terms, m.ms, n, s->o.peaks->launch_ms, &rates)) {
		for (int i = 0; i < n; i++)
			m.model_ms[i] = tuner_calibrated_ms(&m.terms[i], &rates);
		rho_fit = tuner_spearman(m.model_ms, m.ms, n);
	}
	s->model.calibrated = !isnan(rho_fit) && (isnan(s->model.rho_peaks) ||
						  rho_fit > s->model.rho_peaks);
	if (s->model.calibrated)
		s->model.rates = rates;
	s->model.rho = s->model.calibrated ? rho_fit : s->model.rho_peaks;
	free(m.terms);
	free(m.ms);
}

/* After stall_generations without a gain, the search starts again from a
 * new first population (its best plans kept) with a mutation twice as
 * wide, up to every gene: it looks farther from what it found. */
static void restart(tuner_search *s)
{
	int widest = s->ngenes > 2 ? s->ngenes : 2;

	s->restarts++;
	s->mutation = 2 * s->mutation < widest ? 2 * s->mutation : widest;
	s->seeded = false;
	s->since_gain = 0;
}

/* The plans the open generation proposes at once, into "out": generation
 * 0's, or else the seeds of the first population or the elites and
 * fusion neighbours of the next; then what it draws one at a time. */
static void start_fill(tuner_search *s, json_t *out)
{
	s->fill = FILL_DONE;
	s->fill_tries = 0;
	if (s->generations == 1) {
		/* a large graph's fused plans first: they compile sooner */
		seeds_first(s->g, &s->o, join_first, &(seeding){s, out});
		propose(s, s->g->defaults, out);
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

/* The sweep's next genome into s->genes, the odometer moved on; true
 * when that genome is the last of a pass. */
static bool sweep_next(tuner_search *s)
{
	memcpy(s->genes, s->sweep, s->ngenes * sizeof(int));
	for (int i = s->ngenes - 1; i >= 0; i--) {
		if (++s->sweep[i] < s->g->domain[i])
			return false;
		s->sweep[i] = 0;
	}
	return true;
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
	bool from_sweep, pass_ends = false;

	if (*n >= s->o.population || (s->fill == FILL_MUTANTS && *n >= s->mutants_until) ||
	    ((regular || s->fill == FILL_MUTANTS) && tried_enough))
		return next_phase(s);
	s->sweeping |= s->stale >= TRIES * s->o.population;
	from_sweep = s->sweeping && (s->fill_tries & 1);
	if (from_sweep) {
		pass_ends = sweep_next(s);
	} else if (s->fill == FILL_MUTANTS) {
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
		s->swept_new += from_sweep;
	}
	if (pass_ends) {
		s->swept = s->swept_new == 0;
		s->swept_new = 0;
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
	if (s->swept)
		return -1;
	fit_model(s);
	if (s->since_gain >= s->o.stall_generations)
		restart(s);
	s->filtered_before = s->drops.filtered;
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
	return s->swept;
}

int tuner_search_space(const tuner_search *s, int *measured)
{
	int n = 0;

	*measured = 0;
	for (int i = 0; i < s->ncands; i++)
		if (s->cands[i].genes || s->cands[i].filtered) {
			n++;
			*measured += !isnan(s->cands[i].ms);
		}
	return n;
}

int tuner_search_restarts(const tuner_search *s)
{
	return s->restarts;
}

void tuner_search_cost_model(const tuner_search *s, tuner_search_model *model)
{
	*model = (tuner_search_model){
		.filtering = s->o.peaks && !filter_aside(s),
		.calibrated = s->model.calibrated,
		.rates = s->model.rates,
		.rank_correlation = s->model.rho,
		.peaks_rank_correlation = s->model.rho_peaks,
	};
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
	if (!(out = fill(s, INT_MAX, true)) || (!json_array_size(out) && s->swept)) {
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
	s->mutation = 2;
	s->model.rho = s->model.rho_peaks = NAN;
	s->capcands = 64;
	s->cands = malloc(s->capcands * sizeof(seen_plan));
	s->pop = malloc(s->o.population * sizeof(int));
	s->next = malloc(s->o.population * sizeof(int));
	if (!s->cands || !s->pop || !s->next || grow_slots(s) < 0 ||
	    !(s->g = genome_new(graph, s->o.peaks, s->o.cuda, s->o.library)) ||
	    !(s->genes = calloc(s->g->ngenes + 1, sizeof(int))) ||
	    !(s->sweep = calloc(s->g->ngenes + 1, sizeof(int)))) {
		tuner_search_free(s);
		return NULL;
	}
	s->ngenes = s->g->ngenes;
	return s;
}

/* A candidate for known plan "plan", with genes when it is a genome: its
 * values are in their domains and its genes decode to it. */
static int add_known(tuner_search *s, const kgen_plan *plan, char *text,
		     char *code, uint64_t hash)
{
	bool genome = genome_encode(s->g, plan, s->genes);

	if (genome) {
		const kgen_plan *decoded = genome_decode(s->g, s->genes);
		char *again = decoded ? plan_text(s, decoded) : NULL;

		genome = again && !strcmp(again, text);
		free(again);
	}
	return add_candidate(s, text, code, hash, genome ? s->genes : NULL);
}


void tuner_search_suggest(tuner_search *s, const json_t *plan)
{
	int *genes = realloc(s->suggested, (s->nsuggested + 1) * s->ngenes * sizeof(int));

	if (!genes)
		return;
	s->suggested = genes;
	s->nsuggested += seeds_nearest(s->g, plan, genes + s->nsuggested * s->ngenes);
}

void tuner_search_know(tuner_search *s, json_t *json, double ms)
{
	kgen_plan *plan = NULL;
	seen_plan *c;
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
	seen_plan *c;

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
	free(s->suggested);
	free(s->proposed);
	free(s->genes);
	free(s->sweep);
	genome_free(s->g);
	free(s);
}

