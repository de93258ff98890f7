/*
 * internal.h - helpers shared by the engine's source files. Not installed.
 */
#ifndef LMCA_INTERNAL_H
#define LMCA_INTERNAL_H

#include "lmca.h"

#if defined(__GNUC__)
#define LMCA__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define LMCA__PRINTF(f, a)
#endif

#define LMCA__KIB (1024ull)
#define LMCA__MIB (1024ull * 1024ull)

/* Fills `err` (if not NULL) and returns `status`, so that a failure path reads
   `return lmca__fail(err, LMCA_ECONFIG, 0, "...", ...);`. */
int lmca__fail(lmca_err_t *err, int status, int as_code, const char *fmt, ...)
    LMCA__PRINTF(4, 5);

/* Sends one line to the configured log callback, if any. */
void lmca__log(const lmca_config_t *cfg, int level, const char *fmt, ...)
    LMCA__PRINTF(3, 4);

/* A handle: the settings (strings copied), the limits and one client. */
struct lmca {
    lmca_config_t cfg;
    char *strings; /* one allocation holding cfg's string copies */
    lmca_server_info_t server;
    lmca_limits_t limits;
    struct lmca__wire *wire;
};

/* Record keys of a chunk: "<key>|m" and "<key>|s|<i>" (spec 4.3.3). */
#define LMCA__RECKEY_SIZE (LMCA_KEY_MAX + 16)
void lmca__meta_key(char *out, const char *key);
void lmca__segment_key(char *out, const char *key, uint32_t index);

/* LMCA_OK if `key` is a usable key, else LMCA_EINVAL naming the problem. */
int lmca__check_key(const char *key, lmca_err_t *err);

/* TTL to send: -1 (never) for pinned records, else default_ttl_seconds. */
uint32_t lmca__ttl(const lmca_t *h, bool pin);

#endif /* LMCA_INTERNAL_H */
