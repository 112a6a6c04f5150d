/*
 * test_access.c: the real tuned's socket: the modes of its folder (made
 * private when tuned creates it, kept when it exists, refused when others
 * can write to it or another user owns it). Who may connect is tested in
 * test_daemon.c.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

extern char **environ;

static mode_t mode_of(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0, "cannot stat %s", path);
	return st.st_mode & 07777;
}

/* A folder "name" in the fixture's folder, of exactly "mode". */
static void make_folder(const fixture *f, const char *name, mode_t mode, char *out,
			size_t size)
{
	snprintf(out, size, "%s/%s", f->dir, name);
	cr_assert_eq(mkdir(out, 0700), 0, "cannot make %s", out);
	cr_assert_eq(chmod(out, mode), 0);
}

/* Starts tuned on "socket", which must refuse it: its exit status. */
static int start_refused(const fixture *f, const char *socket)
{
	const char *argv[] = {getenv("TUNED"), "--backend", "cpu", "--socket", socket,
			      "--cache", f->cache, "--log", f->log, NULL};
	pid_t pid;
	int status = 0;

	cr_assert_eq(posix_spawn(&pid, argv[0], NULL, NULL, (char **)argv, environ), 0);
	for (int i = 0; i < 600 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(50000);
	if (waitpid(pid, &status, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		cr_assert_fail("tuned started on %s", socket);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Test(access, a_new_socket_folder_is_made_private, .timeout = 120)
{
	fixture f;
	char run_dir[160];

	fixture_init(&f);
	fixture_start(&f, NULL);
	snprintf(run_dir, sizeof(run_dir), "%s/run", f.dir);
	cr_expect_eq(mode_of(run_dir), 0750, "run/ is %04o", mode_of(run_dir));
	cr_expect_eq(mode_of(f.socket), 0660, "the socket is %04o", mode_of(f.socket));
	fixture_stop(&f, SIGTERM, NULL);
	fixture_cleanup(&f);
}

Test(access, an_existing_socket_folder_keeps_its_mode, .timeout = 120)
{
	fixture f;
	char shared[100];

	fixture_init(&f);
	make_folder(&f, "shared", 0755, shared, sizeof(shared));
	snprintf(f.socket, sizeof(f.socket), "%s/gpu0.sock", shared);
	fixture_start(&f, NULL);
	cr_expect_eq(mode_of(shared), 0755, "running: the folder became %04o",
		     mode_of(shared));
	cr_expect_eq(fixture_stop(&f, SIGTERM, NULL), 0);
	cr_expect_eq(mode_of(shared), 0755, "stopped: the folder became %04o",
		     mode_of(shared));
	fixture_cleanup(&f);
}

/* Like /tmp (1777) or a folder anyone may write to (0777): whoever can
 * write there could put their own socket in the daemon's place. */
Test(access, a_socket_folder_others_can_write_to_is_refused, .timeout = 120)
{
	static const mode_t modes[] = {0777, 01777};

	for (size_t i = 0; i < sizeof(modes) / sizeof(*modes); i++) {
		fixture f;
		char open_dir[160], socket[200], message[300];
		int status;

		fixture_init(&f);
		make_folder(&f, "open", modes[i], open_dir, sizeof(open_dir));
		snprintf(socket, sizeof(socket), "%s/x.sock", open_dir);
		status = start_refused(&f, socket);
		snprintf(message, sizeof(message), "the socket's folder '%s' is writable "
			 "by others (mode %04o): put the socket in a folder of its own",
			 open_dir, (unsigned)modes[i]);
		cr_expect_neq(status, 0, "mode %04o: tuned exited 0", (unsigned)modes[i]);
		cr_expect(fixture_log_contains(&f, message), "mode %04o: the log lacks \"%s\"",
			  (unsigned)modes[i], message);
		cr_expect_eq(mode_of(open_dir), modes[i], "the folder became %04o",
			     mode_of(open_dir));
		cr_expect_neq(access(socket, F_OK), 0, "a socket was made in %s", open_dir);
		if (status == 0 || !fixture_log_contains(&f, message))
			fixture_print_log(&f);
		fixture_cleanup(&f);
	}
}

Test(access, a_socket_folder_of_another_user_is_refused, .timeout = 120)
{
	fixture f;
	char theirs[160], socket[200];

	if (geteuid() != 0)
		cr_skip_test("needs root to give a folder to another uid; skipped");
	fixture_init(&f);
	make_folder(&f, "theirs", 0755, theirs, sizeof(theirs));
	cr_assert_eq(chown(theirs, 65534, 65534), 0);
	snprintf(socket, sizeof(socket), "%s/x.sock", theirs);
	cr_expect_neq(start_refused(&f, socket), 0);
	cr_expect(fixture_log_contains(&f, "belongs to uid 65534"), "the log does not say why");
	cr_expect_eq(mode_of(theirs), 0755);
	fixture_cleanup(&f);
}
