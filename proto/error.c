/*
 * error.c: error codes, their wire names, and messages kept in valid UTF-8.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"

static const char *const code_names[PROTO_NCODES + 1] = {
	"ok",
	"bad_request",
	"unknown_op",
	"version_mismatch",
	"not_ready",
	"too_large",
	"too_many",
	"not_found",
	"unauthorized",
	"busy",
	"cancelled",
	"timeout",
	"internal",
};

const char *proto_code_name(int code)
{
	if (code > 0 || code < -PROTO_NCODES)
		return NULL;
	return code_names[-code];
}

int proto_code_from_name(const char *name)
{
	for (int i = 1; name && i <= PROTO_NCODES; i++)
		if (!strcmp(code_names[i], name))
			return -i;
	return 0;
}

/* The length of the UTF-8 sequence at "s" if it is valid and whole (at
 * most "n" bytes are looked at), else 0. */
static int utf8_sequence(const unsigned char *s, size_t n)
{
	unsigned int c = s[0], min;
	int len;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2, min = 0x80, c &= 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, min = 0x800, c &= 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, min = 0x10000, c &= 0x07;
	else
		return 0;
	if ((size_t)len > n)
		return 0;
	for (int i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return len;
}

/* Whether the "n" bytes at "s" are the start of a sequence cut short, as
 * vsnprintf leaves one when it truncates. */
static bool utf8_cut_short(const unsigned char *s, size_t n)
{
	size_t want = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;

	if (s[0] < 0xc2 || s[0] > 0xf4 || n >= want)
		return false;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return false;
	return true;
}

/* Replaces each byte of "s" that starts no valid UTF-8 sequence by '?',
 * and drops a sequence cut short at the end. */
static void utf8_clean(char *s)
{
	unsigned char *p = (unsigned char *)s;
	size_t n = strlen(s);

	while (n > 0) {
		int len = utf8_sequence(p, n);

		if (len == 0 && utf8_cut_short(p, n)) {
			*p = 0;
			return;
		}
		if (len == 0)
			*p = '?', len = 1;
		p += len;
		n -= len;
	}
}

int proto_error_setv(proto_error *err, int code, const char *fmt, va_list ap)
{
	if (!err)
		return code;
	err->code = code;
	err->closes = false;
	err->column = 0;
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	utf8_clean(err->message);
	return code;
}

int proto_error_set(proto_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	proto_error_setv(err, code, fmt, ap);
	va_end(ap);
	return code;
}
