/*
 * tuner.h: the tuner of tuned; for now, the supervision of worker processes.
 *
 * Compiling and timing candidate kernels happens in worker processes, so
 * that a kernel that crashes or hangs kills only its worker. A tuner_worker
 * is one such process, started with uv_spawn and spoken to in lines of JSON:
 * one compact object per line on its stdin, one object per line in answer on
 * its stdout; its stderr is passed on to the caller's, and its end kept
 * (tuner_worker_log). Asking is synchronous: each worker
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

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#define __tuner_give
#define __tuner_take
#define __tuner_keep

/* The longest answer line accepted, in bytes; a longer one is garbage. */
#define TUNER_MAX_LINE (256u << 20)
/* The bytes of a worker's stderr kept (tuner_worker_log). */
#define TUNER_LOG_MAX (16u << 10)

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

/* The last TUNER_LOG_MAX bytes (at most) that the current process of
 * "worker", or the last one when none runs, wrote to its stderr, as a new
 * string of valid UTF-8 (a byte that begins no valid sequence reads as
 * '?'), or NULL when out of memory: after an ask that crashed or timed
 * out, what the process said before it died. A fresh process starts an
 * empty log. */
__tuner_give char *tuner_worker_log(__tuner_keep const tuner_worker *worker);

/* Where tuned-worker is: $TUNED_WORKER when set; else, from the running
 * program's folder, where the install put it (libexecdir/tuned-gpu), or
 * the build tree's daemon/; else its installed path, which is then the
 * one a failure names. */
void tuner_worker_default_path(char *path, size_t size);

/* The worker process's pid while it runs, else 0. Another thread may read
 * it to kill a worker stuck in a long ask (the ask then reports a crash). */
int tuner_worker_pid(__tuner_keep const tuner_worker *worker);

/* Kills the process of "worker" if it runs (SIGKILL), waits for it and
 * frees everything. NULL does nothing. */
void tuner_worker_free(__tuner_take tuner_worker *worker);

/* search.c: the search over the schedules of a graph, a generation at a
 * time (docs/design/tuning.md). A search proposes a generation of plans never
 * proposed before, is told each one's time, and proposes the next.
 *
 * Generation 0 is the default plan alone (unless it is known already), so
 * that a first version comes within seconds; the next is the first
 * population: the best known plans (a resumed search) and random genomes.
 * After that, TUNER_GENETIC breeds (tournament, kernel-wise crossover,
 * mutation, elites, immigrants) and TUNER_RANDOM draws random genomes only
 * (the baseline of bench/tuning_curve). Both are seeded and reproducible.
 *
 * Plans are passed as JSON ({"kernels": [...]}) and compared by their
 * compact text with sorted keys, so genomes that repair to the same plan are
 * one candidate. A plan of the open generation is told by its handle: its
 * place among the plans the generation proposed, in order (0, 1, ...).
 *
 * A generation is proposed whole (tuner_search_generation) or a few
 * genomes at a time (tuner_search_begin, then tuner_search_propose until
 * it is full), so that a caller can measure the first plans while the
 * search looks for the others and give up on a generation that is slow
 * to fill. */
typedef struct tuner_search tuner_search;
struct sched_graph;
struct kgen_peaks;

enum tuner_search_kind { TUNER_GENETIC, TUNER_RANDOM };

typedef struct tuner_search_options {
	enum tuner_search_kind kind;
	unsigned seed;
	int population;        /* 0: TUNER_POPULATION */
	int stall_generations; /* restart after this many without a gain; 0: TUNER_STALL */
	double noise;          /* a gain is a time below best * (1 - noise); 0: TUNER_NOISE */
	/* The cost-model filter: with peaks, a candidate whose estimate (the
	 * optimistic time, tuner_optimistic_ms, or the model calibrated on
	 * the trials, whichever ranks them better) exceeds filter_factor
	 * times the best so far is not proposed but counted as filtered,
	 * unless the filter steps aside (tuner_search_cost_model). NULL
	 * peaks: no filter. */
	const struct kgen_peaks *peaks;
	double filter_factor;  /* 0: TUNER_FILTER_FACTOR */
	int cuda;              /* estimates for the cuda backend (else cpu) */
	/* library steps (kgen_library_available): a gene per matrix product
	 * the library can make, and a seed with all of them on */
	int library;
} tuner_search_options;

#define TUNER_POPULATION 32
#define TUNER_STALL 5
/* The noise of timing: a gain, and a new version (retime.c), is a time
 * lower by this share at least. */
#define TUNER_NOISE 0.03
#define TUNER_FILTER_FACTOR 4.0
/* The filter's model is judged on this many trials at least (before, it
 * is the peaks' roofline and filters), and steps aside while its rank
 * correlation with their times is below TUNER_MIN_RANK_CORRELATION. */
#define TUNER_CALIBRATION_TRIALS 6
#define TUNER_MIN_RANK_CORRELATION 0.5

/* A search of "graph" (kept, must outlive it); NULL when out of memory or
 * the graph has no default plan. */
__tuner_give tuner_search *tuner_search_new(__tuner_keep const struct sched_graph *graph,
					    const tuner_search_options *options);
/* A plan measured before (from the trials table): it is never proposed,
 * its time ("ms", INFINITY when it failed) counts for the best and the best
 * plans (not for tuner_search_measured), and the best known plans seed the
 * first population, those a genome decodes to (every value in its gene's
 * domain); the others are only remembered. A plan that does not parse for
 * the graph is ignored. Call before the first generation. */
void tuner_search_know(__tuner_keep tuner_search *s, __tuner_keep json_t *plan,
		       double ms);
/* A plan of a graph of the same form with other shapes (the key tuned
 * nearest before, sched_canonical_distance): each of its values mapped to
 * the nearest in its gene's domain, it is proposed in generation 0 beside
 * the default plan, so that the first version is the better of the two.
 * A plan whose kernels are not this graph's is ignored. Call before the
 * first generation. */
void tuner_search_suggest(__tuner_keep tuner_search *s, __tuner_keep const json_t *plan);
/* The next generation: a JSON array of new plans (maybe fewer than the
 * population when most were seen or filtered, maybe none), or NULL when
 * the search is over: the space is exhausted (tuner_search_exhausted).
 * A search does not end for a stall: after stall_generations generations
 * without a gain beyond the noise it restarts (tuner_search_restarts).
 * Every plan of the previous generation must have been recorded first
 * (unrecorded ones count as failed). */
__tuner_give json_t *tuner_search_generation(__tuner_keep tuner_search *s);
/* The same a few genomes at a time: tuner_search_begin closes the
 * generation out and opens the next (-1: the search is over, the space
 * exhausted); tuner_search_propose draws at most "tries" genomes for it
 * (the plans it proposes at once, generation 0's or the seeds, do not
 * count) and returns the new plans among them, maybe none (NULL: out of
 * memory, or no generation is open). It goes on until the generation is
 * full, or the space is exhausted. A generation may end before it is
 * full, even empty (it brings no gain).
 *
 * Exhausted: once TRIES genomes per place in a row gave plans seen
 * before, every other genome drawn is the next of a sweep over every
 * genome in order (and the filter steps aside); the space is exhausted
 * when a whole pass of the sweep gave no plan not seen before: every plan
 * of the space is proposed, measured once its generation is recorded
 * (tuner_search_space). */
int tuner_search_begin(__tuner_keep tuner_search *s);
__tuner_give json_t *tuner_search_propose(__tuner_keep tuner_search *s, int tries);
bool tuner_search_full(__tuner_keep const tuner_search *s);
bool tuner_search_exhausted(__tuner_keep const tuner_search *s);
/* The plans of the space seen (those of genomes, measured, proposed or
 * filtered), and in "*measured" those measured (failed included): equal
 * once the space is exhausted and the last generation recorded. */
int tuner_search_space(__tuner_keep const tuner_search *s, int *measured);
/* The restarts after a stall so far. */
int tuner_search_restarts(__tuner_keep const tuner_search *s);
/* The plans the open generation has proposed so far (handles 0 to n - 1). */
int tuner_search_proposed(__tuner_keep const tuner_search *s);
/* The time of plan "handle" of the open generation: ms > 0, or INFINITY
 * when it failed (compile error, wrong, crash...). Other handles are
 * ignored. */
void tuner_search_record(__tuner_keep tuner_search *s, int handle, double ms);
/* Counters: generations proposed so far (generation 0 included), plans
 * recorded, candidates dropped by the cost-model filter (each plan once:
 * a filtered plan is never proposed later). */
int tuner_search_generations(__tuner_keep const tuner_search *s);
int tuner_search_measured(__tuner_keep const tuner_search *s);
int tuner_search_filtered(__tuner_keep const tuner_search *s);
/* Why genomes drawn gave no plan to measure, so far: "seen", a plan
 * proposed (or filtered) before; "measured", one measured before the
 * search (tuner_search_know); "filtered", by the cost model (each plan
 * once, tuner_search_filtered); "invalid", none could be made of it. */
typedef struct tuner_search_drops {
	int seen, measured, filtered, invalid;
} tuner_search_drops;
void tuner_search_drops_get(__tuner_keep const tuner_search *s, tuner_search_drops *drops);
/* The best time recorded or known (INFINITY for none). */
double tuner_search_best(__tuner_keep const tuner_search *s);
/* The "n" best plans recorded or known, best first, as a JSON array. */
__tuner_give json_t *tuner_search_best_plans(__tuner_keep const tuner_search *s, int n);
void tuner_search_free(__tuner_take tuner_search *s);

/* retime.c: the verdict of a re-timing (docs/design/tuning.md, "Versions only
 * on real improvement"). The version and the generation's best
 * candidates, its challengers, are timed side by side ({"op": "retime"},
 * TUNER_RETIME_ROUNDS rounds, each timing every plan in turn). The
 * challenger with the lowest median beats the version only if it was
 * faster in at least TUNER_ROUNDS_TO_WIN of the rounds (a sign test: by
 * chance 6% of the time), or, in a close call given as many rounds more,
 * in TUNER_EXTENDED_TO_WIN of them all (3%), and its median is lower by
 * the noise (TUNER_NOISE): load that drifts during the re-timing hits
 * both alike, round by round. Else a challenger in fewer kernels than
 * the version may be, where the timing cannot tell the two apart. */
#define TUNER_RETIME_ROUNDS 7
#define TUNER_ROUNDS_TO_WIN 6
#define TUNER_ROUNDS_TO_EXTEND 4
#define TUNER_EXTENDED_TO_WIN 11 /* of 2 * TUNER_RETIME_ROUNDS */

/* What a re-timing answered: "times", one entry per plan timed
 * ({"median_ms", "spread_ms", "rounds_ms": [...]}, or {"error"}): the
 * version's, then those of "challengers" challengers, then, when
 * "first_apart", that of the version the job started from (else that is
 * the version). "kernels": the kernels of the version's plan, then of
 * each challenger's (only tuner_retime_publishes reads them). */
typedef struct tuner_retiming {
	const json_t *times;
	int challengers;
	bool first_apart;
	const int *kernels;
} tuner_retiming;

/* What a re-timing found of the version and its best challenger. */
typedef struct tuner_verdict {
	int best;           /* the challenger with the lowest median (0 for
			     * the first), or -1 */
	double version_ms, best_ms, best_spread;
	double first_ms;    /* the version the job started from, in the same
			     * re-timing (the version's time when it is it) */
	int won, rounds;    /* the rounds the best won, of how many */
	bool fewer_kernels; /* published as no slower in fewer kernels */
} tuner_verdict;

/* How many rounds entry "entry" of "times" was faster than the version
 * (entry 0) in. */
int tuner_rounds_won(__tuner_keep const json_t *times, int entry);
/* The verdict of re-timing "t" on its best challenger, before any rule. */
void tuner_retime_judge(const tuner_retiming *t, tuner_verdict *v);
/* Whether "v" is a close call: its challenger's median lower by the
 * noise, but only TUNER_ROUNDS_TO_EXTEND to TUNER_ROUNDS_TO_WIN - 1
 * rounds won. Then the version and that challenger (and the version the
 * job started from) are re-timed TUNER_RETIME_ROUNDS rounds more. */
bool tuner_retime_close(const tuner_verdict *v);
/* "v" after the close call's rounds more, "more" (its one challenger the
 * best of "v"): their times, and the rounds of both re-timings. */
void tuner_retime_extend(tuner_verdict *v, const tuner_retiming *more);
/* Whether the verdict "v" of re-timing "t" makes a new version: its best
 * challenger if it beat the version (see above); else, when the version
 * was timed, the challenger in fewest kernels, if fewer than the
 * version's, whose median is no higher than the version's and which won
 * more than half the rounds of "t" ("v" then says it: fewer_kernels). The
 * launches and memory traffic a fusion saves can lie below the noise of
 * timing side by side; where the timing cannot tell the two apart, the
 * plan in fewer kernels goes. */
bool tuner_retime_publishes(const tuner_retiming *t, tuner_verdict *v);

/* cost.c: NeoFlow's optimistic estimate of a plan on a device with the
 * measured "peaks": per kernel, the longer of the bytes it must move over
 * the peak bandwidth and its flops over the compute its parallel work can
 * occupy, plus one launch. A lower bound of the time, as far as the peaks
 * are. */
struct kgen_plan;
double tuner_optimistic_ms(__tuner_keep const struct sched_graph *graph,
			   __tuner_keep const struct kgen_plan *plan,
			   __tuner_keep const struct kgen_peaks *peaks, int cuda);

/* The parts of that estimate, summed over the plan's kernels: the bytes
 * they move, their flops over the share of the device each can occupy
 * (so that a kernel on one of 16 cores counts 16 times its flops), their
 * launches. -1 when out of memory. */
typedef struct tuner_cost_terms {
	double bytes, flops;
	int launches;
} tuner_cost_terms;
int tuner_cost_terms_of(__tuner_keep const struct sched_graph *graph,
			__tuner_keep const struct kgen_plan *plan,
			__tuner_keep const struct kgen_peaks *peaks, int cuda,
			tuner_cost_terms *terms);
/* The cost model calibrated on measured trials: a plan takes
 * bytes * ms_per_byte + flops * ms_per_flop + launches * launch_ms (the
 * peaks' rates are 1 / (bandwidth_gbs * 1e6) and 1 / (gflops * 1e6)). */
typedef struct tuner_cost_rates {
	double ms_per_byte, ms_per_flop, launch_ms;
} tuner_cost_rates;
double tuner_calibrated_ms(const tuner_cost_terms *terms,
			   const tuner_cost_rates *rates);
/* The two rates fitted to "n" trials ("terms" and measured "ms", each
 * less its launches at "launch_ms") by least squares on the relative
 * error; a rate that would come out negative is 0 and the other fitted
 * alone. Trials without a finite time beyond their launches are left
 * out. False, "rates" untouched, with fewer than 2 such trials or no
 * positive rate. */
bool tuner_cost_fit(const tuner_cost_terms *terms, const double *ms, int n,
		    double launch_ms, tuner_cost_rates *rates);
/* Spearman's rank correlation of "x" and "y" ("n" pairs; ties share
 * their mean rank): 1 when they rank alike, -1 reversed; NAN with fewer
 * than 3 pairs, when either is constant, or out of memory. */
double tuner_spearman(const double *x, const double *y, int n);

/* search.c: the filter's model now (tuner_search_options). Refitted when
 * each generation begins: the rates fitted to every trial the search
 * measured (tuner_cost_fit; not those it knew) are the model when their
 * estimates rank the trials better than the roofline of the peaks does.
 * The filter steps aside (admits every plan) while that model's rank
 * correlation is below TUNER_MIN_RANK_CORRELATION, for the generation
 * after one that it emptied, and while the search sweeps the space. */
typedef struct tuner_search_model {
	bool filtering;  /* the filter drops plans now */
	bool calibrated; /* rates: the model is fitted, not the peaks */
	tuner_cost_rates rates;
	double rank_correlation;       /* the model's Spearman with the times, NAN
				  * before TUNER_CALIBRATION_TRIALS trials */
	double peaks_rank_correlation; /* the roofline's, as the model's */
} tuner_search_model;
void tuner_search_cost_model(__tuner_keep const tuner_search *s,
			     tuner_search_model *model);

/* fuse.c: the fusion planner's grouping, as tunectl explain shows it
 * (docs/design/fusion.md): the plan the genes of a search decode to when every
 * edge gene is on (each producer joins its consumer's group where the
 * planner allows it) and every sibling gene off, on the default
 * schedules, with no cost model (no peaks), for the cuda backend or the
 * cpu's. Each merge the planner tries is told to "trace" (may be NULL)
 * as it is decided, in the planner's order: passes over the edges by
 * layer of their producer, again until a pass merges nothing; a graph
 * of more ops than the planner fuses is told as one TUNER_MERGE_TOO_BIG
 * and left unfused. NULL only when out of memory (every graph has a
 * default plan: kgen_plan_default fails only then). */
enum tuner_merge_outcome {
	TUNER_MERGE_FUSED,    /* under the root's tile, or widened to whole rows */
	TUNER_MERGE_LIBRARY,  /* fused as a library step and its epilogue */
	TUNER_MERGE_ALREADY,  /* the two ops are in one group already */
	TUNER_MERGE_TOO_MANY, /* the group would pass KGEN_MAX_OPS ops */
	TUNER_MERGE_CYCLIC,   /* an op outside would feed the group and read it */
	TUNER_MERGE_REFUSED,  /* the planner refuses the group under both tiles */
	TUNER_MERGE_SLOWER,   /* the cost model says it cannot pay */
	TUNER_MERGE_TOO_BIG,  /* the graph has too many ops to fuse: told once,
			       * before any merge, a and b -1, "why" says so */
};

struct kgen_kernel;
typedef struct tuner_merge {
	int pass;     /* 1, 2, ... */
	int a, b;     /* the ops whose groups merge: producer, consumer */
	enum tuner_merge_outcome outcome;
	/* the group as one kernel: as fused, or as tried under the root's
	 * tile; NULL when none was formed (already, too many, cyclic) */
	__tuner_keep const struct kgen_kernel *kernel;
	bool widened; /* fused under the tile widened to whole rows */
	/* refused, or fused only widened: why not under the root's tile */
	const char *why;
	/* refused: the group under the widened tile and why not, or NULL
	 * when the root has one dim and nothing widens */
	__tuner_keep const struct kgen_kernel *tried_widened;
	const char *why_widened;
} tuner_merge;

typedef void tuner_merge_fn(const tuner_merge *merge, void *user);

__tuner_give struct kgen_plan *tuner_fusion_edges(__tuner_keep const struct sched_graph *graph,
						  int cuda, tuner_merge_fn *trace,
						  void *user);

/* kept_graphs.c: the graphs a worker read last, each with the fused
 * groups analysed on it (sched_group_recall), kept across its requests so
 * that a graph sent again is neither read nor analysed again: the last
 * TUNER_KEPT_GRAPHS texts read, the one asked for least recently
 * forgotten first. Not thread-safe: one per thread serving requests. */
#define TUNER_KEPT_GRAPHS 4
typedef struct tuner_graphs tuner_graphs;
struct sched_graph;
struct sched_error;
/* NULL when out of memory. */
__tuner_give tuner_graphs *tuner_graphs_new(void);
void tuner_graphs_free(__tuner_take tuner_graphs *graphs);
/* The graph of "text" (sched_graph_read_string), kept in "graphs" until
 * TUNER_KEPT_GRAPHS other texts are read after it: the same graph for the
 * same text. On failure returns the negative SCHED_E* code, with *err
 * saying why. */
int tuner_graphs_read(__tuner_keep tuner_graphs *graphs, const char *text,
		      __tuner_keep const struct sched_graph **graph,
		      struct sched_error *err);

/* The program of the plan that candidates of "graph" (one of those
 * kept) are timed beside, kept with it by tuner_graphs_keep_beside, if
 * that plan's compact JSON is "plan_text"; else NULL. */
struct kgen_plan;
struct kgen_program;
struct kgen_program *tuner_graphs_beside(__tuner_keep tuner_graphs *graphs,
					 __tuner_keep const struct sched_graph *graph,
					 const char *plan_text);
/* Keeps "program", built from "plan" (both taken), whose compact JSON is
 * "plan_text", with "graph" in place of the one kept with it before,
 * until the graph is forgotten; frees them when "graph" is not kept. */
void tuner_graphs_keep_beside(__tuner_keep tuner_graphs *graphs,
			      __tuner_keep const struct sched_graph *graph,
			      const char *plan_text,
			      __tuner_take struct kgen_plan *plan,
			      __tuner_take struct kgen_program *program);

/* measure.c: the measurement protocol a worker process runs for one
 * request {"graph": TEXT, "plan": PLAN or null, "seed": N, "timing":
 * {...}, "sources": [...], "cutoff_ms": MS, "beside": PLAN,
 * "cutoff_ratio": R}: compile, verify against the reference, time (a
 * first run slower than cutoff_ms ends the timing: "cut": true); with
 * "beside", the whole plan is timed in turns with that plan, kept with
 * the graph ("beside" in the answer: its time and the median ratio; a
 * first run more than cutoff_ratio times its first run ends the timing),
 * or alone where it cannot be built ("beside_error").
 * The answer's "kind" is ok, invalid, invalid_plan, compile_error, wrong
 * or error (docs/kernels.md). */
struct kgen_backend;
__tuner_give json_t *tuner_measure(struct kgen_backend *backend,
				   __tuner_keep tuner_graphs *graphs,
				   __tuner_keep const json_t *request);

/* The source of each kernel of "plan" for "graph" as the worker prints it
 * on the cuda backend (else the cpu's), as the answers' "sources" list
 * them: [{"kernel", "language", "source"}...]; NULL when the plan is not
 * one of the graph's. For the repro bundle of a plan whose worker died. */
struct sched_graph;
__tuner_give json_t *tuner_plan_sources(__tuner_keep const struct sched_graph *graph,
					__tuner_keep json_t *plan, int cuda);

/* Every request a worker serves, by its "op" (docs/kernels.md), its
 * "graph" read through "graphs" (tuner_graphs_read):
 * "measure" (or none): tuner_measure;
 * "compile" {"graph", "plan", "sources"}: the kernels compiled into the
 *   backend's shared folder, not loaded: {"kind": ok, invalid,
 *   invalid_plan, compile_error or error, "error", "log", "plan", "ms"};
 * "probe": the device's peaks: {"kind": "ok", "bandwidth_gbs", "gflops",
 *   "launch_ms", "cores"};
 * "retime" {"graph", "plans": [PLAN or null...], "seed", "rounds": 5}:
 *   each plan built and run once on the seed's inputs, then timed once per
 *   round, all in turn: {"kind": "ok", "times": [{"median_ms",
 *   "spread_ms", "runs"} or {"error"}...]}.
 * Another op is answered {"kind": "invalid", "error"}. */
__tuner_give json_t *tuner_serve(struct kgen_backend *backend,
				 __tuner_keep tuner_graphs *graphs,
				 __tuner_keep const json_t *request);

/* The time limit of one request for "graph" on "backend" ("cpu", "cuda"
 * or "auto"): 10 s, or 20 times a pessimistic estimate of one run of the
 * plan (0.2 GFLOP/s on a cpu, 1 TFLOP/s on a GPU) plus 2 s per op to
 * compile plus what the reference may take (kgen_reference_seconds),
 * whichever is longer. */
struct sched_graph;
double tuner_time_limit(__tuner_keep const struct sched_graph *graph,
			const char *backend);

#endif
