/*
 * backend.c: opening a backend by name, and "auto"; the shared folder of
 * compiled kernels.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "kgen_int.h"

static int open_named(kgen_backend *backend, const char *name, kgen_error *err)
{
	if (!strcmp(name, "cpu"))
		return kgen_cpu_open(backend, err);
	if (!strcmp(name, "cuda"))
		return kgen_cuda_open(backend, err);
	if (!strcmp(name, "emulated"))
		return kgen_emulated_open(backend, err);
	return kgen_fail(err, KGEN_EBACKEND, "unknown backend '%s': use cpu, "
			 "cuda, emulated or auto", name);
}

bool kgen_backend_prints_cuda(const kgen_backend *backend)
{
	return !strcmp(backend->ops->name, "cuda") || !strcmp(backend->ops->name, "emulated");
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
	free(backend->share);
	free(backend);
}

/* Room left in a path after the folder: a slash, a SHA-256 in hex, a
 * suffix and a temporary tail. */
#define SHARE_NAME_ROOM 128

int kgen_backend_share(kgen_backend *backend, const char *dir, kgen_error *err)
{
	char *copy = NULL;
	struct stat st;

	if (dir && strlen(dir) + SHARE_NAME_ROOM >= PATH_MAX)
		return kgen_fail(err, KGEN_EIO, "shared folder '%s': the path is too "
				 "long", dir);
	if (dir && mkdir(dir, 0700) < 0 && errno != EEXIST)
		return kgen_fail(err, KGEN_EIO, "cannot make the shared folder '%s': "
				 "%s", dir, strerror(errno));
	if (dir && (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)))
		return kgen_fail(err, KGEN_EIO, "shared folder '%s' is not a folder",
				 dir);
	if (dir && !(copy = strdup(dir)))
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	free(backend->share);
	backend->share = copy;
	return KGEN_OK;
}

void kgen_share_path(const kgen_backend *backend, const char *source,
		     const char *suffix, char *path, size_t size)
{
	char key[SCHED_KEY_HEX + 1];

	sched_sha256_hex(source, strlen(source), key);
	snprintf(path, size, "%s/%s%s", backend->share, key, suffix);
}

void kgen_share_temp(const char *path, char *temp, size_t size)
{
	static unsigned counter;

	snprintf(temp, size, "%s.tmp-%d-%u", path, (int)getpid(), counter++);
}

int kgen_share_publish(const char *temp, const char *path, kgen_error *err)
{
	if (rename(temp, path) == 0)
		return KGEN_OK;
	unlink(temp);
	return kgen_fail(err, KGEN_EIO, "cannot rename '%s' to '%s': %s", temp,
			 path, strerror(errno));
}

int kgen_share_write(const char *path, const void *data, size_t size,
		     kgen_error *err)
{
	char temp[PATH_MAX];
	int fd, failed;

	kgen_share_temp(path, temp, sizeof(temp));
	if ((fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
		return kgen_fail(err, KGEN_EIO, "cannot write '%s': %s", temp,
				 strerror(errno));
	failed = write(fd, data, size) != (ssize_t)size;
	if (close(fd) < 0 || failed) {
		unlink(temp);
		return kgen_fail(err, KGEN_EIO, "cannot write '%s'", temp);
	}
	return kgen_share_publish(temp, path, err);
}

int kgen_share_read(const char *path, char **data, size_t *size,
		    kgen_error *err)
{
	*size = 0;
	*data = tuned_read_file(path, size);
	if (*data && *size > 0)
		return KGEN_OK;
	free(*data);
	*data = NULL;
	*size = 0;
	return kgen_fail(err, KGEN_EIO, "cannot read '%s'", path);
}

bool kgen_share_has(const char *path)
{
	return access(path, R_OK) == 0;
}

void kgen_empty_folder(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *entry;
	char path[PATH_MAX];

	while (d && (entry = readdir(d)))
		if (entry->d_name[0] != '.') {
			snprintf(path, sizeof(path), "%s/%s", dir, entry->d_name);
			unlink(path);
		}
	if (d)
		closedir(d);
}
