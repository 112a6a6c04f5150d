/*
 * fake_worker.c: a worker for the supervision tests.
 *
 * Reads one JSON object per line on stdin and does what its "do" says:
 *   "echo"              answers {"kind":"ok","echo":<request>}
 *   "crash"             raises SIGSEGV
 *   "hang"              sleeps forever
 *   "garbage"           prints "this is not json"
 *   "array"             prints "[1,2,3]", JSON but not an object
 *   "exit"              exits with status "status"
 *   "big"               answers {"kind":"ok","big":<string of "size" bytes>}
 *   "answer_then_exit"  answers, then exits 0
 *   "close_answer_exit" closes stdin, answers, sleeps "ms" ms, then exits
 *                       with status "status"
 * Anything else is answered {"kind":"error"}. A request's "say", when
 * given, is written to stderr (bytes from 1 to 255: "say_bytes") first.
 * Ends at the end of stdin.
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* getline's buffer; a global, so that exit() leaves nothing leaked. */
static char *line;

static void print_line(const char *text)
{
	fputs(text, stdout);
	fflush(stdout);
}

/* Prints "answer" as one line and drops it. */
static void answer(json_t *answer)
{
	char *text = json_dumps(answer, JSON_COMPACT);

	if (text)
		printf("%s\n", text);
	fflush(stdout);
	free(text);
	json_decref(answer);
}

static json_int_t int_arg(json_t *request, const char *key)
{
	return json_integer_value(json_object_get(request, key));
}

/* Ends the process with "status", "request" dropped so nothing leaks. */
static void leave(json_t *request, int status)
{
	json_decref(request);
	exit(status);
}

static void do_echo(json_t *request)
{
	answer(json_pack("{s:s, s:O}", "kind", "ok", "echo", request));
}

/* Dies the way a bad kernel does, even under a sanitizer's handler. */
static void do_crash(json_t *request)
{
	(void)request;
	signal(SIGSEGV, SIG_DFL);
	raise(SIGSEGV);
}

static void do_hang(json_t *request)
{
	(void)request;
	for (;;)
		pause();
}

static void do_garbage(json_t *request)
{
	(void)request;
	print_line("this is not json\n");
}

static void do_array(json_t *request)
{
	(void)request;
	print_line("[1,2,3]\n");
}

static void do_exit(json_t *request)
{
	leave(request, (int)int_arg(request, "status"));
}

static void do_big(json_t *request)
{
	json_int_t size = int_arg(request, "size");
	char *big = malloc(size + 1);

	memset(big, 'x', size);
	big[size] = '\0';
	answer(json_pack("{s:s, s:s}", "kind", "ok", "big", big));
	free(big);
}

static void do_answer_then_exit(json_t *request)
{
	answer(json_pack("{s:s}", "kind", "ok"));
	leave(request, 0);
}

static void do_close_answer_exit(json_t *request)
{
	json_int_t ms = int_arg(request, "ms");
	struct timespec pause_for = { ms / 1000, (ms % 1000) * 1000000 };

	close(0);
	answer(json_pack("{s:s}", "kind", "ok"));
	nanosleep(&pause_for, NULL);
	leave(request, (int)int_arg(request, "status"));
}

static const struct command {
	const char *name;
	void (*run)(json_t *request);
} commands[] = {
	{ "echo", do_echo },
	{ "crash", do_crash },
	{ "hang", do_hang },
	{ "garbage", do_garbage },
	{ "array", do_array },
	{ "exit", do_exit },
	{ "big", do_big },
	{ "answer_then_exit", do_answer_then_exit },
	{ "close_answer_exit", do_close_answer_exit },
};

static const struct command *find_command(const char *name)
{
	size_t n = sizeof(commands) / sizeof(commands[0]);

	for (size_t i = 0; name && i < n; i++)
		if (!strcmp(name, commands[i].name))
			return &commands[i];
	return NULL;
}

/* The request's "say" on stderr: a string, or an array of byte values. */
static void say(const json_t *request)
{
	const json_t *bytes = json_object_get(request, "say_bytes"), *b;
	const char *text = json_string_value(json_object_get(request, "say"));
	size_t i;

	if (text)
		fprintf(stderr, "%s\n", text);
	json_array_foreach(bytes, i, b)
		fputc((int)json_integer_value(b), stderr);
	fflush(stderr);
}

/* Does what "request" says; may not return. Takes "request". */
static void serve(json_t *request)
{
	const char *what = json_string_value(json_object_get(request, "do"));
	const struct command *command = find_command(what);

	say(request);
	if (command)
		command->run(request);
	else
		answer(json_pack("{s:s}", "kind", "error"));
	json_decref(request);
}

int main(void)
{
	size_t cap = 0;
	ssize_t len;

	while ((len = getline(&line, &cap, stdin)) > 0) {
		json_t *request = json_loadb(line, len, 0, NULL);

		if (!request) {
			fprintf(stderr, "fake_worker: request is not json\n");
			continue;
		}
		serve(request);
	}
	free(line);
	return 0;
}
