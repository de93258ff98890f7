/*
 * test_alloc.c - every allocation of the engine and the asynchronous layer can
 * fail: the call (or the batch) then reports LMCA_ENOMEM, never aborts, never
 * leaks (the ASan run checks) and never leaves a batch without its completion.
 *
 * The engine allocates through lmca__malloc/lmca__calloc, which are weak
 * (src/engine/alloc.c); the strong ones here fail the Nth call. Defect guarded:
 * a failed task allocation used to abort() the process.
 */
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "lmca_async.h"

static atomic_long calls, fail_at; /* fail the fail_at-th call from now; 0: never */

static bool
should_fail(void)
{
    long at = atomic_load(&fail_at);
    return at > 0 && atomic_fetch_add(&calls, 1) + 1 == at;
}

void *
lmca__malloc(size_t size)
{
    return should_fail() ? NULL : malloc(size);
}

void *
lmca__calloc(size_t n, size_t size)
{
    return should_fail() ? NULL : calloc(n, size);
}

static void
fail_nth(long n)
{
    atomic_store(&calls, 0);
    atomic_store(&fail_at, n);
}

/* How many allocations a step made since fail_nth(0). */
static long
counted(void)
{
    return atomic_load(&calls);
}

TEST(open_fails_cleanly_at_every_allocation)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    th_config(&cfg, "lmcache");
    for (long n = 1;; n++) {
        lmca_t *h = NULL;
        fail_nth(n);
        int rc = lmca_open(&cfg, &h, &err);
        fail_nth(0);
        if (rc == LMCA_OK) {
            lmca_close(h);
            ASSERT(n > 1); /* open allocates: the loop failed something first */
            return;
        }
        ASSERT_RC(rc, LMCA_ENOMEM, &err);
        ASSERT(h == NULL);
    }
}

/* Mixed sizes: tiles of small chunks, single records, segmented chunks. */
#define N 5
static const size_t sizes[N] = {100, 3000, 200 * 1024, 1100 * 1024, 3 * 1024 * 1024};

static lmca_completion_t *
wait_done(lmca_pool_t *p, uint64_t id)
{
    for (int spins = 0; spins < 600; spins++) {
        struct pollfd pfd = {.fd = lmca_pool_fd(p), .events = POLLIN};
        poll(&pfd, 1, 100);
        for (lmca_completion_t *c = lmca_pool_drain(p); c; c = c->next)
            if (c->id == id) {
                ASSERT(c->next == NULL);
                return c;
            }
    }
    th_fail(__FILE__, __LINE__, "completion %llu never came", (unsigned long long)id);
}

/* Runs one batch with the nth allocation failing; returns true once a run
   needed fewer than n allocations (nothing failed: every path was tried). */
static bool
batch_with_failure(lmca_pool_t *p, lmca_op op, const char **keys, void **bufs, long n)
{
    size_t lens[N];
    lmca_batch_t b = {.op = op, .n = N, .keys = keys, .bufs = bufs, .lens = lens};
    lmca_err_t err = {0};
    uint64_t id;

    memcpy(lens, sizes, sizeof lens);
    fail_nth(n);
    int rc = lmca_pool_submit(p, &b, &id, &err);
    if (rc != LMCA_OK) { /* refused at submit: nothing queued, nothing completes */
        fail_nth(0);
        ASSERT_RC(rc, LMCA_ENOMEM, &err);
        return false;
    }
    lmca_completion_t *c = wait_done(p, id);
    bool untouched = counted() < n;
    fail_nth(0);
    if (c->status != LMCA_OK && c->status != LMCA_ENOMEM)
        th_fail(__FILE__, __LINE__, "op %d, allocation %ld: %s", op, n, c->error);
    if (c->status == LMCA_ENOMEM)
        ASSERT(strstr(c->error, "out of memory") != NULL);
    lmca_completion_free(c);
    return untouched;
}

TEST(batches_complete_with_enomem_at_every_allocation)
{
    lmca_t *h = th_open("small");
    lmca_pool_t *p = NULL;
    const char *keys[N];
    void *in[N], *out[N];
    lmca_err_t err = {0};
    static const lmca_op ops[] = {LMCA_OP_SET,   LMCA_OP_GET,   LMCA_OP_STAT,
                                  LMCA_OP_TOUCH, LMCA_OP_PREFIX, LMCA_OP_DELETE};

    ASSERT_RC(lmca_pool_open(h, 3, &p, &err), LMCA_OK, &err);
    for (int i = 0; i < N; i++) {
        keys[i] = strdup(th_key("nomem"));
        in[i] = malloc(sizes[i]);
        out[i] = malloc(sizes[i]);
        th_fill(in[i], sizes[i], (uint32_t)i);
    }
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        long n = 1;
        while (!batch_with_failure(p, ops[o], keys, ops[o] == LMCA_OP_GET ? out : in, n))
            n++;
        printf("    op %d: failed each of %ld allocations in turn\n", ops[o], n - 1);
        ASSERT(n > 2);
    }
    /* And with nothing failing, the same batches work. */
    fail_nth(0);
    ASSERT(batch_with_failure(p, LMCA_OP_SET, keys, in, 1 << 30));
    ASSERT(batch_with_failure(p, LMCA_OP_GET, keys, out, 1 << 30));
    for (int i = 0; i < N; i++)
        ASSERT(memcmp(in[i], out[i], sizes[i]) == 0);
    lmca_pool_destroy(p);
    for (int i = 0; i < N; i++) {
        free((void *)keys[i]);
        free(in[i]);
        free(out[i]);
    }
    lmca_close(h);
}

TEST(blocking_calls_report_enomem)
{
    lmca_t *h = th_open("small");
    size_t len = 3 * 1024 * 1024, got, count;
    uint8_t *buf = malloc(len);
    const char *key = th_key("nomem");
    lmca_meta_t meta;
    lmca_err_t err = {0};

    th_fill(buf, len, 9);
    ASSERT_RC(lmca_put(h, key, buf, len, &(lmca_put_opts_t){.md = "m", .md_len = 1}, &err),
              LMCA_OK, &err);
    for (long n = 1; n < 4; n++) {
        fail_nth(n);
        int rc = lmca_get(h, key, buf, len, &got, NULL, &err);
        fail_nth(0);
        ASSERT(rc == LMCA_OK || rc == LMCA_ENOMEM);
        fail_nth(1);
        ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_ENOMEM, &err); /* the md copy */
        ASSERT(meta.md == NULL);
        fail_nth(1);
        ASSERT_RC(lmca_prefix(h, &key, 1, &count, NULL, &err), LMCA_ENOMEM, &err);
        fail_nth(1);
        ASSERT_RC(lmca_touch(h, key, false, &err), LMCA_ENOMEM, &err);
        fail_nth(0);
    }
    free(buf);
    lmca_close(h);
}

/* Every allocation of an inspection (the md copy, the segment states, the
   scratch payload buffer) can fail: ENOMEM, and nothing is left to free. */
TEST(inspect_fails_cleanly_at_every_allocation)
{
    lmca_t *h = th_open("small");
    size_t len = 3 * 1024 * 1024;
    uint8_t *buf = malloc(len);
    const char *key = th_key("nomem-inspect");
    lmca_inspect_t in;
    lmca_err_t err = {0};
    long n;

    th_fill(buf, len, 10);
    ASSERT_RC(lmca_put(h, key, buf, len, &(lmca_put_opts_t){.md = "m", .md_len = 1}, &err),
              LMCA_OK, &err);
    for (n = 1;; n++) {
        fail_nth(n);
        int rc = lmca_inspect(h, key, &in, &err);
        fail_nth(0);
        if (rc == LMCA_OK)
            break;
        ASSERT_RC(rc, LMCA_ENOMEM, &err);
        ASSERT(in.segs == NULL && in.meta.md == NULL);
    }
    ASSERT(n >= 4); /* md, states and scratch failed in turn before it passed */
    ASSERT(in.meta.nseg > 1 && in.segs != NULL && in.meta.md != NULL);
    lmca_inspect_clear(&in);
    free(buf);
    lmca_close(h);
}

TEST_LIST = {
    T(open_fails_cleanly_at_every_allocation),
    T(batches_complete_with_enomem_at_every_allocation),
    T(blocking_calls_report_enomem),
    T(inspect_fails_cleanly_at_every_allocation),
};
TEST_MAIN()
