/*
 * transfer.h: cache export files (docs/cache.md, "Export and import"):
 * made from a cache, and checked and loaded into one. The daemon serves
 * them as cache.export and cache.import; tunectl runs them on a cache
 * file no daemon holds (--cache).
 */
#ifndef TUNED_TRANSFER_H
#define TUNED_TRANSFER_H

#include <stddef.h>

#include <jansson.h>

#include "cache.h"

/* The export of "keys" (a JSON array of keys; NULL: every key with a
 * version) from "c", made by "server" on "device" (may be NULL): 0 with
 * *out the export, or a negative proto_code with "why" naming the key
 * and the cause. */
int tuned_export(cache *c, const char *server, const char *device, json_t *keys,
		 json_t **out, char *why, size_t size);

/* Loads the export "bundle" into "c", entry by entry: each entry's key
 * computed again from its graph.json and each version's plan read
 * against that graph, with one source per kernel; an entry that fails is
 * refused whole. 0 with *out {imported: [{key, versions, kept}],
 * refused: [{key, reason}]}, or a negative proto_code with "why" when
 * "bundle" is no export. */
int tuned_import(cache *c, json_t *bundle, json_t **out, char *why, size_t size);

#endif
