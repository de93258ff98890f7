/*
 * harness.c - the test runner behind harness.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <aerospike/aerospike.h>
#include <aerospike/aerospike_info.h>
#include <aerospike/aerospike_key.h>
#include <aerospike/as_arraylist.h>
#include <aerospike/as_boolean.h>
#include <aerospike/as_double.h>
#include <aerospike/as_key.h>
#include <dirent.h>

#include "harness.h"

#define TEST_TIMEOUT_S 120
#define EXIT_SKIP 77

void
th_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    _exit(1);
}

void
th_skip(const char *why)
{
    fprintf(stderr, "    skipped: %s\n", why);
    fflush(stderr);
    _exit(EXIT_SKIP);
}

/* Runs one test in a child process; returns its exit status (0, 1, 77). */
static int
run_one(const th_case *c)
{
    pid_t pid;
    int status;

    fflush(stdout);
    fflush(stderr);
    if ((pid = fork()) == 0) {
        alarm(TEST_TIMEOUT_S);
        c->fn();
        fflush(NULL);
        exit(0); /* exit, not _exit: sanitizers report leaks at exit */
    }
    if (pid < 0 || waitpid(pid, &status, 0) < 0)
        return 1;
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "    killed by signal %d%s\n", WTERMSIG(status),
                WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
        return 1;
    }
    return WEXITSTATUS(status);
}

int
th_run(const char *file, const th_case *cases, size_t n, int argc, char **argv)
{
    size_t passed = 0, failed = 0, skipped = 0;
    const char *only = argc > 1 ? argv[1] : NULL;

    for (size_t i = 0; i < n; i++) {
        if (only && strcmp(only, cases[i].name) != 0)
            continue;
        int rc = run_one(&cases[i]);
        const char *word = rc == 0 ? "ok" : rc == EXIT_SKIP ? "skip" : "FAIL";
        printf("%-4s %s: %s\n", word, file, cases[i].name);
        fflush(stdout);
        passed += rc == 0;
        skipped += rc == EXIT_SKIP;
        failed += rc != 0 && rc != EXIT_SKIP;
    }
    printf("%zu passed, %zu failed, %zu skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

/* ---------------------------------------------------------------------------
 * Server helpers.
 */

const char *
th_hosts(void)
{
    const char *h = getenv("AEROSPIKE_TEST_HOSTS");
    if (h == NULL || *h == '\0')
        th_skip("AEROSPIKE_TEST_HOSTS is not set (scripts/test.sh sets it)");
    return h;
}

static void direct_connect(aerospike *as);

/* The value of an info answer ("cmd\tvalue\n"), into `out`. */
static void
info_value(char *out, size_t cap, const char *res)
{
    const char *tab = strchr(res, '\t');
    snprintf(out, cap, "%s", tab ? tab + 1 : res);
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '\n')
        out[--n] = '\0';
}

/* set-config goes to every node of a cluster; answers that differ are named. */
static bool
each_node(const as_error *e, const as_node *node, const char *req, char *res, void *udata)
{
    char *value = udata, mine[200];
    (void)e, (void)req;
    info_value(mine, sizeof mine, res ? res : "ERROR:no answer");
    if (value[0] == '\0')
        snprintf(value, 256, "%s", mine);
    else if (strcmp(value, mine) != 0)
        snprintf(value, 256, "ERROR: node %s answered %s", node->name, mine);
    return true;
}

const char *
th_info(const char *cmd)
{
    static char value[64 * 1024];
    char *res = NULL;
    aerospike as;
    as_error e;

    direct_connect(&as);
    value[0] = '\0';
    if (strncmp(cmd, "set-config:", 11) == 0) {
        if (aerospike_info_foreach(&as, &e, NULL, cmd, each_node, value) != AEROSPIKE_OK)
            snprintf(value, sizeof value, "ERROR:%d:%s", (int)e.code, e.message);
    } else if (aerospike_info_any(&as, &e, NULL, cmd, &res) == AEROSPIKE_OK && res != NULL) {
        info_value(value, sizeof value, res);
    } else {
        snprintf(value, sizeof value, "ERROR:%d:%s", (int)e.code, e.message);
    }
    free(res);
    aerospike_close(&as, &e);
    aerospike_destroy(&as);
    return value;
}

bool
th_is_fixture(void)
{
    return strcmp(th_info("fixture-reset"), "ok") == 0;
}

void
th_need_fixture(const char *what)
{
    char why[200];
    if (!th_is_fixture()) {
        snprintf(why, sizeof why, "needs the test server's %s", what);
        th_skip(why);
    }
}

static char log_lines[16 * 1024];

static void
collect_log(void *udata, int level, const char *msg)
{
    size_t n = strlen(log_lines);
    (void)udata;
    snprintf(log_lines + n, sizeof log_lines - n, "%s %s\n",
             level >= LMCA_LOG_WARNING ? "WARNING" : level >= LMCA_LOG_INFO ? "INFO" : "DEBUG",
             msg);
}

const char *
th_log(void)
{
    return log_lines;
}

void
th_config(lmca_config_t *cfg, const char *ns)
{
    lmca_config_init(cfg);
    cfg->hosts = th_hosts();
    cfg->namespace_ = ns;
    cfg->set = TH_SET;
    /* Short-lived, so that repeated runs cannot fill a real server's namespace:
       no test needs its records for more than a few seconds. */
    cfg->default_ttl_seconds = 60;
    cfg->log_cb = collect_log;
    /* scripts/test.sh runs the server suites once per data path */
    cfg->fast_path = th_fast_path();
}

void
th_config_segments(lmca_config_t *cfg)
{
    th_config(cfg, "small");
    cfg->min_segment_bytes = 16 * 1024;
    cfg->target_segment_bytes = 64 * 1024;
}

bool
th_fast_path(void)
{
    const char *path = getenv("LMCA_TEST_PATH");
    return path == NULL || strcmp(path, "client") != 0;
}

lmca_t *
th_open(const char *ns)
{
    lmca_config_t cfg;
    lmca_err_t err = {0};
    lmca_t *h = NULL;

    th_config(&cfg, ns);
    if (lmca_open(&cfg, &h, &err) != LMCA_OK)
        th_fail(__FILE__, __LINE__, "lmca_open(%s): %s", ns, err.msg);
    return h;
}

const char *
th_key(const char *prefix)
{
    static char ring[8][128];
    static unsigned counter;
    char *k = ring[counter % 8];
    snprintf(k, sizeof ring[0], "%s-%ld-%ld-%u", prefix, (long)getpid(), (long)time(NULL),
             counter++);
    return k;
}

void
th_fill(void *buf, size_t n, uint32_t seed)
{
    uint8_t *p = buf;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) { /* xorshift64: cheap, and a shifted copy never matches */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        p[i] = (uint8_t)(x >> ((i & 7) * 8));
    }
}

const char *
th_digest_hex(const char *set, const char *reckey)
{
    static char hex[41];
    as_key k;
    as_error e;
    as_digest *d;

    as_key_init_str(&k, "any", set, reckey);
    d = as_key_digest(&k); /* the namespace is not part of the digest */
    (void)e;
    for (int i = 0; i < 20; i++)
        snprintf(hex + 2 * i, 3, "%02x", d->value[i]);
    as_key_destroy(&k);
    return hex;
}

/* One client per call keeps the helpers independent of the engine. */
static void
direct_connect(aerospike *as)
{
    as_config cfg;
    as_error e;
    as_config_init(&cfg);
    as_config_add_hosts(&cfg, th_hosts(), 3000);
    aerospike_init(as, &cfg);
    if (aerospike_connect(as, &e) != AEROSPIKE_OK)
        th_fail(__FILE__, __LINE__, "connect: %s", e.message);
}

int
th_record_ttl(const char *ns, const char *reckey, uint32_t *ttl)
{
    aerospike as;
    as_error e;
    as_key k;
    as_record *rec = NULL;
    as_status rc;

    direct_connect(&as);
    as_key_init_str(&k, ns, TH_SET, reckey);
    rc = aerospike_key_exists(&as, &e, NULL, &k, &rec);
    if (rc == AEROSPIKE_OK && ttl)
        *ttl = rec->ttl;
    if (rec)
        as_record_destroy(rec);
    aerospike_close(&as, &e);
    aerospike_destroy(&as);
    return rc;
}

int
th_record_remove(const char *ns, const char *reckey)
{
    aerospike as;
    as_error e;
    as_key k;
    as_status rc;

    direct_connect(&as);
    as_key_init_str(&k, ns, TH_SET, reckey);
    rc = aerospike_key_remove(&as, &e, NULL, &k);
    aerospike_close(&as, &e);
    aerospike_destroy(&as);
    return rc;
}

static void
plant_bin(as_record *rec, const th_bin *b)
{
    switch (b->type) {
    case 'i':
        as_record_set_int64(rec, b->name, b->i);
        break;
    case 's':
        as_record_set_strp(rec, b->name, b->p, false);
        break;
    case 'b':
        as_record_set_rawp(rec, b->name, b->p, (uint32_t)b->len, false);
        break;
    case 'd':
        as_record_set_double(rec, b->name, (double)b->i);
        break;
    case 'B':
        as_record_set(rec, b->name, (as_bin_value *)as_boolean_new(b->i != 0));
        break;
    case 'l': {
        as_arraylist *l = as_arraylist_new(2, 0);
        as_arraylist_append_int64(l, 1);
        as_arraylist_append_int64(l, 2);
        as_record_set_list(rec, b->name, (as_list *)l);
        break;
    }
    default:
        th_fail(__FILE__, __LINE__, "th_plant: bin type '%c'", b->type);
    }
}

int
th_plant(const char *ns, const char *reckey, const th_bin *bins, size_t n)
{
    return th_plant_in(ns, TH_SET, reckey, bins, n);
}

int
th_plant_in(const char *ns, const char *set, const char *reckey, const th_bin *bins, size_t n)
{
    aerospike as;
    as_error e;
    as_key k;
    as_record rec;
    as_policy_write pol;
    as_status rc;

    direct_connect(&as);
    as_policy_write_init(&pol);
    pol.exists = AS_POLICY_EXISTS_CREATE_OR_REPLACE; /* exactly these bins */
    as_key_init_str(&k, ns, set, reckey);
    as_record_inita(&rec, (uint16_t)n);
    for (size_t i = 0; i < n; i++)
        plant_bin(&rec, &bins[i]);
    rec.ttl = 60;
    rc = aerospike_key_put(&as, &e, &pol, &k, &rec);
    as_record_destroy(&rec);
    aerospike_close(&as, &e);
    aerospike_destroy(&as);
    return rc;
}

int
th_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

void
th_fault(const char *spec)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "fixture-fault:%s", spec);
    const char *ok = th_info(cmd);
    if (strcmp(ok, "ok") != 0)
        th_fail(__FILE__, __LINE__, "%s: %s", cmd, ok);
}

long long
th_fixture_stat(const char *name)
{
    const char *all = th_info("fixture-stats"), *p = all;
    size_t len = strlen(name);
    while (p && *p) {
        if (strncmp(p, name, len) == 0 && p[len] == '=')
            return atoll(p + len + 1);
        p = strchr(p, ';');
        p = p ? p + 1 : NULL;
    }
    return -1;
}

uint64_t
th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
