/*
 * tuner.h: the tuner of tuned; for now, the supervision of worker processes.
 *
 * Compiling and timing candidate kernels happens in worker processes, so
 * that a kernel that crashes or hangs kills only its worker. A tuner_worker
 * is one such process, started with uv_spawn and spoken to in lines of JSON:
 * one compact object per line on its stdin, one object per line in answer on
 * its stdout; its stderr is the caller's. Asking is synchronous: each worker
 * owns a libuv loop that tuner_worker_ask runs until the answer is in, the
 * time limit is up or the worker is dead, and a dead, hung or garbling worker
 * is replaced by a fresh process on the next ask.
 *
 * A worker is not thread-safe: use each from one thread at a time.
 *
 * SIGPIPE: writing to a dead worker would raise SIGPIPE, which kills by
 * default. tuner_worker_new therefore sets SIGPIPE to SIG_IGN for the whole
 * process when its disposition is still SIG_DFL (a handler the program
 * installed is left alone); a failed write then reads as EPIPE and the ask
 * reports the worker's death. Workers get the default disposition back:
 * uv_spawn resets every signal in the child.
 *
 * Ownership follows isl: __tuner_give returns a new object the caller frees,
 * __tuner_keep borrows, __tuner_take consumes.
 */
#ifndef TUNER_H
#define TUNER_H

#include <stddef.h>

#include <jansson.h>

#define __tuner_give
#define __tuner_take
#define __tuner_keep

/* The longest answer line accepted, in bytes; a longer one is garbage. */
#define TUNER_MAX_LINE (256u << 20)

typedef struct tuner_worker tuner_worker;

typedef enum tuner_outcome {
	TUNER_ANSWERED,  /* the worker answered one JSON object line */
	TUNER_CRASHED,   /* it died before answering (signal or exit) */
	TUNER_TIMED_OUT, /* no answer within the time limit: killed */
	TUNER_GARBLED,   /* it answered a line that is not a JSON object: killed */
} tuner_outcome;

/* What came of one ask. answer is set only for TUNER_ANSWERED and is then
 * the caller's to json_decref; term_signal and exit_status only for
 * TUNER_CRASHED (both 0 otherwise). detail is one lowercase line. */
typedef struct tuner_reply {
	tuner_outcome outcome;
	__tuner_give json_t *answer;
	int term_signal;  /* the signal that ended it, or 0 */
	int exit_status;  /* its exit status when no signal */
	char detail[256]; /* e.g. "worker killed by signal 11 (Segmentation fault)" */
} tuner_reply;

/* A worker running the program "path" (looked up in PATH when it has no
 * slash) with arguments "argv" (argv[0] included, NULL-terminated). Both are
 * copied; a NULL "argv" means { "path", NULL }. The process is not started
 * until the first ask. Returns NULL for a NULL "path" or when memory or the
 * loop cannot be had. Ignores SIGPIPE (see above). */
__tuner_give tuner_worker *tuner_worker_new(const char *path,
					    const char *const *argv);

/* Sends "request" as one line of compact JSON on the worker's stdin and
 * waits at most "timeout_s" seconds for one line on its stdout, starting
 * the worker first if it is not running (after a crash, a time-out, garbage
 * or a normal exit). Returns 0 with "reply" filled whatever the worker did.
 * Returns a negative libuv error code when the worker cannot be started
 * (UV_ENOENT for a missing program), UV_EINVAL for a "timeout_s" that is not
 * positive or a "request" that is not an object, UV_ENOMEM when the request
 * cannot be serialized; then "reply" says TUNER_CRASHED, no answer, and its
 * detail says why.
 *
 * A worker that exits with status 0 without answering, when it had answered
 * before, is taken to have exited after its last answer: the request is sent
 * once more to a fresh process, and only that process's fate is reported. */
int tuner_worker_ask(__tuner_keep tuner_worker *worker,
		     __tuner_keep const json_t *request, double timeout_s,
		     tuner_reply *reply);

/* How many times the worker process of "worker" has been started. */
int tuner_worker_starts(__tuner_keep const tuner_worker *worker);

/* Where tuned-worker is: $TUNED_WORKER, or beside the running program, or
 * in ../daemon from it (the build tree). */
void tuner_worker_default_path(char *path, size_t size);

/* The worker process's pid while it runs, else 0. Another thread may read
 * it to kill a worker stuck in a long ask (the ask then reports a crash). */
int tuner_worker_pid(__tuner_keep const tuner_worker *worker);

/* Kills the process of "worker" if it runs (SIGKILL), waits for it and
 * frees everything. NULL does nothing. */
void tuner_worker_free(__tuner_take tuner_worker *worker);

/* strategy.c: which plan a job tries next. A strategy proposes a plan
 * (a JSON plan, or JSON null for the default plan), sees the worker's
 * answer, and proposes the next, until it returns NULL: the search is
 * over. "default": the default plan, once; "genetic": the genetic search
 * over the schedules of "graph" (kept), seeded by "seed". */
typedef struct tuner_strategy tuner_strategy;
struct sched_graph;

__tuner_give tuner_strategy *tuner_strategy_new(const char *name,
						__tuner_keep const struct sched_graph *graph,
						unsigned seed);
__tuner_give json_t *tuner_strategy_next(__tuner_keep tuner_strategy *strategy,
					 __tuner_keep const json_t *last_answer);
/* The best median among the answers so far (INFINITY for none). */
double tuner_strategy_best(__tuner_keep const tuner_strategy *strategy);
void tuner_strategy_free(__tuner_take tuner_strategy *strategy);

/* genetic.c: the genetic search over the schedules of "graph" (kept),
 * seeded and reproducible. next() records the answer to the last proposal
 * (NULL for none) and proposes a plan never proposed before, or NULL when
 * it can find no new one. best() is the best median seen (INFINITY for
 * none); measured() how many proposals have an answer. */
typedef struct tuner_genetic tuner_genetic;

__tuner_give tuner_genetic *tuner_genetic_new(__tuner_keep const struct sched_graph *graph,
					      unsigned seed);
__tuner_give json_t *tuner_genetic_next(__tuner_keep tuner_genetic *g,
					__tuner_keep const json_t *last_answer);
double tuner_genetic_best(__tuner_keep const tuner_genetic *g);
int tuner_genetic_measured(__tuner_keep const tuner_genetic *g);
void tuner_genetic_free(__tuner_take tuner_genetic *g);

/* measure.c: the measurement protocol a worker process runs for one
 * request {"graph": TEXT, "plan": PLAN or null, "seed": N, "timing":
 * {...}, "sources": [...], "cutoff_ms": MS}: compile, verify against the
 * reference, time (a first run slower than cutoff_ms ends the timing:
 * "cut": true).
 * The answer's "kind" is ok, invalid, invalid_plan, compile_error, wrong
 * or error (docs/kernels.md). */
struct kgen_backend;
__tuner_give json_t *tuner_measure(struct kgen_backend *backend,
				   __tuner_keep const json_t *request);

/* The time limit of one request for "graph" on "backend" ("cpu", "cuda"
 * or "auto"): 10 s, or 20 times a pessimistic estimate of one run of the
 * plan (0.2 GFLOP/s on a cpu, 1 TFLOP/s on a GPU) plus 2 s per op to
 * compile, whichever is longer. */
struct sched_graph;
double tuner_time_limit(__tuner_keep const struct sched_graph *graph,
			const char *backend);

#endif
