// Host implementations, for the simulated driver, of the PyTorch 2.11 kernels that
// torch.cuda.graph launches itself (loaded through MEMSIM_KERNELS; docs/pytorch.md).
//
// Note [torch.cuda.graph kernels]: the sim refuses the launch of a kernel without a host
// implementation and names it on stderr, which is how this one was found. Capturing and replaying a
// graph of copies with torch.cuda.graph (capture_begin, capture_end, replay; a graph that draws no
// random numbers) or torch.cuda.make_graphed_callables launches exactly one kernel: in
// capture_begin, PyTorch fills the default CUDA generator's int64 seed and offset tensors (one
// element each) with Tensor.fill_, whose kernel for a contiguous, 16-byte-aligned int64 tensor is
// the instantiation below of PyTorch's vectorized elementwise template. Its parameters, from the
// cubin's EIATTR_KPARAM_INFO: offset 0, 4 bytes: the element count N; offset 8, 8 bytes: the
// FillFunctor<int64_t>, which holds the value; offset 16, 8 bytes: std::array<char*, 1>, the
// output pointer. Its contract is that of Tensor.fill_ on such a tensor: out[i] = value for
// every i < N. The elementwise template as a whole (any functor, casts, strided offsets) is
// GPU code with no host counterpart; only this instantiation, whose functor is a constant, is
// implemented. A fill of a misaligned or non-contiguous int64 tensor launches other
// instantiations (unrolled_elementwise_kernel, elementwise_kernel), which are not implemented.
#include <cstdint>

namespace {

void FillInt64(void** params) {
  const int n = *static_cast<const int*>(params[0]);
  const int64_t value = *static_cast<const int64_t*>(params[1]);
  int64_t* out = *static_cast<int64_t* const*>(params[2]);
  for (int i = 0; i < n; ++i) out[i] = value;
}

}  // namespace

// at::native::vectorized_elementwise_kernel<2, at::native::FillFunctor<long>,
//                                           std::array<char*, 1>>(int, FillFunctor<long>,
//                                                                 std::array<char*, 1>)
extern "C" __attribute__((visibility("default"))) void
_ZN2at6native29vectorized_elementwise_kernelILi2ENS0_11FillFunctorIlEESt5arrayIPcLm1EEEEviT0_T1_(
    void** params) {
  FillInt64(params);
}
