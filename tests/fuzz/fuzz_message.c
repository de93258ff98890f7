/*
 * fuzz_message.c - libFuzzer harness for the fast path's response reader
 * (message.c): lmca__msg_status and lmca__msg_record over bytes that a server,
 * or anything posing as one, could send.
 *
 * The harness plays the socket: the reader pulls from the input, and a pull
 * past its end fails as a closed connection would. The destination is
 * allocated at exactly its capacity, so a write past it is an ASan report. It
 * aborts when a result breaks a promise of message.h: a message accepted that
 * was not read to its end, a payload reported copied that did not fit, a
 * string bin not NUL-terminated, a bin with bytes but no pointer.
 *
 * Input format (tests/fuzz/make_corpus.py writes seeds in it):
 *   byte 0  bit0 a record (else a status message); bit1 r->alloc with no
 *           destination; bit2 the payload bin is "b" (else none);
 *           bits3-5 the destination's capacity, CAPS[(byte >> 3) & 7]
 *   then    the bytes of the socket
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "message.h"

static const size_t CAPS[8] = {0, 1, 16, 100, 8191, 8192, 8193, 65536};

typedef struct {
    const uint8_t *p;
    size_t n;
} input;

static bool
pull_input(void *src, uint8_t *into, size_t n)
{
    input *in = src;
    if (n > in->n)
        return false;
    memcpy(into, in->p, n);
    in->p += n;
    in->n -= n;
    return true;
}

static void
broken(const char *what)
{
    fprintf(stderr, "fuzz_message: invariant broken: %s\n", what);
    abort();
}

static volatile uint8_t touched;

static void
check_bin(void *udata, const lmca__bin *b)
{
    (void)udata;
    if (b->name == NULL || (b->len > 0 && b->p == NULL))
        broken("a bin with bytes but no pointer");
    if (b->type == LMCA__STR && ((const char *)b->p)[b->len] != '\0')
        broken("a string bin not NUL-terminated");
    /* touch every byte: ASan checks the range */
    uint8_t sum = 0;
    for (size_t i = 0; i < b->len; i++)
        sum ^= ((const uint8_t *)b->p)[i];
    touched ^= sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static lmca__msg m; /* 8 KiB stage: static, as it would sit in fast.c's command */
    uint8_t mode = size > 0 ? data[0] : 0;
    input in = {size > 0 ? data + 1 : data, size > 0 ? size - 1 : 0};
    size_t cap = CAPS[(mode >> 3) & 7];
    bool alloc = mode & 2;
    uint8_t *dst = alloc ? NULL : malloc(cap ? cap : 1);
    lmca__read r = {.dst = dst, .cap = alloc ? 0 : cap, .alloc = alloc, .cb = check_bin};
    lmca__msg_rc rc;

    memset(&m, 0, offsetof(lmca__msg, stage));
    m.pull = pull_input;
    m.src = &in;
    rc = mode & 1 ? lmca__msg_record(&m, mode & 4 ? "b" : NULL, &r) : lmca__msg_status(&m);
    if (rc == LMCA__MSG_OK && (m.left != 0 || m.pos != m.end))
        broken("a message accepted before its end");
    if (rc == LMCA__MSG_MALFORMED && m.why == NULL)
        broken("malformed without a reason");
    if (r.found && !r.blob && r.dst != dst)
        broken("a destination allocated for a bin that is not a blob");
    if (r.dst != dst) { /* allocated by the reader: exactly the payload's size */
        if (r.cap != r.len)
            broken("an allocated destination of another size than the payload");
        free(r.dst);
    }
    free(dst);
    return 0;
}
