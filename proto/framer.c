/*
 * framer.c: a byte stream cut into lines, each at most a limit long.
 *
 * A fed buffer is read in place: a line that lies whole in it is handed
 * out as a pointer into it. Only the start of a line that a feed leaves
 * incomplete is copied, into a buffer that grows with it up to the limit
 * and no further.
 */
#include <stdlib.h>
#include <string.h>

#include "proto.h"

struct proto_framer {
	size_t limit;
	const char *in; /* the unread bytes of the last feed */
	size_t in_len;
	char *buf;      /* the start of a line begun in an earlier feed */
	size_t len, cap;
	int failed;     /* 0, or the error that ended the stream */
};

proto_framer *proto_framer_new(size_t limit)
{
	proto_framer *framer;

	if (limit == 0)
		return NULL;
	framer = calloc(1, sizeof(*framer));
	if (framer)
		framer->limit = limit;
	return framer;
}

void proto_framer_free(proto_framer *framer)
{
	if (!framer)
		return;
	free(framer->buf);
	free(framer);
}

int proto_framer_feed(proto_framer *framer, const char *buf, size_t len)
{
	if (framer->failed)
		return framer->failed;
	if (framer->in_len > 0)
		return PROTO_EBUSY;
	framer->in = buf;
	framer->in_len = len;
	return 0;
}

size_t proto_framer_pending(const proto_framer *framer)
{
	return framer->len;
}

size_t proto_framer_limit(const proto_framer *framer)
{
	return framer->limit;
}

/* Ends the stream with "code": nothing more is read or held. */
static int fail(proto_framer *framer, int code, proto_error *err)
{
	framer->failed = code;
	framer->in = NULL;
	framer->in_len = 0;
	framer->len = 0;
	free(framer->buf);
	framer->buf = NULL;
	framer->cap = 0;
	if (code == PROTO_ETOO_LARGE)
		proto_error_set(err, code, "line longer than %zu bytes",
				framer->limit);
	else
		proto_error_set(err, code, "out of memory");
	if (err)
		err->closes = true;
	return code;
}

/* Appends "n" bytes to the held line (the caller keeps len + n within the
 * limit); the buffer doubles, from 256 bytes, but never past the limit. */
static int hold(proto_framer *framer, const char *bytes, size_t n)
{
	size_t need = framer->len + n;

	if (need > framer->cap) {
		size_t cap = framer->cap ? framer->cap : 256;
		char *buf;

		while (cap < need)
			cap *= 2;
		if (cap > framer->limit)
			cap = framer->limit;
		buf = realloc(framer->buf, cap);
		if (!buf)
			return PROTO_EINTERNAL;
		framer->buf = buf;
		framer->cap = cap;
	}
	memcpy(framer->buf + framer->len, bytes, n);
	framer->len = need;
	return 0;
}

static bool is_blank(const char *line, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
			return false;
	return true;
}

/* Takes the line that ends at "nl" in the fed bytes: in place when nothing
 * of it is held, else completed in the buffer. */
static int take_line(proto_framer *framer, const char *nl, const char **line,
		     size_t *len)
{
	size_t n = (size_t)(nl - framer->in);

	if (framer->len == 0) {
		*line = framer->in;
		*len = n;
	} else {
		if (hold(framer, framer->in, n) < 0)
			return PROTO_EINTERNAL;
		*line = framer->buf;
		*len = framer->len;
		framer->len = 0;
	}
	framer->in += n + 1;
	framer->in_len -= n + 1;
	if (*len > 0 && (*line)[*len - 1] == '\r')
		(*len)--;
	return 0;
}

int proto_framer_next(proto_framer *framer, const char **line, size_t *len,
		      proto_error *err)
{
	if (framer->failed)
		return fail(framer, framer->failed, err);
	while (framer->in_len > 0) {
		/* limit + 1 bytes without '\n' decide: look no further */
		size_t window = framer->limit + 1 - framer->len;
		size_t scan = framer->in_len < window ? framer->in_len : window;
		const char *nl = memchr(framer->in, '\n', scan);

		if (!nl && scan == window)
			return fail(framer, PROTO_ETOO_LARGE, err);
		if (!nl) {
			if (hold(framer, framer->in, scan) < 0)
				return fail(framer, PROTO_EINTERNAL, err);
			framer->in_len = 0;
			break;
		}
		if (take_line(framer, nl, line, len) < 0)
			return fail(framer, PROTO_EINTERNAL, err);
		if (!is_blank(*line, *len))
			return 1;
	}
	framer->in = NULL;
	return 0;
}
