#include "populate.h"

#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>

namespace memsim {

namespace {

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

constexpr uint64_t kTouchStride = 4096;

}  // namespace

void PopulateRange(uint64_t addr, uint64_t size, bool write) {
  if (size == 0) return;
  void* p = reinterpret_cast<void*>(addr);
  if (madvise(p, size, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0) return;
  if (errno != EINVAL) return;  // e.g. ENOMEM: leave the rest to first touch
  // A kernel without MADV_POPULATE_*: touch one byte per page.
  auto* bytes = static_cast<volatile unsigned char*>(p);
  for (uint64_t off = 0; off < size; off += kTouchStride) {
    if (write) {
      bytes[off] = bytes[off];
    } else {
      (void)bytes[off];
    }
  }
}

bool AllocateFilePages(int fd, uint64_t offset, uint64_t size) {
  return size == 0 || fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(size)) == 0;
}

}  // namespace memsim
