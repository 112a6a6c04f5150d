/*
 * trial.h: what the benchmarks share: a trial measured as the daemon
 * measures one (daemon/runner.c), by a tuned-worker, and small helpers.
 */
#ifndef BENCH_TRIAL_H
#define BENCH_TRIAL_H

#include <jansson.h>

#include "tuner.h"

/* The budget of wall time a trial's timing runs for, as daemon/runner.c
 * times a trial (the worker's other settings: 1 warm-up, 3 to 50 runs). */
#define TRIAL_TIMING_MS 100.0

/* The monotonic clock in seconds. */
double bench_now_s(void);

/* "text" as an integer from 1 to 1,000,000 into "*out"; -EINVAL if not. */
int bench_positive_int(const char *text, int *out);

/* A tuned-worker (tuner_worker_default_path) on "backend"; not started
 * until the first ask. */
tuner_worker *bench_worker_new(const char *backend);

/* Asks a worker which device it drives and says so on stdout; fails
 * (before any search), saying so on stderr as "program", when no worker
 * can be started. */
int bench_describe_device(const char *program, const char *backend);

/* The time of "plan" for the graph "text" on "w", within "limit_s"
 * (tuner_time_limit): total_ms when it verified and was timed, INFINITY
 * for any failure. A plan whose first run is 3 times slower than
 * "best_ms" (when finite) is not timed further. With "beside" (another
 * plan of the graph, timed at "beside_ms"; NULL: none), it is timed in
 * turns with that plan, as the daemon times a candidate beside its
 * version: its time is the median ratio of its runs to that plan's times
 * "beside_ms", and the cutoff is 3 times the ratio of "best_ms". */
double bench_measure(tuner_worker *w, const char *text, double limit_s, json_t *plan,
		     double best_ms, json_t *beside, double beside_ms);

#endif
