/*
 * test_cache.c - what a full namespace asks of the engine (src/engine/cache.c):
 * the eviction plan, void times NSUP can evict, read-touch on gets only, and
 * backpressure instead of failed stores (retries, drops by cause, the gate
 * that drops stores unsent while the namespace is known to be full).
 * The refusals come from the test server's fault injection; those tests skip on
 * a real server, where tests/ext/test_cache_real.py and the cache benchmark
 * measure the same on a namespace that truly fills.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* A server answer for a namespace that evicts (CE 8.1 names). */
static lmca_server_info_t
evicting(int64_t objects, int64_t used, int64_t nonexp)
{
    lmca_server_info_t s;
    char info[512];
    lmca_err_t err = {0};
    snprintf(info, sizeof info,
             "objects=%lld;non_expirable_objects=%lld;data_used_bytes=%lld;"
             "data_total_bytes=1073741824;max-record-size=8388608;nsup-period=1;"
             "evict-tenths-pct=200;evict-hist-buckets=1000000;"
             "storage-engine.evict-used-pct=50;storage-engine.stop-writes-used-pct=90",
             (long long)objects, (long long)nonexp, (long long)used);
    if (lmca_server_info_parse(info, &s, &err) != LMCA_OK)
        th_fail(__FILE__, __LINE__, "parse: %s", err.msg);
    return s;
}

static lmca_limits_t
limits_of(const lmca_server_info_t *s, lmca_config_t *cfg)
{
    lmca_limits_t l;
    lmca_err_t err = {0};
    lmca_config_init(cfg);
    cfg->hosts = "127.0.0.1:3000";
    if (lmca_limits_resolve(s, cfg, &l, &err) != LMCA_OK)
        th_fail(__FILE__, __LINE__, "resolve: %s", err.msg);
    return l;
}

TEST(eviction_plan_gives_a_second_half_the_target)
{
    lmca_server_info_t s = evicting(1000, 500 * 1048576ll, 0); /* 512 KiB mean records */
    lmca_config_t cfg;
    lmca_limits_t l = limits_of(&s, &cfg);
    lmca_eviction_t e;

    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT(e.enabled);
    /* 1 GiB at 50 % over 524288-byte records: 1023 (rounded down); 20 % of
       them per cycle, half of that to a second; the clock may run 1 s ahead
       (a 1 GiB device holds to 56 %: 122 records past eviction) */
    ASSERT_EQ(e.records, 1023);
    ASSERT_EQ(e.target, 204);
    ASSERT_EQ(e.per_second, 102);
    ASSERT_EQ(e.lead_seconds, 1);
    /* A setting wins. */
    cfg.records_per_void_second = 7;
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.per_second, 7);
}

TEST(eviction_plan_leaves_pinned_records_out_and_guesses_an_empty_namespace)
{
    lmca_server_info_t s = evicting(1000, 500 * 1048576ll, 500); /* half never expire */
    lmca_config_t cfg;
    lmca_limits_t l = limits_of(&s, &cfg);
    lmca_eviction_t e;

    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.records, 512); /* 1023, less the half that never expires */
    /* Nearly empty: the mean is a full segment's (fewer records: the safe side),
       or what the handle's own puts wrote. */
    s = evicting(3, 3000, 0);
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.records, (1073741824ull / 100 * 50) / l.target_segment_bytes);
    ASSERT(e.per_second >= 1);
    lmca_eviction_plan(&s, &l, &cfg, 65536, &e);
    ASSERT_EQ(e.records, (1073741824ull / 100 * 50) / 65536);
    /* Just after many removals: objects counted, their space not freed yet; a
       mean above the largest record is no mean (it made the plan 0 records). */
    s = evicting(100, 1000 * 1048576ll, 0);
    lmca_eviction_plan(&s, &l, &cfg, 65536, &e);
    ASSERT_EQ(e.records, (1073741824ull / 100 * 50) / 65536);
    /* Empty but for the shared clock's record, which never expires. */
    s = evicting(1, 80, 1);
    lmca_eviction_plan(&s, &l, &cfg, 65536, &e);
    ASSERT_EQ(e.records, (1073741824ull / 100 * 50) / 65536);
}

/* A memory namespace of `size` bytes at evict-used-pct `evict`, full of 2 MiB records. */
static lmca_server_info_t
memory_namespace(long long size, int evict)
{
    lmca_server_info_t s;
    char info[512];
    lmca_err_t err = {0};
    snprintf(info, sizeof info,
             "objects=1000;non_expirable_objects=0;data_used_bytes=%lld;"
             "data_total_bytes=%lld;storage-engine.data-size=%lld;max-record-size=8388608;"
             "nsup-period=1;evict-tenths-pct=300;evict-hist-buckets=1000000;"
             "storage-engine.evict-used-pct=%d;storage-engine.stop-writes-used-pct=90",
             1000 * 2097152ll, size, size, evict);
    if (lmca_server_info_parse(info, &s, &err) != LMCA_OK)
        th_fail(__FILE__, __LINE__, "parse: %s", err.msg);
    return s;
}

TEST(eviction_plan_leads_by_what_the_storage_holds_past_eviction)
{
    lmca_server_info_t s = memory_namespace(512ll << 20, 30);
    lmca_config_t cfg;
    lmca_limits_t l = limits_of(&s, &cfg);
    lmca_eviction_t e;

    /* 512 MiB: 8 stripes of 8 blocks, room to 37 %: 7 % past eviction is 19
       records of 2 MiB, under 2 s at 11 a second. */
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.per_second, 11);
    ASSERT_EQ(e.lead_seconds, 1);
    s = memory_namespace(512ll << 20, 50); /* past the room: probe refuses it */
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.lead_seconds, 1);
    /* 2 GiB: 32 blocks a stripe, room to 65 %: 160 records past eviction, 2 s. */
    s = memory_namespace(2048ll << 20, 50);
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.per_second, 76);
    ASSERT_EQ(e.lead_seconds, 2);
    /* A 2 GiB device is 256 blocks, 8 kept for defrag and 32 held by the
       default post-write cache (256 MiB): room to 60 % of the rest, 50 %, no
       more than eviction: 1 s. */
    s.data_size = -1;
    s.post_write_cache = 256ll << 20;
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.lead_seconds, 1);
    /* 8 GiB at 40: 1024 blocks, room to 59 % without a post-write cache (778
       records past eviction, 3 s at 245), to 57 % with one (696, 2 s). */
    s = memory_namespace(8192ll << 20, 40);
    s.data_size = -1;
    s.post_write_cache = 0;
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.per_second, 245);
    ASSERT_EQ(e.lead_seconds, 3);
    s.post_write_cache = 256ll << 20;
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.lead_seconds, 2);
    /* Two files of 4 GiB: each has its reserve and its cache (room to 55 %). */
    s.devices = 2;
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.lead_seconds, 2);
    s.post_write_cache = 1024ll << 20; /* a quarter of each: room to 42 % */
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT_EQ(e.lead_seconds, 1);
}

TEST(eviction_plan_is_off_without_eviction_nsup_or_a_ttl)
{
    lmca_server_info_t s = evicting(1000, 1000, 0);
    lmca_config_t cfg;
    lmca_limits_t l = limits_of(&s, &cfg);
    lmca_eviction_t e;

    s.evict_used_pct = 0;
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT(!e.enabled);
    ASSERT_EQ(e.per_second, 0); /* no limit: void times are now + TTL */
    s = evicting(1000, 1000, 0);
    s.nsup_period = 0;
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT(!e.enabled);
    s = evicting(1000, 1000, 0);
    cfg.default_ttl_seconds = -1;
    lmca_eviction_plan(&s, &l, &cfg, 0, &e);
    ASSERT(!e.enabled);
}

/* Opens `ns` with a few settings changed. */
static lmca_t *
open_with(const char *ns, uint32_t per_second, uint32_t backpressure_ms, uint32_t recheck_ms)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    th_config(&cfg, ns);
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = per_second;
    cfg.max_put_wait_ms = 10000; /* the slow clock's puts wait seconds */
    cfg.backpressure_ms = backpressure_ms;
    cfg.full_recheck_ms = recheck_ms;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    return h;
}

TEST(void_times_follow_write_order_and_hold_few_records_a_second)
{
    lmca_t *h = open_with("small", 2, 5000, 1000);
    uint8_t buf[64] = {1};
    uint32_t ttl[8];
    lmca_meta_t meta;
    lmca_err_t err = {0};
    char keys[8][128];

    /* Eight one-record chunks in well under a second: two a second of void
       time, so their places on the clock span four seconds, in the order
       written. The clock is the namespace's, where another test's moves may
       have left it minutes ahead: it starts again at now here. */
    th_bin clock[2] = {TH_INT("next_us", 1), TH_INT("store_us", 1)};
    ASSERT_EQ(th_plant_in("small", "lmca_clock", "void-clock", clock, 2), 0);
    for (int i = 0; i < 8; i++) {
        snprintf(keys[i], sizeof keys[i], "%s", th_key("clock"));
        ASSERT_RC(lmca_put(h, keys[i], buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    }
    for (int i = 0; i < 8; i++) {
        ASSERT_RC(lmca_stat(h, keys[i], &meta, &err), LMCA_OK, &err);
        ttl[i] = meta.ttl;
    }
    for (int i = 1; i < 8; i++) /* a second crossed between two puts: one off */
        ASSERT(ttl[i] + 1 >= ttl[i - 1]);
    ASSERT(ttl[7] >= ttl[0] + 2 && ttl[7] <= ttl[0] + 5);
    ASSERT(ttl[0] >= 95 && ttl[0] <= 104);
    lmca_close(h);
}

TEST(every_record_of_a_chunk_is_due_in_one_second)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_meta_t meta;
    char reckey[LMCA_KEY_MAX + 16];
    const char *key = th_key("fate");
    size_t len;
    uint8_t *buf;
    uint32_t ttl;

    th_config_segments(&cfg);
    cfg.default_ttl_seconds = 100;
    cfg.records_per_void_second = 1; /* four records: the clock moves 4 s past it */
    cfg.max_put_wait_ms = 10000; /* the slow clock's puts wait seconds */
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    len = 2 * lmca_limits(h)->target_segment_bytes + 1000;
    buf = malloc(len);
    th_fill(buf, len, 9);
    ASSERT_RC(lmca_put(h, key, buf, len, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    ASSERT_EQ(meta.nseg, 3);
    for (uint32_t i = 0; i < 3; i++) {
        snprintf(reckey, sizeof reckey, "%s|s|%u", key, i);
        ASSERT_EQ(th_record_ttl("small", reckey, &ttl), 0);
        /* A write crossing a second on its way may land one off, no more. */
        ASSERT(ttl + 1 >= meta.ttl && ttl <= meta.ttl + 1);
    }
    free(buf);
    lmca_close(h);
}

TEST(refused_writes_are_tried_again_until_they_land)
{
    static const int codes[] = {8, 18}; /* stop-writes, device overload */
    th_need_fixture("fault injection");
    for (size_t c = 0; c < 2; c++) {
        lmca_t *h = open_with("lmcache", 0, 5000, 1000);
        lmca_err_t err = {0};
        lmca_stats_t st;
        uint8_t buf[100] = {7}, out[100];
        size_t got;
        const char *key = th_key("retry");
        char spec[96];

        th_info("fixture-reset");
        snprintf(spec, sizeof spec, "kind=result;code=%d;op=write;count=3", codes[c]);
        th_fault(spec);
        ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
        ASSERT_RC(lmca_get(h, key, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
        lmca_stats(h, &st);
        ASSERT_EQ(st.puts_retried, 1);
        ASSERT_EQ(st.write_retries, 3);
        ASSERT_EQ(st.dropped_full + st.dropped_busy, 0);
        lmca_close(h);
    }
}

TEST(a_put_refused_past_its_budget_is_dropped_by_cause_and_leaves_nothing)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *key = th_key("overload");
    size_t len, got;
    uint8_t *buf;
    uint64_t t0;

    th_need_fixture("fault injection");
    th_info("fixture-reset");
    th_config_segments(&cfg);
    cfg.backpressure_ms = 300;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    len = 2 * lmca_limits(h)->target_segment_bytes + 1000;
    buf = malloc(len);
    th_fill(buf, len, 3);
    th_fault("kind=result;code=18;op=write");
    t0 = th_now_ms();
    ASSERT_RC(lmca_put(h, key, buf, len, NULL, &err), LMCA_EBUSY, &err);
    ASSERT(th_now_ms() - t0 >= 280); /* it waited its budget */
    th_info("fixture-clear-faults");
    lmca_stats(h, &st);
    ASSERT_EQ(st.dropped_busy, 1);
    ASSERT_EQ(st.dropped_full, 0);
    ASSERT(st.write_retries >= 2);
    ASSERT(!st.full); /* load does not close the gate: it passes by itself */
    ASSERT_RC(lmca_get(h, key, buf, len, &got, NULL, &err), LMCA_MISS, &err);
    ASSERT_CONTAINS(th_log(), "backpressure_ms=300");
    ASSERT_CONTAINS(th_log(), "max-write-cache");
    free(buf);
    lmca_close(h);
}

/* Load is bounded by max_put_wait_ms from the put's begin, whatever
   backpressure_ms allows: a stalled disk must not hold LMCache's buffer. */
TEST(a_put_refused_for_load_waits_max_put_wait_ms_in_all)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *key = th_key("stalled");
    uint8_t buf[100] = {4};
    uint64_t t0, took;

    th_need_fixture("fault injection");
    th_info("fixture-reset");
    th_config(&cfg, "lmcache");
    cfg.backpressure_ms = 5000;
    cfg.max_put_wait_ms = 400;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    th_fault("kind=result;code=18;op=write");
    t0 = th_now_ms();
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_EBUSY, &err);
    took = th_now_ms() - t0;
    th_info("fixture-clear-faults");
    ASSERT(took >= 380 && took < 2000); /* 5 s of backpressure_ms before */
    lmca_stats(h, &st);
    ASSERT_EQ(st.dropped_busy, 1);
    ASSERT(st.write_retries >= 2);
    ASSERT_CONTAINS(th_log(), "max_put_wait_ms=400");
    /* Space is NSUP's to free: stop-writes still waits its backpressure_ms. */
    th_fault("kind=result;code=8;op=write;count=1");
    ASSERT_RC(lmca_put(h, th_key("full-once"), buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    lmca_close(h);
}

/* A handle whose puts are bounded at 1 s (max_put_wait_ms), with writes of
   `write_timeout_ms`, segments written one by one (writes, as the faults
   say), its clock's lease taken by a first put; *buf holds *len bytes, a
   four-segment chunk. */
static lmca_t *
open_bounded(uint32_t write_timeout_ms, uint8_t **buf, size_t *len)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};

    th_info("fixture-reset");
    th_config_segments(&cfg);
    cfg.max_put_wait_ms = 1000;
    cfg.write_timeout_ms = write_timeout_ms;
    cfg.batch_threshold_bytes = 16 * 1024;
    if (lmca_open(&cfg, &h, &err) != LMCA_OK)
        return NULL;
    *len = 3 * lmca_limits(h)->target_segment_bytes + 1000;
    *buf = malloc(*len);
    th_fill(*buf, *len, 5);
    if (lmca_put(h, th_key("warm-up"), *buf, 100, NULL, &err) != LMCA_OK) {
        lmca_close(h);
        free(*buf);
        return NULL;
    }
    return h;
}

/* A put refused for load stops at its bound, max_put_wait_ms (or
   write_timeout_ms) from its start: a write sent near it is sent with what is
   left, and none after. Each write here is answered 600 ms late: the segments,
   then the meta record. Not refused, the same put lands late: a slow answer
   alone may be a node paused, which a put waits out. */
TEST(a_put_refused_for_load_stops_at_its_bound_a_slow_one_lands)
{
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *key = th_key("slow-steps");
    size_t len, got;
    uint8_t *buf = NULL;
    lmca_t *h;

    th_need_fixture("fault injection");
    ASSERT((h = open_bounded(1000, &buf, &len)) != NULL);
    th_fault("kind=delay;ms=600;op=write");
    ASSERT_RC(lmca_put(h, th_key("slow-node"), buf, len, NULL, &err), LMCA_OK, &err);
    th_fault("kind=result;code=18;op=write;count=1");
    /* (it landed at ~1.8 s before: each write took its own write_timeout_ms) */
    ASSERT_RC(lmca_put(h, key, buf, len, NULL, &err), LMCA_EBUSY, &err);
    th_info("fixture-clear-faults");
    ASSERT_CONTAINS(err.msg, "max_put_wait_ms=1000");
    lmca_stats(h, &st);
    ASSERT_EQ(st.dropped_busy, 1);
    ASSERT_RC(lmca_get(h, key, buf, len, &got, NULL, &err), LMCA_MISS, &err);
    free(buf);
    lmca_close(h);
}

/* A timeout alone bounds nothing (a node may be paused), but neither does it
   free a put refused for load from its bound: a stalled disk times a write out,
   then refuses the next. Here the first write times out (400 ms answering,
   write_timeout_ms 300), its retry is refused, its third lands; the next
   segment, answered 250 ms late, is sent with what is left (< 250) and none
   after. Freed by the timeout, the put landed at ~1.6 s. */
TEST(a_put_that_timed_out_and_was_refused_for_load_keeps_its_bound)
{
    lmca_err_t err = {0};
    lmca_stats_t st;
    const char *key = th_key("stall-then-load");
    char seg0[200], rule[300];
    size_t len, got;
    uint8_t *buf = NULL;
    lmca_t *h;

    th_need_fixture("fault injection");
    ASSERT((h = open_bounded(300, &buf, &len)) != NULL);
    snprintf(seg0, sizeof seg0, "%s|s|0", key);
    snprintf(rule, sizeof rule, "kind=delay;ms=400;op=write;count=1;digest=%s",
             th_digest_hex(TH_SET, seg0));
    th_fault(rule);
    th_fault("kind=delay;ms=250;op=write");
    /* (the write that timed out takes one refusal: the server answers it unread) */
    snprintf(rule, sizeof rule, "kind=result;code=18;op=write;count=2;digest=%s",
             th_digest_hex(TH_SET, seg0));
    th_fault(rule);
    ASSERT_RC(lmca_put(h, key, buf, len, NULL, &err), LMCA_EBUSY, &err);
    th_info("fixture-clear-faults");
    lmca_stats(h, &st);
    ASSERT_EQ(st.dropped_busy, 1);
    ASSERT_RC(lmca_get(h, key, buf, len, &got, NULL, &err), LMCA_MISS, &err);
    free(buf);
    lmca_close(h);
}

/* A WARNING about drops comes at most once a minute for each cause: a drop for
   space right after one for load is told too (one timer for all kept it quiet). */
TEST(drops_of_another_cause_are_warned_within_the_minute)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    uint8_t buf[100] = {6};
    size_t before;

    th_need_fixture("fault injection");
    th_info("fixture-reset");
    th_config(&cfg, "lmcache");
    cfg.backpressure_ms = 100;
    cfg.max_put_wait_ms = 100;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    before = strlen(th_log());
    th_fault("kind=result;code=18;op=write");
    ASSERT_RC(lmca_put(h, th_key("load-1"), buf, sizeof buf, NULL, &err), LMCA_EBUSY, &err);
    ASSERT_RC(lmca_put(h, th_key("load-2"), buf, sizeof buf, NULL, &err), LMCA_EBUSY, &err);
    th_info("fixture-clear-faults");
    ASSERT_CONTAINS(th_log() + before, "refused writes for load");
    /* once a minute for that cause */
    ASSERT(strstr(strstr(th_log() + before, "refused writes for load") + 1,
                  "refused writes for load") == NULL);
    before = strlen(th_log());
    th_fault("kind=result;code=8;op=write");
    ASSERT_RC(lmca_put(h, th_key("full"), buf, sizeof buf, NULL, &err), LMCA_EFULL, &err);
    th_info("fixture-clear-faults");
    ASSERT_CONTAINS(th_log() + before, "stayed at stop-writes");
    lmca_close(h);
}

TEST(a_namespace_that_stays_full_drops_stores_unsent_and_looks_again)
{
    lmca_t *h;
    lmca_err_t err = {0};
    lmca_stats_t st;
    uint8_t buf[100] = {5};
    long long writes;
    uint64_t retries;

    th_need_fixture("fault injection");
    th_info("fixture-reset");
    h = open_with("lmcache", 0, 200, 400);
    th_info("fixture-stop-writes:namespace=lmcache;on=true");
    ASSERT_RC(lmca_put(h, th_key("full"), buf, sizeof buf, NULL, &err), LMCA_EFULL, &err);
    ASSERT_CONTAINS(err.msg, "stop-writes");
    /* Known full: the next stores cost no round trip. */
    writes = th_fixture_stat("writes");
    for (int i = 0; i < 20; i++) {
        ASSERT_RC(lmca_put(h, th_key("full"), buf, sizeof buf, NULL, &err), LMCA_EFULL, &err);
        ASSERT_CONTAINS(err.msg, "dropped unsent");
    }
    ASSERT_EQ(th_fixture_stat("writes"), writes);
    lmca_stats(h, &st);
    ASSERT(st.full);
    ASSERT_EQ(st.dropped_full, 21);
    ASSERT_EQ(st.dropped_unsent, 20);
    /* After full_recheck_ms one store looks again; still full, it gives up at
       once (no second budget) and the gate closes again. */
    usleep(450 * 1000);
    lmca_stats(h, &st);
    retries = st.write_retries;
    ASSERT_RC(lmca_put(h, th_key("full"), buf, sizeof buf, NULL, &err), LMCA_EFULL, &err);
    ASSERT_EQ(th_fixture_stat("writes"), writes + 1);
    lmca_stats(h, &st);
    ASSERT_EQ(st.write_retries, retries); /* no backoff: given up at its first refusal */
    ASSERT_RC(lmca_put(h, th_key("full"), buf, sizeof buf, NULL, &err), LMCA_EFULL, &err);
    ASSERT_CONTAINS(err.msg, "dropped unsent");
    /* Space again: the store after the next recheck lands and opens the gate. */
    th_info("fixture-stop-writes:namespace=lmcache;on=false");
    usleep(450 * 1000);
    ASSERT_RC(lmca_put(h, th_key("full"), buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h, th_key("full"), buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    lmca_stats(h, &st);
    ASSERT(!st.full);
    /* One warning, however many were dropped. */
    const char *log = th_log(), *first = strstr(log, "dropped stores");
    ASSERT(first != NULL);
    ASSERT(strstr(first + 1, "dropped stores") == NULL);
    ASSERT_CONTAINS(log, "backpressure_ms=200");
    lmca_close(h);
}

/* A fault that refuses every write of `key`'s meta record as full, as a memory
   namespace does when the stripe its digest picks has no free block. */
static void
refuse_as_full(const char *key)
{
    char spec[128], reckey[LMCA_KEY_MAX + 16];

    snprintf(reckey, sizeof reckey, "%s|m", key);
    snprintf(spec, sizeof spec, "kind=result;code=8;op=write;digest=%s",
             th_digest_hex(TH_SET, reckey));
    th_fault(spec);
}

TEST(a_stripe_out_of_space_drops_its_put_alone)
{
    lmca_t *h;
    lmca_err_t err = {0};
    lmca_stats_t st;
    uint8_t buf[100] = {5};
    char key[64];

    th_need_fixture("fault injection");
    th_info("fixture-reset");
    h = open_with("lmcache", 0, 200, 400);
    snprintf(key, sizeof key, "%s", th_key("stripe"));
    refuse_as_full(key);
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_EFULL, &err);
    /* No node says stop-writes: the next chunks are sent, and land. */
    for (int i = 0; i < 5; i++)
        ASSERT_RC(lmca_put(h, th_key("next"), buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    lmca_stats(h, &st);
    lmca_close(h);
    ASSERT_EQ(st.dropped_full, 1);
    ASSERT_EQ(st.dropped_unsent, 0);
    ASSERT(!st.full);
}

/* Stores of other chunks, one every 10 ms for a second, counting those that failed. */
struct others {
    lmca_t *h;
    int failed;
};

static void *
store_others(void *arg)
{
    struct others *o = arg;
    uint8_t buf[100] = {6};
    lmca_err_t err = {0};
    char key[64];

    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "%s-%d", th_key("other"), i);
        o->failed += lmca_put(o->h, key, buf, sizeof buf, NULL, &err) != LMCA_OK;
        usleep(10 * 1000);
    }
    return NULL;
}

TEST(a_refused_put_waits_on_while_others_land)
{
    lmca_t *h;
    lmca_err_t err = {0};
    lmca_stats_t st;
    uint8_t buf[100] = {5};
    char key[64];
    struct others o = {0};
    pthread_t t;
    uint64_t t0, waited;

    th_need_fixture("fault injection");
    th_info("fixture-reset");
    h = open_with("lmcache", 0, 200, 400);
    o.h = h;
    snprintf(key, sizeof key, "%s", th_key("stripe"));
    refuse_as_full(key);
    ASSERT(pthread_create(&t, NULL, store_others, &o) == 0);
    t0 = th_now_ms();
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_EFULL, &err);
    waited = th_now_ms() - t0;
    pthread_join(t, NULL);
    lmca_stats(h, &st);
    lmca_close(h);
    /* Others landed meanwhile (none of them refused): it waited on past its
       budget of 200 ms, up to three, for room NSUP might free. */
    ASSERT(waited >= 400);
    ASSERT_EQ(o.failed, 0);
    ASSERT_EQ(st.dropped_full, 1);
    ASSERT_EQ(st.dropped_unsent, 0);
}

TEST(no_backpressure_fails_at_the_first_refusal)
{
    lmca_t *h;
    lmca_err_t err = {0};
    lmca_stats_t st;
    uint8_t buf[10] = {0};

    th_need_fixture("fault injection");
    th_info("fixture-reset");
    h = open_with("lmcache", 0, 0, 1000);
    th_fault("kind=result;code=18;op=write;count=1");
    ASSERT_RC(lmca_put(h, th_key("now"), buf, sizeof buf, NULL, &err), LMCA_EBUSY, &err);
    lmca_stats(h, &st);
    ASSERT_EQ(st.write_retries, 0);
    ASSERT_EQ(st.dropped_busy, 1);
    lmca_close(h);
}

TEST(gets_touch_and_lookups_do_not)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_meta_t meta;
    uint8_t buf[64] = {3}, out[64];
    size_t got;
    const char *key = th_key("touch"), *lazy = th_key("touch");
    const char *keys[1] = {lazy};
    size_t count;

    th_config(&cfg, "small");
    cfg.default_ttl_seconds = 4;
    cfg.read_touch_ttl_percent = 100; /* every read of a hit restarts its TTL */
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h, lazy, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    /* Past half the TTL, then read one and only look the other up. */
    sleep(2);
    ASSERT_RC(lmca_get(h, key, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_exists(h, lazy, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_prefix(h, keys, 1, &count, NULL, &err), LMCA_OK, &err);
    usleep(300 * 1000); /* the server touches after it answers */
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    ASSERT(meta.ttl >= 3);
    ASSERT_RC(lmca_stat(h, lazy, &meta, &err), LMCA_OK, &err);
    ASSERT(meta.ttl <= 2);
    /* The touched one outlives the one only looked up. */
    sleep(3);
    ASSERT_RC(lmca_get(h, key, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get(h, lazy, out, sizeof out, &got, NULL, &err), LMCA_MISS, &err);
    lmca_close(h);
}

TEST(read_touch_off_leaves_the_ttl_alone)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    lmca_meta_t meta;
    uint8_t buf[64] = {3}, out[64];
    size_t got;
    const char *key = th_key("notouch");

    th_config(&cfg, "small");
    cfg.default_ttl_seconds = 4;
    cfg.read_touch_ttl_percent = -1;
    cfg.touch_on_hit = false;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    sleep(2);
    ASSERT_RC(lmca_get(h, key, out, sizeof out, &got, NULL, &err), LMCA_OK, &err);
    usleep(300 * 1000);
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    ASSERT(meta.ttl <= 2);
    lmca_close(h);
}

TEST_LIST = {
    T(eviction_plan_gives_a_second_half_the_target),
    T(eviction_plan_leaves_pinned_records_out_and_guesses_an_empty_namespace),
    T(eviction_plan_leads_by_what_the_storage_holds_past_eviction),
    T(eviction_plan_is_off_without_eviction_nsup_or_a_ttl),
    T(void_times_follow_write_order_and_hold_few_records_a_second),
    T(every_record_of_a_chunk_is_due_in_one_second),
    T(refused_writes_are_tried_again_until_they_land),
    T(a_put_refused_past_its_budget_is_dropped_by_cause_and_leaves_nothing),
    T(a_put_refused_for_load_waits_max_put_wait_ms_in_all),
    T(a_put_refused_for_load_stops_at_its_bound_a_slow_one_lands),
    T(a_put_that_timed_out_and_was_refused_for_load_keeps_its_bound),
    T(drops_of_another_cause_are_warned_within_the_minute),
    T(a_namespace_that_stays_full_drops_stores_unsent_and_looks_again),
    T(a_stripe_out_of_space_drops_its_put_alone),
    T(a_refused_put_waits_on_while_others_land),
    T(no_backpressure_fails_at_the_first_refusal),
    T(gets_touch_and_lookups_do_not),
    T(read_touch_off_leaves_the_ttl_alone),
};
TEST_MAIN()
