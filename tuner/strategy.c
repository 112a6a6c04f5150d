/*
 * strategy.c: search strategies: which plan a job tries next.
 *
 * A strategy sees the answer to each candidate it proposed and proposes
 * the next, until it says the search is over. "default" proposes the
 * default plan once; "genetic" searches the schedules (genetic.c),
 * starting from the default plan.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tuner.h"

struct tuner_strategy {
	int proposed;
	tuner_genetic *genetic;
};

tuner_strategy *tuner_strategy_new(const char *name,
				   const struct sched_graph *graph, unsigned seed)
{
	bool genetic = !strcmp(name, "genetic");
	tuner_strategy *s;

	if ((!genetic && strcmp(name, "default")) || !(s = calloc(1, sizeof(*s))))
		return NULL;
	if (genetic && !(s->genetic = tuner_genetic_new(graph, seed))) {
		free(s);
		return NULL;
	}
	return s;
}

json_t *tuner_strategy_next(tuner_strategy *s, const json_t *last_answer)
{
	if (s->genetic)
		return tuner_genetic_next(s->genetic, last_answer);
	if (s->proposed++ > 0)
		return NULL;
	return json_null();
}

double tuner_strategy_best(const tuner_strategy *s)
{
	return s->genetic ? tuner_genetic_best(s->genetic) : INFINITY;
}

void tuner_strategy_free(tuner_strategy *s)
{
	if (!s)
		return;
	tuner_genetic_free(s->genetic);
	free(s);
}
