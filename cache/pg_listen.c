/*
 * pg_listen.c: the notices of versions on PostgreSQL. A publish sends,
 * in its transaction, NOTIFY on CACHE_VERSIONS_CHANNEL with the version
 * as JSON ({"key", "device", "codegen", "version", "instance"}): the
 * server delivers it at the commit, to every connection that LISTENs, so
 * a daemon hears the versions of every other daemon of the database. It
 * LISTENs on the connection of its reads (the loop thread's), polls its
 * socket, and reads the notices with PQconsumeInput and PQnotifies,
 * leaving out its own: those that name its instance (pg_open.c), which,
 * unlike the writer's server process, stays when the writer connects
 * again between a publish and the reading of its notice. A notice with
 * no instance (a writer of an older tuned) is another's. A connection
 * made again by a read no longer listens:
 * cache_notices says so, and the caller listens again.
 */
#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include "cache_int.h"

int pg_notify_version(cache *c, const cache_plan *p, int version, cache_error *err)
{
	pg_args a = {0};

	pg_text(&a, p->graph);
	pg_text(&a, p->device);
	pg_text(&a, p->codegen);
	pg_int(&a, version);
	pg_text(&a, c->instance);
	return pg_run(c, c->pg_writer,
		      "SELECT pg_notify('" CACHE_VERSIONS_CHANNEL
		      "', json_build_object('key', $1::text, 'device', $2::text, "
		      "'codegen', $3::text, 'version', $4::int, 'instance', "
		      "$5::text)::text)",
		      &a, NULL, "cannot send the notice of a version", err);
}

int cache_pg_listen(cache *c, int *fd, cache_error *err)
{
	int rc = pg_run(c, c->pg_reader, "LISTEN " CACHE_VERSIONS_CHANNEL, NULL, NULL,
			"cannot listen for versions", err);

	if (rc)
		return rc;
	c->pg_listen_pid = PQbackendPID(c->pg_reader);
	*fd = PQsocket(c->pg_reader);
	return 0;
}

/* The notice "payload" (its JSON) to "fn"; a notice that is not one of
 * ours (another program on the channel), or that "own" (this cache's
 * instance) sent, is left out. */
static int tell(const char *payload, const char *own,
		int (*fn)(void *user, const cache_notice *n), void *user)
{
	json_t *json = json_loads(payload, 0, NULL);
	const char *instance = json_string_value(json_object_get(json, "instance"));
	cache_notice n = {
		.graph = json_string_value(json_object_get(json, "key")),
		.device = json_string_value(json_object_get(json, "device")),
		.codegen = json_string_value(json_object_get(json, "codegen")),
		.version = (int)json_integer_value(json_object_get(json, "version")),
	};
	int stop = 0, told = n.graph && n.device && n.codegen && n.version > 0 &&
			     !(instance && own && !strcmp(instance, own));

	if (told)
		stop = fn(user, &n);
	json_decref(json);
	return stop ? -1 : told;
}

static int lost(cache *c, const char *why, cache_error *err)
{
	c->pg_listen_pid = 0;
	cache_set_error(err, CACHE_EIO,
			"PostgreSQL cache %s: the connection that "
			"listens for versions %s",
			c->path, why);
	return CACHE_EIO;
}

int cache_pg_notices(cache *c, int (*fn)(void *user, const cache_notice *notice),
		     void *user, cache_error *err)
{
	int told = 0, rc = 0;
	PGnotify *n;

	if (!c->pg_listen_pid || !c->pg_reader ||
	    PQbackendPID(c->pg_reader) != c->pg_listen_pid)
		return lost(c, "was made again, and listens no more", err);
	if (!PQconsumeInput(c->pg_reader) || PQstatus(c->pg_reader) != CONNECTION_OK) {
		char why[400];

		snprintf(why, sizeof(why), "was lost: %s",
			 PQerrorMessage(c->pg_reader));
		why[strcspn(why, "\n")] = 0;
		return lost(c, why, err);
	}
	while (rc >= 0 && (n = PQnotifies(c->pg_reader))) {
		if (!strcmp(n->relname, CACHE_VERSIONS_CHANNEL) &&
		    (rc = tell(n->extra, c->instance, fn, user)) != 0)
			told++;
		PQfreemem(n);
	}
	return told;
}
