/*
 * pool.c - worker threads, the banded submission queue, and completions through
 * an eventfd (the libuv threadpool/async pattern: push under a lock, signal once,
 * drain everything with no lock held while the caller works).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "pool_private.h"

static void *worker_main(void *arg);
static void job_unref(lmca__job *job);

/* ---------------------------------------------------------------------------
 * Open, close.
 */

int
lmca_pool_open(lmca_t *h, unsigned workers, lmca_pool_t **out, lmca_err_t *err)
{
    lmca_pool_t *p;

    if (h == NULL || out == NULL || workers < 1 || workers > 256)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_pool_open: workers=%u (1 to 256)", workers);
    if ((p = lmca__calloc(1, sizeof *p)) == NULL ||
        (p->workers = lmca__calloc(workers, sizeof *p->workers)) == NULL) {
        free(p);
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory opening a pool");
    }
    p->h = h;
    p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->efd < 0) {
        int e = errno;
        free(p->workers);
        free(p);
        return lmca__fail(err, LMCA_EINTERNAL, 0, "eventfd: %s", strerror(e));
    }
    pthread_mutex_init(&p->lock, NULL);
    {
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&p->ready, &attr);
        pthread_condattr_destroy(&attr);
    }
    pthread_mutex_init(&p->done_lock, NULL);
    atomic_init(&p->next_id, 1);
    for (unsigned i = 0; i < workers; i++) {
        int e = pthread_create(&p->workers[i], NULL, worker_main, p);
        if (e != 0) {
            p->nworkers = i;
            lmca_pool_destroy(p);
            return lmca__fail(err, LMCA_EINTERNAL, 0, "starting worker %u: %s", i, strerror(e));
        }
    }
    p->nworkers = workers;
    *out = p;
    return LMCA_OK;
}

int
lmca_pool_fd(const lmca_pool_t *p)
{
    return p->efd;
}

void
lmca_pool_shutdown(lmca_pool_t *p)
{
    lmca__task *stolen = NULL;

    pthread_mutex_lock(&p->lock);
    if (p->joined) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    p->closing = true;
    /* Take every queued task; running ones finish on their workers. */
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
    while (stolen) {
        lmca__task *next = stolen->next;
        atomic_store(&stolen->job->canceled, true);
        atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
        lmca__cancel(stolen);
        lmca__task_done(stolen);
        stolen = next;
    }
    for (unsigned i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i], NULL);
    pthread_mutex_lock(&p->lock);
    p->joined = true;
    pthread_mutex_unlock(&p->lock);
}

void
lmca_pool_destroy(lmca_pool_t *p)
{
    lmca_completion_t *c;
    if (p == NULL)
        return;
    lmca_pool_shutdown(p);
    for (c = lmca_pool_drain(p); c;) {
        lmca_completion_t *next = c->next;
        lmca_completion_free(c);
        c = next;
    }
    close(p->efd);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->ready);
    pthread_mutex_destroy(&p->done_lock);
    free(p->workers);
    free(p);
}

/* ---------------------------------------------------------------------------
 * Submitting.
 */

/* A FILL's gets must come from a STAT, and their buffers hold the chunks. */
static int
check_fill(const lmca_batch_t *b, size_t i, lmca_err_t *err)
{
    const lmca_get_t *g = &b->gets[i];
    if (g->meta.nseg == 0 || g->meta.tot_b > b->lens[i])
        return lmca__fail(err, LMCA_EINVAL, 0,
                          "submit: get %zu (\"%s\") %s: a buffer of %zu bytes for %llu", i,
                          b->keys[i], g->meta.nseg ? "does not fit" : "was not begun by a STAT",
                          b->lens[i], (unsigned long long)g->meta.tot_b);
    return LMCA_OK;
}

static int
check_batch(const lmca_batch_t *b, lmca_err_t *err)
{
    bool buffers = b->op == LMCA_OP_GET || b->op == LMCA_OP_SET || b->op == LMCA_OP_FILL;
    if (b->op < LMCA_OP_GET || b->op > LMCA_OP_TOUCH)
        return lmca__fail(err, LMCA_EINVAL, 0, "submit: unknown op %d", (int)b->op);
    if ((unsigned)b->prio > LMCA_PRIO_PUT)
        return lmca__fail(err, LMCA_EINVAL, 0, "submit: unknown priority %d", (int)b->prio);
    /* Before reading any key: n bounds every size computed from it. */
    if (b->n > LMCA_BATCH_MAX)
        return lmca__fail(err, LMCA_EINVAL, 0, "submit: %zu keys (at most %u)", b->n,
                          LMCA_BATCH_MAX);
    if (b->n > 0 && (b->keys == NULL || (b->op == LMCA_OP_FILL && b->gets == NULL) ||
                     (buffers && (b->bufs == NULL || b->lens == NULL))))
        return lmca__fail(err, LMCA_EINVAL, 0, "submit: NULL keys, gets, buffers or lengths");
    for (size_t i = 0; i < b->n; i++) {
        int rc = lmca__check_key(b->keys[i], err);
        if (rc == LMCA_OK && b->op == LMCA_OP_FILL)
            rc = check_fill(b, i, err);
        if (rc != LMCA_OK)
            return rc;
        if (buffers && b->bufs[i] == NULL && b->lens[i] > 0)
            return lmca__fail(err, LMCA_EINVAL, 0, "submit: NULL buffer for key \"%s\"",
                              b->keys[i]);
    }
    return LMCA_OK;
}

static int
default_band(lmca_op op)
{
    switch (op) {
    case LMCA_OP_EXISTS:
    case LMCA_OP_PREFIX:
    case LMCA_OP_TOUCH: /* a lookup's lock: it must not wait behind loads */
        return LMCA_PRIO_PEEK;
    case LMCA_OP_GET:
    case LMCA_OP_STAT:
    case LMCA_OP_FILL:
        return LMCA_PRIO_GET;
    default:
        return LMCA_PRIO_PUT;
    }
}

/* One allocation: the job, key copies, buffers, lengths, options, key state,
   and for STAT and FILL one get per key. Keys were checked (at most
   LMCA_KEY_MAX bytes, n at most LMCA_BATCH_MAX), so the sizes are bounded;
   lmca__size still checks them. */
static lmca__job *
job_new(lmca_pool_t *p, const lmca_batch_t *b)
{
    bool gets = b->op == LMCA_OP_STAT || b->op == LMCA_OP_FILL;
    size_t n = b->n, keybytes = 0;
    for (size_t i = 0; i < n; i++)
        keybytes += strlen(b->keys[i]) + 1;
    size_t each = (gets ? sizeof(lmca_get_t) : 0) + sizeof(char *) + sizeof(void *) +
                  sizeof(size_t) + sizeof(lmca_put_opts_t) + sizeof(lmca__keystate) + 1;
    lmca__job *job = lmca__calloc(1, lmca__size(n, each, sizeof(lmca__job) + keybytes));
    if (job == NULL)
        return NULL;
    job->gets = gets ? (lmca_get_t *)(job + 1) : NULL;
    job->keys = (char **)(gets ? (void *)(job->gets + n) : (void *)(job + 1));
    job->bufs = (void **)(job->keys + n);
    job->lens = (size_t *)(job->bufs + n);
    job->opts = (lmca_put_opts_t *)(job->lens + n);
    job->ks = (lmca__keystate *)(job->opts + n);
    job->c.results = (uint8_t *)(job->ks + n);
    char *k = (char *)(job->c.results + n);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(b->keys[i]) + 1;
        job->keys[i] = memcpy(k, b->keys[i], len);
        k += len;
        job->bufs[i] = b->bufs ? b->bufs[i] : NULL;
        job->lens[i] = b->lens ? b->lens[i] : 0;
        if (b->opts)
            job->opts[i] = b->opts[i];
        if (b->op == LMCA_OP_FILL)
            job->gets[i] = b->gets[i];
        if (gets) /* the job's key copy, whatever a STAT's completion left; a
                     guess is only ever the pool's own (tasks.c) */
            job->gets[i].key = job->keys[i], job->gets[i].hold = true,
            job->gets[i].want_md = true, job->gets[i].seen_wids = NULL;
    }
    job->pool = p;
    job->band = (b->prio ? (int)b->prio : default_band(b->op)) - 1;
    job->pin = b->pin;
    job->c.op = b->op;
    job->c.n = n;
    job->c.gets = b->op == LMCA_OP_STAT ? job->gets : NULL;
    job->c.udata = b->udata;
    atomic_flag_clear(&job->error_taken);
    return job;
}

/* An accepted FILL owns its gets now: the caller's copies let go of what they
   held, so that releasing them is harmless. */
static void
take_gets(const lmca_batch_t *b)
{
    for (size_t i = 0; b->op == LMCA_OP_FILL && i < b->n; i++) {
        b->gets[i].held = NULL;
        b->gets[i].meta.md = NULL;
    }
}

int
lmca_pool_submit(lmca_pool_t *p, const lmca_batch_t *b, uint64_t *id, lmca_err_t *err)
{
    lmca__task *tasks = NULL;
    lmca__job *job;
    int rc;

    if (p == NULL || b == NULL || id == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_pool_submit: NULL argument");
    if ((rc = check_batch(b, err)) != LMCA_OK)
        return rc;
    if ((job = job_new(p, b)) == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory for a batch of %zu keys", b->n);
    if ((rc = lmca__plan_tasks(job, &tasks, err)) != LMCA_OK) {
        free(job);
        return rc;
    }
    pthread_mutex_lock(&p->lock);
    bool closing = p->closing;
    pthread_mutex_unlock(&p->lock);
    if (closing) {
        while (tasks) {
            lmca__task *next = tasks->next;
            free(tasks);
            tasks = next;
        }
        lmca__job_release(job);
        free(job);
        return lmca__fail(err, LMCA_ECANCELED, 0, "submit: the pool is shut down");
    }
    take_gets(b);
    job->c.id = atomic_fetch_add(&p->next_id, 1);
    *id = job->c.id;
    atomic_fetch_add_explicit(&p->submitted, 1, memory_order_relaxed);
    /* The submitter holds one count until every first task is queued, so an
       early finisher cannot complete the job under us. */
    atomic_store(&job->pending, 1);
    lmca__push(p, tasks);
    job_unref(job);
    return LMCA_OK;
}

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

void
lmca__push(lmca_pool_t *p, lmca__task *list)
{
    size_t n = 0;
    lmca__task *last = NULL;

    for (lmca__task *t = list; t; t = t->next, n++)
        last = t;
    if (n == 0)
        return;
    atomic_fetch_add_explicit(&list->job->pending, n, memory_order_relaxed);
    pthread_mutex_lock(&p->lock);
    if (p->closing) {
        pthread_mutex_unlock(&p->lock);
        atomic_store(&list->job->canceled, true);
        while (list) {
            lmca__task *next = list->next;
            lmca__cancel(list);
            lmca__task_done(list);
            list = next;
        }
        return;
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
}

uint64_t
lmca__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void
lmca__defer(lmca_pool_t *p, lmca__task *t, int ms)
{
    lmca__task **at;

    t->due_ms = lmca__now_ms() + (uint64_t)(ms > 0 ? ms : 0);
    pthread_mutex_lock(&p->lock);
    if (p->closing) {
        pthread_mutex_unlock(&p->lock);
        atomic_store(&t->job->canceled, true);
        lmca__cancel(t);
        lmca__task_done(t);
        return;
    }
    for (at = &p->deferred; *at && (*at)->due_ms <= t->due_ms; at = &(*at)->next)
        ;
    t->next = *at;
    *at = t;
    atomic_fetch_add_explicit(&p->queued, 1, memory_order_relaxed);
    /* A worker asleep may wait past this task's time: wake one to look. */
    pthread_cond_signal(&p->ready);
    pthread_mutex_unlock(&p->lock);
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

/* Waits for a push, or until the soonest deferred task is due. */
static void
wait_work(lmca_pool_t *p)
{
    struct timespec ts;
    if (p->deferred == NULL) {
        pthread_cond_wait(&p->ready, &p->lock);
        return;
    }
    ts.tv_sec = (time_t)(p->deferred->due_ms / 1000);
    ts.tv_nsec = (long)(p->deferred->due_ms % 1000) * 1000000L;
    pthread_cond_timedwait(&p->ready, &p->lock, &ts);
}

/* Next task, lowest band first; NULL once closing and empty. */
static lmca__task *
pop(lmca_pool_t *p)
{
    lmca__task *t = NULL;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (p->deferred)
            release_due(p, lmca__now_ms());
        for (int b = 0; b < LMCA__BANDS && t == NULL; b++) {
            if ((t = p->head[b]) != NULL && (p->head[b] = t->next) == NULL)
                p->tail[b] = NULL;
        }
        if (t || p->closing)
            break;
        wait_work(p);
    }
    pthread_mutex_unlock(&p->lock);
    if (t) {
        t->next = NULL;
        atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
    }
    return t;
}

static void *
worker_main(void *arg)
{
    lmca_pool_t *p = arg;
    lmca__task *t;
    while ((t = pop(p)) != NULL) {
        if (atomic_load(&t->job->canceled))
            lmca__cancel(t);
        else if (!lmca__run(t))
            continue; /* deferred: queued again, still pending */
        lmca__task_done(t);
    }
    return NULL;
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
static void
job_unref(lmca__job *job)
{
    if (atomic_fetch_sub_explicit(&job->pending, 1, memory_order_acq_rel) == 1)
        complete(job);
}

void
lmca__task_done(lmca__task *t)
{
    lmca__job *job = t->job;
    free(t);
    job_unref(job);
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

void
lmca_pool_stats(lmca_pool_t *p, lmca_pool_stats_t *out)
{
    out->submitted = atomic_load_explicit(&p->submitted, memory_order_relaxed);
    out->completed = atomic_load_explicit(&p->completed, memory_order_relaxed);
    out->canceled = atomic_load_explicit(&p->canceled, memory_order_relaxed);
    out->queued = atomic_load_explicit(&p->queued, memory_order_relaxed);
    out->bytes_read = atomic_load_explicit(&p->bytes_read, memory_order_relaxed);
    out->bytes_written = atomic_load_explicit(&p->bytes_written, memory_order_relaxed);
}
