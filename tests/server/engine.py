"""Record-level command semantics shared by single-record commands and batch rows.

Mirrors the server's read.c, write.c (write_master) and delete.c for the
features the fixture supports: whole-record and named-bin reads, bin writes
and deletes, integer/float increment, append/prepend, delete-all, touch,
existence policies, generation checks, stored keys, TTL rules, the record
size limit, stop-writes, the device write queue, read-touch (read_touch.c) and
the expression ops EXP_READ and EXP_MODIFY (exp.py). Callers hold Store.lock
while calling execute().

What an expression op sees (exp.Context), as the server sets it up:

* In an operate that writes (write.c write_master_apply), advance_record_version
  (rw_utils.c) gives the index record its new void time, last-update time
  (as_record_set_lut: now, never backwards) and generation *before* the bin
  ops loop runs, so every expression of the operate, before or after its bin
  writes, reads the new last_update (now) and since_update (0, or the few ms
  the operate took), the new void_time and ttl. A record the operate creates is
  the same: its last-update time is now. Its key_exists is false until the
  write is done (write_master_apply sets key_stored after the storage write),
  and record_size is the size the record had before the operate (16 for a new
  one): the index keeps n_rblocks until as_storage_record_write.
* The bins are the storage record's bins as the earlier ops of the operate
  left them (write_master_bin_ops_loop and process_bin_read_op pass the same
  `rd`), so an EXP_MODIFY or EXP_READ sees what an earlier op wrote, in order.
* In an operate without writes (read.c read_local) nothing changes: the
  stored last-update time, void time and bins.
* A failed expression op fails the whole operate with its code (26, or 4 for
  one that does not build, 6 or 17 for the CREATE_ONLY/UPDATE_ONLY flags) and
  nothing is written (unwind_index_metadata). An operate with EXP_MODIFY is a
  write: stop-writes refuses it with 8 (write_master_preprocessing:
  AS_ERR_OUT_OF_SPACE), it bumps the generation and sets the last-update time.
"""

import struct
import time
from dataclasses import dataclass, field

from . import exp, proto
from .store import Record, now_void_time

BIN_NAME_MAX = 15
ERR_FILTERED_OUT = 27

_WRITE_OPS = (proto.OP_WRITE, proto.OP_INCR, proto.OP_APPEND, proto.OP_PREPEND)
_EXP_OPS = (proto.OP_EXP_READ, proto.OP_EXP_MODIFY)


@dataclass
class Request:
    """One record-level command: a single-record AS_MSG or one batch row."""

    ns: str
    set_name: str
    digest: bytes
    key: bytes = None  # KEY field data when the client sent it (send_key)
    info1: int = 0
    info2: int = 0
    info3: int = 0
    generation: int = 0
    ttl: int = 0
    ops: list = field(default_factory=list)
    filter: bytes = None  # FILTER field data (a filter expression), or None

    @property
    def kind(self):
        """'read', 'write', 'touch' or 'remove' (the fault and stats class)."""
        if not self.info2 & proto.INFO2_WRITE:
            return "read"
        if self.info2 & proto.INFO2_DELETE:
            return "remove"
        if any(op.op == proto.OP_TOUCH for op in self.ops) and not any(
            op.op in _WRITE_OPS or op.op == proto.OP_EXP_MODIFY for op in self.ops
        ):
            return "touch"
        return "write"


@dataclass
class Reply:
    result: int
    generation: int = 0
    void_time: int = 0
    ops: list = field(default_factory=list)

    def to_msg(self, txn_ttl=0):
        return proto.Msg(
            result=self.result,
            generation=self.generation,
            record_ttl=self.void_time,
            txn_ttl=txn_ttl,
            ops=self.ops,
        )


def execute(store, req):
    """Run one record-level command against the store; return a Reply."""
    ns = store.get(req.ns)
    if ns is None:
        return Reply(proto.ERR_NAMESPACE)
    kind = req.kind
    if kind == "read":
        return _read(ns, req)
    if kind == "remove":
        return _remove(ns, req)
    return _write(ns, req)


def count_result(store, req, result, batch=False):
    """The namespace's transaction counters under the real names: client_* for
    single-record commands, batch_sub_* for batch rows; success, error and, for
    reads and deletes, not_found (write.c client_write_update_stats and the
    read/delete counterparts). Call with Store.lock held."""
    ns = store.get(req.ns)
    if ns is None:
        return
    kind = {"read": "read", "remove": "delete"}.get(req.kind, "write")
    if result == proto.OK:
        outcome = "success"
    elif result == proto.ERR_NOT_FOUND and kind != "write":
        outcome = "not_found"
    else:
        outcome = "error"
    ns.counts["%s_%s_%s" % ("batch_sub" if batch else "client", kind, outcome)] += 1


def all_bins(rec):
    return [proto.Op(proto.OP_READ, pt, name, value) for name, (pt, value) in rec.bins.items()]


def _generation_ok(info2, wanted, current):
    if info2 & proto.INFO2_GENERATION:
        return wanted == current
    if info2 & proto.INFO2_GENERATION_GT:
        return wanted > current
    return True


def _storage(ns):
    """exp.c's memory-only test: the legacy emulation is a device namespace."""
    cfg = ns.config
    return "device" if cfg.storage_engine == "device" or cfg.legacy else "memory"


def stored_context(ns, digest, rec):
    """What an expression sees of a stored record, before any change."""
    return exp.Context(bins=rec.bins, digest=digest, set_name=rec.set_name,
                       last_update_ms=rec.last_update_ms, void_time=rec.void_time,
                       key_stored=rec.key is not None, key=rec.key,
                       stored_size=exp.stored_size(rec.flat_size()), storage=_storage(ns))


def _filtered(ns, req, rec):
    """rw_utils.c handle_meta_filter / read_and_filter_bins on a stored record:
    0 when it passes (or there is no filter), FILTERED_OUT (27) when it does
    not, PARAMETER (4) when the filter does not build."""
    if req.filter is None:
        return proto.OK
    try:
        built = exp.build_filter(req.filter)
        ok = exp.matches(built, stored_context(ns, req.digest, rec))
    except exp.BuildError:
        return proto.ERR_PARAMETER
    return proto.OK if ok else ERR_FILTERED_OUT


def _read(ns, req):
    rec = ns.live(req.digest)
    if rec is None:
        return Reply(proto.ERR_NOT_FOUND)
    # read.c read_local: the read-touch check comes before the filter and the
    # bins (read_touch.c enqueues the touch there, so a record the filter
    # then refuses is touched all the same); the touch itself is an internal
    # write the server runs after answering.
    rc, write_ttl = ns.read_touch_check(rec, req.ttl)
    if rc:
        return Reply(rc)
    rc = _filtered(ns, req, rec)
    if rc:
        reply = Reply(rc, rec.generation, rec.void_time)
    else:
        reply = _read_bins(rec, req, stored_context(ns, req.digest, rec))
    if write_ttl is not None:  # enqueued whatever the read then answers
        ns.read_touch(req.digest, write_ttl)  # the reply keeps the old void time
    return reply


def _read_bins(rec, req, ctx):
    reply = Reply(proto.OK, rec.generation, rec.void_time)
    if req.info1 & proto.INFO1_GET_NOBINDATA:
        return reply
    if req.info1 & proto.INFO1_GET_ALL or not req.ops:
        reply.ops = all_bins(rec)
        return reply
    respond_all = req.info2 & proto.INFO2_RESPOND_ALL_OPS
    for op in req.ops:
        if op.op == proto.OP_EXP_READ:
            # read.c read_local: a bad bin name answers 21; a nil result is
            # sent only with respond-all-ops (which the C client sets for it).
            if len(op.name.encode()) > BIN_NAME_MAX:
                return Reply(proto.ERR_BIN_NAME, rec.generation, rec.void_time)
            rc, result = exp.read_op(ctx, op)
            if rc:
                return Reply(rc, rec.generation, rec.void_time)
            if result is not None:
                reply.ops.append(proto.Op(op.op, result[0], op.name, result[1]))
            elif respond_all:
                reply.ops.append(proto.Op(op.op, proto.PT_NULL, op.name))
            continue
        if op.op != proto.OP_READ:
            return Reply(proto.ERR_PARAMETER)  # CDT/bit/HLL reads unsupported
        if not op.name:
            reply.ops.extend(all_bins(rec))
            continue
        found = rec.bins.get(op.name)
        if found is not None:
            reply.ops.append(proto.Op(proto.OP_READ, found[0], op.name, found[1]))
        elif respond_all:
            reply.ops.append(proto.Op(proto.OP_READ, proto.PT_NULL, op.name))
    return reply


def _remove(ns, req):
    rec = ns.live(req.digest)
    if rec is None:
        return Reply(proto.ERR_NOT_FOUND)
    if not _generation_ok(req.info2, req.generation, rec.generation):
        return Reply(proto.ERR_GENERATION, rec.generation, rec.void_time)
    rc = _filtered(ns, req, rec)  # delete.c: after the generation check
    if rc:
        return Reply(rc, rec.generation, rec.void_time)
    ns.delete(req.digest)
    return Reply(proto.OK)


def _check_write_ops(req):
    """Validate ops up front, as write_master_policies() does.

    Return (result, must_not_create, is_replace, has_read_all).
    """
    is_replace = bool(req.info3 & (proto.INFO3_CREATE_OR_REPLACE | proto.INFO3_REPLACE_ONLY))
    must_not_create = bool(req.info3 & (proto.INFO3_UPDATE_ONLY | proto.INFO3_REPLACE_ONLY))
    respond_all = req.info2 & proto.INFO2_RESPOND_ALL_OPS
    has_read_all = False
    has_exp_read = False
    for op in req.ops:
        if op.op == proto.OP_TOUCH:
            if is_replace:
                return proto.ERR_PARAMETER, False, False, False
            must_not_create = True
            continue
        if op.op == proto.OP_DELETE_ALL:
            if is_replace:
                return proto.ERR_PARAMETER, False, False, False
            continue
        if op.op == proto.OP_READ and not op.name and req.info1 & proto.INFO1_GET_ALL:
            if respond_all or has_read_all:
                return proto.ERR_PARAMETER, False, False, False
            has_read_all = True
            continue
        if not op.name or len(op.name.encode()) > BIN_NAME_MAX:
            return proto.ERR_BIN_NAME, False, False, False
        if op.op in (proto.OP_INCR, proto.OP_APPEND, proto.OP_PREPEND) and is_replace:
            return proto.ERR_PARAMETER, False, False, False
        if op.op == proto.OP_WRITE and op.ptype == proto.PT_NULL and is_replace:
            return proto.ERR_PARAMETER, False, False, False
        if op.op == proto.OP_EXP_READ:
            has_exp_read = True
        if op.op not in _WRITE_OPS + _EXP_OPS and op.op != proto.OP_READ:
            return proto.ERR_PARAMETER, False, False, False  # CDT/bit/HLL unsupported
    # write_master_policies: an EXP_READ needs the read flag, and generates a
    # response bin, which a read-all op must not be mixed with.
    if has_exp_read and (not req.info1 & proto.INFO1_READ or has_read_all):
        return proto.ERR_PARAMETER, False, False, False
    return proto.OK, must_not_create, is_replace, has_read_all


def _modify(bins, op):
    """Apply an increment/append/prepend op in place; return a result code."""
    old = bins.get(op.name)
    if op.op == proto.OP_INCR:
        if op.ptype not in (proto.PT_INTEGER, proto.PT_DOUBLE) or len(op.value) != 8:
            return proto.ERR_PARAMETER
        if old is None:
            bins[op.name] = (op.ptype, op.value)
            return proto.OK
        if old[0] != op.ptype:
            return 12  # BIN_INCOMPATIBLE_TYPE
        if op.ptype == proto.PT_INTEGER:
            a = int.from_bytes(old[1], "big", signed=True)
            b = int.from_bytes(op.value, "big", signed=True)
            total = (a + b + (1 << 63)) % (1 << 64) - (1 << 63)
            bins[op.name] = (op.ptype, total.to_bytes(8, "big", signed=True))
        else:
            (a,) = struct.unpack(">d", old[1])
            (b,) = struct.unpack(">d", op.value)
            bins[op.name] = (op.ptype, struct.pack(">d", a + b))
        return proto.OK
    if op.ptype not in (proto.PT_STRING, proto.PT_BLOB):
        return proto.ERR_PARAMETER
    if old is None:
        bins[op.name] = (op.ptype, op.value)
    elif old[0] != op.ptype:
        return 12
    elif op.op == proto.OP_APPEND:
        bins[op.name] = (op.ptype, old[1] + op.value)
    else:
        bins[op.name] = (op.ptype, op.value + old[1])
    return proto.OK


def _apply_ops(req, bins, has_read_all, ctx):
    """Apply the ops to `bins` (which is ctx.bins) in order; return (result,
    response ops)."""
    respond_all = req.info2 & proto.INFO2_RESPOND_ALL_OPS
    out = []
    for op in req.ops:
        if op.op == proto.OP_TOUCH:
            continue
        if op.op == proto.OP_EXP_READ:
            # write.c write_master_bin_ops_loop: a read op other than READ
            # always adds a response bin, nil included.
            rc, result = exp.read_op(ctx, op)
            if rc:
                return rc, []
            ptype, value = result if result is not None else (proto.PT_NULL, b"")
            out.append(proto.Op(op.op, ptype, op.name, value))
            continue
        if op.op == proto.OP_EXP_MODIFY:
            rc = exp.modify_op(ctx, op)
            if rc:
                return rc, []
            if respond_all:
                out.append(proto.Op(op.op, proto.PT_NULL, op.name))
            continue
        if op.op == proto.OP_DELETE_ALL:
            bins.clear()
        elif op.op == proto.OP_WRITE:
            if op.ptype == proto.PT_NULL:
                bins.pop(op.name, None)
            else:
                bins[op.name] = (op.ptype, op.value)
        elif op.op in _WRITE_OPS:
            rc = _modify(bins, op)
            if rc:
                return rc, []
        elif op.op == proto.OP_READ:
            if has_read_all and not op.name:
                continue
            found = bins.get(op.name)
            if found is not None:
                out.append(proto.Op(proto.OP_READ, found[0], op.name, found[1]))
            elif respond_all:
                out.append(proto.Op(proto.OP_READ, proto.PT_NULL, op.name))
            continue
        if respond_all:
            # Write-type ops answer with an empty bin under their own op code.
            out.append(proto.Op(op.op, proto.PT_NULL, op.name))
    return proto.OK, out


def _write(ns, req):
    # write.c as_write_start: a device whose write queue is too deep refuses
    # first (as_storage_overloaded); then write_master_preprocessing refuses
    # while the stop-writes thread has set stop_writes; then the ops are checked.
    if ns.overloaded():
        ns.counts["device_overloads"] += 1
        return Reply(proto.ERR_DEVICE_OVERLOAD)
    if ns.stop_writes:
        return Reply(proto.ERR_SERVER_FULL)
    rc, must_not_create, is_replace, has_read_all = _check_write_ops(req)
    if rc:
        return Reply(rc)

    now = now_void_time()
    rec = ns.live(req.digest, now)
    exists = rec is not None
    old_gen = rec.generation if exists else 0
    old_void = rec.void_time if exists else 0

    if must_not_create and not exists:
        return Reply(proto.ERR_NOT_FOUND)
    if req.info2 & proto.INFO2_CREATE_ONLY and exists:
        return Reply(proto.ERR_RECORD_EXISTS, old_gen, old_void)
    if not _generation_ok(req.info2, req.generation, old_gen):
        return Reply(proto.ERR_GENERATION, old_gen, old_void)
    # write_master: the filter is applied to a record that exists, before the
    # key check and the ops; a write that creates the record ignores it.
    rc = _filtered(ns, req, rec) if exists else proto.OK
    if rc:
        return Reply(rc, old_gen, old_void)
    if exists and req.key is not None and rec.key is not None and rec.key != req.key:
        return Reply(proto.ERR_KEY_MISMATCH, old_gen, old_void)

    rc, ttl = ns.check_ttl(req.ttl, exists)
    if rc:
        return Reply(rc, old_gen, old_void)

    # rw_utils.c advance_record_version, before the ops: the new void time and
    # last-update time (never backwards: record_ce.c as_record_set_lut).
    void_time = ns.void_time_for(ttl, old_void, now)
    now_ms = int(time.time() * 1000)
    last_update_ms = max(now_ms, rec.last_update_ms) if exists else now_ms
    bins = {} if (is_replace or not exists) else dict(rec.bins)
    ctx = exp.Context(
        bins=bins, digest=req.digest,
        set_name=(rec.set_name if exists else req.set_name) or "",
        last_update_ms=last_update_ms, void_time=void_time,
        key_stored=exists and rec.key is not None,
        key=req.key if req.key is not None else (rec.key if exists else None),
        stored_size=exp.stored_size(rec.flat_size()) if exists else exp.RBLOCK_SIZE,
        storage=_storage(ns))
    rc, out = _apply_ops(req, bins, has_read_all, ctx)
    if rc:
        return Reply(rc, old_gen, old_void)

    if not bins:
        if not exists:
            return Reply(proto.ERR_NOT_FOUND)
        ns.delete(req.digest)  # the write removed the last bin
        # write_master_bin_ops: a delete answers its response bins without
        # generation or void time.
        return Reply(proto.OK, ops=out)

    new = Record(
        set_name=req.set_name or (rec.set_name if exists else ""),
        bins=bins,
        generation=((old_gen + 1) & 0xFFFF) or 1,
        void_time=void_time,
        key=req.key if req.key is not None else (rec.key if exists else None),
        last_update_ms=last_update_ms,
    )
    if ns.too_big(new):
        return Reply(proto.ERR_RECORD_TOO_BIG, old_gen, old_void)
    if not ns.fits(new, rec):
        return Reply(proto.ERR_SERVER_FULL, old_gen, old_void)  # out of space
    ns.store(req.digest, new)
    if has_read_all:
        out = all_bins(new)
    return Reply(proto.OK, new.generation, new.void_time, out)
