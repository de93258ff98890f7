/*
 * clock.c - the void-time clock that every writer of a namespace shares, on the
 * servers' time.
 *
 * NSUP evicts whole seconds of void time, lowest first, and refuses a second
 * holding more records than its per-cycle target (lmca.h, "Eviction by void
 * time"). A clock per handle gave each second `per_second` records per writer:
 * three writers at full speed overfilled every second and the namespace froze,
 * and writers whose clocks led now + TTL by different amounts interleaved their
 * chunks out of write order (DESIGN.md, "One clock for every writer"). So the
 * clock lives on the server: a record per namespace (set LMCA__CLOCK_SET)
 * holding the next free place, in µs of the servers' time. A handle reserves
 * places for `n` records by adding n * step to it (step = 1 s / per_second),
 * one atomic operate; every writer's records are then spaced at least `step`
 * apart, in the order they were placed, whichever process or host placed them.
 * A record's void time is its place plus the clock's TTL.
 *
 * The servers' time. A void time is a node's time plus a TTL, so the clock
 * counts in the node's time, never a writer's: the reservation's expressions
 * read the time on the record's node (wire.c) and move a clock that lags it by
 * more than CATCH_UP_US (writers slower than per_second) up to it, in the same
 * operate. The answer carries the node's time, from which each handle keeps
 * its offset to the servers (learn_time), used for every TTL it sends and every
 * wait: a writer whose host clock is minutes off neither stalls the others (a
 * writer 30 s ahead once moved the clock 30 s on, and every other writer's
 * puts waited that out) nor waits itself (one 5 minutes behind waited 297 s in
 * its first put). The clock also keeps one TTL for all (ttl_s), the largest
 * that a writer asserted in the last TTL_HOLD_MS: writers with different
 * default_ttl_seconds would otherwise place one moment seconds or days apart in
 * the eviction order, and a TTL lowered everywhere takes over once the old one
 * is no longer asserted.
 *
 * Round trips. A handle reserves a lease: the places it used in the last
 * LEASE_MS besides the ones it needs now, handed out locally until the lease
 * runs out or expires, and one reservation at a time (the others wait for it
 * and take from its lease): a writer's round trips stay a few per second, and
 * the record's transactions in flight at most one per handle, below the
 * server's transaction-pending-limit (20 a key) that answers key busy. A lease
 * reorders at most LEASE_MS of one writer's records against the others', a
 * tenth of the second NSUP evicts by. What a lease leaves unused is a gap in the
 * clock, and the clock's lead is what puts are paced by (cache.c): a lease holds
 * at most twice the spare that the last one used, plus one.
 *
 * Stores and moves. Puts are paced by how far the clock leads now:
 * stores faster than NSUP evicts would fill the namespace. But a chunk moved to
 * the head (a hit, lmca_touch) takes places and adds no data, and so does a
 * lease's unused rest: counted against the pace, a busy cache's hits held its
 * stores to a third of their rate (DESIGN.md). So the record keeps a second
 * clock, store_us, that only stores move (a lease's rest is taken off it), and
 * puts are paced by that. The void clock may then lead it by what moves took,
 * up to MOVE_LEAD_MAX_US; past that a store is paced by its void place less
 * MOVE_LEAD_MAX_US, and stores and moves share NSUP's pace between them. A put
 * that would wait past max_put_wait_ms is dropped, and takes no place: the
 * record's node adds nothing to either clock while the stores' clock leads its
 * now by more (ask.limit_us), so that drops leave no gaps on the void clock.
 *
 * When the clock cannot be reached. Its node lost or paused, a migration, a
 * key busy: the reservation goes to another of CLOCKS records, one whose nodes
 * (in the client's partition map) are clear of those the failure blames (a
 * write waits for its replica too: a paused replica stalls it as a paused
 * master does), carrying this handle's floor, the
 * furthest place it knows of, so the order goes on from where it was, and
 * returns to the first within HOME_RETRY_MS. A fallback clock gives a second
 * only 1 / FALLBACK_SHARE of per_second, so that writers split between two
 * clocks for a moment never give a second more than NSUP's target. Only when no
 * record answers (a namespace at stop-writes refuses them all) does a handle
 * place on its own, at 1 / LOCAL_SHARE of the rate from its floor (and the
 * servers' time, as it last learnt it): its own
 * places cannot overfill a second with up to LOCAL_SHARE * TARGET_SHARE writers
 * alone at once, and the next reservation's floor carries them back into the
 * shared order. A store is never failed for its place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "schema.h"

/* The clock's records: "void-clock" serves; "void-clock-<i>" when it cannot be
   reached (pick: the first clear of the nodes the failures blame, each handle
   picking the same from the same partition map). With 3 nodes and 2 copies, two
   thirds of the records have a given node: of 63, one is clear of it but for a
   chance of 1e-11. TRIES in one reservation: the first, one clear of its master,
   one clear of its replica; and while a node is lost (a try timed out or lost its
   connection), more, until backpressure_ms has passed, as a store's own writes
   try on: a cluster takes seconds to re-form without the node and to settle its
   partitions, and three tries of 0.5 s sent writers to their own clocks (44-54
   places in a kill or a pause of the device recipe's cluster). */
#define CLOCKS 64

static const char *
clock_key(unsigned i, char buf[24])
{
    if (i == 0)
        return "void-clock";
    snprintf(buf, 24, "void-clock-%u", i);
    return buf;
}

#define TRIES 3
/* A lease lives this long, and holds what this handle placed in as long before:
   how far one writer's records may be out of order against the others'. */
#define LEASE_MS 100
/* The most a lease holds, in seconds of clock: a quarter. */
#define LEASE_SHARE 4
#define CATCH_UP_US 1000000
#define SANE_AHEAD_US (3600ll * 1000000)
#define MOVE_LEAD_MAX_US (SANE_AHEAD_US / 10)
/* A reservation waits for a clock record four times its recent round trip, at
   least CLOCK_TIMEOUT_MS, before it tries the next: on a paused node the
   client's own timeout would be the put's, and a node busy with large writes
   answers a small one in hundreds of ms (at a fixed 500 ms a single node fell
   back 59 times in 45 s and its stores went unpaced). */
#define CLOCK_TIMEOUT_MS 500
/* After a fallback served, the first clock is tried again this much later,
   twice as late each time it fails again, up to HOME_RETRY_MAX_MS; and after no
   clock record answered, a handle places on its own for LOCAL_HOLD_MS before it
   tries again (a paused node makes each try wait out CLOCK_TIMEOUT_MS). */
#define HOME_RETRY_MS 1000
#define HOME_RETRY_MAX_MS 8000
#define LOCAL_HOLD_MS 500
#define FALLBACK_SHARE 2
#define LOCAL_SHARE 8
/* The touch budget's credit holds at most the moves of 1 / CREDIT_SHARE of the
   namespace's capacity (times touch_budget_percent): a burst of hits after a
   spell of stores alone moves no more than the chunks a sixteenth of the
   stores would have aged (hits.c: a move goes a quarter of the records ahead
   and is fresh for the first quarter of that). */
#define CREDIT_SHARE 16
/* How fast two clocks may drift apart, in µs a second (100 ppm). */
#define DRIFT_US_PER_S 100
#define TTL_MAX_S 315360000
/* A TTL asserted by a writer rules the clock this long after its last
   reservation; then a smaller one may take over. */
#define TTL_HOLD_MS (10 * 60 * 1000)

static uint64_t
mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void
lmca__clock_init(lmca_t *h)
{
    lmca__clock *c = &h->clock;

    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->reserved, NULL);
    /* Until a node told its time, the host's is the best guess. */
    atomic_store(&c->offset_us, (int64_t)lmca__now_us() - (int64_t)mono_us());
}

/* The clock's TTL: what the last answer said, this handle's own before. Under
   the lock. */
static uint64_t
ttl_of(lmca_t *h)
{
    if (h->clock.ttl_s > 0)
        return h->clock.ttl_s;
    return h->cfg.default_ttl_seconds > 0 ? (uint64_t)h->cfg.default_ttl_seconds : 0;
}

void
lmca__clock_destroy(lmca_t *h)
{
    pthread_cond_destroy(&h->clock.reserved);
    pthread_mutex_destroy(&h->clock.lock);
}

uint64_t
lmca__server_now_us(lmca_t *h)
{
    return (uint64_t)((int64_t)mono_us() + atomic_load_explicit(&h->clock.offset_us,
                                                                 memory_order_relaxed));
}

/* A node said its time was `server_ms` (whole ms) between t0 and t1 (monotonic
   µs): the offset is known to within half the round trip and a ms. The sample
   kept is the tightest, its error grown by the drift since (as NTP keeps its
   best). Under the lock. */
static void
learn_time(lmca__clock *c, uint64_t t0, uint64_t t1, int64_t server_ms)
{
    uint64_t err = (t1 - t0) / 2 + 500, aged;

    aged = c->time_err_us + (t1 - c->time_at_us) / 1000000u * DRIFT_US_PER_S;
    if (c->time_known && err > aged)
        return;
    atomic_store_explicit(&c->offset_us, server_ms * 1000 + 500 - (int64_t)((t0 + t1) / 2),
                          memory_order_relaxed);
    c->time_known = true;
    c->time_err_us = err;
    c->time_at_us = t1;
}

uint64_t
lmca__clock_step(lmca_t *h)
{
    uint64_t k = atomic_load_explicit(&h->cache.per_second, memory_order_relaxed);
    return k == 0 ? 0 : 1000000u / k ? 1000000u / k : 1;
}

/* A reservation's places: the first, the stores' clock there, and how far
   apart its places are (µs of server time). */
typedef struct {
    uint64_t start, store, step;
    bool refused;    /* the stores' clock led too far: no places, store says where */
    int late_rc;     /* its device refused the record past the store's due, or a move's
                        as out of space: LMCA_EBUSY (load) or LMCA_EFULL (no free
                        block); no places, and none on its own clock */
    bool unbudgeted; /* a move found no credit: no places */
} clock_pos;

/* Checks a node's answer as any record read (untrusted) and learns from it.
   The places must follow from the ask: at least what was added, no lower than
   the node's now less the catch-up, no higher than its sane bound past the
   floors, the stores' clock no further past the clock than moves may lead it.
   Under the lock. */
static bool
take_answer(lmca_t *h, const lmca__clock_ask *ask, const lmca__clock_answer *a, uint64_t t0,
            uint64_t t1, clock_pos *at)
{
    lmca__clock *c = &h->clock;
    int64_t now, start, store, top;

    if (a->ttl_s < 1 || a->ttl_s > TTL_MAX_S || a->now_ms <= 0 ||
        a->now_ms > INT64_MAX / 4000 || (a->refused != 0 && a->refused != 1) ||
        (a->unbudgeted != 0 && (a->unbudgeted != 1 || ask->move_bytes <= 0)))
        return false;
    now = a->now_ms * 1000;
    if (a->unbudgeted && !a->refused) { /* nothing added: the moves' credit is spent */
        learn_time(c, t0, t1, a->now_ms);
        *at = (clock_pos){.unbudgeted = true};
        return true;
    }
    if (a->refused) { /* nothing added: *at says where the stores' clock is */
        if (ask->limit_us <= 0 || a->store_us <= now + ask->limit_us ||
            a->store_us > now + SANE_AHEAD_US + MOVE_LEAD_MAX_US)
            return false;
        learn_time(c, t0, t1, a->now_ms);
        *at = (clock_pos){.store = (uint64_t)a->store_us, .refused = true};
        return true;
    }
    if (a->next_us < ask->span_us)
        return false;
    start = a->next_us - ask->span_us;
    store = a->store_us - ask->span_us;
    top = now + SANE_AHEAD_US + MOVE_LEAD_MAX_US;
    if (ask->floor_us > top)
        top = ask->floor_us;
    if (start + CATCH_UP_US + 1000 < now || start > top || store > start + MOVE_LEAD_MAX_US ||
        a->store_us < ask->store_us)
        return false;
    learn_time(c, t0, t1, a->now_ms);
    if ((uint64_t)a->ttl_s != ttl_of(h))
        lmca__log(&h->cfg, LMCA_LOG_INFO,
                  "namespace '%s': the shared clock's TTL is %lld s, the largest its writers "
                  "assert (this handle's default_ttl_seconds=%lld): every writer's chunks get "
                  "it, so that one moment is one void time",
                  h->cfg.namespace_, (long long)a->ttl_s, (long long)ask->ttl_s);
    c->ttl_s = (uint64_t)a->ttl_s;
    if (a->old_us + CATCH_UP_US < now || a->old_us > now + SANE_AHEAD_US)
        LMCA__COUNT(h, clock_resets); /* behind (idle writers) or not ours: moved to now */
    *at = (clock_pos){.start = (uint64_t)start, .store = (uint64_t)(store > 0 ? store : 0)};
    return true;
}

/* The nodes a failing reservation blames: those of every clock record that
   failed it. One of them, as a rule, is lost or paused: the master, or a
   replica that a write waits for until the cluster re-forms. */
#define COPIES 4
typedef struct {
    char names[COPIES][LMCA__NODE_NAME];
    unsigned n;
    unsigned turn; /* none avoids them all: the next to avoid alone */
    bool blamed;   /* a failure blamed nodes */
} suspects;

static bool
holds(const char (*names)[LMCA__NODE_NAME], unsigned n, const char *node)
{
    for (unsigned i = 0; i < n; i++)
        if (strcmp(names[i], node) == 0)
            return true;
    return false;
}

/* A clock record on `nodes` failed: the suspects are the nodes every failure
   had (the first failure's, then narrowed). */
static void
blame(suspects *s, const char (*nodes)[LMCA__NODE_NAME], unsigned n, bool first)
{
    unsigned kept = 0;

    if (first) {
        memcpy(s->names, nodes, n * sizeof *nodes);
        s->n = n;
        return;
    }
    for (unsigned i = 0; i < s->n; i++)
        if (holds(nodes, n, s->names[i]))
            memmove(s->names[kept++], s->names[i], sizeof s->names[i]);
    s->n = kept ? kept : s->n; /* none in common: blame as before */
}

/* Whether a record on `nodes` is clear of the suspects (pass 0), or of the one
   suspect `only` (a later pass). */
static bool
clear_of(const suspects *s, const char (*nodes)[LMCA__NODE_NAME], unsigned n, unsigned pass,
         unsigned only)
{
    for (unsigned k = 0; k < n; k++)
        if (pass == 0 ? holds((const char(*)[LMCA__NODE_NAME])s->names, s->n, nodes[k])
                      : strcmp(nodes[k], s->names[only]) == 0)
            return false;
    return true;
}

/* The next clock record to try: the first not tried on none of the suspects;
   when every record has one (3 nodes, 2 copies each), the first that avoids the
   next suspect in turn; when none avoids any (one node), the first not tried,
   and *clear false. Every handle that saw the same failures with the same
   partition map picks the same. -1 when none is left. */
static int
pick(lmca_t *h, suspects *s, const bool *tried, bool *clear)
{
    *clear = true;
    for (unsigned pass = 0; pass <= s->n; pass++) {
        unsigned only = pass == 0 || s->n == 0 ? 0 : (s->turn + pass - 1) % s->n;
        for (unsigned i = 0; i < CLOCKS; i++) {
            char nodes[COPIES][LMCA__NODE_NAME], key[24];
            unsigned n;
            if (tried[i])
                continue;
            n = lmca__wire_nodes_of(h->wire, LMCA__CLOCK_SET, clock_key(i, key), nodes, COPIES);
            if (clear_of(s, (const char(*)[LMCA__NODE_NAME])nodes, n, pass, only)) {
                if (pass > 0)
                    s->turn = only + 1;
                return (int)i;
            }
        }
    }
    *clear = false;
    for (unsigned i = 0; i < CLOCKS; i++)
        if (!tried[i])
            return (int)i;
    return -1;
}

/* The credit an answer left, and the most it could hold by then: what the
   stores earned, up to the cap (a new budget is not a spent one). Untrusted:
   any value only decides which hits move. Under the lock. */
static void
learn_credit(lmca__clock *c, const lmca__clock_ask *ask, const lmca__clock_answer *a)
{
    bool budget = ask->credit_cap > 0 && ask->credit_cap < INT64_MAX / 4;

    c->credit_full = budget && a->earned > 0 ? a->earned : 0;
    c->credit_seen = budget ? a->credit : 0;
}

unsigned
lmca__clock_credit_permille(lmca_t *h)
{
    lmca__clock *c = &h->clock;
    uint64_t landed = atomic_load_explicit(&h->cache.landed_bytes, memory_order_relaxed);
    double credit, full;

    pthread_mutex_lock(&c->lock);
    full = (double)c->credit_full;
    /* The stores this handle landed since it last told the budget are in it
       at the next reservation. */
    credit = (double)c->credit_seen +
             (double)(landed - c->credit_told) * h->cfg.touch_budget_percent / 100.0;
    pthread_mutex_unlock(&c->lock);
    if (full <= 0 || credit >= full)
        return 1000;
    return credit <= 0 ? 0 : (unsigned)(credit * 1000.0 / full);
}

/* The touch budget every writer shares, in the clock's record: each
   reservation adds what this handle's stores landed since it last said, times
   touch_budget_percent (ask->credit_add, up to ask->credit_cap), and a move of
   `move_bytes` takes them, made while the credit is above 0. Returns the landed
   bytes the answer will have counted. Under the lock. */
static uint64_t
ask_credit(lmca_t *h, uint64_t move_bytes, lmca__clock_ask *ask)
{
    uint64_t landed = atomic_load_explicit(&h->cache.landed_bytes, memory_order_relaxed);
    uint64_t pct = h->cfg.touch_budget_percent, cap = lmca__cache_held_bytes(h) / CREDIT_SHARE;

    ask->credit_add = ask->move_bytes = 0;
    ask->credit_cap = INT64_MAX / 4;
    if (pct == 0) /* no budget */
        return landed;
    /* Bytes times a percentage: below 2^63 for any put between two reservations
       (pct is at most 100000). */
    ask->credit_add = (int64_t)((landed - h->clock.credit_told) * pct / 100);
    cap = cap > UINT64_MAX / 100001 ? cap / 100 * pct : cap * pct / 100;
    if (cap > 0 && cap < (uint64_t)ask->credit_cap)
        ask->credit_cap = (int64_t)cap;
    ask->move_bytes = (int64_t)(move_bytes < INT64_MAX / 4 ? move_bytes : INT64_MAX / 4);
    return landed;
}

/* Whether a clock record's refusal is its device's, for a moment: a full write
   queue (device overload), or, for a store with a due or a move, while the full
   gate is open, no free block. Any other record on that device is refused as
   well, so a store's goes again, and none of them holds the handle to its own
   clock. After a node was killed, the two left refused every clock record as
   out of space for a moment (defrag at the disk's speed lags the load they
   took over), and the writers fell back to clocks of their own (22 and 26
   places on three 2 GiB files read directly). With the gate closed,
   stop-writes is the whole namespace's: waiting would only make every dropped
   put slower. */
static bool
device_refused(lmca_t *h, int rc, const lmca_err_t *err, uint64_t due_us, bool moving)
{
    if (rc == LMCA_EBUSY)
        return err->as_code == LMCA__AS_DEVICE_OVERLOAD;
    return rc == LMCA_EFULL && (due_us != 0 || moving) &&
           atomic_load_explicit(&h->cache.full_until_ms, memory_order_relaxed) <=
               lmca__mono_ms();
}

/* Reserves `records` places (plus `spare`, on the first clock only) for a move
   (`moving`: the stores' clock stays; `move_bytes` taken from the touch
   budget's credit, else at->unbudgeted and no places; 0 = none asked) or for
   stores (`returned` µs of earlier places given back to the stores' clock;
   `limit_us` how far the stores' clock may lead the node's now, else
   at->refused and no places, 0 = no limit; `due_us`, on the monotonic clock,
   when the store that asks stops waiting for load, 0 = never): on the first
   clock record that answers, from HOME onwards. False when none did (with
   at->late_rc when the last was refused by its device past due_us). Takes the
   lock for the floors and the answer; not held during the round trips. */
static bool
reserve(lmca_t *h, uint64_t records, uint64_t spare, uint64_t returned, bool moving,
        uint64_t move_bytes, int64_t limit_us, uint64_t due_us, clock_pos *at)
{
    lmca__clock *c = &h->clock;
    uint64_t step = lmca__clock_step(h), now_ms = lmca__mono_ms();
    suspects blamed = {.n = 0};
    bool tried[CLOCKS] = {false};
    unsigned first;
    /* Where the others' stores may be by now: the stores' clock leads now by
       the lead at most. A writer on a fallback while the others still reach the
       first places from there, or its stores would fall behind theirs by as long
       as the split lasts (seen: 4 s behind, on a node paused for 4 s). */
    int64_t head = (int64_t)lmca__server_now_us(h) +
                   (int64_t)atomic_load_explicit(&h->cache.lead_seconds, memory_order_relaxed) *
                       1000000;
    lmca__clock_ask ask = {.ttl_s = h->cfg.default_ttl_seconds, .hold_ms = TTL_HOLD_MS,
                           .catch_up_us = CATCH_UP_US, .sane_us = SANE_AHEAD_US,
                           .limit_us = limit_us, .timeout_ms = CLOCK_TIMEOUT_MS};

    if (ask.ttl_s > TTL_MAX_S)
        ask.ttl_s = TTL_MAX_S;
    pthread_mutex_lock(&c->lock);
    if (4 * c->rtt_us / 1000 > ask.timeout_ms)
        ask.timeout_ms = (uint32_t)(4 * c->rtt_us / 1000);
    pthread_mutex_unlock(&c->lock);
    if (ask.timeout_ms > h->cfg.write_timeout_ms)
        ask.timeout_ms = h->cfg.write_timeout_ms;
    pthread_mutex_lock(&c->lock);
    if (now_ms < c->local_until_ms) { /* none answered a moment ago */
        pthread_mutex_unlock(&c->lock);
        return false;
    }
    first = c->home != 0 && now_ms < c->home_until_ms ? c->home : 0;
    pthread_mutex_unlock(&c->lock);
    /* An overloaded device is waited out, and a lost node's records passed
       over, as long as a store waits them out (backpressure_ms): the stores are
       refused meanwhile too, and on one node every other clock record is on the
       same device (after the reservation's timeout, 1 s stalls of a disk written
       without O_DSYNC sent writers to their own clocks). */
    uint64_t give_up_us = mono_us() + (uint64_t)h->cfg.backpressure_ms * 1000u;
    unsigned overloads = 0;
    int late_rc = 0;
    /* The one that served last, then, after each failure, the first that
       avoids the nodes the failures blame. */
    for (int i = (int)first, tries = 0;
         i >= 0 && (tries < TRIES || (blamed.blamed && mono_us() < give_up_us)); tries++) {
        uint64_t share = i == 0 ? 1 : FALLBACK_SHARE, t0, t1;
        char nodes[COPIES][LMCA__NODE_NAME], key[24];
        const char *name;
        unsigned n;
        lmca__clock_answer a;
        lmca_err_t err;
        int rc;

        tried[i] = true;
        /* Its nodes as the request is sent, the master first: the one a failure
           blames first (the map may change as the client sees the node go). */
        name = clock_key((unsigned)i, key);
        n = lmca__wire_nodes_of(h->wire, LMCA__CLOCK_SET, name, nodes, COPIES);
        ask.span_us = (int64_t)((records + spare) * step * share);
        ask.store_us = moving ? 0 : ask.span_us - (int64_t)returned;
        pthread_mutex_lock(&c->lock);
        uint64_t landed = ask_credit(h, move_bytes, &ask);
        ask.floor_us = (int64_t)c->last_us;
        ask.store_floor_us = (int64_t)c->store_last_us;
        /* A fallback's places after the head the others may have reached
           meanwhile (the order); its stores' clock from this handle's own (the
           pace: from the head, every store on a fallback went unpaced, and a
           busy node whose clock record timed out went to stop-writes). */
        if (i != 0)
            ask.floor_us = ask.floor_us > head ? ask.floor_us : head;
        pthread_mutex_unlock(&c->lock);
        t0 = mono_us();
        rc = lmca__wire_clock(h->wire, name, &ask, &a, &err);
        t1 = mono_us();
        LMCA__COUNT(h, clock_reservations);
        pthread_mutex_lock(&c->lock);
        if (rc == LMCA_OK) /* the round trip's moving mean (a paused node's are not) */
            c->rtt_us = (7 * c->rtt_us + (t1 - t0)) / 8;
        if (rc == LMCA_OK && take_answer(h, &ask, &a, t0, t1, at)) {
            at->step = step * share;
            c->credit_told = landed;
            learn_credit(c, &ask, &a);
            if (i == 0) {
                c->home_wait_ms = 0;
            } else if (first == 0) { /* the first failed: back to it later, later each time */
                c->home_wait_ms = c->home_wait_ms ? 2 * c->home_wait_ms : HOME_RETRY_MS;
                if (c->home_wait_ms > HOME_RETRY_MAX_MS)
                    c->home_wait_ms = HOME_RETRY_MAX_MS;
                c->home_until_ms = lmca__mono_ms() + c->home_wait_ms;
            }
            c->home = (unsigned)i;
            pthread_mutex_unlock(&c->lock);
            if (i != 0)
                LMCA__COUNT(h, clock_fallbacks);
            return true;
        }
        pthread_mutex_unlock(&c->lock);
        /* An overloaded device refuses the node's every write for a moment: a
           record elsewhere on it would be refused as well, so this one goes
           again shortly, and is not a try. Falling back instead, 4 writers of
           4 MiB chunks on a 32 GiB file read directly placed 3,608-3,748 of
           their 4,096 puts each on clocks of their own (the device's queue was
           full for most of the run). Past the wait, the next record (on a
           cluster, as a rule another node's). */
        late_rc = 0;
        if (device_refused(h, rc, &err, due_us, moving)) {
            /* Past the store's own due (max_put_wait_ms from its start, place
               included), the next record at once: on a cluster another node's
               answers; on one node each is refused as fast, and the store is
               dropped as its writes would be, not placed on a clock of its own.
               Waited out to backpressure_ms instead, a 256 KiB put took 2.67 s.
               A move is a hint: it waits for no free block and, refused by
               every record, moves nothing; its local hold sent the stores
               after it to clocks of their own (16 places in a 4 MiB kill). */
            bool late = moving ? rc == LMCA_EFULL : due_us != 0 && t1 >= due_us;
            late_rc = late ? rc : 0;
            if (late_rc == 0 && t1 < give_up_us) {
                LMCA__COUNT(h, clock_overloaded);
                lmca__busy_pause(h, overloads++);
                tries--;
                continue;
            }
        }
        /* A node lost or paused blames its nodes; a busy key or a bad answer is
           the record's own: any other will do. A busy key is counted: one clock
           for every writer must never queue past the server's limit (a sign
           that leases are too short for the writers); an overloaded device,
           also LMCA_EBUSY, is the node's load, not the clock's. */
        if (rc == LMCA_EBUSY && err.as_code == LMCA__AS_KEY_BUSY)
            LMCA__COUNT(h, clock_busy);
        bool lost = rc == LMCA_ETIMEOUT || rc == LMCA_ECONNECTION, clear;
        if (lost) {
            blame(&blamed, (const char(*)[LMCA__NODE_NAME])nodes, n, !blamed.blamed);
            blamed.blamed = true;
        }
        int next = pick(h, &blamed, tried, &clear);
        /* No record avoids the nodes the failures blame (one node): any other
           is as slow or as gone as this one, and a fallback's clock is not the
           one every writer keeps. So this one again, while a store would wait
           (one node, 4 writers on a 32 GiB device: 28 and 955 fallbacks after
           operates timed out on saturated cores lost 1 of 128 and 7 of 512 warm
           chunks; none was lost in the runs without a fallback). */
        if (lost && !clear && mono_us() < give_up_us) {
            lmca__busy_pause(h, overloads++);
            tries--;
            continue;
        }
        i = next;
    }
    if (late_rc != 0) { /* the store's time, not the clock's failure: no hold */
        at->late_rc = late_rc;
        return false;
    }
    pthread_mutex_lock(&c->lock);
    c->local_until_ms = lmca__mono_ms() + LOCAL_HOLD_MS;
    pthread_mutex_unlock(&c->lock);
    return false;
}

/* The next lease's spare records: this handle's rate over the last lease, for
   LEASE_MS, no more than twice what the last lease's spare served, plus one,
   and at most 1 / LEASE_SHARE of a second's records. Takes what is left of the
   lease and what was returned (the next reservation gives it back to the
   stores' clock). Under the lock. */
static uint64_t
lease_spare(lmca__clock *c, uint64_t step, uint64_t mono, uint64_t *left_us)
{
    uint64_t k = 1000000u / step; /* per_second, as the step rounds it */
    uint64_t left = c->end_us > c->next_us && c->lease_step ? (c->end_us - c->next_us) / c->lease_step : 0;
    uint64_t used = c->spare > left ? c->spare - left : 0;
    uint64_t spare = c->placed * LEASE_MS / (mono > c->refilled_ms ? mono - c->refilled_ms : 1);

    if (spare > 2 * used + 1)
        spare = 2 * used + 1;
    if (spare > k / LEASE_SHARE)
        spare = k / LEASE_SHARE;
    *left_us = left * c->lease_step + c->returned_us;
    c->returned_us = 0;
    c->end_us = c->next_us; /* a second refill meanwhile returns nothing twice */
    c->placed = 0;
    c->refilled_ms = mono;
    return spare;
}

/* Places `records` on the handle's own clock, at 1 / `share` of the rate, from
   its floor and where the others' stores may be by now (the servers' now and
   the lead: reserve()). Under the lock. */
static clock_pos
place_locally(lmca_t *h, uint64_t records, uint64_t share, bool moving)
{
    lmca__clock *c = &h->clock;
    uint64_t now = lmca__server_now_us(h), step = lmca__clock_step(h) * share, base = now;

    if (share > 1) /* alone for want of the shared clock, not by choice: the order */
        base += atomic_load_explicit(&h->cache.lead_seconds, memory_order_relaxed) * 1000000u;
    clock_pos at = {.start = c->last_us > base ? c->last_us : base,
                    .store = c->store_last_us > now ? c->store_last_us : now, .step = step};

    c->last_us = at.start + records * step;
    if (!moving)
        c->store_last_us = at.store + records * step;
    return at;
}

/* A store placed at `at`: its void time (the place plus the clock's TTL), and
   in *pace_us its place on the stores' clock, moved up to at - MOVE_LEAD_MAX_US
   when moves led the clock further. Under the lock. */
static uint64_t
void_of(lmca_t *h, uint64_t at, uint64_t *pace_us)
{
    if (*pace_us + MOVE_LEAD_MAX_US < at)
        *pace_us = at - MOVE_LEAD_MAX_US;
    return at + ttl_of(h) * 1000000u;
}

/* Takes `records` places from the lease, if it holds them. Under the lock. */
static bool
from_lease(lmca__clock *c, uint32_t records, uint64_t mono, uint64_t *start, uint64_t *store)
{
    uint64_t need = (uint64_t)records * c->lease_step;

    if (c->expires_ms <= mono || c->next_us + need > c->end_us)
        return false;
    *start = c->next_us;
    *store = c->store_us;
    c->next_us += need;
    c->store_us += need;
    c->placed += records;
    c->head_us = *start > c->head_us ? *start : c->head_us;
    return true;
}

/* Installs the lease of a reservation. Under the lock. */
static void
install_lease(lmca__clock *c, const clock_pos *at, uint64_t records, uint64_t span_records,
              uint64_t mono)
{
    uint64_t need = records * at->step, span = span_records * at->step;

    c->lease_step = at->step;
    c->spare = span_records - records;
    c->next_us = at->start + need;
    c->store_us = at->store + need;
    c->end_us = at->start + span;
    c->expires_ms = mono + LEASE_MS;
    if (c->end_us > c->last_us)
        c->last_us = c->end_us;
    if (at->store + span > c->store_last_us)
        c->store_last_us = at->store + span;
    c->head_us = at->start > c->head_us ? at->start : c->head_us;
    c->placed += records;
}

/* Ends this thread's reservation: the next may start. Under the lock. */
static void
reserved(lmca__clock *c)
{
    c->reserving = false;
    pthread_cond_broadcast(&c->reserved);
}

uint64_t
lmca__clock_place(lmca_t *h, uint32_t records, int64_t limit_us, uint64_t due_ms,
                  uint64_t *pace_us, lmca__placed *how)
{
    lmca__clock *c = &h->clock;
    uint64_t step, spare, left_us = 0, mono, start, store;
    clock_pos at = {0};

    *pace_us = 0;
    *how = LMCA__PLACED;
    if (h->cfg.default_ttl_seconds <= 0) /* never, keep, or the namespace's default */
        return 0;
    if ((step = lmca__clock_step(h)) == 0) { /* no eviction: real time is order enough */
        *pace_us = lmca__server_now_us(h);
        return *pace_us + (uint64_t)h->cfg.default_ttl_seconds * 1000000u;
    }
    mono = lmca__mono_ms();
    pthread_mutex_lock(&c->lock);
    for (;;) {
        if (from_lease(c, records, mono, &start, &store)) {
            *pace_us = store;
            start = void_of(h, start, pace_us);
            pthread_mutex_unlock(&c->lock);
            return start;
        }
        if (!c->reserving)
            break;
        /* One reservation at a time: its lease likely holds this place too. */
        pthread_cond_wait(&c->reserved, &c->lock);
        mono = lmca__mono_ms();
    }
    c->reserving = true;
    spare = lease_spare(c, step, mono, &left_us);
    pthread_mutex_unlock(&c->lock);

    bool shared = h->cfg.shared_clock &&
                  reserve(h, records, spare, left_us, false, 0, limit_us, due_ms * 1000u, &at);

    pthread_mutex_lock(&c->lock);
    if ((shared && at.refused) || (!shared && at.late_rc != 0)) {
        /* Due too far to be kept: no place, so none to give back. A place taken
           only to be dropped stayed a gap on the void clock (the stores' clock
           had it back): with 4 writers of 4 MiB on 512 MiB the void clock ran
           minutes ahead of the stores', and past MOVE_LEAD_MAX_US every put was
           due too far. The lease's rest, not added either, goes back again. */
        c->returned_us += left_us;
        reserved(c);
        pthread_mutex_unlock(&c->lock);
        *pace_us = at.store;
        *how = at.late_rc == LMCA_EFULL  ? LMCA__PLACE_FULL
               : at.late_rc == LMCA_EBUSY ? LMCA__PLACE_BUSY
                                          : LMCA__PLACE_AHEAD;
        return 0;
    }
    if (!shared) { /* its own clock: the records' (or every record's) refused */
        LMCA__COUNT(h, clock_local);
        at = place_locally(h, records, h->cfg.shared_clock ? LOCAL_SHARE : 1, false);
        spare = 0;
    }
    install_lease(c, &at, records, records + spare, mono);
    reserved(c);
    *pace_us = at.store;
    start = void_of(h, at.start, pace_us);
    pthread_mutex_unlock(&c->lock);
    return start;
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
lmca__clock_move(lmca_t *h, uint32_t records, uint64_t bytes, bool hint, uint64_t *step_us,
                 bool *unbudgeted)
{
    lmca__clock *c = &h->clock;
    clock_pos at;

    uint64_t start;

    *unbudgeted = false;
    *step_us = lmca__clock_step(h);
    if (h->cfg.default_ttl_seconds <= 0)
        return 0;
    if (*step_us == 0)
        return lmca__server_now_us(h) + (uint64_t)h->cfg.default_ttl_seconds * 1000000u;
    /* Its own reservation, all of it free: no lease, whose rest would be a
       store's. Moves come in batches (hits.c), so the round trips are few. And
       one reservation of a handle at a time, stores' or moves': a pool's 8
       workers each moving a batch at once would queue 8 writes a handle on the
       one record, and 3 writers past the server's transaction-pending-limit
       (20), which answers key busy. */
    pthread_mutex_lock(&c->lock);
    while (c->reserving)
        pthread_cond_wait(&c->reserved, &c->lock);
    c->reserving = true;
    pthread_mutex_unlock(&c->lock);
    bool shared = h->cfg.shared_clock && reserve(h, records, 0, 0, true, bytes, 0, 0, &at);

    pthread_mutex_lock(&c->lock);
    reserved(c);
    if (shared && at.unbudgeted) { /* the budget is spent: no move, no place */
        pthread_mutex_unlock(&c->lock);
        *unbudgeted = true;
        return 0;
    }
    /* A hit's move is a hint: placed on the handle's own clock, at an eighth of
       the rate, a batch of them ran that clock minutes ahead, and the next
       reservation's floor carried it into the shared order, where every store
       was then due too far (512 MiB of memory, 4 MiB chunks: a stripe out of
       space refused the clock's record). It waits for the clock instead. */
    if (hint && h->cfg.shared_clock && !shared) {
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    if (!shared) {
        LMCA__COUNT(h, clock_local);
        at = place_locally(h, records, h->cfg.shared_clock ? LOCAL_SHARE : 1, true);
    } else if (at.start + records * at.step > c->last_us) {
        c->last_us = at.start + records * at.step;
    }
    c->head_us = at.start > c->head_us ? at.start : c->head_us;
    start = at.start + ttl_of(h) * 1000000u;
    pthread_mutex_unlock(&c->lock);
    *step_us = at.step;
    return start;
}

uint64_t
lmca__clock_head(lmca_t *h)
{
    uint64_t base, head;

    pthread_mutex_lock(&h->clock.lock);
    base = lmca__server_now_us(h);
    head = h->clock.head_us > base ? h->clock.head_us : base;
    head += ttl_of(h) * 1000000u;
    pthread_mutex_unlock(&h->clock.lock);
    return head;
}
