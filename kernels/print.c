/*
 * print.c: what the C and CUDA printers share: the helpers every kernel
 * starts with, and expressions, indices and element accesses in C syntax.
 *
 * Values are computed in float; indices in idx_t (int64 on the cpu; int or
 * long long on cuda, by the size of the tensors). Tensors are named
 * t_<name> and variables v_<name> in the generated code.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "print_int.h"

/* clang-format off */
static const char c_helpers[] =
	"#include <math.h>\n"
	"#include <stdint.h>\n"
	"#include <string.h>\n"
	"typedef int64_t idx_t;\n"
	"typedef uint16_t f16_t;\n"
	"typedef uint16_t bf16_t;\n"
	"/* Widening by bits (it vectorizes; the _Float16 cast does not): the\n"
	" * exponent is rebiased by a multiply, which also scales subnormals. */\n"
	"static inline float f16_load(f16_t h)\n"
	"{\n"
	"\tuint32_t u = (uint32_t)(h & 0x7fffu) << 13;\n"
	"\tfloat f;\n"
	"\tmemcpy(&f, &u, 4);\n"
	"\tf *= 0x1p112f;\n"
	"\tmemcpy(&u, &f, 4);\n"
	"\tif ((h & 0x7c00u) == 0x7c00u)\n"
	"\t\tu |= 0x7f800000u;\n"
	"\tu |= (uint32_t)(h & 0x8000u) << 16;\n"
	"\tmemcpy(&f, &u, 4);\n"
	"\treturn f;\n"
	"}\n"
	"/* x rounded to the nearest f16 (ties to even) and widened back, with\n"
	" * integer operations and selects that vectorize; f16_load(f16_store(x))\n"
	" * bit for bit. */\n"
	"static inline float f16_round(float x)\n"
	"{\n"
	"\tfloat a = fabsf(x), subnormal = (a + 0.5f) - 0.5f, r;\n"
	"\tuint32_t u, n;\n"
	"\tmemcpy(&u, &a, 4);\n"
	"\tn = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;\n"
	"\tmemcpy(&r, &n, 4);\n"
	"\tr = u >= 0x477ff000u ? INFINITY : u < 0x38800000u ? subnormal : r;\n"
	"\treturn u >= 0x7f800000u ? x : copysignf(r, x);\n"
	"}\n"
	"/* The bits of the f16 nearest f, those of the _Float16 conversion for\n"
	" * every f but NaN (a quiet NaN here), without the conversion, which GCC\n"
	" * does not vectorize on a cpu without AVX512-FP16: f16_round's float\n"
	" * rebiased (normal), scaled by 2^24 (subnormal), or infinity and NaN. */\n"
	"static inline f16_t f16_store(float f)\n"
	"{\n"
	"\tfloat r = f16_round(f), a = fabsf(r);\n"
	"\tuint32_t u, bits, normal, subnormal, special;\n"
	"\tmemcpy(&u, &r, 4);\n"
	"\tbits = u & 0x7fffffffu;\n"
	"\tnormal = (bits - 0x38000000u) >> 13;\n"
	"\tsubnormal = (uint32_t)(int32_t)((a < 1.0f ? a : 1.0f) * 16777216.0f);\n"
	"\tspecial = 0x7c00u | (((bits & 0x7fffffu) + 0x7fffffu) >> 23 << 9);\n"
	"\tbits = bits >= 0x7f800000u ? special : bits >= 0x38800000u ? normal : subnormal;\n"
	"\treturn (f16_t)(bits | ((u >> 16) & 0x8000u));\n"
	"}\n"
	"static inline float bf16_load(bf16_t b)\n"
	"{ uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }\n"
	"static inline bf16_t bf16_store(float f)\n"
	"{\n"
	"\tuint32_t u;\n"
	"\tmemcpy(&u, &f, 4);\n"
	"\tif ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;\n"
	"\treturn (bf16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
	"}\n"
	"#define KFN static inline\n"
	"#define KINF INFINITY\n"
	"/* a / b where b does not move along the innermost loop: the product\n"
	" * with the reciprocal, which the loop computes once (a division a vector\n"
	" * costs more than a product); within two ulps of the quotient for\n"
	" * 2^-126 <= |b| <= 2^126. */\n"
	"#define KDIV_INVARIANT(a, b) ((a) * (1.0f / (b)))\n"
	"/* exp(x) = 2^n exp(r), n = round(x / ln 2), |r| <= ln 2 / 2, exp(r) by\n"
	" * its Taylor polynomial of degree 7 (relative error below 1e-7), 2^n as\n"
	" * two powers built from bits so that subnormal results come out right\n"
	" * (below -104, where exp underflows to zero, x is taken as -104): no\n"
	" * call and no branch, so that loops of it vectorize (libm's expf does\n"
	" * not). n is rounded by adding 1.5 2^23, which leaves it in the low bits\n"
	" * of the sum (no rounding or conversion instruction); the holds keep a\n"
	" * NaN, which then stays NaN; overflow gives infinity. */\n"
	"static inline float kexp(float x)\n"
	"{\n"
	"\tfloat c = x < -104.0f ? -104.0f : x > 89.0f ? 89.0f : x;\n"
	"\tfloat t = fmaf(c, 1.44269504f, 12582912.0f), n = t - 12582912.0f;\n"
	"\tfloat r = fmaf(n, -0.693145752f, c), p, s1, s2;\n"
	"\tint32_t whole, half, b1, b2;\n"
	"\tr = fmaf(n, -1.42860677e-6f, r);\n"
	"\tp = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666667e-1f + r * (4.16666667e-2f +\n"
	"\t    r * (8.33333333e-3f + r * (1.38888889e-3f + r * 1.98412698e-4f))))));\n"
	"\tmemcpy(&whole, &t, 4);\n"
	"\twhole -= 0x4b400000;\n"
	"\thalf = whole >> 1;\n"
	"\tb1 = (half + 127) << 23;\n"
	"\tb2 = (whole - half + 127) << 23;\n"
	"\tmemcpy(&s1, &b1, 4);\n"
	"\tmemcpy(&s2, &b2, 4);\n"
	"\treturn p * s1 * s2;\n"
	"}\n"
	"/* exp(x) where the result is rounded to f16 next (the body of an f16\n"
	" * op): f16 has 11 bits and no value below 2^-25 or above 65520 but 0\n"
	" * and infinity, so x is held in [-87, 88], where 2^n is one power\n"
	" * built from the bits of the rounding sum (its bias added in it) and\n"
	" * every result is a normal float; exp(r) by a minimax polynomial of\n"
	" * degree 4 (relative error below 3e-6, at most a 170th of an f16 ulp), r\n"
	" * from one fma. Rounded to f16, within an ulp of exp's f16 and mostly equal,\n"
	" * 0 below -17.3, infinity above 11.1; NaN stays NaN. Its holds, ln 2 and\n"
	" * polynomial are kexp_f16_vec's too (of a float or of a vector). */\n"
	"#define KEXP_F16_LO (-87.0f)\n"
	"#define KEXP_F16_HI 88.0f\n"
	"#define KEXP_F16_LN2 0.693147182f\n"
	"#define KEXP_F16_POLY(r) (1.0f + (r) * (0.99996686f + (r) * (0.500030756f + \\\n"
	"\t(r) * (0.167875379f + (r) * 0.0415094122f))))\n"
	"static inline float kexp_f16(float x)\n"
	"{\n"
	"\tfloat c = x < KEXP_F16_LO ? KEXP_F16_LO : x > KEXP_F16_HI ? KEXP_F16_HI : x;\n"
	"\tfloat t = fmaf(c, 1.44269504f, 12583039.0f), n = t - 12583039.0f;\n"
	"\tfloat r = fmaf(n, -KEXP_F16_LN2, c), p, s;\n"
	"\tuint32_t bits;\n"
	"\tp = KEXP_F16_POLY(r);\n"
	"\tmemcpy(&bits, &t, 4);\n"
	"\tbits <<= 23;\n"
	"\tmemcpy(&s, &bits, 4);\n"
	"\treturn p * s;\n"
	"}\n"
	"/* tanh(x) = sign(x) (1 - e) / (1 + e), e = kexp(-2 |x|); below |x| = 0.1,\n"
	" * where 1 - e loses digits, its Taylor polynomial of degree 7: no call\n"
	" * and no branch, so that loops of it vectorize (libm's tanhf does not). */\n"
	"static inline float ktanh(float x)\n"
	"{\n"
	"\tfloat a = fabsf(x), e = kexp(-2.0f * a), t = (1.0f - e) / (1.0f + e), x2 = x * x;\n"
	"\tfloat small = x * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f +\n"
	"\t    x2 * -0.0539682540f)));\n"
	"\treturn a < 0.1f ? small : copysignf(t, x);\n"
	"}\n"
	"/* erf(x) = x P(x^2) below |x| = 1, else 1 - kexp(-x^2) Q(1 / |x|), with P\n"
	" * of degree 5 and Q of degree 8 fitted to erf and erfc(x) e^(x^2) (|x|\n"
	" * held at 3.95, where erf is 1 in float): within 3 ulp of erf, no call\n"
	" * and no branch, so that loops of it vectorize (libm's erff does not);\n"
	" * the selects are comparisons, as fminf and fmaxf would keep GCC from\n"
	" * vectorizing. NaN stays NaN. */\n"
	"static inline float kerf(float x)\n"
	"{\n"
	"\tfloat a = fabsf(x) < 3.95f ? fabsf(x) : 3.95f, s = a * a, t = 1.0f / (a > 1.0f ? a : 1.0f);\n"
	"\tfloat small = a * (1.12837912f + s * (-0.376123261f + s * (0.112801796f +\n"
	"\t    s * (-0.0267112986f + s * (0.00491753707f + s * -0.000563136544f)))));\n"
	"\tfloat q = 0.00026054932f + t * (0.559200056f + t * (0.0409206442f +\n"
	"\t    t * (-0.467435577f + t * (0.48704296f + t * (-0.227431533f +\n"
	"\t    t * (0.0109914f + t * (0.034770322f + t * -0.0107352705f)))))));\n"
	"\treturn x != x ? x : copysignf(a < 1.0f ? small : 1.0f - kexp(-s) * q, x);\n"
	"}\n";
/* clang-format on */

static const char c_f16_builtins[] =
	"/* KVEC f16 at a time through the cpu's conversion instructions (F16C,\n"
	" * which GCC does not vectorize from scalar code; called by GCC's builtins,\n"
	" * as <immintrin.h> would add most of a second to each compile), or else\n"
	" * the integer operations above: bit for bit the same but for a NaN's\n"
	" * payload. */\n"
	"#if defined(__GNUC__) && !defined(__clang__) && defined(__F16C__)\n"
	"#define KF16_BUILTINS\n"
	"#endif\n";

/* Without the builtins, the scalar conversions KVEC at a time (and plain
 * stores for the streamed ones); then, for every width, kf16_round_vec
 * and the fence of streamed stores. */
static const char c_f16_scalar_vectors[] =
	"#else\n"
	"#define KVEC 8\n"
	"static inline void kf16_load_vec(float *d, const f16_t *s)\n"
	"{ for (int u = 0; u < KVEC; u++) d[u] = f16_load(s[u]); }\n"
	"static inline void kf16_store_vec(f16_t *d, const float *s)\n"
	"{ for (int u = 0; u < KVEC; u++) d[u] = f16_store(s[u]); }\n"
	"#define kf16_stream_vec kf16_store_vec\n"
	"#endif\n"
	"/* The streamed stores of a thread done before the kernel returns (each\n"
	" * thread's, before the parallel region's end). */\n"
	"#ifdef KF16_BUILTINS\n"
	"#define KSTREAM_FENCE() __builtin_ia32_sfence()\n"
	"#else\n"
	"#define KSTREAM_FENCE()\n"
	"#endif\n"
	"static inline void kf16_round_vec(float *x)\n"
	"{ f16_t h[KVEC]; kf16_store_vec(h, x); kf16_load_vec(x, h); }\n";

/* clang-format off */
static const char c_exp_f16_vector[] =
	"/* kexp_f16 of KVEC floats in place: with AVX-512, its holds as vmaxps\n"
	" * and vminps (which GCC does not make of the comparisons; with the bound\n"
	" * first a NaN passes through), n by vrndscaleps and p 2^n by vscalefps:\n"
	" * 10 instructions a vector where the loop has 15, whose results round\n"
	" * to the same f16; else kexp_f16 element by element. */\n"
	"#if defined(KF16_BUILTINS) && defined(__AVX512F__)\n"
	"static inline void kexp_f16_vec(float *x)\n"
	"{\n"
	"\tkf32_vec v, c, n, r, p;\n"
	"\tmemcpy(&v, x, sizeof(v));\n"
	"\tc = __builtin_ia32_maxps512_mask((kf32_vec){0} + KEXP_F16_LO, v, v, 0xffff, 4);\n"
	"\tc = __builtin_ia32_minps512_mask((kf32_vec){0} + KEXP_F16_HI, c, c, 0xffff, 4);\n"
	"\tn = __builtin_ia32_rndscaleps_mask(c * 1.44269504f, 0, c, 0xffff, 4);\n"
	"\tr = __builtin_ia32_vfmaddps512_mask(n, (kf32_vec){0} - KEXP_F16_LN2, c, 0xffff, 4);\n"
	"\tp = KEXP_F16_POLY(r);\n"
	"\tv = __builtin_ia32_scalefps512_mask(p, n, p, 0xffff, 4);\n"
	"\tmemcpy(x, &v, sizeof(v));\n"
	"}\n"
	"#else\n"
	"static inline void kexp_f16_vec(float *x)\n"
	"{\n"
	"#pragma omp simd\n"
	"\tfor (int u = 0; u < KVEC; u++)\n"
	"\t\tx[u] = kexp_f16(x[u]);\n"
	"}\n"
	"#endif\n";
/* clang-format on */

/* kf16_load_vec, kf16_store_vec and kf16_stream_vec for "kvec" f16 at a
 * time, by GCC's builtin calls "widen" (kf16_vec h to kf32_vec), "narrow"
 * (f to h) and "stream" (a store of h that bypasses the caches: for
 * results no op reads, whose lines a store would first read, then keep;
 * an address not aligned to the vector's size stores as kf16_store_vec
 * does). */
static void print_f16_builtin_vectors(sched_buf *buf, int kvec, const char *widen,
				      const char *narrow, const char *stream)
{
	sched_buf_printf(buf,
			 "#define KVEC %d\n"
			 "typedef short kf16_vec __attribute__((vector_size(%d)));\n"
			 "typedef float kf32_vec __attribute__((vector_size(%d)));\n"
			 "static inline void kf16_load_vec(float *d, const f16_t *s)\n"
			 "{\n\tkf16_vec h;\n\tkf32_vec f;\n"
			 "\tmemcpy(&h, s, sizeof(h));\n\tf = %s;\n"
			 "\tmemcpy(d, &f, sizeof(f));\n}\n"
			 "static inline void kf16_store_vec(f16_t *d, const float *s)\n"
			 "{\n\tkf16_vec h;\n\tkf32_vec f;\n"
			 "\tmemcpy(&f, s, sizeof(f));\n\th = %s;\n"
			 "\tmemcpy(d, &h, sizeof(h));\n}\n",
			 kvec, kvec * 2, kvec * 4, widen, narrow);
	sched_buf_printf(
		buf,
		"typedef long long kf16_bits __attribute__((vector_size(%d)));\n"
		"static inline void kf16_stream_vec(f16_t *d, const float *s)\n"
		"{\n\tkf16_vec h;\n\tkf32_vec f;\n"
		"\tif ((uintptr_t)d %% sizeof(h)) {\n"
		"\t\tkf16_store_vec(d, s);\n\t\treturn;\n\t}\n"
		"\tmemcpy(&f, s, sizeof(f));\n\th = %s;\n"
		"\t%s((kf16_bits *)d, (kf16_bits)h);\n}\n",
		kvec * 2, narrow, stream);
}

/* The cpu's f16 vector helpers: AVX-512's conversions, else AVX2's,
 * else the scalar conversions KVEC at a time. */
static void print_f16_vectors(sched_buf *buf)
{
	sched_buf_printf(buf, "%s#if defined(KF16_BUILTINS) && defined(__AVX512F__)\n",
			 c_f16_builtins);
	print_f16_builtin_vectors(
		buf, 16,
		"__builtin_ia32_vcvtph2ps512_mask(h, (kf32_vec){0}, 0xffff, 4)",
		"__builtin_ia32_vcvtps2ph512_mask(f, 0, (kf16_vec){0}, 0xffff)",
		"__builtin_ia32_movntdq256");
	sched_buf_printf(buf, "#elif defined(KF16_BUILTINS)\n");
	print_f16_builtin_vectors(buf, 8, "__builtin_ia32_vcvtph2ps256(h)",
				  "__builtin_ia32_vcvtps2ph256(f, 0)",
				  "__builtin_ia32_movntdq");
	sched_buf_printf(buf, "%s%s", c_f16_scalar_vectors, c_exp_f16_vector);
}

/* clang-format off */
static const char cuda_helpers[] =
	"typedef unsigned short f16_t;\n"
	"typedef unsigned short bf16_t;\n"
	"#ifndef KGEN_EMULATED /* PTX; the emulated backend has its own */\n"
	"__device__ __forceinline__ float f16_load(f16_t h)\n"
	"{ float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n"
	"__device__ __forceinline__ f16_t f16_store(float f)\n"
	"{ f16_t h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
	"/* 16, 8 or 4 bytes at once, both addresses on as many bytes. */\n"
	"struct __align__(16) bytes16 { unsigned w[4]; };\n"
	"struct __align__(8) bytes8 { unsigned w[2]; };\n"
	"__device__ __forceinline__ void move16(void *to, const void *from)\n"
	"{ *(bytes16 *)to = *(const bytes16 *)from; }\n"
	"__device__ __forceinline__ void move8(void *to, const void *from)\n"
	"{ *(bytes8 *)to = *(const bytes8 *)from; }\n"
	"__device__ __forceinline__ void move4(void *to, const void *from)\n"
	"{ *(unsigned *)to = *(const unsigned *)from; }\n"
	"#endif\n"
	"/* \"bytes\" (a power of two from 4 to 64, known when compiled) at once,\n"
	" * by 16 at most: both addresses on as many bytes. */\n"
	"__device__ __forceinline__ void kmove(void *to, const void *from, int bytes)\n"
	"{\n"
	"\tif (bytes >= 16)\n"
	"\t\tfor (int c = 0; c < bytes; c += 16)\n"
	"\t\t\tmove16((char *)to + c, (const char *)from + c);\n"
	"\telse if (bytes == 8)\n"
	"\t\tmove8(to, from);\n"
	"\telse\n"
	"\t\tmove4(to, from);\n"
	"}\n"
	"__device__ __forceinline__ float bf16_load(bf16_t b)\n"
	"{ return __uint_as_float((unsigned)b << 16); }\n"
	"__device__ __forceinline__ bf16_t bf16_store(float f)\n"
	"{\n"
	"\tunsigned u = __float_as_uint(f);\n"
	"\tif ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;\n"
	"\treturn (bf16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
	"}\n"
	"__device__ __forceinline__ float f16_round(float x) { return f16_load(f16_store(x)); }\n"
	"__device__ __forceinline__ float kexp(float x) { return expf(x); }\n"
	"__device__ __forceinline__ float kexp_f16(float x) { return expf(x); }\n"
	"__device__ __forceinline__ float ktanh(float x) { return tanhf(x); }\n"
	"__device__ __forceinline__ float kerf(float x) { return erff(x); }\n"
	"#define KFN __device__ __forceinline__\n"
	"#define KINF __int_as_float(0x7f800000)\n"
	"#define KDIV_INVARIANT(a, b) ((a) / (b))\n";
/* clang-format on */

/* Shared by both: floor division and remainder of indices, and the
 * activation functions, defined as the reference interpreter defines them. */
/* clang-format off */
static const char common_helpers[] =
	"KFN idx_t kfloordiv(idx_t a, idx_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }\n"
	"KFN idx_t kfloormod(idx_t a, idx_t b) { idx_t r = a % b; return r < 0 ? r + b : r; }\n"
	"KFN idx_t kmin(idx_t a, idx_t b) { return a < b ? a : b; }\n"
	"KFN idx_t kmaxi(idx_t a, idx_t b) { return a > b ? a : b; }\n"
	"KFN float kfmod(float a, float b) { return a - b * floorf(a / b); }\n"
	"KFN float ksigmoid(float x) { return 1.0f / (1.0f + kexp(-x)); }\n"
	"KFN float krelu(float x) { return x < 0.0f ? 0.0f : x; }\n"
	"KFN float krsqrt(float x) { return 1.0f / sqrtf(x); }\n"
	"KFN float kgelu(float x) { return 0.5f * x * (1.0f + kerf(x * 0.70710678118654752f)); }\n"
	"KFN float kgelu_tanh(float x)\n"
	"{ return 0.5f * x * (1.0f + ktanh(0.79788456080286536f * (x + 0.044715f * x * x * x))); }\n"
	"KFN float ksilu(float x) { return x * ksigmoid(x); }\n"
	"KFN float kmax(float a, float b) { return b > a ? b : a; }\n"
	"KFN float kmin_f(float a, float b) { return b < a ? b : a; }\n";
/* clang-format on */

void kgen_print_helpers(sched_buf *buf, bool cuda, bool wide_indices)
{
	if (cuda)
		sched_buf_printf(buf, "%stypedef %s idx_t;\n", cuda_helpers,
				 wide_indices ? "long long" : "int");
	else {
		sched_buf_printf(buf, "%s", c_helpers);
		print_f16_vectors(buf);
	}
	sched_buf_printf(buf, "%s\n", common_helpers);
}

static const char *const ctype_names[] = {
	[SCHED_F32] = "float", [SCHED_F16] = "f16_t", [SCHED_BF16] = "bf16_t",
	[SCHED_I32] = "int32_t",
};

const char *kgen_ctype(enum sched_dtype dtype, bool cuda)
{
	return cuda && dtype == SCHED_I32 ? "int" : ctype_names[dtype];
}

static const char *const binop_c[] = {
	[SCHED_ADD] = "+", [SCHED_SUB] = "-", [SCHED_MUL] = "*",
	[SCHED_DIV] = "/", [SCHED_LT] = "<", [SCHED_LE] = "<=",
	[SCHED_GT] = ">", [SCHED_GE] = ">=", [SCHED_EQ] = "==",
	[SCHED_NE] = "!=",
};

/* An integer expression of the op's variables (quasi-affine). */
void kgen_print_index(sched_buf *buf, const kgen_printer *pr,
		      const sched_node *node)
{
	int64_t c;

	if (sched_node_int_const(node, &c))
		return sched_buf_printf(buf, "%lld", (long long)c);
	if (node->kind == SCHED_NODE_VAR)
		return sched_buf_printf(buf, "v_%s", pr->op->vars[node->var].name);
	if (node->kind == SCHED_NODE_UNARY) {
		sched_buf_printf(buf, "(-");
		kgen_print_index(buf, pr, node->args[0]);
		return sched_buf_printf(buf, ")");
	}
	sched_buf_printf(buf, node->op == SCHED_DIV ? "kfloordiv(" :
			      node->op == SCHED_MOD ? "kfloormod(" : "(");
	kgen_print_index(buf, pr, node->args[0]);
	sched_buf_printf(buf, node->op == SCHED_DIV || node->op == SCHED_MOD ?
				      ", " : " %s ", binop_c[node->op]);
	kgen_print_index(buf, pr, node->args[1]);
	sched_buf_printf(buf, ")");
}

/* The offset of an element of "t", row-major in Horner form
 * ((i0 * n1 + i1) * n2 + i2), index d printed by "index". */
static void print_horner(sched_buf *buf, const kgen_printer *pr,
			 const sched_tensor *t, const sched_node *access)
{
	if (t->rank == 0)
		return sched_buf_printf(buf, "0");
	for (int d = 1; d < t->rank; d++)
		sched_buf_printf(buf, "(");
	for (int d = 0; d < t->rank; d++) {
		if (d > 0)
			sched_buf_printf(buf, ") * %lld + ", (long long)t->shape[d]);
		if (access)
			kgen_print_index(buf, pr, access->args[d]);
		else
			sched_buf_printf(buf, "v_%s", pr->op->vars[d].name);
	}
}

/* The element offset of "access". */
void kgen_print_offset(sched_buf *buf, const kgen_printer *pr,
		       const sched_node *access)
{
	print_horner(buf, pr, &pr->graph->tensors[access->tensor], access);
}

/* Row-major from the stage's lo within its largest extents; index d is
 * access->args[d], or the op's target variable d. */
static void print_local_place(sched_buf *buf, const kgen_printer *pr, int stage,
			      const sched_node *access)
{
	const sched_stage *st = &pr->group->stages[stage];

	if (st->rank == 0)
		return sched_buf_printf(buf, "0");
	for (int d = 1; d < st->rank; d++)
		sched_buf_printf(buf, "(");
	for (int d = 0; d < st->rank; d++) {
		if (d > 0)
			sched_buf_printf(buf, ") * %lld + ", (long long)st->extent[d]);
		sched_buf_printf(buf, "(");
		if (access)
			kgen_print_index(buf, pr, access->args[d]);
		else
			sched_buf_printf(buf, "v_%s", pr->op->vars[d].name);
		sched_buf_printf(buf, " - lo_%d_%d)", stage, d);
	}
}

void kgen_print_local_index(sched_buf *buf, const kgen_printer *pr, int stage)
{
	print_local_place(buf, pr, stage, NULL);
}

void kgen_print_local(sched_buf *buf, const kgen_printer *pr, int stage,
		      const sched_node *access)
{
	sched_buf_printf(buf, "local[%lld + ", (long long)pr->group->stages[stage].offset);
	print_local_place(buf, pr, stage, access);
	sched_buf_printf(buf, "]");
}

/* A member recomputed at each read: its macro K_<tensor>(indices). */
static void print_recompute(sched_buf *buf, const kgen_printer *pr,
			    const sched_node *access)
{
	sched_buf_printf(buf, "K_%s(", pr->graph->tensors[access->tensor].name);
	for (int d = 0; d < access->nargs; d++) {
		sched_buf_printf(buf, d ? ", " : "");
		kgen_print_index(buf, pr, access->args[d]);
	}
	sched_buf_printf(buf, ")");
}

/* The place of "access" (or of the same access of another op of one
 * pass) in pr->vectors, or -1. */
static int vector_read(const kgen_printer *pr, const sched_node *access)
{
	for (int i = 0; pr->vectors && i < pr->vectors->n; i++)
		if (sched_node_same(pr->vectors->access[i], access))
			return i;
	return -1;
}

static void print_load(sched_buf *buf, const kgen_printer *pr,
		       const sched_node *access)
{
	const sched_tensor *t = &pr->graph->tensors[access->tensor];
	int stage = pr->group ? sched_group_stage_of(pr->group, t->writer) : -1;
	int vector = vector_read(pr, access);
	const char *open = kgen_load_open(t);

	if (stage >= 0 && pr->group->stages[stage].store == SCHED_STORE_INLINE)
		return print_recompute(buf, pr, access);
	if (stage >= 0 && pr->group->stages[stage].store != SCHED_STORE_GLOBAL)
		return vector >= 0 ? sched_buf_printf(buf, "vec_%d[u]", vector) :
				     kgen_print_local(buf, pr, stage, access);
	if (vector >= 0)
		return sched_buf_printf(buf, "%svec_%d[u]%s",
					pr->vectors->widened ? "" : open, vector,
					pr->vectors->widened ? "" : ")");
	sched_buf_printf(buf, "%st_%s[", open, t->name);
	kgen_print_offset(buf, pr, access);
	sched_buf_printf(buf, "])");
}

void kgen_print_rounded(sched_buf *buf, enum sched_dtype dtype, const char *x)
{
	switch (dtype) {
	case SCHED_F16:
		return sched_buf_printf(buf, "f16_round(%s)", x);
	case SCHED_BF16:
		return sched_buf_printf(buf, "bf16_load(bf16_store(%s))", x);
	case SCHED_I32:
		return sched_buf_printf(buf, "(float)(int)(%s)", x);
	default:
		return sched_buf_printf(buf, "%s", x);
	}
}

const char *kgen_load_open(const sched_tensor *t)
{
	switch (t->dtype) {
	case SCHED_F16: return "f16_load(";
	case SCHED_BF16: return "bf16_load(";
	case SCHED_I32: return "(float)(";
	default: return "(";
	}
}

/* The conversion of a float value to the storage type of tensor "t". */
const char *kgen_store_open(const sched_tensor *t)
{
	switch (t->dtype) {
	case SCHED_F16: return "f16_store(";
	case SCHED_BF16: return "bf16_store(";
	case SCHED_I32: return "(int)(";
	default: return "(";
	}
}

static void print_number(sched_buf *buf, double num)
{
	char text[48];

	snprintf(text, sizeof(text), "%.9g", num);
	if (!strpbrk(text, ".eEn"))
		strcat(text, ".0");
	sched_buf_printf(buf, "%sf", text);
}

static const char *const call_c[SCHED_FUNC_COUNT] = {
	[SCHED_EXP] = "kexp",
	[SCHED_LOG] = "logf",
	[SCHED_SQRT] = "sqrtf",
	[SCHED_RSQRT] = "krsqrt",
	[SCHED_TANH] = "ktanh",
	[SCHED_SIGMOID] = "ksigmoid",
	[SCHED_RELU] = "krelu",
	[SCHED_GELU] = "kgelu",
	[SCHED_GELU_TANH] = "kgelu_tanh",
	[SCHED_SILU] = "ksilu",
	[SCHED_ERF] = "kerf",
	[SCHED_ABS] = "fabsf",
	[SCHED_MAX2] = "kmax",
	[SCHED_MIN2] = "kmin_f",
	[SCHED_POW] = "powf",
};

static bool is_int_comparison(const sched_node *node)
{
	for (int i = 0; i < 2; i++)
		if (sched_index_problem(node->args[i]) || kgen_has_division(node->args[i]))
			return false;
	return true;
}

bool kgen_has_division(const sched_node *node)
{
	if (node->kind == SCHED_NODE_BINARY && node->op == SCHED_DIV)
		return true;
	for (int i = 0; i < node->nargs; i++)
		if (kgen_has_division(node->args[i]))
			return true;
	return false;
}

static bool is_logic(const sched_node *node)
{
	return (node->kind == SCHED_NODE_BINARY && node->op >= SCHED_LT) ||
	       (node->kind == SCHED_NODE_UNARY && node->op == SCHED_NOT);
}

/* A C truth value: comparisons and logic as they are (comparisons of
 * variables alone on integers), any other value compared with zero. */
static void print_cond(sched_buf *buf, const kgen_printer *pr,
		       const sched_node *node)
{
	bool logic = node->kind == SCHED_NODE_BINARY &&
		     (node->op == SCHED_AND || node->op == SCHED_OR);
	bool ints = is_logic(node) && !logic && node->kind == SCHED_NODE_BINARY &&
		    is_int_comparison(node);

	if (!is_logic(node)) {
		kgen_print_value(buf, pr, node);
		return sched_buf_printf(buf, " != 0.0f");
	}
	if (node->kind == SCHED_NODE_UNARY) {
		sched_buf_printf(buf, "!(");
		print_cond(buf, pr, node->args[0]);
		return sched_buf_printf(buf, ")");
	}
	sched_buf_printf(buf, "(");
	for (int i = 0; i < 2; i++) {
		if (i)
			sched_buf_printf(buf, " %s ", node->op == SCHED_AND ? "&&" :
					 node->op == SCHED_OR ? "||" : binop_c[node->op]);
		if (logic)
			print_cond(buf, pr, node->args[i]);
		else if (ints)
			kgen_print_index(buf, pr, node->args[i]);
		else
			kgen_print_value(buf, pr, node->args[i]);
	}
	sched_buf_printf(buf, ")");
}

/* Whether the value of "node" is rounded to f16 before anything reads
 * it: the body of an f16 op that reduces nothing and is not recomputed
 * at its reads (whose macro is not rounded). */
static bool rounded_to_f16(const kgen_printer *pr, const sched_node *node)
{
	int stage = pr->group ? sched_group_stage_of(pr->group, pr->op->index) : -1;

	return node == pr->op->body && pr->op->reducer == SCHED_RED_NONE &&
	       pr->graph->tensors[pr->op->target].dtype == SCHED_F16 &&
	       (stage < 0 || pr->group->stages[stage].store != SCHED_STORE_INLINE);
}

bool kgen_exp_rounded_to_f16(const kgen_printer *pr, const sched_node *node)
{
	return node->kind == SCHED_NODE_CALL && node->op == SCHED_EXP &&
	       rounded_to_f16(pr, node);
}

/* The C function of a call: exp rounded to f16 next has its own. */
static const char *call_name(const kgen_printer *pr, const sched_node *node)
{
	if (kgen_exp_rounded_to_f16(pr, node))
		return "kexp_f16";
	return call_c[node->op];
}

static void print_call(sched_buf *buf, const kgen_printer *pr,
		       const sched_node *node)
{
	if (node->op == SCHED_SELECT) {
		sched_buf_printf(buf, "(");
		print_cond(buf, pr, node->args[0]);
		sched_buf_printf(buf, " ? ");
		kgen_print_value(buf, pr, node->args[1]);
		sched_buf_printf(buf, " : ");
		kgen_print_value(buf, pr, node->args[2]);
		return sched_buf_printf(buf, ")");
	}
	sched_buf_printf(buf, "%s(", call_name(pr, node));
	for (int i = 0; i < node->nargs; i++) {
		sched_buf_printf(buf, i ? ", " : "");
		kgen_print_value(buf, pr, node->args[i]);
	}
	sched_buf_printf(buf, ")");
}

/* Comparisons and logic give 1.0f or 0.0f. */
static void print_logic(sched_buf *buf, const kgen_printer *pr,
			const sched_node *node)
{
	sched_buf_printf(buf, "(");
	print_cond(buf, pr, node);
	sched_buf_printf(buf, " ? 1.0f : 0.0f)");
}

/* A division by a value that does not move along the innermost loop's
 * variable, an elementwise op's last (z[i] in e[i, j] / z[i]): printed as
 * KDIV_INVARIANT, on the cpu a product with the reciprocal (a fused
 * softmax's row took 8% longer with the division, AVX-512, 2026-12-02),
 * on cuda, where no loop takes the reciprocal out, the division. */
static bool divides_by_invariant(const kgen_printer *pr, const sched_node *node)
{
	int last = pr->op->nvars - 1;

	return node->op == SCHED_DIV && pr->op->reducer == SCHED_RED_NONE &&
	       last >= 0 && !sched_node_mentions(node->args[1], last);
}

static void print_binary(sched_buf *buf, const kgen_printer *pr,
			 const sched_node *node)
{
	if (node->op >= SCHED_LT)
		return print_logic(buf, pr, node);
	if (divides_by_invariant(pr, node)) {
		sched_buf_printf(buf, "KDIV_INVARIANT(");
		kgen_print_value(buf, pr, node->args[0]);
		sched_buf_printf(buf, ", ");
		kgen_print_value(buf, pr, node->args[1]);
		return sched_buf_printf(buf, ")");
	}
	sched_buf_printf(buf, node->op == SCHED_MOD ? "kfmod(" : "(");
	kgen_print_value(buf, pr, node->args[0]);
	sched_buf_printf(buf, node->op == SCHED_MOD ? ", " : " %s ", binop_c[node->op]);
	kgen_print_value(buf, pr, node->args[1]);
	sched_buf_printf(buf, ")");
}

/* A float expression of the op's body at the current variables. */
void kgen_print_value(sched_buf *buf, const kgen_printer *pr,
		      const sched_node *node)
{
	switch (node->kind) {
	case SCHED_NODE_NUM:
		return print_number(buf, node->num);
	case SCHED_NODE_VAR:
		return sched_buf_printf(buf, "((float)v_%s)",
					pr->op->vars[node->var].name);
	case SCHED_NODE_ACCESS:
		return print_load(buf, pr, node);
	case SCHED_NODE_CALL:
		return print_call(buf, pr, node);
	case SCHED_NODE_UNARY:
		if (node->op == SCHED_NOT)
			return print_logic(buf, pr, node);
		sched_buf_printf(buf, "(-");
		kgen_print_value(buf, pr, node->args[0]);
		return sched_buf_printf(buf, ")");
	case SCHED_NODE_BINARY:
		return print_binary(buf, pr, node);
	}
}

static const char *const identities[] = {
	[SCHED_RED_NONE] = "0.0f", [SCHED_RED_SUM] = "0.0f",
	[SCHED_RED_MAX] = "-KINF", [SCHED_RED_MIN] = "KINF",
	[SCHED_RED_PROD] = "1.0f",
};

const char *kgen_reducer_identity(enum sched_reducer reducer)
{
	return identities[reducer];
}

/* Whether var v is one whose place a flat index of B's kind gives:
 * "reducing", a k var; else an n var (a target var A does not move). */
static bool decoded_var(const sched_op *op, const sched_contraction *c, bool reducing,
			int v)
{
	return (v >= op->ntarget_vars) == reducing &&
	       (reducing || op->vars[v].hi - op->vars[v].lo == 1 ||
		!sched_node_mentions(op->body->args[1 - c->factor_b], v));
}

int kgen_decoded_vars(const sched_op *op, const sched_contraction *c, bool reducing,
		      kgen_decoded *out)
{
	long long inner = 1;
	int n = 0;

	for (int v = op->nvars - 1; v >= 0; v--) {
		long long extent = op->vars[v].hi - op->vars[v].lo;

		if (!decoded_var(op, c, reducing, v))
			continue;
		out[n++] = (kgen_decoded){op->vars[v].name, op->vars[v].lo, inner, extent};
		inner *= extent;
	}
	return n;
}

void kgen_print_decoded(sched_buf *buf, const kgen_decoded *vars, int n, const char *type,
			const char *flat, const char *indent)
{
	for (int i = 0; i < n; i++)
		sched_buf_printf(buf, "%sconst %s v_%s = %lld + %s / %lld %% %lld;\n%s(void)v_%s;\n",
				 indent, type, vars[i].name, vars[i].lo, flat, vars[i].inner,
				 vars[i].extent, indent, vars[i].name);
}

void kgen_print_reduction_decode(sched_buf *buf, const sched_op *op, const char *indent)
{
	int64_t stride = 1;

	for (int v = op->nvars - 1; v >= op->ntarget_vars; v--) {
		int64_t extent = op->vars[v].hi - op->vars[v].lo;

		sched_buf_printf(buf, "%sconst idx_t v_%s = %lld + (r / %lld) %% %lld;\n",
				 indent, op->vars[v].name, (long long)op->vars[v].lo,
				 (long long)stride, (long long)extent);
		stride *= extent;
	}
}

void kgen_print_strided_reduction(sched_buf *buf, const kgen_printer *pr, int unroll,
				  const char *acc, const char *guard, const char *first,
				  const char *step, const char *end, const char *indent)
{
	const sched_op *op = pr->op;
	char points[32];

	snprintf(points, sizeof(points), "%lld", (long long)sched_op_reduction_points(op));
	sched_buf_printf(buf, "%sfloat %s = %s;\n", indent, acc,
			 kgen_reducer_identity(op->reducer));
	if (guard)
		sched_buf_printf(buf, "%sif (%s)\n", indent, guard);
	sched_buf_printf(buf, "#pragma unroll %d\n%sfor (idx_t r = %s; r < %s; r += %s) {\n",
			 unroll, indent, first, end ? end : points, step);
	kgen_print_reduction_decode(buf, op, "\t\t\t\t");
	sched_buf_printf(buf, "\t\t\t\tconst float term = ");
	kgen_print_value(buf, pr, op->body);
	sched_buf_printf(buf, ";\n\t\t\t\t");
	kgen_print_combine(buf, op->reducer, acc, "term");
	sched_buf_printf(buf, "\n%s}\n", indent);
}

/* "acc = acc (+) x" for the op's reducer, as one statement. */
void kgen_print_combine(sched_buf *buf, enum sched_reducer reducer,
			const char *acc, const char *x)
{
	switch (reducer) {
	case SCHED_RED_MAX:
		return sched_buf_printf(buf, "%s = kmax(%s, %s);", acc, acc, x);
	case SCHED_RED_MIN:
		return sched_buf_printf(buf, "%s = kmin_f(%s, %s);", acc, acc, x);
	case SCHED_RED_PROD:
		return sched_buf_printf(buf, "%s *= %s;", acc, x);
	default:
		return sched_buf_printf(buf, "%s += %s;", acc, x);
	}
}

/* The comment that opens a kernel: its name, the graph key, the op. */
void kgen_print_header(sched_buf *buf, const kgen_printer *pr, const char *name)
{
	sched_buf_printf(buf, "/* tuned kernel %s, graph %.16s\n * op %d: %s\n */\n",
			 name, pr->graph->key, pr->op->index, pr->op->text);
}

/* The offset of the element at the op's target variables. */
void kgen_print_target_offset(sched_buf *buf, const kgen_printer *pr)
{
	print_horner(buf, pr, &pr->graph->tensors[pr->op->target], NULL);
}

bool kgen_op_touches(const sched_op *op, int tensor)
{
	return op->target == tensor || sched_op_reads_tensor(op, tensor);
}

bool kgen_wide_indices(const sched_graph *graph)
{
	for (int t = 0; t < graph->ntensors; t++)
		if (graph->tensors[t].size >= INT32_MAX)
			return true;
	return false;
}

void kgen_print_cuda_entry(sched_buf *buf, const char *name, const char *bounds,
			   bool wrapped)
{
	if (wrapped)
		sched_buf_printf(buf, "static __device__ __forceinline__ void\n%s_tile(", name);
	else
		sched_buf_printf(buf, "extern \"C\" __global__ void __launch_bounds__(%s)\n%s(",
				 bounds, name);
}

void kgen_print_cuda_entry_end(sched_buf *buf, bool wrapped)
{
	sched_buf_printf(buf, "%s)\n{\n", wrapped ? ",\n\tconst unsigned ktile" : "");
}

const char *kgen_cuda_tile(bool wrapped)
{
	return wrapped ? "ktile" : "blockIdx.x";
}

bool kgen_walks_last(const sched_node *access, int var)
{
	const sched_node *index = access->nargs ? access->args[access->nargs - 1] :
						  NULL;

	if (!index || index->kind != SCHED_NODE_VAR || index->var != var)
		return false;
	for (int d = 0; d < access->nargs - 1; d++)
		if (sched_node_mentions(access->args[d], var))
			return false;
	return true;
}
