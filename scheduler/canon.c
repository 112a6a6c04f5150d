/*
 * canon.c: the canonical text of a graph and its key.
 *
 * Tensor names and the listing order of independent ops must not matter.
 * Every op and tensor gets a color from its structure, refined over the
 * graph's edges in both directions (Weisfeiler-Lehman colors): an op's color
 * says what it computes from tensors of which colors, a tensor's color who
 * writes it and who reads it in which argument slot. The ops are then put
 * in a dependence order that picks, among the ready ops, the least color,
 * then the one whose tensors were named earliest; tensors are named t0, t1,
 * ... in order of first appearance. Only ops that no refinement can tell
 * apart fall back to their listing order, and those are interchangeable.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

typedef uint64_t color;

typedef struct op_slots {
	int n;
	int *tensors; /* distinct tensors of the op, target first */
} op_slots;

typedef struct canon {
	sched_graph *graph;
	op_slots *slots;
	color *op_color, *tensor_color;
	int *tensor_name; /* canonical number, -1 until named */
	int named;
	bool *done;
} canon;

static color mix(color h, color x)
{
	h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdULL;
}

static color hash_text(const char *s)
{
	color h = 0xcbf29ce484222325ULL;

	while (s && *s)
		h = (h ^ (unsigned char)*s++) * 0x100000001b3ULL;
	return h;
}

static void add_slot(const sched_node *access, void *user)
{
	op_slots *s = user;

	for (int i = 0; i < s->n; i++)
		if (s->tensors[i] == access->tensor)
			return;
	s->tensors[s->n++] = access->tensor;
}

static int count_accesses(const sched_node *node)
{
	int n = node->kind == SCHED_NODE_ACCESS;

	for (int i = 0; i < node->nargs; i++)
		n += count_accesses(node->args[i]);
	return n;
}

static int find_slots(canon *c, int i)
{
	const sched_op *op = &c->graph->ops[i];
	op_slots *s = &c->slots[i];

	s->tensors = sched_arena_alloc(&c->graph->arena,
				       (count_accesses(op->body) + 1) * sizeof(int));
	if (!s->tensors)
		return SCHED_ENOMEM;
	s->tensors[s->n++] = op->target;
	sched_node_each_access(op->body, add_slot, s);
	return SCHED_OK;
}

/* Names the op's variables i0.. (target) and r0.. (reducer). */
static char **canonical_var_names(const sched_op *op)
{
	char **names = calloc(op->nvars + 1, sizeof(char *));

	for (int v = 0; names && v < op->nvars; v++) {
		bool red = op->vars[v].reduction;

		names[v] = malloc(16);
		if (names[v])
			snprintf(names[v], 16, "%c%d", red ? 'r' : 'i',
				 red ? v - op->ntarget_vars : v);
	}
	return names;
}

static void free_names(char **names, int n)
{
	for (int i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
}

/* Op "i" of "graph" as text, its tensors named by "tensor_names" and its
 * variables canonically. */
static char *print_op(const sched_graph *graph, int i, char **tensor_names)
{
	const sched_op *op = &graph->ops[i];
	char **vars = canonical_var_names(op);
	sched_names names = {(const char *const *)tensor_names,
			     (const char *const *)vars, NULL};
	sched_buf buf = {0};

	if (vars)
		sched_op_print(&buf, op, &names);
	free_names(vars, op->nvars);
	return buf.str;
}

/* The op's text with its tensors named by slot: "@0[i0] = @1[i0] + 1". */
static color template_color(const canon *c, int i)
{
	char **slot_names = calloc(c->graph->ntensors, sizeof(char *));
	const op_slots *s = &c->slots[i];
	color h = 0;
	char *text;

	for (int k = 0; slot_names && k < s->n; k++)
		if ((slot_names[s->tensors[k]] = malloc(16)))
			snprintf(slot_names[s->tensors[k]], 16, "@%d", k);
	text = slot_names ? print_op(c->graph, i, slot_names) : NULL;
	h = hash_text(text);
	free(text);
	free_names(slot_names, c->graph->ntensors);
	return h;
}

static color tensor_decl_color(const sched_tensor *t)
{
	color h = mix(hash_text(sched_dtype_name(t->dtype)), t->role);

	for (int d = 0; d < t->rank; d++)
		h = mix(h, (color)t->shape[d]);
	return mix(h, (color)t->rank);
}

typedef struct tensor_use {
	int tensor;
	color use;
} tensor_use;

static int compare_uses(const void *a, const void *b)
{
	const tensor_use *x = a, *y = b;

	if (x->tensor != y->tensor)
		return x->tensor - y->tensor;
	return x->use < y->use ? -1 : x->use > y->use;
}

static int compare_colors(const void *a, const void *b)
{
	color x = *(const color *)a, y = *(const color *)b;

	return x < y ? -1 : x > y;
}

static int count_classes(const canon *c, color *scratch)
{
	const sched_graph *g = c->graph;
	int n = g->nops + g->ntensors, classes = 0;

	memcpy(scratch, c->op_color, g->nops * sizeof(color));
	memcpy(scratch + g->nops, c->tensor_color, g->ntensors * sizeof(color));
	qsort(scratch, n, sizeof(color), compare_colors);
	for (int i = 0; i < n; i++)
		classes += i == 0 || scratch[i] != scratch[i - 1];
	return classes;
}

/* One round: ops take in their tensors' colors, tensors their uses'. */
static void refine_round(canon *c, tensor_use *uses)
{
	const sched_graph *g = c->graph;
	int n = 0;

	for (int i = 0; i < g->nops; i++)
		for (int k = 0; k < c->slots[i].n; k++)
			uses[n++] = (tensor_use){c->slots[i].tensors[k],
						 mix(c->op_color[i], (color)k)};
	for (int i = 0; i < g->nops; i++)
		for (int k = 0; k < c->slots[i].n; k++)
			c->op_color[i] = mix(c->op_color[i],
					     c->tensor_color[c->slots[i].tensors[k]]);
	qsort(uses, n, sizeof(tensor_use), compare_uses);
	for (int u = 0; u < n; u++)
		c->tensor_color[uses[u].tensor] =
			mix(c->tensor_color[uses[u].tensor], uses[u].use);
}

/* Refines colors until the partition they induce stops changing. */
static int refine(canon *c)
{
	const sched_graph *g = c->graph;
	int total = 0, classes = -1, prev;
	tensor_use *uses;
	color *scratch = calloc(g->nops + g->ntensors, sizeof(color));

	for (int i = 0; i < g->nops; i++)
		total += c->slots[i].n;
	uses = calloc((size_t)total + 1, sizeof(tensor_use));
	if (!uses || !scratch) {
		free(uses);
		free(scratch);
		return SCHED_ENOMEM;
	}
	do {
		prev = classes;
		refine_round(c, uses);
		classes = count_classes(c, scratch);
	} while (classes != prev);
	free(uses);
	free(scratch);
	return SCHED_OK;
}

static bool is_ready(const canon *c, int i)
{
	const op_slots *s = &c->slots[i];

	for (int k = 1; k < s->n; k++) {
		int writer = c->graph->tensors[s->tensors[k]].writer;

		if (writer >= 0 && !c->done[writer])
			return false;
	}
	return true;
}

static int name_rank(const canon *c, int tensor)
{
	return c->tensor_name[tensor] < 0 ? INT32_MAX : c->tensor_name[tensor];
}

/* Negative if op "a" goes before op "b" among ready ops. */
static int compare_ready(const canon *c, int a, int b)
{
	if (c->op_color[a] != c->op_color[b])
		return c->op_color[a] < c->op_color[b] ? -1 : 1;
	for (int k = 1; k < c->slots[a].n && k < c->slots[b].n; k++) {
		int x = name_rank(c, c->slots[a].tensors[k]);
		int y = name_rank(c, c->slots[b].tensors[k]);

		if (x != y)
			return x < y ? -1 : 1;
	}
	return a - b;
}

static void name_tensor(canon *c, int tensor)
{
	if (c->tensor_name[tensor] < 0)
		c->tensor_name[tensor] = c->named++;
}

static void order_canonically(canon *c)
{
	sched_graph *g = c->graph;

	for (int n = 0; n < g->nops; n++) {
		int best = -1;

		for (int i = 0; i < g->nops; i++)
			if (!c->done[i] && is_ready(c, i) &&
			    (best < 0 || compare_ready(c, i, best) < 0))
				best = i;
		c->done[best] = true;
		g->order[n] = best;
		for (int k = 0; k < c->slots[best].n; k++)
			name_tensor(c, c->slots[best].tensors[k]);
	}
}

/* Inputs that no op reads are named last, by color. */
static void name_unread(canon *c)
{
	for (;;) {
		int best = -1;

		for (int t = 0; t < c->graph->ntensors; t++)
			if (c->tensor_name[t] < 0 &&
			    (best < 0 || c->tensor_color[t] < c->tensor_color[best]))
				best = t;
		if (best < 0)
			return;
		name_tensor(c, best);
	}
}

static void print_tensors(const canon *c, sched_buf *buf)
{
	for (int n = 0; n < c->graph->ntensors; n++)
		for (int t = 0; t < c->graph->ntensors; t++) {
			const sched_tensor *tensor = &c->graph->tensors[t];
			static const char *const roles[] = {"", " input", " output"};

			if (c->tensor_name[t] != n)
				continue;
			sched_buf_printf(buf, "tensor t%d %s [", n,
					 sched_dtype_name(tensor->dtype));
			for (int d = 0; d < tensor->rank; d++)
				sched_buf_printf(buf, "%s%lld", d ? ", " : "",
						 (long long)tensor->shape[d]);
			sched_buf_printf(buf, "]%s\n", roles[tensor->role]);
		}
}

/* Each tensor's canonical name, "t" and its number; NULL on failure. */
static char **canonical_tensor_names(const sched_graph *g)
{
	char **names = calloc((unsigned)g->ntensors, sizeof(char *));

	for (int t = 0; names && t < g->ntensors; t++) {
		if (!(names[t] = malloc(16))) {
			free_names(names, g->ntensors);
			return NULL;
		}
		snprintf(names[t], 16, "t%d", g->tensor_number[t]);
	}
	return names;
}

static int print_canonical(canon *c)
{
	sched_graph *g = c->graph;
	char **names = canonical_tensor_names(g);
	sched_buf buf = {0};
	int rc = SCHED_OK;

	sched_buf_printf(&buf, "tuned graph v1\noption allow_tf32 %d\n",
			 g->allow_tf32);
	print_tensors(c, &buf);
	for (int n = 0; names && n < g->nops; n++) {
		char *text = print_op(g, g->order[n], names);

		sched_buf_printf(&buf, "op %s\n", text ? text : "");
		rc = text ? rc : SCHED_ENOMEM;
		free(text);
	}
	free_names(names, g->ntensors);
	if (!names || !buf.str || rc < 0) {
		sched_buf_release(&buf);
		return SCHED_ENOMEM;
	}
	g->canonical = buf.str;
	sched_sha256_hex(buf.str, buf.len, g->key);
	return SCHED_OK;
}

static int color_everything(canon *c)
{
	const sched_graph *g = c->graph;
	int rc = SCHED_OK;

	for (int i = 0; i < g->nops && rc == SCHED_OK; i++)
		rc = find_slots(c, i);
	for (int i = 0; i < g->nops && rc == SCHED_OK; i++)
		c->op_color[i] = template_color(c, i);
	for (int t = 0; t < g->ntensors; t++) {
		c->tensor_color[t] = tensor_decl_color(&g->tensors[t]);
		c->tensor_name[t] = -1;
	}
	return rc == SCHED_OK ? refine(c) : rc;
}

/* Replaces graph->order by the canonical order, and sets the canonical
 * text and the key. */
int sched_graph_canonicalize(sched_graph *graph)
{
	sched_arena *a = &graph->arena;
	canon c = {
		.graph = graph,
		.slots = sched_arena_alloc(a, graph->nops * sizeof(op_slots)),
		.op_color = sched_arena_alloc(a, graph->nops * sizeof(color)),
		.tensor_color = sched_arena_alloc(a, graph->ntensors * sizeof(color)),
		.tensor_name = sched_arena_alloc(a, graph->ntensors * sizeof(int)),
		.done = sched_arena_alloc(a, graph->nops * sizeof(bool)),
	};
	int rc;

	if (!c.slots || !c.op_color || !c.tensor_color || !c.tensor_name || !c.done)
		return SCHED_ENOMEM;
	if ((rc = color_everything(&c)) < 0)
		return rc;
	order_canonically(&c);
	name_unread(&c);
	graph->tensor_number = c.tensor_name;
	return print_canonical(&c);
}

/* The tensor numbered "number" in the canonical form. */
static int numbered(const sched_graph *g, int number)
{
	for (int t = 0; t < g->ntensors; t++)
		if (g->tensor_number[t] == number)
			return t;
	return -1;
}

static json_t *tensor_json(const sched_tensor *t)
{
	static const char *const roles[] = {NULL, "input", "output"};
	json_t *shape = json_array(), *decl;

	for (int d = 0; d < t->rank; d++)
		json_array_append_new(shape, json_integer(t->shape[d]));
	decl = json_pack("{s:o, s:s}", "shape", shape, "dtype", sched_dtype_name(t->dtype));
	if (decl && roles[t->role])
		json_object_set_new(decl, "role", json_string(roles[t->role]));
	return decl;
}

/* The tensors in canonical order, by their canonical names. */
static json_t *canonical_tensors(const sched_graph *g, char **names)
{
	json_t *tensors = json_object();

	for (int n = 0; tensors && n < g->ntensors; n++) {
		int t = numbered(g, n);

		if (json_object_set_new(tensors, names[t], tensor_json(&g->tensors[t])) < 0) {
			json_decref(tensors);
			return NULL;
		}
	}
	return tensors;
}

static json_t *canonical_ops(const sched_graph *g, char **names)
{
	json_t *ops = json_array();

	for (int n = 0; ops && n < g->nops; n++) {
		char *text = print_op(g, g->order[n], names);

		if (!text || json_array_append_new(ops, json_string(text)) < 0) {
			json_decref(ops);
			ops = NULL;
		}
		free(text);
	}
	return ops;
}

char *sched_graph_canonical_json(const sched_graph *g)
{
	char **names = canonical_tensor_names(g);
	json_t *root = names ? json_pack("{s:i, s:o*, s:o*}", "version", 1,
					 "tensors", canonical_tensors(g, names),
					 "ops", canonical_ops(g, names)) : NULL;
	char *text = NULL;

	if (root && g->name)
		json_object_set_new(root, "name", json_string(g->name));
	if (root && g->allow_tf32)
		json_object_set_new(root, "options", json_pack("{s:b}", "allow_tf32", 1));
	if (root && json_object_get(root, "tensors") && json_object_get(root, "ops"))
		text = json_dumps(root, JSON_INDENT(1));
	json_decref(root);
	free_names(names, g->ntensors);
	return text;
}

int sched_tensor_canonical_number(const sched_graph *g, int t)
{
	return g->tensor_number[t];
}

bool sched_canonical_distance(const char *a, const char *b, double *distance)
{
	*distance = 0;
	while (*a && *b) {
		char *end_a, *end_b;
		double x, y;

		if (!isdigit((unsigned char)*a) || !isdigit((unsigned char)*b)) {
			if (*a++ != *b++)
				return false;
			continue;
		}
		x = strtod(a, &end_a);
		y = strtod(b, &end_b);
		*distance += x > 0 && y > 0 ? fabs(log(x / y)) : x != y;
		a = end_a;
		b = end_b;
	}
	return *a == *b;
}
