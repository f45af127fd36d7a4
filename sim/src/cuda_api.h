// Single include point for the toolkit's cuda.h inside the simulated driver.
//
// Note [internal API version]: the sim is compiled with __CUDA_API_VERSION_INTERNAL (set by
// sim/CMakeLists.txt), exactly like a real driver build: cuda.h then declares every exported
// flavour of each entry point (legacy cuMemAlloc, cuMemAlloc_v2, cuMemcpy_ptds,
// cuStreamSynchronize_ptsz, ...) under its own name, so each definition here is checked
// against the toolkit's prototype by the compiler.
#ifndef MEMSIM_SRC_CUDA_API_H_
#define MEMSIM_SRC_CUDA_API_H_

#ifndef __CUDA_API_VERSION_INTERNAL
#error "sim sources must be compiled with __CUDA_API_VERSION_INTERNAL"
#endif
// Note [exports]: the library builds with -fvisibility=hidden; the driver API declared by cuda.h
// (and memsim/kernel.h) is given default visibility here, so exactly those entry points are
// exported (exports.map additionally keeps every other symbol local).
#pragma GCC visibility push(default)
#include <cuda.h>
#include <cudaProfiler.h>

#include "memsim/kernel.h"
#pragma GCC visibility pop

#endif  // MEMSIM_SRC_CUDA_API_H_
