/*
 * pg_server.c: a private PostgreSQL server for tests (pg_server.h).
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <glob.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "pg_server.h"

/* One port for every server: each listens only on its own socket
 * folder, so servers of tests run at once do not meet. */
#define PG_PORT "55432"

/* The folder of initdb and pg_ctl: pg_config's, or the newest of
 * /usr/lib/postgresql/<n>/bin (Debian keeps them off PATH). */
static bool find_bindir(pg_server *s)
{
	FILE *p = popen("pg_config --bindir 2>/dev/null", "r");
	char path[300];
	glob_t g = {0};

	s->bindir[0] = 0;
	if (p) {
		if (fgets(s->bindir, sizeof(s->bindir), p))
			s->bindir[strcspn(s->bindir, "\n")] = 0;
		pclose(p);
	}
	snprintf(path, sizeof(path), "%s/initdb", s->bindir);
	if (s->bindir[0] && access(path, X_OK) == 0)
		return true;
	s->bindir[0] = 0;
	if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) == 0 &&
	    g.gl_pathc > 0) {
		snprintf(s->bindir, sizeof(s->bindir), "%s",
			 g.gl_pathv[g.gl_pathc - 1]);
		*strrchr(s->bindir, '/') = 0;
	}
	globfree(&g);
	return s->bindir[0] != 0;
}

/* Runs binary "tool" of the server with "args", as the postgres user when
 * root, its output appended to the folder's log; 0 when it succeeds. */
static int run_tool(pg_server *s, const char *tool, const char *args)
{
	char command[1200];

	snprintf(command, sizeof(command), "%s%s/%s %s >>%s/tool.log 2>&1",
		 s->as_postgres ? "runuser -u postgres -- " : "", s->bindir, tool,
		 args, s->dir);
	return system(command) == 0 ? 0 : -1;
}

/* "what failed", then the last lines of the folder's logs into s->why. */
static int failed(pg_server *s, const char *what)
{
	char command[300], tail[400] = "";
	FILE *p;
	size_t n = 0;

	snprintf(command, sizeof(command), "tail -n 4 %s/tool.log %s/server.log "
		 "2>/dev/null | tr '\\n' ' '", s->dir, s->dir);
	if ((p = popen(command, "r"))) {
		n = fread(tail, 1, sizeof(tail) - 1, p);
		pclose(p);
	}
	tail[n] = 0;
	snprintf(s->why, sizeof(s->why), "%s: %s", what, tail);
	return -1;
}

/* The folder, reachable by the postgres user when it runs the server. */
static int make_dir(pg_server *s)
{
	struct passwd *pw = s->as_postgres ? getpwnam("postgres") : NULL;

	snprintf(s->dir, sizeof(s->dir), "/tmp/tuned-pg-XXXXXX");
	if (!mkdtemp(s->dir)) {
		snprintf(s->why, sizeof(s->why), "cannot make a folder in /tmp");
		s->dir[0] = 0;
		return -1;
	}
	if (chmod(s->dir, 0755) != 0 ||
	    (pw && chown(s->dir, pw->pw_uid, pw->pw_gid) != 0)) {
		snprintf(s->why, sizeof(s->why), "cannot give %s to the postgres "
			 "user", s->dir);
		return -1;
	}
	return 0;
}

int pg_server_start(pg_server *s)
{
	char args[600];

	memset(s, 0, sizeof(*s));
	if (!find_bindir(s)) {
		snprintf(s->why, sizeof(s->why), "no PostgreSQL server found "
			 "(pg_config --bindir, /usr/lib/postgresql/*/bin): "
			 "install postgresql");
		return 1;
	}
	s->as_postgres = geteuid() == 0;
	if (s->as_postgres && !getpwnam("postgres")) {
		snprintf(s->why, sizeof(s->why), "running as root, and there is "
			 "no postgres user to run the server as");
		return 1;
	}
	if (make_dir(s))
		return -1;
	snprintf(args, sizeof(args), "-D %s/data -A trust -U postgres -N -E UTF8 "
		 "--locale=C", s->dir);
	if (run_tool(s, "initdb", args))
		return failed(s, "initdb failed");
	snprintf(args, sizeof(args), "-D %s/data -o \"-k %s -p " PG_PORT " -c "
		 "listen_addresses='' -c fsync=off\" -l %s/server.log -w start",
		 s->dir, s->dir, s->dir);
	if (run_tool(s, "pg_ctl", args))
		return failed(s, "the server did not start");
	snprintf(s->uri, sizeof(s->uri), "postgresql:///postgres?host=%s&port="
		 PG_PORT "&user=postgres", s->dir);
	return 0;
}

int pg_server_create_db(const char *server_uri, const char *name, char *uri,
			size_t size)
{
	PGconn *conn = PQconnectdb(server_uri);
	char sql[200];
	PGresult *res;
	int rc = -1;

	snprintf(sql, sizeof(sql), "CREATE DATABASE \"%s\"", name);
	res = PQstatus(conn) == CONNECTION_OK ? PQexec(conn, sql) : NULL;
	if (res && PQresultStatus(res) == PGRES_COMMAND_OK) {
		snprintf(uri, size, "postgresql:///%s?%s", name,
			 strchr(server_uri, '?') + 1);
		rc = 0;
	} else {
		snprintf(uri, size, "cannot create database %s: %s", name,
			 PQerrorMessage(conn));
	}
	PQclear(res);
	PQfinish(conn);
	return rc;
}

static int remove_one(const char *path, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void pg_server_stop(pg_server *s)
{
	char args[200];

	if (!s->dir[0])
		return;
	if (s->uri[0]) {
		snprintf(args, sizeof(args), "-D %s/data -m immediate -w stop", s->dir);
		run_tool(s, "pg_ctl", args);
	}
	nftw(s->dir, remove_one, 8, FTW_DEPTH | FTW_PHYS);
	s->dir[0] = s->uri[0] = 0;
}
