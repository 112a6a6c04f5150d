/*
 * exec.c: a plan compiled for a backend: build, run, time; or compiled
 * into the shared folder only (prepare), for another process to load.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kgen_int.h"

struct kgen_program {
	kgen_backend *backend;
	const sched_graph *graph;
	const kgen_plan *plan;
	void **modules;
	kgen_launch *launches;
	void **buffers;
	size_t *bytes;      /* each buffer's size */
	void *sync_area;    /* cuda plans with sync: semaphores, counters, flags */
	unsigned iteration; /* runs of the whole plan, for the semaphores */
};

static char *print_kernel(kgen_backend *backend, const sched_graph *graph,
			  const kgen_plan *plan, int k)
{
	if (kgen_backend_prints_cuda(backend))
		return kgen_print_cuda(graph, plan, k);
	return kgen_print_c(graph, plan, k);
}

/* The source of kernel "k": sources[k] when given, else printed for the
 * backend ("*printed", the caller's to free). NULL when out of memory. */
static const char *kernel_source(kgen_backend *backend, const sched_graph *graph,
				 const kgen_plan *plan, const char *const *sources,
				 int k, char **printed)
{
	*printed = NULL;
	if (sources && sources[k])
		return sources[k];
	return *printed = print_kernel(backend, graph, plan, k);
}

/* A library step the backend's library cannot make: KGEN_EPLAN, why;
 * on the cpu, one without a CBLAS here, and any on the emulated backend:
 * KGEN_EBACKEND (cuda says so when it sets the call up). */
static int check_library(const kgen_backend *backend, const sched_graph *graph,
			 const kgen_kernel *kernel, kgen_error *err)
{
	bool cuda = kgen_backend_prints_cuda(backend);
	const char *why = kernel->schedule.library ?
		kgen_library_kernel_unfit(graph, kernel, cuda) : NULL;

	if (kernel->schedule.library && strcmp(backend->ops->name, "cuda") && cuda)
		return kgen_fail(err, KGEN_EBACKEND, "kernel '%s' is a library step, which "
				 "the emulated backend cannot run (it calls cuBLASLt on a GPU)",
				 kernel->name);
	if (why)
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s' cannot be a library step "
				 "on %s: %s", kernel->name, backend->ops->name, why);
	if (kernel->schedule.library && !cuda && !kgen_library_available("cpu"))
		return kgen_fail(err, KGEN_EBACKEND, "kernel '%s' is a library step, and "
				 "no CBLAS (libopenblas.so.0, libblas.so.3) can be opened "
				 "here", kernel->name);
	return KGEN_OK;
}

/* The kernel's scratch memory, the part that must start at zero zeroed
 * once (its counters reset themselves at each run). */
static int alloc_scratch(kgen_program *prog, int k, kgen_error *err)
{
	size_t zeroed, bytes = kgen_kernel_scratch_bytes(prog->graph, &prog->plan->kernels[k],
							 &zeroed);
	void *zeros;
	int rc;

	if (!bytes)
		return KGEN_OK;
	if (!(zeros = calloc(1, zeroed)))
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	prog->launches[k].scratch_bytes = bytes;
	rc = prog->backend->ops->alloc(prog->backend, bytes, &prog->launches[k].scratch, err);
	if (rc == KGEN_OK)
		rc = prog->backend->ops->upload(prog->backend, prog->launches[k].scratch, zeros,
						zeroed, err);
	free(zeros);
	return rc;
}

static int build_kernel(kgen_program *prog, int k, const char *const *sources,
			kgen_error *err)
{
	const kgen_kernel *kernel = &prog->plan->kernels[k];
	kgen_launch *launch = &prog->launches[k];
	char *printed;
	const char *source;
	int rc;

	if ((rc = check_library(prog->backend, prog->graph, kernel, err)) < 0)
		return rc;
	source = kernel_source(prog->backend, prog->graph, prog->plan, sources, k, &printed);
	if (!source)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	rc = prog->backend->ops->compile(prog->backend, source, kernel->name,
					 &prog->modules[k], &launch->function, err);
	free(printed);
	launch->name = kernel->name;
	launch->library = kernel->schedule.library;
	launch->tensors = prog->buffers;
	launch->bytes = prog->bytes;
	launch->ntensors = prog->graph->ntensors;
	kgen_cuda_launch_shape(prog->graph, kernel, &launch->blocks,
			       &launch->threads);
	return rc < 0 ? rc : alloc_scratch(prog, k, err);
}

static int alloc_buffers(kgen_program *prog, kgen_error *err)
{
	const sched_graph *g = prog->graph;
	int rc = KGEN_OK;

	for (int t = 0; t < g->ntensors && rc == KGEN_OK; t++) {
		prog->bytes[t] = sched_tensor_bytes(g, t);
		rc = prog->backend->ops->alloc(prog->backend, prog->bytes[t],
					       &prog->buffers[t], err);
	}
	return rc;
}

static bool plan_has_sync(const kgen_plan *plan)
{
	for (int k = 0; k < plan->nkernels; k++)
		if (plan->kernels[k].sync.on)
			return true;
	return false;
}

static void *word_at(void *area, size_t word)
{
	return (char *)area + 4 * word;
}

/* Where each consumer's semaphores start in the sync area, after two
 * words per kernel (its tile counter and started flag); the area's words
 * in *total. */
static int lay_out_semaphores(const kgen_program *prog, size_t *start, size_t *total,
			      kgen_error *err)
{
	const kgen_plan *plan = prog->plan;
	int rc = KGEN_OK;

	*total = 2 * (size_t)plan->nkernels;
	for (int k = 0; k < plan->nkernels && rc == KGEN_OK; k++) {
		sched_sync *sync;

		if (!plan->kernels[k].sync.on)
			continue;
		rc = kgen_sync_analyse(prog->graph, plan, k, &sync, err);
		if (rc == KGEN_OK) {
			start[k] = *total;
			*total += sched_sync_policy_of(sync, plan->kernels[k].sync.policy)->semaphores;
			sched_sync_free(sync);
		}
	}
	return rc;
}

/* Without the wait-kernel, both grids must fit on the device at once. */
static int check_co_resident(kgen_program *prog, int k, kgen_error *err)
{
	const kgen_launch *p = &prog->launches[k - 1], *c = &prog->launches[k];
	int per_p, per_c, rc;

	if ((rc = prog->backend->ops->blocks_per_sm(prog->backend, p->function, p->threads,
						   &per_p, err)) < 0 ||
	    (rc = prog->backend->ops->blocks_per_sm(prog->backend, c->function, c->threads,
						   &per_c, err)) < 0)
		return rc;
	if (!kgen_sync_co_resident(p->blocks, per_p, c->blocks, per_c, prog->backend->cores))
		return kgen_fail(err, KGEN_EPLAN, "kernel '%s': without its wait-kernel "
				 "its blocks could hold the multiprocessors '%s' needs "
				 "(%u and %u blocks, %d and %d per multiprocessor, %d "
				 "multiprocessors)", c->name, p->name, c->blocks, p->blocks,
				 per_c, per_p, prog->backend->cores);
	return KGEN_OK;
}

static int wire_consumer(kgen_program *prog, int k, void *semaphores, kgen_error *err)
{
	kgen_launch_sync *s = &prog->launches[k].sync;
	char entry[80];

	s->consumer = true;
	s->in = semaphores;
	prog->launches[k - 1].sync.out = semaphores;
	if (!prog->plan->kernels[k].sync.wait_kernel)
		return check_co_resident(prog, k, err);
	s->started = word_at(prog->sync_area, 2 * (size_t)(k - 1) + 1);
	snprintf(entry, sizeof(entry), "%s_wait", prog->plan->kernels[k].name);
	return prog->backend->ops->lookup(prog->backend, prog->modules[k], entry,
					  &s->wait_function, err);
}

/* The sync area, zeroed once (semaphores count up across runs), and each
 * wrapped launch's pointers into it (docs/design/sync.md). */
static int wire_syncs(kgen_program *prog, kgen_error *err)
{
	const kgen_plan *plan = prog->plan;
	size_t *start = calloc(plan->nkernels, sizeof(size_t)), total = 0;
	void *zeros = NULL;
	int rc = start ? lay_out_semaphores(prog, start, &total, err)
		       : kgen_fail(err, KGEN_ENOMEM, "out of memory");

	if (rc == KGEN_OK && !(zeros = calloc(total, 4)))
		rc = kgen_fail(err, KGEN_ENOMEM, "out of memory");
	if (rc == KGEN_OK)
		rc = prog->backend->ops->alloc(prog->backend, 4 * total, &prog->sync_area, err);
	if (rc == KGEN_OK)
		rc = prog->backend->ops->upload(prog->backend, prog->sync_area, zeros,
						4 * total, err);
	for (int k = 0; k < plan->nkernels && rc == KGEN_OK; k++) {
		kgen_launch_sync *s = &prog->launches[k].sync;

		s->wrapped = kgen_sync_wraps(plan, k);
		s->self = s->wrapped ? word_at(prog->sync_area, 2 * (size_t)k) : NULL;
		s->iteration = &prog->iteration;
		if (plan->kernels[k].sync.on)
			rc = wire_consumer(prog, k, word_at(prog->sync_area, start[k]), err);
	}
	free(zeros);
	free(start);
	return rc;
}

int kgen_program_build(kgen_backend *backend, const sched_graph *graph,
		       const kgen_plan *plan, const char *const *sources,
		       kgen_program **out, kgen_error *err)
{
	kgen_program *prog = calloc(1, sizeof(*prog));
	int rc = KGEN_OK;

	*out = NULL;
	if (prog)
		*prog = (kgen_program){
			.backend = backend,
			.graph = graph,
			.plan = plan,
			.modules = calloc(plan->nkernels, sizeof(void *)),
			.launches = calloc(plan->nkernels, sizeof(kgen_launch)),
			.buffers = calloc(graph->ntensors, sizeof(void *)),
			.bytes = calloc(graph->ntensors, sizeof(size_t)),
		};
	if (!prog || !prog->modules || !prog->launches || !prog->buffers ||
	    !prog->bytes) {
		kgen_program_free(prog);
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	}
	rc = alloc_buffers(prog, err);
	for (int k = 0; k < plan->nkernels && rc == KGEN_OK; k++)
		rc = build_kernel(prog, k, sources, err);
	if (rc == KGEN_OK && backend->ops->lookup && plan_has_sync(plan))
		rc = wire_syncs(prog, err);
	if (rc < 0) {
		kgen_program_free(prog);
		return rc;
	}
	*out = prog;
	return KGEN_OK;
}

int kgen_program_prepare(kgen_backend *backend, const sched_graph *graph,
			 const kgen_plan *plan, const char *const *sources,
			 kgen_error *err)
{
	int rc = KGEN_OK;

	if (!backend->share)
		return kgen_fail(err, KGEN_EBACKEND, "no shared folder to compile "
				 "into: call kgen_backend_share first");
	for (int k = 0; k < plan->nkernels && rc == KGEN_OK; k++) {
		char *printed = NULL;
		const char *source;

		if ((rc = check_library(backend, graph, &plan->kernels[k], err)) < 0)
			break;
		source = kernel_source(backend, graph, plan, sources, k, &printed);
		rc = source ? backend->ops->prepare(backend, source,
						    plan->kernels[k].name, err)
			    : kgen_fail(err, KGEN_ENOMEM, "out of memory");
		free(printed);
	}
	return rc;
}

void kgen_program_free(kgen_program *prog)
{
	if (!prog)
		return;
	for (int k = 0; prog->modules && k < prog->plan->nkernels; k++)
		if (prog->modules[k])
			prog->backend->ops->unload(prog->backend, prog->modules[k]);
	for (int k = 0; prog->launches && k < prog->plan->nkernels; k++)
		if (prog->launches[k].scratch)
			prog->backend->ops->release(prog->backend, prog->launches[k].scratch);
	for (int t = 0; prog->buffers && t < prog->graph->ntensors; t++)
		if (prog->buffers[t])
			prog->backend->ops->release(prog->backend, prog->buffers[t]);
	if (prog->sync_area)
		prog->backend->ops->release(prog->backend, prog->sync_area);
	free(prog->modules);
	free(prog->launches);
	free(prog->buffers);
	free(prog->bytes);
	free(prog);
}

int kgen_program_run(kgen_program *prog, void **host, kgen_error *err)
{
	const kgen_backend_ops *ops = prog->backend->ops;
	const sched_graph *g = prog->graph;
	int rc = KGEN_OK;

	for (int t = 0; t < g->ntensors && rc == KGEN_OK; t++)
		rc = ops->upload(prog->backend, prog->buffers[t], host[t],
				 sched_tensor_bytes(g, t), err);
	if (rc == KGEN_OK)
		rc = ops->run(prog->backend, prog->launches, prog->plan->nkernels,
			      NULL, err);
	for (int t = 0; t < g->ntensors && rc == KGEN_OK; t++)
		if (g->tensors[t].role != SCHED_INPUT)
			rc = ops->download(prog->backend, host[t], prog->buffers[t],
					   sched_tensor_bytes(g, t), err);
	return rc;
}

static int compare_ms(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double percentile(const double *sorted, int n, double p)
{
	double at = p * (n - 1);
	int lo = (int)floor(at);

	return lo + 1 < n ? sorted[lo] + (at - lo) * (sorted[lo + 1] - sorted[lo])
			  : sorted[lo];
}

/* The median and spread of "runs" times (sorted in place). */
static kgen_time summary(double *ms, int runs)
{
	qsort(ms, runs, sizeof(double), compare_ms);
	return (kgen_time){percentile(ms, runs, 0.5),
			   percentile(ms, runs, 0.9) - percentile(ms, runs, 0.1), runs};
}

/* Times "n" launches run together: warm-up, then runs until the budget
 * of wall time (cache flushes included) is spent, within [min_runs,
 * max_runs]. */
static int time_launches(kgen_backend *backend, const kgen_launch *launches,
			 int n, const kgen_timing *timing, kgen_time *out,
			 kgen_error *err)
{
	double *ms = calloc(timing->max_runs, sizeof(double)), start;
	int runs = 0, rc = KGEN_OK;

	if (!ms)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	for (int i = 0; i < timing->warmup && rc == KGEN_OK; i++)
		rc = backend->ops->run(backend, launches, n, NULL, err);
	start = kgen_now_ms();
	while (rc == KGEN_OK && runs < timing->max_runs &&
	       (runs < timing->min_runs || kgen_now_ms() - start < timing->budget_ms))
		rc = backend->ops->run(backend, launches, n, &ms[runs++], err);
	if (rc == KGEN_OK)
		*out = summary(ms, runs);
	free(ms);
	return rc;
}

int kgen_program_time(kgen_program *prog, const kgen_timing *timing,
		      kgen_time *times, kgen_time *total, kgen_error *err)
{
	int rc = KGEN_OK;

	for (int k = 0; times && k < prog->plan->nkernels && rc == KGEN_OK; k++) {
		kgen_launch alone = prog->launches[k];

		alone.sync = (kgen_launch_sync){.wrapped = alone.sync.wrapped};
		rc = time_launches(prog->backend, &alone, 1, timing, &times[k], err);
	}
	if (rc == KGEN_OK && total)
		rc = time_launches(prog->backend, prog->launches, prog->plan->nkernels,
				   timing, total, err);
	return rc;
}

/* Every kernel of "prog" run once, in order, timed after a cache flush
 * when "ms" is not NULL. */
static int run_whole(kgen_program *prog, double *ms, kgen_error *err)
{
	return prog->backend->ops->run(prog->backend, prog->launches,
				       prog->plan->nkernels, ms, err);
}

/* Each run of "prog" over the run of "beside" that followed it: their
 * median, into *ratio. */
static int median_ratio(const double *mine, const double *theirs, int runs,
			double *ratio, kgen_error *err)
{
	double *ratios = calloc(runs, sizeof(double));

	if (!ratios)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	for (int i = 0; i < runs; i++)
		ratios[i] = theirs[i] > 0 ? mine[i] / theirs[i] : INFINITY;
	*ratio = summary(ratios, runs).median_ms;
	free(ratios);
	return KGEN_OK;
}

int kgen_program_time_beside(kgen_program *prog, kgen_program *beside,
			     const kgen_timing *timing, kgen_time *total,
			     kgen_time *beside_total, double *ratio, kgen_error *err)
{
	double *mine = calloc(2 * (size_t)timing->max_runs, sizeof(double)), start;
	double *theirs = mine + timing->max_runs;
	int runs = 0, rc = KGEN_OK;

	if (!mine)
		return kgen_fail(err, KGEN_ENOMEM, "out of memory");
	for (int i = 0; i < timing->warmup && rc == KGEN_OK; i++)
		if ((rc = run_whole(prog, NULL, err)) == KGEN_OK)
			rc = run_whole(beside, NULL, err);
	start = kgen_now_ms();
	while (rc == KGEN_OK && runs < timing->max_runs &&
	       (runs < timing->min_runs || kgen_now_ms() - start < timing->budget_ms)) {
		if ((rc = run_whole(prog, &mine[runs], err)) == KGEN_OK &&
		    (rc = run_whole(beside, &theirs[runs], err)) == KGEN_OK)
			runs++;
	}
	if (rc == KGEN_OK &&
	    (rc = median_ratio(mine, theirs, runs, ratio, err)) == KGEN_OK) {
		*total = summary(mine, runs);
		*beside_total = summary(theirs, runs);
	}
	free(mine);
	return rc;
}

/* A host call and its argument, as the one tensor of a launch. */
typedef struct host_call {
	void (*call)(void *arg);
	void *arg;
} host_call;

/* A cpu kernel (void NAME(void **tensors)) that makes the host call in
 * tensors[0]: the cpu backend's run op flushes the caches before it and
 * times it as it times any kernel. */
static void run_host_call(void **tensors)
{
	const host_call *hc = tensors[0];

	hc->call(hc->arg);
}

int kgen_backend_time_call(kgen_backend *backend, void (*call)(void *arg),
			   void *arg, const kgen_timing *timing, kgen_time *out,
			   kgen_error *err)
{
	host_call hc = {call, arg};
	void *tensors[] = {&hc};
	kgen_launch launch = {.name = "host_call", .function = (void *)run_host_call,
			      .blocks = 1, .threads = 1, .ntensors = 1,
			      .tensors = tensors};

	if (strcmp(backend->ops->name, "cpu"))
		return kgen_fail(err, KGEN_EBACKEND, "only the cpu backend times host "
				 "calls, not '%s'", backend->ops->name);
	return time_launches(backend, &launch, 1, timing, out, err);
}

int kgen_program_run_on(kgen_program *prog, void *stream, void *const *tensors,
			kgen_error *err)
{
	int n = prog->plan->nkernels, rc;
	void **args = calloc(prog->graph->ntensors + 1, sizeof(void *));
	kgen_launch *launches = calloc(n + 1, sizeof(kgen_launch));

	if (!args || !launches)
		rc = kgen_fail(err, KGEN_ENOMEM, "out of memory");
	else {
		for (int t = 0; t < prog->graph->ntensors; t++)
			args[t] = tensors[t] ? tensors[t] : prog->buffers[t];
		for (int k = 0; k < n; k++) {
			launches[k] = prog->launches[k];
			launches[k].tensors = args;
		}
		rc = prog->backend->ops->enqueue(prog->backend, launches, n, stream, err);
	}
	free(args);
	free(launches);
	return rc;
}

const sched_graph *kgen_program_graph(const kgen_program *prog)
{
	return prog->graph;
}

int kgen_first_consumer(const kgen_launch *launches, int n)
{
	for (int i = 0; i < n; i++)
		if (launches[i].sync.consumer)
			return i;
	return -1;
}

bool kgen_program_overlaps(const kgen_program *prog)
{
	return kgen_first_consumer(prog->launches, prog->plan->nkernels) >= 0;
}
