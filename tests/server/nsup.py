"""The namespace supervisor (NSUP) and the stop-writes evaluation: the server
threads that make a namespace behave as a full cache.

Rules follow as/src/base/nsup.c of CE 8.1.2.0 (and cf/src/linear_hist.c for
the eviction histogram); each function names the one it copies. Everything
here runs with Store.lock held, from the threads `start` creates:

* one NSUP thread per namespace, waking every second (run_expire_or_evict):
  with nsup-period > 0 it first evicts when a new evict void time was
  published (evict), else, at most once per nsup-period, checks the eviction
  trigger (eval_hwm_breached) and either publishes an evict void time found
  from a histogram of void times (find_evict_void_time), or expires records
  whose void time has passed (expire). The real server publishes the evict
  void time through SMD and evicts on the next wake-up: the same one-second
  lag is kept here.
* one thread evaluating stop-writes for every namespace each
  `period` seconds (run_stop_writes, eval_stop_writes). The real
  EVAL_STOP_WRITES_PERIOD is 10 s (nsup.c:126); the fixture default is 1 s so
  tests are quick (`--stop-writes-period 10` for the real pace).
"""

import threading
import time

from .store import now_void_time

NSUP_WAKE_SECONDS = 1  # run_expire_or_evict: sleep(1)
EVAL_STOP_WRITES_PERIOD = 1  # the real server's is 10 s (nsup.c EVAL_STOP_WRITES_PERIOD)
NO_THRESHOLD = 0xFFFFFFFF  # linear_hist_get_threshold_for_subtotal: looped past all buckets


# -- stop-writes ------------------------------------------------------------


def eval_stop_writes(ns):
    """nsup.c eval_stop_writes, for the fixture's data: stop writes while data
    available is below stop-writes-avail-pct (0 turns it off), or data used is
    at or above stop-writes-used-pct (0 turns it off). System memory and index
    memory are not modelled (stop-writes-sys-memory-pct is reported only); the
    fixture-stop-writes command holds it set, as a namespace full by those would."""
    cfg = ns.config
    breached = ns.avail_pct() < cfg.stop_writes_avail_pct
    if cfg.stop_writes_used_pct != 0 and ns.used_pct() >= cfg.stop_writes_used_pct:
        breached = True
    ns.stop_writes = breached or ns.forced_stop_writes
    ns.counts["stop_writes_evals"] += 1
    return breached


# -- expire and evict -----------------------------------------------------------


def update_stats(ns, n_0_void_time, n_expired, n_evicted, start):
    """nsup.c update_stats: non_expirable_objects is what the last cycle saw."""
    ns.non_expirable_objects = n_0_void_time
    ns.expired_objects += n_expired
    ns.evicted_objects += n_evicted
    ns.nsup_cycle_duration = int(time.monotonic() - start)
    deleted = n_expired + n_evicted
    old_objects = len(ns.records) + deleted
    ns.nsup_cycle_deleted_pct = 0.0 if deleted == 0 else deleted * 100.0 / old_objects


def expire(ns):
    """nsup.c expire / expire_reduce_cb: drop records whose void time has passed."""
    start = time.monotonic()
    now = now_void_time()
    n_0 = 0
    doomed = []
    for digest, rec in ns.records.items():
        if rec.void_time == 0:
            n_0 += 1
        elif now > rec.void_time:
            doomed.append(digest)
    for digest in doomed:
        ns.delete(digest)
    ns.counts["expire_cycles"] += 1
    update_stats(ns, n_0, len(doomed), 0, start)


def evict(ns):
    """nsup.c evict / evict_reduce_cb: when the published (SMD) evict void time
    is newer than the one last used, drop every record with a void time below
    it (records that never expire stay). Return True when it ran."""
    evict_void_time = ns.evict_void_time
    smd_evict_void_time = ns.smd_evict_void_time
    if evict_void_time >= smd_evict_void_time:
        return False
    start = time.monotonic()
    now = now_void_time()
    ns.evict_ttl = smd_evict_void_time - now
    if now > smd_evict_void_time:
        # "ignoring evict-void-time in the past"
        ns.evict_void_time = smd_evict_void_time
        return False
    n_0 = 0
    doomed = []
    for digest, rec in ns.records.items():
        if rec.void_time == 0:
            n_0 += 1
        elif smd_evict_void_time > rec.void_time:
            doomed.append(digest)
    for digest in doomed:
        ns.delete(digest)
    ns.counts["evictions"] += 1
    update_stats(ns, n_0, 0, len(doomed), start)
    ns.evict_void_time = smd_evict_void_time
    return True


def eval_hwm_breached(ns):
    """nsup.c eval_hwm_breached: data used pct at or above evict-used-pct
    (0 = off). Index and sindex memory triggers are not modelled."""
    cfg_pct = ns.config.evict_used_pct
    ns.hwm_breached = cfg_pct != 0 and ns.used_pct() >= cfg_pct
    return ns.hwm_breached


def evict_histogram(ns, now):
    """find_evict_void_time's histogram (linear_hist.c): (counts by bucket,
    bucket width). ttl_range = max void time - now (get_ttl_range);
    bucket_width = ceil(ttl_range / evict-hist-buckets), at least 1
    (linear_hist_clear); a point at or before `now` goes to bucket 0, one past
    the end to the last bucket (linear_hist_insert_data_point). Records that
    never expire are not eligible."""
    n_buckets = ns.config.evict_hist_buckets
    ttl_range = ns.max_void_time - now if ns.max_void_time > now else 0
    width = (ttl_range + (n_buckets - 1)) // n_buckets or 1
    counts = {}
    for rec in ns.records.values():
        if rec.void_time == 0:
            continue
        offset = (rec.void_time - now) & 0xFFFFFFFF
        if offset & 0x80000000:
            offset -= 1 << 32  # int32_t offset = (int32_t)(point - h->start)
        bucket = 0
        if offset > 0:
            bucket = min(offset // width, n_buckets - 1)
        counts[bucket] = counts.get(bucket, 0) + 1
    return counts, width


def threshold_for_subtotal(counts, start, width, subtotal):
    """linear_hist_get_threshold_for_subtotal: (threshold value, records below
    the threshold bucket). The threshold bucket is the first in which the
    running count exceeds `subtotal`; NO_THRESHOLD when none does."""
    count = 0
    for i in sorted(counts):  # empty buckets never change the running count
        count += counts[i]
        if count > subtotal:
            return start + i * width, count - counts[i]
    return NO_THRESHOLD, count


def find_evict_void_time(ns, now):
    """nsup.c find_evict_void_time: the void time below which records are
    evicted, `now` to expire instead, or 0 to do nothing."""
    counts, width = evict_histogram(ns, now)
    total = sum(counts.values())
    target = total * ns.config.evict_tenths_pct // 1000  # linear_hist_get_threshold_for_fraction
    ns.counts["evict_finds"] += 1
    value, subtotal = threshold_for_subtotal(counts, now, width, target)
    if value == NO_THRESHOLD:
        if subtotal == 0:
            ns.counts["evict_none_eligible"] += 1  # "no records eligible for eviction"
        else:
            ns.counts["evict_all_refusals"] += 1  # "would evict all ... - not evicting!"
        return 0
    if subtotal == 0:
        # "no records below eviction void-time ... count > target": the lowest
        # bucket alone holds more than the target, so nothing is evicted. If
        # it is the first bucket (threshold == now), expire instead.
        ns.counts["evict_refusals"] += 1
        return now if value == now else 0
    return value


def nsup_tick(ns, mono_seconds, store=None):
    """One wake-up of nsup.c run_expire_or_evict. `store` publishes the evict
    void time (Store.smd_set / smd_delete: every node of a cluster); without
    one it goes to `ns` alone."""
    ns.counts["nsup_wakes"] += 1
    period = ns.config.nsup_period
    if period == 0:
        return
    if evict(ns):
        return
    if mono_seconds - ns.nsup_last_time < period:
        return
    ns.nsup_last_time = mono_seconds
    if eval_hwm_breached(ns):
        now = now_void_time()
        evict_void_time = find_evict_void_time(ns, now)
        if evict_void_time > now:
            if evict_void_time < ns.evict_void_time:
                # "evict-void-time < previous": the SMD item is deleted first,
                # and nsup_smd_accept_cb zeroes both.
                if store is None:
                    ns.evict_void_time = 0
                    ns.smd_evict_void_time = 0
                else:
                    store.smd_delete(ns.config.name)
            # Published through SMD (nsup_smd_accept_cb sets smd_evict_void_time);
            # evict() picks it up on the next wake-up.
            if store is None:
                ns.smd_evict_void_time = evict_void_time
            else:
                store.smd_set(ns.config.name, evict_void_time)
            return
        if evict_void_time == 0:
            return  # no need to expire
        # else evict_void_time == now: expire
    expire(ns)


# -- threads --------------------------------------------------------------------


def _run_nsup(store, name, stopping, running):
    while not stopping.wait(NSUP_WAKE_SECONDS):
        if not running():
            continue  # a paused node's threads are frozen (SIGSTOP)
        with store.lock:
            ns = store.get(name)  # fixture-reset replaces the Namespace object
            if ns is not None:
                nsup_tick(ns, int(time.monotonic()), store)


def _run_stop_writes(store, period, stopping, running):
    while not stopping.wait(period):
        if not running():
            continue
        with store.lock:
            for ns in store.namespaces.values():
                eval_stop_writes(ns)


def start(store, stop_writes_period=EVAL_STOP_WRITES_PERIOD, running=lambda: True):
    """Start the NSUP threads (one per namespace) and the stop-writes thread;
    return an Event that stops them when set. They skip their work while
    `running()` is false."""
    stopping = threading.Event()
    for name in store.names():
        threading.Thread(target=_run_nsup, args=(store, name, stopping, running),
                         name="nsup-" + name, daemon=True).start()
    threading.Thread(target=_run_stop_writes,
                     args=(store, stop_writes_period, stopping, running),
                     name="stop-writes", daemon=True).start()
    return stopping
