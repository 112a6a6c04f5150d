/*
 * test_proto.c: requests. A valid example of every op, read into its typed
 * fields; malformed requests, each refused with its code and message and
 * answered with the id echoed (or null); what closes a connection.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define KEY "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static int parse(const char *line, proto_request *req, proto_error *err)
{
	return proto_parse_request(line, strlen(line), req, err);
}

static void must_parse(const char *line, proto_request *req)
{
	proto_error err = {0};
	int rc = parse(line, req, &err);

	cr_assert_eq(rc, 0, "refused %s: %s", line, err.message);
}

Test(request, every_op_has_a_valid_example)
{
	static const struct {
		const char *line;
		enum proto_op op;
	} cases[] = {
		{"{\"id\":1,\"op\":\"hello\",\"params\":{\"version\":1}}",
		 PROTO_OP_HELLO},
		{"{\"id\":2,\"op\":\"ping\"}", PROTO_OP_PING},
		{"{\"id\":3,\"op\":\"submit\",\"params\":{\"graph\":{\"version\":1},"
		 "\"budget\":60,\"priority\":5}}",
		 PROTO_OP_SUBMIT},
		{"{\"id\":4,\"op\":\"status\",\"params\":{\"job\":7}}",
		 PROTO_OP_STATUS},
		{"{\"id\":5,\"op\":\"list\",\"params\":{}}", PROTO_OP_LIST},
		{"{\"id\":6,\"op\":\"cancel\",\"params\":{\"job\":7}}",
		 PROTO_OP_CANCEL},
		{"{\"id\":7,\"op\":\"fetch\",\"params\":{\"key\":\"" KEY "\"}}",
		 PROTO_OP_FETCH},
		{"{\"id\":8,\"op\":\"watch\",\"params\":{\"key\":\"" KEY "\"}}",
		 PROTO_OP_WATCH},
		{"{\"id\":9,\"op\":\"stats\"}", PROTO_OP_STATS},
		{"{\"id\":10,\"op\":\"cache.list\"}", PROTO_OP_CACHE_LIST},
		{"{\"id\":11,\"op\":\"cache.show\",\"params\":{\"key\":\"" KEY "\"}}",
		 PROTO_OP_CACHE_SHOW},
		{"{\"id\":12,\"op\":\"cache.prune\",\"params\":{\"max_age_s\":"
		 "86400}}",
		 PROTO_OP_CACHE_PRUNE},
		{"{\"id\":13,\"op\":\"cache.export\",\"params\":{\"keys\":[\"" KEY
		 "\"]}}",
		 PROTO_OP_CACHE_EXPORT},
		{"{\"id\":14,\"op\":\"cache.import\",\"params\":{\"export\":"
		 "{\"entries\":[]}}}",
		 PROTO_OP_CACHE_IMPORT},
		{"{\"id\":15,\"op\":\"cache.quarantine\",\"params\":{\"key\":\"" KEY
		 "\"}}",
		 PROTO_OP_CACHE_QUARANTINE},
		{"{\"id\":16,\"op\":\"advance\",\"params\":{\"run\":\"r1\"}}",
		 PROTO_OP_ADVANCE},
	};

	cr_assert_eq(sizeof(cases) / sizeof(cases[0]), PROTO_NOPS);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		proto_request req;

		must_parse(cases[i].line, &req);
		cr_expect_eq(req.op, cases[i].op, "%s", cases[i].line);
		cr_expect_eq(json_integer_value(req.id), (json_int_t)i + 1);
		cr_expect(json_is_object(req.params));
		proto_request_release(&req);
	}
}

Test(request, hello_reads_the_version)
{
	proto_request req;

	must_parse("{\"op\":\"hello\",\"id\":0,\"params\":{\"version\":1}}", &req);
	cr_expect_eq(req.op, PROTO_OP_HELLO);
	cr_expect_eq(req.version, 1);
	cr_expect_eq(json_integer_value(req.id), 0);
	proto_request_release(&req);
}

Test(request, submit_reads_graph_budget_and_priority)
{
	proto_request req;

	must_parse("{\"id\":\"s1\",\"op\":\"submit\",\"params\":{\"graph\":"
		   "{\"version\":1,\"ops\":[]},\"budget\":2.5,\"priority\":-3}}",
		   &req);
	cr_expect(json_is_object(req.graph));
	cr_expect_eq(req.graph, json_object_get(req.params, "graph"));
	cr_expect(req.has_budget);
	cr_expect_float_eq(req.budget_s, 2.5, 1e-12);
	cr_expect_eq(req.priority, -3);
	cr_expect_str_eq(json_string_value(req.id), "s1");
	proto_request_release(&req);

	must_parse("{\"id\":1,\"op\":\"submit\",\"params\":{\"graph\":\"{}\"}}",
		   &req);
	cr_expect_str_eq(json_string_value(req.graph), "{}");
	cr_expect_not(req.has_budget);
	cr_expect_eq(req.priority, 0);
	proto_request_release(&req);

	must_parse("{\"id\":1,\"op\":\"submit\",\"params\":{\"graph\":\"x\","
		   "\"budget\":2592000,\"priority\":1000}}", &req);
	cr_expect_float_eq(req.budget_s, 2592000.0, 1e-9);
	cr_expect_eq(req.priority, 1000);
	cr_expect_null(req.grad);
	proto_request_release(&req);

	must_parse("{\"id\":1,\"op\":\"submit\",\"params\":{\"graph\":\"x\","
		   "\"grad\":[\"x\",\"W\"]}}", &req);
	cr_expect_eq(req.grad, json_object_get(req.params, "grad"));
	cr_expect_eq(json_array_size(req.grad), 2);
	cr_expect_eq(req.save, PROTO_SAVE_NONE);
	proto_request_release(&req);

	must_parse("{\"id\":1,\"op\":\"submit\",\"params\":{\"graph\":\"x\","
		   "\"grad\":[\"x\"],\"save\":\"auto\"}}",
		   &req);
	cr_expect_eq(req.save, PROTO_SAVE_AUTO);
	proto_request_release(&req);
}

#define GRAD_MUST                                                             \
	"params.grad must be a non-empty array of at most 256 tensor names "  \
	"(non-empty strings)"

/* PROTO_GRAD_MAX names are read; one more is refused. */
Test(request, submit_grad_names_are_bounded)
{
	char line[8192] = "{\"id\":1,\"op\":\"submit\",\"params\":{\"graph\":\"x\",\"grad\":[";
	proto_request req;
	proto_error err;

	for (int i = 0; i < PROTO_GRAD_MAX; i++)
		sprintf(line + strlen(line), "%s\"t%d\"", i ? "," : "", i);
	must_parse(strcat(line, "]}}"), &req);
	cr_expect_eq(json_array_size(req.grad), PROTO_GRAD_MAX);
	proto_request_release(&req);
	strcpy(line + strlen(line) - 3, ",\"one_more\"]}}");
	cr_expect_eq(proto_parse_request(line, strlen(line), &req, &err),
		     PROTO_EBAD_REQUEST);
	cr_expect_str_eq(err.message, GRAD_MUST);
	proto_request_release(&req);
}

Test(request, fetch_reads_key_or_job_and_waits)
{
	proto_request req;

	must_parse("{\"id\":1,\"op\":\"fetch\",\"params\":{\"key\":\"" KEY
		   "\",\"min_version\":3,\"timeout_ms\":3600000}}", &req);
	cr_expect_str_eq(req.key, KEY);
	cr_expect_eq(req.job, 0);
	cr_expect_eq(req.min_version, 3);
	cr_expect_eq(req.timeout_ms, 3600000);
	proto_request_release(&req);

	must_parse("{\"id\":1,\"op\":\"fetch\",\"params\":{\"job\":"
		   "9007199254740993}}", &req);
	cr_expect_str_eq(req.key, "");
	cr_expect_eq(req.job, 9007199254740993LL);
	cr_expect_eq(req.min_version, 0);
	cr_expect_eq(req.timeout_ms, 0);
	cr_expect_str_eq(req.run, "");
	proto_request_release(&req);
}

Test(request, fetch_and_advance_read_a_run)
{
	proto_request req;

	must_parse("{\"id\":1,\"op\":\"fetch\",\"params\":{\"key\":\"" KEY
		   "\",\"run\":\"bert-2026-11 rank set\",\"timeout_ms\":5}}",
		   &req);
	cr_expect_str_eq(req.run, "bert-2026-11 rank set");
	cr_expect_eq(req.timeout_ms, 5);
	proto_request_release(&req);

	must_parse("{\"id\":1,\"op\":\"advance\",\"params\":{\"run\":\"r\","
		   "\"keys\":[\"" KEY "\"]}}",
		   &req);
	cr_expect_str_eq(req.run, "r");
	cr_expect_eq(json_array_size(req.keys), 1);
	proto_request_release(&req);
}

Test(request, prune_limits_default_to_absent)
{
	proto_request req;

	must_parse("{\"id\":1,\"op\":\"cache.prune\"}", &req);
	cr_expect_eq(req.max_age_s, -1);
	cr_expect_eq(req.max_bytes, -1);
	proto_request_release(&req);
	must_parse("{\"id\":1,\"op\":\"cache.prune\",\"params\":{\"max_age_s\":0,"
		   "\"max_bytes\":1073741824}}", &req);
	cr_expect_eq(req.max_age_s, 0);
	cr_expect_eq(req.max_bytes, 1073741824);
	proto_request_release(&req);
}

Test(request, job_and_key_ops_read_their_fields)
{
	proto_request req;

	must_parse("{\"id\":1,\"op\":\"status\",\"params\":{\"job\":42}}", &req);
	cr_expect_eq(req.job, 42);
	proto_request_release(&req);
	must_parse("{\"id\":1,\"op\":\"cancel\",\"params\":{\"job\":1}}", &req);
	cr_expect_eq(req.job, 1);
	proto_request_release(&req);
	must_parse("{\"id\":1,\"op\":\"watch\",\"params\":{\"key\":\"" KEY "\"}}",
		   &req);
	cr_expect_str_eq(req.key, KEY);
	proto_request_release(&req);
	must_parse("{\"id\":1,\"op\":\"cache.show\",\"params\":{\"key\":\"" KEY
		   "\"}}", &req);
	cr_expect_str_eq(req.key, KEY);
	proto_request_release(&req);
}

Test(request, whitespace_and_key_order_do_not_matter)
{
	proto_request req;

	must_parse("  { \"params\" : { \"job\" : 5 } ,\t\"op\":\"status\", "
		   "\"id\": \"x\" }\r", &req);
	cr_expect_eq(req.op, PROTO_OP_STATUS);
	cr_expect_eq(req.job, 5);
	proto_request_release(&req);
}

Test(request, ids_are_echoed)
{
	static const struct {
		const char *line, *reply;
	} cases[] = {
		{"{\"id\":0,\"op\":\"ping\"}", "{\"id\":0,\"result\":{}}\n"},
		{"{\"id\":9223372036854775807,\"op\":\"ping\"}",
		 "{\"id\":9223372036854775807,\"result\":{}}\n"},
		{"{\"id\":\"\",\"op\":\"ping\"}", "{\"id\":\"\",\"result\":{}}\n"},
		{"{\"id\":\"req-\\u00e9\\n\",\"op\":\"ping\"}",
		 "{\"id\":\"req-\xc3\xa9\\n\",\"result\":{}}\n"},
		{"{\"id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		 "aaaaa\",\"op\":\"ping\"}",
		 "{\"id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		 "aaaaaaa\",\"result\":{}}\n"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		proto_request req;
		char *line;

		must_parse(cases[i].line, &req);
		line = proto_reply_result(req.id, json_object());
		cr_expect_str_eq(line, cases[i].reply);
		free(line);
		proto_request_release(&req);
	}
}

/* The malformed requests: the line, the code, the id the error reply
 * carries, and the message. */
typedef struct bad_case {
	const char *line;
	int code;
	const char *id;
	const char *message;
} bad_case;

#define BAD PROTO_EBAD_REQUEST
#define REQ(op, params) "{\"id\":1,\"op\":\"" op "\",\"params\":" params "}"
#define ID_MUST "id must be a non-negative integer or a string of at most 64 bytes"
#define RUN_MUST                                                                       \
	"params.run must be a string of 1 to 128 bytes with no control characters"
#define A64 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static const bad_case bad_cases[] = {
	/* not JSON, or not one object */
	{"not json", BAD, "null",
	 "invalid json at column 3: '[' or '{' expected near 'not'"},
	{"{\"id\":1,\"op\":\"pi", BAD, "null",
	 "invalid json at column 16: premature end of input near '\"pi'"},
	{"{\"id\":1,\"op\":\"ping\"} x", BAD, "null",
	 "invalid json at column 22: end of file expected near 'x'"},
	{"{\"id\":1,\"op\":\"ping\"}{\"id\":2,\"op\":\"ping\"}", BAD, "null",
	 "invalid json at column 21: end of file expected near '{'"},
	{"{\"id\":1,\"id\":2,\"op\":\"ping\"}", BAD, "null",
	 "invalid json at column 12: duplicate object key near '\"id\"'"},
	{"{\"id\":\"\xff\",\"op\":\"ping\"}", BAD, "null",
	 "invalid json at column 7: unable to decode byte 0xff near '\"'"},
	{"{\"id\":\"a\\u0000b\",\"op\":\"ping\"}", BAD, "null",
	 "invalid json at column 16: \\u0000 is not allowed without "
	 "JSON_ALLOW_NUL near '\"a\\u0000b\"'"},
	{"{\"id\":99999999999999999999,\"op\":\"ping\"}", BAD, "null",
	 "invalid json at column 26: too big integer near "
	 "'99999999999999999999'"},
	{"\"ping\"", BAD, "null",
	 "invalid json at column 6: '[' or '{' expected near '\"ping\"'"},
	{"[]", BAD, "null", "request must be a json object"},
	{"[{\"id\":1,\"op\":\"ping\"}]", BAD, "null", "request must be a json object"},
	/* the id */
	{"{}", BAD, "null", "id is missing"},
	{"{\"op\":\"ping\"}", BAD, "null", "id is missing"},
	{"{\"id\":-1,\"op\":\"ping\"}", BAD, "null", ID_MUST},
	{"{\"id\":1.5,\"op\":\"ping\"}", BAD, "null", ID_MUST},
	{"{\"id\":1.0,\"op\":\"ping\"}", BAD, "null", ID_MUST},
	{"{\"id\":null,\"op\":\"ping\"}", BAD, "null", ID_MUST},
	{"{\"id\":true,\"op\":\"ping\"}", BAD, "null", ID_MUST},
	{"{\"id\":[1],\"op\":\"ping\"}", BAD, "null", ID_MUST},
	{"{\"id\":{\"n\":1},\"op\":\"ping\"}", BAD, "null", ID_MUST},
	{"{\"id\":\"" A64 "b\",\"op\":\"ping\"}", BAD, "null", ID_MUST},
	/* the op, the envelope's keys, params */
	{"{\"id\":1}", BAD, "1", "op is missing"},
	{"{\"id\":\"q\",\"op\":3}", BAD, "\"q\"", "op must be a string"},
	{"{\"id\":1,\"op\":null}", BAD, "1", "op must be a string"},
	{"{\"id\":1,\"op\":\"frob\"}", PROTO_EUNKNOWN_OP, "1", "unknown op 'frob'"},
	{"{\"id\":1,\"op\":\"PING\"}", PROTO_EUNKNOWN_OP, "1", "unknown op 'PING'"},
	{"{\"id\":1,\"op\":\"\"}", PROTO_EUNKNOWN_OP, "1", "unknown op ''"},
	{"{\"id\":1,\"op\":\"cache\"}", PROTO_EUNKNOWN_OP, "1", "unknown op 'cache'"},
	{"{\"id\":1,\"op\":\"" A64 "\"}", PROTO_EUNKNOWN_OP, "1",
	 "unknown op 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'"},
	{"{\"id\":1,\"op\":\"a\\nb\"}", PROTO_EUNKNOWN_OP, "1", "unknown op 'a?b'"},
	{"{\"id\":1,\"op\":\"ping\",\"extra\":1}", BAD, "1",
	 "unknown key 'extra' in request"},
	{"{\"id\":1,\"op\":\"ping\",\"Params\":{}}", BAD, "1",
	 "unknown key 'Params' in request"},
	{"{\"id\":1,\"op\":\"ping\",\"params\":[]}", BAD, "1",
	 "params must be an object"},
	{"{\"id\":1,\"op\":\"ping\",\"params\":null}", BAD, "1",
	 "params must be an object"},
	{"{\"id\":1,\"op\":\"ping\",\"params\":\"\"}", BAD, "1",
	 "params must be an object"},
	{REQ("ping", "{\"x\":1}"), BAD, "1", "unknown key 'x' in params of 'ping'"},
	{REQ("list", "{\"state\":\"queued\"}"), BAD, "1",
	 "unknown key 'state' in params of 'list'"},
	{REQ("stats", "{\"verbose\":true}"), BAD, "1",
	 "unknown key 'verbose' in params of 'stats'"},
	{REQ("cache.list", "{\"limit\":10}"), BAD, "1",
	 "unknown key 'limit' in params of 'cache.list'"},
	/* hello */
	{"{\"id\":1,\"op\":\"hello\"}", BAD, "1", "params.version is missing"},
	{REQ("hello", "{\"version\":\"1\"}"), BAD, "1",
	 "params.version must be a positive integer"},
	{REQ("hello", "{\"version\":0}"), BAD, "1",
	 "params.version must be a positive integer"},
	{REQ("hello", "{\"version\":1.0}"), BAD, "1",
	 "params.version must be a positive integer"},
	{REQ("hello", "{\"version\":1,\"client\":\"x\"}"), BAD, "1",
	 "unknown key 'client' in params of 'hello'"},
	{REQ("hello", "{\"version\":2}"), PROTO_EVERSION_MISMATCH, "1",
	 "version 2 is not supported: this server speaks version 1"},
	/* submit */
	{REQ("submit", "{}"), BAD, "1", "params.graph is missing"},
	{REQ("submit", "{\"budget\":10}"), BAD, "1", "params.graph is missing"},
	{REQ("submit", "{\"graph\":5}"), BAD, "1",
	 "params.graph must be an object or a non-empty string"},
	{REQ("submit", "{\"graph\":\"\"}"), BAD, "1",
	 "params.graph must be an object or a non-empty string"},
	{REQ("submit", "{\"graph\":[]}"), BAD, "1",
	 "params.graph must be an object or a non-empty string"},
	{REQ("submit", "{\"graph\":{},\"grad\":[]}"), BAD, "1", GRAD_MUST},
	{REQ("submit", "{\"graph\":{},\"grad\":[\"x\"],\"save\":\"some\"}"), BAD, "1",
	 "params.save must be \"none\", \"auto\" or \"all\""},
	{REQ("submit", "{\"graph\":{},\"save\":\"all\"}"), BAD, "1",
	 "params.save goes with params.grad: it says what the backward graph "
	 "reads saved"},
	{REQ("submit", "{\"graph\":{},\"grad\":\"x\"}"), BAD, "1", GRAD_MUST},
	{REQ("submit", "{\"graph\":{},\"grad\":[\"\"]}"), BAD, "1", GRAD_MUST},
	{REQ("submit", "{\"graph\":{},\"grad\":[\"x\",1]}"), BAD, "1", GRAD_MUST},
	{REQ("submit", "{\"graph\":{},\"budget\":0}"), BAD, "1",
	 "params.budget must be a positive number"},
	{REQ("submit", "{\"graph\":{},\"budget\":-1.5}"), BAD, "1",
	 "params.budget must be a positive number"},
	{REQ("submit", "{\"graph\":{},\"budget\":\"10\"}"), BAD, "1",
	 "params.budget must be a positive number"},
	{REQ("submit", "{\"graph\":{},\"budget\":null}"), BAD, "1",
	 "params.budget must be a positive number"},
	{REQ("submit", "{\"graph\":{},\"budget\":1e9}"), BAD, "1",
	 "params.budget must be at most 2592000 seconds"},
	{REQ("submit", "{\"graph\":{},\"priority\":1.5}"), BAD, "1",
	 "params.priority must be an integer from -1000 to 1000"},
	{REQ("submit", "{\"graph\":{},\"priority\":1001}"), BAD, "1",
	 "params.priority must be an integer from -1000 to 1000"},
	{REQ("submit", "{\"graph\":{},\"priority\":\"high\"}"), BAD, "1",
	 "params.priority must be an integer from -1000 to 1000"},
	{REQ("submit", "{\"graph\":{},\"name\":\"x\"}"), BAD, "1",
	 "unknown key 'name' in params of 'submit'"},
	/* status, cancel */
	{REQ("status", "{}"), BAD, "1", "params.job is missing"},
	{REQ("status", "{\"job\":0}"), BAD, "1",
	 "params.job must be a positive integer"},
	{REQ("status", "{\"job\":\"3\"}"), BAD, "1",
	 "params.job must be a positive integer"},
	{REQ("status", "{\"job\":-5}"), BAD, "1",
	 "params.job must be a positive integer"},
	{REQ("cancel", "{\"job\":null}"), BAD, "1",
	 "params.job must be a positive integer"},
	{REQ("cancel", "{\"key\":\"" KEY "\"}"), BAD, "1",
	 "unknown key 'key' in params of 'cancel'"},
	/* fetch */
	{REQ("fetch", "{}"), BAD, "1", "params must have exactly one of key and job"},
	{REQ("fetch", "{\"min_version\":2}"), BAD, "1",
	 "params must have exactly one of key and job"},
	{REQ("fetch", "{\"key\":\"" KEY "\",\"job\":1}"), BAD, "1",
	 "params must have exactly one of key and job"},
	{REQ("fetch", "{\"key\":\"abc\"}"), BAD, "1",
	 "params.key must be 64 lowercase hex digits"},
	{REQ("fetch", "{\"key\":\"0123456789ABCDEF0123456789abcdef0123456789"
		      "abcdef0123456789abcdef\"}"),
	 BAD, "1", "params.key must be 64 lowercase hex digits"},
	{REQ("fetch", "{\"key\":\"g123456789abcdef0123456789abcdef0123456789"
		      "abcdef0123456789abcdef\"}"),
	 BAD, "1", "params.key must be 64 lowercase hex digits"},
	{REQ("fetch", "{\"key\":\"" KEY "0\"}"), BAD, "1",
	 "params.key must be 64 lowercase hex digits"},
	{REQ("fetch", "{\"key\":\"" KEY "\",\"min_version\":-1}"), BAD, "1",
	 "params.min_version must be a non-negative integer"},
	{REQ("fetch", "{\"job\":1,\"timeout_ms\":3600001}"), BAD, "1",
	 "params.timeout_ms must be an integer from 0 to 3600000"},
	{REQ("fetch", "{\"job\":1,\"timeout_ms\":-1}"), BAD, "1",
	 "params.timeout_ms must be an integer from 0 to 3600000"},
	{REQ("fetch", "{\"job\":1,\"timeout_ms\":1.5}"), BAD, "1",
	 "params.timeout_ms must be an integer from 0 to 3600000"},
	{REQ("fetch", "{\"job\":1,\"version\":2}"), BAD, "1",
	 "unknown key 'version' in params of 'fetch'"},
	{REQ("fetch", "{\"job\":1,\"run\":\"\"}"), BAD, "1", RUN_MUST},
	{REQ("fetch", "{\"job\":1,\"run\":\"a\\tb\"}"), BAD, "1", RUN_MUST},
	{REQ("fetch", "{\"job\":1,\"run\":\"" A64 A64 "x\"}"), BAD, "1", RUN_MUST},
	{REQ("fetch", "{\"job\":1,\"run\":\"r\",\"min_version\":2}"), BAD, "1",
	 "params.min_version cannot go with run: a run gets the version it is "
	 "pinned to (advance moves it)"},
	/* advance */
	{REQ("advance", "{}"), BAD, "1", "params.run is missing"},
	{REQ("advance", "{\"run\":7}"), BAD, "1", RUN_MUST},
	{REQ("advance", "{\"run\":\"r\",\"keys\":[\"abc\"]}"), BAD, "1",
	 "params.keys must be a non-empty array of keys (64 lowercase hex digits)"},
	/* watch, cache.* */
	{REQ("watch", "{}"), BAD, "1", "params.key is missing"},
	{REQ("watch", "{\"key\":12}"), BAD, "1",
	 "params.key must be 64 lowercase hex digits"},
	{REQ("watch", "{\"job\":1}"), BAD, "1",
	 "unknown key 'job' in params of 'watch'"},
	{"{\"id\":\"x\",\"op\":\"cache.show\"}", BAD, "\"x\"", "params.key is missing"},
	{REQ("cache.prune", "{\"max_age_s\":-1}"), BAD, "1",
	 "params.max_age_s must be a non-negative integer"},
	{REQ("cache.prune", "{\"max_bytes\":1.5}"), BAD, "1",
	 "params.max_bytes must be a non-negative integer"},
	{REQ("cache.prune", "{\"max_bytes\":\"1G\"}"), BAD, "1",
	 "params.max_bytes must be a non-negative integer"},
	{REQ("cache.prune", "{\"all\":true}"), BAD, "1",
	 "unknown key 'all' in params of 'cache.prune'"},
	{REQ("cache.prune", "{\"\xc3\xa9t\xc3\xa9\":1}"), BAD, "1",
	 "unknown key '\xc3\xa9t\xc3\xa9' in params of 'cache.prune'"},
	{REQ("cache.export", "{\"keys\":[]}"), BAD, "1",
	 "params.keys must be a non-empty array of keys (64 lowercase hex digits)"},
	{REQ("cache.export", "{\"keys\":[\"" KEY "\", \"abc\"]}"), BAD, "1",
	 "params.keys must be a non-empty array of keys (64 lowercase hex digits)"},
	{REQ("cache.import", "{}"), BAD, "1", "params.export is missing"},
	{REQ("cache.import", "{\"export\":\"file.json\"}"), BAD, "1",
	 "params.export must be an object (what cache.export gave)"},
};

#define NBAD (sizeof(bad_cases) / sizeof(bad_cases[0]))

/* The error reply the daemon sends for "c". */
static char *expected_reply(const bad_case *c)
{
	json_t *message = json_string(c->message);
	char *text = json_dumps(message, JSON_ENCODE_ANY);
	size_t size = strlen(text) + strlen(c->id) + 128;
	char *line = malloc(size);

	snprintf(line, size, "{\"id\":%s,\"error\":{\"code\":\"%s\",\"message\":%s}}\n",
		 c->id, proto_code_name(c->code), text);
	free(text);
	json_decref(message);
	return line;
}

Test(request, malformed_requests_are_refused_with_their_message)
{
	cr_assert_geq(NBAD, 40);
	for (size_t i = 0; i < NBAD; i++) {
		const bad_case *c = &bad_cases[i];
		proto_request req;
		proto_error err = {0};
		int rc = parse(c->line, &req, &err);
		char *line, *want;

		cr_expect_eq(rc, c->code, "%s: code %d (%s)", c->line, rc,
			     err.message);
		cr_expect_eq(err.code, c->code, "%s", c->line);
		cr_expect_str_eq(err.message, c->message, "%s", c->line);
		cr_expect_eq(err.closes, c->code == PROTO_EVERSION_MISMATCH,
			     "%s", c->line);
		line = proto_reply_from_error(req.id, &err);
		want = expected_reply(c);
		cr_expect_str_eq(line, want, "%s", c->line);
		free(want);
		free(line);
		proto_request_release(&req);
	}
}

Test(request, a_syntax_error_carries_its_column)
{
	proto_request req;
	proto_error err = {0};

	cr_assert_eq(parse("{\"id\":1,,}", &req, &err), PROTO_EBAD_REQUEST);
	cr_expect_eq(err.column, 9);
	proto_request_release(&req);
	cr_assert_eq(parse("{\"id\":1}", &req, &err), PROTO_EBAD_REQUEST);
	cr_expect_eq(err.column, 0);
	proto_request_release(&req);
}

Test(request, deep_nesting_is_refused_without_recursion_trouble)
{
	size_t depth = 100000, n = 0;
	char *line = malloc(2 * depth + 64);
	proto_request req;
	proto_error err = {0};

	n += sprintf(line, "{\"id\":1,\"op\":\"submit\",\"params\":{\"graph\":");
	for (size_t i = 0; i < depth; i++)
		line[n++] = '[';
	for (size_t i = 0; i < depth; i++)
		line[n++] = ']';
	line[n++] = '}';
	line[n++] = '}';
	cr_expect_eq(proto_parse_request(line, n, &req, &err), PROTO_EBAD_REQUEST);
	cr_expect(strstr(err.message, "maximum parsing depth reached"), "%s",
		  err.message);
	cr_expect_null(req.id);
	proto_request_release(&req);
	free(line);
}

Test(request, a_line_is_read_by_length_not_to_a_nul)
{
	const char line[] = "{\"id\":1,\"op\":\"ping\"}garbage";
	proto_request req;
	proto_error err = {0};

	cr_assert_eq(proto_parse_request(line, 20, &req, &err), 0, "%s",
		     err.message);
	cr_expect_eq(req.op, PROTO_OP_PING);
	proto_request_release(&req);
	cr_expect_eq(proto_parse_request(line, 0, &req, &err), PROTO_EBAD_REQUEST);
	proto_request_release(&req);
}

Test(request, a_null_error_struct_is_allowed)
{
	proto_request req;

	cr_expect_eq(parse("{\"id\":1,\"op\":\"frob\"}", &req, NULL),
		     PROTO_EUNKNOWN_OP);
	proto_request_release(&req);
	cr_expect_eq(parse("nope", &req, NULL), PROTO_EBAD_REQUEST);
	proto_request_release(&req);
	cr_expect_eq(parse(REQ("hello", "{\"version\":3}"), &req, NULL),
		     PROTO_EVERSION_MISMATCH);
	proto_request_release(&req);
}

Test(request, names_of_ops_codes_and_states_go_both_ways)
{
	for (int op = 0; op < PROTO_NOPS; op++)
		cr_expect_eq(proto_op_from_name(proto_op_name(op)), op);
	cr_expect_eq(proto_op_from_name("nope"), PROTO_OP_NONE);
	cr_expect_null(proto_op_name(PROTO_OP_NONE));
	cr_expect_null(proto_op_name(PROTO_NOPS));
	for (int code = -1; code >= -PROTO_NCODES; code--)
		cr_expect_eq(proto_code_from_name(proto_code_name(code)), code);
	cr_expect_str_eq(proto_code_name(PROTO_EBAD_REQUEST), "bad_request");
	cr_expect_str_eq(proto_code_name(PROTO_EINTERNAL), "internal");
	cr_expect_str_eq(proto_code_name(0), "ok");
	cr_expect_null(proto_code_name(-PROTO_NCODES - 1));
	cr_expect_null(proto_code_name(1));
	cr_expect_eq(proto_code_from_name("nope"), 0);
	cr_expect_eq(proto_code_from_name(NULL), 0);
	for (int s = PROTO_JOB_QUEUED; s <= PROTO_JOB_CANCELLED; s++)
		cr_expect_eq(proto_job_state_from_name(proto_job_state_name(s)), s);
	cr_expect_str_eq(proto_job_state_name(PROTO_JOB_CANCELLED), "cancelled");
	cr_expect_eq(proto_job_state_from_name("paused"), -1);
	cr_expect_null(proto_job_state_name(5));
}
