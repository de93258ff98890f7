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
 * Seen: a node is past evict-used-pct (hwm_breached) at every look for 8 to
 * 16 s (LMCA__STALL_MS and up to as much again, drawn per handle) while its
 * evicted_objects does not move. Each node is watched by name: NSUP runs per
 * node, and a look that went to another node than the last is no movement.
 *
 * Mended, off the put path (a pool's worker; a put only without a pool):
 * - One handle of all at a time: a lease record in the clock's set, held until
 *   LEASE_MS of the servers' time. A namespace at stop-writes refuses the
 *   lease's write, but still takes a delete: there the lease is taken by
 *   deleting the expired record, checked by generation (one of all succeeds),
 *   and written back once there is room. Each handle's first look writes the
 *   record, free, if it is missing, so that a namespace full for the first
 *   time has one to delete. A lease record missing for ABANDONED_MS (its
 *   taker died before writing it back) counts as free.
 * - Looked at once more: still stalled (another handle may have mended it).
 * - The namespace is scanned without bins but the chunks' write ids (every set:
 *   NSUP's histogram holds them all), keeping only the MEND_MAX_RECORDS lowest
 *   records by void time (a bounded heap: memory does not grow with the
 *   namespace). The lowest second is removed whole, and each next one that
 *   holds more than NSUP's target too: the eviction NSUP refused, done by hand,
 *   after which it goes on by itself.
 * - Whole chunks only: a chunk's records share its write id, and a chunk whose
 *   records were not all seen (the heap's edge) is left. Each record is removed
 *   only if its generation is the one the scan saw: a chunk touched, pinned or
 *   written again meanwhile stays.
 * Counted (mends, mended_records) and logged at WARNING once per mend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

#define LEASE_KEY "mend-lease"
#define LEASE_BIN "until_ms"
/* How long a mend may take, on the servers' time; others wait that long. */
#define LEASE_MS 60000
#define ABANDONED_MS (2 * LEASE_MS)
/* Records a mend keeps in memory, at most (40 bytes each: 40 MiB). */
#define MEND_MAX_RECORDS (1u << 20)
/* Sets a mend tells apart; records of more sets are left to NSUP. */
#define SETS_MAX 64

/* ---------------------------------------------------------------------------
 * The watch: a node stalled.
 */

static lmca__node_watch *
node_of(lmca__cache *c, const char *name)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            return &c->nodes[i];
    if (c->nnodes == LMCA__NODES_MAX)
        return NULL;
    lmca__node_watch *w = &c->nodes[c->nnodes++];
    snprintf(w->name, sizeof w->name, "%s", name);
    w->evicted_seen = 0;
    w->stalled_since_ms = 0;
    return w;
}

/* This node stalled for the handle's stall_ms: nothing evicted past
   evict-used-pct since the first such look. */
static bool
stalled(lmca__cache *c, lmca__node_watch *w, const lmca_server_info_t *srv, uint64_t now_ms)
{
    uint64_t evicted = srv->evicted_objects > 0 ? (uint64_t)srv->evicted_objects : 0;

    if (!srv->hwm_breached || srv->evicted_objects < 0 || evicted != w->evicted_seen) {
        w->evicted_seen = evicted;
        w->stalled_since_ms = srv->hwm_breached ? now_ms : 0;
        return false;
    }
    if (w->stalled_since_ms == 0)
        w->stalled_since_ms = now_ms;
    return now_ms >= w->stalled_since_ms + c->stall_ms;
}

/* Writes the lease record, free, while the namespace takes writes: at
   stop-writes only a delete takes the lease, and a record never written was
   waited out for ABANDONED_MS (a new namespace's first stall waited 2 minutes). */
static void
write_free_lease(lmca_t *h, const lmca_server_info_t *srv, size_t n)
{
    int rc;

    for (size_t i = 0; i < n; i++)
        if (srv[i].stop_writes)
            return;
    rc = lmca__wire_int_put(h->wire, LMCA__CLOCK_SET, LEASE_KEY, LEASE_BIN, 0, 0, NULL);
    /* EUNKNOWN: it exists already (the write only creates). */
    h->cache.lease_written = rc == LMCA_OK || rc == LMCA_EUNKNOWN;
}

void
lmca__mend_watch(lmca_t *h, const lmca_server_info_t *srv,
                 const char (*names)[LMCA__NODE_NAME], size_t n, uint64_t now_ms)
{
    lmca__cache *c = &h->cache;
    bool due = false;

    if (!c->lease_written)
        write_free_lease(h, srv, n);
    for (size_t i = 0; i < n; i++) {
        lmca__node_watch *w = node_of(c, names[i]);
        if (w != NULL && stalled(c, w, &srv[i], now_ms)) {
            due = true;
            w->stalled_since_ms = now_ms; /* NSUP's turn again after this mend */
        }
    }
    if (due)
        atomic_store(&c->mend_due, true);
}

/* ---------------------------------------------------------------------------
 * The lease: one mending handle of all.
 */

typedef enum { HELD_NOT, HELD_WRITTEN, HELD_DELETED, HELD_ABANDONED } held;

static held
take_lease(lmca_t *h)
{
    int64_t until = 0, now = (int64_t)(lmca__server_now_us(h) / 1000u);
    uint16_t gen = 0;
    int rc = lmca__wire_int_get(h->wire, LMCA__CLOCK_SET, LEASE_KEY, LEASE_BIN, &until, &gen,
                                NULL);

    if (rc == LMCA_MISS && gen == 0) { /* no record: a delete holds it, or nobody yet */
        rc = lmca__wire_int_put(h->wire, LMCA__CLOCK_SET, LEASE_KEY, LEASE_BIN, now + LEASE_MS,
                                0, NULL);
        if (rc == LMCA_OK)
            return HELD_WRITTEN;
        uint64_t mono = lmca__mono_ms();
        if (rc != LMCA_EFULL)
            return HELD_NOT;
        if (h->cache.lease_absent_ms == 0)
            h->cache.lease_absent_ms = mono;
        return mono >= h->cache.lease_absent_ms + ABANDONED_MS ? HELD_ABANDONED : HELD_NOT;
    }
    h->cache.lease_absent_ms = 0;
    if ((rc != LMCA_OK && rc != LMCA_MISS) || until > now) /* unreadable, or held */
        return HELD_NOT;
    rc = lmca__wire_int_put(h->wire, LMCA__CLOCK_SET, LEASE_KEY, LEASE_BIN, now + LEASE_MS, gen,
                            NULL);
    if (rc == LMCA_OK)
        return HELD_WRITTEN;
    if (rc == LMCA_EFULL && lmca__wire_int_remove(h->wire, LMCA__CLOCK_SET, LEASE_KEY, gen,
                                                  NULL) == LMCA_OK)
        return HELD_DELETED;
    return HELD_NOT;
}

/* Gives the lease back: free from now (written as expired), or, taken by a
   delete, written back once the namespace takes writes (retried by later
   looks: lease_to_restore). */
static void
give_lease(lmca_t *h, held how)
{
    int64_t v;
    uint16_t gen = 0;

    if (how == HELD_DELETED || how == HELD_ABANDONED || atomic_load(&h->cache.lease_to_restore)) {
        int rc = lmca__wire_int_put(h->wire, LMCA__CLOCK_SET, LEASE_KEY, LEASE_BIN, 0, 0, NULL);
        /* EUNKNOWN: it exists again (another handle wrote it back). */
        atomic_store(&h->cache.lease_to_restore, rc != LMCA_OK && rc != LMCA_EUNKNOWN);
        if (rc == LMCA_OK)
            h->cache.lease_absent_ms = 0;
    } else if (how == HELD_WRITTEN &&
               lmca__wire_int_get(h->wire, LMCA__CLOCK_SET, LEASE_KEY, LEASE_BIN, &v, &gen,
                                  NULL) == LMCA_OK) {
        lmca__wire_int_put(h->wire, LMCA__CLOCK_SET, LEASE_KEY, LEASE_BIN, 0, gen, NULL);
    }
}

/* ---------------------------------------------------------------------------
 * The scan: the lowest records, in a bounded heap.
 */

typedef struct {
    uint8_t digest[20];
    uint32_t ttl;
    uint64_t wid;  /* the chunk's write id; 0: a record not of a chunk */
    uint16_t gen;
    uint16_t nseg; /* a meta record's segments (1: one record); 0: a segment */
    uint8_t set;   /* index into the sets seen */
} seen_rec;

typedef struct {
    seen_rec *recs; /* a max-heap by (ttl, wid) while scanning */
    size_t n, cap;
    bool overflow;  /* records were left out: the heap is the lowest part only */
    char sets[SETS_MAX][64];
    size_t nsets;
} lowest;

static bool
above(const seen_rec *a, const seen_rec *b)
{
    return a->ttl != b->ttl ? a->ttl > b->ttl : a->wid > b->wid;
}

static void
sift_down(lowest *l, size_t i)
{
    for (;;) {
        size_t k = i, a = 2 * i + 1, b = a + 1;
        if (a < l->n && above(&l->recs[a], &l->recs[k]))
            k = a;
        if (b < l->n && above(&l->recs[b], &l->recs[k]))
            k = b;
        if (k == i)
            return;
        seen_rec t = l->recs[i];
        l->recs[i] = l->recs[k], l->recs[k] = t;
        i = k;
    }
}

static void
sift_up(lowest *l, size_t i)
{
    while (i > 0 && above(&l->recs[i], &l->recs[(i - 1) / 2])) {
        seen_rec t = l->recs[i];
        l->recs[i] = l->recs[(i - 1) / 2], l->recs[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static int
set_index(lowest *l, const char *set)
{
    for (size_t i = 0; i < l->nsets; i++)
        if (strcmp(l->sets[i], set) == 0)
            return (int)i;
    if (l->nsets == SETS_MAX || strlen(set) >= sizeof l->sets[0])
        return -1;
    strcpy(l->sets[l->nsets], set);
    return (int)l->nsets++;
}

/* The chunk bins a scanned record holds: its write id, and a meta record's
   segments. Untrusted: anything else reads as a record of no chunk. */
static void
chunk_of(const lmca__scanned *rec, seen_rec *r)
{
    bool meta = false;
    for (unsigned i = 0; i < rec->nbins; i++) {
        const lmca__bin *b = &rec->bins[i];
        if (b->type != LMCA__INT)
            continue;
        if (strcmp(b->name, "wid") == 0)
            r->wid = (uint64_t)b->i;
        else if (strcmp(b->name, "nseg") == 0 && b->i >= 1 && b->i <= LMCA_MAX_SEGMENTS)
            meta = true, r->nseg = (uint16_t)b->i;
    }
    if (!meta)
        r->nseg = 0;
}

static bool
collect(void *udata, const lmca__scanned *rec)
{
    lowest *l = udata;
    seen_rec r = {.ttl = rec->ttl, .gen = rec->gen};
    int set;

    if (rec->ttl == UINT32_MAX) /* never expires: NSUP does not count it */
        return true;
    if ((set = set_index(l, rec->set ? rec->set : "")) < 0)
        return true;
    r.set = (uint8_t)set;
    memcpy(r.digest, rec->digest, 20);
    chunk_of(rec, &r);
    if (l->n < l->cap) {
        l->recs[l->n++] = r;
        sift_up(l, l->n - 1);
    } else if (above(&l->recs[0], &r)) {
        l->recs[0] = r;
        sift_down(l, 0);
        l->overflow = true;
    } else {
        l->overflow = true;
    }
    return true;
}

/* By chunk: the chunk's lowest second, then its write id; a record of no chunk
   (wid 0) alone. Set while grouping. */
typedef struct {
    seen_rec rec;
    uint32_t group_ttl;
} grouped;

static int
by_group(const void *a, const void *b)
{
    const grouped *x = a, *y = b;
    if (x->group_ttl != y->group_ttl)
        return x->group_ttl < y->group_ttl ? -1 : 1;
    if (x->rec.wid != y->rec.wid)
        return x->rec.wid < y->rec.wid ? -1 : 1;
    return memcmp(x->rec.digest, y->rec.digest, 20);
}

static int
by_wid(const void *a, const void *b)
{
    const grouped *x = a, *y = b;
    return x->rec.wid < y->rec.wid ? -1 : x->rec.wid > y->rec.wid;
}

/* Orders the records chunk by chunk, lowest first: each chunk's records
   together at its lowest second. */
static grouped *
group(lowest *l)
{
    grouped *g = lmca__malloc(lmca__size(l->n, sizeof *g, 0));
    if (g == NULL)
        return NULL;
    for (size_t i = 0; i < l->n; i++)
        g[i] = (grouped){l->recs[i], l->recs[i].ttl};
    qsort(g, l->n, sizeof *g, by_wid);
    for (size_t i = 0, j; i < l->n; i = j) {
        uint32_t low = g[i].rec.ttl;
        for (j = i; j < l->n && g[j].rec.wid == g[i].rec.wid && g[i].rec.wid != 0; j++)
            low = g[j].rec.ttl < low ? g[j].rec.ttl : low;
        j = j == i ? i + 1 : j;
        for (size_t k = i; k < j; k++)
            g[k].group_ttl = low;
    }
    qsort(g, l->n, sizeof *g, by_group);
    return g;
}

/* Whether the chunk g[i, j) was seen whole: its meta record and as many
   segments as it names. When the scan saw every record (no overflow), a chunk
   without its meta record is debris, removed too. */
static bool
whole(const grouped *g, size_t i, size_t j, bool overflow)
{
    uint32_t nseg = 0, segments = 0;

    if (g[i].rec.wid == 0)
        return true;
    for (size_t k = i; k < j; k++) {
        if (g[k].rec.nseg > 0)
            nseg = g[k].rec.nseg;
        else
            segments++;
    }
    if (nseg == 0)
        return !overflow;
    return j - i == (nseg > 1 ? nseg + 1u : 1u) && segments == (nseg > 1 ? nseg : 0);
}

/* Where the seconds to remove end in g (ordered by chunk and second): the
   lowest, whose records NSUP refused, and each next one that holds more than
   NSUP's target too, or NSUP would refuse that one next (a burst that crossed
   a second: 34 records, then 44 over a target of 38, took two mends). */
static size_t
seconds_to_remove(const grouped *g, size_t n, uint64_t target)
{
    size_t end = 0;

    while (end < n) {
        size_t next = end;
        while (next < n && g[next].group_ttl == g[end].group_ttl)
            next++;
        if (end > 0 && next - end <= target)
            break;
        end = next;
    }
    return end;
}

/* Removes the records of the seconds seconds_to_remove() names, whole chunks,
   segments before their meta record (a chunk cut short keeps its meta record: a
   miss). Returns how many records were removed. */
static uint64_t
remove_lowest(lmca_t *h, lowest *l, uint64_t target)
{
    grouped *g = l->n ? group(l) : NULL;
    size_t end = g ? seconds_to_remove(g, l->n, target) : 0;
    uint64_t removed = 0;

    for (size_t i = 0, j; i < end; i = j) {
        for (j = i + 1; j < end && g[j].rec.wid == g[i].rec.wid && g[i].rec.wid != 0; j++)
            ;
        if (!whole(g, i, j, l->overflow))
            continue;
        for (size_t pass = 0; pass < 2; pass++)
            for (size_t k = i; k < j; k++)
                if ((g[k].rec.nseg == 0) == (pass == 0))
                    removed += lmca__wire_remove_digest(h->wire, l->sets[g[k].rec.set],
                                                        g[k].rec.digest, g[k].rec.gen,
                                                        NULL) == LMCA_OK;
    }
    free(g);
    return removed;
}

/* ---------------------------------------------------------------------------
 * The mend.
 */

/* A node is still stalled: past evict-used-pct with evicted_objects where the
   watch left it. */
typedef struct {
    lmca__cache *c;
    bool stalled;
} recheck;

static bool
recheck_node(void *udata, const char *node, const char *address, char *answer)
{
    recheck *r = udata;
    lmca_server_info_t srv;
    (void)address;
    for (size_t i = 0; i < r->c->nnodes; i++)
        if (strcmp(r->c->nodes[i].name, node) == 0 &&
            lmca_server_info_parse(answer, &srv, NULL) == LMCA_OK && srv.hwm_breached &&
            srv.evicted_objects >= 0 && (uint64_t)srv.evicted_objects == r->c->nodes[i].evicted_seen)
            r->stalled = true;
    return !r->stalled;
}

static bool
still_stalled(lmca_t *h)
{
    char req[64];
    recheck r = {&h->cache, false};

    snprintf(req, sizeof req, "namespace/%s", h->cfg.namespace_);
    lmca__wire_info_each(h->wire, req, recheck_node, &r, NULL);
    return r.stalled;
}

static uint64_t
records_cap(uint64_t target)
{
    uint64_t cap = 2 * target;
    return cap < 65536 ? 65536 : cap > MEND_MAX_RECORDS ? MEND_MAX_RECORDS : cap;
}

static void
mend(lmca_t *h)
{
    static const char *const names[] = {"wid", "nseg", NULL};
    uint64_t target = atomic_load_explicit(&h->cache.target, memory_order_relaxed), removed = 0;
    lowest *l;
    held how;

    if (atomic_load(&h->cache.lease_to_restore))
        give_lease(h, HELD_NOT);
    if ((how = take_lease(h)) == HELD_NOT)
        return;
    if ((l = lmca__calloc(1, sizeof *l)) != NULL && still_stalled(h)) {
        l->cap = records_cap(target);
        l->recs = lmca__malloc(lmca__size(l->cap, sizeof *l->recs, 0));
        /* Only a whole scan says which records are the lowest. */
        if (l->recs != NULL &&
            lmca__wire_scan(h->wire, names, true, collect, l, NULL) == LMCA_OK)
            removed = remove_lowest(h, l, target);
        free(l->recs);
    }
    free(l);
    give_lease(h, how);
    if (removed == 0)
        return;
    LMCA__COUNT(h, mends);
    atomic_fetch_add_explicit(&h->counters.mended_records, removed, memory_order_relaxed);
    lmca__log(&h->cfg, LMCA_LOG_WARNING,
              "namespace '%s' evicted nothing for %u s past evict-used-pct: the lowest second "
              "of void time held more than NSUP's target of %llu records; removed %llu records "
              "of the lowest seconds, whole chunks. If this repeats, a writer places records "
              "off the shared clock (shared_clock=false, or an older lmcache-aerospike)",
              h->cfg.namespace_, (unsigned)(h->cache.stall_ms / 1000),
              (unsigned long long)target, (unsigned long long)removed);
}

void
lmca__mend_if_due(lmca_t *h)
{
    if (!atomic_load(&h->cache.mend_due) && !atomic_load(&h->cache.lease_to_restore))
        return;
    if (atomic_exchange(&h->cache.mending, true))
        return;
    if (atomic_exchange(&h->cache.mend_due, false))
        mend(h);
    else if (atomic_load(&h->cache.lease_to_restore))
        give_lease(h, HELD_NOT);
    atomic_store(&h->cache.mending, false);
}
