#include "host_memory.h"

#include <iterator>

namespace memsim {

bool HostMemoryTable::Add(const HostRange& range) {
  std::lock_guard<std::mutex> lock(mu_);
  auto next = ranges_.lower_bound(range.base);
  if (next != ranges_.end() && next->first < range.base + range.size) return false;
  if (next != ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > range.base) return false;
  }
  ranges_.emplace(range.base, range);
  return true;
}

std::optional<HostRange> HostMemoryTable::Remove(uint64_t base, bool registered) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.find(base);
  if (it == ranges_.end() || it->second.registered != registered) return std::nullopt;
  HostRange r = it->second;
  ranges_.erase(it);
  return r;
}

std::optional<HostRange> HostMemoryTable::Lookup(uint64_t addr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return std::nullopt;
  --it;
  if (addr >= it->first + it->second.size) return std::nullopt;
  return it->second;
}

std::vector<HostRange> HostMemoryTable::OwnedBy(const void* owner) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<HostRange> out;
  for (auto& [base, r] : ranges_) {
    if (r.owner == owner) out.push_back(r);
  }
  return out;
}

}  // namespace memsim
