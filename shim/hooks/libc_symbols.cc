#include "shim/hooks/libc_symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <cstdint>
#include <cstring>
#include <mutex>

namespace memvirt::shim::hooks {
namespace {

struct LibcLookup {
  DlsymFn dlsym = nullptr;
  DlvsymFn dlvsym = nullptr;
};

uint32_t GnuHash(const char* name) {
  uint32_t h = 5381;
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p; ++p) {
    h = h * 33 + *p;
  }
  return h;
}

uint32_t SysvHash(const char* name) {
  uint32_t h = 0;
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p; ++p) {
    h = (h << 4) + *p;
    uint32_t g = h & 0xf0000000u;
    if (g) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

struct ObjectTables {
  ElfW(Addr) base = 0;
  const ElfW(Sym) * symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;
};

// Dynamic-section pointers are relocated in place by glibc on most targets;
// accept both relocated and unrelocated values.
template <typename T>
const T* Ptr(ElfW(Addr) base, ElfW(Addr) value) {
  return reinterpret_cast<const T*>(value < base ? value + base : value);
}

bool ReadTables(const dl_phdr_info* info, ObjectTables* t) {
  t->base = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
    const ElfW(Dyn)* dyn =
        reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    for (; dyn->d_tag != DT_NULL; ++dyn) {
      switch (dyn->d_tag) {
        case DT_SYMTAB:
          t->symtab = Ptr<ElfW(Sym)>(t->base, dyn->d_un.d_ptr);
          break;
        case DT_STRTAB:
          t->strtab = Ptr<char>(t->base, dyn->d_un.d_ptr);
          break;
        case DT_GNU_HASH:
          t->gnu_hash = Ptr<uint32_t>(t->base, dyn->d_un.d_ptr);
          break;
        case DT_HASH:
          t->sysv_hash = Ptr<uint32_t>(t->base, dyn->d_un.d_ptr);
          break;
        default:
          break;
      }
    }
  }
  return t->symtab != nullptr && t->strtab != nullptr &&
         (t->gnu_hash != nullptr || t->sysv_hash != nullptr);
}

bool Defined(const ElfW(Sym) * s) {
  return s->st_shndx != SHN_UNDEF && ELF64_ST_TYPE(s->st_info) == STT_FUNC;
}

void* Find(const ObjectTables& t, const char* name) {
  if (t.gnu_hash != nullptr) {
    const uint32_t nbuckets = t.gnu_hash[0];
    const uint32_t symoffset = t.gnu_hash[1];
    const uint32_t bloom_size = t.gnu_hash[2];
    const ElfW(Addr)* bloom = reinterpret_cast<const ElfW(Addr)*>(&t.gnu_hash[4]);
    const uint32_t* buckets = reinterpret_cast<const uint32_t*>(&bloom[bloom_size]);
    const uint32_t* chain = &buckets[nbuckets];
    const uint32_t h = GnuHash(name);
    for (uint32_t i = buckets[h % nbuckets]; i >= symoffset && i != 0; ++i) {
      const uint32_t h2 = chain[i - symoffset];
      const ElfW(Sym)* s = &t.symtab[i];
      if ((h | 1) == (h2 | 1) && Defined(s) && strcmp(t.strtab + s->st_name, name) == 0) {
        return reinterpret_cast<void*>(t.base + s->st_value);
      }
      if (h2 & 1) break;
    }
    return nullptr;
  }
  const uint32_t nbucket = t.sysv_hash[0];
  const uint32_t* bucket = &t.sysv_hash[2];
  const uint32_t* chain = &bucket[nbucket];
  for (uint32_t i = bucket[SysvHash(name) % nbucket]; i != STN_UNDEF; i = chain[i]) {
    const ElfW(Sym)* s = &t.symtab[i];
    if (Defined(s) && strcmp(t.strtab + s->st_name, name) == 0) {
      return reinterpret_cast<void*>(t.base + s->st_value);
    }
  }
  return nullptr;
}

int FindLibc(dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  if (name == nullptr || strstr(name, "/libc.so") == nullptr) {
    if (name == nullptr || strncmp(name, "libc.so", 7) != 0) return 0;
  }
  ObjectTables t;
  if (!ReadTables(info, &t)) return 0;
  auto* out = static_cast<LibcLookup*>(data);
  out->dlsym = reinterpret_cast<DlsymFn>(Find(t, "dlsym"));
  out->dlvsym = reinterpret_cast<DlvsymFn>(Find(t, "dlvsym"));
  return out->dlsym != nullptr ? 1 : 0;
}

const LibcLookup& Libc() {
  static LibcLookup lookup = [] {
    LibcLookup l;
    dl_iterate_phdr(&FindLibc, &l);
    return l;
  }();
  return lookup;
}

struct NextSearch {
  ElfW(Addr) caller_base;
  const char* name;
  const char* version;
  bool seen_caller = false;
  void* result = nullptr;
};

int SearchAfterCaller(dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<NextSearch*>(data);
  if (!s->seen_caller) {
    s->seen_caller = info->dlpi_addr == s->caller_base;
    return 0;
  }
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  ObjectTables t;
  if (!ReadTables(info, &t)) return 0;
  if (s->version == nullptr) {
    void* p = Find(t, s->name);
    if (p != nullptr) {
      s->result = p;
      return 1;
    }
    return 0;
  }
  // Versioned: let libc pick the right version inside this one object.
  void* handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return 0;
  void* p = Libc().dlvsym(handle, s->name, s->version);
  Dl_info where;
  if (p != nullptr && dladdr(p, &where) != 0 &&
      reinterpret_cast<ElfW(Addr)>(where.dli_fbase) == info->dlpi_addr) {
    s->result = p;
  }
  dlclose(handle);
  return s->result != nullptr ? 1 : 0;
}

}  // namespace

DlsymFn RealDlsym() { return Libc().dlsym; }
DlvsymFn RealDlvsym() { return Libc().dlvsym; }

void* NextSymbol(const void* caller, const char* name, const char* version) {
  Dl_info info;
  if (dladdr(caller, &info) == 0) return nullptr;
  NextSearch search{reinterpret_cast<ElfW(Addr)>(info.dli_fbase), name, version};
  dl_iterate_phdr(&SearchAfterCaller, &search);
  return search.result;
}

}  // namespace memvirt::shim::hooks
