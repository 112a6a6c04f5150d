/*
 * worker.c: a worker process on the worker's own libuv loop, asked one line
 * of JSON at a time.
 *
 * The loop and the timer live as long as the worker. The process and its
 * two pipes live from a start until the process has been reaped and the
 * three are closed (worker_stop): a process handle is never closed before
 * its exit callback, so no child is left a zombie. Every handle is embedded
 * in the worker and forgotten only after its close callback, which the
 * worker waits for by counting the closes in flight.
 *
 * One ask runs the loop until the reply is settled: an answer line, or the
 * worker's death seen both ways (exit callback and end of its stdout, in
 * whichever order they come), or a kill (time-out, garbage) once the killed
 * process has been reaped.
 *
 * The process's stderr comes through a pipe of ours: it is passed on to our
 * stderr, and its last TUNER_LOG_MAX bytes are kept (the log of the process
 * that crashed or hung, for its quarantine). It is read while the loop
 * runs, during asks, and what is left when the process has died is read
 * before its pipes close.
 */
#include <libgen.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "tuner.h"

/* One request on its way: libuv holds it from uv_write to on_write. */
typedef struct tuner_write {
	uv_write_t req;
	char *text;
} tuner_write;

/* The bytes read from the worker's stdout during one ask. */
typedef struct tuner_line {
	char *data;
	size_t len, cap;
} tuner_line;

struct tuner_worker {
	uv_loop_t loop;
	uv_timer_t timer;
	uv_process_t process;
	uv_pipe_t to_worker;   /* its stdin */
	uv_pipe_t from_worker; /* its stdout */
	uv_pipe_t errors;      /* its stderr */
	char *path;
	char **argv;
	int starts;
	int closing;  /* close callbacks still to come */
	bool running; /* process and pipes are open */
	bool exited;  /* the process has been reaped */
	bool eof;     /* its stdout has ended */
	int exit_status, term_signal;
	int answers;  /* answers from the current process */
	char log[TUNER_LOG_MAX]; /* the end of its stderr */
	char log_chunk[4096];    /* one read of it */
	size_t log_len;
	bool log_eof; /* its stderr has ended */

	/* The ask in progress, while reply is set. */
	tuner_reply *reply;
	tuner_line line;
	double timeout_s;
	int write_error; /* how sending the request failed, or 0 */
	bool killing;    /* SIGKILL sent: the outcome waits for the exit */
	bool settled;    /* reply is final */
};

static char newline[] = "\n";

/* Writing to a dead worker must fail with EPIPE, not kill us. */
static void ignore_sigpipe(void)
{
	struct sigaction old;

	if (sigaction(SIGPIPE, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
	    old.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);
}

static void argv_free(char **argv)
{
	for (char **arg = argv; arg && *arg; arg++)
		free(*arg);
	free(argv);
}

/* A NULL-terminated copy of "argv", or of { "path" } when "argv" is NULL. */
static char **argv_copy(const char *path, const char *const *argv)
{
	const char *const fallback[] = { path, NULL };
	size_t n = 0;
	char **copy;

	if (!argv)
		argv = fallback;
	while (argv[n])
		n++;
	copy = calloc(n + 1, sizeof(*copy));
	for (size_t i = 0; copy && i < n; i++) {
		copy[i] = strdup(argv[i]);
		if (!copy[i]) {
			argv_free(copy);
			return NULL;
		}
	}
	return copy;
}

tuner_worker *tuner_worker_new(const char *path, const char *const *argv)
{
	tuner_worker *worker = path ? calloc(1, sizeof(*worker)) : NULL;

	if (!worker)
		return NULL;
	worker->path = strdup(path);
	worker->argv = argv_copy(path, argv);
	if (!worker->path || !worker->argv || uv_loop_init(&worker->loop) < 0)
		goto free_copies;
	uv_timer_init(&worker->loop, &worker->timer);
	worker->timer.data = worker;
	ignore_sigpipe();
	return worker;

free_copies:
	argv_free(worker->argv);
	free(worker->path);
	free(worker);
	return NULL;
}

int tuner_worker_starts(const tuner_worker *worker)
{
	return worker->starts;
}

int tuner_worker_pid(const tuner_worker *worker)
{
	return worker->running && !worker->exited ? worker->process.pid : 0;
}

static void on_close(uv_handle_t *handle)
{
	tuner_worker *worker = handle->data;

	worker->closing--;
}

static void worker_close(tuner_worker *worker, void *handle)
{
	uv_handle_t *h = handle;

	h->data = worker;
	worker->closing++;
	uv_close(h, on_close);
}

static void worker_wait_closes(tuner_worker *worker)
{
	while (worker->closing > 0)
		uv_run(&worker->loop, UV_RUN_ONCE);
}

/* What the dead process wrote last: its stderr is read until its end, or
 * for as long as data is waiting (a child of the worker, a compiler, may
 * hold it open). */
static void worker_drain_log(tuner_worker *worker)
{
	for (int i = 0; i < 16 && !worker->log_eof; i++)
		uv_run(&worker->loop, UV_RUN_NOWAIT);
}

/* Kills the process if it has not exited, reaps it and closes its handles.
 * SIGKILL cannot be caught, so the wait ends unless the process is stuck in
 * the kernel (a driver call), where nothing better than waiting exists. */
static void worker_stop(tuner_worker *worker)
{
	if (!worker->running)
		return;
	if (!worker->exited)
		uv_process_kill(&worker->process, SIGKILL);
	while (!worker->exited)
		uv_run(&worker->loop, UV_RUN_ONCE);
	worker_drain_log(worker);
	worker_close(worker, &worker->process);
	worker_close(worker, &worker->to_worker);
	worker_close(worker, &worker->from_worker);
	worker_close(worker, &worker->errors);
	worker_wait_closes(worker);
	worker->running = false;
}

void tuner_worker_free(tuner_worker *worker)
{
	if (!worker)
		return;
	worker_stop(worker);
	worker_close(worker, &worker->timer);
	worker_wait_closes(worker);
	if (uv_loop_close(&worker->loop) < 0) {
		uv_run(&worker->loop, UV_RUN_DEFAULT);
		uv_loop_close(&worker->loop);
	}
	free(worker->line.data);
	argv_free(worker->argv);
	free(worker->path);
	free(worker);
}

static bool worker_asking(const tuner_worker *worker)
{
	return worker->reply && !worker->settled;
}

static void worker_settle(tuner_worker *worker, tuner_outcome outcome)
{
	worker->reply->outcome = outcome;
	worker->settled = true;
}

/* The worker died before answering: say how. */
static void worker_settle_crash(tuner_worker *worker)
{
	tuner_reply *reply = worker->reply;
	int sig = worker->term_signal;

	reply->term_signal = sig;
	reply->exit_status = sig ? 0 : worker->exit_status;
	if (sig)
		snprintf(reply->detail, sizeof(reply->detail),
			 "worker killed by signal %d (%s)", sig, strsignal(sig));
	else
		snprintf(reply->detail, sizeof(reply->detail),
			 "worker exited with status %d before answering%s",
			 worker->exit_status,
			 worker->write_error ? " (request not delivered)" : "");
	worker_settle(worker, TUNER_CRASHED);
}

/* Settles as a crash once the death has been seen both ways. */
static void worker_check_death(tuner_worker *worker)
{
	if (worker_asking(worker) && !worker->killing && worker->exited &&
	    worker->eof)
		worker_settle_crash(worker);
}

/* Kills the process for "outcome", whose detail is written; the reply
 * settles when the process has been reaped. */
static void worker_kill(tuner_worker *worker, tuner_outcome outcome)
{
	worker->killing = true;
	worker->reply->outcome = outcome;
	if (worker->exited)
		worker_settle(worker, outcome);
	else
		uv_process_kill(&worker->process, SIGKILL);
}

static void on_process_exit(uv_process_t *process, int64_t exit_status,
		    int term_signal)
{
	tuner_worker *worker = process->data;

	worker->exited = true;
	worker->exit_status = (int)exit_status;
	worker->term_signal = term_signal;
	if (worker_asking(worker) && worker->killing)
		worker_settle(worker, worker->reply->outcome);
	else
		worker_check_death(worker);
}

static void on_timeout(uv_timer_t *timer)
{
	tuner_worker *worker = timer->data;

	if (!worker_asking(worker) || worker->killing)
		return;
	if (worker->exited) { /* dead, but something else holds its stdout */
		worker_settle_crash(worker);
		return;
	}
	snprintf(worker->reply->detail, sizeof(worker->reply->detail),
		 "no answer within %.1f s: worker killed", worker->timeout_s);
	worker_kill(worker, TUNER_TIMED_OUT);
}

/* Up to 40 bytes of "text" in quotes, anything unprintable as '?'. */
static void quote_start(char *out, const char *text, size_t len)
{
	size_t n = len < 40 ? len : 40, i;

	out[0] = '\'';
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)text[i];

		out[i + 1] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	strcpy(out + n + 1, len > n ? "...'" : "'");
}

/* The first "len" bytes of the line buffer are a whole line: parse it. */
static void worker_take_line(tuner_worker *worker, size_t len)
{
	tuner_reply *reply = worker->reply;
	json_t *answer = json_loadb(worker->line.data, len, 0, NULL);
	char quoted[48];

	if (json_is_object(answer)) {
		reply->answer = answer;
		worker->answers++;
		snprintf(reply->detail, sizeof(reply->detail),
			 "worker answered (%zu bytes)", len);
		worker_settle(worker, TUNER_ANSWERED);
		return;
	}
	json_decref(answer);
	quote_start(quoted, worker->line.data, len);
	snprintf(reply->detail, sizeof(reply->detail),
		 "worker answered a line that is not a json object: %s: "
		 "worker killed", quoted);
	worker_kill(worker, TUNER_GARBLED);
}

/* Room for "extra" more bytes in "line", or -1. */
static int line_reserve(tuner_line *line, size_t extra)
{
	size_t cap = line->cap ? line->cap : extra;
	char *data;

	if (line->cap - line->len >= extra)
		return 0;
	while (cap - line->len < extra)
		cap *= 2;
	data = realloc(line->data, cap);
	if (!data)
		return -1;
	line->data = data;
	line->cap = cap;
	return 0;
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
	tuner_worker *worker = handle->data;
	tuner_line *line = &worker->line;

	if (line_reserve(line, suggested) < 0)
		*buf = uv_buf_init(NULL, 0);
	else
		*buf = uv_buf_init(line->data + line->len, suggested);
}

/* "nread" new bytes at the end of the line buffer: look for its end. */
static void worker_read_bytes(tuner_worker *worker, size_t nread)
{
	tuner_line *line = &worker->line;
	char *end = memchr(line->data + line->len, '\n', nread);

	line->len += nread;
	if (!worker_asking(worker) || worker->killing)
		line->len = 0; /* nobody waits for it */
	else if (end)
		worker_take_line(worker, end - line->data);
	else if (line->len > TUNER_MAX_LINE) {
		snprintf(worker->reply->detail, sizeof(worker->reply->detail),
			 "worker answered more than %u bytes without a newline: "
			 "worker killed", TUNER_MAX_LINE);
		worker_kill(worker, TUNER_GARBLED);
	}
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	tuner_worker *worker = stream->data;

	(void)buf;
	if (nread == UV_ENOBUFS && worker_asking(worker) && !worker->killing) {
		snprintf(worker->reply->detail, sizeof(worker->reply->detail),
			 "out of memory reading the answer: worker killed");
		worker_kill(worker, TUNER_GARBLED);
	} else if (nread < 0) {
		worker->eof = true;
		uv_read_stop(stream);
		worker_check_death(worker);
	} else {
		worker_read_bytes(worker, (size_t)nread);
	}
}

static void on_log_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
	tuner_worker *worker = handle->data;

	(void)suggested;
	*buf = uv_buf_init(worker->log_chunk, sizeof(worker->log_chunk));
}

/* Keeps the last TUNER_LOG_MAX bytes. */
static void log_append(tuner_worker *worker, const char *data, size_t len)
{
	if (len > TUNER_LOG_MAX) {
		data += len - TUNER_LOG_MAX;
		len = TUNER_LOG_MAX;
	}
	if (worker->log_len + len > TUNER_LOG_MAX) {
		size_t drop = worker->log_len + len - TUNER_LOG_MAX;

		memmove(worker->log, worker->log + drop, worker->log_len - drop);
		worker->log_len -= drop;
	}
	memcpy(worker->log + worker->log_len, data, len);
	worker->log_len += len;
}

/* The worker's stderr: passed on to ours, and its end kept. */
static void on_log_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	tuner_worker *worker = stream->data;

	if (nread < 0) {
		worker->log_eof = true;
		uv_read_stop(stream);
		return;
	}
	log_append(worker, buf->base, (size_t)nread);
	if (fwrite(buf->base, 1, (size_t)nread, stderr) != (size_t)nread)
		clearerr(stderr);
}

/* The length of the valid UTF-8 sequence at "s" (of "n" bytes), or 0:
 * jansson's rules (no overlong forms, surrogates or NUL). */
static size_t utf8_sequence(const unsigned char *s, size_t n)
{
	size_t size = s[0] < 0x80 ? 1 : s[0] < 0xc2 ? 0 : s[0] < 0xe0 ? 2 :
		      s[0] < 0xf0 ? 3 : s[0] < 0xf5 ? 4 : 0;
	uint32_t value = size > 1 ? s[0] & (0x7f >> size) : s[0];

	if (size == 0 || size > n || s[0] == 0)
		return 0;
	for (size_t i = 1; i < size; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		value = value << 6 | (s[i] & 0x3f);
	}
	if ((size == 3 && value < 0x800) || (size == 4 && value < 0x10000) ||
	    (value >= 0xd800 && value <= 0xdfff) || value > 0x10ffff)
		return 0;
	return size;
}

char *tuner_worker_log(const tuner_worker *worker)
{
	const unsigned char *log = (const unsigned char *)worker->log;
	char *text = malloc(worker->log_len + 1);
	size_t at = 0, n = 0;

	while (text && at < worker->log_len) {
		size_t size = utf8_sequence(log + at, worker->log_len - at);

		if (size == 0) {
			text[n++] = '?';
			at++;
		} else {
			memcpy(text + n, log + at, size);
			n += size;
			at += size;
		}
	}
	if (text)
		text[n] = 0;
	return text;
}

static void on_write(uv_write_t *req, int status)
{
	tuner_write *sent = (tuner_write *)req;
	tuner_worker *worker = req->handle->data;

	if (status < 0 && worker_asking(worker))
		worker->write_error = status;
	free(sent->text);
	free(sent);
}

/* Queues "request" and a newline on the worker's stdin. */
static int worker_send(tuner_worker *worker, const json_t *request)
{
	tuner_write *sent = calloc(1, sizeof(*sent));
	uv_buf_t bufs[2];
	int rc;

	if (sent)
		sent->text = json_dumps(request, JSON_COMPACT);
	if (!sent || !sent->text) {
		free(sent);
		return UV_ENOMEM;
	}
	bufs[0] = uv_buf_init(sent->text, strlen(sent->text));
	bufs[1] = uv_buf_init(newline, 1);
	rc = uv_write(&sent->req, (uv_stream_t *)&worker->to_worker, bufs, 2,
		      on_write);
	if (rc < 0) {
		free(sent->text);
		free(sent);
	}
	return rc;
}

static void stdio_pipe(uv_stdio_container_t *stdio, uv_pipe_t *stream,
		       int flags)
{
	stdio->flags = UV_CREATE_PIPE | flags;
	stdio->data.stream = (uv_stream_t *)stream;
}

/* Spawns the process with pipes on its stdin and stdout. */
static int worker_spawn(tuner_worker *worker)
{
	uv_process_options_t options = { 0 };
	uv_stdio_container_t stdio[3];

	uv_pipe_init(&worker->loop, &worker->to_worker, 0);
	uv_pipe_init(&worker->loop, &worker->from_worker, 0);
	uv_pipe_init(&worker->loop, &worker->errors, 0);
	worker->to_worker.data = worker;
	worker->from_worker.data = worker;
	worker->errors.data = worker;
	stdio_pipe(&stdio[0], &worker->to_worker, UV_READABLE_PIPE);
	stdio_pipe(&stdio[1], &worker->from_worker, UV_WRITABLE_PIPE);
	stdio_pipe(&stdio[2], &worker->errors, UV_WRITABLE_PIPE);
	options.exit_cb = on_process_exit;
	options.file = worker->path;
	options.args = worker->argv;
	options.stdio_count = 3;
	options.stdio = stdio;
	return uv_spawn(&worker->loop, &worker->process, &options);
}

/* Starts a fresh process; on failure closes what was opened. */
static int worker_start(tuner_worker *worker, tuner_reply *reply)
{
	int rc = worker_spawn(worker);

	worker->process.data = worker;
	worker->running = true;
	worker->exited = rc < 0; /* a failed spawn leaves nothing to reap */
	worker->eof = false;
	worker->answers = 0;
	worker->log_len = 0;
	worker->log_eof = rc < 0;
	if (rc == 0)
		uv_read_start((uv_stream_t *)&worker->errors, on_log_alloc, on_log_read);
	if (rc < 0) {
		worker_stop(worker);
		snprintf(reply->detail, sizeof(reply->detail),
			 "cannot start worker '%s': %s", worker->path,
			 uv_strerror(rc));
		return rc;
	}
	worker->starts++;
	return 0;
}

static void worker_begin(tuner_worker *worker, double timeout_s,
			 tuner_reply *reply)
{
	worker->reply = reply;
	worker->timeout_s = timeout_s;
	worker->line.len = 0;
	worker->write_error = 0;
	worker->killing = false;
	worker->settled = false;
}

/* Sends "request" to the running process and runs the loop until "reply"
 * is settled. Fails only when the request cannot be queued. */
static int worker_exchange(tuner_worker *worker, const json_t *request,
			   double timeout_s, tuner_reply *reply)
{
	int rc = worker_send(worker, request);

	if (rc < 0) {
		snprintf(reply->detail, sizeof(reply->detail),
			 "cannot send the request: %s", uv_strerror(rc));
		return rc;
	}
	worker_begin(worker, timeout_s, reply);
	if (!worker->eof)
		uv_read_start((uv_stream_t *)&worker->from_worker, on_alloc,
			      on_read);
	uv_update_time(&worker->loop); /* the loop may have slept for long */
	uv_timer_start(&worker->timer, on_timeout,
		       (uint64_t)(timeout_s * 1000.0) + 1, 0);
	while (!worker->settled)
		uv_run(&worker->loop, UV_RUN_ONCE);
	uv_timer_stop(&worker->timer);
	uv_read_stop((uv_stream_t *)&worker->from_worker);
	worker->reply = NULL;
	return 0;
}

/* One ask of one process: starts it if needed, and stops it after unless
 * it answered and can go on. */
static int worker_ask_once(tuner_worker *worker, const json_t *request,
			   double timeout_s, tuner_reply *reply)
{
	int rc = 0;

	if (!worker->running)
		rc = worker_start(worker, reply);
	if (rc == 0)
		rc = worker_exchange(worker, request, timeout_s, reply);
	if (rc == 0 && (reply->outcome != TUNER_ANSWERED || worker->exited ||
			worker->eof))
		worker_stop(worker);
	return rc;
}

/* Notices an exit that happened since the last ask, and clears it away. */
static void worker_collect(tuner_worker *worker)
{
	if (worker->running && !worker->exited)
		uv_run(&worker->loop, UV_RUN_NOWAIT);
	if (worker->running && worker->exited)
		worker_stop(worker);
}

static void reply_clear(tuner_reply *reply)
{
	memset(reply, 0, sizeof(*reply));
	reply->outcome = TUNER_CRASHED;
}

static int check_ask(const json_t *request, double timeout_s,
		     tuner_reply *reply)
{
	if (!json_is_object(request)) {
		snprintf(reply->detail, sizeof(reply->detail),
			 "the request is not a json object");
		return UV_EINVAL;
	}
	if (!(timeout_s > 0 && timeout_s < 1e9)) {
		snprintf(reply->detail, sizeof(reply->detail),
			 "time limit %g s is not a positive number", timeout_s);
		return UV_EINVAL;
	}
	return 0;
}

/* An old process that ended quietly without a byte of answer: it most
 * likely exited after its last answer, before this request reached it. */
static bool worker_ended_quietly(const tuner_worker *worker, bool was_old,
				 const tuner_reply *reply)
{
	return was_old && reply->outcome == TUNER_CRASHED &&
	       reply->term_signal == 0 && reply->exit_status == 0 &&
	       worker->line.len == 0;
}

int tuner_worker_ask(tuner_worker *worker, const json_t *request,
		     double timeout_s, tuner_reply *reply)
{
	bool was_old;
	int rc;

	reply_clear(reply);
	rc = check_ask(request, timeout_s, reply);
	if (rc < 0)
		return rc;
	worker_collect(worker);
	was_old = worker->running && worker->answers > 0;
	rc = worker_ask_once(worker, request, timeout_s, reply);
	if (rc == 0 && worker_ended_quietly(worker, was_old, reply)) {
		reply_clear(reply);
		rc = worker_ask_once(worker, request, timeout_s, reply);
	}
	if (rc < 0)
		reply->outcome = TUNER_CRASHED;
	return rc;
}

/* Whether "dir"/"relative" is a program this user may run; "path" holds
 * it. */
static bool executable_at(char *path, size_t size, const char *dir,
			  const char *relative)
{
	snprintf(path, size, "%s/%s", dir, relative);
	return *relative && access(path, X_OK) == 0;
}

void tuner_worker_default_path(char *path, size_t size)
{
	/* From the folder of the running program. The installed places come
	 * first, so that a tuned-worker left in bindir by an older install is
	 * not run; the build tree's after them. */
	static const char *const from_program[] = {
		TUNED_WORKER_FROM_SBINDIR, /* installed; tuned is in sbindir */
		TUNED_WORKER_FROM_BINDIR,  /* installed; tunectl is in bindir */
		"tuned-worker",            /* the build tree's daemon/ */
		"../daemon/tuned-worker",  /* the build tree's other folders */
	};
	char self[4096] = "";
	const char *env = getenv("TUNED_WORKER"), *dir;
	ssize_t n;

	if (env && *env) {
		snprintf(path, size, "%s", env);
		return;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = 0;
	dir = dirname(self);
	for (size_t i = 0; i < sizeof(from_program) / sizeof(*from_program); i++)
		if (executable_at(path, size, dir, from_program[i]))
			return;
	snprintf(path, size, "%s", TUNED_WORKER_INSTALLED);
}
