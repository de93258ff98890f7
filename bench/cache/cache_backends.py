"""The tiers bench/cache/cache_bench.py drives, behind one small interface:

    lookup(keys) -> [present]      get(keys, bufs) -> [hit]      set(keys, bufs) -> [ok]
    engine_counters() -> {name: n}  server_counters() -> {name: n}  debris() -> dict | None
    cleanup(), close()

`Ours` is lmcache_aerospike._native.Connector (the asynchronous layer: submit_batch_*,
completions on its event fd). `Redis` is LMCache's native RESP client
(lmcache.lmcache_redis.LMCacheRedisClient, what LMCache's `resp` L2 adapter wraps) on a
redis-server with maxmemory and allkeys-lru. `Mooncake` is Mooncake Store through
bench/peers/mooncake_peer.py. All hand out completions the same way, `(future id, ok,
error, per-key bools)` from drain_completions() after the event fd fires, so one
`Completions` routes them.
"""

import concurrent.futures
import select
import socket
import threading
import time

from cache_cluster import namespace_counters, parse_info


class Hung(Exception):
    """An operation did not complete within its timeout."""


class Completions:
    """Routes a native client's completions to futures, on one drain thread (the
    pattern of python/lmcache_aerospike/client.py)."""

    def __init__(self, native):
        self.native = native
        self.pending = {}  # future id -> (future, buffers kept alive until completion)
        self.lock = threading.Lock()  # a submit registers its id before a drain can see it
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drain_forever, daemon=True,
                                       name="cache-bench-drain")
        self.thread.start()

    def call(self, method, *args, timeout):
        """Submits native.<method>(*args) and waits for (ok, error, results). On a
        timeout the buffers stay referenced here: the client may still write them."""
        future = concurrent.futures.Future()
        with self.lock:
            fid = getattr(self.native, method)(*args)
            self.pending[fid] = (future, args)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise Hung(f"{method} of {len(args[0])} keys: no completion in {timeout} s") from None

    def _drain(self):
        for fid, ok, error, results in self.native.drain_completions():
            with self.lock:
                entry = self.pending.pop(fid, None)
            if entry is not None:
                entry[0].set_result((ok, error, results))

    def _drain_forever(self):
        poller = select.poll()
        poller.register(self.native.event_fd(), select.POLLIN)
        while not self.stop.is_set():
            if poller.poll(200):
                self._drain()

    def close(self):
        """Closes the client; what it never completed resolves as failed."""
        self.stop.set()
        self.thread.join()
        self.native.close()
        try:
            self._drain()  # the cancellations close() may have produced
        except Exception:  # a closed client may refuse to drain: nothing to collect
            pass
        with self.lock:
            left, self.pending = self.pending, {}
        for future, _ in left.values():
            future.set_result((False, "closed before completing", None))


def per_key(ok, results, n):
    """Per-key success from a completion: its bools, or `ok` for every key when the
    client gives none (LMCache's RESP client on sets)."""
    return [bool(r) for r in results] if results is not None else [ok] * n


class Ours:
    name = "ours"
    label = "ours (lmcache_aerospike._native)"
    # Counters of the engine reported per interval, when the engine has them.
    ENGINE_COUNTERS = ("puts_retried", "write_retries", "dropped_full", "dropped_busy",
                       "dropped_unsent", "dropped_unreachable", "dropped_paced", "full",
                       "puts_aborted", "torn", "corrupt", "puts_paced", "clock_reservations",
                       "clock_resets", "clock_local", "clock_fallbacks", "clock_busy", "clock_overloaded",
                       "hits_touched", "hits_unbudgeted", "touch_bytes",
                       "hits_fresh", "touches_failed", "mends")

    def __init__(self, settings, timeout=120.0):
        from lmcache_aerospike import _native  # only when this tier runs

        self.settings, self.errors = settings, _native.Error
        self.namespace, self.set_name = settings["namespace"], settings["set"]
        self.native = _native.Connector(**settings)
        self.completions = Completions(self.native)
        self.timeout = timeout

    def spawn_spec(self):
        """How a writer process builds a client of its own (bench/cache/cache_run.py)."""
        return ("cache_backends", "Ours", (self.settings, self.timeout))

    def _call(self, method, keys, *rest):
        ok, error, results = self.completions.call(method, list(keys), *rest,
                                                   timeout=self.timeout)
        return ok, error, per_key(ok, results, len(keys))

    def lookup(self, keys):
        # The prefix lookup reads every key's presence in one batch; the hit prefix is
        # the leading Trues, and the rest says which chunks a store can skip.
        return self._call("submit_batch_prefix", keys)

    def get(self, keys, bufs):
        return self._call("submit_batch_get", keys, list(bufs))

    def set(self, keys, bufs):
        return self._call("submit_batch_set", keys, list(bufs))

    def engine_counters(self):
        stats = self.native.stats()
        return {name: stats.get(name, 0) for name in self.ENGINE_COUNTERS}

    def server_counters(self):
        """The namespace's counters over the cluster; while a node is paused or just
        gone (its info fails) the last ones read."""
        try:
            self.last_counters = namespace_counters(
                self.native.info(f"namespace/{self.namespace}"))
        except self.errors:
            if not hasattr(self, "last_counters"):
                raise
        return self.last_counters

    def debris(self):
        """Orphan segments and broken meta records (a sweep) against every record of
        the set (a scan): both read the whole set. None when a node does not answer."""
        try:
            found = self.native.sweep()
            total = len(self.native.scan(records=True))
        except self.errors:
            return None
        return {"debris_records": len(found), "total_records": total,
                "reasons": _count(r["reason"] for r in found)}

    def cleanup(self):
        truncate(self.native, self.namespace, self.set_name)

    def close(self):
        self.completions.close()


def _count(items):
    out = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


# ------------------------------------------------------------- Aerospike info

def truncate(native, namespace, set_name, wait_s=30.0):
    """Empties the set, and on a real server waits until it reports no objects (the
    test server truncates at once and answers no sets/ command)."""
    native.info(f"truncate:namespace={namespace};set={set_name}")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            nodes = native.info(f"sets/{namespace}/{set_name}")
        except Exception:  # the test server: unrecognized command
            return
        if all(int(parse_info(a.replace(":", ";")).get("objects", 0)) == 0
               for _n, _a, a in nodes):
            return
        time.sleep(0.2)


# --------------------------------------------------------------------- Redis

class Redis:
    name = "redis"
    label = "LMCache RESP on redis-server (allkeys-lru)"
    ENGINE_COUNTERS = ()

    def __init__(self, port, num_workers=8, get_timeout=1.0, max_get_chunks=1):
        self.port, self.num_workers = port, num_workers
        # A GET of a missing key never completes in this client (its worker waits for
        # a payload that a nil reply lacks; LMCache only gets after EXISTS), so a chunk
        # evicted between lookup and load hangs a worker. Such a get times out, and the
        # client is replaced (closing it frees its workers), as a caller of LMCache's
        # adapter would have to; `resets` counts it.
        self.get_timeout = get_timeout
        self.resets = 0
        # Chunks per GET submit. A pipelined batch's replies wait in the connection's
        # output buffer, which redis-server counts against maxmemory: a full server
        # evicts to make room, and can evict the batch's own later keys before their
        # GETs run. With 8 chunks of 1 MiB per GET on a 64 MiB budget, one writer hung
        # about once a request; with one chunk per GET, never in 300 requests.
        self.max_get_chunks = max_get_chunks
        self.lock = threading.Lock()
        self.completions = self._open()

    def spawn_spec(self):
        return ("cache_backends", "Redis",
                (self.port, self.num_workers, self.get_timeout, self.max_get_chunks))

    def _open(self):
        from lmcache.lmcache_redis import LMCacheRedisClient  # LMCache's C++ RESP client

        return Completions(LMCacheRedisClient("127.0.0.1", self.port, self.num_workers, "", ""))

    def _call(self, method, keys, *rest, timeout=60.0):
        completions = self.completions
        try:
            ok, error, results = completions.call(method, list(keys), *rest, timeout=timeout)
        except Hung:
            self._reset(completions)
            raise
        return ok, error, per_key(ok, results, len(keys))

    def _reset(self, hung):
        with self.lock:
            if self.completions is not hung:
                return  # another writer replaced it already
            self.completions = self._open()
            self.resets += 1
        hung.close()

    def lookup(self, keys):
        return self._call("submit_batch_exists", keys)

    def get(self, keys, bufs):
        return self._call("submit_batch_get", keys, [memoryview(b) for b in bufs],
                          timeout=self.get_timeout)

    def set(self, keys, bufs):
        return self._call("submit_batch_set", keys, [memoryview(b) for b in bufs])

    def engine_counters(self):
        return {"client_resets": self.resets}

    def server_counters(self):
        info = redis_info(self.port)
        used, cap = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
        return {"evicted_objects": int(info.get("evicted_keys", 0)),
                "expired_objects": int(info.get("expired_keys", 0)),
                "objects": redis_dbsize(info),
                "data_used_pct": 100 * used // cap if cap else 0, "stop_writes": False,
                "used_memory": used}

    def debris(self):
        return None  # one value per key: nothing can be left half-written

    def cleanup(self):
        redis_call(self.port, "FLUSHALL", timeout=60)

    def close(self):
        self.completions.close()


class Mooncake:
    """Mooncake Store (bench/peers/mooncake_peer.py's connector, the shape LMCache's
    native_plugin adapter drives) on a master and one client lending it the budget;
    it evicts by its own approximate LRU."""
    name = "mooncake"
    label = "Mooncake Store (its own eviction)"
    ENGINE_COUNTERS = ()

    def __init__(self, master, metadata, num_workers=8, store=None):
        import mooncake_peer  # bench/peers, on PYTHONPATH (cache_bench.py puts it there)

        self.master, self.metadata, self.num_workers = master, metadata, num_workers
        self.store = store  # the processes: only the parent's tier holds them
        self.completions = Completions(mooncake_peer.MooncakeConnector(
            master, metadata, num_workers=num_workers))

    def spawn_spec(self):
        return ("cache_backends", "Mooncake", (self.master, self.metadata, self.num_workers))

    def _call(self, method, keys, *rest):
        ok, error, results = self.completions.call(method, list(keys), *rest, timeout=60.0)
        return ok, error, per_key(ok, results, len(keys))

    def lookup(self, keys):
        return self._call("submit_batch_exists", keys)

    def get(self, keys, bufs):
        return self._call("submit_batch_get", keys, [memoryview(b) for b in bufs])

    def set(self, keys, bufs):
        return self._call("submit_batch_set", keys, [memoryview(b) for b in bufs])

    def engine_counters(self):
        return {}

    def server_counters(self):
        m = self.store.metrics() if self.store else {}
        cap = m.get("total_capacity_bytes", 0)
        return {"evicted_objects": m.get("evicted_key_count", 0), "expired_objects": 0,
                "objects": m.get("key_count", 0),
                "data_used_pct": 100 * m.get("allocated_bytes", 0) // cap if cap else 0,
                "stop_writes": False}

    def debris(self):
        return None  # one object per key

    def cleanup(self):
        if self.store:
            self.store.clear()

    def close(self):
        self.completions.close()


def redis_call(port, *words, timeout=10.0):
    """One RESP command; returns the reply (a bulk string's payload, or the line)."""
    msg = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in map(str, words))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(msg.encode())
        data = b""
        while b"\r\n" not in data:
            data += s.recv(65536) or _closed()
        head, _, rest = data.partition(b"\r\n")
        if not head.startswith(b"$"):
            return head.decode()
        size = int(head[1:])
        while len(rest) < size + 2:
            rest += s.recv(65536) or _closed()
        return rest[:size].decode()


def _closed():
    raise ConnectionError("redis-server closed the connection")


def redis_info(port):
    """INFO as {field: value}."""
    return dict(line.split(":", 1) for line in redis_call(port, "INFO").splitlines()
                if ":" in line and not line.startswith("#"))


def redis_dbsize(info):
    """Keys of db0 from INFO's keyspace line 'db0:keys=N,expires=...'."""
    fields = dict(kv.split("=", 1) for kv in info.get("db0", "").split(",") if "=" in kv)
    return int(fields.get("keys", 0))
