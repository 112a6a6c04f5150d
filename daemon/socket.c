/*
 * socket.c: the listening socket and who may use it.
 *
 * The socket is bound under a umask that leaves it 0660, in a folder that
 * no other user can write to: a folder tuned creates is made 0750; a
 * folder that exists already keeps its mode (it may be /tmp or a folder
 * other programs share), and is refused when others may write to it or
 * another user owns it, since whoever can write to the folder can put a
 * socket of their own in place of the daemon's. The path is taken only
 * when it is free or holds a socket that refuses connections (left by a
 * daemon that died); a daemon listening there, or a file that is no
 * socket, refuses the start and is left as it is. At the end the socket
 * is removed only if it is still the one this process bound. Each peer's
 * uid, gid and pid are read with SO_PEERCRED, its supplementary groups
 * with SO_PEERGROUPS, and checked against the allowed uids and gids; root,
 * the daemon's own uid and the members of the admin groups are always
 * allowed, and are the admins.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"

/* Creates "dir" 0750, and its missing parents 0750 too; an existing
 * folder is left as it is. */
static int make_dir(const char *dir)
{
	char parent[256];

	snprintf(parent, sizeof(parent), "%s", dir);
	if (strcmp(dirname(parent), dir) && access(parent, F_OK) != 0 &&
	    make_dir(parent) < 0)
		return -errno;
	return mkdir(dir, 0750) < 0 && errno != EEXIST ? -errno : 0;
}

/* Refuses a folder that another user could put a socket in: one writable
 * by others, or owned by a user other than root and the daemon's. */
static int check_dir(const char *dir, const char *file, char *why, size_t size)
{
	struct stat st;

	if (stat(dir, &st) < 0) {
		snprintf(why, size, "the socket's folder '%s': %s", dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, size, "the socket's folder '%s' is not a folder", dir);
		return -1;
	}
	if (st.st_mode & S_IWOTH) {
		snprintf(why, size, "the socket's folder '%s' is writable by others "
			 "(mode %04o): put the socket in a folder of its own, e.g. "
			 "%s/tuned-%d/%s", dir, (unsigned)(st.st_mode & 07777),
			 strcmp(dir, "/") ? dir : "", (int)geteuid(), file);
		return -1;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		snprintf(why, size, "the socket's folder '%s' belongs to uid %d, not to "
			 "tuned's user (uid %d) or root: put the socket in a folder "
			 "of its own", dir, (int)st.st_uid, (int)geteuid());
		return -1;
	}
	return 0;
}

/* Whether a daemon listens on the socket "path": 1 with *pid its pid (0
 * when SO_PEERCRED does not tell), 0 when the connection is refused (a
 * socket left by a daemon that died), -1 with errno when it cannot tell
 * (a full backlog, no permission). */
static int probe_socket(const char *path, pid_t *pid)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	struct ucred peer = {0};
	socklen_t len = sizeof(peer);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int rc, e;

	if (fd < 0)
		return -1;
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0) {
		getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len);
		*pid = peer.pid;
		rc = 1;
	} else {
		rc = errno == ECONNREFUSED ? 0 : -1;
	}
	e = errno;
	close(fd);
	errno = e;
	return rc;
}

/* Clears the way for the socket at "path": nothing there; a socket nobody
 * listens on, removed; anything else refused and left as it is. */
static int clear_path(const char *path, char *why, size_t size)
{
	char who[32] = "";
	struct stat st;
	pid_t pid = 0;
	int live;

	if (lstat(path, &st) < 0)
		return 0;
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(why, size, "'%s' exists and is not a socket: tuned leaves "
			 "it alone; remove it or choose another --socket", path);
		return -1;
	}
	live = probe_socket(path, &pid);
	if (live > 0) {
		if (pid > 0)
			snprintf(who, sizeof(who), " (pid %d)", (int)pid);
		snprintf(why, size, "another daemon is listening on '%s'%s: stop "
			 "it first, or choose another --socket", path, who);
		return -1;
	}
	if (live < 0) {
		snprintf(why, size, "cannot tell whether a daemon listens on '%s' "
			 "(%s): tuned leaves it alone", path, strerror(errno));
		return -1;
	}
	if (unlink(path) < 0) {
		snprintf(why, size, "cannot remove the stale socket '%s': %s", path,
			 strerror(errno));
		return -1;
	}
	return 0;
}

/* Binds and listens on "path", under a umask that leaves the socket 0660:
 * listening at once, so no other daemon takes it for a stale one. */
static int bind_socket(const char *path, tuned_socket_id *id, char *why, size_t size)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), rc;
	struct stat st;
	mode_t old;

	if (fd < 0) {
		snprintf(why, size, "cannot make a socket: %s", strerror(errno));
		return -1;
	}
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	old = umask(0117);
	rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
	umask(old);
	if (rc == 0 && listen(fd, 128) == 0 && lstat(path, &st) == 0) {
		*id = (tuned_socket_id){.dev = st.st_dev, .ino = st.st_ino};
		return fd;
	}
	snprintf(why, size, "%s", strerror(errno));
	if (rc == 0)
		unlink(path);
	close(fd);
	return -1;
}

int tuned_socket_bind(const char *path, tuned_socket_id *id, char *why, size_t size)
{
	const size_t longest = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
	char copy[256], dir[256], file[256];
	int dir_fd, fd = -1, rc;

	*id = (tuned_socket_id){0};
	if (strlen(path) > longest) {
		snprintf(why, size, "the path is longer than a socket's %zu "
			 "characters", longest);
		return -1;
	}
	snprintf(copy, sizeof(copy), "%s", path);
	snprintf(dir, sizeof(dir), "%s", dirname(copy));
	snprintf(copy, sizeof(copy), "%s", path);
	snprintf(file, sizeof(file), "%s", basename(copy));
	if ((rc = make_dir(dir)) < 0) {
		snprintf(why, size, "cannot make the socket's folder '%s': %s", dir,
			 strerror(-rc));
		return -1;
	}
	if (check_dir(dir, file, why, size) < 0)
		return -1;
	/* One daemon at a time between looking at the path and listening. */
	dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir_fd < 0 || flock(dir_fd, LOCK_EX) < 0) {
		snprintf(why, size, "cannot lock the socket's folder '%s': %s", dir,
			 strerror(errno));
		if (dir_fd >= 0)
			close(dir_fd);
		return -1;
	}
	if (clear_path(path, why, size) == 0)
		fd = bind_socket(path, id, why, size);
	close(dir_fd);
	return fd;
}

void tuned_socket_remove(const char *path, const tuned_socket_id *id)
{
	struct stat st;

	if (id->ino && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) &&
	    st.st_dev == id->dev && st.st_ino == id->ino)
		unlink(path);
}

static bool gid_in(const gid_t *gids, int n, gid_t gid)
{
	for (int i = 0; i < n; i++)
		if (gids[i] == gid)
			return true;
	return false;
}

/* Whether one of the peer's supplementary groups (SO_PEERGROUPS) is in
 * "gids": a user added to the socket's group keeps a primary group of
 * their own, and it is that membership which lets them through the
 * folder's permissions. */
static bool peer_groups_in(const gid_t *gids, int n, int fd)
{
	gid_t fixed[64], *groups = fixed;
	socklen_t len = sizeof(fixed);
	bool in = false;

	if (n == 0)
		return false;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0 &&
	    (errno != ERANGE || !(groups = malloc(len)) ||
	     getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0))
		len = 0;
	for (size_t i = 0; i < len / sizeof(gid_t) && !in; i++)
		in = gid_in(gids, n, groups[i]);
	if (groups != fixed)
		free(groups);
	return in;
}

/* The peer's primary group or one of its supplementary groups is in
 * "gids". */
static bool peer_in_groups(const gid_t *gids, int n, int fd, const struct ucred *peer)
{
	return gid_in(gids, n, peer->gid) || peer_groups_in(gids, n, fd);
}

bool tuned_peer_is_admin(const tuned_options *o, int fd, const struct ucred *peer)
{
	return peer->uid == geteuid() || peer->uid == 0 ||
	       peer_in_groups(o->admin_gids, o->nadmin_gids, fd, peer);
}

bool tuned_peer_allowed(const tuned_options *o, int fd, struct ucred *peer)
{
	socklen_t len = sizeof(*peer);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, peer, &len) < 0)
		return false;
	for (int i = 0; i < o->nallow_uids; i++)
		if (o->allow_uids[i] == peer->uid)
			return true;
	return peer_in_groups(o->allow_gids, o->nallow_gids, fd, peer) ||
	       tuned_peer_is_admin(o, fd, peer);
}
