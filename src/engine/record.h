/*
 * record.h - a record as the engine's data paths hand it over: typed bins, and
 * where a read's payload goes. Shared by the client's path (wire.c), the fast
 * path (fast.c) and the response reader (message.c), below all three.
 */
#ifndef LMCA_RECORD_H
#define LMCA_RECORD_H

#include "internal.h"

/* OTHER: any type the schema never writes (double, list, map, geo, ...). */
typedef enum { LMCA__INT = 1, LMCA__STR, LMCA__BLOB, LMCA__OTHER } lmca__type;

/* One bin. For STR, `p` is NUL-terminated on writes; on reads STR and BLOB point
   into the client's record, valid during the callback only, `len` bytes. */
typedef struct lmca__bin {
    const char *name;
    lmca__type type;
    int64_t i;
    const void *p;
    size_t len;
} lmca__bin;

/* Bins of a read record other than its payload, one call per bin. */
typedef void (*lmca__bin_cb)(void *udata, const lmca__bin *bin);

/* One record to read: where its payload bin goes and who decodes the others. */
typedef struct lmca__read {
    void *dst;          /* the payload bin is copied here when it is a blob of */
    size_t cap;         /* at most `cap` bytes; */
    bool alloc;         /* or, with dst NULL, into a new lmca__malloc'd dst of its
                           size (the caller frees it; nomem says it failed) */
    lmca__bin_cb cb;    /* may be NULL */
    void *udata;
    /* out */
    bool found;         /* the payload bin exists (whatever its type) */
    bool repeated;      /* ... and came more than once, which no writer does:
                           only the first was taken, and the record is corrupt */
    bool blob;          /* ... and is a blob */
    size_t len;         /* its size, also when it was not copied */
    uint32_t ttl;       /* seconds left; 0xFFFFFFFF never expires */
    bool nomem;         /* alloc failed */
    int result;         /* LMCA_OK, LMCA_MISS (no record) or an error */
} lmca__read;

#endif /* LMCA_RECORD_H */
