/*
 * backend_cuda.c: kernels as CUDA C, compiled by NVRTC for the device's own
 * architecture, loaded and launched through the driver API, timed with
 * events. libcuda.so.1 is opened with dlopen: nothing is linked.
 *
 * Between timed runs a buffer twice the size of L2 is cleared, so that
 * every run starts with a cold L2. With a shared folder, cubins are named
 * <sha of the source>.<arch>.cubin, looked for there before compiling and
 * left there after; compiling there needs NVRTC only.
 *
 * A library step's "source" is its cuBLASLt call (cublaslt.c): building
 * it sets the call up, with a workspace the backend allocates once, and
 * launching it makes the call on the launch's stream.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublaslt_int.h"
#include "nvrtc_int.h"

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

enum {
	ATTR_MULTIPROCESSORS = 16,
	ATTR_L2_BYTES = 38,
	ATTR_CC_MAJOR = 75,
	ATTR_CC_MINOR = 76,
};

static struct {
	void *lib;
	CUresult (*init)(unsigned flags);
	CUresult (*driver_version)(int *version);
	CUresult (*device_count)(int *count);
	CUresult (*device_get)(CUdevice *dev, int ordinal);
	CUresult (*device_attribute)(int *value, int attribute, CUdevice dev);
	CUresult (*device_name)(char *name, int len, CUdevice dev);
	CUresult (*retain)(CUcontext *ctx, CUdevice dev);
	CUresult (*release_ctx)(CUdevice dev);
	CUresult (*set_current)(CUcontext ctx);
	CUresult (*module_load)(CUmodule *module, const void *image);
	CUresult (*module_function)(CUfunction *fn, CUmodule module, const char *name);
	CUresult (*module_unload)(CUmodule module);
	CUresult (*mem_alloc)(CUdeviceptr *ptr, size_t bytes);
	CUresult (*mem_free)(CUdeviceptr ptr);
	CUresult (*htod)(CUdeviceptr dst, const void *src, size_t bytes);
	CUresult (*dtoh)(void *dst, CUdeviceptr src, size_t bytes);
	CUresult (*memset8)(CUdeviceptr dst, unsigned char value, size_t n);
	CUresult (*launch)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
			   unsigned bx, unsigned by, unsigned bz, unsigned shared,
			   CUstream stream, void **params, void **extra);
	CUresult (*synchronize)(void);
	CUresult (*event_create)(CUevent *event, unsigned flags);
	CUresult (*event_record)(CUevent event, CUstream stream);
	CUresult (*event_synchronize)(CUevent event);
	CUresult (*event_elapsed)(float *ms, CUevent start, CUevent end);
	CUresult (*event_destroy)(CUevent event);
	CUresult (*error_string)(CUresult error, const char **text);
	CUresult (*priority_range)(int *least, int *greatest);
	CUresult (*stream_create)(CUstream *stream, unsigned flags, int priority);
	CUresult (*stream_wait)(CUstream stream, CUevent event, unsigned flags);
	CUresult (*stream_destroy)(CUstream stream);
	CUresult (*occupancy)(int *blocks, CUfunction fn, int threads, size_t shared);
} cu;

#define LOAD(field, symbol) (*(void **)&cu.field = dlsym(cu.lib, symbol))

static bool load_driver_symbols(void)
{
	return LOAD(init, "cuInit") && LOAD(driver_version, "cuDriverGetVersion") &&
	       LOAD(device_count, "cuDeviceGetCount") && LOAD(device_get, "cuDeviceGet") &&
	       LOAD(device_attribute, "cuDeviceGetAttribute") &&
	       LOAD(device_name, "cuDeviceGetName") &&
	       LOAD(retain, "cuDevicePrimaryCtxRetain") &&
	       LOAD(release_ctx, "cuDevicePrimaryCtxRelease_v2") &&
	       LOAD(set_current, "cuCtxSetCurrent") &&
	       LOAD(module_load, "cuModuleLoadData") &&
	       LOAD(module_function, "cuModuleGetFunction") &&
	       LOAD(module_unload, "cuModuleUnload") && LOAD(mem_alloc, "cuMemAlloc_v2") &&
	       LOAD(mem_free, "cuMemFree_v2") && LOAD(htod, "cuMemcpyHtoD_v2") &&
	       LOAD(dtoh, "cuMemcpyDtoH_v2") && LOAD(memset8, "cuMemsetD8_v2") &&
	       LOAD(launch, "cuLaunchKernel") && LOAD(synchronize, "cuCtxSynchronize") &&
	       LOAD(event_create, "cuEventCreate") && LOAD(event_record, "cuEventRecord") &&
	       LOAD(event_synchronize, "cuEventSynchronize") &&
	       LOAD(event_elapsed, "cuEventElapsedTime_v2") &&
	       LOAD(event_destroy, "cuEventDestroy_v2") &&
	       LOAD(error_string, "cuGetErrorString") &&
	       LOAD(priority_range, "cuCtxGetStreamPriorityRange") &&
	       LOAD(stream_create, "cuStreamCreateWithPriority") &&
	       LOAD(stream_wait, "cuStreamWaitEvent") &&
	       LOAD(stream_destroy, "cuStreamDestroy_v2") &&
	       LOAD(occupancy, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
}

typedef struct cuda_state {
	CUdevice device;
	CUcontext context;
	char arch[16];
	CUdeviceptr flush;
	size_t flush_bytes;
	CUevent start, end;
	/* plans with sync (docs/design/sync.md): a high and a low priority stream,
	 * and an event per launch and one for the start */
	CUstream streams[2];
	CUevent *marks;
	int nmarks;
	CUdeviceptr workspace; /* cuBLASLt's, made with the first library step */
} cuda_state;

#define WORKSPACE_BYTES (32u << 20)

static const char *cu_text(CUresult rc)
{
	const char *text = NULL;

	if (cu.error_string)
		cu.error_string(rc, &text);
	return text ? text : "unknown error";
}

/* Fails with the driver's words unless "rc" is success. */
static int check(CUresult rc, const char *what, kgen_error *err)
{
	if (rc == 0)
		return KGEN_OK;
	return kgen_fail(err, KGEN_EBACKEND, "%s failed: %s (CUDA error %d)", what,
			 cu_text(rc), rc);
}

/* A loaded kernel, with the cubin (and the PTX, when compiled here)
 * NVRTC made of it kept; or a library step's call. */
typedef struct cuda_module {
	CUmodule module;
	kgen_cubin binary;
	kgen_cublaslt_call *library;
} cuda_module;

/* The cubin of "source" in the shared folder: <sha>.<arch>.cubin. */
static void shared_cubin_path(kgen_backend *backend, const char *source,
			      char *path, size_t size)
{
	cuda_state *cuda = backend->state;
	char suffix[32];

	snprintf(suffix, sizeof(suffix), ".%s.cubin", cuda->arch);
	kgen_share_path(backend, source, suffix, path, size);
}

/* Compiles "source" with NVRTC alone (no driver call: a compile worker
 * may run beside a busy GPU) into the shared folder, unless it is there. */
static int cuda_prepare(kgen_backend *backend, const char *source,
			const char *entry, kgen_error *err)
{
	cuda_state *cuda = backend->state;
	char path[PATH_MAX];
	kgen_cubin binary;
	int rc;

	if (kgen_cublaslt_source(source))
		return KGEN_OK; /* a library step: nothing to compile */
	shared_cubin_path(backend, source, path, sizeof(path));
	if (kgen_share_has(path))
		return KGEN_OK;
	if ((rc = kgen_nvrtc_compile(source, entry, cuda->arch, &binary, err)) < 0)
		return rc;
	rc = kgen_share_write(path, binary.cubin, binary.cubin_size, err);
	kgen_cubin_release(&binary);
	return rc;
}

/* The cubin of "source" from the shared folder, compiled there first if
 * it is not there yet. */
static int read_shared_cubin(kgen_backend *backend, const char *source,
			     const char *entry, kgen_cubin *binary,
			     kgen_error *err)
{
	char path[PATH_MAX];
	int rc;

	if ((rc = cuda_prepare(backend, source, entry, err)) < 0)
		return rc;
	shared_cubin_path(backend, source, path, sizeof(path));
	return kgen_share_read(path, &binary->cubin, &binary->cubin_size, err);
}

/* A library step's call, set up with the backend's workspace. */
static int set_up_library_step(cuda_state *cuda, const char *source, cuda_module *m,
			       void **function, kgen_error *err)
{
	int rc = KGEN_OK;

	if (!cuda->workspace)
		rc = check(cu.mem_alloc(&cuda->workspace, WORKSPACE_BYTES),
			   "cuMemAlloc (cuBLASLt's workspace)", err);
	if (rc == KGEN_OK)
		rc = kgen_cublaslt_new(source, (void *)(uintptr_t)cuda->workspace,
				       WORKSPACE_BYTES, &m->library, err);
	*function = m->library;
	return rc;
}

static int cuda_compile(kgen_backend *backend, const char *source,
			const char *entry, void **module, void **function,
			kgen_error *err)
{
	cuda_state *cuda = backend->state;
	cuda_module *m = calloc(1, sizeof(*m));
	int rc;

	if (!m)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	*module = m;
	if (kgen_cublaslt_source(source))
		return set_up_library_step(cuda, source, m, function, err);
	rc = backend->share ? read_shared_cubin(backend, source, entry, &m->binary, err)
			    : kgen_nvrtc_compile(source, entry, cuda->arch, &m->binary, err);
	if (rc < 0)
		return rc;
	rc = check(cu.module_load(&m->module, m->binary.cubin), "loading the cubin", err);
	if (rc == KGEN_OK)
		rc = check(cu.module_function((CUfunction *)function, m->module, entry),
			   "finding the kernel", err);
	return rc;
}

static void cuda_unload(kgen_backend *backend, void *module)
{
	cuda_module *m = module;

	(void)backend;
	if (m->module)
		cu.module_unload(m->module);
	kgen_cublaslt_free(m->library);
	kgen_cubin_release(&m->binary);
	free(m);
}

static int cuda_alloc(kgen_backend *backend, size_t bytes, void **buffer,
		      kgen_error *err)
{
	CUdeviceptr ptr = 0;
	int rc = check(cu.mem_alloc(&ptr, bytes ? bytes : 1), "cuMemAlloc", err);

	(void)backend;
	*buffer = (void *)(uintptr_t)ptr;
	return rc;
}

static void cuda_release(kgen_backend *backend, void *buffer)
{
	(void)backend;
	cu.mem_free((CUdeviceptr)(uintptr_t)buffer);
}

static int cuda_upload(kgen_backend *backend, void *buffer, const void *host,
		       size_t bytes, kgen_error *err)
{
	(void)backend;
	return check(cu.htod((CUdeviceptr)(uintptr_t)buffer, host, bytes),
		     "copying to the device", err);
}

static int cuda_download(kgen_backend *backend, void *host, const void *buffer,
			 size_t bytes, kgen_error *err)
{
	(void)backend;
	return check(cu.dtoh(host, (CUdeviceptr)(uintptr_t)buffer, bytes),
		     "copying from the device", err);
}

/* The kernel's arguments: the address of each tensor's device pointer,
 * then that of its scratch memory if it has any, then for an entry
 * wrapped for sync its four sync arguments. A library step makes its
 * call instead. */
static int launch_one(const kgen_launch *launch, void *stream, kgen_error *err)
{
	void **params;
	unsigned iteration = launch->sync.iteration ? *launch->sync.iteration : 0;
	int n = launch->ntensors, rc;

	if (launch->library)
		return kgen_cublaslt_run(launch->function, launch->tensors, stream, err);
	if (!(params = calloc(launch->ntensors + 5, sizeof(void *))))
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	for (int t = 0; t < n; t++)
		params[t] = &launch->tensors[t];
	if (launch->scratch)
		params[n++] = (void *)&launch->scratch;
	if (launch->sync.wrapped) {
		params[n] = (void *)&launch->sync.in;
		params[n + 1] = (void *)&launch->sync.out;
		params[n + 2] = (void *)&launch->sync.self;
		params[n + 3] = &iteration;
	}
	rc = check(cu.launch(launch->function, launch->blocks, 1, 1,
			     launch->threads, 1, 1, 0, stream, params, NULL),
		   launch->name, err);
	free(params);
	return rc;
}

/* The wait-kernel ahead of a consumer: one thread until the producer's
 * first block has raised its flag for this run. */
static int launch_wait(const kgen_launch *launch, CUstream stream, kgen_error *err)
{
	unsigned iteration = *launch->sync.iteration;
	void *params[] = {(void *)&launch->sync.started, &iteration};

	return check(cu.launch(launch->sync.wait_function, 1, 1, 1, 1, 1, 1, 0, stream,
			       params, NULL), "a sync wait-kernel", err);
}

/* The two streams, made once, and an event per launch plus one. */
static int prepare_overlap(cuda_state *cuda, int n, kgen_error *err)
{
	int least = 0, greatest = 0, rc = KGEN_OK;

	if (!cuda->streams[0]) {
		cu.priority_range(&least, &greatest);
		rc = check(cu.stream_create(&cuda->streams[0], 0, greatest), "cuStreamCreate", err);
		if (rc == KGEN_OK)
			rc = check(cu.stream_create(&cuda->streams[1], 0, least),
				   "cuStreamCreate", err);
	}
	if (rc == KGEN_OK && cuda->nmarks < n + 1) {
		CUevent *marks = realloc(cuda->marks, (n + 1) * sizeof(CUevent));

		if (!marks)
			return kgen_fail(err, KGEN_ENOMEM, "out of memory");
		cuda->marks = marks;
		for (; cuda->nmarks < n + 1 && rc == KGEN_OK; cuda->nmarks++)
			rc = check(cu.event_create(&marks[cuda->nmarks], 2 /* no timing */),
				   "cuEventCreate", err);
	}
	return rc;
}

/* Launch i goes on "stream"; they alternate, the first consumer on the
 * low priority one, so that its producer's blocks go first. Waits keep
 * the plan's order except where a consumer overlaps its producer: launch
 * i waits for launch i - 1 to end, a consumer only for i - 3 (the other
 * stream's launch before its producer; its own stream keeps i - 2 in
 * order) and for its producer's tiles by semaphores. */
static int launch_one_overlapped(cuda_state *cuda, const kgen_launch *launches, int i,
				 CUstream stream, kgen_error *err)
{
	const kgen_launch *l = &launches[i];
	int after = l->sync.consumer ? i - 3 : i - 1, rc = KGEN_OK;

	if (after >= 0)
		rc = check(cu.stream_wait(stream, cuda->marks[after], 0), "cuStreamWaitEvent", err);
	if (rc == KGEN_OK && l->sync.consumer && l->sync.wait_function)
		rc = launch_wait(l, stream, err);
	if (rc == KGEN_OK)
		rc = launch_one(l, stream, err);
	if (rc == KGEN_OK)
		rc = check(cu.event_record(cuda->marks[i], stream), "cuEventRecord", err);
	return rc;
}

/* The launches of a plan with sync, on two streams between "outer"'s
 * work before and after them; one more run for the semaphores. */
static int launch_overlapped(cuda_state *cuda, const kgen_launch *launches, int n,
			     int first_consumer, CUstream outer, kgen_error *err)
{
	int rc = prepare_overlap(cuda, n, err);

	for (int i = 0; i < n; i++)
		if (launches[i].sync.iteration) {
			++*launches[i].sync.iteration;
			break;
		}
	if (rc == KGEN_OK)
		rc = check(cu.event_record(cuda->marks[n], outer), "cuEventRecord", err);
	for (int s = 0; s < 2 && rc == KGEN_OK; s++)
		rc = check(cu.stream_wait(cuda->streams[s], cuda->marks[n], 0),
			   "cuStreamWaitEvent", err);
	for (int i = 0; i < n && rc == KGEN_OK; i++)
		rc = launch_one_overlapped(cuda, launches, i,
					   cuda->streams[(i + 1 + first_consumer) % 2], err);
	for (int i = n - 2 < 0 ? 0 : n - 2; i < n && rc == KGEN_OK; i++)
		rc = check(cu.stream_wait(outer, cuda->marks[i], 0), "cuStreamWaitEvent", err);
	return rc;
}

static int launch_all(cuda_state *cuda, const kgen_launch *launches, int n,
		      CUstream stream, kgen_error *err)
{
	int first_consumer = kgen_first_consumer(launches, n), rc = KGEN_OK;

	if (first_consumer >= 0)
		return launch_overlapped(cuda, launches, n, first_consumer, stream, err);
	for (int i = 0; i < n && rc == KGEN_OK; i++)
		rc = launch_one(&launches[i], stream, err);
	return rc;
}

static int cuda_lookup(kgen_backend *backend, void *module, const char *entry,
		       void **function, kgen_error *err)
{
	(void)backend;
	return check(cu.module_function((CUfunction *)function,
					 ((cuda_module *)module)->module, entry),
		     "finding a sync wait-kernel", err);
}

static int cuda_blocks_per_sm(kgen_backend *backend, void *function, unsigned threads,
			      int *blocks, kgen_error *err)
{
	(void)backend;
	return check(cu.occupancy(blocks, function, (int)threads, 0),
		     "cuOccupancyMaxActiveBlocksPerMultiprocessor", err);
}

static int cuda_run(kgen_backend *backend, const kgen_launch *launches, int n,
		    double *ms, kgen_error *err)
{
	cuda_state *cuda = backend->state;
	float elapsed = 0;
	int rc = KGEN_OK;

	if (ms)
		rc = check(cu.memset8(cuda->flush, 0, cuda->flush_bytes), "flushing L2", err);
	if (rc == KGEN_OK && ms)
		rc = check(cu.event_record(cuda->start, NULL), "cuEventRecord", err);
	if (rc == KGEN_OK)
		rc = launch_all(cuda, launches, n, NULL, err);
	if (rc == KGEN_OK && ms)
		rc = check(cu.event_record(cuda->end, NULL), "cuEventRecord", err);
	if (rc == KGEN_OK)
		rc = check(cu.synchronize(), "running the kernels", err);
	if (rc == KGEN_OK && ms)
		rc = check(cu.event_elapsed(&elapsed, cuda->start, cuda->end),
			   "cuEventElapsedTime", err);
	if (ms)
		*ms = elapsed;
	return rc;
}

static int cuda_enqueue(kgen_backend *backend, const kgen_launch *launches, int n,
			void *stream, kgen_error *err)
{
	return launch_all(backend->state, launches, n, stream, err);
}

static void cuda_close(kgen_backend *backend)
{
	cuda_state *cuda = backend->state;

	cu.event_destroy(cuda->start);
	cu.event_destroy(cuda->end);
	for (int i = 0; i < cuda->nmarks; i++)
		cu.event_destroy(cuda->marks[i]);
	free(cuda->marks);
	for (int s = 0; s < 2; s++)
		if (cuda->streams[s])
			cu.stream_destroy(cuda->streams[s]);
	cu.mem_free(cuda->flush);
	if (cuda->workspace)
		cu.mem_free(cuda->workspace);
	cu.release_ctx(cuda->device);
	free(cuda);
}

static const kgen_backend_ops cuda_ops = {
	.name = "cuda",
	.compile = cuda_compile,
	.prepare = cuda_prepare,
	.unload = cuda_unload,
	.lookup = cuda_lookup,
	.blocks_per_sm = cuda_blocks_per_sm,
	.alloc = cuda_alloc,
	.release = cuda_release,
	.upload = cuda_upload,
	.download = cuda_download,
	.run = cuda_run,
	.enqueue = cuda_enqueue,
	.close = cuda_close,
};

static int open_driver(kgen_error *err)
{
	int count = 0;

	if (!cu.lib && !(cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)))
		return kgen_fail(err, KGEN_EBACKEND, "no CUDA driver: libcuda.so.1 "
				 "cannot be opened");
	if (!load_driver_symbols())
		return kgen_fail(err, KGEN_EBACKEND, "libcuda.so.1 lacks a function "
				 "tuned needs");
	if (check(cu.init(0), "cuInit", err) < 0 ||
	    check(cu.device_count(&count), "cuDeviceGetCount", err) < 0)
		return KGEN_EBACKEND;
	if (count == 0)
		return kgen_fail(err, KGEN_EBACKEND, "the CUDA driver sees no GPU");
	return KGEN_OK;
}

/* Device 0 (set CUDA_VISIBLE_DEVICES to choose): its primary context,
 * architecture, L2 flush buffer and timing events. */
static int open_device(cuda_state *cuda, kgen_error *err)
{
	int major = 0, minor = 0, l2 = 0;
	int rc = check(cu.device_get(&cuda->device, 0), "cuDeviceGet", err);

	if (rc == KGEN_OK)
		rc = check(cu.retain(&cuda->context, cuda->device), "retaining a context", err);
	if (rc == KGEN_OK)
		rc = check(cu.set_current(cuda->context), "cuCtxSetCurrent", err);
	if (rc < 0)
		return rc;
	cu.device_attribute(&major, ATTR_CC_MAJOR, cuda->device);
	cu.device_attribute(&minor, ATTR_CC_MINOR, cuda->device);
	cu.device_attribute(&l2, ATTR_L2_BYTES, cuda->device);
	snprintf(cuda->arch, sizeof(cuda->arch), "sm_%d%d", major, minor);
	cuda->flush_bytes = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
	if ((rc = check(cu.mem_alloc(&cuda->flush, cuda->flush_bytes), "cuMemAlloc", err)) < 0 ||
	    (rc = check(cu.event_create(&cuda->start, 0), "cuEventCreate", err)) < 0)
		return rc;
	return check(cu.event_create(&cuda->end, 0), "cuEventCreate", err);
}

static void describe(kgen_backend *backend, const cuda_state *cuda)
{
	char name[128] = "";
	int sms = 0, driver = 0, major, minor;

	cu.device_name(name, sizeof(name), cuda->device);
	cu.device_attribute(&sms, ATTR_MULTIPROCESSORS, cuda->device);
	cu.driver_version(&driver);
	kgen_nvrtc_version(&major, &minor);
	snprintf(backend->description, sizeof(backend->description),
		 "cuda: %s (%s, %d SMs), driver %d, nvrtc %d.%d", name, cuda->arch,
		 sms, driver, major, minor);
}

int kgen_cuda_open(kgen_backend *backend, kgen_error *err)
{
	cuda_state *cuda;
	int rc;

	if ((rc = open_driver(err)) < 0 || (rc = kgen_nvrtc_open(err)) < 0)
		return rc;
	if (!(cuda = calloc(1, sizeof(*cuda))))
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	if ((rc = open_device(cuda, err)) < 0) {
		free(cuda);
		return rc;
	}
	backend->ops = &cuda_ops;
	backend->state = cuda;
	cu.device_attribute(&backend->cores, ATTR_MULTIPROCESSORS, cuda->device);
	describe(backend, cuda);
	return KGEN_OK;
}
