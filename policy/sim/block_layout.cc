#include "memvirt/policy/block_layout.h"

namespace memvirt::policy {

BlockLayout LayoutBlocks(const trace::Trace& trace, uint64_t chunk_bytes,
                         uint64_t small_granularity) {
  BlockLayout layout;
  layout.first.reserve(trace.tensors.size());
  layout.count.reserve(trace.tensors.size());
  for (size_t i = 0; i < trace.tensors.size(); ++i) {
    const uint64_t bytes = trace.tensors[i].bytes;
    layout.first.push_back(layout.blocks.size());
    if (bytes < chunk_bytes) {
      const uint64_t rounded =
          (bytes + small_granularity - 1) / small_granularity * small_granularity;
      layout.blocks.push_back(BlockSpec{static_cast<uint32_t>(i), rounded, bytes});
      layout.count.push_back(1);
      continue;
    }
    const uint64_t n = (bytes + chunk_bytes - 1) / chunk_bytes;
    for (uint64_t c = 0; c < n; ++c) {
      const uint64_t data = c + 1 < n ? chunk_bytes : bytes - c * chunk_bytes;
      layout.blocks.push_back(BlockSpec{static_cast<uint32_t>(i), chunk_bytes, data});
    }
    layout.count.push_back(static_cast<uint32_t>(n));
  }
  return layout;
}

}  // namespace memvirt::policy
