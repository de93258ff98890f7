/*
 * test_inspect.c - lmca_inspect takes one chunk apart for an operator: the meta
 * record as reads validate it, each segment's state, and the payload's CRC.
 * Damage is planted with libaerospike (th_plant, th_record_remove), as
 * test_torn.c and test_hostile.c do.
 */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

#define KIB (1024ull)

/* A handle whose chunks of 2 * target + 1000 bytes have three segments, read
   in one batch call, or with `one_by_one` each alone (as large ones go). */
static lmca_t *
open_segments(bool crc, bool one_by_one)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    th_config_segments(&cfg);
    cfg.enable_crc32 = crc;
    cfg.batch_threshold_bytes = one_by_one ? 16 * KIB : cfg.batch_threshold_bytes;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    return h;
}

static lmca_t *
open_small_segments(bool crc)
{
    return open_segments(crc, false);
}

/* Puts a three-segment chunk under a new key; returns the key, and its meta
   record in *m. */
static const char *
put_chunk(lmca_t *h, const lmca_put_opts_t *opts, lmca_meta_t *m)
{
    const char *key = th_key("inspect");
    size_t len = 2 * lmca_limits(h)->target_segment_bytes + 1000;
    uint8_t *buf = malloc(len);
    lmca_err_t err = {0};

    th_fill(buf, len, 11);
    ASSERT_RC(lmca_put(h, key, buf, len, opts, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_stat(h, key, m, &err), LMCA_OK, &err);
    lmca_meta_clear(m);
    free(buf);
    return key;
}

static const char *
segment_key(const char *key, uint32_t i)
{
    static char reckey[LMCA_KEY_MAX + 16];
    snprintf(reckey, sizeof reckey, "%s|s|%u", key, i);
    return reckey;
}

/* Replaces segment i of `key` with a payload of `len` bytes and write id `wid`. */
static void
plant_segment(const char *key, uint32_t i, const uint8_t *payload, size_t len, uint64_t wid)
{
    th_bin bins[] = {TH_BLOB("b", payload, len), TH_INT("wid", wid)};
    ASSERT_EQ(th_plant("small", segment_key(key, i), bins, 2), 0);
}

/* Inspects `key`, expecting LMCA_OK and three segments in `want` states. */
static void
expect(lmca_t *h, const char *key, const char *want, lmca_crc_verdict crc, lmca_inspect_t *in)
{
    lmca_err_t err = {0};
    char got[4] = "";
    ASSERT_RC(lmca_inspect(h, key, in, &err), LMCA_OK, &err);
    ASSERT_EQ(in->meta.nseg, 3);
    ASSERT(in->segs != NULL);
    for (int i = 0; i < 3; i++)
        got[i] = "omwc"[in->segs[i] & 3]; /* ok, missing, other write, corrupt */
    if (strcmp(got, want) != 0)
        th_fail(__FILE__, __LINE__, "segments \"%s\", want \"%s\"", got, want);
    ASSERT_EQ(in->crc, crc);
}

static void
whole_chunk(bool one_by_one)
{
    lmca_t *h = open_segments(true, one_by_one);
    lmca_put_opts_t o = {.md = "remote-md", .md_len = 9, .serde = "naive", .ttl_class = "s"};
    lmca_inspect_t in;
    lmca_meta_t m;
    const char *key = put_chunk(h, &o, &m);

    expect(h, key, "ooo", LMCA_CRC_OK, &in);
    ASSERT_EQ(in.meta.tot_b, m.tot_b);
    ASSERT_EQ(in.meta.wid, m.wid);
    ASSERT(in.meta.has_crc32);
    ASSERT_EQ(in.meta.md_len, 9);
    ASSERT(in.meta.md != NULL && memcmp(in.meta.md, "remote-md", 9) == 0);
    ASSERT(strcmp(in.meta.serde, "naive") == 0 && strcmp(in.meta.ttl_class, "s") == 0);
    ASSERT(in.meta.ttl > 0 && in.meta.ttl <= 60); /* th_config's default TTL */
    lmca_inspect_clear(&in);
    ASSERT(in.segs == NULL && in.meta.md == NULL);
    lmca_inspect_clear(&in); /* twice is harmless */
    lmca_close(h);
}

TEST(whole_chunk_with_crc_reads_ok_everywhere)
{
    whole_chunk(false);
}

/* One segment at a time: the payload's CRC is carried from read to read. */
TEST(whole_chunk_read_segment_by_segment_reads_ok_too)
{
    whole_chunk(true);
}

TEST(chunk_without_crc_says_absent_and_pinned_never_expires)
{
    lmca_t *h = open_small_segments(false);
    lmca_put_opts_t pin = {.pin = true};
    lmca_inspect_t in;
    lmca_err_t err = {0};
    lmca_meta_t m;
    const char *key = put_chunk(h, &pin, &m);

    expect(h, key, "ooo", LMCA_CRC_ABSENT, &in);
    ASSERT_EQ(in.meta.ttl, UINT32_MAX);
    ASSERT(in.meta.pin);
    lmca_inspect_clear(&in);
    ASSERT_RC(lmca_remove(h, key, &err), LMCA_OK, &err); /* pinned: would stay */
    lmca_close(h);
}

TEST(one_record_chunk_has_no_segments_and_checks_its_crc)
{
    lmca_t *h = open_small_segments(true);
    const char *key = th_key("inspect1");
    uint8_t buf[3000];
    lmca_inspect_t in;
    lmca_err_t err = {0};

    th_fill(buf, sizeof buf, 12);
    ASSERT_RC(lmca_put(h, key, buf, sizeof buf, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_inspect(h, key, &in, &err), LMCA_OK, &err);
    ASSERT_EQ(in.meta.nseg, 1);
    ASSERT(in.segs == NULL);
    ASSERT_EQ(in.crc, LMCA_CRC_OK);
    /* The same record with one byte flipped, under the old CRC. */
    char mkey[LMCA_KEY_MAX + 16];
    snprintf(mkey, sizeof mkey, "%s|m", key);
    buf[100] ^= 1;
    th_bin flipped[] = {TH_INT("ver", 2),       TH_STR("state", "ready"),
                        TH_INT("nseg", 1),      TH_INT("seg_b", sizeof buf),
                        TH_INT("tot_b", sizeof buf), TH_INT("wid", in.meta.wid),
                        TH_INT("created_at", 1), TH_INT("pin", 0),
                        TH_INT("crc32", in.meta.crc32), TH_BLOB("b", buf, sizeof buf)};
    lmca_inspect_clear(&in);
    ASSERT_EQ(th_plant("small", mkey, flipped, 10), 0);
    ASSERT_RC(lmca_inspect(h, key, &in, &err), LMCA_OK, &err);
    ASSERT_EQ(in.crc, LMCA_CRC_MISMATCH);
    lmca_inspect_clear(&in);
    lmca_close(h);
}

TEST(missing_segment_is_named_and_leaves_the_crc_unchecked)
{
    lmca_t *h = open_small_segments(true);
    lmca_inspect_t in;
    lmca_stats_t before, after;
    lmca_meta_t m;
    const char *key = put_chunk(h, NULL, &m);

    ASSERT_EQ(th_record_remove("small", segment_key(key, 1)), 0);
    lmca_stats(h, &before);
    expect(h, key, "omo", LMCA_CRC_UNCHECKED, &in);
    lmca_inspect_clear(&in);
    lmca_stats(h, &after);
    ASSERT_EQ(after.torn, before.torn); /* told to the caller, not counted */
    lmca_close(h);
}

TEST(segments_of_another_write_or_damaged_are_told_apart)
{
    lmca_t *h = open_small_segments(false);
    lmca_inspect_t in;
    lmca_meta_t m;
    const char *key = put_chunk(h, NULL, &m);
    uint8_t *junk = calloc(1, m.tot_b);

    /* Segment 2: whole, but of another write. */
    plant_segment(key, 2, junk, m.tot_b - 2 * m.seg_b, m.wid + 1);
    expect(h, key, "oow", LMCA_CRC_ABSENT, &in);
    lmca_inspect_clear(&in);
    /* Segment 0: this write's id, but a byte short. */
    plant_segment(key, 0, junk, m.seg_b - 1, m.wid);
    expect(h, key, "cow", LMCA_CRC_ABSENT, &in);
    lmca_inspect_clear(&in);
    free(junk);
    lmca_close(h);
}

TEST(segments_whole_but_of_other_bytes_fail_the_crc)
{
    lmca_t *h = open_small_segments(true);
    lmca_inspect_t in;
    lmca_meta_t m;
    const char *key = put_chunk(h, NULL, &m);
    uint8_t *junk = calloc(1, m.seg_b);

    /* This write's id and length, no crc32 bin of its own: only the payload's
       CRC can tell. */
    plant_segment(key, 1, junk, m.seg_b, m.wid);
    expect(h, key, "ooo", LMCA_CRC_MISMATCH, &in);
    lmca_inspect_clear(&in);
    free(junk);
    lmca_close(h);
}

TEST(absent_or_corrupt_meta_is_a_miss_and_bad_arguments_are_refused)
{
    lmca_t *h = open_small_segments(false);
    lmca_inspect_t in;
    lmca_stats_t st;
    lmca_err_t err = {0};
    const char *key = th_key("inspect-none");
    char mkey[LMCA_KEY_MAX + 16];

    ASSERT_RC(lmca_inspect(h, key, &in, &err), LMCA_MISS, &err);
    ASSERT(in.segs == NULL && in.meta.md == NULL);
    snprintf(mkey, sizeof mkey, "%s|m", key);
    th_bin bad[] = {TH_INT("ver", 2), TH_STR("state", "ready"), TH_INT("nseg", 0)};
    ASSERT_EQ(th_plant("small", mkey, bad, 3), 0);
    ASSERT_RC(lmca_inspect(h, key, &in, &err), LMCA_MISS, &err);
    lmca_stats(h, &st);
    ASSERT_EQ(st.corrupt, 1); /* counted as a read counts it */
    ASSERT_CONTAINS(th_log(), "bin nseg=0 is outside");
    ASSERT_RC(lmca_inspect(h, "", &in, &err), LMCA_EINVAL, &err);
    ASSERT_RC(lmca_inspect(h, key, NULL, &err), LMCA_EINVAL, &err);
    lmca_close(h);
}

TEST_LIST = {
    T(whole_chunk_with_crc_reads_ok_everywhere),
    T(whole_chunk_read_segment_by_segment_reads_ok_too),
    T(chunk_without_crc_says_absent_and_pinned_never_expires),
    T(one_record_chunk_has_no_segments_and_checks_its_crc),
    T(missing_segment_is_named_and_leaves_the_crc_unchecked),
    T(segments_of_another_write_or_damaged_are_told_apart),
    T(segments_whole_but_of_other_bytes_fail_the_crc),
    T(absent_or_corrupt_meta_is_a_miss_and_bad_arguments_are_refused),
};
TEST_MAIN()
