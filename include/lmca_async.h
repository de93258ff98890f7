/*
 * lmca_async.h - the asynchronous layer over the blocking engine: a pool of
 * worker threads sharing one lmca_t, a submission queue with priority bands, and
 * completions signalled through one eventfd.
 *
 * Model
 * -----
 * A caller submits a batch (get, set, exists, prefix or delete over n keys) and
 * gets an id back at once: submission never waits for I/O. The pool splits the
 * batch into tasks (tiles of small chunks that go in one batch call, single
 * chunks, and the segments of large chunks, which different workers fetch
 * concurrently) and runs them on its workers, lowest band first. When the last
 * task of a batch ends, the batch completes: exactly once, with one
 * lmca_completion_t. The eventfd becomes readable; lmca_pool_drain() clears it
 * and hands over every completion so far.
 *
 * Threads
 * -------
 * lmca_pool_submit() and lmca_pool_drain() may be called from any threads, also
 * concurrently. lmca_pool_shutdown() and lmca_pool_destroy() must not race with
 * other calls on the pool. The workers never call back into the caller: results
 * travel only through completions.
 *
 * Ownership and lifetimes
 * -----------------------
 * Keys are copied at submit. Buffers are not: every buffer (and md blob) passed
 * to a submit must stay valid and unmoved until its batch's completion has been
 * drained; the pool writes get buffers and reads set buffers until then. The
 * caller owns the lmca_t, which must outlive the pool. Each drained completion is
 * the caller's, to free with lmca_completion_free().
 *
 * Contract (as libuv's): a submit that returns an error never completes; an
 * accepted submit completes exactly once, with LMCA_ECANCELED if the pool was
 * shut down before it ran.
 */
#ifndef LMCA_ASYNC_H
#define LMCA_ASYNC_H

#include "lmca.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lmca_pool lmca_pool_t;

typedef enum {
    LMCA_OP_GET = 1,    /* read each key's chunk into its buffer */
    LMCA_OP_SET = 2,    /* store each buffer under its key */
    LMCA_OP_EXISTS = 3, /* per-key presence, batch reads of the presence bins */
    LMCA_OP_PREFIX = 4, /* count of leading hits, likewise */
    LMCA_OP_DELETE = 5, /* remove each key's chunk */
    LMCA_OP_STAT = 6,   /* read each key's metadata (md included) and hold a
                           one-record chunk's payload: the completion's gets */
    LMCA_OP_FILL = 7,   /* finish gets a STAT began, into the given buffers */
    LMCA_OP_TOUCH = 8   /* refresh each key's TTL; with pin, never expire */
} lmca_op;

/*
 * Priority bands, lowest first, in the order of LMCache's Redis connector (spec
 * 4.2.4): lookups are never starved by stores.
 */
typedef enum {
    LMCA_PRIO_DEFAULT = 0, /* the op's own: EXISTS/PREFIX PEEK, GET GET, SET/DELETE PUT */
    LMCA_PRIO_PEEK = 1,
    LMCA_PRIO_PREFETCH = 2,
    LMCA_PRIO_GET = 3,
    LMCA_PRIO_PUT = 4
} lmca_prio;

/* What to submit. Arrays hold `n` entries; the pool reads them during submit only,
   except the buffers they point to (see Ownership above). */
typedef struct lmca_batch {
    lmca_op op;
    lmca_prio prio;
    size_t n;
    const char *const *keys;
    void *const *bufs;        /* GET, FILL: destinations; SET: sources; else NULL */
    const size_t *lens;       /* their sizes (FILL: at least each get's meta.tot_b) */
    const lmca_put_opts_t *opts; /* SET only: n entries, or NULL for defaults */
    lmca_get_t *gets;         /* FILL only: the gets a STAT completion gave for
                                 these keys. An accepted submit takes them over
                                 (their held payloads and md): do not use or
                                 release them after; a refused one leaves them
                                 yours. Their key pointers are not used. */
    bool pin;                 /* TOUCH: pin (never expire) instead of the default TTL */
    void *udata;              /* returned in the completion untouched */
} lmca_batch_t;

/*
 * One finished batch. `results` has `n` entries:
 *   GET     1 if the key's chunk was read whole into its buffer, whose size it
 *           must match exactly; 0 on a miss or an error
 *   SET     1 if stored
 *   EXISTS  1 if a chunk is present (lmca_exists)
 *   DELETE  1 if something was removed
 *   PREFIX  as EXISTS, for the keys looked up; `prefix` holds the count
 *   STAT    1 if gets[i] holds a valid chunk's metadata (and, for a one-record
 *           chunk, its payload): pass it to a FILL once a buffer of
 *           gets[i].meta.tot_b bytes is allocated, or release it
 *   FILL    1 if the chunk was placed whole into its buffer
 *   TOUCH   1 if the chunk's records were touched
 * `status` is LMCA_OK when no key met an error (misses are not errors), else the
 * first error, described in `error` ("<STATUS NAME>: <message>"); LMCA_ECANCELED
 * after a shutdown.
 */
typedef struct lmca_completion {
    uint64_t id;
    lmca_op op;
    int status;
    char error[LMCA_ERRMSG_SIZE];
    size_t n;
    uint8_t *results;
    size_t prefix;
    lmca_get_t *gets; /* STAT: n begun gets. What they hold is the caller's to
                         take (copy a get and zero its held and meta.md) or to
                         leave: lmca_completion_free releases what is left.
                         Their key pointers point into the completion. */
    void *udata;
    struct lmca_completion *next; /* list link for lmca_pool_drain() */
} lmca_completion_t;

/*
 * Starts `workers` threads (1 to 256) over `h`.
 * @return LMCA_OK; LMCA_EINVAL (bad count), LMCA_ENOMEM, LMCA_EINTERNAL (the
 *   eventfd or a thread could not be created; errno in the message).
 */
LMCA_EXTERN int lmca_pool_open(lmca_t *h, unsigned workers, lmca_pool_t **out, lmca_err_t *err);

/* The eventfd that becomes readable when completions are waiting. Owned by the
   pool; valid until lmca_pool_destroy(). Read it only through lmca_pool_drain(). */
LMCA_EXTERN int lmca_pool_fd(const lmca_pool_t *p);

/*
 * Queues a batch.
 * @param[out] id  the id its completion will carry (unique in this pool, from 1).
 * @return LMCA_OK; LMCA_EINVAL (unknown op or band, NULL arrays, a bad key, a
 *   missing buffer); LMCA_ECANCELED (the pool is shut down); LMCA_ENOMEM.
 *   On error nothing was queued and nothing will complete.
 */
LMCA_EXTERN int lmca_pool_submit(lmca_pool_t *p, const lmca_batch_t *batch, uint64_t *id,
                                 lmca_err_t *err);

/*
 * Takes every completion so far, oldest first, as a list linked by `next`
 * (NULL if none), and clears the eventfd's readiness. Never blocks. Also valid
 * after lmca_pool_shutdown(), to collect the cancellations.
 */
LMCA_EXTERN lmca_completion_t *lmca_pool_drain(lmca_pool_t *p);

/* Frees one completion (not the rest of its list), and what its gets still
   hold. NULL is a no-op. */
LMCA_EXTERN void lmca_completion_free(lmca_completion_t *c);

/* Counters since open. */
typedef struct lmca_pool_stats {
    uint64_t submitted, completed, canceled;
    uint64_t queued;           /* tasks waiting now */
    uint64_t bytes_read, bytes_written;
} lmca_pool_stats_t;

LMCA_EXTERN void lmca_pool_stats(lmca_pool_t *p, lmca_pool_stats_t *out);

/*
 * Stops accepting work, cancels every queued task (their batches complete with
 * LMCA_ECANCELED), lets running tasks finish, and joins the workers. After it,
 * every accepted batch has completed; drain to collect them. Idempotent.
 */
LMCA_EXTERN void lmca_pool_shutdown(lmca_pool_t *p);

/* Shuts down if needed, frees undrained completions, closes the eventfd and
   frees the pool. NULL is a no-op. */
LMCA_EXTERN void lmca_pool_destroy(lmca_pool_t *p);

#ifdef __cplusplus
}
#endif
#endif /* LMCA_ASYNC_H */
