#!/bin/sh
# MCP overhead (issue 14.1): in one run on this machine, wrk at concurrency 64 against one gateway
# (example backend, every request after the first an L1 cache hit):
#   POST /retrieve                     one query, return_scores true (the baseline)
#   POST /mcp tools/call search        the same query, stateless (what it costs to be an MCP tool:
#                                      JSON-RPC, the text formatting, structuredContent)
#   POST /mcp initialize               a session opened (verl opens one per call)
#   POST /mcp tools/list               the cached list
# Prints each as req/s and as a ratio of /retrieve.
# Usage: tests/bench/gateway/bench_mcp.sh [BUILD_DIR]   (needs wrk: .ci/deps.sh bench)
set -eu
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$BUILD" && pwd)
DUR=${DUR:-10}
THREADS=${THREADS:-2}
. "$HERE/bench_lib.sh"
port=$(port)
docs='{"id":"0","contents":"\"Hamlet\"\nHamlet is a tragedy written by William Shakespeare."},{"id":"1","contents":"\"Paris\"\nParis is the capital of France."},{"id":"2","contents":"\"Tokyo\"\nTokyo is the capital of Japan."}'
cat > "$work/gw.json" <<JSON
{"listen":{"host":"127.0.0.1","port":$port},"threads":$THREADS,"cache":{"redis":null},
 "mcp":{"max_sessions":1000000},
 "backends":[{"name":"example","plugin":"example","config":{"documents":[$docs],"workers":2}}]}
JSON
"$BUILD/searchgate" --config "$work/gw.json" > "$work/gw.log" 2>&1 &
echo $! > "$work/gw.pid"
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; sleep 0.05; done
url="http://127.0.0.1:$port"
rps() { SG_BODY=$2 wrk -t2 -c64 -d"${DUR}s" -s "$HERE/post.lua" "$url$1" 2>/dev/null | awk '/Requests\/sec/{print $2}'; }
retrieve='{"queries":["who wrote hamlet"],"topk":3,"return_scores":true}'
call='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"who wrote hamlet","topk":3}}}'
init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"wrk","version":"1"}}}'
list='{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
curl -s "$url/retrieve" -H 'Content-Type: application/json' -d "$retrieve" > /dev/null
r=$(rps /retrieve "$retrieve")
c=$(rps /mcp "$call")
i=$(rps /mcp "$init")
l=$(rps /mcp "$list")
ratio() { echo "$1 $r" | awk '{printf "%.2f", $1/$2}'; }
echo "== MCP vs /retrieve, L1 hits (wrk -c64, ${DUR}s, $THREADS loop threads, wrk on the same cores) =="
echo "POST /retrieve                 $r req/s"
echo "POST /mcp tools/call search    $c req/s   ratio $(ratio "$c")"
echo "POST /mcp initialize           $i req/s   ratio $(ratio "$i")"
echo "POST /mcp tools/list           $l req/s   ratio $(ratio "$l")"
