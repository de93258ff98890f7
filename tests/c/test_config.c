/*
 * test_config.c - defaults, lmca_config_set() by name and lmca_config_validate().
 */
#include <stdio.h>

#include "harness.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

/* Every key lmca_config_set() knows (config.c's table). */
static const char *const all_keys[] = {
    "hosts", "namespace", "set", "target_segment_bytes", "max_segment_bytes",
    "min_segment_bytes", "single_record_threshold_bytes", "batch_threshold_bytes",
    "default_ttl_seconds", "read_timeout_ms", "write_timeout_ms", "connect_timeout_ms",
    "commit_level", "replica", "enable_crc32", "send_key", "max_conns_per_node", "username",
    "password", "tls_name",
};
#define NKEYS (sizeof all_keys / sizeof all_keys[0])

/* A config that passes validation. */
static void
valid_config(lmca_config_t *cfg)
{
    lmca_config_init(cfg);
    cfg->hosts = "127.0.0.1:3000";
}

/* Reads a scalar field of `cfg` by offset and size (bool, u32/enum, 64-bit). */
static long long
field_at(const lmca_config_t *cfg, size_t off, size_t size)
{
    const char *p = (const char *)cfg + off;
    if (size == sizeof(bool)) {
        bool b;
        memcpy(&b, p, sizeof b);
        return b;
    }
    if (size == sizeof(uint32_t)) {
        uint32_t u;
        memcpy(&u, p, sizeof u);
        return u;
    }
    int64_t i;
    memcpy(&i, p, sizeof i);
    return i;
}

/* Asserts that `key`=`value` is refused with ECONFIG naming both, leaving cfg as it was. */
static void
expect_bad_value(int line, const char *key, const char *value)
{
    lmca_config_t cfg, before;
    lmca_err_t err = {0};
    int rc;

    lmca_config_init(&cfg);
    memcpy(&before, &cfg, sizeof cfg);
    rc = lmca_config_set(&cfg, key, value, &err);
    if (rc != LMCA_ECONFIG || err.status != LMCA_ECONFIG)
        th_fail(__FILE__, line, "set %s=\"%s\": got %s (status %d), want ECONFIG", key,
                value ? value : "(null)", lmca_status_name(rc), err.status);
    if (strstr(err.msg, key) == NULL)
        th_fail(__FILE__, line, "message \"%s\" does not name key %s", err.msg, key);
    if (value != NULL && strstr(err.msg, value) == NULL)
        th_fail(__FILE__, line, "message \"%s\" does not quote value \"%s\"", err.msg, value);
    if (memcmp(&before, &cfg, sizeof cfg) != 0)
        th_fail(__FILE__, line, "refused %s=\"%s\" still changed the config", key,
                value ? value : "(null)");
}
#define EXPECT_BAD(key, value) expect_bad_value(__LINE__, key, value)

/* Asserts that validation fails with ECONFIG and a message naming `key`. */
static void
expect_invalid(int line, const lmca_config_t *cfg, const char *key)
{
    lmca_err_t err = {0};
    int rc = lmca_config_validate(cfg, &err);
    if (rc != LMCA_ECONFIG)
        th_fail(__FILE__, line, "validate: got %s, want ECONFIG naming %s (%s)",
                lmca_status_name(rc), key, err.msg);
    if (strstr(err.msg, key) == NULL)
        th_fail(__FILE__, line, "validate message \"%s\" does not name %s", err.msg, key);
}
#define EXPECT_INVALID(cfg, key) expect_invalid(__LINE__, cfg, key)

/* ---------------------------------------------------------------------------
 * Defaults
 */

TEST(config_init_sets_documented_defaults)
{
    lmca_config_t cfg;
    memset(&cfg, 0xA5, sizeof cfg);
    lmca_config_init(&cfg);
    ASSERT(cfg.hosts == NULL);
    ASSERT(cfg.namespace_ != NULL && strcmp(cfg.namespace_, "lmcache") == 0);
    ASSERT(cfg.set != NULL && strcmp(cfg.set, "kv_chunks") == 0);
    ASSERT_EQ(cfg.target_segment_bytes, 2 * MIB);
    ASSERT_EQ(cfg.max_segment_bytes, 0);
    ASSERT_EQ(cfg.min_segment_bytes, 64 * KIB);
    ASSERT_EQ(cfg.single_record_threshold_bytes, 0);
    ASSERT_EQ(cfg.default_ttl_seconds, 86400);
    ASSERT_EQ(cfg.read_timeout_ms, 1000);
    ASSERT_EQ(cfg.write_timeout_ms, 2000);
    ASSERT_EQ(cfg.connect_timeout_ms, 1000);
    ASSERT_EQ(cfg.commit_level, LMCA_COMMIT_ALL);
    ASSERT_EQ(cfg.replica, LMCA_REPLICA_SEQUENCE);
    ASSERT(!cfg.enable_crc32);
    ASSERT(!cfg.send_key);
    ASSERT_EQ(cfg.max_conns_per_node, 64);
    ASSERT(cfg.username == NULL && cfg.password == NULL && cfg.tls_name == NULL);
    ASSERT(cfg.log_cb == NULL);
}

TEST(config_defaults_with_hosts_validate)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    valid_config(&cfg);
    ASSERT_RC(lmca_config_validate(&cfg, &err), LMCA_OK, &err);
}

/* ---------------------------------------------------------------------------
 * lmca_config_set: good values
 */

TEST(config_set_string_keys_store_the_given_pointer)
{
    static const struct {
        const char *key;
        size_t off;
    } keys[] = {
        {"hosts", offsetof(lmca_config_t, hosts)},
        {"namespace", offsetof(lmca_config_t, namespace_)},
        {"set", offsetof(lmca_config_t, set)},
        {"username", offsetof(lmca_config_t, username)},
        {"password", offsetof(lmca_config_t, password)},
        {"tls_name", offsetof(lmca_config_t, tls_name)},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        lmca_config_t cfg;
        lmca_err_t err = {0};
        const char *value = "value-for-test", *got;
        lmca_config_init(&cfg);
        ASSERT_RC(lmca_config_set(&cfg, keys[i].key, value, &err), LMCA_OK, &err);
        memcpy(&got, (const char *)&cfg + keys[i].off, sizeof got);
        if (got != value)
            th_fail(__FILE__, __LINE__, "set %s did not store the value", keys[i].key);
    }
}

TEST(config_set_scalar_keys_change_their_field)
{
#define GOOD(key, value, member, want)                                                 \
    {key, value, offsetof(lmca_config_t, member), sizeof(((lmca_config_t *)0)->member), \
     want}
    static const struct {
        const char *key, *value;
        size_t off, size;
        long long want;
    } good[] = {
        GOOD("target_segment_bytes", "4194304", target_segment_bytes, 4194304),
        GOOD("max_segment_bytes", "1048576", max_segment_bytes, 1048576),
        GOOD("min_segment_bytes", "131072", min_segment_bytes, 131072),
        GOOD("single_record_threshold_bytes", "524288", single_record_threshold_bytes,
             524288),
        GOOD("batch_threshold_bytes", "262144", batch_threshold_bytes, 262144),
        GOOD("default_ttl_seconds", "3600", default_ttl_seconds, 3600),
        GOOD("default_ttl_seconds", "-1", default_ttl_seconds, -1),
        GOOD("read_timeout_ms", "1500", read_timeout_ms, 1500),
        GOOD("write_timeout_ms", "2500", write_timeout_ms, 2500),
        GOOD("connect_timeout_ms", "750", connect_timeout_ms, 750),
        GOOD("max_conns_per_node", "16", max_conns_per_node, 16),
        GOOD("commit_level", "master", commit_level, LMCA_COMMIT_MASTER),
        GOOD("replica", "any", replica, LMCA_REPLICA_ANY),
        GOOD("replica", "master", replica, LMCA_REPLICA_MASTER),
        GOOD("replica", "prefer_rack", replica, LMCA_REPLICA_PREFER_RACK),
        GOOD("enable_crc32", "true", enable_crc32, 1),
        GOOD("send_key", "true", send_key, 1),
    };
#undef GOOD
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        lmca_config_t cfg;
        lmca_err_t err = {0};
        lmca_config_init(&cfg);
        if (field_at(&cfg, good[i].off, good[i].size) == good[i].want)
            th_fail(__FILE__, __LINE__, "test value for %s equals the default", good[i].key);
        ASSERT_RC(lmca_config_set(&cfg, good[i].key, good[i].value, &err), LMCA_OK, &err);
        long long got = field_at(&cfg, good[i].off, good[i].size);
        if (got != good[i].want)
            th_fail(__FILE__, __LINE__, "set %s=%s: field is %lld, want %lld", good[i].key,
                    good[i].value, got, good[i].want);
    }
}

TEST(config_set_enums_return_to_first_value)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_config_init(&cfg);
    cfg.commit_level = LMCA_COMMIT_MASTER;
    cfg.replica = LMCA_REPLICA_ANY;
    ASSERT_RC(lmca_config_set(&cfg, "commit_level", "all", &err), LMCA_OK, &err);
    ASSERT_RC(lmca_config_set(&cfg, "replica", "sequence", &err), LMCA_OK, &err);
    ASSERT_EQ(cfg.commit_level, LMCA_COMMIT_ALL);
    ASSERT_EQ(cfg.replica, LMCA_REPLICA_SEQUENCE);
}

TEST(config_set_enums_ignore_case)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_config_init(&cfg);
    ASSERT_RC(lmca_config_set(&cfg, "commit_level", "MASTER", &err), LMCA_OK, &err);
    ASSERT_RC(lmca_config_set(&cfg, "replica", "Prefer_Rack", &err), LMCA_OK, &err);
    ASSERT_EQ(cfg.commit_level, LMCA_COMMIT_MASTER);
    ASSERT_EQ(cfg.replica, LMCA_REPLICA_PREFER_RACK);
}

TEST(config_set_bool_accepts_documented_spellings)
{
    static const char *const yes[] = {"true", "1", "yes", "TRUE"};
    static const char *const no[] = {"false", "0", "no", "False"};
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_config_init(&cfg);
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        cfg.send_key = false;
        ASSERT_RC(lmca_config_set(&cfg, "send_key", yes[i], &err), LMCA_OK, &err);
        if (!cfg.send_key)
            th_fail(__FILE__, __LINE__, "send_key=%s read as false", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        cfg.enable_crc32 = true;
        ASSERT_RC(lmca_config_set(&cfg, "enable_crc32", no[i], &err), LMCA_OK, &err);
        if (cfg.enable_crc32)
            th_fail(__FILE__, __LINE__, "enable_crc32=%s read as true", no[i]);
    }
}

TEST(config_set_u32_accepts_uint32_max)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_config_init(&cfg);
    ASSERT_RC(lmca_config_set(&cfg, "read_timeout_ms", "4294967295", &err), LMCA_OK, &err);
    ASSERT_EQ(cfg.read_timeout_ms, UINT32_MAX);
}

TEST(config_set_u64_accepts_large_value)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_config_init(&cfg);
    ASSERT_RC(lmca_config_set(&cfg, "batch_threshold_bytes", "8589934592", &err), LMCA_OK,
              &err);
    ASSERT_EQ(cfg.batch_threshold_bytes, 8589934592ll);
}

/* ---------------------------------------------------------------------------
 * lmca_config_set: bad values
 */

TEST(config_set_rejects_non_integer_for_integer_keys)
{
    static const char *const keys[] = {
        "target_segment_bytes", "max_segment_bytes", "min_segment_bytes",
        "single_record_threshold_bytes", "batch_threshold_bytes", "default_ttl_seconds",
        "read_timeout_ms", "write_timeout_ms", "connect_timeout_ms", "max_conns_per_node",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        EXPECT_BAD(keys[i], "abc");
        EXPECT_BAD(keys[i], "12abc");
        EXPECT_BAD(keys[i], "1.5");
        EXPECT_BAD(keys[i], "4MiB");
    }
}

TEST(config_set_rejects_empty_integer)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_config_init(&cfg);
    ASSERT_RC(lmca_config_set(&cfg, "target_segment_bytes", "", &err), LMCA_ECONFIG, &err);
    ASSERT_CONTAINS(err.msg, "target_segment_bytes");
    ASSERT_EQ(cfg.target_segment_bytes, 2 * MIB);
}

TEST(config_set_rejects_negative_for_unsigned_keys)
{
    static const char *const keys[] = {
        "target_segment_bytes", "max_segment_bytes", "min_segment_bytes",
        "single_record_threshold_bytes", "batch_threshold_bytes", "read_timeout_ms",
        "write_timeout_ms", "connect_timeout_ms", "max_conns_per_node",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        EXPECT_BAD(keys[i], "-1");
        EXPECT_BAD(keys[i], "-7");
    }
}

TEST(config_set_rejects_u32_above_uint32_max)
{
    static const char *const keys[] = {"read_timeout_ms", "write_timeout_ms",
                                       "connect_timeout_ms", "max_conns_per_node"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        EXPECT_BAD(keys[i], "4294967296");
}

TEST(config_set_rejects_integer_overflow)
{
    EXPECT_BAD("default_ttl_seconds", "99999999999999999999");
    EXPECT_BAD("target_segment_bytes", "99999999999999999999");
}

TEST(config_set_rejects_unknown_commit_level)
{
    EXPECT_BAD("commit_level", "some");
    EXPECT_BAD("commit_level", "");
}

TEST(config_set_rejects_unknown_replica)
{
    EXPECT_BAD("replica", "nearest");
    EXPECT_BAD("replica", "prefer-rack");
}

TEST(config_set_rejects_unknown_bool)
{
    EXPECT_BAD("enable_crc32", "maybe");
    EXPECT_BAD("send_key", "maybe");
    EXPECT_BAD("send_key", "2");
}

TEST(config_set_rejects_null_value_for_every_key)
{
    for (size_t i = 0; i < NKEYS; i++)
        EXPECT_BAD(all_keys[i], NULL);
}

TEST(config_set_rejects_unknown_key_naming_it)
{
    static const char *const unknown[] = {"target_segment_byte", "Hosts",
                                          "batch_max_in_flight", ""};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        lmca_config_t cfg, before;
        lmca_err_t err = {0};
        lmca_config_init(&cfg);
        memcpy(&before, &cfg, sizeof cfg);
        ASSERT_RC(lmca_config_set(&cfg, unknown[i], "1", &err), LMCA_ECONFIG, &err);
        ASSERT_EQ(err.status, LMCA_ECONFIG);
        ASSERT_CONTAINS(err.msg, unknown[i]);
        ASSERT(memcmp(&before, &cfg, sizeof cfg) == 0);
    }
}

TEST(config_set_accepts_every_known_key)
{
    /* Every key of the table exists: a syntactically fine value is not "unknown". */
    for (size_t i = 0; i < NKEYS; i++) {
        lmca_config_t cfg;
        lmca_err_t err = {0};
        const char *value = strcmp(all_keys[i], "commit_level") == 0 ? "all"
                            : strcmp(all_keys[i], "replica") == 0    ? "any"
                            : strstr(all_keys[i], "crc") || strcmp(all_keys[i], "send_key") == 0
                                ? "no"
                                : "42";
        lmca_config_init(&cfg);
        int rc = lmca_config_set(&cfg, all_keys[i], value, &err);
        if (rc != LMCA_OK)
            th_fail(__FILE__, __LINE__, "set %s=%s: %s (%s)", all_keys[i], value,
                    lmca_status_name(rc), err.msg);
    }
}

TEST(config_set_null_config_is_einval)
{
    lmca_err_t err = {0};
    lmca_config_t cfg;
    lmca_config_init(&cfg);
    ASSERT_RC(lmca_config_set(NULL, "hosts", "h:3000", &err), LMCA_EINVAL, &err);
    ASSERT_RC(lmca_config_set(&cfg, NULL, "h:3000", &err), LMCA_EINVAL, &err);
}

/* ---------------------------------------------------------------------------
 * lmca_config_validate
 */

TEST(validate_rejects_missing_hosts)
{
    lmca_config_t cfg;
    lmca_config_init(&cfg);
    EXPECT_INVALID(&cfg, "hosts");
    cfg.hosts = "";
    EXPECT_INVALID(&cfg, "hosts");
}

TEST(validate_checks_every_seed)
{
    static const char *const good[] = {"h", "h:3000", "10.0.0.1:3000,10.0.0.2", "h:tls1:4333",
                                       "[::1]", "[::1]:3000", "[fe80::1]:tls:3000", "h:65535"};
    static const char *const bad[] = {"h:99999", "h:0", "h:-1", "h:", "h:port", ",h", "h,",
                                      "h:3000,,h2", "[::1", "[]:3000", "h:t:p:3000", "h::3000"};
    lmca_config_t cfg;
    lmca_err_t err = {0};

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        lmca_config_init(&cfg);
        cfg.hosts = good[i];
        ASSERT_RC(lmca_config_validate(&cfg, &err), LMCA_OK, &err);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lmca_config_init(&cfg);
        cfg.hosts = bad[i];
        if (lmca_config_validate(&cfg, &err) != LMCA_ECONFIG)
            th_fail(__FILE__, __LINE__, "hosts \"%s\" was accepted", bad[i]);
        ASSERT_CONTAINS(err.msg, bad[i]);
    }
}

TEST(validate_rejects_empty_namespace)
{
    lmca_config_t cfg;
    valid_config(&cfg);
    cfg.namespace_ = "";
    EXPECT_INVALID(&cfg, "namespace");
    cfg.namespace_ = NULL;
    EXPECT_INVALID(&cfg, "namespace");
}

TEST(validate_rejects_namespace_of_32_bytes)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    char ns[33];
    valid_config(&cfg);
    memset(ns, 'n', 31);
    ns[31] = '\0';
    cfg.namespace_ = ns;
    ASSERT_RC(lmca_config_validate(&cfg, &err), LMCA_OK, &err);
    ns[31] = 'n';
    ns[32] = '\0';
    EXPECT_INVALID(&cfg, "namespace");
}

TEST(validate_rejects_set_of_64_bytes)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    char set[65];
    valid_config(&cfg);
    memset(set, 's', 63);
    set[63] = '\0';
    cfg.set = set;
    ASSERT_RC(lmca_config_validate(&cfg, &err), LMCA_OK, &err);
    set[63] = 's';
    set[64] = '\0';
    EXPECT_INVALID(&cfg, "set");
}

TEST(validate_rejects_zero_min_segment)
{
    lmca_config_t cfg;
    valid_config(&cfg);
    cfg.min_segment_bytes = 0;
    EXPECT_INVALID(&cfg, "min_segment_bytes");
}

TEST(validate_rejects_target_below_min)
{
    lmca_config_t cfg;
    valid_config(&cfg);
    cfg.min_segment_bytes = 128 * KIB;
    cfg.target_segment_bytes = 128 * KIB - 1;
    EXPECT_INVALID(&cfg, "target_segment_bytes");
}

TEST(validate_rejects_max_below_min)
{
    lmca_config_t cfg;
    valid_config(&cfg);
    cfg.max_segment_bytes = 64 * KIB - 1;
    EXPECT_INVALID(&cfg, "max_segment_bytes");
}

TEST(validate_rejects_target_above_8mib)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    valid_config(&cfg);
    cfg.target_segment_bytes = 8 * MIB;
    ASSERT_RC(lmca_config_validate(&cfg, &err), LMCA_OK, &err);
    cfg.target_segment_bytes = 8 * MIB + 1;
    EXPECT_INVALID(&cfg, "target_segment_bytes");
}

TEST(validate_rejects_max_above_8mib)
{
    lmca_config_t cfg;
    valid_config(&cfg);
    cfg.max_segment_bytes = 8 * MIB + 1;
    EXPECT_INVALID(&cfg, "max_segment_bytes");
}

TEST(validate_rejects_ttl_out_of_range)
{
    lmca_config_t cfg;
    valid_config(&cfg);
    cfg.default_ttl_seconds = -3;
    EXPECT_INVALID(&cfg, "default_ttl_seconds");
    cfg.default_ttl_seconds = 315360001;
    EXPECT_INVALID(&cfg, "default_ttl_seconds");
}

TEST(validate_accepts_ttl_specials_and_ten_years)
{
    static const int64_t ok[] = {-2, -1, 0, 1, 315360000};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        lmca_config_t cfg;
        lmca_err_t err = {0};
        valid_config(&cfg);
        cfg.default_ttl_seconds = ok[i];
        int rc = lmca_config_validate(&cfg, &err);
        if (rc != LMCA_OK)
            th_fail(__FILE__, __LINE__, "default_ttl_seconds=%lld: %s (%s)", (long long)ok[i],
                    lmca_status_name(rc), err.msg);
    }
}

TEST(validate_rejects_zero_timeouts)
{
    lmca_config_t cfg;
    valid_config(&cfg);
    cfg.read_timeout_ms = 0;
    EXPECT_INVALID(&cfg, "read_timeout_ms");
    valid_config(&cfg);
    cfg.write_timeout_ms = 0;
    EXPECT_INVALID(&cfg, "write_timeout_ms");
    valid_config(&cfg);
    cfg.connect_timeout_ms = 0;
    EXPECT_INVALID(&cfg, "connect_timeout_ms");
}

TEST(validate_rejects_zero_max_conns_per_node)
{
    lmca_config_t cfg;
    valid_config(&cfg);
    cfg.max_conns_per_node = 0;
    EXPECT_INVALID(&cfg, "max_conns_per_node");
}

TEST(validate_rejects_out_of_range_enums)
{
    lmca_config_t cfg;
    valid_config(&cfg);
    cfg.commit_level = (lmca_commit_level)2;
    EXPECT_INVALID(&cfg, "commit_level");
    valid_config(&cfg);
    cfg.replica = (lmca_replica)4;
    EXPECT_INVALID(&cfg, "replica");
}

TEST_LIST = {
    T(config_init_sets_documented_defaults),
    T(config_defaults_with_hosts_validate),
    T(config_set_string_keys_store_the_given_pointer),
    T(config_set_scalar_keys_change_their_field),
    T(config_set_enums_return_to_first_value),
    T(config_set_enums_ignore_case),
    T(config_set_bool_accepts_documented_spellings),
    T(config_set_u32_accepts_uint32_max),
    T(config_set_u64_accepts_large_value),
    T(config_set_rejects_non_integer_for_integer_keys),
    T(config_set_rejects_empty_integer),
    T(config_set_rejects_negative_for_unsigned_keys),
    T(config_set_rejects_u32_above_uint32_max),
    T(config_set_rejects_integer_overflow),
    T(config_set_rejects_unknown_commit_level),
    T(config_set_rejects_unknown_replica),
    T(config_set_rejects_unknown_bool),
    T(config_set_rejects_null_value_for_every_key),
    T(config_set_rejects_unknown_key_naming_it),
    T(config_set_accepts_every_known_key),
    T(config_set_null_config_is_einval),
    T(validate_rejects_missing_hosts),
    T(validate_checks_every_seed),
    T(validate_rejects_empty_namespace),
    T(validate_rejects_namespace_of_32_bytes),
    T(validate_rejects_set_of_64_bytes),
    T(validate_rejects_zero_min_segment),
    T(validate_rejects_target_below_min),
    T(validate_rejects_max_below_min),
    T(validate_rejects_target_above_8mib),
    T(validate_rejects_max_above_8mib),
    T(validate_rejects_ttl_out_of_range),
    T(validate_accepts_ttl_specials_and_ten_years),
    T(validate_rejects_zero_timeouts),
    T(validate_rejects_zero_max_conns_per_node),
    T(validate_rejects_out_of_range_enums),
};
TEST_MAIN()
