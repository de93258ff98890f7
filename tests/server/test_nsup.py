"""The test server as a full cache: stop-writes, NSUP expiry and eviction,
read-touch and device overload, through the official Python client over real
sockets (and, for the exact histogram rules, the fixture's own functions).

Each test states the CE 8.1.2.0 rule it checks (as/src/base/nsup.c,
cf/src/linear_hist.c, as/src/transaction/read_touch.c, as/src/storage/storage.c).
The server runs with small namespaces and nsup-period 1 so every test takes a
few seconds; NSUP wakes every second and evicts one wake-up after it found an
evict void time, so eviction waits poll for up to about ten seconds.
"""

import time

import pytest

aerospike = pytest.importorskip("aerospike")
from aerospike import exception as ex  # noqa: E402

from tests.server import nsup  # noqa: E402
from tests.server.launch import running  # noqa: E402
from tests.server.store import (  # noqa: E402
    CITRUSLEAF_EPOCH,
    Namespace,
    Record,
    now_void_time,
    parse_namespace_spec,
)

MiB = 1 << 20
VALUE = 30_000  # bytes per record: 20 of them are about 57 % of 1 MiB
EVICTING = "max-record-size=1M,nsup-period=1,data-size=1M,evict-used-pct=50,stop-writes-used-pct=90"
NAMESPACES = [
    "sw:max-record-size=1M,nsup-period=1,data-size=1M",
    "exp:nsup-period=1,data-size=1M",
    "evb:%s,evict-tenths-pct=300,evict-hist-buckets=100" % EVICTING,
    "evs:%s,evict-tenths-pct=100" % EVICTING,
    "evr:%s,evict-tenths-pct=500" % EVICTING,
    "eva:%s,evict-tenths-pct=1000" % EVICTING,
    "rt:nsup-period=1",
    "dev:storage-engine=device,data-size=256M,max-record-size=1M,nsup-period=1,device-write-bps=0",
]


@pytest.fixture(scope="module")
def server_port():
    args = []
    for spec in NAMESPACES:
        args += ["--namespace", spec]
    with running(args=args) as port:
        yield port


@pytest.fixture(scope="module")
def shared_client(server_port):
    c = aerospike.client({"hosts": [("127.0.0.1", server_port)]}).connect()
    yield c
    c.close()


@pytest.fixture
def client(shared_client):
    assert info(shared_client, "fixture-reset") == "ok"
    return shared_client


def info(client, command):
    try:
        answer = client.info_random_node(command)
    except ex.AerospikeError as e:  # the client raises on an ERROR:<code>:... answer
        return "ERROR:%d" % e.code
    return answer.split("\t", 1)[1].strip() if "\t" in answer else answer.strip()


def kv(text):
    return dict(item.split("=", 1) for item in text.split(";") if "=" in item)


def ns_stats(client, ns):
    return kv(info(client, "namespace/" + ns))


def fixture_stats(client):
    return kv(info(client, "fixture-stats"))


def set_config(client, ns, key, value):
    cmd = "set-config:context=namespace;id=%s;%s=%s" % (ns, key, value)
    return info(client, cmd)


def wait_for(what, timeout=10.0, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def counter(client, name, ns):
    return int(fixture_stats(client)["%s.%s" % (name, ns)])


def just_after_eval(client, ns):
    """Wait for a stop-writes evaluation to have just happened; return its count."""
    seen = counter(client, "stop_writes_evals", ns)
    assert wait_for(lambda: counter(client, "stop_writes_evals", ns) > seen, 5, 0.01)
    return counter(client, "stop_writes_evals", ns)


def next_eval(client, ns):
    seen = counter(client, "stop_writes_evals", ns)
    assert wait_for(lambda: counter(client, "stop_writes_evals", ns) > seen, 5)


def put(client, ns, name, size=VALUE, ttl=None):
    policy = {"ttl": ttl} if ttl is not None else None
    client.put((ns, "s", name), {"v": b"x" * size, "n": name}, policy=policy)


def names_left(client, ns):
    found = []
    client.scan(ns, "s").foreach(lambda rec: found.append(rec[2]["n"]))
    return found


def start_of_second():
    """Sleep to just after the clock's next whole second, so that what follows
    within a few hundred milliseconds shares one void-time second."""
    time.sleep(1.02 - time.time() % 1)
    return int(time.time())


# -- stop-writes (nsup.c run_stop_writes, eval_stop_writes) ----------------------


def test_stop_writes_is_set_by_the_evaluation_and_cleared_after_space_is_freed(client):
    before = just_after_eval(client, "sw")
    for i in range(8):  # 8 x 100 KB of 1 MiB: 76 % used, past stop-writes-used-pct 70
        put(client, "sw", i, 100_000)
    put(client, "sw", "one-more", 100_000)  # the flag is not evaluated per write
    stats = ns_stats(client, "sw")
    if counter(client, "stop_writes_evals", "sw") == before:  # no evaluation in between
        assert stats["stop_writes"] == "false" and int(stats["data_used_pct"]) >= 70
    next_eval(client, "sw")
    stats = ns_stats(client, "sw")
    assert (stats["stop_writes"], stats["storage-engine.stop-writes-used-pct"]) == ("true", "70")
    with pytest.raises(ex.ServerFull):
        put(client, "sw", "refused", 10)
    with pytest.raises(ex.ServerFull):
        client.touch(("sw", "s", 0))
    assert client.get(("sw", "s", 0))[2]["v"]  # reads still work
    assert ns_stats(client, "sw")["client_write_error"] == "2"
    for i in range(4):  # deletes still work
        client.remove(("sw", "s", i))
    with pytest.raises(ex.ServerFull):  # still set until the next evaluation
        put(client, "sw", "early", 10)
    next_eval(client, "sw")
    assert ns_stats(client, "sw")["stop_writes"] == "false"
    put(client, "sw", "accepted", 10)


def test_stop_writes_used_pct_zero_turns_it_off_and_avail_pct_still_applies(client):
    assert set_config(client, "sw", "stop-writes-used-pct", "0") == "ok"
    for i in range(8):
        put(client, "sw", i, 100_000)
    next_eval(client, "sw")
    assert ns_stats(client, "sw")["stop_writes"] == "false"
    put(client, "sw", 8, 100_000)
    # Past data-size the storage itself has no room: refused at once.
    with pytest.raises(ex.ServerFull):
        put(client, "sw", "too-much", 300_000)
    for i in range(9, 11):
        put(client, "sw", i, 54_700)  # to 96 % used: 4 % available, below 5
    next_eval(client, "sw")
    stats = ns_stats(client, "sw")
    assert int(stats["data_avail_pct"]) < 5 and stats["stop_writes"] == "true"


# -- NSUP expiry (nsup.c expire) ------------------------------------------------


def test_fixture_stop_writes_holds_a_namespace_full_until_released(client):
    client.info_all("fixture-stop-writes:namespace=sw;on=true")
    assert ns_stats(client, "sw")["stop_writes"] == "true"
    with pytest.raises(ex.ServerFull):
        put(client, "sw", "refused", 10)
    next_eval(client, "sw")  # the evaluation, nothing used, keeps it set
    assert ns_stats(client, "sw")["stop_writes"] == "true"
    client.info_all("fixture-stop-writes:namespace=sw;on=false")
    next_eval(client, "sw")
    assert ns_stats(client, "sw")["stop_writes"] == "false"
    put(client, "sw", "accepted", 10)


def test_nsup_expires_and_counts_non_expirable_records(client):
    for i in range(3):
        put(client, "exp", "pinned%d" % i, 10, ttl=aerospike.TTL_NEVER_EXPIRE)
    for i in range(2):
        put(client, "exp", "short%d" % i, 10, ttl=1)
    assert wait_for(lambda: ns_stats(client, "exp")["expired_objects"] == "2", 6)
    stats = ns_stats(client, "exp")
    # non_expirable_objects is what the last NSUP cycle counted.
    assert wait_for(lambda: ns_stats(client, "exp")["non_expirable_objects"] == "3", 3)
    assert stats["objects"] == "3" and stats["evicted_objects"] == "0"
    assert counter(client, "expire_cycles", "exp") > 0


# -- NSUP eviction (nsup.c find_evict_void_time, evict; linear_hist.c) ---------


def test_eviction_takes_the_lowest_void_time_buckets_and_leaves_the_newest(client):
    # 4 groups of 5 records, TTLs 1000 s apart; 100 buckets of ~40 s: one bucket
    # per group. Target 20 x 300 / 1000 = 6: the threshold is the second group's
    # bucket, so the first group (5 records) goes, and 15 records are 43 % used.
    for group in range(1, 5):
        for i in range(5):
            put(client, "evb", "g%d-%d" % (group, i), ttl=1000 * group)
    assert int(ns_stats(client, "evb")["data_used_pct"]) >= 50
    assert wait_for(lambda: ns_stats(client, "evb")["evicted_objects"] == "5")
    time.sleep(2.2)  # another find: below evict-used-pct, nothing more goes
    stats = ns_stats(client, "evb")
    assert stats["evicted_objects"] == "5" and stats["hwm_breached"] == "false"
    left = sorted(names_left(client, "evb"))
    assert left == sorted("g%d-%d" % (g, i) for g in range(2, 5) for i in range(5))
    now = now_void_time()
    assert now + 900 < int(stats["evict_void_time"]) <= now + 2000  # group 2's bucket
    assert stats["evict_void_time"] == stats["smd_evict_void_time"]
    assert counter(client, "evictions", "evb") == 1
    assert counter(client, "evict_refusals", "evb") == 0


def test_eviction_with_void_times_spread_over_seconds(client):
    # TTLs 100, 101, ...: one record per second of void time, each its own
    # bucket (width 1 s with the default 10000 buckets). Target 10 % of them.
    ttls = list(range(100, 120))
    for ttl in ttls:
        put(client, "evs", ttl, ttl=ttl)
    size = int(fixture_stats(client)["bytes.evs"]) // len(ttls)
    keep = max(k for k in range(len(ttls) + 1) if k * size * 100 // MiB < 50)
    assert wait_for(lambda: int(ns_stats(client, "evs")["data_used_pct"]) < 50, 15)
    time.sleep(2.2)
    left = sorted(names_left(client, "evs"))
    assert left == ttls[len(ttls) - keep:]  # the lowest void times went first
    assert ns_stats(client, "evs")["evicted_objects"] == str(len(ttls) - keep)
    assert int(ns_stats(client, "evs")["evict_ttl"]) > 90


def test_eviction_refuses_a_bucket_above_the_target(client):
    # 20 records with one TTL written within one second: one bucket of 20,
    # above the target of 20 x 500 / 1000 = 10, and nothing below it.
    start = start_of_second()
    for i in range(20):
        put(client, "evr", i, ttl=1000)
    assert int(time.time()) == start, "the writes took more than a second"
    assert wait_for(lambda: counter(client, "evict_refusals", "evr") >= 2)
    stats = ns_stats(client, "evr")
    assert (stats["evicted_objects"], stats["objects"], stats["hwm_breached"]) == \
           ("0", "20", "true")
    assert stats["smd_evict_void_time"] == "0" and counter(client, "evictions", "evr") == 0


def test_eviction_that_would_evict_all_refuses(client):
    # evict-tenths-pct 1000: the target is every record, no bucket passes it.
    for i in range(20):
        put(client, "eva", i, ttl=100 + i)
    assert wait_for(lambda: counter(client, "evict_all_refusals", "eva") >= 2)
    stats = ns_stats(client, "eva")
    assert (stats["evicted_objects"], stats["objects"]) == ("0", "20")
    assert counter(client, "evict_refusals", "eva") == 0


def _namespace(spec, void_times, now, lut_s=None):
    ns = Namespace(parse_namespace_spec(spec))
    for i, void_time in enumerate(void_times):
        lut = (lut_s if lut_s is not None else now) + CITRUSLEAF_EPOCH
        ns.store(bytes([i % 256, i // 256]) * 10,
                 Record("s", {"v": (4, b"x")}, 1, void_time, last_update_ms=lut * 1000))
    return ns


def test_histogram_rules_of_linear_hist():
    now = 1_000_000
    # ttl_range 1000 over 100 buckets: width 10; at or before now -> bucket 0.
    ns = _namespace("h:evict-hist-buckets=100", [now - 5, now, now + 9, now + 10, now + 1000], now)
    counts, width = nsup.evict_histogram(ns, now)
    assert width == 10 and counts == {0: 3, 1: 1, 99: 1}  # the max lands in the last bucket
    # Past the end (a record touched beyond the high-water mark) -> last bucket.
    ns.max_void_time = now + 500
    counts, width = nsup.evict_histogram(ns, now)
    assert width == 5 and counts == {0: 2, 1: 1, 2: 1, 99: 1}
    # Width is ceil(range / buckets), at least 1.
    wide = _namespace("h:evict-hist-buckets=100", [now + 1001], now)
    assert nsup.evict_histogram(wide, now)[1] == 11
    assert nsup.evict_histogram(_namespace("h", [now + 5], now), now)[1] == 1
    # Never-expiring records are not in it.
    assert nsup.evict_histogram(_namespace("h", [0, 0], now), now)[0] == {}
    # Threshold: first bucket whose running count exceeds the target.
    assert nsup.threshold_for_subtotal({0: 2, 3: 2, 7: 1}, now, 10, 3) == (now + 30, 2)
    assert nsup.threshold_for_subtotal({0: 2, 3: 2}, now, 10, 4) == (nsup.NO_THRESHOLD, 4)
    assert nsup.threshold_for_subtotal({5: 9}, now, 10, 1) == (now + 50, 0)


def test_find_rules_and_the_one_second_lag():
    now = now_void_time()
    spec = "n:nsup-period=1,data-size=1K,evict-used-pct=1,evict-tenths-pct=500"
    ns = _namespace(spec, [now + 100 + i for i in range(10)] + [0, 0], now)
    t = ns.nsup_last_time + 1
    nsup.nsup_tick(ns, t)  # finds and publishes, evicts nothing yet
    assert ns.hwm_breached and ns.smd_evict_void_time == now + 105 and len(ns.records) == 12
    nsup.nsup_tick(ns, t + 1)  # the next wake-up evicts below it
    assert ns.evicted_objects == 5 and len(ns.records) == 7 and ns.non_expirable_objects == 2
    assert ns.evict_void_time == ns.smd_evict_void_time and ns.evict_ttl > 90
    # Refusal in the first bucket (threshold == now) expires instead.
    ns = _namespace(spec, [now - 3] * 4 + [now + 50], now)
    ns.max_void_time = now + 50
    nsup.nsup_tick(ns, ns.nsup_last_time + 1)
    assert ns.counts["evict_refusals"] == 1 and ns.expired_objects == 4 and ns.evicted_objects == 0
    # The period rule: a find at most once per nsup-period.
    ns = _namespace(spec.replace("nsup-period=1", "nsup-period=3"), [now + 100] * 3, now)
    start = ns.nsup_last_time
    for dt in range(1, 8):
        nsup.nsup_tick(ns, start + dt)
    assert ns.counts["evict_finds"] == 2  # at +3 and +6


# -- read-touch (read_touch.c as_read_touch_check) --------------------------------


def touch_counts(client, ns="rt"):
    stats = ns_stats(client, ns)
    return int(stats["read_touch_success"]), int(stats["read_touch_skip"])


def wait_next_second(since):
    assert wait_for(lambda: int(time.time()) > since, 2, 0.01)


def test_read_touch_100_pct_refreshes_the_ttl_after_answering(client):
    key = ("rt", "s", "a")
    written = int(time.time())
    client.put(key, {"v": 1}, policy={"ttl": 100})
    wait_next_second(written + 1)  # two seconds on: the touch moves the void time
    _, meta, _ = client.get(key, policy={"read_touch_ttl_percent": 100})
    assert meta["ttl"] <= 99  # the read answers with the old void time
    _, after, _ = client.get(key, policy={"read_touch_ttl_percent": -1})
    assert after["ttl"] >= meta["ttl"] + 1 and after["gen"] == meta["gen"] == 1
    assert touch_counts(client) == (1, 0)


def test_read_touch_0_pct_uses_the_namespace_default(client):
    key = ("rt", "s", "b")
    client.put(key, {"v": 1}, policy={"ttl": 100})
    client.get(key)  # 0 = default-read-touch-ttl-pct, which is 0: no touch
    client.get(key, policy={"read_touch_ttl_percent": 0})
    assert touch_counts(client) == (0, 0)  # no touch was even tried
    assert set_config(client, "rt", "default-read-touch-ttl-pct", "100") == "ok"
    assert ns_stats(client, "rt")["default-read-touch-ttl-pct"] == "100"
    written = int(time.time())
    client.put(key, {"v": 2}, policy={"ttl": 100})
    wait_next_second(written)
    client.get(key)
    assert touch_counts(client) == (1, 0)


def test_read_touch_never_and_bad_percentages(client):
    assert set_config(client, "rt", "default-read-touch-ttl-pct", "100") == "ok"
    key = ("rt", "s", "c")
    client.put(key, {"v": 1}, policy={"ttl": 100})
    client.get(key, policy={"read_touch_ttl_percent": -1})  # 0xFFFFFFFF overrides the default
    assert touch_counts(client) == (0, 0)
    with pytest.raises(ex.InvalidRequest):
        client.get(key, policy={"read_touch_ttl_percent": 101})
    # Records that never expire are never touched (and 101 is not even checked).
    pinned = ("rt", "s", "pinned")
    client.put(pinned, {"v": 1}, policy={"ttl": aerospike.TTL_NEVER_EXPIRE})
    client.get(pinned, policy={"read_touch_ttl_percent": 101})
    client.get(pinned, policy={"read_touch_ttl_percent": 100})
    assert touch_counts(client) == (0, 0)


def test_read_touch_in_a_batch_read_row(client):
    keys = [("rt", "s", "b%d" % i) for i in range(3)]
    written = int(time.time())
    for key in keys:
        client.put(key, {"v": 1}, policy={"ttl": 100})
    wait_next_second(written + 1)
    got = client.batch_read(keys, policy={"read_touch_ttl_percent": 100})
    assert [r.result for r in got.batch_records] == [0, 0, 0]
    assert touch_counts(client) == (3, 0)
    later = client.batch_read(keys, policy={"read_touch_ttl_percent": -1})
    for before, after in zip(got.batch_records, later.batch_records):
        assert after.record[1]["ttl"] >= before.record[1]["ttl"] + 1


def test_read_touch_threshold_rule():
    now = now_void_time()
    ns = _namespace("t:nsup-period=1", [now + 60], now, lut_s=now - 40)  # write TTL 100
    (rec,) = ns.records.values()
    assert ns.read_touch_check(rec, 50) == (0, None)  # touch from 50 s before the end
    assert ns.read_touch_check(rec, 60) == (0, 100)  # from 60 s before: now
    assert ns.read_touch_check(rec, 0xFFFFFFFF) == (0, None)
    assert ns.read_touch_check(rec, 0) == (0, None)  # the namespace default is 0
    assert ns.read_touch_check(rec, 101) == (4, None)
    (digest,) = ns.records
    ns.read_touch(digest, 100)
    assert rec.void_time >= now + 100 and rec.generation == 1
    assert ns.counts["read_touch_success"] == 1


# -- device overload (storage.c as_storage_overloaded) ------------------------------


def test_device_overload_until_the_queue_drains(client):
    stats = ns_stats(client, "dev")
    assert (stats["storage-engine"], stats["storage-engine.max-write-cache"]) == ("device", str(64 * MiB))
    assert stats["storage-engine.post-write-cache"] == str(256 * MiB)
    assert stats["storage-engine.flush-size"] == str(MiB)
    assert stats["storage-engine.filesize"] == stats["data_total_bytes"] == str(256 * MiB)
    # device-write-bps 0: the device writes nothing; 8 blocks of 8 MiB may wait.
    written = 0
    with pytest.raises(ex.DeviceOverload):
        for i in range(100):
            put(client, "dev", i, 1_000_000)
            written += 1
    assert 72 <= written <= 76  # more than 8 full blocks queued (72 MiB)
    stats = ns_stats(client, "dev")
    assert stats["storage-engine.file[0].write_q"] == "9" and stats["objects"] == str(written)
    client.remove(("dev", "s", 0))  # deletes are not refused (delete_ce.c)
    with pytest.raises(ex.DeviceOverload):
        put(client, "dev", "still", 10)
    assert set_config(client, "dev", "device-write-bps", str(64 * MiB)) == "ok"
    assert wait_for(lambda: int(ns_stats(client, "dev")["storage-engine.file[0].write_q"]) <= 8, 3)
    put(client, "dev", "accepted", 10)
    assert counter(client, "device_overloads", "dev") == 2


def test_device_and_eviction_config(client):
    assert set_config(client, "dev", "max-write-cache", str(32 * MiB)).startswith("ERROR")
    assert set_config(client, "dev", "max-write-cache", str(128 * MiB)) == "ok"
    assert set_config(client, "rt", "post-write-cache", str(MiB)).startswith("ERROR")  # memory
    assert set_config(client, "rt", "evict-hist-buckets", "99").startswith("ERROR")
    for key, value in (("evict-used-pct", "60"), ("evict-tenths-pct", "20"),
                       ("evict-hist-buckets", "200"), ("stop-writes-avail-pct", "10"),
                       ("defrag-lwm-pct", "60")):
        assert set_config(client, "rt", key, value) == "ok"
    cfg = kv(info(client, "get-config:context=namespace;id=rt"))
    assert (cfg["storage-engine.evict-used-pct"], cfg["evict-tenths-pct"], cfg["evict-hist-buckets"],
            cfg["storage-engine.stop-writes-avail-pct"], cfg["storage-engine.defrag-lwm-pct"]) == \
           ("60", "20", "200", "10", "60")
    assert cfg["stop-writes-sys-memory-pct"] == "90" and "evict-sys-memory-pct" not in cfg
    assert ns_stats(client, "dev")["storage-engine.max-write-cache"] == str(128 * MiB)


# -- fixture-reset ---------------------------------------------------------------------


def test_fixture_reset_resets_state_and_threads_keep_running(client):
    for i in range(8):
        put(client, "sw", i, 100_000)
    assert set_config(client, "evs", "evict-tenths-pct", "7") == "ok"
    next_eval(client, "sw")
    assert ns_stats(client, "sw")["stop_writes"] == "true"
    assert info(client, "fixture-reset") == "ok"
    stats = ns_stats(client, "sw")
    assert (stats["stop_writes"], stats["objects"], stats["client_write_success"]) == ("false", "0", "0")
    assert ns_stats(client, "evs")["evict-tenths-pct"] == "100"
    wakes = counter(client, "nsup_wakes", "sw")
    assert wait_for(lambda: counter(client, "nsup_wakes", "sw") > wakes, 3)
    next_eval(client, "sw")
