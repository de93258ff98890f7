/*
 * tasks.c - what a submitted batch turns into, and running each task on the
 * engine's chunk steps (lmca_put_begin/segments/commit/abort,
 * lmca_get_begin/segments/end): this file schedules the protocol, it does not
 * restate it.
 *
 * Small chunks (at most batch_threshold_bytes) travel in tiles, one batch call
 * each, the tiles spread over the workers. Larger chunks are tasks of their own;
 * a chunk with segments larger than the threshold gets one task per segment, so
 * that one chunk's segments move over several connections at once (DESIGN.md:
 * parallel single-record calls beat batch calls for MiB records). Exists and
 * prefix lookups are batch reads of meta records, tiled the same way.
 *
 * A GET knows its chunk's exact size (the caller allocated it), so the plan of
 * a chunk with segments is known before its meta record is read: the meta
 * record and the segments are read at once (one round trip, not two), and the
 * last of them to finish confirms the segments by the meta record's write id.
 * When another writer's plan differed, the segments are read again the usual
 * way (DESIGN.md, "Guessed gets").
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Appends a new task; false (and nothing appended) when out of memory. */
static bool
add(task_list *l, lmca__job *job, lmca__task_kind kind, size_t first, size_t count,
    uint32_t segment)
{
    lmca__task *t = lmca__task_new(job, kind, first, count, segment);
    if (t != NULL)
        append(l, t);
    return t != NULL;
}

static uint64_t
threshold(const lmca__job *job)
{
    return lmca_limits(job->pool->h)->batch_threshold_bytes;
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
static bool
add_tiles(task_list *l, lmca__job *job, size_t first, size_t n, size_t per)
{
    for (size_t i = 0; i < n; i += per)
        if (!add(l, job, LMCA__T_TILE, first + i, n - i < per ? n - i : per, 0))
            return false;
    return true;
}

/* The segment tasks of key `key`: one per segment when segments are large, else
   one for all of them (the engine batches small segments itself). Sets the
   key's count of parts; NULL when out of memory. */
static lmca__task *
segment_tasks(lmca__job *job, size_t key, const lmca_meta_t *m)
{
    bool each = m->seg_b > threshold(job);
    uint32_t parts = each ? m->nseg : 1;
    task_list l = {0};

    for (uint32_t s = 0; s < parts; s++) {
        if (!add(&l, job, LMCA__T_SEGMENT, key, each ? 1 : m->nseg, s)) {
            free_list(l.head);
            return NULL;
        }
    }
    atomic_store(&job->ks[key].parts_left, parts);
    return l.head;
}

/* SET: plans key i. A small single-record chunk joins a tile (*small); a larger
   one is a task; a chunk with segments begins here (no I/O) and its segment
   tasks are queued at once; whichever finishes last commits. */
static int
plan_set_key(lmca__job *job, size_t i, task_list *l, bool *small, lmca_err_t *err)
{
    lmca_put_t p = {.key = job->keys[i], .buf = job->bufs[i], .len = job->lens[i],
                    .opts = &job->opts[i]};
    lmca__task *parts;
    int rc = lmca_put_begin(job->pool->h, &p, err);

    *small = rc == LMCA_OK && p.meta.nseg == 1 && p.len <= threshold(job);
    if (rc != LMCA_OK || *small)
        return rc;
    if ((job->ks[i].put = lmca__malloc(sizeof p)) == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory planning \"%s\"", p.key);
    *job->ks[i].put = p;
    if (p.meta.nseg == 1) /* the put's one step is its commit */
        return add(l, job, LMCA__T_KEY, i, 1, 0)
                   ? LMCA_OK
                   : lmca__fail(err, LMCA_ENOMEM, 0, "out of memory planning \"%s\"", p.key);
    if ((parts = segment_tasks(job, i, &p.meta)) == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory planning \"%s\"", p.key);
    append(l, parts);
    while (l->tail->next) /* segment_tasks gave a list: find its end */
        l->tail = l->tail->next;
    return LMCA_OK;
}

/* GET: key i as a guessed get when its size plans segments: a task for its
   meta record, queued first, and its segment tasks; the last part confirms.
   False when the plan is one record (then key i is a plain KEY task). */
static bool
plan_guess(lmca__job *job, size_t i, task_list *l, int *rc, lmca_err_t *err)
{
    lmca_plan_t plan;
    lmca_get_t *g;
    lmca__task *parts;

    if (lmca_plan(lmca_limits(job->pool->h), job->lens[i], &plan, NULL) != LMCA_OK ||
        plan.nseg < 2)
        return false;
    /* The guess and its write ids in one allocation, freed with the job. */
    g = lmca__malloc(lmca__size(plan.nseg, sizeof(uint64_t), sizeof *g));
    if (g == NULL) {
        *rc = lmca__fail(err, LMCA_ENOMEM, 0, "out of memory planning a batch");
        return true;
    }
    *g = (lmca_get_t){.key = job->keys[i], .buf = job->bufs[i], .cap = job->lens[i],
                      .seen_wids = (uint64_t *)(g + 1)};
    if (lmca_get_guess(job->pool->h, g, NULL) != LMCA_OK) {
        free(g);
        return false;
    }
    job->ks[i].get = g;
    if (!add(l, job, LMCA__T_KEY, i, 1, 0) || (parts = segment_tasks(job, i, &g->meta)) == NULL) {
        *rc = lmca__fail(err, LMCA_ENOMEM, 0, "out of memory planning a batch");
        return true;
    }
    atomic_fetch_add(&job->ks[i].parts_left, 1); /* the meta record's task */
    append(l, parts);
    while (l->tail->next)
        l->tail = l->tail->next;
    return true;
}

/* STAT, FILL, TOUCH and DELETE: a task per key (sizes are not known ahead). */
static int
plan_each_key(lmca__job *job, task_list *l, lmca_err_t *err)
{
    for (size_t i = 0; i < job->c.n; i++)
        if (!add(l, job, LMCA__T_KEY, i, 1, 0))
            return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory planning a batch");
    return LMCA_OK;
}

static int
plan_keys(lmca__job *job, task_list *l, lmca_err_t *err)
{
    size_t n = job->c.n, run_start = 0, run_len = 0, small = 0;
    int rc = LMCA_OK;

    if (job->c.op != LMCA_OP_GET && job->c.op != LMCA_OP_SET)
        return plan_each_key(job, l, err);

    for (size_t i = 0; i < n; i++)
        small += job->c.op != LMCA_OP_DELETE && job->lens[i] <= threshold(job);
    size_t per = tile_keys(job, small, threshold(job));
    for (size_t i = 0; i < n && rc == LMCA_OK; i++) {
        bool is_small = false;
        if (job->c.op == LMCA_OP_SET)
            rc = plan_set_key(job, i, l, &is_small, err);
        else if (job->c.op == LMCA_OP_GET && job->lens[i] <= threshold(job))
            is_small = true;
        else if (job->c.op == LMCA_OP_GET && plan_guess(job, i, l, &rc, err))
            ;
        else if (rc == LMCA_OK && !add(l, job, LMCA__T_KEY, i, 1, 0))
            rc = lmca__fail(err, LMCA_ENOMEM, 0, "out of memory planning a batch");
        if (is_small && run_len++ == 0)
            run_start = i;
        /* A run of small keys ends at a large key, at a full tile, or at the end. */
        if (rc == LMCA_OK && run_len > 0 && (!is_small || run_len == per || i + 1 == n)) {
            if (!add_tiles(l, job, run_start, run_len, per))
                rc = lmca__fail(err, LMCA_ENOMEM, 0, "out of memory planning a batch");
            run_len = 0;
        }
    }
    return rc;
}

int
lmca__plan_tasks(lmca__job *job, lmca__task **out, lmca_err_t *err)
{
    task_list l = {0};
    int rc;

    if (job->c.op == LMCA_OP_EXISTS || job->c.op == LMCA_OP_PREFIX)
        rc = add_tiles(&l, job, 0, job->c.n, tile_keys(job, job->c.n, 0))
                 ? LMCA_OK
                 : lmca__fail(err, LMCA_ENOMEM, 0, "out of memory planning a lookup");
    else
        rc = plan_keys(job, &l, err);
    if (rc != LMCA_OK) {
        free_list(l.head);
        lmca__job_release(job);
        return rc;
    }
    *out = l.head;
    return LMCA_OK;
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
    else if (rc == LMCA_OK && job->c.op == LMCA_OP_SET)
        account(job, false, job->lens[i]);
    else if (rc == LMCA_OK && (job->c.op == LMCA_OP_GET || job->c.op == LMCA_OP_FILL))
        account(job, true, job->gets ? job->gets[i].meta.tot_b : job->lens[i]);
}

/* Settles keys [first, first + n) with one out-of-memory error. */
static void
settle_nomem(lmca__job *job, size_t first, size_t n, const char *what)
{
    lmca_err_t err;
    lmca__fail(&err, LMCA_ENOMEM, 0, "out of memory %s", what);
    for (size_t k = 0; k < n; k++)
        settle(job, first + k, LMCA_ENOMEM, &err);
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

/* GET key i, whose meta record names segments: small ones are read here in
   batch calls, large ones become a task each. */
static void
start_segments(lmca__job *job, size_t i, const lmca_get_t *g)
{
    lmca_t *h = job->pool->h;
    lmca_err_t err = {0};
    lmca__task *parts;
    int rc;

    if (g->meta.seg_b <= threshold(job)) {
        rc = lmca_get_segments(h, g, 0, g->meta.nseg, &err);
        settle(job, i, rc == LMCA_OK ? lmca_get_end(h, g) : rc, &err);
        return;
    }
    if ((job->ks[i].get = lmca__malloc(sizeof *g)) == NULL ||
        (parts = segment_tasks(job, i, &g->meta)) == NULL) {
        settle_nomem(job, i, 1, "reading segments");
        return;
    }
    *job->ks[i].get = *g;
    if (!lmca__push(job->pool, parts))
        lmca__abandon(parts);
}

/* A get of key i begun with result `rc`. The buffer is the chunk's size, or
   this is not the chunk: a size mismatch is a miss. */
static void
got_meta(lmca__job *job, size_t i, int rc, const lmca_get_t *g, const lmca_err_t *err)
{
    if (rc == LMCA_OK && g->meta.tot_b != job->lens[i])
        rc = LMCA_MISS;
    if (rc == LMCA_OK && g->meta.nseg > 1) {
        start_segments(job, i, g);
        return;
    }
    if (rc == LMCA_OK)
        rc = lmca_get_end(job->pool->h, g);
    settle(job, i, rc, err);
}

static lmca_get_t
get_of(const lmca__job *job, size_t i)
{
    return (lmca_get_t){.key = job->keys[i], .buf = job->bufs[i], .cap = job->lens[i]};
}

/* GET key i the usual way: the meta record (with a one-record payload), then
   the segments it names. */
static void
get_plain(lmca__job *job, size_t i)
{
    lmca_get_t g = get_of(job, i);
    lmca_err_t err = {0};
    int rc = lmca_get_begin(job->pool->h, &g, &err);
    got_meta(job, i, rc, &g, &err);
}

static void part_done(lmca__job *job, size_t i, int rc);

/* GET key i, guessed: its meta record, read while its segments are. Without a
   buffer, so that a one-record chunk (another writer's plan) cannot land on
   the segments being read; the confirmation then fails and it is read again. */
static void
get_guess_meta(lmca__job *job, size_t i)
{
    lmca__keystate *ks = &job->ks[i];
    lmca_err_t err = {0};

    if ((ks->real = lmca__malloc(sizeof *ks->real)) == NULL) {
        ks->real_rc = lmca__fail(&err, LMCA_ENOMEM, 0, "out of memory reading \"%s\"",
                                 job->keys[i]);
    } else {
        *ks->real = (lmca_get_t){.key = job->keys[i]};
        ks->real_rc = lmca_get_begin(job->pool->h, ks->real, &err);
    }
    if (ks->real_rc < 0) /* the key settles with this status when its parts are done */
        lmca__job_error(job, ks->real_rc, err.msg);
    part_done(job, i, LMCA_OK);
}

static void
run_get_key(lmca__task *t)
{
    if (t->job->ks[t->first].get != NULL) /* set only by plan_guess before any I/O */
        get_guess_meta(t->job, t->first);
    else
        get_plain(t->job, t->first);
}

static void
run_get_tile(lmca__task *t)
{
    lmca__job *job = t->job;
    size_t n = t->count, f = t->first;
    lmca_get_t *gs = lmca__malloc(lmca__size(n, sizeof *gs + sizeof(int), 0));
    int *results = (int *)(gs + n);
    lmca_err_t err = {0};

    if (gs == NULL) {
        settle_nomem(job, f, n, "reading a tile");
        return;
    }
    for (size_t k = 0; k < n; k++)
        gs[k] = get_of(job, f + k);
    lmca_get_begin_many(job->pool->h, gs, n, results, &err);
    for (size_t k = 0; k < n; k++)
        got_meta(job, f + k, results[k], &gs[k], &err);
    free(gs);
}

/* Queues task t to run again in `ms`; once the pool is closing it is canceled
   instead (the queue gives it back). */
static void
defer(lmca__task *t, int ms)
{
    if (!lmca__defer(t->job->pool, t, ms))
        lmca__abandon(t);
}

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* A tile's put refused for a moment, tried again on this worker: tiles hold
   small chunks (at most batch_threshold_bytes) in one batch call, and a
   refused row is written alone. Larger puts wait in the queue (lmca__defer). */
static int
commit_waiting(lmca_t *h, lmca_put_t *p, int rc, lmca_err_t *err)
{
    int wait;
    while ((wait = lmca_put_backoff(h, p, rc)) >= 0) {
        sleep_ms(wait);
        if ((rc = lmca_put_commit(h, p, err)) == LMCA_OK)
            break;
    }
    return rc;
}

static void
run_set_tile(lmca__task *t)
{
    lmca__job *job = t->job;
    size_t n = t->count, f = t->first, m = 0;
    lmca_put_t *ps = lmca__malloc(lmca__size(n, sizeof *ps + 2 * sizeof(int), 0));
    int *results = (int *)(ps + n), *paced = results + n;
    lmca_err_t err = {0};
    int rc = LMCA_OK;

    if (ps == NULL) {
        settle_nomem(job, f, n, "writing a tile");
        return;
    }
    for (size_t k = 0; k < n && rc == LMCA_OK; k++) {
        ps[k] = (lmca_put_t){.key = job->keys[f + k], .buf = job->bufs[f + k],
                             .len = job->lens[f + k], .opts = &job->opts[f + k]};
        rc = lmca_put_begin(job->pool->h, &ps[k], &err);
    }
    /* The tile goes when its last may; a put due past max_put_wait_ms is
       dropped, and the others are committed without it. */
    for (size_t k = 0; rc == LMCA_OK && k < n; k++) {
        int wait = lmca_put_pace(job->pool->h, &ps[k], &err);
        paced[k] = wait < 0 ? wait : LMCA_OK;
        if (wait > 0)
            sleep_ms(wait);
    }
    for (size_t k = 0; rc == LMCA_OK && k < n; k++)
        if (paced[k] == LMCA_OK)
            ps[m++] = ps[k];
    if (rc == LMCA_OK && m > 0)
        lmca_put_commit_many(job->pool->h, ps, m, results, &err);
    for (size_t k = 0, j = 0; k < n; k++) {
        int r = rc != LMCA_OK ? rc : paced[k] != LMCA_OK ? paced[k] : results[j];
        if (rc == LMCA_OK && paced[k] == LMCA_OK && r != LMCA_OK)
            r = commit_waiting(job->pool->h, &ps[j], r, &err);
        if (rc == LMCA_OK && paced[k] == LMCA_OK)
            j++;
        settle(job, f + k, r, &err);
    }
    free(ps);
}

/* A guess that did not hold (another writer's plan, a racing overwrite, a
   failed read): key i is read again the usual way, from the meta record when
   it named segments of this chunk's size. */
static void
unguess(lmca__job *job, size_t i)
{
    lmca__keystate *ks = &job->ks[i];
    lmca_get_t real = ks->real ? *ks->real : (lmca_get_t){0};
    lmca_err_t err = {0};

    free(ks->get);
    free(ks->real);
    ks->get = ks->real = NULL;
    atomic_store(&ks->failed, LMCA_OK);
    if (real.meta.tot_b != job->lens[i]) { /* not this chunk: got_meta's rule */
        settle(job, i, LMCA_MISS, &err);
    } else if (real.meta.nseg > 1) {
        real.buf = job->bufs[i], real.cap = job->lens[i];
        start_segments(job, i, &real);
    } else {
        get_plain(job, i);
    }
}

/* The last part of a guessed get: the bytes count only when the meta record
   confirms every segment (lmca_get_confirm). */
static void
finish_guess(lmca__job *job, size_t i)
{
    lmca__keystate *ks = &job->ks[i];
    lmca_t *h = job->pool->h;
    lmca_err_t err = {0};

    if (ks->real_rc != LMCA_OK) { /* absent, bad or unreadable: no segment matters */
        settle(job, i, ks->real_rc, &err);
    } else if (atomic_load(&ks->failed) == LMCA_OK &&
               lmca_get_confirm(h, ks->get, ks->real) == LMCA_OK) {
        ks->real->buf = job->bufs[i], ks->real->cap = job->lens[i];
        settle(job, i, lmca_get_end(h, ks->real), &err);
    } else {
        unguess(job, i);
    }
}

/* Commits key i's begun put (its segments, if any, have landed): from the task
   `t` that will run it again after a refusal, or, with t NULL, from the last
   segment's task, which gets a commit task of its own when the commit must
   wait. True when the key is settled; false when the commit was deferred. */
static bool
commit_key(lmca__job *job, size_t i, lmca__task *t)
{
    lmca_t *h = job->pool->h;
    lmca_put_t *p = job->ks[i].put;
    lmca_err_t err = {0};
    int rc, wait = 0;

    if (t != NULL && (wait = lmca_put_pace(h, p, &err)) > 0) { /* a one-record put's first write */
        defer(t, wait);
        return false;
    }
    rc = t != NULL && wait < 0 ? wait : lmca_put_commit(h, p, &err);
    if (rc != LMCA_OK && (wait = lmca_put_backoff(h, p, rc)) >= 0) {
        if (t == NULL && (t = lmca__task_new(job, LMCA__T_COMMIT, i, 1, 0)) != NULL)
            atomic_fetch_add_explicit(&job->pending, 1, memory_order_relaxed);
        if (t != NULL) {
            defer(t, wait);
            return false;
        }
        rc = lmca__fail(&err, LMCA_ENOMEM, 0, "out of memory deferring \"%s\"", p->key);
    }
    if (rc != LMCA_OK)
        lmca_put_abort(h, p);
    settle(job, i, rc, &err);
    return true;
}

/* The last part of a segmented key to finish ends the key: every other part's
   outcome is visible (acq_rel on parts_left, see pool_private.h). */
static void
finish_key(lmca__job *job, size_t i)
{
    lmca_t *h = job->pool->h;
    lmca__keystate *ks = &job->ks[i];
    lmca_err_t err = {0};
    int rc = atomic_load(&ks->failed);

    if (job->c.op != LMCA_OP_SET && ks->get->seen_wids != NULL) {
        finish_guess(job, i);
        return;
    }
    if (job->c.op != LMCA_OP_SET) { /* GET, FILL */
        settle(job, i, rc == LMCA_OK ? lmca_get_end(h, ks->get) : rc, &err);
        return;
    }
    if (rc == LMCA_OK) {
        commit_key(job, i, NULL);
        return;
    }
    lmca_put_abort(h, ks->put);
    /* The error message of a failed part went to the job already. */
    settle(job, i, rc, &err);
}

/* Counts a part of key i done with status `rc`; the last one ends the key. */
static void
part_done(lmca__job *job, size_t i, int rc)
{
    lmca__keystate *ks = &job->ks[i];
    int expected = LMCA_OK;
    if (rc != LMCA_OK)
        atomic_compare_exchange_strong(&ks->failed, &expected, rc);
    if (atomic_fetch_sub_explicit(&ks->parts_left, 1, memory_order_acq_rel) == 1)
        finish_key(job, i);
}

void
lmca__abandon(lmca__task *list)
{
    while (list) {
        lmca__task *next = list->next;
        atomic_store(&list->job->canceled, true);
        lmca__cancel(list);
        lmca__task_done(list);
        list = next;
    }
}

void
lmca__cancel(lmca__task *t)
{
    if (t->kind == LMCA__T_SEGMENT && t->job->c.op == LMCA_OP_SET)
        part_done(t->job, t->first, LMCA_ECANCELED);
    else if (t->kind == LMCA__T_COMMIT) /* its segments landed: take them back */
        lmca_put_abort(t->job->pool->h, t->job->ks[t->first].put);
}

static bool
run_segment(lmca__task *t)
{
    lmca__job *job = t->job;
    lmca_t *h = job->pool->h;
    lmca__keystate *ks = &job->ks[t->first];
    lmca_err_t err = {0};
    int rc, wait;

    if (job->c.op == LMCA_OP_SET) {
        if ((wait = lmca_put_pace(h, ks->put, &err)) > 0) { /* due too far ahead: not yet */
            defer(t, wait);
            return false;
        }
        rc = wait < 0 ? wait : lmca_put_segments(h, ks->put, t->segment, (uint32_t)t->count, &err);
        if (rc != LMCA_OK && (wait = lmca_put_backoff(h, ks->put, rc)) >= 0) {
            defer(t, wait);
            return false;
        }
    } else { /* GET, FILL */
        rc = lmca_get_segments(h, ks->get, t->segment, (uint32_t)t->count, &err);
    }
    /* A guessed get's failure is not the job's yet: it is read again first. */
    if (rc < 0 && (job->c.op == LMCA_OP_SET || ks->get->seen_wids == NULL))
        lmca__job_error(job, rc, err.msg);
    part_done(job, t->first, rc);
    return true;
}

/* FILL key i: place the held payload, or read the segments into the buffer. */
static void
run_fill(lmca__job *job, size_t i)
{
    lmca_get_t *g = &job->gets[i];
    lmca_err_t err = {0};
    int rc = lmca_get_place(g, job->bufs[i], job->lens[i], &err);

    if (rc == LMCA_OK && g->meta.nseg > 1) {
        start_segments(job, i, g);
        return;
    }
    settle(job, i, rc == LMCA_OK ? lmca_get_end(job->pool->h, g) : rc, &err);
}

/* A task of one key. */
static bool
run_key(lmca__task *t)
{
    lmca__job *job = t->job;
    lmca_t *h = job->pool->h;
    lmca_err_t err = {0};
    size_t i = t->first;
    int rc;

    switch (job->c.op) {
    case LMCA_OP_GET:
        run_get_key(t);
        return true;
    case LMCA_OP_FILL:
        run_fill(job, i);
        return true;
    case LMCA_OP_STAT:
        rc = lmca_get_begin(h, &job->gets[i], &err);
        break;
    case LMCA_OP_SET: /* a one-record chunk, begun at submit */
        return commit_key(job, i, t);
    case LMCA_OP_TOUCH:
        rc = lmca_touch(h, job->keys[i], job->pin, &err);
        break;
    default: /* DELETE */
        rc = lmca_remove(h, job->keys[i], &err);
        break;
    }
    settle(job, i, rc, &err);
    return true;
}

bool
lmca__run(lmca__task *t)
{
    lmca__job *job = t->job;

    switch (t->kind) {
    case LMCA__T_SEGMENT:
        return run_segment(t);
    case LMCA__T_TILE:
        if (job->c.op == LMCA_OP_GET)
            run_get_tile(t);
        else if (job->c.op == LMCA_OP_SET)
            run_set_tile(t);
        else
            run_lookup_tile(t);
        return true;
    case LMCA__T_KEY:
        return run_key(t);
    case LMCA__T_COMMIT:
        return commit_key(job, t->first, t);
    }
    return true;
}
