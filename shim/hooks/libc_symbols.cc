#include "shim/hooks/libc_symbols.h"

#include <elf.h>
#include <link.h>

#include <atomic>
#include <cstdint>

namespace memvirt::shim::hooks {
namespace {

// No libc string functions and no dl_iterate_phdr/dladdr here: this code runs
// inside sanitizer start-up, before their interceptors of those functions are
// usable. The loaded objects are read from the dynamic loader's own list.

bool Equal(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

bool Contains(const char* haystack, const char* needle) {
  for (; *haystack != '\0'; ++haystack) {
    const char* h = haystack;
    const char* n = needle;
    while (*n != '\0' && *h == *n) {
      ++h;
      ++n;
    }
    if (*n == '\0') return true;
  }
  return false;
}

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
  const ElfW(Half) * versym = nullptr;
  const ElfW(Verdef) * verdef = nullptr;
};

// Dynamic-section pointers are relocated in place by glibc on most targets;
// accept both relocated and unrelocated values.
template <typename T>
const T* Ptr(ElfW(Addr) base, ElfW(Addr) value) {
  return reinterpret_cast<const T*>(value < base ? value + base : value);
}

bool ReadTables(const link_map* map, ObjectTables* t) {
  t->base = map->l_addr;
  if (map->l_ld == nullptr) return false;
  for (const ElfW(Dyn)* dyn = map->l_ld; dyn->d_tag != DT_NULL; ++dyn) {
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
      case DT_VERSYM:
        t->versym = Ptr<ElfW(Half)>(t->base, dyn->d_un.d_ptr);
        break;
      case DT_VERDEF:
        t->verdef = Ptr<ElfW(Verdef)>(t->base, dyn->d_un.d_ptr);
        break;
      default:
        break;
    }
  }
  return t->symtab != nullptr && t->strtab != nullptr &&
         (t->gnu_hash != nullptr || t->sysv_hash != nullptr);
}

bool Defined(const ElfW(Sym) * s) {
  const int type = ELF64_ST_TYPE(s->st_info);
  return s->st_shndx != SHN_UNDEF &&
         (type == STT_FUNC || type == STT_GNU_IFUNC || type == STT_OBJECT);
}

// The address dlsym would return: IFUNC symbols (memset & co.) are resolved
// by calling their resolver, as the loader does.
void* AddressOf(const ObjectTables& t, const ElfW(Sym) * s) {
  void* p = reinterpret_cast<void*>(t.base + s->st_value);
  if (ELF64_ST_TYPE(s->st_info) == STT_GNU_IFUNC) {
    using Resolver = void* (*)();
    p = reinterpret_cast<Resolver>(p)();
  }
  return p;
}

// True if symbol `i` has version `version` (null: any version).
bool HasVersion(const ObjectTables& t, uint32_t i, const char* version) {
  if (version == nullptr) return true;
  if (t.versym == nullptr || t.verdef == nullptr) return false;
  const ElfW(Half) ndx = t.versym[i] & 0x7fff;
  for (const ElfW(Verdef)* d = t.verdef;;
       d = reinterpret_cast<const ElfW(Verdef)*>(reinterpret_cast<const char*>(d) + d->vd_next)) {
    if (d->vd_ndx == ndx) {
      const auto* aux =
          reinterpret_cast<const ElfW(Verdaux)*>(reinterpret_cast<const char*>(d) + d->vd_aux);
      return Equal(t.strtab + aux->vda_name, version);
    }
    if (d->vd_next == 0) return false;
  }
}

void* Find(const ObjectTables& t, const char* name, const char* version = nullptr) {
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
      if ((h | 1) == (h2 | 1) && Defined(s) && Equal(t.strtab + s->st_name, name) &&
          HasVersion(t, i, version)) {
        return AddressOf(t, s);
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
    if (Defined(s) && Equal(t.strtab + s->st_name, name) && HasVersion(t, i, version)) {
      return AddressOf(t, s);
    }
  }
  return nullptr;
}

// The loaded objects in load order (main program first).
const link_map* FirstObject() { return _r_debug.r_map; }

// The object with the highest load address not above `address`.
const link_map* ObjectContaining(const void* address) {
  const ElfW(Addr) a = reinterpret_cast<ElfW(Addr)>(address);
  const link_map* best = nullptr;
  for (const link_map* m = FirstObject(); m != nullptr; m = m->l_next) {
    if (m->l_addr <= a && (best == nullptr || m->l_addr >= best->l_addr)) best = m;
  }
  return best;
}

// Note [no guard variables here]
//   These lookups run inside a sanitizer runtime's own start-up (it resolves
//   its interceptors with dlsym), before that runtime can serve the
//   __cxa_guard_* calls a function-local static would make (TSan crashed
//   there). So the result is published through plain atomics instead: threads
//   that race compute the same values and store them alike.
std::atomic<DlsymFn> g_dlsym{nullptr};
std::atomic<DlvsymFn> g_dlvsym{nullptr};
std::atomic<bool> g_looked_up{false};

void LookUpLibc() {
  for (const link_map* m = FirstObject(); m != nullptr; m = m->l_next) {
    if (m->l_name == nullptr || !Contains(m->l_name, "libc.so.")) continue;
    ObjectTables t;
    if (!ReadTables(m, &t)) continue;
    auto dlsym_fn = reinterpret_cast<DlsymFn>(Find(t, "dlsym"));
    if (dlsym_fn == nullptr) continue;
    g_dlsym.store(dlsym_fn, std::memory_order_relaxed);
    g_dlvsym.store(reinterpret_cast<DlvsymFn>(Find(t, "dlvsym")), std::memory_order_relaxed);
    break;
  }
  g_looked_up.store(true, std::memory_order_release);
}

void EnsureLookedUp() {
  if (!g_looked_up.load(std::memory_order_acquire)) LookUpLibc();
}

}  // namespace

DlsymFn RealDlsym() {
  EnsureLookedUp();
  return g_dlsym.load(std::memory_order_relaxed);
}
DlvsymFn RealDlvsym() {
  EnsureLookedUp();
  return g_dlvsym.load(std::memory_order_relaxed);
}

void* NextSymbol(const void* caller, const char* name, const char* version) {
  const link_map* self = ObjectContaining(caller);
  if (self == nullptr) return nullptr;
  for (const link_map* m = self->l_next; m != nullptr; m = m->l_next) {
    if (m->l_name == nullptr || m->l_name[0] == '\0') continue;
    ObjectTables t;
    if (!ReadTables(m, &t)) continue;
    if (void* p = Find(t, name, version)) return p;
  }
  return nullptr;
}

}  // namespace memvirt::shim::hooks
