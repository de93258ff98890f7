#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz harnesses (stdlib only).

    python3 tests/fuzz/make_corpus.py      # rewrites tests/fuzz/corpus/{meta,info,message}/

corpus/meta/ holds inputs of fuzz_meta.c: records as a server could return
them, valid ones (so the fuzzer starts from records the decoder accepts) and
the hostile shapes the decoder must turn into misses. corpus/info/ holds
answers to info "namespace/<ns>" for fuzz_info.c: captured real ones (the same
as tests/c/test_limits.c) and malformed ones. corpus/message/ holds response
messages for fuzz_message.c (a mode byte, then the socket's bytes).

The fuzz_meta input format (fuzz_meta.c's header comment is the reference):

    header, 5 bytes
      0  meta read's payload bin: bit0 asked for, bit1 found, bit2 blob,
         bits3-4 length mode (0 = tot_b as decoded, 1 = +1, 2 = -1,
         3 = VALUES[byte 1]), bit5 = the md copy's malloc fails
      1  VALUES index for length mode 3
      2  segment read: bits0-1 result (0/1 OK, 2 MISS, 3 ETIMEOUT), bit2 found,
         bit3 blob, bits4-5 length mode against the segment's length
      3  segment index: bit7 = the last one, else (byte & 0x7f) % nseg
      4  VALUES index for the segment's length mode 3
    then bins:
      name byte  < 0xF0: NAMES[byte % len(NAMES)]; 0xF0 | n: n literal bytes follow
      type byte  (byte & 3) + 1 = INT, STR, BLOB, OTHER; sel = byte >> 2
        INT      sel < len(VALUES): VALUES[sel]; else an int64, 8 bytes LE, follows
        STR/BLOB length byte L: L < 0xF0: L bytes follow; else BIG_LENS[L & 15] zeros
        OTHER    nothing

The seeds write every integer in full (sel 63) and name unknown bins
literally, so they depend on no table of the harness but NAMES' schema part,
which is checked against fuzz_meta.c below.

Segment checks run against the decoded meta record when it is valid and has
segments, else against a fixed one: nseg 3, seg_b 4096, tot_b 10000, wid WID.
"""
import pathlib
import re
import struct
import sys
import zlib

HERE = pathlib.Path(__file__).resolve().parent

# fuzz_meta.c's NAMES, schema part: the index of a name is its byte.
NAMES = ["ver", "state", "nseg", "seg_b", "tot_b", "wid", "created_at", "pin", "crc32",
         "serde", "ttl_class", "md", "b"]
WID = 0x5A17E3C0FFEE1D01  # fuzz_meta.c's WID_MAGIC
INT, STR, BLOB, OTHER = 0, 1, 2, 3
RAW = 63 << 2  # sel 63: the integer follows in full
MIB = 1024 * 1024


def header(asked=False, found=False, blob=False, meta_len=0, fail_md=False,
           seg_result=0, seg_found=True, seg_blob=True, seg_len=0, seg_index=0x80):
    """The 5 header bytes; lengths are modes 0 (exact), 1 (+1), 2 (-1)."""
    meta = asked | found << 1 | blob << 2 | meta_len << 3 | fail_md << 5
    seg = seg_result | seg_found << 2 | seg_blob << 3 | seg_len << 4
    return bytes([meta, 0, seg, seg_index, 0])


def name(n):
    if n in NAMES:
        return bytes([NAMES.index(n)])
    raw = n.encode()
    assert len(raw) <= 15
    return bytes([0xF0 | len(raw)]) + raw


def i(n, v):
    return name(n) + bytes([INT | RAW]) + struct.pack("<q", v)


def s(n, v):
    raw = v.encode() if isinstance(v, str) else v
    assert len(raw) < 0xF0
    return name(n) + bytes([STR, len(raw)]) + raw


def blob(n, v):
    assert len(v) < 0xF0
    return name(n) + bytes([BLOB, len(v)]) + v


def big_blob(n, index):
    """A blob of BIG_LENS[index] zero bytes (12 = 8193, one over LMCA_MD_MAX)."""
    return name(n) + bytes([BLOB, 0xF0 | index])


def other(n):
    return name(n) + bytes([OTHER])


def meta(nseg, seg_b, tot_b, wid=WID, state="ready", ver=2, extra=b"", skip=()):
    """The bins of a meta record as lmca__meta_bins writes them."""
    bins = {
        "ver": i("ver", ver), "state": s("state", state), "nseg": i("nseg", nseg),
        "seg_b": i("seg_b", seg_b), "tot_b": i("tot_b", tot_b), "wid": i("wid", wid),
        "created_at": i("created_at", 1700000000), "pin": i("pin", 0),
    }
    return b"".join(v for k, v in bins.items() if k not in skip) + extra


TAGS = s("serde", "naive") + s("ttl_class", "session") + blob("md", b"\x80\x04meta" * 4)
SINGLE = header(asked=True, found=True, blob=True)  # the payload: a blob of tot_b bytes
SEGMENTED = header(asked=True)  # no payload bin next to segments
THREE = (3, 4 * MIB - 64 * 1024, 3 * (4 * MIB - 64 * 1024) - 12345)

META_SEEDS = {
    # valid
    "single_ok": SINGLE + meta(1, 1000, 1000, extra=TAGS + i("crc32", 0x1234ABCD)),
    "single_ok_stat": header() + meta(1, 1000, 1000, extra=TAGS),  # stat: payload not asked
    "single_ok_inline_b": header(asked=True) + meta(1, 3, 3) + blob("b", b"abc"),
    "single_empty_ok": SINGLE + meta(1, 0, 0),
    "three_seg_ok": SEGMENTED + meta(*THREE, extra=TAGS),
    "max_seg_ok": SEGMENTED + meta(65535, 8 * MIB, 65535 * 8 * MIB),
    "md_alloc_fails": header(asked=True, found=True, blob=True, fail_md=True)
    + meta(1, 10, 10, extra=TAGS),
    # segments, judged against the fixed meta record (nseg 3, seg_b 4096, tot_b 10000)
    "seg_ok": header(seg_index=0) + i("wid", WID),
    "seg_ok_last": header(seg_index=0x80) + i("wid", WID),
    "seg_ok_crc": header(seg_index=0) + i("wid", WID)
    + i("crc32", zlib.crc32(bytes(4096))),
    "seg_bad_crc": header(seg_index=0) + i("wid", WID) + i("crc32", 1),
    "seg_other_write": header(seg_index=0) + i("wid", WID + 1),
    "seg_short": header(seg_index=0, seg_len=2) + i("wid", WID),
    "seg_long": header(seg_index=0, seg_len=1) + i("wid", WID),
    "seg_not_blob": header(seg_index=1, seg_blob=False) + i("wid", WID),
    "seg_missing": header(seg_result=2) + i("wid", WID),
    "seg_timeout": header(seg_result=3) + i("wid", WID),
    "seg_no_wid": header(seg_index=0) + i("crc32", 0),
    "seg_inline_b": header(seg_index=0x80) + i("wid", WID) + blob("b", bytes(200)),
    # hostile meta records
    "nseg_0": SEGMENTED + meta(0, 4096, 0),
    "nseg_65536": SEGMENTED + meta(65536, 8 * MIB, 65536 * 8 * MIB),
    "tot_b_too_big": SEGMENTED + meta(3, 4096, 3 * 4096 + 1),
    "tot_b_too_small": SEGMENTED + meta(3, 4096, 2 * 4096),
    "seg_b_0": SEGMENTED + meta(3, 0, 0),
    "seg_b_over_8m": SEGMENTED + meta(2, 8 * MIB + 1, 16 * MIB),
    "tot_b_int64_min": SEGMENTED + meta(3, 4096, -(2**63)),
    "single_size_mismatch": SINGLE + meta(1, 1000, 1001),
    "single_payload_short": header(asked=True, found=True, blob=True, meta_len=2)
    + meta(1, 1000, 1000),
    "single_payload_missing": header(asked=True) + meta(1, 1000, 1000),
    "single_payload_not_blob": header(asked=True, found=True) + meta(1, 1000, 1000),
    "segments_with_payload": header(asked=True, found=True, blob=True) + meta(*THREE),
    "wid_0": SINGLE + meta(1, 10, 10, wid=0),
    "ver_1": SINGLE + meta(1, 10, 10, ver=1),
    "ver_256": SINGLE + meta(1, 10, 10, ver=256),
    "state_partial": SINGLE + meta(1, 10, 10, state="partial"),
    "state_tombstone": SINGLE + meta(1, 10, 10, state="tombstone"),
    "state_junk": SINGLE + meta(1, 10, 10, state="ready\0"),
    "state_long": SINGLE + meta(1, 10, 10, state="r" * 200),
    "missing_wid": SINGLE + meta(1, 10, 10, skip=("wid",)),
    "missing_everything": SINGLE,
    "nseg_is_string": SINGLE + meta(1, 10, 10, skip=("nseg",), extra=s("nseg", "1")),
    "state_is_int": SINGLE + meta(1, 10, 10, skip=("state",), extra=i("state", 1)),
    "md_is_string": SINGLE + meta(1, 10, 10, extra=s("md", "x")),
    "ver_is_other": SINGLE + meta(1, 10, 10, skip=("ver",), extra=other("ver")),
    "md_too_long": SINGLE + meta(1, 10, 10, extra=big_blob("md", 12)),
    "md_empty": SINGLE + meta(1, 10, 10, extra=blob("md", b"")),
    "serde_64": SINGLE + meta(1, 10, 10, extra=s("serde", "s" * 64)),
    "pin_2": SINGLE + meta(1, 10, 10, skip=("pin",), extra=i("pin", 2)),
    "crc32_negative": SINGLE + meta(1, 10, 10, extra=i("crc32", -1)),
    "duplicate_wid": SINGLE + meta(1, 10, 10, extra=i("wid", WID + 1)),
    "duplicate_md": SINGLE + meta(1, 10, 10, extra=blob("md", b"a") + blob("md", b"b")),
    "unknown_bin": SINGLE + meta(1, 10, 10, extra=i("x", 1)),
    "unknown_long_name": SINGLE + meta(1, 10, 10, extra=s("created_at_more", "?")),
    "empty_name": SINGLE + meta(1, 10, 10, extra=i("", 0)),
    "b_not_asked": header() + meta(1, 3, 3) + blob("b", b"abc"),
}

# Captured answers (tests/c/test_limits.c) and malformed ones.
INFO_81_MEMORY = (
    "namespace/lmcache\t"
    "ns_cluster_size=1;effective_replication_factor=1;objects=0;tombstones=0;"
    "xdr_tombstones=0;master_objects=0;prole_objects=0;non_replica_objects=0;"
    "dead_partitions=0;unavailable_partitions=0;clock_skew_stop_writes=false;"
    "stop_writes=false;hwm_breached=false;current_time=479000000;"
    "data_used_bytes=0;data_total_bytes=2147483648;data_avail_pct=100;"
    "index_used_bytes=0;client_write_success=0;"
    "allow-ttl-without-nsup=false;auto-revive=false;conflict-resolution-policy=generation;"
    "default-read-touch-ttl-pct=0;default-ttl=0;disable-cold-start-eviction=false;"
    "enable-benchmarks-write=false;evict-hist-buckets=10000;evict-tenths-pct=5;"
    "ignore-migrate-fill-delay=false;index-stage-size=1073741824;max-record-size=8388608;"
    "migrate-order=5;nsup-hist-period=3600;nsup-period=120;nsup-threads=1;"
    "read-consistency-level-override=off;replication-factor=1;sindex-stage-size=1073741824;"
    "single-scan-threads=4;stop-writes-sys-memory-pct=90;strong-consistency=false;"
    "transaction-pending-limit=20;truncate-threads=4;write-commit-level-override=off;"
    "storage-engine=memory;storage-engine.data-size=2147483648;"
    "storage-engine.defrag-lwm-pct=50;storage-engine.evict-used-pct=0;"
    "storage-engine.stop-writes-avail-pct=5;storage-engine.stop-writes-used-pct=70\n")
INFO_71_DEVICE = (
    "namespace/lmcache\tns_cluster_size=3;objects=1200;stop_writes=false;"
    "allow-ttl-without-nsup=false;default-ttl=2592000;max-record-size=1048576;"
    "nsup-period=60;replication-factor=2;storage-engine=device;"
    "storage-engine.device[0]=/dev/nvme0n1;storage-engine.flush-max-ms=1000;"
    "storage-engine.flush-size=1048576;storage-engine.max-write-cache=67108864\n")
INFO_70_DEVICE = (
    "ns_cluster_size=1;objects=5;allow-ttl-without-nsup=true;default-ttl=0;"
    "max-record-size=0;nsup-period=0;storage-engine=device;"
    "storage-engine.file[0]=/opt/aerospike/data/lmcache.dat;"
    "storage-engine.write-block-size=1048576;storage-engine.post-write-queue=256")
INFO_6X = ("namespace/lmcache\tobjects=0;type=device;default-ttl=86400;max-record-size=0;"
           "nsup-period=120;write-block-size=131072;allow-ttl-without-nsup=false;\n")


def overrides(ttl_mode, target=0, max_=0, min_=0, single=0):
    """fuzz_info's config overrides, after the answer's NUL."""
    return b"\0" + bytes([ttl_mode]) + struct.pack("<4I", target, max_, min_, single)


INFO_SEEDS = {
    "ce81_memory": INFO_81_MEMORY,
    "ee71_device": INFO_71_DEVICE,
    "ce70_device": INFO_70_DEVICE,
    "ce6x_unprefixed_wbs": INFO_6X,
    "ce70_both_reported": "max-record-size=4194304;storage-engine.write-block-size=1048576;"
                          "nsup-period=1",
    "ce70_nsup_0_ttl": "storage-engine.write-block-size=1048576;nsup-period=0;"
                       "allow-ttl-without-nsup=false",
    "ce81_overrides": INFO_81_MEMORY.encode() + overrides(2, 1 * MIB, 2 * MIB, 64 * 1024, 512 * 1024),
    "ce81_min_above_target": INFO_81_MEMORY.encode() + overrides(0, 128 * 1024, 0, 4 * MIB),
    "unknown_namespace": "namespace/nope\ttype=unknown\n",
    "error_answer": "ERROR:4:namespace not found",
    "fail_answer": "FAIL:1",
    "empty_answer": "namespace/lmcache\t\n",
    "not_a_number": "max-record-size=abc",
    "suffixed_number": "objects=1;storage-engine.write-block-size=1M;nsup-period=1",
    "empty_value": "max-record-size=",
    "negative_size": "max-record-size=-1048576",
    "negative_wbs": "write-block-size=-1",
    "overflowing_size": "max-record-size=99999999999999999999",
    "cap_16m": "max-record-size=16777216;nsup-period=1",
    "cap_64k": "max-record-size=65536;nsup-period=1",
    "wbs_16m": "write-block-size=16777216",
    "no_cap": "objects=0;storage-engine=memory",
    "lookalike_keys": "xmax-record-size=5;max-record-size-foo=1;max-record-size=2097152",
    "separators_only": ";;;=;==;\t;\n",
}


# --- fuzz_message: response messages as a server sends them -----------------

def mode(record=True, alloc=False, payload=True, cap=5):
    return bytes([record | alloc << 1 | payload << 2 | cap << 3])


def op(bin_name, particle, value):
    nm = bin_name.encode()
    return struct.pack(">IBBBB", 4 + len(nm) + len(value), 1, particle, 0, len(nm)) + nm + value


def message(ops=(), result=0, fields=(), void_time=0, version=2, kind=3, extra=b""):
    fs = b"".join(struct.pack(">IB", len(f) + 1, 0) + f for f in fields)
    body = struct.pack(">BBBBBBIIIHH", 22, 0, 0, 0, 0, result, 1, void_time, 0,
                       len(fields), len(ops)) + fs + b"".join(ops) + extra
    return struct.pack(">Q", version << 56 | kind << 48 | len(body)) + body


def meta_ops(payload=b"x" * 100):
    return [op("ver", 1, struct.pack(">q", 2)), op("nseg", 1, struct.pack(">q", 1)),
            op("state", 3, b"ready"), op("ok", 17, b"\x01"), op("d", 2, b"\0" * 8),
            op("b", 4, payload)]


MESSAGE_SEEDS = {
    "write_ok": mode(record=False) + message(),
    "write_full": mode(record=False) + message(result=8),
    "write_detail_field": mode(record=False) + message(result=22, fields=[b"refused"]),
    "meta_inline": mode() + message(meta_ops(), void_time=12345),
    "segment_big": mode(cap=7) + message([op("b", 4, bytes(range(256)) * 200),
                                          op("wid", 1, struct.pack(">q", 7))]),
    "segment_alloc": mode(alloc=True) + message([op("b", 4, b"y" * 9000)]),
    "payload_too_big": mode(cap=2) + message([op("b", 4, b"z" * 40)]),
    # A repeated payload bin, the larger second: it once overran an allocated
    # destination's length (the fuzzer found it).
    "payload_twice": mode(alloc=True) + message([op("b", 4, b"1" * 40), op("b", 4, b"2" * 90)]),
    "payload_string": mode() + message([op("b", 3, b"not a blob")]),
    "no_payload_asked": mode(payload=False) + message(meta_ops()),
    "not_found": mode() + message(result=2),
    "cut_short": mode() + message(meta_ops())[:-30],
    "trailing_bytes": mode() + message(meta_ops(), extra=b"junk"),
    "op_shorter_than_name": mode() + message([struct.pack(">IBBBB", 2, 1, 4, 0, 5) + b"bbbbb"]),
    "compressed": mode() + message(meta_ops(), kind=4),
    "version_1": mode() + message(meta_ops(), version=1),
    "huge_size": mode() + struct.pack(">Q", 2 << 56 | 3 << 48 | (1 << 40)) + b"\0" * 22,
}


def check_names():
    """NAMES must match fuzz_meta.c, or every seed decodes to other bins."""
    src = (HERE / "fuzz_meta.c").read_text()
    body = re.search(r"NAMES\[\] = \{(.*?)\};", src, re.S).group(1)
    c_names = re.findall(r'"([^"]*)"', body)
    if c_names[:len(NAMES)] != NAMES:
        sys.exit(f"make_corpus.py: NAMES differ from fuzz_meta.c: {c_names}")


def write(kind, seeds):
    out = HERE / "corpus" / kind
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    for seed, data in seeds.items():
        (out / seed).write_bytes(data.encode() if isinstance(data, str) else data)
    print(f"{len(seeds)} seeds in {out.relative_to(HERE.parent.parent)}")


if __name__ == "__main__":
    check_names()
    write("meta", META_SEEDS)
    write("info", INFO_SEEDS)
    write("message", MESSAGE_SEEDS)
