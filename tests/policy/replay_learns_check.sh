#!/bin/sh
# replay_learns_check.sh TRACEGEN REPLAY SHIM WORKDIR
# The lifetime policy learns the iteration under the shim: replays a small
# BERT-like trace (many tensors below 1 MiB, packed into slab chunks) for
# three iterations at about half its peak, under the shim with lru and with
# lifetime, and passes if both verify every byte and lifetime pages in at
# most 90% of what lru pages in (the exit summary's page-in count; measured:
# 176 against 219). It needs the shim to place each iteration as the
# previous one (Note [repeatable placement] in shim/core/block_allocator.h):
# with last-freed-first reuse lifetime paged in 294 against lru's 313.
set -u
tracegen=$1 replay=$2 shim=$3 dir=$4
mkdir -p "$dir" || exit 1
trace="$dir/bert_like.jsonl.gz"
"$tracegen" --out "$trace" --layers 12 --hidden 128 --heads 4 --seq 128 --batch 2 --vocab 1000 \
  || exit 1
page_ins() {  # page_ins POLICY: prints the run's page-in count
  out=$(MEMSIM_DEVICE_MEMORY=24M MEMSHIM_POLICY=$1 MEMSHIM_LOG=info LD_PRELOAD="$shim" \
    "$replay" --trace "$trace" --scale 1 --iterations 3 --time-scale 20 2> "$dir/$1.log")
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "$1: memvirt-replay exited $rc: $out" >&2
    cat "$dir/$1.log" >&2
    return 1
  fi
  case "$out" in
    *'"mismatches":0,'*) ;;
    *) echo "$1: mismatches or no result: $out" >&2; return 1 ;;
  esac
  n=$(sed -n 's/.* \([0-9][0-9]*\) page-ins.*/\1/p' "$dir/$1.log" | head -n 1)
  if [ -z "$n" ]; then
    echo "$1: no page-in count in the exit summary" >&2
    cat "$dir/$1.log" >&2
    return 1
  fi
  echo "$n"
}
lru=$(page_ins lru) || exit 1
lifetime=$(page_ins lifetime) || exit 1
echo "page-ins over three iterations: lru $lru, lifetime $lifetime"
if [ "$lru" -eq 0 ] || [ $((lifetime * 10)) -gt $((lru * 9)) ]; then
  echo "lifetime did not learn the iteration: $lifetime page-ins against lru's $lru" >&2
  exit 1
fi
exit 0
