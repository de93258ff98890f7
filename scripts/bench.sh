#!/usr/bin/env bash
# Runs bench/bench_engine against AEROSPIKE_TEST_HOSTS (a real server), or else
# against the protocol test server started here. The test server is Python, so
# its figures say little about Aerospike: they show that the benchmark runs and
# how the engine compares with plain libaerospike over the same sockets.
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
