/*
 * test_torn.c - a reader never gets a mix of two writes, a failed put leaves
 * nothing behind where it can help it, and what it cannot remove the sweep
 * finds. Writers are cut off at chosen steps (lmca_put_begin, _segments,
 * _commit), killed, or raced against readers on the same keys.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "lmca_async.h"

#define KIB (1024ull)

/* A handle whose chunks of 3 * 64 KiB + 1000 bytes have three segments. */
static lmca_t *
open_small_segments(uint32_t backpressure_ms)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    th_config_segments(&cfg);
    cfg.batch_threshold_bytes = 16 * KIB; /* segments one by one, as large ones go */
    cfg.backpressure_ms = backpressure_ms;
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    return h;
}

static size_t
chunk_len(lmca_t *h)
{
    return 2 * lmca_limits(h)->target_segment_bytes + 1000;
}

/* A put cut off after segments [0, nseg) of its plan: neither committed nor
   aborted, as a writer killed at that point leaves it. Returns its write id. */
static uint64_t
cut_put(lmca_t *h, const char *key, const uint8_t *buf, size_t len, uint32_t nseg)
{
    lmca_put_t p = {.key = key, .buf = buf, .len = len};
    lmca_err_t err = {0};
    ASSERT_RC(lmca_put_begin(h, &p, &err), LMCA_OK, &err);
    if (nseg > 0)
        ASSERT_RC(lmca_put_segments(h, &p, 0, nseg, &err), LMCA_OK, &err);
    return p.meta.wid;
}

TEST(overwrite_cut_after_some_segments_reads_old_or_miss_never_mixed)
{
    lmca_t *h = open_small_segments(5000);
    size_t len = chunk_len(h), got;
    uint8_t *a = malloc(len), *b = malloc(len), *out = malloc(len);
    lmca_stats_t st;
    lmca_err_t err = {0};

    th_fill(a, len, 1);
    th_fill(b, len, 2);
    for (uint32_t cut = 0; cut <= 3; cut++) {
        const char *key = th_key("torn");
        ASSERT_RC(lmca_put(h, key, a, len, NULL, &err), LMCA_OK, &err);
        cut_put(h, key, b, len, cut);
        int rc = lmca_get(h, key, out, len, &got, NULL, &err);
        /* Before any new segment landed the old chunk is whole; after, its
           segments are no longer all of its write. */
        ASSERT_RC(rc, cut == 0 ? LMCA_OK : LMCA_MISS, &err);
        if (rc == LMCA_OK)
            ASSERT(memcmp(out, a, len) == 0);
        /* The next whole put wins. */
        ASSERT_RC(lmca_put(h, key, b, len, NULL, &err), LMCA_OK, &err);
        ASSERT_RC(lmca_get(h, key, out, len, &got, NULL, &err), LMCA_OK, &err);
        ASSERT(memcmp(out, b, len) == 0);
    }
    lmca_stats(h, &st);
    ASSERT_EQ(st.torn, 3);
    free(a);
    free(b);
    free(out);
    lmca_close(h);
}

TEST(first_write_cut_before_its_commit_is_a_miss)
{
    lmca_t *h = open_small_segments(5000);
    size_t len = chunk_len(h), got = 1, count = 1;
    uint8_t *a = malloc(len), *out = malloc(len);
    const char *key = th_key("uncommitted");
    lmca_err_t err = {0};

    th_fill(a, len, 3);
    cut_put(h, key, a, len, 3);
    ASSERT_RC(lmca_get(h, key, out, len, &got, NULL, &err), LMCA_MISS, &err);
    ASSERT_RC(lmca_exists(h, key, &err), LMCA_MISS, &err);
    ASSERT_RC(lmca_prefix(h, &key, 1, &count, NULL, &err), LMCA_OK, &err);
    ASSERT_EQ(count, 0);
    free(a);
    free(out);
    lmca_close(h);
}

/* ---------------------------------------------------------------------------
 * Racing writers and readers. Every writer's payload says who wrote it: its
 * first 16 bytes are (writer, generation), the rest follows from them. A read
 * that hits must be exactly one writer's payload.
 */

#define KEYS 4
#define WRITERS 3
#define READERS 3
#define RACE_SECONDS 6

typedef struct {
    lmca_t *h;
    const char *keys[KEYS];
    size_t len;
    int id;
    volatile bool stop;
    unsigned long hits, misses, wrong, errors;
    int first_error; /* its status, for the report */
} race;

static void
payload(uint8_t *buf, size_t len, uint32_t writer, uint32_t gen)
{
    th_fill(buf, len, writer * 1000003u + gen);
    memcpy(buf, &writer, 4);
    memcpy(buf + 4, &gen, 4);
}

static bool
is_one_write(const uint8_t *got, uint8_t *scratch, size_t len)
{
    uint32_t writer, gen;
    memcpy(&writer, got, 4);
    memcpy(&gen, got + 4, 4);
    if (writer >= WRITERS)
        return false;
    payload(scratch, len, writer, gen);
    return memcmp(scratch, got, len) == 0;
}

typedef struct {
    race *r;
    uint32_t id;
    lmca_pool_t *pool; /* readers: one each, so each drains only its own */
} racer;

static void *
writer_main(void *arg)
{
    racer *w = arg;
    race *r = w->r;
    uint8_t *buf = malloc(r->len);
    for (uint32_t gen = 1; !r->stop; gen++) {
        payload(buf, r->len, w->id, gen);
        int rc = lmca_put(r->h, r->keys[gen % KEYS], buf, r->len, NULL, NULL);
        if (rc != LMCA_OK && __atomic_fetch_add(&r->errors, 1, __ATOMIC_RELAXED) == 0)
            r->first_error = rc;
    }
    free(buf);
    return NULL;
}

/* Readers alternate between the blocking get and the pool's batch get. */
static int
read_one(race *r, lmca_pool_t *pool, const char *key, uint8_t *out, uint32_t turn)
{
    size_t got;
    if (turn % 2 == 0) {
        int rc = lmca_get(r->h, key, out, r->len, &got, NULL, NULL);
        return rc == LMCA_OK && got != r->len ? -100 : rc;
    }
    void *bufs[1] = {out};
    size_t lens[1] = {r->len};
    lmca_batch_t b = {.op = LMCA_OP_GET, .n = 1, .keys = &key, .bufs = bufs, .lens = lens,
                      .udata = out};
    uint64_t id;
    if (lmca_pool_submit(pool, &b, &id, NULL) != LMCA_OK)
        return -101;
    for (;;) {
        lmca_completion_t *c = lmca_pool_drain(pool);
        if (c != NULL) {
            int rc = c->id != id || c->next ? -102
                     : c->status != LMCA_OK ? c->status
                     : c->results[0]        ? LMCA_OK
                                            : LMCA_MISS;
            lmca_completion_free(c);
            return rc;
        }
        usleep(200);
    }
}

static void *
reader_main(void *arg)
{
    racer *rd = arg;
    race *r = rd->r;
    uint8_t *out = malloc(r->len), *scratch = malloc(r->len);
    for (uint32_t turn = rd->id; !r->stop; turn++) {
        int rc = read_one(r, rd->pool, r->keys[turn % KEYS], out, turn);
        if (rc == LMCA_OK && is_one_write(out, scratch, r->len))
            __atomic_fetch_add(&r->hits, 1, __ATOMIC_RELAXED);
        else if (rc == LMCA_OK)
            __atomic_fetch_add(&r->wrong, 1, __ATOMIC_RELAXED);
        else if (rc == LMCA_MISS)
            __atomic_fetch_add(&r->misses, 1, __ATOMIC_RELAXED);
        else if (__atomic_fetch_add(&r->errors, 1, __ATOMIC_RELAXED) == 0)
            r->first_error = rc;
    }
    free(out);
    free(scratch);
    return NULL;
}

TEST(racing_writers_and_readers_never_see_mixed_bytes)
{
    race r = {.h = open_small_segments(5000)};
    pthread_t t[WRITERS + READERS];
    racer who[WRITERS + READERS];
    lmca_err_t err = {0};

    r.len = chunk_len(r.h);
    for (int i = 0; i < KEYS; i++)
        r.keys[i] = strdup(th_key("race"));
    for (uint32_t i = 0; i < WRITERS + READERS; i++) {
        who[i] = (racer){&r, i < WRITERS ? i : i - WRITERS, NULL};
        if (i >= WRITERS)
            ASSERT_RC(lmca_pool_open(r.h, 2, &who[i].pool, &err), LMCA_OK, &err);
        pthread_create(&t[i], NULL, i < WRITERS ? writer_main : reader_main, &who[i]);
    }
    sleep(RACE_SECONDS);
    r.stop = true;
    for (int i = 0; i < WRITERS + READERS; i++)
        pthread_join(t[i], NULL);
    printf("    race: %lu hits, %lu misses, %lu wrong, %lu errors%s%s\n", r.hits, r.misses,
           r.wrong, r.errors, r.errors ? ", the first " : "",
           r.errors ? lmca_status_name(r.first_error) : "");
    ASSERT_EQ(r.wrong, 0);
    ASSERT_EQ(r.errors, 0);
    ASSERT(r.hits > 0); /* the race let reads through, so the check checked something */
    for (int i = WRITERS; i < WRITERS + READERS; i++)
        lmca_pool_destroy(who[i].pool);
    for (int i = 0; i < KEYS; i++)
        free((void *)r.keys[i]);
    lmca_close(r.h);
}

/* ---------------------------------------------------------------------------
 * Failed puts, and what the sweep finds.
 */

static const char *
segment_digest(const char *key, uint32_t i)
{
    char reckey[LMCA_KEY_MAX + 16];
    snprintf(reckey, sizeof reckey, "%s|s|%u", key, i);
    return th_digest_hex(TH_SET, reckey);
}

static bool
segment_exists(const char *key, uint32_t i)
{
    char reckey[LMCA_KEY_MAX + 16];
    snprintf(reckey, sizeof reckey, "%s|s|%u", key, i);
    return th_record_ttl("small", reckey, NULL) == 0;
}

static void
fault(const char *fmt, const char *arg)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, fmt, arg);
    ASSERT(strcmp(th_info(cmd), "ok") == 0);
}

TEST(failed_put_removes_the_segments_it_wrote)
{
    lmca_t *h;
    size_t len;
    uint8_t *a;
    lmca_stats_t st;
    lmca_err_t err = {0};

    th_need_fixture("fault injection");
    h = open_small_segments(0); /* refusals fail at once: no backpressure */
    len = chunk_len(h);
    a = malloc(len);
    th_fill(a, len, 5);
    /* Segment 2 is refused: segments 0 and 1 landed and must go again. */
    const char *key = th_key("abort");
    fault("fixture-fault:kind=result;code=18;op=write;digest=%s", segment_digest(key, 2));
    ASSERT_RC(lmca_put(h, key, a, len, NULL, &err), LMCA_EBUSY, &err);
    for (uint32_t i = 0; i < 3; i++)
        ASSERT(!segment_exists(key, i));
    /* The commit is refused: all three segments landed and must go again. */
    char mkey[LMCA_KEY_MAX + 16];
    key = th_key("abort");
    snprintf(mkey, sizeof mkey, "%s|m", key);
    fault("fixture-fault:kind=result;code=8;op=write;digest=%s", th_digest_hex(TH_SET, mkey));
    ASSERT_RC(lmca_put(h, key, a, len, NULL, &err), LMCA_EFULL, &err);
    ASSERT_CONTAINS(err.msg, "storage-engine.stop-writes-used-pct=");
    for (uint32_t i = 0; i < 3; i++)
        ASSERT(!segment_exists(key, i));
    lmca_stats(h, &st);
    ASSERT_EQ(st.puts_aborted, 2);
    ASSERT_EQ(st.segments_removed, 2 + 3);
    ASSERT_EQ(st.segments_left, 0);
    free(a);
    lmca_close(h);
}

/* What lmca_sweep reported, for the write ids a test cares about. */
typedef struct {
    uint64_t wids[4];
    unsigned orphans[4], broken[4], pinned_orphans;
} sweep_seen;

static bool
on_swept(void *udata, const lmca_sweep_rec_t *rec)
{
    sweep_seen *s = udata;
    for (int i = 0; i < 4; i++) {
        if (s->wids[i] == 0 || rec->wid != s->wids[i])
            continue;
        s->orphans[i] += rec->reason == LMCA_SWEEP_ORPHAN_SEGMENT;
        s->broken[i] += rec->reason == LMCA_SWEEP_BROKEN_META;
        s->pinned_orphans += rec->reason == LMCA_SWEEP_ORPHAN_SEGMENT && rec->ttl == UINT32_MAX;
    }
    return true;
}

static uint64_t
wid_of(lmca_t *h, const char *key)
{
    lmca_meta_t m;
    lmca_err_t err = {0};
    ASSERT_RC(lmca_stat(h, key, &m, &err), LMCA_OK, &err);
    lmca_meta_clear(&m);
    return m.wid;
}

TEST(sweep_finds_what_killed_and_overwriting_puts_leave)
{
    lmca_t *h = open_small_segments(5000);
    size_t len = chunk_len(h), small = 70 * KIB;
    uint8_t *a = malloc(len);
    const char *killed = th_key("killed"), *shrunk = th_key("shrunk"), *broken = th_key("broken");
    lmca_put_opts_t pin = {.pin = true};
    sweep_seen seen;

    memset(&seen, 0, sizeof seen);
    lmca_err_t err = {0};
    int status;
    pid_t pid;

    th_fill(a, len, 6);
    /* A writer killed between its segments and its commit. */
    int fds[2];
    ASSERT(pipe(fds) == 0);
    if ((pid = fork()) == 0) {
        lmca_t *child = open_small_segments(5000);
        uint64_t wid = cut_put(child, killed, a, len, 2);
        if (write(fds[1], &wid, sizeof wid) != sizeof wid)
            _exit(2);
        raise(SIGKILL); /* no abort, no close: as a crash leaves it */
    }
    ASSERT(read(fds[0], &seen.wids[0], sizeof seen.wids[0]) == sizeof seen.wids[0]);
    ASSERT(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
    /* A pinned chunk overwritten with fewer segments: its old tail is pinned. */
    ASSERT_RC(lmca_put(h, shrunk, a, len, &pin, &err), LMCA_OK, &err);
    seen.wids[1] = wid_of(h, shrunk);
    ASSERT_RC(lmca_put(h, shrunk, a, small, &pin, &err), LMCA_OK, &err);
    /* A chunk whose segment vanished. */
    ASSERT_RC(lmca_put(h, broken, a, len, NULL, &err), LMCA_OK, &err);
    seen.wids[2] = wid_of(h, broken);
    char reckey[LMCA_KEY_MAX + 16];
    snprintf(reckey, sizeof reckey, "%s|s|1", broken);
    ASSERT_EQ(th_record_remove("small", reckey), 0);

    ASSERT_RC(lmca_sweep(h, on_swept, &seen, &err), LMCA_OK, &err);
    ASSERT_EQ(seen.orphans[0], 2);  /* the killed writer's two segments */
    ASSERT_EQ(seen.orphans[1], 1);  /* the old third segment: the new chunk has two */
    ASSERT_EQ(seen.pinned_orphans, 1);
    ASSERT_EQ(seen.broken[2], 1);   /* its meta record */
    ASSERT_EQ(seen.orphans[2], 0);  /* its remaining segments belong to it */
    /* Pinned records would stay forever: the chunk, and the tail it orphaned. */
    ASSERT_RC(lmca_remove(h, shrunk, &err), LMCA_OK, &err);
    snprintf(reckey, sizeof reckey, "%s|s|2", shrunk);
    ASSERT_EQ(th_record_remove("small", reckey), 0);
    free(a);
    lmca_close(h);
}

TEST(sweep_reports_can_be_removed_by_digest)
{
    lmca_t *h = open_small_segments(5000);
    size_t len = chunk_len(h);
    uint8_t *a = malloc(len);
    const char *key = th_key("swept");
    sweep_seen seen;

    memset(&seen, 0, sizeof seen);
    lmca_err_t err = {0};

    th_fill(a, len, 7);
    seen.wids[0] = cut_put(h, key, a, len, 3);
    ASSERT_RC(lmca_sweep(h, on_swept, &seen, &err), LMCA_OK, &err);
    ASSERT_EQ(seen.orphans[0], 3);
    for (uint32_t i = 0; i < 3; i++) {
        char reckey[LMCA_KEY_MAX + 16];
        uint8_t digest[20];
        const char *hex;
        snprintf(reckey, sizeof reckey, "%s|s|%u", key, i);
        hex = th_digest_hex(TH_SET, reckey);
        for (int k = 0; k < 20; k++)
            sscanf(hex + 2 * k, "%2hhx", &digest[k]);
        ASSERT_RC(lmca_remove_record(h, digest, &err), LMCA_OK, &err);
        ASSERT(!segment_exists(key, i));
        ASSERT_RC(lmca_remove_record(h, digest, &err), LMCA_MISS, &err);
    }
    free(a);
    lmca_close(h);
}

static bool
count_reports(void *udata, const lmca_sweep_rec_t *rec)
{
    (void)rec;
    ++*(unsigned *)udata;
    return true;
}

/* Defect: the sweep of a set with no schema record sorted a NULL array (UB that
   UBSan halts on). */
TEST(sweep_of_an_empty_set_reports_nothing)
{
    lmca_config_t cfg;
    lmca_t *h = NULL;
    lmca_err_t err = {0};
    char set[40];
    unsigned reports = 0;

    th_config(&cfg, "lmcache");
    snprintf(set, sizeof set, "lmca_empty_%d", (int)getpid());
    cfg.set = set; /* never written to */
    ASSERT_RC(lmca_open(&cfg, &h, &err), LMCA_OK, &err);
    ASSERT_RC(lmca_sweep(h, count_reports, &reports, &err), LMCA_OK, &err);
    ASSERT_EQ(reports, 0);
    lmca_close(h);
}

TEST_LIST = {
    T(overwrite_cut_after_some_segments_reads_old_or_miss_never_mixed),
    T(first_write_cut_before_its_commit_is_a_miss),
    T(racing_writers_and_readers_never_see_mixed_bytes),
    T(failed_put_removes_the_segments_it_wrote),
    T(sweep_finds_what_killed_and_overwriting_puts_leave),
    T(sweep_reports_can_be_removed_by_digest),
    T(sweep_of_an_empty_set_reports_nothing),
};
TEST_MAIN()
