/*
 * error.c: the kernels module's errors: filling one, releasing its log.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kgen_int.h"

int kgen_fail(kgen_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return code;
}

void kgen_error_release(kgen_error *err)
{
	free(err->log);
	err->log = NULL;
}
