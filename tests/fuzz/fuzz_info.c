/*
 * fuzz_info.c - libFuzzer harness for the namespace info parser and what is
 * built on it: lmca_server_info_parse, lmca_limits_resolve and lmca_plan
 * (limits.c).
 *
 * The answer to info "namespace/<ns>" comes from a server the engine does not
 * trust, and the limits derived from it size every record the engine writes.
 * The harness aborts when any answer breaks the promises of lmca.h: limits
 * outside 128 KiB..8 MiB or out of order, a plan that does not cover the payload
 * exactly, or an error message without its NUL.
 *
 * Input format: the bytes up to the first NUL (or all of them) are the answer,
 * passed as a C string in an allocation of exactly its size, so that ASan sees
 * a read past its NUL. After that NUL, optional config overrides, each missing
 * one left at its default: one byte choosing default_ttl_seconds, then four
 * 32-bit little-endian sizes: target, max, min and single-record threshold
 * (0 keeps the default). The limits are resolved with the default config (hosts
 * "h") and, when overrides are there, with the overridden one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Not abort() alone: the line says which promise broke. */
#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz_info: invariant broken at %s:%d: %s\n", __FILE__,    \
                    __LINE__, #cond);                                                   \
            abort();                                                                    \
        }                                                                               \
    } while (0)

/* Garbage in err before each call, so that a message left without its NUL shows. */
static void
scribble(lmca_err_t *err)
{
    memset(err, 0xA5, sizeof *err);
}

static void
check_failure(int rc, const lmca_err_t *err)
{
    CHECK(err->status == rc);
    CHECK(memchr(err->msg, '\0', sizeof err->msg) != NULL);
    CHECK(err->msg[0] != '\0'); /* every failure says why */
}

/* The engine formats log lines into 512 bytes; each must arrive whole. */
static void
check_log(void *udata, int level, const char *msg)
{
    (void)udata;
    CHECK(level == LMCA_LOG_DEBUG || level == LMCA_LOG_INFO || level == LMCA_LOG_WARNING);
    CHECK(strnlen(msg, 512) < 512);
}

/* ---------------------------------------------------------------------------
 * lmca_plan
 */

static void
check_plan(const lmca_limits_t *l, uint64_t payload)
{
    lmca_plan_t p;
    lmca_err_t err;
    int rc;

    scribble(&err);
    rc = lmca_plan(l, payload, &p, &err);
    /* Refused exactly when it needs more segments than the schema can name
       (target <= 8 MiB: the product cannot overflow). */
    CHECK((rc == LMCA_EINVAL) ==
          (payload > l->single_record_threshold_bytes &&
           payload > (uint64_t)LMCA_MAX_SEGMENTS * l->target_segment_bytes));
    if (rc != LMCA_OK) {
        CHECK(rc == LMCA_EINVAL);
        check_failure(rc, &err);
        return;
    }
    CHECK(p.nseg >= 1 && p.nseg <= LMCA_MAX_SEGMENTS);
    if (p.nseg == 1) {
        CHECK(p.seg_b == payload && p.last_b == payload);
        CHECK(payload <= l->max_segment_bytes); /* one record must fit the server */
        return;
    }
    CHECK(p.seg_b == l->target_segment_bytes && p.seg_b <= l->max_segment_bytes);
    CHECK(p.last_b >= 1 && p.last_b <= p.seg_b);
    /* nseg <= 65535, seg_b <= 8 MiB: no overflow. */
    CHECK((uint64_t)(p.nseg - 1) * p.seg_b + p.last_b == payload);
}

/* FNV-1a: a payload size the input picks, spread over every range. */
static uint64_t
input_hash(const uint8_t *data, size_t size)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3ull;
    return h;
}

/* Payloads at every boundary of the plan, and some the input chooses. */
static void
check_plans(const lmca_limits_t *l, const uint8_t *data, size_t size)
{
    const uint64_t t = l->target_segment_bytes, s = l->single_record_threshold_bytes;
    const uint64_t most = (uint64_t)LMCA_MAX_SEGMENTS * t;
    const uint64_t h = input_hash(data, size);
    const uint64_t payloads[] = {0, 1, t - 1, t, t + 1, s, s + 1, l->max_segment_bytes,
                                 l->max_segment_bytes + 1, 2 * t, 3 * t - 1, most - 1, most,
                                 most + 1, UINT64_MAX, h % (most + t), h % (4 * t + 1), h};
    for (size_t i = 0; i < sizeof payloads / sizeof payloads[0]; i++)
        check_plan(l, payloads[i]);
}

/* ---------------------------------------------------------------------------
 * lmca_limits_resolve
 */

static void
check_limits(const lmca_limits_t *l)
{
    CHECK(l->server_cap >= LMCA_CAP_MIN && l->server_cap <= LMCA_BLOCK_7_1);
    CHECK(l->block_bytes >= l->server_cap && l->block_bytes <= LMCA_BLOCK_7_1);
    CHECK(l->cap_source != NULL);
    /* A segment leaves the margin free in its record, and is a grid size. */
    CHECK(l->max_segment_bytes > 0);
    CHECK(l->max_segment_bytes + LMCA_RECORD_MARGIN <= l->server_cap);
    CHECK(l->target_segment_bytes > 0 && l->target_segment_bytes <= l->max_segment_bytes);
    CHECK(lmca_grid_floor(l->block_bytes, l->server_cap, l->target_segment_bytes) ==
          l->target_segment_bytes);
    CHECK(l->single_record_threshold_bytes <= l->max_segment_bytes);
    CHECK(l->min_segment_bytes <= l->target_segment_bytes);
}

static void
resolve(const lmca_server_info_t *srv, const lmca_config_t *cfg, const uint8_t *data,
        size_t size)
{
    lmca_limits_t l;
    lmca_err_t err;
    int rc;

    scribble(&err);
    rc = lmca_limits_resolve(srv, cfg, &l, &err);
    if (rc != LMCA_OK) {
        CHECK(rc == LMCA_ESERVER_LIMIT || rc == LMCA_ETTL || rc == LMCA_ECONFIG);
        check_failure(rc, &err);
        return;
    }
    check_limits(&l);
    check_plans(&l, data, size);
}

static uint32_t
take_u32(const uint8_t **p, size_t *n)
{
    uint32_t v = 0;
    for (int i = 0; i < 4 && *n > 0; i++, (*p)++, (*n)--)
        v |= (uint32_t)**p << (8 * i);
    return v;
}

/* The overrides after the answer's NUL (see the top of the file). */
static void
override_config(lmca_config_t *cfg, const uint8_t *p, size_t n)
{
    static const int64_t ttls[] = {86400, 0, -1, 1};
    uint64_t *sizes[] = {&cfg->target_segment_bytes, &cfg->max_segment_bytes,
                         &cfg->min_segment_bytes, &cfg->single_record_threshold_bytes};

    cfg->default_ttl_seconds = ttls[*p % 4];
    p++, n--;
    for (size_t i = 0; i < 4 && n > 0; i++) {
        uint32_t v = take_u32(&p, &n);
        if (v != 0)
            *sizes[i] = v;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t text = strnlen((const char *)data, size);
    char *info = malloc(text + 1);
    lmca_server_info_t srv;
    lmca_config_t cfg;
    lmca_err_t err;
    int rc;

    if (info == NULL)
        return 0;
    memcpy(info, data, text);
    info[text] = '\0';
    scribble(&err);
    rc = lmca_server_info_parse(info, &srv, &err);
    if (rc != LMCA_OK) {
        CHECK(rc == LMCA_ENAMESPACE || rc == LMCA_ESERVER_LIMIT);
        check_failure(rc, &err);
    } else {
        lmca_config_init(&cfg);
        cfg.hosts = "h";
        cfg.log_cb = check_log;
        resolve(&srv, &cfg, data, size);
        if (text + 1 < size) {
            override_config(&cfg, data + text + 1, size - text - 1);
            resolve(&srv, &cfg, data, size);
        }
    }
    free(info);
    return 0;
}
