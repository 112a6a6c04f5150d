/*
 * cublaslt.c: a library step on cuda (docs/design/kernels.md, "Library steps"):
 * the cuBLASLt call its source records (kgen_print_library_cuda), made
 * on the caller's stream. libcublasLt is opened with dlopen, like the
 * driver: nothing is linked, and no CUDA header is needed.
 *
 * cuBLASLt is column-major and tuned's C is row-major, so the call
 * computes C^T = B^T A^T: its first factor is B, its second A, and M and
 * N trade places. The algorithm is cuBLASLt's first heuristic choice for
 * the shapes, found once when the step is built.
 *
 * A step with an epilogue (library.c) names it: "relu", "gelu", "bias",
 * "relu_bias" or "gelu_bias" (CUBLASLT_EPILOGUE_*), and its bias tensor,
 * a vector along tuned's N, which are the rows of cuBLASLt's D. The bias
 * pointer is set on the descriptor at each call, so a call must not run
 * on two streams at once.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublaslt_int.h"

typedef int cublasStatus_t;
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque *cublasLtMatmulPreference_t;

typedef struct {
	uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
	cublasLtMatmulAlgo_t algo;
	size_t workspaceSize;
	cublasStatus_t state;
	float wavesCount;
	int reserved[4];
} cublasLtMatmulHeuristicResult_t;

enum {
	CUBLAS_COMPUTE_32F = 68,
	CUDA_R_32F = 0,
	CUDA_R_16F = 2,
	CUDA_R_16BF = 14,
	CUBLAS_OP_N = 0,
	CUBLAS_OP_T = 1,
	CUBLASLT_MATMUL_DESC_TRANSA = 3,
	CUBLASLT_MATMUL_DESC_TRANSB = 4,
	CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
	CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
	CUBLASLT_EPILOGUE_DEFAULT = 1,
	CUBLASLT_EPILOGUE_RELU = 2,
	CUBLASLT_EPILOGUE_BIAS = 4,
	CUBLASLT_EPILOGUE_GELU = 32,
	CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
};

static struct {
	void *lib;
	cublasLtHandle_t handle;
	cublasStatus_t (*create)(cublasLtHandle_t *handle);
	cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *desc, int compute, int scale);
	cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t desc, int attr, const void *buf,
				   size_t size);
	cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t desc);
	cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t *layout, int type,
					uint64_t rows, uint64_t cols, int64_t ld);
	cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t layout);
	cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *pref);
	cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t pref, int attr,
				   const void *buf, size_t size);
	cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t pref);
	cublasStatus_t (*heuristic)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
				    cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
				    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
				    cublasLtMatmulPreference_t pref, int requested,
				    cublasLtMatmulHeuristicResult_t *results, int *returned);
	cublasStatus_t (*matmul)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
				 const void *alpha, const void *a, cublasLtMatrixLayout_t la,
				 const void *b, cublasLtMatrixLayout_t lb, const void *beta,
				 const void *c, cublasLtMatrixLayout_t lc, void *d,
				 cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo,
				 void *workspace, size_t workspace_bytes, void *stream);
} lt;

#define LOAD(field, symbol) (*(void **)&lt.field = dlsym(lt.lib, symbol))

static bool load_symbols(void)
{
	return LOAD(create, "cublasLtCreate") &&
	       LOAD(desc_create, "cublasLtMatmulDescCreate") &&
	       LOAD(desc_set, "cublasLtMatmulDescSetAttribute") &&
	       LOAD(desc_destroy, "cublasLtMatmulDescDestroy") &&
	       LOAD(layout_create, "cublasLtMatrixLayoutCreate") &&
	       LOAD(layout_destroy, "cublasLtMatrixLayoutDestroy") &&
	       LOAD(pref_create, "cublasLtMatmulPreferenceCreate") &&
	       LOAD(pref_set, "cublasLtMatmulPreferenceSetAttribute") &&
	       LOAD(pref_destroy, "cublasLtMatmulPreferenceDestroy") &&
	       LOAD(heuristic, "cublasLtMatmulAlgoGetHeuristic") &&
	       LOAD(matmul, "cublasLtMatmul");
}

/* Opens the library and makes the process's handle, once; the caller
 * has made the device's context current. */
static int open_cublaslt(kgen_error *err)
{
	static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12",
					    "libcublasLt.so"};

	for (int i = 0; i < 3 && !lt.lib; i++)
		lt.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!lt.lib)
		return kgen_fail(err, KGEN_EBACKEND, "a library step needs libcublasLt "
				 "(libcublasLt.so.13 or .12), which cannot be opened");
	if (!lt.matmul && !load_symbols())
		return kgen_fail(err, KGEN_EBACKEND, "libcublasLt lacks a function "
				 "tuned needs: %s", dlerror());
	if (!lt.handle && lt.create(&lt.handle) != 0)
		return kgen_fail(err, KGEN_EBACKEND, "cublasLtCreate failed");
	return KGEN_OK;
}

/* One factor or the output as the call reads it. */
typedef struct operand {
	int tensor;
	int dtype; /* cudaDataType */
	size_t element_bytes;
	int64_t offset, ld;
	bool trans;
} operand;

struct kgen_cublaslt_call {
	char kernel[64];
	operand a, b, c;
	int64_t m, n, k;
	uint32_t epilogue; /* CUBLASLT_EPILOGUE_* */
	int bias;          /* its tensor, or -1 */
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
	void *workspace;
	size_t workspace_bytes;
};

bool kgen_cublaslt_source(const char *source)
{
	json_t *call = source && source[0] == '{' ? json_loads(source, 0, NULL) : NULL;
	const char *library = json_string_value(json_object_get(call, "library"));
	bool is = library && !strcmp(library, KGEN_LIBRARY_CUBLASLT);

	json_decref(call);
	return is;
}

static bool read_operand(json_t *obj, operand *out)
{
	const char *dtype = json_string_value(json_object_get(obj, "dtype"));

	if (!json_is_object(obj) || !dtype)
		return false;
	out->tensor = (int)json_integer_value(json_object_get(obj, "tensor"));
	out->offset = json_integer_value(json_object_get(obj, "offset"));
	out->ld = json_integer_value(json_object_get(obj, "ld"));
	out->trans = json_is_true(json_object_get(obj, "trans"));
	out->dtype = !strcmp(dtype, "f32") ? CUDA_R_32F : !strcmp(dtype, "f16") ? CUDA_R_16F
		     : !strcmp(dtype, "bf16") ? CUDA_R_16BF : -1;
	out->element_bytes = out->dtype == CUDA_R_32F ? 4 : 2;
	return out->dtype >= 0 && out->tensor >= 0 && out->offset >= 0 && out->ld > 0;
}

/* The epilogue "obj" names (none: the default), and its bias tensor,
 * which the bias epilogues need; false when garbled. */
static bool read_epilogue(json_t *obj, kgen_cublaslt_call *call)
{
	static const struct {
		const char *name;
		uint32_t value;
	} epilogues[] = {
		{"relu", CUBLASLT_EPILOGUE_RELU}, {"gelu", CUBLASLT_EPILOGUE_GELU},
		{"bias", CUBLASLT_EPILOGUE_BIAS},
		{"relu_bias", CUBLASLT_EPILOGUE_RELU | CUBLASLT_EPILOGUE_BIAS},
		{"gelu_bias", CUBLASLT_EPILOGUE_GELU | CUBLASLT_EPILOGUE_BIAS},
	};
	json_t *name = json_object_get(obj, "epilogue"), *bias = json_object_get(obj, "bias");

	call->epilogue = name ? 0 : CUBLASLT_EPILOGUE_DEFAULT;
	for (size_t i = 0; json_is_string(name) && i < sizeof(epilogues) / sizeof(*epilogues); i++)
		if (!strcmp(json_string_value(name), epilogues[i].name))
			call->epilogue = epilogues[i].value;
	call->bias = json_is_integer(bias) ? (int)json_integer_value(bias) : -1;
	return call->epilogue && (call->bias >= 0) == !!(call->epilogue & CUBLASLT_EPILOGUE_BIAS);
}

static int read_call(const char *source, kgen_cublaslt_call *call, kgen_error *err)
{
	json_t *obj = json_loads(source, 0, NULL);
	const char *kernel = json_string_value(json_object_get(obj, "kernel"));
	bool ok = kernel && read_operand(json_object_get(obj, "a"), &call->a) &&
		  read_operand(json_object_get(obj, "b"), &call->b) &&
		  read_operand(json_object_get(obj, "c"), &call->c) && read_epilogue(obj, call);

	if (ok) {
		snprintf(call->kernel, sizeof(call->kernel), "%s", kernel);
		call->m = json_integer_value(json_object_get(obj, "m"));
		call->n = json_integer_value(json_object_get(obj, "n"));
		call->k = json_integer_value(json_object_get(obj, "k"));
		ok = call->m > 0 && call->n > 0 && call->k > 0;
	}
	json_decref(obj);
	return ok ? KGEN_OK : kgen_fail(err, KGEN_EPLAN, "a library step's call is "
					"garbled: %.200s", source);
}

/* The descriptors of C^T = B^T A^T, column-major: B first (N x K, or
 * K x N read transposed), then A (K x M, or M x K read transposed), and
 * the epilogue. Until a call sets the bias, the workspace stands for it:
 * the heuristic reads the pointer's alignment, and both come from
 * cuMemAlloc. */
static bool describe(kgen_cublaslt_call *c)
{
	int op_b = c->b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
	int op_a = c->a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;

	return lt.desc_create(&c->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0 &&
	       lt.desc_set(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)) == 0 &&
	       lt.desc_set(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)) == 0 &&
	       lt.desc_set(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epilogue,
			   sizeof(c->epilogue)) == 0 &&
	       (c->bias < 0 || lt.desc_set(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
					   &c->workspace, sizeof(c->workspace)) == 0) &&
	       lt.layout_create(&c->lb, c->b.dtype, c->b.trans ? c->k : c->n,
				c->b.trans ? c->n : c->k, c->b.ld) == 0 &&
	       lt.layout_create(&c->la, c->a.dtype, c->a.trans ? c->m : c->k,
				c->a.trans ? c->k : c->m, c->a.ld) == 0 &&
	       lt.layout_create(&c->lc, c->c.dtype, c->n, c->m, c->c.ld) == 0;
}

static int pick_algorithm(kgen_cublaslt_call *c, kgen_error *err)
{
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t result;
	uint64_t bytes = c->workspace_bytes;
	int found = 0;
	bool ok = lt.pref_create(&pref) == 0 &&
		  lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
			      sizeof(bytes)) == 0 &&
		  lt.heuristic(lt.handle, c->desc, c->lb, c->la, c->lc, c->lc, pref, 1,
			       &result, &found) == 0 && found > 0 && result.state == 0;

	if (pref)
		lt.pref_destroy(pref);
	if (!ok)
		return kgen_fail(err, KGEN_EBACKEND, "kernel '%s': cuBLASLt has no "
				 "algorithm for %lld x %lld x %lld", c->kernel,
				 (long long)c->m, (long long)c->n, (long long)c->k);
	c->algo = result.algo;
	return KGEN_OK;
}

int kgen_cublaslt_new(const char *source, void *workspace, size_t workspace_bytes,
		      kgen_cublaslt_call **out, kgen_error *err)
{
	kgen_cublaslt_call *call = calloc(1, sizeof(*call));
	int rc;

	*out = call;
	if (!call)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	call->workspace = workspace;
	call->workspace_bytes = workspace_bytes;
	if ((rc = read_call(source, call, err)) < 0 || (rc = open_cublaslt(err)) < 0)
		return rc;
	if (!describe(call))
		return kgen_fail(err, KGEN_EBACKEND, "kernel '%s': cuBLASLt refused the "
				 "descriptors of its call", call->kernel);
	return pick_algorithm(call, err);
}

int kgen_cublaslt_run(const kgen_cublaslt_call *c, void *const *tensors, void *stream,
		      kgen_error *err)
{
	const float one = 1, zero = 0;
	const char *a = (const char *)tensors[c->a.tensor] + c->a.offset * c->a.element_bytes;
	const char *b = (const char *)tensors[c->b.tensor] + c->b.offset * c->b.element_bytes;
	char *d = (char *)tensors[c->c.tensor] + c->c.offset * c->c.element_bytes;
	const void *bias = c->bias >= 0 ? tensors[c->bias] : NULL;
	cublasStatus_t status = bias ? lt.desc_set(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
						   &bias, sizeof(bias)) : 0;

	if (status == 0)
		status = lt.matmul(lt.handle, c->desc, &one, b, c->lb, a, c->la, &zero, d, c->lc,
				   d, c->lc, &c->algo, c->workspace, c->workspace_bytes, stream);

	return status == 0 ? KGEN_OK :
	       kgen_fail(err, KGEN_EBACKEND, "kernel '%s': cublasLtMatmul failed "
			 "(status %d)", c->kernel, status);
}

void kgen_cublaslt_free(kgen_cublaslt_call *c)
{
	if (!c)
		return;
	if (c->la)
		lt.layout_destroy(c->la);
	if (c->lb)
		lt.layout_destroy(c->lb);
	if (c->lc)
		lt.layout_destroy(c->lc);
	if (c->desc)
		lt.desc_destroy(c->desc);
	free(c);
}
