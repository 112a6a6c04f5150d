/*
 * test_retime.c: the verdict of a re-timing (tuner/retime.c): rounds won,
 * the best challenger, a win by the rounds and by the noise, close calls
 * extended and judged on the rounds of both, and a challenger in fewer
 * kernels preferred where the timing cannot tell it from the version.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "tuner.h"

/* A re-timing's entry: "median" ms, and its rounds, each "median" but
 * the rounds listed in "slow" (a mask), which take "median" * 2. */
static json_t *entry(double median, unsigned slow)
{
	json_t *rounds = json_array();

	for (int i = 0; i < TUNER_RETIME_ROUNDS; i++)
		json_array_append_new(rounds, json_real(slow & (1u << i) ? median * 2 : median));
	return json_pack("{s:f, s:f, s:o}", "median_ms", median, "spread_ms", median / 10,
			 "rounds_ms", rounds);
}

/* The rounds a challenger as fast as the version wins when the version is
 * slow in "won" rounds and it is slow in the others: a mask of each. */
static unsigned first_rounds(int won)
{
	return (1u << won) - 1;
}

static unsigned other_rounds(int won)
{
	return ((1u << TUNER_RETIME_ROUNDS) - 1) & ~first_rounds(won);
}

/* Times of a version of "version_ms" and a challenger of "ms" that won
 * "won" rounds (plus "more" further entries taken). */
static json_t *duel(double version_ms, double ms, int won)
{
	return json_pack("[o, o]", entry(version_ms, first_rounds(won)),
			 entry(ms, other_rounds(won)));
}

static const int same_kernels[] = {3, 3, 3};

Test(retime, rounds_won_counts_rounds_strictly_faster)
{
	json_t *times = duel(10, 10, 5);

	cr_expect_eq(tuner_rounds_won(times, 1), 5);
	cr_expect_eq(tuner_rounds_won(times, 0), 0, "a tie is not a round won");
	json_array_append_new(times, json_pack("{s:s}", "error", "crashed"));
	cr_expect_eq(tuner_rounds_won(times, 2), 0, "a failed plan wins no round");
	json_decref(times);
}

Test(retime, the_best_is_the_lowest_median_that_did_not_fail)
{
	json_t *times = json_pack("[o, o, {s:s}, o]", entry(10, 0), entry(9, 0), "error", "x",
				  entry(8, other_rounds(6)));
	tuner_retiming t = {times, 3, false, NULL};
	tuner_verdict v;

	tuner_retime_judge(&t, &v);
	cr_expect_eq(v.best, 2);
	cr_expect_float_eq(v.best_ms, 8, 1e-9);
	cr_expect_float_eq(v.best_spread, 0.8, 1e-9);
	cr_expect_float_eq(v.version_ms, 10, 1e-9);
	cr_expect_float_eq(v.first_ms, 10, 1e-9, "the version is the first");
	cr_expect_eq(v.won, 6);
	cr_expect_eq(v.rounds, TUNER_RETIME_ROUNDS);
	cr_expect_not(v.fewer_kernels);
	json_decref(times);
}

Test(retime, the_first_version_timed_apart_comes_last)
{
	json_t *times = json_pack("[o, o, o]", entry(10, 0), entry(9, 0), entry(12, 0));
	tuner_retiming t = {times, 1, true, NULL};
	tuner_verdict v;

	tuner_retime_judge(&t, &v);
	cr_expect_float_eq(v.first_ms, 12, 1e-9);
	json_decref(times);
}

Test(retime, no_challenger_that_ran_is_no_verdict)
{
	json_t *times = json_pack("[o, {s:s}]", entry(10, 0), "error", "crashed");
	tuner_retiming t = {times, 1, false, same_kernels};
	tuner_verdict v;

	tuner_retime_judge(&t, &v);
	cr_expect_eq(v.best, -1);
	cr_expect_eq(v.won, 0);
	cr_expect_not(tuner_retime_close(&v));
	cr_expect_not(tuner_retime_publishes(&t, &v));
	json_decref(times);
}

/* The verdict on a duel. */
static bool publishes(double version_ms, double ms, int won, const int *kernels,
		      tuner_verdict *v)
{
	json_t *times = duel(version_ms, ms, won);
	tuner_retiming t = {times, 1, false, kernels};
	bool published;

	tuner_retime_judge(&t, v);
	published = tuner_retime_publishes(&t, v);
	json_decref(times);
	return published;
}

Test(retime, a_win_takes_the_rounds_and_the_noise)
{
	tuner_verdict v;

	cr_expect(publishes(10, 9, TUNER_ROUNDS_TO_WIN, same_kernels, &v));
	cr_expect_eq(v.best, 0);
	cr_expect_not(v.fewer_kernels);
	cr_expect_not(publishes(10, 9, TUNER_ROUNDS_TO_WIN - 1, same_kernels, &v),
		      "too few rounds won");
	cr_expect_not(publishes(10, 10 * (1 - TUNER_NOISE) * 1.001, TUNER_RETIME_ROUNDS,
				same_kernels, &v), "every round, but within the noise");
	cr_expect(publishes(10, 10 * (1 - TUNER_NOISE) * 0.999, TUNER_ROUNDS_TO_WIN,
			    same_kernels, &v), "just beyond the noise");
}

Test(retime, a_version_that_failed_is_not_beaten)
{
	json_t *times = json_pack("[{s:s}, o]", "error", "crashed", entry(9, 0));
	tuner_retiming t = {times, 1, false, same_kernels};
	tuner_verdict v;

	tuner_retime_judge(&t, &v);
	cr_expect_eq(v.best, 0);
	cr_expect_not(tuner_retime_publishes(&t, &v));
	json_decref(times);
}

/* Whether a duel won in "won" rounds, 5% faster, is a close call. */
static bool close_call(int won, double ms)
{
	json_t *times = duel(10, ms, won);
	tuner_retiming t = {times, 1, false, NULL};
	tuner_verdict v;

	tuner_retime_judge(&t, &v);
	json_decref(times);
	return tuner_retime_close(&v);
}

Test(retime, a_close_call_is_a_few_rounds_short_beyond_the_noise)
{
	for (int won = 0; won <= TUNER_RETIME_ROUNDS; won++)
		cr_expect_eq(close_call(won, 9.5),
			     won >= TUNER_ROUNDS_TO_EXTEND && won < TUNER_ROUNDS_TO_WIN,
			     "%d rounds won", won);
	cr_expect_not(close_call(TUNER_ROUNDS_TO_EXTEND, 10 * (1 - TUNER_NOISE) * 1.001),
		      "within the noise, no more rounds");
}

/* A close call of "won" rounds, extended by rounds where the challenger
 * won "more": the verdict. */
static bool extended(int won, int more, tuner_verdict *v)
{
	json_t *times = json_pack("[o, o, o]", entry(10, 0), entry(9.8, 0),
				  entry(9.5, other_rounds(won)));
	json_t *again = json_pack("[o, o, o]", entry(10.5, first_rounds(more)),
				  entry(9.6, other_rounds(more)), entry(11, 0));
	tuner_retiming t = {times, 2, false, same_kernels};
	tuner_retiming t_more = {again, 1, true, NULL};
	bool published;

	tuner_retime_judge(&t, v);
	cr_assert(tuner_retime_close(v));
	tuner_retime_extend(v, &t_more);
	published = tuner_retime_publishes(&t, v);
	json_decref(times);
	json_decref(again);
	return published;
}

Test(retime, a_close_call_extended_counts_the_rounds_of_both)
{
	tuner_verdict v;

	cr_expect(extended(5, TUNER_EXTENDED_TO_WIN - 5, &v));
	cr_expect_eq(v.best, 1, "the challenger extended stays the best");
	cr_expect_eq(v.won, TUNER_EXTENDED_TO_WIN);
	cr_expect_eq(v.rounds, 2 * TUNER_RETIME_ROUNDS);
	cr_expect_float_eq(v.version_ms, 10.5, 1e-9, "the times are the second re-timing's");
	cr_expect_float_eq(v.best_ms, 9.6, 1e-9);
	cr_expect_float_eq(v.first_ms, 11, 1e-9);
	cr_expect_not(extended(4, TUNER_EXTENDED_TO_WIN - 5, &v),
		      "one round short of %d of 14", TUNER_EXTENDED_TO_WIN);
	cr_expect_eq(v.won, TUNER_EXTENDED_TO_WIN - 1);
}

Test(retime, no_slower_in_fewer_kernels_wins_where_the_timing_cannot_tell)
{
	static const int fewer[] = {3, 2};
	tuner_verdict v;

	cr_expect(publishes(10, 10, 4, fewer, &v), "as fast, 4 of 7 rounds, fewer kernels");
	cr_expect(v.fewer_kernels);
	cr_expect_eq(v.best, 0);
	cr_expect_eq(v.won, 4);
	cr_expect_not(publishes(10, 10, 4, same_kernels, &v), "as many kernels");
	cr_expect_not(v.fewer_kernels);
	cr_expect_not(publishes(10, 10.1, 4, fewer, &v), "slower");
	cr_expect_not(publishes(10, 10, 3, fewer, &v), "half the rounds or fewer");
}

Test(retime, the_challenger_in_fewest_kernels_is_preferred)
{
	static const int kernels[] = {4, 3, 2};
	json_t *times = json_pack("[o, o, o]", entry(10, first_rounds(5)),
				  entry(9.9, other_rounds(5)), entry(10, other_rounds(4)));
	tuner_retiming t = {times, 2, false, kernels};
	tuner_verdict v;

	tuner_retime_judge(&t, &v);
	cr_expect_eq(v.best, 0, "the fastest, not beyond the noise");
	cr_expect(tuner_retime_publishes(&t, &v));
	cr_expect(v.fewer_kernels);
	cr_expect_eq(v.best, 1, "the one in 2 kernels, not 3");
	cr_expect_float_eq(v.best_ms, 10, 1e-9);
	json_decref(times);
}
