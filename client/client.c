/*
 * client.c: the client library (tuned_client.h). One connection, one
 * request at a time: a call writes its line, then reads lines until the
 * reply with its id, queueing the events and dropping stale replies.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <libgen.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"
#include "tuned_client.h"

#define READ_CHUNK 65536

typedef struct event_node {
	struct event_node *next;
	tuned_client_event event;
} event_node;

struct tuned_client {
	int fd;
	int timeout_ms;
	bool broken;        /* a request was cut short: nothing more can go */
	int64_t next_id;
	proto_framer *framer;
	event_node *head, *tail;
	int nevents;
	char path[TUNED_CLIENT_PATH_MAX];
	char server[128];
	char buf[READ_CHUNK];
};

__attribute__((format(printf, 3, 4)))
static int set_error(tuned_client_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return code;
}

static int from_proto(tuned_client_error *err, const proto_error *perr)
{
	return set_error(err, perr->code, "%s", perr->message);
}

static int no_memory(tuned_client_error *err)
{
	return set_error(err, TUNED_CLIENT_ENOMEM, "out of memory");
}

const char *tuned_client_code_name(int code)
{
	switch (code) {
	case TUNED_CLIENT_ENO_DAEMON: return "no_daemon";
	case TUNED_CLIENT_EIO: return "io";
	case TUNED_CLIENT_ECLOSED: return "closed";
	case TUNED_CLIENT_EPROTOCOL: return "protocol";
	case TUNED_CLIENT_EINVAL: return "invalid";
	case TUNED_CLIENT_ENOMEM: return "nomem";
	default: return proto_code_name(code) ? proto_code_name(code) : "unknown";
	}
}

/* Where the system service of GPU 0 listens (deploy/tuned-gpu@.service),
 * in a folder of mode 0750 that its group may enter. */
#define SYSTEM_SOCKET_DIR "/run/tuned-gpu"
#define SYSTEM_SOCKET SYSTEM_SOCKET_DIR "/gpu0.sock"

/* Where a daemon of GPU 0 that this user started listens when not told
 * otherwise (its own default, daemon/options.c). */
static void own_daemon_path(char *out, size_t size)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (xdg && *xdg)
		snprintf(out, size, "%s/tuned/gpu0.sock", xdg);
	else
		snprintf(out, size, "/tmp/tuned-%d/gpu0.sock", (int)getuid());
}

/* Whether the folder of the socket "path" is this user's alone: a folder,
 * not a link, that getuid() owns and that neither its group nor others
 * may write. Only then can no one else have put a socket there: another
 * local user can make /tmp/tuned-<uid> before its owner does, and a
 * client runs the code a daemon hands it. The folder's state goes into
 * "st". */
static bool own_folder(const char *path, struct stat *st)
{
	char dir[TUNED_CLIENT_PATH_MAX + 64];

	snprintf(dir, sizeof(dir), "%s", path);
	return lstat(dirname(dir), st) == 0 && S_ISDIR(st->st_mode) &&
	       st->st_uid == getuid() && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

/* Whether the socket of this user's own daemon is there, in a folder of
 * their own. */
static bool own_daemon_there(const char *path)
{
	struct stat st;

	return access(path, F_OK) == 0 && own_folder(path, &st);
}

/* The daemon a client reaches without being told: root's is the system
 * service; a user's is their own daemon when its socket is there in a
 * folder of their own, else the system service when it is installed (its
 * folder is there; a user outside its group is then told to join it),
 * else their own daemon's place, which the error then names (or refuses:
 * untrusted_default). */
static void daemon_path(char *out, size_t size)
{
	if (geteuid() == 0) {
		snprintf(out, size, "%s", SYSTEM_SOCKET);
		return;
	}
	own_daemon_path(out, size);
	if (!own_daemon_there(out) && access(SYSTEM_SOCKET_DIR, F_OK) == 0)
		snprintf(out, size, "%s", SYSTEM_SOCKET);
}

/* The default path "path", not named by TUNED_SOCKET, is this user's own
 * daemon's, and something is there in a folder that is not theirs alone:
 * not connected to. */
static int untrusted_default(const char *path, tuned_client_error *err)
{
	const char *env = getenv("TUNED_SOCKET");
	char own[TUNED_CLIENT_PATH_MAX + 64];
	struct stat st = {0};

	own_daemon_path(own, sizeof(own));
	if ((env && *env) || strcmp(path, own) || access(path, F_OK) != 0 ||
	    own_folder(path, &st))
		return 0;
	return set_error(err, PROTO_EUNAUTHORIZED,
			 "not connecting to %s: its folder is not yours alone "
			 "(owner uid %u, mode %04o), so another user may have "
			 "put the socket there; remove the folder, or name the "
			 "socket with TUNED_SOCKET", path, (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 07777));
}

void tuned_client_default_path(char *out, size_t size)
{
	const char *env = getenv("TUNED_SOCKET");

	if (env && *env)
		snprintf(out, size, "%s", env);
	else
		daemon_path(out, size);
}

/* Time, in milliseconds of the monotonic clock; a deadline of -1 is none. */
static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t deadline_after(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
}

/* What is left of "deadline", as poll() takes it. */
static int time_left(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - now_ms();
	return left < 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
}

/* strerror, lowercase first letter, for messages. */
static const char *reason(int errnum, char out[128])
{
	snprintf(out, 128, "%s", strerror(errnum));
	out[0] = (char)tolower((unsigned char)out[0]);
	return out;
}

/* A socket this user may not reach: the group that its folder admits,
 * when there is one, is the way in. */
static int refuse_permission(const char *path, const char *why,
			     tuned_client_error *err)
{
	char dir[TUNED_CLIENT_PATH_MAX], names[4096];
	struct group entry, *group = NULL;
	struct stat st;

	snprintf(dir, sizeof(dir), "%s", path);
	if (stat(dirname(dir), &st) == 0 && (st.st_mode & S_IXGRP) &&
	    st.st_gid != 0 &&
	    getgrgid_r(st.st_gid, &entry, names, sizeof(names), &group) == 0 &&
	    group)
		return set_error(err, PROTO_EUNAUTHORIZED,
				 "cannot connect to tuned at %s (%s): join the "
				 "group '%s' (sudo usermod -aG %s $USER) and log "
				 "in again", path, why, group->gr_name,
				 group->gr_name);
	return set_error(err, PROTO_EUNAUTHORIZED,
			 "cannot connect to tuned at %s (%s): ask for its "
			 "allow_uids or allow_gids to name you", path, why);
}

static int refuse_connect(const char *path, int errnum, tuned_client_error *err)
{
	char why[128], usual[TUNED_CLIENT_PATH_MAX + 64];

	reason(errnum, why);
	daemon_path(usual, sizeof(usual));
	if ((errnum == ENOENT || errnum == ECONNREFUSED || errnum == ENOTDIR) &&
	    !strcmp(path, usual))
		return set_error(err, TUNED_CLIENT_ENO_DAEMON,
				 "no tuned daemon at %s (%s): start one with "
				 "'tuned --backend auto' or 'systemctl start "
				 "tuned-gpu@0'", path, why);
	if (errnum == ENOENT || errnum == ECONNREFUSED || errnum == ENOTDIR)
		return set_error(err, TUNED_CLIENT_ENO_DAEMON,
				 "no tuned daemon at %s (%s): start one with "
				 "'tuned --backend auto --socket %s'", path, why,
				 path);
	if (errnum == EACCES || errnum == EPERM)
		return refuse_permission(path, why, err);
	return set_error(err, TUNED_CLIENT_EIO,
			 "cannot connect to tuned at %s (%s)", path, why);
}

/* Connects "fd" to "addr", retrying while the daemon's backlog is full. */
static int connect_until(int fd, const struct sockaddr_un *addr,
			 int64_t deadline, const char *path,
			 tuned_client_error *err)
{
	const struct timespec pause = {0, 10 * 1000000};

	while (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) < 0) {
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return refuse_connect(path, errno, err);
		if (time_left(deadline) == 0)
			return set_error(err, PROTO_ETIMEOUT,
					 "tuned at %s accepts no connection "
					 "(its backlog is full)", path);
		nanosleep(&pause, NULL);
	}
	return 0;
}

static int open_socket(const char *path, int64_t deadline, int *out,
		       tuned_client_error *err)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	char why[128];
	int fd, rc;

	if (strlen(path) >= sizeof(addr.sun_path))
		return set_error(err, TUNED_CLIENT_EINVAL,
				 "socket path '%.200s' is longer than %zu bytes",
				 path, sizeof(addr.sun_path) - 1);
	memcpy(addr.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return set_error(err, TUNED_CLIENT_EIO, "cannot make a socket (%s)",
				 reason(errno, why));
	if ((rc = connect_until(fd, &addr, deadline, path, err)) < 0) {
		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

static int closed(tuned_client *client, tuned_client_error *err)
{
	return set_error(err, TUNED_CLIENT_ECLOSED,
			 "the daemon at %s closed the connection", client->path);
}

static int timed_out(tuned_client *client, const char *what,
		     tuned_client_error *err)
{
	return set_error(err, PROTO_ETIMEOUT, "no reply to '%s' from %s in time",
			 what, client->path);
}

/* Waits until "fd" is ready for "events"; 1, 0 when the deadline passed,
 * or a negative code. */
static int wait_fd(tuned_client *client, short events, int64_t deadline,
		   tuned_client_error *err)
{
	struct pollfd p = {.fd = client->fd, .events = events};
	char why[128];
	int n;

	do
		n = poll(&p, 1, time_left(deadline));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return set_error(err, TUNED_CLIENT_EIO, "poll failed (%s)",
				 reason(errno, why));
	return n;
}

static int write_line(tuned_client *client, const char *line, const char *op,
		      int64_t deadline, tuned_client_error *err)
{
	size_t len = strlen(line), done = 0;
	char why[128];
	ssize_t n;
	int rc;

	while (done < len) {
		n = send(client->fd, line + done, len - done, MSG_NOSIGNAL);
		if (n >= 0) {
			done += (size_t)n;
			continue;
		}
		client->broken = done > 0;
		if (errno == EPIPE || errno == ECONNRESET)
			return closed(client, err);
		if (errno != EAGAIN && errno != EINTR)
			return set_error(err, TUNED_CLIENT_EIO,
					 "cannot write to %s (%s)", client->path,
					 reason(errno, why));
		if ((rc = wait_fd(client, POLLOUT, deadline, err)) <= 0)
			return rc < 0 ? rc :
			       set_error(err, PROTO_ETIMEOUT, "cannot send '%s' "
					 "to %s in time", op, client->path);
	}
	client->broken = false;
	return 0;
}

/* Reads what the socket has into the framer: 1, 0 when nothing came
 * before the deadline, or a negative code. */
static int fill(tuned_client *client, int64_t deadline, tuned_client_error *err)
{
	char why[128];
	ssize_t n;
	int rc;

	for (;;) {
		n = read(client->fd, client->buf, sizeof(client->buf));
		if (n > 0)
			break;
		if (n == 0 || errno == ECONNRESET)
			return closed(client, err);
		if (errno != EAGAIN && errno != EINTR)
			return set_error(err, TUNED_CLIENT_EIO,
					 "cannot read from %s (%s)",
					 client->path, reason(errno, why));
		if ((rc = wait_fd(client, POLLIN, deadline, err)) <= 0)
			return rc;
	}
	proto_framer_feed(client->framer, client->buf, (size_t)n);
	return 1;
}

/* The next message from the daemon in "reply" (release it): 1, 0 when
 * none came before the deadline, or a negative code. */
static int read_message(tuned_client *client, int64_t deadline,
			proto_reply *reply, tuned_client_error *err)
{
	proto_error perr;
	const char *line;
	size_t len;
	int rc;

	while ((rc = proto_framer_next(client->framer, &line, &len, &perr)) == 0)
		if ((rc = fill(client, deadline, err)) <= 0)
			return rc;
	if (rc < 0)
		return set_error(err, TUNED_CLIENT_EPROTOCOL,
				 "the daemon at %s sent a line over %zu bytes",
				 client->path,
				 proto_framer_limit(client->framer));
	if (proto_parse_reply(line, len, reply, &perr) < 0) {
		proto_reply_release(reply);
		return set_error(err, TUNED_CLIENT_EPROTOCOL,
				 "the daemon at %s sent a garbled line: %s",
				 client->path, perr.message);
	}
	return 1;
}

static void queue_event(tuned_client *client, proto_reply *reply)
{
	event_node *node = calloc(1, sizeof(*node)), *oldest;

	if (!node)
		return;
	memcpy(node->event.name, reply->event, sizeof(node->event.name));
	node->event.data = reply->value;
	reply->value = NULL;
	if (client->tail)
		client->tail->next = node;
	else
		client->head = node;
	client->tail = node;
	if (++client->nevents <= TUNED_CLIENT_EVENTS_MAX)
		return;
	oldest = client->head;
	client->head = oldest->next;
	client->nevents--;
	json_decref(oldest->event.data);
	free(oldest);
}

static bool pop_event(tuned_client *client, tuned_client_event *event)
{
	event_node *node = client->head;

	if (!node)
		return false;
	client->head = node->next;
	if (!client->head)
		client->tail = NULL;
	client->nevents--;
	*event = node->event;
	free(node);
	return true;
}

/* Whether "reply" answers the request "id": its id, or null on an error
 * (the daemon could not read a request, or closes the connection). */
static bool answers(const proto_reply *reply, int64_t id)
{
	if (json_is_integer(reply->id))
		return json_integer_value(reply->id) == id;
	return reply->kind == PROTO_REPLY_ERROR && json_is_null(reply->id);
}

/* Reads until the reply to "id", queueing events on the way. */
static int await_reply(tuned_client *client, int64_t id, const char *op,
		       int64_t deadline, json_t **result,
		       tuned_client_error *err)
{
	proto_reply reply;
	int rc;

	for (;;) {
		if ((rc = read_message(client, deadline, &reply, err)) <= 0)
			return rc < 0 ? rc : timed_out(client, op, err);
		if (reply.kind == PROTO_REPLY_EVENT)
			queue_event(client, &reply);
		else if (answers(&reply, id))
			break;
		proto_reply_release(&reply);
	}
	rc = 0;
	if (reply.kind == PROTO_REPLY_ERROR)
		rc = from_proto(err, &reply.error);
	else if (result) {
		*result = reply.value;
		reply.value = NULL;
	}
	proto_reply_release(&reply);
	return rc;
}

/* The daemon closed the connection before a request reached it: the
 * error it said why with before closing (id null: idle for its
 * --idle-timeout, ...) when that line is still unread, else
 * TUNED_CLIENT_ECLOSED. Events read on the way are queued. */
static int why_closed(tuned_client *client, tuned_client_error *err)
{
	int64_t now = deadline_after(0);
	proto_reply reply;
	int rc;

	while (read_message(client, now, &reply, err) > 0) {
		bool last_line = reply.kind == PROTO_REPLY_ERROR &&
				 json_is_null(reply.id);

		rc = last_line ? from_proto(err, &reply.error) : 0;
		if (reply.kind == PROTO_REPLY_EVENT)
			queue_event(client, &reply);
		proto_reply_release(&reply);
		if (last_line)
			return rc;
	}
	return closed(client, err);
}

/* The request line of "op", or a negative code: a refusal of the
 * arguments is the caller's error, TUNED_CLIENT_EINVAL. */
static int request_line(tuned_client *client, enum proto_op op, json_t *params,
			char **line, tuned_client_error *err)
{
	json_t *id = json_integer(client->next_id++);
	proto_error perr;

	if (!id) {
		json_decref(params);
		return no_memory(err);
	}
	*line = proto_request_line(op, id, params, &perr);
	json_decref(id);
	if (*line)
		return 0;
	if (perr.code == PROTO_EBAD_REQUEST)
		perr.code = TUNED_CLIENT_EINVAL;
	if (perr.code == PROTO_EINTERNAL)
		perr.code = TUNED_CLIENT_ENOMEM;
	return from_proto(err, &perr);
}

static int call_within(tuned_client *client, enum proto_op op, json_t *params,
		       int timeout_ms, json_t **result, tuned_client_error *err)
{
	int64_t id = client->next_id, deadline = deadline_after(timeout_ms);
	const char *name = proto_op_name(op);
	char *line = NULL;
	int rc;

	if (result)
		*result = NULL;
	if (client->broken) {
		json_decref(params);
		return set_error(err, TUNED_CLIENT_EIO, "a request to %s was cut "
				 "short: connect again", client->path);
	}
	if ((rc = request_line(client, op, params, &line, err)) < 0)
		return rc;
	rc = write_line(client, line, name, deadline, err);
	free(line);
	if (rc == TUNED_CLIENT_ECLOSED)
		rc = why_closed(client, err);
	if (rc == 0)
		rc = await_reply(client, id, name, deadline, result, err);
	return rc;
}

int tuned_client_call(tuned_client *client, enum proto_op op, json_t *params,
		      int extra_ms, json_t **result, tuned_client_error *err)
{
	int timeout_ms = client->timeout_ms;

	if (timeout_ms >= 0 && extra_ms > 0)
		timeout_ms = extra_ms > INT32_MAX - timeout_ms ? INT32_MAX :
			     timeout_ms + extra_ms;
	return call_within(client, op, params, timeout_ms, result, err);
}

/* Says hello and reads the server's name from the reply. */
static int hello(tuned_client *client, tuned_client_error *err)
{
	json_t *result = NULL;
	const char *server;
	int rc;

	rc = tuned_client_call(client, PROTO_OP_HELLO,
			       json_pack("{s:i}", "version", PROTO_VERSION), 0,
			       &result, err);
	if (rc < 0)
		return rc;
	if (json_integer_value(json_object_get(result, "version")) !=
	    PROTO_VERSION)
		rc = set_error(err, TUNED_CLIENT_EPROTOCOL,
			       "the daemon at %s does not speak protocol "
			       "version %d", client->path, PROTO_VERSION);
	server = json_string_value(json_object_get(result, "server"));
	snprintf(client->server, sizeof(client->server), "%s",
		 server ? server : "");
	json_decref(result);
	return rc;
}

static tuned_client *client_new(const char *path,
				const tuned_client_options *options)
{
	size_t frame = options && options->frame_bytes ? options->frame_bytes :
		       PROTO_FRAME_MAX;
	tuned_client *client = calloc(1, sizeof(*client));

	if (!client)
		return NULL;
	client->fd = -1;
	client->next_id = 1;
	client->timeout_ms = options && options->timeout_ms ?
			     options->timeout_ms : TUNED_CLIENT_TIMEOUT_DEFAULT_MS;
	snprintf(client->path, sizeof(client->path), "%s", path);
	if (!(client->framer = proto_framer_new(frame))) {
		free(client);
		return NULL;
	}
	return client;
}

int tuned_client_connect(const char *path, const tuned_client_options *options,
			 tuned_client **out, tuned_client_error *err)
{
	char fallback[TUNED_CLIENT_PATH_MAX + 64];
	tuned_client *client;
	int rc;

	*out = NULL;
	if (!path) {
		tuned_client_default_path(fallback, sizeof(fallback));
		path = fallback;
		if ((rc = untrusted_default(path, err)) < 0)
			return rc;
	}
	if (strlen(path) >= TUNED_CLIENT_PATH_MAX)
		return set_error(err, TUNED_CLIENT_EINVAL,
				 "socket path '%.200s' is longer than %d bytes",
				 path, TUNED_CLIENT_PATH_MAX - 1);
	if (!(client = client_new(path, options)))
		return no_memory(err);
	rc = open_socket(path, deadline_after(client->timeout_ms), &client->fd,
			 err);
	if (rc == 0)
		rc = hello(client, err);
	if (rc < 0) {
		tuned_client_close(client);
		return rc;
	}
	*out = client;
	return 0;
}

void tuned_client_close(tuned_client *client)
{
	tuned_client_event event;

	if (!client)
		return;
	while (pop_event(client, &event))
		json_decref(event.data);
	if (client->fd >= 0)
		close(client->fd);
	proto_framer_free(client->framer);
	free(client);
}

const char *tuned_client_path(const tuned_client *client)
{
	return client->path;
}

const char *tuned_client_server(const tuned_client *client)
{
	return client->server;
}

int tuned_client_fd(const tuned_client *client)
{
	return client->fd;
}

int tuned_client_next_event(tuned_client *client, int timeout_ms,
			    tuned_client_event *event, tuned_client_error *err)
{
	int64_t deadline = deadline_after(timeout_ms);
	proto_reply reply;
	int rc;

	event->data = NULL;
	while (!pop_event(client, event)) {
		if ((rc = read_message(client, deadline, &reply, err)) <= 0)
			return rc;
		if (reply.kind == PROTO_REPLY_EVENT)
			queue_event(client, &reply);
		else if (reply.kind == PROTO_REPLY_ERROR && json_is_null(reply.id))
			rc = from_proto(err, &reply.error);
		proto_reply_release(&reply);
		if (rc < 0)
			return rc;
	}
	return 1;
}

/* The job the daemon made (or found) for a submit: id, key and the
 * version the cache holds already. */
/* The job "result" describes (a submit's result, or its "grad") into
 * "out". */
static int read_submitted(tuned_client *client, json_t *result,
			  tuned_client_job *out, tuned_client_error *err)
{
	json_t *id = json_object_get(result, "id");
	const char *key = json_string_value(json_object_get(result, "key"));

	if (!json_is_integer(id) || !key || strlen(key) != PROTO_KEY_HEX)
		return set_error(err, TUNED_CLIENT_EPROTOCOL,
				 "the daemon at %s answered submit without a "
				 "job id and a key", client->path);
	out->id = json_integer_value(id);
	memcpy(out->key, key, PROTO_KEY_HEX + 1);
	out->cached_version =
		json_integer_value(json_object_get(result, "cached_version"));
	return 0;
}

/* "names" ("x,w") as a JSON array of its names; NULL when memory ran
 * out. */
static json_t *name_list(const char *names)
{
	json_t *list = json_array();
	const char *at = names;

	while (list) {
		size_t n = strcspn(at, ",");

		if (json_array_append_new(list, json_stringn(at, n)) < 0) {
			json_decref(list);
			return NULL;
		}
		if (!at[n])
			break;
		at += n + 1;
	}
	return list;
}

/* The params of a submit: the graph, its priority, and the budget, the
 * trial limit and the names to differentiate with respect to when set
 * (out of range, they are refused with the request line); NULL when the
 * graph is not UTF-8 or memory ran out. */
static json_t *submit_params(const char *graph, const tuned_client_submit_options *o,
			     const char *grad)
{
	json_t *params = json_pack("{s:s, s:i}", "graph", graph, "priority",
				   o->priority);

	if (params &&
	    ((o->budget_s != 0 &&
	      json_object_set_new(params, "budget", json_real(o->budget_s)) < 0) ||
	     (o->trials != 0 &&
	      json_object_set_new(params, "trials", json_integer(o->trials)) < 0) ||
	     (grad && json_object_set_new(params, "grad", name_list(grad)) < 0))) {
		json_decref(params);
		params = NULL;
	}
	return params;
}

/* A submit, with a backward graph when "grad" is not NULL. */
static int submit(tuned_client *client, const char *graph,
		  const tuned_client_submit_options *options, const char *grad,
		  tuned_client_job *out, tuned_client_job *backward,
		  tuned_client_error *err)
{
	static const tuned_client_submit_options defaults;
	json_t *params, *result = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!graph)
		return set_error(err, TUNED_CLIENT_EINVAL, "no graph to submit");
	params = submit_params(graph, options ? options : &defaults, grad);
	if (!params)
		return set_error(err, TUNED_CLIENT_EINVAL,
				 "the graph is not valid UTF-8, or memory ran out");
	rc = tuned_client_call(client, PROTO_OP_SUBMIT, params, 0, &result, err);
	if (rc == 0)
		rc = read_submitted(client, result, out, err);
	if (rc == 0 && backward)
		rc = read_submitted(client, json_object_get(result, "grad"), backward,
				    err);
	json_decref(result);
	return rc;
}

int tuned_client_submit_with(tuned_client *client, const char *graph,
			     const tuned_client_submit_options *options,
			     tuned_client_job *out, tuned_client_error *err)
{
	return submit(client, graph, options, NULL, out, NULL, err);
}

int tuned_client_submit_grad(tuned_client *client, const char *graph,
			     const tuned_client_submit_options *options,
			     const char *grad, tuned_client_job *out,
			     tuned_client_job *backward, tuned_client_error *err)
{
	memset(backward, 0, sizeof(*backward));
	if (!grad || !*grad)
		return set_error(err, TUNED_CLIENT_EINVAL,
				 "no tensor names to differentiate with respect to");
	return submit(client, graph, options, grad, out, backward, err);
}

int tuned_client_submit(tuned_client *client, const char *graph,
			double budget_s, int priority, tuned_client_job *out,
			tuned_client_error *err)
{
	tuned_client_submit_options options = {.budget_s = budget_s,
					       .priority = priority};

	return tuned_client_submit_with(client, graph, &options, out, err);
}

static int call_job(tuned_client *client, enum proto_op op, int64_t job,
		    json_t **out, tuned_client_error *err)
{
	return tuned_client_call(client, op, json_pack("{s:I}", "job",
						       (json_int_t)job),
				 0, out, err);
}

int tuned_client_status(tuned_client *client, int64_t job, json_t **out,
			tuned_client_error *err)
{
	return call_job(client, PROTO_OP_STATUS, job, out, err);
}

int tuned_client_list(tuned_client *client, json_t **out,
		      tuned_client_error *err)
{
	return tuned_client_call(client, PROTO_OP_LIST, NULL, 0, out, err);
}

int tuned_client_cancel(tuned_client *client, int64_t job, json_t **out,
			tuned_client_error *err)
{
	return call_job(client, PROTO_OP_CANCEL, job, out, err);
}

/* *params = {"key": what} or {"job": what}, from a key or a job id. */
static int key_or_job(const char *what, json_t **params, tuned_client_error *err)
{
	char key[PROTO_KEY_HEX + 1];
	size_t len = what ? strlen(what) : 0, i;
	char *end;
	long long job;

	for (i = 0; len == PROTO_KEY_HEX && isxdigit((unsigned char)what[i]); i++)
		key[i] = (char)tolower((unsigned char)what[i]);
	key[i] = 0;
	errno = 0;
	job = len ? strtoll(what, &end, 10) : 0;
	if (i == PROTO_KEY_HEX)
		*params = json_pack("{s:s}", "key", key);
	else if (len && isdigit((unsigned char)what[0]) && !*end && job > 0 &&
		 !errno)
		*params = json_pack("{s:I}", "job", (json_int_t)job);
	else
		return set_error(err, TUNED_CLIENT_EINVAL, "'%.80s' is neither "
				 "a key (64 hex digits) nor a job id",
				 what ? what : "");
	return *params ? 0 : no_memory(err);
}

static int add_count(json_t *params, const char *name, int64_t value)
{
	if (value < 0)
		return 0;
	return json_object_set_new(params, name, json_integer(value));
}

int tuned_client_fetch(tuned_client *client, const char *what,
		       int64_t min_version, int timeout_ms, json_t **out,
		       tuned_client_error *err)
{
	json_t *params;
	int rc;

	*out = NULL;
	if ((rc = key_or_job(what, &params, err)) < 0)
		return rc;
	if ((min_version > 0 && add_count(params, "min_version", min_version) < 0) ||
	    (timeout_ms > 0 && add_count(params, "timeout_ms", timeout_ms) < 0)) {
		json_decref(params);
		return no_memory(err);
	}
	return tuned_client_call(client, PROTO_OP_FETCH, params,
				 timeout_ms > 0 ? timeout_ms : 0, out, err);
}

/* "run" as a JSON string into "out"; "why" names the call when there is
 * none. jansson refuses a string that is not UTF-8 as it refuses one
 * when memory runs out: the unchecked copy tells the two apart. */
static int run_string(const char *run, const char *why, json_t **out,
		      tuned_client_error *err)
{
	json_t *unchecked;

	if (!run)
		return set_error(err, TUNED_CLIENT_EINVAL, "no run to %s", why);
	if ((*out = json_string(run)))
		return 0;
	if (!(unchecked = json_string_nocheck(run)))
		return no_memory(err);
	json_decref(unchecked);
	return set_error(err, TUNED_CLIENT_EINVAL,
			 "the run id is not valid UTF-8 (a run id is text)");
}

int tuned_client_fetch_run(tuned_client *client, const char *what, const char *run,
			   int timeout_ms, json_t **out, tuned_client_error *err)
{
	json_t *params, *run_json;
	int rc;

	*out = NULL;
	if ((rc = run_string(run, "fetch for", &run_json, err)) < 0)
		return rc;
	if ((rc = key_or_job(what, &params, err)) < 0) {
		json_decref(run_json);
		return rc;
	}
	if (json_object_set_new(params, "run", run_json) < 0 ||
	    (timeout_ms > 0 && add_count(params, "timeout_ms", timeout_ms) < 0)) {
		json_decref(params);
		return no_memory(err);
	}
	return tuned_client_call(client, PROTO_OP_FETCH, params,
				 timeout_ms > 0 ? timeout_ms : 0, out, err);
}

int tuned_client_advance(tuned_client *client, const char *run, const char *const *keys,
			 int n, json_t **out, tuned_client_error *err)
{
	json_t *params, *list = n > 0 ? json_array() : NULL, *run_json;
	int rc;

	if (out)
		*out = NULL;
	if ((rc = run_string(run, "advance", &run_json, err)) < 0) {
		json_decref(list);
		return rc;
	}
	for (int i = 0; list && i < n; i++)
		if (json_array_append_new(list, json_string(keys[i])) < 0) {
			json_decref(list);
			json_decref(run_json);
			return set_error(err, TUNED_CLIENT_EINVAL,
					 "not a key: "
					 "'%.80s'",
					 keys[i] ? keys[i] : "");
		}
	params = json_object();
	if (!params || (n > 0 && !list)) {
		json_decref(params);
		json_decref(list);
		json_decref(run_json);
		return no_memory(err);
	}
	if (json_object_set_new(params, "run", run_json) < 0 ||
	    (list && json_object_set_new(params, "keys", list) < 0)) {
		json_decref(params);
		return no_memory(err);
	}
	return tuned_client_call(client, PROTO_OP_ADVANCE, params, 0, out, err);
}

int tuned_client_watch(tuned_client *client, const char *key,
		       tuned_client_error *err)
{
	if (!key)
		return set_error(err, TUNED_CLIENT_EINVAL, "no key to watch");
	return tuned_client_call(client, PROTO_OP_WATCH,
				 json_pack("{s:s}", "key", key), 0, NULL, err);
}

int tuned_client_stats(tuned_client *client, json_t **out,
		       tuned_client_error *err)
{
	return tuned_client_call(client, PROTO_OP_STATS, NULL, 0, out, err);
}

int tuned_client_cache_list(tuned_client *client, json_t **out,
			    tuned_client_error *err)
{
	return tuned_client_call(client, PROTO_OP_CACHE_LIST, NULL, 0, out, err);
}

int tuned_client_cache_show(tuned_client *client, const char *key,
			    json_t **out, tuned_client_error *err)
{
	*out = NULL;
	if (!key)
		return set_error(err, TUNED_CLIENT_EINVAL, "no key to show");
	return tuned_client_call(client, PROTO_OP_CACHE_SHOW,
				 json_pack("{s:s}", "key", key), 0, out, err);
}

int tuned_client_cache_prune(tuned_client *client, int64_t max_age_s,
			     int64_t max_bytes, json_t **out,
			     tuned_client_error *err)
{
	json_t *params = json_object();

	*out = NULL;
	if (!params || add_count(params, "max_age_s", max_age_s) < 0 ||
	    add_count(params, "max_bytes", max_bytes) < 0) {
		json_decref(params);
		return no_memory(err);
	}
	return tuned_client_call(client, PROTO_OP_CACHE_PRUNE, params, 0, out,
				 err);
}

int tuned_client_cache_export(tuned_client *client, const char *const *keys,
			      int nkeys, json_t **out, tuned_client_error *err)
{
	json_t *params = json_object(), *list = json_array();

	*out = NULL;
	for (int i = 0; list && i < nkeys; i++)
		if (json_array_append_new(list, json_string(keys[i])) < 0) {
			json_decref(list);
			list = NULL;
		}
	if (!params || !list || (nkeys > 0 && json_object_set(params, "keys", list) < 0)) {
		json_decref(params);
		json_decref(list);
		return no_memory(err);
	}
	json_decref(list);
	return tuned_client_call(client, PROTO_OP_CACHE_EXPORT, params, 0, out, err);
}

int tuned_client_cache_import(tuned_client *client, json_t *bundle, json_t **out,
			      tuned_client_error *err)
{
	*out = NULL;
	if (!json_is_object(bundle))
		return set_error(err, TUNED_CLIENT_EINVAL, "no export to import");
	return tuned_client_call(client, PROTO_OP_CACHE_IMPORT,
				 json_pack("{s:O}", "export", bundle), 0, out, err);
}

int tuned_client_cache_quarantine(tuned_client *client, const char *key,
				  json_t **out, tuned_client_error *err)
{
	*out = NULL;
	return tuned_client_call(client, PROTO_OP_CACHE_QUARANTINE,
				 key ? json_pack("{s:s}", "key", key) : NULL, 0, out, err);
}
