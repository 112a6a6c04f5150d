/*
 * engine.c: the public functions of cache.h, each passed to the engine
 * of its cache: SQLite for a file path, PostgreSQL for a connection URI
 * or conninfo string (docs/cache.md, "Engines").
 *
 * A NULL cache, and a missing out argument or callback, are refused here,
 * for both engines, naming what could not be done, with the out argument
 * cleared where there is one: the engines' functions take them as given.
 */
#include <ctype.h>
#include <string.h>

#include "cache_int.h"


/* Whether "where" starts as a conninfo string does, a keyword and '='
 * ("host=... dbname=..."): a path, even one with '=' in a folder's name
 * (/srv/gpu=0/cache.db), has a '/' or '.' before it. */
static bool is_conninfo(const char *where)
{
	const char *p = where, *keyword;

	while (isspace((unsigned char)*p))
		p++;
	keyword = p;
	while (isalpha((unsigned char)*p) || *p == '_')
		p++;
	if (p == keyword)
		return false;
	while (isspace((unsigned char)*p))
		p++;
	return *p == '=';
}

/* "postgresql://...", "postgres://..." or a conninfo string: PostgreSQL.
 * Anything else is a file. */
bool cache_is_database(const char *where)
{
	return where && (strncmp(where, "postgresql://", 13) == 0 ||
			 strncmp(where, "postgres://", 11) == 0 ||
			 is_conninfo(where));
}

int cache_open(const char *path, const cache_options *options,
	       __cache_give cache **out, cache_error *err)
{
	int rc;

	if (!out) {
		cache_set_error(err, CACHE_EINVAL, "cannot open a cache: no out");
		return CACHE_EINVAL;
	}
	*out = NULL;
	rc = cache_check_text(path, "cache path", err);
	if (rc)
		return rc;
	if (cache_is_database(path))
		return cache_pg_open(path, options, out, err);
	return cache_sqlite_open(path, options, out, err);
}

/* The refusal of a missing argument: "cannot <what>: <which>". */
static int no_argument(const char *what, const char *which, cache_error *err)
{
	cache_set_error(err, CACHE_EINVAL, "cannot %s: %s", what, which);
	return CACHE_EINVAL;
}

/* The refusal of a NULL cache: "cannot <what>: no cache". */
static int no_cache(const char *what, cache_error *err)
{
	return no_argument(what, "no cache", err);
}

/* A write: refused without a cache, or from a thread other than its
 * owner's (cache_check_owner), before either engine runs it. */
static int writable(const cache *c, const char *what, cache_error *err)
{
	return c ? cache_check_owner(c, what, err) : no_cache(what, err);
}

const char *cache_name(__cache_keep const cache *c)
{
	return c ? c->path : "(no cache)";
}

int cache_open_reader(__cache_keep const cache *c, __cache_give cache **out,
		      cache_error *err)
{
	if (!out) {
		cache_set_error(err, CACHE_EINVAL, "cannot open a reader: no out");
		return CACHE_EINVAL;
	}
	*out = NULL;
	if (!c)
		return no_cache("open a reader", err);
	return c->engine->open_reader(c, out, err);
}

void cache_close(__cache_take cache *c)
{
	if (c)
		c->engine->close(c);
}

int cache_put_graph(__cache_keep cache *c, const char *key,
		    const char *canonical, const char *name, cache_error *err)
{
	int rc = writable(c, "put a graph", err);

	return rc ? rc : c->engine->put_graph(c, key, canonical, name, err);
}

int cache_record_trial(__cache_keep cache *c,
		       __cache_keep const cache_trial *trial, cache_error *err)
{
	int rc = writable(c, "record a trial", err);

	return rc ? rc : c->engine->record_trial(c, trial, err);
}

int cache_publish(__cache_keep cache *c, __cache_keep const cache_plan *plan,
		  int *version, cache_error *err)
{
	int rc = writable(c, "publish a plan", err);

	if (rc)
		return rc;
	if (!plan) {
		cache_set_error(err, CACHE_EINVAL, "cannot publish: no plan");
		return CACHE_EINVAL;
	}
	return c->engine->publish(c, plan, version, err);
}

int cache_quarantine(__cache_keep cache *c,
		     __cache_keep const cache_quarantine_entry *entry,
		     cache_error *err)
{
	int rc = writable(c, "quarantine a plan", err);

	return rc ? rc : c->engine->quarantine(c, entry, err);
}

int cache_prune(__cache_keep cache *c, int64_t max_age_s, int64_t max_bytes,
		cache_prune_stats *stats, cache_error *err)
{
	if (!c)
		return no_cache("prune the cache", err);
	return c->engine->prune(c, max_age_s, max_bytes, stats, err);
}

int cache_checkpoint(__cache_keep cache *c, cache_error *err)
{
	int rc = writable(c, "checkpoint the cache", err);

	return rc ? rc : c->engine->checkpoint(c, err);
}

int cache_fetch_best(__cache_keep cache *c, const char *graph,
		     const char *device, const char *codegen, int min_version,
		     __cache_give cache_plan **out, cache_error *err)
{
	if (out)
		*out = NULL;
	if (!c)
		return no_cache("fetch a plan", err);
	return c->engine->fetch_best(c, graph, device, codegen, min_version,
				     out, err);
}

int cache_fetch_version(__cache_keep cache *c, const char *graph, const char *device,
			const char *codegen, int version, __cache_give cache_plan **out,
			cache_error *err)
{
	if (out)
		*out = NULL;
	if (!c)
		return no_cache("fetch a version", err);
	if (version < 1)
		return no_argument("fetch a version", "a version below 1", err);
	return c->engine->fetch_version(c, graph, device, codegen, version, out, err);
}

int cache_pin(__cache_keep cache *c, const char *run, const char *graph,
	      const char *device, const char *codegen, int *version, cache_error *err)
{
	int rc = writable(c, "pin a run's version", err), pinned = 0;

	if (rc == 0)
		rc = cache_check_run(run, err);
	if (rc == 0)
		rc = cache_check_key(graph, device, codegen, err);
	if (rc == 0)
		rc = cache_run_pin(c, run, graph, device, codegen, &pinned, err);
	if (version)
		*version = rc == 0 ? pinned : 0;
	return rc;
}

int cache_advance(__cache_keep cache *c, const char *run, const char *device,
		  const char *codegen, const char *const *keys, int n,
		  __cache_give json_t **out, cache_error *err)
{
	int rc = writable(c, "advance a run", err);

	if (out)
		*out = NULL;
	if (rc)
		return rc;
	if (!out || n < 0 || (n > 0 && !keys))
		return no_argument("advance a run", !out ? "no out" : "no keys", err);
	rc = cache_check_run(run, err);
	if (rc == 0)
		rc = cache_check_key("-", device, codegen, err);
	return rc ? rc : cache_run_advance(c, run, device, codegen, keys, n, out, err);
}

int cache_listen(__cache_keep cache *c, int *fd, cache_error *err)
{
	if (fd)
		*fd = -1;
	if (!c)
		return no_cache("listen for versions", err);
	if (!fd)
		return no_argument("listen for versions", "no out", err);
	return c->engine->listen(c, fd, err);
}

int cache_notices(__cache_keep cache *c,
		  int (*fn)(void *user, const cache_notice *notice), void *user,
		  cache_error *err)
{
	if (!c)
		return no_cache("read the notices of versions", err);
	if (!fn)
		return no_argument("read the notices of versions", "no callback", err);
	return c->engine->notices(c, fn, user, err);
}

bool cache_is_quarantined(__cache_keep cache *c, const char *graph,
			  const char *device, const char *codegen,
			  const char *plan_json, cache_error *err)
{
	if (!c) {
		no_cache("read the quarantine", err);
		return false;
	}
	return c->engine->is_quarantined(c, graph, device, codegen, plan_json,
					 err);
}

int cache_quarantined_plans(__cache_keep cache *c, const char *graph,
			    const char *device, const char *codegen,
			    __cache_give json_t **out, cache_error *err)
{
	if (out)
		*out = NULL;
	if (!c)
		return no_cache("read the quarantine", err);
	if (!out)
		return no_argument("read the quarantine", "no out", err);
	return c->engine->quarantined_plans(c, graph, device, codegen, out, err);
}

int cache_quarantine_entries(__cache_keep cache *c, const char *key,
			     __cache_give json_t **out, cache_error *err)
{
	if (out)
		*out = NULL;
	if (!c)
		return no_cache("list the quarantine", err);
	if (!out)
		return no_argument("list the quarantine", "no out", err);
	return c->engine->quarantine_entries(c, key, out, err);
}

int cache_list(__cache_keep cache *c,
	       int (*fn)(void *user, const cache_entry *entry), void *user,
	       cache_error *err)
{
	if (!c)
		return no_cache("list the cache", err);
	if (!fn)
		return no_argument("list the cache", "no callback", err);
	return c->engine->list(c, fn, user, err);
}

int cache_show(__cache_keep cache *c, const char *key,
	       __cache_give json_t **out, cache_error *err)
{
	if (out)
		*out = NULL;
	if (!c)
		return no_cache("show a graph", err);
	if (!out)
		return no_argument("show a graph", "no out", err);
	return c->engine->show(c, key, out, err);
}

int cache_trials(__cache_keep cache *c, const char *graph, const char *device,
		 const char *codegen, int64_t limit, __cache_give json_t **out,
		 cache_error *err)
{
	if (out)
		*out = NULL;
	if (!c)
		return no_cache("read the trials", err);
	if (!out || limit < 0)
		return no_argument("read the trials", out ? "a negative limit" :
				   "no out", err);
	return c->engine->trials(c, graph, device, codegen, limit, out, err);
}

int cache_stat(__cache_keep cache *c, cache_stats *out, cache_error *err)
{
	if (!c)
		return no_cache("read the cache's numbers", err);
	if (!out)
		return no_argument("read the cache's numbers", "no out", err);
	return c->engine->stat(c, out, err);
}

int cache_put_jobs(__cache_keep cache *c, __cache_keep const cache_job *jobs,
		   int n, int keep_finished, cache_error *err)
{
	int rc = writable(c, "write a job", err);

	if (rc == 0)
		rc = cache_jobs_check(jobs, n, keep_finished, err);
	return rc ? rc : c->engine->put_jobs(c, jobs, n, keep_finished, err);
}

int cache_jobs(__cache_keep cache *c,
	       int (*fn)(void *user, const cache_job *job), void *user,
	       cache_error *err)
{
	if (!c)
		return no_cache("read the jobs", err);
	if (!fn)
		return no_argument("read the jobs", "no callback", err);
	return c->engine->jobs(c, fn, user, err);
}

int cache_keep_graph_json(__cache_keep cache *c, const char *key,
			  const char *graph_json, cache_error *err)
{
	int rc = writable(c, "keep a graph", err);

	return rc ? rc : c->engine->keep_graph_json(c, key, graph_json, err);
}

int cache_export_graph(__cache_keep cache *c, const char *key,
		       __cache_give json_t **out, cache_error *err)
{
	if (out)
		*out = NULL;
	if (!c)
		return no_cache("export a graph", err);
	if (!out)
		return no_argument("export a graph", "no out", err);
	return c->engine->export_graph(c, key, out, err);
}

int cache_import_graph(__cache_keep cache *c, __cache_keep json_t *entry,
		       const char *canonical, __cache_give json_t **out,
		       cache_error *err)
{
	if (out)
		*out = NULL;
	if (!c)
		return no_cache("import a graph", err);
	if (!out)
		return no_argument("import a graph", "no out", err);
	return c->engine->import_graph(c, entry, canonical, out, err);
}

bool cache_is_shared(__cache_keep const cache *c)
{
	return c && c->engine == &cache_pg_engine;
}

/* The shared queue's operations: refused on SQLite, whose file has one
 * daemon, which keeps the whole queue itself. */
static int shared_only(const cache *c, const char *what, cache_error *err)
{
	if (cache_is_shared(c))
		return 0;
	cache_set_error(err, CACHE_EINVAL,
			"cannot %s: cache %s is a SQLite "
			"file, one daemon's; a job queue is shared on PostgreSQL "
			"only",
			what, cache_name(c));
	return CACHE_EINVAL;
}

int cache_pass_jobs(__cache_keep cache *c, __cache_keep const cache_job_pass *pass,
		    int (*fn)(void *user, const cache_job *job), void *user,
		    cache_error *err)
{
	int rc = writable(c, "claim jobs", err);

	if (rc == 0)
		rc = shared_only(c, "claim jobs", err);
	if (rc)
		return rc;
	if (!pass || !fn)
		return no_argument("claim jobs", !pass ? "no pass" : "no callback",
				   err);
	if (pass->nwatch < 0 || (pass->nwatch && !pass->watch))
		return no_argument("claim jobs", "no watched ids", err);
	if (pass->nhelp < 0 || (pass->nhelp && !pass->help))
		return no_argument("claim jobs", "no ids to help", err);
	return pg_pass_jobs(c, pass, fn, user, err);
}

int cache_release_jobs(__cache_keep cache *c, cache_error *err)
{
	int rc = writable(c, "give back the leases of jobs", err);

	if (rc == 0)
		rc = shared_only(c, "give back the leases of jobs", err);
	return rc ? rc : pg_release_jobs(c, err);
}

int cache_renew_jobs(__cache_keep cache *c, double lease_s, const int64_t *ids, int n,
		     cache_error *err)
{
	if (!c)
		return no_cache("renew the leases of jobs", err);
	if (n < 0 || (n && !ids) || !(lease_s > 0))
		return no_argument("renew the leases of jobs",
				   lease_s > 0 ? "no ids" : "a lease of no time", err);
	return shared_only(c, "renew the leases of jobs", err) ?:
		       pg_renew_jobs(c, lease_s, ids, n, err);
}

int cache_new_job_id(__cache_keep cache *c, int64_t *id, cache_error *err)
{
	if (!c)
		return no_cache("number a job", err);
	if (!id)
		return no_argument("number a job", "no out", err);
	*id = 0;
	return shared_only(c, "number a job", err) ?: pg_new_job_id(c, id, err);
}

int cache_claim_plan(__cache_keep cache *c, const char *graph, const char *device,
		     const char *codegen, const char *plan_json, double claim_s,
		     cache_error *err)
{
	char *plan = NULL;
	int rc;

	if (!c)
		return no_cache("claim a plan", err);
	rc = shared_only(c, "claim a plan", err) ?:
		     cache_check_key(graph, device, codegen, err);
	if (rc == 0 && !(claim_s > 0))
		rc = no_argument("claim a plan", "a claim of no time", err);
	if (rc == 0)
		rc = cache_json_canonical(plan_json, "plan", false, &plan, err);
	if (rc == 0)
		rc = pg_claim_plan(c, graph, device, codegen, plan, claim_s, err);
	cache_json_free(plan);
	return rc;
}

int cache_trials_after(__cache_keep cache *c, const char *graph, const char *device,
		       const char *codegen, int64_t *after, int limit, json_t **out,
		       cache_error *err)
{
	int rc;

	if (out)
		*out = NULL;
	if (!c)
		return no_cache("read the trials", err);
	if (!after || !out || limit <= 0)
		return no_argument("read the trials",
				   !after ? "no trial number" :
				   !out   ? "no out" :
					    "no limit",
				   err);
	rc = shared_only(c, "read the trials after one", err) ?:
		     cache_check_key(graph, device, codegen, err);
	return rc ? rc :
		    pg_trials_after(c, graph, device, codegen, after, limit, out, err);
}
