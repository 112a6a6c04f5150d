/*
 * limits.c: the limits of a connection and of the daemon, and the state of
 * one connection (hello said, requests in flight).
 */
#include <math.h>

#include "proto.h"

void proto_limits_init(proto_limits *limits)
{
	limits->frame_bytes = PROTO_FRAME_DEFAULT;
	limits->in_flight = PROTO_IN_FLIGHT_DEFAULT;
	limits->clients = PROTO_CLIENTS_DEFAULT;
	limits->hello_timeout_s = PROTO_HELLO_TIMEOUT_DEFAULT_S;
	limits->idle_timeout_s = PROTO_IDLE_TIMEOUT_DEFAULT_S;
	limits->clients_per_uid = PROTO_CLIENTS_PER_UID_DEFAULT;
}

int proto_limits_check(const proto_limits *limits, proto_error *err)
{
	if (limits->frame_bytes < PROTO_FRAME_MIN ||
	    limits->frame_bytes > PROTO_FRAME_MAX)
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "frame_bytes must be from %d to %u",
				       PROTO_FRAME_MIN, PROTO_FRAME_MAX);
	if (limits->in_flight < 1 || limits->in_flight > PROTO_COUNT_MAX)
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "in_flight must be from 1 to %d",
				       PROTO_COUNT_MAX);
	if (limits->clients < 1 || limits->clients > PROTO_COUNT_MAX)
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "clients must be from 1 to %d",
				       PROTO_COUNT_MAX);
	if (!(limits->hello_timeout_s > 0) || !isfinite(limits->hello_timeout_s))
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "hello_timeout_s must be a positive number");
	if (!(limits->idle_timeout_s >= 0) || !isfinite(limits->idle_timeout_s))
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "idle_timeout_s must be a number >= 0");
	if (limits->clients_per_uid < 1 || limits->clients_per_uid > PROTO_COUNT_MAX)
		return proto_error_set(err, PROTO_EBAD_REQUEST,
				       "clients_per_uid must be from 1 to %d",
				       PROTO_COUNT_MAX);
	return 0;
}

int proto_error_too_many_clients(proto_error *err, const proto_limits *limits)
{
	proto_error_set(err, PROTO_ETOO_MANY, "too many clients (limit %d)",
			limits->clients);
	if (err)
		err->closes = true;
	return PROTO_ETOO_MANY;
}

int proto_error_hello_timeout(proto_error *err, const proto_limits *limits)
{
	proto_error_set(err, PROTO_ETIMEOUT, "no hello within %g s",
			limits->hello_timeout_s);
	if (err)
		err->closes = true;
	return PROTO_ETIMEOUT;
}

int proto_error_too_many_for_uid(proto_error *err, const proto_limits *limits,
				 long uid)
{
	proto_error_set(err, PROTO_ETOO_MANY, "uid %ld holds %d connections "
			"already, the most one uid may (tuned "
			"--max-clients-per-uid %d): close one", uid,
			limits->clients_per_uid, limits->clients_per_uid);
	if (err)
		err->closes = true;
	return PROTO_ETOO_MANY;
}

int proto_error_idle_timeout(proto_error *err, const proto_limits *limits)
{
	proto_error_set(err, PROTO_ETIMEOUT, "idle for %g s: no request, none in "
			"flight and no job watched (tuned --idle-timeout %g); "
			"connect again", limits->idle_timeout_s,
			limits->idle_timeout_s);
	if (err)
		err->closes = true;
	return PROTO_ETIMEOUT;
}

int proto_error_peer_refused(proto_error *err, long uid)
{
	proto_error_set(err, PROTO_EUNAUTHORIZED, "uid %ld may not connect", uid);
	if (err)
		err->closes = true;
	return PROTO_EUNAUTHORIZED;
}

void proto_session_init(proto_session *session, const proto_limits *limits)
{
	session->limits = limits;
	session->ready = false;
	session->in_flight = 0;
}

int proto_session_admit(proto_session *session, const proto_request *req,
			proto_error *err)
{
	const char *name = proto_op_name(req->op);

	if (req->op != PROTO_OP_HELLO && !session->ready)
		return proto_error_set(err, PROTO_ENOT_READY,
				       "'%s' before hello", name ? name : "?");
	if (session->in_flight >= session->limits->in_flight)
		return proto_error_set(err, PROTO_ETOO_MANY,
				       "too many requests in flight (limit %d)",
				       session->limits->in_flight);
	if (req->op == PROTO_OP_HELLO)
		session->ready = true;
	session->in_flight++;
	return 0;
}

void proto_session_done(proto_session *session)
{
	if (session->in_flight > 0)
		session->in_flight--;
}
