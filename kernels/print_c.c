/*
 * print_c.c: a kernel as C with OpenMP, for the cpu backend.
 *
 *   void NAME(void **tensors)      one pointer per tensor, in graph order
 *
 * The output is cut into tiles; the outer "parallel" tile loops are shared
 * among OpenMP threads. Inside a tile, a reducing op keeps one float
 * accumulator per element and runs the reduction loops outside the element
 * loops, so that the innermost loop walks the last output dim (simd).
 */
#include <stdlib.h>

#include "print_int.h"

typedef struct c_kernel {
	kgen_printer pr;
	const kgen_kernel *kernel;
	const sched_tensor *target;
	sched_buf *buf;
} c_kernel;

static const char *var_name(const c_kernel *k, int v)
{
	return k->pr.op->vars[v].name;
}

/* The tensors the op touches, from the array of all tensors. */
static void print_params(const c_kernel *k)
{
	const sched_graph *g = k->pr.graph;

	sched_buf_printf(k->buf, "void %s(void **tensors)\n{\n", k->kernel->name);
	for (int t = 0; t < g->ntensors; t++)
		if (kgen_op_touches(k->pr.op, t))
			sched_buf_printf(k->buf, "\t%s%s *restrict t_%s = tensors[%d];\n",
					 t == k->pr.op->target ? "" : "const ",
					 kgen_ctype(g->tensors[t].dtype, false),
					 g->tensors[t].name, t);
}

static void print_tile_loops(const c_kernel *k)
{
	const kgen_schedule *s = &k->kernel->schedule;
	int rank = k->target->rank;

	if (s->parallel > 0)
		sched_buf_printf(k->buf, "#pragma omp parallel for collapse(%d) "
				 "schedule(static)\n", s->parallel);
	for (int d = 0; d < rank; d++)
		sched_buf_printf(k->buf, "\tfor (idx_t o_%d = 0; o_%d < %lld; o_%d += %lld)\n",
				 d, d, (long long)k->target->shape[d], d,
				 (long long)s->tile[d]);
	sched_buf_printf(k->buf, "\t{\n");
}

static void print_element_loop(const c_kernel *k, const char *indent, int d)
{
	sched_buf_printf(k->buf, "%sfor (idx_t v_%s = o_%d; v_%s < kmin(o_%d + %lld, %lld); v_%s++)\n",
			 indent, var_name(k, d), d, var_name(k, d), d,
			 (long long)k->kernel->schedule.tile[d],
			 (long long)k->target->shape[d], var_name(k, d));
}

/* Loops over the tile's elements; the last one, the simd loop, opens a
 * block of its own, since a pragma is no loop body. The caller closes it
 * with close_element_loops. */
static void print_element_loops(const c_kernel *k, const char *indent)
{
	const kgen_schedule *s = &k->kernel->schedule;
	int rank = k->target->rank;

	for (int d = 0; d < rank - 1; d++)
		print_element_loop(k, indent, d);
	sched_buf_printf(k->buf, "%s{\n", indent);
	if (rank == 0)
		return;
	if (s->vector > 1)
		sched_buf_printf(k->buf, "#pragma omp simd simdlen(%d)\n", s->vector);
	else
		sched_buf_printf(k->buf, "#pragma omp simd\n");
	print_element_loop(k, indent, rank - 1);
}

static void close_element_loops(const c_kernel *k, const char *indent)
{
	sched_buf_printf(k->buf, "%s}\n", indent);
}

/* The accumulator of the current element: acc[(v_0 - o_0) * ... ]. */
static char *acc_element(const c_kernel *k)
{
	sched_buf acc = {0};
	int64_t stride = 1;

	sched_buf_printf(&acc, "acc[0");
	for (int d = k->target->rank - 1; d >= 0; stride *= k->kernel->schedule.tile[d--])
		sched_buf_printf(&acc, " + (v_%s - o_%d) * %lld", var_name(k, d), d,
				 (long long)stride);
	sched_buf_printf(&acc, "]");
	return acc.str;
}

static void print_target_offset(const c_kernel *k)
{
	sched_buf_printf(k->buf, "t_%s[", k->target->name);
	kgen_print_target_offset(k->buf, &k->pr);
	sched_buf_printf(k->buf, "]");
}

static int64_t tile_elements(const c_kernel *k)
{
	int64_t n = 1;

	for (int d = 0; d < k->target->rank; d++)
		n *= k->kernel->schedule.tile[d];
	return n;
}

/* The reduction loops around the element loops; the innermost unrolled. */
static void print_reduction_loops(const c_kernel *k)
{
	const sched_op *op = k->pr.op;

	for (int v = op->ntarget_vars; v < op->nvars; v++) {
		if (v == op->nvars - 1)
			sched_buf_printf(k->buf, "#pragma GCC unroll %d\n",
					 k->kernel->schedule.unroll);
		sched_buf_printf(k->buf, "\t\tfor (idx_t v_%s = %lld; v_%s < %lld; v_%s++)\n",
				 var_name(k, v), (long long)op->vars[v].lo,
				 var_name(k, v), (long long)op->vars[v].hi,
				 var_name(k, v));
	}
}

static void print_reducing_tile(const c_kernel *k)
{
	const sched_op *op = k->pr.op;
	char *acc = acc_element(k);

	sched_buf_printf(k->buf, "\t\tfloat acc[%lld];\n\t\tfor (int a = 0; a < %lld; a++)\n"
			 "\t\t\tacc[a] = %s;\n", (long long)tile_elements(k),
			 (long long)tile_elements(k), kgen_reducer_identity(op->reducer));
	print_reduction_loops(k);
	print_element_loops(k, "\t\t");
	sched_buf_printf(k->buf, "\t\t{\n\t\t\tconst float x = ");
	kgen_print_value(k->buf, &k->pr, op->body);
	sched_buf_printf(k->buf, ";\n\t\t\t");
	kgen_print_combine(k->buf, op->reducer, acc ? acc : "", "x");
	sched_buf_printf(k->buf, "\n\t\t}\n");
	close_element_loops(k, "\t\t");
	print_element_loops(k, "\t\t");
	sched_buf_printf(k->buf, "\t\t\t");
	print_target_offset(k);
	sched_buf_printf(k->buf, " = %s%s);\n", kgen_store_open(k->target),
			 acc ? acc : "");
	close_element_loops(k, "\t\t");
	free(acc);
}

/* The chunks' stores from vec_x at first_V: f16 narrowed KVEC at a time,
 * other types as one. */
static void print_chunk_stores(const c_kernel *k, const kgen_chunks *c)
{
	const char *v = var_name(k, c->var);

	if (k->target->dtype == SCHED_F16) {
		kgen_print_chunk_f16_store(c, k->target->name, false);
		return;
	}
	sched_buf_printf(k->buf,
			 "#pragma omp simd\n\t\t\tfor (int u = 0; u < KVEC; u++) {\n"
			 "\t\t\t\tconst idx_t v_%s = first_%s + u;\n\t\t\t\t",
			 v, v);
	print_target_offset(k);
	sched_buf_printf(k->buf, " = %svec_x[u]);\n\t\t\t}\n",
			 kgen_store_open(k->target));
}

/* The tile in chunks along its last dim where the op reads f16 along it
 * or stores f16 (print_chunks.c); false, printing nothing, otherwise. */
static bool print_elementwise_chunks(c_kernel *k)
{
	int last = k->target->rank - 1;
	char lo[32], hi[96];
	kgen_chunks c = {&k->pr, k->buf, last, lo, hi, "\t\t", {0}, NULL};

	if (last < 0 || (!kgen_chunk_reads(&c) && k->target->dtype != SCHED_F16))
		return false;
	snprintf(lo, sizeof(lo), "o_%d", last);
	snprintf(hi, sizeof(hi), "kmin(o_%d + %lld, %lld)", last,
		 (long long)k->kernel->schedule.tile[last],
		 (long long)k->target->shape[last]);
	for (int d = 0; d < last; d++)
		print_element_loop(k, "\t\t", d);
	kgen_print_chunks_open(&c);
	kgen_print_chunk_value(&c, "\t\t\t\t");
	print_chunk_stores(k, &c);
	kgen_print_chunks_done(&c);
	kgen_print_chunks_tail(&c, "#pragma omp simd\n");
	sched_buf_printf(k->buf, "\t\t\t\t");
	print_target_offset(k);
	sched_buf_printf(k->buf, " = %s", kgen_store_open(k->target));
	kgen_print_value(k->buf, &k->pr, k->pr.op->body);
	sched_buf_printf(k->buf, ");\n");
	kgen_print_chunks_close(&c);
	return true;
}

static void print_elementwise_tile(c_kernel *k)
{
	if (print_elementwise_chunks(k))
		return;
	print_element_loops(k, "\t\t");
	sched_buf_printf(k->buf, "\t\t\t");
	print_target_offset(k);
	sched_buf_printf(k->buf, " = %s", kgen_store_open(k->target));
	kgen_print_value(k->buf, &k->pr, k->pr.op->body);
	sched_buf_printf(k->buf, ");\n");
	close_element_loops(k, "\t\t");
}

char *kgen_print_c(const sched_graph *graph, const kgen_plan *plan, int index)
{
	const kgen_kernel *kernel = &plan->kernels[index];
	const sched_op *op = kgen_kernel_op(graph, kernel);
	sched_buf buf = {0};

	if (kernel->schedule.library)
		return kgen_print_library_c(graph, kernel);
	if (kernel->schedule.micro.mr)
		return kgen_print_micro(graph, kernel);
	if (kernel->nops > 1)
		return kgen_print_fused(graph, kernel, false, false);
	c_kernel k = {{graph, op, NULL, NULL}, kernel, &graph->tensors[op->target], &buf};

	kgen_print_helpers(&buf, false, true);
	kgen_print_header(&buf, &k.pr, kernel->name);
	print_params(&k);
	print_tile_loops(&k);
	if (op->reducer == SCHED_RED_NONE)
		print_elementwise_tile(&k);
	else
		print_reducing_tile(&k);
	sched_buf_printf(&buf, "\t}\n}\n");
	return buf.str;
}
