"""lmcache_aerospike.client: one engine per settings, and its completions routed
to futures on a loop or on a drain thread."""

import asyncio
import threading
import uuid

import pytest

from lmcache_aerospike import _native, client
from lmcache_aerospike.config import Settings


def settings(hosts, **kw):
    return Settings.from_dict({"hosts": hosts, "default_ttl_seconds": 60,
                               "num_workers": 2, **kw})


def names(n):
    run = uuid.uuid4().hex[:12]
    return [f"client@{run}@{i}" for i in range(n)]


def test_acquire_shares_by_settings_and_the_last_release_closes(aerospike_hosts):
    a = client.acquire(settings(aerospike_hosts))
    b = client.acquire(settings(aerospike_hosts))
    c = client.acquire(settings(aerospike_hosts, set="other"))
    try:
        assert a is b and a is not c
        client.release(a)
        assert not b.native.closed
    finally:
        client.release(b)
        client.release(c)
    assert b.native.closed and c.native.closed
    d = client.acquire(settings(aerospike_hosts))  # a new one after the last release
    assert d is not a
    client.release(d)


def test_without_a_loop_a_drain_thread_resolves_futures(aerospike_hosts):
    engine = client.acquire(settings(aerospike_hosts))
    try:
        engine.attach(None)
        ks = names(2)
        ok, error, stored = engine.submit("submit_batch_set", ks[:1],
                                          [bytearray(100)]).result(30)
        assert (ok, error, stored) == (True, "", [True])
        ok, _, found = engine.submit("submit_batch_exists", ks).result(30)
        assert ok and found == [True, False]
        assert any(t.name == "lmcache-aerospike-drain" for t in threading.enumerate())
    finally:
        client.release(engine)
    assert not any(t.name == "lmcache-aerospike-drain" for t in threading.enumerate())


def test_on_a_loop_completions_are_drained_by_the_loop(aerospike_hosts):
    engine = client.acquire(settings(aerospike_hosts))

    async def main():
        engine.attach(asyncio.get_running_loop())
        drains = []
        real = engine._drain
        engine._drain = lambda: (drains.append(threading.current_thread()), real())[1]
        asyncio.get_running_loop().remove_reader(engine.native.event_fd())
        asyncio.get_running_loop().add_reader(engine.native.event_fd(), engine._drain)
        ok, _, found = await engine.run("submit_batch_exists", names(3))
        assert ok and found == [False] * 3
        assert drains and all(t is threading.current_thread() for t in drains)

    try:
        asyncio.run(main())
    finally:
        client.release(engine)


def test_an_awaiter_that_gives_up_cannot_cancel_the_op(aerospike_hosts):
    engine = client.acquire(settings(aerospike_hosts))
    try:
        engine.attach(None)
        future = engine.submit("submit_batch_set", names(1), [bytearray(1 << 20)])
        assert not future.cancel()  # its buffers are the workers' until it completes
        assert future.result(30)[0]
    finally:
        client.release(engine)


def test_close_resolves_what_is_left_as_canceled(aerospike_hosts):
    engine = client.acquire(settings(aerospike_hosts, num_workers=1))
    engine.attach(None)
    futures = [engine.submit("submit_batch_set", names(1), [bytearray(4 << 20)])
               for _ in range(20)]
    client.release(engine)
    results = [f.result(30) for f in futures]
    canceled = [r for r in results if not r[0]]
    assert canceled, "close() came after all 20 puts: nothing to check"
    assert all(r[1].startswith("ECANCELED") for r in canceled)
    assert all(isinstance(_native.error_from(r[1]), _native.CanceledError) for r in canceled)
    with pytest.raises(_native.Error):
        engine.submit("submit_batch_exists", names(1))
