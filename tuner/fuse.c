/*
 * fuse.c: the fusion genes and their repair (tuner_int.h, docs/design/fusion.md).
 *
 * A genome's fusion genes are merges of groups of ops: along an edge (a
 * consumer with its producer) or between siblings (independent ops of the
 * same form, such as the three projections of BERT's Q, K and V). Merges
 * are tried in layer order, and again until none succeeds (a merge that
 * failed while its ops' neighbours were apart may succeed once they are
 * together, e.g. a layernorm's sum once its mean and variance are one
 * group); each must keep the plan acyclic (a group may
 * not feed an op outside that feeds the group back), pass the fusion
 * planner's analysis (sched_group_new through kgen_kernel_group) under the
 * root's tile or that tile widened to whole rows, and, when the device's
 * peaks are known, not raise the cost model's estimate. Analyses are
 * remembered by group, tile and lanes: genomes share most of them.
 * tunectl explain shows the same planner at work (tuner_fusion_edges,
 * tuner.h): every edge gene on, each merge told as it is tried.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner_int.h"

#define CACHE_SLOTS 4096

typedef struct verdict {
	char *key;     /* NULL: a free slot */
	bool legal;
	int64_t tile[SCHED_MAX_RANK]; /* the tile that made it legal */
	double ms;     /* the cost model's estimate, when legal and peaks */
} verdict;

struct tuner_fusion {
	const sched_graph *graph;
	const kgen_plan *base;
	const kgen_peaks *peaks;
	int cuda;
	int nops;
	int *kernel_of;    /* op -> its kernel in the base plan */
	bool *reads;       /* reads[c * nops + p]: op c reads op p's target */
	bool *reaches;     /* reaches[a * nops + b]: a path from a to b */
	int nedges, nsiblings;
	int (*pairs)[2];   /* edges (producer, consumer), then siblings */
	int *order;        /* the genes in the order their merges are tried */
	int *layer;        /* per op, the longest path from the inputs to it */
	verdict *cache;
	int cached;
	tuner_merge_fn *trace; /* told each merge tried (tuner_fusion_edges) */
	void *trace_user;
};

static bool reads_op(const tuner_fusion *f, int consumer, int producer)
{
	return f->reads[consumer * f->nops + producer];
}

/* reads, and its transitive closure reaches (Floyd-Warshall: tiny n). */
static void find_paths(tuner_fusion *f)
{
	int n = f->nops;

	for (int c = 0; c < n; c++)
		for (int p = 0; p < n; p++)
			f->reads[c * n + p] = p != c &&
				kgen_op_touches(&f->graph->ops[c], f->graph->ops[p].target);
	for (int a = 0; a < n; a++)
		for (int b = 0; b < n; b++)
			f->reaches[a * n + b] = reads_op(f, b, a);
	for (int k = 0; k < n; k++)
		for (int a = 0; a < n; a++)
			for (int b = 0; b < n; b++)
				f->reaches[a * n + b] |= f->reaches[a * n + k] &&
							 f->reaches[k * n + b];
}

/* Same form: the same target shape, reducer and number of variables. */
static bool siblings(const tuner_fusion *f, int i, int j)
{
	const sched_op *a = &f->graph->ops[i], *b = &f->graph->ops[j];
	const sched_tensor *ta = &f->graph->tensors[a->target];
	const sched_tensor *tb = &f->graph->tensors[b->target];

	if (f->reaches[i * f->nops + j] || f->reaches[j * f->nops + i] ||
	    a->reducer != b->reducer || a->nvars != b->nvars || ta->rank != tb->rank)
		return false;
	for (int d = 0; d < ta->rank; d++)
		if (ta->shape[d] != tb->shape[d])
			return false;
	return true;
}

/* The longest path from the inputs to each op. */
static void find_layers(const tuner_fusion *f, int *layer)
{
	const int *order = sched_graph_order(f->graph);

	for (int i = 0; i < f->nops; i++) {
		int c = order[i];

		layer[c] = 0;
		for (int p = 0; p < f->nops; p++)
			if (reads_op(f, c, p) && layer[p] + 1 > layer[c])
				layer[c] = layer[p] + 1;
	}
}

/* Edges, then each op's next sibling; tried by the layer of their first
 * op, edges before siblings within a layer. */
static int find_pairs(tuner_fusion *f)
{
	int n = f->nops, np = 0, *layer = f->layer = calloc(n, sizeof(int));

	f->pairs = calloc(n * n + 1, sizeof(*f->pairs));
	f->order = calloc(n * n + 1, sizeof(int));
	if (!layer || !f->pairs || !f->order)
		return -1;
	for (int p = 0; p < n; p++)
		for (int c = 0; c < n; c++)
			if (reads_op(f, c, p))
				memcpy(f->pairs[np++], (int[2]){p, c}, sizeof(int[2]));
	f->nedges = np;
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (siblings(f, i, j)) {
				memcpy(f->pairs[np++], (int[2]){i, j}, sizeof(int[2]));
				break;
			}
	f->nsiblings = np - f->nedges;
	find_layers(f, layer);
	for (int g = 0, placed = 0; placed < np; g++) /* by layer, stable */
		for (int i = 0; i < np; i++)
			if (layer[f->pairs[i][0]] == g / 2 && (i < f->nedges) == (g % 2 == 0))
				f->order[placed++] = i;
	return 0;
}

tuner_fusion *tuner_fusion_new(const sched_graph *graph, const kgen_plan *base,
			       const kgen_peaks *peaks, int cuda)
{
	tuner_fusion *f = calloc(1, sizeof(*f));
	int n = sched_graph_op_count(graph);

	if (!f)
		return NULL;
	f->graph = graph;
	f->base = base;
	f->peaks = peaks;
	f->cuda = cuda;
	f->nops = n;
	int paths = n > TUNER_FUSION_MAX_OPS ? 1 : n * n;

	f->kernel_of = calloc(n, sizeof(int));
	f->reads = calloc(paths, sizeof(bool));
	f->reaches = calloc(paths, sizeof(bool));
	f->cache = calloc(CACHE_SLOTS, sizeof(verdict));
	if (!f->kernel_of || !f->reads || !f->reaches || !f->cache) {
		tuner_fusion_free(f);
		return NULL;
	}
	for (int k = 0; k < base->nkernels; k++)
		f->kernel_of[base->kernels[k].ops[0]] = k;
	if (n > TUNER_FUSION_MAX_OPS)
		return f; /* no pairs: no fusion genes */
	find_paths(f);
	if (find_pairs(f) < 0) {
		tuner_fusion_free(f);
		return NULL;
	}
	return f;
}

static void forget(tuner_fusion *f)
{
	for (int i = 0; i < CACHE_SLOTS; i++) {
		free(f->cache[i].key);
		f->cache[i].key = NULL;
	}
	f->cached = 0;
}

void tuner_fusion_free(tuner_fusion *f)
{
	if (!f)
		return;
	if (f->cache)
		forget(f);
	free(f->cache);
	free(f->kernel_of);
	free(f->reads);
	free(f->reaches);
	free(f->pairs);
	free(f->order);
	free(f->layer);
	free(f);
}

int tuner_fusion_genes(const tuner_fusion *f)
{
	return f->nedges + f->nsiblings;
}

int tuner_fusion_domain(const tuner_fusion *f, int gene)
{
	return gene < f->nedges ? 2 : 3;
}

int tuner_fusion_edge_layer(const tuner_fusion *f, int gene)
{
	return gene < f->nedges ? f->layer[f->pairs[gene][0]] : -1;
}

bool tuner_fusion_gene_touches(const tuner_fusion *f, int gene, int op)
{
	return f->pairs[gene][0] == op || f->pairs[gene][1] == op;
}

/* ---- one merge ---- */

typedef struct decoding {
	tuner_fusion *f;
	const kgen_schedule *schedules;
	const int *genes;
	int *group;          /* op -> the op that represents its group */
	kgen_kernel *kernels; /* by representative */
	int pass;            /* of the walk over the genes, from 1 */
	int *merged;         /* scratch of convex: op -> its group once merged */
	bool *from, *to;     /* scratch of convex: groups reached, and reaching */
} decoding;

static int find_group(const decoding *d, int op)
{
	while (d->group[op] != op)
		op = d->group[op];
	return op;
}

/* Marks in "mark" the groups (group[op] for each op) reached from group
 * "m" (forward) or that reach it (!forward), over the ops' reads: a
 * kernel runs whole, so a path into any op of a group leaves from all of
 * it. */
static void mark_reached(const tuner_fusion *f, const int *group, int m,
			 bool forward, bool *mark)
{
	bool changed = true;

	while (changed) {
		changed = false;
		for (int x = 0; x < f->nops; x++) {
			if (group[x] == m || mark[group[x]])
				continue;
			for (int y = 0; y < f->nops && !mark[group[x]]; y++)
				if ((forward ? reads_op(f, x, y) : reads_op(f, y, x)) &&
				    (group[y] == m || mark[group[y]]))
					mark[group[x]] = changed = true;
		}
	}
}

/* Whether the groups ra and rb can merge: no other group is reached from
 * them and reaches back into them, counting paths through the groups
 * already fused (two groups each convex alone can read each other, and
 * then the kernels could not be ordered). */
static bool convex(const decoding *d, int ra, int rb)
{
	const tuner_fusion *f = d->f;
	bool *from = d->from, *to = d->to;
	int *group = d->merged;

	memset(from, 0, f->nops * sizeof(bool));
	memset(to, 0, f->nops * sizeof(bool));
	for (int op = 0; op < f->nops; op++) {
		group[op] = find_group(d, op);
		if (group[op] == rb)
			group[op] = ra;
	}
	mark_reached(f, group, ra, true, from);
	mark_reached(f, group, ra, false, to);
	for (int g = 0; g < f->nops; g++)
		if (from[g] && to[g])
			return false;
	return true;
}

static int find_root(int *parent, int i)
{
	while (parent[i] != i)
		i = parent[i];
	return i;
}

/* The lanes of the kernel's branches (connected parts, numbered by their
 * roots as the planner numbers them): siblings fused one after the other
 * share a lane. nlanes 0 when every branch has its own. */
static void set_lanes(const decoding *d, kgen_kernel *k)
{
	const tuner_fusion *f = d->f;
	int part[KGEN_MAX_OPS], roots[KGEN_MAX_OPS], nroots = 0, lane[KGEN_MAX_OPS];
	int branch_of[KGEN_MAX_OPS];
	bool shared = false;

	for (int i = 0; i < k->nops; i++)
		part[i] = i;
	for (int i = 0; i < k->nops; i++)
		for (int j = 0; j < k->nops; j++)
			if (reads_op(f, k->ops[i], k->ops[j]))
				part[find_root(part, i)] = find_root(part, j);
	for (int i = 0; i < k->nops; i++) { /* ops are sorted: roots in op order */
		bool read = false;

		for (int j = 0; j < k->nops; j++)
			read |= reads_op(f, k->ops[j], k->ops[i]);
		if (!read)
			roots[nroots++] = i;
	}
	for (int i = 0; i < k->nops; i++)
		for (int r = 0; r < nroots; r++)
			if (find_root(part, i) == find_root(part, roots[r]))
				branch_of[i] = r;
	for (int r = 0; r < nroots; r++)
		lane[r] = r;
	for (int g = f->nedges; g < f->nedges + f->nsiblings; g++) {
		int a = -1, b = -1;

		for (int i = 0; i < k->nops; i++) {
			a = k->ops[i] == f->pairs[g][0] ? i : a;
			b = k->ops[i] == f->pairs[g][1] ? i : b;
		}
		if (a >= 0 && b >= 0 && d->genes[g] == 2) {
			int la = find_root(lane, branch_of[a]), lb = find_root(lane, branch_of[b]);

			/* the smaller branch leads, so that lanes number in order */
			lane[la > lb ? la : lb] = la < lb ? la : lb;
			shared |= la != lb;
		}
	}
	k->nlanes = shared ? nroots : 0;
	for (int r = 0, next = 0; shared && r < nroots; r++) {
		int l = find_root(lane, r);

		k->lanes[r] = l == r ? next++ : k->lanes[l];
	}
}

static char *verdict_key(const tuner_fusion *f, const kgen_kernel *k)
{
	const sched_tensor *t = kgen_kernel_target(f->graph, k);
	sched_buf buf = {0};
	int threads = 1;

	for (int i = 0; i < k->nops; i++)
		sched_buf_printf(&buf, "%d,", k->ops[i]);
	for (int d = 0; d < t->rank; d++) {
		sched_buf_printf(&buf, "t%lld,", (long long)k->schedule.tile[d]);
		threads *= k->schedule.threads[d];
	}
	for (int l = 0; l < k->nlanes; l++)
		sched_buf_printf(&buf, "l%d,", k->lanes[l]);
	sched_buf_printf(&buf, "p%d,x%d", k->schedule.parallel, f->cuda ? threads : 0);
	return buf.str;
}

static verdict *slot_of(tuner_fusion *f, const char *key)
{
	uint64_t h = 1469598103934665603ULL;

	for (const char *c = key; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ULL;
	for (int i = 0; i < CACHE_SLOTS; i++) {
		verdict *v = &f->cache[(h + i) % CACHE_SLOTS];

		if (!v->key || !strcmp(v->key, key))
			return v;
	}
	return NULL;
}

/* Whether the planner accepts kernel k as it stands; why not in "err"
 * (may be NULL). */
static bool accepted(const tuner_fusion *f, const kgen_kernel *k, kgen_error *err)
{
	const sched_op *root = kgen_kernel_op(f->graph, k);
	const sched_tensor *t = &f->graph->tensors[root->target];
	int64_t elements = 1;
	sched_group *group;

	for (int d = 0; d < t->rank; d++)
		elements *= k->schedule.tile[d];
	if (root->reducer != SCHED_RED_NONE && elements > KGEN_MAX_CPU_TILE) {
		kgen_fail(err, KGEN_EPLAN,
			  "the root '%s' reduces into a tile of %lld elements, more "
			  "than the %d accumulators a tile may hold",
			  t->name, (long long)elements, KGEN_MAX_CPU_TILE);
		return false;
	}
	if (kgen_kernel_group(f->graph, k, f->cuda, &group, err) < 0)
		return false;
	sched_group_free(group);
	return true;
}

/* Kernel k with its tile widened to whole rows (every dim after the
 * first) and its threads within them, into "wide"; false when its root
 * has one dim, so that nothing widens. */
static bool widen(const tuner_fusion *f, const kgen_kernel *k, kgen_kernel *wide)
{
	const sched_tensor *t = kgen_kernel_target(f->graph, k);

	*wide = *k;
	for (int d = 1; d < t->rank; d++)
		wide->schedule.tile[d] = t->shape[d];
	for (int d = 1; d < t->rank; d++)
		wide->schedule.threads[d] = wide->schedule.threads[d] > t->shape[d] ?
					    (int)t->shape[d] : wide->schedule.threads[d];
	return t->rank > 1;
}

/* The planner's verdict on kernel k under its tile or, failing that, the
 * tile widened to whole rows. */
static void judge(const tuner_fusion *f, kgen_kernel *k, verdict *v)
{
	kgen_kernel wide;

	v->legal = accepted(f, k, NULL);
	if (!v->legal && widen(f, k, &wide) && (v->legal = accepted(f, &wide, NULL)))
		*k = wide;
	memcpy(v->tile, k->schedule.tile, sizeof(v->tile));
	v->ms = v->legal && f->peaks ? tuner_kernel_ms(f->graph, k, f->peaks, f->cuda) : 0;
}

/* Kernel k judged, from the cache when it was before: its tile set to the
 * one that made it legal. "scratch" holds the verdict when the cache has
 * no room. */
static const verdict *judged(tuner_fusion *f, kgen_kernel *k, verdict *scratch)
{
	char *key = verdict_key(f, k);
	verdict *v;

	if (!key)
		return NULL;
	if (f->cached >= CACHE_SLOTS / 2)
		forget(f);
	if (!(v = slot_of(f, key))) {
		free(key);
		judge(f, k, scratch);
		return scratch;
	}
	if (v->key) {
		free(key);
		memcpy(k->schedule.tile, v->tile, sizeof(v->tile));
		return v;
	}
	v->key = key;
	f->cached++;
	judge(f, k, v);
	return v;
}

static double kernel_cost(const decoding *d, const kgen_kernel *k)
{
	return tuner_kernel_ms(d->f->graph, k, d->f->peaks, d->f->cuda);
}

/* Kernel k as a library step: its first op a product whose own kernel
 * is one, and its other ops that step's epilogue (library.c). Such a
 * step needs no planner, and is no slower than its parts apart (its
 * epilogue's results stay unwritten). */
static bool library_step(const decoding *d, kgen_kernel *k)
{
	const kgen_schedule *first = &d->schedules[d->f->kernel_of[k->ops[0]]];

	if (!first->library || kgen_library_kernel_unfit(d->f->graph, k, d->f->cuda))
		return false;
	k->schedule = *first;
	return true;
}

/* Tells the trace (when there is one) what came of merging a's group
 * and b's: "tried" the kernel of both under the root's tile (NULL when
 * none was formed), "made" the one kept or refused by the cost model. A
 * group refused or fused only under the widened tile is judged again
 * for the planner's reasons, which verdicts do not keep. */
static void tell(const decoding *d, int a, int b, enum tuner_merge_outcome outcome,
		 const kgen_kernel *tried, const kgen_kernel *made)
{
	const tuner_fusion *f = d->f;
	tuner_merge m = {.pass = d->pass, .a = a, .b = b, .outcome = outcome,
			 .kernel = made ? made : tried};
	kgen_error why = {0}, why_widened = {0};
	kgen_kernel wide;

	if (!f->trace)
		return;
	m.widened = made && tried && memcmp(made->schedule.tile, tried->schedule.tile,
					   sizeof(made->schedule.tile));
	if (outcome == TUNER_MERGE_REFUSED || m.widened) {
		accepted(f, tried, &why);
		m.why = why.message;
	}
	if (outcome == TUNER_MERGE_REFUSED && widen(f, tried, &wide)) {
		accepted(f, &wide, &why_widened);
		m.tried_widened = &wide;
		m.why_widened = why_widened.message;
	}
	f->trace(&m, f->trace_user);
	kgen_error_release(&why);
	kgen_error_release(&why_widened);
}

/* Merges the groups of a and b when the merged group is legal (and, with
 * peaks, estimated no slower than the two apart), or a library step;
 * whether it did. */
static bool try_merge(decoding *d, int a, int b)
{
	const tuner_fusion *f = d->f;
	int ra = find_group(d, a), rb = find_group(d, b);
	kgen_kernel k = {.nops = 0}, tried;
	const sched_op *root;
	sched_contraction product;
	verdict scratch = {0};
	const verdict *v;

	if (ra == rb)
		return tell(d, a, b, TUNER_MERGE_ALREADY, NULL, NULL), false;
	for (int op = 0; op < f->nops; op++) {
		bool in = find_group(d, op) == ra || find_group(d, op) == rb;

		if (in && k.nops < KGEN_MAX_OPS)
			k.ops[k.nops++] = op;
		else if (in)
			return tell(d, a, b, TUNER_MERGE_TOO_MANY, NULL, NULL), false;
	}
	if (!convex(d, ra, rb))
		return tell(d, a, b, TUNER_MERGE_CYCLIC, NULL, NULL), false;
	strcpy(k.name, "fused");
	if (library_step(d, &k)) {
		d->group[rb] = ra;
		d->kernels[ra] = k;
		tell(d, a, b, TUNER_MERGE_LIBRARY, &k, NULL);
		return true;
	}
	root = kgen_kernel_op(f->graph, &k);
	k.schedule = d->schedules[f->kernel_of[root->index]];
	if (!kgen_kernel_products(f->graph, &k, &product))
		k.schedule.micro = (kgen_micro){0}; /* products side by side keep it */
	/* cuda: the products on tensor cores, the rest their epilogue, where
	 * the first op's own kernel would run on them */
	if (!f->cuda || !d->schedules[f->kernel_of[k.ops[0]]].mma.bm ||
	    !kgen_fused_mma_fit(f->graph, &k, &d->schedules[f->kernel_of[k.ops[0]]].mma))
		k.schedule.mma = (kgen_mma){0};
	/* cpu: blocks in parallel when either part's were (a small root after
	 * a large product, such as a bias add, would run the product serially) */
	if (!k.schedule.parallel && f->graph->tensors[root->target].rank &&
	    (d->kernels[ra].schedule.parallel || d->kernels[rb].schedule.parallel))
		k.schedule.parallel = 1;
	set_lanes(d, &k);
	tried = k;
	if (!(v = judged(d->f, &k, &scratch)) || !v->legal)
		return tell(d, a, b, TUNER_MERGE_REFUSED, &tried, NULL), false;
	if (f->peaks && v->ms > kernel_cost(d, &d->kernels[ra]) + kernel_cost(d, &d->kernels[rb]))
		return tell(d, a, b, TUNER_MERGE_SLOWER, &tried, &k), false;
	d->group[rb] = ra;
	d->kernels[ra] = k;
	tell(d, a, b, TUNER_MERGE_FUSED, &tried, &k);
	return true;
}

/* ---- the plan ---- */

/* Whether the group of "r" reads only from groups already placed. */
static bool ready(const decoding *d, const bool *placed, int r)
{
	const tuner_fusion *f = d->f;

	for (int c = 0; c < f->nops; c++)
		for (int p = 0; p < f->nops; p++)
			if (find_group(d, c) == r && reads_op(f, c, p) &&
			    find_group(d, p) != r && !placed[find_group(d, p)])
				return false;
	return true;
}

static void place(const decoding *d, kgen_plan *plan, int r)
{
	kgen_kernel *k = &plan->kernels[plan->nkernels];

	*k = d->kernels[r];
	snprintf(k->name, sizeof(k->name), "k%d_%s", plan->nkernels,
		 kgen_kernel_target(d->f->graph, k)->name);
	plan->nkernels++;
}

/* The groups in the graph's dependence order of their first ops, each
 * after the groups it reads (so that unfused, it is the default plan). */
static kgen_plan *plan_of(const decoding *d)
{
	const tuner_fusion *f = d->f;
	const int *order = sched_graph_order(f->graph);
	kgen_plan *plan = calloc(1, sizeof(*plan));
	bool *placed = calloc(f->nops, sizeof(bool)), progress = true;

	if (!plan || !placed || !(plan->kernels = calloc(f->nops, sizeof(kgen_kernel)))) {
		free(placed);
		kgen_plan_free(plan);
		return NULL;
	}
	while (progress) {
		progress = false;
		for (int i = 0; i < f->nops; i++) {
			int r = find_group(d, order[i]);

			if (placed[r] || !ready(d, placed, r))
				continue;
			placed[r] = progress = true;
			place(d, plan, r);
			break;
		}
	}
	free(placed);
	return plan;
}

/* The base plan on "schedules": a graph too large for fusion genes. */
static kgen_plan *unfused(const tuner_fusion *f, const kgen_schedule *schedules)
{
	kgen_plan *plan = calloc(1, sizeof(*plan));

	if (!plan || !(plan->kernels = calloc(f->base->nkernels, sizeof(kgen_kernel)))) {
		free(plan);
		return NULL;
	}
	plan->nkernels = f->base->nkernels;
	for (int k = 0; k < plan->nkernels; k++) {
		plan->kernels[k] = f->base->kernels[k];
		plan->kernels[k].schedule = schedules[k];
	}
	return plan;
}

/* Tells the trace that no merge is tried: the graph is too large. */
static void trace_too_large(const tuner_fusion *f)
{
	char why[128];
	tuner_merge m = {.pass = 1,
			 .a = -1,
			 .b = -1,
			 .outcome = TUNER_MERGE_TOO_BIG,
			 .why = why};

	if (!f->trace)
		return;
	snprintf(why, sizeof(why),
		 "the planner does not fuse graphs of more than %d ops "
		 "(this one has %d)",
		 TUNER_FUSION_MAX_OPS, f->nops);
	f->trace(&m, f->trace_user);
}

kgen_plan *tuner_fusion_plan(tuner_fusion *f, const kgen_schedule *schedules,
			     const int *genes)
{
	if (f->nops > TUNER_FUSION_MAX_OPS) {
		trace_too_large(f);
		return unfused(f, schedules);
	}
	decoding d = {f,
		      schedules,
		      genes,
		      calloc(f->nops, sizeof(int)),
		      calloc(f->nops, sizeof(kgen_kernel)),
		      1,
		      calloc(f->nops, sizeof(int)),
		      calloc(f->nops, sizeof(bool)),
		      calloc(f->nops, sizeof(bool))};
	kgen_plan *plan = NULL;

	if (d.group && d.kernels && d.merged && d.from && d.to) {
		for (int op = 0; op < f->nops; op++) {
			d.group[op] = op;
			d.kernels[op] = f->base->kernels[f->kernel_of[op]];
			d.kernels[op].schedule = schedules[f->kernel_of[op]];
		}
		for (bool merged = true; merged; d.pass++) { /* again, until none merges */
			merged = false;
			for (int i = 0; i < tuner_fusion_genes(f); i++)
				if (genes[f->order[i]])
					merged |= try_merge(&d, f->pairs[f->order[i]][0],
							    f->pairs[f->order[i]][1]);
		}
		plan = plan_of(&d);
	}
	free(d.group);
	free(d.kernels);
	free(d.merged);
	free(d.from);
	free(d.to);
	return plan;
}

kgen_plan *tuner_fusion_edges(const sched_graph *graph, int cuda,
			       tuner_merge_fn *trace, void *user)
{
	kgen_plan *base = kgen_plan_default(graph), *plan = NULL;
	tuner_fusion *f = base ? tuner_fusion_new(graph, base, NULL, cuda) : NULL;
	int *genes = f ? calloc(tuner_fusion_genes(f) + 1, sizeof(int)) : NULL;
	kgen_schedule *schedules = base ? calloc(base->nkernels, sizeof(*schedules)) : NULL;

	if (genes && schedules) {
		for (int k = 0; k < base->nkernels; k++)
			schedules[k] = base->kernels[k].schedule;
		for (int g = 0; g < f->nedges; g++)
			genes[g] = 1;
		f->trace = trace;
		f->trace_user = user;
		plan = tuner_fusion_plan(f, schedules, genes);
	}
	free(genes);
	free(schedules);
	tuner_fusion_free(f);
	kgen_plan_free(base);
	return plan;
}

static int kernel_with(const kgen_plan *plan, int op, int *at)
{
	for (int k = 0; k < plan->nkernels; k++)
		for (int i = 0; i < plan->kernels[k].nops; i++)
			if (plan->kernels[k].ops[i] == op) {
				*at = i;
				return k;
			}
	return -1;
}

/* The lane of op's branch in kernel k: the planner's numbering. */
static int lane_of(const tuner_fusion *f, const kgen_kernel *k, int op)
{
	sched_group *group;
	int lane = -1;

	if (kgen_kernel_group(f->graph, k, f->cuda, &group, NULL) < 0)
		return -1;
	if (sched_group_stage_of(group, op) >= 0)
		lane = group->branches[group->stages[sched_group_stage_of(group, op)].branch].lane;
	sched_group_free(group);
	return lane;
}

void tuner_fusion_encode(const tuner_fusion *f, const kgen_plan *plan, int *genes)
{
	for (int g = 0; g < tuner_fusion_genes(f); g++) {
		int ia, ib, ka = kernel_with(plan, f->pairs[g][0], &ia);
		int kb = kernel_with(plan, f->pairs[g][1], &ib);

		genes[g] = ka >= 0 && ka == kb;
		if (genes[g] && g >= f->nedges)
			genes[g] = lane_of(f, &plan->kernels[ka], f->pairs[g][0]) ==
				   lane_of(f, &plan->kernels[ka], f->pairs[g][1]) ? 2 : 1;
	}
}
