#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz into build/fuzz/ and runs each for
# FUZZ_SECONDS seconds (default 60):
#   fuzz_meta  the meta and segment record decoders (schema.c)
#   fuzz_info  the namespace info parser, limit resolution and planner (limits.c)
#   fuzz_message  the fast path's response reader (message.c)
#
#   tests/fuzz/run.sh                  # both targets
#   FUZZ_SECONDS=600 tests/fuzz/run.sh fuzz_meta
#
# Each target starts from a scratch copy of tests/fuzz/corpus/<name>/, so the
# corpus in the repository changes only when seeds are added by hand
# (tests/fuzz/make_corpus.py). Per target it prints one "N passed, M failed"
# line, then a total one last, which is what scripts/test.sh's tally reads.
# A crashing input is copied to tests/fuzz/crashes/ and its path printed.
# Needs clang with the libFuzzer runtime (Debian: clang-14, libclang-rt-14-dev)
# and zlib; FUZZ_CC picks another clang.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"

seconds=${FUZZ_SECONDS:-60}
cc=${FUZZ_CC:-clang}
out=build/fuzz
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_meta fuzz_info fuzz_message)

# Only the engine's pure sources: no libaerospike, so no server and no client
# (wire_stub.c stands in for the digest that names a record in a log line).
engine_src=(src/engine/schema.c src/engine/limits.c src/engine/config.c src/engine/status.c
            src/engine/alloc.c src/engine/message.c tests/fuzz/wire_stub.c)
cflags=(-Iinclude -Isrc/engine -std=c11 -D_GNU_SOURCE -g -O1
        -Wall -Wextra -Wstrict-prototypes -Wwrite-strings -Wshadow
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)

passed=0 failed=0

fail() { # target, reason: counts a failure that is not the fuzzer's finding
    echo "$1: $2" >&2
    echo "0 passed, 1 failed"
    failed=$((failed + 1))
}

# Says why the toolchain cannot build a fuzzer, or nothing when it can.
toolchain_problem() {
    local probe=$out/probe
    if ! command -v "$cc" >/dev/null 2>&1; then
        echo "$cc not found: install clang (Debian: apt-get install clang-14 libclang-rt-14-dev) or set FUZZ_CC"
        return
    fi
    mkdir -p "$probe"
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
        >"$probe/probe.c"
    if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/probe.c" -o "$probe/probe" \
        >"$probe/log" 2>&1; then
        echo "$cc cannot link -fsanitize=fuzzer (is the libFuzzer runtime, Debian's" \
            "libclang-rt-14-dev, installed?):"
        sed 's/^/    /' "$probe/log"
    fi
}

# build <target> [extra cflags...]: the binary at $out/<target><suffix>.
build() {
    local target=$1 bin=$out/$1${SUFFIX:-}
    shift
    "$cc" "${cflags[@]}" "$@" "tests/fuzz/$target.c" "${engine_src[@]}" -lz -o "$bin" \
        >"$bin.build.log" 2>&1 || { cat "$bin.build.log" >&2; return 1; }
    [ -s "$bin.build.log" ] && cat "$bin.build.log" >&2 # warnings
    return 0
}

# The value of one of libFuzzer's final "stat::name: value" lines.
final_stat() {
    awk -v key="stat::$1:" '$1 == key { v = $2 } END { print v + 0 }' "$2"
}

# Where the crashing input is, from libFuzzer's log.
crash_inputs() {
    grep -oE "Test unit written to [^ ]+" "$1" | awk '{print $NF}'
}

report_crash() {
    local target=$1 log=$2 input keep
    echo "$target: libFuzzer found a failure; its report:" >&2
    grep -nE "ERROR: |SUMMARY: |invariant broken|runtime error|^    #[0-9]+ " "$log" |
        head -40 >&2
    mkdir -p tests/fuzz/crashes
    for input in $(crash_inputs "$log"); do
        keep=tests/fuzz/crashes/$target-$(basename "$input")
        cp "$input" "$keep"
        echo "$target: crashing input $keep (reproduce: $out/$target $keep)" >&2
    done
    echo "$target: full log in $log" >&2
}

run() {
    local target=$1 kind=${1#fuzz_} dir=$out/$1.run rc runs speed files
    if ! build "$target"; then
        fail "$target" "build failed"
        return
    fi
    rm -rf "$dir" && mkdir -p "$dir/artifacts"
    cp -r "tests/fuzz/corpus/$kind" "$dir/corpus"
    echo "== $target: ${seconds}s from $(ls "$dir/corpus" | wc -l) seeds"
    "$out/$target" "$dir/corpus" -max_total_time="$seconds" -print_final_stats=1 \
        -timeout=10 -artifact_prefix="$dir/artifacts/" >"$dir/log" 2>&1
    rc=$?
    runs=$(final_stat number_of_executed_units "$dir/log")
    speed=$(final_stat average_exec_per_sec "$dir/log")
    files=$(find "$dir/corpus" -type f | wc -l)
    echo "$target: $runs runs, $speed exec/s, corpus $files files"
    if [ "$rc" -eq 0 ]; then
        echo "1 passed, 0 failed"
        passed=$((passed + 1))
    else
        report_crash "$target" "$dir/log"
        echo "0 passed, 1 failed"
        failed=$((failed + 1))
    fi
}

mkdir -p "$out"
problem=$(toolchain_problem)
if [ -n "$problem" ]; then
    for t in "${targets[@]}"; do fail "$t" "$problem"; done
else
    # fuzz_meta with -DFUZZ_TRACE tells each verdict: for checking what a seed
    # reaches (build/fuzz/fuzz_meta_trace tests/fuzz/corpus/meta/*).
    SUFFIX=_trace build fuzz_meta -DFUZZ_TRACE || echo "fuzz_meta_trace: build failed" >&2
    for t in "${targets[@]}"; do
        case $t in
        fuzz_meta | fuzz_info | fuzz_message) run "$t" ;;
        *) fail "$t" "unknown target (fuzz_meta, fuzz_info, fuzz_message)" ;;
        esac
    done
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
