/*
 * writer.c: the cache's writer thread, fed by the loop through a queue;
 * what it finished goes back through a second queue and a uv_async
 * wake-up, as the runner's results do.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "writer.h"

typedef struct write_task {
	tuned_write_fn *run;
	tuned_write_done *done;
	void *data;
	struct write_task *next;
} write_task;

/* A queue of tasks, oldest first. */
typedef struct task_list {
	write_task *head, **tail;
} task_list;

struct tuned_writer {
	cache *cache;
	uv_thread_t thread;
	uv_mutex_t lock;   /* guards todo, finished and quit */
	uv_cond_t wake;    /* todo got a task, or quit was set */
	uv_async_t async;  /* finished got a task */
	task_list todo;    /* handed, not yet run */
	task_list finished; /* run, "done" not yet called */
	bool quit;
	/* the loop thread's */
	int pending;       /* handed, "done" not yet called */
	bool closing, closed;
};

static void list_init(task_list *l)
{
	l->head = NULL;
	l->tail = &l->head;
}

static void list_append(task_list *l, write_task *t)
{
	t->next = NULL;
	*l->tail = t;
	l->tail = &t->next;
}

static write_task *list_pop(task_list *l)
{
	write_task *t = l->head;

	if (t && !(l->head = t->next))
		l->tail = &l->head;
	return t;
}

static void writer_thread(void *arg)
{
	tuned_writer *w = arg;
	write_task *t;

	uv_mutex_lock(&w->lock);
	while (!w->quit) {
		if (!(t = list_pop(&w->todo))) {
			uv_cond_wait(&w->wake, &w->lock);
			continue;
		}
		uv_mutex_unlock(&w->lock);
		if (t->run)
			t->run(w->cache, t->data);
		if (cache_found_bad_waiting(w->cache))
			cache_mark_found_bad(w->cache, NULL);
		uv_mutex_lock(&w->lock);
		list_append(&w->finished, t);
		uv_async_send(&w->async);
	}
	uv_mutex_unlock(&w->lock);
}

static void stop_thread(tuned_writer *w)
{
	uv_mutex_lock(&w->lock);
	w->quit = true;
	uv_cond_signal(&w->wake);
	uv_mutex_unlock(&w->lock);
	uv_thread_join(&w->thread);
}

/* Closing, and every write handed is over: the thread ends and the
 * wake-up goes, so that the loop can end. */
static void end_if_idle(tuned_writer *w)
{
	if (!w->closing || w->pending > 0 || w->closed)
		return;
	w->closed = true;
	stop_thread(w);
	uv_close((uv_handle_t *)&w->async, NULL);
}

static void on_finished(uv_async_t *async)
{
	tuned_writer *w = async->data;
	write_task *t;

	uv_mutex_lock(&w->lock);
	t = w->finished.head;
	list_init(&w->finished);
	uv_mutex_unlock(&w->lock);
	while (t) {
		write_task *next = t->next;

		if (t->done)
			t->done(t->data);
		free(t);
		w->pending--;
		t = next;
	}
	end_if_idle(w);
}

tuned_writer *tuned_writer_start(uv_loop_t *loop, cache *c)
{
	tuned_writer *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->cache = c;
	list_init(&w->todo);
	list_init(&w->finished);
	uv_mutex_init(&w->lock);
	uv_cond_init(&w->wake);
	if (uv_thread_create(&w->thread, writer_thread, w) != 0) {
		uv_cond_destroy(&w->wake);
		uv_mutex_destroy(&w->lock);
		free(w);
		return NULL;
	}
	/* the thread wakes it only once a write is handed, after this */
	uv_async_init(loop, &w->async, on_finished);
	w->async.data = w;
	/* before any write is handed: the queue's lock orders the two */
	cache_hand_over(c, w->thread);
	return w;
}

int tuned_write(tuned_writer *w, tuned_write_fn *run, tuned_write_done *done,
		void *data)
{
	write_task *t;

	if (w->closed)
		return -ESHUTDOWN; /* the stop's last save writes what is left */
	if (!(t = malloc(sizeof(*t))))
		return -ENOMEM;
	*t = (write_task){.run = run, .done = done, .data = data};
	w->pending++;
	uv_mutex_lock(&w->lock);
	list_append(&w->todo, t);
	uv_cond_signal(&w->wake);
	uv_mutex_unlock(&w->lock);
	return 0;
}

void tuned_writer_close(tuned_writer *w)
{
	w->closing = true;
	uv_async_send(&w->async);
}

void tuned_writer_free(tuned_writer *w, cache *c)
{
	if (!w)
		return;
	if (!w->closed)
		stop_thread(w); /* a failed start: the loop never ran */
	uv_cond_destroy(&w->wake);
	uv_mutex_destroy(&w->lock);
	cache_hand_over(c, uv_thread_self());
	free(w);
}
