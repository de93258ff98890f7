/*
 * test_hostile.c - records the engine did not write, read through the C API
 * and the asynchronous layer. Another client, an older version, a crash or a
 * bit flip can leave any bins under our keys; each case below plants one such
 * record with libaerospike directly and checks that every read path sees a miss
 * (counted, logged), never a crash, an out-of-bounds write or wrong bytes.
 * tests/ext/test_hostile.py plants the same kinds with the official Python
 * client and reads them through the extension.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "lmca_async.h"

#define INLINE_LEN 64
#define CANARY 0xA5
#define SLACK 4096 /* canary bytes after every buffer */

/* What a case is, by what sees it:
   BAD_CORE     a bin that makes a chunk present (ver state nseg seg_b tot_b
                wid) is bad: every read misses;
   BAD_DETAIL   another small bin is bad (md, tags, pin, ...): stat and get
                miss, lookups (exists, prefix) still say present;
   BAD_PAYLOAD  what only a get reads is bad (the payload, a segment, an unknown
                bin): the get misses;
   NOT_READY    a plain miss, not counted;
   TORN         a segment missing or of another write: the get misses. */
typedef enum { BAD_CORE, BAD_DETAIL, BAD_PAYLOAD, NOT_READY, TORN } outcome;

/* A change to a valid record: set (or add) a bin, or drop one by name. */
typedef struct {
    char op; /* 's' set, 'd' drop */
    th_bin bin;
} change;

typedef struct {
    const char *name;
    char where; /* the changed record: 'm' a one-record chunk's meta record,
                   'M' a 3-segment chunk's meta record, 's' its segment 1 */
    change changes[2];
    outcome expect;
} hostile_case;

static const uint8_t junk[9000] = {1, 2, 3};

#define SET(b) {'s', b}
#define DROP(n) {'d', {.name = n}}

static const hostile_case inline_cases[] = {
    {"nseg 0", 'm', {SET(TH_INT("nseg", 0))}, BAD_CORE},
    {"nseg -1", 'm', {SET(TH_INT("nseg", -1))}, BAD_CORE},
    {"nseg 70000", 'm', {SET(TH_INT("nseg", 70000))}, BAD_CORE},
    {"seg_b negative", 'm', {SET(TH_INT("seg_b", -5))}, BAD_CORE},
    {"tot_b -1", 'm', {SET(TH_INT("tot_b", -1))}, BAD_CORE},
    {"tot_b INT64_MAX", 'm', {SET(TH_INT("tot_b", INT64_MAX)), SET(TH_INT("seg_b", INT64_MAX))},
     BAD_CORE},
    {"inline payload longer than tot_b", 'm',
     {SET(TH_INT("tot_b", 32)), SET(TH_INT("seg_b", 32))}, BAD_PAYLOAD},
    {"inline payload shorter than tot_b", 'm',
     {SET(TH_INT("tot_b", 128)), SET(TH_INT("seg_b", 128))}, BAD_PAYLOAD},
    {"seg_b differs from tot_b", 'm', {SET(TH_INT("seg_b", 10))}, BAD_CORE},
    {"older schema version", 'm', {SET(TH_INT("ver", 1))}, BAD_CORE},
    {"unknown schema version", 'm', {SET(TH_INT("ver", 99))}, BAD_CORE},
    {"ver a string", 'm', {SET(TH_STR("ver", "2"))}, BAD_CORE},
    {"state missing", 'm', {DROP("state")}, BAD_CORE},
    {"state an integer", 'm', {SET(TH_INT("state", 1))}, BAD_CORE},
    {"state unknown", 'm', {SET(TH_STR("state", "weird"))}, BAD_CORE},
    {"state partial", 'm', {SET(TH_STR("state", "partial"))}, NOT_READY},
    {"payload a string", 'm', {SET(TH_STR("b", "not bytes"))}, BAD_PAYLOAD},
    {"payload an integer", 'm', {SET(TH_INT("b", 7))}, BAD_PAYLOAD},
    {"payload missing", 'm', {DROP("b")}, BAD_PAYLOAD},
    {"md over 8 KiB", 'm', {SET(TH_BLOB("md", junk, 9000))}, BAD_DETAIL},
    {"md an integer", 'm', {SET(TH_INT("md", 5))}, BAD_DETAIL},
    {"serde an integer", 'm', {SET(TH_INT("serde", 5))}, BAD_DETAIL},
    {"ttl_class too long", 'm',
     {SET(TH_STR("ttl_class", "0123456789012345678901234567890123456789012345678901234567890123"
                              "456789"))},
     BAD_DETAIL},
    {"ttl_class a list", 'm', {SET(TH_LIST("ttl_class"))}, BAD_DETAIL},
    {"nseg a double", 'm', {SET(TH_DOUBLE("nseg", 1))}, BAD_CORE},
    {"unknown bin", 'm', {SET(TH_INT("zzz", 1))}, BAD_PAYLOAD}, /* lookups read named bins */
    {"wid 0", 'm', {SET(TH_INT("wid", 0))}, BAD_CORE},
    {"wid missing", 'm', {DROP("wid")}, BAD_CORE},
    {"wid a string", 'm', {SET(TH_STR("wid", "abc"))}, BAD_CORE},
    {"crc32 negative", 'm', {SET(TH_INT("crc32", -1))}, BAD_DETAIL},
    {"crc32 above 32 bits", 'm', {SET(TH_INT("crc32", 1ll << 33))}, BAD_DETAIL},
    {"pin 7", 'm', {SET(TH_INT("pin", 7))}, BAD_DETAIL},
    {"created_at a string", 'm', {SET(TH_STR("created_at", "yesterday"))}, BAD_DETAIL},
};

static const hostile_case segment_cases[] = {
    {"segment larger than its slot", 's', {SET(TH_BLOB("b", junk, 8000))}, BAD_PAYLOAD},
    {"segment shorter", 's', {SET(TH_BLOB("b", junk, 100))}, BAD_PAYLOAD},
    {"segment payload a string", 's', {SET(TH_STR("b", "x"))}, BAD_PAYLOAD},
    {"segment with an extra bin", 's', {SET(TH_INT("extra", 1))}, BAD_PAYLOAD},
    {"segment without wid", 's', {DROP("wid")}, BAD_PAYLOAD},
    {"segment of another write", 's', {SET(TH_INT("wid", 12345))}, TORN},
    {"segment missing", 's', {DROP("*")}, TORN},
    {"tot_b beyond the segments", 'M', {SET(TH_INT("tot_b", 3 * 4096 + 1))}, BAD_CORE},
    {"payload bin next to segments", 'M', {SET(TH_BLOB("b", junk, 10))}, BAD_PAYLOAD},
    {"segment above 8 MiB", 'M', {SET(TH_INT("seg_b", 8 * 1024 * 1024 + 1))}, BAD_CORE},
    {"65535 one-byte segments", 'M', {SET(TH_INT("nseg", 65535)), SET(TH_INT("seg_b", 1))},
     BAD_CORE}, /* tot_b no longer fits: judged before any segment is read */
};

#define SEG 4096                 /* segment size of the planted 3-segment chunk */
#define SEG_TOTAL (2 * SEG + 100)
#define WID 0x1234567890abcdefll

/* Applies the changes to `bins` (n of them, room for 16). */
static size_t
apply(th_bin *bins, size_t n, const change *changes)
{
    for (int c = 0; c < 2 && changes[c].op; c++) {
        const change *ch = &changes[c];
        size_t k = 0;
        while (k < n && strcmp(bins[k].name, ch->bin.name) != 0)
            k++;
        if (ch->op == 'd') {
            if (k < n)
                bins[k] = bins[--n];
        } else {
            bins[k] = ch->bin;
            n += k == n;
        }
    }
    return n;
}

static size_t
meta_bins(th_bin *bins, bool segmented, const uint8_t *payload)
{
    size_t n = 0;
    uint64_t tot = segmented ? SEG_TOTAL : INLINE_LEN;
    bins[n++] = TH_INT("ver", LMCA_SCHEMA_VERSION);
    bins[n++] = TH_STR("state", "ready");
    bins[n++] = TH_INT("nseg", segmented ? 3 : 1);
    bins[n++] = TH_INT("seg_b", segmented ? SEG : INLINE_LEN);
    bins[n++] = TH_INT("tot_b", tot);
    bins[n++] = TH_INT("wid", WID);
    bins[n++] = TH_INT("created_at", 1700000000);
    bins[n++] = TH_INT("pin", 0);
    if (!segmented)
        bins[n++] = TH_BLOB("b", payload, INLINE_LEN);
    return n;
}

/* Plants the case under `key`: the meta record and, for segment cases, three
   segments; the change goes where the case says. */
static void
plant(const char *key, const hostile_case *hc, const uint8_t *payload)
{
    char reckey[LMCA_KEY_MAX + 16];
    th_bin bins[16];
    bool segmented = hc->where != 'm';
    size_t n = meta_bins(bins, segmented, payload);

    if (hc->where != 's')
        n = apply(bins, n, hc->changes);
    snprintf(reckey, sizeof reckey, "%s|m", key);
    ASSERT_EQ(th_plant("lmcache", reckey, bins, n), 0);
    for (uint32_t i = 0; segmented && i < 3; i++) {
        th_bin seg[4] = {TH_BLOB("b", payload + i * SEG, i < 2 ? SEG : 100), TH_INT("wid", WID)};
        size_t m = 2;
        if (hc->where == 's' && i == 1) {
            if (hc->changes[0].op == 'd' && strcmp(hc->changes[0].bin.name, "*") == 0)
                continue; /* the segment is gone */
            m = apply(seg, m, hc->changes);
        }
        snprintf(reckey, sizeof reckey, "%s|s|%u", key, i);
        ASSERT_EQ(th_plant("lmcache", reckey, seg, m), 0);
    }
}

static void
check_canary(const uint8_t *buf, size_t from, size_t to, const char *name)
{
    for (size_t i = from; i < to; i++)
        if (buf[i] != CANARY)
            th_fail(__FILE__, __LINE__, "%s: byte %zu past the buffer was written", name, i);
}

/* Every blocking read path sees a miss; nothing is written past the buffer.
   The buffer holds any size a planted meta record can claim and still be read. */
#define BLOCKING_CAP (64 * 1024)

static void
read_blocking(lmca_t *h, const char *key, const hostile_case *hc)
{
    uint8_t *buf = malloc(BLOCKING_CAP + SLACK);
    size_t got = 7, count = 7;
    lmca_meta_t meta;
    lmca_err_t err = {0};

    memset(buf, CANARY, BLOCKING_CAP + SLACK);
    if (lmca_get(h, key, buf, BLOCKING_CAP, &got, NULL, &err) != LMCA_MISS || got != 0)
        th_fail(__FILE__, __LINE__, "%s: get is not a miss (%s)", hc->name, err.msg);
    check_canary(buf, BLOCKING_CAP, BLOCKING_CAP + SLACK, hc->name);
    bool stat_ok = hc->expect == BAD_PAYLOAD || hc->expect == TORN;
    bool present = stat_ok || hc->expect == BAD_DETAIL;
    int stat = lmca_stat(h, key, &meta, &err);
    lmca_meta_clear(&meta);
    int exists = lmca_exists(h, key, &err);
    ASSERT_RC(lmca_prefix(h, &key, 1, &count, NULL, &err), LMCA_OK, &err);
    /* One rule for "present": exists and prefix give the same answer. */
    if (stat != (stat_ok ? LMCA_OK : LMCA_MISS) || exists != (present ? LMCA_OK : LMCA_MISS) ||
        count != (size_t)present)
        th_fail(__FILE__, __LINE__, "%s: stat %s, exists %s, prefix %zu", hc->name,
                lmca_status_name(stat), lmca_status_name(exists), count);
    free(buf);
}

static lmca_completion_t *
wait_one(lmca_pool_t *p, uint64_t id)
{
    for (int spins = 0; spins < 600; spins++) {
        struct pollfd pfd = {.fd = lmca_pool_fd(p), .events = POLLIN};
        poll(&pfd, 1, 100);
        lmca_completion_t *c = lmca_pool_drain(p);
        if (c != NULL) {
            ASSERT(c->id == id && c->next == NULL);
            return c;
        }
    }
    th_fail(__FILE__, __LINE__, "completion %llu never came", (unsigned long long)id);
}

/* The asynchronous layer: a get with the planted chunk's size, and a lookup. */
static void
read_async(lmca_pool_t *p, const char *key, const hostile_case *hc, size_t want)
{
    uint8_t *buf = malloc(want + SLACK);
    void *bufs[1] = {buf};
    size_t lens[1] = {want};
    lmca_batch_t get = {.op = LMCA_OP_GET, .n = 1, .keys = &key, .bufs = bufs, .lens = lens};
    lmca_batch_t look = {.op = LMCA_OP_PREFIX, .n = 1, .keys = &key};
    lmca_err_t err = {0};
    uint64_t id;

    memset(buf, CANARY, want + SLACK);
    ASSERT_RC(lmca_pool_submit(p, &get, &id, &err), LMCA_OK, &err);
    lmca_completion_t *c = wait_one(p, id);
    if (c->status != LMCA_OK || c->results[0] != 0)
        th_fail(__FILE__, __LINE__, "%s: async get: status %s, hit %d", hc->name,
                lmca_status_name(c->status), c->results[0]);
    lmca_completion_free(c);
    check_canary(buf, want, want + SLACK, hc->name);
    ASSERT_RC(lmca_pool_submit(p, &look, &id, &err), LMCA_OK, &err);
    c = wait_one(p, id);
    ASSERT_EQ(c->status, LMCA_OK);
    ASSERT_EQ(c->prefix, hc->expect == BAD_CORE || hc->expect == NOT_READY ? 0 : 1);
    lmca_completion_free(c);
    free(buf);
}

static void
run_cases(const hostile_case *cases, size_t ncases, size_t want)
{
    lmca_t *h = th_open("lmcache");
    lmca_pool_t *p = NULL;
    uint8_t *payload = malloc(SEG_TOTAL);
    lmca_stats_t before, after;
    lmca_err_t err = {0};

    th_fill(payload, SEG_TOTAL, 77);
    ASSERT_RC(lmca_pool_open(h, 4, &p, &err), LMCA_OK, &err);
    for (size_t i = 0; i < ncases; i++) {
        const hostile_case *hc = &cases[i];
        const char *key = th_key("hostile");
        plant(key, hc, payload);
        lmca_stats(h, &before);
        read_blocking(h, key, hc);
        read_async(p, key, hc, want);
        lmca_stats(h, &after);
        /* Corrupt records are counted, torn chunks too; a chunk not ready is a
           plain miss. */
        bool bad = hc->expect != NOT_READY && hc->expect != TORN;
        if (bad != (after.corrupt > before.corrupt) ||
            (hc->expect == TORN) != (after.torn > before.torn))
            th_fail(__FILE__, __LINE__, "%s: corrupt %llu -> %llu, torn %llu -> %llu", hc->name,
                    (unsigned long long)before.corrupt, (unsigned long long)after.corrupt,
                    (unsigned long long)before.torn, (unsigned long long)after.torn);
    }
    lmca_pool_destroy(p);
    free(payload);
    lmca_close(h);
}

TEST(hostile_single_record_chunks_read_as_misses)
{
    run_cases(inline_cases, sizeof inline_cases / sizeof inline_cases[0], INLINE_LEN);
    ASSERT_CONTAINS(th_log(), "is corrupt (bin nseg=0 is outside 1..65535); read as a miss");
    ASSERT_CONTAINS(th_log(), "schema version 1, this engine reads 2");
}

TEST(hostile_segmented_chunks_read_as_misses)
{
    run_cases(segment_cases, sizeof segment_cases / sizeof segment_cases[0], SEG_TOTAL);
    ASSERT_CONTAINS(th_log(), "holds 8000 bytes, the meta record says 4096");
}

/* The planted chunks are well-formed before the changes: a control, so that the
   cases above fail for their change and not for the planting. */
TEST(planted_records_without_changes_are_hits)
{
    lmca_t *h = th_open("lmcache");
    uint8_t *payload = malloc(SEG_TOTAL), *out = malloc(SEG_TOTAL);
    static const hostile_case valid[2] = {{"inline", 'm', {{0}}, NOT_READY},
                                          {"segmented", 's', {{0}}, NOT_READY}};
    lmca_err_t err = {0};
    size_t got;

    th_fill(payload, SEG_TOTAL, 77);
    for (int i = 0; i < 2; i++) {
        const char *key = th_key("valid");
        size_t want = i ? SEG_TOTAL : INLINE_LEN;
        plant(key, &valid[i], payload);
        ASSERT_RC(lmca_get(h, key, out, want, &got, NULL, &err), LMCA_OK, &err);
        ASSERT_EQ(got, want);
        ASSERT(memcmp(out, payload, want) == 0);
    }
    free(payload);
    free(out);
    lmca_close(h);
}

TEST_LIST = {
    T(planted_records_without_changes_are_hits),
    T(hostile_single_record_chunks_read_as_misses),
    T(hostile_segmented_chunks_read_as_misses),
};
TEST_MAIN()
