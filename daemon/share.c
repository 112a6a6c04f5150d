/*
 * share.c: the shared folders of daemons that are gone.
 *
 * A daemon's runner compiles into "/tmp/tuned-share-<pid>-XXXXXX" and
 * removes the folder when it stops; a daemon that did not stop normally
 * (killed, crashed, the machine lost power) leaves it behind. At start the
 * folders whose daemon is gone are emptied and removed: the pid in the
 * name no longer exists (kill(pid, 0) fails with ESRCH), or is this
 * process's own, whose runner has not made its folder yet. Only folders of
 * the daemon's own uid are touched; a live daemon's folder stays.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "kgen.h"
#include "runner.h"

/* The pid in a name "tuned-share-<pid>-XXXXXX", or 0 when it is none. */
static pid_t pid_of(const char *name)
{
	size_t n = strlen(TUNED_SHARE_NAME);
	char *end;
	long pid;

	if (strncmp(name, TUNED_SHARE_NAME, n) != 0)
		return 0;
	pid = strtol(name + n, &end, 10);
	return pid > 0 && pid <= INT_MAX && *end == '-' && strlen(end + 1) == 6 ?
	       (pid_t)pid : 0;
}

/* A folder of ours whose daemon is gone. */
static bool is_stale(const char *path, pid_t pid)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
	       st.st_uid == geteuid() &&
	       (pid == getpid() || (kill(pid, 0) < 0 && errno == ESRCH));
}

void tuned_share_remove_stale(void)
{
	DIR *d = opendir(TUNED_SHARE_DIR);
	struct dirent *entry;
	char path[PATH_MAX];

	while (d && (entry = readdir(d))) {
		pid_t pid = pid_of(entry->d_name);

		snprintf(path, sizeof(path), TUNED_SHARE_DIR "/%s", entry->d_name);
		if (!pid || !is_stale(path, pid))
			continue;
		kgen_empty_folder(path);
		if (rmdir(path) == 0)
			tuned_log(TUNED_INFO, "removed '%s', left behind by tuned pid %d, "
				  "which is gone", path, (int)pid);
		else
			tuned_log(TUNED_WARN, "cannot remove '%s', left behind by tuned "
				  "pid %d, which is gone: %s", path, (int)pid,
				  strerror(errno));
	}
	if (d)
		closedir(d);
}
