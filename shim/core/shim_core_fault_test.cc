// Note [failed transitions] (shim_core.h): a failure at any step of a page
// transition fails the operation and keeps the bytes where they were. Each
// test injects one failure, checks the bytes by checksum right after it and
// again after a retry that succeeds.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "shim/core/shim_core.h"
#include "shim/core/shim_core_test_fixture.h"
#include "shim/testing/fake_driver.h"

namespace memvirt::shim {
namespace {

// A core over a FaultInjector with a 2-chunk device budget.
class ShimCoreFaultTest : public ShimCoreTest {
 protected:
  void SetUp() override { MakeWithFaults(4 * kMiB, 64 * kMiB); }

  static uint64_t BytesAt(CUdeviceptr p) { return Checksum(reinterpret_cast<void*>(p), 2 * kMiB); }

  // Three 2 MiB blocks (seeds 1, 2, 3) through the 2-chunk device: returns
  // one that is in the host tier, then raises the budget so that paging it
  // in needs no eviction.
  CUdeviceptr HostChunk(CUstream s, uint64_t* seed) {
    CUdeviceptr blocks[3];
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
      EXPECT_EQ(Write(s, blocks[i], 2 * kMiB, i + 1), CUDA_SUCCESS);
    }
    EXPECT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    core_->SetDeviceBudget(16 * kMiB);
    for (int i = 0; i < 3; ++i) {
      if (core_->TEST_ResidenceOf(blocks[i]) == Residence::kHost) {
        *seed = i + 1;
        return blocks[i];
      }
    }
    ADD_FAILURE() << "no block in the host tier";
    return blocks[0];
  }

  // Arms `arm`, then checks that a launch reading the host-tier block fails,
  // leaves it in the host tier (mapped, with its bytes, unless `unmapped`)
  // and that a retry sees the bytes.
  void ExpectFailedPageInKeepsBytes(const std::function<void()>& arm, bool unmapped = false) {
    CUstream s = fake_.CreateStream();
    uint64_t seed = 0;
    const CUdeviceptr p = HostChunk(s, &seed);
    arm();
    bool ran = false;
    EXPECT_NE(Launch(s, {p}, 2 * kMiB, [&ran] { ran = true; }), CUDA_SUCCESS);
    Disarm();
    EXPECT_FALSE(ran);
    EXPECT_EQ(core_->TEST_ResidenceOf(p), Residence::kHost);
    EXPECT_EQ(fake_.IsMapped(p, 2 * kMiB), !unmapped);
    if (!unmapped) {
      EXPECT_EQ(BytesAt(p), PatternChecksum(2 * kMiB, seed));
    }
    uint64_t sum = 0;
    ASSERT_EQ(Read(s, p, 2 * kMiB, &sum), CUDA_SUCCESS);
    ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    EXPECT_EQ(sum, PatternChecksum(2 * kMiB, seed));
    EXPECT_EQ(core_->TEST_ResidenceOf(p), Residence::kDevice);
    EXPECT_EQ(fake_.faults(), 0u);
  }

  void ExpectBlocks(CUstream s, const std::vector<CUdeviceptr>& blocks) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      uint64_t sum = 0;
      ASSERT_EQ(Read(s, blocks[i], 2 * kMiB, &sum), CUDA_SUCCESS) << i;
      ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
      EXPECT_EQ(sum, PatternChecksum(2 * kMiB, i + 1)) << i;
    }
    EXPECT_EQ(fake_.faults(), 0u);
  }

  CUstream CopyStream() { return fake_.created_streams().at(0); }
};

// ---- Page-in (host tier -> device) ------------------------------------------

TEST_F(ShimCoreFaultTest, PageInMapFailureKeepsTheChunkInTheHostTier) {
  ExpectFailedPageInKeepsBytes([this] { faults_->FailMemMap(1); });
}

TEST_F(ShimCoreFaultTest, PageInSetAccessFailureKeepsTheChunkInTheHostTier) {
  ExpectFailedPageInKeepsBytes([this] { faults_->FailSetAccess(1); });
}

TEST_F(ShimCoreFaultTest, PageInUnmapFailureKeepsTheChunkInTheHostTier) {
  ExpectFailedPageInKeepsBytes([this] { faults_->FailMemUnmap(1); });
}

TEST_F(ShimCoreFaultTest, PageInCopyFailureKeepsTheChunkInTheHostTier) {
  ExpectFailedPageInKeepsBytes([this] { faults_->FailCopy(1); });
}

TEST_F(ShimCoreFaultTest, PageInWhoseFillCannotBeAwaitedIsUndone) {
  // The event after the fill, and the host wait that replaces it, fail.
  ExpectFailedPageInKeepsBytes([this] { faults_->FailEventRecord(1000); });
}

TEST_F(ShimCoreFaultTest, PageInWhoseHostSlotCannotBeMappedBackIsMappedAtItsNextUse) {
  // The device map fails, and so does putting the host slot back.
  ExpectFailedPageInKeepsBytes([this] { faults_->FailMemMap(2); }, /*unmapped=*/true);
}

TEST_F(ShimCoreFaultTest, FailedStreamWaitFallsBackToAHostWait) {
  CUstream s = fake_.CreateStream();
  uint64_t seed = 0;
  const CUdeviceptr p = HostChunk(s, &seed);
  faults_->FailStreamWaitEvent(1);
  uint64_t sum = 0;
  ASSERT_EQ(Read(s, p, 2 * kMiB, &sum), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, seed));
}

// Host slots given back to other cores (GiveBackHostBytes) by moving host
// chunks into free device chunks: a move whose step fails keeps the chunk in
// its slot with its bytes, and only what moved is given back.
TEST_F(ShimCoreFaultTest, AFailedMoveForAnotherCoreKeepsTheChunkInItsSlot) {
  for (const bool copy_fails : {true, false}) {
    SCOPED_TRACE(copy_fails ? "the copy fails" : "the map fails");
    MakeWithFaults(4 * kMiB, 64 * kMiB);
    CUstream s = fake_.CreateStream();
    uint64_t seed = 0;
    const CUdeviceptr p = HostChunk(s, &seed);
    if (copy_fails) {
      faults_->FailCopy(1);
    } else {
      faults_->FailMemMap(1);
    }
    EXPECT_EQ(core_->GiveBackHostBytes(2 * kMiB), 0u);
    Disarm();
    EXPECT_EQ(core_->TEST_ResidenceOf(p), Residence::kHost);
    ASSERT_TRUE(fake_.IsMapped(p, 2 * kMiB));
    EXPECT_EQ(BytesAt(p), PatternChecksum(2 * kMiB, seed));
    EXPECT_EQ(core_->GiveBackHostBytes(2 * kMiB), 2 * kMiB) << "the retry moves it";
    EXPECT_EQ(core_->TEST_ResidenceOf(p), Residence::kDevice);
    uint64_t sum = 0;
    ASSERT_EQ(Read(s, p, 2 * kMiB, &sum), CUDA_SUCCESS);
    ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    EXPECT_EQ(sum, PatternChecksum(2 * kMiB, seed));
    EXPECT_EQ(fake_.faults(), 0u);
  }
}

// ---- Page-out (device -> host tier) -----------------------------------------

// A one-chunk device: every page-in pages out the one resident chunk, the
// only victim there is.
class ShimCorePageOutFaultTest : public ShimCoreFaultTest {
 protected:
  void SetUp() override { MakeWithFaults(2 * kMiB, 64 * kMiB); }

  // Blocks a and b (seeds 1, 2), a on the device and b in the host tier
  // (both host slots already created); arms `arm`, then reads b, which
  // pages a out. Returns {a, b}.
  std::vector<CUdeviceptr> PageOutUnder(CUstream s, const std::function<void()>& arm) {
    std::vector<CUdeviceptr> blocks(2);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
      EXPECT_EQ(Write(s, blocks[i], 2 * kMiB, i + 1), CUDA_SUCCESS);
    }
    uint64_t sum = 0;
    EXPECT_EQ(Read(s, blocks[0], 2 * kMiB, &sum), CUDA_SUCCESS);
    EXPECT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    EXPECT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kDevice);
    EXPECT_EQ(core_->TEST_ResidenceOf(blocks[1]), Residence::kHost);
    arm();
    EXPECT_EQ(Read(s, blocks[1], 2 * kMiB, &sum), CUDA_SUCCESS);  // from host memory if need be
    EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 2));
    return blocks;
  }

  // a stayed on the device, mapped, with its bytes.
  void ExpectStayedOnTheDevice(CUdeviceptr a) {
    EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kDevice);
    EXPECT_TRUE(fake_.IsMapped(a, 2 * kMiB));
    EXPECT_EQ(BytesAt(a), PatternChecksum(2 * kMiB, 1));
  }
};

// Note [waits outside the lock]: the eviction's wait for pending work fails
// outside the lock and again under it: nothing pending is evicted, the
// launch runs from host memory as when any eviction fails, and every byte is
// there once the work completed.
TEST_F(ShimCoreFaultTest, FailedWaitForPendingWorkEvictsNothingAndKeepsTheBytes) {
  CUstream held = fake_.CreateStream();
  CUdeviceptr a, b, c;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&c, 2 * kMiB), CUDA_SUCCESS);
  fake_.Hold(held);
  ASSERT_EQ(Write(held, a, 2 * kMiB, 1), CUDA_SUCCESS);
  ASSERT_EQ(Write(held, b, 2 * kMiB, 2), CUDA_SUCCESS);
  const uint64_t evictions = core_->stats().evictions;
  faults_->FailEventSynchronize(2);  // the wait outside the lock, then the one under it
  ASSERT_EQ(Write(held, c, 2 * kMiB, 3), CUDA_SUCCESS);
  EXPECT_EQ(faults_->event_synchronize_failures_left(), 0) << "both waits were made";
  Disarm();
  EXPECT_EQ(core_->stats().evictions, evictions);
  EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(b), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(c), Residence::kHost);
  fake_.Release(held);
  ExpectPatterns(held, 2 * kMiB, {{a, 1}, {b, 2}, {c, 3}});
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCorePageOutFaultTest, CopyFailureKeepsTheChunkOnTheDevice) {
  CUstream s = fake_.CreateStream();
  const std::vector<CUdeviceptr> blocks = PageOutUnder(s, [this] { faults_->FailCopy(1); });
  ExpectStayedOnTheDevice(blocks[0]);
  Disarm();
  ExpectBlocks(s, blocks);
}

TEST_F(ShimCorePageOutFaultTest, WaitFailureKeepsTheChunkOnTheDevice) {
  CUstream s = fake_.CreateStream();
  fake_.Hold(CopyStream());  // the page-out copy has not run when its wait fails
  // Every wait fails: the one outside the lock (Note [waits outside the
  // lock]), then, under it, the batch's and that of the batch started again.
  const std::vector<CUdeviceptr> blocks =
      PageOutUnder(s, [this] { faults_->FailEventSynchronize(3); });
  ExpectStayedOnTheDevice(blocks[0]);
  fake_.Release(CopyStream());
  Disarm();
  ExpectBlocks(s, blocks);
}

// Note [completion is CUDA_SUCCESS]: an event query that fails does not make
// the work it covers complete, so the chunk that work uses is not evicted;
// the access that needed a device chunk runs from host memory instead.
TEST_F(ShimCorePageOutFaultTest, FailingEventQueryNeverMakesAChunkIdle) {
  CUstream s = fake_.CreateStream();
  uint64_t evictions = 0;
  const std::vector<CUdeviceptr> blocks = PageOutUnder(s, [&] {
    evictions = core_->stats().evictions;
    faults_->FailEventQuery(1 << 30);
    uint64_t sum = 0;
    // a (the first block, at the base): a use not known complete.
    EXPECT_EQ(Read(s, core_->base(), 2 * kMiB, &sum), CUDA_SUCCESS);
  });
  ASSERT_EQ(blocks[0], core_->base());
  EXPECT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(blocks[1]), Residence::kHost);  // b ran from host memory
  EXPECT_EQ(core_->stats().evictions, evictions);
  Disarm();
  ExpectBlocks(s, blocks);
}

TEST_F(ShimCorePageOutFaultTest, UnmapFailureKeepsTheChunkOnTheDevice) {
  CUstream s = fake_.CreateStream();
  const std::vector<CUdeviceptr> blocks = PageOutUnder(s, [this] { faults_->FailMemUnmap(1); });
  ExpectStayedOnTheDevice(blocks[0]);
  Disarm();
  ExpectBlocks(s, blocks);
}

TEST_F(ShimCorePageOutFaultTest, HostMapFailureMapsTheDeviceChunkBack) {
  CUstream s = fake_.CreateStream();
  const std::vector<CUdeviceptr> blocks = PageOutUnder(s, [this] { faults_->FailMemMap(1); });
  ExpectStayedOnTheDevice(blocks[0]);
  Disarm();
  ExpectBlocks(s, blocks);
}

TEST_F(ShimCorePageOutFaultTest, SetAccessFailureMapsTheDeviceChunkBack) {
  CUstream s = fake_.CreateStream();
  const std::vector<CUdeviceptr> blocks = PageOutUnder(s, [this] { faults_->FailSetAccess(1); });
  ExpectStayedOnTheDevice(blocks[0]);
  Disarm();
  ExpectBlocks(s, blocks);
}

TEST_F(ShimCorePageOutFaultTest, ChunkWithNoMappingLeftIsMappedBeforeAnOpaqueLaunch) {
  CUstream s = fake_.CreateStream();
  // Mapping the host slot fails, and so does mapping the device chunk back.
  const std::vector<CUdeviceptr> blocks = PageOutUnder(s, [this] { faults_->FailMemMap(2); });
  Disarm();
  const CUdeviceptr a = blocks[0];
  EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kHost);
  EXPECT_FALSE(fake_.IsMapped(a, 2 * kMiB));
  // An opaque launch may reach it: it is mapped again first.
  CUfunction opaque = fake_.MakeFunction({}, /*opaque=*/true);
  void* no_args[] = {nullptr};
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeLaunch(opaque, no_args, nullptr, s, false, &ticket), CUDA_SUCCESS);
  uint64_t sum = 0;
  fake_.EnqueueTouch(s, a, 2 * kMiB, [a, &sum] { sum = BytesAt(a); });
  ticket.Close();
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 1));
  ExpectBlocks(s, blocks);
}

// ---- Graph residency ----------------------------------------------------------

TEST_F(ShimCoreFaultTest, GraphLaunchWhosePageInFailsFailsAndKeepsTheBytes) {
  CUstream s = fake_.CreateStream();
  uint64_t seed = 0;
  const CUdeviceptr p = HostChunk(s, &seed);
  CUgraph graph = fake_.MakeGraph();
  fake_.AddKernelNode(graph, Function(1), {p});
  const CUgraphExec exec = reinterpret_cast<CUgraphExec>(0x2000);
  core_->OnGraphInstantiate(exec, graph);
  ASSERT_TRUE(core_->TEST_GraphPlanOf(exec).decodable);
  const std::vector<std::function<void()>> failures = {
      [this] { faults_->FailCopy(1); },
      [this] { faults_->FailMemMap(1); },
      [this] { faults_->FailEventRecord(1000); },
  };
  for (size_t i = 0; i < failures.size(); ++i) {
    failures[i]();
    ShimCore::Ticket ticket;
    EXPECT_NE(core_->BeforeGraphLaunch(exec, s, false, &ticket), CUDA_SUCCESS) << i;
    Disarm();
    EXPECT_EQ(core_->TEST_ResidenceOf(p), Residence::kHost) << i;
    EXPECT_EQ(BytesAt(p), PatternChecksum(2 * kMiB, seed)) << i;
  }
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeGraphLaunch(exec, s, false, &ticket), CUDA_SUCCESS);
  uint64_t sum = 0;
  fake_.EnqueueTouch(s, p, 2 * kMiB, [p, &sum] { sum = BytesAt(p); });
  ticket.Close();
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, seed));
  EXPECT_EQ(core_->TEST_ResidenceOf(p), Residence::kDevice);
  EXPECT_EQ(fake_.faults(), 0u);
}

// ---- Allocation of physical memory --------------------------------------------

// Blocks are backed at allocation (Note [backed from allocation]), so the
// faults below are injected before the allocation that meets them.
TEST_F(ShimCoreFaultTest, FailedDeviceCreateFallsBackToHostTier) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr a;
  faults_->FailMemCreate(1);
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kHost);
  EXPECT_GT(core_->stats().host_fallbacks, 0u);
  EXPECT_EQ(core_->stats().backed_on_host_at_allocation, 1u);
  ASSERT_EQ(Write(s, a, 2 * kMiB, 3), CUDA_SUCCESS);
  uint64_t sum;
  ASSERT_EQ(Read(s, a, 2 * kMiB, &sum), CUDA_SUCCESS);  // now moves to the device
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 3));
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreFaultTest, NoPhysicalMemoryAtAllIsOutOfMemory) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr a, b;
  faults_->FailMemCreate(1000);
  // The host slot created at initialization (Note [host tier preconditions])
  // takes the first chunk; nothing is left for the second, which stays
  // unbacked (the allocation itself succeeds: it is within the capacity).
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(core_->TEST_ResidenceOf(b), Residence::kUnbacked);
  EXPECT_EQ(Write(s, a, 2 * kMiB, 1), CUDA_SUCCESS);
  EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kHost);
  EXPECT_EQ(Write(s, b, 2 * kMiB, 2), CUDA_ERROR_OUT_OF_MEMORY);
  faults_->FailMemCreate(0);
  EXPECT_EQ(Write(s, b, 2 * kMiB, 2), CUDA_SUCCESS);
  ExpectBlocks(s, {a, b});
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreFaultTest, FailedMapIsReportedAndRecoverable) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr a;
  faults_->FailMemCreate(1);  // backed by a host slot at allocation: the write maps a device chunk
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  faults_->FailMemMap(1);
  EXPECT_NE(Write(s, a, 2 * kMiB, 4), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, a, 2 * kMiB, 4), CUDA_SUCCESS);
  uint64_t sum;
  ASSERT_EQ(Read(s, a, 2 * kMiB, &sum), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 4));
}

TEST_F(ShimCoreFaultTest, FailedPageOutCopyKeepsDataOnTheDevice) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr a, b, c;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&c, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, a, 2 * kMiB, 1), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, b, 2 * kMiB, 2), CUDA_SUCCESS);
  faults_->FailCopy(1);
  ASSERT_EQ(Write(s, c, 2 * kMiB, 3), CUDA_SUCCESS);  // c lands in the host tier
  ExpectPatterns(s, 2 * kMiB, {{a, 1}, {b, 2}, {c, 3}});
  EXPECT_EQ(fake_.faults(), 0u);
}

}  // namespace
}  // namespace memvirt::shim
