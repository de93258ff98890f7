/*
 * internal.h - helpers shared by the engine's source files. Not installed.
 */
#ifndef LMCA_INTERNAL_H
#define LMCA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "lmca.h"

#if defined(__GNUC__)
#define LMCA__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define LMCA__PRINTF(f, a)
#endif

/* Clocks: realtime µs (void times are unix time) and monotonic ms (waits). */
static inline uint64_t
lmca__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static inline uint64_t
lmca__mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#define LMCA__KIB (1024ull)
#define LMCA__MIB (1024ull * 1024ull)

/* Fills `err` (if not NULL) and returns `status`, so that a failure path reads
   `return lmca__fail(err, LMCA_ECONFIG, 0, "...", ...);`. */
int lmca__fail(lmca_err_t *err, int status, int as_code, const char *fmt, ...)
    LMCA__PRINTF(4, 5);

/* Sends one line to the configured log callback, if any. */
void lmca__log(const lmca_config_t *cfg, int level, const char *fmt, ...)
    LMCA__PRINTF(3, 4);

/*
 * Every allocation of the engine and the asynchronous layer goes through these
 * (alloc.c), so that a test can make any one of them fail: they are weak, and a
 * test program may define its own (tests/c/test_alloc.c).
 */
void *lmca__malloc(size_t size);
void *lmca__calloc(size_t n, size_t size);

/* n * each + extra, or SIZE_MAX when that overflows (malloc then fails). */
size_t lmca__size(size_t n, size_t each, size_t extra);

/*
 * One allocation holding `n` record keys (LMCA__RECKEY_SIZE bytes each, and the
 * array of pointers to them) followed by `extra` bytes per key for the caller's
 * arrays, 16-byte aligned, at lmca__slab_extra(). The one place that sizes key
 * slabs, with one overflow check. Free with free(keys).
 * @return the key pointers, or NULL with LMCA_ENOMEM in err (`what` names the
 *   call in the message).
 */
char **lmca__key_slab(size_t n, size_t extra, const char *what, lmca_err_t *err);
void *lmca__slab_extra(char **keys, size_t n);

/* Counters behind lmca_stats_t. */
typedef struct lmca__counters {
    atomic_uint_fast64_t corrupt, torn, crc_mismatch;
    atomic_uint_fast64_t puts_aborted, segments_removed, segments_left;
    atomic_uint_fast64_t guesses_confirmed, guesses_missed;
    atomic_uint_fast64_t puts_retried, write_retries, dropped_full, dropped_busy, dropped_unsent;
    atomic_uint_fast64_t dropped_unreachable, dropped_paced;
    atomic_uint_fast64_t puts_paced;
    atomic_uint_fast64_t clock_reservations, clock_resets, clock_local, clock_fallbacks;
    atomic_uint_fast64_t clock_busy, clock_overloaded;
    atomic_uint_fast64_t hits_touched, hits_fresh, hits_unbudgeted, touch_bytes, touches_failed;
    atomic_uint_fast64_t mends, mended_records;
} lmca__counters;

/* The handle's part of the shared void-time clock (clock.c): its lease of
   places, the furthest places it knows of, its offset to the servers' time and
   which clock record serves it. Guarded by `lock`, but offset_us (atomic). */
typedef struct lmca__clock {
    pthread_mutex_t lock;
    pthread_cond_t reserved;  /* a reservation ended (`reserving` cleared) */
    bool reserving;           /* one thread is reserving (a lease or a move): the others
                                 wait for it */
    uint64_t next_us, end_us; /* the lease: places [next_us, end_us) ... */
    uint64_t lease_step;      /* ... lease_step apart (a fallback's are wider) */
    uint64_t expires_ms;      /* ... usable until then (monotonic) */
    uint64_t refilled_ms;     /* when it was reserved ... */
    uint64_t placed;          /* ... and the records placed since */
    uint64_t spare;           /* records it held beyond the reservation's own */
    uint64_t store_us;        /* the stores' clock at next_us (clock.c) */
    uint64_t returned_us;     /* places reserved and not used, to give back */
    uint64_t last_us;         /* the furthest void place reserved or placed: the floor */
    uint64_t store_last_us;   /* ... and on the stores' clock */
    uint64_t head_us;         /* the newest place handed out */
    uint64_t ttl_s;           /* the clock's TTL (the largest of its writers') */
    atomic_int_fast64_t offset_us; /* the servers' time less CLOCK_MONOTONIC, µs */
    bool time_known;          /* a node told its time ... */
    uint64_t time_err_us;     /* ... to within this ... */
    uint64_t time_at_us;      /* ... at this monotonic µs */
    unsigned home;            /* the clock record that served last ... */
    uint64_t home_until_ms;   /* ... a fallback: until then, then the first again ... */
    uint64_t home_wait_ms;    /* ... this long after the first failed (doubling) */
    uint64_t local_until_ms;  /* no record answered: the handle's own clock till then */
    uint64_t rtt_us;          /* the clock's round trip, a moving mean */
    uint64_t credit_told;     /* the landed bytes the touch budget was told of */
    int64_t credit_seen;      /* the touch budget's credit as the last answer left it ... */
    int64_t credit_full;      /* ... and the most it could hold then (0: none yet) */
} lmca__clock;

/* Chunks a get found, waiting to be touched at the head of the clock (hits.c).
   Guarded by `lock`. */
typedef struct lmca__hit {
    uint32_t nseg;
    uint64_t bytes; /* the chunk's payload: what its move rewrites */
    uint64_t failed_ms; /* when a lost node first refused its move (monotonic) ... */
    uint64_t retry_ms;  /* ... not to go again before then ... */
    bool again;         /* ... and the last one did */
    char key[]; /* NUL-terminated */
} lmca__hit;

typedef struct lmca__hits {
    pthread_mutex_t lock;
    lmca__hit **queue; /* LMCA__HITS_MAX entries, allocated with the first hit */
    size_t n;
    uint64_t first_ms; /* when the oldest was queued (monotonic) */
} lmca__hits;

#define LMCA__HITS_MAX 1024

/* The counter record of the shared clock lives in this set of the namespace. */
#define LMCA__CLOCK_SET "lmca_clock"

/* The most nodes a look reads (Community Edition clusters have at most 8), and
   the longest node name kept. */
#define LMCA__NODES_MAX 64
#define LMCA__NODE_NAME 32

/* One node as mend.c's watch saw it. */
typedef struct lmca__node_watch {
    char name[LMCA__NODE_NAME];
    uint64_t evicted_seen;     /* evicted_objects at the last look */
    uint64_t stalled_since_ms; /* past evict-used-pct, nothing evicted, since; 0 = not */
} lmca__node_watch;

/* What a full namespace needs of a handle (cache.c, plan.c, mend.c). */
typedef struct lmca__cache {
    atomic_uint_fast64_t per_second;    /* the eviction plan, from the last look ... */
    atomic_uint_fast64_t lead_seconds;
    atomic_uint_fast64_t target, records;
    atomic_bool enabled;
    atomic_uint_fast64_t bytes_per_second; /* ... what stores write at its pace */
    atomic_bool device;                 /* ... a node stores on a device */
    atomic_uint_fast64_t cut_us;        /* ... the latest void time NSUP evicted below
                                           on any node, µs since the Unix epoch (0:
                                           none seen) */
    atomic_uint_fast64_t watch_next_ms; /* ... and when to look again (monotonic) */
    pthread_mutex_t plan_lock;          /* plan.c: the last look, and plans made from it */
    struct lmca__looks *last_look;      /* what every node said last */
    atomic_bool plan_guessed;           /* the plan guessed the mean record: again at the
                                           first put */
    atomic_uint upkeep_pools;           /* pools whose workers look and mend
                                           (lmca__upkeep); none: the puts do */
    atomic_uint_fast64_t put_records, put_bytes; /* what this handle's puts wrote */
    atomic_uint_fast64_t landed_bytes;  /* ... and of them, the puts that landed */
    atomic_uint_fast64_t full_until_ms; /* puts are dropped unsent until then */
    atomic_uint_fast64_t landed_ms;     /* when a put last landed */
    atomic_uint_fast64_t pace_head_us;  /* the furthest place on the stores' clock a put
                                           of this handle was given */
    atomic_bool full_known;             /* a put gave up on stop-writes, none landed since */
    atomic_uint_fast64_t warn_next_ms[4]; /* the next warning about drops of each cause
                                             (cache.c drop_cause), not before */
    /* mend.c: the watch's state, on the watching thread only ... */
    lmca__node_watch nodes[LMCA__NODES_MAX];
    size_t nnodes;
    uint64_t stall_ms;                  /* how long a stall lasts before this handle mends */
    atomic_bool mend_due;               /* ... and a mend it asks for (lmca__mend_if_due) */
    atomic_bool mending;                /* one mend at a time in this handle */
    uint64_t lease_absent_ms;           /* the lease record missing at stop-writes, since */
    bool lease_written;                 /* the lease record is known to exist */
    atomic_bool lease_to_restore;       /* a lease taken by a delete, not yet written back */
} lmca__cache;

#define LMCA__COUNT(h, field) atomic_fetch_add_explicit(&(h)->counters.field, 1, memory_order_relaxed)

/* A handle: the settings (strings copied), the limits and one client. */
struct lmca {
    lmca_config_t cfg;
    char *strings; /* one allocation holding cfg's string copies */
    lmca_server_info_t server;
    lmca_limits_t limits;
    struct lmca__wire *wire;
    lmca__counters counters;
    uint64_t wid_seed;            /* random, drawn at open */
    atomic_uint_fast64_t wid_next; /* write ids: a mix of seed and counter */
    lmca__cache cache;
    lmca__clock clock;
    lmca__hits hits;
};

/* Record keys of a chunk: "<key>|m" and "<key>|s|<i>" (spec 4.3.3), schema.c. */
#define LMCA__RECKEY_SIZE (LMCA_KEY_MAX + 16)
void lmca__meta_key(char *out, const char *key);
void lmca__segment_key(char *out, const char *key, uint32_t index);

/* LMCA_OK if `key` is a usable key, else LMCA_EINVAL naming the problem. */
int lmca__check_key(const char *key, lmca_err_t *err);

/* The value of an info answer: after "<request>\t" (the whole answer when it
   has no tab), without trailing newlines; `*n` is its length. limits.c. */
const char *lmca__info_value(const char *info, size_t *n);

/* plan.c: the eviction plan at open, and looks at the namespace while writing
   (at most every 10 s, on one thread); init before, close frees what they keep. */
void lmca__cache_init(lmca_t *h);
void lmca__cache_open(lmca_t *h);
void lmca__cache_close(lmca_t *h);
void lmca__cache_watch(lmca_t *h);
/* Whether a node of the namespace says stop-writes, asked now (a round trip to
   each node); true when none answered. */
bool lmca__cache_stopped(lmca_t *h);
/* Counts a begun put's records and bytes (the mean record the plan may need). */
void lmca__cache_planned(lmca_t *h, uint32_t records, uint64_t bytes);
/* Sleeps before the n-th (0-based) try again of a write that is not a store's
   (the clock's, a touch) that an overloaded device refused: 1 ms doubling to
   16 ms, half of it random. */
void lmca__busy_pause(lmca_t *h, unsigned n);
/* The bytes the namespace holds at capacity, as this handle reckons them (the
   plan's records times its puts' mean record); 0 before its first put. */
uint64_t lmca__cache_held_bytes(lmca_t *h);

/* clock.c: the shared void-time clock, on the servers' time. A place for
   `records` records of a store, as µs of void time (the servers' time: its
   place plus the clock's TTL): 0 when default_ttl_seconds is not positive (the
   TTL is sent as set), now + TTL when the namespace does not evict; *pace_us
   its place on the stores' clock (lmca_put_pace waits while that leads now by
   more than the lead). With `limit_us` > 0, a reservation the stores' clock
   leads the servers' now by more than that is refused: 0, *how
   LMCA__PLACE_AHEAD, and *pace_us where the stores' clock is. With `due_ms` > 0
   (the monotonic ms when the store stops waiting for load), a clock record
   its device still refuses then is given up without a place of the store's
   own: 0, *how LMCA__PLACE_BUSY (load) or LMCA__PLACE_FULL (no free block).
   May take a round trip (a new lease), or wait for another thread's. */
typedef enum { LMCA__PLACED, LMCA__PLACE_AHEAD, LMCA__PLACE_BUSY, LMCA__PLACE_FULL } lmca__placed;
void lmca__clock_init(lmca_t *h);
void lmca__clock_destroy(lmca_t *h);
uint64_t lmca__clock_place(lmca_t *h, uint32_t records, int64_t limit_us, uint64_t due_ms,
                           uint64_t *pace_us, lmca__placed *how);
/* Gives back the places of `records` records that a store reserved and did not
   use (a put placed twice by racing steps); the next reservation frees them. */
void lmca__clock_return(lmca_t *h, uint32_t records);
/* The same for records moved to the head (hits, lmca_touch): it adds no data,
   so it leaves the stores' clock, which puts are paced by, where it is. The
   records' places are *step_us apart from the one returned. A `hint` (a hit's
   move) gets 0 when no clock record answered, and no place. `bytes` are taken
   from the touch budget every writer shares (0: none asked, as lmca_touch's):
   when it is spent, 0, no place, and *unbudgeted. */
uint64_t lmca__clock_move(lmca_t *h, uint32_t records, uint64_t bytes, bool hint,
                          uint64_t *step_us, bool *unbudgeted);
/* The clock's step, 1 s / per_second in µs (at least 1); 0 when the namespace
   does not evict. */
uint64_t lmca__clock_step(lmca_t *h);
/* The newest place this handle handed out, at least now + TTL (µs). */
uint64_t lmca__clock_head(lmca_t *h);
/* The touch budget's credit as the next reservation would find it (the last
   answer's, plus what this handle's stores landed since), per mille of what
   the stores earned (up to its cap): 1000 when no budget is set, nothing was
   earned yet or none of it is spent; 0 when spent. */
unsigned lmca__clock_credit_permille(lmca_t *h);
/* The servers' time, µs since the Unix epoch: this host's monotonic clock plus
   the offset the clock's answers gave (the host's realtime before the first). */
uint64_t lmca__server_now_us(lmca_t *h);

/* hits.c: a get's hit (a valid chunk read whole), queued to be touched at the
   head of the clock unless it is fresh (near the head already) or pinned; and
   touching the queued ones once due (enough of them, or the oldest waited). */
void lmca__hits_init(lmca_t *h);
void lmca__hits_destroy(lmca_t *h);
void lmca__hit_found(lmca_t *h, const char *key, const lmca_meta_t *meta);
/* A get whose meta record did not come in time (timeout, load, a lost node):
   a use all the same; looked up off the get path and moved if there. */
void lmca__hit_unsure(lmca_t *h, const char *key);
void lmca__touch_hits_due(lmca_t *h);

/* mend.c: from each look at the cluster (every node's answer); asks for a mend
   when a node stayed past evict-used-pct with NSUP evicting nothing. */
void lmca__mend_watch(lmca_t *h, const lmca_server_info_t *srv,
                      const char (*names)[LMCA__NODE_NAME], size_t n, uint64_t now_ms);
/* Mends when asked to: one handle of all at a time (a lease), the records of
   the lowest seconds of void time, whole chunks, each removed only if unchanged
   since it was seen. Off the put path: a pool's worker, or the put that looked. */
void lmca__mend_if_due(lmca_t *h);
/* A stall lasts at least this long (and up to as much again, per handle) before
   a mend. */
#define LMCA__STALL_MS 8000u

/* Upkeep: looks at the cluster when due (the plan), then mends when due. A
   pool's workers call it; without a pool, the puts do (lmca__cache_gate). */
void lmca__upkeep(lmca_t *h);

/* Places a begun put on the clock, once, whichever of its steps comes first
   (lmca_put_pace and the steps call it; pinned puts have no place). `bounded`
   (lmca_put_pace): no place when the stores' clock is due past
   max_put_wait_ms (the put keeps void_at 0 and pace_at says where it is), and
   none when the clock's record is refused by its device past max_put_wait_ms
   from the put's start: the put is dropped unsent and LMCA_EBUSY (load) or
   LMCA_EFULL (no free block) returned. Else LMCA_OK. */
int lmca__put_place(lmca_t *h, lmca_put_t *p, bool bounded);

/* The TTL to send now for a record of a chunk due at `void_at`, so that every
   record of the chunk lands in that second: -1 (never) when pinned. */
uint32_t lmca__record_ttl(lmca_t *h, uint64_t void_at, bool pin);

/* Before a put step: LMCA_OK, or LMCA_EFULL (counted as dropped unsent) while
   the namespace is known to be full, or LMCA_EBUSY (dropped_busy) once the put's
   bound is spent (lmca__put_left_ms). Also looks at the namespace when due. */
int lmca__cache_gate(lmca_t *h, lmca_put_t *p, lmca_err_t *err);

/* A put's bound, once it was refused for load (its writes or its clock): the
   larger of max_put_wait_ms and write_timeout_ms from lmca_put_begin, unless
   it waits out stop-writes or a lost node (backpressure_ms). The ms left of it
   (>= 1), 0 when unbounded, -1 spent. */
int64_t lmca__put_left_ms(lmca_t *h, const lmca_put_t *p);

/* Drops `p`, past its bound (dropped_busy): LMCA_EBUSY, in err. */
int lmca__put_spent(lmca_t *h, lmca_put_t *p, lmca_err_t *err);

/* A step of `p` whose write was sent with `timeout_ms` (0: write_timeout_ms)
   returned `rc`: a timeout of a write shortened to the put's bound spent it, and
   the put is dropped (dropped_busy): LMCA_EBUSY, in err. Else `rc`. */
int lmca__put_bounded(lmca_t *h, lmca_put_t *p, int rc, uint32_t timeout_ms, lmca_err_t *err);

/* After a put's commit landed: counts a retried put, opens the gate. */
void lmca__cache_landed(lmca_t *h, lmca_put_t *p);

#endif /* LMCA_INTERNAL_H */
