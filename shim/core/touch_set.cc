#include "shim/core/touch_set.h"

#include <algorithm>
#include <cstring>

#include "shim/core/page_out_pipeline.h"

namespace memvirt::shim {

bool TouchSet::Take(uint32_t chunk, ChunkEntry* e) {
  if (e->stamp == op_) return false;
  e->stamp = op_;
  if (e->evicting && page_out_ != nullptr) page_out_->Cancel(chunk);  // Note [touch set]
  return true;
}

void TouchSet::Chunk(uint32_t chunk) {
  if (Take(chunk, &(*table_)[chunk])) touched_.push_back(chunk);
}

void TouchSet::Block(uint32_t first) {
  const uint32_t count = (*table_)[first].owner_count;
  for (uint32_t c = first; c < first + count; ++c) Chunk(c);
}

void TouchSet::Word(uint64_t word) {
  if (!table_->Contains(word)) return;  // one subtract-and-compare
  const uint32_t first = (*table_)[table_->IndexOf(word)].owner_first;
  if (first == kNoIndex) return;              // not part of a live block
  if ((*table_)[first].stamp == op_) return;  // whole block already touched
  Block(first);
}

void TouchSet::Bytes(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  for (size_t off = 0; off + sizeof(uint64_t) <= bytes; off += sizeof(uint64_t)) {
    uint64_t word;
    memcpy(&word, p + off, sizeof(word));
    Word(word);
  }
}

// The hot loop of every launch (Note [residency before launch] in
// shim_core.h): per 8-byte argument word one subtract-and-compare against the
// reservation, then one chunk-table load. Words into the block of the
// previous hit (the common case of several pointers into one tensor or slab)
// are recognized by one more subtract-and-compare against that block's
// address range, before the reservation check and without touching the table
// (Note [scan block range]); otherwise the operation id in the block's first
// entry deduplicates. Locals keep the compiler from reloading members through
// the aliasing `char` reads.
//
// Note [scan block range]
//   A block's chunks are exactly those whose owner_first is the block's first
//   chunk (kLarge: owner_count chunk-aligned chunks; kSlab: the chunk itself),
//   so a word in [base + first * chunk, base + (first + owner_count) * chunk)
//   needs no lookup once that block was touched by this operation. The range
//   starts empty (length 0: nothing matches).
void TouchSet::Args(const ParamLayout& layout, void** params) {
  const uint64_t base = table_->base(), limit = table_->bytes();
  ChunkEntry* const entries = table_->data();
  const uint64_t op = op_;
  // The last block hit: its start as an absolute address and as an offset
  // into the reservation (block_start == base + block_offset always), and
  // its length (0 before the first hit: nothing matches).
  uint64_t block_start = base, block_offset = 0, block_bytes = 0;
  auto scan_word = [&](const char* p) {
    uint64_t word;
    memcpy(&word, p, sizeof(word));
    const uint64_t in_block = word - block_start;
    if (in_block < block_bytes) return;  // same block as the last hit
    // word - base (modulo 2^64).
    const uint64_t offset = in_block + block_offset;
    if (offset >= limit) return;
    const uint32_t first = entries[offset >> kChunkShift].owner_first;
    if (first == kNoIndex) return;
    if (entries[first].app_mapped) {  // Note [segment windows]: every word counts
      segment_hits_.emplace_back(first, static_cast<uint32_t>(offset >> kChunkShift));
      return;
    }
    block_offset = static_cast<uint64_t>(first) << kChunkShift;
    block_start = base + block_offset;
    block_bytes = static_cast<uint64_t>(entries[first].owner_count) << kChunkShift;
    if (entries[first].stamp == op) return;
    Block(first);
  };
  if (layout.one_word_each) {  // the common case: pointers and 8-byte scalars
    const size_t n = layout.params.size();
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {  // unrolled: the loop control was a quarter of the work
      void* const p0 = params[i];
      void* const p1 = params[i + 1];
      void* const p2 = params[i + 2];
      void* const p3 = params[i + 3];
      if (p0 != nullptr) scan_word(static_cast<const char*>(p0));
      if (p1 != nullptr) scan_word(static_cast<const char*>(p1));
      if (p2 != nullptr) scan_word(static_cast<const char*>(p2));
      if (p3 != nullptr) scan_word(static_cast<const char*>(p3));
    }
    for (; i < n; ++i) {
      if (params[i] != nullptr) scan_word(static_cast<const char*>(params[i]));
    }
    return;
  }
  for (const ArgWord& w : layout.words) {
    const char* p = static_cast<const char*>(params[w.param]);
    if (p != nullptr) scan_word(p + w.offset);
  }
}

void TouchSet::Range(const MemRange& range) {
  if (range.bytes == 0 || !table_->Contains(range.ptr)) return;
  const uint64_t end =
      std::min<uint64_t>(range.ptr - table_->base() + range.bytes, table_->bytes());
  const uint32_t first = table_->IndexOf(range.ptr);
  const uint32_t last = static_cast<uint32_t>((end - 1) >> kChunkShift);
  for (uint32_t c = first; c <= last; ++c) {
    if (OwnedKind((*table_)[c].kind)) Chunk(c);
  }
}

// Note [segment windows]
//   A kernel given an address in a cuMemAlloc block is taken to use the
//   block: it is made resident whole. An application VMM block (Note
//   [application VMM] in shim_core_app_vmm.cc) is a whole expandable
//   segment, many tensors that the shim cannot tell apart, often larger than
//   the device budget; making it resident whole for every kernel that names
//   a tensor in it moved the segment in and out at every launch (an 8 GiB
//   PyTorch run at a third of its footprint did not finish in two minutes on
//   an H200). So each argument word into such a block makes resident only a
//   window from the word's chunk (a tensor starts at the address a kernel is
//   given): the caller's window, device_limit /
//   ShimCore::kSegmentWindowDivisor chunks, at least one, within the block.
//   The rest of the block stays where it is but is still reached: every
//   other chunk gets the operation's id (no victim for this operation) and
//   the launch's use (no page-out unmaps it while the kernel may read it:
//   the driver's unmap does not wait), and one that has nothing mapped
//   (spilled, unbacked, a failed remap) is paged in as if touched. A tensor
//   longer than the window is then read partly through its host mapping
//   (Note [host mapping] in shim_core.h): slower, never wrong.
void TouchSet::Segments(uint32_t window) {
  window = std::max<uint32_t>(1, window);
  for (const auto& [first, chunk] : segment_hits_) {
    const uint64_t end = std::min<uint64_t>(first + (*table_)[first].owner_count,
                                            static_cast<uint64_t>(chunk) + window);
    for (uint32_t c = chunk; c < end; ++c) Chunk(c);
  }
  for (size_t i = 0; i < segment_hits_.size(); ++i) {
    const uint32_t first = segment_hits_[i].first;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j) seen = segment_hits_[j].first == first;
    if (seen) continue;
    const uint32_t count = (*table_)[first].owner_count;
    for (uint32_t c = first; c < first + count; ++c) {
      ChunkEntry& e = (*table_)[c];
      if (!Take(c, &e)) continue;
      const bool mapped =
          e.residence == Residence::kDevice || (e.residence == Residence::kHost && !e.unmapped);
      (mapped ? reached_ : touched_).push_back(c);
    }
  }
  segment_hits_.clear();
}

}  // namespace memvirt::shim
