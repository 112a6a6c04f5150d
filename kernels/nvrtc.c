/*
 * nvrtc.c: NVRTC, opened with dlopen: CUDA C to PTX and cubin.
 *
 * No CUDA header is needed: the generated kernels use plain types and
 * inline PTX for half conversions.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvrtc_int.h"

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

static struct {
	void *lib;
	nvrtcResult (*version)(int *major, int *minor);
	nvrtcResult (*create)(nvrtcProgram *prog, const char *src, const char *name,
			      int nheaders, const char *const *headers,
			      const char *const *include_names);
	nvrtcResult (*compile)(nvrtcProgram prog, int noptions,
			       const char *const *options);
	nvrtcResult (*log_size)(nvrtcProgram prog, size_t *size);
	nvrtcResult (*log)(nvrtcProgram prog, char *log);
	nvrtcResult (*cubin_size)(nvrtcProgram prog, size_t *size);
	nvrtcResult (*cubin)(nvrtcProgram prog, char *cubin);
	nvrtcResult (*ptx_size)(nvrtcProgram prog, size_t *size);
	nvrtcResult (*ptx)(nvrtcProgram prog, char *ptx);
	nvrtcResult (*destroy)(nvrtcProgram *prog);
} nvrtc;

static const char *const library_names[] = {
	"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL,
};

#define LOAD(field, symbol)                                                   \
	(*(void **)&nvrtc.field = dlsym(nvrtc.lib, symbol))

static bool load_symbols(void)
{
	return LOAD(version, "nvrtcVersion") && LOAD(create, "nvrtcCreateProgram") &&
	       LOAD(compile, "nvrtcCompileProgram") &&
	       LOAD(log_size, "nvrtcGetProgramLogSize") &&
	       LOAD(log, "nvrtcGetProgramLog") && LOAD(cubin_size, "nvrtcGetCUBINSize") &&
	       LOAD(cubin, "nvrtcGetCUBIN") && LOAD(ptx_size, "nvrtcGetPTXSize") &&
	       LOAD(ptx, "nvrtcGetPTX") && LOAD(destroy, "nvrtcDestroyProgram");
}

/* Opens libnvrtc once per process; false with the reason in "err". */
int kgen_nvrtc_open(kgen_error *err)
{
	for (int i = 0; !nvrtc.lib && library_names[i]; i++)
		nvrtc.lib = dlopen(library_names[i], RTLD_NOW | RTLD_LOCAL);
	if (!nvrtc.lib)
		return kgen_fail(err, KGEN_EBACKEND, "libnvrtc is not installed "
				 "(no libnvrtc.so.13, .so.12 or .so found)");
	if (!load_symbols())
		return kgen_fail(err, KGEN_EBACKEND, "libnvrtc lacks a function "
				 "tuned needs: %s", dlerror());
	return KGEN_OK;
}

void kgen_nvrtc_version(int *major, int *minor)
{
	*major = *minor = 0;
	if (nvrtc.version)
		nvrtc.version(major, minor);
}

static char *program_log(nvrtcProgram prog)
{
	size_t size = 0;
	char *log = NULL;

	if (nvrtc.log_size(prog, &size) == 0 && (log = calloc(1, size + 1)))
		nvrtc.log(prog, log);
	return log;
}

static char *fetch(nvrtcProgram prog, nvrtcResult (*size_of)(nvrtcProgram, size_t *),
		   nvrtcResult (*get)(nvrtcProgram, char *), size_t *size)
{
	char *data = NULL;

	if (size_of(prog, size) == 0 && (data = malloc(*size + 1)) && get(prog, data)) {
		free(data);
		data = NULL;
	}
	return data;
}

int kgen_nvrtc_compile(const char *source, const char *name, const char *arch,
		       kgen_cubin *out, kgen_error *err)
{
	char option[64];
	const char *options[] = {option, "--std=c++17", "-default-device"};
	nvrtcProgram prog;
	int rc;

	*out = (kgen_cubin){0};
	if ((rc = kgen_nvrtc_open(err)) < 0)
		return rc;
	snprintf(option, sizeof(option), "--gpu-architecture=%s", arch);
	if (nvrtc.create(&prog, source, name, 0, NULL, NULL) != 0)
		return kgen_fail(err, KGEN_EBACKEND, "nvrtc cannot create a program");
	if (nvrtc.compile(prog, 3, options) != 0) {
		if (err)
			err->log = program_log(prog);
		nvrtc.destroy(&prog);
		return kgen_fail(err, KGEN_ECOMPILE, "nvrtc failed on kernel '%s' "
				 "for %s", name, arch);
	}
	out->cubin = fetch(prog, nvrtc.cubin_size, nvrtc.cubin, &out->cubin_size);
	out->ptx = fetch(prog, nvrtc.ptx_size, nvrtc.ptx, &out->ptx_size);
	nvrtc.destroy(&prog);
	if (!out->cubin || !out->ptx) {
		kgen_cubin_release(out);
		return kgen_fail(err, KGEN_EBACKEND, "nvrtc gave no cubin or PTX");
	}
	return KGEN_OK;
}

void kgen_cubin_release(kgen_cubin *cubin)
{
	free(cubin->cubin);
	free(cubin->ptx);
	*cubin = (kgen_cubin){0};
}

int kgen_nvrtc_check(const char *source, const char *arch, kgen_error *err)
{
	kgen_cubin cubin;
	int rc = kgen_nvrtc_compile(source, "check", arch, &cubin, err);

	kgen_cubin_release(&cubin);
	return rc;
}

static int write_bytes(const char *path, const char *data, size_t size, kgen_error *err)
{
	FILE *f = fopen(path, "wb");
	bool written = f && fwrite(data, 1, size, f) == size;

	if (f && fclose(f) != 0)
		written = false;
	return written ? KGEN_OK : kgen_fail(err, KGEN_EIO, "%s: cannot write (%s)",
					     path, strerror(errno));
}

int kgen_nvrtc_write(const char *source, const char *arch, const char *ptx_path,
		     const char *cubin_path, kgen_error *err)
{
	kgen_cubin cubin;
	int rc = kgen_nvrtc_compile(source, "kernel", arch, &cubin, err);

	if (rc == KGEN_OK)
		rc = write_bytes(ptx_path, cubin.ptx, strnlen(cubin.ptx, cubin.ptx_size), err);
	if (rc == KGEN_OK)
		rc = write_bytes(cubin_path, cubin.cubin, cubin.cubin_size, err);
	kgen_cubin_release(&cubin);
	return rc;
}
