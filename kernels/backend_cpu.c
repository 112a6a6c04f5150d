/*
 * backend_cpu.c: kernels as C, compiled by the system compiler into a
 * shared object that is dlopen'd; timed with the monotonic clock.
 *
 * The compiler is $CC, or cc: cc -O3 -march=native -fno-math-errno -fopenmp
 * -shared -fPIC (no errno: sqrt and the like vectorize; results do not change),
 * and on x86-64 -mprefer-vector-width=512: with AVX-512, KVEC is 16 floats
 * and the f16 conversions are 512 bits wide, and loops GCC vectorized in
 * 256 bits (its default there) passed their vectors to them through the
 * stack, where a 512-bit load of two 256-bit stores stalls (a softmax
 * kernel ran 2.5 times slower). Without AVX-512 the flag changes nothing.
 * With a shared folder (kgen_backend_share), objects are named by the
 * SHA-256 of their source, <sha>.so, looked for there before compiling and
 * left there after.
 * Before each timed run the plan's own bytes are evicted from the caches
 * (CLFLUSHOPT, where the cpu has it and they are fewer than the sweep's),
 * or else a buffer twice the size of the last-level cache (8 to 64 MiB)
 * is written, so that every run starts from cold caches.
 */
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "kgen_int.h"

extern char **environ;

/* A compiled kernel, kept loaded for reuse: a search compiles the same
 * kernel source again and again (a candidate differs from its parents in a
 * kernel or two), and the second time costs nothing. */
typedef struct cpu_module {
	char key[SCHED_KEY_HEX + 1]; /* SHA-256 of the source */
	void *handle;
	void *function;
	int users;
	uint64_t used;
} cpu_module;

#define MAX_MODULES 256

typedef struct cpu_state {
	char dir[64];     /* where sources and objects are written */
	int compiled;     /* a counter for file names */
	char *flush;      /* the cache flush buffer */
	size_t flush_bytes;
	bool clflushopt; /* whether the plan's bytes can be evicted instead */
	cpu_module *modules[MAX_MODULES];
	int nmodules;
	uint64_t clock;
} cpu_state;

typedef void (*cpu_kernel_fn)(void **tensors);

static const char *compiler(void)
{
	const char *cc = getenv("CC");

	return cc && *cc ? cc : "cc";
}

static int write_file(const char *path, const char *text, kgen_error *err)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) < 0) {
		if (f)
			fclose(f);
		return kgen_fail(err, KGEN_EIO, "cannot write '%s': %s", path,
				 strerror(errno));
	}
	return fclose(f) == 0 ? KGEN_OK : kgen_fail(err, KGEN_EIO,
						   "cannot write '%s'", path);
}

/* Runs "command" (a compiler and its flags) on "source_path", making
 * "object_path", with its output in "log_path". */
static int run_compiler(const char *const *command, const char *source_path,
			const char *object_path, const char *log_path, int *status)
{
	const char *argv[32];
	posix_spawn_file_actions_t actions;
	pid_t pid;
	int n = 0, rc;

	while (command[n] && n < 28) {
		argv[n] = command[n];
		n++;
	}
	argv[n++] = "-o";
	argv[n++] = object_path;
	argv[n++] = source_path;
	argv[n] = NULL;
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_addopen(&actions, 1, log_path,
					 O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_adddup2(&actions, 1, 2);
	rc = posix_spawnp(&pid, argv[0], &actions, NULL, (char **)argv, environ);
	posix_spawn_file_actions_destroy(&actions);
	if (rc != 0)
		return rc;
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			return errno;
	return 0;
}

/* Runs "command" on "src"; its output in "log" comes back on failure. */
static int compile_file(const char *const *command, const char *src, const char *obj,
			const char *log, const char *entry, kgen_error *err)
{
	int status = 0, rc;

	if ((rc = run_compiler(command, src, obj, log, &status)) != 0)
		return kgen_fail(err, KGEN_EBACKEND, "cannot run the compiler '%s': %s",
				 command[0], strerror(rc));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		if (err)
			err->log = tuned_read_file(log, NULL);
		return kgen_fail(err, KGEN_ECOMPILE, "%s failed on kernel '%s'",
				 command[0], entry);
	}
	return KGEN_OK;
}

int kgen_compile_shared(const char *const *command, const char *dir, int n,
			const char *suffix, const char *source, const char *entry,
			const char *obj, kgen_error *err)
{
	char src[PATH_MAX], log[PATH_MAX];
	int rc;

	snprintf(src, sizeof(src), "%s/%s_%d%s", dir, entry, n, suffix);
	snprintf(log, sizeof(log), "%s/%s_%d.log", dir, entry, n);
	rc = write_file(src, source, err);
	if (rc == KGEN_OK)
		rc = compile_file(command, src, obj, log, entry, err);
	unlink(src);
	unlink(log);
	return rc;
}

/* 512-bit vectors where AVX-512 has them (the file's comment says why). */
#if defined(__x86_64__)
#define WIDE_VECTORS "-mprefer-vector-width=512",
#else
#define WIDE_VECTORS
#endif

/* Compiles "source" into the shared object "obj", through the work
 * folder. */
static int compile_object(cpu_state *cpu, const char *source, const char *entry,
			  const char *obj, kgen_error *err)
{
	const char *const command[] = {compiler(),      "-O3",
				       "-march=native", "-fno-math-errno",
				       "-fopenmp",      "-shared",
				       "-fPIC",         WIDE_VECTORS NULL};

	return kgen_compile_shared(command, cpu->dir, cpu->compiled++, ".c", source,
				   entry, obj, err);
}

int kgen_load_shared(const char *obj, const char *entry, void **handle,
		     void **function, kgen_error *err)
{
	if (!(*handle = dlopen(obj, RTLD_NOW | RTLD_LOCAL)))
		return kgen_fail(err, KGEN_EBACKEND, "cannot load '%s': %s", obj,
				 dlerror());
	if (!(*function = dlsym(*handle, entry))) {
		dlclose(*handle);
		*handle = NULL;
		return kgen_fail(err, KGEN_EBACKEND, "the object of '%s' has no "
				 "function '%s'", entry, entry);
	}
	return KGEN_OK;
}

/* The object of "source" in the shared folder, compiled there first
 * (under a temporary name, then renamed) unless it is there already. */
static int cpu_prepare(kgen_backend *backend, const char *source,
		       const char *entry, kgen_error *err)
{
	char obj[PATH_MAX], temp[PATH_MAX];
	int rc;

	kgen_share_path(backend, source, ".so", obj, sizeof(obj));
	if (kgen_share_has(obj))
		return KGEN_OK;
	kgen_share_temp(obj, temp, sizeof(temp));
	if ((rc = compile_object(backend->state, source, entry, temp, err)) < 0) {
		unlink(temp);
		return rc;
	}
	return kgen_share_publish(temp, obj, err);
}

/* Without a shared folder the object is removed as soon as it is loaded
 * (the mapping stays), so a worker killed later leaves nothing behind but
 * its folder; with one, it is loaded from there and stays. */
static int compile_new(kgen_backend *backend, const char *source,
		       const char *entry, void **handle, void **function,
		       kgen_error *err)
{
	cpu_state *cpu = backend->state;
	char obj[PATH_MAX];
	int rc;

	if (backend->share) {
		kgen_share_path(backend, source, ".so", obj, sizeof(obj));
		if ((rc = cpu_prepare(backend, source, entry, err)) < 0)
			return rc;
		return kgen_load_shared(obj, entry, handle, function, err);
	}
	snprintf(obj, sizeof(obj), "%s/%s_%d.so", cpu->dir, entry, cpu->compiled);
	rc = compile_object(cpu, source, entry, obj, err);
	if (rc == KGEN_OK)
		rc = kgen_load_shared(obj, entry, handle, function, err);
	unlink(obj);
	return rc;
}

static cpu_module *find_module(cpu_state *cpu, const char *key)
{
	for (int i = 0; i < cpu->nmodules; i++)
		if (!strcmp(cpu->modules[i]->key, key))
			return cpu->modules[i];
	return NULL;
}

/* A free slot: a new one, or that of the least recently used module that
 * no program uses (unloaded); -1 when all are in use. */
static int free_slot(cpu_state *cpu)
{
	int oldest = -1;

	if (cpu->nmodules < MAX_MODULES)
		return cpu->nmodules++;
	for (int i = 0; i < cpu->nmodules; i++)
		if (!cpu->modules[i]->users &&
		    (oldest < 0 || cpu->modules[i]->used < cpu->modules[oldest]->used))
			oldest = i;
	if (oldest >= 0) {
		dlclose(cpu->modules[oldest]->handle);
		free(cpu->modules[oldest]);
	}
	return oldest;
}

static int cpu_compile(kgen_backend *backend, const char *source,
		       const char *entry, void **module, void **function,
		       kgen_error *err)
{
	cpu_state *cpu = backend->state;
	char key[SCHED_KEY_HEX + 1];
	cpu_module *m;
	int slot = -1, rc;

	sched_sha256_hex(source, strlen(source), key);
	if (!(m = find_module(cpu, key))) {
		if (!(m = calloc(1, sizeof(*m))))
			return kgen_fail(err, KGEN_ENOMEM, "out of memory");
		rc = compile_new(backend, source, entry, &m->handle, &m->function, err);
		if (rc == KGEN_OK && (slot = free_slot(cpu)) < 0)
			rc = kgen_fail(err, KGEN_EBACKEND, "more than %d kernels in use",
				       MAX_MODULES);
		if (rc < 0) {
			if (m->handle)
				dlclose(m->handle);
			free(m);
			return rc;
		}
		memcpy(m->key, key, sizeof(key));
		cpu->modules[slot] = m;
	}
	m->users++;
	m->used = ++cpu->clock;
	*module = m;
	*function = m->function;
	return KGEN_OK;
}

static void cpu_unload(kgen_backend *backend, void *module)
{
	cpu_module *m = module;

	(void)backend;
	m->users--;
}

/* Tensors of 2 MiB and more are asked to live on huge pages from the
 * start: otherwise the kernel may make them huge later, in the
 * background, and a kernel timed after that runs faster than the same
 * kernel timed before (twice as fast, on the VM this was written on), a
 * drift that would pass for a better schedule. */
#define HUGE_PAGE ((size_t)2 << 20)

void *kgen_host_buffer(size_t bytes)
{
	size_t align = bytes >= HUGE_PAGE ? HUGE_PAGE : 64;
	void *buffer = aligned_alloc(align, (bytes + align - 1) / align * align);

	if (buffer && align == HUGE_PAGE)
		madvise(buffer, (bytes + align - 1) / align * align, MADV_HUGEPAGE);
	return buffer;
}

static int cpu_alloc(kgen_backend *backend, size_t bytes, void **buffer,
		     kgen_error *err)
{
	(void)backend;
	if (!(*buffer = kgen_host_buffer(bytes)))
		return kgen_fail(err, KGEN_ENOMEM, "cannot allocate %zu bytes", bytes);
	return KGEN_OK;
}

static void cpu_release(kgen_backend *backend, void *buffer)
{
	(void)backend;
	free(buffer);
}

static int cpu_copy(kgen_backend *backend, void *to, const void *from,
		    size_t bytes, kgen_error *err)
{
	(void)backend;
	(void)err;
	memcpy(to, from, bytes);
	return KGEN_OK;
}

double kgen_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Every cache line of the cpu's caches replaced: a sweep of the flush
 * buffer, twice the last level's size (at most 64 MiB). */
static void sweep_caches(cpu_state *cpu)
{
	static volatile char sink;

	for (size_t i = 0; i < cpu->flush_bytes; i += 64)
		cpu->flush[i] = (char)(cpu->flush[i] + 1);
	sink = cpu->flush[cpu->flush_bytes / 2];
	(void)sink;
}

#if defined(__x86_64__)
/* The bytes the launches touch (their tensors, which they share, and
 * their scratch), or 0 when a size is not known. */
static size_t launch_bytes(const kgen_launch *launches, int n)
{
	size_t total = 0;

	if (!launches[0].bytes)
		return 0;
	for (int t = 0; t < launches[0].ntensors; t++)
		total += launches[0].tensors[t] ? launches[0].bytes[t] : 0;
	for (int i = 0; i < n; i++) {
		if (launches[i].tensors != launches[0].tensors)
			return 0;
		total += launches[i].scratch_bytes;
	}
	return total;
}

/* Whether the cpu has CLFLUSHOPT (CPUID leaf 7, EBX bit 23). */
static bool has_clflushopt(void)
{
	unsigned a, b, c, d;

	return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 23 & 1);
}

/* The lines of [start, start + bytes) out of every cache level. */
__attribute__((target("clflushopt"))) static void evict(const void *start, size_t bytes)
{
	for (size_t i = 0; i < bytes; i += 64)
		__builtin_ia32_clflushopt((const char *)start + i);
	if (bytes)
		__builtin_ia32_clflushopt((const char *)start + bytes - 1);
}

/* The launches' bytes out of every cache (CLFLUSHOPT), where the cpu has
 * it and they are known and fewer than a sweep's: the same cold start at
 * a fraction of the sweep's time for a plan of small tensors (an
 * encoder's backward graph, 2.4 MB of 130 ops, evicts in about 0.35 ms on
 * this VM, where each timed run of each of its kernels swept 64 MiB in
 * 8 to 10 ms; CLFLUSH, ordered line by line, took 2 ms a MB, slower than
 * the sweep); else the sweep. */
static void flush_caches(cpu_state *cpu, const kgen_launch *launches, int n)
{
	size_t bytes = cpu->clflushopt ? launch_bytes(launches, n) : 0;

	if (!bytes || bytes > cpu->flush_bytes) {
		sweep_caches(cpu);
		return;
	}
	for (int t = 0; t < launches[0].ntensors; t++)
		if (launches[0].tensors[t])
			evict(launches[0].tensors[t], launches[0].bytes[t]);
	for (int i = 0; i < n; i++)
		if (launches[i].scratch)
			evict(launches[i].scratch, launches[i].scratch_bytes);
	__builtin_ia32_mfence();
}
#else
static void flush_caches(cpu_state *cpu, const kgen_launch *launches, int n)
{
	(void)launches;
	(void)n;
	sweep_caches(cpu);
}
#endif

static void call_kernels(const kgen_launch *launches, int n)
{
	for (int i = 0; i < n; i++)
		((cpu_kernel_fn)launches[i].function)(launches[i].tensors);
}

static int cpu_run(kgen_backend *backend, const kgen_launch *launches, int n,
		   double *ms, kgen_error *err)
{
	double start;

	(void)err;
	if (ms)
		flush_caches(backend->state, launches, n);
	start = kgen_now_ms();
	call_kernels(launches, n);
	if (ms)
		*ms = kgen_now_ms() - start;
	return KGEN_OK;
}

static int cpu_enqueue(kgen_backend *backend, const kgen_launch *launches, int n,
		       void *stream, kgen_error *err)
{
	(void)backend;
	if (stream)
		return kgen_fail(err, KGEN_EBACKEND, "the cpu backend has no streams: "
				 "give NULL");
	call_kernels(launches, n);
	return KGEN_OK;
}

/* Removes the files of "dir" (no subfolders) and the folder. */
static void remove_dir(const char *dir)
{
	kgen_empty_folder(dir);
	rmdir(dir);
}

static void cpu_close(kgen_backend *backend)
{
	cpu_state *cpu = backend->state;

	for (int i = 0; i < cpu->nmodules; i++) {
		dlclose(cpu->modules[i]->handle);
		free(cpu->modules[i]);
	}
	remove_dir(cpu->dir);
	free(cpu->flush);
	free(cpu);
}

static const kgen_backend_ops cpu_ops = {
	.name = "cpu",
	.compile = cpu_compile,
	.prepare = cpu_prepare,
	.unload = cpu_unload,
	.alloc = cpu_alloc,
	.release = cpu_release,
	.upload = cpu_copy,
	.download = cpu_copy,
	.run = cpu_run,
	.enqueue = cpu_enqueue,
	.close = cpu_close,
};

/* The first line of "model name" in /proc/cpuinfo. */
static void cpu_model(char *out, size_t size)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];

	snprintf(out, size, "unknown cpu");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
			snprintf(out, size, "%s", strchr(line, ':') + 2);
			out[strcspn(out, "\n")] = 0;
			break;
		}
	if (f)
		fclose(f);
}

/* The first line of "$CC --version", run through the shell-free spawn. */
static void compiler_version(const cpu_state *cpu, char *out, size_t size)
{
	const char *argv[] = {compiler(), "--version", NULL};
	posix_spawn_file_actions_t actions;
	char log[96], *text;
	int status;
	pid_t pid;

	snprintf(out, size, "%s", compiler());
	snprintf(log, sizeof(log), "%s/version.txt", cpu->dir);
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (posix_spawnp(&pid, argv[0], &actions, NULL, (char **)argv, environ) == 0 &&
	    waitpid(pid, &status, 0) == pid && (text = tuned_read_file(log, NULL))) {
		text[strcspn(text, "\n")] = 0;
		snprintf(out, size, "%s", text);
		free(text);
	}
	posix_spawn_file_actions_destroy(&actions);
}

/* Twice the last-level cache, between 8 and 64 MiB: a virtual machine
 * may report its host's whole L3, of which it holds a share. */
static size_t flush_size(void)
{
	long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
	size_t bytes = l3 > 0 ? 2 * (size_t)l3 : 0;
	size_t lo = (size_t)8 << 20, hi = (size_t)64 << 20;

	return bytes < lo ? lo : bytes > hi ? hi : bytes;
}

/* Kernels are unloaded after use, and the last one to go would take the
 * OpenMP runtime with it while its idle threads still run in it: keep
 * the runtime loaded for the life of the process. */
static void pin_openmp_runtime(void)
{
	static void *runtime;

	if (!runtime)
		runtime = dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
}

/* Work folders are named /tmp/tuned-cpu-<pid>-XXXXXX; those of processes
 * that are gone (killed workers) are removed. */
static void remove_stale_dirs(void)
{
	DIR *tmp = opendir("/tmp");
	struct dirent *entry;
	char path[300];
	int pid;

	while (tmp && (entry = readdir(tmp)))
		if (sscanf(entry->d_name, "tuned-cpu-%d-", &pid) == 1 && pid > 0 &&
		    kill(pid, 0) < 0 && errno == ESRCH) {
			snprintf(path, sizeof(path), "/tmp/%s", entry->d_name);
			remove_dir(path);
		}
	if (tmp)
		closedir(tmp);
}

int kgen_cpu_open(kgen_backend *backend, kgen_error *err)
{
	cpu_state *cpu = calloc(1, sizeof(*cpu));
	char model[128], version[128];

	if (!cpu)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	remove_stale_dirs();
	snprintf(cpu->dir, sizeof(cpu->dir), "/tmp/tuned-cpu-%d-XXXXXX", (int)getpid());
	cpu->flush_bytes = flush_size();
#if defined(__x86_64__)
	cpu->clflushopt = has_clflushopt();
#endif
	if (!mkdtemp(cpu->dir) || !(cpu->flush = kgen_host_buffer(cpu->flush_bytes))) {
		free(cpu->flush);
		free(cpu);
		return kgen_fail(err, KGEN_EBACKEND, "cannot make a work folder "
				 "in /tmp: %s", strerror(errno));
	}
	memset(cpu->flush, 0, cpu->flush_bytes);
	pin_openmp_runtime();
	backend->ops = &cpu_ops;
	backend->state = cpu;
	backend->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
	cpu_model(model, sizeof(model));
	compiler_version(cpu, version, sizeof(version));
	snprintf(backend->description, sizeof(backend->description),
		 "cpu: %s, %d cores, %s", model, backend->cores, version);
	return KGEN_OK;
}
