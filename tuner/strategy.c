/*
 * strategy.c: search strategies: which plan a job tries next.
 *
 * A strategy sees the answer to each candidate it proposed and proposes
 * the next, until it says the search is over. "default" proposes the
 * default plan once; the genetic search will be another strategy behind
 * the same three functions.
 */
#include <stdlib.h>
#include <string.h>

#include "tuner.h"

struct tuner_strategy {
	const char *name;
	int proposed;
};

tuner_strategy *tuner_strategy_new(const char *name)
{
	tuner_strategy *s;

	if (strcmp(name, "default") || !(s = calloc(1, sizeof(*s))))
		return NULL;
	s->name = "default";
	return s;
}

json_t *tuner_strategy_next(tuner_strategy *s, const json_t *last_answer)
{
	(void)last_answer;
	if (s->proposed++ > 0)
		return NULL;
	return json_null();
}

void tuner_strategy_free(tuner_strategy *s)
{
	free(s);
}
