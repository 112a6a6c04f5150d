/*
 * pg_server.h: a private PostgreSQL server for tests: initdb in a fresh
 * folder under /tmp, started with no TCP port (its socket in that folder),
 * stopped and deleted at the end. As root (CI), the server runs as the
 * "postgres" user the Debian package makes, for initdb and postgres
 * refuse root.
 */
#ifndef PG_SERVER_H
#define PG_SERVER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pg_server {
	char dir[64];     /* the folder: data/, the socket, log */
	char uri[256];    /* its "postgres" database */
	char why[512];    /* why it is not running (skip or failure) */
	char bindir[200];
	bool as_postgres; /* run the binaries as the postgres user */
} pg_server;

/* Starts a server: 0 when it runs; 1 when this machine has no
 * PostgreSQL to run (s->why says what is missing: skip the tests); -1
 * when starting failed (s->why says why, with the end of its log). */
int pg_server_start(pg_server *s);

/* Creates database "name" and writes its URI into "uri"; 0 or -1 (then
 * "uri" holds the server's message). */
int pg_server_create_db(const char *server_uri, const char *name, char *uri,
			size_t size);

/* Stops the server and deletes its folder; a stopped one does nothing. */
void pg_server_stop(pg_server *s);

#endif
