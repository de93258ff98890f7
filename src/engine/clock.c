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
 * records against the others', a tenth of the second NSUP evicts by. What a
 * lease leaves unused is a gap in the clock, and the clock's lead is what puts
 * are paced by (cache.c): a writer whose stores come in bursts further apart
 * than LEASE_MS wasted a whole lease per burst, and four of them serving
 * LMCache's requests ran the clock at 2-3x their records (DESIGN.md). So a
 * lease holds at most twice the spare that the last one used, plus one.
 *
 * Time. While writers place fewer than per_second records a second the clock
 * falls behind now + TTL; the reservation that finds it more than CATCH_UP_US
 * behind moves it to now + TTL (a write checked by generation, so that of two
 * writers that saw it behind only one moves it). One that finds it absurdly far
 * ahead (another client's record, a clock set by hand) does the same: a clock
 * ahead only delays, but an hour ahead is no clock of ours.
 *
 * Stores and moves. Puts are paced by how far the clock leads now + TTL
 * (cache.c): stores faster than NSUP evicts would fill the namespace. But a
 * chunk moved to the head (a hit, lmca_touch) takes places and adds no data,
 * and so does a lease's unused rest: counted against the pace, a busy cache's
 * hits held its stores to a third of their rate (DESIGN.md). So the record
 * keeps a second counter, FREE_BIN: the µs of void time no store took. A
 * store's pace is its place minus it, a clock of stores alone that the same
 * catch-up keeps near now + TTL. The void clock itself may then lead by what
 * moves took, up to MOVE_LEAD_MAX_US: further ahead, the records' TTLs would
 * keep growing (and an hour ahead the clock is taken for a foreign one), so
 * past it a store is paced by its void place less MOVE_LEAD_MAX_US, and the
 * stores and the moves share NSUP's pace between them.
 *
 * When the counter cannot be reached, a handle places on its own copy of the
 * clock (counted in clock_local): a store is never failed for its place.
 */
#include <stdlib.h>
#include <time.h>

#include "wire.h"

#define CLOCK_KEY "void-clock"
#define CLOCK_BIN "next_us" /* the next free position, µs of void time */
#define FREE_BIN "free_us"  /* µs of the positions before it that no store took */
/* A lease lives this long, and holds what this handle placed in as long before:
   how far one writer's records may be out of order against the others'. */
#define LEASE_MS 100
/* The most a lease holds, in seconds of clock: a quarter. */
#define LEASE_SHARE 4
#define CATCH_UP_US 1000000u
#define SANE_AHEAD_US (3600ull * 1000000u)
#define MOVE_LEAD_MAX_US (SANE_AHEAD_US / 10)

static const char *const clock_bins[2] = {CLOCK_BIN, FREE_BIN};

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

/* Sets the shared clock to `next` and `free` if it is still at generation
   `gen` (0: any). */
static void
clock_set(lmca_t *h, uint64_t next, uint64_t free, uint32_t gen)
{
    int64_t v[2] = {(int64_t)next, (int64_t)free};

    if (lmca__wire_counter_set(h->wire, LMCA__CLOCK_SET, CLOCK_KEY, 2, clock_bins, v, gen,
                               NULL) == LMCA_OK)
        LMCA__COUNT(h, clock_resets);
}

/* A reservation's answer: the first void position, and the stores' clock there. */
typedef struct {
    uint64_t start, store;
} clock_pos;

/* Reserves `span` µs of the shared clock no earlier than `base`, for a move
   (all of it free) or for stores (`free`: a lease's unused rest, returned). One
   round trip; two when the clock is reset or the stores' clock caught up. */
static int
clock_reserve(lmca_t *h, uint64_t span, uint64_t free, bool moving, uint64_t base,
              clock_pos *at)
{
    int64_t delta[2] = {(int64_t)span, (int64_t)free}, v[2] = {0, 0};
    uint32_t gen = 0;
    int rc = lmca__wire_counter_add(h->wire, LMCA__CLOCK_SET, CLOCK_KEY, 2, clock_bins, delta,
                                    v, &gen, NULL);

    LMCA__COUNT(h, clock_reservations);
    if (rc == LMCA_MISS || rc == LMCA_EUNKNOWN) { /* not our counter: replace it */
        clock_set(h, base + span, moving ? span : 0, 0);
        *at = (clock_pos){base, base};
        return LMCA_OK;
    }
    if (rc != LMCA_OK)
        return rc;
    /* The server's answer is checked like any record: a value below the span,
       far from now + TTL, or more free than there was clock is no position this
       clock handed out. */
    uint64_t s = v[0] > (int64_t)span ? (uint64_t)v[0] - span : 0;
    if (s + CATCH_UP_US < base || s > base + SANE_AHEAD_US || v[1] < (int64_t)free ||
        (uint64_t)v[1] > s) {
        clock_set(h, base + span, moving ? span : 0, gen);
        *at = (clock_pos){base, base};
        return LMCA_OK;
    }
    /* The stores' clock: the void clock less every free µs, the ones returned
       now included (they lie before s). Stores slower than per_second while
       moves keep the void clock ahead leave it behind, where it would let a
       burst through unpaced: it is moved up to now + TTL. */
    uint64_t store = s - (uint64_t)v[1];
    if (!moving && store + CATCH_UP_US < base) {
        clock_set(h, s + span, s > base ? s - base : 0, gen); /* s may trail base by 1 s */
        store = base;
    }
    *at = (clock_pos){s, store};
    return LMCA_OK;
}

uint64_t
lmca__clock_step(lmca_t *h)
{
    uint64_t k = atomic_load_explicit(&h->cache.per_second, memory_order_relaxed);
    return k == 0 ? 0 : 1000000u / k ? 1000000u / k : 1;
}

/* The realtime µs of now + TTL, where the clock starts. */
static uint64_t
clock_base(lmca_t *h)
{
    return lmca__now_us() + (uint64_t)h->cfg.default_ttl_seconds * 1000000u;
}

/* The next lease's spare records: this handle's rate over the last lease, for
   LEASE_MS, no more than twice what the last lease's spare served, plus one,
   and at most 1 / LEASE_SHARE of a second's records. Takes what is left of the
   lease and what was returned (the next reservation gives it back as free).
   Under the lock. */
static uint64_t
lease_spare(lmca__clock *c, uint64_t step, uint64_t mono, uint64_t *left_us)
{
    uint64_t k = 1000000u / step; /* per_second, as the step rounds it */
    uint64_t left = c->end_us > c->next_us ? (c->end_us - c->next_us) / step : 0;
    uint64_t used = c->spare > left ? c->spare - left : 0;
    uint64_t spare = c->placed * LEASE_MS / (mono > c->refilled_ms ? mono - c->refilled_ms : 1);

    if (spare > 2 * used + 1)
        spare = 2 * used + 1;
    if (spare > k / LEASE_SHARE)
        spare = k / LEASE_SHARE;
    *left_us = left * step + c->returned_us;
    c->returned_us = 0;
    c->end_us = c->next_us; /* a second refill meanwhile returns nothing twice */
    c->placed = 0;
    c->refilled_ms = mono;
    return spare;
}

/* A store's void place `at`; its place on the stores' clock in *pace_us, moved
   up to at - MOVE_LEAD_MAX_US when moves led the clock further. */
static uint64_t
pace(uint64_t at, uint64_t *pace_us)
{
    if (*pace_us + MOVE_LEAD_MAX_US < at)
        *pace_us = at - MOVE_LEAD_MAX_US;
    return at;
}

uint64_t
lmca__clock_place(lmca_t *h, uint32_t records, uint64_t *pace_us)
{
    lmca__clock *c = &h->clock;
    uint64_t base, step, need, spare, left_us = 0, mono, start;
    clock_pos at;

    *pace_us = 0;
    if (h->cfg.default_ttl_seconds <= 0) /* never, keep, or the namespace's default */
        return 0;
    base = clock_base(h);
    if ((step = lmca__clock_step(h)) == 0) /* the namespace does not evict: real time is order enough */
        return *pace_us = base;
    need = (uint64_t)records * step;
    mono = lmca__mono_ms();

    pthread_mutex_lock(&c->lock);
    if (c->expires_ms > mono && c->next_us + need <= c->end_us) {
        start = c->next_us;
        *pace_us = c->store_us;
        c->next_us += need;
        c->store_us += need;
        c->placed += records;
        c->head_us = start > c->head_us ? start : c->head_us;
        pthread_mutex_unlock(&c->lock);
        return pace(start, pace_us);
    }
    spare = lease_spare(c, step, mono, &left_us);
    pthread_mutex_unlock(&c->lock);

    /* Outside the lock: other threads place meanwhile, on the lease or their own
       reservation; a lease replaced by a newer one leaves its rest unused. */
    uint64_t span = need + spare * step;
    bool shared = h->cfg.shared_clock && clock_reserve(h, span, left_us, false, base, &at) == LMCA_OK;

    pthread_mutex_lock(&c->lock);
    if (!shared) { /* its own clocks; a full namespace refuses the counter's write too */
        LMCA__COUNT(h, clock_local);
        at.start = c->last_us > base ? c->last_us : base;
        at.store = c->store_last_us > base ? c->store_last_us : base;
        span = need;
    }
    c->spare = (span - need) / step;
    c->next_us = at.start + need;
    c->store_us = at.store + need;
    c->end_us = at.start + span;
    c->expires_ms = mono + LEASE_MS;
    if (c->end_us > c->last_us)
        c->last_us = c->end_us;
    if (at.store + span > c->store_last_us)
        c->store_last_us = at.store + span;
    c->head_us = at.start > c->head_us ? at.start : c->head_us;
    c->placed += records;
    pthread_mutex_unlock(&c->lock);
    *pace_us = at.store;
    return pace(at.start, pace_us);
}

void
lmca__clock_return(lmca_t *h, uint32_t records)
{
    uint64_t step = lmca__clock_step(h);

    pthread_mutex_lock(&h->clock.lock);
    h->clock.returned_us += (uint64_t)records * step;
    pthread_mutex_unlock(&h->clock.lock);
}

uint64_t
lmca__clock_move(lmca_t *h, uint32_t records)
{
    lmca__clock *c = &h->clock;
    uint64_t base, step, need;
    clock_pos at;

    if (h->cfg.default_ttl_seconds <= 0)
        return 0;
    base = clock_base(h);
    if ((step = lmca__clock_step(h)) == 0)
        return base;
    need = (uint64_t)records * step;
    /* Its own reservation, all of it free: no lease, whose rest would be a
       store's. Moves come in batches (hits.c), so the round trips are few. */
    if (!h->cfg.shared_clock || clock_reserve(h, need, need, true, base, &at) != LMCA_OK) {
        pthread_mutex_lock(&c->lock);
        LMCA__COUNT(h, clock_local);
        at.start = c->last_us > base ? c->last_us : base;
        c->last_us = at.start + need;
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_lock(&c->lock);
    c->head_us = at.start > c->head_us ? at.start : c->head_us;
    pthread_mutex_unlock(&c->lock);
    return at.start;
}

uint64_t
lmca__clock_head(lmca_t *h)
{
    uint64_t base = clock_base(h), head;

    pthread_mutex_lock(&h->clock.lock);
    head = h->clock.head_us;
    pthread_mutex_unlock(&h->clock.lock);
    return head > base ? head : base;
}
