/*
 * proto.h: the wire protocol of tuned, version 1 (docs/protocol.md).
 *
 * Newline-delimited JSON over a Unix stream socket: one object per line.
 * This module is the wire format only (framing, the request, reply and
 * event envelopes, the schema of every op's params, limits and error
 * codes); it does no I/O. The daemon and the client library call it.
 *
 * Ownership follows isl and jansson: __proto_give returns a new object (or
 * a new json reference) the caller frees, __proto_keep borrows, and
 * __proto_take consumes the argument on every path, failures included.
 * Lines built here are malloc'd, end with '\n', and are freed with free().
 */
#ifndef PROTO_H
#define PROTO_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "tuned_protocol.h"

#define __proto_give
#define __proto_take
#define __proto_keep

/* What went wrong: "code" a negative proto_code, "message" one lowercase
 * line in valid UTF-8, "closes" true when the daemon closes the connection
 * after replying with it (docs/protocol.md, "What closes a connection"),
 * "column" the 1-based column of a JSON syntax error (0 otherwise). */
typedef struct proto_error {
	int code;
	bool closes;
	int column;
	char message[PROTO_MESSAGE_MAX];
} proto_error;

/* "bad_request" for PROTO_EBAD_REQUEST...; "ok" for 0; NULL for others. */
const char *proto_code_name(int code);
/* The code named "name", or 0 when this version knows no such name. */
int proto_code_from_name(const char *name);

/* Sets "err" (may be NULL) to "code" and the formatted message (cut to
 * PROTO_MESSAGE_MAX - 1 bytes, invalid UTF-8 replaced by '?'), with
 * closes false and column 0. Returns "code". */
int proto_error_set(proto_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int proto_error_setv(proto_error *err, int code, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

/* Limits. All are the daemon's to configure; the frame limit is enforced
 * by proto_framer, the others by the daemon with proto_session and the
 * errors below; their defaults and ranges are in tuned_protocol.h. */
typedef struct proto_limits {
	size_t frame_bytes;     /* the longest line, '\n' not counted */
	int in_flight;          /* requests in flight per client */
	int clients;            /* connections at once */
	double hello_timeout_s; /* a connection without hello is closed then */
	double idle_timeout_s;  /* an idle connection is closed then; 0: never */
	int clients_per_uid;    /* connections at once of one uid */
} proto_limits;

/* Fills "limits" with the defaults above. */
void proto_limits_init(proto_limits *limits);
/* Checks each limit's range: 0, or PROTO_EBAD_REQUEST naming the field. */
int proto_limits_check(__proto_keep const proto_limits *limits,
		       proto_error *err);

/* The errors the daemon sends (with id null) before closing a connection,
 * each with err->closes set: a client over limits->clients (too_many), a
 * connection that did not say hello within limits->hello_timeout_s
 * (timeout). Return the code. */
int proto_error_too_many_clients(proto_error *err,
				 __proto_keep const proto_limits *limits);
int proto_error_hello_timeout(proto_error *err,
			      __proto_keep const proto_limits *limits);
/* The same for a client of "uid" that holds limits->clients_per_uid
 * connections already (too_many), and for a connection idle for
 * limits->idle_timeout_s after hello (timeout). */
int proto_error_too_many_for_uid(proto_error *err,
				 __proto_keep const proto_limits *limits, long uid);
int proto_error_idle_timeout(proto_error *err,
			     __proto_keep const proto_limits *limits);
/* The error for a peer the daemon does not allow, sent at connect before
 * closing (unauthorized); "uid" is the peer's. Returns the code. */
int proto_error_peer_refused(proto_error *err, long uid);

/* The framer: splits a byte stream into lines. Bytes are fed as they come;
 * proto_framer_next hands out one complete line at a time without its
 * '\n' (nor a '\r' before it); blank lines (nothing but spaces, tabs and
 * '\r') are skipped. A line longer than the limit is refused as soon as
 * limit + 1 bytes without '\n' have been seen; the framer never holds
 * more than "limit" bytes, and then fails for good (the daemon closes the
 * connection). Lines that lie whole in one fed buffer are not copied. */
typedef struct proto_framer proto_framer;

/* A framer for lines of at most "limit" bytes (at least 1); NULL when out
 * of memory. Nothing is allocated for lines until they span two feeds. */
__proto_give proto_framer *proto_framer_new(size_t limit);
void proto_framer_free(__proto_take proto_framer *framer);

/* Hands "len" bytes at "buf" to the framer, which reads them during the
 * calls to proto_framer_next that follow: "buf" must stay valid until
 * proto_framer_next has returned 0. Returns 0; PROTO_EBUSY when bytes of
 * the previous feed are still unread; the framer's error once it failed. */
int proto_framer_feed(proto_framer *framer, __proto_keep const char *buf,
		      size_t len);

/* The next complete line: returns 1 and sets *line and *len (a borrowed
 * pointer into the fed buffer or the framer, not NUL-terminated, valid
 * until the next call on the framer); 0 when every fed byte is read and
 * the next line is not complete yet; PROTO_ETOO_LARGE (err->closes set)
 * for a line over the limit, and from then on. */
int proto_framer_next(proto_framer *framer, const char **line, size_t *len,
		      proto_error *err);

/* Bytes held of a line not complete yet (never more than the limit): at
 * the end of the stream, a last line without '\n' is dropped. */
size_t proto_framer_pending(__proto_keep const proto_framer *framer);
size_t proto_framer_limit(__proto_keep const proto_framer *framer);

/* "cache.list" for PROTO_OP_CACHE_LIST...; NULL for others. */
const char *proto_op_name(enum proto_op op);
/* The op named "name", or PROTO_OP_NONE. */
enum proto_op proto_op_from_name(const char *name);

/* A request id: a non-negative integer or a string of at most PROTO_ID_MAX
 * bytes. */
bool proto_id_is_valid(__proto_keep const json_t *id);

/* A request, checked. id and params are new references (params is {} when
 * the request had none); the typed fields are those of the op, the others
 * stay at their defaults (in brackets). */
typedef struct proto_request {
	enum proto_op op;
	json_t *id;
	json_t *params;
	int64_t version;      /* hello [0] */
	json_t *graph;        /* submit: borrowed from params, object or string */
	bool has_budget;      /* submit [false] */
	double budget_s;      /* submit: seconds, > 0 [0] */
	int64_t priority;     /* submit: higher runs first [0] */
	int64_t trials;       /* submit: at most this many trials [0: no limit] */
	json_t *grad;         /* submit: borrowed, the names to differentiate
			       * with respect to [NULL: no backward graph] */
	int save;             /* submit with grad: which forward results the
			       * backward graph reads saved, PROTO_SAVE_*
			       * [PROTO_SAVE_NONE] */
	int64_t job;          /* status, cancel, fetch: > 0 [0: none] */
	char key[PROTO_KEY_HEX + 1]; /* fetch, watch, cache.show,
				      * cache.quarantine [""] */
	int64_t min_version;  /* fetch [0] */
	int64_t timeout_ms;   /* fetch: how long to wait [0: reply at once] */
	int64_t max_age_s;    /* cache.prune [-1: absent] */
	int64_t max_bytes;    /* cache.prune [-1: absent] */
	json_t *keys;         /* cache.export, advance: borrowed, an array of
			       * keys [NULL: every key] */
	char run[PROTO_RUN_MAX + 1]; /* fetch, advance: a training run's id
				      * [""] */
	json_t *bundle;       /* cache.import: borrowed, the export object */
} proto_request;

/* Reads and checks the request in the "len" bytes at "line" (one line
 * from the framer): the envelope, then the op's params. Returns 0, or a
 * negative code with "err" (may be NULL) filled; on every path "out" is
 * filled as far as the request allowed, out->id being the request's id
 * when usable (NULL otherwise, to be sent as null), so release "out" in
 * every case. */
int proto_parse_request(const char *line, size_t len, proto_request *out,
			proto_error *err);
/* Drops the references "req" holds and resets it. */
void proto_request_release(proto_request *req);

/* A request line for a client: {"id": "id", "op": ..., "params": "params"}
 * (params may be NULL for none). "params" is checked as the daemon checks
 * it (a hello of another version is not refused here). NULL, with "err"
 * filled, when "id" or "params" is refused or memory runs out. */
__proto_give char *proto_request_line(enum proto_op op, __proto_keep json_t *id,
				      __proto_take json_t *params,
				      proto_error *err);

/* The line of the message "msg": compact JSON, then '\n' (a '\n' in a
 * string is escaped, so the line has no other). NULL when "msg" is NULL or
 * memory runs out. */
__proto_give char *proto_dump_line(__proto_take json_t *msg);

/* Reply and event lines, each a single line of compact JSON and a '\n'.
 * "id" may be NULL (sent as null). NULL when out of memory or when
 * "result" / "data" is NULL. */
__proto_give char *proto_reply_result(__proto_keep json_t *id,
				      __proto_take json_t *result);
__proto_give char *proto_reply_error(__proto_keep json_t *id, int code,
				     const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
__proto_give char *proto_reply_from_error(__proto_keep json_t *id,
					  __proto_keep const proto_error *err);

/* {"event": "name", "data": "data"}; "data" must be an object. */
__proto_give char *proto_event(const char *name, __proto_take json_t *data);

/* The result of hello: {"version": 1, "server": "tuned <server_version>"}. */
__proto_give json_t *proto_hello_result(const char *server_version);

/* The name of "state" on the wire ("queued"...). */
const char *proto_job_state_name(enum proto_job_state state);
/* The state named "name", or -1. */
int proto_job_state_from_name(const char *name);

/* A line from the daemon, as a client reads it. */
enum proto_reply_kind {
	PROTO_REPLY_RESULT,
	PROTO_REPLY_ERROR,
	PROTO_REPLY_EVENT,
};

typedef struct proto_reply {
	enum proto_reply_kind kind;
	json_t *id;       /* result, error: new reference (json null for an
			   * error to no usable id); event: NULL */
	json_t *value;    /* result: the result; event: the data (new) */
	proto_error error; /* error: the code (PROTO_EINTERNAL for a name this
			    * version does not know) and the message */
	char event[PROTO_EVENT_NAME_MAX]; /* event: its name */
} proto_reply;

/* Reads the reply or event in the "len" bytes at "line". Keys this
 * version does not know are ignored. Returns 0, or PROTO_EBAD_REQUEST
 * with "err" filled when the line is not a reply of this protocol;
 * release "out" in every case. */
int proto_parse_reply(const char *line, size_t len, proto_reply *out,
		      proto_error *err);
void proto_reply_release(proto_reply *reply);

/* The state of one connection in the daemon: hello said or not, requests
 * in flight. Embedded in the daemon's client; "limits" is kept. */
typedef struct proto_session {
	const proto_limits *limits;
	bool ready;
	int in_flight;
} proto_session;

void proto_session_init(proto_session *session,
			__proto_keep const proto_limits *limits);
/* Admits the parsed request "req": 0 (one more in flight; hello makes the
 * session ready), or PROTO_ENOT_READY for an op before hello, or
 * PROTO_ETOO_MANY over limits->in_flight, with "err" filled and nothing
 * counted. The connection stays open in both cases. */
int proto_session_admit(proto_session *session,
			__proto_keep const proto_request *req,
			proto_error *err);
/* One admitted request has had its reply. */
void proto_session_done(proto_session *session);

#endif
