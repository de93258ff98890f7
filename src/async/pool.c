/*
 * pool.c - the pool's face: opening it (worker threads, the eventfd), turning a
 * submitted batch into a job and its first tasks (tasks.c plans them, queue.c
 * queues them), the workers' loop, and shutting it down.
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
    atomic_fetch_add(&h->cache.upkeep_pools, 1);
    p->upkeeps = true;
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
    pthread_mutex_lock(&p->lock);
    bool joined = p->joined;
    pthread_mutex_unlock(&p->lock);
    if (joined)
        return;
    /* Every queued task is taken and canceled; running ones finish on their workers. */
    lmca__abandon(lmca__close_queue(p));
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
    if (p->upkeeps) /* the puts look and mend again */
        atomic_fetch_sub(&p->h->cache.upkeep_pools, 1);
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
    if (!lmca__push(p, tasks)) /* shut down since the check above */
        lmca__abandon(tasks);
    lmca__job_unref(job);
    return LMCA_OK;
}

/* How often an idle worker wakes for the upkeep (lmca__upkeep does nothing
   until a look or a mend is due). */
#define UPKEEP_IDLE_MS 500

static void *
worker_main(void *arg)
{
    lmca_pool_t *p = arg;
    lmca__task *t;
    bool closing = false;

    for (;;) {
        /* Hits are moved to the head off the get path (hits.c), and the plan
           kept and a stalled NSUP mended off the put path (plan.c, mend.c): by a
           worker about to go idle, and while busy once due. */
        if ((t = lmca__pop(p, 0, &closing)) == NULL && !closing) {
            lmca_touch_hits(p->h, NULL);
            lmca__upkeep(p->h);
            /* Idle, it wakes now and then for the upkeep: puts on the blocking
               API leave it to the pool. */
            t = lmca__pop(p, UPKEEP_IDLE_MS, &closing);
        }
        if (t == NULL) {
            if (closing)
                break;
            continue;
        }
        if (atomic_load(&t->job->canceled))
            lmca__cancel(t);
        else if (!lmca__run(t))
            continue; /* deferred: queued again, still pending */
        lmca__task_done(t);
        lmca__touch_hits_due(p->h);
        lmca__upkeep(p->h);
    }
    return NULL;
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
