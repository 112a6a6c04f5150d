/*
 * server.c: the socket server on the loop: accepting clients, reading
 * their lines, writing replies, closing them.
 *
 * A client is freed only after the close callbacks of its two handles
 * (libuv's rule). Malformed or oversized input gets an error reply; the
 * connection is closed when the protocol says so, and other clients are
 * never affected.
 *
 * No client can lock the others out: each uid holds at most
 * --max-clients-per-uid connections, and a connection idle for
 * --idle-timeout after hello is closed (one that waits for a fetch or
 * watches a job in progress is not idle). Refusals are logged, at most
 * one line a second for each reason, then how many more there were.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

typedef struct send_req {
	uv_write_t req;
	tuned_client *client;
	char *line;
	size_t len;
} send_req;

/* Frees a client once its handles are closed and no work holds it. */
static void free_if_done(tuned_client *client)
{
	tuned_daemon *d = client->daemon;

	if (client->handles_open > 0 || client->holds > 0)
		return;
	for (tuned_client **at = &d->clients; *at; at = &(*at)->next)
		if (*at == client) {
			*at = client->next;
			break;
		}
	d->nclients--;
	free(client->feed);
	proto_framer_free(client->framer);
	free(client);
}

static void on_handle_closed(uv_handle_t *handle)
{
	tuned_client *client = handle->data;

	client->handles_open--;
	free_if_done(client);
}

void tuned_client_hold(tuned_client *client)
{
	client->holds++;
}

void tuned_client_release(tuned_client *client)
{
	client->holds--;
	free_if_done(client);
}

void tuned_client_close(tuned_client *client)
{
	if (client->closing)
		return;
	client->closing = true;
	tuned_drop_waiters(client->daemon, client);
	tuned_update_waited(client->daemon);
	uv_read_stop((uv_stream_t *)&client->pipe);
	uv_close((uv_handle_t *)&client->timer, on_handle_closed);
	uv_close((uv_handle_t *)&client->pipe, on_handle_closed);
}

static void on_sent(uv_write_t *req, int status)
{
	send_req *send = (send_req *)req;

	send->client->queued_bytes -= send->len;
	free(send->line);
	free(send);
	(void)status;
}

void tuned_client_send(tuned_client *client, char *line)
{
	send_req *send;
	uv_buf_t buf;

	if (!line || client->closing || !(send = calloc(1, sizeof(*send)))) {
		free(line);
		return;
	}
	*send = (send_req){.client = client, .line = line, .len = strlen(line)};
	buf = uv_buf_init(line, (unsigned)send->len);
	client->queued_bytes += send->len;
	if (uv_write(&send->req, (uv_stream_t *)&client->pipe, &buf, 1, on_sent) < 0) {
		client->queued_bytes -= send->len;
		free(line);
		free(send);
		return tuned_client_close(client);
	}
	client->active_ms = uv_now(client->daemon->loop);
	if (client->queued_bytes > client->daemon->options.max_unread) {
		tuned_log(TUNED_WARN, "client pid %d does not read its replies: closed",
			  (int)client->peer.pid);
		tuned_client_close(client);
	}
}

static void send_error(tuned_client *client, json_t *id, const proto_error *err)
{
	tuned_client_send(client, proto_reply_from_error(id, err));
	if (err->closes)
		tuned_client_close(client);
}

/* A request parsed (rc 0) or refused ("err"): admitted, then handled. */
static void handle_request(tuned_client *client, int rc, proto_request *req,
			   proto_error *err)
{
	client->active_ms = uv_now(client->daemon->loop);
	if (rc < 0 || proto_session_admit(&client->session, req, err) < 0)
		send_error(client, req->id, err);
	else
		tuned_handle(client, req);
	proto_request_release(req);
}

/* One line: parse, admit, handle. */
static void handle_line(tuned_client *client, const char *line, size_t len)
{
	proto_request req;
	proto_error err = {0};
	int rc = proto_parse_request(line, len, &req, &err);

	handle_request(client, rc, &req, &err);
}

/* A line this long (a submitted graph) is parsed on libuv's threadpool:
 * its JSON takes the loop tens of milliseconds a megabyte. */
#define OFF_LOOP_LINE_BYTES (64 * 1024)

/* A long line parsed off the loop (parse_long_line); the client reads
 * nothing more until it is handled (on_long_line_parsed), so that its
 * requests are still handled in the order it sent them. */
typedef struct line_work {
	uv_work_t work;
	tuned_client *client;
	const char *line; /* in the client's feed or its framer, both kept */
	size_t len;
	int rc;
	proto_request req;
	proto_error err;
} line_work;

static void read_lines(tuned_client *client);
static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void parse_long_line(uv_work_t *work)
{
	line_work *w = work->data;

	tuned_thread_background();
	w->rc = proto_parse_request(w->line, w->len, &w->req, &w->err);
}

static void on_long_line_parsed(uv_work_t *work, int status)
{
	line_work *w = work->data;
	tuned_client *client = w->client;

	if (status < 0 || client->closing || client->daemon->stopping) {
		if (status == 0)
			proto_request_release(&w->req);
	} else {
		handle_request(client, w->rc, &w->req, &w->err);
		read_lines(client);
		if (!client->closing && !client->feed)
			uv_read_start((uv_stream_t *)&client->pipe, on_alloc, on_read);
	}
	free(w);
	tuned_client_release(client);
}

/* Hands the long line to the threadpool, pausing the client's reads;
 * false when it cannot (out of memory): the caller parses it. */
static bool parse_off_loop(tuned_client *client, const char *line, size_t len)
{
	line_work *w = calloc(1, sizeof(*w));

	if (!w)
		return false;
	*w = (line_work){.work.data = w, .client = client, .line = line, .len = len};
	if (uv_queue_work(client->daemon->loop, &w->work, parse_long_line,
			  on_long_line_parsed) < 0) {
		free(w);
		return false;
	}
	uv_read_stop((uv_stream_t *)&client->pipe);
	tuned_client_hold(client);
	return true;
}

/* Handles the lines of the client's feed, until it is read or a long
 * line goes off the loop (the feed is kept for the lines after it). */
static void read_lines(tuned_client *client)
{
	proto_error err = {0};
	const char *line;
	size_t len;
	int rc = 0;

	while (!client->closing &&
	       (rc = proto_framer_next(client->framer, &line, &len, &err)) == 1) {
		if (len >= OFF_LOOP_LINE_BYTES && parse_off_loop(client, line, len))
			return;
		handle_line(client, line, len);
	}
	if (!client->closing && rc < 0)
		send_error(client, NULL, &err);
	free(client->feed);
	client->feed = NULL;
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
	(void)handle;
	buf->base = malloc(suggested);
	buf->len = buf->base ? suggested : 0;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	tuned_client *client = stream->data;

	if (nread < 0) {
		free(buf->base);
		return tuned_client_close(client);
	}
	proto_framer_feed(client->framer, buf->base, (size_t)nread);
	client->feed = buf->base;
	read_lines(client);
}

/* Whether the client waits for something, and so is not idle: a request
 * in flight (a fetch waiting for a version is one), or a job queued or
 * running for a key it watches. */
static bool is_waiting(const tuned_client *client)
{
	if (client->session.in_flight > 0)
		return true;
	for (int i = 0; i < client->nwatches; i++)
		if (tuned_jobs_find_active(&client->daemon->jobs, client->watches[i]))
			return true;
	return false;
}

/* --idle-timeout in ms; 0: none. */
static uint64_t idle_ms(const tuned_daemon *d)
{
	double ms = d->limits.idle_timeout_s * 1000;

	return ms <= 0 ? 0 : ms < 1 ? 1 : (uint64_t)ms;
}

/* Before hello: the hello timeout. After: the idle timeout, checked when
 * it would end; a client found waiting is not idle from then on. */
static void on_timer(uv_timer_t *timer)
{
	tuned_client *client = timer->data;
	tuned_daemon *d = client->daemon;
	uint64_t now = uv_now(d->loop), limit = idle_ms(d);
	proto_error err = {0};

	if (!client->session.ready) {
		proto_error_hello_timeout(&err, &d->limits);
		return send_error(client, NULL, &err);
	}
	if (is_waiting(client))
		client->active_ms = now;
	if (now - client->active_ms < limit) {
		uv_timer_start(timer, on_timer, client->active_ms + limit - now, 0);
		return;
	}
	tuned_log(TUNED_INFO, "client uid %d pid %d idle for %g s: closed "
		  "(--idle-timeout)", (int)client->peer.uid, (int)client->peer.pid,
		  d->limits.idle_timeout_s);
	proto_error_idle_timeout(&err, &d->limits);
	send_error(client, NULL, &err);
}

void tuned_client_ready(tuned_client *client)
{
	uint64_t limit = idle_ms(client->daemon);

	client->active_ms = uv_now(client->daemon->loop);
	if (limit > 0)
		uv_timer_start(&client->timer, on_timer, limit, 0);
	else
		uv_timer_stop(&client->timer);
}

static const char *const refusal_names[TUNED_NREFUSALS] = {
	[TUNED_REFUSED_PEER] = "not allowed to connect",
	[TUNED_REFUSED_CLIENTS] = "over --max-clients",
	[TUNED_REFUSED_UID] = "over --max-clients-per-uid",
};

/* The end of a second in which connections were refused: says how many
 * were not logged one by one, and goes on counting another second for
 * each reason that had some. */
static void on_refusal_second(uv_timer_t *timer)
{
	tuned_daemon *d = timer->data;
	bool again = false;

	for (int r = 0; r < TUNED_NREFUSALS; r++) {
		int unlogged = d->refusals.reason[r].unlogged;

		d->refusals.reason[r].logging = unlogged > 0;
		d->refusals.reason[r].unlogged = 0;
		if (unlogged > 0)
			tuned_log(TUNED_WARN, "%d more connection(s) refused in the last "
				  "second (%s), not logged one by one", unlogged,
				  refusal_names[r]);
		again |= unlogged > 0;
	}
	if (again)
		uv_timer_start(timer, on_refusal_second, 1000, 0);
}

/* Logs a refusal, unless one of the same reason was logged in the last
 * second: then it is counted, and the count logged when the second ends. */
static void log_refusal(tuned_daemon *d, enum tuned_refusal why,
			const tuned_client *client, const char *detail)
{
	if (d->refusals.reason[why].logging) {
		d->refusals.reason[why].unlogged++;
		return;
	}
	d->refusals.reason[why].logging = true;
	tuned_log(TUNED_WARN, "refused uid %d (pid %d): %s", (int)client->peer.uid,
		  (int)client->peer.pid, detail);
	if (!uv_is_active((uv_handle_t *)&d->refusals.timer))
		uv_timer_start(&d->refusals.timer, on_refusal_second, 1000, 0);
}

/* The connections "client"'s uid holds besides it. */
static int uid_connections(const tuned_daemon *d, const tuned_client *client)
{
	int n = 0;

	for (const tuned_client *c = d->clients; c; c = c->next)
		n += c != client && !c->closing && c->peer.uid == client->peer.uid;
	return n;
}

/* Who may connect, how many: refusals get one error line, then close. */
static bool admit_client(tuned_client *client)
{
	tuned_daemon *d = client->daemon;
	proto_error err = {0};
	enum tuned_refusal why;
	uv_os_fd_t fd;

	if (uv_fileno((uv_handle_t *)&client->pipe, &fd) < 0 ||
	    !tuned_peer_allowed(&d->options, fd, &client->peer)) {
		proto_error_peer_refused(&err, (long)client->peer.uid);
		why = TUNED_REFUSED_PEER;
	} else if (d->nclients > d->limits.clients || d->stopping) {
		proto_error_too_many_clients(&err, &d->limits);
		why = TUNED_REFUSED_CLIENTS;
	} else if (uid_connections(d, client) >= d->limits.clients_per_uid) {
		proto_error_too_many_for_uid(&err, &d->limits, (long)client->peer.uid);
		why = TUNED_REFUSED_UID;
	} else {
		client->admin = tuned_peer_is_admin(&d->options, fd, &client->peer);
		return true;
	}
	log_refusal(d, why, client, why == TUNED_REFUSED_PEER ? "not allowed" :
		    err.message);
	err.closes = true;
	send_error(client, NULL, &err);
	return false;
}

static tuned_client *client_new(tuned_daemon *d)
{
	tuned_client *client = calloc(1, sizeof(*client));

	if (!client || !(client->framer = proto_framer_new(d->limits.frame_bytes))) {
		free(client);
		return NULL;
	}
	client->daemon = d;
	proto_session_init(&client->session, &d->limits);
	uv_pipe_init(d->loop, &client->pipe, 0);
	uv_timer_init(d->loop, &client->timer);
	client->pipe.data = client->timer.data = client;
	client->handles_open = 2;
	client->next = d->clients;
	d->clients = client;
	d->nclients++;
	return client;
}

static void on_connection(uv_stream_t *server, int status)
{
	tuned_daemon *d = server->data;
	tuned_client *client;

	if (status < 0 || !(client = client_new(d)))
		return;
	if (uv_accept(server, (uv_stream_t *)&client->pipe) < 0) {
		tuned_client_close(client);
		return;
	}
	if (!admit_client(client))
		return;
	tuned_log(TUNED_DEBUG, "client uid %d pid %d connected", (int)client->peer.uid,
		  (int)client->peer.pid);
	uv_timer_start(&client->timer, on_timer,
		       (uint64_t)(d->limits.hello_timeout_s * 1000), 0);
	uv_read_start((uv_stream_t *)&client->pipe, on_alloc, on_read);
}

/* Listens on the socket socket.c binds. */
int tuned_server_listen(tuned_daemon *d, char *why, size_t size)
{
	int fd = tuned_socket_bind(d->options.socket_path, &d->bound, why, size);
	int rc;

	uv_timer_init(d->loop, &d->refusals.timer);
	d->refusals.timer.data = d;
	if (fd < 0)
		return -1;
	uv_pipe_init(d->loop, &d->server, 0);
	d->server.data = d;
	rc = uv_pipe_open(&d->server, fd);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&d->server, 128, on_connection);
	if (rc < 0)
		snprintf(why, size, "%s", uv_strerror(rc));
	return rc;
}

/* Stops accepting, and closes every client. */
void tuned_server_close(tuned_daemon *d)
{
	if (!uv_is_closing((uv_handle_t *)&d->server))
		uv_close((uv_handle_t *)&d->server, NULL);
	if (!uv_is_closing((uv_handle_t *)&d->refusals.timer))
		uv_close((uv_handle_t *)&d->refusals.timer, NULL);
	for (tuned_client *c = d->clients; c; c = c->next)
		tuned_client_close(c);
}
