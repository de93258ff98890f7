/*
 * scan.c - visiting the records of the set without reading payloads, and the
 * orphan sweep that pairs segments with meta records by write id.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

typedef struct {
    lmca_t *h;
    lmca_scan_mode mode;
    lmca_scan_cb cb;
    void *udata;
} scan_state;

/* Kind of a record from its stored key: "...|m" or "...|s|<i>". */
static lmca_rec_kind
kind_of_key(const char *key)
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
has_bin(const lmca__scanned *s, const char *name)
{
    for (unsigned i = 0; i < s->nbins; i++)
        if (strcmp(s->bins[i].name, name) == 0)
            return true;
    return false;
}

/* Judges a scanned record by its bins: a meta record (it has a state bin),
   decoded into `meta`; a segment (only wid and crc32, valid); or UNKNOWN. */
static lmca_rec_kind
judge(const lmca__scanned *s, lmca_meta_t *meta, uint64_t *wid)
{
    *wid = 0;
    if (has_bin(s, "state")) {
        lmca__meta_reader r;
        lmca__meta_begin(&r, meta, 0);
        for (unsigned i = 0; i < s->nbins; i++)
            lmca__meta_bin(&r, &s->bins[i]);
        meta->ttl = s->ttl;
        if (lmca__meta_verdict(&r, NULL) != LMCA_OK)
            return LMCA_REC_UNKNOWN;
        *wid = meta->wid;
        return LMCA_REC_META;
    }
    lmca__seg_reader r = {0};
    for (unsigned i = 0; i < s->nbins; i++)
        lmca__segment_bin(&r, &s->bins[i]);
    if (r.why[0] != '\0' || !(r.seen & 1u) || r.wid == 0) /* seen bit 0: wid */
        return LMCA_REC_UNKNOWN;
    *wid = r.wid;
    return LMCA_REC_SEGMENT;
}

static bool
scan_record(void *udata, const lmca__scanned *s)
{
    scan_state *st = udata;
    lmca_meta_t meta;
    lmca_scan_rec_t rec = {.key = s->key, .ttl = s->ttl};

    memcpy(rec.digest, s->digest, sizeof rec.digest);
    if (st->mode == LMCA_SCAN_ALL) {
        rec.kind = kind_of_key(s->key);
        return st->cb(st->udata, &rec);
    }
    rec.kind = judge(s, &meta, &rec.wid);
    rec.meta = rec.kind == LMCA_REC_META ? &meta : NULL;
    if (st->mode == LMCA_SCAN_META && rec.kind != LMCA_REC_META)
        return true;
    return st->cb(st->udata, &rec);
}

int
lmca_scan(lmca_t *h, lmca_scan_mode mode, lmca_scan_cb cb, void *udata, lmca_err_t *err)
{
    scan_state st = {h, mode, cb, udata};

    if (cb == NULL || (unsigned)mode > LMCA_SCAN_ALL)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_scan: %s",
                          cb ? "unknown mode" : "NULL callback");
    return lmca__wire_scan(h->wire, mode == LMCA_SCAN_ALL ? NULL : lmca__small_names, false,
                           scan_record, &st, err);
}

/* ---------------------------------------------------------------------------
 * The sweep: every record with its write id, then sorted so that a meta record
 * and its segments sit together.
 */

typedef struct {
    uint64_t wid;
    uint8_t digest[20];
    uint8_t kind;  /* lmca_rec_kind */
    uint32_t ttl;
    uint32_t nseg; /* META only */
} swept;

typedef struct {
    pthread_mutex_t lock; /* the client may scan nodes on several threads */
    swept *recs;
    size_t n, cap;
    bool nomem;
} sweep_state;

static bool
sweep_record(void *udata, const lmca_scan_rec_t *rec)
{
    sweep_state *st = udata;
    bool ok = true;

    pthread_mutex_lock(&st->lock);
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 1024;
        swept *grown = cap > SIZE_MAX / sizeof *grown ? NULL : realloc(st->recs, cap * sizeof *grown);
        if (grown == NULL)
            ok = false, st->nomem = true;
        else
            st->recs = grown, st->cap = cap;
    }
    if (ok) {
        swept *s = &st->recs[st->n++];
        *s = (swept){.wid = rec->wid, .kind = (uint8_t)rec->kind, .ttl = rec->ttl,
                     .nseg = rec->meta ? rec->meta->nseg : 0};
        memcpy(s->digest, rec->digest, sizeof s->digest);
    }
    pthread_mutex_unlock(&st->lock);
    return ok;
}

/* By write id, the meta record first within one id. */
static int
by_wid(const void *a, const void *b)
{
    const swept *x = a, *y = b;
    if (x->wid != y->wid)
        return x->wid < y->wid ? -1 : 1;
    return (x->kind != LMCA_REC_META) - (y->kind != LMCA_REC_META);
}

static bool
report(lmca_sweep_cb cb, void *udata, const swept *s, lmca_sweep_reason why, uint32_t found)
{
    lmca_sweep_rec_t rec = {.reason = why, .kind = (lmca_rec_kind)s->kind, .wid = s->wid,
                            .ttl = s->ttl, .nseg = s->nseg, .found = found};
    memcpy(rec.digest, s->digest, sizeof rec.digest);
    return cb(udata, &rec);
}

/* Walks one write id's group [a, b): a meta record and its segments. */
static bool
judge_group(const swept *a, const swept *b, lmca_sweep_cb cb, void *udata)
{
    bool has_meta = a->kind == LMCA_REC_META;
    uint32_t segs = (uint32_t)(b - a) - has_meta;

    if (has_meta && a->nseg > 1 && segs < a->nseg && !report(cb, udata, a, LMCA_SWEEP_BROKEN_META, segs))
        return false;
    for (const swept *s = a + has_meta; s < b; s++) {
        /* A second meta record with the same id cannot come from this engine. */
        lmca_sweep_reason why = s->kind == LMCA_REC_META ? LMCA_SWEEP_CORRUPT
                                : has_meta && a->nseg > 1 ? 0
                                                          : LMCA_SWEEP_ORPHAN_SEGMENT;
        if (why && !report(cb, udata, s, why, 0))
            return false;
    }
    return true;
}

static void
classify(const sweep_state *st, lmca_sweep_cb cb, void *udata)
{
    size_t i = 0;
    while (i < st->n) {
        const swept *a = &st->recs[i];
        size_t j = i + 1;
        if (a->kind == LMCA_REC_UNKNOWN) { /* no usable id: judged alone */
            if (!report(cb, udata, a, LMCA_SWEEP_CORRUPT, 0))
                return;
            i++;
            continue;
        }
        while (j < st->n && st->recs[j].wid == a->wid && st->recs[j].kind != LMCA_REC_UNKNOWN)
            j++;
        if (!judge_group(a, &st->recs[j], cb, udata))
            return;
        i = j;
    }
}

int
lmca_sweep(lmca_t *h, lmca_sweep_cb cb, void *udata, lmca_err_t *err)
{
    sweep_state st = {.recs = NULL};
    int rc;

    if (cb == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_sweep: NULL callback");
    pthread_mutex_init(&st.lock, NULL);
    rc = lmca_scan(h, LMCA_SCAN_RECORDS, sweep_record, &st, err);
    if (st.nomem) /* the scan stopped for it, whatever the client made of that */
        rc = lmca__fail(err, LMCA_ENOMEM, 0, "sweep: out of memory after %zu records", st.n);
    if (rc == LMCA_OK && st.n > 0) { /* an empty set has no array to sort (NULL) */
        qsort(st.recs, st.n, sizeof *st.recs, by_wid);
        classify(&st, cb, udata);
    }
    pthread_mutex_destroy(&st.lock);
    free(st.recs);
    return rc;
}
