#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph_builder.h"

static json_t *parse_shape(const char *text)
{
	json_t *shape = json_array();
	char *copy = strdup(text), *save = NULL;

	if (strcmp(text, "-"))
		for (char *dim = strtok_r(copy, ",", &save); dim;
		     dim = strtok_r(NULL, ",", &save))
			json_array_append_new(shape, json_integer(atoll(dim)));
	free(copy);
	return shape;
}

static void add_tensor(json_t *tensors, char *decl)
{
	char name[64], dtype[16], shape[128], role[8] = "";
	json_t *t;

	if (sscanf(decl, " %63s %15s %127s %7s", name, dtype, shape, role) < 3)
		return;
	t = json_pack("{s:o, s:s}", "shape", parse_shape(shape), "dtype", dtype);
	if (!strcmp(role, "in"))
		json_object_set_new(t, "role", json_string("input"));
	else if (!strcmp(role, "out"))
		json_object_set_new(t, "role", json_string("output"));
	json_object_set_new(tensors, name, t);
}

char *build_graph(const char *tensors, const char *const *ops)
{
	json_t *root = json_object(), *decls = json_object(), *list = json_array();
	char *copy = strdup(tensors), *save = NULL, *text;

	for (char *decl = strtok_r(copy, ";", &save); decl;
	     decl = strtok_r(NULL, ";", &save))
		add_tensor(decls, decl);
	for (int i = 0; ops[i]; i++)
		json_array_append_new(list, json_string(ops[i]));
	json_object_set_new(root, "version", json_integer(1));
	json_object_set_new(root, "name", json_string("test"));
	json_object_set_new(root, "tensors", decls);
	json_object_set_new(root, "ops", list);
	text = json_dumps(root, JSON_PRESERVE_ORDER);
	json_decref(root);
	free(copy);
	return text;
}

int load_graph(const char *tensors, const char *const *ops,
	       sched_graph **graph, sched_error *err)
{
	char *text = build_graph(tensors, ops);
	int rc = sched_graph_read_string(text, graph, err);

	free(text);
	return rc;
}

int load_graph_tf32(const char *tensors, const char *const *ops,
		    sched_graph **graph, sched_error *err)
{
	char *text = build_graph(tensors, ops);
	json_t *root = json_loads(text, 0, NULL);
	int rc;

	free(text);
	json_object_set_new(root, "options", json_pack("{s:b}", "allow_tf32", 1));
	text = json_dumps(root, JSON_PRESERVE_ORDER);
	rc = sched_graph_read_string(text, graph, err);
	free(text);
	json_decref(root);
	return rc;
}

int load_example(const char *name, sched_graph **graph, sched_error *err)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/examples/%s.json", getenv("TUNED_SOURCE_ROOT"),
		 name);
	return sched_graph_read_file(path, graph, err);
}
