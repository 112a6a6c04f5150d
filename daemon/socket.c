/*
 * socket.c: the listening socket and who may use it.
 *
 * The socket lives in a folder of mode 0750 that the daemon creates (or
 * tightens) first, and is bound under a umask that leaves it 0660: at no
 * moment can a user outside the daemon's user and group connect. Each
 * peer's uid, gid and pid are read with SO_PEERCRED, its supplementary
 * groups with SO_PEERGROUPS, and checked against the allowed uids and
 * gids; root and the daemon's own uid are always allowed.
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

static bool gid_allowed(const tuned_options *o, gid_t gid)
{
	for (int i = 0; i < o->nallow_gids; i++)
		if (o->allow_gids[i] == gid)
			return true;
	return false;
}

/* Whether one of the peer's supplementary groups (SO_PEERGROUPS) is
 * allowed: a user added to the socket's group keeps a primary group of
 * their own, and it is that membership which lets them through the
 * folder's permissions. */
static bool peer_groups_allowed(const tuned_options *o, int fd)
{
	gid_t fixed[64], *groups = fixed;
	socklen_t len = sizeof(fixed);
	bool allowed = false;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0 &&
	    (errno != ERANGE || !(groups = malloc(len)) ||
	     getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0))
		len = 0;
	for (size_t i = 0; i < len / sizeof(gid_t) && !allowed; i++)
		allowed = gid_allowed(o, groups[i]);
	if (groups != fixed)
		free(groups);
	return allowed;
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
	return gid_allowed(o, peer->gid) ||
	       (o->nallow_gids > 0 && peer_groups_allowed(o, fd));
}
