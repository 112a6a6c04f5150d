/*
 * tuned: the kernel-tuning daemon, one per GPU.
 *
 * main() reads the settings, opens the log and the function cache, loads
 * the job queue, learns the device from a worker, starts the runner and the
 * socket server, and runs the loop. Signals only set the daemon stopping:
 * SIGTERM and SIGINT stop accepting, stop the workers, save the queue,
 * checkpoint the cache and exit 0; SIGHUP reopens the log.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server.h"
#include "tuner.h"

static void on_cache_log(void *user, int level, const char *message)
{
	(void)user;
	tuned_log(level <= 0 ? TUNED_ERROR : level == 1 ? TUNED_WARN : TUNED_INFO,
		  "cache: %s", message);
}

/* The device signature, from a worker: the daemon never opens a device. */
static int describe_device(tuned_daemon *d)
{
	const char *argv[] = {"tuned-worker", "--backend", d->options.backend, NULL};
	tuner_worker *worker = tuner_worker_new(d->worker_path, argv);
	json_t *request = json_pack("{s:b}", "describe", 1);
	tuner_reply reply = {0};
	const char *device;
	int rc = -1;

	if (worker && request && tuner_worker_ask(worker, request, 60, &reply) == 0 &&
	    (device = json_string_value(json_object_get(reply.answer, "device")))) {
		snprintf(d->device, sizeof(d->device), "%s", device);
		rc = 0;
	} else {
		tuned_log(TUNED_ERROR, "the worker '%s' cannot drive backend '%s': %s",
			  d->worker_path, d->options.backend,
			  json_string_value(json_object_get(reply.answer, "error")) ?:
			  reply.detail);
	}
	json_decref(reply.answer);
	json_decref(request);
	tuner_worker_free(worker);
	return rc;
}

static int make_parent_dir(const char *path, mode_t mode)
{
	char dir[256], *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	for (slash = strchr(dir + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = 0;
		if (mkdir(dir, mode) < 0 && errno != EEXIST)
			return -errno;
		*slash = '/';
	}
	return 0;
}

static int open_cache(tuned_daemon *d)
{
	cache_options options = {.log = on_cache_log};
	cache_error err = {0};
	char jobs_path[300];
	int rc;

	/* A PostgreSQL cache (--cache postgresql://...) has no folder, and
	 * no queue file of an older tuned; its errors name it without the
	 * connection string, which may hold a password. */
	bool database = cache_is_database(d->options.cache_path);
	const char *name = database ? "(PostgreSQL)" : d->options.cache_path;

	if (!database && (rc = make_parent_dir(d->options.cache_path, 0750)) < 0) {
		tuned_log(TUNED_ERROR, "cannot make the folder of '%s': %s",
			  d->options.cache_path, strerror(-rc));
		return -1;
	}
	if (cache_open(d->options.cache_path, &options, &d->cache, &err) < 0) {
		tuned_log(TUNED_ERROR, "cannot open the cache '%s': %s", name,
			  err.message);
		return -1;
	}
	if (cache_open_reader(d->cache, &d->reader, &err) < 0) {
		tuned_log(TUNED_ERROR, "cannot open a reader of the cache '%s': %s",
			  name, err.message);
		return -1;
	}
	snprintf(jobs_path, sizeof(jobs_path), "%s.jobs.json", d->options.cache_path);
	if ((rc = tuned_jobs_load(&d->jobs, d->cache, database ? NULL : jobs_path)) < 0) {
		tuned_log(TUNED_ERROR, "cannot load the job queue: %s", d->jobs.error);
		return -1;
	}
	if (d->jobs.moved > 0)
		tuned_log(TUNED_INFO, "%d job(s) moved from '%s' into the cache; "
			  "the file is removed", d->jobs.moved, jobs_path);
	if (rc > 0)
		tuned_log(TUNED_INFO, "%d queued job(s) resumed", rc);
	return 0;
}

/* Once the socket is open: what each job needs from the cache is read
 * off the loop thread (tuned_run_job). */
static void resume_jobs(tuned_daemon *d)
{
	for (tuned_job *job = d->jobs.head; job; job = job->next)
		if (job->state == TUNED_JOB_QUEUED)
			tuned_run_job(d, job);
}

static void close_waiters(tuned_daemon *d)
{
	while (d->waiters)
		tuned_drop_waiters(d, d->waiters->client);
}

/* What the runner finished before the stop is kept; trials its killed
 * workers leave behind are dropped with the runner (their jobs resume at
 * the next start). */
static void stop(tuned_daemon *d)
{
	if (d->stopping)
		return;
	d->stopping = true;
	tuned_notify("STOPPING=1");
	tuned_log(TUNED_INFO, "stopping");
	tuned_server_close(d);
	tuned_fleet_stop(d);
	tuned_listen_stop(d);
	close_waiters(d);
	tuned_on_results(&d->results);
	tuned_runner_stop(d->runner);
	d->runner = NULL;
	tuned_writer_close(d->writer); /* once what it was handed is stored */
	uv_close((uv_handle_t *)&d->results, NULL);
	uv_close((uv_handle_t *)&d->sigterm, NULL);
	uv_close((uv_handle_t *)&d->sigint, NULL);
	uv_close((uv_handle_t *)&d->sighup, NULL);
	uv_close((uv_handle_t *)&d->watchdog, NULL);
}

static void on_signal(uv_signal_t *handle, int signum)
{
	tuned_daemon *d = handle->data;

	if (signum == SIGHUP)
		return tuned_log_reopen();
	stop(d);
}

static void on_watchdog(uv_timer_t *timer)
{
	(void)timer;
	tuned_notify("WATCHDOG=1");
}

/* Pings systemd's watchdog at half its period, when it has one. */
static void start_watchdog(tuned_daemon *d)
{
	const char *usec = getenv("WATCHDOG_USEC");
	uint64_t ms = usec ? strtoull(usec, NULL, 10) / 2000 : 0;

	uv_timer_init(d->loop, &d->watchdog);
	if (ms > 0)
		uv_timer_start(&d->watchdog, on_watchdog, ms, ms);
}

static void start_signals(tuned_daemon *d)
{
	uv_signal_init(d->loop, &d->sigterm);
	uv_signal_init(d->loop, &d->sigint);
	uv_signal_init(d->loop, &d->sighup);
	d->sigterm.data = d->sigint.data = d->sighup.data = d;
	uv_signal_start(&d->sigterm, on_signal, SIGTERM);
	uv_signal_start(&d->sigint, on_signal, SIGINT);
	uv_signal_start(&d->sighup, on_signal, SIGHUP);
}

/* The runner; on a shared cache its searches share their work with the
 * other daemons' through a reader of its own. */
static int start_runner(tuned_daemon *d)
{
	tuned_runner_options o = {.active_jobs = d->options.jobs,
				  .compile_workers = d->options.compile_workers,
				  .backend = d->options.backend,
				  .device = d->device,
				  .worker_path = d->worker_path,
				  .cuda = !strncmp(d->device, "cuda", 4)};
	cache_error err = {0};

	if (cache_is_shared(d->cache) &&
	    cache_open_reader(d->cache, &o.shared, &err) < 0) {
		tuned_log(TUNED_ERROR, "cannot connect the search to cache %s: %s",
			  cache_name(d->cache), err.message);
		return -1;
	}
	if (!(d->runner = tuned_runner_start(&d->results, &o))) {
		tuned_log(TUNED_ERROR, "cannot start the worker threads");
		return -1;
	}
	return 0;
}

static int start(tuned_daemon *d)
{
	char why[512];

	if (open_cache(d) < 0 || describe_device(d) < 0)
		return -1;
	if (!(d->writer = tuned_writer_start(d->loop, d->cache))) {
		tuned_log(TUNED_ERROR, "cannot start the cache's writer thread");
		return -1;
	}
	tuned_log(TUNED_INFO, "device %s", d->device);
	uv_async_init(d->loop, &d->results, tuned_on_results);
	d->results.data = d;
	if (start_runner(d) < 0)
		return -1;
	/* before the socket appears: a SIGTERM from whoever saw it waits for
	 * the loop, instead of killing the daemon (exit 143) while it starts */
	start_signals(d);
	if (tuned_server_listen(d, why, sizeof(why)) < 0) {
		tuned_log(TUNED_ERROR, "cannot listen on '%s': %s", d->options.socket_path,
			  why);
		return -1;
	}
	resume_jobs(d);
	tuned_fleet_start(d);
	tuned_listen_start(d);
	start_watchdog(d);
	return 0;
}

static void finish(tuned_daemon *d)
{
	cache_error err = {0};

	tuned_writer_free(d->writer, d->cache); /* this thread writes again */
	if (d->cache && tuned_jobs_save(&d->jobs) < 0)
		tuned_log(TUNED_ERROR, "cannot save the job queue: %s", d->jobs.error);
	if (d->cache)
		tuned_fleet_release(d);
	if (d->cache && cache_checkpoint(d->cache, &err) < 0)
		tuned_log(TUNED_WARN, "checkpoint: %s", err.message);
	/* After a failed start: its workers stop and its share folder goes. */
	tuned_runner_stop(d->runner);
	cache_close(d->reader);
	cache_close(d->cache);
	tuned_jobs_release(&d->jobs);
	tuned_socket_remove(d->options.socket_path, &d->bound);
}

static void apply_limits(tuned_daemon *d)
{
	proto_limits_init(&d->limits);
	d->limits.frame_bytes = d->options.max_frame;
	d->limits.clients = d->options.max_clients;
	d->limits.in_flight = d->options.max_in_flight;
	d->limits.hello_timeout_s = d->options.hello_timeout_s;
	d->limits.idle_timeout_s = d->options.idle_timeout_s;
	d->limits.clients_per_uid = d->options.max_clients_per_uid;
}

int main(int argc, char **argv)
{
	static tuned_daemon d;
	int rc = tuned_options_parse(argc, argv, &d.options);

	if (rc != 0)
		return rc > 0 ? EXIT_SUCCESS : 2;
	tuned_log_level = d.options.log_level;
	if ((rc = tuned_log_open(d.options.log_path)) < 0) {
		fprintf(stderr, "tuned: cannot open the log '%s': %s\n",
			d.options.log_path, strerror(-rc));
		return EXIT_FAILURE;
	}
	d.loop = uv_default_loop();
	uv_mutex_init(&d.reader_lock);
	d.started_ms = uv_now(d.loop);
	apply_limits(&d);
	tuner_worker_default_path(d.worker_path, sizeof(d.worker_path));
	tuned_share_remove_stale();
	if (start(&d) < 0) {
		finish(&d);
		return EXIT_FAILURE;
	}
	tuned_log(TUNED_INFO, "listening on %s, cache %s, %d job(s) at once",
		  d.options.socket_path, cache_name(d.cache), d.options.jobs);
	tuned_notify("READY=1");
	uv_run(d.loop, UV_RUN_DEFAULT);
	finish(&d);
	uv_loop_close(d.loop);
	tuned_log(TUNED_INFO, "stopped");
	return EXIT_SUCCESS;
}
