#!/bin/sh
# run_bench.sh [BUILD_DIR] [--rows N] [--seconds S] -- the GPU path's benchmarks (docs/backends/gpu.md):
#   1. encoder queries/s, e5-base-shaped model, batch 1 / 64 / 512 (peer: the CPU encoder)
#   2. flat search queries/s at batch 1 and 512 over 1 M and 10 M random vectors generated on the
#      GPU, with the fraction of the memory-bandwidth bound at batch 1 (peer: FAISS on the CPU)
#   3. end-to-end /retrieve queries/s with cross-request batching (peer: the same gateway on the CPU)
# Needs a GPU and a -DSG_CUDA=ON build (made in BUILD_DIR, default build-gpu/, when missing), and
# the bench packages of .ci/deps.sh (python3-numpy, wrk). Without a GPU it says so and exits 0.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${1:-$root/build-gpu}
[ $# -gt 0 ] && shift
rows=1000000
seconds=10
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    *) echo "usage: $0 [BUILD_DIR] [--rows N] [--seconds S]" >&2; exit 2 ;;
  esac
done
if [ ! -f "$build/plugins/sg_local_cuda.so" ] || [ ! -x "$build/tests/gpu/bench/gpu_bench" ]; then
  if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "skipped: no GPU build possible (nvcc not found)"
    exit 0
  fi
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSG_CUDA=ON
  cmake --build "$build" -j"$(nproc)" --target searchgate sg_local sg_local_cuda gpu_bench gpu_test_module
fi
module="$build/plugins/sg_local_cuda.so"
probe=$("$build/tests/gpu/gpu_test_module" "$module" probe 2>&1) || {
  rc=$?
  if [ "$rc" -eq 77 ]; then
    echo "$probe"
    exit 0
  fi
  echo "$probe" >&2
  exit 1
}
echo "$probe"
workdir=${SG_BENCH_WORKDIR:-/tmp/sggpu-bench}
mkdir -p "$workdir"
model="$workdir/e5-base-random"
[ -f "$model/model.safetensors" ] || /usr/bin/python3 "$root/tests/bench/local/make_model.py" "$model"
echo
echo "== encoder (GPU 0) =="
"$build/tests/gpu/bench/gpu_bench" "$module" encoder "$model" "$seconds"
for n in 1000000 10000000; do
  echo
  echo "== flat search, $n x 768 (GPU 0) =="
  "$build/tests/gpu/bench/gpu_bench" "$module" flat "$n" 768 "$seconds" 1
done
echo
echo "== end to end, $rows vectors =="
/usr/bin/python3 "$here/bench_e2e.py" --build "$build" --workdir "$workdir" --rows "$rows" --seconds "$seconds"
