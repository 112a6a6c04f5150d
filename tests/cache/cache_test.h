/*
 * cache_test.h: what the cache tests share: a fresh directory per test,
 * a clock the test sets, a log that remembers, plans of realistic size,
 * and raw SQLite access to look behind the cache's back.
 */
#ifndef CACHE_TEST_H
#define CACHE_TEST_H

#include <sqlite3.h>

#include "cache.h"

#define DEVICE_CPU "cpu: Intel Xeon Platinum 8480+, cc 12.2"
#define DEVICE_GPU "cuda: NVIDIA H100 (sm_90, 132 SMs), driver 13000, nvrtc 13.0"
#define CODEGEN "kgen 0.1"

/* The engine the tests run on. TUNED_TEST_CACHE_ENGINE=postgresql runs
 * them on a private PostgreSQL server (pg_server.h) started once per
 * executable, each test on a database of its own whose URI is fx.path;
 * they are skipped, saying why, where no PostgreSQL is installed. */
bool fx_postgresql(void);

/* Skips the current test on PostgreSQL, for "why": it looks inside
 * SQLite's file, or tests what only the SQLite engine does. */
void fx_sqlite_only(const char *why);

/* The test's state; each test runs in its own process. */
typedef struct fixture {
	char dir[256];   /* a fresh directory, removed at the end */
	char path[300];  /* dir/cache.db, or the test's database's URI */
	int64_t now;     /* what the clock says */
	int logs;        /* log lines received */
	int last_level;
	char last_log[1024];
	int error_logs;  /* of them at CACHE_LOG_ERR */
	char error_log[1024];
} fixture;

extern fixture fx;

void fx_setup(void);
void fx_teardown(void);

/* Options with the fixture's clock and log. */
cache_options fx_options(void);

/* Where a second cache of the test goes: SQLite "<fx.dir>/<name>.db",
 * or a new database on the test's PostgreSQL server. */
void fx_other_cache_path(const char *name, char *out, size_t size);

/* Opens fx.path with fx_options; asserts success (0). */
cache *fx_open(void);

/* A 64-hex-digit graph key made from "n", and its canonical text, in
 * buffers of the calling thread (eight of them in turn), so that the
 * threads of a test (owners racing) never see another's half-written. */
const char *graph_key(int n);
const char *graph_canonical(int n);

/* Puts graph "n" as "name" (may be NULL); asserts success. */
void put_graph(cache *c, int n, const char *name);

/* A plan of "kernels" kernels shaped like kgen's default plans (compact
 * JSON, about 135 bytes a kernel), varied by "seed". Free with free(). */
char *make_plan(int kernels, int seed);

/* Publishes a plan for graph "n" on "device" with "codegen", with
 * "source_bytes" of kernel source; returns the version. */
int publish(cache *c, int n, const char *device, const char *codegen,
	    int seed, size_t source_bytes);

/* Runs "sql" on the test's database (fx.path, SQLite or PostgreSQL)
 * behind the cache's back; returns the first field of its first row as
 * an integer (0 when it returns none). */
int64_t fx_sql(const char *sql);

/* A read-write connection to "path" for looking inside. */
sqlite3 *raw_open(const char *path);
/* The integer result of "sql" on "db". */
int64_t raw_int(sqlite3 *db, const char *sql);
/* The text result of "sql" on "db", copied into "out". */
void raw_text(sqlite3 *db, const char *sql, char *out, size_t size);

int64_t file_size(const char *path);

#endif
