/*
 * latency.c: how long tuned takes to answer `status` and `fetch` while it
 * is busy, against the same daemon idle (bench/README.md, "latency").
 *
 * A real tuned on a private socket, its worker the scripted one of the
 * tests (made-up times, describing a cuda device, so that the search runs
 * with the cuda genes and no GPU is needed). First a small job is tuned to
 * its end, so that `status` and `fetch` have something to answer; then
 * N clients send `status` and `fetch` in turn, a pause between requests,
 * for the given seconds: once with the daemon idle (the peer), once while
 * four jobs search and one more client submits a graph of several MB.
 * Prints p50, p99 and the largest latency of each phase, and the ratio of
 * the busy p99 to the idle one.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 32
#define MAX_SAMPLES 200000
/* Ops in the big graph: within the 1024 tuned allows by default. */
#define BIG_OPS 1000
#define GROUP_TERMS 16

typedef struct options {
	const char *tuned, *worker, *examples, *json;
	const char *cache; /* a path or postgresql:// URI; NULL: a fresh file */
	const char *jobs; /* example names, comma-separated */
	int clients, interval_ms;
	double seconds, graph_mb;
	const char *extra[MAX_ARGS]; /* more arguments for tuned */
	int nextra;
} options;

typedef struct daemon_proc {
	char dir[64], socket[128];
	pid_t pid;
} daemon_proc;

typedef struct conn {
	int fd;
	char *buf;
	size_t len, size;
	int next_id;
} conn;

/* What one phase measured: latencies in ms, by request. */
typedef struct samples {
	pthread_mutex_t lock;
	double *status_ms, *fetch_ms;
	int nstatus, nfetch;
} samples;

typedef struct phase {
	const options *o;
	const char *socket;
	int64_t job;
	const char *key;
	double until; /* monotonic seconds */
	samples *s;
} phase;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The daemon, stopped on the way out; its folder is kept on a failure. */
static pid_t daemon_pid;

static void die(const char *what)
{
	fprintf(stderr, "latency: %s\n", what);
	if (daemon_pid > 0)
		kill(daemon_pid, SIGTERM);
	exit(1);
}

/* Connection */

static bool conn_open(conn *c, const char *path)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};

	*c = (conn){.fd = socket(AF_UNIX, SOCK_STREAM, 0), .size = 1 << 16};
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	if (c->fd < 0 || !(c->buf = malloc(c->size)) ||
	    connect(c->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		if (c->fd >= 0)
			close(c->fd);
		free(c->buf);
		return false;
	}
	return true;
}

static void conn_close(conn *c)
{
	close(c->fd);
	free(c->buf);
}

static bool send_all(int fd, const char *text, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, text, n, MSG_NOSIGNAL);

		if (w <= 0)
			return false;
		text += w;
		n -= (size_t)w;
	}
	return true;
}

/* The next line, parsed, or NULL at the end of the stream. */
static json_t *read_line(conn *c)
{
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->len);
		ssize_t got;

		if (nl) {
			json_t *line = json_loadb(c->buf, (size_t)(nl - c->buf), 0, NULL);

			c->len -= (size_t)(nl + 1 - c->buf);
			memmove(c->buf, nl + 1, c->len);
			return line;
		}
		if (c->len == c->size && !(c->buf = realloc(c->buf, c->size *= 2)))
			die("out of memory");
		if ((got = recv(c->fd, c->buf + c->len, c->size - c->len, 0)) <= 0)
			return NULL;
		c->len += (size_t)got;
	}
}

/* Sends the request (params taken) and returns its reply, events
 * skipped, or NULL when the connection ended. */
static json_t *call(conn *c, const char *op, json_t *params)
{
	int id = ++c->next_id;
	json_t *request = json_pack("{s:i, s:s}", "id", id, "op", op);
	char *text;
	json_t *line;
	bool sent;

	if (params)
		json_object_set_new(request, "params", params);
	text = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	sent = text && send_all(c->fd, text, strlen(text)) && send_all(c->fd, "\n", 1);
	free(text);
	while (sent && (line = read_line(c))) {
		if (json_integer_value(json_object_get(line, "id")) == id)
			return line;
		json_decref(line);
	}
	return NULL;
}

static bool hello(conn *c)
{
	json_t *reply = call(c, "hello", json_pack("{s:i}", "version", 1));
	bool ok = reply && json_object_get(reply, "result");

	json_decref(reply);
	return ok;
}

/* The daemon */

static void start_daemon(const options *o, daemon_proc *d)
{
	char cache[512], log[160], graph_bytes[32];
	const char *argv[MAX_ARGS + 16];
	int n = 0;

	snprintf(d->dir, sizeof(d->dir), "/tmp/tuned-latency-XXXXXX");
	if (!mkdtemp(d->dir))
		die("cannot make a folder in /tmp");
	snprintf(d->socket, sizeof(d->socket), "%s/tuned.sock", d->dir);
	if (o->cache)
		snprintf(cache, sizeof(cache), "%s", o->cache);
	else
		snprintf(cache, sizeof(cache), "%s/cache.db", d->dir);
	snprintf(log, sizeof(log), "%s/tuned.log", d->dir);
	/* The big graph, within the text a submit may carry. */
	snprintf(graph_bytes, sizeof(graph_bytes), "%.0f", o->graph_mb * 1.2e6 + (1 << 20));
	for (const char *a[] = {o->tuned, "--backend", "cpu", "--socket", d->socket,
				"--cache", cache, "--log", log, "--jobs", "4",
				"--max-graph-bytes", graph_bytes, NULL},
	     **p = a; *p; p++)
		argv[n++] = *p;
	for (int i = 0; i < o->nextra; i++)
		argv[n++] = o->extra[i];
	argv[n] = NULL;
	if ((d->pid = fork()) == 0) {
		setenv("TUNED_WORKER", o->worker, 1);
		setenv("SCRIPTED_DEVICE", "cuda: scripted (no GPU)", 1);
		setenv("SCRIPTED_DELAY_MS", "20", 1);
		execv(o->tuned, (char **)argv);
		_exit(127);
	}
	daemon_pid = d->pid;
	for (int i = 0; i < 600; i++) {
		conn c;

		if (conn_open(&c, d->socket)) {
			conn_close(&c);
			return;
		}
		usleep(50000);
	}
	die("tuned did not listen within 30 s");
}

static void stop_daemon(daemon_proc *d)
{
	char command[160];

	kill(d->pid, SIGTERM);
	waitpid(d->pid, NULL, 0);
	snprintf(command, sizeof(command), "rm -rf '%s'", d->dir);
	if (system(command) != 0)
		fprintf(stderr, "latency: cannot remove %s\n", d->dir);
}

/* Submissions */

static json_t *example(const options *o, const char *name)
{
	char path[512];
	json_t *graph;

	snprintf(path, sizeof(path), "%s/%s.json", o->examples, name);
	if (!(graph = json_load_file(path, 0, NULL)))
		die(path);
	return graph;
}

/* Submits "graph" (taken) for "budget_s" and at most "trials": the
 * reply. */
static json_t *submit(const char *socket, json_t *graph, double budget_s, int trials)
{
	conn c;
	json_t *reply = NULL;

	if (conn_open(&c, socket) && hello(&c)) {
		reply = call(&c, "submit", json_pack("{s:o, s:f, s:i}", "graph", graph,
						     "budget", budget_s, "trials", trials));
		conn_close(&c);
	} else {
		json_decref(graph);
	}
	return reply;
}

/* One op of about "bytes" bytes, a sum of groups of GROUP_TERMS terms
 * (a chain of terms alone would nest deeper than an op may):
 * y<k>[i] = (x[i] * c + ... + x[i] * c) + (...) + ... */
static char *long_op(int k, size_t bytes)
{
	size_t size = bytes + 256, len;
	char *op = malloc(size);

	len = (size_t)snprintf(op, size, "y%d[i] = (x[i] * %d.5", k, k % 97);
	for (int t = 1; len + 64 < bytes; t++)
		len += (size_t)snprintf(op + len, size - len, t % GROUP_TERMS ?
					" + x[i] * %d.25" : ") + (x[i] * %d.25",
					(k + t) % 89);
	snprintf(op + len, size - len, ")");
	return op;
}

/* A legal graph of about "mb" MB: BIG_OPS independent elementwise ops
 * over one input, each a long sum writing an output of its own. */
static json_t *big_graph(double mb)
{
	json_t *tensors = json_object(), *ops = json_array();
	char name[32];

	json_object_set_new(tensors, "x", json_pack("{s:[i], s:s, s:s}", "shape", 256,
						    "dtype", "f32", "role", "input"));
	for (int k = 0; k < BIG_OPS; k++) {
		char *op = long_op(k, (size_t)(mb * 1e6 / BIG_OPS));

		snprintf(name, sizeof(name), "y%d", k);
		json_object_set_new(tensors, name, json_pack("{s:[i], s:s, s:s}", "shape",
							     256, "dtype", "f32",
							     "role", "output"));
		json_array_append_new(ops, json_string(op));
		free(op);
	}
	return json_pack("{s:i, s:s, s:o, s:o}", "version", 1, "name", "big", "tensors",
			 tensors, "ops", ops);
}

/* Waits until "job" has ended (its state is done). */
static void wait_done(const char *socket, int64_t job)
{
	conn c;

	if (!conn_open(&c, socket) || !hello(&c))
		die("cannot connect");
	for (double until = now_s() + 60; now_s() < until; usleep(100000)) {
		json_t *r = call(&c, "status", json_pack("{s:I}", "job", (json_int_t)job));
		const char *state = json_string_value(json_object_get(json_object_get(r, "result"),
								       "state"));
		bool done = state && strcmp(state, "queued") && strcmp(state, "running");

		json_decref(r);
		if (done) {
			conn_close(&c);
			return;
		}
	}
	die("the first job did not end within 60 s");
}

/* Measurement */

static void record(samples *s, bool status, double ms)
{
	pthread_mutex_lock(&s->lock);
	if (status && s->nstatus < MAX_SAMPLES)
		s->status_ms[s->nstatus++] = ms;
	else if (!status && s->nfetch < MAX_SAMPLES)
		s->fetch_ms[s->nfetch++] = ms;
	pthread_mutex_unlock(&s->lock);
}

/* One client: status and fetch in turn until the phase ends. */
static void *client_main(void *arg)
{
	const phase *p = arg;
	conn c;
	bool status = true;

	if (!conn_open(&c, p->socket) || !hello(&c))
		die("a client cannot connect");
	while (now_s() < p->until) {
		double t0 = now_s();
		json_t *reply = status ?
			call(&c, "status", json_pack("{s:I}", "job", (json_int_t)p->job)) :
			call(&c, "fetch", json_pack("{s:s}", "key", p->key));

		if (!reply || !json_object_get(reply, "result"))
			die("a request failed");
		record(p->s, status, (now_s() - t0) * 1e3);
		json_decref(reply);
		status = !status;
		usleep((useconds_t)p->o->interval_ms * 1000);
	}
	conn_close(&c);
	return NULL;
}

static void run_clients(const phase *p)
{
	pthread_t *threads = calloc((size_t)p->o->clients, sizeof(pthread_t));

	for (int i = 0; i < p->o->clients; i++)
		pthread_create(&threads[i], NULL, client_main, (void *)p);
	for (int i = 0; i < p->o->clients; i++)
		pthread_join(threads[i], NULL);
	free(threads);
}

/* The busy phase's load: the big graph's submit, timed. */
typedef struct big_submit {
	const options *o;
	const char *socket;
	double seconds;
	bool accepted;
	char error[256];
} big_submit;

static void *big_submit_main(void *arg)
{
	big_submit *b = arg;
	double t0 = now_s();
	json_t *reply = submit(b->socket, big_graph(b->o->graph_mb), 30, 1000000);
	const char *message = json_string_value(
		json_object_get(json_object_get(reply, "error"), "message"));

	b->seconds = now_s() - t0;
	b->accepted = reply && json_object_get(reply, "result");
	snprintf(b->error, sizeof(b->error), "%s", message ? message : "");
	json_decref(reply);
	return NULL;
}

/* Submits the jobs that keep the daemon busy through the phase. */
static void submit_load(const options *o, const char *socket)
{
	char *names = strdup(o->jobs), *save = NULL;

	for (char *name = strtok_r(names, ",", &save); name;
	     name = strtok_r(NULL, ",", &save)) {
		json_t *reply = submit(socket, example(o, name), o->seconds + 30, 1000000);

		if (!reply || !json_object_get(reply, "result")) {
			fprintf(stderr, "latency: %s was refused: %s\n", name,
				json_string_value(json_object_get(json_object_get(reply, "error"),
								  "message")) ?: "no reply");
			die("a load job was refused; the daemon's log is in its folder");
		}
		json_decref(reply);
	}
	free(names);
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double percentile(double *ms, int n, double p)
{
	if (!n)
		return NAN;
	qsort(ms, (size_t)n, sizeof(*ms), by_value);
	return ms[(int)fmin(n - 1, floor(p * n))];
}

typedef struct summary {
	double p50, p99, max;
	int n;
} summary;

static summary summarize(double *ms, int n)
{
	return (summary){percentile(ms, n, 0.5), percentile(ms, n, 0.99),
			 percentile(ms, n, 1.0), n};
}

static void measure_phase(phase *p, samples *s, summary *status, summary *fetch)
{
	*s = (samples){.status_ms = calloc(MAX_SAMPLES, sizeof(double)),
		       .fetch_ms = calloc(MAX_SAMPLES, sizeof(double))};
	pthread_mutex_init(&s->lock, NULL);
	p->s = s;
	p->until = now_s() + p->o->seconds;
	run_clients(p);
	*status = summarize(s->status_ms, s->nstatus);
	*fetch = summarize(s->fetch_ms, s->nfetch);
	free(s->status_ms);
	free(s->fetch_ms);
	pthread_mutex_destroy(&s->lock);
}

static void print_row(const char *phase, const char *op, summary s, summary idle)
{
	printf("%-6s %-7s %8d %9.2f %9.2f %9.2f %12.1fx\n", phase, op, s.n, s.p50, s.p99,
	       s.max, s.p99 / idle.p99);
}

static json_t *summary_json(summary s)
{
	return json_pack("{s:i, s:f, s:f, s:f}", "n", s.n, "p50_ms", s.p50, "p99_ms", s.p99,
			 "max_ms", s.max);
}

static int parse(int argc, char **argv, options *o)
{
	static const struct option longs[] = {
		{"tuned", required_argument, NULL, 't'},
		{"worker", required_argument, NULL, 'w'},
		{"examples", required_argument, NULL, 'e'},
		{"jobs", required_argument, NULL, 'j'},
		{"clients", required_argument, NULL, 'c'},
		{"seconds", required_argument, NULL, 's'},
		{"interval-ms", required_argument, NULL, 'i'},
		{"graph-mb", required_argument, NULL, 'g'},
		{"json", required_argument, NULL, 'o'},
		{"cache", required_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int c;

	*o = (options){.jobs = "bert_qkv,conv_pair,lstm_cell,softmax_scores",
		       .clients = 32, .interval_ms = 10, .seconds = 10, .graph_mb = 5};
	while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (c) {
		case 't': o->tuned = optarg; break;
		case 'w': o->worker = optarg; break;
		case 'e': o->examples = optarg; break;
		case 'j': o->jobs = optarg; break;
		case 'c': o->clients = atoi(optarg); break;
		case 's': o->seconds = atof(optarg); break;
		case 'i': o->interval_ms = atoi(optarg); break;
		case 'g': o->graph_mb = atof(optarg); break;
		case 'o': o->json = optarg; break;
		case 'C': o->cache = optarg; break;
		default:
			fprintf(stderr,
				"usage: latency --tuned PATH --worker PATH "
				"--examples DIR [--jobs A,B,...] [--clients N] "
				"[--seconds S] [--interval-ms MS] [--graph-mb MB] "
				"[--cache PATH|URI] [--json FILE] [-- "
				"TUNED-ARGS...]\n");
			return c == 'h' ? 1 : -1;
		}
	}
	for (; optind < argc && o->nextra < MAX_ARGS; optind++)
		o->extra[o->nextra++] = argv[optind];
	if (!o->tuned || !o->worker || !o->examples || o->clients < 1 || o->seconds <= 0) {
		fprintf(stderr, "latency: --tuned, --worker and --examples are needed\n");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	options o;
	daemon_proc d;
	samples s;
	summary idle_status, idle_fetch, busy_status, busy_fetch;
	big_submit big;
	pthread_t big_thread;
	json_t *first;
	phase p;
	int rc = parse(argc, argv, &o);

	if (rc)
		return rc < 0 ? 2 : 0;
	signal(SIGPIPE, SIG_IGN);
	start_daemon(&o, &d);
	if (!(first = submit(d.socket, example(&o, "ln_residual_small"), 10, 1)))
		die("the first job was refused");
	p = (phase){&o, d.socket,
		    json_integer_value(json_object_get(json_object_get(first, "result"), "id")),
		    json_string_value(json_object_get(json_object_get(first, "result"), "key")),
		    0, NULL};
	wait_done(d.socket, p.job);
	measure_phase(&p, &s, &idle_status, &idle_fetch);

	submit_load(&o, d.socket);
	big = (big_submit){.o = &o, .socket = d.socket};
	pthread_create(&big_thread, NULL, big_submit_main, &big);
	measure_phase(&p, &s, &busy_status, &busy_fetch);
	pthread_join(big_thread, NULL);
	stop_daemon(&d);

	printf("%d clients, a request every %d ms each, %.0f s a phase; busy: %s searching "
	       "(cuda genes) and a %.1f MB graph submitted (%s in %.2f s%s%s)\n",
	       o.clients, o.interval_ms, o.seconds, o.jobs, o.graph_mb,
	       big.accepted ? "accepted" : "refused", big.seconds,
	       big.error[0] ? ": " : "", big.error);
	printf("%-6s %-7s %8s %9s %9s %9s %13s\n", "phase", "request", "n", "p50 ms",
	       "p99 ms", "max ms", "p99 vs idle");
	print_row("idle", "status", idle_status, idle_status);
	print_row("idle", "fetch", idle_fetch, idle_fetch);
	print_row("busy", "status", busy_status, idle_status);
	print_row("busy", "fetch", busy_fetch, idle_fetch);
	if (o.json) {
		json_t *out = json_pack("{s:o, s:o, s:o, s:o, s:f, s:b}",
			"idle_status", summary_json(idle_status),
			"idle_fetch", summary_json(idle_fetch),
			"busy_status", summary_json(busy_status),
			"busy_fetch", summary_json(busy_fetch),
			"big_submit_s", big.seconds, "big_accepted", big.accepted);

		json_dump_file(out, o.json, JSON_INDENT(2));
		json_decref(out);
	}
	json_decref(first);
	return 0;
}
