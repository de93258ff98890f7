"""bench/peers/side_by_side.py --peer-delay-ms: the peers' own servers go behind
bench/delayproxy (as latency.sh puts the Aerospike node), so a latency run costs
every tier the same round trips. Checked on small stand-in servers: redis's port
and Mooncake's master address are swapped for proxies that pass the bytes and
hold each direction at least the delay; the proxies stop with the run."""

import os
import socketserver
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peers"))
side_by_side = pytest.importorskip("side_by_side")  # needs LMCache (.venv)


class _Pong(socketserver.BaseRequestHandler):
    """Answers every chunk it reads with +PONG, as redis answers PING."""

    def handle(self):
        while self.request.recv(4096):
            self.request.sendall(b"+PONG\r\n")


@pytest.fixture
def pong_port():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Pong)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class _Mooncake:
    """What delay_peers reads of mooncake_peer.Store."""

    def __init__(self, port):
        self.master_addr = f"127.0.0.1:{port}"

    def spec(self, num_workers=8, master=None):
        return {"adapter_params": {"master": master or self.master_addr}}


def test_the_peers_servers_go_behind_proxies_of_the_delay(pong_port, tmp_path):
    ctx = {"redis_port": pong_port, "mooncake": _Mooncake(pong_port), "mooncake_note": "m"}
    procs = side_by_side.delay_peers(ctx, 20, str(tmp_path))
    try:
        assert len(procs) == 2
        assert ctx["redis_port"] != pong_port
        master = side_by_side.spec("mooncake", ctx, "unused")["adapter_params"]["master"]
        assert master == ctx["mooncake_master"] != f"127.0.0.1:{pong_port}"
        assert "20 ms delay proxy" in ctx["mooncake_note"]
        for port in (ctx["redis_port"], int(master.rsplit(":", 1)[1])):
            t0 = time.monotonic()
            assert side_by_side.resp_command(port, "PING") == "+PONG"
            # Two delays at least (there and back); no upper bound on a shared machine.
            assert time.monotonic() - t0 >= 0.040
    finally:
        for proc in procs:
            side_by_side.stop(proc)
    assert all(proc.poll() is not None for proc in procs)


def test_no_delay_leaves_the_peers_direct(pong_port, tmp_path):
    ctx = {"redis_port": pong_port, "mooncake": _Mooncake(pong_port), "mooncake_note": "m"}
    assert side_by_side.spec("resp", ctx, "unused")["port"] == pong_port
    assert side_by_side.spec("mooncake", ctx, "x")["adapter_params"]["master"] == \
        f"127.0.0.1:{pong_port}"


def test_a_negative_delay_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["side_by_side.py", "--hosts", "127.0.0.1:1",
                                      "--peer-delay-ms", "-1"])
    with pytest.raises(SystemExit):
        side_by_side.parse_args()
    assert "--peer-delay-ms: -1.0 is negative" in capsys.readouterr().err
