"""lmcache_aerospike._native.Connector: the native-connector contract LMCache's
NativeConnectorL2Adapter drives, buffer lifetimes, errors, and the blocking calls."""

import logging
import signal
import os
import select
import sys
import threading
import time
import tracemalloc
import uuid

import pytest

from lmcache_aerospike import _native
from tests.conftest import info
from tests.ext.plant import planter  # noqa: F401 (fixture)

MiB = 1 << 20


@pytest.fixture
def connector(aerospike_hosts):
    c = _native.Connector(hosts=aerospike_hosts, namespace="lmcache", set="lmca_pytest",
                          default_ttl_seconds=60, num_workers=4)
    yield c
    c.close()


def keys(n, tag="k"):
    run = uuid.uuid4().hex[:12]
    return [f"model@1@0@{run}{i:04x}@{tag}" for i in range(n)]


def wait(c, future_id, timeout=60):
    """Polls the event fd as the adapter's demux thread does, until `future_id`."""
    seen = []
    while True:
        ready, _, _ = select.select([c.event_fd()], [], [], timeout)
        assert ready, f"no completion for {future_id} within {timeout}s"
        for done in c.drain_completions():
            if done[0] == future_id:
                return done
            seen.append(done)


def payloads(sizes, seed=0):
    return [bytearray(os.urandom(s)) if s else bytearray() for s in sizes]


def test_mixed_batch_reports_hits_and_misses_per_key(connector):
    ks = keys(5)
    data = payloads([100, 200 * 1024, 3 * MiB, 9 * MiB, 50])
    stored = [0, 2, 3]
    fid, ok, error, results = wait(connector, connector.submit_batch_set(
        [ks[i] for i in stored], [data[i] for i in stored]))
    assert (ok, error, results) == (True, "", [True, True, True])

    out = [bytearray(len(d)) for d in data]
    fid, ok, error, results = wait(connector, connector.submit_batch_get(ks, out))
    assert ok and error == ""
    assert results == [True, False, True, True, False]
    for i in stored:
        assert out[i] == data[i]
    assert out[1] == bytearray(len(data[1]))  # a miss leaves the buffer alone

    _, ok, _, results = wait(connector, connector.submit_batch_exists(ks))
    assert ok and results == [True, False, True, True, False]


def test_prefix_is_the_leading_run_of_hits(connector):
    ks = keys(4)
    wait(connector, connector.submit_batch_set([ks[0], ks[1], ks[3]], payloads([10, 10, 10])))
    _, ok, _, results = wait(connector, connector.submit_batch_prefix(ks))
    assert ok and results == [True, True, False, True]
    assert connector.prefix(ks) == 2
    assert connector.prefix(ks[2:]) == 0
    assert connector.prefix([]) == 0


def test_delete_reports_what_it_removed(connector):
    ks = keys(3)
    wait(connector, connector.submit_batch_set(ks[:2], payloads([10, 5 * MiB])))
    _, ok, _, results = wait(connector, connector.submit_batch_delete(ks))
    assert ok and results == [True, True, False]
    _, _, _, results = wait(connector, connector.submit_batch_exists(ks))
    assert results == [False, False, False]


def test_future_ids_are_unique_across_operations(connector):
    ks = keys(2)
    ids = [connector.submit_batch_set(ks, payloads([10, 10])),
           connector.submit_batch_exists(ks),
           connector.submit_batch_get(ks, payloads([10, 10])),
           connector.submit_batch_delete(ks)]
    assert len(set(ids)) == 4
    got = set()
    while len(got) < 4:
        select.select([connector.event_fd()], [], [], 30)
        got |= {done[0] for done in connector.drain_completions()}
    assert got == set(ids)


def test_drain_clears_the_event_fd(connector):
    wait(connector, connector.submit_batch_exists(keys(1)))
    assert connector.drain_completions() == []
    ready, _, _ = select.select([connector.event_fd()], [], [], 0)
    assert ready == []


def test_buffers_are_held_until_their_completion_is_drained(connector):
    ks = keys(1)
    buf = bytearray(os.urandom(6 * MiB))
    before = sys.getrefcount(buf)
    fid = connector.submit_batch_set(ks, [buf])
    # The export pins the object: it cannot be resized while the workers use it.
    with pytest.raises(BufferError):
        buf.extend(b"x")
    assert sys.getrefcount(buf) == before + 1
    wait(connector, fid)
    assert sys.getrefcount(buf) == before
    buf.extend(b"x")  # released: resizable again
    out = bytearray(6 * MiB)
    _, _, _, results = wait(connector, connector.submit_batch_get(ks, [out]))
    assert results == [True] and out == buf[:-1]


def test_close_with_work_in_flight_cancels_and_releases_everything(aerospike_hosts):
    c = _native.Connector(hosts=aerospike_hosts, namespace="lmcache", set="lmca_pytest",
                          num_workers=1, default_ttl_seconds=60)
    bufs = payloads([4 * MiB] * 12)
    ids = [c.submit_batch_set([k], [b]) for k, b in zip(keys(12), bufs)]
    c.close()
    for b in bufs:
        b.extend(b"x")  # every export released by close()
    done = c.drain_completions()
    assert sorted(d[0] for d in done) == sorted(ids)
    canceled = [d for d in done if not d[1]]
    assert canceled, "one worker cannot have stored 48 MiB before close()"
    assert all("canceled" in d[2] for d in canceled)
    assert c.drain_completions() == []
    assert c.closed
    c.close()  # idempotent
    with pytest.raises(_native.CanceledError):
        c.submit_batch_exists(["k"])


def test_many_python_threads_submit_at_once(connector):
    errors, results = [], {}
    lock = threading.Lock()

    def worker(t):
        try:
            ks = keys(8, tag=f"t{t}")
            data = payloads([1000 * (i + 1) for i in range(8)])
            for _ in range(5):
                fid = connector.submit_batch_set(ks, data)
                with lock:
                    results[fid] = None
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    while None in results.values():
        select.select([connector.event_fd()], [], [], 30)
        for fid, ok, error, res in connector.drain_completions():
            results[fid] = (ok, res)
    assert len(results) == 40
    assert all(ok and all(res) for ok, res in results.values())


@pytest.mark.parametrize("call", [
    lambda c: c.submit_batch_get(["a", "b"], [bytearray(1)]),
    lambda c: c.submit_batch_set(["a"], [b"x", b"y"]),
    lambda c: c.submit_batch_get(["a"], [b"read-only"]),
    lambda c: c.submit_batch_set(["a"], [42]),
    lambda c: c.submit_batch_exists([""]),
    lambda c: c.submit_batch_exists(["x" * 1025]),
    lambda c: c.submit_batch_exists(["nul\0key"]),
    lambda c: c.submit_batch_exists([b"bytes-key"]),
    lambda c: c.submit_batch_exists("not-a-list"),
])
def test_bad_arguments_raise_and_never_complete(connector, call):
    with pytest.raises((_native.InvalidArgumentError, TypeError)):
        call(connector)
    assert connector.drain_completions() == []
    assert connector.stats()["submitted"] == 0


def test_bad_arguments_name_what_is_wrong(connector):
    with pytest.raises(_native.InvalidArgumentError, match="2 keys but 1 buffers"):
        connector.submit_batch_get(["a", "b"], [bytearray(1)])
    with pytest.raises(_native.InvalidArgumentError, match="buffer 0: bytes, a writable"):
        connector.submit_batch_get(["a"], [b"read-only"])
    with pytest.raises(_native.InvalidArgumentError, match="key 1: expected str, got int"):
        connector.submit_batch_exists(["a", 7])
    with pytest.raises(TypeError, match="2 positional arguments"):
        connector.submit_batch_get(["a"])


def test_constructor_takes_keywords_and_names_bad_settings(aerospike_hosts):
    with pytest.raises(TypeError, match="keyword arguments only"):
        _native.Connector(aerospike_hosts)
    with pytest.raises(_native.ConfigError, match="unknown_key"):
        _native.Connector(hosts=aerospike_hosts, unknown_key=1)
    with pytest.raises(_native.ConfigError, match='target_segment_bytes="big"'):
        _native.Connector(hosts=aerospike_hosts, target_segment_bytes="big")
    with pytest.raises(_native.ConfigError, match="num_workers"):
        _native.Connector(hosts=aerospike_hosts, num_workers=0)
    with pytest.raises(_native.ConfigError, match="expected str, int or bool, got float"):
        _native.Connector(hosts=aerospike_hosts, read_timeout_ms=1.5)
    with pytest.raises(_native.NamespaceError, match="nope"):
        _native.Connector(hosts=aerospike_hosts, namespace="nope")
    with pytest.raises(_native.ConnectionError) as e:
        _native.Connector(hosts="127.0.0.1:1", connect_timeout_ms=200)
    assert isinstance(e.value, ConnectionError)  # also the builtin
    assert e.value.name == "ECONNECTION" and e.value.status == _native.STATUS_ECONNECTION


def test_upstream_set_name_spelling_is_accepted(aerospike_hosts):
    c = _native.Connector(hosts=aerospike_hosts, namespace="lmcache", set_name="lmca_pytest",
                          enable_crc32=True, send_key=False)
    try:
        k = keys(1)[0]
        c.put(k, b"abc")
        assert c.stat(k)["crc32"] is not None
    finally:
        c.close()


def test_dropped_connections_fail_the_batch_with_a_message(connector, fixture_only):
    ks = keys(3)
    wait(connector, connector.submit_batch_set(ks, payloads([10, 20, 30])))
    assert info(fixture_only, "fixture-fault:kind=drop;op=read") == "ok"
    try:
        _, ok, error, results = wait(connector, connector.submit_batch_get(
            ks, payloads([10, 20, 30])))
    finally:
        info(fixture_only, "fixture-clear-faults")
    assert not ok
    assert error.startswith("ECONNECTION: batch get ")
    assert results == [False, False, False]


def test_blocking_calls_round_trip(connector):
    k = keys(1)[0]
    data = os.urandom(5 * MiB)
    connector.put(k, data, md=b"\x01\x02", serde="naive", ttl_class="session")
    meta = connector.stat(k)
    assert meta["tot_b"] == len(data) and meta["md"] == b"\x01\x02"
    assert meta["nseg"] == connector.plan(len(data))[0] > 1
    assert meta["serde"] == "naive" and meta["ttl_class"] == "session" and not meta["pin"]
    out = bytearray(len(data))
    assert connector.get(k, out) == len(data) and out == data
    assert connector.exists(k)
    assert connector.touch(k, pin=True) and connector.stat(k)["pin"]
    assert connector.remove(k) and not connector.exists(k)
    assert connector.get(k, out) is None and connector.stat(k) is None
    assert not connector.remove(k) and not connector.touch(k)
    connector.put(k, b"12345")
    with pytest.raises(_native.InvalidArgumentError, match="smaller than the stored 5"):
        connector.get(k, bytearray(2))
    assert connector.ping() is True
    assert connector.limits()["max_segment_bytes"] == 8 * MiB - 64 * 1024


def test_no_memory_is_left_behind(connector):
    """Allocations the extension makes for submissions go through PyMem, which
    tracemalloc sees: after many cycles nothing of ours stays allocated."""
    ks = keys(4)
    data = payloads([1000, 2000, 3000, 4000])
    out = [bytearray(len(d)) for d in data]

    def cycle():
        wait(connector, connector.submit_batch_set(ks, data))
        wait(connector, connector.submit_batch_get(ks, out))
        wait(connector, connector.submit_batch_exists(ks))

    for _ in range(20):
        cycle()
    refs = [sys.getrefcount(b) for b in data + out]
    tracemalloc.start()
    first = tracemalloc.take_snapshot()
    for _ in range(200):
        cycle()
    second = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in second.compare_to(first, "filename") if s.size_diff > 0)
    assert grown < 64 * 1024, second.compare_to(first, "lineno")[:5]
    assert [sys.getrefcount(b) for b in data + out] == refs


def test_the_extension_under_test_is_this_tree(connector):
    """scripts/test.sh also runs these tests on an ASan build of the extension
    placed first on PYTHONPATH; make sure that is the module loaded."""
    want = os.environ.get("LMCA_EXPECT_NATIVE")
    if want:
        assert _native.__file__.startswith(want), _native.__file__
    assert _native.Connector is type(connector)


# ---------------------------------------------------------------------------
# Defects of the hardening issue, each with the test that failed before.

def test_engine_warnings_after_open_reach_the_logger(connector, planter, caplog):
    """The handle kept a pointer to a log buffer on the constructor's stack, so
    a line logged after open went nowhere good. Lines now go to a sink that
    lives as long as the handle, from any thread, and reach `logging`."""
    from tests.ext.plant import meta_bins
    ks = keys(2, tag="corrupt")
    for k in ks:
        planter.put(k + "|m", meta_bins(b"12345678", changes={"nseg": 0}))
    with caplog.at_level(logging.WARNING, logger="lmcache_aerospike"):
        assert connector.get(ks[0], bytearray(8)) is None  # on this thread
        _, ok, _, results = wait(connector, connector.submit_batch_get(ks[1:], [bytearray(8)]))
    assert ok and results == [False]  # on a worker thread, flushed at drain
    import aerospike
    for k in ks:  # named by digest (spec 4.8: logs never carry keys)
        digest = aerospike.calc_digest("lmcache", "lmca_pytest", k + "|m").hex()
        assert f"record {digest} is corrupt (bin nseg=0 is outside 1..65535)" in caplog.text
        assert k not in caplog.text


def test_ctrl_c_in_a_log_handler_is_not_lost(aerospike_hosts):
    """Engine lines reach `logging` from inside extension calls, and the sink
    cleared any error a handler raised: a Ctrl-C landing in a slow handler while
    a connector opened was swallowed. It is now raised again after the call."""
    class Interrupting(logging.Handler):
        def emit(self, record):
            raise KeyboardInterrupt

    logger = logging.getLogger("lmcache_aerospike")
    handler, level, c = Interrupting(), logger.level, None
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # open logs the namespace's limits at INFO
    # The sink re-raises through the SIGINT handler (PyErr_SetInterrupt), which a
    # Python started in the background with SIGINT ignored does not install.
    sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            c = _native.Connector(hosts=aerospike_hosts, set="lmca_pytest")
            for _ in range(100):  # delivered at the next signal check, at the latest here
                time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, sigint)
        logger.removeHandler(handler)
        logger.setLevel(level)
        if c is not None:
            c.close()


def test_close_waits_for_blocking_calls_on_a_condition(connector, aerospike_hosts, fixture_only):
    """close() used to poll for blocking calls in flight with sleeps; it now
    waits on a condition. A call in flight finishes with its own result."""
    k = keys(1)[0]
    connector.put(k, b"x" * 100)
    import aerospike
    digest = aerospike.calc_digest("lmcache", "lmca_pytest", k + "|m").hex()
    # Under half the read timeout (1 s): a read waits that long on one copy and
    # then asks again, and this test is about close(), not that retry.
    assert info(fixture_only, f"fixture-fault:kind=delay;ms=450;op=read;digest={digest}") == "ok"
    got = []
    reader = threading.Thread(target=lambda: got.append(connector.get(k, bytearray(100))))
    reader.start()
    time.sleep(0.1)  # the get is waiting on the server now
    started = time.monotonic()
    connector.close()
    waited = time.monotonic() - started
    reader.join()
    info(fixture_only, "fixture-clear-faults")
    assert got == [100]
    assert waited > 0.2  # it did wait for the call
    with pytest.raises(_native.CanceledError):
        connector.get(k, bytearray(100))


def test_async_set_passes_md_pin_and_tags(connector):
    ks = keys(2)
    mds = [bytearray(b"md-zero"), None]
    fid = connector.submit_batch_set(ks, payloads([100, 5 * MiB]), mds=mds, pin=True,
                                     serde="naive", ttl_class="corpus")
    with pytest.raises(BufferError):  # held like the buffers until drained
        mds[0].extend(b"!")
    _, ok, error, results = wait(connector, fid)
    assert ok and results == [True, True], error
    mds[0].extend(b"!")  # released
    first, second = connector.stat(ks[0]), connector.stat(ks[1])
    assert first["md"] == b"md-zero" and second["md"] == b""
    assert first["pin"] and second["pin"] and first["ttl"] == 2**32 - 1
    assert first["serde"] == "naive" and second["ttl_class"] == "corpus"
    for k in ks:  # pinned: they would stay on a real server forever
        connector.remove(k)
    with pytest.raises(_native.InvalidArgumentError, match="2 keys but 1 md blobs"):
        connector.submit_batch_set(ks, payloads([1, 1]), mds=[b"x"])


def test_a_single_string_is_not_a_list_of_keys(connector):
    """prefix("abc") used to look up the keys "a", "b" and "c"."""
    for call in (connector.prefix, connector.submit_batch_prefix, connector.submit_batch_exists):
        with pytest.raises(_native.InvalidArgumentError, match="not a single str"):
            call("abc")
    assert connector.drain_completions() == []


def test_empty_payloads_are_chunks_on_both_surfaces(connector):
    """put stored an empty payload that submit_batch_set refused."""
    ks = keys(2)
    connector.put(ks[0], b"")
    _, ok, _, results = wait(connector, connector.submit_batch_set(ks[1:], [bytearray()]))
    assert ok and results == [True]
    _, ok, _, results = wait(connector, connector.submit_batch_get(ks, [bytearray(), bytearray()]))
    assert ok and results == [True, True]
    assert connector.get(ks[1], bytearray()) == 0


def test_server_full_is_a_capacity_error_naming_the_limits(aerospike_hosts, fixture_only):
    """Result 8 (stop-writes) was reported as busy, retry with backoff. Now the engine
    retries it for backpressure_ms (NSUP may evict meanwhile), then names it."""
    connector = _native.Connector(hosts=aerospike_hosts, namespace="lmcache",
                                  set="lmca_pytest", default_ttl_seconds=60, num_workers=4,
                                  backpressure_ms=200)
    assert info(fixture_only, "fixture-fault:kind=result;code=8;op=write") == "ok"
    try:
        with pytest.raises(_native.ServerFullError) as e:
            connector.put(keys(1)[0], b"x" * 100)
        _, ok, error, _ = wait(connector, connector.submit_batch_set(keys(1), payloads([100])))
    finally:
        info(fixture_only, "fixture-clear-faults")
        connector.close()
    assert not isinstance(e.value, _native.BusyError)
    assert e.value.name == "EFULL" and e.value.as_code == 8
    assert 'namespace "lmcache" is full' in str(e.value)
    assert "storage-engine.stop-writes-used-pct=70" in str(e.value)
    assert not ok and error.startswith("EFULL: ")


# ---------------------------------------------------------------------------
# Metadata first, destination later (what the LMCache glue allocates from md).

def test_stat_then_fill_reads_a_small_chunk_once(connector, aerospike_hosts):
    ks = keys(3)
    data = payloads([1000, 5 * MiB])
    wait(connector, connector.submit_batch_set(ks[:2], data, mds=[b"md-small", b"md-big"]))
    reads = fixture_stat(aerospike_hosts, "reads")
    _, ok, _, pendings = wait(connector, connector.submit_batch_stat(ks))
    assert ok and pendings[2] is None
    small, big = pendings[:2]
    assert (small.nbytes, small.md, small.nseg) == (1000, b"md-small", 1)
    nseg = connector.plan(5 * MiB)[0]
    assert (big.nbytes, big.md, big.nseg) == (5 * MiB, b"md-big", nseg) and nseg > 1
    out = [bytearray(p.nbytes) for p in (small, big)]
    _, ok, error, results = wait(connector, connector.submit_batch_fill(ks[:2], [small, big], out))
    assert ok and results == [True, True], error
    assert out == data
    assert small.consumed and big.consumed
    if reads is not None:  # three meta records and the segments: the small payload came once
        assert fixture_stat(aerospike_hosts, "reads") - reads == 3 + nseg
    with pytest.raises(_native.InvalidArgumentError, match="already handed to a fill"):
        connector.submit_batch_fill(ks[:1], [small], [bytearray(1000)])


def test_fill_refuses_what_does_not_fit_and_keeps_the_pending(connector):
    ks = keys(1)
    wait(connector, connector.submit_batch_set(ks, payloads([100])))
    _, _, _, (p,) = wait(connector, connector.submit_batch_stat(ks))
    with pytest.raises(_native.InvalidArgumentError, match="a buffer of 99 bytes for 100"):
        connector.submit_batch_fill(ks, [p], [bytearray(99)])
    with pytest.raises(_native.InvalidArgumentError, match="pending 1: already handed"):
        connector.submit_batch_fill(ks * 2, [p, p], [bytearray(100), bytearray(100)])
    with pytest.raises(_native.InvalidArgumentError, match="expected a Pending"):
        connector.submit_batch_fill(ks, [b"x"], [bytearray(100)])
    assert not p.consumed  # refused: still the caller's
    out = bytearray(100)
    _, ok, _, results = wait(connector, connector.submit_batch_fill(ks, [p], [out]))
    assert ok and results == [True]


def test_unfilled_pendings_free_what_they_hold(connector):
    """A Pending that is dropped instead of filled releases its payload."""
    ks = keys(8)
    wait(connector, connector.submit_batch_set(ks, payloads([64 * 1024] * 8)))
    tracemalloc.start()
    for _ in range(30):
        _, _, _, pendings = wait(connector, connector.submit_batch_stat(ks))
        assert all(p.nbytes == 64 * 1024 for p in pendings)
        del pendings
    tracemalloc.stop()
    # The held payloads are the engine's (malloc), not PyMem: the ASan run's
    # leak check is what fails if a dropped Pending keeps one.


def test_touch_through_the_pool(connector):
    ks = keys(2)
    wait(connector, connector.submit_batch_set(ks[:1], payloads([5 * MiB])))
    _, ok, _, results = wait(connector, connector.submit_batch_touch(ks, pin=True))
    assert ok and results == [True, False]
    assert connector.stat(ks[0])["pin"]
    assert connector.remove(ks[0])  # pinned: it would stay on a real server forever


def test_list_keys_names_chunks_stored_with_their_key(aerospike_hosts):
    setname = "lmca_list_" + uuid.uuid4().hex[:8]  # its own set: a scan sees all of it
    named = _native.Connector(hosts=aerospike_hosts, set=setname, send_key=True,
                              default_ttl_seconds=60)
    anonymous = _native.Connector(hosts=aerospike_hosts, set=setname, default_ttl_seconds=60)
    ks, anon = [], []
    try:
        ks, anon = keys(3), keys(1, "anon")
        for k, size in zip(ks, (100, 3 * MiB, 0)):
            named.put(k, bytearray(size))
        anonymous.put(anon[0], bytearray(10))
        found, unnamed = named.list_keys()
        assert sorted(found) == sorted(ks)  # segments are not chunks; no "|m" suffix
        assert unnamed == 1
        assert len(named.list_keys(limit=2)[0]) == 2
        with pytest.raises(TypeError):
            named.list_keys(2)  # keyword only: a bare number reads like a key
    finally:
        for k in ks + anon:
            named.remove(k)
        named.close()
        anonymous.close()


def test_error_from_rebuilds_the_typed_error_of_a_completion(connector):
    ks = keys(1)
    _, ok, error, _ = wait(connector, connector.submit_batch_set(ks, [bytearray(10)]))
    assert ok and error == ""
    e = _native.error_from("ETIMEOUT: read timed out after 1000 ms")
    assert isinstance(e, _native.TimeoutError) and isinstance(e, TimeoutError)
    assert (e.status, e.name, str(e)) == (_native.STATUS_ETIMEOUT, "ETIMEOUT",
                                          "read timed out after 1000 ms")
    assert isinstance(_native.error_from("EFULL: stop-writes"), _native.ServerFullError)
    odd = _native.error_from("no status here")
    assert isinstance(odd, _native.UnknownError) and str(odd) == "no status here"


def fixture_stat(hosts, name):
    """A counter of the test server, or None on a real server."""
    answer = info(hosts, "fixture-stats")
    stats = dict(kv.split("=", 1) for kv in answer.split(";") if "=" in kv)
    return int(stats[name]) if name in stats else None
