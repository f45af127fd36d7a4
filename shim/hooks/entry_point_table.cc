#include "shim/hooks/entry_point_table.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace memvirt::shim::hooks {
namespace {

#define MEMVIRT_ENTRY_POINT(base, version, symbol, per_thread, pfn) \
  {#base, version, #symbol, per_thread != 0},
// Sorted by base name in byte order (the generator sorts with Python's sorted()).
constexpr EntryPointFlavour kFlavours[] = {
#include "shim/driver/cuda_entry_points.inc"
};
#undef MEMVIRT_ENTRY_POINT

}  // namespace

const EntryPointFlavour* FlavoursOf(const char* base, int* count) {
  *count = 0;
  if (base == nullptr) return nullptr;
  auto less = [](const EntryPointFlavour& a, const char* b) { return std::strcmp(a.base, b) < 0; };
  const EntryPointFlavour* first =
      std::lower_bound(std::begin(kFlavours), std::end(kFlavours), base, less);
  const EntryPointFlavour* last = first;
  while (last != std::end(kFlavours) && std::strcmp(last->base, base) == 0) ++last;
  *count = static_cast<int>(last - first);
  return *count > 0 ? first : nullptr;
}

const EntryPointFlavour* FlavourFor(const char* base, int version, bool per_thread) {
  int count = 0;
  const EntryPointFlavour* flavours = FlavoursOf(base, &count);
  const EntryPointFlavour* best = nullptr;
  for (int pass = per_thread ? 0 : 1; pass < 2 && best == nullptr; ++pass) {
    const bool want_per_thread = pass == 0;  // pass 1: the plain flavours
    for (int i = 0; i < count; ++i) {
      const EntryPointFlavour& f = flavours[i];
      if (f.per_thread != want_per_thread || f.version > version) continue;
      if (best == nullptr || f.version > best->version) best = &f;
    }
  }
  return best;
}

}  // namespace memvirt::shim::hooks
