// Capacity of one simulated device shared by every process that sets the same MEMSIM_NODE.
//
// The accounting lives in a POSIX shared-memory segment /dev/shm/memsim-<node> that holds one
// record per device ordinal, each protected by a process-shared robust mutex. Usage is kept
// per pid so that the bytes of a process that died (even by SIGKILL) are reclaimed: dead pids
// are reaped when a charge does not fit and whenever Used() is read.
//
// Note [first creator wins]: the capacity of a device is fixed by the first process that
// creates its record; later processes adopt it even if their MEMSIM_DEVICE_MEMORY differs,
// so all sharers agree on one number.
//
// Thread safety: thread-safe and process-safe.
#ifndef MEMSIM_SRC_NODE_CAPACITY_H_
#define MEMSIM_SRC_NODE_CAPACITY_H_

#include <memory>
#include <string>

#include "capacity.h"

namespace memsim {

struct NodeSegment;  // layout in node_capacity.cc

class NodeCapacity final : public CapacityAccount {
 public:
  // Opens (creating if needed) the node segment and the record of `ordinal`.
  // Returns nullptr if the segment cannot be opened or mapped.
  static std::unique_ptr<NodeCapacity> Open(const std::string& node, int ordinal,
                                            uint64_t capacity);
  ~NodeCapacity() override;

  bool TryCharge(uint64_t bytes) override;
  void Release(uint64_t bytes) override;
  uint64_t Used() override;
  uint64_t capacity() const override { return capacity_; }

 private:
  NodeCapacity(NodeSegment* segment, int ordinal, uint64_t capacity);

  NodeSegment* segment_;  // mapped for the life of the process
  int ordinal_;
  uint64_t capacity_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_NODE_CAPACITY_H_
