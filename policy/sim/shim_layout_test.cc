#include "memvirt/policy/shim_layout.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace memvirt::policy {
namespace {

constexpr uint64_t kChunk = uint64_t{2} << 20;

const trace::TraceTensor* Find(const trace::Trace& t, uint64_t id) {
  for (const trace::TraceTensor& x : t.tensors) {
    if (x.id == id) return &x;
  }
  return nullptr;
}

TEST(ShimLayoutTest, SizeClassesFollowTheAllocatorsSteps) {
  EXPECT_EQ(ShimSizeClassBytes(1), 256u);
  EXPECT_EQ(ShimSizeClassBytes(256), 256u);
  EXPECT_EQ(ShimSizeClassBytes(257), 512u);
  EXPECT_EQ(ShimSizeClassBytes(1024), 1024u);
  EXPECT_EQ(ShimSizeClassBytes(1025), 1280u);
  EXPECT_EQ(ShimSizeClassBytes(2048), 2048u);
  EXPECT_EQ(ShimSizeClassBytes(2049), 2560u);
  EXPECT_EQ(ShimSizeClassBytes(700 * 1024), 768u * 1024);
  EXPECT_EQ(ShimSizeClassBytes(1 << 20), 1u << 20);
  EXPECT_EQ(ShimSizeClassBytes((1 << 20) + 1), 0u);  // a large block
}

TEST(ShimLayoutTest, PacksSmallTensorsIntoSlabsAndRoundsLargeOnesToChunks) {
  trace::Trace t;
  t.tensors = {{1, 3 * (1 << 20), "activation", false},  // 2 chunks
               {2, 1500 * 1024, "activation", false},    // above 1 MiB: 1 chunk of its own
               {3, 100, "weight", true},                 // class 256
               {4, 200, "activation", false},            // class 256: the same slab
               {5, 5000, "activation", false}};          // class 5120: a slab of its own
  t.kernels = {{10, "a", 1, {3}, {1, 4}}, {11, "b", 1, {1, 4}, {2, 5}}, {12, "c", 1, {2, 5}, {3}}};
  t.frees = {{1, 11}};
  ShimLayoutStats stats;
  trace::Trace out = ShimLayout(t, &stats);
  EXPECT_EQ(stats.slabs, 2u);
  EXPECT_EQ(stats.small_tensors, 3u);
  ASSERT_EQ(out.tensors.size(), 4u);  // two large tensors, two slabs
  EXPECT_EQ(Find(out, 1)->bytes, 4u << 20);
  EXPECT_EQ(Find(out, 2)->bytes, kChunk);
  EXPECT_EQ(Find(out, 3), nullptr);
  const uint64_t slab_a = 6, slab_b = 7;  // ids after the largest tensor id
  ASSERT_NE(Find(out, slab_a), nullptr);
  EXPECT_EQ(Find(out, slab_a)->bytes, kChunk);
  EXPECT_TRUE(Find(out, slab_a)->persistent);  // slab chunks are never released
  EXPECT_TRUE(Find(out, slab_b)->persistent);
  // Every access is a read and a write of the tensor or slab.
  EXPECT_EQ(out.kernels[0].reads, (std::vector<uint64_t>{1, slab_a}));
  EXPECT_EQ(out.kernels[1].reads, (std::vector<uint64_t>{1, 2, slab_a, slab_b}));
  EXPECT_EQ(out.kernels[2].reads, (std::vector<uint64_t>{2, slab_a, slab_b}));
  for (const trace::TraceKernel& k : out.kernels) EXPECT_EQ(k.reads, k.writes);
  ASSERT_EQ(out.frees.size(), 1u);
  EXPECT_EQ(out.frees[0].tensor, 1u);
}

TEST(ShimLayoutTest, FreedObjectsAreReusedBeforeANewSlab) {
  // A slab holds two 1 MiB objects. Tensors 1 and 2 fill the first slab;
  // tensor 1 dies after kernel 0, and tensor 3, born at kernel 1, takes its
  // place instead of starting a second slab.
  const uint64_t mib = uint64_t{1} << 20;
  trace::Trace t;
  t.tensors = {
      {1, mib, "activation", false}, {2, mib, "activation", false}, {3, mib, "activation", false}};
  t.kernels = {{10, "a", 1, {}, {1, 2}}, {11, "b", 1, {2}, {3}}};
  ShimLayoutStats stats;
  trace::Trace out = ShimLayout(t, &stats);
  EXPECT_EQ(stats.slabs, 1u);
  EXPECT_EQ(out.kernels[0].reads, out.kernels[1].reads);
}

TEST(ShimLayoutTest, TheLowestFreeObjectIsTakenAsTheAllocatorTakesIt) {
  // Two 1 MiB objects per slab: tensors 1-4 fill slabs 6 and 7; 2 (slab 6),
  // 3 and 4 (slab 7) die after kernel 0, in that order. Tensor 5 takes the
  // lowest free object, 2's (Note [repeatable placement] in
  // shim/core/block_allocator.h), not the last freed, 4's; so kernel 1,
  // which reads tensor 1, touches slab 6 alone.
  const uint64_t mib = uint64_t{1} << 20;
  trace::Trace t;
  for (uint64_t id = 1; id <= 5; ++id) t.tensors.push_back({id, mib, "activation", false});
  t.kernels = {{10, "a", 1, {}, {1, 2, 3, 4}}, {11, "b", 1, {1}, {5}}};
  ShimLayoutStats stats;
  trace::Trace out = ShimLayout(t, &stats);
  EXPECT_EQ(stats.slabs, 2u);
  EXPECT_EQ(out.kernels[0].reads, (std::vector<uint64_t>{6, 7}));
  EXPECT_EQ(out.kernels[1].reads, (std::vector<uint64_t>{6}));
}

TEST(ShimLayoutTest, AFullSlabStartsAnother) {
  trace::Trace t;
  trace::TraceKernel k{10, "all", 1, {}, {}};
  for (uint64_t id = 1; id <= kChunk / 1024 + 1; ++id) {  // one more than a slab of 1 KiB holds
    t.tensors.push_back({id, 1000, "activation", false});
    k.writes.push_back(id);
  }
  t.kernels = {k};
  ShimLayoutStats stats;
  trace::Trace out = ShimLayout(t, &stats);
  EXPECT_EQ(stats.slabs, 2u);
  EXPECT_EQ(out.kernels[0].reads.size(), 2u);
}

}  // namespace
}  // namespace memvirt::policy
