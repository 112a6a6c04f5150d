/*
 * tuning_curve: the genetic search against random search, trial for trial.
 *
 *   tuning_curve [--backend cpu|cuda|auto] [--examples A,B,...] [--trials N]
 *                [--budget S] [--population N] [--seed S] [--png FILE]
 *                [--json FILE]
 *
 * For each example, the genetic search and random search (tuner/search.c,
 * the same seed and population) run a generation of each in turn, both
 * from generation 0, the default plan, until N trials are spent or the
 * search has nothing new to propose. With --budget, each search runs as
 * the daemon runs one instead: for S seconds of its own (N trials at
 * most, if given), with the daemon's stall rule and its cost filter (on
 * the peaks the worker probes); the table after the curves says when
 * each search ended and why, and how well its cost model ranked the
 * trials (Spearman's rho). Each plan is measured as the
 * daemon measures it (daemon/runner.c): by a tuned-worker, racing against
 * the best so far, a failure counting as INFINITY, and timed beside one
 * plan (docs/kernels.md, "Trials beside the version"): the first plan
 * measured, generation 0's default plan, for both searches, whose trial
 * time is the scale of both curves. Each search gets a fresh
 * worker, so that neither reuses kernels the other compiled.
 *
 * Prints one line per generation on stderr, a table on stdout and writes
 * the curves as JSON (default tuning_curve.json); with --png, bench/plot.py
 * (matplotlib) draws them from that JSON. The bar the issue sets: on the
 * median example, the genetic search reaches random search's final best
 * within half the trials.
 */
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "common.h"
#include "curve.h"
#include "kgen.h"
#include "scheduler.h"
#include "trial.h"
#include "tuner.h"

/* Full-size examples whose plans run for 0.1 to 100 ms here: the small
 * variants run for microseconds, within the noise of timing them, and the
 * MLPs for seconds, a few trials a minute. */
#define DEFAULT_EXAMPLES "lstm_cell,ln_residual,softmax_scores,conv_pair,mi_lstm_cell,bert_qkv"
/* The trials a search may take with --budget and no --trials. */
#define BUDGET_MAX_TRIALS 100000

static const char usage[] =
	"usage: tuning_curve [--backend cpu|cuda|auto] [--examples A,B,...]\n"
	"                    [--trials N] [--budget S] [--population N] [--seed S]\n"
	"                    [--png FILE] [--json FILE]\n"
	"Runs the genetic search and random search on each example with the same\n"
	"budget of trials (with --budget, of S seconds each, as the daemon runs\n"
	"a search); prints a table, writes the curves as JSON (default\n"
	"tuning_curve.json) and, with --png, plots them (bench/plot.py).\n"
	"Examples are names in examples/ or paths; default: " DEFAULT_EXAMPLES ".\n";

/* Population 16, not the daemon's 32: with a budget of 48 trials, 32 would
 * leave the genetic search no bred generation after its first population;
 * 16 gives it two. */
typedef struct bench_options {
	const char *backend;
	const char *examples;  /* comma-separated */
	int trials;
	int budget_s;            /* 0: none, the trials are the budget */
	const kgen_peaks *peaks; /* with budget_s, as probed; else NULL */
	int population;
	unsigned seed;
	const char *png; /* NULL: no plot */
	const char *json;
} bench_options;

/* What every trial of one example needs. */
typedef struct bench_example {
	const bench_options *opt;
	const char *text;  /* graph.json */
	const sched_graph *graph;
	double limit_s;    /* per trial */
	const char *name;
	const kgen_peaks *peaks; /* --budget: the cost filter's, or NULL */
} bench_example;

static const char *const kind_names[CURVE_KINDS] = {
	[CURVE_GENETIC] = "genetic", [CURVE_RANDOM] = "random",
};

static int check_options(const bench_options *opt)
{
	if (strcmp(opt->backend, "cpu") && strcmp(opt->backend, "cuda") &&
	    strcmp(opt->backend, "auto")) {
		fprintf(stderr, "tuning_curve: unknown backend '%s'\n", opt->backend);
		return -EINVAL;
	}
	return 0;
}

/* Returns 0 to go on, 1 after --help, a negative code for a usage error. */
static int parse_options(int argc, char **argv, bench_options *opt)
{
	static const struct option longs[] = {
		{"backend", required_argument, NULL, 'b'},
		{"examples", required_argument, NULL, 'e'},
		{"trials", required_argument, NULL, 't'},
		{"budget", required_argument, NULL, 'B'},
		{"population", required_argument, NULL, 'p'},
		{"seed", required_argument, NULL, 's'},
		{"png", required_argument, NULL, 'o'},
		{"json", required_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c, rc = 0, seed;

	while (!rc && (c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (c) {
		case 'b': opt->backend = optarg; break;
		case 'e': opt->examples = optarg; break;
		case 't': rc = bench_positive_int(optarg, &opt->trials); break;
		case 'B': rc = bench_positive_int(optarg, &opt->budget_s); break;
		case 'p': rc = bench_positive_int(optarg, &opt->population); break;
		case 's':
			rc = bench_positive_int(optarg, &seed);
			opt->seed = (unsigned)seed;
			break;
		case 'o': opt->png = optarg; break;
		case 'j': opt->json = optarg; break;
		case 'h': fputs(usage, stdout); return 1;
		default: rc = -EINVAL;
		}
	}
	if (!rc && optind < argc)
		rc = -EINVAL;
	if (rc)
		fputs(usage, stderr);
	return rc ? rc : check_options(opt);
}

/* The paths of the examples: each comma-separated entry of "list" is a
 * path (it has a slash) or a name in examples/. */
static int example_paths(const char *list, glob_t *paths)
{
	char *copy = strdup(list), *name, *save;
	char pattern[4096];
	int rc = 0;

	memset(paths, 0, sizeof(*paths));
	if (!copy)
		return -ENOMEM;
	for (name = strtok_r(copy, ",", &save); name && !rc;
	     name = strtok_r(NULL, ",", &save)) {
		snprintf(pattern, sizeof(pattern), strchr(name, '/') ? "%s" :
			 BENCH_EXAMPLES "/%s.json", name);
		if (glob(pattern, GLOB_NOCHECK | (paths->gl_pathc ? GLOB_APPEND : 0),
			 NULL, paths))
			rc = -ENOMEM;
	}
	free(copy);
	return rc;
}

/* "path" without its folders and its .json. */
static void example_name(const char *path, char *name, size_t size)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t n = strlen(base);

	if (n > 5 && !strcmp(base + n - 5, ".json"))
		n -= 5;
	snprintf(name, size, "%.*s", (int)n, base);
}

/* One search under way. "seconds" is its own time so far (proposals and
 * trials), not counting the other search's generations in between. */
typedef struct bench_search {
	enum curve_kind kind;
	tuner_search *s;
	tuner_worker *w;
	curve *cv;
	double seconds;
	bool over;
} bench_search;

/* The plan both searches of an example time their trials beside (the
 * first one measured: generation 0's default plan), and its trial time,
 * the scale of both curves. */
typedef struct bench_beside {
	json_t *plan;
	double ms;
} bench_beside;

/* Measures plan "handle" of the current generation beside "beside"
 * (which the first plan measured becomes) and appends it to the curve;
 * "clock" is what turns bench_now_s() into the search's own seconds. */
static void run_trial(bench_search *bs, const bench_example *ex, bench_beside *beside,
		      json_t *plan, int handle, double clock)
{
	curve *cv = bs->cv;
	double best = cv->n ? cv->points[cv->n - 1].best_ms : INFINITY;
	double ms = bench_measure(bs->w, ex->text, ex->limit_s, plan, best,
				  beside->plan, beside->ms);
	curve_point *p = &cv->points[cv->n++];

	if (!beside->plan && isfinite(ms)) {
		beside->plan = json_incref(plan);
		beside->ms = ms;
	}

	tuner_search_record(bs->s, handle, ms);
	p->seconds = bench_now_s() + clock;
	p->ms = ms;
	p->best_ms = fmin(best, ms);
}

static void report_generation(const bench_example *ex, const bench_search *bs,
			      size_t plans)
{
	fprintf(stderr, "tuning_curve: %s %s: generation %d, %zu plans, "
		"trial %d/%d, best %.4g ms, %.1f s\n", ex->name, kind_names[bs->kind],
		tuner_search_generations(bs->s) - 1, plans, bs->cv->n,
		ex->opt->trials, bs->cv->points[bs->cv->n - 1].best_ms, bs->seconds);
}

/* A search of "ex" with a fresh worker. Without --budget, it is
 * restarted after no stall (stall_generations is the budget of trials)
 * and has no cost filter: each search gets the same trials; with it, as
 * the daemon runs it. */
static int search_start(const bench_example *ex, enum curve_kind kind,
			curve *cv, bench_search *bs)
{
	const bench_options *opt = ex->opt;
	tuner_search_options so = {
		.kind = kind == CURVE_GENETIC ? TUNER_GENETIC : TUNER_RANDOM,
		.seed = opt->seed,
		.population = opt->population,
		.stall_generations = opt->budget_s ? 0 : opt->trials,
		.peaks = ex->peaks,
	};

	*bs = (bench_search){.kind = kind, .cv = cv};
	bs->s = tuner_search_new(ex->graph, &so);
	bs->w = bench_worker_new(opt->backend);
	cv->points = calloc(opt->trials, sizeof(*cv->points));
	return bs->s && bs->w && cv->points ? 0 : -ENOMEM;
}

/* Whether "bs" has spent its budget of seconds (--budget), "start" being
 * bench_now_s() when its generation began. */
static bool out_of_time(const bench_example *ex, const bench_search *bs, double start)
{
	return ex->opt->budget_s &&
	       bs->seconds + bench_now_s() - start >= ex->opt->budget_s;
}

/* The search "bs" over: when, why, and its cost model then. */
static void search_ended(bench_search *bs, const char *why)
{
	curve *cv = bs->cv;
	tuner_search_model model;
	int plans, measured;

	tuner_search_cost_model(bs->s, &model);
	cv->ended_s = bs->seconds;
	cv->restarts = tuner_search_restarts(bs->s);
	cv->rho = model.rank_correlation;
	cv->rho_peaks = model.peaks_rank_correlation;
	cv->calibrated = model.calibrated;
	plans = tuner_search_space(bs->s, &measured);
	if (why)
		snprintf(cv->ended, sizeof(cv->ended), "%s", why);
	else
		snprintf(cv->ended, sizeof(cv->ended),
			 "space exhausted: %d of %d plans "
			 "measured",
			 measured, plans);
	bs->over = true;
}

/* One generation of "bs", measured; it is over when the budget (trials,
 * or seconds) is spent or the space is exhausted. */
static void search_step(const bench_example *ex, bench_beside *beside, bench_search *bs)
{
	double start = bench_now_s();
	json_t *generation = tuner_search_generation(bs->s), *plan;
	size_t i;

	json_array_foreach(generation, i, plan)
		if (bs->cv->n < ex->opt->trials && !out_of_time(ex, bs, start))
			run_trial(bs, ex, beside, plan, (int)i, bs->seconds - start);
	bs->seconds += bench_now_s() - start;
	if (json_array_size(generation))
		report_generation(ex, bs, json_array_size(generation));
	if (!generation)
		search_ended(bs, NULL);
	else if (bs->cv->n == ex->opt->trials)
		search_ended(bs, "trials");
	else if (out_of_time(ex, bs, bench_now_s()))
		search_ended(bs, "budget");
	json_decref(generation);
}

static void search_finish(bench_search *bs)
{
	tuner_worker_free(bs->w);
	tuner_search_free(bs->s);
}

/* Both searches of "ex", a generation of each in turn, so that a change in
 * the machine's load (other work, thermal state) hits both alike. */
static int run_searches(const bench_example *ex, curve_example *out)
{
	bench_search searches[CURVE_KINDS] = {0};
	bench_beside beside = {0};
	int rc = 0, running = CURVE_KINDS;

	for (int k = 0; k < CURVE_KINDS && rc == 0; k++)
		rc = search_start(ex, k, &out->curves[k], &searches[k]);
	while (rc == 0 && running) {
		running = 0;
		for (int k = 0; k < CURVE_KINDS; k++)
			if (!searches[k].over) {
				search_step(ex, &beside, &searches[k]);
				running += !searches[k].over;
			}
	}
	for (int k = 0; k < CURVE_KINDS; k++)
		search_finish(&searches[k]);
	json_decref(beside.plan);
	return rc;
}

/* Both searches of the example at "path" into "out". */
static int run_example(const bench_options *opt, const char *path,
		       curve_example *out)
{
	bench_example ex = {.opt = opt, .name = out->name};
	sched_graph *graph = NULL;
	sched_error err = {0};
	char *text = tuned_read_file(path, NULL);
	int rc = text ? sched_graph_read_string(text, &graph, &err) : -errno;

	example_name(path, out->name, sizeof(out->name));
	if (rc < 0)
		fprintf(stderr, "tuning_curve: %s: %s\n", path,
			text ? err.message : strerror(-rc));
	ex.text = text;
	ex.graph = graph;
	ex.peaks = opt->peaks;
	ex.limit_s = graph ? tuner_time_limit(graph, opt->backend) : 0;
	if (rc == 0)
		rc = run_searches(&ex, out);
	out->default_ms = out->curves[CURVE_GENETIC].n ?
		out->curves[CURVE_GENETIC].points[0].ms : INFINITY;
	sched_graph_free(graph);
	free(text);
	return rc;
}

/* The device's peaks as the daemon probes them, for the cost filter;
 * false when the worker cannot tell them. */
static bool probe_peaks(const char *backend, kgen_peaks *peaks)
{
	tuner_worker *w = bench_worker_new(backend);
	json_t *request = json_pack("{s:s}", "op", "probe");
	tuner_reply reply = {0};
	const json_t *a;
	bool asked = w && request && tuner_worker_ask(w, request, 120, &reply) == 0;

	a = reply.answer;
	*peaks = (kgen_peaks){json_number_value(json_object_get(a, "bandwidth_gbs")),
			      json_number_value(json_object_get(a, "gflops")),
			      json_number_value(json_object_get(a, "launch_ms")),
			      (int)json_integer_value(json_object_get(a, "cores"))};
	json_decref(reply.answer);
	json_decref(request);
	tuner_worker_free(w);
	return asked && peaks->bandwidth_gbs > 0 && peaks->gflops > 0 &&
	       peaks->cores > 0;
}

/* The first trial (from 1) whose best is at most "ms", or 0 for none. */
static int trials_to_reach(const curve *cv, double ms)
{
	for (int i = 0; i < cv->n; i++)
		if (cv->points[i].best_ms <= ms)
			return i + 1;
	return 0;
}

static double final_best(const curve *cv)
{
	return cv->n ? cv->points[cv->n - 1].best_ms : INFINITY;
}

static double final_seconds(const curve *cv)
{
	return cv->n ? cv->points[cv->n - 1].seconds : 0;
}

/* The trials of the budget: --trials, or with --budget those the
 * genetic search took. */
static int budget_trials(const bench_options *opt, const curve_example *ex)
{
	return opt->budget_s ? ex->curves[CURVE_GENETIC].n : opt->trials;
}

/* The share of the budget the genetic search took to reach random
 * search's final best; INFINITY if it never did. */
static double reach_ratio(const curve_example *ex, int trials)
{
	int t = trials_to_reach(&ex->curves[CURVE_GENETIC],
				final_best(&ex->curves[CURVE_RANDOM]));

	return t ? (double)t / trials : INFINITY;
}

static void print_row(const curve_example *ex, int trials)
{
	const curve *ga = &ex->curves[CURVE_GENETIC], *rs = &ex->curves[CURVE_RANDOM];
	int t = trials_to_reach(ga, final_best(rs));
	char reach[16] = "-", ratio[16] = "-", reach_s[16] = "-";

	if (t) {
		snprintf(reach, sizeof(reach), "%d", t);
		snprintf(ratio, sizeof(ratio), "%.2f", (double)t / trials);
		snprintf(reach_s, sizeof(reach_s), "%.1f", ga->points[t - 1].seconds);
	}
	printf("%-20s %10.4g %10.4g %10.4g %8s %9s %9.1f %9.1f %10s\n", ex->name,
	       ex->default_ms, final_best(rs), final_best(ga), reach, ratio,
	       final_seconds(rs), final_seconds(ga), reach_s);
}

typedef struct ranked {
	double ratio;
	const curve_example *ex;
} ranked;

static int compare_ranked(const void *a, const void *b)
{
	double x = ((const ranked *)a)->ratio, y = ((const ranked *)b)->ratio;

	return (x > y) - (x < y);
}

/* The verdict on the median example (the upper one of an even count). It
 * only informs: the exit status does not depend on it. */
static void print_median(const bench_options *opt, const curve_example *examples, int n)
{
	ranked *order = malloc(n * sizeof(*order));
	char share[64] = "did not reach random search's final best";
	double ratio;

	if (!order)
		return;
	for (int i = 0; i < n; i++)
		order[i] = (ranked){reach_ratio(&examples[i],
						budget_trials(opt, &examples[i])),
				    &examples[i]};
	qsort(order, n, sizeof(*order), compare_ranked);
	ratio = order[n / 2].ratio;
	if (isfinite(ratio))
		snprintf(share, sizeof(share), "reached random search's final best "
			 "in %.2f of the budget", ratio);
	printf("median example (%d of %d, by that share): %s: the genetic search "
	       "%s: %s (the bar: at most 0.50)\n", n / 2 + 1, n,
	       order[n / 2].ex->name, share, ratio <= 0.5 ? "PASS" : "FAIL");
	free(order);
}

static void print_rho(double rho)
{
	if (isnan(rho))
		printf(" %8s", "-");
	else
		printf(" %8.2f", rho);
}

/* When and why each search ended, against its budget, and how well its
 * cost model ranked the trials it measured. */
static void print_stops(const bench_options *opt, const curve_example *examples, int n)
{
	printf("\n%-20s %-8s %8s %8s %6s %8s %8s %8s  %s\n", "example", "search",
	       "ended s", "budget s", "trials", "restarts", "rho", "rho peak", "why");
	for (int i = 0; i < n; i++)
		for (int k = 0; k < CURVE_KINDS; k++) {
			const curve *cv = &examples[i].curves[k];

			printf("%-20s %-8s %8.1f %8d %6d %8d", examples[i].name,
			       kind_names[k], cv->ended_s, opt->budget_s, cv->n,
			       cv->restarts);
			print_rho(cv->rho);
			print_rho(cv->rho_peaks);
			printf("  %s%s\n", cv->ended,
			       cv->calibrated ? " (model calibrated)" : "");
		}
	printf("ended s: the search's own seconds when it ended; rho: Spearman's rank "
	       "correlation of its cost\nmodel's estimates (the peaks' roofline, or "
	       "the rates fitted to the trials) with the\ntimes measured; rho peak: "
	       "the "
	       "roofline's alone (-: too few trials).\n");
}

static void print_table(const bench_options *opt, const curve_example *examples,
			int n)
{
	printf("%-20s %10s %10s %10s %8s %9s %9s %9s %10s\n", "example",
	       "default ms", "random ms", "GA ms", "GA reach", "of budget",
	       "random s", "GA s", "GA reach s");
	for (int i = 0; i < n; i++)
		print_row(&examples[i], budget_trials(opt, &examples[i]));
	if (opt->budget_s)
		printf("random ms, GA ms: the best after %d s; GA reach: the first "
		       "trial "
		       "at which the genetic\nsearch's best was at most random "
		       "search's "
		       "final best (-: never), of budget: that over\nthe genetic "
		       "search's "
		       "trials; random s, GA s: each search's seconds to its last "
		       "trial;\n"
		       "GA reach s: the genetic search's seconds to GA reach.\n",
		       opt->budget_s);
	else
		printf("random ms, GA ms: the best after %d trials; GA reach: the "
		       "first "
		       "trial at which the genetic\nsearch's best was at most random "
		       "search's final best (-: never), of budget: that over "
		       "%d;\nrandom "
		       "s, GA s: each search's seconds; GA reach s: the genetic "
		       "search's "
		       "seconds to GA reach.\n",
		       opt->trials, opt->trials);
	if (n)
		print_median(opt, examples, n);
	if (opt->budget_s)
		print_stops(opt, examples, n);
}

static json_t *json_ms(double ms)
{
	return isfinite(ms) ? json_real(ms) : json_null();
}

/* A curve as [[trial, seconds, ms, best_ms], ...], null for INFINITY. */
static json_t *curve_json(const curve *cv)
{
	json_t *points = json_array();

	for (int i = 0; i < cv->n; i++)
		json_array_append_new(points, json_pack("[i, f, o, o]", i + 1,
			cv->points[i].seconds, json_ms(cv->points[i].ms),
			json_ms(cv->points[i].best_ms)));
	return points;
}

static json_t *rho_json(double rho)
{
	return isnan(rho) ? json_null() : json_real(rho);
}

/* When and why a search ended, its cost model's rank correlations. */
static json_t *ended_json(const curve *cv)
{
	return json_pack("{s:f, s:s, s:i, s:o, s:o, s:b}", "seconds", cv->ended_s,
			 "why", cv->ended, "restarts", cv->restarts, "rank_correlation",
			 rho_json(cv->rho), "peaks_rank_correlation",
			 rho_json(cv->rho_peaks), "calibrated", cv->calibrated);
}

static int write_json(const bench_options *opt, const curve_example *examples,
		      int n)
{
	json_t *list = json_array();
	json_t *all = json_pack("{s:s, s:i, s:i, s:i, s:o}", "backend", opt->backend,
				"trials", opt->trials, "population", opt->population,
				"seed", (int)opt->seed, "examples", list);

	for (int i = 0; i < n; i++)
		json_array_append_new(
			list, json_pack("{s:s, s:o, s:o, s:o, s:{s:o, s:o}}", "name",
					examples[i].name, "default_ms",
					json_ms(examples[i].default_ms), "genetic",
					curve_json(&examples[i].curves[CURVE_GENETIC]),
					"random",
					curve_json(&examples[i].curves[CURVE_RANDOM]),
					"ended", "genetic",
					ended_json(&examples[i].curves[CURVE_GENETIC]),
					"random",
					ended_json(&examples[i].curves[CURVE_RANDOM])));
	n = all ? json_dump_file(all, opt->json, JSON_INDENT(1)) : -1;
	json_decref(all);
	return n < 0 ? -EIO : 0;
}

/* Runs bench/plot.py on the JSON, which says why where it fails (no
 * matplotlib, a file it cannot write). */
static int plot(const bench_options *opt)
{
	char *argv[] = {BENCH_PLOT, "curves", (char *)opt->json, (char *)opt->png,
			NULL};
	pid_t pid;
	int rc, status;

	fflush(stdout);
	rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
	if (rc) {
		fprintf(stderr, "tuning_curve: cannot run " BENCH_PLOT ": %s\n",
			strerror(rc));
		return -rc;
	}
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "tuning_curve: " BENCH_PLOT " failed, no plot\n");
		return -EIO;
	}
	printf("plot: %s (best / default plan against trials, left, and "
	       "seconds, right; genetic blue, random orange)\n",
	       opt->png);
	return 0;
}

/* The JSON and, with --png, its plot, saying where they went. */
static int write_outputs(const bench_options *opt, const curve_example *examples,
			 int n)
{
	if (write_json(opt, examples, n) < 0) {
		fprintf(stderr, "tuning_curve: cannot write '%s'\n", opt->json);
		return -EIO;
	}
	printf("curves: %s\n", opt->json);
	return opt->png ? plot(opt) : 0;
}

static void free_examples(curve_example *examples, int n)
{
	for (int i = 0; examples && i < n; i++)
		for (int k = 0; k < CURVE_KINDS; k++)
			free(examples[i].curves[k].points);
	free(examples);
}

int main(int argc, char **argv)
{
	bench_options opt = {.backend = "cpu",
			     .examples = DEFAULT_EXAMPLES,
			     .population = 16,
			     .seed = 1,
			     .json = "tuning_curve.json"};
	curve_example *examples = NULL;
	kgen_peaks peaks;
	glob_t paths;
	int rc = parse_options(argc, argv, &opt), n = 0;

	if (rc)
		return rc > 0 ? 0 : 2;
	if (!opt.trials)
		opt.trials = opt.budget_s ? BUDGET_MAX_TRIALS : 48;
	if (example_paths(opt.examples, &paths) < 0) {
		fprintf(stderr, "tuning_curve: no examples in " BENCH_EXAMPLES "\n");
		return 2;
	}
	rc = bench_describe_device("tuning_curve", opt.backend);
	if (rc == 0 && !(examples = calloc(paths.gl_pathc, sizeof(*examples))))
		rc = -ENOMEM;
	if (rc == 0 && opt.budget_s && probe_peaks(opt.backend, &peaks))
		opt.peaks = &peaks;
	if (rc == 0 && opt.budget_s)
		printf("%d s per search (%d trials at most), population %d, seed %u, "
		       "cost filter %s\n",
		       opt.budget_s, opt.trials, opt.population, opt.seed,
		       opt.peaks ? "on the probed peaks" : "off (no peaks)");
	else if (rc == 0)
		printf("%d trials per search, population %d, seed %u\n", opt.trials,
		       opt.population, opt.seed);
	for (; rc == 0 && n < (int)paths.gl_pathc; n++)
		rc = run_example(&opt, paths.gl_pathv[n], &examples[n]);
	if (rc == 0) {
		print_table(&opt, examples, n);
		rc = write_outputs(&opt, examples, n);
	}
	free_examples(examples, n);
	globfree(&paths);
	return rc ? 1 : 0;
}
