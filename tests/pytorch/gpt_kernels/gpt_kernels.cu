// The training loop's kernels (gpt_ops.h) and their launchers, built by nvcc into
// libgpt_kernels.so and called from Python through ctypes (gpt_ops.py) with PyTorch's tensors
// and its current stream. Launchers return the launch's cudaError_t.
//
// Each kernel is extern "C" (its name is the one the simulated driver's host implementation in
// gpt_kernels_host.cc carries) and takes the item count first; one thread per item, grid-stride.
#include <cuda_runtime.h>

#include "gpt_ops.h"

#define GPT_UNPAREN(...) __VA_ARGS__
// GPT_OP(name, (parameter declarations), (argument names)): the kernel name_kernel and the
// launcher gpt_name(stream, n, parameters...).
#define GPT_OP(name, decl, args)                                                            \
  extern "C" __global__ void name##_kernel(long n, GPT_UNPAREN decl) {                      \
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;                       \
         i += (long)gridDim.x * blockDim.x) {                                              \
      name##_item(i, GPT_UNPAREN args);                                                     \
    }                                                                                       \
  }                                                                                         \
  extern "C" __attribute__((visibility("default"))) int gpt_##name(cudaStream_t stream,     \
                                                                   long n, GPT_UNPAREN decl) { \
    if (n <= 0) return cudaSuccess;                                                         \
    const long blocks = (n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535;                  \
    name##_kernel<<<(unsigned)blocks, 256, 0, stream>>>(n, GPT_UNPAREN args);               \
    return cudaGetLastError();                                                              \
  }

#include "gpt_op_list.h"
