/*
 * notify.c: READY=1, STOPPING=1, WATCHDOG=1 to systemd, as one datagram to
 * $NOTIFY_SOCKET (a path, or an abstract name starting with '@'). Nothing
 * happens when the variable is unset: tuned runs the same outside systemd.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"

void tuned_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	size_t len;
	int fd;

	if (!path || !*path || strlen(path) >= sizeof(addr.sun_path))
		return;
	memcpy(addr.sun_path, path, strlen(path));
	if (path[0] == '@')
		addr.sun_path[0] = 0;
	len = offsetof(struct sockaddr_un, sun_path) + strlen(path);
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL,
		   (struct sockaddr *)&addr, (socklen_t)len) < 0)
		tuned_log(TUNED_WARN, "cannot notify systemd of '%s'", state);
	close(fd);
}
