/*
 * schema.c - the meta + segment record layout (spec 4.3.1, 4.3.2).
 */
#include <string.h>
#include <time.h>

#include <zlib.h>

#include "schema.h"

uint32_t
lmca__crc32(const void *p, size_t n)
{
    return (uint32_t)crc32_z(crc32_z(0, NULL, 0), p, n);
}

uint32_t
lmca_crc32(const void *buf, size_t len)
{
    return lmca__crc32(buf, len);
}

const char *const lmca__meta_names[] = {"ver",   "state",      "nseg", "seg_b", "tot_b",
                                        "crc32", "created_at", "pin",  "serde", "ttl_class",
                                        "md",    NULL};

uint64_t
lmca_segment_len(const lmca_meta_t *m, uint32_t index)
{
    if (index >= m->nseg)
        return 0;
    return index + 1 < m->nseg ? m->seg_b : m->tot_b - (uint64_t)(m->nseg - 1) * m->seg_b;
}

/* ---------------------------------------------------------------------------
 * Reading a meta record.
 */

void
lmca__meta_begin(lmca__meta_reader *r, lmca_meta_t *m)
{
    memset(m, 0, offsetof(lmca_meta_t, md)); /* md is written only up to md_len */
    *r = (lmca__meta_reader){.m = m};
}

static void
copy_tag(char *dst, const lmca__bin *b)
{
    size_t n = b->len < LMCA_TAG_MAX ? b->len : LMCA_TAG_MAX;
    memcpy(dst, b->p, n);
    dst[n] = '\0';
}

static void
int_bin(lmca__meta_reader *r, const lmca__bin *b, int64_t min, int64_t max, int64_t *out)
{
    if (b->type != LMCA__INT || b->i < min || b->i > max)
        r->bad = true;
    else
        *out = b->i;
}

void
lmca__meta_bin(void *udata, const lmca__bin *b)
{
    lmca__meta_reader *r = udata;
    lmca_meta_t *m = r->m;
    int64_t v = 0;

    if (strcmp(b->name, "state") == 0) {
        r->has_state = true;
        r->ready = b->type == LMCA__STR && b->len == 5 && memcmp(b->p, "ready", 5) == 0;
    } else if (strcmp(b->name, "ver") == 0) {
        int_bin(r, b, 1, 255, &v), m->ver = (uint32_t)v;
    } else if (strcmp(b->name, "nseg") == 0) {
        int_bin(r, b, 1, LMCA_MAX_SEGMENTS, &v), m->nseg = (uint32_t)v;
    } else if (strcmp(b->name, "seg_b") == 0) {
        int_bin(r, b, 0, INT64_MAX, &v), m->seg_b = (uint64_t)v;
    } else if (strcmp(b->name, "tot_b") == 0) {
        int_bin(r, b, 0, INT64_MAX, &v), m->tot_b = (uint64_t)v;
    } else if (strcmp(b->name, "crc32") == 0) {
        int_bin(r, b, 0, UINT32_MAX, &v), m->crc32 = (uint32_t)v, m->has_crc32 = !r->bad;
    } else if (strcmp(b->name, "created_at") == 0) {
        int_bin(r, b, INT64_MIN, INT64_MAX, &m->created_at);
    } else if (strcmp(b->name, "pin") == 0) {
        int_bin(r, b, 0, 1, &v), m->pin = v != 0;
    } else if (strcmp(b->name, "md") == 0) {
        if (b->type != LMCA__BLOB || b->len > LMCA_MD_MAX)
            r->bad = true;
        else
            memcpy(m->md, b->p, b->len), m->md_len = b->len;
    } else if (strcmp(b->name, "serde") == 0 && b->type == LMCA__STR) {
        copy_tag(m->serde, b);
    } else if (strcmp(b->name, "ttl_class") == 0 && b->type == LMCA__STR) {
        copy_tag(m->ttl_class, b);
    }
}

bool
lmca__meta_complete(const lmca__meta_reader *r, const lmca__sink *payload)
{
    const lmca_meta_t *m = r->m;
    if (!r->ready || r->bad || m->nseg == 0)
        return false;
    if (m->nseg == 1)
        return payload == NULL || (payload->found && payload->len == m->tot_b);
    return m->seg_b > 0 && m->tot_b > (uint64_t)(m->nseg - 1) * m->seg_b &&
           m->tot_b <= (uint64_t)m->nseg * m->seg_b;
}

/* ---------------------------------------------------------------------------
 * Writing a meta record.
 */

int
lmca__check_opts(const char *key, const lmca_put_opts_t *o, lmca_err_t *err)
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

unsigned
lmca__meta_bins(lmca__bin *bins, const lmca_meta_t *m, const void *payload,
                const lmca_put_opts_t *opts)
{
    static const lmca_put_opts_t none = {0};
    const lmca_put_opts_t *o = opts ? opts : &none;
    unsigned n = 0;

#define INT_BIN(n_, v_) bins[n++] = (lmca__bin){.name = n_, .type = LMCA__INT, .i = (int64_t)(v_)}
#define STR_BIN(n_, s_) \
    bins[n++] = (lmca__bin){.name = n_, .type = LMCA__STR, .p = s_, .len = strlen(s_)}
    INT_BIN("ver", LMCA__SCHEMA_VERSION);
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
    return n;
}

/* ---------------------------------------------------------------------------
 * Segments.
 */

void
lmca__segment_bin(void *udata, const lmca__bin *b)
{
    lmca__seg_reader *r = udata;
    if (strcmp(b->name, "crc32") == 0 && b->type == LMCA__INT) {
        r->has_crc32 = true;
        r->crc32 = (uint32_t)b->i;
    }
}

int
lmca__segment_ok(const lmca__sink *sink, const lmca__seg_reader *r, uint64_t want)
{
    if (!sink->found || sink->len != want)
        return LMCA_MISS;
    if (r->has_crc32 && lmca__crc32(sink->dst, sink->len) != r->crc32)
        return LMCA_MISS;
    return LMCA_OK;
}

/* Records no larger than the batch threshold go in batch calls; larger ones one
   by one (DESIGN.md: batch reads of MiB records are slower than gets). */
uint32_t
lmca__batch_rows(const lmca_t *h, uint64_t bytes)
{
    uint64_t rows;
    if (bytes > h->limits.batch_threshold_bytes)
        return 1;
    rows = bytes ? LMCA__BATCH_BYTES_MAX / bytes : 4096;
    return rows == 0 ? 1 : rows > 4096 ? 4096 : (uint32_t)rows;
}
