#!/usr/bin/env bash
# Runs the soak of the asynchronous layer (build/bench/soak, bench/c/soak.c)
# against AEROSPIKE_TEST_HOSTS, or else against the protocol test server
# (tests/server), started here as scripts/test.sh starts it and stopped
# afterwards. Arguments go to the soak as they are:
#
#     scripts/soak.sh -d 60 -i 5
#     SAN=asan scripts/soak.sh -d 20      # the ASan+UBSan build, leaks checked
#
# On the test server the soak gets "-k 64" first (an -k of yours wins): the
# server's lmcache namespace stops writes at 70% of 2 GiB, and 256 keys can
# hold more than that, since an overwrite with fewer segments leaves the old
# tail segments until their TTL. The test server is Python: its throughput
# says nothing about Aerospike's.
#
# Exit status: the soak's (0 passed, 1 failed, 2 usage), or 1 when the build
# or the test server fails.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

san=${SAN:-}
make -s ${san:+SAN=$san} all || exit 1
soak=build${san:+/$san}/bench/soak

tmp=$(mktemp -d)
fixture_pid=
cleanup() {
    [ -n "$fixture_pid" ] && kill "$fixture_pid" 2>/dev/null && wait "$fixture_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

defaults=()
if [ -z "${AEROSPIKE_TEST_HOSTS:-}" ]; then
    python3 -m tests.server --port 0 --port-file "$tmp/port" >"$tmp/server.log" 2>&1 &
    fixture_pid=$!
    for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
    if [ ! -s "$tmp/port" ]; then
        echo "test server did not start:" >&2
        cat "$tmp/server.log" >&2
        exit 1
    fi
    export AEROSPIKE_TEST_HOSTS="127.0.0.1:$(cat "$tmp/port")"
    echo "test server on $AEROSPIKE_TEST_HOSTS (Python: numbers are for the harness only)"
    defaults=(-k 64)
else
    echo "server on $AEROSPIKE_TEST_HOSTS"
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$soak" ${defaults[@]+"${defaults[@]}"} "$@"
