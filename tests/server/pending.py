"""transaction-pending-limit: KEY_BUSY (14) for a record with too many write
transactions in flight.

The server (as/src/transaction/rw_request_hash.c) puts every write, delete and
touch (single commands and batch rows; reads do not take part) in a hash of
rw_requests by digest when it starts, and takes it out when the transaction,
replication included, is done. A write that finds its digest there is queued
behind the one in flight (handle_hot_key) unless that one's wait queue already
holds more than the namespace's transaction-pending-limit (0 = no limit): then
it is answered KEY_BUSY and counted in fail_key_busy. With the default 20, one
write in flight and 21 queued are accepted, the next concurrent one is refused.

The fixture counts the writes in flight per digest from the moment a command
is taken (before a `delay` fault sleeps, so a delayed write holds its record
like a slow one) until it is answered, and refuses the same way. Queued writes
are not made to wait for the one ahead: the store lock already serialises
them, and waiting would change how delay faults on concurrent writes behave.
"""

import threading


class PendingWrites:
    def __init__(self):
        self._lock = threading.Lock()
        self._in_flight = {}  # (namespace, digest) -> write transactions in flight

    def enter(self, ns_name, digest, limit):
        """Take one write on (ns_name, digest); False when it must answer
        KEY_BUSY (and then it holds nothing)."""
        key = (ns_name, digest)
        with self._lock:
            n = self._in_flight.get(key, 0)
            # n - 1 are queued behind the first; handle_hot_key refuses when
            # that wait queue is deeper than the limit.
            if n and limit and n - 1 > limit:
                return False
            self._in_flight[key] = n + 1
            return True

    def leave(self, ns_name, digest):
        key = (ns_name, digest)
        with self._lock:
            n = self._in_flight.get(key, 0) - 1
            if n > 0:
                self._in_flight[key] = n
            else:
                self._in_flight.pop(key, None)
