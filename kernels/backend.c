/*
 * backend.c: opening a backend by name, and "auto".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kgen_int.h"

static int open_named(kgen_backend *backend, const char *name, kgen_error *err)
{
	if (!strcmp(name, "cpu"))
		return kgen_cpu_open(backend, err);
	if (!strcmp(name, "cuda"))
		return kgen_cuda_open(backend, err);
	return kgen_fail(err, KGEN_EBACKEND, "unknown backend '%s': use cpu, "
			 "cuda or auto", name);
}

/* cuda where a GPU is usable, else cpu; the description says why. */
static int open_auto(kgen_backend *backend, kgen_error *err)
{
	kgen_error why = {0};
	char reason[sizeof(why.message)];
	int rc;

	if (kgen_cuda_open(backend, &why) == KGEN_OK) {
		strncat(backend->description, " (auto: a GPU is usable)",
			sizeof(backend->description) - strlen(backend->description) - 1);
		return KGEN_OK;
	}
	snprintf(reason, sizeof(reason), "%s", why.message);
	kgen_error_release(&why);
	if ((rc = kgen_cpu_open(backend, err)) < 0)
		return rc;
	snprintf(backend->description + strlen(backend->description),
		 sizeof(backend->description) - strlen(backend->description),
		 " (auto: no usable GPU: %s)", reason);
	return KGEN_OK;
}

int kgen_backend_open(const char *name, kgen_backend **out, kgen_error *err)
{
	kgen_backend *backend = calloc(1, sizeof(*backend));
	int rc;

	*out = NULL;
	if (!backend)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	rc = strcmp(name, "auto") ? open_named(backend, name, err)
				  : open_auto(backend, err);
	if (rc < 0) {
		free(backend);
		return rc;
	}
	*out = backend;
	return KGEN_OK;
}

const char *kgen_backend_name(const kgen_backend *backend)
{
	return backend->ops->name;
}

const char *kgen_backend_description(const kgen_backend *backend)
{
	return backend->description;
}

void kgen_backend_close(kgen_backend *backend)
{
	if (!backend)
		return;
	backend->ops->close(backend);
	free(backend);
}
