/*
 * write.c - writing chunks: the put steps (begin, segments, commit, abort) and
 * whole puts. Segments first, every row checked, then the meta record that
 * publishes them (spec 4.3.5); a failed put removes what it wrote.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "schema.h"

/* ---------------------------------------------------------------------------
 * Errors an operator can act on: what to lower, what is full.
 */

static int
explain_too_big(const lmca_t *h, const lmca_put_t *p, lmca_err_t *err)
{
    return lmca__fail(err, LMCA_ETOO_BIG, err ? err->as_code : 13,
                      "put \"%s\": the server refused a record of a %zu-byte payload (%u "
                      "record(s) of up to %llu bytes) as too big; namespace %s=%llu, "
                      "max_segment_bytes=%llu, target_segment_bytes=%llu: lower them or raise "
                      "the namespace's max-record-size",
                      p->key, p->len, p->meta.nseg, (unsigned long long)p->meta.seg_b,
                      h->limits.cap_source, (unsigned long long)h->limits.server_cap,
                      (unsigned long long)h->limits.max_segment_bytes,
                      (unsigned long long)h->limits.target_segment_bytes);
}

/* Appends " name=value" for a setting the namespace reported. */
static size_t
setting(char *out, size_t cap, size_t at, const char *name, int64_t value)
{
    if (value < 0 || at >= cap)
        return at;
    return at + (size_t)snprintf(out + at, cap - at, " %s=%lld", name, (long long)value);
}

static int
explain_full(const lmca_t *h, const lmca_put_t *p, lmca_err_t *err)
{
    const lmca_server_info_t *s = &h->server;
    char limits[200] = "";
    size_t at = 0;

    at = setting(limits, sizeof limits, at, "storage-engine.stop-writes-used-pct",
                 s->stop_writes_used_pct);
    at = setting(limits, sizeof limits, at, "storage-engine.stop-writes-avail-pct",
                 s->stop_writes_avail_pct);
    at = setting(limits, sizeof limits, at, "stop-writes-sys-memory-pct",
                 s->stop_writes_sys_memory_pct);
    setting(limits, sizeof limits, at, "storage-engine.data-size", s->data_size);
    return lmca__fail(err, LMCA_EFULL, err ? err->as_code : 8,
                      "put \"%s\": namespace \"%s\" is full: the server stopped writes at its "
                      "stop-writes limits (%s ); it takes writes again once NSUP evicts "
                      "(evict-used-pct below those limits: `lmcache-aerospike probe`), or free "
                      "space, add capacity, or raise those limits",
                      p->key, h->cfg.namespace_, at ? limits + 1 : "not reported");
}

static int
explain(const lmca_t *h, const lmca_put_t *p, int rc, lmca_err_t *err)
{
    if (rc == LMCA_ETOO_BIG)
        return explain_too_big(h, p, err);
    if (rc == LMCA_EFULL)
        return explain_full(h, p, err);
    return rc;
}

/* ---------------------------------------------------------------------------
 * The put steps.
 */

int
lmca_put_begin(lmca_t *h, lmca_put_t *p, lmca_err_t *err)
{
    lmca_plan_t plan;
    int rc;

    memset(&p->meta, 0, sizeof p->meta);
    if ((rc = lmca__check_key(p->key, err)) != LMCA_OK ||
        (rc = lmca__check_opts(p->key, p->opts, err)) != LMCA_OK)
        return rc;
    if (p->buf == NULL && p->len > 0)
        return lmca__fail(err, LMCA_EINVAL, 0, "put \"%s\": NULL buffer of %zu bytes", p->key,
                          p->len);
    if ((rc = lmca_plan(&h->limits, p->len, &plan, err)) != LMCA_OK)
        return rc;
    p->meta.ver = LMCA_SCHEMA_VERSION;
    p->meta.nseg = plan.nseg;
    p->meta.seg_b = plan.seg_b;
    p->meta.tot_b = p->len;
    p->meta.wid = lmca__new_wid(h);
    p->meta.pin = p->opts && p->opts->pin;
    /* Its place on the void-time clock comes with its first step (lmca_put_pace,
       the gate): placing may take a round trip, and begin does no I/O. */
    p->void_at = 0;
    lmca__cache_planned(h, plan.nseg > 1 ? plan.nseg + 1 : 1, p->len);
    p->begun_ms = lmca__mono_ms();
    p->deadline_ms = 0;
    p->refusals = 0;
    p->dropped = p->paced = p->loaded = p->waits_out = false;
    return LMCA_OK;
}

static const uint8_t *
segment_src(const lmca_put_t *p, uint32_t index)
{
    return (const uint8_t *)p->buf + (uint64_t)index * p->meta.seg_b;
}

/* The timeout of a put's next write: what is left of its bound where that is
   less than write_timeout_ms, else 0 (as configured). */
static uint32_t
step_timeout(lmca_t *h, const lmca_put_t *p)
{
    int64_t left = lmca__put_left_ms(h, p);
    return left > 0 && left < h->cfg.write_timeout_ms ? (uint32_t)left : 0;
}

/* Segment `index` alone. */
static int
write_segment(lmca_t *h, const lmca_put_t *p, uint32_t index, uint32_t timeout_ms,
              lmca_err_t *err)
{
    char skey[LMCA__RECKEY_SIZE];
    lmca__bin bins[LMCA__SEGMENT_BINS];
    unsigned n = lmca__segment_bins(bins, &p->meta, segment_src(p, index),
                                    lmca_segment_len(&p->meta, index), h->cfg.enable_crc32);

    lmca__segment_key(skey, p->key, index);
    return lmca__wire_write(h->wire, skey, bins, n,
                            lmca__record_ttl(h, p->void_at, p->meta.pin), timeout_ms, err);
}

/* Segments [first, first + n) in one batch call. */
static int
write_segment_batch(lmca_t *h, const lmca_put_t *p, uint32_t first, uint32_t n,
                    uint32_t timeout_ms, lmca_err_t *err)
{
    char **keys = lmca__key_slab(n, sizeof(lmca__row) + LMCA__SEGMENT_BINS * sizeof(lmca__bin),
                                 "batch put", err);
    lmca__row *rows = keys ? lmca__slab_extra(keys, n) : NULL;
    lmca__bin *bins = (lmca__bin *)(rows + n);
    int rc;

    if (keys == NULL)
        return LMCA_ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = first + i;
        lmca__bin *b = &bins[(size_t)i * LMCA__SEGMENT_BINS];
        lmca__segment_key(keys[i], p->key, s);
        rows[i] = (lmca__row){.key = keys[i], .bins = b,
                              .nbins = lmca__segment_bins(b, &p->meta, segment_src(p, s),
                                                          lmca_segment_len(&p->meta, s),
                                                          h->cfg.enable_crc32),
                              .ttl = lmca__record_ttl(h, p->void_at, p->meta.pin)};
    }
    rc = lmca__wire_write_many(h->wire, rows, n, timeout_ms, err);
    free(keys);
    return rc;
}

int
lmca_put_segments(lmca_t *h, lmca_put_t *p, uint32_t first, uint32_t count,
                  lmca_err_t *err)
{
    const lmca_meta_t *m = &p->meta;
    uint32_t step = lmca__batch_rows(h, m->seg_b), end;
    int rc = LMCA_OK;

    if (m->nseg < 2 || first >= m->nseg || count > m->nseg - first)
        return lmca__fail(err, LMCA_EINVAL, 0, "put \"%s\": segments %u+%u of a %u-segment plan",
                          p->key, first, count, m->nseg);
    if ((rc = lmca__cache_gate(h, p, err)) != LMCA_OK)
        return rc;
    end = first + count;
    for (uint32_t i = first; rc == LMCA_OK && i < end; i += step) {
        uint32_t n = end - i < step ? end - i : step, timeout = step_timeout(h, p);
        if (i > first && lmca__put_left_ms(h, p) < 0)
            return lmca__put_spent(h, p, err);
        rc = n == 1 ? write_segment(h, p, i, timeout, err)
                    : write_segment_batch(h, p, i, n, timeout, err);
        rc = lmca__put_bounded(h, p, rc, timeout, err);
    }
    return explain(h, p, rc, err);
}

/* The CRC, computed at commit: after the segments, on the thread that commits,
   never at submit. */
static void
seal(lmca_t *h, lmca_put_t *p)
{
    p->meta.has_crc32 = h->cfg.enable_crc32;
    p->meta.crc32 = p->meta.has_crc32 ? lmca__crc32(p->buf, p->len) : 0;
}

int
lmca_put_commit(lmca_t *h, lmca_put_t *p, lmca_err_t *err)
{
    char mkey[LMCA__RECKEY_SIZE];
    lmca__bin bins[LMCA__META_BINS];
    unsigned n;

    int rc = lmca__cache_gate(h, p, err);
    uint32_t timeout;

    if (rc != LMCA_OK)
        return rc;
    seal(h, p);
    n = lmca__meta_bins(bins, &p->meta, p->buf, p->opts);
    lmca__meta_key(mkey, p->key);
    timeout = step_timeout(h, p);
    rc = lmca__wire_write(h->wire, mkey, bins, n,
                          lmca__record_ttl(h, p->void_at, p->meta.pin), timeout, err);
    rc = lmca__put_bounded(h, p, rc, timeout, err);
    if (rc == LMCA_OK)
        lmca__cache_landed(h, p);
    return explain(h, p, rc, err);
}

/* Commits puts [0, n) in one batch call. */
static int
commit_group(lmca_t *h, lmca_put_t *ps, size_t n, int *results, lmca_err_t *err)
{
    char **keys = lmca__key_slab(n, sizeof(lmca__row) + LMCA__META_BINS * sizeof(lmca__bin),
                                 "batch put", err);
    lmca__row *rows = keys ? lmca__slab_extra(keys, n) : NULL;
    lmca__bin *bins = (lmca__bin *)(rows + n);
    int rc;

    if (keys == NULL) {
        for (size_t i = 0; i < n; i++)
            results[i] = LMCA_ENOMEM;
        return LMCA_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        lmca__bin *b = &bins[i * LMCA__META_BINS];
        seal(h, &ps[i]);
        lmca__meta_key(keys[i], ps[i].key);
        rows[i] = (lmca__row){.key = keys[i], .bins = b,
                              .nbins = lmca__meta_bins(b, &ps[i].meta, ps[i].buf, ps[i].opts),
                              .ttl = lmca__record_ttl(h, ps[i].void_at, ps[i].meta.pin)};
    }
    rc = lmca__wire_write_many(h->wire, rows, n, 0, err);
    for (size_t i = 0; i < n; i++)
        if ((results[i] = rows[i].result) == LMCA_OK)
            lmca__cache_landed(h, &ps[i]);
    if (rc != LMCA_OK) {
        for (size_t i = 0; i < n; i++)
            if (rows[i].result == rc) { /* the first failing row names the batch */
                rc = explain(h, &ps[i], rc, err);
                break;
            }
    }
    free(keys);
    return rc;
}

/* Puts per batch call: at most 4096, within LMCA__BATCH_BYTES_MAX of payload
   (a batch request travels as one proto, which must stay under 128 MiB). */
static size_t
commit_group_end(const lmca_put_t *ps, size_t i, size_t n)
{
    uint64_t total = 0;
    size_t j = i;
    while (j < n && j - i < 4096 && (j == i || total + ps[j].len <= LMCA__BATCH_BYTES_MAX))
        total += ps[j++].len;
    return j;
}

int
lmca_put_commit_many(lmca_t *h, lmca_put_t *ps, size_t n, int *results, lmca_err_t *err)
{
    int rc = LMCA_OK;

    if (n > LMCA_BATCH_MAX)
        return lmca__fail(err, LMCA_EINVAL, 0, "batch put: %zu keys (at most %u)", n,
                          LMCA_BATCH_MAX);
    for (size_t i = 0; rc == LMCA_OK && i < n; i++)
        if (ps[i].meta.nseg != 1 || ps[i].meta.wid == 0)
            rc = lmca__fail(err, LMCA_EINVAL, 0,
                            "put \"%s\": lmca_put_commit_many takes begun single-record puts; "
                            "this one has %u segments",
                            ps[i].key ? ps[i].key : "(null)", ps[i].meta.nseg);
    /* The gate is the handle's: closed for one put, closed for all (each is
       counted as dropped). */
    if (rc == LMCA_OK && n > 0 && (rc = lmca__cache_gate(h, &ps[0], err)) != LMCA_OK)
        for (size_t i = 1; i < n; i++)
            lmca__cache_gate(h, &ps[i], NULL);
    if (rc != LMCA_OK) { /* nothing was written: every row says why */
        for (size_t i = 0; i < n; i++)
            results[i] = rc;
        return rc;
    }
    for (size_t i = 1; i < n; i++) /* the gate placed the first */
        lmca__put_place(h, &ps[i], false);
    for (size_t i = 0; i < n;) {
        size_t end = commit_group_end(ps, i, n);
        int grc = commit_group(h, ps + i, end - i, results + i, rc == LMCA_OK ? err : NULL);
        if (rc == LMCA_OK)
            rc = grc;
        i = end;
    }
    return rc;
}

void
lmca_put_abort(lmca_t *h, const lmca_put_t *p)
{
    uint32_t nseg = p->meta.nseg;
    size_t removed = 0, failed = 0;
    char **keys;

    if (nseg < 2)
        return; /* one record: written whole or not at all */
    LMCA__COUNT(h, puts_aborted);
    if ((keys = lmca__key_slab(nseg, 0, "abort", NULL)) == NULL) {
        atomic_fetch_add_explicit(&h->counters.segments_left, nseg, memory_order_relaxed);
        return;
    }
    for (uint32_t i = 0; i < nseg; i++)
        lmca__segment_key(keys[i], p->key, i);
    /* Every segment of the plan: which ones landed is unknown after a timeout. */
    lmca__wire_remove_many(h->wire, (const char *const *)keys, nseg, &removed, &failed, NULL);
    atomic_fetch_add_explicit(&h->counters.segments_removed, removed, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->counters.segments_left, failed, memory_order_relaxed);
    free(keys);
}

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Segments [first, first + count) of a blocking put, each group tried again
   while the server's refusals pass (lmca_put_backoff). */
static int
put_segments_waiting(lmca_t *h, lmca_put_t *p, lmca_err_t *err)
{
    uint32_t step = lmca__batch_rows(h, p->meta.seg_b), nseg = p->meta.nseg;
    int rc = LMCA_OK, wait;

    for (uint32_t i = 0; rc == LMCA_OK && i < nseg; i += step) {
        uint32_t n = nseg - i < step ? nseg - i : step;
        while ((rc = lmca_put_segments(h, p, i, n, err)) != LMCA_OK &&
               (wait = lmca_put_backoff(h, p, rc)) >= 0)
            sleep_ms(wait);
    }
    return rc;
}

int
lmca_put(lmca_t *h, const char *key, const void *buf, size_t len, const lmca_put_opts_t *opts,
         lmca_err_t *err)
{
    lmca_put_t p = {.key = key, .buf = buf, .len = len, .opts = opts};
    int rc = lmca_put_begin(h, &p, err), wait;

    if (rc != LMCA_OK)
        return rc;
    if ((wait = lmca_put_pace(h, &p, err)) < 0) /* due too far ahead: dropped */
        return wait;
    if (wait > 0) /* the clock is ahead: NSUP's pace */
        sleep_ms(wait);
    /* Segments first, every row checked; the meta record last publishes them. */
    if (p.meta.nseg > 1)
        rc = put_segments_waiting(h, &p, err);
    if (rc == LMCA_OK)
        while ((rc = lmca_put_commit(h, &p, err)) != LMCA_OK &&
               (wait = lmca_put_backoff(h, &p, rc)) >= 0)
            sleep_ms(wait);
    if (rc != LMCA_OK)
        lmca_put_abort(h, &p);
    return rc;
}
