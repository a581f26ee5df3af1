#!/bin/sh
# run_bench.sh [BUILD_DIR] [bench.py options...] -- the local backend vs a Search-R1 style server,
# measured in one run on this machine (see bench.py; figures go to docs/backends/local.md).
# E.g. float32 before/after and int8, back to back, without the reference:
#   run_bench.sh build --skip-ref --baseline /path/to/old/build --int8
# Needs the bench packages of .ci/deps.sh (python3-torch, python3-faiss, python3-fastapi,
# python3-uvicorn, python3-numpy, wrk). Builds searchgate and sg_local.so into BUILD_DIR
# (default: build/) when they are missing. Also prints the encoder and FAISS micro-benchmarks.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
missing=""
need="python3-numpy wrk"
case " $* " in
  *" --skip-ref "*) ;;                                            # the reference server's packages are not needed
  *) need="$need python3-torch python3-faiss python3-fastapi python3-uvicorn" ;;
esac
for p in $need; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "run_bench.sh: missing packages:$missing (run .ci/deps.sh bench)" >&2
  exit 1
fi
if [ ! -x "$build/searchgate" ] || [ ! -f "$build/plugins/sg_local.so" ] || [ ! -x "$build/tests/local/bench/local_bench_bounds" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
  cmake --build "$build" -j2 --target searchgate sg_local local_bench_encoder local_bench_faiss local_bench_bounds
fi
workdir=${SG_BENCH_WORKDIR:-/tmp/sglocal-bench}
/usr/bin/python3 "$here/bench.py" --build "$build" --workdir "$workdir" "$@"
echo
echo "encoder alone, one thread (e5-base-shaped model), each engine (wall and thread CPU time):"
OPENBLAS_NUM_THREADS=1 "$build/tests/local/bench/local_bench_encoder" "$workdir/e5-base-random" 5
echo
echo "FAISS alone, one thread (the benchmark's Flat IP index):"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$build/tests/local/bench/local_bench_faiss" "$workdir"/e5_Flat-*.index 3
echo
echo "BLAS libraries on the encoder's products (one thread each, then every core; tests/bench/local/bench_blas_libs.c):"
[ -x "$build/tests/local/bench/local_bench_blas_libs" ] || cmake --build "$build" -j2 --target local_bench_blas_libs
best=$(/usr/bin/python3 -c "import sys; sys.path.insert(0, '$here'); import bench; print(bench.cpu_best_core() or '')")
for t in 1 "$(nproc)"; do
  env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=1 "$build/tests/local/bench/local_bench_blas_libs" openblas "$t"
  [ -n "$best" ] && OPENBLAS_CORETYPE=$best OMP_NUM_THREADS=1 "$build/tests/local/bench/local_bench_blas_libs" openblas "$t"
  OMP_NUM_THREADS=1 "$build/tests/local/bench/local_bench_blas_libs" blis "$t"
  OMP_NUM_THREADS=1 "$build/tests/local/bench/local_bench_blas_libs" dnnl "$t"
  OMP_NUM_THREADS=1 "$build/tests/local/bench/local_bench_blas_libs" dnnl-bf16 "$t"
done
