/*
 * transfer.c: entries moved between caches, so that a fleet can ship what
 * one host tuned (docs/cache.md, "Export and import").
 *
 * An entry is one graph with every version of its plans, on every device
 * and codegen, and the graph.json those plans number their ops by; the
 * caller (the daemon) checks an entry against its graph before importing
 * it. Versions keep their device signature, codegen, number and times: a
 * version of another device is stored under that device and never served
 * to this one. Trials and quarantine stay behind (they are this host's
 * history).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cache_int.h"

/* Base64 (RFC 4648), for binaries in JSON. */

static const char b64_digits[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* "len" bytes as base64 text (sqlite3_free it), or NULL: out of memory. */
static char *b64_encode(const unsigned char *bytes, size_t len)
{
	char *text = sqlite3_malloc64((len + 2) / 3 * 4 + 1), *out = text;

	for (size_t i = 0; text && i < len; i += 3) {
		uint32_t v = (uint32_t)bytes[i] << 16;

		v |= i + 1 < len ? (uint32_t)bytes[i + 1] << 8 : 0;
		v |= i + 2 < len ? bytes[i + 2] : 0;
		*out++ = b64_digits[v >> 18 & 63];
		*out++ = b64_digits[v >> 12 & 63];
		*out++ = i + 1 < len ? b64_digits[v >> 6 & 63] : '=';
		*out++ = i + 2 < len ? b64_digits[v & 63] : '=';
	}
	if (text)
		*out = 0;
	return text;
}

/* The base64 "text" as bytes (sqlite3_free them) into *len; NULL with
 * *len 0 when it is not base64, or out of memory (*len 1). */
static unsigned char *b64_decode(const char *text, size_t *len)
{
	size_t n = strlen(text), out = 0;
	unsigned char *bytes = sqlite3_malloc64(n / 4 * 3 + 3);
	uint32_t bits = 0;
	int nbits = 0;

	*len = bytes ? 0 : 1;
	for (size_t i = 0; bytes && i < n && text[i] != '='; i++) {
		const char *digit = strchr(b64_digits, text[i]);

		if (!text[i] || !digit) {
			sqlite3_free(bytes);
			return NULL;
		}
		bits = (bits << 6 | (uint32_t)(digit - b64_digits)) & 0xffffff;
		if ((nbits += 6) >= 8) {
			nbits -= 8;
			bytes[out++] = (unsigned char)(bits >> nbits);
		}
	}
	if (bytes)
		*len = out;
	return bytes;
}

int cache_sqlite_keep_graph_json(__cache_keep cache *c, const char *key,
			  const char *graph_json, cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_check_text(key, "graph key", err);
	if (rc == 0)
		rc = cache_check_text(graph_json, "graph.json", err);
	if (rc == 0)
		rc = cache_begin(c, err);
	if (rc)
		return rc;
	rc = cache_prepare(c->writer, "UPDATE graphs SET graph = coalesce(graph, "
			   "?2) WHERE key = ?1", &stmt, err);
	if (rc == 0) {
		cache_bind_text(stmt, 1, key);
		cache_bind_text(stmt, 2, graph_json);
		rc = cache_run(c->writer, stmt, "cannot keep a graph", err);
	}
	if (rc == 0 && sqlite3_changes(c->writer) == 0) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc, "graph '%s' is not in the cache (put "
				"it first)", key);
	}
	return cache_end(c, rc, err);
}

/* Export. */

static const char *text_at(sqlite3_stmt *stmt, int i)
{
	return (const char *)sqlite3_column_text(stmt, i);
}

/* A stored JSON text as a value; NULL when it does not parse. */
static json_t *parsed(const char *text)
{
	return text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
}

static json_t *real_or_null(double value)
{
	return isnan(value) ? json_null() : json_real(value);
}

/* The binaries of the current row, base64 or null. */
static json_t *binaries_at(sqlite3_stmt *stmt, int i)
{
	char *text;
	json_t *value;

	if (sqlite3_column_type(stmt, i) == SQLITE_NULL)
		return json_null();
	text = b64_encode(sqlite3_column_blob(stmt, i),
			  (size_t)sqlite3_column_bytes(stmt, i));
	value = text ? json_string(text) : NULL;
	sqlite3_free(text);
	return value;
}

/* A version marked bad, or failing its checksum, is not exported. */
static const char versions_sql[] =
	"SELECT d.signature, p.codegen, p.version, p.plan, p.sources, p.launch, "
	"p.binaries, p.median_ms, p.spread_ms, p.found_by, p.created_at "
	"FROM plans p JOIN devices d ON d.id = p.device WHERE p.graph = ?1 "
	"AND p.bad IS NULL AND p.checksum IS plan_checksum(p.plan, p.sources, "
	"p.launch) ORDER BY d.signature, p.codegen, p.version";

static json_t *version_row(sqlite3_stmt *stmt)
{
	return json_pack("{s:s?, s:s?, s:i, s:o?, s:o?, s:o*, s:o?, s:o, s:o, "
			 "s:s?, s:I}", "device", text_at(stmt, 0),
			 "codegen", text_at(stmt, 1),
			 "version", sqlite3_column_int(stmt, 2),
			 "plan", parsed(text_at(stmt, 3)),
			 "sources", parsed(text_at(stmt, 4)),
			 "launch", parsed(text_at(stmt, 5)),
			 "binaries", binaries_at(stmt, 6),
			 "median_ms", real_or_null(cache_column_real(stmt, 7)),
			 "spread_ms", real_or_null(cache_column_real(stmt, 8)),
			 "found_by", text_at(stmt, 9),
			 "created_at", (json_int_t)sqlite3_column_int64(stmt, 10));
}

static int export_versions(cache *c, const char *key, json_t *versions,
			   cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->reader, versions_sql, &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, key);
	return cache_append_rows(c, stmt, version_row, versions, "cannot export the plans",
				 err);
}

/* Sets *out to {"key", "name", "graph"}. */
static int export_graph(cache *c, const char *key, json_t **out,
			cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->reader, "SELECT name, graph FROM graphs WHERE "
			   "key = ?1", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, key);
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW && sqlite3_column_type(stmt, 1) == SQLITE_NULL) {
		rc = CACHE_EINVAL;
		cache_set_error(err, rc, "graph '%s' has no graph.json kept (it "
				"was cached before the cache kept them): submit "
				"it again to export it", key);
	} else if (rc == SQLITE_ROW) {
		*out = json_pack("{s:s, s:s?, s:o?}", "key", key, "name",
				 text_at(stmt, 0), "graph", parsed(text_at(stmt, 1)));
		rc = *out ? 0 : CACHE_ENOMEM;
	} else if (rc == SQLITE_DONE) {
		rc = CACHE_NOT_FOUND;
		cache_set_error(err, rc, "graph '%s' is not in the cache", key);
	} else {
		rc = cache_db_error(c->reader, rc, err, "cannot export a graph");
	}
	sqlite3_finalize(stmt);
	return rc;
}

int cache_sqlite_export_graph(__cache_keep cache *c, const char *key,
		       __cache_give json_t **out, cache_error *err)
{
	json_t *versions = json_array();
	int rc;

	*out = NULL;
	rc = cache_check_text(key, "graph key", err);
	if (rc == 0)
		rc = cache_read_begin(c, "cannot export a graph", err);
	if (rc == 0) {
		rc = export_graph(c, key, out, err);
		if (rc == 0)
			rc = versions ? export_versions(c, key, versions, err) :
			     CACHE_ENOMEM;
		cache_read_end(c);
	}
	if (rc == 0 && json_object_set(*out, "versions", versions) != 0)
		rc = CACHE_ENOMEM;
	if (rc == CACHE_ENOMEM)
		cache_set_error(err, rc, "cannot export graph '%s': out of "
				"memory", key);
	json_decref(versions);
	if (rc) {
		json_decref(*out);
		*out = NULL;
	}
	return rc;
}

/* Import: the steps are the same on both engines (cache_import_entry),
 * each engine's statements behind a cache_import_store; SQLite's are
 * here, PostgreSQL's in pg_transfer.c. */

/* The fields of one version of an entry, borrowed from its JSON. */
typedef struct entry_version {
	const char *device, *codegen, *found_by;
	json_int_t version, created_at;
	json_t *plan, *sources, *launch;
	const char *binaries; /* base64, or NULL */
	double median_ms, spread_ms;
} entry_version;

static double number_or_nan(json_t *value)
{
	return json_is_number(value) ? json_number_value(value) : NAN;
}

/* Reads versions[i] of the entry of "key"; CACHE_EINVAL naming the field
 * that is missing or of the wrong type. */
static int read_version(json_t *v, const char *key, size_t i,
			entry_version *out, cache_error *err)
{
	json_t *binaries = json_object_get(v, "binaries");
	const char *bad = NULL;

	*out = (entry_version){
		.device = json_string_value(json_object_get(v, "device")),
		.codegen = json_string_value(json_object_get(v, "codegen")),
		.found_by = json_string_value(json_object_get(v, "found_by")),
		.version = json_integer_value(json_object_get(v, "version")),
		.created_at = json_integer_value(json_object_get(v, "created_at")),
		.plan = json_object_get(v, "plan"),
		.sources = json_object_get(v, "sources"),
		.launch = json_object_get(v, "launch"),
		.binaries = json_string_value(binaries),
		.median_ms = number_or_nan(json_object_get(v, "median_ms")),
		.spread_ms = number_or_nan(json_object_get(v, "spread_ms")),
	};
	if (!out->device || !*out->device)
		bad = "device";
	else if (!out->codegen || !*out->codegen)
		bad = "codegen";
	else if (out->version < 1 || out->version > INT_MAX)
		bad = "version";
	else if (!out->plan)
		bad = "plan";
	else if (!json_is_array(out->sources))
		bad = "sources";
	else if (binaries && !json_is_null(binaries) && !out->binaries)
		bad = "binaries";
	else if (!out->found_by || !*out->found_by)
		bad = "found_by";
	if (!bad)
		return 0;
	cache_set_error(err, CACHE_EINVAL, "graph '%s': versions[%zu]: %s is "
			"missing or not what it should be", key, i, bad);
	return CACHE_EINVAL;
}

/* "value" as canonical JSON text (cache_json_free it); "sources" checks
 * it as util.c does. NULL "value" gives NULL. */
static int canonical_of(json_t *value, const char *what, bool sources,
			char **out, cache_error *err)
{
	char *text;
	int rc;

	*out = NULL;
	if (!value || json_is_null(value))
		return 0;
	text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!text) {
		cache_set_error(err, CACHE_ENOMEM, "%s: out of memory", what);
		return CACHE_ENOMEM;
	}
	rc = cache_json_canonical(text, what, sources, out, err);
	cache_json_free(text);
	return rc;
}

static int sqlite_put_graph(cache *c, const char *key, const char *canonical,
			    const char *name, const char *graph, cache_error *err)
{
	return cache_insert_graph(c, key, canonical, name, graph, true, err);
}

/* The canonical texts and bytes of a version, freed together. */
typedef struct version_texts {
	char *plan, *sources, *launch;
	unsigned char *binaries;
	size_t binaries_len;
} version_texts;

static void version_texts_release(version_texts *t)
{
	cache_json_free(t->plan);
	cache_json_free(t->sources);
	cache_json_free(t->launch);
	sqlite3_free(t->binaries);
}

static int version_texts_of(const entry_version *v, const char *key,
			    version_texts *t, cache_error *err)
{
	int rc;

	rc = canonical_of(v->plan, "plan", false, &t->plan, err);
	if (rc == 0)
		rc = canonical_of(v->sources, "sources", true, &t->sources, err);
	if (rc == 0)
		rc = canonical_of(v->launch, "launch", false, &t->launch, err);
	if (rc == 0 && v->binaries &&
	    !(t->binaries = b64_decode(v->binaries, &t->binaries_len))) {
		rc = t->binaries_len ? CACHE_ENOMEM : CACHE_EINVAL;
		cache_set_error(err, rc, "graph '%s': version %lld on '%s': %s",
				key, (long long)v->version, v->device,
				rc == CACHE_ENOMEM ? "out of memory" :
				"binaries are not base64");
	}
	return rc;
}

static int sqlite_insert_version(cache *c, const char *signature,
				 const cache_version_row *row, cache_error *err)
{
	(void)signature;
	return cache_insert_version(c, row, "cannot import a version", err);
}

/* Version "v" of the entry, under "version" (the file's number, or the
 * cache's next), "found_by" and "created_at". */
static int insert_version(cache *c, const cache_import_store *store, const char *key,
			  int64_t device, const entry_version *v, cache_error *err)
{
	version_texts t = {0};
	int rc;

	rc = version_texts_of(v, key, &t, err);
	if (rc == 0)
		rc = store->insert_version(c, v->device,
					   &(cache_version_row){
						   .graph = key,
						   .device = device,
						   .codegen = v->codegen,
						   .version = (int)v->version,
						   .plan = t.plan,
						   .sources = t.sources,
						   .launch = t.launch,
						   .binaries = t.binaries,
						   .binaries_len = t.binaries_len,
						   .median_ms = v->median_ms,
						   .spread_ms = v->spread_ms,
						   .found_by = v->found_by,
						   .created_at = v->created_at,
					   },
					   err);
	version_texts_release(&t);
	return rc;
}

/* Whether every version of the group "group" (device and codegen) is
 * imported: decided at its first version, by whether the cache has none
 * of it. "decided" maps groups to true or false. */
static int group_imports(cache *c, const cache_import_store *store, const char *key,
			 int64_t device, const entry_version *v, const char *group,
			 json_t *decided, bool *imports, cache_error *err)
{
	json_t *known = json_object_get(decided, group);
	double median_ms;
	int newest = 0, rc;

	if (known) {
		*imports = json_is_true(known);
		return 0;
	}
	rc = store->newest_version(c, key, device, v->codegen, &newest, &median_ms,
				   err);
	*imports = newest == 0;
	if (rc == 0 && json_object_set_new(decided, group, json_boolean(*imports)))
		rc = CACHE_ENOMEM;
	return rc;
}

static int sqlite_newest_version(cache *c, const char *key, int64_t device,
				 const char *codegen, int *version, double *median_ms,
				 cache_error *err)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = cache_prepare(c->writer, "SELECT version, median_ms FROM plans WHERE "
			   "graph = ?1 AND device = ?2 AND codegen = ?3 ORDER BY "
			   "version DESC LIMIT 1", &stmt, err);
	if (rc)
		return rc;
	cache_bind_text(stmt, 1, key);
	sqlite3_bind_int64(stmt, 2, device);
	cache_bind_text(stmt, 3, codegen);
	rc = sqlite3_step(stmt);
	*version = rc == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : 0;
	*median_ms = rc == SQLITE_ROW ? cache_column_real(stmt, 1) : NAN;
	rc = rc == SQLITE_ROW || rc == SQLITE_DONE ?
		     0 :
		     cache_db_error(c->writer, rc, err, "cannot read a version");
	sqlite3_finalize(stmt);
	return rc;
}

/* For a group the cache has: the file's newest version "v" becomes the
 * cache's next version when it is faster than the cache's newest (times
 * of one device signature compare); otherwise the group is kept as it
 * is, with the reason in "kept". */
static int import_if_faster(cache *c, const cache_import_store *store, const char *key,
			    int64_t device, entry_version v, json_t *kept,
			    int *imported, cache_error *err)
{
	char reason[160], *found_by;
	double local_ms;
	int local, rc;

	rc = store->newest_version(c, key, device, v.codegen, &local, &local_ms, err);
	if (rc)
		return rc;
	if (!(v.median_ms < local_ms) && !(isnan(local_ms) && isfinite(v.median_ms))) {
		snprintf(reason, sizeof(reason), "the cache's version %d is as fast "
			 "(%.4g ms; the file's version %lld: %.4g ms)", local, local_ms,
			 (long long)v.version, v.median_ms);
		return json_array_append_new(kept, json_pack("{s:s, s:s, s:s}", "device",
					     v.device, "codegen", v.codegen, "reason",
					     reason)) ? CACHE_ENOMEM : 0;
	}
	if (!(found_by = sqlite3_mprintf("imported: %s", v.found_by)))
		return CACHE_ENOMEM;
	v.found_by = found_by;
	v.version = local + 1;
	v.created_at = cache_now(c);
	rc = insert_version(c, store, key, device, &v, err);
	*imported += rc == 0;
	sqlite3_free(found_by);
	return rc;
}

/* Remembers "item", version "v" of a group the cache has, when it is the
 * group's newest in the file so far. */
static int note_newest(json_t *newest, const char *group, json_t *item,
		       const entry_version *v)
{
	json_t *seen = json_object_get(newest, group);

	if (seen && json_integer_value(json_object_get(seen, "version")) >= v->version)
		return 0;
	return json_object_set(newest, group, item) ? CACHE_ENOMEM : 0;
}

/* Imports the versions of groups the cache lacks as they are, and notes
 * the newest of the others in "newest". */
static int import_new_groups(cache *c, const cache_import_store *store, const char *key,
			     json_t *versions, json_t *newest, int *imported,
			     cache_error *err)
{
	json_t *decided = json_object(), *item;
	char *group = NULL;
	int64_t device;
	entry_version v;
	bool imports;
	size_t i;
	int rc = decided ? 0 : CACHE_ENOMEM;

	json_array_foreach(versions, i, item) {
		if (rc == 0)
			rc = read_version(item, key, i, &v, err);
		if (rc == 0)
			rc = store->device_id(c, v.device, cache_now(c), &device, err);
		if (rc == 0 && !(group = sqlite3_mprintf("%s\n%s", v.device, v.codegen)))
			rc = CACHE_ENOMEM;
		if (rc == 0)
			rc = group_imports(c, store, key, device, &v, group, decided,
					   &imports, err);
		if (rc == 0 && imports) {
			rc = insert_version(c, store, key, device, &v, err);
			*imported += rc == 0;
		} else if (rc == 0) {
			rc = note_newest(newest, group, item, &v);
		}
		sqlite3_free(group);
		group = NULL;
		if (rc)
			break;
	}
	json_decref(decided);
	return rc;
}

/* The versions of an entry, inside the import's transaction. */
static int import_versions(cache *c, const cache_import_store *store, const char *key,
			   json_t *versions, json_t *kept, int *imported,
			   cache_error *err)
{
	json_t *newest = json_object(), *item;
	const char *group;
	int64_t device;
	entry_version v;
	int rc = newest ? 0 : CACHE_ENOMEM;

	if (rc == 0)
		rc = import_new_groups(c, store, key, versions, newest, imported, err);
	json_object_foreach(newest, group, item) {
		if (rc == 0)
			rc = read_version(item, key, 0, &v, err);
		if (rc == 0)
			rc = store->device_id(c, v.device, cache_now(c), &device, err);
		if (rc == 0)
			rc = import_if_faster(c, store, key, device, v, kept, imported,
					      err);
	}
	json_decref(newest);
	return rc;
}

/* Checks the entry's own fields. Its graph.json as text: *graph, either
 * borrowed from the entry or *dumped (cache_json_free it). */
static int read_entry(json_t *entry, const char **key, const char **graph,
		      char **dumped, cache_error *err)
{
	json_t *g = json_object_get(entry, "graph");

	*key = json_string_value(json_object_get(entry, "key"));
	*graph = json_string_value(g);
	*dumped = NULL;
	if (!*key || !**key || !json_is_array(json_object_get(entry, "versions")) ||
	    !(json_is_object(g) || json_is_string(g))) {
		cache_set_error(err, CACHE_EINVAL, "cannot import graph '%s': %s",
				*key ? *key : "?", !*key || !**key ? "no key" :
				!g ? "no graph" : "no versions, or a graph that "
				"is neither an object nor text");
		return CACHE_EINVAL;
	}
	if (*graph)
		return 0;
	*graph = *dumped = json_dumps(g, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!*dumped) {
		cache_set_error(err, CACHE_ENOMEM, "cannot import graph '%s': "
				"out of memory", *key);
		return CACHE_ENOMEM;
	}
	return 0;
}

int cache_import_entry(cache *c, const cache_import_store *store, json_t *entry,
		       const char *canonical, json_t **out, cache_error *err)
{
	json_t *kept = json_array();
	const char *key = NULL, *graph = NULL;
	char *dumped = NULL;
	int imported = 0, rc;

	*out = NULL;
	rc = cache_check_owner(c, "import a graph", err);
	if (rc == 0)
		rc = cache_check_text(canonical, "canonical text", err);
	if (rc == 0)
		rc = kept ? read_entry(entry, &key, &graph, &dumped, err) :
		     CACHE_ENOMEM;
	if (rc == 0)
		rc = store->begin(c, err);
	if (rc == 0) {
		rc = store->put_graph(c, key, canonical,
				      json_string_value(json_object_get(entry, "name")),
				      graph, err);
		if (rc == 0)
			rc = import_versions(c, store, key,
					     json_object_get(entry, "versions"), kept,
					     &imported, err);
		rc = store->end(c, rc, err);
	}
	if (rc == 0 && !(*out = json_pack("{s:i, s:O}", "versions", imported,
					  "kept", kept)))
		rc = CACHE_ENOMEM;
	json_decref(kept);
	cache_json_free(dumped);
	return rc;
}

static const cache_import_store sqlite_store = {
	.begin = cache_begin,
	.end = cache_end,
	.device_id = cache_device_id,
	.put_graph = sqlite_put_graph,
	.newest_version = sqlite_newest_version,
	.insert_version = sqlite_insert_version,
};

int cache_sqlite_import_graph(__cache_keep cache *c, __cache_keep json_t *entry,
			      const char *canonical, __cache_give json_t **out,
			      cache_error *err)
{
	return cache_import_entry(c, &sqlite_store, entry, canonical, out, err);
}
