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
 * dtypes the library takes.
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
 * the cpu's sgemm takes f32 only; cuBLASLt takes f16, bf16 or f32
 * factors of one dtype, into C of that dtype or f32. */
static const char *dtypes_unfit(const sched_graph *graph, const kgen_gemm *gemm, bool cuda)
{
	enum sched_dtype a = graph->tensors[gemm->a].dtype, b = graph->tensors[gemm->b].dtype;
	enum sched_dtype c = graph->tensors[gemm->c].dtype;

	if (!cuda)
		return a == SCHED_F32 && b == SCHED_F32 && c == SCHED_F32 ? NULL :
		       "the cpu's BLAS (sgemm) takes f32 factors and output only";
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

bool kgen_library_available(const char *backend)
{
	bool cuda = !strcmp(backend, "cuda");
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

/* CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112. */
char *kgen_print_library_c(const sched_graph *graph, const kgen_kernel *kernel)
{
	const sched_op *op = kgen_kernel_op(graph, kernel);
	sched_buf buf = {0};
	kgen_gemm g;
	const char *why;

	if (!kgen_gemm_of(graph, op->index, &g, &why) || dtypes_unfit(graph, &g, false))
		return NULL;
	sched_buf_printf(&buf, "/* %s: library step, %s = %s x %s through cblas_sgemm "
			 "(%lld x %lld x %lld) */\n", kernel->name, graph->tensors[g.c].name,
			 graph->tensors[g.a].name, graph->tensors[g.b].name, (long long)g.m,
			 (long long)g.n, (long long)g.k);
	print_sgemm_lookup(&buf);
	sched_buf_printf(&buf,
		"void %s(void **tensors)\n{\n"
		"\tfind_sgemm()(101, %d, %d, %lld, %lld, %lld, 1.0f,\n"
		"\t\t(const float *)tensors[%d] + %lld, %lld,\n"
		"\t\t(const float *)tensors[%d] + %lld, %lld,\n"
		"\t\t0.0f, (float *)tensors[%d] + %lld, %lld);\n}\n",
		kernel->name, g.trans_a ? 112 : 111, g.trans_b ? 112 : 111, (long long)g.m,
		(long long)g.n, (long long)g.k, g.a, (long long)g.a0, (long long)g.lda, g.b,
		(long long)g.b0, (long long)g.ldb, g.c, (long long)g.c0, (long long)g.ldc);
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
