/*
 * read.c - reading chunks: the get steps (begin, segments, end), whole gets,
 * stat, the one rule for "present" that exists and prefix share, and inspect
 * (a chunk taken apart for an operator). Anything less than a complete chunk
 * of one write is a miss, never partial data.
 */
#include <stdlib.h>
#include <string.h>

#include "schema.h"

/* Rows of one batch read call. The server answers a batch in protos of its own
   size, so only the row count needs a bound. */
#define GROUP_ROWS 4096

static size_t
group_end(size_t i, size_t n)
{
    return n - i < GROUP_ROWS ? n : i + GROUP_ROWS;
}

/* Per key of a batch of meta reads: what decodes it and what came back. The
   three live in parallel arrays after the keys of one slab. */
typedef struct {
    lmca__read *rds;
    lmca__meta_reader *readers;
    lmca_meta_t *metas; /* NULL: the caller's */
} meta_batch;

static char **
meta_batch_new(size_t n, bool own_metas, meta_batch *b, const char *what, lmca_err_t *err)
{
    size_t each = sizeof(lmca__read) + sizeof(lmca__meta_reader) +
                  (own_metas ? sizeof(lmca_meta_t) : 0);
    char **keys = lmca__key_slab(n, each, what, err);
    if (keys == NULL)
        return NULL;
    b->rds = lmca__slab_extra(keys, n);
    b->readers = (lmca__meta_reader *)(b->rds + n);
    b->metas = own_metas ? (lmca_meta_t *)(b->readers + n) : NULL;
    return keys;
}

/* The reader's verdict for `key`, with the message an ENOMEM needs. */
static int
meta_done(lmca_t *h, const char *key, const char *mkey, lmca__meta_reader *r,
          const lmca__read *rd, bool with_payload, lmca_err_t *err)
{
    int rc = lmca__meta_result(h, mkey, r, rd, with_payload);
    if (rc == LMCA_ENOMEM)
        lmca__fail(err, LMCA_ENOMEM, 0, "out of memory copying the md of \"%s\"", key);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Meta records without payloads: stat, exists, prefix.
 */

int
lmca__read_small(lmca_t *h, const char *key, lmca_meta_t *meta, unsigned flags, lmca_err_t *err)
{
    char mkey[LMCA__RECKEY_SIZE];
    lmca__meta_reader r;
    lmca__read rd = {.cb = lmca__meta_bin, .udata = &r};
    int rc;

    lmca__meta_begin(&r, meta, flags);
    if ((rc = lmca__check_key(key, err)) != LMCA_OK)
        return rc;
    lmca__meta_key(mkey, key);
    lmca__wire_read(h->wire, mkey,
                    flags & LMCA__PRESENCE ? lmca__presence_names : lmca__small_names, NULL,
                    &rd, err);
    return meta_done(h, key, mkey, &r, &rd, false, err);
}

int
lmca__read_small_many(lmca_t *h, const char *const *keys, size_t n, lmca_meta_t *metas, int *rcs,
                      lmca_err_t *err)
{
    meta_batch b;
    char **mkeys = meta_batch_new(n, false, &b, "lookup", err);

    if (mkeys == NULL)
        return LMCA_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        lmca__meta_key(mkeys[i], keys[i]);
        lmca__meta_begin(&b.readers[i], &metas[i], 0);
        b.rds[i] = (lmca__read){.cb = lmca__meta_bin, .udata = &b.readers[i]};
    }
    /* The call's own verdict is in every row that it failed. */
    lmca__wire_read_many(h->wire, (const char *const *)mkeys, n, lmca__small_names, NULL, b.rds,
                         err);
    for (size_t i = 0; i < n; i++)
        rcs[i] = lmca__meta_result(h, mkeys[i], &b.readers[i], &b.rds[i], false);
    free(mkeys);
    return LMCA_OK;
}

int
lmca_stat(lmca_t *h, const char *key, lmca_meta_t *meta, lmca_err_t *err)
{
    return lmca__read_small(h, key, meta, LMCA__WANT_MD, err);
}

int
lmca_exists(lmca_t *h, const char *key, lmca_err_t *err)
{
    lmca_meta_t meta;
    return lmca__read_small(h, key, &meta, LMCA__PRESENCE, err);
}

/* Looks up keys [0, n) in one batch call and sets found[i]. */
static int
prefix_group(lmca_t *h, const char *const *keys, size_t n, uint8_t *found, lmca_err_t *err)
{
    meta_batch b;
    char **mkeys = meta_batch_new(n, true, &b, "prefix", err);
    int rc;

    if (mkeys == NULL)
        return LMCA_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        lmca__meta_key(mkeys[i], keys[i]);
        lmca__meta_begin(&b.readers[i], &b.metas[i], LMCA__PRESENCE);
        b.rds[i] = (lmca__read){.cb = lmca__meta_bin, .udata = &b.readers[i]};
    }
    rc = lmca__wire_read_many(h->wire, (const char *const *)mkeys, n, lmca__presence_names,
                              NULL, b.rds, err);
    for (size_t i = 0; rc == LMCA_OK && i < n; i++)
        found[i] = lmca__meta_result(h, mkeys[i], &b.readers[i], &b.rds[i], false) == LMCA_OK;
    free(mkeys);
    return rc;
}

int
lmca_prefix(lmca_t *h, const char *const *keys, size_t n, size_t *count, uint8_t *found,
            lmca_err_t *err)
{
    uint8_t *hits;
    int rc = LMCA_OK;

    *count = 0;
    if (n == 0)
        return LMCA_OK;
    if (keys == NULL || n > LMCA_BATCH_MAX)
        return lmca__fail(err, LMCA_EINVAL, 0, "prefix: %s (%zu keys, at most %u)",
                          keys ? "too many keys" : "NULL keys", n, LMCA_BATCH_MAX);
    for (size_t i = 0; i < n; i++)
        if ((rc = lmca__check_key(keys[i], err)) != LMCA_OK)
            return rc;
    if ((hits = found ? found : lmca__malloc(n)) == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "prefix: out of memory for %zu keys", n);
    /* Group by group; without `found` the count is known at the first miss. */
    for (size_t i = 0; rc == LMCA_OK && i < n;) {
        size_t end = group_end(i, n);
        rc = prefix_group(h, keys + i, end - i, hits + i, err);
        while (rc == LMCA_OK && *count < end && hits[*count])
            (*count)++;
        if (found == NULL && *count < end)
            break;
        i = end;
    }
    if (rc != LMCA_OK)
        *count = 0;
    if (hits != found)
        free(hits);
    return rc;
}

/* ---------------------------------------------------------------------------
 * The get steps.
 */

static int
check_get(const lmca_get_t *g, lmca_err_t *err)
{
    int rc = lmca__check_key(g->key, err);
    if (rc == LMCA_OK && g->buf == NULL && g->cap > 0)
        rc = lmca__fail(err, LMCA_EINVAL, 0, "get \"%s\": NULL buffer of capacity %zu", g->key,
                        g->cap);
    return rc;
}

/* Reading `g`'s meta record into `rd`: the payload goes to g->buf, or with
   `hold` and no buffer to a new one of its size. */
static lmca__read
begin_read(lmca_get_t *g, lmca__meta_reader *r)
{
    g->held = NULL;
    lmca__meta_begin(r, &g->meta, g->want_md ? LMCA__WANT_MD : 0);
    return (lmca__read){.dst = g->buf, .cap = g->buf ? g->cap : 0,
                        .alloc = g->hold && g->buf == NULL, .cb = lmca__meta_bin, .udata = r};
}

/* A read that failed for time, load or a lost node: the chunk may well be
   there, and the get is a use all the same (hits.c moves it). */
static bool
late(int rc)
{
    return rc == LMCA_ETIMEOUT || rc == LMCA_EBUSY || rc == LMCA_ECONNECTION;
}

/* The verdict on a begun get; keeps a held payload of a valid one-record chunk
   and frees it otherwise. */
static int
begin_done(lmca_t *h, lmca_get_t *g, const char *mkey, lmca__meta_reader *r, lmca__read *rd,
           lmca_err_t *err)
{
    int rc = meta_done(h, g->key, mkey, r, rd, true, err);
    /* Not read in time is not gone: still a use (lmca_get_segments says why). */
    if (late(rc))
        lmca__hit_unsure(h, g->key);
    if (rc == LMCA_OK && rd->nomem)
        rc = lmca__fail(err, LMCA_ENOMEM, 0, "out of memory holding the %zu bytes of \"%s\"",
                        rd->len, g->key);
    if (rd->alloc && rc == LMCA_OK && g->meta.nseg == 1)
        g->held = rd->dst;
    else if (rd->alloc)
        free(rd->dst);
    if (rc != LMCA_OK)
        lmca_meta_clear(&g->meta);
    return rc;
}

int
lmca_get_begin(lmca_t *h, lmca_get_t *g, lmca_err_t *err)
{
    char mkey[LMCA__RECKEY_SIZE];
    lmca__meta_reader r;
    lmca__read rd = begin_read(g, &r);
    int rc;

    if ((rc = check_get(g, err)) != LMCA_OK)
        return rc;
    lmca__meta_key(mkey, g->key);
    lmca__wire_read(h->wire, mkey, NULL, "b", &rd, err);
    return begin_done(h, g, mkey, &r, &rd, err);
}

int
lmca_get_place(lmca_get_t *g, void *buf, size_t cap, lmca_err_t *err)
{
    if (cap < g->meta.tot_b || (buf == NULL && g->meta.tot_b > 0))
        return lmca__fail(err, LMCA_EINVAL, 0, "get \"%s\": a buffer of %zu bytes for %llu",
                          g->key, buf ? cap : 0, (unsigned long long)g->meta.tot_b);
    g->buf = buf;
    g->cap = cap;
    if (g->held != NULL) {
        memcpy(buf, g->held, g->meta.tot_b);
        free(g->held);
        g->held = NULL;
    }
    return LMCA_OK;
}

void
lmca_get_release(lmca_get_t *g)
{
    if (g == NULL)
        return;
    free(g->held);
    g->held = NULL;
    lmca_meta_clear(&g->meta);
}

/* Begins gets [0, n) in one batch call. */
static int
begin_group(lmca_t *h, lmca_get_t *gs, size_t n, int *results, lmca_err_t *err)
{
    meta_batch b;
    char **mkeys = meta_batch_new(n, false, &b, "batch get", err);
    int rc;

    if (mkeys == NULL) {
        for (size_t i = 0; i < n; i++)
            results[i] = LMCA_ENOMEM;
        return LMCA_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        lmca__meta_key(mkeys[i], gs[i].key);
        b.rds[i] = begin_read(&gs[i], &b.readers[i]);
    }
    rc = lmca__wire_read_many(h->wire, (const char *const *)mkeys, n, NULL, "b", b.rds, err);
    for (size_t i = 0; i < n; i++) {
        results[i] = begin_done(h, &gs[i], mkeys[i], &b.readers[i], &b.rds[i],
                                rc == LMCA_OK ? err : NULL);
        if (rc == LMCA_OK && results[i] < 0)
            rc = results[i];
    }
    free(mkeys);
    return rc;
}

int
lmca_get_begin_many(lmca_t *h, lmca_get_t *gs, size_t n, int *results, lmca_err_t *err)
{
    int rc = LMCA_OK;

    if (n > LMCA_BATCH_MAX)
        rc = lmca__fail(err, LMCA_EINVAL, 0, "batch get: %zu keys (at most %u)", n,
                        LMCA_BATCH_MAX);
    for (size_t i = 0; rc == LMCA_OK && i < n; i++) {
        memset(&gs[i].meta, 0, sizeof gs[i].meta);
        gs[i].held = NULL;
        rc = check_get(&gs[i], err);
    }
    if (rc != LMCA_OK) { /* a bad argument: nothing is read, every row says so */
        for (size_t i = 0; i < n && n <= LMCA_BATCH_MAX; i++)
            results[i] = rc;
        return rc;
    }
    for (size_t i = 0; i < n;) {
        size_t end = group_end(i, n);
        int grc = begin_group(h, gs + i, end - i, results + i, rc == LMCA_OK ? err : NULL);
        if (rc == LMCA_OK)
            rc = grc;
        i = end;
    }
    return rc;
}

/* Reading segments: where they land, and who judges each as it comes. A judge
   returns LMCA_OK to go on with the next segment. */
typedef struct seg_reading seg_reading;
typedef int (*seg_judge)(const seg_reading *s, const char *skey, uint32_t index,
                         const lmca__seg_reader *r, const lmca__read *rd);
struct seg_reading {
    lmca_t *h;
    const char *key;
    const lmca_meta_t *m;
    seg_judge judge;
    void *udata;
};

/* Segment `index` alone, into dst. */
static int
read_segment(const seg_reading *s, uint32_t index, uint8_t *dst, lmca_err_t *err)
{
    char skey[LMCA__RECKEY_SIZE];
    lmca__seg_reader r = {0};
    lmca__read rd = {.dst = dst, .cap = lmca_segment_len(s->m, index), .cb = lmca__segment_bin,
                     .udata = &r};

    lmca__segment_key(skey, s->key, index);
    lmca__wire_read(s->h->wire, skey, NULL, "b", &rd, err);
    return s->judge(s, skey, index, &r, &rd);
}

/* Segments [first, first + n) in one batch call, segment `first` landing at dst. */
static int
read_segment_batch(const seg_reading *s, uint32_t first, uint32_t n, uint8_t *dst,
                   lmca_err_t *err)
{
    char **keys = lmca__key_slab(n, sizeof(lmca__read) + sizeof(lmca__seg_reader), "batch get",
                                 err);
    lmca__read *rds = keys ? lmca__slab_extra(keys, n) : NULL;
    lmca__seg_reader *readers = (lmca__seg_reader *)(rds + n);
    int rc;

    if (keys == NULL)
        return LMCA_ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t seg = first + i;
        lmca__segment_key(keys[i], s->key, seg);
        readers[i] = (lmca__seg_reader){0};
        rds[i] = (lmca__read){.dst = dst + (uint64_t)i * s->m->seg_b,
                              .cap = lmca_segment_len(s->m, seg), .cb = lmca__segment_bin,
                              .udata = &readers[i]};
    }
    rc = lmca__wire_read_many(s->h->wire, (const char *const *)keys, n, NULL, "b", rds, err);
    for (uint32_t i = 0; rc == LMCA_OK && i < n; i++)
        rc = s->judge(s, keys[i], first + i, &readers[i], &rds[i]);
    free(keys);
    return rc;
}

/* Segments [first, first + n), n at most one batch (lmca__batch_rows), into dst. */
static int
read_group(const seg_reading *s, uint32_t first, uint32_t n, uint8_t *dst, lmca_err_t *err)
{
    return n == 1 ? read_segment(s, first, dst, err) : read_segment_batch(s, first, n, dst, err);
}

/* A get's judge: the first segment that is not whole of this write ends it. */
static int
get_judge(const seg_reading *s, const char *skey, uint32_t index, const lmca__seg_reader *r,
          const lmca__read *rd)
{
    return lmca__segment_result(s->h, skey, s->m, index, r, rd);
}

/* A guessed get's judge: the write id is not known yet, so each segment's is
   recorded (0 when the segment is not whole) and every segment is read. A
   segment of another writer's plan is no damage: nothing is counted. */
static int
guess_judge(const seg_reading *s, const char *skey, uint32_t index, const lmca__seg_reader *r,
            const lmca__read *rd)
{
    uint64_t *seen = s->udata;
    lmca_meta_t as_if = *s->m; /* judged as if of its own write */
    char why[160];
    bool crc_failed;

    (void)skey;
    if (rd->result < 0)
        return rd->result;
    as_if.wid = r->wid;
    seen[index] = lmca__segment_judge(&as_if, index, r, rd, why, sizeof why, &crc_failed) ==
                          LMCA_SEG_OK
                      ? r->wid
                      : 0;
    return LMCA_OK;
}

int
lmca_get_guess(lmca_t *h, lmca_get_t *g, lmca_err_t *err)
{
    lmca_plan_t plan;
    int rc = check_get(g, err);

    if (rc == LMCA_OK && g->seen_wids == NULL)
        rc = lmca__fail(err, LMCA_EINVAL, 0, "get \"%s\": a guess needs seen_wids", g->key);
    if (rc == LMCA_OK)
        rc = lmca_plan(&h->limits, g->cap, &plan, err);
    if (rc == LMCA_OK && plan.nseg < 2)
        rc = lmca__fail(err, LMCA_EINVAL, 0, "get \"%s\": %zu bytes are one record, no guess",
                        g->key, g->cap);
    if (rc != LMCA_OK)
        return rc;
    g->meta = (lmca_meta_t){.ver = LMCA_SCHEMA_VERSION, .nseg = plan.nseg, .seg_b = plan.seg_b,
                            .tot_b = g->cap};
    g->held = NULL;
    memset(g->seen_wids, 0, plan.nseg * sizeof *g->seen_wids);
    return LMCA_OK;
}

int
lmca_get_confirm(lmca_t *h, const lmca_get_t *guess, const lmca_get_t *real)
{
    const lmca_meta_t *want = &guess->meta, *m = &real->meta;
    bool same = m->wid != 0 && m->nseg == want->nseg && m->seg_b == want->seg_b &&
                m->tot_b == want->tot_b && guess->seen_wids != NULL;

    for (uint32_t i = 0; same && i < want->nseg; i++)
        same = guess->seen_wids[i] == m->wid;
    if (same)
        LMCA__COUNT(h, guesses_confirmed);
    else
        LMCA__COUNT(h, guesses_missed);
    return same ? LMCA_OK : LMCA_MISS;
}

int
lmca_get_segments(lmca_t *h, const lmca_get_t *g, uint32_t first, uint32_t count,
                  lmca_err_t *err)
{
    const lmca_meta_t *m = &g->meta;
    seg_reading s = {.h = h, .key = g->key, .m = m,
                     .judge = g->seen_wids ? guess_judge : get_judge, .udata = g->seen_wids};
    uint32_t step = lmca__batch_rows(h, m->seg_b), end;
    int rc = LMCA_OK;

    if (m->nseg < 2 || first >= m->nseg || count > m->nseg - first)
        return lmca__fail(err, LMCA_EINVAL, 0, "get \"%s\": segments %u+%u of a %u-segment chunk",
                          g->key, first, count, m->nseg);
    if (g->buf == NULL || g->cap < m->tot_b)
        return lmca__fail(err, LMCA_EINVAL, 0, "get \"%s\": buffer of %zu bytes for %llu", g->key,
                          g->buf ? g->cap : 0, (unsigned long long)m->tot_b);
    end = first + count;
    for (uint32_t i = first; rc == LMCA_OK && i < end; i += step) {
        uint32_t n = end - i < step ? end - i : step;
        rc = read_group(&s, i, n, (uint8_t *)g->buf + (uint64_t)i * m->seg_b, err);
    }
    /* The chunk is there (its meta record was read) but its segments did not
       come in time: a miss to the caller, still a use to the eviction order, as
       it is to an exact LRU. Left unmoved, a warm chunk read during a disk's
       stall was evicted before its next read (3 of 128 at 4 MiB on a 32 GiB
       device: each of its reads then failed for good). Each failing group says
       so: at worst a chunk moves twice. */
    if (late(rc))
        lmca__hit_found(h, g->key, m);
    return rc;
}

int
lmca_get_end(lmca_t *h, const lmca_get_t *g)
{
    const lmca_meta_t *m = &g->meta;
    if (!m->has_crc32 || lmca__crc32(g->buf, m->tot_b) == m->crc32) {
        lmca__hit_found(h, g->key, m);
        return LMCA_OK;
    }
    LMCA__COUNT(h, crc_mismatch);
    LMCA__COUNT(h, corrupt);
    char mkey[LMCA__RECKEY_SIZE], digest[41];
    lmca__meta_key(mkey, g->key);
    lmca__log(&h->cfg, LMCA_LOG_WARNING, "chunk of meta record %s fails its CRC; read as a miss",
              lmca__wire_digest_hex(h->wire, mkey, digest));
    return LMCA_MISS;
}

int
lmca_get(lmca_t *h, const char *key, void *buf, size_t cap, size_t *len, lmca_meta_t *meta,
         lmca_err_t *err)
{
    lmca_get_t g = {.key = key, .buf = buf, .cap = cap};
    int rc;

    *len = 0;
    rc = lmca_get_begin(h, &g, err);
    if (rc == LMCA_OK && g.meta.tot_b > cap) {
        *len = g.meta.tot_b;
        rc = lmca__fail(err, LMCA_EINVAL, 0,
                        "get \"%s\": buffer of %zu bytes is smaller than the stored %llu", key,
                        cap, (unsigned long long)g.meta.tot_b);
    }
    if (rc == LMCA_OK && g.meta.nseg > 1)
        rc = lmca_get_segments(h, &g, 0, g.meta.nseg, err);
    if (rc == LMCA_OK)
        rc = lmca_get_end(h, &g);
    if (rc == LMCA_OK) {
        *len = g.meta.tot_b;
        lmca_touch_hits(h, NULL); /* a blocking get moves its hit before it returns */
    }
    if (meta)
        *meta = g.meta; /* no md: want_md was false */
    return rc;
}

/* ---------------------------------------------------------------------------
 * Inspecting a chunk for an operator: every segment judged, none counted (the
 * caller gets the verdicts), and the payload's CRC over them in order.
 */

static int
inspect_judge(const seg_reading *s, const char *skey, uint32_t index, const lmca__seg_reader *r,
              const lmca__read *rd)
{
    lmca_inspect_t *in = s->udata;
    char why[160];
    bool crc_failed;
    int state = lmca__segment_judge(s->m, index, r, rd, why, sizeof why, &crc_failed);

    (void)skey;
    if (state < 0)
        return state; /* a transport error ends the inspection */
    in->segs[index] = (uint8_t)state;
    return LMCA_OK;
}

/* Judges every segment of in->meta through one scratch buffer of a batch's
   bytes, and carries the payload's CRC across batches while all are OK. */
static int
inspect_segments(lmca_t *h, const char *key, lmca_inspect_t *in, lmca_err_t *err)
{
    const lmca_meta_t *m = &in->meta;
    seg_reading s = {.h = h, .key = key, .m = m, .judge = inspect_judge, .udata = in};
    uint32_t step = lmca__batch_rows(h, m->seg_b), crc = lmca__crc32(NULL, 0);
    uint8_t *scratch;
    bool whole = true;
    int rc = LMCA_OK;

    step = step < m->nseg ? step : m->nseg;
    in->segs = lmca__calloc(m->nseg, 1);
    /* seg_b <= 8 MiB, and a batch of several holds at most 32 MiB (batch_rows). */
    scratch = lmca__malloc((size_t)step * m->seg_b);
    if (in->segs == NULL || scratch == NULL) {
        free(scratch);
        return lmca__fail(err, LMCA_ENOMEM, 0, "inspect \"%s\": out of memory for %u segments",
                          key, m->nseg);
    }
    for (uint32_t i = 0; rc == LMCA_OK && i < m->nseg; i += step) {
        uint32_t n = m->nseg - i < step ? m->nseg - i : step;
        rc = read_group(&s, i, n, scratch, err);
        for (uint32_t k = 0; k < n; k++)
            whole &= in->segs[i + k] == LMCA_SEG_OK;
        if (rc == LMCA_OK && whole && m->has_crc32)
            crc = lmca__crc32_more(crc, scratch,
                                   (uint64_t)(n - 1) * m->seg_b + lmca_segment_len(m, i + n - 1));
    }
    free(scratch);
    if (!m->has_crc32)
        in->crc = LMCA_CRC_ABSENT;
    else if (!whole)
        in->crc = LMCA_CRC_UNCHECKED;
    else
        in->crc = crc == m->crc32 ? LMCA_CRC_OK : LMCA_CRC_MISMATCH;
    return rc;
}

int
lmca_inspect(lmca_t *h, const char *key, lmca_inspect_t *out, lmca_err_t *err)
{
    lmca_get_t g = {.key = key, .want_md = true, .hold = true};
    int rc;

    if (out == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "inspect: NULL result");
    memset(out, 0, sizeof *out);
    /* The meta record as a get reads it: validated, a corrupt one counted. */
    if ((rc = lmca_get_begin(h, &g, err)) != LMCA_OK)
        return rc;
    out->meta = g.meta; /* its md is out's now */
    if (g.meta.nseg == 1) {
        if (g.meta.has_crc32)
            out->crc = lmca__crc32(g.held, g.meta.tot_b) == g.meta.crc32 ? LMCA_CRC_OK
                                                                         : LMCA_CRC_MISMATCH;
        free(g.held);
        return LMCA_OK;
    }
    if ((rc = inspect_segments(h, key, out, err)) != LMCA_OK)
        lmca_inspect_clear(out);
    return rc;
}

void
lmca_inspect_clear(lmca_inspect_t *in)
{
    if (in == NULL)
        return;
    lmca_meta_clear(&in->meta);
    free(in->segs);
    in->segs = NULL;
}
