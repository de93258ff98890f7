/*
 * queue.c - the pool's queue of tasks and its completions: what the workers
 * take and when, and how a batch whose last task ended reaches the caller
 * through the eventfd (the libuv threadpool/async pattern: push under a lock,
 * signal once, drain everything with no lock held while the caller works).
 * It knows what a task is, not what a task does: tasks.c runs them, and
 * cancels those the queue gives back when the pool closes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool_private.h"

/* ---------------------------------------------------------------------------
 * Tasks and the queue.
 */

lmca__task *
lmca__task_new(lmca__job *job, lmca__task_kind kind, size_t first, size_t count, uint32_t segment)
{
    lmca__task *t = lmca__malloc(sizeof *t);
    if (t != NULL)
        *t = (lmca__task){.job = job, .kind = kind, .first = first, .count = count,
                          .segment = segment};
    return t;
}

bool
lmca__push(lmca_pool_t *p, lmca__task *list)
{
    size_t n = 0;
    lmca__task *last = NULL;

    for (lmca__task *t = list; t; t = t->next, n++)
        last = t;
    if (n == 0)
        return true;
    atomic_fetch_add_explicit(&list->job->pending, n, memory_order_relaxed);
    pthread_mutex_lock(&p->lock);
    if (p->closing) {
        pthread_mutex_unlock(&p->lock);
        return false;
    }
    int b = list->job->band;
    if (p->tail[b])
        p->tail[b]->next = list;
    else
        p->head[b] = list;
    p->tail[b] = last;
    atomic_fetch_add_explicit(&p->queued, n, memory_order_relaxed);
    if (n == 1)
        pthread_cond_signal(&p->ready);
    else
        pthread_cond_broadcast(&p->ready);
    pthread_mutex_unlock(&p->lock);
    return true;
}

uint64_t
lmca__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

bool
lmca__defer(lmca_pool_t *p, lmca__task *t, int ms)
{
    lmca__task **at;

    t->next = NULL;
    t->due_ms = lmca__now_ms() + (uint64_t)(ms > 0 ? ms : 0);
    pthread_mutex_lock(&p->lock);
    if (p->closing) {
        pthread_mutex_unlock(&p->lock);
        return false;
    }
    for (at = &p->deferred; *at && (*at)->due_ms <= t->due_ms; at = &(*at)->next)
        ;
    t->next = *at;
    *at = t;
    atomic_fetch_add_explicit(&p->queued, 1, memory_order_relaxed);
    /* A worker asleep may wait past this task's time: wake one to look. */
    pthread_cond_signal(&p->ready);
    pthread_mutex_unlock(&p->lock);
    return true;
}

/* Moves the deferred tasks that are due to the heads of their bands: they are
   older than anything queued since. Under the lock. */
static void
release_due(lmca_pool_t *p, uint64_t now)
{
    while (p->deferred && p->deferred->due_ms <= now) {
        lmca__task *t = p->deferred;
        int b = t->job->band;
        p->deferred = t->next;
        t->next = p->head[b];
        p->head[b] = t;
        if (p->tail[b] == NULL)
            p->tail[b] = t;
    }
}

/* Waits for a push, or until the soonest deferred task is due, or `until_ms`
   (monotonic). */
static void
wait_work(lmca_pool_t *p, uint64_t until_ms)
{
    struct timespec ts;
    uint64_t due = p->deferred && p->deferred->due_ms < until_ms ? p->deferred->due_ms : until_ms;

    ts.tv_sec = (time_t)(due / 1000);
    ts.tv_nsec = (long)(due % 1000) * 1000000L;
    pthread_cond_timedwait(&p->ready, &p->lock, &ts);
}

lmca__task *
lmca__pop(lmca_pool_t *p, unsigned wait_ms, bool *closing)
{
    lmca__task *t = NULL;
    uint64_t until = wait_ms ? lmca__now_ms() + wait_ms : 0;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (p->deferred)
            release_due(p, lmca__now_ms());
        for (int b = 0; b < LMCA__BANDS && t == NULL; b++) {
            if ((t = p->head[b]) != NULL && (p->head[b] = t->next) == NULL)
                p->tail[b] = NULL;
        }
        if (t || p->closing || lmca__now_ms() >= until)
            break;
        wait_work(p, until);
    }
    *closing = p->closing;
    pthread_mutex_unlock(&p->lock);
    if (t) {
        t->next = NULL;
        atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
    }
    return t;
}

lmca__task *
lmca__close_queue(lmca_pool_t *p)
{
    lmca__task *stolen = NULL;

    pthread_mutex_lock(&p->lock);
    p->closing = true;
    for (int b = 0; b < LMCA__BANDS; b++) {
        if (p->tail[b]) {
            p->tail[b]->next = stolen;
            stolen = p->head[b];
        }
        p->head[b] = p->tail[b] = NULL;
    }
    while (p->deferred) {
        lmca__task *t = p->deferred;
        p->deferred = t->next;
        t->next = stolen;
        stolen = t;
    }
    pthread_cond_broadcast(&p->ready);
    pthread_mutex_unlock(&p->lock);
    for (lmca__task *t = stolen; t; t = t->next)
        atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
    return stolen;
}

/* ---------------------------------------------------------------------------
 * Completions.
 */

void
lmca__job_error(lmca__job *job, int status, const char *msg)
{
    if (atomic_flag_test_and_set(&job->error_taken))
        return; /* the first error names the batch */
    job->c.status = status;
    /* The status name first, so a caller that only sees the text knows the kind. */
    snprintf(job->c.error, sizeof job->c.error, "%s: %s", lmca_status_name(status),
             msg && *msg ? msg : lmca_strerror(status));
}

static void
complete(lmca__job *job)
{
    lmca_pool_t *p = job->pool;
    lmca_completion_t *c = &job->c;
    uint64_t one = 1;

    lmca__job_release(job);
    if (c->op == LMCA_OP_PREFIX)
        while (c->prefix < c->n && c->results[c->prefix])
            c->prefix++;
    if (atomic_load(&job->canceled)) {
        c->status = LMCA_ECANCELED;
        snprintf(c->error, sizeof c->error, "ECANCELED: canceled, the pool was shut down");
        atomic_fetch_add_explicit(&p->canceled, 1, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&p->completed, 1, memory_order_relaxed);
    pthread_mutex_lock(&p->done_lock);
    if (p->done_tail)
        p->done_tail->next = c;
    else
        p->done_head = c;
    p->done_tail = c;
    pthread_mutex_unlock(&p->done_lock);
    /* One write per drain: later completions find the flag set. */
    if (!atomic_exchange(&p->signaled, true))
        while (write(p->efd, &one, sizeof one) < 0 && errno == EINTR)
            ;
}

/* acq_rel: this task's writes to the job happen before the completion is
   built by whichever thread drops the last count (see pool_private.h). */
void
lmca__job_unref(lmca__job *job)
{
    if (atomic_fetch_sub_explicit(&job->pending, 1, memory_order_acq_rel) == 1)
        complete(job);
}

void
lmca__task_done(lmca__task *t)
{
    lmca__job *job = t->job;
    free(t);
    lmca__job_unref(job);
}

lmca_completion_t *
lmca_pool_drain(lmca_pool_t *p)
{
    uint64_t count;
    lmca_completion_t *list;

    /* Empty the fd first, then clear the flag. A completion that lands before
       the clear finds the flag set and writes nothing, but it is on the list
       taken below; one that lands after writes the fd again. Clearing first
       (as this once did) let a write land in between and be read away here,
       leaving the flag set and the fd quiet for good: a lost wakeup. */
    while (read(p->efd, &count, sizeof count) > 0 || errno == EINTR)
        ;
    atomic_store(&p->signaled, false);
    pthread_mutex_lock(&p->done_lock);
    list = p->done_head;
    p->done_head = p->done_tail = NULL;
    pthread_mutex_unlock(&p->done_lock);
    return list;
}

void
lmca_completion_free(lmca_completion_t *c)
{
    lmca__job *job = (lmca__job *)c;
    if (c == NULL)
        return;
    for (size_t i = 0; job->gets != NULL && i < c->n; i++)
        lmca_get_release(&job->gets[i]); /* what the caller did not take */
    free(c); /* the job, whose first member it is, with all its arrays */
}

/* Frees a job's per-key state at completion. */
void
lmca__job_release(lmca__job *job)
{
    for (size_t i = 0; i < job->c.n; i++) {
        free(job->ks[i].put);
        free(job->ks[i].get);
        free(job->ks[i].real);
        job->ks[i].put = NULL;
        job->ks[i].get = NULL;
        job->ks[i].real = NULL;
    }
}

