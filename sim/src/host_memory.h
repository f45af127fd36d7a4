// Page-locked host memory known to the driver (cuMemHostAlloc / cuMemHostRegister).
//
// On the sim every host address is directly usable by kernels and copy engines, so this table
// only answers pointer-attribute queries, cuMemHostGetDevicePointer and frees.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_HOST_MEMORY_H_
#define MEMSIM_SRC_HOST_MEMORY_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace memsim {

struct HostRange {
  uint64_t base = 0;
  uint64_t size = 0;
  unsigned flags = 0;
  void* owner = nullptr;    // context
  bool registered = false;  // cuMemHostRegister (true) or allocated by the driver (false)
  uint64_t buffer_id = 0;
};

class HostMemoryTable {
 public:
  // False if it overlaps an existing range.
  bool Add(const HostRange& range);
  // Removes the range starting at base of the given kind; nullopt if there is none.
  std::optional<HostRange> Remove(uint64_t base, bool registered);
  std::optional<HostRange> Lookup(uint64_t addr);
  std::vector<HostRange> OwnedBy(const void* owner);

 private:
  std::mutex mu_;
  std::map<uint64_t, HostRange> ranges_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_HOST_MEMORY_H_
