/*
 * random_graph.h: random valid graph.json v1 texts for property tests.
 *
 * Each graph has 1 to 6 ops over small tensors (every dim 1..12, at most
 * 50000 domain points per op), so that the double-precision reference
 * interpreter runs it in milliseconds. Across seeds the graphs use every
 * call and reducer, matmul-like contractions, transposes, broadcasts,
 * slices, quasi-affine reshapes, padded windows guarded by select, scalars,
 * chains of intermediates, several outputs and all four dtypes. Values stay
 * finite for inputs in [-1, 1] (i32 inputs in {-1, 0, 1}): log, sqrt and
 * rsqrt only see positive arguments, divisions only positive denominators
 * bounded away from 0, and magnitudes are kept small.
 */
#ifndef RANDOM_GRAPH_H
#define RANDOM_GRAPH_H

/* A random valid graph.json text (caller frees) for "seed": 1 to 6 ops over
 * small tensors (every dim 1..12, total work per op under ~50k domain
 * points), so that the double-precision reference interpreter runs it in
 * milliseconds. Deterministic in seed. */
char *random_graph_json(unsigned seed);

#endif
