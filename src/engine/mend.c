/*
 * mend.c - a namespace whose NSUP stopped evicting is mended, not left full.
 *
 * NSUP evicts the lowest seconds of void time whose records add up to at most
 * its per-cycle target, and evicts nothing at all when the lowest second alone
 * holds more ("no records below eviction void-time ... count > target"): the
 * namespace then stays full, every store is refused, until that second's records
 * expire, a TTL later (as/src/base/nsup.c, find_evict_void_time). The shared
 * clock never gives a second more than half a target, but a second can still
 * overfill: a writer with shared_clock off or of an older version, the server's
 * read-touch of a burst of hits, a namespace shrunk under its records.
 *
 * Seen: the namespace is past evict-used-pct (hwm_breached) at every look for
 * 8 to 16 s (LMCA__STALL_MS and up to as much again, drawn per handle) while
 * evicted_objects does not move; NSUP tries every nsup-period, so that is
 * several cycles refused in a row. Mended: the handle whose wait ends first scans
 * the set's records without their bins, looks once more (another handle may have
 * mended it meanwhile), and removes those of the lowest seconds of void time,
 * the lowest second whole and then as many as NSUP's target: the eviction NSUP
 * refused, done by hand, after which NSUP goes on by itself and the other
 * handles see it move. No lease: a full namespace refuses every write, and
 * removals are what it still takes. Counted (mends, mended_records) and logged
 * at WARNING once per mend, with what to change.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

/* Records a mend looks at, at most (24 bytes each). */
#define MEND_MAX_RECORDS (4u << 20)

typedef struct {
    uint8_t digest[20];
    uint32_t ttl;
} seen_rec;

typedef struct {
    seen_rec *recs;
    size_t n, cap;
} seen_list;

static bool
collect(void *udata, const lmca__scanned *rec)
{
    seen_list *l = udata;
    if (rec->ttl == UINT32_MAX) /* never expires: NSUP does not count it */
        return true;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4096;
        seen_rec *more = cap <= MEND_MAX_RECORDS ? lmca__malloc(cap * sizeof *more) : NULL;
        if (more == NULL) { /* the lowest of a part are not the lowest: mend nothing */
            l->n = 0;
            return false;
        }
        if (l->n > 0)
            memcpy(more, l->recs, l->n * sizeof *more);
        free(l->recs);
        l->recs = more, l->cap = cap;
    }
    memcpy(l->recs[l->n].digest, rec->digest, 20);
    l->recs[l->n++].ttl = rec->ttl;
    return true;
}

static int
by_ttl(const void *a, const void *b)
{
    uint32_t x = ((const seen_rec *)a)->ttl, y = ((const seen_rec *)b)->ttl;
    return x < y ? -1 : x > y;
}

/* Still stalled: a look now finds the namespace past evict-used-pct with
   evicted_objects where the watch left it (another handle mended it first, or
   NSUP went on: nothing to do). */
static bool
still_stalled(lmca_t *h)
{
    char req[64], *answer = NULL;
    lmca_server_info_t srv;
    bool stalled = false;

    snprintf(req, sizeof req, "namespace/%s", h->cfg.namespace_);
    if (lmca__wire_info(h->wire, req, &answer, NULL) == LMCA_OK &&
        lmca_server_info_parse(answer, &srv, NULL) == LMCA_OK)
        stalled = srv.hwm_breached && srv.evicted_objects >= 0 &&
                  (uint64_t)srv.evicted_objects == h->cache.evicted_seen;
    free(answer);
    return stalled;
}

/* Removes the records of the lowest seconds: the lowest whole, then up to
   `target`. Returns how many were removed. */
static uint64_t
remove_lowest(lmca_t *h, uint64_t target)
{
    seen_list l = {0};
    uint64_t removed = 0;

    /* Only a whole scan says which records are the lowest. */
    if (lmca__wire_scan(h->wire, NULL, collect, &l, NULL) != LMCA_OK || !still_stalled(h))
        l.n = 0;
    qsort(l.recs, l.n, sizeof *l.recs, by_ttl);
    for (size_t i = 0; i < l.n; i++) {
        if (i > 0 && l.recs[i].ttl != l.recs[0].ttl && i >= target)
            break;
        removed += lmca__wire_remove_digest(h->wire, l.recs[i].digest, NULL) == LMCA_OK;
    }
    free(l.recs);
    return removed;
}

void
lmca__mend_watch(lmca_t *h, const lmca_server_info_t *srv, uint64_t now_ms)
{
    lmca__cache *c = &h->cache;
    uint64_t removed;

    if (!srv->hwm_breached || srv->evicted_objects < 0 ||
        (uint64_t)srv->evicted_objects != c->evicted_seen) {
        c->evicted_seen = (uint64_t)(srv->evicted_objects > 0 ? srv->evicted_objects : 0);
        c->stalled_since_ms = srv->hwm_breached ? now_ms : 0;
        return;
    }
    if (c->stalled_since_ms == 0) /* the first look past evict-used-pct */
        c->stalled_since_ms = now_ms;
    if (now_ms < c->stalled_since_ms + c->stall_ms)
        return;
    removed = remove_lowest(h, atomic_load_explicit(&c->target, memory_order_relaxed));
    c->stalled_since_ms = now_ms; /* NSUP's turn again: judged anew from here */
    if (removed == 0)
        return;
    LMCA__COUNT(h, mends);
    atomic_fetch_add_explicit(&h->counters.mended_records, removed, memory_order_relaxed);
    lmca__log(&h->cfg, LMCA_LOG_WARNING,
              "namespace '%s' evicted nothing for %u s past evict-used-pct: the lowest second "
              "of void time held more than NSUP's target of %llu records; removed %llu records "
              "of the lowest seconds of set '%s'. If this repeats, a writer places records "
              "off the shared clock (shared_clock=false, or an older lmcache-aerospike)",
              h->cfg.namespace_, (unsigned)(c->stall_ms / 1000),
              (unsigned long long)atomic_load_explicit(&c->target, memory_order_relaxed),
              (unsigned long long)removed, h->cfg.set);
}
