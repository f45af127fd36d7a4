#!/bin/sh
# replay_check.sh TRACEGEN REPLAY WORKDIR EXPECTED_EXIT [replay args...]
# Generates a small GPT-style trace and replays it; passes if memvirt-replay
# exits with EXPECTED_EXIT (0: no mismatch, 3: mismatches found) and printed
# its JSON result.
set -u
tracegen=$1 replay=$2 dir=$3 expected=$4
shift 4
mkdir -p "$dir" || exit 1
trace="$dir/gpt_small.jsonl.gz"
"$tracegen" --out "$trace" --layers 4 --hidden 256 --heads 8 --seq 256 --batch 4 --vocab 1000 \
  || exit 1
out=$("$replay" --trace "$trace" --scale 1 --iterations 2 "$@")
rc=$?
echo "$out"
if [ "$rc" -ne "$expected" ]; then
  echo "memvirt-replay exited $rc, expected $expected" >&2
  exit 1
fi
case "$out" in
  *'"mismatches":'*) ;;
  *) echo "no JSON result" >&2; exit 1 ;;
esac
if [ "$expected" -eq 0 ]; then
  case "$out" in
    *'"mismatches":0,'*) ;;
    *) echo "mismatches reported" >&2; exit 1 ;;
  esac
fi
exit 0
