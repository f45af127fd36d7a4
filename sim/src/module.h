// Modules (cuModuleLoad / cuLibraryLoadFromFile) and their kernel functions.
//
// A module is a shared object opened with dlopen; a function NAME is the host symbol
// `void NAME(void**)` plus its parameter layout NAME__param_sizes (0-terminated byte sizes).
// Offsets use natural alignment min(size, 8), matching what a CUDA compiler lays out for
// scalar and pointer parameters.
//
// Ownership: modules live in the driver's handle table; functions are owned by their module and
// are valid until it is unloaded. Every enqueued launch holds a reference to its module, so the
// shared object is closed only after the last launch of one of its kernels has run.
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_MODULE_H_
#define MEMSIM_SRC_MODULE_H_

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_api.h"

namespace memsim {

using KernelEntry = void (*)(void** params);

class Module;

struct ParamLayout {
  std::vector<size_t> sizes;
  std::vector<size_t> offsets;
  size_t total = 0;  // bytes of the packed argument buffer
};

// Builds the layout from a 0-terminated size list (nullptr = no parameters).
ParamLayout MakeParamLayout(const unsigned* sizes);

class Function {
 public:
  Function(Module* module, std::string name, KernelEntry entry, ParamLayout layout)
      : module_(module), name_(std::move(name)), entry_(entry), layout_(std::move(layout)) {}
  Module* module() const { return module_; }
  const std::string& name() const { return name_; }
  KernelEntry entry() const { return entry_; }
  const ParamLayout& layout() const { return layout_; }
  CUfunction handle() { return reinterpret_cast<CUfunction>(this); }

 private:
  Module* const module_;
  const std::string name_;
  const KernelEntry entry_;
  const ParamLayout layout_;
};

class Module {
 public:
  // dlopen()s `path`. nullptr and *error set when it cannot be loaded.
  static std::shared_ptr<Module> Load(const std::string& path, CUresult* error);
  ~Module();

  // CUDA_ERROR_NOT_FOUND when the symbol or its layout is missing.
  CUresult GetFunction(const std::string& name, Function** out);
  // Address and size of a global symbol (cuModuleGetGlobal); size is unknown to dlsym, so the
  // module may export NAME__size (size_t); otherwise 0 is reported.
  CUresult GetGlobal(const std::string& name, void** address, size_t* size);
  std::vector<Function*> Functions();

  CUmodule handle() { return reinterpret_cast<CUmodule>(this); }
  const std::string& path() const { return path_; }

 private:
  Module(void* dl, std::string path) : dl_(dl), path_(std::move(path)) {}

  void* const dl_;
  const std::string path_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Function>> functions_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_MODULE_H_
