// cuGetExportTable and the private tables it hands out (Note [export tables] in export_tables.h).
#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "api_common.h"
#include "export_tables.h"
#include "integrity_check.h"
#include "memvirt/common/mutex.h"

using memsim::Context;
using memsim::Device;
using namespace memsim::api;

namespace {

// Answer of every slot the runtime was not seen to call. Any argument list is safe to pass to
// it under the x86-64 calling convention (caller-cleaned, arguments ignored).
CUresult UncalledSlot() { return CUDA_ERROR_NOT_SUPPORTED; }
void* const kUncalled = reinterpret_cast<void*>(&UncalledSlot);

template <size_t N>
constexpr uintptr_t TableSize() {
  return N * sizeof(void*);
}

// --- CUDART_INTERFACE {6bd5fb6c-5bf4-e74a-8987-d93912fd9df9}, 13 slots, CUDA 13.0 ---------
// Slot 2 returns the device's primary context without retaining it (it stays inactive); a later
// cuDevicePrimaryCtxRetain returns the same handle.
CUresult PrimaryContextOf(CUcontext* out, CUdevice ordinal) {
  if (CUresult r = RequireInit()) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* device;
  if (CUresult r = ResolveDevice(ordinal, &device)) return r;
  auto ctx = device->PeekPrimary();
  D().contexts.Add(ctx);
  *out = ctx->handle();
  return CUDA_SUCCESS;
}

void* const kRuntimeInterface[13] = {
    reinterpret_cast<void*>(TableSize<13>()),
    kUncalled,  // module from a fatbin wrapper
    reinterpret_cast<void*>(&PrimaryContextOf),
    kUncalled,
    kUncalled,
    kUncalled,
    kUncalled,  // module from a fatbin wrapper, extended
    kUncalled,
    kUncalled,  // module from a fatbin header, extended
    kUncalled,
    kUncalled,
    kUncalled,
    kUncalled,  // loads the JIT compilers
};

// --- TOOLS_RUNTIME_CALLBACK_HOOKS {a094798c-2e74-2e74-93f2-0800200c0a66}, 7 slots ----------
// Slots 2 and 6 hand the runtime scratch buffers it fills with callback bookkeeping.
uint32_t g_hook_buffer_a[1024];
uint32_t g_hook_buffer_b[14];
void HookBufferA(void** ptr, size_t* size) {
  *ptr = g_hook_buffer_a;
  *size = sizeof(g_hook_buffer_a) / sizeof(g_hook_buffer_a[0]);
}
void HookBufferB(void** ptr, size_t* size) {
  *ptr = g_hook_buffer_b;
  *size = sizeof(g_hook_buffer_b) / sizeof(g_hook_buffer_b[0]);
}
void* const kCallbackHooks[7] = {
    reinterpret_cast<void*>(TableSize<7>()),
    kUncalled,
    reinterpret_cast<void*>(&HookBufferA),
    kUncalled,
    kUncalled,
    kUncalled,
    reinterpret_cast<void*>(&HookBufferB),
};

// --- TOOLS_TLS {42d85a81-23f6-cb47-8298-f6e78a3aecdc}, 4 slots: must exist, never called ---
void* const kToolsTls[4] = {reinterpret_cast<void*>(TableSize<4>()), kUncalled, kUncalled,
                            kUncalled};

// --- CONTEXT_LOCAL_STORAGE {c693336e-1121-df11-a8c3-68f355d89593}: put, delete, get, NULL ---
// A NULL context means the calling thread's current one. Destructors run with (context, key,
// value) when the context is destroyed or its primary context reset.
using StorageDestructor = void (*)(CUcontext, void*, void*);
struct StoredValue {
  void* value;
  StorageDestructor destructor;
};
// Never destroyed: the runtime deletes its entries from its own exit handlers, which may run
// after this library's static destructors.
struct ContextStorage {
  memvirt::sync::Mutex mu;
  std::map<Context*, std::map<void*, StoredValue>> values MEMVIRT_GUARDED_BY(mu);
};
ContextStorage& Storage() {
  static ContextStorage* storage = new ContextStorage;
  return *storage;
}

CUresult StorageContext(CUcontext handle, std::shared_ptr<Context>* out) {
  if (CUresult r = RequireInit()) return r;
  if (handle == nullptr) return CurrentContext(out);
  *out = D().contexts.Get(handle);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult StoragePut(CUcontext handle, void* key, void* value, void* destructor) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = StorageContext(handle, &ctx)) return r;
  memvirt::sync::MutexLock lock(&Storage().mu);
  Storage().values[ctx.get()][key] = {value, reinterpret_cast<StorageDestructor>(destructor)};
  return CUDA_SUCCESS;
}

CUresult StorageDelete(CUcontext handle, void* key) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = StorageContext(handle, &ctx)) return r;
  memvirt::sync::MutexLock lock(&Storage().mu);
  auto it = Storage().values.find(ctx.get());
  if (it == Storage().values.end() || it->second.erase(key) == 0) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

CUresult StorageGet(void** value, CUcontext handle, void* key) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Context> ctx;
  if (CUresult r = StorageContext(handle, &ctx)) return r;
  memvirt::sync::MutexLock lock(&Storage().mu);
  auto it = Storage().values.find(ctx.get());
  if (it == Storage().values.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto entry = it->second.find(key);
  if (entry == it->second.end()) return CUDA_ERROR_INVALID_HANDLE;
  *value = entry->second.value;
  return CUDA_SUCCESS;
}

void* const kContextStorage[4] = {reinterpret_cast<void*>(&StoragePut),
                                  reinterpret_cast<void*>(&StorageDelete),
                                  reinterpret_cast<void*>(&StorageGet), nullptr};

// --- CONTEXT_CHECKS {263e8860-7cd2-6143-92f6-bbd5006dfa7e}, 4 slots ------------------------
// Slot 2 reports "no restriction" (0) for a context, slot 3 returns 0.
CUresult ContextCheck(CUcontext, uint32_t* result, const void**) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *result = 0;
  return CUDA_SUCCESS;
}
uint32_t ContextCheckFlags() { return 0; }
void* const kContextChecks[4] = {reinterpret_cast<void*>(TableSize<4>()), kUncalled,
                                 reinterpret_cast<void*>(&ContextCheck),
                                 reinterpret_cast<void*>(&ContextCheckFlags)};

// --- INTEGRITY_CHECK {d4082055-bde6-704b-8d34-ba123c66e1f2}, 3 slots ------------------------
CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t out[2]);
void* const kIntegrity[3] = {reinterpret_cast<void*>(TableSize<3>()),
                             reinterpret_cast<void*>(&IntegrityCheck), kUncalled};

CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t out[2]) {
  if (CUresult r = RequireInit()) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int driver_version = 0;
  cuDriverGetVersion(&driver_version);
  memsim::IntegrityRecord record;
  record.driver_version = static_cast<uint32_t>(driver_version);
  record.version = version;
  record.pid = static_cast<uint32_t>(getpid());
  record.thread = static_cast<uint32_t>(pthread_self());
  record.runtime_interface_table = kRuntimeInterface;
  record.integrity_table = kIntegrity;
  record.integrity_function = reinterpret_cast<const void*>(&IntegrityCheck);
  record.unix_seconds = unix_seconds;
  std::vector<memsim::DeviceIdentity> devices(D().device_count());
  for (int i = 0; i < static_cast<int>(devices.size()); ++i) {
    Device* device;
    if (CUresult r = ResolveDevice(i, &device)) return r;
    std::memcpy(devices[i].uuid, device->uuid().bytes, sizeof(devices[i].uuid));
    int value = 0;
    device->Attribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, &value);
    devices[i].pci_domain = value;
    device->Attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, &value);
    devices[i].pci_bus = value;
    device->Attribute(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, &value);
    devices[i].pci_device = value;
  }
  const auto answer = memsim::IntegrityAnswer(record, devices);
  out[0] = answer[0];
  out[1] = answer[1];
  return CUDA_SUCCESS;
}

struct ExportTable {
  CUuuid id;
  const void* table;
};

const ExportTable kExportTables[] = {
    {{{'\x6b', '\xd5', '\xfb', '\x6c', '\x5b', '\xf4', '\xe7', '\x4a', '\x89', '\x87', '\xd9',
       '\x39', '\x12', '\xfd', '\x9d', '\xf9'}},
     kRuntimeInterface},
    {{{'\xa0', '\x94', '\x79', '\x8c', '\x2e', '\x74', '\x2e', '\x74', '\x93', '\xf2', '\x08',
       '\x00', '\x20', '\x0c', '\x0a', '\x66'}},
     kCallbackHooks},
    {{{'\x42', '\xd8', '\x5a', '\x81', '\x23', '\xf6', '\xcb', '\x47', '\x82', '\x98', '\xf6',
       '\xe7', '\x8a', '\x3a', '\xec', '\xdc'}},
     kToolsTls},
    {{{'\xc6', '\x93', '\x33', '\x6e', '\x11', '\x21', '\xdf', '\x11', '\xa8', '\xc3', '\x68',
       '\xf3', '\x55', '\xd8', '\x95', '\x93'}},
     kContextStorage},
    {{{'\x26', '\x3e', '\x88', '\x60', '\x7c', '\xd2', '\x61', '\x43', '\x92', '\xf6', '\xbb',
       '\xd5', '\x00', '\x6d', '\xfa', '\x7e'}},
     kContextChecks},
    {{{'\xd4', '\x08', '\x20', '\x55', '\xbd', '\xe6', '\x70', '\x4b', '\x8d', '\x34', '\xba',
       '\x12', '\x3c', '\x66', '\xe1', '\xf2'}},
     kIntegrity},
};

}  // namespace

namespace memsim {

void DestroyContextLocalStorage(Context* ctx) {
  std::map<void*, StoredValue> entries;
  {
    memvirt::sync::MutexLock lock(&Storage().mu);
    auto it = Storage().values.find(ctx);
    if (it == Storage().values.end()) return;
    entries = std::move(it->second);
    Storage().values.erase(it);
  }
  for (const auto& [key, stored] : entries) {
    if (stored.destructor != nullptr) stored.destructor(ctx->handle(), key, stored.value);
  }
}

}  // namespace memsim

extern "C" {

CUresult CUDAAPI cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ExportTable& t : kExportTables) {
    if (std::memcmp(t.id.bytes, pExportTableId->bytes, sizeof(t.id.bytes)) == 0) {
      *ppExportTable = t.table;
      return CUDA_SUCCESS;
    }
  }
  *ppExportTable = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

}  // extern "C"
