/*
 * schema.c - the meta + segment record layout (spec 4.3.1 to 4.3.3), and the
 * decoders that judge what a read brings back (see schema.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zlib.h>

#include "schema.h"

uint32_t
lmca__crc32_more(uint32_t crc, const void *p, size_t n)
{
    return (uint32_t)crc32_z(crc, p, n);
}

uint32_t
lmca__crc32(const void *p, size_t n)
{
    return lmca__crc32_more((uint32_t)crc32_z(0, NULL, 0), p, n);
}

uint32_t
lmca_crc32(const void *buf, size_t len)
{
    return lmca__crc32(buf, len);
}

/* ---------------------------------------------------------------------------
 * Keys.
 */

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

uint64_t
lmca_segment_len(const lmca_meta_t *m, uint32_t index)
{
    if (index >= m->nseg)
        return 0;
    return index + 1 < m->nseg ? m->seg_b : m->tot_b - (uint64_t)(m->nseg - 1) * m->seg_b;
}

void
lmca_meta_clear(lmca_meta_t *m)
{
    if (m == NULL)
        return;
    free(m->md);
    m->md = NULL;
}

/* ---------------------------------------------------------------------------
 * Meta records.
 */

enum { B_VER, B_STATE, B_NSEG, B_SEG_B, B_TOT_B, B_WID, B_CREATED, B_PIN,
       B_CRC32, B_SERDE, B_TTL_CLASS, B_MD, B_COUNT };

/* Every small bin, with the type and range a valid record holds. Ranges are the
   engine's own bounds: no record exceeds 8 MiB, no chunk 65535 segments. */
typedef enum { OPTIONAL, REQUIRED, CORE } need; /* CORE: required, and read for presence */

static const struct field {
    const char *name;
    lmca__type type;
    int64_t min, max; /* INT: the value; STR and BLOB: the length */
    need need;
} fields[B_COUNT] = {
    [B_VER] = {"ver", LMCA__INT, 1, 255, CORE},
    [B_STATE] = {"state", LMCA__STR, 1, LMCA__STATE_MAX, CORE},
    [B_NSEG] = {"nseg", LMCA__INT, 1, LMCA_MAX_SEGMENTS, CORE},
    [B_SEG_B] = {"seg_b", LMCA__INT, 0, LMCA_BLOCK_7_1, CORE},
    [B_TOT_B] = {"tot_b", LMCA__INT, 0, (int64_t)LMCA_MAX_SEGMENTS * LMCA_BLOCK_7_1, CORE},
    [B_WID] = {"wid", LMCA__INT, INT64_MIN, INT64_MAX, CORE},
    [B_CREATED] = {"created_at", LMCA__INT, INT64_MIN, INT64_MAX, REQUIRED},
    [B_PIN] = {"pin", LMCA__INT, 0, 1, REQUIRED},
    [B_CRC32] = {"crc32", LMCA__INT, 0, UINT32_MAX, OPTIONAL},
    [B_SERDE] = {"serde", LMCA__STR, 0, LMCA_TAG_MAX, OPTIONAL},
    [B_TTL_CLASS] = {"ttl_class", LMCA__STR, 0, LMCA_TAG_MAX, OPTIONAL},
    [B_MD] = {"md", LMCA__BLOB, 1, LMCA_MD_MAX, OPTIONAL},
};

const char *const lmca__small_names[] = {"ver", "state", "nseg", "seg_b", "tot_b", "wid",
                                         "created_at", "pin", "crc32", "serde", "ttl_class",
                                         "md", NULL};

const char *const lmca__presence_names[] = {"ver", "state", "nseg", "seg_b", "tot_b", "wid",
                                            NULL};

static const char *const type_names[] = {"?", "integer", "string", "blob", "other type"};

/* Records the first problem only: it names the record in the log. */
#define LMCA__WHY(r, ...)                                   \
    do {                                                   \
        if ((r)->why[0] == '\0')                           \
            snprintf((r)->why, sizeof (r)->why, __VA_ARGS__); \
    } while (0)

static int
field_of(const char *name)
{
    for (int i = 0; i < B_COUNT; i++)
        if (strcmp(fields[i].name, name) == 0)
            return i;
    return -1;
}

void
lmca__meta_begin(lmca__meta_reader *r, lmca_meta_t *m, unsigned flags)
{
    memset(m, 0, sizeof *m);
    *r = (lmca__meta_reader){.m = m, .flags = flags};
}

/* Checks a bin against its field; true when its value may be used. */
static bool
bin_fits(char *why, size_t cap, const struct field *f, const lmca__bin *b)
{
    int64_t v = f->type == LMCA__INT ? b->i : (int64_t)(b->len > INT64_MAX ? INT64_MAX : b->len);
    if (why[0] != '\0')
        return false;
    if (b->type != f->type) {
        snprintf(why, cap, "bin %s is of type %s, not %s", f->name,
                 type_names[b->type <= LMCA__OTHER ? b->type : 0], type_names[f->type]);
        return false;
    }
    if (v < f->min || v > f->max) {
        snprintf(why, cap, "bin %s%s=%lld is outside %lld..%lld", f->name,
                 f->type == LMCA__INT ? "" : " length", (long long)v, (long long)f->min,
                 (long long)f->max);
        return false;
    }
    return true;
}

static void
copy_tag(char *dst, const lmca__bin *b)
{
    memcpy(dst, b->p, b->len); /* b->len <= LMCA_TAG_MAX, checked by bin_fits */
    dst[b->len] = '\0';
}

static void
take_md(lmca__meta_reader *r, const lmca__bin *b)
{
    r->m->md_len = b->len;
    if (!(r->flags & LMCA__WANT_MD))
        return;
    if ((r->m->md = lmca__malloc(b->len)) == NULL)
        r->nomem = true;
    else
        memcpy(r->m->md, b->p, b->len);
}

static bool
known_state(const lmca__bin *b, bool *ready)
{
    static const char *const states[] = {"ready", "partial", "tombstone"};
    for (int i = 0; i < 3; i++) {
        if (b->len == strlen(states[i]) && memcmp(b->p, states[i], b->len) == 0) {
            *ready = i == 0;
            return true;
        }
    }
    return false;
}

void
lmca__meta_bin(void *udata, const lmca__bin *b)
{
    lmca__meta_reader *r = udata;
    lmca_meta_t *m = r->m;
    int f = field_of(b->name);

    if (f < 0) {
        LMCA__WHY(r, "unknown bin \"%.15s\"", b->name);
        return;
    }
    if (r->seen & (1u << f)) {
        LMCA__WHY(r, "bin %s appears twice", b->name);
        return;
    }
    r->seen |= 1u << f;
    if (!bin_fits(r->why, sizeof r->why, &fields[f], b))
        return;
    switch (f) {
    case B_VER: m->ver = (uint32_t)b->i; break;
    case B_STATE:
        if (!known_state(b, &r->ready))
            LMCA__WHY(r, "bin state is \"%.*s\", not ready, partial or tombstone",
                      (int)b->len, (const char *)b->p);
        break;
    case B_NSEG: m->nseg = (uint32_t)b->i; break;
    case B_SEG_B: m->seg_b = (uint64_t)b->i; break;
    case B_TOT_B: m->tot_b = (uint64_t)b->i; break;
    case B_WID: m->wid = (uint64_t)b->i; break;
    case B_CREATED: m->created_at = b->i; break;
    case B_PIN: m->pin = b->i != 0; break;
    case B_CRC32: m->crc32 = (uint32_t)b->i, m->has_crc32 = true; break;
    case B_SERDE: copy_tag(m->serde, b); break;
    case B_TTL_CLASS: copy_tag(m->ttl_class, b); break;
    case B_MD: take_md(r, b); break;
    }
}

/* Sizes against each other and against the payload bin that came back. */
static void
check_sizes(lmca__meta_reader *r, const lmca__read *payload)
{
    const lmca_meta_t *m = r->m;

    if (m->wid == 0)
        LMCA__WHY(r, "bin wid is 0, which no write draws");
    if (m->nseg == 1) {
        if (m->seg_b != m->tot_b)
            LMCA__WHY(r, "one record but seg_b=%llu differs from tot_b=%llu",
                      (unsigned long long)m->seg_b, (unsigned long long)m->tot_b);
        else if (payload && !payload->found)
            LMCA__WHY(r, "one record but no payload bin b");
        else if (payload && payload->repeated)
            LMCA__WHY(r, "payload bin b appears twice");
        else if (payload && !payload->blob)
            LMCA__WHY(r, "payload bin b is not a blob");
        else if (payload && payload->len != m->tot_b)
            LMCA__WHY(r, "payload bin b holds %zu bytes, tot_b says %llu", payload->len,
                      (unsigned long long)m->tot_b);
        return;
    }
    /* nseg >= 2 and seg_b <= 8 MiB: no product below overflows. */
    if (m->seg_b == 0 || m->tot_b <= (uint64_t)(m->nseg - 1) * m->seg_b ||
        m->tot_b > (uint64_t)m->nseg * m->seg_b)
        LMCA__WHY(r, "nseg=%u segments of seg_b=%llu cannot hold tot_b=%llu", m->nseg,
                  (unsigned long long)m->seg_b, (unsigned long long)m->tot_b);
    else if (payload && payload->found)
        LMCA__WHY(r, "a payload bin b next to %u segments", m->nseg);
}

int
lmca__meta_verdict(lmca__meta_reader *r, const lmca__read *payload)
{
    int rc = LMCA_MISS;

    need needed = r->flags & LMCA__PRESENCE ? CORE : REQUIRED;
    for (int f = 0; f < B_COUNT && r->why[0] == '\0'; f++)
        if (fields[f].need >= needed && !(r->seen & (1u << f)))
            LMCA__WHY(r, "bin %s is missing", fields[f].name);
    if (r->why[0] == '\0' && r->m->ver != LMCA_SCHEMA_VERSION)
        LMCA__WHY(r, "schema version %u, this engine reads %d", r->m->ver, LMCA_SCHEMA_VERSION);
    if (r->why[0] == '\0' && r->ready)
        check_sizes(r, payload);
    if (r->nomem)
        rc = LMCA_ENOMEM;
    else if (r->why[0] == '\0' && r->ready)
        rc = LMCA_OK;
    if (rc != LMCA_OK)
        lmca_meta_clear(r->m);
    return rc;
}

/* A record read as a miss because it is not what the engine writes: counted,
   and told to the log (never to stderr). */
static void
corrupt(lmca_t *h, const char *reckey, const char *why)
{
    char digest[41];
    LMCA__COUNT(h, corrupt);
    lmca__log(&h->cfg, LMCA_LOG_WARNING, "record %s is corrupt (%s); read as a miss",
              lmca__wire_digest_hex(h->wire, reckey, digest), why);
}

int
lmca__meta_result(lmca_t *h, const char *mkey, lmca__meta_reader *r, const lmca__read *rd,
                  bool with_payload)
{
    int rc = rd->result;
    if (rc != LMCA_OK) {
        lmca_meta_clear(r->m);
        return rc;
    }
    rc = lmca__meta_verdict(r, with_payload ? rd : NULL);
    if (rc == LMCA_MISS && r->why[0] != '\0')
        corrupt(h, mkey, r->why);
    r->m->ttl = rd->ttl;
    return rc;
}

unsigned
lmca__meta_bins(lmca__bin *bins, const lmca_meta_t *m, const void *payload,
                const lmca_put_opts_t *opts)
{
    static const lmca_put_opts_t none = {0};
    const lmca_put_opts_t *o = opts ? opts : &none;
    unsigned n = 0;

#define INT_BIN(f, v) bins[n++] = (lmca__bin){.name = fields[f].name, .type = LMCA__INT, .i = (int64_t)(v)}
#define STR_BIN(f, s) \
    bins[n++] = (lmca__bin){.name = fields[f].name, .type = LMCA__STR, .p = s, .len = strlen(s)}
    INT_BIN(B_VER, LMCA_SCHEMA_VERSION);
    STR_BIN(B_STATE, "ready");
    INT_BIN(B_NSEG, m->nseg);
    INT_BIN(B_SEG_B, m->seg_b);
    INT_BIN(B_TOT_B, m->tot_b);
    INT_BIN(B_WID, m->wid);
    INT_BIN(B_CREATED, time(NULL));
    INT_BIN(B_PIN, o->pin);
    if (m->has_crc32)
        INT_BIN(B_CRC32, m->crc32);
    if (o->serde)
        STR_BIN(B_SERDE, o->serde);
    if (o->ttl_class)
        STR_BIN(B_TTL_CLASS, o->ttl_class);
#undef INT_BIN
#undef STR_BIN
    if (o->md_len > 0)
        bins[n++] = (lmca__bin){.name = "md", .type = LMCA__BLOB, .p = o->md, .len = o->md_len};
    if (m->nseg == 1)
        bins[n++] = (lmca__bin){.name = "b", .type = LMCA__BLOB, .p = payload, .len = m->tot_b};
    return n;
}

int
lmca__check_opts(const char *key, const lmca_put_opts_t *o, lmca_err_t *err)
{
    if (o == NULL)
        return LMCA_OK;
    if (o->md_len > LMCA_MD_MAX || (o->md == NULL && o->md_len > 0))
        return lmca__fail(err, LMCA_EINVAL, 0, "put \"%s\": md of %zu bytes (at most %d)", key,
                          o->md_len, LMCA_MD_MAX);
    if ((o->serde && strlen(o->serde) > LMCA_TAG_MAX) ||
        (o->ttl_class && strlen(o->ttl_class) > LMCA_TAG_MAX))
        return lmca__fail(err, LMCA_EINVAL, 0, "put \"%s\": serde or ttl_class over %d bytes",
                          key, LMCA_TAG_MAX);
    return LMCA_OK;
}

/* ---------------------------------------------------------------------------
 * Segment records.
 */

enum { S_WID, S_CRC32, S_COUNT };

void
lmca__segment_bin(void *udata, const lmca__bin *b)
{
    lmca__seg_reader *r = udata;
    int f = strcmp(b->name, "wid") == 0 ? S_WID : strcmp(b->name, "crc32") == 0 ? S_CRC32 : -1;

    if (f < 0) {
        LMCA__WHY(r, "unknown bin \"%.15s\" in a segment", b->name);
        return;
    }
    if (r->seen & (1u << f)) {
        LMCA__WHY(r, "bin %s appears twice", b->name);
        return;
    }
    r->seen |= 1u << f;
    if (!bin_fits(r->why, sizeof r->why, &fields[f == S_WID ? B_WID : B_CRC32], b))
        return;
    if (f == S_WID)
        r->wid = (uint64_t)b->i;
    else
        r->crc32 = (uint32_t)b->i;
}

static int
torn(lmca_t *h, const char *skey, const char *why)
{
    char digest[41];
    LMCA__COUNT(h, torn);
    lmca__log(&h->cfg, LMCA_LOG_DEBUG, "segment %s %s; the chunk reads as a miss",
              lmca__wire_digest_hex(h->wire, skey, digest), why);
    return LMCA_MISS;
}

int
lmca__segment_judge(const lmca_meta_t *meta, uint32_t index, const lmca__seg_reader *r,
                    const lmca__read *rd, char *why, size_t cap, bool *crc_failed)
{
    uint64_t want = lmca_segment_len(meta, index);

    *crc_failed = false;
    if (rd->result == LMCA_MISS)
        return LMCA_SEG_MISSING;
    if (rd->result != LMCA_OK)
        return rd->result;
    /* The write id first: a segment of another write is an overwrite in progress
       or a race, not damage, whatever its size. */
    if ((r->seen & (1u << S_WID)) && r->why[0] == '\0' && r->wid != meta->wid)
        return LMCA_SEG_OTHER_WRITE;
    if (r->why[0] != '\0')
        snprintf(why, cap, "%s", r->why);
    else if (!(r->seen & (1u << S_WID)))
        snprintf(why, cap, "bin wid is missing");
    else if (!rd->found || !rd->blob)
        snprintf(why, cap, "payload bin b is %s", rd->found ? "not a blob" : "missing");
    else if (rd->repeated)
        snprintf(why, cap, "payload bin b appears twice");
    else if (rd->len != want)
        snprintf(why, cap, "holds %zu bytes, the meta record says %llu", rd->len,
                 (unsigned long long)want);
    else if ((r->seen & (1u << S_CRC32)) && lmca__crc32(rd->dst, rd->len) != r->crc32)
        snprintf(why, cap, "fails its CRC"), *crc_failed = true;
    else
        return LMCA_SEG_OK;
    return LMCA_SEG_CORRUPT;
}

int
lmca__segment_result(lmca_t *h, const char *skey, const lmca_meta_t *meta, uint32_t index,
                     const lmca__seg_reader *r, const lmca__read *rd)
{
    char why[160];
    bool crc_failed;

    switch (lmca__segment_judge(meta, index, r, rd, why, sizeof why, &crc_failed)) {
    case LMCA_SEG_OK:
        return LMCA_OK;
    case LMCA_SEG_MISSING:
        return torn(h, skey, "is missing");
    case LMCA_SEG_OTHER_WRITE:
        return torn(h, skey, "belongs to another write");
    case LMCA_SEG_CORRUPT:
        if (crc_failed)
            LMCA__COUNT(h, crc_mismatch);
        corrupt(h, skey, why);
        return LMCA_MISS;
    default:
        return rd->result;
    }
}

unsigned
lmca__segment_bins(lmca__bin *bins, const lmca_meta_t *m, const void *src, size_t len, bool crc)
{
    unsigned n = 0;
    bins[n++] = (lmca__bin){.name = "b", .type = LMCA__BLOB, .p = src, .len = len};
    bins[n++] = (lmca__bin){.name = "wid", .type = LMCA__INT, .i = (int64_t)m->wid};
    if (crc)
        bins[n++] = (lmca__bin){.name = "crc32", .type = LMCA__INT, .i = lmca__crc32(src, len)};
    return n;
}

/* ---------------------------------------------------------------------------
 * Write ids and batches.
 */

/* splitmix64: consecutive counters give unrelated ids, so ids of two handles
   (different random seeds) do not collide in practice. */
uint64_t
lmca__new_wid(lmca_t *h)
{
    uint64_t z;
    do {
        z = h->wid_seed + 0x9E3779B97F4A7C15ull *
                              (atomic_fetch_add_explicit(&h->wid_next, 1, memory_order_relaxed) + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
    } while (z == 0);
    return z;
}

/* Records no larger than the batch threshold go in batch calls; larger ones one
   by one (DESIGN.md: batch reads of MiB records are slower than gets). */
uint32_t
lmca__batch_rows(const lmca_t *h, uint64_t bytes)
{
    uint64_t rows;
    if (bytes > h->limits.batch_threshold_bytes)
        return 1;
    rows = bytes ? LMCA__BATCH_BYTES_MAX / bytes : 4096;
    return rows == 0 ? 1 : rows > 4096 ? 4096 : (uint32_t)rows;
}
