/*
 * tuned_client.h: the C client library of tuned, for tunectl and for
 * training processes.
 *
 * A tuned_client is one connection to a daemon's Unix socket, speaking the
 * wire protocol of docs/protocol.md (version 1). Every call is synchronous: it sends
 * one request and waits, with poll() and a time limit, for the reply that
 * carries the request's id. Events that arrive meanwhile (after a watch)
 * are queued for tuned_client_next_event; replies to earlier requests that
 * ran out of time are dropped.
 *
 * The library keeps no global state, never exits, prints nothing and
 * raises no SIGPIPE (it writes with MSG_NOSIGNAL). A client is not
 * thread-safe: use each from one thread at a time; threads may each have
 * their own.
 *
 * Errors: every function that acts returns 0 or a negative code and, when
 * its "err" argument is not NULL, fills it with the code and a message of
 * one lowercase line. The codes are those of the daemon (enum proto_code in
 * tuned_protocol.h: PROTO_ENOT_FOUND for a job or key the daemon does not have,
 * PROTO_ETIMEOUT for a wait that ran out, ...) and the client's own, below.
 *
 * Ownership follows isl and jansson: __tuned_client_give returns a new
 * object (a new json reference) the caller frees, __tuned_client_keep
 * borrows, __tuned_client_take consumes the argument on every path.
 */
#ifndef TUNED_CLIENT_H
#define TUNED_CLIENT_H

#include <stdint.h>

#include <jansson.h>

#include "tuned_protocol.h"

#define __tuned_client_give
#define __tuned_client_take
#define __tuned_client_keep

/* The client's own error codes, below those of the daemon. */
enum tuned_client_code {
	TUNED_CLIENT_ENO_DAEMON = -101, /* nothing listens at the socket path */
	TUNED_CLIENT_EIO = -102,        /* a read or write on the socket failed */
	TUNED_CLIENT_ECLOSED = -103,    /* the daemon closed the connection */
	TUNED_CLIENT_EPROTOCOL = -104,  /* the daemon sent what protocol 1 is
					 * not: a garbled line, a bad hello */
	TUNED_CLIENT_EINVAL = -105,     /* an argument was refused (a path too
					 * long, a key that is not one, ...) */
	TUNED_CLIENT_ENOMEM = -106,     /* out of memory */
};

#define TUNED_CLIENT_MESSAGE_MAX 1280 /* bytes of a message, NUL included */
#define TUNED_CLIENT_PATH_MAX 108     /* bytes of a socket path, NUL included */
#define TUNED_CLIENT_TIMEOUT_DEFAULT_MS 30000
#define TUNED_CLIENT_EVENTS_MAX 1024  /* events queued; older ones dropped */

typedef struct tuned_client_error {
	int code;
	char message[TUNED_CLIENT_MESSAGE_MAX];
} tuned_client_error;

/* "no_daemon" for TUNED_CLIENT_ENO_DAEMON..., the wire name for a code of
 * the daemon ("not_found"), "ok" for 0; "unknown" for others. */
const char *tuned_client_code_name(int code);

/* Where the daemon of GPU 0 listens: $TUNED_SOCKET when set and not empty;
 * else the system service's /run/tuned-gpu/gpu0.sock for root. For other
 * users, the socket of a daemon of their own, $XDG_RUNTIME_DIR/tuned/
 * gpu0.sock (/tmp/tuned-<uid>/gpu0.sock when XDG_RUNTIME_DIR is unset),
 * when it is there in a folder of their own (owned by them, not writable
 * by group or others: another user could have made the socket in any
 * other); else the service's when the service is installed
 * (/run/tuned-gpu is there; its group may connect); else their own.
 * Written to "out" ("size" bytes, cut to fit). */
void tuned_client_default_path(char *out, size_t size);

typedef struct tuned_client_options {
	int timeout_ms;     /* how long connecting, the hello and each call wait
			     * for their reply: 0 for the default (30 s), -1 for
			     * no limit. A fetch waits its own timeout on top. */
	size_t frame_bytes; /* the longest line accepted from the daemon: 0 for
			     * PROTO_FRAME_MAX, the most a daemon may be set
			     * to send (memory grows only with what comes) */
} tuned_client_options;

typedef struct tuned_client tuned_client;

/* Connects to the daemon at "path" (NULL: tuned_client_default_path) with
 * "options" (NULL: the defaults), says hello {"version": 1} and checks the
 * reply. Returns 0 with *out set, or a negative code with *out NULL: when
 * nothing listens, TUNED_CLIENT_ENO_DAEMON with a message that names the
 * path and how to start a daemon; PROTO_EUNAUTHORIZED when the socket
 * refuses this user, or when "path" is NULL and the default is the user's
 * own socket, there in a folder not theirs alone (not connected to);
 * PROTO_EVERSION_MISMATCH or TUNED_CLIENT_EPROTOCOL
 * when the daemon speaks another protocol. */
int tuned_client_connect(const char *path,
			 __tuned_client_keep const tuned_client_options *options,
			 __tuned_client_give tuned_client **out,
			 tuned_client_error *err);
/* Closes the connection and frees "client" and its queued events. NULL is
 * allowed. */
void tuned_client_close(__tuned_client_take tuned_client *client);

/* The socket path and the daemon's hello ("tuned 0.1.0"; "" when it gave
 * none), both kept by the client. */
const char *tuned_client_path(__tuned_client_keep const tuned_client *client);
const char *tuned_client_server(__tuned_client_keep const tuned_client *client);

/* The socket, for a caller's own poll loop: when it is readable, or
 * before polling, call tuned_client_next_event with a timeout of 0 until
 * it returns 0 (events may be queued already). Do not read or write it. */
int tuned_client_fd(__tuned_client_keep const tuned_client *client);

/* Sends the request "op" with "params" (taken; NULL for none) and waits
 * for its reply, at most the client's timeout plus "extra_ms". Returns 0
 * with *result the reply's result (given; "result" may be NULL to drop
 * it), or a negative code: the daemon's error, or the client's. A
 * connection the daemon has closed gives the error it closed it with
 * when one came (PROTO_ETIMEOUT for a connection idle past the daemon's
 * --idle-timeout: connect again), else TUNED_CLIENT_ECLOSED. Every
 * call below is this one with its op's params. */
int tuned_client_call(tuned_client *client, enum proto_op op,
		      __tuned_client_take json_t *params, int extra_ms,
		      __tuned_client_give json_t **result,
		      tuned_client_error *err);

/* A job the daemon made for a submit (or the one it had for the key). */
typedef struct tuned_client_job {
	int64_t id;
	char key[PROTO_KEY_HEX + 1]; /* the graph's cache key */
	int64_t cached_version;      /* the best version the cache holds for
				      * the key now, 0 for none: fetch it at
				      * once while the job tunes */
} tuned_client_job;

/* How a job is to be tuned; zeroed fields take the daemon's defaults. */
typedef struct tuned_client_submit_options {
	double budget_s; /* seconds, at most PROTO_BUDGET_MAX_S; 0: default */
	int priority;    /* -1000 to 1000, higher first */
	int64_t trials;  /* at most this many trials, 1 to PROTO_TRIALS_MAX;
			  * 0: no limit but the budget */
} tuned_client_submit_options;

/* Submits the graph "graph" (the graph.json text) to be tuned as
 * "options" (NULL: the defaults) say, and fills "out". Options out of
 * range are TUNED_CLIENT_EINVAL, naming the field. A graph the daemon
 * refuses comes back as PROTO_EBAD_REQUEST with the scheduler's message.
 * The events of the job come to this connection from then on
 * (tuned_client_next_event); no watch is needed. */
int tuned_client_submit_with(tuned_client *client, const char *graph,
			     __tuned_client_keep
			     const tuned_client_submit_options *options,
			     tuned_client_job *out, tuned_client_error *err);
/* tuned_client_submit_with, and the graph's backward graph with respect
 * to the tensors "grad" names (comma-separated, "x,w"; docs/autodiff.md)
 * queued as a job too, with the same options: its job in *backward. A
 * name autodiff refuses comes back as PROTO_EBAD_REQUEST with the
 * message after "params.grad: ", and neither job is queued. */
int tuned_client_submit_grad(
	tuned_client *client, const char *graph,
	__tuned_client_keep const tuned_client_submit_options *options,
	const char *grad, tuned_client_job *out, tuned_client_job *backward,
	tuned_client_error *err);
/* tuned_client_submit_with with "budget_s" and "priority", no trial
 * limit. */
int tuned_client_submit(tuned_client *client, const char *graph,
			double budget_s, int priority, tuned_client_job *out,
			tuned_client_error *err);

/* The job "job": *out is the daemon's object for it (id, key, name, state,
 * progress {trials, best_ms, version}, created_at, error when it failed;
 * docs/protocol.md, "A job"). PROTO_ENOT_FOUND for an unknown job. */
int tuned_client_status(tuned_client *client, int64_t job,
			__tuned_client_give json_t **out,
			tuned_client_error *err);
/* Every job the daemon knows, newest first: *out is {"jobs": [...]}. */
int tuned_client_list(tuned_client *client, __tuned_client_give json_t **out,
		      tuned_client_error *err);
/* Cancels the job "job" (a job that has ended is left as it is); *out
 * (when "out" is not NULL) is the job afterwards. */
int tuned_client_cancel(tuned_client *client, int64_t job,
			__tuned_client_give json_t **out,
			tuned_client_error *err);

/* The best kernel so far for "what", a cache key (64 hex digits) or a job
 * id (a positive decimal integer), of at least version "min_version" (0:
 * any), waiting for one at most "timeout_ms" (0: answer at once; the call
 * then waits that much longer than the client's timeout). *out has key,
 * version, device, median_ms, spread_ms, plan, sources and launch
 * (docs/protocol.md, "fetch"). PROTO_ENOT_FOUND, with *out NULL, for a key
 * or job the daemon does not know; PROTO_ETIMEOUT when no such version
 * came within "timeout_ms"; PROTO_ECANCELLED when the job was cancelled
 * meanwhile. */
int tuned_client_fetch(tuned_client *client, const char *what,
		       int64_t min_version, int timeout_ms,
		       __tuned_client_give json_t **out,
		       tuned_client_error *err);

/* tuned_client_fetch for training run "run" (docs/protocol.md, "Runs"):
 * the version the run is pinned to, the key's latest at the run's first
 * fetch of it, the same for every rank of the run until it advances;
 * *out also has "run". With "timeout_ms", a key with no version yet
 * waits for its first, which the run then pins. */
int tuned_client_fetch_run(tuned_client *client, const char *what, const char *run,
			   int timeout_ms, __tuned_client_give json_t **out,
			   tuned_client_error *err);

/* Moves the pins of run "run" to the latest version of its keys: the
 * "n" keys of "keys", or, with "n" 0, every key the run has fetched.
 * *out (may be NULL) is {"run", "pins": [{"key", "version",
 * "previous"}]}. PROTO_ENOT_FOUND for a run that fetched nothing, or a
 * key listed with no version. */
int tuned_client_advance(tuned_client *client, const char *run, const char *const *keys,
			 int n, __tuned_client_give json_t **out,
			 tuned_client_error *err);

/* Asks for the events of the key "key" (it need not be known yet): new
 * versions, progress, the generations of its jobs' searches, the changes
 * of state of its jobs (docs/protocol.md, "Events"). They come through
 * tuned_client_next_event. */
int tuned_client_watch(tuned_client *client, const char *key,
		       tuned_client_error *err);

typedef struct tuned_client_event {
	char name[PROTO_EVENT_NAME_MAX]; /* PROTO_EVENT_VERSION, ... */
	json_t *data;                    /* given: json_decref it */
} tuned_client_event;

/* The oldest event queued or, when none is, the next to arrive within
 * "timeout_ms" (0: do not wait; -1: no limit). Returns 1 with "event"
 * filled, 0 when none came in time, or a negative code (the connection
 * closed, ...). */
int tuned_client_next_event(tuned_client *client, int timeout_ms,
			    tuned_client_event *event, tuned_client_error *err);

/* The daemon's counters: *out is {server, device, uptime_s, clients,
 * jobs, cache, workers}. */
int tuned_client_stats(tuned_client *client, __tuned_client_give json_t **out,
		       tuned_client_error *err);
/* The cache: its entries ({"entries": [{key, name, version, device,
 * median_ms, updated_at, bytes}...]}); one key's entry with its
 * "versions" (PROTO_ENOT_FOUND for an unknown key); removing the entries
 * not used for "max_age_s" seconds, then the least recently used until at
 * most "max_bytes" remain (-1 for either: no such limit; with neither
 * nothing is removed), *out being {removed, freed_bytes, entries,
 * bytes}. */
int tuned_client_cache_list(tuned_client *client,
			    __tuned_client_give json_t **out,
			    tuned_client_error *err);
int tuned_client_cache_show(tuned_client *client, const char *key,
			    __tuned_client_give json_t **out,
			    tuned_client_error *err);
int tuned_client_cache_prune(tuned_client *client, int64_t max_age_s,
			     int64_t max_bytes,
			     __tuned_client_give json_t **out,
			     tuned_client_error *err);
/* An export of the "nkeys" "keys" (nkeys 0: every key): *out is the
 * portable file's content (docs/cache.md, "Export and import"). An
 * import of "bundle" (such an export): *out is {imported: [{key,
 * versions, kept}], refused: [{key, reason}]}. */
int tuned_client_cache_export(tuned_client *client, const char *const *keys,
			      int nkeys, __tuned_client_give json_t **out,
			      tuned_client_error *err);
int tuned_client_cache_import(tuned_client *client,
			      __tuned_client_keep json_t *bundle,
			      __tuned_client_give json_t **out,
			      tuned_client_error *err);
/* The plans quarantined on the daemon's device (those of "key" only, when
 * it is not NULL), each with its repro bundle: *out is {"entries": [{id,
 * key, name, device, codegen, plan, reason, cause, signal, time_limit_s,
 * seed, created_at, graph, sources, worker_log}...]} (docs/protocol.md,
 * cache.quarantine). */
int tuned_client_cache_quarantine(tuned_client *client, const char *key,
				  __tuned_client_give json_t **out,
				  tuned_client_error *err);

#endif
