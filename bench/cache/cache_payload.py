"""Chunk payloads that bench/cache/cache_bench.py can check byte for byte without keeping them.

A chunk's bytes are a function of (run nonce, key): a 64-byte block from blake2b of the
two, repeated, with each block's index XORed into its first 8 bytes. So

- a chunk of another key differs in every block (another digest),
- a segment read at the wrong offset, or two segments swapped, differ in the index,
- a chunk left by an earlier run (same key, other nonce) differs in every block,

while filling or checking one costs a few numpy passes over the chunk (about 0.3 ms
per 4 MiB; numpy releases the GIL there, so several writer threads check in parallel).
"""

import hashlib
import threading

import numpy as np

BLOCK = 64  # bytes; a chunk is a whole number of blocks
TILE = 4096  # blocks copied at once: a 256 KiB tile stays in cache


class Payloads:
    def __init__(self, chunk_bytes, nonce=b""):
        if chunk_bytes <= 0 or chunk_bytes % BLOCK:
            raise ValueError(f"chunk size {chunk_bytes} is not a positive multiple of {BLOCK}")
        self.chunk_bytes = chunk_bytes
        self.nonce = nonce
        self.blocks = chunk_bytes // BLOCK
        self.index = np.arange(self.blocks, dtype=np.uint64)
        # Per thread: two tiles, reused (a fresh 256 KiB array is a fresh mmap, and its
        # page faults cost more than the work).
        self.local = threading.local()

    def buffer(self):
        """A chunk-sized buffer to fill, or to read into."""
        return np.empty(self.chunk_bytes, dtype=np.uint8)

    def _tiles(self, key):
        """(TILE rows, or fewer, of the key's 64-byte block as uint64 rows of 8,
        a scratch tile of the same shape), both this thread's."""
        local = self.local
        if not hasattr(local, "tile"):
            shape = (min(TILE, self.blocks), BLOCK // 8)
            local.tile, local.scratch = np.empty(shape, np.uint64), np.empty(shape, np.uint64)
        digest = hashlib.blake2b(key.encode(), digest_size=BLOCK, key=self.nonce[:64]).digest()
        local.tile[:] = np.frombuffer(digest, dtype=np.uint64)
        return local.tile, local.scratch

    def _slabs(self):
        """Row ranges of at most TILE blocks: working slab by slab keeps the passes
        (copy, index XOR, compare) in the CPU cache, about 3x faster at 32 MiB."""
        for r0 in range(0, self.blocks, TILE):
            yield r0, min(r0 + TILE, self.blocks)

    def fill(self, key, out):
        """Writes the key's payload into `out` (a buffer() array) and returns it."""
        rows, (tile, _) = _rows(out), self._tiles(key)
        for r0, r1 in self._slabs():
            rows[r0:r1] = tile[:r1 - r0]
            rows[r0:r1, 0] ^= self.index[r0:r1]
        return out

    def wrong_bytes(self, key, got):
        """How many bytes of `got` (a chunk-sized uint8 array) differ from the key's
        payload: 0 when intact."""
        rows, (tile, expected) = _rows(got), self._tiles(key)
        wrong = 0
        for r0, r1 in self._slabs():
            want = expected[:r1 - r0]
            want[:] = tile[:r1 - r0]
            want[:, 0] ^= self.index[r0:r1]
            if not np.array_equal(rows[r0:r1], want):
                wrong += int(np.count_nonzero(rows[r0:r1].view(np.uint8) != want.view(np.uint8)))
        return wrong


def _rows(buf):
    return buf.view(np.uint64).reshape(-1, BLOCK // 8)
