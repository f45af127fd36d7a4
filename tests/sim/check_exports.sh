#!/usr/bin/env bash
# Checks the dynamic symbol table of the simulated libcuda.so.1 against the toolkit's stub:
# every exported driver symbol must be one the real driver exports (same versioned names), only
# cu* and memsim_* symbols may be exported, and the core entry points must be present.
#   check_exports.sh SIM_LIBCUDA STUB_LIBCUDA
set -euo pipefail
sim="$1"
stub="$2"
symbols() { nm -D --defined-only "$1" | awk '{print $3}' | sort -u; }
sim_syms="$(symbols "${sim}")"
stub_syms="$(symbols "${stub}")"
status=0
unknown="$(comm -23 <(grep '^cu' <<<"${sim_syms}") <(echo "${stub_syms}"))"
if [[ -n "${unknown}" ]]; then
  echo "exported but not a driver symbol:"; echo "${unknown}"; status=1
fi
foreign="$(grep -v -E '^(cu|memsim_)' <<<"${sim_syms}" || true)"
if [[ -n "${foreign}" ]]; then
  echo "internal symbols leak:"; echo "${foreign}"; status=1
fi
for s in cuInit cuGetProcAddress cuGetProcAddress_v2 cuCtxCreate_v4 cuMemAlloc_v2 cuMemFree_v2 \
         cuMemcpyHtoD_v2 cuMemcpyHtoD_v2_ptds cuMemcpyHtoDAsync_v2_ptsz cuStreamSynchronize \
         cuStreamSynchronize_ptsz cuLaunchKernel cuLaunchKernel_ptsz cuLaunchKernelEx \
         cuMemCreate cuMemMap cuMemSetAccess cuFuncGetParamInfo cuGetExportTable \
         memsim_current_launch; do
  if ! grep -qx "${s}" <<<"${sim_syms}"; then echo "missing: ${s}"; status=1; fi
done
echo "$(wc -l <<<"${sim_syms}") symbols exported"
exit ${status}
