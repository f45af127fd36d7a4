#include "physical.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "capacity.h"

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

}  // namespace

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
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return nullptr;
  }
  return std::shared_ptr<Physical>(new Physical(fd, size, prop, charged_to));
}

Physical::Physical(int fd, uint64_t size, const CUmemAllocationProp& prop,
                   CapacityAccount* charged_to)
    : fd_(fd), size_(size), prop_(prop), charged_to_(charged_to), id_(NextAllocationId()) {}

Physical::~Physical() {
  close(fd_);
  if (charged_to_ != nullptr) charged_to_->Release(size_);
}

}  // namespace memsim
