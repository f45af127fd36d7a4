#!/usr/bin/env bash
# Note [symbol hygiene] (shim/CMakeLists.txt): libmemshim.so needs only the C
# and C++ runtimes, the dynamic loader and at most libcuda, and its dynamic
# symbol table defines exactly the entry points of hook_list.h plus dlsym and
# dlvsym.
# Usage: symbol_hygiene_test.sh LIBMEMSHIM_SO HOOK_LIST_H
set -euo pipefail
lib=$1
hook_list=$2
status=0

allowed_needed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|libstdc\+\+\.so\.6|libgcc_s\.so\.1|ld-linux-[a-z0-9_-]+\.so\.[0-9]+|libcuda\.so\.1)$'
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
if [[ -z $needed ]]; then
  echo "FAIL: no NEEDED entries read from $lib"
  exit 1
fi
while read -r n; do
  if [[ ! $n =~ $allowed_needed ]]; then
    echo "FAIL: unexpected NEEDED entry $n"
    status=1
  fi
done <<<"$needed"

expected=$( (grep -o 'X([A-Za-z0-9_]*)' "$hook_list" | sed 's/X(\(.*\))/\1/'; echo dlsym; echo dlvsym) |
  sort -u)
if [[ $(wc -l <<<"$expected") -lt 50 ]]; then
  echo "FAIL: read only $(wc -l <<<"$expected") names from $hook_list"
  exit 1
fi
# Defined dynamic symbols, without the version suffix nm may append.
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u)
extra=$(comm -13 <(echo "$expected") <(echo "$exported"))
missing=$(comm -23 <(echo "$expected") <(echo "$exported"))
if [[ -n $extra ]]; then
  echo "FAIL: exported beyond the hooked entry points:"
  echo "$extra" | sed 's/^/  /'
  status=1
fi
if [[ -n $missing ]]; then
  echo "FAIL: hooked entry points not exported:"
  echo "$missing" | sed 's/^/  /'
  status=1
fi
if [[ $status -eq 0 ]]; then
  echo "OK: NEEDED = $(echo $needed); $(wc -l <<<"$exported") symbols exported, all hooks"
fi
exit $status
