/*
 * tunectl.h: the commands of tunectl, one file each.
 */
#ifndef TUNECTL_H
#define TUNECTL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#define EXIT_INVALID 1
#define EXIT_USAGE 2

/* The whole file at "path" (caller frees), or NULL. */
char *tunectl_read_text(const char *path);

/* Prints "obj" (taken) indented, on stdout. */
void tunectl_print_json(json_t *obj);

/* explain_fusion.c: adds to "obj" (tunectl explain's JSON) what the fusion
 * planner makes of "graph": "dependences" (each with its width), "merges"
 * (the greedy walk's steps), "groups" and "plan"; with "dot_path", writes
 * them as a Graphviz file there. -1 with the reason in "why" on failure. */
struct sched_graph;
int tunectl_explain_fusion(const struct sched_graph *graph, json_t *obj,
			   const char *dot_path, char *why, size_t size);
/* Prints those keys of "obj" as text. */
void tunectl_print_fusion(json_t *obj);

/* tunectl run FILE [options]: compile, verify and time a plan in a worker
 * process. "argv" holds what follows "run". */
int tunectl_run(int argc, char **argv);

/* tunectl sources FILE --out DIR [options]: a plan's code, and for cuda
 * its PTX and cubin, written without a GPU. */
int tunectl_sources(int argc, char **argv);

/* The commands that talk to a daemon (service.c): submit, status, list,
 * wait, cancel, fetch, stats, cache ls|show|prune. */
bool tunectl_is_service(const char *command);
/* Runs one; "argv" starts with the command's name ("cache" and its
 * subcommand for the cache). Returns the exit status. */
int tunectl_service(int argc, char **argv);

#endif
