#!/usr/bin/env bash
# Creates, once, the Python environment the PyTorch tests run in, and prints its interpreter.
#   tests/pytorch/setup_venv.sh          -> prints e.g. /root/.cache/memvirt/pytorch-venv/bin/python
# The environment lives outside the clone (MEMVIRT_PYTORCH_VENV, default
# ~/.cache/memvirt/pytorch-venv) so that later runs reuse it; it is reinstalled only when
# requirements.txt changes. Exit 1, with the reason on stderr, when PyTorch cannot be installed
# (then the tests are reported as skipped).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${MEMVIRT_PYTORCH_VENV:-$HOME/.cache/memvirt/pytorch-venv}"
stamp="$venv/.memvirt-requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]] &&
   "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
echo "setup_venv: installing $(grep -v '^#' "$here/requirements.txt" | xargs) into $venv" >&2
python3 -m venv "$venv" >&2 || { echo "setup_venv: python3 -m venv failed" >&2; exit 1; }
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt" >&2 ||
  { echo "setup_venv: pip could not install PyTorch" >&2; exit 1; }
echo "$want" >"$stamp"
echo "$venv/bin/python"
