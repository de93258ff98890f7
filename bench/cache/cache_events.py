"""Events during a cache benchmark's run (bench/cache/cache_fill.py, bench/cache/cache_bench.py): a
node killed, paused, resumed or started again at a point of the run, by a thread of
the parent process, with the time each was applied recorded for the report.

    --event ACTION:NODE@WHEN[:HOLD]          (repeatable)

ACTION  kill (SIGKILL), pause (SIGSTOP; with :HOLD seconds, resumed that long
        after), resume (SIGCONT), restart (started again: after a kill).
NODE    a name the control command knows (cache0, ssd1, ...; the test server's node
        index), or `clock`: the node that masters the shared clock's record when the
        event fires. Later events on `clock` act on that same node, so that
        `restart:clock@+30` starts the node `kill:clock@0.4` killed, not the master
        that took over.
WHEN    0.4   once this share of the offered stores is done (cache_bench.py: of its
              requests, or of its duration);
        12s   this many seconds after the start;
        +30   (or +30s) this many seconds after the previous event given for the
              same NODE fired.

The control command (--ctl CMD, default scripts/aerospike-loopback.sh) runs as `CMD
ACTION NODE` (restart is its `start`), in the benchmark's environment: the script's
start needs ASD, and writes the node's config again from the LOOPBACK_* knobs, so run
the benchmark with those the nodes were started with. Against the protocol test
server's cluster,
unless --ctl is given, the test server's own `fixture-node:ACTION:INDEX` info command
does it, sent to another node. An event whose point the run never reached is recorded
as not reached, except a resume or restart: those run after the run's end, at their
time, so that the cluster is whole again for the readback.
"""

import dataclasses
import os
import re
import shlex
import subprocess
import threading
import time

from cache_cluster import clock_master, info_at, parse_ctl_node
from cache_faketime import writer_clocks

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CTL = os.path.join(HERE, "..", "..", "scripts", "aerospike-loopback.sh")
ACTIONS = ("kill", "pause", "resume", "restart")
RESTORING = ("resume", "restart")
SCRIPT_VERB = {"kill": "kill", "pause": "pause", "resume": "resume", "restart": "start"}


@dataclasses.dataclass
class Event:
    text: str
    action: str
    node: str
    share: float = None  # fire when this share of the run is done
    at_s: float = None  # ... or this many seconds after the start
    after_s: float = None  # ... or this long after event `prev` fired
    prev: int = None
    hold_s: float = None  # pause: resumed this long after


_WHEN = re.compile(r"^(?:(?P<plus>\+)(?P<rel>\d+(?:\.\d*)?)s?|(?P<abs>\d+(?:\.\d*)?)s|"
                   r"(?P<share>\d*\.?\d+))(?::(?P<hold>\d+(?:\.\d*)?)s?)?$")


def parse_event(text):
    """'kill:cache0@0.4', 'restart:clock@+30', 'pause:clock@0.4:8', 'kill:1@12s' ->
    Event (its `prev` is set by plan())."""
    head, sep, when = text.partition("@")
    action, _, node = head.partition(":")
    m = _WHEN.match(when)
    if not sep or action not in ACTIONS or not node or not m:
        raise ValueError(f"--event {text!r}: expected ACTION:NODE@WHEN[:HOLD], ACTION one of "
                         f"{', '.join(ACTIONS)}, WHEN a share (0.4), seconds (12s) or seconds "
                         f"after the node's previous event (+30)")
    e = Event(text, action, node, hold_s=float(m["hold"]) if m["hold"] else None)
    if m["share"]:
        e.share = float(m["share"])
        if not 0 <= e.share <= 1:
            raise ValueError(f"--event {text!r}: a share is within 0..1")
    elif m["abs"]:
        e.at_s = float(m["abs"])
    else:
        e.after_s = float(m["rel"])
    if e.hold_s is not None and action != "pause":
        raise ValueError(f"--event {text!r}: only a pause takes :HOLD seconds")
    return e


def plan(texts):
    """The events of the command line, each +S one tied to the previous event given for
    its node, and a resume after every pause with a hold."""
    events = [parse_event(t) for t in texts]
    last = {}
    for k, e in enumerate(events):
        if e.after_s is not None:
            if e.node not in last:
                raise ValueError(f"--event {e.text!r}: +S needs an earlier event on {e.node}")
            e.prev = last[e.node]
        last[e.node] = k
    for k, e in enumerate(list(events)):
        if e.hold_s is not None:
            events.append(Event(f"resume:{e.node}@+{e.hold_s:g} (the pause's hold)", "resume",
                                e.node, after_s=e.hold_s, prev=k))
    return events


# ------------------------------------------------------------------ control

class Control:
    """Acts on a node: `CMD ACTION NAME`, or with no command the test server's
    fixture-node info command, sent to a node other than the one acted on."""

    def __init__(self, nodes, command=None):
        self.nodes = nodes
        self.command = shlex.split(command) if command else None

    @classmethod
    def choose(cls, nodes, ctl):
        """--ctl given: that command; else the test server's own, or the loopback script."""
        if ctl or not nodes.fixture:
            return cls(nodes, ctl or DEFAULT_CTL)
        return cls(nodes)

    def describe(self):
        return " ".join(self.command) if self.command else "fixture-node info command"

    def act(self, action, name):
        """(ok, what it said)."""
        if self.command:
            try:
                out = subprocess.run(self.command + [SCRIPT_VERB[action], name], timeout=180,
                                     capture_output=True, text=True)
            except (OSError, subprocess.TimeoutExpired) as e:
                return False, str(e)
            return out.returncode == 0, (out.stdout + out.stderr).strip()[-300:]
        target = self.nodes.address_of(name)
        for address in self.nodes.addresses:
            if address == target:
                continue
            try:
                answer = info_at(address, f"fixture-node:{action}:{name}", timeout=10)
            except OSError:
                continue  # paused or gone: try another
            return not answer.startswith("ERROR"), "" if answer == "ok" else answer
        return False, "no other node answered"


# ------------------------------------------------------------------ the thread

class Events:
    """Applies `events` on a thread: start(t0) when the run starts, finish() when it
    ends; `records` then says what each did and when (seconds from t0)."""

    def __init__(self, events, control, progress, log=print):
        self.events, self.control, self.progress, self.log = events, control, progress, log
        self.records, self.fired = [], {}  # index -> seconds from t0
        self.resolved = {}  # "clock" -> the node it was when first acted on
        self.over = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="cache-events")

    def start(self, t0):
        self.t0 = t0
        if self.events:
            self.thread.start()

    def finish(self, timeout_s=300.0):
        """The run is over: the events not reached are dropped, a resume or restart
        still due is waited for."""
        self.over.set()
        if self.thread.is_alive():
            self.thread.join(timeout_s)
        return self.records

    def _run(self):
        pending = list(range(len(self.events)))
        while pending:
            now = time.monotonic() - self.t0
            for k in list(pending):
                state = self._state(self.events[k], now)
                if state == "wait":
                    continue
                pending.remove(k)
                if state == "due":
                    self._fire(k)
                else:
                    self._record(k, None, ok=False, detail="not reached")
            time.sleep(0.05)

    def _state(self, e, now):
        """'due', 'wait', or 'drop' (never to be reached)."""
        over = self.over.is_set()
        if e.prev is not None:
            if e.prev not in self.fired:
                dropped = any(r["index"] == e.prev for r in self.records)
                return "drop" if dropped else "wait"
            due = now >= self.fired[e.prev] + e.after_s
        elif e.at_s is not None:
            due = now >= e.at_s
        else:  # a restore not reached runs at the end: the cluster is whole for the readback
            due = self.progress() >= e.share or over
        if due and (not over or e.action in RESTORING):
            return "due"
        return "drop" if over and e.action not in RESTORING else "wait"

    def _fire(self, k):
        e = self.events[k]
        t, share = time.monotonic() - self.t0, self.progress()
        name, detail = self._node(e.node)
        ok = False
        if name is not None:
            t_cmd = time.monotonic()
            ok, detail = self.control.act(e.action, name)
            detail = f"{detail} ({time.monotonic() - t_cmd:.1f} s)".lstrip()
        self.fired[k] = t
        self._record(k, t, ok=ok, detail=detail, node=name, share=share)

    def _node(self, node):
        """(the control name, '') or (None, why not)."""
        if node != "clock":
            return node, ""
        if "clock" not in self.resolved:
            address = clock_master(self.control.nodes.addresses, self.control.nodes.namespace)
            name = address and self.control.nodes.names.get(address)
            if name is None:
                return None, (f"the clock's master {address} has no control name (--ctl-node)"
                              if address else "no node claims the clock's partition")
            self.resolved["clock"] = name
        return self.resolved["clock"], ""

    def _record(self, k, t, ok, detail, node=None, share=None):
        e = self.events[k]
        r = {"index": k, "event": e.text, "action": e.action, "node": node or e.node,
             "t_s": None if t is None else round(t, 2),
             "share_done": None if share is None else round(share, 3),
             "after_run": t is not None and self.over.is_set(), "ok": ok, "detail": detail}
        self.records.append(r)
        self.log(f"event {e.text}: {event_line(r)}")


def event_line(r):
    if r["t_s"] is None:
        return r["detail"]
    return (f"{r['action']} {r['node']} at {r['t_s']:.1f} s ({100 * r['share_done']:.0f} % done"
            f"{', after the run' if r['after_run'] else ''}): {'ok' if r['ok'] else 'FAILED'}"
            + (f" {r['detail']}" if r["detail"] else ""))


def add_options(p):
    """The cluster's options of both benchmarks: events, the control command, the
    writers' clocks, the nodes' logs (parse_options reads them)."""
    p.add_argument("--event", action="append", default=[], metavar="ACTION:NODE@WHEN[:HOLD]",
                   help="kill:NODE@0.4, restart:NODE@+30, pause:NODE@0.4:8, resume:NODE@12s;"
                        " NODE a control name or `clock` (bench/cache/cache_events.py)")
    p.add_argument("--ctl", default=None, metavar="CMD",
                   help="runs as `CMD ACTION NODE` (default scripts/aerospike-loopback.sh, or "
                        "the test server's fixture-node info command against it)")
    p.add_argument("--ctl-node", action="append", default=[], metavar="HOST:PORT=NAME",
                   help="the control command's name for a node (default: the loopback "
                        "script's by port)")
    p.add_argument("--writer-clock", action="append", default=[], metavar="W:OFFSET",
                   help="writer W under `faketime -m -f OFFSET`, e.g. 1:+30s (repeatable)")
    p.add_argument("--server-log", action="append", default=[], metavar="[NAME=]PATH",
                   help="a node's aerospike.log, for NSUP's refusals (repeatable; default: "
                        "the loopback script's logs of the named nodes)")


def parse_options(p, a):
    """Sets a.events, a.clocks (writer -> offset) and a.ctl_nodes from add_options'
    options; a bad one is the parser's error."""
    try:
        a.events = plan(a.event)
        a.clocks = writer_clocks(a.writer_clock, a.writers)
        a.ctl_nodes = [parse_ctl_node(t) for t in a.ctl_node]
    except ValueError as e:
        p.error(str(e))
