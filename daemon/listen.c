/*
 * listen.c: the versions other daemons publish into a shared
 * (PostgreSQL) cache, told to this daemon's watchers and waiting fetches
 * as its own versions are (docs/operations.md, "Watchers across
 * daemons").
 *
 * The cache listens on the connection of the loop's reads
 * (cache_listen); the loop polls that connection's socket and, at each
 * turn (uv_check: a read of the loop may have taken the notices off the
 * socket meanwhile), reads the notices that came (cache_notices); a turn
 * that read its cap of them turns the loop again at once, since the
 * rest are queued off the socket, where the poll does not see them. Each
 * of this daemon's device and codegen becomes a version event to the
 * key's watchers, and answers the fetches waiting for it. A connection
 * lost is listened on again, a second later, then every 5 s, saying so
 * in the log; the versions published meanwhile are not told (a watcher
 * sees the next one).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kgen.h"
#include "server.h"

#define RETRY_FIRST_MS 1000
#define RETRY_MS 5000
/* Notices told per turn of the loop at most; the rest wait a turn, the
 * loop kept turning (the idle "more") until none is left. */
#define NOTICES_PER_TURN 64

/* The notices of one turn of this daemon's device and codegen. */
typedef struct notices {
	const tuned_daemon *d;
	int n;
	cache_notice at[NOTICES_PER_TURN];
	char keys[NOTICES_PER_TURN][PROTO_KEY_HEX + 1];
} notices;

static void on_poll_closed(uv_handle_t *handle)
{
	free(handle);
}

/* Stops polling the socket of a connection lost. */
static void stop_polling(tuned_listener *l)
{
	if (!l->poll)
		return;
	uv_poll_stop(l->poll);
	uv_close((uv_handle_t *)l->poll, on_poll_closed);
	l->poll = NULL;
	uv_check_stop(&l->check);
	uv_idle_stop(&l->more);
}

static void listen_now(tuned_daemon *d);

static void on_retry(uv_timer_t *timer)
{
	listen_now(timer->data);
}

static void retry_later(tuned_daemon *d, const char *why, uint64_t ms)
{
	tuned_listener *l = &d->listener;

	stop_polling(l);
	if (!l->failing)
		tuned_log(TUNED_WARN,
			  "cannot hear the versions other daemons publish: "
			  "%s; listening again every %d s",
			  why, RETRY_MS / 1000);
	l->failing = true;
	uv_timer_start(&l->retry, on_retry, ms, 0);
}

/* Copies what the cache says of one notice of this daemon's device and
 * codegen; others are another device's. */
static int keep(void *user, const cache_notice *notice)
{
	notices *kept = user;

	if (strcmp(notice->device, kept->d->device) ||
	    strcmp(notice->codegen, KGEN_CODEGEN_VERSION) ||
	    strlen(notice->graph) != PROTO_KEY_HEX)
		return 0;
	memcpy(kept->keys[kept->n], notice->graph, PROTO_KEY_HEX + 1);
	kept->at[kept->n] = (cache_notice){.graph = kept->keys[kept->n],
					   .version = notice->version};
	return ++kept->n == NOTICES_PER_TURN;
}

/* A version another daemon published: as this daemon's own are told,
 * with its times from the cache and no job of this daemon's. */
static void tell(tuned_daemon *d, const cache_notice *n)
{
	cache_plan *plan = NULL;
	double median_ms = NAN, spread_ms = NAN;

	if (cache_fetch_version(d->cache, n->graph, d->device, KGEN_CODEGEN_VERSION,
				n->version, &plan, NULL) > 0) {
		median_ms = plan->median_ms;
		spread_ms = plan->spread_ms;
	}
	cache_plan_free(plan);
	tuned_log(TUNED_INFO, "%s version %d: published by another daemon", n->graph,
		  n->version);
	tuned_broadcast(
		d, n->graph, PROTO_EVENT_VERSION,
		json_pack("{s:s, s:i, s:s, s:o, s:o, s:n, s:n, s:n}", "key", n->graph,
			  "version", n->version, "device", d->device, "median_ms",
			  isfinite(median_ms) ? json_real(median_ms) : json_null(),
			  "spread_ms",
			  isfinite(spread_ms) ? json_real(spread_ms) : json_null(),
			  "first_ms", "speedup", "job"));
	tuned_wake_waiters(d, n->graph, n->version);
}

static void on_more(uv_idle_t *idle);

/* Reads the notices that came and tells them. */
static void hear(tuned_daemon *d)
{
	notices kept = {.d = d};
	cache_error err = {0};
	int rc;

	if (!d->listener.poll || d->stopping)
		return;
	rc = cache_notices(d->cache, keep, &kept, &err);
	for (int i = 0; i < kept.n; i++)
		tell(d, &kept.at[i]);
	if (kept.n == NOTICES_PER_TURN && rc >= 0)
		uv_idle_start(&d->listener.more, on_more);
	else
		uv_idle_stop(&d->listener.more);
	if (rc < 0)
		retry_later(d, err.message, RETRY_FIRST_MS);
}

static void on_readable(uv_poll_t *poll, int status, int events)
{
	(void)status;
	(void)events;
	hear(poll->data);
}

static void on_check(uv_check_t *check)
{
	hear(check->data);
}

static void on_more(uv_idle_t *idle)
{
	hear(idle->data);
}

/* Listens (again), and polls the connection's socket; nothing on SQLite. */
static void listen_now(tuned_daemon *d)
{
	tuned_listener *l = &d->listener;
	cache_error err = {0};
	int fd = -1;

	if (d->stopping)
		return;
	if (cache_listen(d->cache, &fd, &err) < 0)
		return retry_later(d, err.message, RETRY_MS);
	if (fd < 0)
		return;
	if (!(l->poll = malloc(sizeof(*l->poll))))
		return retry_later(d, "out of memory", RETRY_MS);
	uv_poll_init(d->loop, l->poll, fd);
	l->poll->data = d;
	uv_poll_start(l->poll, UV_READABLE | UV_DISCONNECT, on_readable);
	uv_check_start(&l->check, on_check);
	if (l->failing)
		tuned_log(TUNED_INFO,
			  "hearing the versions other daemons publish again");
	l->failing = false;
}

void tuned_listen_start(tuned_daemon *d)
{
	tuned_listener *l = &d->listener;

	l->daemon = d;
	uv_timer_init(d->loop, &l->retry);
	l->retry.data = d;
	uv_check_init(d->loop, &l->check);
	l->check.data = d;
	uv_idle_init(d->loop, &l->more);
	l->more.data = d;
	listen_now(d);
}

void tuned_listen_stop(tuned_daemon *d)
{
	tuned_listener *l = &d->listener;

	if (!l->daemon)
		return;
	stop_polling(l);
	uv_close((uv_handle_t *)&l->retry, NULL);
	uv_close((uv_handle_t *)&l->check, NULL);
	uv_close((uv_handle_t *)&l->more, NULL);
	l->daemon = NULL;
}
