"""Writers on hosts whose wall clocks are off share one eviction order on the
servers' time (src/engine/clock.c): a writer 30 s ahead does not stall the others
or move the order 30 s on, and one 5 minutes behind does not wait out the
difference in its first put. Each writer is a process of its own; the skewed one
runs under Debian's faketime (libfaketime), as a host with a wrong clock would.
"""

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from lmcache_aerospike import _native
from tests.ext.plant import Planter
from tests.server.launch import REPO_ROOT

TTL = 100
PUTS = 30


def start(hosts, tag, offset=None):
    cmd = [sys.executable, "-m", "tests.ext.skew_writer", hosts, "small", "lmca_skew", tag,
           str(PUTS), str(TTL)]
    env = {**os.environ, "PYTHONPATH": REPO_ROOT + "/python"}  # the plain extension
    if offset is not None:
        cmd = ["faketime", "-m", "-f", offset] + cmd
        # libfaketime and ASan's runtime deadlock as they start (both wrap the
        # clock calls): under scripts/test.sh's ASan run the skewed writer runs
        # the plain extension without them, and the test itself stays under ASan.
        env.pop("LD_PRELOAD", None)
    return subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, env=env)


def ttls(hosts, keys):
    reader = _native.Connector(hosts=hosts, namespace="small", set="lmca_skew",
                               default_ttl_seconds=TTL, touch_on_hit=False)
    out = [reader.stat(key)["ttl"] for key in keys]
    for key in keys:
        reader.remove(key)
    reader.close()
    return out


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs Debian's faketime")
@pytest.mark.parametrize("offset", ["+30s", "-300s"])
def test_a_writer_whose_clock_is_off_neither_waits_nor_moves_the_order(aerospike_hosts, offset):
    tag = uuid.uuid4().hex[:10]
    # The namespace's clock starts anew: another test's writers may have left it
    # ahead, or holding a larger TTL for minutes.
    clock = Planter(aerospike_hosts, "small", "lmca_clock")
    clock.put("void-clock", {"next_us": 1})
    clock.close()
    writers = [start(aerospike_hosts, tag + "/on-time"), start(aerospike_hosts, tag + "/off", offset)]
    results = []
    for w in writers:
        out, _ = w.communicate(timeout=300)
        assert w.returncode == 0
        results.append(json.loads(out))
    # The skewed process did see a clock that far off.
    on_time, off = results
    assert abs((off["now"] - on_time["now"]) - int(offset[:-1])) < 10
    for r in results:
        assert all(error is None for _, _, error in r["puts"]), r["puts"]
        assert max(took for _, took, _ in r["puts"]) < 2.0
        assert r["stats"]["clock_local"] == 0 and r["stats"]["clock_reservations"] > 0
    # Every chunk of both is due about now + TTL on the servers' time, the two
    # writers' chunks interleaved, each writer's in the order it wrote them; the
    # first, read again (a hit far enough from the head), was moved after them.
    by_writer = [ttls(aerospike_hosts, [key for key, _, _ in r["puts"]]) for r in results]
    for r, got in zip(results, by_writer):
        assert all(TTL - 5 <= t <= TTL + 5 for t in got), got
        assert all(b + 1 >= a for a, b in zip(got[1:], got[2:])), got
        assert r["hit"] and r["stats"]["hits_touched"] == 1, r["stats"]
        # A second either way, as the order above allows: a TTL is the void second
        # less the servers' now as the handle last learnt it, and the move's own
        # round trip teaches it anew (unmoved, the first put is 3-8 s behind).
        assert got[0] + 1 >= max(got[1:]), got
    assert abs(sorted(by_writer[0])[PUTS // 2] - sorted(by_writer[1])[PUTS // 2]) <= 2
