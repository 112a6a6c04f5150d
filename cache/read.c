/*
 * read.c: fetch, quarantine lookups, list, show, the trials of a key and
 * stat, through the read-only connection. Any thread may read; the caller
 * serializes reads of one cache. A read of several statements runs in one read
 * transaction, so it sees one snapshot whatever the writer commits.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cache_int.h"

/* The strings of a cache_plan, to size and copy them in one loop. */
#define PLAN_TEXTS 7
static const char **plan_text(cache_plan *p, int i)
{
	const char **texts[PLAN_TEXTS] = {
		&p->graph, &p->device, &p->codegen, &p->plan, &p->sources,
		&p->launch, &p->found_by,
	};
	return texts[i];
}

/* Copies "from", whose pointers are borrowed, into one allocation. */
cache_plan *cache_plan_copy(const cache_plan *from)
{
	size_t size = sizeof(*from) + from->binaries_len;
	cache_plan *p;
	char *cursor;

	for (int i = 0; i < PLAN_TEXTS; i++) {
		const char *text = *plan_text((cache_plan *)from, i);

		if (text)
			size += strlen(text) + 1;
	}
	p = sqlite3_malloc64(size);
	if (!p)
		return NULL;
	*p = *from;
	cursor = (char *)(p + 1);
	if (from->binaries) {
		memcpy(cursor, from->binaries, from->binaries_len);
		p->binaries = cursor;
		cursor += from->binaries_len;
	}
	for (int i = 0; i < PLAN_TEXTS; i++) {
		const char **text = plan_text(p, i);
		size_t n;

		if (!*text)
			continue;
		n = strlen(*text) + 1;
		memcpy(cursor, *text, n);
		*text = cursor;
		cursor += n;
	}
	return p;
}

/* The plan in the current row of "stmt" (the columns of fetch_sql) into
 * *out. A zero-length blob reads as NULL: it is pointed at "empty". */
static int plan_from_row(sqlite3_stmt *stmt, const char *graph,
			 const char *device, const char *codegen,
			 cache_plan **out, cache_error *err)
{
	static const char empty[1];
	bool has_binaries = sqlite3_column_type(stmt, 3) != SQLITE_NULL;
	bool has_launch = sqlite3_column_type(stmt, 4) != SQLITE_NULL;
	cache_plan row = {
		.graph = graph,
		.device = device,
		.codegen = codegen,
		.version = sqlite3_column_int(stmt, 0),
		.plan = (const char *)sqlite3_column_text(stmt, 1),
		.sources = (const char *)sqlite3_column_text(stmt, 2),
		.binaries = sqlite3_column_blob(stmt, 3),
		.binaries_len = (size_t)sqlite3_column_bytes(stmt, 3),
		.launch = (const char *)sqlite3_column_text(stmt, 4),
		.median_ms = cache_column_real(stmt, 5),
		.spread_ms = cache_column_real(stmt, 6),
		.found_by = (const char *)sqlite3_column_text(stmt, 7),
		.created_at = sqlite3_column_int64(stmt, 8),
	};

	if (has_binaries && !row.binaries)
		row.binaries = empty;
	if (row.plan && row.sources && row.found_by &&
	    (row.launch || !has_launch))
		*out = cache_plan_copy(&row);
	if (!*out) {
		cache_set_error(err, CACHE_ENOMEM, "cannot fetch a plan: out of "
				"memory");
		return CACHE_ENOMEM;
	}
	return 0;
}

/* The versions a fetch may serve, newest first: those not marked bad,
 * each with whether it still matches its checksum (column 9) and its row
 * (column 10). */
static const char
	fetch_sql[] = "SELECT p.version, p.plan, p.sources, p.binaries, p.launch, "
		      "p.median_ms, p.spread_ms, p.found_by, p.created_at, "
		      "p.checksum IS plan_checksum(p.plan, p.sources, p.launch), p.id "
		      "FROM plans p JOIN devices d ON d.id = p.device "
		      "WHERE p.graph = ?1 AND d.signature = ?2 AND p.codegen = ?3 "
		      "AND p.bad IS NULL AND p.version <= ?4 ORDER BY p.version DESC";

/* Marks the version in row "id" bad, saying "why"; only the owner can. */
void cache_sqlite_mark_bad(cache *c, int64_t id, const char *why)
{
	sqlite3_stmt *stmt = NULL;
	cache_error err = {0};
	int rc;

	rc = cache_begin(c, &err);
	if (rc)
		goto out;
	rc = cache_prepare(c->writer, "UPDATE plans SET bad = ?2 WHERE id = ?1",
			   &stmt, &err);
	if (rc == 0) {
		sqlite3_bind_int64(stmt, 1, id);
		cache_bind_text(stmt, 2, why);
		rc = cache_run(c->writer, stmt, "cannot mark a version bad", &err);
	}
	rc = cache_end(c, rc, &err);
out:
	if (rc)
		cache_log(&c->options, CACHE_LOG_ERR, "cache '%s': %s", c->path,
			  err.message);
}

/* Left for the owner (cache_mark_found_bad); beyond CACHE_FOUND_BAD_MAX
 * waiting, it is found again at a later fetch. */
void cache_leave_for_owner(cache *c, int64_t id)
{
	cache_found_bad *f = c->found_bad;

	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < f->n; i++)
		if (f->ids[i] == id)
			goto out;
	if (f->n < CACHE_FOUND_BAD_MAX) {
		f->ids[f->n] = id;
		f->found_at[f->n++] = cache_now(c);
	}
out:
	pthread_mutex_unlock(&f->lock);
}

void cache_checksum_failure(int64_t found_at, char *why, size_t size)
{
	snprintf(why, size, "fails its checksum (found at %lld): its plan, sources "
		 "or launch changed after it was stored", (long long)found_at);
}

void cache_version_failed(cache *c, const char *graph, const char *device,
			  const char *codegen, int version, int64_t id)
{
	bool owner = pthread_equal(pthread_self(), c->owner) &&
		     (c->writer || c->pg_writer);
	char why[160];

	cache_checksum_failure(cache_now(c), why, sizeof(why));
	cache_log(&c->options, CACHE_LOG_ERR, "graph '%s' version %d on '%s' "
		  "(codegen '%s') %s; it is %s", graph, version, device, codegen,
		  why, owner ? "marked bad and never served" :
		  "not served, and marked bad by the cache's writer");
	if (owner)
		c->engine->mark_bad(c, id, why);
	else
		cache_leave_for_owner(c, id);
}

bool cache_found_bad_waiting(__cache_keep cache *c)
{
	bool waiting;

	pthread_mutex_lock(&c->found_bad->lock);
	waiting = c->found_bad->n > 0;
	pthread_mutex_unlock(&c->found_bad->lock);
	return waiting;
}

int cache_mark_found_bad(__cache_keep cache *c, cache_error *err)
{
	cache_found_bad *f = c->found_bad;
	int64_t ids[CACHE_FOUND_BAD_MAX], found_at[CACHE_FOUND_BAD_MAX];
	char why[160];
	int rc = cache_check_owner(c, "mark versions bad", err), n;

	if (rc)
		return rc;
	pthread_mutex_lock(&f->lock);
	n = f->n;
	memcpy(ids, f->ids, sizeof(ids));
	memcpy(found_at, f->found_at, sizeof(found_at));
	f->n = 0;
	pthread_mutex_unlock(&f->lock);
	for (int i = 0; i < n; i++) {
		cache_checksum_failure(found_at[i], why, sizeof(why));
		c->engine->mark_bad(c, ids[i], why);
	}
	return n;
}

/* The message of a fetch that found nothing: "failed" is a version
 * skipped for its checksum (0: none), "newer" whether one below
 * "min_version" is there; "exact" a fetch of one version. */
void cache_fetch_missed(const char *graph, const char *device, const char *codegen,
			int min_version, bool exact, bool newer, int failed,
			cache_error *err)
{
	char why[96] = "";

	if (failed)
		snprintf(why, sizeof(why),
			 " (version %d failed its checksum "
			 "and is not served)",
			 failed);
	if (exact && !failed)
		snprintf(why, sizeof(why),
			 " (not in the cache: pruned, or "
			 "marked bad)");
	if (exact)
		cache_set_error(err, CACHE_NOT_FOUND,
				"no version %d of graph "
				"'%s' on '%s' with codegen '%s'%s",
				min_version, graph, device, codegen, why);
	else
		cache_set_error(err, CACHE_NOT_FOUND,
				"no plan for graph '%s' "
				"on '%s' with codegen '%s'%s%s",
				graph, device, codegen, newer ? " newer" : "", why);
}

/* The newest good version from "min_version" to "max_version". */
static int fetch_range(cache *c, const char *graph, const char *device,
		       const char *codegen, int min_version, int max_version,
		       cache_plan **out, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc, failed = 0;

	cache_read_end(c);
	rc = cache_check_key(graph, device, codegen, err);
	if (rc == 0)
		rc = cache_prepare(c->reader, fetch_sql, &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, graph);
	cache_bind_text(stmt, 2, device);
	cache_bind_text(stmt, 3, codegen);
	sqlite3_bind_int(stmt, 4, max_version);
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW &&
	       sqlite3_column_int(stmt, 0) >= min_version &&
	       !sqlite3_column_int(stmt, 9)) {
		cache_version_failed(c, graph, device, codegen,
				     sqlite3_column_int(stmt, 0),
				     sqlite3_column_int64(stmt, 10));
		failed = sqlite3_column_int(stmt, 0);
	}
	if (rc == SQLITE_ROW && sqlite3_column_int(stmt, 0) >= min_version) {
		rc = sqlite3_column_int(stmt, 0);
		if (out && plan_from_row(stmt, graph, device, codegen, out, err))
			rc = CACHE_ENOMEM;
	} else if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
		cache_fetch_missed(graph, device, codegen, min_version,
				   min_version == max_version, rc == SQLITE_ROW, failed,
				   err);
		rc = CACHE_NOT_FOUND;
	} else {
		rc = cache_db_error(c->reader, rc, err, "cannot fetch a plan");
	}
	sqlite3_finalize(stmt);
	return rc;
}

int cache_sqlite_fetch_best(__cache_keep cache *c, const char *graph,
			    const char *device, const char *codegen, int min_version,
			    __cache_give cache_plan **out, cache_error *err)
{
	return fetch_range(c, graph, device, codegen, min_version, INT_MAX, out, err);
}

int cache_sqlite_fetch_version(cache *c, const char *graph, const char *device,
			       const char *codegen, int version, cache_plan **out,
			       cache_error *err)
{
	return fetch_range(c, graph, device, codegen, version, version, out, err);
}

void cache_plan_free(__cache_take cache_plan *plan)
{
	sqlite3_free(plan);
}

static int find_quarantined(cache *c, const char *graph, const char *device,
			    const char *codegen, const char *plan,
			    cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->reader, "SELECT 1 FROM quarantine q JOIN devices d "
			   "ON d.id = q.device WHERE q.graph = ?1 AND "
			   "d.signature = ?2 AND q.codegen = ?3 AND q.plan = ?4",
			   &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, graph);
	cache_bind_text(stmt, 2, device);
	cache_bind_text(stmt, 3, codegen);
	cache_bind_text(stmt, 4, plan);
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW || rc == SQLITE_DONE)
		rc = rc == SQLITE_ROW;
	else
		rc = cache_db_error(c->reader, rc, err, "cannot read the "
				    "quarantine");
	sqlite3_finalize(stmt);
	return rc;
}

bool cache_sqlite_is_quarantined(__cache_keep cache *c, const char *graph,
			  const char *device, const char *codegen,
			  const char *plan_json, cache_error *err)
{
	char *plan = NULL;
	int rc;

	cache_set_error(err, 0, "%s", "");
	cache_read_end(c);
	rc = cache_check_key(graph, device, codegen, err);
	if (rc == 0)
		rc = cache_json_canonical(plan_json, "plan", false, &plan, err);
	if (rc == 0)
		rc = find_quarantined(c, graph, device, codegen, plan, err);
	cache_json_free(plan);
	return rc > 0;
}

/* The bytes of an entry's rows: lengths of texts as bytes (a CAST to
 * BLOB), not characters. */
#define ENTRY_BYTES_SQL                                                        \
	"(SELECT coalesce(sum(length(CAST(q.plan AS BLOB)) + "                \
	"length(CAST(q.sources AS BLOB)) + coalesce(length(q.binaries), 0) + " \
	"coalesce(length(CAST(q.launch AS BLOB)), 0) + "                      \
	"length(CAST(q.found_by AS BLOB))), 0) FROM plans q "                 \
	"WHERE q.graph = p.graph AND q.device = p.device AND "                \
	"q.codegen = p.codegen) + "                                           \
	"(SELECT coalesce(sum(length(CAST(t.plan AS BLOB)) + "                \
	"coalesce(length(CAST(t.detail AS BLOB)), 0)), 0) FROM trials t "     \
	"WHERE t.graph = p.graph AND t.device = p.device AND "                \
	"t.codegen = p.codegen) + length(CAST(g.canonical AS BLOB)) + "       \
	"coalesce(length(CAST(g.graph AS BLOB)), 0)"

static const char list_sql[] =
	"SELECT p.graph, g.name, d.signature, p.codegen, p.version, "
	"p.median_ms, p.created_at, " ENTRY_BYTES_SQL " "
	"FROM plans p JOIN graphs g ON g.key = p.graph "
	"JOIN devices d ON d.id = p.device "
	"WHERE p.version = (SELECT max(q.version) FROM plans q "
	" WHERE q.graph = p.graph AND q.device = p.device "
	" AND q.codegen = p.codegen AND q.bad IS NULL) "
	"ORDER BY p.graph, d.signature, p.codegen";

int cache_sqlite_list(__cache_keep cache *c,
	       int (*fn)(void *user, const cache_entry *entry), void *user,
	       cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	cache_entry entry;
	int rc, calls = 0;

	cache_read_end(c);
	rc = cache_prepare(c->reader, list_sql, &stmt, err);
	if (rc)
		return rc;
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		entry.graph = (const char *)sqlite3_column_text(stmt, 0);
		entry.name = (const char *)sqlite3_column_text(stmt, 1);
		entry.device = (const char *)sqlite3_column_text(stmt, 2);
		entry.codegen = (const char *)sqlite3_column_text(stmt, 3);
		entry.version = sqlite3_column_int(stmt, 4);
		entry.median_ms = cache_column_real(stmt, 5);
		entry.updated_at = sqlite3_column_int64(stmt, 6);
		entry.bytes = sqlite3_column_int64(stmt, 7);
		if (!entry.graph || !entry.device || !entry.codegen) {
			rc = SQLITE_NOMEM;
			break;
		}
		calls++;
		if (fn(user, &entry) != 0) {
			rc = SQLITE_DONE;
			break;
		}
	}
	if (rc == SQLITE_DONE)
		rc = calls;
	else
		rc = cache_db_error(c->reader, rc, err, "cannot list the cache");
	sqlite3_finalize(stmt);
	return rc;
}

/* NaN as null: json_real refuses it. */
static json_t *real_or_null(double value)
{
	return isnan(value) ? json_null() : json_real(value);
}

/* A stored JSON text as a value (as a string if it does not parse). */
static json_t *stored_json(const char *text)
{
	json_t *value = json_loads(text, JSON_DECODE_ANY, NULL);

	return value ? value : json_string(text);
}

static const char *column(sqlite3_stmt *stmt, int i)
{
	return (const char *)sqlite3_column_text(stmt, i);
}

/* Sets *out to the graph's own fields; CACHE_NOT_FOUND for no such key. */
static int show_graph(cache *c, const char *key, json_t **out,
		      cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->reader, "SELECT key, canonical, name, first_seen, "
			   "last_used FROM graphs WHERE key = ?1", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, key);
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		*out = json_pack("{s:s, s:s?, s:s?, s:I, s:I}", "graph", key,
				 "name", column(stmt, 2), "canonical",
				 column(stmt, 1), "first_seen",
				 (json_int_t)sqlite3_column_int64(stmt, 3),
				 "last_used",
				 (json_int_t)sqlite3_column_int64(stmt, 4));
		rc = *out ? 0 : CACHE_ENOMEM;
	} else if (rc == SQLITE_DONE) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc, "graph '%s' is not in the cache", key);
	} else {
		rc = cache_db_error(c->reader, rc, err, "cannot show a graph");
	}
	sqlite3_finalize(stmt);
	return rc;
}

static json_t *plan_row(sqlite3_stmt *stmt)
{
	return json_pack("{s:s?, s:s?, s:i, s:o, s:I, s:I, s:o, s:o, s:s?, s:I, s:s?}",
			 "device", column(stmt, 0), "codegen", column(stmt, 1),
			 "version", sqlite3_column_int(stmt, 2),
			 "plan", stored_json(column(stmt, 3)),
			 "kernels", (json_int_t)sqlite3_column_int64(stmt, 4),
			 "binary_bytes", (json_int_t)sqlite3_column_int64(stmt, 5),
			 "median_ms", real_or_null(cache_column_real(stmt, 6)),
			 "spread_ms", real_or_null(cache_column_real(stmt, 7)),
			 "found_by", column(stmt, 8),
			 "created_at", (json_int_t)sqlite3_column_int64(stmt, 9),
			 "bad", column(stmt, 10));
}

/* Appends every version of every plan of graph "key" to "plans", each
 * with why it is not served ("bad"): marked so, or failing its checksum
 * now (a fetch marks it). */
static int show_plans(cache *c, const char *key, json_t *plans,
		      cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->reader, "SELECT d.signature, p.codegen, "
			   "p.version, p.plan, json_array_length(p.sources), "
			   "coalesce(length(p.binaries), 0), p.median_ms, "
			   "p.spread_ms, p.found_by, p.created_at, coalesce(p.bad, "
			   "CASE WHEN p.checksum IS NOT plan_checksum(p.plan, "
			   "p.sources, p.launch) THEN 'fails its checksum' END) "
			   "FROM plans p "
			   "JOIN devices d ON d.id = p.device WHERE p.graph = ?1 "
			   "ORDER BY d.signature, p.codegen, p.version",
			   &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, key);
	return cache_append_rows(c, stmt, plan_row, plans, "cannot show the plans", err);
}

static bool is_group(json_t *group, const char *device, const char *codegen)
{
	const char *d = json_string_value(json_object_get(group, "device"));
	const char *g = json_string_value(json_object_get(group, "codegen"));

	return d && g && strcmp(d, device) == 0 && strcmp(g, codegen) == 0;
}

/* The entry of "trials" for (device, codegen): the last one, or a new one
 * with every outcome at 0 (rows come ordered by device and codegen). */
static json_t *trial_group(json_t *trials, const char *device,
			   const char *codegen)
{
	json_t *group = json_array_get(trials, json_array_size(trials) - 1);
	json_t *outcomes;

	if (group && is_group(group, device, codegen))
		return group;
	outcomes = json_object();
	for (int i = 0; outcomes && i < CACHE_TRIAL_OUTCOMES; i++)
		json_object_set_new(outcomes, cache_outcome_name(i),
				    json_integer(0));
	group = json_pack("{s:s, s:s, s:I, s:o}", "device", device, "codegen",
			  codegen, "total", (json_int_t)0, "outcomes", outcomes);
	if (json_array_append_new(trials, group) != 0)
		return NULL;
	return group;
}

/* Adds "count" trials of "outcome" to the group of the current row. */
static int count_trials(json_t *trials, sqlite3_stmt *stmt)
{
	const char *device = column(stmt, 0), *codegen = column(stmt, 1);
	const char *outcome = column(stmt, 2);
	json_int_t count = sqlite3_column_int64(stmt, 3);
	json_t *group, *total;

	if (!device || !codegen || !outcome)
		return CACHE_ENOMEM;
	group = trial_group(trials, device, codegen);
	total = json_object_get(group, "total");
	if (!total || json_object_set_new(json_object_get(group, "outcomes"),
					  outcome, json_integer(count)) != 0)
		return CACHE_ENOMEM;
	json_integer_set(total, json_integer_value(total) + count);
	return 0;
}

/* Appends the trial counts of graph "key" by device, codegen and outcome
 * to "trials". */
static int show_trials(cache *c, const char *key, json_t *trials,
		       cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->reader, "SELECT d.signature, t.codegen, t.outcome, "
			   "count(*) FROM trials t JOIN devices d ON d.id = "
			   "t.device WHERE t.graph = ?1 GROUP BY 1, 2, 3 "
			   "ORDER BY 1, 2, 3", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, key);
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
		if (count_trials(trials, stmt) != 0)
			break;
	if (rc == SQLITE_DONE)
		rc = 0;
	else if (rc == SQLITE_ROW)
		rc = CACHE_ENOMEM;
	else
		rc = cache_db_error(c->reader, rc, err, "cannot show the trials");
	sqlite3_finalize(stmt);
	return rc;
}

static int count_quarantined(cache *c, const char *key, json_int_t *count,
			     cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->reader, "SELECT count(*) FROM quarantine WHERE "
			   "graph = ?1", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, key);
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		*count = sqlite3_column_int64(stmt, 0);
		rc = 0;
	} else {
		rc = cache_db_error(c->reader, rc, err, "cannot show the "
				    "quarantine");
	}
	sqlite3_finalize(stmt);
	return rc;
}

/* The body of cache_show, inside its read transaction. */
static int show(cache *c, const char *key, json_t **out, cache_error *err)
{
	json_t *plans = json_array(), *trials = json_array();
	json_int_t quarantined = 0;
	int rc;

	rc = show_graph(c, key, out, err);
	if (rc == 0 && (!plans || !trials))
		rc = CACHE_ENOMEM;
	if (rc == 0)
		rc = show_plans(c, key, plans, err);
	if (rc == 0)
		rc = show_trials(c, key, trials, err);
	if (rc == 0)
		rc = count_quarantined(c, key, &quarantined, err);
	if (rc == 0 && (json_object_set(*out, "plans", plans) != 0 ||
			json_object_set(*out, "trials", trials) != 0 ||
			json_object_set_new(*out, "quarantined",
					    json_integer(quarantined)) != 0))
		rc = CACHE_ENOMEM;
	json_decref(plans);
	json_decref(trials);
	return rc;
}

int cache_sqlite_show(__cache_keep cache *c, const char *key,
	       __cache_give json_t **out, cache_error *err)
{
	int rc;

	cache_read_end(c);
	rc = cache_check_text(key, "graph key", err);
	if (rc == 0)
		rc = cache_read_begin(c, "cannot show a graph", err);
	if (rc)
		return rc;
	rc = show(c, key, out, err);
	cache_read_end(c);
	if (rc == CACHE_ENOMEM)
		cache_set_error(err, rc, "cannot show graph '%s': out of memory",
				key);
	if (rc) {
		json_decref(*out);
		*out = NULL;
	}
	return rc;
}

/* One trial of the current row of trials_sql as {plan, outcome,
 * median_ms}. */
static json_t *trial_row(sqlite3_stmt *stmt)
{
	const char *plan = column(stmt, 0), *outcome = column(stmt, 1);

	if (!plan || !outcome)
		return NULL;
	return json_pack("{s:o, s:s, s:o}", "plan", stored_json(plan),
			 "outcome", outcome,
			 "median_ms", real_or_null(cache_column_real(stmt, 2)));
}

/* A device never seen matches no row: the join finds no signature. */
static const char trials_sql[] =
	"SELECT t.plan, t.outcome, t.median_ms FROM trials t "
	"JOIN devices d ON d.id = t.device "
	"WHERE t.graph = ?1 AND d.signature = ?2 AND t.codegen = ?3 "
	"ORDER BY t.id DESC LIMIT ?4";

/* Appends the trials of (graph, device, codegen), newest first, at most
 * "limit" of them (0: all), to "trials". */
static int list_trials(cache *c, const char *graph, const char *device,
		       const char *codegen, int64_t limit, json_t *trials,
		       cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->reader, trials_sql, &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, graph);
	cache_bind_text(stmt, 2, device);
	cache_bind_text(stmt, 3, codegen);
	sqlite3_bind_int64(stmt, 4, limit > 0 ? limit : -1);
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
		if (json_array_append_new(trials, trial_row(stmt)) != 0)
			break;
	if (rc == SQLITE_DONE)
		rc = 0;
	else if (rc == SQLITE_ROW)
		rc = CACHE_ENOMEM;
	else
		rc = cache_db_error(c->reader, rc, err, "cannot read the trials");
	sqlite3_finalize(stmt);
	return rc;
}

int cache_sqlite_trials(__cache_keep cache *c, const char *graph, const char *device,
		 const char *codegen, int64_t limit, __cache_give json_t **out,
		 cache_error *err)
{
	int rc;

	cache_read_end(c);
	rc = cache_check_key(graph, device, codegen, err);
	if (rc == 0 && !(*out = json_array()))
		rc = CACHE_ENOMEM;
	if (rc == 0)
		rc = cache_read_begin(c, "cannot read the trials", err);
	if (rc == 0) {
		rc = list_trials(c, graph, device, codegen, limit, *out, err);
		cache_read_end(c);
	}
	if (rc == CACHE_ENOMEM)
		cache_set_error(err, rc, "cannot read the trials of graph '%s': "
				"out of memory", graph);
	if (rc) {
		json_decref(*out);
		*out = NULL;
	}
	return rc;
}

static int64_t file_bytes(const char *path)
{
	struct stat st;

	return path && stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

static const char stat_sql[] =
	"SELECT (SELECT page_size FROM pragma_page_size), "
	"(SELECT page_count FROM pragma_page_count), "
	"(SELECT freelist_count FROM pragma_freelist_count), "
	"(SELECT count(*) FROM graphs), (SELECT count(*) FROM devices), "
	"(SELECT count(*) FROM plans), (SELECT count(*) FROM trials), "
	"(SELECT count(*) FROM quarantine)";

int cache_sqlite_stat(__cache_keep cache *c, cache_stats *out, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int64_t *fields[] = {
		&out->page_size, &out->page_count, &out->freelist_count,
		&out->graphs, &out->devices, &out->plans, &out->trials,
		&out->quarantine,
	};
	int rc;

	memset(out, 0, sizeof(*out));
	cache_read_end(c);
	rc = cache_prepare(c->reader, stat_sql, &stmt, err);
	if (rc)
		return rc;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		for (int i = 0; i < 8; i++)
			*fields[i] = sqlite3_column_int64(stmt, i);
		rc = 0;
	} else {
		rc = cache_db_error(c->reader, rc, err, "cannot read the "
				    "cache's numbers");
	}
	sqlite3_finalize(stmt);
	out->file_bytes = file_bytes(c->path);
	out->wal_bytes = file_bytes(sqlite3_filename_wal(
		sqlite3_db_filename(c->reader, "main")));
	return rc;
}

/* Runs "sql" in a read transaction with ?1 to ?3 bound to "a", "b", "c3"
 * (NULL binds NULL): *out gets the array of its rows, or NULL. */
static int read_rows(cache *c, const char *sql, const char *a, const char *b,
		     const char *c3, json_t *(*row)(sqlite3_stmt *), json_t **out,
		     const char *what, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	cache_read_end(c);
	*out = json_array();
	rc = *out ? cache_read_begin(c, what, err) : CACHE_ENOMEM;
	if (rc == 0) {
		rc = cache_prepare(c->reader, sql, &stmt, err);
		if (rc == 0) {
			cache_bind_text(stmt, 1, a);
			cache_bind_text(stmt, 2, b);
			cache_bind_text(stmt, 3, c3);
			rc = cache_append_rows(c, stmt, row, *out, what, err);
		}
		cache_read_end(c);
	}
	if (rc) {
		json_decref(*out);
		*out = NULL;
	}
	return rc;
}

static json_t *quarantined_plan_row(sqlite3_stmt *stmt)
{
	return column(stmt, 0) ? stored_json(column(stmt, 0)) : NULL;
}

int cache_sqlite_quarantined_plans(__cache_keep cache *c, const char *graph,
			    const char *device, const char *codegen,
			    __cache_give json_t **out, cache_error *err)
{
	int rc = cache_check_key(graph, device, codegen, err);

	return rc ? rc : read_rows(c, "SELECT q.plan FROM quarantine q JOIN devices d "
				   "ON d.id = q.device WHERE q.graph = ?1 AND "
				   "d.signature = ?2 AND q.codegen = ?3 ORDER BY q.id",
				   graph, device, codegen, quarantined_plan_row, out,
				   "cannot read the quarantine", err);
}

static json_t *int_or_null(sqlite3_stmt *stmt, int i)
{
	return sqlite3_column_type(stmt, i) == SQLITE_NULL ? json_null() :
	       json_integer(sqlite3_column_int64(stmt, i));
}

static json_t *text_or_null(sqlite3_stmt *stmt, int i)
{
	return column(stmt, i) ? json_string(column(stmt, i)) : json_null();
}

/* One row of entries_sql as JSON. */
static json_t *entry_row(sqlite3_stmt *stmt)
{
	if (!column(stmt, 1) || !column(stmt, 5))
		return NULL;
	return json_pack("{s:I, s:s, s:o, s:s, s:s, s:o, s:s, s:o, s:o, s:o, s:o, s:I, "
			 "s:o, s:o, s:o}",
			 "id", (json_int_t)sqlite3_column_int64(stmt, 0),
			 "key", column(stmt, 1), "name", text_or_null(stmt, 2),
			 "device", column(stmt, 3), "codegen", column(stmt, 4),
			 "plan", stored_json(column(stmt, 5)),
			 "reason", column(stmt, 6), "cause", text_or_null(stmt, 7),
			 "signal", int_or_null(stmt, 8),
			 "time_limit_s", real_or_null(cache_column_real(stmt, 9)),
			 "seed", int_or_null(stmt, 10),
			 "created_at", (json_int_t)sqlite3_column_int64(stmt, 11),
			 "graph", text_or_null(stmt, 12),
			 "sources", column(stmt, 13) ? stored_json(column(stmt, 13)) :
						      json_null(),
			 "worker_log", text_or_null(stmt, 14));
}

int cache_sqlite_quarantine_entries(__cache_keep cache *c, const char *key,
			     __cache_give json_t **out, cache_error *err)
{
	return read_rows(c, "SELECT q.id, q.graph, g.name, d.signature, q.codegen, "
			 "q.plan, q.reason, q.cause, q.signal, q.time_limit_s, q.seed, "
			 "q.created_at, q.graph_json, q.sources, q.worker_log "
			 "FROM quarantine q JOIN graphs g ON g.key = q.graph "
			 "JOIN devices d ON d.id = q.device "
			 "WHERE ?1 IS NULL OR q.graph = ?1 ORDER BY q.id",
			 key, NULL, NULL, entry_row, out,
			 "cannot list the quarantine", err);
}
