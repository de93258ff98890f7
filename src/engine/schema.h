/*
 * schema.h - the meta + segment record layout (spec 4.3), in one place: record
 * keys, bin names, what a put writes, and the decoders that judge what a read
 * brings back. The read, write and scan paths use nothing else to know the
 * layout, so a schema change is made here.
 *
 * The decoders treat every bin as untrusted input (a packet parser's rules):
 * each bin is checked for its type and range as it arrives, the record as a
 * whole for missing, repeated and unknown bins and for sizes that agree with
 * each other, before any size is used to read or copy. tests/fuzz drives them.
 */
#ifndef LMCA_SCHEMA_H
#define LMCA_SCHEMA_H

#include "wire.h"

/* Batch calls carry at most this many payload bytes, well below the 128 MiB
   proto limit both sides enforce. */
#define LMCA__BATCH_BYTES_MAX (32ull * 1024 * 1024)
/* Most bins a meta record has (ver state nseg seg_b tot_b wid created_at pin
   crc32 serde ttl_class md b). */
#define LMCA__META_BINS 13
/* Most bins a segment record has (b wid crc32). */
#define LMCA__SEGMENT_BINS 3
/* Longest state string any schema version writes ("tombstone"). */
#define LMCA__STATE_MAX 16

uint32_t lmca__crc32(const void *p, size_t n);
/* The CRC of a payload continued over `n` more bytes: lmca__crc32(NULL, 0) to
   start, then this over its parts in order. */
uint32_t lmca__crc32_more(uint32_t crc, const void *p, size_t n);

/* Every small bin of the schema (all but the payload b), NULL-terminated: what
   stat and scans read, so they never move a payload. Segment records hold wid
   (and crc32), so a scan selecting these sees them too. */
extern const char *const lmca__small_names[];

/* The bins that make a chunk present (ver state nseg seg_b tot_b wid): what
   exists, prefix, remove and touch read. Half the small bins, a third of the
   cost of a 256-key lookup (DESIGN.md, "Present"). */
extern const char *const lmca__presence_names[];

/* ---------------------------------------------------------------------------
 * Meta records.
 */

/* What a meta read asks for (lmca__meta_begin flags). */
enum {
    LMCA__WANT_MD = 1,  /* copy md into m->md */
    LMCA__PRESENCE = 2  /* only lmca__presence_names were read: judge those */
};

typedef struct lmca__meta_reader {
    lmca_meta_t *m;
    unsigned flags; /* LMCA__WANT_MD, LMCA__PRESENCE */
    unsigned seen;  /* one bit per schema bin seen */
    bool ready;     /* state == "ready" */
    bool nomem;     /* copying md failed */
    char why[112];  /* the first problem found, "" while none */
} lmca__meta_reader;

/* Starts decoding into `m` (zeroed). */
void lmca__meta_begin(lmca__meta_reader *r, lmca_meta_t *m, unsigned flags);
/* Takes one bin (an lmca__bin_cb). */
void lmca__meta_bin(void *udata, const lmca__bin *b);

/*
 * The verdict on a decoded meta record. `payload` is the read's outcome for the
 * payload bin, or NULL when the payload was not asked for.
 * @return LMCA_OK (a complete chunk whose sizes agree), LMCA_MISS (not ready,
 *   or corrupt: then r->why says why), or LMCA_ENOMEM. On anything but LMCA_OK,
 *   m->md is freed.
 */
int lmca__meta_verdict(lmca__meta_reader *r, const lmca__read *payload);

/* A meta read as a whole: the row's result, then the verdict (with the payload
   bin judged when the read asked for it); counts and logs a corrupt record as
   a miss. Returns what the caller reports for the key. */
int lmca__meta_result(lmca_t *h, const char *mkey, lmca__meta_reader *r, const lmca__read *rd,
                      bool with_payload);

/* Reads the small bins of `key`'s meta record and judges them (read.c): with
   LMCA__PRESENCE, the one rule for "present" that exists, prefix, remove and
   touch share; else every small bin, for stat. */
int lmca__read_small(lmca_t *h, const char *key, lmca_meta_t *meta, unsigned flags,
                     lmca_err_t *err);

/* The same (every small bin, as for stat) for keys[0, n) in one batch call,
   n <= 4096, keys already checked: metas[i] and rcs[i] answer keys[i], a row's
   own verdict or the call's error. Returns LMCA_OK, or LMCA_ENOMEM (no row
   read, rcs untouched). */
int lmca__read_small_many(lmca_t *h, const char *const *keys, size_t n, lmca_meta_t *metas,
                          int *rcs, lmca_err_t *err);

/* Fills `bins` (LMCA__META_BINS long) for the meta record publishing `m`;
   returns the count. `payload` goes inline when m->nseg == 1. */
unsigned lmca__meta_bins(lmca__bin *bins, const lmca_meta_t *m, const void *payload,
                         const lmca_put_opts_t *opts);

/* LMCA_OK, or LMCA_EINVAL naming the option that is too long. */
int lmca__check_opts(const char *key, const lmca_put_opts_t *opts, lmca_err_t *err);

/* ---------------------------------------------------------------------------
 * Segment records.
 */

typedef struct lmca__seg_reader {
    uint64_t wid;
    uint32_t crc32;
    unsigned seen;
    char why[112];
} lmca__seg_reader;

void lmca__segment_bin(void *udata, const lmca__bin *b);

/* Judges segment `index` of `meta` as read (`rd`, decoded by `r`), counting and
   logging nothing: an lmca_seg_state, or rd's error (< 0). For CORRUPT, `why`
   (`cap` bytes) says why and *crc_failed tells a failed CRC of its own. */
int lmca__segment_judge(const lmca_meta_t *meta, uint32_t index, const lmca__seg_reader *r,
                        const lmca__read *rd, char *why, size_t cap, bool *crc_failed);

/* Judges segment `index` of `meta` as read (`rd`, decoded by `r`): LMCA_OK when
   it is there, whole, of this write and matches its CRC; else LMCA_MISS, counted
   as torn (missing, another write) or corrupt, and logged; or rd's error. */
int lmca__segment_result(lmca_t *h, const char *skey, const lmca_meta_t *meta, uint32_t index,
                         const lmca__seg_reader *r, const lmca__read *rd);

/* Fills `bins` (LMCA__SEGMENT_BINS long) for one segment; returns the count. */
unsigned lmca__segment_bins(lmca__bin *bins, const lmca_meta_t *m, const void *src, size_t len,
                            bool crc);

/* ---------------------------------------------------------------------------
 * Writes and batches.
 */

/* A fresh write id: never 0, distinct across handles and processes. */
uint64_t lmca__new_wid(lmca_t *h);

/* Records of `bytes` go this many to a batch call; 1 = one call each. */
uint32_t lmca__batch_rows(const lmca_t *h, uint64_t bytes);

#endif /* LMCA_SCHEMA_H */
