"""The disk's own speed, read and written directly (O_DIRECT), for the scale
benchmark to set the cache's figures beside (a benchmark's helper, not a test).

A device namespace with `direct-files true` opens its files O_DIRECT | O_DSYNC
(as/src/storage/drv_ssd.c) and writes whole write blocks of 8 MiB; a hit is a
pread of the record. So the baseline is a file on the same disk: its direct write
bandwidth in 8 MiB blocks (with O_DSYNC, as the server writes, and without), and
random O_DIRECT preads of a chunk's size at offsets spread over the file, timed
one at a time. Nothing here goes through the page cache, so the file may be
smaller than RAM.

    python bench/cache/device_direct.py --dir /var/tmp --file-size 4G --sizes 256K,1M,4M
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import statistics
import time

BLOCK = 8 << 20  # the server's write block
ALIGN = 4096


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50, p95, p99 and max of `samples` (seconds), in ms."""
    s = sorted(samples)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000  # noqa: E731
    return {"p50_ms": round(at(0.50), 3), "p95_ms": round(at(0.95), 3),
            "p99_ms": round(at(0.99), 3), "max_ms": round(s[-1] * 1000, 3),
            "mean_ms": round(statistics.fmean(s) * 1000, 3), "n": len(s)}


class DirectFile:
    """A file on the disk under test, opened O_DIRECT, with page-aligned buffers
    (mmap's memory is page-aligned, as O_DIRECT requires)."""

    def __init__(self, path: str, size: int):
        self.path, self.size = path, size // BLOCK * BLOCK
        self.buf = mmap.mmap(-1, BLOCK)
        self.buf.write(os.urandom(1 << 20) * (BLOCK >> 20))

    def write(self, dsync: bool) -> float:
        """Writes the whole file in 8 MiB blocks; bytes a second."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_DIRECT | (os.O_DSYNC if dsync else 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            t0 = time.monotonic()
            for off in range(0, self.size, BLOCK):
                os.pwrite(fd, self.buf, off)
            return self.size / (time.monotonic() - t0)
        finally:
            os.close(fd)

    def reads(self, nbytes: int, count: int, rng: random.Random) -> list[float]:
        """`count` preads of `nbytes` at random aligned offsets; each one's time."""
        nbytes = -(-nbytes // ALIGN) * ALIGN
        view = memoryview(self.buf)[:nbytes]
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
        try:
            times = []
            for _ in range(count):
                off = rng.randrange(0, (self.size - nbytes) // ALIGN) * ALIGN
                t0 = time.perf_counter()
                os.preadv(fd, [view], off)
                times.append(time.perf_counter() - t0)
            return times
        finally:
            os.close(fd)

    def remove(self) -> None:
        os.unlink(self.path)


def measure(directory: str, file_size: int, sizes: list[int], count: int,
            seed: int = 1) -> dict:
    """The disk's direct write bandwidth (8 MiB blocks, with and without O_DSYNC)
    and the latency of a random direct read of each size."""
    f = DirectFile(os.path.join(directory, f"device-direct-{os.getpid()}.dat"), file_size)
    try:
        out = {"file_bytes": f.size, "write_dsync_Bps": f.write(dsync=True),
               "write_Bps": f.write(dsync=False), "reads": {}}
        rng = random.Random(seed)
        for n in sizes:
            out["reads"][str(n)] = percentiles(f.reads(n, count, rng))
        return out
    finally:
        f.remove()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default="/var/tmp", help="a directory on the disk under test")
    p.add_argument("--file-size", default="4G")
    p.add_argument("--sizes", default="256K,1M,4M")
    p.add_argument("--count", type=int, default=400, help="reads of each size")
    a = p.parse_args()
    print(json.dumps(measure(a.dir, parse_size(a.file_size),
                             [parse_size(s) for s in a.sizes.split(",")], a.count), indent=2))


if __name__ == "__main__":
    main()
