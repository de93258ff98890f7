/*
 * bench_packing.c - how much of a namespace records of a given size consume:
 * the measurement behind the write-block grid (DESIGN.md, "Segment sizes").
 *
 *   bench_packing [-h hosts] [-n namespace] [-c count] [size ...]
 *
 * For each size: truncates the set "pack", waits for the server's free space to
 * settle, writes `count` records of one blob bin, and reports the drop in the
 * namespace's data_avail_pct next to the share of the namespace the data itself
 * is. Needs a real server (the test server does not model write blocks) and
 * an otherwise idle namespace.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <aerospike/aerospike.h>
#include <aerospike/aerospike_info.h>
#include <aerospike/aerospike_key.h>

static aerospike as;

static long long
ns_stat(const char *ns, const char *name)
{
    char req[64], key[80], *res = NULL, *p;
    as_error e;
    long long v = -1;

    snprintf(req, sizeof req, "namespace/%s", ns);
    if (aerospike_info_any(&as, &e, NULL, req, &res) != AEROSPIKE_OK)
        return -1;
    snprintf(key, sizeof key, ";%s=", name);
    if ((p = strstr(res, key)) != NULL)
        v = atoll(p + strlen(key));
    free(res);
    return v;
}

/* Truncates the set and waits until data_avail_pct stops moving. */
static long long
settle(const char *ns)
{
    as_error e;
    long long prev = -2, now;
    aerospike_truncate(&as, &e, NULL, ns, "pack", 0);
    for (int i = 0; i < 30; i++) {
        sleep(1);
        if ((now = ns_stat(ns, "data_avail_pct")) == prev)
            break;
        prev = now;
    }
    return prev;
}

int
main(int argc, char **argv)
{
    const char *hosts = getenv("AEROSPIKE_TEST_HOSTS"), *ns = "lmcache";
    int count = 100, c;
    as_config cfg;
    as_error e;

    while ((c = getopt(argc, argv, "h:n:c:")) != -1) {
        if (c == 'h') hosts = optarg;
        else if (c == 'n') ns = optarg;
        else if (c == 'c') count = atoi(optarg);
        else return 2;
    }
    if (hosts == NULL || optind == argc) {
        fprintf(stderr, "usage: %s [-h hosts] [-n ns] [-c count] size...\n", argv[0]);
        return 2;
    }
    as_config_init(&cfg);
    as_config_add_hosts(&cfg, hosts, 3000);
    aerospike_init(&as, &cfg);
    if (aerospike_connect(&as, &e) != AEROSPIKE_OK) {
        fprintf(stderr, "connect: %s\n", e.message);
        return 1;
    }
    long long total = ns_stat(ns, "storage-engine.data-size");
    printf("namespace %s, %lld bytes, %d records per size\n", ns, total, count);
    for (int a = optind; a < argc; a++) {
        size_t size = strtoull(argv[a], NULL, 10);
        uint8_t *blob = calloc(1, size);
        long long before = settle(ns), after;
        int failed = 0;
        for (int i = 0; i < count; i++) {
            char key[64];
            as_key k;
            as_record rec;
            snprintf(key, sizeof key, "pack-%zu-%d", size, i);
            as_key_init_str(&k, ns, "pack", key);
            as_record_inita(&rec, 1);
            as_record_set_rawp(&rec, "b", blob, (uint32_t)size, false);
            failed += aerospike_key_put(&as, &e, NULL, &k, &rec) != AEROSPIKE_OK;
        }
        sleep(1);
        after = ns_stat(ns, "data_avail_pct");
        printf("  %9zu bytes: data is %5.1f%% of the namespace, free space fell %3lld points "
               "(%lld%% -> %lld%%)%s\n",
               size, 100.0 * size * count / (double)total, before - after, before, after,
               failed ? " (some writes failed)" : "");
        free(blob);
    }
    settle(ns);
    aerospike_close(&as, &e);
    aerospike_destroy(&as);
    return 0;
}
