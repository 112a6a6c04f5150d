/*
 * pg_util.c: statements, transactions and results on PostgreSQL, for the
 * other pg_*.c files.
 *
 * Every parameter goes as text (bytes as binary) and every result comes
 * as text: numbers are printed and read back exactly ("%.17g"; the server
 * prints the shortest exact form).
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "cache_int.h"

void pg_text(pg_args *a, const char *text)
{
	assert(a->n < PG_ARGS_MAX);
	a->values[a->n] = text;
	a->lengths[a->n] = 0;
	a->formats[a->n++] = 0;
}

void pg_int(pg_args *a, int64_t value)
{
	assert(a->n < PG_ARGS_MAX);
	snprintf(a->numbers[a->n], sizeof(a->numbers[0]), "%lld", (long long)value);
	pg_text(a, a->numbers[a->n]);
}

void pg_real(pg_args *a, double value)
{
	assert(a->n < PG_ARGS_MAX);
	if (isnan(value))
		return pg_text(a, NULL);
	snprintf(a->numbers[a->n], sizeof(a->numbers[0]), "%.17g", value);
	pg_text(a, a->numbers[a->n]);
}

void pg_bytes(pg_args *a, const void *bytes, size_t len)
{
	assert(a->n < PG_ARGS_MAX);
	a->values[a->n] = bytes;
	a->lengths[a->n] = (int)len;
	a->formats[a->n++] = 1;
}

/* The cache_code of a failed result, by its SQLSTATE class. */
static int code_of(const char *state)
{
	if (!state)
		return CACHE_EIO; /* no answer: the connection */
	if (strncmp(state, "23", 2) == 0 || strncmp(state, "22", 2) == 0)
		return CACHE_EINVAL;
	if (strncmp(state, "40", 2) == 0 || strcmp(state, "55P03") == 0)
		return CACHE_EBUSY;
	if (strncmp(state, "08", 2) == 0 || strncmp(state, "53", 2) == 0 ||
	    strncmp(state, "57", 2) == 0 || strncmp(state, "58", 2) == 0)
		return CACHE_EIO;
	return CACHE_ESQLITE;
}

/* The server's message in one line, without its trailing newline. */
static void one_line(const char *message, char *out, size_t size)
{
	snprintf(out, size, "%s", message && *message ? message : "no answer");
	for (char *p = out; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = *(p + 1) ? ' ' : 0;
}

/* Without parameters, "sql" may hold several statements. */
static PGresult *exec(PGconn *conn, const char *sql, const pg_args *a)
{
	return a ? PQexecParams(conn, sql, a->n, NULL, a->values, a->lengths,
				a->formats, 0) : PQexec(conn, sql);
}

/* Makes "conn" again, with the settings it was opened with; the writer
 * takes the owner's lock again, which its lost session held. CACHE_EIO
 * with the server's cause when the server cannot be reached. */
static int reconnect(cache *c, PGconn *conn, const char *what, cache_error *err)
{
	char message[400];

	PQreset(conn);
	if (PQstatus(conn) != CONNECTION_OK) {
		one_line(PQerrorMessage(conn), message, sizeof(message));
		cache_set_error(err, CACHE_EIO, "%s: the connection was lost and "
				"cannot be made again: %s (PostgreSQL cache %s)",
				what, message, c->path);
		return CACHE_EIO;
	}
	return 0;
}

/* "err" for the failed result "r" (NULL: nothing came back, for the
 * connection failed or memory ran out); returns its code. */
static int failure(cache *c, PGconn *conn, PGresult *r, const char *what,
		   cache_error *err)
{
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	const char *constraint;
	char message[400];
	int rc;

	one_line(r ? PQresultErrorMessage(r) : PQerrorMessage(conn), message,
		 sizeof(message));
	if (state && strcmp(state, "23514") == 0) { /* as SQLite says it */
		constraint = PQresultErrorField(r, PG_DIAG_CONSTRAINT_NAME);
		snprintf(message, sizeof(message), "CHECK constraint failed: %s",
			 constraint ? constraint : "(unnamed)");
	}
	if (r)
		rc = code_of(state);
	else
		rc = PQstatus(conn) == CONNECTION_OK ? CACHE_ENOMEM : CACHE_EIO;
	cache_set_error(err, rc, "%s: %s (PostgreSQL cache %s)", what, message,
			c->path);
	return rc;
}

int pg_run(cache *c, PGconn *conn, const char *sql, const pg_args *a,
	   PGresult **res, const char *what, cache_error *err)
{
	bool outside = PQtransactionStatus(conn) == PQTRANS_IDLE;
	PGresult *r = NULL;
	int status, rc = 0;

	if (res)
		*res = NULL;
	if (PQstatus(conn) == CONNECTION_BAD)
		rc = reconnect(c, conn, what, err);
	if (rc)
		return rc;
	r = exec(conn, sql, a);
	status = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	/* The server restarted, or ended this session: a statement outside a
	 * transaction (a read, or the BEGIN of a write) runs again once on a
	 * new connection; within one, the transaction is lost with it. */
	if (status == PGRES_FATAL_ERROR && outside &&
	    PQstatus(conn) == CONNECTION_BAD) {
		PQclear(r);
		r = NULL;
		rc = reconnect(c, conn, what, err);
		if (rc)
			return rc;
		r = exec(conn, sql, a);
		status = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	}
	if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
		if (res)
			*res = r;
		else
			PQclear(r);
		return 0;
	}
	rc = failure(c, conn, r, what, err);
	PQclear(r);
	return rc;
}

int pg_change(cache *c, const char *sql, const pg_args *a, const char *what,
	      cache_error *err)
{
	PGresult *res = NULL;
	int rc = pg_run(c, c->pg_writer, sql, a, &res, what, err);

	if (rc == 0)
		rc = atoi(PQcmdTuples(res));
	PQclear(res);
	return rc;
}

int pg_begin(cache *c, cache_error *err)
{
	return pg_run(c, c->pg_writer, "BEGIN", NULL, NULL, "cannot begin a write",
		      err);
}

int pg_end(cache *c, int rc, cache_error *err)
{
	if (rc == 0)
		rc = pg_run(c, c->pg_writer, "COMMIT", NULL, NULL, "cannot commit",
			    err);
	if (rc != 0 && PQtransactionStatus(c->pg_writer) != PQTRANS_IDLE)
		pg_run(c, c->pg_writer, "ROLLBACK", NULL, NULL, "cannot roll back",
		       NULL);
	return rc;
}

const char *pg_value(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

int64_t pg_int_at(const PGresult *res, int row, int col)
{
	const char *text = pg_value(res, row, col);

	return text ? strtoll(text, NULL, 10) : 0;
}

double pg_real_at(const PGresult *res, int row, int col)
{
	const char *text = pg_value(res, row, col);

	return text ? strtod(text, NULL) : NAN;
}

/* The server prints a float8 of integral value without a point: under
 * these keys it is made a real again, as SQLite's reads give it. */
static void make_reals(json_t *value)
{
	static const char *const reals[] = {
		"median_ms", "spread_ms", "time_limit_s",
	};
	const char *key;
	json_t *item;
	size_t i;

	if (json_is_array(value)) {
		json_array_foreach(value, i, item)
			make_reals(item);
		return;
	}
	json_object_foreach(value, key, item) {
		if (json_is_array(item) || json_is_object(item))
			make_reals(item);
		for (i = 0; json_is_integer(item) && i < sizeof(reals) / sizeof(*reals); i++)
			if (strcmp(key, reals[i]) == 0) {
				/* replaces "item", which is then freed */
				json_object_set_new(value, key, json_real(
					(double)json_integer_value(item)));
				break;
			}
	}
}

json_t *pg_json_at(const PGresult *res, int row, int col)
{
	const char *text = pg_value(res, row, col);
	json_t *value = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;

	if (value)
		make_reals(value);
	return value;
}
