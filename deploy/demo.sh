#!/usr/bin/env bash
# memvirt demo: builds the tree and runs the sample training workload on the simulated GPU
# (build/lib/sim/libcuda.so.1) three ways: with enough device memory, with a device a third of
# the footprint (out of memory), and on that same device under libmemshim.so (same checksum).
#
#   ./deploy/demo.sh                 # install deps, configure, build, run
#   SKIP_DEPS=1 ./deploy/demo.sh     # do not run deploy/install-deps.sh
#   BUILD_DIR=/tmp/b ./deploy/demo.sh  # another build directory (default ./build)
#   DEMO_TARGETS=all ./deploy/demo.sh  # build the whole tree instead of the demo's targets
#
# Tunables (environment): FOOTPRINT_MB (default 192), ITERATIONS (default 4),
# SMALL_DEVICE (default 64M: the oversubscribed device), MEMSIM_H2D_GBPS / MEMSIM_D2H_GBPS
# (default 12).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-${ROOT}/build}"
cd "${ROOT}"

if [[ "${SKIP_DEPS:-0}" != "1" ]]; then
  "${ROOT}/deploy/install-deps.sh"
fi

echo "== building into ${BUILD} (log: ${BUILD}/demo-build.log)"
mkdir -p "${BUILD}"
TARGETS=(--target memsim_cuda memvirt-sample-train memshim)
[[ "${DEMO_TARGETS:-}" == "all" ]] && TARGETS=()
if ! { cmake -S "${ROOT}" -B "${BUILD}" -DCMAKE_BUILD_TYPE=Release &&
       cmake --build "${BUILD}" -j"$(nproc)" "${TARGETS[@]}"; } >"${BUILD}/demo-build.log" 2>&1; then
  tail -n 40 "${BUILD}/demo-build.log"
  echo "== build FAILED"
  exit 1
fi

FOOTPRINT_MB="${FOOTPRINT_MB:-192}"
ITERATIONS="${ITERATIONS:-4}"
SMALL_DEVICE="${SMALL_DEVICE:-64M}"
export MEMSIM_H2D_GBPS="${MEMSIM_H2D_GBPS:-12}"
export MEMSIM_D2H_GBPS="${MEMSIM_D2H_GBPS:-12}"
export LD_LIBRARY_PATH="${BUILD}/lib/sim${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
SAMPLE=("${BUILD}/bin/memvirt-sample-train" --footprint-mb "${FOOTPRINT_MB}"
        --iterations "${ITERATIONS}" --verify)

# run_case TITLE DEVICE_MEMORY PRELOAD: runs the sample, prints its output indented, and sets
# CASE_STATUS and CASE_CHECKSUM.
run_case() {
  local title=$1 device=$2 preload=$3 output
  echo "== ${title}: ${FOOTPRINT_MB} MiB footprint on a ${device} simulated device" \
       "${preload:+(LD_PRELOAD=$(basename "${preload}"))}"
  set +e
  output="$(MEMSIM_DEVICE_MEMORY="${device}" LD_PRELOAD="${preload}" "${SAMPLE[@]}" 2>&1)"
  CASE_STATUS=$?
  set -e
  echo "${output}" | grep -v '^\[memshim' | sed 's/^/   /'
  CASE_CHECKSUM="$(echo "${output}" | awk '/^checksum:/ {print $2}')"
  echo
}

echo "== memvirt demo: sample training workload on the simulated GPU"
echo "   driver: ${BUILD}/lib/sim/libcuda.so.1 (H2D ${MEMSIM_H2D_GBPS} GB/s, D2H ${MEMSIM_D2H_GBPS} GB/s)"
echo

run_case "1. reference" 1G ""
REF_STATUS=${CASE_STATUS} REF_SUM=${CASE_CHECKSUM}
run_case "2. oversubscribed, no shim" "${SMALL_DEVICE}" ""
PLAIN_STATUS=${CASE_STATUS}
run_case "3. oversubscribed, with memvirt" "${SMALL_DEVICE}" "${BUILD}/lib/libmemshim.so"
SHIM_STATUS=${CASE_STATUS} SHIM_SUM=${CASE_CHECKSUM}

if [[ ${REF_STATUS} -eq 0 && ${PLAIN_STATUS} -ne 0 && ${SHIM_STATUS} -eq 0 &&
      "${REF_SUM}" == "${SHIM_SUM}" ]]; then
  echo "== result: OK: the ${FOOTPRINT_MB} MiB job fails on a ${SMALL_DEVICE} device alone and" \
       "completes under memvirt with the reference checksum ${REF_SUM}"
  exit 0
fi
echo "== result: FAILED (reference exit ${REF_STATUS} checksum ${REF_SUM:-none};" \
     "no-shim exit ${PLAIN_STATUS}; shim exit ${SHIM_STATUS} checksum ${SHIM_SUM:-none})"
exit 1
