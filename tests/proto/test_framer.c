/*
 * test_framer.c: the framer cuts a stream into the same lines however it
 * is chunked; refuses a line over the limit as soon as limit + 1 bytes
 * without '\n' are seen, never holding more than the limit.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/* The lines read so far, joined with '|'. */
typedef struct collected {
	char *text;
	size_t len, cap;
	int count;
} collected;

static void collect(collected *c, const char *line, size_t len)
{
	if (c->len + len + 2 > c->cap) {
		c->cap = (c->len + len + 2) * 2;
		c->text = realloc(c->text, c->cap);
	}
	memcpy(c->text + c->len, line, len);
	c->len += len;
	c->text[c->len++] = '|';
	c->text[c->len] = 0;
	c->count++;
}

/* Feeds "n" bytes and collects every complete line; returns the last
 * proto_framer_next code (0 unless it failed). */
static int feed_all(proto_framer *framer, const char *bytes, size_t n,
		    collected *c)
{
	const char *line;
	size_t len;
	int rc;

	cr_assert_eq(proto_framer_feed(framer, bytes, n), 0);
	while ((rc = proto_framer_next(framer, &line, &len, NULL)) == 1) {
		cr_assert_leq(len, proto_framer_limit(framer));
		collect(c, line, len);
	}
	cr_assert_leq(proto_framer_pending(framer), proto_framer_limit(framer));
	return rc;
}

Test(framer, one_feed_one_line_in_place)
{
	static const char text[] = "{\"id\":1}\n";
	proto_framer *framer = proto_framer_new(64);
	const char *line;
	size_t len;

	cr_assert_eq(proto_framer_feed(framer, text, strlen(text)), 0);
	cr_assert_eq(proto_framer_next(framer, &line, &len, NULL), 1);
	cr_expect_eq(line, text, "a whole line is not copied");
	cr_expect_eq(len, 8);
	cr_expect_eq(proto_framer_next(framer, &line, &len, NULL), 0);
	cr_expect_eq(proto_framer_pending(framer), 0);
	proto_framer_free(framer);
}

Test(framer, many_lines_per_feed)
{
	static const char text[] = "a\nbb\nccc\n\ndddd\n";
	proto_framer *framer = proto_framer_new(16);
	collected c = {0};

	cr_expect_eq(feed_all(framer, text, strlen(text), &c), 0);
	cr_expect_str_eq(c.text, "a|bb|ccc|dddd|");
	cr_expect_eq(c.count, 4);
	free(c.text);
	proto_framer_free(framer);
}

Test(framer, byte_by_byte)
{
	static const char text[] = "{\"id\":1,\"op\":\"ping\"}\r\n\n  \r\n{}\nx";
	proto_framer *framer = proto_framer_new(64);
	collected c = {0};

	for (size_t i = 0; i < strlen(text); i++)
		cr_assert_eq(feed_all(framer, text + i, 1, &c), 0);
	cr_expect_str_eq(c.text, "{\"id\":1,\"op\":\"ping\"}|{}|");
	cr_expect_eq(proto_framer_pending(framer), 1, "the 'x' without '\\n'");
	free(c.text);
	proto_framer_free(framer);
}

Test(framer, crlf_and_blank_lines)
{
	static const char text[] = "a\r\n\r\n \t\r\nb\rc\r\n\r\r\nd\n";
	proto_framer *framer = proto_framer_new(16);
	collected c = {0};

	feed_all(framer, text, strlen(text), &c);
	/* one '\r' before '\n' goes; others are the line's, and "\r" alone
	 * or with blanks is a blank line */
	cr_expect_str_eq(c.text, "a|b\rc|d|");
	free(c.text);
	proto_framer_free(framer);
}

/* A stream of "n" random lines (some blank, some with CRLF) and the lines
 * it holds, joined with '|'. */
static char *random_stream(unsigned *seed, int n, size_t maxlen,
			   collected *want)
{
	size_t cap = (size_t)n * (maxlen + 3) + 1, len = 0;
	char *stream = malloc(cap);

	for (int i = 0; i < n; i++) {
		size_t k = (size_t)rand_r(seed) % (maxlen + 1);
		char *start = stream + len;

		for (size_t j = 0; j < k; j++)
			stream[len++] = "abcdefgh{}[]\":, 0123\xc3\xa9"[rand_r(seed) % 22];
		if (k > 0 && start[0] == ' ')
			start[0] = '{';
		if (k > 0)
			collect(want, start, k);
		if (rand_r(seed) % 4 == 0)
			stream[len++] = '\r';
		stream[len++] = '\n';
	}
	stream[len] = 0;
	return stream;
}

Test(framer, random_chunkings_give_the_same_lines)
{
	unsigned seed = 12345;

	for (int round = 0; round < 200; round++) {
		collected want = {0}, got = {0};
		char *stream = random_stream(&seed, 50, 100, &want);
		size_t n = strlen(stream), at = 0;
		proto_framer *framer = proto_framer_new(100 + 1);

		while (at < n) {
			size_t chunk = 1 + (size_t)rand_r(&seed) % (round % 3 ? 300 : 7);

			if (chunk > n - at)
				chunk = n - at;
			cr_assert_eq(feed_all(framer, stream + at, chunk, &got), 0);
			at += chunk;
		}
		cr_assert_eq(got.count, want.count, "round %d", round);
		cr_assert(got.len == want.len &&
			  !memcmp(got.text, want.text, want.len), "round %d", round);
		cr_expect_eq(proto_framer_pending(framer), 0);
		free(want.text);
		free(got.text);
		free(stream);
		proto_framer_free(framer);
	}
}

Test(framer, a_line_of_exactly_the_limit_passes)
{
	proto_framer *framer = proto_framer_new(8);
	collected c = {0};

	cr_expect_eq(feed_all(framer, "12345678\n", 9, &c), 0);
	cr_expect_eq(feed_all(framer, "1234", 4, &c), 0);
	cr_expect_eq(feed_all(framer, "5678", 4, &c), 0);
	cr_expect_eq(proto_framer_pending(framer), 8);
	cr_expect_eq(feed_all(framer, "\n", 1, &c), 0);
	/* the '\r' of CRLF counts toward the limit */
	cr_expect_eq(feed_all(framer, "1234567\r\n", 9, &c), 0);
	cr_expect_str_eq(c.text, "12345678|12345678|1234567|");
	free(c.text);
	proto_framer_free(framer);
}

Test(framer, oversize_is_refused_at_limit_plus_one_byte_by_byte)
{
	size_t limit = 1000;
	proto_framer *framer = proto_framer_new(limit);
	proto_error err = {0};
	const char *line;
	size_t len;

	for (size_t i = 0; i < limit; i++) {
		cr_assert_eq(proto_framer_feed(framer, "a", 1), 0);
		cr_assert_eq(proto_framer_next(framer, &line, &len, &err), 0);
		cr_assert_eq(proto_framer_pending(framer), i + 1);
	}
	cr_assert_eq(proto_framer_feed(framer, "a", 1), 0);
	cr_expect_eq(proto_framer_next(framer, &line, &len, &err),
		     PROTO_ETOO_LARGE);
	cr_expect_eq(err.code, PROTO_ETOO_LARGE);
	cr_expect(err.closes);
	cr_expect_str_eq(err.message, "line longer than 1000 bytes");
	cr_expect_eq(proto_framer_pending(framer), 0, "nothing is held after");
	/* it stays failed */
	cr_expect_eq(proto_framer_feed(framer, "\n", 1), PROTO_ETOO_LARGE);
	cr_expect_eq(proto_framer_next(framer, &line, &len, &err),
		     PROTO_ETOO_LARGE);
	proto_framer_free(framer);
}

Test(framer, crlf_over_the_limit_is_refused)
{
	proto_framer *framer = proto_framer_new(8);
	collected c = {0};

	cr_expect_eq(feed_all(framer, "12345678\r\n", 10, &c), PROTO_ETOO_LARGE);
	cr_expect_eq(c.count, 0);
	proto_framer_free(framer);
}

Test(framer, oversize_in_one_huge_feed_reads_only_limit_plus_one)
{
	size_t limit = 4096, n = 64u << 20;
	char *bytes = malloc(n);
	proto_framer *framer = proto_framer_new(limit);
	collected c = {0};

	memset(bytes, 'a', n);
	memcpy(bytes, "{}\n", 3);
	/* a '\n' just past limit + 1: found only if the framer reads on */
	bytes[3 + limit + 1] = '\n';
	cr_expect_eq(feed_all(framer, bytes, n, &c), PROTO_ETOO_LARGE);
	cr_expect_str_eq(c.text, "{}|", "lines before the long one come out");
	cr_expect_eq(proto_framer_pending(framer), 0);
	free(c.text);
	free(bytes);
	proto_framer_free(framer);
}

Test(framer, oversize_across_feeds_holds_at_most_the_limit)
{
	size_t limit = 4096;
	char *bytes = malloc(1u << 20);
	proto_framer *framer = proto_framer_new(limit);
	collected c = {0};

	memset(bytes, 'b', 1u << 20);
	cr_expect_eq(feed_all(framer, bytes, limit - 10, &c), 0);
	cr_expect_eq(proto_framer_pending(framer), limit - 10);
	cr_expect_eq(feed_all(framer, bytes, 10, &c), 0);
	cr_expect_eq(proto_framer_pending(framer), limit);
	cr_expect_eq(feed_all(framer, bytes, 1u << 20, &c), PROTO_ETOO_LARGE);
	cr_expect_eq(c.count, 0);
	free(bytes);
	proto_framer_free(framer);
}

Test(framer, a_line_across_feeds_is_completed_in_the_framer)
{
	proto_framer *framer = proto_framer_new(64);
	const char *line;
	size_t len;
	char first[] = "{\"id\":", second[] = "7}\r\n{\"id\":8}\n";

	cr_assert_eq(proto_framer_feed(framer, first, strlen(first)), 0);
	cr_assert_eq(proto_framer_next(framer, &line, &len, NULL), 0);
	memset(first, 'x', strlen(first)); /* the caller may reuse its buffer */
	cr_assert_eq(proto_framer_feed(framer, second, strlen(second)), 0);
	cr_assert_eq(proto_framer_next(framer, &line, &len, NULL), 1);
	cr_expect(len == 8 && !memcmp(line, "{\"id\":7}", 8));
	cr_assert_eq(proto_framer_next(framer, &line, &len, NULL), 1);
	cr_expect(len == 8 && !memcmp(line, "{\"id\":8}", 8));
	cr_expect(line >= second && line < second + sizeof(second));
	cr_expect_eq(proto_framer_next(framer, &line, &len, NULL), 0);
	proto_framer_free(framer);
}

Test(framer, feeding_before_the_last_feed_is_read_is_refused)
{
	proto_framer *framer = proto_framer_new(64);
	const char *line;
	size_t len;

	cr_assert_eq(proto_framer_feed(framer, "a\nb\n", 4), 0);
	cr_assert_eq(proto_framer_next(framer, &line, &len, NULL), 1);
	cr_expect_eq(proto_framer_feed(framer, "c\n", 2), PROTO_EBUSY);
	cr_assert_eq(proto_framer_next(framer, &line, &len, NULL), 1);
	cr_expect(len == 1 && line[0] == 'b');
	cr_assert_eq(proto_framer_next(framer, &line, &len, NULL), 0);
	cr_expect_eq(proto_framer_feed(framer, "c\n", 2), 0);
	cr_assert_eq(proto_framer_next(framer, &line, &len, NULL), 1);
	cr_expect(len == 1 && line[0] == 'c');
	proto_framer_free(framer);
}

Test(framer, empty_feeds_and_a_zero_limit)
{
	proto_framer *framer = proto_framer_new(4);
	const char *line;
	size_t len;

	cr_expect_null(proto_framer_new(0));
	cr_expect_eq(proto_framer_feed(framer, NULL, 0), 0);
	cr_expect_eq(proto_framer_next(framer, &line, &len, NULL), 0);
	proto_framer_free(framer);
	proto_framer_free(NULL);
}

Test(framer, the_default_limit_takes_a_16_mib_line)
{
	size_t limit = PROTO_FRAME_DEFAULT;
	char *bytes = malloc(limit + 1);
	proto_framer *framer = proto_framer_new(limit);
	collected c = {0};

	memset(bytes, 'z', limit);
	bytes[limit] = '\n';
	/* in two feeds, so that it is held and completed in the framer */
	cr_expect_eq(feed_all(framer, bytes, limit / 3, &c), 0);
	cr_expect_eq(feed_all(framer, bytes + limit / 3, limit + 1 - limit / 3,
			      &c), 0);
	cr_expect_eq(c.count, 1);
	cr_expect_eq(c.len, limit + 1);
	free(c.text);
	free(bytes);
	proto_framer_free(framer);
}
