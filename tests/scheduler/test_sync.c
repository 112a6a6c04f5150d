/*
 * test_sync.c: sync policies read off tile dependences, and the proof
 * that refuses a policy that would hang or race.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "graph_builder.h"

static sched_graph *graph_of(const char *tensors, const char *const *ops)
{
	sched_graph *g = NULL;
	sched_error err = {0};

	cr_assert_eq(load_graph(tensors, ops, &g, &err), SCHED_OK, "%s", err.message);
	return g;
}

/* Tiles of "tile" over tensor "name" seen in its own shape. */
static sched_tiling tiles_of(const sched_graph *g, const char *name, const int64_t *tile)
{
	int t = sched_tensor_find(g, name);
	sched_tiling tiling = {.tensor = t, .rank = sched_tensor_rank(g, t)};

	for (int d = 0; d < tiling.rank; d++) {
		tiling.view[d] = sched_tensor_shape(g, t)[d];
		tiling.tile[d] = tile[d];
	}
	return tiling;
}

/* A kernel of the single op "*op" (writing "written", cut in "tile_c")
 * after the kernel writing "produced" (cut in "tile_p"). */
static sched_sync_pair pair_of(const sched_graph *g, const char *produced,
			       const int64_t *tile_p, const int *op, const char *written,
			       const int64_t *tile_c)
{
	return (sched_sync_pair){
		.producer = tiles_of(g, produced, tile_p), .nconsumer_ops = 1,
		.consumer_ops = op, .consumer = tiles_of(g, written, tile_c),
	};
}

/* The sync of that pair. */
static sched_sync *sync_of(const sched_graph *g, const char *produced,
			   const int64_t *tile_p, int op, const char *written,
			   const int64_t *tile_c)
{
	sched_sync *sync = NULL;
	sched_error err = {0};
	sched_sync_pair pair = pair_of(g, produced, tile_p, &op, written, tile_c);

	cr_assert_eq(sched_sync_new(g, &pair, &sync, &err), SCHED_OK, "%s", err.message);
	return sync;
}

static void expect_proved(const sched_sync *sync)
{
	for (int i = 0; i < sync->npolicies; i++) {
		sched_error err = {0};

		cr_expect_eq(sched_sync_check(sync, &sync->policies[i], &err), SCHED_OK,
			     "%s: %s", sched_sync_kind_name(sync->policies[i].kind),
			     err.message);
	}
}

static bool offers(const sched_sync *sync, enum sched_sync_kind kind)
{
	return sched_sync_policy_of(sync, kind) != NULL;
}

#define ELEMENTWISE "x f32 64,64 in; a f32 64,64; b f32 64,64 out", \
	OPS("a[i, j] = x[i, j] * 2", "b[i, j] = a[i, j] + 1")

#define GEMM_GEMM "x f32 128,64 in; w1 f32 64,128 in; w2 f32 128,96 in; " \
	"h f32 128,128; y f32 128,96 out", \
	OPS("h[i, j] = sum(c) x[i, c] * w1[c, j]", "y[i, j] = sum(c) h[i, c] * w2[c, j]")

/* Q, K and V are slices of one product; the consumer reads all three. */
#define QKV "x f32 32,16 in; w f32 16,192 in; qkv f32 32,192; o f32 32,64 out", \
	OPS("qkv[s, j] = sum(c) x[s, c] * w[c, j]", \
	    "o[s, d] = qkv[s, d] * qkv[s, 64 + d] + qkv[s, 128 + d]")

#define CONV_CONV "x f32 1,16,8,8 in; w1 f32 16,16,3,3 in; w2 f32 16,16,3,3 in; " \
	"y1 f32 1,16,8,8; y2 f32 1,16,8,8 out", \
	OPS("y1[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 8 && " \
	    "q + s >= 1 && q + s <= 8, x[n, c, p + r - 1, q + s - 1], 0) * w1[k, c, r, s]", \
	    "y2[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 8 && " \
	    "q + s >= 1 && q + s <= 8, y1[n, c, p + r - 1, q + s - 1], 0) * w2[k, c, r, s]")

/* Matching tiles of an elementwise chain: each consumer tile needs the
 * same producer tile, so only TileSync, a semaphore per tile, target 1. */
Test(sync, identity_gives_tile_sync)
{
	sched_graph *g = graph_of(ELEMENTWISE);
	sched_sync *sync = sync_of(g, "a", (int64_t[]){16, 32}, 1, "b", (int64_t[]){16, 32});
	const sched_sync_policy *tile = sched_sync_policy_of(sync, SCHED_SYNC_TILE);

	cr_assert(tile);
	cr_expect_eq(sync->npolicies, 1, "a row would make tiles wait for others");
	cr_expect_eq(tile->semaphores, 8);
	cr_expect_eq(tile->target, 1);
	cr_expect(strstr(tile->wait, "KSYNC_WAIT((c1) + (c0) * 2);"), "%s", tile->wait);
	expect_proved(sync);
	sched_sync_free(sync);
	sched_graph_free(g);
}

/* A GEMM after a GEMM: a consumer tile reads whole rows of the first
 * product, so RowSync: a semaphore per row of tiles, target the tiles
 * of a row. */
Test(sync, gemm_then_gemm_gives_row_sync)
{
	sched_graph *g = graph_of(GEMM_GEMM);
	sched_sync *sync = sync_of(g, "h", (int64_t[]){32, 32}, 1, "y", (int64_t[]){32, 32});
	const sched_sync_policy *row = sched_sync_policy_of(sync, SCHED_SYNC_ROW);
	const sched_sync_policy *tile = sched_sync_policy_of(sync, SCHED_SYNC_TILE);

	cr_assert(row && tile);
	cr_expect_eq(row->semaphores, 4);
	cr_expect_eq(row->target, 4, "four tiles make a row of h");
	cr_expect(strstr(row->wait, "KSYNC_WAIT((c0));"), "%s", row->wait);
	cr_expect(strstr(tile->wait, "for ("), "TileSync waits on each tile of the row: %s",
		  tile->wait);
	expect_proved(sync);
	sched_sync_free(sync);
	sched_graph_free(g);
}

/* Tiles of 32 columns: consumer tile (s, d) reads producer tiles d,
 * d + 2 and d + 4 of its row, so StridedSync with stride 2, target 3. */
Test(sync, qkv_slices_give_strided_sync)
{
	sched_graph *g = graph_of(QKV);
	sched_sync *sync = sync_of(g, "qkv", (int64_t[]){16, 32}, 1, "o", (int64_t[]){16, 32});
	const sched_sync_policy *strided = sched_sync_policy_of(sync, SCHED_SYNC_STRIDED);

	cr_assert(strided);
	cr_expect_eq(strided->stride, 2);
	cr_expect_eq(strided->target, 3);
	cr_expect_eq(strided->semaphores, 4);
	cr_expect(!offers(sync, SCHED_SYNC_ROW), "a row holds tiles no consumer tile reads");
	expect_proved(sync);
	sched_sync_free(sync);
	sched_graph_free(g);
}

/* A convolution after a convolution: every output channel reads every
 * input channel of a 3x3 window, so Conv2DTileSync groups the channel
 * tiles of each spatial tile (target 2) and waits on the window's. */
Test(sync, conv_then_conv_gives_conv2d_sync)
{
	sched_graph *g = graph_of(CONV_CONV);
	sched_sync *sync = sync_of(g, "y1", (int64_t[]){1, 8, 2, 8}, 1, "y2",
				   (int64_t[]){1, 8, 2, 8});
	const sched_sync_policy *conv = sched_sync_policy_of(sync, SCHED_SYNC_CONV2D);

	cr_assert(conv);
	cr_expect_eq(conv->target, 2);
	cr_expect_eq(conv->semaphores, 4);
	cr_expect(strstr(conv->wait, "for (int s1 = max(0, c2 - 1); s1 <= min(3, c2 + 1); s1 += 1)"),
		  "rows of 2 under a 3x3 window: the tile above, its own and the one below: %s",
		  conv->wait);
	cr_expect(offers(sync, SCHED_SYNC_TILE));
	expect_proved(sync);
	sched_sync_free(sync);
	sched_graph_free(g);
}

/* Ops fused in the consumer: the footprint follows the chain. */
Test(sync, footprints_follow_fused_members)
{
	sched_graph *g = graph_of("x f32 64,32 in; w f32 32,64 in; h f32 64,64; "
				  "a f32 64,64; b f32 64,64 out",
				  OPS("h[i, j] = sum(c) x[i, c] * w[c, j]",
				      "a[i, j] = h[j, i] * 2", "b[i, j] = a[i, j] + 1"));
	int ops[] = {2, 1};
	sched_sync_pair pair = {
		.producer = tiles_of(g, "h", (int64_t[]){16, 64}), .nconsumer_ops = 2,
		.consumer_ops = ops, .consumer = tiles_of(g, "b", (int64_t[]){64, 16}),
	};
	sched_sync *sync = NULL;
	sched_error err = {0};

	cr_assert_eq(sched_sync_new(g, &pair, &sync, &err), SCHED_OK, "%s", err.message);
	cr_expect(strstr(sched_sync_policy_of(sync, SCHED_SYNC_TILE)->wait, "KSYNC_WAIT((c1));"),
		  "column tile c1 of b reads row tile c1 of h, through the transpose: %s",
		  sched_sync_policy_of(sync, SCHED_SYNC_TILE)->wait);
	sched_sync_free(sync);
	sched_graph_free(g);
}

Test(sync, a_consumer_that_does_not_read_is_refused)
{
	sched_graph *g = graph_of(ELEMENTWISE);
	int op = 0;
	sched_sync_pair pair = {
		.producer = tiles_of(g, "b", (int64_t[]){16, 16}), .nconsumer_ops = 1,
		.consumer_ops = &op, .consumer = tiles_of(g, "a", (int64_t[]){16, 16}),
	};
	sched_sync *sync = NULL;
	sched_error err = {0};

	cr_expect_eq(sched_sync_new(g, &pair, &sync, &err), SCHED_EMEANING);
	cr_expect(strstr(err.message, "does not read 'b'"), "%s", err.message);
	cr_expect_null(sync);
	sched_graph_free(g);
}

/* A planted target one too high never ends; one too low ends early. */
Test(sync, wrong_targets_are_refused)
{
	sched_graph *g = graph_of(GEMM_GEMM);
	sched_sync *sync = sync_of(g, "h", (int64_t[]){32, 32}, 1, "y", (int64_t[]){32, 32});
	sched_sync_policy planted = *sched_sync_policy_of(sync, SCHED_SYNC_ROW);
	sched_error err = {0};

	planted.target = 5;
	cr_expect_eq(sched_sync_check(sync, &planted, &err), SCHED_EMEANING);
	cr_expect(strstr(err.message, "receives 4 posts but its waits count to 5: they would hang"),
		  "%s", err.message);
	planted.target = 3;
	cr_expect_eq(sched_sync_check(sync, &planted, &err), SCHED_EMEANING);
	cr_expect(strstr(err.message, "end early (a race)"), "%s", err.message);
	sched_sync_free(sync);
	sched_graph_free(g);
}

/* Waits that skip a tile the consumer reads are a race. */
Test(sync, waits_that_miss_a_needed_tile_are_refused)
{
	sched_graph *g = graph_of(GEMM_GEMM);
	sched_sync *sync = sync_of(g, "h", (int64_t[]){32, 32}, 1, "y", (int64_t[]){32, 32});
	sched_sync_policy planted = *sched_sync_policy_of(sync, SCHED_SYNC_TILE);
	sched_error err = {0};

	planted.waits = isl_map_read_from_str(sync->ctx,
		"{ Tc[c0, c1] -> Sem[c0, c1] : 0 <= c0 < 4 and 0 <= c1 < 3 }");
	cr_expect_eq(sched_sync_check(sync, &planted, &err), SCHED_EMEANING);
	cr_expect(strstr(err.message, "does not wait for (a race)"), "%s", err.message);
	isl_map_free(planted.waits);
	sched_sync_free(sync);
	sched_graph_free(g);
}

static void expect_same_policy(const sched_sync_policy *a, const sched_sync_policy *b)
{
	const char *kind = sched_sync_kind_name(a->kind);

	cr_expect_eq(a->kind, b->kind, "%s", kind);
	cr_expect_eq(a->stride, b->stride, "%s", kind);
	cr_expect_eq(a->semaphores, b->semaphores, "%s", kind);
	cr_expect_eq(a->target, b->target, "%s", kind);
	cr_expect_str_eq(a->post, b->post, "%s", kind);
	cr_expect_str_eq(a->wait, b->wait, "%s", kind);
}

/* Asked for each kind, sched_sync_new_for offers that one alone, the
 * same as the full analysis's, when it fits, and else all the full
 * analysis offers, in its order. */
static void expect_wanted_policies(const sched_graph *g, sched_sync_pair pair)
{
	sched_sync *full = NULL;
	sched_error err = {0};

	cr_assert_eq(sched_sync_new(g, &pair, &full, &err), SCHED_OK, "%s", err.message);
	for (int want = 0; want < SCHED_SYNC_KINDS; want++) {
		const sched_sync_policy *offered = sched_sync_policy_of(full, want);
		sched_sync *part = NULL;

		cr_assert_eq(sched_sync_new_for(g, &pair, want, &part, &err), SCHED_OK,
			     "%s", err.message);
		cr_expect_eq(part->npolicies, offered ? 1 : full->npolicies,
			     "asked for %s", sched_sync_kind_name(want));
		for (int i = 0; i < part->npolicies && i < full->npolicies; i++)
			expect_same_policy(&part->policies[i],
					   offered ? offered : &full->policies[i]);
		expect_proved(part);
		sched_sync_free(part);
	}
	sched_sync_free(full);
}

Test(sync, a_wanted_policy_is_analysed_alone_when_it_fits)
{
	sched_graph *gemm = graph_of(GEMM_GEMM), *qkv = graph_of(QKV);
	sched_graph *conv = graph_of(CONV_CONV);
	int second = 1;

	expect_wanted_policies(gemm, pair_of(gemm, "h", (int64_t[]){32, 32}, &second, "y",
					     (int64_t[]){32, 32}));
	expect_wanted_policies(qkv, pair_of(qkv, "qkv", (int64_t[]){16, 32}, &second, "o",
					    (int64_t[]){16, 32}));
	expect_wanted_policies(conv, pair_of(conv, "y1", (int64_t[]){1, 8, 2, 8}, &second,
					     "y2", (int64_t[]){1, 8, 2, 8}));
	sched_graph_free(gemm);
	sched_graph_free(qkv);
	sched_graph_free(conv);
}
