/*
 * gemm_cpu: tuned's cpu GEMM against OpenBLAS, on the im2row shapes of
 * ResNet-50's convolutions.
 *
 *   gemm_cpu [--shapes MxNxK,...] [--trials N] [--rounds R] [--seed S]
 *            [--json FILE]
 *
 * For each shape, C[i, j] = sum(k) A[i, k] * B[k, j] in f32 (A row-major
 * M x K, B row-major K x N) is tuned on the spot: the genetic search
 * (tuner/search.c) for N trials, each plan measured as the daemon measures
 * it, by a tuned-worker (trial.c), alone (not beside another plan, as the
 * daemon measures a key's first generation). The best plan is then built
 * here with kgen, verified against the reference, and timed in R rounds
 * against OpenBLAS's cblas_sgemm on the same inputs, the two in turn, each once
 * the other's idle threads sleep: the plan by kgen_program_time, the
 * sgemm call by kgen_backend_time_call, the same loop (caches flushed
 * before each run, warm-up, budget, median). Each side's time is the
 * median of its rounds; OpenBLAS's C is checked against the plan's.
 *
 * Prints progress on stderr, a table on stdout and, with --json, the same
 * as JSON.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <jansson.h>

#include "kgen.h"
#include "scheduler.h"
#include "trial.h"
#include "tuner.h"

/* The im2row GEMMs of ResNet-50's conv1 (7x7) and of the 3x3
 * convolutions of stages 2, 3 and 5 (M: output pixels, N: output
 * channels, K: input channels x window). */
#define DEFAULT_SHAPES "12544x64x147,3136x64x576,784x128x1152,49x512x4608"

static const char usage[] =
	"usage: gemm_cpu [--shapes MxNxK,...] [--trials N] [--rounds R]\n"
	"                [--seed S] [--json FILE]\n"
	"Tunes tuned's cpu GEMM on each shape (N trials of the genetic search),\n"
	"then times its best plan against OpenBLAS's cblas_sgemm, R rounds in\n"
	"turn; prints a table.\nDefault shapes: " DEFAULT_SHAPES ".\n";

/* Population 16, as bench/tuning_curve: with 48 trials, the daemon's 32
 * would leave the genetic search no bred generation after its first. */
#define POPULATION 16

typedef struct gemm_options {
	const char *shapes; /* comma-separated */
	int trials;
	int rounds;
	unsigned seed;
	const char *json;   /* NULL: none */
} gemm_options;

/* One shape and what was measured of it. */
typedef struct gemm_result {
	int64_t m, n, k;
	double trial_ms;   /* the search's best trial */
	json_t *plan;      /* the best plan */
	kgen_schedule schedule;
	double *tuned_ms;  /* per round */
	double *blas_ms;
	double tuned_median_ms, blas_median_ms;
	double rel_error;  /* OpenBLAS's C against the plan's */
} gemm_result;

/* The operands on the host, and what cblas_sgemm needs of them. */
typedef struct gemm_operands {
	int m, n, k;
	float *a, *b, *c_tuned, *c_blas;
} gemm_operands;

/* Returns 0 to go on, 1 after --help, a negative code for a usage error. */
static int parse_options(int argc, char **argv, gemm_options *opt)
{
	static const struct option longs[] = {
		{"shapes", required_argument, NULL, 'm'},
		{"trials", required_argument, NULL, 't'},
		{"rounds", required_argument, NULL, 'r'},
		{"seed", required_argument, NULL, 's'},
		{"json", required_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c, rc = 0, seed;

	while (!rc && (c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (c) {
		case 'm': opt->shapes = optarg; break;
		case 't': rc = bench_positive_int(optarg, &opt->trials); break;
		case 'r': rc = bench_positive_int(optarg, &opt->rounds); break;
		case 's':
			rc = bench_positive_int(optarg, &seed);
			opt->seed = (unsigned)seed;
			break;
		case 'j': opt->json = optarg; break;
		case 'h': fputs(usage, stdout); return 1;
		default: rc = -EINVAL;
		}
	}
	if (!rc && optind < argc)
		rc = -EINVAL;
	if (rc)
		fputs(usage, stderr);
	return rc;
}

/* "MxNxK" into "r"; each extent below 2^31 (cblas takes ints). */
static int parse_shape(const char *text, gemm_result *r)
{
	long long m, n, k;
	int end = 0;

	if (sscanf(text, "%lldx%lldx%lld%n", &m, &n, &k, &end) != 3 ||
	    text[end] || m <= 0 || n <= 0 || k <= 0 ||
	    m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
		return -EINVAL;
	*r = (gemm_result){.m = m, .n = n, .k = k};
	return 0;
}

/* The comma-separated shapes of "list" into "*out" ("*n" of them). */
static int parse_shapes(const char *list, gemm_result **out, int *n)
{
	char *copy = strdup(list), *shape, *save;
	int rc = copy ? 0 : -ENOMEM;

	*out = NULL;
	*n = 0;
	for (shape = copy ? strtok_r(copy, ",", &save) : NULL; shape && !rc;
	     shape = strtok_r(NULL, ",", &save)) {
		gemm_result *more = realloc(*out, (*n + 1) * sizeof(**out));

		if (!more) {
			rc = -ENOMEM;
			break;
		}
		*out = more;
		if ((rc = parse_shape(shape, &more[*n])) < 0)
			fprintf(stderr, "gemm_cpu: '%s' is no shape MxNxK\n", shape);
		else
			(*n)++;
	}
	free(copy);
	return rc ? rc : *n ? 0 : -EINVAL;
}

static void shape_name(const gemm_result *r, char *name, size_t size)
{
	snprintf(name, size, "%" PRId64 "x%" PRId64 "x%" PRId64, r->m, r->n, r->k);
}

/* An f32 matrix of graph.json, "role" "input" or "output". */
static json_t *matrix(int64_t rows, int64_t cols, const char *role)
{
	return json_pack("{s:[I, I], s:s, s:s}", "shape", (json_int_t)rows,
			 (json_int_t)cols, "dtype", "f32", "role", role);
}

/* The graph.json of the product, as text. */
static char *graph_text(const gemm_result *r)
{
	char name[96], *text;
	json_t *graph;

	shape_name(r, name, sizeof(name));
	graph = json_pack("{s:i, s:s+, s:{s:o, s:o, s:o}, s:[s]}", "version", 1,
			  "name", "gemm_", name, "tensors",
			  "A", matrix(r->m, r->k, "input"),
			  "B", matrix(r->k, r->n, "input"),
			  "C", matrix(r->m, r->n, "output"),
			  "ops", "C[i, j] = sum(k) A[i, k] * B[k, j]");
	text = graph ? json_dumps(graph, 0) : NULL;
	json_decref(graph);
	return text;
}

/* One generation of "s" measured on "w", as many plans as the budget
 * leaves; *trials counts them. Returns the plans proposed, -1 when the
 * search is over. */
static int tune_generation(tuner_search *s, tuner_worker *w, const char *text,
			   double limit_s, int budget, int *trials)
{
	json_t *generation = tuner_search_generation(s), *plan;
	int n = generation ? (int)json_array_size(generation) : -1;
	size_t i;

	json_array_foreach(generation, i, plan)
		if (*trials < budget) {
			tuner_search_record(s, (int)i,
					    bench_measure(w, text, limit_s, plan,
							  tuner_search_best(s), NULL,
							  0));
			(*trials)++;
		}
	json_decref(generation);
	return n;
}

/* The genetic search of "graph" for opt->trials trials, each measured by
 * a fresh tuned-worker; its best plan into r->plan. It never ends for a
 * stall: stall_generations is the budget. */
static int tune(const gemm_options *opt, const sched_graph *graph,
		const char *text, const char *name, gemm_result *r)
{
	tuner_search_options so = {
		.kind = TUNER_GENETIC, .seed = opt->seed, .population = POPULATION,
		.stall_generations = opt->trials,
	};
	tuner_search *s = tuner_search_new(graph, &so);
	tuner_worker *w = bench_worker_new("cpu");
	double limit_s = tuner_time_limit(graph, "cpu"), start = bench_now_s();
	json_t *best = NULL;
	int trials = 0;

	while (s && w && trials < opt->trials) {
		int plans = tune_generation(s, w, text, limit_s, opt->trials, &trials);

		if (plans < 0)
			break;
		if (plans)
			fprintf(stderr, "gemm_cpu: %s: generation %d, %d plans, trial "
				"%d/%d, best %.4g ms, %.1f s\n", name,
				tuner_search_generations(s) - 1, plans, trials,
				opt->trials, tuner_search_best(s), bench_now_s() - start);
	}
	if (s && (best = tuner_search_best_plans(s, 1)) && json_array_size(best)) {
		r->plan = json_incref(json_array_get(best, 0));
		r->trial_ms = tuner_search_best(s);
	}
	json_decref(best);
	tuner_worker_free(w);
	tuner_search_free(s);
	if (!r->plan)
		fprintf(stderr, "gemm_cpu: %s: no plan verified in %d trials\n", name,
			trials);
	return r->plan ? 0 : -1;
}

/* The plan "r->plan" built here and verified against the reference. */
static int build_plan(kgen_backend *backend, const sched_graph *graph,
		      unsigned seed, gemm_result *r, kgen_plan **plan,
		      kgen_program **prog)
{
	kgen_error err = {0};
	kgen_check check = {0};
	int rc = kgen_plan_from_json(graph, r->plan, plan, &err);

	if (rc == KGEN_OK)
		rc = kgen_program_build(backend, graph, *plan, NULL, prog, &err);
	if (rc == KGEN_OK)
		rc = kgen_verify(*prog, seed, &check, &err);
	if (rc < 0)
		fprintf(stderr, "gemm_cpu: the best plan: %s\n", err.message);
	else /* one op: one kernel */
		r->schedule = (*plan)->kernels[0].schedule;
	kgen_error_release(&err);
	return rc;
}

static void operands_free(gemm_operands *ops)
{
	free(ops->a);
	free(ops->b);
	free(ops->c_tuned);
	free(ops->c_blas);
}

/* A and B drawn uniformly in [-1, 1) from "seed"; both Cs zero; all four
 * placed as the cpu backend places tensors (kgen_host_buffer), so that
 * neither side's operands are made huge in the middle of the rounds. */
static int operands_new(const gemm_result *r, unsigned seed, gemm_operands *ops)
{
	size_t a = (size_t)(r->m * r->k) * sizeof(float);
	size_t b = (size_t)(r->k * r->n) * sizeof(float);
	size_t c = (size_t)(r->m * r->n) * sizeof(float);

	*ops = (gemm_operands){(int)r->m, (int)r->n, (int)r->k, kgen_host_buffer(a),
			       kgen_host_buffer(b), kgen_host_buffer(c), kgen_host_buffer(c)};
	if (!ops->a || !ops->b || !ops->c_tuned || !ops->c_blas) {
		operands_free(ops);
		return -ENOMEM;
	}
	for (int64_t i = 0; i < r->m * r->k; i++)
		ops->a[i] = (float)(rand_r(&seed) / (RAND_MAX + 1.0) * 2 - 1);
	for (int64_t i = 0; i < r->k * r->n; i++)
		ops->b[i] = (float)(rand_r(&seed) / (RAND_MAX + 1.0) * 2 - 1);
	memset(ops->c_tuned, 0, r->m * r->n * sizeof(float));
	memset(ops->c_blas, 0, r->m * r->n * sizeof(float));
	return 0;
}

/* OpenBLAS's C = A B, a host call for kgen_backend_time_call. */
static void openblas_sgemm(void *arg)
{
	gemm_operands *ops = arg;

	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ops->m, ops->n,
		    ops->k, 1.0f, ops->a, ops->k, ops->b, ops->n, 0.0f, ops->c_blas,
		    ops->n);
}

/* ||C_blas - C_tuned|| / ||C_blas||, as kgen_check measures an error. */
static double relative_error(const gemm_operands *ops)
{
	double diff = 0, norm = 0;

	for (int64_t i = 0; i < (int64_t)ops->m * ops->n; i++) {
		double d = (double)ops->c_blas[i] - ops->c_tuned[i];

		diff += d * d;
		norm += (double)ops->c_blas[i] * ops->c_blas[i];
	}
	return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}

/* Both products on the same inputs, the plan's through its program (which
 * keeps A and B in its own buffers for the timing after), and the error
 * between them. */
static int compare_outputs(kgen_program *prog, gemm_operands *ops,
			   gemm_result *r)
{
	void *host[] = {ops->a, ops->b, ops->c_tuned};
	kgen_error err = {0};
	int rc = kgen_program_run(prog, host, &err);

	if (rc < 0)
		fprintf(stderr, "gemm_cpu: cannot run the best plan: %s\n", err.message);
	kgen_error_release(&err);
	openblas_sgemm(ops);
	r->rel_error = relative_error(ops);
	return rc;
}

static int compare_ms(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median of "n" times (the upper one of an even count). */
static double median(const double *ms, int n)
{
	double *sorted = malloc(n * sizeof(double)), mid;

	if (!sorted)
		return NAN;
	memcpy(sorted, ms, n * sizeof(double));
	qsort(sorted, n, sizeof(double), compare_ms);
	mid = sorted[n / 2];
	free(sorted);
	return mid;
}

/* After a call, OpenBLAS's idle threads spin for 2^28 TSC cycles (its
 * THREAD_TIMEOUT, about 0.1 s) before they sleep, OpenMP's for less; a
 * side timed while the other's threads spin loses a core to them (whole
 * rounds of the plan ran 3 to 10 times slower here, 1 in 8). Each side
 * waits this long first, so that both start with the other's asleep. */
static void let_threads_sleep(void)
{
	struct timespec pause = {.tv_nsec = 200 * 1000 * 1000};

	nanosleep(&pause, NULL);
}

/* Each round times the plan, then OpenBLAS, alike: one warm-up run, then
 * runs after a cache flush each until a trial's budget is spent (3 to 50);
 * a round's time is the median of its runs. */
static int time_rounds(kgen_backend *backend, kgen_program *prog,
		       gemm_operands *ops, int rounds, gemm_result *r)
{
	const kgen_timing timing = {.warmup = 1, .min_runs = 3, .max_runs = 50,
				    .budget_ms = TRIAL_TIMING_MS};
	kgen_error err = {0};
	kgen_time tuned, blas;
	int rc = 0;

	r->tuned_ms = calloc(rounds, sizeof(double));
	r->blas_ms = calloc(rounds, sizeof(double));
	if (!r->tuned_ms || !r->blas_ms) {
		fprintf(stderr, "gemm_cpu: out of memory\n");
		return -ENOMEM;
	}
	for (int i = 0; i < rounds && rc == 0; i++) {
		let_threads_sleep();
		rc = kgen_program_time(prog, &timing, NULL, &tuned, &err);
		let_threads_sleep();
		if (rc == 0)
			rc = kgen_backend_time_call(backend, openblas_sgemm, ops,
						    &timing, &blas, &err);
		if (rc < 0)
			break;
		r->tuned_ms[i] = tuned.median_ms;
		r->blas_ms[i] = blas.median_ms;
		fprintf(stderr, "gemm_cpu: round %d/%d: tuned %.4g ms (%d runs), "
			"OpenBLAS %.4g ms (%d runs)\n", i + 1, rounds, tuned.median_ms,
			tuned.runs, blas.median_ms, blas.runs);
	}
	if (rc < 0)
		fprintf(stderr, "gemm_cpu: cannot time: %s\n", err.message);
	kgen_error_release(&err);
	r->tuned_median_ms = median(r->tuned_ms, rounds);
	r->blas_median_ms = median(r->blas_ms, rounds);
	return rc;
}

/* The best plan built, checked against OpenBLAS and timed against it. */
static int race(kgen_backend *backend, const sched_graph *graph,
		const gemm_options *opt, gemm_result *r)
{
	kgen_program *prog = NULL;
	kgen_plan *plan = NULL;
	gemm_operands ops = {0};
	int rc = build_plan(backend, graph, opt->seed, r, &plan, &prog);

	if (rc == 0 && (rc = operands_new(r, opt->seed, &ops)) < 0)
		fprintf(stderr, "gemm_cpu: out of memory\n");
	if (rc == 0)
		rc = compare_outputs(prog, &ops, r);
	if (rc == 0)
		rc = time_rounds(backend, prog, &ops, opt->rounds, r);
	operands_free(&ops);
	kgen_program_free(prog);
	kgen_plan_free(plan);
	return rc;
}

/* One shape: its graph read, tuned, then raced against OpenBLAS. */
static int run_shape(kgen_backend *backend, const gemm_options *opt,
		     gemm_result *r)
{
	char name[96], *text = graph_text(r);
	sched_graph *graph = NULL;
	sched_error err = {0};
	int rc = text ? sched_graph_read_string(text, &graph, &err) : -ENOMEM;

	shape_name(r, name, sizeof(name));
	if (rc < 0)
		fprintf(stderr, "gemm_cpu: %s: %s\n", name,
			text ? err.message : "out of memory");
	if (rc == 0)
		rc = tune(opt, graph, text, name, r);
	if (rc == 0) {
		fprintf(stderr, "gemm_cpu: %s: best trial %.4g ms; racing OpenBLAS, "
			"%d rounds\n", name, r->trial_ms, opt->rounds);
		rc = race(backend, graph, opt, r);
	}
	sched_graph_free(graph);
	free(text);
	return rc;
}

static double gflops(const gemm_result *r, double ms)
{
	return 2.0 * r->m * r->n * r->k / (ms * 1e6);
}

/* The plan's blocking: its micro-kernels, or its tiles. */
static void describe_schedule(const kgen_schedule *s, char *out, size_t size)
{
	const kgen_micro *m = &s->micro;

	if (m->mr)
		snprintf(out, size, "micro %dx%d kc %d mc %d nc %d pack %d", m->mr,
			 m->nr, m->kc, m->mc, m->nc, m->pack);
	else
		snprintf(out, size, "tiled %" PRId64 "x%" PRId64, s->tile[0], s->tile[1]);
}

static void print_table(const gemm_options *opt, const gemm_result *results,
			int n)
{
	double log_ratios = 0;
	char name[96], plan[96];

	printf("%-14s %13s %9s %16s %11s %14s %10s  %s\n", "shape MxNxK",
	       "tuned GFLOP/s", "tuned ms", "OpenBLAS GFLOP/s", "OpenBLAS ms",
	       "tuned/OpenBLAS", "rel. error", "tuned plan");
	for (int i = 0; i < n; i++) {
		const gemm_result *r = &results[i];
		double ratio = r->tuned_median_ms / r->blas_median_ms;

		shape_name(r, name, sizeof(name));
		describe_schedule(&r->schedule, plan, sizeof(plan));
		printf("%-14s %13.1f %9.4g %16.1f %11.4g %14.2f %10.2e  %s\n", name,
		       gflops(r, r->tuned_median_ms), r->tuned_median_ms,
		       gflops(r, r->blas_median_ms), r->blas_median_ms, ratio,
		       r->rel_error, plan);
		log_ratios += log(ratio);
	}
	printf("ms: the median of %d rounds; tuned/OpenBLAS: of the times (below 1: "
	       "tuned is faster);\nrel. error: ||C_OpenBLAS - C_tuned|| / "
	       "||C_OpenBLAS||.\n", opt->rounds);
	if (n)
		printf("geometric mean of tuned/OpenBLAS: %.2f\n", exp(log_ratios / n));
}

static json_t *micro_json(const kgen_micro *m)
{
	if (!m->mr)
		return json_null();
	return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "mr", m->mr, "nr", m->nr,
			 "kc", m->kc, "mc", m->mc, "nc", m->nc, "pack", m->pack);
}

static json_t *rounds_json(const double *ms, int rounds)
{
	json_t *list = json_array();

	for (int i = 0; i < rounds; i++)
		json_array_append_new(list, json_real(ms[i]));
	return list;
}

static json_t *side_json(const gemm_result *r, double ms,
			 const double *rounds_ms, int rounds)
{
	return json_pack("{s:f, s:f, s:o}", "ms", ms, "gflops", gflops(r, ms),
			 "rounds_ms", rounds_json(rounds_ms, rounds));
}

static json_t *result_json(const gemm_result *r, int rounds)
{
	return json_pack("{s:I, s:I, s:I, s:o, s:o, s:f, s:f, s:f, s:o, s:O}",
		"m", (json_int_t)r->m, "n", (json_int_t)r->n, "k", (json_int_t)r->k,
		"tuned", side_json(r, r->tuned_median_ms, r->tuned_ms, rounds),
		"openblas", side_json(r, r->blas_median_ms, r->blas_ms, rounds),
		"ratio", r->tuned_median_ms / r->blas_median_ms,
		"rel_error", r->rel_error, "trial_ms", r->trial_ms,
		"micro", micro_json(&r->schedule.micro), "plan", r->plan);
}

static int write_json(const gemm_options *opt, kgen_backend *backend,
		      const gemm_result *results, int n)
{
	json_t *list = json_array();
	json_t *all = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:o}",
				"device", kgen_backend_description(backend),
				"openblas", openblas_get_config(),
				"openblas_threads", openblas_get_num_threads(),
				"trials", opt->trials, "population", POPULATION,
				"rounds", opt->rounds, "seed", (int)opt->seed,
				"shapes", list);

	for (int i = 0; i < n; i++)
		json_array_append_new(list, result_json(&results[i], opt->rounds));
	n = all ? json_dump_file(all, opt->json, JSON_INDENT(1)) : -1;
	json_decref(all);
	if (n < 0)
		fprintf(stderr, "gemm_cpu: cannot write '%s'\n", opt->json);
	return n < 0 ? -EIO : 0;
}

static void free_results(gemm_result *results, int n)
{
	for (int i = 0; i < n; i++) {
		json_decref(results[i].plan);
		free(results[i].tuned_ms);
		free(results[i].blas_ms);
	}
	free(results);
}

/* The in-process cpu backend, and what both sides run on, on stdout. */
static int open_backend(const gemm_options *opt, kgen_backend **backend)
{
	kgen_error err = {0};
	int rc = bench_describe_device("gemm_cpu", "cpu");

	if (rc == 0 && (rc = kgen_backend_open("cpu", backend, &err)) < 0)
		fprintf(stderr, "gemm_cpu: %s\n", err.message);
	kgen_error_release(&err);
	if (rc == 0)
		printf("%s, %d threads\n%d trials per shape, population %d, seed %u; "
		       "%d rounds of tuned and OpenBLAS in turn\n",
		       openblas_get_config(), openblas_get_num_threads(), opt->trials,
		       POPULATION, opt->seed, opt->rounds);
	return rc;
}

int main(int argc, char **argv)
{
	gemm_options opt = {.shapes = DEFAULT_SHAPES, .trials = 48, .rounds = 7,
			    .seed = 1};
	kgen_backend *backend = NULL;
	gemm_result *results = NULL;
	int rc = parse_options(argc, argv, &opt), n = 0, done = 0;

	if (rc)
		return rc > 0 ? 0 : 2;
	if (parse_shapes(opt.shapes, &results, &n) < 0) {
		free(results);
		return 2;
	}
	rc = open_backend(&opt, &backend);
	for (; rc == 0 && done < n; done++)
		rc = run_shape(backend, &opt, &results[done]);
	if (rc == 0) {
		print_table(&opt, results, n);
		if (opt.json)
			rc = write_json(&opt, backend, results, n);
	}
	free_results(results, n);
	kgen_backend_close(backend);
	return rc ? 1 : 0;
}
