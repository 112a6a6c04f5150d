/*
 * util.c: the arena, the string buffer and error filling of the scheduler.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

struct sched_arena_block {
	sched_arena_block *next;
	max_align_t data[];
};

/* Returns "size" zeroed bytes owned by "arena", or NULL. */
void *sched_arena_alloc(sched_arena *arena, size_t size)
{
	sched_arena_block *block = calloc(1, sizeof(*block) + size);

	if (!block)
		return NULL;
	block->next = arena->head;
	arena->head = block;
	return block->data;
}

char *sched_arena_strndup(sched_arena *arena, const char *s, size_t n)
{
	char *copy = sched_arena_alloc(arena, n + 1);

	if (copy)
		memcpy(copy, s, n);
	return copy;
}

void sched_arena_release(sched_arena *arena)
{
	while (arena->head) {
		sched_arena_block *next = arena->head->next;

		free(arena->head);
		arena->head = next;
	}
}

static void buf_fail(sched_buf *buf)
{
	free(buf->str);
	buf->str = NULL;
	buf->cap = SIZE_MAX;
}

/* Appends formatted text to "buf"; after a failed allocation the buffer
 * stays NULL and further appends do nothing. */
void sched_buf_printf(sched_buf *buf, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (buf->cap == SIZE_MAX)
		return;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (buf->len + n + 1 > buf->cap) {
		size_t cap = (buf->len + n + 1) * 2;
		char *str = realloc(buf->str, cap);

		if (!str)
			return buf_fail(buf);
		buf->str = str;
		buf->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(buf->str + buf->len, n + 1, fmt, ap);
	va_end(ap);
	buf->len += n;
}

void sched_buf_release(sched_buf *buf)
{
	free(buf->str);
	*buf = (sched_buf){0};
}

/* The length of the valid UTF-8 character at "s", or 0. */
static int utf8_valid(const unsigned char *s)
{
	int n = *s >= 0xf0 && *s < 0xf5 ? 4 : *s >= 0xe0 ? 3 : *s >= 0xc2 ? 2 : 0;

	for (int i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

/* Makes "message" one line of valid UTF-8: control characters become
 * spaces, stray bytes '?'. */
static void clean_message(char *message)
{
	unsigned char *s = (unsigned char *)message;

	while (*s) {
		int n = *s < 0x80 ? 1 : utf8_valid(s);

		if (n == 0)
			*s = '?', n = 1;
		else if (*s < 0x20 || *s == 0x7f)
			*s = ' ';
		s += n;
	}
}

int sched_fail(sched_error *err, int code, int op, int column,
	       const char *fmt, ...)
{
	va_list ap;
	int n = 0;

	if (!err)
		return code;
	err->code = code;
	err->op = op;
	err->column = column;
	if (op >= 0 && column > 0)
		n = snprintf(err->message, sizeof(err->message),
			     "op %d, column %d: ", op, column);
	else if (op >= 0)
		n = snprintf(err->message, sizeof(err->message), "op %d: ", op);
	va_start(ap, fmt);
	vsnprintf(err->message + n, sizeof(err->message) - n, fmt, ap);
	va_end(ap);
	clean_message(err->message);
	return code;
}

const char *sched_node_excerpt(const sched_node *node, const char *text,
			       char out[SCHED_EXCERPT])
{
	const char *start = text + node->col - 1;
	int len = node->end_col - node->col, keep = len;

	if (len > SCHED_EXCERPT - 8) {
		keep = SCHED_EXCERPT - 12;
		while (keep > 0 && ((unsigned char)start[keep] & 0xc0) == 0x80)
			keep--;
	}
	snprintf(out, SCHED_EXCERPT, "%.*s%s", keep, start, keep < len ? "..." : "");
	return out;
}

const char *sched_unknown_key(json_t *obj, const char *const *keys)
{
	const char *key;
	json_t *value;

	json_object_foreach(obj, key, value) {
		int i = 0;

		while (keys[i] && strcmp(keys[i], key))
			i++;
		if (!keys[i])
			return key;
	}
	return NULL;
}
