/*
 * cache_int.h: the cache's private forms, shared by its files.
 *
 * engine.c holds the public functions, each passing the call to the
 * cache's engine (struct cache_engine): SQLite (the files below) or
 * PostgreSQL (pg_*.c). open.c opens, checks and recovers the SQLite file;
 * schema.c holds the migrations; write.c the writes; read.c the reads; prune.c pruning and
 * checkpoints; jobs.c the daemon's job queue; transfer.c export and
 * import; util.c errors, statements, transactions and JSON; checksum.c
 * the checksum of published versions.
 *
 * Memory of our own comes from sqlite3_malloc64 and goes back with
 * sqlite3_free, so that tests that fail SQLite's allocations fail ours too.
 */
#ifndef CACHE_INT_H
#define CACHE_INT_H

#include <pthread.h>
#include <stdarg.h>

#include <sqlite3.h>

#include "cache.h"

/* ALWAYS(X) and NEVER(X) mark conditions the code holds to be true and
 * false. A caller's misuse can break them, so unlike SQLite's they are
 * checked in every build and the misuse is refused, never asserted. */
#define ALWAYS(X) __builtin_expect(!!(X), 1)
#define NEVER(X) __builtin_expect(!!(X), 0)

#define CACHE_DEFAULT_BUSY_MS 5000
#define CACHE_DEFAULT_FULL_CHECK_BYTES ((int64_t)64 << 20)

/* The statements that open and close transactions, prepared once at open
 * so that ending a transaction needs no memory: a transaction left open
 * by a failure would hold a snapshot (reader) or the write lock (writer)
 * for good. */
enum cache_txn {
	CACHE_BEGIN_WRITE,  /* writer: BEGIN IMMEDIATE */
	CACHE_COMMIT,       /* writer: COMMIT */
	CACHE_ROLLBACK,     /* writer: ROLLBACK */
	CACHE_BEGIN_READ,   /* reader: BEGIN */
	CACHE_END_READ,     /* reader: COMMIT */
	CACHE_TXN_STMTS
};

/* Versions found failing their checksum by a thread that cannot write
 * (a reader on another thread), left for the owner to mark bad: shared by
 * a cache and its readers (cache_open_reader), under its lock. */
#define CACHE_FOUND_BAD_MAX 64

typedef struct cache_found_bad {
	pthread_mutex_t lock;
	int n;
	int64_t ids[CACHE_FOUND_BAD_MAX]; /* rows of plans */
	int64_t found_at[CACHE_FOUND_BAD_MAX];
} cache_found_bad;

/* The operations of cache.h that differ by engine, in its order:
 * OP(return type, name, parameters). Each engine defines them as
 * cache_<engine>_<name> and lists them in its table, so that an engine
 * lacking one does not build. engine.c has refused a NULL cache, a missing
 * out argument or callback and a negative limit before calling one, and
 * cleared the out argument. */
#define CACHE_ENGINE_OPS(OP)                                                   \
	OP(int, open, (const char *where, const cache_options *options,        \
		       cache **out, cache_error *err))                          \
	OP(int, open_reader, (const cache *c, cache **out, cache_error *err))  \
	OP(void, close, (cache *c))                                            \
	OP(void, mark_bad, (cache *c, int64_t id, const char *why))            \
	OP(int, put_graph, (cache *c, const char *key, const char *canonical,  \
			    const char *name, cache_error *err))               \
	OP(int, record_trial, (cache *c, const cache_trial *trial,             \
			       cache_error *err))                              \
	OP(int, publish, (cache *c, const cache_plan *plan, int *version,      \
			  cache_error *err))                                   \
	OP(int, quarantine, (cache *c, const cache_quarantine_entry *entry,    \
			     cache_error *err))                                \
	OP(int, prune, (cache *c, int64_t max_age_s, int64_t max_bytes,        \
			cache_prune_stats *stats, cache_error *err))           \
	OP(int, checkpoint, (cache *c, cache_error *err))                      \
	OP(int, fetch_best, (cache *c, const char *graph, const char *device,  \
			     const char *codegen, int min_version,             \
			     cache_plan **out, cache_error *err))              \
	OP(bool, is_quarantined, (cache *c, const char *graph,                 \
				  const char *device, const char *codegen,     \
				  const char *plan_json, cache_error *err))    \
	OP(int, quarantined_plans, (cache *c, const char *graph,               \
				    const char *device, const char *codegen,   \
				    json_t **out, cache_error *err))           \
	OP(int, quarantine_entries, (cache *c, const char *key, json_t **out,  \
				     cache_error *err))                        \
	OP(int, list, (cache *c, int (*fn)(void *user,                         \
					   const cache_entry *entry),          \
		       void *user, cache_error *err))                           \
	OP(int, show, (cache *c, const char *key, json_t **out,                \
		       cache_error *err))                                      \
	OP(int, trials, (cache *c, const char *graph, const char *device,      \
			 const char *codegen, int64_t limit, json_t **out,     \
			 cache_error *err))                                    \
	OP(int, stat, (cache *c, cache_stats *out, cache_error *err))          \
	OP(int, put_jobs, (cache *c, const cache_job *jobs, int n,             \
			   int keep_finished, cache_error *err))               \
	OP(int, jobs, (cache *c, int (*fn)(void *user, const cache_job *job),  \
		       void *user, cache_error *err))                           \
	OP(int, keep_graph_json, (cache *c, const char *key,                   \
				  const char *graph_json, cache_error *err))   \
	OP(int, export_graph, (cache *c, const char *key, json_t **out,        \
			       cache_error *err))                              \
	OP(int, import_graph, (cache *c, json_t *entry, const char *canonical, \
			       json_t **out, cache_error *err))

/* More of them: cache_fetch_version, cache_listen and cache_notices; and
 * the steps runs.c builds cache_pin and cache_advance of, once for both
 * engines: a write transaction's begin and end, one key's pin (pinned
 * when the run has none; moved to the latest good version too when
 * "move"; *previous the pin before, 0 for none; *version after, 0 when
 * there is still none), and the keys a run pinned on (device, codegen),
 * a JSON array. CACHE_ENGINE_ALL_OPS lists both. */
typedef int cache_notice_fn(void *user, const cache_notice *notice);

#define CACHE_ENGINE_MORE_OPS(OP)                                                      \
	OP(int, fetch_version,                                                         \
	   (cache *, const char *graph, const char *device, const char *codegen,       \
	    int version, cache_plan **out, cache_error *err))                          \
	OP(int, listen, (cache *, int *fd, cache_error *err))                          \
	OP(int, notices, (cache *, cache_notice_fn *, void *user, cache_error *))      \
	OP(int, write_begin, (cache *, cache_error *))                                 \
	OP(int, write_end, (cache *, int rc, cache_error *err))                        \
	OP(int, pin_key,                                                               \
	   (cache *, const char *run, const char *graph, const char *device,           \
	    const char *codegen, bool move, int *previous, int *version,               \
	    cache_error *err))                                                         \
	OP(int, run_keys,                                                              \
	   (cache *, const char *run, const char *device, const char *codegen,         \
	    json_t **out, cache_error *err))

#define CACHE_ENGINE_ALL_OPS(OP) CACHE_ENGINE_OPS(OP) CACHE_ENGINE_MORE_OPS(OP)

#define CACHE_ENGINE_FIELD(ret, name, params) ret (*name) params;
#define CACHE_SQLITE_DECLARE(ret, name, params) ret cache_sqlite_##name params;
#define CACHE_PG_DECLARE(ret, name, params) ret cache_pg_##name params;
#define CACHE_SQLITE_ENTRY(ret, name, params) .name = cache_sqlite_##name,
#define CACHE_PG_ENTRY(ret, name, params) .name = cache_pg_##name,

typedef struct cache_engine {
	const char *name; /* "SQLite", "PostgreSQL": in messages */
	CACHE_ENGINE_ALL_OPS(CACHE_ENGINE_FIELD)
} cache_engine;

CACHE_ENGINE_ALL_OPS(CACHE_SQLITE_DECLARE)
CACHE_ENGINE_ALL_OPS(CACHE_PG_DECLARE)

extern const cache_engine cache_sqlite_engine; /* open.c */
extern const cache_engine cache_pg_engine;     /* pg_open.c */

/* A PostgreSQL connection (libpq's PGconn), named here so that the
 * SQLite files need no libpq header. */
struct pg_conn;

struct cache {
	const cache_engine *engine;
	sqlite3 *writer;   /* the owner's; every write and checkpoint */
	sqlite3 *reader;   /* SQLITE_OPEN_READONLY; reads, any thread */
	sqlite3_stmt *txn[CACHE_TXN_STMTS];
	pthread_t owner;   /* the thread that writes: the opener, or the one it
			    * was handed to (cache_hand_over) */
	char *path;        /* sqlite3_malloc'd copy */
	cache_found_bad *found_bad; /* its own, or its cache's for a reader */
	bool borrows_found_bad;
	int lock_fd;       /* flock'd "<path>-lock", or -1 */
	cache_options options;
	struct pg_conn *pg_writer; /* PostgreSQL: the owner's connection */
	struct pg_conn *pg_reader; /* PostgreSQL: the reads' connection */
	char *conninfo;    /* PostgreSQL: what to connect with (it may hold a
			    * password: "path" is its form for messages) */
	char *instance;    /* PostgreSQL: this cache in the job queue's claims
			    * (pg_jobs.c) and in its notices (pg_listen.c),
			    * a reader's its owner's; sqlite3_malloc'd */
	int pg_listen_pid; /* PostgreSQL: the reader's server process that
			    * LISTENs (cache_listen), 0 for none */
};

/* open.c: a new cache of "engine" named "path" in messages, with the
 * options' defaults filled in; its connections are left to the engine. */
int cache_alloc(const cache_engine *engine, const char *path,
		const cache_options *options, cache **out, cache_error *err);
/* Frees what cache_alloc allocated. */
void cache_free(cache *c);
/* Makes reader "r" (cache_open_reader) share the versions found bad of
 * its cache "c", which c's owner marks. */
void cache_borrow_found_bad(cache *r, const cache *c);

/* util.c */
void cache_set_error(cache_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int cache_sqlite_code(int rc);
int cache_db_error(sqlite3 *db, int rc, cache_error *err, const char *what);
/* Steps "stmt" (bound by the caller) to its end on the reader, appending
 * each row made into JSON by "row" to "out", and finalizes it; "what"
 * names the rows in errors. */
int cache_append_rows(cache *c, sqlite3_stmt *stmt, json_t *(*row)(sqlite3_stmt *),
		      json_t *out, const char *what, cache_error *err);
int64_t cache_now(const cache *c);
void cache_log(const cache_options *options, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

int cache_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **out,
		  cache_error *err);
int cache_exec(sqlite3 *db, const char *sql, const char *what,
	       cache_error *err);
int cache_run(sqlite3 *db, sqlite3_stmt *stmt, const char *what,
	      cache_error *err);
int cache_query_int(sqlite3 *db, const char *sql, int64_t *out,
		    cache_error *err);
void cache_bind_text(sqlite3_stmt *stmt, int i, const char *text);
void cache_bind_real(sqlite3_stmt *stmt, int i, double value);
double cache_column_real(sqlite3_stmt *stmt, int i);

int cache_check_owner(const cache *c, const char *what, cache_error *err);
int cache_check_text(const char *text, const char *what, cache_error *err);
int cache_check_key(const char *graph, const char *device, const char *codegen,
		    cache_error *err);
int cache_prepare_txn(cache *c, bool reader, cache_error *err);
int cache_begin(cache *c, cache_error *err);
int cache_end(cache *c, int rc, cache_error *err);
int cache_read_begin(cache *c, const char *what, cache_error *err);
void cache_read_end(cache *c);

int cache_json_canonical(const char *text, const char *what, bool sources,
			 __cache_give char **out, cache_error *err);
void cache_json_free(__cache_take char *text);
size_t cache_utf8_cut(const char *text, size_t max);

/* write.c: the checks of each write's arguments, shared by the engines;
 * the texts they give in canonical form go with cache_json_free. */
int cache_trial_check(const cache_trial *trial, char **plan, cache_error *err);
int cache_quarantine_check(const cache_quarantine_entry *entry, char **plan,
			   char **sources, cache_error *err);
/* The JSON texts of a plan in canonical form. */
typedef struct plan_texts {
	char *plan, *sources, *launch;
} plan_texts;
int cache_plan_check(const cache_plan *p, plan_texts *t, cache_error *err);
void cache_plan_texts_release(plan_texts *t);
/* prune.c: the owner, and limits not negative. */
int cache_prune_check(cache *c, int64_t max_age_s, int64_t max_bytes,
		      cache_error *err);
/* jobs.c */
int cache_jobs_check(const cache_job *jobs, int n, int keep_finished,
		     cache_error *err);
/* write.c */
int cache_device_id(cache *c, const char *signature, int64_t now,
		    int64_t *id, cache_error *err);

/* A row of table plans: one version of (graph, device, codegen), its
 * texts canonical. write.c and pg_write.c insert it, for a publish
 * (cache_version_row_of: the row of a plan published at "now") and for
 * an import; "what" begins the message of a failure. */
typedef struct cache_version_row {
	const char *graph, *codegen, *found_by;
	int64_t device; /* its row in devices */
	int version;
	int64_t created_at;
	const char *plan, *sources, *launch; /* launch may be NULL */
	const unsigned char *binaries;       /* NULL: none */
	size_t binaries_len;
	double median_ms, spread_ms; /* NaN: unknown */
} cache_version_row;

cache_version_row cache_version_row_of(const cache_plan *p, const plan_texts *t,
				       int64_t device, int version, int64_t now);
int cache_insert_version(cache *c, const cache_version_row *row, const char *what,
			 cache_error *err);
/* write.c, pg_write.c (pg_insert_graph): graph "key" put, as cache_put_graph
 * does: inserted, or marked used (and renamed to "name" unless "import":
 * an import keeps the cache's name) when it has the same canonical text,
 * else CACHE_EINVAL; its graph.json given when "graph_json" is not NULL
 * and it had none. */
int cache_insert_graph(cache *c, const char *key, const char *canonical,
		       const char *name, const char *graph_json, bool import,
		       cache_error *err);

/* transfer.c: cache_import_graph on both engines, each engine's
 * statements behind a store (SQLite's in transfer.c, PostgreSQL's in
 * pg_transfer.c), all in one write transaction of "begin" and "end". */
typedef struct cache_import_store {
	int (*begin)(cache *, cache_error *);
	int (*end)(cache *, int rc, cache_error *);
	int (*device_id)(cache *, const char *signature, int64_t now, int64_t *id,
			 cache_error *);
	/* The graph of an entry: new, or known with the same canonical text
	 * (then used now, and given the graph.json if it had none). */
	int (*put_graph)(cache *, const char *key, const char *canonical,
			 const char *name, const char *graph, cache_error *);
	/* The newest version of (key, device, codegen): its number (0: none)
	 * and median (NaN: unknown). */
	int (*newest_version)(cache *, const char *key, int64_t device,
			      const char *codegen, int *version, double *median_ms,
			      cache_error *);
	/* "signature": the device of row->device */
	int (*insert_version)(cache *, const char *signature,
			      const cache_version_row *row, cache_error *);
} cache_import_store;

int cache_import_entry(cache *c, const cache_import_store *store, json_t *entry,
		       const char *canonical, json_t **out, cache_error *err);

/* checksum.c: plan_checksum(plan, sources, launch) in SQL on "db" */
int cache_add_functions(sqlite3 *db, cache_error *err);
/* The checksum of the three texts ("launch" may be NULL) into "hex", 64
 * hex digits; -1 when out of memory. */
int cache_checksum(const char *plan, const char *sources, const char *launch,
		   char hex[65]);

/* read.c */
/* Copies "from", whose pointers are borrowed, into one allocation
 * (cache_plan_free); NULL when out of memory. */
cache_plan *cache_plan_copy(const cache_plan *from);
/* A version (row "id") that failed its checksum, found by a thread that
 * cannot write: left for the owner (cache_mark_found_bad). */
void cache_leave_for_owner(cache *c, int64_t id);
/* Why a version found at "found_at" is bad, into "why". */
void cache_checksum_failure(int64_t found_at, char *why, size_t size);
/* The CACHE_NOT_FOUND of a fetch that found nothing (both engines):
 * "exact" for cache_fetch_version, "newer" when an older version is
 * there, "failed" a version skipped for its checksum (0: none). */
void cache_fetch_missed(const char *graph, const char *device, const char *codegen,
			int min_version, bool exact, bool newer, int failed,
			cache_error *err);
/* Version "version" (row "id") of (graph, device, codegen) failed its
 * checksum in a fetch: logged, not served, and marked bad through the
 * engine when the caller owns the cache, or left for the owner. */
void cache_version_failed(cache *c, const char *graph, const char *device,
			  const char *codegen, int version, int64_t id);

/* runs.c: a run id as cache.h says it must be; cache_pin and
 * cache_advance of the engine's steps, their arguments checked. */
int cache_check_run(const char *run, cache_error *err);
int cache_run_pin(cache *c, const char *run, const char *graph, const char *device,
		  const char *codegen, int *version, cache_error *err);
int cache_run_advance(cache *c, const char *run, const char *device,
		      const char *codegen, const char *const *keys, int n, json_t **out,
		      cache_error *err);

/* schema.c */
int cache_migrate(cache *c, cache_error *err);

/* pg_util.c: statements on PostgreSQL. The parameters of one statement,
 * $1, $2... in the order added: texts (NULL: NULL), integers, reals (NaN:
 * NULL) and bytes. */
#define PG_ARGS_MAX 20

typedef struct pg_args {
	int n;
	const char *values[PG_ARGS_MAX];
	int lengths[PG_ARGS_MAX];
	int formats[PG_ARGS_MAX];
	char numbers[PG_ARGS_MAX][32];
} pg_args;

struct pg_result;

void pg_text(pg_args *a, const char *text);
void pg_int(pg_args *a, int64_t value);
void pg_real(pg_args *a, double value);
void pg_bytes(pg_args *a, const void *bytes, size_t len);

/* Runs "sql" with "a" (may be NULL) on "conn", the cache's writer or
 * reader, reconnecting it first when the connection was lost. *res (may
 * be NULL: cleared) gets the result to PQclear; on failure "what: the
 * server's message" goes to "err" and a negative code is returned. */
int pg_run(cache *c, struct pg_conn *conn, const char *sql, const pg_args *a,
	   struct pg_result **res, const char *what, cache_error *err);
/* The rows "sql" changed (UPDATE, DELETE, INSERT), or a negative code. */
int pg_change(cache *c, const char *sql, const pg_args *a, const char *what,
	      cache_error *err);
/* One write transaction on the writer: pg_end commits when "rc" is 0,
 * rolls back otherwise; returns the final rc. */
int pg_begin(cache *c, cache_error *err);
int pg_end(cache *c, int rc, cache_error *err);
/* Field (row, col) of "res": NULL for SQL NULL. */
const char *pg_value(const struct pg_result *res, int row, int col);
int64_t pg_int_at(const struct pg_result *res, int row, int col);
double pg_real_at(const struct pg_result *res, int row, int col);
/* The JSON text of the first field of "res" parsed, with the integers
 * under the keys of reals (median_ms...) made reals; NULL when out of
 * memory. */
json_t *pg_json_at(const struct pg_result *res, int row, int col);

/* pg_schema.c */
int pg_migrate(cache *c, cache_error *err);

/* pg_jobs.c: the job in row "row" of "res", read by the columns of
 * PG_JOB_COLUMNS (its texts are the result's). */
#define PG_JOB_COLUMNS PG_JOB_COLUMNS_GRAPH("graph")
/* The same, with "graph" (an expression) for the graph. */
#define PG_JOB_COLUMNS_GRAPH(graph)                                                    \
	"id, key, name, " graph ", state, budget_s, max_trials, priority, "            \
	"trials, coalesce(best_ms, 0), version, error, created_at, "                   \
	"coalesce(finished_at, 0), coalesce(first_ms, 0), coalesce(uid, -1), "         \
	"device, claimed_by"
void pg_job_at(const struct pg_result *res, int row, const char *instance,
	       cache_job *job);
/* The server's clock, in unix seconds. */
#define SERVER_NOW "extract(epoch FROM clock_timestamp())"
/* The shared queue's operations behind cache.h's. */
int pg_pass_jobs(cache *c, const cache_job_pass *pass,
		 int (*fn)(void *user, const cache_job *job), void *user,
		 cache_error *err);
int pg_release_jobs(cache *c, cache_error *err);
int pg_renew_jobs(cache *c, double lease_s, const int64_t *ids, int n,
		  cache_error *err);
int pg_new_job_id(cache *c, int64_t *id, cache_error *err);
/* pg_share.c: the shared search's, behind cache.h's. */
int pg_claim_plan(cache *c, const char *graph, const char *device, const char *codegen,
		  const char *plan, double claim_s, cache_error *err);
int pg_trials_after(cache *c, const char *graph, const char *device,
		    const char *codegen, int64_t *after, int limit, json_t **out,
		    cache_error *err);
/* pg_listen.c: in the publish's transaction, the notice of version
 * "version" of plan "p", sent at its commit. */
int pg_notify_version(cache *c, const cache_plan *p, int version, cache_error *err);

/* pg_write.c: cache_insert_version's and cache_insert_graph's (which
 * locks the graph's row until the transaction ends); the row of device
 * "signature", added when new. */
int pg_insert_version(cache *c, const cache_version_row *row, const char *what,
		      cache_error *err);
int pg_insert_graph(cache *c, const char *key, const char *canonical, const char *name,
		    const char *graph_json, bool import, cache_error *err);
int pg_device_id(cache *c, const char *signature, int64_t now, int64_t *id,
		 cache_error *err);

#endif
