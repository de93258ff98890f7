/*
 * handle.c - opening a handle (limit discovery), keys, and the calls that
 * handle whole keys without moving payloads: prefix, exists, remove, touch, scan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

const char *
lmca_version(void)
{
    return LMCA_VERSION;
}

void
lmca__meta_key(char *out, const char *key)
{
    snprintf(out, LMCA__RECKEY_SIZE, "%s|m", key);
}

void
lmca__segment_key(char *out, const char *key, uint32_t index)
{
    snprintf(out, LMCA__RECKEY_SIZE, "%s|s|%u", key, index);
}

int
lmca__check_key(const char *key, lmca_err_t *err)
{
    size_t n;
    if (key == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "key is NULL");
    n = strnlen(key, LMCA_KEY_MAX + 1);
    if (n == 0)
        return lmca__fail(err, LMCA_EINVAL, 0, "key is empty");
    if (n > LMCA_KEY_MAX)
        return lmca__fail(err, LMCA_EINVAL, 0, "key \"%.40s...\" is longer than %d bytes", key,
                          LMCA_KEY_MAX);
    return LMCA_OK;
}

uint32_t
lmca__ttl(const lmca_t *h, bool pin)
{
    /* Aerospike's special TTLs: 0xFFFFFFFF never expires, 0xFFFFFFFE keeps the
       current one, 0 takes the namespace default; int64 -1/-2 map onto them. */
    return pin ? UINT32_MAX : (uint32_t)h->cfg.default_ttl_seconds;
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
    if ((p = h->strings = malloc(total + 1)) == NULL)
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
    if ((h = calloc(1, sizeof *h)) == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory opening a handle");
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
    lmca__wire_close(h->wire);
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

/* ---------------------------------------------------------------------------
 * Whole keys.
 */

/* Builds "<key>|m" for every key in one allocation; NULL on a bad key. */
static char **
meta_keys(const char *const *keys, size_t n, lmca_err_t *err, int *rc)
{
    char **out = malloc(n * (sizeof(char *) + LMCA__RECKEY_SIZE));
    char *slab = (char *)(out + n);

    if (out == NULL) {
        *rc = lmca__fail(err, LMCA_ENOMEM, 0, "out of memory for %zu keys", n);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if ((*rc = lmca__check_key(keys[i], err)) != LMCA_OK) {
            free(out);
            return NULL;
        }
        out[i] = slab + i * LMCA__RECKEY_SIZE;
        lmca__meta_key(out[i], keys[i]);
    }
    *rc = LMCA_OK;
    return out;
}

int
lmca_prefix(lmca_t *h, const char *const *keys, size_t n, size_t *count, uint8_t *found,
            lmca_err_t *err)
{
    uint8_t *hits;
    char **mkeys;
    int rc;

    *count = 0;
    if (n == 0)
        return LMCA_OK;
    if (keys == NULL)
        return lmca__fail(err, LMCA_EINVAL, 0, "lmca_prefix: NULL keys");
    if ((mkeys = meta_keys(keys, n, err, &rc)) == NULL)
        return rc;
    hits = found ? found : malloc(n);
    if (hits == NULL)
        rc = lmca__fail(err, LMCA_ENOMEM, 0, "out of memory for %zu keys", n);
    else
        rc = lmca__wire_exists_many(h->wire, (const char *const *)mkeys, n, hits, err);
    /* The meta record is written last and removed first, so an existing meta
       record means a ready chunk (spec 4.4.7). */
    while (rc == LMCA_OK && *count < n && hits[*count])
        (*count)++;
    if (hits != found)
        free(hits);
    free(mkeys);
    return rc;
}

static void
read_state(void *udata, const lmca__bin *b)
{
    bool *ready = udata;
    if (strcmp(b->name, "state") == 0)
        *ready = b->type == LMCA__STR && b->len == 5 && memcmp(b->p, "ready", 5) == 0;
}

int
lmca_exists(lmca_t *h, const char *key, lmca_err_t *err)
{
    static const char *const names[] = {"state", NULL};
    char mkey[LMCA__RECKEY_SIZE];
    bool ready = false;
    int rc;

    if ((rc = lmca__check_key(key, err)) != LMCA_OK)
        return rc;
    lmca__meta_key(mkey, key);
    rc = lmca__wire_read(h->wire, mkey, names, NULL, NULL, read_state, &ready, NULL, err);
    return rc == LMCA_OK && !ready ? LMCA_MISS : rc;
}

/* Keys of segments [0, nseg) in one allocation. */
static char **
segment_keys(const char *key, uint32_t nseg, lmca_err_t *err)
{
    char **out = malloc(nseg * (sizeof(char *) + LMCA__RECKEY_SIZE));
    char *slab = (char *)(out + nseg);
    if (out == NULL) {
        lmca__fail(err, LMCA_ENOMEM, 0, "out of memory for %u segment keys", nseg);
        return NULL;
    }
    for (uint32_t i = 0; i < nseg; i++) {
        out[i] = slab + (size_t)i * LMCA__RECKEY_SIZE;
        lmca__segment_key(out[i], key, i);
    }
    return out;
}

int
lmca_remove(lmca_t *h, const char *key, lmca_err_t *err)
{
    char mkey[LMCA__RECKEY_SIZE];
    lmca_meta_t *meta = malloc(sizeof *meta);
    char **skeys;
    int rc;

    if (meta == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory");
    if ((rc = lmca_stat(h, key, meta, err)) == LMCA_OK || rc == LMCA_MISS) {
        /* Meta first, so readers miss at once; a meta record that is not ready
           (stat says MISS) is removed too. */
        lmca__meta_key(mkey, key);
        int removed = lmca__wire_remove(h->wire, mkey, err);
        if (removed != LMCA_OK && removed != LMCA_MISS)
            rc = removed;
        else if (rc == LMCA_MISS && removed == LMCA_OK)
            rc = LMCA_OK;
    }
    if (rc == LMCA_OK && meta->nseg > 1 && (skeys = segment_keys(key, meta->nseg, NULL))) {
        /* Best effort: a segment left behind expires by TTL (spec 4.4.10). */
        lmca__wire_remove_many(h->wire, (const char *const *)skeys, meta->nseg, NULL);
        free(skeys);
    }
    free(meta);
    return rc;
}

int
lmca_touch(lmca_t *h, const char *key, bool pin, lmca_err_t *err)
{
    char rkey[LMCA__RECKEY_SIZE];
    lmca__bin pin_bin = {.name = "pin", .type = LMCA__INT, .i = pin};
    lmca_meta_t *meta = malloc(sizeof *meta);
    uint32_t ttl = lmca__ttl(h, pin);
    int rc;

    if (meta == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory");
    rc = lmca_stat(h, key, meta, err);
    /* Segments before the meta record, so they never expire before it. */
    for (uint32_t i = 0; rc == LMCA_OK && meta->nseg > 1 && i < meta->nseg; i++) {
        lmca__segment_key(rkey, key, i);
        rc = lmca__wire_touch(h->wire, rkey, ttl, NULL, 0, err);
    }
    if (rc == LMCA_OK) {
        lmca__meta_key(rkey, key);
        rc = lmca__wire_touch(h->wire, rkey, ttl, &pin_bin, 1, err);
    }
    free(meta);
    return rc;
}
