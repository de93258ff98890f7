/*
 * wire.c - libaerospike behind the narrow interface of wire.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Releasing the cluster's node list (as_cluster_release_all_nodes, for info on
   every node) inlines a fence GCC cannot instrument under -fsanitize=thread;
   see fast.c, which meets the same in as_node_release. */
#if defined(__SANITIZE_THREAD__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wtsan"
#endif

#include <aerospike/aerospike.h>
#include <aerospike/aerospike_batch.h>
#include <aerospike/aerospike_info.h>
#include <aerospike/aerospike_key.h>
#include <aerospike/aerospike_scan.h>
#include <aerospike/as_boolean.h>
#include <aerospike/as_cluster.h>
#include <aerospike/as_exp.h>
#include <aerospike/as_exp_operations.h>
#include <aerospike/as_partition.h>
#include <aerospike/as_record_iterator.h>
#include <aerospike/version.h>

#include "fast.h"
#include "wire.h"

struct lmca__wire {
    aerospike as;
    char ns[32];
    char set[64];
    bool connected;
    as_policy_read read;   /* gets: read-touch as configured */
    as_policy_read peek;   /* everything else (lookups, stats): never touches */
    as_policy_write write;
    as_policy_remove remove;
    as_policy_operate operate;
    as_policy_batch batch; /* likewise, batch gets ... */
    as_policy_batch batch_peek; /* ... and batch lookups */
    as_policy_batch batch_write_parent;
    as_policy_batch_write batch_write;
    as_policy_batch_write batch_touch;
    as_policy_scan scan;
    as_policy_info info;
    bool fast; /* single-record puts and gets through fast.c */
    atomic_uint_fast64_t fast_ops, client_ops;
};

#define COUNT(w, field) atomic_fetch_add_explicit(&(w)->field, 1, memory_order_relaxed)

/* ---------------------------------------------------------------------------
 * Errors: every as_status becomes an lmca status here and nowhere else.
 */

static int
status_of(as_status code)
{
    switch (code) {
    case AEROSPIKE_OK:
        return LMCA_OK;
    case AEROSPIKE_ERR_RECORD_NOT_FOUND:
        return LMCA_MISS;
    case AEROSPIKE_ERR_RECORD_TOO_BIG:
        return LMCA_ETOO_BIG;
    case AEROSPIKE_ERR_TIMEOUT:
        return LMCA_ETIMEOUT;
    case AEROSPIKE_ERR_CONNECTION:
    case AEROSPIKE_ERR_TLS_ERROR:
    case AEROSPIKE_ERR_INVALID_NODE:
    case AEROSPIKE_ERR_INVALID_HOST:
    case AEROSPIKE_ERR_CLUSTER:
    case AEROSPIKE_ERR_CLUSTER_CHANGE:
    case AEROSPIKE_MAX_ERROR_RATE:
    case AEROSPIKE_NO_RESPONSE:
        return LMCA_ECONNECTION;
    case AEROSPIKE_ERR_SERVER_FULL:
        /* stop-writes: a capacity condition, not a moment of load */
        return LMCA_EFULL;
    case AEROSPIKE_ERR_RECORD_BUSY:
    case AEROSPIKE_ERR_DEVICE_OVERLOAD:
    case AEROSPIKE_ERR_NO_MORE_CONNECTIONS:
    case AEROSPIKE_ERR_BATCH_QUEUES_FULL:
    case AEROSPIKE_ERR_BATCH_MAX_REQUESTS_EXCEEDED:
        return LMCA_EBUSY;
    case AEROSPIKE_ERR_FAIL_FORBIDDEN:
        /* On our writes, 22 means a TTL with nsup-period 0 (spec 2.2). */
        return LMCA_ETTL;
    case AEROSPIKE_ERR_NAMESPACE_NOT_FOUND:
        return LMCA_ENAMESPACE;
    case AEROSPIKE_ERR_PARAM:
    case AEROSPIKE_ERR_RECORD_KEY_MISMATCH:
        return LMCA_EINTERNAL;
    default:
        return LMCA_EUNKNOWN;
    }
}

static const char *
advice(int status)
{
    switch (status) {
    case LMCA_ETOO_BIG:
        return "; lower target_segment_bytes / max_segment_bytes, or raise the namespace's "
               "max-record-size";
    case LMCA_ETTL:
        return "; set nsup-period > 0 on the namespace, or default_ttl_seconds to -1 or 0";
    case LMCA_EBUSY:
        return "; passes with load: puts retry for backpressure_ms";
    case LMCA_EFULL:
        return "; the namespace is at stop-writes until NSUP evicts (puts retry for "
               "backpressure_ms) or space is freed";
    default:
        return "";
    }
}

static int
fail_code(lmca_err_t *err, as_status code, const char *message, const char *what,
          const char *key)
{
    int status = status_of(code);
    if (status == LMCA_OK || status == LMCA_MISS)
        return status;
    return lmca__fail(err, status, code, "%s %s: %s (aerospike %d)%s", what, key ? key : "",
                      message && *message ? message : lmca_strerror(status), (int)code,
                      advice(status));
}

static int
fail(lmca_err_t *err, const as_error *e, const char *what, const char *key)
{
    return fail_code(err, e->code, e->message, what, key);
}

/* ---------------------------------------------------------------------------
 * Open and close.
 */

const char *
lmca_aerospike_version(void)
{
    return aerospike_client_version;
}

static uint32_t
half(uint32_t ms)
{
    return ms / 2 ? ms / 2 : 1;
}

static void
init_policies(lmca__wire *w, const lmca_config_t *cfg)
{
    static const as_policy_replica replicas[] = {AS_POLICY_REPLICA_SEQUENCE, AS_POLICY_REPLICA_MASTER,
                                                 AS_POLICY_REPLICA_ANY,
                                                 AS_POLICY_REPLICA_PREFER_RACK};
    as_policy_commit_level commit =
        cfg->commit_level == LMCA_COMMIT_MASTER ? AS_POLICY_COMMIT_LEVEL_MASTER
                                                : AS_POLICY_COMMIT_LEVEL_ALL;
    as_policy_key key = cfg->send_key ? AS_POLICY_KEY_SEND : AS_POLICY_KEY_DIGEST;

    as_policy_read_init(&w->read);
    w->read.base.total_timeout = cfg->read_timeout_ms;
    /* Half of it on one node, then the next copy (replica SEQUENCE): with the
       client's socket timeout of 30 s, a read of a paused node spent its whole
       budget there and raised a timeout though its replica held the record. */
    w->read.base.socket_timeout = half(cfg->read_timeout_ms);
    w->read.replica = replicas[cfg->replica];
    /* While a partition migrates, its master asks every node with a copy and
       answers the newest (free otherwise): a node back from a pause is master
       again at once, with the copies it had when it stopped, and its NSUP
       evicts those; read alone, they missed while its fill went on (warm
       chunks read as misses, then left unmoved and evicted). */
    w->read.read_mode_ap = AS_POLICY_READ_MODE_AP_ALL;
    /* Read-touch on reads of payloads only: a lookup that touched a meta record
       but not its segments would let the meta record outlive them (present, but
       a get misses), and a stat is not a use. -1 is the wire's "never", which
       also overrides a namespace default-read-touch-ttl-pct. */
    w->peek = w->read;
    w->read.read_touch_ttl_percent = cfg->read_touch_ttl_percent;
    w->peek.read_touch_ttl_percent = -1;
    as_policy_write_init(&w->write);
    w->write.base.total_timeout = cfg->write_timeout_ms;
    w->write.commit_level = commit;
    w->write.key = key;
    w->write.exists = AS_POLICY_EXISTS_CREATE_OR_REPLACE; /* a put replaces all bins */
    as_policy_remove_init(&w->remove);
    w->remove.base.total_timeout = cfg->write_timeout_ms;
    w->remove.commit_level = commit;
    as_policy_operate_init(&w->operate);
    w->operate.base.total_timeout = cfg->write_timeout_ms;
    w->operate.commit_level = commit;
    as_policy_batch_init(&w->batch);
    w->batch.base.total_timeout = cfg->read_timeout_ms;
    w->batch.base.socket_timeout = half(cfg->read_timeout_ms);
    w->batch.replica = replicas[cfg->replica];
    w->batch.read_mode_ap = AS_POLICY_READ_MODE_AP_ALL; /* as w->read's */
    w->batch_peek = w->batch;
    w->batch.read_touch_ttl_percent = cfg->read_touch_ttl_percent;
    w->batch_peek.read_touch_ttl_percent = -1;
    as_policy_batch_parent_write_init(&w->batch_write_parent);
    w->batch_write_parent.base.total_timeout = cfg->write_timeout_ms;
    as_policy_batch_write_init(&w->batch_write);
    w->batch_write.commit_level = commit;
    w->batch_write.key = key;
    w->batch_write.exists = AS_POLICY_EXISTS_CREATE_OR_REPLACE;
    /* A touch updates a record that must exist (a server refuses touch with replace). */
    as_policy_batch_write_init(&w->batch_touch);
    w->batch_touch.commit_level = commit;
    w->batch_touch.exists = AS_POLICY_EXISTS_UPDATE;
    as_policy_scan_init(&w->scan);
    as_policy_info_init(&w->info);
    w->info.timeout = cfg->read_timeout_ms;
}

/* Seeds from "h1:3000,h2". With a tls_name, every seed is a TLS host of that
   name (Enterprise Edition; passed through, not validated here). */
static bool
add_hosts(as_config *ac, const lmca_config_t *cfg)
{
    char list[1024], *save = NULL;

    if (cfg->tls_name == NULL || *cfg->tls_name == '\0')
        return as_config_add_hosts(ac, cfg->hosts, 3000);
    if (snprintf(list, sizeof list, "%s", cfg->hosts) >= (int)sizeof list)
        return false;
    ac->tls.enable = true;
    for (char *h = strtok_r(list, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(h, ':'), *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : 3000;
        if (colon)
            *colon = '\0';
        if (*h == '\0' || port <= 0 || port > 65535 || (end && *end != '\0'))
            return false;
        as_config_tls_add_host(ac, h, cfg->tls_name, (uint16_t)port);
    }
    return true;
}

/* Fills the client's config from ours; on failure `ac` is destroyed (it may
   already own seed hosts) and err names the setting. */
static int
client_config(as_config *ac, const lmca_config_t *cfg, lmca_err_t *err)
{
    int rc = LMCA_OK;

    as_config_init(ac);
    if (!add_hosts(ac, cfg))
        rc = lmca__fail(err, LMCA_ECONFIG, 0, "config hosts=\"%s\": not a host[:port],... list",
                        cfg->hosts);
    else if (cfg->username && *cfg->username &&
             !as_config_set_user(ac, cfg->username, cfg->password ? cfg->password : ""))
        rc = lmca__fail(err, LMCA_ECONFIG, 0,
                        "config username/password: refused by the client (at most %d bytes "
                        "each)",
                        AS_USER_SIZE - 1);
    if (rc != LMCA_OK) {
        as_config_destroy(ac);
        return rc;
    }
    ac->conn_timeout_ms = cfg->connect_timeout_ms;
    ac->max_conns_per_node = cfg->max_conns_per_node;
    return LMCA_OK;
}

int
lmca__wire_open(const lmca_config_t *cfg, lmca__wire **out, lmca_err_t *err)
{
    as_config ac;
    as_error e;
    lmca__wire *w;
    int rc;

    if ((rc = client_config(&ac, cfg, err)) != LMCA_OK)
        return rc;
    if ((w = lmca__calloc(1, sizeof *w)) == NULL) {
        as_config_destroy(&ac);
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory opening a handle");
    }
    snprintf(w->ns, sizeof w->ns, "%s", cfg->namespace_);
    snprintf(w->set, sizeof w->set, "%s", cfg->set);
    init_policies(w, cfg);
    w->fast = cfg->fast_path;
    aerospike_init(&w->as, &ac); /* owns the config's seeds from here */
    if (aerospike_connect(&w->as, &e) != AEROSPIKE_OK) {
        rc = lmca__fail(err, LMCA_ECONNECTION, e.code,
                        "cannot connect to hosts \"%s\": %s (aerospike %d)", cfg->hosts,
                        e.message, (int)e.code);
        aerospike_destroy(&w->as);
        free(w);
        return rc;
    }
    w->connected = true;
    *out = w;
    return LMCA_OK;
}

void
lmca__wire_close(lmca__wire *w)
{
    as_error e;
    if (w == NULL)
        return;
    if (w->connected)
        aerospike_close(&w->as, &e);
    aerospike_destroy(&w->as);
    free(w);
}

void
lmca__wire_paths(lmca__wire *w, uint64_t *fast_ops, uint64_t *client_ops)
{
    *fast_ops = atomic_load_explicit(&w->fast_ops, memory_order_relaxed);
    *client_ops = atomic_load_explicit(&w->client_ops, memory_order_relaxed);
}

int
lmca__wire_info(lmca__wire *w, const char *req, char **answer, lmca_err_t *err)
{
    as_error e;
    *answer = NULL;
    if (aerospike_info_any(&w->as, &e, &w->info, req, answer) != AEROSPIKE_OK) {
        int status = status_of(e.code);
        if (status == LMCA_OK || status == LMCA_MISS || status == LMCA_EUNKNOWN)
            status = LMCA_ENAMESPACE;
        return lmca__fail(err, status, e.code, "info \"%s\": %s (aerospike %d)", req, e.message,
                          (int)e.code);
    }
    return LMCA_OK;
}

/* A node's failed info request. The client turns an answer "ERROR:<code>:..."
   into that code: 4 there means the node does not know the command, which the
   caller chose, so it is an argument error rather than an unknown one. */
static int
info_node_fail(lmca_err_t *err, const as_error *e, const char *req, as_node *node)
{
    int status = e->code == AEROSPIKE_ERR_REQUEST_INVALID ? LMCA_EINVAL : status_of(e->code);
    char where[96] = "";
    if (status == LMCA_OK || status == LMCA_MISS)
        status = LMCA_EUNKNOWN;
    if (node != NULL)
        snprintf(where, sizeof where, " on node %s (%s)", node->name,
                 as_node_get_address_string(node));
    return lmca__fail(err, status, e->code, "info \"%.100s\"%s: %s (aerospike %d)", req, where,
                      e->message, (int)e->code);
}

int
lmca__wire_info_each(lmca__wire *w, const char *req, lmca__info_cb cb, void *udata,
                     lmca_err_t *err)
{
    as_error e;
    as_nodes *nodes;
    bool more = true;
    int rc = LMCA_OK;

    /* An empty cluster is an error (AEROSPIKE_ERR_CLUSTER), not zero answers. */
    if (as_cluster_reserve_all_nodes(w->as.cluster, &e, &nodes) != AEROSPIKE_OK)
        return info_node_fail(err, &e, req, NULL);
    for (uint32_t i = 0; more && rc == LMCA_OK && i < nodes->size; i++) {
        as_node *node = nodes->array[i];
        char *answer = NULL, empty[1] = "";
        if (aerospike_info_node(&w->as, &e, &w->info, node, req, &answer) != AEROSPIKE_OK)
            rc = info_node_fail(err, &e, req, node);
        else
            more = cb(udata, node->name, as_node_get_address_string(node),
                      answer ? answer : empty);
        free(answer);
    }
    as_cluster_release_all_nodes(nodes);
    return rc;
}

uint32_t
lmca__wire_nodes(lmca__wire *w)
{
    as_nodes *nodes = as_nodes_reserve(w->as.cluster);
    uint32_t n = nodes->size;
    as_nodes_release(nodes);
    return n;
}

/* ---------------------------------------------------------------------------
 * Records.
 */

/* The client's setters refuse only on a full container, which the sizes below
   rule out; a refusal is still reported rather than sending a partial record. */
static bool
set_bins(as_record *rec, const lmca__bin *bins, unsigned n)
{
    bool ok = true;
    for (unsigned i = 0; i < n; i++) {
        const lmca__bin *b = &bins[i];
        if (b->type == LMCA__INT)
            ok &= as_record_set_int64(rec, b->name, b->i);
        else if (b->type == LMCA__STR)
            ok &= as_record_set_strp(rec, b->name, (char *)b->p, false);
        else /* wrapped, not copied: the caller's buffer outlives the call */
            ok &= as_record_set_rawp(rec, b->name, (const uint8_t *)b->p, (uint32_t)b->len,
                                     false);
    }
    return ok;
}

static bool
add_ops(as_operations *ops, const lmca__bin *bins, unsigned n)
{
    bool ok = true;
    for (unsigned i = 0; i < n; i++) {
        const lmca__bin *b = &bins[i];
        if (b->type == LMCA__INT)
            ok &= as_operations_add_write_int64(ops, b->name, b->i);
        else if (b->type == LMCA__STR)
            ok &= as_operations_add_write_strp(ops, b->name, (const char *)b->p, false);
        else
            ok &= as_operations_add_write_rawp(ops, b->name, (const uint8_t *)b->p,
                                               (uint32_t)b->len, false);
    }
    return ok;
}

static int
refused(lmca_err_t *err, const char *what, const char *key)
{
    return lmca__fail(err, LMCA_EINTERNAL, 0, "%s %s: the client refused a bin", what, key);
}

/* `base` with a total timeout of `timeout_ms` where that is shorter (a put
   near its bound: lmca__put_left_ms). */
static void
shorten(as_policy_base *base, uint32_t timeout_ms)
{
    if (timeout_ms == 0 || timeout_ms >= base->total_timeout)
        return;
    base->total_timeout = timeout_ms;
    if (base->socket_timeout > timeout_ms)
        base->socket_timeout = timeout_ms;
}

int
lmca__wire_write(lmca__wire *w, const char *key, const lmca__bin *bins, unsigned n, uint32_t ttl,
                 uint32_t timeout_ms, lmca_err_t *err)
{
    as_policy_write policy = w->write;
    as_key k;
    as_record rec;
    as_error e;
    as_status rc;

    shorten(&policy.base, timeout_ms);
    as_key_init_str(&k, w->ns, w->set, key);
    if (w->fast) {
        COUNT(w, fast_ops);
        rc = lmca__fast_put(&w->as, &e, &policy, &k, bins, n, ttl);
        return rc == AEROSPIKE_OK ? LMCA_OK : fail(err, &e, "put", key);
    }
    COUNT(w, client_ops);
    as_record_inita(&rec, (uint16_t)n);
    if (!set_bins(&rec, bins, n)) {
        as_record_destroy(&rec);
        return refused(err, "put", key);
    }
    rec.ttl = ttl;
    rc = aerospike_key_put(&w->as, &e, &policy, &k, &rec);
    as_record_destroy(&rec);
    return rc == AEROSPIKE_OK ? LMCA_OK : fail(err, &e, "put", key);
}

/* One bin of a read record, as it came: typed, not judged (the schema judges). */
static lmca__bin
bin_of(const char *name, const as_val *v)
{
    lmca__bin b = {.name = name, .type = LMCA__OTHER};

    switch (as_val_type((as_val *)v)) {
    case AS_INTEGER:
        b.type = LMCA__INT;
        b.i = as_integer_get((as_integer *)v);
        break;
    case AS_BOOLEAN:
        b.type = LMCA__INT;
        b.i = as_boolean_get((as_boolean *)v);
        break;
    case AS_STRING:
        b.type = LMCA__STR;
        b.p = as_string_get((as_string *)v);
        b.len = as_string_len((as_string *)v);
        break;
    case AS_BYTES:
        b.type = LMCA__BLOB;
        b.p = as_bytes_get((as_bytes *)v);
        b.len = as_bytes_size((as_bytes *)v);
        break;
    default:
        break;
    }
    return b;
}

/* Hands a read record's bins over: the payload bin to r->dst (copied only when it
   is a blob that fits), every other bin to r->cb. */
static void
take_record(const as_record *rec, const char *payload, lmca__read *r)
{
    as_record_iterator it;
    as_record_iterator_init(&it, rec);
    while (as_record_iterator_has_next(&it)) {
        as_bin *bin = as_record_iterator_next(&it);
        lmca__bin b = bin_of(as_bin_get_name(bin), (as_val *)as_bin_get_value(bin));
        if (payload != NULL && strcmp(b.name, payload) == 0 && r->found) {
            r->repeated = true; /* a second one must not land on the first's bytes */
        } else if (payload != NULL && strcmp(b.name, payload) == 0) {
            r->found = true;
            r->blob = b.type == LMCA__BLOB;
            r->len = b.len;
            if (r->blob && r->dst == NULL && r->alloc && b.len > 0) {
                r->nomem = (r->dst = lmca__malloc(b.len)) == NULL;
                r->cap = r->nomem ? 0 : b.len;
            }
            if (r->blob && b.len <= r->cap && b.len > 0)
                memcpy(r->dst, b.p, b.len); /* the one copy libaerospike's API leaves us */
        } else if (r->cb != NULL) {
            r->cb(r->udata, &b);
        }
    }
    as_record_iterator_destroy(&it);
    r->ttl = rec->ttl;
}

static void
read_reset(lmca__read *r)
{
    r->found = r->repeated = r->blob = r->nomem = false;
    r->len = 0;
    r->ttl = 0;
    r->result = LMCA_OK;
}

int
lmca__wire_read(lmca__wire *w, const char *key, const char *const *names, const char *payload,
                lmca__read *r, lmca_err_t *err)
{
    as_key k;
    as_error e;
    as_record *rec = NULL;
    as_status rc;

    const as_policy_read *policy = payload ? &w->read : &w->peek;

    read_reset(r);
    as_key_init_str(&k, w->ns, w->set, key);
    if (w->fast) {
        COUNT(w, fast_ops);
        rc = lmca__fast_select(&w->as, &e, policy, &k, names, payload, r);
        return r->result = rc == AEROSPIKE_OK ? LMCA_OK : fail(err, &e, "get", key);
    }
    COUNT(w, client_ops);
    rc = names ? aerospike_key_select(&w->as, &e, policy, &k, (const char **)names, &rec)
               : aerospike_key_get(&w->as, &e, policy, &k, &rec);
    if (rc != AEROSPIKE_OK)
        return r->result = fail(err, &e, "get", key);
    take_record(rec, payload, r);
    as_record_destroy(rec);
    return LMCA_OK;
}

/* ---------------------------------------------------------------------------
 * Batches. Rows are reserved in caller order, so row i answers keys[i].
 */

/* Maps a failed batch: the first row that is neither OK nor NOT_FOUND names it. */
static int
batch_fail(lmca_err_t *err, const as_error *e, as_batch_records *recs, const char *what)
{
    as_vector *list = &recs->list;
    for (uint32_t i = 0; i < list->size; i++) {
        as_batch_base_record *r = as_vector_get(list, i);
        if (r->result != AEROSPIKE_OK && r->result != AEROSPIKE_ERR_RECORD_NOT_FOUND)
            return fail_code(err, r->result, r->message ? r->message : as_error_string(r->result),
                             what, (const char *)r->key.valuep->string.value);
    }
    return fail(err, e, what, "");
}

/* Maps the overall result of a batch call: a BATCH_FAILED is reported by the
   row that caused it, anything else by the call. */
static int
batch_result(as_status rc, lmca_err_t *err, const as_error *e, as_batch_records *recs,
             const char *what, const char *first_key)
{
    if (rc == AEROSPIKE_OK)
        return LMCA_OK;
    return e->code == AEROSPIKE_BATCH_FAILED ? batch_fail(err, e, recs, what)
                                             : fail(err, e, what, first_key);
}

/* A row's own status; a row the server never answered failed with the call. */
static int
row_status(const as_batch_base_record *r, int call, const char *what, const char *key)
{
    if (r->result == AEROSPIKE_NO_RESPONSE && call != LMCA_OK)
        return call;
    return fail_code(NULL, r->result, r->message, what, key);
}

int
lmca__wire_read_many(lmca__wire *w, const char *const *keys, size_t n, const char *const *names,
                     const char *payload, lmca__read *rs, lmca_err_t *err)
{
    as_batch_records recs;
    as_error e;
    uint32_t nnames = 0;
    as_status call;
    int rc;

    while (names && names[nnames])
        nnames++;
    as_batch_records_init(&recs, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        as_batch_read_record *r = as_batch_read_reserve(&recs);
        as_key_init_str(&r->key, w->ns, w->set, keys[i]);
        r->read_all_bins = names == NULL;
        r->bin_names = (char **)names;
        r->n_bin_names = nnames;
        read_reset(&rs[i]);
    }
    call = aerospike_batch_read(&w->as, &e, payload ? &w->batch : &w->batch_peek, &recs);
    rc = batch_result(call, err, &e, &recs, "batch get", keys[0]);
    for (size_t i = 0; i < n; i++) {
        as_batch_read_record *r = as_vector_get(&recs.list, (uint32_t)i);
        /* A call that failed for any reason but a failed row may leave a row
           marked OK whose record the client could not parse (it sets the
           result first): no row of it is read. */
        rs[i].result = call != AEROSPIKE_OK && e.code != AEROSPIKE_BATCH_FAILED
                           ? rc
                           : row_status((as_batch_base_record *)r, rc, "batch get", keys[i]);
        if (rs[i].result == LMCA_OK)
            take_record(&r->record, payload, &rs[i]);
    }
    as_batch_records_destroy(&recs);
    return rc;
}

int
lmca__wire_write_many(lmca__wire *w, lmca__row *rows, size_t n, uint32_t timeout_ms,
                      lmca_err_t *err)
{
    as_policy_batch parent = w->batch_write_parent;
    as_batch_records recs;
    as_operations *ops = lmca__calloc(n, sizeof *ops);
    as_error e;
    bool built = true;
    int rc;

    if (ops == NULL)
        return lmca__fail(err, LMCA_ENOMEM, 0, "out of memory for a batch of %zu writes", n);
    shorten(&parent.base, timeout_ms);
    as_batch_records_init(&recs, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        as_batch_write_record *r = as_batch_write_reserve(&recs);
        as_key_init_str(&r->key, w->ns, w->set, rows[i].key);
        as_operations_init(&ops[i], (uint16_t)(rows[i].nbins + rows[i].touch));
        if (rows[i].touch)
            built &= as_operations_add_touch(&ops[i]);
        built &= add_ops(&ops[i], rows[i].bins, rows[i].nbins);
        ops[i].ttl = rows[i].ttl;
        r->ops = &ops[i];
        r->policy = rows[i].touch ? &w->batch_touch : &w->batch_write;
    }
    if (built)
        rc = batch_result(aerospike_batch_write(&w->as, &e, &parent, &recs), err,
                          &e, &recs, "batch put", rows[0].key);
    else
        rc = refused(err, "batch put", rows[0].key);
    for (size_t i = 0; i < n; i++) {
        as_batch_write_record *r = as_vector_get(&recs.list, (uint32_t)i);
        rows[i].result = built ? row_status((as_batch_base_record *)r, rc, "batch put", rows[i].key)
                               : rc;
        as_operations_destroy(&ops[i]);
    }
    as_batch_records_destroy(&recs);
    free(ops);
    return rc;
}

int
lmca__wire_remove(lmca__wire *w, const char *key, lmca_err_t *err)
{
    as_key k;
    as_error e;
    as_key_init_str(&k, w->ns, w->set, key);
    if (aerospike_key_remove(&w->as, &e, &w->remove, &k) != AEROSPIKE_OK)
        return fail(err, &e, "remove", key);
    return LMCA_OK;
}

const char *
lmca__wire_digest_hex(lmca__wire *w, const char *key, char out[41])
{
    as_key k;
    as_key_init_str(&k, w->ns, w->set, key);
    as_digest *d = as_key_digest(&k);
    for (int i = 0; i < 20; i++)
        snprintf(out + 2 * i, 3, "%02x", d ? d->value[i] : 0);
    as_key_destroy(&k);
    return out;
}

int
lmca__wire_remove_digest(lmca__wire *w, const char *set, const uint8_t digest[20], uint16_t gen,
                         lmca_err_t *err)
{
    as_key k;
    as_error e;
    as_policy_remove policy = w->remove;

    if (set == NULL)
        set = w->set;
    as_key_init_digest(&k, w->ns, set, digest);
    if (gen != 0) {
        policy.gen = AS_POLICY_GEN_EQ;
        policy.generation = gen;
    }
    if (aerospike_key_remove(&w->as, &e, &policy, &k) != AEROSPIKE_OK)
        return fail(err, &e, "remove by digest in", set);
    return LMCA_OK;
}

int
lmca__wire_remove_many(lmca__wire *w, const char *const *keys, size_t n, size_t *removed,
                       size_t *failed, lmca_err_t *err)
{
    as_batch_records recs;
    as_error e;
    int rc;

    as_batch_records_init(&recs, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        as_batch_remove_record *r = as_batch_remove_reserve(&recs);
        as_key_init_str(&r->key, w->ns, w->set, keys[i]);
    }
    /* Missing rows answer NOT_FOUND, which does not fail the batch. */
    rc = batch_result(aerospike_batch_write(&w->as, &e, &w->batch_write_parent, &recs), err, &e,
                      &recs, "batch remove", keys[0]);
    for (size_t i = 0; i < n; i++) {
        as_batch_remove_record *r = as_vector_get(&recs.list, (uint32_t)i);
        *removed += r->result == AEROSPIKE_OK;
        *failed += r->result != AEROSPIKE_OK && r->result != AEROSPIKE_ERR_RECORD_NOT_FOUND;
    }
    as_batch_records_destroy(&recs);
    return rc;
}

int
lmca__wire_touch(lmca__wire *w, const char *key, uint32_t ttl, const lmca__bin *bins, unsigned n,
                 lmca_err_t *err)
{
    as_key k;
    as_error e;
    as_operations ops;
    as_record *rec = NULL;
    as_status rc;

    as_key_init_str(&k, w->ns, w->set, key);
    as_operations_inita(&ops, (uint16_t)(n + 1));
    if (!as_operations_add_touch(&ops) || !add_ops(&ops, bins, n)) {
        as_operations_destroy(&ops);
        return refused(err, "touch", key);
    }
    ops.ttl = ttl;
    rc = aerospike_key_operate(&w->as, &e, &w->operate, &k, &ops, &rec);
    as_operations_destroy(&ops);
    if (rec != NULL)
        as_record_destroy(rec);
    return rc == AEROSPIKE_OK ? LMCA_OK : fail(err, &e, "touch", key);
}

/* ---------------------------------------------------------------------------
 * The shared void-time clock's records (clock.c): small, never expiring, in a
 * set of their own. A reservation is one operate whose expressions run on the
 * node that masters the record, on that node's time, so that no writer's host
 * clock enters the order.
 */

#define CLOCK_NEXT_BIN "next_us"   /* the clock: the next free place, µs of server time */
#define CLOCK_STORE_BIN "store_us" /* the stores' clock, which puts are paced by */
#define CLOCK_TTL_BIN "ttl_s"      /* the clock's TTL: the largest of its writers' ... */
#define CLOCK_HOLD_BIN "ttl_until" /* ... while one asserted it lately (server ms) */
#define CLOCK_CREDIT_BIN "touch_b" /* the bytes moves may still rewrite (the touch budget) */
#define CLOCK_EARNED_BIN "touch_e" /* ... and the most it could hold by now: what the stores
                                      earned, up to its cap (how scarce it is) */
/* What the reservation reads back, by expression under names of their own: an
   operate answers each op, the writes' nil results too, and the client makes a
   bin named by several ops a list of their results. */
#define CLOCK_OLD "o"      /* the clock before this reservation */
#define CLOCK_NOW "now_ms" /* the node's time */
#define CLOCK_NEXT_READ "n"
#define CLOCK_STORE_READ "s"
#define CLOCK_TTL_READ "t"
#define CLOCK_REFUSED "r"
#define CLOCK_UNBUDGETED "u"
#define CLOCK_CREDIT_READ "k"
#define CLOCK_EARNED_READ "e"

/* An integer bin, or 0 when it is missing or of another type (a record no
   client of ours wrote): bin_int alone would fail the whole operate. */
#define EXP_INT_OR_0(bin)                                                                  \
    as_exp_cond(as_exp_cmp_eq(as_exp_bin_type(bin), as_exp_int(AS_BYTES_INTEGER)),         \
                as_exp_bin_int(bin), as_exp_int(0))
/* The node's time in ms: the last-update time, which this very operate set to
   the transaction's time before any op ran (the server's write_master_apply
   calls advance_record_version before the bin ops), plus the time since, which
   a last-update time that cannot go backwards may leave. */
#define EXP_NOW_MS                                                                         \
    as_exp_add(as_exp_div(as_exp_last_update(), as_exp_int(1000000)), as_exp_since_update())
/* This writer's TTL wins when it is at least the clock's, or when the clock's
   was not asserted for hold_ms (its writers left, or lowered theirs). */
#define EXP_TTL_MINE(ask)                                                                  \
    as_exp_or(as_exp_cmp_ge(as_exp_int((ask)->ttl_s), EXP_INT_OR_0(CLOCK_TTL_BIN)),        \
              as_exp_cmp_gt(EXP_NOW_MS, EXP_INT_OR_0(CLOCK_HOLD_BIN)))

/* A clock's value as a reservation takes it: variable `v` (the bin) as it is,
   or the node's now `b` when it lags b by more than catch_up_us (writers slower
   than the clock's rate) or leads it by more than sane_us (no clock of ours),
   and never below `floor` (the furthest place this handle knows of: after a
   failover, the order goes on from where the other clock left it). */
#define EXP_TAKEN(v, ask, floor)                                                          \
    as_exp_max(as_exp_cond(as_exp_or(as_exp_cmp_lt(as_exp_add(as_exp_var(v),              \
                                                             as_exp_int((ask)->catch_up_us)), \
                                                  as_exp_var("b")),                        \
                                     as_exp_cmp_gt(as_exp_var(v),                          \
                                                   as_exp_add(as_exp_var("b"),             \
                                                              as_exp_int((ask)->sane_us)))), \
                           as_exp_var("b"), as_exp_var(v)),                                \
               as_exp_int(floor))
/* The variables of a reservation's expressions: b, the node's now in µs; s,
   the stores' clock; full, whether s as taken leads b past limit_us; c, the
   moves' credit with this reservation's share added (at most its cap); and
   none, whether nothing is to be added: full, or a move that found c at 0 or
   below. */
#define EXP_CLOCK_LET(ask, ...)                                                           \
    as_exp_let(as_exp_def("b", as_exp_mul(EXP_NOW_MS, as_exp_int(1000))),                  \
               as_exp_def("s", EXP_INT_OR_0(CLOCK_STORE_BIN)),                              \
               as_exp_def("full", as_exp_cmp_gt(EXP_TAKEN("s", ask, (ask)->store_floor_us), \
                                                as_exp_add(as_exp_var("b"),                 \
                                                           as_exp_int(clock_limit(ask))))), \
               as_exp_def("c", as_exp_min(as_exp_add(EXP_INT_OR_0(CLOCK_CREDIT_BIN),       \
                                                     as_exp_int((ask)->credit_add)),       \
                                          as_exp_int((ask)->credit_cap))),                  \
               as_exp_def("poor", as_exp_and(as_exp_bool((ask)->move_bytes > 0),            \
                                             as_exp_cmp_le(as_exp_var("c"), as_exp_int(0)))), \
               as_exp_def("none", as_exp_or(as_exp_var("full"), as_exp_var("poor"))),     \
               __VA_ARGS__)

/* No limit, as a sum with the node's now that cannot overflow. */
static int64_t
clock_limit(const lmca__clock_ask *ask)
{
    return ask->limit_us > 0 ? ask->limit_us : INT64_MAX / 4;
}

/* `bin`'s place for this reservation (EXP_TAKEN), plus `add` unless the stores'
   clock leads too far or a move has no credit (then the clocks stay where they
   are). */
static as_exp *
clock_exp(const char *bin, const lmca__clock_ask *ask, int64_t floor, int64_t add)
{
    as_exp_build(e,
        EXP_CLOCK_LET(ask,
            as_exp_def("v", EXP_INT_OR_0(bin)),
            as_exp_add(EXP_TAKEN("v", ask, floor),
                       as_exp_cond(as_exp_var("none"), as_exp_int(0), as_exp_int(add)))));
    return e;
}

/* An integer bin of the answer into *out; false when it is missing or not one. */
static bool
int_bin(const as_record *rec, const char *name, int64_t *out)
{
    as_val *v = rec != NULL ? (as_val *)as_record_get(rec, name) : NULL;
    if (v == NULL || as_val_type(v) != AS_INTEGER)
        return false;
    *out = as_integer_get((as_integer *)v);
    return true;
}

/* The operate's expressions, built and freed together. */
enum { X_OLD, X_REFUSED, X_UNBUDGETED, X_TTL, X_HOLD, X_NEXT, X_STORE, X_CREDIT, X_NOW,
       X_EARNED, X_READ_NEXT, X_READ_STORE, X_READ_TTL, X_READ_CREDIT, X_READ_EARNED, X_N };

static bool
build_clock(as_exp *x[X_N], const lmca__clock_ask *ask)
{
    as_exp_build(old, EXP_INT_OR_0(CLOCK_NEXT_BIN));
    as_exp_build(refused, EXP_CLOCK_LET(ask, as_exp_cond(as_exp_var("full"), as_exp_int(1),
                                                         as_exp_int(0))));
    as_exp_build(unbudgeted, EXP_CLOCK_LET(ask, as_exp_cond(as_exp_var("poor"), as_exp_int(1),
                                                            as_exp_int(0))));
    /* Stores' credit always (it is for bytes landed already); a move's bytes
       taken only when it is made. */
    as_exp_build(credit, EXP_CLOCK_LET(ask, as_exp_sub(as_exp_var("c"),
                                                       as_exp_cond(as_exp_var("none"),
                                                                   as_exp_int(0),
                                                                   as_exp_int(ask->move_bytes)))));
    as_exp_build(ttl, as_exp_cond(EXP_TTL_MINE(ask), as_exp_int(ask->ttl_s),
                                  EXP_INT_OR_0(CLOCK_TTL_BIN)));
    /* After the TTL's write: mine is the clock's now exactly when it won. */
    as_exp_build(hold, as_exp_cond(EXP_TTL_MINE(ask),
                                   as_exp_add(EXP_NOW_MS, as_exp_int(ask->hold_ms)),
                                   EXP_INT_OR_0(CLOCK_HOLD_BIN)));
    as_exp_build(now, EXP_NOW_MS);
    as_exp_build(read_next, as_exp_bin_int(CLOCK_NEXT_BIN));
    as_exp_build(read_store, as_exp_bin_int(CLOCK_STORE_BIN));
    as_exp_build(read_ttl, as_exp_bin_int(CLOCK_TTL_BIN));
    as_exp_build(read_credit, as_exp_bin_int(CLOCK_CREDIT_BIN));
    as_exp_build(earned, as_exp_min(as_exp_add(EXP_INT_OR_0(CLOCK_EARNED_BIN),
                                               as_exp_int(ask->credit_add)),
                                    as_exp_int(ask->credit_cap)));
    as_exp_build(read_earned, as_exp_bin_int(CLOCK_EARNED_BIN));
    x[X_OLD] = old, x[X_REFUSED] = refused, x[X_UNBUDGETED] = unbudgeted, x[X_TTL] = ttl;
    x[X_HOLD] = hold, x[X_NOW] = now, x[X_CREDIT] = credit;
    x[X_NEXT] = clock_exp(CLOCK_NEXT_BIN, ask, ask->floor_us, ask->span_us);
    x[X_STORE] = clock_exp(CLOCK_STORE_BIN, ask, ask->store_floor_us, ask->store_us);
    x[X_READ_NEXT] = read_next, x[X_READ_STORE] = read_store, x[X_READ_TTL] = read_ttl;
    x[X_READ_CREDIT] = read_credit, x[X_EARNED] = earned, x[X_READ_EARNED] = read_earned;
    for (int i = 0; i < X_N; i++)
        if (x[i] == NULL)
            return false;
    return true;
}

int
lmca__wire_clock(lmca__wire *w, const char *key, const lmca__clock_ask *ask,
                 lmca__clock_answer *out, lmca_err_t *err)
{
    as_key k;
    as_error e;
    as_operations ops;
    as_record *rec = NULL;
    as_policy_operate policy = w->operate;
    as_exp *x[X_N] = {0};
    int status = LMCA_OK;

    as_key_init_str(&k, w->ns, LMCA__CLOCK_SET, key);
    /* Short, and no retry: another clock record is the retry (clock.c). */
    policy.base.total_timeout = ask->timeout_ms;
    policy.base.max_retries = 0;
    as_operations_inita(&ops, X_N);
    if (!build_clock(x, ask)) {
        status = lmca__fail(err, LMCA_ENOMEM, 0, "clock %s: out of memory", key);
    } else {
        /* In this order: each op sees the bins as the ones before it left them. */
        as_operations_exp_read(&ops, CLOCK_OLD, x[X_OLD], AS_EXP_READ_DEFAULT);
        as_operations_exp_read(&ops, CLOCK_REFUSED, x[X_REFUSED], AS_EXP_READ_DEFAULT);
        as_operations_exp_read(&ops, CLOCK_UNBUDGETED, x[X_UNBUDGETED], AS_EXP_READ_DEFAULT);
        as_operations_exp_write(&ops, CLOCK_TTL_BIN, x[X_TTL], AS_EXP_WRITE_DEFAULT);
        as_operations_exp_write(&ops, CLOCK_HOLD_BIN, x[X_HOLD], AS_EXP_WRITE_DEFAULT);
        as_operations_exp_write(&ops, CLOCK_NEXT_BIN, x[X_NEXT], AS_EXP_WRITE_DEFAULT);
        as_operations_exp_write(&ops, CLOCK_STORE_BIN, x[X_STORE], AS_EXP_WRITE_DEFAULT);
        /* After the clocks: they saw the credit as it was. */
        as_operations_exp_write(&ops, CLOCK_CREDIT_BIN, x[X_CREDIT], AS_EXP_WRITE_DEFAULT);
        as_operations_exp_write(&ops, CLOCK_EARNED_BIN, x[X_EARNED], AS_EXP_WRITE_DEFAULT);
        as_operations_exp_read(&ops, CLOCK_NEXT_READ, x[X_READ_NEXT], AS_EXP_READ_DEFAULT);
        as_operations_exp_read(&ops, CLOCK_STORE_READ, x[X_READ_STORE], AS_EXP_READ_DEFAULT);
        as_operations_exp_read(&ops, CLOCK_TTL_READ, x[X_READ_TTL], AS_EXP_READ_DEFAULT);
        as_operations_exp_read(&ops, CLOCK_CREDIT_READ, x[X_READ_CREDIT], AS_EXP_READ_DEFAULT);
        as_operations_exp_read(&ops, CLOCK_EARNED_READ, x[X_READ_EARNED], AS_EXP_READ_DEFAULT);
        as_operations_exp_read(&ops, CLOCK_NOW, x[X_NOW], AS_EXP_READ_DEFAULT);
        ops.ttl = AS_RECORD_NO_EXPIRE_TTL;
        if (aerospike_key_operate(&w->as, &e, &policy, &k, &ops, &rec) != AEROSPIKE_OK)
            status = fail(err, &e, "clock", key);
        else if (!int_bin(rec, CLOCK_OLD, &out->old_us) ||
                 !int_bin(rec, CLOCK_NEXT_READ, &out->next_us) ||
                 !int_bin(rec, CLOCK_STORE_READ, &out->store_us) ||
                 !int_bin(rec, CLOCK_TTL_READ, &out->ttl_s) || !int_bin(rec, CLOCK_NOW, &out->now_ms) ||
                 !int_bin(rec, CLOCK_REFUSED, &out->refused) ||
                 !int_bin(rec, CLOCK_UNBUDGETED, &out->unbudgeted) ||
                 !int_bin(rec, CLOCK_CREDIT_READ, &out->credit) ||
                 !int_bin(rec, CLOCK_EARNED_READ, &out->earned))
            status = lmca__fail(err, LMCA_EUNKNOWN, 0, "clock %s: the answer lacks a bin", key);
    }
    as_operations_destroy(&ops);
    for (int i = 0; i < X_N; i++) /* the operations copied them */
        as_exp_destroy(x[i]);
    if (rec != NULL)
        as_record_destroy(rec);
    return status;
}

unsigned
lmca__wire_nodes_of(lmca__wire *w, const char *set, const char *key,
                    char names[][LMCA__NODE_NAME], unsigned max)
{
    as_key k;
    as_error e;
    as_partition_info pi;
    unsigned n = 0;

    as_key_init_str(&k, w->ns, set, key);
    /* The partition's nodes as the map has them, inactive ones too: a node just
       lost is the one to blame (the client's own lookups skip it). The map is
       in this process (the client's shared-memory mode is not used here). */
    if (w->as.cluster->shm_info == NULL && as_key_set_digest(&e, &k) == AEROSPIKE_OK &&
        as_partition_info_init(&pi, w->as.cluster, &e, &k) == AEROSPIKE_OK) {
        as_partition *p = pi.partition;
        for (uint8_t i = 0; i < pi.replica_size && i < AS_MAX_REPLICATION_FACTOR && n < max; i++) {
            as_node *node = as_node_load(&p->nodes[i]);
            if (node == NULL)
                continue;
            as_node_reserve(node);
            snprintf(names[n++], LMCA__NODE_NAME, "%s", node->name);
            as_node_release(node);
        }
    }
    as_key_destroy(&k);
    return n;
}

/* Small records of one integer bin in a set of their own (mend.c's lease). */

int
lmca__wire_int_get(lmca__wire *w, const char *set, const char *key, const char *bin,
                   int64_t *value, uint16_t *gen, lmca_err_t *err)
{
    as_key k;
    as_error e;
    as_record *rec = NULL;
    const char *names[] = {bin, NULL};
    as_status rc;
    int status;

    as_key_init_str(&k, w->ns, set, key);
    rc = aerospike_key_select(&w->as, &e, &w->peek, &k, names, &rec);
    if (rc != AEROSPIKE_OK) {
        status = fail(err, &e, "read", key);
    } else {
        *gen = rec->gen;
        *value = 0;
        status = int_bin(rec, bin, value) ? LMCA_OK : LMCA_MISS;
    }
    if (rec != NULL)
        as_record_destroy(rec);
    return status;
}

int
lmca__wire_int_put(lmca__wire *w, const char *set, const char *key, const char *bin,
                   int64_t value, uint16_t gen, lmca_err_t *err)
{
    as_key k;
    as_error e;
    as_record rec;
    as_policy_write policy = w->write;
    as_status rc;

    as_key_init_str(&k, w->ns, set, key);
    if (gen == 0) {
        policy.exists = AS_POLICY_EXISTS_CREATE;
    } else {
        policy.exists = AS_POLICY_EXISTS_UPDATE;
        policy.gen = AS_POLICY_GEN_EQ;
    }
    as_record_inita(&rec, 1);
    as_record_set_int64(&rec, bin, value);
    rec.gen = gen;
    rec.ttl = AS_RECORD_NO_EXPIRE_TTL;
    rc = aerospike_key_put(&w->as, &e, &policy, &k, &rec);
    as_record_destroy(&rec);
    return rc == AEROSPIKE_OK ? LMCA_OK : fail(err, &e, "write", key);
}

int
lmca__wire_int_remove(lmca__wire *w, const char *set, const char *key, uint16_t gen,
                      lmca_err_t *err)
{
    as_key k;
    as_error e;
    as_policy_remove policy = w->remove;

    as_key_init_str(&k, w->ns, set, key);
    policy.gen = AS_POLICY_GEN_EQ;
    policy.generation = gen;
    if (aerospike_key_remove(&w->as, &e, &policy, &k) != AEROSPIKE_OK)
        return fail(err, &e, "remove", key);
    return LMCA_OK;
}

/* ---------------------------------------------------------------------------
 * Scans.
 */

typedef struct {
    lmca__scan_cb cb;
    void *udata;
} scan_ctx;

/* Collects a scanned record's small bins into an array for one callback. */
typedef struct {
    lmca__bin bins[16];
    unsigned n;
} bin_list;

static void
collect_bin(void *udata, const lmca__bin *bin)
{
    bin_list *l = udata;
    if (l->n < sizeof l->bins / sizeof l->bins[0])
        l->bins[l->n++] = *bin;
}

static bool
scan_each(const as_val *v, void *udata)
{
    scan_ctx *ctx = udata;
    const as_record *rec = as_record_fromval(v);
    bin_list l = {.n = 0};
    lmca__read r = {.cb = collect_bin, .udata = &l};
    lmca__scanned s = {0};

    if (rec == NULL)
        return true; /* end of scan */
    take_record(rec, NULL, &r);
    s.digest = rec->key.digest.value;
    s.key = rec->key.valuep && as_val_type((as_val *)rec->key.valuep) == AS_STRING
                ? rec->key.valuep->string.value
                : NULL;
    s.set = rec->key.set;
    s.ttl = rec->ttl;
    s.gen = rec->gen;
    s.bins = l.bins;
    s.nbins = l.n;
    return ctx->cb(ctx->udata, &s);
}

int
lmca__wire_scan(lmca__wire *w, const char *const *names, bool all_sets, lmca__scan_cb cb,
                void *udata, lmca_err_t *err)
{
    as_scan scan;
    as_error e;
    scan_ctx ctx = {cb, udata};
    uint16_t n = 0;
    as_status rc;

    while (names && names[n] != NULL)
        n++;
    as_scan_init(&scan, w->ns, all_sets ? NULL : w->set);
    scan.no_bins = names == NULL;
    as_scan_select_inita(&scan, n);
    for (uint16_t i = 0; i < n; i++) {
        if (!as_scan_select(&scan, names[i])) {
            as_scan_destroy(&scan);
            return refused(err, "scan", w->set);
        }
    }
    rc = aerospike_scan_foreach(&w->as, &e, &w->scan, &scan, scan_each, &ctx);
    as_scan_destroy(&scan);
    return rc == AEROSPIKE_OK ? LMCA_OK : fail(err, &e, "scan", w->set);
}
