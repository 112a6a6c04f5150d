/*
 * scripted_times.h: the made-up time of a plan, as the scripted worker
 * gives it (scripted_worker.c), so that a test can tell what a re-timing
 * of any plan must find.
 */
#ifndef SCRIPTED_TIMES_H
#define SCRIPTED_TIMES_H

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* A plan's time in "mode" (NULL: "flat"):
 *   "flat"     every plan takes 1 ms: nothing is ever an improvement;
 *   "hash"     1 to 2 ms, from a hash of the plan's text;
 *   "kernels"  1 ms and 1 us per kernel: fewer kernels win, by little. */
static inline double scripted_ms(const json_t *plan, const char *mode)
{
	char *text = json_dumps(plan, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	unsigned long hash = 2166136261u;

	for (const char *p = text ? text : ""; *p; p++)
		hash = (hash ^ (unsigned char)*p) * 16777619u;
	free(text);
	if (mode && !strcmp(mode, "hash"))
		return 1.0 + (double)(hash % 1000) / 1000;
	if (mode && !strcmp(mode, "kernels"))
		return 1.0 + 0.001 * (double)json_array_size(json_object_get(plan, "kernels"));
	return 1.0;
}

#endif
