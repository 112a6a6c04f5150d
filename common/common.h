/*
 * common.h: what every module of tuned needs and none owns.
 */
#ifndef TUNED_COMMON_H
#define TUNED_COMMON_H

#include <stddef.h>

/* The whole file "path" (the caller frees), with a NUL after its bytes;
 * its length in *len when "len" is not NULL. Reads to the end, so pipes
 * and files that grow as they are read work too. NULL when it cannot be
 * opened or read, or memory runs out, with errno saying why. */
char *tuned_read_file(const char *path, size_t *len);

#endif
