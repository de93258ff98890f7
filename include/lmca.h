/*
 * lmca.h - lmcache-aerospike engine: LMCache KV chunks stored in Aerospike.
 *
 * Introduction
 * ------------
 * The engine stores opaque byte payloads ("chunks", from hundreds of KiB to tens of
 * MiB) under string keys in one Aerospike namespace and set, using the official C
 * client (libaerospike). A chunk is a meta record "<key>|m" plus, when it does not
 * fit one record, segment records "<key>|s|<i>"; the meta record is written last
 * and marks the chunk complete (state "ready"), and a write id ties every segment
 * to the meta record that publishes it. Readers see either a complete chunk or a
 * miss, never partial or mixed data, and everything read from the server is
 * validated before use ("Chunks" below). DESIGN.md explains the layout and the
 * size rules; the pure functions that choose segment sizes are declared below
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
 * The engine allocates with malloc; a failed allocation is LMCA_ENOMEM, never an
 * abort.
 *
 * Caveats
 * -------
 * - Do not use a handle in a child after fork(); open a new one there.
 * - Keys are NUL-terminated strings of at most LMCA_KEY_MAX bytes.
 * - The engine uses no CAS. Two writers racing on one key (LMCache keys are
 *   content hashes, so their bytes are usually equal) can leave segments of
 *   both; a reader then gets a miss, never a mix, until the next put.
 * - The log callback of lmca_config_t is kept by the handle and called from any
 *   thread that calls into it (worker threads included), until lmca_close():
 *   its udata must live that long and the callback must be thread-safe.
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
    uint64_t target_segment_bytes; /* preferred segment payload; default 2 MiB (G4) */
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
    bool fast_path;                 /* default true: payload records are sent from
                                       and received into the caller's buffers
                                       (DESIGN.md, "The fast path"); false = the
                                       client's own calls, which copy */
    uint32_t max_conns_per_node;    /* connection pool size; default 64 */
    /* A cache when the namespace is full (DESIGN.md, "A cache that stays full"). */
    bool touch_on_hit;              /* a get that found a chunk not among the
                                       newest queues it to be touched ahead of
                                       the shared clock's head by a quarter of the
                                       namespace (lmca_touch_hits); default true */
    bool shared_clock;              /* void times come from the namespace's shared
                                       clock record (lmca_eviction_t); false = this
                                       handle's own, as if alone; default true */
    int32_t read_touch_ttl_percent; /* gets also ask the server to restart a
                                       record's TTL (now + its TTL, not the clock's
                                       head) when less than this percent of it is
                                       left: 1..100, 0 the namespace's
                                       default-read-touch-ttl-pct, -1 never;
                                       default -1. Lookups never touch. */
    uint32_t backpressure_ms;       /* how long a put retries writes the server
                                       refuses for space (stop-writes while it
                                       evicts) or load (device overload, a busy
                                       key), with jittered backoff, before the store
                                       is dropped; 0 = no retry; default 5000 */
    uint32_t full_recheck_ms;       /* after a put found the namespace at stop-writes
                                       for its whole backpressure_ms, puts are dropped
                                       without a round trip for this long, then one
                                       is let through to look again; default 1000 */
    uint32_t touch_budget_percent;  /* hits moved to the head
                                       (touch_on_hit) rewrite at most this percent
                                       of the bytes stores landed, counted over
                                       every writer of the namespace through the
                                       shared clock's record (banked up to a
                                       sixteenth of its capacity); the hits past it
                                       stay where they are (hits_unbudgeted), and
                                       as it runs out only hits a fifth of the
                                       namespace's span (NSUP's last cut to the
                                       head) behind the head or more are moved
                                       (hits_fresh); 0 = no budget;
                                       default 100 */
    uint32_t max_put_wait_ms;       /* the longest a put waits for its place on the
                                       shared clock (NSUP's pace: lmca_put_pace);
                                       one due later is dropped (dropped_paced);
                                       also the longest, from lmca_put_begin, a
                                       put retries writes refused for load
                                       (dropped_busy; lmca_put_backoff);
                                       and, once a put was refused for load,
                                       its bound: it ends within this or
                                       write_timeout_ms, the larger, of
                                       lmca_put_begin, each write shortened to
                                       what is left and none sent after
                                       (dropped_busy), unless it waits out
                                       stop-writes or a lost node
                                       (backpressure_ms); 0 = never waits (the
                                       bound is write_timeout_ms); default 2000 */
    uint32_t records_per_void_second; /* most records in one second of void time
                                       (lmca_eviction_t.per_second); 0 = derived
                                       from the namespace's eviction settings;
                                       default 0 */
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
    /* Stop-writes settings, quoted when the server refuses writes as full
       (-1 = not reported). */
    int64_t stop_writes_used_pct;       /* storage-engine.stop-writes-used-pct */
    int64_t stop_writes_avail_pct;      /* storage-engine.stop-writes-avail-pct */
    int64_t stop_writes_sys_memory_pct; /* stop-writes-sys-memory-pct */
    int64_t data_size;                  /* storage-engine.data-size (memory) */
    int64_t post_write_cache;           /* storage-engine.post-write-cache (device):
                                           write blocks each device keeps after
                                           their flush */
    uint32_t devices;                   /* a device namespace's devices or files;
                                           0 = not reported */
    /* Eviction (-1 = not reported): what NSUP does when the namespace fills. */
    int64_t evict_used_pct;     /* storage-engine.evict-used-pct; 0 = no eviction */
    int64_t evict_tenths_pct;   /* evict-tenths-pct: per cycle, in tenths of a percent */
    int64_t evict_hist_buckets; /* evict-hist-buckets */
    /* Statistics at the time of the answer (-1 = not reported). */
    int64_t objects;               /* records in the namespace */
    int64_t non_expirable_objects; /* ... of which never expire (never evicted) */
    int64_t data_used_bytes;
    int64_t data_total_bytes;      /* the namespace's capacity, memory or device */
    int64_t evicted_objects;       /* records NSUP evicted since the node started */
    int64_t evict_void_time;       /* the void time NSUP last evicted below, in
                                      seconds since 2010-01-01 (the server's
                                      epoch); 0 = none since the node started */
    int64_t replication_factor;    /* copies of each record the cluster keeps now
                                      (effective_replication_factor, else the
                                      configured replication-factor) */
    bool hwm_breached;             /* data used is past evict-used-pct (NSUP's trigger) */
    bool stop_writes;              /* the namespace refuses writes */
} lmca_server_info_t;

/*
 * Parses the answer to info "namespace/<ns>" (with or without the leading
 * "<request>\t" and trailing newline). The answer is untrusted: any bytes give
 * a result or an error, never a read past `info`'s NUL.
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

/*
 * Eviction by void time, and the engine's part in it.
 *
 * NSUP evicts a full namespace's records by void time (expiry time), whole
 * seconds at a time: each cycle it counts the eligible records per second of
 * void time (a histogram of evict-hist-buckets buckets over the TTL range, at
 * least one second wide), and evicts the lowest seconds whose records add up to
 * at most evict-tenths-pct of them. If the lowest second alone holds more, it
 * evicts nothing at all, and a namespace filled faster than that never evicts
 * (as/src/base/nsup.c, find_evict_void_time). So the engine hands void times
 * out in write order, at most `per_second` records to a second: a burst runs
 * ahead of now + default_ttl_seconds (up to `lead_seconds`) rather than into one
 * second. The clock that does so is shared by every handle on the namespace, in
 * any process on any host: a counter record in the namespace's set "lmca_clock"
 * (never expiring; one per namespace), from which each handle reserves leases
 * of positions (shared_clock, default true). A hit moves a chunk past the
 * head: a get that found a chunk not among the newest queues it to be touched
 * at a new place on the clock, the span of a quarter of the namespace's records
 * ahead of the head, so that it outlives NSUP's cuts (touch_on_hit,
 * lmca_touch_hits). DESIGN.md, "A cache
 * that stays full", has the measurements.
 */
typedef struct lmca_eviction {
    bool enabled;        /* the namespace evicts (evict-used-pct and nsup-period
                            set) and our records expire (default_ttl_seconds > 0) */
    uint64_t records;    /* eligible records expected at evict-used-pct */
    uint64_t target;     /* the most NSUP evicts per cycle: records * tenths / 1000 */
    uint32_t per_second; /* records one second of void time gets; 0 = no limit
                            (eviction off) */
    uint64_t bytes_per_second; /* what stores write at per_second: the records'
                                  mean size times per_second */
    bool device;         /* a node stores the namespace on a device (SSD or file) */
    uint64_t lead_seconds; /* how far the stores' clock may run ahead of now +
                              TTL; a put due further ahead waits (lmca_put_pace).
                              1 to 3: what the storage holds past evict-used-pct
                              (stop-writes, the write blocks' room) at per_second */
    uint64_t cut_void_time; /* the latest void time NSUP evicted below on any node
                               (Unix seconds; 0 = none seen): the namespace's
                               oldest records are due there. lmca_eviction only;
                               the plan derived from an answer leaves it 0 */
} lmca_eviction_t;

/* Derives the eviction plan from the namespace's answer, the limits and the
   settings (records_per_void_second, when not 0, wins). The records the
   namespace will hold are its capacity over its mean record, or, while it holds
   too few to tell, over `mean_hint` (the mean record of this handle's puts; 0 =
   unknown: a full segment). Pure. */
LMCA_EXTERN void lmca_eviction_plan(const lmca_server_info_t *srv, const lmca_limits_t *limits,
                                    const lmca_config_t *cfg, uint64_t mean_hint,
                                    lmca_eviction_t *out);

/* The same for a cluster: `nodes` are the n nodes' answers. Each node's NSUP
   evicts its own records (masters and replicas) with its own target, and a
   second's records spread over the nodes, replication_factor copies each: a
   second gets the tightest node's share times n / replication factor, records
   and target are the nodes' sums over the replication factor, and the lead is
   the shortest. With n == 1 it is lmca_eviction_plan. Pure. */
LMCA_EXTERN void lmca_eviction_plan_nodes(const lmca_server_info_t *nodes, size_t n,
                                          const lmca_limits_t *limits,
                                          const lmca_config_t *cfg, uint64_t mean_hint,
                                          lmca_eviction_t *out);

/* The plan in force on a handle, as of its last look at the namespace (at open,
   then about every 10 s while it writes). */
LMCA_EXTERN void lmca_eviction(lmca_t *h, lmca_eviction_t *out);

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
 *
 * The chunk protocol (spec 4.3.5, hardened): a put draws a random 64-bit write
 * id, writes its segments (each carrying the id), then commits the meta record
 * (carrying the id and the sizes) last. A get reads the meta record, then every
 * segment, and accepts a segment only if it carries the meta record's write id
 * and exactly the bytes the meta record promises. So a reader sees the old
 * bytes, the new bytes or a miss, even when a writer died half-way through an
 * overwrite or two writers raced on one key, and with CRC off.
 *
 * Everything read from the server is untrusted: a record written by another
 * client, an older version or a crash is checked bin by bin (types, ranges, the
 * sizes against each other and against the engine's own bounds) before any size
 * is used. A record that fails is a miss, counted in lmca_stats_t and reported
 * to the log callback at WARNING, never a crash or wrong bytes.
 */

/* Schema version written in the meta record's ver bin (2: write ids). Records of
   any other version read as misses. */
#define LMCA_SCHEMA_VERSION 2

/* What the meta record of a chunk says (spec 4.3.1). */
typedef struct lmca_meta {
    uint32_t ver;        /* schema version, LMCA_SCHEMA_VERSION */
    uint32_t nseg;       /* 1 = payload inline in the meta record */
    uint64_t seg_b;      /* bytes per segment; the last may be shorter */
    uint64_t tot_b;      /* payload bytes */
    uint64_t wid;        /* write id, carried by every segment of this write */
    bool has_crc32;
    uint32_t crc32;      /* CRC-32 (zlib) of the whole payload */
    int64_t created_at;  /* epoch seconds of the put */
    bool pin;            /* stored never-expiring */
    uint32_t ttl;        /* seconds left, 0xFFFFFFFF = never expires */
    char serde[LMCA_TAG_MAX + 1];
    char ttl_class[LMCA_TAG_MAX + 1];
    size_t md_len;       /* bytes in the md bin; 0 = none */
    uint8_t *md;         /* a malloc'd copy of the md bin, only when asked for
                            (see lmca_get_t.want_md) and present; else NULL.
                            Free it with lmca_meta_clear(). */
} lmca_meta_t;

/* Frees meta->md (if any) and sets it to NULL. Safe on a zeroed meta. */
LMCA_EXTERN void lmca_meta_clear(lmca_meta_t *meta);

/* Optional attributes of a put; NULL means all defaults. */
typedef struct lmca_put_opts {
    const void *md;        /* opaque RemoteMetadata blob, may be NULL */
    size_t md_len;         /* <= LMCA_MD_MAX */
    const char *serde;     /* informational, e.g. "naive"; may be NULL */
    const char *ttl_class; /* informational, e.g. "session"; may be NULL */
    bool pin;              /* never expire (TTL -1) instead of the default TTL */
} lmca_put_opts_t;

/*
 * Stores `len` bytes from `buf` under `key`: lmca_put_begin, lmca_put_segments
 * for every segment, lmca_put_commit; on failure lmca_put_abort. The payload is
 * sent from `buf` as is. An earlier value under `key` is replaced. An empty
 * payload (len 0) is a valid chunk. It blocks while its void time is too far
 * ahead (lmca_put_pace) and while the server refuses it for space or load, up to
 * backpressure_ms (lmca_put_backoff); LMCA_EFULL and LMCA_EBUSY then mean the
 * store was dropped, and are counted in lmca_stats_t.
 * @return LMCA_OK;
 *   LMCA_EINVAL       bad key, NULL buf with len > 0, md or tags too long,
 *                     payload beyond lmca_plan() limits;
 *   LMCA_ETOO_BIG     the server refused a record as too big (the message gives
 *                     the payload size and the caps, and what to lower);
 *   LMCA_ETTL         the namespace refuses TTL writes (nsup-period 0);
 *   LMCA_EFULL        the namespace is at stop-writes (the message names its
 *                     stop-writes settings);
 *   LMCA_ETIMEOUT, LMCA_ECONNECTION, LMCA_EBUSY, LMCA_ENOMEM, LMCA_EUNKNOWN.
 * On failure the key reads as a miss or as its previous value; never partial,
 * and the segments this put wrote are removed (best effort, counted).
 */
LMCA_EXTERN int lmca_put(lmca_t *h, const char *key, const void *buf, size_t len,
                         const lmca_put_opts_t *opts, lmca_err_t *err);

/*
 * Reads the meta record of `key` (its small bins, never the payload) and
 * validates it. The md bin, when present, is copied into meta->md: call
 * lmca_meta_clear(meta) afterwards.
 * @return LMCA_OK (meta filled), LMCA_MISS (absent, not ready, or corrupt), or
 *   the transport errors of lmca_put() (LMCA_ETIMEOUT, LMCA_ECONNECTION,
 *   LMCA_EBUSY, LMCA_EUNKNOWN); LMCA_EINVAL for a bad key; LMCA_ENOMEM.
 */
LMCA_EXTERN int lmca_stat(lmca_t *h, const char *key, lmca_meta_t *meta, lmca_err_t *err);

/*
 * Reads the chunk under `key` into `buf` (capacity `cap`): lmca_get_begin,
 * lmca_get_segments for every segment, lmca_get_end. `*len` receives the
 * payload size; `meta` (may be NULL) receives the meta record, without md.
 * @return LMCA_OK; LMCA_MISS when the key is absent, not ready, corrupt, a
 *   segment is missing, short or from another write, or the CRC does not match
 *   (the buffer's content is then unspecified); LMCA_EINVAL when `cap` is
 *   smaller than the stored payload (`*len` then holds the needed size); the
 *   transport errors of lmca_stat().
 */
LMCA_EXTERN int lmca_get(lmca_t *h, const char *key, void *buf, size_t cap, size_t *len,
                         lmca_meta_t *meta, lmca_err_t *err);

/*
 * "Present" means: a meta record that reads as a complete, valid chunk (what
 * lmca_stat returns LMCA_OK for). lmca_exists and lmca_prefix use that one rule;
 * segments are checked only by a get.
 * @return LMCA_OK if a chunk is present under `key`, LMCA_MISS if not, or the
 *   transport errors of lmca_stat().
 */
LMCA_EXTERN int lmca_exists(lmca_t *h, const char *key, lmca_err_t *err);

/*
 * Looks up `n` keys in batch reads of their meta records' small bins and
 * counts the leading run of present chunks: [hit, hit, miss, hit] gives 2.
 * @param[out] found  per-key 1/0, may be NULL.
 * @return LMCA_OK (count set); LMCA_EINVAL for a NULL or bad key or more than
 *   LMCA_BATCH_MAX keys (nothing is read); the transport errors of lmca_stat().
 */
LMCA_EXTERN int lmca_prefix(lmca_t *h, const char *const *keys, size_t n, size_t *count,
                            uint8_t *found, lmca_err_t *err);

/* Most keys one batch call or one submitted batch may hold. */
#define LMCA_BATCH_MAX (1u << 20)

/*
 * Removes the meta record (so readers miss at once), then its segments, best
 * effort: segments that cannot be removed expire by TTL or are found by
 * lmca_scan (LMCA_SCAN_RECORDS). A corrupt meta record is removed too; its
 * segments, which it cannot name, are left to the scan.
 * @return LMCA_OK, LMCA_MISS (nothing stored), or transport errors.
 */
LMCA_EXTERN int lmca_remove(lmca_t *h, const char *key, lmca_err_t *err);

/*
 * Refreshes the TTL of the chunk's records: with pin, they never expire and the
 * meta record's pin bin becomes 1; without, they get default_ttl_seconds again
 * and pin becomes 0. The segments are touched first, in one batch call, then
 * the meta record.
 * @return LMCA_OK, LMCA_MISS (absent, corrupt, or a segment is missing),
 *   LMCA_ETTL, or transport errors.
 */
LMCA_EXTERN int lmca_touch(lmca_t *h, const char *key, bool pin, lmca_err_t *err);

/*
 * Touches now every chunk that gets found since the last call queued for a move
 * past the head of the eviction order (touch_on_hit): their records get new
 * places on the shared clock, in batch calls. The pool's workers call it
 * themselves (when one would go idle, and every 64 hits or 20 ms while busy), a
 * blocking lmca_get before it returns, and lmca_close once more; call it to
 * have the moves done at a point of your choosing. Touches the server refuses are
 * counted (touches_failed) and dropped.
 * @return LMCA_OK (also when some touches failed), or LMCA_ENOMEM (the queued
 *   hits are dropped).
 */
LMCA_EXTERN int lmca_touch_hits(lmca_t *h, lmca_err_t *err);

/* @return LMCA_OK when the cluster answers, else LMCA_ECONNECTION or LMCA_ETIMEOUT. */
LMCA_EXTERN int lmca_ping(lmca_t *h, lmca_err_t *err);

/* Counters of a handle since open; thread-safe, for metrics and tests. */
typedef struct lmca_stats {
    uint64_t corrupt;           /* records that failed validation (read as misses) */
    uint64_t torn;              /* chunks with a segment missing or from another write */
    uint64_t crc_mismatch;      /* payloads whose CRC did not match */
    uint64_t puts_aborted;      /* failed puts that had written segments */
    uint64_t segments_removed;  /* segments those aborts removed */
    uint64_t segments_left;     /* segments an abort could not remove */
    uint64_t fast_ops;          /* single-record puts and gets on the fast path */
    uint64_t client_ops;        /* ... through the client's own calls (fast_path off) */
    uint64_t guesses_confirmed; /* guessed gets the meta record confirmed */
    uint64_t guesses_missed;    /* ... whose segments had to be read again */
    /* Backpressure (lmca_put_backoff): */
    uint64_t puts_retried;      /* puts that landed after the server refused them */
    uint64_t write_retries;     /* refused writes tried again */
    uint64_t dropped_full;      /* puts dropped: the namespace stayed at stop-writes */
    uint64_t dropped_busy;      /* puts dropped: device overload or a busy key stayed */
    uint64_t dropped_unsent;    /* ... of dropped_full, refused here without a round
                                   trip while the namespace was known to be full */
    uint64_t dropped_unreachable; /* puts dropped: timeouts or lost connections stayed
                                   (a node lost longer than the cluster took to re-form) */
    uint64_t dropped_paced;     /* puts dropped: due on the clock more than
                                   max_put_wait_ms ahead (lmca_put_pace) */
    uint64_t puts_paced;        /* puts that waited for the void-time clock */
    /* The shared clock and hits (lmca_eviction_t): */
    uint64_t clock_reservations; /* round trips to the clock record for leases */
    uint64_t clock_resets;      /* ... that moved it to now + TTL (idle, or not ours) */
    uint64_t clock_local;       /* places made on the handle's own clock: no clock
                                   record could be reached (or shared_clock off) */
    uint64_t clock_fallbacks;   /* reservations a fallback clock record served: the
                                   first could not be reached */
    uint64_t clock_busy;        /* clock round trips a record answered key busy (its
                                   transaction-pending-limit): the next one served */
    uint64_t clock_overloaded;  /* clock round trips refused by their device for
                                   a moment (its write queue full, or, for a
                                   store, no free block), tried again on the
                                   same record */
    uint64_t hits_touched;      /* chunks a hit moved to the head */
    uint64_t hits_fresh;        /* hits past their fresh line, not touched: 3/4 of a
                                   lead past the head, down to a fifth of the
                                   namespace's span behind it as the touch budget
                                   runs out */
    uint64_t hits_unbudgeted;   /* hits not moved: the touch budget was spent */
    uint64_t touch_bytes;       /* payload bytes the moves rewrote on the server */
    uint64_t touches_failed;    /* records whose touch the server refused */
    uint64_t mends;             /* times NSUP had stalled and this handle mended it */
    uint64_t mended_records;    /* records those mends removed */
    bool full;                  /* puts are being dropped unsent right now */
} lmca_stats_t;

LMCA_EXTERN void lmca_stats(lmca_t *h, lmca_stats_t *out);

/* ---------------------------------------------------------------------------
 * The chunk protocol in steps. lmca_put and lmca_get are built from these, and
 * the asynchronous layer schedules them (one chunk's segments on several
 * threads), so the protocol exists once. The caller fills the request's input
 * fields, then calls begin; the request then lives until the last step returns.
 * Steps on one request may run on different threads, provided begin happened
 * before them and the segment ranges do not overlap.
 */

/* One put in progress. */
typedef struct lmca_put_s {
    /* in: set by the caller before lmca_put_begin; not copied */
    const char *key;
    const void *buf;
    size_t len;
    const lmca_put_opts_t *opts; /* may be NULL */
    /* out: what the commit will publish (nseg, seg_b, tot_b, wid; crc32 at commit) */
    lmca_meta_t meta;
    /* the engine's: the chunk's void time (unix seconds; 0 = not placed yet,
       or the TTL as configured), placed by its first step, its place on the
       clock of stores that lmca_put_pace paces by, and its backpressure state
       (lmca_put_backoff; loaded: refused for load, by its writes or its
       clock, which bounds it; waits_out: refused for stop-writes or a lost
       node, which it waits out for backpressure_ms, past its bound) */
    uint64_t void_at, pace_at;
    uint64_t begun_ms, deadline_ms;
    uint32_t refusals;
    bool dropped, paced, loaded, waits_out;
} lmca_put_t;

/*
 * Checks the arguments, plans the segments (lmca_plan) and draws the write id.
 * No I/O.
 * @return LMCA_OK; LMCA_EINVAL naming the bad argument.
 */
LMCA_EXTERN int lmca_put_begin(lmca_t *h, lmca_put_t *p, lmca_err_t *err);

/*
 * Backpressure. A put step that failed with LMCA_EFULL (stop-writes: the
 * namespace is full until NSUP evicts) or LMCA_EBUSY (device overload, a busy
 * key, no connection free) may land if tried again a little later. Call this
 * with the step's status: it returns how many milliseconds to wait before
 * trying the same step again (jittered, growing from 2 ms to 200 ms), or -1 to
 * give up: any other status, or backpressure_ms spent since the first refusal
 * (up to three times that while other puts of the handle land: the
 * namespace is evicting, this put lost the race for the room), or the
 * namespace known to be full; refused for load (LMCA_EBUSY), also
 * max_put_wait_ms spent since lmca_put_begin. A put given up on a refusal is counted
 * once as dropped (lmca_stats_t), and a WARNING naming the cause and the
 * setting to change is logged at most once a minute. Thread-safe: the
 * segments of one put may call it from several threads.
 * When a put spent its whole budget on stop-writes, no put landed meanwhile
 * and a node of the namespace says stop-writes when asked then (one info round
 * trip to each node), the handle drops puts without sending them (LMCA_EFULL,
 * counted dropped_unsent) for full_recheck_ms, then lets one through to look
 * again. Refused as full with no node at stop-writes, the record's memory
 * stripe or device had no free block: that put alone is dropped.
 */
LMCA_EXTERN int lmca_put_backoff(lmca_t *h, lmca_put_t *p, int rc);

/*
 * Placing and pacing. A put is due at a second of the void-time clock that
 * every writer of the namespace shares, which gives each second at most
 * lmca_eviction_t.per_second records; when puts come faster for long, the clock
 * runs ahead of now + default_ttl_seconds, and a put due more than lead_seconds
 * ahead waits: NSUP could not evict faster than that either. Only stores count
 * here: the places that hits moved to the head took (lmca_touch_hits,
 * lmca_touch) add no data and do not hold puts back, unless they led the clock
 * by more than 6 minutes. The clock counts on the servers' time (the
 * namespace's nodes), never this host's: a host whose clock is off waits no
 * more than the others. Call this before a
 * put's first write: it places the put on the clock if no step did yet (which
 * may take a round trip to the clock's record, or none: lmca_stats_t
 * clock_reservations), and returns how many milliseconds to wait (0: send now).
 * Counted once per put (puts_paced). A put that would wait longer than
 * max_put_wait_ms is dropped instead (dropped_paced): LMCA_EBUSY, in err; while
 * the furthest place this handle was given is that far ahead, before it takes
 * a place (a dropped put's places stay on the clock that orders evictions).
 * A put whose clock record its device keeps refusing until max_put_wait_ms
 * after the put began is dropped unsent, rather than placed on this handle's
 * own clock: for load (device overload), LMCA_EBUSY (dropped_busy); for no
 * free block, LMCA_EFULL (dropped_full). Safe to call from several threads at once for one put.
 */
LMCA_EXTERN int lmca_put_pace(lmca_t *h, lmca_put_t *p, lmca_err_t *err);

/*
 * Writes segments [first, first + count) of a put whose meta.nseg > 1: in batch
 * calls when segments are at most batch_threshold_bytes, else one by one.
 * @return LMCA_OK, LMCA_EINVAL (range outside the plan), or the errors of lmca_put().
 */
LMCA_EXTERN int lmca_put_segments(lmca_t *h, lmca_put_t *p, uint32_t first,
                                  uint32_t count, lmca_err_t *err);

/*
 * Publishes the chunk: computes the payload CRC when enable_crc32 is set, then
 * writes the meta record with state "ready" (and the payload inline when
 * meta.nseg == 1). Call it after every segment was written.
 * @return LMCA_OK or the errors of lmca_put().
 */
LMCA_EXTERN int lmca_put_commit(lmca_t *h, lmca_put_t *p, lmca_err_t *err);

/*
 * Commits `n` begun single-record puts (meta.nseg == 1) in batch calls.
 * @param[out] results  per put: LMCA_OK or the error its row met; every entry
 *   is set whatever the return value.
 * @return LMCA_OK, or the first error (its message in err); LMCA_EINVAL when a
 *   put needs segments (then nothing is written).
 */
LMCA_EXTERN int lmca_put_commit_many(lmca_t *h, lmca_put_t *ps, size_t n, int *results,
                                     lmca_err_t *err);

/*
 * After a failed lmca_put_segments or lmca_put_commit: removes every segment
 * record of the plan (best effort; counted in lmca_stats_t), because a
 * namespace with default-ttl 0 would keep them forever. No-op for nseg == 1.
 * What it cannot remove (or what a killed process left) the orphan scan finds.
 */
LMCA_EXTERN void lmca_put_abort(lmca_t *h, const lmca_put_t *p);

/* One get in progress. */
typedef struct lmca_get_s {
    /* in: set by the caller before lmca_get_begin; not copied */
    const char *key;
    void *buf;
    size_t cap;
    bool want_md; /* copy the md bin into meta.md */
    bool hold;    /* with buf NULL: keep a one-record chunk's payload in `held`,
                     to be placed by lmca_get_place once the caller has allocated
                     a destination from the metadata (read once, not twice) */
    /* out */
    lmca_meta_t meta;
    void *held;   /* the held payload (meta.tot_b bytes, malloc'd), or NULL */
    /* in: NULL, or for a guessed get (lmca_get_guess) meta.nseg entries that
       lmca_get_segments fills with each segment's write id (0: not usable) */
    uint64_t *seen_wids;
} lmca_get_t;

/*
 * Reads and validates the meta record; when the chunk is one record and fits
 * `cap`, its payload lands in `buf` as well (nothing more to read). With `hold`
 * and no buffer, a one-record chunk's payload is kept in `held` instead.
 * @return LMCA_OK (meta filled; compare meta.tot_b with your buffer);
 *   LMCA_MISS; LMCA_EINVAL for a bad key or a NULL buf with cap > 0;
 *   LMCA_ENOMEM; transport errors.
 */
LMCA_EXTERN int lmca_get_begin(lmca_t *h, lmca_get_t *g, lmca_err_t *err);

/*
 * Gives a begun get its destination (`cap` >= meta.tot_b). A held payload is
 * copied there and released: the get is then whole, ready for lmca_get_end. A
 * chunk of segments still needs lmca_get_segments.
 * @return LMCA_OK, or LMCA_EINVAL when `cap` is below meta.tot_b or buf is NULL
 *   with a payload to place.
 */
LMCA_EXTERN int lmca_get_place(lmca_get_t *g, void *buf, size_t cap, lmca_err_t *err);

/* Frees what a get holds (its held payload and md). Safe on a zeroed get. */
LMCA_EXTERN void lmca_get_release(lmca_get_t *g);

/*
 * Begins `n` gets in batch calls (meta records with their inline payloads).
 * @param[out] results  per get, as lmca_get_begin; every entry is set whatever
 *   the return value.
 * @return LMCA_OK, or the first error (its message in err); LMCA_EINVAL for a
 *   bad key or more than LMCA_BATCH_MAX gets (then nothing is read).
 */
LMCA_EXTERN int lmca_get_begin_many(lmca_t *h, lmca_get_t *gs, size_t n, int *results,
                                    lmca_err_t *err);

/*
 * Reads segments [first, first + count) of a begun get into `buf`, each checked
 * for its length, write id and (when stored) CRC: in batch calls when segments
 * are at most batch_threshold_bytes, else one by one.
 * @return LMCA_OK; LMCA_MISS (a segment is missing, short, corrupt or from
 *   another write); LMCA_EINVAL (range outside the chunk, or `cap` below
 *   meta.tot_b); transport errors.
 */
LMCA_EXTERN int lmca_get_segments(lmca_t *h, const lmca_get_t *g, uint32_t first,
                                  uint32_t count, lmca_err_t *err);

/*
 * Finishes a get whose payload is all in `buf`: checks the whole payload's CRC
 * when the meta record carries one.
 * @return LMCA_OK, or LMCA_MISS on a mismatch (counted).
 */
LMCA_EXTERN int lmca_get_end(lmca_t *h, const lmca_get_t *g);

/*
 * Guessed gets: a caller that knows a chunk's exact size (`cap`, as LMCache's
 * loads do) can read its segments while it reads its meta record, one round
 * trip instead of two. lmca_get_guess fills g->meta with this handle's plan for
 * `cap` bytes (write id unknown); lmca_get_segments on that get then reads
 * into `buf` and records each segment's write id in g->seen_wids (caller
 * memory, meta.nseg entries) instead of checking it: a segment that is
 * missing, malformed or of another length records 0, and nothing is counted
 * or logged. The bytes in `buf` mean nothing until lmca_get_confirm accepts
 * them against the meta record, read by lmca_get_begin on another get without
 * a buffer (a one-record chunk's payload must not land on the segments).
 * @return LMCA_OK; LMCA_EINVAL when the plan is a single record (nothing to
 *   guess: use lmca_get_begin), for a bad key, a NULL buf or seen_wids.
 */
LMCA_EXTERN int lmca_get_guess(lmca_t *h, lmca_get_t *g, lmca_err_t *err);

/*
 * Confirms a guessed get by the chunk's meta record (`real`, begun with
 * LMCA_OK): LMCA_OK when the record describes the guessed plan (size, segment
 * count and size) and every segment carried its write id, so `buf` holds the
 * chunk (finish with lmca_get_end on `real` with buf and cap set); LMCA_MISS
 * otherwise: read the segments again with lmca_get_segments on `real`.
 * Counted in lmca_stats_t (guesses_confirmed, guesses_missed). Thread-safe.
 */
LMCA_EXTERN int lmca_get_confirm(lmca_t *h, const lmca_get_t *guess, const lmca_get_t *real);

/* Bytes in segment `index` of `meta` (0 when out of range). */
LMCA_EXTERN uint64_t lmca_segment_len(const lmca_meta_t *meta, uint32_t index);

/* The CRC-32 the engine stores (zlib's). */
LMCA_EXTERN uint32_t lmca_crc32(const void *buf, size_t len);

/* ---------------------------------------------------------------------------
 * Scanning the set (list, orphan sweeps). Slow: it reads every record's small bins.
 */

typedef enum {
    LMCA_REC_UNKNOWN = 0, /* not a record this engine writes, or corrupt */
    LMCA_REC_META = 1,
    LMCA_REC_SEGMENT = 2
} lmca_rec_kind;

typedef struct lmca_scan_rec {
    lmca_rec_kind kind;
    uint8_t digest[20];      /* Aerospike digest of the record's key */
    const char *key;         /* the record's user key ("<key>|m", "<key>|s|<i>"),
                                or NULL when it was not stored (send_key false) */
    uint32_t ttl;            /* seconds left, 0xFFFFFFFF = never expires */
    uint64_t wid;            /* write id of a meta or segment record, else 0 */
    const lmca_meta_t *meta; /* the decoded meta record (without md) when kind
                                is META, else NULL */
} lmca_scan_rec_t;

/* Return false to stop the scan. Called on libaerospike's scan thread(s),
   one record at a time; `rec` is valid during the call only. */
typedef bool (*lmca_scan_cb)(void *udata, const lmca_scan_rec_t *rec);

/* What lmca_scan() visits. */
typedef enum {
    LMCA_SCAN_META = 0,    /* valid meta records only */
    LMCA_SCAN_RECORDS = 1, /* every record holding one of the schema's small bins:
                              meta records (decoded, or UNKNOWN when corrupt) and
                              segment records with their write id; what orphan
                              sweeps pair up by write id */
    LMCA_SCAN_ALL = 2      /* every record of the set, no bins: digest, stored key
                              and TTL; kinds are told by the stored key, so only
                              with send_key */
} lmca_scan_mode;

/*
 * Visits the records of the configured set without reading payloads.
 * Aerospike returns only the records that hold a selected bin, which is why
 * the modes differ in what they see.
 * @return LMCA_OK (also when the callback stopped it), LMCA_EINVAL for a NULL
 *   callback or an unknown mode, or transport errors.
 */
LMCA_EXTERN int lmca_scan(lmca_t *h, lmca_scan_mode mode, lmca_scan_cb cb, void *udata,
                          lmca_err_t *err);

/* Why lmca_sweep() reports a record. */
typedef enum {
    LMCA_SWEEP_ORPHAN_SEGMENT = 1, /* a segment no valid meta record claims: a put
                                      killed before its commit, an abort that could
                                      not remove it, or an overwrite with fewer
                                      segments */
    LMCA_SWEEP_BROKEN_META = 2,    /* a valid meta record some of whose segments
                                      are missing: the chunk reads as a miss */
    LMCA_SWEEP_CORRUPT = 3         /* a record with schema bins that fails
                                      validation (or another schema version) */
} lmca_sweep_reason;

typedef struct lmca_sweep_rec {
    lmca_sweep_reason reason;
    lmca_rec_kind kind;      /* META, SEGMENT, or UNKNOWN for corrupt records */
    uint8_t digest[20];      /* pass it to lmca_remove_record() */
    uint64_t wid;
    uint32_t ttl;            /* 0xFFFFFFFF: never expires (pinned) */
    uint32_t nseg;           /* BROKEN_META: segments the meta record names */
    uint32_t found;          /* BROKEN_META: segments with its write id found */
} lmca_sweep_rec_t;

typedef bool (*lmca_sweep_cb)(void *udata, const lmca_sweep_rec_t *rec);

/*
 * Scans the set (LMCA_SCAN_RECORDS), pairs segments with meta records by write
 * id, and reports every record that no reader can use, on the calling thread
 * after the scan. It removes nothing. Holds about 40 bytes per scanned record.
 * Caveat: the segments of a put still in flight look orphaned; a repair should
 * remove only what two sweeps some minutes apart both report.
 * @return LMCA_OK (also when the callback stopped it), LMCA_EINVAL for a NULL
 *   callback, LMCA_ENOMEM, or transport errors.
 */
LMCA_EXTERN int lmca_sweep(lmca_t *h, lmca_sweep_cb cb, void *udata, lmca_err_t *err);

/* Removes one record by its digest (what lmca_sweep reports).
   @return LMCA_OK, LMCA_MISS (already gone) or transport errors. */
LMCA_EXTERN int lmca_remove_record(lmca_t *h, const uint8_t digest[20], lmca_err_t *err);

/* ---------------------------------------------------------------------------
 * Operators: the cluster's own words (info commands) and one chunk taken apart,
 * for tools such as the lmcache-aerospike CLI (probe, stats, inspect).
 */

/* One node's answer to lmca_info(). Called on the thread that called lmca_info,
   once per node, in the client's node order. `node_name` (e.g. "BB9...") and
   `address` ("host:port", "[v6]:port") are the client's view of the node;
   `response` is the value of the node's answer (the text after "command\t",
   trailing newlines stripped; "" for an empty answer). It is the server's text,
   unchecked: a caller that parses it must treat it as untrusted. All three are
   valid during the call only. Return false to stop before the next node. */
typedef bool (*lmca_info_cb)(void *udata, const char *node_name, const char *address,
                             const char *response);

/*
 * Sends the info command `command` (e.g. "build", "statistics",
 * "namespace/lmcache") to every node the client currently sees, one node after
 * the other, each within read_timeout_ms, and passes each answer to `cb`.
 * The command is sent as is: one command, no newline or tab.
 * When a node fails, the call stops there with its error; `cb` may already have
 * run for the nodes before it.
 * @return LMCA_OK (also when `cb` stopped it);
 *   LMCA_EINVAL       NULL or empty command, a command holding a newline or a
 *                     tab (the message quotes it, escaped), NULL cb; or a node
 *                     answered ERROR:4 (it does not know the command; the
 *                     message names the node and quotes the answer);
 *   LMCA_ENAMESPACE   a node answered ERROR:20 (namespace not found);
 *   LMCA_ECONNECTION  no node is known (empty cluster), or a node cannot be
 *                     reached (the message names it);
 *   LMCA_ETIMEOUT     a node did not answer in time;
 *   LMCA_EUNKNOWN     any other error answer (as_code holds its code).
 */
LMCA_EXTERN int lmca_info(lmca_t *h, const char *command, lmca_info_cb cb, void *udata,
                          lmca_err_t *err);

/* Nodes in the client's current view of the cluster (it changes as the tend
   thread sees nodes join and leave); 0 when it sees none. No I/O. */
LMCA_EXTERN uint32_t lmca_cluster_size(lmca_t *h);

/* What lmca_inspect() finds of one segment record. */
typedef enum {
    LMCA_SEG_OK = 0,          /* present, of the meta record's write, exactly the
                                 promised bytes, and its own crc32 (when stored)
                                 matches */
    LMCA_SEG_MISSING = 1,     /* no record */
    LMCA_SEG_OTHER_WRITE = 2, /* a valid segment of another write id: an overwrite
                                 in progress, a killed writer or a race */
    LMCA_SEG_CORRUPT = 3      /* present but not a valid segment of this chunk: a
                                 bad, missing or unknown bin, a payload of the
                                 wrong length, or its own crc32 fails */
} lmca_seg_state;

/* lmca_inspect()'s verdict on the whole payload's CRC. */
typedef enum {
    LMCA_CRC_ABSENT = 0,   /* the meta record has no crc32 bin (enable_crc32 off) */
    LMCA_CRC_OK = 1,       /* the payload's CRC-32 matches */
    LMCA_CRC_MISMATCH = 2, /* every segment is OK, but the payload's CRC-32 differs */
    LMCA_CRC_UNCHECKED = 3 /* a segment is not OK, so no payload can be assembled */
} lmca_crc_verdict;

/* One chunk taken apart. Owned by the caller; free with lmca_inspect_clear(). */
typedef struct lmca_inspect {
    lmca_meta_t meta;     /* the meta record, decoded and validated as lmca_stat
                             does (md copied when present); meta.ttl is the meta
                             record's TTL left, 0xFFFFFFFF = never expires */
    uint8_t *segs;        /* meta.nseg lmca_seg_state values, segment i at [i],
                             malloc'd, when meta.nseg > 1; NULL for a one-record
                             chunk (its payload is inline in the meta record) */
    lmca_crc_verdict crc; /* LMCA_CRC_ABSENT when meta.has_crc32 is false */
} lmca_inspect_t;

/*
 * Takes the chunk under `key` apart for an operator: reads and validates its
 * meta record exactly as a get does, then every segment record with its
 * payload, judging each (lmca_seg_state), and checks the whole payload's CRC
 * when the meta record carries one. Payloads are read a batch of segments at a
 * time (at most 32 MiB) and never kept, so memory does not grow with the
 * chunk. It removes and repairs nothing.
 * A corrupt meta record is counted and logged as reads do (lmca_stats_t
 * corrupt); the segments' and the payload's verdicts are returned, not
 * counted or logged. `out` is zeroed first, and owns memory only on LMCA_OK.
 * @return LMCA_OK (out filled);
 *   LMCA_MISS     no meta record, one not ready, or a corrupt one;
 *   LMCA_EINVAL   a bad key or a NULL `out`;
 *   LMCA_ENOMEM;  transport errors (LMCA_ETIMEOUT, LMCA_ECONNECTION,
 *   LMCA_EBUSY, LMCA_EUNKNOWN).
 */
LMCA_EXTERN int lmca_inspect(lmca_t *h, const char *key, lmca_inspect_t *out, lmca_err_t *err);

/* Frees what an inspection owns (meta.md, segs) and sets the pointers to NULL.
   Safe on a zeroed struct and on NULL. */
LMCA_EXTERN void lmca_inspect_clear(lmca_inspect_t *in);

/* Version of this engine, "0.1.0". Static storage. */
#define LMCA_VERSION "0.1.0"
LMCA_EXTERN const char *lmca_version(void);

/* Version of the libaerospike linked in, e.g. "7.6.1". Static storage. */
LMCA_EXTERN const char *lmca_aerospike_version(void);

#ifdef __cplusplus
}
#endif
#endif /* LMCA_H */
