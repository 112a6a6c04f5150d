/*
 * open.c: opening a cache: the writer lock, the check, recovery from a
 * damaged file, the settings, the migrations and the reader.
 *
 * The order matters. The lock ("<path>-lock", flock'd) comes first, so no
 * other cache_open moves the file while this one checks it. The check runs
 * before any setting that would write. Only SQLite's verdicts "not a
 * database" and "corrupt" (or a check that does not say "ok") move the file
 * aside; every other failure (no permission, out of memory, I/O) is
 * reported and leaves the file alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"

/* "text" ("%m" of errno "e"), with a lowercase first letter. */
static void errno_text(int e, char *text, size_t size)
{
	errno = e;
	snprintf(text, size, "%m");
	if (text[0] >= 'A' && text[0] <= 'Z' && !(text[1] >= 'A' && text[1] <= 'Z'))
		text[0] += 'a' - 'A';
}

int cache_alloc(const cache_engine *engine, const char *path,
		const cache_options *options, cache **out, cache_error *err)
{
	cache *c = sqlite3_malloc64(sizeof(*c));

	*out = NULL;
	if (c && !(c->found_bad = sqlite3_malloc64(sizeof(*c->found_bad)))) {
		sqlite3_free(c);
		c = NULL;
	}
	if (!c || !(c->path = sqlite3_mprintf("%s", path))) {
		if (c)
			sqlite3_free(c->found_bad);
		sqlite3_free(c);
		cache_set_error(err, CACHE_ENOMEM, "cannot open cache '%s': "
				"out of memory", path);
		return CACHE_ENOMEM;
	}
	c->engine = engine;
	c->writer = c->reader = NULL;
	c->pg_writer = c->pg_reader = NULL;
	c->conninfo = c->instance = NULL;
	memset(c->txn, 0, sizeof(c->txn));
	pthread_mutex_init(&c->found_bad->lock, NULL);
	c->found_bad->n = 0;
	c->borrows_found_bad = false;
	c->owner = pthread_self();
	c->lock_fd = -1;
	memset(&c->options, 0, sizeof(c->options));
	if (options)
		c->options = *options;
	if (c->options.busy_timeout_ms <= 0)
		c->options.busy_timeout_ms = CACHE_DEFAULT_BUSY_MS;
	if (c->options.full_check_bytes == 0)
		c->options.full_check_bytes = CACHE_DEFAULT_FULL_CHECK_BYTES;
	*out = c;
	return 0;
}

/* A missing file will be created; an existing one must be a file. */
static int check_path(cache *c, cache_error *err)
{
	char why[128];
	struct stat st;

	if (stat(c->path, &st) != 0) {
		if (errno == ENOENT)
			return 0;
		errno_text(errno, why, sizeof(why));
	} else if (S_ISDIR(st.st_mode)) {
		snprintf(why, sizeof(why), "is a directory");
	} else if (!S_ISREG(st.st_mode)) {
		snprintf(why, sizeof(why), "not a regular file");
	} else {
		return 0;
	}
	cache_set_error(err, CACHE_EIO, "cannot open cache '%s': %s", c->path, why);
	return CACHE_EIO;
}

/* One writer per file: an exclusive flock on "<path>-lock", held open
 * (read-only: whoever may read the lock file may take it). */
static int take_lock(cache *c, cache_error *err)
{
	char why[128];
	char *lock = sqlite3_mprintf("%s-lock", c->path);
	int rc = 0;

	if (!lock) {
		cache_set_error(err, CACHE_ENOMEM, "cannot open cache '%s': "
				"out of memory", c->path);
		return CACHE_ENOMEM;
	}
	c->lock_fd = open(lock, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
	if (c->lock_fd < 0) {
		errno_text(errno, why, sizeof(why));
		rc = CACHE_EIO;
		cache_set_error(err, rc, "cannot open cache '%s': cannot open "
				"lock file '%s': %s", c->path, lock, why);
	} else if (flock(c->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		rc = errno == EWOULDBLOCK ? CACHE_EBUSY : CACHE_EIO;
		errno_text(errno, why, sizeof(why));
		cache_set_error(err, rc, "cannot open cache '%s': it is open "
				"for writing elsewhere (lock '%s': %s)",
				c->path, lock, why);
	}
	sqlite3_free(lock);
	return rc;
}

/* Opens "path" with "flags" into *db, with extended codes, the busy
 * timeout and the cache's SQL functions. */
static int open_db(cache *c, int flags, sqlite3 **db, cache_error *err)
{
	char why[128] = "";
	int rc;

	rc = sqlite3_open_v2(c->path, db, flags | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		if (*db && sqlite3_system_errno(*db))
			errno_text(sqlite3_system_errno(*db), why, sizeof(why));
		cache_set_error(err, cache_sqlite_code(rc), "cannot open cache "
				"'%s': %s%s%s%s", c->path,
				*db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc),
				*why ? " (" : "", why, *why ? ")" : "");
		return cache_sqlite_code(rc);
	}
	sqlite3_extended_result_codes(*db, 1);
	sqlite3_busy_timeout(*db, c->options.busy_timeout_ms);
	return cache_add_functions(*db, err);
}

/* Makes a missing cache file 0600 (the umask may take more away, never
 * add) before SQLite would make it 0644: its -wal and -shm take its mode.
 * An existing file keeps its mode. */
static int create_file(cache *c, cache_error *err)
{
	char why[128];
	int fd = open(c->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (errno == EEXIST)
		return 0;
	errno_text(errno, why, sizeof(why));
	cache_set_error(err, CACHE_EIO, "cannot open cache '%s': cannot create "
			"it: %s", c->path, why);
	return CACHE_EIO;
}

static int open_writer(cache *c, cache_error *err)
{
	int rc;

	rc = create_file(c, err);
	if (rc)
		return rc;
	rc = open_db(c, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, &c->writer,
		     err);
	if (rc)
		return rc;
	if (sqlite3_db_readonly(c->writer, "main") == 1) {
		cache_set_error(err, CACHE_EIO, "cannot open cache '%s': the "
				"file is read-only", c->path);
		return CACHE_EIO;
	}
	return 0;
}

/* Joins the lines of "text" with spaces: a log line is one line. */
static void one_line(char *text)
{
	for (; *text; text++)
		if (*text == '\n')
			*text = ' ';
}

/* Checks the file: 0 when sound, 1 when damaged ("reason" says how), a
 * negative code when the check itself failed. */
static int check_file(cache *c, char *reason, size_t size, cache_error *err)
{
	struct stat st;
	bool full = c->options.full_check_bytes > 0 &&
		    (stat(c->path, &st) != 0 ||
		     st.st_size <= c->options.full_check_bytes);
	sqlite3_stmt *stmt = NULL;
	const char *verdict;
	int rc;

	rc = sqlite3_prepare_v2(c->writer, full ? "PRAGMA integrity_check(1)"
				: "PRAGMA quick_check(1)", -1, &stmt, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		verdict = (const char *)sqlite3_column_text(stmt, 0);
		if (!verdict) {
			rc = cache_db_error(c->writer, SQLITE_NOMEM, err,
					    "cannot check the cache");
		} else if (strcmp(verdict, "ok") == 0) {
			rc = 0;
		} else {
			snprintf(reason, size, "%s: %s", full ?
				 "integrity check" : "quick check", verdict);
			one_line(reason);
			rc = 1;
		}
	} else if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT) {
		snprintf(reason, size, "%s", sqlite3_errmsg(c->writer));
		rc = 1;
	} else {
		rc = cache_db_error(c->writer, rc, err, "cannot check the cache");
	}
	sqlite3_finalize(stmt);
	return rc;
}

/* "<path>.damaged-<now>", with "-2", "-3"... when that exists. */
static char *damaged_name(cache *c)
{
	long long now = (long long)cache_now(c);
	char *name = sqlite3_mprintf("%s.damaged-%lld", c->path, now);
	struct stat st;

	for (int n = 2; name && lstat(name, &st) == 0; n++) {
		sqlite3_free(name);
		name = sqlite3_mprintf("%s.damaged-%lld-%d", c->path, now, n);
	}
	return name;
}

/* Moves "<path><suffix>" to "<to><suffix>" if it exists; 0 or errno. */
static int move_companion(const char *path, const char *to, const char *suffix)
{
	char *from = sqlite3_mprintf("%s%s", path, suffix);
	char *dest = sqlite3_mprintf("%s%s", to, suffix);
	int e = ENOMEM;

	if (from && dest)
		e = rename(from, dest) == 0 || errno == ENOENT ? 0 : errno;
	sqlite3_free(from);
	sqlite3_free(dest);
	return e;
}

/* Renames the damaged file and its journals aside (the shared memory
 * index is rebuilt) and tells the log and "err" in the same line. */
static int move_aside(cache *c, const char *reason, cache_error *err)
{
	char *to = damaged_name(c);
	char *shm = sqlite3_mprintf("%s-shm", c->path);
	char line[sizeof(err->message)], why[128];
	int e = ENOMEM;

	if (to && shm)
		e = rename(c->path, to) == 0 ? 0 : errno;
	if (!e)
		e = move_companion(c->path, to, "-wal");
	if (!e)
		e = move_companion(c->path, to, "-journal");
	if (!e && unlink(shm) != 0 && errno != ENOENT)
		e = errno;
	if (e) {
		errno_text(e, why, sizeof(why));
		snprintf(line, sizeof(line), "cache '%s' is damaged (%s) and "
			 "cannot be moved aside to '%s': %s", c->path, reason,
			 to ? to : "?", why);
	} else {
		snprintf(line, sizeof(line), "cache '%s' is damaged (%s): moved "
			 "it to '%s', starting a fresh cache", c->path, reason, to);
	}
	cache_set_error(err, e ? CACHE_EIO : CACHE_RECOVERED, "%s", line);
	cache_log(&c->options, CACHE_LOG_ERR, "%s", line);
	sqlite3_free(to);
	sqlite3_free(shm);
	return e ? CACHE_EIO : 0;
}

/* Opens the writer on a sound file: a damaged one is moved aside first
 * and *recovered set. */
static int open_checked(cache *c, bool *recovered, cache_error *err)
{
	char reason[200];
	int rc;

	rc = open_writer(c, err);
	if (rc == 0)
		rc = check_file(c, reason, sizeof(reason), err);
	if (rc <= 0)
		return rc;
	sqlite3_close(c->writer);
	c->writer = NULL;
	rc = move_aside(c, reason, err);
	if (rc)
		return rc;
	*recovered = true;
	rc = open_writer(c, err);
	if (rc == 0 && check_file(c, reason, sizeof(reason), err) != 0)
		rc = err && err->code < 0 ? err->code : CACHE_ECORRUPT;
	return rc;
}

/* Sets a pragma and checks the value it reports back. */
static int set_pragma(cache *c, const char *sql, const char *want,
		      cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	const char *got;
	int rc;

	rc = cache_prepare(c->writer, sql, &stmt, err);
	if (rc)
		return rc;
	rc = sqlite3_step(stmt);
	got = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(stmt, 0) : NULL;
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		rc = cache_db_error(c->writer, rc, err, "cannot set up the cache");
	} else if (want && (!got || strcmp(got, want) != 0)) {
		rc = CACHE_EIO;
		cache_set_error(err, rc, "cannot set up cache '%s': '%s' gives "
				"'%s', not '%s'", c->path, sql, got ? got : "",
				want);
	} else {
		rc = 0;
	}
	sqlite3_finalize(stmt);
	return rc;
}

/* Incremental auto-vacuum takes only on a new file, before any table. */
static int configure(cache *c, cache_error *err)
{
	int rc;

	rc = set_pragma(c, "PRAGMA auto_vacuum = INCREMENTAL", NULL, err);
	if (rc == 0)
		rc = set_pragma(c, "PRAGMA journal_mode = WAL", "wal", err);
	if (rc == 0)
		rc = set_pragma(c, "PRAGMA synchronous = FULL", NULL, err);
	if (rc == 0)
		rc = set_pragma(c, "PRAGMA foreign_keys = ON", NULL, err);
	return rc;
}

/* Failures after the file is open come from SQLite or the migrations:
 * say which cache. */
static void name_the_cache(cache *c, cache_error *err)
{
	char message[sizeof(err->message)];

	if (!err || strstr(err->message, c->path))
		return;
	snprintf(message, sizeof(message), "%s", err->message);
	cache_set_error(err, err->code, "cannot open cache '%s': %s", c->path,
			message);
}

int cache_sqlite_open(const char *path, const cache_options *options,
	       __cache_give cache **out, cache_error *err)
{
	bool recovered = false;
	cache *c = NULL;
	int rc;

	rc = cache_alloc(&cache_sqlite_engine, path, options, &c, err);
	if (rc)
		return rc;
	rc = check_path(c, err);
	if (rc)
		goto fail;
	rc = take_lock(c, err);
	if (rc)
		goto fail;
	rc = open_checked(c, &recovered, err);
	if (rc)
		goto fail;
	rc = configure(c, err);
	if (rc)
		goto fail;
	rc = cache_prepare_txn(c, false, err);
	if (rc)
		goto fail;
	rc = cache_migrate(c, err);
	if (rc)
		goto fail;
	rc = open_db(c, SQLITE_OPEN_READONLY, &c->reader, err);
	if (rc)
		goto fail;
	rc = cache_prepare_txn(c, true, err);
	if (rc)
		goto fail;
	*out = c;
	return recovered ? CACHE_RECOVERED : 0;
fail:
	name_the_cache(c, err);
	cache_sqlite_close(c);
	return rc;
}

int cache_sqlite_open_reader(__cache_keep const cache *c, __cache_give cache **out,
		      cache_error *err)
{
	cache *r = NULL;
	int rc = cache_alloc(&cache_sqlite_engine, c->path, &c->options, &r, err);

	if (rc)
		return rc;
	cache_borrow_found_bad(r, c);
	rc = open_db(r, SQLITE_OPEN_READONLY, &r->reader, err);
	if (!rc)
		rc = cache_prepare_txn(r, true, err);
	if (rc) {
		cache_sqlite_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

void cache_sqlite_close(__cache_take cache *c)
{
	if (!c)
		return;
	for (int i = 0; i < CACHE_TXN_STMTS; i++)
		sqlite3_finalize(c->txn[i]);
	sqlite3_close(c->reader);
	sqlite3_close(c->writer);
	if (c->lock_fd >= 0)
		close(c->lock_fd);
	cache_free(c);
}

void cache_borrow_found_bad(cache *r, const cache *c)
{
	pthread_mutex_destroy(&r->found_bad->lock);
	sqlite3_free(r->found_bad);
	r->found_bad = c->found_bad; /* what it finds, its cache's owner marks */
	r->borrows_found_bad = true;
}

void cache_free(cache *c)
{
	sqlite3_free(c->path);
	sqlite3_free(c->conninfo);
	if (!c->borrows_found_bad) {
		pthread_mutex_destroy(&c->found_bad->lock);
		sqlite3_free(c->found_bad);
	}
	sqlite3_free(c);
}

/* One writer per file: no version is published by another. */
int cache_sqlite_listen(cache *c, int *fd, cache_error *err)
{
	(void)c;
	(void)err;
	*fd = -1;
	return 0;
}

int cache_sqlite_notices(cache *c, int (*fn)(void *user, const cache_notice *notice),
			 void *user, cache_error *err)
{
	(void)c;
	(void)fn;
	(void)user;
	(void)err;
	return 0;
}

const cache_engine cache_sqlite_engine = {.name = "SQLite",
					  CACHE_ENGINE_ALL_OPS(CACHE_SQLITE_ENTRY)};
