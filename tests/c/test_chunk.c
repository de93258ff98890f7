/*
 * test_chunk.c - chunks against a server (the test server, or a real one named
 * by AEROSPIKE_TEST_HOSTS): round trips, prefix lookups, misses that must never
 * return partial data, overwrite, TTL and pinning, remove, touch.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

#define KIB (1024ull)
#define MIB (1024ull * 1024ull)

/* Puts `len` seeded bytes, reads them back, checks them, returns nseg. */
static uint32_t
round_trip(lmca_t *h, size_t len, uint32_t seed)
{
    const char *key = th_key("rt");
    uint8_t *in = malloc(len ? len : 1), *out = malloc(len + 16);
    lmca_err_t err = {0};
    lmca_meta_t meta;
    size_t got = 0;

    th_fill(in, len, seed);
    ASSERT_RC(lmca_put(h, key, in, len, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get(h, key, out, len + 16, &got, &meta, &err), LMCA_OK, &err);
    ASSERT_EQ(got, len);
    ASSERT(memcmp(in, out, len) == 0);
    ASSERT_EQ(meta.tot_b, len);
    free(in);
    free(out);
    return meta.nseg;
}

/* Spec 4.9 sizes, with the segment counts the write-block grid gives. */
static void
round_trips(const char *ns, const uint32_t want_nseg[6])
{
    static const size_t sizes[6] = {256, 64 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB};
    lmca_t *h = th_open(ns);
    const lmca_limits_t *l = lmca_limits(h);

    for (int i = 0; i < 6; i++) {
        uint32_t nseg = round_trip(h, sizes[i], (uint32_t)i + 1);
        lmca_plan_t plan;
        ASSERT_RC(lmca_plan(l, sizes[i], &plan, NULL), LMCA_OK, &(lmca_err_t){0});
        ASSERT_EQ(nseg, plan.nseg);
        ASSERT_EQ(nseg, want_nseg[i]);
    }
    lmca_close(h);
}

TEST(round_trips_8mib_cap)
{
    /* cap 8 MiB: max 8 MiB - 64 KiB; target and threshold G4 = 2 MiB - 64 KiB. */
    static const uint32_t want[6] = {1, 1, 1, 3, 9, 34};
    round_trips("lmcache", want);
}

TEST(round_trips_1mib_cap)
{
    /* cap 1 MiB: every record at most 1 MiB - 64 KiB = 960 KiB. */
    static const uint32_t want[6] = {1, 1, 2, 5, 18, 69};
    round_trips("small", want);
}

TEST(empty_and_one_byte_payloads)
{
    lmca_t *h = th_open("lmcache");
    ASSERT_EQ(round_trip(h, 0, 7), 1);
    ASSERT_EQ(round_trip(h, 1, 8), 1);
    lmca_close(h);
}

TEST(md_serde_and_tags_round_trip)
{
    lmca_t *h = th_open("lmcache");
    const char *key = th_key("md");
    uint8_t md[100], buf[300];
    lmca_put_opts_t o = {.md = md, .md_len = sizeof md, .serde = "naive", .ttl_class = "session"};
    lmca_meta_t meta;
    lmca_err_t err = {0};

    th_fill(md, sizeof md, 3);
    th_fill(buf, sizeof buf, 4);
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, &o, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    ASSERT_EQ(meta.md_len, sizeof md);
    ASSERT(meta.md != NULL && memcmp(meta.md, md, sizeof md) == 0);
    ASSERT(strcmp(meta.serde, "naive") == 0);
    ASSERT(strcmp(meta.ttl_class, "session") == 0);
    ASSERT_EQ(meta.ver, LMCA_SCHEMA_VERSION);
    ASSERT(meta.wid != 0);
    ASSERT(!meta.pin);
    ASSERT(meta.created_at > 1700000000);
    lmca_meta_clear(&meta);
    ASSERT(meta.md == NULL);
    lmca_close(h);
}

TEST(prefix_counts_leading_hits)
{
    lmca_t *h = th_open("lmcache");
    const char *keys[4];
    uint8_t byte = 1, found[4];
    size_t count = 99;
    lmca_err_t err = {0};

    for (int i = 0; i < 4; i++)
        keys[i] = th_key("px");
    for (int i = 0; i < 4; i++)
        if (i != 2)
            ASSERT_RC(lmca_put(h, keys[i], &byte, 1, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_prefix(h, keys, 4, &count, found, &err), LMCA_OK, &err);
    ASSERT_EQ(count, 2);
    ASSERT(found[0] == 1 && found[1] == 1 && found[2] == 0 && found[3] == 1);
    ASSERT_RC(lmca_prefix(h, keys + 2, 2, &count, NULL, &err), LMCA_OK, &err);
    ASSERT_EQ(count, 0);
    ASSERT_RC(lmca_prefix(h, keys, 0, &count, NULL, &err), LMCA_OK, &err);
    ASSERT_EQ(count, 0);
    lmca_close(h);
}

/* A 3-segment chunk in `ns` under a new key; returns the key. */
static const char *
put_three_segments(lmca_t *h, uint8_t **data, size_t *len)
{
    const char *key = th_key("seg");
    lmca_err_t err = {0};
    *len = 2 * lmca_limits(h)->target_segment_bytes + 1000;
    *data = malloc(*len);
    th_fill(*data, *len, 11);
    ASSERT_RC(lmca_put(h, key, *data, *len, NULL, &err), LMCA_OK, &err);
    return key;
}

TEST(segments_without_meta_read_as_miss)
{
    lmca_t *h = th_open("small");
    const char *key = th_key("orphan");
    uint64_t seg = lmca_limits(h)->target_segment_bytes;
    uint8_t *data = malloc(3 * seg), *out = malloc(3 * seg);
    size_t got = 1, count = 1;
    lmca_err_t err = {0};
    lmca_put_t p = {.key = key, .buf = data, .len = 3 * seg};

    th_fill(data, 3 * seg, 5);
    ASSERT_RC(lmca_put_begin(h, &p, &err), LMCA_OK, &err);
    ASSERT_EQ(p.meta.nseg, 3);
    ASSERT_RC(lmca_put_segments(h, &p, 0, 3, &err), LMCA_OK, &err); /* and no commit */
    ASSERT_RC(lmca_get(h, key, out, 3 * seg, &got, NULL, &err), LMCA_MISS, &err);
    ASSERT_EQ(got, 0);
    ASSERT_RC(lmca_exists(h, key, &err), LMCA_MISS, &err);
    ASSERT_RC(lmca_prefix(h, &key, 1, &count, NULL, &err), LMCA_OK, &err);
    ASSERT_EQ(count, 0);
    free(data);
    free(out);
    lmca_close(h);
}

TEST(missing_segment_is_miss)
{
    lmca_t *h = th_open("small");
    uint8_t *data, *out;
    size_t len, got = 1;
    const char *key = put_three_segments(h, &data, &len);
    char reckey[LMCA_KEY_MAX + 16];
    lmca_err_t err = {0};

    snprintf(reckey, sizeof reckey, "%s|s|1", key);
    ASSERT_EQ(th_record_remove("small", reckey), 0);
    out = malloc(len);
    ASSERT_RC(lmca_get(h, key, out, len, &got, NULL, &err), LMCA_MISS, &err);
    ASSERT_EQ(got, 0);
    ASSERT_RC(lmca_exists(h, key, &err), LMCA_OK, &err); /* the meta record is intact */
    free(data);
    free(out);
    lmca_close(h);
}

/* The write id of `key`'s chunk, from its meta record. */
static uint64_t
wid_of(lmca_t *h, const char *key)
{
    lmca_meta_t meta;
    lmca_err_t err = {0};
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    lmca_meta_clear(&meta);
    return meta.wid;
}

/* Replaces segment `i` of `key` with `len` bytes from `src`, carrying `wid`. */
static void
plant_segment(const char *ns, const char *key, uint32_t i, uint64_t wid, const void *src,
              size_t len)
{
    char reckey[LMCA_KEY_MAX + 16];
    th_bin bins[2] = {TH_BLOB("b", src, len), TH_INT("wid", wid)};
    snprintf(reckey, sizeof reckey, "%s|s|%u", key, i);
    ASSERT_EQ(th_plant(ns, reckey, bins, 2), 0);
}

TEST(short_segment_is_miss)
{
    lmca_t *h = th_open("small");
    uint8_t *data, *out;
    size_t len, got = 1;
    const char *key = put_three_segments(h, &data, &len);
    lmca_err_t err = {0};

    plant_segment("small", key, 1, wid_of(h, key), data, 1000);
    out = malloc(len);
    ASSERT_RC(lmca_get(h, key, out, len, &got, NULL, &err), LMCA_MISS, &err);
    free(data);
    free(out);
    lmca_close(h);
}

static lmca_t *
open_crc(const char *ns)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    th_config(&cfg, ns);
    cfg.enable_crc32 = true;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    return h;
}

TEST(crc_mismatch_in_segments_is_miss)
{
    lmca_t *h = open_crc("small");
    uint8_t *data, *out;
    size_t len, got = 1;
    const char *key = put_three_segments(h, &data, &len);
    uint64_t seg = lmca_limits(h)->target_segment_bytes;
    lmca_stats_t st;
    lmca_err_t err = {0};

    out = malloc(len);
    ASSERT_RC(lmca_get(h, key, out, len, &got, NULL, &err), LMCA_OK, &err);
    /* Same length and write id, other bytes, no segment CRC: only the chunk's
       CRC can tell. */
    data[seg + 5] ^= 0xff;
    plant_segment("small", key, 1, wid_of(h, key), data + seg, seg);
    ASSERT_RC(lmca_get(h, key, out, len, &got, NULL, &err), LMCA_MISS, &err);
    lmca_stats(h, &st);
    ASSERT_EQ(st.crc_mismatch, 1);
    free(data);
    free(out);
    lmca_close(h);
}

TEST(crc_mismatch_inline_is_miss)
{
    lmca_t *h = open_crc("lmcache");
    const char *key = th_key("crc1");
    char mkey[LMCA_KEY_MAX + 16];
    uint8_t buf[4096], out[4096];
    lmca_meta_t meta;
    size_t got;
    lmca_err_t err = {0};

    th_fill(buf, sizeof buf, 9);
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    ASSERT(meta.has_crc32);
    th_bin bins[] = {TH_INT("ver", LMCA_SCHEMA_VERSION), TH_STR("state", "ready"),
                     TH_INT("nseg", 1), TH_INT("seg_b", sizeof buf), TH_INT("tot_b", sizeof buf),
                     TH_INT("wid", meta.wid), TH_INT("created_at", 1), TH_INT("pin", 0),
                     TH_INT("crc32", meta.crc32 ^ 1), TH_BLOB("b", buf, sizeof buf)};
    snprintf(mkey, sizeof mkey, "%s|m", key);
    ASSERT_EQ(th_plant("lmcache", mkey, bins, sizeof bins / sizeof bins[0]), 0);
    ASSERT_RC(lmca_get(h, key, out, sizeof out, &got, NULL, &err), LMCA_MISS, &err);
    lmca_close(h);
}

TEST(overwrite_replaces_value_both_ways)
{
    lmca_t *h = th_open("small");
    const char *key = th_key("ow");
    size_t big = 5 * MIB, small = 100 * KIB, got;
    uint8_t *a = malloc(big), *out = malloc(big);
    lmca_err_t err = {0};

    th_fill(a, big, 21);
    ASSERT_RC(lmca_put(h, key, a, big, NULL, &err), LMCA_OK, &err);
    th_fill(a, small, 22);
    ASSERT_RC(lmca_put(h, key, a, small, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get(h, key, out, big, &got, NULL, &err), LMCA_OK, &err);
    ASSERT_EQ(got, small);
    ASSERT(memcmp(a, out, small) == 0);
    th_fill(a, big, 23);
    ASSERT_RC(lmca_put(h, key, a, big, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get(h, key, out, big, &got, NULL, &err), LMCA_OK, &err);
    ASSERT_EQ(got, big);
    ASSERT(memcmp(a, out, big) == 0);
    free(a);
    free(out);
    lmca_close(h);
}

static lmca_t *
open_ttl(const char *ns, int64_t ttl)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    th_config(&cfg, ns);
    cfg.default_ttl_seconds = ttl;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    return h;
}

TEST(ttl_expires_and_pinned_keys_survive)
{
    lmca_t *h = open_ttl("small", 1);
    size_t len = 2 * MIB, got; /* 3 segments on a 1 MiB cap */
    uint8_t *buf = malloc(len), *out = malloc(len);
    const char *plain = th_key("ttl"), *pinned = th_key("pin");
    lmca_put_opts_t pin = {.pin = true};
    lmca_err_t err = {0};

    th_fill(buf, len, 31);
    ASSERT_RC(lmca_put(h, plain, buf, len, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h, pinned, buf, len, &pin, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_exists(h, plain, &err), LMCA_OK, &err);
    sleep(3);
    ASSERT_RC(lmca_get(h, plain, out, len, &got, NULL, &err), LMCA_MISS, &err);
    ASSERT_RC(lmca_get(h, pinned, out, len, &got, NULL, &err), LMCA_OK, &err);
    ASSERT(memcmp(buf, out, len) == 0);
    ASSERT_RC(lmca_remove(h, pinned, &err), LMCA_OK, &err); /* pinned: it would stay forever */
    free(buf);
    free(out);
    lmca_close(h);
}

TEST(touch_pins_and_unpins_every_record)
{
    lmca_t *h = open_ttl("small", 100);
    uint8_t *data;
    size_t len;
    const char *key = put_three_segments(h, &data, &len);
    char reckey[LMCA_KEY_MAX + 16];
    lmca_meta_t meta;
    uint32_t ttl = 0;
    lmca_err_t err = {0};

    ASSERT_RC(lmca_touch(h, key, true, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    ASSERT(meta.pin);
    ASSERT_EQ(meta.ttl, UINT32_MAX);
    snprintf(reckey, sizeof reckey, "%s|s|2", key);
    ASSERT_EQ(th_record_ttl("small", reckey, &ttl), 0);
    ASSERT_EQ(ttl, UINT32_MAX);
    ASSERT_RC(lmca_touch(h, key, false, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_stat(h, key, &meta, &err), LMCA_OK, &err);
    ASSERT(!meta.pin);
    ASSERT(meta.ttl > 0 && meta.ttl <= 100);
    /* Every record of the chunk is due in the same second (cache.c). */
    ASSERT_EQ(th_record_ttl("small", reckey, &ttl), 0);
    ASSERT(ttl + 1 >= meta.ttl && ttl <= meta.ttl + 1 && ttl <= 100);
    ASSERT_RC(lmca_touch(h, th_key("absent"), true, &err), LMCA_MISS, &err);
    free(data);
    lmca_close(h);
}

TEST(remove_deletes_meta_and_segments)
{
    lmca_t *h = th_open("small");
    uint8_t *data;
    size_t len;
    const char *key = put_three_segments(h, &data, &len);
    char reckey[LMCA_KEY_MAX + 16];
    lmca_err_t err = {0};

    ASSERT_RC(lmca_remove(h, key, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_exists(h, key, &err), LMCA_MISS, &err);
    for (int i = 0; i < 3; i++) {
        snprintf(reckey, sizeof reckey, "%s|s|%d", key, i);
        ASSERT_EQ(th_record_ttl("small", reckey, NULL), 2);
    }
    snprintf(reckey, sizeof reckey, "%s|m", key);
    ASSERT_EQ(th_record_ttl("small", reckey, NULL), 2);
    ASSERT_RC(lmca_remove(h, key, &err), LMCA_MISS, &err);
    free(data);
    lmca_close(h);
}

TEST(bad_arguments_are_einval)
{
    lmca_t *h = th_open("lmcache");
    char longkey[LMCA_KEY_MAX + 2];
    uint8_t buf[64] = {0}, md[LMCA_MD_MAX + 1];
    lmca_put_opts_t o = {.md = md, .md_len = sizeof md};
    const char *key = th_key("args");
    size_t got = 0;
    lmca_err_t err = {0};

    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    ASSERT_RC(lmca_put(h, NULL, buf, 1, NULL, &err), LMCA_EINVAL, &err);
    ASSERT_RC(lmca_put(h, "", buf, 1, NULL, &err), LMCA_EINVAL, &err);
    ASSERT_RC(lmca_put(h, longkey, buf, 1, NULL, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "longer than");
    ASSERT_RC(lmca_put(h, key, NULL, 10, NULL, &err), LMCA_EINVAL, &err);
    ASSERT_RC(lmca_put(h, key, buf, 1, &o, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "md of 8193 bytes");
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get(h, key, buf, 10, &got, NULL, &err), LMCA_EINVAL, &err);
    ASSERT_EQ(got, sizeof buf);
    ASSERT_CONTAINS(err.msg, "smaller than the stored 64");
    lmca_close(h);
}

TEST(small_chunks_in_batch_calls)
{
    lmca_t *h = th_open("small");
    const char *keys[4] = {th_key("bk"), th_key("bk"), th_key("bk"), th_key("bk")};
    uint8_t a[3000], b[5000], ra[3000], rb[5000], dummy[1], md[40];
    static uint8_t big[2 * MIB];
    lmca_put_opts_t opts[2] = {{.serde = "naive", .md = md, .md_len = sizeof md}, {.pin = true}};
    lmca_put_t ps[2] = {{.key = keys[0], .buf = a, .len = sizeof a, .opts = &opts[0]},
                        {.key = keys[1], .buf = b, .len = sizeof b, .opts = &opts[1]}};
    lmca_get_t gs[4];
    int results[4];
    lmca_err_t err = {0};

    th_fill(a, sizeof a, 1);
    th_fill(b, sizeof b, 2);
    for (int i = 0; i < 2; i++)
        ASSERT_RC(lmca_put_begin(h, &ps[i], &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put_commit_many(h, ps, 2, results, &err), LMCA_OK, &err);
    ASSERT(results[0] == LMCA_OK && results[1] == LMCA_OK);
    ASSERT_RC(lmca_put(h, keys[3], big, sizeof big, NULL, &err), LMCA_OK, &err);
    /* ask: hit (with md), miss, hit, multi-segment chunk */
    gs[0] = (lmca_get_t){.key = keys[0], .buf = ra, .cap = sizeof ra, .want_md = true};
    gs[1] = (lmca_get_t){.key = keys[2], .buf = dummy, .cap = sizeof dummy};
    gs[2] = (lmca_get_t){.key = keys[1], .buf = rb, .cap = sizeof rb};
    gs[3] = (lmca_get_t){.key = keys[3], .buf = dummy, .cap = sizeof dummy};
    ASSERT_RC(lmca_get_begin_many(h, gs, 4, results, &err), LMCA_OK, &err);
    ASSERT_EQ(results[0], LMCA_OK);
    ASSERT_EQ(results[1], LMCA_MISS);
    ASSERT_EQ(results[2], LMCA_OK);
    ASSERT_EQ(results[3], LMCA_OK);
    ASSERT_EQ(gs[0].meta.tot_b, sizeof a);
    ASSERT(memcmp(ra, a, sizeof a) == 0);
    ASSERT(strcmp(gs[0].meta.serde, "naive") == 0);
    ASSERT(gs[0].meta.md_len == sizeof md && memcmp(gs[0].meta.md, md, sizeof md) == 0);
    ASSERT(memcmp(rb, b, sizeof b) == 0);
    ASSERT(gs[2].meta.pin && gs[2].meta.md == NULL);
    ASSERT_EQ(gs[3].meta.nseg, 3);
    for (int i = 0; i < 4; i++)
        lmca_meta_clear(&gs[i].meta);
    ASSERT_RC(lmca_remove(h, keys[1], &err), LMCA_OK, &err); /* pinned: it would stay forever */
    lmca_close(h);
}

TEST(batch_commit_refuses_puts_that_need_segments)
{
    lmca_t *h = th_open("small");
    static uint8_t small[10], big[2 * MIB];
    lmca_put_t ps[2] = {{.key = th_key("bk"), .buf = small, .len = sizeof small},
                        {.key = th_key("bk"), .buf = big, .len = sizeof big}};
    int results[2] = {99, 99};
    lmca_err_t err = {0};

    for (int i = 0; i < 2; i++)
        ASSERT_RC(lmca_put_begin(h, &ps[i], &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put_commit_many(h, ps, 2, results, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "single-record");
    ASSERT(results[0] == LMCA_EINVAL && results[1] == LMCA_EINVAL); /* every row set */
    ASSERT_RC(lmca_exists(h, ps[0].key, &err), LMCA_MISS, &err); /* nothing was written */
    lmca_close(h);
}

/* Defect: the results of a tile were read after its call had failed, before
   they were set (a bad key returned early, leaving them uninitialized). */
TEST(batch_get_sets_every_result_when_it_fails_early)
{
    lmca_t *h = th_open("small");
    uint8_t buf[8];
    lmca_get_t gs[3] = {{.key = th_key("bk"), .buf = buf, .cap = sizeof buf},
                        {.key = "", .buf = buf, .cap = sizeof buf},
                        {.key = th_key("bk"), .buf = buf, .cap = sizeof buf}};
    int results[3] = {0x55, 0x55, 0x55};
    lmca_err_t err = {0};

    ASSERT_RC(lmca_get_begin_many(h, gs, 3, results, &err), LMCA_EINVAL, &err);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(results[i], LMCA_EINVAL);
    lmca_close(h);
}

/* Metadata first, destination later: what a caller that allocates from the md
   blob needs, without reading a one-record chunk twice. */
TEST(held_gets_place_the_payload_after_the_metadata)
{
    lmca_t *h = th_open("small");
    size_t small = 3000, big = 2 * MIB;
    uint8_t *a = malloc(small), *b = malloc(big), *out = malloc(big), md[20];
    const char *keys[2] = {th_key("held"), th_key("held")};
    lmca_put_opts_t o = {.md = md, .md_len = sizeof md};
    lmca_get_t gs[2] = {{.key = keys[0], .hold = true, .want_md = true},
                        {.key = keys[1], .hold = true, .want_md = true}};
    int results[2];
    long long reads;
    lmca_err_t err = {0};

    th_fill(a, small, 1);
    th_fill(b, big, 2);
    th_fill(md, sizeof md, 3);
    ASSERT_RC(lmca_put(h, keys[0], a, small, &o, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h, keys[1], b, big, &o, &err), LMCA_OK, &err);
    reads = th_fixture_stat("reads"); /* -1 on a real server */
    ASSERT_RC(lmca_get_begin(h, &gs[0], &err), LMCA_OK, &err);
    ASSERT(gs[0].held != NULL && gs[0].meta.tot_b == small);
    ASSERT(gs[0].meta.md != NULL && memcmp(gs[0].meta.md, md, sizeof md) == 0);
    ASSERT_RC(lmca_get_place(&gs[0], out, small - 1, &err), LMCA_EINVAL, &err);
    ASSERT_RC(lmca_get_place(&gs[0], out, big, &err), LMCA_OK, &err);
    ASSERT(gs[0].held == NULL && memcmp(out, a, small) == 0);
    ASSERT_RC(lmca_get_end(h, &gs[0]), LMCA_OK, &err);
    if (reads >= 0) /* the payload came with the metadata: one read */
        ASSERT_EQ(th_fixture_stat("reads") - reads, 1);
    lmca_get_release(&gs[0]);
    /* A chunk of segments holds nothing: its segments go to the placed buffer. */
    ASSERT_RC(lmca_get_begin_many(h, &gs[1], 1, results, &err), LMCA_OK, &err);
    ASSERT(results[0] == LMCA_OK && gs[1].held == NULL && gs[1].meta.nseg == 3);
    ASSERT_RC(lmca_get_place(&gs[1], out, big, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get_segments(h, &gs[1], 0, 3, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get_end(h, &gs[1]), LMCA_OK, &err);
    ASSERT(memcmp(out, b, big) == 0);
    lmca_get_release(&gs[1]);
    /* A miss holds nothing either. */
    lmca_get_t miss = {.key = th_key("absent"), .hold = true};
    ASSERT_RC(lmca_get_begin(h, &miss, &err), LMCA_MISS, &err);
    ASSERT(miss.held == NULL);
    free(a);
    free(b);
    free(out);
    lmca_close(h);
}

TEST(crc32_is_zlibs)
{
    ASSERT_EQ(lmca_crc32("hello", 5), 0x3610a686); /* zlib crc32("hello") */
    ASSERT_EQ(lmca_crc32("", 0), 0);
}

/* Defect: lmca_meta_t embedded an 8 KiB md, copied in every element of a tile;
   md is now allocated only when present and asked for. */
TEST(meta_is_small_and_md_allocated_only_when_asked)
{
    lmca_t *h = th_open("lmcache");
    const char *with = th_key("md"), *without = th_key("nomd");
    uint8_t md[300], buf[10] = {0}, out[10];
    lmca_put_opts_t o = {.md = md, .md_len = sizeof md};
    lmca_get_t g = {.key = with, .buf = out, .cap = sizeof out};
    lmca_meta_t meta;
    lmca_err_t err = {0};

    ASSERT(sizeof(lmca_meta_t) < 512);
    th_fill(md, sizeof md, 5);
    ASSERT_RC(lmca_put(h, with, buf, sizeof buf, &o, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h, without, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get_begin(h, &g, &err), LMCA_OK, &err);
    ASSERT(g.meta.md == NULL && g.meta.md_len == sizeof md); /* not asked for */
    g.want_md = true;
    ASSERT_RC(lmca_get_begin(h, &g, &err), LMCA_OK, &err);
    ASSERT(g.meta.md != NULL && memcmp(g.meta.md, md, sizeof md) == 0);
    lmca_meta_clear(&g.meta);
    ASSERT_RC(lmca_stat(h, without, &meta, &err), LMCA_OK, &err);
    ASSERT(meta.md == NULL && meta.md_len == 0); /* asked for, not present */
    lmca_close(h);
}

/* Defect: touch cost one round trip per segment; the segments now go in one
   batch call, then the meta record. */
TEST(touch_batches_the_segments)
{
    lmca_t *h;
    uint8_t *data;
    size_t len;
    const char *key;
    long long batches, touches;
    lmca_err_t err = {0};

    th_need_fixture("command counters");
    h = th_open("small");
    key = put_three_segments(h, &data, &len);
    batches = th_fixture_stat("batches");
    touches = th_fixture_stat("touches");
    ASSERT_RC(lmca_touch(h, key, true, &err), LMCA_OK, &err);
    ASSERT_EQ(th_fixture_stat("batches") - batches, 1); /* the three segments */
    ASSERT_EQ(th_fixture_stat("touches") - touches, 3); /* one row each (the meta record's
                                                           touch writes pin: a write) */
    free(data);
    lmca_close(h);
}

/* Several threads share one handle (the libaerospike client is thread-safe). */
static void *
worker(void *arg)
{
    lmca_t *h = arg;
    size_t len = 1536 * KIB, got;
    uint8_t *in = malloc(len), *out = malloc(len);
    for (int i = 0; i < 4; i++) {
        char k[128]; /* th_key is not thread-safe */
        snprintf(k, sizeof k, "mt-%ld-%lu-%d", (long)getpid(), (unsigned long)pthread_self(), i);
        th_fill(in, len, (uint32_t)i);
        if (lmca_put(h, k, in, len, NULL, NULL) != LMCA_OK ||
            lmca_get(h, k, out, len, &got, NULL, NULL) != LMCA_OK || got != len ||
            memcmp(in, out, len) != 0)
            return (void *)1;
    }
    free(in);
    free(out);
    return NULL;
}

TEST(threads_share_one_handle)
{
    lmca_t *h = th_open("small");
    pthread_t t[4];
    void *ret;
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, h);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], &ret);
        ASSERT(ret == NULL);
    }
    lmca_close(h);
}

TEST_LIST = {
    T(round_trips_8mib_cap),
    T(round_trips_1mib_cap),
    T(empty_and_one_byte_payloads),
    T(md_serde_and_tags_round_trip),
    T(prefix_counts_leading_hits),
    T(segments_without_meta_read_as_miss),
    T(missing_segment_is_miss),
    T(short_segment_is_miss),
    T(crc_mismatch_in_segments_is_miss),
    T(crc_mismatch_inline_is_miss),
    T(overwrite_replaces_value_both_ways),
    T(ttl_expires_and_pinned_keys_survive),
    T(touch_pins_and_unpins_every_record),
    T(remove_deletes_meta_and_segments),
    T(bad_arguments_are_einval),
    T(small_chunks_in_batch_calls),
    T(batch_commit_refuses_puts_that_need_segments),
    T(batch_get_sets_every_result_when_it_fails_early),
    T(held_gets_place_the_payload_after_the_metadata),
    T(crc32_is_zlibs),
    T(meta_is_small_and_md_allocated_only_when_asked),
    T(touch_batches_the_segments),
    T(threads_share_one_handle),
};
TEST_MAIN()
