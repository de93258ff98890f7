"""TCP listener and per-connection loop.

One thread per connection reads protos one at a time and answers each before
reading the next, as the C client expects (it never pipelines on a sync
socket). Info (type 1) and AS_MSG (type 3, or type 4 compressed) are served;
anything else, a bad version or an oversized proto closes the connection, as
the server's service.c does.
"""

import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass

from . import engine, nsup, proto
from .faults import Faults, Stats
from .handlers import Outcome, error_proto, handle_batch, handle_single
from .info import InfoHandler
from .pending import PendingWrites
from .scan import SCAN_MARKER_FIELDS, handle_scan
from .store import Store


@dataclass
class Options:
    scan_keep_binless: bool = False  # return scanned records lacking all selected bins
    verbose: bool = False
    stop_writes_period: float = nsup.EVAL_STOP_WRITES_PERIOD  # seconds (the real one: 10)


class Fixture:
    """Shared state: the store, fault rules, counters and identity, and the
    server's background threads (NSUP and stop-writes, nsup.py).

    One node. A cluster (cluster.py) makes one per node, with a lock shared by
    all of them, and overrides the hooks below: where a command runs
    (`execute`), which partitions a scan serves (`serves_partition`) and
    whether the node is running (`running`: not while paused)."""

    info_class = InfoHandler

    def __init__(self, namespace_configs, options=None, lock=None):
        self.store = Store(namespace_configs, lock)
        self.faults = Faults()
        self.stats = Stats()
        self.pending = PendingWrites()
        self.options = options or Options()
        self.port = 0
        self.node_name = "BB9000000000001"
        self.info = self.info_class(self)
        self.started = time.monotonic()
        self._open = 0  # connections being served now
        self._open_lock = threading.Lock()
        self._threads = nsup.start(self.store, self.options.stop_writes_period, self.running)

    def stop_threads(self):
        self._threads.set()

    def running(self):
        return True

    def execute(self, req):
        """Run one record-level command (Store.lock held); return its Reply."""
        return engine.execute(self.store, req)

    def serves_partition(self, pid):
        """Whether a scan on this node serves partition `pid` (else the
        partition is answered unavailable)."""
        return True

    def uptime(self):
        return time.monotonic() - self.started

    def open_connections(self):
        with self._open_lock:
            return self._open

    def count_open(self, delta):
        with self._open_lock:
            self._open += delta

    def log(self, text):
        if self.options.verbose:
            print("fixture: %s" % text, file=sys.stderr, flush=True)


def handle_msg(fx, msg):
    """Route one decoded AS_MSG request to its handler."""
    if msg.info1 & proto.INFO1_BATCH:
        return handle_batch(fx, msg)
    if msg.field(proto.FIELD_DIGEST) is not None:
        return handle_single(fx, msg)
    if any(msg.field(f) is not None for f in SCAN_MARKER_FIELDS):
        return handle_scan(fx, msg)
    return Outcome([error_proto(proto.ERR_PARAMETER)])


class Server:
    def __init__(self, fx, host="127.0.0.1", port=0):
        self.fx = fx
        self.sock = socket.create_server((host, port), backlog=256)
        fx.port = self.sock.getsockname()[1]
        fx.node_name = "BB9%04X7F000001" % fx.port
        self._closing = False
        self._conns = set()  # open connections, for kill()
        self._conns_lock = threading.Lock()
        # Cleared while the node is paused: every connection stops answering,
        # info included, as under SIGSTOP; the kernel still accepts connections.
        self.answering = threading.Event()
        self.answering.set()

    @property
    def port(self):
        return self.fx.port

    def serve_forever(self):
        while not self._closing:
            try:
                conn, _ = self.sock.accept()
            except OSError as exc:
                if self._closing:
                    return
                # ECONNABORTED, EMFILE, ...: keep serving.
                self.fx.log("accept failed: %s" % exc)
                time.sleep(0.01)
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.fx.stats.add("connections")
            thread = threading.Thread(target=self._serve_conn, args=(conn,), daemon=True)
            thread.start()

    def close(self):
        self._closing = True
        self.fx.stop_threads()
        self.sock.close()

    def kill(self):
        """What SIGKILL does to the listener and the connections: all closed at
        once, requests in progress unanswered."""
        self._closing = True
        self.fx.stop_threads()
        proto.close_hard(self.sock)
        with self._conns_lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            proto.close_hard(conn)
        self.answering.set()  # let frozen connection threads see the close

    def _serve_conn(self, conn):
        self.fx.count_open(1)
        with self._conns_lock:
            self._conns.add(conn)
        if self._closing:
            proto.close_hard(conn)
        try:
            while True:
                try:
                    ptype, body = proto.read_proto(conn)
                except (EOFError, ConnectionError):
                    return
                self.answering.wait()
                if self._closing:
                    return
                outcome = self._dispatch(ptype, body)
                if outcome is None or not self._send(conn, outcome):
                    return
        except proto.ProtocolError as exc:
            self.fx.log("closing connection: %s" % exc)
        except OSError:
            pass
        except Exception:  # a fixture bug: report it, drop only this connection
            traceback.print_exc()
        finally:
            self.fx.count_open(-1)
            with self._conns_lock:
                self._conns.discard(conn)
            proto.close_hard(conn)

    def _dispatch(self, ptype, body):
        """Return the Outcome for one request, or None to close the socket."""
        if ptype == proto.TYPE_INFO:
            self.fx.stats.add("info")
            return Outcome([proto.pack_proto(proto.TYPE_INFO, self.fx.info.respond(body))])
        if ptype == proto.TYPE_COMPRESSED:
            ptype, body = proto.decompress_proto(body)
        if ptype != proto.TYPE_MSG:
            self.fx.log("unsupported proto type %d" % ptype)
            return None
        msg, _ = proto.parse_msg(body)
        return handle_msg(self.fx, msg)

    @staticmethod
    def _send(conn, outcome):
        """Send an outcome; return False when the connection must close."""
        if outcome.close:
            return False
        if outcome.drop:
            first = outcome.protos[0] if outcome.protos else b""
            body_len = max(len(first) - 8, 0)
            conn.sendall(first[: 8 + body_len // 2])
            return False
        for data in outcome.protos:
            conn.sendall(data)
        return True
