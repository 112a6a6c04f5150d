/*
 * print_int.h: the pieces both printers use (print.c).
 */
#ifndef KGEN_PRINT_INT_H
#define KGEN_PRINT_INT_H

#include "kgen_int.h"

typedef struct kgen_printer {
	const sched_graph *graph;
	const sched_op *op;
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
const char *kgen_reducer_identity(enum sched_reducer reducer);
void kgen_print_combine(sched_buf *buf, enum sched_reducer reducer,
			const char *acc, const char *x);
bool kgen_has_division(const sched_node *node);
void kgen_print_target_offset(sched_buf *buf, const kgen_printer *pr);
bool kgen_op_touches(const sched_op *op, int tensor);

#endif
