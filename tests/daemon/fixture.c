#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"

extern char **environ;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void fixture_init(fixture *f)
{
	*f = (fixture){0};
	snprintf(f->dir, sizeof(f->dir), "/tmp/tuned-test-XXXXXX");
	cr_assert_not_null(mkdtemp(f->dir));
	snprintf(f->socket, sizeof(f->socket), "%s/run/gpu0.sock", f->dir);
	snprintf(f->cache, sizeof(f->cache), "%s/state/cache.db", f->dir);
	snprintf(f->log, sizeof(f->log), "%s/tuned.log", f->dir);
}

static bool accepts(const char *path)
{
	conn c;
	bool ok = conn_open(&c, path);

	if (ok)
		conn_close(&c);
	return ok;
}

/* The daemons this process started, killed when it exits: a test that
 * fails an assertion returns without stopping its daemon, which would
 * then hold meson's output open until its time limit. */
#define MAX_STARTED 32
static pid_t started[MAX_STARTED];

/* Kills each started daemon still running; waitpid tells those apart
 * from pids already reaped (and maybe reused), which are not children. */
static void kill_started(void)
{
	for (int i = 0; i < MAX_STARTED; i++) {
		int status;

		if (started[i] > 0 && waitpid(started[i], &status, WNOHANG) == 0) {
			kill(started[i], SIGKILL);
			waitpid(started[i], &status, 0);
		}
	}
}

static void remember_started(pid_t pid)
{
	static bool registered;

	if (!registered)
		registered = atexit(kill_started) == 0;
	for (int i = 0; i < MAX_STARTED; i++)
		if (started[i] <= 0) {
			started[i] = pid;
			return;
		}
}

/* Starts tuned on the fixture's socket, cache and log with "extra". */
static pid_t spawn_tuned(const fixture *f, const char *const *extra)
{
	const char *argv[32] = {getenv("TUNED"), "--backend", "cpu", "--socket",
				f->socket, "--cache", f->cache, "--log", f->log};
	int n = 9;
	pid_t pid;

	for (int i = 0; extra && extra[i] && n < 31; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	cr_assert_eq(posix_spawn(&pid, argv[0], NULL, NULL, (char **)argv, environ), 0,
		     "cannot start %s", argv[0]);
	remember_started(pid);
	return pid;
}

void fixture_start(fixture *f, const char *const *extra)
{
	double start = now_s();

	f->pid = spawn_tuned(f, extra);
	while (!accepts(f->socket)) {
		int status;

		cr_assert_eq(waitpid(f->pid, &status, WNOHANG), 0,
			     "tuned exited at start (see %s)", f->log);
		cr_assert_lt(now_s() - start, 30, "tuned did not listen in 30 s");
		usleep(20000);
	}
}

int fixture_start_refused(const fixture *f, const char *const *extra, pid_t *pid)
{
	pid_t child = spawn_tuned(f, extra);
	int status = 0;

	if (pid)
		*pid = child;
	for (int i = 0; i < 600 && waitpid(child, &status, WNOHANG) == 0; i++)
		usleep(50000);
	if (waitpid(child, &status, WNOHANG) == 0) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
		cr_expect_fail("tuned started on %s", f->socket);
		return -1;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int fixture_stop(fixture *f, int signum, double *seconds)
{
	double start = now_s();
	int status = 0;

	if (f->pid <= 0)
		return -1;
	kill(f->pid, signum);
	waitpid(f->pid, &status, 0);
	f->pid = 0;
	if (seconds)
		*seconds = now_s() - start;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void fixture_cleanup(fixture *f)
{
	char command[160];

	if (f->pid > 0)
		fixture_stop(f, SIGKILL, NULL);
	snprintf(command, sizeof(command), "rm -rf '%s'", f->dir);
	if (system(command) != 0)
		fprintf(stderr, "cannot remove %s\n", f->dir);
}

bool conn_open(conn *c, const char *socket_path)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};

	*c = (conn){.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), .next_id = 1};
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path);
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		if (c->fd >= 0)
			close(c->fd);
		c->fd = -1;
		return false;
	}
	return true;
}

void conn_close(conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

void conn_send(conn *c, const char *text)
{
	size_t len = strlen(text), done = 0;

	while (done < len) {
		ssize_t n = send(c->fd, text + done, len - done, MSG_NOSIGNAL);

		if (n <= 0)
			return;
		done += (size_t)n;
	}
}

/* Returns a line from the buffer when one is complete. */
static char *take_line(conn *c)
{
	char *nl = memchr(c->buf, '\n', c->len), *line;
	size_t n;

	if (!nl)
		return NULL;
	n = (size_t)(nl - c->buf);
	line = strndup(c->buf, n);
	memmove(c->buf, nl + 1, c->len - n - 1);
	c->len -= n + 1;
	return line;
}

json_t *conn_read(conn *c, int timeout_ms)
{
	double deadline = now_s() + timeout_ms / 1e3;
	char *line;

	while (!(line = take_line(c))) {
		struct pollfd p = {c->fd, POLLIN, 0};
		int wait = (int)((deadline - now_s()) * 1e3);
		ssize_t n;

		if (wait <= 0 || poll(&p, 1, wait) <= 0 || c->len == sizeof(c->buf))
			return NULL;
		if ((n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0)) <= 0)
			return NULL;
		c->len += (size_t)n;
	}
	json_t *obj = json_loads(line, 0, NULL);

	free(line);
	return obj;
}

json_t *conn_call(conn *c, const char *op, json_t *params)
{
	int id = c->next_id++;
	json_t *req = json_pack("{s:i, s:s}", "id", id, "op", op), *reply;
	char *text;

	if (params)
		json_object_set_new(req, "params", params);
	text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	conn_send(c, text);
	conn_send(c, "\n");
	free(text);
	while ((reply = conn_read(c, 120000))) {
		if (json_integer_value(json_object_get(reply, "id")) == id &&
		    !json_object_get(reply, "event"))
			return reply;
		json_decref(reply);
	}
	return NULL;
}

void conn_hello(conn *c)
{
	json_t *reply = conn_call(c, "hello", json_pack("{s:i}", "version", 1));

	cr_assert_not_null(json_object_get(reply, "result"), "hello failed");
	json_decref(reply);
}

json_t *result_of(json_t *reply)
{
	return json_object_get(reply, "result");
}

static const char *error_field(json_t *reply, const char *field)
{
	return json_string_value(json_object_get(json_object_get(reply, "error"), field))
	       ?: "";
}

const char *error_code(json_t *reply)
{
	return error_field(reply, "code");
}

const char *error_message(json_t *reply)
{
	return error_field(reply, "message");
}

/* Runs tunectl with "args" and the socket, its stdout into "out" and its
 * stderr into "err" (open files); the exit status. */
static int run_tunectl(const fixture *f, const char *const *args, int out, int err)
{
	const char *argv[40] = {getenv("TUNECTL")};
	posix_spawn_file_actions_t actions;
	int n = 1, status = -1;
	pid_t pid;

	cr_assert_not_null(argv[0], "TUNECTL is not set");
	for (int i = 0; args[i] && n < 37; i++)
		argv[n++] = args[i];
	if (f) {
		argv[n++] = "--socket";
		argv[n++] = f->socket;
	}
	argv[n] = NULL;
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_adddup2(&actions, out, 1);
	posix_spawn_file_actions_adddup2(&actions, err, 2);
	cr_assert_eq(posix_spawn(&pid, argv[0], &actions, NULL, (char **)argv, environ), 0);
	posix_spawn_file_actions_destroy(&actions);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "tunectl did not exit (status %d)", status);
	return WEXITSTATUS(status);
}

static char *read_all(FILE *file)
{
	char *text = NULL;
	size_t len = 0;

	rewind(file);
	if (getdelim(&text, &len, '\0', file) < 0) {
		free(text);
		text = strdup("");
	}
	fclose(file);
	return text;
}

int fixture_tunectl(const fixture *f, char **output, const char *const *args)
{
	FILE *out = tmpfile();
	int status;

	cr_assert_not_null(out);
	status = run_tunectl(f, args, fileno(out), fileno(out));
	if (output)
		*output = read_all(out);
	else
		fclose(out);
	return status;
}

json_t *fixture_tunectl_json(const fixture *f, int *status, const char *const *args)
{
	const char *argv[40];
	FILE *out = tmpfile(), *err = tmpfile();
	char *text, *errors;
	json_t *json;
	int n = 0;

	cr_assert(out && err);
	for (int i = 0; args[i] && n < 37; i++)
		argv[n++] = args[i];
	argv[n++] = "--json";
	argv[n] = NULL;
	*status = run_tunectl(f, argv, fileno(out), fileno(err));
	text = read_all(out);
	errors = read_all(err);
	if (*errors)
		fprintf(stderr, "tunectl %s: %s", args[0], errors);
	json = json_loads(text, 0, NULL);
	free(text);
	free(errors);
	return json;
}

char *example_text(const char *name)
{
	char path[512];
	FILE *f;
	char *text = NULL;
	size_t len = 0;

	snprintf(path, sizeof(path), "%s/examples/%s.json", getenv("TUNED_SOURCE_ROOT"), name);
	cr_assert_not_null(f = fopen(path, "r"), "cannot read %s", path);
	cr_assert_gt(getdelim(&text, &len, '\0', f), 0);
	fclose(f);
	return text;
}

json_t *wait_job(conn *c, json_int_t job, int timeout_s)
{
	double deadline = now_s() + timeout_s;

	for (;;) {
		json_t *reply = conn_call(c, "status", json_pack("{s:I}", "job", job));
		const char *state = json_string_value(json_object_get(
			json_object_get(reply, "result"), "state"));

		cr_assert_not_null(state, "no status for job %lld", (long long)job);
		if (strcmp(state, "queued") && strcmp(state, "running"))
			return reply;
		json_decref(reply);
		cr_assert_lt(now_s(), deadline, "job %lld still %s after %d s",
			     (long long)job, state, timeout_s);
		usleep(100000);
	}
}

char *tune_example(conn *c, const char *name, int timeout_s)
{
	char *text = example_text(name), *key;
	json_t *reply = conn_call(c, "submit", json_pack("{s:s}", "graph", text));
	json_int_t job = json_integer_value(json_object_get(result_of(reply), "id"));

	cr_assert_gt(job, 0, "submit failed: %s", json_dumps(reply, 0));
	json_decref(reply);
	free(text);
	reply = wait_job(c, job, timeout_s);
	cr_assert_str_eq(json_string_value(json_object_get(result_of(reply), "state")),
			 "done", "%s", json_dumps(reply, 0));
	key = strdup(json_string_value(json_object_get(result_of(reply), "key")));
	json_decref(reply);
	return key;
}

void fixture_print_log(const fixture *f)
{
	FILE *log = fopen(f->log, "r");
	char line[1024];

	fprintf(stderr, "--- %s\n", f->log);
	while (log && fgets(line, sizeof(line), log))
		fputs(line, stderr);
	if (log)
		fclose(log);
}

bool fixture_log_line(const fixture *f, const char *text, char *line, size_t size)
{
	FILE *log = fopen(f->log, "r");
	bool found = false;

	while (log && !found && fgets(line, (int)size, log))
		found = strstr(line, text) != NULL;
	if (log)
		fclose(log);
	return found;
}

bool fixture_log_contains(const fixture *f, const char *text)
{
	char line[8192];

	return fixture_log_line(f, text, line, sizeof(line));
}

void fixture_open_folders(const fixture *f)
{
	char run_dir[160];

	snprintf(run_dir, sizeof(run_dir), "%s/run", f->dir);
	chmod(f->dir, 0755);
	chmod(run_dir, 0755);
	chmod(f->socket, 0666);
}
