# bench_lib.sh -- sourced by the gateway's shell benchmarks (bench_cache, bench_budget, bench_trace,
# bench_mcp, singleflight_reach): a temporary work directory whose *.pid processes are killed and
# which is removed on exit, port() for a free loopback port, start_redis for a throwaway
# redis-server (sets RPORT; its pid file is redis-server.pid, so no gateway pid file overwrites it).
work=$(mktemp -d)
trap 'kill $(cat "$work"/*.pid 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_redis() {
  RPORT=$(port)
  redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --daemonize no > "$work/redis-server.log" 2>&1 &
  echo $! > "$work/redis-server.pid"
}
