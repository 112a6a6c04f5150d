/*
 * backend_emulated.c: the CUDA that the cuda backend would run, run on
 * the cpu instead, to check generated CUDA where there is no GPU (tests,
 * `tunectl run --backend emulated`). Slow, and not a device to tune for.
 *
 * A kernel's source is compiled by the system's C++ compiler ($CXX, or
 * c++) after a prelude that defines CUDA's keywords and built-ins, with
 * KGEN_EMULATED defined so that the printers' PTX helpers give way to the
 * prelude's: cp.async as a plain copy trapping on addresses not on 16
 * bytes, and 16-, 8- and 4-byte moves trapping on addresses not on their
 * width; ldmatrix, and mma.sync m16n8k16 (f16,
 * bf16) and m16n8k8 (tf32), computed from the fragments of the whole
 * warp; shuffles; atomicAdd, __threadfence and __ldcg as plain memory
 * operations (a block's threads run one at a time). An entry point the
 * backend appends calls the kernel with cuLaunchKernel's arguments.
 *
 * A launch runs its blocks one after another on the calling thread (so
 * __shared__ arrays are static ones); a block's threads are fibers
 * (ucontext) switched at __syncthreads() and at warp instructions, which
 * exchange a value per lane: a fiber waits until every thread of the
 * block (__syncthreads) or every lane of its warp (an exchange) has
 * arrived, and a block whose threads wait at barriers that can never
 * all be reached fails with "deadlock" instead of hanging. Memory is the
 * host's. Plans with sync (overlapping kernels) and library steps are
 * refused.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "kgen_int.h"

/* The prelude's struct kgen_emulated_runtime, field for field: the
 * running thread's place, and the waits. */
typedef struct emulated_runtime {
	unsigned thread, block, threads, blocks;
	void (*sync_block)(void);
	const void *(*exchange)(const void *mine, unsigned bytes);
	void (*trap)(const char *why);
} emulated_runtime;

/* The prelude: CUDA's keywords and built-ins for a C++ compiler, the
 * thread's place from "runtime", warp instructions over its exchange. */
static const char prelude[] =
	"#include <math.h>\n"
	"#include <stdint.h>\n"
	"#include <string.h>\n"
	"#include <immintrin.h>\n"
	"#include <utility>\n"
	"#define __device__\n"
	"#define __global__\n"
	"#define __forceinline__ inline\n"
	"#define __restrict__ __restrict\n"
	"#define __launch_bounds__(n)\n"
	"#define __align__(n) __attribute__((aligned(n)))\n"
	"#define __shared__ static /* one block runs at a time */\n"
	"struct kgen_emulated_runtime {\n"
	"\tunsigned thread, block, threads, blocks;\n"
	"\tvoid (*sync_block)(void);\n"
	"\tconst void *(*exchange)(const void *mine, unsigned bytes);\n"
	"\tvoid (*trap)(const char *why);\n"
	"};\n"
	"static kgen_emulated_runtime *kemu;\n"
	"extern \"C\" void kgen_emulated_bind(kgen_emulated_runtime *runtime) { kemu = runtime; }\n"
	"struct kemu_index { unsigned x, y, z; };\n"
	"#define threadIdx (kemu_index{kemu->thread, 0, 0})\n"
	"#define blockIdx (kemu_index{kemu->block, 0, 0})\n"
	"#define blockDim (kemu_index{kemu->threads, 1, 1})\n"
	"#define gridDim (kemu_index{kemu->blocks, 1, 1})\n"
	"static inline void __syncthreads(void) { kemu->sync_block(); }\n"
	"/* Blocks run one after another and a block's threads one at a time:\n"
	" * memory is ordered and an atomic is a plain update. */\n"
	"static inline void __threadfence(void) {}\n"
	"static inline unsigned atomicAdd(unsigned *at, unsigned v) { unsigned o = *at; *at = o + v; return o; }\n"
	"static inline float __ldcg(const float *at) { return *at; }\n"
	"static inline void __trap(void) { kemu->trap(\"__trap()\"); }\n"
	"static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }\n"
	"static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }\n"
	"static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }\n"
	"static inline float f16_load(unsigned short h) { return _cvtsh_ss(h); }\n"
	"static inline unsigned short f16_store(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }\n"
	"static inline unsigned kemu_lane(void) { return kemu->thread % 32; }\n"
	"/* Every lane's value of a warp-wide exchange. */\n"
	"template <typename T> static inline const T *kemu_all(const T &mine)\n"
	"{\n"
	"\treturn (const T *)kemu->exchange(&mine, sizeof(T));\n"
	"}\n"
	"static inline float __shfl_xor_sync(unsigned, float v, int o) { return kemu_all(v)[kemu_lane() ^ o]; }\n"
	"static inline float __shfl_down_sync(unsigned, float v, unsigned o)\n"
	"{\n"
	"\tconst float *all = kemu_all(v);\n"
	"\treturn kemu_lane() + o < 32 ? all[kemu_lane() + o] : v;\n"
	"}\n"
	"/* cp.async at once: a copy that completes before it returns; both\n"
	" * addresses on 16 bytes, as the GPU needs. */\n"
	"static inline void copy16(void *shared, const void *global, int bytes)\n"
	"{\n"
	"\tif ((uintptr_t)shared % 16 || (uintptr_t)global % 16)\n"
	"\t\tkemu->trap(\"cp.async of an address not on 16 bytes\");\n"
	"\tmemcpy(shared, global, bytes);\n"
	"\tmemset((char *)shared + bytes, 0, 16 - bytes);\n"
	"}\n"
	"#define copies_commit() ((void)0)\n"
	"/* A move of \"bytes\" at once: both addresses on as many bytes. */\n"
	"static inline void kemu_move(void *to, const void *from, unsigned bytes)\n"
	"{\n"
	"\tif ((uintptr_t)to % bytes || (uintptr_t)from % bytes)\n"
	"\t\tkemu->trap(\"a wide access not on its width\");\n"
	"\tmemcpy(to, from, bytes);\n"
	"}\n"
	"static inline void move16(void *to, const void *from) { kemu_move(to, from, 16); }\n"
	"static inline void move8(void *to, const void *from) { kemu_move(to, from, 8); }\n"
	"static inline void move4(void *to, const void *from) { kemu_move(to, from, 4); }\n"
	"#define copies_wait(n) ((void)0)\n"
	"/* Two 16-bit elements in one register, the first in the low half. */\n"
	"static inline unsigned kemu_pair(const unsigned short *first, const unsigned short *second)\n"
	"{\n"
	"\treturn (unsigned)*first | (unsigned)*second << 16;\n"
	"}\n"
	"/* ldmatrix: lanes 8j to 8j + 7 give the rows of matrix j; lane l gets\n"
	" * row l / 4, elements 2 (l % 4) and the next (transposed: column l / 4,\n"
	" * rows 2 (l % 4) and the next). The 8 rows of a matrix must lie in 8\n"
	" * different groups of 4 banks, which the GPU reads at once: rows that\n"
	" * share banks (a bank conflict) trap, as the layouts exclude them. */\n"
	"static inline void kemu_distinct_banks(const void *const *rows, int matrices)\n"
	"{\n"
	"\tfor (int j = 0; j < matrices; j++) {\n"
	"\t\tunsigned seen = 0;\n"
	"\n"
	"\t\tfor (int l = 8 * j; l < 8 * j + 8; l++)\n"
	"\t\t\tseen |= 1u << (unsigned)((uintptr_t)rows[l] / 16 % 8);\n"
	"\t\tif (seen != 0xffu)\n"
	"\t\t\tkemu->trap(\"ldmatrix rows in the same banks (a bank conflict)\");\n"
	"\t}\n"
	"}\n"
	"static inline void ldmatrix_x4(unsigned *r, const void *p)\n"
	"{\n"
	"\tconst void *const *rows = kemu_all(p);\n"
	"\tunsigned lane = kemu_lane();\n"
	"\n"
	"\tkemu_distinct_banks(rows, 4);\n"
	"\tfor (int j = 0; j < 4; j++) {\n"
	"\t\tconst unsigned short *row = (const unsigned short *)rows[8 * j + lane / 4];\n"
	"\t\tr[j] = kemu_pair(row + lane % 4 * 2, row + lane % 4 * 2 + 1);\n"
	"\t}\n"
	"}\n"
	"static inline void ldmatrix_x2_trans(unsigned *r, const void *p)\n"
	"{\n"
	"\tconst void *const *rows = kemu_all(p);\n"
	"\tunsigned lane = kemu_lane();\n"
	"\n"
	"\tkemu_distinct_banks(rows, 2);\n"
	"\tfor (int j = 0; j < 2; j++) {\n"
	"\t\tconst unsigned short *r0 = (const unsigned short *)rows[8 * j + lane % 4 * 2];\n"
	"\t\tconst unsigned short *r1 = (const unsigned short *)rows[8 * j + lane % 4 * 2 + 1];\n"
	"\t\tr[j] = kemu_pair(r0 + lane / 4, r1 + lane / 4);\n"
	"\t}\n"
	"}\n"
	"struct kemu_fragments { unsigned a[4], b[2]; };\n"
	"enum { KEMU_F16, KEMU_BF16, KEMU_TF32 };\n"
	"/* Element \"part\" of register \"reg\" of a fragment: f16 or bf16 (two to a\n"
	" * register, the first in the low half) or tf32 (one). */\n"
	"static inline float kemu_element(unsigned reg, unsigned part, int kind)\n"
	"{\n"
	"\tunsigned short h = part ? reg >> 16 : reg & 0xffffu;\n"
	"\n"
	"\tif (kind == KEMU_TF32)\n"
	"\t\treturn __uint_as_float(reg);\n"
	"\treturn kind == KEMU_BF16 ? __uint_as_float((unsigned)h << 16) : _cvtsh_ss(h);\n"
	"}\n"
	"/* mma.sync m16n8k16 (f16, bf16) or m16n8k8 (tf32): A 16 x K (row) and\n"
	" * B K x 8 (col) from the warp's fragments. With e elements a register\n"
	" * (2, or 1 for tf32) and h = K / 2, lane l (g = l / 4, t = l % 4) holds\n"
	" * A[g (+8)][e t .. e t + e - 1 (+h)], B[e t .. (+h)][g] and D[g (+8)][2t (+1)]. */\n"
	"static inline void kemu_mma(float *d, const unsigned *a, const unsigned *b, int kind)\n"
	"{\n"
	"\tkemu_fragments mine;\n"
	"\tmemcpy(mine.a, a, sizeof(mine.a));\n"
	"\tmemcpy(mine.b, b, sizeof(mine.b));\n"
	"\tconst kemu_fragments *all = kemu_all(mine);\n"
	"\tunsigned lane = kemu_lane(), per = kind == KEMU_TF32 ? 1 : 2, half = 4 * per;\n"
	"\n"
	"\tfor (int r = 0; r < 4; r++) {\n"
	"\t\tunsigned row = lane / 4 + (r >= 2 ? 8 : 0), col = lane % 4 * 2 + (r & 1);\n"
	"\t\tfloat sum = 0.0f;\n"
	"\n"
	"\t\tfor (unsigned k = 0; k < 2 * half; k++) {\n"
	"\t\t\tconst kemu_fragments *fa = &all[row % 8 * 4 + k % half / per];\n"
	"\t\t\tconst kemu_fragments *fb = &all[col * 4 + k % half / per];\n"
	"\n"
	"\t\t\tsum += kemu_element(fa->a[(row >= 8) + 2 * (k >= half)], k % per, kind) *\n"
	"\t\t\t       kemu_element(fb->b[k >= half], k % per, kind);\n"
	"\t\t}\n"
	"\t\td[r] += sum;\n"
	"\t}\n"
	"}\n"
	"static inline void mma_f16(float *d, const unsigned *a, const unsigned *b)\n"
	"{\n"
	"\tkemu_mma(d, a, b, KEMU_F16);\n"
	"}\n"
	"static inline void mma_bf16(float *d, const unsigned *a, const unsigned *b)\n"
	"{\n"
	"\tkemu_mma(d, a, b, KEMU_BF16);\n"
	"}\n"
	"static inline void mma_tf32(float *d, const unsigned *a, const unsigned *b)\n"
	"{\n"
	"\tkemu_mma(d, a, b, KEMU_TF32);\n"
	"}\n"
	"/* cvt.rna.tf32.f32: 10 bits of mantissa, to nearest, ties away from zero. */\n"
	"static inline unsigned tf32(unsigned x)\n"
	"{\n"
	"\treturn (x & 0x7f800000u) == 0x7f800000u ? x : (x + 0x1000u) & 0xffffe000u;\n"
	"}\n"
	"/* A kernel called with cuLaunchKernel's arguments: the address of each. */\n"
	"template <typename... P, size_t... I>\n"
	"static void kemu_call_with(void (*f)(P...), void **params, std::index_sequence<I...>)\n"
	"{\n"
	"\tf(*(P *)params[I]...);\n"
	"}\n"
	"template <typename... P> static void kemu_call(void (*f)(P...), void **params)\n"
	"{\n"
	"\tkemu_call_with(f, params, std::index_sequence_for<P...>{});\n"
	"}\n";

#define WARP 32
#define SLOT_BYTES 64                    /* the most a lane gives to one exchange */
#define FIBER_STACK ((size_t)256 << 10) /* its lowest page a guard */

enum fiber_state { FIBER_RUNNABLE, FIBER_AT_BARRIER, FIBER_AT_EXCHANGE, FIBER_DONE };

typedef struct fiber {
	ucontext_t context;
	enum fiber_state state;
	unsigned exchanges; /* made so far: their parity picks the slots */
} fiber;

/* The block being run. Slots hold each lane's value of an exchange, two
 * sets so that a lane may give its next value while others still read
 * the last (none can get further ahead: the next exchange waits). */
typedef struct block_run {
	fiber *fibers;
	char *stacks;
	unsigned nthreads, current;
	ucontext_t scheduler;
	void (*entry)(void **params);
	void **params;
	unsigned char *slots[2];
	const char *failure;
} block_run;

/* One block runs at a time in a process: it is "running", and the
 * prelude reads the current thread from "runtime". */
static pthread_mutex_t emulator = PTHREAD_MUTEX_INITIALIZER;
static block_run *running;

static void wait_in(enum fiber_state state)
{
	fiber *f = &running->fibers[running->current];

	f->state = state;
	swapcontext(&f->context, &running->scheduler);
}

static void sync_block(void)
{
	wait_in(FIBER_AT_BARRIER);
}

/* Gives "mine" to the warp; once every lane has, all the warp's values,
 * lane by lane "bytes" apart. */
static const void *exchange(const void *mine, unsigned bytes)
{
	unsigned t = running->current;
	fiber *f = &running->fibers[t];
	unsigned char *warp = running->slots[f->exchanges++ % 2] +
			      (size_t)(t / WARP) * WARP * SLOT_BYTES;

	if (bytes > SLOT_BYTES) {
		running->failure = "an exchange of more than 64 bytes a lane";
		bytes = SLOT_BYTES;
	}
	memcpy(warp + (size_t)(t % WARP) * bytes, mine, bytes);
	wait_in(FIBER_AT_EXCHANGE);
	return warp;
}

/* The thread stops, and the launch fails with "why". */
static void trap(const char *why)
{
	running->failure = why;
	wait_in(FIBER_DONE);
}

static emulated_runtime runtime = {.sync_block = sync_block, .exchange = exchange,
				   .trap = trap};

static void fiber_main(void)
{
	running->entry(running->params);
	running->fibers[running->current].state = FIBER_DONE;
}

static void set_state(block_run *b, unsigned first, unsigned end, enum fiber_state from,
		      enum fiber_state to)
{
	for (unsigned t = first; t < end; t++)
		if (b->fibers[t].state == from)
			b->fibers[t].state = to;
}

static unsigned count_state(const block_run *b, unsigned first, unsigned end,
			    enum fiber_state state)
{
	unsigned n = 0;

	for (unsigned t = first; t < end; t++)
		n += b->fibers[t].state == state;
	return n;
}

/* Lets go the fibers that may: all at the barrier once every thread not
 * returned is there, and a warp whose every lane is at an exchange.
 * Whether any went. */
static bool release(block_run *b)
{
	unsigned live = b->nthreads - count_state(b, 0, b->nthreads, FIBER_DONE);
	bool released = false;

	if (live && count_state(b, 0, b->nthreads, FIBER_AT_BARRIER) == live) {
		set_state(b, 0, b->nthreads, FIBER_AT_BARRIER, FIBER_RUNNABLE);
		return true;
	}
	for (unsigned first = 0; first < b->nthreads; first += WARP) {
		unsigned end = first + WARP < b->nthreads ? first + WARP : b->nthreads;

		if (count_state(b, first, end, FIBER_AT_EXCHANGE) == end - first) {
			set_state(b, first, end, FIBER_AT_EXCHANGE, FIBER_RUNNABLE);
			released = true;
		}
	}
	return released;
}

/* Thread t's fiber, to start at fiber_main on its stack (above the
 * guard page); a function of its own, as getcontext returns twice. */
static void start_fiber(block_run *b, unsigned t)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	fiber *f = &b->fibers[t];

	getcontext(&f->context);
	f->context.uc_stack.ss_sp = b->stacks + t * FIBER_STACK + page;
	f->context.uc_stack.ss_size = FIBER_STACK - page;
	f->context.uc_link = &b->scheduler;
	makecontext(&f->context, fiber_main, 0);
	f->state = FIBER_RUNNABLE;
	f->exchanges = 0;
}

/* Block "block": each runnable fiber in turn until it waits or returns,
 * then the waits that can end do, until all have returned. */
static int run_block(block_run *b, unsigned block, const char *name, kgen_error *err)
{
	runtime.block = block;
	for (unsigned t = 0; t < b->nthreads; t++)
		start_fiber(b, t);
	do {
		for (unsigned t = 0; t < b->nthreads; t++)
			if (b->fibers[t].state == FIBER_RUNNABLE) {
				b->current = runtime.thread = t;
				swapcontext(&b->scheduler, &b->fibers[t].context);
			}
		if (b->failure)
			return kgen_fail(err, KGEN_EWRONG, "kernel '%s', block %u: %s", name,
					 block, b->failure);
	} while (release(b));
	if (count_state(b, 0, b->nthreads, FIBER_DONE) < b->nthreads)
		return kgen_fail(err, KGEN_EWRONG, "kernel '%s', block %u: deadlock: %u "
				 "threads wait at __syncthreads(), %u in warp instructions "
				 "and %u have returned", name, block,
				 count_state(b, 0, b->nthreads, FIBER_AT_BARRIER),
				 count_state(b, 0, b->nthreads, FIBER_AT_EXCHANGE),
				 count_state(b, 0, b->nthreads, FIBER_DONE));
	return KGEN_OK;
}

static void free_block_run(block_run *b)
{
	if (b->stacks && b->stacks != MAP_FAILED)
		munmap(b->stacks, b->nthreads * FIBER_STACK);
	free(b->fibers);
	free(b->slots[0]);
	free(b->slots[1]);
	free(b->params);
}

/* The fibers of a block of "launch", their stacks (guard pages below),
 * slots and cuLaunchKernel's arguments. */
static int make_block_run(const kgen_launch *launch, block_run *b, kgen_error *err)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), warps = (launch->threads + WARP - 1) / WARP;

	*b = (block_run){.nthreads = launch->threads,
			 .entry = (void (*)(void **))launch->function};
	b->fibers = calloc(b->nthreads, sizeof(fiber));
	b->params = calloc(launch->ntensors + 1, sizeof(void *));
	b->slots[0] = calloc(warps, WARP * SLOT_BYTES);
	b->slots[1] = calloc(warps, WARP * SLOT_BYTES);
	b->stacks = mmap(NULL, b->nthreads * FIBER_STACK, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (!b->fibers || !b->params || !b->slots[0] || !b->slots[1] ||
	    b->stacks == MAP_FAILED) {
		free_block_run(b);
		return kgen_fail(err, KGEN_ENOMEM, "out of memory for %u emulated threads",
				 launch->threads);
	}
	for (unsigned t = 0; t < b->nthreads; t++)
		mprotect(b->stacks + t * FIBER_STACK, page, PROT_NONE);
	for (int t = 0; t < launch->ntensors; t++)
		b->params[t] = &launch->tensors[t];
	if (launch->scratch)
		b->params[launch->ntensors] = (void *)&launch->scratch;
	return KGEN_OK;
}

static int run_launch(const kgen_launch *launch, kgen_error *err)
{
	block_run b;
	int rc;

	if (launch->sync.wrapped || launch->library)
		return kgen_fail(err, KGEN_EBACKEND, "kernel '%s': the emulated backend runs "
				 "neither sync nor library steps", launch->name);
	if ((rc = make_block_run(launch, &b, err)) < 0)
		return rc;
	pthread_mutex_lock(&emulator);
	running = &b;
	runtime.threads = launch->threads;
	runtime.blocks = launch->blocks;
	for (unsigned block = 0; block < launch->blocks && rc == KGEN_OK; block++)
		rc = run_block(&b, block, launch->name, err);
	running = NULL;
	pthread_mutex_unlock(&emulator);
	free_block_run(&b);
	return rc;
}

static int emulated_run(kgen_backend *backend, const kgen_launch *launches, int n,
			double *ms, kgen_error *err)
{
	double start = kgen_now_ms();
	int rc = KGEN_OK;

	(void)backend;
	for (int i = 0; i < n && rc == KGEN_OK; i++)
		rc = run_launch(&launches[i], err);
	if (ms)
		*ms = kgen_now_ms() - start;
	return rc;
}

static int emulated_enqueue(kgen_backend *backend, const kgen_launch *launches, int n,
			    void *stream, kgen_error *err)
{
	if (stream)
		return kgen_fail(err, KGEN_EBACKEND, "the emulated backend has no streams: "
				 "give NULL");
	return emulated_run(backend, launches, n, NULL, err);
}

/* ---- compiling ---- */

typedef struct emulated_state {
	char dir[64]; /* where sources and objects are written */
	int compiled; /* a counter for file names */
} emulated_state;

static const char *cxx(void)
{
	const char *cxx = getenv("CXX");

	return cxx && *cxx ? cxx : "c++";
}

/* The prelude, "source", and the entry the backend calls. */
static char *emulated_source(const char *source, const char *entry)
{
	sched_buf buf = {0};

	sched_buf_printf(&buf, "%s%s\nextern \"C\" void kgen_emulated_launch(void **params)\n"
			 "{\n\tkemu_call(%s, params);\n}\n", prelude, source, entry);
	return buf.str;
}

static int emulated_compile(kgen_backend *backend, const char *source, const char *entry,
			    void **module, void **function, kgen_error *err)
{
	const char *const command[] = {cxx(), "-std=c++17", "-O1", "-w", "-mf16c", "-fPIC",
				       "-shared", "-DKGEN_EMULATED", NULL};
	emulated_state *state = backend->state;
	char *text = emulated_source(source, entry), obj[PATH_MAX];
	void (*bind)(emulated_runtime *);
	int n = state->compiled++, rc;

	if (!text)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	snprintf(obj, sizeof(obj), "%s/%s_%d.so", state->dir, entry, n);
	rc = kgen_compile_shared(command, state->dir, n, ".cpp", text, entry, obj, err);
	free(text);
	if (rc == KGEN_OK)
		rc = kgen_load_shared(obj, "kgen_emulated_launch", module, function, err);
	unlink(obj);
	if (rc < 0)
		return rc;
	*(void **)&bind = dlsym(*module, "kgen_emulated_bind");
	bind(&runtime);
	return KGEN_OK;
}

static int emulated_prepare(kgen_backend *backend, const char *source, const char *entry,
			    kgen_error *err)
{
	(void)backend;
	(void)source;
	return kgen_fail(err, KGEN_EBACKEND, "kernel '%s': the emulated backend compiles "
			 "as it loads, into no shared folder", entry);
}

static void emulated_unload(kgen_backend *backend, void *module)
{
	(void)backend;
	dlclose(module);
}

static int emulated_alloc(kgen_backend *backend, size_t bytes, void **buffer,
			  kgen_error *err)
{
	(void)backend;
	if (!(*buffer = kgen_host_buffer(bytes ? bytes : 1)))
		return kgen_fail(err, KGEN_ENOMEM, "out of memory for %zu bytes", bytes);
	return KGEN_OK;
}

static void emulated_release(kgen_backend *backend, void *buffer)
{
	(void)backend;
	free(buffer);
}

static int emulated_copy(kgen_backend *backend, void *to, const void *from, size_t bytes,
			 kgen_error *err)
{
	(void)backend;
	(void)err;
	memcpy(to, from, bytes);
	return KGEN_OK;
}

static void emulated_close(kgen_backend *backend)
{
	emulated_state *state = backend->state;

	kgen_empty_folder(state->dir);
	rmdir(state->dir);
	free(state);
}

static const kgen_backend_ops emulated_ops = {
	.name = "emulated",
	.compile = emulated_compile,
	.prepare = emulated_prepare,
	.unload = emulated_unload,
	.alloc = emulated_alloc,
	.release = emulated_release,
	.upload = emulated_copy,
	.download = emulated_copy,
	.run = emulated_run,
	.enqueue = emulated_enqueue,
	.close = emulated_close,
};

/* The folder is named as the cpu backend names its own, so that either
 * removes it once its process is gone. */
int kgen_emulated_open(kgen_backend *backend, kgen_error *err)
{
	emulated_state *state = calloc(1, sizeof(*state));

	if (!state)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	snprintf(state->dir, sizeof(state->dir), "/tmp/tuned-cpu-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(state->dir)) {
		free(state);
		return kgen_fail(err, KGEN_EBACKEND, "cannot make a work folder in /tmp");
	}
	backend->ops = &emulated_ops;
	backend->state = state;
	backend->cores = 1;
	snprintf(backend->description, sizeof(backend->description),
		 "emulated: CUDA kernels run on the cpu, a block at a time (%s)", cxx());
	return KGEN_OK;
}
