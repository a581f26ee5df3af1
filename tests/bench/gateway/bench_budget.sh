#!/bin/sh
# Spend-budget overhead (issue 14, part 4): POST /retrieve where every request is a cache miss
# (a fresh query each time, the example backend answering at once), with
#   1. no budget, 2. a route budget counted in process (no Redis), 3. a route budget shared through
#   Redis (one Lua script per request on the loop's connection), 4. the same Redis config without a
#   budget (the baseline of 3: its cache lookups and writes go to Redis too);
# prints req/s and p50/p99 of each.
# Usage: tests/bench/gateway/bench_budget.sh [BUILD_DIR]   (needs wrk and redis-server: .ci/deps.sh bench)
set -eu
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$BUILD" && pwd)
DUR=${DUR:-10}
THREADS=${THREADS:-2}
. "$HERE/bench_lib.sh"

start_redis

docs='{"id":"0","contents":"\"Hamlet\"\nHamlet is a tragedy written by William Shakespeare."},{"id":"1","contents":"\"Paris\"\nParis is the capital of France."}'
start_gw() { # name redis(yes/no) budget(yes/no)
  p=$(port)
  if [ "$2" = yes ]; then r="\"redis\":{\"host\":\"127.0.0.1\",\"port\":$RPORT,\"timeout_ms\":1000}"; else r="\"redis\":null"; fi
  if [ "$3" = yes ]; then b=',"budget":{"queries":1000000000000,"period":"day"}'; else b=''; fi
  cat > "$work/$1.json" <<JSON
{"listen":{"host":"127.0.0.1","port":$p},"threads":$THREADS,"cache":{$r},
 "backends":[{"name":"example","plugin":"example"$b,"config":{"documents":[$docs],"workers":2}}]}
JSON
  "$BUILD/searchgate" --config "$work/$1.json" > "$work/$1.log" 2>&1 &
  echo $! > "$work/$1.pid"
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$p/health" > /dev/null 2>&1 && break; sleep 0.05; done
  echo "$p"
}
stop_gw() { kill "$(cat "$work/$1.pid")"; rm -f "$work/$1.pid"; sleep 0.3; }
run() { # name redis budget
  P=$(start_gw "$1" "$2" "$3")
  sleep 0.3
  out=$(wrk -t2 -c64 -d"${DUR}s" --latency -s "$HERE/miss.lua" "http://127.0.0.1:$P/retrieve" 2>/dev/null)
  spent=$(curl -s "http://127.0.0.1:$P/metrics" | awk '/^searchgate_budget_spent_queries_total/{s+=$2} END{print s+0}')
  non2xx=$(echo "$out" | awk '/Non-2xx/{print $NF}')
  printf '%-34s %9s req/s   p50 %-8s p99 %-8s budget spent %s%s\n' "$4" \
    "$(echo "$out" | awk '/Requests\/sec/{print $2}')" "$(echo "$out" | awk '/ 50%/{print $2}')" \
    "$(echo "$out" | awk '/ 99%/{print $2}')" "$spent" "${non2xx:+   non-2xx $non2xx}"
  stop_gw "$1"
}
echo "== every request a miss (wrk -c64, ${DUR}s, $THREADS loop threads, wrk on the same cores) =="
run plain no no "no budget, no Redis"
run local no yes "route budget, in process"
run redis_plain yes no "Redis cache, no budget"
run redis_budget yes yes "Redis cache + route budget in Redis"
