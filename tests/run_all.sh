#!/usr/bin/env bash
# Sets up, builds and runs every memvirt test from a fresh clone.
#   ./tests/run_all.sh                 # Release build in ./build, all tests
#   BUILD_DIR=build-asan SANITIZE=address ./tests/run_all.sh -LE slow
# Extra arguments are passed to ctest (e.g. -L unit, -R Sim).
# Environment: BUILD_DIR (default build), BUILD_TYPE (Release), SANITIZE (address|thread),
# MEMVIRT_PYTORCH_VENV (where tests/pytorch/setup_venv.sh keeps PyTorch),
# BUILD_BENCHMARKS (ON), JOBS (nproc), SKIP_DEPS=1 to skip the package check,
# BUILD_TARGETS (space-separated; default all) to build only what the selected tests need.
set -euo pipefail
cd "$(dirname "$0")/.."

pytorch_python=""
if [[ "${SKIP_DEPS:-0}" != 1 ]]; then
  ./deploy/install-deps.sh
  # PyTorch for tests/pytorch, in a virtual environment outside the clone (reused later).
  pytorch_python="$(./tests/pytorch/setup_venv.sh)" ||
    echo "run_all: PyTorch could not be installed; the PyTorch tests will be reported as skipped"
fi

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DSANITIZE="${SANITIZE:-}" \
  -DBUILD_TESTS=ON \
  -DBUILD_BENCHMARKS="${BUILD_BENCHMARKS:-ON}" \
  ${pytorch_python:+-DMEMVIRT_PYTORCH_PYTHON="$pytorch_python"}
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j"$JOBS" "${targets[@]}"
ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error -j"$JOBS" "$@"
