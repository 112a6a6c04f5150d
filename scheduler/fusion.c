/*
 * fusion.c: dependences, their widths (SIRIUS) and fused groups whose
 * schedule propagates from the roots' tiles back to every member
 * (FusionStitching). See docs/design/fusion.md.
 *
 * A group runs as one kernel. Each branch (a connected part of the group)
 * has one root, whose output is cut into blocks by the tile; a member's
 * region in a block is the bounding box of what its in-group readers read
 * there, so that regions are computed from the roots back with isl. A
 * member computed by more than one block (regions that overlap) would be
 * a global dependence: the group is refused.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <isl/aff.h>
#include <isl/id.h>
#include <isl/ast.h>
#include <isl/ast_build.h>
#include <isl/fixed_box.h>
#include <isl/ilp.h>
#include <isl/local_space.h>
#include <isl/space.h>
#include <isl/val.h>

#include "sched_int.h"

#define BLOCK_TUPLE "__blk"
#define THREAD_TUPLE "__thr"

static const char *const width_names[] = {
	[SCHED_WIDTH_THREAD] = "thread", [SCHED_WIDTH_BLOCK] = "block",
	[SCHED_WIDTH_GLOBAL] = "global",
};

const char *sched_width_name(enum sched_width width)
{
	return width_names[width];
}

/* The reads of "op" from "tensor", as one map (empty when none). */
static isl_map *reads_of(isl_ctx *ctx, const sched_graph *graph, int op,
			 int tensor)
{
	isl_union_map *reads = sched_op_reads(ctx, graph, op);
	isl_set *domain = sched_op_domain(ctx, graph, op);
	isl_space *space = isl_space_set_alloc(ctx, 0, graph->tensors[tensor].rank);

	space = isl_space_set_tuple_name(space, isl_dim_set, graph->tensors[tensor].name);
	space = isl_space_map_from_domain_and_range(isl_set_get_space(domain), space);
	isl_map *map = isl_union_map_extract_map(reads, space);

	isl_union_map_free(reads);
	return isl_map_intersect_domain(map, domain);
}

/* The write of "op" over its domain. */
static isl_map *write_of(isl_ctx *ctx, const sched_graph *graph, int op)
{
	return isl_map_intersect_domain(sched_op_write(ctx, graph, op),
					sched_op_domain(ctx, graph, op));
}

isl_map *sched_dependence(isl_ctx *ctx, const sched_graph *graph, int producer,
			  int consumer)
{
	isl_map *write = write_of(ctx, graph, producer);
	isl_map *read = reads_of(ctx, graph, consumer, graph->ops[producer].target);

	return isl_map_apply_range(write, isl_map_reverse(read));
}

/* Whether "from"^-1 . dep . "to" (units of P to units of C) lies in the
 * identity: each consumer unit reads only what the same unit wrote. */
static isl_bool lifted_identity(isl_map *dep, isl_map *from, isl_map *to)
{
	isl_map *lifted = isl_map_apply_range(isl_map_reverse(isl_map_copy(from)),
					      isl_map_copy(dep));
	isl_space *space;
	isl_bool same;

	lifted = isl_map_apply_range(lifted, isl_map_copy(to));
	if (!lifted)
		return isl_bool_error;
	space = isl_map_get_space(lifted);
	same = isl_space_tuple_is_equal(space, isl_dim_in, space, isl_dim_out);
	if (same == isl_bool_true) {
		isl_map *id = isl_map_identity(isl_space_map_from_set(
			isl_space_domain(isl_space_copy(space))));

		same = isl_map_is_subset(lifted, id);
		isl_map_free(id);
	}
	isl_space_free(space);
	isl_map_free(lifted);
	return same;
}

/* Each consumer block reads from exactly one producer block, and each
 * producer instance runs on one block (footprints are disjoint). */
static isl_bool one_block_each(isl_map *dep, isl_map *block_p, isl_map *block_c)
{
	isl_map *lifted;
	isl_bool single = isl_map_is_single_valued(block_p);

	if (single != isl_bool_true)
		return single;
	lifted = isl_map_apply_range(isl_map_reverse(isl_map_copy(block_p)),
				     isl_map_copy(dep));
	lifted = isl_map_reverse(isl_map_apply_range(lifted, isl_map_copy(block_c)));
	single = isl_map_is_single_valued(lifted);
	isl_map_free(lifted);
	return single;
}

int sched_width_of(isl_map *dep, isl_map *block_p, isl_map *block_c,
		   isl_map *thread_p, isl_map *thread_c)
{
	isl_bool yes = isl_bool_false;

	if (thread_p && thread_c)
		yes = lifted_identity(dep, thread_p, thread_c);
	if (yes == isl_bool_true)
		return SCHED_WIDTH_THREAD;
	if (yes == isl_bool_error)
		return -1;
	yes = one_block_each(dep, block_p, block_c);
	if (yes == isl_bool_error)
		return -1;
	return yes ? SCHED_WIDTH_BLOCK : SCHED_WIDTH_GLOBAL;
}

/* ---- groups ---- */

typedef struct stage_work {
	isl_map *instances;  /* block -> the op's instances it runs */
	isl_map *blocks;     /* the op's instances -> their block */
	isl_map *threads;    /* the op's instances -> their thread */
	isl_pw_aff *lo[SCHED_MAX_RANK], *hi[SCHED_MAX_RANK];
	bool reads[SCHED_GROUP_MAX_OPS]; /* reads the target of stage j */
	int width[SCHED_GROUP_MAX_OPS];  /* of that dependence */
	/* reads stage j's buffer: directly, or through recomputed stages */
	bool uses[SCHED_GROUP_MAX_OPS];
} stage_work;

typedef struct analysis {
	const sched_graph *graph;
	const sched_group_spec *spec;
	sched_error *err;
	isl_ctx *ctx;
	sched_group *group;
	stage_work work[SCHED_GROUP_MAX_OPS];
	int order[SCHED_GROUP_MAX_OPS]; /* stages lane after lane */
	int lane_start[SCHED_GROUP_MAX_OPS + 1]; /* where each lane begins in order */
} analysis;

__attribute__((format(printf, 2, 3)))
static int refuse(analysis *a, const char *fmt, ...)
{
	char text[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	return sched_fail(a->err, SCHED_EMEANING, -1, 0, "%s", text);
}

static int isl_failed(analysis *a)
{
	return sched_fail(a->err, SCHED_EINTERNAL, -1, 0,
			  "isl failed while analysing a fused group");
}

static const char *op_target_name(const analysis *a, int op)
{
	return a->graph->tensors[a->graph->ops[op].target].name;
}

typedef struct reads_tensor {
	int tensor;
	bool found;
} reads_tensor;

static void find_read(const sched_node *access, void *user)
{
	reads_tensor *r = user;

	r->found |= access->tensor == r->tensor;
}

bool sched_op_reads_tensor(const sched_op *op, int tensor)
{
	reads_tensor r = {tensor, false};

	sched_node_each_access(op->body, find_read, &r);
	return r.found;
}

static bool op_reads(const sched_graph *graph, int op, int tensor)
{
	return sched_op_reads_tensor(&graph->ops[op], tensor);
}

/* The members in dependence order; duplicates and bad indices refused. */
static int collect_members(analysis *a, int *members, int *n)
{
	const sched_group_spec *spec = a->spec;
	int rc = SCHED_OK;
	bool *in;

	if (spec->nops < 1 || spec->nops > SCHED_GROUP_MAX_OPS)
		return refuse(a, "a fused group has 1 to %d ops, not %d",
			      SCHED_GROUP_MAX_OPS, spec->nops);
	if (!(in = calloc(a->graph->nops, sizeof(bool))))
		return sched_fail(a->err, SCHED_ENOMEM, -1, 0, "out of memory");
	for (int i = 0; i < spec->nops && rc == SCHED_OK; i++) {
		int op = spec->ops[i];

		if (op < 0 || op >= a->graph->nops)
			rc = refuse(a, "op %d is not in the graph", op);
		else if (in[op])
			rc = refuse(a, "op %d is twice in one group", op);
		else
			in[op] = true;
	}
	*n = 0;
	for (int i = 0; i < a->graph->nops && rc == SCHED_OK; i++)
		if (in[a->graph->order[i]])
			members[(*n)++] = a->graph->order[i];
	free(in);
	return rc;
}

static int find_root(int *parent, int i)
{
	while (parent[i] != i)
		i = parent[i] = parent[parent[i]];
	return i;
}

/* Branches: the connected parts of the members; each needs one root. */
static int split_branches(analysis *a, const int *members, int n, int *branch_of,
			  int *roots)
{
	int parent[SCHED_GROUP_MAX_OPS], nroots = 0;
	bool read[SCHED_GROUP_MAX_OPS] = {false};

	for (int i = 0; i < n; i++)
		parent[i] = i;
	for (int c = 0; c < n; c++)
		for (int p = 0; p < n; p++)
			if (p != c && op_reads(a->graph, members[c],
					       a->graph->ops[members[p]].target)) {
				parent[find_root(parent, c)] = find_root(parent, p);
				read[p] = true;
			}
	for (int i = 0; i < n; i++)
		if (!read[i])
			roots[nroots++] = i;
	for (int r = 0; r < nroots; r++)
		for (int q = 0; q < r; q++)
			if (find_root(parent, roots[q]) == find_root(parent, roots[r]))
				return refuse(a, "'%s' and '%s' both end one connected "
					      "part of the group: a part needs one root",
					      op_target_name(a, members[roots[q]]),
					      op_target_name(a, members[roots[r]]));
	for (int i = 0; i < n; i++)
		for (int r = 0; r < nroots; r++)
			if (find_root(parent, i) == find_root(parent, roots[r]))
				branch_of[i] = r;
	return nroots;
}


/* Stages branch after branch (branches in the order of their roots in
 * graph.json), each branch's stages in dependence order. */
static int order_stages(analysis *a)
{
	int members[SCHED_GROUP_MAX_OPS], n = 0, branch_of[SCHED_GROUP_MAX_OPS];
	int roots[SCHED_GROUP_MAX_OPS], sorted[SCHED_GROUP_MAX_OPS], nb, rc, s = 0;
	sched_group *g = a->group;

	if ((rc = collect_members(a, members, &n)) < 0 ||
	    (nb = split_branches(a, members, n, branch_of, roots)) < 0)
		return rc < 0 ? rc : nb;
	for (int r = 0; r < nb; r++) { /* by the roots' op numbers */
		int at = r;

		for (; at > 0 && members[roots[sorted[at - 1]]] > members[roots[r]]; at--)
			sorted[at] = sorted[at - 1];
		sorted[at] = r;
	}
	g->stages = calloc(n, sizeof(sched_stage));
	g->branches = calloc(nb, sizeof(sched_branch));
	if (!g->stages || !g->branches)
		return sched_fail(a->err, SCHED_ENOMEM, -1, 0, "out of memory");
	g->nbranches = nb;
	for (int b = 0; b < nb; b++) {
		g->branches[b].root = members[roots[sorted[b]]];
		for (int i = 0; i < n; i++)
			if (branch_of[i] == sorted[b]) {
				g->stages[s].op = members[i];
				g->stages[s++].branch = b;
			}
	}
	g->nstages = n;
	return SCHED_OK;
}

static const sched_tensor *stage_target(const analysis *a, int s)
{
	return &a->graph->tensors[a->graph->ops[a->group->stages[s].op].target];
}

/* The blocks of each branch, and its lane; lanes renumbered by first use. */
static int place_branches(analysis *a)
{
	sched_group *g = a->group;
	int rank = a->graph->tensors[a->graph->ops[g->branches[0].root].target].rank;
	int renumber[SCHED_GROUP_MAX_OPS];

	for (int b = 0; b < g->nbranches; b++)
		renumber[b] = -1;
	g->lane_blocks = calloc(g->nbranches, sizeof(int64_t));
	if (!g->lane_blocks)
		return sched_fail(a->err, SCHED_ENOMEM, -1, 0, "out of memory");
	for (int b = 0; b < g->nbranches; b++) {
		sched_branch *br = &g->branches[b];
		const sched_tensor *t = &a->graph->tensors[a->graph->ops[br->root].target];
		int lane = a->spec->lanes ? a->spec->lanes[b] : b;

		if (t->rank != rank)
			return refuse(a, "the roots '%s' and '%s' differ in rank: "
				      "one tile cannot cut both",
				      op_target_name(a, g->branches[0].root), t->name);
		if (lane < 0 || lane >= g->nbranches)
			return refuse(a, "branch %d's lane %d is not in [0, %d)",
				      b, lane, g->nbranches);
		if (renumber[lane] < 0)
			renumber[lane] = g->nlanes++;
		br->lane = renumber[lane];
		br->rank = rank;
		br->blocks = 1;
		for (int d = 0; d < rank; d++) {
			int64_t tile = a->spec->tile[d] < 1 ? 1 :
				       a->spec->tile[d] > t->shape[d] ? t->shape[d] :
				       a->spec->tile[d];

			br->tile[d] = tile;
			br->grid[d] = (t->shape[d] + tile - 1) / tile;
			br->blocks *= br->grid[d];
		}
		if (g->lane_blocks[br->lane] && g->lane_blocks[br->lane] != br->blocks)
			return refuse(a, "'%s' shares a lane with a branch of "
				      "%lld blocks but has %lld", t->name,
				      (long long)g->lane_blocks[br->lane],
				      (long long)br->blocks);
		g->lane_blocks[br->lane] = br->blocks;
	}
	for (int l = 0; l < g->nlanes; l++)
		g->blocks += g->lane_blocks[l];
	return SCHED_OK;
}

/* block -> the root's instances: its output cut by the tile. */
static isl_map *root_instances(analysis *a, int s)
{
	const sched_tensor *t = stage_target(a, s);
	const sched_branch *br = &a->group->branches[a->group->stages[s].branch];
	sched_buf buf = {0};
	isl_map *tiles;

	sched_buf_printf(&buf, "{ %s[", t->name);
	for (int d = 0; d < t->rank; d++)
		sched_buf_printf(&buf, "%st%d", d ? ", " : "", d);
	sched_buf_printf(&buf, "] -> " BLOCK_TUPLE "[");
	for (int d = 0; d < t->rank; d++)
		sched_buf_printf(&buf, "%sfloor(t%d / %lld)", d ? ", " : "", d,
				 (long long)br->tile[d]);
	sched_buf_printf(&buf, "] }");
	if (!buf.str)
		return NULL;
	tiles = isl_map_read_from_str(a->ctx, buf.str);
	sched_buf_release(&buf);
	return isl_map_reverse(isl_map_apply_range(
		write_of(a->ctx, a->graph, a->group->stages[s].op), tiles));
}

/* block -> [t] with lo(block) <= t <= hi(block). */
static isl_map *interval(isl_pw_aff *lo, isl_pw_aff *hi_inclusive)
{
	isl_map *from = isl_map_from_pw_aff(lo);
	isl_map *to = isl_map_from_pw_aff(hi_inclusive);
	isl_space *line = isl_space_range(isl_map_get_space(from));

	from = isl_map_apply_range(from, isl_map_lex_le(isl_space_copy(line)));
	to = isl_map_apply_range(to, isl_map_lex_ge(line));
	return isl_map_intersect(from, to);
}

static isl_pw_aff *bound(isl_map *needed, int d, int rank, bool max)
{
	isl_map *line = isl_map_project_out(isl_map_copy(needed), isl_dim_out,
					    d + 1, rank - d - 1);
	isl_pw_multi_aff *pma;
	isl_pw_aff *pa;

	line = isl_map_project_out(line, isl_dim_out, 0, d);
	pma = max ? isl_map_lexmax_pw_multi_aff(line) : isl_map_lexmin_pw_multi_aff(line);
	pa = isl_pw_multi_aff_get_pw_aff(pma, 0);
	isl_pw_multi_aff_free(pma);
	return pa;
}

/* The box of constant size isl finds around "needed" per block, its
 * offset affine in the block (the common case, and a fast one), clipped
 * to the tensor: fills lo and hi (exclusive); false when there is none. */
static bool fixed_box(analysis *a, int s, isl_map *needed)
{
	stage_work *w = &a->work[s];
	const sched_tensor *t = stage_target(a, s);
	isl_fixed_box *box = isl_map_get_range_simple_fixed_box_hull(needed);
	isl_bool valid = isl_fixed_box_is_valid(box);
	isl_multi_aff *offset;
	isl_multi_val *size;
	isl_set *blocks;

	if (valid != isl_bool_true) {
		isl_fixed_box_free(box);
		return false;
	}
	offset = isl_fixed_box_get_offset(box);
	size = isl_fixed_box_get_size(box);
	blocks = isl_map_domain(isl_map_copy(needed));
	for (int d = 0; d < t->rank; d++) {
		isl_pw_aff *lo = isl_pw_aff_intersect_domain(isl_pw_aff_from_aff(
			isl_multi_aff_get_aff(offset, d)), isl_set_copy(blocks));
		isl_pw_aff *hi = isl_pw_aff_add_constant_val(isl_pw_aff_copy(lo),
							     isl_multi_val_get_val(size, d));
		isl_local_space *ls = isl_local_space_from_space(isl_set_get_space(blocks));
		isl_aff *zero = isl_aff_zero_on_domain(ls);
		isl_aff *end = isl_aff_add_constant_si(isl_aff_copy(zero), (int)t->shape[d]);

		w->lo[d] = isl_pw_aff_max(lo, isl_pw_aff_intersect_domain(
			isl_pw_aff_from_aff(zero), isl_set_copy(blocks)));
		w->hi[d] = isl_pw_aff_min(hi, isl_pw_aff_intersect_domain(
			isl_pw_aff_from_aff(end), isl_set_copy(blocks)));
	}
	isl_set_free(blocks);
	isl_multi_aff_free(offset);
	isl_multi_val_free(size);
	isl_fixed_box_free(box);
	return true;
}

/* The bounding box of "needed" (block -> elements of stage s's target,
 * taken) per block; fills the stage's lo and hi (exclusive). */
static isl_map *box_of(analysis *a, int s, isl_map *needed, bool exact)
{
	stage_work *w = &a->work[s];
	const sched_tensor *t = stage_target(a, s);
	bool fixed = !exact && t->rank > 0 && fixed_box(a, s, needed);
	isl_map *box = NULL;

	for (int d = 0; d < t->rank; d++) {
		isl_pw_aff *hi = fixed ? isl_pw_aff_sub(isl_pw_aff_copy(w->hi[d]),
							isl_pw_aff_val_on_domain(
								isl_pw_aff_domain(isl_pw_aff_copy(w->hi[d])),
								isl_val_one(a->ctx))) :
					 bound(needed, d, t->rank, true);
		isl_map *side;

		if (!fixed)
			w->lo[d] = bound(needed, d, t->rank, false);
		side = interval(isl_pw_aff_copy(w->lo[d]), isl_pw_aff_copy(hi));
		if (fixed)
			isl_pw_aff_free(hi);
		else
			w->hi[d] = isl_pw_aff_add_constant_val(hi, isl_val_one(a->ctx));
		box = box ? isl_map_flat_range_product(box, side) : side;
	}
	if (!box)
		return needed;
	box = isl_map_intersect_domain(box, isl_map_domain(needed));
	return isl_map_set_tuple_name(box, isl_dim_out, t->name);
}

/* What the readers of stage s in its branch read of its target, per
 * block; NULL when none reads it (a root). */
static isl_map *needed_of(analysis *a, int s)
{
	const sched_group *g = a->group;
	int tensor = a->graph->ops[g->stages[s].op].target;
	isl_map *needed = NULL;

	for (int c = s + 1; c < g->nstages; c++) {
		isl_map *part;

		if (!a->work[c].reads[s])
			continue;
		part = isl_map_apply_range(isl_map_copy(a->work[c].instances),
					   reads_of(a->ctx, a->graph, g->stages[c].op, tensor));
		needed = needed ? isl_map_union(needed, part) : part;
	}
	return needed;
}

static bool needed_outside(const analysis *a, int s)
{
	const sched_graph *graph = a->graph;
	int op = a->group->stages[s].op, tensor = graph->ops[op].target;

	if (graph->tensors[tensor].role == SCHED_OUTPUT)
		return true;
	for (int o = 0; o < graph->nops; o++)
		if (sched_group_stage_of(a->group, o) < 0 && op_reads(graph, o, tensor))
			return true;
	return false;
}

static void forget_region(stage_work *w)
{
	w->instances = isl_map_free(w->instances);
	w->blocks = isl_map_free(w->blocks);
	for (int d = 0; d < SCHED_MAX_RANK; d++) {
		w->lo[d] = isl_pw_aff_free(w->lo[d]);
		w->hi[d] = isl_pw_aff_free(w->hi[d]);
	}
}

/* Stage s's instances and blocks from what its readers need (or, for a
 * root, from the tile), and whether each instance is on one block. The
 * fast box may be looser than the exact one at the edges of the tensor. */
static isl_bool place_stage(analysis *a, int s, bool exact)
{
	sched_stage *st = &a->group->stages[s];
	stage_work *w = &a->work[s];
	isl_map *write = write_of(a->ctx, a->graph, st->op);
	isl_map *needed = needed_of(a, s);

	if (!needed)
		needed = isl_map_apply_range(root_instances(a, s), isl_map_copy(write));
	else
		needed = isl_map_intersect_range(needed, isl_map_range(isl_map_copy(write)));
	w->instances = isl_map_apply_range(box_of(a, s, needed, exact), isl_map_reverse(write));
	w->blocks = isl_map_reverse(isl_map_copy(w->instances));
	return isl_map_is_single_valued(w->blocks);
}

/* Stage s's region, instances and blocks, and where its result lives. */
static int stage_region(analysis *a, int s)
{
	sched_stage *st = &a->group->stages[s];
	stage_work *w = &a->work[s];
	isl_bool ok = place_stage(a, s, false);

	st->rank = stage_target(a, s)->rank;
	if (ok == isl_bool_false) {
		forget_region(w);
		ok = place_stage(a, s, true);
	}
	if (ok == isl_bool_error)
		return isl_failed(a);
	if (!ok)
		return refuse(a, "'%s' would be computed by more than one block under "
			      "this tile: its regions overlap (a global dependence)",
			      stage_target(a, s)->name);
	st->store = st->op == a->group->branches[st->branch].root ? SCHED_STORE_GLOBAL :
		    needed_outside(a, s) ? SCHED_STORE_BOTH : SCHED_STORE_LOCAL;
	if (st->store == SCHED_STORE_BOTH) {
		isl_set *all = sched_op_domain(a->ctx, a->graph, st->op);
		isl_set *covered = isl_map_range(isl_map_copy(w->instances));

		ok = isl_set_is_subset(all, covered);
		isl_set_free(all);
		isl_set_free(covered);
		if (ok == isl_bool_error)
			return isl_failed(a);
		if (!ok)
			return refuse(a, "'%s' is needed whole (an output, or read outside "
				      "the group), but its blocks compute only part of it",
				      stage_target(a, s)->name);
	}
	return SCHED_OK;
}

/* The branch's grid as a parameter set: [b0, b1] -> { : 0 <= b0 < 4 ... }. */
static isl_set *grid_context(analysis *a, const sched_branch *br)
{
	sched_buf buf = {0};
	isl_set *set;

	sched_buf_printf(&buf, "[");
	for (int d = 0; d < br->rank; d++)
		sched_buf_printf(&buf, "%sb%d", d ? ", " : "", d);
	sched_buf_printf(&buf, "] -> { : ");
	for (int d = 0; d < br->rank; d++)
		sched_buf_printf(&buf, "%s0 <= b%d < %lld", d ? " and " : "", d,
				 (long long)br->grid[d]);
	sched_buf_printf(&buf, " }");
	set = buf.str ? isl_set_read_from_str(a->ctx, buf.str) : NULL;
	sched_buf_release(&buf);
	return set;
}

/* "pa" (taken, a function of the block) as a C expression of b0, b1, ...,
 * simplified within the branch's grid. */
static char *c_expression(analysis *a, const sched_branch *br, isl_pw_aff *pa)
{
	isl_ast_build *build = isl_ast_build_from_context(grid_context(a, br));
	isl_map *map = isl_map_from_pw_aff(pa);
	isl_pw_multi_aff *of_params;
	isl_ast_expr *expr;
	char *text;

	for (int d = 0; d < br->rank; d++) {
		char name[16];

		snprintf(name, sizeof(name), "b%d", d);
		map = isl_map_set_dim_name(map, isl_dim_in, d, name);
	}
	map = isl_map_move_dims(map, isl_dim_param, 0, isl_dim_in, 0, br->rank);
	of_params = isl_pw_multi_aff_from_map(map);
	expr = isl_ast_build_expr_from_pw_aff(build, isl_pw_aff_project_domain_on_params(
		isl_pw_multi_aff_get_pw_aff(of_params, 0)));
	text = expr ? isl_ast_expr_to_C_str(expr) : NULL;
	isl_pw_multi_aff_free(of_params);
	isl_ast_expr_free(expr);
	isl_ast_build_free(build);
	return text;
}

/* Stage s's bounds as C and its largest extents. */
static int stage_bounds(analysis *a, int s)
{
	sched_stage *st = &a->group->stages[s];
	const sched_branch *br = &a->group->branches[st->branch];
	stage_work *w = &a->work[s];

	for (int d = 0; d < st->rank; d++) {
		isl_val *most = isl_pw_aff_max_val(isl_pw_aff_sub(isl_pw_aff_copy(w->hi[d]),
								  isl_pw_aff_copy(w->lo[d])));

		st->lo[d] = c_expression(a, br, isl_pw_aff_copy(w->lo[d]));
		st->hi[d] = c_expression(a, br, isl_pw_aff_copy(w->hi[d]));
		st->extent[d] = most && isl_val_is_int(most) ? isl_val_get_num_si(most) : -1;
		isl_val_free(most);
		if (!st->lo[d] || !st->hi[d] || st->extent[d] < 1)
			return isl_failed(a);
	}
	return SCHED_OK;
}

/* Instances -> [block..., thread]: the stage's elements are numbered
 * row-major within its largest extents from lo, and element e runs on
 * thread e mod threads (the cuda printer's mapping). */
static isl_map *thread_map(analysis *a, int s)
{
	const sched_stage *st = &a->group->stages[s];
	stage_work *w = &a->work[s];
	int nb = a->group->branches[st->branch].rank;
	isl_map *both = isl_map_range_product(isl_map_copy(w->blocks),
					      write_of(a->ctx, a->graph, st->op));
	isl_space *wrapped = isl_space_range(isl_map_get_space(both));
	isl_multi_aff *to_block = isl_multi_aff_domain_map(isl_space_unwrap(isl_space_copy(wrapped)));
	isl_local_space *ls = isl_local_space_from_space(isl_space_copy(wrapped));
	isl_pw_aff_list *list = isl_pw_aff_list_alloc(a->ctx, nb + 1);
	isl_pw_aff *e = isl_pw_aff_zero_on_domain(isl_local_space_copy(ls));
	isl_space *out = isl_space_set_alloc(a->ctx, 0, nb + 1);
	int64_t stride = 1;

	for (int d = st->rank - 1; d >= 0; stride *= st->extent[d--]) {
		isl_pw_aff *t = isl_pw_aff_from_aff(isl_aff_var_on_domain(
			isl_local_space_copy(ls), isl_dim_set, nb + d));
		isl_pw_aff *lo = isl_pw_aff_pullback_multi_aff(isl_pw_aff_copy(w->lo[d]),
							       isl_multi_aff_copy(to_block));

		t = isl_pw_aff_scale_val(isl_pw_aff_sub(t, lo), isl_val_int_from_si(a->ctx, stride));
		e = isl_pw_aff_add(e, t);
	}
	for (int d = 0; d < nb; d++)
		list = isl_pw_aff_list_add(list, isl_pw_aff_from_aff(isl_aff_var_on_domain(
			isl_local_space_copy(ls), isl_dim_set, d)));
	list = isl_pw_aff_list_add(list, isl_pw_aff_mod_val(e,
		isl_val_int_from_si(a->ctx, a->spec->threads)));
	out = isl_space_set_tuple_name(out, isl_dim_set, THREAD_TUPLE);
	isl_multi_aff_free(to_block);
	isl_local_space_free(ls);
	return isl_map_apply_range(both, isl_map_from_multi_pw_aff(
		isl_multi_pw_aff_from_pw_aff_list(
			isl_space_map_from_domain_and_range(wrapped, out), list)));
}

/* The width of every member dependence into each stage: the widest. */
static int stage_widths(analysis *a)
{
	sched_group *g = a->group;

	for (int c = 0; c < g->nstages; c++) {
		g->stages[c].width = SCHED_WIDTH_THREAD;
		for (int p = 0; p < c; p++) {
			isl_map *dep;
			int width;

			if (!a->work[c].reads[p])
				continue;
			dep = sched_dependence(a->ctx, a->graph, g->stages[p].op, g->stages[c].op);
			width = sched_width_of(dep, a->work[p].blocks, a->work[c].blocks,
					       a->work[p].threads, a->work[c].threads);
			isl_map_free(dep);
			if (width < 0)
				return isl_failed(a);
			if (width == SCHED_WIDTH_GLOBAL)
				return refuse(a, "'%s' reads '%s' through a global dependence "
					      "under this tile", op_target_name(a, g->stages[c].op),
					      op_target_name(a, g->stages[p].op));
			a->work[c].width[p] = width;
			if (width > (int)g->stages[c].width)
				g->stages[c].width = width;
		}
	}
	return SCHED_OK;
}

/* ---- block-local memory and barriers ---- */

static bool has_buffer(const sched_stage *st)
{
	return st->store == SCHED_STORE_LOCAL || st->store == SCHED_STORE_BOTH;
}

static int64_t buffer_floats(const sched_stage *st)
{
	int64_t n = 1;

	for (int d = 0; d < st->rank; d++)
		n *= st->extent[d];
	return n;
}

/* Which buffers each stage reads: a recomputed stage's reads count for
 * the stages that read it. */
static void find_uses(analysis *a)
{
	const sched_group *g = a->group;

	for (int c = 0; c < g->nstages; c++) {
		memset(a->work[c].uses, 0, sizeof(a->work[c].uses));
		for (int p = 0; p < c; p++) {
			if (!a->work[c].reads[p])
				continue;
			if (g->stages[p].store != SCHED_STORE_INLINE)
				a->work[c].uses[p] = true;
			else
				for (int q = 0; q < p; q++)
					a->work[c].uses[q] |= a->work[p].uses[q];
		}
	}
}

/* Stages lane after lane; within a lane, branch after branch. */
static void order_lanes(analysis *a)
{
	const sched_group *g = a->group;
	int n = 0;

	for (int l = 0; l < g->nlanes; l++) {
		a->lane_start[l] = n;
		for (int s = 0; s < g->nstages; s++)
			if (g->branches[g->stages[s].branch].lane == l)
				a->order[n++] = s;
	}
	a->lane_start[g->nlanes] = n;
}

/* The last position in lane order of a reader of stage order[i]. */
static int last_use(const analysis *a, int i, int end)
{
	int last = i;

	for (int j = i + 1; j < end; j++)
		if (a->work[a->order[j]].uses[a->order[i]])
			last = j;
	return last;
}

static bool overlaps(int64_t a0, int64_t a1, int64_t b0, int64_t b1)
{
	return a0 < b1 && b0 < a1;
}

/* First fit over live ranges: a buffer's space is free again once every
 * stage that reads it has run. Returns the lane's floats. */
static int64_t allocate_lane(analysis *a, int start, int end)
{
	sched_stage *stages = a->group->stages;
	int last[SCHED_GROUP_MAX_OPS];
	int64_t top = 0;

	for (int i = start; i < end; i++) {
		sched_stage *st = &stages[a->order[i]];
		int64_t size = buffer_floats(st), offset = 0;
		bool moved = true;

		last[i] = last_use(a, i, end);
		if (!has_buffer(st))
			continue;
		while (moved) {
			moved = false;
			for (int j = start; j < i; j++) {
				const sched_stage *other = &stages[a->order[j]];

				if (has_buffer(other) && last[j] >= i &&
				    overlaps(offset, offset + size, other->offset,
					     other->offset + buffer_floats(other))) {
					offset = other->offset + buffer_floats(other);
					moved = true;
				}
			}
		}
		st->offset = offset;
		if (offset + size > top)
			top = offset + size;
	}
	return top;
}

static void allocate(analysis *a)
{
	sched_group *g = a->group;

	find_uses(a);
	g->local_floats = 0;
	for (int l = 0; l < g->nlanes; l++) {
		int64_t floats = allocate_lane(a, a->lane_start[l], a->lane_start[l + 1]);

		if (floats > g->local_floats)
			g->local_floats = floats;
	}
}

/* A cheap elementwise stage kept in memory, the largest: recomputing it
 * at each read frees its buffer (FusionStitching's recompute instead of
 * stash). -1 when none is left. */
static int cheapest_to_recompute(const analysis *a)
{
	const sched_group *g = a->group;
	int best = -1;

	for (int s = 0; s < g->nstages; s++) {
		const sched_stage *st = &g->stages[s];
		const sched_op *op = &a->graph->ops[st->op];

		if (st->store == SCHED_STORE_LOCAL && op->reducer == SCHED_RED_NONE &&
		    op->naccesses <= 4 &&
		    (best < 0 || buffer_floats(st) > buffer_floats(&g->stages[best])))
			best = s;
	}
	return best;
}

static int plan_memory(analysis *a)
{
	sched_group *g = a->group;

	order_lanes(a);
	allocate(a);
	while (g->local_floats * (int64_t)sizeof(float) > a->spec->local_bytes) {
		int s = cheapest_to_recompute(a);

		if (s < 0)
			return refuse(a, "the group needs %lld bytes of block-local memory, "
				      "more than the %lld a block may use",
				      (long long)(g->local_floats * (int64_t)sizeof(float)),
				      (long long)a->spec->local_bytes);
		g->stages[s].store = SCHED_STORE_INLINE;
		allocate(a);
	}
	return SCHED_OK;
}

/* Whether stage c must wait for the block before it runs: it reads a
 * buffer written since the last barrier other than through a thread-level
 * dependence, or its buffer takes space read since then. */
static bool needs_barrier(const analysis *a, int c, const bool *dirty,
			  const bool *read)
{
	const sched_group *g = a->group;
	const sched_stage *st = &g->stages[c];

	for (int q = 0; q < c; q++)
		if (a->work[c].uses[q] && dirty[q] &&
		    !(a->work[c].reads[q] && a->work[c].width[q] == SCHED_WIDTH_THREAD))
			return true;
	if (!has_buffer(st))
		return false;
	for (int q = 0; q < g->nstages; q++)
		if (read[q] && q != c && has_buffer(&g->stages[q]) &&
		    overlaps(st->offset, st->offset + buffer_floats(st), g->stages[q].offset,
			     g->stages[q].offset + buffer_floats(&g->stages[q])))
			return true;
	return false;
}

/* SIRIUS's Algorithm 1: a barrier only where one is needed. */
static void place_barriers(analysis *a)
{
	sched_group *g = a->group;

	for (int l = 0; l < g->nlanes; l++) {
		bool dirty[SCHED_GROUP_MAX_OPS] = {false}, read[SCHED_GROUP_MAX_OPS] = {false};

		for (int i = a->lane_start[l]; i < a->lane_start[l + 1]; i++) {
			int c = a->order[i];

			if (g->stages[c].store == SCHED_STORE_INLINE)
				continue;
			if (needs_barrier(a, c, dirty, read)) {
				g->stages[c].barrier = true;
				memset(dirty, 0, sizeof(dirty));
				memset(read, 0, sizeof(read));
			}
			for (int q = 0; q < c; q++)
				read[q] |= a->work[c].uses[q];
			dirty[c] = true;
		}
	}
}

/* ---- the group ---- */

static void find_reads(analysis *a)
{
	const sched_group *g = a->group;

	for (int c = 0; c < g->nstages; c++)
		for (int p = 0; p < g->nstages; p++)
			a->work[c].reads[p] = p != c && g->stages[p].branch == g->stages[c].branch &&
				op_reads(a->graph, g->stages[c].op,
					 a->graph->ops[g->stages[p].op].target);
}

static int analyse(analysis *a)
{
	sched_group *g = a->group;
	int rc;

	if ((rc = order_stages(a)) < 0 || (rc = place_branches(a)) < 0)
		return rc;
	find_reads(a);
	for (int s = g->nstages - 1; s >= 0 && rc == SCHED_OK; s--)
		rc = stage_region(a, s);
	for (int s = 0; s < g->nstages && rc == SCHED_OK; s++)
		rc = stage_bounds(a, s);
	/* on the cpu a block runs on one thread: every dependence within
	 * a block is thread-level */
	for (int s = 0; s < g->nstages && rc == SCHED_OK && a->spec->threads > 0; s++)
		if (!(a->work[s].threads = thread_map(a, s)))
			rc = isl_failed(a);
	if (rc == SCHED_OK && a->spec->threads > 0)
		rc = stage_widths(a);
	if (rc == SCHED_OK)
		rc = plan_memory(a);
	if (rc == SCHED_OK && a->spec->threads > 0)
		place_barriers(a);
	return rc;
}

static void release_work(analysis *a)
{
	for (int s = 0; s < SCHED_GROUP_MAX_OPS; s++) {
		stage_work *w = &a->work[s];

		isl_map_free(w->instances);
		isl_map_free(w->blocks);
		isl_map_free(w->threads);
		for (int d = 0; d < SCHED_MAX_RANK; d++) {
			isl_pw_aff_free(w->lo[d]);
			isl_pw_aff_free(w->hi[d]);
		}
	}
}

int sched_group_new(const sched_graph *graph, const sched_group_spec *spec,
		    sched_group **out, sched_error *err)
{
	analysis a = {.graph = graph, .spec = spec, .err = err};
	int rc;

	*out = NULL;
	a.group = calloc(1, sizeof(sched_group));
	a.ctx = sched_isl_ctx_new();
	if (!a.group || !a.ctx) {
		free(a.group);
		isl_ctx_free(a.ctx);
		return sched_fail(err, SCHED_ENOMEM, -1, 0, "out of memory");
	}
	rc = analyse(&a);
	release_work(&a);
	isl_ctx_free(a.ctx);
	if (rc < 0)
		sched_group_free(a.group);
	else
		*out = a.group;
	return rc;
}

void sched_group_free(sched_group *group)
{
	if (!group)
		return;
	for (int s = 0; s < group->nstages; s++)
		for (int d = 0; d < SCHED_MAX_RANK; d++) {
			free(group->stages[s].lo[d]);
			free(group->stages[s].hi[d]);
		}
	free(group->stages);
	free(group->branches);
	free(group->lane_blocks);
	free(group);
}

sched_group *sched_group_copy(const sched_group *group)
{
	sched_group *copy = calloc(1, sizeof(*copy));
	bool ok = copy != NULL;

	if (ok) {
		*copy = *group;
		copy->stages = malloc(group->nstages * sizeof(sched_stage));
		copy->branches = malloc(group->nbranches * sizeof(sched_branch));
		copy->lane_blocks = malloc(group->nbranches * sizeof(int64_t));
		ok = copy->stages && copy->branches && copy->lane_blocks;
	}
	if (!ok) {
		if (copy)
			copy->nstages = 0;
		sched_group_free(copy);
		return NULL;
	}
	memcpy(copy->stages, group->stages, group->nstages * sizeof(sched_stage));
	memcpy(copy->branches, group->branches, group->nbranches * sizeof(sched_branch));
	memcpy(copy->lane_blocks, group->lane_blocks, group->nbranches * sizeof(int64_t));
	for (int s = 0; s < group->nstages; s++)
		for (int d = 0; d < group->stages[s].rank; d++) {
			copy->stages[s].lo[d] = strdup(group->stages[s].lo[d]);
			copy->stages[s].hi[d] = strdup(group->stages[s].hi[d]);
		}
	return copy;
}

int sched_group_stage_of(const sched_group *group, int op)
{
	for (int s = 0; s < group->nstages; s++)
		if (group->stages[s].op == op)
			return s;
	return -1;
}

bool sched_group_starts_branch(const sched_group *group, int s)
{
	return s == 0 || group->stages[s - 1].branch != group->stages[s].branch;
}
