/*
 * limits.c - namespace info parsing, limit resolution and the shard planner.
 * Pure functions: no I/O, so every rule here is unit-tested offline.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---------------------------------------------------------------------------
 * Parsing "namespace/<ns>": "k=v;k=v;...", statistics first, then config.
 */

/* Finds `key` as a whole key of the k=v list; returns its value and length. */
static const char *
find_value(const char *s, size_t n, const char *key, size_t *len)
{
    size_t klen = strlen(key);
    const char *end = s + n;

    for (const char *p = s; p < end;) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *stop = semi ? semi : end;
        if ((size_t)(stop - p) > klen && memcmp(p, key, klen) == 0 && p[klen] == '=') {
            *len = (size_t)(stop - p) - klen - 1;
            return p + klen + 1;
        }
        p = stop + 1;
    }
    return NULL;
}

/* How many keys `prefix` + "<digits>]" the list has: a device namespace's
   storage-engine.device[i] or storage-engine.file[i], one per device. */
static uint32_t
count_indexed(const char *s, size_t n, const char *prefix)
{
    size_t plen = strlen(prefix);
    const char *end = s + n;
    uint32_t count = 0;

    for (const char *p = s; p < end;) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *stop = semi ? semi : end, *q = p + plen;
        if ((size_t)(stop - p) > plen && memcmp(p, prefix, plen) == 0) {
            while (q < stop && *q >= '0' && *q <= '9')
                q++;
            if (q > p + plen && q + 1 < stop && q[0] == ']' && q[1] == '=')
                count++;
        }
        p = stop + 1;
    }
    return count;
}

/* Reads an integer field; absent leaves *out untouched. */
static int
read_number(const char *s, size_t n, const char *key, int64_t *out, lmca_err_t *err)
{
    char buf[32], *endp;
    size_t len;
    const char *v = find_value(s, n, key, &len);
    long long x;

    if (v == NULL)
        return LMCA_OK;
    if (len == 0 || len >= sizeof buf)
        return lmca__fail(err, LMCA_ESERVER_LIMIT, 0, "namespace info: %s=\"%.*s\" is not a number",
                          key, (int)(len < 64 ? len : 64), v);
    memcpy(buf, v, len);
    buf[len] = '\0';
    errno = 0;
    x = strtoll(buf, &endp, 10);
    if (*endp != '\0' || errno != 0)
        return lmca__fail(err, LMCA_ESERVER_LIMIT, 0, "namespace info: %s=\"%s\" is not a number",
                          key, buf);
    *out = x;
    return LMCA_OK;
}

const char *
lmca__info_value(const char *info, size_t *n)
{
    const char *tab = strchr(info, '\t');
    const char *s = tab ? tab + 1 : info;
    size_t len = strlen(s);
    while (len > 0 && s[len - 1] == '\n')
        len--;
    *n = len;
    return s;
}

/* The value without the trailing ';' some versions end their lists with. */
static const char *
info_body(const char *info, size_t *n)
{
    const char *s = lmca__info_value(info, n);
    while (*n > 0 && (s[*n - 1] == '\n' || s[*n - 1] == ';'))
        (*n)--;
    return s;
}

static bool
is_true(const char *s, size_t n, const char *key)
{
    size_t len;
    const char *v = find_value(s, n, key, &len);
    return v != NULL && len == 4 && memcmp(v, "true", 4) == 0;
}

int
lmca_server_info_parse(const char *info, lmca_server_info_t *out, lmca_err_t *err)
{
    static const struct {
        const char *key;
        size_t offset;
        bool size; /* negative sizes are junk */
    } fields[] = {
        {"max-record-size", offsetof(lmca_server_info_t, max_record_size), true},
        {"storage-engine.write-block-size", offsetof(lmca_server_info_t, write_block_size), true},
        {"write-block-size", offsetof(lmca_server_info_t, write_block_size), true},
        {"storage-engine.flush-size", offsetof(lmca_server_info_t, flush_size), true},
        {"flush-size", offsetof(lmca_server_info_t, flush_size), true},
        {"nsup-period", offsetof(lmca_server_info_t, nsup_period), false},
        {"default-ttl", offsetof(lmca_server_info_t, default_ttl), false},
        {"storage-engine.stop-writes-used-pct",
         offsetof(lmca_server_info_t, stop_writes_used_pct), false},
        {"storage-engine.stop-writes-avail-pct",
         offsetof(lmca_server_info_t, stop_writes_avail_pct), false},
        {"stop-writes-sys-memory-pct", offsetof(lmca_server_info_t, stop_writes_sys_memory_pct),
         false},
        {"storage-engine.data-size", offsetof(lmca_server_info_t, data_size), false},
        {"storage-engine.post-write-cache", offsetof(lmca_server_info_t, post_write_cache),
         false},
        {"storage-engine.evict-used-pct", offsetof(lmca_server_info_t, evict_used_pct), false},
        {"evict-tenths-pct", offsetof(lmca_server_info_t, evict_tenths_pct), false},
        {"evict-hist-buckets", offsetof(lmca_server_info_t, evict_hist_buckets), false},
        {"objects", offsetof(lmca_server_info_t, objects), false},
        {"non_expirable_objects", offsetof(lmca_server_info_t, non_expirable_objects), false},
        {"data_used_bytes", offsetof(lmca_server_info_t, data_used_bytes), false},
        {"data_total_bytes", offsetof(lmca_server_info_t, data_total_bytes), false},
        {"evicted_objects", offsetof(lmca_server_info_t, evicted_objects), false},
        {"evict_void_time", offsetof(lmca_server_info_t, evict_void_time), false},
        /* The configured factor first: the effective one, later, wins. */
        {"replication-factor", offsetof(lmca_server_info_t, replication_factor), false},
        {"effective_replication_factor", offsetof(lmca_server_info_t, replication_factor),
         false},
    };
    size_t n, len;
    const char *s, *v;

    memset(out, 0, sizeof *out);
    out->nsup_period = out->default_ttl = -1;
    out->stop_writes_used_pct = out->stop_writes_avail_pct = -1;
    out->stop_writes_sys_memory_pct = out->data_size = out->post_write_cache = -1;
    out->evict_used_pct = out->evict_tenths_pct = out->evict_hist_buckets = -1;
    out->objects = out->non_expirable_objects = -1;
    out->data_used_bytes = out->data_total_bytes = out->evicted_objects = -1;
    out->evict_void_time = -1;
    out->replication_factor = -1;
    if (info == NULL)
        return lmca__fail(err, LMCA_ENAMESPACE, 0, "namespace info: no answer");
    s = info_body(info, &n);
    if (n == 0 || strncmp(s, "ERROR", 5) == 0 || strncmp(s, "FAIL", 4) == 0 ||
        ((v = find_value(s, n, "type", &len)) && len == 7 && memcmp(v, "unknown", 7) == 0))
        return lmca__fail(err, LMCA_ENAMESPACE, 0, "namespace info: server answered \"%.200s\"",
                          info);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        int64_t x = INT64_MIN;
        int rc = read_number(s, n, fields[i].key, &x, err);
        if (rc != LMCA_OK)
            return rc;
        if (x == INT64_MIN)
            continue;
        if (fields[i].size && x < 0)
            return lmca__fail(err, LMCA_ESERVER_LIMIT, 0, "namespace info: %s=%lld is negative",
                              fields[i].key, (long long)x);
        if (fields[i].size)
            *(uint64_t *)((char *)out + fields[i].offset) = (uint64_t)x;
        else
            *(int64_t *)((char *)out + fields[i].offset) = x;
    }
    out->allow_ttl_without_nsup = is_true(s, n, "allow-ttl-without-nsup");
    out->hwm_breached = is_true(s, n, "hwm_breached");
    out->stop_writes = is_true(s, n, "stop_writes");
    out->devices = count_indexed(s, n, "storage-engine.device[") +
                   count_indexed(s, n, "storage-engine.file[");
    return LMCA_OK;
}

/* ---------------------------------------------------------------------------
 * The write-block grid.
 */

/* Slot of a record when k records share one block; 16 bytes is Aerospike's
   storage unit (RBLOCK), so slots are rounded down to it. */
static uint64_t
slot(uint64_t block, uint64_t k)
{
    return block / k / 16 * 16;
}

uint64_t
lmca_grid_floor(uint64_t block, uint64_t cap, uint64_t bytes)
{
    if (block == 0)
        return 0;
    for (uint64_t k = 1; slot(block, k) > LMCA_RECORD_MARGIN; k++) {
        uint64_t s = slot(block, k);
        if (s <= cap && s - LMCA_RECORD_MARGIN <= bytes)
            return s - LMCA_RECORD_MARGIN;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Resolving the limits of a handle.
 */

static int
server_cap(const lmca_server_info_t *srv, lmca_limits_t *out, lmca_err_t *err)
{
    if (srv->max_record_size > LMCA_BLOCK_7_1) {
        return lmca__fail(err, LMCA_ESERVER_LIMIT, 0,
                          "namespace max-record-size=%llu is above 8 MiB, the largest record "
                          "any Aerospike version stores",
                          (unsigned long long)srv->max_record_size);
    } else if (srv->max_record_size > 0) {
        /* 7.1+ fixes the write block at 8 MiB and no longer reports it; 7.0 may
           report both, and then the block is the smaller bound. */
        out->server_cap = srv->max_record_size;
        out->cap_source = "max-record-size";
        out->block_bytes = srv->write_block_size ? srv->write_block_size : LMCA_BLOCK_7_1;
        if (out->server_cap > out->block_bytes)
            out->server_cap = out->block_bytes;
    } else if (srv->write_block_size > 0) {
        out->server_cap = out->block_bytes = srv->write_block_size;
        out->cap_source = "write-block-size";
    } else {
        return lmca__fail(err, LMCA_ESERVER_LIMIT, 0,
                          "namespace reports neither max-record-size nor write-block-size "
                          "(or both are 0); refusing to guess a record-size cap");
    }
    if (out->server_cap < LMCA_CAP_MIN || out->block_bytes > LMCA_BLOCK_7_1)
        return lmca__fail(err, LMCA_ESERVER_LIMIT, 0,
                          "namespace %s=%llu (write block %llu) is outside 128 KiB to 8 MiB",
                          out->cap_source, (unsigned long long)out->server_cap,
                          (unsigned long long)out->block_bytes);
    return LMCA_OK;
}

/* Lowers `*value` (a setting named `key`) to at most `ceiling`, then onto the
   grid. Exceeding the server is a WARNING (spec 4.3.6); snapping is a note. */
static int
fit(const lmca_config_t *cfg, const lmca_limits_t *l, const char *key, uint64_t *value,
    uint64_t ceiling, lmca_err_t *err)
{
    uint64_t want = *value;
    if (want > ceiling) {
        lmca__log(cfg, LMCA_LOG_WARNING, "%s=%llu exceeds the server-derived %llu; clamped", key,
                  (unsigned long long)want, (unsigned long long)ceiling);
        want = ceiling;
    }
    *value = lmca_grid_floor(l->block_bytes, l->server_cap, want);
    if (*value == 0)
        return lmca__fail(err, LMCA_ECONFIG, 0,
                          "config %s=%llu: below the smallest record size that packs a "
                          "%llu-byte write block",
                          key, (unsigned long long)want, (unsigned long long)l->block_bytes);
    if (*value != want)
        lmca__log(cfg, LMCA_LOG_INFO, "%s=%llu lowered to %llu to pack %llu-byte write blocks",
                  key, (unsigned long long)want, (unsigned long long)*value,
                  (unsigned long long)l->block_bytes);
    return LMCA_OK;
}

static int
check_ttl(const lmca_server_info_t *srv, const lmca_config_t *cfg, lmca_err_t *err)
{
    if (cfg->default_ttl_seconds > 0 && srv->nsup_period == 0 && !srv->allow_ttl_without_nsup)
        return lmca__fail(err, LMCA_ETTL, 22,
                          "default_ttl_seconds=%lld but namespace \"%s\" has nsup-period 0, so "
                          "the server refuses every write with a TTL; set nsup-period > 0 in "
                          "the namespace config, or default_ttl_seconds to -1 or 0",
                          (long long)cfg->default_ttl_seconds, cfg->namespace_);
    return LMCA_OK;
}

static void
log_limits(const lmca_config_t *cfg, const lmca_server_info_t *srv, const lmca_limits_t *l)
{
    lmca__log(cfg, LMCA_LOG_INFO, "namespace '%s' record-size limits discovered:", cfg->namespace_);
    lmca__log(cfg, LMCA_LOG_INFO,
              "  server: max-record-size=%llu, write-block-size=%llu, flush-size=%llu, "
              "nsup-period=%lld",
              (unsigned long long)srv->max_record_size,
              (unsigned long long)srv->write_block_size, (unsigned long long)srv->flush_size,
              (long long)srv->nsup_period);
    lmca__log(cfg, LMCA_LOG_INFO,
              "  derived: cap=%llu from %s, block=%llu, max_segment_bytes=%llu (block/k minus "
              "%u margin)",
              (unsigned long long)l->server_cap, l->cap_source,
              (unsigned long long)l->block_bytes, (unsigned long long)l->max_segment_bytes,
              LMCA_RECORD_MARGIN);
    lmca__log(cfg, LMCA_LOG_INFO,
              "  effective: target_segment_bytes=%llu, single_record_threshold_bytes=%llu, "
              "min_segment_bytes=%llu, batch_threshold_bytes=%llu",
              (unsigned long long)l->target_segment_bytes,
              (unsigned long long)l->single_record_threshold_bytes,
              (unsigned long long)l->min_segment_bytes,
              (unsigned long long)l->batch_threshold_bytes);
}

int
lmca_limits_resolve(const lmca_server_info_t *srv, const lmca_config_t *cfg,
                    lmca_limits_t *out, lmca_err_t *err)
{
    lmca_limits_t l = {0};
    int rc;

    if ((rc = lmca_config_validate(cfg, err)) != LMCA_OK || (rc = server_cap(srv, &l, err)) ||
        (rc = check_ttl(srv, cfg, err)))
        return rc;
    l.max_segment_bytes = lmca_grid_floor(l.block_bytes, l.server_cap, l.server_cap);
    if (cfg->max_segment_bytes != 0) {
        uint64_t max = cfg->max_segment_bytes;
        if ((rc = fit(cfg, &l, "max_segment_bytes", &max, l.max_segment_bytes, err)))
            return rc;
        l.max_segment_bytes = max;
    }
    l.target_segment_bytes = cfg->target_segment_bytes;
    if ((rc = fit(cfg, &l, "target_segment_bytes", &l.target_segment_bytes, l.max_segment_bytes,
                  err)))
        return rc;
    l.single_record_threshold_bytes = cfg->single_record_threshold_bytes
                                          ? cfg->single_record_threshold_bytes
                                          : l.target_segment_bytes;
    if (l.single_record_threshold_bytes > l.max_segment_bytes) {
        lmca__log(cfg, LMCA_LOG_WARNING,
                  "single_record_threshold_bytes=%llu exceeds max_segment_bytes=%llu; clamped",
                  (unsigned long long)l.single_record_threshold_bytes,
                  (unsigned long long)l.max_segment_bytes);
        l.single_record_threshold_bytes = l.max_segment_bytes;
    }
    l.min_segment_bytes = cfg->min_segment_bytes;
    if (l.target_segment_bytes < l.min_segment_bytes)
        return lmca__fail(err, LMCA_ECONFIG, 0,
                          "config min_segment_bytes=%llu: above the target segment size %llu "
                          "this server allows",
                          (unsigned long long)l.min_segment_bytes,
                          (unsigned long long)l.target_segment_bytes);
    l.batch_threshold_bytes = cfg->batch_threshold_bytes;
    log_limits(cfg, srv, &l);
    *out = l;
    return LMCA_OK;
}

/* ---------------------------------------------------------------------------
 * The planner.
 */

int
lmca_plan(const lmca_limits_t *l, uint64_t payload, lmca_plan_t *plan, lmca_err_t *err)
{
    uint64_t nseg;

    /* Full grid-sized segments pack write blocks exactly; only the last one is
       shorter, and a short record packs as well as any. A payload that fits one
       segment stays one record even above a threshold set below the target. */
    nseg = payload / l->target_segment_bytes + (payload % l->target_segment_bytes != 0);
    if (payload <= l->single_record_threshold_bytes || nseg <= 1) {
        plan->nseg = 1;
        plan->seg_b = plan->last_b = payload;
        return LMCA_OK;
    }
    if (nseg > LMCA_MAX_SEGMENTS)
        return lmca__fail(err, LMCA_EINVAL, 0,
                          "payload of %llu bytes needs %llu segments of %llu; at most %u allowed",
                          (unsigned long long)payload, (unsigned long long)nseg,
                          (unsigned long long)l->target_segment_bytes, LMCA_MAX_SEGMENTS);
    plan->nseg = (uint32_t)nseg;
    plan->seg_b = l->target_segment_bytes;
    plan->last_b = payload - (nseg - 1) * l->target_segment_bytes;
    return LMCA_OK;
}
