/*
 * writer.h: the one thread that writes the daemon's cache (writer.c).
 *
 * The loop thread never writes the cache and never waits for a write: it
 * hands each write to the writer thread, which owns the cache's writer
 * connection (cache_hand_over) and runs the writes one at a time in the
 * order they were handed. When a write is over, its "done" runs back on
 * the loop thread, in the same order; a reply that promises something is
 * stored (a submit, a cancel, an import) is sent from there, after the
 * commit. A big graph's write (tens of milliseconds) and every commit's
 * fsync so stall no client. After each write it marks bad the versions
 * that reads found failing their checksum (cache_mark_found_bad).
 */
#ifndef TUNED_WRITER_H
#define TUNED_WRITER_H

#include <uv.h>

#include "cache.h"

typedef struct tuned_writer tuned_writer;

/* Runs on the writer thread with the cache; may be NULL (the write only
 * orders its "done" after the writes handed before it). */
typedef void tuned_write_fn(cache *c, void *data);
/* Runs on the loop thread once the write is over; may be NULL. */
typedef void tuned_write_done(void *data);

/* Starts the writer thread on "loop" and hands it "c": from then on only
 * the writer thread writes "c". NULL when the thread cannot start. */
tuned_writer *tuned_writer_start(uv_loop_t *loop, cache *c);

/* Hands a write to the writer thread (from the loop thread). 0, or
 * -ENOMEM, or -ESHUTDOWN once the thread has ended (then nothing runs). */
int tuned_write(tuned_writer *w, tuned_write_fn *run, tuned_write_done *done,
		void *data);

/* From the loop thread, when the daemon stops: once every write handed
 * (including those their "done" hands on) is over and done, the thread
 * ends and the loop is left free to end. */
void tuned_writer_close(tuned_writer *w);

/* After the loop ended: frees "w" and gives the cache back to the caller,
 * which becomes its owner again (NULL does nothing). */
void tuned_writer_free(tuned_writer *w, cache *c);

#endif
