#include "physical.h"

#include <sys/mman.h>
#include <unistd.h>

#include "capacity.h"

namespace memsim {

uint64_t NextAllocationId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::shared_ptr<Physical> Physical::Create(uint64_t size, const CUmemAllocationProp& prop,
                                           CapacityAccount* charged_to) {
  int fd = memfd_create("memsim-physical", MFD_CLOEXEC);
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
