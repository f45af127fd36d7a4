#!/usr/bin/env bash
# memvirt demo: builds the tree and runs the sample training workload on the simulated GPU
# (build/lib/sim/libcuda.so.1), printing a short summary.
#
#   ./deploy/demo.sh                 # install deps, configure, build, run
#   SKIP_DEPS=1 ./deploy/demo.sh     # do not run deploy/install-deps.sh
#   BUILD_DIR=/tmp/b ./deploy/demo.sh  # another build directory (default ./build)
#   DEMO_TARGETS=all ./deploy/demo.sh  # build the whole tree instead of the demo's targets
#
# Tunables (environment): FOOTPRINT_MB (default 192), ITERATIONS (default 4),
# MEMSIM_DEVICE_MEMORY (default 1G), MEMSIM_H2D_GBPS / MEMSIM_D2H_GBPS (default 12).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-${ROOT}/build}"
cd "${ROOT}"

if [[ "${SKIP_DEPS:-0}" != "1" ]]; then
  "${ROOT}/deploy/install-deps.sh"
fi

echo "== building into ${BUILD} (log: ${BUILD}/demo-build.log)"
mkdir -p "${BUILD}"
TARGETS=(--target memsim_cuda memvirt-sample-train)
[[ "${DEMO_TARGETS:-}" == "all" ]] && TARGETS=()
if ! { cmake -S "${ROOT}" -B "${BUILD}" -DCMAKE_BUILD_TYPE=Release &&
       cmake --build "${BUILD}" -j"$(nproc)" "${TARGETS[@]}"; } >"${BUILD}/demo-build.log" 2>&1; then
  tail -n 40 "${BUILD}/demo-build.log"
  echo "== build FAILED"
  exit 1
fi

FOOTPRINT_MB="${FOOTPRINT_MB:-192}"
ITERATIONS="${ITERATIONS:-4}"
export MEMSIM_DEVICE_MEMORY="${MEMSIM_DEVICE_MEMORY:-1G}"
export MEMSIM_H2D_GBPS="${MEMSIM_H2D_GBPS:-12}"
export MEMSIM_D2H_GBPS="${MEMSIM_D2H_GBPS:-12}"
export LD_LIBRARY_PATH="${BUILD}/lib/sim${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"

echo "== memvirt demo: sample training workload on the simulated GPU"
echo "   driver:    ${BUILD}/lib/sim/libcuda.so.1"
echo "   device:    ${MEMSIM_DEVICE_MEMORY} of device memory," \
     "H2D ${MEMSIM_H2D_GBPS} GB/s, D2H ${MEMSIM_D2H_GBPS} GB/s"
echo "   workload:  ${FOOTPRINT_MB} MiB footprint, ${ITERATIONS} iterations (host-verified)"
echo
set +e
OUTPUT="$("${BUILD}/bin/memvirt-sample-train" --footprint-mb "${FOOTPRINT_MB}" \
          --iterations "${ITERATIONS}" --verify 2>&1)"
STATUS=$?
set -e
echo "${OUTPUT}" | sed 's/^/   /'
echo
if [[ ${STATUS} -eq 0 ]]; then
  echo "== result: OK (checksum $(echo "${OUTPUT}" | awk '/^checksum:/ {print $2}')," \
       "$(echo "${OUTPUT}" | awk -F': ' '/^time:/ {print $2}'))"
else
  echo "== result: FAILED (exit ${STATUS})"
fi
exit ${STATUS}
