/*
 * pg_fixture.h: the private PostgreSQL server (pg_server.h) of a daemon
 * test, as criterion's .init and .fini: the test is skipped on a machine
 * with no PostgreSQL, and fails where the server does not start.
 */
#ifndef PG_FIXTURE_H
#define PG_FIXTURE_H

#include "pg_server.h"

extern pg_server pg_fixture;

void pg_fixture_start(void);
void pg_fixture_stop(void);

#endif
