/*
 * fixture.h: a real tuned on a temporary socket and cache, and raw
 * protocol connections to it, for the integration tests.
 */
#ifndef TUNED_FIXTURE_H
#define TUNED_FIXTURE_H

#include <stdbool.h>
#include <sys/types.h>

#include <jansson.h>

typedef struct fixture {
	char dir[64];
	char socket[128];
	char cache[128];
	char log[128];
	pid_t pid;
} fixture;

/* A fresh folder for one daemon's socket, cache and log. */
void fixture_init(fixture *f);
/* Starts tuned on the cpu backend with extra arguments (NULL-terminated)
 * and waits until it accepts connections. */
void fixture_start(fixture *f, const char *const *extra);
/* Starts tuned as fixture_start does, expecting it to refuse: waits for
 * it to exit and returns its exit status; *pid (may be NULL) gets its
 * pid. One still running after 30 s is killed, fails the test and gives
 * -1 (the test goes on, to stop its other daemons). */
int fixture_start_refused(const fixture *f, const char *const *extra, pid_t *pid);
/* Sends "signum" and waits: the exit status (or 128 + signal), and the
 * seconds it took. */
int fixture_stop(fixture *f, int signum, double *seconds);
void fixture_cleanup(fixture *f);
/* Copies the daemon's log to stderr (for a failing test). */
void fixture_print_log(const fixture *f);
/* Whether the daemon's log has a line containing "text"; the first such
 * line into "line" too. */
bool fixture_log_contains(const fixture *f, const char *text);
bool fixture_log_line(const fixture *f, const char *text, char *line, size_t size);
/* Lets every user reach the socket through the folders, so that the
 * daemon's own check is what admits or refuses other uids (as root). */
void fixture_open_folders(const fixture *f);

typedef struct conn {
	int fd;
	char buf[1 << 18]; /* a line: a fetch reply holds every source */
	size_t len;
	int next_id;
} conn;

/* Connects; false when the daemon refuses the connection itself. */
bool conn_open(conn *c, const char *socket_path);
void conn_close(conn *c);
void conn_send(conn *c, const char *text);
/* The next line as JSON (events included), or NULL at the end of the
 * stream or after "timeout_ms". */
json_t *conn_read(conn *c, int timeout_ms);
/* Sends {"id": N, "op": op, "params": params (taken; may be NULL)} and
 * returns the reply with that id, skipping events. */
json_t *conn_call(conn *c, const char *op, json_t *params);
/* hello, asserted to succeed. */
void conn_hello(conn *c);
/* A reply's result, or NULL when it is an error. */
json_t *result_of(json_t *reply);
/* A reply's error code and message, "" when it has none. */
const char *error_code(json_t *reply);
const char *error_message(json_t *reply);

/* Runs tunectl ($TUNECTL) with "args" (NULL-terminated) and "--socket"
 * the daemon's socket ("f" NULL: no socket); *output (may be NULL) gets
 * its stdout and stderr (free it). Returns its exit status. */
int fixture_tunectl(const fixture *f, char **output, const char *const *args);
/* The same with --json: stdout parsed (NULL when it is not JSON). */
json_t *fixture_tunectl_json(const fixture *f, int *status, const char *const *args);

/* The text of examples/NAME.json. */
char *example_text(const char *name);
/* Polls status until the job is no longer queued or running. */
json_t *wait_job(conn *c, json_int_t job, int timeout_s);
/* Submits examples/NAME.json on "c" and waits up to "timeout_s" for its
 * job to be done (asserts it is); its key (free it). */
char *tune_example(conn *c, const char *name, int timeout_s);

/* fixture_sql.c (link it, and sqlite, to use them): runs "statement" on
 * the SQLite file "path", asserted to succeed. */
void fixture_sql(const char *path, const char *statement);
/* The first column of the first row of "query" on "path", or -1. */
long long fixture_sql_count(const char *path, const char *query);
/* Takes the write lock of "path" (BEGIN IMMEDIATE) and holds it until
 * fixture_sql_unlock: the daemon's writes wait meanwhile. */
struct sqlite3 *fixture_sql_lock(const char *path);
void fixture_sql_unlock(struct sqlite3 *db);

#endif
