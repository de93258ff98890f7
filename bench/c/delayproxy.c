/*
 * delayproxy.c - a TCP proxy that adds a fixed one-way delay, to measure what
 * network round trips cost (this kernel has no netem qdisc, and loopback hides
 * round trips). A benchmark tool, not part of the engine.
 *
 *   delayproxy --listen 127.0.0.1:PORT --to HOST:PORT --delay-ms D
 *              [--port-file F] [--max-buffer BYTES]
 *
 * Every connection accepted on --listen gets its own connection to --to, and
 * bytes are forwarded both ways. A chunk of bytes read from one side at time t
 * is written to the other side no earlier than t + D (CLOCK_MONOTONIC), in
 * order, each direction on its own: a request/response round trip through the
 * proxy takes at least 2 D plus the server's time. D is in milliseconds and may be
 * fractional (0, 0.1, 0.5, 2). --listen port 0 picks a free port; --port-file
 * receives the port (written atomically) once the proxy listens.
 *
 * Bounded: each direction of a connection holds at most --max-buffer bytes
 * (default 64 MiB; K, M, G suffixes are binary), counting the chunks' headers
 * and unused capacity too. When a direction is full the proxy stops reading
 * from its source, so TCP backpressure reaches the sender instead of the proxy
 * growing.
 *
 * Closing. An EOF from one side is passed on as a FIN (shutdown SHUT_WR) once
 * the bytes already read from that side have been delivered; the connection is
 * closed when both directions have ended that way. This is "a close on one side
 * closes both, after the pending bytes": a peer that closed its socket gets a
 * reset on the next write to it, which is an error, and any error (read, write,
 * connect, out of memory) closes both sockets at once, dropping what is pending.
 * Passing half-closes on (rather than closing both at the first EOF) keeps
 * protocols that shut down their sending side and then wait for an answer intact.
 *
 * Not delayed: connection setup (the client's connect completes at once, as the
 * kernel accepts for the proxy) and the FIN itself beyond the bytes before it.
 *
 * Prints nothing but one-line errors on stderr. SIGTERM or SIGINT exits 0.
 *
 * The hop itself is not free, so compare delays with each other, D = 0 being
 * the baseline, rather than with a direct connection. Measured on a shared
 * two-core machine at D = 0: about 50 us more per small round trip (four
 * thread wake-ups and a second TCP hop), and about 0.45 CPU-seconds per GB
 * forwarded (two copies plus the loopback stack), which on two cores shared
 * with the client and the server lowers multi-threaded 4 MiB throughput by
 * 20-50%.
 *
 * Design: per connection, four threads with blocking sockets, one reader and
 * one writer per direction, sharing a queue of chunks stamped with their
 * arrival time. The reader is always parked in read(), so a chunk is stamped
 * when it arrives, not when an earlier chunk's delay has run out (a single
 * thread per direction would stamp late and cap throughput at about one socket
 * buffer per D). The writer sleeps with clock_nanosleep(TIMER_ABSTIME) until the
 * head chunk is due, then writes every chunk already due in one sendmsg. Threads
 * keep each step a plain blocking call, give sub-millisecond sleeps without
 * timer bookkeeping, and spread the copying of busy connections over the cores;
 * Aerospike clients open tens of connections, so some hundred mostly idle
 * threads with small stacks is cheap. (An epoll loop would need timers,
 * non-blocking partial writes and per-direction readiness state, and puts every
 * byte of every connection through one core.) Reads are up to 256 KiB; a short
 * read is copied into a chunk of its own size so small messages do not pin big
 * buffers.
 */
#include <errno.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define READ_MAX ((size_t)256 << 10) /* largest single read */
#define MAX_IOV 64                   /* chunks per sendmsg */
#define STACK_BYTES ((size_t)256 << 10)

/* A run of bytes read at one time, due at `due`. */
typedef struct chunk {
    struct chunk *next;
    int64_t due;        /* CLOCK_MONOTONIC, ns */
    size_t len, off;    /* bytes held; bytes already written */
    size_t cost;        /* what it counts against --max-buffer */
    unsigned char data[];
} chunk_t;

/* Per-chunk overhead counted against the bound: the header and malloc's own. */
#define CHUNK_OVERHEAD (sizeof(chunk_t) + 32)

typedef struct conn conn_t;

/* One direction: src -> queue -> dst. */
typedef struct {
    conn_t *c;
    int src, dst;
    chunk_t *head, *tail;
    size_t held;                 /* sum of the queued chunks' cost */
    bool eof;                    /* src ended; nothing follows tail */
    pthread_cond_t data, space;  /* a chunk or eof arrived; held went down */
} dir_t;

struct conn {
    pthread_mutex_t mu; /* guards everything below and both directions' queues */
    int fd[2];          /* client, server */
    bool aborted;       /* an error: both sockets shut down, pending bytes dropped */
    int refs;           /* threads still running */
    dir_t d[2];         /* 0: client -> server, 1: server -> client */
};

static int64_t g_delay_ns;
static size_t g_max_buffer = (size_t)64 << 20;
static struct sockaddr_storage g_to;
static socklen_t g_to_len;
static const char *g_to_name;
static pthread_attr_t g_attr;

static void
warnf(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "delayproxy: %s\n", line);
}

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
sleep_until(int64_t t)
{
    struct timespec ts = {.tv_sec = t / 1000000000, .tv_nsec = t % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Error path: shut both sockets down (which wakes any thread blocked on them)
   and wake every thread waiting on a queue. */
static void
conn_abort(conn_t *c)
{
    pthread_mutex_lock(&c->mu);
    if (!c->aborted) {
        c->aborted = true;
        shutdown(c->fd[0], SHUT_RDWR);
        shutdown(c->fd[1], SHUT_RDWR);
        for (int i = 0; i < 2; i++) {
            pthread_cond_broadcast(&c->d[i].data);
            pthread_cond_broadcast(&c->d[i].space);
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* A thread is done with the connection; the last one closes and frees it. */
static void
conn_release(conn_t *c)
{
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left > 0)
        return;
    close(c->fd[0]);
    close(c->fd[1]);
    for (int i = 0; i < 2; i++) {
        for (chunk_t *k = c->d[i].head, *next; k; k = next) {
            next = k->next;
            free(k);
        }
        pthread_cond_destroy(&c->d[i].data);
        pthread_cond_destroy(&c->d[i].space);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void *
reader(void *arg)
{
    dir_t *d = arg;
    conn_t *c = d->c;
    for (;;) {
        /* Wait for room, then read at most that much. Only this thread adds
           to `held`, so the room found here is still there after the read. */
        pthread_mutex_lock(&c->mu);
        while (!c->aborted && d->held + CHUNK_OVERHEAD >= g_max_buffer)
            pthread_cond_wait(&d->space, &c->mu);
        bool stop = c->aborted;
        size_t want = g_max_buffer - d->held - CHUNK_OVERHEAD;
        pthread_mutex_unlock(&c->mu);
        if (stop)
            break;
        if (want > READ_MAX)
            want = READ_MAX;
        chunk_t *k = malloc(sizeof *k + want);
        if (k == NULL) {
            warnf("out of memory");
            conn_abort(c);
            break;
        }
        ssize_t n;
        do
            n = read(d->src, k->data, want);
        while (n < 0 && errno == EINTR);
        int64_t t = now_ns();
        if (n <= 0) {
            free(k);
            if (n < 0) {
                conn_abort(c);
                break;
            }
            pthread_mutex_lock(&c->mu);
            d->eof = true;
            pthread_cond_signal(&d->data);
            pthread_mutex_unlock(&c->mu);
            break;
        }
        size_t cost = CHUNK_OVERHEAD + want;
        if ((size_t)n <= want / 2) {
            /* A short read: keep it in a chunk of its own size. */
            chunk_t *s = malloc(sizeof *s + (size_t)n);
            if (s != NULL) {
                memcpy(s->data, k->data, (size_t)n);
                free(k);
                k = s;
                cost = CHUNK_OVERHEAD + (size_t)n;
            }
        }
        k->next = NULL;
        k->due = t + g_delay_ns;
        k->len = (size_t)n;
        k->off = 0;
        k->cost = cost;
        pthread_mutex_lock(&c->mu);
        if (c->aborted) {
            pthread_mutex_unlock(&c->mu);
            free(k);
            break;
        }
        if (d->tail)
            d->tail->next = k;
        else
            d->head = k;
        d->tail = k;
        d->held += cost;
        pthread_cond_signal(&d->data);
        pthread_mutex_unlock(&c->mu);
    }
    conn_release(c);
    return NULL;
}

static void *
writer(void *arg)
{
    dir_t *d = arg;
    conn_t *c = d->c;
    struct iovec iov[MAX_IOV];
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->aborted && d->head == NULL && !d->eof)
            pthread_cond_wait(&d->data, &c->mu);
        if (c->aborted) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        if (d->head == NULL) { /* eof, and everything before it delivered */
            pthread_mutex_unlock(&c->mu);
            shutdown(d->dst, SHUT_WR);
            break;
        }
        int64_t due = d->head->due;
        pthread_mutex_unlock(&c->mu);

        if (due > now_ns())
            sleep_until(due);

        /* Every chunk due by now, in order. Only this thread removes chunks,
           so they stay valid after the lock is dropped. */
        int64_t t = now_ns();
        int n = 0;
        pthread_mutex_lock(&c->mu);
        for (chunk_t *k = d->head; k && n < MAX_IOV && k->due <= t; k = k->next)
            iov[n++] = (struct iovec){k->data + k->off, k->len - k->off};
        pthread_mutex_unlock(&c->mu);

        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(d->dst, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            conn_abort(c);
            break;
        }

        /* Retire what was written; free outside the lock. */
        chunk_t *done = NULL;
        size_t left = (size_t)w;
        pthread_mutex_lock(&c->mu);
        while (left > 0) {
            chunk_t *k = d->head;
            size_t rest = k->len - k->off;
            if (left < rest) {
                k->off += left;
                break;
            }
            left -= rest;
            d->head = k->next;
            if (d->head == NULL)
                d->tail = NULL;
            d->held -= k->cost;
            k->next = done;
            done = k;
        }
        pthread_cond_signal(&d->space);
        pthread_mutex_unlock(&c->mu);
        while (done) {
            chunk_t *next = done->next;
            free(done);
            done = next;
        }
    }
    conn_release(c);
    return NULL;
}

static void
nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* First thread of a connection: connects upstream, starts the other three
   threads and becomes the client -> server reader. */
static void *
starter(void *arg)
{
    conn_t *c = arg;
    int s = socket(g_to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
    if (s < 0 || connect(s, (struct sockaddr *)&g_to, g_to_len) < 0) {
        warnf("connect %s: %s", g_to_name, strerror(errno));
        if (s >= 0)
            close(s);
        close(c->fd[0]);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return NULL;
    }
    c->fd[1] = s;
    nodelay(c->fd[0]);
    nodelay(c->fd[1]);
    for (int i = 0; i < 2; i++) {
        dir_t *d = &c->d[i];
        d->c = c;
        d->src = c->fd[i];
        d->dst = c->fd[1 - i];
        pthread_cond_init(&d->data, NULL);
        pthread_cond_init(&d->space, NULL);
    }
    c->refs = 4;
    struct {
        void *(*fn)(void *);
        dir_t *d;
    } more[3] = {{writer, &c->d[0]}, {reader, &c->d[1]}, {writer, &c->d[1]}};
    for (int i = 0; i < 3; i++) {
        pthread_t t;
        int rc = pthread_create(&t, &g_attr, more[i].fn, more[i].d);
        if (rc != 0) {
            warnf("pthread_create: %s", strerror(rc));
            pthread_mutex_lock(&c->mu);
            c->refs -= 3 - i;
            pthread_mutex_unlock(&c->mu);
            conn_abort(c);
            break;
        }
    }
    return reader(&c->d[0]);
}

/* "host:port" or "[v6]:port" to an address. */
static bool
resolve(const char *spec, bool passive, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (colon == NULL || colon == spec || colon[1] == '\0' ||
        (size_t)(colon - spec) >= sizeof host) {
        warnf("bad address %s: expected HOST:PORT", spec);
        return false;
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    char *h = host;
    size_t hl = strlen(h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h[hl - 1] = '\0';
        h++;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
    struct addrinfo *ai;
    int rc = getaddrinfo(h, colon + 1, &hints, &ai);
    if (rc != 0) {
        warnf("bad address %s: %s", spec, gai_strerror(rc));
        return false;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return true;
}

static bool
parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10, end++; break;
    case 'm': case 'M': shift = 20, end++; break;
    case 'g': case 'G': shift = 30, end++; break;
    }
    if (errno || end == s || *end != '\0' || s[0] == '-' || v > (SIZE_MAX >> shift))
        return false;
    *out = (size_t)v << shift;
    return true;
}

static bool
write_port_file(const char *path, int port)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        warnf("port file %s: %s", path, strerror(errno));
        return false;
    }
    return true;
}

static int
usage(void)
{
    fprintf(stderr, "usage: delayproxy --listen HOST:PORT --to HOST:PORT --delay-ms D "
                    "[--port-file F] [--max-buffer BYTES]\n");
    return 2;
}

int
main(int argc, char **argv)
{
    const char *listen_spec = NULL, *port_file = NULL;
    bool have_delay = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            return usage();
        i++;
        if (strcmp(a, "--listen") == 0) {
            listen_spec = v;
        } else if (strcmp(a, "--to") == 0) {
            g_to_name = v;
        } else if (strcmp(a, "--port-file") == 0) {
            port_file = v;
        } else if (strcmp(a, "--delay-ms") == 0) {
            char *end;
            errno = 0;
            double ms = strtod(v, &end);
            /* up to an hour; NaN fails the comparison */
            if (errno || end == v || *end != '\0' || !(ms >= 0 && ms <= 3.6e6)) {
                warnf("bad --delay-ms %s: expected milliseconds >= 0", v);
                return 2;
            }
            g_delay_ns = (int64_t)(ms * 1e6 + 0.5);
            have_delay = true;
        } else if (strcmp(a, "--max-buffer") == 0) {
            if (!parse_size(v, &g_max_buffer) || g_max_buffer < 2 * CHUNK_OVERHEAD + 4096) {
                warnf("bad --max-buffer %s: expected bytes >= %zu", v,
                      2 * CHUNK_OVERHEAD + 4096);
                return 2;
            }
        } else {
            return usage();
        }
    }
    if (listen_spec == NULL || g_to_name == NULL || !have_delay)
        return usage();

    struct sockaddr_storage la;
    socklen_t la_len;
    if (!resolve(listen_spec, true, &la, &la_len) || !resolve(g_to_name, false, &g_to, &g_to_len))
        return 2;

    /* Many connections, two sockets each. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    /* Sleeps end on time rather than up to 50 us late (inherited by threads). */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    signal(SIGPIPE, SIG_IGN);
    /* Chunks are malloc'd by a reader and freed by a writer at a high rate.
       Left to itself glibc serves each 256 KiB chunk with mmap (or trims its
       arena on free), and every page is then faulted in and zeroed anew: a
       quarter of the proxy's CPU when measured. Keep freed memory for reuse
       instead; RSS is still bounded by the peak of what is queued. */
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);

    int lfd = socket(la.ss_family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
    int one = 1;
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(lfd, (struct sockaddr *)&la, la_len) < 0 || listen(lfd, SOMAXCONN) < 0) {
        warnf("listen %s: %s", listen_spec, strerror(errno));
        return 1;
    }
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    getsockname(lfd, (struct sockaddr *)&bound, &bound_len);
    int port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                  : ((struct sockaddr_in *)&bound)->sin_port);

    /* SIGTERM and SIGINT arrive on a signalfd, blocked in every thread. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    if (sfd < 0) {
        warnf("signalfd: %s", strerror(errno));
        return 1;
    }
    if (port_file && !write_port_file(port_file, port))
        return 1;

    pthread_attr_init(&g_attr);
    pthread_attr_setdetachstate(&g_attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&g_attr, STACK_BYTES);

    struct pollfd pf[2] = {{.fd = lfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    for (;;) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            warnf("poll: %s", strerror(errno));
            return 1;
        }
        if (pf[1].revents)
            _exit(0); /* connections die with the process; nothing to flush */
        if (!pf[0].revents)
            continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                warnf("accept: %s", strerror(errno));
                usleep(10000); /* the connection waits in the backlog */
            }
            continue;
        }
        conn_t *c = calloc(1, sizeof *c);
        if (c == NULL) {
            warnf("out of memory");
            close(fd);
            continue;
        }
        c->fd[0] = fd;
        c->fd[1] = -1;
        pthread_mutex_init(&c->mu, NULL);
        pthread_t t;
        int rc = pthread_create(&t, &g_attr, starter, c);
        if (rc != 0) {
            warnf("pthread_create: %s", strerror(rc));
            close(fd);
            pthread_mutex_destroy(&c->mu);
            free(c);
        }
    }
}
