#!/bin/sh
# Query-trace benchmark (issue 23): the cache-hit path (POST /retrieve answered from L1, one query
# per request, wrk -c64) with tracing off vs tracing every request (sample 1.0, the default fields)
# to a file. Goal: traced >= 0.90 of untraced requests/s. Then checks that the trace has one line
# per query answered (written + dropped = answered) and reports any drops.
#   ROUNDS (default 3) alternates off/on runs and reports each and the medians; DUR seconds per run.
#   With BASE_BUILD_DIR (the code before traces, built the same way) its untraced gateway is
#   run in the same rounds, to show the hooks cost nothing when tracing is off.
# Usage: tests/bench/gateway/bench_trace.sh [BUILD_DIR] [BASE_BUILD_DIR]   (needs wrk: .ci/deps.sh bench)
set -eu
BUILD=$(cd "${1:-build}" && pwd)
BASE=${2:-}
[ -n "$BASE" ] && BASE=$(cd "$BASE" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
DUR=${DUR:-10}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
. "$HERE/bench_lib.sh"
docs='{"id":"0","contents":"\"Hamlet\"\nHamlet is a tragedy written by William Shakespeare."},{"id":"1","contents":"\"Paris\"\nParis is the capital of France."},{"id":"2","contents":"\"Tokyo\"\nTokyo is the capital of Japan."}'

start_gw() { # name build_dir trace(yes/no) -> prints the port
  p=$(port)
  t=""
  [ "$3" = yes ] && t=",\"trace\":{\"path\":\"$work/$1.jsonl\"}"
  cat > "$work/$1.json" <<JSON
{"listen":{"host":"127.0.0.1","port":$p},"threads":$THREADS,"cache":{"l1_bytes":67108864,"redis":null},
 "backends":[{"name":"example","plugin":"example"$t,"config":{"documents":[$docs],"workers":2}}]}
JSON
  "$2/searchgate" --config "$work/$1.json" > "$work/$1.log" 2>&1 &
  echo $! > "$work/$1.pid"
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$p/health" > /dev/null 2>&1 && break; sleep 0.05; done
  curl -s -X POST "http://127.0.0.1:$p/retrieve" -d '{"queries":["who wrote hamlet"],"topk":3,"return_scores":true}' > /dev/null
  echo "$p"
}
stop_gw() { kill "$(cat "$work/$1.pid")"; rm -f "$work/$1.pid"; sleep 0.3; }
rps() { wrk -t2 -c64 -d"${DUR}s" -s "$HERE/post.lua" "http://127.0.0.1:$1/retrieve" 2>/dev/null | awk '/Requests\/sec/{print $2}'; }
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" 'index($0, m) == 1 {s += $2} END {printf "%d", s}'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

offs="" ons="" bases=""
for r in $(seq 1 "$ROUNDS"); do
  P=$(start_gw off "$BUILD" no)
  off=$(rps "$P")
  stop_gw off
  P=$(start_gw on "$BUILD" yes)
  on=$(rps "$P")
  sleep 0.5 # the writer's last pass
  answered=$(metric "$P" 'searchgate_queries_total{backend="example",code="200"}')
  lines=$(metric "$P" 'searchgate_trace_lines_total{')
  dropped=$(metric "$P" 'searchgate_trace_dropped_lines_total{')
  failed=$(metric "$P" 'searchgate_trace_failed_lines_total{')
  file_lines=$(wc -l < "$work/on.jsonl")
  stop_gw on
  rm -f "$work/on.jsonl"
  base=""
  if [ -n "$BASE" ]; then
    P=$(start_gw base "$BASE" no)
    base=$(rps "$P")
    stop_gw base
  fi
  echo "round $r: off $off req/s, traced $on req/s (ratio $(echo "$on $off" | awk '{printf "%.3f", $1/$2}'));" \
       "trace: $answered queries answered, $lines lines written ($file_lines in the file), $dropped dropped, $failed failed" \
       "${base:+; base build untraced $base req/s}"
  if [ $((lines + dropped + failed)) -ne "$answered" ] || [ "$file_lines" -ne "$lines" ]; then
    echo "round $r: the trace does not account for every query" >&2
    exit 1
  fi
  offs="$offs $off" ons="$ons $on" bases="$bases $base"
done
moff=$(echo "$offs" | median)
mon=$(echo "$ons" | median)
echo "== cache-hit path, wrk -c64, ${DUR}s x $ROUNDS rounds, $THREADS loop threads (wrk on the same machine) =="
echo "tracing off          median $moff req/s"
echo "tracing 100 %        median $mon req/s   ratio $(echo "$mon $moff" | awk '{printf "%.3f", $1/$2}')  (goal >= 0.90)"
if [ -n "$BASE" ]; then
  mbase=$(echo "$bases" | median)
  echo "base build, no trace median $mbase req/s   (this build off / base: $(echo "$moff $mbase" | awk '{printf "%.3f", $1/$2}'))"
fi
