// ShimCore::PinBlock / UnpinBlock (Note [pinned blocks] in shim_core_pin.cc).
#include <set>

#include "shim/core/shim_core_test_fixture.h"

namespace memvirt::shim {
namespace {

class ShimCorePinTest : public ShimCoreTest {
 protected:
  // lru: which unpinned chunk the pressure evicts follows recency alone (the
  // lifetime policy learns the pressure loop and keeps what it reuses).
  void SetUp() override { Make(&fake_.driver(), 8 * kMiB, 64 * kMiB, "lru"); }

  // Writes and reads `count` other 2 MiB blocks through the 8 MiB budget.
  void Pressure(CUstream s, int count, uint64_t seed) {
    for (int i = 0; i < count; ++i) {
      CUdeviceptr p;
      ASSERT_EQ(core_->Alloc(&p, 2 * kMiB), CUDA_SUCCESS);
      others_.push_back(p);
    }
    for (size_t i = 0; i < others_.size(); ++i) {
      ASSERT_EQ(Write(s, others_[i], 2 * kMiB, seed + i), CUDA_SUCCESS);
    }
  }
  std::vector<CUdeviceptr> others_;
};

TEST_F(ShimCorePinTest, PinnedBlockStaysOnTheDeviceUnderPressureAndPagesWhenUnpinned) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr block;
  ASSERT_EQ(core_->Alloc(&block, 4 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, block, 4 * kMiB, 7), CUDA_SUCCESS);
  Pressure(s, 4, 100);  // pages the block out first: pinning has to page it in
  ASSERT_EQ(core_->TEST_ResidenceOf(block), Residence::kHost);

  ShimCore::PinnedBlock pinned;
  ASSERT_EQ(core_->PinBlock(block, &pinned), CUDA_SUCCESS);
  EXPECT_EQ(pinned.chunk_base, block);
  EXPECT_EQ(pinned.offset, 0u);
  EXPECT_EQ(pinned.bytes, 4 * kMiB);
  ASSERT_EQ(pinned.chunks.size(), 2u);
  EXPECT_NE(pinned.chunks[0], pinned.chunks[1]);
  EXPECT_NE(pinned.chunks[0], 0u);

  Pressure(s, 4, 200);  // 8 blocks through the 2 chunks left
  EXPECT_EQ(core_->TEST_ResidenceOf(block), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(block + 2 * kMiB), Residence::kDevice);
  EXPECT_GT(core_->stats().evictions, 4u);
  ShimCore::PinnedBlock again;  // the same physical chunks while pinned
  ASSERT_EQ(core_->PinBlock(block, &again), CUDA_SUCCESS);
  EXPECT_EQ(again.chunks, pinned.chunks);
  core_->UnpinBlock(again);

  core_->UnpinBlock(pinned);
  Pressure(s, 0, 300);
  EXPECT_EQ(core_->TEST_ResidenceOf(block), Residence::kHost);
  uint64_t sum = 0;
  ASSERT_EQ(Read(s, block, 4 * kMiB, &sum), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(4 * kMiB, 7));
  for (size_t i = 0; i < others_.size(); ++i) {
    ASSERT_EQ(Read(s, others_[i], 2 * kMiB, &sum), CUDA_SUCCESS);
    ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 300 + i)) << i;
  }
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCorePinTest, PinsNestAndCountPerChunk) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr small_a, small_b;  // two small blocks share one slab chunk
  ASSERT_EQ(core_->Alloc(&small_a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&small_b, 4096), CUDA_SUCCESS);
  ASSERT_EQ(small_b >> 21, small_a >> 21);
  ShimCore::PinnedBlock a, b;
  ASSERT_EQ(core_->PinBlock(small_a, &a), CUDA_SUCCESS);
  ASSERT_EQ(core_->PinBlock(small_b, &b), CUDA_SUCCESS);
  EXPECT_EQ(b.chunk_base + b.offset, small_b);
  EXPECT_EQ(b.bytes, 4096u);
  EXPECT_EQ(a.chunks, b.chunks);
  core_->UnpinBlock(a);
  Pressure(s, 6, 10);
  EXPECT_EQ(core_->TEST_ResidenceOf(small_a), Residence::kDevice);  // still pinned by b
  core_->UnpinBlock(b);
  Pressure(s, 0, 20);
  EXPECT_EQ(core_->TEST_ResidenceOf(small_a), Residence::kHost);
}

TEST_F(ShimCorePinTest, OnlyWholeLiveBlocksThatFitThePinnedBudgetArePinned) {
  CUdeviceptr block, big;
  ASSERT_EQ(core_->Alloc(&block, 2 * kMiB), CUDA_SUCCESS);
  ShimCore::PinnedBlock pinned;
  EXPECT_EQ(core_->PinBlock(block + 256, &pinned), CUDA_ERROR_INVALID_VALUE);  // interior
  ASSERT_EQ(core_->Alloc(&big, 10 * kMiB), CUDA_SUCCESS);  // more than the 8 MiB budget
  EXPECT_EQ(core_->PinBlock(big, &pinned), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(core_->Free(block), CUDA_SUCCESS);
  EXPECT_EQ(core_->PinBlock(block, &pinned), CUDA_ERROR_INVALID_VALUE);  // freed
  // A failed pin leaves nothing pinned: the big block pages as usual.
  CUstream s = fake_.CreateStream();
  ASSERT_EQ(Write(s, big, 10 * kMiB, 3), CUDA_SUCCESS);
  Pressure(s, 4, 30);
  EXPECT_EQ(core_->TEST_ResidenceOf(big), Residence::kHost);
}

}  // namespace
}  // namespace memvirt::shim
