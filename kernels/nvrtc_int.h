/*
 * nvrtc_int.h: NVRTC behind dlopen (nvrtc.c), for the cuda backend and
 * for compile checks without a GPU.
 */
#ifndef KGEN_NVRTC_INT_H
#define KGEN_NVRTC_INT_H

#include "kgen_int.h"

/* A compiled kernel: the cubin for the device and the PTX beside it. */
typedef struct kgen_cubin {
	char *cubin;
	size_t cubin_size;
	char *ptx;
	size_t ptx_size;
} kgen_cubin;

int kgen_nvrtc_open(kgen_error *err);
void kgen_nvrtc_version(int *major, int *minor);
int kgen_nvrtc_compile(const char *source, const char *name, const char *arch,
		       kgen_cubin *out, kgen_error *err);
void kgen_cubin_release(kgen_cubin *cubin);

#endif
