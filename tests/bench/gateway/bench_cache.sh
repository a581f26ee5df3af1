#!/bin/sh
# Cache benchmark (issue 4): in one run on this machine,
#   1. GET /health (a trivial endpoint) vs POST /retrieve answered from L1 vs from Redis only,
#      wrk at concurrency 64, one query per request; prints each as a ratio of /health;
#   2. a GRPO-like stream (each distinct query 5 times, 64 concurrent clients) against a saturated
#      backend (5 ms per query, 2 queries admitted at a time: ~400 queries/s), with the cache on vs
#      off; prints the speed-up.
# Usage: tests/bench/gateway/bench_cache.sh [BUILD_DIR]   (needs wrk and redis-server: .ci/deps.sh bench)
set -eu
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../../.." && pwd)
BUILD=$(cd "$BUILD" && pwd)
DUR=${DUR:-10}
THREADS=${THREADS:-2}
. "$HERE/bench_lib.sh"

start_redis

docs='{"id":"0","contents":"\"Hamlet\"\nHamlet is a tragedy written by William Shakespeare."},{"id":"1","contents":"\"Paris\"\nParis is the capital of France."},{"id":"2","contents":"\"Tokyo\"\nTokyo is the capital of Japan."}'
start_gw() { # name l1_bytes redis(yes/no) cache(true/false) delay_per_query_ms max_inflight
  p=$(port)
  if [ "$3" = yes ]; then r="\"redis\":{\"host\":\"127.0.0.1\",\"port\":$RPORT}"; else r="\"redis\":null"; fi
  cat > "$work/$1.json" <<JSON
{"listen":{"host":"127.0.0.1","port":$p},"threads":$THREADS,"cache":{"l1_bytes":$2,$r},
 "backends":[{"name":"example","plugin":"example","cache":$4,"chunk":8,"max_inflight":${6:-0},"config":{"documents":[$docs],"workers":2,"delay_per_query_ms":$5}}]}
JSON
  "$BUILD/searchgate" --config "$work/$1.json" > "$work/$1.log" 2>&1 &
  echo $! > "$work/$1.pid"
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$p/health" > /dev/null 2>&1 && break; sleep 0.05; done
  echo "$p"
}
stop_gw() { kill "$(cat "$work/$1.pid")"; rm -f "$work/$1.pid"; sleep 0.3; }
rps() { wrk -t2 -c64 -d"${DUR}s" "$@" 2>/dev/null | awk '/Requests\/sec/{print $2}'; }
lat() { wrk -t2 -c64 -d"${DUR}s" --latency "$@" 2>/dev/null | awk '/ 50%/{p50=$2} / 99%/{p99=$2} END{print p50" "p99}'; }

P=$(start_gw l1 67108864 no true 0)
curl -s -X POST "http://127.0.0.1:$P/retrieve" -d '{"queries":["who wrote hamlet"],"topk":3,"return_scores":true}' > /dev/null
health=$(rps "http://127.0.0.1:$P/health")
l1=$(rps -s "$HERE/post.lua" "http://127.0.0.1:$P/retrieve")
stop_gw l1
P=$(start_gw redis 0 yes true 0)
sleep 0.3
curl -s -X POST "http://127.0.0.1:$P/retrieve" -d '{"queries":["who wrote hamlet"],"topk":3,"return_scores":true}' > /dev/null
sleep 0.2
redis_rps=$(rps -s "$HERE/post.lua" "http://127.0.0.1:$P/retrieve")
hits=$(curl -s "http://127.0.0.1:$P/metrics" | awk '/^searchgate_cache_hits_total\{backend="example",layer="redis"\}/{print $2}')
stop_gw redis
echo "== cache hit path vs a trivial endpoint (wrk -c64, ${DUR}s, $THREADS loop threads, wrk on the same 2 cores) =="
echo "GET /health                        $health req/s"
echo "POST /retrieve, L1 hit             $l1 req/s   ratio $(echo "$l1 $health" | awk '{printf "%.2f", $1/$2}')  (target >= 0.50)"
echo "POST /retrieve, Redis-only hit     $redis_rps req/s   ratio $(echo "$redis_rps $health" | awk '{printf "%.2f", $1/$2}')  (target >= 0.25; $hits Redis hits)"

echo "== GRPO-like stream: ${DISTINCT:-400} distinct queries x 5, 64 clients, backend 5 ms/query, 2 queries at a time (~400 queries/s) =="
P=$(start_gw grpo_on 67108864 yes true 5 2)
on=$(/usr/bin/python3 "$HERE/grpo_stream.py" "$P" --distinct "${DISTINCT:-400}")
calls_on=$(curl -s "http://127.0.0.1:$P/metrics" | awk '/^searchgate_backend_call_queries_total/{print $2}')
stop_gw grpo_on
redis-cli -p "$RPORT" flushall > /dev/null 2>&1 || true
P=$(start_gw grpo_off 0 no false 5 2)
off=$(/usr/bin/python3 "$HERE/grpo_stream.py" "$P" --distinct "${DISTINCT:-400}")
calls_off=$(curl -s "http://127.0.0.1:$P/metrics" | awk '/^searchgate_backend_call_queries_total/{print $2}')
stop_gw grpo_off
echo "cache on : $on   (queries sent to the backend: $calls_on)"
echo "cache off: $off   (queries sent to the backend: $calls_off; identical in-flight queries still coalesce)"
/usr/bin/python3 -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); print('speed-up with the cache: %.2fx' % (b['seconds']/a['seconds']))" "$on" "$off"
