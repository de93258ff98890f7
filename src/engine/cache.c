/*
 * cache.c - what a full namespace asks of the engine: void times that NSUP can
 * evict, backpressure instead of failed stores, and stores dropped cheaply when
 * the tier truly cannot keep up (DESIGN.md, "A cache that stays full").
 *
 * Void times. NSUP evicts by void time in whole seconds and refuses a second
 * holding more records than its per-cycle target (lmca.h, "Eviction by void
 * time"). Every record of a chunk gets the chunk's one void time, its place on
 * the clock every writer of the namespace shares (clock.c), which hands seconds
 * out in write order and at most `per_second` records each: a burst of stores
 * runs ahead of now + TTL instead of piling into one second that NSUP would
 * never evict. All the records of a chunk are sent the TTL that lands them in
 * that one second, so they are evicted in the same cycle: a meta record due a
 * second before its segments left orphans at every cycle's edge (3 % of the
 * records of a 1 GiB cache, a quarter of a cycle's target each time), one due
 * after them a meta record naming segments that are gone. A write that crosses
 * a second on its way can still land one second off, which the next cycle
 * clears.
 *
 * Backpressure. Stop-writes on a namespace that evicts, and device overload,
 * pass: lmca_put_backoff says when to try a refused step again, within
 * backpressure_ms. A put that spends it on stop-writes closes a gate: puts are
 * dropped without a round trip for full_recheck_ms, then one is let through to
 * look again (a refusal then closes the gate at once; a landed put opens it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "schema.h"

/* The clock gives a second of void time half of NSUP's per-cycle target. A cycle
   takes about two seconds (find, then evict a second later), so a writer held to
   the pace NSUP evicts writes half a target a second: the clock then keeps pace
   with time instead of running ahead. A clock that ran ahead for good (a quarter
   of the target, measured) made every newer store due after every read-touched
   one, since a read-touch restarts a record's own TTL on the server's clock: the
   hot chunks were evicted first (tests/ext/test_cache_full.py). */
#define TARGET_SHARE 2
/* How far the clock may run ahead of now + TTL: a little more than the burst a
   writer may land after an NSUP cycle frees room (a target, two seconds at
   `per_second`). A put whose void time is further ahead waits (lmca_put_pace):
   a clock that ran ahead unbounded broke read-touch as above, and one that piled
   the overflow into its farthest second made a second NSUP refused, for good,
   when a namespace filled from empty faster than the plan allowed. */
#define LEAD_SECONDS 3
/* A memory namespace is 8 stripes of write blocks; blocks in use are about
   three quarters full, and a stripe needs 4 free besides (probe.py's rule,
   DESIGN.md "Every size"). */
#define MEMORY_STRIPES 8
#define SPARE_BLOCKS 4
#define MEMORY_FILL_PCT 75
/* A device keeps 8 free blocks for defrag (DRV_DEFRAG_RESERVE,
   as/include/storage/drv_common.h) and gives none of the blocks in its
   post-write cache back, however much of them was freed, until they leave it
   (drv_ssd.c: ssd_post_write, ssd_block_free): on a 512 MiB file the default
   256 MiB holds half the device (DESIGN.md, "Every size"). */
#define DEVICE_RESERVE_BLOCKS 8
/* How full a device's blocks in use count as, in percent: fitted to a 512 MiB
   file (64 blocks), whose stores were refused from 56-66 % used with 16 blocks
   held and from 49-62 % with 40, at evict-used-pct 50, and not at 40 with 16
   held; memory's 75 would have called 50 safe there (DESIGN.md, "Every size"). */
#define DEVICE_FILL_PCT 60
/* How often a writing handle looks at the namespace again; every second while
   the namespace is nearly empty, whose mean record is a guess, or past
   evict-used-pct, where a stalled NSUP must be seen soon (mend.c). */
#define WATCH_MS 10000
#define WATCH_EARLY_MS 1000
#define FEW_OBJECTS 64
/* At most one warning about dropped stores per cause and interval. */
#define WARN_MS 60000
/* Backoff: from 2 ms, doubling, to at most 200 ms, jittered. */
#define BACKOFF_FIRST_MS 2
#define BACKOFF_MAX_MS 200
/* Aerospike refuses TTLs above 10 years. */
#define TTL_MAX 315360000u

/* ---------------------------------------------------------------------------
 * The eviction plan (pure).
 */

/* The namespace's capacity: its device or memory size. */
static uint64_t
capacity(const lmca_server_info_t *s)
{
    if (s->data_total_bytes > 0)
        return (uint64_t)s->data_total_bytes;
    return s->data_size > 0 ? (uint64_t)s->data_size : 0;
}

/* The most of the storage records can fill, in percent: blocks in use are
   partly full (records of many ages share one, and a block is reused only once
   defrag empties it), so a share of each block that can take new records.
   Memory: per stripe, less SPARE_BLOCKS; a device: less its defrag reserve and
   its post-write cache (probe.py's rule). */
static uint64_t
block_room(const lmca_server_info_t *srv, uint64_t block)
{
    uint64_t cap = capacity(srv), blocks, kept, fill;

    if (block == 0)
        return 0;
    if (srv->data_size > 0) {
        blocks = cap / MEMORY_STRIPES / block;
        kept = SPARE_BLOCKS;
        fill = MEMORY_FILL_PCT;
    } else { /* each device has its reserve and its cache */
        blocks = cap / (srv->devices > 1 ? srv->devices : 1) / block;
        kept = DEVICE_RESERVE_BLOCKS +
               (srv->post_write_cache > 0 ? (uint64_t)srv->post_write_cache / block : 0);
        fill = DEVICE_FILL_PCT;
    }
    return blocks > kept ? fill * (blocks - kept) / blocks : 0;
}

/* The lead, in seconds at `per_second` records of `mean` bytes: a burst of puts
   placed that far ahead lands past evict-used-pct before NSUP's next cycle,
   and must fit in what the storage holds beyond it, below stop-writes-used-pct
   and the blocks' room. On 512 MiB of memory at evict-used-pct 30, 3 s of
   records reached 45 % used, out of space at the stripes' limit (DESIGN.md). */
static uint32_t
lead_seconds(const lmca_server_info_t *srv, uint64_t block, uint64_t mean, uint32_t per_second)
{
    uint64_t cap = capacity(srv), room = block_room(srv, block), limit, seconds;

    limit = srv->stop_writes_used_pct > 0 && (uint64_t)srv->stop_writes_used_pct < room
                ? (uint64_t)srv->stop_writes_used_pct
                : room;
    if (limit <= (uint64_t)srv->evict_used_pct || mean == 0 || per_second == 0)
        return 1;
    seconds = cap / 100 * (limit - (uint64_t)srv->evict_used_pct) / mean / per_second;
    return seconds < 1 ? 1 : seconds > LEAD_SECONDS ? LEAD_SECONDS : (uint32_t)seconds;
}

void
lmca_eviction_plan(const lmca_server_info_t *srv, const lmca_limits_t *limits,
                   const lmca_config_t *cfg, uint64_t mean_hint, lmca_eviction_t *out)
{
    uint64_t mean, records;

    memset(out, 0, sizeof *out);
    out->per_second = cfg->records_per_void_second;
    out->lead_seconds = LEAD_SECONDS;
    out->enabled = srv->evict_used_pct > 0 && srv->nsup_period > 0 &&
                   cfg->default_ttl_seconds > 0 && srv->evict_tenths_pct > 0;
    if (!out->enabled)
        return;
    /* Records at evict-used-pct: the capacity over the mean record the namespace
       holds, or, while it is nearly empty, over the hint, or a full segment
       (fewer, larger records than the truth: a smaller target, the safe side). */
    mean = srv->objects >= FEW_OBJECTS && srv->data_used_bytes > 0
               ? (uint64_t)srv->data_used_bytes / (uint64_t)srv->objects
               : 0;
    /* Right after many removals the space is freed later than the objects are
       counted (blocks wait for defrag): a mean above the largest record the
       namespace takes is no mean, and made the plan 0 records, a second 1. */
    if (mean == 0 || mean > limits->max_segment_bytes + LMCA__MIB)
        mean = mean_hint > 0 ? mean_hint : limits->target_segment_bytes;
    records = capacity(srv) / 100 * (uint64_t)srv->evict_used_pct / (mean ? mean : 1);
    /* Never-expiring records (pinned chunks) are not in NSUP's histogram. Their
       share of a nearly empty namespace says nothing: there the shared clock's
       own record alone was all of it, and made the plan 0 records. */
    if (srv->objects >= FEW_OBJECTS && srv->non_expirable_objects > 0 &&
        srv->non_expirable_objects <= srv->objects)
        records -= (uint64_t)((double)records * (double)srv->non_expirable_objects /
                              (double)srv->objects);
    out->records = records;
    out->target = records * (uint64_t)srv->evict_tenths_pct / 1000;
    if (out->per_second == 0) {
        uint64_t k = out->target / TARGET_SHARE;
        out->per_second = k == 0 ? 1 : k > UINT32_MAX ? UINT32_MAX : (uint32_t)k;
    }
    out->lead_seconds = lead_seconds(srv, limits->block_bytes, mean, out->per_second);
}

static void
set_plan(lmca_t *h, const lmca_eviction_t *e)
{
    atomic_store_explicit(&h->cache.per_second, e->per_second, memory_order_relaxed);
    atomic_store_explicit(&h->cache.lead_seconds, e->lead_seconds, memory_order_relaxed);
    atomic_store_explicit(&h->cache.target, e->target, memory_order_relaxed);
    atomic_store_explicit(&h->cache.records, e->records, memory_order_relaxed);
    atomic_store_explicit(&h->cache.enabled, e->enabled, memory_order_relaxed);
}

void
lmca_eviction(lmca_t *h, lmca_eviction_t *out)
{
    out->enabled = atomic_load_explicit(&h->cache.enabled, memory_order_relaxed);
    out->records = atomic_load_explicit(&h->cache.records, memory_order_relaxed);
    out->target = atomic_load_explicit(&h->cache.target, memory_order_relaxed);
    out->per_second = (uint32_t)atomic_load_explicit(&h->cache.per_second, memory_order_relaxed);
    out->lead_seconds = atomic_load_explicit(&h->cache.lead_seconds, memory_order_relaxed);
}

/* The mean record of this handle's puts so far, 0 before the first. */
static uint64_t
own_mean(lmca_t *h)
{
    uint64_t records = atomic_load_explicit(&h->cache.put_records, memory_order_relaxed);
    return records ? atomic_load_explicit(&h->cache.put_bytes, memory_order_relaxed) / records
                   : 0;
}

void
lmca__cache_planned(lmca_t *h, uint32_t records, uint64_t bytes)
{
    atomic_fetch_add_explicit(&h->cache.put_records, records, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->cache.put_bytes, bytes, memory_order_relaxed);
}

void
lmca__cache_open(lmca_t *h)
{
    lmca_eviction_t e;
    lmca_eviction_plan(&h->server, &h->limits, &h->cfg, 0, &e);
    set_plan(h, &e);
    /* mend.c: handles that see one stall act one after the other. */
    h->cache.stall_ms = LMCA__STALL_MS + h->wid_seed % LMCA__STALL_MS;
    atomic_store(&h->cache.watch_next_ms,
                 lmca__mono_ms() + (h->server.objects < FEW_OBJECTS ? WATCH_EARLY_MS : WATCH_MS));
    if (e.enabled)
        lmca__log(&h->cfg, LMCA_LOG_INFO,
                  "namespace '%s' evicts: at most %llu of about %llu records per NSUP cycle; "
                  "this handle gives a second of void time at most %u records",
                  h->cfg.namespace_, (unsigned long long)e.target,
                  (unsigned long long)e.records, e.per_second);
}

/* Looks at the namespace again, at most every WATCH_MS, on one thread: the
   plan follows the records it holds. A failed look keeps the last plan. */
void
lmca__cache_watch(lmca_t *h)
{
    uint64_t now = lmca__mono_ms(), next = atomic_load_explicit(&h->cache.watch_next_ms,
                                                           memory_order_relaxed);
    char req[64], *answer = NULL;
    lmca_server_info_t srv;
    lmca_eviction_t e;

    if (now < next || !atomic_compare_exchange_strong(&h->cache.watch_next_ms, &next,
                                                      now + WATCH_MS))
        return;
    snprintf(req, sizeof req, "namespace/%s", h->cfg.namespace_);
    if (lmca__wire_info(h->wire, req, &answer, NULL) == LMCA_OK &&
        lmca_server_info_parse(answer, &srv, NULL) == LMCA_OK) {
        lmca_eviction_plan(&srv, &h->limits, &h->cfg, own_mean(h), &e);
        set_plan(h, &e);
        /* Nearly empty (the mean record is a guess) or past evict-used-pct (a
           stall is seen within a few NSUP cycles): look again soon. */
        if (srv.objects < FEW_OBJECTS || srv.hwm_breached)
            atomic_store(&h->cache.watch_next_ms, now + WATCH_EARLY_MS);
        if (e.enabled)
            lmca__mend_watch(h, &srv, now);
    }
    free(answer);
}

/* ---------------------------------------------------------------------------
 * Places on the clock.
 */

void
lmca__put_place(lmca_t *h, lmca_put_t *p)
{
    uint32_t records = p->meta.nseg > 1 ? p->meta.nseg + 1 : 1;
    uint64_t v, pace_us, unplaced = 0;

    if (p->meta.pin || __atomic_load_n(&p->void_at, __ATOMIC_ACQUIRE) != 0)
        return;
    /* Steps of one put may race here on several threads: the first place
       stands, and a loser gives its places back, or a chunk's 3 steps on 3
       workers would pace the stores as 3 chunks. */
    v = lmca__clock_place(h, records, &pace_us) / 1000000u;
    if (__atomic_compare_exchange_n(&p->void_at, &unplaced, v, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        __atomic_store_n(&p->pace_at, pace_us / 1000000u, __ATOMIC_RELEASE);
    else
        lmca__clock_return(h, records);
}

int
lmca_put_pace(lmca_t *h, lmca_put_t *p)
{
    uint64_t now, pace_at, ahead, send_us;

    lmca__put_place(h, p);
    /* Placed further ahead of now + TTL on the stores' clock than the lead
       allows: it waits until not. */
    pace_at = __atomic_load_n(&p->pace_at, __ATOMIC_ACQUIRE);
    ahead = (uint64_t)h->cfg.default_ttl_seconds +
            atomic_load_explicit(&h->cache.lead_seconds, memory_order_relaxed);
    if (h->cfg.default_ttl_seconds <= 0 || pace_at <= ahead)
        return 0;
    send_us = (pace_at - ahead) * 1000000u;
    if (send_us <= (now = lmca__now_us()))
        return 0;
    if (!__atomic_exchange_n(&p->paced, true, __ATOMIC_RELAXED))
        LMCA__COUNT(h, puts_paced);
    return (int)((send_us - now + 999) / 1000);
}

uint32_t
lmca__record_ttl(const lmca_t *h, uint64_t void_at, bool pin)
{
    uint64_t now;

    if (pin)
        return UINT32_MAX;
    if (void_at == 0) /* Aerospike's special TTLs: 0 default, -1 never, -2 keep */
        return (uint32_t)h->cfg.default_ttl_seconds;
    now = lmca__now_us() / 1000000u;
    if (void_at <= now)
        return 1;
    return void_at - now > TTL_MAX ? TTL_MAX : (uint32_t)(void_at - now);
}

/* ---------------------------------------------------------------------------
 * Backpressure, drops and the full gate.
 */

static void
warn_drops(lmca_t *h, int rc)
{
    lmca__cache *c = &h->cache;
    uint64_t now = lmca__mono_ms(), next = atomic_load(&c->warn_next_ms);
    uint64_t full = atomic_load(&h->counters.dropped_full);
    uint64_t busy = atomic_load(&h->counters.dropped_busy);
    uint64_t unsent = atomic_load(&h->counters.dropped_unsent);

    if (now < next || !atomic_compare_exchange_strong(&c->warn_next_ms, &next, now + WARN_MS))
        return;
    if (rc == LMCA_EFULL)
        lmca__log(&h->cfg, LMCA_LOG_WARNING,
                  "dropped stores: namespace '%s' stayed at stop-writes for backpressure_ms=%u "
                  "(%llu dropped since open, %llu of them unsent while it was known full, "
                  "%llu for load): NSUP is not evicting as fast as stores arrive; run "
                  "`lmcache-aerospike probe` (evict-used-pct below stop-writes-used-pct, "
                  "evict-tenths-pct, evict-hist-buckets), add capacity, or raise "
                  "backpressure_ms",
                  h->cfg.namespace_, h->cfg.backpressure_ms, (unsigned long long)full,
                  (unsigned long long)unsent, (unsigned long long)busy);
    else
        lmca__log(&h->cfg, LMCA_LOG_WARNING,
                  "dropped stores: namespace '%s' refused writes for load (device overload or "
                  "a busy key) for backpressure_ms=%u (%llu dropped since open, %llu for "
                  "space): raise the namespace's storage-engine max-write-cache, add devices, "
                  "or raise backpressure_ms",
                  h->cfg.namespace_, h->cfg.backpressure_ms, (unsigned long long)busy,
                  (unsigned long long)full);
}

/* Counts a put dropped for `rc`, once per put. */
static void
drop(lmca_t *h, lmca_put_t *p, int rc, bool unsent)
{
    if (__atomic_exchange_n(&p->dropped, true, __ATOMIC_RELAXED))
        return;
    if (rc == LMCA_EFULL) {
        LMCA__COUNT(h, dropped_full);
        if (unsent)
            LMCA__COUNT(h, dropped_unsent);
    } else {
        LMCA__COUNT(h, dropped_busy);
    }
    warn_drops(h, rc);
}

static void
close_gate(lmca_t *h, uint64_t now)
{
    atomic_store(&h->cache.full_until_ms, now + h->cfg.full_recheck_ms);
    atomic_store(&h->cache.full_known, true);
}

int
lmca__cache_gate(lmca_t *h, lmca_put_t *p, lmca_err_t *err)
{
    uint64_t now, until = atomic_load_explicit(&h->cache.full_until_ms, memory_order_relaxed);

    lmca__cache_watch(h);
    if (until == 0 || (now = lmca__mono_ms()) >= until) {
        lmca__put_place(h, p);
        return LMCA_OK;
    }
    drop(h, p, LMCA_EFULL, true);
    return lmca__fail(err, LMCA_EFULL, 8,
                      "put \"%s\": dropped unsent: namespace \"%s\" stayed at stop-writes for "
                      "backpressure_ms=%u; the next store in %llu ms looks again",
                      p->key, h->cfg.namespace_, h->cfg.backpressure_ms,
                      (unsigned long long)(until - now));
}

void
lmca__cache_landed(lmca_t *h, lmca_put_t *p)
{
    if (__atomic_load_n(&p->refusals, __ATOMIC_RELAXED) > 0) {
        LMCA__COUNT(h, puts_retried);
        atomic_store_explicit(&h->cache.landed_ms, lmca__mono_ms(), memory_order_relaxed);
    }
    if (atomic_load_explicit(&h->cache.full_known, memory_order_relaxed))
        atomic_store(&h->cache.full_known, false);
}

/* Whether a refused put may wait on past its own budget: while other refused
   puts land, the namespace is evicting and this one lost the race for the
   room NSUP freed; it waits up to three budgets, and only a namespace where
   nothing landed for a whole budget counts as full. */
static bool
others_land(lmca_t *h, const lmca_put_t *p, uint64_t now)
{
    uint64_t landed = atomic_load_explicit(&h->cache.landed_ms, memory_order_relaxed);
    uint64_t first = __atomic_load_n(&p->deadline_ms, __ATOMIC_RELAXED) - h->cfg.backpressure_ms;
    return landed + h->cfg.backpressure_ms > now && now < first + 3 * h->cfg.backpressure_ms;
}

/* A jittered wait for the n-th refusal (0-based): half fixed, half random. */
static uint32_t
backoff_ms(lmca_t *h, uint32_t n)
{
    uint32_t wait = BACKOFF_FIRST_MS << (n < 7 ? n : 7);
    uint64_t r = lmca__new_wid(h); /* a fresh random 64-bit value, never 0 */
    if (wait > BACKOFF_MAX_MS)
        wait = BACKOFF_MAX_MS;
    return wait / 2 + (uint32_t)(r % (wait / 2 + 1));
}

int
lmca_put_backoff(lmca_t *h, lmca_put_t *p, int rc)
{
    uint64_t now, deadline, zero = 0;
    uint32_t n, wait;

    if (rc != LMCA_EFULL && rc != LMCA_EBUSY)
        return -1;
    /* Dropped unsent by the gate: it learnt nothing new of the namespace, and
       closing the gate again for it would keep a steady stream of puts from ever
       letting one through to look (the gate then stayed shut after NSUP freed
       room). */
    if (__atomic_load_n(&p->dropped, __ATOMIC_RELAXED))
        return -1;
    now = lmca__mono_ms();
    if (rc == LMCA_EFULL) {
        uint64_t until = atomic_load(&h->cache.full_until_ms);
        /* The gate closed while this put waited, or this put was the one let
           through to look: the namespace is still full, so stop at once. */
        if ((until != 0 && now < until) || atomic_load(&h->cache.full_known)) {
            close_gate(h, now);
            drop(h, p, rc, false);
            return -1;
        }
    }
    n = __atomic_fetch_add(&p->refusals, 1, __ATOMIC_RELAXED);
    __atomic_compare_exchange_n(&p->deadline_ms, &zero, now + h->cfg.backpressure_ms, false,
                                __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    deadline = __atomic_load_n(&p->deadline_ms, __ATOMIC_RELAXED);
    if (now >= deadline && !(h->cfg.backpressure_ms > 0 && others_land(h, p, now))) {
        uint64_t landed = atomic_load_explicit(&h->cache.landed_ms, memory_order_relaxed);
        if (rc == LMCA_EFULL && landed + h->cfg.backpressure_ms <= now)
            close_gate(h, now);
        drop(h, p, rc, false);
        return -1;
    }
    LMCA__COUNT(h, write_retries);
    wait = backoff_ms(h, n);
    return (int)(now < deadline && now + wait > deadline ? deadline - now : wait);
}
