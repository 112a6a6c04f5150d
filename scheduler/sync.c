/*
 * sync.c: the tile dependence of one kernel on another and the sync
 * policies read off it (cuSync; docs/design/sync.md).
 *
 * Each kernel's tiles are a quasi-affine map from the elements of the
 * tensor it covers to tile coordinates. The consumer tile's footprint on
 * the producer's output follows the access relations back through the
 * consumer's ops; lifted to the producer's tiles it is "needs", the
 * relation Tc[c] -> Tp[p] of cuSync's dependence. A policy is a map from
 * producer tiles to semaphores ("posts"); a consumer tile waits on the
 * semaphores of the tiles it needs ("waits" = needs . posts), each until
 * it received all of its posts. A policy is offered only when it is exact:
 * a consumer tile waits for no producer tile it does not need.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <isl/aff.h>
#include <isl/ast.h>
#include <isl/ast_build.h>
#include <isl/id.h>
#include <isl/ilp.h>
#include <isl/map.h>
#include <isl/printer.h>
#include <isl/space.h>
#include <isl/set.h>
#include <isl/union_map.h>
#include <isl/union_set.h>
#include <isl/val.h>

#include "sched_int.h"

#define CONSUMER_TILE "Tc"
#define PRODUCER_TILE "Tp"
#define SEMAPHORE "Sem"

static const char *const kind_names[] = {
	[SCHED_SYNC_TILE] = "tile", [SCHED_SYNC_ROW] = "row",
	[SCHED_SYNC_STRIDED] = "strided", [SCHED_SYNC_CONV2D] = "conv2d",
};

const char *sched_sync_kind_name(enum sched_sync_kind kind)
{
	return kind >= 0 && kind < SCHED_SYNC_KINDS ? kind_names[kind] : NULL;
}

int sched_sync_kind_from_name(const char *name)
{
	for (int k = 0; k < SCHED_SYNC_KINDS; k++)
		if (strcmp(name, kind_names[k]) == 0)
			return k;
	return -1;
}

/* SCHED_EMEANING with the reason in "err". */
#define refuse(err, ...) sched_fail(err, SCHED_EMEANING, -1, 0, __VA_ARGS__)

static isl_map *map_from_buf(isl_ctx *ctx, sched_buf *buf)
{
	isl_map *map = buf->str ? isl_map_read_from_str(ctx, buf->str) : NULL;

	sched_buf_release(buf);
	return map;
}

int64_t sched_tiles_along(const sched_tiling *t, int d)
{
	return (t->view[d] + t->tile[d] - 1) / t->tile[d];
}

static void print_coordinates(sched_buf *buf, const char *name, int rank)
{
	for (int d = 0; d < rank; d++)
		sched_buf_printf(buf, "%s%s%d", d ? ", " : "", name, d);
}

/* The row-major offset of coordinates name0, name1, ... in "shape". */
static void print_flat(sched_buf *buf, const char *name, const int64_t *shape, int rank)
{
	int64_t stride = 1;

	for (int d = rank - 1; d >= 0; stride *= shape[d--])
		sched_buf_printf(buf, "%s%lld %s%d", d == rank - 1 ? "" : " + ",
				 (long long)stride, name, d);
}

/* { tensor[e] -> tuple[t] }: element e at flat offset f sits at view
 * coordinates v (f = v in row-major order) in tile t = floor(v / tile). */
static isl_map *tiling_map(isl_ctx *ctx, const sched_graph *graph,
			   const sched_tiling *t, const char *tuple)
{
	const sched_tensor *tensor = &graph->tensors[t->tensor];
	sched_buf buf = {0};

	sched_buf_printf(&buf, "{ %s[", tensor->name);
	print_coordinates(&buf, "e", tensor->rank);
	sched_buf_printf(&buf, "] -> %s[", tuple);
	print_coordinates(&buf, "t", t->rank);
	sched_buf_printf(&buf, "] : exists (");
	print_coordinates(&buf, "v", t->rank);
	sched_buf_printf(&buf, " : ");
	print_flat(&buf, "e", tensor->shape, tensor->rank);
	sched_buf_printf(&buf, " = ");
	print_flat(&buf, "v", t->view, t->rank);
	for (int d = 0; d < tensor->rank; d++)
		sched_buf_printf(&buf, " and 0 <= e%d < %lld", d, (long long)tensor->shape[d]);
	for (int d = 0; d < t->rank; d++)
		sched_buf_printf(&buf, " and 0 <= v%d < %lld and %lld t%d <= v%d < "
				 "%lld t%d + %lld", d, (long long)t->view[d],
				 (long long)t->tile[d], d, d, (long long)t->tile[d], d,
				 (long long)t->tile[d]);
	sched_buf_printf(&buf, ") }");
	return map_from_buf(ctx, &buf);
}

/* { tuple[t] : 0 <= t < tiles } */
static isl_set *grid_of(isl_ctx *ctx, const sched_tiling *t, const char *tuple)
{
	sched_buf buf = {0};
	isl_set *set;

	sched_buf_printf(&buf, "{ %s[", tuple);
	print_coordinates(&buf, "t", t->rank);
	sched_buf_printf(&buf, "] : ");
	for (int d = 0; d < t->rank; d++)
		sched_buf_printf(&buf, "%s0 <= t%d < %lld", d ? " and " : "", d,
				 (long long)sched_tiles_along(t, d));
	sched_buf_printf(&buf, " }");
	set = buf.str ? isl_set_read_from_str(ctx, buf.str) : NULL;
	sched_buf_release(&buf);
	return set;
}

/* The consumer's root: its member whose target no member reads. */
static int consumer_root(const sched_graph *graph, const sched_sync_pair *pair)
{
	for (int i = 0; i < pair->nconsumer_ops; i++) {
		int op = pair->consumer_ops[i];
		bool read = false;

		for (int j = 0; j < pair->nconsumer_ops && !read; j++)
			read = sched_op_reads_tensor(&graph->ops[pair->consumer_ops[j]],
						     graph->ops[op].target);
		if (!read && graph->ops[op].target == pair->consumer.tensor)
			return op;
	}
	return -1;
}

/* The reads of every member (instances -> elements) and the members'
 * writes reversed (elements -> instances). */
static void member_relations(isl_ctx *ctx, const sched_graph *graph,
			     const sched_sync_pair *pair, isl_union_map **reads,
			     isl_union_map **producers)
{
	*reads = isl_union_map_empty(isl_space_params_alloc(ctx, 0));
	*producers = isl_union_map_empty(isl_space_params_alloc(ctx, 0));
	for (int i = 0; i < pair->nconsumer_ops; i++) {
		int op = pair->consumer_ops[i];
		isl_set *domain = sched_op_domain(ctx, graph, op);
		isl_map *write = sched_op_write(ctx, graph, op);

		*reads = isl_union_map_union(*reads, isl_union_map_intersect_domain(
			sched_op_reads(ctx, graph, op),
			isl_union_set_from_set(isl_set_copy(domain))));
		write = isl_map_intersect_domain(write, domain);
		*producers = isl_union_map_union(*producers, isl_union_map_from_map(
			isl_map_reverse(write)));
	}
}

/* Tc[c] -> the elements of the producer's tensor consumer tile c reads,
 * through any chain of members. */
static isl_map *footprint(isl_ctx *ctx, const sched_graph *graph,
			  const sched_sync_pair *pair, int root, isl_set *grid)
{
	const sched_tensor *t = &graph->tensors[pair->producer.tensor];
	isl_map *root_write = isl_map_intersect_domain(sched_op_write(ctx, graph, root),
						       sched_op_domain(ctx, graph, root));
	isl_map *tiles = tiling_map(ctx, graph, &pair->consumer, CONSUMER_TILE);
	isl_union_map *instances = isl_union_map_from_map(isl_map_reverse(
		isl_map_apply_range(root_write, tiles)));
	isl_union_map *reads, *producers, *all;
	isl_space *space = isl_space_set_alloc(ctx, 0, t->rank);
	isl_map *result;

	member_relations(ctx, graph, pair, &reads, &producers);
	all = isl_union_map_empty(isl_space_params_alloc(ctx, 0));
	for (int step = 0; step <= pair->nconsumer_ops; step++) {
		isl_union_map *elements = isl_union_map_apply_range(instances,
								    isl_union_map_copy(reads));

		all = isl_union_map_union(all, isl_union_map_copy(elements));
		instances = isl_union_map_apply_range(elements, isl_union_map_copy(producers));
	}
	isl_union_map_free(instances);
	isl_union_map_free(reads);
	isl_union_map_free(producers);
	space = isl_space_set_tuple_name(space, isl_dim_set, t->name);
	space = isl_space_map_from_domain_and_range(isl_set_get_space(grid), space);
	result = isl_union_map_extract_map(all, space);
	isl_union_map_free(all);
	return result;
}

static isl_bool empty_or_error(isl_map *map)
{
	return map ? isl_map_is_empty(map) : isl_bool_error;
}

/* ---- policies ---- */

/* { Tp[p] -> Sem[..] } of "kind" on the producer's grid ("stride" for
 * STRIDED); NULL where the kind does not apply to its rank. */
static isl_map *posts_of(isl_ctx *ctx, const sched_tiling *t, enum sched_sync_kind kind,
			 int64_t stride)
{
	sched_buf buf = {0};
	int r = t->rank;

	if ((kind == SCHED_SYNC_ROW && r < 2) || (kind == SCHED_SYNC_CONV2D && r != 4))
		return NULL;
	sched_buf_printf(&buf, "{ %s[", PRODUCER_TILE);
	print_coordinates(&buf, "p", r);
	sched_buf_printf(&buf, "] -> %s[", SEMAPHORE);
	for (int d = 0, first = 1; d < r; d++) {
		if ((kind == SCHED_SYNC_ROW && d == r - 1) ||
		    (kind == SCHED_SYNC_CONV2D && d == 1))
			continue;
		if (kind == SCHED_SYNC_STRIDED && d == r - 1)
			sched_buf_printf(&buf, "%sp%d mod %lld", first ? "" : ", ", d,
					 (long long)stride);
		else
			sched_buf_printf(&buf, "%sp%d", first ? "" : ", ", d);
		first = 0;
	}
	sched_buf_printf(&buf, "] : ");
	for (int d = 0; d < r; d++)
		sched_buf_printf(&buf, "%s0 <= p%d < %lld", d ? " and " : "", d,
				 (long long)sched_tiles_along(t, d));
	sched_buf_printf(&buf, " }");
	return map_from_buf(ctx, &buf);
}

/* Whether waiting on the semaphores of the tiles each consumer tile needs
 * holds it for no other producer tile. */
static isl_bool exact(isl_map *needs, isl_map *posts)
{
	isl_map *waits = isl_map_apply_range(isl_map_copy(needs), isl_map_copy(posts));
	isl_map *held = isl_map_apply_range(waits, isl_map_reverse(isl_map_copy(posts)));
	isl_bool yes = isl_map_is_subset(held, needs);

	isl_map_free(held);
	return yes;
}

/* The smallest positive distance along the last dim between two producer
 * tiles one consumer tile needs, all other dims equal; 0 when none. */
static int64_t needed_stride(isl_map *needs, int rank)
{
	isl_map *pairs = isl_map_apply_range(isl_map_reverse(isl_map_copy(needs)),
					     isl_map_copy(needs));
	isl_set *deltas = isl_map_deltas(pairs);
	int64_t stride = 0;

	for (int d = 0; d < rank - 1; d++)
		deltas = isl_set_fix_si(deltas, isl_dim_set, d, 0);
	deltas = isl_set_lower_bound_si(deltas, isl_dim_set, rank - 1, 1);
	if (isl_set_is_empty(deltas) == isl_bool_false) {
		isl_point *least = isl_set_sample_point(isl_set_lexmin(isl_set_copy(deltas)));
		isl_val *v = isl_point_get_coordinate_val(least, isl_dim_set, rank - 1);

		if (v && isl_val_is_int(v))
			stride = isl_val_get_num_si(v);
		isl_val_free(v);
		isl_point_free(least);
	}
	isl_set_free(deltas);
	return stride;
}

/* The input dims of "map" (taken) named name0, name1, ... and made
 * parameters. */
static isl_map *inputs_as_params(isl_map *map, const char *name)
{
	int rank = isl_map_dim(map, isl_dim_in);

	for (int d = 0; d < rank; d++) {
		char dim[16];

		snprintf(dim, sizeof(dim), "%s%d", name, d);
		map = isl_map_set_dim_name(map, isl_dim_in, d, dim);
	}
	return isl_map_move_dims(map, isl_dim_param, 0, isl_dim_in, 0, rank);
}

/* The tile grid "grid" (taken) as a context of parameters name0, ... */
static isl_set *grid_as_params(isl_set *grid, const char *name)
{
	isl_map *of_params = inputs_as_params(isl_map_from_domain(grid), name);

	return isl_set_params(isl_map_domain(of_params));
}

/* "map" (taken), a function of the tiles of "grid" (taken) whose
 * coordinates are named name0, name1, ..., as one C expression per output
 * dim. */
static bool c_expressions(isl_map *map, const char *name, isl_set *grid,
			  char **out, int n)
{
	isl_ast_build *build = isl_ast_build_from_context(grid_as_params(grid, name));
	isl_pw_multi_aff *f;
	bool ok = true;

	map = inputs_as_params(map, name);
	f = isl_pw_multi_aff_from_map(map);
	for (int i = 0; i < n; i++) {
		isl_ast_expr *expr = isl_ast_build_expr_from_pw_aff(build,
			isl_pw_aff_project_domain_on_params(isl_pw_multi_aff_get_pw_aff(f, i)));

		out[i] = expr ? isl_ast_expr_to_C_str(expr) : NULL;
		ok = ok && out[i];
		isl_ast_expr_free(expr);
	}
	isl_pw_multi_aff_free(f);
	isl_ast_build_free(build);
	return ok;
}

/* The semaphores' grid: extent[d] along each dim of Sem. */
static bool semaphore_grid(isl_map *posts, int64_t *extent, int *rank)
{
	isl_set *range = isl_map_range(isl_map_copy(posts));

	*rank = isl_set_dim(range, isl_dim_set);
	for (int d = 0; d < *rank; d++) {
		isl_val *hi = isl_set_dim_max_val(isl_set_copy(range), d);

		extent[d] = hi && isl_val_is_int(hi) ? isl_val_get_num_si(hi) + 1 : 0;
		isl_val_free(hi);
		if (extent[d] <= 0) {
			isl_set_free(range);
			return false;
		}
	}
	isl_set_free(range);
	return true;
}

/* The row-major index of Sem coordinates "coord" as C: the sum of each
 * coordinate times its stride; dims of extent 1 (coordinate 0) left out. */
static void print_linear(sched_buf *buf, char **coord, const int64_t *extent, int rank)
{
	int64_t stride = 1;
	int printed = 0;

	for (int d = rank - 1; d >= 0; stride *= extent[d--]) {
		if (extent[d] == 1)
			continue;
		sched_buf_printf(buf, "%s(%s)", printed++ ? " + " : "", coord[d]);
		if (stride > 1)
			sched_buf_printf(buf, " * %lld", (long long)stride);
	}
	if (!printed)
		sched_buf_printf(buf, "0");
}

typedef struct wait_printer {
	const int64_t *extent;
	int rank;
} wait_printer;

/* A leaf of the wait loop: KSYNC_WAIT(the semaphore's linear index). */
static isl_printer *print_wait(isl_printer *p, isl_ast_print_options *options,
			       isl_ast_node *node, void *user)
{
	const wait_printer *w = user;
	isl_ast_expr *call = isl_ast_node_user_get_expr(node);
	char *coord[SCHED_MAX_RANK] = {0};
	sched_buf buf = {0};

	for (int d = 0; d < w->rank; d++) {
		isl_ast_expr *arg = isl_ast_expr_get_op_arg(call, d + 1);

		coord[d] = isl_ast_expr_to_C_str(arg);
		isl_ast_expr_free(arg);
	}
	sched_buf_printf(&buf, "KSYNC_WAIT(");
	print_linear(&buf, coord, w->extent, w->rank);
	sched_buf_printf(&buf, ");");
	for (int d = 0; d < w->rank; d++)
		free(coord[d]);
	p = isl_printer_start_line(p);
	p = isl_printer_print_str(p, buf.str ? buf.str : "#error out of memory");
	p = isl_printer_end_line(p);
	sched_buf_release(&buf);
	isl_ast_expr_free(call);
	isl_ast_print_options_free(options);
	return p;
}

/* s0, s1, ...: the wait loops' counters (c0, c1, ... are the tile's). */
static isl_id_list *iterator_names(isl_ctx *ctx, int rank)
{
	isl_id_list *names = isl_id_list_alloc(ctx, rank);

	for (int d = 0; d < rank; d++) {
		char name[16];

		snprintf(name, sizeof(name), "s%d", d);
		names = isl_id_list_add(names, isl_id_alloc(ctx, name, NULL));
	}
	return names;
}

/* { Sem[s] -> [s] } over "sems" (taken): the semaphores in order. */
static isl_map *identity_schedule(isl_set *sems)
{
	isl_map *schedule = isl_map_identity(isl_space_map_from_set(isl_set_get_space(sems)));

	schedule = isl_map_intersect_domain(schedule, sems);
	return isl_map_reset_tuple_id(schedule, isl_dim_out);
}

/* The loops that wait on every semaphore of "waits" (Tc[c] -> Sem[s]) for
 * the consumer tile c0, c1, ... (parameters bounded by "grid"). */
static char *wait_loops(isl_map *waits, isl_set *grid, const int64_t *extent, int rank)
{
	isl_map *of_params = inputs_as_params(isl_map_copy(waits), "c");
	wait_printer w = {extent, rank};
	isl_ast_build *build;
	isl_ast_node *tree;
	isl_ast_print_options *options;
	isl_printer *p;
	char *text;

	build = isl_ast_build_from_context(grid_as_params(isl_set_copy(grid), "c"));
	build = isl_ast_build_set_iterators(build, iterator_names(isl_map_get_ctx(waits),
								  rank));
	tree = isl_ast_build_node_from_schedule_map(build, isl_union_map_from_map(
		identity_schedule(isl_map_range(of_params))));
	isl_ast_build_free(build);
	if (!tree)
		return NULL;
	options = isl_ast_print_options_alloc(isl_ast_node_get_ctx(tree));
	options = isl_ast_print_options_set_print_user(options, &print_wait, &w);
	p = isl_printer_to_str(isl_ast_node_get_ctx(tree));
	p = isl_printer_set_output_format(p, ISL_FORMAT_C);
	p = isl_ast_node_print(tree, p, options);
	text = isl_printer_get_str(p);
	isl_printer_free(p);
	isl_ast_node_free(tree);
	return text;
}

static void policy_release(sched_sync_policy *policy)
{
	free(policy->post);
	free(policy->wait);
	free(policy->posted);
	isl_map_free(policy->posts);
	isl_map_free(policy->waits);
	memset(policy, 0, sizeof(*policy));
}

static int64_t product(const int64_t *extent, int rank)
{
	int64_t n = 1;

	for (int d = 0; d < rank; d++)
		n *= extent[d];
	return n;
}

/* Points of "set" (taken) per semaphore (linear index), its Sem
 * coordinates after "skip" other dims: isl enumerates them. */
typedef struct sem_count {
	int64_t *count;
	const int64_t *extent;
	int rank, skip;
} sem_count;

static isl_stat count_point(isl_point *pt, void *user)
{
	sem_count *c = user;
	int64_t linear = 0;

	for (int d = 0; d < c->rank; d++) {
		isl_val *v = isl_point_get_coordinate_val(pt, isl_dim_set, c->skip + d);

		linear = linear * c->extent[d] + isl_val_get_num_si(v);
		isl_val_free(v);
	}
	isl_point_free(pt);
	if (linear >= 0 && linear < product(c->extent, c->rank))
		c->count[linear]++;
	return isl_stat_ok;
}

static int64_t *count_points(isl_set *set, int skip, const int64_t *extent, int rank)
{
	sem_count c = {calloc((size_t)product(extent, rank), sizeof(int64_t)), extent,
		       rank, skip};

	if (!set || (c.count && isl_set_foreach_point(set, &count_point, &c) < 0)) {
		free(c.count);
		c.count = NULL;
	}
	isl_set_free(set);
	return c.count;
}

/* How many producer tiles post to each semaphore. */
static int64_t *count_posts(isl_map *posts, const int64_t *extent, int rank)
{
	return count_points(isl_set_flatten(isl_map_wrap(isl_map_copy(posts))),
			    isl_map_dim(posts, isl_dim_in), extent, rank);
}

/* The common count of "posted" over "n" semaphores, or 0 when they get
 * different counts. */
static int64_t uniform_posts(const int64_t *posted, int64_t n)
{
	int64_t target = posted ? posted[0] : 0;

	for (int64_t s = 1; posted && s < n; s++)
		if (posted[s] != target)
			target = 0;
	return target;
}

/* Fills "policy" from "posts" (taken): the waits, the C of both sides. */
static bool make_policy(sched_sync *sync, enum sched_sync_kind kind, int64_t stride,
			isl_map *posts, sched_sync_policy *policy)
{
	char *coord[SCHED_MAX_RANK] = {0};
	sched_buf buf = {0};
	bool ok;

	*policy = (sched_sync_policy){.kind = kind, .stride = stride, .posts = posts};
	ok = semaphore_grid(posts, policy->extent, &policy->rank);
	policy->semaphores = product(policy->extent, policy->rank);
	policy->posted = ok ? count_posts(posts, policy->extent, policy->rank) : NULL;
	policy->target = uniform_posts(policy->posted, policy->semaphores);
	ok = ok && policy->target > 0;
	policy->waits = isl_map_apply_range(isl_map_copy(sync->needs), isl_map_copy(posts));
	ok = ok && c_expressions(isl_map_copy(posts), "p", isl_set_copy(sync->producer_grid),
				 coord, policy->rank);
	if (ok) {
		print_linear(&buf, coord, policy->extent, policy->rank);
		policy->post = buf.str;
		policy->wait = wait_loops(policy->waits, sync->consumer_grid,
					  policy->extent, policy->rank);
		ok = policy->post && policy->wait;
	}
	for (int d = 0; d < SCHED_MAX_RANK; d++)
		free(coord[d]);
	if (!ok)
		policy_release(policy);
	return ok;
}

/* Offers "kind" when it applies and is exact. */
static void offer(sched_sync *sync, enum sched_sync_kind kind, int64_t stride)
{
	isl_map *posts = posts_of(sync->ctx, &sync->producer, kind, stride);
	sched_sync_policy *policy = &sync->policies[sync->npolicies];

	if (!posts)
		return;
	if (kind != SCHED_SYNC_TILE && (isl_map_is_injective(posts) != isl_bool_false ||
					exact(sync->needs, posts) != isl_bool_true)) {
		isl_map_free(posts);
		return;
	}
	if (make_policy(sync, kind, stride, posts, policy))
		sync->npolicies++;
}

/* Offers "kind" when it applies; the stride is measured only for
 * STRIDED, which needs one of at least 2. */
static void offer_kind(sched_sync *sync, enum sched_sync_kind kind)
{
	int64_t stride = 0;

	if (kind == SCHED_SYNC_STRIDED &&
	    (stride = needed_stride(sync->needs, sync->producer.rank)) < 2)
		return;
	offer(sync, kind, stride);
}

/* Offers "want" alone when it applies, else (and for "want" < 0) every
 * kind in the order of sched_sync_kind: each offer is made
 * independently of the others, so the policies offered are those of a
 * full analysis, less the ones not asked for. */
static void offer_policies(sched_sync *sync, int want)
{
	if (want >= 0 && want < SCHED_SYNC_KINDS) {
		offer_kind(sync, want);
		if (sync->npolicies)
			return;
	}
	for (int kind = 0; kind < SCHED_SYNC_KINDS; kind++)
		if (kind != want)
			offer_kind(sync, kind);
}

static bool tiling_valid(const sched_graph *graph, const sched_tiling *t)
{
	int64_t elements = 1;

	if (t->tensor < 0 || t->tensor >= graph->ntensors || t->rank < 1 ||
	    t->rank > SCHED_MAX_RANK)
		return false;
	for (int d = 0; d < t->rank; d++) {
		if (t->view[d] < 1 || t->tile[d] < 1)
			return false;
		elements *= t->view[d];
	}
	return elements == sched_tensor_size(graph, t->tensor);
}

static int analyse(const sched_graph *graph, const sched_sync_pair *pair, int want,
		   sched_sync *sync, sched_error *err)
{
	int root = consumer_root(graph, pair);
	isl_map *touched, *producer_tiles;
	isl_bool none;

	if (!tiling_valid(graph, &pair->producer) || !tiling_valid(graph, &pair->consumer))
		return refuse(err, "a tiling does not cover its tensor");
	if (root < 0)
		return refuse(err, "no consumer op writes '%s' unread by the others",
			      graph->tensors[pair->consumer.tensor].name);
	sync->producer_grid = grid_of(sync->ctx, &pair->producer, PRODUCER_TILE);
	sync->consumer_grid = grid_of(sync->ctx, &pair->consumer, CONSUMER_TILE);
	touched = footprint(sync->ctx, graph, pair, root, sync->consumer_grid);
	producer_tiles = tiling_map(sync->ctx, graph, &pair->producer, PRODUCER_TILE);
	sync->needs = isl_map_apply_range(touched, producer_tiles);
	none = empty_or_error(sync->needs);
	if (none == isl_bool_error || !sync->producer_grid || !sync->consumer_grid)
		return refuse(err, "isl failed on the tile dependence");
	if (none)
		return refuse(err, "the consumer does not read '%s'",
			      graph->tensors[pair->producer.tensor].name);
	offer_policies(sync, want);
	return sync->npolicies ? SCHED_OK : refuse(err, "no policy could be printed");
}

int sched_sync_new(const sched_graph *graph, const sched_sync_pair *pair,
		   sched_sync **out, sched_error *err)
{
	return sched_sync_new_for(graph, pair, -1, out, err);
}

int sched_sync_new_for(const sched_graph *graph, const sched_sync_pair *pair, int want,
		       sched_sync **out, sched_error *err)
{
	sched_sync *sync = calloc(1, sizeof(*sync));
	int rc;

	*out = NULL;
	if (!sync || !(sync->ctx = sched_isl_ctx_new())) {
		free(sync);
		return refuse(err, "out of memory");
	}
	sync->producer = pair->producer;
	sync->consumer = pair->consumer;
	rc = analyse(graph, pair, want, sync, err);
	if (rc) {
		sched_sync_free(sync);
		return rc;
	}
	*out = sync;
	return SCHED_OK;
}

void sched_sync_free(sched_sync *sync)
{
	if (!sync)
		return;
	for (int i = 0; i < sync->npolicies; i++)
		policy_release(&sync->policies[i]);
	isl_map_free(sync->needs);
	isl_set_free(sync->producer_grid);
	isl_set_free(sync->consumer_grid);
	isl_ctx_free(sync->ctx);
	free(sync);
}

const sched_sync_policy *sched_sync_policy_of(const sched_sync *sync,
					      enum sched_sync_kind kind)
{
	for (int i = 0; i < sync->npolicies; i++)
		if (sync->policies[i].kind == kind)
			return &sync->policies[i];
	return NULL;
}

/* ---- the proof ---- */

/* Every semaphore a consumer tile waits on receives exactly "target"
 * posts: fewer, and the wait never ends; more, and it ends early. */
static int check_targets(const sched_sync_policy *policy, sched_error *err)
{
	const int64_t *posts = policy->posted;
	int64_t *waits = count_points(isl_map_range(isl_map_copy(policy->waits)), 0,
				      policy->extent, policy->rank);
	int rc = posts && waits ? SCHED_OK : refuse(err, "isl failed counting posts");

	for (int64_t s = 0; s < policy->semaphores && rc == SCHED_OK; s++) {
		if (!waits[s] || posts[s] == policy->target)
			continue;
		rc = refuse(err, "%s: semaphore %lld receives %lld posts but its waits "
			    "count to %lld: they would %s", sched_sync_kind_name(policy->kind),
			    (long long)s, (long long)posts[s], (long long)policy->target,
			    posts[s] < policy->target ? "hang" : "end early (a race)");
	}
	free(waits);
	return rc;
}

/* The producer tiles each consumer tile needs all post to semaphores it
 * waits on: needs is within waits . posts^-1. */
static int check_cover(const sched_sync *sync, const sched_sync_policy *policy,
		       sched_error *err)
{
	isl_map *held = isl_map_apply_range(isl_map_copy(policy->waits),
					    isl_map_reverse(isl_map_copy(policy->posts)));
	isl_map *missed = isl_map_subtract(isl_map_copy(sync->needs), held);
	isl_bool none = empty_or_error(missed);
	int rc = SCHED_OK;

	if (none == isl_bool_error) {
		rc = refuse(err, "isl failed on the waits");
	} else if (!none) {
		isl_map *first = isl_map_lexmin(isl_map_copy(missed));
		char *text = isl_map_to_str(first);

		rc = refuse(err, "%s: a consumer tile reads a producer tile it does not "
			    "wait for (a race): %s", sched_sync_kind_name(policy->kind),
			    text ? text : "?");
		free(text);
		isl_map_free(first);
	}
	isl_map_free(missed);
	return rc;
}

int sched_sync_check(const sched_sync *sync, const sched_sync_policy *policy,
		     sched_error *err)
{
	if (policy->target < 1 || policy->semaphores < 1)
		return refuse(err, "%s: no semaphores or no target",
			      sched_sync_kind_name(policy->kind));
	int rc = check_targets(policy, err);

	return rc ? rc : check_cover(sync, policy, err);
}
