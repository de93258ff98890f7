/*
 * wire.h - the only part of the engine that talks to libaerospike.
 *
 * Everything above this interface speaks in key strings, small bins and payload
 * buffers owned by the caller. Payloads are sent from the caller's buffer and
 * received into it: with the fast_path setting, single-record reads and writes
 * go through fast.c, which does so without a client-side copy (DESIGN.md, "The
 * fast path"); batch calls, scans, touches and info use the client's API.
 *
 * Nothing here interprets what it reads: bins reach the schema's decoders as
 * they came, typed, and the schema decides what is valid (schema.c).
 *
 * All calls are thread-safe on one lmca__wire and return lmca_status codes;
 * Aerospike results are mapped to them in one place (wire.c, status_of).
 */
#ifndef LMCA_WIRE_H
#define LMCA_WIRE_H

#include "record.h"

typedef struct lmca__wire lmca__wire;

int lmca__wire_open(const lmca_config_t *cfg, lmca__wire **out, lmca_err_t *err);
void lmca__wire_close(lmca__wire *w);

/* Single-record puts and gets so far, by path (lmca_stats_t). */
void lmca__wire_paths(lmca__wire *w, uint64_t *fast_ops, uint64_t *client_ops);

/* Info request to any node; `*answer` is malloc'd ("req\tvalue\n"), free() it. */
int lmca__wire_info(lmca__wire *w, const char *req, char **answer, lmca_err_t *err);

/* One node's answer, as it came ("req\tvalue\n", or "" when empty); the callee
   may write into it. Everything is valid during the call only. Return false to
   stop before the next node. */
typedef bool (*lmca__info_cb)(void *udata, const char *node, const char *address,
                              char *answer);

/* Info request to every node of the client's view, one after the other.
   @return LMCA_OK (also when cb stopped it) or the first node's error; an
   error answer ERROR:4 is LMCA_EINVAL, others as every call maps them. */
int lmca__wire_info_each(lmca__wire *w, const char *req, lmca__info_cb cb, void *udata,
                         lmca_err_t *err);

/* Nodes in the client's current view. */
uint32_t lmca__wire_nodes(lmca__wire *w);

/* Replaces the record `key` with `bins`; `ttl` as in as_record.ttl;
   `timeout_ms` the call's total timeout when below write_timeout_ms (0: that). */
int lmca__wire_write(lmca__wire *w, const char *key, const lmca__bin *bins, unsigned n,
                     uint32_t ttl, uint32_t timeout_ms, lmca_err_t *err);

/*
 * Reads `key`: the bins named in `names` (NULL-terminated; NULL = all). The bin
 * called `payload` (may be NULL) goes to r->dst, the others to r->cb.
 * @return r->result: LMCA_OK, LMCA_MISS, or an error (message in err).
 */
int lmca__wire_read(lmca__wire *w, const char *key, const char *const *names,
                    const char *payload, lmca__read *r, lmca_err_t *err);

/*
 * The same for `n` records in batch calls; rs[i] answers keys[i]. Every
 * rs[i].result is set: a row's own status, or the call's error when the whole
 * call failed.
 * @return LMCA_OK, or the first error (call or row), with its message in err.
 */
int lmca__wire_read_many(lmca__wire *w, const char *const *keys, size_t n,
                         const char *const *names, const char *payload, lmca__read *rs,
                         lmca_err_t *err);

/* One record of a batch write. */
typedef struct lmca__row {
    const char *key;
    const lmca__bin *bins;
    unsigned nbins;
    uint32_t ttl;
    bool touch;  /* a touch of an existing record (plus `bins`), not a replace */
    int result;  /* out: LMCA_OK, LMCA_MISS (touch of a missing record), error */
} lmca__row;

/* Batch write: every row replaced by its bins (or touched), with its TTL.
   Every rows[i].result is set.
   @return LMCA_OK when every row succeeded (a touch's miss included), else the
   first failing row's (or the call's) error, with its message in err.
   `timeout_ms` as for lmca__wire_write. */
int lmca__wire_write_many(lmca__wire *w, lmca__row *rows, size_t n, uint32_t timeout_ms,
                          lmca_err_t *err);

/* @return LMCA_OK, LMCA_MISS (nothing there), error. */
int lmca__wire_remove(lmca__wire *w, const char *key, lmca_err_t *err);

/* The record's digest, as hex into `out`, which it returns: what logs name a record
   by (spec 4.8: never its key), and what asadm and aql show. */
const char *lmca__wire_digest_hex(lmca__wire *w, const char *key, char out[41]);

/* The same by the record's digest, in `set` (NULL: the chunks' set); with
   `gen` not 0, only if the record's generation is still `gen` (a write since:
   an error, the record stays). */
int lmca__wire_remove_digest(lmca__wire *w, const char *set, const uint8_t digest[20],
                             uint16_t gen, lmca_err_t *err);

/* Batch remove; rows that are missing are fine. Adds to `removed` the rows that
   removed a record and to `failed` those that met an error. */
int lmca__wire_remove_many(lmca__wire *w, const char *const *keys, size_t n, size_t *removed,
                           size_t *failed, lmca_err_t *err);

/* Sets the record's TTL (touch) and writes `bins` in one operate.
   @return LMCA_OK, LMCA_MISS, error. */
int lmca__wire_touch(lmca__wire *w, const char *key, uint32_t ttl, const lmca__bin *bins,
                     unsigned n, lmca_err_t *err);

/* lmca_err_t.as_code of a key busy (AEROSPIKE_ERR_RECORD_BUSY): more writes
   queued on one record than its transaction-pending-limit. LMCA_EBUSY also
   stands for a device overloaded, which is the node's, not the key's. */
#define LMCA__AS_KEY_BUSY 14
/* ... and of a device overloaded (AEROSPIKE_ERR_DEVICE_OVERLOAD): its write
   queue past max-write-cache, which refuses every write of the node. */
#define LMCA__AS_DEVICE_OVERLOAD 18

/* A reservation on a clock record of the shared void-time clock (clock.c), in
   µs of the servers' time (the order is of write times; a record's void time
   is its place plus the clock's TTL): what this handle asks ... */
typedef struct lmca__clock_ask {
    int64_t ttl_s;          /* this handle's TTL: the clock keeps the largest of
                               those asserted in the last hold_ms */
    int64_t hold_ms;
    int64_t span_us;        /* time to reserve: added to the clock */
    int64_t store_us;       /* added to the stores' clock (a lease's unused rest
                               taken off: may be negative) */
    int64_t floor_us;       /* the furthest place this handle knows of */
    int64_t store_floor_us; /* ... and on the stores' clock */
    int64_t catch_up_us;    /* a clock lagging the node's now by more moves up */
    int64_t sane_us;        /* ... and one leading it by more is no clock of ours */
    int64_t limit_us;       /* stores: how far the stores' clock may lead the
                               node's now for this reservation to be made; past
                               it nothing is added and `refused` says so (puts
                               that would only be dropped take no place); 0 = no
                               limit (moves) */
    int64_t credit_add;     /* the touch budget every writer shares: bytes added
                               to the moves' credit (what this handle's stores
                               landed since it last said, times the budget's
                               share) ... */
    int64_t credit_cap;     /* ... up to this much ... */
    int64_t move_bytes;     /* ... and a move's bytes, taken from it: a move is
                               made while the credit is above 0 (it may take it
                               below), else nothing is added and `unbudgeted`
                               says so; 0 = no budget asked (stores, lmca_touch) */
    uint32_t timeout_ms;
} lmca__clock_ask;

/* ... and what the record's node answers: the clock before, both clocks after,
   the clock's TTL, the node's time (ms since the Unix epoch), 1 when the
   stores' clock led past limit_us (nothing reserved), else 0, and 1 when a
   move found no credit (nothing reserved), else 0, and the touch budget's
   credit after it and the most it could hold by then (what every store
   earned, up to its cap). Untrusted: clock.c checks them. */
typedef struct lmca__clock_answer {
    int64_t old_us, next_us, store_us, ttl_s, now_ms, refused, unbudgeted, credit, earned;
} lmca__clock_answer;

/* One reservation: an operate on record `key` of LMCA__CLOCK_SET (never
   expiring; created by the first). The TTL is settled first, then each clock
   moves to max(itself caught up, its floor) + its add, on the node's time,
   atomically; neither adds when the stores' clock leads past limit_us, or when
   a move finds no credit; then the credit takes what it is given and the move,
   and the earned total (capped as the credit) what it is given.
   @return LMCA_OK (out set), LMCA_EUNKNOWN for an answer without the bins, or
   the error of the operate (LMCA_EBUSY for a busy key, LMCA_ETIMEOUT,
   LMCA_ECONNECTION, LMCA_EFULL at stop-writes...). */
int lmca__wire_clock(lmca__wire *w, const char *key, const lmca__clock_ask *ask,
                     lmca__clock_answer *out, lmca_err_t *err);

/* The nodes that hold record `key` of `set` in the client's current map, its
   master first, then its replicas (up to `max` names); 0 when the map has
   none. No I/O. */
unsigned lmca__wire_nodes_of(lmca__wire *w, const char *set, const char *key,
                             char names[][LMCA__NODE_NAME], unsigned max);

/* Small records of one integer bin `bin` in `set` (not the chunks' set), never
   expiring. get: the value and the record's generation; LMCA_MISS when the
   record is absent, or (*gen set, *value 0) when the bin is not an integer.
   put: creates the record when `gen` is 0 (an existing one: an error), else
   replaces it if its generation is still `gen`. remove: if its generation is
   still `gen`; a delete is what a namespace at stop-writes still takes. */
int lmca__wire_int_get(lmca__wire *w, const char *set, const char *key, const char *bin,
                       int64_t *value, uint16_t *gen, lmca_err_t *err);
int lmca__wire_int_put(lmca__wire *w, const char *set, const char *key, const char *bin,
                       int64_t value, uint16_t gen, lmca_err_t *err);
int lmca__wire_int_remove(lmca__wire *w, const char *set, const char *key, uint16_t gen,
                          lmca_err_t *err);

/* A scanned record; everything is valid during the callback only. */
typedef struct lmca__scanned {
    const uint8_t *digest; /* 20 bytes */
    const char *key;       /* stored user key, or NULL */
    const char *set;       /* its set ("" for none) */
    uint32_t ttl;
    uint16_t gen;          /* its generation: a remove can be made conditional on it */
    const lmca__bin *bins;
    unsigned nbins;
} lmca__scanned;

/* Return false to stop the scan. */
typedef bool (*lmca__scan_cb)(void *udata, const lmca__scanned *rec);

/* Scans the chunks' set (or, with `all_sets`, the whole namespace), one record
   at a time on the calling thread, reading only the bins in `names`
   (NULL-terminated), or no bins at all when `names` is NULL. Records with more
   than 16 bins are passed with their first 16. */
int lmca__wire_scan(lmca__wire *w, const char *const *names, bool all_sets, lmca__scan_cb cb,
                    void *udata, lmca_err_t *err);

#endif /* LMCA_WIRE_H */
