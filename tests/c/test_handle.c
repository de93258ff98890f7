/*
 * test_handle.c - opening handles against a server: limit discovery per
 * namespace, the typed errors of a bad cluster, namespace or TTL setup, ping,
 * info and scan.
 */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

#define KIB (1024ull)
#define MIB (1024ull * 1024ull)

TEST(limits_discovered_on_8mib_namespace)
{
    lmca_t *h = th_open("lmcache");
    const lmca_limits_t *l = lmca_limits(h);
    ASSERT_EQ(l->server_cap, 8 * MIB);
    ASSERT(strcmp(l->cap_source, "max-record-size") == 0);
    ASSERT_EQ(l->block_bytes, 8 * MIB);
    ASSERT_EQ(l->max_segment_bytes, 8 * MIB - 64 * KIB);
    ASSERT_EQ(l->target_segment_bytes, 2 * MIB - 64 * KIB);
    ASSERT_EQ(l->single_record_threshold_bytes, 2 * MIB - 64 * KIB);
    ASSERT_CONTAINS(th_log(), "INFO   server: max-record-size=8388608");
    ASSERT_CONTAINS(th_log(), "max_segment_bytes=8323072");
    lmca_close(h);
}

TEST(limits_discovered_on_1mib_namespace_clamp_target)
{
    lmca_t *h = th_open("small");
    const lmca_limits_t *l = lmca_limits(h);
    ASSERT_EQ(l->server_cap, 1 * MIB);
    ASSERT_EQ(l->max_segment_bytes, 1 * MIB - 64 * KIB);
    ASSERT_EQ(l->target_segment_bytes, 1 * MIB - 64 * KIB);
    ASSERT_CONTAINS(th_log(), "WARNING target_segment_bytes=2097152 exceeds");
    lmca_close(h);
}

TEST(limits_from_write_block_size_on_legacy_server)
{
    th_need_fixture("6.x/7.0-style namespace (write-block-size only)");
    lmca_t *h = th_open("legacy");
    const lmca_limits_t *l = lmca_limits(h);
    ASSERT(strcmp(l->cap_source, "write-block-size") == 0);
    ASSERT_EQ(l->server_cap, 1 * MIB);
    ASSERT_EQ(l->block_bytes, 1 * MIB);
    lmca_close(h);
}

TEST(unreachable_cluster_is_connection_error)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    th_hosts();
    lmca_config_init(&cfg);
    cfg.hosts = "127.0.0.1:1"; /* nothing listens on port 1 */
    cfg.connect_timeout_ms = 200;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_ECONNECTION, &err);
    ASSERT(h == NULL);
    ASSERT_CONTAINS(err.msg, "127.0.0.1:1");
}

TEST(tls_name_is_passed_through_to_the_client)
{
    /* The test servers speak plain TCP: a client that insists on TLS with the
       given name cannot connect, which shows the setting reached libaerospike. */
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    th_config(&cfg, "lmcache");
    cfg.tls_name = "node1.example";
    cfg.connect_timeout_ms = 300;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_ECONNECTION, &err);
    cfg.hosts = "127.0.0.1:99999";
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_ECONFIG, &err);
    ASSERT_CONTAINS(err.msg, "127.0.0.1:99999");
}

TEST(unknown_namespace_is_namespace_error)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    th_config(&cfg, "no_such_ns");
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_ENAMESPACE, &err);
    ASSERT_CONTAINS(err.msg, "no_such_ns");
}

/* Runs `fn` with namespace "small" switched to nsup-period 0 (set-config works
   on a live server and on the test server), and switches it back before the
   caller asserts anything, so a failure cannot leave it that way. */
static void
with_nsup_off(void (*fn)(void *), void *arg)
{
    const char *ok = th_info("set-config:context=namespace;id=small;nsup-period=0");
    if (strcmp(ok, "ok") != 0)
        th_fail(__FILE__, __LINE__, "set-config nsup-period=0 refused: %s", ok);
    fn(arg);
    th_info("set-config:context=namespace;id=small;nsup-period=1");
}

typedef struct {
    int64_t ttl;
    int open_rc, put_rc, get_rc;
    lmca_err_t err;
    bool same;
} nsup_run;

static void
open_put_get(void *arg)
{
    nsup_run *r = arg;
    lmca_config_t cfg;
    lmca_t *h = NULL;
    uint8_t in[1000], out[1000];
    size_t got = 0;
    const char *key = th_key("nonsup");

    th_config(&cfg, "small");
    cfg.default_ttl_seconds = r->ttl;
    r->open_rc = lmca_open(&cfg, &h, &r->err);
    if (r->open_rc != LMCA_OK)
        return;
    th_fill(in, sizeof in, 1);
    r->put_rc = lmca_put(h, key, in, sizeof in, NULL, &r->err);
    r->get_rc = lmca_get(h, key, out, sizeof out, &got, NULL, &r->err);
    r->same = got == sizeof in && memcmp(in, out, sizeof in) == 0;
    lmca_close(h);
}

TEST(ttl_with_nsup_period_0_fails_at_open)
{
    nsup_run r = {.ttl = 3600};
    with_nsup_off(open_put_get, &r);
    ASSERT_RC(r.open_rc, LMCA_ETTL, &r.err);
    ASSERT_CONTAINS(r.err.msg, "nsup-period 0");
    ASSERT_CONTAINS(r.err.msg, "\"small\"");
}

TEST(never_expiring_ttl_works_with_nsup_period_0)
{
    nsup_run r = {.ttl = -1};
    with_nsup_off(open_put_get, &r);
    ASSERT_RC(r.open_rc, LMCA_OK, &r.err);
    ASSERT_RC(r.put_rc, LMCA_OK, &r.err);
    ASSERT_RC(r.get_rc, LMCA_OK, &r.err);
    ASSERT(r.same);
}

TEST(ttl_write_refused_by_server_is_ttl_error)
{
    /* nsup-period switched off after open: the server refuses the write (22). */
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    uint8_t buf[100] = {0};
    th_config(&cfg, "small");
    cfg.default_ttl_seconds = 3600;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    th_info("set-config:context=namespace;id=small;nsup-period=0");
    int rc = lmca_put(h, th_key("ttl22"), buf, sizeof buf, NULL, &err);
    th_info("set-config:context=namespace;id=small;nsup-period=1");
    ASSERT_RC(rc, LMCA_ETTL, &err);
    ASSERT_EQ(err.as_code, 22);
    ASSERT_CONTAINS(err.msg, "nsup-period");
    lmca_close(h);
}

TEST(bad_config_fails_before_connecting)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    th_config(&cfg, "lmcache");
    cfg.min_segment_bytes = 0;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_ECONFIG, &err);
    ASSERT_CONTAINS(err.msg, "min_segment_bytes");
    th_config(&cfg, "lmcache");
    cfg.hosts = "";
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_ECONFIG, &err);
    ASSERT_CONTAINS(err.msg, "hosts");
}

TEST(record_too_big_is_mapped_with_guidance)
{
    /* Lower the live cap under an open handle: the handle still plans for
       8 MiB, so the server refuses the record (result 13). */
    lmca_t *h = th_open("lmcache");
    size_t len = 2 * MIB;
    uint8_t *buf = calloc(1, len);
    lmca_err_t err = {0};
    const char *ok = th_info("set-config:context=namespace;id=lmcache;max-record-size=1048576");
    if (strcmp(ok, "ok") != 0)
        th_fail(__FILE__, __LINE__, "set-config refused: %s", ok);
    int rc = lmca_put(h, th_key("big"), buf, len, NULL, &err);
    th_info("set-config:context=namespace;id=lmcache;max-record-size=8388608");
    ASSERT_RC(rc, LMCA_ETOO_BIG, &err);
    ASSERT_EQ(err.as_code, 13);
    ASSERT_CONTAINS(err.msg, "2097152-byte payload");
    ASSERT_CONTAINS(err.msg, "max-record-size=8388608");
    ASSERT_CONTAINS(err.msg, "lower them");
    free(buf);
    lmca_close(h);
}

TEST(ping_answers)
{
    lmca_t *h = th_open("lmcache");
    lmca_err_t err = {0};
    ASSERT_RC(lmca_ping(h, &err), LMCA_OK, &err);
    lmca_close(h);
}

/* What lmca_info passed to its callback. */
typedef struct {
    int rows;
    char first_node[64], first_address[80], first_response[256];
    bool clean; /* every response without "command\t" and trailing newline */
} info_rows;

static bool
on_info(void *udata, const char *node, const char *address, const char *response)
{
    info_rows *r = udata;
    size_t n = strlen(response);
    if (r->rows++ == 0) {
        snprintf(r->first_node, sizeof r->first_node, "%s", node);
        snprintf(r->first_address, sizeof r->first_address, "%s", address);
        snprintf(r->first_response, sizeof r->first_response, "%s", response);
    }
    r->clean &= strchr(response, '\t') == NULL && (n == 0 || response[n - 1] != '\n');
    return true;
}

TEST(info_answers_once_per_node_with_the_value_alone)
{
    lmca_t *h = th_open("lmcache");
    info_rows r = {.clean = true};
    lmca_err_t err = {0};

    ASSERT_RC(lmca_info(h, "build", on_info, &r, &err), LMCA_OK, &err);
    ASSERT(lmca_cluster_size(h) >= 1);
    ASSERT_EQ(r.rows, lmca_cluster_size(h));
    ASSERT(r.clean);
    ASSERT(r.first_node[0] != '\0');
    ASSERT(strchr(r.first_address, ':') != NULL);
    ASSERT(r.first_response[0] >= '1' && r.first_response[0] <= '9'); /* "8.1.2.0" */
    if (th_is_fixture())
        ASSERT(strcmp(r.first_response, "8.1.2.0") == 0);
    /* The node name is the one the node gives itself. */
    r = (info_rows){.clean = true};
    ASSERT_RC(lmca_info(h, "node", on_info, &r, &err), LMCA_OK, &err);
    ASSERT(strcmp(r.first_response, r.first_node) == 0);
    lmca_close(h);
}

TEST(info_refuses_bad_commands_naming_them)
{
    lmca_t *h = th_open("lmcache");
    info_rows r = {.clean = true};
    lmca_err_t err = {0};

    ASSERT_RC(lmca_info(h, NULL, on_info, &r, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "NULL command");
    ASSERT_RC(lmca_info(h, "", on_info, &r, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "empty command");
    ASSERT_RC(lmca_info(h, "build\nnode", on_info, &r, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "\"build\\nnode\" holds a newline at byte 5");
    ASSERT_RC(lmca_info(h, "get-config:a\tb", on_info, &r, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "\"get-config:a\\tb\" holds a tab at byte 12");
    ASSERT_RC(lmca_info(h, "build", NULL, NULL, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "\"build\": NULL callback");
    ASSERT_EQ(r.rows, 0); /* nothing was sent */
    /* A command no node knows: the server's refusal, with the node named. */
    ASSERT_RC(lmca_info(h, "no-such-command", on_info, &r, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "\"no-such-command\" on node ");
    ASSERT_EQ(err.as_code, 4);
    lmca_close(h);
}

typedef struct {
    const char *key; /* the chunk's key */
    int metas, segments, matched;
    uint32_t matched_nseg;
} scan_count;

static bool
count_record(void *udata, const lmca_scan_rec_t *rec)
{
    scan_count *c = udata;
    size_t n = strlen(c->key);
    if (rec->key == NULL || strncmp(rec->key, c->key, n) != 0 || rec->key[n] != '|')
        return true; /* other tests' records */
    if (rec->kind == LMCA_REC_META) {
        c->metas++;
        if (rec->meta) {
            c->matched++;
            c->matched_nseg = rec->meta->nseg;
        }
    } else if (rec->kind == LMCA_REC_SEGMENT) {
        c->segments++;
    }
    return true;
}

TEST(scan_reads_meta_records_or_every_record)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    size_t len = 2 * MIB; /* 3 segments on a 1 MiB cap */
    uint8_t *buf = calloc(1, len);
    scan_count meta = {.key = th_key("scan")}, all = {.key = meta.key};

    th_config(&cfg, "small");
    cfg.send_key = true;
    cfg.enable_crc32 = true; /* segments then hold a crc32 bin, as meta records do */
    cfg.set = "lmca_scan";
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h, meta.key, buf, len, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_scan(h, LMCA_SCAN_META, count_record, &meta, &err), LMCA_OK, &err);
    ASSERT_EQ(meta.matched, 1);
    ASSERT_EQ(meta.matched_nseg, 3);
    ASSERT_EQ(meta.segments, 0);
    ASSERT_RC(lmca_scan(h, LMCA_SCAN_ALL, count_record, &all, &err), LMCA_OK, &err);
    ASSERT_EQ(all.metas, 1);
    ASSERT_EQ(all.matched, 0); /* no bins read */
    ASSERT_EQ(all.segments, 3);
    ASSERT_RC(lmca_scan(h, LMCA_SCAN_ALL, NULL, NULL, &err), LMCA_EINVAL, &err);
    free(buf);
    lmca_close(h);
}

/* Defect: a host list that failed to parse leaked the seeds the client had
   already taken (the ASan run reports such a leak at exit): the client took
   "127.0.0.1:3000", then refused "h:3000x". The engine now checks every seed
   first and names the bad one, and gives the client's config back if the
   client refuses one all the same. */
TEST(bad_host_lists_are_named_and_leak_nothing)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};

    th_config(&cfg, "lmcache");
    cfg.hosts = "127.0.0.1:3000,h:3000x";
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_ECONFIG, &err);
    ASSERT_CONTAINS(err.msg, "seed \"h:3000x\"");
    cfg.hosts = "127.0.0.1:3000,:5";
    cfg.tls_name = "node1.example"; /* TLS seeds go through the engine's own parsing */
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_ECONFIG, &err);
    ASSERT_CONTAINS(err.msg, "seed \":5\"");
}

/* Defect: the client's setters could refuse a value and the engine went on
   without it: a user name too long for the client was dropped silently. */
TEST(settings_the_client_refuses_are_config_errors)
{
    char user[100];
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};

    memset(user, 'u', sizeof user - 1);
    user[sizeof user - 1] = '\0';
    th_config(&cfg, "lmcache");
    cfg.username = user;
    cfg.password = "secret";
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_ECONFIG, &err);
    ASSERT_CONTAINS(err.msg, "username");
}

/* Defect: slab sizes were computed from the key count unchecked, so a huge
   count wrapped around to a small allocation. Counts are bounded before any key
   is read now. */
TEST(huge_key_counts_are_refused_before_reading_keys)
{
    lmca_t *h = th_open("lmcache");
    const char *one = "k";
    lmca_get_t g = {.key = "k"};
    lmca_put_t p = {.key = "k"};
    int result = 0x55;
    size_t count = 9;
    lmca_err_t err = {0};

    ASSERT_RC(lmca_prefix(h, &one, SIZE_MAX / 8, &count, NULL, &err), LMCA_EINVAL, &err);
    ASSERT_CONTAINS(err.msg, "too many keys");
    ASSERT_EQ(count, 0);
    ASSERT_RC(lmca_get_begin_many(h, &g, (size_t)LMCA_BATCH_MAX + 1, &result, &err), LMCA_EINVAL,
              &err);
    ASSERT_RC(lmca_put_commit_many(h, &p, SIZE_MAX / 2, &result, &err), LMCA_EINVAL, &err);
    ASSERT_EQ(result, 0x55); /* n was refused before any row was touched */
    lmca_close(h);
}

TEST_LIST = {
    T(limits_discovered_on_8mib_namespace),
    T(limits_discovered_on_1mib_namespace_clamp_target),
    T(limits_from_write_block_size_on_legacy_server),
    T(unreachable_cluster_is_connection_error),
    T(tls_name_is_passed_through_to_the_client),
    T(unknown_namespace_is_namespace_error),
    T(ttl_with_nsup_period_0_fails_at_open),
    T(never_expiring_ttl_works_with_nsup_period_0),
    T(ttl_write_refused_by_server_is_ttl_error),
    T(bad_config_fails_before_connecting),
    T(record_too_big_is_mapped_with_guidance),
    T(ping_answers),
    T(info_answers_once_per_node_with_the_value_alone),
    T(info_refuses_bad_commands_naming_them),
    T(scan_reads_meta_records_or_every_record),
    T(bad_host_lists_are_named_and_leak_nothing),
    T(settings_the_client_refuses_are_config_errors),
    T(huge_key_counts_are_refused_before_reading_keys),
};
TEST_MAIN()
