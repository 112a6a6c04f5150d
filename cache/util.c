/*
 * util.c: errors, statements, transactions and JSON for the other files.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cache_int.h"

const char *cache_strerror(int code)
{
	switch (code) {
	case CACHE_OK: return "CACHE_OK";
	case CACHE_RECOVERED: return "CACHE_RECOVERED";
	case CACHE_NOT_FOUND: return "CACHE_NOT_FOUND";
	case CACHE_EINVAL: return "CACHE_EINVAL";
	case CACHE_ENOMEM: return "CACHE_ENOMEM";
	case CACHE_EIO: return "CACHE_EIO";
	case CACHE_EBUSY: return "CACHE_EBUSY";
	case CACHE_ECORRUPT: return "CACHE_ECORRUPT";
	case CACHE_ESCHEMA: return "CACHE_ESCHEMA";
	case CACHE_ETHREAD: return "CACHE_ETHREAD";
	case CACHE_ESQLITE: return "CACHE_ESQLITE";
	case CACHE_ESTALE: return "CACHE_ESTALE";
	}
	return "unknown";
}

static const char *const outcome_names[CACHE_TRIAL_OUTCOMES] = {
	"ok", "wrong", "compile_error", "timeout", "crash", "error",
};

const char *cache_outcome_name(enum cache_outcome outcome)
{
	if ((unsigned)outcome >= CACHE_TRIAL_OUTCOMES)
		return NULL;
	return outcome_names[outcome];
}

void cache_set_error(cache_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
}

/* The cache_code for SQLite result "rc" (primary or extended). */
int cache_sqlite_code(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return CACHE_OK;
	case SQLITE_NOMEM:
		return CACHE_ENOMEM;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return CACHE_EBUSY;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return CACHE_ECORRUPT;
	case SQLITE_IOERR:
	case SQLITE_FULL:
	case SQLITE_CANTOPEN:
	case SQLITE_READONLY:
	case SQLITE_PERM:
		return CACHE_EIO;
	case SQLITE_CONSTRAINT:
	case SQLITE_MISMATCH:
	case SQLITE_TOOBIG:
	case SQLITE_RANGE:
		return CACHE_EINVAL;
	}
	return CACHE_ESQLITE;
}

/* Fills "err" with "what: <SQLite's message>" for result "rc" of "db" and
 * returns the matching cache_code. */
int cache_db_error(sqlite3 *db, int rc, cache_error *err, const char *what)
{
	int code = cache_sqlite_code(rc);
	const char *text = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);

	if (code == CACHE_OK)
		code = CACHE_ESQLITE;
	cache_set_error(err, code, "%s: %s", what, text);
	return code;
}

int64_t cache_now(const cache *c)
{
	if (c->options.clock)
		return c->options.clock(c->options.clock_user);
	return (int64_t)time(NULL);
}

void cache_log(const cache_options *options, int level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (!options->log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	options->log(options->log_user, level, line);
}

int cache_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **out,
		  cache_error *err)
{
	int rc = sqlite3_prepare_v2(db, sql, -1, out, NULL);

	if (rc != SQLITE_OK)
		return cache_db_error(db, rc, err, "cannot prepare a statement");
	return 0;
}

/* Runs "sql"; on failure "what" says what could not be done. */
int cache_exec(sqlite3 *db, const char *sql, const char *what,
	       cache_error *err)
{
	int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);

	if (rc != SQLITE_OK)
		return cache_db_error(db, rc, err, what);
	return 0;
}

/* Runs "sql", a query of one integer, into *out. */
int cache_query_int(sqlite3 *db, const char *sql, int64_t *out,
		    cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(db, sql, &stmt, err);
	if (rc)
		return rc;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(stmt, 0);
		rc = 0;
	} else {
		rc = cache_db_error(db, rc, err, "cannot read");
	}
	sqlite3_finalize(stmt);
	return rc;
}

/* Binds "text" (NULL binds NULL) without copying it: "text" must outlive
 * the statement's steps. */
void cache_bind_text(sqlite3_stmt *stmt, int i, const char *text)
{
	if (text)
		sqlite3_bind_text(stmt, i, text, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(stmt, i);
}

/* Binds "value", NaN as NULL. */
void cache_bind_real(sqlite3_stmt *stmt, int i, double value)
{
	if (isnan(value))
		sqlite3_bind_null(stmt, i);
	else
		sqlite3_bind_double(stmt, i, value);
}

double cache_column_real(sqlite3_stmt *stmt, int i)
{
	if (sqlite3_column_type(stmt, i) == SQLITE_NULL)
		return NAN;
	return sqlite3_column_double(stmt, i);
}

/* The single-writer rule: writes come only from the owner, the thread
 * that opened "c" or the one it was handed to. "what" names the refused
 * write. */
void cache_hand_over(cache *c, pthread_t thread)
{
	if (!NEVER(!c))
		c->owner = thread;
}

int cache_check_owner(const cache *c, const char *what, cache_error *err)
{
	if (NEVER(!c)) {
		cache_set_error(err, CACHE_EINVAL, "cannot %s: no cache", what);
		return CACHE_EINVAL;
	}
	if (NEVER(!pthread_equal(pthread_self(), c->owner))) {
		cache_set_error(err, CACHE_ETHREAD,
				"cannot %s: cache '%s' is written only by the "
				"thread that owns it", what, c->path);
		return CACHE_ETHREAD;
	}
	if (!c->writer && !c->pg_writer) {
		cache_set_error(err, CACHE_ETHREAD, "cannot %s: this handle of "
				"cache '%s' only reads", what, c->path);
		return CACHE_ETHREAD;
	}
	return 0;
}

/* "text" must be a non-empty string; "what" names it. */
int cache_check_text(const char *text, const char *what, cache_error *err)
{
	if (!text || !*text) {
		cache_set_error(err, CACHE_EINVAL, "%s is missing", what);
		return CACHE_EINVAL;
	}
	return 0;
}

/* A complete key: graph key, device signature, codegen version. */
int cache_check_key(const char *graph, const char *device, const char *codegen,
		    cache_error *err)
{
	int rc = cache_check_text(graph, "graph key", err);

	if (rc == 0)
		rc = cache_check_text(device, "device signature", err);
	if (rc == 0)
		rc = cache_check_text(codegen, "codegen version", err);
	return rc;
}

/* Steps "stmt" of "db" to its first row or its end and finalizes it;
 * "what" says what failed. */
int cache_run(sqlite3 *db, sqlite3_stmt *stmt, const char *what,
	      cache_error *err)
{
	int rc = sqlite3_step(stmt);

	if (rc == SQLITE_ROW || rc == SQLITE_DONE)
		rc = 0;
	else
		rc = cache_db_error(db, rc, err, what);
	sqlite3_finalize(stmt);
	return rc;
}

static const char *const txn_sql[CACHE_TXN_STMTS] = {
	"BEGIN IMMEDIATE", "COMMIT", "ROLLBACK", "BEGIN", "COMMIT",
};

/* Prepares the transaction statements of the writer, or of the reader. */
int cache_prepare_txn(cache *c, bool reader, cache_error *err)
{
	int first = reader ? CACHE_BEGIN_READ : CACHE_BEGIN_WRITE;
	int last = reader ? CACHE_END_READ : CACHE_ROLLBACK;
	int rc = 0;

	for (int i = first; rc == 0 && i <= last; i++)
		rc = cache_prepare(reader ? c->reader : c->writer, txn_sql[i],
				   &c->txn[i], err);
	return rc;
}

/* Steps transaction statement "i" once; returns SQLite's result. */
static int step_txn(cache *c, enum cache_txn i)
{
	int rc = sqlite3_step(c->txn[i]);

	sqlite3_reset(c->txn[i]);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void rollback(cache *c)
{
	if (!sqlite3_get_autocommit(c->writer))
		step_txn(c, CACHE_ROLLBACK);
}

/* Begins a write. A transaction some failure left open is rolled back
 * first (NEVER: cache_end always ends them). */
int cache_begin(cache *c, cache_error *err)
{
	int rc;

	if (NEVER(!sqlite3_get_autocommit(c->writer)))
		rollback(c);
	rc = step_txn(c, CACHE_BEGIN_WRITE);
	if (rc != SQLITE_OK)
		return cache_db_error(c->writer, rc, err, "cannot begin a write");
	return 0;
}

/* Ends the transaction begun by cache_begin: commits when "rc" is 0,
 * rolls back otherwise or when the commit fails. Returns the final rc. */
int cache_end(cache *c, int rc, cache_error *err)
{
	int src;

	if (rc == 0) {
		src = step_txn(c, CACHE_COMMIT);
		if (src != SQLITE_OK)
			rc = cache_db_error(c->writer, src, err, "cannot commit");
	}
	if (rc != 0)
		rollback(c);
	return rc;
}

/* Begins a read of several statements on one snapshot; "what" says what
 * could not be done. End it with cache_read_end. */
int cache_read_begin(cache *c, const char *what, cache_error *err)
{
	int rc;

	cache_read_end(c);
	rc = step_txn(c, CACHE_BEGIN_READ);
	if (rc != SQLITE_OK)
		return cache_db_error(c->reader, rc, err, what);
	return 0;
}

/* Ends the reader's transaction if one is open: a snapshot held on would
 * keep checkpoints from finishing and the wal growing. */
void cache_read_end(cache *c)
{
	if (!sqlite3_get_autocommit(c->reader))
		step_txn(c, CACHE_END_READ);
}

/* Kernel sources: one element per kernel, its text or an object that
 * holds it (e.g. {"kernel", "language", "source"}). */
static bool is_sources(const json_t *value)
{
	json_t *item;
	size_t i;

	if (!json_is_array(value))
		return false;
	json_array_foreach(value, i, item)
		if (!json_is_string(item) && !json_is_object(item))
			return false;
	return true;
}

/* Sets *out to "text" parsed and printed again compact with sorted keys,
 * so that equal JSON is equal text; "what" names the text in errors. With
 * "sources", anything but a JSON array of strings or objects is refused.
 * Free with cache_json_free. */
int cache_json_canonical(const char *text, const char *what,
			 bool sources, __cache_give char **out,
			 cache_error *err)
{
	json_error_t jerr;
	json_t *value;
	int rc;

	*out = NULL;
	rc = cache_check_text(text, what, err);
	if (rc)
		return rc;
	value = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
	if (!value) {
		if (json_error_code(&jerr) == json_error_out_of_memory) {
			cache_set_error(err, CACHE_ENOMEM, "%s: out of memory", what);
			return CACHE_ENOMEM;
		}
		cache_set_error(err, CACHE_EINVAL, "%s: not JSON: %s (line %d, column %d)",
				what, jerr.text, jerr.line, jerr.column);
		return CACHE_EINVAL;
	}
	if (sources && !is_sources(value)) {
		rc = CACHE_EINVAL;
		cache_set_error(err, rc, "%s: not a JSON array of strings or "
				"objects", what);
		goto out;
	}
	*out = json_dumps(value, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	if (!*out) {
		rc = CACHE_ENOMEM;
		cache_set_error(err, rc, "%s: out of memory", what);
	}
out:
	json_decref(value);
	return rc;
}

/* Frees text from cache_json_canonical with jansson's own free. */
void cache_json_free(__cache_take char *text)
{
	json_free_t free_fn;

	if (!text)
		return;
	json_get_alloc_funcs(NULL, &free_fn);
	free_fn(text);
}

/* The length of "text" cut to at most "max" bytes without splitting a
 * UTF-8 sequence. */
size_t cache_utf8_cut(const char *text, size_t max)
{
	size_t n = strlen(text);

	if (n <= max)
		return n;
	n = max;
	while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80)
		n--;
	return n;
}

int cache_append_rows(cache *c, sqlite3_stmt *stmt, json_t *(*row)(sqlite3_stmt *),
		      json_t *out, const char *what, cache_error *err)
{
	int rc;

	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
		if (json_array_append_new(out, row(stmt)) != 0)
			break;
	if (rc == SQLITE_DONE)
		rc = 0;
	else if (rc == SQLITE_ROW)
		rc = CACHE_ENOMEM;
	else
		rc = cache_db_error(c->reader, rc, err, what);
	sqlite3_finalize(stmt);
	if (rc == CACHE_ENOMEM)
		cache_set_error(err, rc, "%s: out of memory", what);
	return rc;
}
