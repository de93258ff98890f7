"""One cache run of bench/cache/cache_bench.py: a trace replayed through one tier by several
writer processes, the exact LRU simulation fed the same requests, a row per interval,
and the end-of-run checks.

A dispatcher walks the trace and hands each request to its writer (a conversation
always goes to the same writer, so its turns run in order) through queues of depth 2,
which keeps the writers within a few requests of the trace order; the simulation
serves each request as it is dispatched. Each writer is a process of its own with its
own client of the tier (as each vLLM worker or `lmcache server` of a deployment is),
rebuilt there from the tier's spawn_spec(). A writer serves a request as LMCache would:
look up every chunk, load the leading run of present chunks (checking every byte), and
store every chunk that was not present, or that vanished before it was loaded; it
sends back the outcome, the chunks it stored and its client's counters, which a
collector thread tallies against the simulation's outcome for the same request.

A writer given a wall clock of its own (--writer-clock W:OFFSET) runs under faketime
and reaches its queues through a socket (bench/cache/cache_faketime.py). Events (a node
killed, paused, restarted: bench/cache/cache_events.py) run on a thread of the parent from
the run's start, their share of the run being its requests, or else its duration.
"""

import collections
import dataclasses
import importlib
import multiprocessing as mp
import re
import threading
import time

from cache_backends import Hung
from cache_faketime import FaketimeProcess
from cache_figures import put_times
from cache_lru import ExactLRU, Outcome, fifths, leading_run
from cache_payload import Payloads
from cache_trace import Trace

OUTCOME_FIELDS = [f.name for f in dataclasses.fields(Outcome)]


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ------------------------------------------------------------------ one request

class Writer:
    """A writer's state: its reusable chunk buffers and its log of stores."""

    def __init__(self, backend, payloads, batch_chunks, tokens_per_chunk, store_log):
        self.backend = backend
        self.payloads = payloads
        self.bufs = [payloads.buffer() for _ in range(batch_chunks)]
        # A tier may want smaller loads (Redis: see cache_backends.Redis.max_get_chunks).
        self.get_chunks = min(batch_chunks, getattr(backend, "max_get_chunks", 0) or batch_chunks)
        self.tokens_per_chunk = tokens_per_chunk
        self.store_log = store_log  # [(key, nbytes)] of stores that succeeded
        self.bytes_loaded = self.bytes_stored = 0
        self.set_seconds = []  # how long each set batch took
        self.set_errors = {}  # failed set batches by error (keys left out)

    def serve(self, keys):
        out = Outcome(chunks=len(keys), tokens=len(keys) * self.tokens_per_chunk)
        try:
            ok, _, present = self.backend.lookup(keys)
        except Hung:
            out.hung += 1
            present, ok = [False] * len(keys), True
        out.errors += not ok
        out.chunk_hits = sum(present)
        loaded, lost = self.load(keys[:leading_run(present)], out)
        out.prefix_tokens = loaded * self.tokens_per_chunk
        self.store([k for k, p in zip(keys, present) if not p] + lost, out)
        return out

    def _batches(self, keys, n=0):
        n = n or len(self.bufs)
        for i in range(0, len(keys), n):
            yield keys[i:i + n], self.bufs[:len(keys[i:i + n])]

    def load(self, keys, out):
        """Loads the prefix; returns (leading chunks loaded intact, keys that vanished
        between lookup and load). Stops after the batch where the prefix breaks."""
        loaded, lost = 0, []
        for batch, bufs in self._batches(keys, self.get_chunks):
            try:
                ok, _, hits = self.backend.get(batch, bufs)
            except Hung:
                # The client may still write these buffers: never reuse them.
                self.bufs[:len(bufs)] = [self.payloads.buffer() for _ in bufs]
                out.hung += 1
                lost += batch
                break
            out.errors += not ok
            intact = True
            for key, buf, hit in zip(batch, bufs, hits):
                if not hit:
                    out.lost += 1
                    lost.append(key)
                    intact = False
                    continue
                self.bytes_loaded += len(buf)
                wrong = self.payloads.wrong_bytes(key, buf)
                out.wrong_bytes += wrong
                out.wrong_chunks += wrong > 0
                intact = intact and not wrong
                loaded += intact
            if not intact:
                break
        return loaded, lost

    def store(self, keys, out):
        for batch, bufs in self._batches(keys):
            for key, buf in zip(batch, bufs):
                self.payloads.fill(key, buf)
            t0 = time.monotonic()
            try:
                ok, error, stored = self.backend.set(batch, bufs)
            except Hung:
                self.bufs[:len(bufs)] = [self.payloads.buffer() for _ in bufs]
                out.hung += 1
                out.store_failed += len(batch)
                self._set_failed("hung")
                continue
            self.set_seconds.append(time.monotonic() - t0)
            out.errors += not ok
            if not ok:
                self._set_failed(error)
            for key, buf, done in zip(batch, bufs, stored):
                if done:
                    out.stored_ok += 1
                    self.bytes_stored += len(buf)
                    self.store_log.append((key, len(buf)))
                else:
                    out.store_failed += 1

    def _set_failed(self, error):
        # An engine error names the key and its figures: one entry per kind of error.
        what = re.sub(r"\d+", "N", re.sub(r'"[^"]*"', '"…"', error or "failed"))[:100]
        self.set_errors[what] = self.set_errors.get(what, 0) + 1


# ---------------------------------------------------------------------- tallies

class Tally:
    """Outcome counters of the tier ("tier.*") and of the simulation on the same
    requests ("lru.*"), the hot set's apart ("hot_tier.*", "hot_lru.*"), per interval
    and in total."""

    def __init__(self):
        self.lock = threading.Lock()
        self.interval = collections.Counter()
        self.total = collections.Counter()

    def add(self, req, tier, lru, late=False):
        """late: after the first budget's worth was stored (the warm reads cache_fill.py
        counts: a hot re-read hits when its whole prefix loaded)."""
        scope = "hot_" if req.hot else ""
        c = collections.Counter({f"{scope}requests": 1})
        for side, outcome in (("tier", tier), ("lru", lru)):
            for name in OUTCOME_FIELDS:
                c[f"{scope}{side}.{name}"] = getattr(outcome, name)
            if req.hot and late:
                c[f"late_hot_{side}.whole"] = int(outcome.prefix_tokens == outcome.tokens)
        c["late_hot_requests"] = int(req.hot and late)
        with self.lock:
            self.interval.update(c)
            self.total.update(c)

    def take_interval(self):
        with self.lock:
            out, self.interval = self.interval, collections.Counter()
        return out


def ratios(c, scope=""):
    """Hit ratios of a tally: by chunk and by prefix token, tier and simulation."""
    def r(a, b):
        return c[a] / c[b] if c[b] else None
    return {f"{scope}{side}_{what}": r(f"{scope}{side}.{num}", f"{scope}{side}.{den}")
            for side in ("tier", "lru")
            for what, num, den in (("chunk_hit", "chunk_hits", "chunks"),
                                   ("prefix_hit", "prefix_tokens", "tokens"))}


# ------------------------------------------------------------------------ a run

@dataclasses.dataclass
class Limits:
    requests: int = 0  # stop after this many requests (0: no limit)
    duration_s: float = 0.0  # stop dispatching after this long (0: no limit)
    interval_s: float = 10.0
    debris_every: int = 0  # a sweep every this many intervals (0: at the end only)


class Run:
    """Replays `config`'s trace through `backend` within `limits`; `on_row` gets each
    interval's row as it is taken."""

    def __init__(self, backend, config, limits, batch_bytes, nonce, on_row=print, events=None,
                 clocks=None):
        self.backend, self.config, self.limits, self.on_row = backend, config, limits, on_row
        self.events = events  # cache_events.Events, or None
        self.clocks = clocks or {}  # writer -> faketime offset
        self.payloads = Payloads(config.chunk_bytes, nonce)
        self.batch_chunks = max(1, batch_bytes // config.chunk_bytes)
        self.lru = ExactLRU(config.budget_bytes)
        self.tally = Tally()
        self.store_log = []
        self.dispatched = 0
        self.rows = []
        self.writers = []
        self.fifth_wrong_bytes = 0  # found by the end-of-run reads
        self.failure = None  # a writer's unexpected exception
        self.hot_keys = {}  # hot conversation -> its keys
        self.writer_extra = {}  # writer -> its set timings and errors, sent at its end

    def execute(self):
        """Runs to the end; returns the run's document (rows, totals, checks)."""
        ctx = mp.get_context("spawn")
        queues = [ctx.Queue(maxsize=2) for _ in range(self.config.writers)]
        results = ctx.Queue()
        spec = (self.backend.spawn_spec(), self.config.chunk_bytes, self.payloads.nonce,
                self.batch_chunks, self.config.tokens_per_chunk)
        procs = [FaketimeProcess("cache_run", "_writer_main", (w, spec), [q, results],
                                 self.clocks[w]) if w in self.clocks else
                 ctx.Process(target=_writer_main, args=(w, spec, q, results), daemon=True)
                 for w, q in enumerate(queues)]
        for p in procs:
            p.start()
        # The parent's writer only reads the fifths back at the end.
        self.writers = [Writer(self.backend, self.payloads, self.batch_chunks,
                               self.config.tokens_per_chunk, [])]
        self.pending, self.engines, self.bytes = {}, {}, {"loaded": 0, "stored": 0}
        self.t0 = time.monotonic()
        self.last = {"engine": {}, "server": self.backend.server_counters(), "t": 0.0,
                     "loaded": 0, "stored": 0}
        threads = [threading.Thread(target=self._dispatch, args=(queues,), daemon=True),
                   threading.Thread(target=self._collect, args=(results, len(procs)),
                                    daemon=True)]
        for t in threads:
            t.start()
        if self.events:
            self.events.start(self.t0)
        self._intervals(threads)
        for p in procs:
            p.join(timeout=30)
        self.event_records = self.events.finish() if self.events else []
        if self.failure:
            raise RuntimeError(f"a writer failed: {self.failure}")
        return self._finish()

    def _dispatch(self, queues):
        for req in Trace(self.config):
            elapsed = time.monotonic() - self.t0
            if (self.limits.requests and req.index >= self.limits.requests) or \
                    (self.limits.duration_s and elapsed >= self.limits.duration_s) or \
                    self.failure:
                break
            sim = self.lru.serve(req.keys, self.config.chunk_bytes, self.config.tokens_per_chunk)
            if req.hot:
                self.hot_keys[req.user] = list(req.keys)
            with self.tally.lock:
                self.pending[req.index] = (req, sim)
            queues[req.writer].put((req.index, list(req.keys)))
            self.dispatched += 1
        for q in queues:
            q.put(None)

    def _collect(self, results, writers):
        """Tallies what the writers send back until every one has said it is done."""
        while writers:
            kind, w, *rest = results.get()
            if kind == "done":
                writers -= 1
                self.writer_extra[w] = rest[0] if rest else {}
                continue
            if kind == "failed":
                self.failure = rest[0]
                continue
            index, outcome, stored, loaded_bytes, engine = rest
            with self.tally.lock:
                req, sim = self.pending.pop(index)
            self.tally.add(req, outcome, sim, late=self.bytes["stored"] >= self.config.budget_bytes)
            self.store_log.extend(stored)
            self.bytes["loaded"] += loaded_bytes
            self.bytes["stored"] += sum(n for _, n in stored)
            self.engines[w] = engine

    def progress(self):
        """How much of the run is done: of its requests, or else of its duration."""
        if self.limits.requests:
            return self.dispatched / self.limits.requests
        return (time.monotonic() - self.t0) / self.limits.duration_s if self.limits.duration_s \
            else 0.0

    def engine_counters(self):
        """The writers' engine counters, summed (each writer's latest)."""
        out = collections.Counter()
        for counters in list(self.engines.values()):
            out.update({k: int(v) for k, v in counters.items()})
        return dict(out)

    def _intervals(self, threads):
        n = 0
        while any(t.is_alive() for t in threads):
            deadline = self.t0 + (n + 1) * self.limits.interval_s
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
            n += 1
            every = self.limits.debris_every
            self._row(debris=bool(every) and n % every == 0)

    def _row(self, debris=False):
        """One interval's row: the tally since the last row, counter deltas, RSS."""
        c = self.tally.take_interval()
        now = time.monotonic() - self.t0
        engine, server = self.engine_counters(), self.backend.server_counters()
        loaded, stored = self.bytes["loaded"], self.bytes["stored"]
        seconds = max(now - self.last["t"], 1e-9)
        row = {"t_s": round(now, 1), "requests": c["requests"] + c["hot_requests"],
               # Counts cover the hot re-reads too; the ratios keep them apart.
               **{k: c[f"tier.{k}"] + c[f"hot_tier.{k}"] for k in OUTCOME_FIELDS
                  if k not in ("chunks", "tokens")},
               "engine": {k: v - self.last["engine"].get(k, 0) for k, v in engine.items()},
               "evicted": server["evicted_objects"] - self.last["server"]["evicted_objects"],
               "expired": server["expired_objects"] - self.last["server"]["expired_objects"],
               "objects": server["objects"], "used_pct": server["data_used_pct"],
               "stop_writes": server["stop_writes"],
               "load_gbps": (loaded - self.last["loaded"]) / seconds / 1e9,
               "store_gbps": (stored - self.last["stored"]) / seconds / 1e9,
               "rss_kib": rss_kib(), **ratios(c), **ratios(c, "hot_")}
        row["debris"] = self.backend.debris() if debris else None
        self.last = {"engine": engine, "server": server, "t": now, "loaded": loaded,
                     "stored": stored}
        self.rows.append(row)
        self.on_row(row)

    # -------------------------------------------------------------- the end

    def _finish(self):
        budget = self.config.budget_bytes
        newest, oldest = fifths(self.store_log, budget)
        lru_newest, lru_oldest = fifths(self.lru.store_log, budget)
        checks = {"newest_fifth": self.readable(newest), "oldest_fifth": self.readable(oldest),
                  "fifth_wrong_bytes": self.fifth_wrong_bytes,
                  "lru_newest_fifth": _share(lru_newest, self.lru),
                  "lru_oldest_fifth": _share(lru_oldest, self.lru)}
        c = self.tally.total
        rss = [r["rss_kib"] for r in self.rows]
        totals = {
            "requests": self.dispatched, "seconds": round(time.monotonic() - self.t0, 1),
            **{f"{scope}{side}.{k}": c[f"{scope}{side}.{k}"] for k in OUTCOME_FIELDS
               for scope in ("", "hot_") for side in ("tier", "lru")},
            **ratios(c), **ratios(c, "hot_"), **checks,
            "engine": _sum_rows(self.rows, "engine"),
            "evicted": sum(r["evicted"] for r in self.rows),
            "expired": sum(r["expired"] for r in self.rows),
            "lru_evicted": self.lru.evicted,
            "distinct_bytes": len({k for k, _ in self.lru.store_log}) * self.config.chunk_bytes,
            "rss_kib": {"first": rss[0], "last": rss[-1], "max": max(rss)} if rss else None,
            "debris": self.backend.debris(),
            "warm": {"reads_after_first_budget": c["late_hot_requests"],
                     "hit": c["late_hot_tier.whole"], "lru_hit": c["late_hot_lru.whole"],
                     "conversations": len(self.hot_keys),
                     "alive": sum(self.readable(k) == 1.0 for k in self.hot_keys.values())},
            "engines_by_writer": {str(w): e for w, e in sorted(self.engines.items())},
            # The slowest set batch, per writer and overall (cache_fill.py's slowest put).
            "sets": put_times({w: x.get("set_seconds", []) for w, x in self.writer_extra.items()}),
            "set_errors": _merged(x.get("set_errors", {}) for x in self.writer_extra.values()),
            "events": self.event_records,
        }
        return {"rows": self.rows, "totals": totals}

    def readable(self, keys):
        """Share of `keys` still present and intact (a lookup, then a load of what is
        present: a RESP GET of a missing key would hang)."""
        if not keys:
            return None
        w = self.writers[0]
        good = 0
        for batch, bufs in w._batches(keys, w.get_chunks):
            try:
                _, _, present = self.backend.lookup(batch)
                hits = [k for k, p in zip(batch, present) if p]
                _, _, got = self.backend.get(hits, bufs[:len(hits)]) if hits else (0, 0, [])
            except Hung:
                w.bufs = [self.payloads.buffer() for _ in w.bufs]
                continue
            for key, buf, hit in zip(hits, bufs, got):
                wrong = self.payloads.wrong_bytes(key, buf) if hit else 0
                self.fifth_wrong_bytes += wrong
                good += hit and not wrong
        return good / len(keys)


def _writer_main(w, spec, requests, results):
    """A writer process: its own client of the tier, serving the requests its queue
    brings until None; every outcome goes back with what it stored, the bytes it
    loaded and the client's counters."""
    (module, cls, args), chunk_bytes, nonce, batch_chunks, tokens_per_chunk = spec
    try:
        backend = getattr(importlib.import_module(module), cls)(*args)
        writer = Writer(backend, Payloads(chunk_bytes, nonce), batch_chunks, tokens_per_chunk,
                        [])
    except Exception as e:  # noqa: BLE001 (reported to the parent, which raises)
        results.put(("failed", w, repr(e)))
        results.put(("done", w))
        return
    failed = False
    while (item := requests.get()) is not None:
        if failed:
            continue  # keep taking, so that the dispatcher never blocks on this queue
        index, keys = item
        loaded = writer.bytes_loaded
        try:
            outcome = writer.serve(keys)
        except Exception as e:  # noqa: BLE001
            failed = True
            results.put(("failed", w, repr(e)))
            continue
        stored, writer.store_log[:] = list(writer.store_log), []
        results.put(("req", w, index, outcome, stored, writer.bytes_loaded - loaded,
                     backend.engine_counters()))
    backend.close()
    results.put(("done", w, {"set_seconds": [round(t, 4) for t in writer.set_seconds],
                             "set_errors": writer.set_errors}))


def _merged(counts):
    out = collections.Counter()
    for c in counts:
        out.update(c)
    return dict(out)


def _share(keys, lru):
    return sum(k in lru for k in keys) / len(keys) if keys else None


def _sum_rows(rows, name):
    out = collections.Counter()
    for r in rows:
        out.update(r[name])
    return dict(out)
