#include "shim/core/lru_policy.h"

namespace memvirt::shim {

LruPolicy::LruPolicy(uint32_t num_chunks, uint32_t prefetch_depth)
    : nodes_(num_chunks), prefetch_depth_(prefetch_depth) {}

void LruPolicy::Unlink(uint32_t chunk) {
  Node& n = nodes_[chunk];
  if (!n.linked) return;
  if (n.prev != kNoIndex)
    nodes_[n.prev].next = n.next;
  else
    head_ = n.next;
  if (n.next != kNoIndex)
    nodes_[n.next].prev = n.prev;
  else
    tail_ = n.prev;
  n.prev = n.next = kNoIndex;
  n.linked = false;
}

void LruPolicy::PushFront(uint32_t chunk) {
  Node& n = nodes_[chunk];
  n.prev = kNoIndex;
  n.next = head_;
  if (head_ != kNoIndex)
    nodes_[head_].prev = chunk;
  else
    tail_ = chunk;
  head_ = chunk;
  n.linked = true;
}

void LruPolicy::OnAlloc(uint32_t chunk) {
  nodes_[chunk].live = true;
  nodes_[chunk].successor = kNoIndex;
}

void LruPolicy::OnFree(uint32_t chunk) {
  nodes_[chunk].live = false;
  nodes_[chunk].successor = kNoIndex;
}

void LruPolicy::OnAccess(uint64_t, const uint32_t* chunks, size_t count) {
  missed_.clear();
  for (size_t i = 0; i < count; ++i) {
    const uint32_t c = chunks[i];
    Node& n = nodes_[c];
    if (n.linked) {
      if (head_ != c) {
        Unlink(c);
        PushFront(c);
      }
    } else {
      missed_.push_back(c);
    }
    if (last_touched_ != kNoIndex && last_touched_ != c) nodes_[last_touched_].successor = c;
    last_touched_ = c;
  }
}

void LruPolicy::OnResident(uint32_t chunk) {
  Unlink(chunk);
  PushFront(chunk);
}

void LruPolicy::OnEvicted(uint32_t chunk) { Unlink(chunk); }

bool LruPolicy::PickVictim(Eligible eligible, void* context, uint32_t* victim) {
  for (uint32_t c = tail_; c != kNoIndex; c = nodes_[c].prev) {
    if (eligible(context, c)) {
      *victim = c;
      return true;
    }
  }
  return false;
}

std::vector<uint32_t> LruPolicy::PrefetchCandidates(uint64_t byte_limit) {
  std::vector<uint32_t> out;
  PrefetchCandidatesInto(byte_limit, &out);
  return out;
}

void LruPolicy::PrefetchCandidatesInto(uint64_t byte_limit, std::vector<uint32_t>* out) {
  out->clear();
  uint64_t budget = byte_limit / kChunkBytes;
  if (missed_.empty() || budget == 0) return;
  uint32_t c = missed_.back();
  for (uint32_t d = 0; d < prefetch_depth_ && out->size() < budget; ++d) {
    c = nodes_[c].successor;
    if (c == kNoIndex || !nodes_[c].live) break;
    if (!nodes_[c].linked) out->push_back(c);
  }
  missed_.clear();
}

std::vector<uint32_t> LruPolicy::TEST_Order() const {
  std::vector<uint32_t> out;
  for (uint32_t c = head_; c != kNoIndex; c = nodes_[c].next) out.push_back(c);
  return out;
}

}  // namespace memvirt::shim
