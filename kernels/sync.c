/*
 * sync.c: a plan's "sync" entries (docs/design/sync.md): read, written, and
 * proved before anything runs. A kernel may overlap the kernel launched
 * just before it when it reads that kernel's tiled output; the policy
 * must be one the tile dependence offers (scheduler/sync.c), and the
 * proof that it can neither hang nor race must hold.
 */
#include <stdlib.h>
#include <string.h>

#include "kgen_int.h"

int kgen_kernel_tiling(const sched_graph *graph, const kgen_kernel *kernel,
		       sched_tiling *out, kgen_error *err)
{
	const sched_op *op = kgen_kernel_op(graph, kernel);
	const sched_tensor *t = &graph->tensors[op->target];
	sched_contraction c;
	sched_group *group;

	*out = (sched_tiling){.tensor = op->target, .rank = t->rank};
	if (kernel->schedule.library)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s' is a library step: it has "
				 "no tiles to wait on or post", kernel->name);
	if (kernel->schedule.mma.bm && kernel->nops > 1)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': a fused kernel on tensor "
				 "cores has no sync yet", kernel->name);
	if (kernel->schedule.mma.split_k > 1)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': its K is cut in %d parts "
				 "(split_k), whose tiles finish in no order", kernel->name,
				 kernel->schedule.mma.split_k);
	if (kernel->schedule.parts > 1)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': its reductions are cut in "
				 "%d parts, whose tiles finish in no order", kernel->name,
				 kernel->schedule.parts);
	if (kernel->schedule.mma.raster > 1)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': its tiles run in groups "
				 "of %d rows (raster), not row by row", kernel->name,
				 kernel->schedule.mma.raster);
	if (kernel->schedule.mma.bm) {
		if (!sched_op_contraction(graph, op->index, &c) || c.c0 || c.c_n != 1 ||
		    c.c_m != c.n)
			return kgen_fail(err, KGEN_EPLAN, "kernel '%s': its product's "
					 "output is not an M x N matrix", kernel->name);
		*out = (sched_tiling){op->target, 2, {c.m, c.n},
				      {kernel->schedule.mma.bm, kernel->schedule.mma.bn}};
		return KGEN_OK;
	}
	for (int d = 0; d < t->rank; d++) {
		out->view[d] = t->shape[d];
		out->tile[d] = kernel->schedule.tile[d];
	}
	if (kernel->nops == 1)
		return KGEN_OK;
	int rc = kgen_kernel_group(graph, kernel, true, &group, err);

	if (rc < 0)
		return rc;
	if (group->nbranches != 1)
		rc = kgen_fail(err, KGEN_EPLAN, "kernel '%s': a group of %d branches "
			       "has no single grid of tiles", kernel->name,
			       group->nbranches);
	else
		memcpy(out->tile, group->branches[0].tile, sizeof(out->tile));
	sched_group_free(group);
	return rc;
}

/* The tensor of producer "p" that "c" reads outside p's tiles, or -1. */
static int read_untiled(const sched_graph *graph, const kgen_kernel *p,
			int tiled, const kgen_kernel *c)
{
	for (int i = 0; i < p->nops; i++) {
		int t = graph->ops[p->ops[i]].target;

		for (int j = 0; j < c->nops && t != tiled; j++)
			if (sched_op_reads_tensor(&graph->ops[c->ops[j]], t))
				return t;
	}
	return -1;
}

int kgen_sync_analyse(const sched_graph *graph, const kgen_plan *plan, int k,
		      sched_sync **out, kgen_error *err)
{
	return kgen_sync_analyse_for(graph, plan, k, -1, out, err);
}

int kgen_sync_analyse_for(const sched_graph *graph, const kgen_plan *plan, int k, int want,
			  sched_sync **out, kgen_error *err)
{
	const kgen_kernel *producer = &plan->kernels[k - 1], *consumer = &plan->kernels[k];
	sched_sync_pair pair = {.nconsumer_ops = consumer->nops, .consumer_ops = consumer->ops};
	sched_error why = {0};
	int rc, untiled;

	*out = NULL;
	if ((rc = kgen_kernel_tiling(graph, producer, &pair.producer, err)) < 0 ||
	    (rc = kgen_kernel_tiling(graph, consumer, &pair.consumer, err)) < 0)
		return rc;
	untiled = read_untiled(graph, producer, pair.producer.tensor, consumer);
	if (untiled >= 0)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s' reads '%s', which kernel "
				 "'%s' writes outside its tiles", consumer->name,
				 graph->tensors[untiled].name, producer->name);
	if (sched_sync_new_for(graph, &pair, want, out, &why) < 0)
		return kgen_fail(err, why.code == SCHED_ENOMEM ? KGEN_ENOMEM : KGEN_EPLAN,
				 "kernel '%s' after '%s': %s", consumer->name,
				 producer->name, why.message);
	return KGEN_OK;
}

bool kgen_sync_co_resident(unsigned blocks_p, int per_sm_p, unsigned blocks_c,
			   int per_sm_c, int sms)
{
	if (per_sm_p < 1 || per_sm_c < 1)
		return false;
	return (blocks_p + per_sm_p - 1) / per_sm_p +
	       (blocks_c + per_sm_c - 1) / per_sm_c <= (unsigned)sms;
}

/* ---- reading ---- */

static int find_kernel(const kgen_plan *plan, const char *name)
{
	for (int k = 0; k < plan->nkernels; k++)
		if (!strcmp(plan->kernels[k].name, name))
			return k;
	return -1;
}

/* "after" names the kernel launched just before: any other would either
 * close a cycle of waits (itself, or one launched later) or need more
 * than two streams. */
static int read_after(const kgen_plan *plan, int k, json_t *after, kgen_error *err)
{
	const char *me = plan->kernels[k].name;
	int j = json_is_string(after) ? find_kernel(plan, json_string_value(after)) : -2;

	if (j == -2)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'sync' needs 'after', "
				 "the name of the kernel it waits on", me);
	if (j < 0)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'sync' waits on '%s', "
				 "which is no kernel of the plan", me, json_string_value(after));
	if (j >= k)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s' would wait on '%s', %s: "
				 "a cycle of waits that never ends", me, plan->kernels[j].name,
				 j == k ? "itself" : "launched after it");
	if (j != k - 1)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s' may wait only on the "
				 "kernel launched just before it ('%s'), not '%s'", me,
				 plan->kernels[k - 1].name, plan->kernels[j].name);
	return KGEN_OK;
}

static int read_flag(json_t *obj, const char *key, bool *flag, const char *me,
		     kgen_error *err)
{
	json_t *v = json_object_get(obj, key);

	if (v && !json_is_boolean(v))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'sync' '%s' must be "
				 "true or false", me, key);
	if (v)
		*flag = json_is_true(v);
	return KGEN_OK;
}

static int read_fields(const kgen_plan *plan, int k, json_t *obj, kgen_sync *sync,
		       kgen_error *err)
{
	static const char *const keys[] = {"after", "policy", "wait_kernel", "ordered",
					   "early_loads", NULL};
	const char *me = plan->kernels[k].name, *key = sched_unknown_key(obj, keys);
	json_t *policy = json_object_get(obj, "policy");
	int rc;

	if (key)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'sync' has an unknown "
				 "key '%s'", me, key);
	if ((rc = read_after(plan, k, json_object_get(obj, "after"), err)) < 0)
		return rc;
	if (!json_is_string(policy) ||
	    sched_sync_kind_from_name(json_string_value(policy)) < 0)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'sync' 'policy' must be "
				 "tile, row, strided or conv2d", me);
	*sync = (kgen_sync){true, sched_sync_kind_from_name(json_string_value(policy)),
			    true, true, false};
	if ((rc = read_flag(obj, "wait_kernel", &sync->wait_kernel, me, err)) < 0 ||
	    (rc = read_flag(obj, "ordered", &sync->ordered, me, err)) < 0)
		return rc;
	return read_flag(obj, "early_loads", &sync->early_loads, me, err);
}

/* The policies "sync" offers, as "tile, row". */
static void offered(const sched_sync *sync, char *text, size_t size)
{
	size_t used = 0;

	text[0] = 0;
	for (int i = 0; i < sync->npolicies && used < size; i++)
		used += snprintf(text + used, size - used, "%s%s", i ? ", " : "",
				 sched_sync_kind_name(sync->policies[i].kind));
}

/* Early loads prefetch the factor the producer does not write: the
 * consumer must be a tensor-core product that reads the producer's
 * output through one factor only. */
static int check_early_loads(const sched_graph *graph, const kgen_kernel *kernel,
			     const sched_sync *sync, kgen_error *err)
{
	sched_contraction c;

	if (!kernel->sync.early_loads)
		return KGEN_OK;
	if (!kernel->schedule.mma.bm ||
	    !sched_op_contraction(graph, kgen_kernel_op(graph, kernel)->index, &c))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'early_loads' needs a "
				 "tensor-core product ('mma')", kernel->name);
	if (c.a == sync->producer.tensor && c.b == sync->producer.tensor)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': both factors are the "
				 "producer's output; none can load early", kernel->name);
	return KGEN_OK;
}

int kgen_sync_prove(const sched_graph *graph, const kgen_plan *plan, int k,
		    const sched_sync *sync, kgen_error *err)
{
	const kgen_kernel *kernel = &plan->kernels[k];
	const sched_sync_policy *policy = sched_sync_policy_of(sync, kernel->sync.policy);
	sched_error why = {0};
	char list[64];
	int rc;

	if (!policy) {
		offered(sync, list, sizeof(list));
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': policy '%s' does not fit "
				 "its tile dependence on '%s' (it offers %s)", kernel->name,
				 sched_sync_kind_name(kernel->sync.policy),
				 plan->kernels[k - 1].name, list);
	}
	if ((rc = check_early_loads(graph, kernel, sync, err)) < 0)
		return rc;
	if (sched_sync_check(sync, policy, &why) < 0)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': %s", kernel->name, why.message);
	return KGEN_OK;
}

int kgen_sync_check_kernel(const sched_graph *graph, const kgen_plan *plan, int k,
			   kgen_error *err)
{
	sched_sync *sync;
	int rc;

	if (!plan->kernels[k].sync.on)
		return KGEN_OK;
	if ((rc = kgen_sync_analyse(graph, plan, k, &sync, err)) < 0)
		return rc;
	rc = kgen_sync_prove(graph, plan, k, sync, err);
	sched_sync_free(sync);
	return rc;
}

int kgen_sync_from_json(const sched_graph *graph, kgen_plan *plan, int k,
			json_t *obj, kgen_error *err)
{
	int rc;

	if (!obj)
		return KGEN_OK;
	if (!json_is_object(obj))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'sync' must be an object",
				 plan->kernels[k].name);
	if ((rc = read_fields(plan, k, obj, &plan->kernels[k].sync, err)) < 0)
		return rc;
	return kgen_sync_check_kernel(graph, plan, k, err);
}

json_t *kgen_sync_to_json(const kgen_plan *plan, int k)
{
	const kgen_sync *s = &plan->kernels[k].sync;
	json_t *obj;

	if (!s->on)
		return NULL;
	obj = json_pack("{s:s, s:s}", "after", plan->kernels[k - 1].name, "policy",
			sched_sync_kind_name(s->policy));
	if (!s->wait_kernel)
		json_object_set_new(obj, "wait_kernel", json_false());
	if (!s->ordered)
		json_object_set_new(obj, "ordered", json_false());
	if (s->early_loads)
		json_object_set_new(obj, "early_loads", json_true());
	return obj;
}

bool kgen_sync_wraps(const kgen_plan *plan, int k)
{
	return plan->kernels[k].sync.on ||
	       (k + 1 < plan->nkernels && plan->kernels[k + 1].sync.on);
}
