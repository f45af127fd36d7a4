// Host implementations of the kernels of sim/testdata/image_kernels.cu, found by their mangled
// names through MEMSIM_KERNELS (Note [host kernels] in sim/src/host_kernels.h). Each body runs
// once per launch and loops over its elements itself.
#include <cstdint>
#include <cstring>

#include "image_args.h"
#include "memsim/kernel.h"

using memsim_test::Aligned16;
using memsim_test::Bytes3;
using memsim_test::Double2;
using memsim_test::Float4;

namespace {

template <typename T>
T Arg(void** params, int i) {
  T v;
  std::memcpy(&v, params[i], sizeof(T));
  return v;
}

}  // namespace

#define HOST_KERNEL extern "C" __attribute__((visibility("default"))) void

// scale(float* data, float factor, int n): data[i] *= factor for i < n.
HOST_KERNEL _Z5scalePffi(void** params) {
  auto* data = Arg<float*>(params, 0);
  const float factor = Arg<float>(params, 1);
  const int n = Arg<int>(params, 2);
  for (int i = 0; i < n; ++i) data[i] *= factor;
}

// aligned16(int, float4, Bytes3, double2, char, Aligned16, short, double* out).
HOST_KERNEL _Z9aligned16i6float46Bytes37double2c9Aligned16sPd(void** params) {
  auto* out = Arg<double*>(params, 7);
  out[0] = memsim_test::Aligned16Sum(
      Arg<int>(params, 0), Arg<Float4>(params, 1), Arg<Bytes3>(params, 2), Arg<Double2>(params, 3),
      Arg<char>(params, 4), Arg<Aligned16>(params, 5), Arg<short>(params, 6));
}

// c_linkage(unsigned long long* out): out[0] = 7 times the grid size along x.
HOST_KERNEL c_linkage(void** params) {
  auto* out = Arg<unsigned long long*>(params, 0);
  out[0] = 7 * memsim_current_launch()->grid.x;
}
