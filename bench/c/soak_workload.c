/*
 * soak_workload.c - what the soak asks of the engine and what it accepts back:
 * the batches it plans, the buffers they use and the payloads they carry, and
 * the check of every GET hit. bench/c/soak.c drives the pool with these.
 *
 * Verification without history. The payload a SET writes for key i at its
 * generation g (a per-key count of submitted SETs) is a function of (i, g, size):
 * a 16-byte header holding the three, then an xorshift stream seeded by them. A
 * GET hit is checked against what its own header claims, so the soak needs no
 * record of what was written; bytes that differ are WRONG BYTES and fail the run.
 * Racing SETs, GETs and DELETEs of one key are allowed on purpose: the engine
 * promises old bytes, new bytes or a miss, never a mix, and the soak checks that.
 *
 * Memory. Buffers come from a fixed arena allocated and touched at start, one
 * free list per size class, so the soak's own memory is flat by construction and
 * bounds the bytes in flight (--inflight-mib); RSS growth is then the engine's,
 * libaerospike's or the allocator's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soak.h"

#define HEADER_BYTES 16      /* key index u32, generation u32, size u64 */
#define POISON_STRIDE 4096   /* a GET buffer is poisoned once per this many bytes */

/* ---------------------------------------------------------------------------
 * Randomness.
 */

uint64_t
splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t
xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static uint64_t
rand_below(soak_t *s, uint64_t n)
{
    return xorshift64(&s->rng) % n;
}

/* ---------------------------------------------------------------------------
 * Payloads: a function of (key index, generation, size), checkable from itself.
 */

static void
put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Never 0: xorshift would stay at 0. */
static uint64_t
payload_seed(uint32_t key, uint32_t gen, uint64_t size)
{
    return splitmix64(((uint64_t)key << 32 | gen) ^ splitmix64(size)) | 1;
}

/* Writes the payload of (key, gen, len). Every non-empty size class holds the
   whole header (the smallest is 1 KiB). */
static void
fill_payload(uint8_t *buf, size_t len, uint32_t key, uint32_t gen)
{
    uint64_t state = payload_seed(key, gen, len), word;
    size_t off = HEADER_BYTES;

    put_le(buf, key, 4);
    put_le(buf + 4, gen, 4);
    put_le(buf + 8, len, 8);
    /* Whole words with a constant-size copy (compiled to one store), then the tail. */
    for (; off + 8 <= len; off += 8) {
        word = xorshift64(&state);
        memcpy(buf + off, &word, 8);
    }
    if (off < len) {
        word = xorshift64(&state);
        memcpy(buf + off, &word, len - off);
    }
}

/* The first offset where `buf` differs from the payload of (key, gen, len), or
   SIZE_MAX when it is exactly that payload. */
static size_t
payload_mismatch(const uint8_t *buf, size_t len, uint32_t key, uint32_t gen)
{
    uint64_t state = payload_seed(key, gen, len), want, got;
    size_t off = HEADER_BYTES;

    for (; off + 8 <= len; off += 8) {
        want = xorshift64(&state);
        memcpy(&got, buf + off, 8);
        if (got != want)
            return off;
    }
    want = xorshift64(&state);
    return off < len && memcmp(buf + off, &want, len - off) != 0 ? off : SIZE_MAX;
}

/* Marks a GET buffer so that a hit which left part of it unwritten cannot pass
   on what an earlier GET left there: an impossible header (key index
   0xFFFFFFFF) and a constant word every POISON_STRIDE bytes. */
static void
poison(uint8_t *buf, size_t len)
{
    static const uint8_t word[8] = {0xDE, 0xAD, 0xBE, 0xEF, 0x50, 0x4B, 0x21, 0x00};
    if (len >= HEADER_BYTES)
        memset(buf, 0xFF, HEADER_BYTES);
    for (size_t off = HEADER_BYTES; off + 8 <= len; off += POISON_STRIDE)
        memcpy(buf + off, word, 8);
}

/* ---------------------------------------------------------------------------
 * Size classes and their buffer arena.
 */

/* Small and 1-4 MiB chunks are the common case; 9 and 17 MiB exercise chunks of
   several segments. The shares follow each class's part of the bytes in flight
   (weight x bytes), so that the classes run out of buffers about equally. */
static const size_class class_table[] = {
    {.bytes = 0, .weight = 1},
    {.bytes = 1u << 10, .weight = 3, .share = 1},
    {.bytes = 100u << 10, .weight = 3, .share = 20},
    {.bytes = 1u << 20, .weight = 4, .share = 100},
    {.bytes = 4u << 20, .weight = 4, .share = 330},
    {.bytes = 9u << 20, .weight = 1, .share = 190},
    {.bytes = 17u << 20, .weight = 1, .share = 359},
};
_Static_assert(sizeof class_table / sizeof class_table[0] == NCLASSES,
               "NCLASSES in soak.h counts class_table's entries");

/* Allocates and touches the class's buffers, so that RSS holds them before
   the warm-up measurement. @return false when out of memory. */
static bool
class_alloc(size_class *c, const opts_t *o)
{
    double budget = o->inflight_mib * MIB * c->share / 1000.0;
    double count = c->bytes ? budget / (double)c->bytes : 0;
    double most = (double)o->inflight * MAX_DATA_KEYS;

    if (c->weight == 0 || c->bytes == 0)
        return true;
    /* At least one batch's worth, so that every planned batch can go once the
       others are done; at most what -q batches could use. */
    c->count = (unsigned)(count < MAX_DATA_KEYS ? MAX_DATA_KEYS : count > most ? most : count);
    c->block = malloc((size_t)c->count * c->bytes);
    c->free = malloc(c->count * sizeof *c->free);
    if (c->block == NULL || c->free == NULL)
        return false;
    /* Not zeros: the compiler may turn malloc and memset(0) into calloc, which
       leaves fresh pages untouched, and they would join RSS on first use. */
    memset(c->block, 0xA5, (size_t)c->count * c->bytes);
    for (unsigned i = 0; i < c->count; i++)
        c->free[i] = c->block + (size_t)i * c->bytes;
    c->nfree = c->count;
    return true;
}

/* Copies the size classes into `s`, dropping those above --max-chunk, and
   allocates their buffers. @return false when out of memory. */
bool
classes_init(soak_t *s)
{
    for (size_t c = 0; c < NCLASSES; c++) {
        s->cls[c] = class_table[c];
        if (s->cls[c].bytes > s->o.max_chunk)
            s->cls[c].weight = 0;
        s->class_weights += s->cls[c].weight;
        if (!class_alloc(&s->cls[c], &s->o))
            return false;
    }
    return true;
}

/* Takes a buffer for every non-empty chunk of the batch, or none at all. */
bool
acquire_buffers(soak_t *s, slot_t *sl)
{
    for (size_t i = 0; i < sl->n; i++) {
        size_class *c = &s->cls[sl->cls[i]];
        if (sl->len[i] == 0)
            continue;
        if (c->nfree == 0) {
            while (i-- > 0)
                if (sl->buf[i] != NULL)
                    s->cls[sl->cls[i]].free[s->cls[sl->cls[i]].nfree++] = sl->buf[i];
            memset(sl->buf, 0, sizeof sl->buf);
            return false;
        }
        sl->buf[i] = c->free[--c->nfree];
    }
    return true;
}

void
release_buffers(soak_t *s, slot_t *sl)
{
    for (size_t i = 0; i < sl->n; i++) {
        if (sl->buf[i] != NULL) {
            size_class *c = &s->cls[sl->cls[i]];
            c->free[c->nfree++] = sl->buf[i];
            sl->buf[i] = NULL;
        }
    }
}

/* ---------------------------------------------------------------------------
 * Keys and planning batches.
 */

void
key_name(const soak_t *s, uint32_t key, char *out, size_t size)
{
    snprintf(out, size, "soak-%08x-%u", s->run, key);
}

static const struct {
    lmca_op op;
    unsigned weight, max_keys;
} op_mix[] = {
    {LMCA_OP_GET, 35, MAX_DATA_KEYS}, {LMCA_OP_SET, 30, MAX_DATA_KEYS},
    {LMCA_OP_EXISTS, 12, MAX_KEYS},   {LMCA_OP_PREFIX, 13, MAX_KEYS},
    {LMCA_OP_DELETE, 10, 2},
};
#define NOPS (sizeof op_mix / sizeof op_mix[0])

static unsigned
pick_op(soak_t *s)
{
    unsigned total = 0, r;
    for (unsigned i = 0; i < NOPS; i++)
        total += op_mix[i].weight;
    r = (unsigned)rand_below(s, total);
    for (unsigned i = 0;; i++) {
        if (r < op_mix[i].weight)
            return i;
        r -= op_mix[i].weight;
    }
}

static uint8_t
pick_class(soak_t *s)
{
    unsigned r = (unsigned)rand_below(s, s->class_weights);
    for (uint8_t c = 0;; c++) {
        if (r < s->cls[c].weight)
            return c;
        r -= s->cls[c].weight;
    }
}

/* Distinct random keys; a PREFIX takes a run of consecutive keys instead, as
   LMCache looks up the chunks of one prompt. */
static void
pick_keys(soak_t *s, slot_t *sl)
{
    uint32_t k = s->o.keyspace, first = (uint32_t)rand_below(s, k);
    for (size_t i = 0; i < sl->n; i++) {
        bool taken;
        if (sl->op == LMCA_OP_PREFIX) {
            sl->key[i] = (uint32_t)((first + i) % k);
            continue;
        }
        do {
            sl->key[i] = (uint32_t)rand_below(s, k);
            taken = false;
            for (size_t j = 0; j < i; j++)
                taken |= sl->key[j] == sl->key[i];
        } while (taken);
    }
}

/* A SET draws its sizes; a GET asks for the size each key was last set with
   (a buffer of another size reads as a miss), or any size if never set. */
static void
pick_sizes(soak_t *s, slot_t *sl)
{
    for (size_t i = 0; i < sl->n; i++) {
        const key_state *ks = &s->keys[sl->key[i]];
        uint8_t c = 0;
        if (sl->op == LMCA_OP_SET || (sl->op == LMCA_OP_GET && ks->gen == 0))
            c = pick_class(s);
        else if (sl->op == LMCA_OP_GET)
            c = ks->cls;
        sl->cls[i] = c;
        sl->len[i] = s->cls[c].bytes;
        sl->buf[i] = NULL;
    }
}

void
plan_batch(soak_t *s, slot_t *sl)
{
    unsigned op = pick_op(s);
    size_t most = op_mix[op].max_keys < s->o.keyspace ? op_mix[op].max_keys : s->o.keyspace;

    sl->op = op_mix[op].op;
    sl->n = 1 + (size_t)rand_below(s, most);
    /* Some GETs in the prefetch band, so that bands interleave. */
    sl->prio = sl->op == LMCA_OP_GET && rand_below(s, 4) == 0 ? LMCA_PRIO_PREFETCH
                                                              : LMCA_PRIO_DEFAULT;
    sl->with_opts = sl->op == LMCA_OP_SET && rand_below(s, 4) == 0;
    pick_keys(s, sl);
    pick_sizes(s, sl);
    sl->state = SLOT_PLANNED;
}

/* ---------------------------------------------------------------------------
 * Payloads in, hits checked.
 */

/* Writes each SET chunk's payload at the key's next generation, and poisons
   each GET buffer. */
void
prepare_buffers(soak_t *s, slot_t *sl)
{
    for (size_t i = 0; i < sl->n; i++) {
        key_state *ks = &s->keys[sl->key[i]];
        if (sl->op == LMCA_OP_SET) {
            ks->gen++;
            ks->cls = sl->cls[i];
            if (sl->len[i] > 0)
                fill_payload(sl->buf[i], sl->len[i], sl->key[i], ks->gen);
        } else if (sl->op == LMCA_OP_GET && sl->len[i] > 0) {
            poison(sl->buf[i], sl->len[i]);
        }
    }
}

static void
report_wrong(soak_t *s, const slot_t *sl, size_t i, size_t offset)
{
    const uint8_t *b = sl->buf[i];
    char name[48];
    if (s->wrong_printed++ >= MAX_WRONG_PRINTED)
        return;
    key_name(s, sl->key[i], name, sizeof name);
    printf("WRONG BYTES: batch %llu key %s (%zu bytes, last generation set %u): header "
           "says key %llu generation %llu size %llu; first bad byte at offset %zu\n",
           (unsigned long long)sl->id, name, sl->len[i], s->keys[sl->key[i]].gen,
           (unsigned long long)get_le(b, 4), (unsigned long long)get_le(b + 4, 4),
           (unsigned long long)get_le(b + 8, 8), offset);
}

/* A GET hit: the buffer must be exactly the payload its header names, for this
   key and size, at a generation already submitted. */
void
check_hit(soak_t *s, const slot_t *sl, size_t i)
{
    const uint8_t *b = sl->buf[i];
    size_t len = sl->len[i], bad = SIZE_MAX;

    if (len > 0) {
        uint64_t key = get_le(b, 4), gen = get_le(b + 4, 4), size = get_le(b + 8, 8);
        if (key != sl->key[i] || size != len || gen == 0 || gen > s->keys[key].gen)
            bad = 0;
        else
            bad = payload_mismatch(b, len, (uint32_t)key, (uint32_t)gen);
    }
    if (bad == SIZE_MAX) {
        s->iv[N_HIT]++;
        return;
    }
    s->iv[N_WRONG]++;
    report_wrong(s, sl, i, bad);
}
