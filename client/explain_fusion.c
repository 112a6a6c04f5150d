/*
 * explain_fusion.c: what tunectl explain shows of the fusion planner
 * (scheduler/fusion.c, tuner/fuse.c): every dependence between two ops
 * and its width, the merges the planner tries and the fused groups it
 * makes, the plan of those groups, and all of it as a Graphviz file.
 *
 * Dependences. For each producer -> consumer pair (the consumer reads the
 * producer's target), the pair is analysed as one group with the consumer
 * as its root, the consumer's default tile (kgen_plan_default's) and 256
 * threads a block: its width is the consumer stage's (thread or block),
 * or global when the pair cannot be fused, with the reason.
 *
 * Groups. They are the planner's own (tuner_fusion_edges): the plan a
 * search's genes decode to with every edge gene on and every sibling
 * gene off, on the default schedules, for the cuda backend, without a
 * cost model; each merge it tries is recorded as it tells it.
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
#include "tuner.h"

#define PAIR_THREADS 256

typedef struct fusion {
	const sched_graph *graph;
	isl_ctx *ctx;
	int n;                /* ops */
	const int *order;     /* dependence order */
	int *target;          /* op -> the tensor it writes */
	bool *reads;          /* reads[c * n + p]: c reads p's target */
	kgen_plan *defaults;  /* one kernel per op, the default schedules */
	int *default_of;      /* op -> its kernel in defaults */
	json_t *merges;       /* the merges the planner tried, as it told them */
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
	free(f->target);
	free(f->reads);
	free(f->default_of);
	json_decref(f->merges);
	isl_ctx_free(f->ctx);
}

static int fusion_init(fusion *f, const sched_graph *graph)
{
	int n = sched_graph_op_count(graph);

	*f = (fusion){.graph = graph, .n = n, .order = sched_graph_order(graph)};
	f->ctx = isl_ctx_alloc();
	f->target = calloc(n, sizeof(int));
	f->reads = calloc((size_t)n * n, sizeof(bool));
	f->default_of = calloc(n, sizeof(int));
	f->defaults = kgen_plan_default(graph);
	f->merges = json_array();
	if (!f->ctx || !f->target || !f->reads || !f->default_of || !f->defaults ||
	    !f->merges)
		return -1;
	isl_options_set_on_error(f->ctx, ISL_ON_ERROR_CONTINUE);
	for (int i = 0; i < n; i++)
		if ((f->target[i] = op_target(f, i)) < 0)
			return -1;
	for (int k = 0; k < f->defaults->nkernels; k++)
		f->default_of[f->defaults->kernels[k].ops[0]] = k;
	for (int c = 0; c < n; c++)
		for (int p = 0; p < n; p++)
			f->reads[c * n + p] = p != c && op_reads(f, c, f->target[p]);
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

/* ---- the planner's merges and groups ---- */

/* The root of kernel k, whose output its schedule cuts: the first of its
 * ops that no other member reads (kgen_kernel_op's). */
static int kernel_root(const fusion *f, const kgen_kernel *k)
{
	for (int i = 0; i < k->nops; i++) {
		bool read = false;

		for (int j = 0; j < k->nops; j++)
			read |= f->reads[k->ops[j] * f->n + k->ops[i]];
		if (!read)
			return k->ops[i];
	}
	return k->ops[0];
}

static json_t *tile_json(const fusion *f, const kgen_kernel *k)
{
	return dims_json(k->schedule.tile, rank_of(f, kernel_root(f, k)));
}

/* "default" when kernel k runs on its root's default tile, "widened"
 * when on that tile widened to whole rows, "library" for a library step. */
static const char *tile_kind(const fusion *f, const kgen_kernel *k)
{
	if (k->schedule.library)
		return "library";
	return memcmp(k->schedule.tile, default_tile(f, kernel_root(f, k)),
		      sizeof(k->schedule.tile)) ? "widened" : "default";
}

/* Why the planner did not merge, for the outcomes that carry no reason
 * of the analysis. */
static json_t *outcome_reason(enum tuner_merge_outcome outcome)
{
	switch (outcome) {
	case TUNER_MERGE_TOO_MANY:
		return json_sprintf("a kernel has at most %d ops", KGEN_MAX_OPS);
	case TUNER_MERGE_CYCLIC:
		return json_string("an op outside the group would read it and feed "
				   "it: the kernels could not be ordered");
	case TUNER_MERGE_SLOWER:
		return json_string("the cost model says the fused kernel is slower "
				   "than its parts");
	default:
		return NULL;
	}
}

/* The planner's reason "why" without the name of the kernel it tried
 * ("kernel 'fused': "), which is no kernel of the plan. */
static json_t *reason_json(const char *why)
{
	const char *end = why && !strncmp(why, "kernel '", 8) ? strstr(why, "': ") : NULL;

	return json_string(end ? end + 3 : why ? why : "");
}

/* One merge the planner tried (tuner_merge_fn), into f->merges. */
static void record_merge(const tuner_merge *m, void *user)
{
	fusion *f = user;
	bool fused = m->outcome == TUNER_MERGE_FUSED || m->outcome == TUNER_MERGE_LIBRARY;
	json_t *step, *reason;

	if (m->outcome == TUNER_MERGE_TOO_BIG) { /* no ops: a note */
		json_array_append_new(f->merges,
				      json_pack("{s:i, s:b, s:s}", "pass", m->pass,
						"fused", 0, "reason", m->why));
		return;
	}
	step = json_pack("{s:i, s:i, s:i, s:s, s:b}", "pass", m->pass, "producer", m->a,
			 "consumer", m->b, "tensor", tensor_of(f, m->a), "fused",
			 fused);
	reason = outcome_reason(m->outcome);

	if (m->outcome == TUNER_MERGE_ALREADY)
		json_object_set_new(step, "already", json_true());
	if (fused) {
		json_object_set_new(step, "tile", tile_json(f, m->kernel));
		json_object_set_new(step, "tile_kind", json_string(tile_kind(f, m->kernel)));
	}
	if (fused && m->why)
		json_object_set_new(step, "default_reason", reason_json(m->why));
	if (m->outcome == TUNER_MERGE_REFUSED) {
		json_object_set_new(step, "reason", reason_json(m->why));
		json_object_set_new(step, "default_tile", tile_json(f, m->kernel));
	}
	if (m->outcome == TUNER_MERGE_REFUSED && m->tried_widened) {
		json_object_set_new(step, "widened_tile", tile_json(f, m->tried_widened));
		json_object_set_new(step, "widened_reason", reason_json(m->why_widened));
	}
	if (reason)
		json_object_set_new(step, "reason", reason);
	json_array_append_new(f->merges, step);
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
	int threads = 1;
	kgen_error err = {0};
	sched_group *group;
	json_t *obj;

	for (int i = 0; i < kernel->nops; i++)
		json_array_append_new(ops, json_integer(kernel->ops[i]));
	for (int d = 0; d < rank_of(f, kernel_root(f, kernel)); d++)
		threads *= kernel->schedule.threads[d];
	obj = json_pack("{s:s, s:o, s:o, s:s, s:i}", "name", kernel->name,
			"ops", ops, "tile", tile_json(f, kernel),
			"tile_kind", tile_kind(f, kernel), "threads", threads);
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

/* The planner's merges, then its groups and their plan. */
static int plan_groups(fusion *f, json_t *obj, char *why, size_t size)
{
	kgen_plan *plan = tuner_fusion_edges(f->graph, true, record_merge, f);
	json_t *groups;

	if (!plan)
		return snprintf(why, size, "out of memory"), -1;
	json_object_set(obj, "merges", f->merges);
	groups = json_array();
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

/* Whether merge "i" tells nothing new: a later pass tries every edge
 * again, and the text shows only what changed, not pairs already in one
 * group nor what the last try of the same pair said. */
static bool repeats(json_t *merges, size_t i)
{
	json_t *step = json_object_get(json_array_get(merges, i), "producer");
	json_t *to = json_object_get(json_array_get(merges, i), "consumer");
	json_t *now = json_deep_copy(json_array_get(merges, i)), *before = NULL;
	bool same;

	if (json_integer_value(json_object_get(now, "pass")) > 1 &&
	    json_is_true(json_object_get(now, "already"))) {
		json_decref(now);
		return true;
	}
	for (size_t j = i; j-- > 0 && !before;)
		if (json_equal(json_object_get(json_array_get(merges, j), "producer"), step) &&
		    json_equal(json_object_get(json_array_get(merges, j), "consumer"), to))
			before = json_deep_copy(json_array_get(merges, j));
	json_object_del(now, "pass");
	json_object_del(before, "pass");
	same = before && json_equal(now, before);
	json_decref(now);
	json_decref(before);
	return same;
}

static void print_merge(json_t *step)
{
	json_t *wide = json_object_get(step, "widened_reason");
	json_t *def = json_object_get(step, "default_reason");
	long long pass = json_integer_value(json_object_get(step, "pass"));

	printf("  ");
	if (!json_object_get(step, "producer")) { /* a note on no merge */
		printf("not fused: %s\n",
		       json_string_value(json_object_get(step, "reason")));
		return;
	}
	if (pass > 1)
		printf("pass %lld: ", pass);
	printf("op %lld -> op %lld (%s): ",
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
	printf("fusion groups (the planner's: each producer's group joins its "
	       "consumer's where legal, producers nearer the inputs first, in "
	       "passes until none merges; a later pass shows what changed)\n");
	json_array_foreach(json_object_get(obj, "merges"), i, item)
		if (!repeats(json_object_get(obj, "merges"), i))
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
