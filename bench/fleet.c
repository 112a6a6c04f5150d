/*
 * fleet.c: time to quality with 1, 2 and 4 daemons sharing one PostgreSQL
 * database, and fetch latency on PostgreSQL against SQLite
 * (bench/README.md, "fleet").
 *
 * A private PostgreSQL server (tests/cache/pg_server.c), and for each
 * fleet size N a fresh database and N real tuned daemons on it (cpu
 * backend, one job at a time each). A job is claimed whole by one daemon
 * and the daemons with room help its search (daemon/fleet.c), so the work
 * shared is measured two ways, each on a database of its own:
 *
 * - batch: the keys submitted together, one to each daemon in turn; the
 *   fleet's daemons claim them from the shared queue;
 * - single: one key submitted to every daemon at once; the fleet may make
 *   one job of it or several (submits within one pass of the queue), and
 *   the daemons that hold none help, so all of them search the key.
 *
 * The bench polls each key's best version (fetch) every 100 ms. A key's
 * reference is the fastest version any run of this invocation reached; a
 * run reaches quality when every key has a version within --tolerance of
 * it. Then bench/latency runs twice on this build, its cache a SQLite file
 * and then a database of the same server, and its fetch p50 and p99 are
 * read from its JSON.
 */
#include <getopt.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pg_server.h"
#include "tuned_client.h"

#define MAX_DAEMONS 16
#define MAX_KEYS 16
#define MAX_SIZES 8
#define MAX_POINTS 256
#define POLL_MS 100

typedef struct options {
	const char *tuned, *worker, *scripted, *latency, *examples, *json;
	const char *keys, *single; /* example names */
	int sizes[MAX_SIZES], nsizes;
	double budget, tolerance, latency_seconds;
} options;

/* A key's best version as the bench saw it come. */
typedef struct point {
	double t; /* seconds since the phase's submits */
	int64_t version;
	double ms;
} point;

typedef struct key_run {
	char name[64], key[PROTO_KEY_HEX + 1];
	point points[MAX_POINTS];
	int npoints;
	bool verified; /* the version reached has an ok trial in the database */
} key_run;

/* One phase of one fleet size. */
typedef struct run {
	const char *phase; /* "batch" or "single" */
	int daemons;
	key_run keys[MAX_KEYS];
	int nkeys, jobs, workers; /* jobs made; daemons that claimed one */
	long long trials;
	double ended_s;   /* when every job had ended */
	double reached_s; /* when every key reached quality; NAN: never */
	int at_quality;   /* keys that reached it */
} run;

static pg_server server;
static pid_t daemons[MAX_DAEMONS];
static int ndaemons;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void stop_daemons(void)
{
	for (int i = 0; i < ndaemons; i++)
		kill(daemons[i], SIGTERM);
	for (int i = 0; i < ndaemons; i++)
		waitpid(daemons[i], NULL, 0);
	ndaemons = 0;
}

static void die(const char *fmt, const char *what)
{
	fprintf(stderr, "fleet: ");
	fprintf(stderr, fmt, what);
	fprintf(stderr, "\n");
	stop_daemons();
	pg_server_stop(&server);
	exit(1);
}

static char *example_text(const options *o, const char *name)
{
	char path[512];
	json_t *graph;
	char *text;

	snprintf(path, sizeof(path), "%s/%s.json", o->examples, name);
	if (!(graph = json_load_file(path, 0, NULL)))
		die("cannot read the example %s", path);
	text = json_dumps(graph, JSON_COMPACT);
	json_decref(graph);
	return text;
}

static tuned_client *connect_to(const char *socket)
{
	tuned_client *c = NULL;
	tuned_client_error err;

	for (int i = 0; i < 600 && tuned_client_connect(socket, NULL, &c, &err); i++)
		usleep(50000);
	if (!c)
		die("no daemon listens at %s within 30 s", socket);
	return c;
}

/* Daemon "i" of the fleet on database "uri", its socket and log in
 * "dir". */
static void start_daemon(const options *o, const char *dir, int i, const char *uri)
{
	char socket[160], log[160];
	pid_t pid;

	snprintf(socket, sizeof(socket), "%s/d%d.sock", dir, i);
	snprintf(log, sizeof(log), "%s/d%d.log", dir, i);
	if ((pid = fork()) == 0) {
		setenv("TUNED_WORKER", o->worker, 1);
		execl(o->tuned, o->tuned, "--backend", "cpu", "--socket", socket,
		      "--cache", uri, "--log", log, "--jobs", "1", "--compile-workers",
		      "1", "--lease", "3", (char *)NULL);
		_exit(127);
	}
	daemons[ndaemons++] = pid;
	tuned_client_close(connect_to(socket));
}

static long long query_count(const char *uri, const char *sql)
{
	PGconn *conn = PQconnectdb(uri);
	PGresult *res = PQexec(conn, sql);
	long long n = -1;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res))
		n = atoll(PQgetvalue(res, 0, 0));
	else
		fprintf(stderr, "fleet: %s: %s", sql, PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
	return n;
}

/* Records key "k"'s best version when it is a new one. */
static void poll_key(tuned_client *c, key_run *k, double t)
{
	json_t *kernel = NULL;
	tuned_client_error err;
	int64_t version;

	if (tuned_client_fetch(c, k->key, 0, 0, &kernel, &err))
		return;
	version = json_integer_value(json_object_get(kernel, "version"));
	if ((!k->npoints || k->points[k->npoints - 1].version != version) &&
	    k->npoints < MAX_POINTS)
		k->points[k->npoints++] = (point){
			t, version,
			json_number_value(json_object_get(kernel, "median_ms"))};
	json_decref(kernel);
}

static bool all_ended(tuned_client *c, const int64_t *jobs, int njobs)
{
	for (int i = 0; i < njobs; i++) {
		json_t *job = NULL;
		tuned_client_error err;
		const char *state;
		bool open;

		if (tuned_client_status(c, jobs[i], &job, &err))
			die("status failed: %s", err.message);
		state = json_string_value(json_object_get(job, "state"));
		open = !state || !strcmp(state, "queued") || !strcmp(state, "running");
		json_decref(job);
		if (open)
			return false;
	}
	return true;
}

/* Submits "r"'s keys: each key to "to" daemons from daemon "first" on
 * (one each); the distinct jobs into "jobs". */
static int submit_keys(const options *o, tuned_client **c, run *r, int first, int to,
		       int64_t *jobs)
{
	tuned_client_submit_options so = {.budget_s = o->budget};
	int njobs = 0;

	for (int k = 0; k < r->nkeys; k++) {
		char *graph = example_text(o, r->keys[k].name);

		for (int d = 0; d < to; d++) {
			tuned_client_job job;
			tuned_client_error err;
			bool seen = false;

			if (tuned_client_submit_with(c[(first + k + d) % r->daemons],
						     graph, &so, &job, &err))
				die("a submit was refused: %s", err.message);
			snprintf(r->keys[k].key, sizeof(r->keys[k].key), "%s", job.key);
			for (int j = 0; j < njobs; j++)
				seen |= jobs[j] == job.id;
			if (!seen)
				jobs[njobs++] = job.id;
		}
		free(graph);
	}
	return njobs;
}

/* Whether the version "v" of "key" was verified: its plan has a trial
 * whose outputs matched the reference, and it is not marked bad. */
static bool version_verified(const char *uri, const char *key, int64_t v)
{
	char sql[512];

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM plans p JOIN trials t ON "
		 "t.graph = p.graph AND t.device = p.device AND t.codegen = p.codegen "
		 "AND "
		 "t.plan = p.plan AND t.outcome = 'ok' WHERE p.graph = '%s' AND "
		 "p.version "
		 "= %lld AND p.bad IS NULL",
		 key, (long long)v);
	return query_count(uri, sql) > 0;
}

/* Runs phase "r" on a fleet of r->daemons daemons on a fresh database. */
static void run_phase(const options *o, run *r, const char *names, bool single)
{
	char dir[64] = "/tmp/tuned-fleet-XXXXXX", db[32], uri[512], command[96];
	tuned_client *c[MAX_DAEMONS];
	int64_t jobs[MAX_KEYS * MAX_DAEMONS];
	char *list = strdup(names), *save = NULL;
	double start;

	for (char *n = strtok_r(list, ",", &save); n && r->nkeys < MAX_KEYS;
	     n = strtok_r(NULL, ",", &save))
		snprintf(r->keys[r->nkeys++].name, sizeof(r->keys[0].name), "%s", n);
	free(list);
	snprintf(db, sizeof(db), "%s%d", r->phase, r->daemons);
	if (pg_server_create_db(server.uri, db, uri, sizeof(uri)))
		die("%s", uri);
	if (!mkdtemp(dir))
		die("cannot make a folder in %s", "/tmp");
	for (int i = 0; i < r->daemons; i++) {
		char socket[160];

		start_daemon(o, dir, i, uri);
		snprintf(socket, sizeof(socket), "%s/d%d.sock", dir, i);
		c[i] = connect_to(socket);
	}
	fprintf(stderr, "fleet: %s, %d daemon(s), %s\n", r->phase, r->daemons, names);
	start = now_s();
	r->jobs = submit_keys(o, c, r, 0, single ? r->daemons : 1, jobs);
	for (;;) {
		double t = now_s() - start;

		for (int k = 0; k < r->nkeys; k++)
			poll_key(c[0], &r->keys[k], t);
		if (all_ended(c[0], jobs, r->jobs))
			break;
		if (t > o->budget * r->nkeys + 300)
			die("the jobs did not end within %s",
			    "their budgets and 300 s");
		usleep(POLL_MS * 1000);
	}
	r->ended_s = now_s() - start;
	for (int k = 0; k < r->nkeys; k++)
		poll_key(c[0], &r->keys[k], r->ended_s);
	r->trials = query_count(uri, "SELECT count(*) FROM trials");
	r->workers = (int)query_count(uri,
				      "SELECT count(DISTINCT claimed_by) FROM jobs");
	for (int i = 0; i < r->daemons; i++)
		tuned_client_close(c[i]);
	stop_daemons();
	for (int k = 0; k < r->nkeys; k++) {
		key_run *kr = &r->keys[k];

		kr->verified = kr->npoints &&
			       version_verified(uri, kr->key,
						kr->points[kr->npoints - 1].version);
	}
	snprintf(command, sizeof(command), "rm -rf '%s'", dir);
	if (system(command))
		fprintf(stderr, "fleet: cannot remove %s\n", dir);
}

/* The fastest version of key "k" (by name) over every run. */
static double reference_ms(const run *runs, int nruns, const char *name)
{
	double best = INFINITY;

	for (int i = 0; i < nruns; i++)
		for (int k = 0; k < runs[i].nkeys; k++)
			if (!strcmp(runs[i].keys[k].name, name))
				for (int p = 0; p < runs[i].keys[k].npoints; p++)
					best = fmin(best, runs[i].keys[k].points[p].ms);
	return best;
}

/* When key "kr" first had a version within the tolerance of its
 * reference; NAN when it never did. */
static double key_reached(const options *o, const key_run *kr, const run *runs,
			  int nruns)
{
	double target = reference_ms(runs, nruns, kr->name) * (1 + o->tolerance);

	for (int p = 0; p < kr->npoints; p++)
		if (kr->points[p].ms <= target)
			return kr->points[p].t;
	return NAN;
}

/* When every key of "r" had reached quality (NAN when one never did),
 * and how many did. */
static void reached(const options *o, run *r, const run *runs, int nruns)
{
	r->reached_s = 0;
	r->at_quality = 0;
	for (int k = 0; k < r->nkeys; k++) {
		double at = key_reached(o, &r->keys[k], runs, nruns);

		r->at_quality += !isnan(at);
		r->reached_s = fmax(r->reached_s, at);
	}
	if (r->at_quality < r->nkeys)
		r->reached_s = NAN;
}

static double peer_of(const run *runs, int nruns, const run *r)
{
	for (int i = 0; i < nruns; i++)
		if (!strcmp(runs[i].phase, r->phase) && runs[i].daemons == 1)
			return runs[i].reached_s;
	return NAN;
}

static bool all_verified(const run *r)
{
	for (int k = 0; k < r->nkeys; k++)
		if (!r->keys[k].verified)
			return false;
	return true;
}

/* The load average, as /proc/loadavg says it ("?" where it cannot). */
static void load_average(char *out, size_t size)
{
	FILE *f = fopen("/proc/loadavg", "r");

	snprintf(out, size, "?");
	if (f && fgets(out, (int)size, f))
		out[strcspn(out, "\n")] = 0;
	if (f)
		fclose(f);
}

static void print_runs(const options *o, const run *runs, int nruns)
{
	printf("time to quality: every key within %.0f%% of the fastest version any "
	       "run "
	       "reached; budget %.0f s a job\n",
	       o->tolerance * 100, o->budget);
	printf("%-7s %7s %5s %8s %7s %8s %10s %9s %10s %9s\n", "phase", "daemons",
	       "jobs", "claimed", "trials", "reached", "quality s", "speedup",
	       "ended s", "verified");
	for (int i = 0; i < nruns; i++) {
		const run *r = &runs[i];
		double peer = peer_of(runs, nruns, r);

		printf("%-7s %7d %5d %8d %7lld %6d/%d ", r->phase, r->daemons, r->jobs,
		       r->workers, r->trials, r->at_quality, r->nkeys);
		if (isnan(r->reached_s))
			printf("%10s %9s ", "-", "-");
		else if (isnan(peer))
			printf("%10.1f %9s ", r->reached_s, "-");
		else
			printf("%10.1f %8.2fx ", r->reached_s, peer / r->reached_s);
		printf("%10.1f %9s\n", r->ended_s, all_verified(r) ? "yes" : "NO");
	}
	for (int i = 0; i < nruns; i++)
		for (int k = 0; k < runs[i].nkeys; k++) {
			const key_run *kr = &runs[i].keys[k];
			const point *last = kr->npoints ? &kr->points[kr->npoints - 1] :
							  NULL;

			printf("  %s N=%d %s: v%lld %.4g ms (reference %.4g ms)\n",
			       runs[i].phase, runs[i].daemons, kr->name,
			       last ? (long long)last->version : 0LL,
			       last ? last->ms : NAN,
			       reference_ms(runs, nruns, kr->name));
		}
}

/* Latency */

typedef struct latency_run {
	const char *cache;
	double idle_p50, idle_p99, busy_p50, busy_p99;
} latency_run;

static double field(json_t *j, const char *phase, const char *what)
{
	return json_number_value(json_object_get(json_object_get(j, phase), what));
}

/* bench/latency on "cache" (a URI, or NULL: its own SQLite file). */
static void run_latency(const options *o, latency_run *l, const char *cache)
{
	char json[64] = "/tmp/tuned-fleet-latency-XXXXXX", seconds[32];
	const char *argv[24] = {
		o->latency,  "--tuned",    o->tuned,
		"--worker",  o->scripted,  "--examples",
		o->examples, "--jobs",     "bert_qkv_small,lstm_cell_small",
		"--clients", "8",          "--seconds",
		seconds,     "--graph-mb", "0.05",
		"--json",    json};
	int n = 17, fd = mkstemp(json), status;
	json_t *out;
	pid_t pid;

	if (fd < 0)
		die("cannot make a file in %s", "/tmp");
	close(fd);
	snprintf(seconds, sizeof(seconds), "%g", o->latency_seconds);
	if (cache) {
		argv[n++] = "--cache";
		argv[n++] = cache;
	}
	fprintf(stderr, "fleet: latency on %s\n", cache ? "PostgreSQL" : "SQLite");
	if ((pid = fork()) == 0) {
		dup2(2, 1);
		execv(o->latency, (char **)argv);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) ||
	    !(out = json_load_file(json, 0, NULL)))
		die("%s failed", o->latency);
	unlink(json);
	*l = (latency_run){cache ? "postgresql" : "sqlite",
			   field(out, "idle_fetch", "p50_ms"),
			   field(out, "idle_fetch", "p99_ms"),
			   field(out, "busy_fetch", "p50_ms"),
			   field(out, "busy_fetch", "p99_ms")};
	json_decref(out);
}

static void print_latency(const options *o, const latency_run *l, int n)
{
	printf("fetch latency (bench/latency, 8 clients, %.0f s a phase, scripted "
	       "worker): ms\n",
	       o->latency_seconds);
	printf("%-10s %9s %9s %9s %9s\n", "cache", "idle p50", "idle p99", "busy p50",
	       "busy p99");
	for (int i = 0; i < n; i++)
		printf("%-10s %9.2f %9.2f %9.2f %9.2f\n", l[i].cache, l[i].idle_p50,
		       l[i].idle_p99, l[i].busy_p50, l[i].busy_p99);
}

static json_t *runs_json(const run *runs, int nruns)
{
	json_t *a = json_array();

	for (int i = 0; i < nruns; i++) {
		const run *r = &runs[i];
		json_t *keys = json_array();

		for (int k = 0; k < r->nkeys; k++) {
			const key_run *kr = &r->keys[k];
			json_t *points = json_array();

			for (int p = 0; p < kr->npoints; p++)
				json_array_append_new(
					points,
					json_pack("[f, I, f]", kr->points[p].t,
						  (json_int_t)kr->points[p].version,
						  kr->points[p].ms));
			json_array_append_new(keys,
					      json_pack("{s:s, s:s, s:o, s:b}", "name",
							kr->name, "key", kr->key,
							"versions", points, "verified",
							kr->verified));
		}
		json_array_append_new(
			a, json_pack("{s:s, s:i, s:i, s:i, s:I, s:i, s:o, s:f, s:o}",
				     "phase", r->phase, "daemons", r->daemons, "jobs",
				     r->jobs, "claimed_by", r->workers, "trials",
				     (json_int_t)r->trials, "reached", r->at_quality,
				     "quality_s",
				     isnan(r->reached_s) ? json_null() :
							   json_real(r->reached_s),
				     "ended_s", r->ended_s, "keys", keys));
	}
	return a;
}

static int parse_sizes(options *o, const char *text)
{
	char *list = strdup(text), *save = NULL;

	o->nsizes = 0;
	for (char *n = strtok_r(list, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
		int size = atoi(n);

		if (size < 1 || size > MAX_DAEMONS || o->nsizes == MAX_SIZES) {
			free(list);
			return -1;
		}
		o->sizes[o->nsizes++] = size;
	}
	free(list);
	return o->nsizes && o->sizes[0] == 1 ? 0 : -1;
}

static int parse(int argc, char **argv, options *o)
{
	static const struct option longs[] = {
		{"tuned", required_argument, NULL, 't'},
		{"worker", required_argument, NULL, 'w'},
		{"scripted-worker", required_argument, NULL, 'S'},
		{"latency", required_argument, NULL, 'L'},
		{"examples", required_argument, NULL, 'e'},
		{"keys", required_argument, NULL, 'k'},
		{"single", required_argument, NULL, '1'},
		{"daemons", required_argument, NULL, 'd'},
		{"budget", required_argument, NULL, 'b'},
		{"tolerance", required_argument, NULL, 'T'},
		{"latency-seconds", required_argument, NULL, 's'},
		{"json", required_argument, NULL, 'o'},
		{0},
	};
	int c;

	*o = (options){.keys = "softmax_scores,ln_residual,lstm_cell,conv_pair",
		       .single = "softmax_scores",
		       .budget = 30,
		       .tolerance = 0.1,
		       .latency_seconds = 5};
	parse_sizes(o, "1,2,4");
	while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (c) {
		case 't': o->tuned = optarg; break;
		case 'w': o->worker = optarg; break;
		case 'S': o->scripted = optarg; break;
		case 'L': o->latency = optarg; break;
		case 'e': o->examples = optarg; break;
		case 'k': o->keys = optarg; break;
		case '1': o->single = optarg; break;
		case 'd':
			if (parse_sizes(o, optarg))
				return -1;
			break;
		case 'b': o->budget = atof(optarg); break;
		case 'T': o->tolerance = atof(optarg); break;
		case 's': o->latency_seconds = atof(optarg); break;
		case 'o': o->json = optarg; break;
		default: return -1;
		}
	}
	if (!o->tuned || !o->worker || !o->scripted || !o->latency || !o->examples ||
	    o->budget <= 0 || o->tolerance < 0) {
		fprintf(stderr,
			"usage: fleet --tuned PATH --worker PATH --scripted-worker "
			"PATH --latency PATH --examples DIR [--keys A,B,...] [--single "
			"A] "
			"[--daemons 1,2,4] [--budget S] [--tolerance F] "
			"[--latency-seconds S] [--json FILE]\n");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	options o;
	run runs[2 * MAX_SIZES] = {0};
	latency_run lat[2];
	int nruns = 0, rc;
	char uri[512], load_at_start[64], load[64];

	if (parse(argc, argv, &o))
		return 2;
	load_average(load_at_start, sizeof(load_at_start));
	signal(SIGPIPE, SIG_IGN);
	if ((rc = pg_server_start(&server)) > 0) {
		fprintf(stderr, "fleet: skipped: %s\n", server.why);
		return 77;
	}
	if (rc)
		die("no PostgreSQL server: %s", server.why);
	for (int s = 0; s < o.nsizes; s++) {
		runs[nruns] = (run){.phase = "batch", .daemons = o.sizes[s]};
		run_phase(&o, &runs[nruns++], o.keys, false);
		runs[nruns] = (run){.phase = "single", .daemons = o.sizes[s]};
		run_phase(&o, &runs[nruns++], o.single, true);
	}
	for (int i = 0; i < nruns; i++)
		reached(&o, &runs[i], runs, nruns);
	load_average(load, sizeof(load));
	run_latency(&o, &lat[0], NULL);
	if (pg_server_create_db(server.uri, "latency", uri, sizeof(uri)))
		die("%s", uri);
	run_latency(&o, &lat[1], uri);
	pg_server_stop(&server);

	printf("load average at the start, after the fleets: %s, %s\n", load_at_start,
	       load);
	print_runs(&o, runs, nruns);
	print_latency(&o, lat, 2);
	if (o.json) {
		json_t *out = json_pack("{s:f, s:f, s:o, s:[{s:s, s:f, s:f, s:f, s:f}, "
					"{s:s, s:f, s:f, s:f, s:f}]}",
					"budget_s", o.budget, "tolerance", o.tolerance,
					"runs", runs_json(runs, nruns), "fetch_latency",
					"cache", lat[0].cache, "idle_p50_ms",
					lat[0].idle_p50, "idle_p99_ms", lat[0].idle_p99,
					"busy_p50_ms", lat[0].busy_p50, "busy_p99_ms",
					lat[0].busy_p99, "cache", lat[1].cache,
					"idle_p50_ms", lat[1].idle_p50, "idle_p99_ms",
					lat[1].idle_p99, "busy_p50_ms", lat[1].busy_p50,
					"busy_p99_ms", lat[1].busy_p99);

		if (json_dump_file(out, o.json, JSON_INDENT(2)))
			die("cannot write %s", o.json);
		json_decref(out);
	}
	for (int i = 0; i < nruns; i++)
		if (!all_verified(&runs[i]))
			return 1;
	return 0;
}
