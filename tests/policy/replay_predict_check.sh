#!/bin/sh
# replay_predict_check.sh TRACEGEN REPLAY WORKDIR
# memvirt-replay --predict-only: prints memvirt-sim's prediction for the
# scaled trace in both layouts without touching the driver (the simulated GPU
# is given 1 byte: any allocation would fail), and the shim layout packs the
# small trace's many small tensors into fewer blocks than the tensor layout.
# The shim mechanism (shim layout, timed as the shim pages) predicts the same
# bytes twice (determinism) and no less time than the ideal. (It is not bounded
# below by the shim layout on overlapping copy engines: there a fetch starts
# at the previous kernel's end, while the shim's host runs ahead of the device
# and pages in behind queued kernels, its unmaps not waiting for them.)
set -u
tracegen=$1 replay=$2 dir=$3
mkdir -p "$dir" || exit 1
trace="$dir/gpt_small.jsonl.gz"
"$tracegen" --out "$trace" --layers 4 --hidden 256 --heads 8 --seq 256 --batch 4 --vocab 1000 \
  || exit 1
blocks() {  # blocks LAYOUT: the prediction's block count
  out=$(MEMSIM_DEVICE_MEMORY=1 "$replay" --trace "$trace" --scale 1 --predict-device-memory 64M \
        --predict-layout "$1" --predict-only) || { echo "predict-only failed ($1)" >&2; exit 1; }
  case "$out" in
    *"\"layout\":\"$1\",\"predicted\":{"*) ;;
    *) echo "unexpected output: $out" >&2; exit 1 ;;
  esac
  echo "$out" | sed -n 's/.*"blocks":\([0-9]*\).*/\1/p'
}
tensor=$(blocks tensor) || exit 1
shim=$(blocks shim) || exit 1
echo "blocks: tensor layout $tensor, shim layout $shim"
[ -n "$tensor" ] && [ -n "$shim" ] && [ "$shim" -lt "$tensor" ] || exit 1
mechanism=$(blocks shim-mechanism) || exit 1
[ -n "$mechanism" ] || exit 1
predict() {  # predict LAYOUT: the whole --predict-only output
  MEMSIM_DEVICE_MEMORY=1 "$replay" --trace "$trace" --scale 1 --predict-device-memory 64M \
    --predict-layout "$1" --predict-only
}
first=$(predict shim-mechanism) && second=$(predict shim-mechanism) || exit 1
[ "$first" = "$second" ] || { echo "shim-mechanism prediction not deterministic" >&2; exit 1; }
slowdown() { echo "$1" | sed -n 's/.*"slowdown":\([0-9.]*\).*/\1/p'; }
engines=$(slowdown "$(predict shim)") || exit 1
synchronous=$(slowdown "$first")
echo "slowdown: shim layout $engines, shim mechanism $synchronous"
awk -v a="$synchronous" 'BEGIN { exit !(a + 1e-9 >= 1) }' || exit 1
if MEMSIM_DEVICE_MEMORY=1 "$replay" --trace "$trace" --scale 1 --predict-only 2>/dev/null; then
  echo "--predict-only without a device size was accepted" >&2
  exit 1
fi
exit 0
