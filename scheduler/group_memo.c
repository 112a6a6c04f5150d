/*
 * group_memo.c: the fused groups analysed on one graph, remembered with it.
 *
 * A kernel's group is analysed when its plan is read, printed, estimated
 * and compiled, and the search meets the same groups again and again; so
 * each graph keeps the analyses made on it (refusals too) under the key
 * its caller gives, until it is freed. Past GROUP_MEMO_SLOTS the oldest
 * is forgotten first. A lock guards the memo, as a graph, const to its
 * readers, may be read from several threads at once.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

#define GROUP_MEMO_SLOTS 512

typedef struct memo_entry {
	char *key;
	sched_group *group; /* NULL: refused, with "why" */
	sched_error why;
} memo_entry;

struct sched_group_memo {
	pthread_mutex_t lock;
	memo_entry *entries;
	int used, size;
	int oldest; /* the entry replaced next once all slots are used */
};

sched_group_memo *sched_group_memo_new(void)
{
	sched_group_memo *memo = calloc(1, sizeof(*memo));

	if (memo)
		pthread_mutex_init(&memo->lock, NULL);
	return memo;
}

static void entry_release(memo_entry *entry)
{
	free(entry->key);
	sched_group_free(entry->group);
}

void sched_group_memo_free(sched_group_memo *memo)
{
	if (!memo)
		return;
	for (int i = 0; i < memo->used; i++)
		entry_release(&memo->entries[i]);
	free(memo->entries);
	pthread_mutex_destroy(&memo->lock);
	free(memo);
}

/* The remembered analysis of "key" (copied into *out), or false. */
static bool recall(sched_group_memo *memo, const char *key, sched_group **out,
		   sched_error *why)
{
	bool found = false;

	pthread_mutex_lock(&memo->lock);
	for (int i = 0; i < memo->used && !found; i++)
		if (!strcmp(memo->entries[i].key, key)) {
			found = true;
			*out = memo->entries[i].group ?
			       sched_group_copy(memo->entries[i].group) : NULL;
			*why = memo->entries[i].why;
		}
	pthread_mutex_unlock(&memo->lock);
	return found;
}

/* A slot for a new entry: a free one, the array grown, or the oldest
 * entry released; NULL when out of memory. */
static memo_entry *free_slot(sched_group_memo *memo)
{
	memo_entry *slot;

	if (memo->used == GROUP_MEMO_SLOTS) {
		slot = &memo->entries[memo->oldest];
		memo->oldest = (memo->oldest + 1) % GROUP_MEMO_SLOTS;
		entry_release(slot);
		return slot;
	}
	if (memo->used == memo->size) {
		int size = memo->size ? 2 * memo->size : 16;
		memo_entry *grown = realloc(memo->entries, size * sizeof(*grown));

		if (!grown)
			return NULL;
		memo->entries = grown;
		memo->size = size;
	}
	return &memo->entries[memo->used++];
}

/* Remembers "group" (copied; NULL: refused with "why") under "key".
 * Nothing is remembered when memory runs out. */
static void remember(sched_group_memo *memo, const char *key,
		     const sched_group *group, const sched_error *why)
{
	char *copy = strdup(key);
	sched_group *kept = group ? sched_group_copy(group) : NULL;
	memo_entry *slot;

	if (!copy || (group && !kept)) {
		free(copy);
		sched_group_free(kept);
		return;
	}
	pthread_mutex_lock(&memo->lock);
	slot = free_slot(memo);
	if (slot)
		*slot = (memo_entry){copy, kept, *why};
	pthread_mutex_unlock(&memo->lock);
	if (!slot) {
		free(copy);
		sched_group_free(kept);
	}
}

int sched_group_recall(const sched_graph *graph, const char *key,
		       const sched_group_spec *spec, sched_group **out,
		       sched_error *err)
{
	sched_error why = {0};

	*out = NULL;
	if (!key || !recall(graph->groups, key, out, &why)) {
		sched_group_new(graph, spec, out, &why);
		if (key && why.code != SCHED_ENOMEM)
			remember(graph->groups, key, *out, &why);
	}
	if (*out)
		return SCHED_OK;
	if (why.code == SCHED_OK)
		return sched_fail(err, SCHED_ENOMEM, -1, 0, "out of memory");
	if (err)
		*err = why;
	return why.code;
}
