// TransitionParts: the pieces of one ShimCore that a chunk transition
// (page-in, page-out, spill demotion and promotion) works on, handed to the
// classes that carry those transitions out (FillBatch, PageOutPipeline,
// SpillManager, FreedChunks).
//
// Owns nothing: every pointer is the core's, and each piece outlives the
// classes given them. Thread safety: the pieces are guarded by the core's
// mutex; a class given them is used under that mutex only.
#ifndef MEMVIRT_SHIM_CORE_TRANSITION_PARTS_H_
#define MEMVIRT_SHIM_CORE_TRANSITION_PARTS_H_

#include <cuda.h>

#include <cstdint>

#include "shim/core/chunk_table.h"
#include "shim/core/core_stats.h"
#include "shim/core/physical_pool.h"
#include "shim/core/residency_policy.h"
#include "shim/core/stream_tracker.h"
#include "shim/driver/driver.h"

namespace memvirt::shim {

struct TransitionParts {
  const Driver* driver = nullptr;
  ChunkTable* table = nullptr;
  PhysicalPool* pool = nullptr;
  StreamTracker* tracker = nullptr;
  uint32_t copy_index = 0;         // the copy stream's index in `tracker`
  CUstream copy_stream = nullptr;  // the stream the transitions' copies are enqueued on
  ResidencyPolicy* policy = nullptr;
  CoreStats* stats = nullptr;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_TRANSITION_PARTS_H_
