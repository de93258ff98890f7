#!/usr/bin/env bash
# Runs bench/bench_engine, bench/bench_native.py and a short bench/cache/cache_bench.py
# against AEROSPIKE_TEST_HOSTS (a real server), or else against the protocol test
# server started here. The test server is Python, so its figures say little about
# Aerospike: they show that the benchmarks run and how the engine compares with plain
# libaerospike over the same sockets. CACHE_SECONDS sets the cache run's length and
# BENCH_OUT where it writes cache_bench.{md,json} (default bench/results, git-ignored).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
make -s all
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
if [ -z "${AEROSPIKE_TEST_HOSTS:-}" ]; then
    python3 -m tests.server --port 0 --port-file "$tmp/port" >"$tmp/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
    export AEROSPIKE_TEST_HOSTS="127.0.0.1:$(cat "$tmp/port")"
    echo "(protocol test server, not Aerospike: numbers are for the harness only)"
fi
# Chunk mode writes one record per chunk, as its baselines do: 4 MiB - 64 KiB
# fits one on the write-block grid; 4 MiB does not (engine only).
run() { build/bench/bench_engine -c "${BENCH_COUNT:-16}" -t "${BENCH_THREADS:-2}" "$@"; }
run -s 4128768 -m chunk
run -s 4194304 -m all
# The asynchronous connector (the CPython extension) next to blocking calls.
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
"$py" setup.py -q build_ext --inplace >/dev/null
PYTHONPATH=python "$py" bench/bench_native.py --chunks "${BENCH_CHUNKS:-32}"
# The cache benchmark (bench/cache/cache_bench.py): the namespace full, a stream of new
# prefixes, our tier beside an exact LRU of the same budget and, when redis-server is
# installed, LMCache's RESP client on it, and Mooncake Store when bench/peers/mooncake.sh
# can install it. On the test server the run checks the
# harness only: it gets a server of its own with a small namespace that fills within
# the run (and evicts from 60 %, 10 % of its records per NSUP cycle, where the test
# server emulates eviction).
cache=(--out "${BENCH_OUT:-bench/results}")
if [ -n "$pid" ]; then
    evict=
    if python3 -m tests.server --help | grep -q evict-used-pct; then
        evict=,evict-used-pct=60,evict-tenths-pct=100
    fi
    python3 -m tests.server --port 0 --port-file "$tmp/cache-port" \
        --namespace "lmcache:max-record-size=8M,nsup-period=1,default-ttl=0,data-size=96M$evict" \
        --namespace latency:max-record-size=8M,nsup-period=1,default-ttl=0,data-size=1G \
        >"$tmp/cache-log" 2>&1 &
    cache_pid=$!
    trap '[ -n "$pid" ] && kill $pid 2>/dev/null; kill $cache_pid 2>/dev/null; rm -rf "$tmp"' EXIT
    for _ in $(seq 100); do [ -s "$tmp/cache-port" ] && break; sleep 0.1; done
    echo "(cache benchmark on a protocol test server of its own: numbers for the harness only)"
    cache+=(--hosts "127.0.0.1:$(cat "$tmp/cache-port")" --latency-namespace latency
        --chunk 1M --duration "${CACHE_SECONDS:-10}" --interval 5 --latency-gets 20)
else
    cache+=(--hosts "$AEROSPIKE_TEST_HOSTS" --duration "${CACHE_SECONDS:-30}" --interval 5)
fi
PYTHONPATH=python "$py" bench/cache/cache_bench.py "${cache[@]}"
