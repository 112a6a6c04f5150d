/*
 * kgen.h: from a graph and a plan to verified, timed kernels.
 *
 * A plan says how a graph runs: a list of kernels in launch order, each a
 * group of ops with a schedule. kgen lowers each kernel to a loop nest,
 * prints it as C with OpenMP (cpu) or CUDA C (cuda), compiles it through a
 * backend, checks its outputs against the reference interpreter and times
 * it. See docs/kernels.md.
 *
 * Ownership follows scheduler.h: __sched_give, __sched_take, __sched_keep.
 */
#ifndef KGEN_H
#define KGEN_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "scheduler.h"

#define KGEN_MAX_OPS 16
/* A plan's limits on a kernel: threads per block (cuda), and the elements
 * of a reducing kernel's tile, whose accumulators the cpu keeps on its
 * stack. */
#define KGEN_MAX_THREADS 1024
#define KGEN_MAX_CPU_TILE 16384

/* The version of the code generators: part of every cache key, so that a
 * change of generated code never serves a stale kernel. Bump it with any
 * change of the printers or of what a plan means. */
#define KGEN_CODEGEN_VERSION "kgen-15"

enum kgen_code {
	KGEN_OK = 0,
	KGEN_EPLAN = -20,     /* the plan is not valid for the graph */
	KGEN_ECOMPILE = -21,  /* the compiler refused the generated code */
	KGEN_EBACKEND = -22,  /* the backend cannot be opened or failed */
	KGEN_EWRONG = -23,    /* a kernel's outputs do not match the reference */
	KGEN_ENOMEM = -24,
	KGEN_EIO = -25,
};

/* What went wrong; log holds a compiler's output when there is one. */
typedef struct kgen_error {
	int code;
	char message[512];
	char *log;
} kgen_error;

void kgen_error_release(kgen_error *err);

/* How the reduction of one output element is split (cuda). */
enum kgen_split { KGEN_SPLIT_THREAD, KGEN_SPLIT_WARP, KGEN_SPLIT_BLOCK };

/* The schedule of one kernel. Per output dim: tile is the extent handled
 * by one block (cuda) or one task (cpu); threads the threads of a block
 * along that dim (cuda). parallel is the number of outer tile loops run in
 * parallel (cpu, OpenMP collapse); unroll unrolls the innermost reduction
 * loop; vector is the width of the innermost output loop (cpu: simd
 * length; cuda: consecutive elements per thread). parts (cuda, a kernel
 * of one reducing op printed from its tiles): each element's reduction is
 * cut into that many ranges of its points, a block each, whose partial
 * results the last block of a tile to finish combines in their order (1:
 * not cut; the C printer ignores it). A plan's "shared" (inputs staged in
 * shared memory) is refused until the shared-memory planner exists. */
/* A contraction (sched_op_contraction) as register-blocked micro-kernels
 * (cpu; kernels/print_micro.c): blocks of mr x nr elements of C held in
 * vector registers, nr a multiple of KGEN_MICRO_NR_STEP; K in slices kc
 * deep; mc x nc blocks of C (multiples of mr and nr) shared among
 * threads; pack 1 packs A's slices too (B's always are). mr 0: the
 * kernel is printed from its tiles instead. */
typedef struct kgen_micro {
	int mr, nr, kc, mc, nc, pack;
} kgen_micro;

#define KGEN_MICRO_NR_STEP 8
#define KGEN_MICRO_MAX_MR 16
#define KGEN_MICRO_MAX_NR 64

/* The width of the cpu's vectors in floats: 16 with AVX-512, 8 with
 * AVX2, else 4; and the widest of them that divides nr, the vectors of
 * micro-kernels nr wide. */
int kgen_cpu_vector_floats(void);
int kgen_micro_vector_floats(int nr);

/* A contraction on tensor cores (cuda, sm_80 and later;
 * kernels/print_mma.c): bm x bn tiles of C per block, warps of wm x wn
 * each (mma.sync m16n8k16 for f16 or bf16 factors, m16n8k8 tf32 for f32
 * ones where the graph allows it; f32 accumulators), K in slices bk deep
 * with "stages" of them in flight (cp.async). bm 0: the kernel is
 * printed from its tiles instead. raster: the blocks walk the tiles in
 * groups of that many tile rows, column by column within a group, so
 * that blocks running together share slices of A and of B in L2 (0 or
 * 1: row by row, the hardware's order; a kernel of one product only, and
 * one that syncs keeps row order). rotated: A's and B's rows in shared
 * memory are rotated by 16-byte chunks rather than padded (0), both
 * layouts keeping an ldmatrix's rows in different banks (print_mma.c).
 * split_k: K is cut in that many parts, each a block of its own, whose
 * partial tiles the last block of a tile to finish adds up (0 or 1: not
 * cut; a kernel of one product that does not sync). */
typedef struct kgen_mma {
	int bm, bn, bk, wm, wn, stages;
	int raster;
	int rotated;
	int split_k;
} kgen_mma;

/* The threads of a block of "mma": a warp per wm x wn; its shared
 * memory, for factors of "factor_bytes" each: the stages of A's and B's
 * slices, or the bm x bn tile of C staged for 16-byte stores, whichever
 * is larger (C's rows padded by 8 elements; A's and B's padded, by
 * kgen_mma_pads, or rotated); and "mma"
 * repaired until that fits static shared memory: fewer stages, then
 * thinner slices. */
int kgen_mma_threads(const kgen_mma *mma);
/* The bm x bn tiles of contraction "c"'s output, in each of its batch. */
int64_t kgen_mma_tiles(const sched_contraction *c, const kgen_mma *mma);
int kgen_mma_shared_bytes(const kgen_mma *mma, int factor_bytes);
/* The elements a padded layout adds to each row of A's slices and of B's
 * (0 when rotated): a 16-byte chunk, so that a row holds an odd number
 * of chunks; for tf32 (4-byte factors) B's rows 8 elements, as its
 * fragments are read element by element. */
void kgen_mma_pads(const kgen_mma *mma, int factor_bytes, int *a_pad, int *b_pad);
void kgen_mma_repair(kgen_mma *mma, int factor_bytes);

/* The product a kernel of op "op" alone runs on tensor cores: a
 * contraction or a batch of them (sched_op_batched_contraction), or a
 * gathered one whose B reads one tensor, of its dtype (a convolution's
 * padded windows: an implicit GEMM, B evaluated as it is loaded); false
 * for none. */
bool kgen_mma_product(__sched_keep const sched_graph *graph, int op,
		      sched_contraction *c);

/* Why the factors of contraction "c" cannot go through tensor cores (f16
 * or bf16 both, or f32 both where the graph allows tf32; what cp.async
 * needs: K contiguous in A and N in B, rows starting on 16 bytes), or
 * NULL when they can. */
const char *kgen_mma_operands_unfit(__sched_keep const sched_graph *graph,
				    const sched_contraction *c);

/* A schedule with "library" runs its kernel's one matrix product as a
 * call of the device's BLAS instead of generated code (kernels/library.c):
 * cblas_sgemm on the cpu, cuBLASLt on cuda; its other fields are then
 * not used. */
typedef struct kgen_schedule {
	bool library;
	int64_t tile[SCHED_MAX_RANK];
	int threads[SCHED_MAX_RANK];
	int parallel;
	int unroll;
	int vector;
	enum kgen_split split;
	int parts;
	kgen_micro micro;
	kgen_mma mma;
} kgen_schedule;

/* How a kernel overlaps the kernel launched just before it, whose output
 * it reads (cuda; docs/design/sync.md). on: the two run on two streams and each
 * consumer tile waits only for the producer tiles it reads, by "policy",
 * read off their tile dependence (scheduler/sync.c). wait_kernel: a
 * one-thread kernel holds the consumer's launch until the producer's first
 * block has started (off is cuSync's W: allowed only where both grids fit
 * on the device at once). ordered: tiles are handed out in row-major order
 * by an atomic counter (off is cuSync's R: the hardware's block order).
 * early_loads: a tensor-core consumer prefetches the factor the producer
 * does not write into L2 before it waits (cuSync's T). The cpu backend
 * runs kernels in order and ignores it. */
typedef struct kgen_sync {
	bool on;
	enum sched_sync_kind policy;
	bool wait_kernel, ordered, early_loads;
} kgen_sync;

/* A kernel computes a group of ops (docs/design/fusion.md): one op, or ops fused
 * by the fusion planner. The schedule's dims are those of its root's
 * output (the first op no other member reads); lanes place the group's
 * branches (nlanes 0: each branch in its own lane, side by side). */
typedef struct kgen_kernel {
	char name[64];
	int nops;
	int ops[KGEN_MAX_OPS];
	int nlanes;
	int lanes[KGEN_MAX_OPS];
	kgen_schedule schedule;
	kgen_sync sync;
} kgen_kernel;

typedef struct kgen_plan {
	int nkernels;
	kgen_kernel *kernels;
} kgen_plan;

/* The plan in "json" ({"kernels": [...]}), checked against "graph"; or
 * KGEN_EPLAN with the reason. */
int kgen_plan_from_json(__sched_keep const sched_graph *graph,
			__sched_keep json_t *json, __sched_give kgen_plan **out,
			kgen_error *err);
/* The graph whose numbering plan "plan" (JSON) uses. tuned stores plans
 * in the canonical numbering of their graph (sched_graph_canonical_json)
 * and a fetched plan says so with "key": then *canonical is the canonical
 * form of "graph", which the plan is read, built and run on (a caller's
 * tensor t is its tensor sched_tensor_canonical_number(graph, t)); a
 * plan for another key is KGEN_EPLAN, with both keys. A plan without a
 * key uses "graph"'s own numbering: *canonical is NULL. */
int kgen_graph_for_plan(__sched_keep const sched_graph *graph,
			__sched_keep json_t *plan,
			__sched_give sched_graph **canonical, kgen_error *err);
/* The plan as JSON, each schedule with only the fields that differ from
 * their defaults (which reading fills in again). */
__sched_give json_t *kgen_plan_to_json(__sched_keep const sched_graph *graph,
				       __sched_keep const kgen_plan *plan);
/* Whether the ops of "kernel" are matrix products side by side that one
 * "micro" blocking serves: each a contraction (or a gathered one, whose
 * B the packing evaluates: sched_op_gathered_contraction) of its root's
 * shape (m, n, k), dtypes and strides of A and C (the micro-kernels read
 * A and write C in place), none reading another's output; the root's in
 * *c. A kernel of one contraction is one. */
bool kgen_kernel_products(__sched_keep const sched_graph *graph,
			  __sched_keep const kgen_kernel *kernel, sched_contraction *c);

/* Why op "op" cannot run as a library step on the cpu's BLAS (cuda:
 * on cuBLASLt), or NULL when it can: a matrix product whose A, B and C
 * each have a unit stride (C along N), in the dtypes the library takes
 * (cpu: f32, f16 or bf16, the latter two through f32 copies; cuda: f16,
 * bf16 or f32 factors, C in theirs or f32). */
const char *kgen_library_unfit(__sched_keep const sched_graph *graph, int op, bool cuda);
/* The same for a kernel: its first op such a product, and its other ops,
 * if any, an epilogue cuBLASLt applies (a bias along C's columns, then
 * relu or gelu_tanh, each reading the op before at the same element,
 * whose result no other op reads and which is no output). */
const char *kgen_library_kernel_unfit(__sched_keep const sched_graph *graph,
				      __sched_keep const kgen_kernel *kernel, bool cuda);
/* The device memory a kernel needs beside its tensors, kept across runs
 * (0 for most), of which the first *zeroed bytes must be zero before its
 * first run: with split_k, a counter per tile, then each part's partial
 * tile (f32); with parts, a counter per tile, then each part's partial
 * results of the tile's elements (f32). */
size_t kgen_kernel_scratch_bytes(__sched_keep const sched_graph *graph,
				 __sched_keep const kgen_kernel *kernel, size_t *zeroed);
/* Whether backend "name"'s library ("cpu": a CBLAS in libopenblas.so.0
 * or libblas.so.3; "cuda": libcublasLt) can be opened here. */
bool kgen_library_available(const char *backend);

/* The tiles kernel "kernel" computes (sched_tiling): its root's output in
 * its tiles, or [M, N] in bm x bn for a tensor-core product; KGEN_EPLAN
 * with the reason for a kernel whose blocks are no such grid (a fused
 * group of several branches, a product whose output is not M x N). */
int kgen_kernel_tiling(__sched_keep const sched_graph *graph,
		       __sched_keep const kgen_kernel *kernel, sched_tiling *out,
		       kgen_error *err);
/* The tile dependence of kernel k of "plan" on kernel k - 1 and the
 * policies it offers (k's own "sync" is not looked at); KGEN_EPLAN with
 * the reason when the two cannot sync: k reads nothing of k - 1, or
 * reads an output of k - 1 that is not its tiled one. */
int kgen_sync_analyse(__sched_keep const sched_graph *graph,
		      __sched_keep const kgen_plan *plan, int k,
		      __sched_give sched_sync **out, kgen_error *err);
/* The same offering only policy "want" when the dependence offers it,
 * else every one (sched_sync_new_for). */
int kgen_sync_analyse_for(__sched_keep const sched_graph *graph,
			  __sched_keep const kgen_plan *plan, int k, int want,
			  __sched_give sched_sync **out, kgen_error *err);
/* Whether a producer and a consumer grid, blocks_p and blocks_c blocks
 * of which per_sm_p and per_sm_c fit on a multiprocessor, fit on "sms"
 * multiprocessors at once: then no consumer block can hold a
 * multiprocessor a producer block needs, and the wait-kernel may go. */
bool kgen_sync_co_resident(unsigned blocks_p, int per_sm_p, unsigned blocks_c,
			   int per_sm_c, int sms);

/* The block-local memory a fused kernel may use: shared memory on cuda
 * (the static limit), the block's stack on the cpu. */
#define KGEN_LOCAL_BYTES (48 * 1024)

/* The fused group kernel "kernel" computes, analysed for the cuda backend
 * (its threads per block) or the cpu; KGEN_EPLAN with the reason when the
 * group is not legal. */
int kgen_kernel_group(__sched_keep const sched_graph *graph,
		      __sched_keep const kgen_kernel *kernel, bool cuda,
		      __sched_give sched_group **out, kgen_error *err);

/* Why fused kernel "kernel" (its tile, its "mma" set) cannot run its
 * branches' first ops on tensor cores with the rest of the group as
 * their epilogue, or NULL when it can: each a matrix product of the same
 * shape, strides and dtype whose factors fit, writing a row-major M x N
 * matrix of its own over a region within bm x bn, kept for the ops after
 * it (docs/design/kernels.md, "Fused epilogues"). */
const char *kgen_fused_mma_unfit(__sched_keep const sched_graph *graph,
				 __sched_keep const kgen_kernel *kernel);

/* Fused kernel "kernel" (its ops and tile set) with its products on
 * tensor cores in blocking "mma" (its bk, warps and stages; bm x bn then
 * cover the first product's region in whole warps, warps no larger than
 * it needs, stages and slices within shared memory): true with the
 * blocking in kernel->schedule.mma; false, with none there, when the
 * kernel cannot run so (kgen_fused_mma_unfit). */
bool kgen_fused_mma_fit(__sched_keep const sched_graph *graph, kgen_kernel *kernel,
			const kgen_mma *mma);

/* One kernel per op, in dependence order, with the default schedule. */
__sched_give kgen_plan *kgen_plan_default(__sched_keep const sched_graph *graph);
void kgen_plan_free(__sched_take kgen_plan *plan);

/* The source of kernel "k" of "plan": C with OpenMP exporting
 * void NAME(void **tensors), or CUDA C exporting extern "C" __global__ NAME
 * taking one pointer per tensor in graph order. NULL on failure. */
__sched_give char *kgen_print_c(__sched_keep const sched_graph *graph,
				__sched_keep const kgen_plan *plan, int k);
__sched_give char *kgen_print_cuda(__sched_keep const sched_graph *graph,
				   __sched_keep const kgen_plan *plan, int k);

/* The launch shape of a cuda kernel: blocks and threads per block. */
void kgen_cuda_launch_shape(__sched_keep const sched_graph *graph,
			    __sched_keep const kgen_kernel *kernel,
			    unsigned *blocks, unsigned *threads);

/* Backends: "cpu" (generated C, the system compiler, dlopen) and "cuda"
 * (NVRTC and the driver API, both opened with dlopen). "auto" picks cuda
 * where a GPU is usable, else cpu; kgen_backend_choice says why.
 * "emulated" runs the CUDA that cuda would run on the cpu, a block at a
 * time, its threads as fibers, tensor-core and warp instructions
 * emulated: slow, and only to check generated CUDA without a GPU
 * (backend_emulated.c; plans with sync or library steps are refused). */
typedef struct kgen_backend kgen_backend;

int kgen_backend_open(const char *name, __sched_give kgen_backend **out,
		      kgen_error *err);
const char *kgen_backend_name(__sched_keep const kgen_backend *backend);
/* One line: the device and its compiler, and for "auto" why it was picked. */
const char *kgen_backend_description(__sched_keep const kgen_backend *backend);
void kgen_backend_close(__sched_take kgen_backend *backend);

/* Compiled kernels shared between processes: with a folder set, a
 * backend looks for a kernel's object there (named by the SHA-256 of its
 * source) before compiling, and leaves what it compiles there (written
 * under a temporary name, then renamed, so a reader never sees half a
 * file). The daemon's compile workers fill it; its measurement worker
 * loads from it. NULL: no sharing (the default). */
int kgen_backend_share(__sched_keep kgen_backend *backend, const char *dir,
		       kgen_error *err);
/* Compiles every kernel of "plan" into the shared folder without loading
 * it (a compile worker's job); KGEN_ECOMPILE with the log when the
 * compiler refuses one. Needs kgen_backend_share first. */
int kgen_program_prepare(__sched_keep kgen_backend *backend,
			 __sched_keep const sched_graph *graph,
			 __sched_keep const kgen_plan *plan,
			 const char *const *sources, kgen_error *err);

/* Removes the files of folder "dir" (it has no subfolders), leaving the
 * folder: a shared folder emptied, or a work folder before its rmdir. */
void kgen_empty_folder(const char *dir);

/* The measured peaks of a backend's device (kernels/probe.c): copy
 * bandwidth, f32 multiply-add rate (2 flops each), the time of one empty
 * launch, and its cores (cpu) or multiprocessors (cuda). */
typedef struct kgen_peaks {
	double bandwidth_gbs;
	double gflops;
	double launch_ms;
	int cores;
} kgen_peaks;

int kgen_probe(__sched_keep kgen_backend *backend, kgen_peaks *peaks,
	       kgen_error *err);

/* The CUDA source of "source" compiled by NVRTC for "arch" (e.g. "sm_90")
 * without a GPU; 0, or KGEN_ECOMPILE with the log, or KGEN_EBACKEND when
 * libnvrtc cannot be opened. */
int kgen_nvrtc_check(const char *source, const char *arch, kgen_error *err);
/* The same compile, its PTX written to "ptx_path" and its cubin to
 * "cubin_path" (to read with nvdisasm: bench/sass_mix); KGEN_EIO when one
 * cannot be written. */
int kgen_nvrtc_write(const char *source, const char *arch, const char *ptx_path,
		     const char *cubin_path, kgen_error *err);

/* A plan compiled for a backend, with a buffer on the device per tensor. */
typedef struct kgen_program kgen_program;

/* Compiles every kernel of "plan"; "sources", when not NULL, replaces the
 * printed source of kernel k by sources[k] (if not NULL). */
int kgen_program_build(__sched_keep kgen_backend *backend,
		       __sched_keep const sched_graph *graph,
		       __sched_keep const kgen_plan *plan,
		       const char *const *sources,
		       __sched_give kgen_program **out, kgen_error *err);
void kgen_program_free(__sched_take kgen_program *program);

/* Copies the inputs in "host" (one buffer per tensor in its storage
 * type) to the device, runs every kernel in order and copies every other
 * tensor back into "host". */
int kgen_program_run(__sched_keep kgen_program *program, void **host,
		     kgen_error *err);

/* Runs every kernel in order on the caller's "tensors" (one per tensor in
 * graph order: device pointers on cuda, host ones on the cpu; NULL: the
 * program's own buffer, the scratch of an intermediate), on "stream" (a
 * CUstream on cuda, NULL for the default; NULL on the cpu), without
 * copies and without waiting on cuda: how a training process runs a
 * fetched plan (client/tuned_exec.h). */
int kgen_program_run_on(__sched_keep kgen_program *program, void *stream,
			void *const *tensors, kgen_error *err);

typedef struct kgen_timing {
	int warmup;       /* runs before timing */
	int min_runs;     /* at least this many timed runs */
	int max_runs;     /* at most this many */
	double budget_ms; /* stop adding runs once they took this long */
} kgen_timing;

/* A median over timed runs, each after the caches were flushed, and the
 * spread: the distance between the 10th and 90th percentiles. */
typedef struct kgen_time {
	double median_ms;
	double spread_ms;
	int runs;
} kgen_time;

/* Times each kernel alone (times[k]; NULL: skipped) and the whole plan
 * (*total; NULL: skipped). */
int kgen_program_time(__sched_keep kgen_program *program,
		      const kgen_timing *timing, kgen_time *times,
		      kgen_time *total, kgen_error *err);
/* Times the whole plan "program" in turns with the whole plan "beside"
 * (a run of each, each after a cache flush, then again; the same warm-up
 * of each, and the budget counts the runs of both): *total and
 * *beside_total their own median and spread, *ratio the median of each
 * run of "program" over the run of "beside" after it. Where the machine
 * slows down for a while, it slows both runs of a pair alike, so the
 * ratio holds while the times move (docs/kernels.md, "Trials beside the
 * version"). Both programs must run on the same backend. */
int kgen_program_time_beside(__sched_keep kgen_program *program,
			     __sched_keep kgen_program *beside,
			     const kgen_timing *timing, kgen_time *total,
			     kgen_time *beside_total, double *ratio, kgen_error *err);
/* Host memory as the cpu backend allocates a tensor: 2 MiB and more on
 * huge pages from the start (docs/kernels.md, "Measurement"); free() it.
 * NULL when out of memory. */
void *kgen_host_buffer(size_t bytes);

/* Times call(arg), a function of the host, exactly as kgen_program_time
 * times a plan: the same warm-up, caches flushed before each timed run,
 * the same budget, median and spread; so that a library routine (a BLAS,
 * bench/gemm_cpu) and a plan are timed alike. The cpu backend only;
 * KGEN_EBACKEND on another. */
int kgen_backend_time_call(__sched_keep kgen_backend *backend,
			   void (*call)(void *arg), void *arg,
			   const kgen_timing *timing, kgen_time *out,
			   kgen_error *err);

/* One output compared with the reference interpreter. */
typedef struct kgen_check {
	int tensor;
	double rel_error;  /* ||out - ref|| / ||ref|| over the checked elements */
	double tolerance;
	int64_t checked;   /* elements compared */
	bool passed;
	char problem[160]; /* why not, when not */
} kgen_check;

/* Runs the program on inputs drawn from "seed" with every other tensor
 * poisoned first, and compares each output with the reference: whole for
 * small graphs, on a sample of at least 1,000 elements per output for large
 * ones. checks has one entry per output, in tensor order. 0 when all pass,
 * KGEN_EWRONG when one does not. */
int kgen_verify(__sched_keep kgen_program *program, unsigned seed,
		kgen_check *checks, kgen_error *err);

/* A bound on the seconds kgen_verify's reference takes for "graph" (once
 * per worker, graph and seed: it is kept), for time limits. */
double kgen_reference_seconds(__sched_keep const sched_graph *graph);
/* Element "i" of a host buffer of "dtype", as a double; and "x" stored
 * there (rounded to nearest even; i32 toward zero), returning what was
 * stored, read back. */
double kgen_host_load(const void *buffer, enum sched_dtype dtype, int64_t i);
double kgen_host_store(void *buffer, enum sched_dtype dtype, int64_t i, double x);

/* The tolerance for an output of dtype "dtype" in "graph". */
double kgen_tolerance(__sched_keep const sched_graph *graph,
		      enum sched_dtype dtype);

#endif
