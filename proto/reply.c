/*
 * reply.c: what the daemon sends: replies {"id", "result"} and
 * {"id", "error": {"code", "message"}}, events {"event", "data"}; each one
 * line. And their reading, for clients.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

typedef struct line_buffer {
	char *text;
	size_t len, cap;
} line_buffer;

static int append(const char *bytes, size_t n, void *data)
{
	line_buffer *out = data;

	if (out->len + n + 2 > out->cap) {
		size_t cap = out->cap ? out->cap : 256;
		char *text;

		while (cap < out->len + n + 2)
			cap *= 2;
		text = realloc(out->text, cap);
		if (!text)
			return -1;
		out->text = text;
		out->cap = cap;
	}
	memcpy(out->text + out->len, bytes, n);
	out->len += n;
	return 0;
}

char *proto_dump_line(json_t *msg)
{
	line_buffer out = {0};
	int rc;

	if (!msg)
		return NULL;
	rc = json_dump_callback(msg, append, &out,
				JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(msg);
	if (rc < 0 || !out.text) {
		free(out.text);
		return NULL;
	}
	out.text[out.len] = '\n';
	out.text[out.len + 1] = 0;
	return out.text;
}

/* The object {"k1": v1, "k2": v2}, both values taken; NULL when either
 * is NULL or memory runs out. */
static json_t *pair(const char *k1, json_t *v1, const char *k2, json_t *v2)
{
	json_t *msg = v1 && v2 ? json_object() : NULL;

	if (!msg) {
		json_decref(v1);
		json_decref(v2);
		return NULL;
	}
	if (json_object_set_new(msg, k1, v1) < 0) {
		json_decref(v2);
		json_decref(msg);
		return NULL;
	}
	if (json_object_set_new(msg, k2, v2) < 0) {
		json_decref(msg);
		return NULL;
	}
	return msg;
}

/* {"id": "id", "name": "value"}, "value" taken, as a line. */
static char *reply_line(json_t *id, const char *name, json_t *value)
{
	json_t *id_value = id ? json_incref(id) : json_null();

	return proto_dump_line(pair("id", id_value, name, value));
}

char *proto_reply_result(json_t *id, json_t *result)
{
	return reply_line(id, "result", result);
}

char *proto_reply_from_error(json_t *id, const proto_error *err)
{
	const char *name = proto_code_name(err->code);
	proto_error clean;

	if (!name || err->code == 0)
		name = proto_code_name(PROTO_EINTERNAL);
	/* the message again through proto_error_set: valid UTF-8 */
	proto_error_set(&clean, err->code, "%s", err->message);
	return reply_line(id, "error",
			  json_pack("{s:s, s:s}", "code", name, "message",
				    clean.message));
}

char *proto_reply_error(json_t *id, int code, const char *fmt, ...)
{
	proto_error err;
	va_list ap;

	va_start(ap, fmt);
	proto_error_setv(&err, code, fmt, ap);
	va_end(ap);
	return proto_reply_from_error(id, &err);
}

char *proto_event(const char *name, json_t *data)
{
	size_t len = name ? strlen(name) : 0;

	if (!json_is_object(data) || len == 0 || len >= PROTO_EVENT_NAME_MAX) {
		json_decref(data);
		return NULL;
	}
	return proto_dump_line(pair("event", json_string(name), "data", data));
}

json_t *proto_hello_result(const char *server_version)
{
	json_t *result;
	size_t len;
	char *server;

	if (!server_version)
		return NULL;
	result = json_object();
	len = strlen(server_version);
	server = malloc(len + 7);

	if (server) {
		memcpy(server, "tuned ", 6);
		memcpy(server + 6, server_version, len + 1);
	}
	if (!result || !server ||
	    json_object_set_new(result, "version",
				json_integer(PROTO_VERSION)) < 0 ||
	    json_object_set_new(result, "server", json_string(server)) < 0) {
		json_decref(result);
		result = NULL;
	}
	free(server);
	return result;
}

static const char *const job_states[] = {
	[PROTO_JOB_QUEUED] = "queued",
	[PROTO_JOB_RUNNING] = "running",
	[PROTO_JOB_DONE] = "done",
	[PROTO_JOB_FAILED] = "failed",
	[PROTO_JOB_CANCELLED] = "cancelled",
};

#define NSTATES ((int)(sizeof(job_states) / sizeof(job_states[0])))

const char *proto_job_state_name(enum proto_job_state state)
{
	if ((int)state < 0 || (int)state >= NSTATES)
		return NULL;
	return job_states[state];
}

int proto_job_state_from_name(const char *name)
{
	for (int i = 0; name && i < NSTATES; i++)
		if (!strcmp(job_states[i], name))
			return i;
	return -1;
}

static int refuse(proto_error *err, const char *what)
{
	return proto_error_set(err, PROTO_EBAD_REQUEST, "%s", what);
}

static int read_event(json_t *root, json_t *event, proto_reply *out,
		      proto_error *err)
{
	json_t *data = json_object_get(root, "data");
	size_t len = json_string_length(event);

	if (!json_is_string(event) || len == 0 || len >= PROTO_EVENT_NAME_MAX)
		return refuse(err, "event must be a non-empty string of at "
				   "most 63 bytes");
	if (!json_is_object(data))
		return refuse(err, "data must be an object");
	out->kind = PROTO_REPLY_EVENT;
	memcpy(out->event, json_string_value(event), len + 1);
	out->value = json_incref(data);
	return 0;
}

static int read_error(json_t *error, proto_reply *out, proto_error *err)
{
	const char *code = json_string_value(json_object_get(error, "code"));
	const char *message =
		json_string_value(json_object_get(error, "message"));
	int n = proto_code_from_name(code);

	if (!json_is_object(error))
		return refuse(err, "error must be an object");
	if (!code)
		return refuse(err, "error.code must be a string");
	if (!message)
		return refuse(err, "error.message must be a string");
	out->kind = PROTO_REPLY_ERROR;
	proto_error_set(&out->error, n < 0 ? n : PROTO_EINTERNAL, "%s",
			message);
	return 0;
}

static int read_reply(json_t *root, proto_reply *out, proto_error *err)
{
	json_t *event = json_object_get(root, "event");
	json_t *result = json_object_get(root, "result");
	json_t *error = json_object_get(root, "error");
	json_t *id = json_object_get(root, "id");

	if (!json_is_object(root))
		return refuse(err, "reply must be a json object");
	if (!!event + !!result + !!error != 1)
		return refuse(err, "reply must have exactly one of result, "
				   "error and event");
	if (event)
		return read_event(root, event, out, err);
	if (!id)
		return refuse(err, "id is missing");
	if (!proto_id_is_valid(id) && !(error && json_is_null(id)))
		return refuse(err, "id must be a non-negative integer or a "
				   "string of at most 64 bytes");
	out->id = json_incref(id);
	if (error)
		return read_error(error, out, err);
	if (!json_is_object(result))
		return refuse(err, "result must be an object");
	out->kind = PROTO_REPLY_RESULT;
	out->value = json_incref(result);
	return 0;
}

static void reply_reset(proto_reply *reply)
{
	memset(reply, 0, sizeof(*reply));
}

void proto_reply_release(proto_reply *reply)
{
	json_decref(reply->id);
	json_decref(reply->value);
	reply_reset(reply);
}

int proto_parse_reply(const char *line, size_t len, proto_reply *out,
		      proto_error *err)
{
	json_error_t jerr;
	json_t *root;
	int rc;

	reply_reset(out);
	root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		proto_error_set(err, PROTO_EBAD_REQUEST,
				"invalid json at column %d: %s", jerr.column,
				jerr.text);
		if (err)
			err->column = jerr.column;
		return PROTO_EBAD_REQUEST;
	}
	rc = read_reply(root, out, err);
	json_decref(root);
	return rc;
}
