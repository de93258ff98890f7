/*
 * test_clock.c - the void-time clock every writer of a namespace shares
 * (src/engine/clock.c): handles place their chunks in one order, at most
 * per_second records a second, through the clock records in set "lmca_clock";
 * a clock record that is not ours is replaced; one that cannot be reached hands
 * over to the next, which goes on from where the order was, at half the rate;
 * with none, each handle places on its own at an eighth, and no store fails for
 * it. Writers with different TTLs share one. Puts are paced by the stores'
 * clock only: chunks moved to the head, and the places of a chunk that its
 * racing steps reserved twice, do not hold the stores back; one due past
 * max_put_wait_ms is dropped, and takes no place. A handle's threads reserve one at a time, moves
 * too.
 *
 * Two handles in one process stand in for two processes: each has its own
 * client, lease and counters, and shares nothing with the other but the server.
 * tests/ext/test_clock_processes.py does the same with processes.
 */
#include <poll.h>
#include <pthread.h>
#include <string.h>
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

/* Starts the namespace's clock anew: another test may have left it ahead, or
   its TTL larger. */
static void
fresh_clock(void)
{
    th_bin fresh = TH_INT("next_us", 1);
    ASSERT_EQ(th_plant_in("small", "lmca_clock", "void-clock", &fresh, 1), 0);
}

/* A fault rule that answers `code` for clock record `key`. */
static void
refuse_clock(const char *key, int code)
{
    char rule[160];
    snprintf(rule, sizeof rule, "kind=result;code=%d;digest=%s", code,
             th_digest_hex("lmca_clock", key));
    th_fault(rule);
}

/* Puts one one-record chunk on `h` and returns its TTL as the server keeps it. */
static uint32_t
put_ttl(lmca_t *h, const char *tag)
{
    uint8_t buf[64] = {1};
    lmca_meta_t meta;
    lmca_err_t err = {0};
    const char *key = th_key(tag);

    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    return meta.ttl;
}

TEST(a_clock_that_cannot_be_reached_hands_over_and_the_order_goes_on)
{
    lmca_t *h[2] = {open_clocked(4, true), open_clocked(4, true)};
    uint32_t before, during[3], after;
    lmca_stats_t st;

    th_need_fixture("fault injection on the clock record");
    /* Moves take h[0]'s clock 6 s ahead of now + TTL: a fallback that started
       at now + TTL would place the next stores before them. */
    before = put_ttl(h[0], "before");
    for (int i = 0; i < 6; i++)
        put_ttl(h[1], "ahead");
    refuse_clock("void-clock", 14); /* a busy key (one node here: no node to avoid) */
    usleep(150 * 1000);            /* past the leases */
    for (int i = 0; i < 3; i++) {
        during[i] = put_ttl(h[i % 2], "during");
        usleep(120 * 1000);
    }
    th_info("fixture-clear-faults");
    lmca_stats(h[0], &st);
    ASSERT(st.clock_fallbacks > 0);
    ASSERT(st.clock_busy > 0);
    ASSERT_EQ(st.clock_local, 0);
    /* The fallback went on from the furthest place either handle knew of. */
    ASSERT(during[0] + 1 >= before + 6 / 4);
    ASSERT(during[1] + 1 >= during[0] && during[2] + 1 >= during[1]);
    /* ... and the first clock, back, from where the fallback left it. */
    usleep(1100 * 1000);
    after = put_ttl(h[1], "after");
    ASSERT(after + 2 >= during[2]);
    lmca_stats(h[1], &st);
    ASSERT_EQ(st.clock_local, 0);
    lmca_close(h[0]);
    lmca_close(h[1]);
}

TEST(an_overloaded_device_is_not_a_busy_key)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_stats_t st;
    uint64_t t0;

    th_need_fixture("fault injection on the clock record");
    th_config(&cfg, "small");
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = 4;
    cfg.backpressure_ms = 800; /* how long an overload is waited out */
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    fresh_clock();
    refuse_clock("void-clock", 18); /* device overload: the node's, not the key's */
    usleep(150 * 1000);             /* past the lease */
    t0 = th_now_ms();
    put_ttl(h, "overloaded");
    th_info("fixture-clear-faults");
    lmca_stats(h, &st);
    /* Waited out on the record for backpressure_ms, as a store waits, then
       another record. */
    ASSERT(th_now_ms() - t0 >= 800);
    ASSERT(st.clock_overloaded > 0);
    ASSERT(st.clock_fallbacks > 0);
    ASSERT_EQ(st.clock_busy, 0);
    ASSERT_EQ(st.clock_local, 0);
    lmca_close(h);
}

/* A device whose write queue is full refuses every write of its node until a
   block leaves the queue: the clock's record is tried again there, not given up
   for another (on one node every other record is refused too, and the writer
   placed alone). */
TEST(a_moment_of_device_overload_is_waited_out_on_the_same_record)
{
    lmca_t *h = open_clocked(4, true);
    lmca_stats_t st;
    char rule[160];

    th_need_fixture("fault injection on the clock record");
    fresh_clock();
    snprintf(rule, sizeof rule, "kind=result;code=18;count=5;digest=%s",
             th_digest_hex("lmca_clock", "void-clock"));
    th_fault(rule);
    usleep(150 * 1000); /* past the lease */
    put_ttl(h, "overloaded");
    th_info("fixture-clear-faults");
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_overloaded, 5);
    ASSERT_EQ(st.clock_fallbacks, 0);
    ASSERT_EQ(st.clock_local, 0);
    lmca_close(h);
}

/* Refuses every clock record with `code`, `count` times each (0: always). */
static void
refuse_every_clock(int code, int count)
{
    char name[24], rule[200];

    for (unsigned i = 0; i < 4; i++) {
        snprintf(name, sizeof name, i == 0 ? "void-clock" : "void-clock-%u", i);
        if (count > 0)
            snprintf(rule, sizeof rule, "kind=result;code=%d;count=%d;digest=%s", code, count,
                     th_digest_hex("lmca_clock", name));
        else
            snprintf(rule, sizeof rule, "kind=result;code=%d;digest=%s", code,
                     th_digest_hex("lmca_clock", name));
        th_fault(rule);
    }
}

/* Every clock record refused with `code` for good: the put is dropped unsent
   at max_put_wait_ms (300) with `want`, says so, and places nothing on a clock
   of its own; the handle's next put asks the shared clock again. */
static void
put_on_a_refused_clock(int code, int want, const char *says)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_stats_t st;
    uint8_t buf[64] = {1};

    th_config(&cfg, "small");
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = 4;
    cfg.max_put_wait_ms = 300;
    cfg.backpressure_ms = 3000; /* not reached: the put's own wait ends first */
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    fresh_clock();
    refuse_every_clock(code, 0);
    usleep(150 * 1000); /* past the lease */
    ASSERT_RC(lmca_put(h, th_key("refused"), buf, sizeof buf, NULL, &err), want, &err);
    ASSERT_CONTAINS(err.msg, says);
    lmca_stats(h, &st);
    ASSERT_EQ(want == LMCA_EFULL ? st.dropped_full : st.dropped_busy, 1);
    ASSERT(st.clock_overloaded > 0);
    ASSERT_EQ(st.clock_local, 0);
    th_info("fixture-clear-faults");
    put_ttl(h, "after"); /* the shared clock again, no hold on a clock of its own */
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_local, 0);
    lmca_close(h);
}

/* A put waits for load max_put_wait_ms in all, its place included: a clock
   record refused for load past that (on one node every record is on the one
   device) drops the put for load, unsent, and places nothing on a clock of its
   own; the handle's next put asks the shared clock again. Waited out to
   backpressure_ms instead, a 256 KiB put took 2.67 s on a 32 GiB device. */
TEST(a_put_whose_clock_stays_overloaded_is_dropped_at_max_put_wait_ms)
{
    th_need_fixture("fault injection on the clock records");
    put_on_a_refused_clock(18, LMCA_EBUSY, "for load (device overload) until max_put_wait_ms=300");
}

TEST(a_put_whose_clock_stays_out_of_space_is_dropped_at_max_put_wait_ms)
{
    th_need_fixture("fault injection on the clock records");
    put_on_a_refused_clock(8, LMCA_EFULL, "out of space until max_put_wait_ms=300");
}

/* At stop-writes the clock's records are refused as out of space too: the
   first put waits for them its max_put_wait_ms, finds the namespace stopped
   and closes the full gate; the puts after it do not wait on the clock. */
TEST(at_stop_writes_one_put_waits_on_the_clock_and_the_rest_do_not)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_stats_t st;
    uint8_t buf[64] = {1};
    uint64_t waits;

    th_need_fixture("stop-writes");
    th_config(&cfg, "small");
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = 4;
    cfg.max_put_wait_ms = 300;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    fresh_clock();
    th_info("fixture-stop-writes:namespace=small;on=true");
    usleep(150 * 1000); /* past the lease */
    ASSERT_RC(lmca_put(h, th_key("stopped"), buf, sizeof buf, NULL, &err), LMCA_EFULL, &err);
    lmca_stats(h, &st);
    ASSERT(st.full);
    waits = st.clock_overloaded;
    ASSERT(waits > 0);
    /* Dropped at the gate, or, placed on the handle's own clock at an eighth
       of the rate with no record answering, as due too far ahead. */
    for (int i = 0; i < 5; i++)
        ASSERT(lmca_put(h, th_key("stopped"), buf, sizeof buf, NULL, &err) != LMCA_OK);
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_overloaded, waits);
    ASSERT_EQ(st.dropped_full + st.dropped_paced, 6);
    th_info("fixture-stop-writes:namespace=small;on=false");
    lmca_close(h);
}

/* A device out of free blocks for a moment (defrag lagging the load a killed
   node's partners took over) refuses every clock record alike: going on to the
   others, 3 tries were all refused and the put was placed on the handle's own
   clock. Each record is refused 3 times here; the first goes again. */
TEST(a_clock_out_of_space_for_a_moment_is_waited_for_not_left)
{
    lmca_t *h = open_clocked(4, true);
    lmca_err_t err = {0};
    lmca_stats_t st;
    uint8_t buf[64] = {1};

    th_need_fixture("fault injection on the clock records");
    fresh_clock();
    refuse_every_clock(8, 3);
    usleep(150 * 1000); /* past the lease */
    ASSERT_RC(lmca_put(h, th_key("moment"), buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_local, 0);
    ASSERT_EQ(st.clock_fallbacks, 0);
    ASSERT(st.clock_overloaded >= 3);
    th_info("fixture-clear-faults");
    lmca_close(h);
}

TEST(with_no_clock_record_a_handle_places_alone_at_an_eighth)
{
    lmca_t *h;
    uint32_t ttl[3];
    uint8_t buf[64] = {1};
    char keys[3][128];
    lmca_meta_t meta;
    lmca_stats_t st;
    lmca_err_t err = {0};

    th_need_fixture("fault injection on the clock records");
    {
        lmca_config_t cfg;
        lmca_err_t e = {0};
        th_config(&cfg, "small");
        cfg.default_ttl_seconds = 100;
        cfg.records_per_void_second = 16;
        cfg.backpressure_ms = 0; /* no waiting out: three tries, then alone */
        ASSERT_RC(lmca_open(&cfg, &h, &e), LMCA_OK, &e);
    }
    refuse_clock("void-clock", 9);
    refuse_clock("void-clock-1", 14); /* key busy */
    refuse_clock("void-clock-2", 9);
    for (int i = 0; i < 3; i++) {
        snprintf(keys[i], sizeof keys[i], "%s", th_key("alone"));
        ASSERT_RC(lmca_put(h, keys[i], buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    }
    th_info("fixture-clear-faults");
    for (int i = 0; i < 3; i++) { /* read together: the TTLs left say the void times */
        ASSERT_RC(lmca_stat(h, keys[i], &meta, &err), LMCA_OK, &err);
        ttl[i] = meta.ttl;
    }
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_local, 3);
    /* 16 a second, an eighth of it: half a second apart, not 1/16. */
    ASSERT(ttl[2] >= ttl[0] + 1 && ttl[2] <= ttl[0] + 2);
    lmca_close(h);
}

/* While a node is lost (its records time out until the cluster re-forms
   without it and settles its partitions), the reservation tries on past its
   three tries, as a store's writes do for backpressure_ms: three of 0.5 s sent
   writers to their own clocks in a kill or a pause of a loaded cluster. */
TEST(a_lost_nodes_clock_record_is_tried_on_for_backpressure_ms)
{
    lmca_t *h = open_clocked(4, true);
    lmca_stats_t st;
    char rule[160];

    th_need_fixture("fault injection on the clock records");
    fresh_clock();
    /* Timeouts, as from a lost node, the test server's only one: every clock
       record is on it, so the record is tried again, not passed over (a
       fallback's clock trails the one the others keep), past three tries. */
    snprintf(rule, sizeof rule, "kind=result;code=9;count=5;digest=%s",
             th_digest_hex("lmca_clock", "void-clock"));
    th_fault(rule);
    usleep(150 * 1000); /* past the lease */
    put_ttl(h, "lost");
    th_info("fixture-clear-faults");
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_local, 0);
    ASSERT_EQ(st.clock_fallbacks, 0);
    ASSERT(st.clock_reservations >= 6);
    lmca_close(h);
}

TEST(writers_with_different_ttls_share_one_clock)
{
    lmca_config_t cfg;
    lmca_t *h[2] = {NULL, NULL};
    uint32_t ttl[PUTS];
    lmca_stats_t st[2];
    lmca_err_t err = {0};

    fresh_clock();
    for (int i = 0; i < 2; i++) {
        th_config(&cfg, "small");
        cfg.default_ttl_seconds = i == 0 ? 100 : 200;
        cfg.records_per_void_second = 100;
        ASSERT_RC(lmca_open(&cfg, &h[i], &err), LMCA_OK, &err);
    }
    /* The clock keeps the larger once its writer asserted it: every chunk of
       both is due about 200 s on, in write order; a clock of each TTL would
       interleave them 100 s apart. */
    put_ttl(h[1], "assert");
    alternate(h, ttl);
    for (int i = 0; i < PUTS; i++)
        ASSERT(ttl[i] >= 195 && ttl[i] <= 205);
    for (int i = 1; i < PUTS; i++)
        ASSERT(ttl[i] + 1 >= ttl[i - 1]);
    lmca_stats(h[0], &st[0]);
    lmca_stats(h[1], &st[1]);
    ASSERT_EQ(st[0].puts_paced + st[1].puts_paced, 0);
    ASSERT_EQ(st[0].clock_local + st[1].clock_local, 0);
    lmca_close(h[0]);
    lmca_close(h[1]);
    /* The larger TTL rules the clock for minutes more: later tests start anew. */
    fresh_clock();
}

/* A handle on a fresh clock of one place a second, whose puts wait 300 ms at most. */
static lmca_t *
open_paced(void)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};

    th_config(&cfg, "small");
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = 1;
    cfg.max_put_wait_ms = 300;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    fresh_clock();
    return h;
}

TEST(a_put_due_past_max_put_wait_is_dropped_not_held)
{
    lmca_t *h = open_paced();
    uint8_t buf[64] = {2};
    lmca_stats_t st;
    lmca_err_t err = {0};
    int ok = 0, dropped = 0;

    /* One a second and a lead of 3 s: the fifth put in a row is due a second
       past the lead, more than it may wait. */
    for (int i = 0; i < 6; i++) {
        uint64_t t0 = th_now_ms();
        int rc = lmca_put(h, th_key("paced"), buf, sizeof buf, NULL, &err);
        ASSERT(th_now_ms() - t0 < 300 + 250);
        if (rc == LMCA_OK) {
            ok++;
        } else {
            ASSERT_RC(rc, LMCA_EBUSY, &err);
            ASSERT(strstr(err.msg, "max_put_wait_ms=300") != NULL);
            dropped++;
        }
    }
    lmca_stats(h, &st);
    ASSERT(ok >= 3 && dropped >= 1);
    ASSERT_EQ(st.dropped_paced, (uint64_t)dropped);
    lmca_close(h);
}

TEST(a_burst_past_max_put_wait_is_dropped_before_it_takes_places)
{
    lmca_t *h = open_paced();
    uint8_t buf[64] = {2};
    lmca_stats_t st;
    lmca_err_t err = {0};
    lmca_put_t burst[40];
    char keys[40][96];
    int placed = 0, dropped = 0;
    uint32_t ttl;

    /* A batch of 40 paced at once, as the pool paces a batch's puts: one place a
       second, so all but the first few are due past max_put_wait_ms. */
    for (int i = 0; i < 40; i++) {
        snprintf(keys[i], sizeof keys[i], "%s", th_key("burst"));
        burst[i] = (lmca_put_t){.key = keys[i], .buf = buf, .len = sizeof buf};
        ASSERT_RC(lmca_put_begin(h, &burst[i], &err), LMCA_OK, &err);
        if (lmca_put_pace(h, &burst[i], &err) >= 0) {
            placed++;
        } else {
            ASSERT(strstr(err.msg, "max_put_wait_ms=300") != NULL);
            dropped++;
        }
    }
    /* The dropped took no places: once the placed ones are due, a put is placed
       at the head, its TTL the clock's, not 40 places on. */
    usleep((unsigned)(placed + 1) * 1000 * 1000);
    ttl = put_ttl(h, "after");
    lmca_stats(h, &st);
    lmca_close(h);
    ASSERT(placed >= 2 && placed <= 6);
    ASSERT_EQ(dropped, 40 - placed);
    ASSERT_EQ(st.dropped_paced, (uint64_t)dropped);
    ASSERT(ttl <= 100 + 5);
}

TEST(puts_due_past_max_put_wait_take_no_place_on_any_writer)
{
    lmca_t *h[9];
    uint8_t buf[64] = {2};
    lmca_stats_t st;
    lmca_err_t err = {0};
    uint32_t ttl;

    for (int i = 0; i < 9; i++)
        h[i] = open_paced();
    /* h[0] runs the stores' clock a second past the lead and the wait. */
    for (int i = 0; i < 6; i++)
        lmca_put(h[0], th_key("ahead"), buf, sizeof buf, NULL, &err);
    /* Then eight writers with nothing placed yet offer one each: every one is
       due too far and dropped, and none may leave its place on the void clock
       (eight gaps of a second there, and the clock ran away from the stores'). */
    for (int i = 1; i < 9; i++) {
        ASSERT_RC(lmca_put(h[i], th_key("late"), buf, sizeof buf, NULL, &err), LMCA_EBUSY, &err);
        ASSERT(strstr(err.msg, "max_put_wait_ms=300") != NULL);
        lmca_stats(h[i], &st);
        ASSERT_EQ(st.dropped_paced, 1);
    }
    /* Once the stores are due, a put goes where h[0]'s left off: about 4 s on. */
    usleep(1500 * 1000);
    ttl = put_ttl(h[0], "after");
    for (int i = 0; i < 9; i++)
        lmca_close(h[i]);
    ASSERT(ttl <= 100 + 5);
}

/* Puts 25 one-record chunks on `h` (th_key is not for threads: keys of its own). */
static void *
put_many(void *arg)
{
    lmca_t *h = arg;
    uint8_t buf[64] = {5};
    lmca_err_t err = {0};
    char key[96];

    for (int i = 0; i < 25; i++) {
        snprintf(key, sizeof key, "threads-%d-%p-%d", (int)getpid(), (void *)&key, i);
        ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    }
    return NULL;
}

TEST(a_handles_threads_reserve_one_at_a_time)
{
    lmca_t *h = open_clocked(100000, true);
    pthread_t t[8];
    lmca_stats_t st;

    /* 200 puts on 8 threads at once: each thread on its own would reserve at
       every empty lease; one at a time, the others take from its lease, which
       grows with the rate. */
    for (int i = 0; i < 8; i++)
        ASSERT(pthread_create(&t[i], NULL, put_many, h) == 0);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_local, 0);
    ASSERT(st.clock_reservations <= 100);
    lmca_close(h);
}

/* Moves one chunk (a thread's of a_handles_moves_and_stores_reserve_one_at_a_time),
   after the others are ready too. */
typedef struct {
    lmca_t *h;
    const char *key;
    pthread_barrier_t *ready;
} mover;

static void *
move_one(void *arg)
{
    mover *m = arg;
    lmca_err_t err = {0};

    pthread_barrier_wait(m->ready);
    ASSERT_RC(lmca_touch(m->h, m->key, false, &err), LMCA_OK, &err);
    return NULL;
}

TEST(a_handles_moves_and_stores_reserve_one_at_a_time)
{
    lmca_t *h = open_clocked(100000, true);
    uint8_t buf[64] = {6};
    char keys[8][128], rule[160];
    pthread_t t[8];
    mover m[8];
    pthread_barrier_t ready;
    lmca_stats_t st;
    lmca_err_t err = {0};

    th_need_fixture("a slow clock record");
    for (int i = 0; i < 8; i++) {
        snprintf(keys[i], sizeof keys[i], "%s", th_key("mover"));
        ASSERT_RC(lmca_put(h, keys[i], buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    }
    /* With a queue of one behind one in flight, a record takes three writes at
       once and answers the fourth key busy: 8 moves reserving at once, as a
       pool's workers each moving a batch did, would meet it. */
    th_info("set-config:context=namespace;id=small;transaction-pending-limit=1");
    snprintf(rule, sizeof rule, "kind=delay;op=write;ms=100;digest=%s",
             th_digest_hex("lmca_clock", "void-clock"));
    th_fault(rule);
    pthread_barrier_init(&ready, NULL, 8);
    for (int i = 0; i < 8; i++) {
        m[i] = (mover){h, keys[i], &ready};
        ASSERT(pthread_create(&t[i], NULL, move_one, &m[i]) == 0);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&ready);
    th_info("fixture-clear-faults");
    th_info("set-config:context=namespace;id=small;transaction-pending-limit=20");
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_busy, 0);
    ASSERT_EQ(st.clock_fallbacks, 0);
    ASSERT_EQ(st.clock_local, 0);
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

    fresh_clock();
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

    th_need_fixture("fault injection on the clock records");
    fresh_clock();
    ASSERT_RC(lmca_put(h[0], moved, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    for (int i = 0; i < 24; i++) /* 6 s of moves ahead of now */
        ASSERT_RC(lmca_touch(h[0], moved, false, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h[1], th_key("shared"), buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    /* Now every clock record refuses with a server error (no free block or
       load is waited for on the same record): h[1] places on its own clocks,
       its clock 6 s ahead, and its stores' clock where the shared one was. */
    refuse_clock("void-clock", 1);
    refuse_clock("void-clock-1", 1);
    refuse_clock("void-clock-2", 1);
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
    fresh_clock();
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
    T(a_clock_that_cannot_be_reached_hands_over_and_the_order_goes_on),
    T(an_overloaded_device_is_not_a_busy_key),
    T(a_moment_of_device_overload_is_waited_out_on_the_same_record),
    T(a_put_whose_clock_stays_overloaded_is_dropped_at_max_put_wait_ms),
    T(a_clock_out_of_space_for_a_moment_is_waited_for_not_left),
    T(at_stop_writes_one_put_waits_on_the_clock_and_the_rest_do_not),
    T(a_put_whose_clock_stays_out_of_space_is_dropped_at_max_put_wait_ms),
    T(with_no_clock_record_a_handle_places_alone_at_an_eighth),
    T(a_lost_nodes_clock_record_is_tried_on_for_backpressure_ms),
    T(writers_with_different_ttls_share_one_clock),
    T(a_put_due_past_max_put_wait_is_dropped_not_held),
    T(a_burst_past_max_put_wait_is_dropped_before_it_takes_places),
    T(puts_due_past_max_put_wait_take_no_place_on_any_writer),
    T(a_handles_threads_reserve_one_at_a_time),
    T(a_handles_moves_and_stores_reserve_one_at_a_time),
    T(moves_lead_the_clock_and_do_not_pace_the_stores),
    T(a_chunk_whose_steps_race_is_paced_as_one),
    T(a_refused_clock_paces_stores_by_their_own_clock),
};
TEST_MAIN()
