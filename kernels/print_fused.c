/*
 * print_fused.c: the kernel of a fused group (docs/design/fusion.md), as C with
 * OpenMP (cpu) or CUDA C, from the group's analysis (scheduler/fusion.c).
 *
 * One launch runs every block of every lane; a lane's branches run one
 * after another in its blocks, and a branch's stages in dependence order.
 * Each stage computes its region [lo, hi) of its target, whose bounds are
 * C expressions of the branch's block coordinates b0, b1, ...; members
 * keep their results in block-local memory ("local": the block's stack on
 * the cpu, shared memory on cuda), rounded to their tensor's type as the
 * reference does, or are recomputed at each read (macros K_<tensor>).
 *
 * cpu: OpenMP shares the blocks among threads; a block runs on one.
 * cuda: a block per blockIdx.x; stage element e runs on thread
 * e mod blockDim.x, which is the thread map the widths were computed
 * with, and __syncthreads() stands where the analysis put a barrier.
 * A reduction stage with fewer elements than threads shares each element
 * among up to a warp of threads, combined by shuffles, and with a vector
 * in the schedule an elementwise stage runs that many consecutive
 * elements per thread, moved at once where they are on their width;
 * both with barriers on both sides (their elements leave that thread
 * map).
 */
#include <stdlib.h>
#include <string.h>

#include "print_int.h"

typedef struct fused_kernel {
	kgen_printer pr;
	const kgen_kernel *kernel;
	sched_buf *buf;
	bool cuda;
	bool wrapped; /* cuda: computes one tile for print_sync.c's entry */
	bool barrier_due; /* cuda: the last stage's elements ran on other threads */
} fused_kernel;

static const sched_group *group_of(const fused_kernel *k)
{
	return k->pr.group;
}

static const sched_tensor *stage_target(const fused_kernel *k, int s)
{
	const sched_graph *g = k->pr.graph;

	return &g->tensors[g->ops[group_of(k)->stages[s].op].target];
}

static void use_stage(fused_kernel *k, int s)
{
	k->pr.op = &k->pr.graph->ops[group_of(k)->stages[s].op];
}

static const char *var_name(const fused_kernel *k, int v)
{
	return k->pr.op->vars[v].name;
}

static void print_header(fused_kernel *k)
{
	const sched_graph *g = k->pr.graph;

	sched_buf_printf(k->buf, "/* tuned kernel %s, graph %.16s, fused:\n",
			 k->kernel->name, g->key);
	for (int s = 0; s < group_of(k)->nstages; s++) {
		const sched_op *op = &g->ops[group_of(k)->stages[s].op];

		sched_buf_printf(k->buf, " * op %d: %s\n", op->index, op->text);
	}
	sched_buf_printf(k->buf, " */\n#define floord(n, d) kfloordiv(n, d)\n"
			 "#define min(a, b) kmin(a, b)\n#define max(a, b) kmaxi(a, b)\n");
}

/* A recomputed member as a macro of its target variables. */
static void print_recomputed(fused_kernel *k)
{
	for (int s = 0; s < group_of(k)->nstages; s++) {
		if (group_of(k)->stages[s].store != SCHED_STORE_INLINE)
			continue;
		use_stage(k, s);
		sched_buf_printf(k->buf, "#define K_%s(", stage_target(k, s)->name);
		for (int v = 0; v < k->pr.op->ntarget_vars; v++)
			sched_buf_printf(k->buf, "%sv_%s", v ? ", " : "", var_name(k, v));
		sched_buf_printf(k->buf, ") (");
		kgen_print_value(k->buf, &k->pr, k->pr.op->body);
		sched_buf_printf(k->buf, ")\n");
	}
}

/* Whether tensor "t" is written to global memory by the kernel. */
static bool writes_global(const fused_kernel *k, int t)
{
	int s = sched_group_stage_of(group_of(k), k->pr.graph->tensors[t].writer);

	return s >= 0 && (group_of(k)->stages[s].store == SCHED_STORE_GLOBAL ||
			  group_of(k)->stages[s].store == SCHED_STORE_BOTH);
}

static bool touched(const fused_kernel *k, int t)
{
	for (int s = 0; s < group_of(k)->nstages; s++)
		if (kgen_op_touches(&k->pr.graph->ops[group_of(k)->stages[s].op], t))
			return true;
	return false;
}

/* cuda: the block's threads, laid over the last stage's target, or the
 * warps of its products on tensor cores. */
static unsigned block_threads(const fused_kernel *k)
{
	unsigned threads = 1;

	if (k->kernel->schedule.mma.bm)
		return (unsigned)kgen_mma_threads(&k->kernel->schedule.mma);

	for (int d = 0; d < stage_target(k, group_of(k)->nstages - 1)->rank; d++)
		threads *= k->kernel->schedule.threads[d];
	return threads;
}

static void print_params(fused_kernel *k)
{
	const sched_graph *g = k->pr.graph;
	char bounds[16];

	if (!k->cuda) {
		sched_buf_printf(k->buf, "void %s(void **tensors)\n{\n", k->kernel->name);
		for (int t = 0; t < g->ntensors; t++)
			if (touched(k, t))
				sched_buf_printf(k->buf, "\t%s%s *restrict t_%s = tensors[%d];\n",
						 writes_global(k, t) ? "" : "const ",
						 kgen_ctype(g->tensors[t].dtype, false),
						 g->tensors[t].name, t);
		return;
	}
	snprintf(bounds, sizeof(bounds), "%u", block_threads(k));
	kgen_print_cuda_entry(k->buf, k->kernel->name, bounds, k->wrapped);
	for (int t = 0; t < g->ntensors; t++)
		sched_buf_printf(k->buf, "%s%s%s *__restrict__ t_%s", t ? ",\n\t" : "",
				 writes_global(k, t) ? "" : "const ",
				 kgen_ctype(g->tensors[t].dtype, true), g->tensors[t].name);
	kgen_print_cuda_entry_end(k->buf, k->wrapped);
}

/* x rounded to the stage's tensor type, as a stored element would be:
 * fused plans compute what unfused plans compute. */
static void print_rounded(fused_kernel *k, int s, const char *x)
{
	kgen_print_rounded(k->buf, stage_target(k, s)->dtype, x);
}

static bool keeps_local(const sched_stage *st)
{
	return st->store == SCHED_STORE_LOCAL || st->store == SCHED_STORE_BOTH;
}

static bool keeps_global(const sched_stage *st)
{
	return st->store == SCHED_STORE_GLOBAL || st->store == SCHED_STORE_BOTH;
}

static void print_keep_local(fused_kernel *k, int s, const char *indent, const char *x)
{
	sched_buf_printf(k->buf, "%s", indent);
	kgen_print_local(k->buf, &k->pr, s, NULL);
	sched_buf_printf(k->buf, " = ");
	print_rounded(k, s, x);
	sched_buf_printf(k->buf, ";\n");
}

static void print_keep_global(fused_kernel *k, int s, const char *indent, const char *x)
{
	const sched_tensor *t = stage_target(k, s);

	sched_buf_printf(k->buf, "%st_%s[", indent, t->name);
	kgen_print_target_offset(k->buf, &k->pr);
	sched_buf_printf(k->buf, "] = %s%s);\n", kgen_store_open(t), x);
}

/* Keeps x, the stage's value at its target variables: in local memory
 * and/or in its tensor. */
static void print_keep(fused_kernel *k, int s, const char *indent, const char *x)
{
	if (keeps_local(&group_of(k)->stages[s]))
		print_keep_local(k, s, indent, x);
	if (keeps_global(&group_of(k)->stages[s]))
		print_keep_global(k, s, indent, x);
}

/* The reduction loops; the innermost unrolled unless "simd" already
 * stands before them. */
static void print_reduction_loops(fused_kernel *k, const char *indent, bool simd)
{
	const sched_op *op = k->pr.op;

	for (int v = op->ntarget_vars; v < op->nvars; v++) {
		if (v == op->nvars - 1 && !(simd && v == op->ntarget_vars))
			sched_buf_printf(k->buf, "#pragma %s %d\n", k->cuda ? "unroll" :
					 "GCC unroll", k->kernel->schedule.unroll);
		sched_buf_printf(k->buf, "%sfor (idx_t v_%s = %lld; v_%s < %lld; v_%s++)\n",
				 indent, var_name(k, v), (long long)op->vars[v].lo,
				 var_name(k, v), (long long)op->vars[v].hi, var_name(k, v));
	}
}

/* "float x", the current element's reduction: its loops at "indent",
 * under omp simd with "simd" as the reducer when not NULL. */
static void print_reduced_element(fused_kernel *k, const char *indent,
				  const char *simd)
{
	const sched_op *op = k->pr.op;

	sched_buf_printf(k->buf, "%sfloat x = %s;\n", indent,
			 kgen_reducer_identity(op->reducer));
	if (simd)
		sched_buf_printf(k->buf, "#pragma omp simd reduction(%s:x)\n", simd);
	print_reduction_loops(k, indent, simd != NULL);
	sched_buf_printf(k->buf, "%s{\n%s\tconst float y = ", indent, indent);
	kgen_print_value(k->buf, &k->pr, op->body);
	sched_buf_printf(k->buf, ";\n%s\t", indent);
	kgen_print_combine(k->buf, op->reducer, "x", "y");
	sched_buf_printf(k->buf, "\n%s}\n", indent);
}

static int64_t stage_elements(const fused_kernel *k, int s)
{
	const sched_stage *st = &group_of(k)->stages[s];
	int64_t n = 1;

	for (int d = 0; d < st->rank; d++)
		n *= st->extent[d];
	return n;
}

/* ---- cpu ---- */

/* Loops over the first "dims" dims of the stage's region; the innermost
 * of all under omp simd. The caller closes the block it opens. */
static void print_region_loops(fused_kernel *k, int s, int dims, const char *indent)
{
	const sched_stage *st = &group_of(k)->stages[s];

	for (int d = 0; d < dims; d++) {
		if (d == st->rank - 1)
			sched_buf_printf(k->buf, "#pragma omp simd\n");
		sched_buf_printf(k->buf, "%sfor (idx_t v_%s = lo_%d_%d; v_%s < hi_%d_%d; v_%s++)\n",
				 indent, var_name(k, d), s, d, var_name(k, d), s, d,
				 var_name(k, d));
	}
	sched_buf_printf(k->buf, "%s{\n", indent);
}

/* Results of at least this many bytes may be streamed: smaller ones,
 * which a cache keeps for whoever reads them next, are stored as usual. */
#define STREAMED_BYTES ((size_t)1 << 20)

/* Whether tensor "t" is a result of the graph of STREAMED_BYTES or more
 * that none of its ops reads: its stores then bypass the caches (no line
 * read before it is written, none kept that no op reads). */
static bool streamed(const sched_graph *g, int t)
{
	if (g->tensors[t].role != SCHED_OUTPUT ||
	    sched_tensor_bytes(g, t) < STREAMED_BYTES)
		return false;
	for (int o = 0; o < g->nops; o++)
		if (sched_op_reads_tensor(&g->ops[o], t))
			return false;
	return true;
}

/* The chunks' keeps of stage "s" from vec_x, at first_V: f16 narrowed
 * (or rounded, for local memory) KVEC at a time, streamed past the caches
 * where no op reads them (streamed), other types as one. */
static void print_chunk_keeps(fused_kernel *k, int s, const kgen_chunks *c)
{
	const sched_stage *st = &group_of(k)->stages[s];
	const sched_tensor *t = stage_target(k, s);
	const char *v = var_name(k, c->var);
	bool f16 = t->dtype == SCHED_F16;

	if (keeps_local(st)) {
		if (f16)
			sched_buf_printf(k->buf, "\t\t\t\tkf16_round_vec(vec_x);\n");
		sched_buf_printf(
			k->buf,
			"#pragma omp simd\n\t\t\t\tfor (int u = 0; u < KVEC; u++) {\n"
			"\t\t\t\t\tconst idx_t v_%s = first_%s + u;\n\t\t\t\t\t",
			v, v);
		kgen_print_local(k->buf, &k->pr, s, NULL);
		sched_buf_printf(k->buf, " = ");
		if (f16)
			sched_buf_printf(k->buf, "vec_x[u]");
		else
			print_rounded(k, s, "vec_x[u]");
		sched_buf_printf(k->buf, ";\n\t\t\t\t}\n");
	}
	if (!keeps_global(st))
		return;
	if (f16) {
		kgen_print_chunk_f16_store(c, t->name,
					   streamed(k->pr.graph, k->pr.op->target));
		return;
	}
	sched_buf_printf(k->buf,
			 "#pragma omp simd\n\t\t\t\tfor (int u = 0; u < KVEC; u++) {\n"
			 "\t\t\t\t\tconst idx_t v_%s = first_%s + u;\n",
			 v, v);
	print_keep_global(k, s, "\t\t\t\t\t", "vec_x[u]");
	sched_buf_printf(k->buf, "\t\t\t\t}\n");
}

/* An elementwise stage whose f16 reads or keeps run in chunks along its
 * last dim (print_chunks.c); false, printing nothing, where it has none. */
static bool print_cpu_elementwise_chunks(fused_kernel *k, int s)
{
	const sched_stage *st = &group_of(k)->stages[s];
	int last = st->rank - 1;
	char lo[32], hi[32];
	kgen_chunks c = {&k->pr, k->buf, last, lo, hi, "\t\t\t", {0}, NULL};

	if (st->rank == 0 ||
	    (!kgen_chunk_reads(&c) && stage_target(k, s)->dtype != SCHED_F16))
		return false;
	snprintf(lo, sizeof(lo), "lo_%d_%d", s, last);
	snprintf(hi, sizeof(hi), "hi_%d_%d", s, last);
	print_region_loops(k, s, last, "\t\t\t");
	kgen_print_chunks_open(&c);
	kgen_print_chunk_value(&c, "\t\t\t\t\t");
	print_chunk_keeps(k, s, &c);
	kgen_print_chunks_done(&c);
	kgen_print_chunks_tail(&c, "#pragma omp simd\n");
	sched_buf_printf(k->buf, "\t\t\t\t\tconst float x = ");
	kgen_print_value(k->buf, &k->pr, k->pr.op->body);
	sched_buf_printf(k->buf, ";\n");
	print_keep(k, s, "\t\t\t\t\t", "x");
	kgen_print_chunks_close(&c);
	sched_buf_printf(k->buf, "\t\t\t}\n");
	return true;
}

static void print_cpu_elementwise(fused_kernel *k, int s)
{
	if (print_cpu_elementwise_chunks(k, s))
		return;
	print_region_loops(k, s, group_of(k)->stages[s].rank, "\t\t\t");
	sched_buf_printf(k->buf, "\t\t\t\tconst float x = ");
	kgen_print_value(k->buf, &k->pr, k->pr.op->body);
	sched_buf_printf(k->buf, ";\n");
	print_keep(k, s, "\t\t\t\t", "x");
	sched_buf_printf(k->buf, "\t\t\t}\n");
}

/* The stages one pass computes: one, or the roots of sibling branches
 * whose column reductions run the same loops (same_pass), which then
 * read what they share once. */
#define PASS_STAGES 8
typedef struct pass {
	int n;
	int stage[PASS_STAGES];
} pass;

/* Each stage's element folded into its accumulator acc[i]. */
static void print_accumulated_elements(fused_kernel *k, const pass *p,
				       const char *indent, sched_buf *acc)
{
	for (int i = 0; i < p->n; i++) {
		char x[16];

		use_stage(k, p->stage[i]);
		snprintf(x, sizeof(x), "x_%d", p->stage[i]);
		sched_buf_printf(k->buf, "%sconst float %s = ", indent, x);
		kgen_print_value(k->buf, &k->pr, k->pr.op->body);
		sched_buf_printf(k->buf, ";\n%s", indent);
		kgen_print_combine(k->buf, k->pr.op->reducer,
				   acc[i].str ? acc[i].str : "", x);
		sched_buf_printf(k->buf, "\n");
	}
}

/* Whether any stage of the pass reads f16 along the region's last dim,
 * with those reads in "c" (shared between the stages). */
static bool pass_chunk_reads(fused_kernel *k, const pass *p, kgen_chunks *c)
{
	bool any = false;

	for (int i = 0; i < p->n; i++) {
		use_stage(k, p->stage[i]);
		any = i ? kgen_chunk_more_reads(c) : kgen_chunk_reads(c);
	}
	return any;
}

/* Each element of the region folded into its accumulators "acc": in
 * chunks along the region's last dim where an op reads f16 along it. */
static void print_accumulation(fused_kernel *k, const pass *p, sched_buf *acc)
{
	int s = p->stage[0];
	const sched_stage *st = &group_of(k)->stages[s];
	int last = st->rank - 1;
	char lo[32], hi[32];
	kgen_chunks c = {&k->pr, k->buf, last, lo, hi, "\t\t\t", {0}, NULL};
	bool chunked = st->rank > 0 && pass_chunk_reads(k, p, &c);

	use_stage(k, s);
	if (!chunked) {
		print_region_loops(k, s, st->rank, "\t\t\t");
		print_accumulated_elements(k, p, "\t\t\t\t", acc);
		sched_buf_printf(k->buf, "\t\t\t}\n");
		return;
	}
	snprintf(lo, sizeof(lo), "lo_%d_%d", s, last);
	snprintf(hi, sizeof(hi), "hi_%d_%d", s, last);
	print_region_loops(k, s, last, "\t\t\t");
	kgen_print_chunks_open(&c);
	print_accumulated_elements(k, p, "\t\t\t\t\t", acc);
	kgen_print_chunks_middle(&c);
	kgen_print_chunks_done(&c);
	kgen_print_chunks_tail(&c, "#pragma omp simd\n");
	print_accumulated_elements(k, p, "\t\t\t\t\t", acc);
	kgen_print_chunks_close(&c);
	sched_buf_printf(k->buf, "\t\t\t}\n");
}

/* The accumulators of stage "s" over its region (its own buffer),
 * filled with the reducer's identity; "acc" the current element's. */
static void print_accumulators(fused_kernel *k, int s, sched_buf *acc)
{
	const sched_stage *st = &group_of(k)->stages[s];

	use_stage(k, s);
	if (st->store == SCHED_STORE_GLOBAL)
		sched_buf_printf(k->buf, "\t\t\tfloat acc_%d[%lld];\n", s,
				 (long long)stage_elements(k, s));
	else
		sched_buf_printf(k->buf, "\t\t\tfloat *acc_%d = local + %lld;\n", s,
				 (long long)st->offset);
	sched_buf_printf(
		k->buf,
		"\t\t\tfor (idx_t a = 0; a < %lld; a++)\n\t\t\t\tacc_%d[a] = %s;\n",
		(long long)stage_elements(k, s), s,
		kgen_reducer_identity(k->pr.op->reducer));
	sched_buf_printf(acc, "acc_%d[", s);
	kgen_print_local_index(acc, &k->pr, s);
	sched_buf_printf(acc, "]");
}

/* Accumulators over the region (a member's own buffer), the reduction
 * loops outside the region loops, then the results kept: for reductions
 * whose innermost loop walks the region's last dim in memory (a matrix
 * product's columns, a column sum); for every stage of the pass in the
 * same loops. */
static void print_cpu_reducing_outside(fused_kernel *k, const pass *p)
{
	sched_buf acc[PASS_STAGES] = {{0}};

	for (int i = 0; i < p->n; i++)
		print_accumulators(k, p->stage[i], &acc[i]);
	use_stage(k, p->stage[0]);
	print_reduction_loops(k, "\t\t\t", false);
	print_accumulation(k, p, acc);
	for (int i = 0; i < p->n; i++) {
		int s = p->stage[i];

		use_stage(k, s);
		print_region_loops(k, s, group_of(k)->stages[s].rank, "\t\t\t");
		sched_buf_printf(k->buf, "\t\t\t\tconst float x = %s;\n",
				 acc[i].str ? acc[i].str : "");
		print_keep(k, s, "\t\t\t\t", "x");
		sched_buf_printf(k->buf, "\t\t\t}\n");
		sched_buf_release(&acc[i]);
	}
}

typedef struct last_index {
	const sched_op *op;
	bool reduction_last; /* the last reduction variable ends an access */
	bool target_last;    /* the last target variable is in an access's last index */
} last_index;

static void look_at_last_index(const sched_node *access, void *user)
{
	last_index *li = user;
	const sched_node *last = access->nargs ? access->args[access->nargs - 1] : NULL;

	if (access->nargs < 2)
		return;
	li->reduction_last |= last->kind == SCHED_NODE_VAR &&
			      last->var == li->op->nvars - 1;
	li->target_last |= li->op->ntarget_vars > 0 &&
			   sched_node_mentions(last, li->op->ntarget_vars - 1);
}

/* Whether the reduction should run innermost: it walks the last dim of
 * a matrix the region's last dim does not (a row reduction). */
static bool reduction_inside(const sched_op *op)
{
	last_index li = {op, false, false};

	sched_node_each_access(op->body, look_at_last_index, &li);
	return li.reduction_last && !li.target_last;
}

static const char *simd_reducer(enum sched_reducer reducer)
{
	switch (reducer) {
	case SCHED_RED_SUM: return "+";
	case SCHED_RED_PROD: return "*";
	case SCHED_RED_MAX: return "max";
	default: return "min";
	}
}

static void print_reduced_term(fused_kernel *k, const char *indent, const char *acc)
{
	sched_buf_printf(k->buf, "%sconst float y = ", indent);
	kgen_print_value(k->buf, &k->pr, k->pr.op->body);
	sched_buf_printf(k->buf, ";\n%s", indent);
	kgen_print_combine(k->buf, k->pr.op->reducer, acc, "y");
	sched_buf_printf(k->buf, "\n");
}

/* "float x", the current element's reduction over its one reduction
 * variable, four vectors at a time (its f16 reads along it widened by
 * the conversion instructions): 4 KVEC partial results, one per lane,
 * kept across the row and folded at its end, then the last points.
 * Four vectors of partial results, not one, so that a vector's
 * combination need not wait for the one before it (with one, eight rows
 * of 768 floats summed from L1 took 2.3 to 2.8 times as long on the
 * AVX-512 VM of 2026-12-02: each vector waited for the adder). False,
 * printing nothing, where the op has more than one reduction variable. */
static bool print_reduced_element_chunks(fused_kernel *k)
{
	const sched_op *op = k->pr.op;
	const char *identity = kgen_reducer_identity(op->reducer);
	char lo[32], hi[32], tail[64];
	kgen_chunks c = {.pr = &k->pr,
			 .buf = k->buf,
			 .var = op->ntarget_vars,
			 .lo = lo,
			 .hi = hi,
			 .indent = "\t\t\t\t",
			 .width = "4 * KVEC"};

	if (op->nvars != op->ntarget_vars + 1)
		return false;
	kgen_chunk_reads(&c);
	snprintf(lo, sizeof(lo), "%lld", (long long)op->vars[c.var].lo);
	snprintf(hi, sizeof(hi), "%lld", (long long)op->vars[c.var].hi);
	snprintf(tail, sizeof(tail), "#pragma omp simd reduction(%s:x)\n",
		 simd_reducer(op->reducer));
	sched_buf_printf(k->buf, "\t\t\t\tfloat x = %s, lanes[4 * KVEC];\n", identity);
	sched_buf_printf(k->buf, "\t\t\t\tfor (int u = 0; u < 4 * KVEC; u++)\n");
	sched_buf_printf(k->buf, "\t\t\t\t\tlanes[u] = %s;\n", identity);
	kgen_print_chunks_open(&c);
	print_reduced_term(k, "\t\t\t\t\t\t", "lanes[u]");
	kgen_print_chunks_middle(&c);
	kgen_print_chunks_done(&c);
	sched_buf_printf(
		k->buf,
		"%s\t\t\t\t\tfor (int u = 0; u < 4 * KVEC; u++) {\n\t\t\t\t\t\t", tail);
	kgen_print_combine(k->buf, op->reducer, "x", "lanes[u]");
	sched_buf_printf(k->buf, "\n\t\t\t\t\t}\n");
	kgen_print_chunks_tail(&c, tail);
	print_reduced_term(k, "\t\t\t\t\t\t", "x");
	kgen_print_chunks_close(&c);
	return true;
}

/* One element at a time, its reduction innermost under omp simd. */
static void print_cpu_reducing_inside(fused_kernel *k, int s)
{
	const sched_op *op = k->pr.op;
	const sched_stage *st = &group_of(k)->stages[s];

	for (int d = 0; d < st->rank; d++)
		sched_buf_printf(k->buf, "\t\t\tfor (idx_t v_%s = lo_%d_%d; v_%s < hi_%d_%d; v_%s++)\n",
				 var_name(k, d), s, d, var_name(k, d), s, d, var_name(k, d));
	sched_buf_printf(k->buf, "\t\t\t{\n");
	if (!print_reduced_element_chunks(k))
		print_reduced_element(k, "\t\t\t\t", simd_reducer(op->reducer));
	print_keep(k, s, "\t\t\t\t", "x");
	sched_buf_printf(k->buf, "\t\t\t}\n");
}

/* ---- cuda ---- */

/* Element e of the region runs on thread e mod blockDim.x. Where the
 * threads divide the region's last dim, rows and columns are walked by
 * two loops (the same threads, without a division per element);
 * otherwise e is decoded into the coordinates. */
static void print_cuda_elements(fused_kernel *k, int s)
{
	const sched_stage *st = &group_of(k)->stages[s];
	int64_t stride = stage_elements(k, s), last = st->rank ? st->extent[st->rank - 1] : 0;
	unsigned threads = block_threads(k);
	bool by_rows = last > 0 && last % threads == 0;

	if (by_rows)
		sched_buf_printf(k->buf, "\t\tfor (idx_t row = 0; row < %lld; row++)\n"
				 "\t\tfor (idx_t e = row * %lld + threadIdx.x; e < (row + 1) * %lld; "
				 "e += %u) {\n", (long long)(stride / last), (long long)last,
				 (long long)last, threads);
	else
		sched_buf_printf(k->buf, "\t\tfor (idx_t e = threadIdx.x; e < %lld; "
				 "e += blockDim.x) {\n", (long long)stride);
	for (int d = 0; d < st->rank; d++) {
		stride /= st->extent[d];
		if (by_rows && d == st->rank - 1)
			sched_buf_printf(k->buf, "\t\t\tconst idx_t v_%s = lo_%d_%d + (e - row * %lld);\n",
					 var_name(k, d), s, d, (long long)last);
		else if (by_rows)
			sched_buf_printf(k->buf, "\t\t\tconst idx_t v_%s = lo_%d_%d + row / %lld %% %lld;\n",
					 var_name(k, d), s, d, (long long)(stride / last),
					 (long long)st->extent[d]);
		else
			sched_buf_printf(k->buf, "\t\t\tconst idx_t v_%s = lo_%d_%d + e / %lld %% %lld;\n",
					 var_name(k, d), s, d, (long long)stride,
					 (long long)st->extent[d]);
	}
	for (int d = 0; d < st->rank; d++)
		sched_buf_printf(k->buf, "\t\t\tif (v_%s >= hi_%d_%d)\n\t\t\t\tcontinue;\n",
				 var_name(k, d), s, d);
}

/* ---- cuda: consecutive elements per thread ---- */

/* A stage whose threads run "width" consecutive values of the op's
 * variable "var" each (the schedule's vector): an elementwise stage's
 * last target variable, or a shared reduction's one reduction variable.
 * Its reads whose last index is "var" alone, and an elementwise stage's
 * keeps, move "width" elements at once (16 bytes at most per move) where
 * the place of an element of "var" on "width" elements is on as many. */
typedef struct vector_stage {
	fused_kernel *k;
	int stage, width, var;
	kgen_vector_reads reads;
	bool moves_local, moves_global; /* the stage's keeps */
} vector_stage;

/* The stage keeping tensor "t" in local memory, or -1. */
static int local_stage(const fused_kernel *k, int t)
{
	int s = sched_group_stage_of(group_of(k), k->pr.graph->tensors[t].writer);

	return s >= 0 && keeps_local(&group_of(k)->stages[s]) ? s : -1;
}

static bool recomputed(const fused_kernel *k, int t)
{
	int s = sched_group_stage_of(group_of(k), k->pr.graph->tensors[t].writer);

	return s >= 0 && group_of(k)->stages[s].store == SCHED_STORE_INLINE;
}

static void look_at_read(const sched_node *access, void *user)
{
	vector_stage *v = user;
	const sched_tensor *t = &v->k->pr.graph->tensors[access->tensor];
	int s = local_stage(v->k, access->tensor);
	const sched_stage *st = s >= 0 ? &group_of(v->k)->stages[s] : NULL;
	bool on_width = st ? st->offset % v->width == 0 &&
			     st->extent[st->rank - 1] % v->width == 0 :
			     t->shape[t->rank - 1] % v->width == 0;

	if (v->reads.n < KGEN_MAX_VECTOR_READS && kgen_walks_last(access, v->var) &&
	    !recomputed(v->k, access->tensor) && on_width)
		v->reads.access[v->reads.n++] = access;
}

/* The vectors of stage "s"; false when its threads run an element each:
 * a vector of 1, a reduction, a last dim "width" does not divide, or
 * nothing in global memory moved at once. */
static bool plan_vectors(fused_kernel *k, int s, vector_stage *v)
{
	const sched_stage *st = &group_of(k)->stages[s];
	const sched_tensor *t = stage_target(k, s);
	int w = k->kernel->schedule.vector;
	bool global_reads = false;

	*v = (vector_stage){k, s, w, st->rank - 1, {0}, false, false};
	if (w < 2 || k->pr.op->reducer != SCHED_RED_NONE || st->rank == 0 ||
	    st->extent[st->rank - 1] % w)
		return false;
	sched_node_each_access(k->pr.op->body, look_at_read, v);
	v->moves_local = keeps_local(st) && st->offset % w == 0;
	v->moves_global = keeps_global(st) && t->shape[t->rank - 1] % w == 0;
	for (int i = 0; i < v->reads.n; i++)
		global_reads |= local_stage(k, v->reads.access[i]->tensor) < 0;
	return global_reads || v->moves_global;
}

/* The vectors of shared reduction stage "s": its one reduction variable,
 * whose range "width" divides, and its reads along it; false when it has
 * none or the vector is 1. */
static bool plan_reduction_vectors(fused_kernel *k, int s, vector_stage *v)
{
	const sched_op *op = k->pr.op;
	int w = k->kernel->schedule.vector, var = op->ntarget_vars;

	*v = (vector_stage){k, s, w, var, {0}, false, false};
	if (w < 2 || op->nvars != var + 1 || op->vars[var].lo % w ||
	    (op->vars[var].hi - op->vars[var].lo) % w)
		return false;
	sched_node_each_access(op->body, look_at_read, v);
	return v->reads.n > 0;
}

/* Opens the vectors' path: where, for the whole block, every move is on
 * its width (the tensors moved on 16 bytes; an elementwise stage's
 * region's last dim and the first columns of the stages read on "width"
 * elements). */
static void print_vector_condition(const vector_stage *v)
{
	fused_kernel *k = v->k;
	int w = v->width;

	sched_buf_printf(k->buf, "\t\tif (((0ull");
	if (v->moves_global)
		sched_buf_printf(k->buf, " | (unsigned long long)t_%s", stage_target(k, v->stage)->name);
	for (int i = 0; i < v->reads.n; i++)
		if (local_stage(k, v->reads.access[i]->tensor) < 0)
			sched_buf_printf(k->buf, " | (unsigned long long)t_%s",
					 k->pr.graph->tensors[v->reads.access[i]->tensor].name);
	sched_buf_printf(k->buf, ") & 15) == 0");
	if (v->var < k->pr.op->ntarget_vars) /* an elementwise stage's region */
		sched_buf_printf(k->buf, " && lo_%d_%d %% %d == 0 && hi_%d_%d %% %d == 0",
				 v->stage, v->var, w, v->stage, v->var, w);
	for (int i = 0; i < v->reads.n; i++) {
		int s = local_stage(k, v->reads.access[i]->tensor);

		if (s >= 0)
			sched_buf_printf(k->buf, " && lo_%d_%d %% %d == 0", s,
					 group_of(k)->stages[s].rank - 1, w);
	}
	sched_buf_printf(k->buf, ") {\n");
}

/* The arrays the reads and keeps move through, and the reads, at the
 * first element of the thread's. */
static void print_vector_loads(const vector_stage *v)
{
	fused_kernel *k = v->k;
	const char *last = var_name(k, v->var);

	for (int i = 0; i < v->reads.n; i++) {
		int t = v->reads.access[i]->tensor;

		sched_buf_printf(k->buf, "\t\t\t__align__(16) %s vec_%d[%d];\n",
				 local_stage(k, t) >= 0 ? "float" :
				 kgen_ctype(k->pr.graph->tensors[t].dtype, true), i, v->width);
	}
	if (v->moves_local)
		sched_buf_printf(k->buf, "\t\t\t__align__(16) float vec_local[%d];\n", v->width);
	if (v->moves_global)
		sched_buf_printf(k->buf, "\t\t\t__align__(16) %s vec_global[%d];\n",
				 kgen_ctype(stage_target(k, v->stage)->dtype, true), v->width);
	sched_buf_printf(k->buf, "\t\t\t{\n\t\t\t\tconst idx_t v_%s = first_%s;\n", last, last);
	for (int i = 0; i < v->reads.n; i++) {
		const sched_node *access = v->reads.access[i];
		const sched_tensor *t = &k->pr.graph->tensors[access->tensor];
		int s = local_stage(k, access->tensor);

		sched_buf_printf(k->buf, "\t\t\t\tkmove(vec_%d, &", i);
		if (s >= 0) {
			kgen_print_local(k->buf, &k->pr, s, access);
		} else {
			sched_buf_printf(k->buf, "t_%s[", t->name);
			kgen_print_offset(k->buf, &k->pr, access);
			sched_buf_printf(k->buf, "]");
		}
		sched_buf_printf(k->buf, ", %d);\n", v->width * (s >= 0 ? 4 :
					  sched_dtype_bytes(t->dtype)));
	}
	sched_buf_printf(k->buf, "\t\t\t}\n");
}

/* The element's keeps: into the arrays moved at once, or as one. */
static void print_vector_keeps(const vector_stage *v)
{
	fused_kernel *k = v->k;
	const sched_stage *st = &group_of(k)->stages[v->stage];

	if (v->moves_local) {
		sched_buf_printf(k->buf, "\t\t\t\tvec_local[u] = ");
		print_rounded(k, v->stage, "x");
		sched_buf_printf(k->buf, ";\n");
	} else if (keeps_local(st)) {
		print_keep_local(k, v->stage, "\t\t\t\t", "x");
	}
	if (v->moves_global)
		sched_buf_printf(k->buf, "\t\t\t\tvec_global[u] = %sx);\n",
				 kgen_store_open(stage_target(k, v->stage)));
	else if (keeps_global(st))
		print_keep_global(k, v->stage, "\t\t\t\t", "x");
}

static void print_vector_stores(const vector_stage *v)
{
	fused_kernel *k = v->k;
	const sched_tensor *t = stage_target(k, v->stage);
	const char *last = var_name(k, v->var);

	if (!v->moves_local && !v->moves_global)
		return;
	sched_buf_printf(k->buf, "\t\t\t{\n\t\t\t\tconst idx_t v_%s = first_%s;\n", last, last);
	if (v->moves_local) {
		sched_buf_printf(k->buf, "\t\t\t\tkmove(&");
		kgen_print_local(k->buf, &k->pr, v->stage, NULL);
		sched_buf_printf(k->buf, ", vec_local, %d);\n", v->width * 4);
	}
	if (v->moves_global) {
		sched_buf_printf(k->buf, "\t\t\t\tkmove(&t_%s[", t->name);
		kgen_print_target_offset(k->buf, &k->pr);
		sched_buf_printf(k->buf, "], vec_global, %d);\n",
				 v->width * sched_dtype_bytes(t->dtype));
	}
	sched_buf_printf(k->buf, "\t\t\t}\n");
}

/* Opens the loop over the thread's "width" values of the variable, with
 * "const float NAME" the body at each, its reads from the arrays. */
static void print_vector_body(const vector_stage *v, const char *name)
{
	fused_kernel *k = v->k;
	const char *var = var_name(k, v->var);

	sched_buf_printf(k->buf, "#pragma unroll\n\t\t\tfor (int u = 0; u < %d; u++) {\n"
			 "\t\t\t\tconst idx_t v_%s = first_%s + u;\n\t\t\t\tconst float %s = ",
			 v->width, var, var, name);
	k->pr.vectors = &v->reads;
	kgen_print_value(k->buf, &k->pr, k->pr.op->body);
	k->pr.vectors = NULL;
	sched_buf_printf(k->buf, ";\n");
}

/* Thread t runs the "width" elements from e = width (t + i blockDim.x),
 * which lie in one row, as "width" divides the last dim. */
static void print_vector_elements(const vector_stage *v)
{
	fused_kernel *k = v->k;
	const sched_stage *st = &group_of(k)->stages[v->stage];
	int64_t stride = stage_elements(k, v->stage);
	int s = v->stage, last = st->rank - 1;

	sched_buf_printf(k->buf, "\t\tfor (idx_t q = threadIdx.x; q < %lld; q += blockDim.x) {\n"
			 "\t\t\tconst idx_t e = q * %d;\n", (long long)(stride / v->width),
			 v->width);
	for (int d = 0; d < st->rank; d++) {
		const char *kind = d == last ? "first" : "v";

		stride /= st->extent[d];
		sched_buf_printf(k->buf, "\t\t\tconst idx_t %s_%s = lo_%d_%d + e / %lld %% %lld;\n"
				 "\t\t\tif (%s_%s >= hi_%d_%d)\n\t\t\t\tcontinue;\n", kind,
				 var_name(k, d), s, d, (long long)stride, (long long)st->extent[d],
				 kind, var_name(k, d), s, d);
	}
	print_vector_loads(v);
	print_vector_body(v, "x");
	print_vector_keeps(v);
	sched_buf_printf(k->buf, "\t\t\t}\n");
	print_vector_stores(v);
	sched_buf_printf(k->buf, "\t\t}\n");
}

/* The threads that share each element of reduction stage "s": when the
 * stage has fewer elements than the block has threads, the spare ones
 * split the reductions, a power of two of them up to a warp per element,
 * combined with shuffles. 1 when each element is one thread's. */
static int sharing_threads(const fused_kernel *k, int s)
{
	unsigned threads = block_threads(k);
	int64_t elements = stage_elements(k, s), points = sched_op_reduction_points(k->pr.op);
	int n = 1;

	if (k->pr.op->reducer == SCHED_RED_NONE || threads % 32)
		return 1;
	while (n < 32 && elements * n * 2 <= threads && n * 2 <= points)
		n *= 2;
	return n;
}

/* Thread t of the n sharing an element folds its reduction points w (t +
 * i n) to w (t + i n) + w - 1, loading its reads along the reduction
 * variable w at a time. */
static void print_vector_fold(const vector_stage *v, int n)
{
	fused_kernel *k = v->k;
	const sched_op *op = k->pr.op;
	const char *name = var_name(k, v->var);

	sched_buf_printf(k->buf, "\t\t\tif (live)\n"
			 "\t\t\tfor (idx_t r = threadIdx.x %% %d * %d; r < %lld; r += %d) {\n"
			 "\t\t\tconst idx_t first_%s = %lld + r;\n", n, v->width,
			 (long long)sched_op_reduction_points(op), n * v->width, name,
			 (long long)op->vars[v->var].lo);
	print_vector_loads(v);
	print_vector_body(v, "term");
	sched_buf_printf(k->buf, "\t\t\t\t");
	kgen_print_combine(k->buf, op->reducer, "x", "term");
	sched_buf_printf(k->buf, "\n\t\t\t}\n\t\t\t}\n");
}

/* Element e of the region runs on the "n" threads n * (e mod (blockDim.x /
 * n)) onwards: each folds every n-th reduction point (or, with vectors,
 * every n-th run of w), then they combine by shuffles (a butterfly, so
 * all end with the result) and the first keeps it. Every thread runs
 * every round of the loop, as the shuffles need all of a warp. */
static void print_cuda_shared_reduction(fused_kernel *k, int s, int n)
{
	const sched_stage *st = &group_of(k)->stages[s];
	const sched_op *op = k->pr.op;
	int64_t stride = stage_elements(k, s);
	char first[32], step[16];
	vector_stage v;

	sched_buf_printf(k->buf, "\t\tfor (idx_t base = 0; base < %lld; base += %u) {\n"
			 "\t\t\tconst idx_t e = base + threadIdx.x / %d;\n"
			 "\t\t\tbool live = e < %lld;\n", (long long)stride,
			 block_threads(k) / n, n, (long long)stride);
	for (int d = 0; d < st->rank; d++) {
		stride /= st->extent[d];
		sched_buf_printf(k->buf, "\t\t\tconst idx_t v_%s = lo_%d_%d + e / %lld %% %lld;\n"
				 "\t\t\tlive = live && v_%s < hi_%d_%d;\n", var_name(k, d),
				 s, d, (long long)stride, (long long)st->extent[d],
				 var_name(k, d), s, d);
	}
	snprintf(first, sizeof(first), "threadIdx.x %% %d", n);
	snprintf(step, sizeof(step), "%d", n);
	if (plan_reduction_vectors(k, s, &v)) {
		sched_buf_printf(k->buf, "\t\t\tfloat x = %s;\n",
				 kgen_reducer_identity(op->reducer));
		print_vector_condition(&v);
		print_vector_fold(&v, n);
		sched_buf_printf(k->buf, "\t\t} else {\n");
		kgen_print_strided_reduction(k->buf, &k->pr, k->kernel->schedule.unroll, "xs",
					     "live", first, step, NULL, "\t\t\t");
		sched_buf_printf(k->buf, "\t\t\tx = xs;\n\t\t}\n");
	} else {
		kgen_print_strided_reduction(k->buf, &k->pr, k->kernel->schedule.unroll, "x",
					     "live", first, step, NULL, "\t\t\t");
	}
	sched_buf_printf(k->buf, "\t\t\tfor (int o = %d; o > 0; o >>= 1) {\n"
			 "\t\t\t\tconst float y = __shfl_xor_sync(0xffffffffu, x, o);\n"
			 "\t\t\t\t", n / 2);
	kgen_print_combine(k->buf, op->reducer, "x", "y");
	sched_buf_printf(k->buf, "\n\t\t\t}\n\t\t\tif (live && threadIdx.x %% %d == 0) {\n", n);
	print_keep(k, s, "\t\t\t\t", "x");
	sched_buf_printf(k->buf, "\t\t\t}\n\t\t}\n");
}

/* An elementwise or reduction stage: with the vectors' path first where
 * the stage has vectors, then an element per thread. */
static void print_cuda_stage(fused_kernel *k, int s)
{
	const sched_op *op = k->pr.op;
	int sharing = sharing_threads(k, s);
	vector_stage v;
	bool vectors = plan_vectors(k, s, &v), own_map = sharing > 1 || vectors;

	/* The widths assume element e on thread e mod blockDim.x: a stage
	 * whose elements run elsewhere needs barriers on both sides. */
	if (group_of(k)->stages[s].barrier || k->barrier_due || own_map)
		sched_buf_printf(k->buf, "\t\t__syncthreads();\n");
	k->barrier_due = own_map;
	if (sharing > 1)
		return print_cuda_shared_reduction(k, s, sharing);
	if (vectors) {
		print_vector_condition(&v);
		print_vector_elements(&v);
		sched_buf_printf(k->buf, "\t\t} else {\n");
	}
	print_cuda_elements(k, s);
	if (op->reducer == SCHED_RED_NONE) {
		sched_buf_printf(k->buf, "\t\t\tconst float x = ");
		kgen_print_value(k->buf, &k->pr, op->body);
		sched_buf_printf(k->buf, ";\n");
	} else {
		print_reduced_element(k, "\t\t\t", NULL);
	}
	print_keep(k, s, "\t\t\t", "x");
	sched_buf_printf(k->buf, "\t\t}\n");
	if (vectors)
		sched_buf_printf(k->buf, "\t\t}\n");
}

/* A branch's first op, a matrix product, on tensor cores
 * (kgen_fused_mma_unfit): its stages of A and B in the block's local
 * memory, which later stages write only after it (hence the barriers on
 * both sides), then each accumulator kept as any stage keeps an element.
 * Its elements are its warps' lanes', so the next stage waits for it. A
 * tile whose columns do not start on 8 elements (16 bytes, what cp.async
 * needs) traps rather than read astray. */
static void print_cuda_mma_stage(fused_kernel *k, int s)
{
	const sched_graph *g = k->pr.graph;
	sched_contraction c;

	sched_op_contraction(g, k->pr.op->index, &c);
	sched_buf_printf(k->buf, "\t\t__syncthreads();\n\t\t{\n"
			 "\tconst idx_t m0 = lo_%d_0, n0 = lo_%d_1;\n"
			 "\tif (n0 %% 8)\n\t\t__trap();\n", s, s);
	kgen_print_mma_pipeline(k->buf, g, &c, &k->kernel->schedule.mma);
	sched_buf_printf(k->buf, "\t__syncthreads();\n");
	kgen_print_mma_accumulators(k->buf);
	sched_buf_printf(k->buf, "\t\t\t\tconst idx_t v_%s = m, v_%s = n;\n"
			 "\t\t\t\tif (v_%s < hi_%d_0 && v_%s < hi_%d_1) {\n"
			 "\t\t\t\t\tconst float x = acc[i][j][r];\n", var_name(k, 0),
			 var_name(k, 1), var_name(k, 0), s, var_name(k, 1), s);
	print_keep(k, s, "\t\t\t\t\t", "x");
	sched_buf_printf(k->buf, "\t\t\t\t}\n\t\t\t}\n\t\t}\n");
	k->barrier_due = true;
}

/* ---- blocks, lanes, branches ---- */

static void print_stage(fused_kernel *k, int s)
{
	const sched_stage *st = &group_of(k)->stages[s];

	if (st->store == SCHED_STORE_INLINE)
		return;
	use_stage(k, s);
	sched_buf_printf(k->buf, "\t\t/* op %d: %s */\n", k->pr.op->index,
			 stage_target(k, s)->name);
	if (k->cuda && k->kernel->schedule.mma.bm && sched_group_starts_branch(group_of(k), s))
		return print_cuda_mma_stage(k, s);
	if (k->cuda)
		return print_cuda_stage(k, s);
	sched_buf_printf(k->buf, "\t\t{\n");
	if (k->pr.op->reducer == SCHED_RED_NONE)
		print_cpu_elementwise(k, s);
	else if (reduction_inside(k->pr.op))
		print_cpu_reducing_inside(k, s);
	else
		print_cpu_reducing_outside(k, &(pass){1, {s}});
	sched_buf_printf(k->buf, "\t\t}\n");
}

/* The branch's block coordinates from the lane's block lb. */
static void print_block_coordinates(fused_kernel *k, int b)
{
	const sched_branch *br = &group_of(k)->branches[b];
	int64_t stride = br->blocks;

	for (int d = 0; d < br->rank; d++) {
		stride /= br->grid[d];
		sched_buf_printf(k->buf, "\t\tconst idx_t b%d = lb / %lld %% %lld;\n",
				 d, (long long)stride, (long long)br->grid[d]);
	}
}

/* The bounds of the regions of branch b's stages. */
static void print_region_bounds(fused_kernel *k, int b)
{
	const sched_group *g = group_of(k);

	for (int s = 0; s < g->nstages; s++) {
		if (g->stages[s].branch != b ||
		    g->stages[s].store == SCHED_STORE_INLINE)
			continue;
		for (int d = 0; d < g->stages[s].rank; d++)
			sched_buf_printf(
				k->buf,
				"\t\tconst idx_t lo_%d_%d = %s, hi_%d_%d = %s;\n", s, d,
				g->stages[s].lo[d], s, d, g->stages[s].hi[d]);
	}
}

static void print_branch(fused_kernel *k, int b)
{
	const sched_group *g = group_of(k);

	sched_buf_printf(k->buf, "\t{\n");
	print_block_coordinates(k, b);
	print_region_bounds(k, b);
	for (int s = 0; s < g->nstages; s++)
		if (g->stages[s].branch == b)
			print_stage(k, s);
	sched_buf_printf(k->buf, "\t}\n");
}

/* The stage of branch "b" where it has one, else -1. */
static int only_stage(const sched_group *g, int b)
{
	int found = -1;

	for (int s = 0; s < g->nstages; s++) {
		if (g->stages[s].branch != b)
			continue;
		if (found >= 0)
			return -1;
		found = s;
	}
	return found;
}

static bool same_vars(const sched_op *a, const sched_op *b)
{
	if (a->nvars != b->nvars || a->ntarget_vars != b->ntarget_vars)
		return false;
	for (int v = 0; v < a->nvars; v++)
		if (strcmp(a->vars[v].name, b->vars[v].name) ||
		    a->vars[v].lo != b->vars[v].lo || a->vars[v].hi != b->vars[v].hi)
			return false;
	return true;
}

static bool same_region(const sched_stage *a, const sched_stage *b)
{
	if (a->rank != b->rank)
		return false;
	for (int d = 0; d < a->rank; d++)
		if (strcmp(a->lo[d], b->lo[d]) || strcmp(a->hi[d], b->hi[d]))
			return false;
	return true;
}

static bool same_grid(const sched_branch *a, const sched_branch *b)
{
	if (a->rank != b->rank)
		return false;
	for (int d = 0; d < a->rank; d++)
		if (a->grid[d] != b->grid[d])
			return false;
	return true;
}

/* Whether the lone stages "a" and "b" of two branches of a lane can run
 * in one pass (cpu): column reductions over the same region, in the same
 * loops (variables of the same names and ranges) and the same blocks.
 * ln_grad_params' dgamma and dbeta then read dy once, not twice. */
static bool same_pass(const fused_kernel *k, int a, int b)
{
	const sched_group *g = group_of(k);
	const sched_stage *sa = &g->stages[a], *sb = &g->stages[b];
	const sched_op *oa = &k->pr.graph->ops[sa->op], *ob = &k->pr.graph->ops[sb->op];

	return !k->cuda && oa->reducer != SCHED_RED_NONE &&
	       ob->reducer != SCHED_RED_NONE && !reduction_inside(oa) &&
	       !reduction_inside(ob) && same_vars(oa, ob) && same_region(sa, sb) &&
	       same_grid(&g->branches[sa->branch], &g->branches[sb->branch]);
}

/* Branch "b" and the branches after it in its lane whose lone stages
 * run in one pass with its own, into "p"; the last branch taken. */
static int gather_pass(fused_kernel *k, int b, pass *p)
{
	const sched_group *g = group_of(k);
	int last = b;

	p->n = 1;
	p->stage[0] = only_stage(g, b);
	for (int next = b + 1;
	     p->stage[0] >= 0 && next < g->nbranches && p->n < PASS_STAGES; next++) {
		int s = only_stage(g, next);

		if (g->branches[next].lane != g->branches[b].lane)
			continue;
		if (s < 0 || !same_pass(k, p->stage[0], s))
			break;
		p->stage[p->n++] = s;
		last = next;
	}
	return last;
}

/* The branches of one pass, "first" among them. */
static void print_pass(fused_kernel *k, int first, const pass *p)
{
	const sched_group *g = group_of(k);

	sched_buf_printf(k->buf, "\t{\n");
	print_block_coordinates(k, first);
	for (int i = 0; i < p->n; i++)
		print_region_bounds(k, g->stages[p->stage[i]].branch);
	sched_buf_printf(k->buf, "\t\t/* in one pass:");
	for (int i = 0; i < p->n; i++) {
		use_stage(k, p->stage[i]);
		sched_buf_printf(k->buf, "%s op %d: %s", i ? "," : "", k->pr.op->index,
				 stage_target(k, p->stage[i])->name);
	}
	sched_buf_printf(k->buf, " */\n\t\t{\n");
	print_cpu_reducing_outside(k, p);
	sched_buf_printf(k->buf, "\t\t}\n\t}\n");
}

static void print_lane(fused_kernel *k, int l)
{
	const sched_group *g = group_of(k);

	for (int b = 0; b < g->nbranches; b++) {
		pass p;
		int last;

		if (g->branches[b].lane != l)
			continue;
		last = gather_pass(k, b, &p);
		if (p.n > 1)
			print_pass(k, b, &p);
		else
			print_branch(k, b);
		b = last;
	}
}

static void print_lanes(fused_kernel *k)
{
	const sched_group *g = group_of(k);
	int64_t first = 0;

	for (int l = 0; l < g->nlanes; first += g->lane_blocks[l++]) {
		sched_buf_printf(
			k->buf,
			"\t%sif (blk < %lld) {\n\tconst idx_t lb = blk - %lld;\n",
			l ? "else " : "", (long long)(first + g->lane_blocks[l]),
			(long long)first);
		print_lane(k, l);
		sched_buf_printf(k->buf, "\t}\n");
	}
}

/* cuda: the block's local memory, "floats" of them; with products on
 * tensor cores, as many as their stages need too, which alias it (the
 * stages are done before the group's buffers are written). */
static void print_cuda_local(fused_kernel *k, int64_t floats)
{
	int64_t stages;

	if (!k->kernel->schedule.mma.bm)
		return sched_buf_printf(k->buf, "\t__shared__ __align__(16) float local[%lld];\n",
					(long long)floats);
	stages = (kgen_mma_shared_bytes(&k->kernel->schedule.mma,
					kgen_mma_factor_bytes(k->pr.graph, k->kernel)) + 3) / 4;
	sched_buf_printf(k->buf, "\t__shared__ __align__(16) float local[%lld];\n"
			 "\telem_t *const as = (elem_t *)local;\n"
			 "\telem_t *const bs = as + STAGES * A_STAGE;\n",
			 (long long)(floats > stages ? floats : stages));
}

static void print_body(fused_kernel *k)
{
	const sched_group *g = group_of(k);
	int64_t floats = g->local_floats ? g->local_floats : 1;
	bool parallel;

	if (k->cuda) {
		print_cuda_local(k, floats);
		sched_buf_printf(k->buf, "\tconst idx_t blk = %s;\n", kgen_cuda_tile(k->wrapped));
		print_lanes(k);
		return;
	}
	/* local is a thread's, declared outside the loop over the blocks:
	 * declared in its body, GCC 12 at -O2 on AVX-512 (KVEC 16) dropped
	 * a block's stores to it and read the previous block's values
	 * (bert_qkv_small with its three head splits in one kernel; not at
	 * -O1 or with -fno-tree-vrp) */
	parallel = k->kernel->schedule.parallel > 0 && g->blocks > 1;
	sched_buf_printf(k->buf, "%s\t{\n\tfloat local[%lld];\n%s",
			 parallel ? "#pragma omp parallel\n" : "", (long long)floats,
			 parallel ? "#pragma omp for schedule(static)\n" : "");
	sched_buf_printf(k->buf, "\tfor (idx_t blk = 0; blk < %lld; blk++) {\n",
			 (long long)g->blocks);
	print_lanes(k);
	sched_buf_printf(k->buf, "\t}\n\tKSTREAM_FENCE();\n\t}\n");
}

char *kgen_print_fused(const sched_graph *graph, const kgen_kernel *kernel,
		       bool cuda, bool wrapped)
{
	sched_group *group;
	sched_contraction product;
	sched_buf buf = {0};
	fused_kernel k = {{graph, NULL, NULL, NULL}, kernel, &buf, cuda, wrapped, false};

	if (kgen_kernel_group(graph, kernel, cuda, &group, NULL) < 0)
		return NULL;
	k.pr.group = group;
	kgen_print_helpers(&buf, cuda, kgen_wide_indices(graph) || !cuda);
	print_header(&k);
	print_recomputed(&k);
	if (cuda && kernel->schedule.mma.bm &&
	    sched_op_contraction(graph, group->stages[0].op, &product))
		kgen_print_mma_definitions(&buf, graph, &product, &kernel->schedule.mma);
	print_params(&k);
	print_body(&k);
	sched_buf_printf(&buf, "}\n");
	sched_group_free(group);
	return buf.str;
}
