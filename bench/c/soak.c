/*
 * soak.c - a bounded soak of the asynchronous layer (lmca_pool_*): many batches
 * in flight for a fixed time, mixed operations and chunk sizes, every GET hit
 * checked byte for byte. Prints RSS and throughput per interval, and fails when
 * bytes come back wrong, a batch never completes, a completion waits without
 * the eventfd saying so, an error occurs or RSS grows.
 *
 *   soak [-h hosts] [-n namespace] [-s set] [-d seconds] [-i seconds] [-w workers]
 *        [-q batches] [-k keys] [-t ttl] [-o setting=value]... [--max-rss-growth MiB]
 *        [--allow-errors] [--max-chunk bytes] [--inflight-mib MiB]
 *
 * Workload. One thread keeps -q batches in flight: it submits a new batch when
 * one completes and waits on the pool's eventfd in between. A batch is a SET or
 * GET of 1-8 keys, an EXISTS or PREFIX of 1-16 keys or a DELETE of 1-2 keys, over
 * a fixed keyspace "soak-<run>-<i>", with chunk sizes from a weighted mix.
 *
 * Completions. The soak drains only when poll() says the eventfd is readable,
 * as an event loop would; when the pool holds completed batches (its stats say
 * so) and the fd stays quiet for a second, that is a lost wakeup: counted, and
 * drained anyway so that the run goes on.
 *
 * bench/c/soak_workload.c plans the batches, writes their payloads from a fixed
 * buffer arena and checks every GET hit against what its own header claims (its
 * opening comment says how); this file drives the pool and reports.
 *
 * Besides: -o sets an engine setting by name (lmca_config_set), e.g.
 * -o read_timeout_ms=5000 for a slow server; --max-chunk drops the size classes
 * above it (many more, smaller batches); --inflight-mib sizes the buffer arena.
 *
 * Exit status 0 and "1 passed, 0 failed" as the last line when the run passed,
 * else 1 and "0 passed, 1 failed" (scripts/test.sh tallies that line); 2 for a
 * usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lmca.h"
#include "lmca_async.h"
#include "soak.h"

#define DRAIN_TIMEOUT_S 60.0 /* at the end, how long in-flight batches may take */
#define LOST_WAKEUP_S 1.0    /* completions waiting this long unsignalled: a bug */
#define MAX_DROPPED_PLANS 4 /* per top-up, while a batch waits for buffers */
#define MAX_LOG_PRINTED 20

/* ---------------------------------------------------------------------------
 * Options.
 */

static void
usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [-h hosts] [-n namespace] [-s set] [-d seconds] [-i seconds]\n"
            "       [-w workers] [-q batches] [-k keys] [-t ttl] [-o setting=value]...\n"
            "       [--max-rss-growth MiB] [--allow-errors] [--max-chunk bytes]\n"
            "       [--inflight-mib MiB]\n",
            argv0);
}

/* Parses a number within [min, max]; false for junk or out of range. */
static bool
parse_number(const char *text, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

enum { OPT_RSS = 256, OPT_ALLOW, OPT_MAX_CHUNK, OPT_INFLIGHT, OPT_HELP };

static const struct option long_options[] = {
    {"max-rss-growth", required_argument, NULL, OPT_RSS},
    {"allow-errors", no_argument, NULL, OPT_ALLOW},
    {"max-chunk", required_argument, NULL, OPT_MAX_CHUNK},
    {"inflight-mib", required_argument, NULL, OPT_INFLIGHT},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* Applies one option; false when its value is bad. */
static bool
apply_option(opts_t *o, int c, const char *arg)
{
    double v = 0;
    switch (c) {
    case 'h': o->hosts = arg; return true;
    case 'n': o->ns = arg; return true;
    case 's': o->set = arg; return true;
    case 'd': return parse_number(arg, 1, 1e7, &o->duration_s);
    case 'i': return parse_number(arg, 0.1, 1e7, &o->interval_s);
    case 'w': return parse_number(arg, 1, 256, &v) && (o->workers = (unsigned)v, true);
    case 'q': return parse_number(arg, 1, 4096, &v) && (o->inflight = (unsigned)v, true);
    case 'k': return parse_number(arg, 1, 1 << 24, &v) && (o->keyspace = (unsigned)v, true);
    case 't': return parse_number(arg, -1, 1e9, &v) && (o->ttl = (int64_t)v, true);
    case 'o':
        if (o->nsettings == sizeof o->settings / sizeof o->settings[0] || !strchr(arg, '='))
            return false;
        o->settings[o->nsettings++] = arg;
        return true;
    case OPT_RSS: return parse_number(arg, 0, 1e9, &o->max_rss_growth_mib);
    case OPT_ALLOW: o->allow_errors = true; return true;
    case OPT_MAX_CHUNK: return parse_number(arg, 0, 1e12, &v) && (o->max_chunk = (size_t)v, true);
    case OPT_INFLIGHT: return parse_number(arg, 1, 1e6, &o->inflight_mib);
    default: return false;
    }
}

/* "-d" or "--max-chunk", for messages. */
static const char *
option_name(int c)
{
    static char name[32];
    snprintf(name, sizeof name, "-%c", c);
    for (const struct option *lo = long_options; lo->name; lo++)
        if (lo->val == c)
            snprintf(name, sizeof name, "--%s", lo->name);
    return name;
}

/* @return 0, or 2 for a usage error (already reported). */
static int
parse_options(int argc, char **argv, opts_t *o)
{
    int c;
    *o = (opts_t){.hosts = getenv("AEROSPIKE_TEST_HOSTS"), .ns = "lmcache", .set = "lmca_soak",
                  .duration_s = 120, .interval_s = 5, .workers = 8, .inflight = 32,
                  .keyspace = 256, .ttl = 600, .max_rss_growth_mib = 32, .inflight_mib = 512,
                  .max_chunk = SIZE_MAX};
    while ((c = getopt_long(argc, argv, "h:n:s:d:i:w:q:k:t:o:", long_options, NULL)) != -1) {
        if (c == OPT_HELP || !apply_option(o, c, optarg)) {
            if (c != OPT_HELP && c != '?')
                fprintf(stderr, "%s: bad value for %s: %s\n", argv[0], option_name(c),
                        optarg ? optarg : "");
            usage(argv[0]);
            return 2;
        }
    }
    if (optind < argc || o->hosts == NULL || *o->hosts == '\0') {
        fprintf(stderr, "%s: give -h host:port or set AEROSPIKE_TEST_HOSTS\n", argv[0]);
        usage(argv[0]);
        return 2;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Time and RSS.
 */

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Resident set size in bytes (statm's second field, in pages); 0 if unreadable. */
static double
rss_bytes(void)
{
    unsigned long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

/* ---------------------------------------------------------------------------
 * Errors.
 */

static unsigned
error_kind(int status)
{
    return status < 0 && -status < ERR_KINDS ? (unsigned)-status : 0;
}

/* Counts an error by kind and prints the first message of each kind (a
   completion's message starts with the status name already). */
static void
count_error(soak_t *s, int status, const char *msg)
{
    unsigned kind = error_kind(status);
    const char *name = lmca_status_name(status);
    s->iv[N_ERRORS]++;
    s->errors[kind]++;
    if (!s->error_printed[kind]) {
        s->error_printed[kind] = true;
        if (strncmp(msg, name, strlen(name)) == 0)
            printf("first error of its kind: %s\n", msg);
        else
            printf("first error of its kind: %s: %s\n", name, msg);
    }
}

/* Errors a healthy cluster can still give now and then (a slow node, a
   connection reset, a hot key); --allow-errors tolerates only these. */
static bool
error_is_transient(unsigned kind)
{
    return kind == (unsigned)-LMCA_ETIMEOUT || kind == (unsigned)-LMCA_ECONNECTION ||
           kind == (unsigned)-LMCA_EBUSY;
}

/* ---------------------------------------------------------------------------
 * Submitting.
 */

/* The bytes a batch moves, for the bytes-in-flight means in the reports. */
static double
batch_bytes(const slot_t *sl)
{
    double bytes = 0;
    for (size_t i = 0; i < sl->n; i++)
        bytes += (double)sl->len[i];
    return bytes;
}

static void
submit_slot(soak_t *s, slot_t *sl)
{
    static const uint8_t md[100] = {1, 2, 3};
    char names[MAX_KEYS][48];
    const char *keys[MAX_KEYS];
    void *bufs[MAX_KEYS];
    lmca_put_opts_t opts[MAX_KEYS];
    bool data = sl->op == LMCA_OP_GET || sl->op == LMCA_OP_SET;
    lmca_err_t err = {0};
    uint64_t id = 0;

    prepare_buffers(s, sl);
    for (size_t i = 0; i < sl->n; i++) {
        key_name(s, sl->key[i], names[i], sizeof names[i]);
        keys[i] = names[i];
        bufs[i] = sl->buf[i];
        opts[i] = (lmca_put_opts_t){.md = md, .md_len = sizeof md, .serde = "soak"};
    }
    lmca_batch_t batch = {.op = sl->op, .prio = sl->prio, .n = sl->n, .keys = keys,
                          .bufs = data ? bufs : NULL,
                          .lens = data ? sl->len : NULL,
                          .opts = sl->with_opts ? opts : NULL,
                          .udata = (void *)(uintptr_t)(sl - s->slots)};
    int rc = lmca_pool_submit(s->pool, &batch, &id, &err);
    if (rc != LMCA_OK) {
        count_error(s, rc, err.msg);
        release_buffers(s, sl);
        sl->state = SLOT_FREE;
        return;
    }
    /* One submitter, so ids must rise; a repeat would hide a double completion. */
    if (id <= s->last_id) {
        printf("submit returned id %llu after %llu\n", (unsigned long long)id,
               (unsigned long long)s->last_id);
        s->unexpected++;
    }
    s->last_id = id;
    sl->id = id;
    sl->state = SLOT_BUSY;
    s->inflight++;
    s->bytes_inflight += batch_bytes(sl);
    s->submitted++;
}

static slot_t *
free_slot(soak_t *s)
{
    for (unsigned i = 0; i < s->o.inflight; i++)
        if (s->slots[i].state == SLOT_FREE)
            return &s->slots[i];
    return NULL;
}

/* Bit mask of the size classes whose buffers a batch needs. */
static unsigned
classes_needed(const slot_t *sl)
{
    unsigned mask = 0;
    for (size_t i = 0; i < sl->n; i++)
        if (sl->len[i] > 0)
            mask |= 1u << sl->cls[i];
    return mask;
}

/* Submits until -q batches are in flight. A batch whose buffers are all taken
   waits, and goes first when they come back; meanwhile later batches that need
   none of its size classes go ahead (so that one busy class does not stall the
   rest), and those that do are dropped unsubmitted (else the waiting one could
   be overtaken forever). A plan has no effect until it is submitted. */
static void
top_up(soak_t *s)
{
    unsigned dropped = 0;

    if (s->waiting && acquire_buffers(s, s->waiting)) {
        submit_slot(s, s->waiting);
        s->waiting = NULL;
    }
    while (s->inflight + (s->waiting != NULL) < s->o.inflight && dropped < MAX_DROPPED_PLANS) {
        slot_t *sl = free_slot(s);
        plan_batch(s, sl);
        bool held_back = s->waiting && (classes_needed(sl) & classes_needed(s->waiting));
        if (!held_back && acquire_buffers(s, sl)) {
            submit_slot(s, sl);
        } else if (s->waiting == NULL) {
            s->waiting = sl;
        } else {
            sl->state = SLOT_FREE;
            dropped++;
        }
    }
}

/* ---------------------------------------------------------------------------
 * Completions.
 */

static void
count_results(soak_t *s, const slot_t *sl, const lmca_completion_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        bool yes = c->results[i] != 0;
        switch (c->op) {
        case LMCA_OP_GET:
            if (yes)
                check_hit(s, sl, i);
            else
                s->iv[N_MISS]++;
            break;
        case LMCA_OP_SET: s->iv[yes ? N_STORED : N_UNSTORED]++; break;
        case LMCA_OP_EXISTS:
        case LMCA_OP_PREFIX: s->iv[yes ? N_FOUND : N_ABSENT]++; break;
        case LMCA_OP_DELETE: s->iv[yes ? N_REMOVED : N_NOTHING]++; break;
        default: break; /* the soak submits no STAT, FILL or TOUCH */
        }
    }
}

/* The slot whose batch `c` completes (udata holds its index), or NULL for a
   completion of a free slot, with another id or another shape: a double or
   stray one. */
static slot_t *
completed_slot(const soak_t *s, const lmca_completion_t *c)
{
    uintptr_t index = (uintptr_t)c->udata;
    slot_t *sl = index < s->o.inflight ? &s->slots[index] : NULL;
    if (sl && sl->state == SLOT_BUSY && sl->id == c->id && sl->op == c->op && sl->n == c->n)
        return sl;
    return NULL;
}

static void
take(soak_t *s, lmca_completion_t *c)
{
    slot_t *sl = completed_slot(s, c);
    s->taken++;
    if (sl == NULL) {
        printf("unexpected completion: id %llu op %d n %zu\n", (unsigned long long)c->id,
               (int)c->op, c->n);
        s->unexpected++;
        return;
    }
    s->iv[N_GET + c->op - LMCA_OP_GET]++;
    if (c->status != LMCA_OK)
        count_error(s, c->status, c->error);
    count_results(s, sl, c);
    release_buffers(s, sl);
    sl->state = SLOT_FREE;
    s->inflight--;
    s->bytes_inflight -= batch_bytes(sl);
}

static void
drain(soak_t *s)
{
    for (lmca_completion_t *c = lmca_pool_drain(s->pool), *next; c; c = next) {
        next = c->next;
        take(s, c);
        lmca_completion_free(c);
    }
}

/* Called when the eventfd stayed quiet: the pool has completed batches this
   thread has not taken, and still has after LOST_WAKEUP_S, so no signal is
   coming. A caller that waits only on the fd would hang; count it, then take
   them so that the soak goes on. */
static void
check_unsignalled(soak_t *s)
{
    lmca_pool_stats_t ps;
    double t = now();
    lmca_pool_stats(s->pool, &ps);
    if (ps.completed <= s->taken) {
        s->unsignalled_since = 0;
        return;
    }
    if (s->unsignalled_since == 0) {
        s->unsignalled_since = t;
        return;
    }
    if (t - s->unsignalled_since < LOST_WAKEUP_S)
        return;
    if (s->lost_wakeups++ < MAX_WRONG_PRINTED)
        printf("LOST WAKEUP: %llu completions waited %.1f s with the eventfd not readable "
               "(%u batches in flight)\n",
               (unsigned long long)(ps.completed - s->taken), t - s->unsignalled_since,
               s->inflight);
    s->unsignalled_since = 0;
    drain(s);
}

/* Waits up to timeout_ms for the eventfd, then takes what completed. */
static void
wait_for_completions(soak_t *s, int timeout_ms)
{
    struct pollfd pfd = {.fd = lmca_pool_fd(s->pool), .events = POLLIN};
    int ready = poll(&pfd, 1, timeout_ms < 1 ? 1 : timeout_ms);
    if (ready > 0) {
        s->unsignalled_since = 0;
        drain(s);
    } else if (ready == 0) {
        check_unsignalled(s);
    }
}

/* ---------------------------------------------------------------------------
 * Reports.
 */

/* Adds what was in flight since the last sample (the count after the previous
   top-up: completions lower it, but the soak sees them only when it drains). */
static void
sample_inflight(soak_t *s, double t)
{
    s->inflight_area += s->last_inflight * (t - s->sampled_at);
    s->bytes_area += s->last_bytes_inflight * (t - s->sampled_at);
    s->last_inflight = s->inflight;
    s->last_bytes_inflight = s->bytes_inflight;
    s->sampled_at = t;
}

static void
report(soak_t *s, double t)
{
    double secs = t - s->last_report, rss = rss_bytes();
    lmca_pool_stats_t ps;
    lmca_stats_t es;
    uint64_t batches = 0;

    sample_inflight(s, t);
    lmca_pool_stats(s->pool, &ps);
    lmca_stats(s->h, &es);
    for (int op = N_GET; op <= N_DELETE; op++)
        batches += s->iv[op];
    printf("t=%4.0fs rss=%7.1fMiB ops=%5.0f/s (get %llu set %llu ex %llu pfx %llu del %llu)"
           "  rd=%.2fGB/s wr=%.2fGB/s  hit=%llu miss=%llu wrong=%llu err=%llu torn=%llu"
           " corrupt=%llu infl=%.1f/%.0fMiB\n",
           t - s->start, rss / MIB, batches / secs, (unsigned long long)s->iv[N_GET],
           (unsigned long long)s->iv[N_SET], (unsigned long long)s->iv[N_EXISTS],
           (unsigned long long)s->iv[N_PREFIX], (unsigned long long)s->iv[N_DELETE],
           (ps.bytes_read - s->pool_at_report.bytes_read) / secs / 1e9,
           (ps.bytes_written - s->pool_at_report.bytes_written) / secs / 1e9,
           (unsigned long long)s->iv[N_HIT], (unsigned long long)s->iv[N_MISS],
           (unsigned long long)s->iv[N_WRONG], (unsigned long long)s->iv[N_ERRORS],
           (unsigned long long)(es.torn - s->engine_at_report.torn),
           (unsigned long long)(es.corrupt - s->engine_at_report.corrupt),
           s->inflight_area / secs, s->bytes_area / secs / MIB);
    fflush(stdout);
    for (int i = 0; i < N_COUNT; i++) {
        s->total[i] += s->iv[i];
        s->iv[i] = 0;
    }
    s->inflight_area = s->bytes_area = 0;
    s->pool_at_report = ps;
    s->engine_at_report = es;
    if (s->reports++ == 0)
        s->rss_warm = rss;
    s->rss_max = rss > s->rss_max ? rss : s->rss_max;
    s->rss_end = rss;
    s->last_report = t;
}

/* ---------------------------------------------------------------------------
 * Setup and teardown.
 */

/* Engine notices: INFO (the limits found at open) and WARNING, a bounded
   number of lines. Called from worker threads, hence the atomic. */
static void
log_line(void *udata, int level, const char *msg)
{
    atomic_uint *printed = udata;
    if (level >= LMCA_LOG_INFO && atomic_fetch_add(printed, 1) < MAX_LOG_PRINTED)
        printf("engine %s: %s\n", level >= LMCA_LOG_WARNING ? "WARNING" : "INFO", msg);
}

static int
open_engine(soak_t *s)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};

    lmca_config_init(&cfg);
    cfg.hosts = s->o.hosts;
    cfg.namespace_ = s->o.ns;
    cfg.set = s->o.set;
    cfg.default_ttl_seconds = s->o.ttl;
    cfg.log_cb = log_line;
    cfg.log_udata = &s->log_printed;
    for (unsigned i = 0; i < s->o.nsettings; i++) {
        char name[64];
        const char *eq = strchr(s->o.settings[i], '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - s->o.settings[i]), s->o.settings[i]);
        if (lmca_config_set(&cfg, name, eq + 1, &err) != LMCA_OK) {
            printf("soak: -o %s: %s\n", s->o.settings[i], err.msg);
            return -1;
        }
    }
    if (lmca_open(&cfg, &s->h, &err) != LMCA_OK) {
        printf("soak: lmca_open %s: %s: %s\n", s->o.hosts, lmca_status_name(err.status),
               err.msg);
        return -1;
    }
    if (lmca_pool_open(s->h, s->o.workers, &s->pool, &err) != LMCA_OK) {
        printf("soak: lmca_pool_open: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int
alloc_state(soak_t *s)
{
    s->keys = calloc(s->o.keyspace, sizeof *s->keys);
    s->slots = calloc(s->o.inflight, sizeof *s->slots);
    if (s->keys == NULL || s->slots == NULL)
        return -1;
    return classes_init(s) ? 0 : -1;
}

/* What the keyspace can hold at worst: per key, the segments of its largest
   segmented chunk (an overwrite with fewer segments leaves the old tail until
   its TTL) plus its largest single-record chunk. */
static double
worst_stored(const soak_t *s)
{
    uint64_t inline_max = lmca_limits(s->h)->single_record_threshold_bytes;
    double segments = 0, single = 0;
    for (size_t c = 0; c < NCLASSES; c++) {
        double bytes = s->cls[c].weight ? (double)s->cls[c].bytes : 0;
        if (s->cls[c].bytes > inline_max)
            segments = bytes > segments ? bytes : segments;
        else
            single = bytes > single ? bytes : single;
    }
    return (segments + single) * s->o.keyspace;
}

static void
print_setup(const soak_t *s)
{
    double arena = 0;
    printf("soak: lmca %s, libaerospike %s; %s %s/%s, run %08x\n", lmca_version(),
           lmca_aerospike_version(), s->o.hosts, s->o.ns, s->o.set, s->run);
    printf("soak: %.0f s, reports every %.0f s, %u workers, %u batches in flight, %u keys, "
           "ttl %lld\nsoak: buffers:",
           s->o.duration_s, s->o.interval_s, s->o.workers, s->o.inflight, s->o.keyspace,
           (long long)s->o.ttl);
    for (size_t c = 0; c < NCLASSES; c++) {
        if (s->cls[c].weight == 0 || s->cls[c].bytes == 0)
            continue;
        arena += (double)s->cls[c].count * s->cls[c].bytes;
        if (s->cls[c].bytes >= (1u << 20))
            printf(" %zuMiB x%u", s->cls[c].bytes >> 20, s->cls[c].count);
        else
            printf(" %zuKiB x%u", s->cls[c].bytes >> 10, s->cls[c].count);
    }
    printf(" = %.1f MiB (the most bytes in flight)\n", arena / MIB);
    printf("soak: the keys may take up to %.1f GiB on the server\n", worst_stored(s) / MIB / 1024);
    fflush(stdout);
}

static void
free_state(soak_t *s)
{
    for (size_t c = 0; c < NCLASSES; c++) {
        free(s->cls[c].block);
        free(s->cls[c].free);
    }
    free(s->keys);
    free(s->slots);
}

/* ---------------------------------------------------------------------------
 * The run.
 */

static void
run(soak_t *s)
{
    double end, next_report, t;

    s->start = s->last_report = s->sampled_at = now();
    end = s->start + s->o.duration_s;
    next_report = s->start + s->o.interval_s;
    while ((t = now()) < end) {
        double until = (next_report < end ? next_report : end) - t;
        top_up(s);
        sample_inflight(s, now());
        wait_for_completions(s, (int)(until * 1000 < 200 ? until * 1000 : 200));
        if ((t = now()) >= next_report) {
            report(s, t);
            next_report += s->o.interval_s;
        }
    }
    if (now() - s->last_report > 0.05 * s->o.interval_s)
        report(s, now()); /* the last, shorter interval */
}

/* Stops submitting and waits for every batch in flight; then shuts the pool
   down and checks that every accepted batch completed exactly once. */
static void
finish(soak_t *s)
{
    double deadline = now() + DRAIN_TIMEOUT_S;
    lmca_pool_stats_t ps;

    if (s->waiting) {
        s->waiting->state = SLOT_FREE; /* planned, never submitted: holds no buffer */
        s->waiting = NULL;
    }
    while (s->inflight > 0 && now() < deadline)
        wait_for_completions(s, 100);
    s->never_completed = s->inflight;
    if (s->inflight > 0)
        printf("NEVER COMPLETED: %u batches still in flight %.0f s after the end\n",
               s->inflight, DRAIN_TIMEOUT_S);
    lmca_pool_shutdown(s->pool);
    drain(s); /* what the shutdown canceled; the buffers are free after it */
    lmca_pool_stats(s->pool, &ps);
    if (ps.submitted != s->submitted || ps.completed != s->taken) {
        printf("pool counted %llu submitted and %llu completed; this thread %llu and %llu\n",
               (unsigned long long)ps.submitted, (unsigned long long)ps.completed,
               (unsigned long long)s->submitted, (unsigned long long)s->taken);
        s->unexpected++;
    }
    for (int i = 0; i < N_COUNT; i++)
        s->total[i] += s->iv[i];
}

/* ---------------------------------------------------------------------------
 * Summary and verdict.
 */

static void
print_summary(const soak_t *s, const lmca_stats_t *es)
{
    const uint64_t *n = s->total;
    double secs = s->last_report - s->start;
    lmca_pool_stats_t ps;

    lmca_pool_stats(s->pool, &ps);
    printf("summary: %llu batches in %.0f s, %.0f/s (get %llu set %llu exists %llu prefix %llu "
           "delete %llu); read %.2f GB, %.2f GB/s; written %.2f GB, %.2f GB/s\n",
           (unsigned long long)s->taken, secs, s->taken / secs, (unsigned long long)n[N_GET],
           (unsigned long long)n[N_SET], (unsigned long long)n[N_EXISTS],
           (unsigned long long)n[N_PREFIX], (unsigned long long)n[N_DELETE],
           ps.bytes_read / 1e9, ps.bytes_read / secs / 1e9, ps.bytes_written / 1e9,
           ps.bytes_written / secs / 1e9);
    printf("  keys: get hit %llu miss %llu wrong %llu; set stored %llu not %llu; "
           "lookups found %llu absent %llu; delete removed %llu absent %llu\n",
           (unsigned long long)n[N_HIT], (unsigned long long)n[N_MISS],
           (unsigned long long)n[N_WRONG], (unsigned long long)n[N_STORED],
           (unsigned long long)n[N_UNSTORED], (unsigned long long)n[N_FOUND],
           (unsigned long long)n[N_ABSENT], (unsigned long long)n[N_REMOVED],
           (unsigned long long)n[N_NOTHING]);
    printf("  rss: warm-up %.1f MiB, max %.1f MiB, end %.1f MiB, growth %+.1f MiB "
           "(allowed %.1f); after shutdown %.1f MiB\n",
           s->rss_warm / MIB, s->rss_max / MIB, s->rss_end / MIB,
           (s->rss_end - s->rss_warm) / MIB, s->o.max_rss_growth_mib, rss_bytes() / MIB);
    printf("  errors: %llu", (unsigned long long)n[N_ERRORS]);
    for (unsigned k = 0; k < ERR_KINDS; k++)
        if (s->errors[k])
            printf(" %s=%llu", k ? lmca_status_name(-(int)k) : "other",
                   (unsigned long long)s->errors[k]);
    printf("\n  engine: corrupt %llu torn %llu crc_mismatch %llu puts_aborted %llu "
           "segments_removed %llu segments_left %llu\n",
           (unsigned long long)es->corrupt, (unsigned long long)es->torn,
           (unsigned long long)es->crc_mismatch, (unsigned long long)es->puts_aborted,
           (unsigned long long)es->segments_removed, (unsigned long long)es->segments_left);
    printf("  wrong bytes %llu, never completed %llu, unexpected completions %llu, "
           "lost wakeups %llu\n",
           (unsigned long long)n[N_WRONG], (unsigned long long)s->never_completed,
           (unsigned long long)s->unexpected, (unsigned long long)s->lost_wakeups);
}

/* Prints why the run fails; returns false, the verdict. */
static bool
fail(const char *why)
{
    printf("  FAIL: %s\n", why);
    return false;
}

static bool
verdict(const soak_t *s, const lmca_stats_t *es)
{
    bool ok = true;
    uint64_t hard_errors = 0;

    for (unsigned k = 0; k < ERR_KINDS; k++)
        if (!(s->o.allow_errors && error_is_transient(k)))
            hard_errors += s->errors[k];
    if (s->total[N_WRONG])
        ok = fail("GET hits returned wrong bytes");
    if (s->never_completed || s->unexpected)
        ok = fail("not every submitted batch completed exactly once");
    if (s->lost_wakeups)
        ok = fail("completions waited without the eventfd becoming readable");
    if (hard_errors)
        ok = fail(s->o.allow_errors ? "errors other than ETIMEOUT, ECONNECTION, EBUSY"
                                    : "errors (--allow-errors tolerates transient ones)");
    /* Only this engine writes the set and nothing damages records: a record that
       fails validation means the engine wrote or read something it should not. */
    if (es->corrupt || es->crc_mismatch)
        ok = fail("the engine found corrupt records");
    if ((s->rss_end - s->rss_warm) / MIB > s->o.max_rss_growth_mib)
        ok = fail("RSS grew more than --max-rss-growth after the warm-up");
    if (s->taken == 0)
        ok = fail("no batch completed");
    printf("verdict: %s\n", ok ? "PASS" : "FAIL");
    return ok;
}

int
main(int argc, char **argv)
{
    soak_t s = {0};
    lmca_stats_t es = {0};
    bool ok = false;

    setvbuf(stdout, NULL, _IOLBF, 0); /* lines from the log callback stay whole */
    if (parse_options(argc, argv, &s.o) != 0)
        return 2;
    s.run = (unsigned)splitmix64((uint64_t)time(NULL) << 20 ^ (uint64_t)getpid());
    s.rng = splitmix64(s.run ^ (uint64_t)(now() * 1e9)) | 1;
    if (alloc_state(&s) != 0)
        printf("soak: out of memory for %.0f MiB of buffers\n", s.o.inflight_mib);
    else if (s.class_weights == 0)
        printf("soak: --max-chunk %zu leaves no chunk size\n", s.o.max_chunk);
    else if (open_engine(&s) == 0) {
        print_setup(&s);
        run(&s);
        finish(&s);
        lmca_stats(s.h, &es);
        print_summary(&s, &es);
        ok = verdict(&s, &es);
    }
    lmca_pool_destroy(s.pool);
    lmca_close(s.h);
    free_state(&s);
    printf("%d passed, %d failed\n", ok, !ok);
    return ok ? 0 : 1;
}
