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
//     aligned words (PyTorch's TensorIterator arrays) are decoded, or
//   * it touches a chunk that a host-to-device copy wrote addresses of live
//     blocks into (a pointer array; OnHostWrite scans copies of up to
//     kAddressScanBytes).
//   Such a launch is made resident as decoded, after every page-out in
//   flight has finished (none of them copies a chunk the kernel may write),
//   and is then a fence: its (stream, seq) counts as a use of every chunk
//   until it completes, as an opaque launch does, so no chunk is chosen for
//   eviction, copied out or remapped while it runs (ChunkIdle). If some
//   owned chunk has nothing mapped (unbacked, in the spill tier, or a failed
//   remap), the launch is opaque instead (BackAllOwned maps everything first).
//   Not recognized: pointer arrays written on the device (by a kernel or a
//   device-to-device copy) or by copies larger than kAddressScanBytes,
//   and addresses hidden in a structure that also holds a plain one. Those
//   kernels still never fault (every block is backed, Note [backed from
//   allocation], and the sim's and the driver's cuMemUnmap wait for work
//   enqueued before it), but a write through such an address to a chunk
//   whose page-out copy runs concurrently can be lost (docs/shim.md, "Known
//   limits").
#include <cstring>

#include "shim/core/log.h"
#include "shim/core/shim_core.h"

namespace memvirt::shim {
namespace {

// Host-to-device copies up to this size are scanned for addresses (8192
// words: pointer arrays of batched GEMMs and foreach kernels).
constexpr uint64_t kAddressScanBytes = 64 << 10;

}  // namespace

void ShimCore::BackAtAllocation(uint32_t first, uint32_t count) {
  if (unbacked_owned_ == 0) return;  // warm chunks, as a re-allocated block's: nothing to back
  ++stamp_;
  touched_.clear();
  for (uint32_t c = first; c < first + count; ++c) {
    if (table_[c].residence != Residence::kUnbacked) continue;
    TouchChunk(c);  // not a victim for the chunks backed after it
    // A failure leaves it unbacked: backed at its first decoded use, or
    // before a launch with hidden reach (BackAllOwned).
    if (PageIn(c, /*may_evict=*/true) != CUDA_SUCCESS) continue;
    if (table_[c].residence == Residence::kHost) ++stats_.backed_on_host_at_allocation;
  }
  touched_.clear();
}

CUresult ShimCore::PlaceOnHost(uint32_t chunk) {
  ChunkEntry& e = table_[chunk];
  uint32_t slot;
  if (AcquireHost(&slot) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  if (const CUresult r = pool_->MapAt(table_.AddressOf(chunk), pool_->host_handle(slot));
      r != CUDA_SUCCESS) {
    pool_->ReleaseHost(slot);
    return r;
  }
  e.residence = Residence::kHost;
  e.phys = slot;
  if (OwnedKind(e.kind)) --unbacked_owned_;
  return CUDA_SUCCESS;
}

void ShimCore::OnHostWrite(CUdeviceptr dst, const void* src, uint64_t bytes) {
  if (src == nullptr || bytes < sizeof(uint64_t) || bytes > kAddressScanBytes || !Owns(dst)) {
    return;
  }
  const char* p = static_cast<const char*>(src);
  bool addresses = false;
  MutexLock lock(&mu_);
  for (uint64_t off = 0; off + sizeof(uint64_t) <= bytes && !addresses; off += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, p + off, sizeof(word));
    addresses = table_.Contains(word) && table_[table_.IndexOf(word)].owner_first != kNoIndex;
  }
  if (!addresses) return;
  const uint64_t end = std::min<uint64_t>(dst - base_ + bytes, table_.bytes());
  for (uint32_t c = table_.IndexOf(dst); c <= static_cast<uint32_t>((end - 1) >> kChunkShift);
       ++c) {
    ChunkEntry& e = table_[c];
    if (!OwnedKind(e.kind) || e.holds_addresses) continue;
    e.holds_addresses = true;
    ++address_chunks_;
  }
}

bool ShimCore::HiddenReach(const ParamLayout* layout, void** params, bool extra_buffer) {
  if (extra_buffer) return true;
  if (address_chunks_ > 0) {
    for (uint32_t c : touched_) {
      if (table_[c].holds_addresses) return true;
    }
  }
  return layout != nullptr && HidesAnAddress(*layout, params);
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

CUresult ShimCore::FencedLocked(uint32_t stream, bool capturing, Ticket* ticket) {
  ++stats_.fenced_launches;
  if (unbacked_owned_ > 0 || stats_.spilled_chunks > 0 || unmapped_host_ > 0) {
    return OpaqueLocked(stream, capturing, ticket);  // something it may reach has nothing mapped
  }
  FinishPageOut();
  const CUresult r = MakeResident(stream, /*host_wait=*/false, capturing, ticket);
  if (r != CUDA_SUCCESS || capturing) return r;
  FinishPageOut();  // page-outs MakeResident started for room
  AddFence(stream, tracker_->issued(stream));
  return CUDA_SUCCESS;
}

}  // namespace memvirt::shim
