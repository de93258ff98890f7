/*
 * fast.c - single-record puts and gets whose payload never takes a client-side
 * copy or allocation.
 *
 * libaerospike's own calls copy a value twice on a get (into a receive buffer
 * the size of the message, then into a new as_bytes) and once on a put (into a
 * send buffer the size of the message), allocating each of those buffers
 * (DESIGN.md, "The fast path"). Here a put sends the message header and the
 * caller's buffer together, and a get reads the header into a small stage on
 * the stack and the payload bin straight into its destination.
 *
 * Only the message bytes are ours. Routing (the client's partition map),
 * connections (the node's pools: TLS, authentication, idle checks), socket
 * deadlines and the retry rules are the client's own, called the way its
 * single-record commands call them: run() below follows as_command_execute
 * (as_command.c in the C client) case by case. Requests are built with the
 * client's own header and key writers, so they are byte for byte what
 * aerospike_key_put / aerospike_key_select send.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <aerospike/as_cluster.h>
#include <aerospike/as_command.h>
#include <aerospike/as_node.h>
#include <aerospike/as_partition.h>
#include <aerospike/as_proto.h>
#include <aerospike/as_sleep.h>
#include <aerospike/as_socket.h>
#include <citrusleaf/cf_byte_order.h>
#include <citrusleaf/cf_clock.h>

#include "fast.h"

/* Big enough for a header, the key fields and the small bins of any record the
   engine writes with its key digest only; larger requests (send_key with a long
   key, a large md bin) are built on the heap. */
#define HEAD_STACK 2048
/* Receive stage: a meta record's bins arrive here in one read; a payload's
   first bytes too, the rest goes straight to the destination. */
#define STAGE 8192

/* Particle types on the wire (as_bytes_type), and the write operation's code
   (the client's as_protocol_types[AS_OPERATOR_WRITE], a private table). */
enum { P_INTEGER = 1, P_STRING = 3, P_BLOB = 4, P_BOOL = 17 };
enum { OP_WRITE = 2 };

/* One command in flight: the client's command state plus our request bytes and
   the response handler. */
typedef struct fast_cmd fast_cmd;
struct fast_cmd {
    as_command cmd;         /* policy, partition, replica, deadlines, iteration */
    as_socket_context ctx;
    uint8_t *head;          /* message header, fields, small bins */
    size_t head_len;
    const uint8_t *body;    /* the payload, sent after head from the caller's buffer */
    size_t body_len;
    as_status (*receive)(fast_cmd *f, as_socket *sock, as_node *node, as_error *err);
    bool answered;          /* the whole response was read: the socket is clean */
    /* for gets */
    const char *payload;
    lmca__read *r;
};

/* Message fields sit at any offset: copied, never dereferenced in place. */
static void
put_be32(uint8_t *p, uint32_t v)
{
    v = cf_swap_to_be32(v);
    memcpy(p, &v, 4);
}

static void
put_be64(uint8_t *p, uint64_t v)
{
    v = cf_swap_to_be64(v);
    memcpy(p, &v, 8);
}

static uint64_t
get_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return cf_swap_from_be64(v);
}

static as_status
malformed(as_error *err, const char *what)
{
    return as_error_update(err, AEROSPIKE_ERR_CLIENT, "malformed response: %s", what);
}

/* ---------------------------------------------------------------------------
 * Sending.
 */

/* Header then payload. On plain TCP both go in one sendmsg as far as the
   socket takes them; the client's deadline-aware writes finish the rest (and
   are the only path under TLS, where bytes must pass through the session). */
static as_status
send_request(fast_cmd *f, as_socket *sock, as_node *node, as_error *err)
{
    size_t done = 0, total = f->head_len + f->body_len;
    as_status st = AEROSPIKE_OK;

    if (sock->ssl == NULL) {
        struct iovec iov[2] = {{f->head, f->head_len}, {(void *)f->body, f->body_len}};
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = f->body_len ? 2 : 1};
        ssize_t n = sendmsg(sock->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) /* on EAGAIN or an error the client's write below waits or reports */
            done = (size_t)n;
    }
    if (done < f->head_len) {
        st = as_socket_write_deadline(err, sock, node, f->head + done, f->head_len - done,
                                      f->cmd.socket_timeout, f->cmd.deadline_ms);
        done = f->head_len;
    }
    if (st == AEROSPIKE_OK && done < total)
        st = as_socket_write_deadline(err, sock, node, (uint8_t *)f->body + (done - f->head_len),
                                      total - done, f->cmd.socket_timeout, f->cmd.deadline_ms);
    return st;
}

/* ---------------------------------------------------------------------------
 * Receiving: a reader over one response message.
 */

typedef struct reader {
    fast_cmd *f;
    as_socket *sock;
    as_node *node;
    as_error *err;
    uint64_t left;          /* bytes of the message still on the socket */
    size_t pos, end;        /* stage[pos, end) is read but not taken */
    uint8_t stage[STAGE];
} reader;

static as_status
pull(reader *rd, uint8_t *into, size_t n)
{
    as_status st = as_socket_read_deadline(rd->err, rd->sock, rd->node, into, n,
                                           rd->f->cmd.socket_timeout, rd->f->cmd.deadline_ms,
                                           &rd->f->ctx);
    if (st == AEROSPIKE_OK)
        rd->left -= n;
    return st;
}

static uint64_t
unread(const reader *rd)
{
    return rd->left + (rd->end - rd->pos);
}

/* The next n bytes of the message into `out`, or dropped when out is NULL.
   Large values bypass the stage and land in `out` directly. */
static as_status
take(reader *rd, void *out, uint64_t n)
{
    uint8_t *o = out;

    if (n > unread(rd))
        return malformed(rd->err, "a length runs past the end of the message");
    for (;;) {
        size_t c = (size_t)(n < rd->end - rd->pos ? n : rd->end - rd->pos);
        if (o != NULL && c > 0) {
            memcpy(o, rd->stage + rd->pos, c);
            o += c;
        }
        rd->pos += c;
        n -= c;
        if (n == 0)
            return AEROSPIKE_OK;
        if (o != NULL && n >= STAGE)
            return pull(rd, o, (size_t)n); /* the zero-copy read */
        size_t want = (size_t)(rd->left < STAGE ? rd->left : STAGE);
        as_status st = pull(rd, rd->stage, want);
        if (st != AEROSPIKE_OK)
            return st;
        rd->pos = 0;
        rd->end = want;
    }
}

static as_status
take_be32(reader *rd, uint32_t *v)
{
    as_status st = take(rd, v, 4);
    *v = cf_swap_from_be32(*v);
    return st;
}

/* Reads the proto header and the message header, skips the fields. */
static as_status
open_message(reader *rd, as_msg *msg)
{
    as_proto proto;
    as_status st;

    rd->f->ctx.state = AS_READ_STATE_PROTO;
    st = as_socket_read_deadline(rd->err, rd->sock, rd->node, (uint8_t *)&proto, sizeof proto,
                                 rd->f->cmd.socket_timeout, rd->f->cmd.deadline_ms,
                                 &rd->f->ctx);
    if (st != AEROSPIKE_OK || (st = as_proto_parse(rd->err, &proto)) != AEROSPIKE_OK)
        return st;
    /* We never ask for compression, so a compressed answer is not ours to read. */
    if (proto.type != AS_MESSAGE_TYPE)
        return as_proto_type_error(rd->err, &proto, AS_MESSAGE_TYPE);
    rd->left = proto.sz;
    rd->f->ctx.state = AS_READ_STATE_DETAIL;
    if ((st = take(rd, msg, sizeof *msg)) != AEROSPIKE_OK)
        return st;
    as_msg_swap_header_from_be(msg);
    for (uint16_t i = 0; i < msg->n_fields; i++) {
        uint32_t size;
        if ((st = take_be32(rd, &size)) != AEROSPIKE_OK || (st = take(rd, NULL, size)) != AEROSPIKE_OK)
            return st;
    }
    return AEROSPIKE_OK;
}

/* The server's answer code, once the message is read to its end. */
static as_status
close_message(reader *rd, const as_msg *msg)
{
    as_status st = take(rd, NULL, unread(rd));
    if (st != AEROSPIKE_OK)
        return st;
    rd->f->answered = true;
    if (msg->result_code != AEROSPIKE_OK)
        return as_error_set_message(rd->err, (as_status)msg->result_code,
                                    as_error_string((as_status)msg->result_code));
    return AEROSPIKE_OK;
}

static as_status
receive_status(fast_cmd *f, as_socket *sock, as_node *node, as_error *err)
{
    reader rd = {.f = f, .sock = sock, .node = node, .err = err};
    as_msg msg;
    as_status st = open_message(&rd, &msg);
    return st != AEROSPIKE_OK ? st : close_message(&rd, &msg);
}

/* The payload bin: into r->dst when it is a blob that fits, else dropped. */
static as_status
take_payload(reader *rd, lmca__read *r, uint8_t type, uint32_t size)
{
    r->found = true;
    r->blob = type == P_BLOB;
    r->len = size;
    if (r->blob && r->dst == NULL && r->alloc && size > 0) {
        r->nomem = (r->dst = lmca__malloc(size)) == NULL;
        r->cap = r->nomem ? 0 : size;
    }
    return take(rd, r->blob && size <= r->cap && size > 0 ? r->dst : NULL, size);
}

/* Any other bin, typed as wire.c's bin_of types the client's values. */
static as_status
take_bin(reader *rd, lmca__read *r, const char *name, uint8_t type, uint32_t size)
{
    uint8_t small[256], *v = size < sizeof small ? small : malloc((size_t)size + 1);
    lmca__bin b = {.name = name, .type = LMCA__OTHER, .len = size};
    as_status st;

    if (v == NULL) /* the bin is not delivered; the schema then calls the record bad */
        return take(rd, NULL, size);
    if ((st = take(rd, v, size)) == AEROSPIKE_OK && r->cb != NULL) {
        v[size] = '\0';
        b.p = v;
        if ((type == P_INTEGER && size == 8) || (type == P_BOOL && size == 1)) {
            b.type = LMCA__INT;
            b.i = size == 8 ? (int64_t)get_be64(v) : v[0];
        } else if (type == P_STRING) {
            b.type = LMCA__STR;
        } else if (type == P_BLOB) {
            b.type = LMCA__BLOB;
        }
        r->cb(r->udata, &b);
    }
    if (v != small)
        free(v);
    return st;
}

static as_status
receive_record(fast_cmd *f, as_socket *sock, as_node *node, as_error *err)
{
    reader rd = {.f = f, .sock = sock, .node = node, .err = err};
    lmca__read *r = f->r;
    as_msg msg;
    as_status st = open_message(&rd, &msg);

    if (st != AEROSPIKE_OK)
        return st;
    if (msg.result_code != AEROSPIKE_OK)
        return close_message(&rd, &msg);
    for (uint16_t i = 0; i < msg.n_ops && st == AEROSPIKE_OK; i++) {
        uint8_t op[4];   /* op, particle type, version, name length */
        uint32_t size;
        char name[256];
        if ((st = take_be32(&rd, &size)) != AEROSPIKE_OK || (st = take(&rd, op, 4)) != AEROSPIKE_OK ||
            (st = take(&rd, name, op[3])) != AEROSPIKE_OK)
            break;
        name[op[3]] = '\0';
        if (size < 4u + op[3])
            return malformed(err, "a bin shorter than its name");
        size -= 4u + op[3];
        if (f->payload != NULL && strcmp(name, f->payload) == 0)
            st = take_payload(&rd, r, op[1], size);
        else
            st = take_bin(&rd, r, name, op[1], size);
    }
    if (st != AEROSPIKE_OK)
        return st;
    if (unread(&rd) != 0)
        return malformed(err, "bytes after the last bin");
    r->ttl = cf_server_void_time_to_ttl(msg.record_ttl);
    return close_message(&rd, &msg);
}

/* ---------------------------------------------------------------------------
 * The command loop, after as_command_execute.
 */

/* One try on one node. Sets *retry when the client would try again. */
static as_status
attempt(fast_cmd *f, as_node *node, as_error *err, bool *retry)
{
    as_socket sock;
    as_status st;

    f->answered = false;
    f->ctx.state = AS_READ_STATE_AUTH_HEADER;
    st = as_node_get_connection(err, node, &f->cmd, f->cmd.deadline_ms, &sock, &f->ctx);
    if (st != AEROSPIKE_OK) {
        *retry = st == AEROSPIKE_ERR_TIMEOUT || st < 0; /* not a server's refusal (auth) */
        return st;
    }
    if ((st = send_request(f, &sock, node, err)) != AEROSPIKE_OK) {
        as_node_close_conn_error(node, &sock, sock.pool); /* may hold half a request */
        *retry = true;
        return st;
    }
    f->cmd.sent++;
    st = f->receive(f, &sock, node, err);
    if (!f->answered) {
        /* Unread bytes may follow: the socket is never reused. Only a lost or slow
           connection is worth another try; a malformed answer is not. */
        as_node_close_conn_error(node, &sock, sock.pool);
        *retry = st == AEROSPIKE_ERR_CONNECTION || st == AEROSPIKE_ERR_TIMEOUT;
        return st;
    }
    as_node_put_connection(node, &sock);
    *retry = st == AEROSPIKE_ERR_TIMEOUT || st == AEROSPIKE_ERR_CLUSTER ||
             st == AEROSPIKE_ERR_DEVICE_OVERLOAD;
    return st;
}

/* Prepares the next try; false when the retries or the deadline are spent. */
static bool
next_try(fast_cmd *f, as_status st)
{
    as_command *cmd = &f->cmd;
    uint32_t pause = cmd->policy->sleep_between_retries;

    if (++cmd->iteration > cmd->max_retries)
        return false;
    /* Reads and non-timeout failures move to the next replica (the node is
       likely to change, so the first retry does not sleep). */
    if (cmd->replica != AS_POLICY_REPLICA_MASTER &&
        (((cmd->flags & AS_COMMAND_FLAGS_READ) && !(cmd->flags & AS_COMMAND_FLAGS_LINEARIZE)) ||
         (st != AEROSPIKE_ERR_TIMEOUT && st != AEROSPIKE_ERR_NO_MORE_CONNECTIONS))) {
        cmd->replica_index++;
        if (cmd->iteration == 1)
            pause = 0;
    }
    if (cmd->deadline_ms > 0) {
        int64_t remaining = (int64_t)cmd->deadline_ms - (int64_t)cf_getms() - pause;
        if (remaining <= 0)
            return false;
        if (remaining < cmd->total_timeout) {
            cmd->total_timeout = (uint32_t)remaining;
            if (cmd->socket_timeout > cmd->total_timeout)
                cmd->socket_timeout = cmd->total_timeout;
        }
    }
    if (pause > 0)
        as_sleep(pause);
    as_cluster_add_retry(cmd->cluster);
    return true;
}

static as_status
run(fast_cmd *f, as_error *err)
{
    as_command *cmd = &f->cmd;
    as_node *node = NULL;
    as_status st;
    bool retry;

    as_command_start_timer(cmd);
    for (;;) {
        /* `node` may be released by now: the client compares it, never reads it */
        node = as_partition_get_node(cmd->cluster, cmd->ns, cmd->partition, node, cmd->replica,
                                     cmd->replica_size, &cmd->replica_index);
        if (node == NULL)
            return as_error_update(err, AEROSPIKE_ERR_INVALID_NODE,
                                   "Node not found for partition %s:%u", cmd->ns,
                                   cmd->partition_id);
        as_node_reserve(node);
        st = attempt(f, node, err, &retry);
        as_node_release(node);
        if (!retry || !next_try(f, st))
            break;
    }
    if (st == AEROSPIKE_ERR_TIMEOUT && !f->answered)
        as_error_update(err, AEROSPIKE_ERR_TIMEOUT,
                        "Client timeout: socket=%u total=%u iterations=%u",
                        cmd->policy->socket_timeout, cmd->policy->total_timeout, cmd->iteration);
    return st;
}

/* The client's command state for one key, as its own init_read/init_write set it. */
static as_status
prepare(fast_cmd *f, aerospike *as, as_error *err, const as_policy_base *policy, as_key *key,
        as_partition_info *pi)
{
    as_status st;

    as_error_reset(err);
    if ((st = as_key_set_digest(err, key)) != AEROSPIKE_OK ||
        (st = as_partition_info_init(pi, as->cluster, err, key)) != AEROSPIKE_OK)
        return st;
    f->cmd = (as_command){
        .cluster = as->cluster,
        .policy = policy,
        .key = key,
        .ns = pi->ns,
        .partition = pi->partition,
        .partition_id = pi->partition_id,
        .replica_size = pi->replica_size,
    };
    f->ctx = (as_socket_context){.cluster = as->cluster, .timeout_delay = policy->timeout_delay};
    as_cluster_add_command_count(as->cluster);
    return AEROSPIKE_OK;
}

/* ---------------------------------------------------------------------------
 * Put.
 */

/* The bin sent from the caller's buffer: the largest blob. */
static int
body_bin(const lmca__bin *bins, unsigned n)
{
    int at = -1;
    for (unsigned i = 0; i < n; i++)
        if (bins[i].type == LMCA__BLOB && (at < 0 || bins[i].len > bins[at].len))
            at = (int)i;
    return at;
}

static size_t
bin_size(const lmca__bin *b, bool body)
{
    size_t value = body ? 0 : b->type == LMCA__INT ? 8 : b->len;
    return AS_OPERATION_HEADER_SIZE + strlen(b->name) + value;
}

/* An op header; the value (of `len` bytes) follows it. */
static uint8_t *
write_op(uint8_t *p, const char *name, uint8_t type, size_t len)
{
    size_t name_len = strlen(name);
    put_be32(p, (uint32_t)(name_len + 4 + len));
    p[4] = OP_WRITE;
    p[5] = type;
    p[6] = 0;
    p[7] = (uint8_t)name_len;
    memcpy(p + 8, name, name_len);
    return p + 8 + name_len;
}

static uint8_t *
write_bin(uint8_t *p, const lmca__bin *b)
{
    if (b->type == LMCA__INT) {
        p = write_op(p, b->name, P_INTEGER, 8);
        put_be64(p, (uint64_t)b->i);
        return p + 8;
    }
    p = write_op(p, b->name, b->type == LMCA__STR ? P_STRING : P_BLOB, b->len);
    if (b->len > 0)
        memcpy(p, b->p, b->len);
    return p + b->len;
}

as_status
lmca__fast_put(aerospike *as, as_error *err, const as_policy_write *policy, as_key *key,
               const lmca__bin *bins, unsigned n, uint32_t ttl)
{
    fast_cmd f;
    as_partition_info pi;
    as_command_txn_data tdata;
    _Alignas(8) uint8_t stack[HEAD_STACK];
    uint8_t *head = stack, *p;
    int body = body_bin(bins, n);
    size_t size;
    as_status st;

    if ((st = prepare(&f, as, err, &policy->base, key, &pi)) != AEROSPIKE_OK)
        return st;
    f.cmd.replica = as_command_write_replica(policy->replica);
    f.cmd.replica_index = as_replica_index_init_write(as->cluster, f.cmd.replica);
    f.cmd.latency_type = AS_LATENCY_TYPE_WRITE;
    size = as_command_key_size(&policy->base, policy->key, key, true, &tdata);
    for (unsigned i = 0; i < n; i++)
        size += bin_size(&bins[i], (int)i == body);
    if (size > sizeof stack && (head = malloc(size)) == NULL)
        return as_error_update(err, AEROSPIKE_ERR_CLIENT, "out of memory for a request");
    if (ttl == AS_RECORD_CLIENT_DEFAULT_TTL)
        ttl = policy->ttl;
    p = as_command_write_header_write(head, &policy->base, policy->commit_level, policy->exists,
                                      policy->gen, 0, ttl, tdata.n_fields, (uint16_t)n,
                                      policy->durable_delete, policy->on_locking_only, 0,
                                      AS_MSG_INFO2_WRITE, 0);
    p = as_command_write_key(p, &policy->base, policy->key, key, &tdata);
    for (unsigned i = 0; i < n; i++)
        if ((int)i != body)
            p = write_bin(p, &bins[i]);
    f.body = NULL;
    f.body_len = 0;
    if (body >= 0) { /* last, so its value ends the message */
        p = write_op(p, bins[body].name, P_BLOB, bins[body].len);
        f.body = bins[body].p;
        f.body_len = bins[body].len;
    }
    f.head = head;
    f.head_len = (size_t)(p - head);
    put_be64(head, (f.head_len + f.body_len - 8) | ((uint64_t)AS_PROTO_VERSION << 56) |
                       ((uint64_t)AS_MESSAGE_TYPE << 48));
    f.receive = receive_status;
    st = run(&f, err);
    if (head != stack)
        free(head);
    return st;
}

/* ---------------------------------------------------------------------------
 * Get.
 */

as_status
lmca__fast_select(aerospike *as, as_error *err, const as_policy_read *policy, as_key *key,
                  const char *const *names, const char *payload, lmca__read *r)
{
    fast_cmd f;
    as_partition_info pi;
    as_command_txn_data tdata;
    _Alignas(8) uint8_t stack[HEAD_STACK];
    uint8_t *head = stack, *p;
    uint16_t nnames = 0;
    size_t size;
    as_status st;

    if ((st = prepare(&f, as, err, &policy->base, key, &pi)) != AEROSPIKE_OK)
        return st;
    /* AP namespaces read as the policy says; strong-consistency ones as the
       client's as_command_init_read decides from read_mode_sc. */
    f.cmd.replica = policy->replica;
    f.cmd.flags = AS_COMMAND_FLAGS_READ;
    if (pi.sc_mode && policy->read_mode_sc == AS_POLICY_READ_MODE_SC_SESSION) {
        f.cmd.replica = AS_POLICY_REPLICA_MASTER;
    } else if (pi.sc_mode && policy->read_mode_sc == AS_POLICY_READ_MODE_SC_LINEARIZE) {
        f.cmd.flags |= AS_COMMAND_FLAGS_LINEARIZE;
        if (f.cmd.replica == AS_POLICY_REPLICA_PREFER_RACK)
            f.cmd.replica = AS_POLICY_REPLICA_SEQUENCE;
    }
    f.cmd.replica_index = as_replica_index_init_read(as->cluster, f.cmd.replica);
    f.cmd.latency_type = AS_LATENCY_TYPE_READ;
    size = as_command_key_size(&policy->base, policy->key, key, false, &tdata);
    for (; names != NULL && names[nnames] != NULL; nnames++)
        if ((st = as_command_bin_name_size(err, names[nnames], &size)) != AEROSPIKE_OK)
            return st;
    if (size > sizeof stack && (head = malloc(size)) == NULL)
        return as_error_update(err, AEROSPIKE_ERR_CLIENT, "out of memory for a request");
    p = as_command_write_header_read(
        head, &policy->base, policy->read_mode_ap, policy->read_mode_sc,
        policy->read_touch_ttl_percent, as_command_server_timeout(&policy->base), tdata.n_fields,
        nnames, AS_MSG_INFO1_READ | (names == NULL ? AS_MSG_INFO1_GET_ALL : 0), 0, 0);
    p = as_command_write_key(p, &policy->base, policy->key, key, &tdata);
    for (uint16_t i = 0; i < nnames; i++)
        p = as_command_write_bin_name(p, names[i]);
    f.head = head;
    f.head_len = as_command_write_end(head, p);
    f.body = NULL;
    f.body_len = 0;
    f.receive = receive_record;
    f.payload = payload;
    f.r = r;
    st = run(&f, err);
    if (head != stack)
        free(head);
    return st;
}
