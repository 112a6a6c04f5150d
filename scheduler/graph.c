/*
 * graph.c: reading graph.json v1 into a checked graph.
 *
 * The checks run as a flat pipeline, each on what the previous ones
 * established: JSON, top-level keys, tensors, op texts, dataflow (writes,
 * reads, cycles), bounds (isl), then the canonical form and key.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "sched_int.h"

#define MAX_OPS 4096
#define MAX_OP_TEXT 16384
#define MAX_ELEMENTS (INT64_C(1) << 40)

static const char *const dtype_names[] = {
	[SCHED_F32] = "f32", [SCHED_F16] = "f16", [SCHED_BF16] = "bf16",
	[SCHED_I32] = "i32",
};
static const int dtype_bytes[] = {
	[SCHED_F32] = 4, [SCHED_F16] = 2, [SCHED_BF16] = 2, [SCHED_I32] = 4,
};

const char *sched_dtype_name(enum sched_dtype dtype)
{
	return dtype_names[dtype];
}

int sched_dtype_bytes(enum sched_dtype dtype)
{
	return dtype_bytes[dtype];
}

bool sched_is_identifier(const char *s)
{
	if (!isalpha((unsigned char)*s) && *s != '_')
		return false;
	while (*++s)
		if (!isalnum((unsigned char)*s) && *s != '_')
			return false;
	return true;
}

/* Fails unless every key of "obj" is one of "allowed" (NULL-terminated). */
static int check_keys(json_t *obj, const char *const *allowed,
		      const char *where, sched_error *err)
{
	const char *key = sched_unknown_key(obj, allowed);

	if (key)
		return sched_fail(err, SCHED_ESCHEMA, -1, 0, "unknown key '%s' in %s",
				  key, where);
	return SCHED_OK;
}

static int read_shape(sched_tensor *t, json_t *shape, sched_error *err)
{
	size_t i;
	json_t *dim;

	if (!json_is_array(shape) || json_array_size(shape) > SCHED_MAX_RANK)
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "tensor '%s': shape must be a list of at most %d "
				  "positive integers", t->name, SCHED_MAX_RANK);
	t->rank = (int)json_array_size(shape);
	t->size = 1;
	json_array_foreach(shape, i, dim) {
		if (!json_is_integer(dim) || json_integer_value(dim) <= 0 ||
		    json_integer_value(dim) > INT32_MAX)
			return sched_fail(err, SCHED_ESCHEMA, -1, 0,
					  "tensor '%s': dim %zu of the shape must be "
					  "a positive integer", t->name, i);
		t->shape[i] = json_integer_value(dim);
		if (t->shape[i] > MAX_ELEMENTS / t->size) /* before it overflows */
			return sched_fail(err, SCHED_ESCHEMA, -1, 0,
					  "tensor '%s' has more than 2^40 elements",
					  t->name);
		t->size *= t->shape[i];
	}
	return SCHED_OK;
}

/* The string value of "value", or NULL if it is none or holds a NUL. */
static const char *plain_string(json_t *value)
{
	const char *s = json_string_value(value);

	return s && strlen(s) == json_string_length(value) ? s : NULL;
}

static int read_dtype(sched_tensor *t, json_t *dtype, sched_error *err)
{
	const char *s = plain_string(dtype);

	for (int d = 0; s && d <= SCHED_I32; d++)
		if (!strcmp(s, dtype_names[d])) {
			t->dtype = d;
			return SCHED_OK;
		}
	return sched_fail(err, SCHED_ESCHEMA, -1, 0,
			  "tensor '%s': dtype must be one of f32, f16, bf16, i32%s%s%s",
			  t->name, s ? ", not '" : "", s ? s : "", s ? "'" : "");
}

static int read_role(sched_tensor *t, json_t *role, sched_error *err)
{
	const char *s = plain_string(role);

	if (!role)
		t->role = SCHED_INTERMEDIATE;
	else if (s && !strcmp(s, "input"))
		t->role = SCHED_INPUT;
	else if (s && !strcmp(s, "output"))
		t->role = SCHED_OUTPUT;
	else
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "tensor '%s': role must be \"input\" or \"output\"",
				  t->name);
	return SCHED_OK;
}

static int read_tensor(sched_graph *graph, sched_tensor *t, const char *name,
		       json_t *decl, sched_error *err)
{
	static const char *const keys[] = {"shape", "dtype", "role", NULL};
	char where[160];
	int rc;

	if (!sched_is_identifier(name) || sched_name_is_reserved(name) ||
	    strlen(name) > 64)
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "tensor name '%.80s' is not a usable name: letters, "
				  "digits and '_', at most 64, not a reserved word",
				  name);
	if (!(t->name = sched_arena_strndup(&graph->arena, name, strlen(name))))
		return SCHED_ENOMEM;
	t->writer = -1;
	if (!json_is_object(decl))
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "tensor '%s' must be an object", name);
	snprintf(where, sizeof(where), "tensor '%s'", name);
	if ((rc = check_keys(decl, keys, where, err)) < 0 ||
	    (rc = read_shape(t, json_object_get(decl, "shape"), err)) < 0 ||
	    (rc = read_dtype(t, json_object_get(decl, "dtype"), err)) < 0)
		return rc;
	return read_role(t, json_object_get(decl, "role"), err);
}

/* Fails when "value" is over "limit": "what" says what was counted, as
 * in "the graph has 5000 ops". */
static int check_limit(const sched_limit *limit, int64_t value, const char *what,
		       sched_error *err)
{
	if (limit->max <= 0 || value <= limit->max)
		return SCHED_OK;
	return sched_fail(err, SCHED_ELIMIT, -1, 0, "%s, over the limit of %lld%s%s%s",
			  what, (long long)limit->max,
			  limit->option ? " (raise it with " : "",
			  limit->option ? limit->option : "", limit->option ? ")" : "");
}

/* The tensor's elements, and all of them so far, within "limits". */
static int check_elements(const sched_tensor *t, int64_t total,
			  const sched_limits *limits, sched_error *err)
{
	char what[160];
	int rc;

	snprintf(what, sizeof(what), "tensor '%s' has %lld elements", t->name,
		 (long long)t->size);
	if ((rc = check_limit(&limits->tensor_elements, t->size, what, err)) < 0)
		return rc;
	snprintf(what, sizeof(what), "the graph's tensors have %lld elements or more "
		 "in all", (long long)total);
	return check_limit(&limits->total_elements, total, what, err);
}

static int read_tensors(sched_graph *graph, json_t *tensors,
			const sched_limits *limits, sched_error *err)
{
	const char *name;
	json_t *decl;
	int64_t total = 0;
	int rc, i = 0;

	if (!json_is_object(tensors) || json_object_size(tensors) == 0)
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "'tensors' must be a non-empty object");
	graph->ntensors = (int)json_object_size(tensors);
	graph->tensors = sched_arena_alloc(&graph->arena,
					   graph->ntensors * sizeof(sched_tensor));
	if (!graph->tensors)
		return SCHED_ENOMEM;
	json_object_foreach(tensors, name, decl) {
		sched_tensor *t = &graph->tensors[i++];

		if ((rc = read_tensor(graph, t, name, decl, err)) < 0)
			return rc;
		total += t->size;
		if ((rc = check_elements(t, total, limits, err)) < 0)
			return rc;
	}
	return SCHED_OK;
}

static int read_op_text(json_t *text, int index, sched_error *err)
{
	if (!json_is_string(text))
		return sched_fail(err, SCHED_ESCHEMA, index, 0,
				  "must be a string");
	if (strlen(json_string_value(text)) != json_string_length(text))
		return sched_fail(err, SCHED_ESCHEMA, index, 0,
				  "contains a NUL character");
	if (json_string_length(text) > MAX_OP_TEXT)
		return sched_fail(err, SCHED_ESCHEMA, index, 0,
				  "is longer than %d characters", MAX_OP_TEXT);
	return SCHED_OK;
}

static int read_ops(sched_graph *graph, json_t *ops, const sched_limits *limits,
		    sched_error *err)
{
	char what[64];
	size_t i;
	json_t *text;
	int rc;

	snprintf(what, sizeof(what), "the graph has %zu ops", json_array_size(ops));
	if (json_is_array(ops) &&
	    (rc = check_limit(&limits->ops, (int64_t)json_array_size(ops), what, err)) < 0)
		return rc;
	if (!json_is_array(ops) || json_array_size(ops) == 0 ||
	    json_array_size(ops) > MAX_OPS)
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "'ops' must be a list of 1 to %d strings", MAX_OPS);
	graph->nops = (int)json_array_size(ops);
	graph->ops = sched_arena_alloc(&graph->arena, graph->nops * sizeof(sched_op));
	if (!graph->ops)
		return SCHED_ENOMEM;
	json_array_foreach(ops, i, text) {
		const char *copy;

		if ((rc = read_op_text(text, (int)i, err)) < 0)
			return rc;
		copy = sched_arena_strndup(&graph->arena, json_string_value(text),
					   json_string_length(text));
		if (!copy)
			return SCHED_ENOMEM;
		if ((rc = sched_op_parse(graph, (int)i, copy, err)) < 0)
			return rc;
	}
	return SCHED_OK;
}

static int read_options(sched_graph *graph, json_t *options, sched_error *err)
{
	static const char *const keys[] = {"allow_tf32", NULL};
	json_t *tf32;
	int rc;

	if (!options)
		return SCHED_OK;
	if (!json_is_object(options))
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "'options' must be an object");
	if ((rc = check_keys(options, keys, "'options'", err)) < 0)
		return rc;
	tf32 = json_object_get(options, "allow_tf32");
	if (tf32 && !json_is_boolean(tf32))
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "option 'allow_tf32' must be true or false");
	graph->allow_tf32 = json_is_true(tf32);
	return SCHED_OK;
}

static int read_header(sched_graph *graph, json_t *root, sched_error *err)
{
	static const char *const keys[] = {"version", "name", "tensors", "ops",
					   "options", NULL};
	json_t *version = json_object_get(root, "version");
	json_t *name = json_object_get(root, "name");
	int rc;

	if ((rc = check_keys(root, keys, "the graph", err)) < 0)
		return rc;
	if (!json_is_integer(version) || json_integer_value(version) != 1)
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "'version' must be 1, the only version this "
				  "tuned reads");
	if (name && !plain_string(name))
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "'name' must be a string");
	graph->name = sched_arena_strndup(&graph->arena,
					  name ? json_string_value(name) : "",
					  name ? json_string_length(name) : 0);
	return graph->name ? SCHED_OK : SCHED_ENOMEM;
}

static int load_graph(sched_graph *graph, json_t *root, const sched_limits *limits,
		      sched_error *err)
{
	int rc;

	if (!json_is_object(root))
		return sched_fail(err, SCHED_ESCHEMA, -1, 0,
				  "the graph must be a JSON object");
	if ((rc = read_header(graph, root, err)) < 0 ||
	    (rc = read_options(graph, json_object_get(root, "options"), err)) < 0 ||
	    (rc = read_tensors(graph, json_object_get(root, "tensors"), limits, err)) < 0 ||
	    (rc = read_ops(graph, json_object_get(root, "ops"), limits, err)) < 0 ||
	    (rc = sched_graph_check_dataflow(graph, err)) < 0 ||
	    (rc = sched_graph_check_bounds(graph, err)) < 0)
		return rc;
	return sched_graph_canonicalize(graph);
}

int sched_graph_read_limited(const char *text, const sched_limits *limits,
			     sched_graph **out, sched_error *err)
{
	json_error_t jerr;
	json_t *root;
	sched_graph *graph;
	char what[64];
	int rc;

	*out = NULL;
	snprintf(what, sizeof(what), "the graph's text is %zu bytes", strlen(text));
	if ((rc = check_limit(&limits->text_bytes, (int64_t)strlen(text), what, err)) < 0)
		return rc;
	root = json_loads(text, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (!root)
		return sched_fail(err, SCHED_EJSON, -1, 0,
				  "line %d, column %d: %s", jerr.line, jerr.column,
				  jerr.text);
	if (!(graph = calloc(1, sizeof(*graph))) ||
	    !(graph->groups = sched_group_memo_new())) {
		free(graph);
		json_decref(root);
		return sched_fail(err, SCHED_ENOMEM, -1, 0, "out of memory");
	}
	rc = load_graph(graph, root, limits, err);
	json_decref(root);
	if (rc == SCHED_ENOMEM)
		sched_fail(err, rc, -1, 0, "out of memory");
	if (rc < 0) {
		sched_graph_free(graph);
		return rc;
	}
	*out = graph;
	return SCHED_OK;
}

int sched_graph_read_string(const char *text, sched_graph **out,
			    sched_error *err)
{
	static const sched_limits none;

	return sched_graph_read_limited(text, &none, out, err);
}

int sched_graph_read_file(const char *path, sched_graph **out,
			  sched_error *err)
{
	char *text;
	int rc;

	*out = NULL;
	errno = 0;
	if (!(text = tuned_read_file(path, NULL)))
		return sched_fail(err, SCHED_EIO, -1, 0, "cannot read '%s': %s",
				  path, errno ? strerror(errno) : "read error");
	rc = sched_graph_read_string(text, out, err);
	free(text);
	return rc;
}

void sched_graph_free(sched_graph *graph)
{
	if (!graph)
		return;
	free(graph->canonical);
	sched_group_memo_free(graph->groups);
	sched_arena_release(&graph->arena);
	free(graph);
}

const char *sched_graph_name(const sched_graph *graph)
{
	return graph->name;
}

int sched_graph_tensor_count(const sched_graph *graph)
{
	return graph->ntensors;
}

int sched_graph_op_count(const sched_graph *graph)
{
	return graph->nops;
}

bool sched_graph_allows_tf32(const sched_graph *graph)
{
	return graph->allow_tf32;
}

int sched_tensor_find(const sched_graph *graph, const char *name)
{
	for (int t = 0; t < graph->ntensors; t++)
		if (graph->tensors[t].name && !strcmp(graph->tensors[t].name, name))
			return t;
	return -1;
}

const char *sched_tensor_name(const sched_graph *graph, int t)
{
	return graph->tensors[t].name;
}

int sched_tensor_rank(const sched_graph *graph, int t)
{
	return graph->tensors[t].rank;
}

const int64_t *sched_tensor_shape(const sched_graph *graph, int t)
{
	return graph->tensors[t].shape;
}

int64_t sched_tensor_size(const sched_graph *graph, int t)
{
	return graph->tensors[t].size;
}

size_t sched_tensor_bytes(const sched_graph *graph, int t)
{
	return (size_t)graph->tensors[t].size *
	       sched_dtype_bytes(graph->tensors[t].dtype);
}

enum sched_dtype sched_tensor_dtype(const sched_graph *graph, int t)
{
	return graph->tensors[t].dtype;
}

enum sched_role sched_tensor_role(const sched_graph *graph, int t)
{
	return graph->tensors[t].role;
}

const int *sched_graph_order(const sched_graph *graph)
{
	return graph->order;
}

const char *sched_op_text(const sched_graph *graph, int op)
{
	return graph->ops[op].text;
}

const char *sched_graph_canonical(const sched_graph *graph)
{
	return graph->canonical;
}

const char *sched_graph_key(const sched_graph *graph)
{
	return graph->key;
}
