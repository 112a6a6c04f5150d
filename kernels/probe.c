/*
 * probe.c: the peaks of a backend's device, measured with its own
 * compile, allocate and run operations on hand-written kernels: a copy of
 * a large float array (bandwidth: bytes read and written over the median
 * time), chains of f32 multiply-adds on independent accumulators (flops),
 * and an empty kernel (the cost of one launch). The cost model divides by
 * these, so they are measured as the kernels it estimates are timed.
 *
 * The FMA kernel writes the lanes that ran (threads times vector width)
 * to out[0], so that the flops count whatever width the compiler chose.
 */
#include <stdlib.h>
#include <string.h>

#include "kgen_int.h"

#define STR(x) #x
#define XSTR(x) STR(x)

/* cpu: a 64 MiB array; OpenMP threads each chaining FMAs on 12 vectors. */
#define CPU_COPY_FLOATS (16L << 20)
#define CPU_FMA_ITERS (1L << 21)
/* cuda: a 256 MiB array; each thread chaining FMAs on 8 registers. */
#define CUDA_COPY_FLOATS (64L << 20)
#define CUDA_FMA_ITERS (1L << 14)
#define CUDA_BLOCKS_PER_SM 8
#define CUDA_THREADS 256

#define COPY_RUNS 5
#define FMA_RUNS 5
#define LAUNCH_RUNS 21

static const char cpu_copy[] =
	"void probe_copy(void **t)\n"
	"{\n"
	"\tconst float *restrict src = t[0];\n"
	"\tfloat *restrict dst = t[1];\n"
	"\n"
	"#pragma omp parallel for simd schedule(static)\n"
	"\tfor (long i = 0; i < " XSTR(CPU_COPY_FLOATS) "; i++)\n"
	"\t\tdst[i] = src[i];\n"
	"}\n";

static const char cpu_fma[] =
	"#include <omp.h>\n"
	"#if defined(__AVX512F__)\n"
	"#define LANES 16\n"
	"#elif defined(__AVX__)\n"
	"#define LANES 8\n"
	"#else\n"
	"#define LANES 4\n"
	"#endif\n"
	"typedef float vf __attribute__((vector_size(LANES * 4)));\n"
	"\n"
	"void probe_fma(void **t)\n"
	"{\n"
	"\tfloat *out = t[0];\n"
	"\n"
	"\tout[1] = 0;\n"
	"#pragma omp parallel\n"
	"\t{\n"
	"\t\tvf a[12], m = (vf){0} + 0.999f, c = (vf){0} + 0.001f;\n"
	"\t\tfloat sum = 0;\n"
	"\n"
	"\t\tfor (int j = 0; j < 12; j++)\n"
	"\t\t\ta[j] = (vf){0} + (float)(j + omp_get_thread_num());\n"
	"\t\tfor (long i = 0; i < " XSTR(CPU_FMA_ITERS) "; i++)\n"
	"#pragma GCC unroll 12\n"
	"\t\t\tfor (int j = 0; j < 12; j++)\n"
	"\t\t\t\ta[j] = a[j] * m + c;\n"
	"\t\tfor (int j = 0; j < 12; j++)\n"
	"\t\t\tfor (int l = 0; l < LANES; l++)\n"
	"\t\t\t\tsum += a[j][l];\n"
	"#pragma omp atomic\n"
	"\t\tout[1] += sum;\n"
	"#pragma omp master\n"
	"\t\tout[0] = (float)(omp_get_num_threads() * LANES);\n"
	"\t}\n"
	"}\n";

/* An empty parallel region: what every cpu kernel pays to start. */
static const char cpu_empty[] =
	"void probe_empty(void **t)\n"
	"{\n"
	"\t(void)t;\n"
	"#pragma omp parallel\n"
	"\t{\n"
	"\t}\n"
	"}\n";

static const char cuda_copy[] =
	"extern \"C\" __global__ void probe_copy(const float *src, float *dst)\n"
	"{\n"
	"\tunsigned long long step = (unsigned long long)gridDim.x * blockDim.x;\n"
	"\n"
	"\tfor (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x;\n"
	"\t     i < (unsigned long long)" XSTR(CUDA_COPY_FLOATS) "; i += step)\n"
	"\t\tdst[i] = src[i];\n"
	"}\n";

static const char cuda_fma[] =
	"extern \"C\" __global__ void probe_fma(float *out)\n"
	"{\n"
	"\tunsigned id = blockIdx.x * blockDim.x + threadIdx.x;\n"
	"\tfloat a0 = id, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3, a4 = a0 + 4,\n"
	"\t      a5 = a0 + 5, a6 = a0 + 6, a7 = a0 + 7;\n"
	"\tconst float m = 0.999f, c = 0.001f;\n"
	"\n"
	"#pragma unroll 16\n"
	"\tfor (int i = 0; i < " XSTR(CUDA_FMA_ITERS) "; i++) {\n"
	"\t\ta0 = fmaf(a0, m, c); a1 = fmaf(a1, m, c);\n"
	"\t\ta2 = fmaf(a2, m, c); a3 = fmaf(a3, m, c);\n"
	"\t\ta4 = fmaf(a4, m, c); a5 = fmaf(a5, m, c);\n"
	"\t\ta6 = fmaf(a6, m, c); a7 = fmaf(a7, m, c);\n"
	"\t}\n"
	"\tout[1 + id] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;\n"
	"\tif (id == 0)\n"
	"\t\tout[0] = (float)gridDim.x * blockDim.x;\n"
	"}\n";

static const char cuda_empty[] =
	"extern \"C\" __global__ void probe_empty(void)\n"
	"{\n"
	"}\n";

/* A device's probe kernels and their sizes. */
typedef struct probe_device {
	const char *copy, *fma, *empty;
	size_t copy_floats;
	double fma_flops_per_lane; /* 2 flops per FMA */
} probe_device;

static const probe_device cpu_device = {
	cpu_copy, cpu_fma, cpu_empty, CPU_COPY_FLOATS, 2.0 * 12 * CPU_FMA_ITERS,
};

static const probe_device cuda_device = {
	cuda_copy, cuda_fma, cuda_empty, CUDA_COPY_FLOATS, 2.0 * 8 * CUDA_FMA_ITERS,
};

static const char *const cpu_sources[] = {cpu_copy, cpu_fma, cpu_empty, NULL};
static const char *const cuda_sources[] = {cuda_copy, cuda_fma, cuda_empty, NULL};

const char *const *kgen_probe_sources(const char *name)
{
	if (!strcmp(name, "cpu"))
		return cpu_sources;
	return strcmp(name, "cuda") ? NULL : cuda_sources;
}

static int compare_ms(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Runs "launch" once to warm up, then "runs" times timed (the backend's
 * timing: cache flush, clock or events); the median in "*ms". */
static int median_ms(kgen_backend *backend, const kgen_launch *launch, int runs,
		     double *ms, kgen_error *err)
{
	double times[LAUNCH_RUNS];
	int rc = backend->ops->run(backend, launch, 1, NULL, err);

	for (int i = 0; i < runs && rc == KGEN_OK; i++)
		rc = backend->ops->run(backend, launch, 1, &times[i], err);
	if (rc < 0)
		return rc;
	qsort(times, runs, sizeof(double), compare_ms);
	*ms = times[runs / 2];
	return KGEN_OK;
}

/* Compiles kernel "entry" of "source", times it on "tensors" and unloads
 * it. */
static int time_kernel(kgen_backend *backend, const char *source,
		       const char *entry, void **tensors, int ntensors, int runs,
		       double *ms, kgen_error *err)
{
	unsigned blocks = (unsigned)(backend->cores > 0 ? backend->cores : 1) *
			  CUDA_BLOCKS_PER_SM;
	kgen_launch launch = {.name = entry, .blocks = blocks, .threads = CUDA_THREADS,
			      .ntensors = ntensors, .tensors = tensors};
	void *module = NULL;
	int rc = backend->ops->compile(backend, source, entry, &module,
				       &launch.function, err);

	if (rc == KGEN_OK)
		rc = median_ms(backend, &launch, runs, ms, err);
	if (module)
		backend->ops->unload(backend, module);
	return rc;
}

/* Fills a device buffer with ones: an untouched source array could be
 * read from a shared zero page (cpu) and never reach memory. */
static int fill_ones(kgen_backend *backend, void *buffer, size_t floats,
		     kgen_error *err)
{
	float *host = malloc(floats * sizeof(float));
	int rc;

	if (!host)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	for (size_t i = 0; i < floats; i++)
		host[i] = 1.0f;
	rc = backend->ops->upload(backend, buffer, host, floats * sizeof(float), err);
	free(host);
	return rc;
}

static int probe_bandwidth(kgen_backend *backend, const probe_device *device,
			   kgen_peaks *peaks, kgen_error *err)
{
	size_t bytes = device->copy_floats * sizeof(float);
	void *buffers[2] = {NULL, NULL};
	double ms = 0;
	int rc = backend->ops->alloc(backend, bytes, &buffers[0], err);

	if (rc == KGEN_OK)
		rc = backend->ops->alloc(backend, bytes, &buffers[1], err);
	if (rc == KGEN_OK)
		rc = fill_ones(backend, buffers[0], device->copy_floats, err);
	if (rc == KGEN_OK)
		rc = time_kernel(backend, device->copy, "probe_copy", buffers, 2,
				 COPY_RUNS, &ms, err);
	for (int i = 0; i < 2; i++)
		if (buffers[i])
			backend->ops->release(backend, buffers[i]);
	if (rc == KGEN_OK)
		peaks->bandwidth_gbs = 2.0 * bytes / (ms * 1e6);
	return rc;
}

static int probe_flops(kgen_backend *backend, const probe_device *device,
		       kgen_peaks *peaks, kgen_error *err)
{
	size_t floats = 1 + (size_t)(backend->cores > 0 ? backend->cores : 1) *
			CUDA_BLOCKS_PER_SM * CUDA_THREADS;
	float lanes = 0;
	void *out = NULL;
	double ms = 0;
	int rc = backend->ops->alloc(backend, floats * sizeof(float), &out, err);

	if (rc == KGEN_OK)
		rc = time_kernel(backend, device->fma, "probe_fma", &out, 1, FMA_RUNS,
				 &ms, err);
	if (rc == KGEN_OK)
		rc = backend->ops->download(backend, &lanes, out, sizeof(lanes), err);
	if (out)
		backend->ops->release(backend, out);
	if (rc == KGEN_OK)
		peaks->gflops = device->fma_flops_per_lane * lanes / (ms * 1e6);
	return rc;
}

int kgen_probe(kgen_backend *backend, kgen_peaks *peaks, kgen_error *err)
{
	const probe_device *device = !strcmp(backend->ops->name, "cuda") ?
				     &cuda_device : &cpu_device;
	int rc;

	*peaks = (kgen_peaks){.cores = backend->cores};
	if ((rc = probe_bandwidth(backend, device, peaks, err)) < 0 ||
	    (rc = probe_flops(backend, device, peaks, err)) < 0)
		return rc;
	return time_kernel(backend, device->empty, "probe_empty", NULL, 0,
			   LAUNCH_RUNS, &peaks->launch_ms, err);
}
