/*
 * socket.c: the listening socket and who may use it.
 *
 * The socket lives in a folder of mode 0750 that the daemon creates (or
 * tightens) first, and is bound under a umask that leaves it 0660: at no
 * moment can a user outside the daemon's user and group connect. Each
 * peer's uid, gid and pid are read with SO_PEERCRED and checked against
 * the allowed uids and gids; the daemon's own uid is always allowed.
 */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"

/* Creates "dir" and its parents as needed; "dir" itself ends 0750. */
static int make_private_dir(const char *dir)
{
	char parent[256];

	snprintf(parent, sizeof(parent), "%s", dir);
	if (strcmp(dirname(parent), dir) && access(parent, F_OK) != 0 &&
	    make_private_dir(parent) < 0)
		return -errno;
	if (mkdir(dir, 0750) < 0 && errno != EEXIST)
		return -errno;
	return chmod(dir, 0750) < 0 ? -errno : 0;
}

int tuned_socket_prepare(const char *path)
{
	char dir[256];
	struct stat st;
	int rc;

	snprintf(dir, sizeof(dir), "%s", path);
	if ((rc = make_private_dir(dirname(dir))) < 0)
		return rc;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		if (unlink(path) < 0)
			return -errno;
	}
	return 0;
}

bool tuned_peer_allowed(const tuned_options *o, int fd, struct ucred *peer)
{
	socklen_t len = sizeof(*peer);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, peer, &len) < 0)
		return false;
	if (peer->uid == geteuid() || peer->uid == 0)
		return true;
	for (int i = 0; i < o->nallow_uids; i++)
		if (o->allow_uids[i] == peer->uid)
			return true;
	for (int i = 0; i < o->nallow_gids; i++)
		if (o->allow_gids[i] == peer->gid)
			return true;
	return false;
}
