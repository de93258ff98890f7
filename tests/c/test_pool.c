/*
 * test_pool.c - the asynchronous layer against a server: batch operations with
 * per-key results, the eventfd, priority bands, shutdown with work in flight,
 * and submits that fail without ever completing.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "lmca_async.h"

#define KIB (1024ull)
#define MIB (1024ull * 1024ull)

/* Waits for completion `id`, freeing others it drains on the way (recorded in
   `order`, if given, as ids in completion order). */
static lmca_completion_t *
wait_for(lmca_pool_t *p, uint64_t id, uint64_t *order, size_t *norder)
{
    for (int spins = 0; spins < 600; spins++) {
        struct pollfd pfd = {.fd = lmca_pool_fd(p), .events = POLLIN};
        lmca_completion_t *found = NULL;
        poll(&pfd, 1, 100);
        for (lmca_completion_t *c = lmca_pool_drain(p), *next; c; c = next) {
            next = c->next;
            if (order)
                order[(*norder)++] = c->id;
            if (c->id == id)
                found = c;
            else
                lmca_completion_free(c);
        }
        if (found)
            return found;
    }
    th_fail(__FILE__, __LINE__, "completion %llu never came", (unsigned long long)id);
}

/* Drains until `count` completions have come, recording their ids in order. */
static void
collect(lmca_pool_t *p, size_t count, uint64_t *order)
{
    size_t n = 0;
    for (int spins = 0; n < count && spins < 600; spins++) {
        struct pollfd pfd = {.fd = lmca_pool_fd(p), .events = POLLIN};
        poll(&pfd, 1, 100);
        for (lmca_completion_t *c = lmca_pool_drain(p), *next; c; c = next) {
            next = c->next;
            order[n++] = c->id;
            lmca_completion_free(c);
        }
    }
    if (n != count)
        th_fail(__FILE__, __LINE__, "%zu of %zu completions came", n, count);
}

#define ASSERT_DONE_OK(c)                                                                  \
    do {                                                                                   \
        if ((c)->status != LMCA_OK)                                                        \
            th_fail(__FILE__, __LINE__, "batch failed: %s: %s", lmca_status_name((c)->status), \
                    (c)->error);                                                           \
    } while (0)

static uint64_t
submit(lmca_pool_t *p, lmca_op op, size_t n, const char **keys, void **bufs, size_t *lens)
{
    lmca_batch_t b = {.op = op, .n = n, .keys = keys, .bufs = bufs, .lens = lens};
    lmca_err_t err = {0};
    uint64_t id = 0;
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_OK, &err);
    ASSERT(id > 0);
    return id;
}

/* Sizes that take every path: tiles of small chunks, single records, and
   chunks of several segments. */
static const size_t sizes[6] = {1000, 3000, 100 * KIB, 1 * MIB, 10 * MIB, 0};

TEST(batches_round_trip_with_per_key_results)
{
    lmca_t *h = th_open("lmcache");
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    const char *keys[7];
    void *in[6], *out[6];
    size_t lens[6];
    lmca_completion_t *c;

    ASSERT_RC(lmca_pool_open(h, 4, &p, &err), LMCA_OK, &err);
    for (int i = 0; i < 6; i++) {
        keys[i] = th_key("pool");
        lens[i] = sizes[i];
        in[i] = malloc(sizes[i] + 1);
        out[i] = malloc(sizes[i] + 1);
        th_fill(in[i], sizes[i], (uint32_t)i + 40);
    }
    keys[6] = th_key("absent");
    c = wait_for(p, submit(p, LMCA_OP_SET, 6, keys, in, lens), NULL, NULL);
    ASSERT_DONE_OK(c);
    for (int i = 0; i < 6; i++)
        ASSERT_EQ(c->results[i], 1);
    lmca_completion_free(c);

    c = wait_for(p, submit(p, LMCA_OP_GET, 6, keys, out, lens), NULL, NULL);
    ASSERT_DONE_OK(c);
    for (int i = 0; i < 6; i++) {
        ASSERT_EQ(c->results[i], 1);
        ASSERT(memcmp(in[i], out[i], sizes[i]) == 0);
    }
    lmca_completion_free(c);

    const char *ask[4] = {keys[0], keys[4], keys[6], keys[1]};
    c = wait_for(p, submit(p, LMCA_OP_PREFIX, 4, ask, NULL, NULL), NULL, NULL);
    ASSERT_DONE_OK(c);
    ASSERT_EQ(c->prefix, 2);
    ASSERT(c->results[0] && c->results[1] && !c->results[2] && c->results[3]);
    lmca_completion_free(c);

    c = wait_for(p, submit(p, LMCA_OP_EXISTS, 7, keys, NULL, NULL), NULL, NULL);
    for (int i = 0; i < 7; i++)
        ASSERT_EQ(c->results[i], i < 6);
    lmca_completion_free(c);

    c = wait_for(p, submit(p, LMCA_OP_DELETE, 7, keys, NULL, NULL), NULL, NULL);
    ASSERT_DONE_OK(c);
    for (int i = 0; i < 7; i++)
        ASSERT_EQ(c->results[i], i < 6);
    lmca_completion_free(c);

    c = wait_for(p, submit(p, LMCA_OP_GET, 6, keys, out, lens), NULL, NULL);
    ASSERT_DONE_OK(c); /* misses are not errors */
    for (int i = 0; i < 6; i++)
        ASSERT_EQ(c->results[i], 0);
    lmca_completion_free(c);
    lmca_pool_destroy(p);
    for (int i = 0; i < 6; i++)
        free(in[i]), free(out[i]);
    lmca_close(h);
}

TEST(get_into_a_buffer_of_another_size_is_a_miss)
{
    lmca_t *h = th_open("lmcache");
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    const char *key = th_key("size");
    static uint8_t data[5000], out[6000];
    void *in[1] = {data}, *dst[1] = {out};
    size_t len[1] = {sizeof data}, bigger[1] = {sizeof out}, smaller[1] = {4000};
    lmca_completion_t *c;

    ASSERT_RC(lmca_pool_open(h, 2, &p, &err), LMCA_OK, &err);
    lmca_completion_free(wait_for(p, submit(p, LMCA_OP_SET, 1, &key, in, len), NULL, NULL));
    c = wait_for(p, submit(p, LMCA_OP_GET, 1, &key, dst, bigger), NULL, NULL);
    ASSERT_EQ(c->results[0], 0);
    lmca_completion_free(c);
    c = wait_for(p, submit(p, LMCA_OP_GET, 1, &key, dst, smaller), NULL, NULL);
    ASSERT_EQ(c->results[0], 0);
    lmca_completion_free(c);
    lmca_pool_destroy(p);
    lmca_close(h);
}

TEST(eventfd_signals_and_drain_clears_it)
{
    lmca_t *h = th_open("lmcache");
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    const char *key = th_key("fd");
    struct pollfd pfd;

    ASSERT_RC(lmca_pool_open(h, 1, &p, &err), LMCA_OK, &err);
    pfd = (struct pollfd){.fd = lmca_pool_fd(p), .events = POLLIN};
    ASSERT_EQ(poll(&pfd, 1, 0), 0); /* nothing yet */
    submit(p, LMCA_OP_EXISTS, 1, &key, NULL, NULL);
    submit(p, LMCA_OP_EXISTS, 1, &key, NULL, NULL);
    ASSERT_EQ(poll(&pfd, 1, 10000), 1);
    size_t got = 0;
    for (int spins = 0; got < 2 && spins < 100; spins++) {
        poll(&pfd, 1, 100);
        for (lmca_completion_t *c = lmca_pool_drain(p), *next; c; c = next) {
            next = c->next;
            got++;
            lmca_completion_free(c);
        }
    }
    ASSERT_EQ(got, 2);
    ASSERT_EQ(poll(&pfd, 1, 0), 0); /* drained: not readable */
    ASSERT(lmca_pool_drain(p) == NULL);
    lmca_pool_destroy(p);
    lmca_close(h);
}

TEST(lookups_overtake_queued_stores)
{
    /* One worker, busy with a 64 MiB store (17 segment tasks in the PUT band):
       a lookup submitted behind it runs before the store's remaining segments,
       and a small store submitted after the lookup finishes last. */
    lmca_t *h = th_open("lmcache");
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    size_t big = 64 * MIB, small = 100;
    uint8_t *buf = calloc(1, big);
    void *bufs[1] = {buf};
    size_t bl[1] = {big}, sl[1] = {small};
    const char *kb = th_key("big"), *ks = th_key("small");
    uint64_t order[3];

    ASSERT_RC(lmca_pool_open(h, 1, &p, &err), LMCA_OK, &err);
    uint64_t put_big = submit(p, LMCA_OP_SET, 1, &kb, bufs, bl);
    uint64_t lookup = submit(p, LMCA_OP_EXISTS, 1, &kb, NULL, NULL);
    uint64_t put_small = submit(p, LMCA_OP_SET, 1, &ks, bufs, sl);
    collect(p, 3, order);
    ASSERT_EQ(order[0], lookup);
    ASSERT_EQ(order[1], put_big);
    ASSERT_EQ(order[2], put_small);
    free(buf);
    lmca_pool_destroy(p);
    lmca_close(h);
}

TEST(shutdown_completes_every_accepted_batch_once)
{
    lmca_t *h = th_open("small");
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    size_t len = 3 * MIB;
    uint8_t *buf = calloc(1, len);
    void *bufs[1] = {buf};
    size_t lens[1] = {len};
    const char *keys[20];
    uint64_t ids[20];
    int seen[21] = {0}, canceled = 0;

    ASSERT_RC(lmca_pool_open(h, 1, &p, &err), LMCA_OK, &err);
    for (int i = 0; i < 20; i++) {
        keys[i] = th_key("close");
        ids[i] = submit(p, LMCA_OP_SET, 1, &keys[i], bufs, lens);
        ASSERT_EQ(ids[i], i + 1);
    }
    lmca_pool_shutdown(p);
    for (lmca_completion_t *c = lmca_pool_drain(p), *next; c; c = next) {
        next = c->next;
        ASSERT(c->id >= 1 && c->id <= 20);
        seen[c->id]++;
        canceled += c->status == LMCA_ECANCELED;
        ASSERT(c->status == LMCA_OK || c->status == LMCA_ECANCELED);
        lmca_completion_free(c);
    }
    for (int i = 1; i <= 20; i++)
        ASSERT_EQ(seen[i], 1);
    ASSERT(canceled > 0); /* one worker cannot have stored 60 MiB already */
    lmca_batch_t b = {.op = LMCA_OP_EXISTS, .n = 1, .keys = keys};
    uint64_t id = 0;
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_ECANCELED, &err);
    ASSERT(lmca_pool_drain(p) == NULL); /* a refused submit never completes */
    lmca_pool_destroy(p);
    free(buf);
    lmca_close(h);
}

TEST(bad_submits_fail_and_never_complete)
{
    lmca_t *h = th_open("lmcache");
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    const char *keys[2] = {"fine", NULL};
    void *bufs[2] = {NULL, NULL};
    size_t lens[2] = {10, 10};
    uint64_t id = 0;
    lmca_batch_t b = {.op = LMCA_OP_GET, .n = 1, .keys = keys, .bufs = bufs, .lens = lens};

    ASSERT_RC(lmca_pool_open(h, 0, &p, &err), LMCA_EINVAL, &err);
    ASSERT_RC(lmca_pool_open(h, 2, &p, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "NULL buffer");
    b.op = LMCA_OP_EXISTS, b.n = 2;
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "key is NULL");
    b.op = (lmca_op)99;
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_EINVAL, &err);
    b.op = LMCA_OP_EXISTS, b.n = 1, b.prio = (lmca_prio)7;
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_EINVAL, &err);
    lmca_pool_shutdown(p);
    ASSERT(lmca_pool_drain(p) == NULL);
    lmca_pool_stats_t st;
    lmca_pool_stats(p, &st);
    ASSERT_EQ(st.submitted, 0);
    lmca_pool_destroy(p);
    lmca_close(h);
}

/* Opens a handle and a pool of 4, checks their threads run, closes both. */
static void
open_and_close(int before)
{
    lmca_t *h = th_open("lmcache");
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};

    ASSERT_RC(lmca_pool_open(h, 4, &p, &err), LMCA_OK, &err);
    ASSERT(th_threads() >= before + 4 + 1); /* the workers and the client's tend thread */
    lmca_pool_destroy(p);
    lmca_close(h);
}

TEST(destroy_and_close_leave_no_thread_behind)
{
    /* A first round lets threads that start once per process (a sanitizer's
       own, under TSan) exist before counting. */
    open_and_close(th_threads());
    int before = th_threads();
    open_and_close(before);
    ASSERT_EQ(th_threads(), before);
}

/* A put whose segment tasks a shutdown cancels is aborted like a failed one:
   the segments its running parts wrote are removed. */
TEST(shutdown_aborts_puts_cut_short)
{
    lmca_t *h = th_open("small");
    lmca_pool_t *p = NULL;
    const char *key = th_key("cut");
    size_t len = 64 * MIB; /* 69 segments on a 1 MiB cap: more than 5 ms of writing */
    void *buf = calloc(1, len);
    lmca_batch_t b = {.op = LMCA_OP_SET, .n = 1, .keys = &key, .bufs = &buf, .lens = &len};
    lmca_err_t err = {0};
    lmca_stats_t st;
    uint64_t id;

    ASSERT_RC(lmca_pool_open(h, 1, &p, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_OK, &err);
    usleep(5000); /* some parts have run, others wait: both must clean up */
    lmca_pool_shutdown(p);
    lmca_completion_t *c = lmca_pool_drain(p);
    ASSERT(c != NULL && c->id == id && c->status == LMCA_ECANCELED && c->results[0] == 0);
    lmca_completion_free(c);
    for (uint32_t i = 0; i < 69; i++) {
        char reckey[LMCA_KEY_MAX + 16];
        snprintf(reckey, sizeof reckey, "%s|s|%u", key, i);
        ASSERT_EQ(th_record_ttl("small", reckey, NULL), 2);
    }
    lmca_stats(h, &st);
    ASSERT_EQ(st.puts_aborted, 1);
    lmca_pool_destroy(p);
    free(buf);
    lmca_close(h);
}

/* STAT reads the metadata (md included) and holds a small chunk's payload;
   FILL places it, or reads the segments, into buffers sized from the metadata.
   A small chunk is read once. */
TEST(stat_then_fill_reads_each_chunk_once)
{
    lmca_t *h = th_open("small");
    lmca_pool_t *p = NULL;
    const char *keys[3] = {th_key("stat"), th_key("stat"), th_key("absent")};
    size_t lens[2] = {1000, 3 * MIB};
    void *in[2] = {malloc(lens[0]), malloc(lens[1])};
    lmca_put_opts_t opts[2] = {{.md = "md-small", .md_len = 8}, {.md = "md-big", .md_len = 6}};
    lmca_batch_t set = {.op = LMCA_OP_SET, .n = 2, .keys = keys, .bufs = in, .lens = lens,
                        .opts = opts};
    lmca_batch_t stat = {.op = LMCA_OP_STAT, .n = 3, .keys = keys};
    lmca_get_t gets[2];
    lmca_err_t err = {0};
    uint64_t id;

    for (int i = 0; i < 2; i++)
        th_fill(in[i], lens[i], (uint32_t)i + 60);
    ASSERT_RC(lmca_pool_open(h, 2, &p, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_submit(p, &set, &id, &err), LMCA_OK, &err);
    lmca_completion_free(wait_for(p, id, NULL, NULL));
    long long reads = th_fixture_stat("reads"); /* -1 on a real server */
    ASSERT_RC(lmca_pool_submit(p, &stat, &id, &err), LMCA_OK, &err);
    lmca_completion_t *c = wait_for(p, id, NULL, NULL);
    ASSERT_DONE_OK(c);
    ASSERT(c->results[0] && c->results[1] && !c->results[2] && c->gets != NULL);
    ASSERT(c->gets[0].held != NULL && c->gets[1].held == NULL && c->gets[1].meta.nseg == 4);
    for (int i = 0; i < 2; i++) {
        ASSERT(memcmp(c->gets[i].meta.md, opts[i].md, opts[i].md_len) == 0);
        gets[i] = c->gets[i]; /* take them: the completion lets go */
        c->gets[i].held = NULL, c->gets[i].meta.md = NULL;
    }
    lmca_completion_free(c);

    void *out[2] = {malloc(lens[0]), malloc(lens[1] + 100)};
    size_t caps[2] = {lens[0] - 1, lens[1] + 100};
    lmca_batch_t fill = {.op = LMCA_OP_FILL, .n = 2, .keys = keys, .gets = gets, .bufs = out,
                         .lens = caps};
    ASSERT_RC(lmca_pool_submit(p, &fill, &id, &err), LMCA_EINVAL, &err); /* 999 < 1000 */
    ASSERT(gets[0].held != NULL); /* a refused FILL leaves the gets to the caller */
    caps[0] = lens[0];
    ASSERT_RC(lmca_pool_submit(p, &fill, &id, &err), LMCA_OK, &err);
    ASSERT(gets[0].held == NULL && gets[0].meta.md == NULL); /* taken over */
    c = wait_for(p, id, NULL, NULL);
    ASSERT_DONE_OK(c);
    ASSERT(c->results[0] && c->results[1]);
    lmca_completion_free(c);
    for (int i = 0; i < 2; i++) {
        ASSERT(memcmp(out[i], in[i], lens[i]) == 0);
        lmca_get_release(&gets[i]); /* harmless: nothing is left in them */
    }
    if (reads >= 0) /* three meta records and the four segments of the big one */
        ASSERT_EQ(th_fixture_stat("reads") - reads, 3 + 4);
    lmca_pool_destroy(p);
    for (int i = 0; i < 2; i++)
        free(in[i]), free(out[i]);
    lmca_close(h);
}

TEST(touch_pins_through_the_pool)
{
    lmca_t *h = th_open("small");
    lmca_pool_t *p = NULL;
    const char *keys[2] = {th_key("touch"), th_key("absent")};
    size_t len = 2 * MIB;
    void *buf = calloc(1, len);
    lmca_batch_t touch = {.op = LMCA_OP_TOUCH, .n = 2, .keys = keys, .pin = true};
    lmca_meta_t m;
    lmca_err_t err = {0};
    uint64_t id;

    ASSERT_RC(lmca_put(h, keys[0], buf, len, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_open(h, 2, &p, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_submit(p, &touch, &id, &err), LMCA_OK, &err);
    lmca_completion_t *c = wait_for(p, id, NULL, NULL);
    ASSERT_DONE_OK(c);
    ASSERT(c->results[0] == 1 && c->results[1] == 0);
    lmca_completion_free(c);
    ASSERT_RC(lmca_stat(h, keys[0], &m, &err), LMCA_OK, &err);
    ASSERT(m.pin && m.ttl == UINT32_MAX);
    lmca_meta_clear(&m);
    ASSERT_RC(lmca_remove(h, keys[0], &err), LMCA_OK, &err); /* pinned */
    lmca_pool_destroy(p);
    free(buf);
    lmca_close(h);
}

TEST(huge_batches_are_refused_before_reading_keys)
{
    lmca_t *h = th_open("lmcache");
    lmca_pool_t *p = NULL;
    const char *one = "k";
    lmca_batch_t b = {.op = LMCA_OP_EXISTS, .n = SIZE_MAX / 16, .keys = &one};
    lmca_err_t err = {0};
    uint64_t id = 0;

    ASSERT_RC(lmca_pool_open(h, 1, &p, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "keys (at most");
    lmca_pool_destroy(p);
    lmca_close(h);
}

/* Defect: an asynchronous set could not pass pin or md, which a blocking put
   could. */
TEST(set_carries_pin_md_and_tags)
{
    lmca_t *h = th_open("small");
    lmca_pool_t *p = NULL;
    const char *keys[2] = {th_key("opts"), th_key("opts")};
    size_t lens[2] = {1000, 3 * MIB}; /* a tile, and a chunk of segments */
    void *bufs[2] = {calloc(1, lens[0]), calloc(1, lens[1])};
    lmca_put_opts_t opts[2] = {{.md = "md-0", .md_len = 4, .pin = true, .serde = "naive"},
                               {.md = "md-one", .md_len = 6, .pin = true, .ttl_class = "corpus"}};
    lmca_batch_t b = {.op = LMCA_OP_SET, .n = 2, .keys = keys, .bufs = bufs, .lens = lens,
                      .opts = opts};
    lmca_err_t err = {0};
    lmca_meta_t m;
    uint64_t id;

    ASSERT_RC(lmca_pool_open(h, 2, &p, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_OK, &err);
    lmca_completion_t *c = wait_for(p, id, NULL, NULL);
    ASSERT_DONE_OK(c);
    lmca_completion_free(c);
    for (int i = 0; i < 2; i++) {
        ASSERT_RC(lmca_stat(h, keys[i], &m, &err), LMCA_OK, &err);
        ASSERT(m.pin && m.ttl == UINT32_MAX);
        ASSERT(m.md_len == opts[i].md_len && memcmp(m.md, opts[i].md, m.md_len) == 0);
        lmca_meta_clear(&m);
    }
    ASSERT_RC(lmca_stat(h, keys[0], &m, &err), LMCA_OK, &err);
    ASSERT(strcmp(m.serde, "naive") == 0);
    lmca_meta_clear(&m);
    ASSERT_RC(lmca_stat(h, keys[1], &m, &err), LMCA_OK, &err);
    ASSERT(strcmp(m.ttl_class, "corpus") == 0 && m.nseg == 4);
    lmca_meta_clear(&m);
    for (int i = 0; i < 2; i++) /* pinned: they would stay forever */
        ASSERT_RC(lmca_remove(h, keys[i], &err), LMCA_OK, &err);
    lmca_pool_destroy(p);
    free(bufs[0]);
    free(bufs[1]);
    lmca_close(h);
}

/* Defect: put took an empty payload and the asynchronous set refused it; both
   store it now, and both read it back as a hit. */
TEST(empty_payloads_are_chunks_on_every_surface)
{
    lmca_t *h = th_open("lmcache");
    lmca_pool_t *p = NULL;
    const char *keys[2] = {th_key("empty"), th_key("empty")};
    size_t lens[2] = {0, 0}, got = 9;
    void *bufs[2] = {NULL, NULL};
    lmca_batch_t b = {.op = LMCA_OP_SET, .n = 1, .keys = keys, .bufs = bufs, .lens = lens};
    lmca_err_t err = {0};
    uint64_t id;

    ASSERT_RC(lmca_pool_open(h, 2, &p, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_OK, &err);
    lmca_completion_t *c = wait_for(p, id, NULL, NULL);
    ASSERT(c->status == LMCA_OK && c->results[0] == 1);
    lmca_completion_free(c);
    ASSERT_RC(lmca_put(h, keys[1], NULL, 0, NULL, &err), LMCA_OK, &err);
    b.op = LMCA_OP_GET, b.n = 2;
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_OK, &err);
    c = wait_for(p, id, NULL, NULL);
    ASSERT(c->status == LMCA_OK && c->results[0] == 1 && c->results[1] == 1);
    lmca_completion_free(c);
    ASSERT_RC(lmca_get(h, keys[0], NULL, 0, &got, NULL, &err), LMCA_OK, &err);
    ASSERT_EQ(got, 0);
    lmca_pool_destroy(p);
    lmca_close(h);
}

TEST(server_errors_fail_the_batch_but_keep_per_key_results)
{
    lmca_t *h;
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    const char *keys[2] = {th_key("ok"), th_key("bad")};
    static uint8_t a[200], b[200];
    void *bufs[2] = {a, b};
    size_t lens[2] = {sizeof a, sizeof b};
    char reckey[LMCA_KEY_MAX + 16], spec[160];
    lmca_completion_t *c;

    th_need_fixture("fault injection");
    h = th_open("lmcache");
    ASSERT_RC(lmca_pool_open(h, 2, &p, &err), LMCA_OK, &err);
    lmca_completion_free(wait_for(p, submit(p, LMCA_OP_SET, 2, keys, bufs, lens), NULL, NULL));
    snprintf(reckey, sizeof reckey, "%s|m", keys[1]);
    snprintf(spec, sizeof spec, "fixture-fault:kind=result;code=14;digest=%s",
             th_digest_hex(TH_SET, reckey));
    ASSERT(strcmp(th_info(spec), "ok") == 0);
    c = wait_for(p, submit(p, LMCA_OP_GET, 2, keys, bufs, lens), NULL, NULL);
    ASSERT_EQ(c->status, LMCA_EBUSY);
    ASSERT_CONTAINS(c->error, keys[1]);
    ASSERT_EQ(c->results[0], 1);
    ASSERT_EQ(c->results[1], 0);
    lmca_completion_free(c);
    lmca_pool_destroy(p);
    lmca_close(h);
}

/* Puts `len` bytes under `key` through a handle of its own, with one setting
   changed: another writer's plan. */
static void
put_planned(const char *key, const void *buf, size_t len, const char *setting, const char *value)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_t *w = NULL;

    th_config(&cfg, "lmcache");
    ASSERT_RC(lmca_config_set(&cfg, setting, value, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_open(&cfg, &w, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(w, key, buf, len, NULL, &err), LMCA_OK, &err);
    lmca_close(w);
}

/* A get knows its chunk's size, so it reads the meta record and the segments of
   its own plan at once; the meta record confirms them, or they are read again
   (another writer's plan, one record, a size that is not the chunk's). */
TEST(gets_of_segments_read_the_meta_record_beside_them)
{
    lmca_t *h = th_open("lmcache");
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    size_t len = 2 * lmca_limits(h)->target_segment_bytes + 1000;
    char value[32];
    const char *keys[4] = {th_key("guess"), th_key("guess"), th_key("guess"), th_key("absent")};
    uint8_t *in = malloc(len), *out[4];
    void *bufs[4];
    size_t lens[4] = {len, len, len, len};
    lmca_stats_t st;

    th_fill(in, len, 77);
    ASSERT_RC(lmca_put(h, keys[0], in, len, NULL, &err), LMCA_OK, &err);
    snprintf(value, sizeof value, "%llu", 2ull * lmca_limits(h)->target_segment_bytes);
    put_planned(keys[1], in, len, "target_segment_bytes", value); /* fewer segments */
    snprintf(value, sizeof value, "%llu", (unsigned long long)lmca_limits(h)->max_segment_bytes);
    put_planned(keys[2], in, len, "single_record_threshold_bytes", value); /* one record */
    ASSERT_RC(lmca_pool_open(h, 4, &p, &err), LMCA_OK, &err);
    for (int i = 0; i < 4; i++)
        bufs[i] = out[i] = calloc(1, len);
    lmca_completion_t *c = wait_for(p, submit(p, LMCA_OP_GET, 4, keys, bufs, lens), NULL, NULL);
    ASSERT_DONE_OK(c);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(c->results[i], 1);
        ASSERT(memcmp(in, out[i], len) == 0);
    }
    ASSERT_EQ(c->results[3], 0);
    lmca_completion_free(c);
    lmca_stats(h, &st);
    ASSERT_EQ(st.guesses_confirmed, 1);
    ASSERT_EQ(st.guesses_missed, 2);

    lens[0] = len + 1; /* not the chunk's size: a miss, as for any get */
    c = wait_for(p, submit(p, LMCA_OP_GET, 1, keys, bufs, lens), NULL, NULL);
    ASSERT_DONE_OK(c);
    ASSERT_EQ(c->results[0], 0);
    lmca_completion_free(c);
    lmca_pool_destroy(p);
    for (int i = 0; i < 4; i++)
        free(out[i]);
    free(in);
    lmca_close(h);
}

/* A put the server refuses for a while (device overload) waits in the queue,
   not on its worker: with one worker, a get submitted meanwhile completes
   first, and the put lands once the refusals stop. */
TEST(refused_puts_wait_in_the_queue_and_leave_the_worker_to_gets)
{
    lmca_t *h;
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *put_key[1] = {th_key("refused")}, *get_key[1] = {th_key("meanwhile")};
    size_t put_len[1] = {1 * MIB}, get_len[1] = {3000};
    uint8_t *big = malloc(put_len[0]), small[3000], out[3000];
    void *put_buf[1] = {big}, *get_buf[1] = {out};
    uint64_t set_id, get_id, order[2];
    size_t got;

    th_need_fixture("fault injection");
    th_info("fixture-reset");
    h = th_open("lmcache");
    th_fill(small, sizeof small, 2);
    ASSERT_RC(lmca_put(h, get_key[0], small, sizeof small, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_open(h, 1, &p, &err), LMCA_OK, &err);
    th_fill(big, put_len[0], 3);
    ASSERT(strcmp(th_info("fixture-fault:kind=result;code=18;op=write;count=8"), "ok") == 0);
    set_id = submit(p, LMCA_OP_SET, 1, put_key, put_buf, put_len);
    for (int i = 0; i < 200; i++) { /* until the put has been refused once */
        lmca_stats(h, &st);
        if (st.write_retries > 0)
            break;
        usleep(5000);
    }
    ASSERT(st.write_retries > 0);
    get_id = submit(p, LMCA_OP_GET, 1, get_key, get_buf, get_len);
    collect(p, 2, order);
    ASSERT_EQ(order[0], get_id);
    ASSERT_EQ(order[1], set_id);
    lmca_stats(h, &st);
    ASSERT_EQ(st.puts_retried, 1);
    ASSERT(memcmp(out, small, sizeof small) == 0);
    lmca_pool_destroy(p);
    ASSERT_RC(lmca_get(h, put_key[0], big, put_len[0], &got, NULL, &err), LMCA_OK, &err);
    free(big);
    lmca_close(h);
}

/* A put whose segments landed and whose commit waits out a refusal is canceled
   by a shutdown, and its segments are taken back. */
TEST(shutdown_cancels_a_waiting_commit_and_removes_its_segments)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_pool_t *p = NULL;
    lmca_err_t err = {0};
    const char *keys[1] = {th_key("waiting")};
    char reckey[LMCA_KEY_MAX + 16], spec[160];
    size_t lens[1];
    uint8_t *buf;
    void *bufs[1];
    lmca_completion_t *c;
    lmca_stats_t st;

    th_need_fixture("fault injection");
    th_info("fixture-reset");
    th_config_segments(&cfg);
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    lens[0] = 2 * lmca_limits(h)->target_segment_bytes + 1000; /* three segments */
    bufs[0] = buf = malloc(lens[0]);
    th_fill(buf, lens[0], 4);
    snprintf(reckey, sizeof reckey, "%s|m", keys[0]);
    snprintf(spec, sizeof spec, "fixture-fault:kind=result;code=8;op=write;digest=%s",
             th_digest_hex(TH_SET, reckey));
    ASSERT(strcmp(th_info(spec), "ok") == 0);
    ASSERT_RC(lmca_pool_open(h, 2, &p, &err), LMCA_OK, &err);
    uint64_t id = submit(p, LMCA_OP_SET, 1, keys, bufs, lens);
    for (int i = 0; i < 200; i++) { /* until the commit has been refused */
        lmca_stats(h, &st);
        if (st.write_retries > 0)
            break;
        usleep(5000);
    }
    ASSERT(st.write_retries > 0);
    lmca_pool_shutdown(p);
    c = lmca_pool_drain(p);
    ASSERT(c != NULL && c->id == id && c->status == LMCA_ECANCELED && c->results[0] == 0);
    lmca_completion_free(c);
    for (uint32_t i = 0; i < 3; i++) {
        snprintf(reckey, sizeof reckey, "%s|s|%u", keys[0], i);
        ASSERT_EQ(th_record_ttl("small", reckey, NULL), 2);
    }
    th_info("fixture-clear-faults");
    lmca_pool_destroy(p);
    free(buf);
    lmca_close(h);
}

TEST_LIST = {
    T(batches_round_trip_with_per_key_results),
    T(get_into_a_buffer_of_another_size_is_a_miss),
    T(eventfd_signals_and_drain_clears_it),
    T(lookups_overtake_queued_stores),
    T(shutdown_completes_every_accepted_batch_once),
    T(bad_submits_fail_and_never_complete),
    T(server_errors_fail_the_batch_but_keep_per_key_results),
    T(destroy_and_close_leave_no_thread_behind),
    T(shutdown_aborts_puts_cut_short),
    T(stat_then_fill_reads_each_chunk_once),
    T(touch_pins_through_the_pool),
    T(huge_batches_are_refused_before_reading_keys),
    T(set_carries_pin_md_and_tags),
    T(empty_payloads_are_chunks_on_every_surface),
    T(gets_of_segments_read_the_meta_record_beside_them),
    T(refused_puts_wait_in_the_queue_and_leave_the_worker_to_gets),
    T(shutdown_cancels_a_waiting_commit_and_removes_its_segments),
};
TEST_MAIN()
