#include "shim/core/chunk_uses.h"

namespace memvirt::shim {

void ChunkUses::DropCompleted(ChunkEntry* e) {
  int k = 0;
  for (int i = 0; i < e->num_uses; ++i) {
    if (!tracker_->IsComplete(e->uses[i].stream, e->uses[i].seq)) e->uses[k++] = e->uses[i];
  }
  e->num_uses = static_cast<uint8_t>(k);
}

void ChunkUses::AddFence(uint32_t stream, uint64_t seq) {
  ++fences_;
  for (StreamUse& u : fences_by_stream_) {
    if (u.stream == stream) {
      u.seq = seq;
      return;
    }
  }
  fences_by_stream_.push_back({stream, seq});
}

void ChunkUses::DropCompletedFencesSlow() {
  size_t k = 0;
  for (size_t i = 0; i < fences_by_stream_.size(); ++i) {
    const StreamUse u = fences_by_stream_[i];
    if (!tracker_->IsComplete(u.stream, u.seq)) fences_by_stream_[k++] = u;
  }
  fences_by_stream_.resize(k);
}

bool ChunkUses::Idle(uint32_t chunk) {
  ChunkEntry& e = (*table_)[chunk];
  if (e.fill_seq != 0 && !tracker_->IsComplete(copy_index_, e.fill_seq)) return false;
  if (e.use_overflow) {
    for (uint32_t s = 0; s < tracker_->num_streams(); ++s) {
      if (!tracker_->IsComplete(s, tracker_->issued(s))) return false;
    }
    e.use_overflow = false;
    e.num_uses = 0;
  }
  for (int i = 0; i < e.num_uses; ++i) {
    if (!tracker_->IsComplete(e.uses[i].stream, e.uses[i].seq)) return false;
  }
  e.num_uses = 0;
  for (const StreamUse& u : fences_by_stream_) {
    if (!tracker_->IsComplete(u.stream, u.seq)) return false;
  }
  return true;
}

CUresult ChunkUses::WaitIdle(uint32_t chunk) {
  ChunkEntry& e = (*table_)[chunk];
  CUresult result = CUDA_SUCCESS;
  auto note = [&result](CUresult r) {
    if (r != CUDA_SUCCESS) result = r;
  };
  if (e.fill_seq != 0) note(tracker_->WaitFor(copy_index_, e.fill_seq));
  if (e.use_overflow) note(tracker_->WaitForAll());
  for (int i = 0; i < e.num_uses; ++i) note(tracker_->WaitFor(e.uses[i].stream, e.uses[i].seq));
  for (const StreamUse& u : fences_by_stream_) note(tracker_->WaitFor(u.stream, u.seq));
  if (result != CUDA_SUCCESS) return result;
  e.use_overflow = false;
  e.num_uses = 0;
  return CUDA_SUCCESS;
}

bool ChunkUses::PendingOnlyOn(uint32_t chunk, uint32_t stream) {
  const ChunkEntry& e = (*table_)[chunk];
  if (e.use_overflow) return false;
  for (int i = 0; i < e.num_uses; ++i) {
    const StreamUse& u = e.uses[i];
    if (u.stream != stream && !tracker_->IsComplete(u.stream, u.seq)) return false;
  }
  for (const StreamUse& u : fences_by_stream_) {
    if (u.stream != stream && !tracker_->IsComplete(u.stream, u.seq)) return false;
  }
  return true;
}

size_t ChunkUses::CollectPending(uint32_t chunk, std::vector<StreamUse>* pending) {
  const size_t before = pending->size();
  auto add = [&](uint32_t stream, uint64_t seq) {
    if (!tracker_->IsComplete(stream, seq)) pending->push_back({stream, seq});
  };
  const ChunkEntry& e = (*table_)[chunk];
  if (e.fill_seq != 0) add(copy_index_, e.fill_seq);
  if (e.use_overflow) {
    for (uint32_t s = 0; s < tracker_->num_streams(); ++s) add(s, tracker_->issued(s));
  }
  for (int i = 0; i < e.num_uses; ++i) add(e.uses[i].stream, e.uses[i].seq);
  for (const StreamUse& u : fences_by_stream_) add(u.stream, u.seq);
  return pending->size() - before;
}

}  // namespace memvirt::shim
