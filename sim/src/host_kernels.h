// Host implementations of kernels loaded from nvcc images.
//
// Note [host kernels]: a cubin holds GPU code the sim cannot run. A kernel NAME (its mangled
// name) from an image runs the host function `extern "C" void NAME(void** params)`, with the ABI
// of the sim's other kernels (memsim/kernel.h). It is looked up with dlsym, first in each shared
// object listed in MEMSIM_KERNELS (colon-separated paths, read and dlopen()ed once, on the first
// look-up; a path that fails to open is reported once on stderr and skipped), then in the
// process itself (RTLD_DEFAULT: the executable's exported symbols and RTLD_GLOBAL libraries).
// The objects stay open for the life of the process.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_HOST_KERNELS_H_
#define MEMSIM_SRC_HOST_KERNELS_H_

#include <string>

namespace memsim {

using KernelEntry = void (*)(void** params);

// nullptr when no host implementation of `mangled_name` exists.
KernelEntry FindHostKernel(const std::string& mangled_name);

}  // namespace memsim

#endif  // MEMSIM_SRC_HOST_KERNELS_H_
