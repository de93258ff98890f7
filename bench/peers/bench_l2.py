"""Our two multiprocess L2 adapters side by side, through LMCache's own benchmark.

Runs `lmcache bench l2 --no-skip-verify` for `plugin` (lmcache_aerospike.l2) and
`native_plugin` (LMCache's wrapper of _native.Connector), alternating, several times
each, and prints the best throughput of each operation and the ratio plugin /
native_plugin. Any verification failure aborts.

    AEROSPIKE_TEST_HOSTS=127.0.0.1:3000 .venv/bin/python bench/peers/bench_l2.py \
        [--repeats 3] [--data-size-kb 4096] [--num-keys 16] [--in-flight 4]
"""

import argparse
import os
import sys
import uuid

import l2run  # bench/peers/l2run.py: runs `lmcache bench l2` and reads its report


def spec(kind, hosts, setname):
    params = {"hosts": hosts, "set": setname, "default_ttl_seconds": 120, "num_workers": 8}
    if kind == "plugin":
        return {"type": "plugin", "module_path": "lmcache_aerospike.l2",
                "class_name": "AerospikeL2Adapter", "adapter_params": params}
    return {"type": "native_plugin", "module_path": "lmcache_aerospike._native",
            "class_name": "Connector", "adapter_params": params}


def run(kind, hosts, args):
    setname = "lmca_bench_" + uuid.uuid4().hex[:8]
    try:
        return l2run.bench_l2(spec(kind, hosts, setname), num_keys=args.num_keys,
                              in_flight=args.in_flight, data_size_kb=args.data_size_kb,
                              rounds=args.rounds)
    except l2run.BenchFailed as e:
        sys.exit(f"{kind}: {e}")
    finally:
        # A run writes (rounds + 1) x in-flight x keys chunks, which would fill a
        # small namespace after a few runs.
        l2run.truncate(hosts, "lmcache", setname)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default=os.environ.get("AEROSPIKE_TEST_HOSTS", "127.0.0.1:3000"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--num-keys", type=int, default=16)
    p.add_argument("--in-flight", type=int, default=2)
    p.add_argument("--data-size-kb", type=int, default=4096)
    args = p.parse_args()

    best = {"plugin": {}, "native_plugin": {}}
    for _ in range(args.repeats):
        for kind in best:  # alternate, so drift hits both alike
            for name, op in run(kind, args.hosts, args).items():
                mbps = op["throughput_avg_mbps"] or op["ops_per_sec_avg"]
                best[kind][name] = max(best[kind].get(name, 0.0), mbps)

    print(f"lmcache bench l2, {args.num_keys} keys x {args.data_size_kb} KiB, "
          f"{args.in_flight} in flight, {args.rounds} rounds, best of {args.repeats}")
    print(f"{'operation':<10} {'plugin':>14} {'native_plugin':>14} {'ratio':>7}")
    for name in best["plugin"]:
        a, b = best["plugin"][name], best["native_plugin"].get(name, 0.0)
        unit = "MB/s" if name != "Lookup" else "ops/s"
        print(f"{name:<10} {a:>9.1f} {unit:<4} {b:>9.1f} {unit:<4} {a / b if b else 0:>7.2f}")


if __name__ == "__main__":
    main()
