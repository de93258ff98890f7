/*
 * harness.h - a small test runner: each test runs in its own process with a
 * timeout, so a crash or a hang fails that test alone. Prints one line per test
 * and closes with "N passed, N failed, N skipped".
 *
 *   TEST(name) { ASSERT(...); }
 *   TEST_LIST = { T(name), ... };   then   TEST_MAIN()
 */
#ifndef LMCA_TEST_HARNESS_H
#define LMCA_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lmca.h"

typedef struct th_case {
    const char *name;
    void (*fn)(void);
} th_case;

#define TEST(name) static void name(void)
#define T(name) {#name, name}
#define TEST_LIST static const th_case th_cases[]
#define TEST_MAIN()                                                                   \
    int main(int argc, char **argv)                                                   \
    {                                                                                 \
        return th_run(__FILE__, th_cases, sizeof th_cases / sizeof th_cases[0], argc, \
                      argv);                                                          \
    }

int th_run(const char *file, const th_case *cases, size_t n, int argc, char **argv);

/* Fails the running test (exits its process) with a message. */
void th_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* Ends the running test as skipped, saying why. */
void th_skip(const char *why) __attribute__((noreturn));

#define ASSERT(c)                                       \
    do {                                                \
        if (!(c))                                       \
            th_fail(__FILE__, __LINE__, "%s", #c);      \
    } while (0)
#define ASSERT_EQ(a, b)                                                                     \
    do {                                                                                    \
        long long a_ = (long long)(a), b_ = (long long)(b);                                 \
        if (a_ != b_)                                                                       \
            th_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_);         \
    } while (0)
/* Asserts a status; on mismatch prints the error message. */
#define ASSERT_RC(rc, want, err)                                                            \
    do {                                                                                    \
        int rc_ = (rc);                                                                     \
        if (rc_ != (want))                                                                  \
            th_fail(__FILE__, __LINE__, "%s: got %s, want %s (%s)", #rc,                    \
                    lmca_status_name(rc_), lmca_status_name(want), (err)->msg);             \
    } while (0)
#define ASSERT_CONTAINS(hay, needle)                                                        \
    do {                                                                                    \
        if (strstr((hay), (needle)) == NULL)                                                \
            th_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", (hay), (needle)); \
    } while (0)

/* ---------------------------------------------------------------------------
 * Server-backed tests. AEROSPIKE_TEST_HOSTS names the server (scripts/test.sh
 * starts the protocol test server and sets it; set it yourself to test a real
 * server configured as tests/aerospike-test.conf says).
 */

/* Hosts under test; skips the test when none are named. */
const char *th_hosts(void);

/* True when the server is the project's test server (fixture-* commands work). */
bool th_is_fixture(void);

/* Skips the test unless the server is the test server, saying what it needs
   (fault injection, a namespace only the test server has). */
void th_need_fixture(const char *what);

/* Sends an info command to the server (set-config: to every node of a cluster);
   returns the value part (static buffer). */
const char *th_info(const char *cmd);

/* A config for namespace `ns` on the hosts under test, with a log collector. */
void th_config(lmca_config_t *cfg, const char *ns);

/* th_config on namespace "small" with segments of 64 KiB (16 KiB at the least):
   a chunk of 2 * target + 1000 bytes then has three segments. */
void th_config_segments(lmca_config_t *cfg);

/* The data path th_config picks: the fast path, or with LMCA_TEST_PATH=client
   the client's own calls. */
bool th_fast_path(void);

/* Opens a handle on `ns` with default settings; fails the test on error. */
lmca_t *th_open(const char *ns);

/* Log lines collected from handles made by th_config (joined by '\n'). */
const char *th_log(void);

/* A key unique to this test run: "<prefix>-<pid>-<counter>". Static buffer ring. */
const char *th_key(const char *prefix);

/* Deterministic test bytes for (seed, offset). */
void th_fill(void *buf, size_t n, uint32_t seed);

/* Digest (hex, 40 chars) of record key `reckey` in `set`, for fixture fault rules. */
const char *th_digest_hex(const char *set, const char *reckey);

/* Monotonic milliseconds, for how long a call took. */
uint64_t th_now_ms(void);

/* Direct record access with libaerospike, bypassing the engine (set "lmca_test").
   Return the Aerospike status: 0 found/done, 2 not found. */
int th_record_ttl(const char *ns, const char *reckey, uint32_t *ttl);
int th_record_remove(const char *ns, const char *reckey);

/* A bin for th_plant(): what another client (or a bit flip) could store. */
typedef struct th_bin {
    const char *name;
    char type;     /* 'i' integer, 's' string, 'b' blob, 'd' double, 'l' list, 'B' bool */
    int64_t i;     /* i, B; d: the value as a double */
    const void *p; /* s: NUL-terminated; b: bytes */
    size_t len;    /* b */
} th_bin;

#define TH_INT(n, v) ((th_bin){.name = (n), .type = 'i', .i = (int64_t)(v)})
#define TH_STR(n, v) ((th_bin){.name = (n), .type = 's', .p = (v)})
#define TH_BLOB(n, v, l) ((th_bin){.name = (n), .type = 'b', .p = (v), .len = (l)})
#define TH_DOUBLE(n, v) ((th_bin){.name = (n), .type = 'd', .i = (int64_t)(v)})
#define TH_LIST(n) ((th_bin){.name = (n), .type = 'l'})
#define TH_BOOL(n, v) ((th_bin){.name = (n), .type = 'B', .i = (v)})

/* Replaces record `reckey` (set TH_SET of `ns`) with exactly `bins`, TTL 60,
   with libaerospike directly. Returns the Aerospike status (0 = written). */
int th_plant(const char *ns, const char *reckey, const th_bin *bins, size_t n);
/* The same in another set of `ns`. */
int th_plant_in(const char *ns, const char *set, const char *reckey, const th_bin *bins,
                size_t n);

/* Number of threads of this process (/proc/self/task). */
int th_threads(void);

/* An integer statistic of the test server (fixture-stats), or -1. */
long long th_fixture_stat(const char *name);

/* Adds a fault rule to the test server ("kind=...;op=...": tests/server/README.md);
   fails the test when the server refuses it. */
void th_fault(const char *spec);

/* Set used by th_config. */
#define TH_SET "lmca_test"

#endif
