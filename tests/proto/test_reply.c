/*
 * test_reply.c: reply and event lines (one line each, whatever the
 * message holds), their reading by clients, request lines for clients,
 * limits and the state of a connection.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define KEY "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* "line" ends with its only '\n' and is a JSON object. */
static void expect_one_line(const char *line)
{
	size_t len = strlen(line);
	json_t *value;

	cr_assert_gt(len, 0);
	cr_expect_eq(line[len - 1], '\n');
	cr_expect_eq(strchr(line, '\n'), line + len - 1, "%s", line);
	cr_expect_null(strchr(line, '\r'));
	value = json_loadb(line, len - 1, 0, NULL);
	cr_expect(json_is_object(value), "%s", line);
	json_decref(value);
}

Test(reply, results_echo_the_id)
{
	json_t *id = json_integer(7), *sid = json_string("a\"b");
	char *line;

	line = proto_reply_result(id, json_pack("{s:i}", "job", 3));
	cr_expect_str_eq(line, "{\"id\":7,\"result\":{\"job\":3}}\n");
	free(line);
	line = proto_reply_result(sid, json_object());
	cr_expect_str_eq(line, "{\"id\":\"a\\\"b\",\"result\":{}}\n");
	free(line);
	line = proto_reply_result(NULL, json_object());
	cr_expect_str_eq(line, "{\"id\":null,\"result\":{}}\n");
	free(line);
	cr_expect_null(proto_reply_result(id, NULL));
	json_decref(id);
	json_decref(sid);
}

Test(reply, errors_carry_code_name_and_message)
{
	json_t *id = json_string("r1");
	char *line;

	line = proto_reply_error(id, PROTO_ENOT_FOUND, "no job %d", 12);
	cr_expect_str_eq(line, "{\"id\":\"r1\",\"error\":{\"code\":\"not_found\","
			       "\"message\":\"no job 12\"}}\n");
	free(line);
	line = proto_reply_error(NULL, PROTO_ETOO_LARGE, "line longer than %d bytes",
				 1024);
	cr_expect_str_eq(line, "{\"id\":null,\"error\":{\"code\":\"too_large\","
			       "\"message\":\"line longer than 1024 bytes\"}}\n");
	free(line);
	/* a code this version does not know goes out as internal */
	line = proto_reply_error(id, -99, "what");
	cr_expect(strstr(line, "\"code\":\"internal\""), "%s", line);
	free(line);
	json_decref(id);
}

Test(reply, every_code_makes_a_reply_a_client_reads_back)
{
	for (int code = -1; code >= -PROTO_NCODES; code--) {
		json_t *id = json_integer(-code);
		char *line = proto_reply_error(id, code, "code %d", code);
		proto_reply reply;
		proto_error err = {0};

		expect_one_line(line);
		cr_assert_eq(proto_parse_reply(line, strlen(line) - 1, &reply, &err),
			     0, "%s", err.message);
		cr_expect_eq(reply.kind, PROTO_REPLY_ERROR);
		cr_expect_eq(reply.error.code, code);
		cr_expect(json_equal(reply.id, id));
		proto_reply_release(&reply);
		json_decref(id);
		free(line);
	}
}

Test(reply, messages_with_newlines_and_bad_bytes_stay_one_valid_line)
{
	json_t *id = json_integer(1);
	char *line = proto_reply_error(id, PROTO_EINTERNAL,
				       "two\nlines\r\n and \"quotes\", a tab\t, "
				       "a bad byte \xff, a cut \xc3");
	proto_reply reply;
	proto_error err = {0};

	expect_one_line(line);
	cr_assert_eq(proto_parse_reply(line, strlen(line), &reply, &err), 0,
		     "%s", err.message);
	cr_expect_str_eq(reply.error.message,
			 "two\nlines\r\n and \"quotes\", a tab\t, a bad byte ?, "
			 "a cut ");
	proto_reply_release(&reply);
	free(line);
	json_decref(id);
}

Test(reply, long_messages_are_cut_between_characters)
{
	char text[3000], *line;
	proto_error err;
	size_t n = 0;

	while (n + 2 < sizeof(text))
		text[n++] = '\xc3', text[n++] = '\xa9';
	text[n] = 0;
	proto_error_set(&err, PROTO_EBAD_REQUEST, "%s", text);
	cr_expect_eq(strlen(err.message), PROTO_MESSAGE_MAX - 2,
		     "1023 bytes would cut an e-acute in two");
	line = proto_reply_from_error(NULL, &err);
	expect_one_line(line);
	free(line);
	cr_expect_eq(proto_error_set(NULL, PROTO_EBUSY, "x"), PROTO_EBUSY);
}

Test(reply, events)
{
	char *line = proto_event(PROTO_EVENT_VERSION,
				 json_pack("{s:s, s:i, s:f}", "key", KEY,
					   "version", 3, "median_ms", 0.5));
	proto_reply reply;
	proto_error err = {0};

	cr_expect_str_eq(line, "{\"event\":\"version\",\"data\":{\"key\":\"" KEY
			       "\",\"version\":3,\"median_ms\":0.5}}\n");
	cr_assert_eq(proto_parse_reply(line, strlen(line), &reply, &err), 0,
		     "%s", err.message);
	cr_expect_eq(reply.kind, PROTO_REPLY_EVENT);
	cr_expect_str_eq(reply.event, "version");
	cr_expect_null(reply.id);
	cr_expect_eq(json_integer_value(json_object_get(reply.value, "version")),
		     3);
	proto_reply_release(&reply);
	free(line);
	/* refused: no name, a name too long, data not an object; data is
	 * taken on every path */
	cr_expect_null(proto_event("", json_object()));
	cr_expect_null(proto_event(NULL, json_object()));
	cr_expect_null(proto_event("a-name-of-sixty-four-bytes-is-one-too-many-"
				   "for-an-event-xxxxxxxxx", json_object()));
	cr_expect_null(proto_event("job", json_array()));
	cr_expect_null(proto_event("job", NULL));
	cr_expect_null(proto_event("\xff", json_object()));
}

Test(reply, hello_result)
{
	json_t *result = proto_hello_result("0.1.0");
	char *line;

	line = proto_reply_result(NULL, result);
	cr_expect_str_eq(line, "{\"id\":null,\"result\":{\"version\":1,"
			       "\"server\":\"tuned 0.1.0\"}}\n");
	free(line);
	cr_expect_null(proto_hello_result(NULL));
}

/* Reads "line" as a reply; expects it refused with "message". */
static void expect_bad_reply(const char *line, const char *message)
{
	proto_reply reply;
	proto_error err = {0};

	cr_expect_eq(proto_parse_reply(line, strlen(line), &reply, &err),
		     PROTO_EBAD_REQUEST, "%s", line);
	cr_expect_str_eq(err.message, message, "%s", line);
	proto_reply_release(&reply);
}

Test(reply, malformed_replies)
{
	expect_bad_reply("nope", "invalid json at column 4: '[' or '{' expected "
				 "near 'nope'");
	expect_bad_reply("[]", "reply must be a json object");
	expect_bad_reply("{}", "reply must have exactly one of result, error "
			       "and event");
	expect_bad_reply("{\"id\":1,\"result\":{},\"error\":{}}",
			 "reply must have exactly one of result, error and event");
	expect_bad_reply("{\"event\":\"job\",\"result\":{}}",
			 "reply must have exactly one of result, error and event");
	expect_bad_reply("{\"result\":{}}", "id is missing");
	expect_bad_reply("{\"id\":null,\"result\":{}}",
			 "id must be a non-negative integer or a string of at "
			 "most 64 bytes");
	expect_bad_reply("{\"id\":-2,\"error\":{\"code\":\"busy\",\"message\":\"\"}}",
			 "id must be a non-negative integer or a string of at "
			 "most 64 bytes");
	expect_bad_reply("{\"id\":1,\"result\":[]}", "result must be an object");
	expect_bad_reply("{\"id\":1,\"error\":\"busy\"}", "error must be an object");
	expect_bad_reply("{\"id\":1,\"error\":{\"message\":\"m\"}}",
			 "error.code must be a string");
	expect_bad_reply("{\"id\":1,\"error\":{\"code\":\"busy\"}}",
			 "error.message must be a string");
	expect_bad_reply("{\"event\":3,\"data\":{}}",
			 "event must be a non-empty string of at most 63 bytes");
	expect_bad_reply("{\"event\":\"\",\"data\":{}}",
			 "event must be a non-empty string of at most 63 bytes");
	expect_bad_reply("{\"event\":\"job\"}", "data must be an object");
}

Test(reply, clients_ignore_keys_they_do_not_know)
{
	const char *line = "{\"id\":1,\"error\":{\"code\":\"quota\",\"message\":"
			   "\"over quota\",\"retry_ms\":5},\"trace\":\"x\"}";
	proto_reply reply;
	proto_error err = {0};

	cr_assert_eq(proto_parse_reply(line, strlen(line), &reply, &err), 0,
		     "%s", err.message);
	cr_expect_eq(reply.kind, PROTO_REPLY_ERROR);
	cr_expect_eq(reply.error.code, PROTO_EINTERNAL);
	cr_expect_str_eq(reply.error.message, "over quota");
	proto_reply_release(&reply);

	line = "{\"id\":null,\"error\":{\"code\":\"too_many\",\"message\":\"m\"}}";
	cr_assert_eq(proto_parse_reply(line, strlen(line), &reply, &err), 0);
	cr_expect(json_is_null(reply.id));
	cr_expect_eq(reply.error.code, PROTO_ETOO_MANY);
	proto_reply_release(&reply);
}

/* Builds the request line of "op" with "params" (taken) and reads it back
 * as the daemon would. */
static void round_trip(enum proto_op op, json_t *params)
{
	json_t *id = json_string("c-1");
	proto_error err = {0};
	char *line = proto_request_line(op, id, params, &err);
	proto_request req;

	cr_assert_not_null(line, "%s: %s", proto_op_name(op), err.message);
	expect_one_line(line);
	cr_assert_eq(proto_parse_request(line, strlen(line) - 1, &req, &err), 0,
		     "%s: %s", line, err.message);
	cr_expect_eq(req.op, op);
	cr_expect(json_equal(req.id, id));
	proto_request_release(&req);
	json_decref(id);
	free(line);
}

Test(reply, request_lines_for_clients)
{
	round_trip(PROTO_OP_HELLO, json_pack("{s:i}", "version", PROTO_VERSION));
	round_trip(PROTO_OP_PING, NULL);
	round_trip(PROTO_OP_SUBMIT, json_pack("{s:s, s:f, s:i}", "graph",
					      "{\"version\":1}", "budget", 1.5,
					      "priority", 2));
	round_trip(PROTO_OP_STATUS, json_pack("{s:i}", "job", 1));
	round_trip(PROTO_OP_LIST, json_object());
	round_trip(PROTO_OP_CANCEL, json_pack("{s:i}", "job", 2));
	round_trip(PROTO_OP_FETCH, json_pack("{s:s, s:i, s:i}", "key", KEY,
					     "min_version", 2, "timeout_ms", 500));
	round_trip(PROTO_OP_WATCH, json_pack("{s:s}", "key", KEY));
	round_trip(PROTO_OP_STATS, NULL);
	round_trip(PROTO_OP_CACHE_LIST, NULL);
	round_trip(PROTO_OP_CACHE_SHOW, json_pack("{s:s}", "key", KEY));
	round_trip(PROTO_OP_CACHE_PRUNE, json_pack("{s:i}", "max_bytes", 1 << 30));
}

Test(reply, request_lines_are_checked_like_requests)
{
	json_t *id = json_integer(5), *bad_id = json_integer(-5);
	proto_error err = {0};
	char *line;

	line = proto_request_line(PROTO_OP_PING, id, NULL, &err);
	cr_expect_str_eq(line, "{\"id\":5,\"op\":\"ping\",\"params\":{}}\n");
	free(line);
	cr_expect_null(proto_request_line(PROTO_OP_STATUS, id,
					  json_pack("{s:i}", "job", 0), &err));
	cr_expect_str_eq(err.message, "params.job must be a positive integer");
	cr_expect_null(proto_request_line(PROTO_OP_PING, bad_id, NULL, &err));
	cr_expect_eq(err.code, PROTO_EBAD_REQUEST);
	cr_expect_null(proto_request_line(PROTO_OP_PING, NULL, NULL, &err));
	cr_expect_null(proto_request_line(PROTO_OP_NONE, id, json_object(), &err));
	cr_expect_eq(err.code, PROTO_EUNKNOWN_OP);
	cr_expect_null(proto_request_line(PROTO_OP_LIST, id, json_array(), &err));
	cr_expect_str_eq(err.message, "params must be an object");
	/* another version is the daemon's to refuse, not the builder's */
	line = proto_request_line(PROTO_OP_HELLO, id,
				  json_pack("{s:i}", "version", 2), &err);
	cr_expect_not_null(line);
	free(line);
	json_decref(id);
	json_decref(bad_id);
}

Test(reply, dump_line_of_any_message)
{
	char *line = proto_dump_line(json_pack("{s:s}", "a", "b\nc"));

	cr_expect_str_eq(line, "{\"a\":\"b\\nc\"}\n");
	free(line);
	cr_expect_null(proto_dump_line(NULL));
}

Test(limits, defaults_and_ranges)
{
	proto_limits limits;
	proto_error err = {0};

	proto_limits_init(&limits);
	cr_expect_eq(limits.frame_bytes, 16u << 20);
	cr_expect_eq(limits.in_flight, 64);
	cr_expect_eq(limits.clients, 256);
	cr_expect_float_eq(limits.hello_timeout_s, 10.0, 1e-12);
	cr_expect_eq(proto_limits_check(&limits, &err), 0);
	limits.frame_bytes = 1023;
	cr_expect_eq(proto_limits_check(&limits, &err), PROTO_EBAD_REQUEST);
	cr_expect_str_eq(err.message, "frame_bytes must be from 1024 to 1073741824");
	limits.frame_bytes = 1024;
	limits.in_flight = 0;
	cr_expect_eq(proto_limits_check(&limits, &err), PROTO_EBAD_REQUEST);
	cr_expect_str_eq(err.message, "in_flight must be from 1 to 65536");
	limits.in_flight = 1;
	limits.clients = 65537;
	cr_expect_eq(proto_limits_check(&limits, &err), PROTO_EBAD_REQUEST);
	cr_expect_str_eq(err.message, "clients must be from 1 to 65536");
	limits.clients = 1;
	limits.hello_timeout_s = 0;
	cr_expect_eq(proto_limits_check(&limits, &err), PROTO_EBAD_REQUEST);
	cr_expect_str_eq(err.message, "hello_timeout_s must be a positive number");
	limits.hello_timeout_s = 1;
	cr_expect_float_eq(limits.idle_timeout_s, 300.0, 1e-12);
	limits.idle_timeout_s = 0;
	cr_expect_eq(proto_limits_check(&limits, &err), 0, "0: no idle timeout");
	limits.idle_timeout_s = -1;
	cr_expect_eq(proto_limits_check(&limits, &err), PROTO_EBAD_REQUEST);
	cr_expect_str_eq(err.message, "idle_timeout_s must be a number >= 0");
	limits.idle_timeout_s = 0;
	cr_expect_eq(limits.clients_per_uid, 64);
	limits.clients_per_uid = 0;
	cr_expect_eq(proto_limits_check(&limits, &err), PROTO_EBAD_REQUEST);
	cr_expect_str_eq(err.message, "clients_per_uid must be from 1 to 65536");
}

Test(limits, errors_that_close)
{
	proto_limits limits;
	proto_error err = {0};
	char *line;

	proto_limits_init(&limits);
	cr_expect_eq(proto_error_too_many_clients(&err, &limits), PROTO_ETOO_MANY);
	cr_expect(err.closes);
	cr_expect_str_eq(err.message, "too many clients (limit 256)");
	line = proto_reply_from_error(NULL, &err);
	cr_expect_str_eq(line, "{\"id\":null,\"error\":{\"code\":\"too_many\","
			       "\"message\":\"too many clients (limit 256)\"}}\n");
	free(line);
	limits.hello_timeout_s = 2.5;
	cr_expect_eq(proto_error_hello_timeout(&err, &limits), PROTO_ETIMEOUT);
	cr_expect(err.closes);
	cr_expect_str_eq(err.message, "no hello within 2.5 s");
	cr_expect_eq(proto_error_peer_refused(&err, 1001), PROTO_EUNAUTHORIZED);
	cr_expect(err.closes);
	cr_expect_str_eq(err.message, "uid 1001 may not connect");
	limits.clients_per_uid = 2;
	cr_expect_eq(proto_error_too_many_for_uid(&err, &limits, 1001), PROTO_ETOO_MANY);
	cr_expect(err.closes);
	cr_expect_str_eq(err.message, "uid 1001 holds 2 connections already, the most "
			 "one uid may (tuned --max-clients-per-uid 2): close one");
	limits.idle_timeout_s = 300;
	cr_expect_eq(proto_error_idle_timeout(&err, &limits), PROTO_ETIMEOUT);
	cr_expect(err.closes);
	cr_expect_str_eq(err.message, "idle for 300 s: no request, none in flight and "
			 "no job watched (tuned --idle-timeout 300); connect again");
}

static void request_of(proto_request *req, const char *line)
{
	proto_error err = {0};

	cr_assert_eq(proto_parse_request(line, strlen(line), req, &err), 0,
		     "%s", err.message);
}

Test(session, hello_first_then_in_flight_limit)
{
	proto_limits limits;
	proto_session session;
	proto_request ping, hello;
	proto_error err = {0};

	proto_limits_init(&limits);
	limits.in_flight = 2;
	proto_session_init(&session, &limits);
	request_of(&ping, "{\"id\":1,\"op\":\"ping\"}");
	request_of(&hello, "{\"id\":2,\"op\":\"hello\",\"params\":{\"version\":1}}");
	cr_expect_eq(proto_session_admit(&session, &ping, &err), PROTO_ENOT_READY);
	cr_expect_str_eq(err.message, "'ping' before hello");
	cr_expect_not(err.closes);
	cr_expect_eq(session.in_flight, 0);
	cr_expect_eq(proto_session_admit(&session, &hello, &err), 0);
	cr_expect(session.ready);
	proto_session_done(&session);
	cr_expect_eq(proto_session_admit(&session, &ping, &err), 0);
	cr_expect_eq(proto_session_admit(&session, &ping, &err), 0);
	cr_expect_eq(proto_session_admit(&session, &ping, &err), PROTO_ETOO_MANY);
	cr_expect_str_eq(err.message, "too many requests in flight (limit 2)");
	cr_expect_not(err.closes);
	proto_session_done(&session);
	cr_expect_eq(proto_session_admit(&session, &ping, &err), 0);
	proto_session_done(&session);
	proto_session_done(&session);
	proto_session_done(&session);
	cr_expect_eq(session.in_flight, 0);
	proto_request_release(&ping);
	proto_request_release(&hello);
}
