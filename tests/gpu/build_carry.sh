#!/usr/bin/env bash
# Builds, on a machine with the CUDA toolkit (no GPU needed), everything the GPU check runs, into
# one folder to carry to a GPU machine that has only a driver, Python and PyTorch:
#   tests/gpu/build_carry.sh [OUT_DIR]          (default build/gpu-carry; BUILD_DIR=build)
# Layout of OUT_DIR:
#   device_check.sh gpt_train.py        the runner and the PyTorch training loop
#   torch_native.py                     PyTorch's own kernels over 8 GiB (GPU only)
#   compare_probe.py reference/         a real driver's recorded answers, which --sim holds the
#                                       simulated driver to
#   lib/libmemshim.so                   the shim (no daemon link: the GPU machine has no gRPC)
#   bin/oversub_workload bin/driver_probe   nvcc programs, sm_90 cubins plus compute_90 PTX
#   bin/passthru_ops                    batched/3D peer copies and stream memory operations
#   lib/libgpt_kernels.so               the training loop's kernels (nvcc, called by gpt_train.py)
#   sim/libcuda.so.1 sim/gpu_check_kernels.so sim/gpt_kernels_host.so
#                                       the simulated driver and the kernels' host versions, for
#                                       `device_check.sh --sim` (unused on a GPU)
# Before it leaves, the folder is proven complete: libmemshim.so links with --no-undefined,
# needs only the allowed system libraries, loads with every symbol resolved, and the folder is
# well under the 64 MiB a device call carries. `device_check.sh --sim` then runs every stage of
# the folder on the simulated driver (CI does: tests/gpu/CMakeLists.txt).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT_DIR="$(realpath -m "${1:-$ROOT/build/gpu-carry}")"
BUILD_DIR="$(realpath -m "${BUILD_DIR:-$ROOT/build}")"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
CUDA_ROOT="$(dirname "$(dirname "$(realpath "$NVCC")")")"
ARCH=(-gencode arch=compute_90,code=[sm_90,compute_90])
say() { echo "[build_carry] $*"; }
die() { echo "[build_carry] FAILED: $*" >&2; exit 1; }

[[ -x $NVCC ]] || die "nvcc not found (set NVCC)"
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD_DIR" -j"$(nproc)" --target memshim memsim_cuda gpu_check_kernels \
  gpt_kernels_host >/dev/null
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"/{bin,lib,sim}
cp "$BUILD_DIR/lib/libmemshim.so" "$OUT_DIR/lib/"
cp -L "$BUILD_DIR/lib/sim/libcuda.so.1" "$OUT_DIR/sim/"
cp "$BUILD_DIR/tests/bin/gpu_check_kernels.so" "$BUILD_DIR/tests/bin/gpt_kernels_host.so" \
  "$OUT_DIR/sim/"
cp "$ROOT/tests/gpu/device_check.sh" "$ROOT/tests/gpu/gpt_train.py" \
  "$ROOT/tests/gpu/torch_native.py" "$ROOT/tests/gpu/compare_probe.py" "$OUT_DIR/"
cp -r "$ROOT/tests/gpu/reference" "$OUT_DIR/"
chmod +x "$OUT_DIR/device_check.sh"

nvcc_build() {  # nvcc_build OUTPUT SOURCE [flags...]
  local out=$1 src=$2
  shift 2
  "$NVCC" -O2 -std=c++17 "${ARCH[@]}" -Xcompiler -Wall,-Wno-deprecated-declarations "$@" \
    -o "$OUT_DIR/bin/$out" "$ROOT/$src"
}
nvcc_build oversub_workload tests/gpu/oversub_workload.cu
nvcc_build driver_probe tests/gpu/driver_probe.cu -L"$CUDA_ROOT/lib64/stubs" -lcuda -ldl
# A driver-API program (no kernels): built against the toolkit's headers and stub libcuda.
"${CXX:-g++}" -O2 -std=c++17 -Wall -I"$CUDA_ROOT/include" -I"$ROOT" \
  -o "$OUT_DIR/bin/passthru_ops" "$ROOT/tests/shim/passthru_ops.cc" -L"$CUDA_ROOT/lib64/stubs" -lcuda
"$NVCC" -O2 -std=c++17 "${ARCH[@]}" -shared -Xcompiler -fPIC,-Wall -cudart shared \
  -o "$OUT_DIR/lib/libgpt_kernels.so" "$ROOT/tests/pytorch/gpt_kernels/gpt_kernels.cu"
say "built the nvcc programs"

# --- completeness --------------------------------------------------------------------------
shim="$OUT_DIR/lib/libmemshim.so"
allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libcuda\.so\.1|ld-linux-x86-64\.so\.2)$'
needed="$(readelf -d "$shim" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')"
unexpected="$(grep -Ev "$allowed" <<<"$needed" || true)"
[[ -z $unexpected ]] || die "libmemshim.so needs libraries a GPU machine may not have: $(echo $unexpected)"
grep -q -- "--no-undefined" "$ROOT/shim/CMakeLists.txt" || die "libmemshim.so is not linked with --no-undefined"
# Loading it with every symbol bound proves nothing is missing at run time.
LD_LIBRARY_PATH="$OUT_DIR/sim" python3 - "$shim" <<'PY' || die "libmemshim.so does not load"
import ctypes, os, sys
ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_LOCAL)
PY
size=$(du -sb "$OUT_DIR" | cut -f1)
(( size < 48 << 20 )) || die "the folder is $((size >> 20)) MiB; a device call carries 64 MiB in all"
say "complete: $(echo $needed) needed by libmemshim.so; $((size >> 20)) MiB in $OUT_DIR"
