#include "host_kernels.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace memsim {

namespace {

// Makes the driver's symbols global. A kernel object linked without the driver (only
// memsim::kernel_headers) leaves memsim_current_launch to the global scope, but the driver may
// have been opened with RTLD_LOCAL (cudart dlopen()s libcuda.so.1).
void PromoteDriverSymbols() {
  Dl_info self;
  if (dladdr(reinterpret_cast<const void*>(&FindHostKernel), &self) != 0 &&
      self.dli_fname != nullptr) {
    dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);  // kept open, like the driver
  }
}

// Handles of the MEMSIM_KERNELS objects, opened on first use (Note [never destroyed]).
const std::vector<void*>& KernelObjects() {
  static const std::vector<void*>* objects = [] {
    PromoteDriverSymbols();
    auto* handles = new std::vector<void*>;
    const char* list = std::getenv("MEMSIM_KERNELS");
    std::string paths = list != nullptr ? list : "";
    size_t start = 0;
    while (start <= paths.size()) {
      size_t end = paths.find(':', start);
      if (end == std::string::npos) end = paths.size();
      const std::string path = paths.substr(start, end - start);
      if (!path.empty()) {
        if (void* dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
          handles->push_back(dl);
        } else {
          std::fprintf(stderr, "memsim: MEMSIM_KERNELS entry %s not loaded: %s\n", path.c_str(),
                       dlerror());
        }
      }
      start = end + 1;
    }
    return handles;
  }();
  return *objects;
}

}  // namespace

KernelEntry FindHostKernel(const std::string& mangled_name, const void* image_object) {
  for (void* dl : KernelObjects()) {
    if (void* sym = dlsym(dl, mangled_name.c_str())) return reinterpret_cast<KernelEntry>(sym);
  }
  void* sym = dlsym(RTLD_DEFAULT, mangled_name.c_str());
  if (sym == nullptr || (image_object != nullptr && ObjectContaining(sym) == image_object)) {
    return nullptr;  // not found, or nvcc's launch stub (Note [launch stubs])
  }
  return reinterpret_cast<KernelEntry>(sym);
}

const void* ObjectContaining(const void* address) {
  Dl_info info;
  if (dladdr(address, &info) == 0) return nullptr;
  return info.dli_fbase;
}

}  // namespace memsim
