/*
 * curve.h: tuning curves, what bench/tuning_curve measures (and
 * bench/plot.py draws from its JSON).
 *
 * A curve is one search of one example: per trial, when its answer came
 * (seconds since the search started), the plan's time and the best time so
 * far. Failed trials (compile error, wrong, crash, time-out) count as
 * INFINITY.
 */
#ifndef BENCH_CURVE_H
#define BENCH_CURVE_H

#include <stdbool.h>

typedef struct curve_point {
	double seconds;
	double ms;
	double best_ms;
} curve_point;

typedef struct curve {
	curve_point *points;  /* trial t (from 1) at points[t - 1] */
	int n;
	/* How the search ended: when (its seconds), why ("budget", "trials",
	 * "space exhausted: N of N plans measured"), after how many
	 * restarts, and its cost filter then: the Spearman rank correlation
	 * of its model's estimates and of the peaks' roofline with the times
	 * measured (NAN: no peaks, or too few trials). */
	double ended_s;
	char ended[64];
	int restarts;
	double rho, rho_peaks;
	bool calibrated;
} curve;

enum curve_kind { CURVE_GENETIC, CURVE_RANDOM, CURVE_KINDS };

typedef struct curve_example {
	char name[128];
	double default_ms;  /* generation 0 of the genetic search: the default plan */
	curve curves[CURVE_KINDS];
} curve_example;

#endif
