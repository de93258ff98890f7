/*
 * soak.h - what bench/c/soak.c and bench/c/soak_workload.c share: the soak's
 * options and state. soak.c drives the pool (submits, waits, drains) and
 * reports; soak_workload.c plans the batches, writes their payloads and checks
 * what GET hits return. See soak.c for the soak as a whole.
 */
#ifndef LMCA_BENCH_SOAK_H
#define LMCA_BENCH_SOAK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lmca.h"
#include "lmca_async.h"

#define MAX_KEYS 16          /* most keys in one batch (EXISTS, PREFIX) */
#define MAX_DATA_KEYS 8      /* most keys in a SET or GET: buffers per class >= this */
#define MAX_WRONG_PRINTED 10
#define ERR_KINDS 16         /* -status of LMCA_E*, 0 for anything else */
#define MIB (1024.0 * 1024.0)

typedef struct {
    const char *hosts, *ns, *set;
    double duration_s, interval_s;
    unsigned workers, inflight, keyspace;
    int64_t ttl;
    double max_rss_growth_mib, inflight_mib;
    size_t max_chunk;
    bool allow_errors;
    const char *settings[32]; /* -o key=value, applied in order */
    unsigned nsettings;
} opts_t;

typedef struct {
    size_t bytes;
    unsigned weight;  /* how often a SET picks it; 0 = disabled */
    unsigned share;   /* per mille of --inflight-mib for its buffers */
    unsigned count, nfree;
    uint8_t *block;   /* `count` buffers of `bytes`, one allocation */
    uint8_t **free;   /* stack of free buffers */
} size_class;

/* Entries of soak_workload.c's size-class table; a constant here because
   soak_t holds one size_class per entry (soak_workload.c asserts the count). */
#define NCLASSES 7

typedef struct {
    uint32_t gen; /* generation of the last SET submitted; 0 = never */
    uint8_t cls;  /* its size class: what a GET of the key asks for */
} key_state;

typedef enum { SLOT_FREE, SLOT_PLANNED, SLOT_BUSY } slot_state;

/* One batch: planned, then in flight until its completion is drained. */
typedef struct {
    slot_state state;
    uint64_t id;
    lmca_op op;
    lmca_prio prio;
    bool with_opts;
    size_t n;
    uint32_t key[MAX_KEYS];
    uint8_t cls[MAX_KEYS];
    uint8_t *buf[MAX_KEYS]; /* owned by the pool while BUSY */
    size_t len[MAX_KEYS];
} slot_t;

/* Counters, per interval and in total. */
enum {
    N_GET, N_SET, N_EXISTS, N_PREFIX, N_DELETE, /* batches completed, by op - 1 */
    N_HIT, N_MISS, N_WRONG,                     /* GET keys */
    N_STORED, N_UNSTORED,                       /* SET keys */
    N_FOUND, N_ABSENT,                          /* EXISTS and PREFIX keys */
    N_REMOVED, N_NOTHING,                       /* DELETE keys */
    N_ERRORS,                                   /* failed batches and refused submits */
    N_COUNT
};

typedef struct {
    opts_t o;
    lmca_t *h;
    lmca_pool_t *pool;
    uint64_t rng;
    unsigned run;
    size_class cls[NCLASSES];
    unsigned class_weights;
    key_state *keys;
    slot_t *slots;
    slot_t *waiting;            /* planned, waiting for buffers */
    unsigned inflight;
    double bytes_inflight;
    double inflight_area, bytes_area, sampled_at; /* in flight x seconds, for means */
    double last_inflight, last_bytes_inflight;
    uint64_t submitted, taken, last_id;
    uint64_t unexpected;        /* completions of no batch in flight */
    uint64_t lost_wakeups;      /* times completions waited with the eventfd quiet */
    uint64_t never_completed;
    double unsignalled_since;   /* completions seen waiting unsignalled since, or 0 */
    uint64_t iv[N_COUNT], total[N_COUNT];
    uint64_t errors[ERR_KINDS];
    bool error_printed[ERR_KINDS];
    unsigned wrong_printed;
    atomic_uint log_printed;
    double start, last_report;
    unsigned reports;
    lmca_pool_stats_t pool_at_report;
    lmca_stats_t engine_at_report;
    double rss_warm, rss_max, rss_end;
} soak_t;

/* soak_workload.c */
uint64_t splitmix64(uint64_t x);
void key_name(const soak_t *s, uint32_t key, char *out, size_t size);
bool classes_init(soak_t *s);
void plan_batch(soak_t *s, slot_t *sl);
bool acquire_buffers(soak_t *s, slot_t *sl);
void release_buffers(soak_t *s, slot_t *sl);
void prepare_buffers(soak_t *s, slot_t *sl);
void check_hit(soak_t *s, const slot_t *sl, size_t i);

#endif
