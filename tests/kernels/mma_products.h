/*
 * mma_products.h: matrix products for the tensor-core template's tests
 * (test_mma.c compiles them with NVRTC, test_emulated.c runs them on the
 * emulated backend): shapes no tile divides (several blocks, interior
 * and edge tiles, K in several slices and a zero-filled last one), bf16
 * factors, an f32 and a bf16 output, a shifted B; shapes every tile
 * divides (interior tiles only); a batch of products (attention's P V
 * per head); and a convolution (an implicit GEMM: its padded windows
 * evaluated as B is loaded). Tensors and op, graph_builder's way.
 */
#ifndef MMA_PRODUCTS_H
#define MMA_PRODUCTS_H

static const char *const odd_products[][2] = {
	{"a f16 100,72 in; b f16 72,40 in; y f16 100,40 out",
	 "y[i, j] = sum(k) a[i, k] * b[k, j]"},
	{"a bf16 33,24 in; b bf16 24,40 in; y f32 33,40 out",
	 "y[i, j] = sum(k) a[i, k] * b[k, j]"},
	{"a f16 50,16 in; b f16 24,24 in; y bf16 50,24 out",
	 "y[i, j] = sum(k < 16) a[i, k] * b[k + 8, j]"},
	{"a f16 128,64 in; b f16 64,128 in; y f16 128,128 out",
	 "y[i, j] = sum(k) a[i, k] * b[k, j]"},
	{"p f16 3,40,24 in; v f16 3,24,56 in; o f16 3,40,56 out",
	 "o[h, i, d] = sum(j) p[h, i, j] * v[h, j, d]"},
	{"x f16 1,8,10,10 in; w f16 16,8,3,3 in; y f16 1,16,10,10 out",
	 "y[n, k, p, q] = sum(c, r < 3, s < 3) select(p + r >= 1 && p + r <= 10 && "
	 "q + s >= 1 && q + s <= 10, x[n, c, p + r - 1, q + s - 1], 0) * w[k, c, r, s]"},
};
#define NODD_PRODUCTS (sizeof(odd_products) / sizeof(*odd_products))

#endif
