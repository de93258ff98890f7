"""One writer of tests/ext/test_clock_skew.py, run as its own process (under
faketime for a host whose clock is off): puts `n` chunks, a few ms apart, reads
the first again (a hit, which moves it to the head), and prints one JSON line:
each put's key, how long it took, and its error name, and the engine's counters."""

import json
import sys
import time

from lmcache_aerospike import _native


def main(hosts, namespace, set_, tag, n, ttl):
    conn = _native.Connector(hosts=hosts, namespace=namespace, set=set_,
                             default_ttl_seconds=int(ttl), records_per_void_second=10)
    puts = []
    for i in range(int(n)):
        key = f"{tag}/{i}"
        t0 = time.monotonic()
        try:
            conn.put(key, bytes([i % 251]) * 4096)
            error = None
        except _native.Error as e:
            error = e.name
        puts.append((key, time.monotonic() - t0, error))
        time.sleep(0.02)
    hit = conn.get(f"{tag}/0", bytearray(4096)) is not None
    print(json.dumps({"puts": puts, "hit": hit, "stats": conn.stats(), "now": time.time()}))
    conn.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
