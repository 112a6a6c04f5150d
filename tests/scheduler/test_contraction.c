/*
 * test_contraction.c: matrix products read off the access relations.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "graph_builder.h"

static sched_graph *graph_of(const char *tensors, const char *const *ops)
{
	sched_graph *g = NULL;
	sched_error err = {0};

	cr_assert_eq(load_graph(tensors, ops, &g, &err), SCHED_OK, "%s", err.message);
	return g;
}

/* Op 0 of the graph as a contraction; false if it is none. */
static bool contraction_of(const char *tensors, const char *op, sched_contraction *c)
{
	sched_graph *g = graph_of(tensors, OPS(op));
	bool is = sched_op_contraction(g, 0, c);

	sched_graph_free(g);
	return is;
}

Test(contraction, a_matrix_product_has_its_strides)
{
	sched_contraction c;

	cr_assert(contraction_of("a f32 6,5 in; b f32 5,7 in; y f32 6,7 out",
				 "y[i, j] = sum(k) a[i, k] * b[k, j]", &c));
	cr_expect_eq(c.m, 6);
	cr_expect_eq(c.n, 7);
	cr_expect_eq(c.k, 5);
	cr_expect(c.a_m == 5 && c.a_k == 1 && c.b_k == 7 && c.b_n == 1);
	cr_expect(c.c_m == 7 && c.c_n == 1);
	cr_expect(c.a0 == 0 && c.b0 == 0 && c.c0 == 0);
}

/* The names do not matter, nor the order of the factors. */
Test(contraction, factors_in_either_order_and_any_names)
{
	sched_contraction c;

	cr_assert(contraction_of("w f32 5,7 in; x f32 6,5 in; out f32 6,7 out",
				 "out[p, q] = sum(z) w[z, q] * x[p, z]", &c));
	cr_expect_eq(c.m, 6);
	cr_expect_eq(c.n, 7);
	cr_expect_eq(c.c_n, 1, "n is the dim along which the output is contiguous");
	cr_expect_eq(c.a_m, 5);
	cr_expect_eq(c.b_k, 7);
}

/* A transposed factor, and an offset into a factor. */
Test(contraction, transposed_and_shifted_factors)
{
	sched_contraction c;

	cr_assert(contraction_of("a f32 5,6 in; b f32 7,8 in; y f32 6,7 out",
				 "y[i, j] = sum(k < 5) a[k, i] * b[j, k + 2]", &c));
	cr_expect(c.m == 6 && c.n == 7 && c.k == 5);
	cr_expect(c.a_m == 1 && c.a_k == 6);
	cr_expect(c.b_k == 1 && c.b_n == 8 && c.b0 == 2);
}

/* Batch and sequence dims whose strides chain merge into m. */
Test(contraction, chained_dims_merge)
{
	sched_contraction c;

	cr_assert(contraction_of("x f32 2,3,4 in; w f32 4,5 in; y f32 2,3,5 out",
				 "y[b, s, j] = sum(c) x[b, s, c] * w[c, j]", &c));
	cr_expect_eq(c.m, 6);
	cr_expect(c.a_m == 4 && c.c_m == 5);
}

/* Dims of m in another order in the output do not chain: no product. */
Test(contraction, dims_that_do_not_chain_are_no_product)
{
	sched_contraction c;

	cr_expect_not(contraction_of("x f32 2,3,4 in; w f32 4,5 in; y f32 3,2,5 out",
				     "y[s, b, j] = sum(c) x[b, s, c] * w[c, j]", &c));
}

Test(contraction, other_ops_are_no_product)
{
	sched_contraction c;

	cr_expect_not(contraction_of("a f32 6,5 in; y f32 6 out",
				     "y[i] = sum(k) a[i, k] * 0.5", &c), "a constant factor");
	cr_expect_not(contraction_of("a f32 6,5 in; y f32 6 out",
				     "y[i] = sum(k) a[i, k]", &c), "no product");
	cr_expect_not(contraction_of("a f32 6,5 in; b f32 5,7 in; y f32 6,7 out",
				     "y[i, j] = max(k) a[i, k] * b[k, j]", &c), "max");
	cr_expect_not(contraction_of("a f32 5 in; b f32 5 in; y f32 6 out",
				     "y[i] = sum(k) a[k] * b[k]", &c),
		      "an output var that moves no factor");
	cr_expect_not(contraction_of("a f32 6,5 in; b f32 6,5 in; y f32 6 out",
				     "y[i] = sum(k) a[i, k] * b[i, k]", &c),
		      "a var that moves all three");
}

/* The examples' products are found, their convolutions (a select) and
 * reductions are not. */
Test(contraction, the_examples)
{
	static const struct {
		const char *name;
		int products;
	} cases[] = {{"bert_qkv", 3}, {"gpt3_mlp_m256", 2}, {"llama_mlp_small", 3},
		     {"lstm_cell", 2}, {"conv_pair", 0}, {"ln_residual", 0},
		     {"softmax_scores", 0}};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		sched_graph *g = NULL;
		sched_error err = {0};
		sched_contraction c;
		int products = 0;

		cr_assert_eq(load_example(cases[i].name, &g, &err), SCHED_OK, "%s", err.message);
		for (int op = 0; op < sched_graph_op_count(g); op++)
			products += sched_op_contraction(g, op, &c);
		cr_expect_eq(products, cases[i].products, "%s: %d products", cases[i].name,
			     products);
		sched_graph_free(g);
	}
}

/* A convolution's padded window is no strided factor: a gathered
 * contraction, w as (k) x (c r s) by the windows as (c r s) x (p q). */
Test(contraction, a_convolution_is_a_gathered_product)
{
	sched_graph *g = graph_of("x f32 1,3,5,6 in; w f32 4,3,3,3 in; y f32 1,4,5,6 out",
				  OPS("y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && "
				      "p + r <= 5 && q + s >= 1 && q + s <= 6, "
				      "x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]"));
	sched_contraction c;

	cr_expect_not(sched_op_contraction(g, 0, &c));
	cr_assert(sched_op_gathered_contraction(g, 0, &c));
	cr_expect(c.gathered);
	cr_expect_eq(c.factor_b, 0, "the select is B");
	cr_expect_eq(c.a, 1, "w is A");
	cr_expect_eq(c.b, 0, "B reads x");
	cr_expect_eq(c.m, 4);
	cr_expect_eq(c.n, 30);
	cr_expect_eq(c.k, 27);
	cr_expect_eq(c.a_m, 27);
	cr_expect_eq(c.a_k, 1);
	cr_expect_eq(c.c_m, 30);
	cr_expect_eq(c.c_n, 1);
	sched_graph_free(g);
}

/* A plain product is one as it was; a var that moves A and is used by
 * B, or a reduction that A does not move, makes none. */
Test(contraction, what_is_no_gathered_product)
{
	sched_graph *plain = graph_of("a f32 6,5 in; b f32 5,7 in; y f32 6,7 out",
				      OPS("y[i, j] = sum(k) a[i, k] * b[k, j]"));
	sched_graph *shared = graph_of("a f32 6,5 in; b f32 6,7 in; y f32 6,7 out",
				       OPS("y[i, j] = sum(k) a[i, k] * exp(b[i, j])"));
	sched_graph *unmoved = graph_of("a f32 6 in; b f32 5,7 in; y f32 6,7 out",
					OPS("y[i, j] = sum(k) a[i] * exp(b[k, j])"));
	sched_contraction c;

	cr_assert(sched_op_gathered_contraction(plain, 0, &c));
	cr_expect_not(c.gathered);
	cr_expect_eq(c.b_n, 1);
	cr_expect_not(sched_op_gathered_contraction(shared, 0, &c), "i moves A and B");
	cr_expect_not(sched_op_gathered_contraction(unmoved, 0, &c), "k does not move A");
	sched_graph_free(plain);
	sched_graph_free(shared);
	sched_graph_free(unmoved);
}

/* Op 0 of the graph as a batched contraction; false if it is none. */
static bool batched_contraction_of(const char *tensors, const char *op,
				   sched_contraction *c)
{
	sched_graph *g = graph_of(tensors, OPS(op));
	bool is = sched_op_batched_contraction(g, 0, c);

	sched_graph_free(g);
	return is;
}

/* Output vars that move A, B and C are a batch: attention's P V per head,
 * its heads in the middle of the output, and two batch vars that chain;
 * sched_op_contraction takes none of them, and a plain product is a
 * batch of one. */
Test(contraction, a_batch_of_products)
{
	static const char heads[] = "p f16 4,40,32 in; v f16 4,32,48 in; o f16 4,40,48 out";
	sched_contraction c;

	cr_assert(batched_contraction_of(heads, "o[h, i, d] = sum(j) p[h, i, j] * v[h, j, d]",
					 &c));
	cr_expect(c.m == 40 && c.n == 48 && c.k == 32 && c.batch == 4);
	cr_expect(c.a_m == 32 && c.a_k == 1 && c.b_k == 48 && c.b_n == 1);
	cr_expect(c.a_batch == 40 * 32 && c.b_batch == 32 * 48 && c.c_batch == 40 * 48);
	cr_expect_not(contraction_of(heads, "o[h, i, d] = sum(j) p[h, i, j] * v[h, j, d]", &c));
	cr_assert(batched_contraction_of("p f16 4,40,32 in; v f16 4,32,48 in; o f16 40,4,48 out",
					 "o[i, h, d] = sum(j) p[h, i, j] * v[h, j, d]", &c));
	cr_expect(c.batch == 4 && c.c_batch == 48 && c.c_m == 4 * 48 && c.c_n == 1);
	cr_assert(batched_contraction_of("a f32 2,3,6,5 in; b f32 2,3,5,7 in; y f32 2,3,6,7 out",
					 "y[s, t, i, j] = sum(k) a[s, t, i, k] * b[s, t, k, j]",
					 &c));
	cr_expect(c.batch == 6 && c.a_batch == 30 && c.b_batch == 35 && c.c_batch == 42);
	cr_expect_not(batched_contraction_of("a f32 2,3,6,5 in; b f32 3,2,5,7 in; "
					     "y f32 2,3,6,7 out",
					     "y[s, t, i, j] = sum(k) a[s, t, i, k] * b[t, s, k, j]",
					     &c), "batch vars whose strides do not chain");
	cr_assert(batched_contraction_of("a f32 6,5 in; b f32 5,7 in; y f32 6,7 out",
					 "y[i, j] = sum(k) a[i, k] * b[k, j]", &c));
	cr_expect_eq(c.batch, 1);
}
