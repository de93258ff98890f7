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
 * client's own header and key writers, so they carry what aerospike_key_put /
 * aerospike_key_select send; a put only moves its largest blob to the end.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The client's inline node reference counting (as_node_release) uses a fence
   that GCC cannot instrument under -fsanitize=thread and warns about. The
   client is not built with TSan, so its own synchronization is outside what
   TSan sees either way. */
#if defined(__SANITIZE_THREAD__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wtsan"
#endif
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
#include "message.h"

/* Big enough for a header, the key fields and the small bins of any record the
   engine writes with its key digest only; larger requests (send_key with a long
   key, a large md bin) are built on the heap. */
#define HEAD_STACK 2048

/* The write operation's code on the wire (the client's
   as_protocol_types[AS_OPERATOR_WRITE], a private table). */
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
    bool answered;          /* the whole response was read: the socket is clean */
    as_status status;       /* of the last socket read */
    const char *payload;    /* gets: the payload bin and where it goes; */
    lmca__read *r;          /* NULL for puts */
    lmca__msg msg;          /* the response's reader (its stage is 8 KiB) */
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
 * Receiving: message.c reads the bytes, from this socket.
 */

typedef struct socket_src {
    fast_cmd *f;
    as_socket *sock;
    as_node *node;
    as_error *err;
} socket_src;

/* The command's socket context has timeout_delay 0 (prepare), so a timed-out
   read never hands the socket to the client's recovery: the read state that
   recovery would need stays DETAIL, and attempt() closes the socket itself. */
static bool
pull_socket(void *src, uint8_t *into, size_t n)
{
    socket_src *s = src;
    s->f->ctx.state = AS_READ_STATE_DETAIL;
    s->f->status = as_socket_read_deadline(s->err, s->sock, s->node, into, n,
                                           s->f->cmd.socket_timeout, s->f->cmd.deadline_ms,
                                           &s->f->ctx);
    return s->f->status == AEROSPIKE_OK;
}

/* The status of one exchange: the source's error, a malformed message, or the
   server's answer once the message is read to its end. */
static as_status
outcome(fast_cmd *f, lmca__msg_rc rc, const lmca__msg *m, as_error *err)
{
    if (rc == LMCA__MSG_PULL_FAILED)
        return f->status;
    if (rc == LMCA__MSG_MALFORMED)
        return as_error_update(err, AEROSPIKE_ERR_CLIENT, "malformed response: %s", m->why);
    f->answered = true;
    if (m->result_code != AEROSPIKE_OK)
        return as_error_set_message(err, (as_status)m->result_code,
                                    as_error_string((as_status)m->result_code));
    return AEROSPIKE_OK;
}

static as_status
receive(fast_cmd *f, as_socket *sock, as_node *node, as_error *err)
{
    socket_src src = {.f = f, .sock = sock, .node = node, .err = err};
    lmca__msg *m = &f->msg;
    lmca__msg_rc rc;

    m->pull = pull_socket;
    m->src = &src;
    if (f->r == NULL)
        return outcome(f, lmca__msg_status(m), m, err);
    rc = lmca__msg_record(m, f->payload, f->r);
    if (rc == LMCA__MSG_OK && m->result_code == AEROSPIKE_OK)
        f->r->ttl = cf_server_void_time_to_ttl(m->void_time);
    return outcome(f, rc, m, err);
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
    st = receive(f, &sock, node, err);
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
    /* No connection recovery. With the policies' timeout_delay (3000 ms by
       default) a timed-out read queues the socket for the tend thread to drain
       by its own reading state, which message.c does not keep, and the socket
       then belongs to it: closing it here as well (attempt) closed a socket the
       recovery still used, and after a frozen server the node's connection
       count stayed at max_conns_per_node. A timed-out socket is closed, as the
       client does with timeout_delay 0. */
    f->ctx = (as_socket_context){.cluster = as->cluster, .timeout_delay = 0};
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
        p = write_op(p, b->name, LMCA__P_INTEGER, 8);
        put_be64(p, (uint64_t)b->i);
        return p + 8;
    }
    p = write_op(p, b->name, b->type == LMCA__STR ? LMCA__P_STRING : LMCA__P_BLOB, b->len);
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
        p = write_op(p, bins[body].name, LMCA__P_BLOB, bins[body].len);
        f.body = bins[body].p;
        f.body_len = bins[body].len;
    }
    f.head = head;
    f.head_len = (size_t)(p - head);
    put_be64(head, (f.head_len + f.body_len - 8) | ((uint64_t)AS_PROTO_VERSION << 56) |
                       ((uint64_t)AS_MESSAGE_TYPE << 48));
    f.r = NULL;
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
    f.payload = payload;
    f.r = r;
    st = run(&f, err);
    if (head != stack)
        free(head);
    return st;
}
