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
# the one the rows compare against. A third prediction times the run as the
# shim pages (`--predict-layout shim-mechanism`, Note [shim mechanism] in
# policy/sim/simulator.cc): the one that models the mechanism measured
# here. DEVICE is the full-scale device memory
# (e.g. 30Gi); the run uses DEVICE x SCALE as the shim's budget. A ratio off
# by more than 15% is marked.
#
# The table also gives the bytes the simulated link carried in each direction
# over all iterations (MEMSIM_LOG_LINK, docs/sim.md) beside what memvirt-sim
# predicts for the same iterations with the shim mechanism.
#
# After the table, a link check re-runs the last DEVICE with the simulated
# link LINK_CHECK_FACTOR times slower, to show how much of the measured time is
# transfer time.
#
# Environment: PCIE_GBPS (full-scale link, default 15.754), POLICY (lifetime),
# REFERENCE_RUNS (3: the unlimited references are the fastest of that many runs),
# ROW_RUNS (1: each row's run is the fastest of that many),
# LINK_CHECK_FACTOR (2),
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

# The fastest of REFERENCE_RUNS runs (a reference slowed down by other load
# on the machine would make every row look faster than it is).
fastest() {  # fastest RUNS COMMAND...
  local best="" out runs=$1
  shift
  for ((r = 0; r < runs; ++r)); do
    out=$("$@")
    if [ -z "$best" ] || [ "$(py "import json, sys; print(json.loads(sys.argv[1])['time_us'] < json.loads(sys.argv[2])['time_us'])" "$out" "$best")" = True ]; then
      best=$out
    fi
  done
  printf '%s\n' "$best"
}
# Unlimited reference: the plain simulated GPU with room for everything.
base=$(fastest "${REFERENCE_RUNS:-3}" env MEMSIM_DEVICE_MEMORY=64G "$replay" "${common[@]}")
keep unlimited-plain "$base"
base_us=$(field "$base" "['time_us']")
shim_base=$(fastest "${REFERENCE_RUNS:-3}" env MEMSIM_DEVICE_MEMORY=64G MEMSHIM_POLICY="$policy" LD_PRELOAD="$shim" \
  "$replay" "${common[@]}")
keep unlimited-shim "$shim_base"
shim_base_us=$(field "$shim_base" "['time_us']")
echo "trace $trace scale $scale time-scale $time_scale link $scaled_gbps GB/s policy $policy"
echo "unlimited, plain: $base_us us last iteration, measured/ideal $(field "$base" "['slowdown']"), mismatches $(field "$base" "['mismatches']")"
echo "unlimited, shim: $shim_base_us us last iteration, measured/ideal $(field "$shim_base" "['slowdown']"), mismatches $(field "$shim_base" "['mismatches']")"
echo
echo "| device (full scale) | budget | mismatches | measured / plain | measured / shim unlimited | measured / ideal | predicted, tensor layout | predicted, shim layout | predicted, shim mechanism | shim vs shim layout | shim vs shim mechanism | same, over ideal | shim mechanism, kernels x overhead | shim vs it | link MB in / out, measured | same, predicted (shim mechanism) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
link_log=$(mktemp)
trap 'rm -f "$link_log"' EXIT
run_shim() {  # run_shim BUDGET [extra replay flags...]: the replay under the shim
  local budget=$1
  shift
  # The simulated GPU gets the budget plus room for the shim's own staging.
  MEMSIM_DEVICE_MEMORY=$((budget + (16 << 20))) MEMSHIM_DEVICE_BUDGET=$budget \
    MEMSHIM_POLICY=$policy MEMSIM_LOG_LINK=1 LD_PRELOAD="$shim" "$replay" "${common[@]}" "$@" \
    2> "$link_log"
}
# The link bytes of the last run_shim, "IN / OUT" in MB (10^6 B).
measured_link() {
  py "
import re, sys
m = re.search(r'link: h2d (\d+) bytes, d2h (\d+) bytes', open('$link_log').read())
print('%.1f / %.1f' % (int(m.group(1)) / 1e6, int(m.group(2)) / 1e6) if m else 'n/a')"
}
predict=()
for device in "$@"; do
  budget=$(scaled_bytes "$device")
  predict=(--predict-device-memory "$budget" --predict-pcie-gbps "$scaled_gbps"
           --predict-policy "$policy")
  out=$(fastest "${ROW_RUNS:-1}" run_shim "$budget" "${predict[@]}")
  keep "$device" "$out"
  link=$(measured_link)
  link_at_last=$(cat "$link_log")
  # The same prediction with the trace paged as the shim pages it (Note [shim layout]).
  shim_layout=$("$replay" "${common[@]}" "${predict[@]}" --predict-layout shim --predict-only)
  keep "$device-shim-layout" "$shim_layout"
  # Paged and timed as the shim pages (Note [shim mechanism]).
  mechanism=$("$replay" "${common[@]}" "${predict[@]}" --predict-layout shim-mechanism --predict-only)
  keep "$device-shim-mechanism" "$mechanism"
  time_us=$(field "$out" "['time_us']")
  measured=$(py "print('%.4f' % ($time_us / $base_us))")
  measured_shim=$(py "print('%.4f' % ($time_us / $shim_base_us))")
  predicted=$(py "print('%.4f' % $(field "$out" "['predicted']['slowdown']"))")
  predicted_shim=$(py "print('%.4f' % $(field "$shim_layout" "['predicted']['slowdown']"))")
  predicted_mech=$(py "print('%.4f' % $(field "$mechanism" "['predicted']['slowdown']"))")
  measured_ideal=$(py "print('%.4f' % $(field "$out" "['slowdown']"))")
  # The replay's kernels take longer than their trace time (verification,
  # launch): the unlimited shim run's measured/ideal. With compute that much
  # longer and the transfers of the prediction added unchanged (the shim
  # does not overlap them), the slowdown over the unlimited shim run is:
  overhead=$(field "$shim_base" "['slowdown']")
  predicted_mech_ovh=$(py "print('%.4f' % (($predicted_mech - 1 + $overhead) / $overhead))")
  ratio() { py "r = $1 / $2; print('%.3f%s' % (r, '' if abs(r - 1) <= 0.15 else ' (>15%)'))"; }
  predicted_link=$(py "
import json, sys
it = json.loads(sys.argv[1])['predicted']['per_iteration']
print('%.1f / %.1f' % (sum(i['h2d_bytes'] for i in it) / 1e6, sum(i['d2h_bytes'] for i in it) / 1e6))" "$mechanism")
  echo "| $device | $budget | $(field "$out" "['mismatches']") | $measured | $measured_shim | $measured_ideal | $predicted | $predicted_shim | $predicted_mech | $(ratio "$measured_shim" "$predicted_shim") | $(ratio "$measured_shim" "$predicted_mech") | $(ratio "$measured_ideal" "$predicted_mech") | $predicted_mech_ovh | $(ratio "$measured_shim" "$predicted_mech_ovh") | $link | $predicted_link |"
done

# Link check: the last size again with the simulated link LINK_CHECK_FACTOR
# times slower. The shim's page-ins and page-outs are charged to the link
# (Note [host-backed transfers] in sim/src/link_charge.h), so the time grows by
# up to the transfer time added per iteration (the bytes moved each way over
# the slower link, less over the faster one; less where transfers overlap
# kernels or each other).
factor=${LINK_CHECK_FACTOR:-2}
slow_gbps=$(py "print('%.9g' % ($scaled_gbps / $factor))")
slow=$(MEMSIM_H2D_GBPS=$slow_gbps MEMSIM_D2H_GBPS=$slow_gbps run_shim "$budget")
keep "$device-slow-link" "$slow"
slow_us=$(field "$slow" "['time_us']")
h2d=$(field "$shim_layout" "['predicted']['h2d_bytes']")
d2h=$(field "$shim_layout" "['predicted']['d2h_bytes']")
# The shim mechanism's prediction on the slower link.
slow_mech=$("$replay" "${common[@]}" --predict-device-memory "$budget" --predict-pcie-gbps "$slow_gbps" \
            --predict-policy "$policy" --predict-layout shim-mechanism --predict-only)
keep "$device-slow-link-shim-mechanism" "$slow_mech"
mech_us=$(field "$mechanism" "['predicted']['time_us']")
slow_mech_us=$(field "$slow_mech" "['predicted']['time_us']")
added_us() { py "print('%.0f' % (max($h2d, $d2h) * (1 / $slow_gbps - 1 / $scaled_gbps) / 1e3))"; }
# What the bytes the shim moved (all iterations, both directions, from the
# last full-speed run) add per iteration if its copies run one at a time.
serial_us=$(py "
import re
m = re.search(r'link: h2d (\d+) bytes, d2h (\d+) bytes', '''$link_at_last''')
print('%.0f' % ((int(m.group(1)) + int(m.group(2))) / $iterations * (1 / $slow_gbps - 1 / $scaled_gbps) / 1e3) if m else 'n/a')")
echo
echo "link check at $device: link $scaled_gbps -> $slow_gbps GB/s: last iteration $time_us -> $slow_us us" \
     "(+$(py "print('%.0f' % ($slow_us - $time_us))") us); the shim layout moves $h2d B in and $d2h B out" \
     "per iteration, whose busier direction takes $(added_us) us longer on the slower link;" \
     "the bytes the shim moved (measured, both directions, one at a time) take $serial_us us longer per iteration;" \
     "the shim mechanism predicts $mech_us -> $slow_mech_us us (+$(py "print('%.0f' % ($slow_mech_us - $mech_us))") us)"
