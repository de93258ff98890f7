"""bench/delayproxy: the delay proxy that bench/peers/latency.sh puts between the
benchmarks and a server. It is checked against a small echo server in this
file: bytes pass intact both ways, a round trip costs at least twice the delay
(a lower bound is a correctness property; no upper bound on time is asserted,
the machine is shared), the buffer bound holds, errors close connections
without taking the proxy down, and SIGTERM/SIGINT exit 0.

The echo server echoes every byte and, at EOF, sends the SHA-256 of everything
it received and closes: a client that half-closes then learns whether the proxy
delivered every byte before passing the FIN on.
"""

import hashlib
import os
import signal
import socket
import socketserver
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROXY = REPO / "build" / "bench" / "delayproxy"


@pytest.fixture(scope="module")
def proxy_bin():
    # The project's build, for this one binary (make all builds it too).
    subprocess.run(["make", "-s", "build/bench/delayproxy"], cwd=REPO, check=True,
                   timeout=600)
    assert os.access(PROXY, os.X_OK)
    return PROXY


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        digest = hashlib.sha256()
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        try:
            while True:
                n = sock.recv_into(buf)
                if n == 0:
                    break
                digest.update(view[:n])
                sock.sendall(view[:n])
            sock.sendall(digest.digest())
        except OSError:
            pass


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


@pytest.fixture(scope="module")
def echo():
    server = _Server(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class Proxy:
    def __init__(self, binary, tmp, to_port, delay_ms, max_buffer=None):
        port_file = tmp / f"proxy-{time.monotonic_ns()}.port"
        args = [str(binary), "--listen", "127.0.0.1:0", "--to", f"127.0.0.1:{to_port}",
                "--delay-ms", str(delay_ms), "--port-file", str(port_file)]
        if max_buffer is not None:
            args += ["--max-buffer", str(max_buffer)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.proc.poll() is None, self.proc.communicate()
            assert time.monotonic() < deadline, "the proxy wrote no port file"
            time.sleep(0.01)
        self.port = int(port_file.read_text())

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def rss_kib(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self, sig=signal.SIGTERM):
        """Signals the proxy; returns (exit status, stdout, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=10)
        return self.proc.returncode, out, err


@pytest.fixture
def proxies(proxy_bin, tmp_path):
    started = []

    def start(to_port, delay_ms, **kw):
        p = Proxy(proxy_bin, tmp_path, to_port, delay_ms, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


def recv_exact(sock, n):
    out = bytearray()
    while len(out) < n:
        b = sock.recv(min(n - len(out), 1 << 20))
        assert b, f"EOF after {len(out)} of {n} bytes"
        out += b
    return bytes(out)


def exchange(sock, payload, piece=65536):
    """Sends payload in pieces while reading the echo, half-closes, and returns
    (echoed bytes, the server's digest, what followed it)."""
    def send():
        for i in range(0, len(payload), piece):
            sock.sendall(payload[i:i + piece])
        sock.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send)
    sender.start()
    echoed = recv_exact(sock, len(payload))
    digest = recv_exact(sock, 32)
    tail = sock.recv(1)
    sender.join()
    return echoed, digest, tail


def test_bytes_pass_intact_on_many_concurrent_connections(proxies, echo):
    proxy = proxies(echo, 1)
    n = 64
    failures = []
    start = threading.Barrier(n)

    def one(i):
        try:
            payload = os.urandom(1000 + 4099 * i)  # up to ~260 KB, odd sizes
            with proxy.connect() as sock:
                start.wait(30)
                echoed, digest, tail = exchange(sock, payload, piece=1 + 997 * (i % 7))
            if echoed != payload or digest != hashlib.sha256(payload).digest() or tail:
                failures.append(f"connection {i}: bytes differ")
        except Exception as e:  # reported below, with the connection's number
            failures.append(f"connection {i}: {e!r}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures
    status, out, err = proxy.stop()
    assert (status, out, err) == (0, b"", b"")


def test_a_multi_mib_transfer_passes_intact_both_ways(proxies, echo):
    proxy = proxies(echo, 0.5)
    payload = os.urandom(24 << 20)
    with proxy.connect() as sock:
        echoed, digest, tail = exchange(sock, payload, piece=4 << 20)
    assert echoed == payload
    assert digest == hashlib.sha256(payload).digest()
    assert tail == b""  # the server's close came through too
    assert proxy.stop() == (0, b"", b"")


@pytest.mark.parametrize("delay_ms", [20, 0.5])
def test_a_round_trip_takes_at_least_twice_the_delay(proxies, echo, delay_ms):
    proxy = proxies(echo, delay_ms)
    with proxy.connect() as sock:
        for size in (1, 100, 300000):
            msg = os.urandom(size)
            t0 = time.monotonic()
            sock.sendall(msg)
            got = recv_exact(sock, size)
            elapsed = time.monotonic() - t0
            assert got == msg
            assert elapsed >= 2 * delay_ms / 1000, f"{size} bytes back in {elapsed * 1000:.3f} ms"


def test_the_buffer_bound_holds_against_a_client_that_never_reads(proxies, echo):
    bound = 4 << 20
    proxy = proxies(echo, 1, max_buffer=bound)
    with proxy.connect() as warm:  # threads and allocator warmed up
        assert exchange(warm, b"x" * 100000)[0] == b"x" * 100000
    base = proxy.rss_kib()
    sock = proxy.connect()
    sock.settimeout(1.5)
    block = b"\xa5" * (1 << 20)
    sent = 0
    limit = 1 << 30
    try:
        while sent < limit:  # the echo comes back to a client that never reads
            sent += sock.send(block)
    except (socket.timeout, BlockingIOError):
        pass
    grown = proxy.rss_kib() - base
    # Each direction holds at most `bound`; the rest sits in kernel socket buffers.
    assert sent < limit, "sending never stalled: no backpressure"
    assert grown * 1024 < 2 * bound + (16 << 20), f"RSS grew {grown} KiB after {sent >> 20} MiB"
    sock.close()
    # Other connections still work, and the proxy exits cleanly.
    with proxy.connect() as other:
        assert exchange(other, b"after")[0] == b"after"
    assert proxy.stop() == (0, b"", b"")


def test_an_unreachable_upstream_closes_the_client_and_the_proxy_goes_on(proxies, echo):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]  # nothing listens there once closed
    proxy = proxies(closed_port, 1)
    with proxy.connect() as sock:
        try:
            assert sock.recv(1) == b""
        except ConnectionResetError:
            pass
    status, _, err = proxy.stop()
    assert status == 0
    lines = err.decode().splitlines()
    assert lines and all(line.startswith("delayproxy: connect ") for line in lines), err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_exits_0_with_connections_open(proxies, echo, sig):
    proxy = proxies(echo, 2)
    socks = [proxy.connect() for _ in range(4)]
    socks[0].sendall(b"in flight")
    status, out, err = proxy.stop(sig)
    for s in socks:
        s.close()
    assert (status, out, err) == (0, b"", b"")


@pytest.mark.parametrize("args", [
    [],
    ["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1"],
    ["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--delay-ms", "-1"],
    ["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--delay-ms", "x"],
    ["--listen", "nocolon", "--to", "127.0.0.1:1", "--delay-ms", "1"],
    ["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--delay-ms", "1", "--max-buffer", "1"],
])
def test_bad_arguments_exit_2_with_one_line(proxy_bin, args):
    r = subprocess.run([str(proxy_bin), *args], capture_output=True, timeout=10)
    assert r.returncode == 2
    assert r.stdout == b"" and len(r.stderr.decode().splitlines()) == 1, r.stderr
