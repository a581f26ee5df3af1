#!/bin/sh
# How many searches a GRPO-like stream costs the backend (issue 13, item 9): the BM25 demo index,
# Redis on, 2 loop threads; DISTINCT queries each sent REPEAT times, one query per request, by 64
# concurrent clients (tests/bench/gateway/grpo_stream.py). Singleflight plus the cache should search each
# distinct query once: the script prints the searches the backend made (cache misses that did not
# join an in-flight query, and the plugin's own query counter) as a multiple of DISTINCT, for RUNS
# fresh gateways (Redis flushed in between).
# Usage: tests/bench/gateway/singleflight_reach.sh [BUILD_DIR]   (needs redis-server and build/demo/bm25:
#        run build/prepare-default once)
set -eu
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$BUILD" && pwd)
DISTINCT=${DISTINCT:-200}
REPEAT=${REPEAT:-5}
RUNS=${RUNS:-3}
INDEX=${INDEX:-$BUILD/demo/bm25}
. "$HERE/bench_lib.sh"
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 ~ "^"n"({|$)" {s += $2} END {printf "%d", s}'; }

start_redis
sleep 0.3
echo "== GRPO-like stream: $DISTINCT distinct x $REPEAT, 64 clients, one query per request, bm25 demo, Redis on, 2 loops =="
run=1
while [ "$run" -le "$RUNS" ]; do
  redis-cli -p "$RPORT" FLUSHALL > /dev/null
  p=$(port)
  cat > "$work/gw.json" <<JSON
{"listen":{"host":"127.0.0.1","port":$p},"threads":2,
 "cache":{"redis":{"host":"127.0.0.1","port":$RPORT}},
 "backends":[{"name":"wiki","plugin":"bm25","config":{"index":"$INDEX"}}]}
JSON
  "$BUILD/searchgate" --config "$work/gw.json" > "$work/gw.log" 2>&1 &
  echo $! > "$work/gw.pid"
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$p/health" > /dev/null 2>&1 && break; sleep 0.05; done
  out=$(/usr/bin/python3 "$HERE/grpo_stream.py" "$p" --distinct "$DISTINCT" --repeat "$REPEAT" --concurrency 64 --seed "$run")
  misses=$(metric "$p" searchgate_cache_misses_total)
  coalesced=$(metric "$p" searchgate_coalesced_queries_total)
  searched=$(metric "$p" searchgate_backend_bm25_queries_total)
  echo "run $run: $out; misses - coalesced = $((misses - coalesced)), bm25 searched $searched queries:" \
       "$(echo "$searched $DISTINCT" | awk '{printf "%.3f", $1/$2}') x distinct"
  kill "$(cat "$work/gw.pid")"
  wait "$(cat "$work/gw.pid")" 2>/dev/null || true
  rm -f "$work/gw.pid"
  run=$((run + 1))
done
