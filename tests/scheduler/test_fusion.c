/*
 * test_fusion.c: the fusion planner (scheduler/fusion.c). Widths of
 * dependences under block and thread maps written by hand, as in the
 * analysis notes (an elementwise chain, GEMM then bias, GEMM then GEMM);
 * and fused groups of the examples: their branches, lanes, blocks,
 * regions, stores, widths, barriers and block-local memory, and the
 * groups that must be refused, with their reasons.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <isl/ctx.h>
#include <isl/map.h>

#include "graph_builder.h"
#include "ir.h"

#define LOCAL_48K (48 * 1024)

/* ---- widths of hand-made cases ---- */

/* A graph and an isl context to read maps in. */
typedef struct maps {
	sched_graph *graph;
	isl_ctx *ctx;
} maps;

static maps start(const char *tensors, const char *const *ops)
{
	maps m = {0};
	sched_error err = {0};

	cr_assert_eq(load_graph(tensors, ops, &m.graph, &err), SCHED_OK, "%s",
		     err.message);
	m.ctx = isl_ctx_alloc();
	cr_assert_not_null(m.ctx);
	return m;
}

static void finish(maps *m)
{
	sched_graph_free(m->graph);
	isl_ctx_free(m->ctx);
}

static isl_map *map(maps *m, const char *text)
{
	isl_map *result = isl_map_read_from_str(m->ctx, text);

	cr_assert_not_null(result, "isl cannot read %s", text);
	return result;
}

/* The width of op 1's dependence on op 0 under the maps given as text
 * (threads NULL: no thread maps). */
static int width(maps *m, const char *block_p, const char *block_c,
		 const char *thread_p, const char *thread_c)
{
	isl_map *dep = sched_dependence(m->ctx, m->graph, 0, 1);
	isl_map *bp = map(m, block_p), *bc = map(m, block_c);
	isl_map *tp = thread_p ? map(m, thread_p) : NULL;
	isl_map *tc = thread_c ? map(m, thread_c) : NULL;
	int w;

	cr_assert_not_null(dep);
	w = sched_width_of(dep, bp, bc, tp, tc);
	isl_map_free(dep);
	isl_map_free(bp);
	isl_map_free(bc);
	isl_map_free(tp);
	isl_map_free(tc);
	return w;
}

/* Whether op "consumer"'s dependence on op "producer" is exactly "want". */
static void expect_dependence(maps *m, int producer, int consumer, const char *want)
{
	isl_map *dep = sched_dependence(m->ctx, m->graph, producer, consumer);
	isl_map *expected = map(m, want);
	char *got = isl_map_to_str(dep);

	cr_expect_eq(isl_map_is_equal(dep, expected), isl_bool_true,
		     "dependence %d -> %d is %s, want %s", producer, consumer, got, want);
	free(got);
	isl_map_free(dep);
	isl_map_free(expected);
}

/* 64 x 64 blocks and 4 x 4 micro-tiles: a thread is named by its block's
 * coordinates and its place in the block. */
#define BLOCKS_2D(S) "{ " S "[i, j] -> B[floor(i / 64), floor(j / 64)] }"
#define THREADS_2D(S) "{ " S "[i, j] -> T[floor(i / 64), floor(j / 64), " \
		     "floor((i mod 64) / 4), floor((j mod 64) / 4)] }"
/* The same for an op with a reduction variable k, which stays in a thread. */
#define BLOCKS_3D(S) "{ " S "[i, j, k] -> B[floor(i / 64), floor(j / 64)] }"
#define THREADS_3D(S) "{ " S "[i, j, k] -> T[floor(i / 64), floor(j / 64), " \
		     "floor((i mod 64) / 4), floor((j mod 64) / 4)] }"

#define CHAIN "x f32 128,128 in; y f32 128,128; z f32 128,128 out"

Test(fusion, width_names)
{
	cr_expect_str_eq(sched_width_name(SCHED_WIDTH_THREAD), "thread");
	cr_expect_str_eq(sched_width_name(SCHED_WIDTH_BLOCK), "block");
	cr_expect_str_eq(sched_width_name(SCHED_WIDTH_GLOBAL), "global");
}

/* y = 2x, z = y + 1 with the same blocks and threads: each thread reads
 * what it wrote. */
Test(fusion, elementwise_chain_with_the_same_threads_is_thread_level)
{
	maps m = start(CHAIN, OPS("y[i, j] = x[i, j] * 2", "z[i, j] = y[i, j] + 1"));

	expect_dependence(&m, 0, 1, "{ S0[i, j] -> S1[i, j] : 0 <= i < 128 and "
			  "0 <= j < 128 }");
	cr_expect_eq(width(&m, BLOCKS_2D("S0"), BLOCKS_2D("S1"), THREADS_2D("S0"),
			   THREADS_2D("S1")), SCHED_WIDTH_THREAD);
	/* Without thread maps nothing is thread-level; the blocks still match. */
	cr_expect_eq(width(&m, BLOCKS_2D("S0"), BLOCKS_2D("S1"), NULL, NULL),
		     SCHED_WIDTH_BLOCK);
	finish(&m);
}

/* A transposed read: consumer block (a, b) reads producer block (b, a),
 * one block each, but not the same threads. */
Test(fusion, transposed_read_is_block_level)
{
	maps m = start(CHAIN, OPS("y[i, j] = x[i, j] * 2", "z[i, j] = y[j, i] + 1"));

	expect_dependence(&m, 0, 1, "{ S0[i, j] -> S1[j, i] : 0 <= i < 128 and "
			  "0 <= j < 128 }");
	cr_expect_eq(width(&m, BLOCKS_2D("S0"), BLOCKS_2D("S1"), THREADS_2D("S0"),
			   THREADS_2D("S1")), SCHED_WIDTH_BLOCK);
	finish(&m);
}

/* A shifted read crosses block edges: the last column of a consumer block
 * reads the next producer block. */
Test(fusion, read_across_a_block_edge_is_global)
{
	maps m = start("x f32 128,128 in; y f32 128,128; z f32 128,127 out",
		       OPS("y[i, j] = x[i, j] * 2", "z[i, j] = y[i, j + 1] + y[i, j]"));

	cr_expect_eq(width(&m, BLOCKS_2D("S0"), BLOCKS_2D("S1"), THREADS_2D("S0"),
			   THREADS_2D("S1")), SCHED_WIDTH_GLOBAL);
	finish(&m);
}

#define GEMM_BIAS "x f32 128,64 in; w f32 64,128 in; b f32 128 in; " \
		  "y f32 128,128; z f32 128,128 out"
#define GEMM "y[i, j] = sum(k) x[i, k] * w[k, j]"

Test(fusion, gemm_then_bias_with_the_same_micro_tiles_is_thread_level)
{
	maps m = start(GEMM_BIAS, OPS(GEMM, "z[i, j] = y[i, j] + b[j]"));

	expect_dependence(&m, 0, 1, "{ S0[i, j, k] -> S1[i, j] : 0 <= i < 128 and "
			  "0 <= j < 128 and 0 <= k < 64 }");
	cr_expect_eq(width(&m, BLOCKS_3D("S0"), BLOCKS_2D("S1"), THREADS_3D("S0"),
			   THREADS_2D("S1")), SCHED_WIDTH_THREAD);
	finish(&m);
}

/* The bias's threads take the micro-tiles column-major: each block still
 * reads one GEMM block, but not what its own threads wrote. */
Test(fusion, gemm_then_bias_with_another_thread_mapping_is_block_level)
{
	maps m = start(GEMM_BIAS, OPS(GEMM, "z[i, j] = y[i, j] + b[j]"));

	cr_expect_eq(width(&m, BLOCKS_3D("S0"), BLOCKS_2D("S1"), THREADS_3D("S0"),
			   "{ S1[i, j] -> T[floor(i / 64), floor(j / 64), "
			   "floor((j mod 64) / 4), floor((i mod 64) / 4)] }"),
		     SCHED_WIDTH_BLOCK);
	finish(&m);
}

/* Consumer blocks of 32 rows under producer blocks of 64: each consumer
 * block still needs exactly one producer block. */
Test(fusion, smaller_consumer_blocks_are_block_level)
{
	maps m = start(GEMM_BIAS, OPS(GEMM, "z[i, j] = y[i, j] + b[j]"));

	cr_expect_eq(width(&m, BLOCKS_3D("S0"),
			   "{ S1[i, j] -> B[floor(i / 32), floor(j / 64)] }",
			   THREADS_3D("S0"),
			   "{ S1[i, j] -> T[floor(i / 32), floor(j / 64), "
			   "floor((i mod 32) / 4), floor((j mod 64) / 4)] }"),
		     SCHED_WIDTH_BLOCK);
	/* The other way round, a consumer block of 64 rows needs two. */
	cr_expect_eq(width(&m, "{ S0[i, j, k] -> B[floor(i / 32), floor(j / 64)] }",
			   BLOCKS_2D("S1"), NULL, NULL), SCHED_WIDTH_GLOBAL);
	finish(&m);
}

/* The second GEMM reads whole rows of the first's output: every producer
 * block of a row, whatever the threads. */
Test(fusion, gemm_then_gemm_on_its_output_is_global)
{
	maps m = start("x f32 128,128 in; w f32 128,128 in; v f32 128,128 in; "
		       "y f32 128,128; z f32 128,128 out",
		       OPS(GEMM, "z[i, j] = sum(k) y[i, k] * v[k, j]"));

	expect_dependence(&m, 0, 1, "{ S0[i, j, k] -> S1[i, m, j] : 0 <= i < 128 and "
			  "0 <= j < 128 and 0 <= k < 128 and 0 <= m < 128 }");
	cr_expect_eq(width(&m, BLOCKS_3D("S0"), BLOCKS_3D("S1"), THREADS_3D("S0"),
			   THREADS_3D("S1")), SCHED_WIDTH_GLOBAL);
	cr_expect_eq(width(&m, BLOCKS_3D("S0"), BLOCKS_3D("S1"), NULL, NULL),
		     SCHED_WIDTH_GLOBAL);
	finish(&m);
}

/* An op that does not read the producer's target depends on nothing. */
Test(fusion, no_read_no_dependence)
{
	maps m = start(CHAIN "; u f32 128,128 out",
		       OPS("y[i, j] = x[i, j] * 2", "z[i, j] = y[i, j] + 1",
			   "u[i, j] = x[j, i]"));
	isl_map *dep = sched_dependence(m.ctx, m.graph, 0, 2);

	cr_assert_not_null(dep);
	cr_expect_eq(isl_map_is_empty(dep), isl_bool_true);
	isl_map_free(dep);
	dep = sched_dependence(m.ctx, m.graph, 1, 0);
	cr_assert_not_null(dep);
	cr_expect_eq(isl_map_is_empty(dep), isl_bool_true, "the reverse is empty");
	isl_map_free(dep);
	finish(&m);
}

/* ---- groups of the examples ---- */

typedef struct fixture {
	sched_graph *graph;
	sched_group *group;
	sched_error err;
	int rc;
} fixture;

static sched_graph *example(const char *name)
{
	sched_graph *graph = NULL;
	sched_error err = {0};

	cr_assert_eq(load_example(name, &graph, &err), SCHED_OK, "%s: %s", name,
		     err.message);
	return graph;
}

#define INTS(...) ((const int[]){__VA_ARGS__})
#define TILE(...) ((const int64_t[]){__VA_ARGS__})

/* Analyses ops "ops" of example "name" under "tile"; the group (or the
 * error) stays in the fixture. */
static fixture analyse(const char *name, int nops, const int *ops,
		       const int64_t *tile, const int *lanes, int threads,
		       int64_t local_bytes)
{
	fixture f = {example(name), NULL, {0}, 0};
	sched_group_spec spec = {nops, ops, tile, lanes, threads, local_bytes};

	f.rc = sched_group_new(f.graph, &spec, &f.group, &f.err);
	cr_assert((f.rc == SCHED_OK) == (f.group != NULL),
		  "a group comes back exactly when the analysis succeeds");
	return f;
}

static void release(fixture *f)
{
	sched_group_free(f->group);
	sched_graph_free(f->graph);
}

static const sched_stage *stage(const fixture *f, int op)
{
	int s = sched_group_stage_of(f->group, op);

	cr_assert_geq(s, 0, "op %d has no stage", op);
	return &f->group->stages[s];
}

static void expect_legal(const fixture *f, const char *what)
{
	cr_assert_eq(f->rc, SCHED_OK, "%s: %s", what, f->err.message);
}

static void expect_refused(const fixture *f, const char *what, const char *part)
{
	cr_assert_eq(f->rc, SCHED_EMEANING, "%s: rc %d (%s)", what, f->rc,
		     f->rc ? f->err.message : "legal");
	cr_expect_eq(f->err.code, SCHED_EMEANING);
	cr_expect(strstr(f->err.message, part) != NULL, "%s: '%s' does not say '%s'",
		  what, f->err.message, part);
}

static void expect_bounds(const sched_stage *st, int d, const char *lo,
			  const char *hi, int64_t extent)
{
	cr_expect_str_eq(st->lo[d], lo, "op %d dim %d", st->op, d);
	cr_expect_str_eq(st->hi[d], hi, "op %d dim %d", st->op, d);
	cr_expect_eq(st->extent[d], extent, "op %d dim %d: extent %lld", st->op, d,
		     (long long)st->extent[d]);
}

static void expect_branch(const sched_branch *br, int root, int lane,
			  const int64_t *grid, int64_t blocks)
{
	cr_expect_eq(br->root, root);
	cr_expect_eq(br->lane, lane, "root %d: lane %d, want %d", root, br->lane, lane);
	for (int d = 0; d < br->rank; d++)
		cr_expect_eq(br->grid[d], grid[d], "root %d dim %d", root, d);
	cr_expect_eq(br->blocks, blocks);
}

/* The stages of one bert_qkv branch (GEMM, bias, head split) under the
 * tile {1, 8, 32} of q[12, 384, 64]: the GEMM and the bias keep 8 x 32
 * blocks of their [384, 768] outputs, column 64 h + 32 d-block. */
static void expect_qkv_branch(const fixture *f, int first_op, int branch)
{
	for (int op = first_op; op < first_op + 2; op++) {
		const sched_stage *st = stage(f, op);

		cr_expect_eq(st->branch, branch);
		cr_expect_eq(st->store, SCHED_STORE_LOCAL, "op %d", op);
		cr_expect_eq(st->width, SCHED_WIDTH_THREAD, "op %d", op);
		cr_expect_eq(st->rank, 2);
		expect_bounds(st, 0, "8 * b1", "8 * b1 + 8", 8);
		expect_bounds(st, 1, "64 * b0 + 32 * b2", "64 * b0 + 32 * b2 + 32", 32);
	}
	const sched_stage *root = stage(f, first_op + 2);

	cr_expect_eq(root->branch, branch);
	cr_expect_eq(root->store, SCHED_STORE_GLOBAL);
	cr_expect_eq(root->width, SCHED_WIDTH_THREAD);
	cr_expect_eq(root->rank, 3);
	expect_bounds(root, 0, "b0", "b0 + 1", 1);
	expect_bounds(root, 1, "8 * b1", "8 * b1 + 8", 8);
	expect_bounds(root, 2, "32 * b2", "32 * b2 + 32", 32);
	/* The bias reads the GEMM's buffer, so they cannot share space. */
	cr_expect_neq(stage(f, first_op)->offset, stage(f, first_op + 1)->offset);
}

#define QKV_GRID TILE(12, 48, 2)

Test(fusion, bert_qkv_one_branch)
{
	fixture f = analyse("bert_qkv", 3, INTS(0, 1, 2), TILE(1, 8, 32), NULL, 0,
			    LOCAL_48K);

	expect_legal(&f, "q's branch");
	cr_expect_eq(f.group->nstages, 3);
	cr_expect_eq(f.group->nbranches, 1);
	cr_expect_eq(f.group->nlanes, 1);
	expect_branch(&f.group->branches[0], 2, 0, QKV_GRID, 1152);
	for (int d = 0; d < 3; d++)
		cr_expect_eq(f.group->branches[0].tile[d], TILE(1, 8, 32)[d]);
	cr_expect_eq(f.group->blocks, 1152);
	cr_expect_eq(f.group->lane_blocks[0], 1152);
	expect_qkv_branch(&f, 0, 0);
	cr_expect_eq(f.group->local_floats, 2 * 8 * 32);
	for (int s = 0; s < 3; s++)
		cr_expect_not(f.group->stages[s].barrier, "no barrier on the cpu");
	release(&f);
}

/* With 256 threads a block's 8 x 32 elements are one per thread in every
 * stage, and the head split reads what the same thread wrote: no barrier. */
Test(fusion, bert_qkv_one_branch_needs_no_barrier_on_cuda)
{
	fixture f = analyse("bert_qkv", 3, INTS(0, 1, 2), TILE(1, 8, 32), NULL, 256,
			    LOCAL_48K);

	expect_legal(&f, "q's branch, 256 threads");
	expect_qkv_branch(&f, 0, 0);
	for (int s = 0; s < 3; s++)
		cr_expect_not(f.group->stages[s].barrier, "stage %d", s);
	release(&f);
}

#define ALL_QKV INTS(0, 1, 2, 3, 4, 5, 6, 7, 8)

/* Horizontal placement: the three branches side by side, a lane each. */
Test(fusion, bert_qkv_three_branches_side_by_side)
{
	fixture f = analyse("bert_qkv", 9, ALL_QKV, TILE(1, 8, 32), NULL, 0, LOCAL_48K);

	expect_legal(&f, "q, k and v");
	cr_expect_eq(f.group->nstages, 9);
	cr_expect_eq(f.group->nbranches, 3);
	cr_expect_eq(f.group->nlanes, 3);
	for (int b = 0; b < 3; b++) {
		expect_branch(&f.group->branches[b], 3 * b + 2, b, QKV_GRID, 1152);
		cr_expect_eq(f.group->lane_blocks[b], 1152);
		expect_qkv_branch(&f, 3 * b, b);
	}
	cr_expect_eq(f.group->blocks, 3 * 1152);
	cr_expect_eq(f.group->local_floats, 2 * 8 * 32, "each block runs one branch");
	release(&f);
}

/* Vertical placement: one lane, the branches one after another in each
 * block, so the blocks are one branch's and buffers are reused. */
Test(fusion, bert_qkv_three_branches_in_one_lane)
{
	fixture f = analyse("bert_qkv", 9, ALL_QKV, TILE(1, 8, 32), INTS(0, 0, 0), 0,
			    LOCAL_48K);

	expect_legal(&f, "q, k and v in one lane");
	cr_expect_eq(f.group->nbranches, 3);
	cr_expect_eq(f.group->nlanes, 1);
	for (int b = 0; b < 3; b++) {
		expect_branch(&f.group->branches[b], 3 * b + 2, 0, QKV_GRID, 1152);
		expect_qkv_branch(&f, 3 * b, b);
	}
	cr_expect_eq(f.group->lane_blocks[0], 1152);
	cr_expect_eq(f.group->blocks, 1152);
	cr_expect_eq(f.group->local_floats, 2 * 8 * 32,
		     "a branch's buffers are free once its root ran");
	release(&f);
}

/* Mixed: q and k share a lane, v has its own; lanes are renumbered by
 * first use. */
Test(fusion, bert_qkv_mixed_placement)
{
	fixture f = analyse("bert_qkv", 9, ALL_QKV, TILE(1, 8, 32), INTS(2, 2, 0), 0,
			    LOCAL_48K);

	expect_legal(&f, "q and k in a lane, v in another");
	cr_expect_eq(f.group->nlanes, 2);
	expect_branch(&f.group->branches[0], 2, 0, QKV_GRID, 1152);
	expect_branch(&f.group->branches[1], 5, 0, QKV_GRID, 1152);
	expect_branch(&f.group->branches[2], 8, 1, QKV_GRID, 1152);
	cr_expect_eq(f.group->lane_blocks[0], 1152);
	cr_expect_eq(f.group->lane_blocks[1], 1152);
	cr_expect_eq(f.group->blocks, 2 * 1152);
	release(&f);
}

Test(fusion, a_lane_outside_the_branches_is_refused)
{
	fixture f = analyse("bert_qkv", 9, ALL_QKV, TILE(1, 8, 32), INTS(0, 3, 0), 0,
			    LOCAL_48K);

	expect_refused(&f, "lane 3 of 3 branches", "branch 1's lane 3 is not in [0, 3)");
	release(&f);
}

/* Layer norm with whole rows per block: the mean reads the block's rows
 * of s through a block-level dependence (its threads reduce rows that
 * many threads wrote), and y must wait for var. */
Test(fusion, ln_residual_whole_rows)
{
	fixture f = analyse("ln_residual", 4, INTS(0, 1, 2, 3), TILE(8, 768), NULL, 256,
			    LOCAL_48K);
	const sched_stage *s, *mean, *var, *y;

	expect_legal(&f, "layer norm, tile 8 x 768");
	s = stage(&f, 0);
	mean = stage(&f, 1);
	var = stage(&f, 2);
	y = stage(&f, 3);
	cr_expect_eq(f.group->nbranches, 1);
	expect_branch(&f.group->branches[0], 3, 0, TILE(512, 1), 512);
	cr_expect_eq(f.group->blocks, 512);
	cr_expect_eq(s->store, SCHED_STORE_LOCAL);
	cr_expect_eq(mean->store, SCHED_STORE_LOCAL);
	cr_expect_eq(var->store, SCHED_STORE_LOCAL);
	cr_expect_eq(y->store, SCHED_STORE_GLOBAL);
	cr_expect_eq(s->width, SCHED_WIDTH_THREAD, "s reads only inputs");
	cr_expect_eq(mean->width, SCHED_WIDTH_BLOCK);
	cr_expect_eq(var->width, SCHED_WIDTH_BLOCK);
	cr_expect_eq(y->width, SCHED_WIDTH_BLOCK);
	cr_expect_not(s->barrier);
	cr_expect(mean->barrier, "the mean reads s, written by other threads");
	cr_expect_not(var->barrier, "the thread that wrote mean[i] reads it; s is "
		      "clean since the last barrier");
	cr_expect(y->barrier, "y reads var, written by other threads");
	cr_expect_eq(y->rank, 2);
	expect_bounds(s, 0, "8 * b0", "8 * b0 + 8", 8);
	expect_bounds(s, 1, "0", "768", 768);
	expect_bounds(mean, 0, "8 * b0", "8 * b0 + 8", 8);
	expect_bounds(y, 1, "0", "768", 768);
	cr_expect_eq(f.group->local_floats, 8 * 768 + 8 + 8);
	release(&f);
}

/* On the cpu a block is one thread: every dependence is thread-level and
 * no stage waits. */
Test(fusion, ln_residual_on_the_cpu_is_thread_level)
{
	fixture f = analyse("ln_residual", 4, INTS(0, 1, 2, 3), TILE(8, 768), NULL, 0,
			    LOCAL_48K);

	expect_legal(&f, "layer norm on the cpu");
	for (int s = 0; s < f.group->nstages; s++) {
		cr_expect_eq(f.group->stages[s].width, SCHED_WIDTH_THREAD, "stage %d", s);
		cr_expect_not(f.group->stages[s].barrier, "stage %d", s);
	}
	release(&f);
}

/* Rows cut in six blocks: every block needs the whole row's mean and
 * variance, so var (and mean) would be computed by six blocks each. */
Test(fusion, ln_residual_with_rows_cut_is_refused)
{
	fixture f = analyse("ln_residual", 4, INTS(0, 1, 2, 3), TILE(8, 128), NULL, 256,
			    LOCAL_48K);

	expect_refused(&f, "layer norm, tile 8 x 128", "'var'");
	cr_expect(strstr(f.err.message, "overlap") != NULL, "%s", f.err.message);
	release(&f);
}

#define SOFTMAX INTS(0, 1, 2, 3, 4)

Test(fusion, softmax_whole_rows)
{
	fixture f = analyse("softmax_scores", 5, SOFTMAX, TILE(4, 384), NULL, 256,
			    LOCAL_48K);
	static const enum sched_width widths[] = {
		SCHED_WIDTH_THREAD, SCHED_WIDTH_BLOCK, SCHED_WIDTH_BLOCK,
		SCHED_WIDTH_BLOCK, SCHED_WIDTH_BLOCK,
	};

	expect_legal(&f, "softmax, tile 4 x 384");
	expect_branch(&f.group->branches[0], 4, 0, TILE(1152, 1), 1152);
	for (int op = 0; op < 5; op++) {
		const sched_stage *st = stage(&f, op);

		cr_expect_eq(st->store, op == 4 ? SCHED_STORE_GLOBAL : SCHED_STORE_LOCAL,
			     "op %d", op);
		cr_expect_eq(st->width, widths[op], "op %d: %s", op,
			     sched_width_name(st->width));
		/* The row max and sum read rows other threads wrote; e and y
		 * read them back; scaled reads only its input. */
		cr_expect_eq(st->barrier, op > 0, "op %d", op);
		expect_bounds(st, 0, "4 * b0", "4 * b0 + 4", 4);
	}
	expect_bounds(stage(&f, 2), 1, "0", "384", 384);
	/* scaled and e (4 x 384) never live at once with m and z (4 each):
	 * z reuses scaled's space once e has read it. */
	cr_expect_eq(f.group->local_floats, 4 * 384 + 4 + 4 * 384);
	cr_expect_eq(stage(&f, 3)->offset, stage(&f, 0)->offset);
	release(&f);
}

/* 8 KiB hold 2,048 floats, not the 3,076 above: scaled, a cheap
 * elementwise member, is recomputed at each read instead of kept. */
Test(fusion, softmax_short_of_memory_recomputes_scaled)
{
	fixture f = analyse("softmax_scores", 5, SOFTMAX, TILE(4, 384), NULL, 256,
			    8 * 1024);

	expect_legal(&f, "softmax in 8 KiB");
	cr_expect_eq(stage(&f, 0)->store, SCHED_STORE_INLINE);
	cr_expect_eq(stage(&f, 1)->store, SCHED_STORE_LOCAL);
	cr_expect_eq(stage(&f, 2)->store, SCHED_STORE_LOCAL);
	cr_expect_eq(stage(&f, 3)->store, SCHED_STORE_LOCAL);
	cr_expect_eq(stage(&f, 4)->store, SCHED_STORE_GLOBAL);
	cr_expect_eq(f.group->local_floats, 4 * 384 + 4);
	cr_expect_leq(f.group->local_floats * 4, 8 * 1024);
	cr_expect_not(stage(&f, 1)->barrier, "m reads P through scaled, no buffer");
	release(&f);
}

/* 4 KiB: e too is recomputed; only the row max and sum stay. */
Test(fusion, softmax_in_4k_recomputes_scaled_and_e)
{
	fixture f = analyse("softmax_scores", 5, SOFTMAX, TILE(4, 384), NULL, 256,
			    4 * 1024);

	expect_legal(&f, "softmax in 4 KiB");
	cr_expect_eq(stage(&f, 0)->store, SCHED_STORE_INLINE);
	cr_expect_eq(stage(&f, 2)->store, SCHED_STORE_INLINE);
	cr_expect_eq(stage(&f, 1)->store, SCHED_STORE_LOCAL);
	cr_expect_eq(stage(&f, 3)->store, SCHED_STORE_LOCAL);
	cr_expect_eq(f.group->local_floats, 4 + 4);
	cr_expect_neq(stage(&f, 1)->offset, stage(&f, 3)->offset,
		      "y reads m (through e) after z is written");
	cr_expect(stage(&f, 3)->barrier, "z reads m, through e");
	cr_expect(stage(&f, 4)->barrier, "y reads z");
	release(&f);
}

/* 16 bytes: m and z, reductions, cannot be recomputed. */
Test(fusion, softmax_beyond_any_recompute_is_refused)
{
	fixture f = analyse("softmax_scores", 5, SOFTMAX, TILE(4, 384), NULL, 256, 16);

	expect_refused(&f, "softmax in 16 bytes", "the group needs 32 bytes of "
		       "block-local memory, more than the 16 a block may use");
	release(&f);
}

/* The second convolution reads a1 with a halo: neighbouring blocks need
 * the same rows of a1. The first conv and its relu fuse. */
Test(fusion, conv_pair_second_conv_needs_a_halo)
{
	fixture f = analyse("conv_pair", 2, INTS(1, 2), TILE(1, 8, 8, 8), NULL, 0,
			    LOCAL_48K);

	expect_refused(&f, "a1 then the second conv", "'a1'");
	cr_expect(strstr(f.err.message, "global dependence") != NULL, "%s",
		  f.err.message);
	release(&f);

	f = analyse("conv_pair", 2, INTS(0, 1), TILE(1, 8, 8, 8), NULL, 0, LOCAL_48K);
	expect_legal(&f, "the first conv and its relu");
	expect_branch(&f.group->branches[0], 1, 0, TILE(1, 8, 7, 7), 392);
	cr_expect_eq(stage(&f, 0)->store, SCHED_STORE_LOCAL);
	cr_expect_eq(stage(&f, 1)->store, SCHED_STORE_GLOBAL);
	for (int d = 0; d < 4; d++)
		cr_expect_eq(stage(&f, 0)->extent[d], TILE(1, 8, 8, 8)[d]);
	release(&f);
}

/* The LSTM's gate math: c_new is an output and read by h_new, so it is
 * kept both in the block and in global memory. */
Test(fusion, lstm_cell_gate_math)
{
	fixture f = analyse("lstm_cell", 6, INTS(3, 4, 5, 6, 7, 8), TILE(1, 32), NULL,
			    0, LOCAL_48K);

	expect_legal(&f, "lstm gates");
	cr_expect_eq(f.group->nstages, 6);
	cr_expect_eq(f.group->nbranches, 1);
	expect_branch(&f.group->branches[0], 8, 0, TILE(1, 8), 8);
	for (int op = 3; op <= 6; op++) {
		cr_expect_eq(stage(&f, op)->store, SCHED_STORE_LOCAL, "op %d", op);
		expect_bounds(stage(&f, op), 1, "32 * b1", "32 * b1 + 32", 32);
	}
	cr_expect_eq(stage(&f, 7)->store, SCHED_STORE_BOTH);
	cr_expect_eq(stage(&f, 8)->store, SCHED_STORE_GLOBAL);
	cr_expect_eq(f.group->nstages - 1, sched_group_stage_of(f.group, 8),
		     "the root runs last");
	cr_expect_eq(f.group->local_floats, 5 * 32);
	release(&f);
}

/* gates is read by the gate ops left outside, whole, but the group's
 * blocks compute only the quarter ig reads. */
Test(fusion, lstm_cell_partial_intermediate_read_outside_is_refused)
{
	fixture f = analyse("lstm_cell", 3, INTS(2, 3, 7), TILE(1, 32), NULL, 0,
			    LOCAL_48K);

	expect_refused(&f, "gates, ig, c_new", "'gates' is needed whole");
	release(&f);
}

/* gates feeds ig and fg, both in the group and neither read there: one
 * connected part with two roots. */
Test(fusion, a_part_with_two_roots_is_refused)
{
	fixture f = analyse("lstm_cell", 3, INTS(2, 3, 4), TILE(1, 32), NULL, 0,
			    LOCAL_48K);

	expect_refused(&f, "gates, ig, fg", "'ig' and 'fg' both end one connected "
		       "part of the group: a part needs one root");
	release(&f);
}

Test(fusion, malformed_specs_are_refused)
{
	fixture f = analyse("bert_qkv", 2, INTS(0, 0), TILE(1, 8, 32), NULL, 0, LOCAL_48K);

	expect_refused(&f, "an op twice", "op 0 is twice in one group");
	release(&f);
	f = analyse("bert_qkv", 2, INTS(0, 9), TILE(1, 8, 32), NULL, 0, LOCAL_48K);
	expect_refused(&f, "op 9 of 9", "op 9 is not in the graph");
	release(&f);
	f = analyse("bert_qkv", 0, INTS(0), TILE(1, 8, 32), NULL, 0, LOCAL_48K);
	expect_refused(&f, "no ops", "a fused group has 1 to 16 ops, not 0");
	release(&f);
}

/* ---- the analyses a graph remembers (sched_group_recall) ---- */

static void expect_same_group(const sched_group *a, const sched_group *b)
{
	cr_assert_eq(a->nstages, b->nstages);
	cr_expect_eq(a->blocks, b->blocks);
	cr_expect_eq(a->local_floats, b->local_floats);
	for (int s = 0; s < a->nstages; s++) {
		cr_expect_eq(a->stages[s].op, b->stages[s].op);
		cr_expect_eq(a->stages[s].store, b->stages[s].store);
		for (int d = 0; d < a->stages[s].rank; d++)
			cr_expect_str_eq(a->stages[s].lo[d], b->stages[s].lo[d]);
	}
}

/* A key recalls what was analysed under it, whatever spec comes with it
 * later: the legal group, or the refusal and its reason; past 512 keys
 * the oldest is analysed afresh; a NULL key is never remembered. */
Test(fusion, a_graph_recalls_its_analyses_by_key)
{
	sched_graph *g = example("ln_residual");
	sched_group_spec legal = {4, INTS(0, 1, 2, 3), TILE(8, 768), NULL, 256, LOCAL_48K};
	sched_group_spec refused = {4, INTS(0, 1, 2, 3), TILE(8, 128), NULL, 256,
				    LOCAL_48K};
	sched_group *fresh = NULL, *group = NULL;
	sched_error err = {0}, why = {0};
	char key[32];

	cr_assert_eq(sched_group_new(g, &legal, &fresh, &err), SCHED_OK, "%s", err.message);
	cr_assert_eq(sched_group_recall(g, "legal", &legal, &group, &err), SCHED_OK);
	expect_same_group(group, fresh);
	sched_group_free(group);
	cr_assert_eq(sched_group_recall(g, "legal", &refused, &group, &err), SCHED_OK,
		     "the key's analysis is recalled, not made again: %s", err.message);
	expect_same_group(group, fresh);
	sched_group_free(group);

	cr_expect_eq(sched_group_recall(g, "refused", &refused, &group, &why),
		     SCHED_EMEANING);
	cr_expect_null(group);
	cr_expect_eq(sched_group_recall(g, "refused", &legal, &group, &err),
		     SCHED_EMEANING, "a refusal is recalled too");
	cr_expect_str_eq(err.message, why.message);
	cr_expect_null(group);

	cr_expect_eq(sched_group_recall(g, NULL, &refused, &group, &err), SCHED_EMEANING);
	cr_expect_eq(sched_group_recall(g, NULL, &legal, &group, &err), SCHED_OK);
	sched_group_free(group);

	for (int i = 0; i < 512; i++) {
		snprintf(key, sizeof(key), "filler %d", i);
		cr_assert_eq(sched_group_recall(g, key, &refused, &group, &err),
			     SCHED_EMEANING);
	}
	cr_expect_eq(sched_group_recall(g, "legal", &refused, &group, &err),
		     SCHED_EMEANING, "the oldest key was forgotten and analysed afresh");
	sched_group_free(fresh);
	sched_graph_free(g);
}
