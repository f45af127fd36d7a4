// The two indirect ways to reach the driver: cuGetProcAddress (what cudart
// and PyTorch use) and dlsym/dlvsym on libcuda (what frameworks use).
//
// Note [entry-point substitution]
//   The real lookup runs first and decides which flavour (_v2, _ptsz, ...)
//   matches the requested version and flags. Its answer is a real entry
//   point; if that address is one the shim hooks, the hook of exactly that
//   flavour is returned instead, so the ABI always matches. A driver may also
//   answer with an internal address that is no export; for requests made
//   with cudaVersion >= 12000 the hook is then chosen by name: the newest
//   _vN flavour, per-thread (_ptsz/_ptds) iff the flags ask for it. Anything
//   else is returned unchanged.
#include <dlfcn.h>

#include "shim/hooks/hook_util.h"
#include "shim/hooks/libc_symbols.h"

using memvirt::shim::hooks::Forward;
using memvirt::shim::hooks::NextSymbol;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::RealDlsym;
using memvirt::shim::hooks::RealDlvsym;
using memvirt::shim::hooks::Runtime;

namespace {

void* SubstituteIfReady(void* p) {
  Runtime& rt = Runtime::Get();
  return rt.ready() ? rt.Substitute(p) : p;
}

void* SubstituteProcIfReady(const char* symbol, void* p, int version, cuuint64_t flags) {
  Runtime& rt = Runtime::Get();
  return rt.ready() ? rt.SubstituteProc(symbol, p, version, flags) : p;
}

bool LooksLikeDriverSymbol(const char* name) {
  return name != nullptr && name[0] == 'c' && name[1] == 'u';
}

}  // namespace

MEMSHIM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags) {
  CUresult r = Forward(Real().cuGetProcAddress, symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) {
    *pfn = SubstituteProcIfReady(symbol, *pfn, version, flags);
  }
  return r;
}

MEMSHIM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* status) {
  CUresult r = Forward(Real().cuGetProcAddress_v2, symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) {
    *pfn = SubstituteProcIfReady(symbol, *pfn, version, flags);
  }
  return r;
}

MEMSHIM_EXPORT void* dlsym(void* handle, const char* name) {
  void* p = nullptr;
  if (handle == RTLD_NEXT) {
    p = NextSymbol(__builtin_return_address(0), name, nullptr);
  } else if (auto real = RealDlsym()) {
    p = real(handle, name);
  }
  return p != nullptr && LooksLikeDriverSymbol(name) ? SubstituteIfReady(p) : p;
}

MEMSHIM_EXPORT void* dlvsym(void* handle, const char* name, const char* version) {
  void* p = nullptr;
  if (handle == RTLD_NEXT) {
    p = NextSymbol(__builtin_return_address(0), name, version);
  } else if (auto real = RealDlvsym()) {
    p = real(handle, name, version);
  }
  return p != nullptr && LooksLikeDriverSymbol(name) ? SubstituteIfReady(p) : p;
}
