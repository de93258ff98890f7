/*
 * bench_packing.c - how much of a namespace a record layout lets us fill: the
 * measurements behind the write-block grid and the chunk layout (DESIGN.md,
 * "Segment sizes pack into write blocks"). Needs a real server and a namespace
 * nothing else writes to.
 *
 *   bench_packing [-h hosts] [-n ns] [-c count] size ...
 *     writes `count` one-bin records of each size; reports the drop of
 *     data_avail_pct next to the share of the namespace the data is.
 *   bench_packing -m fill [-h hosts] [-n ns] [-t threads] [-r repeats] [--hard]
 *                 [--rate MB/s] [--chunks 256K,4M,3M+12345] [--layouts tail:2,...]
 *     for each chunk size and layout: truncates the set, waits for the space to
 *     come back, writes chunks until the server refuses one, and reports the
 *     payload stored as a fraction of data-size. A layout is simulated by its
 *     records alone (capacity depends on nothing else): blob segments with a
 *     `wid` bin, and a meta record with the engine's small bins (schema.c).
 *
 * nsup checks stop-writes-used-pct and -avail-pct only every 10 s (nsup.c), so
 * which limit refuses a fast fill is luck. A monitor notes where each threshold
 * was first crossed; --hard sets both to 0 (restored at exit), so the fill goes
 * on to a stripe with one free block left; --rate paces the writers so that
 * nsup acts as on a namespace filling for hours. Each repeat uses other keys.
 *
 * Layouts, "name:k" (G_k = floor(block/k/16)*16 - 64 KiB, as limits.c; k = 2
 * when omitted; tail, balanced and meta keep chunks up to G_k in one record):
 *   uniform:k   baseline: records of exactly G_k, one bin, no meta (run once)
 *   tail:k      the planner today: full G_k segments, then a shorter one
 *   balanced:k  ceil(S/G_k) segments of equal size (the spec's rule)
 *   meta:k      full G_k segments, the remainder inside the meta record
 *   fit:p       G_1 segments for what exceeds G_1, the rest in the fewest equal
 *               pieces that fill p% of a block, the last inside the meta record
 *   fitseg:p    the same, every piece a segment, and a small meta record
 *   single      the whole chunk in the meta record (up to max-record-size)
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <aerospike/aerospike.h>
#include <aerospike/aerospike_info.h>
#include <aerospike/aerospike_key.h>

#include "lmca.h"

#define SET "pack"
#define MD_BYTES 56     /* LMCache's RemoteMetadata for one 4-d shape */
#define PIECE_SLACK 1024 /* per piece, for its record overhead and the meta records */
#define MAX_STRIPES 64

static aerospike as;
static as_policy_write wpol;
static const char *ns = "lmcache";
static uint64_t block = LMCA_BLOCK_7_1, cap, data_size;
static long avail_cfg = 5, used_cfg = 70; /* the thresholds found at start */
static bool hard;
static double rate;                                   /* bytes/s in all; 0: no pacing */
static long long base_free[MAX_STRIPES], base_defrag; /* as settle() left them */

/* ---------------------------------------------------------------------------
 * Namespace info.
 */

typedef struct {
    long long used, total, avail_pct, stop_writes, defrag_reads;
    long long stripe_used[MAX_STRIPES], stripe_free[MAX_STRIPES];
    int stripes;
} ns_stats;

static long long
field(const char *s, const char *name)
{
    char key[96];
    const char *p;
    snprintf(key, sizeof key, ";%s=", name);
    if ((p = strstr(s, key)) == NULL)
        return -1;
    p += strlen(key);
    return strncmp(p, "true", 4) == 0 ? 1 : strncmp(p, "false", 5) == 0 ? 0 : atoll(p);
}

static char *
info(const char *req)
{
    char *res = NULL;
    as_error e;
    return aerospike_info_any(&as, &e, NULL, req, &res) == AEROSPIKE_OK ? res : NULL;
}

static long long
ns_stat(const char *name)
{
    char req[80], *s;
    long long v;
    snprintf(req, sizeof req, "namespace/%s", ns);
    v = (s = info(req)) ? field(s, name) : -1;
    free(s);
    return v;
}

static bool
read_stats(ns_stats *st)
{
    char req[80], key[64], *s;
    snprintf(req, sizeof req, "namespace/%s", ns);
    if ((s = info(req)) == NULL)
        return false;
    st->used = field(s, "data_used_bytes");
    st->total = field(s, "data_total_bytes");
    st->avail_pct = field(s, "data_avail_pct");
    st->stop_writes = field(s, "stop_writes");
    st->defrag_reads = 0;
    for (st->stripes = 0; st->stripes < MAX_STRIPES; st->stripes++) {
        int i = st->stripes;
        snprintf(key, sizeof key, "storage-engine.stripe[%d].used_bytes", i);
        if ((st->stripe_used[i] = field(s, key)) < 0)
            break;
        snprintf(key, sizeof key, "storage-engine.stripe[%d].free_wblocks", i);
        st->stripe_free[i] = field(s, key);
        snprintf(key, sizeof key, "storage-engine.stripe[%d].defrag_reads", i);
        st->defrag_reads += field(s, key);
    }
    free(s);
    return true;
}

static void
set_config(const char *name, long value)
{
    char req[160], *res;
    snprintf(req, sizeof req, "set-config:context=namespace;id=%s;%s=%ld", ns, name, value);
    if ((res = info(req)) == NULL || strstr(res, "ok") == NULL)
        fprintf(stderr, "%s: %s\n", req, res ? res : "no answer");
    free(res);
}

/* Truncates the set and waits until every record is gone, no more write blocks
   come back (emptied blocks return through defrag, a little later) and nsup
   has lifted stop-writes (it looks every 10 s). */
static void
settle(void)
{
    as_error e;
    long long prev = -1;
    aerospike_truncate(&as, &e, NULL, ns, SET, 0);
    for (int i = 0, still = 0; i < 240 && still < 4; i++) {
        ns_stats st;
        long long free_blocks = 0;
        usleep(250 * 1000);
        if (!read_stats(&st))
            continue;
        for (int s = 0; s < st.stripes; s++)
            free_blocks += base_free[s] = st.stripe_free[s];
        base_defrag = st.defrag_reads;
        still = st.used == 0 && free_blocks == prev && st.stop_writes == 0 ? still + 1 : 0;
        prev = free_blocks;
    }
}

/* ---------------------------------------------------------------------------
 * Delta mode: the original measurement.
 */

static int
run_delta(int count, char **sizes, int n)
{
    printf("namespace %s, %llu bytes, %d records per size\n", ns, (unsigned long long)data_size,
           count);
    for (int a = 0; a < n; a++) {
        size_t size = strtoull(sizes[a], NULL, 10);
        uint8_t *blob = calloc(1, size);
        long long before, after;
        int failed = 0;
        settle();
        before = ns_stat("data_avail_pct");
        for (int i = 0; i < count; i++) {
            char key[64];
            as_key k;
            as_record rec;
            as_error e;
            snprintf(key, sizeof key, "pack-%zu-%d", size, i);
            as_key_init_str(&k, ns, SET, key);
            as_record_inita(&rec, 1);
            as_record_set_rawp(&rec, "b", blob, (uint32_t)size, false);
            failed += aerospike_key_put(&as, &e, &wpol, &k, &rec) != AEROSPIKE_OK;
        }
        sleep(1);
        after = ns_stat("data_avail_pct");
        printf("  %9zu bytes: data is %5.1f%% of the namespace, free space fell %3lld points "
               "(%lld%% -> %lld%%)%s\n", size, 100.0 * size * count / (double)data_size,
               before - after, before, after, failed ? " (some writes failed)" : "");
        free(blob);
    }
    settle();
    return 0;
}

/* ---------------------------------------------------------------------------
 * Layouts: the records one chunk becomes.
 */

typedef enum { L_UNIFORM, L_TAIL, L_BALANCED, L_META, L_FIT, L_FITSEG, L_SINGLE } kind;
static const char *const kind_names[] = {"uniform", "tail",   "balanced", "meta",
                                         "fit",     "fitseg", "single"};

typedef struct {
    kind kind;
    unsigned k; /* records per block of the grid value; percent (fit) */
} layout;

typedef struct {
    uint32_t nseg, nbig; /* segment records; the first nbig of them are big_b bytes */
    uint64_t big_b;
    uint64_t seg_b, last_b; /* the other segments, and the last one */
    uint64_t meta_b;        /* payload inside the meta record */
    bool bare;              /* uniform: one bin of payload, no meta bins */
} plan;

/* G_k as limits.c defines it: the slot of k records per block, less the margin. */
static uint64_t
grid(unsigned k)
{
    return block / k / 16 * 16 - LMCA_RECORD_MARGIN;
}

/* n pieces of equal size (the last may be shorter); the last one goes inside
   the meta record when `in_meta`, else into a segment of its own. */
static bool
pieces(plan *p, uint64_t s, uint64_t n, bool in_meta)
{
    p->nseg = (uint32_t)(n - in_meta);
    p->seg_b = (s + n - 1) / n;
    p->last_b = in_meta ? p->seg_b : s - (n - 1) * p->seg_b;
    p->meta_b = in_meta ? s - (n - 1) * p->seg_b : 0;
    return p->seg_b + PIECE_SLACK <= cap;
}

/* The fewest equal pieces of which a block holds at least `pct` percent, 0 if
   none: equal records pack a block as floor(block / record) of them, and any
   mix of sizes loses more (a record that does not fit closes the block). */
static uint64_t
fewest_pieces(uint64_t s, unsigned pct)
{
    for (uint64_t n = 1; n <= 4096; n++) {
        uint64_t b = (s + n - 1) / n;
        if (b + PIECE_SLACK <= cap && block / (b + PIECE_SLACK) * b * 100 >= pct * block)
            return n;
    }
    return 0;
}

/* A G_1 segment fills a block alone, and the small records that land between
   two of them leave a block below defrag-lwm-pct (50), which the server then
   compacts. So what exceeds G_1 goes into G_1 segments. */
static bool
fit_plan(plan *p, uint64_t s, unsigned pct, bool in_meta)
{
    uint64_t big = s > grid(1) ? (s - 1) / grid(1) : 0, rest = s - big * grid(1);
    uint64_t n = fewest_pieces(rest, pct);
    if (n <= 1 && big == 0)
        p->meta_b = s;
    else if (!pieces(p, rest, n ? n : 1, in_meta))
        return false;
    p->nbig = (uint32_t)big, p->big_b = big ? grid(1) : 0, p->nseg += p->nbig;
    return true;
}

/* False when the layout cannot hold a chunk of `s` bytes. */
static bool
make_plan(layout l, uint64_t s, plan *p)
{
    uint64_t g = l.kind >= L_FIT ? 0 : grid(l.k);
    *p = (plan){0};
    if (l.kind == L_UNIFORM) {
        p->meta_b = g, p->bare = true;
    } else if (l.kind == L_SINGLE || (g != 0 && s <= g)) {
        p->meta_b = s;
        return s + PIECE_SLACK <= cap;
    } else if (l.kind == L_TAIL) {
        p->nseg = (uint32_t)((s + g - 1) / g);
        p->seg_b = g, p->last_b = s - (p->nseg - 1) * g;
    } else if (l.kind == L_META) {
        p->nseg = (uint32_t)(s / g);
        p->seg_b = p->last_b = g, p->meta_b = s - p->nseg * g;
    } else if (l.kind == L_BALANCED) {
        return pieces(p, s, (s + g - 1) / g, false);
    } else {
        return fit_plan(p, s, l.k, l.kind == L_FIT);
    }
    return true;
}

static uint64_t
seg_bytes(const plan *p, uint32_t i)
{
    return i < p->nbig ? p->big_b : i + 1 == p->nseg ? p->last_b : p->seg_b;
}

static bool
same_plan(const plan *a, const plan *b)
{
    return a->nseg == b->nseg && a->nbig == b->nbig && a->big_b == b->big_b &&
           a->seg_b == b->seg_b && a->last_b == b->last_b && a->meta_b == b->meta_b &&
           a->bare == b->bare;
}

/* ---------------------------------------------------------------------------
 * The fill.
 */

static uint8_t payload[LMCA_BLOCK_7_1]; /* the bytes do not matter: CE does not compress */
static const uint8_t md[MD_BYTES] = {1};

typedef struct {
    plan plan;
    uint64_t chunk_b;
    int run;
    double t0;
    atomic_ullong next, chunks, acked; /* acked: payload bytes in records written */
    atomic_bool stop, done;
    atomic_int refusal; /* the first error's status */
    char why[200];
    double avail_at, used_at; /* payload fractions where thresholds were crossed */
    bool nsup;                /* stop_writes was on when the fill ended */
} fill;

static bool
put(fill *f, const char *key, as_record *rec)
{
    as_key k;
    as_error e;
    as_status rc;
    int none = 0;
    as_key_init_str(&k, ns, SET, key);
    if ((rc = aerospike_key_put(&as, &e, &wpol, &k, rec)) == AEROSPIKE_OK)
        return true;
    if (atomic_compare_exchange_strong(&f->refusal, &none, (int)rc))
        snprintf(f->why, sizeof f->why, "%d %.180s", rc, e.message);
    atomic_store(&f->stop, true);
    return false;
}

static bool
put_meta(fill *f, const char *key, uint64_t wid)
{
    const plan *p = &f->plan;
    as_record rec;
    if (p->bare) {
        as_record_inita(&rec, 1);
        as_record_set_rawp(&rec, "b", payload, (uint32_t)p->meta_b, false);
        return put(f, key, &rec);
    }
    as_record_inita(&rec, 11);
    as_record_set_int64(&rec, "ver", 2);
    as_record_set_str(&rec, "state", "ready");
    as_record_set_int64(&rec, "nseg", p->nseg ? p->nseg : 1);
    as_record_set_int64(&rec, "seg_b", (int64_t)(p->nseg ? p->seg_b : p->meta_b));
    as_record_set_int64(&rec, "tot_b", (int64_t)f->chunk_b);
    as_record_set_int64(&rec, "wid", (int64_t)wid);
    as_record_set_int64(&rec, "created_at", (int64_t)time(NULL));
    as_record_set_int64(&rec, "pin", 0);
    as_record_set_str(&rec, "serde", "naive");
    as_record_set_rawp(&rec, "md", md, sizeof md, false);
    if (p->meta_b)
        as_record_set_rawp(&rec, "b", payload, (uint32_t)p->meta_b, false);
    return put(f, key, &rec);
}

/* Segments first, then the meta record, as the engine commits. */
static bool
put_chunk(fill *f, uint64_t i)
{
    const plan *p = &f->plan;
    char key[96];
    uint64_t wid = i * 0x9E3779B97F4A7C15ull | 1;
    for (uint32_t s = 0; s < p->nseg; s++) {
        as_record rec;
        snprintf(key, sizeof key, "r%d-%llu|s|%u", f->run, (unsigned long long)i, s);
        as_record_inita(&rec, 2);
        as_record_set_rawp(&rec, "b", payload, (uint32_t)seg_bytes(p, s), false);
        as_record_set_int64(&rec, "wid", (int64_t)wid);
        if (!put(f, key, &rec))
            return false;
        atomic_fetch_add(&f->acked, seg_bytes(p, s));
    }
    snprintf(key, sizeof key, "r%d-%llu|m", f->run, (unsigned long long)i);
    if (!put_meta(f, key, wid))
        return false;
    atomic_fetch_add(&f->acked, p->meta_b);
    return true;
}

static double
now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void *
writer(void *arg)
{
    fill *f = arg;
    while (!atomic_load(&f->stop)) {
        if (put_chunk(f, atomic_fetch_add(&f->next, 1)))
            atomic_fetch_add(&f->chunks, 1);
        while (rate > 0 && !atomic_load(&f->stop) &&
               (double)atomic_load(&f->acked) > rate * (now_s() - f->t0))
            usleep(1000);
    }
    return NULL;
}

/* Notes the payload written when each threshold is first crossed, as nsup
   computes them: the emptiest stripe's share of free blocks, and used bytes
   (record sizes: packing waste does not count) against data-size. */
static void *
monitor(void *arg)
{
    fill *f = arg;
    while (!atomic_load(&f->done)) {
        ns_stats st;
        double at = (double)atomic_load(&f->acked) / (double)data_size;
        if (read_stats(&st)) {
            if (f->avail_at < 0 && st.avail_pct >= 0 && st.avail_pct < avail_cfg)
                f->avail_at = at;
            if (f->used_at < 0 && st.total > 0 && st.used * 100 / st.total >= used_cfg)
                f->used_at = at;
            f->nsup = st.stop_writes == 1;
        }
        usleep(5 * 1000);
    }
    return NULL;
}

/* One fill's outcome, or the sum of several. */
typedef struct {
    double chunks, stored, avail, used, pack, skew, defrag, gbps;
    int n, avail_n, used_n; /* fills summed, fills that crossed each threshold */
    bool nsup, odd;         /* stop_writes was on; refused with another status */
} result;

/* Pack: bytes in records over the blocks they took (+1 a stripe for the one
   being filled, so slightly low). Defrag: blocks the server emptied by moving
   their records, over blocks taken; it compacts any block closed below
   defrag-lwm-pct, so only blocks closed between that and full waste space.
   Skew: the busiest stripe's bytes over the mean. It falls as the records per
   stripe grow, so a larger namespace reaches about pack x (1 - avail-pct)
   where this one reaches about pack / skew. */
static void
shape(result *r)
{
    ns_stats st;
    long long used = 0, taken = 0, most = 0;
    if (!read_stats(&st) || st.stripes == 0)
        return;
    for (int s = 0; s < st.stripes; s++) {
        used += st.stripe_used[s];
        taken += (base_free[s] - st.stripe_free[s] + 1) * (long long)block;
        most = st.stripe_used[s] > most ? st.stripe_used[s] : most;
    }
    r->pack = taken ? (double)used / taken : 0;
    r->defrag = taken ? (double)(st.defrag_reads - base_defrag) * block / taken : 0;
    r->skew = used ? most * st.stripes / (double)used : 0;
}

static result
run_fill(const plan *p, uint64_t chunk_b, int threads, int run)
{
    fill *f = calloc(1, sizeof *f);
    pthread_t tid[64], mon;
    result r = {.n = 1};
    *f = (fill){.plan = *p, .chunk_b = chunk_b, .run = run, .avail_at = -1, .used_at = -1};
    settle();
    f->t0 = now_s();
    pthread_create(&mon, NULL, monitor, f);
    for (int t = 0; t < threads; t++)
        pthread_create(&tid[t], NULL, writer, f);
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    r.gbps = (double)atomic_load(&f->acked) / (now_s() - f->t0) / 1e9;
    usleep(20 * 1000); /* one more look at the stats after the last write */
    atomic_store(&f->done, true);
    pthread_join(mon, NULL);
    r.chunks = (double)atomic_load(&f->chunks);
    r.stored = r.chunks * (double)chunk_b / (double)data_size;
    r.avail = f->avail_at, r.avail_n = f->avail_at >= 0;
    r.used = f->used_at, r.used_n = f->used_at >= 0;
    r.nsup = f->nsup;
    if ((r.odd = atomic_load(&f->refusal) != AEROSPIKE_ERR_SERVER_FULL))
        fprintf(stderr, "  refused: %s\n", f->why);
    shape(&r);
    free(f);
    return r;
}

static void
add(result *sum, const result *r)
{
    sum->chunks += r->chunks, sum->stored += r->stored, sum->pack += r->pack;
    sum->skew += r->skew, sum->defrag += r->defrag, sum->gbps += r->gbps, sum->n += r->n;
    sum->avail += r->avail_n ? r->avail : 0, sum->avail_n += r->avail_n;
    sum->used += r->used_n ? r->used : 0, sum->used_n += r->used_n;
    sum->nsup |= r->nsup, sum->odd |= r->odd;
}

static void
print_row(uint64_t chunk_b, const char *name, const plan *p, const result *s)
{
    double n = s->n;
    printf("%-11llu %-12s %4u %7.0f %6.3f", (unsigned long long)chunk_b, name, p->nseg + 1,
           s->chunks / n, s->stored / n);
    if (s->avail_n)
        printf(" %6.3f", s->avail / s->avail_n);
    else
        printf(" %6s", "-");
    if (s->used_n)
        printf(" %6.3f", s->used / s->used_n);
    else
        printf(" %6s", "-");
    printf(" %5.3f %5.3f %6.3f %5.2f  %s%s%s\n", s->pack / n, s->skew / n, s->defrag / n,
           s->gbps / n, s->nsup ? "stop-writes" : "out-of-space",
           s->odd ? " (other errors)" : "", s->n > 1 ? " (mean)" : "");
    fflush(stdout);
}

/* ---------------------------------------------------------------------------
 * The matrix.
 */

static const char *const default_chunks = "256K,1M,4M,16M,32M,3M+12345,10M+777";
static const char *const default_layouts =
    "uniform:1,uniform:2,uniform:4,uniform:8,uniform:16,single,tail:1,tail:2,tail:4,tail:8,"
    "balanced:2,balanced:4,meta:2,meta:4,meta:8,fit:85,fit:90,fitseg:85";

static uint64_t
parse_size(const char *s, char **end)
{
    uint64_t v = strtoull(s, end, 10);
    if (**end == 'K' || **end == 'M')
        v <<= **end == 'K' ? 10 : 20, (*end)++;
    if (**end == '+')
        v += strtoull(*end + 1, end, 10);
    return v;
}

static int
parse_chunks(const char *s, uint64_t *out, int max)
{
    int n = 0;
    for (char *end; *s && n < max; s = *end ? end + 1 : end)
        if ((out[n++] = parse_size(s, &end)) == 0 || (*end && *end != ','))
            return -1;
    return n;
}

static int
parse_layouts(const char *s, layout *out, int max)
{
    int n = 0;
    for (char *end; *s && n < max; s = *end ? end + 1 : end, n++) {
        size_t len = strcspn(s, ",:");
        int kd = (int)(sizeof kind_names / sizeof *kind_names) - 1;
        while (kd >= 0 && (strlen(kind_names[kd]) != len || strncmp(s, kind_names[kd], len)))
            kd--;
        end = (char *)s + len;
        out[n] = (layout){(kind)kd, 2};
        if (*end == ':')
            out[n].k = (unsigned)strtoul(end + 1, &end, 10);
        if (kd < 0 || out[n].k == 0 || (*end && *end != ','))
            return -1;
    }
    return n;
}

static void
layout_name(layout l, char *buf, size_t n)
{
    snprintf(buf, n, l.kind == L_SINGLE ? "%s" : "%s:%u", kind_names[l.kind], l.k);
}

/* The stored size of a meta record without payload, from data_used_bytes. */
static void
probe_meta(void)
{
    fill f = {.run = -1};
    long long before;
    settle();
    before = ns_stat("data_used_bytes");
    for (int i = 0; i < 4000; i++) {
        char key[32];
        snprintf(key, sizeof key, "probe-%d|m", i);
        put_meta(&f, key, 1);
    }
    printf("meta record without payload: %.1f bytes stored (10 bins, %d-byte md)\n",
           (double)(ns_stat("data_used_bytes") - before) / 4000, MD_BYTES);
}

/* Fills `repeats` times with layout i (skipped when an earlier one in the list
   makes the same records); uniform layouts ignore the chunk size. */
static void
run_layout(const layout *ls, int i, uint64_t chunk_b, int threads, int repeats, int *run)
{
    char name[32], other[32];
    plan p, q;
    result sum = {0};
    int j = 0;
    bool uni = ls[i].kind == L_UNIFORM;
    if (!make_plan(ls[i], chunk_b, &p))
        return;
    chunk_b = uni ? p.meta_b : chunk_b;
    while (j < i && !((ls[j].kind == L_UNIFORM) == uni && make_plan(ls[j], chunk_b, &q) &&
                      same_plan(&p, &q)))
        j++;
    layout_name(ls[i], name, sizeof name);
    if (j < i) {
        layout_name(ls[j], other, sizeof other);
        printf("%-11llu %-12s %4u   = %s\n", (unsigned long long)chunk_b, name, p.nseg + 1,
               other);
        return;
    }
    for (int r = 0; r < repeats; r++) {
        result one = run_fill(&p, chunk_b, threads, (*run)++);
        if (repeats > 1)
            print_row(chunk_b, name, &p, &one);
        add(&sum, &one);
    }
    print_row(chunk_b, name, &p, &sum);
}

static int
run_matrix(const char *chunk_list, const char *layout_list, int threads, int repeats)
{
    uint64_t chunks[32];
    layout ls[64];
    int nc = parse_chunks(chunk_list, chunks, 32), nl = parse_layouts(layout_list, ls, 64);
    int run = 0;
    if (nc <= 0 || nl <= 0) {
        fprintf(stderr, "bad --chunks or --layouts\n");
        return 2;
    }
    printf("namespace %s: data-size %llu, block %llu, max-record-size %llu, stop-writes "
           "avail<%ld%% used>=%ld%%%s, %d threads%s\n", ns, (unsigned long long)data_size,
           (unsigned long long)block, (unsigned long long)cap, avail_cfg, used_cfg,
           hard ? " (off: --hard)" : "", threads, rate > 0 ? ", paced" : "");
    probe_meta();
    printf("fractions of data-size: stored = whole chunks when refused; avail/used = payload "
           "written when the threshold was first crossed\n");
    printf("%-11s %-12s %4s %7s %6s %6s %6s %5s %5s %6s %5s  %s\n", "chunk", "layout", "recs",
           "chunks", "stored", "avail", "used", "pack", "skew", "defrag", "GB/s", "refused by");
    for (int i = 0; i < nl; i++)
        if (ls[i].kind == L_UNIFORM)
            run_layout(ls, i, 0, threads, repeats, &run);
    for (int c = 0; c < nc; c++)
        for (int i = 0; i < nl; i++)
            if (ls[i].kind != L_UNIFORM)
                run_layout(ls, i, chunks[c], threads, repeats, &run);
    settle();
    return 0;
}

static void
read_limits(void)
{
    data_size = (uint64_t)ns_stat("storage-engine.data-size");
    cap = (uint64_t)ns_stat("max-record-size");
    if (ns_stat("storage-engine.write-block-size") > 0) /* before 7.1 */
        block = (uint64_t)ns_stat("storage-engine.write-block-size");
    avail_cfg = (long)ns_stat("storage-engine.stop-writes-avail-pct");
    used_cfg = (long)ns_stat("storage-engine.stop-writes-used-pct");
}

int
main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"chunks", required_argument, NULL, 'C'}, {"layouts", required_argument, NULL, 'L'},
        {"hard", no_argument, NULL, 'H'},         {"rate", required_argument, NULL, 'R'},
        {NULL, 0, NULL, 0}};
    const char *hosts = getenv("AEROSPIKE_TEST_HOSTS"), *mode = "delta";
    const char *chunk_list = default_chunks, *layout_list = default_layouts;
    int count = 100, threads = 4, repeats = 1, c, rc;
    as_config cfg;
    as_error e;

    while ((c = getopt_long(argc, argv, "h:n:c:m:t:r:", longs, NULL)) != -1) {
        if (c == 'h') hosts = optarg;
        else if (c == 'n') ns = optarg;
        else if (c == 'c') count = atoi(optarg);
        else if (c == 'm') mode = optarg;
        else if (c == 't') threads = atoi(optarg);
        else if (c == 'r') repeats = atoi(optarg);
        else if (c == 'C') chunk_list = optarg;
        else if (c == 'L') layout_list = optarg;
        else if (c == 'H') hard = true;
        else if (c == 'R') rate = atof(optarg) * 1e6;
        else return 2;
    }
    bool fill_mode = strcmp(mode, "fill") == 0;
    if (hosts == NULL || (!fill_mode && (strcmp(mode, "delta") || optind == argc)) ||
        threads < 1 || threads > 64 || repeats < 1) {
        fprintf(stderr, "usage: %s [-h hosts] [-n ns] [-c count] size...\n"
                        "       %s -m fill [-h hosts] [-n ns] [-t threads] [-r repeats] "
                        "[--hard] [--rate MB/s] [--chunks SIZES] [--layouts NAMES]\n",
                argv[0], argv[0]);
        return 2;
    }
    as_config_init(&cfg);
    as_config_add_hosts(&cfg, hosts, 3000);
    aerospike_init(&as, &cfg);
    if (aerospike_connect(&as, &e) != AEROSPIKE_OK) {
        fprintf(stderr, "connect: %s\n", e.message);
        return 1;
    }
    as_policy_write_init(&wpol);
    wpol.base.total_timeout = wpol.base.socket_timeout = 30000;
    wpol.base.max_retries = 0; /* a retried put could land twice */
    read_limits();
    if (!fill_mode) {
        rc = run_delta(count, argv + optind, argc - optind);
    } else {
        if (hard)
            set_config("stop-writes-avail-pct", 0), set_config("stop-writes-used-pct", 0);
        rc = run_matrix(chunk_list, layout_list, threads, repeats);
        if (hard)
            set_config("stop-writes-avail-pct", avail_cfg),
                set_config("stop-writes-used-pct", used_cfg);
    }
    aerospike_close(&as, &e);
    aerospike_destroy(&as);
    return rc;
}
