/*
 * kgen_int.h: the kernels module's private forms.
 */
#ifndef KGEN_INT_H
#define KGEN_INT_H

#include "ir.h"
#include "kgen.h"

/* "x" rounded up to a multiple of "step". */
static inline int64_t kgen_round_up(int64_t x, int64_t step)
{
	return (x + step - 1) / step * step;
}

/* Fills "err" like sched_fail; returns code. Safe with err == NULL. */
int kgen_fail(kgen_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The op whose output the kernel's schedule cuts: its only op, or the
 * root of a fused group's first branch. */
const sched_op *kgen_kernel_op(const sched_graph *graph, const kgen_kernel *kernel);
/* That op's target, whose dims the schedule's are. */
const sched_tensor *kgen_kernel_target(const sched_graph *graph,
				       const kgen_kernel *kernel);
/* The tiles the schedule's tile cuts that op's output into, and the
 * elements of one tile (those past the output's edge included). */
int64_t kgen_kernel_tiles(const sched_graph *graph, const kgen_kernel *kernel);
int64_t kgen_tile_elements(const sched_graph *graph, const kgen_kernel *kernel);

/* library.c: op "op" as a row-major GEMM C = A B (cblas_sgemm's terms:
 * A and B maybe transposed, leading dimensions, element offsets); false
 * with the reason in *why when it is none. */
typedef struct kgen_gemm {
	int a, b, c;
	int64_t m, n, k;
	bool trans_a, trans_b;
	int64_t lda, ldb, ldc;
	int64_t a0, b0, c0;
} kgen_gemm;

bool kgen_gemm_of(const sched_graph *graph, int op, kgen_gemm *out, const char **why);
/* A library step's epilogue: the kernel's ops after its product, applied
 * to C as cuBLASLt's epilogues apply them: plus a bias along C's columns
 * ("bias": a tensor of N elements, or -1), then an activation ("act":
 * SCHED_RELU, SCHED_GELU_TANH, or SCHED_FUNC_COUNT for none). "out" is
 * the tensor the step writes: the last op's target (C alone without an
 * epilogue); the results between stay unwritten. */
typedef struct kgen_epilogue {
	int bias, out;
	enum sched_func act;
} kgen_epilogue;

/* Kernel "kernel" as a library step: its first op's GEMM and its other
 * ops' epilogue; false with the reason in *why when it is none (its
 * dtypes unchecked). */
bool kgen_library_step_of(const sched_graph *graph, const kgen_kernel *kernel,
			  kgen_gemm *gemm, kgen_epilogue *epi, const char **why);
/* A library step's source: C that calls cblas_sgemm (cpu), or the
 * cuBLASLt call as JSON, {"library": KGEN_LIBRARY_CUBLASLT, ...}, that
 * the cuda backend makes (cublaslt.c). NULL when the op does not fit. */
#define KGEN_LIBRARY_CUBLASLT "cublasLt"
char *kgen_print_library_c(const sched_graph *graph, const kgen_kernel *kernel);
char *kgen_print_library_cuda(const sched_graph *graph, const kgen_kernel *kernel);

/* sync.c: a kernel's "sync" read from its plan entry "obj" (NULL: none)
 * and proved; written back (NULL when off); proved again (a plan built
 * in memory, by the search); and whether kernel k's cuda entry is wrapped
 * for sync (print_sync.c): it waits on k - 1 or k + 1 waits on it. */
int kgen_sync_from_json(const sched_graph *graph, kgen_plan *plan, int k,
			json_t *obj, kgen_error *err);
json_t *kgen_sync_to_json(const kgen_plan *plan, int k);
int kgen_sync_check_kernel(const sched_graph *graph, const kgen_plan *plan, int k,
			   kgen_error *err);
/* The same on kernel k's dependence "sync" analysed already (its cheap
 * checks first: the policy offered, early loads; then the proof). */
int kgen_sync_prove(const sched_graph *graph, const kgen_plan *plan, int k,
		    const sched_sync *sync, kgen_error *err);
bool kgen_sync_wraps(const kgen_plan *plan, int k);

/* Whether "op" reads or writes "tensor" (print.c). */
bool kgen_op_touches(const sched_op *op, int tensor);

/* The sync arguments of a cuda entry wrapped by print_sync.c (device
 * pointers into the program's sync area; NULL ones turn that part off,
 * as when a kernel is timed alone), and how the launch overlaps the one
 * before it: "consumer" runs on the other stream, behind "wait_function"
 * (its wait-kernel, watching "started") where it has one. "iteration"
 * counts the program's runs; the backend adds one per run. */
typedef struct kgen_launch_sync {
	bool wrapped, consumer;
	void *in, *out, *self;
	void *wait_function;
	void *started;
	unsigned *iteration;
} kgen_launch_sync;

/* A kernel ready to launch: its function, shape and tensor arguments,
 * then its scratch memory when it has any (kgen_kernel_scratch_bytes),
 * then its sync arguments. A library step's "function" is what its
 * backend made of its call (cuda: a kgen_cublaslt_call; cpu: the
 * compiled C that makes it). */
typedef struct kgen_launch {
	const char *name;
	bool library;
	void *function;
	unsigned blocks, threads;
	int ntensors;
	void **tensors;
	const size_t *bytes; /* each tensor's size, or NULL: not known */
	void *scratch;
	size_t scratch_bytes;
	kgen_launch_sync sync;
} kgen_launch;

/* What a backend does; every function returns 0 or a negative kgen_code
 * and fills "err". Buffers are device memory (host memory for cpu). */
typedef struct kgen_backend_ops {
	const char *name;
	int (*compile)(kgen_backend *backend, const char *source,
		       const char *entry, void **module, void **function,
		       kgen_error *err);
	/* Compiles "source" into the shared folder unless its object is
	 * there already; loads nothing. */
	int (*prepare)(kgen_backend *backend, const char *source,
		       const char *entry, kgen_error *err);
	void (*unload)(kgen_backend *backend, void *module);
	/* Another entry of a loaded module (cuda: a sync wait-kernel), and
	 * how many blocks of "function" fit on one multiprocessor; NULL on
	 * the cpu. */
	int (*lookup)(kgen_backend *backend, void *module, const char *entry,
		      void **function, kgen_error *err);
	int (*blocks_per_sm)(kgen_backend *backend, void *function, unsigned threads,
			     int *blocks, kgen_error *err);
	int (*alloc)(kgen_backend *backend, size_t bytes, void **buffer,
		     kgen_error *err);
	void (*release)(kgen_backend *backend, void *buffer);
	int (*upload)(kgen_backend *backend, void *buffer, const void *host,
		      size_t bytes, kgen_error *err);
	int (*download)(kgen_backend *backend, void *host, const void *buffer,
			size_t bytes, kgen_error *err);
	/* Runs the launches in order and waits for them; with "ms", flushes
	 * the caches first and measures the time the launches took. */
	int (*run)(kgen_backend *backend, const kgen_launch *launches, int n,
		   double *ms, kgen_error *err);
	/* Puts the launches on "stream" in order (cuda: a CUstream, NULL the
	 * default one; cpu: NULL, and they run at once) without waiting. */
	int (*enqueue)(kgen_backend *backend, const kgen_launch *launches, int n,
		       void *stream, kgen_error *err);
	void (*close)(kgen_backend *backend);
} kgen_backend_ops;

struct kgen_backend {
	const kgen_backend_ops *ops;
	char description[384];
	int cores;   /* cpu: cores online; cuda: multiprocessors */
	char *share; /* the shared folder of compiled kernels, or NULL */
	void *state;
};

int kgen_cpu_open(kgen_backend *backend, kgen_error *err);
int kgen_cuda_open(kgen_backend *backend, kgen_error *err);
int kgen_emulated_open(kgen_backend *backend, kgen_error *err);

/* mma_geometry.c: the bytes of an element of the factors of the first matrix
 * product among the ops of "kernel" (2 when it has none: the check that
 * needs one fails), for kgen_mma_shared_bytes. */
int kgen_mma_factor_bytes(const sched_graph *graph, const kgen_kernel *kernel);

/* Whether the backend runs kernels printed as CUDA: cuda, and the
 * emulated backend (backend_emulated.c) that runs them on the cpu. */
bool kgen_backend_prints_cuda(const kgen_backend *backend);

/* backend_cpu.c: "source" written into folder "dir" as
 * <entry>_<n><suffix> and compiled by "command" (a compiler and its
 * flags, NULL-terminated; "-o obj file" follow) into the shared object
 * "obj"; the file and the compiler's log are removed after. KGEN_ECOMPILE
 * with the log when the compiler refuses. And such an object loaded,
 * "entry" looked up in it. */
int kgen_compile_shared(const char *const *command, const char *dir, int n,
			const char *suffix, const char *source, const char *entry,
			const char *obj, kgen_error *err);
int kgen_load_shared(const char *obj, const char *entry, void **handle,
		     void **function, kgen_error *err);

const sched_graph *kgen_program_graph(const kgen_program *program);
/* Whether some kernel of "program" overlaps the one before it (sync on
 * cuda): kgen_verify then runs it again to catch races. And the first
 * such launch of "launches", or -1. */
bool kgen_program_overlaps(const kgen_program *program);
int kgen_first_consumer(const kgen_launch *launches, int n);

/* The monotonic clock in milliseconds. */
double kgen_now_ms(void);

/* The shared object of "source": <share>/<SHA-256 of source><suffix>. */
void kgen_share_path(const kgen_backend *backend, const char *source,
		     const char *suffix, char *path, size_t size);
/* A private temporary name beside "path", to write it before publishing. */
void kgen_share_temp(const char *path, char *temp, size_t size);
/* Renames "temp" to "path" (atomic: a reader sees all or nothing); on
 * failure "temp" is removed. */
int kgen_share_publish(const char *temp, const char *path, kgen_error *err);
/* Writes "size" bytes to "path" through a temporary file and a rename. */
int kgen_share_write(const char *path, const void *data, size_t size,
		     kgen_error *err);
/* The whole of "path" in "*data" (malloc'd) and its size in "*size". */
int kgen_share_read(const char *path, char **data, size_t *size,
		    kgen_error *err);
/* Whether "path" exists (an object already in the shared folder). */
bool kgen_share_has(const char *path);

/* The sources kgen_probe compiles for backend "name" ("cpu" or "cuda"):
 * copy, FMA and empty kernels, NULL-terminated; NULL for another name. */
const char *const *kgen_probe_sources(const char *name);

#endif
