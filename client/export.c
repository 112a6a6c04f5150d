/*
 * export.c: cache export and import, through the daemon or, with
 * --cache, on the cache file itself (cache/transfer.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cache.h"
#include "service.h"
#include "transfer.h"

/* Writes the export "result" (taken) to --out. */
static int write_export(const service_options *o, json_t *result)
{
	size_t n = json_array_size(json_object_get(result, "entries"));

	if (service_write_json(o->out_dir, result) < 0) {
		json_decref(result);
		return service_fail_with(o, "%s: cannot write the file (%s)", o->out_dir,
					 strerror(errno));
	}
	json_decref(result);
	if (o->as_json)
		tunectl_print_json(json_pack("{s:s, s:I}", "file", o->out_dir, "keys",
					     (json_int_t)n));
	else
		printf("exported %zu key%s to %s\n", n, n == 1 ? "" : "s", o->out_dir);
	return EXIT_SUCCESS;
}

int service_cache_export(tuned_client *client, const service_options *o)
{
	tuned_client_error err;
	json_t *result = NULL;

	if (tuned_client_cache_export(client, (const char *const *)o->keys, o->nkeys,
				      &result, &err) < 0)
		return service_fail(o, &err);
	return write_export(o, result);
}

/* "imported KEY: 2 versions", then what was kept as it was; "refused
 * KEY: why". */
static void print_imported(json_t *result)
{
	json_t *entry, *kept;
	size_t i, j;

	json_array_foreach(json_object_get(result, "imported"), i, entry) {
		long long n = service_int(entry, "versions");

		printf("imported %s: %lld version%s\n", service_str(entry, "key"), n,
		       service_plural(n));
		json_array_foreach(json_object_get(entry, "kept"), j, kept)
			printf("  kept %s, %s: %s\n", service_str(kept, "device"),
			       service_str(kept, "codegen"), service_str(kept, "reason"));
	}
	json_array_foreach(json_object_get(result, "refused"), i, entry)
		printf("refused %s: %s\n", service_str(entry, "key"),
		       service_str(entry, "reason"));
}

/* Shows the import "result" (taken): exit 1 when a key was refused. */
static int show_imported(const service_options *o, json_t *result)
{
	int status = json_array_size(json_object_get(result, "refused")) ?
		     EXIT_INVALID : EXIT_SUCCESS;

	if (o->as_json)
		tunectl_print_json(result);
	else {
		print_imported(result);
		json_decref(result);
	}
	return status;
}

/* The export file --arg, or NULL after saying why. */
static json_t *read_export(const service_options *o)
{
	json_error_t jerr;
	json_t *bundle = json_load_file(o->arg, 0, &jerr);

	if (!bundle)
		service_fail_with(o, "%s: %s (line %d)", o->arg, jerr.text, jerr.line);
	return bundle;
}

int service_cache_import(tuned_client *client, const service_options *o)
{
	json_t *bundle = read_export(o), *result = NULL;
	tuned_client_error err;
	int rc;

	if (!bundle)
		return EXIT_INVALID;
	rc = tuned_client_cache_import(client, bundle, &result, &err);
	json_decref(bundle);
	if (rc < 0)
		return service_fail(o, &err);
	return show_imported(o, result);
}

/* --cache: the cache file itself, which no daemon may hold. */
static cache *open_offline(const service_options *o)
{
	cache_error err = {0};
	cache *c = NULL;

	if (cache_open(o->cache_path, NULL, &c, &err) < 0) {
		service_fail_with(o, "%s%s", err.message, err.code == CACHE_EBUSY ?
				  "; a daemon holds it: leave out --cache to go through "
				  "the daemon" : "");
		return NULL;
	}
	return c;
}

int service_offline_export(const service_options *o)
{
	json_t *keys = o->nkeys ? json_array() : NULL, *result = NULL;
	char why[PROTO_MESSAGE_MAX];
	cache *c = open_offline(o);
	int rc;

	for (int i = 0; i < o->nkeys; i++)
		json_array_append_new(keys, json_string(o->keys[i]));
	rc = c ? tuned_export(c, "tunectl (offline)", NULL, keys, &result, why,
			      sizeof(why)) : 0;
	cache_close(c);
	json_decref(keys);
	if (!c)
		return EXIT_INVALID;
	if (rc < 0)
		return service_fail_with(o, "%s", why);
	return write_export(o, result);
}

int service_offline_import(const service_options *o)
{
	json_t *bundle = read_export(o), *result = NULL;
	char why[PROTO_MESSAGE_MAX];
	cache *c = bundle ? open_offline(o) : NULL;
	int rc = c ? tuned_import(c, bundle, &result, why, sizeof(why)) : 0;

	cache_close(c);
	json_decref(bundle);
	if (!c)
		return EXIT_INVALID;
	if (rc < 0)
		return service_fail_with(o, "%s: %s", o->arg, why);
	return show_imported(o, result);
}
