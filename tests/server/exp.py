"""Expression operations: the operate ops EXP_READ (7) and EXP_MODIFY (8).

The C client (as_exp_operations.c as_operations_exp_op) sends the op value as
msgpack [expression, flags], the expression being the server's wire form
(as_exp.c as_exp_compile): a call is a list [op code, args...], a literal is a
plain msgpack value, a string literal carries the particle-type byte 3 in
front of its bytes (a blob 4), and bin and variable names are raw strings.

What the server does with them (CE 8.1.2.0), re-expressed here:

* as/src/base/expop.c as_exp_op_parse: the value must be a list of one or two
  elements; flags other than the op's own (EXP_READ: EVAL_NO_FAIL; EXP_MODIFY:
  CREATE_ONLY, UPDATE_ONLY, ALLOW_DELETE, POLICY_NO_FAIL, EVAL_NO_FAIL), or an
  expression that does not build, answer PARAMETER (4) whatever the flags.
* as/src/base/exp.c build_*: every call is typed when it is built (an int
  compared with a string, a cond whose branches differ, a let name used while
  being defined, a wrong argument count: 4).
* exp.c eval_*: at run time a missing bin, or a bin of another type than the
  one asked for, is "unknown"; unknown flows up through comparisons,
  arithmetic, not and exclusive; and/or ignore it when another argument
  decides (FALSE for and, TRUE for or); integer division or modulo by zero is
  unknown too. An expression whose result is unknown fails (as_exp_eval
  returns false) and the op answers OP_NOT_APPLICABLE (26), unless the op has
  EVAL_NO_FAIL: then EXP_READ returns nil and EXP_MODIFY leaves the bin as it
  was (expop.c eval_op). A nil result is not a failure: EXP_READ returns nil,
  EXP_MODIFY deletes the bin only with ALLOW_DELETE (else the bin is kept and
  the op answers 26 when the flags are 0 and 0 otherwise: expop.c tests
  `flags && AS_EXP_FLAG_POLICY_NO_FAIL != 0`, i.e. any non-zero flags).
* expop.c as_exp_modify_tr: CREATE_ONLY on a bin that exists answers
  BIN_EXISTS (6), UPDATE_ONLY on one that does not BIN_NOT_FOUND (17); with
  POLICY_NO_FAIL both just skip the op.

Record metadata, as exp.c reads it from the index (as_record) of the record:
last_update (ns since the Unix epoch, from the last-update time in ms since
2010), since_update (ms from that to now, 0 if in the future), void_time (ns,
-1 when none), ttl (s, -1 when none, at least 1), set_name ("" when none),
key_exists, digest_modulo (the digest's bytes 16..19 read little-endian, modulo
the argument), record_size (the stored size: flat size + end mark rounded up
to 16 bytes, as_record_stored_size), device_size/memory_size (the same, or 0
for the other storage), is_tombstone (false: the fixture has no tombstones).
Which values an op sees in an operate is the caller's business (engine.py
`Context`), because it depends on where the op runs: see engine.py.

Filter expressions (the FILTER field of a command, a batch or a scan) use the
same evaluator: `build_filter` and `matches`.

Not implemented (the op answers 4, as if the expression did not build): list,
map, geo, HLL and regex calls (CDT/bit/HLL `call`, in_list, map_keys,
map_values, cmp_regex, cmp_geo, quote), loop variables, the float functions
pow/log/floor/ceil/to_int/to_float, the integer bit ops, and comparisons of
list or map values.
"""

import math
import struct
import time
from dataclasses import dataclass

from . import proto

# as/include/base/proto.h AS_EXP_FLAG_*.
FLAG_CREATE_ONLY = 1 << 0
FLAG_UPDATE_ONLY = 1 << 1
FLAG_ALLOW_DELETE = 1 << 2
FLAG_POLICY_NO_FAIL = 1 << 3
FLAG_EVAL_NO_FAIL = 1 << 4
MODIFY_FLAGS = (FLAG_CREATE_ONLY | FLAG_UPDATE_ONLY | FLAG_ALLOW_DELETE
                | FLAG_POLICY_NO_FAIL | FLAG_EVAL_NO_FAIL)
READ_FLAGS = FLAG_EVAL_NO_FAIL

ERR_BIN_EXISTS = 6
ERR_BIN_NOT_FOUND = 17
ERR_OP_NOT_APPLICABLE = 26

CITRUSLEAF_EPOCH = 1262304000
RBLOCK_SIZE = 16  # as/include/storage/flat.h

# exp.c result_type: the static type of an expression.
T_NIL, T_BOOL, T_INT, T_STR, T_LIST, T_MAP, T_BLOB, T_FLOAT, T_GEO, T_HLL = range(10)
T_INPUT_END = 10
T_END = 12  # no type (a msgpack value the build could not type)

# result_type_to_particle_type.
PARTICLE_OF = {T_NIL: proto.PT_NULL, T_BOOL: proto.PT_BOOL, T_INT: proto.PT_INTEGER,
               T_FLOAT: proto.PT_DOUBLE, T_STR: proto.PT_STRING, T_BLOB: proto.PT_BLOB,
               T_GEO: proto.PT_GEOJSON, T_HLL: proto.PT_HLL, T_LIST: proto.PT_LIST,
               T_MAP: proto.PT_MAP}

# as_bytes_type prefixes of typed msgpack strings.
BYTES_STRING = 3
BYTES_BLOB = 4
BYTES_HLL = 18
BYTES_GEOJSON = 23

# Op codes (exp.c exp_op_code).
CMP_EQ, CMP_NE, CMP_GT, CMP_GE, CMP_LT, CMP_LE = 1, 2, 3, 4, 5, 6
AND, OR, NOT, EXCLUSIVE = 16, 17, 18, 19
ADD, SUB, MUL, DIV, MOD, ABS = 20, 21, 22, 23, 26, 27
MIN, MAX = 50, 51
META_DIGEST_MOD, META_DEVICE_SIZE, META_LAST_UPDATE, META_SINCE_UPDATE = 64, 65, 66, 67
META_VOID_TIME, META_TTL, META_SET_NAME, META_KEY_EXISTS = 68, 69, 70, 71
META_IS_TOMBSTONE, META_MEMORY_SIZE, META_RECORD_SIZE = 72, 73, 74
REC_KEY, BIN, BIN_TYPE = 80, 81, 82
COND, VAR, LET = 123, 124, 125
UNKNOWN = 0
# Codes a real server builds that the fixture does not evaluate.
NOT_IMPLEMENTED = {7, 8, 9, 24, 25, 28, 29, 30, 31, *range(32, 42), 100, 101, 102, 122, 126,
                   127}

INT64_MIN = -(1 << 63)


class BuildError(Exception):
    """The expression does not build: the op answers PARAMETER (4)."""


def _i64(n):
    return (n + (1 << 63)) % (1 << 64) - (1 << 63)


# -- msgpack ------------------------------------------------------------------


class Raw(bytes):
    """A msgpack str or bin (the server reads both with msgpack_get_bin)."""


class Other:
    """A msgpack map or extension: a value the fixture does not evaluate."""


def unpack(buf, pos=0):
    """Decode one msgpack element at `pos`; return (value, next position).
    Raise BuildError when it is malformed or truncated."""
    try:
        return _unpack(buf, pos)
    except (IndexError, struct.error):
        raise BuildError("truncated msgpack") from None


def _take(buf, pos, n):
    if pos + n > len(buf):
        raise BuildError("truncated msgpack")
    return buf[pos:pos + n], pos + n


def _unpack(buf, pos):
    b = buf[pos]
    pos += 1
    if b <= 0x7F:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if 0xA0 <= b <= 0xBF:
        data, pos = _take(buf, pos, b & 0x1F)
        return Raw(data), pos
    if 0x90 <= b <= 0x9F:
        return _unpack_list(buf, pos, b & 0x0F)
    if 0x80 <= b <= 0x8F:
        return _skip_map(buf, pos, b & 0x0F)
    if b == 0xC0:
        return None, pos
    if b == 0xC2:
        return False, pos
    if b == 0xC3:
        return True, pos
    fixed = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
             0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}
    if b in fixed:
        fmt = fixed[b]
        (value,) = struct.unpack_from(fmt, buf, pos)
        return value, pos + struct.calcsize(fmt)
    lengths = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}
    if b in lengths:
        fmt = lengths[b]
        (n,) = struct.unpack_from(fmt, buf, pos)
        data, pos = _take(buf, pos + struct.calcsize(fmt), n)
        return Raw(data), pos
    if b in (0xDC, 0xDD):
        fmt = ">H" if b == 0xDC else ">I"
        (n,) = struct.unpack_from(fmt, buf, pos)
        return _unpack_list(buf, pos + struct.calcsize(fmt), n)
    if b in (0xDE, 0xDF):
        fmt = ">H" if b == 0xDE else ">I"
        (n,) = struct.unpack_from(fmt, buf, pos)
        return _skip_map(buf, pos + struct.calcsize(fmt), n)
    ext = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
    if b in ext:
        _, pos = _take(buf, pos, 1 + ext[b])
        return Other(), pos
    if b in (0xC7, 0xC8, 0xC9):
        fmt = {0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}[b]
        (n,) = struct.unpack_from(fmt, buf, pos)
        _, pos = _take(buf, pos + struct.calcsize(fmt), 1 + n)
        return Other(), pos
    raise BuildError("bad msgpack byte 0x%02x" % b)  # 0xC1


def _unpack_list(buf, pos, n):
    out = []
    for _ in range(n):
        value, pos = _unpack(buf, pos)
        out.append(value)
    return out, pos


def _skip_map(buf, pos, n):
    for _ in range(2 * n):
        _, pos = _unpack(buf, pos)
    return Other(), pos


# -- run-time values ----------------------------------------------------------
#
# Tagged tuples: ("unk",), ("nil",), ("bool", b), ("int", n), ("float", x),
# ("str", bytes), ("blob", bytes), ("part", particle type, bytes) for a bin of
# another type (list, map, HLL, geojson), which the fixture can only pass on.

UNK = ("unk",)
NIL = ("nil",)


@dataclass
class Context:
    """What an expression sees of the record (as_exp_ctx: the index record `r`
    and the storage record `rd` with its bins as the ops left them so far)."""

    bins: dict  # name -> (particle type, bytes)
    digest: bytes
    set_name: str
    last_update_ms: int  # Unix ms (r->last_update_time + the 2010 epoch)
    void_time: int  # seconds since 2010, 0 = never
    key_stored: bool  # r->key_stored
    key: bytes = None  # the key (type byte + value) as_storage_rd_load_key finds
    stored_size: int = RBLOCK_SIZE  # as_record_stored_size: 16 for a new record
    storage: str = "memory"


def stored_size(flat_size):
    """as_record_stored_size of a record whose flat size is `flat_size`: the
    write size, flat + end mark rounded up to RBLOCK_SIZE (drv_mem.c)."""
    return (flat_size + 4 + RBLOCK_SIZE - 1) // RBLOCK_SIZE * RBLOCK_SIZE


def bin_value(ptype, value):
    """eval_bin: a stored bin as a run-time value."""
    if ptype == proto.PT_INTEGER:
        return ("int", int.from_bytes(value[-8:].rjust(8, b"\0"), "big", signed=True))
    if ptype == proto.PT_DOUBLE:
        return ("float", struct.unpack(">d", value[-8:].rjust(8, b"\0"))[0])
    if ptype == proto.PT_BOOL:
        return ("bool", bool(value and value[-1]))
    if ptype == proto.PT_STRING:
        return ("str", bytes(value))
    if ptype == proto.PT_BLOB:
        return ("blob", bytes(value))
    return ("part", ptype, bytes(value))


def to_bin(value):
    """as_exp_eval: the result as a bin, (particle type, bytes); None for nil
    (an empty bin). Raise ValueError for unknown (the evaluation failed)."""
    kind = value[0]
    if kind == "unk":
        raise ValueError("unknown")
    if kind == "nil":
        return None
    if kind == "bool":
        return proto.PT_BOOL, b"\x01" if value[1] else b"\x00"
    if kind == "int":
        return proto.PT_INTEGER, value[1].to_bytes(8, "big", signed=True)
    if kind == "float":
        return proto.PT_DOUBLE, struct.pack(">d", value[1])
    if kind == "str":
        return proto.PT_STRING, value[1]
    if kind == "blob":
        return proto.PT_BLOB, value[1]
    if kind == "hll":
        return proto.PT_HLL, value[1]
    return value[1], value[2]


# -- build (exp.c build_*) ------------------------------------------------------


@dataclass
class Built:
    fn: object  # fn(ctx) -> run-time value
    rtype: int
    unk: bool = False  # the op table entry left is EXP_UNK (build_cond allows it anywhere)


class Scope:
    """Variables of the enclosing lets (build_let's var_scope chain)."""

    def __init__(self, parent=None):
        self.parent = parent
        self.cells = {}  # name -> [value cell, static type or None while defining]

    def find(self, name):
        scope = self
        while scope is not None:
            if name in scope.cells:
                return scope.cells[name]
            scope = scope.parent
        return None


def build(node, scope=None):
    """Build one expression; raise BuildError where the server's build fails
    (or the fixture does not implement the call)."""
    scope = scope or Scope()
    if isinstance(node, list):
        return _build_call(node, scope)
    if node is None:
        return Built(lambda ctx: NIL, T_NIL)
    if isinstance(node, bool):
        value = ("bool", node)
        return Built(lambda ctx: value, T_BOOL)
    if isinstance(node, int):
        value = ("int", _i64(node))  # msgpack_get_int64 reads a uint64 as int64
        return Built(lambda ctx: value, T_INT)
    if isinstance(node, float):
        value = ("float", node)
        return Built(lambda ctx: value, T_FLOAT)
    if isinstance(node, Raw):
        # build_count_sz / build_value_blob: a typed string; empty or of
        # another type fails.
        if not node:
            raise BuildError("empty string value")
        kind = {BYTES_STRING: ("str", T_STR), BYTES_BLOB: ("blob", T_BLOB),
                BYTES_HLL: ("hll", T_HLL)}.get(node[0])
        if kind is None:
            raise BuildError("geojson or unknown blob type %d" % node[0])
        value = (kind[0], bytes(node[1:]))
        return Built(lambda ctx: value, kind[1])
    raise BuildError("map or extension value (not implemented)")


def _uint(node):
    if isinstance(node, bool) or not isinstance(node, int) or node < 0:
        raise BuildError("expected an unsigned integer")
    return node


def _int(node):
    if isinstance(node, bool) or not isinstance(node, int):
        raise BuildError("expected an integer")
    return _i64(node)


def _name(node):
    if not isinstance(node, Raw):
        raise BuildError("expected a string")
    return bytes(node)


def _bin_name(node):
    name = _name(node)
    if len(name) >= 16 or b"\0" in name:  # as_bin_name_check
        raise BuildError("bad bin name")
    return name.decode("utf-8", "replace")


def _count(args, n):
    if len(args) != n:  # build_args_setup
        raise BuildError("expected %d args, found %d" % (n, len(args)))


def _build_call(node, scope):
    if not node:
        raise BuildError("empty list")
    code, args = node[0], node[1:]
    if isinstance(code, bool) or not isinstance(code, int):
        raise BuildError("op code is not an integer")
    builder = _BUILDERS.get(code)
    if builder is None:
        if code in NOT_IMPLEMENTED:
            raise BuildError("expression op %d is not implemented by the fixture" % code)
        raise BuildError("invalid expression op %d" % code)
    return builder(code, args, scope)


def _build_unknown(code, args, scope):
    _count(args, 0)
    return Built(lambda ctx: UNK, T_BOOL, unk=True)


def _build_compare(code, args, scope):
    """build_compare: two args of one type, neither geojson nor HLL."""
    _count(args, 2)
    left, right = build(args[0], scope), build(args[1], scope)
    if left.rtype != right.rtype:
        raise BuildError("mismatched arg types")
    if left.rtype in (T_GEO, T_HLL):
        raise BuildError("cannot compare geojson or hll")
    if left.rtype in (T_LIST, T_MAP, T_END):
        raise BuildError("list and map comparisons are not implemented")

    def fn(ctx):
        a = left.fn(ctx)  # eval_compare: unknown on either side is unknown
        if a is UNK:
            return UNK
        b = right.fn(ctx)
        if b is UNK:
            return UNK
        return ("bool", _compare(code, _translate(a), _translate(b)))

    return Built(fn, T_BOOL)


def _translate(value):
    """rt_value_translate: a bin read by reference as a comparable value."""
    if value[0] == "part":
        raise BuildError("comparison of a list, map, geojson or hll bin (not implemented)")
    if value[0] == "bool":
        return value[1]
    if value[0] == "nil":
        return 0
    return value[1]


def _compare(code, a, b):
    # cmp_nil (equal), cmp_trilean, cmp_int, cmp_float, cmp_bytes (memcmp,
    # then the shorter first): Python's ordering of bools, ints, floats and
    # bytes is the same.
    if code == CMP_EQ:
        return a == b
    if code == CMP_NE:
        return a != b
    if code == CMP_GT:
        return a > b
    if code == CMP_GE:
        return a >= b
    if code == CMP_LT:
        return a < b
    return a <= b


def _build_logical(code, args, scope):
    """build_logical_vargs / build_logical_not: boolean args."""
    if code == NOT:
        _count(args, 1)
    elif len(args) < 2:
        raise BuildError("too few args")
    parts = [build(a, scope) for a in args]
    if any(p.rtype != T_BOOL for p in parts):
        raise BuildError("logical op on a non-boolean")

    def fn_and(ctx):  # eval_and: FALSE decides; unknown otherwise wins over TRUE
        result = True
        for p in parts:
            v = p.fn(ctx)
            if v is UNK:
                result = None
            elif not v[1]:
                return ("bool", False)
        return UNK if result is None else ("bool", True)

    def fn_or(ctx):  # eval_or: TRUE decides
        result = False
        for p in parts:
            v = p.fn(ctx)
            if v is UNK:
                result = None
            elif v[1]:
                return ("bool", True)
        return UNK if result is None else ("bool", False)

    def fn_not(ctx):
        v = parts[0].fn(ctx)
        return v if v is UNK else ("bool", not v[1])

    def fn_exclusive(ctx):  # eval_exclusive: exactly one TRUE; unknown stops at once
        seen = False
        for p in parts:
            v = p.fn(ctx)
            if v is UNK:
                return UNK
            if v[1]:
                if seen:
                    return ("bool", False)
                seen = True
        return ("bool", seen)

    fn = {AND: fn_and, OR: fn_or, NOT: fn_not, EXCLUSIVE: fn_exclusive}[code]
    return Built(fn, T_BOOL)


def _c_div(a, b):
    q = abs(a) // abs(b)
    return _i64(q if (a < 0) == (b < 0) else -q)


def _c_mod(a, b):
    return _i64(a - b * _c_div(a, b))


def _fdiv(a, b):
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _build_math(code, args, scope):
    """build_math_vargs: at least one arg, all int or all float; the result is
    of that type (eval_add, eval_sub, eval_mul, eval_div, eval_min, eval_max)."""
    if len(args) < 1:
        raise BuildError("too few args")
    parts = [build(a, scope) for a in args]
    types = {p.rtype for p in parts}
    if len(types) != 1 or not types <= {T_INT, T_FLOAT}:
        raise BuildError("math on mixed or non-numeric types")
    is_float = T_FLOAT in types
    kind = "float" if is_float else "int"
    fix = (lambda x: x) if is_float else _i64

    def fn(ctx):
        values = []
        for p in parts:
            v = p.fn(ctx)
            if v is UNK:
                return UNK  # the first unknown argument is the result
            values.append(v[1])
        first, rest = values[0], values[1:]
        if code == ADD:
            return (kind, fix(sum(values)) if not is_float else _fsum(values))
        if code == SUB:
            if not rest:
                return (kind, fix(0 - first))
            for x in rest:
                first = fix(first - x)
            return (kind, first)
        if code == MUL:
            for x in rest:
                first = fix(first * x)
            return (kind, first)
        if code == DIV:
            if not rest:  # one argument: 1 / x
                first, rest = (1.0 if is_float else 1), [first]
            product = 1.0 if is_float else 1
            for x in rest:
                product = fix(product * x)
            if is_float:
                return (kind, _fdiv(first, product))
            if product == 0:
                return UNK  # "integer division by zero"
            return (kind, _c_div(first, product))
        if code == MIN:
            return (kind, min(values))
        return (kind, max(values))

    return Built(fn, T_FLOAT if is_float else T_INT)


def _fsum(values):
    total = values[0]
    for x in values[1:]:
        total += x  # left to right, as the C loop adds
    return total


def _build_mod(code, args, scope):
    """build_math_mod / eval_mod: two ints; modulo by zero is unknown."""
    _count(args, 2)
    a, b = build(args[0], scope), build(args[1], scope)
    if a.rtype != T_INT or b.rtype != T_INT:
        raise BuildError("mod args are not integers")

    def fn(ctx):
        x = a.fn(ctx)
        if x is UNK:
            return UNK
        y = b.fn(ctx)
        if y is UNK or y[1] == 0:
            return UNK
        return ("int", _c_mod(x[1], y[1]))

    return Built(fn, T_INT)


def _build_abs(code, args, scope):
    """build_number_op / eval_abs (labs: INT64_MIN stays INT64_MIN)."""
    _count(args, 1)
    a = build(args[0], scope)
    if a.rtype not in (T_INT, T_FLOAT):
        raise BuildError("abs of a non-number")

    def fn(ctx):
        x = a.fn(ctx)
        if x is UNK:
            return x
        return (x[0], abs(x[1]) if x[0] == "float" else _i64(abs(x[1])))

    return Built(fn, a.rtype)


def _now_ms():
    return int(time.time() * 1000)


def _build_meta(code, args, scope):
    """build_meta_default (no args) and the eval_meta_* functions."""
    _count(args, 0)

    def last_update(ctx):  # cf_utc_ns_from_clepoch_ms
        return ("int", ctx.last_update_ms * 1_000_000)

    def since_update(ctx):
        now = _now_ms()
        return ("int", now - ctx.last_update_ms if now > ctx.last_update_ms else 0)

    def void_time(ctx):  # cf_utc_ns_from_clepoch_sec, -1 for none
        if ctx.void_time == 0:
            return ("int", -1)
        return ("int", (ctx.void_time + CITRUSLEAF_EPOCH) * 1_000_000_000)

    def ttl(ctx):  # (int32_t)cf_server_void_time_to_ttl
        if ctx.void_time == 0:
            return ("int", -1)
        now = int(time.time()) - CITRUSLEAF_EPOCH
        return ("int", ctx.void_time - now if ctx.void_time > now else 1)

    def set_name(ctx):
        return ("str", ctx.set_name.encode())

    def key_exists(ctx):
        return ("bool", bool(ctx.key_stored))

    def is_tombstone(ctx):
        return ("bool", False)

    def record_size(ctx):
        return ("int", ctx.stored_size)

    def device_size(ctx):  # deprecated: 0 for a memory namespace
        return ("int", 0 if ctx.storage == "memory" else ctx.stored_size)

    def memory_size(ctx):  # deprecated: 0 unless memory
        return ("int", ctx.stored_size if ctx.storage == "memory" else 0)

    table = {
        META_LAST_UPDATE: (last_update, T_INT), META_SINCE_UPDATE: (since_update, T_INT),
        META_VOID_TIME: (void_time, T_INT), META_TTL: (ttl, T_INT),
        META_SET_NAME: (set_name, T_STR), META_KEY_EXISTS: (key_exists, T_BOOL),
        META_IS_TOMBSTONE: (is_tombstone, T_BOOL), META_RECORD_SIZE: (record_size, T_INT),
        META_DEVICE_SIZE: (device_size, T_INT), META_MEMORY_SIZE: (memory_size, T_INT),
    }
    fn, rtype = table[code]
    return Built(fn, rtype)


def _build_digest_mod(code, args, scope):
    """build_meta_digest_mod: an int32 argument, not 0; eval_meta_digest_mod
    reads the digest's bytes 16..19 as a (little-endian) uint32."""
    _count(args, 1)
    mod = _int(args[0])
    mod = (mod + (1 << 31)) % (1 << 32) - (1 << 31)  # (int32_t)
    if mod == 0:
        raise BuildError("cannot modulo by zero")

    def fn(ctx):
        val = int.from_bytes(ctx.digest[16:20], "little")
        return ("int", val % abs(mod))  # C's % of a non-negative dividend

    return Built(fn, T_INT)


def _build_rec_key(code, args, scope):
    """build_rec_key / eval_rec_key: the stored key, if of the asked type."""
    _count(args, 1)
    want = _uint(args[0])
    if want not in (T_INT, T_STR, T_BLOB):
        raise BuildError("invalid key type")

    def fn(ctx):
        key = ctx.key
        if not key:
            return UNK
        if key[0] == proto.PT_INTEGER and len(key) == 9:
            value = ("int", int.from_bytes(key[1:], "big", signed=True))
            vtype = T_INT
        elif key[0] in (proto.PT_STRING, proto.PT_BLOB):
            value = ("str" if key[0] == proto.PT_STRING else "blob", bytes(key[1:]))
            vtype = T_STR if key[0] == proto.PT_STRING else T_BLOB
        else:
            return UNK
        return value if vtype == want else UNK

    return Built(fn, want)


def _build_bin(code, args, scope):
    """build_bin / eval_bin: [81, type, name]; a missing bin, or one of
    another particle type than `type` maps to, is unknown."""
    _count(args, 2)
    rtype = _uint(args[0])
    if rtype >= T_INPUT_END:
        raise BuildError("invalid bin type")
    name = _bin_name(args[1])
    want = PARTICLE_OF[rtype]

    def fn(ctx):
        found = ctx.bins.get(name)
        if found is None or found[0] != want:
            return UNK
        return bin_value(*found)

    return Built(fn, rtype)


def _build_bin_type(code, args, scope):
    """build_bin_type / eval_bin_type: the particle type, 0 when missing."""
    _count(args, 1)
    name = _bin_name(args[0])

    def fn(ctx):
        found = ctx.bins.get(name)
        return ("int", 0 if found is None else found[0])

    return Built(fn, T_INT)


def _build_cond(code, args, scope):
    """build_cond: [123, cond1, value1, ..., default]: at least three args, an
    odd count; conditions boolean; every value of one type, except literal
    unknowns. eval_cond: the first TRUE condition's value; an unknown
    condition makes the whole cond unknown."""
    if len(args) < 3:
        raise BuildError("too few args")
    if len(args) % 2 == 0:
        raise BuildError("requires default case")
    cases = []
    rtype = None
    for i in range(0, len(args) - 1, 2):
        cond = build(args[i], scope)
        if cond.rtype != T_BOOL:
            raise BuildError("condition is not boolean")
        value = build(args[i + 1], scope)
        if not value.unk:
            rtype = value.rtype if rtype is None else rtype
            if value.rtype != rtype:
                raise BuildError("mismatched cond value types")
        cases.append((cond, value))
    default = build(args[-1], scope)
    if rtype is None:
        rtype = default.rtype
    elif not default.unk and default.rtype != rtype:
        raise BuildError("mismatched cond default type")

    def fn(ctx):
        for cond, value in cases:
            c = cond.fn(ctx)
            if c is UNK:
                return UNK
            if c[1]:
                return value.fn(ctx)
        return default.fn(ctx)

    return Built(fn, rtype)


def _build_var(code, args, scope):
    """build_var: a name defined by an enclosing let, and not the one being
    defined."""
    _count(args, 1)
    name = _name(args[0])
    entry = scope.find(name)
    if entry is None:
        raise BuildError("undefined var")
    if entry[1] is None:
        raise BuildError("var used while defining it")
    cell = entry[0]
    return Built(lambda ctx: cell[0], entry[1])


def _build_let(code, args, scope):
    """build_let: [125, name1, exp1, ..., scope exp]: names start with a
    letter or '_', then letters, digits or '_', and none repeats one in scope.
    eval_let evaluates every definition first, in order."""
    if len(args) < 3:
        raise BuildError("too few args")
    if len(args) % 2 == 0:
        raise BuildError("invalid arg count")
    inner = Scope(scope)
    defs = []
    for i in range(0, len(args) - 1, 2):
        name = _name(args[i])
        text = name.decode("latin-1")
        if not text or not (text[0] == "_" or text[0].isascii() and text[0].isalpha()):
            raise BuildError("illegal variable name")
        if not all(c == "_" or c.isascii() and c.isalnum() for c in text[1:]):
            raise BuildError("illegal variable name")
        if inner.find(name) is not None:
            raise BuildError("duplicate var name")
        cell = [UNK]
        inner.cells[name] = [cell, None]
        value = build(args[i + 1], inner)
        inner.cells[name][1] = value.rtype
        defs.append((cell, value))
    body = build(args[-1], inner)

    def fn(ctx):
        for cell, value in defs:
            cell[0] = value.fn(ctx)
        return body.fn(ctx)

    return Built(fn, body.rtype, unk=body.unk)


_BUILDERS = {UNKNOWN: _build_unknown, COND: _build_cond, VAR: _build_var, LET: _build_let,
             MOD: _build_mod, ABS: _build_abs, META_DIGEST_MOD: _build_digest_mod,
             REC_KEY: _build_rec_key, BIN: _build_bin, BIN_TYPE: _build_bin_type}
_BUILDERS.update({c: _build_compare for c in (CMP_EQ, CMP_NE, CMP_GT, CMP_GE, CMP_LT, CMP_LE)})
_BUILDERS.update({c: _build_logical for c in (AND, OR, NOT, EXCLUSIVE)})
_BUILDERS.update({c: _build_math for c in (ADD, SUB, MUL, DIV, MIN, MAX)})
_BUILDERS.update({c: _build_meta for c in (
    META_DEVICE_SIZE, META_LAST_UPDATE, META_SINCE_UPDATE, META_VOID_TIME, META_TTL,
    META_SET_NAME, META_KEY_EXISTS, META_IS_TOMBSTONE, META_MEMORY_SIZE, META_RECORD_SIZE)})


# -- the ops (expop.c) -------------------------------------------------------------


def build_filter(data):
    """as_exp_filter_build: a filter expression (the FILTER field) must build
    and be boolean (check_filter_exp); raise BuildError (answer 4)."""
    tree, end = unpack(data)
    if end != len(data) or (isinstance(tree, list) and not tree):
        raise BuildError("malformed filter")
    built = build(tree)
    if built.rtype != T_BOOL:
        raise BuildError("filter is not boolean")
    return built


def matches(built, ctx):
    """as_exp_matches_record: only TRUE passes; false, unknown or another
    type filters the record out. (The server first tries the metadata alone,
    handle_meta_filter; with three-valued logic that never decides otherwise.)"""
    return built.fn(ctx) == ("bool", True)


def parse_op(value, is_modify):
    """as_exp_op_parse: return (Built, flags); raise BuildError (answer 4)."""
    tree, end = unpack(value)
    if end != len(value) or not isinstance(tree, list) or not 1 <= len(tree) <= 2:
        raise BuildError("invalid expression op")
    flags = 0
    if len(tree) == 2 and isinstance(tree[1], int) and not isinstance(tree[1], bool) \
            and tree[1] >= 0:
        flags = tree[1]
        if flags & ~(MODIFY_FLAGS if is_modify else READ_FLAGS):
            raise BuildError("invalid flags")
    exp = tree[0]
    if isinstance(exp, list) and not exp:
        raise BuildError("empty list")  # build_internal
    built = build(exp)
    if built.rtype == T_END:
        raise BuildError("no result type")  # build_set_expected_particle_type
    return built, flags


def read_op(ctx, op):
    """as_exp_read_tr: return (result code, (particle type, bytes) or None)."""
    try:
        built, flags = parse_op(op.value, False)
        value = built.fn(ctx)
    except BuildError:
        return proto.ERR_PARAMETER, None
    try:
        return proto.OK, to_bin(value)
    except ValueError:  # eval_op: the expression failed
        if flags & FLAG_EVAL_NO_FAIL:
            return proto.OK, None
        return ERR_OP_NOT_APPLICABLE, None


def modify_op(ctx, op):
    """as_exp_modify_tr, then write.c's handling of the bin: apply the op to
    ctx.bins; return a result code."""
    try:
        built, flags = parse_op(op.value, True)
    except BuildError:
        return proto.ERR_PARAMETER
    was_live = op.name in ctx.bins
    if was_live and flags & FLAG_CREATE_ONLY:
        return proto.OK if flags & FLAG_POLICY_NO_FAIL else ERR_BIN_EXISTS
    if not was_live and flags & FLAG_UPDATE_ONLY:
        return proto.OK if flags & FLAG_POLICY_NO_FAIL else ERR_BIN_NOT_FOUND
    try:
        result = to_bin(built.fn(ctx))
    except BuildError:
        return proto.ERR_PARAMETER  # a call the fixture does not evaluate
    except ValueError:
        return proto.OK if flags & FLAG_EVAL_NO_FAIL else ERR_OP_NOT_APPLICABLE
    if result is None:
        if was_live and not flags & FLAG_ALLOW_DELETE:
            # The old value is put back. expop.c then tests
            # `flags && AS_EXP_FLAG_POLICY_NO_FAIL != 0`, which is true for any
            # non-zero flags: only flags 0 answer 26.
            return proto.OK if flags else ERR_OP_NOT_APPLICABLE
        ctx.bins.pop(op.name, None)  # write.c: a created bin is dropped, a live one deleted
        return proto.OK
    ctx.bins[op.name] = result
    return proto.OK
