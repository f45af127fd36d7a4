#!/usr/bin/env bash
# Compares memvirt-nvme-bench (the NVMe tier's io_uring engine) with fio on the same file system,
# same block size and queue depth, O_DIRECT, in one run. Rounds alternate fio and memvirt so that
# drift of a shared disk hits both alike; the medians and their ratios are printed.
#
# usage: bench/nvme/compare_fio.sh [--dir /var/tmp] [--bench build/bin/memvirt-nvme-bench]
#                                  [--block 2M] [--qd 16] [--size 1G] [--rounds 3]
set -euo pipefail

dir=/var/tmp
bench=""
block=2M
qd=16
size=1G
rounds=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --block) block=$2; shift 2 ;;
    --qd) qd=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$bench" ]]; then
  root=$(cd "$(dirname "$0")/../.." && pwd)
  for candidate in "$root/build/bin/memvirt-nvme-bench" "$root/build-nvme/bin/memvirt-nvme-bench"; do
    [[ -x "$candidate" ]] && bench=$candidate && break
  done
fi
[[ -x "$bench" ]] || { echo "memvirt-nvme-bench not found; pass --bench" >&2; exit 2; }
command -v fio >/dev/null || { echo "fio not installed" >&2; exit 2; }

file="$dir/memvirt-compare-fio.$$"
trap 'rm -f "$file" "$file.memvirt"' EXIT

# fio_gbps RW: one fio job, prints GB/s (1e9 bytes/s).
fio_gbps() {
  fio --name="$1" --filename="$file" --rw="$1" --bs="$block" --iodepth="$qd" \
      --ioengine=io_uring --direct=1 --size="$size" --output-format=json |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; k=sys.argv[1]
print("%.3f" % (j[k]["bw_bytes"] / 1e9))' "$( [[ $1 == write ]] && echo write || echo read )"
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

fw=(); fr=(); mw=(); mr=()
for ((i = 1; i <= rounds; i++)); do
  fw+=("$(fio_gbps write)")
  sync "$file" && sleep 1  # as memvirt-nvme-bench does between its phases (untimed)
  fr+=("$(fio_gbps read)")
  rm -f "$file"
  json=$("$bench" --file "$file.memvirt" --block "$block" --qd "$qd" --size "$size" --json)
  mw+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["write_gbps"])' "$json")")
  mr+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["read_gbps"])' "$json")")
  echo "round $i: fio write ${fw[-1]} read ${fr[-1]} | memvirt write ${mw[-1]} read ${mr[-1]} GB/s" >&2
done

fwm=$(median "${fw[@]}"); frm=$(median "${fr[@]}"); mwm=$(median "${mw[@]}"); mrm=$(median "${mr[@]}")
fs=$(df -T "$dir" | awk 'NR==2 {print $2}')
python3 - "$fwm" "$frm" "$mwm" "$mrm" "$block" "$qd" "$size" "$rounds" "$dir" "$fs" <<'PY'
import json, sys
fw, fr, mw, mr = map(float, sys.argv[1:5])
print(json.dumps({
    "fio_write_gbps": fw, "fio_read_gbps": fr,
    "memvirt_write_gbps": mw, "memvirt_read_gbps": mr,
    "write_ratio": round(mw / fw, 3), "read_ratio": round(mr / fr, 3),
    "block": sys.argv[5], "qd": int(sys.argv[6]), "size": sys.argv[7],
    "rounds": int(sys.argv[8]), "dir": sys.argv[9], "fs": sys.argv[10]}))
PY
