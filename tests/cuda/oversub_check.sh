#!/usr/bin/env bash
# tests/gpu/oversub_workload.cu on the simulated driver (see CMakeLists.txt):
#   oversub_check.sh WORKLOAD LIBMEMSHIM
# 1. a 64 MiB device with room to spare: the reference checksum;
# 2. a 64 MiB device under libmemshim.so with a 192 MiB footprint (3x), eager and as CUDA graph
#    launches: the reference checksum;
# 3. the same without the shim: out of memory (exit 3), cleanly.
set -euo pipefail
workload=$1 shim=$2
footprint=$((192 << 20))
fail() { echo "FAIL: $*"; exit 1; }
checksum() { sed -n 's/^checksum //p' <<<"$1"; }

reference=$(MEMSIM_DEVICE_MEMORY=1G "$workload" "$footprint" 3)
want=$(checksum "$reference")
[[ -n $want ]] || fail "no checksum from the unconstrained run"
echo "unconstrained: checksum $want"

for mode in eager graph; do
  out=$(MEMSIM_DEVICE_MEMORY=64M LD_PRELOAD=$shim MEMSHIM_HOST_BUDGET=1G \
        MEMSHIM_DAEMON_SOCKET=/nonexistent/memvirtd.sock MEMSHIM_LOG=info \
        "$workload" "$footprint" 3 $([[ $mode == graph ]] && echo graph) 2>"${TMPDIR:-/tmp}/oversub_shim.$$.log") \
    || { cat "${TMPDIR:-/tmp}/oversub_shim.$$.log"; fail "$mode run under the shim exited $?"; }
  got=$(checksum "$out")
  log="${TMPDIR:-/tmp}/oversub_shim.$$.log"
  grep -q "virtual device memory:" "$log" || fail "the shim logged nothing: was it loaded?"
  # The runtime launches CUkernels: the shim decodes them with cuKernelGetParamInfo (docs/shim.md,
  # Note [parameter information]), none is left opaque.
  grep -q "argument words (cuKernelGetParamInfo)" "$log" \
    || { cat "$log"; fail "$mode: no kernel decoded with cuKernelGetParamInfo"; }
  ! grep -q "no parameter information" "$log" \
    || { grep "no parameter information" "$log"; fail "$mode: a kernel was left undecoded"; }
  rm -f "${TMPDIR:-/tmp}/oversub_shim.$$.log"
  [[ $got == "$want" ]] || fail "$mode under the shim at 3x: checksum $got, want $want"
  echo "shim at 3x ($mode): checksum $got"
done

set +e
MEMSIM_DEVICE_MEMORY=64M "$workload" "$footprint" 3 >/dev/null 2>&1
rc=$?
set -e
[[ $rc == 3 ]] || fail "without the shim at 3x: exit $rc, want 3 (out of memory)"
echo "without the shim at 3x: out of memory, exit 3"
echo "3 passed, 0 failed"
