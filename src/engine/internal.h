/*
 * internal.h - helpers shared by the engine's source files. Not installed.
 */
#ifndef LMCA_INTERNAL_H
#define LMCA_INTERNAL_H

#include <stdatomic.h>

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

/*
 * Every allocation of the engine and the asynchronous layer goes through these
 * (alloc.c), so that a test can make any one of them fail: they are weak, and a
 * test program may define its own (tests/c/test_alloc.c).
 */
void *lmca__malloc(size_t size);
void *lmca__calloc(size_t n, size_t size);

/* n * each + extra, or SIZE_MAX when that overflows (malloc then fails). */
size_t lmca__size(size_t n, size_t each, size_t extra);

/*
 * One allocation holding `n` record keys (LMCA__RECKEY_SIZE bytes each, and the
 * array of pointers to them) followed by `extra` bytes per key for the caller's
 * arrays, 16-byte aligned, at lmca__slab_extra(). The one place that sizes key
 * slabs, with one overflow check. Free with free(keys).
 * @return the key pointers, or NULL with LMCA_ENOMEM in err (`what` names the
 *   call in the message).
 */
char **lmca__key_slab(size_t n, size_t extra, const char *what, lmca_err_t *err);
void *lmca__slab_extra(char **keys, size_t n);

/* Counters behind lmca_stats_t. */
typedef struct lmca__counters {
    atomic_uint_fast64_t corrupt, torn, crc_mismatch;
    atomic_uint_fast64_t puts_aborted, segments_removed, segments_left;
    atomic_uint_fast64_t guesses_confirmed, guesses_missed;
} lmca__counters;

#define LMCA__COUNT(h, field) atomic_fetch_add_explicit(&(h)->counters.field, 1, memory_order_relaxed)

/* A handle: the settings (strings copied), the limits and one client. */
struct lmca {
    lmca_config_t cfg;
    char *strings; /* one allocation holding cfg's string copies */
    lmca_server_info_t server;
    lmca_limits_t limits;
    struct lmca__wire *wire;
    lmca__counters counters;
    uint64_t wid_seed;            /* random, drawn at open */
    atomic_uint_fast64_t wid_next; /* write ids: a mix of seed and counter */
};

/* Record keys of a chunk: "<key>|m" and "<key>|s|<i>" (spec 4.3.3), schema.c. */
#define LMCA__RECKEY_SIZE (LMCA_KEY_MAX + 16)
void lmca__meta_key(char *out, const char *key);
void lmca__segment_key(char *out, const char *key, uint32_t index);

/* LMCA_OK if `key` is a usable key, else LMCA_EINVAL naming the problem. */
int lmca__check_key(const char *key, lmca_err_t *err);

/* The value of an info answer: after "<request>\t" (the whole answer when it
   has no tab), without trailing newlines; `*n` is its length. limits.c. */
const char *lmca__info_value(const char *info, size_t *n);

/* TTL to send: -1 (never) for pinned records, else default_ttl_seconds. */
uint32_t lmca__ttl(const lmca_t *h, bool pin);

#endif /* LMCA_INTERNAL_H */
