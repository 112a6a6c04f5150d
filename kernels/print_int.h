/*
 * print_int.h: the pieces both printers use (print.c).
 */
#ifndef KGEN_PRINT_INT_H
#define KGEN_PRINT_INT_H

#include "kgen_int.h"

/* What a printer prints an expression of: op "op" of "graph", inside the
 * fused group "group" (NULL for a single-op kernel), whose members' reads
 * of each other's results go to block-local memory or are recomputed. */
typedef struct kgen_printer {
	const sched_graph *graph;
	const sched_op *op;
	const sched_group *group;
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
const char *kgen_reducer_identity(enum sched_reducer reducer);
void kgen_print_combine(sched_buf *buf, enum sched_reducer reducer,
			const char *acc, const char *x);
bool kgen_has_division(const sched_node *node);
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

/* print_fused.c: a fused group's kernel, as C with OpenMP or CUDA C. */
char *kgen_print_fused(const sched_graph *graph, const kgen_kernel *kernel,
		       bool cuda);

/* print_micro.c: a contraction's kernel as micro-kernels (cpu); NULL
 * when the op is no contraction. */
char *kgen_print_micro(const sched_graph *graph, const kgen_kernel *kernel);

/* print_mma.c: a contraction's kernel on tensor cores (cuda); NULL when
 * the op is no contraction. */
char *kgen_print_mma(const sched_graph *graph, const kgen_kernel *kernel);

#endif
