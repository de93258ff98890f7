/*
 * schema.h - the meta + segment record layout (spec 4.3), shared by the read,
 * write and scan paths: bin names, decoding of a meta record, segment checks.
 */
#ifndef LMCA_SCHEMA_H
#define LMCA_SCHEMA_H

#include "wire.h"

#define LMCA__SCHEMA_VERSION 1
/* Batch calls carry at most this many payload bytes, well below the 128 MiB
   proto limit both sides enforce. */
#define LMCA__BATCH_BYTES_MAX (32ull * 1024 * 1024)
/* Most bins a meta record has (ver state nseg seg_b tot_b created_at pin crc32
   serde ttl_class md b). */
#define LMCA__META_BINS 12

uint32_t lmca__crc32(const void *p, size_t n);

/* Every bin of a meta record but its payload b, NULL-terminated: what stat and
   scans read, so they never move a payload. */
extern const char *const lmca__meta_names[];

/* Decoding state of one meta record; lmca__meta_bin is its lmca__bin_cb. */
typedef struct lmca__meta_reader {
    lmca_meta_t *m;
    bool ready;     /* state == "ready" */
    bool has_state; /* a state bin at all: a meta record, not a segment */
    bool bad;       /* a bin of the wrong type or size */
} lmca__meta_reader;

/* Starts decoding into `m` (clears everything but the md bytes). */
void lmca__meta_begin(lmca__meta_reader *r, lmca_meta_t *m);
void lmca__meta_bin(void *udata, const lmca__bin *b);

/* A ready meta record whose sizes agree; with `payload` (the sink of its b bin,
   or NULL), a single-record chunk must also carry exactly tot_b bytes. Anything
   else reads as a miss: no complete put published it. */
bool lmca__meta_complete(const lmca__meta_reader *r, const lmca__sink *payload);

/* Fills `bins` (LMCA__META_BINS long) for a meta record; returns the count. */
unsigned lmca__meta_bins(lmca__bin *bins, const lmca_meta_t *m, const void *payload,
                         const lmca_put_opts_t *opts);

/* LMCA_OK, or LMCA_EINVAL naming the option that is too long. */
int lmca__check_opts(const char *key, const lmca_put_opts_t *opts, lmca_err_t *err);

/* A segment's crc32 bin; lmca__segment_bin is its lmca__bin_cb. */
typedef struct lmca__seg_reader {
    bool has_crc32;
    uint32_t crc32;
} lmca__seg_reader;

void lmca__segment_bin(void *udata, const lmca__bin *b);

/* LMCA_OK if the received segment is whole (`want` bytes) and matches its CRC. */
int lmca__segment_ok(const lmca__sink *sink, const lmca__seg_reader *r, uint64_t want);

/* Records of `bytes` go this many to a batch call; 1 = one call each. */
uint32_t lmca__batch_rows(const lmca_t *h, uint64_t bytes);

#endif /* LMCA_SCHEMA_H */
