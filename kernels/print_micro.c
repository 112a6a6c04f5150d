/*
 * print_micro.c: a contraction as register-blocked micro-kernels (cpu),
 * EXO's family of exactly-sized kernels (docs/design/kernels.md, "Micro-kernels").
 *
 * C = A B is cut into mc x nc blocks, one OpenMP task each. For every kc
 * deep slice of K, a task packs B's slice into panels nr wide (and, with
 * "pack", A's into panels mr high), then runs a micro-kernel per mr x nr
 * block of C: the block's accumulators stay in vector registers while
 * the slice streams through, and are added to C at the end. The edges of
 * M and N get micro-kernels of their own exact size (M % mr rows,
 * N % nr columns), printed only where there is an edge, instead of one
 * kernel that tests bounds. Vectors are GCC vector extensions as wide as
 * the machine's (16 floats with AVX-512, 8 with AVX2) where nr allows.
 * Products of one shape side by side (kgen_kernel_products) share the
 * family; each has its packing and its driver, run one after another.
 * A gathered product's B (a convolution's padded windows) is read in
 * place from a zero-padded copy of its tensor where it is a window of
 * it (kgen_conv_window, print_direct_driver), else packed by evaluating
 * its factor at each (k, n): im2row into the panels. A C that
 * is not f32 is staged: a task sums its block in f32 across the slices
 * of K and rounds it into C once, at the end, so that K is sliced
 * whatever C's dtype.
 */
#include <stdlib.h>

#include "print_int.h"

/* What the printer knows of the kernel: the product, its tensors, the
 * blocking, and the width of a vector in floats. */
typedef struct micro_printer {
	sched_buf *buf;
	const sched_graph *graph;
	const sched_op *op; /* the product being printed */
	sched_contraction c;
	const sched_tensor *a, *b, *target;
	kgen_micro s;
	int width;
	bool staged;     /* C not f32: blocks sum in f32 (print_driver) */
	bool direct;     /* B read in place from a padded copy (print_direct_driver) */
	kgen_window win; /* that copy, where direct */
	/* the columns a block of C may span: N, or a row of it where direct */
	int64_t row;
	const char *suffix; /* of this product's packing functions */
} micro_printer;

int kgen_cpu_vector_floats(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		return 16;
	return __builtin_cpu_supports("avx2") ? 8 : 4;
}

int kgen_micro_vector_floats(int nr)
{
	int width = kgen_cpu_vector_floats();

	while (nr % width)
		width /= 2;
	return width;
}

static const char *ctype(const sched_tensor *t)
{
	return kgen_ctype(t->dtype, false);
}

static void print_params(const micro_printer *p, int target)
{
	sched_buf_printf(p->buf, "\tconst %s *restrict t_a = tensors[%d];\n",
			 ctype(p->a), p->c.a);
	if (!p->c.gathered)
		sched_buf_printf(p->buf, "\tconst %s *restrict t_b = tensors[%d];\n",
				 ctype(p->b), p->c.b);
	sched_buf_printf(p->buf, "\t%s *restrict t_c = tensors[%d];\n",
			 ctype(p->target), target);
}

/* B's slice [pc, pc + kc) x [jc, jc + nc) into panels nr wide, each
 * p-major and zero-padded to whole vectors (the edge panel's width is
 * that of its own micro-kernel). */
static void print_pack_b(const micro_printer *p)
{
	sched_buf_printf(p->buf,
		"static void pack_b%s(const %s *restrict b, float *restrict bp, idx_t pc,\n"
		"\t\t   idx_t kc, idx_t jc, idx_t nc)\n"
		"{\n"
		"\tfor (idx_t jr = 0; jr < nc; jr += %d) {\n"
		"\t\tidx_t w = kmin(%d, nc - jr), wp = (w + %d) / %d * %d;\n"
		"\t\tfloat *panel = bp + jr * kc;\n"
		"\t\tfor (idx_t p = 0; p < kc; p++)\n"
		"\t\t\tfor (idx_t j = 0; j < wp; j++)\n"
		"\t\t\t\tpanel[p * wp + j] = j < w ? %sb[%lldLL + (pc + p) * %lldLL + "
		"(jc + jr + j) * %lldLL]) : 0.0f;\n"
		"\t}\n"
		"}\n",
		p->suffix, ctype(p->b), p->s.nr, p->s.nr,
		p->width - 1, p->width, p->width, kgen_load_open(p->b),
		(long long)p->c.b0, (long long)p->c.b_k, (long long)p->c.b_n);
}

static void declare_read(const sched_node *access, void *user)
{
	micro_printer *p = user;
	const sched_tensor *t = &p->graph->tensors[access->tensor];

	sched_buf_printf(p->buf, "\tconst %s *restrict t_%s = tensors[%d];\n\t(void)t_%s;\n",
			 ctype(t), t->name, access->tensor, t->name);
}

/* A gathered B (sched_op_gathered_contraction): its factor evaluated at
 * each (k, n) of the slice; the n vars decoded once per panel, the k vars
 * once per row of it, as int where indices fit (the loop then vectorizes
 * into masked gathers; 3.4 times faster for conv_pair's windows). */
static void print_pack_gathered_b(micro_printer *p)
{
	const sched_node *factor = p->op->body->args[p->c.factor_b];
	const char *type = kgen_wide_indices(p->graph) ? "idx_t" : "int";
	kgen_decoded n[2 * SCHED_MAX_RANK], k[2 * SCHED_MAX_RANK];
	int nn = kgen_decoded_vars(p->op, &p->c, false, n);
	int nk = kgen_decoded_vars(p->op, &p->c, true, k);

	sched_buf_printf(p->buf,
		"static void pack_b%s(void **tensors, float *restrict bp, idx_t pc,\n"
		"\t\t   idx_t kc, idx_t jc, idx_t nc)\n{\n", p->suffix);
	sched_node_each_access(factor, declare_read, p);
	sched_buf_printf(p->buf,
		"\tfor (idx_t jr = 0; jr < nc; jr += %d) {\n"
		"\t\tidx_t w = kmin(%d, nc - jr), wp = (w + %d) / %d * %d;\n"
		"\t\tfloat *panel = bp + jr * kc;\n",
		p->s.nr, p->s.nr, p->width - 1, p->width, p->width);
	for (int i = 0; i < nn; i++)
		sched_buf_printf(p->buf, "\t\t%s n_%s[NR];\n", type, n[i].name);
	sched_buf_printf(p->buf, "\t\tfor (idx_t j = 0; j < w; j++) {\n");
	for (int i = 0; i < nn; i++)
		sched_buf_printf(p->buf, "\t\t\tn_%s[j] = %lld + (jc + jr + j) / %lld %% %lld;\n",
				 n[i].name, n[i].lo, n[i].inner, n[i].extent);
	sched_buf_printf(p->buf, "\t\t}\n\t\tfor (idx_t p = 0; p < kc; p++) {\n");
	kgen_print_decoded(p->buf, k, nk, type, "(pc + p)", "\t\t\t");
	sched_buf_printf(p->buf, "\t\t\tfor (idx_t j = 0; j < w; j++) {\n");
	for (int i = 0; i < nn; i++)
		sched_buf_printf(p->buf, "\t\t\t\tconst %s v_%s = n_%s[j];\n\t\t\t\t(void)v_%s;\n",
				 type, n[i].name, n[i].name, n[i].name);
	sched_buf_printf(p->buf, "\t\t\t\tpanel[p * wp + j] = ");
	kgen_print_value(p->buf, &(kgen_printer){p->graph, p->op, NULL, NULL}, factor);
	sched_buf_printf(p->buf, ";\n\t\t\t}\n"
			 "\t\t\tfor (idx_t j = w; j < wp; j++)\n"
			 "\t\t\t\tpanel[p * wp + j] = 0.0f;\n\t\t}\n\t}\n}\n");
}

/* A's slice [ic, ic + mc) x [pc, pc + kc) into panels mr high (the edge
 * panel as high as its rows), each p-major. */
static void print_pack_a(const micro_printer *p)
{
	sched_buf_printf(p->buf,
		"static void pack_a%s(const %s *restrict a, float *restrict ap, idx_t ic,\n"
		"\t\t   idx_t mc, idx_t pc, idx_t kc)\n"
		"{\n"
		"\tfor (idx_t ir = 0; ir < mc; ir += %d) {\n"
		"\t\tidx_t h = kmin(%d, mc - ir);\n"
		"\t\tfloat *panel = ap + ir * kc;\n"
		"\t\tfor (idx_t p = 0; p < kc; p++)\n"
		"\t\t\tfor (idx_t i = 0; i < h; i++)\n"
		"\t\t\t\tpanel[p * h + i] = %sa[%lldLL + (ic + ir + i) * %lldLL + "
		"(pc + p) * %lldLL]);\n"
		"\t}\n"
		"}\n",
		p->suffix, ctype(p->a), p->s.mr, p->s.mr,
		kgen_load_open(p->a), (long long)p->c.a0,
		(long long)p->c.a_m, (long long)p->c.a_k);
}

/* Element (i, p) of the A operand of a micro-kernel: its packed panel, or
 * A itself from the block's first element. */
static void print_a_element(const micro_printer *p, int rows, int i)
{
	if (p->s.pack)
		sched_buf_printf(p->buf, "ap[p * %d + %d]", rows, i);
	else
		sched_buf_printf(p->buf, "%sa[%lldLL * %d + p * %lldLL])",
				 kgen_load_open(p->a), (long long)p->c.a_m, i,
				 (long long)p->c.a_k);
}

/* Adds the accumulators of row i, vector v (lanes of them) to C, or to
 * the task's f32 block of it (rows NC apart) where C is staged. */
static void print_store(const micro_printer *p, int i, int v, int lanes)
{
	const sched_tensor *c = p->target;
	long long at_m = (long long)p->c.c_m * i, cn = (long long)p->c.c_n;

	if (p->staged) {
		sched_buf_printf(p->buf,
			"\tfor (int l = 0; l < %d; l++)\n"
			"\t\tc[NC * %d + %d + l] = (first ? 0.0f : c[NC * %d + %d + l]) + "
			"acc_%d_%d[l];\n", lanes, i, v * p->width, i, v * p->width, i, v);
		return;
	}
	if (lanes == p->width && c->dtype == SCHED_F32 && cn == 1) {
		sched_buf_printf(p->buf,
			"\t{\n\t\tvf t = acc_%d_%d;\n"
			"\t\tif (!first)\n\t\t\tt += vload(c + %lldLL + %d);\n"
			"\t\tvstore(c + %lldLL + %d, t);\n\t}\n",
			i, v, at_m, v * p->width, at_m, v * p->width);
		return;
	}
	sched_buf_printf(p->buf,
		"\tfor (int l = 0; l < %d; l++) {\n"
		"\t\t%s *to = c + %lldLL + (%d + l) * %lldLL;\n"
		"\t\tfloat x = acc_%d_%d[l];\n"
		"\t\t*to = %sfirst ? x : %s*to) + x);\n"
		"\t}\n",
		lanes, kgen_ctype(c->dtype, false), at_m, v * p->width, cn, i, v,
		kgen_store_open(c), kgen_load_open(c));
}

/* The micro-kernel of a block of "rows" x "cols": rows x ceil(cols / width)
 * vector accumulators over kc steps, then added to C (stored, when
 * "first" is set). */
static void print_micro_kernel(const micro_printer *p, int rows, int cols)
{
	const sched_tensor *c = p->target;
	int vectors = (cols + p->width - 1) / p->width;

	sched_buf_printf(
		p->buf,
		"static inline void micro_%d_%d(idx_t kc, const %s *restrict ap,\n"
		"\t\t\t\tconst float *restrict bp, %s%s *restrict c, int first)\n{\n",
		rows, cols, p->s.pack ? "float" : ctype(p->a),
		p->direct ? "const idx_t *restrict koff, " : "",
		p->staged ? "float" : kgen_ctype(c->dtype, false));
	if (!p->s.pack)
		sched_buf_printf(p->buf, "\tconst %s *restrict a = ap;\n",
				 ctype(p->a));
	for (int i = 0; i < rows; i++)
		for (int v = 0; v < vectors; v++)
			sched_buf_printf(p->buf, "\tvf acc_%d_%d = {0};\n", i, v);
	sched_buf_printf(p->buf, "\tfor (idx_t p = 0; p < kc; p++) {\n");
	for (int v = 0; v < vectors; v++)
		if (p->direct)
			sched_buf_printf(
				p->buf,
				"\t\tconst vf b%d = vload(bp + koff[p] + %d);\n", v,
				v * p->width);
		else
			sched_buf_printf(
				p->buf, "\t\tconst vf b%d = vload(bp + p * %d + %d);\n",
				v, vectors * p->width, v * p->width);
	for (int i = 0; i < rows; i++) {
		sched_buf_printf(p->buf, "\t\t{\n\t\t\tconst float x = ");
		print_a_element(p, rows, i);
		sched_buf_printf(p->buf, ";\n");
		for (int v = 0; v < vectors; v++)
			sched_buf_printf(p->buf, "\t\t\tacc_%d_%d += x * b%d;\n", i, v, v);
		sched_buf_printf(p->buf, "\t\t}\n");
	}
	sched_buf_printf(p->buf, "\t}\n");
	for (int i = 0; i < rows; i++)
		for (int v = 0; v < vectors; v++)
			print_store(p, i, v, v < vectors - 1 || cols % p->width == 0
					       ? p->width : cols % p->width);
	sched_buf_printf(p->buf, "}\n");
}

/* The family: a micro-kernel per size of block that occurs. */
static void print_family(const micro_printer *p)
{
	int rows[2] = {p->s.mr, (int)(p->c.m % p->s.mr)};
	int cols[2] = {p->s.nr, (int)(p->row % p->s.nr)};

	for (int r = 0; r < 2; r++)
		for (int c = 0; c < 2; c++)
			if (rows[r] && cols[c])
				print_micro_kernel(p, rows[r], cols[c]);
}

/* The call of the micro-kernel of this block: full, or one of the edges.
 * Its columns are full where "full_cols" holds; "b" is its B argument. */
static void print_dispatch(const micro_printer *p, const char *full_cols, const char *b)
{
	int edge_rows = (int)(p->c.m % p->s.mr), edge_cols = (int)(p->row % p->s.nr);
	const char *a = p->s.pack ? "ap + ir * kcb" : "a_block";

	for (int r = 0; r < 2; r++) {
		int rows = r ? edge_rows : p->s.mr;

		if (!rows)
			continue;
		sched_buf_printf(p->buf, "\t\t\t\t\t%s {\n",
				 r ? "else" : edge_rows ? "if (ir + MR <= mcb)" : "");
		for (int c = 0; c < 2; c++) {
			int cols = c ? edge_cols : p->s.nr;

			if (!cols)
				continue;
			sched_buf_printf(p->buf,
					 "\t\t\t\t\t\t%s%s\n\t\t\t\t\t\t\t"
					 "micro_%d_%d(kcb, %s, %s, c, pc == 0);\n",
					 c         ? "else" :
					 edge_cols ? "if " :
						     "",
					 !c && edge_cols ? full_cols : "", rows, cols,
					 a, b);
		}
		sched_buf_printf(p->buf, "\t\t\t\t\t}\n");
	}
}

/* Where A is not packed, the micro-kernel's A: its block's first element. */
static void print_a_block(const micro_printer *p)
{
	if (!p->s.pack)
		sched_buf_printf(p->buf,
				 "\t\t\t\t\tconst %s *a_block = t_a + %lldLL + "
				 "(ic + ir) * %lldLL + pc * %lldLL;\n",
				 ctype(p->a), (long long)p->c.a0, (long long)p->c.a_m,
				 (long long)p->c.a_k);
}

/* A staged block, summed over every slice of K, rounded into C. */
static void print_unstage(const micro_printer *p)
{
	sched_buf_printf(p->buf,
		"\t\t\tfor (idx_t i = 0; i < mcb; i++)\n"
		"\t\t\t\tfor (idx_t j = 0; j < ncb; j++)\n"
		"\t\t\t\t\tt_c[%lldLL + (ic + i) * %lldLL + (jc + j) * %lldLL] = "
		"%scacc[i * NC + j]);\n",
		(long long)p->c.c0, (long long)p->c.c_m, (long long)p->c.c_n,
		kgen_store_open(p->target));
}

/* The blocks of C shared among threads, each with its own packing
 * buffers (and f32 block, where C is staged); the slices of K in order,
 * so C is stored at the first. */
static void print_driver(const micro_printer *p, const char *name, int target)
{
	const sched_tensor *c = p->target;

	sched_buf_printf(p->buf, "%svoid %s%s(void **tensors)\n{\n",
			 p->suffix[0] ? "static " : "", name, p->suffix);
	print_params(p, target);
	sched_buf_printf(p->buf,
		"#pragma omp parallel\n\t{\n"
		"\t\tfloat *bp = aligned_alloc(64, (KC * NC + 64) / 16 * 16 * sizeof(float));\n"
		"\t\tfloat *ap = %s;\n"
		"\t\tfloat *cacc = %s;\n"
		"#pragma omp for collapse(2) schedule(static)\n"
		"\t\tfor (idx_t jc = 0; jc < N; jc += NC)\n"
		"\t\tfor (idx_t ic = 0; ic < M; ic += MC) {\n"
		"\t\t\tidx_t mcb = kmin(MC, M - ic), ncb = kmin(NC, N - jc);\n"
		"\t\t\tfor (idx_t pc = 0; pc < K; pc += KC) {\n"
		"\t\t\t\tidx_t kcb = kmin(KC, K - pc);\n"
		"\t\t\t\tpack_b%s(%s, bp, pc, kcb, jc, ncb);\n",
		p->s.pack ? "aligned_alloc(64, (MC * KC + 64) / 16 * 16 * sizeof(float))"
			  : "NULL",
		p->staged ? "aligned_alloc(64, (MC * NC + 16) / 16 * 16 * sizeof(float))" : "NULL",
		p->suffix, p->c.gathered ? "tensors" : "t_b");
	if (p->s.pack)
		sched_buf_printf(p->buf, "\t\t\t\tpack_a%s(t_a, ap, ic, mcb, pc, kcb);\n",
				 p->suffix);
	sched_buf_printf(p->buf,
		"\t\t\t\tfor (idx_t jr = 0; jr < ncb; jr += NR)\n"
		"\t\t\t\tfor (idx_t ir = 0; ir < mcb; ir += MR) {\n");
	if (p->staged)
		sched_buf_printf(p->buf, "\t\t\t\t\tfloat *c = cacc + ir * NC + jr;\n");
	else
		sched_buf_printf(p->buf, "\t\t\t\t\t%s *c = t_c + %lldLL + (ic + ir) * %lldLL + "
				 "(jc + jr) * %lldLL;\n", kgen_ctype(c->dtype, false),
				 (long long)p->c.c0, (long long)p->c.c_m, (long long)p->c.c_n);
	print_a_block(p);
	print_dispatch(p, "(jr + NR <= ncb)", "bp + jr * kcb");
	sched_buf_printf(p->buf, "\t\t\t\t}\n\t\t\t}\n");
	if (p->staged)
		print_unstage(p);
	sched_buf_printf(p->buf, "\t\t}\n\t\tfree(bp);\n\t\tfree(ap);\n\t\tfree(cacc);\n\t}\n}\n");
}

/* Direct convolutions: B read in place from its tensor padded with zeros
 * (kgen_conv_window). C's columns are cut into tiles of NR along a row,
 * the innermost n var, so that a tile's columns are contiguous in the
 * copy; row k of B starts koff[k] further, the k vars' part of the offset. */

/* The index of op var "name" (a kgen_decoded's). */
static int var_index(const sched_op *op, const char *name)
{
	int v = 0;

	while (op->vars[v].name != name)
		v++;
	return v;
}

/* " + COEF * v_NAME" for each of "vars" that moves the padded copy. */
static void print_window_terms(const micro_printer *p, const kgen_decoded *vars, int n)
{
	for (int i = 0; i < n; i++) {
		long long coef = p->win.coef[var_index(p->op, vars[i].name)];

		if (coef)
			sched_buf_printf(p->buf, " + %lldLL * v_%s", coef,
					 vars[i].name);
	}
}

/* Whether B can be read in place: a window (kgen_conv_window) whose
 * innermost n var moves it by one element, for a C in f32; sets "row". */
static bool direct_window(micro_printer *p, const kgen_kernel *kernel)
{
	kgen_decoded n[2 * SCHED_MAX_RANK];

	if (kernel->nops != 1 || p->staged ||
	    !kgen_conv_window(p->graph, p->op, &p->c, &p->win) ||
	    kgen_decoded_vars(p->op, &p->c, false, n) == 0 ||
	    p->win.coef[var_index(p->op, n[0].name)] != 1)
		return false;
	p->row = n[0].extent;
	return true;
}

/* pad_window: the padded copy in f32, zeros around the tensor, with NR
 * floats beyond its end that an edge tile's whole vectors may read. */
static void print_pad_window(const micro_printer *p)
{
	const kgen_window *w = &p->win;
	const sched_tensor *t = &p->graph->tensors[w->tensor];
	int64_t last = w->shape[w->rank - 1], inner = 1,
		stride = w->padded[w->rank - 1];

	sched_buf_printf(p->buf,
			 "static float *pad_window(void **tensors)\n{\n"
			 "\tconst %s *restrict t_x = tensors[%d];\n"
			 "\tconst size_t bytes = (%lldULL + NR + 15) / 16 * 16 * "
			 "sizeof(float);\n"
			 "\tfloat *xp = aligned_alloc(64, bytes);\n\n"
			 "\tmemset(xp, 0, bytes);\n"
			 "#pragma omp parallel for schedule(static)\n"
			 "\tfor (idx_t row = 0; row < %lldLL; row++) {\n"
			 "\t\tconst idx_t to = %lldLL",
			 ctype(t), w->tensor, (long long)w->size,
			 (long long)(t->size / last), (long long)w->pad[w->rank - 1]);
	for (int d = w->rank - 2; d >= 0; d--) {
		sched_buf_printf(p->buf,
				 " + (row / %lldLL %% %lldLL + %lldLL) * %lldLL",
				 (long long)inner, (long long)w->shape[d],
				 (long long)w->pad[d], (long long)stride);
		inner *= w->shape[d];
		stride *= w->padded[d];
	}
	sched_buf_printf(p->buf,
			 ";\n"
			 "\t\tfor (idx_t e = 0; e < %lldLL; e++)\n"
			 "\t\t\txp[to + e] = %st_x[row * %lldLL + e]);\n"
			 "\t}\n\treturn xp;\n}\n",
			 (long long)last, kgen_load_open(t), (long long)last);
}

/* window_offsets: koff[k], the k vars' part of B's offset in the copy. */
static void print_window_offsets(const micro_printer *p)
{
	kgen_decoded k[2 * SCHED_MAX_RANK];
	int nk = kgen_decoded_vars(p->op, &p->c, true, k);

	sched_buf_printf(p->buf, "static void window_offsets(idx_t *koff)\n{\n"
				 "\tfor (idx_t kk = 0; kk < K; kk++) {\n");
	kgen_print_decoded(p->buf, k, nk, "idx_t", "kk", "\t\t");
	sched_buf_printf(p->buf, "\t\tkoff[kk] = 0");
	print_window_terms(p, k, nk);
	sched_buf_printf(p->buf, ";\n\t}\n}\n");
}

/* The offset in the copy that no decoded var moves: the window's
 * constant and its vars of extent 1, at their lo. */
static long long window_base(const micro_printer *p)
{
	kgen_decoded d[4 * SCHED_MAX_RANK];
	int nd = kgen_decoded_vars(p->op, &p->c, false, d);
	long long base = p->win.constant;

	nd += kgen_decoded_vars(p->op, &p->c, true, d + nd);
	for (int v = 0; v < p->op->nvars; v++) {
		bool decoded = false;

		for (int i = 0; i < nd; i++)
			decoded |= d[i].name == p->op->vars[v].name;
		if (!decoded)
			base += p->win.coef[v] * p->op->vars[v].lo;
	}
	return base;
}

/* The driver: the copy and koff made once, then blocks of TC tiles by
 * MC rows of C shared among threads; A packed per slice of K as in
 * print_driver, B never. */
static void print_direct_driver(const micro_printer *p, const char *name, int target)
{
	kgen_decoded n[2 * SCHED_MAX_RANK];
	int nn = kgen_decoded_vars(p->op, &p->c, false, n);
	long long row = (long long)p->row,
		  tiles_per_row = (row + p->s.nr - 1) / p->s.nr;

	print_pad_window(p);
	print_window_offsets(p);
	sched_buf_printf(p->buf, "void %s(void **tensors)\n{\n", name);
	print_params(p, target);
	sched_buf_printf(
		p->buf,
		"\tfloat *xp = pad_window(tensors);\n"
		"\tidx_t *koff = malloc(K * sizeof(idx_t));\n"
		"\twindow_offsets(koff);\n"
		"#pragma omp parallel\n\t{\n"
		"\t\tfloat *ap = %s;\n"
		"#pragma omp for collapse(2) schedule(static)\n"
		"\t\tfor (idx_t tc = 0; tc < %lldLL; tc += TC)\n"
		"\t\tfor (idx_t ic = 0; ic < M; ic += MC) {\n"
		"\t\t\tidx_t mcb = kmin(MC, M - ic), tce = kmin(tc + TC, %lldLL);\n"
		"\t\t\tfor (idx_t pc = 0; pc < K; pc += KC) {\n"
		"\t\t\t\tidx_t kcb = kmin(KC, K - pc);\n",
		p->s.pack ?
			"aligned_alloc(64, (MC * KC + 64) / 16 * 16 * sizeof(float))" :
			"NULL",
		p->c.n / row * tiles_per_row, p->c.n / row * tiles_per_row);
	if (p->s.pack)
		sched_buf_printf(p->buf,
				 "\t\t\t\tpack_a(t_a, ap, ic, mcb, pc, kcb);\n");
	sched_buf_printf(
		p->buf,
		"\t\t\t\tfor (idx_t t = tc; t < tce; t++) {\n"
		"\t\t\t\tidx_t q0 = t %% %lldLL * NR, jn = t / %lldLL * %lldLL + q0;\n"
		"\t\t\t\tidx_t cols = kmin(NR, %lldLL - q0);\n",
		tiles_per_row, tiles_per_row, row, row);
	kgen_print_decoded(p->buf, n, nn, "idx_t", "jn", "\t\t\t\t");
	sched_buf_printf(p->buf, "\t\t\t\tconst float *bp = xp + %lldLL",
			 window_base(p));
	print_window_terms(p, n, nn);
	sched_buf_printf(p->buf,
			 ";\n\t\t\t\t(void)cols;\n"
			 "\t\t\t\tfor (idx_t ir = 0; ir < mcb; ir += MR) {\n"
			 "\t\t\t\t\tfloat *c = t_c + %lldLL + (ic + ir) * %lldLL + jn "
			 "* %lldLL;\n",
			 (long long)p->c.c0, (long long)p->c.c_m, (long long)p->c.c_n);
	print_a_block(p);
	print_dispatch(p, "(cols == NR)", "bp, koff + pc");
	sched_buf_printf(p->buf,
			 "\t\t\t\t}\n\t\t\t\t}\n\t\t\t}\n\t\t}\n\t\tfree(ap);\n\t}\n"
			 "\tfree(xp);\n\tfree(koff);\n}\n");
}

/* Product "op" of the kernel as the printer's. */
static void set_product(micro_printer *p, const sched_graph *graph, const sched_op *op)
{
	p->graph = graph;
	p->op = op;
	sched_op_gathered_contraction(graph, op->index, &p->c);
	p->a = &graph->tensors[p->c.a];
	p->b = &graph->tensors[p->c.b];
	p->target = &graph->tensors[op->target];
	p->staged = p->target->dtype != SCHED_F32;
}

/* Each product's packing and driver NAME_p<i>, and NAME running them in
 * order; a kernel of one product is its driver, NAME itself. */
static void print_products(micro_printer *p, const sched_graph *graph,
			   const kgen_kernel *kernel)
{
	char suffix[16] = "";

	for (int i = 0; i < kernel->nops; i++) {
		if (kernel->nops > 1)
			snprintf(suffix, sizeof(suffix), "_p%d", i);
		p->suffix = suffix;
		set_product(p, graph, &graph->ops[kernel->ops[i]]);
		if (!p->c.gathered)
			print_pack_b(p);
		else if (!p->direct) /* else B is read in place */
			print_pack_gathered_b(p);
		if (p->s.pack)
			print_pack_a(p);
		if (p->direct)
			print_direct_driver(p, kernel->name,
					    graph->ops[kernel->ops[i]].target);
		else
			print_driver(p, kernel->name,
				     graph->ops[kernel->ops[i]].target);
	}
	if (kernel->nops == 1)
		return;
	sched_buf_printf(p->buf, "void %s(void **tensors)\n{\n", kernel->name);
	for (int i = 0; i < kernel->nops; i++)
		sched_buf_printf(p->buf, "\t%s_p%d(tensors);\n", kernel->name, i);
	sched_buf_printf(p->buf, "}\n");
}

char *kgen_print_micro(const sched_graph *graph, const kgen_kernel *kernel)
{
	const sched_op *op = kgen_kernel_op(graph, kernel);
	sched_buf buf = {0};
	micro_printer p = {.buf = &buf, .s = kernel->schedule.micro, .suffix = ""};

	if (!kgen_kernel_products(graph, kernel, &p.c))
		return NULL;
	set_product(&p, graph, op);
	p.row = p.c.n;
	p.direct = direct_window(&p, kernel);
	p.width = kgen_micro_vector_floats(p.s.nr);
	kgen_print_helpers(&buf, false, true);
	kgen_print_header(&buf, &(kgen_printer){graph, op, NULL, NULL}, kernel->name);
	sched_buf_printf(&buf,
			 "#include <stdlib.h>\n"
			 "typedef float vf __attribute__((vector_size(%d)));\n"
			 "static inline vf vload(const float *p) { vf v; memcpy(&v, p, "
			 "sizeof v); return v; }\n"
			 "static inline void vstore(float *p, vf v) { memcpy(p, &v, "
			 "sizeof v); }\n"
			 "#define M %lldLL\n#define N %lldLL\n#define K %lldLL\n"
			 "#define MR %d\n#define NR %d\n#define KC %d\n#define MC "
			 "%d\n#define NC %d\n"
			 "#define TC (NC / NR)\n",
			 4 * p.width, (long long)p.c.m, (long long)p.c.n,
			 (long long)p.c.k, p.s.mr, p.s.nr, p.s.kc, p.s.mc, p.s.nc);
	print_family(&p);
	print_products(&p, graph, kernel);
	return buf.str;
}
