/*
 * transfer.c: export files, made from a cache and checked and loaded into
 * one (transfer.h), so that a fleet ships what one host tuned the way
 * TensorRT timing caches are shipped: one JSON file of entries, each a
 * key's graph.json and every version of its plans on every device
 * (cache/transfer.c). The daemon serves them as cache.export and
 * cache.import; tunectl uses them on a cache file no daemon holds.
 *
 * An import trusts nothing in the file: each entry's key is computed
 * again from its graph.json, and each version's plan is read against that
 * graph (kgen_plan_from_json), with one source per kernel. An entry that
 * fails is refused whole, naming its key and why; the others go in.
 * Versions of another device signature or codegen are stored under them
 * and never served here (a fetch names this daemon's device).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kgen.h"
#include "proto.h"
#include "scheduler.h"
#include "transfer.h"

#define EXPORT_FORMAT "tuned-cache-export"
#define EXPORT_FORMAT_VERSION 1

/* The keys with versions, for an export of every key (cache_list may not
 * be read through inside its callback). */
static int add_key(void *user, const cache_entry *e)
{
	json_t *keys = user;
	const char *last = json_string_value(json_array_get(keys, json_array_size(keys) - 1));

	if (!last || strcmp(last, e->graph))
		json_array_append_new(keys, json_string(e->graph));
	return 0;
}

static json_t *every_key(cache *c, cache_error *err)
{
	json_t *keys = json_array();

	if (cache_list(c, add_key, keys, err) < 0) {
		json_decref(keys);
		return NULL;
	}
	return keys;
}

/* Now as RFC 3339 in UTC. */
static json_t *now_text(void)
{
	time_t t = time(NULL);
	struct tm tm;
	char text[32];

	strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	return json_string(text);
}

int tuned_export(cache *c, const char *server, const char *device, json_t *keys,
		 json_t **out, char *why, size_t size)
{
	cache_error err = {0};
	json_t *all = keys ? NULL : every_key(c, &err), *entries = json_array(), *key;
	int rc = keys || all ? 0 : CACHE_ESQLITE;
	size_t i;

	json_array_foreach(keys ? keys : all, i, key) {
		json_t *entry = NULL;

		rc = cache_export_graph(c, json_string_value(key), &entry, &err);
		if (rc < 0)
			break;
		json_array_append_new(entries, entry);
	}
	json_decref(all);
	if (rc < 0) {
		snprintf(why, size, "%s", err.message);
		json_decref(entries);
		return rc == CACHE_NOT_FOUND ? PROTO_ENOT_FOUND : rc == CACHE_EINVAL ?
		       PROTO_EBAD_REQUEST : PROTO_EINTERNAL;
	}
	*out = json_pack("{s:s, s:i, s:s, s:s?, s:o, s:o}", "format", EXPORT_FORMAT,
			 "format_version", EXPORT_FORMAT_VERSION, "server", server,
			 "device", device, "exported_at", now_text(), "entries", entries);
	return 0;
}

/* Checks version "i" of an entry against "graph": its plan reads, with
 * one source per kernel. */
static bool check_version(const sched_graph *graph, json_t *v, size_t i, char *why,
			  size_t size)
{
	const char *device = json_string_value(json_object_get(v, "device")) ?: "?";
	json_int_t number = json_integer_value(json_object_get(v, "version"));
	size_t sources = json_array_size(json_object_get(v, "sources"));
	kgen_error kerr = {0};
	kgen_plan *plan = NULL;
	bool ok = false;

	if (kgen_plan_from_json(graph, json_object_get(v, "plan"), &plan, &kerr) < 0)
		snprintf(why, size, "versions[%zu] (version %lld on '%s'): its plan "
			 "does not fit the graph: %s", i, (long long)number, device,
			 kerr.message);
	else if (sources != (size_t)plan->nkernels)
		snprintf(why, size, "versions[%zu] (version %lld on '%s'): %zu sources "
			 "for %d kernels", i, (long long)number, device, sources,
			 plan->nkernels);
	else
		ok = true;
	kgen_plan_free(plan);
	kgen_error_release(&kerr);
	return ok;
}

/* Reads the entry's graph.json and checks that it is the graph of the
 * entry's key; *graph then holds it. */
static bool check_graph(json_t *entry, const char *key, sched_graph **graph,
			char *why, size_t size)
{
	json_t *g = json_object_get(entry, "graph");
	char *text = json_is_string(g) ? strdup(json_string_value(g)) :
		     json_is_object(g) ? json_dumps(g, JSON_COMPACT | JSON_PRESERVE_ORDER) :
		     NULL;
	sched_error err = {0};
	bool ok = false;

	if (!text)
		snprintf(why, size, "it has no graph");
	else if (sched_graph_read_string(text, graph, &err) < 0)
		snprintf(why, size, "its graph does not read: %s", err.message);
	else if (strcmp(sched_graph_key(*graph), key))
		snprintf(why, size, "its graph's key is %s, not the entry's",
			 sched_graph_key(*graph));
	else
		ok = true;
	free(text);
	return ok;
}

/* Checks an entry; *graph holds its graph when it passes. */
static bool check_entry(json_t *entry, const char *key, sched_graph **graph,
			char *why, size_t size)
{
	json_t *versions = json_object_get(entry, "versions"), *v;
	size_t i;

	if (!sched_is_key(key))
		return snprintf(why, size, "its key is not 64 lowercase hex digits"), false;
	if (!json_is_array(versions))
		return snprintf(why, size, "it has no versions"), false;
	if (!check_graph(entry, key, graph, why, size))
		return false;
	json_array_foreach(versions, i, v)
		if (!check_version(*graph, v, i, why, size))
			return false;
	return true;
}

/* Imports one entry into "result"'s "imported" or "refused". */
static void import_entry(cache *c, json_t *entry, json_t *result)
{
	const char *key = json_string_value(json_object_get(entry, "key")) ?: "?";
	sched_graph *graph = NULL;
	cache_error err = {0};
	json_t *out = NULL;
	char why[700];

	if (!check_entry(entry, key, &graph, why, sizeof(why))) {
		/* why is set */
	} else if (cache_import_graph(c, entry, sched_graph_canonical(graph), &out,
				      &err) < 0) {
		snprintf(why, sizeof(why), "%s", err.message);
	} else {
		json_object_set_new(out, "key", json_string(key));
		json_array_append_new(json_object_get(result, "imported"), out);
		sched_graph_free(graph);
		return;
	}
	json_array_append_new(json_object_get(result, "refused"),
			      json_pack("{s:s, s:s}", "key", key, "reason", why));
	sched_graph_free(graph);
}

int tuned_import(cache *c, json_t *bundle, json_t **out, char *why, size_t size)
{
	const char *format = json_string_value(json_object_get(bundle, "format"));
	json_int_t version = json_integer_value(json_object_get(bundle, "format_version"));
	json_t *entries = json_object_get(bundle, "entries"), *entry;
	size_t i;

	if (!format || strcmp(format, EXPORT_FORMAT) || version != EXPORT_FORMAT_VERSION ||
	    !json_is_array(entries)) {
		snprintf(why, size, "not a cache export: it needs \"format\": \"%s\", "
			 "\"format_version\": %d and \"entries\"", EXPORT_FORMAT,
			 EXPORT_FORMAT_VERSION);
		return PROTO_EBAD_REQUEST;
	}
	*out = json_pack("{s:[], s:[]}", "imported", "refused");
	json_array_foreach(entries, i, entry)
		import_entry(c, entry, *out);
	return 0;
}
