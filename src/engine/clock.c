/*
 * clock.c - the void-time clock that every writer of a namespace shares.
 *
 * NSUP evicts whole seconds of void time, lowest first, and refuses a second
 * holding more records than its per-cycle target (lmca.h, "Eviction by void
 * time"). A clock per handle gave each second `per_second` records per writer:
 * three writers at full speed overfilled every second and the namespace froze,
 * and writers whose clocks led now + TTL by different amounts interleaved their
 * chunks out of write order (DESIGN.md, "One clock for every writer"). So the
 * clock lives on the server: one counter record per namespace (set
 * LMCA__CLOCK_SET), the next free position in microseconds of void time. A
 * handle reserves positions for `n` records by adding n * step to it (step =
 * 1 s / per_second) and reading the sum back, one atomic operate; every
 * writer's records are then spaced at least `step` apart, in the order they
 * were placed, whichever process or host placed them.
 *
 * Round trips. A handle reserves a lease: the positions it placed in the last
 * LEASE_MS besides the ones it needs now, handed out locally until the lease
 * runs out or expires. A lease reorders at most LEASE_MS of one writer's
 * records against the others', a tenth of the second NSUP evicts by.
 *
 * Time. While writers place fewer than per_second records a second the clock
 * falls behind now + TTL; the reservation that finds it more than CATCH_UP_US
 * behind moves it to now + TTL (a write checked by generation, so that of two
 * writers that saw it behind only one moves it). One that finds it absurdly far
 * ahead (another client's record, a clock set by hand) does the same: a clock
 * ahead only delays, but an hour ahead is no clock of ours.
 *
 * When the counter cannot be reached, a handle places on its own copy of the
 * clock (counted in clock_local): a store is never failed for its place.
 */
#include <stdlib.h>
#include <time.h>

#include "wire.h"

#define CLOCK_KEY "void-clock"
#define CLOCK_BIN "next_us"
/* A lease lives this long, and holds what this handle placed in as long before:
   how far one writer's records may be out of order against the others'. */
#define LEASE_MS 100
/* The most a lease holds, in seconds of clock: a quarter. */
#define LEASE_SHARE 4
#define CATCH_UP_US 1000000u
#define SANE_AHEAD_US (3600ull * 1000000u)

void
lmca__clock_init(lmca_t *h)
{
    pthread_mutex_init(&h->clock.lock, NULL);
}

void
lmca__clock_destroy(lmca_t *h)
{
    pthread_mutex_destroy(&h->clock.lock);
}

/* Moves the shared clock to `to` if it is still at generation `gen` (0: any). */
static void
clock_reset(lmca_t *h, uint64_t to, uint32_t gen)
{
    if (lmca__wire_counter_set(h->wire, LMCA__CLOCK_SET, CLOCK_KEY, CLOCK_BIN, (int64_t)to, gen,
                               NULL) == LMCA_OK)
        LMCA__COUNT(h, clock_resets);
}

/* Reserves `span` µs of the shared clock no earlier than `base`; the first
   reserved position in *start. One round trip, two when the clock is reset. */
static int
clock_reserve(lmca_t *h, uint64_t span, uint64_t base, uint64_t *start)
{
    int64_t v = 0;
    uint32_t gen = 0;
    int rc = lmca__wire_counter_add(h->wire, LMCA__CLOCK_SET, CLOCK_KEY, CLOCK_BIN,
                                    (int64_t)span, &v, &gen, NULL);

    LMCA__COUNT(h, clock_reservations);
    if (rc == LMCA_MISS || rc == LMCA_EUNKNOWN) { /* not our counter: replace it */
        clock_reset(h, base + span, 0);
        *start = base;
        return LMCA_OK;
    }
    if (rc != LMCA_OK)
        return rc;
    /* The server's answer is checked like any record: a value below the span
       or far from now + TTL is no position this clock handed out. */
    uint64_t s = v > (int64_t)span ? (uint64_t)v - span : 0;
    if (s + CATCH_UP_US < base || s > base + SANE_AHEAD_US) {
        clock_reset(h, base + span, gen);
        s = base;
    }
    *start = s;
    return LMCA_OK;
}

uint64_t
lmca__clock_place(lmca_t *h, uint32_t records)
{
    lmca__clock *c = &h->clock;
    uint64_t base, k, step, need, spare, start, mono;

    if (h->cfg.default_ttl_seconds <= 0) /* never, keep, or the namespace's default */
        return 0;
    base = lmca__now_us() + (uint64_t)h->cfg.default_ttl_seconds * 1000000u;
    k = atomic_load_explicit(&h->cache.per_second, memory_order_relaxed);
    if (k == 0) /* the namespace does not evict: real time is order enough */
        return base;
    step = 1000000u / k ? 1000000u / k : 1;
    need = (uint64_t)records * step;
    mono = lmca__mono_ms();

    pthread_mutex_lock(&c->lock);
    if (c->expires_ms > mono && c->next_us + need <= c->end_us) {
        start = c->next_us;
        c->next_us += need;
        c->placed += records;
        c->head_us = start > c->head_us ? start : c->head_us;
        pthread_mutex_unlock(&c->lock);
        return start;
    }
    /* The next lease: this handle's rate over the last one, for LEASE_MS. */
    spare = c->placed * LEASE_MS / (mono > c->refilled_ms ? mono - c->refilled_ms : 1);
    if (spare > k / LEASE_SHARE)
        spare = k / LEASE_SHARE;
    c->placed = 0;
    c->refilled_ms = mono;
    pthread_mutex_unlock(&c->lock);

    /* Outside the lock: other threads place meanwhile, on the lease or their own
       reservation; a lease replaced by a newer one leaves its rest unused. */
    uint64_t span = need + spare * step;
    bool shared = h->cfg.shared_clock && clock_reserve(h, span, base, &start) == LMCA_OK;

    pthread_mutex_lock(&c->lock);
    if (!shared) {
        LMCA__COUNT(h, clock_local);
        start = c->last_us > base ? c->last_us : base;
        span = need;
    }
    c->next_us = start + need;
    c->end_us = start + span;
    c->expires_ms = mono + LEASE_MS;
    if (c->end_us > c->last_us)
        c->last_us = c->end_us;
    c->head_us = start > c->head_us ? start : c->head_us;
    c->placed += records;
    pthread_mutex_unlock(&c->lock);
    return start;
}

uint64_t
lmca__clock_head(lmca_t *h)
{
    uint64_t base = lmca__now_us() + (uint64_t)h->cfg.default_ttl_seconds * 1000000u, head;

    pthread_mutex_lock(&h->clock.lock);
    head = h->clock.head_us;
    pthread_mutex_unlock(&h->clock.lock);
    return head > base ? head : base;
}
