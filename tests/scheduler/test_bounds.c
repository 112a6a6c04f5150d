/*
 * test_bounds.c: every access stays in its tensor, checked with isl, and
 * selects guard the accesses they protect.
 */
#include <criterion/criterion.h>

#include "graph_builder.h"
#include "scheduler.h"

static int check(const char *tensors, const char *const *ops, sched_error *err)
{
	sched_graph *graph = NULL;
	int rc = load_graph(tensors, ops, &graph, err);

	sched_graph_free(graph);
	return rc;
}

#define expect_ok(tensors, ops)                                               \
	do {                                                                  \
		sched_error err_ = {0};                                       \
		cr_expect_eq(check(tensors, ops, &err_), SCHED_OK, "%s",     \
			     err_.message);                                   \
	} while (0)

#define expect_out(tensors, ops, want)                                     \
	do {                                                                  \
		sched_error err_ = {0};                                       \
		cr_expect_eq(check(tensors, ops, &err_), SCHED_EBOUNDS, "%s",\
			     err_.message);                                   \
		cr_expect_str_eq(err_.message, want);                      \
	} while (0)

#define HEADS "xq f16 384,768 in; bq f16 768 in"

Test(bounds, head_split_past_the_end)
{
	expect_ok(HEADS "; q f16 12,384,64 out",
		  OPS("q[h, s, d] = xq[s, h * 64 + d] + bq[h * 64 + d]"));
	expect_out(HEADS "; q f16 13,384,64 out",
		   OPS("q[h, s, d] = xq[s, h * 64 + d] + bq[h * 64 + d]"),
		   "op 0, column 20: index 'h * 64 + d' of 'xq' reaches 831, past its size 768");
}

Test(bounds, below_zero)
{
	expect_out("x f32 8 in; y f32 8 out", OPS("y[i] = x[i - 1]"),
		   "op 0, column 10: index 'i - 1' of 'x' reaches -1, below 0");
}

#define CONV "x f32 1,2,6,6 in; w f32 3,2,3,3 in; y f32 1,3,6,6 out"

Test(bounds, padded_conv_needs_its_select)
{
	expect_ok(CONV, OPS("y[n, k, p, q] = sum(c, r < 3, s < 3) "
			    "select(p + r >= 1 && p + r <= 6 && q + s >= 1 && q + s <= 6, "
			    "x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]"));
	expect_out(CONV, OPS("y[n, k, p, q] = sum(c, r < 3, s < 3) "
			     "x[n, c, p + r - 1, q + s - 1] * w[k, c, r, s]"),
		   "op 0, column 46: index 'p + r - 1' of 'x' reaches 6, past its size 6");
}

Test(bounds, a_guard_too_weak_is_refused)
{
	expect_out(CONV, OPS("y[n, k, p, q] = sum(c, r < 3, s < 3) "
			     "select(p + r >= 1 && q + s >= 1, "
			     "x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]"),
		   "op 0, column 79: index 'p + r - 1' of 'x' reaches 6, past its size 6");
}

Test(bounds, else_branch_and_negation_guard)
{
	expect_ok("x f32 8 in; y f32 8 out", OPS("y[i] = select(i == 0, 0, x[i - 1])"));
	expect_ok("x f32 8 in; y f32 8 out", OPS("y[i] = select(!(i < 1), x[i - 1], 0)"));
	expect_ok("x f32 8 in; y f32 8 out",
		  OPS("y[i] = select(i < 1 || i > 6, 0, x[i - 1] + x[i + 1])"));
	expect_ok("x f32 8 in; y f32 8 out", OPS("y[i] = select(i != 0, x[i - 1], 0)"));
	expect_out("x f32 8 in; y f32 8 out", OPS("y[i] = select(i == 0, x[i - 1], 0)"),
		   "op 0, column 25: index 'i - 1' of 'x' reaches -1, below 0");
}

Test(bounds, value_dependent_guard_protects_nothing)
{
	expect_ok("a f32 8 in; x f32 8 in; y f32 8 out",
		  OPS("y[i] = select(a[i] > 0 && i >= 1, x[i - 1], 0)"));
	expect_out("a f32 8 in; x f32 8 in; y f32 8 out",
		   OPS("y[i] = select(a[i] > 0 || i >= 1, x[i - 1], 0)"),
		   "op 0, column 37: index 'i - 1' of 'x' reaches -1, below 0");
}

Test(bounds, floor_division_and_remainder)
{
	expect_ok("x f32 4 in; y f32 8 out", OPS("y[i] = x[i / 2] + x[i % 4]"));
	expect_out("x f32 3 in; y f32 8 out", OPS("y[i] = x[i / 2]"),
		   "op 0, column 10: index 'i / 2' of 'x' reaches 3, past its size 3");
	expect_out("x f32 3 in; y f32 8 out", OPS("y[i] = x[(i + 3) % 4]"),
		   "op 0, column 10: index '(i + 3) % 4' of 'x' reaches 3, past its size 3");
}

Test(bounds, reduction_ranges_count)
{
	expect_out("x f32 8 in; y f32 - out", OPS("y[] = sum(k in 2:9) x[k]"),
		   "op 0, column 23: index 'k' of 'x' reaches 8, past its size 8");
}

static void expect_equal_union(isl_union_map *got, const char *want_text)
{
	isl_union_map *want = isl_union_map_read_from_str(
		isl_union_map_get_ctx(got), want_text);

	cr_expect_eq(isl_union_map_is_equal(got, want), isl_bool_true,
		     "want %s", want_text);
	isl_union_map_free(want);
	isl_union_map_free(got);
}

Test(isl_forms, domain_write_and_reads_of_an_op)
{
	isl_ctx *ctx = isl_ctx_alloc();
	sched_graph *g = NULL;
	sched_error err = {0};
	isl_set *domain, *want;

	cr_assert_eq(load_graph(HEADS "; q f16 12,384,64 out",
				OPS("q[h, s, d] = xq[s, h * 64 + d] + bq[h * 64 + d]"),
				&g, &err), SCHED_OK, "%s", err.message);
	domain = sched_op_domain(ctx, g, 0);
	want = isl_set_read_from_str(ctx, "{ S0[h, s, d] : 0 <= h < 12 and "
				     "0 <= s < 384 and 0 <= d < 64 }");
	cr_expect_eq(isl_set_is_equal(domain, want), isl_bool_true);
	expect_equal_union(isl_union_map_from_map(sched_op_write(ctx, g, 0)),
			   "{ S0[h, s, d] -> q[h, s, d] }");
	expect_equal_union(sched_op_reads(ctx, g, 0),
			   "{ S0[h, s, d] -> xq[s, 64h + d]; S0[h, s, d] -> bq[64h + d] }");
	isl_set_free(want);
	isl_set_free(domain);
	sched_graph_free(g);
	isl_ctx_free(ctx);
}
