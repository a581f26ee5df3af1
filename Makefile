# searchgate -- the two commands of the README, and a few more for developers.
#   make run    install what is missing, build into build/, start the gateway on configs/default.json
#   make test   install what is missing, build, run the test suite (CTest), except the package test
#   make install [PREFIX=/usr/local] [DESTDIR=] [SYSCONFDIR=/etc]   install the build (docs/deployment.md)
#   make deb    the Debian package of the build, build/searchgate_<version>_<arch>.deb
#   make test-package   that package installed and checked in a fresh debootstrap root (slow)
BUILD      ?= build
ASAN_BUILD ?= build-asan
CUDA_BUILD ?= build-cuda
FUZZ_BUILD ?= build-fuzz
XING_BUILD ?= build-xing
FUZZ_SECONDS ?= 30
FUZZ_RSS_MB  ?= 512
FUZZ_MALLOC_MB ?= 64
SOAK_SECONDS ?= 600
NVCC       ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
JOBS       ?= $(shell nproc)
CONFIG     ?= configs/default.json
CMAKE_ARGS ?=
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR    ?=

.PHONY: all run test deps deps-test build build-asan test-asan build-cuda fuzz-smoke soak soak-short format check-format \
        check-crossings clean install \
        deb test-package

all: build

deps:
	@.ci/deps.sh run

deps-test:
	@.ci/deps.sh test

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)
	cmake --build $(BUILD) -j$(JOBS)

run: build
	@if [ -x $(BUILD)/prepare-default ]; then $(BUILD)/prepare-default; fi
	$(BUILD)/searchgate --config $(CONFIG)

test: deps-test build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 900 -LE package

# the build, installed under PREFIX (binaries in bin/, plugins in lib/searchgate/, the unit in
# lib/systemd/system/, docs in share/doc/searchgate/) and SYSCONFDIR/searchgate/searchgate.json
# (kept when there is one); DESTDIR stages it elsewhere
install: build
	DESTDIR="$(DESTDIR)" SG_SYSCONFDIR="$(SYSCONFDIR)" cmake --install $(BUILD) --prefix $(PREFIX)

deb: build
	deploy/build-deb.sh $(BUILD) $(BUILD)

# label "package": tests/deploy/test_package.py (debootstrap + apt from the mirror apt uses here)
test-package: deps-test build
	cd $(BUILD) && ctest --output-on-failure --timeout 900 -L package

build-asan: deps-test
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSG_SANITIZE=ON $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j$(JOBS)

test-asan: build-asan
	cd $(ASAN_BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 1800 -LE 'no-asan|package'

# The CUDA module (-DSG_CUDA=ON, sm_90): compiled wherever nvcc exists, so it cannot rot; its
# tests run the CPU fallback and the CUDA code on a CPU emulation, and skip the real-GPU ones
# when no GPU is present.
build-cuda: deps-test
	@if [ -z "$(NVCC)" ]; then echo "build-cuda: no nvcc, skipped"; exit 0; fi; \
	cmake -S . -B $(CUDA_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSG_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC) $(CMAKE_ARGS) && \
	cmake --build $(CUDA_BUILD) -j$(JOBS) && \
	cd $(CUDA_BUILD) && ctest --output-on-failure -j$(JOBS) -R '^gpu\.' --timeout 900

# libFuzzer (clang): each target FUZZ_SECONDS, starting from its committed seed corpus (copied:
# new inputs stay out of the tree). target:corpus pairs; tests/fuzz/CMakeLists.txt says what each covers.
# Each run is held to FUZZ_RSS_MB of resident memory and FUZZ_MALLOC_MB per allocation (libFuzzer's
# -rss_limit_mb and -malloc_limit_mb, 2048 by default), with ASan's quarantine of freed memory
# kept to 64 MiB (256 by default) so that it does not fill the budget: an input of at most 4 KiB
# that makes a parser use memory out of proportion to its size is a finding, like a crash.
FUZZ_TARGETS = serper_reply:tests/fuzz/remote/corpus/serper qdrant_reply:tests/fuzz/remote/corpus/qdrant \
               upstream_reply:tests/fuzz/remote/corpus/upstream reader_reply:tests/fuzz/remote/corpus/reader \
               request:tests/fuzz/gateway/corpus/request \
               config:tests/fuzz/gateway/corpus/config jsonl:tests/fuzz/local/corpus/jsonl \
               safetensors:tests/fuzz/encoder/corpus/safetensors wordpiece:tests/fuzz/encoder/corpus/wordpiece \
               cache_value:tests/fuzz/cache/corpus/cache_value
fuzz-smoke: deps-test
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DSG_FUZZ=ON $(CMAKE_ARGS)
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target $(foreach t,$(FUZZ_TARGETS),fuzz_$(firstword $(subst :, ,$(t))))
	for tc in $(FUZZ_TARGETS); do \
	  t=$${tc%%:*}; c=$${tc#*:}; \
	  rm -rf $(FUZZ_BUILD)/corpus-$$t && cp -r $$c $(FUZZ_BUILD)/corpus-$$t && \
	  ASAN_OPTIONS=$${ASAN_OPTIONS:+$$ASAN_OPTIONS:}quarantine_size_mb=64 \
	  $(FUZZ_BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=$(FUZZ_RSS_MB) -malloc_limit_mb=$(FUZZ_MALLOC_MB) \
	    -print_final_stats=1 $(FUZZ_BUILD)/corpus-$$t || exit 1; \
	done

# The soak test (tests/soak/soak.py, docs/operations.md "The soak test"): one gateway under mixed
# valid traffic on every route type, the abuses of issue 19, a Redis kill/restart and an upstream
# hang, its RSS, CPU and fds sampled; it fails on any valid request that failed or a bound that did
# not hold. Not part of `make test`; `soak-short` (~2.5 min) runs in .ci/run.
soak: deps-test build
	/usr/bin/python3 tests/soak/soak.py --build $(BUILD) --duration $(SOAK_SECONDS) --report $(BUILD)/soak-report.json

soak-short: deps-test build
	/usr/bin/python3 tests/soak/soak.py --build $(BUILD) --short --report $(BUILD)/soak-short-report.json

format:
	git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cc' | xargs clang-format -i

check-format:
	git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cc' | xargs clang-format --dry-run --Werror

# One request's walk through gateway/ and cache/ under gdb: each file entered by at most two direct
# calls (docs/architecture.md, "Crossings"), without Redis and (deps-test installs redis-server)
# with it; a build whose tail calls keep their frames
check-crossings: deps-test
	cmake -S . -B $(XING_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS=-fno-optimize-sibling-calls $(CMAKE_ARGS)
	cmake --build $(XING_BUILD) -j$(JOBS) --target searchgate sg_example
	cd $(XING_BUILD) && ctest --output-on-failure --no-tests=error -R '^lint_crossings$$'

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(CUDA_BUILD) $(FUZZ_BUILD) $(XING_BUILD)
