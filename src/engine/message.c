/*
 * message.c - reading one response message (message.h).
 *
 * Layout (the client's as_proto and as_msg, big-endian on the wire):
 *   proto   8 bytes: version 2, type 3 (a message), 48-bit size of what follows
 *   msg     22 bytes: header size, info1-3, unused, result code, generation,
 *           void time, transaction TTL, field count, op count
 *   fields  each: 4-byte size (counting its type byte), type, data
 *   ops     each: 4-byte size (counting the next 4 bytes and the name), op,
 *           particle type, version, name length, name, value
 */
#include <stdlib.h>
#include <string.h>

#include "message.h"

#define PROTO_VERSION 2
#define PROTO_MESSAGE 3
#define PROTO_SIZE_MAX (128ull << 20) /* the client's own bound (PROTO_SIZE_MAX) */
#define MSG_HEADER 22


static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t
be64(const uint8_t *p)
{
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

static lmca__msg_rc
malformed(lmca__msg *m, const char *why)
{
    m->why = why;
    return LMCA__MSG_MALFORMED;
}

static bool
pull(lmca__msg *m, uint8_t *into, size_t n)
{
    if (!m->pull(m->src, into, n))
        return false;
    m->left -= n;
    return true;
}

static uint64_t
unread(const lmca__msg *m)
{
    return m->left + (m->end - m->pos);
}

/* The next n bytes into `out`, or dropped when out is NULL. Large values
   bypass the stage and land in `out` directly: the zero-copy read. */
static lmca__msg_rc
take(lmca__msg *m, void *out, uint64_t n)
{
    uint8_t *o = out;

    if (n > unread(m))
        return malformed(m, "a length runs past the end of the message");
    for (;;) {
        size_t c = (size_t)(n < m->end - m->pos ? n : m->end - m->pos);
        if (o != NULL && c > 0) {
            memcpy(o, m->stage + m->pos, c);
            o += c;
        }
        m->pos += c;
        n -= c;
        if (n == 0)
            return LMCA__MSG_OK;
        /* the stage is empty here, so n <= m->left */
        if (o != NULL && n >= LMCA__MSG_STAGE)
            return pull(m, o, (size_t)n) ? LMCA__MSG_OK : LMCA__MSG_PULL_FAILED;
        size_t want = (size_t)(m->left < LMCA__MSG_STAGE ? m->left : LMCA__MSG_STAGE);
        if (!pull(m, m->stage, want))
            return LMCA__MSG_PULL_FAILED;
        m->pos = 0;
        m->end = want;
    }
}

/* Reads the proto header and the message header, skips the fields. */
static lmca__msg_rc
open_message(lmca__msg *m, uint16_t *nops)
{
    uint8_t proto[8], hdr[MSG_HEADER], len[4];
    lmca__msg_rc rc;

    m->left = sizeof proto;
    m->pos = m->end = 0;
    if (!pull(m, proto, sizeof proto))
        return LMCA__MSG_PULL_FAILED;
    if (proto[0] != PROTO_VERSION)
        return malformed(m, "not protocol version 2");
    /* We never ask for compression, so any other type is not ours to read. */
    if (proto[1] != PROTO_MESSAGE)
        return malformed(m, "not a message (type 3)");
    m->left = be64(proto) & 0xFFFFFFFFFFFFull;
    if (m->left > PROTO_SIZE_MAX)
        return malformed(m, "a message larger than 128 MiB");
    if ((rc = take(m, hdr, sizeof hdr)) != LMCA__MSG_OK)
        return rc;
    m->result_code = hdr[5];
    m->void_time = be32(hdr + 10);
    *nops = (uint16_t)(hdr[20] << 8 | hdr[21]);
    for (unsigned i = 0, n = hdr[18] << 8 | hdr[19]; i < n; i++)
        if ((rc = take(m, len, 4)) != LMCA__MSG_OK || (rc = take(m, NULL, be32(len))) != LMCA__MSG_OK)
            return rc;
    return LMCA__MSG_OK;
}

lmca__msg_rc
lmca__msg_status(lmca__msg *m)
{
    uint16_t nops;
    lmca__msg_rc rc = open_message(m, &nops);
    return rc != LMCA__MSG_OK ? rc : take(m, NULL, unread(m));
}

/* The payload bin: into r->dst when it is a blob that fits, else dropped. */
static lmca__msg_rc
take_payload(lmca__msg *m, lmca__read *r, uint8_t type, uint32_t size)
{
    if (r->found) { /* a second one must not land on the first's bytes */
        r->repeated = true;
        return size > unread(m) ? malformed(m, "a length runs past the end of the message")
                                : take(m, NULL, size);
    }
    r->found = true;
    r->blob = type == LMCA__P_BLOB;
    r->len = size;
    if (size > unread(m)) /* before any allocation of that size */
        return malformed(m, "a length runs past the end of the message");
    if (r->blob && r->dst == NULL && r->alloc && size > 0) {
        r->nomem = (r->dst = lmca__malloc(size)) == NULL;
        r->cap = r->nomem ? 0 : size;
    }
    return take(m, r->blob && size <= r->cap && size > 0 ? r->dst : NULL, size);
}

static void
deliver(lmca__read *r, const char *name, uint8_t type, const uint8_t *v, uint32_t size)
{
    lmca__bin b = {.name = name, .type = LMCA__OTHER, .p = v, .len = size};

    if ((type == LMCA__P_INTEGER && size == 8) || (type == LMCA__P_BOOL && size == 1)) {
        b.type = LMCA__INT;
        b.i = size == 8 ? (int64_t)be64(v) : v[0];
    } else if (type == LMCA__P_STRING) {
        b.type = LMCA__STR;
    } else if (type == LMCA__P_BLOB) {
        b.type = LMCA__BLOB;
    }
    r->cb(r->udata, &b);
}

/* Any other bin. Its size is within the message (take checked it), and the
   message within 128 MiB. */
static lmca__msg_rc
take_bin(lmca__msg *m, lmca__read *r, const char *name, uint8_t type, uint32_t size)
{
    uint8_t small[256], *v;
    lmca__msg_rc rc;

    if (r->cb == NULL || size > unread(m))
        return take(m, NULL, size);
    v = size < sizeof small ? small : lmca__malloc((size_t)size + 1);
    if (v == NULL) /* not delivered: the schema then finds the bin missing */
        return take(m, NULL, size);
    if ((rc = take(m, v, size)) == LMCA__MSG_OK) {
        v[size] = '\0';
        deliver(r, name, type, v, size);
    }
    if (v != small)
        free(v);
    return rc;
}

lmca__msg_rc
lmca__msg_record(lmca__msg *m, const char *payload, lmca__read *r)
{
    uint16_t nops;
    lmca__msg_rc rc = open_message(m, &nops);

    if (rc != LMCA__MSG_OK || m->result_code != 0)
        return rc != LMCA__MSG_OK ? rc : take(m, NULL, unread(m));
    for (uint16_t i = 0; i < nops; i++) {
        uint8_t op[8]; /* size, op, particle type, version, name length */
        char name[256];
        if ((rc = take(m, op, sizeof op)) != LMCA__MSG_OK || (rc = take(m, name, op[7])) != LMCA__MSG_OK)
            return rc;
        name[op[7]] = '\0';
        uint32_t size = be32(op);
        if (size < 4u + op[7])
            return malformed(m, "a bin shorter than its name");
        size -= 4u + op[7];
        rc = payload != NULL && strcmp(name, payload) == 0 ? take_payload(m, r, op[5], size)
                                                           : take_bin(m, r, name, op[5], size);
        if (rc != LMCA__MSG_OK)
            return rc;
    }
    return unread(m) == 0 ? LMCA__MSG_OK : malformed(m, "bytes after the last bin");
}
