/*
 * test_fuzz.c: random bytes and mutated valid requests, through the
 * framer, the request parser, the reply parser and the builders: nothing
 * crashes or leaks, every refusal has a code and a valid message, every
 * accepted request builds again into a line that reads the same. The loop
 * is bounded in iterations and in time.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto.h"

#define ITERATIONS 100000
#define SECONDS 8.0
#define KEY "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const char *const seeds[] = {
	"{\"id\":1,\"op\":\"hello\",\"params\":{\"version\":1}}",
	"{\"id\":\"a\",\"op\":\"ping\"}",
	"{\"id\":3,\"op\":\"submit\",\"params\":{\"graph\":{\"version\":1,"
	"\"tensors\":{\"x\":{\"shape\":[4],\"dtype\":\"f32\"}},\"ops\":[]},"
	"\"budget\":60,\"priority\":5}}",
	"{\"id\":4,\"op\":\"status\",\"params\":{\"job\":7}}",
	"{\"id\":5,\"op\":\"list\",\"params\":{}}",
	"{\"id\":6,\"op\":\"cancel\",\"params\":{\"job\":7}}",
	"{\"id\":7,\"op\":\"fetch\",\"params\":{\"key\":\"" KEY "\","
	"\"min_version\":2,\"timeout_ms\":100}}",
	"{\"id\":7,\"op\":\"fetch\",\"params\":{\"job\":3}}",
	"{\"id\":8,\"op\":\"watch\",\"params\":{\"key\":\"" KEY "\"}}",
	"{\"id\":9,\"op\":\"stats\"}",
	"{\"id\":10,\"op\":\"cache.list\"}",
	"{\"id\":11,\"op\":\"cache.show\",\"params\":{\"key\":\"" KEY "\"}}",
	"{\"id\":12,\"op\":\"cache.prune\",\"params\":{\"max_age_s\":86400,"
	"\"max_bytes\":1000}}",
	"{\"id\":1,\"result\":{\"version\":1,\"server\":\"tuned 0.1.0\"}}",
	"{\"id\":null,\"error\":{\"code\":\"bad_request\",\"message\":\"x\"}}",
	"{\"event\":\"progress\",\"data\":{\"job\":1,\"trials\":5}}",
};

#define NSEEDS (sizeof(seeds) / sizeof(seeds[0]))

static const char *const tokens[] = {
	"{", "}", "[", "]", "\"", ":", ",", "null", "true", "-1", "0", "1.5",
	"1e999", "99999999999999999999", "\\u0000", "\\ud800", "\xff", "\xc3",
	"\n", "\r", " ", "\"id\"", "\"op\"", "\"params\"", "\"job\"", "\"key\"",
	"\"version\":2", "\"graph\"", "\"budget\":0", "\"" KEY "\"",
};

#define NTOKENS (sizeof(tokens) / sizeof(tokens[0]))
#define CAP 4096

/* One mutation of the "*len" bytes in "buf" (at most CAP). */
static void mutate(char *buf, size_t *len, unsigned *seed)
{
	size_t at = *len ? (size_t)rand_r(seed) % *len : 0;
	const char *tok = tokens[rand_r(seed) % NTOKENS];
	size_t n = strlen(tok), cut;

	switch (rand_r(seed) % 6) {
	case 0: /* flip a byte */
		if (*len)
			buf[at] = (char)rand_r(seed);
		break;
	case 1: /* insert a token */
		if (*len + n <= CAP) {
			memmove(buf + at + n, buf + at, *len - at);
			memcpy(buf + at, tok, n);
			*len += n;
		}
		break;
	case 2: /* delete a span */
		cut = (size_t)rand_r(seed) % 8;
		if (cut > *len - at)
			cut = *len - at;
		memmove(buf + at, buf + at + cut, *len - at - cut);
		*len -= cut;
		break;
	case 3: /* truncate */
		*len = at;
		break;
	case 4: /* duplicate a span */
		cut = (size_t)rand_r(seed) % 32;
		if (cut > *len - at)
			cut = *len - at;
		if (*len + cut <= CAP) {
			memmove(buf + at + cut, buf + at, *len - at);
			*len += cut;
		}
		break;
	default: /* replace a token */
		if (at + n <= *len)
			memcpy(buf + at, tok, n);
	}
}

/* The next input: random bytes, or a seed mutated a few times. */
static size_t next_input(char *buf, unsigned *seed)
{
	const char *seed_text;
	size_t len;

	if (rand_r(seed) % 8 == 0) {
		len = (size_t)rand_r(seed) % 200;
		for (size_t i = 0; i < len; i++)
			buf[i] = (char)rand_r(seed);
		return len;
	}
	seed_text = seeds[(size_t)rand_r(seed) % NSEEDS];
	len = strlen(seed_text);
	memcpy(buf, seed_text, len);
	for (int k = 1 + rand_r(seed) % 4; k > 0; k--)
		mutate(buf, &len, seed);
	return len;
}

/* "line" (from a builder) is one line of JSON. */
static void check_line(char *line)
{
	size_t len;

	cr_assert_not_null(line);
	len = strlen(line);
	cr_assert(len > 1 && line[len - 1] == '\n' &&
		  memchr(line, '\n', len - 1) == NULL, "%s", line);
	free(line);
}

static void check_refusal(int rc, const proto_error *err, json_t *id)
{
	json_t *message;

	cr_assert(rc < 0 && rc >= -PROTO_NCODES, "rc %d", rc);
	cr_assert_eq(err->code, rc);
	cr_assert_gt(strlen(err->message), 0);
	message = json_string(err->message);
	cr_assert_not_null(message, "invalid UTF-8 in '%s'", err->message);
	json_decref(message);
	cr_assert(id == NULL || proto_id_is_valid(id));
	check_line(proto_reply_from_error(id, err));
}

/* An accepted request builds again into a line that reads the same. */
static void check_accepted(proto_request *req)
{
	proto_error err = {0};
	char *line;
	proto_request again;

	cr_assert(proto_op_name(req->op) && proto_id_is_valid(req->id) &&
		  json_is_object(req->params));
	line = proto_request_line(req->op, req->id, json_incref(req->params),
				  &err);
	cr_assert_not_null(line, "%s", err.message);
	cr_assert_eq(proto_parse_request(line, strlen(line) - 1, &again, &err),
		     0, "%s: %s", line, err.message);
	cr_assert_eq(again.op, req->op);
	cr_assert(json_equal(again.id, req->id) &&
		  json_equal(again.params, req->params));
	proto_request_release(&again);
	free(line);
	check_line(proto_reply_result(req->id, json_object()));
}

static void check_reply_parser(const char *buf, size_t len)
{
	proto_reply reply;
	proto_error err = {0};

	if (proto_parse_reply(buf, len, &reply, &err) < 0)
		cr_assert_eq(err.code, PROTO_EBAD_REQUEST);
	else if (reply.kind == PROTO_REPLY_EVENT)
		check_line(proto_event(reply.event, json_incref(reply.value)));
	proto_reply_release(&reply);
}

/* The input through a small framer in random chunks. */
static void check_framer(const char *buf, size_t len, unsigned *seed)
{
	proto_framer *framer = proto_framer_new(1 + (size_t)rand_r(seed) % 64);
	const char *line;
	size_t n, at = 0;
	int rc = 0;

	while (at < len && rc >= 0) {
		size_t chunk = 1 + (size_t)rand_r(seed) % 16;

		if (chunk > len - at)
			chunk = len - at;
		cr_assert_eq(proto_framer_feed(framer, buf + at, chunk), 0);
		while ((rc = proto_framer_next(framer, &line, &n, NULL)) == 1)
			cr_assert(n <= proto_framer_limit(framer) &&
				  !memchr(line, '\n', n));
		cr_assert(rc == 0 || rc == PROTO_ETOO_LARGE);
		at += chunk;
	}
	proto_framer_free(framer);
}

static double seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

Test(fuzz, requests_replies_and_frames_never_crash, .timeout = 60)
{
	static char buf[CAP];
	unsigned seed = 20240601;
	double start = seconds();
	int i, accepted = 0;

	for (i = 0; i < ITERATIONS; i++) {
		size_t len = next_input(buf, &seed);
		proto_request req;
		proto_error err = {0};
		int rc = proto_parse_request(buf, len, &req, &err);

		if (rc == 0)
			check_accepted(&req), accepted++;
		else
			check_refusal(rc, &err, req.id);
		proto_request_release(&req);
		check_reply_parser(buf, len);
		if (i % 8 == 0)
			check_framer(buf, len, &seed);
		if (i % 1024 == 0 && seconds() - start > SECONDS)
			break;
	}
	cr_log_info("%d inputs, %d accepted, %.1f s", i, accepted,
		    seconds() - start);
	cr_expect_gt(accepted, 0);
	cr_expect_lt(accepted, i);
}

/* jansson's allocations fail after "alloc_budget" more of them. */
static long alloc_budget = -1;

static void *failing_malloc(size_t size)
{
	if (alloc_budget == 0)
		return NULL;
	if (alloc_budget > 0)
		alloc_budget--;
	return malloc(size);
}

/* One round of everything that allocates, each result checked. */
static void allocate_everything(void)
{
	static const char submit[] = "{\"id\":\"s\",\"op\":\"submit\",\"params\":"
				     "{\"graph\":{\"version\":1,\"ops\":[\"a\"]},"
				     "\"budget\":5,\"priority\":1}}";
	static const char event[] = "{\"event\":\"job\",\"data\":{\"id\":1}}";
	proto_request req;
	proto_reply reply;
	proto_error err = {0};
	char *line;

	if (proto_parse_request(submit, strlen(submit), &req, &err) == 0) {
		free(proto_request_line(req.op, req.id, json_incref(req.params),
					&err));
		free(proto_reply_result(req.id, proto_hello_result("0.1.0")));
	}
	free(proto_reply_error(req.id, PROTO_EBUSY, "busy %d", 1));
	proto_request_release(&req);
	proto_parse_reply(event, strlen(event), &reply, &err);
	proto_reply_release(&reply);
	line = proto_event("progress", json_pack("{s:i, s:f}", "job", 1,
						 "best_ms", 0.5));
	free(line);
}

Test(faults, failing_allocations_neither_crash_nor_leak)
{
	json_set_alloc_funcs(failing_malloc, free);
	for (long n = 0; n < 200; n++) {
		alloc_budget = n;
		allocate_everything();
	}
	alloc_budget = -1;
	allocate_everything();
	json_set_alloc_funcs(malloc, free);
}
