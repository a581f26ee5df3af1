#!/bin/sh
# Installs the Debian packages searchgate needs that are missing, with apt-get (sudo when not
# root). Usage: .ci/deps.sh [run|test|bench]  -- run: build + run; test: + test tools; bench: + peers.
# The run list holds everything CMake needs to configure the whole tree (cmocka included: the
# tests are part of the same build), so `make run` on a fresh machine configures cleanly.
set -eu
what=${1:-run}
pkgs="build-essential cmake pkg-config libh2o-evloop-dev libcurl4-openssl-dev libcjson-dev libhiredis-dev libssl-dev
      libfaiss-dev libopenblas-dev libutf8proc-dev libstemmer-dev zlib1g-dev libcmocka-dev dpkg-dev ca-certificates dict-gcide redis-server python3"
test_pkgs="clang clang-format curl chromium nghttp2-client nghttp2-server openssl python3-numpy python3-torch libdnnl2
           python3-aiohttp python3-requests python3-yaml redis-sentinel stunnel4 haproxy debootstrap gdb"
case "$what" in
  run) ;;
  test) pkgs="$pkgs $test_pkgs" ;;
  bench) pkgs="$pkgs $test_pkgs wrk python3-faiss python3-fastapi python3-stemmer
               python3-uvicorn python3-uvloop python3-httptools" ;;
  *) echo "usage: $0 [run|test|bench]" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing="$missing $p"
  fi
done
# the MCP test's client (tests/mcp/node) runs on Node.js: any node >= 18 with npm will do (a
# node from elsewhere that bundles npm is kept; Debian's own are nodejs + npm)
if [ "$what" != run ] && { ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; }; then
  missing="$missing nodejs npm"
fi
if [ -n "$missing" ]; then
  echo "searchgate: installing missing packages:$missing"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
# the official MCP TypeScript SDK and conformance suite at the versions package-lock.json pins, for
# the mcp_sdk and mcp_conformance tests (skipped, saying why, when npm cannot reach its registry)
if [ "$what" != run ]; then
  node_dir="$(dirname "$0")/../tests/mcp/node"
  if [ ! -f "$node_dir/node_modules/@modelcontextprotocol/sdk/package.json" ] ||
     [ ! -f "$node_dir/node_modules/@modelcontextprotocol/conformance/package.json" ]; then
    echo "searchgate: installing the MCP test client's Node modules (npm ci in tests/mcp/node)"
    (cd "$node_dir" && npm ci --no-audit --no-fund) || echo "searchgate: npm ci failed: the mcp_sdk and mcp_conformance tests will be skipped" >&2
  fi
fi
