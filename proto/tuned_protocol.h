/*
 * tuned_protocol.h: the vocabulary of tuned's wire protocol, version 1
 * (docs/protocol.md): its error codes, operations, event names, job
 * states and limits. Constants only, no functions: a public header of the
 * C SDK (tuned_client.h includes it), installed with it; proto.h, the
 * daemon's and the client library's wire format, builds on it.
 */
#ifndef TUNED_PROTOCOL_H
#define TUNED_PROTOCOL_H

#define PROTO_VERSION 1
#define PROTO_ID_MAX 64         /* bytes of a string request id */
#define PROTO_KEY_HEX 64        /* a cache key: SHA-256 in lowercase hex */
#define PROTO_MESSAGE_MAX 1024  /* bytes of an error message, NUL included */
#define PROTO_EVENT_NAME_MAX 64 /* bytes of an event name, NUL included */

/* Ranges of params (docs/protocol.md, "Operations"). */
#define PROTO_BUDGET_MAX_S 2592000.0 /* 30 days */
#define PROTO_PRIORITY_MIN -1000
#define PROTO_PRIORITY_MAX 1000
#define PROTO_TRIALS_MAX 1000000
#define PROTO_TIMEOUT_MAX_MS 3600000 /* fetch waits at most an hour */
#define PROTO_GRAD_MAX 256 /* tensors a submit differentiates with respect to */
#define PROTO_RUN_MAX 128  /* bytes of a training run's id (fetch, advance) */
/* A submit's "save": which forward results its backward graph reads saved. */
enum proto_save { PROTO_SAVE_NONE, PROTO_SAVE_AUTO, PROTO_SAVE_ALL };

/* Limits of a daemon (tuned --max-frame...): defaults and ranges. */
#define PROTO_FRAME_DEFAULT (16u << 20)
#define PROTO_FRAME_MIN 1024
#define PROTO_FRAME_MAX (1u << 30)
#define PROTO_IN_FLIGHT_DEFAULT 64
#define PROTO_CLIENTS_DEFAULT 256
#define PROTO_COUNT_MAX 65536 /* in flight, clients */
#define PROTO_HELLO_TIMEOUT_DEFAULT_S 10.0
#define PROTO_IDLE_TIMEOUT_DEFAULT_S 300.0 /* 0: none */
#define PROTO_CLIENTS_PER_UID_DEFAULT 64  /* a quarter of the clients */

/* Error codes: 0 or negative, as functions return them; on the wire each
 * is its name, e.g. "bad_request" (tuned_client_code_name gives it). */
enum proto_code {
	PROTO_OK = 0,
	PROTO_EBAD_REQUEST = -1,      /* malformed JSON; missing, extra, mistyped
				       * or out-of-range fields */
	PROTO_EUNKNOWN_OP = -2,       /* "op" names no operation */
	PROTO_EVERSION_MISMATCH = -3, /* hello with another version; closes */
	PROTO_ENOT_READY = -4,        /* an op before hello */
	PROTO_ETOO_LARGE = -5,        /* a line over the frame limit; closes */
	PROTO_ETOO_MANY = -6,         /* requests in flight, or clients */
	PROTO_ENOT_FOUND = -7,        /* no such job or key */
	PROTO_EUNAUTHORIZED = -8,     /* the peer may not connect, or may not
				       * do this (another's job, an admin's
				       * op) */
	PROTO_EBUSY = -9,             /* the daemon cannot take it now */
	PROTO_ECANCELLED = -10,       /* the job was cancelled */
	PROTO_ETIMEOUT = -11,         /* a wait ran out */
	PROTO_EINTERNAL = -12,        /* a bug or an exhausted resource */
};
#define PROTO_NCODES 12

/* Operations, named on the wire "hello", "ping", ..., "cache.list",
 * "cache.show", "cache.prune", "cache.quarantine". */
enum proto_op {
	PROTO_OP_NONE = -1,
	PROTO_OP_HELLO,
	PROTO_OP_PING,
	PROTO_OP_SUBMIT,
	PROTO_OP_STATUS,
	PROTO_OP_LIST,
	PROTO_OP_CANCEL,
	PROTO_OP_FETCH,
	PROTO_OP_WATCH,
	PROTO_OP_STATS,
	PROTO_OP_CACHE_LIST,
	PROTO_OP_CACHE_SHOW,
	PROTO_OP_CACHE_PRUNE,
	PROTO_OP_CACHE_EXPORT,
	PROTO_OP_CACHE_IMPORT,
	PROTO_OP_CACHE_QUARANTINE,
	PROTO_OP_ADVANCE,
};
#define PROTO_NOPS 16

/* The events a client receives (docs/protocol.md, "Events"). */
#define PROTO_EVENT_VERSION "version"
#define PROTO_EVENT_PROGRESS "progress"
#define PROTO_EVENT_JOB "job"
#define PROTO_EVENT_GENERATION "generation"

/* The states of a job, named on the wire "queued", "running", "done",
 * "failed", "cancelled". */
enum proto_job_state {
	PROTO_JOB_QUEUED,
	PROTO_JOB_RUNNING,
	PROTO_JOB_DONE,
	PROTO_JOB_FAILED,
	PROTO_JOB_CANCELLED,
};

#endif
