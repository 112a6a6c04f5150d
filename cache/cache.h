/*
 * cache.h: the function cache of tuned, one SQLite file or a PostgreSQL
 * database (docs/cache.md; "Engines" says what differs on PostgreSQL: no
 * writer lock, the connection string, publish refusing a slower plan).
 *
 * The cache keeps what tuning found: the graphs seen, the devices, the
 * published plans of each (graph key, device signature, codegen version),
 * numbered 1, 2, 3 in the order they were published (each better than the
 * last), the history of trials, and the quarantine of plans that crashed
 * or hung a worker. A plan is found only under its complete key: a fetch
 * for another device or another codegen version never returns it.
 *
 * Threads. A cache has two SQLite connections. The writer does every write
 * and checkpoint, each write in one BEGIN IMMEDIATE transaction; it belongs
 * to the thread that called cache_open, and a write from any other thread
 * is refused with CACHE_ETHREAD (SQLite 3.40's WAL bug needs concurrent
 * writers; there is one). The reader is opened SQLITE_OPEN_READONLY and
 * serves cache_fetch_best, cache_is_quarantined, cache_list, cache_show,
 * cache_trials and cache_stat; any thread may call those, one call at a
 * time: the caller guards them (one mutex for the reads of one cache), and
 * a read may run while the owner writes. A second cache_open of the same file
 * (or PostgreSQL database), from this process or another, fails with
 * CACHE_EBUSY while the first is open;
 * cache_open_reader gives a second read-only handle, with its own reader.
 *
 * Errors. Functions return 0 (or a count or version) on success and a
 * negative cache_code on failure; then the optional "err" says what went
 * wrong in one lowercase line.
 *
 * Ownership follows isl: __cache_give returns a new object the caller
 * frees, __cache_keep borrows, __cache_take consumes. Strings passed in are
 * copied; strings in callbacks are valid only during the call.
 */
#ifndef CACHE_H
#define CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define __cache_give
#define __cache_take
#define __cache_keep

/* The schema version this build writes (PRAGMA user_version). */
#define CACHE_SCHEMA_VERSION 7

/* Trial details are cut to this many bytes (on a UTF-8 boundary). */
#define CACHE_DETAIL_MAX 200

enum cache_code {
	CACHE_OK = 0,
	CACHE_RECOVERED = 1,  /* cache_open: the old file was damaged, moved
			       * aside, and a fresh cache started */
	CACHE_NOT_FOUND = -1, /* no such graph, plan or version */
	CACHE_EINVAL = -2,    /* a bad argument: NULL, empty, not JSON */
	CACHE_ENOMEM = -3,
	CACHE_EIO = -4,       /* the file cannot be opened, read or written */
	CACHE_EBUSY = -5,     /* another connection holds the file */
	CACHE_ECORRUPT = -6,  /* damage found after open: reopen to recover */
	CACHE_ESCHEMA = -7,   /* the file's schema is newer than this build */
	CACHE_ETHREAD = -8,   /* a write from a thread that does not own it */
	CACHE_ESQLITE = -9,   /* any other failure of the database (SQLite or
			       * PostgreSQL) */
	CACHE_ESTALE = -10,   /* cache_publish on PostgreSQL: a version as
			       * fast or faster was published meanwhile */
};

/* The name of "code", e.g. "CACHE_EBUSY"; "unknown" for others. */
const char *cache_strerror(int code);

typedef struct cache_error {
	int code;
	char message[512];
} cache_error;

/* Levels of the log callback, most severe first. */
enum cache_log_level {
	CACHE_LOG_ERR = 0,
	CACHE_LOG_WARNING = 1,
	CACHE_LOG_INFO = 2,
};

/* How to open a cache; NULL or zeroed fields take the defaults. */
typedef struct cache_options {
	/* How long a connection waits for a lock held by another (5000). */
	int busy_timeout_ms;
	/* Files up to this size get PRAGMA integrity_check at open, larger
	 * ones the faster quick_check (0: 64 MiB; negative: always quick). */
	int64_t full_check_bytes;
	/* Told about a damaged file moved aside and about migrations, from
	 * within cache_open on its thread; may be NULL. */
	void (*log)(void *user, int level, const char *message);
	void *log_user;
	/* Unix time in seconds for created_at and pruning (NULL: time()). */
	int64_t (*clock)(void *user);
	void *clock_user;
} cache_options;

typedef struct cache cache;

/* Opens or creates the cache in file "path" ("path" is copied): checks it
 * (integrity_check, or quick_check when large), sets WAL, synchronous=FULL,
 * foreign_keys=ON and the busy timeout, and brings the schema up to
 * CACHE_SCHEMA_VERSION, one transaction per migration step. The calling
 * thread becomes the owner (the one writer).
 *
 * A damaged file, or one that is not SQLite, is renamed to
 * "<path>.damaged-<unix time>" (with its -wal when one is left; "-2", "-3"
 * are appended when that name is taken), a fresh cache is started
 * in "path", the log callback gets one CACHE_LOG_ERR line naming both paths,
 * and CACHE_RECOVERED is returned with that line in "err" too. A path that
 * cannot be opened (a directory, no permission, a read-only file) is left
 * alone: a negative code and *out NULL. */
/* With a PostgreSQL URI or conninfo string for "path" (cache_is_database),
 * cache_open connects to that database instead, brings its schema up to
 * date the same way. Any number of caches (daemons) open one database:
 * versions are published by compare-and-set, and the job queue is shared
 * under leases (cache_pass_jobs). Its
 * connections time out (connect_timeout 5 s, TCP keepalives, statements
 * 30 s) unless the conninfo says otherwise, and keep its options. */
int cache_open(const char *path, const cache_options *options,
	       __cache_give cache **out, cache_error *err);

/* Whether cache_open takes "where" for a PostgreSQL database (a
 * "postgresql://" or "postgres://" URI, or a conninfo string: a keyword
 * and "=" first, as "host=db dbname=tuned"), not a file: a path with "="
 * in it (/srv/gpu=0/cache.db) is a file. */
bool cache_is_database(const char *where);

/* What messages call "c": its file's path, or its PostgreSQL database by
 * database, host, port and user (never the connection string, which may
 * hold a password). */
const char *cache_name(__cache_keep const cache *c);

/* A second read-only handle of the open cache "c", for reads on another
 * thread that must not wait for the reads of "c" (the daemon looks for a
 * job's nearest key on one): only the reads below, no writes, and its own
 * "one call at a time"; on PostgreSQL also the single statements that
 * say so (cache_claim_plan, cache_trials_after, cache_renew_jobs), as
 * "c"'s instance. Close it with cache_close before "c". */
int cache_open_reader(__cache_keep const cache *c, __cache_give cache **out,
		      cache_error *err);

/* Makes "thread" the owner of "c", the one thread that writes it. Called
 * by the owner, which writes no more (or once the owner has ended): the
 * daemon opens the cache on its main thread and hands it to its writer
 * thread, which hands it back when it ends. Whatever orders the two
 * threads' writes (a mutex, a join) must come between the call and the
 * new owner's first write. */
void cache_hand_over(__cache_keep cache *c, pthread_t thread);

/* A version that fails its checksum when read by a thread that cannot
 * write (not the owner, or a cache_open_reader handle) is not served, and
 * left for the owner to mark bad: cache_found_bad_waiting (any thread)
 * says whether some wait; cache_mark_found_bad (the owner) marks them,
 * returning how many. */
bool cache_found_bad_waiting(__cache_keep cache *c);
int cache_mark_found_bad(__cache_keep cache *c, cache_error *err);

/* Closes both connections and frees "c"; call it from the owner once no
 * read is in flight. NULL does nothing. */
void cache_close(__cache_take cache *c);

/* Writes. Each is one transaction on the writer, from the owner thread. */

/* Records graph "key" with its canonical text and "name" (may be NULL), or
 * marks a known graph as used now (for pruning, least recently used go
 * first), updating its name when one is given. The daemon calls it for
 * every submitted graph. A known key with another canonical text is
 * CACHE_EINVAL. */
int cache_put_graph(__cache_keep cache *c, const char *key,
		    const char *canonical, const char *name, cache_error *err);

enum cache_outcome {
	CACHE_TRIAL_OK,
	CACHE_TRIAL_WRONG,
	CACHE_TRIAL_COMPILE_ERROR,
	CACHE_TRIAL_TIMEOUT,
	CACHE_TRIAL_CRASH,
	CACHE_TRIAL_ERROR,
	CACHE_TRIAL_OUTCOMES
};

/* "ok", "wrong", "compile_error", "timeout", "crash", "error"; NULL when
 * "outcome" is out of range. */
const char *cache_outcome_name(enum cache_outcome outcome);

/* One measured candidate. The plan is stored as compact JSON with sorted
 * keys; "detail" (may be NULL) is cut to CACHE_DETAIL_MAX bytes; a NaN
 * "median_ms" is stored as NULL. */
typedef struct cache_trial {
	const char *graph;   /* graph key, put before */
	const char *device;  /* device signature */
	const char *codegen; /* codegen version */
	const char *plan;    /* plan JSON */
	enum cache_outcome outcome;
	double median_ms;
	const char *detail;
} cache_trial;

int cache_record_trial(__cache_keep cache *c,
		       __cache_keep const cache_trial *trial, cache_error *err);

/* A published plan. For cache_publish the caller fills everything but
 * "version" and "created_at"; cache_fetch_best returns one in a single
 * allocation, all strings inside it, freed with cache_plan_free. */
typedef struct cache_plan {
	const char *graph;     /* graph key */
	const char *device;    /* device signature */
	const char *codegen;   /* codegen version */
	int version;           /* 1, 2, 3 per (graph, device, codegen) */
	const char *plan;      /* plan JSON (stored compact, keys sorted) */
	const char *sources;   /* JSON array, one string (the source) or one
				* object holding it per kernel */
	const void *binaries;  /* may be NULL */
	size_t binaries_len;
	const char *launch;    /* JSON, may be NULL */
	double median_ms;      /* NaN: unknown */
	double spread_ms;      /* NaN: unknown */
	const char *found_by;  /* e.g. "default", "genetic round 3" */
	int64_t created_at;    /* unix seconds */
} cache_plan;

/* Publishes "plan" as the next version of its (graph, device, codegen) and
 * sets *version (may be NULL) to that number. The graph must have been
 * put (CACHE_NOT_FOUND otherwise); the device is added when new. */
int cache_publish(__cache_keep cache *c, __cache_keep const cache_plan *plan,
		  int *version, cache_error *err);

/* A plan that crashed or hung a worker, never to be tried again, with
 * what it takes to reproduce it (the repro bundle; every part may be NULL
 * or 0, so that no quarantine is lost for want of it). */
typedef struct cache_quarantine_entry {
	const char *graph;
	const char *device;
	const char *codegen;
	const char *plan;   /* plan JSON; matched in its compact sorted form */
	const char *reason; /* e.g. "worker killed by signal 11"; may be
			     * NULL, so that no quarantine is lost for it */
	const char *source; /* the offending kernel source, may be NULL */
	const char *cause;  /* "crash" or "timeout" */
	int signal;         /* the signal that killed the worker, or 0 */
	double time_limit_s; /* the limit a hung worker passed, or 0 */
	int64_t seed;       /* seeds the inputs the plan was run on */
	const char *graph_json; /* the graph.json text the plan ran on */
	const char *sources;    /* JSON array of each kernel's source */
	const char *worker_log; /* the end of the worker's stderr */
} cache_quarantine_entry;

/* Quarantines a plan; quarantining it again keeps the first entry. */
int cache_quarantine(__cache_keep cache *c,
		     __cache_keep const cache_quarantine_entry *entry,
		     cache_error *err);

/* Rows deleted by one cache_prune, and the data's size before and after:
 * on SQLite the database's pages times the page size (the file's size
 * once checkpointed); on PostgreSQL the bytes of its rows as the server
 * stores them (its files keep the space of deleted rows until it
 * vacuums). */
typedef struct cache_prune_stats {
	int64_t trials, plans, graphs, quarantine, devices;
	int64_t bytes_before, bytes_after;
} cache_prune_stats;

/* Shrinks the cache. With "max_age_s" > 0 everything older goes: trials,
 * plans (latest versions too), quarantine entries, and graphs not put or
 * written for that long with all they hold. Then, with "max_bytes" > 0,
 * while the data takes more than "max_bytes": the oldest trials, then the
 * oldest plan versions that are not the latest of their (graph, device,
 * codegen), then whole graphs, least recently used first. A SQLite file is
 * then shrunk (incremental vacuum and a truncating checkpoint); on
 * PostgreSQL a graph whose row another connection holds (a publish of it
 * in flight) is passed over. "stats" may be NULL. */
int cache_prune(__cache_keep cache *c, int64_t max_age_s, int64_t max_bytes,
		cache_prune_stats *stats, cache_error *err);

/* Copies the WAL into the database and truncates it. CACHE_EBUSY when a
 * reader kept it from finishing within the busy timeout. */
int cache_checkpoint(__cache_keep cache *c, cache_error *err);

/* Reads. Any thread, one at a time (see above). */

/* The newest version of the plan for (graph, device, codegen) when it is at
 * least "min_version" (a client that holds version n asks for n + 1):
 * returns that version and, when "out" is not NULL, sets *out to the plan.
 * CACHE_NOT_FOUND when there is none, or none that new.
 *
 * Each version stores a checksum of its plan, sources and launch, written
 * with it; a version whose texts no longer match it (changed behind the
 * cache's back) is skipped for the next older one, told to the log
 * callback (CACHE_LOG_ERR, naming graph, device, codegen and version) and,
 * when the caller is the owner, marked bad for good (cache_show lists
 * why). The CACHE_NOT_FOUND message names a version skipped so. */
int cache_fetch_best(__cache_keep cache *c, const char *graph,
		     const char *device, const char *codegen, int min_version,
		     __cache_give cache_plan **out, cache_error *err);

void cache_plan_free(__cache_take cache_plan *plan);

/* Whether "plan_json" is quarantined for (graph, device, codegen), in any
 * formatting of the same JSON. On failure returns false and fills "err"
 * (err->code is 0 otherwise). */
bool cache_is_quarantined(__cache_keep cache *c, const char *graph,
			  const char *device, const char *codegen,
			  const char *plan_json, cache_error *err);

/* The plans quarantined for (graph, device, codegen), as a JSON array of
 * plans (objects), oldest first: the daemon skips them. An unknown graph
 * or device gives an empty array. */
int cache_quarantined_plans(__cache_keep cache *c, const char *graph,
			    const char *device, const char *codegen,
			    __cache_give json_t **out, cache_error *err);

/* Every quarantine entry, or those of graph "key" when it is not NULL,
 * oldest first, as a JSON array of {"id", "key", "name", "device",
 * "codegen", "plan" (JSON), "reason", "cause", "signal", "time_limit_s",
 * "seed", "created_at" (unix seconds), "graph" (the graph.json text),
 * "sources" (JSON array), "worker_log"}; the parts of the bundle an entry
 * lacks are null. */
int cache_quarantine_entries(__cache_keep cache *c, const char *key,
			     __cache_give json_t **out, cache_error *err);

/* The latest version of one (graph, device, codegen). */
typedef struct cache_entry {
	const char *graph;
	const char *name;   /* may be NULL */
	const char *device;
	const char *codegen;
	int version;
	double median_ms;   /* NaN: unknown */
	int64_t updated_at; /* when that version was published */
	int64_t bytes;      /* what its rows hold: every version's plan,
			     * sources, binaries and launch, its trials'
			     * plans and details, and its graph's texts */
} cache_entry;

/* Calls "fn" for the latest good version (not marked bad) of every
 * (graph, device, codegen), in
 * order of graph key, device and codegen, until "fn" returns nonzero.
 * Returns the number of calls. "fn" may write (from the owner) but must not
 * read through "c". */
int cache_list(__cache_keep cache *c,
	       int (*fn)(void *user, const cache_entry *entry), void *user,
	       cache_error *err);

/* Everything about graph "key" as JSON: {"graph", "name", "canonical",
 * "first_seen", "last_used", "plans": [every version: "device", "codegen",
 * "version", "plan", "kernels", "binary_bytes", "median_ms", "spread_ms",
 * "found_by", "created_at", "bad" (why it is not served: it failed its
 * checksum; null for a good version)], "trials": [per device and codegen: "device",
 * "codegen", "total", "outcomes": {"ok": n, ...}], "quarantined": n}.
 * CACHE_NOT_FOUND for an unknown key. */
int cache_show(__cache_keep cache *c, const char *key,
	       __cache_give json_t **out, cache_error *err);

/* Every trial recorded for (graph, device, codegen), newest first, at
 * most "limit" of them (0: all), as a JSON array of {"plan" (the stored
 * plan as JSON), "outcome" ("ok", "wrong", ...), "median_ms" (a number or
 * null)}. The daemon reads them when a job starts, so that a plan measured
 * on this device is not measured again and a key submitted again resumes
 * from its stored population. An unknown graph or device gives an empty
 * array; a negative "limit" is CACHE_EINVAL. */
int cache_trials(__cache_keep cache *c, const char *graph, const char *device,
		 const char *codegen, int64_t limit, __cache_give json_t **out,
		 cache_error *err);

typedef struct cache_stats {
	int64_t file_bytes; /* the database file */
	int64_t wal_bytes;  /* its -wal file, 0 when absent */
	int64_t page_size, page_count, freelist_count;
	int64_t graphs, devices, plans, trials, quarantine; /* rows */
} cache_stats;

int cache_stat(__cache_keep cache *c, cache_stats *out, cache_error *err);

/* Training runs (runs.c; docs/cache.md, "Runs"). A run names itself
 * ("run": 1 to CACHE_RUN_MAX bytes, no control characters) and is pinned
 * to one version of each key it fetches, per device signature and
 * codegen, so that every rank of the run gets that version, however many
 * land after it, until the run advances. Pins are written by the owner;
 * on PostgreSQL they are shared by every daemon of the database. */
#define CACHE_RUN_MAX 128

/* The version "run" is pinned to for (graph, device, codegen) into
 * *version: its pin, or, at the run's first fetch of the key, the latest
 * good version, pinned in the same transaction (INSERT ... ON CONFLICT DO
 * NOTHING, then read back: ranks that race pin one version, whichever
 * inserts first). CACHE_NOT_FOUND, naming the run and the key, when the
 * run has no pin and the key no version to pin. */
int cache_pin(__cache_keep cache *c, const char *run, const char *graph,
	      const char *device, const char *codegen, int *version, cache_error *err);

/* Moves the pins of "run" on (device, codegen) to the latest good version
 * of their keys, in one write transaction: the "n" keys of "keys" (each
 * pinned now when the run had none), or, with "n" 0, every key the run
 * has pinned. *out is a JSON array of {"key", "version", "previous" (0
 * for a key pinned now)}, in the order of "keys" or of key. A key with no
 * version to pin is CACHE_NOT_FOUND when listed (nothing is moved), kept
 * at its pin otherwise; a run with no pin and no keys is CACHE_NOT_FOUND. */
int cache_advance(__cache_keep cache *c, const char *run, const char *device,
		  const char *codegen, const char *const *keys, int n,
		  __cache_give json_t **out, cache_error *err);

/* Exactly version "version" of (graph, device, codegen), as
 * cache_fetch_best gives the newest (the checksum checked the same way):
 * what a run pinned to it fetches. CACHE_NOT_FOUND when the cache no
 * longer holds it (pruned) or it failed its checksum, saying which. */
int cache_fetch_version(__cache_keep cache *c, const char *graph, const char *device,
			const char *codegen, int version, __cache_give cache_plan **out,
			cache_error *err);

/* Versions published by others (listen.c; docs/operations.md,
 * "Watchers across daemons"). On PostgreSQL a publish also sends a
 * notice (NOTIFY on channel CACHE_VERSIONS_CHANNEL, committed with the
 * version), so that daemons sharing the database tell their watchers of
 * each other's versions. SQLite has one writer: nothing to hear. */
#define CACHE_VERSIONS_CHANNEL "tuned_versions"

typedef struct cache_notice {
	const char *graph;
	const char *device;
	const char *codegen;
	int version;
} cache_notice;

/* Listens, on the connection of c's reads, for the versions other
 * connections publish, and sets *fd to the socket to poll for them
 * (readable: call cache_notices), or to -1 when "c" is a SQLite file.
 * A read: on the thread that reads "c". Call it again after
 * cache_notices failed: it connects again when it must, and gives the
 * new socket. */
int cache_listen(__cache_keep cache *c, int *fd, cache_error *err);

/* Reads what came (without waiting) and calls "fn" for each version
 * published by a connection other than c's own writer, until "fn"
 * returns nonzero; strings live for the call. Returns the number of
 * calls, or CACHE_EIO when the connection that listens was lost (or made
 * again by a read, which does not listen): listen again. 0 on SQLite. */
int cache_notices(__cache_keep cache *c,
		  int (*fn)(void *user, const cache_notice *notice), void *user,
		  cache_error *err);

/* The daemon's job queue (jobs.c): one row per job, as the daemon keeps
 * it. Texts are borrowed; in cache_jobs' callback they live for the call. */
typedef struct cache_job {
	int64_t id;          /* >= 1 */
	int64_t uid;         /* who submitted it; < 0: not known */
	const char *key;
	const char *name;
	const char *graph;   /* the graph.json text; NULL when writing a job
			      * written before, whose graph is kept */
	const char *state;   /* "queued", "running", "done", "failed",
			      * "cancelled" */
	double budget_s;
	int max_trials;
	int priority;
	int trials;
	double best_ms;      /* <= 0: none */
	double first_ms;     /* the version the job started from, timed
			      * beside its best; <= 0: none */
	int version;
	const char *error;   /* may be NULL: none */
	double created_at;   /* unix seconds */
	double finished_at;  /* <= 0: not finished */
	/* A shared queue (PostgreSQL) only; SQLite neither keeps nor gives
	 * them. */
	const char *device;     /* the device signature that runs it; NULL: any */
	const char *claimed_by; /* read: the cache instance holding its lease,
				 * NULL: none */
	bool claimed;           /* read: this cache holds its lease */
} cache_job;

/* Writes the "n" jobs (each with its graph inserted, or updating the row
 * of its id already there; each without updating the row of its id,
 * which must exist: CACHE_NOT_FOUND otherwise) and forgets the oldest
 * finished jobs beyond "keep_finished", in one write transaction. A
 * job's graph (the biggest text by far) is so written once, not at each
 * change of its state. On a shared queue (PostgreSQL) a job's row that
 * had finished is left as it is (a cancel that lost to its end): returns
 * the number of such jobs, whose rows the caller reads again to show how
 * they ended; 0 on SQLite. */
int cache_put_jobs(__cache_keep cache *c, __cache_keep const cache_job *jobs,
		   int n, int keep_finished, cache_error *err);

/* Calls "fn" for every job in order of id until it returns nonzero;
 * returns the number of calls. A read: "fn" must not read through "c". */
int cache_jobs(__cache_keep cache *c,
	       int (*fn)(void *user, const cache_job *job), void *user,
	       cache_error *err);

/* The job queue shared by the daemons of one PostgreSQL database
 * (pg_jobs.c; docs/design/cache.md, "A shared job queue"). A daemon
 * works on a job only while it holds its lease: the job's row names the
 * cache instance that claimed it until a time, by the server's clock. */
bool cache_is_shared(__cache_keep const cache *c);

/* One pass of a daemon over the shared queue, one write transaction:
 * renews the leases it holds of the jobs among "watch" (one it holds but
 * does not watch, having failed to take it, is left to run out), claims
 * up to "claim" jobs of "device" that are queued or running with no lease
 * or one that ran out (FOR UPDATE SKIP LOCKED: two daemons never claim
 * one job), oldest of the
 * highest priority first, then calls "fn" for the jobs of "device" that
 * are queued or running, with an id above "known_max", or among "watch":
 * each job's graph only when this cache holds its lease (job->claimed),
 * or the job is among "help".
 * Refused on SQLite (CACHE_EINVAL). */
typedef struct cache_job_pass {
	const char *device;
	double lease_s;    /* a claim or renewal lasts this long */
	int claim;         /* jobs to claim at most */
	int64_t known_max; /* the largest id the daemon knows */
	const int64_t *watch;
	int nwatch;
	const int64_t *help; /* jobs another cache holds whose graphs to give
			      * (the daemon is to help their search) */
	int nhelp;
} cache_job_pass;

int cache_pass_jobs(__cache_keep cache *c, __cache_keep const cache_job_pass *pass,
		    int (*fn)(void *user, const cache_job *job), void *user,
		    cache_error *err);

/* Gives back the leases this cache holds, its jobs queued again for
 * another daemon (at a clean stop). */
int cache_release_jobs(__cache_keep cache *c, cache_error *err);

/* Renews for "lease_s" the leases its owner holds of the "n" jobs "ids"
 * (those it holds no more are left alone): the number renewed. One
 * statement on the handle's reading connection, so that a reader of the
 * owner (cache_open_reader) renews them from a thread of its own while
 * the owner's connection is busy. Refused on SQLite. */
int cache_renew_jobs(__cache_keep cache *c, double lease_s, const int64_t *ids, int n,
		     cache_error *err);

/* A new job id, unique in the database (a sequence); a read, from the
 * thread that reads through "c". Refused on SQLite, whose one daemon
 * numbers its jobs itself. */
int cache_new_job_id(__cache_keep cache *c, int64_t *id, cache_error *err);

/* One key searched by several daemons of a PostgreSQL database at once
 * (pg_share.c; docs/design/cache.md, "A search shared by daemons"): each
 * claims a plan before it measures it, and reads the trials the others
 * recorded at each generation. Both are single statements on the
 * handle's reading connection, so that a handle of cache_open_reader
 * serves them from the thread that owns it. Refused on SQLite
 * (CACHE_EINVAL), whose file has one daemon. */

/* Claims "plan_json" (stored, as trials are, compact with sorted keys)
 * on (graph, device, codegen) for "claim_s" seconds: 1 when the caller
 * is to measure it; 0 when a trial of it on the device is recorded
 * already, or another claim of it has not run out. A claim that ran
 * out (its daemon died before it recorded the trial) is taken again. */
int cache_claim_plan(__cache_keep cache *c, const char *graph, const char *device,
		     const char *codegen, const char *plan_json, double claim_s,
		     cache_error *err);

/* The trials recorded for (graph, device, codegen) after the trial
 * numbered "*after" (0: from the first), oldest first, at most "limit"
 * (> 0), as a JSON array like cache_trials'; *after becomes the number
 * of the last one read. With *after < 0 none is read, and *after
 * becomes the number of the newest (0: none yet). */
int cache_trials_after(__cache_keep cache *c, const char *graph, const char *device,
		       const char *codegen, int64_t *after, int limit,
		       __cache_give json_t **out, cache_error *err);

/* Moving entries between caches (transfer.c; docs/cache.md, "Export and
 * import"). */

/* Keeps "graph_json", the graph.json whose op numbers the plans of graph
 * "key" use, for a put graph that has none yet (the first one stays).
 * CACHE_NOT_FOUND for a graph not put. */
int cache_keep_graph_json(__cache_keep cache *c, const char *key,
			  const char *graph_json, cache_error *err);

/* Graph "key" as an entry of an export file: {"key", "name", "graph"
 * (the kept graph.json, parsed), "versions": [every version: "device",
 * "codegen", "version", "plan", "sources", "launch", "binaries" (base64
 * or null), "median_ms", "spread_ms", "found_by", "created_at"]}, less
 * the versions marked bad or failing their checksum (see
 * cache_fetch_best). CACHE_NOT_FOUND for a key not cached; CACHE_EINVAL, saying so, for one
 * with no graph.json kept (put before the cache kept them). */
int cache_export_graph(__cache_keep cache *c, const char *key,
		       __cache_give json_t **out, cache_error *err);

/* Writes "entry" (as cache_export_graph gives it, checked by the caller
 * against its graph) with "canonical", its graph's canonical text, in one
 * write transaction: the graph is put when new, and each (device,
 * codegen) of the entry gets its versions, with their numbers and times,
 * when the cache has none of it; one the cache has gets the entry's
 * newest version as its next version ("found_by" "imported: ...") when
 * that is faster than the cache's newest, and is left as it is
 * otherwise. *out is {"versions": imported, "kept": [{"device",
 * "codegen", "reason"}]}. A malformed entry is CACHE_EINVAL, naming the
 * field. */
int cache_import_graph(__cache_keep cache *c, __cache_keep json_t *entry,
		       const char *canonical, __cache_give json_t **out,
		       cache_error *err);

#endif
