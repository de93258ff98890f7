/*
 * scan.c - visiting the records of the set without reading payloads.
 */
#include <stdlib.h>
#include <string.h>

#include "schema.h"

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
        lmca__meta_reader r;
        lmca__meta_begin(&r, st->meta);
        for (unsigned i = 0; i < s->nbins; i++)
            lmca__meta_bin(&r, &s->bins[i]);
        if (!r.has_state)
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
    scan_state st = {cb, udata, NULL};
    int rc;

    if (cb == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_scan: NULL callback");
    if (mode == LMCA_SCAN_META && (st.meta = malloc(sizeof *st.meta)) == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory");
    rc = lmca__wire_scan(h->wire, mode == LMCA_SCAN_META ? lmca__meta_names : NULL, scan_record,
                         &st, err);
    free(st.meta);
    return rc;
}
