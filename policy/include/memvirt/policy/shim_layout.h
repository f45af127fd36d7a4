// ShimLayout: a trace rewritten as the shim pages it, so that memvirt-sim can
// predict a run under the shim (memvirt-replay --predict-layout shim).
//
// Note [shim layout]
//   memvirt-sim pages tensors (BlockLayout: chunks of large tensors, small
//   tensors alone at 4 KiB granularity, transfers of the bytes they hold,
//   data dead after the last read). The shim pages 2 MiB chunks of its
//   block allocator (shim/core/block_allocator.h), and knows less:
//   - an allocation of at most 1 MiB is rounded up to its size class (256 B
//     steps up to 1 KiB, then four classes per power of two) and carved from
//     a slab chunk that holds objects of that class only; slab chunks are
//     never released, so their data stays live forever, and a slab is paged
//     as a whole with every object in it;
//   - a larger allocation takes whole chunks of its own;
//   - every transfer moves whole chunks (2 MiB), whatever they hold;
//   - a launch's arguments do not say which buffers are read or written, so
//     every access is read-write: every chunk used is dirty, and no data is
//     known dead before its buffer is freed.
//   ShimLayout() returns the trace with exactly that: large tensors rounded
//   up to whole chunks, small tensors replaced by one persistent tensor of
//   one chunk per slab, and every access a read and a write. Small tensors
//   go to slabs by replaying the trace's allocation order (persistent
//   tensors first, then, per kernel, births before it and deaths after it)
//   through the allocator's rules for two iterations (the lowest free object
//   of a class first, Note [repeatable placement] in
//   shim/core/block_allocator.h); the second's placement is used for every
//   iteration (a tensor keeps one slab).
//
// Thread safety: a pure function.

#ifndef MEMVIRT_POLICY_SHIM_LAYOUT_H_
#define MEMVIRT_POLICY_SHIM_LAYOUT_H_

#include <cstdint>

#include "memvirt/trace/memtrace.h"

namespace memvirt::policy {

struct ShimLayoutStats {
  uint64_t slabs = 0;          // slab chunks (one persistent tensor each)
  uint64_t small_tensors = 0;  // tensors packed into them
};

// The allocator's size class of a small allocation, in bytes; 0 if `bytes`
// is above the small limit (1 MiB). REQUIRES: bytes > 0.
uint64_t ShimSizeClassBytes(uint64_t bytes);

// REQUIRES: a valid trace (ReadTrace's checks). `stats` may be null.
trace::Trace ShimLayout(const trace::Trace& trace, ShimLayoutStats* stats = nullptr);

}  // namespace memvirt::policy

#endif  // MEMVIRT_POLICY_SHIM_LAYOUT_H_
