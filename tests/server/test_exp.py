"""Expression operations (EXP_READ, EXP_MODIFY) through the official Python
client: each test states the CE 8.1.2.0 rule it checks (as/src/base/exp.c,
expop.c, as/src/transaction/write.c, rw_utils.c, read.c; see exp.py and
engine.py for where each comes from)."""

import struct
import time

import pytest

aerospike = pytest.importorskip("aerospike")
from aerospike import exception as ex  # noqa: E402
from aerospike_helpers import expressions as e  # noqa: E402
from aerospike_helpers.operations import expression_operations as eo  # noqa: E402
from aerospike_helpers.operations import operations as op  # noqa: E402

from tests.server.launch import running  # noqa: E402

NS = "lmcache"
W_DEFAULT = aerospike.EXP_WRITE_DEFAULT
W_CREATE_ONLY = aerospike.EXP_WRITE_CREATE_ONLY
W_UPDATE_ONLY = aerospike.EXP_WRITE_UPDATE_ONLY
W_ALLOW_DELETE = aerospike.EXP_WRITE_ALLOW_DELETE
W_POLICY_NO_FAIL = aerospike.EXP_WRITE_POLICY_NO_FAIL
W_EVAL_NO_FAIL = aerospike.EXP_WRITE_EVAL_NO_FAIL
R_EVAL_NO_FAIL = aerospike.EXP_READ_EVAL_NO_FAIL


@pytest.fixture(scope="module")
def server_port():
    args = ["--namespace", NS + ":nsup-period=1",
            "--namespace", "sw:nsup-period=1,data-size=1M,stop-writes-used-pct=1",
            "--namespace", "dev:storage-engine=device,nsup-period=1"]
    with running(args=args) as port:
        yield port


@pytest.fixture(scope="module")
def shared_client(server_port):
    c = aerospike.client({"hosts": [("127.0.0.1", server_port)]}).connect()
    yield c
    c.close()


@pytest.fixture
def client(shared_client):
    assert shared_client.info_random_node("fixture-reset").split("\t")[-1].strip() == "ok"
    return shared_client


def write(name, expr, flags=W_DEFAULT):
    return eo.expression_write(name, expr.compile(), flags)


def read(name, expr, flags=aerospike.EXP_READ_DEFAULT):
    return eo.expression_read(name, expr.compile(), flags)


def bins(client, key, ops, policy=None, meta=None):
    _, got_meta, got = client.operate(key, ops, meta=meta, policy=policy)
    return got


def code_of(client, key, ops, meta=None):
    with pytest.raises(ex.AerospikeError) as info:
        client.operate(key, ops, meta=meta)
    return info.value.code


def int_or_0(name):
    """The engine's EXP_INT_OR_0: the bin when it is an integer, else 0."""
    return e.Cond(e.Eq(e.BinType(name), aerospike.AS_BYTES_INTEGER), e.IntBin(name), 0)


def test_max_floor_plus_span_written_and_read_back(client):
    """An EXP_MODIFY sees the bin as the earlier ops left it, and a READ after
    it sees its result (write.c write_master_bin_ops_loop: one rd for all ops)."""
    key = (NS, "clk", "next")
    reserve = [write("n", e.Add(e.Max(int_or_0("n"), 1000), 5)), op.read("n")]
    assert bins(client, key, reserve) == {"n": 1005}  # new record: bin missing -> 0
    assert bins(client, key, reserve) == {"n": 1010}
    client.put(key, {"n": 5000})
    assert bins(client, key, reserve) == {"n": 5005}
    # Two modifies of one bin in one operate: the second sees the first.
    twice = [write("n", e.Add(e.IntBin("n"), 1)), write("n", e.Mul(e.IntBin("n"), 2)),
             read("r", e.IntBin("n"))]
    assert bins(client, key, twice) == {"n": None, "r": 10012}
    # An EXP_READ sees an earlier plain write of the same operate.
    assert bins(client, key, [op.write("n", 7), read("r", e.Add(e.IntBin("n"), 1))]) == \
        {"n": None, "r": 8}


def test_missing_bin_under_cond_and_trilean_logic(client):
    key = (NS, "t", "cond")
    client.put(key, {"a": 3})
    got = bins(client, key, [
        read("c", e.Cond(e.BinExists("zz"), e.IntBin("zz"), e.BinExists("a"), e.IntBin("a"), -1)),
        read("t", e.BinType("a")),
        read("u", e.BinType("zz")),
        # eval_or / eval_and: unknown loses to a deciding argument
        read("o", e.Or(e.Eq(e.IntBin("zz"), 1), e.Eq(e.IntBin("a"), 3))),
        read("n", e.And(e.Eq(e.IntBin("zz"), 1), e.Eq(e.IntBin("a"), 4))),
        read("x", e.Exclusive(e.Eq(e.IntBin("a"), 3), e.Eq(e.IntBin("a"), 4))),
        read("s", e.Eq(e.SetName(), "t")),
    ])
    assert got == {"c": 3, "t": 1, "u": 0, "o": True, "n": False, "x": True, "s": True}
    # Unknown that nothing decides fails the op: 26 (expop.c eval_op).
    assert code_of(client, key, [read("o", e.Or(e.Eq(e.IntBin("zz"), 1), False))]) == 26
    assert code_of(client, key, [read("o", e.Not(e.Eq(e.IntBin("zz"), 1)))]) == 26


def test_integer_arithmetic_is_c_arithmetic(client):
    key = (NS, "t", "math")
    client.put(key, {"a": -7})
    got = bins(client, key, [
        read("div", e.Div(e.IntBin("a"), 2)),  # truncates towards zero
        read("mod", e.Mod(e.IntBin("a"), 3)),  # sign of the dividend
        read("abs", e.Abs(e.IntBin("a"))),
        read("sub", e.Sub(e.IntBin("a"))),  # one argument: negation
        read("min", e.Min(e.IntBin("a"), 2, -9)),
        read("wrap", e.Add(2**63 - 1, 1)),
        read("let", e.Let(e.Def("x", e.IntBin("a")), e.Def("y", e.Mul(e.Var("x"), 2)),
                          e.Sub(e.Var("y"), e.Var("x")))),
    ])
    assert got == {"div": -3, "mod": -1, "abs": 7, "sub": 7, "min": -9, "wrap": -(2**63),
                   "let": -7}
    # Integer division or modulo by zero is unknown (eval_div, eval_mod).
    assert code_of(client, key, [read("d", e.Div(e.IntBin("a"), 0))]) == 26
    assert code_of(client, key, [read("d", e.Mod(e.IntBin("a"), 0))]) == 26


def test_eval_failures_and_no_fail(client):
    """A missing or mistyped bin makes bin_int unknown: 26 without
    EVAL_NO_FAIL; with it EXP_READ gives nil and EXP_MODIFY leaves the bin."""
    key = (NS, "t", "fail")
    client.put(key, {"s": "text", "k": 1})
    assert code_of(client, key, [read("r", e.IntBin("nope"))]) == 26
    assert code_of(client, key, [read("r", e.IntBin("s"))]) == 26  # a string bin
    assert bins(client, key, [read("r", e.IntBin("nope"), R_EVAL_NO_FAIL)]) == {"r": None}
    # In a write, the failure fails the whole operate: nothing is written.
    gen = client.get(key)[1]["gen"]
    assert code_of(client, key, [op.write("k", 2), write("k", e.IntBin("nope"))]) == 26
    _, meta, rec = client.get(key)
    assert (meta["gen"], rec) == (gen, {"s": "text", "k": 1})
    bins(client, key, [op.write("k", 2), write("k", e.IntBin("nope"), W_EVAL_NO_FAIL)])
    _, meta, rec = client.get(key)
    assert (meta["gen"], rec["k"]) == (gen + 1, 2)
    # A build error is 4 whatever the flags: int compared with a string.
    bad = e.Eq(e.IntBin("k"), "x")
    assert code_of(client, key, [read("r", bad, R_EVAL_NO_FAIL)]) == 4
    assert code_of(client, key, [write("r", e.Cond(bad, 1, 2), W_EVAL_NO_FAIL)]) == 4


def test_write_flags(client):
    """expop.c as_exp_modify_tr: CREATE_ONLY 6, UPDATE_ONLY 17, POLICY_NO_FAIL
    skips; a nil result deletes only with ALLOW_DELETE."""
    key = (NS, "t", "flags")
    client.put(key, {"a": 1})
    assert code_of(client, key, [write("a", e.Val(2), W_CREATE_ONLY)]) == 6
    assert code_of(client, key, [write("b", e.Val(2), W_UPDATE_ONLY)]) == 17
    bins(client, key, [write("a", e.Val(2), W_CREATE_ONLY | W_POLICY_NO_FAIL),
                       write("b", e.Val(2), W_UPDATE_ONLY | W_POLICY_NO_FAIL),
                       write("c", e.Val(3), W_CREATE_ONLY)])
    assert client.get(key)[2] == {"a": 1, "c": 3}
    # Nil into a live bin: kept; 26 with flags 0, ok with any other flags
    # (expop.c tests `flags && AS_EXP_FLAG_POLICY_NO_FAIL != 0`).
    assert code_of(client, key, [write("a", e.Val(None))]) == 26
    bins(client, key, [write("a", e.Val(None), W_EVAL_NO_FAIL)])
    assert client.get(key)[2]["a"] == 1
    bins(client, key, [write("a", e.Val(None), W_ALLOW_DELETE)])
    assert client.get(key)[2] == {"c": 3}
    # Nil into a missing bin creates nothing.
    bins(client, key, [write("z", e.Val(None))])
    assert client.get(key)[2] == {"c": 3}


def test_last_update_and_since_update(client):
    """(a)/(b): in an operate that writes, advance_record_version sets the new
    last-update time before the ops run, so every expression sees now (new
    and existing records alike); an operate that only reads sees the stored
    one."""
    meta_ops = [read("lu", e.LastUpdateTime()), read("su", e.SinceUpdateTime())]
    key = (NS, "t", "lut")
    before = time.time()
    got = bins(client, key, [*meta_ops, write("v", e.Val(1)), *meta_ops])  # creates it
    after = time.time()
    assert before * 1e9 - 2e6 <= got["lu"] <= after * 1e9 + 2e6
    assert 0 <= got["su"] <= 5
    written_ns = got["lu"]
    time.sleep(0.3)
    got = bins(client, key, meta_ops)  # read-only: the stored time
    assert got["lu"] == written_ns
    assert 280 <= got["su"] <= 2000
    before = time.time()
    got = bins(client, key, [*meta_ops, write("v", e.Add(e.IntBin("v"), 1))])
    assert got["lu"] >= before * 1e9 - 2e6 and got["lu"] > written_ns
    assert 0 <= got["su"] <= 5
    # The client's clock-free `now`: last_update / 1e6 + since_update.
    got = bins(client, key, [read("now", e.Add(e.Div(e.LastUpdateTime(), 1000000),
                                               e.SinceUpdateTime()))])
    assert abs(got["now"] - time.time() * 1000) < 50


def test_record_metadata(client):
    key = (NS, "meta", "m1")
    pol = {"key": aerospike.POLICY_KEY_SEND, "ttl": 500}
    meta_ops = [read("vt", e.VoidTime()), read("ttl", e.TTL()), read("ke", e.KeyExists()),
                read("rs", e.RecordSize()), read("dm", e.DigestMod(1000)),
                read("ts", e.IsTombstone())]
    got = bins(client, key, [op.write("v", b"x" * 100), *meta_ops], policy=pol)
    now = time.time()
    # The new void time is set before the ops run; the stored key only after.
    assert abs(got["vt"] / 1e9 - (now + 500)) <= 2 and 498 <= got["ttl"] <= 500
    assert (got["ke"], got["rs"], got["ts"]) == (False, 16, False)
    digest = aerospike.calc_digest(NS, "meta", "m1")
    assert got["dm"] == struct.unpack("<I", bytes(digest[16:20]))[0] % 1000
    got = bins(client, key, meta_ops)
    assert got["ke"] is True and got["rs"] % 16 == 0 and got["rs"] > 100
    size = got["rs"]
    client.put((NS, "meta", "m2"), {"v": 1}, policy={"ttl": aerospike.TTL_NEVER_EXPIRE})
    got = bins(client, (NS, "meta", "m2"), meta_ops)
    assert (got["vt"], got["ttl"], got["ke"]) == (-1, -1, False)
    # In a write, record_size is the size before the write.
    got = bins(client, key, [op.write("v", b"y" * 1000), read("rs", e.RecordSize())])
    assert got["rs"] == size
    # A device namespace: device_size is the stored size, memory_size 0.
    client.put(("dev", "meta", "d"), {"v": b"z" * 50})
    got = bins(client, ("dev", "meta", "d"), [read("d", e.DeviceSize()), read("m", e.MemorySize()),
                                              read("r", e.RecordSize())])
    assert got["d"] == got["r"] > 50 and got["m"] == 0


def test_exp_modify_is_a_write(client):
    """An operate with only EXP_MODIFY bumps the generation, and stop-writes
    refuses it with 8 (write.c write_master_preprocessing)."""
    key = (NS, "t", "gen")
    bins(client, key, [write("a", e.Val(1))])
    bins(client, key, [write("a", e.Add(e.IntBin("a"), 1))])
    _, meta, rec = client.get(key)
    assert (meta["gen"], rec) == (2, {"a": 2})
    # Namespace sw stops writes at 1 % of 1 MiB: one 20 KB record.
    client.put(("sw", "t", "fill"), {"v": b"x" * 20_000})
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            bins(client, ("sw", "t", "x"), [write("a", e.Val(1))])
        except ex.AerospikeError as err:
            assert err.code == 8
            break
        time.sleep(0.1)
    else:
        pytest.fail("stop-writes never refused the expression write")
    # Reads with EXP_READ still work.
    assert bins(client, ("sw", "t", "fill"), [read("b", e.BinExists("v"))]) == {"b": True}


def test_filter_expressions(client):
    """rw_utils.c handle_meta_filter / read_and_filter_bins: a command whose
    filter is not TRUE for the stored record answers FILTERED_OUT (27); a write
    that creates the record ignores it; a scan skips what it refuses."""
    keys = [(NS, "flt", "k%d" % i) for i in range(6)]
    for i, key in enumerate(keys):
        client.put(key, {"a": i})
    even = {"expressions": e.Eq(e.Mod(e.IntBin("a"), 2), 0).compile()}
    assert client.get(keys[2], policy=even)[2] == {"a": 2}
    with pytest.raises(ex.FilteredOut):
        client.get(keys[1], policy=even)
    with pytest.raises(ex.FilteredOut):  # a missing bin is unknown: refused
        client.get(keys[1], policy={"expressions": e.Eq(e.IntBin("zz"), 1).compile()})
    with pytest.raises(ex.FilteredOut):
        client.put(keys[1], {"a": 100}, policy=even)
    assert client.get(keys[1])[2] == {"a": 1}
    client.put((NS, "flt", "new"), {"a": 1}, policy=even)  # created: no filter
    assert client.get((NS, "flt", "new"))[2] == {"a": 1}
    with pytest.raises(ex.FilteredOut):
        client.remove(keys[3], policy=even)
    client.remove(keys[4], policy=even)
    with pytest.raises(ex.RecordNotFound):
        client.get(keys[4])
    # Batch rows: the refused ones carry 27.
    records = client.batch_read(keys[:4], policy=even).batch_records
    assert [r.result for r in records] == [0, 27, 0, 27]
    # A scan returns what passes.
    scan = client.scan(NS, "flt")
    got = sorted(rec[2]["a"] for rec in scan.results(policy=even))
    assert got == [0, 2]
    # A filter that is not boolean does not build: 4.
    with pytest.raises(ex.AerospikeError) as info:
        client.get(keys[0], policy={"expressions": e.IntBin("a").compile()})
    assert info.value.code == 4
