/*
 * file.c: a whole file read into memory (common.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

#define FIRST_CHUNK 4096

/* The rest of "f" into a new buffer, NUL-terminated: grows by doubling.
 * NULL on a read error or when memory runs out (errno set). */
static char *read_stream(FILE *f, size_t *len)
{
	size_t cap = FIRST_CHUNK, used = 0;
	char *text = malloc(cap), *grown;

	while (text) {
		used += fread(text + used, 1, cap - used - 1, f);
		if (used < cap - 1)
			break;
		if (!(grown = realloc(text, cap * 2))) {
			free(text);
			return NULL;
		}
		text = grown;
		cap *= 2;
	}
	if (text && ferror(f)) {
		free(text);
		errno = errno ? errno : EIO;
		return NULL;
	}
	if (text) {
		text[used] = 0;
		*len = used;
	}
	return text;
}

char *tuned_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	size_t n = 0;
	char *text;
	int saved;

	if (!f)
		return NULL;
	errno = 0;
	text = read_stream(f, &n);
	saved = errno;
	fclose(f);
	errno = saved;
	if (text && len)
		*len = n;
	return text;
}
