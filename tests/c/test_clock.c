/*
 * test_clock.c - the void-time clock every writer of a namespace shares
 * (src/engine/clock.c): handles place their chunks in one order, at most
 * per_second records a second, through the counter record in set "lmca_clock";
 * a clock record that is not ours is replaced; an unreachable one leaves each
 * handle its own clock, and no store fails for it. Puts are paced by the
 * stores' clock only: chunks moved to the head, and the places of a chunk that
 * its racing steps reserved twice, do not hold the stores back.
 *
 * Two handles in one process stand in for two processes: each has its own
 * client, lease and counters, and shares nothing with the other but the server.
 * tests/ext/test_clock_processes.py does the same with processes.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "lmca_async.h"

#define PUTS 8

static lmca_t *
open_clocked(uint32_t per_second, bool shared)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};

    th_config(&cfg, "small");
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = per_second;
    cfg.shared_clock = shared;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    return h;
}

/* Puts PUTS one-record chunks, alternating between h[0] and h[1], and reads
   back each one's TTL (seconds left) in `ttl`, all reads in a row. */
static void
alternate(lmca_t *h[2], uint32_t ttl[PUTS])
{
    uint8_t buf[64] = {7};
    char keys[PUTS][128];
    lmca_meta_t meta;
    lmca_err_t err = {0};

    for (int i = 0; i < PUTS; i++) {
        snprintf(keys[i], sizeof keys[i], "%s", th_key("clock"));
        ASSERT_RC(lmca_put(h[i % 2], keys[i], buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    }
    for (int i = 0; i < PUTS; i++) {
        ASSERT_RC(lmca_stat(h[0], keys[i], &meta, &err), LMCA_OK, &err);
        ttl[i] = meta.ttl;
    }
}

TEST(two_handles_share_one_clock_in_write_order)
{
    lmca_t *h[2] = {open_clocked(1, true), open_clocked(1, true)};
    uint32_t ttl[PUTS];
    lmca_stats_t st[2];

    /* One record a second: whichever handle placed it, each put gets a second
       of its own, one after the other (a read that crosses a second: one off). */
    alternate(h, ttl);
    for (int i = 1; i < PUTS; i++) {
        ASSERT(ttl[i] >= ttl[i - 1]);
        ASSERT(ttl[i] <= ttl[i - 1] + 2);
    }
    ASSERT(ttl[PUTS - 1] >= ttl[0] + PUTS - 2);
    lmca_stats(h[0], &st[0]);
    lmca_stats(h[1], &st[1]);
    ASSERT(st[0].clock_reservations > 0 && st[1].clock_reservations > 0);
    ASSERT_EQ(st[0].clock_local + st[1].clock_local, 0);
    /* The clock ran ahead of now + TTL, so the two waited in turn. */
    ASSERT(st[0].puts_paced + st[1].puts_paced > 0);
    lmca_close(h[0]);
    lmca_close(h[1]);
}

TEST(handles_on_their_own_clocks_share_seconds)
{
    lmca_t *h[2] = {open_clocked(1, false), open_clocked(1, false)};
    uint32_t ttl[PUTS];
    lmca_stats_t st;

    /* What the shared clock prevents: two writers each giving every second a
       record, so the pairs written together share a second, and the eight
       span half the seconds they would on one clock. */
    alternate(h, ttl);
    for (int i = 1; i < PUTS; i += 2)
        ASSERT(ttl[i] + 1 >= ttl[i - 1] && ttl[i] <= ttl[i - 1] + 1);
    ASSERT(ttl[PUTS - 1] <= ttl[0] + PUTS / 2 + 1);
    lmca_stats(h[0], &st);
    ASSERT_EQ(st.clock_reservations, 0);
    ASSERT(st.clock_local > 0);
    lmca_close(h[0]);
    lmca_close(h[1]);
}

TEST(a_clock_record_that_is_not_ours_is_replaced)
{
    lmca_t *h;
    uint8_t buf[64] = {1};
    lmca_meta_t meta;
    lmca_stats_t st;
    lmca_err_t err = {0};
    th_bin junk = TH_STR("next_us", "not a clock");
    const char *key = th_key("junk");

    ASSERT_EQ(th_plant_in("small", "lmca_clock", "void-clock", &junk, 1), 0);
    h = open_clocked(4, true);
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_resets, 1);
    ASSERT_EQ(st.clock_local, 0);
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    ASSERT(meta.ttl >= 98 && meta.ttl <= 104); /* now + TTL: the clock starts again */
    /* A clock far ahead (an hour and more) is not ours either. */
    th_bin ahead = TH_INT("next_us", ((int64_t)time(NULL) + 100 + 7200) * 1000000);
    ASSERT_EQ(th_plant_in("small", "lmca_clock", "void-clock", &ahead, 1), 0);
    usleep(150 * 1000); /* past the lease */
    key = th_key("junk");
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    ASSERT(meta.ttl >= 98 && meta.ttl <= 104);
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_resets, 2);
    lmca_close(h);
}

TEST(an_unreachable_clock_leaves_each_handle_its_own)
{
    lmca_t *h;
    uint8_t buf[64] = {1}, out[64];
    size_t got;
    lmca_stats_t st;
    lmca_err_t err = {0};
    char rule[160];

    th_need_fixture("fault injection on the clock record");
    snprintf(rule, sizeof rule, "kind=result;code=9;digest=%s",
             th_digest_hex("lmca_clock", "void-clock"));
    th_fault(rule);
    h = open_clocked(4, true);
    for (int i = 0; i < 3; i++) {
        const char *key = th_key("lonely");
        ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
        ASSERT_RC(lmca_get(h, key, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
        usleep(120 * 1000); /* each put past the last one's lease */
    }
    th_info("fixture-clear-faults");
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_local, 3);
    lmca_close(h);
}

TEST(moves_lead_the_clock_and_do_not_pace_the_stores)
{
    lmca_t *h[2] = {open_clocked(4, true), open_clocked(4, true)};
    uint8_t buf[64] = {3};
    lmca_meta_t meta;
    lmca_stats_t st;
    lmca_err_t err = {0};
    const char *moved = th_key("moved"), *key;
    uint32_t moved_ttl;

    ASSERT_RC(lmca_put(h[0], moved, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    /* 24 moves at 4 records a second: 6 s of clock, twice the lead that puts
       may run ahead by. Counted as stores, they would pace the next put 3 s. */
    for (int i = 0; i < 24; i++)
        ASSERT_RC(lmca_touch(h[0], moved, false, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_stat(h[0], moved, &meta, &err), LMCA_OK, &err);
    moved_ttl = meta.ttl;
    ASSERT(moved_ttl >= 100 + 4); /* the moves led the clock */
    key = th_key("after-moves");
    ASSERT_RC(lmca_put(h[1], key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    lmca_stats(h[1], &st);
    ASSERT_EQ(st.puts_paced, 0);
    /* ... and the store still comes after the moved chunk in the order. */
    ASSERT_RC(lmca_stat(h[1], key, &meta, &err), LMCA_OK, &err);
    ASSERT(meta.ttl >= moved_ttl);
    lmca_close(h[0]);
    lmca_close(h[1]);
}

TEST(a_refused_clock_paces_stores_by_their_own_clock)
{
    lmca_t *h[2] = {open_clocked(4, true), open_clocked(4, true)};
    uint8_t buf[64] = {3};
    lmca_stats_t st;
    lmca_err_t err = {0};
    const char *moved = th_key("moved");
    char rule[160];

    th_need_fixture("fault injection on the clock record");
    ASSERT_RC(lmca_put(h[0], moved, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    for (int i = 0; i < 24; i++) /* 6 s of moves ahead of now + TTL */
        ASSERT_RC(lmca_touch(h[0], moved, false, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h[1], th_key("shared"), buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    /* Now the clock's record refuses (as a namespace at stop-writes refuses its
       write): h[1] places on its own clocks, its void clock 6 s ahead, and its
       stores' clock where the shared one was. */
    snprintf(rule, sizeof rule, "kind=result;code=8;digest=%s",
             th_digest_hex("lmca_clock", "void-clock"));
    th_fault(rule);
    usleep(150 * 1000); /* past the lease */
    ASSERT_RC(lmca_put(h[1], th_key("local"), buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    th_info("fixture-clear-faults");
    lmca_stats(h[1], &st);
    ASSERT(st.clock_local > 0);
    ASSERT_EQ(st.puts_paced, 0);
    lmca_close(h[0]);
    lmca_close(h[1]);
}

/* Puts n chunks of three segments through a pool of `workers`, in one batch. */
static void
pool_put(lmca_t *h, int workers, int n)
{
    enum { N = 16, LEN = 3 * 64 * 1024 };
    static uint8_t buf[LEN];
    lmca_pool_t *p = NULL;
    const char *keys[N];
    void *bufs[N];
    size_t lens[N];
    lmca_err_t err = {0};
    uint64_t id;
    bool done = false;

    ASSERT(n <= N);
    for (int i = 0; i < n; i++)
        keys[i] = th_key("raced"), bufs[i] = buf, lens[i] = LEN;
    lmca_batch_t b = {.op = LMCA_OP_SET, .n = (size_t)n, .keys = keys, .bufs = bufs,
                      .lens = lens};
    ASSERT_RC(lmca_pool_open(h, workers, &p, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_OK, &err);
    for (int spins = 0; !done && spins < 300; spins++) {
        struct pollfd pfd = {.fd = lmca_pool_fd(p), .events = POLLIN};
        poll(&pfd, 1, 100);
        for (lmca_completion_t *c = lmca_pool_drain(p), *next; c; c = next) {
            next = c->next;
            if (c->id == id) {
                ASSERT(c->status == LMCA_OK);
                done = true;
            }
            lmca_completion_free(c);
        }
    }
    ASSERT(done);
    lmca_pool_destroy(p);
}

TEST(a_chunk_whose_steps_race_is_paced_as_one)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_stats_t st;
    lmca_err_t err = {0};

    /* 12 chunks of 4 records at 20 records a second: 2.4 s of clock, within
       the 3 s lead. Each chunk's steps on 4 workers may each reserve its place;
       counted every time, the batch would run up to 9.6 s ahead. */
    th_config_segments(&cfg);
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = 20;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    pool_put(h, 4, 12);
    pool_put(h, 4, 1); /* a new lease, which gives the first one's rest back */
    lmca_stats(h, &st);
    ASSERT_EQ(st.puts_paced, 0);
    lmca_close(h);
}

TEST_LIST = {
    T(two_handles_share_one_clock_in_write_order),
    T(handles_on_their_own_clocks_share_seconds),
    T(a_clock_record_that_is_not_ours_is_replaced),
    T(an_unreachable_clock_leaves_each_handle_its_own),
    T(moves_lead_the_clock_and_do_not_pace_the_stores),
    T(a_chunk_whose_steps_race_is_paced_as_one),
    T(a_refused_clock_paces_stores_by_their_own_clock),
};
TEST_MAIN()
