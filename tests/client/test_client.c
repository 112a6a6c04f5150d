/*
 * test_client.c: the client library (client/tuned_client.h) and tunectl's
 * daemon commands against a fake daemon: a thread that listens on a Unix
 * socket in a temporary folder and speaks enough of protocol 1 (hello,
 * submit, status, list, fetch, watch, stats, cache.*), with faults on
 * request: a refused hello, an event and a stale reply before the real
 * one, late replies, garbage, a closed connection, bytes one at a time;
 * and a scripted tuning (job, generation and version events) for
 * tunectl watch and submit --wait.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"
#include "tuned_client.h"

#define KEY "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define OTHER_KEY \
	"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
#define ODD_KEY \
	"0000000000000000000000000000000000000000000000000000000000000000"

enum hello_mode { HELLO_OK, HELLO_REFUSE, HELLO_V2, HELLO_TOO_MANY };

typedef struct fake {
	char dir[64];
	char path[128];
	int listen_fd;
	int stop[2];
	pthread_t thread;
	pthread_mutex_t lock;
	json_t *seen; /* every request: {"op", "params"} */
	/* behaviour */
	enum hello_mode hello;
	bool interleave;   /* status: an event and a stale reply first */
	bool byte_by_byte; /* every reply written one byte at a time */
	int late_ms;       /* stats: the reply comes this late */
	bool close_on_list;
	bool garble_on_list;
	bool job_fails;    /* the job ends failed */
	int flood;         /* watch: this many more events */
	bool close_after_watch; /* watch: then a closing error, id null */
	bool pad_stats;    /* stats: a reply of 8 KiB */
	int stall_ms;      /* ping: the daemon reads nothing for so long */
	const char *device;
	bool library_step; /* fetch: kernel 0 is a library step (cuda) */
	int polls;         /* status requests for job 7 so far */
	bool script;       /* watch and submit: the events of a tuning */
	bool script_close; /* watch: then close, before the job ends */
} fake;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void send_line(fake *f, int fd, char *line)
{
	size_t len, step;

	if (!line)
		return;
	len = strlen(line);
	step = f->byte_by_byte ? 1 : len;
	for (size_t done = 0; done < len; done += step)
		if (send(fd, line + done, step, MSG_NOSIGNAL) < 0)
			break;
	free(line);
}

static json_t *job_object(fake *f)
{
	const char *state = f->polls <= 1 ? "queued" : f->polls == 2 ? "running" :
			    f->job_fails ? "failed" : "done";
	json_t *job = json_pack("{s:i, s:s, s:s, s:s, s:{s:i, s:f, s:i, s:f, s:f}, s:s}",
				"id", 7, "key", KEY, "name", "mlp", "state", state,
				"progress", "trials", f->polls * 10, "best_ms",
				0.25, "version", f->polls, "first_ms", 1.0,
				"speedup", 4.0, "created_at",
				"2025-06-01T12:00:00Z");

	if (f->job_fails && f->polls > 2)
		json_object_set_new(job, "error", json_string("no candidate verified"));
	return job;
}

/* A kernel as fetch gives it (never with binaries); on a cpu without
 * "launch". */
static json_t *fetch_result(fake *f)
{
	bool cuda = !strncmp(f->device, "cuda", 4);
	json_t *result = json_pack(
		"{s:s, s:i, s:s, s:f, s:f, s:{s:[{s:s, s:[i]}]}, s:[{s:s, s:s, s:s}]}",
		"key", KEY, "version", 3, "device", f->device, "median_ms", 0.125,
		"spread_ms", 0.01, "plan", "kernels", "name", "k0_y", "ops", 0,
		"sources", "kernel", "k0_y", "language", cuda ? "cuda" : "c",
		"source", cuda ? "extern \"C\" __global__ void k0_y() {}\n" :
		"void k0_y(void **tensors) {}\n");

	if (cuda && f->library_step) {
		json_t *source = json_array_get(json_object_get(result, "sources"), 0);

		json_object_set_new(source, "source", json_string("{\"library\": \"cublasLt\"}"));
		json_object_set_new(source, "library", json_true());
	}
	if (cuda) {
		json_object_set_new(result, "launch", json_pack(
			"[{s:s, s:[iii], s:[iii], s:i, s:[ss]}]", "kernel", "k0_y",
			"grid", 4, 1, 1, "block", 256, 1, 1, "shared_bytes", 0,
			"args", "x", "y"));
	}
	return result;
}

static void reply(fake *f, int fd, json_t *id, json_t *result)
{
	send_line(f, fd, proto_reply_result(id, result));
}

static void send_event(fake *f, int fd, const char *name, json_t *data)
{
	send_line(f, fd, proto_event(name, data));
}

static void handle_hello(fake *f, int fd, proto_request *req)
{
	if (f->hello == HELLO_REFUSE)
		send_line(f, fd, proto_reply_error(req->id, PROTO_EVERSION_MISMATCH,
						   "version 1 is not supported"));
	else if (f->hello == HELLO_V2)
		reply(f, fd, req->id, json_pack("{s:i, s:s}", "version", 2,
						"server", "tuned 9"));
	else
		reply(f, fd, req->id, proto_hello_result("fake"));
}

static void handle_status(fake *f, int fd, proto_request *req)
{
	if (req->job != 7) {
		send_line(f, fd, proto_reply_error(req->id, PROTO_ENOT_FOUND,
						   "no job %lld",
						   (long long)req->job));
		return;
	}
	f->polls++;
	if (f->interleave) {
		json_t *stale = json_integer(999);

		send_event(f, fd, PROTO_EVENT_PROGRESS,
			   json_pack("{s:i, s:i}", "job", 7, "trials", 3));
		reply(f, fd, stale, json_object());
		json_decref(stale);
	}
	reply(f, fd, req->id, job_object(f));
}

static void handle_fetch(fake *f, int fd, proto_request *req)
{
	if (strcmp(req->key, KEY) && req->job != 7)
		send_line(f, fd, proto_reply_error(req->id, PROTO_ENOT_FOUND,
						   "no result for '%s' yet",
						   req->key[0] ? req->key : "job"));
	else
		reply(f, fd, req->id, fetch_result(f));
}

/* The events of job 7's tuning: two generations (the first with nothing
 * timed) around a version; with "jobs", its state before and, unless
 * f->script_close, after. */
static void send_script(fake *f, int fd, bool jobs)
{
	json_t *end = job_object(f);

	json_object_set_new(end, "state", json_string(f->job_fails ? "failed" :
						      "done"));
	if (f->job_fails)
		json_object_set_new(end, "error",
				    json_string("no candidate verified"));
	if (jobs)
		send_event(f, fd, PROTO_EVENT_JOB, json_pack(
			"{s:i, s:s, s:s}", "id", 7, "key", KEY, "state",
			"running"));
	send_event(f, fd, PROTO_EVENT_GENERATION, json_pack(
		"{s:i, s:s, s:i, s:i, s:i, s:i, s:n, s:n, s:n}", "job", 7,
		"key", KEY, "generation", 1, "trials", 32, "compile_failures", 1,
		"filtered", 0, "best_ms", "first_ms", "gain"));
	send_event(f, fd, PROTO_EVENT_VERSION, json_pack(
		"{s:s, s:i, s:s, s:f, s:f, s:f, s:f, s:i}", "key", KEY, "version", 3,
		"device", f->device, "median_ms", 1.201, "spread_ms", 0.01,
		"first_ms", 1.705, "speedup", 1.705 / 1.201, "job", 7));
	send_event(f, fd, PROTO_EVENT_GENERATION, json_pack(
		"{s:i, s:s, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:i, s:s, "
		"s:{s:i, s:i, s:i, s:i, s:i}}", "job", 7,
		"key", KEY, "generation", 2, "trials", 96, "compile_failures", 2,
		"filtered", 5, "quarantined", 2, "best_ms", 1.198, "first_ms", 1.75,
		"version_ms", 1.234, "gain", 1.75 / 1.234, "proposed", 12,
		"filled", "time_share", "dropped", "seen", 31, "measured", 0,
		"filtered", 5, "invalid", 9, "quarantined", 2));
	if (jobs && !f->script_close)
		send_event(f, fd, PROTO_EVENT_JOB, end);
	else
		json_decref(end);
}

static void handle_watch(fake *f, int fd, proto_request *req)
{
	reply(f, fd, req->id, json_pack("{s:s, s:i}", "key", req->key,
					"version", 2));
	if (f->script) {
		send_script(f, fd, true);
		return;
	}
	send_event(f, fd, PROTO_EVENT_PROGRESS,
		   json_pack("{s:i, s:i}", "job", 7, "trials", 1));
	send_event(f, fd, PROTO_EVENT_VERSION,
		   json_pack("{s:s, s:i, s:f}", "key", KEY, "version", 2,
			     "median_ms", 0.5));
	send_event(f, fd, PROTO_EVENT_JOB,
		   json_pack("{s:i, s:s}", "id", 7, "state", "running"));
	for (int i = 0; i < f->flood; i++)
		send_event(f, fd, PROTO_EVENT_PROGRESS,
			   json_pack("{s:i, s:i}", "job", 7, "trials", 100 + i));
	if (f->close_after_watch) {
		proto_error err;

		proto_error_hello_timeout(&err, &(proto_limits){.hello_timeout_s = 10});
		send_line(f, fd, proto_reply_from_error(NULL, &err));
	}
}

/* Answers one request; false when the connection is to be closed. */
static bool handle(fake *f, int fd, proto_request *req)
{
	switch (req->op) {
	case PROTO_OP_HELLO:
		handle_hello(f, fd, req);
		return f->hello != HELLO_REFUSE;
	case PROTO_OP_SUBMIT: {
		json_t *job = job_object(f);

		json_object_set_new(job, "cached_version", json_integer(2));
		reply(f, fd, req->id, job);
		if (f->script)
			send_script(f, fd, false);
		return true;
	}
	case PROTO_OP_CANCEL: {
		json_t *job = job_object(f);

		json_object_set_new(job, "state", json_string("cancelled"));
		reply(f, fd, req->id, job);
		return true;
	}
	case PROTO_OP_STATUS:
		handle_status(f, fd, req);
		return true;
	case PROTO_OP_LIST:
		if (f->close_on_list)
			return false;
		if (f->garble_on_list)
			send_line(f, fd, strdup("this is not json\n"));
		else
			reply(f, fd, req->id, json_pack("{s:[o]}", "jobs",
							job_object(f)));
		return true;
	case PROTO_OP_FETCH:
		handle_fetch(f, fd, req);
		return true;
	case PROTO_OP_CACHE_QUARANTINE:
		/* an entry from before bundles were kept, and a timeout */
		reply(f, fd, req->id, json_pack(
			"{s:[{s:i, s:s, s:s, s:s, s:{s:[{s:s}]}, s:s, s:s, s:n, s:f, "
			"s:n, s:s, s:n, s:n, s:n}]}", "entries", "id", 4, "key", KEY,
			"name", "scale", "device", f->device, "plan", "kernels", "name",
			"k0_y", "reason", "no answer within 12.0 s: worker killed",
			"cause", "timeout", "signal", "time_limit_s", 12.0, "seed",
			"created_at", "2026-01-02T03:04:05Z", "graph", "sources",
			"worker_log"));
		return true;
	case PROTO_OP_WATCH:
		handle_watch(f, fd, req);
		return !f->close_after_watch && !f->script_close;
	case PROTO_OP_STATS:
		if (f->late_ms)
			usleep(f->late_ms * 1000);
		if (f->pad_stats) {
			char pad[8192];

			memset(pad, 'x', sizeof(pad) - 1);
			pad[sizeof(pad) - 1] = 0;
			reply(f, fd, req->id, json_pack("{s:s}", "pad", pad));
		} else {
			reply(f, fd, req->id, json_pack("{s:i, s:{s:i}}", "clients",
							1, "jobs", "queued", 0));
		}
		return true;
	case PROTO_OP_PING:
		if (f->stall_ms)
			usleep(f->stall_ms * 1000);
		reply(f, fd, req->id, json_object());
		return true;
	case PROTO_OP_CACHE_SHOW:
		if (!strcmp(req->key, ODD_KEY)) {
			send_line(f, fd, strdup("{\"id\":99999,\"error\":{\"code\":"
						"\"frobnicated\",\"message\":\"odd\"}}\n"));
			send_line(f, fd, proto_dump_line(json_pack(
				"{s:O, s:{s:s, s:s}}", "id", req->id, "error",
				"code", "frobnicated", "message", "odd")));
			return true;
		}
		/* fall through */
	default:
		reply(f, fd, req->id, json_pack("{s:O}", "params", req->params));
		return true;
	}
}

static void record(fake *f, proto_request *req)
{
	pthread_mutex_lock(&f->lock);
	json_array_append_new(f->seen, json_pack("{s:s, s:O}", "op",
						 proto_op_name(req->op),
						 "params", req->params));
	pthread_mutex_unlock(&f->lock);
}

/* Closes the connection as a daemon going away does: no more replies,
 * and what the client still sends is read, so that the close reaches it
 * as the end of the stream after every line sent, not as a reset. */
static void drain(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char buf[4096];

	shutdown(fd, SHUT_WR);
	while (poll(&p, 1, 2000) > 0 && read(fd, buf, sizeof(buf)) > 0)
		;
}

/* Serves one connection until the client closes it or a handler ends it. */
static void serve_connection(fake *f, int fd)
{
	proto_framer *framer = proto_framer_new(PROTO_FRAME_DEFAULT);
	bool open = true;
	char buf[4096];
	ssize_t n;

	if (f->hello == HELLO_TOO_MANY) {
		proto_error err;

		proto_error_too_many_clients(&err, &(proto_limits){.clients = 1});
		send_line(f, fd, proto_reply_from_error(NULL, &err));
		open = false;
	}
	while (open && (n = read(fd, buf, sizeof(buf))) > 0) {
		const char *line;
		size_t len;

		proto_framer_feed(framer, buf, (size_t)n);
		while (open && proto_framer_next(framer, &line, &len, NULL) == 1) {
			proto_request req;

			if (proto_parse_request(line, len, &req, NULL) == 0) {
				record(f, &req);
				open = handle(f, fd, &req);
			}
			proto_request_release(&req);
		}
	}
	proto_framer_free(framer);
	if (!open)
		drain(fd);
}

static void *serve(void *arg)
{
	fake *f = arg;
	struct pollfd p[2] = {{.fd = f->listen_fd, .events = POLLIN},
			      {.fd = f->stop[0], .events = POLLIN}};
	int fd;

	while (poll(p, 2, -1) >= 0 && !p[1].revents) {
		if (!p[0].revents || (fd = accept(f->listen_fd, NULL, NULL)) < 0)
			continue;
		serve_connection(f, fd);
		close(fd);
	}
	return NULL;
}

static void fake_path(fake *f)
{
	strcpy(f->dir, "/tmp/test-client-XXXXXX");
	cr_assert_not_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/gpu0.sock", f->dir);
}

/* A fake daemon listening; "setup" may change its behaviour first. */
static fake *fake_start(void (*setup)(fake *f))
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	fake *f = calloc(1, sizeof(*f));

	cr_assert_not_null(f);
	fake_path(f);
	f->device = "cuda: NVIDIA H100, sm_90";
	f->seen = json_array();
	pthread_mutex_init(&f->lock, NULL);
	if (setup)
		setup(f);
	strcpy(addr.sun_path, f->path);
	f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(f->listen_fd, 0);
	cr_assert_eq(bind(f->listen_fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	cr_assert_eq(listen(f->listen_fd, 8), 0);
	cr_assert_eq(pipe(f->stop), 0);
	cr_assert_eq(pthread_create(&f->thread, NULL, serve, f), 0);
	return f;
}

static void remove_tree(const char *dir)
{
	char command[256];

	snprintf(command, sizeof(command), "rm -rf '%s'", dir);
	cr_expect_eq(system(command), 0);
}

/* Stops the fake and removes its folder with what the tests left. */
static void fake_stop(fake *f)
{
	cr_assert_eq(write(f->stop[1], "x", 1), 1);
	pthread_join(f->thread, NULL);
	close(f->stop[0]);
	close(f->stop[1]);
	close(f->listen_fd);
	remove_tree(f->dir);
	json_decref(f->seen);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

/* The "i"th request the fake saw (-1: the last), a new reference. */
static json_t *seen(fake *f, int i)
{
	json_t *req;

	pthread_mutex_lock(&f->lock);
	req = json_array_get(f->seen, i < 0 ? json_array_size(f->seen) + i : (size_t)i);
	json_incref(req);
	pthread_mutex_unlock(&f->lock);
	cr_assert_not_null(req, "request %d was not seen", i);
	return req;
}

static tuned_client *connect_to(fake *f, int timeout_ms)
{
	tuned_client_options options = {.timeout_ms = timeout_ms};
	tuned_client_error err = {0};
	tuned_client *client = NULL;

	cr_assert_eq(tuned_client_connect(f->path, &options, &client, &err), 0,
		     "%s", err.message);
	cr_assert_not_null(client);
	return client;
}

/* Hello. */

Test(hello, says_version_1_and_reads_the_server)
{
	fake *f = fake_start(NULL);
	tuned_client *client = connect_to(f, 5000);
	json_t *req = seen(f, 0);

	cr_expect_str_eq(json_string_value(json_object_get(req, "op")), "hello");
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(req, "params"),
							"version")), 1);
	cr_expect_str_eq(tuned_client_server(client), "tuned fake");
	cr_expect_str_eq(tuned_client_path(client), f->path);
	cr_expect_geq(tuned_client_fd(client), 0);
	json_decref(req);
	tuned_client_close(client);
	fake_stop(f);
}

static void refuse_hello(fake *f) { f->hello = HELLO_REFUSE; }
static void hello_v2(fake *f) { f->hello = HELLO_V2; }
static void too_many(fake *f) { f->hello = HELLO_TOO_MANY; }

static void expect_connect_error(void (*setup)(fake *f), int code,
				 const char *part)
{
	fake *f = fake_start(setup);
	tuned_client_error err = {0};
	tuned_client *client = (tuned_client *)1;

	cr_expect_eq(tuned_client_connect(f->path, NULL, &client, &err), code,
		     "%s", err.message);
	cr_expect_eq(err.code, code);
	cr_expect_null(client);
	cr_expect(strstr(err.message, part), "'%s' lacks '%s'", err.message, part);
	fake_stop(f);
}

Test(hello, refused_version_is_version_mismatch)
{
	expect_connect_error(refuse_hello, PROTO_EVERSION_MISMATCH,
			     "version 1 is not supported");
}

Test(hello, other_version_in_the_reply_is_a_protocol_error)
{
	expect_connect_error(hello_v2, TUNED_CLIENT_EPROTOCOL, "protocol version 1");
}

Test(hello, error_with_null_id_before_closing)
{
	expect_connect_error(too_many, PROTO_ETOO_MANY, "");
}

/* No daemon. */

Test(no_daemon, missing_socket_names_the_path_and_how_to_start)
{
	tuned_client_error err = {0};
	tuned_client *client = (tuned_client *)1;
	fake f;

	fake_path(&f);
	cr_expect_eq(tuned_client_connect(f.path, NULL, &client, &err),
		     TUNED_CLIENT_ENO_DAEMON);
	cr_expect_null(client);
	cr_expect_eq(err.code, TUNED_CLIENT_ENO_DAEMON);
	cr_expect(strstr(err.message, f.path), "%s", err.message);
	cr_expect(strstr(err.message, "no tuned daemon at "), "%s", err.message);
	cr_expect(strstr(err.message, "start one with 'tuned --backend auto "
			 "--socket "), "%s", err.message);
	cr_expect_str_eq(tuned_client_code_name(err.code), "no_daemon");
	rmdir(f.dir);
}

Test(no_daemon, default_path_says_how_to_start_the_usual_daemon)
{
	char dir[64] = "/tmp/test-client-XXXXXX", path[256], expected[512];
	tuned_client_error err = {0};
	tuned_client *client;

	cr_assert_not_null(mkdtemp(dir));
	unsetenv("TUNED_SOCKET");
	setenv("XDG_RUNTIME_DIR", dir, 1);
	tuned_client_default_path(path, sizeof(path));
	if (access(path, F_OK) == 0) {
		rmdir(dir);
		cr_skip_test("a daemon may listen at %s", path);
	}
	cr_expect_eq(tuned_client_connect(NULL, NULL, &client, &err),
		     TUNED_CLIENT_ENO_DAEMON);
	snprintf(expected, sizeof(expected), "no tuned daemon at %s (no such "
		 "file or directory): start one with 'tuned --backend auto' or "
		 "'systemctl start tuned-gpu@0'", path);
	cr_expect_str_eq(err.message, expected);
	rmdir(dir);
}

Test(no_daemon, socket_without_listener_is_connection_refused)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	tuned_client_error err = {0};
	tuned_client *client;
	fake f;
	int fd;

	fake_path(&f);
	strcpy(addr.sun_path, f.path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	close(fd);
	cr_expect_eq(tuned_client_connect(f.path, NULL, &client, &err),
		     TUNED_CLIENT_ENO_DAEMON);
	cr_expect(strstr(err.message, "connection refused"), "%s", err.message);
	cr_expect(strstr(err.message, f.path), "%s", err.message);
	unlink(f.path);
	rmdir(f.dir);
}

Test(no_daemon, default_path_is_named_when_none_is_given)
{
	char path[256], dir[64] = "/tmp/test-client-XXXXXX";
	tuned_client_error err = {0};
	tuned_client *client;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/nothing.sock", dir);
	setenv("TUNED_SOCKET", path, 1);
	cr_expect_eq(tuned_client_connect(NULL, NULL, &client, &err),
		     TUNED_CLIENT_ENO_DAEMON);
	cr_expect(strstr(err.message, path), "%s", err.message);
	rmdir(dir);
}

Test(no_daemon, path_too_long_is_refused)
{
	char path[300];
	tuned_client_error err = {0};
	tuned_client *client;

	memset(path, 'a', sizeof(path) - 1);
	path[0] = '/';
	path[sizeof(path) - 1] = 0;
	cr_expect_eq(tuned_client_connect(path, NULL, &client, &err),
		     TUNED_CLIENT_EINVAL);
	cr_expect(strstr(err.message, "longer than"), "%s", err.message);
}

Test(default_path, follows_the_daemon)
{
	char path[256], expected[256];
	bool service = access("/run/tuned-gpu", F_OK) == 0;

	setenv("TUNED_SOCKET", "/x/y.sock", 1);
	tuned_client_default_path(path, sizeof(path));
	cr_expect_str_eq(path, "/x/y.sock");
	setenv("TUNED_SOCKET", "", 1);
	setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
	tuned_client_default_path(path, sizeof(path));
	cr_expect_str_eq(path, geteuid() == 0 || service ?
			 "/run/tuned-gpu/gpu0.sock" :
			 "/run/user/1000/tuned/gpu0.sock");
	unsetenv("TUNED_SOCKET");
	unsetenv("XDG_RUNTIME_DIR");
	tuned_client_default_path(path, sizeof(path));
	snprintf(expected, sizeof(expected), "/tmp/tuned-%d/gpu0.sock", (int)getuid());
	cr_expect_str_eq(path, geteuid() == 0 || service ?
			 "/run/tuned-gpu/gpu0.sock" : expected);
}

/* What a child of uid 65534 checks, with "expected"; 0 when it holds. */
typedef int (*nobody_check)(const char *expected);

/* "check" run in a child of uid 65534 with "runtime_dir" as
 * XDG_RUNTIME_DIR: its exit status. */
static int as_nobody(const char *runtime_dir, nobody_check check,
		     const char *expected)
{
	pid_t child;
	int status;

	if ((child = fork()) == 0) {
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(3);
		unsetenv("TUNED_SOCKET");
		setenv("XDG_RUNTIME_DIR", runtime_dir, 1);
		_exit(check(expected));
	}
	waitpid(child, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* 0 when the default path is "expected". */
static int default_path_is(const char *expected)
{
	char path[256];

	tuned_client_default_path(path, sizeof(path));
	if (strcmp(path, expected))
		fprintf(stderr, "default path %s, not %s\n", path, expected);
	return strcmp(path, expected) ? 1 : 0;
}

/* 0 when connecting to the default path fails saying "expected". */
static int default_connect_says(const char *expected)
{
	tuned_client_error err = {0};
	tuned_client *client;

	if (tuned_client_connect(NULL, NULL, &client, &err) == 0) {
		fprintf(stderr, "connected to %s\n", tuned_client_path(client));
		tuned_client_close(client);
		return 1;
	}
	if (!strstr(err.message, expected))
		fprintf(stderr, "no '%s' in: %s\n", expected, err.message);
	return strstr(err.message, expected) ? 0 : 1;
}

/* 0 when a connection to "path", named by TUNED_SOCKET, is tried and
 * finds no daemon: a socket the user names is theirs to trust. */
static int named_socket_is_tried(const char *path)
{
	setenv("TUNED_SOCKET", path, 1);
	return default_connect_says("no tuned daemon at");
}

/* The folder of a user's own socket, made "mode" and given to "uid". */
static void own_folder_is(const char *dir, uid_t uid, mode_t mode)
{
	cr_assert_eq(chown(dir, uid, uid), 0, "chown %s: %s", dir, strerror(errno));
	cr_assert_eq(chmod(dir, mode), 0, "chmod %s: %s", dir, strerror(errno));
}

/* A user (uid 65534) reaches their own daemon's socket when it is there in
 * a folder of their own that no one else may write; else the service's
 * when the service is installed (/run/tuned-gpu is there); else their own
 * path, which is refused when another user could have made the socket (a
 * folder of mode 0777, or of another owner). One test, since it makes and
 * removes /run/tuned-gpu. */
Test(default_path, a_user_reaches_their_own_socket_in_their_own_folder_else_the_service)
{
	char dir[] = "/tmp/tuned-client-XXXXXX", own_dir[64], own[96];
	const char *service = "/run/tuned-gpu/gpu0.sock";
	static const char untrusted[] = "its folder is not yours alone";
	char no_daemon[160];
	FILE *f;

	if (geteuid() != 0)
		cr_skip_test("needs root to make /run/tuned-gpu, give a folder to "
			     "another uid and run a client of it; skipped");
	if (access("/run/tuned-gpu", F_OK) == 0)
		cr_skip_test("a tuned-gpu service is installed here (/run/tuned-gpu); "
			     "skipped");
	cr_assert(mkdtemp(dir));
	cr_assert_eq(chmod(dir, 0755), 0);
	snprintf(own_dir, sizeof(own_dir), "%s/tuned", dir);
	snprintf(own, sizeof(own), "%s/gpu0.sock", own_dir);
	snprintf(no_daemon, sizeof(no_daemon), "no tuned daemon at %s", own);
	cr_assert_eq(mkdir(own_dir, 0750), 0);
	own_folder_is(own_dir, 65534, 0750);

	/* No service: their own path, whether a socket is there or not. */
	cr_expect_eq(as_nobody(dir, default_path_is, own), 0,
		     "without the service, a user's default is not their own");
	cr_assert_not_null(f = fopen(own, "w")); /* a file, where no one listens */
	fclose(f);
	cr_assert_eq(chown(own, 65534, 65534), 0);
	cr_expect_eq(as_nobody(dir, default_connect_says, no_daemon), 0,
		     "a socket in the user's own folder is not tried");
	own_folder_is(own_dir, 65534, 0777);
	cr_expect_eq(as_nobody(dir, default_connect_says, untrusted), 0,
		     "a socket in a folder that anyone may write is tried");
	own_folder_is(own_dir, 0, 0755);
	cr_expect_eq(as_nobody(dir, default_connect_says, untrusted), 0,
		     "a socket in a folder of another user is tried");
	cr_expect_eq(as_nobody(dir, named_socket_is_tried, own), 0,
		     "a socket named by TUNED_SOCKET is refused");

	/* The service: a socket there only in a folder of their own. */
	cr_assert_eq(mkdir("/run/tuned-gpu", 0750), 0);
	cr_expect_eq(as_nobody(dir, default_path_is, service), 0,
		     "a socket in a folder of another user is preferred to the "
		     "service");
	own_folder_is(own_dir, 65534, 0777);
	cr_expect_eq(as_nobody(dir, default_path_is, service), 0,
		     "a socket in a folder that anyone may write is preferred "
		     "to the service");
	own_folder_is(own_dir, 65534, 0750);
	cr_expect_eq(as_nobody(dir, default_path_is, own), 0,
		     "the user's own daemon is not preferred to the service");
	unlink(own);
	cr_expect_eq(as_nobody(dir, default_path_is, service), 0,
		     "a user without a daemon does not reach the service");
	rmdir("/run/tuned-gpu");
	rmdir(own_dir);
	rmdir(dir);
}

Test(connect, a_folder_of_a_group_says_to_join_it)
{
	char dir[] = "/tmp/tuned-client-XXXXXX", socket_dir[64], path[96];
	struct group *group = getgrgid(1);
	pid_t child;
	int status;

	if (geteuid() != 0)
		cr_skip_test("needs root to make a client of another uid; skipped");
	cr_assert(group, "no group of gid 1 to give the folder");
	cr_assert(mkdtemp(dir));
	chmod(dir, 0755);
	snprintf(socket_dir, sizeof(socket_dir), "%s/run", dir);
	cr_assert_eq(mkdir(socket_dir, 0750), 0);
	cr_assert_eq(chown(socket_dir, 0, 1), 0);
	snprintf(path, sizeof(path), "%s/gpu0.sock", socket_dir);
	if ((child = fork()) == 0) {
		tuned_client *client;
		tuned_client_error err;
		char expected[128];

		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(3);
		snprintf(expected, sizeof(expected), "join the group '%s'",
			 group->gr_name);
		if (tuned_client_connect(path, NULL, &client, &err) !=
		    PROTO_EUNAUTHORIZED || !strstr(err.message, expected)) {
			fprintf(stderr, "%s\n", err.message);
			_exit(1);
		}
		_exit(0);
	}
	waitpid(child, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the refusal did not name the folder's group (status %d)",
		  WEXITSTATUS(status));
	rmdir(socket_dir);
	rmdir(dir);
}

/* Calls. */

Test(calls, submit_sends_the_graph_and_reads_job_and_key)
{
	fake *f = fake_start(NULL);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	tuned_client_job job;
	json_t *req, *params;

	cr_assert_eq(tuned_client_submit(client, "{\"graph\": 1}", 90, 5, &job,
					 &err), 0, "%s", err.message);
	cr_expect_eq(job.id, 7);
	cr_expect_str_eq(job.key, KEY);
	cr_expect_eq(job.cached_version, 2);
	req = seen(f, -1);
	params = json_object_get(req, "params");
	cr_expect_str_eq(json_string_value(json_object_get(req, "op")), "submit");
	cr_expect_str_eq(json_string_value(json_object_get(params, "graph")),
			 "{\"graph\": 1}");
	cr_expect_float_eq(json_number_value(json_object_get(params, "budget")),
			   90.0, 1e-9);
	cr_expect_eq(json_integer_value(json_object_get(params, "priority")), 5);
	json_decref(req);

	cr_assert_eq(tuned_client_submit(client, "{}", 0, 0, &job, &err), 0);
	req = seen(f, -1);
	cr_expect_null(json_object_get(json_object_get(req, "params"), "budget"));
	json_decref(req);

	cr_expect_eq(tuned_client_submit(client, "{}", 0, 5000, &job, &err),
		     TUNED_CLIENT_EINVAL, "priority out of range: %s", err.message);
	cr_expect(strstr(err.message, "priority"), "%s", err.message);
	tuned_client_close(client);
	fake_stop(f);
}

static void interleave(fake *f) { f->interleave = true; }

Test(calls, reply_is_matched_by_id_with_an_event_before_it)
{
	fake *f = fake_start(interleave);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	tuned_client_event ev;
	json_t *job = NULL;

	cr_assert_eq(tuned_client_status(client, 7, &job, &err), 0, "%s",
		     err.message);
	cr_expect_eq(json_integer_value(json_object_get(job, "id")), 7);
	cr_expect_str_eq(json_string_value(json_object_get(job, "key")), KEY);
	json_decref(job);
	/* the event that came before the reply was queued */
	cr_assert_eq(tuned_client_next_event(client, 0, &ev, &err), 1);
	cr_expect_str_eq(ev.name, PROTO_EVENT_PROGRESS);
	cr_expect_eq(json_integer_value(json_object_get(ev.data, "trials")), 3);
	json_decref(ev.data);
	cr_expect_eq(tuned_client_next_event(client, 0, &ev, &err), 0);
	cr_expect_null(ev.data);
	tuned_client_close(client);
	fake_stop(f);
}

Test(calls, error_replies_become_codes_and_messages)
{
	fake *f = fake_start(NULL);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	json_t *job = (json_t *)1, *out = (json_t *)1;

	cr_expect_eq(tuned_client_status(client, 8, &job, &err), PROTO_ENOT_FOUND);
	cr_expect_eq(err.code, PROTO_ENOT_FOUND);
	cr_expect_str_eq(err.message, "no job 8");
	cr_expect_null(job);
	cr_expect_str_eq(tuned_client_code_name(err.code), "not_found");
	/* a code this version does not know is internal */
	cr_expect_eq(tuned_client_cache_show(client, ODD_KEY, &out, &err),
		     PROTO_EINTERNAL);
	cr_expect_str_eq(err.message, "odd");
	cr_expect_null(out);
	/* the connection goes on */
	cr_expect_eq(tuned_client_status(client, 7, &job, &err), 0, "%s",
		     err.message);
	json_decref(job);
	tuned_client_close(client);
	fake_stop(f);
}

Test(calls, fetch_by_key_or_job)
{
	fake *f = fake_start(NULL);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	json_t *out = NULL, *req, *params;

	cr_assert_eq(tuned_client_fetch(client, KEY, 2, 100, &out, &err), 0, "%s",
		     err.message);
	cr_expect_eq(json_integer_value(json_object_get(out, "version")), 3);
	cr_expect_float_eq(json_real_value(json_object_get(out, "median_ms")),
			   0.125, 1e-12);
	json_decref(out);
	req = seen(f, -1);
	params = json_object_get(req, "params");
	cr_expect_str_eq(json_string_value(json_object_get(params, "key")), KEY);
	cr_expect_eq(json_integer_value(json_object_get(params, "min_version")), 2);
	cr_expect_eq(json_integer_value(json_object_get(params, "timeout_ms")), 100);
	json_decref(req);

	cr_assert_eq(tuned_client_fetch(client, "7", 0, 0, &out, &err), 0);
	json_decref(out);
	req = seen(f, -1);
	params = json_object_get(req, "params");
	cr_expect_eq(json_integer_value(json_object_get(params, "job")), 7);
	cr_expect_null(json_object_get(params, "key"));
	cr_expect_null(json_object_get(params, "timeout_ms"));
	json_decref(req);

	cr_expect_eq(tuned_client_fetch(client, OTHER_KEY, 0, 0, &out, &err),
		     PROTO_ENOT_FOUND);
	cr_expect_null(out);
	cr_expect(strstr(err.message, "no result"), "%s", err.message);
	tuned_client_close(client);
	fake_stop(f);
}

Test(calls, bad_arguments_are_refused_before_sending)
{
	fake *f = fake_start(NULL);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	json_t *out = NULL;

	cr_expect_eq(tuned_client_fetch(client, "abc", 0, 0, &out, &err),
		     TUNED_CLIENT_EINVAL);
	cr_expect(strstr(err.message, "'abc'"), "%s", err.message);
	cr_expect_eq(tuned_client_fetch(client, "0", 0, 0, &out, &err),
		     TUNED_CLIENT_EINVAL);
	cr_expect_eq(tuned_client_watch(client, "xyz", &err), TUNED_CLIENT_EINVAL);
	cr_expect(strstr(err.message, "params.key"), "%s", err.message);
	cr_expect_eq(tuned_client_status(client, 0, &out, &err),
		     TUNED_CLIENT_EINVAL);
	/* a run id that is not UTF-8 is said to be so, not "out of memory" */
	cr_expect_eq(tuned_client_fetch_run(client, "1", "run-\xff", 0, &out, &err),
		     TUNED_CLIENT_EINVAL);
	cr_expect(strstr(err.message, "not valid UTF-8"), "%s", err.message);
	cr_expect_eq(tuned_client_advance(client, "run-\xc3", NULL, 0, &out, &err),
		     TUNED_CLIENT_EINVAL);
	cr_expect(strstr(err.message, "not valid UTF-8"), "%s", err.message);
	/* only the hello reached the daemon */
	pthread_mutex_lock(&f->lock);
	cr_expect_eq(json_array_size(f->seen), 1);
	pthread_mutex_unlock(&f->lock);
	tuned_client_close(client);
	fake_stop(f);
}

Test(calls, cache_ops_send_only_the_limits_given)
{
	fake *f = fake_start(NULL);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	json_t *out = NULL, *params;

	cr_assert_eq(tuned_client_cache_prune(client, 3600, -1, &out, &err), 0);
	params = json_object_get(out, "params");
	cr_expect_eq(json_integer_value(json_object_get(params, "max_age_s")), 3600);
	cr_expect_null(json_object_get(params, "max_bytes"));
	json_decref(out);
	cr_assert_eq(tuned_client_cache_prune(client, -1, -1, &out, &err), 0);
	cr_expect_eq(json_object_size(json_object_get(out, "params")), 0);
	json_decref(out);
	cr_assert_eq(tuned_client_cache_show(client, KEY, &out, &err), 0);
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(out,
		"params"), "key")), KEY);
	json_decref(out);
	cr_assert_eq(tuned_client_cache_list(client, &out, &err), 0);
	json_decref(out);
	cr_assert_eq(tuned_client_cache_quarantine(client, KEY, &out, &err), 0);
	cr_expect_eq(json_array_size(json_object_get(out, "entries")), 1);
	json_decref(out);
	cr_assert_eq(tuned_client_cache_quarantine(client, NULL, &out, &err), 0);
	json_decref(out);
	pthread_mutex_lock(&f->lock);
	params = json_object_get(json_array_get(f->seen, json_array_size(f->seen) - 2),
				 "params");
	cr_expect_str_eq(json_string_value(json_object_get(params, "key")), KEY);
	params = json_object_get(json_array_get(f->seen, json_array_size(f->seen) - 1),
				 "params");
	cr_expect_eq(json_object_size(params), 0);
	pthread_mutex_unlock(&f->lock);
	cr_assert_eq(tuned_client_list(client, &out, &err), 0);
	cr_expect_eq(json_array_size(json_object_get(out, "jobs")), 1);
	json_decref(out);
	cr_assert_eq(tuned_client_cancel(client, 7, &out, &err), 0);
	cr_expect_str_eq(json_string_value(json_object_get(out, "state")),
			 "cancelled");
	json_decref(out);
	cr_assert_eq(tuned_client_cancel(client, 7, NULL, &err), 0);
	cr_assert_eq(tuned_client_call(client, PROTO_OP_PING, NULL, 0, NULL, &err), 0);
	tuned_client_close(client);
	fake_stop(f);
}

Test(calls, cache_export_and_import_send_their_params)
{
	fake *f = fake_start(NULL);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	const char *keys[] = {KEY, OTHER_KEY};
	json_t *out = NULL, *bundle = json_pack("{s:s, s:[]}", "format",
						"tuned-cache-export", "entries");

	cr_assert_eq(tuned_client_cache_export(client, keys, 2, &out, &err), 0, "%s",
		     err.message);
	cr_expect_str_eq(json_string_value(json_array_get(json_object_get(
		json_object_get(out, "params"), "keys"), 1)), OTHER_KEY);
	json_decref(out);
	cr_assert_eq(tuned_client_cache_export(client, NULL, 0, &out, &err), 0);
	cr_expect_eq(json_object_size(json_object_get(out, "params")), 0,
		     "no keys: every key");
	json_decref(out);
	keys[1] = "not a key";
	cr_expect_lt(tuned_client_cache_export(client, keys, 2, &out, &err), 0);
	cr_expect(strstr(err.message, "params.keys"), "%s", err.message);
	cr_assert_eq(tuned_client_cache_import(client, bundle, &out, &err), 0);
	cr_expect(json_equal(json_object_get(json_object_get(out, "params"), "export"),
			     bundle));
	json_decref(out);
	cr_expect_eq(tuned_client_cache_import(client, NULL, &out, &err),
		     TUNED_CLIENT_EINVAL);
	json_decref(bundle);
	tuned_client_close(client);
	fake_stop(f);
}

static void one_byte_at_a_time(fake *f) { f->byte_by_byte = true; }

Test(calls, replies_cut_into_single_bytes)
{
	fake *f = fake_start(one_byte_at_a_time);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	json_t *out = NULL;

	cr_assert_eq(tuned_client_fetch(client, KEY, 0, 0, &out, &err), 0, "%s",
		     err.message);
	cr_expect_str_eq(json_string_value(json_object_get(out, "device")),
			 f->device);
	json_decref(out);
	tuned_client_close(client);
	fake_stop(f);
}

/* Events. */

Test(events, watch_then_events_in_order)
{
	fake *f = fake_start(NULL);
	tuned_client *client = connect_to(f, 5000);
	const char *names[] = {PROTO_EVENT_PROGRESS, PROTO_EVENT_VERSION,
			       PROTO_EVENT_JOB};
	tuned_client_error err = {0};
	tuned_client_event ev;
	double start;

	cr_assert_eq(tuned_client_watch(client, KEY, &err), 0, "%s", err.message);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(tuned_client_next_event(client, 2000, &ev, &err), 1,
			     "event %d: %s", i, err.message);
		cr_expect_str_eq(ev.name, names[i]);
		cr_expect(json_is_object(ev.data));
		json_decref(ev.data);
	}
	start = now_s();
	cr_expect_eq(tuned_client_next_event(client, 100, &ev, &err), 0);
	cr_expect_geq(now_s() - start, 0.09);
	cr_expect_lt(now_s() - start, 2.0);
	tuned_client_close(client);
	fake_stop(f);
}

Test(events, queued_events_are_freed_on_close)
{
	fake *f = fake_start(NULL);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	json_t *out = NULL;

	cr_assert_eq(tuned_client_watch(client, KEY, &err), 0);
	cr_assert_eq(tuned_client_stats(client, &out, &err), 0); /* queues them */
	json_decref(out);
	tuned_client_close(client);
	fake_stop(f);
}

static void flood(fake *f) { f->flood = 1100; }

Test(events, the_queue_keeps_the_newest)
{
	fake *f = fake_start(flood);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	tuned_client_event ev;
	json_t *out = NULL;
	int n = 0;

	cr_assert_eq(tuned_client_watch(client, KEY, &err), 0);
	cr_assert_eq(tuned_client_stats(client, &out, &err), 0); /* queues them */
	json_decref(out);
	while (tuned_client_next_event(client, 0, &ev, &err) == 1) {
		if (n == 0)
			cr_expect_eq(json_integer_value(json_object_get(ev.data,
					"trials")), 100 + 1100 - TUNED_CLIENT_EVENTS_MAX);
		json_decref(ev.data);
		n++;
	}
	cr_expect_eq(n, TUNED_CLIENT_EVENTS_MAX);
	tuned_client_close(client);
	fake_stop(f);
}

static void close_after_watch(fake *f) { f->close_after_watch = true; }

Test(events, a_closing_error_ends_the_wait)
{
	fake *f = fake_start(close_after_watch);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	tuned_client_event ev;
	int rc;

	cr_assert_eq(tuned_client_watch(client, KEY, &err), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(tuned_client_next_event(client, 2000, &ev, &err), 1);
		json_decref(ev.data);
	}
	rc = tuned_client_next_event(client, 2000, &ev, &err);
	cr_expect_eq(rc, PROTO_ETIMEOUT, "%d: %s", rc, err.message);
	cr_expect(strstr(err.message, "hello"), "%s", err.message);
	cr_expect_null(ev.data);
	cr_expect_eq(tuned_client_next_event(client, 2000, &ev, &err),
		     TUNED_CLIENT_ECLOSED);
	tuned_client_close(client);
	fake_stop(f);
}

/* Timeouts and broken connections. */

static void pad_stats(fake *f) { f->pad_stats = true; }

Test(broken, a_line_over_the_frame_limit)
{
	fake *f = fake_start(pad_stats);
	tuned_client_options options = {.timeout_ms = 5000, .frame_bytes = 4096};
	tuned_client_error err = {0};
	tuned_client *client;
	json_t *out = NULL;

	cr_assert_eq(tuned_client_connect(f->path, &options, &client, &err), 0);
	cr_expect_eq(tuned_client_stats(client, &out, &err), TUNED_CLIENT_EPROTOCOL);
	cr_expect(strstr(err.message, "over 4096 bytes"), "%s", err.message);
	cr_expect_null(out);
	tuned_client_close(client);
	fake_stop(f);
}

static void late_stats(fake *f) { f->late_ms = 2000; }

Test(timeouts, a_late_reply_times_out_and_is_dropped_later)
{
	fake *f = fake_start(late_stats);
	tuned_client *client = connect_to(f, 400);
	tuned_client_error err = {0};
	json_t *out = NULL;
	double start = now_s();

	cr_expect_eq(tuned_client_stats(client, &out, &err), PROTO_ETIMEOUT);
	cr_expect_geq(now_s() - start, 0.39);
	cr_expect_lt(now_s() - start, 1.6);
	cr_expect(strstr(err.message, "no reply to 'stats'"), "%s", err.message);
	cr_expect_str_eq(tuned_client_code_name(err.code), "timeout");
	cr_expect_null(out);
	/* the next call skips the stale reply and gets its own */
	cr_assert_eq(tuned_client_call(client, PROTO_OP_PING, NULL, 5000, &out, &err),
		     0, "%s", err.message);
	cr_expect_null(json_object_get(out, "clients"));
	json_decref(out);
	tuned_client_close(client);
	fake_stop(f);
}

Test(timeouts, hello_that_never_comes)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	tuned_client_options options = {.timeout_ms = 150};
	tuned_client_error err = {0};
	tuned_client *client;
	double start;
	fake f;
	int fd;

	fake_path(&f);
	strcpy(addr.sun_path, f.path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	cr_assert_eq(listen(fd, 4), 0); /* listens, never accepts */
	start = now_s();
	cr_expect_eq(tuned_client_connect(f.path, &options, &client, &err),
		     PROTO_ETIMEOUT);
	cr_expect_lt(now_s() - start, 1.0);
	cr_expect(strstr(err.message, "'hello'"), "%s", err.message);
	close(fd);
	unlink(f.path);
	rmdir(f.dir);
}

static void stall(fake *f) { f->stall_ms = 1500; }

Test(timeouts, a_request_cut_short_breaks_the_connection)
{
	fake *f = fake_start(stall);
	tuned_client *client = connect_to(f, 300);
	size_t size = 8u << 20;
	char *graph = malloc(size);
	tuned_client_error err = {0};
	tuned_client_job job;
	json_t *out = NULL;

	cr_assert_not_null(graph);
	memset(graph, ' ', size - 1);
	graph[0] = '{';
	graph[size - 2] = '}';
	graph[size - 1] = 0;
	cr_expect_eq(tuned_client_call(client, PROTO_OP_PING, NULL, 0, NULL, &err),
		     PROTO_ETIMEOUT);
	/* the daemon reads nothing now: 8 MiB do not fit in the socket */
	cr_expect_eq(tuned_client_submit(client, graph, 0, 0, &job, &err),
		     PROTO_ETIMEOUT);
	cr_expect(strstr(err.message, "cannot send 'submit'"), "%s", err.message);
	cr_expect_eq(tuned_client_stats(client, &out, &err), TUNED_CLIENT_EIO);
	cr_expect(strstr(err.message, "cut short"), "%s", err.message);
	free(graph);
	tuned_client_close(client);
	fake_stop(f);
}

static void close_on_list(fake *f) { f->close_on_list = true; }
static void garble_on_list(fake *f) { f->garble_on_list = true; }

Test(broken, closed_connection)
{
	fake *f = fake_start(close_on_list);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	json_t *out = NULL;

	cr_expect_eq(tuned_client_list(client, &out, &err), TUNED_CLIENT_ECLOSED);
	cr_expect(strstr(err.message, "closed the connection"), "%s", err.message);
	cr_expect(strstr(err.message, f->path), "%s", err.message);
	cr_expect_lt(tuned_client_stats(client, &out, &err), 0);
	tuned_client_close(client);
	fake_stop(f);
}

Test(broken, garbled_line)
{
	fake *f = fake_start(garble_on_list);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_error err = {0};
	json_t *out = NULL;

	cr_expect_eq(tuned_client_list(client, &out, &err), TUNED_CLIENT_EPROTOCOL);
	cr_expect(strstr(err.message, "garbled"), "%s", err.message);
	tuned_client_close(client);
	fake_stop(f);
}

/* tunectl, beside this test in the build tree: build/client/tunectl. */

static void tunectl_path(char *out, size_t size)
{
	char self[PATH_MAX] = "";
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	self[n > 0 ? n : 0] = 0;
	snprintf(out, size, "%s/../../client/tunectl", dirname(self));
	if (access(out, X_OK) != 0)
		cr_skip_test("no tunectl at %s", out);
}

/* Starts tunectl with "args" (NULL-terminated), its stdout into "out"
 * (a file) and its stderr into "out".err; returns its pid. */
static pid_t tunectl_start(const char *out, const char *const *args)
{
	char path[PATH_MAX + 32], err[PATH_MAX];
	const char *argv[16] = {"tunectl"};
	pid_t pid;
	int i;

	tunectl_path(path, sizeof(path));
	snprintf(err, sizeof(err), "%s.err", out);
	for (i = 0; args[i] && i < 14; i++)
		argv[i + 1] = args[i];
	argv[i + 1] = NULL;
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
			_exit(99);
		execv(path, (char *const *)argv);
		_exit(98);
	}
	return pid;
}

/* The exit status of tunectl "pid". */
static int tunectl_wait(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "tunectl did not exit: status %d", status);
	return WEXITSTATUS(status);
}

static int tunectl(const char *out, const char *const *args)
{
	return tunectl_wait(tunectl_start(out, args));
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *text = NULL;
	size_t len = 0;

	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	if (getdelim(&text, &len, '\0', f) < 0) {
		free(text);
		text = strdup("");
	}
	fclose(f);
	return text;
}

static void expect_contains(const char *path, const char *part)
{
	char *text = slurp(path);

	cr_expect(strstr(text, part), "%s lacks '%s':\n%s", path, part, text);
	free(text);
}

Test(tunectl, fetch_out_writes_plan_sources_and_launch)
{
	fake *f = fake_start(NULL);
	char out[128], dir[128], file[192], stdout_path[192];

	snprintf(dir, sizeof(dir), "%s/result", f->dir);
	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	snprintf(out, sizeof(out), "%s", dir);
	cr_assert_eq(tunectl(stdout_path, (const char *const[]){"fetch", KEY,
			     "--socket", f->path, "--out", out, NULL}), 0);
	expect_contains(stdout_path, "version   3");
	expect_contains(stdout_path, "median_ms 0.1250");
	expect_contains(stdout_path, "device    cuda: NVIDIA H100");
	snprintf(file, sizeof(file), "%s/plan.json", dir);
	expect_contains(file, "\"k0_y\"");
	snprintf(file, sizeof(file), "%s/kernel_0.cu", dir);
	expect_contains(file, "__global__ void k0_y");
	snprintf(file, sizeof(file), "%s/launch.json", dir);
	expect_contains(file, "\"shared_bytes\": 0");
	snprintf(file, sizeof(file), "%s/kernel_0.cubin", dir);
	cr_expect_neq(access(file, F_OK), 0, "%s: there were no binaries", file);

	cr_assert_eq(tunectl(stdout_path, (const char *const[]){"fetch", "7",
			     "--json", "--socket", f->path, NULL}), 0);
	expect_contains(stdout_path, "\"median_ms\": 0.125");
	expect_contains(stdout_path, "\"key\": \"" KEY "\"");
	remove_tree(dir);
	unlink(stdout_path);
	fake_stop(f);
}

static void cpu_device(fake *f) { f->device = "cpu: test machine"; }

Test(tunectl, fetch_out_names_c_sources_for_the_cpu)
{
	fake *f = fake_start(cpu_device);
	char dir[128], file[192], stdout_path[192];

	snprintf(dir, sizeof(dir), "%s/result", f->dir);
	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_assert_eq(tunectl(stdout_path, (const char *const[]){"fetch", KEY,
			     "--socket", f->path, "--out", dir, NULL}), 0);
	snprintf(file, sizeof(file), "%s/kernel_0.c", dir);
	expect_contains(file, "void k0_y(void **tensors)");
	/* no launch in the result: one built from the plan */
	snprintf(file, sizeof(file), "%s/launch.json", dir);
	expect_contains(file, "\"source\": \"kernel_0.c\"");
	expect_contains(file, "void NAME(void **tensors)");
	snprintf(file, sizeof(file), "%s/kernel_0.so", dir);
	cr_expect_neq(access(file, F_OK), 0, "%s: there were no binaries", file);
	remove_tree(dir);
	unlink(stdout_path);
	fake_stop(f);
}

/* What an entry lacks is not written: here no graph, sources or log. */
Test(tunectl, cache_quarantine_lists_and_exports_what_an_entry_holds)
{
	fake *f = fake_start(NULL);
	char dir[128], file[256], stdout_path[192];

	snprintf(dir, sizeof(dir), "%s/bundles", f->dir);
	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_assert_eq(tunectl(stdout_path, (const char *const[]){"cache", "quarantine",
			     "--socket", f->path, "--out", dir, NULL}), 0);
	expect_contains(stdout_path, KEY "  scale");
	expect_contains(stdout_path, "timeout (12.0 s)");
	expect_contains(stdout_path, "2026-01-02T03:04:05Z  1 kernel: k0_y");
	snprintf(file, sizeof(file), "%s/4-%s/plan.json", dir, KEY);
	expect_contains(file, "\"k0_y\"");
	snprintf(file, sizeof(file), "%s/4-%s/info.json", dir, KEY);
	expect_contains(file, "\"time_limit_s\": 12.0");
	expect_contains(file, "\"reason\": \"no answer within 12.0 s: worker killed\"");
	snprintf(file, sizeof(file), "%s/4-%s/worker.log", dir, KEY);
	cr_expect_neq(access(file, F_OK), 0, "%s: the entry had no log", file);
	snprintf(file, sizeof(file), "%s/4-%s/graph.json", dir, KEY);
	cr_expect_neq(access(file, F_OK), 0, "%s: the entry had no graph", file);

	/* a folder that cannot be made: the path and the reason */
	snprintf(dir, sizeof(dir), "%s/stdout/x", f->dir);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"cache", "quarantine",
			     "--socket", f->path, "--out", dir, NULL}), 1);
	snprintf(file, sizeof(file), "%s.err", stdout_path);
	expect_contains(file, "cannot make the folder");
	snprintf(dir, sizeof(dir), "%s/bundles", f->dir);
	remove_tree(dir);
	fake_stop(f);
}

static void library_step(fake *f) { f->library_step = true; }

/* A library step's cuBLASLt call is JSON: kernel_0.library.json. */
Test(tunectl, fetch_out_names_a_library_step_s_call)
{
	fake *f = fake_start(library_step);
	char dir[128], file[192], stdout_path[192];

	snprintf(dir, sizeof(dir), "%s/result", f->dir);
	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_assert_eq(tunectl(stdout_path, (const char *const[]){"fetch", KEY,
			     "--socket", f->path, "--out", dir, NULL}), 0);
	snprintf(file, sizeof(file), "%s/kernel_0.library.json", dir);
	expect_contains(file, "\"cublasLt\"");
	snprintf(file, sizeof(file), "%s/kernel_0.cu", dir);
	cr_expect_neq(access(file, F_OK), 0, "%s: a library step is no CUDA", file);
	remove_tree(dir);
	unlink(stdout_path);
	fake_stop(f);
}

Test(tunectl, submit_wait_follows_the_job_to_done)
{
	fake *f = fake_start(NULL);
	char graph[192], stdout_path[192];
	FILE *g;

	snprintf(graph, sizeof(graph), "%s/graph.json", f->dir);
	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_assert_not_null(g = fopen(graph, "w"));
	fputs("{\"version\": 1}\n", g);
	fclose(g);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"submit", graph,
			     "--wait", "--budget", "60", "--socket", f->path,
			     NULL}), 0);
	expect_contains(stdout_path, "job 7 key " KEY);
	expect_contains(stdout_path, "version 2 is cached already");
	expect_contains(stdout_path, "job 7: queued");
	expect_contains(stdout_path, "job 7 done");
	unlink(graph);
	unlink(stdout_path);
	fake_stop(f);
}

static void job_fails(fake *f) { f->job_fails = true; }

Test(tunectl, wait_exits_1_when_the_job_failed)
{
	fake *f = fake_start(job_fails);
	char stdout_path[192];

	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"wait", "7",
			     "--socket", f->path, NULL}), 1);
	expect_contains(stdout_path, "job 7 failed");
	expect_contains(stdout_path, "no candidate verified");
	unlink(stdout_path);
	fake_stop(f);
}

Test(tunectl, exit_codes)
{
	fake *f = fake_start(NULL);
	char stdout_path[192], nowhere[192];

	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	snprintf(nowhere, sizeof(nowhere), "%s/nothing.sock", f->dir);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"status", "7",
			     "--socket", f->path, NULL}), 0);
	expect_contains(stdout_path, "job 7: queued, 10 trials");
	expect_contains(stdout_path, "created   2025-06-01T12:00:00Z");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"cancel", "7",
			     "--socket", f->path, NULL}), 0);
	expect_contains(stdout_path, "job 7 cancelled");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"fetch", OTHER_KEY,
			     "--socket", f->path, NULL}), 1);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"status", "8",
			     "--json", "--socket", f->path, NULL}), 1);
	expect_contains(stdout_path, "\"code\": \"not_found\"");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"list", "--socket",
			     nowhere, "--json", NULL}), 1);
	expect_contains(stdout_path, "no tuned daemon at");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"status", "x",
			     "--socket", f->path, NULL}), 2);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"cache", "frob",
			     NULL}), 2);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"stats",
			     "--socket", f->path, NULL}), 0);
	expect_contains(stdout_path, "jobs.queued");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"cache", "prune",
			     "--max-age", "2h", "--json", "--socket", f->path,
			     NULL}), 0);
	expect_contains(stdout_path, "\"max_age_s\": 7200");
	unlink(stdout_path);
	fake_stop(f);
}

/* The speedup over the version the job started from, once there is a
 * second version: in status and at the end of a wait. */
Test(tunectl, status_and_wait_say_the_speedup_over_the_starting_version)
{
	fake *f = fake_start(NULL);
	char stdout_path[192], *text;

	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_assert_eq(tunectl(stdout_path, (const char *const[]){"status", "7",
			     "--socket", f->path, NULL}), 0);
	text = slurp(stdout_path);
	cr_expect(strstr(text, "job 7: queued, 10 trials, best 0.2500 ms, version 1\n"),
		  "version 1 has no speedup over itself: %s", text);
	free(text);
	cr_assert_eq(tunectl(stdout_path, (const char *const[]){"wait", "7",
			     "--socket", f->path, NULL}), 0);
	expect_contains(stdout_path, "version 3, 4.00x over the version this job "
			"started from\n");
	cr_assert_eq(tunectl(stdout_path, (const char *const[]){"status", "7",
			     "--socket", f->path, NULL}), 0);
	expect_contains(stdout_path, "job 7: done, 40 trials, best 0.2500 ms, "
			"version 4, 4.00x over the version this job started "
			"from\n");
	unlink(stdout_path);
	fake_stop(f);
}

/* Options before the command, as getopt_long reads them: --socket and
 * --json there reach the daemon and shape the answer. */
Test(tunectl, options_before_the_command)
{
	fake *f = fake_start(NULL);
	char stdout_path[192];

	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_assert_eq(tunectl(stdout_path, (const char *const[]){"--socket",
			     f->path, "--json", "status", "7", NULL}), 0);
	expect_contains(stdout_path, "\"id\": 7,\n");
	expect_contains(stdout_path, "\"key\": \"" KEY "\"");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"--socket",
			     f->path, "cache", "prune", "--max-age", "2h", "--json",
			     NULL}), 0);
	expect_contains(stdout_path, "\"max_age_s\": 7200");
	unlink(stdout_path);
	fake_stop(f);
}

/* Submit with a trial limit; watch and generation progress. */

Test(calls, submit_with_sends_the_trial_limit)
{
	fake *f = fake_start(NULL);
	tuned_client *client = connect_to(f, 5000);
	tuned_client_submit_options options = {.budget_s = 30, .priority = 1,
					       .trials = 500};
	tuned_client_error err = {0};
	tuned_client_job job;
	json_t *req, *params;

	cr_assert_eq(tuned_client_submit_with(client, "{}", &options, &job,
					      &err), 0, "%s", err.message);
	cr_expect_eq(job.id, 7);
	req = seen(f, -1);
	params = json_object_get(req, "params");
	cr_expect_eq(json_integer_value(json_object_get(params, "trials")), 500);
	cr_expect_eq(json_integer_value(json_object_get(params, "priority")), 1);
	cr_expect_float_eq(json_number_value(json_object_get(params, "budget")),
			   30.0, 1e-9);
	json_decref(req);

	cr_assert_eq(tuned_client_submit_with(client, "{}", NULL, &job, &err), 0);
	req = seen(f, -1);
	params = json_object_get(req, "params");
	cr_expect_null(json_object_get(params, "trials"));
	cr_expect_null(json_object_get(params, "budget"));
	json_decref(req);

	options.trials = PROTO_TRIALS_MAX + 1;
	cr_expect_eq(tuned_client_submit_with(client, "{}", &options, &job, &err),
		     TUNED_CLIENT_EINVAL);
	cr_expect(strstr(err.message, "trials"), "%s", err.message);
	tuned_client_close(client);
	fake_stop(f);
}

/* Whether the text of "path" holds "parts" (NULL-terminated) in order. */
static void expect_in_order(const char *path, const char *const *parts)
{
	char *text = slurp(path);
	const char *at = text;

	for (int i = 0; parts[i]; i++) {
		const char *found = strstr(at, parts[i]);

		cr_expect(found, "%s lacks '%s' (in order):\n%s", path, parts[i],
			  text);
		if (!found)
			break;
		at = found + strlen(parts[i]);
	}
	free(text);
}

static void script(fake *f) { f->script = true; }

Test(tunectl, watch_a_job_until_done_prints_each_event)
{
	fake *f = fake_start(script);
	char stdout_path[192];

	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"watch", "7",
			     "--until-done", "--socket", f->path, NULL}), 0);
	expect_in_order(stdout_path, (const char *const[]){
		"job 7: running\n",
		"gen 1: 32 trials, 1 compile failure, 0 filtered, nothing timed "
		"yet\n",
		"version 3: 1.201 ms \u00b1 0.010 (1.42x over the version this "
		"job started from, 1.705 ms beside it)\n",
		"gen 2: 96 trials, 2 compile failures, 5 filtered, 2 quarantined "
		"(not tried), 12 proposed (its time share ran out), dropped so "
		"far: 31 seen before, 9 invalid, best trial "
		"1.198 ms, version 1.234 ms (1.42x over the version this job "
		"started from)\n",
		"job 7: done\n", NULL});
	fake_stop(f);
}

static void script_fails(fake *f)
{
	f->script = true;
	f->job_fails = true;
}

Test(tunectl, watch_until_done_exits_1_when_the_job_failed)
{
	fake *f = fake_start(script_fails);
	char stdout_path[192];

	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"watch", "7",
			     "--until-done", "--socket", f->path, NULL}), 1);
	expect_contains(stdout_path, "job 7: failed: no candidate verified\n");
	fake_stop(f);
}

Test(tunectl, watch_json_is_one_line_per_event)
{
	fake *f = fake_start(script);
	const char *names[] = {"job", "generation", "version", "generation",
			       "job"};
	char stdout_path[192], *text, *line, *save = NULL;
	int n = 0;

	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"watch", "7",
			     "--until-done", "--json", "--socket", f->path,
			     NULL}), 0);
	text = slurp(stdout_path);
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save), n++) {
		json_t *event = json_loads(line, 0, NULL);

		cr_assert_not_null(event, "not one JSON object: '%s'", line);
		cr_assert_lt(n, 5, "more lines than events: '%s'", line);
		cr_expect_str_eq(json_string_value(json_object_get(event,
				 "event")), names[n]);
		cr_expect(json_is_object(json_object_get(event, "data")));
		json_decref(event);
	}
	cr_expect_eq(n, 5);
	free(text);
	fake_stop(f);
}

/* Waits up to 5 s for "part" to appear in the file "path". */
static void await_output(const char *path, const char *part)
{
	double until = now_s() + 5;
	bool found = false;

	while (!found && now_s() < until) {
		char *text = access(path, R_OK) == 0 ? slurp(path) : NULL;

		found = text && strstr(text, part);
		free(text);
		if (!found)
			usleep(20000);
	}
	cr_assert(found, "%s: no '%s' within 5 s", path, part);
}

Test(tunectl, watch_a_key_runs_until_interrupted)
{
	fake *f = fake_start(script);
	char stdout_path[192];
	double start;
	pid_t pid;

	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	pid = tunectl_start(stdout_path, (const char *const[]){"watch", KEY,
			    "--socket", f->path, NULL});
	await_output(stdout_path, "job 7: done\n");
	usleep(100000);
	cr_expect_eq(waitpid(pid, NULL, WNOHANG), 0, "watch KEY ended by itself");
	start = now_s();
	kill(pid, SIGINT);
	cr_expect_eq(tunectl_wait(pid), 0);
	cr_expect_lt(now_s() - start, 2.0);
	expect_contains(stdout_path, "gen 2: 96 trials");
	fake_stop(f);
}

static void script_close(fake *f)
{
	f->script = true;
	f->script_close = true;
}

Test(tunectl, watch_says_when_the_daemon_goes_away)
{
	fake *f = fake_start(script_close);
	char stdout_path[192], stderr_path[200];

	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	snprintf(stderr_path, sizeof(stderr_path), "%s.err", stdout_path);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"watch", KEY,
			     "--socket", f->path, NULL}), 1);
	expect_contains(stdout_path, "gen 2: 96 trials");
	expect_contains(stderr_path, "tunectl watch: the daemon at ");
	expect_contains(stderr_path, "closed the connection");
	fake_stop(f);
}

Test(tunectl, watch_and_trials_refuse_bad_arguments)
{
	fake *f = fake_start(NULL);
	char stdout_path[192], stderr_path[200], nowhere[192];

	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	snprintf(stderr_path, sizeof(stderr_path), "%s.err", stdout_path);
	snprintf(nowhere, sizeof(nowhere), "%s/nothing.sock", f->dir);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"watch", "xyz",
			     "--socket", f->path, NULL}), 2);
	expect_contains(stderr_path, "tunectl watch: neither a key (64 hex "
			"digits) nor a job id: 'xyz'");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"watch", KEY,
			     "--until-done", "--socket", f->path, NULL}), 2);
	expect_contains(stderr_path, "--until-done follows a job");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"watch", NULL}),
		     2);
	expect_contains(stderr_path, "tunectl watch: needs KEY|JOB");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"watch", "7",
			     "--wait", NULL}), 2);
	expect_contains(stderr_path, "unknown option '--wait'");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"submit", "g.json",
			     "--trials", "0", NULL}), 2);
	expect_contains(stderr_path, "bad value for '--trials'");
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"submit", "g.json",
			     "--trials", "1000001", NULL}), 2);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"watch", KEY,
			     "--socket", nowhere, NULL}), 1);
	expect_contains(stderr_path, "no tuned daemon at");
	fake_stop(f);
}

Test(tunectl, submit_wait_shows_the_generations)
{
	fake *f = fake_start(script);
	char graph[192], stdout_path[192];
	json_t *req;
	FILE *g;

	snprintf(graph, sizeof(graph), "%s/graph.json", f->dir);
	snprintf(stdout_path, sizeof(stdout_path), "%s/stdout", f->dir);
	cr_assert_not_null(g = fopen(graph, "w"));
	fputs("{\"version\": 1}\n", g);
	fclose(g);
	cr_expect_eq(tunectl(stdout_path, (const char *const[]){"submit", graph,
			     "--wait", "--trials", "500", "--socket", f->path,
			     NULL}), 0);
	req = seen(f, 1);
	cr_expect_str_eq(json_string_value(json_object_get(req, "op")), "submit");
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(req,
		     "params"), "trials")), 500);
	json_decref(req);
	/* not a terminal: the first generation at once, then at most every
	 * 10 s; the latest with the end */
	expect_in_order(stdout_path, (const char *const[]){
		"job 7: gen 1: 32 trials, 1 compile failure, 0 filtered, "
		"nothing timed yet\n",
		"job 7 done",
		"  gen 2: 96 trials, 2 compile failures, 5 filtered, 2 quarantined "
		"(not tried), 12 proposed (its time share ran out), dropped so "
		"far: 31 seen before, 9 invalid, best trial "
		"1.198 ms, version 1.234 ms (1.42x over the version this job "
		"started from)\n", NULL});
	fake_stop(f);
}
