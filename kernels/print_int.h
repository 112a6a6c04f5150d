/*
 * print_int.h: the pieces both printers use (print.c).
 */
#ifndef KGEN_PRINT_INT_H
#define KGEN_PRINT_INT_H

#include "kgen_int.h"

/* cuda: the reads of a fused stage that runs consecutive elements per
 * thread (print_fused.c) and loads them at once: read i of element u is
 * vec_<i>[u], in its tensor's type, or a float from local memory.
 * cpu: the f16 reads of a loop run in chunks (print_chunks.c), "widened":
 * vec_<i>[u] is the float already. */
#define KGEN_MAX_VECTOR_READS 16
typedef struct kgen_vector_reads {
	int n;
	bool widened;
	const sched_node *access[KGEN_MAX_VECTOR_READS];
} kgen_vector_reads;

/* What a printer prints an expression of: op "op" of "graph", inside the
 * fused group "group" (NULL for a single-op kernel), whose members' reads
 * of each other's results go to block-local memory or are recomputed,
 * and whose "vectors" (NULL for none) were loaded before. */
typedef struct kgen_printer {
	const sched_graph *graph;
	const sched_op *op;
	const sched_group *group;
	const kgen_vector_reads *vectors;
} kgen_printer;

void kgen_print_helpers(sched_buf *buf, bool cuda, bool wide_indices);
void kgen_print_header(sched_buf *buf, const kgen_printer *pr, const char *name);
const char *kgen_ctype(enum sched_dtype dtype, bool cuda);
void kgen_print_index(sched_buf *buf, const kgen_printer *pr,
		      const sched_node *node);
void kgen_print_offset(sched_buf *buf, const kgen_printer *pr,
		       const sched_node *access);
void kgen_print_value(sched_buf *buf, const kgen_printer *pr,
		      const sched_node *node);
const char *kgen_store_open(const sched_tensor *t);
/* The conversion of an element of tensor "t" to float, opened. */
const char *kgen_load_open(const sched_tensor *t);
/* Float x rounded to "dtype", as storing and loading it would round it. */
void kgen_print_rounded(sched_buf *buf, enum sched_dtype dtype, const char *x);
const char *kgen_reducer_identity(enum sched_reducer reducer);
void kgen_print_combine(sched_buf *buf, enum sched_reducer reducer,
			const char *acc, const char *x);
bool kgen_has_division(const sched_node *node);
/* Whether "node" is an exp whose result is rounded to f16 next (the body
 * of an f16 op): kexp_f16, or kexp_f16_vec on a chunk. */
bool kgen_exp_rounded_to_f16(const kgen_printer *pr, const sched_node *node);
/* A var of a gathered product's B that a flat index of K or N decodes
 * into: lo + flat / inner % extent. */
typedef struct kgen_decoded {
	const char *name;
	long long lo, inner, extent;
} kgen_decoded;

/* The vars that a flat index of gathered product "c"'s K ("reducing") or
 * N decodes into, the last fastest (an n var: a target var A does not
 * move); how many. */
int kgen_decoded_vars(const sched_op *op, const sched_contraction *c, bool reducing,
		      kgen_decoded *out);
/* "const TYPE v_NAME = LO + FLAT / INNER % EXTENT;" for each of the "n"
 * vars, each line opening with "indent". */
void kgen_print_decoded(sched_buf *buf, const kgen_decoded *vars, int n, const char *type,
			const char *flat, const char *indent);

/* The statements that decode the flat reduction index "r" (of
 * sched_op_reduction_points) into its variables v_NAME. */
void kgen_print_reduction_decode(sched_buf *buf, const sched_op *op, const char *indent);
/* cuda: "float ACC" folded over the op's reduction points r = first,
 * first + step, ... before "end" (NULL: all of them), under "if (GUARD)"
 * unless NULL. */
void kgen_print_strided_reduction(sched_buf *buf, const kgen_printer *pr, int unroll,
				  const char *acc, const char *guard, const char *first,
				  const char *step, const char *end, const char *indent);
void kgen_print_target_offset(sched_buf *buf, const kgen_printer *pr);

/* The element of stage "stage"'s buffer at "access" (NULL: at the op's
 * own target variables): local[offset + row-major place from its lo]. */
void kgen_print_local(sched_buf *buf, const kgen_printer *pr, int stage,
		      const sched_node *access);
/* The row-major place of the element at the op's target variables within
 * stage "stage"'s largest extents, from its lo. */
void kgen_print_local_index(sched_buf *buf, const kgen_printer *pr, int stage);

/* Whether some tensor has 2^31 elements or more (cuda indices are then
 * 64-bit). */
bool kgen_wide_indices(const sched_graph *graph);

/* Whether "access" walks its tensor's last dim by the op's variable
 * "var", which no other index mentions. */
bool kgen_walks_last(const sched_node *access, int var);

/* print_chunks.c, cpu: a loop over variable "var" from "lo" to "hi" (C
 * expressions) run KVEC elements at a time (or "width") where its op
 * reads f16 along it or keeps f16 results, or where it reduces along it,
 * the f16 moved by the conversion instructions
 * (kf16_load_vec, kf16_store_vec), then the elements left one at a time:
 *
 *   open       { idx_t first_V = lo; for (chunks) { loads; simd u loop {
 *              v_V = first_V + u;  (the caller prints the element, its
 *              f16 reads from pr->vectors)
 *   middle     }  (the caller prints what ends a chunk, at first_V:
 *              f16 results in vec_x by kgen_print_chunk_f16_store)
 *   done       }  (the caller prints what follows the chunks)
 *   tail       PRAGMA for (v_V = first_V; v_V < hi; v_V++) {  (the
 *              caller prints the element, as without chunks)
 *   close      } }
 */
typedef struct kgen_chunks {
	kgen_printer *pr;
	sched_buf *buf;
	int var;
	const char *lo, *hi, *indent;
	kgen_vector_reads reads;
	/* "KVEC" elements a chunk (NULL), or another width, a multiple of
	 * KVEC ("4 * KVEC": a reduction's four vectors of partial results) */
	const char *width;
} kgen_chunks;

/* Fills "c" with the op's f16 reads along "var" from global memory;
 * false when there are none. */
bool kgen_chunk_reads(kgen_chunks *c);
/* Adds the f16 reads of op pr->op that "c" has not yet (ops that share
 * a pass share the chunk's loads); false when "c" has none. */
bool kgen_chunk_more_reads(kgen_chunks *c);
void kgen_print_chunks_open(kgen_chunks *c);
void kgen_print_chunks_middle(kgen_chunks *c);
/* The op's element into vec_x[u] at "indent" (after open), then middle;
 * a body that is exp rounded to f16 keeps exp's argument instead, and
 * middle is followed by exp of the whole chunk (kexp_f16_vec). */
void kgen_print_chunk_value(kgen_chunks *c, const char *indent);
/* The chunk's results in vec_x narrowed to f16 into "tensor" at the op's
 * target offset for first_V, one indent deeper than the chunks; with
 * "stream", past the caches (kf16_stream_vec: the kernel then ends each
 * thread's work with KSTREAM_FENCE). */
void kgen_print_chunk_f16_store(const kgen_chunks *c, const char *tensor, bool stream);
void kgen_print_chunks_done(kgen_chunks *c);
void kgen_print_chunks_tail(kgen_chunks *c, const char *pragma);
void kgen_print_chunks_close(kgen_chunks *c);

/* print_fused.c: a fused group's kernel, as C with OpenMP or CUDA C. */
char *kgen_print_fused(const sched_graph *graph, const kgen_kernel *kernel,
		       bool cuda, bool wrapped);

/* conv_window.c: a gathered product's B that is a window of one tensor,
 * read in place from a copy of it padded with zeros (a convolution's
 * padded windows): the tensor, its shape and padding per dim, and the
 * offset of B's element in the padded copy, affine in the op's vars. */
typedef struct kgen_window {
	int tensor, rank;
	int64_t shape[SCHED_MAX_RANK], pad[SCHED_MAX_RANK], padded[SCHED_MAX_RANK];
	int64_t size; /* elements of the padded copy */
	int64_t coef[2 * SCHED_MAX_RANK], constant;
} kgen_window;

/* Whether gathered product "c" (op "op") has such a B: a select whose
 * every condition is a bound of the tensor, and which names every bound
 * its affine indices cross, or the tensor read in bounds alone. */
bool kgen_conv_window(const sched_graph *graph, const sched_op *op,
		      const sched_contraction *c, kgen_window *out);

/* print_micro.c: a contraction's kernel as micro-kernels (cpu); NULL
 * when the op is no contraction. */
char *kgen_print_micro(const sched_graph *graph, const kgen_kernel *kernel);

/* print_mma.c: a contraction's kernel on tensor cores (cuda); NULL when
 * the op is no contraction. And the L2 prefetch of the factor other than
 * "produced" for the first slices of the tile ktile (a consumer's early
 * loads, print_sync.c). */
char *kgen_print_mma(const sched_graph *graph, const kgen_kernel *kernel, bool wrapped);
void kgen_print_mma_prefetch(sched_buf *buf, const sched_graph *graph,
			     const kgen_kernel *kernel, int produced);
/* For a fused kernel whose branches start with products on tensor cores
 * (kgen_fused_mma_unfit): the definitions its kernel needs (helpers and
 * the constants of contraction "c" in blocking "mma"); the pipeline of
 * one product into "acc" from its tile at "m0", "n0" through stages in
 * "as" and "bs", all declared by the caller; and the loops over the
 * accumulators, each at its "m" and "n" (the caller closes them). */
void kgen_print_mma_definitions(sched_buf *buf, const sched_graph *graph,
				const sched_contraction *c, const kgen_mma *mma);
void kgen_print_mma_pipeline(sched_buf *buf, const sched_graph *graph,
			     const sched_contraction *c, const kgen_mma *mma);
void kgen_print_mma_accumulators(sched_buf *buf);

/* A cuda kernel's entry (print.c): the __global__ function, or, "wrapped"
 * for sync, the device function NAME_tile that computes tile ktile, which
 * print_sync.c's entry calls: its head up to the first parameter ("bounds":
 * the threads per block), its end after the last, and the expression of
 * the block's tile. */
void kgen_print_cuda_entry(sched_buf *buf, const char *name, const char *bounds,
			   bool wrapped);
void kgen_print_cuda_entry_end(sched_buf *buf, bool wrapped);
const char *kgen_cuda_tile(bool wrapped);

/* print_sync.c: appends the sync runtime and the entry around kernel k's
 * NAME_tile; false when its syncs cannot be analysed. */
bool kgen_print_sync(sched_buf *buf, const sched_graph *graph, const kgen_plan *plan,
		     int k);

#endif
