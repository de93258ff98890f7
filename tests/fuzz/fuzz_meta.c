/*
 * fuzz_meta.c - libFuzzer harness for the decoders of meta and segment records
 * (schema.c): lmca__meta_begin / lmca__meta_bin / lmca__meta_verdict and
 * lmca__segment_bin / lmca__segment_result.
 *
 * The decoders see bins as wire.c hands them over from a server the engine does
 * not trust. The harness turns the input into such a read, plays it the way
 * wire.c does (the payload bin "b" of a read that asks for it goes to the
 * lmca__read, every other bin to the callback), and aborts when a verdict breaks
 * a promise of schema.h or lmca.h: a chunk accepted whose sizes do not add up, a
 * segment accepted that is not whole, md leaked or left behind.
 *
 * Input format (tests/fuzz/make_corpus.py writes seeds in it). Missing bytes
 * read as 0.
 *   byte 0  the meta read's payload bin: bit0 asked for, bit1 found, bit2 a
 *           blob, bits3-4 its length (0 tot_b as decoded, 1 tot_b + 1,
 *           2 tot_b - 1, 3 VALUES[byte 1]); bit5 makes the md copy's malloc fail
 *   byte 1  see byte 0
 *   byte 2  the segment read: bits0-1 its result (0 and 1 LMCA_OK, 2 LMCA_MISS,
 *           3 LMCA_ETIMEOUT), bit2 found, bit3 a blob, bits4-5 the length as in
 *           byte 0 but against the segment's expected length (3: VALUES[byte 4])
 *   byte 3  which segment: bit7 the last one, else (byte & 0x7f) % nseg
 *   byte 4  see byte 2
 *   then bins, until the input ends or MAX_BINS:
 *     name byte  < 0xF0: NAMES[byte % NNAMES]; else a literal name of
 *                (byte & 0x0F) bytes, which follow
 *     type byte  (byte & 3) + 1 is the lmca__type (INT, STR, BLOB, OTHER);
 *                sel = byte >> 2
 *       INT      sel < NVALUES: VALUES[sel]; else 8 bytes little-endian follow
 *       STR/BLOB a length byte L follows: L < 0xF0: L bytes follow (fewer at the
 *                end of the input); else BIG_LENS[L & 0x0F] zero bytes
 *       OTHER    nothing (p NULL, len 0: what wire.c gives doubles, lists, maps)
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

/* Not abort() alone: the line says which promise broke. */
#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz_meta: invariant broken at %s:%d: %s\n", __FILE__,    \
                    __LINE__, #cond);                                                   \
            abort();                                                                    \
        }                                                                               \
    } while (0)

/* Built with -DFUZZ_TRACE, the harness tells each verdict (to check what a seed
   reaches: build/fuzz/fuzz_meta_trace FILE, see run.sh). */
#ifdef FUZZ_TRACE
#define TRACE(...) fprintf(stderr, __VA_ARGS__)
#else
#define TRACE(...) ((void)0)
#endif

#define MAX_BINS 40
#define NAME_MAX_LEN 15 /* Aerospike bin names are at most 15 bytes */

/* A write id the seeds use for the meta record and its segments alike. */
#define WID_MAGIC 0x5A17E3C0FFEE1D01ll

/* The schema's names (schema.c order, then the payload), and some that are not.
   make_corpus.py checks its copy of the first 13 against this list. */
static const char *const NAMES[] = {
    "ver", "state", "nseg", "seg_b", "tot_b", "wid", "created_at", "pin", "crc32", "serde",
    "ttl_class", "md", "b",
    /* unknown: empty, case, near misses, longer than the 15 bytes a log quotes */
    "", "VER", "wid2", "bb", "m", "x", "created_at_and_more",
};
#define NNAMES (sizeof NAMES / sizeof NAMES[0])

/* Integers near the edges of every range the schema checks, so that mutations
   reach valid records and both sides of each bound. */
static const int64_t VALUES[] = {
    0, 1, 2, 3, -1, -2, INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1,
    255, 256, 65534, 65535, 65536, (int64_t)UINT32_MAX, (int64_t)UINT32_MAX + 1,
    128 * 1024, 1024 * 1024, 4 * 1024 * 1024, 4128768 /* 8 MiB / 2 - 64 KiB */,
    8323072 /* 8 MiB - 64 KiB */, LMCA_BLOCK_7_1 - 1, LMCA_BLOCK_7_1, LMCA_BLOCK_7_1 + 1,
    2 * (int64_t)LMCA_BLOCK_7_1, (int64_t)LMCA_MAX_SEGMENTS * LMCA_BLOCK_7_1 - 1,
    (int64_t)LMCA_MAX_SEGMENTS * LMCA_BLOCK_7_1, (int64_t)LMCA_MAX_SEGMENTS * LMCA_BLOCK_7_1 + 1,
    (int64_t)(LMCA_MAX_SEGMENTS - 1) * LMCA_BLOCK_7_1, 1000, 2500, 4096, 8192, 8193, 10000,
    12289, 1700000000 /* a created_at */, WID_MAGIC, WID_MAGIC + 1, 63, 64,
};
#define NVALUES (sizeof VALUES / sizeof VALUES[0])

/* Lengths of strings and blobs beyond what one length byte says, at the bounds
   of serde/ttl_class (63) and md (8192). */
static const size_t BIG_LENS[] = {0, 1, 15, 16, 63, 64, 65, 255, 256, 4096, 8191, 8192, 8193,
                                  16384, 65535, 65536};
#define FILLER_LEN 65536
static const uint8_t filler[FILLER_LEN]; /* backs BIG_LENS: the bytes are all there */

/* ---------------------------------------------------------------------------
 * The input, decoded.
 */

typedef struct cursor {
    const uint8_t *p;
    size_t n;
} cursor;

static uint8_t
take_byte(cursor *c)
{
    if (c->n == 0)
        return 0;
    c->n--;
    return *c->p++;
}

static int64_t
take_i64(cursor *c)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)take_byte(c) << (8 * i);
    return (int64_t)v;
}

/* What a read says of its payload bin, before the length is known. */
typedef struct payload_spec {
    int result;      /* segments only: the row's result */
    bool asked, found, blob;
    int len_mode;    /* 0 exact, 1 exact + 1, 2 exact - 1, 3 len_value */
    size_t len_value;
} payload_spec;

typedef struct fuzz_case {
    payload_spec meta_payload, seg_payload;
    uint8_t seg_index;
    bool fail_md_alloc;
    unsigned nbins;
    lmca__bin bins[MAX_BINS];
    char names[MAX_BINS][NAME_MAX_LEN + 1];
} fuzz_case;

static void
take_header(cursor *c, fuzz_case *fc)
{
    static const int results[] = {LMCA_OK, LMCA_OK, LMCA_MISS, LMCA_ETIMEOUT};
    uint8_t m = take_byte(c), mlen = take_byte(c), s = take_byte(c);

    fc->meta_payload = (payload_spec){.result = LMCA_OK, .asked = m & 1, .found = m & 2,
                                      .blob = m & 4, .len_mode = (m >> 3) & 3,
                                      .len_value = (size_t)VALUES[mlen % NVALUES]};
    fc->fail_md_alloc = m & 0x20;
    fc->seg_index = take_byte(c);
    fc->seg_payload = (payload_spec){.result = results[s & 3], .asked = true, .found = s & 4,
                                     .blob = s & 8, .len_mode = (s >> 4) & 3,
                                     .len_value = (size_t)VALUES[take_byte(c) % NVALUES]};
}

static const char *
take_name(cursor *c, char *buf)
{
    uint8_t nb = take_byte(c);
    size_t len;

    if (nb < 0xF0)
        return NAMES[nb % NNAMES];
    len = nb & 0x0F;
    len = len < c->n ? len : c->n;
    memcpy(buf, c->p, len); /* a NUL inside shortens the name, as C strings do */
    buf[len] = '\0';
    c->p += len, c->n -= len;
    return buf;
}

/* Bytes of a string or blob: inline from the input, or zeros from `filler`. */
static void
take_bytes(cursor *c, lmca__bin *b)
{
    uint8_t lb = take_byte(c);

    if (lb >= 0xF0) {
        b->p = filler, b->len = BIG_LENS[lb & 0x0F];
    } else {
        b->len = lb < c->n ? lb : c->n;
        b->p = c->p;
        c->p += b->len, c->n -= b->len;
    }
    /* An empty blob may come without storage; an empty string is still "". */
    if (b->len == 0)
        b->p = b->type == LMCA__STR ? "" : NULL;
}

static void
take_bin(cursor *c, lmca__bin *b, char *name_buf)
{
    uint8_t tb;

    b->name = take_name(c, name_buf);
    tb = take_byte(c);
    b->type = (lmca__type)((tb & 3) + 1);
    if (b->type == LMCA__INT)
        b->i = (size_t)(tb >> 2) < NVALUES ? VALUES[tb >> 2] : take_i64(c);
    else if (b->type != LMCA__OTHER)
        take_bytes(c, b);
}

static void
parse_case(const uint8_t *data, size_t size, fuzz_case *fc)
{
    cursor c = {data, size};

    memset(fc, 0, sizeof *fc);
    take_header(&c, fc);
    while (c.n > 0 && fc->nbins < MAX_BINS) {
        take_bin(&c, &fc->bins[fc->nbins], fc->names[fc->nbins]);
        fc->nbins++;
    }
}

/* ---------------------------------------------------------------------------
 * The engine's allocator, overridden (alloc.c's is weak) so that an input can
 * make the md copy fail and show LMCA_ENOMEM frees everything.
 */

static bool fail_malloc;

void *
lmca__malloc(size_t size)
{
    return fail_malloc ? NULL : malloc(size);
}

/* ---------------------------------------------------------------------------
 * Playing a read the way wire.c does.
 */

static size_t
resolve_len(const payload_spec *ps, uint64_t exact)
{
    switch (ps->len_mode) {
    case 0: return (size_t)exact;
    case 1: return (size_t)exact + 1;
    case 2: return (size_t)exact - 1; /* 0 - 1 wraps to a hostile SIZE_MAX */
    default: return ps->len_value;
    }
}

static bool
is_payload(const payload_spec *ps, const lmca__bin *b)
{
    return ps->asked && strcmp(b->name, "b") == 0;
}

/* Feeds every bin but the payload to `cb`; the payload bin, as in wire.c's
   take_record, sets found/blob/len (the last one wins). The length the header
   asks for is resolved after the other bins, since it may depend on them. */
static void
play_read(const fuzz_case *fc, const payload_spec *ps, lmca__read *rd,
          uint64_t (*exact_len)(void *udata))
{
    bool routed = false;

    rd->found = ps->found, rd->blob = ps->blob;
    for (unsigned i = 0; i < fc->nbins; i++) {
        const lmca__bin *b = &fc->bins[i];
        if (is_payload(ps, b)) {
            rd->found = true, rd->blob = b->type == LMCA__BLOB, rd->len = b->len;
            routed = true;
        } else {
            rd->cb(rd->udata, b);
        }
    }
    if (!routed)
        rd->len = resolve_len(ps, exact_len(rd->udata));
}

/* ---------------------------------------------------------------------------
 * Meta records.
 */

/* The schema as lmca.h and DESIGN.md state it, written out again so that the
   decoder is checked against the spec, not against itself. */
static const struct {
    const char *name;
    lmca__type type;
    bool required; /* by a full read */
    bool core;     /* required by a presence read too */
} SCHEMA[] = {
    {"ver", LMCA__INT, true, true},          {"state", LMCA__STR, true, true},
    {"nseg", LMCA__INT, true, true},         {"seg_b", LMCA__INT, true, true},
    {"tot_b", LMCA__INT, true, true},        {"wid", LMCA__INT, true, true},
    {"created_at", LMCA__INT, true, false},  {"pin", LMCA__INT, true, false},
    {"crc32", LMCA__INT, false, false},      {"serde", LMCA__STR, false, false},
    {"ttl_class", LMCA__STR, false, false},  {"md", LMCA__BLOB, false, false},
};
#define NSCHEMA (sizeof SCHEMA / sizeof SCHEMA[0])

static int
schema_index(const char *name)
{
    for (size_t i = 0; i < NSCHEMA; i++)
        if (strcmp(SCHEMA[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* The first bin the decoder received under `name`, or NULL. */
static const lmca__bin *
fed_bin(const fuzz_case *fc, const payload_spec *ps, const char *name)
{
    for (unsigned i = 0; i < fc->nbins; i++)
        if (!is_payload(ps, &fc->bins[i]) && strcmp(fc->bins[i].name, name) == 0)
            return &fc->bins[i];
    return NULL;
}

/* An accepted record had every schema bin once at most, of its type, the
   required ones (for a presence read: the core ones) all there, no unknown bin,
   and state "ready". */
static void
check_accepted_bins(const fuzz_case *fc, const payload_spec *ps, bool presence)
{
    unsigned count[NSCHEMA] = {0};
    const lmca__bin *state = fed_bin(fc, ps, "state");

    for (unsigned i = 0; i < fc->nbins; i++) {
        const lmca__bin *b = &fc->bins[i];
        int k = is_payload(ps, b) ? -2 : schema_index(b->name);
        if (k == -2)
            continue;
        CHECK(k >= 0);
        CHECK(++count[k] == 1);
        CHECK(b->type == SCHEMA[k].type);
    }
    for (size_t k = 0; k < NSCHEMA; k++)
        CHECK(!(presence ? SCHEMA[k].core : SCHEMA[k].required) || count[k] == 1);
    CHECK(state != NULL && state->len == 5 && memcmp(state->p, "ready", 5) == 0);
}

/* Sizes of an accepted record agree with each other and with the payload. */
static void
check_accepted_sizes(const lmca_meta_t *m, const payload_spec *ps, const lmca__read *pay)
{
    CHECK(m->ver == LMCA_SCHEMA_VERSION);
    CHECK(m->nseg >= 1 && m->nseg <= LMCA_MAX_SEGMENTS);
    CHECK(m->seg_b <= LMCA_BLOCK_7_1);
    CHECK(m->wid != 0);
    if (m->nseg == 1) {
        CHECK(m->seg_b == m->tot_b);
        CHECK(!ps->asked || (pay->found && pay->blob && pay->len == m->tot_b));
        return;
    }
    /* nseg <= 65535 and seg_b <= 8 MiB: these products cannot overflow. */
    CHECK((uint64_t)(m->nseg - 1) * m->seg_b < m->tot_b);
    CHECK(m->tot_b <= (uint64_t)m->nseg * m->seg_b);
    CHECK(!ps->asked || !pay->found); /* a payload inline and in segments too */
    uint64_t sum = 0;
    for (uint32_t i = 0; i < m->nseg; i++)
        sum += lmca_segment_len(m, i);
    CHECK(sum == m->tot_b);
    CHECK(lmca_segment_len(m, m->nseg) == 0);
}

static void
check_md(const fuzz_case *fc, const lmca_meta_t *m, bool want_md, int rc)
{
    const lmca__bin *md = fed_bin(fc, &fc->meta_payload, "md");

    CHECK(rc == LMCA_OK || m->md == NULL); /* freed on a miss or ENOMEM */
    CHECK(want_md || m->md == NULL);
    CHECK(m->md == NULL || (m->md_len >= 1 && m->md_len <= LMCA_MD_MAX));
    if (rc == LMCA_OK && want_md && md != NULL) {
        CHECK(m->md != NULL && m->md_len == md->len);
        CHECK(memcmp(m->md, md->p, md->len) == 0);
    }
}

static void
check_meta(const fuzz_case *fc, const lmca__meta_reader *r, const lmca__read *pay, int rc)
{
    const lmca_meta_t *m = r->m;

    bool want_md = r->flags & LMCA__WANT_MD;

    CHECK(rc == LMCA_OK || rc == LMCA_MISS || rc == LMCA_ENOMEM);
    CHECK(rc != LMCA_ENOMEM || (want_md && fc->fail_md_alloc));
    CHECK(memchr(m->serde, '\0', sizeof m->serde) != NULL);
    CHECK(memchr(m->ttl_class, '\0', sizeof m->ttl_class) != NULL);
    CHECK(memchr(r->why, '\0', sizeof r->why) != NULL);
    check_md(fc, m, want_md, rc);
    if (rc != LMCA_OK)
        return;
    CHECK(r->why[0] == '\0');
    check_accepted_bins(fc, &fc->meta_payload, r->flags & LMCA__PRESENCE);
    check_accepted_sizes(m, &fc->meta_payload, pay);
}

/* The writer and the readers agree on the layout: what lmca__meta_bins writes
   for an accepted record reads back as the same record. */
static void
check_meta_round_trip(const lmca_meta_t *m)
{
    lmca__bin bins[LMCA__META_BINS];
    lmca_put_opts_t opts = {.md = m->md, .md_len = m->md ? m->md_len : 0,
                            .serde = m->serde[0] ? m->serde : NULL,
                            .ttl_class = m->ttl_class[0] ? m->ttl_class : NULL, .pin = m->pin};
    unsigned n = lmca__meta_bins(bins, m, NULL, &opts); /* "b" is routed, never read */
    lmca__meta_reader r;
    lmca__read pay = {0};
    lmca_meta_t back;

    CHECK(n <= LMCA__META_BINS);
    lmca__meta_begin(&r, &back, LMCA__WANT_MD);
    for (unsigned i = 0; i < n; i++) {
        if (strcmp(bins[i].name, "b") == 0)
            pay.found = true, pay.blob = bins[i].type == LMCA__BLOB, pay.len = bins[i].len;
        else
            lmca__meta_bin(&r, &bins[i]);
    }
    CHECK(lmca__meta_verdict(&r, &pay) == LMCA_OK);
    CHECK(back.nseg == m->nseg && back.seg_b == m->seg_b && back.tot_b == m->tot_b &&
          back.wid == m->wid && back.pin == m->pin && back.has_crc32 == m->has_crc32 &&
          back.crc32 == m->crc32);
    CHECK(strcmp(back.serde, m->serde) == 0 && strcmp(back.ttl_class, m->ttl_class) == 0);
    CHECK(back.md_len == opts.md_len);
    CHECK(opts.md_len == 0 || memcmp(back.md, m->md, opts.md_len) == 0);
    lmca_meta_clear(&back);
}

static uint64_t
meta_tot_b(void *udata)
{
    return ((lmca__meta_reader *)udata)->m->tot_b;
}

/* One decode of the input as a meta record; leaves the verdict's meta in `m`
   (md freed by the caller). */
static int
decode_meta(const fuzz_case *fc, unsigned flags, lmca_meta_t *m)
{
    lmca__meta_reader r;
    lmca__read pay = {.cb = lmca__meta_bin, .udata = &r};
    const payload_spec *ps = &fc->meta_payload;
    int rc;

    lmca__meta_begin(&r, m, flags);
    fail_malloc = fc->fail_md_alloc;
    play_read(fc, ps, &pay, meta_tot_b);
    fail_malloc = false;
    rc = lmca__meta_verdict(&r, ps->asked ? &pay : NULL);
    TRACE("meta flags=%u: %s %s\n", flags, lmca_status_name(rc), r.why);
    check_meta(fc, &r, &pay, rc);
    if (rc == LMCA_OK)
        check_meta_round_trip(m);
    return rc;
}

/* Copying md or not changes nothing but the copy: the same record gets the same
   verdict, unless the copy itself fails. */
static void
check_same_verdict(const fuzz_case *fc, int rc_plain, const lmca_meta_t *plain, int rc_md,
                   const lmca_meta_t *with_md)
{
    if (rc_md == LMCA_ENOMEM) {
        CHECK(fc->fail_md_alloc);
        CHECK(rc_plain != LMCA_OK || plain->md_len > 0);
        return;
    }
    CHECK(rc_md == rc_plain);
    CHECK(!(rc_plain == LMCA_OK && fc->fail_md_alloc && plain->md_len > 0));
    if (rc_plain == LMCA_OK)
        CHECK(plain->nseg == with_md->nseg && plain->seg_b == with_md->seg_b &&
              plain->tot_b == with_md->tot_b && plain->wid == with_md->wid &&
              plain->md_len == with_md->md_len);
}

/* ---------------------------------------------------------------------------
 * Segment records.
 */

/* Segments land at the end of one 8 MiB allocation, so that ASan sees a read
   past the segment's capacity (the CRC) as a heap overflow. Its bytes stay
   zero: nothing is copied in, which keeps every run deterministic. */
static uint8_t *
segment_dst(uint64_t cap)
{
    static uint8_t *block;
    if (block == NULL && (block = calloc(1, LMCA_BLOCK_7_1)) == NULL)
        abort();
    CHECK(cap <= LMCA_BLOCK_7_1);
    return block + LMCA_BLOCK_7_1 - cap;
}

typedef struct seg_ctx {
    const lmca_meta_t *meta;
    uint32_t index;
    lmca__seg_reader r;
} seg_ctx;

static void
seg_bin(void *udata, const lmca__bin *b)
{
    lmca__segment_bin(&((seg_ctx *)udata)->r, b);
}

static uint64_t
seg_want(void *udata)
{
    seg_ctx *s = udata;
    return lmca_segment_len(s->meta, s->index);
}

/* The segment is whole by the spec: a blob of exactly the length the meta
   record promises (`want`, the read's capacity), one wid bin carrying the meta's
   write id, at most one crc32 that matches, and nothing else. */
static bool
segment_is_whole(const fuzz_case *fc, const lmca_meta_t *meta, const lmca__read *rd)
{
    unsigned wids = 0, crcs = 0;
    bool crc_ok = true;

    if (!rd->found || !rd->blob || rd->len != rd->cap)
        return false;
    for (unsigned i = 0; i < fc->nbins; i++) {
        const lmca__bin *b = &fc->bins[i];
        if (is_payload(&fc->seg_payload, b))
            continue;
        if (strcmp(b->name, "wid") == 0 && b->type == LMCA__INT && b->i == (int64_t)meta->wid)
            wids++;
        else if (strcmp(b->name, "crc32") == 0 && b->type == LMCA__INT && b->i >= 0 &&
                 b->i <= (int64_t)UINT32_MAX)
            crcs++, crc_ok = (uint32_t)b->i == lmca_crc32(rd->dst, rd->len);
        else
            return false;
    }
    return wids == 1 && crcs <= 1 && crc_ok;
}

static uint64_t
counted(struct lmca *h)
{
    return atomic_load(&h->counters.torn) + atomic_load(&h->counters.corrupt);
}

static void
check_segment_rc(const fuzz_case *fc, const seg_ctx *s, const lmca__read *rd, struct lmca *h,
                 int rc)
{
    int result = fc->seg_payload.result;

    CHECK(memchr(s->r.why, '\0', sizeof s->r.why) != NULL);
    if (result != LMCA_OK) { /* no record, or the read failed: nothing to judge */
        CHECK(rc == result);
        CHECK(counted(h) == (result == LMCA_MISS ? 1u : 0u));
        return;
    }
    CHECK(rc == LMCA_OK || rc == LMCA_MISS);
    CHECK((rc == LMCA_OK) == segment_is_whole(fc, s->meta, rd));
    CHECK(counted(h) == (rc == LMCA_MISS ? 1u : 0u)); /* every miss is counted once */
}

/* What lmca__segment_bins writes for segment `index` reads back as whole. */
static void
check_segment_round_trip(const lmca_meta_t *meta, uint32_t index)
{
    size_t want = (size_t)lmca_segment_len(meta, index);
    lmca__read rd = {.dst = segment_dst(want), .cap = want, .result = LMCA_OK};
    bool crc = want <= 64 * 1024; /* CRCs of MiB segments in every run would slow it down */
    lmca__bin bins[LMCA__SEGMENT_BINS];
    unsigned n = lmca__segment_bins(bins, meta, rd.dst, want, crc);
    lmca__seg_reader r = {0};
    struct lmca h;

    CHECK(n <= LMCA__SEGMENT_BINS);
    memset(&h, 0, sizeof h);
    for (unsigned i = 0; i < n; i++) {
        if (strcmp(bins[i].name, "b") == 0)
            rd.found = true, rd.blob = bins[i].type == LMCA__BLOB, rd.len = bins[i].len;
        else
            lmca__segment_bin(&r, &bins[i]);
    }
    CHECK(lmca__segment_result(&h, "fuzz|s|0", meta, index, &r, &rd) == LMCA_OK);
}

/* Judges the input as segment `index` of `meta`, a meta record that passed. */
static void
check_segment(const fuzz_case *fc, const lmca_meta_t *meta)
{
    struct lmca h; /* only its counters and (NULL) log callback are used */
    seg_ctx s = {.meta = meta};
    lmca__read rd = {.cb = seg_bin, .udata = &s};
    int rc;

    memset(&h, 0, sizeof h);
    s.index = fc->seg_index & 0x80 ? meta->nseg - 1 : (fc->seg_index & 0x7f) % meta->nseg;
    rd.cap = (size_t)lmca_segment_len(meta, s.index);
    rd.dst = segment_dst(rd.cap);
    rd.result = fc->seg_payload.result;
    if (rd.result == LMCA_OK) /* wire.c hands over bins only of a record it read */
        play_read(fc, &fc->seg_payload, &rd, seg_want);
    rc = lmca__segment_result(&h, "fuzz|s|0", meta, s.index, &s.r, &rd);
    TRACE("segment %u of %u (%zu bytes): %s %s\n", s.index, meta->nseg, rd.cap,
          lmca_status_name(rc), s.r.why);
    check_segment_rc(fc, &s, &rd, &h, rc);
    check_segment_round_trip(meta, s.index);
}

/* The meta record segments are judged against: the decoded one when it passed
   with segments, else a fixed valid one whose write id the seeds use. */
static const lmca_meta_t *
segment_meta(int rc, const lmca_meta_t *decoded)
{
    static const lmca_meta_t fallback = {.ver = LMCA_SCHEMA_VERSION, .nseg = 3, .seg_b = 4096,
                                         .tot_b = 10000, .wid = (uint64_t)WID_MAGIC};
    return rc == LMCA_OK && decoded->nseg > 1 ? decoded : &fallback;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fuzz_case fc; /* 2 KiB: off the stack */
    lmca_meta_t plain, with_md, presence;
    int rc_plain, rc_md, rc_presence;

    parse_case(data, size, &fc);
    rc_plain = decode_meta(&fc, 0, &plain);
    rc_md = decode_meta(&fc, LMCA__WANT_MD, &with_md);
    rc_presence = decode_meta(&fc, LMCA__PRESENCE, &presence);
    check_same_verdict(&fc, rc_plain, &plain, rc_md, &with_md);
    /* Presence asks less: whatever a full read accepts, it accepts too. */
    CHECK(rc_plain != LMCA_OK || rc_presence == LMCA_OK);
    check_segment(&fc, segment_meta(rc_plain, &plain));
    lmca_meta_clear(&plain);
    lmca_meta_clear(&with_md);
    CHECK(plain.md == NULL && with_md.md == NULL);
    return 0;
}
