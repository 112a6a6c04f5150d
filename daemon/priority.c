/*
 * priority.c: the daemon's background threads (the search, and the
 * parsing and cache reads of libuv's threadpool) run at a lower CPU
 * priority than the loop thread, so that on a busy machine a client's
 * status or fetch is not queued behind them for a time slice.
 */
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon.h"

void tuned_thread_background(void)
{
	/* Linux gives each thread its own nice value; raising it needs no
	 * privilege, and a failure only leaves the thread as it was */
	(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), TUNED_BACKGROUND_NICE);
}
