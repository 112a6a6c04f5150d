/*
 * print_chunks.c: cpu loops run KVEC elements at a time, for their f16.
 *
 * GCC vectorizes no scalar f16 conversion on a cpu without AVX512-FP16,
 * so f16_load and f16_store are integer operations that vectorize: about
 * ten of them per element, which leave a memory-bound kernel bound by
 * them. Here a loop's f16 reads along its variable are widened KVEC at a
 * time into float arrays by the conversion instructions (F16C), and its
 * f16 keeps narrowed from one (kf16_load_vec, kf16_store_vec in the
 * helpers, print.c); the element's arithmetic stays a simd loop of
 * floats. The last elements, fewer than KVEC, run as the loop would
 * without chunks.
 */
#include "print_int.h"

static const char *var_name(const kgen_chunks *c)
{
	return c->pr->op->vars[c->var].name;
}

/* An f16 read from global memory (not a fused member's local or
 * recomputed value) along the chunks' variable. */
static bool chunked_read(const kgen_chunks *c, const sched_node *access)
{
	const kgen_printer *pr = c->pr;
	const sched_tensor *t = &pr->graph->tensors[access->tensor];
	int stage = pr->group ? sched_group_stage_of(pr->group, t->writer) : -1;

	if (stage >= 0 && pr->group->stages[stage].store != SCHED_STORE_GLOBAL)
		return false;
	return t->dtype == SCHED_F16 && kgen_walks_last(access, c->var);
}

static void look_at_read(const sched_node *access, void *user)
{
	kgen_chunks *c = user;

	for (int i = 0; i < c->reads.n; i++)
		if (sched_node_same(c->reads.access[i], access))
			return;
	if (c->reads.n < KGEN_MAX_VECTOR_READS && chunked_read(c, access))
		c->reads.access[c->reads.n++] = access;
}

bool kgen_chunk_more_reads(kgen_chunks *c)
{
	sched_node_each_access(c->pr->op->body, look_at_read, c);
	return c->reads.n > 0;
}

bool kgen_chunk_reads(kgen_chunks *c)
{
	c->reads = (kgen_vector_reads){0, true, {0}};
	return kgen_chunk_more_reads(c);
}

static const char *chunk_width(const kgen_chunks *c)
{
	return c->width ? c->width : "KVEC";
}

/* Each f16 read of the chunk, KVEC at a time from first_V. */
static void print_chunk_loads(const kgen_chunks *c)
{
	const char *in = c->indent, *q = c->width ? " + q" : "";

	for (int i = 0; i < c->reads.n; i++) {
		const sched_node *access = c->reads.access[i];

		if (c->width)
			sched_buf_printf(c->buf,
					 "%s\t\tfor (int q = 0; q < %s; q += KVEC)\n",
					 in, c->width);
		sched_buf_printf(c->buf, "%s\t\t%skf16_load_vec(vec_%d%s, &t_%s[", in,
				 c->width ? "\t" : "", i, q,
				 c->pr->graph->tensors[access->tensor].name);
		kgen_print_offset(c->buf, c->pr, access);
		sched_buf_printf(c->buf, "%s]);\n", q);
	}
}

void kgen_print_chunks_open(kgen_chunks *c)
{
	const char *v = var_name(c), *in = c->indent, *w = chunk_width(c);

	sched_buf_printf(c->buf,
			 "%s{\n%s\tidx_t first_%s = %s;\n"
			 "%s\tfor (; first_%s + %s <= %s; first_%s += %s) {\n",
			 in, in, v, c->lo, in, v, w, c->hi, v, w);
	for (int i = 0; i < c->reads.n; i++)
		sched_buf_printf(c->buf, "%s\tfloat vec_%d[%s];\n", in, i, w);
	sched_buf_printf(
		c->buf,
		"%s\tfloat vec_x[%s];\n%s\t{\n%s\t\tconst idx_t v_%s = first_%s;\n", in,
		w, in, in, v, v);
	print_chunk_loads(c);
	sched_buf_printf(c->buf,
			 "%s\t}\n#pragma omp simd\n%s\tfor (int u = 0; u < %s; u++) {\n"
			 "%s\t\tconst idx_t v_%s = first_%s + u;\n",
			 in, in, w, in, v, v);
	c->pr->vectors = &c->reads;
}

void kgen_print_chunks_middle(kgen_chunks *c)
{
	c->pr->vectors = NULL;
	sched_buf_printf(c->buf, "%s\t}\n", c->indent);
}

void kgen_print_chunk_value(kgen_chunks *c, const char *indent)
{
	const sched_node *body = c->pr->op->body;
	bool whole_chunk_exp = kgen_exp_rounded_to_f16(c->pr, body);

	sched_buf_printf(c->buf, "%svec_x[u] = ", indent);
	kgen_print_value(c->buf, c->pr, whole_chunk_exp ? body->args[0] : body);
	sched_buf_printf(c->buf, ";\n");
	kgen_print_chunks_middle(c);
	if (whole_chunk_exp)
		sched_buf_printf(c->buf, "%s\tkexp_f16_vec(vec_x);\n", c->indent);
}

void kgen_print_chunk_f16_store(const kgen_chunks *c, const char *tensor, bool stream)
{
	const char *v = var_name(c), *in = c->indent;

	sched_buf_printf(c->buf,
			 "%s\t{\n%s\t\tconst idx_t v_%s = first_%s;\n"
			 "%s\t\tkf16_%s_vec(&t_%s[",
			 in, in, v, v, in, stream ? "stream" : "store", tensor);
	kgen_print_target_offset(c->buf, c->pr);
	sched_buf_printf(c->buf, "], vec_x);\n%s\t}\n", in);
}

void kgen_print_chunks_done(kgen_chunks *c)
{
	sched_buf_printf(c->buf, "%s\t}\n", c->indent);
}

void kgen_print_chunks_tail(kgen_chunks *c, const char *pragma)
{
	const char *v = var_name(c), *in = c->indent;

	sched_buf_printf(c->buf,
			 "%s%s\tfor (idx_t v_%s = first_%s; v_%s < %s; v_%s++) {\n",
			 pragma, in, v, v, v, c->hi, v);
}

void kgen_print_chunks_close(kgen_chunks *c)
{
	sched_buf_printf(c->buf, "%s\t}\n%s}\n", c->indent, c->indent);
}
