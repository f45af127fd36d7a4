#include "ipc_event.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "ipc.h"

namespace memsim {

namespace {

constexpr uint32_t kEventMagic = 0x6d736965;  // "msie"
constexpr size_t kPageBytes = 4096;

// The bytes of a CUipcEventHandle as the sim fills them (Note [ipc events]).
struct EventWire {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  uint32_t reserved;
  uint64_t node_hash;
};
static_assert(sizeof(EventWire) <= sizeof(CUipcEventHandle));

void* MapPage(int fd) {
  void* p = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

std::shared_ptr<SharedEventState> SharedEventState::Create() {
  const int fd = memfd_create("memsim-ipc-event", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  void* page = ftruncate(fd, kPageBytes) == 0 ? MapPage(fd) : nullptr;
  if (page == nullptr) {
    close(fd);
    return nullptr;
  }
  // A fresh memfd page reads as zeros: never recorded.
  return std::shared_ptr<SharedEventState>(new SharedEventState(fd, static_cast<Page*>(page)));
}

std::shared_ptr<SharedEventState> SharedEventState::Open(int pid, int fd) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
  const int own = open(path, O_RDWR | O_CLOEXEC);
  if (own < 0) return nullptr;
  struct stat st;
  void* page =
      fstat(own, &st) == 0 && st.st_size == static_cast<off_t>(kPageBytes) ? MapPage(own) : nullptr;
  if (page == nullptr) {
    close(own);
    return nullptr;
  }
  return std::shared_ptr<SharedEventState>(new SharedEventState(own, static_cast<Page*>(page)));
}

SharedEventState::~SharedEventState() {
  munmap(page_, kPageBytes);
  close(fd_);
}

uint64_t SharedEventState::BeginRecord() {
  return page_->recorded.fetch_add(1, std::memory_order_acq_rel) + 1;
}

void SharedEventState::Completed(uint64_t generation) {
  uint64_t seen = page_->completed.load(std::memory_order_acquire);
  while (seen < generation &&
         !page_->completed.compare_exchange_weak(seen, generation, std::memory_order_acq_rel)) {
  }
}

uint64_t SharedEventState::recorded() const {
  return page_->recorded.load(std::memory_order_acquire);
}

bool SharedEventState::Reached(uint64_t generation) const {
  return page_->completed.load(std::memory_order_acquire) >= generation;
}

void SharedEventState::WaitFor(uint64_t generation) const {
  while (!Reached(generation)) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void ExportEventHandle(const SharedEventState& state, CUipcEventHandle* out) {
  EventWire w = {};
  w.magic = kEventMagic;
  w.pid = static_cast<int32_t>(getpid());
  w.fd = state.fd();
  w.node_hash = IpcNodeHash();
  std::memset(out, 0, sizeof(*out));
  std::memcpy(out->reserved, &w, sizeof(w));
}

CUresult OpenEventHandle(const CUipcEventHandle& handle, std::shared_ptr<SharedEventState>* out) {
  EventWire w;
  std::memcpy(&w, handle.reserved, sizeof(w));
  if (w.magic != kEventMagic || w.node_hash != IpcNodeHash() || w.pid <= 0 || w.fd < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (w.pid == static_cast<int32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  auto state = SharedEventState::Open(w.pid, w.fd);
  if (!state) return CUDA_ERROR_MAP_FAILED;
  *out = std::move(state);
  return CUDA_SUCCESS;
}

}  // namespace memsim
