/*
 * fuzz_graph.c: the checks of every text read as a graph (fuzz_graph.h).
 */
#include "fuzz_graph.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static void check_refusal(int rc, const sched_error *err, const sched_graph *g,
			  const char *text)
{
	json_t *message = json_string(err->message);

	cr_assert(rc <= SCHED_EJSON && rc >= SCHED_EBOUNDS,
		  "code %d (%s) for %s", rc, err->message, fuzz_excerpt(text));
	cr_assert_eq(err->code, rc, "%s", fuzz_excerpt(text));
	cr_assert_null(g, "a graph with a refusal: %s", fuzz_excerpt(text));
	cr_assert(err->message[0] && !strchr(err->message, '\n'),
		  "message '%s' for %s", err->message, fuzz_excerpt(text));
	cr_assert_not_null(message, "message '%s' is not UTF-8", err->message);
	json_decref(message);
}

/* The canonical form of "g" reads back to the same key and text. */
static void check_canonical(const sched_graph *g, const char *text)
{
	char *form = sched_graph_canonical_json(g), *again_form;
	sched_graph *again = NULL;
	sched_error err = {0};

	cr_assert_not_null(form);
	cr_assert_eq(sched_graph_read_string(form, &again, &err), SCHED_OK,
		     "the canonical form of %s is refused: %s\n%s",
		     fuzz_excerpt(text), err.message, form);
	cr_assert_str_eq(sched_graph_key(again), sched_graph_key(g),
			 "key changes through the canonical form of %s",
			 fuzz_excerpt(text));
	cr_assert_str_eq(sched_graph_canonical(again), sched_graph_canonical(g));
	cr_assert_eq(sched_graph_tensor_count(again), sched_graph_tensor_count(g));
	cr_assert_eq(sched_graph_op_count(again), sched_graph_op_count(g));
	again_form = sched_graph_canonical_json(again);
	cr_assert_str_eq(again_form, form, "the canonical form of %s is not "
			 "its own canonical form", fuzz_excerpt(text));
	free(again_form);
	free(form);
	sched_graph_free(again);
}

sched_graph *fuzz_read_graph(const char *text)
{
	sched_graph *g = NULL;
	sched_error err = {0};
	int rc = sched_graph_read_string(text, &g, &err);

	if (rc < 0) {
		check_refusal(rc, &err, g, text);
		return NULL;
	}
	cr_assert_not_null(g);
	check_canonical(g, text);
	return g;
}
