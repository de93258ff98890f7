/*
 * config.c - defaults, setting by name (LMCache extra_config keys) and checks.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

void
lmca_config_init(lmca_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->namespace_ = "lmcache";
    cfg->set = "kv_chunks";
    /* G4 on 8 MiB blocks: four segments per block packed namespaces fuller than
       two (DESIGN.md, "Chunk layouts by measured capacity"). */
    cfg->target_segment_bytes = 2 * LMCA__MIB;
    cfg->min_segment_bytes = 64 * LMCA__KIB;
    /* Above this size a batch read is slower than parallel single-record reads
       on a real server (DESIGN.md, "Batch calls only for small records"). */
    cfg->batch_threshold_bytes = 128 * LMCA__KIB;
    cfg->default_ttl_seconds = 86400;
    cfg->read_timeout_ms = 1000;
    cfg->write_timeout_ms = 2000;
    cfg->connect_timeout_ms = 1000;
    cfg->commit_level = LMCA_COMMIT_ALL;
    cfg->replica = LMCA_REPLICA_SEQUENCE;
    cfg->max_conns_per_node = 64;
    cfg->fast_path = true;
    /* A hit moves its chunk to the head of the shared clock (touch_on_hit); the
       server's read-touch would place it at now + TTL, behind every chunk the
       clock placed ahead of that (DESIGN.md, "A hit moves the chunk past the
       head"), and rewrite it once more. */
    cfg->read_touch_ttl_percent = -1;
    cfg->touch_on_hit = true;
    cfg->shared_clock = true;
    /* NSUP evicts every 2 to 3 s at best (find, then evict a second later):
       a put waits out two of its cycles. */
    cfg->backpressure_ms = 5000;
    cfg->full_recheck_ms = 1000;
    /* The lead of the clock is 1 to 3 s (cache.c): a put due later than that
       waits for room that NSUP has not made yet. */
    cfg->max_put_wait_ms = 2000;
    /* A hit's move rewrites its chunk on every copy, as many bytes as a store:
       at 100, moves take at most half of what the devices write. */
    cfg->touch_budget_percent = 100;
}

/* How lmca_config_set() parses each key. */
typedef enum { K_STR, K_U64, K_I64, K_U32, K_I32, K_BOOL, K_COMMIT, K_REPLICA } kind_t;

static const struct field {
    const char *name;
    kind_t kind;
    size_t offset;
} fields[] = {
#define F(name, kind, member) {name, kind, offsetof(lmca_config_t, member)}
    F("hosts", K_STR, hosts),
    F("namespace", K_STR, namespace_),
    F("set", K_STR, set),
    F("target_segment_bytes", K_U64, target_segment_bytes),
    F("max_segment_bytes", K_U64, max_segment_bytes),
    F("min_segment_bytes", K_U64, min_segment_bytes),
    F("single_record_threshold_bytes", K_U64, single_record_threshold_bytes),
    F("batch_threshold_bytes", K_U64, batch_threshold_bytes),
    F("default_ttl_seconds", K_I64, default_ttl_seconds),
    F("read_timeout_ms", K_U32, read_timeout_ms),
    F("write_timeout_ms", K_U32, write_timeout_ms),
    F("connect_timeout_ms", K_U32, connect_timeout_ms),
    F("commit_level", K_COMMIT, commit_level),
    F("replica", K_REPLICA, replica),
    F("enable_crc32", K_BOOL, enable_crc32),
    F("send_key", K_BOOL, send_key),
    F("fast_path", K_BOOL, fast_path),
    F("max_conns_per_node", K_U32, max_conns_per_node),
    F("read_touch_ttl_percent", K_I32, read_touch_ttl_percent),
    F("backpressure_ms", K_U32, backpressure_ms),
    F("full_recheck_ms", K_U32, full_recheck_ms),
    F("max_put_wait_ms", K_U32, max_put_wait_ms),
    F("touch_budget_percent", K_U32, touch_budget_percent),
    F("records_per_void_second", K_U32, records_per_void_second),
    F("touch_on_hit", K_BOOL, touch_on_hit),
    F("shared_clock", K_BOOL, shared_clock),
    F("username", K_STR, username),
    F("password", K_STR, password),
    F("tls_name", K_STR, tls_name),
#undef F
};

static const char *const commit_names[] = {"all", "master"};
static const char *const replica_names[] = {"sequence", "master", "any", "prefer_rack"};

static int
parse_enum(const char *v, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcasecmp(v, names[i]) == 0)
            return i;
    return -1;
}

static int
parse_bool(const char *v)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    if (parse_enum(v, yes, 4) >= 0)
        return 1;
    if (parse_enum(v, no, 4) >= 0)
        return 0;
    return -1;
}

/* Whole-string integer parse; false on junk, overflow or an empty string. */
static bool
parse_i64(const char *v, long long *out)
{
    char *end;
    errno = 0;
    *out = strtoll(v, &end, 10);
    return *v != '\0' && *end == '\0' && errno == 0;
}

static int
bad_value(lmca_err_t *err, const char *key, const char *value, const char *why)
{
    return lmca__fail(err, LMCA_ECONFIG, 0, "config %s=\"%s\": %s", key, value, why);
}

static int
set_field(lmca_config_t *cfg, const struct field *f, const char *value, lmca_err_t *err)
{
    char *p = (char *)cfg + f->offset;
    long long n;
    int e;

    switch (f->kind) {
    case K_STR:
        *(const char **)p = value;
        return LMCA_OK;
    case K_BOOL:
        if ((e = parse_bool(value)) < 0)
            return bad_value(err, f->name, value, "expected true or false");
        *(bool *)p = e;
        return LMCA_OK;
    case K_COMMIT:
        if ((e = parse_enum(value, commit_names, 2)) < 0)
            return bad_value(err, f->name, value, "expected all or master");
        *(lmca_commit_level *)p = (lmca_commit_level)e;
        return LMCA_OK;
    case K_REPLICA:
        if ((e = parse_enum(value, replica_names, 4)) < 0)
            return bad_value(err, f->name, value,
                             "expected sequence, master, any or prefer_rack");
        *(lmca_replica *)p = (lmca_replica)e;
        return LMCA_OK;
    default:
        break;
    }
    if (!parse_i64(value, &n))
        return bad_value(err, f->name, value, "expected an integer");
    if (f->kind == K_I64) {
        *(int64_t *)p = n;
        return LMCA_OK;
    }
    if (f->kind == K_I32) { /* the range is checked by lmca_config_validate */
        if (n < INT32_MIN || n > INT32_MAX)
            return bad_value(err, f->name, value, "out of range");
        *(int32_t *)p = (int32_t)n;
        return LMCA_OK;
    }
    if (n < 0)
        return bad_value(err, f->name, value, "must not be negative");
    if (f->kind == K_U32) {
        if (n > UINT32_MAX)
            return bad_value(err, f->name, value, "too large");
        *(uint32_t *)p = (uint32_t)n;
    } else {
        *(uint64_t *)p = (uint64_t)n;
    }
    return LMCA_OK;
}

int
lmca_config_set(lmca_config_t *cfg, const char *key, const char *value, lmca_err_t *err)
{
    if (cfg == NULL || key == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_config_set: NULL config or key");
    if (value == NULL)
        return lmca__fail(err, LMCA_ECONFIG, 0, "config %s: missing value", key);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strcmp(fields[i].name, key) == 0)
            return set_field(cfg, &fields[i], value, err);
    return lmca__fail(err, LMCA_ECONFIG, 0, "config %s: unknown key", key);
}

static int
bad_number(lmca_err_t *err, const char *key, long long value, const char *why)
{
    return lmca__fail(err, LMCA_ECONFIG, 0, "config %s=%lld: %s", key, value, why);
}

/* One seed: "host", "host:port", "host:tlsname:port" or "[ipv6]" with the same
   tails. The client takes malformed ports without complaint (99999, -1), so
   they are refused here, naming the seed. */
static bool
seed_ok(const char *seed, size_t len)
{
    const char *end = seed + len, *p = seed, *port;
    int colons = 0;

    if (len == 0)
        return false;
    if (*p == '[') { /* an IPv6 address: skip to its closing bracket */
        while (p < end && *p != ']')
            p++;
        if (p == end || p == seed + 1)
            return false;
    }
    for (const char *q = p; q < end; q++)
        colons += *q == ':';
    if (colons == 0)
        return *seed != '[' || p + 1 == end;
    if (colons > 2 || (port = memrchr(p, ':', (size_t)(end - p))) + 1 == end)
        return false;
    long n = 0;
    for (const char *q = port + 1; q < end; q++) {
        if (*q < '0' || *q > '9' || (n = n * 10 + (*q - '0')) > 65535)
            return false;
    }
    return n >= 1 && port > seed && port[-1] != ':';
}

static int
check_hosts(const char *hosts, lmca_err_t *err)
{
    if (hosts == NULL || hosts[0] == '\0')
        return lmca__fail(err, LMCA_ECONFIG, 0, "config hosts: required (\"host:port,...\")");
    for (const char *s = hosts;;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (!seed_ok(s, len))
            return lmca__fail(err, LMCA_ECONFIG, 0,
                              "config hosts=\"%s\": seed \"%.*s\" is not host[:port] "
                              "(port 1 to 65535)",
                              hosts, (int)(len < 80 ? len : 80), s);
        if (comma == NULL)
            return LMCA_OK;
        s = comma + 1;
    }
}

/* Names are bounded by Aerospike: namespace < 32 bytes, set < 64. */
static int
check_names(const lmca_config_t *cfg, lmca_err_t *err)
{
    int rc = check_hosts(cfg->hosts, err);
    if (rc != LMCA_OK)
        return rc;
    if (cfg->namespace_ == NULL || cfg->namespace_[0] == '\0' || strlen(cfg->namespace_) > 31)
        return lmca__fail(err, LMCA_ECONFIG, 0,
                          "config namespace=\"%s\": must be 1 to 31 bytes",
                          cfg->namespace_ ? cfg->namespace_ : "");
    if (cfg->set == NULL || strlen(cfg->set) > 63)
        return lmca__fail(err, LMCA_ECONFIG, 0, "config set=\"%s\": must be at most 63 bytes",
                          cfg->set ? cfg->set : "(null)");
    return LMCA_OK;
}

static int
check_sizes(const lmca_config_t *cfg, lmca_err_t *err)
{
    if (cfg->min_segment_bytes == 0)
        return bad_number(err, "min_segment_bytes", 0, "must be positive");
    if (cfg->target_segment_bytes < cfg->min_segment_bytes)
        return bad_number(err, "target_segment_bytes", (long long)cfg->target_segment_bytes,
                          "is below min_segment_bytes");
    if (cfg->max_segment_bytes != 0 && cfg->max_segment_bytes < cfg->min_segment_bytes)
        return bad_number(err, "max_segment_bytes", (long long)cfg->max_segment_bytes,
                          "is below min_segment_bytes");
    if (cfg->target_segment_bytes > LMCA_BLOCK_7_1)
        return bad_number(err, "target_segment_bytes", (long long)cfg->target_segment_bytes,
                          "exceeds 8 MiB, the largest record Aerospike stores");
    if (cfg->max_segment_bytes > LMCA_BLOCK_7_1)
        return bad_number(err, "max_segment_bytes", (long long)cfg->max_segment_bytes,
                          "exceeds 8 MiB, the largest record Aerospike stores");
    return LMCA_OK;
}

static int
check_policies(const lmca_config_t *cfg, lmca_err_t *err)
{
    /* -1 never expire, -2 keep, 0 namespace default; Aerospike caps TTLs at 10 years. */
    if (cfg->default_ttl_seconds < -2 || cfg->default_ttl_seconds > 315360000)
        return bad_number(err, "default_ttl_seconds", (long long)cfg->default_ttl_seconds,
                          "must be -2, -1, 0 or 1 to 315360000 seconds");
    if (cfg->read_timeout_ms == 0)
        return bad_number(err, "read_timeout_ms", 0, "must be positive");
    if (cfg->write_timeout_ms == 0)
        return bad_number(err, "write_timeout_ms", 0, "must be positive");
    if (cfg->connect_timeout_ms == 0)
        return bad_number(err, "connect_timeout_ms", 0, "must be positive");
    if (cfg->max_conns_per_node == 0)
        return bad_number(err, "max_conns_per_node", 0, "must be positive");
    if ((unsigned)cfg->commit_level > LMCA_COMMIT_MASTER)
        return bad_number(err, "commit_level", (long long)cfg->commit_level, "unknown value");
    if ((unsigned)cfg->replica > LMCA_REPLICA_PREFER_RACK)
        return bad_number(err, "replica", (long long)cfg->replica, "unknown value");
    if (cfg->read_touch_ttl_percent < -1 || cfg->read_touch_ttl_percent > 100)
        return bad_number(err, "read_touch_ttl_percent", (long long)cfg->read_touch_ttl_percent,
                          "must be -1 (never), 0 (the namespace's default) or 1 to 100");
    if (cfg->backpressure_ms > 600000)
        return bad_number(err, "backpressure_ms", (long long)cfg->backpressure_ms,
                          "must be at most 600000 (10 minutes)");
    if (cfg->full_recheck_ms == 0 || cfg->full_recheck_ms > 600000)
        return bad_number(err, "full_recheck_ms", (long long)cfg->full_recheck_ms,
                          "must be 1 to 600000");
    if (cfg->touch_budget_percent > 100000)
        return bad_number(err, "touch_budget_percent", (long long)cfg->touch_budget_percent,
                          "must be 0 (no budget) to 100000");
    if (cfg->max_put_wait_ms > 600000)
        return bad_number(err, "max_put_wait_ms", (long long)cfg->max_put_wait_ms,
                          "must be at most 600000 (10 minutes)");
    return LMCA_OK;
}

int
lmca_config_validate(const lmca_config_t *cfg, lmca_err_t *err)
{
    int rc;
    if (cfg == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_config_validate: NULL config");
    if ((rc = check_names(cfg, err)) != LMCA_OK)
        return rc;
    if ((rc = check_sizes(cfg, err)) != LMCA_OK)
        return rc;
    return check_policies(cfg, err);
}
