"""Per-operation metrics (spec 4.8), exported where each LMCache surface looks.

- The RemoteConnector and storage plugins live in LMCache's engine process,
  whose metrics are Prometheus collectors in prometheus_client's default
  registry (lmcache/observability.py): `Prometheus` registers there.
- The multiprocess L2 adapters live in `lmcache server`, which exports
  OpenTelemetry instruments (lmcache/v1/mp_observability): `OpenTelemetry`
  creates instruments on the global meter provider.

Both have the specification's five metrics; OpenTelemetry spells them its way
(dots, no _total, units apart): aerospike_op_total = aerospike.op,
aerospike_op_latency_seconds = aerospike.op.latency (s), aerospike_segment_count
= aerospike.segment.count, aerospike_segment_bytes = aerospike.segment.bytes (By),
aerospike_concurrent_in_flight = aerospike.concurrent_in_flight.

With `metrics: false`, or without the library, `disabled()` is used: every
call is a no-op. Metrics never carry keys, only op and result labels.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

# Ops: get, put, exists, batched_get, batched_put, batched_contains,
# batched_async_contains, remove, lookup, store, load, delete.
# Results: hit, miss, ok, timeout, record_too_big, busy, full, error. A store
# dropped after the engine's backpressure (stop-writes, device overload) counts
# as full or busy: the drops by cause.
_RESULT_OF_STATUS = {"ETIMEOUT": "timeout", "ETOO_BIG": "record_too_big", "EBUSY": "busy",
                     "EFULL": "full"}

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
SEGMENT_COUNT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
SEGMENT_BYTES_BUCKETS = tuple(float(1 << s) for s in range(10, 27, 2))  # 1 KiB .. 64 MiB


def result_of(error: str) -> str:
    """The result label of a failed op, from its error text ("ETIMEOUT: ...")."""
    return _RESULT_OF_STATUS.get(error.split(":", 1)[0], "error")


def dropped(error: str) -> bool:
    """Whether a failed store was dropped by the engine's backpressure: the server
    refused it for space or load for all of backpressure_ms, or the namespace was
    known to be full. The engine counts it (stats()) and warns at most once a
    minute; the surfaces do not raise it into LMCache nor log it per store."""
    return error.startswith(("EFULL:", "EBUSY:"))


class Metrics:
    """The interface every surface calls; this base records nothing."""

    def op(self, op: str, started: float, results: Iterable[str]) -> None:
        """One call of `op` that began at `started` (time.perf_counter()),
        with one result label per key (or one for the call)."""

    def segments(self, plans: Iterable[tuple[int, int, int]]) -> None:
        """The engine's plan (nseg, seg_b, last_b) of each stored chunk."""

    def in_flight(self, delta: int) -> None:
        """Chunks entering (+) or leaving (-) the engine."""

    def timed(self, op: str) -> "_Timer":
        return _Timer(self, op)


class _Timer:
    """`with metrics.timed("remove") as t: ...; t.results = ["ok"]`; an
    exception records its result label instead."""

    def __init__(self, metrics: Metrics, op: str) -> None:
        self.metrics, self.name, self.results = metrics, op, ["ok"]

    def __enter__(self) -> "_Timer":
        self.started = time.perf_counter()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if exc is not None:
            self.results = [result_of(f"{getattr(exc, 'name', '')}:")]
        self.metrics.op(self.name, self.started, self.results)


_DISABLED = Metrics()


def disabled() -> Metrics:
    return _DISABLED


class _Counting(Metrics):
    """Shared logic: count results by label, observe latency, plans, in-flight,
    through the four instrument callables of a library."""

    def __init__(self, add: Callable, latency: Callable, nseg: Callable, seg_bytes: Callable,
                 flight: Callable) -> None:
        self._add, self._latency, self._nseg = add, latency, nseg
        self._seg_bytes, self._flight = seg_bytes, flight

    def op(self, op: str, started: float, results: Iterable[str]) -> None:
        counts: dict[str, int] = {}
        for r in results:
            counts[r] = counts.get(r, 0) + 1
        for result, n in counts.items():
            self._add(op, result, n)
        self._latency(op, time.perf_counter() - started)

    def segments(self, plans: Iterable[tuple[int, int, int]]) -> None:
        for nseg, seg_b, last_b in plans:
            self._nseg(nseg)
            for _ in range(nseg - 1):
                self._seg_bytes(seg_b)
            self._seg_bytes(last_b)

    def in_flight(self, delta: int) -> None:
        self._flight(delta)


_lock = threading.Lock()
_prometheus: Metrics | None = None
_otel: Metrics | None = None


def prometheus(enabled: bool = True) -> Metrics:
    """The process's Prometheus metrics (registered once: a collector name may
    be registered only once per registry), or disabled()."""
    global _prometheus
    if not enabled:
        return _DISABLED
    with _lock:
        if _prometheus is None:
            _prometheus = _make_prometheus() or _DISABLED
        return _prometheus


def _make_prometheus() -> Metrics | None:
    try:
        import prometheus_client as p
    except ImportError:
        return None
    ops = p.Counter("aerospike_op_total", "lmcache-aerospike operations by result",
                    ["op", "result"])
    latency = p.Histogram("aerospike_op_latency_seconds", "lmcache-aerospike operation latency",
                          ["op"], buckets=LATENCY_BUCKETS)
    nseg = p.Histogram("aerospike_segment_count", "records per stored chunk",
                       buckets=SEGMENT_COUNT_BUCKETS)
    seg_bytes = p.Histogram("aerospike_segment_bytes", "bytes per stored record",
                            buckets=SEGMENT_BYTES_BUCKETS)
    # livesum: LMCache may run prometheus_client in multiprocess mode.
    flight = p.Gauge("aerospike_concurrent_in_flight", "chunks in the engine now",
                     multiprocess_mode="livesum")
    return _Counting(lambda op, r, n: ops.labels(op, r).inc(n),
                     lambda op, s: latency.labels(op).observe(s),
                     nseg.observe, seg_bytes.observe, flight.inc)


def opentelemetry(enabled: bool = True) -> Metrics:
    """Instruments on OpenTelemetry's global meter provider, or disabled()."""
    global _otel
    if not enabled:
        return _DISABLED
    with _lock:
        if _otel is None:
            _otel = _make_otel() or _DISABLED
        return _otel


def _make_otel() -> Metrics | None:
    try:
        from opentelemetry import metrics as otel
    except ImportError:
        return None
    meter = otel.get_meter("lmcache_aerospike")
    ops = meter.create_counter("aerospike.op", unit="{op}",
                               description="lmcache-aerospike operations by result")
    latency = meter.create_histogram("aerospike.op.latency", unit="s",
                                     description="lmcache-aerospike operation latency")
    nseg = meter.create_histogram("aerospike.segment.count", unit="{record}",
                                  description="records per stored chunk")
    seg_bytes = meter.create_histogram("aerospike.segment.bytes", unit="By",
                                       description="bytes per stored record")
    flight = meter.create_up_down_counter("aerospike.concurrent_in_flight", unit="{chunk}",
                                          description="chunks in the engine now")
    return _Counting(lambda op, r, n: ops.add(n, {"op": op, "result": r}),
                     lambda op, s: latency.record(s, {"op": op}),
                     nseg.record, seg_bytes.record, flight.add)
