/*
 * options.c: tuned's settings: defaults, then the configuration file, then
 * the command line. Both spell a setting the same way: "--jobs 2" on the
 * command line is "jobs = 2" in the file.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

static const char usage[] =
	"usage: tuned [options]\n"
	"\n"
	"  --gpu N              names the default socket gpuN.sock (default 0); the\n"
	"                       GPU driven is CUDA's device 0 of those it sees:\n"
	"                       choose it with CUDA_VISIBLE_DEVICES (as the unit\n"
	"                       does)\n"
	"  --backend B          auto, cuda or cpu (default auto: cuda where a GPU\n"
	"                       is usable)\n"
	"  --socket PATH        where clients connect (default\n"
	"                       /run/tuned-gpu/gpuN.sock for root,\n"
	"                       $XDG_RUNTIME_DIR/tuned/gpuN.sock otherwise)\n"
	"  --cache PATH         the function cache (default\n"
	"                       /var/lib/tuned-gpu/cache.db for root,\n"
	"                       $XDG_STATE_HOME/tuned/cache.db otherwise), or a\n"
	"                       PostgreSQL database: postgresql://... or a\n"
	"                       conninfo string\n"
	"  --config FILE        settings as 'name = value' lines, names as here\n"
	"  --log FILE           log to FILE (reopened on SIGHUP) instead of stderr\n"
	"  --log-level L        error, warning, info or debug (default info)\n"
	"  --jobs N             jobs searched at once, their generations interleaved\n"
	"                       (default 4)\n"
	"  --lease S            on a PostgreSQL cache shared by several daemons:\n"
	"                       how long a claimed job stays this daemon's without\n"
	"                       its renewal (renewed every third of it; default 30)\n"
	"  --compile-workers N  processes compiling candidates while one measures\n"
	"                       them (default: one per core)\n"
	"  --allow-uid UID      also let this user connect (name or number; "
	"repeatable)\n"
	"  --allow-gid GID      also let members of this group connect, as primary\n"
	"                       or supplementary group (repeatable)\n"
	"  --admin-gid GID      members of this group may connect, cancel others'\n"
	"                       jobs, prune, import and read the quarantine, as\n"
	"                       root and tuned's own user may (repeatable)\n"
	"  --max-frame BYTES    the longest request line (default 16777216)\n"
	"  --max-clients N      clients connected at once (default 256)\n"
	"  --max-clients-per-uid N\n"
	"                       clients of one uid at once (default: a quarter of\n"
	"                       --max-clients)\n"
	"  --max-in-flight N    requests in flight per client (default 64)\n"
	"  --max-unread BYTES   close a client whose unread replies pass this\n"
	"                       (default 67108864)\n"
	"  --hello-timeout S    close connections silent this long before hello\n"
	"                       (default 10)\n"
	"  --idle-timeout S     close connections idle this long after hello: no\n"
	"                       request, none in flight, no job watched (default\n"
	"                       300; 0: never)\n"
	"  --max-graph-bytes BYTES\n"
	"                       the longest graph.json a submit may carry\n"
	"                       (default 1048576)\n"
	"  --max-graph-ops N    the most ops in one graph (default 1024)\n"
	"  --max-tensor-elements N\n"
	"                       the most elements of one tensor (default 2^32)\n"
	"  --max-graph-elements N\n"
	"                       the most elements of a graph's tensors together\n"
	"                       (default 2^34)\n"
	"  -h, --help           show this help\n"
	"  --version            show the version\n";

typedef int (*setter)(tuned_options *o, const char *value);

static int set_string(char *field, size_t size, const char *value)
{
	if (strlen(value) >= size || !*value)
		return -1;
	memcpy(field, value, strlen(value) + 1);
	return 0;
}

/* A whole number in [lo, hi]. */
static int parse_number(const char *value, long long lo, long long hi, long long *out)
{
	char *end;

	errno = 0;
	*out = strtoll(value, &end, 10);
	return errno || *end || end == value || *out < lo || *out > hi ? -1 : 0;
}

static int set_gpu(tuned_options *o, const char *v)
{
	long long n;
	int rc = parse_number(v, 0, 1023, &n);

	o->gpu = (int)n;
	return rc;
}

static int set_backend(tuned_options *o, const char *v)
{
	if (strcmp(v, "auto") && strcmp(v, "cuda") && strcmp(v, "cpu"))
		return -1;
	return set_string(o->backend, sizeof(o->backend), v);
}

static int set_socket(tuned_options *o, const char *v)
{
	return set_string(o->socket_path, sizeof(o->socket_path), v);
}

static int set_cache(tuned_options *o, const char *v)
{
	return set_string(o->cache_path, sizeof(o->cache_path), v);
}

static int set_log(tuned_options *o, const char *v)
{
	return set_string(o->log_path, sizeof(o->log_path), v);
}

static int set_config(tuned_options *o, const char *v)
{
	return set_string(o->config_path, sizeof(o->config_path), v);
}

static int set_log_level(tuned_options *o, const char *v)
{
	return tuned_log_level_parse(v, &o->log_level);
}

static int set_jobs(tuned_options *o, const char *v)
{
	long long n;
	int rc = parse_number(v, 1, 64, &n);

	o->jobs = (int)n;
	return rc;
}

static int set_compile_workers(tuned_options *o, const char *v)
{
	long long n;
	int rc = parse_number(v, 1, 256, &n);

	o->compile_workers = (int)n;
	return rc;
}

static int set_allow_uid(tuned_options *o, const char *v)
{
	struct passwd *pw = getpwnam(v);
	long long n;

	if (o->nallow_uids == TUNED_MAX_ALLOWED)
		return -1;
	if (pw)
		n = pw->pw_uid;
	else if (parse_number(v, 0, 4294967294LL, &n) < 0)
		return -1;
	o->allow_uids[o->nallow_uids++] = (uid_t)n;
	return 0;
}

/* Adds the group named or numbered "v" to "gids" (at most
 * TUNED_MAX_ALLOWED). */
static int add_gid(gid_t *gids, int *n, const char *v)
{
	struct group *gr = getgrnam(v);
	long long gid;

	if (*n == TUNED_MAX_ALLOWED)
		return -1;
	if (gr)
		gid = gr->gr_gid;
	else if (parse_number(v, 0, 4294967294LL, &gid) < 0)
		return -1;
	gids[(*n)++] = (gid_t)gid;
	return 0;
}

static int set_allow_gid(tuned_options *o, const char *v)
{
	return add_gid(o->allow_gids, &o->nallow_gids, v);
}

static int set_admin_gid(tuned_options *o, const char *v)
{
	return add_gid(o->admin_gids, &o->nadmin_gids, v);
}

static int set_max_frame(tuned_options *o, const char *v)
{
	long long n;
	int rc = parse_number(v, 1024, 1LL << 30, &n);

	o->max_frame = (size_t)n;
	return rc;
}

static int set_max_unread(tuned_options *o, const char *v)
{
	long long n;
	int rc = parse_number(v, 4096, 1LL << 34, &n);

	o->max_unread = (size_t)n;
	return rc;
}

static int set_max_clients(tuned_options *o, const char *v)
{
	long long n;
	int rc = parse_number(v, 1, 65536, &n);

	o->max_clients = (int)n;
	return rc;
}

static int set_max_clients_per_uid(tuned_options *o, const char *v)
{
	long long n;
	int rc = parse_number(v, 1, 65536, &n);

	o->max_clients_per_uid = (int)n;
	return rc;
}

static int set_max_in_flight(tuned_options *o, const char *v)
{
	long long n;
	int rc = parse_number(v, 1, 65536, &n);

	o->max_in_flight = (int)n;
	return rc;
}

/* A count in [lo, hi] into "field". */
static int set_count(int64_t *field, const char *v, long long lo, long long hi)
{
	long long n;
	int rc = parse_number(v, lo, hi, &n);

	*field = n;
	return rc;
}

static int set_max_graph_bytes(tuned_options *o, const char *v)
{
	return set_count(&o->max_graph_bytes, v, 1024, 1LL << 30);
}

static int set_max_graph_ops(tuned_options *o, const char *v)
{
	return set_count(&o->max_graph_ops, v, 1, 4096);
}

static int set_max_tensor_elements(tuned_options *o, const char *v)
{
	return set_count(&o->max_tensor_elements, v, 1, 1LL << 40);
}

static int set_max_graph_elements(tuned_options *o, const char *v)
{
	return set_count(&o->max_graph_elements, v, 1, 1LL << 50);
}

static int set_hello_timeout(tuned_options *o, const char *v)
{
	char *end;

	o->hello_timeout_s = strtod(v, &end);
	return *end || end == v || o->hello_timeout_s <= 0 ? -1 : 0;
}

static int set_idle_timeout(tuned_options *o, const char *v)
{
	char *end;

	o->idle_timeout_s = strtod(v, &end);
	return *end || end == v || !(o->idle_timeout_s >= 0) ||
	       o->idle_timeout_s > 1e9 ? -1 : 0;
}

static int set_lease(tuned_options *o, const char *v)
{
	char *end;

	o->lease_s = strtod(v, &end);
	return *end || end == v || !(o->lease_s >= 0.1) || o->lease_s > 86400 ? -1 : 0;
}

static const struct {
	const char *name;
	setter set;
	const char *expects;
} settings[] = {
	{"gpu", set_gpu, "a GPU number"},
	{"backend", set_backend, "auto, cuda or cpu"},
	{"socket", set_socket, "a path"},
	{"cache", set_cache, "a path"},
	{"config", set_config, "a path"},
	{"log", set_log, "a path"},
	{"log-level", set_log_level, "error, warning, info or debug"},
	{"jobs", set_jobs, "a number from 1 to 64"},
	{"lease", set_lease, "a number of seconds from 0.1 to 86400"},
	{"compile-workers", set_compile_workers, "a number from 1 to 256"},
	{"allow-uid", set_allow_uid, "a user name or uid (at most 16)"},
	{"allow-gid", set_allow_gid, "a group name or gid (at most 16)"},
	{"admin-gid", set_admin_gid, "a group name or gid (at most 16)"},
	{"max-frame", set_max_frame, "a byte count from 1024 to 2^30"},
	{"max-unread", set_max_unread, "a byte count from 4096 to 2^34"},
	{"max-clients", set_max_clients, "a number from 1 to 65536"},
	{"max-clients-per-uid", set_max_clients_per_uid, "a number from 1 to 65536"},
	{"max-in-flight", set_max_in_flight, "a number from 1 to 65536"},
	{"hello-timeout", set_hello_timeout, "a positive number of seconds"},
	{"idle-timeout", set_idle_timeout, "a number of seconds, 0 for none"},
	{"max-graph-bytes", set_max_graph_bytes, "a byte count from 1024 to 2^30"},
	{"max-graph-ops", set_max_graph_ops, "a number from 1 to 4096"},
	{"max-tensor-elements", set_max_tensor_elements, "a number from 1 to 2^40"},
	{"max-graph-elements", set_max_graph_elements, "a number from 1 to 2^50"},
};

#define NSETTINGS ((int)(sizeof(settings) / sizeof(settings[0])))

/* Applies "name = value" from "where" (the command line, or file:line). */
static int apply(tuned_options *o, const char *name, const char *value,
		 const char *where)
{
	for (int i = 0; i < NSETTINGS; i++) {
		if (strcmp(settings[i].name, name))
			continue;
		if (settings[i].set(o, value) == 0)
			return 0;
		fprintf(stderr, "tuned: %s: '%s' wants %s, not '%s'\n", where, name,
			settings[i].expects, value);
		return -1;
	}
	fprintf(stderr, "tuned: %s: unknown setting '%s' (see tuned --help)\n",
		where, name);
	return -1;
}

static char *trim(char *s)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && strchr(" \t\r\n", end[-1]))
		*--end = 0;
	return s;
}

/* Reads "name = value" lines; '#' starts a comment. */
static int read_config(tuned_options *o, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[1024], where[320];
	int n = 0, rc = 0;

	if (!f) {
		fprintf(stderr, "tuned: cannot read the configuration '%s': %s\n",
			path, strerror(errno));
		return -1;
	}
	while (rc == 0 && fgets(line, sizeof(line), f)) {
		char *text = trim(line), *eq;

		n++;
		text[strcspn(text, "#")] = 0;
		if (!*trim(text))
			continue;
		snprintf(where, sizeof(where), "%s:%d", path, n);
		if (!(eq = strchr(text, '='))) {
			fprintf(stderr, "tuned: %s: expected 'name = value'\n", where);
			rc = -1;
			break;
		}
		*eq = 0;
		rc = strcmp(trim(text), "config") ? apply(o, trim(text), trim(eq + 1), where)
						  : (fprintf(stderr, "tuned: %s: 'config' "
							     "cannot be nested\n", where), -1);
	}
	fclose(f);
	return rc;
}

/* The default place of "file" for this user: a system folder for root,
 * the XDG folder (or its usual fallback under HOME) otherwise. */
static void default_path(char *out, size_t size, const char *system_dir,
			 const char *xdg_var, const char *fallback, const char *file)
{
	const char *xdg = getenv(xdg_var), *home = getenv("HOME");

	if (geteuid() == 0)
		snprintf(out, size, "%s/%s", system_dir, file);
	else if (xdg && *xdg)
		snprintf(out, size, "%s/tuned/%s", xdg, file);
	else if (fallback && home && *home)
		snprintf(out, size, "%s/%s/tuned/%s", home, fallback, file);
	else
		snprintf(out, size, "/tmp/tuned-%d/%s", (int)getuid(), file);
}

static void set_defaults(tuned_options *o)
{
	*o = (tuned_options){.backend = "auto",
			     .log_level = TUNED_INFO,
			     .jobs = 4,
			     .lease_s = 30,
			     .max_frame = 16u << 20,
			     .max_unread = 64u << 20,
			     .max_clients = 256,
			     .max_in_flight = 64,
			     .hello_timeout_s = 10,
			     .idle_timeout_s = 300,
			     .max_graph_bytes = 1 << 20,
			     .max_graph_ops = 1024,
			     .max_tensor_elements = INT64_C(1) << 32,
			     .max_graph_elements = INT64_C(1) << 34};
}

/* The defaults that depend on other settings: the paths, and the
 * connections one uid may hold, a quarter of --max-clients (at least 1):
 * whoever fills their share leaves three quarters to the others. */
static void fill_defaults(tuned_options *o)
{
	char file[32];

	snprintf(file, sizeof(file), "gpu%d.sock", o->gpu);
	if (!o->socket_path[0])
		default_path(o->socket_path, sizeof(o->socket_path), "/run/tuned-gpu",
			     "XDG_RUNTIME_DIR", NULL, file);
	if (!o->cache_path[0])
		default_path(o->cache_path, sizeof(o->cache_path), "/var/lib/tuned-gpu",
			     "XDG_STATE_HOME", ".local/state", "cache.db");
	if (!o->max_clients_per_uid)
		o->max_clients_per_uid = o->max_clients / 4 > 0 ? o->max_clients / 4 : 1;
}

static const char *option_name(const char *arg)
{
	return !strncmp(arg, "--", 2) ? arg + 2 : NULL;
}

/* The configuration file named on the command line, read before the rest
 * of the command line so that the command line wins. */
static int read_named_config(int argc, char **argv, tuned_options *o)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--config"))
			return apply(o, "config", argv[i + 1], "command line") < 0 ? -1 :
			       read_config(o, o->config_path);
	return 0;
}

int tuned_options_parse(int argc, char **argv, tuned_options *o)
{
	set_defaults(o);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return fputs(usage, stdout), 1;
		if (!strcmp(argv[i], "--version"))
			return puts("tuned " TUNED_VERSION), 1;
	}
	if (read_named_config(argc, argv, o) < 0)
		return -1;
	for (int i = 1; i < argc; i++) {
		const char *name = option_name(argv[i]);

		if (!name || i + 1 >= argc) {
			fprintf(stderr, "tuned: unexpected '%s' (see tuned --help)\n", argv[i]);
			return -1;
		}
		if (apply(o, name, argv[++i], "command line") < 0)
			return -1;
	}
	fill_defaults(o);
	return 0;
}
