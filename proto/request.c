/*
 * request.c: requests, from a client to the daemon. The envelope
 * {"id", "op", "params"} and, for each op, the schema of its params: which
 * keys, which are required, their types and ranges.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"

static const char *const op_names[PROTO_NOPS] = {
	[PROTO_OP_HELLO] = "hello",
	[PROTO_OP_PING] = "ping",
	[PROTO_OP_SUBMIT] = "submit",
	[PROTO_OP_STATUS] = "status",
	[PROTO_OP_LIST] = "list",
	[PROTO_OP_CANCEL] = "cancel",
	[PROTO_OP_FETCH] = "fetch",
	[PROTO_OP_WATCH] = "watch",
	[PROTO_OP_STATS] = "stats",
	[PROTO_OP_CACHE_LIST] = "cache.list",
	[PROTO_OP_CACHE_SHOW] = "cache.show",
	[PROTO_OP_CACHE_PRUNE] = "cache.prune",
	[PROTO_OP_CACHE_EXPORT] = "cache.export",
	[PROTO_OP_CACHE_IMPORT] = "cache.import",
	[PROTO_OP_CACHE_QUARANTINE] = "cache.quarantine",
	[PROTO_OP_ADVANCE] = "advance",
};

const char *proto_op_name(enum proto_op op)
{
	if ((int)op < 0 || op >= PROTO_NOPS)
		return NULL;
	return op_names[op];
}

enum proto_op proto_op_from_name(const char *name)
{
	for (int op = 0; name && op < PROTO_NOPS; op++)
		if (!strcmp(op_names[op], name))
			return (enum proto_op)op;
	return PROTO_OP_NONE;
}

bool proto_id_is_valid(const json_t *id)
{
	if (json_is_integer(id))
		return json_integer_value(id) >= 0;
	return json_is_string(id) && json_string_length(id) <= PROTO_ID_MAX;
}

/* The schema of params: per op, its fields. An F_INT field is an integer
 * in [min, max] stored at "offset" in proto_request. */
enum field_kind {
	F_INT,
	F_BUDGET,
	F_GRAPH,
	F_NAMES,
	F_SAVE,
	F_KEY,
	F_KEYS,
	F_BUNDLE,
	F_RUN
};

typedef struct field_spec {
	const char *name;
	enum field_kind kind;
	bool required;
	int64_t min, max;
	size_t offset;
	const char *must; /* what the value must be, for the message */
} field_spec;

#define MAX_FIELDS 6
#define INT_FIELD(field, required, min, max, must)                            \
	{#field, F_INT, required, min, max, offsetof(proto_request, field), must}
#define JOB_FIELD(required)                                                   \
	INT_FIELD(job, required, 1, INT64_MAX, "a positive integer")
#define KEY_FIELD(required)                                                   \
	{"key", F_KEY, required, 0, 0, 0, "64 lowercase hex digits"}
#define COUNT_FIELD(name)                                                     \
	INT_FIELD(name, false, 0, INT64_MAX, "a non-negative integer")
#define RUN_FIELD(required)                                                            \
	{                                                                              \
		"run", F_RUN, required, 0, 0, 0,                                       \
			"a string of 1 to 128 bytes with no control characters"        \
	}
#define KEYS_FIELD                                                                     \
	{                                                                              \
		"keys", F_KEYS, false, 0, 0, 0,                                        \
			"a non-empty array of keys (64 lowercase hex digits)"          \
	}

static const field_spec op_fields[PROTO_NOPS][MAX_FIELDS] = {
	[PROTO_OP_HELLO] = {INT_FIELD(version, true, 1, INT64_MAX,
				      "a positive integer")},
	[PROTO_OP_SUBMIT] =
		{
			{"graph", F_GRAPH, true, 0, 0, 0,
			 "an object or a non-empty string"},
			{"budget", F_BUDGET, false, 0, 0, 0, "a positive number"},
			INT_FIELD(priority, false, PROTO_PRIORITY_MIN,
				  PROTO_PRIORITY_MAX, "an integer from -1000 to 1000"),
			INT_FIELD(trials, false, 1, PROTO_TRIALS_MAX,
				  "an integer from 1 to 1000000"),
			{"grad", F_NAMES, false, 0, 0, 0,
			 "a non-empty array of at most 256 tensor names (non-empty "
			 "strings)"},
			{"save", F_SAVE, false, 0, 0, 0,
			 "\"none\", \"auto\" or \"all\""},
		},
	[PROTO_OP_STATUS] = {JOB_FIELD(true)},
	[PROTO_OP_CANCEL] = {JOB_FIELD(true)},
	[PROTO_OP_FETCH] =
		{
			KEY_FIELD(false),
			JOB_FIELD(false),
			COUNT_FIELD(min_version),
			INT_FIELD(timeout_ms, false, 0, PROTO_TIMEOUT_MAX_MS,
				  "an integer from 0 to 3600000"),
			RUN_FIELD(false),
		},
	[PROTO_OP_WATCH] = {KEY_FIELD(true)},
	[PROTO_OP_CACHE_SHOW] = {KEY_FIELD(true)},
	[PROTO_OP_CACHE_PRUNE] = {COUNT_FIELD(max_age_s), COUNT_FIELD(max_bytes)},
	[PROTO_OP_CACHE_EXPORT] = {KEYS_FIELD},
	[PROTO_OP_CACHE_IMPORT] = {{"export", F_BUNDLE, true, 0, 0, 0,
				    "an object (what cache.export gave)"}},
	[PROTO_OP_CACHE_QUARANTINE] = {KEY_FIELD(false)},
	[PROTO_OP_ADVANCE] = {RUN_FIELD(true), KEYS_FIELD},
};

/* "s" for a message: at most 32 bytes of it, cut between UTF-8 sequences,
 * control characters as '?', and "..." when cut. */
static const char *shorten(const char *s, char out[40])
{
	size_t n = 0;

	while (s[n] && n < 32)
		n++;
	while (s[n] && n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
		n--;
	for (size_t i = 0; i < n; i++)
		out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	strcpy(out + n, s[n] ? "..." : "");
	return out;
}

static const field_spec *find_field(enum proto_op op, const char *name)
{
	for (int i = 0; i < MAX_FIELDS && op_fields[op][i].name; i++)
		if (!strcmp(op_fields[op][i].name, name))
			return &op_fields[op][i];
	return NULL;
}

static bool is_key(const json_t *value)
{
	const char *s = json_string_value(value);

	if (!s || json_string_length(value) != PROTO_KEY_HEX)
		return false;
	for (int i = 0; i < PROTO_KEY_HEX; i++)
		if (!(s[i] >= '0' && s[i] <= '9') && !(s[i] >= 'a' && s[i] <= 'f'))
			return false;
	return true;
}

static bool is_names(const json_t *value)
{
	json_t *name;
	size_t i;

	if (!json_is_array(value) || json_array_size(value) == 0 ||
	    json_array_size(value) > PROTO_GRAD_MAX)
		return false;
	json_array_foreach(value, i, name)
		if (!json_is_string(name) || json_string_length(name) == 0)
			return false;
	return true;
}

static bool is_keys(const json_t *value)
{
	json_t *key;
	size_t i;

	if (!json_is_array(value) || json_array_size(value) == 0)
		return false;
	json_array_foreach(value, i, key)
		if (!is_key(key))
			return false;
	return true;
}

/* A training run's id: 1 to PROTO_RUN_MAX bytes, no control characters
 * (the run names itself in messages and logs). */
static bool is_run(const json_t *value)
{
	const char *s = json_string_value(value);
	size_t len = s ? json_string_length(value) : 0;

	if (len == 0 || len > PROTO_RUN_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

static int refuse(const field_spec *f, proto_error *err)
{
	return proto_error_set(err, PROTO_EBAD_REQUEST, "params.%s must be %s",
			       f->name, f->must);
}

static int check_budget(const field_spec *f, json_t *value, proto_request *req,
			proto_error *err)
{
	double budget = json_number_value(value);

	if (!json_is_number(value) || !(budget > 0))
		return refuse(f, err);
	if (budget > PROTO_BUDGET_MAX_S)
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "params.budget must be at most %.0f seconds",
				       PROTO_BUDGET_MAX_S);
	req->has_budget = true;
	req->budget_s = budget;
	return 0;
}

/* The PROTO_SAVE_* of "value" ("none", "auto", "all"), or -1. */
static int save_mode(const json_t *value)
{
	static const char *const names[] = {"none", "auto", "all"};
	const char *s = json_string_value(value);

	for (int m = 0; s && m < 3; m++)
		if (!strcmp(s, names[m]))
			return m;
	return -1;
}

/* Checks "value" against "f" and stores it in "req". */
static int check_field(const field_spec *f, json_t *value, proto_request *req,
		       proto_error *err)
{
	json_int_t n = json_integer_value(value);

	switch (f->kind) {
	case F_INT:
		if (!json_is_integer(value) || n < f->min || n > f->max)
			return refuse(f, err);
		*(int64_t *)((char *)req + f->offset) = n;
		return 0;
	case F_BUDGET:
		return check_budget(f, value, req, err);
	case F_GRAPH:
		if (!json_is_object(value) &&
		    !(json_is_string(value) && json_string_length(value) > 0))
			return refuse(f, err);
		req->graph = value;
		return 0;
	case F_NAMES:
		if (!is_names(value))
			return refuse(f, err);
		req->grad = value;
		return 0;
	case F_SAVE:
		if ((req->save = save_mode(value)) < 0)
			return refuse(f, err);
		return 0;
	case F_KEY:
		if (!is_key(value))
			return refuse(f, err);
		memcpy(req->key, json_string_value(value), PROTO_KEY_HEX + 1);
		return 0;
	case F_KEYS:
		if (!is_keys(value))
			return refuse(f, err);
		req->keys = value;
		return 0;
	case F_BUNDLE:
		if (!json_is_object(value))
			return refuse(f, err);
		req->bundle = value;
		return 0;
	case F_RUN:
		if (!is_run(value))
			return refuse(f, err);
		memcpy(req->run, json_string_value(value),
		       json_string_length(value) + 1);
		return 0;
	}
	return proto_error_set(err, PROTO_EINTERNAL, "unknown field kind");
}

/* Checks the object "params" of "op": unknown keys in the order given,
 * then each field in the order of the schema, then the rules across
 * fields. Stores the values in "req". */
static int check_params(enum proto_op op, json_t *params, proto_request *req,
			proto_error *err)
{
	const char *key;
	json_t *value;
	char quoted[40];
	int rc;

	json_object_foreach(params, key, value) {
		if (!find_field(op, key))
			return proto_error_set(err, PROTO_EBAD_REQUEST,
					       "unknown key '%s' in params of '%s'",
					       shorten(key, quoted), op_names[op]);
	}
	for (int i = 0; i < MAX_FIELDS && op_fields[op][i].name; i++) {
		const field_spec *f = &op_fields[op][i];

		value = json_object_get(params, f->name);
		if (!value && f->required)
			return proto_error_set(err, PROTO_EBAD_REQUEST,
					       "params.%s is missing", f->name);
		if (value && (rc = check_field(f, value, req, err)) < 0)
			return rc;
	}
	if (op == PROTO_OP_FETCH && (req->key[0] != 0) == (req->job != 0))
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "params must have exactly one of key and job");
	if (op == PROTO_OP_FETCH && req->run[0] &&
	    json_object_get(params, "min_version"))
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "params.min_version cannot go with run: a "
				       "run gets the version it is pinned to "
				       "(advance moves it)");
	if (op == PROTO_OP_SUBMIT && !req->grad && json_object_get(params, "save"))
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "params.save goes with params.grad: it says "
				       "what the backward graph reads saved");
	return 0;
}

static void request_reset(proto_request *req)
{
	memset(req, 0, sizeof(*req));
	req->op = PROTO_OP_NONE;
	req->max_age_s = -1;
	req->max_bytes = -1;
}

void proto_request_release(proto_request *req)
{
	json_decref(req->id);
	json_decref(req->params);
	request_reset(req);
}

static int refuse_id(proto_error *err)
{
	return proto_error_set(err, PROTO_EBAD_REQUEST,
			       "id must be a non-negative integer or a string "
			       "of at most %d bytes", PROTO_ID_MAX);
}

/* The id, then the op: each needed to answer the rest. */
static int read_id_and_op(json_t *root, proto_request *req, proto_error *err)
{
	json_t *id = json_object_get(root, "id");
	json_t *op = json_object_get(root, "op");
	char quoted[40];

	if (!id)
		return proto_error_set(err, PROTO_EBAD_REQUEST, "id is missing");
	if (!proto_id_is_valid(id))
		return refuse_id(err);
	req->id = json_incref(id);
	if (!op)
		return proto_error_set(err, PROTO_EBAD_REQUEST, "op is missing");
	if (!json_is_string(op))
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "op must be a string");
	req->op = proto_op_from_name(json_string_value(op));
	if (req->op == PROTO_OP_NONE)
		return proto_error_set(err, PROTO_EUNKNOWN_OP, "unknown op '%s'",
				       shorten(json_string_value(op), quoted));
	return 0;
}

static int read_envelope(json_t *root, proto_request *req, proto_error *err)
{
	const char *key;
	json_t *value, *params;
	char quoted[40];
	int rc;

	if (!json_is_object(root))
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "request must be a json object");
	if ((rc = read_id_and_op(root, req, err)) < 0)
		return rc;
	json_object_foreach(root, key, value) {
		if (strcmp(key, "id") && strcmp(key, "op") && strcmp(key, "params"))
			return proto_error_set(err, PROTO_EBAD_REQUEST,
					       "unknown key '%s' in request",
					       shorten(key, quoted));
	}
	params = json_object_get(root, "params");
	if (params && !json_is_object(params))
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "params must be an object");
	req->params = params ? json_incref(params) : json_object();
	if (!req->params)
		return proto_error_set(err, PROTO_EINTERNAL, "out of memory");
	return 0;
}

static int refuse_json(const json_error_t *jerr, proto_error *err)
{
	proto_error_set(err, PROTO_EBAD_REQUEST, "invalid json at column %d: %s",
			jerr->column, jerr->text);
	if (err)
		err->column = jerr->column;
	return PROTO_EBAD_REQUEST;
}

static int check_version(const proto_request *req, proto_error *err)
{
	if (req->op != PROTO_OP_HELLO || req->version == PROTO_VERSION)
		return 0;
	proto_error_set(err, PROTO_EVERSION_MISMATCH,
			"version %lld is not supported: this server speaks "
			"version %d", (long long)req->version, PROTO_VERSION);
	if (err)
		err->closes = true;
	return PROTO_EVERSION_MISMATCH;
}

int proto_parse_request(const char *line, size_t len, proto_request *out,
			proto_error *err)
{
	json_error_t jerr;
	json_t *root;
	int rc;

	request_reset(out);
	root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return refuse_json(&jerr, err);
	rc = read_envelope(root, out, err);
	json_decref(root);
	if (rc == 0)
		rc = check_params(out->op, out->params, out, err);
	if (rc == 0)
		rc = check_version(out, err);
	return rc;
}

/* The request's message, before it becomes a line. */
static json_t *request_object(enum proto_op op, json_t *id, json_t *params)
{
	json_t *msg = json_object();

	if (!msg || json_object_set(msg, "id", id) < 0 ||
	    json_object_set_new(msg, "op", json_string(op_names[op])) < 0 ||
	    json_object_set(msg, "params", params) < 0) {
		json_decref(msg);
		return NULL;
	}
	return msg;
}

char *proto_request_line(enum proto_op op, json_t *id, json_t *params,
			 proto_error *err)
{
	proto_request scratch;
	char *line = NULL;

	request_reset(&scratch);
	if (!params)
		params = json_object();
	if (!params)
		proto_error_set(err, PROTO_EINTERNAL, "out of memory");
	else if (!proto_op_name(op))
		proto_error_set(err, PROTO_EUNKNOWN_OP, "unknown op %d", (int)op);
	else if (!id || !proto_id_is_valid(id))
		refuse_id(err);
	else if (!json_is_object(params))
		proto_error_set(err, PROTO_EBAD_REQUEST, "params must be an object");
	else if (check_params(op, params, &scratch, err) == 0 &&
		 !(line = proto_dump_line(request_object(op, id, params))))
		proto_error_set(err, PROTO_EINTERNAL, "out of memory");
	json_decref(params);
	return line;
}
