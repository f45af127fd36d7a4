// Modules and libraries (cuModuleLoad*, cuLibraryLoad*) and their kernel functions.
//
// A module comes from one of two sources:
// - a shared object opened with dlopen: a function NAME is the host symbol `void NAME(void**)`
//   plus its parameter layout NAME__param_sizes (0-terminated byte sizes), laid out with natural
//   alignment min(size, 8), which is what a CUDA compiler does for scalar and pointer parameters;
// - an nvcc image (fatbin.h, cubin.h): the kernels and their exact parameter layouts come from
//   the cubin, the body is the host implementation named by the kernel's mangled name
//   (Note [host kernels] in host_kernels.h), resolved on first launch, and `__device__`
//   variables get a copy per context (Note [module globals]).
//
// Note [kernel handles]: a Function has two distinct handle values, as in the real driver where
// a CUkernel (context-independent, cuLibraryGetKernel) differs from the CUfunction that
// cuKernelGetFunction returns. The sim's functions do not depend on the context, so each kernel
// has one CUfunction shared by all contexts. cuFunc* calls accept only the CUfunction, cuKernel*
// calls only the CUkernel; launches and occupancy calls accept both (the CUDA documentation lets
// a CUkernel be cast to CUfunction there).
//
// Ownership: modules live in the driver's handle table; functions are owned by their module and
// are valid until it is unloaded. Every enqueued launch holds a reference to its module, so the
// shared object is closed only after the last launch of one of its kernels has run.
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_MODULE_H_
#define MEMSIM_SRC_MODULE_H_

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cubin.h"
#include "cuda_api.h"
#include "host_kernels.h"
#include "module_globals.h"

namespace memsim {

class Context;
class Module;

struct ParamLayout {
  std::vector<size_t> sizes;
  std::vector<size_t> offsets;
  size_t total = 0;  // bytes of the packed argument buffer
};

// Builds the layout from a 0-terminated size list (nullptr = no parameters).
ParamLayout MakeParamLayout(const unsigned* sizes);
// The layout a cubin records for `kernel`.
ParamLayout MakeParamLayout(const CubinKernel& kernel);

class Function {
 public:
  // `entry` nullptr: resolved by name with FindHostKernel on first use.
  Function(Module* module, std::string name, KernelEntry entry, ParamLayout layout)
      : module_(module), name_(std::move(name)), entry_(entry), layout_(std::move(layout)) {}
  Module* module() const { return module_; }
  const std::string& name() const { return name_; }
  // The host body; nullptr when there is none (then reported once on stderr).
  KernelEntry entry() const;
  const ParamLayout& layout() const { return layout_; }
  CUfunction handle() { return reinterpret_cast<CUfunction>(this); }
  CUkernel kernel_handle() { return reinterpret_cast<CUkernel>(&kernel_tag_); }

 private:
  Module* const module_;
  const std::string name_;
  mutable std::atomic<KernelEntry> entry_;
  mutable std::once_flag missing_reported_;
  const ParamLayout layout_;
  char kernel_tag_ = 0;  // never changes; its address is the CUkernel (Note [kernel handles])
};

class Module {
 public:
  // dlopen()s `path`. nullptr and *error set when it cannot be loaded.
  static std::shared_ptr<Module> Load(const std::string& path, CUresult* error);
  // A module of the kernels and variables of a parsed cubin.
  // `image_object`: see FindHostKernel.
  static std::shared_ptr<Module> FromCubin(Cubin cubin, const void* image_object);
  ~Module();

  // CUDA_ERROR_NOT_FOUND when the kernel (or, for a shared object, its layout) is missing.
  CUresult GetFunction(const std::string& name, Function** out);
  // Address and size of a global symbol (cuModuleGetGlobal). A shared object's global is its
  // host symbol, the same in every context; its size is unknown to dlsym, so the object may
  // export NAME__size (size_t), otherwise 0 is reported. An image's variables are per context
  // (Note [module globals]).
  CUresult GetGlobal(const std::shared_ptr<Context>& ctx, const std::string& name, void** address,
                     size_t* size);
  // An image's kernels: all of them, in image order; a shared object's: those looked up so far.
  std::vector<Function*> Functions();
  // Frees per-context variable copies (at unload; launches may still hold the module).
  void ReleaseGlobals();

  CUmodule handle() { return reinterpret_cast<CUmodule>(this); }
  const std::string& path() const { return path_; }
  const void* image_object() const { return image_object_; }

 private:
  Module(void* dl, std::string path) : dl_(dl), path_(std::move(path)) {}
  Module(std::vector<CubinVariable> variables, const void* image_object)
      : dl_(nullptr),
        image_object_(image_object),
        globals_(std::make_unique<ModuleGlobals>(std::move(variables))) {}

  void* const dl_;  // nullptr for an image
  const std::string path_;
  const void* const image_object_ = nullptr;      // images only
  const std::unique_ptr<ModuleGlobals> globals_;  // images only
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Function>> functions_;
  std::vector<Function*> image_order_;  // images only
};

}  // namespace memsim

#endif  // MEMSIM_SRC_MODULE_H_
