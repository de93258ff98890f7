/*
 * bench_engine.c - throughput of the engine next to plain libaerospike calls,
 * measured side by side in one run (a benchmark, not a test).
 *
 *   bench_engine [-h hosts] [-n namespace] [-s bytes] [-c count] [-t threads]
 *                [-m chunk|batch|prefix|all]
 *
 * Modes (default all):
 *   chunk  lmca_put / lmca_get of `count` chunks of `bytes` per thread, in three
 *          columns: the engine; aerospike_key_put / aerospike_key_get of one
 *          record of the same bytes plus the copy into a destination buffer
 *          (what a connector on the client's API must do); and the limit, a
 *          minimal client that writev()s header and payload and receives the
 *          value straight into the destination (single node only). Chunks
 *          above the record cap have only the engine column.
 *   batch  reading `count` records of each size in a sweep, as one batch read
 *          versus one get after another, to place batch_threshold_bytes.
 *   prefix lmca_prefix (a batch read of the meta records' small bins, each one
 *          validated) against a header-only batch read of the same records
 *          (what "a meta record exists" would cost), for 16 and 256 keys.
 * Prints GB/s (1e9 bytes per second) and the engine/raw ratios.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <math.h>

#define ROUNDS 4

#include <aerospike/aerospike.h>
#include <aerospike/aerospike_batch.h>
#include <aerospike/aerospike_key.h>
#include <endian.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "lmca.h"

typedef struct {
    const char *hosts, *ns, *mode;
    size_t bytes;
    int count, threads;
    bool client_path; /* -P: fast_path off */
} opts_t;

typedef struct {
    const opts_t *o;
    int id;
    lmca_t *h;      /* engine mode */
    aerospike *as;  /* raw mode */
    uint8_t *src, *dst;
    int fd;         /* limit mode: this thread's socket */
    int failures;
} job_t;

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
die(const char *what, const char *msg)
{
    fprintf(stderr, "bench: %s: %s\n", what, msg);
    exit(1);
}

/* A plain libaerospike client, the baseline every mode compares against. */
static void
raw_connect(aerospike *as, const char *hosts)
{
    as_config ac;
    as_error e;
    as_config_init(&ac);
    as_config_add_hosts(&ac, hosts, 3000);
    aerospike_init(as, &ac);
    if (aerospike_connect(as, &e) != AEROSPIKE_OK)
        die("aerospike_connect", e.message);
}

/* ---------------------------------------------------------------------------
 * Workers: each thread puts or gets its own keys.
 */

static void *
engine_put(void *arg)
{
    job_t *j = arg;
    char key[64];
    for (int i = 0; i < j->o->count; i++) {
        snprintf(key, sizeof key, "bench-%d-%d", j->id, i);
        j->failures += lmca_put(j->h, key, j->src, j->o->bytes, NULL, NULL) != LMCA_OK;
    }
    return NULL;
}

static void *
engine_get(void *arg)
{
    job_t *j = arg;
    char key[64];
    size_t got;
    for (int i = 0; i < j->o->count; i++) {
        snprintf(key, sizeof key, "bench-%d-%d", j->id, i);
        j->failures += lmca_get(j->h, key, j->dst, j->o->bytes, &got, NULL, NULL) != LMCA_OK;
    }
    return NULL;
}

static void *
raw_put(void *arg)
{
    job_t *j = arg;
    char key[64];
    as_error e;
    for (int i = 0; i < j->o->count; i++) {
        as_key k;
        as_record rec;
        snprintf(key, sizeof key, "raw-%d-%d", j->id, i);
        as_key_init_str(&k, j->o->ns, "bench", key);
        as_record_inita(&rec, 1);
        as_record_set_rawp(&rec, "b", j->src, (uint32_t)j->o->bytes, false);
        j->failures += aerospike_key_put(j->as, &e, NULL, &k, &rec) != AEROSPIKE_OK;
        as_record_destroy(&rec);
    }
    return NULL;
}

static void *
raw_get(void *arg)
{
    job_t *j = arg;
    char key[64];
    as_error e;
    for (int i = 0; i < j->o->count; i++) {
        as_key k;
        as_record *rec = NULL;
        snprintf(key, sizeof key, "raw-%d-%d", j->id, i);
        as_key_init_str(&k, j->o->ns, "bench", key);
        if (aerospike_key_get(j->as, &e, NULL, &k, &rec) != AEROSPIKE_OK) {
            j->failures++;
            continue;
        }
        as_bytes *b = as_record_get_bytes(rec, "b");
        if (b && as_bytes_size(b) == j->o->bytes)
            memcpy(j->dst, as_bytes_get(b), j->o->bytes);
        else
            j->failures++;
        as_record_destroy(rec);
    }
    return NULL;
}

/* ---------------------------------------------------------------------------
 * The limit: a minimal client that sends a put as one writev of its header and
 * the payload and receives a get's value straight into the destination, on one
 * blocking socket per thread to the first seed. No routing, pools, retries or
 * timeouts, so only for a single node: what the wire and the server allow,
 * the ceiling the engine's fast path (src/engine/fast.c) is measured against.
 */

static int
limit_connect(const char *hosts)
{
    char host[256];
    const char *colon;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    int fd, one = 1;

    snprintf(host, sizeof host, "%s", hosts);
    host[strcspn(host, ",")] = '\0';
    colon = strrchr(host, ':');
    if (colon)
        host[colon - host] = '\0';
    if (getaddrinfo(host, colon ? colon + 1 : "3000", &hints, &ai) != 0)
        die("limit", "cannot resolve the first seed");
    fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
        die("limit", "cannot connect to the first seed");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    freeaddrinfo(ai);
    return fd;
}

static uint8_t *
put32(uint8_t *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
    return p + 4;
}

static uint8_t *
field(uint8_t *p, uint8_t type, const void *data, size_t len)
{
    p = put32(p, (uint32_t)len + 1);
    *p++ = type;
    memcpy(p, data, len);
    return p + len;
}

/* A single-bin ("b") write of `value_len` bytes, or a read of that bin; the
   value itself is not in the header. Returns the header's length. */
static size_t
limit_header(uint8_t *buf, const char *ns, const char *key, bool write, size_t value_len)
{
    as_key k;
    uint8_t *p = buf + 8;
    uint64_t proto;

    as_key_init_str(&k, ns, "bench", key);
    *p++ = 22;                    /* header size */
    *p++ = write ? 0 : 1;         /* info1: read */
    *p++ = write ? 1 : 0;         /* info2: write */
    *p++ = 0;                     /* info3 */
    *p++ = 0;                     /* unused */
    *p++ = 0;                     /* result code */
    p = put32(p, 0);              /* generation */
    p = put32(p, write ? 0xFFFFFFFFu : 0); /* TTL: never expires */
    p = put32(p, 0);              /* transaction TTL */
    *p++ = 0, *p++ = 3;           /* fields */
    *p++ = 0, *p++ = 1;           /* ops */
    p = field(p, 0, ns, strlen(ns));
    p = field(p, 1, "bench", 5);
    p = field(p, 4, as_key_digest(&k)->value, AS_DIGEST_VALUE_SIZE);
    p = put32(p, (uint32_t)(4 + 1 + (write ? value_len : 0)));
    *p++ = write ? 2 : 1;         /* op: write, read */
    *p++ = write ? 4 : 0;         /* particle: blob */
    *p++ = 0;
    *p++ = 1;                     /* name length */
    *p++ = 'b';
    /* version 2, type 3 (a message), then the size of what follows */
    proto = htobe64((uint64_t)(p - buf - 8 + (write ? value_len : 0)) | 2ull << 56 | 3ull << 48);
    memcpy(buf, &proto, 8);
    return (size_t)(p - buf);
}

static bool
recv_all(int fd, void *buf, size_t n)
{
    return n == 0 || recv(fd, buf, n, MSG_WAITALL) == (ssize_t)n;
}

/* Reads a response; the "b" bin's value, when it has `want` bytes, goes to dst.
   Returns the result code, or -1 when the response did not parse. */
static int
limit_response(int fd, uint8_t *dst, size_t want)
{
    uint8_t hdr[8 + 22], skip[4096];
    uint32_t size;
    uint16_t nfields, nops;

    if (!recv_all(fd, hdr, sizeof hdr))
        return -1;
    memcpy(&nfields, hdr + 8 + 18, 2);
    memcpy(&nops, hdr + 8 + 20, 2);
    for (int i = 0; i < ntohs(nfields); i++) {
        if (!recv_all(fd, &size, 4) || ntohl(size) > sizeof skip ||
            !recv_all(fd, skip, ntohl(size)))
            return -1;
    }
    for (int i = 0; i < ntohs(nops); i++) {
        uint8_t op[8 + 255];
        if (!recv_all(fd, op, 8) || !recv_all(fd, op + 8, op[7]))
            return -1;
        memcpy(&size, op, 4);
        size_t len = ntohl(size) - 4 - op[7];
        if (len != want || !recv_all(fd, dst, len))
            return -1;
    }
    return hdr[8 + 5];
}

static void *
limit_put(void *arg)
{
    job_t *j = arg;
    uint8_t head[256];
    char key[64];
    for (int i = 0; i < j->o->count; i++) {
        snprintf(key, sizeof key, "limit-%d-%d", j->id, i);
        size_t n = limit_header(head, j->o->ns, key, true, j->o->bytes);
        struct iovec iov[2] = {{head, n}, {j->src, j->o->bytes}};
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
        size_t left = n + j->o->bytes;
        while (left > 0) { /* one sendmsg, continued where the socket stopped it */
            ssize_t w = sendmsg(j->fd, &msg, MSG_NOSIGNAL);
            if (w <= 0)
                die("limit", "send failed");
            left -= (size_t)w;
            while (w > 0 && msg.msg_iovlen > 0) {
                size_t c = (size_t)w < msg.msg_iov->iov_len ? (size_t)w : msg.msg_iov->iov_len;
                msg.msg_iov->iov_base = (uint8_t *)msg.msg_iov->iov_base + c;
                msg.msg_iov->iov_len -= c;
                w -= (ssize_t)c;
                if (msg.msg_iov->iov_len == 0)
                    msg.msg_iov++, msg.msg_iovlen--;
            }
        }
        j->failures += limit_response(j->fd, NULL, 0) != 0;
    }
    return NULL;
}

static void *
limit_get(void *arg)
{
    job_t *j = arg;
    uint8_t head[256];
    char key[64];
    for (int i = 0; i < j->o->count; i++) {
        snprintf(key, sizeof key, "limit-%d-%d", j->id, i);
        size_t n = limit_header(head, j->o->ns, key, false, 0);
        if (send(j->fd, head, n, MSG_NOSIGNAL) != (ssize_t)n)
            die("limit", "send failed");
        j->failures += limit_response(j->fd, j->dst, j->o->bytes) != 0;
    }
    return NULL;
}

/* Runs fn on every thread; returns GB/s over all of them. */
static double
run(const opts_t *o, job_t *jobs, void *(*fn)(void *))
{
    pthread_t t[64];
    double t0 = now();
    int failures = 0;
    for (int i = 0; i < o->threads; i++)
        pthread_create(&t[i], NULL, fn, &jobs[i]);
    for (int i = 0; i < o->threads; i++) {
        pthread_join(t[i], NULL);
        failures += jobs[i].failures;
        jobs[i].failures = 0;
    }
    if (failures)
        fprintf(stderr, "bench: %d operations failed\n", failures);
    return (double)o->bytes * o->count * o->threads / (now() - t0) / 1e9;
}

/* ---------------------------------------------------------------------------
 * chunk mode
 */

static void
chunk_mode(const opts_t *o)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_t *h = NULL;
    aerospike as;
    as_error e;
    job_t jobs[64];
    double ep, eg, rp, rg, lp, lg;

    lmca_config_init(&cfg);
    cfg.hosts = o->hosts;
    cfg.namespace_ = o->ns;
    cfg.set = "bench";
    cfg.default_ttl_seconds = -1;
    cfg.fast_path = !o->client_path;
    /* One record per chunk, as the two baselines write it: this mode compares
       data paths, not layouts (bench_packing and bench_native do those). */
    cfg.single_record_threshold_bytes = o->bytes;
    if (lmca_open(&cfg, &h, &err) != LMCA_OK)
        die("lmca_open", err.msg);
    raw_connect(&as, o->hosts);
    for (int i = 0; i < o->threads; i++) {
        jobs[i] = (job_t){.o = o, .id = i, .h = h, .as = &as};
        jobs[i].src = malloc(o->bytes);
        jobs[i].dst = malloc(o->bytes);
        memset(jobs[i].src, i + 1, o->bytes);
    }
    bool one_record = o->bytes <= lmca_limits(h)->max_segment_bytes;
    for (int i = 0; one_record && i < o->threads; i++)
        jobs[i].fd = limit_connect(o->hosts);
    /* Interleaved rounds, rotating which goes first, so that warm-up and
       machine noise hit all alike; the best round of each counts. */
    ep = eg = rp = rg = lp = lg = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (int turn = 0; turn < 3; turn++) {
            switch ((turn + round) % 3) {
            case 0:
                ep = fmax(ep, run(o, jobs, engine_put));
                eg = fmax(eg, run(o, jobs, engine_get));
                break;
            case 1:
                if (one_record) {
                    rp = fmax(rp, run(o, jobs, raw_put));
                    rg = fmax(rg, run(o, jobs, raw_get));
                }
                break;
            default:
                if (one_record) {
                    lp = fmax(lp, run(o, jobs, limit_put));
                    lg = fmax(lg, run(o, jobs, limit_get));
                }
            }
        }
    }
    printf("chunk %zu bytes x %d x %d threads on %s/%s, best of %d rounds\n", o->bytes,
           o->count, o->threads, o->hosts, o->ns, ROUNDS);
    printf("        engine    libaerospike  limit       engine/libaerospike  engine/limit\n");
    if (one_record) {
        printf("  put   %.3f GB/s  %.3f GB/s    %.3f GB/s  %.2f                 %.2f\n", ep, rp,
               lp, ep / rp, ep / lp);
        printf("  get   %.3f GB/s  %.3f GB/s    %.3f GB/s  %.2f                 %.2f\n", eg, rg,
               lg, eg / rg, eg / lg);
    } else { /* the baselines are single records: above the cap there are none */
        printf("  put   %.3f GB/s  (more than one record: no single-record baselines)\n", ep);
        printf("  get   %.3f GB/s\n", eg);
    }
    for (int i = 0; one_record && i < o->threads; i++)
        close(jobs[i].fd);
    for (int i = 0; i < o->threads; i++)
        free(jobs[i].src), free(jobs[i].dst);
    aerospike_close(&as, &e);
    aerospike_destroy(&as);
    lmca_close(h);
}

/* ---------------------------------------------------------------------------
 * batch mode: one batch read of n records versus n gets, per record size.
 */

static double
batch_read(aerospike *as, const char *ns, int n, size_t size, uint8_t *dst)
{
    as_batch_records recs;
    as_error e;
    char key[64];
    double t0 = now();

    as_batch_records_init(&recs, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        as_batch_read_record *r = as_batch_read_reserve(&recs);
        snprintf(key, sizeof key, "batch-%zu-%d", size, i);
        as_key_init_str(&r->key, ns, "bench", key);
        r->read_all_bins = true;
    }
    if (aerospike_batch_read(as, &e, NULL, &recs) != AEROSPIKE_OK)
        die("batch read", e.message);
    for (int i = 0; i < n; i++) {
        as_batch_read_record *r = as_vector_get(&recs.list, (uint32_t)i);
        as_bytes *b = as_record_get_bytes(&r->record, "b");
        if (b)
            memcpy(dst + (size_t)i * size, as_bytes_get(b), as_bytes_size(b));
    }
    as_batch_records_destroy(&recs);
    return (double)n * size / (now() - t0) / 1e9;
}

static double
single_reads(aerospike *as, const char *ns, int n, size_t size, uint8_t *dst)
{
    as_error e;
    char key[64];
    double t0 = now();
    for (int i = 0; i < n; i++) {
        as_key k;
        as_record *rec = NULL;
        snprintf(key, sizeof key, "batch-%zu-%d", size, i);
        as_key_init_str(&k, ns, "bench", key);
        if (aerospike_key_get(as, &e, NULL, &k, &rec) != AEROSPIKE_OK)
            die("get", e.message);
        as_bytes *b = as_record_get_bytes(rec, "b");
        memcpy(dst + (size_t)i * size, as_bytes_get(b), as_bytes_size(b));
        as_record_destroy(rec);
    }
    return (double)n * size / (now() - t0) / 1e9;
}

static void
batch_mode(const opts_t *o)
{
    static const size_t sizes[] = {4096, 32768, 65536, 98304, 131072, 262144, 524288, 983040};
    aerospike as;
    as_error e;
    int n = 64;

    raw_connect(&as, o->hosts);
    printf("batch read vs sequential gets, %d records per call, best of 5\n", n);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t size = sizes[s];
        uint8_t *buf = malloc(size * n);
        double best_b = 0, best_s = 0;
        memset(buf, 7, size * n);
        for (int i = 0; i < n; i++) {
            char key[64];
            as_key k;
            as_record rec;
            snprintf(key, sizeof key, "batch-%zu-%d", size, i);
            as_key_init_str(&k, o->ns, "bench", key);
            as_record_inita(&rec, 1);
            as_record_set_rawp(&rec, "b", buf, (uint32_t)size, false);
            if (aerospike_key_put(&as, &e, NULL, &k, &rec) != AEROSPIKE_OK)
                die("put", e.message);
        }
        for (int r = 0; r < 5; r++) {
            double b = batch_read(&as, o->ns, n, size, buf);
            double q = single_reads(&as, o->ns, n, size, buf);
            best_b = b > best_b ? b : best_b;
            best_s = q > best_s ? q : best_s;
        }
        printf("  %7zu bytes: batch %.3f GB/s, sequential gets %.3f GB/s, batch/gets %.2f\n",
               size, best_b, best_s, best_b / best_s);
        free(buf);
    }
    aerospike_close(&as, &e);
    aerospike_destroy(&as);
}

/* ---------------------------------------------------------------------------
 * prefix mode
 */

/* Seconds for one header-only batch read of `n` meta records. */
static double
header_only(aerospike *as, const char *ns, char **mkeys, int n)
{
    as_batch_records recs;
    as_error e;
    double t0 = now();

    as_batch_records_init(&recs, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        as_batch_read_record *r = as_batch_read_reserve(&recs);
        as_key_init_str(&r->key, ns, "bench", mkeys[i]);
    }
    if (aerospike_batch_read(as, &e, NULL, &recs) != AEROSPIKE_OK)
        die("header-only batch read", e.message);
    as_batch_records_destroy(&recs);
    return now() - t0;
}

static void
prefix_mode(const opts_t *o)
{
    static const int counts[] = {16, 256};
    uint8_t md[120], byte = 1;
    lmca_put_opts_t po = {.md = md, .md_len = sizeof md, .serde = "naive"};
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_t *h;
    aerospike as;
    as_error e;

    lmca_config_init(&cfg);
    cfg.hosts = o->hosts, cfg.namespace_ = o->ns, cfg.set = "bench";
    if (lmca_open(&cfg, &h, &err) != LMCA_OK)
        die("lmca_open", err.msg);
    raw_connect(&as, o->hosts);
    memset(md, 3, sizeof md);
    printf("prefix lookups (one-byte chunks with a %zu-byte md), best of 5 rounds of 100\n",
           sizeof md);
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        int n = counts[c];
        char **keys = malloc(n * sizeof *keys), **mkeys = malloc(n * sizeof *mkeys);
        double best_e = 1e9, best_h = 1e9;
        size_t count;
        for (int i = 0; i < n; i++) {
            keys[i] = malloc(64), mkeys[i] = malloc(64);
            snprintf(keys[i], 64, "prefix-%d-%d", n, i);
            snprintf(mkeys[i], 64, "%s|m", keys[i]);
            if (lmca_put(h, keys[i], &byte, 1, &po, &err) != LMCA_OK)
                die("put", err.msg);
        }
        for (int r = 0; r < 5; r++) {
            double t0 = now(), th = 0;
            for (int k = 0; k < 100; k++)
                if (lmca_prefix(h, (const char *const *)keys, n, &count, NULL, &err) != LMCA_OK ||
                    count != (size_t)n)
                    die("prefix", err.msg);
            double te = (now() - t0) / 100;
            for (int k = 0; k < 100; k++)
                th += header_only(&as, o->ns, mkeys, n);
            best_e = te < best_e ? te : best_e;
            best_h = th / 100 < best_h ? th / 100 : best_h;
        }
        printf("  %3d keys: engine %.0f us, header-only %.0f us, engine/header-only %.2f\n", n,
               best_e * 1e6, best_h * 1e6, best_e / best_h);
        for (int i = 0; i < n; i++)
            free(keys[i]), free(mkeys[i]);
        free(keys);
        free(mkeys);
    }
    aerospike_close(&as, &e);
    aerospike_destroy(&as);
    lmca_close(h);
}

int
main(int argc, char **argv)
{
    opts_t o = {.hosts = getenv("AEROSPIKE_TEST_HOSTS"), .ns = "lmcache",
                .bytes = 4u << 20, .count = 32, .threads = 2, .mode = "all"};
    int c;
    while ((c = getopt(argc, argv, "h:n:s:c:t:m:P")) != -1) {
        switch (c) {
        case 'h': o.hosts = optarg; break;
        case 'n': o.ns = optarg; break;
        case 's': o.bytes = strtoull(optarg, NULL, 10); break;
        case 'c': o.count = atoi(optarg); break;
        case 't': o.threads = atoi(optarg); break;
        case 'm': o.mode = optarg; break;
        case 'P': o.client_path = true; break; /* the engine on libaerospike's calls */
        default:
            fprintf(stderr, "usage: %s [-h hosts] [-n ns] [-s bytes] [-c count] [-t threads] [-m chunk|batch|prefix|all] [-P]\n",
                    argv[0]);
            return 2;
        }
    }
    if (o.hosts == NULL)
        die("hosts", "give -h host:port or set AEROSPIKE_TEST_HOSTS");
    if (o.threads < 1 || o.threads > 64 || o.count < 1)
        die("options", "threads must be 1..64 and count >= 1");
    printf("lmca %s, libaerospike %s\n", lmca_version(), lmca_aerospike_version());
    bool all = strcmp(o.mode, "all") == 0;
    if (all || strcmp(o.mode, "chunk") == 0)
        chunk_mode(&o);
    if (all || strcmp(o.mode, "batch") == 0)
        batch_mode(&o);
    if (all || strcmp(o.mode, "prefix") == 0)
        prefix_mode(&o);
    return 0;
}
