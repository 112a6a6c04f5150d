/*
 * pg_fixture.c: the private PostgreSQL server of a daemon test.
 */
#include <criterion/criterion.h>

#include "pg_fixture.h"

pg_server pg_fixture;

void pg_fixture_start(void)
{
	int rc = pg_server_start(&pg_fixture);

	if (rc > 0)
		cr_skip_test("%s", pg_fixture.why);
	cr_assert_eq(rc, 0, "%s", pg_fixture.why);
}

void pg_fixture_stop(void)
{
	pg_server_stop(&pg_fixture);
}
