/*
 * tasks.c - what a submitted batch turns into, and running each task.
 *
 * Small chunks (at most batch_threshold_bytes) travel in tiles, one batch call
 * each, the tiles spread over the workers. Larger chunks are tasks of their own;
 * once a large chunk's meta record says it has segments, each segment becomes a
 * task too, so that one chunk's segments move over several connections at once
 * (DESIGN.md: parallel single-record calls beat batch calls for MiB records).
 * Exists and prefix lookups are header-only batch reads, tiled the same way.
 */
#include <stdlib.h>
#include <string.h>

#include "pool_private.h"

/* Appends to a task list. */
typedef struct {
    lmca__task *head, *tail;
} task_list;

static void
append(task_list *l, lmca__task *t)
{
    if (l->tail)
        l->tail->next = t;
    else
        l->head = t;
    l->tail = t;
}

static void
free_list(lmca__task *t)
{
    while (t) {
        lmca__task *next = t->next;
        free(t);
        t = next;
    }
}

/* Keys per tile: the batch spread evenly over the workers, within the row and
   byte bounds of one batch call. */
static size_t
tile_keys(const lmca__job *job, size_t n, size_t bytes_each)
{
    size_t per = (n + job->pool->nworkers - 1) / job->pool->nworkers;
    size_t by_bytes = bytes_each ? (32u << 20) / bytes_each : 4096;
    if (per > 4096)
        per = 4096;
    if (per > by_bytes)
        per = by_bytes;
    return per ? per : 1;
}

/* Tiles [first, first + n) into tasks of at most `per` keys. */
static void
add_tiles(task_list *l, lmca__job *job, size_t first, size_t n, size_t per)
{
    for (size_t i = 0; i < n; i += per)
        append(l, lmca__task_new(job, LMCA__T_TILE, first + i, n - i < per ? n - i : per, 0));
}

static lmca__task *
segment_tasks(lmca__job *job, size_t key, uint32_t nseg)
{
    task_list l = {0};
    atomic_store(&job->ks[key].segs_left, nseg);
    for (uint32_t s = 0; s < nseg; s++)
        append(&l, lmca__task_new(job, LMCA__T_SEGMENT, key, 1, s));
    return l.head;
}

/* SET: plans key i. A small single-record chunk joins a tile (*small); a larger
   one is a task; a chunk that needs segments gets them as tasks at once, and
   whichever segment task finishes last writes its meta record. */
static int
plan_set_key(lmca__job *job, size_t i, task_list *l, bool *small, lmca_err_t *err)
{
    const lmca_limits_t *lim = lmca_limits(job->pool->h);
    lmca_plan_t plan;
    int rc = lmca_plan(lim, job->lens[i], &plan, err);

    *small = rc == LMCA_OK && plan.nseg == 1 && job->lens[i] <= lim->batch_threshold_bytes;
    if (rc != LMCA_OK || *small)
        return rc;
    if (plan.nseg == 1) {
        append(l, lmca__task_new(job, LMCA__T_KEY, i, 1, 0));
        return LMCA_OK;
    }
    lmca_meta_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory planning \"%s\"", job->keys[i]);
    m->nseg = plan.nseg;
    m->seg_b = plan.seg_b;
    m->tot_b = job->lens[i];
    job->ks[i].meta = m;
    append(l, segment_tasks(job, i, plan.nseg));
    while (l->tail->next) /* segment_tasks gave a list: find its end */
        l->tail = l->tail->next;
    return LMCA_OK;
}

int
lmca__plan_tasks(lmca__job *job, lmca__task **out, lmca_err_t *err)
{
    uint64_t threshold = lmca_limits(job->pool->h)->batch_threshold_bytes;
    size_t n = job->c.n, run_start = 0, run_len = 0, small = 0;
    task_list l = {0};
    int rc = LMCA_OK;

    if (job->c.op == LMCA_OP_EXISTS || job->c.op == LMCA_OP_PREFIX) {
        add_tiles(&l, job, 0, n, tile_keys(job, n, 0));
        *out = l.head;
        return LMCA_OK;
    }
    for (size_t i = 0; i < n; i++)
        small += job->c.op != LMCA_OP_DELETE && job->lens[i] <= threshold;
    size_t per = tile_keys(job, small, threshold);
    for (size_t i = 0; i < n && rc == LMCA_OK; i++) {
        bool is_small = false;
        if (job->c.op == LMCA_OP_SET)
            rc = plan_set_key(job, i, &l, &is_small, err);
        else if (job->c.op == LMCA_OP_GET && job->lens[i] <= threshold)
            is_small = true;
        else
            append(&l, lmca__task_new(job, LMCA__T_KEY, i, 1, 0));
        if (is_small && run_len++ == 0)
            run_start = i;
        /* A run of small keys ends at a large key, at a full tile, or at the end. */
        if (run_len > 0 && (!is_small || run_len == per || i + 1 == n)) {
            add_tiles(&l, job, run_start, run_len, per);
            run_len = 0;
        }
    }
    if (rc != LMCA_OK) {
        free_list(l.head);
        lmca__job_release(job);
        return rc;
    }
    *out = l.head;
    return LMCA_OK;
}

void
lmca__job_release(lmca__job *job)
{
    for (size_t i = 0; i < job->c.n; i++) {
        free(job->ks[i].meta);
        job->ks[i].meta = NULL;
    }
}

/* ---------------------------------------------------------------------------
 * Running tasks.
 */

static void
account(lmca__job *job, bool read, size_t bytes)
{
    atomic_uint_fast64_t *c = read ? &job->pool->bytes_read : &job->pool->bytes_written;
    atomic_fetch_add_explicit(c, bytes, memory_order_relaxed);
}

/* Records a key's outcome: hit/stored (1), miss (0), or an error (0, and the
   job's error if it is the first). */
static void
settle(lmca__job *job, size_t i, int rc, const lmca_err_t *err)
{
    job->c.results[i] = rc == LMCA_OK;
    if (rc < 0)
        lmca__job_error(job, rc, err->msg);
    else if (rc == LMCA_OK && (job->c.op == LMCA_OP_GET || job->c.op == LMCA_OP_SET))
        account(job, job->c.op == LMCA_OP_GET, job->lens[i]);
}

static void
run_lookup_tile(lmca__task *t)
{
    lmca__job *job = t->job;
    lmca_err_t err = {0};
    size_t count;
    int rc = lmca_prefix(job->pool->h, (const char *const *)job->keys + t->first, t->count,
                         &count, job->c.results + t->first, &err);
    if (rc != LMCA_OK) {
        memset(job->c.results + t->first, 0, t->count);
        lmca__job_error(job, rc, err.msg);
    }
}

/* GET of a chunk whose meta record says it has segments. */
static void
start_segments(lmca__job *job, size_t i, const lmca_meta_t *meta)
{
    lmca_t *h = job->pool->h;
    lmca_err_t err = {0};

    if (meta->seg_b <= lmca_limits(h)->batch_threshold_bytes) {
        /* Small segments: the engine reads them in batch calls itself. */
        size_t got = 0;
        int rc = lmca_get(h, job->keys[i], job->bufs[i], job->lens[i], &got, NULL, &err);
        settle(job, i, rc == LMCA_OK && got != job->lens[i] ? LMCA_MISS : rc, &err);
        return;
    }
    if ((job->ks[i].meta = malloc(sizeof *meta)) == NULL) {
        settle(job, i, lmca__fail(&err, LMCA_ENOMEM, 0, "out of memory"), &err);
        return;
    }
    memcpy(job->ks[i].meta, meta, sizeof *meta);
    lmca__push(job->pool, segment_tasks(job, i, meta->nseg));
}

/* A meta record read for GET key i, with `inl` payload bytes received inline. */
static void
got_meta(lmca__job *job, size_t i, int rc, const lmca_meta_t *meta, size_t inl,
         const lmca_err_t *err)
{
    if (rc == LMCA_OK && meta->tot_b != job->lens[i])
        rc = LMCA_MISS; /* the buffer is the chunk's size, or this is not the chunk */
    if (rc == LMCA_OK && meta->nseg > 1) {
        start_segments(job, i, meta);
        return;
    }
    if (rc == LMCA_OK)
        rc = inl == meta->tot_b ? lmca_verify(meta, job->bufs[i]) : LMCA_MISS;
    settle(job, i, rc, err);
}

static void
run_get_key(lmca__task *t)
{
    lmca__job *job = t->job;
    size_t i = t->first, inl = 0;
    lmca_err_t err = {0};
    lmca_meta_t meta;
    int rc = lmca_read_meta(job->pool->h, job->keys[i], &meta, job->bufs[i], job->lens[i], &inl,
                            &err);
    got_meta(job, i, rc, &meta, inl, &err);
}

static void
run_get_tile(lmca__task *t)
{
    lmca__job *job = t->job;
    size_t n = t->count, f = t->first;
    lmca_meta_t *metas = malloc(n * sizeof *metas);
    size_t *inl = malloc(n * sizeof *inl);
    int *results = malloc(n * sizeof *results);
    lmca_err_t err = {0};

    if (metas == NULL || inl == NULL || results == NULL) {
        lmca__job_error(job, LMCA_ENOMEM, "out of memory reading a tile");
    } else {
        lmca_read_meta_many(job->pool->h, (const char *const *)job->keys + f, n, metas,
                            job->bufs + f, job->lens + f, inl, results, &err);
        for (size_t k = 0; k < n; k++)
            got_meta(job, f + k, results[k], &metas[k], inl[k], &err);
    }
    free(metas);
    free(inl);
    free(results);
}

static void
run_set_tile(lmca__task *t)
{
    lmca__job *job = t->job;
    size_t n = t->count, f = t->first;
    int *results = malloc(n * sizeof *results);
    lmca_err_t err = {0};

    if (results == NULL) {
        lmca__job_error(job, LMCA_ENOMEM, "out of memory writing a tile");
        return;
    }
    lmca_put_small_many(job->pool->h, (const char *const *)job->keys + f, n,
                        (const void *const *)job->bufs + f, job->lens + f, job->opts + f, results,
                        &err);
    for (size_t k = 0; k < n; k++)
        settle(job, f + k, results[k], &err);
    free(results);
}

/* One segment of key `first`; the last segment of a key finishes the key. */
static void
run_segment(lmca__task *t)
{
    lmca__job *job = t->job;
    lmca_t *h = job->pool->h;
    size_t i = t->first;
    lmca__keystate *ks = &job->ks[i];
    lmca_meta_t *m = ks->meta;
    uint8_t *buf = (uint8_t *)job->bufs[i] + (uint64_t)t->segment * m->seg_b;
    lmca_err_t err = {0};
    int rc, expected = 0;

    if (job->c.op == LMCA_OP_GET)
        rc = lmca_read_segment(h, job->keys[i], m, t->segment, buf, &err);
    else
        rc = lmca_write_segment(h, job->keys[i], t->segment, buf,
                                lmca_segment_len(m, t->segment), job->opts[i].pin, &err);
    if (rc != LMCA_OK) {
        atomic_compare_exchange_strong(&ks->failed, &expected, rc);
        if (rc < 0)
            lmca__job_error(job, rc, err.msg);
    }
    if (atomic_fetch_sub_explicit(&ks->segs_left, 1, memory_order_acq_rel) != 1)
        return;
    /* Last segment of this key: every other segment's outcome is visible. */
    rc = atomic_load(&ks->failed);
    if (rc == LMCA_OK && job->c.op == LMCA_OP_GET) {
        rc = lmca_verify(m, job->bufs[i]);
    } else if (rc == LMCA_OK) {
        m->has_crc32 = lmca_config(h)->enable_crc32;
        m->crc32 = m->has_crc32 ? lmca_crc32(job->bufs[i], m->tot_b) : 0;
        rc = lmca_write_meta(h, job->keys[i], m, NULL, &job->opts[i], &err);
    }
    settle(job, i, rc, &err);
}

void
lmca__run(lmca__task *t)
{
    lmca__job *job = t->job;
    lmca_err_t err = {0};
    size_t i = t->first;
    int rc;

    switch (t->kind) {
    case LMCA__T_SEGMENT:
        run_segment(t);
        return;
    case LMCA__T_TILE:
        if (job->c.op == LMCA_OP_GET)
            run_get_tile(t);
        else if (job->c.op == LMCA_OP_SET)
            run_set_tile(t);
        else
            run_lookup_tile(t);
        return;
    case LMCA__T_KEY:
        break;
    }
    if (job->c.op == LMCA_OP_GET) {
        run_get_key(t);
        return;
    }
    if (job->c.op == LMCA_OP_SET)
        rc = lmca_put(job->pool->h, job->keys[i], job->bufs[i], job->lens[i], &job->opts[i], &err);
    else
        rc = lmca_remove(job->pool->h, job->keys[i], &err);
    settle(job, i, rc, &err);
}
