"""Foreground scans: the partition query the C client's aerospike_scan_foreach
(and aerospike_query_foreach without a filter) sends.

Request (C client 7.6.1 aerospike_scan.c as_scan_command_init): info1 READ
(| GET_NOBINDATA for no-bins scans), info3 PARTITION_DONE, fields NAMESPACE,
SET (if any), SOCKET_TIMEOUT, TASK_ID, PID_ARRAY (u16 LE partition ids),
DIGEST_ARRAY (20-byte digests: resume each partition after that digest),
MAX_RECORDS (u64 BE), and the selected bins as READ ops with no value. Old
clients send the selection as QUERY_BINLIST (u8 count, then u8 len + name).

Response, as the 8.1 server's basic query job (as/src/query/query.c): one
msg per record with fields NAMESPACE, DIGEST, SET and KEY (if stored),
generation and void-time, and the selected bins; records are packed into
protos, then a msg with info3 LAST ends the stream. The server sends
PARTITION_DONE msgs only for unavailable partitions (result code
UNAVAILABLE, the partition id in the generation field, which the client's
partition tracker retries): a single node owns every partition, so there are
none; a cluster node (cluster.py) serves the partitions it is master of. A record holding none of the selected bins
is not returned (query.c apply_ops_make_response sends nothing when no op
produced a bin; proto.c "Don't return an empty record" for bin lists);
--scan-keep-binless makes the fixture return it with no bins instead.
"""

import struct

from . import exp, proto
from .engine import stored_context
from .handlers import Outcome, compress_if_asked, last_msg_proto, post_faults, pre_faults
from .store import now_void_time

SCAN_MARKER_FIELDS = (
    proto.FIELD_TASK_ID,
    proto.FIELD_PID_ARRAY,
    proto.FIELD_DIGEST_ARRAY,
    proto.FIELD_INDEX_RANGE,
)
_INDEX_FIELDS = (
    proto.FIELD_INDEX_NAME,
    proto.FIELD_INDEX_RANGE,
    proto.FIELD_INDEX_CONTEXT,
    proto.FIELD_INDEX_TYPE,
)
QUERY_CHUNK_SIZE = 1024 * 1024  # records are flushed in protos of about this size


class ScanError(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _selected_bins(msg):
    """Return (bin names or None for all bins, from_binlist)."""
    binlist = msg.field(proto.FIELD_QUERY_BINLIST)
    if binlist is not None and msg.ops:
        raise ScanError(proto.ERR_PARAMETER)  # both binlist and ops
    if binlist is not None:
        names, pos = [], 1
        for _ in range(binlist[0] if binlist else 0):
            n = binlist[pos]
            names.append(binlist[pos + 1 : pos + 1 + n].decode("utf-8", "replace"))
            pos += 1 + n
        return names, True
    if not msg.ops:
        return None, False
    for op in msg.ops:
        if op.op == proto.OP_READ:
            continue
        if op.op in (proto.OP_WRITE, proto.OP_INCR, proto.OP_APPEND, proto.OP_PREPEND,
                     proto.OP_TOUCH, proto.OP_DELETE_ALL):
            raise ScanError(proto.ERR_UNSUPPORTED_FEATURE)  # background scan
        raise ScanError(proto.ERR_PARAMETER)  # CDT/exp projections unsupported
    return [op.name for op in msg.ops], False


def _wanted_partitions(msg):
    """Return [(partition id, resume-after digest or None)] in request order."""
    pids = msg.field(proto.FIELD_PID_ARRAY)
    digests = msg.field(proto.FIELD_DIGEST_ARRAY)
    if pids is None and digests is None:
        return [(pid, None) for pid in range(4096)]
    wanted = []
    if pids:
        wanted += [(pid, None) for (pid,) in struct.iter_unpack("<H", pids)]
    if digests:
        for i in range(0, len(digests) - 19, 20):
            d = bytes(digests[i : i + 20])
            wanted.append((proto.partition_id(d), d))
    return wanted


def _record_msg(ns_name, digest, rec, no_bins, names, respond_all):
    """Build the response msg for one record, or None to skip it."""
    fields = [(proto.FIELD_NAMESPACE, ns_name.encode()), (proto.FIELD_DIGEST, digest)]
    if rec.set_name:
        fields.append((proto.FIELD_SET, rec.set_name.encode()))
    if rec.key is not None:
        fields.append((proto.FIELD_KEY, rec.key))
    msg = proto.Msg(
        info1=proto.INFO1_GET_NOBINDATA if no_bins else 0,
        generation=rec.generation,
        record_ttl=rec.void_time,
        fields=fields,
    )
    if no_bins:
        return msg
    if names is None:
        msg.ops = [proto.Op(proto.OP_READ, pt, n, v) for n, (pt, v) in rec.bins.items()]
        return msg
    for name in names:
        found = rec.bins.get(name)
        if found is not None:
            msg.ops.append(proto.Op(proto.OP_READ, found[0], name, found[1]))
        elif respond_all:
            msg.ops.append(proto.Op(proto.OP_READ, proto.PT_NULL, name))
    return msg


def _collect(fx, msg):
    """Run the scan under the store lock; return the record msgs."""
    if any(msg.field(f) is not None for f in _INDEX_FIELDS):
        raise ScanError(proto.ERR_INDEX_NOT_FOUND)  # no secondary indexes
    # query.c get_query_filter_exp: a filter that does not build fails the
    # scan (4); basic_query_filter_meta / read_and_filter_bins skip each
    # record it does not pass.
    filter_field = msg.field(proto.FIELD_FILTER)
    try:
        filter_exp = exp.build_filter(filter_field) if filter_field is not None else None
    except exp.BuildError:
        raise ScanError(proto.ERR_PARAMETER) from None
    if not msg.info3 & proto.INFO3_PARTITION_DONE:
        raise ScanError(proto.ERR_UNSUPPORTED_FEATURE)  # as 8.1 basic queries
    ns_field = msg.field(proto.FIELD_NAMESPACE)
    ns_name = ns_field.decode("utf-8", "replace") if ns_field else ""
    set_field = msg.field(proto.FIELD_SET)
    set_name = set_field.decode("utf-8", "replace") if set_field else ""
    names, from_binlist = _selected_bins(msg)
    no_bins = bool(msg.info1 & proto.INFO1_GET_NOBINDATA)
    respond_all = bool(msg.info2 & proto.INFO2_RESPOND_ALL_OPS)
    max_field = msg.field(proto.FIELD_MAX_RECORDS)
    max_records = struct.unpack(">Q", max_field)[0] if max_field else 0
    wanted = _wanted_partitions(msg)

    out = []
    unavailable = [pid for pid, _ in wanted if not fx.serves_partition(pid)]
    done = [proto.Msg(info3=proto.INFO3_PARTITION_DONE, result=proto.ERR_UNAVAILABLE,
                      generation=pid) for pid in unavailable]
    if unavailable:
        gone = set(unavailable)
        wanted = [(pid, resume) for pid, resume in wanted if pid not in gone]
    with fx.store.lock:
        ns = fx.store.get(ns_name)
        if ns is None:
            raise ScanError(proto.ERR_NAMESPACE)
        now = now_void_time()
        by_pid = {}
        for digest, rec in ns.records.items():
            if rec.expired(now) or (set_name and rec.set_name != set_name):
                continue
            by_pid.setdefault(proto.partition_id(digest), []).append((digest, rec))
        for pid, resume in wanted:
            for digest, rec in sorted(by_pid.get(pid, ())):
                if resume is not None and digest <= resume:
                    continue
                if filter_exp is not None and not _passes(filter_exp, ns, digest, rec):
                    continue
                m = _record_msg(ns_name, digest, rec, no_bins, names, respond_all)
                if names is not None and not no_bins and not m.ops:
                    keep = fx.options.scan_keep_binless and not from_binlist
                    if not keep:
                        continue
                out.append(m)
                if max_records and len(out) >= max_records:
                    return out + done
    return out + done


def _passes(filter_exp, ns, digest, rec):
    try:
        return exp.matches(filter_exp, stored_context(ns, digest, rec))
    except exp.BuildError:
        raise ScanError(proto.ERR_PARAMETER) from None  # a call the fixture lacks


def _pack(msgs):
    protos, cur, cur_size = [], [], 0
    for msg in msgs:
        chunks = proto.encode_msg(msg)
        cur.extend(chunks)
        cur_size += sum(len(c) for c in chunks)
        if cur_size >= QUERY_CHUNK_SIZE:
            protos.append(b"".join([proto.proto_header(proto.TYPE_MSG, cur_size)] + cur))
            cur, cur_size = [], 0
    if cur:
        protos.append(b"".join([proto.proto_header(proto.TYPE_MSG, cur_size)] + cur))
    return protos


def handle_scan(fx, msg):
    ops = {"scan"}
    if pre_faults(fx, ops, ()):
        return Outcome(close=True)
    fx.stats.add("scans")
    rule = fx.faults.take("result", ops, ())
    if rule is not None:
        return Outcome([last_msg_proto(rule.code)])
    try:
        msgs = _collect(fx, msg)
    except ScanError as exc:
        return Outcome([last_msg_proto(exc.code)])
    except (IndexError, struct.error):
        return Outcome([last_msg_proto(proto.ERR_PARAMETER)])
    outcome = Outcome(_pack(msgs) + [last_msg_proto(proto.OK)])
    return compress_if_asked(msg, post_faults(fx, ops, (), outcome))
