"""Records written as another client would write them: with the official Python
client (`aerospike` on PyPI), bypassing the engine entirely."""

import aerospike
import pytest

SCHEMA_VERSION = 2  # LMCA_SCHEMA_VERSION


class Planter:
    def __init__(self, hosts, namespace, set_name):
        seeds = []
        for seed in hosts.split(","):
            host, _, port = seed.rpartition(":")
            seeds.append((host, int(port)))
        self.client = aerospike.client({"hosts": seeds}).connect()
        self.namespace, self.set_name = namespace, set_name

    def put(self, reckey, bins, ttl=60):
        """Replaces record `reckey` with exactly `bins` (str, bytes, int, float,
        list, ... as the Python client maps them)."""
        policy = {"ttl": ttl, "exists": aerospike.POLICY_EXISTS_CREATE_OR_REPLACE}
        self.client.put((self.namespace, self.set_name, reckey), bins, policy=policy)

    def remove(self, reckey):
        try:
            self.client.remove((self.namespace, self.set_name, reckey))
        except aerospike.exception.RecordNotFound:
            pass

    def exists(self, reckey):
        _, meta = self.client.exists((self.namespace, self.set_name, reckey))
        return meta is not None

    def close(self):
        self.client.close()


@pytest.fixture
def planter(aerospike_hosts):
    p = Planter(aerospike_hosts, "lmcache", "lmca_pytest")
    yield p
    p.close()


def meta_bins(payload, wid=0x1234567890ABCDEF, changes=None):
    """The bins of a valid one-record chunk holding `payload`, with `changes`
    (a dict) applied: a value of None drops the bin."""
    bins = {"ver": SCHEMA_VERSION, "state": "ready", "nseg": 1, "seg_b": len(payload),
            "tot_b": len(payload), "wid": wid, "created_at": 1700000000, "pin": 0,
            "b": payload}
    for name, value in (changes or {}).items():
        if value is None:
            bins.pop(name, None)
        else:
            bins[name] = value
    return bins
