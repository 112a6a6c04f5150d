/*
 * daemon.h: the parts of tuned, the daemon, one file each.
 */
#ifndef TUNED_DAEMON_H
#define TUNED_DAEMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define TUNED_VERSION "0.1.0"

/* priority.c: called by a background thread (the search's, or one of
 * libuv's threadpool when it starts off-loop work), which then runs at
 * nice TUNED_BACKGROUND_NICE, below the loop thread. */
#define TUNED_BACKGROUND_NICE 10
void tuned_thread_background(void);

/* log.c: a level-checked log, to stderr or a file that SIGHUP reopens. */
enum tuned_level { TUNED_ERROR, TUNED_WARN, TUNED_INFO, TUNED_DEBUG };

extern enum tuned_level tuned_log_level;

#define tuned_log(level, ...)                                                 \
	do {                                                                  \
		if ((level) <= tuned_log_level)                               \
			tuned_log_write(level, __VA_ARGS__);                  \
	} while (0)

void tuned_log_write(enum tuned_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int tuned_log_open(const char *path);
void tuned_log_reopen(void);
int tuned_log_level_parse(const char *name, enum tuned_level *level);

/* options.c: the command line and the configuration file. */
#define TUNED_MAX_ALLOWED 16

typedef struct tuned_options {
	int gpu;
	char backend[16];
	char socket_path[256];
	char cache_path[256];
	char log_path[256];
	char config_path[256];
	enum tuned_level log_level;
	int jobs;
	double lease_s;      /* a PostgreSQL cache's job leases (fleet.c) */
	int compile_workers; /* 0: one per core */
	int nallow_uids, nallow_gids, nadmin_gids;
	uid_t allow_uids[TUNED_MAX_ALLOWED];
	gid_t allow_gids[TUNED_MAX_ALLOWED];
	gid_t admin_gids[TUNED_MAX_ALLOWED];
	size_t max_frame;
	size_t max_unread;
	int max_clients;
	int max_clients_per_uid; /* 0 before parsing: a quarter of max_clients */
	int max_in_flight;
	double hello_timeout_s;
	double idle_timeout_s; /* 0: none */
	/* what one submitted graph may cost (sched_limits) */
	int64_t max_graph_bytes;
	int64_t max_graph_ops;
	int64_t max_tensor_elements;
	int64_t max_graph_elements;
} tuned_options;

/* Fills "o" from the defaults, the configuration file (--config, when
 * given) and the command line, in that order of precedence (last wins).
 * Returns 0, 1 when --help or --version was printed, or -1 with the error
 * printed. */
int tuned_options_parse(int argc, char **argv, tuned_options *o);

/* socket.c: the listening socket. Binds "path" 0660 and listens: the
 * folder made ready (created 0750 when missing; an existing one keeps its
 * mode but is refused when others may write to it or another user owns
 * it), a stale socket (one that refuses connections) removed, and refused
 * when a daemon listens there or something that is no socket is there
 * (left as it is). The socket's fd and its identity in *id, or -1 with
 * "why" saying what is wrong and how to mend it. */
typedef struct tuned_socket_id {
	dev_t dev;
	ino_t ino; /* 0: none bound */
} tuned_socket_id;

int tuned_socket_bind(const char *path, tuned_socket_id *id, char *why, size_t size);
/* Removes "path" if it is still the socket "id" this process bound. */
void tuned_socket_remove(const char *path, const tuned_socket_id *id);
/* Reads the peer of "fd" with SO_PEERCRED into "peer"; true when it may
 * connect: root, the daemon's own uid, an allowed uid, or a peer whose
 * primary or supplementary groups include an allowed or an admin gid. */
struct ucred;
bool tuned_peer_allowed(const tuned_options *o, int fd, struct ucred *peer);
/* Whether that peer is an admin, who may cancel others' jobs, prune,
 * import and read the quarantine: root, the daemon's own uid, or a peer
 * whose primary or supplementary groups include an admin gid. */
bool tuned_peer_is_admin(const tuned_options *o, int fd, const struct ucred *peer);

/* share.c: removes the runner's shared folders that daemons which did not
 * stop normally left behind (those of this uid whose pid is gone); call it
 * before the runner starts. */
void tuned_share_remove_stale(void);

/* jobs.c: the job queue, kept in the cache (its jobs table). */
enum tuned_job_state {
	TUNED_JOB_QUEUED, TUNED_JOB_RUNNING, TUNED_JOB_DONE, TUNED_JOB_FAILED,
	TUNED_JOB_CANCELLED,
};

#define TUNED_UID_UNKNOWN ((uid_t)-1)

typedef struct tuned_job {
	int64_t id;
	uid_t uid; /* who submitted it; TUNED_UID_UNKNOWN for jobs queued
		    * before submitters were kept */
	char key[65];
	char name[128];
	char *graph; /* the graph.json text */
	double budget_s;
	int max_trials; /* 0: no limit */
	int priority;
	enum tuned_job_state state;
	int trials;
	double best_ms;  /* the version's time when it was published */
	double first_ms; /* the version the job started from, timed beside it */
	int version;
	char error[256];
	char ended[128];   /* why it ended, when it ended normally (runner.h) */
	bool store_failed; /* the cache could not store what it found: error
			    * says why, and the job fails with it */
	double created_at, finished_at;
	bool dirty;  /* changed since it was last written */
	bool stored; /* its row (with its graph) is written */
	bool claimed;     /* a shared queue: this daemon holds its lease and works
		       * on it (fleet.c); its graph is NULL until then */
	bool row_claimed; /* a shared queue: the last pass read its row held
			   * by this daemon, whether or not it works on it
			   * yet (fleet.c) */
	bool reread;      /* a shared queue: its row had ended otherwise than this
		       * daemon wrote (a cancel that lost to the job's end):
		       * the next pass reads it again (fleet.c) */
	bool held_elsewhere; /* a shared queue: the last pass read its row held
			      * by another daemon */
	bool helping;        /* a shared queue: this daemon searches the key too,
			      * for the daemon that holds the job, until the
			      * runner's search of it ended (fleet.c) */
	bool help_stopped;   /* and that search was told to stop */
	bool helped;         /* it did once: a job is helped once */
	int helped_trials;   /* the trials this daemon measured helping it */
	struct tuned_job *next;
} tuned_job;

struct cache;
struct cache_job;

typedef struct tuned_jobs {
	tuned_job *head;
	int64_t next_id;
	struct cache *cache;
	int moved;       /* jobs moved from an older tuned's queue file */
	char error[600]; /* why the last load, save or add failed */
	/* The queue is shared by the daemons of a PostgreSQL database
	 * (fleet.c): ids come from the cache, each new row names the device
	 * signature "device", and this daemon runs the jobs it claims. */
	bool shared;
	const char *device;
} tuned_jobs;

/* Loads the queue from "cache", after moving the jobs of "queue_file"
 * (an older tuned's queue, if it is there) into it and removing the file.
 * Jobs that were running are queued again. Returns the number of queued
 * jobs, or a negative code with jobs->error saying why. A shared cache
 * (cache_is_shared) loads nothing: the fleet's passes bring its jobs. */
int tuned_jobs_load(tuned_jobs *jobs, struct cache *cache, const char *queue_file);
/* Writes the jobs marked dirty, in one transaction (the versions they
 * name must be published before), and forgets the oldest finished jobs
 * beyond 1000. 0, or a negative code with jobs->error saying why. From
 * the cache's owner: at start, and at the end once the writer thread is
 * gone; the loop writes through the writer thread, in three steps: */
int tuned_jobs_save(tuned_jobs *jobs);
/* The rows of the jobs changed since they were last written, copied, each
 * job's graph only for its first write; the jobs are no longer dirty.
 * NULL when out of memory. */
typedef struct tuned_jobs_changes tuned_jobs_changes;
tuned_jobs_changes *tuned_jobs_take_changes(tuned_jobs *jobs);
/* Writes them in one transaction (from the cache's owner): 0, the number
 * of jobs whose shared row had ended and was left as it was, or a
 * negative code with "why" saying why. */
int tuned_jobs_changes_write(const tuned_jobs_changes *changes, struct cache *c,
			     char *why, size_t why_size);
/* A write that found rows ended: the jobs of "changes" that ended here
 * are read again at the next pass, to show how their rows ended. */
void tuned_jobs_changes_ended(tuned_jobs *jobs, const tuned_jobs_changes *changes);
/* A write that failed: its jobs are dirty again, for the next save. */
void tuned_jobs_changes_lost(tuned_jobs *jobs, const tuned_jobs_changes *changes);
void tuned_jobs_changes_free(tuned_jobs_changes *changes);
void tuned_jobs_release(tuned_jobs *jobs);
tuned_job *tuned_jobs_add(tuned_jobs *jobs, uid_t uid, const char *key,
			  const char *name, const char *graph, double budget_s,
			  int max_trials, int priority);
tuned_job *tuned_jobs_find(const tuned_jobs *jobs, int64_t id);
/* A job as the cache's row says (its graph may be NULL: one of a shared
 * queue that another daemon runs), appended; NULL when out of memory. */
tuned_job *tuned_jobs_add_row(tuned_jobs *jobs, const struct cache_job *row);
/* A copy of "from" without its graph, appended, not claimed; NULL when
 * out of memory. */
tuned_job *tuned_jobs_add_copy(tuned_jobs *jobs, const tuned_job *from);
bool tuned_job_is_active(const tuned_job *job);
void tuned_job_finish(tuned_job *job, enum tuned_job_state state, const char *error);
const char *tuned_job_state_name(enum tuned_job_state state);
struct json_t;
/* Seconds since 1970 as RFC 3339 in UTC, e.g. "2026-11-22T10:32:27Z". */
struct json_t *tuned_rfc3339(double seconds);
/* A job as the protocol shows it (docs/protocol.md, "A job"). */
struct json_t *tuned_job_json(const tuned_job *job);
/* The queued or running job for "key", if any. */
tuned_job *tuned_jobs_find_active(const tuned_jobs *jobs, const char *key);

/* notify.c: systemd's notification datagram, without libsystemd. */
void tuned_notify(const char *state);

#endif
