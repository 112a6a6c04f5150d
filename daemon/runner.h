/*
 * runner.h: the pipeline that tunes jobs (runner.c).
 *
 * Compile workers (one per core by default) compile candidates into a
 * shared folder while the device's single measurement worker verifies and
 * times the ones compiled; every worker is a tuned-worker process with its
 * own thread. Jobs are searched a generation at a time and their
 * generations interleave (docs/design/tuning.md, "Dynamic mode" and "Fair
 * scheduling"). What the pipeline finds goes back to the loop thread as
 * results, through a queue and a uv_async wake-up.
 */
#ifndef TUNED_RUNNER_H
#define TUNED_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "kgen.h"

enum tuned_result_kind {
	TUNED_RESULT_STARTED,    /* the job became active */
	TUNED_RESULT_TRIAL,      /* a candidate was compiled, or measured */
	TUNED_RESULT_VERSION,    /* a candidate beat the key's version */
	TUNED_RESULT_GENERATION, /* a generation ended */
	TUNED_RESULT_END,        /* the job is over */
	TUNED_RESULT_SKIPPED,    /* a quarantined candidate was not tried */
	TUNED_RESULT_LOST,       /* a worker died re-timing several plans */
};

/* What the pipeline found for one job. */
typedef struct tuned_result {
	int64_t job;
	enum tuned_result_kind kind;
	char outcome[16];  /* TRIAL: ok, wrong, compile_error, timeout, crash, error... */
	char detail[256];  /* TRIAL: why not ok; END: why the job failed, if it did */
	char ended[128];   /* END, when it did not fail: why it ended ("space
			    * exhausted: 12 of 12 plans measured", "budget
			    * spent: 60 s", "trials spent: 40 of 40") */
	json_t *answer;    /* TRIAL, VERSION: the measurement's answer */
	json_t *plan;      /* TRIAL, VERSION: the plan */
	double median_ms;  /* VERSION: retimed side by side with the version it beat */
	double spread_ms;
	double first_ms;   /* VERSION: the version the job started from, timed
			    * beside it (0: failed), for the speedup over it */
	int generation;    /* VERSION: the generation that found it */
	json_t *data;      /* GENERATION: the event's counters */
	int quarantined;   /* TRIAL, SKIPPED: candidates of the job skipped so far */
	/* TRIAL, when a worker crashed or hung: the repro bundle's parts */
	char *graph;       /* the graph.json text the worker ran (canonical) */
	json_t *sources;   /* each kernel's source, or NULL */
	char *worker_log;  /* the end of the worker's stderr, or NULL */
	int term_signal;   /* the signal that killed it, or 0 */
	double limit_s;    /* the time limit of the request */
	bool cancelled;    /* END: the job was cancelled, or */
	bool stopped;      /* END: the daemon is stopping (the job resumes later) */
	struct tuned_result *next;
} tuned_result;

/* A job handed to the runner. known, incumbent, neighbour and quarantined
 * are taken. */
typedef struct tuned_job_spec {
	int64_t job;
	const char *graph;  /* graph.json text */
	double budget_s;    /* 0: measure the default plan once, no search */
	int max_trials;     /* 0: no limit */
	int priority;
	json_t *known;      /* the key's trials on this device (cache_trials), or NULL */
	json_t *incumbent;  /* the plan of the key's best version, or NULL */
	json_t *neighbour;  /* without one, the best plan of the nearest key
			     * of the same form, or NULL */
	json_t *quarantined; /* the key's quarantined plans on this device
			      * (cache_quarantined_plans), or NULL: never
			      * compiled, measured or re-timed */
} tuned_job_spec;

typedef struct tuned_runner tuned_runner;

/* The runner's shared folder is "/tmp/tuned-share-<pid>-XXXXXX" (mkdtemp);
 * share.c removes those of daemons that are gone. */
#define TUNED_SHARE_DIR "/tmp"
#define TUNED_SHARE_NAME "tuned-share-"

/* How the runner works: the measurement worker and "compile_workers"
 * compile workers (tuned-worker at "worker_path" on "backend", whose
 * device, of signature "device", is a GPU when "cuda"); at most
 * "active_jobs" jobs searched at once. With "shared" (a reader of a
 * shared cache, cache_open_reader, which the runner takes and closes),
 * the searches of a key on the daemons of the database share their
 * work: each claims a plan before measuring it (cache_claim_plan), and
 * reads the trials the others recorded before each generation
 * (cache_trials_after). */
typedef struct tuned_runner_options {
	int active_jobs, compile_workers;
	const char *backend, *device, *worker_path;
	bool cuda;
	struct cache *shared;
} tuned_runner_options;

/* Starts the runner; "notify" is signalled when results wait. NULL on
 * failure (o->shared is closed then). */
tuned_runner *tuned_runner_start(uv_async_t *notify, const tuned_runner_options *o);
int tuned_runner_submit(tuned_runner *r, const tuned_job_spec *spec);
/* A job not yet active is dropped; an active one ends after the trials in
 * flight. */
void tuned_runner_cancel(tuned_runner *r, int64_t job);
/* Whether the runner still holds the job (one cancelled ends after the
 * trials in flight). */
bool tuned_runner_holds(tuned_runner *r, int64_t job);
/* Whether a client waits on the job's key (fetch with min_version, watch):
 * such jobs go first. */
void tuned_runner_set_waited(tuned_runner *r, int64_t job, bool waited);
/* The results so far, oldest first, now the caller's. */
tuned_result *tuned_runner_take_results(tuned_runner *r);
void tuned_result_free(tuned_result *result);
/* Stops the workers and frees the runner; results not taken are dropped,
 * and active jobs stay queued in the saved state. */
void tuned_runner_stop(tuned_runner *r);

/* For stats: worker processes running and restarted, seconds the
 * measurement worker was busy and since the runner started, and the
 * device's measured peaks (false when the probe failed) and whether its
 * library is there (library steps are searched). */
typedef struct tuned_runner_stats {
	int workers, running, restarts, compile_workers;
	double busy_s, up_s;
	bool probed, library;
	kgen_peaks peaks;
} tuned_runner_stats;

void tuned_runner_stats_get(tuned_runner *r, tuned_runner_stats *stats);

#endif
