/*
 * test_fast.c - the payload data path (src/engine/fast.c) against a server:
 * records written on one path read on the other, the path a handle takes, the
 * heap-built requests, and connections that stay clean after a record the
 * engine refuses. scripts/test.sh runs every server suite on both paths.
 */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

#define KIB (1024ull)
#define MIB (1024ull * 1024ull)

static lmca_t *
open_path(bool fast, bool send_key, uint32_t conns)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_t *h = NULL;

    th_config(&cfg, "lmcache");
    cfg.fast_path = fast;
    cfg.send_key = send_key;
    cfg.max_conns_per_node = conns;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    return h;
}

/* Puts on `w`, gets on `r`, with md; checks bytes, size and md. */
static void
cross(lmca_t *w, lmca_t *r, size_t len, uint32_t seed)
{
    const char *key = th_key("cross");
    uint8_t *in = malloc(len ? len : 1), *out = malloc(len + 1);
    static const char md[] = "metadata of the chunk";
    lmca_put_opts_t opts = {.md = md, .md_len = sizeof md, .serde = "naive"};
    lmca_meta_t meta;
    lmca_err_t err = {0};
    size_t got = 0;

    th_fill(in, len, seed);
    ASSERT_RC(lmca_put(w, key, in, len, &opts, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get(r, key, out, len + 1, &got, NULL, &err), LMCA_OK, &err);
    ASSERT_EQ(got, len);
    ASSERT(memcmp(in, out, len) == 0);
    ASSERT_RC(lmca_stat(r, key, &meta, &err), LMCA_OK, &err);
    ASSERT_EQ(meta.md_len, sizeof md);
    ASSERT(memcmp(meta.md, md, sizeof md) == 0);
    ASSERT(strcmp(meta.serde, "naive") == 0);
    lmca_meta_clear(&meta);
    free(in);
    free(out);
}

static const size_t sizes[] = {0, 1, 64 * KIB, 1 * MIB + 3, 4 * MIB, 9 * MIB + 5};
#define NSIZES (sizeof sizes / sizeof sizes[0])

TEST(each_path_reads_what_the_other_wrote)
{
    lmca_t *fast = open_path(true, false, 64), *client = open_path(false, false, 64);
    for (size_t i = 0; i < NSIZES; i++) {
        cross(fast, client, sizes[i], (uint32_t)i);
        cross(client, fast, sizes[i], (uint32_t)i + 100);
    }
    lmca_close(fast);
    lmca_close(client);
}

TEST(payloads_take_the_configured_path)
{
    lmca_t *fast = open_path(true, false, 64), *client = open_path(false, false, 64);
    lmca_stats_t sf, sc;

    cross(fast, fast, 4 * MIB, 1);
    cross(client, client, 4 * MIB, 2);
    lmca_stats(fast, &sf);
    lmca_stats(client, &sc);
    /* a 4 MiB chunk is a meta record and segment records, each one call */
    ASSERT(sf.fast_ops >= 3);
    ASSERT_EQ(sf.client_ops, 0);
    ASSERT(sc.client_ops >= 3);
    ASSERT_EQ(sc.fast_ops, 0);
    lmca_close(fast);
    lmca_close(client);
}

TEST(long_keys_sent_with_the_record_build_requests_on_the_heap)
{
    /* send_key puts the key in every request: past the stack buffer of fast.c */
    char key[LMCA_KEY_MAX + 1];
    lmca_t *h = open_path(true, true, 64);
    size_t len = 5 * MIB;
    uint8_t *in = malloc(len), *out = malloc(len);
    lmca_err_t err = {0};
    size_t got = 0;

    memset(key, 'k', LMCA_KEY_MAX);
    snprintf(key, 32, "%s", th_key("long"));
    key[strlen(key)] = 'k';
    key[LMCA_KEY_MAX] = '\0';
    th_fill(in, len, 9);
    ASSERT_RC(lmca_put(h, key, in, len, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_get(h, key, out, len, &got, NULL, &err), LMCA_OK, &err);
    ASSERT_EQ(got, len);
    ASSERT(memcmp(in, out, len) == 0);
    free(in);
    free(out);
    lmca_close(h);
}

TEST(a_refused_payload_leaves_the_connection_clean)
{
    /* One connection: whatever the refused read left on it, the next read
       would meet. A segment larger than its meta record says is read to its
       end and dropped, never written past the destination. */
    lmca_t *h = open_path(th_fast_path(), false, 1);
    const char *bad = th_key("oversized"), *good = th_key("good");
    size_t len = 6 * MIB, got = 0;
    uint8_t *in = malloc(len), *out = malloc(len + 4096), *big;
    char reckey[LMCA_KEY_MAX + 16];
    lmca_meta_t meta;
    lmca_err_t err = {0};

    th_fill(in, len, 3);
    ASSERT_RC(lmca_put(h, good, in, len, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_put(h, bad, in, len, NULL, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_stat(h, bad, &meta, &err), LMCA_OK, &err);
    ASSERT(meta.nseg >= 2);
    big = malloc(meta.seg_b + 4096);
    th_fill(big, meta.seg_b + 4096, 4);
    th_bin seg[] = {TH_BLOB("b", big, meta.seg_b + 4096), TH_INT("wid", (int64_t)meta.wid)};
    snprintf(reckey, sizeof reckey, "%s|s|0", bad);
    ASSERT_EQ(th_plant("lmcache", reckey, seg, 2), 0);
    /* the canary past the payload's end stays untouched */
    memset(out, 0xAB, len + 4096);
    ASSERT_RC(lmca_get(h, bad, out, len, &got, NULL, &err), LMCA_MISS, &err);
    for (size_t i = len; i < len + 4096; i++)
        ASSERT_EQ(out[i], 0xAB);
    for (int i = 0; i < 20; i++) {
        ASSERT_RC(lmca_get(h, good, out, len, &got, NULL, &err), LMCA_OK, &err);
        ASSERT_EQ(got, len);
        ASSERT(memcmp(in, out, len) == 0);
    }
    free(in);
    free(out);
    free(big);
    lmca_close(h);
}

TEST(misses_on_the_fast_path_are_misses)
{
    lmca_t *h = open_path(true, false, 64);
    uint8_t out[16];
    size_t got = 7;
    lmca_err_t err = {0};
    ASSERT_RC(lmca_get(h, th_key("absent"), out, sizeof out, &got, NULL, &err), LMCA_MISS, &err);
    ASSERT_EQ(got, 0);
    lmca_close(h);
}

TEST_LIST = {
    T(each_path_reads_what_the_other_wrote),
    T(payloads_take_the_configured_path),
    T(long_keys_sent_with_the_record_build_requests_on_the_heap),
    T(a_refused_payload_leaves_the_connection_clean),
    T(misses_on_the_fast_path_are_misses),
};
TEST_MAIN()
