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
 * backpressure_ms. A put that spends it on stop-writes, while no other put
 * lands and a node says stop-writes, closes a gate: puts are dropped without a
 * round trip for full_recheck_ms, then one is let through to look again (a
 * refusal then closes the gate at once; a landed put opens it). A refusal with
 * no node at stop-writes is a stripe's or a device's "out of space" (no free
 * block where the record's digest falls): that put alone is dropped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "schema.h"

/* At most one warning about dropped stores per cause and interval. */
#define WARN_MS 60000
/* A write that is not a store's (the clock's, a touch), refused by an
   overloaded device, goes again after BUSY_PAUSE_MS, doubling to
   BUSY_PAUSE_MAX_MS, jittered: the device's write queue frees a place each time
   a write block leaves it (tens of ms). */
#define BUSY_PAUSE_MS 1
#define BUSY_PAUSE_MAX_MS 16
/* Backoff: from 2 ms, doubling, to at most 200 ms, jittered. */
#define BACKOFF_FIRST_MS 2
#define BACKOFF_MAX_MS 200
/* Aerospike refuses TTLs above 10 years. */
#define TTL_MAX 315360000u

/* Why a put was dropped; each has its counter (lmca_stats_t) and its own
   warning's minute (lmca__cache.warn_next_ms). */
typedef enum { DROP_FULL, DROP_BUSY, DROP_UNREACHABLE, DROP_PACED } drop_cause;
_Static_assert(sizeof(((lmca__cache *)0)->warn_next_ms) ==
                   (DROP_PACED + 1) * sizeof(atomic_uint_fast64_t),
               "a warning's minute for each drop cause");

static bool drop(lmca_t *h, lmca_put_t *p, drop_cause cause, bool unsent);
static drop_cause cause_of(int rc);
static void close_gate(lmca_t *h, uint64_t now);

/* ---------------------------------------------------------------------------
 * Places on the clock.
 */

/* The furthest place on the stores' clock this handle's puts were given (or
   refused at). */
static void
pace_head_to(lmca_t *h, uint64_t pace_us)
{
    uint64_t head = atomic_load_explicit(&h->cache.pace_head_us, memory_order_relaxed);

    while (pace_us > head &&
           !atomic_compare_exchange_weak(&h->cache.pace_head_us, &head, pace_us))
        ;
}

int
lmca__put_place(lmca_t *h, lmca_put_t *p, bool bounded)
{
    uint32_t records = p->meta.nseg > 1 ? p->meta.nseg + 1 : 1;
    uint64_t v, pace_us, unplaced = 0, due_ms = 0;
    int64_t limit_us = 0;
    lmca__placed how;

    if (p->meta.pin || __atomic_load_n(&p->void_at, __ATOMIC_ACQUIRE) != 0)
        return LMCA_OK;
    if (bounded) {
        limit_us = (int64_t)(atomic_load_explicit(&h->cache.lead_seconds, memory_order_relaxed) *
                             1000000u) + (int64_t)h->cfg.max_put_wait_ms * 1000;
        /* A put waits for load max_put_wait_ms in all, its place included. */
        due_ms = h->cfg.max_put_wait_ms > 0 ? p->begun_ms + h->cfg.max_put_wait_ms : 0;
    }
    /* Steps of one put may race here on several threads: the first place
       stands, and a loser gives its places back, or a chunk's 3 steps on 3
       workers would pace the stores as 3 chunks. */
    uint64_t overloads = atomic_load_explicit(&h->counters.clock_overloaded, memory_order_relaxed);
    v = lmca__clock_place(h, records, limit_us, due_ms, &pace_us, &how) / 1000000u;
    /* Its clock's device refused for load meanwhile (this put's reservation or
       the one it waited for): load held it, which bounds it. */
    if (atomic_load_explicit(&h->counters.clock_overloaded, memory_order_relaxed) != overloads)
        __atomic_store_n(&p->loaded, true, __ATOMIC_RELAXED);
    if (how == LMCA__PLACE_BUSY || how == LMCA__PLACE_FULL) {
        int rc = how == LMCA__PLACE_FULL ? LMCA_EFULL : LMCA_EBUSY;
        /* At stop-writes the gate closes, as a put's own refusal closes it: the
           next puts' clock refusals are not waited for, and they drop at once. */
        if (rc == LMCA_EFULL && lmca__cache_stopped(h))
            close_gate(h, lmca__mono_ms());
        drop(h, p, cause_of(rc), true);
        return rc;
    }
    if (how == LMCA__PLACE_AHEAD) { /* void_at stays 0: lmca_put_pace drops it */
        __atomic_store_n(&p->pace_at, pace_us, __ATOMIC_RELEASE);
        pace_head_to(h, pace_us);
    } else if (__atomic_compare_exchange_n(&p->void_at, &unplaced, v, false, __ATOMIC_ACQ_REL,
                                           __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&p->pace_at, pace_us, __ATOMIC_RELEASE);
        pace_head_to(h, pace_us);
    } else {
        lmca__clock_return(h, records);
    }
    return LMCA_OK;
}

uint32_t
lmca__record_ttl(lmca_t *h, uint64_t void_at, bool pin)
{
    uint64_t now;

    if (pin)
        return UINT32_MAX;
    if (void_at == 0) /* Aerospike's special TTLs: 0 default, -1 never, -2 keep */
        return (uint32_t)h->cfg.default_ttl_seconds;
    /* The node computes the void time from its own clock: the TTL is the void
       second less the servers' now. */
    now = lmca__server_now_us(h) / 1000000u;
    if (void_at <= now)
        return 1;
    return void_at - now > TTL_MAX ? TTL_MAX : (uint32_t)(void_at - now);
}

/* ---------------------------------------------------------------------------
 * Backpressure, drops and the full gate.
 */

static drop_cause
cause_of(int rc)
{
    return rc == LMCA_EFULL ? DROP_FULL
           : rc == LMCA_ETIMEOUT || rc == LMCA_ECONNECTION ? DROP_UNREACHABLE
                                                           : DROP_BUSY;
}

static void
warn_drops(lmca_t *h, drop_cause cause)
{
    lmca__cache *c = &h->cache;
    /* Each cause its own minute: a drop for load right after one for space is
       news to the operator, and says which setting to change. */
    atomic_uint_fast64_t *at = &c->warn_next_ms[cause];
    uint64_t now = lmca__mono_ms(), next = atomic_load(at);
    unsigned long long full = atomic_load(&h->counters.dropped_full),
                       busy = atomic_load(&h->counters.dropped_busy),
                       unsent = atomic_load(&h->counters.dropped_unsent),
                       unreachable = atomic_load(&h->counters.dropped_unreachable),
                       paced = atomic_load(&h->counters.dropped_paced);

    if (now < next || !atomic_compare_exchange_strong(at, &next, now + WARN_MS))
        return;
    switch (cause) {
    case DROP_FULL:
        lmca__log(&h->cfg, LMCA_LOG_WARNING,
                  "dropped stores: namespace '%s' stayed at stop-writes for backpressure_ms=%u "
                  "(%llu dropped since open, %llu of them unsent while it was known full, "
                  "%llu for load): NSUP is not evicting as fast as stores arrive; run "
                  "`lmcache-aerospike probe` (evict-used-pct below stop-writes-used-pct, "
                  "evict-tenths-pct, evict-hist-buckets), add capacity, or raise "
                  "backpressure_ms",
                  h->cfg.namespace_, h->cfg.backpressure_ms, full, unsent, busy);
        break;
    case DROP_BUSY:
        lmca__log(&h->cfg, LMCA_LOG_WARNING,
                  "dropped stores: namespace '%s' refused writes for load (device overload or "
                  "a busy key) past max_put_wait_ms=%u or backpressure_ms=%u (%llu dropped "
                  "since open, %llu for space): the devices write slower than stores arrive "
                  "or stalled; raise the namespace's storage-engine max-write-cache, add "
                  "devices, or raise max_put_wait_ms",
                  h->cfg.namespace_, h->cfg.max_put_wait_ms, h->cfg.backpressure_ms, busy,
                  full);
        break;
    case DROP_UNREACHABLE:
        lmca__log(&h->cfg, LMCA_LOG_WARNING,
                  "dropped stores: namespace '%s': a record's node stayed unreachable (timeouts, "
                  "connection errors) for backpressure_ms=%u (%llu dropped since open): a node "
                  "lost for longer than the cluster takes to re-form; raise backpressure_ms "
                  "or write_timeout_ms",
                  h->cfg.namespace_, h->cfg.backpressure_ms, unreachable);
        break;
    case DROP_PACED:
        lmca__log(&h->cfg, LMCA_LOG_WARNING,
                  "dropped stores: namespace '%s': stores were due on the shared clock more "
                  "than max_put_wait_ms=%u ahead (%llu dropped since open): writers offer "
                  "more than NSUP evicts; add capacity or nodes, or raise max_put_wait_ms",
                  h->cfg.namespace_, h->cfg.max_put_wait_ms, paced);
        break;
    }
}

/* Counts a put dropped for `cause`, once per put: true the first time. */
static bool
drop(lmca_t *h, lmca_put_t *p, drop_cause cause, bool unsent)
{
    if (__atomic_exchange_n(&p->dropped, true, __ATOMIC_RELAXED))
        return false;
    switch (cause) {
    case DROP_FULL:
        LMCA__COUNT(h, dropped_full);
        if (unsent)
            LMCA__COUNT(h, dropped_unsent);
        break;
    case DROP_BUSY:
        LMCA__COUNT(h, dropped_busy);
        break;
    case DROP_UNREACHABLE:
        LMCA__COUNT(h, dropped_unreachable);
        break;
    case DROP_PACED:
        LMCA__COUNT(h, dropped_paced);
        break;
    }
    warn_drops(h, cause);
    return true;
}

/* How long a put placed at `pace_us` on the stores' clock waits, in ms, to be
   no more than the lead ahead of now, on the servers' time (a host whose clock
   is off waits no more than the others); 0: send now. */
static uint64_t
pace_wait_ms(lmca_t *h, uint64_t pace_us, uint64_t ahead_us)
{
    uint64_t now;

    if (pace_us <= ahead_us || pace_us - ahead_us <= (now = lmca__server_now_us(h)))
        return 0;
    return (pace_us - ahead_us - now + 999) / 1000;
}

int
lmca_put_pace(lmca_t *h, lmca_put_t *p, lmca_err_t *err)
{
    uint64_t ahead_us, wait_ms;
    bool placed;

    ahead_us = atomic_load_explicit(&h->cache.lead_seconds, memory_order_relaxed) * 1000000u;
    /* A put dropped as paced gives its places back to the stores' clock but not
       to the void clock, which others placed after: placing puts only to drop
       them ran the void clock away from the stores' (batches of 4 MiB chunks on
       512 MiB: 6,258 of 6,338 stores dropped, every put after them due too far).
       So while the furthest place this handle was given is due too far, a put
       not placed yet is dropped before it takes one. */
    if (h->cfg.default_ttl_seconds > 0 && !p->meta.pin &&
        __atomic_load_n(&p->void_at, __ATOMIC_ACQUIRE) == 0 &&
        (wait_ms = pace_wait_ms(h, atomic_load_explicit(&h->cache.pace_head_us,
                                                        memory_order_relaxed),
                                ahead_us)) > h->cfg.max_put_wait_ms) {
        drop(h, p, DROP_PACED, true);
        return lmca__fail(err, LMCA_EBUSY, 0,
                          "put \"%s\": dropped unsent: the stores' clock is due %llu ms ahead, "
                          "past max_put_wait_ms=%u (the stores outpace what NSUP evicts); add "
                          "capacity or raise max_put_wait_ms",
                          p->key, (unsigned long long)wait_ms, h->cfg.max_put_wait_ms);
    }
    int rc = lmca__put_place(h, p, true);
    if (rc != LMCA_OK) {
        bool full = rc == LMCA_EFULL;
        return lmca__fail(err, rc, full ? 8 : LMCA__AS_DEVICE_OVERLOAD,
                          "put \"%s\": dropped unsent: the shared clock's record was refused %s "
                          "until max_put_wait_ms=%u had passed: %s",
                          p->key, full ? "as out of space" : "for load (device overload)",
                          h->cfg.max_put_wait_ms,
                          full ? "the devices' defrag frees blocks slower than stores arrive"
                               : "the devices write slower than stores arrive or stalled");
    }
    if (h->cfg.default_ttl_seconds <= 0 || p->meta.pin)
        return 0;
    /* Refused a place (void_at 0): the stores' clock leads past the wait. */
    placed = __atomic_load_n(&p->void_at, __ATOMIC_ACQUIRE) != 0;
    /* Placed further ahead of now on the stores' clock than the lead allows: it
       waits until not. */
    wait_ms = pace_wait_ms(h, __atomic_load_n(&p->pace_at, __ATOMIC_ACQUIRE), ahead_us);
    if (placed && wait_ms == 0)
        return 0;
    if (!placed || wait_ms > h->cfg.max_put_wait_ms) { /* NSUP is that far behind the stores */
        /* Its places go back to the stores' clock: the next put is not due as late. */
        if (drop(h, p, DROP_PACED, false) && placed)
            lmca__clock_return(h, p->meta.nseg > 1 ? p->meta.nseg + 1 : 1);
        return lmca__fail(err, LMCA_EBUSY, 0,
                          "put \"%s\": dropped: due %llu ms ahead on the shared clock, past "
                          "max_put_wait_ms=%u (the stores outpace what NSUP evicts); add "
                          "capacity or raise max_put_wait_ms",
                          p->key, (unsigned long long)wait_ms, h->cfg.max_put_wait_ms);
    }
    if (!__atomic_exchange_n(&p->paced, true, __ATOMIC_RELAXED))
        LMCA__COUNT(h, puts_paced);
    return (int)wait_ms;
}

static void
close_gate(lmca_t *h, uint64_t now)
{
    atomic_store(&h->cache.full_until_ms, now + h->cfg.full_recheck_ms);
    atomic_store(&h->cache.full_known, true);
}

int64_t
lmca__put_left_ms(lmca_t *h, const lmca_put_t *p)
{
    uint32_t bound = h->cfg.max_put_wait_ms > h->cfg.write_timeout_ms ? h->cfg.max_put_wait_ms
                                                                       : h->cfg.write_timeout_ms;
    int64_t left;

    /* Only load bounds a put: a write that only timed out may be a node paused
       (unless shortened here), and stop-writes and a lost connection are
       waited out for backpressure_ms: NSUP frees room, the cluster re-forms,
       and the store then lands. */
    if (!__atomic_load_n(&p->loaded, __ATOMIC_RELAXED) ||
        __atomic_load_n(&p->waits_out, __ATOMIC_RELAXED))
        return 0;
    left = (int64_t)(p->begun_ms + bound) - (int64_t)lmca__mono_ms();
    return left > 0 ? left : -1;
}

/* A put past its bound: its steps sent in time landed, the rest is dropped.
   Each of a put's writes may take write_timeout_ms, and a put's steps one after
   another took 2.2 to 3.2 s where the device queue refused them until
   max_put_wait_ms (4 and 1 MiB chunks on a 32 GiB direct-I/O namespace:
   docs/capacity.md); LMCache's buffer stays pinned all that while. */
int
lmca__put_spent(lmca_t *h, lmca_put_t *p, lmca_err_t *err)
{
    drop(h, p, DROP_BUSY, false);
    return lmca__fail(err, LMCA_EBUSY, LMCA__AS_DEVICE_OVERLOAD,
                      "put \"%s\": dropped: not landed within max_put_wait_ms=%u (or "
                      "write_timeout_ms=%u) of its start: the devices write slower than "
                      "stores arrive; add devices, or raise max_put_wait_ms",
                      p->key, h->cfg.max_put_wait_ms, h->cfg.write_timeout_ms);
}

int
lmca__put_bounded(lmca_t *h, lmca_put_t *p, int rc, uint32_t timeout_ms, lmca_err_t *err)
{
    if (rc != LMCA_ETIMEOUT || timeout_ms == 0) /* (0: not shortened) */
        return rc;
    return lmca__put_spent(h, p, err);
}

int
lmca__cache_gate(lmca_t *h, lmca_put_t *p, lmca_err_t *err)
{
    uint64_t now, until = atomic_load_explicit(&h->cache.full_until_ms, memory_order_relaxed);

    /* Without a pool, the puts keep the plan and mend (with one, its workers). */
    if (atomic_load_explicit(&h->cache.upkeep_pools, memory_order_relaxed) == 0)
        lmca__upkeep(h);
    if (until == 0 || (now = lmca__mono_ms()) >= until) {
        if (lmca__put_left_ms(h, p) < 0)
            return lmca__put_spent(h, p, err);
        lmca__put_place(h, p, false);
        return LMCA_OK;
    }
    drop(h, p, DROP_FULL, true);
    return lmca__fail(err, LMCA_EFULL, 8,
                      "put \"%s\": dropped unsent: namespace \"%s\" stayed at stop-writes for "
                      "backpressure_ms=%u; the next store in %llu ms looks again",
                      p->key, h->cfg.namespace_, h->cfg.backpressure_ms,
                      (unsigned long long)(until - now));
}

void
lmca__cache_landed(lmca_t *h, lmca_put_t *p)
{
    /* Every put that lands, refused before or not: a memory namespace refuses
       a record when the stripe its digest picks has no free block ("out of
       space"), and meanwhile the other stripes take theirs. Counting only the
       refused ones read one full stripe as a full namespace, and the gate then
       dropped every store unsent: 137 of 575 on 1 GiB, 4 writers of 4 MiB. */
    atomic_store_explicit(&h->cache.landed_ms, lmca__mono_ms(), memory_order_relaxed);
    atomic_fetch_add_explicit(&h->cache.landed_bytes, p->len, memory_order_relaxed);
    if (__atomic_load_n(&p->refusals, __ATOMIC_RELAXED) > 0)
        LMCA__COUNT(h, puts_retried);
    if (atomic_load_explicit(&h->cache.full_known, memory_order_relaxed))
        atomic_store(&h->cache.full_known, false);
}

/* Whether a refused put may wait on past its own budget: while other puts
   land, the namespace is evicting and this one lost the race for the room
   NSUP freed, or its stripe is out of blocks while others are not; it waits up
   to three budgets, and only a namespace where nothing landed for a whole
   budget counts as full. */
static bool
others_land(lmca_t *h, const lmca_put_t *p, uint64_t now)
{
    uint64_t landed = atomic_load_explicit(&h->cache.landed_ms, memory_order_relaxed);
    uint64_t first = __atomic_load_n(&p->deadline_ms, __ATOMIC_RELAXED) - h->cfg.backpressure_ms;
    return landed + h->cfg.backpressure_ms > now && now < first + 3 * h->cfg.backpressure_ms;
}

void
lmca__busy_pause(lmca_t *h, unsigned n)
{
    uint64_t us = (uint64_t)BUSY_PAUSE_MS * 1000u << (n < 4 ? n : 4);
    struct timespec ts;

    if (us > BUSY_PAUSE_MAX_MS * 1000u)
        us = BUSY_PAUSE_MAX_MS * 1000u;
    us = us / 2 + lmca__new_wid(h) % (us / 2 + 1); /* writers do not return in step */
    ts = (struct timespec){(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
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

    /* A timeout or a lost connection is a node lost or paused: the cluster
       re-forms within a few seconds and the client's next map sends the step to
       the new master. Retrying is safe: a step rewrites the same records with
       the same write id (DESIGN.md, "The protocol, and why write ids"). */
    if (rc != LMCA_EFULL && rc != LMCA_EBUSY && rc != LMCA_ETIMEOUT && rc != LMCA_ECONNECTION)
        return -1;
    /* Dropped unsent by the gate: it learnt nothing new of the namespace, and
       closing the gate again for it would keep a steady stream of puts from ever
       letting one through to look (the gate then stayed shut after NSUP freed
       room). */
    if (__atomic_load_n(&p->dropped, __ATOMIC_RELAXED))
        return -1;
    /* Load bounds a put; space and a lost connection are waited out. A timeout
       is either a paused node or a device stalled behind its queue: it marks
       neither, and a put refused for load as well stays bounded (one whose
       write timed out on a stalled disk, then was refused, took 2.45 s). */
    if (rc == LMCA_EBUSY)
        __atomic_store_n(&p->loaded, true, __ATOMIC_RELAXED);
    else if (rc != LMCA_ETIMEOUT)
        __atomic_store_n(&p->waits_out, true, __ATOMIC_RELAXED);
    now = lmca__mono_ms();
    if (rc == LMCA_EFULL) {
        uint64_t until = atomic_load(&h->cache.full_until_ms);
        /* The gate closed while this put waited, or this put was the one let
           through to look: the namespace is still full, so stop at once. */
        if ((until != 0 && now < until) || atomic_load(&h->cache.full_known)) {
            close_gate(h, now);
            drop(h, p, cause_of(rc), false);
            return -1;
        }
    }
    n = __atomic_fetch_add(&p->refusals, 1, __ATOMIC_RELAXED);
    __atomic_compare_exchange_n(&p->deadline_ms, &zero, now + h->cfg.backpressure_ms, false,
                                __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    deadline = __atomic_load_n(&p->deadline_ms, __ATOMIC_RELAXED);
    /* Load is a device's write queue, which drains at the device's speed or,
       when the disk stalls, not at all; LMCache's buffer stays pinned while its
       put waits. So a put refused for load waits max_put_wait_ms in all, place
       included, and no more: a 32 GiB namespace's slowest 4 MiB put took 3.0 s
       through a disk stall, every writer at once (docs/capacity.md). */
    if (rc == LMCA_EBUSY && h->cfg.max_put_wait_ms > 0) {
        uint64_t due = p->begun_ms + h->cfg.max_put_wait_ms;
        if (now >= due) {
            drop(h, p, DROP_BUSY, false);
            return -1;
        }
        if (due < deadline) /* the wait below ends there */
            deadline = due;
    }
    if (now >= deadline && !(h->cfg.backpressure_ms > 0 && others_land(h, p, now))) {
        uint64_t landed = atomic_load_explicit(&h->cache.landed_ms, memory_order_relaxed);
        /* Only a namespace at stop-writes is full for every put. Refused without
           it, the record's stripe (memory) or device is out of free blocks, and
           the next chunk's records go elsewhere: a gate closed on it dropped 101
           of 575 stores unsent, on 1 GiB with 4 writers of 4 MiB. */
        if (rc == LMCA_EFULL && landed + h->cfg.backpressure_ms <= now && lmca__cache_stopped(h))
            close_gate(h, now);
        drop(h, p, cause_of(rc), false);
        return -1;
    }
    LMCA__COUNT(h, write_retries);
    wait = backoff_ms(h, n);
    return (int)(now < deadline && now + wait > deadline ? deadline - now : wait);
}
