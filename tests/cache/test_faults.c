/*
 * test_faults.c: the cache when things go wrong: damaged and foreign
 * files (moved aside, logged, a fresh cache started), paths that cannot
 * be opened (an error, nothing moved), a writer killed at random moments
 * (nothing committed is lost), and every allocation and every write, sync
 * or truncate failing in turn (a clean error, never a damaged file).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache_test.h"

TestSuite(faults, .init = fx_setup, .fini = fx_teardown, .timeout = 300);

/* ---- damaged and foreign files ---- */

/* A cache of a few hundred KB with garbage over its middle third. */
static int64_t make_damaged(void)
{
	cache *c = fx_open();
	unsigned seed = 7;
	int64_t size, pages;
	char page[4096];
	FILE *f;

	for (int n = 1; n <= 4; n++) {
		put_graph(c, n, NULL);
		for (int v = 0; v < 3; v++)
			publish(c, n, DEVICE_CPU, CODEGEN, v, 20000);
	}
	cache_close(c);
	size = file_size(fx.path);
	pages = size / 4096;
	cr_assert_gt(pages, 30);
	f = fopen(fx.path, "r+b");
	cr_assert_not_null(f);
	for (int64_t p = pages / 3; p < 2 * pages / 3; p++) {
		for (size_t i = 0; i < sizeof(page); i++)
			page[i] = (char)rand_r(&seed);
		fseek(f, p * 4096, SEEK_SET);
		fwrite(page, 1, sizeof(page), f);
	}
	fclose(f);
	return size;
}

/* Checks that the damage was moved to "<path>.damaged-<now>" (of "size"
 * bytes), told once to the log and to "err", and that the fresh cache in
 * "c" works. */
static void expect_recovered(cache *c, const cache_error *err, int64_t size)
{
	char damaged[400];

	snprintf(damaged, sizeof(damaged), "%s.damaged-%lld", fx.path,
		 (long long)fx.now);
	cr_expect_eq(file_size(damaged), size);
	cr_expect_eq(fx.error_logs, 1);
	cr_expect(strstr(fx.error_log, fx.path), "%s", fx.error_log);
	cr_expect(strstr(fx.error_log, damaged), "%s", fx.error_log);
	cr_expect(strstr(fx.error_log, "is damaged"), "%s", fx.error_log);
	cr_expect_str_eq(err->message, fx.error_log);
	cr_expect_eq(err->code, CACHE_RECOVERED);
	put_graph(c, 1, NULL);
	cr_expect_eq(publish(c, 1, DEVICE_CPU, CODEGEN, 1, 10), 1);
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), 1);
	cache_close(c);
	/* The fresh cache is sound: it opens without a word. */
	c = fx_open();
	cr_expect_eq(fx.error_logs, 1);
	cache_close(c);
}

Test(faults, damaged_pages_are_moved_aside_and_a_fresh_cache_starts)
{
	int64_t size = make_damaged();
	cache_options o = fx_options();
	cache_error err = { 0 };
	cache *c = NULL;
	int rc;

	rc = cache_open(fx.path, &o, &c, &err);
	cr_assert_eq(rc, CACHE_RECOVERED, "%d %s", rc, err.message);
	cr_assert_not_null(c);
	cr_log_info("%s", err.message);
	expect_recovered(c, &err, size);
}

Test(faults, damaged_pages_are_found_by_the_quick_check_too)
{
	int64_t size = make_damaged();
	cache_options o = fx_options();
	cache_error err = { 0 };
	cache *c = NULL;
	int rc;

	o.full_check_bytes = -1;
	rc = cache_open(fx.path, &o, &c, &err);
	cr_assert_eq(rc, CACHE_RECOVERED, "%d %s", rc, err.message);
	cr_log_info("%s", err.message);
	expect_recovered(c, &err, size);
}

static void write_file(const char *path, const char *text, int times)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "%s", path);
	for (int i = 0; i < times; i++)
		fputs(text, f);
	fclose(f);
}

Test(faults, a_text_file_is_moved_aside_with_its_wal)
{
	cache_options o = fx_options();
	cache_error err = { 0 };
	char wal[400], moved_wal[400];
	cache *c = NULL;
	int rc;

	write_file(fx.path, "this is not a database\n", 100);
	snprintf(wal, sizeof(wal), "%s-wal", fx.path);
	write_file(wal, "nor is this a wal\n", 10);
	rc = cache_open(fx.path, &o, &c, &err);
	cr_assert_eq(rc, CACHE_RECOVERED, "%d %s", rc, err.message);
	cr_expect(strstr(err.message, "not a database"), "%s", err.message);
	snprintf(moved_wal, sizeof(moved_wal), "%s.damaged-%lld-wal", fx.path,
		 (long long)fx.now);
	/* Closing the checking connection may fold a wal into the file (a
	 * garbage one is dropped); if it is still there, it moves too. */
	cr_expect(file_size(moved_wal) == 180 || file_size(moved_wal) == -1);
	snprintf(wal, sizeof(wal), "%s-wal", fx.path);
	expect_recovered(c, &err, 2300);
}

Test(faults, two_damaged_files_in_one_second_keep_both)
{
	cache_options o = fx_options();
	char second[400];
	cache *c = NULL;

	for (int i = 0; i < 2; i++) {
		write_file(fx.path, "garbage\n", 600);
		cr_assert_eq(cache_open(fx.path, &o, &c, NULL), CACHE_RECOVERED);
		cache_close(c);
	}
	snprintf(second, sizeof(second), "%s.damaged-%lld-2", fx.path,
		 (long long)fx.now);
	cr_expect_eq(file_size(second), 4800);
	cr_expect_eq(fx.error_logs, 2);
}

/* ---- paths that cannot be opened: an error, nothing moved ---- */

static void expect_refused(const char *path, const char *why)
{
	cache_options o = fx_options();
	cache_error err = { 0 };
	cache *c = (cache *)&err;
	int rc = cache_open(path, &o, &c, &err);

	cr_expect_eq(rc, CACHE_EIO, "%s: %d %s", path, rc, err.message);
	cr_expect_null(c);
	cr_expect(strstr(err.message, "cannot open cache"), "%s", err.message);
	cr_expect(strstr(err.message, path), "%s", err.message);
	cr_expect(strstr(err.message, why), "'%s' lacks '%s'", err.message, why);
	cr_expect_eq(fx.error_logs, 0);
	cr_log_info("%s", err.message);
}

Test(faults, a_directory_is_refused_not_moved)
{
	struct stat st;

	cr_assert_eq(mkdir(fx.path, 0700), 0);
	expect_refused(fx.path, "is a directory");
	cr_expect_eq(stat(fx.path, &st), 0);
	cr_expect(S_ISDIR(st.st_mode));
}

Test(faults, unreachable_paths_are_refused)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/missing/cache.db", fx.dir);
	expect_refused(path, "no such file or directory");
	snprintf(path, sizeof(path), "%s/file", fx.dir);
	write_file(path, "x", 1);
	snprintf(path, sizeof(path), "%s/file/cache.db", fx.dir);
	expect_refused(path, "not a directory");
	/* Nobody, root included, creates files in /proc. */
	expect_refused("/proc/tuned-cache-test.db", "cannot");
	cr_expect_eq(file_size("/proc/tuned-cache-test.db"), -1);
}

/* Opens "path" as a user who does not own it: as ourselves, or as nobody
 * (65534) in a child process when we are root, who may write anywhere.
 * Returns the code; "message" gets the error. */
static int open_as_other(const char *path, char *message, size_t size)
{
	cache_error err = { 0 };
	cache *c = NULL;
	int fds[2], rc, status;
	pid_t pid;

	if (geteuid() != 0) {
		rc = cache_open(path, NULL, &c, &err);
		cache_close(c);
		snprintf(message, size, "%s", err.message);
		return rc;
	}
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (setgid(65534) != 0 || setuid(65534) != 0)
			_exit(1);
		err.code = cache_open(path, NULL, &c, &err);
		cache_close(c);
		_exit(write(fds[1], &err, sizeof(err)) == sizeof(err) ? 0 : 2);
	}
	close(fds[1]);
	cr_assert_eq(read(fds[0], &err, sizeof(err)), (ssize_t)sizeof(err));
	close(fds[0]);
	waitpid(pid, &status, 0);
	snprintf(message, size, "%s", err.message);
	return err.code;
}

static void expect_refused_to_other(const char *path, const char *why)
{
	char message[512];
	int rc = open_as_other(path, message, sizeof(message));

	cr_expect_eq(rc, CACHE_EIO, "%s: %d %s", path, rc, message);
	cr_expect(strstr(message, "cannot open cache"), "%s", message);
	cr_expect(strstr(message, why), "'%s' lacks '%s'", message, why);
	cr_log_info("%s", message);
}

Test(faults, a_read_only_directory_is_refused)
{
	char dir[300], path[400];

	snprintf(dir, sizeof(dir), "%s/ro", fx.dir);
	snprintf(path, sizeof(path), "%s/cache.db", dir);
	cr_assert_eq(mkdir(dir, 0555), 0);
	cr_assert_eq(chmod(dir, 0555), 0);
	cr_assert_eq(chmod(fx.dir, 0755), 0);
	expect_refused_to_other(path, "permission denied");
	cr_expect_eq(file_size(path), -1);

	/* A writable cache in a directory made read-only: no wal can be made. */
	cache *c = fx_open();
	cache_close(c);
	cr_assert_eq(chmod(fx.path, 0666), 0);
	cr_assert_eq(chmod(fx.dir, 0555), 0);
	expect_refused_to_other(fx.path, "");
	chmod(fx.dir, 0700);
	snprintf(path, sizeof(path), "%s.damaged-%lld", fx.path,
		 (long long)fx.now);
	cr_expect_eq(file_size(path), -1);
}

Test(faults, a_read_only_or_unreadable_file_is_refused_not_moved)
{
	char damaged[400];
	cache *c = fx_open();
	sqlite3 *db;

	put_graph(c, 1, NULL);
	cache_close(c);
	/* Anyone may create the lock file; the cache itself is not theirs. */
	cr_assert_eq(chmod(fx.dir, 0777), 0);
	cr_assert_eq(chmod(fx.path, 0444), 0);
	expect_refused_to_other(fx.path, "read-only");
	cr_assert_eq(chmod(fx.path, 0), 0);
	expect_refused_to_other(fx.path, "unable to open");
	cr_assert_eq(chmod(fx.path, 0600), 0);
	snprintf(damaged, sizeof(damaged), "%s.damaged-%lld", fx.path,
		 (long long)fx.now);
	cr_expect_eq(file_size(damaged), -1);
	db = raw_open(fx.path);
	cr_expect_eq(raw_int(db, "SELECT count(*) FROM graphs"), 1);
	sqlite3_close(db);
}

/* ---- a writer killed at random moments ---- */

/* Publishes for ever, telling "fd" each version once it is committed. */
static void publish_until_killed(const char *path, int fd)
{
	cache_options o = { 0 };
	cache *c = NULL;
	char plan[64];

	if (cache_open(path, &o, &c, NULL) < 0)
		_exit(1);
	for (int i = 0;; i++) {
		cache_plan p = {
			.graph = graph_key(1), .device = DEVICE_CPU,
			.codegen = CODEGEN, .plan = plan,
			.sources = "[\"void k0(void **t) { }\"]",
			.found_by = "genetic round 1", .median_ms = 1,
			.spread_ms = 0.01,
		};
		int version;

		snprintf(plan, sizeof(plan), "{\"kernels\":[],\"seed\":%d}", i);
		if (cache_publish(c, &p, &version, NULL) < 0)
			_exit(2);
		if (write(fd, &version, sizeof(version)) != sizeof(version))
			_exit(3);
	}
}

Test(faults, killing_the_writer_loses_nothing_committed)
{
	static bool committed[1 << 16];
	unsigned seed = (unsigned)time(NULL);
	int reported = 0, top = 0;
	sqlite3 *db;
	char verdict[64];
	cache *c = fx_open();

	put_graph(c, 1, NULL);
	cache_close(c);
	cr_log_info("seed %u", seed);
	for (int round = 0; round < 20; round++) {
		int fds[2], status, version;
		pid_t pid;

		cr_assert_eq(pipe(fds), 0);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(fds[0]);
			publish_until_killed(fx.path, fds[1]);
		}
		close(fds[1]);
		usleep(2000 + rand_r(&seed) % 40000);
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		cr_expect(WIFSIGNALED(status), "the child ended by itself: %d",
			  WEXITSTATUS(status));
		while (read(fds[0], &version, sizeof(version)) == sizeof(version)) {
			cr_assert(version > 0 && version < (1 << 16));
			committed[version] = true;
			reported++;
			top = version > top ? version : top;
		}
		close(fds[0]);
	}
	cr_log_info("%d versions reported committed, up to %d", reported, top);
	cr_expect_gt(reported, 0);

	c = fx_open();
	cr_expect_eq(fx.error_logs, 0);
	db = raw_open(fx.path);
	raw_text(db, "PRAGMA integrity_check", verdict, sizeof(verdict));
	cr_expect_str_eq(verdict, "ok");
	for (int v = 1; v <= top; v++) {
		char sql[128];

		if (!committed[v])
			continue;
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM plans WHERE "
			 "version = %d", v);
		cr_expect_eq(raw_int(db, sql), 1, "version %d is lost", v);
	}
	/* Versions have no gaps: each commit took the next number. */
	cr_expect_eq(raw_int(db, "SELECT count(*) FROM plans"),
		     raw_int(db, "SELECT max(version) FROM plans"));
	cr_expect_geq(raw_int(db, "SELECT max(version) FROM plans"), top);
	sqlite3_close(db);
	cache_close(c);
}

/* ---- every allocation and every write failing in turn ---- */

static sqlite3_mem_methods real_mem;
static long allocs, fail_alloc; /* fail allocation number fail_alloc */
static bool alloc_failed;

static bool alloc_fault(void)
{
	if (fail_alloc <= 0 || ++allocs != fail_alloc)
		return false;
	alloc_failed = true;
	return true;
}

static void *fault_malloc(int n)
{
	return alloc_fault() ? NULL : real_mem.xMalloc(n);
}

static void *fault_realloc(void *p, int n)
{
	return alloc_fault() ? NULL : real_mem.xRealloc(p, n);
}

static void *fault_json_malloc(size_t n)
{
	return alloc_fault() ? NULL : malloc(n);
}

/* A VFS over the default one that fails the io_fail-th write, sync or
 * truncate, and skips syncs (the loops would be slow with them). */
typedef struct shim_file {
	sqlite3_file base;
	sqlite3_file *real;
} shim_file;

static sqlite3_vfs *real_vfs;
static sqlite3_vfs shim_vfs;
static long io_ops, io_fail;
static bool io_failed;

#define REAL(f) (((shim_file *)(f))->real)
#define FORWARD(f, method, ...) REAL(f)->pMethods->method(REAL(f), __VA_ARGS__)

static bool io_fault(void)
{
	if (io_fail <= 0 || ++io_ops != io_fail)
		return false;
	io_failed = true;
	return true;
}

static int shim_close(sqlite3_file *f)
{
	int rc = REAL(f)->pMethods->xClose(REAL(f));

	sqlite3_free(REAL(f));
	return rc;
}

static int shim_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
	return FORWARD(f, xRead, buf, n, off);
}

static int shim_write(sqlite3_file *f, const void *buf, int n,
		      sqlite3_int64 off)
{
	return io_fault() ? SQLITE_IOERR_WRITE : FORWARD(f, xWrite, buf, n, off);
}

static int shim_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	return io_fault() ? SQLITE_IOERR_TRUNCATE : FORWARD(f, xTruncate, size);
}

static int shim_sync(sqlite3_file *f, int flags)
{
	(void)f;
	(void)flags;
	return io_fault() ? SQLITE_IOERR_FSYNC : SQLITE_OK;
}

static int shim_size(sqlite3_file *f, sqlite3_int64 *size)
{
	return FORWARD(f, xFileSize, size);
}

static int shim_lock(sqlite3_file *f, int level)
{
	return FORWARD(f, xLock, level);
}

static int shim_unlock(sqlite3_file *f, int level)
{
	return FORWARD(f, xUnlock, level);
}

static int shim_reserved(sqlite3_file *f, int *out)
{
	return FORWARD(f, xCheckReservedLock, out);
}

static int shim_control(sqlite3_file *f, int op, void *arg)
{
	return FORWARD(f, xFileControl, op, arg);
}

static int shim_sector(sqlite3_file *f)
{
	return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int shim_device(sqlite3_file *f)
{
	return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

static int shim_shm_map(sqlite3_file *f, int page, int size, int extend,
			void volatile **out)
{
	return FORWARD(f, xShmMap, page, size, extend, out);
}

static int shim_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
	return FORWARD(f, xShmLock, offset, n, flags);
}

static void shim_shm_barrier(sqlite3_file *f)
{
	REAL(f)->pMethods->xShmBarrier(REAL(f));
}

static int shim_shm_unmap(sqlite3_file *f, int delete)
{
	return FORWARD(f, xShmUnmap, delete);
}

static int shim_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **out)
{
	return FORWARD(f, xFetch, off, n, out);
}

static int shim_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
	return FORWARD(f, xUnfetch, off, p);
}

static const sqlite3_io_methods shim_methods = {
	3, shim_close, shim_read, shim_write, shim_truncate, shim_sync,
	shim_size, shim_lock, shim_unlock, shim_reserved, shim_control,
	shim_sector, shim_device, shim_shm_map, shim_shm_lock,
	shim_shm_barrier, shim_shm_unmap, shim_fetch, shim_unfetch,
};

static int shim_open(sqlite3_vfs *vfs, sqlite3_filename name,
		     sqlite3_file *file, int flags, int *out_flags)
{
	shim_file *p = (shim_file *)file;
	int rc;

	(void)vfs;
	p->base.pMethods = NULL;
	p->real = sqlite3_malloc(real_vfs->szOsFile);
	if (!p->real)
		return SQLITE_NOMEM;
	memset(p->real, 0, (size_t)real_vfs->szOsFile);
	rc = real_vfs->xOpen(real_vfs, name, p->real, flags, out_flags);
	if (rc != SQLITE_OK) {
		if (p->real->pMethods)
			p->real->pMethods->xClose(p->real);
		sqlite3_free(p->real);
		return rc;
	}
	p->base.pMethods = &shim_methods;
	return SQLITE_OK;
}

/* Routes SQLite's and jansson's allocations and SQLite's files through
 * the fault injectors above, both disarmed. */
static void install_faults(void)
{
	sqlite3_mem_methods mem;

	cr_assert_eq(sqlite3_shutdown(), SQLITE_OK);
	cr_assert_eq(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &real_mem), SQLITE_OK);
	mem = real_mem;
	mem.xMalloc = fault_malloc;
	mem.xRealloc = fault_realloc;
	cr_assert_eq(sqlite3_config(SQLITE_CONFIG_MALLOC, &mem), SQLITE_OK);
	cr_assert_eq(sqlite3_initialize(), SQLITE_OK);
	json_set_alloc_funcs(fault_json_malloc, free);
	real_vfs = sqlite3_vfs_find(NULL);
	shim_vfs = *real_vfs;
	shim_vfs.zName = "fault-shim";
	shim_vfs.szOsFile = sizeof(shim_file);
	shim_vfs.xOpen = shim_open;
	cr_assert_eq(sqlite3_vfs_register(&shim_vfs, 1), SQLITE_OK);
}

static int count_entry(void *user, const cache_entry *e)
{
	(void)e;
	++*(int *)user;
	return 0;
}

/* Most of the API once, each call allowed to fail but not to crash or
 * leak; a failure must say why. The clock moves on and the prune drops
 * the previous call's rows, so that every call does the same work. */
static void use_everything(cache *c)
{
	cache_plan *got = NULL;
	cache_error err = { 0 };
	json_t *shown = NULL;
	cache_stats st;
	cache_trial t = {
		.graph = graph_key(1), .device = DEVICE_GPU, .codegen = CODEGEN,
		.plan = "{\"kernels\":[{\"name\":\"k0\",\"ops\":[0]}]}",
		.outcome = CACHE_TRIAL_CRASH, .median_ms = NAN,
		.detail = "worker killed by signal 11",
	};
	cache_plan p = {
		.graph = t.graph, .device = t.device, .codegen = t.codegen,
		.plan = t.plan, .sources = "[\"__global__ void k0() {}\"]",
		.binaries = "\x7f" "ELF", .binaries_len = 4,
		.launch = "{\"grid\":[4,1,1]}", .median_ms = 0.5,
		.spread_ms = 0.01, .found_by = "default",
	};
	cache_quarantine_entry q = {
		.graph = t.graph, .device = t.device, .codegen = t.codegen,
		.plan = t.plan, .reason = t.detail, .source = "x",
	};
	int calls = 0;

	fx.now += 10;
#define TRY(call) do { err.message[0] = 0; \
		if ((call) < 0) cr_expect(err.message[0], #call " said nothing"); \
	} while (0)
	TRY(cache_put_graph(c, graph_key(1), graph_canonical(1), "g", &err));
	TRY(cache_publish(c, &p, NULL, &err));
	TRY(cache_fetch_best(c, t.graph, t.device, t.codegen, 0, &got, &err));
	cache_plan_free(got);
	TRY(cache_record_trial(c, &t, &err));
	TRY(cache_quarantine(c, &q, &err));
	cache_is_quarantined(c, t.graph, t.device, t.codegen, t.plan, &err);
	TRY(cache_show(c, t.graph, &shown, &err));
	json_decref(shown);
	TRY(cache_list(c, count_entry, &calls, &err));
	TRY(cache_stat(c, &st, &err));
	TRY(cache_prune(c, 5, 1 << 30, NULL, &err));
	TRY(cache_checkpoint(c, &err));
#undef TRY
}

/* Opens the cache with nothing failing: it must be whole, never moved. */
static void expect_sound(void)
{
	cache *c = fx_open();
	sqlite3 *db = raw_open(fx.path);
	char verdict[64];

	cr_expect_eq(fx.error_logs, 0, "%s", fx.error_log);
	raw_text(db, "PRAGMA integrity_check", verdict, sizeof(verdict));
	cr_expect_str_eq(verdict, "ok");
	cr_expect_eq(raw_int(db, "PRAGMA user_version"), CACHE_SCHEMA_VERSION);
	sqlite3_close(db);
	cache_close(c);
}

static void remove_cache_files(void)
{
	static const char *const suffixes[] = { "", "-wal", "-shm", "-lock" };
	char path[400];

	for (int i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "%s%s", fx.path, suffixes[i]);
		unlink(path);
	}
}

Test(faults, every_allocation_failing_in_turn_while_creating)
{
	cache_options o = fx_options();
	cache_error err;
	long n;

	install_faults();
	for (n = 1;; n++) {
		cache *c = NULL;
		int rc;

		remove_cache_files();
		allocs = 0;
		alloc_failed = false;
		fail_alloc = n;
		memset(&err, 0, sizeof(err));
		rc = cache_open(fx.path, &o, &c, &err);
		fail_alloc = 0;
		cr_assert_neq(rc, CACHE_RECOVERED, "allocation %ld: %s", n,
			      err.message);
		if (rc < 0)
			cr_expect(err.message[0], "allocation %ld: no message", n);
		cache_close(c);
		if (!alloc_failed)
			break;
		expect_sound();
	}
	cr_log_info("creating a cache: %ld allocations failed in turn", n - 1);
}

/* The cache stays open across failures: each call must leave it usable. */
Test(faults, every_allocation_failing_in_turn_while_working)
{
	cache *c;
	long n;

	install_faults();
	c = fx_open();
	use_everything(c);
	for (n = 1;; n++) {
		allocs = 0;
		alloc_failed = false;
		fail_alloc = n;
		use_everything(c);
		fail_alloc = 0;
		if (!alloc_failed)
			break;
	}
	/* With nothing failing, everything works again. */
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_GPU, CODEGEN, 0,
				      NULL, NULL) > 0, 1);
	cr_expect_eq(cache_put_graph(c, graph_key(2), "g2", NULL, NULL), 0);
	cache_close(c);
	expect_sound();
	cr_log_info("working: %ld allocations failed in turn", n - 1);
}

Test(faults, every_write_sync_and_truncate_failing_in_turn)
{
	cache_error err = { 0 };
	int published = 1, recorded = 0, rc;
	cache *c;
	long n;

	install_faults();
	c = fx_open();
	put_graph(c, 1, NULL);
	cr_assert_eq(publish(c, 1, DEVICE_CPU, CODEGEN, 0, 100), 1);
	for (n = 1;; n++) {
		cache_trial t = {
			.graph = graph_key(1), .device = DEVICE_CPU,
			.codegen = CODEGEN, .plan = "{}", .outcome = CACHE_TRIAL_OK,
			.median_ms = 1,
		};
		cache_plan p = {
			.graph = t.graph, .device = t.device, .codegen = t.codegen,
			.plan = "{\"kernels\":[]}", .sources = "[]",
			.found_by = "default", .median_ms = 1, .spread_ms = NAN,
		};
		int version = 0;

		io_ops = 0;
		io_failed = false;
		io_fail = n;
		rc = cache_publish(c, &p, &version, &err);
		if (rc == 0)
			cr_expect_eq(version, ++published);
		else
			cr_expect_eq(rc, CACHE_EIO, "%d %s", rc, err.message);
		if (cache_record_trial(c, &t, &err) == 0)
			recorded++;
		rc = cache_prune(c, 0, 1 << 30, NULL, &err);
		cr_expect(rc == 0 || rc == CACHE_EIO, "%d %s", rc, err.message);
		io_fail = 0;
		/* What the cache says is what was committed. */
		cr_expect_eq(cache_fetch_best(c, t.graph, t.device, t.codegen, 0,
					      NULL, NULL), published);
		if (!io_failed)
			break;
	}
	cache_close(c);
	cr_log_info("%ld writes, syncs and truncates failed in turn", n - 1);

	expect_sound();
	c = fx_open();
	cr_expect_eq(cache_fetch_best(c, graph_key(1), DEVICE_CPU, CODEGEN, 0,
				      NULL, NULL), published);
	cache_stats st;
	cr_assert_eq(cache_stat(c, &st, NULL), 0);
	cr_expect_eq(st.trials, recorded);
	cache_close(c);
}
