#!/usr/bin/env bash
# What network round trips cost the engine and plain libaerospike: the
# loopback `bench` node (port 3200) behind bench/delayproxy, which holds every
# chunk of bytes D ms in each direction (this kernel has no netem, and loopback
# hides round trips), and build/bench/bench_engine run through it for each D.
#
#   ASD=/path/to/asd bench/peers/latency.sh
#
# The node is started with its access-port set to the proxy's port, so a client
# seeded with the proxy learns the proxy as the node's address and every
# request goes through it. For each delay in DELAYS (ms, fractional allowed;
# the word `direct` means no proxy, seeded with 127.0.0.1:3200) it runs
#   chunk mode with FEW_THREADS and with MANY_THREADS threads (put and get of
#     CHUNK_BYTES chunks, COUNT_FEW / COUNT_MANY per thread), engine next to
#     libaerospike (+ the copy out, for get), best of 4 rounds; and the "limit"
#     column when bench_engine reports one (its minimal one-socket client);
#   prefix mode (one thread: bench_engine's prefix mode is sequential), an
#     lmca_prefix of 16 and 256 keys next to a header-only batch read, in us;
#   l2 mode (not in the default MODES: minutes per delay), `lmcache bench l2`
#     through bench/peers/side_by_side.py for our native_plugin and each of
#     L2_PEERS (LMCache's own Aerospike adapter through the same proxy; LMCache's
#     RESP adapter on redis-server and Mooncake Store, whose servers
#     side_by_side.py puts behind proxies of the same delay: redis as a whole,
#     Mooncake's master only, its data transfers undelayed, a lower bound of its
#     cost), L2_SIZES chunks, with L2_FEW and L2_MANY submits in flight: store
#     and load GB/s, ours/theirs, and the peer's name in the last column;
# and prints one table. The proxy and the node are stopped at exit.
#
# The node must not be running already (its access-port is set when it
# starts), unless USE_RUNNING_NODE=1: then the running node is used as it is,
# left running, and bench_engine's set ("bench") is truncated at exit. That
# still routes through the proxy for this one-node cluster: libaerospike never
# asks a loopback seed for its service address ("localhost is never a load
# balancer", as_lookup.c) and a single node has no peers to advertise, so the
# client keeps the seed's address. A prefix row whose engine time is below 2 D
# (impossible through the proxy) is flagged "BYPASSED?".
#
# Knobs (defaults): DELAYS ("0 0.1 0.5 2"), FEW_THREADS (2), MANY_THREADS (16),
# CHUNK_BYTES (4128768: 4 MiB - 64 KiB, one record, so the libaerospike baseline
# runs), COUNT_FEW (8), COUNT_MANY (2), MODES ("chunk prefix"), KEEP_LOGS (unset:
# bench_engine's own output is removed at exit; set: kept and its path printed),
# L2_SIZES (4M,32M), L2_FEW (1), L2_MANY (8), L2_MIB (64 MiB per run),
# L2_PEERS (aerospike,resp,mooncake).
# About a minute at the defaults on an idle two-core machine.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"

DELAYS=${DELAYS:-0 0.1 0.5 2}
FEW_THREADS=${FEW_THREADS:-2}
MANY_THREADS=${MANY_THREADS:-16}
CHUNK_BYTES=${CHUNK_BYTES:-4128768}
COUNT_FEW=${COUNT_FEW:-8}
COUNT_MANY=${COUNT_MANY:-2}
MODES=${MODES:-chunk prefix}
L2_SIZES=${L2_SIZES:-4M,32M}
L2_FEW=${L2_FEW:-1}
L2_MANY=${L2_MANY:-8}
L2_MIB=${L2_MIB:-64}
L2_PEERS=${L2_PEERS:-aerospike,resp,mooncake}
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
ctl=scripts/aerospike-loopback.sh
direct=127.0.0.1:3200

[ -x "${ASD:-}" ] || { echo "$0: set ASD to the path of an asd binary" >&2; exit 1; }
running=$(ASD=$ASD "$ctl" status bench | grep -v 'not running' || true)
if [ -n "$running" ] && [ -z "${USE_RUNNING_NODE:-}" ]; then
    echo "$0: the bench node is already running; stop it ($ctl stop bench) or set USE_RUNNING_NODE=1" >&2
    exit 1
fi
make -s build/bench/delayproxy build/bench/bench_engine

tmp=$(mktemp -d)
proxy_pid=
bench_pid=
node_started=
cleanup() {
    if [ -n "$bench_pid" ]; then
        kill -TERM "$bench_pid" 2>/dev/null || true
        wait "$bench_pid" 2>/dev/null || true
    fi
    stop_proxy
    if [ -n "$node_started" ]; then
        ASD=$ASD "$ctl" stop bench
    elif [ -n "$running" ]; then
        # Someone else's node: drop bench_engine's records (set "bench",
        # hundreds of MB) rather than leave them in its memory.
        python3 -c "
from tests.conftest import info
info('$direct', 'truncate:namespace=lmcache;set=bench')" || true
    fi
    if [ -n "${KEEP_LOGS:-}" ]; then echo "logs: $tmp"; else rm -rf "$tmp"; fi
}
stop_proxy() {
    if [ -n "$proxy_pid" ]; then
        kill -TERM "$proxy_pid" 2>/dev/null || true
        wait "$proxy_pid" 2>/dev/null || true
        proxy_pid=
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_proxy DELAY PORT: listens on PORT (0: a free one); sets $port.
start_proxy() {
    rm -f "$tmp/port"
    build/bench/delayproxy --listen "127.0.0.1:$2" --to "$direct" --delay-ms "$1" \
        --port-file "$tmp/port" &
    proxy_pid=$!
    for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
    [ -s "$tmp/port" ] || { echo "$0: the proxy did not start" >&2; exit 1; }
    port=$(cat "$tmp/port")
}

# The proxy's port first (a free one), then the node that advertises it.
start_proxy 0 0
P=$port
stop_proxy
if [ -z "$running" ]; then
    # 4G: runs with many 32 MiB chunks in flight otherwise meet stop-writes.
    LOOPBACK_DATA_SIZE=${LOOPBACK_DATA_SIZE:-4G} LOOPBACK_ACCESS_PORT=$P ASD=$ASD "$ctl" start bench
    node_started=1
fi

row() { printf '%-7s %-22s %14s %16s %6s %10s\n' "$@"; }
row delay mode engine raw ratio limit
row "(ms)" "" "" "(libaerospike)" "" ""

# bench LOG ARGS...: bench_engine in the background, so that a signal to this
# script is acted on at once (bash runs traps only between commands).
bench() {
    build/bench/bench_engine "${@:2}" >"$1" &
    bench_pid=$!
    local rc=0
    wait "$bench_pid" || rc=$?
    bench_pid=
    return "$rc"
}

# chunk LABEL HOSTS THREADS COUNT. Reads the figures as the numbers before
# "GB/s" on the put and get lines, in order: engine, libaerospike and, when
# bench_engine has it, its minimal-client limit.
chunk() {
    local log="$tmp/chunk-$1-t$3.log"
    bench "$log" -h "$2" -m chunk -s "$CHUNK_BYTES" -t "$3" -c "$4"
    awk -v d="$1" -v t="$3" '
        $1 ~ /^(put|get):?$/ {
            n = 0
            for (i = 2; i <= NF; i++)
                if ($i ~ /^GB\/s/) v[++n] = $(i - 1)
            raw = "-"; ratio = "-"; limit = ""
            if (n >= 2) { raw = v[2]; if (v[2] > 0) ratio = sprintf("%.2f", v[1] / v[2]) }
            if (n >= 3) limit = v[3] " GB/s"
            printf "%-7s %-22s %9s GB/s %11s GB/s %6s %10s\n", d, "chunk " substr($1, 1, 3) " " t " thr",
                   v[1], raw, ratio, limit
        }' "$log"
}

# prefix LABEL HOSTS
prefix() {
    local log="$tmp/prefix-$1.log"
    bench "$log" -h "$2" -m prefix
    awk -v d="$1" '
        $2 == "keys:" {
            flag = ""
            if (d != "direct" && $4 < 2000 * d) flag = "  BYPASSED?"
            printf "%-7s %-22s %12s us %14s us %6s%s\n", d, "prefix " $1 " keys", $4, $7, $10, flag
        }' "$log"
}

# l2 LABEL HOSTS IN_FLIGHT: one interleaved round of our native_plugin and the
# peers (LMCache's Aerospike adapter through the same proxy; redis and Mooncake's
# master behind proxies of the same delay); rows from side_by_side's JSON.
l2() {
    local out="$tmp/l2-$1-$3" delay=()
    [ "$1" = direct ] || delay=(--peer-delay-ms "$1")
    "$py" bench/peers/side_by_side.py --hosts "$2" --adapters "native_plugin,$L2_PEERS" \
        --sizes "$L2_SIZES" --rounds 1 --in-flight "$3" --mib-per-round "$L2_MIB" \
        "${delay[@]}" --out "$out" >"$out.log" 2>&1 &
    bench_pid=$!
    local rc=0
    wait "$bench_pid" || rc=$?
    bench_pid=
    [ "$rc" = 0 ] || { echo "$0: side_by_side failed, see $out.log" >&2; KEEP_LOGS=1; return 0; }
    "$py" - "$out/side_by_side.json" "$1" "$3" <<'PY'
import json, sys
doc, d, n = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
rows = {(r["size_bytes"], r["adapter"]): r for r in doc["results"]}
for (size, name), peer in sorted(rows.items()):
    ours = rows.get((size, "native_plugin"), {})
    if name == "native_plugin":
        continue
    for op in ("store", "load"):
        mine, theirs = ours.get(f"{op}_gbps"), peer[f"{op}_gbps"]
        ratio = f"{mine / theirs:.2f}" if mine and theirs else peer["status"]
        print(f"{d:<7} {'l2 ' + op[:4] + f' {size >> 20}M x{n}':<22} {mine or 0:9.2f} GB/s "
              f"{theirs or 0:11.2f} GB/s {ratio:>6} {'(' + name + ')':>10}")
PY
}

for d in $DELAYS; do
    if [ "$d" = direct ]; then
        hosts=$direct
    else
        start_proxy "$d" "$P"
        hosts=127.0.0.1:$P
    fi
    for m in $MODES; do
        case "$m" in
        chunk)
            chunk "$d" "$hosts" "$FEW_THREADS" "$COUNT_FEW"
            chunk "$d" "$hosts" "$MANY_THREADS" "$COUNT_MANY"
            ;;
        prefix) prefix "$d" "$hosts" ;;
        l2)
            l2 "$d" "$hosts" "$L2_FEW"
            l2 "$d" "$hosts" "$L2_MANY"
            ;;
        *) echo "$0: unknown mode $m (chunk, prefix, l2)" >&2; exit 2 ;;
        esac
    done
    stop_proxy
done
