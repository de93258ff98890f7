/*
 * wire.h - the only part of the engine that talks to libaerospike.
 *
 * Everything above this interface speaks in key strings, small bins and payload
 * buffers owned by the caller. Payloads are sent from the caller's buffer and
 * received into it, so a zero-copy data path (a client that writev()s the
 * caller's buffer and recv()s straight into the destination, see DESIGN.md) can
 * replace the payload calls here without touching the schema or the engine.
 *
 * All calls are thread-safe on one lmca__wire and return lmca_status codes;
 * Aerospike results are mapped to them in one place (wire.c, map_error).
 */
#ifndef LMCA_WIRE_H
#define LMCA_WIRE_H

#include "internal.h"

typedef struct lmca__wire lmca__wire;

typedef enum { LMCA__INT = 1, LMCA__STR, LMCA__BLOB } lmca__type;

/* One bin. For STR, `p` is NUL-terminated; for BLOB, `p`/`len` stay owned by
   the caller on writes and point into the client's record on reads. */
typedef struct lmca__bin {
    const char *name;
    lmca__type type;
    int64_t i;
    const void *p;
    size_t len;
} lmca__bin;

/* Where a read puts its payload bin: received into `dst` when it fits `cap`. */
typedef struct lmca__sink {
    void *dst;
    size_t cap;
    void *udata; /* passed to the lmca__bin_cb of this record's other bins */
    size_t len;  /* out: the stored bin's size (even when it did not fit) */
    bool found;  /* out: the bin exists */
} lmca__sink;

/* Small bins of a read record, one call per bin, while the record is alive. */
typedef void (*lmca__bin_cb)(void *udata, const lmca__bin *bin);

/* What a read learns besides bins. */
typedef struct lmca__recinfo {
    uint32_t ttl; /* seconds left; 0xFFFFFFFF never expires */
} lmca__recinfo;

int lmca__wire_open(const lmca_config_t *cfg, lmca__wire **out, lmca_err_t *err);
void lmca__wire_close(lmca__wire *w);

/* Info request to any node; `*answer` is malloc'd ("req\tvalue\n"), free() it. */
int lmca__wire_info(lmca__wire *w, const char *req, char **answer, lmca_err_t *err);

/* Replaces the record `key` with `bins`; `ttl` as in as_record.ttl. */
int lmca__wire_write(lmca__wire *w, const char *key, const lmca__bin *bins, unsigned n,
                     uint32_t ttl, lmca_err_t *err);

/*
 * Reads `key`: bins named in `names` (NULL-terminated; NULL = all). The bin called
 * `payload` goes to `sink`, the others to `cb`. @return LMCA_OK, LMCA_MISS, error.
 */
int lmca__wire_read(lmca__wire *w, const char *key, const char *const *names,
                    const char *payload, lmca__sink *sink, lmca__bin_cb cb, void *udata,
                    lmca__recinfo *info, lmca_err_t *err);

/* Batch: every record of `keys`, all bins; `payload` into sinks[i], others to
   cb(sinks[i].udata, bin). results[i] is every row's status (LMCA_OK, LMCA_MISS
   or an error; all rows carry the call's error when the call itself failed).
   @return LMCA_OK, or the first error (call or row), with its message in err. */
int lmca__wire_read_many(lmca__wire *w, const char *const *keys, size_t n, const char *payload,
                         lmca__sink *sinks, lmca__bin_cb cb, int *results, lmca_err_t *err);

/* Batch, no bins: found[i] = 1 if record keys[i] exists. */
int lmca__wire_exists_many(lmca__wire *w, const char *const *keys, size_t n, uint8_t *found,
                           lmca_err_t *err);

/* One record of a batch write. */
typedef struct lmca__row {
    const char *key;
    const lmca__bin *bins;
    unsigned nbins;
    uint32_t ttl;
    int result; /* out: this row's status */
} lmca__row;

/* Batch write: every row replaced by its bins, with its TTL.
   @return LMCA_OK when every row succeeded, else the first failing row's (or
   the call's) error, with its message in err; rows[i].result says which. */
int lmca__wire_write_many(lmca__wire *w, lmca__row *rows, size_t n, lmca_err_t *err);

/* @return LMCA_OK, LMCA_MISS (nothing there), error. */
int lmca__wire_remove(lmca__wire *w, const char *key, lmca_err_t *err);

/* Batch remove; rows that are missing are fine. */
int lmca__wire_remove_many(lmca__wire *w, const char *const *keys, size_t n, lmca_err_t *err);

/* Sets the record's TTL (touch) and writes `bins` in one operate.
   @return LMCA_OK, LMCA_MISS, error. */
int lmca__wire_touch(lmca__wire *w, const char *key, uint32_t ttl, const lmca__bin *bins,
                     unsigned n, lmca_err_t *err);

/* A scanned record; everything is valid during the callback only. */
typedef struct lmca__scanned {
    const uint8_t *digest; /* 20 bytes */
    const char *key;       /* stored user key, or NULL */
    uint32_t ttl;
    const lmca__bin *bins;
    unsigned nbins;
} lmca__scanned;

/* Return false to stop the scan. */
typedef bool (*lmca__scan_cb)(void *udata, const lmca__scanned *rec);

/* Scans the set, reading only the bins in `names` (NULL-terminated), or no bins
   at all when `names` is NULL. */
int lmca__wire_scan(lmca__wire *w, const char *const *names, lmca__scan_cb cb, void *udata,
                    lmca_err_t *err);

#endif /* LMCA_WIRE_H */
