#!/usr/bin/env bash
# Runs Aerospike servers on loopback for the real-server tests: one node, or a
# three-node cluster (mesh heartbeat on 127.0.0.1, access-address 127.0.0.1,
# distinct ports per node). It runs a server binary you already have; it builds
# nothing (see docs/testing.md).
#
#   ASD=/path/to/asd scripts/aerospike-loopback.sh ACTION NODE
#
#   ACTION  start (waits until the node serves), stop (SIGTERM, waits for
#           exit), kill (SIGKILL), pause (SIGSTOP), resume (SIGCONT), status
#   NODE    single (port 3000) or 0, 1, 2 (ports 3100, 3110, 3120), or one of
#           the benchmarks' own single nodes: bench (3200), pack (3300), or a
#           node whose lmcache namespace is a cache as the README's recipes set
#           one up: cache (3400, memory) and ssd (3500, a device on a file in
#           the node's directory); or a node of a three-node cache cluster with
#           replication-factor 2 and those recipes on every node: cache0, cache1,
#           cache2 (3600, 3610, 3620) and ssd0, ssd1, ssd2 (3700, 3710, 3720)
#
# Knobs for the benchmarks (read when a node starts):
#   LOOPBACK_ACCESS_PORT  the port the node advertises to clients (its
#                         access-port), e.g. a delay proxy's: clients that learn
#                         the cluster from it then route every request there
#   LOOPBACK_DATA_SIZE    the lmcache namespace's data-size, or its device's size
#                         (default 2G): the ssd nodes' device is that much of
#                         files, read and written directly (direct-files true:
#                         O_DIRECT, never through the host's page cache)
#   LOOPBACK_FILE_DIR     where the ssd nodes' files go (default: the node's
#                         directory); put them on the disk you mean to measure
#   LOOPBACK_FILES        how many files the device is split into (default 1; the
#                         server writes each file from a thread of its own)
#   LOOPBACK_DIRECT_FILES true (default) or false: false reads and writes the
#                         files through the page cache, a memory namespace in
#                         disguise wherever the host's RAM holds the files
#   LOOPBACK_DISABLE_ODSYNC  the device's disable-odsync (default false: each
#                         write block waits for the device, O_DSYNC)
#   LOOPBACK_SERVICE_THREADS  the node's service-threads (default 8)
#   LOOPBACK_EVICT_USED_PCT, LOOPBACK_STOP_WRITES_USED_PCT,
#   LOOPBACK_STOP_WRITES_AVAIL_PCT, LOOPBACK_EVICT_TENTHS_PCT,
#   LOOPBACK_EVICT_HIST_BUCKETS, LOOPBACK_DEFRAG_LWM_PCT (default: the server's 50),
#   LOOPBACK_MAX_WRITE_CACHE,
#   LOOPBACK_POST_WRITE_CACHE (default: 256M, at most an eighth of a file; each
#                         file has one)
#                         the cache and ssd nodes' eviction settings, to try
#                         others than the recipes' (README, "A cache that stays full")
#
# Configs, logs and pid files live in $AEROSPIKE_LOOPBACK_DIR (default
# /tmp/aerospike-loopback). The namespaces are those of tests/aerospike-test.conf;
# the cluster's have replication-factor 2. The tests call this script through
# AEROSPIKE_TEST_CTL (docs/testing.md).
set -euo pipefail
action=${1:-}
node=${2:-}
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${AEROSPIKE_LOOPBACK_DIR:-/tmp/aerospike-loopback}/node-$node

case "$node" in
single) port=3000 rf=1 ;;
0 | 1 | 2) port=$((3100 + 10 * node)) rf=2 ;;
bench) port=3200 rf=1 ;;
pack) port=3300 rf=1 ;;
cache) port=3400 rf=1 ;;
ssd) port=3500 rf=1 ;;
cache[012]) port=$((3600 + 10 * ${node#cache})) rf=2 ;;
ssd[012]) port=$((3700 + 10 * ${node#ssd})) rf=2 ;;
*) echo "usage: $0 start|stop|kill|pause|resume|status single|0|1|2|bench|pack|cache|ssd|cache0-2|ssd0-2" >&2; exit 2 ;;
esac
# The recipe a node's lmcache namespace follows, and its cluster's first port.
recipe=$node base=3100 cluster=lmca-loopback
case "$node" in
cache[012]) recipe=cache base=3600 cluster=lmca-cache ;;
ssd[012]) recipe=ssd base=3700 cluster=lmca-ssd ;;
esac

# MiB in a size such as 512M or 32G.
mib_of() {
    case "$1" in
    *G) echo $((${1%G} * 1024)) ;;
    *M) echo "${1%M}" ;;
    *) echo "$0: LOOPBACK_DATA_SIZE must end in G or M: $1" >&2; exit 2 ;;
    esac
}

# The ssd nodes' storage: LOOPBACK_FILES files (default 1) of $1 in all, in
# LOOPBACK_FILE_DIR, read and written directly unless LOOPBACK_DIRECT_FILES is
# false. Each file keeps its own post-write cache: the README's 256 MiB, at most
# an eighth of the file (its blocks are not reused while cached: on a 512 MiB
# file the default held half of it; DESIGN.md, "Every size").
device_storage() {
    local files=${LOOPBACK_FILES:-1} where=${LOOPBACK_FILE_DIR:-$dir/data} each i
    each=$(($(mib_of "$1") / files))
    mkdir -p "$where"
    echo "device {"
    for i in $(seq 0 $((files - 1))); do
        echo "        file $where/lmcache-$node-$i.dat"
    done
    echo "        filesize ${each}M
        direct-files ${LOOPBACK_DIRECT_FILES:-true}
        disable-odsync ${LOOPBACK_DISABLE_ODSYNC:-false}
        max-write-cache ${LOOPBACK_MAX_WRITE_CACHE:-256M}
        post-write-cache ${LOOPBACK_POST_WRITE_CACHE:-$((each / 8 < 256 ? each / 8 : 256))M}"
}

# The lmcache namespace: plain for the tests and benchmarks; for the cache and
# ssd nodes, the README's recipes (a cache that evicts instead of stopping).
lmcache_namespace() {
    local size=${LOOPBACK_DATA_SIZE:-2G} storage
    case "$recipe" in
    cache) storage="memory {
        data-size $size" ;;
    ssd) storage=$(device_storage "$size") ;;
    *) storage="memory {
        data-size $size" ;;
    esac
    echo "namespace lmcache {
    replication-factor $rf
    max-record-size 8M
    nsup-period 1
    default-ttl 0"
    case "$recipe" in
    cache | ssd) echo "    evict-tenths-pct ${LOOPBACK_EVICT_TENTHS_PCT:-300}
    evict-hist-buckets ${LOOPBACK_EVICT_HIST_BUCKETS:-1000000}
    storage-engine $storage
        evict-used-pct ${LOOPBACK_EVICT_USED_PCT:-50}
        stop-writes-used-pct ${LOOPBACK_STOP_WRITES_USED_PCT:-90}
        stop-writes-avail-pct ${LOOPBACK_STOP_WRITES_AVAIL_PCT:-1}"
        [ -n "${LOOPBACK_DEFRAG_LWM_PCT:-}" ] && echo "        defrag-lwm-pct $LOOPBACK_DEFRAG_LWM_PCT" ;;
    *) echo "    storage-engine $storage" ;;
    esac
    echo "    }
}"
}

# One node's config: service, fabric, heartbeat and admin on consecutive ports.
write_config() {
    local seeds="" access=""
    [ -n "${LOOPBACK_ACCESS_PORT:-}" ] && access="        access-port $LOOPBACK_ACCESS_PORT"$'\n'
    if [ "$rf" = 2 ]; then
        for n in 0 1 2; do
            seeds="$seeds        mesh-seed-address-port 127.0.0.1 $((base + 2 + 10 * n))"$'\n'
        done
    fi
    mkdir -p "$dir/work/smd" "$dir/work/usr/udf/lua" "$dir/data"
    cat >"$dir/aerospike.conf" <<EOF
service {
    cluster-name $cluster
    proto-fd-max 1024
    # Each client connection is served by one service thread. With the default
    # (one per core: 2 here) two busy connections often share a thread and are
    # served one after the other, which halved 2-thread 1 MiB gets (DESIGN.md,
    # "The fast path"; docs/measurements.md). A real server has a core per thread; 8 stand in.
    service-threads ${LOOPBACK_SERVICE_THREADS:-8}
    node-id $(case "$node" in single) echo a10 ;; bench) echo b1 ;; pack) echo c1 ;; cache) echo d1 ;; ssd) echo e1 ;; cache[012]) echo "f$((${node#cache} + 1))" ;; ssd[012]) echo "f$((${node#ssd} + 4))" ;; *) echo "a$((node + 1))" ;; esac)
    work-directory $dir/work
    pidfile $dir/asd.pid
}
mod-lua {
    user-path $dir/work/usr/udf/lua
}
logging {
    file $dir/aerospike.log {
        context any info
    }
}
network {
    service {
        address 127.0.0.1
        port $port
        access-address 127.0.0.1
$access    }
    fabric {
        address 127.0.0.1
        port $((port + 1))
    }
    heartbeat {
        mode mesh
        address 127.0.0.1
        port $((port + 2))
$seeds        interval 150
        timeout 10
    }
    admin {
        address 127.0.0.1
        port $((port + 3))
    }
}
$(lmcache_namespace)
namespace small {
    replication-factor $rf
    max-record-size 1M
    nsup-period 1
    default-ttl 0
    storage-engine memory {
        data-size 1G
    }
}
EOF
}

pid() {
    local p
    p=$(cat "$dir/asd.pid" 2>/dev/null || true)
    [ -n "$p" ] && kill -0 "$p" 2>/dev/null && grep -q "$dir/aerospike.conf" "/proc/$p/cmdline" &&
        echo "$p"
    return 0
}

# Ready: the node answers and has a partition map (partition-generation != -1).
ready() {
    (cd "$top" && python3 -c "
import sys
from tests.conftest import info
sys.exit(0 if info('127.0.0.1:$port', 'partition-generation') not in ('', '-1') else 1)
") 2>/dev/null
}

case "$action" in
start)
    [ -n "$(pid)" ] && exit 0
    [ -x "${ASD:-}" ] || { echo "$0: set ASD to the path of an asd binary" >&2; exit 1; }
    write_config
    setsid "$ASD" --foreground --config-file "$dir/aerospike.conf" >"$dir/console.log" 2>&1 \
        </dev/null &
    launched=$!
    for _ in $(seq 600); do
        if [ -n "$(pid)" ] && ready; then exit 0; fi
        kill -0 "$launched" 2>/dev/null || break # it exited: the log says why
        sleep 0.1
    done
    echo "$0: node $node did not become ready; see $dir/aerospike.log" >&2
    exit 1
    ;;
stop)
    p=$(pid)
    [ -z "$p" ] && exit 0
    kill -CONT "$p" 2>/dev/null || true # a paused node cannot act on SIGTERM
    kill -TERM "$p"
    while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
    ;;
kill | pause | resume)
    p=$(pid)
    [ -z "$p" ] && exit 0
    sig=$(case "$action" in kill) echo KILL ;; pause) echo STOP ;; resume) echo CONT ;; esac)
    kill -"$sig" "$p"
    if [ "$action" = kill ]; then
        while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
    fi
    ;;
status)
    p=$(pid)
    echo "node $node: ${p:-not running} (port $port)"
    ;;
*)
    echo "usage: $0 start|stop|kill|pause|resume|status single|0|1|2|bench|pack|cache|ssd|cache0-2|ssd0-2" >&2
    exit 2
    ;;
esac
