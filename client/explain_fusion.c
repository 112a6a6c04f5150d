/*
 * explain_fusion.c: what tunectl explain shows of the fusion planner
 * (scheduler/fusion.c): every dependence between two ops and its width,
 * the fused groups a greedy walk over the dependences forms, the plan of
 * those groups, and all of it as a Graphviz file.
 *
 * Dependences. For each producer -> consumer pair (the consumer reads the
 * producer's target), the pair is analysed as one group with the consumer
 * as its root, the consumer's default tile (kgen_plan_default's) and 256
 * threads a block: its width is the consumer stage's (thread or block),
 * or global when the pair cannot be fused, with the reason.
 *
 * Groups. Every op starts alone; the dependences are walked in order of
 * their consumer in dependence order, then of their producer, and the
 * producer's group joins the consumer's when the union is a legal kernel:
 * one root (the consumer group's), a launch order left for every group,
 * and legal under the root's default tile or, failing that, under that tile
 * with every dim after the first widened to the whole extent. Legal means
 * that the plan of all groups reads back with kgen_plan_from_json, which
 * analyses each fused group (sched_group_new) and checks its schedule.
 *
 * Everything is computed as JSON first; the text and the Graphviz file are
 * printed from it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <isl/ctx.h>
#include <isl/map.h>
#include <isl/options.h>
#include <isl/union_map.h>

#include "kgen.h"
#include "scheduler.h"
#include "tunectl.h"

#define PAIR_THREADS 256

typedef struct fusion {
	const sched_graph *graph;
	isl_ctx *ctx;
	int n;                /* ops */
	const int *order;     /* dependence order */
	int *pos;             /* op -> its place in order */
	int *target;          /* op -> the tensor it writes */
	bool *reads;          /* reads[c * n + p]: c reads p's target */
	kgen_plan *defaults;  /* one kernel per op, the default schedules */
	int *default_of;      /* op -> its kernel in defaults */
	/* The groups, each named by one of its ops: */
	int *group_of;        /* op -> its group */
	int *root;            /* group -> its root */
	int64_t (*tile)[SCHED_MAX_RANK]; /* group -> its tile */
	bool *widened;        /* group -> whether its tile is widened */
} fusion;

static const char *tensor_of(const fusion *f, int op)
{
	return sched_tensor_name(f->graph, f->target[op]);
}

static json_t *dims_json(const int64_t *values, int rank)
{
	json_t *list = json_array();

	for (int d = 0; d < rank; d++)
		json_array_append_new(list, json_integer(values[d]));
	return list;
}

/* ---- the graph: targets, who reads whom, default tiles ---- */

typedef struct range_of {
	const char *name;
	bool found;
} range_of;

static isl_stat find_range(isl_map *map, void *user)
{
	range_of *r = user;
	const char *name = isl_map_get_tuple_name(map, isl_dim_out);

	r->found |= name && !strcmp(name, r->name);
	isl_map_free(map);
	return isl_stat_ok;
}

static bool op_reads(const fusion *f, int op, int tensor)
{
	isl_union_map *reads = sched_op_reads(f->ctx, f->graph, op);
	range_of r = {sched_tensor_name(f->graph, tensor), false};

	isl_union_map_foreach_map(reads, find_range, &r);
	isl_union_map_free(reads);
	return r.found;
}

static int op_target(const fusion *f, int op)
{
	isl_map *write = sched_op_write(f->ctx, f->graph, op);
	const char *name = write ? isl_map_get_tuple_name(write, isl_dim_out) : NULL;
	int tensor = name ? sched_tensor_find(f->graph, name) : -1;

	isl_map_free(write);
	return tensor;
}

static void fusion_release(fusion *f)
{
	kgen_plan_free(f->defaults);
	free(f->pos);
	free(f->target);
	free(f->reads);
	free(f->default_of);
	free(f->group_of);
	free(f->root);
	free(f->tile);
	free(f->widened);
	isl_ctx_free(f->ctx);
}

static int fusion_init(fusion *f, const sched_graph *graph)
{
	int n = sched_graph_op_count(graph);

	*f = (fusion){.graph = graph, .n = n, .order = sched_graph_order(graph)};
	f->ctx = isl_ctx_alloc();
	f->pos = calloc(n, sizeof(int));
	f->target = calloc(n, sizeof(int));
	f->reads = calloc((size_t)n * n, sizeof(bool));
	f->default_of = calloc(n, sizeof(int));
	f->group_of = calloc(n, sizeof(int));
	f->root = calloc(n, sizeof(int));
	f->tile = calloc(n, sizeof(*f->tile));
	f->widened = calloc(n, sizeof(bool));
	f->defaults = kgen_plan_default(graph);
	if (!f->ctx || !f->pos || !f->target || !f->reads || !f->default_of ||
	    !f->group_of || !f->root || !f->tile || !f->widened || !f->defaults)
		return -1;
	isl_options_set_on_error(f->ctx, ISL_ON_ERROR_CONTINUE);
	for (int i = 0; i < n; i++) {
		f->pos[f->order[i]] = i;
		if ((f->target[i] = op_target(f, i)) < 0)
			return -1;
	}
	for (int k = 0; k < f->defaults->nkernels; k++)
		f->default_of[f->defaults->kernels[k].ops[0]] = k;
	for (int c = 0; c < n; c++)
		for (int p = 0; p < n; p++)
			f->reads[c * n + p] = p != c && op_reads(f, c, f->target[p]);
	for (int op = 0; op < n; op++) {
		const kgen_schedule *s = &f->defaults->kernels[f->default_of[op]].schedule;

		f->group_of[op] = op;
		f->root[op] = op;
		memcpy(f->tile[op], s->tile, sizeof(f->tile[op]));
	}
	return 0;
}

static int rank_of(const fusion *f, int op)
{
	return sched_tensor_rank(f->graph, f->target[op]);
}

static const int64_t *default_tile(const fusion *f, int op)
{
	return f->defaults->kernels[f->default_of[op]].schedule.tile;
}

/* ---- dependences ---- */

static json_t *map_json(isl_map *map)
{
	char *text = map ? isl_map_to_str(map) : NULL;
	json_t *value = text ? json_string(text) : json_null();

	free(text);
	isl_map_free(map);
	return value;
}

/* The pair p -> c as a group rooted at c, with c's default tile and 256
 * threads a block: the consumer stage's width, or global and why not. */
static json_t *explain_dependence(fusion *f, int p, int c)
{
	const int64_t *tile = default_tile(f, c);
	int ops[2] = {p, c};
	sched_group_spec spec = {2, ops, tile, NULL, PAIR_THREADS, KGEN_LOCAL_BYTES};
	sched_error err = {0};
	sched_group *group;
	json_t *obj = json_pack("{s:i, s:i, s:s, s:o, s:i}", "producer", p,
				"consumer", c, "tensor", tensor_of(f, p),
				"tile", dims_json(tile, rank_of(f, c)),
				"threads", PAIR_THREADS);

	if (sched_group_new(f->graph, &spec, &group, &err) < 0) {
		if (err.code != SCHED_EMEANING) {
			json_decref(obj);
			return NULL;
		}
		json_object_set_new(obj, "width",
				    json_string(sched_width_name(SCHED_WIDTH_GLOBAL)));
		json_object_set_new(obj, "reason", json_string(err.message));
	} else {
		const sched_stage *st = &group->stages[sched_group_stage_of(group, c)];

		json_object_set_new(obj, "width", json_string(sched_width_name(st->width)));
		sched_group_free(group);
	}
	json_object_set_new(obj, "relation",
			    map_json(sched_dependence(f->ctx, f->graph, p, c)));
	return obj;
}

/* Every dependence, by consumer in dependence order, then by producer. */
static json_t *explain_dependences(fusion *f)
{
	json_t *list = json_array();

	for (int i = 0; i < f->n; i++)
		for (int j = 0; j < i; j++) {
			int c = f->order[i], p = f->order[j];
			json_t *dep;

			if (!f->reads[c * f->n + p])
				continue;
			if (!(dep = explain_dependence(f, p, c))) {
				json_decref(list);
				return NULL;
			}
			json_array_append_new(list, dep);
		}
	return list;
}

/* ---- groups and their plan ---- */

/* The groups in a launch order: each after the groups it reads, the one
 * with the earliest op first. Fills "groups" (group names) and returns
 * how many, -1 when the groups read each other in a cycle, -2 when out of
 * memory. */
static int launch_order(const fusion *f, int *groups)
{
	int n = f->n, count = 0, placed = 0;
	bool *done = calloc(n, sizeof(bool)), *waits = calloc(n, sizeof(bool));

	if (!done || !waits) {
		free(done);
		free(waits);
		return -2;
	}
	for (int op = 0; op < n; op++)
		count += f->group_of[op] == op;
	while (placed < count) {
		int next = -1;

		memset(waits, 0, n * sizeof(bool)); /* reads a group not placed */
		for (int c = 0; c < n; c++)
			for (int p = 0; p < n; p++)
				waits[f->group_of[c]] |= f->reads[c * n + p] &&
					f->group_of[p] != f->group_of[c] &&
					!done[f->group_of[p]];
		for (int i = 0; i < n && next < 0; i++) { /* earliest op first */
			int g = f->group_of[f->order[i]];

			if (!done[g] && !waits[g])
				next = g;
		}
		if (next < 0)
			break;
		done[next] = true;
		groups[placed++] = next;
	}
	free(done);
	free(waits);
	return placed == count ? count : -1;
}

/* The plan of the groups in "groups" (a launch order): each kernel its
 * root's default schedule with the group's tile. */
static kgen_plan *plan_of(const fusion *f, const int *groups, int count)
{
	kgen_plan *plan = calloc(1, sizeof(*plan));

	if (!plan || !(plan->kernels = calloc(count, sizeof(kgen_kernel)))) {
		free(plan);
		return NULL;
	}
	plan->nkernels = count;
	for (int k = 0; k < count; k++) {
		kgen_kernel *kernel = &plan->kernels[k];
		int g = groups[k];

		*kernel = f->defaults->kernels[f->default_of[f->root[g]]];
		memcpy(kernel->schedule.tile, f->tile[g], sizeof(f->tile[g]));
		kernel->nops = 0;
		for (int i = 0; i < f->n; i++)
			if (f->group_of[f->order[i]] == g)
				kernel->ops[kernel->nops++] = f->order[i];
		snprintf(kernel->name, sizeof(kernel->name), "k%d_%s", k,
			 tensor_of(f, f->root[g]));
	}
	return plan;
}

/* The plan of the current groups, checked by reading its JSON back;
 * NULL with the reason in "why" when it is not valid. */
static kgen_plan *checked_plan(const fusion *f, char *why, size_t size)
{
	int *groups = malloc(f->n * sizeof(int)), count;
	kgen_plan *plan = NULL, *checked = NULL;
	kgen_error err = {0};
	json_t *json;

	if (!groups)
		return snprintf(why, size, "out of memory"), NULL;
	count = launch_order(f, groups);
	if (count == -1)
		snprintf(why, size, "the groups would read each other in a cycle: no "
			 "launch order is left");
	else if (count < 0 || !(plan = plan_of(f, groups, count)))
		snprintf(why, size, "out of memory");
	free(groups);
	if (!plan)
		return NULL;
	json = kgen_plan_to_json(f->graph, plan);
	kgen_plan_free(plan);
	if (kgen_plan_from_json(f->graph, json, &checked, &err) < 0) {
		const char *text = err.message;

		if (!strncmp(text, "kernel '", 8) && strstr(text, "': "))
			text = strstr(text, "': ") + 3; /* the kernel's name aside */
		snprintf(why, size, "%s", text);
	}
	json_decref(json);
	kgen_error_release(&err);
	return checked;
}

static int group_size(const fusion *f, int g)
{
	int size = 0;

	for (int op = 0; op < f->n; op++)
		size += f->group_of[op] == g;
	return size;
}

/* The members of group g that no other member reads: its roots. */
static int group_roots(const fusion *f, int g, int *roots)
{
	int count = 0;

	for (int i = 0; i < f->n; i++) {
		int r = f->order[i];
		bool read = false;

		if (f->group_of[r] != g)
			continue;
		for (int c = 0; c < f->n && !read; c++)
			read = f->group_of[c] == g && f->reads[c * f->n + r];
		if (!read)
			roots[count++] = r;
	}
	return count;
}

static void set_group(fusion *f, int from, int to)
{
	for (int op = 0; op < f->n; op++)
		if (f->group_of[op] == from)
			f->group_of[op] = to;
}

/* The group gc as it was before a merge: "members" back in gp. */
static void undo_merge(fusion *f, const int *members, int count, int gp, int gc,
		       const int64_t *tile, bool widened)
{
	for (int i = 0; i < count; i++)
		f->group_of[members[i]] = gp;
	memcpy(f->tile[gc], tile, sizeof(f->tile[gc]));
	f->widened[gc] = widened;
}

/* Merges p's group gp into c's group gc under "tile"; whether the plan
 * stays valid (else "why"). The caller undoes a merge it does not keep. */
static bool try_tile(fusion *f, int gp, int gc, const int64_t *tile, bool widened,
		     char *why, size_t size)
{
	kgen_plan *plan;

	memcpy(f->tile[gc], tile, sizeof(f->tile[gc]));
	f->widened[gc] = widened;
	set_group(f, gp, gc);
	if (!(plan = checked_plan(f, why, size)))
		return false;
	kgen_plan_free(plan);
	return true;
}

static json_t *tile_json(const fusion *f, int root, const int64_t *tile)
{
	return dims_json(tile, rank_of(f, root));
}

/* Why the union of gp and gc has other roots than gc's, or NULL. */
static json_t *two_roots(fusion *f, int gp, int gc)
{
	int members[2 * KGEN_MAX_OPS], count = 0, roots[2 * KGEN_MAX_OPS], nroots;
	char text[400];
	size_t len;

	for (int op = 0; op < f->n; op++)
		if (f->group_of[op] == gp)
			members[count++] = op;
	set_group(f, gp, gc);
	nroots = group_roots(f, gc, roots);
	for (int i = 0; i < count; i++)
		f->group_of[members[i]] = gp;
	if (nroots == 1 && roots[0] == f->root[gc])
		return NULL;
	len = (size_t)snprintf(text, sizeof(text), "the group would have %d roots, "
			       "ops no other member reads (", nroots);
	for (int i = 0; i < nroots && len < sizeof(text); i++)
		len += (size_t)snprintf(text + len, sizeof(text) - len, "%s'%s'",
					i ? ", " : "", tensor_of(f, roots[i]));
	if (len < sizeof(text))
		snprintf(text + len, sizeof(text) - len, "): a group needs one root");
	return json_string(text);
}

/* One step of the walk: the dependence p -> c, and whether it fused. */
static json_t *merge_step(fusion *f, int p, int c)
{
	int gp = f->group_of[p], gc = f->group_of[c], root = f->root[gc];
	int rank = rank_of(f, root), members[KGEN_MAX_OPS], count = 0;
	int64_t widened[SCHED_MAX_RANK], old[SCHED_MAX_RANK];
	const int64_t *tile = default_tile(f, root);
	const int64_t *shape = sched_tensor_shape(f->graph, f->target[root]);
	bool old_widened = f->widened[gc], wider = false;
	char why[512] = "", why_wide[512] = "";
	json_t *step = json_pack("{s:i, s:i, s:s, s:b}", "producer", p,
				 "consumer", c, "tensor", tensor_of(f, p),
				 "fused", gp == gc), *reason;

	if (gp == gc) {
		json_object_set_new(step, "already", json_true());
		return step;
	}
	if (group_size(f, gp) + group_size(f, gc) > KGEN_MAX_OPS) {
		json_object_set_new(step, "reason", json_sprintf(
			"a kernel has at most %d ops", KGEN_MAX_OPS));
		return step;
	}
	if ((reason = two_roots(f, gp, gc))) {
		json_object_set_new(step, "reason", reason);
		return step;
	}
	for (int op = 0; op < f->n; op++)
		if (f->group_of[op] == gp)
			members[count++] = op;
	memcpy(old, f->tile[gc], sizeof(old));
	for (int d = 0; d < rank; d++) {
		widened[d] = d == 0 ? tile[d] : shape[d];
		wider |= widened[d] != tile[d];
	}
	if (try_tile(f, gp, gc, tile, false, why, sizeof(why))) {
		json_object_set_new(step, "fused", json_true());
		json_object_set_new(step, "tile", tile_json(f, root, tile));
		json_object_set_new(step, "tile_kind", json_string("default"));
		return step;
	}
	undo_merge(f, members, count, gp, gc, old, old_widened);
	if (wider && try_tile(f, gp, gc, widened, true, why_wide, sizeof(why_wide))) {
		json_object_set_new(step, "fused", json_true());
		json_object_set_new(step, "tile", tile_json(f, root, widened));
		json_object_set_new(step, "tile_kind", json_string("widened"));
		json_object_set_new(step, "default_reason", json_string(why));
		return step;
	}
	json_object_set_new(step, "reason", json_string(why));
	json_object_set_new(step, "default_tile", tile_json(f, root, tile));
	if (wider) {
		undo_merge(f, members, count, gp, gc, old, old_widened);
		json_object_set_new(step, "widened_tile", tile_json(f, root, widened));
		json_object_set_new(step, "widened_reason", json_string(why_wide));
	}
	return step;
}

static const char *store_name(enum sched_store store)
{
	switch (store) {
	case SCHED_STORE_LOCAL: return "local";
	case SCHED_STORE_GLOBAL: return "global";
	case SCHED_STORE_BOTH: return "both";
	default: return "inline";
	}
}

static json_t *explain_stage(const fusion *f, const sched_group *group,
			     const sched_stage *st)
{
	bool reads_member = false;
	json_t *obj;

	for (int s = 0; s < group->nstages; s++)
		reads_member |= f->reads[st->op * f->n + group->stages[s].op];
	obj = json_pack("{s:i, s:s, s:s, s:o, s:b, s:o}", "op", st->op,
			"tensor", tensor_of(f, st->op), "store", store_name(st->store),
			"width", reads_member ? json_string(sched_width_name(st->width)) :
				 json_null(),
			"barrier", st->barrier, "extent", dims_json(st->extent, st->rank));
	return obj;
}

/* Kernel k of "plan" as the group the cuda backend would run. */
static json_t *explain_group(const fusion *f, const kgen_plan *plan, int k)
{
	const kgen_kernel *kernel = &plan->kernels[k];
	json_t *ops = json_array(), *roots = json_array(), *stages = json_array();
	int g = f->group_of[kernel->ops[0]], threads = 1;
	kgen_error err = {0};
	sched_group *group;
	json_t *obj;

	for (int i = 0; i < kernel->nops; i++)
		json_array_append_new(ops, json_integer(kernel->ops[i]));
	for (int d = 0; d < rank_of(f, f->root[g]); d++)
		threads *= kernel->schedule.threads[d];
	obj = json_pack("{s:s, s:o, s:o, s:s, s:i}", "name", kernel->name,
			"ops", ops, "tile", tile_json(f, f->root[g], kernel->schedule.tile),
			"tile_kind", f->widened[g] ? "widened" : "default",
			"threads", threads);
	if (kgen_kernel_group(f->graph, kernel, true, &group, &err) < 0) {
		json_object_set_new(obj, "roots", roots);
		json_object_set_new(obj, "error", json_string(err.message));
		json_decref(stages);
		kgen_error_release(&err);
		return obj;
	}
	for (int b = 0; b < group->nbranches; b++)
		json_array_append_new(roots, json_integer(group->branches[b].root));
	for (int s = 0; s < group->nstages; s++)
		json_array_append_new(stages, explain_stage(f, group, &group->stages[s]));
	json_object_set_new(obj, "roots", roots);
	json_object_set_new(obj, "blocks", json_integer(group->blocks));
	json_object_set_new(obj, "local_bytes",
			    json_integer(group->local_floats * (json_int_t)sizeof(float)));
	json_object_set_new(obj, "stages", stages);
	sched_group_free(group);
	return obj;
}

/* The walk over the dependences, then the groups and their plan. */
static int plan_groups(fusion *f, json_t *obj, char *why, size_t size)
{
	json_t *merges = json_array(), *groups = json_array();
	kgen_plan *plan;

	for (int i = 0; i < f->n; i++)
		for (int j = 0; j < i; j++) {
			int c = f->order[i], p = f->order[j];

			if (f->reads[c * f->n + p])
				json_array_append_new(merges, merge_step(f, p, c));
		}
	json_object_set_new(obj, "merges", merges);
	if (!(plan = checked_plan(f, why, size))) {
		json_decref(groups);
		return -1;
	}
	for (int k = 0; k < plan->nkernels; k++)
		json_array_append_new(groups, explain_group(f, plan, k));
	json_object_set_new(obj, "groups", groups);
	json_object_set_new(obj, "plan", kgen_plan_to_json(f->graph, plan));
	kgen_plan_free(plan);
	return 0;
}

/* ---- Graphviz ---- */

static const char *width_color(const char *width)
{
	return !strcmp(width, "thread") ? "green" :
	       !strcmp(width, "block") ? "orange" : "red";
}

static void print_dims(FILE *out, json_t *dims)
{
	json_t *v;
	size_t i;

	fputc('[', out);
	json_array_foreach(dims, i, v)
		fprintf(out, "%s%lld", i ? ", " : "", json_integer_value(v));
	fputc(']', out);
}

/* Ops as nodes in one cluster per group; dependences as edges coloured
 * by their width. */
static int write_dot(const fusion *f, json_t *obj, const char *path, char *why,
		     size_t size)
{
	FILE *out = fopen(path, "w");
	json_t *group, *dep, *v;
	size_t i, j;
	int rc;

	if (!out)
		return snprintf(why, size, "cannot write '%s': %s", path,
				strerror(errno)), -1;
	fprintf(out, "digraph \"%s\" {\n  node [shape=box];\n",
		sched_graph_name(f->graph));
	json_array_foreach(json_object_get(obj, "groups"), i, group) {
		fprintf(out, "  subgraph cluster_%zu {\n    label=\"%s: tile ", i,
			json_string_value(json_object_get(group, "name")));
		print_dims(out, json_object_get(group, "tile"));
		fprintf(out, " (%s)\";\n",
			json_string_value(json_object_get(group, "tile_kind")));
		json_array_foreach(json_object_get(group, "ops"), j, v)
			fprintf(out, "    op%lld [label=\"%lld: %s\"];\n",
				json_integer_value(v), json_integer_value(v),
				tensor_of(f, (int)json_integer_value(v)));
		fprintf(out, "  }\n");
	}
	json_array_foreach(json_object_get(obj, "dependences"), i, dep) {
		const char *width = json_string_value(json_object_get(dep, "width"));

		fprintf(out, "  op%lld -> op%lld [label=\"%s\", color=%s, fontcolor=%s];\n",
			json_integer_value(json_object_get(dep, "producer")),
			json_integer_value(json_object_get(dep, "consumer")), width,
			width_color(width), width_color(width));
	}
	fprintf(out, "}\n");
	rc = ferror(out) ? -1 : 0;
	if (fclose(out) != 0)
		rc = -1;
	if (rc < 0)
		snprintf(why, size, "cannot write '%s': %s", path, strerror(errno));
	return rc;
}

int tunectl_explain_fusion(const sched_graph *graph, json_t *obj,
			   const char *dot_path, char *why, size_t size)
{
	fusion f;
	json_t *deps;
	int rc = -1;

	snprintf(why, size, "out of memory");
	if (fusion_init(&f, graph) == 0 && (deps = explain_dependences(&f))) {
		json_object_set_new(obj, "dependences", deps);
		rc = plan_groups(&f, obj, why, size);
		if (rc == 0 && dot_path)
			rc = write_dot(&f, obj, dot_path, why, size);
	}
	fusion_release(&f);
	return rc;
}

/* ---- text ---- */

static void print_dependence(json_t *dep)
{
	json_t *reason = json_object_get(dep, "reason");

	printf("  op %lld -> op %lld (%s): %s, tile ",
	       json_integer_value(json_object_get(dep, "producer")),
	       json_integer_value(json_object_get(dep, "consumer")),
	       json_string_value(json_object_get(dep, "tensor")),
	       json_string_value(json_object_get(dep, "width")));
	print_dims(stdout, json_object_get(dep, "tile"));
	if (reason)
		printf(": %s", json_string_value(reason));
	printf("\n    %s\n", json_string_value(json_object_get(dep, "relation")));
}

static void print_merge(json_t *step)
{
	json_t *wide = json_object_get(step, "widened_reason");
	json_t *def = json_object_get(step, "default_reason");

	printf("  op %lld -> op %lld (%s): ",
	       json_integer_value(json_object_get(step, "producer")),
	       json_integer_value(json_object_get(step, "consumer")),
	       json_string_value(json_object_get(step, "tensor")));
	if (json_is_true(json_object_get(step, "already"))) {
		printf("already in one group\n");
		return;
	}
	if (json_is_true(json_object_get(step, "fused"))) {
		printf("fused under the %s tile ",
		       json_string_value(json_object_get(step, "tile_kind")));
		print_dims(stdout, json_object_get(step, "tile"));
		if (def)
			printf(" (the default: %s)", json_string_value(def));
		printf("\n");
		return;
	}
	printf("not fused");
	if (json_object_get(step, "default_tile")) {
		printf(": default tile ");
		print_dims(stdout, json_object_get(step, "default_tile"));
	}
	printf(": %s", json_string_value(json_object_get(step, "reason")));
	if (wide) {
		printf("; widened tile ");
		print_dims(stdout, json_object_get(step, "widened_tile"));
		printf(": %s", json_string_value(wide));
	}
	printf("\n");
}

static void print_group(size_t index, json_t *group)
{
	json_t *v, *stage;
	size_t i;

	printf("  group %zu '%s': ops", index,
	       json_string_value(json_object_get(group, "name")));
	json_array_foreach(json_object_get(group, "ops"), i, v)
		printf(" %lld", json_integer_value(v));
	printf(", root%s", json_array_size(json_object_get(group, "roots")) > 1 ? "s" : "");
	json_array_foreach(json_object_get(group, "roots"), i, v) {
		json_t *st;
		size_t j;

		printf("%s %lld", i ? "," : "", json_integer_value(v));
		json_array_foreach(json_object_get(group, "stages"), j, st)
			if (json_equal(json_object_get(st, "op"), v))
				printf(" (%s)", json_string_value(json_object_get(st, "tensor")));
	}
	printf(", tile ");
	print_dims(stdout, json_object_get(group, "tile"));
	printf(" (%s), %lld threads",
	       json_string_value(json_object_get(group, "tile_kind")),
	       json_integer_value(json_object_get(group, "threads")));
	if (json_object_get(group, "error")) {
		printf(": %s\n", json_string_value(json_object_get(group, "error")));
		return;
	}
	printf(", %lld blocks, %lld local bytes\n",
	       json_integer_value(json_object_get(group, "blocks")),
	       json_integer_value(json_object_get(group, "local_bytes")));
	json_array_foreach(json_object_get(group, "stages"), i, stage) {
		json_t *width = json_object_get(stage, "width");

		printf("    op %lld (%s): store %s, width %s, %s, extent ",
		       json_integer_value(json_object_get(stage, "op")),
		       json_string_value(json_object_get(stage, "tensor")),
		       json_string_value(json_object_get(stage, "store")),
		       json_is_string(width) ? json_string_value(width) : "-",
		       json_is_true(json_object_get(stage, "barrier")) ? "barrier" :
		       "no barrier");
		print_dims(stdout, json_object_get(stage, "extent"));
		printf("\n");
	}
}

void tunectl_print_fusion(json_t *obj)
{
	json_t *item;
	size_t i;

	printf("dependences (each pair fused alone: the consumer's default tile, "
	       "%d threads a block)\n", PAIR_THREADS);
	if (!json_array_size(json_object_get(obj, "dependences")))
		printf("  none\n");
	json_array_foreach(json_object_get(obj, "dependences"), i, item)
		print_dependence(item);
	printf("fusion groups (a producer's group joins its consumer's where legal)\n");
	json_array_foreach(json_object_get(obj, "merges"), i, item)
		print_merge(item);
	json_array_foreach(json_object_get(obj, "groups"), i, item)
		print_group(i, item);
	printf("plan\n{\"kernels\": [\n");
	json_array_foreach(json_object_get(json_object_get(obj, "plan"), "kernels"),
			   i, item) {
		char *text = json_dumps(item, JSON_COMPACT | JSON_PRESERVE_ORDER);

		printf("  %s%s\n", text ? text : "null",
		       i + 1 < json_array_size(json_object_get(json_object_get(obj, "plan"),
							       "kernels")) ? "," : "");
		free(text);
	}
	printf("]}\n");
}
