/*
 * cublaslt_int.h: library steps on cuda through cuBLASLt (cublaslt.c),
 * for the cuda backend.
 */
#ifndef KGEN_CUBLASLT_INT_H
#define KGEN_CUBLASLT_INT_H

#include "kgen_int.h"

/* A library step's call, ready to make: its descriptors and algorithm. */
typedef struct kgen_cublaslt_call kgen_cublaslt_call;

/* Whether "source" is a library step's call (kgen_print_library_cuda)
 * rather than CUDA C. */
bool kgen_cublaslt_source(const char *source);
/* The call "source" records, set up on the current context with a
 * workspace of "workspace_bytes" at device pointer "workspace" (kept:
 * it must outlive the call); *out is set even on failure, for
 * kgen_cublaslt_free. KGEN_EBACKEND when libcublasLt cannot be opened or
 * refuses the call. */
int kgen_cublaslt_new(const char *source, void *workspace, size_t workspace_bytes,
		      kgen_cublaslt_call **out, kgen_error *err);
/* Makes the call on "stream" (a CUstream; NULL the default) with the
 * tensors' device pointers, in graph order; returns once it is queued. */
int kgen_cublaslt_run(const kgen_cublaslt_call *call, void *const *tensors, void *stream,
		      kgen_error *err);
void kgen_cublaslt_free(kgen_cublaslt_call *call);

#endif
