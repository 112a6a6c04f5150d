/*
 * test_key.c: the key ignores names and listing order, and sees every
 * change of structure; SHA-256 against FIPS 180-4 vectors.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "graph_builder.h"
#include "scheduler.h"

static char *key_of(const char *tensors, const char *const *ops)
{
	sched_graph *graph = NULL;
	sched_error err = {0};
	char *key;

	cr_assert_eq(load_graph(tensors, ops, &graph, &err), SCHED_OK, "%s",
		     err.message);
	key = strdup(sched_graph_key(graph));
	sched_graph_free(graph);
	return key;
}

#define expect_same(t1, o1, t2, o2)                                           \
	do {                                                                  \
		char *a_ = key_of(t1, o1), *b_ = key_of(t2, o2);              \
		cr_expect_str_eq(a_, b_);                                     \
		free(a_);                                                     \
		free(b_);                                                     \
	} while (0)

#define expect_differ(t1, o1, t2, o2)                                         \
	do {                                                                  \
		char *a_ = key_of(t1, o1), *b_ = key_of(t2, o2);              \
		cr_expect_str_neq(a_, b_);                                    \
		free(a_);                                                     \
		free(b_);                                                     \
	} while (0)

Test(sha256, fips_vectors)
{
	char hex[SCHED_KEY_HEX + 1];
	char *million = malloc(1000000);

	sched_sha256_hex("", 0, hex);
	cr_expect_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	sched_sha256_hex("abc", 3, hex);
	cr_expect_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	sched_sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, hex);
	cr_expect_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	memset(million, 'a', 1000000);
	sched_sha256_hex(million, 1000000, hex);
	cr_expect_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(million);
}

/* A key's form: 64 lowercase hex digits, as sched_sha256_hex writes them. */
Test(sha256, a_key_is_64_lowercase_hex_digits)
{
	char hex[SCHED_KEY_HEX + 1], changed[SCHED_KEY_HEX + 2];

	sched_sha256_hex("abc", 3, hex);
	cr_expect(sched_is_key(hex));
	strcpy(changed, hex);
	changed[5] = 'F';
	cr_expect_not(sched_is_key(changed), "an upper-case digit");
	changed[5] = '\n';
	cr_expect_not(sched_is_key(changed), "a newline");
	strcpy(changed, hex);
	changed[SCHED_KEY_HEX - 1] = 0;
	cr_expect_not(sched_is_key(changed), "63 digits");
	strcpy(changed, hex);
	strcat(changed, "0");
	cr_expect_not(sched_is_key(changed), "65 digits");
	cr_expect_not(sched_is_key(""));
}

#define BRANCHES "x f32 4,4 in; w1 f32 4,4 in; w2 f32 4,4 in; a f32 4,4; " \
		 "b f32 4,4 out; c f32 4,4 out"

Test(key, names_and_order_do_not_matter)
{
	expect_same(BRANCHES,
		    OPS("a[i, j] = sum(k) x[i, k] * w1[k, j]",
			"b[i, j] = sum(k) x[i, k] * w2[k, j]",
			"c[i, j] = a[i, j] + w1[i, j]"),
		    "P f32 4,4 out; Q f32 4,4 out; wB f32 4,4 in; wA f32 4,4 in; "
		    "T f32 4,4; X f32 4,4 in",
		    OPS("P[u, v] = T[u, v] + wA[u, v]",
			"Q[m, n] = sum(r) X[m, r] * wB[r, n]",
			"T[m, n] = sum(r) X[m, r] * wA[r, n]"));
}

Test(key, which_input_feeds_which_op_matters)
{
	expect_differ(BRANCHES,
		      OPS("a[i, j] = sum(k) x[i, k] * w1[k, j]",
			  "b[i, j] = sum(k) x[i, k] * w2[k, j]",
			  "c[i, j] = a[i, j] + w1[i, j]"),
		      BRANCHES,
		      OPS("a[i, j] = sum(k) x[i, k] * w1[k, j]",
			  "b[i, j] = sum(k) x[i, k] * w2[k, j]",
			  "c[i, j] = a[i, j] + w2[i, j]"));
}

#define ONE "x f32 8,4 in; y f32 8,4 out"

Test(key, every_change_of_structure_changes_the_key)
{
	static const char *const variants[][2] = {
		{ONE, "y[i, j] = x[i, j] * 2"},
		{ONE, "y[i, j] = x[i, j] * 3"},
		{ONE, "y[i, j] = 2 * x[i, j]"},
		{ONE, "y[i, j] = x[i, j] + 2"},
		{ONE, "y[i, j] = exp(x[i, j]) * 2"},
		{ONE, "y[i, j] = x[i, 3 - j] * 2"},
		{"x f32 8,4 in; y f16 8,4 out", "y[i, j] = x[i, j] * 2"},
		{"x bf16 8,4 in; y f32 8,4 out", "y[i, j] = x[i, j] * 2"},
		{"x f32 8,5 in; y f32 8,4 out", "y[i, j] = x[i, j] * 2"},
		{"x f32 8,4 in; y f32 8 out", "y[i] = sum(j) x[i, j] * 2"},
		{"x f32 8,4 in; y f32 8 out", "y[i] = max(j) x[i, j] * 2"},
		{"x f32 8,4 in; y f32 8 out", "y[i] = sum(j < 3) x[i, j] * 2"},
	};
	int n = sizeof(variants) / sizeof(variants[0]);
	char *keys[sizeof(variants) / sizeof(variants[0])];

	for (int i = 0; i < n; i++)
		keys[i] = key_of(variants[i][0], OPS(variants[i][1]));
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			cr_expect_str_neq(keys[i], keys[j], "variants %d and %d", i, j);
	for (int i = 0; i < n; i++)
		free(keys[i]);
}

Test(key, variable_names_and_spacing_do_not_matter)
{
	expect_same(ONE, OPS("y[i, j] = x[i, j] * 2"),
		    ONE, OPS("y[ a,b ]=x[a,b]*2"));
}

/* Renames tensor "from" to "to" where it is accessed in "op". */
static char *rename_in_op(const char *op, const char *from, const char *to)
{
	size_t n = strlen(from);
	char *out = calloc(strlen(op) * 4 + 64, 1), *o = out;

	for (const char *s = op; *s;) {
		bool start = s == op || !(isalnum((unsigned char)s[-1]) || s[-1] == '_');

		if (start && !strncmp(s, from, n) && s[n] == '[') {
			o += sprintf(o, "%s", to);
			s += n;
		} else {
			*o++ = *s++;
		}
	}
	return out;
}

/* The example renamed (every tensor gets a fresh name) and its ops listed
 * in reverse; the key must not move. */
static void check_example_invariance(const char *path)
{
	json_t *root = json_load_file(path, 0, NULL), *tensors, *ops, *renamed;
	const char *name;
	json_t *decl;
	sched_graph *g1 = NULL, *g2 = NULL;
	sched_error err = {0};
	char *text;
	size_t i;

	cr_assert_not_null(root, "cannot read %s", path);
	cr_assert_eq(sched_graph_read_file(path, &g1, &err), SCHED_OK, "%s", err.message);
	tensors = json_object_get(root, "tensors");
	ops = json_object_get(root, "ops");
	renamed = json_object();
	json_object_foreach(tensors, name, decl) {
		char fresh[80];

		snprintf(fresh, sizeof(fresh), "renamed_%s", name);
		json_object_set(renamed, fresh, decl);
		for (i = 0; i < json_array_size(ops); i++) {
			char *op = rename_in_op(json_string_value(json_array_get(ops, i)),
						name, fresh);

			json_array_set_new(ops, i, json_string(op));
			free(op);
		}
	}
	json_object_set_new(root, "tensors", renamed);
	for (i = 0; i < json_array_size(ops) / 2; i++) {
		size_t j = json_array_size(ops) - 1 - i;
		json_t *a = json_incref(json_array_get(ops, i));

		json_array_set(ops, i, json_array_get(ops, j));
		json_array_set_new(ops, j, a);
	}
	text = json_dumps(root, 0);
	cr_assert_eq(sched_graph_read_string(text, &g2, &err), SCHED_OK, "%s", err.message);
	cr_expect_str_eq(sched_graph_key(g1), sched_graph_key(g2), "%s", path);
	cr_expect_str_eq(sched_graph_canonical(g1), sched_graph_canonical(g2));
	free(text);
	sched_graph_free(g1);
	sched_graph_free(g2);
	json_decref(root);
}

Test(key, examples_keep_their_key_when_renamed_and_reordered)
{
	static const char *const names[] = {
		"bert_qkv", "conv_pair", "gpt3_mlp_small", "llama_mlp_small",
		"lstm_cell", "mi_lstm_cell", "ln_residual", "softmax_scores",
	};
	char path[512];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/examples/%s.json",
			 getenv("TUNED_SOURCE_ROOT"), names[i]);
		check_example_invariance(path);
	}
}

static char *canonical_of(const char *tensors, const char *const *ops)
{
	sched_graph *graph = NULL;
	sched_error err = {0};
	char *text;

	cr_assert_eq(load_graph(tensors, ops, &graph, &err), SCHED_OK, "%s",
		     err.message);
	text = strdup(sched_graph_canonical(graph));
	sched_graph_free(graph);
	return text;
}

/* Graphs of one form differ in their numbers only; the distance grows
 * with how far apart their shapes are. */
Test(form, same_ops_on_other_shapes_are_one_form)
{
	static const char *const matmul[] = {"y[i, j] = sum(k) x[i, k] * w[k, j]", NULL};
	static const char *const relu[] = {"y[i, j] = max(x[i, j], 0)", NULL};
	char *a = canonical_of("x f32 8,16 in; w f32 16,4 in; y f32 8,4 out", matmul);
	char *b = canonical_of("x f32 16,16 in; w f32 16,4 in; y f32 16,4 out", matmul);
	char *c = canonical_of("x f32 64,16 in; w f32 16,4 in; y f32 64,4 out", matmul);
	char *d = canonical_of("x f32 8,4 in; y f32 8,4 out", relu);
	double ab, ac, aa, ad;

	cr_expect(sched_canonical_distance(a, a, &aa));
	cr_expect_float_eq(aa, 0, 1e-12);
	cr_expect(sched_canonical_distance(a, b, &ab));
	cr_expect(sched_canonical_distance(a, c, &ac));
	cr_expect_gt(ac, ab, "64 rows are farther from 8 than 16 are");
	cr_expect_not(sched_canonical_distance(a, d, &ad), "another op is another form");
	free(a);
	free(b);
	free(c);
	free(d);
}
