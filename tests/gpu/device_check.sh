#!/usr/bin/env bash
# Real-GPU check of libmemshim.so (run on a machine with an NVIDIA GPU and
# the driver; budget: < 8 minutes on an H200).
#   1. builds the shim (CMake; falls back to a direct compiler call when the
#      tree's other dependencies are missing there),
#   2. runs the shim's unit tests if they could be built, and the shim's
#      real-driver check: the nvcc-built oversubscribed workload, unconstrained
#      and under LD_PRELOAD with a device budget of 1/3 of its footprint,
#      comparing checksums,
#   3. runs a small PyTorch GPT training loop unconstrained and under the shim
#      with MEMSHIM_DEVICE_BUDGET = half its peak memory, comparing losses bit
#      for bit and reporting the step-time ratio.
# Output: a summary on stdout and $OUT/device_check.json (OUT defaults to ./out).
set -u -o pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/out}"
BUILD="${BUILD:-$ROOT/build-gpu}"
mkdir -p "$OUT" "$BUILD"
LOG="$OUT/device_check.log"
: > "$LOG"
declare -A RESULT
say() { echo "[device_check] $*" | tee -a "$LOG"; }
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
CUDA_INC="$(dirname "$(dirname "$NVCC")")/include"

# ---- 1. build ---------------------------------------------------------------
SHIM="$BUILD/lib/libmemshim.so"
UNIT=""
if cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_BENCHMARKS=OFF \
      >>"$LOG" 2>&1 &&
   cmake --build "$BUILD" -j"$(nproc)" --target memshim >>"$LOG" 2>&1; then
  say "built $SHIM with CMake"
  if cmake --build "$BUILD" -j"$(nproc)" --target memshim_unit_tests >>"$LOG" 2>&1; then
    UNIT="$BUILD/tests/bin/memshim_unit_tests"
  fi
else
  say "CMake build unavailable here; compiling the shim directly"
  mkdir -p "$BUILD/lib"
  SRC=("$ROOT"/shim/driver/driver.cc "$ROOT"/shim/core/{block_allocator,config,log,lru_policy,physical_pool,residency_policy,shim_core,stream_tracker}.cc)
  HOOKS=("$ROOT"/shim/hooks/*.cc)
  if g++ -std=c++20 -O2 -fPIC -shared -fvisibility=hidden -I"$ROOT" -I"$CUDA_INC" \
        -D__CUDA_API_VERSION_INTERNAL=1 "${SRC[@]}" "${HOOKS[@]}" -o "$SHIM" -ldl -lpthread \
        >>"$LOG" 2>&1; then
    say "built $SHIM directly"
  else
    say "FAILED to build the shim"; RESULT[build]=fail
  fi
fi
[ -f "$SHIM" ] && RESULT[build]=ok

# ---- 2. unit tests and the real-driver workload --------------------------------
if [ -n "$UNIT" ]; then
  if timeout 120 "$UNIT" >>"$LOG" 2>&1; then RESULT[unit_tests]=pass; else RESULT[unit_tests]=fail; fi
  say "unit tests: ${RESULT[unit_tests]}"
else
  RESULT[unit_tests]=skipped; say "unit tests: not built here (no GoogleTest)"
fi

WORK="$BUILD/oversub_workload"
if "$NVCC" -O2 -std=c++17 -arch=native -o "$WORK" "$ROOT/tests/gpu/oversub_workload.cu" \
      >>"$LOG" 2>&1 || "$NVCC" -O2 -std=c++17 -o "$WORK" "$ROOT/tests/gpu/oversub_workload.cu" \
      >>"$LOG" 2>&1; then
  FOOT=$((12 << 30))
  BUDGET=$((4 << 30))
  REF="$(timeout 120 "$WORK" "$FOOT" 3 2>>"$LOG")"; REF_RC=$?
  SHIMMED="$(MEMSHIM_DEVICE_BUDGET=$BUDGET MEMSHIM_HOST_BUDGET=$((16 << 30)) MEMSHIM_LOG=info \
              LD_PRELOAD="$SHIM" timeout 240 "$WORK" "$FOOT" 3 2>>"$LOG")"; SHIM_RC=$?
  echo "$REF" >>"$LOG"; echo "$SHIMMED" >>"$LOG"
  REF_SUM="$(echo "$REF" | awk '/^checksum/{print $2}')"
  SHIM_SUM="$(echo "$SHIMMED" | awk '/^checksum/{print $2}')"
  if [ $REF_RC -eq 0 ] && [ $SHIM_RC -eq 0 ] && [ -n "$REF_SUM" ] && [ "$REF_SUM" = "$SHIM_SUM" ]; then
    RESULT[oversub_workload]=pass
  else
    RESULT[oversub_workload]="fail(ref_rc=$REF_RC shim_rc=$SHIM_RC ref=$REF_SUM shim=$SHIM_SUM)"
  fi
  RESULT[oversub_ref_s]="$(echo "$REF" | awk '/^seconds/{print $2}')"
  RESULT[oversub_shim_s]="$(echo "$SHIMMED" | awk '/^seconds/{print $2}')"
  say "oversubscribed workload (12 GiB through a 4 GiB budget): ${RESULT[oversub_workload]}" \
      "(${RESULT[oversub_ref_s]} s unconstrained, ${RESULT[oversub_shim_s]} s shimmed)"
  # The same iterations as CUDA graph launches under the shim: same checksum.
  GRAPHED="$(MEMSHIM_DEVICE_BUDGET=$BUDGET MEMSHIM_HOST_BUDGET=$((16 << 30)) MEMSHIM_LOG=info \
              LD_PRELOAD="$SHIM" timeout 240 "$WORK" "$FOOT" 3 graph 2>>"$LOG")"; GRAPH_RC=$?
  echo "$GRAPHED" >>"$LOG"
  GRAPH_SUM="$(echo "$GRAPHED" | awk '/^checksum/{print $2}')"
  if [ $GRAPH_RC -eq 0 ] && [ -n "$REF_SUM" ] && [ "$REF_SUM" = "$GRAPH_SUM" ]; then
    RESULT[oversub_graph]=pass
  else
    RESULT[oversub_graph]="fail(rc=$GRAPH_RC ref=$REF_SUM graph=$GRAPH_SUM)"
  fi
  RESULT[oversub_graph_s]="$(echo "$GRAPHED" | awk '/^seconds/{print $2}')"
  say "same workload as graph launches under the shim: ${RESULT[oversub_graph]}" \
      "(${RESULT[oversub_graph_s]} s)"
else
  RESULT[oversub_workload]="fail(nvcc)"; say "nvcc build of the workload failed"
fi

# ---- 3. PyTorch GPT loop ---------------------------------------------------------
PY="${PYTHON:-python3}"
if "$PY" -c "import torch; assert torch.cuda.is_available()" >>"$LOG" 2>&1; then
  BASE="$(timeout 150 "$PY" "$ROOT/tests/gpu/gpt_train.py" 2>>"$LOG" | tail -1)"
  echo "$BASE" >>"$LOG"
  PEAK="$(echo "$BASE" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["peak_reserved_bytes"])' 2>/dev/null)"
  if [ -n "$PEAK" ]; then
    HALF=$((PEAK / 2))
    SHIMMED="$(MEMSHIM_DEVICE_BUDGET=$HALF MEMSHIM_HOST_BUDGET=$((64 << 30)) MEMSHIM_LOG=info \
               LD_PRELOAD="$SHIM" timeout 240 "$PY" "$ROOT/tests/gpu/gpt_train.py" 2>>"$LOG" | tail -1)"
    echo "$SHIMMED" >>"$LOG"
    CMP="$(BASE="$BASE" SHIMMED="$SHIMMED" "$PY" - <<'PYEOF'
import json, os
try:
    a = json.loads(os.environ["BASE"]); b = json.loads(os.environ["SHIMMED"])
    same = a["losses_hex"] == b["losses_hex"]
    print("pass" if same else "fail", "%.3f" % (b["median_step_s"] / a["median_step_s"]))
except Exception as e:
    print("fail(%s)" % type(e).__name__, "nan")
PYEOF
)"
    RESULT[gpt_losses_equal]="${CMP%% *}"
    RESULT[gpt_step_time_ratio]="${CMP##* }"
    RESULT[gpt_peak_bytes]="$PEAK"
    RESULT[gpt_budget_bytes]="$HALF"
  else
    RESULT[gpt_losses_equal]="fail(unconstrained run)"
  fi
  say "GPT loop under half its peak memory: losses ${RESULT[gpt_losses_equal]}," \
      "step-time ratio ${RESULT[gpt_step_time_ratio]:-n/a}"
else
  RESULT[gpt_losses_equal]=skipped; say "PyTorch with CUDA not available"
fi

# ---- summary -------------------------------------------------------------------
{
  echo "{"
  first=1
  for k in "${!RESULT[@]}"; do
    [ $first -eq 0 ] && echo ","
    first=0
    printf '  "%s": "%s"' "$k" "${RESULT[$k]}"
  done
  echo; echo "}"
} > "$OUT/device_check.json"
cat "$OUT/device_check.json"
FAILED=0
for k in build unit_tests oversub_workload oversub_graph gpt_losses_equal; do
  case "${RESULT[$k]:-}" in pass|ok|skipped) ;; *) FAILED=1 ;; esac
done
exit $FAILED
