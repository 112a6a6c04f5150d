/*
 * plan.c: plans as data: reading, checking, writing, and the default plan.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kgen_int.h"

#define MAX_KERNELS 4096
#define PARALLEL_MIN_POINTS (1 << 16)
#define MAX_PARTS 1024
#define MAX_PARTS_BYTES (256 << 20)

static const char *const split_names[] = {
	[KGEN_SPLIT_THREAD] = "thread", [KGEN_SPLIT_WARP] = "warp",
	[KGEN_SPLIT_BLOCK] = "block",
};

void kgen_plan_free(kgen_plan *plan)
{
	if (!plan)
		return;
	free(plan->kernels);
	free(plan);
}

static kgen_plan *plan_new(int nkernels)
{
	kgen_plan *plan = calloc(1, sizeof(*plan));

	if (plan && !(plan->kernels = calloc(nkernels, sizeof(kgen_kernel)))) {
		free(plan);
		return NULL;
	}
	if (plan)
		plan->nkernels = nkernels;
	return plan;
}

/* Reads an optional integer in [lo, hi]; absent leaves *value alone. */
static int read_int(json_t *obj, const char *key, int64_t lo, int64_t hi,
		    int64_t *value, const char *kernel, kgen_error *err)
{
	json_t *v = json_object_get(obj, key);

	if (!v)
		return KGEN_OK;
	if (!json_is_integer(v) || json_integer_value(v) < lo ||
	    json_integer_value(v) > hi)
		return kgen_fail(err, KGEN_EPLAN,
				 "kernel '%s': '%s' must be an integer from %lld to %lld",
				 kernel, key, (long long)lo, (long long)hi);
	*value = json_integer_value(v);
	return KGEN_OK;
}

/* Reads a per-dim list "key" of "rank" integers in [1, limit[d]]. */
static int read_dims(json_t *obj, const char *key, int rank, const int64_t *limit,
		     int64_t *out, const char *kernel, kgen_error *err)
{
	json_t *list = json_object_get(obj, key), *v;
	size_t d;

	if (!list)
		return KGEN_OK;
	if (!json_is_array(list) || json_array_size(list) != (size_t)rank)
		return kgen_fail(err, KGEN_EPLAN,
				 "kernel '%s': '%s' must list %d integers, one per "
				 "output dim", kernel, key, rank);
	json_array_foreach(list, d, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > limit[d])
			return kgen_fail(err, KGEN_EPLAN,
					 "kernel '%s': %s %lld of dim %zu is outside "
					 "1..%lld", kernel, key,
					 (long long)json_integer_value(v), d,
					 (long long)limit[d]);
		out[d] = json_integer_value(v);
	}
	return KGEN_OK;
}

static int read_split(const sched_op *op, json_t *sched, kgen_kernel *kernel,
		      kgen_error *err)
{
	const char *s = json_string_value(json_object_get(sched, "split"));

	if (!json_object_get(sched, "split"))
		return KGEN_OK;
	for (int i = 0; s && i <= KGEN_SPLIT_BLOCK; i++)
		if (!strcmp(s, split_names[i]))
			kernel->schedule.split = i;
	if (!s || strcmp(s, split_names[kernel->schedule.split]))
		return kgen_fail(err, KGEN_EPLAN,
				 "kernel '%s': 'split' must be \"thread\", \"warp\" "
				 "or \"block\"", kernel->name);
	if (kernel->schedule.split != KGEN_SPLIT_THREAD &&
	    op->reducer == SCHED_RED_NONE)
		return kgen_fail(err, KGEN_EPLAN,
				 "kernel '%s': split \"%s\" needs a reduction, and "
				 "op %d has none", kernel->name, s, op->index);
	return KGEN_OK;
}

static int check_threads(const sched_tensor *t, kgen_kernel *kernel,
			 kgen_error *err)
{
	int64_t total = 1;

	for (int d = 0; d < t->rank; d++)
		total *= kernel->schedule.threads[d];
	if (total > KGEN_MAX_THREADS)
		return kgen_fail(err, KGEN_EPLAN,
				 "kernel '%s': %lld threads per block, more than %d",
				 kernel->name, (long long)total, KGEN_MAX_THREADS);
	if (kernel->schedule.split == KGEN_SPLIT_WARP && total % 32)
		return kgen_fail(err, KGEN_EPLAN,
				 "kernel '%s': split \"warp\" needs whole warps, and "
				 "%lld threads is not a multiple of 32", kernel->name,
				 (long long)total);
	return KGEN_OK;
}

static int read_shared(json_t *sched, kgen_kernel *kernel, kgen_error *err)
{
	json_t *shared = json_object_get(sched, "shared");

	if (!shared || (json_is_array(shared) && json_array_size(shared) == 0))
		return KGEN_OK;
	return kgen_fail(err, KGEN_EPLAN,
			 "kernel '%s': staging inputs in shared memory is not "
			 "supported yet; give \"shared\": []", kernel->name);
}

/* Checks "micro" of a kernel of contraction "c" (docs/kernels.md). */
static int check_micro(const sched_contraction *c, const kgen_kernel *kernel,
		       kgen_error *err)
{
	const kgen_micro *m = &kernel->schedule.micro;

	if (m->nr % KGEN_MICRO_NR_STEP)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': micro 'nr' must be a "
				 "multiple of %d", kernel->name, KGEN_MICRO_NR_STEP);
	if (m->mc % m->mr || m->mc > kgen_round_up(c->m, m->mr))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': micro 'mc' must be a "
				 "multiple of mr (%d) up to %lld", kernel->name, m->mr,
				 (long long)kgen_round_up(c->m, m->mr));
	if (m->nc % m->nr || m->nc > kgen_round_up(c->n, m->nr))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': micro 'nc' must be a "
				 "multiple of nr (%d) up to %lld", kernel->name, m->nr,
				 (long long)kgen_round_up(c->n, m->nr));
	if (m->kc > c->k)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': micro 'kc' must be "
				 "from 1 to K (%lld)", kernel->name, (long long)c->k);
	return KGEN_OK;
}


/* What kind of kernel a blocking is for: one matrix product
 * (kgen_kernel_products: gathered ones too), one product for tensor
 * cores (kgen_mma_product: batches and implicit GEMMs too), products of
 * one shape side by side, or a fused kernel (checked apart). */
enum blocking_of { BLOCKING_ONE_PRODUCT, BLOCKING_ONE_BATCH, BLOCKING_SIDE_BY_SIDE,
		   BLOCKING_FUSED };

/* One integer field of a blocking: its key, its range, where it goes in
 * the blocking (a kgen_micro or a kgen_mma), and whether it may be left
 * out. */
typedef struct blocking_field {
	const char *key;
	int64_t lowest, highest;
	size_t offset;
	bool optional;
} blocking_field;

/* A blocking of the schedule: its key, its fields (the required ones
 * first, then the optional; a NULL key ends them), the struct they fill
 * and the kind of kernel it is for. */
typedef struct blocking {
	const char *name;
	const blocking_field *fields;
	void *out;
	enum blocking_of of;
} blocking;

/* "mr, nr, kc, mc, nc and pack, and maybe raster, ...": the keys of
 * "fields", as an error lists them. */
static void blocking_keys(const blocking_field *fields, char *out, size_t size)
{
	int required = 0, optional = 0;
	size_t len = 0;

	while (fields[required].key && !fields[required].optional)
		required++;
	out[0] = '\0';
	for (int f = 0; fields[f].key && len < size; f++) {
		const char *sep = f == 0 ? "" : f < required - 1 ? ", " :
				  f == required - 1 ? " and " :
				  optional++ ? ", " : ", and maybe ";

		len += snprintf(out + len, size - len, "%s%s", sep, fields[f].key);
	}
}

/* Whether blocking "b" may go on kernel "kernel": the contraction it
 * blocks (the root's, side by side) into "c". */
static bool blocking_fits(const sched_graph *graph, const blocking *b,
			  const kgen_kernel *kernel, sched_contraction *c)
{
	if (b->of == BLOCKING_FUSED)
		return true;
	if (kernel->nops > 1 && b->of != BLOCKING_SIDE_BY_SIDE)
		return false;
	return b->of == BLOCKING_ONE_BATCH ? kgen_mma_product(graph, kernel->ops[0], c)
					   : kgen_kernel_products(graph, kernel, c);
}

/* The integer fields of blocking "b" of the schedule, each in its range,
 * into b->out; the contraction (the root's, side by side) goes to "c".
 * 1 when absent. */
static int read_blocking(const sched_graph *graph, json_t *sched, const blocking *b,
			 const kgen_kernel *kernel, sched_contraction *c, kgen_error *err)
{
	json_t *obj = json_object_get(sched, b->name);
	size_t expected = 0;
	char keys[128];
	int rc;

	if (!obj)
		return 1;
	if (!blocking_fits(graph, b, kernel, c))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': '%s' is for a kernel "
				 "of %s", kernel->name, b->name,
				 b->of == BLOCKING_SIDE_BY_SIDE ?
				 "matrix products of one shape, none reading another" :
				 "one op that is a matrix product, or a fused kernel");
	for (const blocking_field *f = b->fields; f->key; f++)
		expected += !f->optional || json_object_get(obj, f->key);
	if (!json_is_object(obj) || json_object_size(obj) != expected) {
		blocking_keys(b->fields, keys, sizeof(keys));
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': '%s' must be an object "
				 "of %s", kernel->name, b->name, keys);
	}
	for (const blocking_field *f = b->fields; f->key; f++) {
		int64_t v = -1;

		if (f->optional && !json_object_get(obj, f->key))
			continue;
		if (!json_object_get(obj, f->key))
			return kgen_fail(err, KGEN_EPLAN, "kernel '%s': '%s' has no '%s'",
					 kernel->name, b->name, f->key);
		if ((rc = read_int(obj, f->key, f->lowest, f->highest, &v, kernel->name,
				   err)) < 0)
			return rc;
		*(int *)((char *)b->out + f->offset) = (int)v;
	}
	return KGEN_OK;
}

/* Reads "micro": {"mr", "nr", "kc", "mc", "nc", "pack"}. */
static int read_micro(const sched_graph *graph, json_t *sched, kgen_kernel *kernel,
		      kgen_error *err)
{
	static const blocking_field fields[] = {
		{"mr", 1, KGEN_MICRO_MAX_MR, offsetof(kgen_micro, mr), false},
		{"nr", 1, KGEN_MICRO_MAX_NR, offsetof(kgen_micro, nr), false},
		{"kc", 1, INT32_MAX, offsetof(kgen_micro, kc), false},
		{"mc", 1, INT32_MAX, offsetof(kgen_micro, mc), false},
		{"nc", 1, INT32_MAX, offsetof(kgen_micro, nc), false},
		{"pack", 0, 1, offsetof(kgen_micro, pack), false},
		{NULL},
	};
	const blocking micro = {"micro", fields, &kernel->schedule.micro,
				BLOCKING_SIDE_BY_SIDE};
	sched_contraction c;
	int rc = read_blocking(graph, sched, &micro, kernel, &c, err);

	if (rc)
		return rc < 0 ? rc : KGEN_OK;
	return check_micro(&c, kernel, err);
}


/* Checks "mma" of a kernel of contraction "c", or of a fused kernel
 * (c NULL; kgen_fused_mma_unfit) (docs/kernels.md): operands that fit
 * (kgen_mma_operands_unfit); warps that divide the tile; the stages
 * within static shared memory. */
static int check_mma(const sched_graph *graph, const sched_contraction *c,
		     const kgen_kernel *kernel, kgen_error *err)
{
	const kgen_mma *m = &kernel->schedule.mma;
	const char *why = c ? kgen_mma_operands_unfit(graph, c) : NULL;
	int shared = kgen_mma_shared_bytes(m, kgen_mma_factor_bytes(graph, kernel));

	if (why)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'mma' needs %s",
				 kernel->name, why);
	if (m->bm % m->wm || m->bn % m->wn || m->wm % 16 || m->wn % 8 || m->bk % 16 ||
	    m->bn % 8)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'mma' needs wm a "
				 "multiple of 16 dividing bm, wn a multiple of 8 dividing bn, "
				 "bk a multiple of 16", kernel->name);
	if (kgen_mma_threads(m) > KGEN_MAX_THREADS || shared > KGEN_LOCAL_BYTES)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'mma' takes %d threads "
				 "and %d bytes of shared memory, more than %d or %d",
				 kernel->name, kgen_mma_threads(m), shared, KGEN_MAX_THREADS,
				 KGEN_LOCAL_BYTES);
	if (!c && (why = kgen_fused_mma_unfit(graph, kernel)))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'mma' in a fused kernel "
				 "needs %s", kernel->name, why);
	if (!c && m->raster > 1)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'raster' is for a kernel "
				 "of one matrix product (a fused kernel's blocks follow its "
				 "group)", kernel->name);
	if (!c && m->split_k > 1)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'split_k' is for a kernel "
				 "of one matrix product (a fused kernel's epilogue needs whole "
				 "sums)", kernel->name);
	return KGEN_OK;
}

/* Reads "mma": {"bm", "bn", "bk", "wm", "wn", "stages"} and maybe
 * "raster", "rotated" (0 or 1) and "split_k". */
static int read_mma(const sched_graph *graph, json_t *sched, kgen_kernel *kernel,
		    kgen_error *err)
{
	static const blocking_field fields[] = {
		{"bm", 16, 256, offsetof(kgen_mma, bm), false},
		{"bn", 8, 256, offsetof(kgen_mma, bn), false},
		{"bk", 16, 128, offsetof(kgen_mma, bk), false},
		{"wm", 16, 256, offsetof(kgen_mma, wm), false},
		{"wn", 8, 256, offsetof(kgen_mma, wn), false},
		{"stages", 2, 8, offsetof(kgen_mma, stages), false},
		{"raster", 1, 64, offsetof(kgen_mma, raster), true},
		{"rotated", 0, 1, offsetof(kgen_mma, rotated), true},
		{"split_k", 1, 16, offsetof(kgen_mma, split_k), true},
		{NULL},
	};
	kgen_mma *m = &kernel->schedule.mma;
	bool fused = kernel->nops > 1;
	const blocking mma = {"mma", fields, m, fused ? BLOCKING_FUSED : BLOCKING_ONE_BATCH};
	sched_contraction c;
	int rc = read_blocking(graph, sched, &mma, kernel, &c, err);

	if (rc)
		return rc < 0 ? rc : KGEN_OK;
	m->raster = m->raster == 1 ? 0 : m->raster; /* row by row either way */
	m->split_k = m->split_k == 1 ? 0 : m->split_k; /* not cut either way */
	return check_mma(graph, fused ? NULL : &c, kernel, err);
}

/* A reducing kernel keeps a tile of accumulators on the cpu's stack. */
static int check_cpu_tile(const sched_op *op, const sched_tensor *t,
			  const kgen_kernel *kernel, kgen_error *err)
{
	int64_t total = 1;

	for (int d = 0; d < t->rank; d++)
		total *= kernel->schedule.tile[d];
	if (op->reducer != SCHED_RED_NONE && total > KGEN_MAX_CPU_TILE)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': a tile of %lld "
				 "elements, more than %d", kernel->name,
				 (long long)total, KGEN_MAX_CPU_TILE);
	return KGEN_OK;
}

/* Up to 32 threads along the last dim and 8 along the one before. */
static void default_threads(const sched_tensor *t, kgen_schedule *s)
{
	for (int d = 0; d < t->rank; d++) {
		int64_t want = d == t->rank - 1 ? 32 : d == t->rank - 2 ? 8 : 1;

		s->threads[d] = (int)(s->tile[d] < want ? s->tile[d] : want);
	}
}

static int64_t domain_points(const sched_op *op)
{
	int64_t n = 1;

	for (int v = 0; v < op->nvars; v++)
		n *= op->vars[v].hi - op->vars[v].lo;
	return n;
}

/* Tiles of 8 x 32 on the last two output dims, one block thread or one
 * simd lane per element; the outer two tile loops in parallel unless the
 * op is too small to pay for waking threads. */
static void default_schedule(const sched_op *op, const sched_tensor *t,
			     kgen_schedule *s)
{
	bool worth_threads = domain_points(op) >= PARALLEL_MIN_POINTS;

	*s = (kgen_schedule){.parallel = !worth_threads ? 0 : t->rank < 2 ? t->rank : 2,
			     .unroll = 4, .vector = 1, .split = KGEN_SPLIT_THREAD,
			     .parts = 1};
	for (int d = 0; d < t->rank; d++) {
		int64_t want = d == t->rank - 1 ? 32 : d == t->rank - 2 ? 8 : 1;

		s->tile[d] = t->shape[d] < want ? t->shape[d] : want;
	}
	default_threads(t, s);
}

/* {"library": true}: the kernel's matrix product, and the epilogue its
 * other ops make, through the device's BLAS (library.c), which no other
 * schedule key goes with. */
static int read_library(const sched_graph *graph, json_t *sched, kgen_kernel *kernel,
			kgen_error *err)
{
	json_t *library = json_object_get(sched, "library");
	kgen_gemm gemm;
	kgen_epilogue epi;
	const char *why;

	if (!library)
		return 0;
	if (!json_is_boolean(library))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'library' must be true or "
				 "false", kernel->name);
	if (!json_is_true(library))
		return 0;
	if (json_object_size(sched) != 1)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': a library step takes no "
				 "other schedule key", kernel->name);
	if (kernel->nlanes)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': a library step has no "
				 "lanes", kernel->name);
	if (!kgen_library_step_of(graph, kernel, &gemm, &epi, &why))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s' cannot be a library step: "
				 "%s", kernel->name, why);
	kernel->schedule.library = true;
	return 1;
}

/* "parts": the reduction of a kernel of one op, printed from its tiles,
 * cut among blocks, a point at least per part, its partial results in
 * at most MAX_PARTS_BYTES. */
static int read_parts(const sched_graph *graph, json_t *sched, kgen_kernel *kernel,
		      kgen_error *err)
{
	const sched_op *op = kgen_kernel_op(graph, kernel);
	int64_t parts = 1;
	size_t zeroed, bytes;
	int rc;

	if ((rc = read_int(sched, "parts", 1, MAX_PARTS, &parts, kernel->name, err)) < 0 ||
	    parts == 1)
		return rc;
	if (kernel->nops > 1)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'parts' is for a kernel "
				 "of one op, not a fused one", kernel->name);
	if (op->reducer == SCHED_RED_NONE)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'parts' cuts a reduction, "
				 "and op %d reduces nothing", kernel->name, op->index);
	if (kernel->schedule.mma.bm)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'parts' does not go with "
				 "'mma' (its 'split_k' cuts K)", kernel->name);
	if (parts > sched_op_reduction_points(op))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': %lld parts for the %lld "
				 "points of its reduction", kernel->name, (long long)parts,
				 (long long)sched_op_reduction_points(op));
	kernel->schedule.parts = (int)parts;
	if ((bytes = kgen_kernel_scratch_bytes(graph, kernel, &zeroed)) > MAX_PARTS_BYTES)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': its %lld parts' partial "
				 "results take %zu MiB, more than %d", kernel->name,
				 (long long)parts, bytes >> 20, MAX_PARTS_BYTES >> 20);
	return KGEN_OK;
}

static int read_schedule(const sched_graph *graph, json_t *sched,
			 kgen_kernel *kernel, kgen_error *err)
{
	static const char *const keys[] = {"library", "tile", "threads", "parallel",
					   "unroll", "vector", "split", "parts", "shared",
					   "micro", "mma", NULL};
	const sched_op *op = kgen_kernel_op(graph, kernel);
	const sched_tensor *t = kgen_kernel_target(graph, kernel);
	kgen_schedule *s = &kernel->schedule;
	int64_t threads[SCHED_MAX_RANK], v;
	const char *key;
	int rc;

	if (!sched)
		return KGEN_OK;
	if (!json_is_object(sched))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'schedule' must be "
				 "an object", kernel->name);
	if ((key = sched_unknown_key(sched, keys)))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': unknown schedule key '%s'",
				 kernel->name, key);
	if ((rc = read_library(graph, sched, kernel, err)) != 0)
		return rc < 0 ? rc : KGEN_OK;
	if ((rc = read_dims(sched, "tile", t->rank, t->shape, s->tile,
			    kernel->name, err)) < 0)
		return rc;
	if ((rc = check_cpu_tile(op, t, kernel, err)) < 0)
		return rc;
	default_threads(t, s);
	for (int d = 0; d < t->rank; d++)
		threads[d] = s->threads[d];
	if ((rc = read_dims(sched, "threads", t->rank, s->tile, threads,
			    kernel->name, err)) < 0)
		return rc;
	for (int d = 0; d < t->rank; d++)
		s->threads[d] = (int)threads[d];
	if ((rc = read_split(op, sched, kernel, err)) < 0 ||
	    (rc = check_threads(t, kernel, err)) < 0)
		return rc;
	v = s->parallel;
	if ((rc = read_int(sched, "parallel", 0, t->rank, &v, kernel->name, err)) < 0)
		return rc;
	s->parallel = (int)v;
	v = s->unroll;
	if ((rc = read_int(sched, "unroll", 1, 64, &v, kernel->name, err)) < 0)
		return rc;
	s->unroll = (int)v;
	v = s->vector;
	if ((rc = read_int(sched, "vector", 1, 8, &v, kernel->name, err)) < 0)
		return rc;
	if (v & (v - 1))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'vector' must be "
				 "1, 2, 4 or 8", kernel->name);
	s->vector = (int)v;
	if ((rc = read_micro(graph, sched, kernel, err)) < 0 ||
	    (rc = read_mma(graph, sched, kernel, err)) < 0 ||
	    (rc = read_parts(graph, sched, kernel, err)) < 0)
		return rc;
	return read_shared(sched, kernel, err);
}

static void default_name(const sched_graph *graph, int index, kgen_kernel *kernel)
{
	snprintf(kernel->name, sizeof(kernel->name), "k%d_%s", index,
		 kgen_kernel_target(graph, kernel)->name);
}

static int read_name(json_t *name, kgen_kernel *kernel, int index, kgen_error *err)
{
	const char *s = json_string_value(name);

	if (!name)
		return KGEN_OK;
	if (!s || !sched_is_identifier(s) || strlen(s) >= sizeof(kernel->name))
		return kgen_fail(err, KGEN_EPLAN, "kernel %d: 'name' must be an "
				 "identifier of at most 63 characters", index);
	strcpy(kernel->name, s);
	return KGEN_OK;
}

static int read_ops(const sched_graph *graph, json_t *ops, kgen_kernel *kernel,
		    int index, kgen_error *err)
{
	json_t *v;
	size_t i;

	if (!json_is_array(ops) || json_array_size(ops) == 0 ||
	    json_array_size(ops) > KGEN_MAX_OPS)
		return kgen_fail(err, KGEN_EPLAN, "kernel %d: 'ops' must list 1 to "
				 "%d op indices", index, KGEN_MAX_OPS);
	json_array_foreach(ops, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= graph->nops)
			return kgen_fail(err, KGEN_EPLAN, "kernel %d: op %lld does "
					 "not exist (the graph has %d ops)", index,
					 (long long)json_integer_value(v), graph->nops);
		kernel->ops[kernel->nops++] = (int)json_integer_value(v);
	}
	return KGEN_OK;
}

/* The optional "lanes": one lane number per branch of a fused group. */
static int read_lanes(json_t *lanes, kgen_kernel *kernel, int index,
		      kgen_error *err)
{
	json_t *v;
	size_t i;

	if (!lanes)
		return KGEN_OK;
	if (!json_is_array(lanes) || json_array_size(lanes) == 0 ||
	    json_array_size(lanes) > (size_t)kernel->nops)
		return kgen_fail(err, KGEN_EPLAN, "kernel %d: 'lanes' must list one "
				 "lane per branch of the group", index);
	json_array_foreach(lanes, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= (json_int_t)json_array_size(lanes))
			return kgen_fail(err, KGEN_EPLAN, "kernel %d: lane %zu must be "
					 "an integer from 0 to %zu", index, i,
					 json_array_size(lanes) - 1);
		kernel->lanes[kernel->nlanes++] = (int)json_integer_value(v);
	}
	return KGEN_OK;
}

/* A fused kernel's group must be legal, and its lanes name every branch
 * (a library step's epilogue is no group: read_library checks it). */
static int check_group(const sched_graph *graph, const kgen_kernel *kernel,
		       kgen_error *err)
{
	sched_group *group;
	int rc;

	if ((kernel->nops == 1 && !kernel->nlanes) || kernel->schedule.library)
		return KGEN_OK;
	if ((rc = kgen_kernel_group(graph, kernel, false, &group, err)) < 0)
		return rc;
	if (kernel->nlanes && kernel->nlanes != group->nbranches)
		rc = kgen_fail(err, KGEN_EPLAN, "kernel '%s': 'lanes' lists %d lanes "
			       "for %d branches", kernel->name, kernel->nlanes,
			       group->nbranches);
	sched_group_free(group);
	return rc;
}

static int read_kernel(const sched_graph *graph, json_t *obj, kgen_kernel *kernel,
		       int index, kgen_error *err)
{
	static const char *const keys[] = {"name", "ops", "lanes", "schedule", "sync",
					   NULL};
	const char *key;
	int rc;

	if (!json_is_object(obj))
		return kgen_fail(err, KGEN_EPLAN, "kernel %d must be an object", index);
	if ((key = sched_unknown_key(obj, keys)))
		return kgen_fail(err, KGEN_EPLAN, "kernel %d: unknown key '%s'", index, key);
	if ((rc = read_ops(graph, json_object_get(obj, "ops"), kernel, index, err)) < 0 ||
	    (rc = read_lanes(json_object_get(obj, "lanes"), kernel, index, err)) < 0)
		return rc;
	default_name(graph, index, kernel);
	default_schedule(kgen_kernel_op(graph, kernel), kgen_kernel_target(graph, kernel),
			 &kernel->schedule);
	if ((rc = read_name(json_object_get(obj, "name"), kernel, index, err)) < 0 ||
	    (rc = read_schedule(graph, json_object_get(obj, "schedule"), kernel, err)) < 0)
		return rc;
	return check_group(graph, kernel, err);
}

/* Every op in exactly one kernel, names distinct, and each kernel after
 * the kernels that write what it reads. */
static int check_coverage(const sched_graph *graph, const kgen_plan *plan,
			  kgen_error *err)
{
	int *kernel_of = malloc(graph->nops * sizeof(int));
	int rc = KGEN_OK;

	if (!kernel_of)
		return KGEN_ENOMEM;
	for (int i = 0; i < graph->nops; i++)
		kernel_of[i] = -1;
	for (int k = 0; k < plan->nkernels && rc == KGEN_OK; k++) {
		for (int i = 0; i < plan->kernels[k].nops && rc == KGEN_OK; i++) {
			int op = plan->kernels[k].ops[i];

			if (kernel_of[op] >= 0)
				rc = kgen_fail(err, KGEN_EPLAN, "op %d is in kernels %d "
					       "and %d", op, kernel_of[op], k);
			kernel_of[op] = k;
		}
		for (int j = 0; j < k && rc == KGEN_OK; j++)
			if (!strcmp(plan->kernels[j].name, plan->kernels[k].name))
				rc = kgen_fail(err, KGEN_EPLAN, "two kernels are named '%s'",
					       plan->kernels[k].name);
	}
	for (int i = 0; i < graph->nops && rc == KGEN_OK; i++)
		if (kernel_of[i] < 0)
			rc = kgen_fail(err, KGEN_EPLAN, "op %d is in no kernel", i);
	free(kernel_of);
	return rc;
}

typedef struct order_check {
	const sched_graph *graph;
	const bool *written;
	int missing;
} order_check;

static void find_unwritten(const sched_node *access, void *user)
{
	order_check *c = user;
	const sched_tensor *t = &c->graph->tensors[access->tensor];

	if (t->role != SCHED_INPUT && !c->written[access->tensor])
		c->missing = access->tensor;
}

static int check_launch_order(const sched_graph *graph, const kgen_plan *plan,
			      kgen_error *err)
{
	bool *written = calloc(graph->ntensors, sizeof(bool));
	order_check c = {graph, written, -1};
	int rc = KGEN_OK;

	if (!written)
		return KGEN_ENOMEM;
	for (int k = 0; k < plan->nkernels && rc == KGEN_OK; k++) {
		const kgen_kernel *kernel = &plan->kernels[k];

		for (int i = 0; i < kernel->nops; i++) /* members feed members */
			written[graph->ops[kernel->ops[i]].target] = true;
		for (int i = 0; i < kernel->nops; i++)
			sched_node_each_access(graph->ops[kernel->ops[i]].body,
					       find_unwritten, &c);
		if (c.missing >= 0)
			rc = kgen_fail(err, KGEN_EPLAN, "kernel '%s' reads '%s' before "
				       "any kernel writes it", kernel->name,
				       graph->tensors[c.missing].name);
	}
	free(written);
	return rc;
}

int kgen_plan_from_json(const sched_graph *graph, json_t *json, kgen_plan **out,
			kgen_error *err)
{
	json_t *kernels = json_object_get(json, "kernels"), *obj;
	kgen_plan *plan;
	size_t i;
	int rc = KGEN_OK;

	*out = NULL;
	if (!json_is_object(json) || !json_is_array(kernels) ||
	    json_array_size(kernels) == 0 || json_array_size(kernels) > MAX_KERNELS)
		return kgen_fail(err, KGEN_EPLAN, "a plan is an object whose "
				 "'kernels' lists 1 to %d kernels", MAX_KERNELS);
	if (!(plan = plan_new((int)json_array_size(kernels))))
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	json_array_foreach(kernels, i, obj)
		if (rc == KGEN_OK)
			rc = read_kernel(graph, obj, &plan->kernels[i], (int)i, err);
	if (rc == KGEN_OK)
		rc = check_coverage(graph, plan, err);
	if (rc == KGEN_OK)
		rc = check_launch_order(graph, plan, err);
	json_array_foreach(kernels, i, obj)
		if (rc == KGEN_OK)
			rc = kgen_sync_from_json(graph, plan, (int)i,
						 json_object_get(obj, "sync"), err);
	if (rc < 0) {
		kgen_plan_free(plan);
		return rc == KGEN_ENOMEM ? kgen_fail(err, rc, "out of memory") : rc;
	}
	*out = plan;
	return KGEN_OK;
}

kgen_plan *kgen_plan_default(const sched_graph *graph)
{
	kgen_plan *plan = plan_new(graph->nops);

	for (int k = 0; plan && k < graph->nops; k++) {
		kgen_kernel *kernel = &plan->kernels[k];

		kernel->ops[kernel->nops++] = graph->order[k];
		default_name(graph, k, kernel);
		default_schedule(kgen_kernel_op(graph, kernel), kgen_kernel_target(graph, kernel),
			 &kernel->schedule);
	}
	return plan;
}

static json_t *dims_json(const int64_t *values, int rank)
{
	json_t *list = json_array();

	for (int d = 0; d < rank; d++)
		json_array_append_new(list, json_integer(values[d]));
	return list;
}

static bool same_dims(const int64_t *a, const int64_t *b, int rank)
{
	for (int d = 0; d < rank; d++)
		if (a[d] != b[d])
			return false;
	return true;
}

/* The fields of "s" that differ from the defaults they would be read back
 * as: a default plan is {"name", "ops"} per kernel, so plans stay small in
 * the cache (its trials keep one each). */
static json_t *schedule_json(const sched_op *op, const sched_tensor *t,
			     const kgen_schedule *s)
{
	kgen_schedule def, tiled = *s;
	int64_t threads[SCHED_MAX_RANK], def_threads[SCHED_MAX_RANK];
	json_t *obj = json_object();

	if (s->library)
		return json_object_set_new(obj, "library", json_true()), obj;
	default_schedule(op, t, &def);
	default_threads(t, &tiled);
	for (int d = 0; d < t->rank; d++) {
		threads[d] = s->threads[d];
		def_threads[d] = tiled.threads[d];
	}
	if (!same_dims(s->tile, def.tile, t->rank))
		json_object_set_new(obj, "tile", dims_json(s->tile, t->rank));
	if (!same_dims(threads, def_threads, t->rank))
		json_object_set_new(obj, "threads", dims_json(threads, t->rank));
	if (s->parallel != def.parallel)
		json_object_set_new(obj, "parallel", json_integer(s->parallel));
	if (s->unroll != def.unroll)
		json_object_set_new(obj, "unroll", json_integer(s->unroll));
	if (s->vector != def.vector)
		json_object_set_new(obj, "vector", json_integer(s->vector));
	if (s->split != def.split)
		json_object_set_new(obj, "split", json_string(split_names[s->split]));
	if (s->parts != def.parts)
		json_object_set_new(obj, "parts", json_integer(s->parts));
	if (s->micro.mr)
		json_object_set_new(obj, "micro", json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}",
			"mr", s->micro.mr, "nr", s->micro.nr, "kc", s->micro.kc,
			"mc", s->micro.mc, "nc", s->micro.nc, "pack", s->micro.pack));
	if (s->mma.bm)
		json_object_set_new(obj, "mma", json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}",
			"bm", s->mma.bm, "bn", s->mma.bn, "bk", s->mma.bk,
			"wm", s->mma.wm, "wn", s->mma.wn, "stages", s->mma.stages));
	if (s->mma.bm && s->mma.raster > 1)
		json_object_set_new(json_object_get(obj, "mma"), "raster",
				    json_integer(s->mma.raster));
	if (s->mma.bm && s->mma.rotated)
		json_object_set_new(json_object_get(obj, "mma"), "rotated", json_integer(1));
	if (s->mma.bm && s->mma.split_k > 1)
		json_object_set_new(json_object_get(obj, "mma"), "split_k",
				    json_integer(s->mma.split_k));
	return obj;
}

json_t *kgen_plan_to_json(const sched_graph *graph, const kgen_plan *plan)
{
	json_t *kernels = json_array();

	for (int k = 0; k < plan->nkernels; k++) {
		const kgen_kernel *kernel = &plan->kernels[k];
		json_t *ops = json_array();

		for (int i = 0; i < kernel->nops; i++)
			json_array_append_new(ops, json_integer(kernel->ops[i]));
		json_t *schedule = schedule_json(kgen_kernel_op(graph, kernel),
						 kgen_kernel_target(graph, kernel),
						 &kernel->schedule);
		json_t *obj = json_pack("{s:s, s:o}", "name", kernel->name, "ops", ops);

		if (kernel->nlanes) {
			json_t *lanes = json_array();

			for (int l = 0; l < kernel->nlanes; l++)
				json_array_append_new(lanes, json_integer(kernel->lanes[l]));
			json_object_set_new(obj, "lanes", lanes);
		}
		if (json_object_size(schedule))
			json_object_set_new(obj, "schedule", schedule);
		else
			json_decref(schedule);
		if (kernel->sync.on)
			json_object_set_new(obj, "sync", kgen_sync_to_json(plan, k));
		json_array_append_new(kernels, obj);
	}
	return json_pack("{s:o}", "kernels", kernels);
}
