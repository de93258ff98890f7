"""Aerospike wire protocol: proto framing, AS_MSG headers, fields and ops.

Everything here is pure encoding and decoding; no server state. Layouts follow
the C client (as_proto.h, as_command.c) and the server (as/src/base/proto.c):

  proto header  8 bytes, big-endian: version(1)=2 | type(1) | size(6)
  as_msg        22 bytes: header_sz, info1..info4, result_code, generation,
                record_ttl, transaction_ttl, n_fields, n_ops
  field         u32 size (= 1 + len(data)) | u8 type | data
  op            u32 size (= 4 + len(name) + len(value)) | u8 op |
                u8 particle type | u8 version | u8 name_len | name | value
"""

import socket
import struct
import zlib
from dataclasses import dataclass, field

PROTO_VERSION = 2
PROTO_SIZE_MAX = 128 * 1024 * 1024

TYPE_INFO = 1
TYPE_ADMIN = 2
TYPE_MSG = 3
TYPE_COMPRESSED = 4

MSG_HEADER_SIZE = 22

# info1
INFO1_READ = 0x01
INFO1_GET_ALL = 0x02
INFO1_SHORT_QUERY = 0x04
INFO1_BATCH = 0x08
INFO1_XDR = 0x10
INFO1_GET_NOBINDATA = 0x20
INFO1_READ_MODE_AP_ALL = 0x40
INFO1_COMPRESS_RESPONSE = 0x80

# info2
INFO2_WRITE = 0x01
INFO2_DELETE = 0x02
INFO2_GENERATION = 0x04
INFO2_GENERATION_GT = 0x08
INFO2_DURABLE_DELETE = 0x10
INFO2_CREATE_ONLY = 0x20
INFO2_RELAX_AP_LONG_QUERY = 0x40
INFO2_RESPOND_ALL_OPS = 0x80

# info3
INFO3_LAST = 0x01
INFO3_COMMIT_MASTER = 0x02
INFO3_PARTITION_DONE = 0x04
INFO3_UPDATE_ONLY = 0x08
INFO3_CREATE_OR_REPLACE = 0x10
INFO3_REPLACE_ONLY = 0x20

# Field types.
FIELD_NAMESPACE = 0
FIELD_SET = 1
FIELD_KEY = 2
FIELD_RECORD_VERSION = 3
FIELD_DIGEST = 4
FIELD_TXN_ID = 5
FIELD_TXN_DEADLINE = 6
FIELD_TASK_ID = 7
FIELD_SOCKET_TIMEOUT = 9
FIELD_RPS = 10
FIELD_PID_ARRAY = 11
FIELD_DIGEST_ARRAY = 12
FIELD_MAX_RECORDS = 13
FIELD_BVAL_ARRAY = 15
FIELD_INDEX_NAME = 21
FIELD_INDEX_RANGE = 22
FIELD_INDEX_CONTEXT = 23
FIELD_INDEX_TYPE = 26
FIELD_QUERY_BINLIST = 40
FIELD_BATCH_INDEX = 41
FIELD_BATCH_INDEX_WITH_SET = 42
FIELD_FILTER = 43

# Op codes.
OP_READ = 1
OP_WRITE = 2
OP_CDT_READ = 3
OP_CDT_MODIFY = 4
OP_INCR = 5
OP_EXP_READ = 7
OP_EXP_MODIFY = 8
OP_APPEND = 9
OP_PREPEND = 10
OP_TOUCH = 11
OP_BIT_READ = 12
OP_BIT_MODIFY = 13
OP_DELETE_ALL = 14
OP_HLL_READ = 15
OP_HLL_MODIFY = 16

# Particle types.
PT_NULL = 0
PT_INTEGER = 1
PT_DOUBLE = 2
PT_STRING = 3
PT_BLOB = 4
PT_BOOL = 17
PT_HLL = 18
PT_MAP = 19
PT_LIST = 20
PT_GEOJSON = 23

# Result codes used by the fixture (server AS_ERR_* values).
OK = 0
ERR_SERVER = 1
ERR_NOT_FOUND = 2
ERR_GENERATION = 3
ERR_PARAMETER = 4
ERR_RECORD_EXISTS = 5
ERR_SERVER_FULL = 8
ERR_RECORD_TOO_BIG = 13
ERR_TIMEOUT = 9
ERR_UNAVAILABLE = 11
ERR_KEY_BUSY = 14
ERR_DEVICE_OVERLOAD = 18
ERR_UNSUPPORTED_FEATURE = 16
ERR_KEY_MISMATCH = 19
ERR_NAMESPACE = 20
ERR_BIN_NAME = 21
ERR_FORBIDDEN = 22
ERR_INDEX_NOT_FOUND = 201

_PROTO_HDR = struct.Struct(">Q")
_MSG_HDR = struct.Struct(">BBBBBBIIIHH")
_FIELD_HDR = struct.Struct(">IB")
_OP_HDR = struct.Struct(">IBBBB")


class ProtocolError(Exception):
    """The peer sent bytes that do not form a valid message."""


@dataclass
class Op:
    op: int
    ptype: int
    name: str
    value: bytes = b""


@dataclass
class Msg:
    info1: int = 0
    info2: int = 0
    info3: int = 0
    info4: int = 0
    result: int = 0
    generation: int = 0
    record_ttl: int = 0
    txn_ttl: int = 0
    fields: list = field(default_factory=list)  # [(type, bytes)] in wire order
    ops: list = field(default_factory=list)  # [Op]

    def field(self, ftype):
        """Return the data of the first field of type `ftype`, or None."""
        for t, data in self.fields:
            if t == ftype:
                return data
        return None


# ---------------------------------------------------------------------------
# Socket helpers.


def recv_exact(sock, n):
    """Read exactly n bytes; raise EOFError if the peer closes first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("peer closed the connection")
        got += k
    return buf


def read_proto(sock):
    """Read one proto; return (type, body). Raises EOFError on a clean close."""
    (word,) = _PROTO_HDR.unpack(recv_exact(sock, 8))
    version = word >> 56
    ptype = (word >> 48) & 0xFF
    size = word & 0xFFFFFFFFFFFF
    if version != PROTO_VERSION:
        raise ProtocolError("bad proto version %d" % version)
    if size > PROTO_SIZE_MAX:
        raise ProtocolError("proto size %d above limit" % size)
    return ptype, recv_exact(sock, size) if size else bytearray()


def proto_header(ptype, size):
    return _PROTO_HDR.pack((PROTO_VERSION << 56) | (ptype << 48) | size)


def pack_proto(ptype, body):
    return proto_header(ptype, len(body)) + body


def close_hard(sock):
    """Close a connection at once, without waiting for the peer."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


# ---------------------------------------------------------------------------
# Compression (proto type 4).


def decompress_proto(body):
    """Unwrap a compressed proto: u64 BE inner size + zlib(inner proto)."""
    if len(body) < 8:
        raise ProtocolError("compressed proto too short")
    (inner_size,) = _PROTO_HDR.unpack_from(body, 0)
    if inner_size > PROTO_SIZE_MAX + 8:
        raise ProtocolError("compressed inner size too large")
    try:
        inner = zlib.decompress(memoryview(body)[8:])
    except zlib.error as exc:
        raise ProtocolError("bad zlib stream: %s" % exc) from None
    if len(inner) != inner_size or inner_size < 8:
        raise ProtocolError("compressed size mismatch")
    (word,) = _PROTO_HDR.unpack_from(inner, 0)
    if word >> 56 != PROTO_VERSION:
        raise ProtocolError("bad inner proto version")
    return (word >> 48) & 0xFF, bytearray(memoryview(inner)[8:])


def compress_proto(proto_bytes):
    """Wrap a complete type-3 proto (header included) into a type-4 proto."""
    payload = struct.pack(">Q", len(proto_bytes)) + zlib.compress(proto_bytes, 1)
    return pack_proto(TYPE_COMPRESSED, payload)


# ---------------------------------------------------------------------------
# AS_MSG decoding.


def parse_fields(buf, pos, n_fields, end):
    fields = []
    for _ in range(n_fields):
        if pos + 5 > end:
            raise ProtocolError("truncated field header")
        size, ftype = _FIELD_HDR.unpack_from(buf, pos)
        if size < 1 or pos + 4 + size > end:
            raise ProtocolError("bad field size %d" % size)
        fields.append((ftype, bytes(buf[pos + 5 : pos + 4 + size])))
        pos += 4 + size
    return fields, pos


def parse_ops(buf, pos, n_ops, end):
    ops = []
    for _ in range(n_ops):
        if pos + 8 > end:
            raise ProtocolError("truncated op header")
        size, opcode, ptype, _version, name_len = _OP_HDR.unpack_from(buf, pos)
        if size < 4 + name_len or pos + 4 + size > end:
            raise ProtocolError("bad op size %d" % size)
        name_at = pos + 8
        value_at = name_at + name_len
        name = bytes(buf[name_at:value_at]).decode("utf-8", "replace")
        value = bytes(memoryview(buf)[value_at : pos + 4 + size])
        ops.append(Op(opcode, ptype, name, value))
        pos += 4 + size
    return ops, pos


def parse_msg(buf, pos=0, end=None):
    """Decode one as_msg starting at `pos`; return (Msg, position after it)."""
    end = len(buf) if end is None else end
    if pos + MSG_HEADER_SIZE > end:
        raise ProtocolError("truncated as_msg header")
    (hsz, i1, i2, i3, i4, rc, gen, ttl, tttl, n_fields, n_ops) = _MSG_HDR.unpack_from(
        buf, pos
    )
    if hsz != MSG_HEADER_SIZE:
        raise ProtocolError("bad as_msg header size %d" % hsz)
    pos += MSG_HEADER_SIZE
    fields, pos = parse_fields(buf, pos, n_fields, end)
    ops, pos = parse_ops(buf, pos, n_ops, end)
    msg = Msg(i1, i2, i3, i4, rc, gen, ttl, tttl, fields, ops)
    return msg, pos


# ---------------------------------------------------------------------------
# AS_MSG encoding.


def encode_field(ftype, data):
    return _FIELD_HDR.pack(len(data) + 1, ftype) + data


def encode_op(op):
    name = op.name.encode()
    return _OP_HDR.pack(4 + len(name) + len(op.value), op.op, op.ptype, 0, len(name)) + name


def encode_msg(msg):
    """Encode a Msg (header, fields, ops) as a list of byte chunks.

    Op values are kept as separate chunks so multi-MiB blobs are copied only
    once, when the caller joins the chunks.
    """
    chunks = [
        _MSG_HDR.pack(
            MSG_HEADER_SIZE,
            msg.info1,
            msg.info2,
            msg.info3,
            msg.info4,
            msg.result,
            msg.generation & 0xFFFFFFFF,
            msg.record_ttl & 0xFFFFFFFF,
            msg.txn_ttl & 0xFFFFFFFF,
            len(msg.fields),
            len(msg.ops),
        )
    ]
    for ftype, data in msg.fields:
        chunks.append(encode_field(ftype, data))
    for op in msg.ops:
        chunks.append(encode_op(op))
        if op.value:
            chunks.append(op.value)
    return chunks


# ---------------------------------------------------------------------------
# Small helpers shared by the handlers.


def partition_id(digest):
    """Partition of a 20-byte digest (as_partition_getid)."""
    return (digest[0] | (digest[1] << 8)) & 4095


def uintvar_size(n):
    """Bytes used by the server's uintvar encoding (7 bits per byte)."""
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size
