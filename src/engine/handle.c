/*
 * handle.c - opening a handle (limit discovery, write-id seed), its counters,
 * and the calls on whole keys that move no payload: remove and touch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "schema.h"

const char *
lmca_version(void)
{
    return LMCA_VERSION;
}

/* ---------------------------------------------------------------------------
 * Open and close.
 */

/* Copies the config's strings into one allocation owned by the handle. */
static int
own_strings(lmca_t *h, const lmca_config_t *cfg, lmca_err_t *err)
{
    const char **fields[] = {&h->cfg.hosts,    &h->cfg.namespace_, &h->cfg.set,
                             &h->cfg.username, &h->cfg.password,   &h->cfg.tls_name};
    size_t total = 0, n = sizeof fields / sizeof fields[0];
    char *p;

    h->cfg = *cfg;
    for (size_t i = 0; i < n; i++)
        total += *fields[i] ? strlen(*fields[i]) + 1 : 0;
    if ((p = h->strings = lmca__malloc(total + 1)) == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory opening a handle");
    for (size_t i = 0; i < n; i++) {
        if (*fields[i] == NULL)
            continue;
        size_t len = strlen(*fields[i]) + 1;
        memcpy(p, *fields[i], len);
        *fields[i] = p;
        p += len;
    }
    return LMCA_OK;
}

/* A random seed for write ids; without getrandom, a mix of time, pid and the
   handle's address, which still differs between live handles. */
static uint64_t
wid_seed(void)
{
    uint64_t seed;
    struct timespec ts;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed)
        return seed;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ ((uint64_t)getpid() << 16) ^
           (uint64_t)(uintptr_t)&ts;
}

/* Reads the namespace's limits (spec 4.3.6) and resolves the handle's sizes. */
static int
discover(lmca_t *h, lmca_err_t *err)
{
    char req[64], *answer = NULL;
    int rc;

    snprintf(req, sizeof req, "namespace/%s", h->cfg.namespace_);
    if ((rc = lmca__wire_info(h->wire, req, &answer, err)) != LMCA_OK)
        return rc;
    rc = lmca_server_info_parse(answer, &h->server, err);
    if (rc == LMCA_ENAMESPACE)
        rc = lmca__fail(err, LMCA_ENAMESPACE, 0,
                        "namespace \"%s\" is unknown to the cluster at %s (server answered "
                        "\"%.120s\")",
                        h->cfg.namespace_, h->cfg.hosts, answer ? answer : "");
    free(answer);
    if (rc == LMCA_OK)
        rc = lmca_limits_resolve(&h->server, &h->cfg, &h->limits, err);
    if (rc == LMCA_OK)
        lmca__cache_open(h);
    return rc;
}

int
lmca_open(const lmca_config_t *cfg, lmca_t **out, lmca_err_t *err)
{
    lmca_t *h;
    int rc;

    if (cfg == NULL || out == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_open: NULL config or handle pointer");
    if ((rc = lmca_config_validate(cfg, err)) != LMCA_OK)
        return rc;
    if ((h = lmca__calloc(1, sizeof *h)) == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory opening a handle");
    lmca__clock_init(h);
    lmca__cache_init(h);
    lmca__hits_init(h);
    h->wid_seed = wid_seed();
    if ((rc = own_strings(h, cfg, err)) == LMCA_OK &&
        (rc = lmca__wire_open(&h->cfg, &h->wire, err)) == LMCA_OK)
        rc = discover(h, err);
    if (rc != LMCA_OK) {
        lmca_close(h);
        return rc;
    }
    *out = h;
    return LMCA_OK;
}

void
lmca_close(lmca_t *h)
{
    if (h == NULL)
        return;
    if (h->wire)
        lmca_touch_hits(h, NULL);
    lmca__wire_close(h->wire);
    lmca__cache_close(h);
    lmca__hits_destroy(h);
    lmca__clock_destroy(h);
    free(h->strings);
    free(h);
}

const lmca_config_t *
lmca_config(const lmca_t *h)
{
    return &h->cfg;
}

const lmca_limits_t *
lmca_limits(const lmca_t *h)
{
    return &h->limits;
}

int
lmca_ping(lmca_t *h, lmca_err_t *err)
{
    char *answer = NULL;
    int rc = lmca__wire_info(h->wire, "node", &answer, err);
    free(answer);
    if (rc != LMCA_OK && rc != LMCA_ETIMEOUT)
        rc = lmca__fail(err, LMCA_ECONNECTION, err ? err->as_code : 0, "ping %s: %s",
                        h->cfg.hosts, err ? err->msg : "no answer");
    return rc;
}

void
lmca_stats(lmca_t *h, lmca_stats_t *out)
{
    const lmca__counters *c = &h->counters;
#define LOAD(f) out->f = atomic_load_explicit(&c->f, memory_order_relaxed)
    LOAD(corrupt);
    LOAD(torn);
    LOAD(crc_mismatch);
    LOAD(puts_aborted);
    LOAD(segments_removed);
    LOAD(segments_left);
    LOAD(guesses_confirmed);
    LOAD(guesses_missed);
    LOAD(puts_retried);
    LOAD(write_retries);
    LOAD(dropped_full);
    LOAD(dropped_busy);
    LOAD(dropped_unsent);
    LOAD(dropped_unreachable);
    LOAD(dropped_paced);
    LOAD(puts_paced);
    LOAD(clock_reservations);
    LOAD(clock_resets);
    LOAD(clock_local);
    LOAD(clock_fallbacks);
    LOAD(clock_busy);
    LOAD(clock_overloaded);
    LOAD(hits_touched);
    LOAD(hits_fresh);
    LOAD(hits_unbudgeted);
    LOAD(touch_bytes);
    LOAD(touches_failed);
    LOAD(mends);
    LOAD(mended_records);
#undef LOAD
    out->full = atomic_load_explicit(&h->cache.full_until_ms, memory_order_relaxed) >
                lmca__mono_ms();
    lmca__wire_paths(h->wire, &out->fast_ops, &out->client_ops);
}

/* ---------------------------------------------------------------------------
 * Info for operators.
 */

typedef struct {
    lmca_info_cb cb;
    void *udata;
} info_call;

static bool
info_answer(void *udata, const char *node, const char *address, char *answer)
{
    info_call *c = udata;
    size_t n;
    char *value = (char *)lmca__info_value(answer, &n);
    value[n] = '\0'; /* the answer is ours to cut: the wire's malloc'd copy */
    return c->cb(c->udata, node, address, value);
}

/* LMCA_OK for one command the server can take as is, else LMCA_EINVAL quoting
   it with its newline or tab escaped (a raw one would break the message too). */
static int
check_command(const char *command, lmca_err_t *err)
{
    char shown[128];
    size_t bad, k = 0;

    if (command == NULL || *command == '\0')
        return lmca__fail(err, LMCA_EINVAL, 0, "info: %s command", command ? "empty" : "NULL");
    if (command[bad = strcspn(command, "\t\n")] == '\0')
        return LMCA_OK;
    for (const char *p = command; *p && k + 3 < sizeof shown; p++) {
        if (*p == '\n' || *p == '\t')
            shown[k++] = '\\', shown[k++] = *p == '\n' ? 'n' : 't';
        else
            shown[k++] = *p;
    }
    shown[k] = '\0';
    return lmca__fail(err, LMCA_EINVAL, 0,
                      "info command \"%s\" holds a %s at byte %zu: one command per call", shown,
                      command[bad] == '\n' ? "newline" : "tab", bad);
}

int
lmca_info(lmca_t *h, const char *command, lmca_info_cb cb, void *udata, lmca_err_t *err)
{
    info_call c = {cb, udata};
    int rc = check_command(command, err);

    if (rc == LMCA_OK && cb == NULL)
        rc = lmca__fail(err, LMCA_EINVAL, 0, "info \"%.100s\": NULL callback", command);
    if (rc != LMCA_OK)
        return rc;
    return lmca__wire_info_each(h->wire, command, info_answer, &c, err);
}

uint32_t
lmca_cluster_size(lmca_t *h)
{
    return lmca__wire_nodes(h->wire);
}

/* ---------------------------------------------------------------------------
 * Whole keys.
 */

/* Keys of segments [0, nseg) with `extra` bytes each (key_slab). */
static char **
segment_keys(const char *key, uint32_t nseg, size_t extra, lmca_err_t *err)
{
    char **keys = lmca__key_slab(nseg, extra, "segment keys", err);
    for (uint32_t i = 0; keys && i < nseg; i++)
        lmca__segment_key(keys[i], key, i);
    return keys;
}

int
lmca_remove(lmca_t *h, const char *key, lmca_err_t *err)
{
    char mkey[LMCA__RECKEY_SIZE], **skeys;
    lmca_meta_t meta;
    size_t removed = 0, failed = 0;
    int rc = lmca__read_small(h, key, &meta, LMCA__PRESENCE, err), gone;

    if (rc != LMCA_OK && rc != LMCA_MISS)
        return rc;
    /* Meta first, so readers miss at once. */
    lmca__meta_key(mkey, key);
    if ((gone = lmca__wire_remove(h->wire, mkey, err)) < 0)
        return gone;
    /* A meta record that was no valid chunk is gone now too, but its nseg is not
       to be trusted: its segments are left to TTL and the sweep. */
    if (rc == LMCA_MISS)
        return gone;
    if (meta.nseg > 1 && (skeys = segment_keys(key, meta.nseg, 0, NULL))) {
        /* Best effort: a segment left behind expires by TTL or is swept
           (spec 4.4.10, lmca_sweep). */
        lmca__wire_remove_many(h->wire, (const char *const *)skeys, meta.nseg, &removed, &failed,
                               NULL);
        free(skeys);
    }
    return LMCA_OK;
}

/* Touches every segment in batch calls; LMCA_MISS if one is gone. */
static int
touch_segments(lmca_t *h, const char *key, uint32_t nseg, uint64_t void_at, bool pin,
               lmca_err_t *err)
{
    char **keys = segment_keys(key, nseg, sizeof(lmca__row), err);
    lmca__row *rows = keys ? lmca__slab_extra(keys, nseg) : NULL;
    int rc = keys ? LMCA_OK : LMCA_ENOMEM;

    for (uint32_t i = 0; keys && i < nseg; i++)
        rows[i] = (lmca__row){.key = keys[i], .ttl = lmca__record_ttl(h, void_at, pin),
                              .touch = true};
    for (uint32_t i = 0; rc == LMCA_OK && i < nseg; i += 4096) {
        uint32_t n = nseg - i < 4096 ? nseg - i : 4096;
        rc = lmca__wire_write_many(h->wire, rows + i, n, 0, err);
        for (uint32_t k = 0; rc == LMCA_OK && k < n; k++)
            rc = rows[i + k].result;
    }
    free(keys);
    return rc;
}

int
lmca_touch(lmca_t *h, const char *key, bool pin, lmca_err_t *err)
{
    char mkey[LMCA__RECKEY_SIZE];
    lmca__bin pin_bin = {.name = "pin", .type = LMCA__INT, .i = pin};
    lmca_meta_t meta;
    uint64_t void_at;
    int rc = lmca__read_small(h, key, &meta, LMCA__PRESENCE, err);

    if (rc != LMCA_OK)
        return rc;
    /* A new place on the clock, the head of the eviction order as a put gets
       (clock.c); it does not wait for the clock, as it adds no data. Segments
       first, so that a touch cut short leaves no meta record due after them. */
    if (!pin) {
        uint64_t step;
        bool unbudgeted; /* an explicit touch asks no budget */
        void_at = lmca__clock_move(h, meta.nseg > 1 ? meta.nseg + 1 : 1, 0, false, &step,
                                   &unbudgeted) / 1000000u;
    } else {
        void_at = 0;
    }
    if (meta.nseg > 1)
        rc = touch_segments(h, key, meta.nseg, void_at, pin, err);
    if (rc == LMCA_OK) {
        lmca__meta_key(mkey, key);
        rc = lmca__wire_touch(h->wire, mkey, lmca__record_ttl(h, void_at, pin), &pin_bin,
                              1, err);
    }
    return rc;
}

int
lmca_remove_record(lmca_t *h, const uint8_t digest[20], lmca_err_t *err)
{
    if (digest == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_remove_record: NULL digest");
    return lmca__wire_remove_digest(h->wire, NULL, digest, 0, err);
}
