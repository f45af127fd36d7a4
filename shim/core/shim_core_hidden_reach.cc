// Memory a kernel reaches without the shim seeing its address: pointer
// arrays in device memory, addresses inside structure parameters, tensor
// maps. Such memory must never fault and never be remapped under the kernel.
//
// Note [backed from allocation]
//   Every chunk of a block is backed when the block is allocated, as a first
//   use would back it: with a device chunk (evicting an idle chunk of another
//   block if the budget is full), or, when no device chunk can be had (the
//   block is larger than what can be evicted), with a host slot mapped at the
//   chunk's address (Note [host mapping]). So a kernel that reaches a block
//   the shim never saw it use finds memory mapped there: the device's, or
//   host memory over the interconnect. The eviction a first use would have
//   caused happens at allocation instead (the same copies, earlier). A chunk
//   stays unbacked only if that fails (no host slot either, or a driver
//   error); a launch with hidden reach then backs it first (below).
//
// Note [hidden reach]
//   A decoded launch may still reach memory through an address the argument
//   scan does not see. The shim treats a launch as not fully decoded when
//   * its arguments came in an `extra` buffer (their types are unknown), or
//   * it has a parameter of more than 8 bytes (a structure, an array, a
//     CUtensorMap) none of whose aligned words is the address of a live
//     block: such a parameter may hold an address encoded or unaligned (a
//     tensor map's global address); structures whose addresses are plain
//     aligned words (PyTorch's TensorIterator arrays) are decoded
//   (reach kUnknown: any block), or when
//   * it touches a chunk that holds addresses of live blocks (a pointer
//     array), or any module variable may (reach kAddresses: the blocks
//     those addresses name, the hidden targets).
//   Where addresses come from, and what is marked:
//   * every host-to-device copy, of any size, 1D, 2D or 3D (the rows of the
//     host side), is scanned word by word once the driver accepted it (OnHostWrite,
//     OnHostWriteRows): the chunks written get holds_addresses, the blocks
//     named get hidden_target;
//   * such a copy into device memory outside the reservation (a module's
//     __device__ variable through cuModuleGetGlobal, memory the shim passed
//     through) sets external_addresses_: any kernel may read it, so from then
//     on every launch has reach kAddresses;
//   * a device-to-device copy from a chunk that holds addresses marks its
//     destination (outside the reservation: external_addresses_);
//   * a launch with reach kAddresses may copy or compute addresses from
//     what it reads into anything it writes: the chunks its arguments name
//     get holds_addresses (a pointer array built on the device from another
//     one is recognized).
//   A hidden target is never demoted to the spill tier (SpillManager):
//   every chunk such a kernel may reach keeps a mapping, the device's or a
//   host slot's. Blocks that were in the spill tier when they became targets
//   are brought back by the next launch with hidden reach, with its own
//   chunks (spilled_targets_). A launch with reach kUnknown may reach any
//   block, so it backs everything first (OpaqueLocked) if some owned chunk
//   has nothing mapped (unbacked, spilled, or a failed remap); so does any
//   launch with hidden reach when a chunk is unbacked or unmapped.
//   Such a launch is made resident as decoded, after every page-out in
//   flight has finished (none of them copies a chunk the kernel may write:
//   Note [fenced page-outs]), and is then a fence: its (stream, seq) counts as a use of every chunk
//   until it completes, as an opaque launch does, so no chunk is chosen for
//   eviction, copied out or remapped while it runs (Note [chunk uses]). Graph
//   launches are treated the same way (BeforeGraphLaunch).
//   Not recognized: pointer arrays that a kernel builds from addresses it
//   was given as plain arguments (but see Note [hidden reach everywhere]),
//   and addresses hidden in a structure that also holds a plain one. Every
//   block is backed when such a kernel starts (Note [backed from
//   allocation]), but a chunk it reaches may be evicted while it runs, and a
//   driver's cuMemUnmap does not wait for it (Note [unmap is immediate] in
//   sim/src/api_vmm.cc): it can fault, and a write through such an address
//   to a chunk whose page-out copy runs concurrently can be lost
//   (docs/shim.md, "Known limits").
//
// Note [fenced page-outs]
//   The page-outs in flight before a launch with hidden reach are finished
//   first, their copies waited for without the core lock (Note [waits outside
//   the lock] in shim_core.h). Making the launch's own chunks resident may
//   evict again; those page-outs must not be mid-move when the kernel runs
//   either, yet waiting for their copies then would be a wait under the lock
//   (the launch's sequence number is issued). So: such a launch starts no
//   look-ahead page-out (Note [pipelined page-out]: it would have to wait
//   for the copies it just enqueued), and any page-out still in flight when
//   it is made resident (an eviction whose wait was deferred while the
//   launch found room another way) is finished if its copies completed and
//   cancelled otherwise: its chunks stay on the device, their copies
//   authoritative, and the slots are released when the copies are done.
//
// Note [hidden reach everywhere]
//   With MEMSHIM_HIDDEN_REACH=all the shim assumes that any kernel may store
//   the addresses it is given anywhere it writes, and that any kernel may
//   follow addresses it finds in memory. A kernel can only know an address
//   it was given (a launch argument: the block becomes a hidden target now),
//   or one it reads from memory, where it was put by the host (scanned:
//   already a target) or by earlier device work, which got it the same way.
//   So every block whose address any kernel could know is a hidden target:
//   never demoted to the spill tier, and brought back from it by the launch
//   that first names it. Every launch has reach kAddresses (or kUnknown): it
//   is a fence. The spill tier then holds only blocks no kernel has been
//   given yet, and eviction waits for each running kernel: the price of
//   programs that build pointer arrays on the device from plain arguments.
#include <algorithm>
#include <cstring>
#include <utility>

#include "shim/core/log.h"
#include "shim/core/shim_core.h"

namespace memvirt::shim {
namespace {}  // namespace

void ShimCore::BackAtAllocation(uint32_t first, uint32_t count) {
  if (unbacked_owned_ == 0) return;  // warm chunks, as a re-allocated block's: nothing to back
  touch_->Begin();
  // A repeat after a deferred wait (Note [waits outside the lock]): the
  // chunks backed before it are not victims for the rest either.
  if (call_.repeating) {
    for (uint32_t c = first; c < first + count; ++c) touch_->Chunk(c);
  }
  for (uint32_t c = first; c < first + count; ++c) {
    if (table_[c].residence != Residence::kUnbacked) continue;
    touch_->Chunk(c);  // not a victim for the chunks backed after it
    // A failure leaves it unbacked: backed at its first decoded use, or
    // before a launch with hidden reach (BackAllOwned). A deferred wait
    // ends the attempt; the repeat backs the rest.
    if (residency_->PageIn(c, /*may_evict=*/true) != CUDA_SUCCESS) {
      if (WaitsDeferred()) break;
      continue;
    }
    if (table_[c].residence == Residence::kHost) ++stats_.backed_on_host_at_allocation;
  }
  touch_->Clear();
}

void ShimCore::MarkTargetBlock(uint32_t chunk) {
  const uint32_t first = table_[chunk].owner_first;
  ChunkEntry& head = table_[first];
  if (head.hidden_target) return;  // the whole block is marked at once
  const uint32_t count = head.kind == ChunkKind::kLarge ? head.owner_count : 1;
  for (uint32_t c = first; c < first + count; ++c) {
    ChunkEntry& e = table_[c];
    e.hidden_target = true;
    if (e.residence == Residence::kNvme) spilled_targets_.push_back(c);
  }
}

bool ShimCore::MarkTargetsIn(const char* data, uint64_t bytes) {
  bool found = false;
  uint32_t last = kNoIndex;  // owner of the previous hit (arrays of one block's rows)
  for (uint64_t off = 0; off + sizeof(uint64_t) <= bytes; off += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, data + off, sizeof(word));
    if (!table_.Contains(word)) continue;
    const uint32_t owner = table_[table_.IndexOf(word)].owner_first;
    if (owner == kNoIndex || owner == last) continue;
    last = owner;
    found = true;
    MarkTargetBlock(owner);
  }
  return found;
}

void ShimCore::MarkAddressChunks(CUdeviceptr dst, uint64_t bytes) {
  if (bytes == 0 || !Owns(dst)) return;
  const uint64_t end = std::min<uint64_t>(dst - base_ + bytes, table_.bytes());
  for (uint32_t c = table_.IndexOf(dst); c <= static_cast<uint32_t>((end - 1) >> kChunkShift);
       ++c) {
    ChunkEntry& e = table_[c];
    if (!OwnedKind(e.kind) || e.holds_addresses) continue;
    e.holds_addresses = true;
    ++address_chunks_;
  }
}

bool ShimCore::RangeHoldsAddresses(CUdeviceptr ptr, uint64_t bytes) {
  if (address_chunks_ == 0 || bytes == 0 || !Owns(ptr)) return false;
  const uint64_t end = std::min<uint64_t>(ptr - base_ + bytes, table_.bytes());
  for (uint32_t c = table_.IndexOf(ptr); c <= static_cast<uint32_t>((end - 1) >> kChunkShift);
       ++c) {
    if (table_[c].holds_addresses) return true;
  }
  return false;
}

void ShimCore::OnHostWrite(CUdeviceptr dst, const void* src, uint64_t bytes) {
  OnHostWriteRows(dst, bytes, src, bytes, bytes, 1);
}

void ShimCore::OnHostWriteRows(CUdeviceptr dst, uint64_t dst_pitch, const void* src,
                               uint64_t src_pitch, uint64_t width, uint64_t rows) {
  if (src == nullptr || width < sizeof(uint64_t) || rows == 0) return;
  const char* p = static_cast<const char*>(src);
  // First without the lock (the reservation is fixed): most copies hold no
  // word in it, and a large one is not scanned while launches wait.
  uint64_t first = rows;
  for (uint64_t r = 0; r < rows && first == rows; ++r) {
    const char* row = p + r * src_pitch;
    for (uint64_t off = 0; off + sizeof(uint64_t) <= width; off += sizeof(uint64_t)) {
      uint64_t word;
      std::memcpy(&word, row + off, sizeof(word));
      if (Owns(word)) {
        first = r;
        break;
      }
    }
  }
  if (first == rows) return;
  MutexLock lock(&mu_);
  for (uint64_t r = first; r < rows; ++r) {
    if (!MarkTargetsIn(p + r * src_pitch, width)) continue;
    if (Owns(dst)) {
      MarkAddressChunks(dst + r * dst_pitch, width);
    } else if (!external_addresses_) {
      external_addresses_ = true;
      MEMSHIM_LOG(kInfo,
                  "addresses of blocks written to device memory outside the reservation (a "
                  "module variable?): every launch is fenced from now on");
    }
  }
}

void ShimCore::OnDeviceCopy(CUdeviceptr dst, uint64_t dst_bytes, CUdeviceptr src,
                            uint64_t src_bytes) {
  MutexLock lock(&mu_);
  if (!RangeHoldsAddresses(src, src_bytes)) return;
  if (Owns(dst)) {
    MarkAddressChunks(dst, dst_bytes);
  } else if (dst_bytes != 0) {
    external_addresses_ = true;
  }
}

ShimCore::Reach ShimCore::TouchedReach() {
  if (hidden_reach_all_) {
    // Note [hidden reach everywhere]: what it is given, it may store.
    for (const std::vector<uint32_t>* chunks : {&touch_->touched(), &touch_->reached()}) {
      for (uint32_t c : *chunks) {
        if (table_[c].owner_first != kNoIndex) MarkTargetBlock(c);
      }
    }
    return Reach::kAddresses;
  }
  if (external_addresses_) return Reach::kAddresses;
  if (address_chunks_ > 0) {
    for (const std::vector<uint32_t>* chunks : {&touch_->touched(), &touch_->reached()}) {
      for (uint32_t c : *chunks) {
        if (table_[c].holds_addresses) return Reach::kAddresses;
      }
    }
  }
  return Reach::kNamed;
}

ShimCore::Reach ShimCore::HiddenReachSlow(const ParamLayout* layout, void** params,
                                          bool extra_buffer) {
  const Reach touched = TouchedReach();
  if (extra_buffer || (layout != nullptr && HidesAnAddress(*layout, params))) {
    return Reach::kUnknown;
  }
  return touched;
}

bool ShimCore::HidesAnAddress(const ParamLayout& layout, void* const* params) {
  if (!layout.aggregates) return false;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const uint32_t size = layout.params[i].second;
    if (size <= sizeof(uint64_t)) continue;
    const char* p = static_cast<const char*>(params[i]);
    if (p == nullptr) return true;
    bool plain_address = false;
    for (uint32_t off = 0; off + sizeof(uint64_t) <= size && !plain_address;
         off += sizeof(uint64_t)) {
      uint64_t word;
      std::memcpy(&word, p + off, sizeof(word));
      plain_address = table_.Contains(word) && table_[table_.IndexOf(word)].owner_first != kNoIndex;
    }
    if (!plain_address) return true;
  }
  return false;
}

CUresult ShimCore::FencedLocked(uint32_t stream, bool capturing, Reach reach, Ticket* ticket) {
  if (!call_.repeating) ++stats_.fenced_launches;
  if (unbacked_owned_ > 0 || table_.unmapped_count() > 0 ||
      (reach == Reach::kUnknown && SpilledChunks() > 0)) {
    return OpaqueLocked(stream, capturing, ticket);  // something it may reach has nothing mapped
  }
  // Its arguments' chunks, then the hidden targets still in the spill tier.
  const size_t named = touch_->touched().size();
  for (uint32_t c : spilled_targets_) {
    const ChunkEntry& e = table_[c];
    if (e.residence == Residence::kNvme && e.hidden_target) touch_->Chunk(c);
  }
  if (evictor_->DeferPageOutWait()) return CUDA_ERROR_NOT_READY;  // Note [waits outside the lock]
  evictor_->FinishPageOut();
  // Note [fenced page-outs]
  const bool lookahead = evictor_->set_lookahead_allowed(false);
  const CUresult r = MakeResident(stream, /*host_wait=*/false, capturing, ticket);
  evictor_->set_lookahead_allowed(lookahead);
  if (r != CUDA_SUCCESS) return r;  // spilled_targets_ kept: the next one tries again
  spilled_targets_.clear();
  if (reach == Reach::kAddresses) {
    // It may copy what it reads into what it writes (Note [hidden reach]).
    auto mark = [this](uint32_t c) MEMSHIM_REQUIRES(mu_) {
      ChunkEntry& e = table_[c];
      if (e.kind == ChunkKind::kFree || e.holds_addresses) return;
      e.holds_addresses = true;
      ++address_chunks_;
    };
    for (size_t i = 0; i < named; ++i) mark(touch_->touched()[i]);
    for (uint32_t c : touch_->reached()) mark(c);
  }
  if (capturing) return r;
  evictor_->SettleBeforeFence();  // page-outs MakeResident started for room
  uses_->AddFence(stream, tracker_->issued(stream));
  return CUDA_SUCCESS;
}

// Note [unsafe calls during capture]: see relaxed_capture_mode.h.
CUresult ShimCore::CheckUnsafeCall() {
  if (probe_event_ == nullptr) return CUDA_SUCCESS;
  // In the calling thread's own mode (no RelaxedCaptureMode here): the
  // driver refuses the query exactly when it would refuse cuMemAlloc.
  const CUresult r = driver_->cuEventQuery(probe_event_);
  return r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ? r : CUDA_SUCCESS;
}

}  // namespace memvirt::shim
