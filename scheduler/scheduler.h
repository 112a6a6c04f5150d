/*
 * scheduler.h: the graph IR of tuned.
 *
 * A graph is read from graph.json v1 (docs/graph-format.md), checked in full
 * (names, shapes, expressions, writes, cycles, bounds with isl), given a
 * canonical text and a key (SHA-256 of that text), and can be evaluated by
 * the reference interpreter in double precision.
 *
 * Ownership follows isl: __sched_give returns a new object the caller frees,
 * __sched_keep borrows, __sched_take consumes.
 */
#ifndef SCHEDULER_H
#define SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <isl/map.h>
#include <isl/set.h>
#include <isl/union_map.h>
#include <jansson.h>

#define __sched_give
#define __sched_take
#define __sched_keep

#define SCHED_MAX_RANK 8
#define SCHED_KEY_HEX 64

enum sched_code {
	SCHED_OK = 0,
	SCHED_EIO = -1,     /* the file cannot be read */
	SCHED_EJSON = -2,   /* not JSON */
	SCHED_ESCHEMA = -3, /* JSON of the wrong shape: keys, tensors, options */
	SCHED_ESYNTAX = -4, /* an op's text does not parse */
	SCHED_EMEANING = -5, /* an op parses but means nothing valid */
	SCHED_EGRAPH = -6,  /* writes, reads, outputs, cycles */
	SCHED_EBOUNDS = -7, /* an access leaves its tensor */
	SCHED_ENOMEM = -8,
	SCHED_EINTERNAL = -9,
	SCHED_ELIMIT = -10, /* over a limit of sched_limits */
};

enum sched_dtype { SCHED_F32, SCHED_F16, SCHED_BF16, SCHED_I32 };
enum sched_role { SCHED_INTERMEDIATE, SCHED_INPUT, SCHED_OUTPUT };

/* What went wrong and where: op is the index in "ops" (or -1), column is
 * 1-based in that op's text (or 0). message is one line, ready to print. */
typedef struct sched_error {
	int code;
	int op;
	int column;
	char message[512];
} sched_error;

typedef struct sched_graph sched_graph;

/* Reads and checks the graph in file "path" / in "text". On failure returns
 * a negative sched_code, fills "err" (may be NULL) and sets *out to NULL. */
int sched_graph_read_file(const char *path, __sched_give sched_graph **out,
			  sched_error *err);
int sched_graph_read_string(const char *text, __sched_give sched_graph **out,
			    sched_error *err);
void sched_graph_free(__sched_take sched_graph *graph);

/* What reading one graph may cost, checked as it is read, before the
 * expensive checks: each a maximum (0: none beyond the format's own), with
 * the option that raises it, named in the error (may be NULL). */
typedef struct sched_limit {
	int64_t max;
	const char *option;
} sched_limit;

typedef struct sched_limits {
	sched_limit text_bytes;      /* the graph.json text */
	sched_limit ops;             /* entries of "ops" */
	sched_limit tensor_elements; /* the elements of any one tensor */
	sched_limit total_elements;  /* the elements of all tensors together */
} sched_limits;

/* sched_graph_read_string within "limits": a graph over one fails with
 * SCHED_ELIMIT, the message naming the limit, the graph's value and the
 * option. */
int sched_graph_read_limited(const char *text,
			     __sched_keep const sched_limits *limits,
			     __sched_give sched_graph **out, sched_error *err);

const char *sched_graph_name(__sched_keep const sched_graph *graph);
int sched_graph_tensor_count(__sched_keep const sched_graph *graph);
int sched_graph_op_count(__sched_keep const sched_graph *graph);
bool sched_graph_allows_tf32(__sched_keep const sched_graph *graph);

/* Tensors are numbered in the order graph.json lists them. */
int sched_tensor_find(__sched_keep const sched_graph *graph, const char *name);
const char *sched_tensor_name(__sched_keep const sched_graph *graph, int t);
int sched_tensor_rank(__sched_keep const sched_graph *graph, int t);
const int64_t *sched_tensor_shape(__sched_keep const sched_graph *graph, int t);
int64_t sched_tensor_size(__sched_keep const sched_graph *graph, int t);
/* The bytes of tensor t: its elements times its dtype's size. */
size_t sched_tensor_bytes(__sched_keep const sched_graph *graph, int t);
enum sched_dtype sched_tensor_dtype(__sched_keep const sched_graph *graph, int t);
enum sched_role sched_tensor_role(__sched_keep const sched_graph *graph, int t);

const char *sched_dtype_name(enum sched_dtype dtype);
int sched_dtype_bytes(enum sched_dtype dtype);

/* The ops in an order that respects their dependences (order[i] is an index
 * into graph.json's "ops"). */
const int *sched_graph_order(__sched_keep const sched_graph *graph);
const char *sched_op_text(__sched_keep const sched_graph *graph, int op);

/* The canonical text: independent of tensor names and of the listing order
 * of independent ops; and the key, the SHA-256 of it in hex. */
const char *sched_graph_canonical(__sched_keep const sched_graph *graph);
const char *sched_graph_key(__sched_keep const sched_graph *graph);
/* The canonical form as graph.json: the graph's name and options, its
 * tensors named t0, t1, ... and listed in the order of the canonical
 * text, its ops in that order with their variables named canonically.
 * Read back, it has the same key, and each tensor and op the index its
 * number; so plans, sources and launches of one key mean the same ops
 * and tensors whoever submitted it. NULL when out of memory. */
__sched_give char *sched_graph_canonical_json(__sched_keep const sched_graph *graph);
/* The number of tensor "t" in the canonical form (its index there). The
 * canonical index of an op is its position in sched_graph_order. */
int sched_tensor_canonical_number(__sched_keep const sched_graph *graph, int t);
/* Whether canonical texts "a" and "b" have the same form: the same ops on
 * the same tensors, equal once every number is taken out (shapes, ranges,
 * constants). Then "distance" is how far apart their numbers are: the sum
 * of |ln(x / y)| over them, 0 for the same graph. */
bool sched_canonical_distance(const char *a, const char *b, double *distance);

/* The polyhedral forms of op "op" (an index into "ops") in "ctx": its
 * iteration domain { S<op>[vars] : box }, its write { S<op>[vars] -> T[..] }
 * and the union of its reads. NULL on failure. */
__sched_give isl_set *sched_op_domain(isl_ctx *ctx,
				      __sched_keep const sched_graph *graph, int op);
__sched_give isl_map *sched_op_write(isl_ctx *ctx,
				     __sched_keep const sched_graph *graph, int op);
__sched_give isl_union_map *sched_op_reads(isl_ctx *ctx,
					   __sched_keep const sched_graph *graph,
					   int op);

/* A contraction (contraction.c): op C = sum A * B that is a matrix
 * product C[m, n] = sum(k) A[m, k] B[k, n] once the op's vars of each
 * kind merge, read off the isl access relations. Element (m, n, k) of A
 * sits at a0 + m a_m + k a_k, of B at b0 + k b_k + n b_n, of C at
 * c0 + m c_m + n c_n; n is the dim along which C is contiguous where one
 * is. A kind with no var has extent 1 and stride 0. */
typedef struct sched_contraction {
	int a, b; /* the factors' tensors (gathered: the first B reads) */
	int64_t m, n, k;
	int64_t a_m, a_k, b_k, b_n, c_m, c_n;
	int64_t a0, b0, c0;
	/* sched_op_gathered_contraction: B is an expression, b0, b_k, b_n 0;
	 * factor_b: which of the body's two factors it is */
	bool gathered;
	int factor_b;
	/* sched_op_batched_contraction: the extent of the batch (output vars
	 * that move A, B and C, merged; 0 or 1: none) and its strides */
	int64_t batch, a_batch, b_batch, c_batch;
} sched_contraction;

bool sched_op_contraction(__sched_keep const sched_graph *graph, int op,
			  sched_contraction *out);

/* The same, or else a batch of such products: output vars that move A, B
 * and C (attention's heads) merge into one batch var, whose strides
 * chain as the other kinds' do. */
bool sched_op_batched_contraction(__sched_keep const sched_graph *graph, int op,
				  sched_contraction *out);

/* The same, or else a product whose B factor is any expression of the
 * n and k vars alone (a convolution's padded window: an implicit matrix
 * product, evaluated where B is packed). A's k vars and C's n vars chain
 * as a contraction's do; element k of B's flat K decodes into the k vars
 * in order (the last fastest), element n into the n vars alike. */
bool sched_op_gathered_contraction(__sched_keep const sched_graph *graph, int op,
				   sched_contraction *out);

/* Per op: domain, accesses as isl maps, reduction ranges, FLOPs, bytes;
 * and the graph's totals and key. */
__sched_give json_t *sched_graph_explain(__sched_keep const sched_graph *graph);

/* The backward graph of "graph" with respect to the tensors named in
 * "wrt" (inputs or intermediates), as graph.json text in *out_json (the
 * caller frees it): its inputs are the graph's inputs and d_<output>
 * for each output, its outputs d_<name> for each of wrt, with that
 * tensor's shape and dtype (docs/autodiff.md). The text is read back and
 * checked before it is returned. A graph it cannot differentiate fails
 * with a message naming the op, the read and the reason. */
int sched_graph_grad(__sched_keep const sched_graph *graph,
		     const char *const *wrt, int nwrt,
		     __sched_give char **out_json, sched_error *err);

/* Which forward results a backward graph reads saved by the forward graph
 * instead of recomputing them (docs/autodiff.md, "Saved or recomputed"):
 * none, the costly ones (auto), or all. */
enum sched_grad_save { SCHED_SAVE_NONE, SCHED_SAVE_AUTO, SCHED_SAVE_ALL };

/* sched_graph_grad, choosing per forward result the backward graph reads
 * whether to recompute it or to read it saved: a saved tensor is an
 * input of the backward graph by its forward name, and *forward_json
 * (when not NULL) is the forward graph that also outputs it, named
 * <name>_fwd (NULL when nothing is saved; the caller frees it). */
int sched_graph_grad_saving(__sched_keep const sched_graph *graph,
			    const char *const *wrt, int nwrt, enum sched_grad_save save,
			    __sched_give char **out_json,
			    __sched_give char **forward_json, sched_error *err);

/* Reference interpreter. "values" has one buffer per tensor, each of
 * sched_tensor_size() doubles, row-major; inputs are read, every other
 * tensor is written. Arithmetic is in double; each stored element is
 * rounded to its tensor's dtype (f32, f16, bf16 to nearest even; i32
 * truncated toward zero). */
int sched_interp_run(__sched_keep const sched_graph *graph, double **values);

/* The same with every element of a float dtype kept in double, not
 * rounded to its dtype (i32 still truncates): for checks that need double precision throughout (derivatives against
 * finite differences). */
int sched_interp_run_exact(__sched_keep const sched_graph *graph, double **values);

/* The same, evaluating only the elements marked in "needed" (one mask per
 * tensor, row-major; NULL for inputs) and leaving the others alone. */
int sched_interp_run_needed(__sched_keep const sched_graph *graph,
			    double **values, bool **needed);

/* Given marks on some elements of the outputs (and any other tensor),
 * marks every element of every non-input tensor they depend on. Masks of
 * inputs must be NULL. */
int sched_interp_mark_needed(__sched_keep const sched_graph *graph,
			     bool **needed);

/* One zero-filled buffer per tensor, and its release. */
__sched_give double **sched_values_new(__sched_keep const sched_graph *graph);
void sched_values_free(__sched_keep const sched_graph *graph,
		       __sched_take double **values);

/* SHA-256 of "len" bytes of "data" as 64 lowercase hex digits and a NUL. */
void sched_sha256_hex(const void *data, size_t len, char hex[SCHED_KEY_HEX + 1]);

/* Whether "text" has the form of a key: SCHED_KEY_HEX lowercase hex
 * digits, as sched_sha256_hex writes them, and nothing after. */
bool sched_is_key(const char *text);

/* fusion.c: dependences, their widths and fused groups (docs/design/fusion.md).
 *
 * Widths follow SIRIUS: a dependence between two ops under a mapping of
 * their instances to blocks and threads is thread-level when each consumer
 * thread reads only what the same thread wrote, block-level when each
 * consumer block reads from exactly one producer block, global otherwise. */
enum sched_width { SCHED_WIDTH_THREAD, SCHED_WIDTH_BLOCK, SCHED_WIDTH_GLOBAL };

const char *sched_width_name(enum sched_width width);

/* The dependence of op "consumer" on op "producer": the map from each
 * producer instance to the consumer instances that read what it wrote
 * (empty when the consumer does not read the producer's target). */
__sched_give isl_map *sched_dependence(isl_ctx *ctx,
				       __sched_keep const sched_graph *graph,
				       int producer, int consumer);

/* The width of "dep" (P -> C) when P's instances run on the blocks
 * "block_p" (P -> B[..]) and threads "thread_p" (P -> T[..]; threads are
 * named with their block, so T holds the block's coordinates too), and C's
 * on "block_c" and "thread_c". Thread maps may be NULL: never thread-level.
 * -1 when isl fails. */
int sched_width_of(__sched_keep isl_map *dep, __sched_keep isl_map *block_p,
		   __sched_keep isl_map *block_c, __sched_keep isl_map *thread_p,
		   __sched_keep isl_map *thread_c);

/* Where a stage of a fused group keeps what it computes: in block-local
 * memory (shared memory on cuda, the block's stack on the cpu), in the
 * tensor in global memory, both (a member whose tensor is an output or
 * read outside the group), or nowhere: recomputed at each read (a cheap
 * elementwise member, when block-local memory runs short). */
enum sched_store { SCHED_STORE_LOCAL, SCHED_STORE_GLOBAL, SCHED_STORE_BOTH,
		   SCHED_STORE_INLINE };

#define SCHED_GROUP_MAX_OPS 16

/* A fused group to analyse: its ops (any order), the tile that cuts the
 * output of each root (a member no other member reads) into blocks, which
 * branches (connected parts; numbered in the order of their roots in
 * graph.json) share a lane, the threads per block and the block-local
 * memory a block may use. */
typedef struct sched_group_spec {
	int nops;
	const int *ops;
	const int64_t *tile;  /* per dim of the roots' outputs */
	const int *lanes;     /* per branch; NULL: each branch its own lane */
	int threads;          /* cuda threads per block; 0: cpu, one per block */
	int64_t local_bytes;  /* block-local memory at most, in bytes */
} sched_group_spec;

/* One op of a group. Its region, the part of its target one block
 * computes, is [lo[d], hi[d]) per dim: C expressions of the block's
 * coordinates b0, b1, ... of its branch. */
typedef struct sched_stage {
	int op;
	int branch;
	enum sched_store store;
	enum sched_width width;  /* the widest member dependence it reads */
	bool barrier;            /* cuda: __syncthreads() before it runs */
	int rank;
	char *lo[SCHED_MAX_RANK], *hi[SCHED_MAX_RANK];
	int64_t extent[SCHED_MAX_RANK]; /* the largest hi - lo: its buffer's shape */
	int64_t offset;          /* of its buffer in the block's local floats */
} sched_stage;

/* A branch's blocks tile its root's output: grid[d] blocks along dim d,
 * numbered row-major. The branches of a lane run one after another in
 * the same block (vertical placement) and need the same number of blocks;
 * lanes run in different blocks of one launch (horizontal placement). */
typedef struct sched_branch {
	int root;
	int lane;
	int rank;
	int64_t tile[SCHED_MAX_RANK]; /* the tile, within the root's shape */
	int64_t grid[SCHED_MAX_RANK];
	int64_t blocks;
} sched_branch;

typedef struct sched_group {
	int nstages;
	sched_stage *stages;   /* in dependence order, branch after branch */
	int nbranches;
	sched_branch *branches;
	int nlanes;
	int64_t *lane_blocks;  /* per lane */
	int64_t blocks;        /* of the launch: the sum over lanes */
	int64_t local_floats;  /* block-local floats a block needs */
} sched_group;

/* Analyses "spec": the members' regions propagated back from the roots'
 * tiles (FusionStitching's schedule consistency), the width of every
 * member dependence, where each result lives, the block-local memory
 * (buffers reused once their readers ran) and, with threads, the barriers
 * (only where a dependence that is not thread-level or a reused buffer
 * needs one). A group that is not legal -- a global dependence, a branch
 * with two roots, regions that overlap, memory beyond the limit -- fails
 * with SCHED_EMEANING and the reason in "err". */
int sched_group_new(__sched_keep const sched_graph *graph,
		    const sched_group_spec *spec, __sched_give sched_group **out,
		    sched_error *err);
void sched_group_free(__sched_take sched_group *group);
/* A copy of "group"; NULL when out of memory. */
__sched_give sched_group *sched_group_copy(__sched_keep const sched_group *group);
/* The stage of op "op" in "group", or -1; whether stage "s" is the first
 * of its branch. */
int sched_group_stage_of(__sched_keep const sched_group *group, int op);
bool sched_group_starts_branch(__sched_keep const sched_group *group, int s);

/* sync.c: the tile dependence of one kernel on another and the sync
 * policies read off it (cuSync; docs/design/sync.md).
 *
 * A kernel's tiles: the elements of tensor "tensor" seen as a row-major
 * array of shape view[0..rank) (the same elements in the same order: the
 * tensor's own shape, or [M, N] for a matrix product), cut into tiles of
 * tile[d] along dim d and numbered row-major. */
typedef struct sched_tiling {
	int tensor;
	int rank;
	int64_t view[SCHED_MAX_RANK];
	int64_t tile[SCHED_MAX_RANK];
} sched_tiling;

/* The tiles of "t" along dim d. */
int64_t sched_tiles_along(const sched_tiling *t, int d);

/* A producer kernel whose tiles cover its output, and a consumer kernel
 * (its ops, any order) that reads that output and whose tiles cover its
 * root's output. */
typedef struct sched_sync_pair {
	sched_tiling producer;
	int nconsumer_ops;
	const int *consumer_ops;
	sched_tiling consumer;
} sched_sync_pair;

/* Policies, after the shape of the relation they are read off:
 * TILE, a semaphore per producer tile (any relation); ROW, one per row of
 * producer tiles (the last dim grouped: a GEMM after a GEMM); STRIDED,
 * tiles "stride" apart along the last dim share one (the Q, K and V
 * slices of one GEMM); CONV2D, one per spatial tile of an [n, c, h, w]
 * grid (the channel dim grouped: a convolution after a convolution).
 * Each but TILE is offered only when exact: a consumer tile waits for
 * no producer tile it does not read. */
enum sched_sync_kind {
	SCHED_SYNC_TILE, SCHED_SYNC_ROW, SCHED_SYNC_STRIDED, SCHED_SYNC_CONV2D,
	SCHED_SYNC_KINDS
};

const char *sched_sync_kind_name(enum sched_sync_kind kind);
int sched_sync_kind_from_name(const char *name); /* -1: none */

/* Producer tile p posts once to its semaphore; a consumer tile waits on
 * the semaphores of the tiles it needs until each received "target"
 * posts. Semaphores form an extent[0..rank) grid, numbered row-major.
 * post: C expression of the producer tile's coordinates p0, p1, ...;
 * wait: C statements (isl's loops, which may call min, max and floord)
 * of the consumer tile's coordinates c0, c1, ..., one KSYNC_WAIT(s) per
 * semaphore s. */
typedef struct sched_sync_policy {
	enum sched_sync_kind kind;
	int64_t stride;
	int rank;
	int64_t extent[SCHED_MAX_RANK];
	int64_t semaphores;
	int64_t target;
	char *post;
	char *wait;
	isl_map *posts;  /* Tp[p] -> Sem[s] */
	isl_map *waits;  /* Tc[c] -> Sem[s] */
	int64_t *posted; /* the posts each semaphore receives, counted once */
} sched_sync_policy;

typedef struct sched_sync {
	isl_ctx *ctx;
	sched_tiling producer, consumer;
	isl_map *needs;           /* Tc[c] -> Tp[p]: the producer tiles c reads */
	isl_set *producer_grid;   /* Tp[p] */
	isl_set *consumer_grid;   /* Tc[c] */
	int npolicies;
	sched_sync_policy policies[SCHED_SYNC_KINDS];
} sched_sync;

/* The tile dependence of "pair" and its policies; SCHED_EMEANING with
 * the reason when the consumer does not read the producer's output or a
 * tiling does not cover its tensor. */
int sched_sync_new(__sched_keep const sched_graph *graph,
		   const sched_sync_pair *pair, __sched_give sched_sync **out,
		   sched_error *err);
/* The same offering only policy "want" when it applies, else every one
 * (all of them for "want" < 0): what a caller that will use one policy
 * needs, without the isl work of the others. */
int sched_sync_new_for(__sched_keep const sched_graph *graph,
		       const sched_sync_pair *pair, int want,
		       __sched_give sched_sync **out, sched_error *err);
void sched_sync_free(__sched_take sched_sync *sync);
/* The policy of "kind" offered for "sync", or NULL. */
const sched_sync_policy *sched_sync_policy_of(__sched_keep const sched_sync *sync,
					      enum sched_sync_kind kind);
/* The proof that "policy" can neither hang nor race on "sync", with isl
 * over the tile grids: each semaphore a consumer tile waits on receives
 * exactly "target" posts, and every producer tile a consumer tile needs
 * posts to a semaphore it waits on. SCHED_EMEANING with the reason. */
int sched_sync_check(__sched_keep const sched_sync *sync,
		     __sched_keep const sched_sync_policy *policy, sched_error *err);

#endif
