"""bench/peers/mooncake_peer.py's connector, the shape LMCache's native_plugin adapter
drives (NativeConnectorL2Adapter: a completion's ok gates a lookup's keys, a load's
keys stand per key, a store is ok only when every key was stored), over a stand-in
for Mooncake's client: Mooncake itself is a benchmark peer, not a test dependency."""

import os
import select
import sys
import types

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peers"))


class FakeStore:
    """MooncakeDistributedStore's calls the connector makes, on a dict."""

    def __init__(self):
        self.data, self.fail_put = {}, set()

    def setup(self, *args):
        return 0

    def put(self, key, data):
        if key in self.fail_put:
            return -1
        self.data[key] = bytes(data)
        return 0

    def get(self, key):
        return self.data.get(key, b"")

    def batch_is_exist(self, keys):
        return [1 if k in self.data else 0 for k in keys]

    def remove(self, key):
        return 0 if self.data.pop(key, None) is not None else -1

    def remove_all(self, force=False):
        n = len(self.data)
        self.data.clear()
        return n

    def close(self):
        pass


@pytest.fixture
def conn(monkeypatch):
    module = types.ModuleType("mooncake.store")
    module.MooncakeDistributedStore = FakeStore
    monkeypatch.setitem(sys.modules, "mooncake", types.ModuleType("mooncake"))
    monkeypatch.setitem(sys.modules, "mooncake.store", module)
    import mooncake_peer

    c = mooncake_peer.MooncakeConnector(num_workers=2)
    yield c
    c.close()


def wait(conn, fid):
    """The completion of future `fid`, waiting on the event fd as the adapter does."""
    poller, got = select.poll(), {}
    poller.register(conn.event_fd(), select.POLLIN)
    while fid not in got:
        assert poller.poll(5000), "no completion within 5 s"
        got.update({c[0]: c for c in conn.drain_completions()})
    return got[fid][1:]


def test_what_is_stored_loads_back_into_typed_views(conn):
    import array

    src = [memoryview(array.array("i", range(i, i + 256))) for i in range(3)]
    assert wait(conn, conn.submit_batch_set(["a", "b", "c"], src)) == (True, "", [True] * 3)
    out = [memoryview(array.array("i", [0] * 256)) for _ in range(3)]
    ok, _, bools = wait(conn, conn.submit_batch_get(["a", "b", "c"], out))
    assert ok and bools == [True] * 3
    assert [o.tobytes() for o in out] == [s.tobytes() for s in src]


def test_a_lookup_or_load_with_misses_is_ok_with_the_misses_per_key(conn):
    wait(conn, conn.submit_batch_set(["a"], [memoryview(b"x" * 64)]))
    assert wait(conn, conn.submit_batch_exists(["a", "z"])) == (True, "", [True, False])
    out = [memoryview(bytearray(64)), memoryview(bytearray(64))]
    assert wait(conn, conn.submit_batch_get(["a", "z"], out)) == (True, "", [True, False])
    # A value of another size is a miss, not a partial copy.
    assert wait(conn, conn.submit_batch_get(["a"], [memoryview(bytearray(32))]))[2] == [False]


def test_a_store_with_a_refused_key_is_not_ok(conn):
    conn._store.fail_put.add("b")
    ok, _, bools = wait(conn, conn.submit_batch_set(["a", "b"], [memoryview(b"1"),
                                                                 memoryview(b"2")]))
    assert not ok and bools == [True, False]


def test_a_call_that_raises_fails_its_future_with_the_error(conn):
    def broken(keys):
        raise RuntimeError("master gone")

    conn._store.batch_is_exist = broken
    ok, error, bools = wait(conn, conn.submit_batch_exists(["a"]))
    assert not ok and "master gone" in error and bools == []


def test_delete_and_clear(conn):
    wait(conn, conn.submit_batch_set(["a", "b"], [memoryview(b"1"), memoryview(b"2")]))
    assert wait(conn, conn.submit_batch_delete(["a", "z"]))[2] == [True, False]
    assert conn.remove_all() == 1


@pytest.mark.parametrize("says, expected", [
    ("mooncake_master version 0.3.13.post1\nDebug build (NDEBUG not #defined)\n",
     "Debug build (NDEBUG not #defined)"),
    ("mooncake_master version 9.9\n", None)])
def test_the_record_quotes_what_the_masters_version_says_of_its_build(tmp_path, says, expected):
    import mooncake_peer

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "mooncake_master").write_text(
        "import sys\nassert sys.argv[1:] == ['--version']\n"
        f"sys.stdout.write({says!r})\n")
    store = object.__new__(mooncake_peer.Store)  # no processes: only its site
    store.site = str(tmp_path)
    assert store.debug_build() == expected
