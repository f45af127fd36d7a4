// Note [backed from allocation] and Note [hidden reach]
// (shim_core_hidden_reach.cc), against the fake driver.
#include <gtest/gtest.h>

#include <cstring>

#include "shim/core/shim_core_test_fixture.h"

namespace memvirt::shim {
namespace {

class ShimCoreHiddenReachTest : public ShimCoreTest {
 protected:
  // Launches `f` with the one parameter at `arg` on `stream`; the body runs
  // once `stream` runs it and touches [reach, reach + bytes).
  CUresult LaunchWith(CUfunction f, void* arg, CUstream stream, CUdeviceptr reach, uint64_t bytes,
                      std::function<void()> body) {
    void* params[] = {arg};
    ShimCore::Ticket ticket;
    const CUresult r = core_->BeforeLaunch(f, params, nullptr, stream, false, &ticket);
    if (r != CUDA_SUCCESS) return r;
    fake_.EnqueueTouch(stream, reach, bytes, std::move(body));
    return CUDA_SUCCESS;
  }
};

TEST_F(ShimCoreHiddenReachTest, EveryChunkIsBackedAtAllocation) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks(6);  // 12 MiB in a device budget of 8
  for (CUdeviceptr& b : blocks) ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  for (CUdeviceptr b : blocks) EXPECT_NE(core_->TEST_ResidenceOf(b), Residence::kUnbacked);
  CUdeviceptr large;
  ASSERT_EQ(core_->Alloc(&large, 12 * kMiB), CUDA_SUCCESS);  // more than the device holds
  for (int c = 0; c < 6; ++c) {
    EXPECT_NE(core_->TEST_ResidenceOf(large + c * 2 * kMiB), Residence::kUnbacked) << c;
  }
  EXPECT_GT(core_->stats().backed_on_host_at_allocation, 0u);
  // A kernel the shim never saw reach these blocks finds them mapped.
  for (CUdeviceptr b : blocks) fake_.EnqueueTouch(s, b, 2 * kMiB, {});
  fake_.EnqueueTouch(s, large, 12 * kMiB, {});
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(fake_.faults(), 0u);
}

// A 128-byte parameter with no plain address (a tensor map's is encoded) may
// reach any block: the launch is a fence, and a page-out waits until the
// kernel has run (on a GPU, a page-out copied while the kernel writes loses
// the write). The fake driver runs held work when the host waits for it, so
// the order is observable: the kernel has run once the allocation that
// needed a victim returns.
TEST_F(ShimCoreHiddenReachTest, StructWithoutAPlainAddressFencesPageOuts) {
  CUstream s = fake_.CreateStream();
  CUstream other = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks(4);  // the device budget
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(Write(s, blocks[i], 2 * kMiB, 10 + i), CUDA_SUCCESS);
  }
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  const CUdeviceptr hidden = blocks[0];  // least recently used: the first victim
  ASSERT_EQ(core_->TEST_ResidenceOf(hidden), Residence::kDevice);
  unsigned char tensor_map[128] = {};
  const uint64_t encoded = hidden >> 4;  // not the address itself
  std::memcpy(tensor_map + 8, &encoded, sizeof(encoded));
  fake_.Hold(s);
  bool ran = false;
  ASSERT_EQ(LaunchWith(fake_.MakeFunction({128}), tensor_map, s, hidden, 2 * kMiB,
                       [hidden, &ran] {
                         FillPattern(reinterpret_cast<void*>(hidden), 2 * kMiB, 99);
                         ran = true;
                       }),
            CUDA_SUCCESS);
  EXPECT_EQ(core_->stats().fenced_launches, 1u);
  const uint64_t evictions = core_->stats().evictions;
  CUdeviceptr fresh;
  ASSERT_EQ(core_->Alloc(&fresh, 2 * kMiB), CUDA_SUCCESS);  // needs a victim
  ASSERT_GT(core_->stats().evictions, evictions);
  EXPECT_TRUE(ran) << "a chunk was paged out before the fenced kernel ran";
  fake_.Release(s);
  ASSERT_EQ(Write(other, fresh, 2 * kMiB, 50), CUDA_SUCCESS);
  uint64_t sum = 0;
  ASSERT_EQ(Read(other, hidden, 2 * kMiB, &sum), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 99));
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreHiddenReachTest, PlainAddressesInAStructAreDecoded) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr a;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  struct {
    uint64_t n;
    CUdeviceptr p;
    unsigned char rest[112];
  } args = {7, a + 64, {}};
  static_assert(sizeof(args) == 128);
  ASSERT_EQ(LaunchWith(fake_.MakeFunction({128}), &args, s, a, 2 * kMiB, {}), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(core_->stats().fenced_launches, 0u);
  EXPECT_EQ(core_->stats().opaque_launches, 0u);
}

TEST_F(ShimCoreHiddenReachTest, PointerArraysWrittenFromTheHostFenceTheKernelsThatReadThem) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr table, data, plain;
  ASSERT_EQ(core_->Alloc(&data, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&plain, 4096), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&table, 2 * kMiB), CUDA_SUCCESS);
  const uint64_t scalars[4] = {1, 2, 3, 4};
  core_->OnHostWrite(plain, scalars, sizeof(scalars));  // no address: nothing noted
  const CUdeviceptr pointers[2] = {data, data + 4096};
  core_->OnHostWrite(table, pointers, sizeof(pointers));
  CUfunction f = fake_.MakeFunction({8});
  ASSERT_EQ(LaunchWith(f, &plain, s, plain, 4096, {}), CUDA_SUCCESS);
  EXPECT_EQ(core_->stats().fenced_launches, 0u);
  ASSERT_EQ(LaunchWith(f, &table, s, table, 16, {}), CUDA_SUCCESS);
  EXPECT_EQ(core_->stats().fenced_launches, 1u);
  // Freed, the table's chunk forgets what it held.
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  ASSERT_EQ(core_->Free(table), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  CUdeviceptr again;
  ASSERT_EQ(core_->Alloc(&again, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(LaunchWith(f, &again, s, again, 16, {}), CUDA_SUCCESS);
  EXPECT_EQ(core_->stats().fenced_launches, 1u);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Note [hidden reach]: every host copy is scanned (no size limit, 2D rows),
// and the mark follows addresses through device copies and through kernels
// that read a pointer array.
TEST_F(ShimCoreHiddenReachTest, AddressesAreFollowedThroughLargeAnd2DCopiesDeviceCopiesAndKernels) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr data, large, rows, copied, built, plain;
  ASSERT_EQ(core_->Alloc(&data, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&large, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&rows, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&copied, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&built, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&plain, 2 * kMiB), CUDA_SUCCESS);
  CUfunction f = fake_.MakeFunction({8});
  CUfunction g = fake_.MakeFunction({8, 8});
  auto fenced_by = [&](CUdeviceptr arg) {
    const uint64_t before = core_->stats().fenced_launches;
    EXPECT_EQ(LaunchWith(f, &arg, s, arg, 16, {}), CUDA_SUCCESS);
    return core_->stats().fenced_launches > before;
  };
  // 256 KiB, the address in its last word.
  std::vector<CUdeviceptr> big(32768, 0);
  big.back() = data;
  core_->OnHostWrite(large, big.data(), big.size() * sizeof(CUdeviceptr));
  EXPECT_TRUE(fenced_by(large));
  // Two rows of 16 bytes from a host pitch of 64: the address in the second.
  CUdeviceptr pitched[16] = {};
  pitched[9] = data;
  core_->OnHostWriteRows(rows, 16, pitched, 64, 16, 2);
  EXPECT_TRUE(fenced_by(rows));
  // A device copy of an array, and a kernel that reads one and writes another.
  core_->OnDeviceCopy(copied, 64, rows, 64);
  EXPECT_TRUE(fenced_by(copied));
  EXPECT_FALSE(fenced_by(built));
  {
    void* params[] = {&built, &large};
    ShimCore::Ticket ticket;
    ASSERT_EQ(core_->BeforeLaunch(g, params, nullptr, s, false, &ticket), CUDA_SUCCESS);
  }
  EXPECT_TRUE(fenced_by(built));
  // What holds no address stays unfenced: a device copy from plain memory too.
  core_->OnDeviceCopy(plain, 64, data, 64);
  EXPECT_FALSE(fenced_by(plain));
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Addresses written to device memory outside the reservation (a module's
// __device__ variable) may be read by any kernel: every launch is a fence.
TEST_F(ShimCoreHiddenReachTest, AddressesWrittenOutsideTheReservationFenceEveryLaunch) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr data, plain;
  ASSERT_EQ(core_->Alloc(&data, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&plain, 2 * kMiB), CUDA_SUCCESS);
  CUfunction f = fake_.MakeFunction({8});
  ASSERT_EQ(LaunchWith(f, &plain, s, plain, 16, {}), CUDA_SUCCESS);
  EXPECT_EQ(core_->stats().fenced_launches, 0u);
  const CUdeviceptr outside = core_->base() - 4096;
  const uint64_t scalars[2] = {1, 2};
  core_->OnHostWrite(outside, scalars, sizeof(scalars));  // no address: nothing changes
  ASSERT_EQ(LaunchWith(f, &plain, s, plain, 16, {}), CUDA_SUCCESS);
  EXPECT_EQ(core_->stats().fenced_launches, 0u);
  const CUdeviceptr pointers[2] = {data, 0};
  core_->OnHostWrite(outside, pointers, sizeof(pointers));
  ASSERT_EQ(LaunchWith(f, &plain, s, plain, 16, {}), CUDA_SUCCESS);
  EXPECT_EQ(core_->stats().fenced_launches, 1u);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
}

// A graph whose kernel reads a pointer array is a fence at each launch, as
// the same launch made eagerly is.
TEST_F(ShimCoreHiddenReachTest, GraphLaunchesThatReadAPointerArrayAreFenced) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr data, table, plain;
  ASSERT_EQ(core_->Alloc(&data, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&table, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&plain, 2 * kMiB), CUDA_SUCCESS);
  const CUdeviceptr pointers[1] = {data};
  core_->OnHostWrite(table, pointers, sizeof(pointers));
  CUfunction f = fake_.MakeFunction({8});
  CUgraph reads = fake_.MakeGraph();
  fake_.AddKernelNode(reads, f, {table});
  CUgraph other = fake_.MakeGraph();
  fake_.AddKernelNode(other, f, {plain});
  auto exec_reads = reinterpret_cast<CUgraphExec>(reads);
  auto exec_other = reinterpret_cast<CUgraphExec>(other);
  core_->OnGraphInstantiate(exec_reads, reads);
  core_->OnGraphInstantiate(exec_other, other);
  ASSERT_TRUE(core_->TEST_GraphPlanOf(exec_reads).decodable);
  {
    ShimCore::Ticket ticket;
    ASSERT_EQ(core_->BeforeGraphLaunch(exec_other, s, false, &ticket), CUDA_SUCCESS);
  }
  EXPECT_EQ(core_->stats().fenced_launches, 0u);
  {
    ShimCore::Ticket ticket;
    ASSERT_EQ(core_->BeforeGraphLaunch(exec_reads, s, false, &ticket), CUDA_SUCCESS);
  }
  EXPECT_EQ(core_->stats().fenced_launches, 1u);
  EXPECT_EQ(core_->stats().opaque_launches, 0u);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
}

// A graph's kernel node whose structure parameter may hide an address makes
// its launches opaque (a fence that backs everything first); plain addresses
// in the same structure keep the graph decodable.
TEST_F(ShimCoreHiddenReachTest, GraphKernelNodesThatMayHideAnAddressMakeTheGraphOpaque) {
  CUdeviceptr p;
  ASSERT_EQ(core_->Alloc(&p, 2 * kMiB), CUDA_SUCCESS);
  CUfunction f = fake_.MakeFunction({128});
  std::vector<uint64_t> encoded(16, 0), plain(16, 0);
  encoded[1] = p >> 4;
  plain[1] = p;
  CUgraph hides = fake_.MakeGraph();
  fake_.AddKernelNode(hides, f, encoded);
  CUgraph shows = fake_.MakeGraph();
  fake_.AddKernelNode(shows, f, plain);
  core_->OnGraphInstantiate(reinterpret_cast<CUgraphExec>(hides), hides);
  core_->OnGraphInstantiate(reinterpret_cast<CUgraphExec>(shows), shows);
  EXPECT_FALSE(core_->TEST_GraphPlanOf(reinterpret_cast<CUgraphExec>(hides)).decodable);
  EXPECT_TRUE(core_->TEST_GraphPlanOf(reinterpret_cast<CUgraphExec>(shows)).decodable);
}

}  // namespace
}  // namespace memvirt::shim
