/*
 * test_limits.c - namespace info parsing, limit resolution, the write-block grid
 * and the shard planner. Pure functions: no server needed.
 */
#include <stdio.h>

#include "harness.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)
#define MARGIN 65536ull

/* ---------------------------------------------------------------------------
 * Helpers
 */

static char logbuf[16 * 1024];
static int n_warnings, n_infos;

static void
collect(void *udata, int level, const char *msg)
{
    size_t n = strlen(logbuf);
    (void)udata;
    n_warnings += level >= LMCA_LOG_WARNING;
    n_infos += level >= LMCA_LOG_INFO && level < LMCA_LOG_WARNING;
    snprintf(logbuf + n, sizeof logbuf - n, "%s %s\n",
             level >= LMCA_LOG_WARNING ? "WARNING" : level >= LMCA_LOG_INFO ? "INFO" : "DEBUG",
             msg);
}

/* Is there a log line at `level` ("WARNING"/"INFO") containing every needle? */
static bool
log_has(const char *level, const char *needle1, const char *needle2)
{
    char line[1024];
    const char *p = logbuf;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        snprintf(line, sizeof line, "%.*s", (int)len, p);
        if (strncmp(line, level, strlen(level)) == 0 && line[strlen(level)] == ' ' &&
            strstr(line, needle1) && (needle2 == NULL || strstr(line, needle2)))
            return true;
        p += len + (nl != NULL);
    }
    return false;
}
static void
assert_log(int line, const char *level, const char *n1, const char *n2)
{
    if (!log_has(level, n1, n2))
        th_fail(__FILE__, line, "no %s line with \"%s\" and \"%s\" in log:\n%s", level, n1,
                n2 ? n2 : "", logbuf);
}
#define ASSERT_LOG(level, n1, n2) assert_log(__LINE__, level, n1, n2)

static void
test_config(lmca_config_t *cfg)
{
    lmca_config_init(cfg);
    cfg->hosts = "127.0.0.1:3000";
    cfg->log_cb = collect;
    logbuf[0] = '\0';
    n_warnings = n_infos = 0;
}

/* A 7.1+/8.x namespace: max-record-size only, NSUP running. */
static lmca_server_info_t
srv_8x(uint64_t max_record_size)
{
    lmca_server_info_t s = {0};
    s.max_record_size = max_record_size;
    s.nsup_period = 120;
    s.default_ttl = 0;
    return s;
}

/* A <= 7.0 namespace: write-block-size only. */
static lmca_server_info_t
srv_70(uint64_t write_block_size)
{
    lmca_server_info_t s = srv_8x(0);
    s.write_block_size = write_block_size;
    return s;
}

/* The grid value for k records per block: floor(B/k/16)*16 - margin. */
static uint64_t
grid(uint64_t block, uint64_t k)
{
    return block / k / 16 * 16 - MARGIN;
}

/* Limits as resolved for an 8.x namespace with max-record-size 8M and defaults. */
static lmca_limits_t
limits_8m(void)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    test_config(&cfg);
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    return l;
}

/* ---------------------------------------------------------------------------
 * lmca_server_info_parse
 */

/* As a CE 8.1.2 memory namespace answers (reference 8.6): stats, then config. */
static const char info_81_memory[] =
    "namespace/lmcache\t"
    "ns_cluster_size=1;effective_replication_factor=1;objects=0;tombstones=0;"
    "xdr_tombstones=0;master_objects=0;prole_objects=0;non_replica_objects=0;"
    "dead_partitions=0;unavailable_partitions=0;clock_skew_stop_writes=false;"
    "stop_writes=false;hwm_breached=false;current_time=479000000;"
    "evicted_objects=0;evict_ttl=0;evict_void_time=534441150;smd_evict_void_time=534441150;"
    "data_used_bytes=0;data_total_bytes=2147483648;data_avail_pct=100;"
    "index_used_bytes=0;client_write_success=0;"
    "allow-ttl-without-nsup=false;auto-revive=false;conflict-resolution-policy=generation;"
    "default-read-touch-ttl-pct=0;default-ttl=0;disable-cold-start-eviction=false;"
    "enable-benchmarks-write=false;evict-hist-buckets=10000;evict-tenths-pct=5;"
    "ignore-migrate-fill-delay=false;index-stage-size=1073741824;max-record-size=8388608;"
    "migrate-order=5;nsup-hist-period=3600;nsup-period=120;nsup-threads=1;"
    "read-consistency-level-override=off;replication-factor=1;sindex-stage-size=1073741824;"
    "single-scan-threads=4;stop-writes-sys-memory-pct=90;strong-consistency=false;"
    "transaction-pending-limit=20;truncate-threads=4;write-commit-level-override=off;"
    "storage-engine=memory;storage-engine.data-size=2147483648;"
    "storage-engine.defrag-lwm-pct=50;storage-engine.evict-used-pct=0;"
    "storage-engine.stop-writes-avail-pct=5;storage-engine.stop-writes-used-pct=70\n";

static lmca_server_info_t
parse_ok(int line, const char *info)
{
    lmca_server_info_t s;
    lmca_err_t err = {0};
    int rc = lmca_server_info_parse(info, &s, &err);
    if (rc != LMCA_OK)
        th_fail(__FILE__, line, "parse: %s (%s)", lmca_status_name(rc), err.msg);
    return s;
}
#define PARSE_OK(info) parse_ok(__LINE__, info)

TEST(parse_81_memory_namespace)
{
    lmca_server_info_t s = PARSE_OK(info_81_memory);
    ASSERT_EQ(s.max_record_size, 8388608);
    ASSERT_EQ(s.write_block_size, 0);
    ASSERT_EQ(s.flush_size, 0);
    ASSERT_EQ(s.nsup_period, 120);
    ASSERT_EQ(s.default_ttl, 0);
    ASSERT(!s.allow_ttl_without_nsup);
    /* NSUP's last cut, as SMD kept it across the node's restart. */
    ASSERT_EQ(s.evicted_objects, 0);
    ASSERT_EQ(s.evict_void_time, 534441150);
}

TEST(parse_71_device_namespace)
{
    lmca_server_info_t s = PARSE_OK(
        "namespace/lmcache\tns_cluster_size=3;objects=1200;stop_writes=false;"
        "allow-ttl-without-nsup=false;default-ttl=2592000;max-record-size=1048576;"
        "nsup-period=60;replication-factor=2;storage-engine=device;"
        "storage-engine.device[0]=/dev/nvme0n1;storage-engine.flush-max-ms=1000;"
        "storage-engine.flush-size=1048576;storage-engine.max-write-cache=67108864;"
        "storage-engine.post-write-cache=268435456\n");
    ASSERT_EQ(s.max_record_size, 1048576);
    ASSERT_EQ(s.post_write_cache, 268435456);
    ASSERT_EQ(s.devices, 1);
    ASSERT_EQ(s.write_block_size, 0);
    ASSERT_EQ(s.flush_size, 1048576);
    ASSERT_EQ(s.nsup_period, 60);
    ASSERT_EQ(s.default_ttl, 2592000);
    ASSERT(!s.allow_ttl_without_nsup);
    ASSERT_EQ(s.evict_void_time, -1); /* not reported */
}

TEST(parse_70_device_namespace)
{
    lmca_server_info_t s = PARSE_OK(
        "ns_cluster_size=1;objects=5;allow-ttl-without-nsup=true;default-ttl=0;"
        "max-record-size=0;nsup-period=0;storage-engine=device;"
        "storage-engine.file[0]=/opt/aerospike/data/lmcache.dat;"
        "storage-engine.file[1]=/opt/aerospike/data/b.dat;storage-engine.file[1].age=-1;"
        "storage-engine.filex[2]=x;storage-engine.file[]=y;"
        "storage-engine.write-block-size=1048576;storage-engine.post-write-queue=256");
    ASSERT_EQ(s.devices, 2); /* file[0] and file[1]; not .age, filex[2] or file[] */
    ASSERT_EQ(s.max_record_size, 0);
    ASSERT_EQ(s.write_block_size, 1048576);
    ASSERT_EQ(s.flush_size, 0);
    ASSERT_EQ(s.nsup_period, 0);
    ASSERT_EQ(s.default_ttl, 0);
    ASSERT(s.allow_ttl_without_nsup);
}

TEST(parse_6x_unprefixed_write_block_size)
{
    lmca_server_info_t s = PARSE_OK(
        "namespace/lmcache\tobjects=0;type=device;default-ttl=86400;max-record-size=0;"
        "nsup-period=120;write-block-size=131072;allow-ttl-without-nsup=false;\n");
    ASSERT_EQ(s.max_record_size, 0);
    ASSERT_EQ(s.write_block_size, 131072);
    ASSERT_EQ(s.flush_size, 0);
    ASSERT_EQ(s.nsup_period, 120);
    ASSERT_EQ(s.default_ttl, 86400);
}

TEST(parse_reports_absent_fields_as_unset)
{
    lmca_server_info_t s = PARSE_OK("objects=0;storage-engine=memory");
    ASSERT_EQ(s.max_record_size, 0);
    ASSERT_EQ(s.write_block_size, 0);
    ASSERT_EQ(s.flush_size, 0);
    ASSERT_EQ(s.nsup_period, -1);
    ASSERT_EQ(s.default_ttl, -1);
    ASSERT_EQ(s.post_write_cache, -1);
    ASSERT(!s.allow_ttl_without_nsup);
}

TEST(parse_matches_whole_keys_only)
{
    lmca_server_info_t s = PARSE_OK("xmax-record-size=5;max-record-size-foo=1;"
                                    "storage-engine.write-block-size-x=7;"
                                    "old-nsup-period=9;default-ttl-x=3");
    ASSERT_EQ(s.max_record_size, 0);
    ASSERT_EQ(s.write_block_size, 0);
    ASSERT_EQ(s.nsup_period, -1);
    ASSERT_EQ(s.default_ttl, -1);
}

TEST(parse_skips_lookalike_keys_before_the_real_one)
{
    lmca_server_info_t s =
        PARSE_OK("xmax-record-size=5;max-record-size-foo=1;max-record-size=2097152");
    ASSERT_EQ(s.max_record_size, 2097152);
}

TEST(parse_first_and_last_pairs_are_found)
{
    lmca_server_info_t s = PARSE_OK("namespace/x\tmax-record-size=1048576;nsup-period=7\n");
    ASSERT_EQ(s.max_record_size, 1048576);
    ASSERT_EQ(s.nsup_period, 7);
}

static void
expect_parse_fail(int line, const char *info, int want, const char *needle)
{
    lmca_server_info_t s;
    lmca_err_t err = {0};
    int rc = lmca_server_info_parse(info, &s, &err);
    if (rc != want || err.status != want)
        th_fail(__FILE__, line, "parse \"%s\": got %s, want %s (%s)", info ? info : "(null)",
                lmca_status_name(rc), lmca_status_name(want), err.msg);
    if (needle && strstr(err.msg, needle) == NULL)
        th_fail(__FILE__, line, "message \"%s\" does not contain \"%s\"", err.msg, needle);
}

TEST(parse_unknown_namespace_is_enamespace)
{
    expect_parse_fail(__LINE__, "namespace/nope\ttype=unknown\n", LMCA_ENAMESPACE,
                      "type=unknown");
    expect_parse_fail(__LINE__, "type=unknown", LMCA_ENAMESPACE, "type=unknown");
}

TEST(parse_error_answer_is_enamespace)
{
    expect_parse_fail(__LINE__, "ERROR:4:namespace not found", LMCA_ENAMESPACE,
                      "ERROR:4:namespace not found");
    expect_parse_fail(__LINE__, "namespace/x\tERROR:4:bad\n", LMCA_ENAMESPACE, "ERROR:4");
}

TEST(parse_empty_answer_is_enamespace)
{
    expect_parse_fail(__LINE__, "", LMCA_ENAMESPACE, NULL);
    expect_parse_fail(__LINE__, "namespace/lmcache\t\n", LMCA_ENAMESPACE, NULL);
}

TEST(parse_null_answer_is_enamespace)
{
    expect_parse_fail(__LINE__, NULL, LMCA_ENAMESPACE, NULL);
}

TEST(parse_non_numeric_size_is_eserver_limit)
{
    expect_parse_fail(__LINE__, "max-record-size=abc", LMCA_ESERVER_LIMIT, "max-record-size");
    expect_parse_fail(__LINE__, "objects=1;storage-engine.write-block-size=1M;nsup-period=1",
                      LMCA_ESERVER_LIMIT, "write-block-size");
    expect_parse_fail(__LINE__, "max-record-size=", LMCA_ESERVER_LIMIT, "max-record-size");
}

TEST(parse_negative_size_is_eserver_limit)
{
    expect_parse_fail(__LINE__, "max-record-size=-1048576", LMCA_ESERVER_LIMIT,
                      "max-record-size");
    expect_parse_fail(__LINE__, "write-block-size=-1", LMCA_ESERVER_LIMIT, "write-block-size");
}

/* ---------------------------------------------------------------------------
 * lmca_limits_resolve
 */

TEST(resolve_8m_cap_lowers_default_target_onto_grid)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    test_config(&cfg);
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_EQ(l.server_cap, 8 * MIB);
    ASSERT(l.cap_source != NULL && strcmp(l.cap_source, "max-record-size") == 0);
    ASSERT_EQ(l.block_bytes, 8 * MIB);
    ASSERT_EQ(l.max_segment_bytes, 8 * MIB - 64 * KIB);
    ASSERT_EQ(l.target_segment_bytes, 2 * MIB - 64 * KIB); /* G4: four per block */
    ASSERT_EQ(l.single_record_threshold_bytes, l.target_segment_bytes);
    ASSERT_EQ(l.min_segment_bytes, 64 * KIB);
    ASSERT_EQ(l.batch_threshold_bytes, cfg.batch_threshold_bytes);
    ASSERT_LOG("INFO", "target_segment_bytes=2097152 lowered to 2031616", NULL);
    ASSERT_EQ(n_warnings, 0);
}

TEST(resolve_logs_discovered_limits)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    test_config(&cfg);
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_LOG("INFO", "'lmcache'", NULL);
    ASSERT_LOG("INFO", "max-record-size=8388608", "nsup-period=120");
    ASSERT_LOG("INFO", "max_segment_bytes=8323072", NULL);
}

TEST(resolve_1m_cap_clamps_target_with_warning)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(1 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    test_config(&cfg);
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_EQ(l.server_cap, 1 * MIB);
    ASSERT_EQ(l.block_bytes, 8 * MIB);
    ASSERT_EQ(l.max_segment_bytes, 1 * MIB - 64 * KIB);
    ASSERT_EQ(l.target_segment_bytes, 1 * MIB - 64 * KIB);
    ASSERT_EQ(l.single_record_threshold_bytes, 1 * MIB - 64 * KIB);
    ASSERT_LOG("WARNING", "target_segment_bytes=2097152", "clamped");
}

TEST(resolve_70_write_block_size_is_the_cap)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_70(1 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    test_config(&cfg);
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_EQ(l.server_cap, 1 * MIB);
    ASSERT_EQ(l.block_bytes, 1 * MIB);
    ASSERT(l.cap_source != NULL && strcmp(l.cap_source, "write-block-size") == 0);
    ASSERT_EQ(l.max_segment_bytes, 1 * MIB - 64 * KIB);
    ASSERT_EQ(l.target_segment_bytes, 1 * MIB - 64 * KIB);
}

TEST(resolve_70_both_reported_uses_smaller_bound)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_70(1 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    s.max_record_size = 2 * MIB;
    test_config(&cfg);
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_EQ(l.server_cap, 1 * MIB);
    ASSERT_EQ(l.block_bytes, 1 * MIB);
    ASSERT_EQ(l.max_segment_bytes, 1 * MIB - 64 * KIB);
}

TEST(resolve_6x_128k_block_gives_64k_segments)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_70(128 * KIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    test_config(&cfg);
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_EQ(l.server_cap, 128 * KIB);
    ASSERT_EQ(l.max_segment_bytes, 64 * KIB);
    ASSERT_EQ(l.target_segment_bytes, 64 * KIB);
    ASSERT_LOG("WARNING", "target_segment_bytes=2097152", "clamped");
}

TEST(resolve_clamps_operator_max_above_server_with_warning)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(1 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    test_config(&cfg);
    cfg.max_segment_bytes = 2 * MIB;
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_EQ(l.max_segment_bytes, 1 * MIB - 64 * KIB);
    ASSERT_LOG("WARNING", "max_segment_bytes=2097152", "clamped");
}

TEST(resolve_lowers_operator_max_below_server_onto_grid)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    uint64_t want = (8 * MIB) / 3 / 16 * 16 - MARGIN; /* three records per block */
    test_config(&cfg);
    cfg.max_segment_bytes = 3 * MIB;
    cfg.target_segment_bytes = 2 * MIB;
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_EQ(want, 2730656);
    ASSERT_EQ(l.max_segment_bytes, want);
    ASSERT_EQ(l.target_segment_bytes, 2 * MIB - 64 * KIB);
    ASSERT_LOG("INFO", "max_segment_bytes=3145728 lowered to 2730656", NULL);
    ASSERT_EQ(n_warnings, 0);
}

TEST(resolve_operator_max_on_grid_is_kept)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    test_config(&cfg);
    cfg.max_segment_bytes = 2 * MIB - 64 * KIB;
    cfg.target_segment_bytes = 2 * MIB - 64 * KIB;
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_EQ(l.max_segment_bytes, 2 * MIB - 64 * KIB);
    ASSERT_EQ(l.target_segment_bytes, 2 * MIB - 64 * KIB);
    ASSERT(strstr(logbuf, "lowered") == NULL);
    ASSERT_EQ(n_warnings, 0);
}

TEST(resolve_clamps_operator_single_record_threshold)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(1 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    test_config(&cfg);
    cfg.single_record_threshold_bytes = 4 * MIB;
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_EQ(l.single_record_threshold_bytes, 1 * MIB - 64 * KIB);
    ASSERT_LOG("WARNING", "single_record_threshold_bytes=4194304", "clamped");
}

static void
expect_resolve_fail(int line, const lmca_server_info_t *s, const lmca_config_t *cfg, int want,
                    const char *needle)
{
    lmca_limits_t l;
    lmca_err_t err = {0};
    int rc = lmca_limits_resolve(s, cfg, &l, &err);
    if (rc != want || err.status != want)
        th_fail(__FILE__, line, "resolve: got %s, want %s (%s)", lmca_status_name(rc),
                lmca_status_name(want), err.msg);
    if (needle && strstr(err.msg, needle) == NULL)
        th_fail(__FILE__, line, "message \"%s\" does not contain \"%s\"", err.msg, needle);
}

TEST(resolve_missing_cap_is_eserver_limit)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(0);
    test_config(&cfg);
    expect_resolve_fail(__LINE__, &s, &cfg, LMCA_ESERVER_LIMIT, "max-record-size");
}

TEST(resolve_64k_cap_is_eserver_limit)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(64 * KIB);
    test_config(&cfg);
    expect_resolve_fail(__LINE__, &s, &cfg, LMCA_ESERVER_LIMIT, "65536");
    s = srv_70(64 * KIB);
    expect_resolve_fail(__LINE__, &s, &cfg, LMCA_ESERVER_LIMIT, "write-block-size");
}

TEST(resolve_16m_write_block_is_eserver_limit)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_70(16 * MIB);
    test_config(&cfg);
    expect_resolve_fail(__LINE__, &s, &cfg, LMCA_ESERVER_LIMIT, "16777216");
}

TEST(resolve_16m_max_record_size_is_eserver_limit)
{
    /* Header and spec 4.3.6: a cap outside 128 KiB..8 MiB is refused, not guessed. */
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(16 * MIB);
    test_config(&cfg);
    expect_resolve_fail(__LINE__, &s, &cfg, LMCA_ESERVER_LIMIT, "max-record-size");
}

TEST(resolve_ttl_without_nsup_is_ettl)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    s.nsup_period = 0;
    test_config(&cfg);
    expect_resolve_fail(__LINE__, &s, &cfg, LMCA_ETTL, "nsup-period");
    expect_resolve_fail(__LINE__, &s, &cfg, LMCA_ETTL, "\"lmcache\"");
}

TEST(resolve_ttl_without_nsup_allowed_by_namespace)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    s.nsup_period = 0;
    s.allow_ttl_without_nsup = true;
    test_config(&cfg);
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
}

TEST(resolve_never_expire_without_nsup_is_ok)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    s.nsup_period = 0;
    test_config(&cfg);
    cfg.default_ttl_seconds = -1;
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
}

TEST(resolve_unreported_nsup_is_ok)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    s.nsup_period = -1;
    test_config(&cfg);
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
}

TEST(resolve_config_error_is_econfig)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    test_config(&cfg);
    cfg.min_segment_bytes = 5 * MIB;
    expect_resolve_fail(__LINE__, &s, &cfg, LMCA_ECONFIG, "segment_bytes");
}

TEST(resolve_min_above_clamped_target_is_econfig)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(1 * MIB);
    test_config(&cfg);
    cfg.min_segment_bytes = 2 * MIB; /* valid offline, but above the 1 MiB server cap */
    expect_resolve_fail(__LINE__, &s, &cfg, LMCA_ECONFIG, "min_segment_bytes");
}

/* ---------------------------------------------------------------------------
 * lmca_grid_floor
 */

TEST(grid_floor_keeps_values_on_the_grid)
{
    const uint64_t B = 8 * MIB;
    ASSERT_EQ(lmca_grid_floor(B, B, 8 * MIB - 64 * KIB), 8 * MIB - 64 * KIB);
    ASSERT_EQ(lmca_grid_floor(B, B, 4 * MIB - 64 * KIB), 4 * MIB - 64 * KIB);
    ASSERT_EQ(lmca_grid_floor(B, B, 2730656), 2730656);
    ASSERT_EQ(lmca_grid_floor(B, B, 1 * MIB - 64 * KIB), 1 * MIB - 64 * KIB);
}

TEST(grid_floor_one_below_drops_to_next_value)
{
    const uint64_t B = 8 * MIB;
    ASSERT_EQ(lmca_grid_floor(B, B, 8 * MIB - 64 * KIB - 1), 4 * MIB - 64 * KIB);
    ASSERT_EQ(lmca_grid_floor(B, B, 4 * MIB - 64 * KIB - 1), 2730656);
    ASSERT_EQ(lmca_grid_floor(B, B, 2730656 - 1), 2 * MIB - 64 * KIB);
}

TEST(grid_floor_large_request_gives_largest_value)
{
    ASSERT_EQ(lmca_grid_floor(8 * MIB, 8 * MIB, UINT64_MAX), 8 * MIB - 64 * KIB);
    ASSERT_EQ(lmca_grid_floor(1 * MIB, 1 * MIB, 100 * MIB), 1 * MIB - 64 * KIB);
}

TEST(grid_floor_never_exceeds_cap)
{
    static const uint64_t caps[] = {128 * KIB, 1 * MIB, 3 * MIB, 1 * MIB + 1, 5 * MIB - 7};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        uint64_t g = lmca_grid_floor(8 * MIB, caps[i], 8 * MIB);
        if (g == 0 || g + MARGIN > caps[i])
            th_fail(__FILE__, __LINE__, "cap %llu: grid floor %llu (+margin exceeds cap)",
                    (unsigned long long)caps[i], (unsigned long long)g);
    }
    ASSERT_EQ(lmca_grid_floor(8 * MIB, 1 * MIB, 8 * MIB), 1 * MIB - 64 * KIB);
}

TEST(grid_floor_is_zero_below_smallest_value)
{
    /* 8 MiB: 127 records per block is the last k whose slot exceeds the margin. */
    uint64_t smallest = grid(8 * MIB, 127);
    ASSERT_EQ(smallest, 512);
    ASSERT_EQ(lmca_grid_floor(8 * MIB, 8 * MIB, smallest), smallest);
    ASSERT_EQ(lmca_grid_floor(8 * MIB, 8 * MIB, smallest - 1), 0);
    ASSERT_EQ(lmca_grid_floor(8 * MIB, 8 * MIB, 0), 0);
    ASSERT_EQ(lmca_grid_floor(128 * KIB, 128 * KIB, 64 * KIB - 1), 0);
    ASSERT_EQ(lmca_grid_floor(8 * MIB, 64 * KIB, 8 * MIB), 0);
}

TEST(grid_floor_every_grid_value_packs_the_block)
{
    static const uint64_t blocks[] = {8 * MIB, 4 * MIB, 1 * MIB, 256 * KIB, 128 * KIB};
    for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
        uint64_t B = blocks[b];
        for (uint64_t k = 1; B / k / 16 * 16 > MARGIN; k++) {
            uint64_t want = grid(B, k);
            uint64_t g = lmca_grid_floor(B, B, want);
            if (g != want)
                th_fail(__FILE__, __LINE__, "B=%llu k=%llu: floor(%llu) = %llu",
                        (unsigned long long)B, (unsigned long long)k,
                        (unsigned long long)want, (unsigned long long)g);
            ASSERT(k * (g + MARGIN) <= B);
            ASSERT_EQ((g + MARGIN) % 16, 0);
        }
    }
}

TEST(grid_floor_sweep_is_largest_grid_value_not_above)
{
    const uint64_t B = 8 * MIB;
    for (uint64_t bytes = 0; bytes <= B; bytes += 4093) {
        uint64_t g = lmca_grid_floor(B, B, bytes);
        if (g == 0) {
            ASSERT(bytes < grid(B, 127));
            continue;
        }
        uint64_t k = B / (g + MARGIN); /* records of this size per block */
        ASSERT(g <= bytes);
        ASSERT_EQ((g + MARGIN) % 16, 0);
        ASSERT(k * (g + MARGIN) <= B);
        ASSERT_EQ(g, grid(B, k));                  /* on the grid */
        ASSERT(k == 1 || grid(B, k - 1) > bytes); /* and the largest such */
    }
}

/* ---------------------------------------------------------------------------
 * lmca_plan
 */

static lmca_plan_t
plan_ok(int line, const lmca_limits_t *l, uint64_t payload)
{
    lmca_plan_t p;
    lmca_err_t err = {0};
    memset(&p, 0xA5, sizeof p);
    int rc = lmca_plan(l, payload, &p, &err);
    if (rc != LMCA_OK)
        th_fail(__FILE__, line, "plan(%llu): %s (%s)", (unsigned long long)payload,
                lmca_status_name(rc), err.msg);
    return p;
}
#define PLAN_OK(l, payload) plan_ok(__LINE__, l, payload)

TEST(plan_at_threshold_is_single_record)
{
    lmca_limits_t l = limits_8m();
    lmca_plan_t p = PLAN_OK(&l, l.single_record_threshold_bytes);
    ASSERT_EQ(p.nseg, 1);
    ASSERT_EQ(p.seg_b, l.single_record_threshold_bytes);
    ASSERT_EQ(p.last_b, l.single_record_threshold_bytes);
}

TEST(plan_threshold_plus_one_is_two_segments)
{
    lmca_limits_t l = limits_8m();
    lmca_plan_t p = PLAN_OK(&l, l.single_record_threshold_bytes + 1);
    ASSERT_EQ(p.nseg, 2);
    ASSERT_EQ(p.seg_b, l.target_segment_bytes);
    ASSERT_EQ(p.last_b, l.single_record_threshold_bytes + 1 - l.target_segment_bytes);
    ASSERT_EQ(p.last_b, 1);
}

TEST(plan_twice_target_is_two_full_segments)
{
    lmca_limits_t l = limits_8m();
    lmca_plan_t p = PLAN_OK(&l, 2 * l.target_segment_bytes);
    ASSERT_EQ(p.nseg, 2);
    ASSERT_EQ(p.seg_b, l.target_segment_bytes);
    ASSERT_EQ(p.last_b, l.target_segment_bytes);
}

TEST(plan_64m_with_8m_cap_is_34_segments)
{
    lmca_limits_t l = limits_8m();
    uint64_t t = 2 * MIB - 64 * KIB;
    lmca_plan_t p = PLAN_OK(&l, 64 * MIB);
    ASSERT_EQ(p.nseg, (64 * MIB + t - 1) / t);
    ASSERT_EQ(p.nseg, 34);
    ASSERT_EQ(p.seg_b, t);
    ASSERT_EQ(p.last_b, 64 * MIB - 33 * t);
}

TEST(plan_operator_threshold_above_target_is_inclusive)
{
    lmca_config_t cfg;
    lmca_server_info_t s = srv_8x(8 * MIB);
    lmca_limits_t l;
    lmca_err_t err = {0};
    test_config(&cfg);
    cfg.single_record_threshold_bytes = 6 * MIB;
    ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
    ASSERT_EQ(l.single_record_threshold_bytes, 6 * MIB);
    lmca_plan_t p = PLAN_OK(&l, 6 * MIB);
    ASSERT_EQ(p.nseg, 1);
    ASSERT_EQ(p.last_b, 6 * MIB);
    p = PLAN_OK(&l, 6 * MIB + 1);
    ASSERT_EQ(p.nseg, 4); /* three full G4 segments and a tail */
    ASSERT_EQ(p.seg_b, l.target_segment_bytes);
    ASSERT_EQ(p.last_b, 6 * MIB + 1 - 3 * l.target_segment_bytes);
}

TEST(plan_tiny_payloads_are_single_record)
{
    lmca_limits_t l = limits_8m();
    lmca_plan_t p = PLAN_OK(&l, 0);
    ASSERT_EQ(p.nseg, 1);
    ASSERT_EQ(p.last_b, 0);
    p = PLAN_OK(&l, 1);
    ASSERT_EQ(p.nseg, 1);
    ASSERT_EQ(p.seg_b, 1);
    ASSERT_EQ(p.last_b, 1);
}

TEST(plan_max_segments_is_accepted)
{
    lmca_limits_t l = limits_8m();
    lmca_plan_t p = PLAN_OK(&l, (uint64_t)LMCA_MAX_SEGMENTS * l.target_segment_bytes);
    ASSERT_EQ(p.nseg, LMCA_MAX_SEGMENTS);
    ASSERT_EQ(p.last_b, l.target_segment_bytes);
}

TEST(plan_too_many_segments_is_einval)
{
    lmca_limits_t l = limits_8m();
    lmca_plan_t p;
    lmca_err_t err = {0};
    uint64_t payload = (uint64_t)LMCA_MAX_SEGMENTS * l.target_segment_bytes + 1;
    ASSERT_RC(lmca_plan(&l, payload, &p, &err), LMCA_EINVAL, &err);
    ASSERT_EQ(err.status, LMCA_EINVAL);
    ASSERT_CONTAINS(err.msg, "65535");
}

TEST(plan_huge_payload_is_einval_not_wrapped)
{
    /* payload + target - 1 must not wrap around to a small segment count. */
    lmca_limits_t l = limits_8m();
    static const uint64_t huge[] = {UINT64_MAX, UINT64_MAX - 1, UINT64_MAX / 2 + 1};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        lmca_plan_t p = {0};
        lmca_err_t err = {0};
        int rc = lmca_plan(&l, huge[i], &p, &err);
        if (rc != LMCA_EINVAL)
            th_fail(__FILE__, __LINE__, "plan(%llu): %s, nseg %u seg_b %llu last_b %llu",
                    (unsigned long long)huge[i], lmca_status_name(rc), p.nseg,
                    (unsigned long long)p.seg_b, (unsigned long long)p.last_b);
    }
}

static void
check_plan_invariants(const lmca_limits_t *l, uint64_t payload)
{
    lmca_plan_t p = PLAN_OK(l, payload);
    if ((uint64_t)(p.nseg - 1) * p.seg_b + p.last_b != payload || p.last_b == 0 ||
        p.last_b > p.seg_b || p.seg_b > l->max_segment_bytes || p.nseg < 1 ||
        (p.nseg == 1) != (payload <= l->single_record_threshold_bytes) ||
        (p.nseg > 1 && p.seg_b != l->target_segment_bytes))
        th_fail(__FILE__, __LINE__, "payload %llu: nseg %u seg_b %llu last_b %llu",
                (unsigned long long)payload, p.nseg, (unsigned long long)p.seg_b,
                (unsigned long long)p.last_b);
}

TEST(plan_invariants_hold_over_a_sweep)
{
    static const uint64_t caps[] = {8 * MIB, 1 * MIB, 128 * KIB};
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        lmca_config_t cfg;
        lmca_server_info_t s = srv_8x(caps[c]);
        lmca_limits_t l;
        lmca_err_t err = {0};
        test_config(&cfg);
        ASSERT_RC(lmca_limits_resolve(&s, &cfg, &l, &err), LMCA_OK, &err);
        for (uint64_t payload = 1; payload <= 80 * MIB; payload += 65521)
            check_plan_invariants(&l, payload);
        for (uint64_t k = 1; k <= 20; k++) { /* around every segment boundary */
            uint64_t edge = k * l.target_segment_bytes;
            check_plan_invariants(&l, edge - 1);
            check_plan_invariants(&l, edge);
            check_plan_invariants(&l, edge + 1);
        }
    }
}

TEST_LIST = {
    T(parse_81_memory_namespace),
    T(parse_71_device_namespace),
    T(parse_70_device_namespace),
    T(parse_6x_unprefixed_write_block_size),
    T(parse_reports_absent_fields_as_unset),
    T(parse_matches_whole_keys_only),
    T(parse_skips_lookalike_keys_before_the_real_one),
    T(parse_first_and_last_pairs_are_found),
    T(parse_unknown_namespace_is_enamespace),
    T(parse_error_answer_is_enamespace),
    T(parse_empty_answer_is_enamespace),
    T(parse_null_answer_is_enamespace),
    T(parse_non_numeric_size_is_eserver_limit),
    T(parse_negative_size_is_eserver_limit),
    T(resolve_8m_cap_lowers_default_target_onto_grid),
    T(resolve_logs_discovered_limits),
    T(resolve_1m_cap_clamps_target_with_warning),
    T(resolve_70_write_block_size_is_the_cap),
    T(resolve_70_both_reported_uses_smaller_bound),
    T(resolve_6x_128k_block_gives_64k_segments),
    T(resolve_clamps_operator_max_above_server_with_warning),
    T(resolve_lowers_operator_max_below_server_onto_grid),
    T(resolve_operator_max_on_grid_is_kept),
    T(resolve_clamps_operator_single_record_threshold),
    T(resolve_missing_cap_is_eserver_limit),
    T(resolve_64k_cap_is_eserver_limit),
    T(resolve_16m_write_block_is_eserver_limit),
    T(resolve_16m_max_record_size_is_eserver_limit),
    T(resolve_ttl_without_nsup_is_ettl),
    T(resolve_ttl_without_nsup_allowed_by_namespace),
    T(resolve_never_expire_without_nsup_is_ok),
    T(resolve_unreported_nsup_is_ok),
    T(resolve_config_error_is_econfig),
    T(resolve_min_above_clamped_target_is_econfig),
    T(grid_floor_keeps_values_on_the_grid),
    T(grid_floor_one_below_drops_to_next_value),
    T(grid_floor_large_request_gives_largest_value),
    T(grid_floor_never_exceeds_cap),
    T(grid_floor_is_zero_below_smallest_value),
    T(grid_floor_every_grid_value_packs_the_block),
    T(grid_floor_sweep_is_largest_grid_value_not_above),
    T(plan_at_threshold_is_single_record),
    T(plan_threshold_plus_one_is_two_segments),
    T(plan_twice_target_is_two_full_segments),
    T(plan_64m_with_8m_cap_is_34_segments),
    T(plan_operator_threshold_above_target_is_inclusive),
    T(plan_tiny_payloads_are_single_record),
    T(plan_max_segments_is_accepted),
    T(plan_too_many_segments_is_einval),
    T(plan_huge_payload_is_einval_not_wrapped),
    T(plan_invariants_hold_over_a_sweep),
};
TEST_MAIN()
