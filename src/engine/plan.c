/*
 * plan.c - the eviction plan: how many records a second of void time may get
 * (per_second) and how far the stores' clock may lead now + TTL (the lead), from
 * what every node of the cluster says of the namespace, looked at again while
 * the handle writes (DESIGN.md, "A cache that stays full").
 *
 * A cluster. Each node runs NSUP over its own records, masters and replicas
 * alike, with a target of its own, and a second of void time holds on a node
 * about replication-factor / nodes of the second's records (partitions spread
 * evenly). So a second may get, for the cluster, what the tightest node allows
 * times nodes / replication factor: a bigger cluster stores faster. One node's
 * look paced a three-node cluster at a single node's rate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

/* The clock gives a second of void time half of NSUP's per-cycle target. A cycle
   takes about two seconds (find, then evict a second later), so a writer held to
   the pace NSUP evicts writes half a target a second: the clock then keeps pace
   with time instead of running ahead. A clock that ran ahead for good (a quarter
   of the target, measured) made every newer store due after every read-touched
   one, since a read-touch restarts a record's own TTL on the server's clock: the
   hot chunks were evicted first (tests/ext/test_cache_full.py). */
#define TARGET_SHARE 2
/* How far the clock may run ahead of now + TTL: a little more than the burst a
   writer may land after an NSUP cycle frees room (a target, two seconds at
   `per_second`). A put whose void time is further ahead waits (lmca_put_pace):
   a clock that ran ahead unbounded broke read-touch as above, and one that piled
   the overflow into its farthest second made a second NSUP refused, for good,
   when a namespace filled from empty faster than the plan allowed. */
#define LEAD_SECONDS 3
/* A memory namespace is 8 stripes of write blocks; blocks in use are about
   three quarters full, and a stripe needs 4 free besides (probe.py's rule,
   DESIGN.md "Every size"). */
#define MEMORY_STRIPES 8
#define SPARE_BLOCKS 4
#define MEMORY_FILL_PCT 75
/* A device keeps 8 free blocks for defrag (DRV_DEFRAG_RESERVE,
   as/include/storage/drv_common.h) and gives none of the blocks in its
   post-write cache back, however much of them was freed, until they leave it
   (drv_ssd.c: ssd_post_write, ssd_block_free): on a 512 MiB file the default
   256 MiB holds half the device (DESIGN.md, "Every size"). */
#define DEVICE_RESERVE_BLOCKS 8
/* How full a device's blocks in use count as, in percent: fitted to a 512 MiB
   file (64 blocks), whose stores were refused from 56-66 % used with 16 blocks
   held and from 49-62 % with 40, at evict-used-pct 50, and not at 40 with 16
   held; memory's 75 would have called 50 safe there (DESIGN.md, "Every size"). */
#define DEVICE_FILL_PCT 60
/* How often a writing handle looks at the namespace again; every second while
   the namespace is nearly empty, whose mean record is a guess, or past
   evict-used-pct, where a stalled NSUP must be seen soon (mend.c). */
#define WATCH_MS 10000
#define WATCH_EARLY_MS 1000
#define FEW_OBJECTS 64
/* ---------------------------------------------------------------------------
 * The eviction plan (pure).
 */

/* The namespace's capacity: its device or memory size. */
static uint64_t
capacity(const lmca_server_info_t *s)
{
    if (s->data_total_bytes > 0)
        return (uint64_t)s->data_total_bytes;
    return s->data_size > 0 ? (uint64_t)s->data_size : 0;
}

/* The most of the storage records can fill, in percent: blocks in use are
   partly full (records of many ages share one, and a block is reused only once
   defrag empties it), so a share of each block that can take new records.
   Memory: per stripe, less SPARE_BLOCKS; a device: less its defrag reserve and
   its post-write cache (probe.py's rule). */
static uint64_t
block_room(const lmca_server_info_t *srv, uint64_t block)
{
    uint64_t cap = capacity(srv), blocks, kept, fill;

    if (block == 0)
        return 0;
    if (srv->data_size > 0) {
        blocks = cap / MEMORY_STRIPES / block;
        kept = SPARE_BLOCKS;
        fill = MEMORY_FILL_PCT;
    } else { /* each device has its reserve and its cache */
        blocks = cap / (srv->devices > 1 ? srv->devices : 1) / block;
        kept = DEVICE_RESERVE_BLOCKS +
               (srv->post_write_cache > 0 ? (uint64_t)srv->post_write_cache / block : 0);
        fill = DEVICE_FILL_PCT;
    }
    return blocks > kept ? fill * (blocks - kept) / blocks : 0;
}

/* The lead, in seconds at `per_second` records of `mean` bytes: a burst of puts
   placed that far ahead lands past evict-used-pct before NSUP's next cycle,
   and must fit in what the storage holds beyond it, below stop-writes-used-pct
   and the blocks' room. On 512 MiB of memory at evict-used-pct 30, 3 s of
   records reached 45 % used, out of space at the stripes' limit (DESIGN.md). */
static uint32_t
lead_seconds(const lmca_server_info_t *srv, uint64_t block, uint64_t mean, uint32_t per_second)
{
    uint64_t cap = capacity(srv), room = block_room(srv, block), limit, seconds;

    limit = srv->stop_writes_used_pct > 0 && (uint64_t)srv->stop_writes_used_pct < room
                ? (uint64_t)srv->stop_writes_used_pct
                : room;
    if (limit <= (uint64_t)srv->evict_used_pct || mean == 0 || per_second == 0)
        return 1;
    seconds = cap / 100 * (limit - (uint64_t)srv->evict_used_pct) / mean / per_second;
    return seconds < 1 ? 1 : seconds > LEAD_SECONDS ? LEAD_SECONDS : (uint32_t)seconds;
}

/* One node's part: the records it will hold at evict-used-pct and its target,
   and its mean record; false when it does not evict. */
static bool
node_plan(const lmca_server_info_t *srv, const lmca_limits_t *limits, const lmca_config_t *cfg,
          uint64_t mean_hint, uint64_t *records_out, uint64_t *target_out, uint64_t *mean_out)
{
    uint64_t mean, records;

    if (!(srv->evict_used_pct > 0 && srv->nsup_period > 0 && cfg->default_ttl_seconds > 0 &&
          srv->evict_tenths_pct > 0))
        return false;
    /* Records at evict-used-pct: the capacity over the mean record the namespace
       holds, or, while it is nearly empty, over the hint, or a full segment
       (fewer, larger records than the truth: a smaller target, the safe side). */
    mean = srv->objects >= FEW_OBJECTS && srv->data_used_bytes > 0
               ? (uint64_t)srv->data_used_bytes / (uint64_t)srv->objects
               : 0;
    /* Right after many removals the space is freed later than the objects are
       counted (blocks wait for defrag): a mean above the largest record the
       namespace takes is no mean, and made the plan 0 records, a second 1. */
    if (mean == 0 || mean > limits->max_segment_bytes + LMCA__MIB)
        mean = mean_hint > 0 ? mean_hint : limits->target_segment_bytes;
    records = capacity(srv) / 100 * (uint64_t)srv->evict_used_pct / (mean ? mean : 1);
    /* Never-expiring records (pinned chunks) are not in NSUP's histogram. Their
       share of a nearly empty namespace says nothing: there the shared clock's
       own record alone was all of it, and made the plan 0 records. */
    if (srv->objects >= FEW_OBJECTS && srv->non_expirable_objects > 0 &&
        srv->non_expirable_objects <= srv->objects)
        records -= (uint64_t)((double)records * (double)srv->non_expirable_objects /
                              (double)srv->objects);
    *records_out = records;
    *target_out = records * (uint64_t)srv->evict_tenths_pct / 1000;
    *mean_out = mean;
    return true;
}

void
lmca_eviction_plan_nodes(const lmca_server_info_t *nodes, size_t n, const lmca_limits_t *limits,
                         const lmca_config_t *cfg, uint64_t mean_hint, lmca_eviction_t *out)
{
    uint64_t records = 0, target = 0, tightest = UINT64_MAX, rf = UINT64_MAX, bytes = 0;

    memset(out, 0, sizeof *out);
    out->per_second = cfg->records_per_void_second;
    out->lead_seconds = LEAD_SECONDS;
    if (n == 0)
        return;
    out->enabled = true;
    for (size_t i = 0; i < n && out->enabled; i++) {
        uint64_t r, t, mean;
        out->enabled = node_plan(&nodes[i], limits, cfg, mean_hint, &r, &t, &mean);
        records += r, target += t, bytes += mean;
        out->device |= nodes[i].data_size <= 0;
        tightest = t < tightest ? t : tightest;
        /* Copies of each record; a node that does not say counts as holding one. */
        uint64_t f = nodes[i].replication_factor > 0 ? (uint64_t)nodes[i].replication_factor : 1;
        rf = f < rf ? f : rf;
    }
    if (!out->enabled)
        return;
    rf = rf > n ? n : rf;
    out->records = records / rf;
    out->target = target / rf;
    if (out->per_second == 0) {
        uint64_t k = tightest * n / rf / TARGET_SHARE;
        out->per_second = k == 0 ? 1 : k > UINT32_MAX ? UINT32_MAX : (uint32_t)k;
    }
    out->bytes_per_second = bytes / n * out->per_second;
    /* Each node's lead at its share of the second's records; the shortest. */
    out->lead_seconds = LEAD_SECONDS;
    for (size_t i = 0; i < n; i++) {
        uint64_t r, t, mean, share = (uint64_t)out->per_second * rf / n;
        node_plan(&nodes[i], limits, cfg, mean_hint, &r, &t, &mean);
        uint32_t lead = lead_seconds(&nodes[i], limits->block_bytes, mean,
                                     (uint32_t)(share ? share : 1));
        out->lead_seconds = lead < out->lead_seconds ? lead : out->lead_seconds;
    }
}

void
lmca_eviction_plan(const lmca_server_info_t *srv, const lmca_limits_t *limits,
                   const lmca_config_t *cfg, uint64_t mean_hint, lmca_eviction_t *out)
{
    lmca_eviction_plan_nodes(srv, 1, limits, cfg, mean_hint, out);
}

/* ---------------------------------------------------------------------------
 * The plan in force, and the looks that keep it.
 */

static void
set_plan(lmca_t *h, const lmca_eviction_t *e)
{
    atomic_store_explicit(&h->cache.per_second, e->per_second, memory_order_relaxed);
    atomic_store_explicit(&h->cache.lead_seconds, e->lead_seconds, memory_order_relaxed);
    atomic_store_explicit(&h->cache.target, e->target, memory_order_relaxed);
    atomic_store_explicit(&h->cache.records, e->records, memory_order_relaxed);
    atomic_store_explicit(&h->cache.enabled, e->enabled, memory_order_relaxed);
    atomic_store_explicit(&h->cache.bytes_per_second, e->bytes_per_second, memory_order_relaxed);
    atomic_store_explicit(&h->cache.device, e->device, memory_order_relaxed);
}

void
lmca_eviction(lmca_t *h, lmca_eviction_t *out)
{
    out->enabled = atomic_load_explicit(&h->cache.enabled, memory_order_relaxed);
    out->records = atomic_load_explicit(&h->cache.records, memory_order_relaxed);
    out->target = atomic_load_explicit(&h->cache.target, memory_order_relaxed);
    out->per_second = (uint32_t)atomic_load_explicit(&h->cache.per_second, memory_order_relaxed);
    out->lead_seconds = atomic_load_explicit(&h->cache.lead_seconds, memory_order_relaxed);
    out->bytes_per_second = atomic_load_explicit(&h->cache.bytes_per_second,
                                                 memory_order_relaxed);
    out->device = atomic_load_explicit(&h->cache.device, memory_order_relaxed);
    out->cut_void_time = atomic_load_explicit(&h->cache.cut_us, memory_order_relaxed) / 1000000u;
}

/* The mean record of this handle's puts so far, 0 before the first. */
static uint64_t
own_mean(lmca_t *h)
{
    uint64_t records = atomic_load_explicit(&h->cache.put_records, memory_order_relaxed);
    return records ? atomic_load_explicit(&h->cache.put_bytes, memory_order_relaxed) / records
                   : 0;
}

uint64_t
lmca__cache_held_bytes(lmca_t *h)
{
    return atomic_load_explicit(&h->cache.records, memory_order_relaxed) * own_mean(h);
}


/* What every node said of the namespace, in one look. */
typedef struct lmca__looks {
    lmca_server_info_t srv[LMCA__NODES_MAX];
    char names[LMCA__NODES_MAX][LMCA__NODE_NAME];
    size_t n;
} looks;

static bool
look_node(void *udata, const char *node, const char *address, char *answer)
{
    looks *l = udata;
    (void)address;
    if (lmca_server_info_parse(answer, &l->srv[l->n], NULL) == LMCA_OK) {
        snprintf(l->names[l->n], sizeof l->names[l->n], "%s", node);
        l->n++;
    }
    return l->n < LMCA__NODES_MAX;
}

/* Asks every node; false when none answered (the plan stays as it was). */
static bool
look(lmca_t *h, looks *l)
{
    char req[64];

    l->n = 0;
    snprintf(req, sizeof req, "namespace/%s", h->cfg.namespace_);
    lmca__wire_info_each(h->wire, req, look_node, l, NULL);
    return l->n > 0;
}

/* The server's epoch, 2010-01-01, in Unix seconds: void times count from it. */
#define SERVER_EPOCH_S 1262304000u

/* The latest void time NSUP evicted below (hits.c: where the namespace's
   oldest records are). A node restarted says 0 until its next cut: the one
   seen before stands. One more than ten years ahead is no void time
   (untrusted). */
static void
note_cut(lmca_t *h, const looks *l)
{
    uint64_t cut = 0, now_s = lmca__now_us() / 1000000u;

    for (size_t i = 0; i < l->n; i++) {
        int64_t v = l->srv[i].evict_void_time;
        if (v > 0 && (uint64_t)v + SERVER_EPOCH_S < now_s + 86400u * 3650u &&
            (uint64_t)v + SERVER_EPOCH_S > cut)
            cut = (uint64_t)v + SERVER_EPOCH_S;
    }
    if (cut > 0)
        atomic_store(&h->cache.cut_us, cut * 1000000u);
}

/* The plan from a look, which the handle keeps (the caller's is taken); looks
   again soon while any node is nearly empty (the mean record is a guess) or
   past evict-used-pct (a stall is seen within a few NSUP cycles). */
static void
plan_from(lmca_t *h, looks *l, uint64_t now)
{
    lmca_eviction_t e;
    bool soon = false;
    uint64_t mean = own_mean(h);

    for (size_t i = 0; i < l->n; i++)
        soon |= l->srv[i].objects < FEW_OBJECTS || l->srv[i].hwm_breached;
    note_cut(h, l);
    pthread_mutex_lock(&h->cache.plan_lock);
    lmca_eviction_plan_nodes(l->srv, l->n, &h->limits, &h->cfg, mean, &e);
    set_plan(h, &e);
    /* A nearly empty namespace's mean record is a guess, a full segment, until
       this handle's first put tells its own: then the plan is made again. */
    atomic_store(&h->cache.plan_guessed, soon && mean == 0);
    free(h->cache.last_look);
    h->cache.last_look = l;
    pthread_mutex_unlock(&h->cache.plan_lock);
    atomic_store(&h->cache.watch_next_ms, now + (soon ? WATCH_EARLY_MS : WATCH_MS));
    if (e.enabled)
        lmca__mend_watch(h, l->srv, (const char(*)[LMCA__NODE_NAME])l->names, l->n, now);
}

void
lmca__cache_open(lmca_t *h)
{
    lmca_eviction_t e;
    looks *l = lmca__malloc(sizeof *l);

    /* mend.c: handles that see one stall act one after the other. */
    h->cache.stall_ms = LMCA__STALL_MS + h->wid_seed % LMCA__STALL_MS;
    if (l != NULL && look(h, l)) {
        plan_from(h, l, lmca__mono_ms());
    } else { /* the node that answered the limits */
        free(l);
        lmca_eviction_plan(&h->server, &h->limits, &h->cfg, 0, &e);
        set_plan(h, &e);
        atomic_store(&h->cache.watch_next_ms, lmca__mono_ms() + WATCH_EARLY_MS);
    }
    lmca_eviction(h, &e);
    if (e.enabled)
        lmca__log(&h->cfg, LMCA_LOG_INFO,
                  "namespace '%s' evicts: at most %llu of about %llu records per NSUP cycle "
                  "over the cluster; a second of void time gets at most %u records",
                  h->cfg.namespace_, (unsigned long long)e.target,
                  (unsigned long long)e.records, e.per_second);
}

void
lmca__cache_init(lmca_t *h)
{
    pthread_mutex_init(&h->cache.plan_lock, NULL);
}

void
lmca__cache_close(lmca_t *h)
{
    free(h->cache.last_look);
    pthread_mutex_destroy(&h->cache.plan_lock);
}

void
lmca__cache_planned(lmca_t *h, uint32_t records, uint64_t bytes)
{
    lmca_eviction_t e;

    atomic_fetch_add_explicit(&h->cache.put_records, records, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->cache.put_bytes, bytes, memory_order_relaxed);
    if (!atomic_load_explicit(&h->cache.plan_guessed, memory_order_relaxed))
        return;
    /* The first put's size: the plan again from the last look, no round trip
       (with a full segment's guess, a namespace of small chunks got a second a
       record or two, and the first puts waited seconds for the next look). */
    pthread_mutex_lock(&h->cache.plan_lock);
    if (atomic_exchange(&h->cache.plan_guessed, false) && h->cache.last_look != NULL) {
        looks *l = h->cache.last_look;
        lmca_eviction_plan_nodes(l->srv, l->n, &h->limits, &h->cfg, own_mean(h), &e);
        set_plan(h, &e);
    }
    pthread_mutex_unlock(&h->cache.plan_lock);
}

void
lmca__cache_watch(lmca_t *h)
{
    uint64_t now = lmca__mono_ms(), next = atomic_load_explicit(&h->cache.watch_next_ms,
                                                           memory_order_relaxed);
    looks *l;

    if (now < next || !atomic_compare_exchange_strong(&h->cache.watch_next_ms, &next,
                                                      now + WATCH_MS))
        return;
    if ((l = lmca__malloc(sizeof *l)) != NULL && look(h, l))
        plan_from(h, l, now);
    else
        free(l);
}

bool
lmca__cache_stopped(lmca_t *h)
{
    looks *l = lmca__malloc(sizeof *l);
    bool stopped = true;

    if (l != NULL && look(h, l)) {
        stopped = false;
        for (size_t i = 0; i < l->n; i++)
            stopped |= l->srv[i].stop_writes;
    }
    free(l);
    return stopped;
}

void
lmca__upkeep(lmca_t *h)
{
    lmca__cache_watch(h);
    lmca__mend_if_due(h);
}
