#!/usr/bin/env bash
# Compiles the shim, the daemon and the simulated driver with clang and -Wthread-safety as
# errors (Note [thread-safety leg] in CMakeLists.txt); runs nothing.
#   tests/thread_safety_build.sh
# Environment: BUILD_DIR (build-tsa), JOBS (nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-tsa}
JOBS=${JOBS:-$(nproc)}
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DMEMVIRT_THREAD_SAFETY=ON -DBUILD_TESTS=OFF \
  -DBUILD_BENCHMARKS=OFF "${launcher[@]}" > /dev/null
cmake --build "$BUILD_DIR" -j"$JOBS" --target memshim memshim_daemon memvirtd memctl memsim_cuda \
  memvirt-sim
echo "thread_safety_build: shim, daemon and sim compile clean under -Wthread-safety"
