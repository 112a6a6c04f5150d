/*
 * retime.c: the verdict of a re-timing of the version beside the
 * generation's challengers (tuner.h, docs/design/tuning.md): pure functions of
 * the times the measurement worker answered.
 */
#include <math.h>

#include "tuner.h"

static double entry_ms(const json_t *times, int i, const char *field)
{
	return json_number_value(json_object_get(json_array_get(times, i), field));
}

int tuner_rounds_won(const json_t *times, int entry)
{
	const json_t *mine = json_object_get(json_array_get(times, entry), "rounds_ms");
	const json_t *theirs = json_object_get(json_array_get(times, 0), "rounds_ms");
	int won = 0;

	for (size_t i = 0; i < json_array_size(mine) && i < json_array_size(theirs); i++)
		won += json_number_value(json_array_get(mine, i)) <
		       json_number_value(json_array_get(theirs, i));
	return won;
}

/* The time of the version the job started from: the entry after the
 * challengers when it was re-timed apart, else the version's. */
static double first_ms(const tuner_retiming *t)
{
	return entry_ms(t->times, t->first_apart ? t->challengers + 1 : 0, "median_ms");
}

void tuner_retime_judge(const tuner_retiming *t, tuner_verdict *v)
{
	*v = (tuner_verdict){.best = -1, .best_ms = INFINITY, .rounds = TUNER_RETIME_ROUNDS,
			     .version_ms = entry_ms(t->times, 0, "median_ms"),
			     .first_ms = first_ms(t)};
	for (int i = 0; i < t->challengers; i++) {
		double ms = entry_ms(t->times, i + 1, "median_ms");

		if (ms > 0 && ms < v->best_ms) {
			v->best_ms = ms;
			v->best_spread = entry_ms(t->times, i + 1, "spread_ms");
			v->best = i;
		}
	}
	v->won = v->best >= 0 ? tuner_rounds_won(t->times, v->best + 1) : 0;
}

/* Whether the best challenger's median is lower than the version's by
 * the noise. */
static bool beyond_noise(const tuner_verdict *v)
{
	return v->best_ms < v->version_ms * (1 - TUNER_NOISE);
}

bool tuner_retime_close(const tuner_verdict *v)
{
	return v->best >= 0 && v->won < TUNER_ROUNDS_TO_WIN &&
	       v->won >= TUNER_ROUNDS_TO_EXTEND && beyond_noise(v);
}

void tuner_retime_extend(tuner_verdict *v, const tuner_retiming *more)
{
	int won_before = v->won, which = v->best;

	tuner_retime_judge(more, v);
	v->best = v->best >= 0 ? which : -1;
	v->won += won_before;
	v->rounds = 2 * TUNER_RETIME_ROUNDS;
}

/* Whether the best challenger beat the version, in the rounds and by the
 * noise. */
static bool beats_version(const tuner_verdict *v)
{
	int to_win = v->rounds > TUNER_RETIME_ROUNDS ? TUNER_EXTENDED_TO_WIN
						      : TUNER_ROUNDS_TO_WIN;

	return v->best >= 0 && v->version_ms > 0 && v->won >= to_win && beyond_noise(v);
}

/* The challenger in fewest kernels, if fewer than the version's, or -1. */
static int fewest_kernels(const tuner_retiming *t)
{
	int fewest = -1, kernels = t->kernels[0];

	for (int i = 0; i < t->challengers; i++)
		if (t->kernels[i + 1] < kernels) {
			fewest = i;
			kernels = t->kernels[i + 1];
		}
	return fewest;
}

/* "v" becomes the verdict on the challenger in fewest kernels when it is
 * no slower than the version and won more than half the rounds; else it
 * stays. */
static void prefer_fewer_kernels(const tuner_retiming *t, tuner_verdict *v)
{
	double version_ms = entry_ms(t->times, 0, "median_ms"), ms;
	int fewest = fewest_kernels(t), won;

	if (fewest < 0)
		return;
	ms = entry_ms(t->times, fewest + 1, "median_ms");
	won = tuner_rounds_won(t->times, fewest + 1);
	if (!(version_ms > 0) || !(ms > 0) || ms > version_ms || 2 * won <= TUNER_RETIME_ROUNDS)
		return;
	*v = (tuner_verdict){fewest, version_ms, ms, entry_ms(t->times, fewest + 1, "spread_ms"),
			     first_ms(t), won, TUNER_RETIME_ROUNDS, true};
}

bool tuner_retime_publishes(const tuner_retiming *t, tuner_verdict *v)
{
	if (beats_version(v))
		return true;
	if (v->version_ms > 0)
		prefer_fewer_kernels(t, v);
	return v->fewer_kernels;
}
