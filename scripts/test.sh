#!/usr/bin/env bash
# Runs every test and closes with one summary line:
#   - the C tests (tests/c), built plainly and under ASan+UBSan, and the
#     asynchronous layer's tests under TSan; the plain build once more on the
#     client's own calls instead of the fast path (LMCA_TEST_PATH=client);
#   - the libFuzzer harnesses (tests/fuzz), FUZZ_SECONDS (default 60) each;
#   - a short soak of the asynchronous layer (SOAK_SECONDS, default 20);
#   - pytest (tests/), when pytest is installed (scripts/bootstrap.sh installs it);
#   - the LMCache-driven tests again on the next LMCache, in .venv-lmcache-next;
#   - the vLLM end-to-end tests (tests/vllm) in .venv-vllm;
#   - the SGLang HiCache tests (tests/sglang) in .venv-sglang;
#   - the wheels: scripts/wheels.sh builds them (x86_64 and aarch64, CPython
#     3.10-3.13), tests/wheels checks their tags and symbol versions, installs each
#     x86_64 one into a fresh venv of its Python and uses it, and does the same
#     with an aarch64 one in an emulated arm64 Debian (scripts/arm64-root.sh; root
#     needed, as for the rest of CI).
# The C tests talk to AEROSPIKE_TEST_HOSTS when it is set (a real server set up as
# tests/aerospike-test.conf says); otherwise to the protocol test server
# (tests/server), started here on a free loopback port.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

make -s all || exit 1
make -s SAN=asan all || exit 1
make -s SAN=tsan all || exit 1
# The Python side runs in .venv (scripts/bootstrap.sh) when it exists.
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
"$py" setup.py -q build_ext --inplace >/dev/null || exit 1 # the extension, from these sources

tmp=$(mktemp -d)
fixture_pid=
cleanup() {
    [ -n "$fixture_pid" ] && kill "$fixture_pid" 2>/dev/null && wait "$fixture_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

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
    echo "test server on $AEROSPIKE_TEST_HOSTS"
else
    echo "real server on $AEROSPIKE_TEST_HOSTS"
fi

passed=0 failed=0 skipped=0
tally() { # adds "N passed, N failed[, N skipped]" from the last such line of $1
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$line" ]; then
        echo "no summary from $2" >&2
        failed=$((failed + 1))
        return
    fi
    set -- $(echo "$line" | grep -oE '[0-9]+')
    passed=$((passed + $1)) failed=$((failed + $2)) skipped=$((skipped + ${3:-0}))
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1
for t in build/tests/test_* build/asan/tests/test_* build/tsan/tests/test_pool* build/tsan/tests/test_hits build/tsan/tests/test_clock; do
    echo "== $t"
    "$t" 2>&1 | tee "$tmp/out"
    tally "$tmp/out" "$t"
done
# The same suites on the client's own calls (the fast path off), so that both
# data paths pass them; tests/c/test_fast.c checks which path carried the bytes.
for t in build/tests/test_*; do
    echo "== $t, client path"
    LMCA_TEST_PATH=client "$t" 2>&1 | tee "$tmp/out"
    tally "$tmp/out" "$t (client path)"
done

# The decoders of server data under libFuzzer, FUZZ_SECONDS (default 60) each.
echo "== fuzz: ${FUZZ_SECONDS:-60} s per target"
tests/fuzz/run.sh 2>&1 | tee "$tmp/out"
tally "$tmp/out" tests/fuzz/run.sh

# The asynchronous layer for a while: mixed batches, every hit checked, RSS
# flat (bench/c/soak.c; scripts/soak.sh runs longer ones).
echo "== soak: ${SOAK_SECONDS:-20} s"
build/bench/soak -d "${SOAK_SECONDS:-20}" -i 5 -k 64 -t 60 2>&1 | tee "$tmp/out"
tally "$tmp/out" build/bench/soak

# Runs pytest (arguments after the label) and adds its summary to the tally; a
# non-zero exit with no failed test (a sanitizer's report) counts as a failure.
pytest_tally() {
    local label=$1 rc line
    shift
    echo "== pytest: $label"
    "$@" -m pytest -q -p no:cacheprovider "${targets[@]}" 2>&1 | tee "$tmp/out"
    rc=${PIPESTATUS[0]}
    line=$(grep -E '^[0-9]+ (passed|failed)|[0-9]+ passed' "$tmp/out" | tail -1)
    count() { echo "$line" | grep -oE "[0-9]+ ($1)" | awk '{s += $1} END {print s + 0}'; }
    passed=$((passed + $(count passed)))
    failed=$((failed + $(count 'failed|errors?')))
    skipped=$((skipped + $(count skipped)))
    [ "$(count passed)" -gt 0 ] || failed=$((failed + 1)) # pytest ran nothing
    [ "$rc" -eq 0 ] || [ "$(count 'failed|errors?')" -gt 0 ] || failed=$((failed + 1))
}

if "$py" -c 'import pytest' 2>/dev/null; then
    # vLLM and SGLang have venvs of their own, and the wheels must be built first:
    # below.
    targets=(tests --ignore=tests/vllm --ignore=tests/sglang --ignore=tests/wheels)
    pytest_tally "$py" "$py"
    # The extension again, built with ASan+UBSan and run with CPython's own
    # allocator off, so that LeakSanitizer sees every block it allocates.
    asan_ext=build/asan-ext
    rm -rf "$asan_ext/pkg" && mkdir -p "$asan_ext/pkg"
    CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer" \
        LDFLAGS="-fsanitize=address,undefined" \
        "$py" setup.py -q build_ext --build-lib "$asan_ext/lib" --build-temp "$asan_ext/tmp" \
        >/dev/null || exit 1
    cp -r python/lmcache_aerospike "$asan_ext/pkg/"
    rm -f "$asan_ext"/pkg/lmcache_aerospike/_native*.so
    cp "$asan_ext"/lib/lmcache_aerospike/_native*.so "$asan_ext/pkg/lmcache_aerospike/"
    targets=(tests/ext)
    # pytest captures a test's stderr, and a halting report goes down with it:
    # the sanitizers write to files here instead, shown (and failed) below.
    san_log="$tmp/sanitizer"
    pytest_tally "extension under ASan+UBSan" env \
        LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
        ASAN_OPTIONS=detect_leaks=1:log_path="$san_log" \
        UBSAN_OPTIONS="$UBSAN_OPTIONS:log_path=$san_log" \
        LSAN_OPTIONS=suppressions="$top/tests/ext/lsan.supp" \
        PYTHONMALLOC=malloc PYTHONPATH="$asan_ext/pkg:$top" \
        LMCA_EXPECT_NATIVE="$top/$asan_ext/pkg" "$py"
    for report in "$san_log".*; do
        [ -e "$report" ] || continue
        echo "== sanitizer output $report"
        cat "$report"
        # (LeakSanitizer also writes which suppressions it used: not an error.)
        if grep -qE "ERROR: |runtime error" "$report"; then failed=$((failed + 1)); fi
    done
else
    echo "pytest is not installed: run scripts/bootstrap.sh" >&2
    failed=$((failed + 1))
fi

# The tests that drive LMCache's own code (its basic_check, lmcache bench l2, the
# surface contracts, the restarts) on the next LMCache release as well.
if [ -x .venv-lmcache-next/bin/python ]; then
    targets=(tests/lmcache tests/glue tests/e2e tests/cli/test_demo.py)
    pytest_tally "LMCache $(.venv-lmcache-next/bin/python -c 'import importlib.metadata as m; print(m.version("lmcache"))'), in .venv-lmcache-next" .venv-lmcache-next/bin/python
else
    echo "no .venv-lmcache-next: the next LMCache's tests cannot run (scripts/bootstrap.sh makes it)" >&2
    failed=$((failed + 1))
fi

# Runs pytest on the targets after the label and the venv, in that venv (one that
# holds an inference engine, which scripts/bootstrap.sh makes); a missing venv fails.
venv_tally() {
    local label=$1 venv=$2
    shift 2
    if [ -x "$venv/bin/python" ]; then
        targets=("$@")
        pytest_tally "$label, in $venv" "$venv/bin/python"
    else
        echo "no $venv: the $label tests cannot run (scripts/bootstrap.sh makes it)" >&2
        failed=$((failed + 1))
    fi
}
# vLLM end to end, and SGLang's HiCache with our backend.
venv_tally vLLM .venv-vllm tests/vllm
venv_tally "SGLang HiCache" .venv-sglang tests/sglang

# The wheels and the sdist (scripts/wheels.sh), each wheel installed and used.
echo "== wheels"
if scripts/wheels.sh; then
    targets=(tests/wheels)
    pytest_tally "wheels" "$py"
else
    echo "scripts/wheels.sh failed: no wheel tests" >&2
    failed=$((failed + 1))
fi

echo "total: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
