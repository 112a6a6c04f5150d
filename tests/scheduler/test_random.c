/*
 * test_random.c: property tests over random valid graphs
 * (tests/kernels/random_graph.c): each is accepted, its key is the same
 * when read twice and does not depend on tensor names or listing order, and
 * the reference interpreter evaluates it to finite values on inputs in
 * [-1, 1] ({-1, 0, 1} for i32).
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/random_graph.h"
#include "scheduler.h"

#ifndef SEEDS
#define SEEDS 500 /* -DSEEDS=N to explore further */
#endif

/* Reads "text", the graph of "seed" ("what" says which form of it); on
 * refusal prints the seed, the message and the graph, and fails. */
static sched_graph *read_or_fail(unsigned seed, const char *what,
				 const char *text)
{
	sched_graph *graph = NULL;
	sched_error err = {0};
	int rc = sched_graph_read_string(text, &graph, &err);

	if (rc != SCHED_OK) {
		fprintf(stderr, "seed %u: the %s graph is refused (%d): %s\n%s\n",
			seed, what, rc, err.message, text);
		cr_assert_fail("seed %u: the %s graph is refused: %s", seed, what,
			       err.message);
	}
	cr_assert_not_null(graph);
	return graph;
}

/* xorshift32: the inputs of a seed. */
static double uniform(uint32_t *state)
{
	uint32_t x = *state;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	*state = x;
	return (x >> 8) * (2.0 / 16777216.0) - 1.0;
}

Test(random, deterministic_in_seed)
{
	char *a = random_graph_json(7), *b = random_graph_json(7);
	char *c = random_graph_json(8);

	cr_assert_str_eq(a, b);
	cr_assert_str_neq(a, c);
	free(a);
	free(b);
	free(c);
}

/* Index of "name" (len chars) in names[0..n), or -1. */
static int find_name(const char **names, int n, const char *name, size_t len)
{
	for (int i = 0; i < n; i++)
		if (strlen(names[i]) == len && !strncmp(names[i], name, len))
			return i;
	return -1;
}

/* "op" with every tensor name (an identifier followed by '[') replaced by
 * its new name. */
static char *rename_op(const char *op, const char **names, int n,
		       const int *renamed)
{
	size_t cap = strlen(op) * 2 + 64, len = 0;
	char *out = malloc(cap);

	cr_assert_not_null(out);
	for (const char *p = op; *p;) {
		if (isalpha((unsigned char)*p) || *p == '_') {
			const char *start = p;
			int i;

			while (isalnum((unsigned char)*p) || *p == '_')
				p++;
			i = *p == '[' ? find_name(names, n, start, p - start) : -1;
			if (len + (p - start) + 16 >= cap)
				out = realloc(out, cap *= 2);
			cr_assert_not_null(out);
			if (i >= 0)
				len += sprintf(out + len, "T%d", renamed[i]);
			else
				len += sprintf(out + len, "%.*s", (int)(p - start), start);
		} else {
			if (len + 2 >= cap)
				out = realloc(out, cap *= 2);
			cr_assert_not_null(out);
			out[len++] = *p++;
		}
	}
	out[len] = '\0';
	return out;
}

static void shuffle(int *a, int n, uint32_t *state)
{
	for (int i = n - 1; i > 0; i--) {
		int j = (int)((uniform(state) + 1) / 2 * (i + 1)), x;

		j = j > i ? i : j;
		x = a[i];
		a[i] = a[j];
		a[j] = x;
	}
}

/* The graph of "text" with its tensors renamed, and its tensors and ops
 * listed in another order. */
static char *renamed_and_shuffled(const char *text, uint32_t *state)
{
	json_error_t jerr;
	json_t *root = json_loads(text, 0, &jerr), *tensors, *ops, *decl;
	json_t *out = json_object(), *out_tensors = json_object();
	json_t *out_ops = json_array();
	const char *key, *names[512];
	int n = 0, renamed[512], order[512], nops;
	char *dumped;

	cr_assert_not_null(root, "%s", jerr.text);
	tensors = json_object_get(root, "tensors");
	ops = json_object_get(root, "ops");
	json_object_foreach(tensors, key, decl)
	{
		cr_assert_lt(n, 512);
		names[n] = key;
		renamed[n] = n;
		order[n] = n;
		n++;
	}
	shuffle(renamed, n, state);
	shuffle(order, n, state);
	for (int i = 0; i < n; i++) {
		char name[32];

		snprintf(name, sizeof(name), "T%d", renamed[order[i]]);
		json_object_set(out_tensors, name,
				json_object_get(tensors, names[order[i]]));
	}
	nops = (int)json_array_size(ops);
	for (int i = 0; i < nops; i++)
		order[i] = i;
	shuffle(order, nops, state);
	for (int i = 0; i < nops; i++) {
		char *op = rename_op(json_string_value(json_array_get(ops, order[i])),
				     names, n, renamed);

		json_array_append_new(out_ops, json_string(op));
		free(op);
	}
	json_object_set_new(out, "version", json_integer(1));
	json_object_set_new(out, "name", json_string("renamed"));
	json_object_set_new(out, "ops", out_ops);
	json_object_set_new(out, "tensors", out_tensors);
	if (json_object_get(root, "options"))
		json_object_set(out, "options", json_object_get(root, "options"));
	dumped = json_dumps(out, JSON_INDENT(1));
	cr_assert_not_null(dumped);
	json_decref(out);
	json_decref(root);
	return dumped;
}

/* The key does not depend on tensor names or on the order in which tensors
 * and ops are listed (docs/graph-format.md, "Canonical form and key"). */
static void check_renamed(unsigned seed, const char *text, sched_graph *graph)
{
	uint32_t state = seed * 40503u | 1;
	char *other = renamed_and_shuffled(text, &state);
	sched_graph *b = read_or_fail(seed, "renamed and reordered", other);

	if (strcmp(sched_graph_key(graph), sched_graph_key(b)) != 0) {
		fprintf(stderr,
			"seed %u: renaming and reordering changes the key\n"
			"%s\n%s\ncanonical:\n%s\nrenamed canonical:\n%s\n",
			seed, text, other, sched_graph_canonical(graph),
			sched_graph_canonical(b));
		cr_expect_fail("seed %u: renaming and reordering changes the key",
			       seed);
	}
	sched_graph_free(b);
	free(other);
}

/* The canonical form of "graph" (sched_graph_canonical_json): read back,
 * it has the same key, lists its tensors and ops in canonical order (so
 * it is its own canonical form), and computes the same values as
 * "graph", whose tensors hold "values" evaluated. */
static void check_canonical_form(unsigned seed, const sched_graph *graph, double **values)
{
	char *text = sched_graph_canonical_json(graph), *again;
	sched_graph *canonical = read_or_fail(seed, "canonical", text);
	double **mine = sched_values_new(canonical);
	int n = sched_graph_tensor_count(graph);

	cr_assert_str_eq(sched_graph_key(canonical), sched_graph_key(graph), "seed %u", seed);
	again = sched_graph_canonical_json(canonical);
	cr_assert_str_eq(again, text, "seed %u: the canonical form is not a fixpoint", seed);
	for (int i = 0; i < sched_graph_op_count(canonical); i++)
		cr_assert_eq(sched_graph_order(canonical)[i], i, "seed %u", seed);
	for (int t = 0; t < n; t++) {
		int k = sched_tensor_canonical_number(graph, t);

		cr_assert_eq(sched_tensor_canonical_number(canonical, k), k, "seed %u", seed);
		if (sched_tensor_role(graph, t) == SCHED_INPUT)
			memcpy(mine[k], values[t], sizeof(double) * sched_tensor_size(graph, t));
	}
	cr_assert_eq(sched_interp_run(canonical, mine), SCHED_OK, "seed %u", seed);
	for (int t = 0; t < n; t++) {
		int k = sched_tensor_canonical_number(graph, t);

		for (int64_t i = 0; i < sched_tensor_size(graph, t); i++)
			cr_assert(mine[k][i] == values[t][i] ||
				  (isnan(mine[k][i]) && isnan(values[t][i])),
				  "seed %u: %s[%lld] is %g in the canonical form, %g as given",
				  seed, sched_tensor_name(graph, t), (long long)i, mine[k][i],
				  values[t][i]);
	}
	sched_values_free(canonical, mine);
	sched_graph_free(canonical);
	free(again);
	free(text);
}

/* For seeds first..last: the graph is accepted; read twice, it has the same
 * key; renamed and reordered, too; it evaluates to finite values, and its
 * canonical form to the same ones. */
static void check_seeds(unsigned first, unsigned last)
{
	for (unsigned seed = first; seed <= last; seed++) {
		char *text = random_graph_json(seed);
		sched_graph *graph, *again;
		double **values;
		uint32_t state = seed * 2654435761u | 1;
		int n;

		cr_assert_not_null(text);
		graph = read_or_fail(seed, "random", text);
		again = read_or_fail(seed, "random", text);
		cr_assert_str_eq(sched_graph_key(graph), sched_graph_key(again),
				 "seed %u: the key changes between two reads", seed);
		cr_assert_str_eq(sched_graph_canonical(graph),
				 sched_graph_canonical(again));
		sched_graph_free(again);
		check_renamed(seed, text, graph);

		values = sched_values_new(graph);
		cr_assert_not_null(values);
		n = sched_graph_tensor_count(graph);
		for (int t = 0; t < n; t++) {
			if (sched_tensor_role(graph, t) != SCHED_INPUT)
				continue;
			for (int64_t i = 0; i < sched_tensor_size(graph, t); i++) {
				double x = uniform(&state);

				values[t][i] = sched_tensor_dtype(graph, t) == SCHED_I32
						       ? round(x)
						       : x;
			}
		}
		cr_assert_eq(sched_interp_run(graph, values), SCHED_OK,
			     "seed %u: the interpreter fails", seed);
		for (int t = 0; t < n; t++) {
			if (sched_tensor_role(graph, t) == SCHED_INPUT)
				continue;
			for (int64_t i = 0; i < sched_tensor_size(graph, t); i++)
				if (!isfinite(values[t][i])) {
					fprintf(stderr, "seed %u: %s[%lld] = %g\n%s\n", seed,
						sched_tensor_name(graph, t), (long long)i,
						values[t][i], text);
					cr_assert_fail("seed %u: %s[%lld] is %g", seed,
						       sched_tensor_name(graph, t),
						       (long long)i, values[t][i]);
				}
		}
		check_canonical_form(seed, graph, values);
		sched_values_free(graph, values);
		sched_graph_free(graph);
		free(text);
	}
}

/* Two halves, which criterion runs in parallel: the bounds check (isl)
 * takes most of the time. */
Test(random, graphs_are_valid_keyed_and_finite_first_half)
{
	check_seeds(1, SEEDS / 2);
}

Test(random, graphs_are_valid_keyed_and_finite_second_half)
{
	check_seeds(SEEDS / 2 + 1, SEEDS);
}
