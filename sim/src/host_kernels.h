// Host implementations of kernels loaded from nvcc images.
//
// Note [host kernels]: a cubin holds GPU code the sim cannot run. A kernel NAME (its mangled
// name) from an image runs the host function `extern "C" void NAME(void** params)`, with the ABI
// of the sim's other kernels (memsim/kernel.h). It is looked up with dlsym, first in each shared
// object listed in MEMSIM_KERNELS (colon-separated paths, read and dlopen()ed once, on the first
// look-up; a path that fails to open is reported once on stderr and skipped), then in the
// process itself (RTLD_DEFAULT: the executable's exported symbols and RTLD_GLOBAL libraries).
// The objects stay open for the life of the process. Before opening them the driver's own
// symbols are made global, so an object may leave memsim_current_launch undefined (linked with
// memsim::kernel_headers only) even when the driver was opened with RTLD_LOCAL, as cudart does.
//
// Note [launch stubs]: nvcc compiles, for each kernel, a host launch stub with the kernel's own
// (mangled) name into the object that also holds the fatbin. Where that object exports it (a
// shared library, an executable linked with -rdynamic), RTLD_DEFAULT finds the stub, whose
// signature is the kernel's and which would re-enter the runtime's launch path. So a process
// symbol defined in the object that holds the image (the one cudart registered) is not taken as
// a host implementation; such kernels need their implementations in MEMSIM_KERNELS.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_HOST_KERNELS_H_
#define MEMSIM_SRC_HOST_KERNELS_H_

#include <string>

namespace memsim {

using KernelEntry = void (*)(void** params);

// nullptr when no host implementation of `mangled_name` exists. `image_object`: load address of
// the loaded object holding the image (ObjectContaining), whose symbols are nvcc's launch stubs
// (Note [launch stubs]); nullptr when the image lies outside any loaded object.
KernelEntry FindHostKernel(const std::string& mangled_name, const void* image_object);

// Load address (dli_fbase) of the loaded object whose mapping contains `address`, or nullptr.
const void* ObjectContaining(const void* address);

}  // namespace memsim

#endif  // MEMSIM_SRC_HOST_KERNELS_H_
