/*
 * log.c: one line per event, "2026-11-22T10:32:27Z tuned[pid] level: text",
 * to stderr (journald adds its own time) or to a file reopened on SIGHUP
 * (a new file made 0640).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

enum tuned_level tuned_log_level = TUNED_INFO;

static FILE *log_file;
static char log_path[256];

static const char *const level_names[] = {
	[TUNED_ERROR] = "error", [TUNED_WARN] = "warning",
	[TUNED_INFO] = "info", [TUNED_DEBUG] = "debug",
};

int tuned_log_level_parse(const char *name, enum tuned_level *level)
{
	for (int l = TUNED_ERROR; l <= TUNED_DEBUG; l++)
		if (!strcmp(name, level_names[l]) ||
		    (l == TUNED_WARN && !strcmp(name, "warn"))) {
			*level = l;
			return 0;
		}
	return -1;
}

void tuned_log_write(enum tuned_level level, const char *fmt, ...)
{
	FILE *out = log_file ? log_file : stderr;
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;
	va_list ap;

	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
	flockfile(out); /* one line whole, whichever thread logs */
	fprintf(out, "%s tuned[%d] %s: ", stamp, (int)getpid(), level_names[level]);
	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
	fflush(out);
	funlockfile(out);
}

/* A new log file is made 0640, whatever the umask (which may take more
 * away, never add); an existing one keeps its mode. */
int tuned_log_open(const char *path)
{
	FILE *f;
	int fd, e;

	if (!path || !*path)
		return 0;
	if ((fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640)) < 0)
		return -errno;
	if (!(f = fdopen(fd, "a"))) {
		e = errno;
		close(fd);
		return -e;
	}
	if (log_file)
		fclose(log_file);
	log_file = f;
	snprintf(log_path, sizeof(log_path), "%s", path);
	return 0;
}

/* After logrotate moved the file: start a new one under the same name. */
void tuned_log_reopen(void)
{
	char path[sizeof(log_path)];
	int rc;

	if (!log_path[0])
		return;
	memcpy(path, log_path, sizeof(path));
	if ((rc = tuned_log_open(path)) < 0)
		tuned_log(TUNED_ERROR, "cannot reopen the log '%s': %s", path,
			  strerror(-rc));
	else
		tuned_log(TUNED_INFO, "log reopened");
}
