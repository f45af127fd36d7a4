// Argument decoding: the parameter layout of each kernel handle, asked of the
// driver once (cuFuncGetParamInfo / cuKernelGetParamInfo) and cached, so that
// a launch's argument scan (TouchSet::Args) reads the arguments' words
// without a driver call.
//
// Thread safety: not thread-safe; the owner serializes every call (ShimCore
// under its mutex). Layouts are never dropped, and a returned reference
// stays valid for the cache's lifetime (node-based map).
#ifndef MEMVIRT_SHIM_CORE_PARAM_LAYOUT_H_
#define MEMVIRT_SHIM_CORE_PARAM_LAYOUT_H_

#include <cuda.h>

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shim/driver/driver.h"

namespace memvirt::shim {

// One 8-byte argument word: params[param] + offset.
struct ArgWord {
  uint32_t param;
  uint32_t offset;
};

struct ParamLayout {
  bool known = false;  // false: the driver gave no layout; launches are opaque
  std::vector<std::pair<uint32_t, uint32_t>> params;  // (offset, size)
  std::vector<ArgWord> words;                         // every 8-byte word, flattened
  bool one_word_each = false;  // every parameter is exactly one word at offset 0
  bool aggregates = false;     // a parameter of more than 8 bytes (Note [hidden reach])
};

// How the cached layouts were learned.
struct ParamLayoutCounts {
  uint32_t decoded_as_function = 0;  // by cuFuncGetParamInfo
  uint32_t decoded_as_kernel = 0;    // by cuKernelGetParamInfo (a CUkernel)
  uint32_t undecodable = 0;          // no layout
};

class ParamLayoutCache {
 public:
  // `driver` must outlive the cache.
  explicit ParamLayoutCache(const Driver* driver) : driver_(driver) {}
  ParamLayoutCache(const ParamLayoutCache&) = delete;
  ParamLayoutCache& operator=(const ParamLayoutCache&) = delete;

  // The layout of `function` (a CUfunction or a CUkernel cast as one). A
  // one-entry cache (the previous launch's function) answers inline.
  const ParamLayout& Of(CUfunction function) {
    if (function == last_function_ && last_layout_ != nullptr) return *last_layout_;
    return LookUp(function);
  }
  const ParamLayoutCounts& counts() const { return counts_; }

 private:
  // Note [parameter information]
  //   cuLaunchKernel takes a CUfunction or a CUkernel cast as one (NVIDIA's
  //   runtime launches CUkernels), and the layout is asked with the call of
  //   the handle's kind: cuFuncGetParamInfo for a function,
  //   cuKernelGetParamInfo for a kernel (the driver answers
  //   CUDA_ERROR_INVALID_HANDLE for the other kind). The kind is learned at
  //   index 0: cuFuncGetParamInfo succeeding means a function; any other
  //   answer asks cuKernelGetParamInfo. CUDA_ERROR_INVALID_VALUE from
  //   cuFuncGetParamInfo at index 0 is ambiguous (a function without
  //   parameters, or a kernel handle the driver does not tell apart) and is
  //   not read as "no parameters" by itself: only if cuKernelGetParamInfo
  //   answers CUDA_ERROR_INVALID_HANDLE (not a kernel) is it a function
  //   without parameters; otherwise the kernel's answer counts (its
  //   parameters, none, or an error: opaque). Past index 0,
  //   CUDA_ERROR_INVALID_VALUE ends the list.
  enum class Source : uint8_t { kFunction, kKernel };
  const ParamLayout& LookUp(CUfunction function);
  CUresult Info(Source source, CUfunction function, size_t index, size_t* offset,
                size_t* size) const;
  // The handle's kind, with `*first` the answer for index 0 (and *offset,
  // *size filled if it is CUDA_SUCCESS).
  Source SourceOf(CUfunction function, size_t* offset, size_t* size, CUresult* first) const;

  const Driver* const driver_;
  std::unordered_map<CUfunction, ParamLayout> layouts_;
  CUfunction last_function_ = nullptr;
  const ParamLayout* last_layout_ = nullptr;
  ParamLayoutCounts counts_;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_PARAM_LAYOUT_H_
