/*
 * alloc.c - the engine's allocations and key slabs.
 */
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"

/* Weak, so that tests/c/test_alloc.c can fail the Nth allocation and check that
   every path above returns LMCA_ENOMEM instead of crashing or leaking. */
__attribute__((weak)) void *
lmca__malloc(size_t size)
{
    return malloc(size);
}

__attribute__((weak)) void *
lmca__calloc(size_t n, size_t size)
{
    return calloc(n, size);
}

size_t
lmca__size(size_t n, size_t each, size_t extra)
{
    if (each != 0 && n > (SIZE_MAX - extra) / each)
        return SIZE_MAX;
    return n * each + extra;
}

/* Bytes per key in a slab: its pointer and its storage, rounded up so that the
   caller's arrays after it stay aligned. */
static size_t
slab_keys_bytes(size_t n)
{
    size_t bytes = lmca__size(n, sizeof(char *) + LMCA__RECKEY_SIZE, 15);
    return bytes == SIZE_MAX ? SIZE_MAX : bytes / 16 * 16;
}

char **
lmca__key_slab(size_t n, size_t extra, const char *what, lmca_err_t *err)
{
    size_t keys = slab_keys_bytes(n), total = keys;
    char **out;

    if (keys != SIZE_MAX)
        total = lmca__size(n, extra, keys);
    out = total == SIZE_MAX ? NULL : lmca__malloc(total ? total : 1);
    if (out == NULL) {
        lmca__fail(err, LMCA_ENOMEM, 0, "%s: out of memory for %zu keys", what, n);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = (char *)(out + n) + i * LMCA__RECKEY_SIZE;
    return out;
}

void *
lmca__slab_extra(char **keys, size_t n)
{
    return (char *)keys + slab_keys_bytes(n);
}
