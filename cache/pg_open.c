/*
 * pg_open.c: the PostgreSQL engine's connections, and its table of
 * operations.
 *
 * A PostgreSQL database is shared by any number of caches, each a daemon
 * of a fleet (unlike a SQLite file, which has one writer): each cache's
 * writer connection writes, in one transaction per write as on SQLite.
 * Publish numbers versions by compare-and-set (pg_write.c), and the job
 * queue is claimed under leases (pg_jobs.c), so that owners never
 * overwrite each other's work. Each cache is named in the queue by its
 * instance, "<host> pid <pid> at <unix time> #<n>". Messages name the database
 * by host, port, database and user, never by the connection string, which
 * may hold a password.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "cache_int.h"

/* The server's notices ("relation already exists, skipping") are not
 * the user's business. */
static void no_notice(void *user, const char *message)
{
	(void)user;
	(void)message;
}

/* "database 'd' on host:port as user", from "conninfo"; NULL when it does
 * not parse (then "why" says why). sqlite3_free it. */
static char *describe(const char *conninfo, char *why, size_t size)
{
	const char *host = NULL, *port = NULL, *db = NULL, *user = NULL;
	char *parse_err = NULL, *text;
	PQconninfoOption *o = PQconninfoParse(conninfo, &parse_err);

	if (!o) {
		snprintf(why, size, "%s", parse_err ? parse_err : "out of memory");
		PQfreemem(parse_err);
		return NULL;
	}
	for (PQconninfoOption *i = o; i->keyword; i++) {
		if (strcmp(i->keyword, "host") == 0)
			host = i->val;
		else if (strcmp(i->keyword, "port") == 0)
			port = i->val;
		else if (strcmp(i->keyword, "dbname") == 0)
			db = i->val;
		else if (strcmp(i->keyword, "user") == 0)
			user = i->val;
	}
	text = sqlite3_mprintf("database '%s' on %s:%s as %s", db ? db : "(default)",
			       host ? host : "(default host)",
			       port ? port : "(default port)",
			       user ? user : "(default user)");
	PQconninfoFree(o);
	if (!text)
		snprintf(why, size, "out of memory");
	return text;
}

/* What names this cache in the job queue's claims: unique among the
 * daemons of a fleet, across hosts and restarts, and among the caches of
 * one process (the n-th it opened). */
static char *instance_name(void)
{
	static int opened;
	char host[256] = "?";

	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = 0;
	return sqlite3_mprintf("%s pid %d at %lld #%d", host, (int)getpid(),
			       (long long)time(NULL),
			       __atomic_add_fetch(&opened, 1, __ATOMIC_RELAXED));
}

/* What the engine asks of every connection, unless the user's conninfo
 * says otherwise: a blackholed server fails a connect, and a dead one a
 * statement, in bounded time instead of freezing the daemon's loop. */
static const char *const defaults[][2] = {
	{"connect_timeout", "5"},
	{"keepalives", "1"},
	{"keepalives_idle", "30"},
	{"keepalives_interval", "10"},
	{"keepalives_count", "3"},
};

#define DEFAULTS ((int)(sizeof(defaults) / sizeof(defaults[0])))
#define CONNECT_KEYS (DEFAULTS + 4)

/* The settings of the connection itself, so that one lost and made again
 * (pg_run) has them too, appended to the user's own "options" (a
 * search_path...): the busy timeout as the time a statement waits for a
 * lock, a bound on any statement, and reals printed exactly. */
static char *session_options(const cache *c, const char *user_options)
{
	return sqlite3_mprintf("%s%s-c lock_timeout=%d -c statement_timeout=30000 "
			       "-c extra_float_digits=3",
			       user_options ? user_options : "",
			       user_options && *user_options ? " " : "",
			       c->options.busy_timeout_ms);
}

/* Option "keyword" of parsed "options"; NULL when not given. */
static const char *given(const PQconninfoOption *options, const char *keyword)
{
	for (const PQconninfoOption *o = options; o->keyword; o++)
		if (strcmp(o->keyword, keyword) == 0)
			return o->val;
	return NULL;
}

/* Keys and values for PQconnectdbParams: the user's conninfo as dbname
 * (expanded), then UTF-8, the session's options and the defaults the user
 * left out. 0, or CACHE_ENOMEM; *options to sqlite3_free. */
static int connect_params(const cache *c, const char **keys,
			  const char **values, char **options)
{
	PQconninfoOption *user = PQconninfoParse(c->conninfo, NULL);
	int n = 0;

	*options = NULL;
	if (!user)
		return CACHE_ENOMEM; /* it parsed at pg_alloc */
	*options = session_options(c, given(user, "options"));
	keys[n] = "dbname";
	values[n++] = c->conninfo;
	keys[n] = "client_encoding";
	values[n++] = "UTF8";
	keys[n] = "options";
	values[n++] = *options;
	for (int i = 0; i < DEFAULTS; i++) {
		if (given(user, defaults[i][0]))
			continue;
		keys[n] = defaults[i][0];
		values[n++] = defaults[i][1];
	}
	keys[n] = values[n] = NULL;
	PQconninfoFree(user);
	return *options ? 0 : CACHE_ENOMEM;
}

/* Connects *conn with the settings above. */
static int connect_to(cache *c, PGconn **conn, cache_error *err)
{
	const char *keys[CONNECT_KEYS], *values[CONNECT_KEYS];
	char message[400], *options;
	int rc = connect_params(c, keys, values, &options);

	*conn = rc ? NULL : PQconnectdbParams(keys, values, 1);
	sqlite3_free(options);
	if (*conn && PQstatus(*conn) == CONNECTION_OK) {
		PQsetNoticeProcessor(*conn, no_notice, NULL);
		return 0;
	}
	snprintf(message, sizeof(message), "%s", *conn ? PQerrorMessage(*conn) :
		 "out of memory");
	message[strcspn(message, "\n")] = 0;
	cache_set_error(err, *conn ? CACHE_EIO : CACHE_ENOMEM, "cannot open "
			"PostgreSQL cache %s: %s", c->path, message);
	return *conn ? CACHE_EIO : CACHE_ENOMEM;
}

/* A cache of this engine for "conninfo", connected to nothing yet. */
static int pg_alloc(const char *conninfo, const cache_options *options,
		    cache **out, cache_error *err)
{
	char why[256];
	char *name = describe(conninfo, why, sizeof(why));
	int rc;

	*out = NULL;
	if (!name) {
		cache_set_error(err, CACHE_EINVAL, "cannot open a PostgreSQL "
				"cache: its connection string: %s", why);
		return CACHE_EINVAL;
	}
	rc = cache_alloc(&cache_pg_engine, name, options, out, err);
	sqlite3_free(name);
	if (rc == 0 && !((*out)->conninfo = sqlite3_mprintf("%s", conninfo))) {
		cache_free(*out);
		*out = NULL;
		cache_set_error(err, CACHE_ENOMEM, "cannot open a PostgreSQL "
				"cache: out of memory");
		rc = CACHE_ENOMEM;
	}
	return rc;
}

int cache_pg_open(const char *where, const cache_options *options,
		  cache **out, cache_error *err)
{
	cache *c = NULL;
	int rc;

	rc = pg_alloc(where, options, &c, err);
	if (rc == 0)
		rc = connect_to(c, &c->pg_writer, err);
	if (rc == 0 && !(c->instance = instance_name())) {
		cache_set_error(err, CACHE_ENOMEM,
				"cannot open PostgreSQL cache "
				"%s: out of memory",
				c->path);
		rc = CACHE_ENOMEM;
	}
	if (rc == 0)
		rc = pg_migrate(c, err);
	if (rc == 0)
		rc = connect_to(c, &c->pg_reader, err);
	if (rc) {
		cache_pg_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

int cache_pg_open_reader(const cache *c, cache **out, cache_error *err)
{
	cache *r = NULL;
	int rc;

	rc = pg_alloc(c->conninfo, &c->options, &r, err);
	if (rc)
		return rc;
	cache_borrow_found_bad(r, c);
	if (!(r->instance = sqlite3_mprintf("%s", c->instance))) {
		cache_pg_close(r);
		cache_set_error(
			err, CACHE_ENOMEM,
			"cannot open a reader of PostgreSQL cache: out of memory");
		return CACHE_ENOMEM;
	}
	rc = connect_to(r, &r->pg_reader, err);
	if (rc) {
		cache_pg_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

void cache_pg_close(cache *c)
{
	if (!c)
		return;
	sqlite3_free(c->instance);
	PQfinish(c->pg_reader);
	PQfinish(c->pg_writer);
	cache_free(c);
}

const cache_engine cache_pg_engine = {.name = "PostgreSQL",
				      CACHE_ENGINE_ALL_OPS(CACHE_PG_ENTRY)};
