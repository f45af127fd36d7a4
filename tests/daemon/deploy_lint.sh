#!/usr/bin/env bash
# Lints deploy/: `systemd-analyze verify` on the unit (any output fails) and yamllint on the
# static YAML (helm templates are not plain YAML and are excluded).
# Usage: deploy_lint.sh DEPLOY_DIR MEMVIRTD_BINARY. Exit 77 (skip) if neither tool exists.
set -uo pipefail
deploy=$1
memvirtd=$2
ran=0
status=0

if command -v systemd-analyze >/dev/null 2>&1; then
  ran=1
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # Verify the unit as shipped, with ExecStart pointing at the binary just built.
  sed "s|/usr/bin/memvirtd|$memvirtd|" "$deploy/systemd/memvirtd.service" >"$tmp/memvirtd.service"
  out=$(systemd-analyze verify --man=no "$tmp/memvirtd.service" 2>&1)
  if [[ -n "$out" ]]; then
    echo "systemd-analyze verify reported:"
    echo "$out"
    status=1
  else
    echo "systemd-analyze verify: clean"
  fi
else
  echo "systemd-analyze not found: skipping the unit check"
fi

if command -v yamllint >/dev/null 2>&1; then
  ran=1
  mapfile -t files < <(find "$deploy" -name '*.yaml' -not -path '*/templates/*' | sort)
  if [[ ${#files[@]} -eq 0 ]]; then
    echo "no YAML files under $deploy"
    status=1
  elif ! yamllint -s -d '{extends: default, rules: {line-length: {max: 120}, document-start: disable}}' \
      "${files[@]}"; then
    status=1
  else
    echo "yamllint: ${#files[@]} file(s) clean"
  fi
else
  echo "yamllint not found: skipping YAML checks"
fi

[[ $ran -eq 0 ]] && exit 77
exit $status
