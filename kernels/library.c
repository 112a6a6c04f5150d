/*
 * library.c: library steps (docs/design/kernels.md, "Library steps").
 *
 * A kernel of one matrix product may run as a call of the device's BLAS
 * instead of generated code: cblas_sgemm on the cpu (OpenBLAS, or any
 * libblas.so.3 with the CBLAS calls, opened at run time), cublasLtMatmul
 * on cuda (kernels/cublaslt.c). The search offers it as one more
 * candidate beside the generated ones; a plan records it as the schedule
 * {"library": true}, and the step's "source" records the call: C that
 * makes it (cpu), or the call's parameters as JSON (cuda), so that a
 * client replays it as it replays any kernel.
 *
 * The product must be a plain GEMM: each of A, B and C a matrix with one
 * unit stride (row-major, or A and B transposed; C row-major), in the
 * dtypes the library takes. On the cpu, factors and outputs in f16 or
 * bf16 are converted to f32 copies around the call (as PyTorch's cpu
 * eager does: sgemm has no other dtype).
 *
 * The ops after the product, if any, are its epilogue, as cuBLASLt's
 * epilogues compute it (CUBLASLT_EPILOGUE_BIAS, _RELU, _GELU and their
 * pairs): a bias along C's columns, then relu or gelu_tanh, each reading
 * the result before it at the same element. On the cpu a loop after the
 * call applies them, rounding each result to its tensor's dtype as the
 * reference does; cuBLASLt keeps them in f32 until the last.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "print_int.h"

static const char *const cpu_libraries[] = {"libopenblas.so.0", "libblas.so.3"};
static const char *const cuda_libraries[] = {"libcublasLt.so.13", "libcublasLt.so.12",
					     "libcublasLt.so"};

/* A rows x cols matrix at strides (rs, cs) as BLAS takes it: row-major
 * with leading dimension *ld (*trans false), or column-major (*trans
 * true). A dim of extent 1 takes any stride. False when neither fits. */
static bool matrix_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
			  bool *trans, int64_t *ld)
{
	if (cs == 1 || cols == 1) {
		*trans = false;
		*ld = rows > 1 ? rs : cols;
		if (*ld >= cols && *ld <= INT_MAX)
			return true;
	}
	if (rs == 1 || rows == 1) {
		*trans = true;
		*ld = cols > 1 ? cs : rows;
		return *ld >= rows && *ld <= INT_MAX;
	}
	return false;
}

bool kgen_gemm_of(const sched_graph *graph, int op, kgen_gemm *out, const char **why)
{
	sched_contraction c;
	bool trans_c;

	*why = NULL;
	if (!sched_op_contraction(graph, op, &c))
		return (*why = "it is no matrix product C = A B"), false;
	*out = (kgen_gemm){.a = c.a, .b = c.b, .c = graph->ops[op].target, .m = c.m,
			   .n = c.n, .k = c.k, .a0 = c.a0, .b0 = c.b0, .c0 = c.c0};
	if (c.m > INT_MAX || c.n > INT_MAX || c.k > INT_MAX)
		*why = "a side of the product is 2^31 or more";
	else if (!matrix_layout(c.m, c.k, c.a_m, c.a_k, &out->trans_a, &out->lda))
		*why = "A has no unit stride along M or K";
	else if (!matrix_layout(c.k, c.n, c.b_k, c.b_n, &out->trans_b, &out->ldb))
		*why = "B has no unit stride along K or N";
	else if (!matrix_layout(c.m, c.n, c.c_m, c.c_n, &trans_c, &out->ldc) || trans_c)
		*why = "C is not row-major";
	return !*why;
}

/* Whether "node" reads tensor "t" at the op's target variables, [v0, v1]. */
static bool reads_at_element(const sched_node *node, int t)
{
	return node->kind == SCHED_NODE_ACCESS && node->tensor == t && node->nargs == 2 &&
	       node->args[0]->kind == SCHED_NODE_VAR && node->args[0]->var == 0 &&
	       node->args[1]->kind == SCHED_NODE_VAR && node->args[1]->var == 1;
}

/* The tensor "node" reads as a bias along C's "n" columns (a vector of n
 * read at v1), or -1. */
static int bias_of(const sched_graph *graph, const sched_node *node, int64_t n)
{
	const sched_tensor *t = node->kind == SCHED_NODE_ACCESS ?
				&graph->tensors[node->tensor] : NULL;

	return t && t->rank == 1 && t->shape[0] == n && node->nargs == 1 &&
	       node->args[0]->kind == SCHED_NODE_VAR && node->args[0]->var == 1 ?
	       node->tensor : -1;
}

/* Op "op" as the epilogue's next step after tensor "prev" (the result so
 * far) into "epi"; why it is none, or NULL. */
static const char *epilogue_step(const sched_graph *graph, const sched_op *op, int prev,
				 const kgen_gemm *gemm, kgen_epilogue *epi)
{
	const sched_tensor *t = &graph->tensors[op->target];
	const sched_node *body = op->body;

	if (op->reducer != SCHED_RED_NONE || t->rank != 2 || t->shape[0] != gemm->m ||
	    t->shape[1] != gemm->n)
		return "an op after the product is not elementwise over C";
	for (int side = 0; side < 2 && body->kind == SCHED_NODE_BINARY &&
			   body->op == SCHED_ADD && epi->bias < 0 && epi->act == SCHED_FUNC_COUNT;
	     side++)
		if (reads_at_element(body->args[side], prev) &&
		    (epi->bias = bias_of(graph, body->args[!side], gemm->n)) >= 0)
			return NULL;
	if (body->kind == SCHED_NODE_CALL && epi->act == SCHED_FUNC_COUNT &&
	    (body->op == SCHED_RELU || body->op == SCHED_GELU_TANH) &&
	    reads_at_element(body->args[0], prev)) {
		epi->act = (enum sched_func)body->op;
		return NULL;
	}
	return "an op after the product is none of a bias along C's columns (before "
	       "any activation), relu or gelu_tanh of the result before it";
}

/* Why the result "t" that op "reader" takes inside the step would be
 * missed unwritten, or NULL. */
static const char *read_elsewhere(const sched_graph *graph, int t, int reader)
{
	if (graph->tensors[t].role == SCHED_OUTPUT)
		return "a result before the epilogue's last is an output";
	for (int o = 0; o < graph->nops; o++)
		if (o != reader && sched_op_reads_tensor(&graph->ops[o], t))
			return "a result before the epilogue's last is read by another op";
	return NULL;
}

bool kgen_library_step_of(const sched_graph *graph, const kgen_kernel *kernel,
			  kgen_gemm *gemm, kgen_epilogue *epi, const char **why)
{
	const sched_tensor *c;
	int prev;

	*epi = (kgen_epilogue){-1, -1, SCHED_FUNC_COUNT};
	if (!kgen_gemm_of(graph, kernel->ops[0], gemm, why))
		return false;
	c = &graph->tensors[gemm->c];
	if (kernel->nops > 1 && (c->rank != 2 || c->shape[0] != gemm->m || c->shape[1] != gemm->n))
		return (*why = "an epilogue needs C to be a whole M x N matrix"), false;
	prev = gemm->c;
	for (int i = 1; i < kernel->nops; i++) {
		const sched_op *op = &graph->ops[kernel->ops[i]];

		if ((*why = read_elsewhere(graph, prev, op->index)) ||
		    (*why = epilogue_step(graph, op, prev, gemm, epi)))
			return false;
		prev = op->target;
	}
	epi->out = prev;
	return true;
}

/* Why the dtypes of "gemm" and "epi" do not suit the backend's library,
 * or NULL: the cpu's sgemm takes floats (f16 and bf16 converted);
 * cuBLASLt takes f16, bf16 or f32 factors of one dtype, into an output
 * of that dtype or f32, and a bias in the output's. */
static const char *dtypes_unfit(const sched_graph *graph, const kgen_gemm *gemm,
				const kgen_epilogue *epi, bool cuda)
{
	enum sched_dtype a = graph->tensors[gemm->a].dtype, b = graph->tensors[gemm->b].dtype;
	enum sched_dtype c = graph->tensors[gemm->c].dtype, out = graph->tensors[epi->out].dtype;
	enum sched_dtype bias = epi->bias >= 0 ? graph->tensors[epi->bias].dtype : out;

	if (!cuda)
		return a == SCHED_I32 || b == SCHED_I32 || c == SCHED_I32 || out == SCHED_I32 ||
		       bias == SCHED_I32 ?
		       "the cpu's BLAS (sgemm) takes floats: f32, or f16 and bf16 converted" :
		       NULL;
	if (a != b || a == SCHED_I32)
		return "cuBLASLt takes factors of one dtype: f16, bf16 or f32";
	if (out != a && out != SCHED_F32)
		return "cuBLASLt writes C in the factors' dtype or f32";
	return bias == out ? NULL : "cuBLASLt takes a bias in its output's dtype";
}

const char *kgen_library_kernel_unfit(const sched_graph *graph, const kgen_kernel *kernel,
				      bool cuda)
{
	kgen_gemm gemm;
	kgen_epilogue epi;
	const char *why;

	if (!kgen_library_step_of(graph, kernel, &gemm, &epi, &why))
		return why;
	return dtypes_unfit(graph, &gemm, &epi, cuda);
}

const char *kgen_library_unfit(const sched_graph *graph, int op, bool cuda)
{
	return kgen_library_kernel_unfit(graph, &(kgen_kernel){.nops = 1, .ops = {op}}, cuda);
}

static bool find_library(bool cuda)
{
	const char *const *names = cuda ? cuda_libraries : cpu_libraries;
	int n = cuda ? 3 : 2;

	for (int i = 0; i < n; i++) {
		void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		bool found = lib && dlsym(lib, cuda ? "cublasLtMatmul" : "cblas_sgemm");

		if (lib)
			dlclose(lib);
		if (found)
			return true;
	}
	return false;
}

/* Looked up once per process and backend: every build of a library step
 * asks (exec.c), and opening a BLAS starts its threads. */
bool kgen_library_available(const char *backend)
{
	static int found[2] = {-1, -1}; /* -1: not looked up yet */
	bool cuda = !strcmp(backend, "cuda");
	int known = __atomic_load_n(&found[cuda], __ATOMIC_ACQUIRE);

	if (known < 0) {
		known = find_library(cuda);
		__atomic_store_n(&found[cuda], known, __ATOMIC_RELEASE);
	}
	return known;
}

/* The BLAS is looked up once per process; without one, the kernel says
 * so and aborts (the worker reports a crash: no candidate is lost
 * silently). */
static void print_sgemm_lookup(sched_buf *buf)
{
	sched_buf_printf(buf,
		"#include <dlfcn.h>\n#include <stdio.h>\n#include <stdlib.h>\n\n"
		"typedef void sgemm_fn(int, int, int, int, int, int, float, const float *,\n"
		"\tint, const float *, int, float, float *, int);\n\n"
		"static sgemm_fn *find_sgemm(void)\n{\n"
		"\tstatic sgemm_fn *sgemm;\n"
		"\tstatic const char *const names[] = {\"%s\", \"%s\"};\n\n"
		"\tfor (int i = 0; !sgemm && i < 2; i++) {\n"
		"\t\tvoid *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);\n\n"
		"\t\tif (lib)\n\t\t\tsgemm = (sgemm_fn *)dlsym(lib, \"cblas_sgemm\");\n\t}\n"
		"\tif (!sgemm) {\n"
		"\t\tfputs(\"tuned: a library step needs cblas_sgemm (%s or %s)\\n\", stderr);\n"
		"\t\tabort();\n\t}\n\treturn sgemm;\n}\n\n",
		cpu_libraries[0], cpu_libraries[1], cpu_libraries[0], cpu_libraries[1]);
}

/* A matrix the call reads or writes: its tensor's storage "as stored",
 * from element "offset", rows x cols with leading dimension "ld"; where
 * its dtype is not f32 the call uses an f32 copy, row-major and
 * contiguous (leading dimension cols), made before the call (factors) or
 * rounded back after it (C). */
typedef struct call_matrix {
	const char *name; /* of its variable in the call */
	const sched_tensor *t;
	int tensor;
	int64_t offset, rows, cols, ld;
} call_matrix;

static bool converted(const call_matrix *m)
{
	return m->t->dtype != SCHED_F32;
}

/* The matrix's pointer for the call: the tensor itself, or its copy. */
static void print_operand(sched_buf *buf, const call_matrix *m)
{
	if (converted(m))
		sched_buf_printf(buf, "\tfloat *%s = malloc(%lldLL * sizeof(float));\n",
				 m->name, (long long)(m->rows * m->cols));
	else
		sched_buf_printf(buf, "\tfloat *%s = (float *)tensors[%d] + %lldLL;\n",
				 m->name, m->tensor, (long long)m->offset);
}

/* Copies between a matrix and its f32 copy, rows in parallel. */
static void print_copy(sched_buf *buf, const call_matrix *m, bool into_copy)
{
	sched_buf_printf(buf,
		"#pragma omp parallel for schedule(static)\n"
		"\tfor (idx_t i = 0; i < %lldLL; i++)\n"
		"\t\tfor (idx_t j = 0; j < %lldLL; j++)\n",
		(long long)m->rows, (long long)m->cols);
	if (into_copy)
		sched_buf_printf(buf, "\t\t\t%s[i * %lldLL + j] = %s((const %s *)tensors[%d])"
				 "[%lldLL + i * %lldLL + j]);\n", m->name, (long long)m->cols,
				 kgen_load_open(m->t), kgen_ctype(m->t->dtype, false), m->tensor,
				 (long long)m->offset, (long long)m->ld);
	else
		sched_buf_printf(buf, "\t\t\t((%s *)tensors[%d])[%lldLL + i * %lldLL + j] = "
				 "%s%s[i * %lldLL + j]);\n", kgen_ctype(m->t->dtype, false),
				 m->tensor, (long long)m->offset, (long long)m->ld,
				 kgen_store_open(m->t), m->name, (long long)m->cols);
}

static int64_t call_ld(const call_matrix *m)
{
	return converted(m) ? m->cols : m->ld;
}

/* The value op "op" of the epilogue computes from x, the result before. */
static void epilogue_value(const sched_graph *graph, const sched_op *op,
			   const kgen_epilogue *epi, char *value, size_t size)
{
	const sched_tensor *bias = epi->bias >= 0 ? &graph->tensors[epi->bias] : NULL;

	if (op->body->kind == SCHED_NODE_BINARY)
		snprintf(value, size, "x + %s((const %s *)tensors[%d])[j])", kgen_load_open(bias),
			 kgen_ctype(bias->dtype, false), epi->bias);
	else
		snprintf(value, size, "%s(x)", epi->act == SCHED_RELU ? "krelu" : "kgelu_tanh");
}

/* After the call: its f32 result "c" through the epilogue's ops into the
 * output, each result rounded to its tensor's dtype, rows in parallel. */
static void print_epilogue(sched_buf *buf, const sched_graph *graph, const kgen_kernel *kernel,
			   const call_matrix *c, const kgen_epilogue *epi)
{
	const sched_tensor *out = &graph->tensors[epi->out];
	char element[64], value[160];

	snprintf(element, sizeof(element), "c[i * %lldLL + j]", (long long)call_ld(c));
	sched_buf_printf(buf, "#pragma omp parallel for schedule(static)\n"
			 "\tfor (idx_t i = 0; i < %lldLL; i++)\n"
			 "\t\tfor (idx_t j = 0; j < %lldLL; j++) {\n\t\t\tfloat x = ",
			 (long long)c->rows, (long long)c->cols);
	kgen_print_rounded(buf, c->t->dtype, element);
	sched_buf_printf(buf, ";\n\n");
	for (int i = 1; i < kernel->nops; i++) {
		const sched_op *op = &graph->ops[kernel->ops[i]];

		epilogue_value(graph, op, epi, value, sizeof(value));
		if (i < kernel->nops - 1) {
			sched_buf_printf(buf, "\t\t\tx = ");
			kgen_print_rounded(buf, graph->tensors[op->target].dtype, value);
			sched_buf_printf(buf, ";\n");
		} else {
			sched_buf_printf(buf, "\t\t\t((%s *)tensors[%d])[i * %lldLL + j] = %s%s);\n",
					 kgen_ctype(out->dtype, false), epi->out,
					 (long long)c->cols, kgen_store_open(out), value);
		}
	}
	sched_buf_printf(buf, "\t\t}\n");
}

/* CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112. A transposed
 * factor is stored as cols x rows of the product's view of it. */
char *kgen_print_library_c(const sched_graph *graph, const kgen_kernel *kernel)
{
	sched_buf buf = {0};
	kgen_gemm g;
	kgen_epilogue epi;
	const char *why;

	if (!kgen_library_step_of(graph, kernel, &g, &epi, &why) ||
	    dtypes_unfit(graph, &g, &epi, false))
		return NULL;
	call_matrix m[3] = {
		{"a", &graph->tensors[g.a], g.a, g.a0, g.trans_a ? g.k : g.m,
		 g.trans_a ? g.m : g.k, g.lda},
		{"b", &graph->tensors[g.b], g.b, g.b0, g.trans_b ? g.n : g.k,
		 g.trans_b ? g.k : g.n, g.ldb},
		{"c", &graph->tensors[g.c], g.c, g.c0, g.m, g.n, g.ldc},
	};

	sched_buf_printf(&buf, "/* %s: library step, %s = %s x %s through cblas_sgemm "
			 "(%lld x %lld x %lld)%s%s */\n", kernel->name, graph->tensors[g.c].name,
			 graph->tensors[g.a].name, graph->tensors[g.b].name, (long long)g.m,
			 (long long)g.n, (long long)g.k, kernel->nops > 1 ? ", epilogue into " : "",
			 kernel->nops > 1 ? graph->tensors[epi.out].name : "");
	kgen_print_helpers(&buf, false, true);
	print_sgemm_lookup(&buf);
	sched_buf_printf(&buf, "void %s(void **tensors)\n{\n", kernel->name);
	for (int i = 0; i < 3; i++)
		print_operand(&buf, &m[i]);
	for (int i = 0; i < 3; i++)
		if (converted(&m[i]))
			sched_buf_printf(&buf, "\tif (!%s) {\n\t\tfputs(\"tuned: out of memory for "
					 "a library step's f32 copies\\n\", stderr);\n"
					 "\t\tabort();\n\t}\n", m[i].name);
	for (int i = 0; i < 2; i++)
		if (converted(&m[i]))
			print_copy(&buf, &m[i], true);
	sched_buf_printf(&buf,
		"\tfind_sgemm()(101, %d, %d, %lld, %lld, %lld, 1.0f, a, %lld, b, %lld,\n"
		"\t\t0.0f, c, %lld);\n",
		g.trans_a ? 112 : 111, g.trans_b ? 112 : 111, (long long)g.m, (long long)g.n,
		(long long)g.k, (long long)call_ld(&m[0]), (long long)call_ld(&m[1]),
		(long long)call_ld(&m[2]));
	if (kernel->nops > 1)
		print_epilogue(&buf, graph, kernel, &m[2], &epi);
	else if (converted(&m[2]))
		print_copy(&buf, &m[2], false);
	for (int i = 0; i < 3; i++)
		if (converted(&m[i]))
			sched_buf_printf(&buf, "\tfree(%s);\n", m[i].name);
	sched_buf_printf(&buf, "}\n");
	return buf.str;
}

/* cuBLASLt's epilogue ("relu", "gelu", "bias", "relu_bias", "gelu_bias"),
 * or NULL for none. */
static const char *epilogue_name(const kgen_epilogue *epi)
{
	static const char *const names[2][3] = {{NULL, "relu", "gelu"},
						{"bias", "relu_bias", "gelu_bias"}};

	return names[epi->bias >= 0][epi->act == SCHED_RELU ? 1 :
				     epi->act == SCHED_GELU_TANH ? 2 : 0];
}

/* The call's parameters; with an epilogue, "c" is its output and
 * "epilogue" (and "bias", a tensor) say what it applies. */
char *kgen_print_library_cuda(const sched_graph *graph, const kgen_kernel *kernel)
{
	kgen_gemm g;
	kgen_epilogue epi;
	const char *why;
	json_t *call;
	char *text;

	if (!kgen_library_step_of(graph, kernel, &g, &epi, &why) ||
	    dtypes_unfit(graph, &g, &epi, true))
		return NULL;
	call = json_pack("{s:s, s:s, s:I, s:I, s:I, s:{s:i, s:s, s:I, s:b, s:I},"
			 " s:{s:i, s:s, s:I, s:b, s:I}, s:{s:i, s:s, s:I, s:I}}",
			 "library", KGEN_LIBRARY_CUBLASLT, "kernel", kernel->name,
			 "m", (json_int_t)g.m, "n", (json_int_t)g.n, "k", (json_int_t)g.k,
			 "a", "tensor", g.a, "dtype", sched_dtype_name(graph->tensors[g.a].dtype),
			 "offset", (json_int_t)g.a0, "trans", g.trans_a, "ld", (json_int_t)g.lda,
			 "b", "tensor", g.b, "dtype", sched_dtype_name(graph->tensors[g.b].dtype),
			 "offset", (json_int_t)g.b0, "trans", g.trans_b, "ld", (json_int_t)g.ldb,
			 "c", "tensor", epi.out, "dtype",
			 sched_dtype_name(graph->tensors[epi.out].dtype),
			 "offset", (json_int_t)g.c0, "ld", (json_int_t)g.ldc);
	if (call && epilogue_name(&epi))
		json_object_set_new(call, "epilogue", json_string(epilogue_name(&epi)));
	if (call && epi.bias >= 0)
		json_object_set_new(call, "bias", json_integer(epi.bias));
	text = call ? json_dumps(call, JSON_SORT_KEYS | JSON_INDENT(1)) : NULL;
	json_decref(call);
	return text;
}
