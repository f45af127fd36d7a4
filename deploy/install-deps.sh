#!/usr/bin/env bash
# Installs every build and test dependency of memvirt from Debian packages.
# Idempotent; run as root (or with sudo available) on a fresh Debian 12 machine.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang-format
  clang libclang-rt-14-dev
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  liburing-dev libgoogle-glog-dev libgflags-dev libsystemd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  prometheus-cpp-dev libcivetweb-dev zlib1g-dev libzstd-dev liblz4-dev
  util-linux fio yamllint systemd python3 python3-venv
)

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  SUDO="sudo"
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
