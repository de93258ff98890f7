/*
 * hits.c - a hit moves its chunk past the head of the eviction order.
 *
 * NSUP evicts the lowest void times first, so a chunk that was read must get a
 * void time after every chunk stored before the read. The server's read-touch
 * does not give that: it restarts a record's TTL at now + TTL, and the shared
 * clock (clock.c) leads now + TTL by seconds while writers are busy, so a chunk
 * read-touched then was placed behind everything stored in those seconds, about
 * a whole 1 GiB cache at 160 MB/s (DESIGN.md, "A hit moves the chunk past the
 * head"). So a get that found a chunk queues it here, and the queued chunks are
 * touched together at new places on the clock: one reservation, then one batch
 * call for their segments and one for their meta records (segments first, so
 * a touch cut short leaves no meta record due after its segments).
 *
 * Ahead of the head. A chunk moved to the very head outlives only what was
 * stored before its read, as in an exact LRU; but NSUP cuts evict-tenths-pct
 * of the records at a time (30 % in the cache recipe) and goes on cutting after
 * a node is lost, so a namespace holds 70-100 % of its capacity, and a warm
 * chunk read every half capacity was cut at the bottom of that swing (a
 * three-node cluster with a node killed kept 44 of 48; docs/measurements-cache.md).
 * So a move is placed hit_lead_us() ahead of the head: a read chunk outlives
 * the stores of a quarter of the namespace besides. The seconds there get the
 * moves' records as well as their own stores: the moves took their places at
 * the head (at most per_second a second), and per_second is half of NSUP's
 * target (plan.c, TARGET_SHARE), so a second still holds no more than the
 * target.
 *
 * Off the get path. The pool's workers touch the queue when a worker would go
 * idle, and when it is due while they are busy (HITS_BATCH chunks, or the
 * oldest waited HITS_DUE_MS). A blocking lmca_get, whose caller has no worker
 * to leave it to, touches its hit (and any queued) before it returns, and
 * lmca_close touches what is left.
 *
 * Fresh hits. A chunk due three quarters of the lead past the head or more
 * (less a second: NSUP evicts whole seconds) was moved lately, and touching it
 * again would rewrite it for little: it is skipped (hits_fresh). One nearer is
 * moved, so a read chunk always has three quarters of a lead to outlive NSUP's
 * cuts: skipped while within the newest sixteenth of the records, a chunk read
 * again as the head passed it was cut before its next read when a lost node
 * left the cluster two thirds of its capacity (a warm chunk of 12 lost in 4 of
 * 7 kills with a restart mid-fill; skipped within a second of the head, in 1 of
 * 5); skipped while half a lead ahead, one of 192 was cut in 1 of 4 pauses of
 * the SSD recipe's node. So is a pinned chunk, which never expires.
 *
 * A touch is a hint, but a warm chunk left where it was is evicted: a refusal
 * that passes (a node lost or paused, a busy key or device, stop-writes) is
 * counted (touches_failed) and the chunk goes again a second later, for
 * HITS_RETRY_MS at most, off the get path and behind no store; any other is
 * counted and dropped. A chunk with a segment not moved keeps its meta record
 * where it was. One of a record that is gone (evicted, overwritten by another
 * plan) is a no-op.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "schema.h"

#define HITS_BATCH 64
/* A move refused in passing is tried again for this long: the cluster takes a
   few seconds to re-form without a lost node (a heartbeat timeout, then the
   client's next map), and stop-writes is decided every 10 s. */
#define HITS_RETRY_MS 10000
#define HITS_RETRY_GAP_MS 1000
/* Rows refused for load go again at once, for this long (touch_rows). */
#define BUSY_RETRY_MS 500
#define HITS_DUE_MS 20
/* Fresh: due FRESH_QUARTERS quarters of the lead past the head, less FRESH_US
   (NSUP evicts whole seconds). */
#define FRESH_QUARTERS 3
#define FRESH_US 1000000u
/* ... and with the touch budget spent, 1 / SPENT_BEHIND_SHARE of the
   namespace's span (NSUP's last cut to the head) behind the head (fresh()). */
#define SPENT_BEHIND_SHARE 5
/* A move goes ahead of the head by the span of a quarter of the records the
   namespace holds (at most a quarter of the TTL, so a chunk never lives past
   1.25 TTL): a little less than the 30 % NSUP cuts at a time in the cache
   recipe, which is what a namespace may hold less than its capacity. */
#define HIT_LEAD_SHARE 4

void
lmca__hits_init(lmca_t *h)
{
    pthread_mutex_init(&h->hits.lock, NULL);
}

void
lmca__hits_destroy(lmca_t *h)
{
    for (size_t i = 0; i < h->hits.n; i++)
        free(h->hits.queue[i]);
    free(h->hits.queue);
    pthread_mutex_destroy(&h->hits.lock);
}

static uint32_t
records_of(uint32_t nseg)
{
    return nseg > 1 ? nseg + 1 : 1;
}

/* How far past the head a move goes, in µs: the span of the namespace's
   records / HIT_LEAD_SHARE at the clock's `step` µs each, at most TTL /
   HIT_LEAD_SHARE (near the head of a clock whose per_second was set far below
   the namespace's records, the span alone would be days). 0 without eviction
   (step 0): the clock is real time, no cut to outlive, and the TTL stays the TTL. */
static uint64_t
hit_lead_us(lmca_t *h, uint64_t step)
{
    uint64_t records = atomic_load_explicit(&h->cache.records, memory_order_relaxed);
    uint64_t cap = (uint64_t)h->cfg.default_ttl_seconds * 1000000u / HIT_LEAD_SHARE;
    uint64_t us = records / HIT_LEAD_SHARE * step;

    return us < cap ? us : cap;
}

/* The chunk's void time is past its line, less FRESH_US: three quarters of
   the lead past the head while the touch budget has credit (the lead is 0
   without eviction: the head itself), and as it runs out, down to a fifth of
   the namespace's span (NSUP's last cut to the head) behind the head. A
   spent budget moves the first hits that come, and leaves the rest where
   they are (hits_unbudgeted): on the read-heavy conversations of
   bench/cache/cache_bench.py (7 lookups a stored chunk) 3 of 4 moves were
   refused, among them the prefixes whose new chunks were stored at the head,
   and the chunks left behind their own tails were cut first: 0.926x an exact
   LRU by prefix token. Spent on the chunks nearest the cut instead, 0.975x
   (docs/capacity.md, the equal-DRAM section); and a chunk left
   a fifth behind the head and read again within half the budget is still
   above a cut of 30 % (evict-tenths-pct 300) at its next read, as in an
   exact LRU. meta->ttl is what
   the client made of the server's void time with this host's clock
   (cf_server_void_time_to_ttl: void time less the host's now), so the host's
   clock turns it back into the void time, which is the servers' (a host whose
   clock was 5 minutes behind took every hit for fresh, and its warm chunks were
   evicted). Whole seconds: the void second is due or due + 1; any value only
   decides whether to touch. */
static bool
fresh(lmca_t *h, const lmca_meta_t *meta)
{
    uint64_t due = (lmca__now_us() / 1000000u + meta->ttl + 1) * 1000000u;
    uint64_t lead = hit_lead_us(h, lmca__clock_step(h)), credit = lmca__clock_credit_permille(h);
    uint64_t head = lmca__clock_head(h), cut = atomic_load(&h->cache.cut_us);
    /* The namespace's records span from NSUP's last cut to the head; the
       records at the clock's step are that span only while the stores keep
       the clock ahead of real time (4 MiB chunks at a disk's speed did not,
       and a fifth of the records' span left 2 of 3 moves refused for the
       budget: 0.927x an exact LRU by prefix token; the cut's, 0.975x). */
    uint64_t span = cut > 0 && cut < head ? head - cut : lead * HIT_LEAD_SHARE;
    uint64_t ahead = lead / 4 * FRESH_QUARTERS * credit / 1000;
    uint64_t behind = span / SPENT_BEHIND_SHARE * (1000 - credit) / 1000;

    return due + FRESH_US + behind > head + ahead;
}

/* Whether a chunk read (or looked up) with this meta record moves: not pinned,
   not never-expiring, not fresh (counted). */
static bool
moves(lmca_t *h, const lmca_meta_t *meta)
{
    if (meta->pin || meta->ttl == UINT32_MAX)
        return false;
    if (fresh(h, meta)) {
        LMCA__COUNT(h, hits_fresh);
        return false;
    }
    return true;
}

/* Takes the queue; NULL when empty. */
static lmca__hit **
take(lmca_t *h, size_t *n)
{
    lmca__hit **q;

    pthread_mutex_lock(&h->hits.lock);
    q = h->hits.queue;
    *n = h->hits.n;
    if (*n > 0) {
        h->hits.queue = NULL;
        h->hits.n = 0;
    }
    pthread_mutex_unlock(&h->hits.lock);
    return *n > 0 ? q : NULL;
}

/* Sends rows [0, n) in batch calls. */
static void
send_rows(lmca_t *h, lmca__row *rows, size_t n)
{
    for (size_t i = 0; i < n; i += 4096)
        lmca__wire_write_many(h->wire, rows + i, n - i < 4096 ? n - i : 4096, 0, NULL);
}

/* Touches the records of rows [0, n); counts the refusals. Rows refused for
   load go again shortly, for up to BUSY_RETRY_MS: a device whose write queue is
   full refuses every write of its node until a block leaves the queue, and at
   the device's own write speed the queue is full most of the time (4 writers
   of 4 MiB on a 32 GiB file read directly: 3,024 touches refused, and 70 of 128
   warm chunks lost, with a second between tries). */
static void
touch_rows(lmca_t *h, lmca__row *rows, size_t n)
{
    uint64_t until = lmca__mono_ms() + BUSY_RETRY_MS;
    lmca__row *busy = NULL;
    size_t *at = NULL, m = n;

    send_rows(h, rows, n);
    for (unsigned round = 0; m > 0 && lmca__mono_ms() < until; round++) {
        m = 0;
        for (size_t k = 0; k < n; k++)
            m += rows[k].result == LMCA_EBUSY;
        if (m == 0 || (busy == NULL && (busy = lmca__malloc(m * sizeof *busy)) == NULL) ||
            (at == NULL && (at = lmca__malloc(m * sizeof *at)) == NULL))
            break; /* none busy, or no memory to send them again: counted below */
        m = 0;
        for (size_t k = 0; k < n; k++)
            if (rows[k].result == LMCA_EBUSY) {
                at[m] = k;
                busy[m++] = rows[k];
            }
        lmca__busy_pause(h, round);
        send_rows(h, busy, m);
        for (size_t j = 0; j < m; j++)
            rows[at[j]].result = busy[j].result;
    }
    free(busy);
    free(at);
    for (size_t k = 0; k < n; k++)
        if (rows[k].result != LMCA_OK && rows[k].result != LMCA_MISS)
            LMCA__COUNT(h, touches_failed);
}

/* Keeps, at the front of the meta rows (rows[nsegs, nsegs + n)), those of the
   chunks whose segments were all touched, and returns how many. A meta record
   moved past a segment left behind would outlive it: a chunk that lookups find
   and loads miss (a full namespace refuses touches, and on 512 MiB it made 5 of
   140 records such metas). Left behind instead, the meta goes first. */
static size_t
keep_whole(lmca__hit **q, size_t n, lmca__row *rows, size_t nsegs)
{
    size_t kept = 0, r = 0;

    for (size_t i = 0; i < n; i++) {
        bool whole = true;
        for (uint32_t s = 0; q[i]->nseg > 1 && s < q[i]->nseg; s++, r++)
            whole &= rows[r].result == LMCA_OK;
        if (whole)
            rows[nsegs + kept++] = rows[nsegs + i];
    }
    return kept;
}

/* A refusal that passes: a node lost or paused, a busy key or device, a
   namespace at stop-writes (while a node is lost the others hold every copy:
   in two kills on a loopback cluster, one warm chunk was evicted for each
   touch that stop-writes refused). */
static bool
passing(int rc)
{
    return rc == LMCA_ETIMEOUT || rc == LMCA_ECONNECTION || rc == LMCA_EBUSY ||
           rc == LMCA_EFULL;
}

/* Queues a hit again for a later move; false when the queue is full. */
static bool
requeue(lmca_t *h, lmca__hit *hit)
{
    bool queued = false;

    pthread_mutex_lock(&h->hits.lock);
    if (h->hits.queue == NULL && h->hits.n == 0)
        h->hits.queue = lmca__calloc(LMCA__HITS_MAX, sizeof *h->hits.queue);
    if (h->hits.queue != NULL && h->hits.n < LMCA__HITS_MAX) {
        if (h->hits.n == 0)
            h->hits.first_ms = lmca__mono_ms();
        h->hits.queue[h->hits.n++] = hit;
        queued = true;
    }
    pthread_mutex_unlock(&h->hits.lock);
    return queued;
}

/* Touches the chunks q[0, n): every record at its chunk's new void time; a
   chunk a lost node kept from moving is marked to go again. */
static int
touch(lmca_t *h, lmca__hit **q, size_t n, lmca_err_t *err)
{
    size_t records = 0, nsegs = 0, r = 0;
    uint64_t step, at, bytes = 0;
    bool unbudgeted;
    char **keys;
    lmca__row *rows;

    for (size_t i = 0; i < n; i++) {
        records += records_of(q[i]->nseg);
        nsegs += q[i]->nseg > 1 ? q[i]->nseg : 0;
        bytes += q[i]->bytes;
    }
    /* One place for all of them, in the order they were read: chunk i's
       records follow chunk i - 1's; and their bytes from the touch budget. */
    at = lmca__clock_move(h, (uint32_t)(records < UINT32_MAX ? records : UINT32_MAX), bytes,
                          true, &step, &unbudgeted);
    if (unbudgeted) { /* left where they are: the stores have not paid for them */
        atomic_fetch_add_explicit(&h->counters.hits_unbudgeted, n, memory_order_relaxed);
        for (size_t i = 0; i < n; i++)
            q[i]->again = false;
        return LMCA_OK;
    }
    if (at == 0 && h->cfg.default_ttl_seconds > 0 && step != 0) {
        /* No clock record answered: they go again, as a move refused in passing. */
        for (size_t i = 0; i < n; i++)
            q[i]->again = true;
        atomic_fetch_add_explicit(&h->counters.touches_failed, records, memory_order_relaxed);
        return LMCA_OK;
    }
    at += at ? hit_lead_us(h, step) : 0;
    /* Segments in rows [0, nsegs), meta records after them. */
    if ((keys = lmca__key_slab(records, sizeof(lmca__row), "touching hits", err)) == NULL)
        return LMCA_ENOMEM;
    rows = lmca__slab_extra(keys, records);
    for (size_t i = 0; i < n; i++) {
        uint32_t ttl = lmca__record_ttl(h, at / 1000000u, false);
        for (uint32_t s = 0; q[i]->nseg > 1 && s < q[i]->nseg; s++, r++) {
            lmca__segment_key(keys[r], q[i]->key, s);
            rows[r] = (lmca__row){.key = keys[r], .ttl = ttl, .touch = true};
        }
        lmca__meta_key(keys[nsegs + i], q[i]->key);
        rows[nsegs + i] = (lmca__row){.key = keys[nsegs + i], .ttl = ttl, .touch = true};
        at += records_of(q[i]->nseg) * step;
    }
    if (nsegs > 0)
        touch_rows(h, rows, nsegs);
    size_t metas = keep_whole(q, n, rows, nsegs);
    touch_rows(h, rows + nsegs, metas);
    /* The kept meta rows are in q's order: chunk i's, if kept, is the next. A
       chunk refused in passing goes again (left where it was, a warm chunk was
       evicted). */
    for (size_t i = 0, k = 0, seg = 0; i < n; i++) {
        bool kept = k < metas && rows[nsegs + k].key == keys[nsegs + i];
        int rc = kept ? rows[nsegs + k++].result : LMCA_OK;
        for (uint32_t s = 0; q[i]->nseg > 1 && s < q[i]->nseg; s++, seg++)
            rc = passing(rows[seg].result) ? rows[seg].result : rc;
        if (kept && rc == LMCA_OK) {
            LMCA__COUNT(h, hits_touched);
            atomic_fetch_add_explicit(&h->counters.touch_bytes, q[i]->bytes,
                                      memory_order_relaxed);
        }
        q[i]->again = passing(rc);
    }
    free(keys);
    return LMCA_OK;
}

/* Keeps at the front of q the hits due now, and queues the others again: a
   move that failed waits HITS_RETRY_GAP_MS before it goes again (a timeout is
   load as often as a lost node, and a retry at once adds to it). */
static size_t
due_now(lmca_t *h, lmca__hit **q, size_t n)
{
    uint64_t now = lmca__mono_ms();
    size_t kept = 0;

    for (size_t i = 0; i < n; i++) {
        if (q[i]->retry_ms <= now)
            q[kept++] = q[i];
        else if (!requeue(h, q[i]))
            free(q[i]);
    }
    return kept;
}

/* Whether an unsure hit (nseg 0) moves, given its lookup's verdict: one there
   takes the meta record's shape, one gone (a true miss), pinned or fresh is
   dropped, one whose lookup failed in passing goes again later. */
static bool
unsure_moves(lmca_t *h, lmca__hit *hit, int rc, const lmca_meta_t *meta)
{
    bool move = rc == LMCA_OK && moves(h, meta);
    if (move) {
        hit->nseg = meta->nseg;
        hit->bytes = meta->tot_b;
    }
    hit->again = !move && passing(rc);
    return move;
}

/* Looks up the hits whose read failed before their meta record came (nseg 0),
   without payload, in one batch call: one call's time and one connection a
   node however many there are (one read each held the blocking get that
   touched them for as many timeouts, and a slow node's timed-out sockets,
   kept by the client until their answers drain, took its connections).
   Those to move are put first: returns how many. */
static size_t
look_up_unsure(lmca_t *h, lmca__hit **q, size_t n)
{
    const char **keys = lmca__malloc(n * (sizeof *keys + sizeof(lmca_meta_t) + sizeof(int)));
    lmca_meta_t *metas = (lmca_meta_t *)(keys + n);
    int *rcs = (int *)(metas + n);
    size_t unsure = 0, ready = 0;
    lmca_err_t err = {0};

    for (size_t i = 0; keys != NULL && i < n; i++)
        if (q[i]->nseg == 0)
            keys[unsure++] = q[i]->key;
    if (unsure > 0 && lmca__read_small_many(h, keys, unsure, metas, rcs, &err) != LMCA_OK)
        unsure = 0;
    for (size_t i = 0, u = 0; i < n; i++) {
        lmca__hit *hit = q[i];
        if (hit->nseg == 0) {
            /* Out of memory, none was read: hints lost, nothing else. */
            bool move = u < unsure && unsure_moves(h, hit, rcs[u], &metas[u]);
            u++;
            if (!move)
                continue;
        }
        q[i] = q[ready];
        q[ready++] = hit;
    }
    free(keys);
    return ready;
}

int
lmca_touch_hits(lmca_t *h, lmca_err_t *err)
{
    size_t n, ready;
    lmca__hit **q = take(h, &n);
    uint64_t now;
    int rc;

    n = q ? due_now(h, q, n) : 0;
    ready = n > 0 ? look_up_unsure(h, q, n) : 0;
    rc = ready > 0 ? touch(h, q, ready, err) : LMCA_OK;
    now = lmca__mono_ms();
    for (size_t i = 0; i < n; i++) {
        if (q[i]->again && q[i]->failed_ms == 0)
            q[i]->failed_ms = now;
        q[i]->retry_ms = now + HITS_RETRY_GAP_MS;
        if (!(q[i]->again && now < q[i]->failed_ms + HITS_RETRY_MS && requeue(h, q[i])))
            free(q[i]);
    }
    free(q);
    return rc;
}

void
lmca__touch_hits_due(lmca_t *h)
{
    size_t n;
    uint64_t first;

    pthread_mutex_lock(&h->hits.lock);
    n = h->hits.n;
    first = h->hits.first_ms;
    pthread_mutex_unlock(&h->hits.lock);
    if (n >= HITS_BATCH || (n > 0 && lmca__mono_ms() >= first + HITS_DUE_MS))
        lmca_touch_hits(h, NULL);
}

/* Queues a move of `key` (nseg 0: not known yet, looked up before the move). */
static void
queue_hit(lmca_t *h, const char *key, uint32_t nseg, uint64_t bytes)
{
    size_t len = strlen(key) + 1;
    lmca__hit *hit;
    bool full;

    if ((hit = lmca__malloc(sizeof *hit + len)) == NULL)
        return; /* a hint lost, nothing else */
    hit->nseg = nseg;
    hit->bytes = bytes;
    hit->failed_ms = hit->retry_ms = 0;
    hit->again = false;
    memcpy(hit->key, key, len);
    pthread_mutex_lock(&h->hits.lock);
    if (h->hits.queue == NULL && h->hits.n == 0)
        h->hits.queue = lmca__calloc(LMCA__HITS_MAX, sizeof *h->hits.queue);
    if (h->hits.queue == NULL || h->hits.n == LMCA__HITS_MAX) { /* being touched */
        pthread_mutex_unlock(&h->hits.lock);
        free(hit);
        return;
    }
    if (h->hits.n == 0)
        h->hits.first_ms = lmca__mono_ms();
    h->hits.queue[h->hits.n++] = hit;
    full = h->hits.n == LMCA__HITS_MAX;
    pthread_mutex_unlock(&h->hits.lock);
    if (full) /* bounded: the hit that filled the queue touches it */
        lmca_touch_hits(h, NULL);
}

void
lmca__hit_found(lmca_t *h, const char *key, const lmca_meta_t *meta)
{
    if (h->cfg.touch_on_hit && h->cfg.default_ttl_seconds > 0 && moves(h, meta))
        queue_hit(h, key, meta->nseg, meta->tot_b);
}

void
lmca__hit_unsure(lmca_t *h, const char *key)
{
    if (h->cfg.touch_on_hit && h->cfg.default_ttl_seconds > 0)
        queue_hit(h, key, 0, 0);
}
