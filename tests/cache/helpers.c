/*
 * helpers.c: the fixture and data makers of cache_test.h.
 */
#define _XOPEN_SOURCE 700
#include <criterion/criterion.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "cache_test.h"
#include "pg_server.h"

fixture fx;

/* The server of this executable, started and stopped by the runner. */
static pg_server server;

bool fx_postgresql(void)
{
	const char *engine = getenv("TUNED_TEST_CACHE_ENGINE");

	return engine && strcmp(engine, "postgresql") == 0;
}

void fx_sqlite_only(const char *why)
{
	if (fx_postgresql())
		cr_skip_test("SQLite only: %s", why);
}

/* The tests learn of the server through the environment: they run in
 * processes of their own. */
ReportHook(PRE_ALL)(struct criterion_test_set *tests)
{
	int rc;

	(void)tests;
	if (!fx_postgresql())
		return;
	rc = pg_server_start(&server);
	if (rc == 0)
		setenv("TUNED_TEST_PG_URI", server.uri, 1);
	else
		setenv(rc > 0 ? "TUNED_TEST_PG_SKIP" : "TUNED_TEST_PG_FAIL",
		       server.why, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
	(void)stats;
	pg_server_stop(&server);
}

/* A new database of the test's, "test_<pid><suffix>"; its URI in "out". */
static void new_database(const char *suffix, char *out, size_t size)
{
	const char *uri = getenv("TUNED_TEST_PG_URI");
	char name[64];

	if (getenv("TUNED_TEST_PG_SKIP"))
		cr_skip_test("%s", getenv("TUNED_TEST_PG_SKIP"));
	cr_assert_not_null(uri, "no PostgreSQL server: %s",
			   getenv("TUNED_TEST_PG_FAIL"));
	snprintf(name, sizeof(name), "test_%d%s", (int)getpid(), suffix);
	cr_assert_eq(pg_server_create_db(uri, name, out, size), 0, "%s", out);
}

void fx_other_cache_path(const char *name, char *out, size_t size)
{
	char suffix[40];

	if (!fx_postgresql()) {
		snprintf(out, size, "%s/%s.db", fx.dir, name);
		return;
	}
	snprintf(suffix, sizeof(suffix), "_%s", name);
	new_database(suffix, out, size);
}

void fx_setup(void)
{
	const char *tmp = getenv("TMPDIR");

	memset(&fx, 0, sizeof(fx));
	snprintf(fx.dir, sizeof(fx.dir), "%s/tuned-cache-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	cr_assert_not_null(mkdtemp(fx.dir), "mkdtemp %s", fx.dir);
	snprintf(fx.path, sizeof(fx.path), "%s/cache.db", fx.dir);
	fx.now = 1700000000;
	if (fx_postgresql())
		new_database("", fx.path, sizeof(fx.path));
}

static int remove_one(const char *path, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	chmod(path, 0700);
	remove(path);
	return 0;
}

static int unlock_one(const char *path, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_D || flag == FTW_DNR || S_ISDIR(st->st_mode))
		chmod(path, 0700);
	return 0;
}

void fx_teardown(void)
{
	if (!fx.dir[0])
		return;
	nftw(fx.dir, unlock_one, 8, FTW_PHYS);
	nftw(fx.dir, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

static int64_t fx_clock(void *user)
{
	(void)user;
	return fx.now;
}

static void fx_log(void *user, int level, const char *message)
{
	(void)user;
	fx.logs++;
	fx.last_level = level;
	snprintf(fx.last_log, sizeof(fx.last_log), "%s", message);
	if (level == CACHE_LOG_ERR) {
		fx.error_logs++;
		snprintf(fx.error_log, sizeof(fx.error_log), "%s", message);
	}
}

cache_options fx_options(void)
{
	cache_options o = {
		.log = fx_log,
		.clock = fx_clock,
	};
	return o;
}

cache *fx_open(void)
{
	cache_options o = fx_options();
	cache_error err = { 0 };
	cache *c = NULL;
	int rc = cache_open(fx.path, &o, &c, &err);

	cr_assert_eq(rc, 0, "cache_open: %d %s", rc, err.message);
	cr_assert_not_null(c);
	return c;
}

const char *graph_key(int n)
{
	static _Thread_local char keys[8][65];
	char *key = keys[n & 7];

	snprintf(key, 65, "%08x%056d", (unsigned)n * 2654435761u, n);
	return key;
}

const char *graph_canonical(int n)
{
	static _Thread_local char texts[8][128];
	char *text = texts[n & 7];

	snprintf(text, 128, "graph %d: y[i, j] = sum(k) a[i, k] * b[k, j]", n);
	return text;
}

void put_graph(cache *c, int n, const char *name)
{
	cache_error err = { 0 };
	int rc = cache_put_graph(c, graph_key(n), graph_canonical(n), name, &err);

	cr_assert_eq(rc, 0, "cache_put_graph: %d %s", rc, err.message);
}

char *make_plan(int kernels, int seed)
{
	size_t size = 32 + 200 * (size_t)kernels, len;
	char *plan = malloc(size);

	cr_assert_not_null(plan);
	len = (size_t)snprintf(plan, size, "{\"kernels\":[");
	for (int k = 0; k < kernels; k++)
		len += (size_t)snprintf(plan + len, size - len,
			"%s{\"name\":\"k%d_t%d\",\"ops\":[%d],\"schedule\":"
			"{\"parallel\":2,\"shared\":[],\"split\":\"thread\","
			"\"threads\":[8,32],\"tile\":[%d,32],\"unroll\":%d,"
			"\"vector\":1}}", k ? "," : "", k, k, k,
			8 << ((seed + k) % 3), 1 + (seed + k) % 8);
	snprintf(plan + len, size - len, "]}");
	return plan;
}

int publish(cache *c, int n, const char *device, const char *codegen,
	    int seed, size_t source_bytes)
{
	char *plan = make_plan(3, seed);
	char *sources = malloc(source_bytes + 16);
	unsigned char binaries[16];
	char found_by[32];
	cache_error err = { 0 };
	int version = 0, rc;

	cr_assert_not_null(sources);
	sources[0] = '[';
	sources[1] = '"';
	for (size_t i = 0; i < source_bytes; i++)
		sources[2 + i] = "int x; "[i % 7];
	snprintf(sources + 2 + source_bytes, 14, "\"]");
	for (int i = 0; i < 16; i++)
		binaries[i] = (unsigned char)(seed * 31 + i);
	snprintf(found_by, sizeof(found_by), "genetic round %d", seed);
	cache_plan p = {
		.graph = graph_key(n), .device = device, .codegen = codegen,
		.plan = plan, .sources = sources, .binaries = binaries,
		.binaries_len = sizeof(binaries), .launch = "{\"grid\":[1,1,1]}",
		.median_ms = 1.0 / (seed + 1), .spread_ms = NAN,
		.found_by = found_by,
	};
	rc = cache_publish(c, &p, &version, &err);
	cr_assert_eq(rc, 0, "cache_publish: %d %s", rc, err.message);
	free(plan);
	free(sources);
	return version;
}

sqlite3 *raw_open(const char *path)
{
	sqlite3 *db = NULL;
	int rc;

	fx_sqlite_only("it looks inside the SQLite file");
	rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);

	cr_assert_eq(rc, SQLITE_OK, "sqlite3_open_v2 %s: %s", path,
		     sqlite3_errstr(rc));
	sqlite3_busy_timeout(db, 5000);
	return db;
}

static int64_t pg_sql(const char *sql)
{
	PGconn *conn = PQconnectdb(fx.path);
	PGresult *res = PQexec(conn, sql);
	int status = PQresultStatus(res);
	int64_t value;

	cr_assert(status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK, "%s: %s",
		  sql, PQerrorMessage(conn));
	value = status == PGRES_TUPLES_OK && PQntuples(res) > 0 ?
			atoll(PQgetvalue(res, 0, 0)) :
			0;
	PQclear(res);
	PQfinish(conn);
	return value;
}

static int64_t sqlite_sql(const char *sql)
{
	sqlite3 *db = raw_open(fx.path);
	sqlite3_stmt *stmt = NULL;
	int64_t value = 0;
	int rc;

	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &stmt, NULL), SQLITE_OK, "%s: %s",
		     sql, sqlite3_errmsg(db));
	rc = sqlite3_step(stmt);
	cr_assert(rc == SQLITE_ROW || rc == SQLITE_DONE, "%s: %s", sql,
		  sqlite3_errmsg(db));
	if (rc == SQLITE_ROW)
		value = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	sqlite3_close(db);
	return value;
}

int64_t fx_sql(const char *sql)
{
	return fx_postgresql() ? pg_sql(sql) : sqlite_sql(sql);
}

int64_t raw_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *stmt = NULL;
	int64_t value;

	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &stmt, NULL), SQLITE_OK,
		     "%s: %s", sql, sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_step(stmt), SQLITE_ROW, "%s: %s", sql,
		     sqlite3_errmsg(db));
	value = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return value;
}

void raw_text(sqlite3 *db, const char *sql, char *out, size_t size)
{
	sqlite3_stmt *stmt = NULL;
	const char *text;

	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &stmt, NULL), SQLITE_OK,
		     "%s: %s", sql, sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_step(stmt), SQLITE_ROW, "%s: %s", sql,
		     sqlite3_errmsg(db));
	text = (const char *)sqlite3_column_text(stmt, 0);
	snprintf(out, size, "%s", text ? text : "");
	sqlite3_finalize(stmt);
}

int64_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}
