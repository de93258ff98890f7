"""AS_MSG commands: single-record commands and the batch protocol, plus the
response and fault helpers the scan handler shares.

Each handler returns an Outcome telling the connection loop what to send.
Fault rules (faults.py) are applied here, in this order:
  1. a tripped stop-writes rule closes the connection without a response;
     then a write takes its place among its record's writes in flight, or is
     answered KEY_BUSY (pending.py: transaction-pending-limit);
  2. a delay rule sleeps before the command runs;
  3. a result rule answers its code instead of running the command (single
     commands) or instead of running the matching batch row;
  4. the command runs under the store lock;
  5. a drop rule sends a truncated response and closes the connection.
"""

import struct
import time
from dataclasses import dataclass, field

from . import proto
from .engine import Reply, Request, count_result

# Batch row flags (server batch.c).
BATCH_REPEAT = 0x01
BATCH_HAS_EXTRA_INFO = 0x02
BATCH_HAS_GENERATION = 0x04
BATCH_HAS_RECORD_TTL = 0x08
BATCH_HAS_INFO4 = 0x10
# Batch header flags.
BATCH_REPORT_ALL_ERRORS = 0x04

BATCH_BLOCK_SIZE = 128 * 1024  # rows are packed into protos of this size
_BENIGN_ROW_RESULTS = (proto.OK, proto.ERR_NOT_FOUND, 27)  # 27 = FILTERED_OUT


@dataclass
class Outcome:
    protos: list = field(default_factory=list)  # framed protos to send, in order
    drop: bool = False  # send a truncated first proto, then close
    close: bool = False  # close without sending anything


def request_from_fields(fields_msg, digest, info1, info2, info3, generation, ttl, ops):
    ns = fields_msg.field(proto.FIELD_NAMESPACE)
    set_name = fields_msg.field(proto.FIELD_SET)
    return Request(
        ns=ns.decode("utf-8", "replace") if ns is not None else "",
        set_name=set_name.decode("utf-8", "replace") if set_name else "",
        digest=bytes(digest),
        key=fields_msg.field(proto.FIELD_KEY),
        info1=info1,
        info2=info2,
        info3=info3,
        generation=generation,
        ttl=ttl,
        ops=ops,
        filter=fields_msg.field(proto.FIELD_FILTER),
    )


def pack_msgs(msgs):
    """Frame one or more as_msgs into a single type-3 proto."""
    chunks = []
    for msg in msgs:
        chunks.extend(proto.encode_msg(msg))
    size = sum(len(c) for c in chunks)
    return b"".join([proto.proto_header(proto.TYPE_MSG, size)] + chunks)


def last_msg_proto(result):
    return pack_msgs([proto.Msg(info3=proto.INFO3_LAST, result=result)])


def error_proto(result):
    return pack_msgs([proto.Msg(result=result)])


def compress_if_asked(msg, outcome):
    if msg.info1 & proto.INFO1_COMPRESS_RESPONSE:
        outcome.protos = [proto.compress_proto(p) for p in outcome.protos]
    return outcome


def pre_faults(fx, ops, digests, hold=None):
    """Apply stop-writes and delay rules; return True to close the connection.
    `hold` is called between the two: a write takes its place in flight
    before a delay, as a slow write would hold its record."""
    if fx.faults.writes_stopped():
        return True
    if hold is not None:
        hold()
    rule = fx.faults.take("delay", ops, digests)
    if rule is not None:
        time.sleep(rule.ms / 1000.0)
    return False


def _pending_limit(fx, req):
    """The namespace's transaction-pending-limit, or None when `req` takes no
    part (a read, or an unknown namespace)."""
    if req.kind == "read":
        return None
    ns = fx.store.get(req.ns)
    return None if ns is None else ns.config.transaction_pending_limit


def take_in_flight(fx, req):
    """pending.py: False when the write must answer KEY_BUSY."""
    limit = _pending_limit(fx, req)
    return limit is None or fx.pending.enter(req.ns, req.digest, limit)


def leave_in_flight(fx, req):
    if _pending_limit(fx, req) is not None:
        fx.pending.leave(req.ns, req.digest)


def key_busy(fx, req):
    """The reply of a write refused by the pending limit (rw_request_hash.c:
    n_fail_key_busy counted, the client's write counted as an error)."""
    with fx.store.lock:
        ns = fx.store.get(req.ns)
        if ns is not None:
            ns.counts["fail_key_busy"] += 1
    return Reply(proto.ERR_KEY_BUSY)


def post_faults(fx, ops, digests, outcome):
    if fx.faults.take("drop", ops, digests) is not None:
        outcome.drop = True
    return outcome


# ---------------------------------------------------------------------------
# Single-record commands.


def handle_single(fx, msg):
    digest = msg.field(proto.FIELD_DIGEST)
    if len(digest) != 20:
        return Outcome([error_proto(proto.ERR_PARAMETER)])
    req = request_from_fields(
        msg, digest, msg.info1, msg.info2, msg.info3, msg.generation, msg.record_ttl, msg.ops
    )
    ops, digests = {req.kind}, {req.digest}
    held = []

    def hold():
        held.append(take_in_flight(fx, req))

    try:
        if pre_faults(fx, ops, digests, hold if req.kind != "read" else None):
            return Outcome(close=True)
        if held and not held[0]:
            reply = key_busy(fx, req)
        else:
            rule = fx.faults.take("result", ops, digests)
            reply = Reply(rule.code) if rule is not None else None
        with fx.store.lock:
            if reply is None:
                reply = fx.execute(req)
            count_result(fx.store, req, reply.result)
    finally:
        if held and held[0]:
            leave_in_flight(fx, req)
    fx.stats.add(req.kind)
    if reply.result == proto.OK and req.kind != "read":
        fx.faults.note_writes(1)
    outcome = Outcome([pack_msgs([reply.to_msg()])])
    return compress_if_asked(msg, post_faults(fx, ops, digests, outcome))


# ---------------------------------------------------------------------------
# Batch ("batch any", server >= 6.0): field 41 holds the rows.


@dataclass
class BatchRow:
    index: int
    req: Request


def _parse_row_template(data, pos, end, row_flags):
    """Parse a full (non-repeat) row after its flags byte; return (template, pos)."""
    info1 = data[pos]
    pos += 1
    info2 = info3 = 0
    if row_flags & BATCH_HAS_EXTRA_INFO:
        info2, info3 = data[pos], data[pos + 1]
        pos += 2
    if row_flags & BATCH_HAS_INFO4:
        pos += 1
    generation = ttl = 0
    if row_flags & BATCH_HAS_GENERATION:
        (generation,) = struct.unpack_from(">H", data, pos)
        pos += 2
    if row_flags & BATCH_HAS_RECORD_TTL:
        (ttl,) = struct.unpack_from(">I", data, pos)
        pos += 4
    n_fields, n_ops = struct.unpack_from(">HH", data, pos)
    pos += 4
    fields, pos = proto.parse_fields(data, pos, max(n_fields, 1), end)
    ops, pos = proto.parse_ops(data, pos, n_ops, end)
    holder = proto.Msg(fields=fields)
    template = request_from_fields(holder, b"", info1, info2, info3, generation, ttl, ops)
    return template, pos


def parse_batch(msg):
    """Return (header flags, [BatchRow]); raise ProtocolError if malformed."""
    data = msg.field(proto.FIELD_BATCH_INDEX)
    if data is None:
        raise proto.ProtocolError("batch without field 41")
    end = len(data)
    if end < 5:
        raise proto.ProtocolError("batch field too short")
    n_rows, flags = struct.unpack_from(">IB", data, 0)
    pos = 5
    rows = []
    template = None
    header_filter = msg.field(proto.FIELD_FILTER)
    try:
        for _ in range(n_rows):
            if pos + 25 > end:
                raise proto.ProtocolError("truncated batch row")
            (index,) = struct.unpack_from(">I", data, pos)
            digest = data[pos + 4 : pos + 24]
            row_flags = data[pos + 24]
            pos += 25
            if row_flags & BATCH_REPEAT:
                if template is None:
                    raise proto.ProtocolError("repeat flag on first batch row")
                if template.key is not None:
                    raise proto.ProtocolError("batch must not repeat key")
            else:
                template, pos = _parse_row_template(data, pos, end, row_flags)
                # batch.c: a row's own filter, else the batch's.
                if template.filter is None:
                    template.filter = header_filter
            req = Request(**{**template.__dict__, "digest": bytes(digest)})
            rows.append(BatchRow(index, req))
    except (IndexError, struct.error):
        raise proto.ProtocolError("truncated batch row") from None
    return flags, rows


def batch_protos(replies, flags):
    """Pack row replies into protos of <= BATCH_BLOCK_SIZE, then the LAST msg.

    With respond_all_keys (REPORT_ALL_ERRORS) every row is sent and LAST
    carries 0; without it the first failed row ends the stream and LAST
    carries its code, as in the server's batch.c.
    """
    report_all = flags & BATCH_REPORT_ALL_ERRORS
    protos, cur, cur_size = [], [], 0
    last_result = proto.OK

    def flush():
        nonlocal cur, cur_size
        if cur:
            protos.append(b"".join([proto.proto_header(proto.TYPE_MSG, cur_size)] + cur))
        cur, cur_size = [], 0

    for index, reply in replies:
        if reply.result == proto.OK:
            msg = reply.to_msg(txn_ttl=index)
        else:
            msg = proto.Msg(result=reply.result, txn_ttl=index)
        chunks = proto.encode_msg(msg)
        size = sum(len(c) for c in chunks)
        if cur and cur_size + size > BATCH_BLOCK_SIZE:
            flush()
        cur.extend(chunks)
        cur_size += size
        if not report_all and reply.result not in _BENIGN_ROW_RESULTS:
            last_result = reply.result
            break
    flush()
    protos.append(last_msg_proto(last_result))
    return protos


def handle_batch(fx, msg):
    if msg.field(proto.FIELD_BATCH_INDEX_WITH_SET) is not None:
        return Outcome([last_msg_proto(proto.ERR_UNSUPPORTED_FEATURE)])
    try:
        flags, rows = parse_batch(msg)
    except proto.ProtocolError:
        return Outcome([last_msg_proto(proto.ERR_PARAMETER)])

    ops = {"batch"} | {row.req.kind for row in rows}
    digests = {row.req.digest for row in rows}
    if pre_faults(fx, ops, digests):
        return Outcome(close=True)
    fx.stats.add("batches")
    fx.stats.add("batch_rows", len(rows))

    replies, writes = [], 0
    with fx.store.lock:
        for row in rows:
            kind = row.req.kind
            rule = fx.faults.take("result", {"batch", kind}, {row.req.digest})
            if rule is not None:
                reply = Reply(rule.code)
            elif not take_in_flight(fx, row.req):
                reply = key_busy(fx, row.req)
            else:
                try:
                    reply = fx.execute(row.req)
                finally:
                    leave_in_flight(fx, row.req)
            count_result(fx.store, row.req, reply.result, batch=True)
            fx.stats.add(kind)
            if reply.result == proto.OK and kind != "read":
                writes += 1
            replies.append((row.index, reply))
    fx.faults.note_writes(writes)
    outcome = Outcome(batch_protos(replies, flags))
    return compress_if_asked(msg, post_faults(fx, ops, digests, outcome))
