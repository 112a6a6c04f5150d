/*
 * test_malformed.c: each graph in malformed/ is refused with exactly the
 * message in its .err file, in one line.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"

typedef struct malformed_case {
	char name[128];
} malformed_case;

static const char *corpus_dir(void)
{
	static char dir[512];

	snprintf(dir, sizeof(dir), "%s/tests/scheduler/malformed",
		 getenv("TUNED_SOURCE_ROOT"));
	return dir;
}

static int compare_cases(const void *a, const void *b)
{
	return strcmp(((const malformed_case *)a)->name,
		      ((const malformed_case *)b)->name);
}

ParameterizedTestParameters(malformed, refused_with_message)
{
	DIR *dir = opendir(corpus_dir());
	malformed_case *cases = cr_malloc(512 * sizeof(malformed_case));
	struct dirent *entry;
	size_t n = 0;

	while (dir && (entry = readdir(dir)) && n < 512) {
		size_t len = strlen(entry->d_name);

		if (len > 5 && len < 128 && !strcmp(entry->d_name + len - 5, ".json")) {
			memcpy(cases[n].name, entry->d_name, len - 5);
			cases[n++].name[len - 5] = 0;
		}
	}
	if (dir)
		closedir(dir);
	qsort(cases, n, sizeof(*cases), compare_cases);
	return cr_make_param_array(malformed_case, cases, n);
}

static char *read_expected(const char *name)
{
	char path[1024], *line = NULL;
	size_t cap = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.err", corpus_dir(), name);
	f = fopen(path, "r");
	cr_assert_not_null(f, "missing %s", path);
	cr_assert_gt(getline(&line, &cap, f), 0, "empty %s", path);
	fclose(f);
	line[strcspn(line, "\n")] = 0;
	return line;
}

ParameterizedTest(malformed_case *c, malformed, refused_with_message)
{
	char path[1024], *expected = read_expected(c->name);
	sched_graph *graph = NULL;
	sched_error err = {0};
	int rc;

	snprintf(path, sizeof(path), "%s/%s.json", corpus_dir(), c->name);
	rc = sched_graph_read_file(path, &graph, &err);
	cr_expect_lt(rc, 0, "%s was accepted", c->name);
	cr_expect_null(graph);
	cr_expect_eq(err.code, rc);
	cr_expect_null(strchr(err.message, '\n'), "message is not one line");
	cr_expect_str_eq(err.message, expected, "%s", c->name);
	sched_graph_free(graph);
	free(expected);
}

Test(malformed, corpus_is_large_enough)
{
	DIR *dir = opendir(corpus_dir());
	struct dirent *entry;
	int n = 0;

	cr_assert_not_null(dir);
	while ((entry = readdir(dir)))
		n += strstr(entry->d_name, ".json") != NULL;
	closedir(dir);
	cr_expect_geq(n, 30, "only %d malformed graphs", n);
}
