/*
 * checksum.c: the checksum of a published version, so that a stored plan,
 * its sources or its launch changed behind the cache's back (a same-length
 * edit passes integrity_check) is never served.
 *
 * The checksum is the SHA-256, as 64 hex digits, of the version's plan,
 * sources and launch texts as stored, each followed by a NUL byte (a
 * missing launch is empty). Both connections have it as the SQL function
 * plan_checksum(plan, sources, launch), so that writes store it and reads
 * check it in their statements.
 */
#include <string.h>

#include "cache_int.h"
#include "scheduler.h"

int cache_checksum(const char *plan, const char *sources, const char *launch,
		    char hex[SCHED_KEY_HEX + 1])
{
	const char *texts[] = {plan, sources, launch ? launch : ""};
	size_t len = 0, at = 0;
	char *all;

	for (int i = 0; i < 3; i++)
		len += strlen(texts[i]) + 1;
	if (!(all = sqlite3_malloc64(len)))
		return -1;
	for (int i = 0; i < 3; i++) {
		size_t n = strlen(texts[i]) + 1;

		memcpy(all + at, texts[i], n);
		at += n;
	}
	sched_sha256_hex(all, len, hex);
	sqlite3_free(all);
	return 0;
}

/* plan_checksum(plan, sources, launch): NULL when plan or sources is. */
static void plan_checksum(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	const char *plan = (const char *)sqlite3_value_text(argv[0]);
	const char *sources = (const char *)sqlite3_value_text(argv[1]);
	const char *launch = (const char *)sqlite3_value_text(argv[2]);
	char hex[SCHED_KEY_HEX + 1];

	(void)argc;
	if (!plan || !sources)
		return sqlite3_result_null(ctx);
	if (cache_checksum(plan, sources, launch, hex) < 0)
		return sqlite3_result_error_nomem(ctx);
	sqlite3_result_text(ctx, hex, SCHED_KEY_HEX, SQLITE_TRANSIENT);
}

int cache_add_functions(sqlite3 *db, cache_error *err)
{
	int rc = sqlite3_create_function_v2(db, "plan_checksum", 3,
					    SQLITE_UTF8 | SQLITE_DETERMINISTIC |
					    SQLITE_DIRECTONLY, NULL, plan_checksum,
					    NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : cache_db_error(db, rc, err, "cannot set up "
						    "the cache's functions");
}
