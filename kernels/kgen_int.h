/*
 * kgen_int.h: the kernels module's private forms.
 */
#ifndef KGEN_INT_H
#define KGEN_INT_H

#include "../scheduler/sched_int.h"
#include "kgen.h"

/* Fills "err" like sched_fail; returns code. Safe with err == NULL. */
int kgen_fail(kgen_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The op a single-op kernel computes. */
const sched_op *kgen_kernel_op(const sched_graph *graph, const kgen_kernel *kernel);

#endif

/* A kernel ready to launch: its function, shape and tensor arguments. */
typedef struct kgen_launch {
	const char *name;
	void *function;
	unsigned blocks, threads;
	int ntensors;
	void **tensors;
} kgen_launch;

/* What a backend does; every function returns 0 or a negative kgen_code
 * and fills "err". Buffers are device memory (host memory for cpu). */
typedef struct kgen_backend_ops {
	const char *name;
	int (*compile)(kgen_backend *backend, const char *source,
		       const char *entry, void **module, void **function,
		       kgen_error *err);
	void (*unload)(kgen_backend *backend, void *module);
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
	void (*close)(kgen_backend *backend);
} kgen_backend_ops;

struct kgen_backend {
	const kgen_backend_ops *ops;
	char description[384];
	void *state;
};

int kgen_cpu_open(kgen_backend *backend, kgen_error *err);
int kgen_cuda_open(kgen_backend *backend, kgen_error *err);

const sched_graph *kgen_program_graph(const kgen_program *program);

/* The monotonic clock in milliseconds. */
double kgen_now_ms(void);
