/*
 * library.c: library steps (docs/kernels.md, "Library steps").
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

/* Why the dtypes of "gemm" do not suit the backend's library, or NULL:
 * the cpu's sgemm takes floats (f16 and bf16 converted); cuBLASLt takes
 * f16, bf16 or f32 factors of one dtype, into C of that dtype or f32. */
static const char *dtypes_unfit(const sched_graph *graph, const kgen_gemm *gemm, bool cuda)
{
	enum sched_dtype a = graph->tensors[gemm->a].dtype, b = graph->tensors[gemm->b].dtype;
	enum sched_dtype c = graph->tensors[gemm->c].dtype;

	if (!cuda)
		return a == SCHED_I32 || b == SCHED_I32 || c == SCHED_I32 ?
		       "the cpu's BLAS (sgemm) takes floats: f32, or f16 and bf16 converted" :
		       NULL;
	if (a != b || a == SCHED_I32)
		return "cuBLASLt takes factors of one dtype: f16, bf16 or f32";
	return c == a || c == SCHED_F32 ? NULL :
	       "cuBLASLt writes C in the factors' dtype or f32";
}

const char *kgen_library_unfit(const sched_graph *graph, int op, bool cuda)
{
	kgen_gemm gemm;
	const char *why;

	if (!kgen_gemm_of(graph, op, &gemm, &why))
		return why;
	return dtypes_unfit(graph, &gemm, cuda);
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

/* CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112. A transposed
 * factor is stored as cols x rows of the product's view of it. */
char *kgen_print_library_c(const sched_graph *graph, const kgen_kernel *kernel)
{
	const sched_op *op = kgen_kernel_op(graph, kernel);
	sched_buf buf = {0};
	kgen_gemm g;
	const char *why;

	if (!kgen_gemm_of(graph, op->index, &g, &why) || dtypes_unfit(graph, &g, false))
		return NULL;
	call_matrix m[3] = {
		{"a", &graph->tensors[g.a], g.a, g.a0, g.trans_a ? g.k : g.m,
		 g.trans_a ? g.m : g.k, g.lda},
		{"b", &graph->tensors[g.b], g.b, g.b0, g.trans_b ? g.n : g.k,
		 g.trans_b ? g.k : g.n, g.ldb},
		{"c", &graph->tensors[g.c], g.c, g.c0, g.m, g.n, g.ldc},
	};

	sched_buf_printf(&buf, "/* %s: library step, %s = %s x %s through cblas_sgemm "
			 "(%lld x %lld x %lld) */\n", kernel->name, graph->tensors[g.c].name,
			 graph->tensors[g.a].name, graph->tensors[g.b].name, (long long)g.m,
			 (long long)g.n, (long long)g.k);
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
	if (converted(&m[2]))
		print_copy(&buf, &m[2], false);
	for (int i = 0; i < 3; i++)
		if (converted(&m[i]))
			sched_buf_printf(&buf, "\tfree(%s);\n", m[i].name);
	sched_buf_printf(&buf, "}\n");
	return buf.str;
}

char *kgen_print_library_cuda(const sched_graph *graph, const kgen_kernel *kernel)
{
	const sched_op *op = kgen_kernel_op(graph, kernel);
	kgen_gemm g;
	const char *why;
	json_t *call;
	char *text;

	if (!kgen_gemm_of(graph, op->index, &g, &why) || dtypes_unfit(graph, &g, true))
		return NULL;
	call = json_pack("{s:s, s:s, s:I, s:I, s:I, s:{s:i, s:s, s:I, s:b, s:I},"
			 " s:{s:i, s:s, s:I, s:b, s:I}, s:{s:i, s:s, s:I, s:I}}",
			 "library", KGEN_LIBRARY_CUBLASLT, "kernel", kernel->name,
			 "m", (json_int_t)g.m, "n", (json_int_t)g.n, "k", (json_int_t)g.k,
			 "a", "tensor", g.a, "dtype", sched_dtype_name(graph->tensors[g.a].dtype),
			 "offset", (json_int_t)g.a0, "trans", g.trans_a, "ld", (json_int_t)g.lda,
			 "b", "tensor", g.b, "dtype", sched_dtype_name(graph->tensors[g.b].dtype),
			 "offset", (json_int_t)g.b0, "trans", g.trans_b, "ld", (json_int_t)g.ldb,
			 "c", "tensor", g.c, "dtype", sched_dtype_name(graph->tensors[g.c].dtype),
			 "offset", (json_int_t)g.c0, "ld", (json_int_t)g.ldc);
	text = call ? json_dumps(call, JSON_SORT_KEYS | JSON_INDENT(1)) : NULL;
	json_decref(call);
	return text;
}
