/*
 * test_hits.c - a hit moves its chunk to the head of the eviction order
 * (src/engine/hits.c): after a get, the chunk is due after every chunk stored
 * before the get, however far the shared clock leads now + TTL; fresh hits,
 * pinned chunks and lookups touch nothing; the pool touches its gets' hits off
 * the get path; a touch the server refuses is counted and dropped.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "lmca_async.h"

/* A handle on "small" whose clock runs ahead of now + TTL after a few puts:
   one record per second of void time. */
static lmca_t *
open_slow_clock(bool touch_on_hit)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};

    th_config(&cfg, "small");
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = 1;
    cfg.max_put_wait_ms = 10000; /* the slow clock's puts wait seconds */
    cfg.touch_on_hit = touch_on_hit;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    return h;
}

/* A handle on namespace `small` made to evict (an eviction plan needs
   evict-used-pct; at 90 %, no record of these tests is evicted), one record a
   second of clock; stop_evicting() turns it back off. */
static lmca_t *
open_evicting(int64_t ttl_seconds)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};

    ASSERT(strcmp(th_info("set-config:context=namespace;id=small;evict-used-pct=90"), "ok") == 0);
    th_config(&cfg, "small");
    cfg.default_ttl_seconds = ttl_seconds;
    cfg.records_per_void_second = 1;
    cfg.max_put_wait_ms = 10000;
    /* The places alone: what a spent budget changes is test_touch_budget.py's
       (the credit is the clock record's, left by the tests before). */
    cfg.touch_budget_percent = 0;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    return h;
}

static void
stop_evicting(void)
{
    ASSERT(strcmp(th_info("set-config:context=namespace;id=small;evict-used-pct=0"), "ok") == 0);
}

static uint32_t
ttl_of(lmca_t *h, const char *key)
{
    lmca_meta_t meta;
    lmca_err_t err = {0};
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    return meta.ttl;
}

/* Stores `n` one-record chunks; returns the last key. */
static const char *
store(lmca_t *h, int n)
{
    uint8_t buf[64] = {5};
    lmca_err_t err = {0};
    const char *key = NULL;
    for (int i = 0; i < n; i++) {
        key = th_key("later");
        ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    }
    return key;
}

TEST(a_hit_is_due_after_every_chunk_stored_before_it)
{
    lmca_t *h = open_slow_clock(true);
    uint8_t buf[64] = {2}, out[64];
    size_t got;
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *old = th_key("old"), *last;

    ASSERT_RC(lmca_put(h, old, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    last = store(h, 4); /* the clock: 4 s on, ahead of now + TTL */
    ASSERT(ttl_of(h, old) + 3 <= ttl_of(h, last));
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    ASSERT(ttl_of(h, old) > ttl_of(h, last)); /* at the head, past the lead */
    lmca_stats(h, &st);
    ASSERT_EQ(st.hits_touched, 1);
    lmca_close(h);
}

/* NSUP cuts a share of the records at a time, so a namespace holds less than
   its capacity after a cut: a hit goes ahead of the head by the span of a
   quarter of the records the namespace holds (at most a quarter of the TTL),
   and outlives that many stores besides. */
TEST(a_hit_goes_a_quarter_of_the_namespace_ahead_of_the_head)
{
    lmca_t *h = open_evicting(40); /* a lead of 10 s at most */
    uint8_t buf[64] = {2}, out[64];
    size_t got;
    lmca_err_t err = {0};
    lmca_eviction_t plan;
    const char *old = th_key("old"), *last;

    ASSERT_RC(lmca_put(h, old, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    last = store(h, 4);
    lmca_eviction(h, &plan);
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    uint32_t moved = ttl_of(h, old), head = ttl_of(h, last);
    lmca_close(h);
    stop_evicting();
    /* One record a second: the lead is records / 4 seconds, at most 10. */
    ASSERT(plan.enabled && plan.records >= 8);
    uint64_t lead = plan.records / 4 < 10 ? plan.records / 4 : 10;
    ASSERT(moved >= head + lead - 1);
    ASSERT(moved <= head + lead + 3);
}

/* A chunk behind the head is moved however few of the namespace's records
   were stored after it (one skipped while within the newest sixteenth was cut
   before its next read when a lost node left the cluster two thirds of its
   capacity), and one still three quarters of its lead ahead is not. */
TEST(a_hit_behind_the_head_is_moved_however_near)
{
    lmca_t *h = open_evicting(3600);
    uint8_t buf[64] = {2}, out[64];
    size_t got;
    lmca_err_t err = {0};
    lmca_eviction_t plan;
    lmca_stats_t st, again;
    const char *old = th_key("old"), *last;

    ASSERT_RC(lmca_put(h, old, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    last = store(h, 4);
    lmca_eviction(h, &plan);
    uint32_t before = ttl_of(h, old), head = ttl_of(h, last);
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    uint32_t moved = ttl_of(h, old);
    lmca_stats(h, &st);
    /* Moved a lead ahead, it is fresh until the head is a quarter that near. */
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    lmca_stats(h, &again);
    lmca_close(h);
    stop_evicting();
    /* 4 records behind the head, of a namespace holding far more than 16 x 4. */
    ASSERT(plan.enabled && plan.records / 16 > 8);
    ASSERT(before + 3 <= head);
    ASSERT_EQ(st.hits_fresh, 0);
    ASSERT_EQ(st.hits_touched, 1);
    ASSERT(moved > head);
    ASSERT_EQ(again.hits_fresh, 1);
    ASSERT_EQ(again.hits_touched, 1);
}

TEST(the_servers_read_touch_alone_leaves_a_hit_behind_the_lead)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    uint8_t buf[64] = {2}, out[64];
    size_t got;
    lmca_err_t err = {0};
    const char *old = th_key("old"), *last;

    /* Why the engine touches: the server restarts a read record's TTL at
       now + TTL, which the clock has left behind. */
    th_config(&cfg, "small");
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = 1;
    cfg.max_put_wait_ms = 10000; /* the slow clock's puts wait seconds */
    cfg.touch_on_hit = false;
    cfg.read_touch_ttl_percent = 100;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    /* A clock another test left ahead would be in `old`'s own TTL, which a
       read-touch restarts: start it again at now + TTL. */
    th_bin behind = TH_INT("next_us", 1);
    ASSERT_EQ(th_plant_in("small", "lmca_clock", "void-clock", &behind, 1), 0);
    ASSERT_RC(lmca_put(h, old, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    last = store(h, 4);
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    usleep(300 * 1000); /* the server touches after it answers */
    ASSERT(ttl_of(h, old) < ttl_of(h, last));
    lmca_close(h);
}

/* Opens a handle on a slow clock with small segments, and puts `key` as a chunk
   of three segments of bytes from `seed`; its length in *len, its bytes returned
   (the caller frees them). */
static uint8_t *
open_with_segmented(lmca_t **h, const char *key, uint32_t seed, size_t *len)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    uint8_t *buf;

    th_config_segments(&cfg);
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = 1;
    cfg.max_put_wait_ms = 10000; /* the slow clock's puts wait seconds */
    ASSERT_RC(lmca_open(&cfg, h, &err), LMCA_OK, &err);
    *len = 2 * lmca_limits(*h)->target_segment_bytes + 1000;
    buf = malloc(*len);
    th_fill(buf, *len, seed);
    ASSERT_RC(lmca_put(*h, key, buf, *len, NULL, &err), LMCA_OK, &err);
    return buf;
}

/* A chunk whose meta record was read but whose segments timed out is a miss
   to the caller and still a use: it moves as a hit does. */
TEST(a_chunk_whose_segments_timed_out_still_moves)
{
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_stats_t st;
    char reckey[LMCA_KEY_MAX + 16], rule[160];
    const char *key = th_key("stalled"), *last;
    size_t len, got;
    uint8_t *buf, *out;
    uint32_t before;

    th_need_fixture("fault injection");
    buf = open_with_segmented(&h, key, 6, &len);
    out = malloc(len);
    last = store(h, 3);
    before = ttl_of(h, key);
    ASSERT(before < ttl_of(h, last));
    snprintf(reckey, sizeof reckey, "%s|s|1", key);
    snprintf(rule, sizeof rule, "kind=result;code=9;op=read;digest=%s",
             th_digest_hex(TH_SET, reckey));
    th_fault(rule);
    ASSERT_RC(lmca_get(h, key, out, len, &got, NULL, &err), LMCA_ETIMEOUT, &err);
    th_info("fixture-clear-faults");
    ASSERT_RC(lmca_touch_hits(h, &err), LMCA_OK, &err);
    lmca_stats(h, &st);
    ASSERT(st.hits_touched >= 1);
    ASSERT(ttl_of(h, key) > ttl_of(h, last)); /* past the newest store */
    free(buf);
    free(out);
    lmca_close(h);
}

/* A get whose meta record timed out is a miss to the caller and still a use:
   the chunk is looked up off the get path and moved if it is there; a key that
   is not there moves nothing. The lookups of a round go in one batch call, not
   one read each (a read each held a blocking get for as many timeouts). */
TEST(a_chunk_whose_meta_record_timed_out_is_looked_up_and_moved)
{
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_stats_t st;
    char reckey[LMCA_KEY_MAX + 16], rule[160];
    const char *key = th_key("unread"), *small = th_key("unread"), *gone = th_key("gone"), *last;
    const char *unread[] = {key, small, gone};
    lmca_meta_t meta = {0};
    uint8_t small_buf[64] = {3};
    size_t len, got;
    uint8_t *buf, *out;
    long long reads, batches;

    th_need_fixture("fault injection");
    buf = open_with_segmented(&h, key, 7, &len);
    out = malloc(len);
    ASSERT_RC(lmca_put(h, small, small_buf, sizeof small_buf, NULL, &err), LMCA_OK, &err);
    last = store(h, 3);
    ASSERT(ttl_of(h, key) < ttl_of(h, last) && ttl_of(h, small) < ttl_of(h, last));
    for (int i = 0; i < 3; i++) {
        snprintf(reckey, sizeof reckey, "%s|m", unread[i]);
        snprintf(rule, sizeof rule, "kind=result;code=9;op=read;count=20;digest=%s",
                 th_digest_hex(TH_SET, reckey));
        th_fault(rule);
    }
    for (int i = 0; i < 3; i++)
        ASSERT_RC(lmca_get(h, unread[i], out, len, &got, NULL, &err), LMCA_ETIMEOUT, &err);
    th_info("fixture-clear-faults");
    reads = th_fixture_stat("reads");
    batches = th_fixture_stat("batches");
    ASSERT_RC(lmca_touch_hits(h, &err), LMCA_OK, &err);
    ASSERT_EQ(th_fixture_stat("reads") - reads, 3); /* a lookup each (a batch row counts) */
    /* One call for the lookups, then the segments' touch and the meta records'. */
    ASSERT_EQ(th_fixture_stat("batches") - batches, 3);
    lmca_stats(h, &st);
    ASSERT_EQ(st.hits_touched, 2);
    ASSERT_EQ(st.touches_failed, 0);
    ASSERT(ttl_of(h, key) > ttl_of(h, last)); /* past the newest store */
    ASSERT(ttl_of(h, small) > ttl_of(h, last));
    ASSERT_RC(lmca_stat(h, gone, &meta, &err), LMCA_MISS, &err);
    free(buf);
    free(out);
    lmca_close(h);
}

TEST(every_record_of_a_hit_chunk_moves_with_it)
{
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    char reckey[LMCA_KEY_MAX + 16];
    const char *key = th_key("segs"), *last;
    size_t len, got;
    uint8_t *buf = open_with_segmented(&h, key, 4, &len), *out = malloc(len);
    uint32_t meta_ttl, ttl;

    last = store(h, 3);
    ASSERT_RC(lmca_get(h, key, out, len, &got, NULL, &err), LMCA_OK, &err);
    ASSERT(memcmp(buf, out, len) == 0);
    meta_ttl = ttl_of(h, key);
    ASSERT(meta_ttl > ttl_of(h, last));
    for (uint32_t i = 0; i < 3; i++) {
        snprintf(reckey, sizeof reckey, "%s|s|%u", key, i);
        ASSERT_EQ(th_record_ttl("small", reckey, &ttl), 0);
        ASSERT(ttl + 1 >= meta_ttl && ttl <= meta_ttl + 1); /* one second for all */
    }
    free(buf);
    free(out);
    lmca_close(h);
}

/* A chunk moved a lead ahead is read again once the head has come more than a
   quarter of the way: it is moved again (one skipped while still half a lead
   ahead was cut before its next read in a pause of the SSD recipe's node). */
TEST(a_hit_a_quarter_lead_on_is_moved_again)
{
    lmca_t *h = open_evicting(48); /* a lead of 12 s at most */
    uint8_t buf[64] = {2}, out[64];
    size_t got;
    lmca_err_t err = {0};
    lmca_eviction_t plan;
    lmca_stats_t st;
    char old[64];
    const char *last;

    snprintf(old, sizeof old, "%s", th_key("old")); /* th_key's ring turns over */
    ASSERT_RC(lmca_put(h, old, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    last = store(h, 4);
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    int64_t gap = (int64_t)ttl_of(h, old) - ttl_of(h, last);
    /* One record a second: bring the head to 5-7 s of the chunk, more than a
       quarter of its 12 s lead on and short of half: the half-lead rule counted
       it fresh (at 5 s or more, less a second), three quarters moves it (below 8). */
    int64_t near = gap;
    for (int i = 0; i < 20 && near > 7; i++) {
        last = store(h, 1);
        near = (int64_t)ttl_of(h, old) - ttl_of(h, last);
    }
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    lmca_stats(h, &st);
    lmca_eviction(h, &plan);
    lmca_close(h);
    stop_evicting();
    ASSERT(plan.enabled && plan.records / 4 >= 12);
    ASSERT(gap >= 11);
    ASSERT(near >= 5 && near <= 7);
    ASSERT_EQ(st.hits_fresh, 0);
    ASSERT_EQ(st.hits_touched, 2);
}

TEST(fresh_hits_pinned_chunks_and_lookups_touch_nothing)
{
    lmca_t *h = open_slow_clock(true);
    uint8_t buf[64] = {2}, out[64];
    size_t got, count;
    lmca_err_t err = {0};
    lmca_put_opts_t pin = {.pin = true};
    lmca_stats_t st;
    const char *fresh = th_key("fresh"), *pinned = th_key("pinned"), *looked = th_key("looked");
    const char *keys[1] = {looked};

    ASSERT_RC(lmca_put(h, looked, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h, pinned, buf, sizeof buf, &pin, &err), LMCA_OK, &err);
    store(h, 3);
    ASSERT_RC(lmca_put(h, fresh, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get(h, fresh, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get(h, pinned, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_exists(h, looked, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_prefix(h, keys, 1, &count, NULL, &err), LMCA_OK, &err);
    lmca_stats(h, &st);
    ASSERT_EQ(st.hits_fresh, 1);
    ASSERT_EQ(st.hits_touched, 0);
    ASSERT_EQ(ttl_of(h, pinned), UINT32_MAX);
    lmca_close(h);
}

TEST(touch_on_hit_off_moves_nothing)
{
    lmca_t *h = open_slow_clock(false);
    uint8_t buf[64] = {2}, out[64];
    size_t got;
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *old = th_key("old"), *last;
    uint32_t before;

    ASSERT_RC(lmca_put(h, old, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    last = store(h, 4);
    before = ttl_of(h, old);
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    ASSERT(ttl_of(h, old) <= before);
    ASSERT(ttl_of(h, old) < ttl_of(h, last));
    lmca_stats(h, &st);
    ASSERT_EQ(st.hits_touched + st.hits_fresh, 0);
    lmca_close(h);
}

TEST(the_pool_moves_its_gets_hits_once_idle)
{
    lmca_t *h = open_slow_clock(true);
    lmca_pool_t *p = NULL;
    uint8_t buf[64] = {2}, out[3][64];
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *keys[3] = {th_key("pooled"), th_key("pooled"), th_key("pooled")}, *last;
    void *bufs[3] = {out[0], out[1], out[2]};
    size_t lens[3] = {64, 64, 64};
    lmca_batch_t b = {.op = LMCA_OP_GET, .n = 3, .keys = keys, .bufs = bufs, .lens = lens};
    uint64_t id;
    bool done = false;

    for (int i = 0; i < 3; i++)
        ASSERT_RC(lmca_put(h, keys[i], buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    last = store(h, 3);
    ASSERT_RC(lmca_pool_open(h, 2, &p, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_pool_submit(p, &b, &id, &err), LMCA_OK, &err);
    for (int spins = 0; !done && spins < 100; spins++) {
        struct pollfd pfd = {.fd = lmca_pool_fd(p), .events = POLLIN};
        poll(&pfd, 1, 100);
        for (lmca_completion_t *c = lmca_pool_drain(p), *next; c; c = next) {
            next = c->next;
            done |= c->id == id && c->status == LMCA_OK && c->results[0] && c->results[2];
            lmca_completion_free(c);
        }
    }
    ASSERT(done);
    /* The completion came first; the touches follow, from an idle worker (up to
       5 s: TSan on a busy machine is slow, and idle workers wake every 500 ms). */
    for (int spins = 0; spins < 250; spins++) {
        lmca_stats(h, &st);
        if (st.hits_touched == 3)
            break;
        usleep(20 * 1000);
    }
    ASSERT_EQ(st.hits_touched, 3);
    for (int i = 0; i < 3; i++)
        ASSERT(ttl_of(h, keys[i]) > ttl_of(h, last));
    lmca_pool_destroy(p);
    lmca_close(h);
}

TEST(a_touch_refused_for_good_is_counted_and_dropped)
{
    lmca_t *h;
    uint8_t buf[64] = {2}, out[64];
    size_t got;
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *old = th_key("old");

    th_need_fixture("fault injection on touches");
    h = open_slow_clock(true);
    ASSERT_RC(lmca_put(h, old, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    store(h, 3);
    th_fault("kind=result;code=4;op=touch"); /* a parameter error: no second try */
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    usleep(1100 * 1000);
    ASSERT_RC(lmca_touch_hits(h, &err), LMCA_OK, &err);
    th_info("fixture-clear-faults");
    lmca_stats(h, &st);
    ASSERT_EQ(st.hits_touched, 0);
    ASSERT_EQ(st.touches_failed, 1);
    lmca_close(h);
}

/* A touch refused once with the server's `code` is queued again, and the next
   touch of the queue a second later moves it. */
static void
touch_goes_again_after(int code)
{
    lmca_t *h;
    uint8_t buf[64] = {2}, out[64];
    size_t got;
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *old = th_key("old");
    char rule[80];
    uint32_t before;

    h = open_slow_clock(true);
    ASSERT_RC(lmca_put(h, old, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    store(h, 3);
    before = ttl_of(h, old);
    snprintf(rule, sizeof rule, "kind=result;code=%d;op=touch;count=1", code);
    th_fault(rule);
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    lmca_stats(h, &st);
    ASSERT_EQ(st.touches_failed, 1);
    ASSERT_EQ(st.hits_touched, 0);
    ASSERT_RC(lmca_touch_hits(h, &err), LMCA_OK, &err); /* not yet: a second apart */
    lmca_stats(h, &st);
    ASSERT_EQ(st.hits_touched, 0);
    usleep(1100 * 1000);
    ASSERT_RC(lmca_touch_hits(h, &err), LMCA_OK, &err);
    th_info("fixture-clear-faults");
    lmca_stats(h, &st);
    ASSERT_EQ(st.hits_touched, 1);
    ASSERT(ttl_of(h, old) > before);
    lmca_close(h);
}

/* A device whose write queue is full refuses every write of its node until a
   block leaves the queue: a touch it refuses goes again within the same move,
   a few ms later, not a second later (at the device's own speed the queue is
   full most of the time, and warm chunks were lost: 70 of 128). */
TEST(a_touch_an_overloaded_device_refused_goes_again_at_once)
{
    lmca_t *h;
    uint8_t buf[64] = {2}, out[64];
    size_t got;
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *old = th_key("old");
    uint32_t before;

    th_need_fixture("fault injection on touches");
    h = open_slow_clock(true);
    ASSERT_RC(lmca_put(h, old, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    store(h, 3);
    before = ttl_of(h, old);
    th_fault("kind=result;code=18;op=touch;count=3");
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    th_info("fixture-clear-faults");
    lmca_stats(h, &st);
    ASSERT_EQ(st.touches_failed, 0);
    ASSERT_EQ(st.hits_touched, 1);
    ASSERT(ttl_of(h, old) > before);
    lmca_close(h);
}

TEST(a_touch_a_lost_node_refused_goes_again)
{
    th_need_fixture("fault injection on touches");
    /* Its node times out (lost, or paused until the cluster re-forms). */
    touch_goes_again_after(9);
}

TEST(a_touch_stop_writes_refused_goes_again)
{
    th_need_fixture("fault injection on touches");
    /* While a node is lost the others hold every copy and reach stop-writes. */
    touch_goes_again_after(8);
}

TEST(a_hit_waits_for_the_clock_when_no_clock_record_answers)
{
    lmca_t *h;
    uint8_t buf[64] = {2}, out[64];
    size_t got;
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *old = th_key("old");
    static const char *clocks[] = {"void-clock", "void-clock-1", "void-clock-2"};
    char rule[120];
    uint32_t before;

    th_need_fixture("fault injection on the clock records");
    h = open_slow_clock(true);
    ASSERT_RC(lmca_put(h, old, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    store(h, 3);
    before = ttl_of(h, old);
    /* Every clock record a reservation tries refuses, as a full namespace does. */
    for (int i = 0; i < 3; i++) {
        snprintf(rule, sizeof rule, "kind=result;code=8;digest=%s",
                 th_digest_hex("lmca_clock", clocks[i]));
        th_fault(rule);
    }
    ASSERT_RC(lmca_get(h, old, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    lmca_stats(h, &st);
    /* Not moved on the handle's own clock: it goes again. */
    ASSERT_EQ(st.hits_touched, 0);
    ASSERT_EQ(st.clock_local, 0);
    ASSERT_EQ(st.touches_failed, 1);
    ASSERT(ttl_of(h, old) <= before);
    /* ... and holds no store to a clock of its own: the next put, past its
       lease, reserves on the shared clock (a hold sent stores after refused
       moves to their own clocks). */
    usleep(150 * 1000);
    th_info("fixture-clear-faults");
    store(h, 1);
    lmca_stats(h, &st);
    ASSERT_EQ(st.clock_local, 0);
    usleep(1100 * 1000);
    ASSERT_RC(lmca_touch_hits(h, &err), LMCA_OK, &err);
    lmca_stats(h, &st);
    ASSERT_EQ(st.hits_touched, 1);
    ASSERT(ttl_of(h, old) > before);
    lmca_close(h);
}

TEST(a_chunk_with_a_segment_left_behind_keeps_its_meta_behind_too)
{
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_stats_t st;
    char reckey[LMCA_KEY_MAX + 16], rule[200];
    const char *key = th_key("torn-touch");
    size_t len, got;
    uint8_t *buf, *out;
    uint32_t meta_ttl, seg_ttl;

    th_need_fixture("fault injection on one segment's touch");
    buf = open_with_segmented(&h, key, 5, &len);
    out = malloc(len);
    store(h, 3);
    meta_ttl = ttl_of(h, key);
    /* The server refuses to move segment 1 (a full namespace refuses touches). */
    snprintf(reckey, sizeof reckey, "%s|s|1", key);
    snprintf(rule, sizeof rule, "kind=result;code=8;op=touch;digest=%s",
             th_digest_hex(TH_SET, reckey));
    th_fault(rule);
    ASSERT_RC(lmca_get(h, key, out, len, &got, NULL, &err), LMCA_OK, &err);
    th_info("fixture-clear-faults");
    lmca_stats(h, &st);
    ASSERT_EQ(st.touches_failed, 1);
    ASSERT_EQ(st.hits_touched, 0);
    /* Its meta record stays where it was, no later than the segment left behind:
       moved, it would outlive it (a chunk found by lookups that loads miss). */
    ASSERT(ttl_of(h, key) <= meta_ttl);
    ASSERT_EQ(th_record_ttl("small", reckey, &seg_ttl), 0);
    ASSERT(ttl_of(h, key) <= seg_ttl + 1);
    free(buf);
    free(out);
    lmca_close(h);
}

TEST_LIST = {
    T(a_hit_is_due_after_every_chunk_stored_before_it),
    T(a_hit_goes_a_quarter_of_the_namespace_ahead_of_the_head),
    T(a_hit_a_quarter_lead_on_is_moved_again),
    T(the_servers_read_touch_alone_leaves_a_hit_behind_the_lead),
    T(every_record_of_a_hit_chunk_moves_with_it),
    T(a_hit_behind_the_head_is_moved_however_near),
    T(fresh_hits_pinned_chunks_and_lookups_touch_nothing),
    T(a_chunk_whose_segments_timed_out_still_moves),
    T(a_chunk_whose_meta_record_timed_out_is_looked_up_and_moved),
    T(touch_on_hit_off_moves_nothing),
    T(the_pool_moves_its_gets_hits_once_idle),
    T(a_touch_refused_for_good_is_counted_and_dropped),
    T(a_touch_an_overloaded_device_refused_goes_again_at_once),
    T(a_touch_a_lost_node_refused_goes_again),
    T(a_touch_stop_writes_refused_goes_again),
    T(a_hit_waits_for_the_clock_when_no_clock_record_answers),
    T(a_chunk_with_a_segment_left_behind_keeps_its_meta_behind_too),
};
TEST_MAIN()
