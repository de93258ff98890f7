/*
 * chunk.c - the meta + segment schema (spec 4.3): writing, reading and
 * verifying chunks, and scanning the set.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zlib.h>

#include "wire.h"

#define SCHEMA_VERSION 1
/* Batch calls carry at most this many payload bytes, well below the 128 MiB
   proto limit both sides enforce. */
#define BATCH_BYTES_MAX (32ull * 1024 * 1024)

static uint32_t
crc32_of(const void *p, size_t n)
{
    return (uint32_t)crc32_z(crc32_z(0, NULL, 0), p, n);
}

uint64_t
lmca_segment_len(const lmca_meta_t *m, uint32_t index)
{
    if (index >= m->nseg)
        return 0;
    return index + 1 < m->nseg ? m->seg_b : m->tot_b - (uint64_t)(m->nseg - 1) * m->seg_b;
}

/* ---------------------------------------------------------------------------
 * Meta record <-> lmca_meta_t.
 */

static void
copy_tag(char *dst, const lmca__bin *b)
{
    size_t n = b->len < LMCA_TAG_MAX ? b->len : LMCA_TAG_MAX;
    memcpy(dst, b->p, n);
    dst[n] = '\0';
}

/* Decoding state of one meta record. */
typedef struct {
    lmca_meta_t *m;
    bool ready;
    bool bad; /* a bin of the wrong type or size */
} meta_reader;

static void
int_bin(meta_reader *r, const lmca__bin *b, int64_t min, int64_t max, int64_t *out)
{
    if (b->type != LMCA__INT || b->i < min || b->i > max)
        r->bad = true;
    else
        *out = b->i;
}

static void
meta_bin(void *udata, const lmca__bin *b)
{
    meta_reader *r = udata;
    lmca_meta_t *m = r->m;
    int64_t v = 0;

    if (strcmp(b->name, "state") == 0)
        r->ready = b->type == LMCA__STR && b->len == 5 && memcmp(b->p, "ready", 5) == 0;
    else if (strcmp(b->name, "ver") == 0)
        int_bin(r, b, 1, 255, &v), m->ver = (uint32_t)v;
    else if (strcmp(b->name, "nseg") == 0)
        int_bin(r, b, 1, LMCA_MAX_SEGMENTS, &v), m->nseg = (uint32_t)v;
    else if (strcmp(b->name, "seg_b") == 0)
        int_bin(r, b, 0, INT64_MAX, &v), m->seg_b = (uint64_t)v;
    else if (strcmp(b->name, "tot_b") == 0)
        int_bin(r, b, 0, INT64_MAX, &v), m->tot_b = (uint64_t)v;
    else if (strcmp(b->name, "crc32") == 0)
        int_bin(r, b, 0, UINT32_MAX, &v), m->crc32 = (uint32_t)v, m->has_crc32 = !r->bad;
    else if (strcmp(b->name, "created_at") == 0)
        int_bin(r, b, INT64_MIN, INT64_MAX, &m->created_at);
    else if (strcmp(b->name, "pin") == 0)
        int_bin(r, b, 0, 1, &v), m->pin = v != 0;
    else if (strcmp(b->name, "md") == 0 && (b->type != LMCA__BLOB || b->len > LMCA_MD_MAX))
        r->bad = true;
    else if (strcmp(b->name, "md") == 0)
        memcpy(m->md, b->p, b->len), m->md_len = b->len;
    else if (strcmp(b->name, "serde") == 0 && b->type == LMCA__STR)
        copy_tag(m->serde, b);
    else if (strcmp(b->name, "ttl_class") == 0 && b->type == LMCA__STR)
        copy_tag(m->ttl_class, b);
}

/* A ready meta record whose sizes agree with each other; anything else reads
   as a miss (it was never published by a complete put). */
static bool
meta_consistent(const meta_reader *r)
{
    const lmca_meta_t *m = r->m;
    if (!r->ready || r->bad || m->nseg == 0)
        return false;
    if (m->nseg == 1)
        return true;
    return m->seg_b > 0 && m->tot_b > (uint64_t)(m->nseg - 1) * m->seg_b &&
           m->tot_b <= (uint64_t)m->nseg * m->seg_b;
}

int
lmca_read_meta(lmca_t *h, const char *key, lmca_meta_t *meta, void *buf, size_t cap,
               size_t *inline_len, lmca_err_t *err)
{
    char mkey[LMCA__RECKEY_SIZE];
    meta_reader r = {.m = meta};
    lmca__sink sink = {.dst = buf, .cap = buf ? cap : 0};
    lmca__recinfo info = {0};
    int rc;

    memset(meta, 0, offsetof(lmca_meta_t, md)); /* md is written only up to md_len */
    if (inline_len)
        *inline_len = 0;
    if ((rc = lmca__check_key(key, err)) != LMCA_OK)
        return rc;
    lmca__meta_key(mkey, key);
    rc = lmca__wire_read(h->wire, mkey, NULL, "b", &sink, meta_bin, &r, &info, err);
    if (rc != LMCA_OK)
        return rc;
    meta->ttl = info.ttl;
    if (!meta_consistent(&r) || (meta->nseg == 1 && (!sink.found || sink.len != meta->tot_b)))
        return LMCA_MISS;
    if (inline_len && meta->nseg == 1 && sink.len <= sink.cap)
        *inline_len = sink.len;
    return LMCA_OK;
}

int
lmca_stat(lmca_t *h, const char *key, lmca_meta_t *meta, lmca_err_t *err)
{
    return lmca_read_meta(h, key, meta, NULL, 0, NULL, err);
}

/* ---------------------------------------------------------------------------
 * Segments.
 */

typedef struct {
    bool has_crc32;
    uint32_t crc32;
} segment_reader;

static void
segment_bin(void *udata, const lmca__bin *b)
{
    segment_reader *r = udata;
    if (strcmp(b->name, "crc32") == 0 && b->type == LMCA__INT) {
        r->has_crc32 = true;
        r->crc32 = (uint32_t)b->i;
    }
}

/* A segment counts only if it is whole and, when it has a CRC, matches it. */
static int
segment_ok(const lmca__sink *sink, const segment_reader *r, uint64_t want)
{
    if (!sink->found || sink->len != want)
        return LMCA_MISS;
    if (r->has_crc32 && crc32_of(sink->dst, sink->len) != r->crc32)
        return LMCA_MISS;
    return LMCA_OK;
}

int
lmca_read_segment(lmca_t *h, const char *key, const lmca_meta_t *meta, uint32_t index, void *dst,
                  lmca_err_t *err)
{
    char skey[LMCA__RECKEY_SIZE];
    uint64_t want = lmca_segment_len(meta, index);
    lmca__sink sink = {.dst = dst, .cap = want};
    segment_reader r = {0};
    int rc;

    if ((rc = lmca__check_key(key, err)) != LMCA_OK)
        return rc;
    if (meta->nseg < 2 || index >= meta->nseg)
        return lmca__fail(err, LMCA_EINVAL, 0, "segment %u of \"%s\": chunk has %u segment(s)",
                          index, key, meta->nseg);
    lmca__segment_key(skey, key, index);
    rc = lmca__wire_read(h->wire, skey, NULL, "b", &sink, segment_bin, &r, NULL, err);
    return rc == LMCA_OK ? segment_ok(&sink, &r, want) : rc;
}

/* Reads segments [first, first + n) in one batch call into buf. */
static int
read_segment_batch(lmca_t *h, const char *key, const lmca_meta_t *m, uint32_t first, uint32_t n,
                   uint8_t *buf, lmca_err_t *err)
{
    char *slab = malloc((size_t)n * (LMCA__RECKEY_SIZE + sizeof(char *) + sizeof(lmca__sink) +
                                     sizeof(segment_reader) + sizeof(int)));
    char **keys = (char **)slab;
    lmca__sink *sinks = (lmca__sink *)(keys + n);
    segment_reader *readers = (segment_reader *)(sinks + n);
    int *results = (int *)(readers + n);
    char *names = (char *)(results + n);
    int rc;

    if (slab == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory reading %u segments", n);
    for (uint32_t i = 0; i < n; i++) {
        keys[i] = names + (size_t)i * LMCA__RECKEY_SIZE;
        lmca__segment_key(keys[i], key, first + i);
        readers[i] = (segment_reader){0};
        sinks[i] = (lmca__sink){.dst = buf + (uint64_t)(first + i) * m->seg_b,
                                .cap = lmca_segment_len(m, first + i),
                                .udata = &readers[i]};
    }
    rc = lmca__wire_read_many(h->wire, (const char *const *)keys, n, "b", sinks, segment_bin,
                              results, err);
    for (uint32_t i = 0; rc == LMCA_OK && i < n; i++)
        rc = results[i] == LMCA_OK ? segment_ok(&sinks[i], &readers[i], sinks[i].cap)
                                   : results[i];
    free(slab);
    return rc;
}

/* Segments no larger than the batch threshold go in batch calls; larger ones
   one by one (DESIGN.md: batch reads of MiB records are slower than gets). */
static uint32_t
batch_rows(const lmca_t *h, uint64_t seg_b)
{
    uint64_t rows;
    if (seg_b > h->limits.batch_threshold_bytes)
        return 1;
    rows = seg_b ? BATCH_BYTES_MAX / seg_b : 1;
    return rows == 0 ? 1 : rows > 4096 ? 4096 : (uint32_t)rows;
}

static int
read_segments(lmca_t *h, const char *key, const lmca_meta_t *m, uint8_t *buf, lmca_err_t *err)
{
    uint32_t step = batch_rows(h, m->seg_b);
    int rc = LMCA_OK;

    for (uint32_t i = 0; rc == LMCA_OK && i < m->nseg; i += step) {
        uint32_t n = m->nseg - i < step ? m->nseg - i : step;
        rc = n == 1 ? lmca_read_segment(h, key, m, i, buf + (uint64_t)i * m->seg_b, err)
                    : read_segment_batch(h, key, m, i, n, buf, err);
    }
    return rc;
}

int
lmca_get(lmca_t *h, const char *key, void *buf, size_t cap, size_t *len, lmca_meta_t *meta,
         lmca_err_t *err)
{
    lmca_meta_t local, *m = meta ? meta : &local;
    size_t got = 0;
    int rc;

    *len = 0;
    if (buf == NULL && cap > 0)
        rc = lmca__fail(err, LMCA_EINVAL, 0, "get \"%s\": NULL buffer of capacity %zu", key,
                        cap);
    else
        rc = lmca_read_meta(h, key, m, buf, cap, &got, err);
    if (rc == LMCA_OK && m->tot_b > cap) {
        *len = m->tot_b;
        rc = lmca__fail(err, LMCA_EINVAL, 0,
                        "get \"%s\": buffer of %zu bytes is smaller than the stored %llu", key,
                        cap, (unsigned long long)m->tot_b);
    } else if (rc == LMCA_OK) {
        if (m->nseg > 1)
            rc = read_segments(h, key, m, buf, err);
        if (rc == LMCA_OK && m->has_crc32 && crc32_of(buf, m->tot_b) != m->crc32)
            rc = LMCA_MISS;
        if (rc == LMCA_OK)
            *len = m->tot_b;
    }
    return rc;
}

/* ---------------------------------------------------------------------------
 * Writing.
 */

int
lmca_write_segment(lmca_t *h, const char *key, uint32_t index, const void *src, size_t len,
                   bool pin, lmca_err_t *err)
{
    char skey[LMCA__RECKEY_SIZE];
    lmca__bin bins[2] = {{.name = "b", .type = LMCA__BLOB, .p = src, .len = len},
                         {.name = "crc32", .type = LMCA__INT}};
    int rc;

    if ((rc = lmca__check_key(key, err)) != LMCA_OK)
        return rc;
    if (src == NULL && len > 0)
        return lmca__fail(err, LMCA_EINVAL, 0, "segment %u of \"%s\": NULL source", index, key);
    if (h->cfg.enable_crc32)
        bins[1].i = crc32_of(src, len);
    lmca__segment_key(skey, key, index);
    return lmca__wire_write(h->wire, skey, bins, h->cfg.enable_crc32 ? 2 : 1,
                            lmca__ttl(h, pin), err);
}

/* Writes segments [first, first + n) in one batch call. */
static int
write_segment_batch(lmca_t *h, const char *key, const lmca_plan_t *p, uint32_t first, uint32_t n,
                    const uint8_t *buf, bool pin, lmca_err_t *err)
{
    char *slab = malloc((size_t)n * (LMCA__RECKEY_SIZE + sizeof(char *) + 2 * sizeof(lmca__bin) +
                                     sizeof(lmca__bin *)));
    char **keys = (char **)slab;
    lmca__bin **rows = (lmca__bin **)(keys + n);
    lmca__bin *bins = (lmca__bin *)(rows + n);
    char *names = (char *)(bins + 2 * (size_t)n);
    int rc;

    if (slab == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory writing %u segments", n);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = first + i;
        const uint8_t *src = buf + (uint64_t)s * p->seg_b;
        size_t len = s + 1 < p->nseg ? p->seg_b : p->last_b;
        keys[i] = names + (size_t)i * LMCA__RECKEY_SIZE;
        lmca__segment_key(keys[i], key, s);
        rows[i] = &bins[2 * (size_t)i];
        rows[i][0] = (lmca__bin){.name = "b", .type = LMCA__BLOB, .p = src, .len = len};
        rows[i][1] = (lmca__bin){.name = "crc32", .type = LMCA__INT,
                                 .i = h->cfg.enable_crc32 ? crc32_of(src, len) : 0};
    }
    rc = lmca__wire_write_many(h->wire, (const char *const *)keys, (const lmca__bin *const *)rows,
                               h->cfg.enable_crc32 ? 2 : 1, n, lmca__ttl(h, pin), err);
    free(slab);
    return rc;
}

static int
check_opts(const char *key, const lmca_put_opts_t *o, lmca_err_t *err)
{
    if (o == NULL)
        return LMCA_OK;
    if (o->md_len > LMCA_MD_MAX || (o->md == NULL && o->md_len > 0))
        return lmca__fail(err, LMCA_EINVAL, 0, "put \"%s\": md of %zu bytes (at most %d)", key,
                          o->md_len, LMCA_MD_MAX);
    if ((o->serde && strlen(o->serde) > LMCA_TAG_MAX) ||
        (o->ttl_class && strlen(o->ttl_class) > LMCA_TAG_MAX))
        return lmca__fail(err, LMCA_EINVAL, 0, "put \"%s\": serde or ttl_class over %d bytes",
                          key, LMCA_TAG_MAX);
    return LMCA_OK;
}

int
lmca_write_meta(lmca_t *h, const char *key, const lmca_meta_t *m, const void *payload,
                const lmca_put_opts_t *opts, lmca_err_t *err)
{
    static const lmca_put_opts_t none = {0};
    const lmca_put_opts_t *o = opts ? opts : &none;
    char mkey[LMCA__RECKEY_SIZE];
    lmca__bin bins[12];
    unsigned n = 0;
    int rc;

    if ((rc = lmca__check_key(key, err)) != LMCA_OK || (rc = check_opts(key, opts, err)))
        return rc;
    if (m->nseg == 1 && payload == NULL && m->tot_b > 0)
        return lmca__fail(err, LMCA_EINVAL, 0, "put \"%s\": inline payload is NULL", key);
#define INT_BIN(n_, v_) bins[n++] = (lmca__bin){.name = n_, .type = LMCA__INT, .i = (int64_t)(v_)}
#define STR_BIN(n_, s_) bins[n++] = (lmca__bin){.name = n_, .type = LMCA__STR, .p = s_, .len = strlen(s_)}
    INT_BIN("ver", SCHEMA_VERSION);
    STR_BIN("state", "ready");
    INT_BIN("nseg", m->nseg);
    INT_BIN("seg_b", m->seg_b);
    INT_BIN("tot_b", m->tot_b);
    INT_BIN("created_at", time(NULL));
    INT_BIN("pin", o->pin);
    if (m->has_crc32)
        INT_BIN("crc32", m->crc32);
    if (o->serde)
        STR_BIN("serde", o->serde);
    if (o->ttl_class)
        STR_BIN("ttl_class", o->ttl_class);
#undef INT_BIN
#undef STR_BIN
    if (o->md_len > 0)
        bins[n++] = (lmca__bin){.name = "md", .type = LMCA__BLOB, .p = o->md, .len = o->md_len};
    if (m->nseg == 1)
        bins[n++] = (lmca__bin){.name = "b", .type = LMCA__BLOB, .p = payload, .len = m->tot_b};
    lmca__meta_key(mkey, key);
    return lmca__wire_write(h->wire, mkey, bins, n, lmca__ttl(h, o->pin), err);
}

static int
write_segments(lmca_t *h, const char *key, const lmca_plan_t *p, const uint8_t *buf, bool pin,
               lmca_err_t *err)
{
    uint32_t step = batch_rows(h, p->seg_b);
    int rc = LMCA_OK;

    for (uint32_t i = 0; rc == LMCA_OK && i < p->nseg; i += step) {
        uint32_t n = p->nseg - i < step ? p->nseg - i : step;
        size_t len = i + 1 < p->nseg ? p->seg_b : p->last_b;
        rc = n == 1 ? lmca_write_segment(h, key, i, buf + (uint64_t)i * p->seg_b, len, pin, err)
                    : write_segment_batch(h, key, p, i, n, buf, pin, err);
    }
    return rc;
}

/* Adds the sizes and caps to a too-big error: the operator's next step. */
static int
explain_too_big(const lmca_t *h, const char *key, size_t len, const lmca_plan_t *p,
                lmca_err_t *err)
{
    return lmca__fail(err, LMCA_ETOO_BIG, err ? err->as_code : 13,
                      "put \"%s\": the server refused a record of a %zu-byte payload (%u "
                      "record(s) of up to %llu bytes) as too big; namespace %s=%llu, "
                      "max_segment_bytes=%llu, target_segment_bytes=%llu: lower them or raise "
                      "the namespace's max-record-size",
                      key, len, p->nseg, (unsigned long long)p->seg_b, h->limits.cap_source,
                      (unsigned long long)h->limits.server_cap,
                      (unsigned long long)h->limits.max_segment_bytes,
                      (unsigned long long)h->limits.target_segment_bytes);
}

int
lmca_put(lmca_t *h, const char *key, const void *buf, size_t len, const lmca_put_opts_t *opts,
         lmca_err_t *err)
{
    lmca_plan_t plan;
    lmca_meta_t m = {0};
    bool pin = opts && opts->pin;
    int rc;

    if ((rc = lmca__check_key(key, err)) != LMCA_OK || (rc = check_opts(key, opts, err)))
        return rc;
    if (buf == NULL && len > 0)
        return lmca__fail(err, LMCA_EINVAL, 0, "put \"%s\": NULL buffer of %zu bytes", key, len);
    if ((rc = lmca_plan(&h->limits, len, &plan, err)) != LMCA_OK)
        return rc;
    m.nseg = plan.nseg;
    m.seg_b = plan.seg_b;
    m.tot_b = len;
    m.has_crc32 = h->cfg.enable_crc32;
    if (m.has_crc32)
        m.crc32 = crc32_of(buf, len);
    /* Segments first, every row checked; the meta record last publishes them. */
    if (plan.nseg > 1)
        rc = write_segments(h, key, &plan, buf, pin, err);
    if (rc == LMCA_OK)
        rc = lmca_write_meta(h, key, &m, buf, opts, err);
    return rc == LMCA_ETOO_BIG ? explain_too_big(h, key, len, &plan, err) : rc;
}

/* ---------------------------------------------------------------------------
 * Scan.
 */

typedef struct {
    lmca_scan_cb cb;
    void *udata;
    lmca_meta_t *meta; /* NULL when the scan reads no bins */
} scan_state;

/* Kind of a record from its stored key: "...|m" or "...|s|<i>". */
static lmca_rec_kind
kind_of(const char *key)
{
    const char *bar = key ? strrchr(key, '|') : NULL;
    if (bar == NULL)
        return LMCA_REC_UNKNOWN;
    if (strcmp(bar, "|m") == 0)
        return LMCA_REC_META;
    return bar - key >= 2 && bar[-2] == '|' && bar[-1] == 's' ? LMCA_REC_SEGMENT
                                                              : LMCA_REC_UNKNOWN;
}

static bool
scan_record(void *udata, const lmca__scanned *s)
{
    scan_state *st = udata;
    lmca_scan_rec_t rec = {.key = s->key, .ttl = s->ttl, .kind = kind_of(s->key)};

    memcpy(rec.digest, s->digest, sizeof rec.digest);
    if (st->meta != NULL) {
        meta_reader r = {.m = st->meta};
        bool has_state = false;
        memset(st->meta, 0, offsetof(lmca_meta_t, md));
        for (unsigned i = 0; i < s->nbins; i++) {
            has_state |= strcmp(s->bins[i].name, "state") == 0;
            meta_bin(&r, &s->bins[i]);
        }
        if (!has_state)
            return true; /* a segment that came back for its crc32 bin */
        st->meta->ttl = s->ttl;
        rec.kind = LMCA_REC_META;
        rec.meta = st->meta;
    }
    return st->cb(st->udata, &rec);
}

int
lmca_scan(lmca_t *h, lmca_scan_mode mode, lmca_scan_cb cb, void *udata, lmca_err_t *err)
{
    /* Every bin of a meta record but its payload. */
    static const char *const names[] = {"ver",   "state",      "nseg", "seg_b",     "tot_b",
                                        "crc32", "created_at", "pin",  "serde",     "ttl_class",
                                        "md",    NULL};
    scan_state st = {cb, udata, NULL};
    int rc;

    if (cb == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_scan: NULL callback");
    if (mode == LMCA_SCAN_META && (st.meta = malloc(sizeof *st.meta)) == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory");
    rc = lmca__wire_scan(h->wire, mode == LMCA_SCAN_META ? names : NULL, scan_record, &st, err);
    free(st.meta);
    return rc;
}
