#!/bin/bash
# calibrate.sh BUILD_DIR TRACE SCALE TIME_SCALE DEVICE [DEVICE...]
#
# memvirt-sim against the mechanism: replays TRACE scaled down (tensor bytes
# x SCALE, kernel times x TIME_SCALE, link bandwidth x SCALE / TIME_SCALE, so
# that every transfer keeps its share of the iteration) on the simulated GPU,
# once without a memory limit and once per DEVICE under the shim with the
# lifetime policy, and prints the measured slowdown (last iteration over the
# unlimited run's) beside memvirt-sim's predictions for the same scaled
# configuration: with its own block layout (tensors paged alone), and with the
# trace paged as the shim pages it (`--predict-layout shim`, Note [shim
# layout] in policy/include/memvirt/policy/shim_layout.h). Two unlimited
# references: the plain simulated GPU (it pays a cuMemAlloc that commits
# memory and a synchronizing cuMemFree per tensor per iteration), and the shim
# with room for everything (it keeps its chunks and frees without waiting),
# the one the rows compare against. DEVICE is the full-scale device memory
# (e.g. 30Gi); the run uses DEVICE x SCALE as the shim's budget. A ratio off
# by more than 15% is marked.
#
# After the table, a link check re-runs the last DEVICE with the simulated
# link 1000 times slower, to show whether the shim's transfers are charged.
#
# Environment: PCIE_GBPS (full-scale link, default 15.754), POLICY (lifetime),
# ITERATIONS (2), RAW_DIR (if set, every run's JSON is kept there as
# unlimited-plain.json, unlimited-shim.json, DEVICE.json, DEVICE-shim-layout.json
# and DEVICE-slow-link.json, so predictions can
# be recomputed with `memvirt-replay --predict-only` without re-measuring).
# Needs python3 (JSON and byte arithmetic only).
set -euo pipefail

if [ $# -lt 5 ]; then
  echo "usage: $0 BUILD_DIR TRACE SCALE TIME_SCALE DEVICE [DEVICE...]" >&2
  exit 2
fi
build=$1 trace=$2 scale=$3 time_scale=$4
shift 4
pcie=${PCIE_GBPS:-15.754}
policy=${POLICY:-lifetime}
iterations=${ITERATIONS:-2}
replay="$build/bin/memvirt-replay"
shim="$build/lib/libmemshim.so"
for f in "$replay" "$shim" "$build/lib/sim/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (build memvirt-replay, memshim, memsim_cuda)" >&2; exit 1; }
done

py() { python3 -c "$@"; }
scaled_gbps=$(py "print('%.9g' % ($pcie * $scale / $time_scale))")
# Full-scale bytes (K/M/G/T binary suffixes, as memvirt-sim reads them) x SCALE.
scaled_bytes() {
  py "
import re, sys
m = re.fullmatch(r'([0-9.]+)([KMGT]?)i?', '$1')
if not m: sys.exit('bad size: $1')
mult = {'': 1, 'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}[m.group(2)]
print(int(float(m.group(1)) * mult * $scale))"
}
keep() { if [ -n "${RAW_DIR:-}" ]; then mkdir -p "$RAW_DIR" && printf '%s\n' "$2" > "$RAW_DIR/$1.json"; fi; }
field() { py "import json, sys; d = json.loads(sys.argv[1]); print(d$2)" "$1"; }

export MEMSIM_H2D_GBPS=$scaled_gbps MEMSIM_D2H_GBPS=$scaled_gbps
common=(--trace "$trace" --scale "$scale" --time-scale "$time_scale" --iterations "$iterations")

# Unlimited reference: the plain simulated GPU with room for everything.
base=$(MEMSIM_DEVICE_MEMORY=64G "$replay" "${common[@]}")
keep unlimited-plain "$base"
base_us=$(field "$base" "['time_us']")
shim_base=$(MEMSIM_DEVICE_MEMORY=64G MEMSHIM_POLICY=$policy LD_PRELOAD="$shim" "$replay" "${common[@]}")
keep unlimited-shim "$shim_base"
shim_base_us=$(field "$shim_base" "['time_us']")
echo "trace $trace scale $scale time-scale $time_scale link $scaled_gbps GB/s policy $policy"
echo "unlimited, plain: $base_us us last iteration, measured/ideal $(field "$base" "['slowdown']"), mismatches $(field "$base" "['mismatches']")"
echo "unlimited, shim: $shim_base_us us last iteration, measured/ideal $(field "$shim_base" "['slowdown']"), mismatches $(field "$shim_base" "['mismatches']")"
echo
echo "| device (full scale) | budget | mismatches | measured / plain | measured / shim unlimited | predicted, tensor layout | predicted, shim layout | shim vs tensor layout | shim vs shim layout |"
echo "|---|---|---|---|---|---|---|---|---|"
run_shim() {  # run_shim BUDGET [extra replay flags...]: the replay under the shim
  local budget=$1
  shift
  # The simulated GPU gets the budget plus room for the shim's own staging.
  MEMSIM_DEVICE_MEMORY=$((budget + (16 << 20))) MEMSHIM_DEVICE_BUDGET=$budget \
    MEMSHIM_POLICY=$policy LD_PRELOAD="$shim" "$replay" "${common[@]}" "$@"
}
predict=()
for device in "$@"; do
  budget=$(scaled_bytes "$device")
  predict=(--predict-device-memory "$budget" --predict-pcie-gbps "$scaled_gbps"
           --predict-policy "$policy")
  out=$(run_shim "$budget" "${predict[@]}")
  keep "$device" "$out"
  # The same prediction with the trace paged as the shim pages it (Note [shim layout]).
  shim_layout=$("$replay" "${common[@]}" "${predict[@]}" --predict-layout shim --predict-only)
  keep "$device-shim-layout" "$shim_layout"
  time_us=$(field "$out" "['time_us']")
  measured=$(py "print('%.4f' % ($time_us / $base_us))")
  measured_shim=$(py "print('%.4f' % ($time_us / $shim_base_us))")
  predicted=$(py "print('%.4f' % $(field "$out" "['predicted']['slowdown']"))")
  predicted_shim=$(py "print('%.4f' % $(field "$shim_layout" "['predicted']['slowdown']"))")
  ratio() { py "r = $1 / $2; print('%.3f%s' % (r, '' if abs(r - 1) <= 0.15 else ' (>15%)'))"; }
  echo "| $device | $budget | $(field "$out" "['mismatches']") | $measured | $measured_shim | $predicted | $predicted_shim | $(ratio "$measured_shim" "$predicted") | $(ratio "$measured_shim" "$predicted_shim") |"
done

# Link check: the last size again with the simulated link 1000 times slower.
# If the shim's page-ins and page-outs were charged to the link, the time
# would grow by about (bytes moved / link) x 999; if it barely moves, the
# measured slowdowns above contain no transfer time at all.
slow_gbps=$(py "print('%.9g' % ($scaled_gbps / 1000))")
slow=$(MEMSIM_H2D_GBPS=$slow_gbps MEMSIM_D2H_GBPS=$slow_gbps run_shim "$budget")
keep "$device-slow-link" "$slow"
slow_us=$(field "$slow" "['time_us']")
moved=$(field "$shim_layout" "['predicted']['traffic_bytes']")
echo
echo "link check at $device: link $scaled_gbps -> $slow_gbps GB/s: last iteration $time_us -> $slow_us us" \
     "(x$(py "print('%.3f' % ($slow_us / $time_us))")); the shim layout moves $moved bytes per iteration," \
     "which at $slow_gbps GB/s take $(py "print('%.0f' % ($moved / ($slow_gbps * 1e3)))") us"
