/*
 * server.c: the socket server on the loop: accepting clients, reading
 * their lines, writing replies, closing them.
 *
 * A client is freed only after the close callbacks of its two handles
 * (libuv's rule). Malformed or oversized input gets an error reply; the
 * connection is closed when the protocol says so, and other clients are
 * never affected.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
	uv_close((uv_handle_t *)&client->hello_timer, on_handle_closed);
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

/* One line: parse, admit, handle. */
static void handle_line(tuned_client *client, const char *line, size_t len)
{
	proto_request req;
	proto_error err = {0};

	if (proto_parse_request(line, len, &req, &err) < 0 ||
	    proto_session_admit(&client->session, &req, &err) < 0)
		send_error(client, req.id, &err);
	else
		tuned_handle(client, &req);
	proto_request_release(&req);
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
	proto_error err = {0};
	const char *line;
	size_t len;
	int rc = 0;

	if (nread < 0) {
		free(buf->base);
		return tuned_client_close(client);
	}
	proto_framer_feed(client->framer, buf->base, (size_t)nread);
	while (!client->closing &&
	       (rc = proto_framer_next(client->framer, &line, &len, &err)) == 1)
		handle_line(client, line, len);
	if (!client->closing && rc < 0)
		send_error(client, NULL, &err);
	free(buf->base);
}

static void on_hello_timeout(uv_timer_t *timer)
{
	tuned_client *client = timer->data;
	proto_error err = {0};

	if (client->session.ready)
		return;
	proto_error_hello_timeout(&err, &client->daemon->limits);
	send_error(client, NULL, &err);
}

/* Who may connect, how many: refusals get one error line, then close. */
static bool admit_client(tuned_client *client)
{
	tuned_daemon *d = client->daemon;
	proto_error err = {0};
	uv_os_fd_t fd;

	if (uv_fileno((uv_handle_t *)&client->pipe, &fd) < 0 ||
	    !tuned_peer_allowed(&d->options, fd, &client->peer)) {
		tuned_log(TUNED_WARN, "refused uid %d (pid %d): not allowed",
			  (int)client->peer.uid, (int)client->peer.pid);
		proto_error_peer_refused(&err, (long)client->peer.uid);
	} else if (d->nclients > d->limits.clients || d->stopping) {
		proto_error_too_many_clients(&err, &d->limits);
	} else {
		return true;
	}
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
	uv_timer_init(d->loop, &client->hello_timer);
	client->pipe.data = client->hello_timer.data = client;
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
	uv_timer_start(&client->hello_timer, on_hello_timeout,
		       (uint64_t)(d->limits.hello_timeout_s * 1000), 0);
	uv_read_start((uv_stream_t *)&client->pipe, on_alloc, on_read);
}

/* Binds under a umask that leaves the socket 0660, inside the folder
 * socket.c checked. */
int tuned_server_listen(tuned_daemon *d, char *why, size_t size)
{
	mode_t old;
	int rc;

	if (tuned_socket_prepare(d->options.socket_path, why, size) < 0)
		return -1;
	uv_pipe_init(d->loop, &d->server, 0);
	d->server.data = d;
	old = umask(0117);
	rc = uv_pipe_bind(&d->server, d->options.socket_path);
	umask(old);
	d->bound = rc == 0;
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
	for (tuned_client *c = d->clients; c; c = c->next)
		tuned_client_close(c);
}
