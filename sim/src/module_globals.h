// The `__device__` / `__constant__` variables of a module loaded from an nvcc image.
//
// Note [module globals]: as in the real driver, every context gets its own copy of a module's
// variables: the first cuModuleGetGlobal / cuLibraryGetGlobal in a context allocates one device
// allocation owned by that context (each variable 256-byte aligned) and copies the image's
// initial bytes into it; later look-ups in that context return the same addresses. The copies
// are freed when the module is unloaded, or with the context's other memory when the context is
// destroyed or (a primary context) reset first; the next look-up then makes a fresh copy.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_MODULE_GLOBALS_H_
#define MEMSIM_SRC_MODULE_GLOBALS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cubin.h"
#include "cuda_api.h"

namespace memsim {

class Context;

class ModuleGlobals {
 public:
  explicit ModuleGlobals(std::vector<CubinVariable> variables);
  ~ModuleGlobals();  // Release()

  // Address and size of `name` in ctx's copy. CUDA_ERROR_NOT_FOUND for an unknown name;
  // CUDA_ERROR_OUT_OF_MEMORY when the copy cannot be allocated.
  CUresult Get(const std::shared_ptr<Context>& ctx, const std::string& name, uint64_t* address,
               size_t* size);

  // Frees the copies of contexts that are still alive.
  void Release();

 private:
  struct Copy {
    std::weak_ptr<Context> ctx;
    uint64_t base = 0;
    uint64_t buffer_id = 0;  // of the allocation, to tell it from a later one at `base`
  };

  // The copy's allocation still exists (its context may have freed it: destroyed, or a primary
  // context reset); with `ctx`, it also belongs to ctx.
  static bool Live(const Copy& copy, const Context* ctx);

  const std::vector<CubinVariable> variables_;
  std::vector<uint64_t> offsets_;  // of each variable within a copy
  uint64_t bytes_ = 0;             // size of one copy
  std::mutex mu_;
  std::vector<Copy> copies_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_MODULE_GLOBALS_H_
