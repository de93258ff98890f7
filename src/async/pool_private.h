/*
 * pool_private.h - the pool's insides, shared by pool.c (opening, submitting,
 * the workers, closing), tasks.c (what a batch turns into, and running it) and
 * queue.c (tasks in line, completions).
 *
 * Memory ordering. A batch (job) counts its unfinished tasks in `pending`. A task
 * that spawns others adds to `pending` before queueing them, and every task ends
 * with an acq_rel decrement; the thread that brings it to zero completes the job.
 * So every write a task made to the job (results, error, per-key state) happens
 * before the completion is built, without a lock. Per-key segment counters work
 * the same way one level down (parts_left).
 */
#ifndef LMCA_POOL_PRIVATE_H
#define LMCA_POOL_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>

#include "internal.h"
#include "lmca_async.h"

#define LMCA__BANDS 4

typedef struct lmca__job lmca__job;

typedef enum {
    LMCA__T_TILE = 1, /* keys [first, first + count) in one batch call */
    LMCA__T_KEY,      /* one key: a whole get, put or remove */
    LMCA__T_SEGMENT,  /* segments [segment, segment + count) of key `first` */
    LMCA__T_COMMIT    /* the meta record of key `first`, whose segments landed */
} lmca__task_kind;

typedef struct lmca__task {
    struct lmca__task *next;
    lmca__job *job;
    lmca__task_kind kind;
    size_t first, count;
    uint32_t segment;
    uint64_t due_ms; /* deferred: not to run before this (CLOCK_MONOTONIC ms) */
} lmca__task;

/* Per-key state of a chunk whose segments travel as several tasks. */
typedef struct lmca__keystate {
    lmca_put_t *put;        /* SET: the begun put the last part commits */
    lmca_get_t *get;        /* GET: the begun get the last part ends; with
                               `real`, a guessed one (lmca_get_guess) */
    lmca_get_t *real;       /* GET, guessed: the meta record, read beside the
                               segments; the last part confirms one by the other */
    int real_rc;            /* ... and the status of reading it */
    atomic_uint parts_left; /* segment tasks still running */
    atomic_int failed;      /* first part status that was not LMCA_OK */
} lmca__keystate;

struct lmca__job {
    lmca_completion_t c; /* first: what the caller gets back */
    lmca_pool_t *pool;
    int band;            /* 0..3 */
    char **keys;         /* copies, in one allocation with the arrays below */
    void **bufs;
    size_t *lens;
    lmca_put_opts_t *opts;
    lmca__keystate *ks;
    lmca_get_t *gets;    /* STAT, FILL: one get per key (c.gets points here) */
    bool pin;            /* TOUCH */
    atomic_size_t pending;
    atomic_bool canceled;
    atomic_flag error_taken;
};

struct lmca_pool {
    lmca_t *h;
    int efd;
    unsigned nworkers;
    bool upkeeps;          /* counted in the handle's upkeep_pools */
    pthread_t *workers;

    pthread_mutex_t lock; /* guards the queues and `closing` */
    pthread_cond_t ready; /* on CLOCK_MONOTONIC, for the deferred tasks' waits */
    lmca__task *head[LMCA__BANDS], *tail[LMCA__BANDS];
    lmca__task *deferred; /* tasks waiting out a backoff, soonest first */
    bool closing, joined;

    pthread_mutex_t done_lock; /* guards the completion list */
    lmca_completion_t *done_head, *done_tail;
    atomic_bool signaled;      /* an eventfd write is pending a drain */

    atomic_uint_fast64_t next_id;
    atomic_uint_fast64_t submitted, completed, canceled, queued, bytes_read, bytes_written;
};

/* queue.c: tasks in line, and completions. pool.c opens, submits and closes;
   tasks.c plans and runs; both go through these, and nothing here calls them. */
/* A new task, or NULL when out of memory. */
lmca__task *lmca__task_new(lmca__job *job, lmca__task_kind kind, size_t first, size_t count,
                           uint32_t segment);
/* Queues tasks (a list linked by next) after adding their number to the job's
   pending count. False once the pool is closing: nothing was queued, and the
   caller cancels them (lmca__abandon). */
bool lmca__push(lmca_pool_t *p, lmca__task *list);
/* Queues a task that ran and must run again in `ms` milliseconds (a put the
   server refused for a moment: lmca_put_backoff). It stays pending meanwhile,
   and its worker is free for other work; at its time it goes before the tasks
   of its band. False once the pool is closing, as lmca__push. */
bool lmca__defer(lmca_pool_t *p, lmca__task *t, int ms);
/* Next task, lowest band first, waiting up to `wait_ms` for one (0: not at
   all); NULL when none came, and then *closing says whether the pool closed. */
lmca__task *lmca__pop(lmca_pool_t *p, unsigned wait_ms, bool *closing);
/* Closes the queue: pushes fail from now on, and every task waiting in it,
   deferred ones included, is handed back (a list) for the caller to cancel. */
lmca__task *lmca__close_queue(lmca_pool_t *p);
/* Ends a task: frees it and completes its job if it was the last. */
void lmca__task_done(lmca__task *t);
/* Drops one of a job's pending counts; the last completes it. */
void lmca__job_unref(lmca__job *job);
/* Records the first error of a job. */
void lmca__job_error(lmca__job *job, int status, const char *msg);
/* Frees per-key state (begun puts and gets) at completion. */
void lmca__job_release(lmca__job *job);
/* Milliseconds of CLOCK_MONOTONIC. */
uint64_t lmca__now_ms(void);

/* tasks.c */
/* Builds the job's first tasks (a list) from a submitted batch; on failure
   nothing is left allocated but the job itself. */
int lmca__plan_tasks(lmca__job *job, lmca__task **out, lmca_err_t *err);
/* Runs a task: true when it is done, false when it was deferred (lmca__defer). */
bool lmca__run(lmca__task *t);
/* A task that will not run (the pool shut down): a segment of a put still
   counts, so that the put's last part aborts it and removes what it wrote. */
void lmca__cancel(lmca__task *t);
/* Cancels and ends every task of a list the queue would not take. */
void lmca__abandon(lmca__task *list);

#endif /* LMCA_POOL_PRIVATE_H */
