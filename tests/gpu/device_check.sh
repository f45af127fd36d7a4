#!/usr/bin/env bash
# The GPU check: runs what build_carry.sh put in this folder, one stage after another, within
# one device call (10 minutes), and keeps every result even if the call is cut short.
#   OUT=/some/dir ./device_check.sh            on a GPU machine (driver, python3, PyTorch)
#   OUT=/some/dir ./device_check.sh --sim      on the simulated driver carried in sim/ (CI)
# Each stage writes $OUT/NAME.log and $OUT/NAME.rc and rewrites $OUT/summary.json as it
# finishes; a global deadline (DEADLINE_S, default 540 s) bounds the whole run, and each stage
# gets min(its own limit, what is left). Stages, most informative first:
#   env            machine, driver, PyTorch, locked-memory limit, NUMA
#   driver_probe   the driver's answers the shim depends on, without the shim (driver_probe.json);
#                  with --sim, compared with a real driver's recorded answers (reference/)
#   shim_smoke     a small run under the shim at MEMSHIM_LOG=debug: the shim must be active
#   oversub_ref    the oversubscribed workload, unconstrained: the reference checksum
#   oversub_shim   the same under the shim with a device budget of a third of its footprint
#   torch_ref      the PyTorch training loop, unconstrained (skipped without PyTorch)
#   torch_shim     the same under the shim at half its peak: losses equal bit for bit
#   native_ref     PyTorch's own kernels (elementwise, cuBLAS, a CUDA graph) over 8 GiB,
#                  unconstrained (GPU only: the simulated driver cannot run PyTorch's kernels)
#   native_shim    the same under the shim with a third of that: checksums equal bit for bit
#   native_expandable  the same with PyTorch's expandable segments (its own cuMemCreate/cuMemMap),
#                  with the shim's default address space (16 x the device's memory)
#   oversub_graph  the workload as CUDA graph launches under the shim
#   passthru_ops   batched copies, 3D peer copies, stream write/wait value and batch memory
#                  operations on shim memory queued while the host pages 3x the budget: the
#                  output equals the unconstrained run's
# Exit status: 0 when no stage failed (skipped stages do not fail the run).
set -u -o pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SIM=0
[[ ${1:-} == --sim ]] && SIM=1
OUT="${OUT:-$HERE/out}"
mkdir -p "$OUT"
START=$(date +%s)
DEADLINE=$((START + ${DEADLINE_S:-540}))
SHIM="$HERE/lib/libmemshim.so"
PY="${PYTHON:-python3}"
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # deterministic cuBLAS for the loss comparison

if ((SIM)); then
  export LD_LIBRARY_PATH="$HERE/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export MEMSIM_KERNELS="$HERE/sim/gpu_check_kernels.so:$HERE/sim/gpt_kernels_host.so"
  export MEMSIM_DEVICE_MEMORY=256M MEMSIM_NODE=
  FOOTPRINT=$((384 << 20))   # 1.5x the simulated device
  SMOKE_FOOTPRINT=$((32 << 20))
  HOST_BUDGET=$((1 << 30))
  UNCONSTRAINED="MEMSIM_DEVICE_MEMORY=1G"  # reference runs get a device the footprint fits in
else
  UNCONSTRAINED=""
  FOOTPRINT=$((12 << 30))
  SMOKE_FOOTPRINT=$((256 << 20))
  HOST_BUDGET=$((32 << 30))
fi
BUDGET=$((FOOTPRINT / 3))
NATIVE_FOOTPRINT=$((8 << 30))
PASSTHRU_FOOTPRINT=$((768 << 20))
SHIM_ENV=(LD_PRELOAD="$SHIM" MEMSHIM_HOST_BUDGET=$HOST_BUDGET
          MEMSHIM_DAEMON_SOCKET=/nonexistent/memvirtd.sock)

declare -a NAMES=() STATUS=() SECONDS_TAKEN=() NOTES=()
write_summary() {
  local i sep=""
  {
    printf '{\n  "mode": "%s",\n  "elapsed_s": %d,\n  "stages": [' \
      "$( ((SIM)) && echo sim || echo gpu)" $(($(date +%s) - START))
    for i in "${!NAMES[@]}"; do
      printf '%s\n    {"name": "%s", "status": "%s", "seconds": %s, "note": "%s"}' "$sep" \
        "${NAMES[$i]}" "${STATUS[$i]}" "${SECONDS_TAKEN[$i]}" "${NOTES[$i]//\"/\'}"
      sep=","
    done
    printf '\n  ]\n}\n'
  } >"$OUT/summary.json.tmp" && mv "$OUT/summary.json.tmp" "$OUT/summary.json"
}
record() {  # record NAME STATUS SECONDS NOTE
  NAMES+=("$1") STATUS+=("$2") SECONDS_TAKEN+=("$3") NOTES+=("$4")
  write_summary
  echo "[device_check] $1: $2 (${3}s) $4"
}
# stage NAME LIMIT_S FUNCTION: runs FUNCTION (exported) with its output in $OUT/NAME.log; the
# function's last line of output "note: ..." becomes the stage's note; exit 77 means skipped.
stage() {
  local name=$1 limit=$2 fn=$3 left t0 rc status note
  left=$((DEADLINE - $(date +%s) - 5))
  if ((left < 10)); then
    record "$name" skipped 0 "global deadline reached"
    return
  fi
  ((limit > left)) && limit=$left
  t0=$(date +%s)
  STAGE_NAME=$name timeout -k 5 "$limit" bash -c "$fn" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "$rc" >"$OUT/$name.rc"
  note="$(sed -n 's/^note: //p' "$OUT/$name.log" | tail -1)"
  case $rc in
    0) status=pass ;;
    77) status=skipped ;;
    124 | 137) status=timeout note="limit ${limit}s; $note" ;;
    *) status=fail ;;
  esac
  record "$name" "$status" $(($(date +%s) - t0)) "$note"
}
checksum_of() { sed -n 's/^checksum //p' "$OUT/$1.log" | tail -1; }
# A stage under the shim proves the shim was active: its start-up line is in the stage's log.
shim_was_active() {
  grep -q "virtual device memory:" "$OUT/$1.log" || { echo "note: the shim was not active"; return 1; }
}
export -f checksum_of shim_was_active
export OUT HERE SHIM PY SIM NATIVE_FOOTPRINT PASSTHRU_FOOTPRINT FOOTPRINT SMOKE_FOOTPRINT BUDGET HOST_BUDGET UNCONSTRAINED
export SHIM_ENV_STR="${SHIM_ENV[*]}"

env_stage() {
  set -x
  uname -a
  ulimit -l
  if ((SIM)); then echo "simulated driver: $LD_LIBRARY_PATH"; else nvidia-smi -q | head -120; fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null
  "$PY" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
  (command -v numactl >/dev/null && numactl -H) || ls /sys/devices/system/node/
  grep -E 'MemTotal|MemAvailable|HugePages_Total' /proc/meminfo
  if ((SIM)); then echo "note: simulated driver"; else
    echo "note: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  fi
}
probe_stage() {
  "$HERE/bin/driver_probe" >"$OUT/driver_probe.json"
  rc=$?
  cat "$OUT/driver_probe.json"
  echo "note: $(grep -E '"(driver_version|attr_host_numa_vmm_supported|host_numa_kernel_result_ok|map_us|capture_global_event_query_other_thread)"' "$OUT/driver_probe.json" | tr -d ' \n')"
  # On the simulated driver: every answer a real driver recorded must be the sim's too.
  if ((SIM)); then
    local ref
    for ref in "$HERE"/reference/*.json; do
      echo "compared with $ref:"
      "$PY" "$HERE/compare_probe.py" "$ref" "$OUT/driver_probe.json" || rc=1
    done
  fi
  return $rc
}
smoke_stage() {
  env $SHIM_ENV_STR MEMSHIM_LOG=debug MEMSHIM_DEVICE_BUDGET=$((SMOKE_FOOTPRINT / 2)) \
    "$HERE/bin/oversub_workload" "$SMOKE_FOOTPRINT" 1 || return 1
  # The shim is active: it logged its start, and cuMemGetInfo reports the virtual capacity.
  shim_was_active shim_smoke || return 1
  echo "note: shim active"
}
oversub_ref_stage() {
  env $UNCONSTRAINED "$HERE/bin/oversub_workload" "$FOOTPRINT" 3 || return 1
  echo "note: footprint $((FOOTPRINT >> 20)) MiB"
}
oversub_shim_stage() {
  env $SHIM_ENV_STR MEMSHIM_LOG=info MEMSHIM_DEVICE_BUDGET=$BUDGET \
    "$HERE/bin/oversub_workload" "$FOOTPRINT" 3 || return 1
  shim_was_active oversub_shim || return 1
  local want got
  want=$(checksum_of oversub_ref) got=$(checksum_of oversub_shim)
  echo "note: budget $((BUDGET >> 20)) MiB, checksum $got, reference $want"
  [[ -n $want && $got == "$want" ]]
}
torch_available() {
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    { echo "note: no PyTorch with CUDA in $PY"; return 1; }
}
torch_ref_stage() {
  torch_available || exit 77
  env $UNCONSTRAINED "$PY" "$HERE/gpt_train.py" >"$OUT/torch_ref.json" || return 1
  cat "$OUT/torch_ref.json"
}
torch_shim_stage() {
  torch_available || exit 77
  local peak
  peak=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_reserved_bytes"])' \
    "$OUT/torch_ref.json") || { echo "note: no reference run"; return 1; }
  env $SHIM_ENV_STR MEMSHIM_LOG=info MEMSHIM_DEVICE_BUDGET=$((peak / 2)) \
    "$PY" "$HERE/gpt_train.py" >"$OUT/torch_shim.json" || return 1
  cat "$OUT/torch_shim.json"
  shim_was_active torch_shim || return 1
  "$PY" - "$OUT/torch_ref.json" "$OUT/torch_shim.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
same = a["losses_hex"] == b["losses_hex"]
print("note: losses %s, step-time ratio %.3f, budget %d MiB" % (
    "equal" if same else "DIFFER", b["median_step_s"] / a["median_step_s"],
    a["peak_reserved_bytes"] // 2 >> 20))
sys.exit(0 if same else 1)
PYEOF
}
native_available() {
  ((SIM)) && { echo "note: PyTorch's kernels need a GPU"; return 1; }
  torch_available
}
native_ref_stage() {
  native_available || exit 77
  "$PY" "$HERE/torch_native.py" --footprint-mib $((NATIVE_FOOTPRINT >> 20)) || return 1
  echo "note: footprint $((NATIVE_FOOTPRINT >> 20)) MiB"
}
# native_shim_stage [ALLOC_CONF]: torch_native.py under the shim at a third of its footprint,
# with PYTORCH_CUDA_ALLOC_CONF=ALLOC_CONF if given; checksums against native_ref's.
native_shim_stage() {
  native_available || exit 77
  local log=$OUT/${STAGE_NAME}.log
  env $SHIM_ENV_STR MEMSHIM_LOG=info MEMSHIM_DEVICE_BUDGET=$((NATIVE_FOOTPRINT / 3)) \
    ${1:+PYTORCH_CUDA_ALLOC_CONF=$1} \
    "$PY" "$HERE/torch_native.py" --footprint-mib $((NATIVE_FOOTPRINT >> 20)) || return 1
  shim_was_active "$STAGE_NAME" || return 1
  local kind want got ok=0
  for kind in eager graph; do
    want=$(sed -n "s/^checksum_$kind //p" "$OUT/native_ref.log" | tail -1)
    got=$(sed -n "s/^checksum_$kind //p" "$log" | tail -1)
    echo "$kind: $got, reference $want"
    [[ -n $want && $got == "$want" ]] || ok=1
  done
  echo "note: ${1:-native allocator}, budget $((NATIVE_FOOTPRINT / 3 >> 20)) MiB, checksums $( ((ok)) && echo DIFFER || echo equal)"
  return $ok
}
passthru_stage() {
  local mode want got ok=0
  for mode in batch peer3d value batchmemop; do
    want=$(env $UNCONSTRAINED "$HERE/bin/passthru_ops" $mode $PASSTHRU_FOOTPRINT) || return 1
    got=$(env $SHIM_ENV_STR MEMSHIM_LOG=info MEMSHIM_DEVICE_BUDGET=$((PASSTHRU_FOOTPRINT / 3)) \
      "$HERE/bin/passthru_ops" $mode $PASSTHRU_FOOTPRINT) || return 1
    echo "$mode under the shim: ${got//$'\n'/ }; unconstrained: ${want//$'\n'/ }"
    [[ $got == "$want" && $got == "result 0"* ]] || ok=1
  done
  shim_was_active passthru_ops || return 1
  echo "note: budget $((PASSTHRU_FOOTPRINT / 3 >> 20)) MiB, outputs $( ((ok)) && echo DIFFER || echo equal)"
  return $ok
}
oversub_graph_stage() {
  env $SHIM_ENV_STR MEMSHIM_LOG=info MEMSHIM_DEVICE_BUDGET=$BUDGET \
    "$HERE/bin/oversub_workload" "$FOOTPRINT" 3 graph || return 1
  shim_was_active oversub_graph || return 1
  local want got
  want=$(checksum_of oversub_ref) got=$(checksum_of oversub_graph)
  echo "note: checksum $got, reference $want"
  [[ -n $want && $got == "$want" ]]
}
export -f env_stage probe_stage smoke_stage oversub_ref_stage oversub_shim_stage \
  torch_available torch_ref_stage torch_shim_stage oversub_graph_stage native_available \
  native_ref_stage native_shim_stage passthru_stage

stage env 30 env_stage
stage driver_probe 60 probe_stage
stage shim_smoke 60 smoke_stage
stage oversub_ref 90 oversub_ref_stage
stage oversub_shim 120 oversub_shim_stage
stage torch_ref 90 torch_ref_stage
stage torch_shim 120 torch_shim_stage
stage native_ref 90 native_ref_stage
stage native_shim 120 native_shim_stage
stage native_expandable 120 "native_shim_stage expandable_segments:True"
stage oversub_graph 90 oversub_graph_stage
stage passthru_ops 60 passthru_stage

failed=0
for s in "${STATUS[@]}"; do [[ $s == pass || $s == skipped ]] || failed=1; done
cat "$OUT/summary.json"
exit $failed
