// TouchSet: the chunks one operation uses (a kernel launch, a copy, a graph
// launch, the backing of a new block), gathered from what the operation
// names before it is made resident (Note [touch set]).
//
// Note [touch set]
//   Each operation starts a new set (Begin): a new operation id and empty
//   lists. A chunk it names is either
//   * touched: made resident before the operation (paged in, backed) and
//     given its use; or
//   * reached: left where it is, mapped (on the device or through its host
//     mapping), and given its use (Note [segment windows]).
//   Both kinds get the operation's id in ChunkEntry::stamp, which is the
//   chunk's one recency fact: equal to op() means "used by the operation
//   being prepared" (counted once here, never a victim for it, never
//   demoted during it); smaller ids order chunks by their last use (the
//   spill tier demotes the least recently used host chunks first, Note
//   [demotion queue] in spill_manager.h). Nothing else writes a stamp.
//   Touching a chunk whose page-out copy is in flight cancels that page-out:
//   it is used again before its copy finished, and its device copy stays
//   authoritative (Note [pipelined page-out] in shim_core.h).
//   The lists keep their capacity between operations: the launch path
//   allocates nothing once they have grown to the largest operation's size.
//
// Owns: the current operation id and the touched, reached and segment-hit
// lists. Not owned, given at construction and outliving the set: the chunk
// table (stamp written; owner_first, owner_count, kind, app_mapped,
// residence, unmapped and evicting read) and the page-out pipeline (null
// where none exists, as in unit tests).
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex (its member is guarded by it).
#ifndef MEMVIRT_SHIM_CORE_TOUCH_SET_H_
#define MEMVIRT_SHIM_CORE_TOUCH_SET_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "shim/core/chunk_table.h"
#include "shim/core/mem_range.h"
#include "shim/core/param_layout.h"

namespace memvirt::shim {

class PageOutPipeline;

class TouchSet {
 public:
  // REQUIRES: `table` non-null.
  TouchSet(ChunkTable* table, PageOutPipeline* page_out) : table_(table), page_out_(page_out) {}
  TouchSet(const TouchSet&) = delete;
  TouchSet& operator=(const TouchSet&) = delete;

  // Starts a new operation: a new id (no chunk is in the set any more) and
  // empty lists. Work that belongs to no operation (a budget change, a
  // demotion asked by the daemon) calls it too, so that no chunk is
  // protected.
  void Begin() {
    ++op_;
    Clear();
  }
  // Empties the lists and keeps the id: the chunks touched so far stay
  // protected for the rest of the operation.
  void Clear() {
    touched_.clear();
    reached_.clear();
    segment_hits_.clear();
  }
  // The current operation's id.
  uint64_t op() const { return op_; }
  // True if the current operation touched or reached `e`.
  bool Contains(const ChunkEntry& e) const { return e.stamp == op_; }

  // Touches `chunk` unless the operation already has it.
  void Chunk(uint32_t chunk);
  // Touches every chunk of the block whose first chunk is `first`.
  void Block(uint32_t first);
  // Touches the block that the word `word` points into, if any.
  void Word(uint64_t word);
  // Every 8-byte word of `data` as an argument word (an `extra` buffer, the
  // pointer words of a graph).
  void Bytes(const void* data, size_t bytes);
  // The argument scan of a launch (Note [scan block range]): each word of
  // `params` per `layout`. Words into application VMM blocks are recorded as
  // segment hits, for Segments().
  void Args(const ParamLayout& layout, void** params);
  // Touches every owned chunk (a live block's) that `range` overlaps.
  void Range(const MemRange& range);
  // Note [segment windows]: touches `window` chunks (at least one, within the
  // block) from each segment hit and reaches the rest of those blocks; then
  // forgets the hits.
  void Segments(uint32_t window);

  // The touched chunks, in the order they were touched.
  const std::vector<uint32_t>& touched() const { return touched_; }
  // The reached chunks.
  const std::vector<uint32_t>& reached() const { return reached_; }
  bool has_segment_hits() const { return !segment_hits_.empty(); }

 private:
  // Marks `e` as the operation's and cancels its page-out; false if the
  // operation already has it.
  bool Take(uint32_t chunk, ChunkEntry* e);

  ChunkTable* const table_;
  PageOutPipeline* const page_out_;
  uint64_t op_ = 0;
  std::vector<uint32_t> touched_;
  std::vector<uint32_t> reached_;
  // Argument words into application VMM blocks: (block's first chunk, the
  // word's chunk), in argument order.
  std::vector<std::pair<uint32_t, uint32_t>> segment_hits_;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_TOUCH_SET_H_
