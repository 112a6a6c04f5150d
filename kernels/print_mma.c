/*
 * print_mma.c: a matrix product on tensor cores: f16 or bf16 factors,
 * or f32 ones as tf32 where the graph allows it (cuda, sm_80 and later;
 * docs/design/kernels.md, "Tensor-core GEMM").
 *
 * Each block computes a bm x bn tile of C; its warps, laid out
 * (bm / wm) x (bn / wn), each compute wm x wn with mma.sync m16n8k16
 * (m16n8k8 for tf32) and f32 accumulators. A and B pass through shared
 * memory in bk-deep slices, "stages" of them in flight: cp.async copies
 * 16 bytes at a time (zero-filling what lies past M, N or K; an interior
 * tile's slices have code of their own, without bounds). ldmatrix reads
 * 16-bit fragments (transposed for B, which is row-major K x N); tf32
 * fragments are read element by element and rounded (cvt.rna). The rows
 * of A and B in shared memory are padded to an odd number of 16-byte
 * chunks (kgen_mma_pads), or, "rotated", row r's chunk c is stored at
 * chunk (c + r / g) mod ch, ch being a row's chunks and g = 8 / gcd(ch,
 * 8): either way any 8 consecutive rows at one chunk (an ldmatrix phase)
 * fall in 8 different groups of 4 banks; rotation saves the padding's
 * shared memory and costs index arithmetic. The epilogue rounds
 * the accumulators to C's dtype and stores them through C's strides; a
 * 16-bit C with rows on 16 bytes goes through shared memory first and is
 * stored 16 bytes at a time. With split_k, the blocks of a tile each
 * take a part of K's slices, write their accumulators to scratch memory,
 * and the last of them to count itself done (an atomic counter per tile,
 * reset by it) adds up every part in their order and stores the tile.
 * Blocks take the tiles row by row, or in
 * groups of "raster" tile rows. Inline PTX only: NVRTC needs no header.
 */
#include <stdlib.h>

#include "print_int.h"

typedef struct mma_printer {
	sched_buf *buf;
	const sched_graph *graph;
	sched_contraction c;
	const sched_tensor *a, *b, *target;
	const sched_op *op; /* a gathered product's, whose B it evaluates */
	kgen_mma s;
} mma_printer;

/* PTX; the emulated backend (backend_emulated.c) has its own of each. */
static const char mma_helpers[] =
	"#ifndef KGEN_EMULATED\n"
	"__device__ __forceinline__ unsigned smem_address(const void *p)\n"
	"{\n"
	"\tunsigned a;\n"
	"\tasm(\"{ .reg .u64 g; cvta.to.shared.u64 g, %1; cvt.u32.u64 %0, g; }\"\n"
	"\t    : \"=r\"(a) : \"l\"(p));\n"
	"\treturn a;\n"
	"}\n"
	"/* 16 bytes from global to shared memory, of which \"bytes\" are read\n"
	" * and the rest zero-filled. */\n"
	"__device__ __forceinline__ void copy16(void *shared, const void *global, int bytes)\n"
	"{\n"
	"\tasm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\\n\"\n"
	"\t\t     :: \"r\"(smem_address(shared)), \"l\"(global), \"r\"(bytes));\n"
	"}\n"
	"__device__ __forceinline__ void ldmatrix_x4(unsigned *r, const void *p)\n"
	"{\n"
	"\tasm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n"
	"\t\t     : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3])\n"
	"\t\t     : \"r\"(smem_address(p)));\n"
	"}\n"
	"__device__ __forceinline__ void ldmatrix_x2_trans(unsigned *r, const void *p)\n"
	"{\n"
	"\tasm volatile(\"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\\n\"\n"
	"\t\t     : \"=r\"(r[0]), \"=r\"(r[1]) : \"r\"(smem_address(p)));\n"
	"}\n"
	"#define copies_commit() asm volatile(\"cp.async.commit_group;\\n\")\n"
	"#define copies_wait(n) asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(n))\n"
	"/* f32 bits rounded to tf32 (to nearest, ties away from zero). */\n"
	"__device__ __forceinline__ unsigned tf32(unsigned x)\n"
	"{\n"
	"\tunsigned r;\n"
	"\tasm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(r) : \"f\"(__uint_as_float(x)));\n"
	"\treturn r;\n"
	"}\n"
	"#endif\n";

static bool is_tf32(const mma_printer *p)
{
	return p->a->dtype == SCHED_F32;
}

/* The mma's type and shape: f16 or bf16 m16n8k16, tf32 m16n8k8. */
static const char *mma_type(const mma_printer *p)
{
	return is_tf32(p) ? "tf32" : p->a->dtype == SCHED_BF16 ? "bf16" : "f16";
}

static void print_mma_call(const mma_printer *p)
{
	sched_buf_printf(p->buf,
		"#ifndef KGEN_EMULATED\n"
		"__device__ __forceinline__ void mma_%s(float *d, const unsigned *a, const unsigned *b)\n"
		"{\n"
		"\tasm volatile(\"mma.sync.aligned.m16n8k%d.row.col.f32.%s.%s.f32 \"\n"
		"\t\t     \"{%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, \"\n"
		"\t\t     \"{%%0, %%1, %%2, %%3};\\n\"\n"
		"\t\t     : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n"
		"\t\t     : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), "
		"\"r\"(b[1]));\n"
		"}\n"
		"#endif\n", mma_type(p), is_tf32(p) ? 8 : 16, mma_type(p), mma_type(p));
}

/* Whether K is cut in parts (split_k). */
static bool split(const mma_printer *p)
{
	return p->s.split_k > 1;
}

/* Whether the kernel computes a batch of products, a block per tile of
 * one of them. */
static bool batched(const mma_printer *p)
{
	return p->c.batch > 1;
}

/* The offset of a factor's or C's first element, "base", in the block's
 * product of the batch ("stride" apart). */
static void print_base(const mma_printer *p, int64_t base, int64_t stride)
{
	sched_buf_printf(p->buf, "%lldLL", (long long)base);
	if (batched(p))
		sched_buf_printf(p->buf, " + batch * %lldLL", (long long)stride);
}

static int gcd(int a, int b)
{
	return b ? gcd(b, a % b) : a;
}

/* The rows a rotation group holds for rows of "elements" 16-byte chunks
 * of "bytes" each (the file's comment): 8 / gcd(chunks, 8). */
static int rotation_group(int elements, int bytes)
{
	return 8 / gcd(elements * bytes / 16, 8);
}

/* A_AT(r, col) and B_AT(r, col): the place of an element of a shared
 * stage of A and of B, padded or rotated (the file's comment); A_STAGE
 * and B_STAGE: a stage's elements. */
static void print_layout(const mma_printer *p, int bytes)
{
	int a_pad, b_pad;

	if (p->s.rotated) {
		sched_buf_printf(p->buf,
			"/* element (r, col) of a stage of rows of ch chunks, rotated by\n"
			" * groups of g rows */\n"
			"#define ROTATED(r, col, ch, g) \\\n"
			"\t((r) * (ch) * VEC + ((col) / VEC + (r) / (g)) %% (ch) * VEC + (col) %% VEC)\n"
			"#define A_AT(r, col) ROTATED(r, col, BK / VEC, %d)\n"
			"#define B_AT(r, col) ROTATED(r, col, BN / VEC, %d)\n"
			"#define A_STAGE (BM * BK)\n#define B_STAGE (BK * BN)\n",
			rotation_group(p->s.bk, bytes), rotation_group(p->s.bn, bytes));
		return;
	}
	kgen_mma_pads(&p->s, bytes, &a_pad, &b_pad);
	sched_buf_printf(p->buf,
		"#define A_ROW (BK + %d)\n#define B_ROW (BN + %d)\n"
		"#define A_AT(r, col) ((r) * A_ROW + (col))\n"
		"#define B_AT(r, col) ((r) * B_ROW + (col))\n"
		"#define A_STAGE (BM * A_ROW)\n#define B_STAGE (BK * B_ROW)\n", a_pad, b_pad);
}

static void print_constants(const mma_printer *p)
{
	int bytes = is_tf32(p) ? 4 : 2;

	sched_buf_printf(p->buf,
		"#define M %lldLL\n#define N %lldLL\n#define K %lldLL\n"
		"#define LDA %lldLL\n#define LDB %lldLL\n"
		"#define BM %d\n#define BN %d\n#define BK %d\n#define WM %d\n#define WN %d\n"
		"#define STAGES %d\n#define THREADS %d\n"
		"typedef %s elem_t;\n"
		"#define VEC (16 / (int)sizeof(elem_t))\n"
		"#define C_ROW (BN + 8)\n#define SHARED_ELEMS %d\n"
		"#define TILES %lldLL\n#define SPLIT %d\n#define ACCS (WM / 16 * (WN / 8) * 4)\n",
		(long long)p->c.m, (long long)p->c.n, (long long)p->c.k,
		(long long)p->c.a_m, (long long)p->c.b_k, p->s.bm, p->s.bn, p->s.bk,
		p->s.wm, p->s.wn, p->s.stages, kgen_mma_threads(&p->s),
		is_tf32(p) ? "unsigned" : "unsigned short",
		kgen_mma_shared_bytes(&p->s, bytes) / bytes,
		(long long)kgen_mma_tiles(&p->c, &p->s),
		split(p) ? p->s.split_k : 1);
	print_layout(p, bytes);
}

/* The element of a gathered B (a convolution's padded window) at "k" and
 * "n" of the slice: its k vars decoded from k, its n vars from n. */
static void print_gathered_element(const mma_printer *p)
{
	const sched_op *op = p->op;
	kgen_decoded vars[2 * SCHED_MAX_RANK];

	for (int reducing = 1; reducing >= 0; reducing--)
		kgen_print_decoded(p->buf, vars, kgen_decoded_vars(op, &p->c, reducing, vars),
				   "idx_t", reducing ? "k" : "n", "\t\t\t");
	sched_buf_printf(p->buf, "\t\t\tvalue = ");
	kgen_print_value(p->buf, &(kgen_printer){p->graph, op, NULL, NULL},
			 op->body->args[p->c.factor_b]);
	sched_buf_printf(p->buf, ";\n");
}

/* A gathered B's slice into shared memory, element by element: each
 * evaluated (its one tensor read through B), rounded to the factors'
 * type; zero past K and N. An implicit GEMM: no im2row matrix exists. */
static void print_gathered_b(const mma_printer *p)
{
	sched_buf_printf(p->buf,
		"\tconst %s *__restrict__ t_%s = (const %s *)B;\n"
		"\tfor (int c = threadIdx.x; c < BK * BN; c += THREADS) {\n"
		"\t\tconst int row = c / BN, col = c %% BN;\n"
		"\t\tconst idx_t k = (idx_t)kt * BK + row, n = n0 + col;\n"
		"\t\tfloat value = 0.0f;\n"
		"\t\tif (k < K && n < N) {\n",
		kgen_ctype(p->b->dtype, true), p->b->name, kgen_ctype(p->b->dtype, true));
	print_gathered_element(p);
	sched_buf_printf(p->buf, "\t\t}\n\t\tbs[B_AT(row, col)] = %s(value);\n\t}\n",
			 is_tf32(p) ? "__float_as_uint" :
			 p->b->dtype == SCHED_F16 ? "f16_store" : "bf16_store");
}

/* The k-th bk slice of A's and B's tiles into shared stage "stage".
 * Exactly-sized code for a slice that lies wholly inside A and B ("whole":
 * an interior tile, not the last partial slice of K): loops of a fixed
 * count, no bounds; the edges' code checks them and zero-fills. */
static void print_load_slice(const mma_printer *p)
{
	sched_buf_printf(p->buf,
		"__device__ __forceinline__ void load_slice(elem_t *as, elem_t *bs,\n"
		"\tconst elem_t *A, const elem_t *B, idx_t m0, idx_t n0, int kt, bool whole)\n"
		"{\n");
	if (p->c.gathered)
		print_gathered_b(p);
	sched_buf_printf(p->buf,
		"\tif (whole) {\n"
		"#pragma unroll\n"
		"\t\tfor (int i = 0; i < (BM * BK / VEC + THREADS - 1) / THREADS; i++) {\n"
		"\t\t\tint c = threadIdx.x + i * THREADS, row = c / (BK / VEC), col = c %% (BK / VEC) * VEC;\n"
		"\t\t\tif ((BM * BK / VEC) %% THREADS == 0 || c < BM * BK / VEC)\n"
		"\t\t\t\tcopy16(as + A_AT(row, col), A + (m0 + row) * LDA + (idx_t)kt * BK + col, 16);\n"
		"\t\t}\n");
	if (!p->c.gathered)
		sched_buf_printf(p->buf,
			"#pragma unroll\n"
			"\t\tfor (int i = 0; i < (BK * BN / VEC + THREADS - 1) / THREADS; i++) {\n"
			"\t\t\tint c = threadIdx.x + i * THREADS, row = c / (BN / VEC), col = c %% (BN / VEC) * VEC;\n"
			"\t\t\tif ((BK * BN / VEC) %% THREADS == 0 || c < BK * BN / VEC)\n"
			"\t\t\t\tcopy16(bs + B_AT(row, col), B + ((idx_t)kt * BK + row) * LDB + n0 + col, 16);\n"
			"\t\t}\n");
	sched_buf_printf(p->buf,
		"\t\tcopies_commit();\n"
		"\t\treturn;\n"
		"\t}\n"
		"\tfor (int c = threadIdx.x; c < BM * BK / VEC; c += THREADS) {\n"
		"\t\tint row = c / (BK / VEC), col = c %% (BK / VEC) * VEC;\n"
		"\t\tidx_t m = m0 + row, k = (idx_t)kt * BK + col;\n"
		"\t\tint valid = m < M ? (int)(K - k < VEC ? (K - k > 0 ? K - k : 0) : VEC) : 0;\n"
		"\t\tcopy16(as + A_AT(row, col), valid ? A + m * LDA + k : A,\n"
		"\t\t       (int)sizeof(elem_t) * valid);\n"
		"\t}\n");
	if (!p->c.gathered)
		sched_buf_printf(p->buf,
			"\tfor (int c = threadIdx.x; c < BK * BN / VEC; c += THREADS) {\n"
			"\t\tint row = c / (BN / VEC), col = c %% (BN / VEC) * VEC;\n"
			"\t\tidx_t k = (idx_t)kt * BK + row, n = n0 + col;\n"
			"\t\tint valid = k < K ? (int)(N - n < VEC ? (N - n > 0 ? N - n : 0) : VEC) : 0;\n"
			"\t\tcopy16(bs + B_AT(row, col), valid ? B + k * LDB + n : B,\n"
			"\t\t       (int)sizeof(elem_t) * valid);\n"
			"\t}\n");
	sched_buf_printf(p->buf, "\tcopies_commit();\n}\n");
}

/* The warp's wm x wn from one shared stage: per 16 of depth, ldmatrix
 * fragments of A (x4) and B (x2, transposed), then the mma's. */
static void print_compute_slice(const mma_printer *p)
{
	sched_buf_printf(p->buf,
		"__device__ __forceinline__ void compute_slice(float (*acc)[WN / 8][4],\n"
		"\tconst elem_t *as, const elem_t *bs, int wm0, int wn0, int lane)\n"
		"{\n"
		"#pragma unroll\n"
		"\tfor (int kk = 0; kk < BK; kk += %d) {\n"
		"\t\tunsigned a[WM / 16][4], b[WN / 8][2];\n", is_tf32(p) ? 8 : 16);
	if (is_tf32(p))
		sched_buf_printf(p->buf,
			"\t\tconst int g = lane / 4, t = lane %% 4;\n"
			"#pragma unroll\n"
			"\t\tfor (int i = 0; i < WM / 16; i++) {\n"
			"\t\t\tconst int r = wm0 + i * 16 + g;\n"
			"\t\t\ta[i][0] = tf32(as[A_AT(r, kk + t)]);\n"
			"\t\t\ta[i][1] = tf32(as[A_AT(r + 8, kk + t)]);\n"
			"\t\t\ta[i][2] = tf32(as[A_AT(r, kk + t + 4)]);\n"
			"\t\t\ta[i][3] = tf32(as[A_AT(r + 8, kk + t + 4)]);\n"
			"\t\t}\n"
			"#pragma unroll\n"
			"\t\tfor (int j = 0; j < WN / 8; j++) {\n"
			"\t\t\tconst int c = wn0 + j * 8 + g;\n"
			"\t\t\tb[j][0] = tf32(bs[B_AT(kk + t, c)]);\n"
			"\t\t\tb[j][1] = tf32(bs[B_AT(kk + t + 4, c)]);\n"
			"\t\t}\n");
	else
		sched_buf_printf(p->buf,
			"#pragma unroll\n"
			"\t\tfor (int i = 0; i < WM / 16; i++)\n"
			"\t\t\tldmatrix_x4(a[i], as + A_AT(wm0 + i * 16 + lane %% 16, kk + lane / 16 * 8));\n"
			"#pragma unroll\n"
			"\t\tfor (int j = 0; j < WN / 8; j++)\n"
			"\t\t\tldmatrix_x2_trans(b[j], bs + B_AT(kk + lane %% 16, wn0 + j * 8));\n");
	sched_buf_printf(p->buf,
		"#pragma unroll\n"
		"\t\tfor (int i = 0; i < WM / 16; i++)\n"
		"#pragma unroll\n"
		"\t\t\tfor (int j = 0; j < WN / 8; j++)\n"
		"\t\t\t\tmma_%s(acc[i][j], a[i], b[j]);\n"
		"\t}\n"
		"}\n", mma_type(p));
}

/* Every tensor, then with split_k the scratch memory. */
static void print_params(const mma_printer *p, const char *name, bool wrapped)
{
	const sched_graph *g = p->graph;

	kgen_print_cuda_entry(p->buf, name, "THREADS", wrapped);
	for (int t = 0; t < g->ntensors; t++)
		sched_buf_printf(p->buf, "%s%s%s *__restrict__ t_%s", t ? ",\n\t" : "",
				 &g->tensors[t] == p->target ? "" : "const ",
				 kgen_ctype(g->tensors[t].dtype, true), g->tensors[t].name);
	if (split(p))
		sched_buf_printf(p->buf, ",\n\tfloat *__restrict__ scratch");
	kgen_print_cuda_entry_end(p->buf, wrapped);
}

/* The standalone kernel's shared stages and its tile's origin: row by
 * row, or with "raster" in groups of that many tile rows, column by
 * column within a group (the last group may be shorter). */
static void print_tile(const mma_printer *p, bool wrapped)
{
	sched_buf_printf(p->buf,
		"\t__shared__ __align__(16) elem_t as[SHARED_ELEMS];\n"
		"\telem_t *const bs = as + STAGES * A_STAGE;\n");
	const char *at = batched(p) ? "in_batch" : "tile";

	if (split(p))
		sched_buf_printf(p->buf, "\tconst idx_t part = blockIdx.x / TILES, "
				 "tile = blockIdx.x %% TILES;\n\tconst idx_t tiles_n = (N + BN - 1) / BN;\n");
	else
		sched_buf_printf(p->buf, "\tconst idx_t tiles_n = (N + BN - 1) / BN, tile = %s;\n",
				 kgen_cuda_tile(wrapped));
	if (batched(p))
		sched_buf_printf(p->buf, "\tconst idx_t batch = tile / %lldLL, in_batch = tile %% %lldLL;\n",
				 (long long)(kgen_mma_tiles(&p->c, &p->s) / p->c.batch),
				 (long long)(kgen_mma_tiles(&p->c, &p->s) / p->c.batch));
	if (p->s.raster > 1)
		sched_buf_printf(p->buf,
			"\tconst idx_t tiles_m = (M + BM - 1) / BM, in_group = %s %% (%d * tiles_n);\n"
			"\tconst idx_t first = %s / (%d * tiles_n) * %d;\n"
			"\tconst idx_t rows = tiles_m - first < %d ? tiles_m - first : %d;\n"
			"\tconst idx_t m0 = (first + in_group %% rows) * BM, n0 = in_group / rows * BN;\n",
			at, p->s.raster, at, p->s.raster, p->s.raster, p->s.raster, p->s.raster);
	else
		sched_buf_printf(p->buf,
			"\tconst idx_t m0 = %s / tiles_n * BM, n0 = %s %% tiles_n * BN;\n", at, at);
}

/* The pipeline, from the tile at m0, n0 into acc through the stages in
 * as and bs, over K's slices from slice0 on (with split_k, the block's
 * part of them): stages - 1 slices in flight before the first compute;
 * at each step, wait for the oldest, compute it, refill the stage freed
 * one step before (the barrier at the top orders both). */
static void print_pipeline(const mma_printer *p)
{
	sched_buf_printf(p->buf, "\tconst elem_t *A = (const elem_t *)t_%s + ", p->a->name);
	print_base(p, p->c.a0, p->c.a_batch);
	sched_buf_printf(p->buf, ";\n\tconst elem_t *B = (const elem_t *)t_%s + ", p->b->name);
	print_base(p, p->c.b0, p->c.b_batch);
	sched_buf_printf(p->buf, ";\n"
		"\tconst int warp = threadIdx.x / 32, lane = threadIdx.x %% 32;\n"
		"\tconst int wm0 = warp / (BN / WN) * WM, wn0 = warp %% (BN / WN) * WN;\n");
	if (split(p))
		sched_buf_printf(p->buf,
			"\tconst int all = (int)((K + BK - 1) / BK), slice0 = (int)(part * all / SPLIT);\n"
			"\tconst int slices = (int)((part + 1) * all / SPLIT) - slice0;\n");
	else
		sched_buf_printf(p->buf,
			"\tconst int slice0 = 0, slices = (int)((K + BK - 1) / BK);\n");
	sched_buf_printf(p->buf,
		"\tconst bool inside = m0 + BM <= M && n0 + BN <= N;\n"
		"\tfloat acc[WM / 16][WN / 8][4] = {};\n"
		"\tfor (int s = 0; s < STAGES - 1; s++) {\n"
		"\t\tif (s < slices)\n"
		"\t\t\tload_slice(as + s * A_STAGE, bs + s * B_STAGE, A, B, m0, n0, slice0 + s,\n"
		"\t\t\t\t   inside && (idx_t)(slice0 + s + 1) * BK <= K);\n"
		"\t\telse\n"
		"\t\t\tcopies_commit();\n"
		"\t}\n"
		"\tfor (int kt = 0; kt < slices; kt++) {\n"
		"\t\tint next = kt + STAGES - 1, stage = kt %% STAGES;\n"
		"\t\tcopies_wait(STAGES - 2);\n"
		"\t\t__syncthreads();\n"
		"\t\tif (next < slices)\n"
		"\t\t\tload_slice(as + next %% STAGES * A_STAGE, bs + next %% STAGES * B_STAGE,\n"
		"\t\t\t\t   A, B, m0, n0, slice0 + next,\n"
		"\t\t\t\t   inside && (idx_t)(slice0 + next + 1) * BK <= K);\n"
		"\t\telse\n"
		"\t\t\tcopies_commit();\n"
		"\t\tcompute_slice(acc, as + stage * A_STAGE, bs + stage * B_STAGE, wm0, wn0,\n"
		"\t\t\t      lane);\n"
		"\t}\n");
}

/* The loops over the thread's accumulators, q counting them. */
static void print_each_accumulator(const mma_printer *p, const char *indent)
{
	sched_buf_printf(p->buf,
		"%sq = 0;\n"
		"#pragma unroll\n"
		"%sfor (int i = 0; i < WM / 16; i++)\n"
		"#pragma unroll\n"
		"%s\tfor (int j = 0; j < WN / 8; j++)\n"
		"#pragma unroll\n"
		"%s\t\tfor (int r = 0; r < 4; r++, q++)\n", indent, indent, indent, indent);
}

/* split_k: the block's part into scratch memory, after a counter per
 * tile (thread t's accumulator q of part s of a tile at (s ACCS + q)
 * THREADS + t); the last block of the tile to count itself done resets
 * the count and sums the parts in their order into acc, the others
 * leave. */
static void print_split_sum(const mma_printer *p)
{
	sched_buf_printf(p->buf,
		"\t{\n"
		"\t\t__shared__ int last;\n"
		"\t\tunsigned *const done = (unsigned *)scratch + tile;\n"
		"\t\tfloat *const parts = scratch + TILES + tile * SPLIT * (BM * BN) + threadIdx.x;\n"
		"\t\tint q;\n");
	print_each_accumulator(p, "\t\t");
	sched_buf_printf(p->buf,
		"\t\t\t\t\tparts[(part * ACCS + q) * THREADS] = acc[i][j][r];\n"
		"\t\t__threadfence();\n"
		"\t\t__syncthreads();\n"
		"\t\tif (threadIdx.x == 0) {\n"
		"\t\t\tlast = atomicAdd(done, 1u) == SPLIT - 1;\n"
		"\t\t\tif (last)\n"
		"\t\t\t\t*done = 0;\n"
		"\t\t}\n"
		"\t\t__syncthreads();\n"
		"\t\tif (!last)\n"
		"\t\t\treturn;\n"
		"\t\t__threadfence();\n");
	print_each_accumulator(p, "\t\t");
	sched_buf_printf(p->buf,
		"\t\t\t\t{\n"
		"\t\t\t\t\tacc[i][j][r] = 0.0f;\n"
		"\t\t\t\t\tfor (int s = 0; s < SPLIT; s++)\n"
		"\t\t\t\t\t\tacc[i][j][r] += __ldcg(parts + (s * ACCS + q) * THREADS);\n"
		"\t\t\t\t}\n"
		"\t}\n");
}

/* Accumulator r of fragment (i, j) sits at row lane / 4 (+ 8 for r >= 2)
 * and column 2 (lane % 4) (+ 1 for odd r) of its 16 x 8. */
void kgen_print_mma_accumulators(sched_buf *buf)
{
	sched_buf_printf(buf,
		"#pragma unroll\n"
		"\tfor (int i = 0; i < WM / 16; i++)\n"
		"#pragma unroll\n"
		"\t\tfor (int j = 0; j < WN / 8; j++)\n"
		"#pragma unroll\n"
		"\t\t\tfor (int r = 0; r < 4; r++) {\n"
		"\t\t\t\tconst idx_t m = m0 + wm0 + i * 16 + lane / 4 + (r >= 2 ? 8 : 0);\n"
		"\t\t\t\tconst idx_t n = n0 + wn0 + j * 8 + lane %% 4 * 2 + (r & 1);\n");
}

/* Whether C takes 16-byte stores: 16-bit elements in rows of it that
 * start on 8 elements, unit stride along N. */
static bool stores_16_bytes(const mma_printer *p)
{
	return sched_dtype_bytes(p->target->dtype) == 2 && p->c.c_n == 1 &&
	       p->c.c_m % 8 == 0 && p->c.c0 % 8 == 0 && (!batched(p) || p->c.c_batch % 8 == 0);
}

/* The epilogue through shared memory: the warps' accumulators, rounded,
 * into the tile of C (pairs of columns a 32-bit word), then each thread
 * stores 8 consecutive elements of a row at once; past N, one by one. */
static void print_staged_epilogue(const mma_printer *p)
{
	sched_buf_printf(p->buf,
		"\t__syncthreads();\n"
		"\tunsigned short *const ct = (unsigned short *)as;\n"
		"#pragma unroll\n"
		"\tfor (int i = 0; i < WM / 16; i++)\n"
		"#pragma unroll\n"
		"\t\tfor (int j = 0; j < WN / 8; j++)\n"
		"#pragma unroll\n"
		"\t\t\tfor (int h = 0; h < 2; h++) {\n"
		"\t\t\t\tint row = wm0 + i * 16 + lane / 4 + h * 8, col = wn0 + j * 8 + lane %% 4 * 2;\n"
		"\t\t\t\t*(unsigned *)(ct + row * C_ROW + col) = (unsigned)%s(acc[i][j][2 * h]) |\n"
		"\t\t\t\t\t(unsigned)%s(acc[i][j][2 * h + 1]) << 16;\n"
		"\t\t\t}\n"
		"\t__syncthreads();\n"
		"\tfor (int c = threadIdx.x; c < BM * BN / 8; c += THREADS) {\n"
		"\t\tint row = c / (BN / 8), col = c %% (BN / 8) * 8;\n"
		"\t\tidx_t m = m0 + row, n = n0 + col;\n"
		"\t\t%s *to = t_%s + C0 + m * %lldLL + n;\n"
		"\t\tif (inside || (m < M && n + 8 <= N))\n"
		"\t\t\tmove16(to, ct + row * C_ROW + col);\n"
		"\t\telse if (m < M)\n"
		"\t\t\tfor (int e = 0; e < 8 && n + e < N; e++)\n"
		"\t\t\t\tto[e] = ct[row * C_ROW + col + e];\n"
		"\t}\n"
		"}\n",
		p->target->dtype == SCHED_F16 ? "f16_store" : "bf16_store",
		p->target->dtype == SCHED_F16 ? "f16_store" : "bf16_store",
		kgen_ctype(p->target->dtype, true), p->target->name, (long long)p->c.c_m);
}

/* C's first element in the block's product: C0. */
static void print_epilogue(const mma_printer *p)
{
	sched_buf_printf(p->buf, "\tconst idx_t C0 = ");
	print_base(p, p->c.c0, p->c.c_batch);
	sched_buf_printf(p->buf, ";\n");
	if (stores_16_bytes(p))
		return print_staged_epilogue(p);
	kgen_print_mma_accumulators(p->buf);
	sched_buf_printf(p->buf,
		"\t\t\t\tif (inside || (m < M && n < N))\n"
		"\t\t\t\t\tt_%s[C0 + m * %lldLL + n * %lldLL] = %sacc[i][j][r]);\n"
		"\t\t\t}\n"
		"}\n",
		p->target->name, (long long)p->c.c_m, (long long)p->c.c_n,
		kgen_store_open(p->target));
}

/* The printer of contraction "c" in blocking "mma". */
static mma_printer printer_of(sched_buf *buf, const sched_graph *graph,
			      const sched_contraction *c, const kgen_mma *mma)
{
	return (mma_printer){.buf = buf, .graph = graph, .c = *c, .s = *mma,
			     .a = &graph->tensors[c->a], .b = &graph->tensors[c->b]};
}

static void print_definitions(const mma_printer *p)
{
	sched_buf_printf(p->buf, "%s", mma_helpers);
	print_mma_call(p);
	print_constants(p);
	print_load_slice(p);
	print_compute_slice(p);
}

void kgen_print_mma_definitions(sched_buf *buf, const sched_graph *graph,
				const sched_contraction *c, const kgen_mma *mma)
{
	mma_printer p = printer_of(buf, graph, c, mma);

	print_definitions(&p);
}

void kgen_print_mma_pipeline(sched_buf *buf, const sched_graph *graph,
			     const sched_contraction *c, const kgen_mma *mma)
{
	mma_printer p = printer_of(buf, graph, c, mma);

	print_pipeline(&p);
}

char *kgen_print_mma(const sched_graph *graph, const kgen_kernel *kernel, bool wrapped)
{
	const sched_op *op = kgen_kernel_op(graph, kernel);
	sched_buf buf = {0};
	sched_contraction c;
	mma_printer p;

	if (!kgen_mma_product(graph, op->index, &c))
		return NULL;
	p = printer_of(&buf, graph, &c, &kernel->schedule.mma);
	p.target = &graph->tensors[op->target];
	p.op = op;
	kgen_print_helpers(&buf, true, true);
	kgen_print_header(&buf, &(kgen_printer){graph, op, NULL, NULL}, kernel->name);
	print_definitions(&p);
	print_params(&p, kernel->name, wrapped);
	print_tile(&p, wrapped);
	print_pipeline(&p);
	if (split(&p))
		print_split_sum(&p);
	print_epilogue(&p);
	return buf.str;
}

/* Early loads (docs/design/sync.md): before a consumer tile waits, its threads
 * ask L2 for the first stages - 1 slices of the factor the producer does
 * not write, 128 bytes (64 16-bit elements, 32 f32 ones) at a time. */
void kgen_print_mma_prefetch(sched_buf *buf, const sched_graph *graph,
			     const kgen_kernel *kernel, int produced)
{
	sched_contraction c;
	bool a_is_free;

	if (!sched_op_contraction(graph, kgen_kernel_op(graph, kernel)->index, &c))
		return;
	a_is_free = c.a != produced;
	sched_buf_printf(buf,
		"\t{\n"
		"\t\tconst elem_t *F = (const elem_t *)t_%s + %lldLL;\n"
		"\t\tconst idx_t tiles_n = (N + BN - 1) / BN;\n"
		"\t\tconst idx_t origin = %s;\n"
		"\t\tconst int line = 128 / (int)sizeof(elem_t);\n"
		"\t\tconst int rows = %s, chunks = (%s + line - 1) / line;\n"
		"\t\tfor (int c = threadIdx.x; c < rows * chunks; c += THREADS) {\n"
		"\t\t\tidx_t r = %s, e = %s;\n"
		"\t\t\tif (%s)\n"
		"\t\t\t\tasm volatile(\"prefetch.global.L2 [%%0];\" :: \"l\"(F + %s));\n"
		"\t\t}\n"
		"\t}\n",
		graph->tensors[a_is_free ? c.a : c.b].name, (long long)(a_is_free ? c.a0 : c.b0),
		a_is_free ? "ktile / tiles_n * BM" : "ktile % tiles_n * BN",
		a_is_free ? "BM" : "(STAGES - 1) * BK", a_is_free ? "(STAGES - 1) * BK" : "BN",
		a_is_free ? "origin + c / chunks" : "c / chunks",
		a_is_free ? "c % chunks * line" : "origin + c % chunks * line",
		a_is_free ? "r < M && e < K" : "r < K && e < N",
		a_is_free ? "r * LDA + e" : "r * LDB + e");
}
