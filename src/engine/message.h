/*
 * message.h - one response message of the Aerospike wire protocol, read from
 * any byte source: a socket, or a fuzzer's input.
 *
 * The bytes come from a server the engine does not trust. Every length is
 * checked against what is left of the message before it is used; a value is
 * written to a destination only when it fits; nothing is allocated beyond what
 * the message itself declares. Pure: no I/O of its own, no libaerospike calls.
 */
#ifndef LMCA_MESSAGE_H
#define LMCA_MESSAGE_H

#include "record.h"

/* Particle types on the wire (the client's as_bytes_type), for reading bins and
   for writing them. */
enum {
    LMCA__P_INTEGER = 1,
    LMCA__P_STRING = 3,
    LMCA__P_BLOB = 4,
    LMCA__P_BOOL = 17
};

/* Reads exactly n bytes into `into`; returns false when the source failed (it
   keeps its own error, a socket's the client's as_error). */
typedef bool (*lmca__pull_fn)(void *src, uint8_t *into, size_t n);

typedef enum {
    LMCA__MSG_OK,         /* read to its end: result_code (and the record) are set */
    LMCA__MSG_PULL_FAILED,/* the source failed; the message is cut */
    LMCA__MSG_MALFORMED   /* the bytes break the protocol; `why` says how */
} lmca__msg_rc;

/* Received bytes not yet handed out; big values bypass it. */
#define LMCA__MSG_STAGE 8192

typedef struct lmca__msg {
    /* in */
    lmca__pull_fn pull;
    void *src;
    /* out */
    uint8_t result_code;  /* the server's answer (0 = OK) */
    uint32_t void_time;   /* the record's expiry, server epoch seconds (0 = never) */
    const char *why;      /* with LMCA__MSG_MALFORMED: a static description */
    /* reader state */
    uint64_t left;        /* bytes of the message still at the source */
    size_t pos, end;      /* stage[pos, end) is read but not taken */
    uint8_t stage[LMCA__MSG_STAGE];
} lmca__msg;

/* A message that carries only an answer (a write's). */
lmca__msg_rc lmca__msg_status(lmca__msg *m);

/*
 * A record, with the contract of lmca__wire_read: the bin called `payload`
 * (may be NULL) lands in r->dst (or a new lmca__malloc'd buffer with r->alloc)
 * when it is a blob of at most r->cap bytes, else it is read and dropped;
 * every other bin goes to r->cb, typed (an 8-byte integer or a bool as INT, a
 * string as STR, NUL-terminated at len, a blob as BLOB, anything else OTHER).
 * Sets r->found, blob, len, nomem; the caller sets r->ttl from void_time.
 */
lmca__msg_rc lmca__msg_record(lmca__msg *m, const char *payload, lmca__read *r);

#endif /* LMCA_MESSAGE_H */
