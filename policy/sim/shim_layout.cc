#include "memvirt/policy/shim_layout.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memvirt::policy {
namespace {

constexpr uint64_t kChunkBytes = uint64_t{2} << 20;
constexpr uint64_t kSmallMax = uint64_t{1} << 20;

// Note [shim layout]: the block allocator's size classes and slabs.
class SlabPacker {
 public:
  // Returns the slab (a dense index) that holds the new object.
  uint32_t Allocate(uint64_t class_bytes, uint32_t* object) {
    Class& c = classes_[class_bytes];
    if (!c.free.empty()) {  // the lowest free object, as the shim takes it
      std::pop_heap(c.free.begin(), c.free.end(), std::greater<>());
      const auto [slab, obj] = c.free.back();
      c.free.pop_back();
      *object = obj;
      return slab;
    }
    if (c.current == kNone || c.bump == kChunkBytes / class_bytes) {
      c.current = slabs_++;
      c.bump = 0;
    }
    *object = static_cast<uint32_t>(c.bump++);
    return c.current;
  }
  void Free(uint64_t class_bytes, uint32_t slab, uint32_t object) {
    auto& free_objects = classes_[class_bytes].free;
    free_objects.emplace_back(slab, object);
    std::push_heap(free_objects.begin(), free_objects.end(), std::greater<>());
  }
  uint32_t slabs() const { return slabs_; }

 private:
  static constexpr uint32_t kNone = ~uint32_t{0};
  struct Class {
    uint32_t current = kNone;
    uint64_t bump = 0;
    // Min-heap of (slab, object): slabs are numbered in creation order, which
    // stands for address order (Note [repeatable placement] in
    // shim/core/block_allocator.h).
    std::vector<std::pair<uint32_t, uint32_t>> free;
  };
  std::unordered_map<uint64_t, Class> classes_;
  uint32_t slabs_ = 0;
};

}  // namespace

uint64_t ShimSizeClassBytes(uint64_t bytes) {
  if (bytes > kSmallMax) return 0;
  if (bytes <= 1024) return (bytes + 255) / 256 * 256;
  uint64_t base = 1024;
  while (base * 2 < bytes) base *= 2;  // base < bytes <= 2 * base
  const uint64_t step = base / 4;
  return base + (bytes - base + step - 1) / step * step;
}

trace::Trace ShimLayout(const trace::Trace& trace, ShimLayoutStats* stats) {
  const size_t num_tensors = trace.tensors.size();
  const size_t num_kernels = trace.kernels.size();
  std::unordered_map<uint64_t, uint32_t> tensor_index;
  uint64_t max_id = 0;
  for (size_t t = 0; t < num_tensors; ++t) {
    tensor_index[trace.tensors[t].id] = static_cast<uint32_t>(t);
    max_id = std::max(max_id, trace.tensors[t].id);
  }
  std::unordered_map<uint64_t, size_t> kernel_index;
  for (size_t k = 0; k < num_kernels; ++k) kernel_index[trace.kernels[k].id] = k;

  // Births and deaths as memvirt-replay allocates and frees.
  constexpr int64_t kNone = -1;
  std::vector<int64_t> first(num_tensors, kNone), last(num_tensors, kNone),
      freed(num_tensors, kNone);
  for (size_t k = 0; k < num_kernels; ++k) {
    for (const auto* ids : {&trace.kernels[k].reads, &trace.kernels[k].writes}) {
      for (uint64_t id : *ids) {
        const uint32_t t = tensor_index.at(id);
        if (first[t] == kNone) first[t] = static_cast<int64_t>(k);
        last[t] = static_cast<int64_t>(k);
      }
    }
  }
  for (const trace::TraceFree& f : trace.frees) {
    const uint32_t t = tensor_index.at(f.tensor);
    freed[t] = std::max<int64_t>(freed[t], static_cast<int64_t>(kernel_index.at(f.after_kernel)));
  }
  std::vector<std::vector<uint32_t>> born(num_kernels), dies(num_kernels);
  std::vector<uint32_t> persistent;
  std::vector<uint64_t> size_class(num_tensors, 0);
  for (size_t t = 0; t < num_tensors; ++t) {
    if (first[t] == kNone) continue;
    size_class[t] = ShimSizeClassBytes(trace.tensors[t].bytes);
    if (size_class[t] == 0) continue;
    if (trace.tensors[t].persistent) {
      persistent.push_back(static_cast<uint32_t>(t));
    } else {
      born[first[t]].push_back(static_cast<uint32_t>(t));
      dies[std::max(last[t], freed[t])].push_back(static_cast<uint32_t>(t));
    }
  }

  SlabPacker packer;
  std::vector<uint32_t> slab_of(num_tensors, 0), object_of(num_tensors, 0);
  for (uint32_t t : persistent) slab_of[t] = packer.Allocate(size_class[t], &object_of[t]);
  for (int iteration = 0; iteration < 2; ++iteration) {
    for (size_t k = 0; k < num_kernels; ++k) {
      for (uint32_t t : born[k]) slab_of[t] = packer.Allocate(size_class[t], &object_of[t]);
      for (uint32_t t : dies[k]) packer.Free(size_class[t], slab_of[t], object_of[t]);
    }
  }

  trace::Trace out;
  out.model = trace.model;
  out.batch = trace.batch;
  out.iterations = trace.iterations;
  out.source = trace.source;
  // The id a tensor's accesses go to: its own, or its slab's.
  auto mapped_id = [&](uint32_t t) {
    return size_class[t] == 0 ? trace.tensors[t].id : max_id + 1 + slab_of[t];
  };
  uint64_t small = 0;
  for (size_t t = 0; t < num_tensors; ++t) {
    if (size_class[t] != 0) {
      ++small;
      continue;
    }
    trace::TraceTensor copy = trace.tensors[t];
    copy.bytes = (copy.bytes + kChunkBytes - 1) / kChunkBytes * kChunkBytes;
    out.tensors.push_back(std::move(copy));
  }
  for (uint32_t s = 0; s < packer.slabs(); ++s) {
    out.tensors.push_back(trace::TraceTensor{max_id + 1 + s, kChunkBytes, "other", true});
  }
  for (const trace::TraceKernel& k : trace.kernels) {
    trace::TraceKernel copy{k.id, k.name, k.us, {}, {}};
    for (const auto* ids : {&k.reads, &k.writes}) {
      for (uint64_t id : *ids) copy.reads.push_back(mapped_id(tensor_index.at(id)));
    }
    std::sort(copy.reads.begin(), copy.reads.end());
    copy.reads.erase(std::unique(copy.reads.begin(), copy.reads.end()), copy.reads.end());
    copy.writes = copy.reads;  // Note [shim layout]: every access is read-write
    out.kernels.push_back(std::move(copy));
  }
  for (const trace::TraceFree& f : trace.frees) {
    if (size_class[tensor_index.at(f.tensor)] == 0) out.frees.push_back(f);
  }
  if (stats != nullptr) *stats = ShimLayoutStats{packer.slabs(), small};
  return out;
}

}  // namespace memvirt::policy
