#!/usr/bin/env bash
# Builds the libFuzzer targets (-DMEMVIRT_FUZZ=ON, clang) and runs each for SECONDS from its
# committed seed corpus; fails on the first crash, sanitizer report or timeout.
#   tests/fuzz/run_fuzzers.sh 60              # every target, 60 s each
#   FUZZERS="memtrace_fuzzer" tests/fuzz/run_fuzzers.sh 10
# Environment: BUILD_DIR (build-fuzz), JOBS (nproc), FUZZERS (space-separated target names).
#
# Note [fuzzing]
#   Each target starts from tests/fuzz/corpus/<name without _fuzzer>/ (small files, committed)
#   and writes what it learns to a scratch corpus in the build folder, so the committed seeds stay
#   as they are. A crash leaves its input as BUILD_DIR/fuzz/artifacts/<target>/crash-*; replay
#   it with `BUILD_DIR/fuzz/<target> <file>`, fix the code, and add a unit test beside the code
#   that reproduces it (as memtrace_test.cc and shim_core_test.cc do).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:?usage: run_fuzzers.sh SECONDS}
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
FUZZERS=${FUZZERS:-memtrace_fuzzer shim_launch_args_fuzzer node_state_fuzzer tier_protocol_fuzzer}
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DMEMVIRT_FUZZ=ON -DBUILD_TESTS=ON -DBUILD_BENCHMARKS=OFF \
  "${launcher[@]}" > /dev/null
targets=()
for f in $FUZZERS; do targets+=(--target "$f"); done
cmake --build "$BUILD_DIR" -j"$JOBS" "${targets[@]}"
for f in $FUZZERS; do
  seeds="tests/fuzz/corpus/${f%_fuzzer}"
  scratch="$BUILD_DIR/fuzz/corpus/$f"
  artifacts="$BUILD_DIR/fuzz/artifacts/$f/"
  mkdir -p "$scratch" "$artifacts"
  echo "== $f: ${seconds}s from $seeds"
  if ! "$BUILD_DIR/fuzz/$f" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts" "$scratch" "$seeds" \
      > "$BUILD_DIR/fuzz/$f.log" 2>&1; then
    tail -n 60 "$BUILD_DIR/fuzz/$f.log"
    echo "run_fuzzers: $f failed; inputs in $artifacts" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^Done' "$BUILD_DIR/fuzz/$f.log" || true
done
echo "run_fuzzers: all targets ran ${seconds}s without a finding"
