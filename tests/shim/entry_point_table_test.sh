#!/usr/bin/env bash
# The committed entry-point tables (Note [entry-point flavours] in
# shim/hooks/entry_point_table.h) are what sim/tools/gen_proc_address_table.py
# generates from the toolkit's headers now.
# Usage: entry_point_table_test.sh SOURCE_DIR CUDA_INCLUDE_DIR
set -euo pipefail
src=$1
include=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 "$src/sim/tools/gen_proc_address_table.py" "$include" "$out" >/dev/null
status=0
for f in sim/src/proc_address_table.inc shim/driver/cuda_entry_points.inc; do
  if ! diff -u "$src/$f" "$out/$f"; then
    echo "FAIL: $f is stale; run sim/tools/gen_proc_address_table.py"
    status=1
  fi
done
[[ $status -eq 0 ]] && echo "OK: both tables current"
exit $status
