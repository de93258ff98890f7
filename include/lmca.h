/*
 * lmca.h - lmcache-aerospike engine: LMCache KV chunks stored in Aerospike.
 *
 * Introduction
 * ------------
 * The engine stores opaque byte payloads ("chunks", from hundreds of KiB to tens of
 * MiB) under string keys in one Aerospike namespace and set, using the official C
 * client (libaerospike). A chunk is a meta record "<key>|m" plus, when it does not
 * fit one record, segment records "<key>|s|<i>"; the meta record is written last
 * and marks the chunk complete (state "ready"). Readers see either a complete
 * chunk or a miss, never partial data. DESIGN.md explains the layout and the size
 * rules; the pure functions that choose segment sizes are declared below
 * (lmca_limits_resolve, lmca_plan) so that tools and tests can run them offline.
 *
 * Threads
 * -------
 * One lmca_t holds one libaerospike client (its connection pools and tend thread).
 * Every call on an open handle is thread-safe and blocking: any number of threads
 * may call concurrently. lmca_close() must not race with other calls on the same
 * handle. The engine itself starts no threads besides libaerospike's tend thread.
 *
 * Ownership
 * ---------
 * The engine never keeps a caller's pointer past the return of a call: keys,
 * buffers and options are read (payloads are sent from the caller's buffer and
 * received into it) during the call only. Strings in lmca_config_t are copied at
 * lmca_open().
 *
 * Errors
 * ------
 * See lmca_status.h. Every call returns LMCA_OK, LMCA_MISS where documented, or a
 * negative status; when it fails and `err` is not NULL, `err` says why. The engine
 * never writes to stdout or stderr; warnings and notices go to the log callback.
 *
 * Caveats
 * -------
 * - Do not use a handle in a child after fork(); open a new one there.
 * - Keys are NUL-terminated strings of at most LMCA_KEY_MAX bytes.
 * - Chunks under one key are assumed to be written with identical bytes by
 *   concurrent writers (LMCache keys are content hashes); the engine uses no CAS.
 */
#ifndef LMCA_H
#define LMCA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lmca_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest accepted key, in bytes, without the NUL. */
#define LMCA_KEY_MAX 1024
/* Longest accepted md blob (serialized LMCache RemoteMetadata), in bytes. */
#define LMCA_MD_MAX 8192
/* Longest serde and ttl_class strings, in bytes, without the NUL. */
#define LMCA_TAG_MAX 63

typedef struct lmca lmca_t;

typedef enum { LMCA_COMMIT_ALL = 0, LMCA_COMMIT_MASTER = 1 } lmca_commit_level;
typedef enum {
    LMCA_REPLICA_SEQUENCE = 0,
    LMCA_REPLICA_MASTER = 1,
    LMCA_REPLICA_ANY = 2,
    LMCA_REPLICA_PREFER_RACK = 3
} lmca_replica;

/*
 * Every setting of the connector (spec 4.5.2). Fill it with lmca_config_init(),
 * then set fields directly or by name with lmca_config_set(). Byte sizes of 0 mean
 * "derive from the server" where noted.
 */
typedef struct lmca_config {
    const char *hosts;             /* "h1:3000,h2:3000"; required */
    const char *namespace_;        /* default "lmcache" */
    const char *set;               /* default "kv_chunks" */
    uint64_t target_segment_bytes; /* preferred segment payload; default 4 MiB */
    uint64_t max_segment_bytes;    /* 0 = discovered; clamped to the server */
    uint64_t min_segment_bytes;    /* default 64 KiB */
    uint64_t single_record_threshold_bytes; /* 0 = min(target, max) */
    uint64_t batch_threshold_bytes; /* records up to this go in batch calls */
    int64_t default_ttl_seconds;    /* default 86400; 0 ns default; -1 never */
    uint32_t read_timeout_ms;       /* default 1000 */
    uint32_t write_timeout_ms;      /* default 2000 */
    uint32_t connect_timeout_ms;    /* default 1000; cluster connect at open */
    lmca_commit_level commit_level; /* default ALL */
    lmca_replica replica;           /* default SEQUENCE */
    bool enable_crc32;              /* default false */
    bool send_key;                  /* default false: the key is only hashed */
    uint32_t max_conns_per_node;    /* connection pool size; default 64 */
    const char *username;           /* passed through; EE only */
    const char *password;           /* passed through; EE only */
    const char *tls_name;           /* passed through; EE only */
    lmca_log_cb log_cb;             /* may be NULL */
    void *log_udata;
} lmca_config_t;

/* Fills `cfg` with the defaults above (hosts NULL). Never fails. */
LMCA_EXTERN void lmca_config_init(lmca_config_t *cfg);

/*
 * Sets one field from its name as written in LMCache's extra_config
 * ("target_segment_bytes", "commit_level", ...) and a string value. String
 * values are NOT copied: they must outlive the config (lmca_open copies them).
 * Booleans accept true/false/1/0/yes/no; sizes accept plain integers.
 * @return LMCA_OK, or LMCA_ECONFIG naming the key (unknown key, unparsable or
 *         out-of-range value).
 */
LMCA_EXTERN int lmca_config_set(lmca_config_t *cfg, const char *key, const char *value,
                                lmca_err_t *err);

/*
 * Checks the settings that can be checked without a server.
 * @return LMCA_OK or LMCA_ECONFIG naming the first bad key.
 */
LMCA_EXTERN int lmca_config_validate(const lmca_config_t *cfg, lmca_err_t *err);

/*
 * Opens a handle: validates `cfg`, connects one libaerospike client, reads the
 * namespace's limits (spec 4.3.6) and resolves segment sizes (lmca_limits_resolve).
 * Emits one INFO log line per discovered limit and a WARNING per clamped setting.
 * @param[out] out  the new handle, set only on LMCA_OK.
 * @return LMCA_OK;
 *   LMCA_ECONFIG       a bad setting (the message names the key);
 *   LMCA_ECONNECTION   no node of `hosts` answered;
 *   LMCA_ENAMESPACE    the namespace is unknown to the cluster, or its info
 *                      could not be read (the message holds the server answer);
 *   LMCA_ESERVER_LIMIT the record-size cap is missing, zero or out of range;
 *   LMCA_ETTL          default_ttl_seconds > 0 but the namespace has nsup-period 0;
 *   LMCA_ENOMEM, LMCA_EUNKNOWN.
 */
LMCA_EXTERN int lmca_open(const lmca_config_t *cfg, lmca_t **out, lmca_err_t *err);

/* The handle's settings (its own copies of the strings). Valid until
   lmca_close(). */
LMCA_EXTERN const lmca_config_t *lmca_config(const lmca_t *h);

/* Closes the client and frees the handle. NULL is a no-op. */
LMCA_EXTERN void lmca_close(lmca_t *h);

/* ---------------------------------------------------------------------------
 * Server limits and the shard planner: pure functions, no I/O.
 *
 * Aerospike appends records to write blocks (8 MiB on 7.1+; write-block-size
 * before) and never splits a record across blocks, so a record a little over
 * 1/k of a block wastes the rest of its slot. Segment sizes therefore sit on a
 * grid: slot(k) = block/k (rounded down to 16 bytes, the storage unit) minus
 * LMCA_RECORD_MARGIN for the key, the small bins and the md blob. DESIGN.md has
 * the measurements behind the rule.
 */

/* Room kept in every record for everything but the payload (spec 4.3.6). */
#define LMCA_RECORD_MARGIN (64u * 1024u)
/* Aerospike 7.1+ write block, and the largest record any version accepts. */
#define LMCA_BLOCK_7_1 (8u * 1024u * 1024u)
/* Smallest record-size cap the engine accepts from a server. */
#define LMCA_CAP_MIN (128u * 1024u)
/* Most segments one chunk may have (nseg is a u16 in the schema). */
#define LMCA_MAX_SEGMENTS 65535u

/* What the namespace says about itself (info "namespace/<ns>"). */
typedef struct lmca_server_info {
    uint64_t max_record_size;    /* 0 = not reported */
    uint64_t write_block_size;   /* 0 = not reported (obsolete on 7.1+) */
    uint64_t flush_size;         /* 0 = not reported; informational */
    int64_t nsup_period;         /* -1 = not reported */
    int64_t default_ttl;         /* -1 = not reported */
    bool allow_ttl_without_nsup;
} lmca_server_info_t;

/*
 * Parses the answer to info "namespace/<ns>" (with or without the leading
 * "<request>\t" and trailing newline).
 * @return LMCA_OK; LMCA_ENAMESPACE for an empty answer, an ERROR answer or
 *   "type=unknown" (unknown namespace), quoting the answer;
 *   LMCA_ESERVER_LIMIT for a size field that is not a number, naming it.
 */
LMCA_EXTERN int lmca_server_info_parse(const char *info, lmca_server_info_t *out,
                                       lmca_err_t *err);

/* Sizes in force on a handle. */
typedef struct lmca_limits {
    uint64_t server_cap;        /* record-size cap the server enforces */
    const char *cap_source;     /* "max-record-size" or "write-block-size" */
    uint64_t block_bytes;       /* write block the records pack into */
    uint64_t max_segment_bytes; /* largest record payload, on the grid */
    uint64_t target_segment_bytes;          /* on the grid, <= max */
    uint64_t min_segment_bytes;
    uint64_t single_record_threshold_bytes; /* <= max */
    uint64_t batch_threshold_bytes;
} lmca_limits_t;

/*
 * Derives the limits from the server's answer and the caller's settings
 * (target/max/min/single-record/batch thresholds and default TTL of `cfg`):
 * cap from max-record-size (7.1+) or write-block-size (<= 7.0); block 8 MiB on
 * 7.1+; max = the largest grid size within the cap; settings above it are
 * clamped with a WARNING, settings between grid sizes are lowered to the grid
 * with an INFO note (both through cfg->log_cb).
 * @return LMCA_OK; LMCA_ESERVER_LIMIT (cap missing, zero or outside 128 KiB to
 *   8 MiB); LMCA_ETTL (default_ttl_seconds > 0 with nsup-period 0);
 *   LMCA_ECONFIG (settings that contradict each other, naming the key).
 */
LMCA_EXTERN int lmca_limits_resolve(const lmca_server_info_t *srv, const lmca_config_t *cfg,
                                    lmca_limits_t *out, lmca_err_t *err);

/* The largest grid size (block/k - margin) that is <= bytes, or 0 if none. */
LMCA_EXTERN uint64_t lmca_grid_floor(uint64_t block_bytes, uint64_t cap, uint64_t bytes);

/* The limits resolved at open. Valid until lmca_close(). */
LMCA_EXTERN const lmca_limits_t *lmca_limits(const lmca_t *h);

/* How one payload is split. */
typedef struct lmca_plan {
    uint32_t nseg;   /* 1 = single record (payload inline in the meta record) */
    uint64_t seg_b;  /* bytes in every segment but the last */
    uint64_t last_b; /* bytes in the last segment */
} lmca_plan_t;

/*
 * Splits `payload_bytes`: up to single_record_threshold_bytes, one record;
 * beyond, ceil(payload / target) segments of exactly target bytes (a grid size,
 * so they pack whole write blocks) and a shorter last one.
 * @return LMCA_OK, or LMCA_EINVAL when more than LMCA_MAX_SEGMENTS would be needed.
 */
LMCA_EXTERN int lmca_plan(const lmca_limits_t *limits, uint64_t payload_bytes,
                          lmca_plan_t *plan, lmca_err_t *err);

/* ---------------------------------------------------------------------------
 * Chunks
 */

/* What the meta record of a chunk says (spec 4.3.1). */
typedef struct lmca_meta {
    uint32_t ver;        /* schema version, 1 */
    uint32_t nseg;       /* 1 = payload inline in the meta record */
    uint64_t seg_b;      /* bytes per segment; the last may be shorter */
    uint64_t tot_b;      /* payload bytes */
    bool has_crc32;
    uint32_t crc32;      /* CRC-32 (zlib) of the whole payload */
    int64_t created_at;  /* epoch seconds of the put */
    bool pin;            /* stored never-expiring */
    uint32_t ttl;        /* seconds left, 0xFFFFFFFF = never expires */
    char serde[LMCA_TAG_MAX + 1];
    char ttl_class[LMCA_TAG_MAX + 1];
    size_t md_len;       /* 0 = no md bin */
    uint8_t md[LMCA_MD_MAX];
} lmca_meta_t;

/* Optional attributes of a put; NULL means all defaults. */
typedef struct lmca_put_opts {
    const void *md;        /* opaque RemoteMetadata blob, may be NULL */
    size_t md_len;         /* <= LMCA_MD_MAX */
    const char *serde;     /* informational, e.g. "naive"; may be NULL */
    const char *ttl_class; /* informational, e.g. "session"; may be NULL */
    bool pin;              /* never expire (TTL -1) instead of the default TTL */
} lmca_put_opts_t;

/*
 * Stores `len` bytes from `buf` under `key`: segments first (if any), then the
 * meta record with state "ready". The payload is sent from `buf` as is.
 * An earlier value under `key` is replaced.
 * @return LMCA_OK;
 *   LMCA_EINVAL       bad key, NULL buf with len > 0, md too long, payload beyond
 *                     lmca_plan() limits;
 *   LMCA_ETOO_BIG     the server refused a record as too big (the message gives
 *                     the payload size and the caps, and what to lower);
 *   LMCA_ETTL         the namespace refuses TTL writes (nsup-period 0);
 *   LMCA_ETIMEOUT, LMCA_ECONNECTION, LMCA_EBUSY, LMCA_ENOMEM, LMCA_EUNKNOWN.
 * On failure the key reads as a miss or as its previous value; never partial.
 */
LMCA_EXTERN int lmca_put(lmca_t *h, const char *key, const void *buf, size_t len,
                         const lmca_put_opts_t *opts, lmca_err_t *err);

/*
 * Reads the meta record of `key` (without payload).
 * @return LMCA_OK (meta filled), LMCA_MISS (absent or not ready), or the
 *   transport errors of lmca_put() (LMCA_ETIMEOUT, LMCA_ECONNECTION, LMCA_EBUSY,
 *   LMCA_EUNKNOWN); LMCA_EINVAL for a bad key.
 */
LMCA_EXTERN int lmca_stat(lmca_t *h, const char *key, lmca_meta_t *meta, lmca_err_t *err);

/*
 * Reads the chunk under `key` into `buf` (capacity `cap`): the meta record, then
 * the segments (a batch read for small segments, sequential reads for large
 * ones, see batch_threshold_bytes). `*len` receives the payload size; `meta`
 * (may be NULL) receives the meta record.
 * @return LMCA_OK; LMCA_MISS when the key is absent, not ready, a segment is
 *   missing or short, sizes disagree or the CRC does not match (the buffer's
 *   content is then unspecified); LMCA_EINVAL when `cap` is smaller than the
 *   stored payload (`*len` then holds the needed size); the transport errors of
 *   lmca_stat().
 */
LMCA_EXTERN int lmca_get(lmca_t *h, const char *key, void *buf, size_t cap, size_t *len,
                         lmca_meta_t *meta, lmca_err_t *err);

/*
 * @return LMCA_OK if a ready chunk is stored under `key`, LMCA_MISS if not, or
 *   the transport errors of lmca_stat().
 */
LMCA_EXTERN int lmca_exists(lmca_t *h, const char *key, lmca_err_t *err);

/*
 * Looks up `n` keys in one batch read of their meta records with no bins and
 * counts the leading run of hits: [hit, hit, miss, hit] gives 2.
 * @param[out] found  per-key 1/0, may be NULL.
 * @return LMCA_OK (count set) or the transport errors of lmca_stat().
 */
LMCA_EXTERN int lmca_prefix(lmca_t *h, const char *const *keys, size_t n, size_t *count,
                            uint8_t *found, lmca_err_t *err);

/*
 * Removes the meta record (so readers miss at once), then its segments, best
 * effort: segments that cannot be removed expire by TTL.
 * @return LMCA_OK, LMCA_MISS (nothing stored), or transport errors.
 */
LMCA_EXTERN int lmca_remove(lmca_t *h, const char *key, lmca_err_t *err);

/*
 * Refreshes the TTL of the chunk's records: with pin, they never expire and the
 * meta record's pin bin becomes true; without, they get default_ttl_seconds again
 * and pin becomes false. Segments are touched before the meta record.
 * @return LMCA_OK, LMCA_MISS, LMCA_ETTL, or transport errors.
 */
LMCA_EXTERN int lmca_touch(lmca_t *h, const char *key, bool pin, lmca_err_t *err);

/* @return LMCA_OK when the cluster answers, else LMCA_ECONNECTION or LMCA_ETIMEOUT. */
LMCA_EXTERN int lmca_ping(lmca_t *h, lmca_err_t *err);

/* ---------------------------------------------------------------------------
 * Records one at a time, for the asynchronous layer (which spreads one chunk's
 * segments over several connections) and for tools. lmca_put/lmca_get are
 * built from these.
 */

/*
 * Reads the meta record of `key`; if the chunk is a single record and `buf` is
 * not NULL with `cap` >= its size, the payload is received into `buf` as well.
 * @param[out] inline_len  payload bytes received into buf, or 0.
 * @return as lmca_stat().
 */
LMCA_EXTERN int lmca_read_meta(lmca_t *h, const char *key, lmca_meta_t *meta, void *buf,
                               size_t cap, size_t *inline_len, lmca_err_t *err);

/*
 * Reads segment `index` of a chunk described by `meta` into `dst`, which must
 * hold lmca_segment_len(meta, index) bytes. Verifies the segment's length (and
 * its CRC when stored).
 * @return LMCA_OK; LMCA_MISS if the segment is missing, short or corrupt;
 *   LMCA_EINVAL for an index out of range; transport errors.
 */
LMCA_EXTERN int lmca_read_segment(lmca_t *h, const char *key, const lmca_meta_t *meta,
                                  uint32_t index, void *dst, lmca_err_t *err);

/*
 * Writes segment `index` (`len` bytes from `src`) of `key` with the TTL for `pin`.
 * @return LMCA_OK or the errors of lmca_put().
 */
LMCA_EXTERN int lmca_write_segment(lmca_t *h, const char *key, uint32_t index,
                                   const void *src, size_t len, bool pin, lmca_err_t *err);

/*
 * Writes the meta record that publishes a chunk, with state "ready". `meta`
 * gives nseg/seg_b/tot_b (from lmca_plan()) and the optional crc32; when
 * meta->nseg == 1, `payload` (tot_b bytes) is stored inline. Attributes come
 * from `opts` (may be NULL).
 * @return LMCA_OK or the errors of lmca_put().
 */
LMCA_EXTERN int lmca_write_meta(lmca_t *h, const char *key, const lmca_meta_t *meta,
                                const void *payload, const lmca_put_opts_t *opts,
                                lmca_err_t *err);

/*
 * Reads the meta records of `n` keys in batch calls (for many small chunks at
 * once). For each single-record chunk whose payload fits caps[i], the payload is
 * received into bufs[i] and inline_lens[i] set (else 0). `bufs` and `caps` may
 * be NULL (meta only).
 * @param[out] results  per key: LMCA_OK (metas[i] filled), LMCA_MISS, or an error.
 * @return LMCA_OK, or the first error among the keys (its message in err);
 *   LMCA_EINVAL for a bad key (then nothing is read).
 */
LMCA_EXTERN int lmca_read_meta_many(lmca_t *h, const char *const *keys, size_t n,
                                    lmca_meta_t *metas, void *const *bufs, const size_t *caps,
                                    size_t *inline_lens, int *results, lmca_err_t *err);

/*
 * Stores `n` chunks that each fit one record (lmca_plan() gives nseg 1) in
 * batch calls. opts may be NULL or hold n entries.
 * @param[out] results  per key: LMCA_OK or the error that row met.
 * @return LMCA_OK, or the first error (its message in err); LMCA_EINVAL when an
 *   argument is bad or a payload needs segments (then nothing is written).
 */
LMCA_EXTERN int lmca_put_small_many(lmca_t *h, const char *const *keys, size_t n,
                                    const void *const *bufs, const size_t *lens,
                                    const lmca_put_opts_t *opts, int *results, lmca_err_t *err);

/* The CRC-32 the engine stores (zlib's), for callers that publish a chunk
   assembled from lmca_write_segment(). */
LMCA_EXTERN uint32_t lmca_crc32(const void *buf, size_t len);

/* LMCA_OK if the whole payload in `buf` matches meta's CRC (or it has none),
   else LMCA_MISS. For callers that assemble a chunk from lmca_read_segment(). */
LMCA_EXTERN int lmca_verify(const lmca_meta_t *meta, const void *buf);

/* Bytes in segment `index` of `meta` (0 when out of range). */
LMCA_EXTERN uint64_t lmca_segment_len(const lmca_meta_t *meta, uint32_t index);

/* ---------------------------------------------------------------------------
 * Scanning the set (list, orphan sweeps). Slow: it reads every record's small bins.
 */

typedef enum {
    LMCA_REC_UNKNOWN = 0, /* a record whose key was not stored */
    LMCA_REC_META = 1,
    LMCA_REC_SEGMENT = 2
} lmca_rec_kind;

typedef struct lmca_scan_rec {
    lmca_rec_kind kind;
    uint8_t digest[20];      /* Aerospike digest of the record's key */
    const char *key;         /* the record's user key ("<key>|m", "<key>|s|<i>"),
                                or NULL when it was not stored (send_key false) */
    uint32_t ttl;            /* seconds left, 0xFFFFFFFF = never expires */
    const lmca_meta_t *meta; /* the decoded meta record; NULL unless kind is META
                                and the scan reads meta records */
} lmca_scan_rec_t;

/* Return false to stop the scan. Called on libaerospike's scan thread(s),
   one record at a time; `rec` is valid during the call only. */
typedef bool (*lmca_scan_cb)(void *udata, const lmca_scan_rec_t *rec);

/* What lmca_scan() visits. */
typedef enum {
    LMCA_SCAN_META = 0, /* meta records, decoded (every bin but the payload) */
    LMCA_SCAN_ALL = 1   /* every record of the set, no bins: digest, stored key
                           and TTL; segments are told from meta records by their
                           key, so only with send_key (orphan sweeps) */
} lmca_scan_mode;

/*
 * Visits the records of the configured set without reading payloads.
 * Aerospike returns only the records that hold a selected bin, which is why
 * LMCA_SCAN_META sees meta records only and LMCA_SCAN_ALL reads no bins.
 * @return LMCA_OK (also when the callback stopped it), LMCA_EINVAL for a NULL
 *   callback, or transport errors.
 */
LMCA_EXTERN int lmca_scan(lmca_t *h, lmca_scan_mode mode, lmca_scan_cb cb, void *udata,
                          lmca_err_t *err);

/* Version of this engine, "0.1.0". Static storage. */
#define LMCA_VERSION "0.1.0"
LMCA_EXTERN const char *lmca_version(void);

/* Version of the libaerospike linked in, e.g. "7.6.1". Static storage. */
LMCA_EXTERN const char *lmca_aerospike_version(void);

#ifdef __cplusplus
}
#endif
#endif /* LMCA_H */
