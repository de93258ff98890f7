"""Throughput of the asynchronous connector (lmcache_aerospike._native) for
batches of 4 MiB chunks, next to the blocking engine calls on one thread, in one
run (a benchmark, not a test).

    python bench/bench_native.py [--hosts H] [--chunks N] [--batch B] [--workers W]

Hosts default to AEROSPIKE_TEST_HOSTS. GB/s is 1e9 bytes per second; the best of
`--rounds` rounds counts, rounds alternating which path goes first.
"""

import argparse
import os
import select
import time
import uuid

from lmcache_aerospike import _native


def wait_all(c, ids):
    pending, failed = set(ids), 0
    while pending:
        select.select([c.event_fd()], [], [], 60)
        for fid, ok, error, results in c.drain_completions():
            pending.discard(fid)
            failed += (not ok) + results.count(False)
    return failed


def batched(c, op, keys, bufs, batch):
    t0 = time.perf_counter()
    ids = [op(keys[i:i + batch], bufs[i:i + batch]) for i in range(0, len(keys), batch)]
    failed = wait_all(c, ids)
    return time.perf_counter() - t0, failed


def blocking(c, op, keys, bufs):
    t0 = time.perf_counter()
    failed = 0
    for k, b in zip(keys, bufs):
        failed += op(k, b) is False
    return time.perf_counter() - t0, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default=os.environ.get("AEROSPIKE_TEST_HOSTS"))
    ap.add_argument("--namespace", default="lmcache")
    ap.add_argument("--chunk", type=int, default=4 << 20)
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target-segment-bytes", type=int, default=0,
                    help="the engine setting (0: its default), to compare chunk layouts")
    a = ap.parse_args()
    if not a.hosts:
        ap.error("give --hosts or set AEROSPIKE_TEST_HOSTS")
    c = _native.Connector(hosts=a.hosts, namespace=a.namespace, set="bench",
                          default_ttl_seconds=600, num_workers=a.workers,
                          **({"target_segment_bytes": a.target_segment_bytes}
                             if a.target_segment_bytes else {}))
    run = uuid.uuid4().hex[:8]
    keys = [f"bench@{run}@{i:06x}" for i in range(a.chunks)]
    src = [os.urandom(a.chunk) for _ in keys]
    dst = [bytearray(a.chunk) for _ in keys]
    total = a.chunk * a.chunks
    best = {}

    def note(name, seconds, failed):
        if failed:
            print(f"  {name}: {failed} failures")
        best[name] = max(best.get(name, 0), total / seconds / 1e9)

    for r in range(a.rounds):
        paths = ["batch", "blocking"] if r % 2 == 0 else ["blocking", "batch"]
        for path in paths:
            if path == "batch":
                note("batch set", *batched(c, c.submit_batch_set, keys, src, a.batch))
                note("batch get", *batched(c, c.submit_batch_get, keys, dst, a.batch))
            else:
                note("blocking put", *blocking(c, c.put, keys, src))
                note("blocking get", *blocking(c, lambda k, b: c.get(k, b) is not None, keys, dst))
    assert all(bytes(d) == s for d, s in zip(dst, src)), "read back other bytes"
    print(f"{a.chunks} x {a.chunk} B chunks (segments: {c.plan(a.chunk)}), "
          f"batches of {a.batch}, {a.workers} workers, "
          f"{a.hosts}/{a.namespace}, best of {a.rounds}")
    print(f"  set: batch {best['batch set']:.3f} GB/s, blocking {best['blocking put']:.3f} GB/s, "
          f"ratio {best['batch set'] / best['blocking put']:.2f}")
    print(f"  get: batch {best['batch get']:.3f} GB/s, blocking {best['blocking get']:.3f} GB/s, "
          f"ratio {best['batch get'] / best['blocking get']:.2f}")
    wait_all(c, [c.submit_batch_delete(keys)])  # leave the namespace as it was
    c.close()


if __name__ == "__main__":
    main()
