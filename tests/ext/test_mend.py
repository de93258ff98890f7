"""A namespace whose NSUP stopped evicting is mended, not left full for a TTL
(src/engine/mend.c).

A writer off the shared clock (shared_clock false, no limit per second: what an
older client does) puts a burst into one second of void time, twice NSUP's
per-cycle target, and then a writer on the shared clock offers five times the
capacity, and two more after the mend. NSUP refuses every cycle while that second
is the lowest; the engine sees evictions stall past evict-used-pct, removes the
lowest second's records, and the namespace takes stores again and keeps the newest.
"""

import time
import uuid

from lmcache_aerospike import _native
from tests.ext.test_cache_full import NS, cache, ns_info, payload  # noqa: F401 (a fixture)


def test_a_second_nsup_refuses_is_removed_and_stores_go_on(cache):  # noqa: F811
    hosts, capacity, size = cache
    tag = uuid.uuid4().hex[:10]
    common = dict(hosts=hosts, namespace=NS, set="lmca_mend_" + tag, default_ttl_seconds=3600)
    # NSUP's target once the namespace holds chunks of this size.
    target = capacity // size * int(ns_info(hosts)["evict-tenths-pct"]) // 1000
    # The burst: due at now + TTL, every record in one second.
    old = _native.Connector(**{**common, "shared_clock": False, "records_per_void_second": 1000000})
    burst = [f"{tag}/burst/{i}" for i in range(min(2 * target + 2, capacity // size))]
    for key in burst:
        old.put(key, payload(tag, key, size))
    old.close()

    conn = _native.Connector(**{**common, "default_ttl_seconds": 7200})
    # Five capacities, and at least two more after the first mend (the stall lasts
    # 8 to 16 s); bounded in time all the same.
    n, per_capacity = 5 * capacity // size, capacity // size
    landed, mended_at, deadline = [], None, time.monotonic() + 300
    i = 0
    while (i < n or mended_at is None or i < mended_at + 2 * per_capacity) and \
            time.monotonic() < deadline:
        key = f"{tag}/{i}"
        try:
            conn.put(key, payload(tag, key, size))
            landed.append(True)
        except _native.Error:
            landed.append(False)
        if mended_at is None and conn.stats()["mends"] > 0:
            mended_at = i
        i += 1
    n = i
    stats = conn.stats()
    buf = bytearray(size)
    reader = _native.Connector(**{**common, "touch_on_hit": False})
    alive = [reader.get(f"{tag}/{i}", buf) is not None for i in range(n - per_capacity // 5, n)]
    burst_left = sum(reader.get(key, buf) is not None for key in burst)
    reader.close()
    for i in range(n):
        conn.remove(f"{tag}/{i}")
    for key in burst:
        conn.remove(key)
    conn.close()

    assert stats["mends"] >= 1 and stats["mended_records"] >= len(burst) // 2, \
        (stats, sum(landed), n, target, len(burst))
    assert burst_left == 0
    assert sum(landed[-per_capacity:]) / per_capacity >= 0.95, stats
    assert sum(alive) / len(alive) >= 0.95
