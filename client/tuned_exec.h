/*
 * tuned_exec.h: runs a plan fetched from tuned inside a training process
 * (docs/client.md, "Running a fetched plan").
 *
 * A process that fetched a plan (tuned_client_fetch, tunectl fetch --json)
 * loads it once for its graph and then runs it as often as it likes, on
 * tensors it owns: the kernels are the very sources tuned measured and
 * verified (the fetch's "sources"), built for the backend named, and the
 * intermediates live in scratch buffers the loaded plan owns. The same
 * calls serve C, and Python through ctypes (client/python/tuned_exec.py).
 *
 *   tuned_exec *e;
 *   char why[512];
 *   if (tuned_exec_load(graph_json, fetched_json, "cpu", &e, why, sizeof(why)) < 0)
 *       ...;
 *   void *tensors[] = {x, w, NULL, y};  // graph order; NULL: scratch
 *   tuned_exec_run(e, NULL, tensors, why, sizeof(why));
 *   tuned_exec_free(e);
 */
#ifndef TUNED_EXEC_H
#define TUNED_EXEC_H

#include <stddef.h>
#include <stdint.h>

typedef struct tuned_exec tuned_exec;

/* Loads the plan of "fetched" (the JSON text of a fetch reply, or of its
 * "plan" object alone, in which case kernels are generated again) for the
 * graph "graph" (graph.json text) on "backend" ("cpu" or "cuda"). 0, or
 * -1 with the reason in "why". */
int tuned_exec_load(const char *graph, const char *fetched, const char *backend,
		    tuned_exec **out, char *why, size_t why_size);

/* The number of tensors of the graph: the length of run's "tensors". */
int tuned_exec_tensor_count(const tuned_exec *exec);

#define TUNED_EXEC_MAX_RANK 8

/* A tensor of the graph the plan was loaded for, as the graph declares
 * it, so that a caller checks its buffers before a run: "name", "dtype"
 * ("f32", "f16", "bf16" or "i32") and "role" ("input", "output" or
 * "intermediate") live as long as the loaded plan; "shape" holds "rank"
 * extents, row-major. */
typedef struct tuned_exec_tensor {
	const char *name;
	const char *dtype;
	const char *role;
	int rank;
	int64_t shape[TUNED_EXEC_MAX_RANK];
} tuned_exec_tensor;

/* Tensor "index" (0 to tuned_exec_tensor_count - 1, graph order) into
 * "out": 0, or -1 for an index out of range. */
int tuned_exec_tensor_info(const tuned_exec *exec, int index, tuned_exec_tensor *out);

/* Runs every kernel of the plan in order, each tensor at tensors[i] (in
 * graph order; device pointers on cuda, host pointers on the cpu); a NULL
 * intermediate is the plan's own scratch buffer, a NULL input or output
 * is refused. "stream" is a CUstream on cuda (NULL: the default stream),
 * NULL on the cpu. Returns when the kernels are enqueued (cuda) or done
 * (cpu). 0, or -1 with the reason in "why". */
int tuned_exec_run(tuned_exec *exec, void *stream, void *const *tensors,
		   char *why, size_t why_size);

void tuned_exec_free(tuned_exec *exec);

/* Evaluates "graph" (graph.json text) with tuned's reference interpreter
 * (sched_interp_run: double precision, each element rounded to its dtype
 * as it is stored), no plan needed: the oracle a plan is verified
 * against, for checking a graph written by hand or by an exporter.
 * tensors[i] in graph order, host pointers in the tensors' dtypes as
 * tuned_exec_run takes them: inputs are read, outputs written, and an
 * intermediate written where its pointer is not NULL. 0, or -1 with the
 * reason in "why". */
int tuned_exec_interpret(const char *graph, void *const *tensors, char *why,
			 size_t why_size);

#endif
