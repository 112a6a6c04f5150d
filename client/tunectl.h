/*
 * tunectl.h: the commands of tunectl, one file each.
 */
#ifndef TUNECTL_H
#define TUNECTL_H

#include <jansson.h>

#define EXIT_INVALID 1
#define EXIT_USAGE 2

/* Prints "obj" (taken) indented, on stdout. */
void tunectl_print_json(json_t *obj);

/* tunectl run FILE [options]: compile, verify and time a plan in a worker
 * process. "argv" holds what follows "run". */
int tunectl_run(int argc, char **argv);

#endif
