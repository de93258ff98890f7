/*
 * test_pool_stress.c - the completion machinery under load, meant for the TSan
 * build (scripts/test.sh runs it there): several submitter threads, mixed
 * operations, a drainer on the eventfd, and a shutdown while work is in flight.
 *
 * What it guards: every accepted batch completes exactly once and every refused
 * submit never does; per-key results written by worker threads are visible to
 * the drainer (the acq_rel pending counter, pool_private.h); and the eventfd
 * wakes its reader for every completion: no wakeup is lost between a drain and
 * a worker's eventfd write (a defect the soak found: lmca_pool_drain cleared the
 * flag before reading the fd, so a write landing in between was swallowed with
 * the flag left set, and the fd never woke again).
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "lmca_async.h"

#define SUBMITTERS 4
#define BATCHES 40
#define KEYS 6
#define MAX_IDS (SUBMITTERS * BATCHES + 1)

typedef struct {
    lmca_pool_t *pool;
    int id;
    atomic_int *accepted;   /* per completion id: 1 once accepted */
    atomic_int *refused;
    uint8_t *bufs[KEYS];    /* sources of every SET: only ever read */
    uint8_t *outs[BATCHES]; /* one destination per GET batch, since batches of one
                               submitter are in flight together */
} submitter;

static const size_t sizes[KEYS] = {512, 4096, 70000, 200000, 1500000, 2500000};

static void *
submit_loop(void *arg)
{
    submitter *s = arg;
    for (int b = 0; b < BATCHES; b++) {
        char names[KEYS][64];
        const char *keys[KEYS];
        void *bufs[KEYS];
        size_t lens[KEYS];
        size_t off = 0;
        for (int k = 0; k < KEYS; k++) {
            snprintf(names[k], sizeof names[k], "stress-%d-%d-%d", (int)getpid(), s->id, k);
            keys[k] = names[k];
            bufs[k] = b % 5 == 1 ? s->outs[b] + off : s->bufs[k];
            lens[k] = sizes[k];
            off += sizes[k];
        }
        /* set, get, exists, prefix, delete in turn: every path of tasks.c */
        lmca_batch_t batch = {.op = (lmca_op)(b % 5 == 0   ? LMCA_OP_SET
                                              : b % 5 == 1 ? LMCA_OP_GET
                                              : b % 5 == 2 ? LMCA_OP_EXISTS
                                              : b % 5 == 3 ? LMCA_OP_PREFIX
                                                           : LMCA_OP_DELETE),
                              .n = KEYS, .keys = keys, .bufs = bufs, .lens = lens};
        if (batch.op == LMCA_OP_SET)
            batch.prio = LMCA_PRIO_DEFAULT;
        uint64_t id = 0;
        lmca_err_t err = {0};
        if (lmca_pool_submit(s->pool, &batch, &id, &err) == LMCA_OK)
            atomic_fetch_add(&s->accepted[id], 1);
        else
            atomic_fetch_add(s->refused, 1);
    }
    return NULL;
}

typedef struct {
    lmca_pool_t *pool;
    atomic_int *completed; /* per id */
    atomic_bool stop;
    atomic_int done, canceled, failed;
    long results_seen;
    char first_error[LMCA_ERRMSG_SIZE]; /* of the first failed batch, for the report */
} drainer;

static void
take(drainer *d)
{
    for (lmca_completion_t *c = lmca_pool_drain(d->pool), *next; c; c = next) {
        next = c->next;
        if (c->id > 0 && c->id < MAX_IDS)
            atomic_fetch_add(&d->completed[c->id], 1);
        atomic_fetch_add(&d->done, 1);
        if (c->status == LMCA_ECANCELED)
            atomic_fetch_add(&d->canceled, 1);
        else if (c->status != LMCA_OK && atomic_fetch_add(&d->failed, 1) == 0)
            snprintf(d->first_error, sizeof d->first_error, "%s", c->error);
        for (size_t i = 0; i < c->n; i++)
            d->results_seen += c->results[i]; /* read what the workers wrote */
        lmca_completion_free(c);
    }
}

static void *
drain_loop(void *arg)
{
    drainer *d = arg;
    while (!atomic_load(&d->stop)) {
        struct pollfd pfd = {.fd = lmca_pool_fd(d->pool), .events = POLLIN};
        if (poll(&pfd, 1, 20) > 0)
            take(d);
    }
    return NULL;
}

/* Runs the submitters; shuts the pool down after `shutdown_after_ms` (or not,
   when negative) while they still submit. */
static void
run(int shutdown_after_ms)
{
    lmca_t *h = th_open("small");
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    static atomic_int accepted[MAX_IDS], completed[MAX_IDS];
    atomic_int refused = 0;
    submitter subs[SUBMITTERS];
    pthread_t st[SUBMITTERS], dt;
    drainer d = {.completed = completed};
    atomic_init(&d.done, 0);
    atomic_init(&d.canceled, 0);
    atomic_init(&d.failed, 0);

    for (int i = 0; i < MAX_IDS; i++)
        atomic_store(&accepted[i], 0), atomic_store(&completed[i], 0);
    ASSERT_RC(lmca_pool_open(h, 4, &p, &err), LMCA_OK, &err);
    d.pool = p;
    atomic_store(&d.stop, false);
    pthread_create(&dt, NULL, drain_loop, &d);
    for (int i = 0; i < SUBMITTERS; i++) {
        subs[i] = (submitter){.pool = p, .id = i, .accepted = accepted, .refused = &refused};
        size_t total = 0;
        for (int k = 0; k < KEYS; k++) {
            subs[i].bufs[k] = malloc(sizes[k]);
            th_fill(subs[i].bufs[k], sizes[k], (uint32_t)(i * KEYS + k));
            total += sizes[k];
        }
        for (int b = 0; b < BATCHES; b++)
            subs[i].outs[b] = b % 5 == 1 ? malloc(total) : NULL;
        pthread_create(&st[i], NULL, submit_loop, &subs[i]);
    }
    if (shutdown_after_ms >= 0) {
        usleep((useconds_t)shutdown_after_ms * 1000);
        lmca_pool_shutdown(p);
    }
    for (int i = 0; i < SUBMITTERS; i++)
        pthread_join(st[i], NULL);
    /* Without a shutdown, let everything finish first: nothing may be canceled. */
    for (int waited = 0; shutdown_after_ms < 0 && waited < 60000; waited += 10) {
        if (atomic_load(&d.done) == SUBMITTERS * BATCHES)
            break;
        usleep(10000);
    }
    lmca_pool_shutdown(p); /* every accepted batch has completed after this */
    atomic_store(&d.stop, true);
    pthread_join(dt, NULL);
    take(&d);

    int total = 0;
    for (int id = 1; id < MAX_IDS; id++) {
        ASSERT_EQ(atomic_load(&completed[id]), atomic_load(&accepted[id]));
        total += atomic_load(&accepted[id]);
    }
    ASSERT_EQ(total + atomic_load(&refused), SUBMITTERS * BATCHES);
    if (atomic_load(&d.failed) != 0)
        th_fail(__FILE__, __LINE__, "%d batches failed, the first with %s",
                atomic_load(&d.failed), d.first_error);
    if (shutdown_after_ms < 0) {
        ASSERT_EQ(atomic_load(&refused), 0);
        ASSERT_EQ(atomic_load(&d.canceled), 0);
        ASSERT(d.results_seen > 0);
    } else {
        /* The shutdown really cut work off: queued batches or later submits. */
        ASSERT(atomic_load(&d.canceled) + atomic_load(&refused) > 0);
    }
    lmca_pool_stats_t stats;
    lmca_pool_stats(p, &stats);
    ASSERT_EQ(stats.submitted, (uint64_t)total);
    ASSERT_EQ(stats.completed, (uint64_t)total);
    ASSERT_EQ(stats.queued, 0);
    lmca_pool_destroy(p);
    for (int i = 0; i < SUBMITTERS; i++) {
        for (int k = 0; k < KEYS; k++)
            free(subs[i].bufs[k]);
        for (int b = 0; b < BATCHES; b++)
            free(subs[i].outs[b]);
    }
    lmca_close(h);
}

TEST(many_submitters_every_batch_completes_once)
{
    run(-1);
}

/* A reader that drains only when poll() says so, as LMCA_OP callers in an event
   loop do, with many cheap batches in flight so that completions land while it
   drains. Completed batches waiting with a quiet fd are a lost wakeup. */
TEST(every_completion_wakes_the_eventfd)
{
    lmca_t *h = th_open("small");
    lmca_pool_t *p = NULL;
    const char *key = th_key("wake");
    lmca_batch_t b = {.op = LMCA_OP_EXISTS, .n = 1, .keys = &key};
    lmca_err_t err = {0};
    uint64_t id, drained = 0, submitted = 0;
    const uint64_t total = 6000, in_flight = 32;

    ASSERT_RC(lmca_pool_open(h, 4, &p, &err), LMCA_OK, &err);
    while (drained < total) {
        while (submitted < total && submitted - drained < in_flight) {
            ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_OK, &err);
            submitted++;
        }
        struct pollfd pfd = {.fd = lmca_pool_fd(p), .events = POLLIN};
        if (poll(&pfd, 1, 2000) == 0) {
            lmca_pool_stats_t st;
            lmca_pool_stats(p, &st);
            th_fail(__FILE__, __LINE__, "lost wakeup: %llu completed, %llu drained, fd quiet",
                    (unsigned long long)st.completed, (unsigned long long)drained);
        }
        for (lmca_completion_t *c = lmca_pool_drain(p), *next; c; c = next) {
            next = c->next;
            drained++;
            lmca_completion_free(c);
        }
    }
    lmca_pool_destroy(p);
    lmca_close(h);
}

TEST(shutdown_while_submitting_loses_nothing)
{
    run(0);
}

TEST_LIST = {
    T(many_submitters_every_batch_completes_once),
    T(every_completion_wakes_the_eventfd),
    T(shutdown_while_submitting_loses_nothing),
};
TEST_MAIN()
