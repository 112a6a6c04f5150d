/*
 * test_startstop.c: starting and stopping a real tuned never hurts a
 * neighbour: a second daemon on a live socket or a held cache is refused
 * and leaves the first one reachable; a stale socket is replaced, a file
 * that is no socket left alone; new files are not open to others whatever
 * the umask; the share folders of daemons that are gone are removed; a
 * queue file that does not read is moved aside and the daemon starts.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

static mode_t mode_of(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0, "cannot stat %s", path);
	return st.st_mode & 07777;
}

static ino_t inode_of(const char *path)
{
	struct stat st;

	cr_assert_eq(lstat(path, &st), 0, "%s is gone", path);
	return st.st_ino;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "cannot write %s", path);
	fputs(text, f);
	fclose(f);
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = NULL;
	size_t len = 0;

	cr_assert_not_null(f, "cannot read %s", path);
	if (getdelim(&text, &len, '\0', f) < 0) {
		free(text);
		text = strdup("");
	}
	fclose(f);
	return text;
}

/* A second daemon in the first's folder, with a log of its own. */
static fixture second_of(const fixture *first)
{
	fixture f = *first;

	f.pid = 0;
	snprintf(f.log, sizeof(f.log), "%s/second.log", first->dir);
	return f;
}

/* The first daemon still answers on its socket, the very one it bound. */
static void expect_reachable(const fixture *f, ino_t socket_inode)
{
	conn c;

	cr_expect_eq(inode_of(f->socket), socket_inode, "the socket was replaced");
	if (!conn_open(&c, f->socket)) {
		cr_expect_fail("the first daemon is unreachable");
		return;
	}
	conn_hello(&c);
	conn_close(&c);
}

/* Whether a folder /tmp/tuned-share-<pid>-* exists. */
static bool share_folder_of(pid_t pid)
{
	DIR *d = opendir("/tmp");
	struct dirent *entry;
	char prefix[64];
	bool found = false;

	snprintf(prefix, sizeof(prefix), "tuned-share-%d-", (int)pid);
	while (d && !found && (entry = readdir(d)))
		found = !strncmp(entry->d_name, prefix, strlen(prefix));
	if (d)
		closedir(d);
	return found;
}

Test(startstop, a_second_daemon_on_a_live_socket_is_refused, .timeout = 120)
{
	fixture f, second;
	char message[300];
	ino_t inode;
	pid_t pid;

	fixture_init(&f);
	fixture_start(&f, NULL);
	inode = inode_of(f.socket);
	second = second_of(&f);
	snprintf(second.cache, sizeof(second.cache), "%s/state/other.db", f.dir);
	cr_expect_eq(fixture_start_refused(&second, NULL, &pid), 1);
	snprintf(message, sizeof(message), "another daemon is listening on '%s' (pid %d)",
		 f.socket, (int)f.pid);
	cr_expect(fixture_log_contains(&second, message), "the log lacks \"%s\"", message);
	cr_expect_not(fixture_log_contains(&second, "cannot save the job queue"));
	cr_expect_not(share_folder_of(pid), "the refused daemon left its share folder");
	expect_reachable(&f, inode);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	cr_expect_neq(access(f.socket, F_OK), 0, "the first daemon left its socket");
	fixture_cleanup(&f);
}

Test(startstop, a_second_daemon_on_a_held_cache_leaves_the_socket, .timeout = 120)
{
	fixture f, second;
	ino_t inode;

	fixture_init(&f);
	fixture_start(&f, NULL);
	inode = inode_of(f.socket);
	second = second_of(&f);
	cr_expect_eq(fixture_start_refused(&second, NULL, NULL), 1);
	cr_expect(fixture_log_contains(&second, "it is open for writing elsewhere"));
	cr_expect_not(fixture_log_contains(&second, "cannot save the job queue"));
	expect_reachable(&f, inode);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* A socket bound at "path" (its folder exists): its fd. */
static int bind_at(const char *path)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd;

	cr_assert_lt(strlen(path), sizeof(addr.sun_path));
	memcpy(addr.sun_path, path, strlen(path) + 1);
	cr_assert_geq(fd = socket(AF_UNIX, SOCK_STREAM, 0), 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0,
		     "cannot bind %s", path);
	return fd;
}

/* A socket nobody listens on, as a daemon killed with SIGKILL leaves. */
Test(startstop, a_stale_socket_is_replaced, .timeout = 120)
{
	fixture f;
	char run_dir[100];
	conn c;

	fixture_init(&f);
	snprintf(run_dir, sizeof(run_dir), "%s/run", f.dir);
	cr_assert_eq(mkdir(run_dir, 0750), 0);
	close(bind_at(f.socket));
	cr_assert_not(conn_open(&c, f.socket), "the stale socket accepts");
	fixture_start(&f, NULL);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
}

/* Another program put its socket at the path while the daemon ran: the
 * daemon, stopping, removes only the socket it bound. */
Test(startstop, a_stopping_daemon_leaves_a_socket_it_did_not_bind, .timeout = 120)
{
	fixture f;
	char moved[200];
	ino_t inode;
	int fd;

	fixture_init(&f);
	fixture_start(&f, NULL);
	snprintf(moved, sizeof(moved), "%s.moved", f.socket);
	cr_assert_eq(rename(f.socket, moved), 0);
	fd = bind_at(f.socket);
	inode = inode_of(f.socket);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	cr_expect_eq(access(f.socket, F_OK), 0, "the daemon removed a socket not its own");
	if (access(f.socket, F_OK) == 0)
		cr_expect_eq(inode_of(f.socket), inode);
	close(fd);
	fixture_cleanup(&f);
}

Test(startstop, a_file_at_the_socket_path_is_left_alone, .timeout = 120)
{
	fixture f;
	char run_dir[100], message[300], *text;

	fixture_init(&f);
	snprintf(run_dir, sizeof(run_dir), "%s/run", f.dir);
	cr_assert_eq(mkdir(run_dir, 0750), 0);
	write_text(f.socket, "not a socket\n");
	cr_expect_eq(fixture_start_refused(&f, NULL, NULL), 1);
	snprintf(message, sizeof(message), "'%s' exists and is not a socket", f.socket);
	cr_expect(fixture_log_contains(&f, message), "the log lacks \"%s\"", message);
	text = read_text(f.socket);
	cr_expect_str_eq(text, "not a socket\n");
	free(text);
	fixture_cleanup(&f);
}

/* A path longer than a socket's address: refused, not cut short. */
Test(startstop, a_socket_path_too_long_is_refused, .timeout = 120)
{
	const char *message = "the path is longer than a socket's 107 characters";
	char name[91], path[200];
	fixture f;

	fixture_init(&f);
	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	snprintf(path, sizeof(path), "%s/run/%s.sock", f.dir, name);
	cr_assert(strlen(path) > 107 && strlen(path) < sizeof(f.socket));
	memcpy(f.socket, path, strlen(path) + 1);
	cr_expect_eq(fixture_start_refused(&f, NULL, NULL), 1);
	cr_expect(fixture_log_contains(&f, message), "the log lacks \"%s\"", message);
	fixture_cleanup(&f);
}

/* Under umask 000 nothing tuned creates is open to others. */
Test(startstop, new_files_keep_their_modes_under_umask_000, .timeout = 120)
{
	static const char *const cache_files[] = {"", "-wal", "-shm"};
	fixture f;
	char path[200], run_dir[100], state_dir[100];

	fixture_init(&f);
	umask(0);
	fixture_start(&f, NULL);
	umask(022);
	snprintf(run_dir, sizeof(run_dir), "%s/run", f.dir);
	snprintf(state_dir, sizeof(state_dir), "%s/state", f.dir);
	cr_expect_eq(mode_of(f.log), 0640, "the log is %04o", mode_of(f.log));
	cr_expect_eq(mode_of(f.socket), 0660, "the socket is %04o", mode_of(f.socket));
	cr_expect_eq(mode_of(run_dir), 0750, "run/ is %04o", mode_of(run_dir));
	cr_expect_eq(mode_of(state_dir), 0750, "state/ is %04o", mode_of(state_dir));
	for (size_t i = 0; i < sizeof(cache_files) / sizeof(*cache_files); i++) {
		snprintf(path, sizeof(path), "%s%s", f.cache, cache_files[i]);
		cr_expect_eq(mode_of(path), 0600, "%s is %04o", path, mode_of(path));
	}
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

/* A pid that existed and is gone. */
static pid_t dead_pid(void)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(0);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	return pid;
}

/* "/tmp/tuned-share-<pid>-XXXXXX" with a file in it, as a runner makes. */
static void make_share_folder(pid_t pid, char *path, size_t size)
{
	char file[300];

	snprintf(path, size, "/tmp/tuned-share-%d-XXXXXX", (int)pid);
	cr_assert_not_null(mkdtemp(path));
	snprintf(file, sizeof(file), "%s/kernel.so", path);
	write_text(file, "compiled\n");
}

static void remove_folder(const char *path)
{
	char command[100];

	snprintf(command, sizeof(command), "rm -rf '%s'", path);
	cr_expect_eq(system(command), 0, "cannot remove %s", path);
}

Test(startstop, share_folders_of_daemons_that_are_gone_are_removed, .timeout = 120)
{
	char gone[64], live[64], theirs[64], message[200];
	pid_t dead = dead_pid();
	fixture f;

	make_share_folder(dead, gone, sizeof(gone));
	make_share_folder(getpid(), live, sizeof(live));
	make_share_folder(dead, theirs, sizeof(theirs));
	if (geteuid() == 0)
		cr_assert_eq(chown(theirs, 65534, 65534), 0);
	else
		theirs[0] = 0;
	fixture_init(&f);
	fixture_start(&f, NULL);
	cr_expect_neq(access(gone, F_OK), 0, "%s is still there", gone);
	snprintf(message, sizeof(message), "removed '%s', left behind by tuned pid %d",
		 gone, (int)dead);
	cr_expect(fixture_log_contains(&f, message), "the log lacks \"%s\"", message);
	cr_expect_eq(access(live, F_OK), 0, "%s, of a live pid, was removed", live);
	if (theirs[0])
		cr_expect_eq(access(theirs, F_OK), 0, "%s, another user's, was removed",
			     theirs);
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
	remove_folder(live);
	if (theirs[0])
		remove_folder(theirs);
}

Test(startstop, a_damaged_queue_file_is_moved_aside, .timeout = 120)
{
	char state_dir[100], queue[200], aside[400], message[500], *text;
	fixture f;
	DIR *d;
	struct dirent *entry;

	fixture_init(&f);
	snprintf(state_dir, sizeof(state_dir), "%s/state", f.dir);
	cr_assert_eq(mkdir(state_dir, 0750), 0);
	snprintf(queue, sizeof(queue), "%s.jobs.json", f.cache);
	write_text(queue, "garbage\n");
	fixture_start(&f, NULL);
	cr_expect_neq(access(queue, F_OK), 0, "%s is still there", queue);
	aside[0] = 0;
	cr_assert_not_null(d = opendir(state_dir));
	while ((entry = readdir(d)))
		if (strstr(entry->d_name, "cache.db.jobs.json.damaged-"))
			snprintf(aside, sizeof(aside), "%s/%s", state_dir, entry->d_name);
	closedir(d);
	cr_assert(aside[0], "no %s.damaged-<time>", queue);
	text = read_text(aside);
	cr_expect_str_eq(text, "garbage\n");
	free(text);
	snprintf(message, sizeof(message), "warning: '%s' is not a job queue", queue);
	cr_expect(fixture_log_contains(&f, message), "the log lacks \"%s\"", message);
	snprintf(message, sizeof(message), "moved it to '%s'", aside);
	cr_expect(fixture_log_contains(&f, message), "the log lacks \"%s\"", message);
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	fixture_cleanup(&f);
}
