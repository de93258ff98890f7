/*
 * read.c - reading chunks: meta records, segments, whole chunks. Anything less
 * than a complete, consistent chunk is a miss, never partial data.
 */
#include <stdlib.h>
#include <string.h>

#include "schema.h"

int
lmca_read_meta(lmca_t *h, const char *key, lmca_meta_t *meta, void *buf, size_t cap,
               size_t *inline_len, lmca_err_t *err)
{
    char mkey[LMCA__RECKEY_SIZE];
    lmca__meta_reader r;
    lmca__sink sink = {.dst = buf, .cap = buf ? cap : 0};
    lmca__recinfo info = {0};
    int rc;

    lmca__meta_begin(&r, meta);
    if (inline_len)
        *inline_len = 0;
    if ((rc = lmca__check_key(key, err)) != LMCA_OK)
        return rc;
    lmca__meta_key(mkey, key);
    rc = lmca__wire_read(h->wire, mkey, NULL, "b", &sink, lmca__meta_bin, &r, &info, err);
    if (rc != LMCA_OK)
        return rc;
    meta->ttl = info.ttl;
    if (!lmca__meta_complete(&r, &sink))
        return LMCA_MISS;
    if (inline_len && meta->nseg == 1 && sink.len <= sink.cap)
        *inline_len = sink.len;
    return LMCA_OK;
}

int
lmca_stat(lmca_t *h, const char *key, lmca_meta_t *meta, lmca_err_t *err)
{
    char mkey[LMCA__RECKEY_SIZE];
    lmca__meta_reader r;
    lmca__recinfo info = {0};
    int rc;

    lmca__meta_begin(&r, meta);
    if ((rc = lmca__check_key(key, err)) != LMCA_OK)
        return rc;
    lmca__meta_key(mkey, key);
    /* Only the small bins: a single-record chunk's payload stays on the server. */
    rc = lmca__wire_read(h->wire, mkey, lmca__meta_names, NULL, NULL, lmca__meta_bin, &r, &info,
                         err);
    if (rc != LMCA_OK)
        return rc;
    meta->ttl = info.ttl;
    return lmca__meta_complete(&r, NULL) ? LMCA_OK : LMCA_MISS;
}

int
lmca_read_meta_many(lmca_t *h, const char *const *keys, size_t n, lmca_meta_t *metas,
                    void *const *bufs, const size_t *caps, size_t *inline_lens, int *results,
                    lmca_err_t *err)
{
    size_t each = LMCA__RECKEY_SIZE + sizeof(char *) + sizeof(lmca__sink) +
                  sizeof(lmca__meta_reader);
    char *slab = n ? malloc(n * each) : NULL;
    char **mkeys = (char **)slab;
    lmca__sink *sinks = (lmca__sink *)(mkeys + n);
    lmca__meta_reader *readers = (lmca__meta_reader *)(sinks + n);
    char *names = (char *)(readers + n);
    int rc;

    if (n == 0)
        return LMCA_OK;
    if (slab == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory reading %zu meta records", n);
    for (size_t i = 0; i < n; i++) {
        if ((rc = lmca__check_key(keys[i], err)) != LMCA_OK) {
            free(slab);
            return rc;
        }
        mkeys[i] = names + i * LMCA__RECKEY_SIZE;
        lmca__meta_key(mkeys[i], keys[i]);
        lmca__meta_begin(&readers[i], &metas[i]);
        sinks[i] = (lmca__sink){.dst = bufs ? bufs[i] : NULL,
                                .cap = bufs && caps ? caps[i] : 0,
                                .udata = &readers[i]};
    }
    rc = lmca__wire_read_many(h->wire, (const char *const *)mkeys, n, "b", sinks, lmca__meta_bin,
                              results, err);
    for (size_t i = 0; i < n; i++) {
        inline_lens[i] = 0;
        if (results[i] == LMCA_OK && !lmca__meta_complete(&readers[i], &sinks[i]))
            results[i] = LMCA_MISS;
        else if (results[i] == LMCA_OK && metas[i].nseg == 1 && sinks[i].len <= sinks[i].cap)
            inline_lens[i] = sinks[i].len;
    }
    free(slab);
    return rc;
}

int
lmca_read_segment(lmca_t *h, const char *key, const lmca_meta_t *meta, uint32_t index, void *dst,
                  lmca_err_t *err)
{
    char skey[LMCA__RECKEY_SIZE];
    uint64_t want = lmca_segment_len(meta, index);
    lmca__sink sink = {.dst = dst, .cap = want};
    lmca__seg_reader r = {0};
    int rc;

    if ((rc = lmca__check_key(key, err)) != LMCA_OK)
        return rc;
    if (meta->nseg < 2 || index >= meta->nseg)
        return lmca__fail(err, LMCA_EINVAL, 0, "segment %u of \"%s\": chunk has %u segment(s)",
                          index, key, meta->nseg);
    lmca__segment_key(skey, key, index);
    rc = lmca__wire_read(h->wire, skey, NULL, "b", &sink, lmca__segment_bin, &r, NULL, err);
    return rc == LMCA_OK ? lmca__segment_ok(&sink, &r, want) : rc;
}

/* Reads segments [first, first + n) in one batch call into buf. */
static int
read_segment_batch(lmca_t *h, const char *key, const lmca_meta_t *m, uint32_t first, uint32_t n,
                   uint8_t *buf, lmca_err_t *err)
{
    char *slab = malloc((size_t)n * (LMCA__RECKEY_SIZE + sizeof(char *) + sizeof(lmca__sink) +
                                     sizeof(lmca__seg_reader) + sizeof(int)));
    char **keys = (char **)slab;
    lmca__sink *sinks = (lmca__sink *)(keys + n);
    lmca__seg_reader *readers = (lmca__seg_reader *)(sinks + n);
    int *results = (int *)(readers + n);
    char *names = (char *)(results + n);
    int rc;

    if (slab == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory reading %u segments", n);
    for (uint32_t i = 0; i < n; i++) {
        keys[i] = names + (size_t)i * LMCA__RECKEY_SIZE;
        lmca__segment_key(keys[i], key, first + i);
        readers[i] = (lmca__seg_reader){0};
        sinks[i] = (lmca__sink){.dst = buf + (uint64_t)(first + i) * m->seg_b,
                                .cap = lmca_segment_len(m, first + i),
                                .udata = &readers[i]};
    }
    rc = lmca__wire_read_many(h->wire, (const char *const *)keys, n, "b", sinks,
                              lmca__segment_bin, results, err);
    for (uint32_t i = 0; rc == LMCA_OK && i < n; i++)
        rc = results[i] == LMCA_OK ? lmca__segment_ok(&sinks[i], &readers[i], sinks[i].cap)
                                   : results[i];
    free(slab);
    return rc;
}

static int
read_segments(lmca_t *h, const char *key, const lmca_meta_t *m, uint8_t *buf, lmca_err_t *err)
{
    uint32_t step = lmca__batch_rows(h, m->seg_b);
    int rc = LMCA_OK;

    for (uint32_t i = 0; rc == LMCA_OK && i < m->nseg; i += step) {
        uint32_t n = m->nseg - i < step ? m->nseg - i : step;
        rc = n == 1 ? lmca_read_segment(h, key, m, i, buf + (uint64_t)i * m->seg_b, err)
                    : read_segment_batch(h, key, m, i, n, buf, err);
    }
    return rc;
}

int
lmca_verify(const lmca_meta_t *m, const void *buf)
{
    return m->has_crc32 && lmca__crc32(buf, m->tot_b) != m->crc32 ? LMCA_MISS : LMCA_OK;
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
        return lmca__fail(err, LMCA_EINVAL, 0,
                          "get \"%s\": buffer of %zu bytes is smaller than the stored %llu", key,
                          cap, (unsigned long long)m->tot_b);
    }
    if (rc == LMCA_OK && m->nseg > 1)
        rc = read_segments(h, key, m, buf, err);
    if (rc == LMCA_OK)
        rc = lmca_verify(m, buf);
    if (rc == LMCA_OK)
        *len = m->tot_b;
    return rc;
}
