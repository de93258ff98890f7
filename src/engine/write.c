/*
 * write.c - writing chunks: segments first, every row checked, then the meta
 * record that publishes them (spec 4.3.5).
 */
#include <stdlib.h>
#include <string.h>

#include "schema.h"

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
        bins[1].i = lmca__crc32(src, len);
    lmca__segment_key(skey, key, index);
    return lmca__wire_write(h->wire, skey, bins, h->cfg.enable_crc32 ? 2 : 1,
                            lmca__ttl(h, pin), err);
}

/* Writes segments [first, first + n) in one batch call. */
static int
write_segment_batch(lmca_t *h, const char *key, const lmca_plan_t *p, uint32_t first, uint32_t n,
                    const uint8_t *buf, bool pin, lmca_err_t *err)
{
    char *slab = malloc((size_t)n * (LMCA__RECKEY_SIZE + sizeof(lmca__row) + 2 * sizeof(lmca__bin)));
    lmca__row *rows = (lmca__row *)slab;
    lmca__bin *bins = (lmca__bin *)(rows + n);
    char *names = (char *)(bins + 2 * (size_t)n);
    int rc;

    if (slab == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory writing %u segments", n);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = first + i;
        const uint8_t *src = buf + (uint64_t)s * p->seg_b;
        size_t len = s + 1 < p->nseg ? p->seg_b : p->last_b;
        lmca__bin *b = &bins[2 * (size_t)i];
        char *skey = names + (size_t)i * LMCA__RECKEY_SIZE;
        lmca__segment_key(skey, key, s);
        b[0] = (lmca__bin){.name = "b", .type = LMCA__BLOB, .p = src, .len = len};
        b[1] = (lmca__bin){.name = "crc32", .type = LMCA__INT,
                           .i = h->cfg.enable_crc32 ? lmca__crc32(src, len) : 0};
        rows[i] = (lmca__row){.key = skey, .bins = b, .nbins = h->cfg.enable_crc32 ? 2 : 1,
                              .ttl = lmca__ttl(h, pin)};
    }
    rc = lmca__wire_write_many(h->wire, rows, n, err);
    free(slab);
    return rc;
}

int
lmca_write_meta(lmca_t *h, const char *key, const lmca_meta_t *m, const void *payload,
                const lmca_put_opts_t *opts, lmca_err_t *err)
{
    char mkey[LMCA__RECKEY_SIZE];
    lmca__bin bins[LMCA__META_BINS];
    int rc;

    if ((rc = lmca__check_key(key, err)) != LMCA_OK || (rc = lmca__check_opts(key, opts, err)))
        return rc;
    if (m->nseg == 1 && payload == NULL && m->tot_b > 0)
        return lmca__fail(err, LMCA_EINVAL, 0, "put \"%s\": inline payload is NULL", key);
    lmca__meta_key(mkey, key);
    return lmca__wire_write(h->wire, mkey, bins, lmca__meta_bins(bins, m, payload, opts),
                            lmca__ttl(h, opts && opts->pin), err);
}

static int
write_segments(lmca_t *h, const char *key, const lmca_plan_t *p, const uint8_t *buf, bool pin,
               lmca_err_t *err)
{
    uint32_t step = lmca__batch_rows(h, p->seg_b);
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

/* Checks a put's arguments and plans it; fills the meta fields it decides. */
static int
prepare(lmca_t *h, const char *key, const void *buf, size_t len, const lmca_put_opts_t *opts,
        lmca_plan_t *plan, lmca_meta_t *m, lmca_err_t *err)
{
    int rc;
    if ((rc = lmca__check_key(key, err)) != LMCA_OK || (rc = lmca__check_opts(key, opts, err)))
        return rc;
    if (buf == NULL && len > 0)
        return lmca__fail(err, LMCA_EINVAL, 0, "put \"%s\": NULL buffer of %zu bytes", key, len);
    if ((rc = lmca_plan(&h->limits, len, plan, err)) != LMCA_OK)
        return rc;
    m->nseg = plan->nseg;
    m->seg_b = plan->seg_b;
    m->tot_b = len;
    m->has_crc32 = h->cfg.enable_crc32;
    m->crc32 = m->has_crc32 ? lmca__crc32(buf, len) : 0;
    return LMCA_OK;
}

int
lmca_put(lmca_t *h, const char *key, const void *buf, size_t len, const lmca_put_opts_t *opts,
         lmca_err_t *err)
{
    lmca_plan_t plan;
    lmca_meta_t m = {0};
    int rc;

    if ((rc = prepare(h, key, buf, len, opts, &plan, &m, err)) != LMCA_OK)
        return rc;
    /* Segments first, every row checked; the meta record last publishes them. */
    if (plan.nseg > 1)
        rc = write_segments(h, key, &plan, buf, opts && opts->pin, err);
    if (rc == LMCA_OK)
        rc = lmca_write_meta(h, key, &m, buf, opts, err);
    return rc == LMCA_ETOO_BIG ? explain_too_big(h, key, len, &plan, err) : rc;
}

int
lmca_put_small_many(lmca_t *h, const char *const *keys, size_t n, const void *const *bufs,
                    const size_t *lens, const lmca_put_opts_t *opts, int *results,
                    lmca_err_t *err)
{
    size_t each = LMCA__RECKEY_SIZE + sizeof(lmca__row) + LMCA__META_BINS * sizeof(lmca__bin) +
                  sizeof(lmca_meta_t);
    char *slab = n ? malloc(n * each) : NULL;
    lmca__row *rows = (lmca__row *)slab;
    lmca__bin *bins = (lmca__bin *)(rows + n);
    lmca_meta_t *metas = (lmca_meta_t *)(bins + n * LMCA__META_BINS);
    char *names = (char *)(metas + n);
    int rc = LMCA_OK;

    if (n == 0)
        return LMCA_OK;
    if (slab == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory writing %zu chunks", n);
    for (size_t i = 0; i < n; i++) {
        const lmca_put_opts_t *o = opts ? &opts[i] : NULL;
        lmca_plan_t plan;
        lmca__bin *b = &bins[i * LMCA__META_BINS];
        char *mkey = names + i * LMCA__RECKEY_SIZE;
        metas[i] = (lmca_meta_t){0};
        rc = prepare(h, keys[i], bufs[i], lens[i], o, &plan, &metas[i], err);
        if (rc == LMCA_OK && plan.nseg != 1)
            rc = lmca__fail(err, LMCA_EINVAL, 0,
                            "put \"%s\": %zu bytes need %u segments; lmca_put_small_many takes "
                            "single-record chunks only",
                            keys[i], lens[i], plan.nseg);
        if (rc != LMCA_OK)
            break;
        lmca__meta_key(mkey, keys[i]);
        rows[i] = (lmca__row){.key = mkey, .bins = b,
                              .nbins = lmca__meta_bins(b, &metas[i], bufs[i], o),
                              .ttl = lmca__ttl(h, o && o->pin)};
    }
    bool sent = rc == LMCA_OK; /* otherwise an argument was bad: nothing was written */
    if (sent)
        rc = lmca__wire_write_many(h->wire, rows, n, err);
    for (size_t i = 0; i < n; i++)
        results[i] = sent ? rows[i].result : rc;
    free(slab);
    return rc;
}
