/*
 * server.h: the daemon's state, its clients, and the handlers of the
 * protocol's requests (server.c, handlers.c, results.c).
 */
#ifndef TUNED_SERVER_H
#define TUNED_SERVER_H

#include <sys/socket.h>
#include <uv.h>

#include "cache.h"
#include "daemon.h"
#include "proto.h"
#include "runner.h"
#include "writer.h"

#define TUNED_MAX_WATCHES 64

typedef struct tuned_daemon tuned_daemon;

typedef struct tuned_client {
	uv_pipe_t pipe;
	uv_timer_t timer; /* the hello timeout, then the idle timeout */
	tuned_daemon *daemon;
	proto_framer *framer;
	char *feed; /* the read whose lines the framer hands out, until read */
	proto_session session;
	struct ucred peer;
	bool admin;          /* tuned_peer_is_admin */
	uint64_t active_ms;  /* the loop's time of its last request or reply */
	size_t queued_bytes;
	int handles_open;
	int holds; /* work off the loop that will answer it (tuned_client_hold) */
	bool closing;
	int nwatches;
	char watches[TUNED_MAX_WATCHES][PROTO_KEY_HEX + 1];
	struct tuned_client *next;
} tuned_client;

/* A fetch waiting for a version newer than it was given. */
typedef struct tuned_waiter {
	uv_timer_t timer;
	tuned_client *client;
	json_t *id;
	char key[PROTO_KEY_HEX + 1];
	int64_t min_version;
	char run[PROTO_RUN_MAX + 1]; /* a run's fetch: pins the first version */
	struct tuned_waiter *next;
} tuned_waiter;

/* Why connections are refused, each logged at most once a second. */
enum tuned_refusal {
	TUNED_REFUSED_PEER,     /* not allowed to connect */
	TUNED_REFUSED_CLIENTS,  /* over --max-clients, or stopping */
	TUNED_REFUSED_UID,      /* over --max-clients-per-uid */
	TUNED_NREFUSALS,
};

typedef struct tuned_refusals {
	uv_timer_t timer; /* ends each second in which some were refused */
	struct {
		bool logging; /* one was logged less than a second ago */
		int unlogged; /* refused since then, not logged one by one */
	} reason[TUNED_NREFUSALS];
} tuned_refusals;

/* fleet.c: the passes over a shared job queue. */
typedef struct tuned_fleet {
	uv_timer_t timer;
	bool passing; /* a pass is on the writer thread */
	bool again;   /* another is wanted once it is over */
	bool failing; /* the last pass failed (logged once) */
	/* The leases held, renewed at each tick on a connection of their
	 * own (a reader of the cache), off the loop and the writer. */
	struct cache *renewer;
	bool renewing;         /* a renewal is on libuv's threadpool */
	bool renewals_failing; /* the last one failed (logged once) */
} tuned_fleet;
/* Hearing the versions other daemons publish into a shared cache
 * (listen.c). */
typedef struct tuned_listener {
	struct tuned_daemon *daemon; /* set once started */
	uv_poll_t *poll;             /* the socket of the connection that listens, or
			    * NULL (SQLite, or lost: "retry" runs) */
	uv_check_t check;            /* reads the notices at each turn of the loop */
	uv_idle_t more;              /* turns the loop again while a turn's cap of
				      * notices left some queued */
	uv_timer_t retry;            /* listens again after a connection was lost */
	bool failing;                /* said in the log, until it listens again */
} tuned_listener;

struct tuned_daemon {
	uv_loop_t *loop;
	tuned_options options;
	proto_limits limits;
	uv_pipe_t server;
	tuned_socket_id bound; /* the socket ours to remove at the end */
	uv_signal_t sigterm, sigint, sighup;
	uv_timer_t watchdog;
	uv_async_t results;
	tuned_runner *runner;
	tuned_jobs jobs;
	tuned_fleet fleet;
	/* read on the loop thread; written only by the writer thread
	 * (writer.h), once the daemon has started */
	cache *cache;
	tuned_writer *writer;
	/* a second handle of the cache, for the reads that prepare a job off
	 * the loop thread (libuv's threadpool), one at a time under the lock */
	cache *reader;
	uv_mutex_t reader_lock;
	char device[384];
	char worker_path[4096];
	tuned_client *clients;
	int nclients;
	tuned_refusals refusals;
	tuned_waiter *waiters;
	tuned_listener listener;
	bool stopping;
	uint64_t started_ms;
	int64_t fetch_hits, fetch_misses;
};

/* server.c */
/* 0, or negative with "why" filled. */
int tuned_server_listen(tuned_daemon *d, char *why, size_t size);
void tuned_server_close(tuned_daemon *d);
/* Sends "line" (taken) to the client; a client that lets replies pile up
 * past --max-unread bytes is closed. */
void tuned_client_send(tuned_client *client, char *line);
void tuned_client_close(tuned_client *client);
/* The client said hello: from now on it is closed when idle for
 * --idle-timeout (docs/operations.md, "Limits"). */
void tuned_client_ready(tuned_client *client);
/* Keeps "client" allocated, though it may close, until as many
 * tuned_client_release: for work off the loop that answers it. */
void tuned_client_hold(tuned_client *client);
void tuned_client_release(tuned_client *client);

/* handlers.c: one request, admitted by the session. */
void tuned_handle(tuned_client *client, proto_request *req);
/* Sends an event to every client watching "key". */
void tuned_broadcast(tuned_daemon *d, const char *key, const char *event,
		     json_t *data);
/* Answers the fetches waiting on "key" that "version" satisfies. */
void tuned_wake_waiters(tuned_daemon *d, const char *key, int version);
void tuned_drop_waiters(tuned_daemon *d, tuned_client *client);
/* Ends the fetches waiting on "key" with an error: its job ended without
 * the version they wait for. */
void tuned_fail_waiters(tuned_daemon *d, const char *key, int code,
			const char *message);
/* results.c: fails the fetches waiting on "job"'s key when it was
 * cancelled or failed, here or on another daemon (fleet.c). */
void tuned_fail_waiters_of_job(tuned_daemon *d, const tuned_job *job);

/* The best version the cache holds for "key" on this device, or 0. */
int tuned_cached_version(tuned_daemon *d, const char *key);
/* Tells the runner which jobs a client waits on (watch, or a fetch for a
 * newer version): they go first. */
void tuned_update_waited(tuned_daemon *d);
/* Hands a queued job to the runner, with what the cache knows of its key,
 * read off the loop thread: the job goes to the runner later, on the loop,
 * if it is still queued then. */
void tuned_run_job(tuned_daemon *d, const tuned_job *job);
/* The same for a job another daemon of a shared queue holds, whose
 * search this daemon helps (fleet.c): it goes to the runner if this
 * daemon still helps it then. */
void tuned_help_job(tuned_daemon *d, tuned_job *job);

/* Hands the jobs changed since the last save to the writer thread, to
 * be written after the writes handed before (the versions they name). */
void tuned_save_jobs(tuned_daemon *d);

/* fleet.c: on a shared cache (PostgreSQL: jobs.shared), this daemon
 * claims jobs, renews its leases and follows the jobs of the others. */
/* Starts the passes: the first at once, then every third of --lease;
 * on SQLite, only readies the timer that tuned_fleet_stop closes. */
void tuned_fleet_start(tuned_daemon *d);
/* A pass soon: a job was queued. */
void tuned_fleet_kick(tuned_daemon *d);
void tuned_fleet_stop(tuned_daemon *d);
/* At the end, after the last save, with the cache this thread's again:
 * the leases held are given back, their jobs queued for the others. */
void tuned_fleet_release(tuned_daemon *d);
/* listen.c: from the start (after the cache is open) to the stop, the
 * versions other daemons publish into the cache are told as this
 * daemon's are; nothing on SQLite. */
void tuned_listen_start(tuned_daemon *d);
void tuned_listen_stop(tuned_daemon *d);

/* results.c: the runner's results, on the loop thread. */
void tuned_on_results(uv_async_t *async);

#endif
