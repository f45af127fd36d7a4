// BlockLayout: how a trace's tensors map onto paging blocks.
//
// Note [chunk granularity]
//   A tensor of at least one chunk is split into ceil(bytes / chunk) blocks;
//   each occupies a whole chunk of device memory and transfers only the bytes
//   it holds (the last one may be partial). A tensor smaller than a chunk is
//   one block occupying its size rounded up to `small_granularity`: the shim
//   packs small allocations into shared chunks, so charging each a whole
//   chunk would inflate them (ResNet152/1280 has 1769 such tensors, 0.18 GB
//   in all but 3.7 GB if each took 2 MiB).
//
// Thread safety: plain data.

#ifndef MEMVIRT_POLICY_BLOCK_LAYOUT_H_
#define MEMVIRT_POLICY_BLOCK_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "memvirt/trace/memtrace.h"

namespace memvirt::policy {

struct BlockSpec {
  uint32_t tensor = 0;        // index into Trace::tensors
  uint64_t device_bytes = 0;  // device memory the block occupies
  uint64_t data_bytes = 0;    // bytes a transfer of the block moves
};

struct BlockLayout {
  std::vector<BlockSpec> blocks;
  // For tensor index i: blocks [first[i], first[i] + count[i]).
  std::vector<uint64_t> first;
  std::vector<uint32_t> count;
};

// REQUIRES: chunk_bytes > 0, small_granularity > 0.
BlockLayout LayoutBlocks(const trace::Trace& trace, uint64_t chunk_bytes,
                         uint64_t small_granularity);

}  // namespace memvirt::policy

#endif  // MEMVIRT_POLICY_BLOCK_LAYOUT_H_
