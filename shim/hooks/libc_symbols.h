// The C library's own dlsym/dlvsym, found without calling dlsym (the shim
// interposes it), and an emulation of dlsym(RTLD_NEXT, ...) on behalf of the
// shim's callers.
//
// Thread safety: all functions are thread-safe; the lookup runs once.
//
// Note [finding the real dlsym]
//   A preloaded library that exports dlsym and dlvsym cannot ask either of
//   them for the originals: every call would bind to itself. The shim walks
//   the dynamic loader's list of loaded objects (_r_debug), finds libc and
//   looks "dlsym" and "dlvsym" up in its dynamic symbol table (GNU or SysV
//   hash), exactly as the dynamic loader would.
//
// Note [RTLD_NEXT]
//   glibc resolves dlsym(RTLD_NEXT, ...) relative to the object that called
//   it. Forwarded through the shim that caller would be the shim itself, so
//   the hook passes its caller's return address and NextSymbol searches the
//   objects loaded after that caller, in load order. Nothing here calls libc
//   string functions, dl_iterate_phdr or dladdr: sanitizer runtimes call
//   dlsym while they start, before their interceptors of those work.
#ifndef MEMVIRT_SHIM_HOOKS_LIBC_SYMBOLS_H_
#define MEMVIRT_SHIM_HOOKS_LIBC_SYMBOLS_H_

namespace memvirt::shim::hooks {

using DlsymFn = void* (*)(void*, const char*);
using DlvsymFn = void* (*)(void*, const char*, const char*);

// Null only if libc could not be parsed (then the shim cannot work at all).
DlsymFn RealDlsym();
DlvsymFn RealDlvsym();

// dlsym(RTLD_NEXT, name) / dlvsym(RTLD_NEXT, name, version) as seen from the
// object containing `caller`. `version` may be null.
void* NextSymbol(const void* caller, const char* name, const char* version);

}  // namespace memvirt::shim::hooks

#endif  // MEMVIRT_SHIM_HOOKS_LIBC_SYMBOLS_H_
