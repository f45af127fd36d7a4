#include "physical.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "capacity.h"
#include "populate.h"

namespace memsim {

uint64_t NextAllocationId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// Note [memfd names]: a physical allocation's memfd is named "memsim-physical:<type>:<id>" with
// the CUmemLocation of its properties, so that an importer (possibly another process) can tell
// where the memory lives from the file descriptor alone (readlink of /proc/self/fd/N).
constexpr char kNamePrefix[] = "memsim-physical:";

bool LocationFromFd(int fd, CUmemLocation* loc) {
  char link[64];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  char target[256] = {};
  const ssize_t n = readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  const std::string name(target, static_cast<size_t>(n));
  const size_t at = name.find(kNamePrefix);
  if (at == std::string::npos) return false;
  int type = 0, id = 0;
  if (std::sscanf(name.c_str() + at + sizeof(kNamePrefix) - 1, "%d:%d", &type, &id) != 2) {
    return false;
  }
  loc->type = static_cast<CUmemLocationType>(type);
  loc->id = id;
  return true;
}

// Parked mappings (Note [parked mappings]) live at 2 MiB-aligned addresses, so that the kernel
// can move whole page tables between them and 2 MiB-aligned device addresses.
constexpr uint64_t kParkAlignment = 2ULL << 20;

// MREMAP_DONTUNMAP (Linux 5.7; shared mappings since 5.13) leaves the source range mapped,
// without pages, so no other thread's mmap can take it while it is being replaced.
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

bool MoveMapping(uint64_t from, uint64_t to, uint64_t size) {
  void* p = mremap(reinterpret_cast<void*>(from), size, size,
                   MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, reinterpret_cast<void*>(to));
  return p != MAP_FAILED;
}

// An aligned PROT_NONE range of `size` bytes owned by nobody else; 0 on failure.
uint64_t ReserveAligned(uint64_t size) {
  void* p = mmap(nullptr, size + kParkAlignment, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return 0;
  const uint64_t raw = reinterpret_cast<uint64_t>(p);
  const uint64_t aligned = (raw + kParkAlignment - 1) / kParkAlignment * kParkAlignment;
  if (aligned > raw) munmap(p, aligned - raw);
  const uint64_t tail = raw + kParkAlignment - aligned;
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
  return aligned;
}

}  // namespace

bool Physical::Park(uint64_t addr, int prot) {
  memvirt::sync::MutexLock lock(&park_mu_);
  if (parked_) return false;
  if (home_ == 0 && (home_ = ReserveAligned(size_)) == 0) return false;
  if (!MoveMapping(addr, home_, size_)) return false;
  parked_ = true;
  parked_prot_ = prot;
  return true;
}

bool Physical::Unpark(uint64_t addr, int prot) {
  memvirt::sync::MutexLock lock(&park_mu_);
  if (!parked_ || !MoveMapping(home_, addr, size_)) return false;
  parked_ = false;  // home_ keeps an empty mapping of the memfd until the next Park
  // A moved mapping keeps its protection; changing it costs the faults parking saves, but is
  // still correct. If it fails, the caller's plain mmap replaces the moved mapping.
  return prot == parked_prot_ || mprotect(reinterpret_cast<void*>(addr), size_, prot) == 0;
}

bool Physical::parked() {
  memvirt::sync::MutexLock lock(&park_mu_);
  return parked_;
}

std::shared_ptr<Physical> Physical::Import(int fd, uint64_t granularity) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
      static_cast<uint64_t>(st.st_size) % granularity != 0) {
    return nullptr;
  }
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (!LocationFromFd(fd, &prop.location)) {
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
    prop.location.id = 0;
  }
  const int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return nullptr;
  return std::shared_ptr<Physical>(
      new Physical(dup_fd, static_cast<uint64_t>(st.st_size), prop, nullptr));
}

std::shared_ptr<Physical> Physical::Create(uint64_t size, const CUmemAllocationProp& prop,
                                           CapacityAccount* charged_to) {
  const std::string name = std::string(kNamePrefix) +
                           std::to_string(static_cast<int>(prop.location.type)) + ":" +
                           std::to_string(prop.location.id);
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  // Physical memory is committed when created (Note [committed at allocation]).
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 || !AllocateFilePages(fd, 0, size)) {
    close(fd);
    return nullptr;
  }
  return std::shared_ptr<Physical>(new Physical(fd, size, prop, charged_to));
}

Physical::Physical(int fd, uint64_t size, const CUmemAllocationProp& prop,
                   CapacityAccount* charged_to)
    : fd_(fd), size_(size), prop_(prop), charged_to_(charged_to), id_(NextAllocationId()) {}

Physical::~Physical() {
  if (home_ != 0) munmap(reinterpret_cast<void*>(home_), size_);
  close(fd_);
  if (charged_to_ != nullptr) charged_to_->Release(size_);
}

}  // namespace memsim
