#include "ipc.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <tuple>

#include "context.h"
#include "device.h"
#include "driver.h"
#include "memvirt/common/mutex.h"

namespace memsim {

namespace {

constexpr uint32_t kMagic = 0x6d736970;  // "msip"

// The bytes of a CUipcMemHandle as the sim fills them (Note [ipc backing]).
struct Wire {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  int32_t device;
  uint64_t offset;
  uint64_t size;
  uint64_t buffer_id;
  uint64_t node_hash;
};
static_assert(sizeof(Wire) <= sizeof(CUipcMemHandle));

// Handles opened in this process: (context, exporter pid, buffer id) -> mapping.
struct Opened {
  uint64_t ptr;
  int refs;
};
using OpenKey = std::tuple<const Context*, int32_t, uint64_t>;

struct OpenTable {
  memvirt::sync::Mutex mu;
  std::map<OpenKey, Opened> by_key MEMVIRT_GUARDED_BY(mu);
};

OpenTable& Table() {
  static OpenTable* table = new OpenTable;  // never destroyed (Note [never destroyed])
  return *table;
}

}  // namespace

uint64_t IpcNodeHash() {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : Driver::Get().config().node) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

CUresult ExportMemHandle(uint64_t dptr, CUipcMemHandle* out) {
  Device* dev = Driver::Get().DeviceForAddress(dptr);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto info = dev->va().Lookup(dptr);
  if (!info || info->kind != RangeInfo::Kind::kClassic || info->base != dptr ||
      info->pool != nullptr || info->imported) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev->va().classic_fd() < 0) return CUDA_ERROR_MAP_FAILED;
  Wire w = {};
  w.magic = kMagic;
  w.pid = static_cast<int32_t>(getpid());
  w.fd = dev->va().classic_fd();
  w.device = dev->ordinal();
  w.offset = dev->va().FileOffset(dptr);
  w.size = info->size;
  w.buffer_id = info->buffer_id;
  w.node_hash = IpcNodeHash();
  std::memset(out, 0, sizeof(*out));
  std::memcpy(out->reserved, &w, sizeof(w));
  return CUDA_SUCCESS;
}

CUresult OpenMemHandle(Context* ctx, const CUipcMemHandle& handle, uint64_t* out) {
  Wire w;
  std::memcpy(&w, handle.reserved, sizeof(w));
  if (w.magic != kMagic || w.node_hash != IpcNodeHash() || w.size == 0 || w.pid <= 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (w.pid == static_cast<int32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  OpenTable& table = Table();
  memvirt::sync::MutexLock lock(&table.mu);
  const OpenKey key{ctx, w.pid, w.buffer_id};
  if (auto it = table.by_key.find(key); it != table.by_key.end()) {
    ++it->second.refs;
    *out = it->second.ptr;
    return CUDA_SUCCESS;
  }
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", w.pid, w.fd);
  const int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_MAP_FAILED;
  uint64_t ptr = 0;
  const CUresult r = ctx->device()->va().MapImported(fd, w.offset, w.size, ctx, &ptr);
  close(fd);  // the mapping keeps the file
  if (r != CUDA_SUCCESS) return r;
  table.by_key.emplace(key, Opened{ptr, 1});
  *out = ptr;
  return CUDA_SUCCESS;
}

CUresult CloseMemHandle(uint64_t dptr) {
  OpenTable& table = Table();
  memvirt::sync::MutexLock lock(&table.mu);
  for (auto it = table.by_key.begin(); it != table.by_key.end(); ++it) {
    if (it->second.ptr != dptr) continue;
    if (--it->second.refs > 0) return CUDA_SUCCESS;
    table.by_key.erase(it);
    Device* dev = Driver::Get().DeviceForAddress(dptr);
    uint64_t footprint = 0;
    return dev != nullptr ? dev->va().FreeClassic(dptr, &footprint) : CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

void ForgetIpcOpenedBy(const Context* ctx) {
  OpenTable& table = Table();
  memvirt::sync::MutexLock lock(&table.mu);
  for (auto it = table.by_key.begin(); it != table.by_key.end();) {
    it = std::get<0>(it->first) == ctx ? table.by_key.erase(it) : std::next(it);
  }
}

}  // namespace memsim
