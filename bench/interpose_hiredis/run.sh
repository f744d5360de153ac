#!/usr/bin/env bash
# hiredis GET throughput, CLIENTS clients at GOMAXPROCS=2, against one redis-server on
# 127.0.0.1 and a free port, started and stopped here: the unmodified synchronous hiredis
# API on one goroutine per client (the interposer) and on one pthread per client, and Go
# with github.com/redis/go-redis on one goroutine per client. Each runs REPS times,
# alternating; prints the median ops/s and the threads of each.
#
#   bench/interpose_hiredis/run.sh [CLIENTS [SECONDS [REPS]]]
# Needs redis-server, libhiredis-dev, go (go-redis comes from the module proxy).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
clients=${1:-1000}
secs=${2:-3}
reps=${3:-3}
out=$(mktemp -d)
trap 'kill "${redis_pid:-0}" 2>/dev/null || true; rm -rf "$out"' EXIT

(cd "$root" && cargo build --release -q)
lib="$root/target/release/libgmp.so"
cc -O2 -I "$root/include" "$here/hiredis_get.c" "$lib" -lhiredis -pthread \
   -Wl,-rpath,"$root/target/release" -o "$out/hiredis_get"
(cd "$here/go" && go build -o "$out/hiredis_get_go" .)

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --maxclients 10000 --loglevel warning >"$out/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1',$port)).close()" 2>/dev/null && break
    sleep 0.1
done
ulimit -n "$(ulimit -Hn)"

for r in $(seq "$reps"); do
    GMP_MAXPROCS=2 "$out/hiredis_get" "$port" goroutines "$clients" "$secs" | tee -a "$out/res"
    GMP_MAXPROCS=2 "$out/hiredis_get" "$port" pthreads "$clients" "$secs" | tee -a "$out/res"
    GOMAXPROCS=2 "$out/hiredis_get_go" "$port" "$clients" "$secs" | tee -a "$out/res"
done
python3 - "$out/res" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    rows.setdefault(m["mode"], []).append((float(m["ops_per_sec"]), m.get("threads", "-")))
print("| client | GETs/s (median) | threads |")
print("|---|---|---|")
for mode, v in rows.items():
    print(f"| {mode} | {statistics.median(x for x, _ in v):,.0f} | {v[-1][1]} |")
PY
