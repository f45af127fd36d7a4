#include "shim/core/shim_core.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <random>
#include <thread>
#include <utility>

#include "shim/core/shim_core_test_fixture.h"
#include "shim/testing/fake_driver.h"

namespace memvirt::shim {
namespace {

TEST_F(ShimCoreTest, ReportsVirtualCapacity) {
  size_t free = 0, total = 0;
  ASSERT_EQ(core_->GetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 72 * kMiB);  // device budget + host tier
  EXPECT_EQ(free, total);
  CUdeviceptr p;
  ASSERT_EQ(core_->Alloc(&p, 10 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->GetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 62 * kMiB);
  EXPECT_TRUE(core_->Owns(p));
  EXPECT_FALSE(core_->Owns(p - 1 - (p - core_->base())));
}

TEST_F(ShimCoreTest, UsageReportCarriesAllocationEventsOnlyOnceObserved) {
  CUdeviceptr before;
  ASSERT_EQ(core_->Alloc(&before, 4 * kMiB), CUDA_SUCCESS);
  UsageReport first = core_->TakeUsage();  // standalone until now: nothing logged
  EXPECT_TRUE(first.alloc_events.empty());
  EXPECT_EQ(first.allocated_bytes, 4 * kMiB);
  CUdeviceptr p;
  ASSERT_EQ(core_->Alloc(&p, 6 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Free(before), CUDA_SUCCESS);
  UsageReport second = core_->TakeUsage();
  ASSERT_EQ(second.alloc_events.size(), 2u);
  EXPECT_EQ(second.alloc_events[0].alloc_id, p - core_->base());
  EXPECT_EQ(second.alloc_events[0].bytes, 6 * kMiB);
  EXPECT_FALSE(second.alloc_events[0].freed);
  EXPECT_EQ(second.alloc_events[1].alloc_id, before - core_->base());
  EXPECT_TRUE(second.alloc_events[1].freed);
  EXPECT_TRUE(core_->TakeUsage().alloc_events.empty());  // drained
}

TEST_F(ShimCoreTest, AddressRangeAndPointerAttributes) {
  CUdeviceptr big, small;
  ASSERT_EQ(core_->Alloc(&big, 5 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&small, 1000), CUDA_SUCCESS);
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(core_->GetAddressRange(&base, &size, big + 3 * kMiB + 5), CUDA_SUCCESS);
  EXPECT_EQ(base, big);
  EXPECT_EQ(size, 5 * kMiB);
  ASSERT_EQ(core_->GetAddressRange(&base, &size, small + 999), CUDA_SUCCESS);
  EXPECT_EQ(base, small);
  EXPECT_GE(size, 1000u);
  unsigned int type = 0;
  ASSERT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, &type, big + 7),
            CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  CUdeviceptr start = 0;
  ASSERT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, &start, big + 7),
            CUDA_SUCCESS);
  EXPECT_EQ(start, big);
  // Note [buffer ids]: one id per allocation, never reused.
  unsigned long long id = 0, interior = 0, other = 0, again = 0;
  ASSERT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID, &id, big), CUDA_SUCCESS);
  ASSERT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID, &interior, big + 4 * kMiB),
            CUDA_SUCCESS);
  ASSERT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID, &other, small), CUDA_SUCCESS);
  EXPECT_EQ(id, interior);
  EXPECT_NE(id, other);
  ASSERT_EQ(core_->Free(big), CUDA_SUCCESS);
  EXPECT_EQ(core_->GetAddressRange(&base, &size, big), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(core_->Free(big), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID, &again, big),
            CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr reused;
  ASSERT_EQ(core_->Alloc(&reused, 5 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(reused, big);  // the same address ...
  ASSERT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID, &again, reused), CUDA_SUCCESS);
  EXPECT_NE(again, id);  // ... is a new buffer
  EXPECT_NE(again, other);
}

// Note [parameter information]: a CUkernel launched as a CUfunction is
// decoded with cuKernelGetParamInfo, whether cuFuncGetParamInfo refuses the
// handle (CUDA_ERROR_INVALID_HANDLE) or answers the ambiguous
// CUDA_ERROR_INVALID_VALUE at index 0, which is not read as "no parameters".
TEST_F(ShimCoreTest, KernelHandlesAreDecodedWithKernelParamInfo) {
  CUstream s = fake_.CreateStream();
  uint32_t decoded = 0;
  for (CUresult func_answer : {CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE}) {
    SCOPED_TRACE(func_answer);
    const CUfunction kernel = fake_.MakeKernel({8, 4, 8}, func_answer);
    CUdeviceptr a, b;
    ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
    int scalar = 5;
    void* params[] = {&a, &scalar, &b};
    ShimCore::Ticket ticket;
    ASSERT_EQ(core_->BeforeLaunch(kernel, params, nullptr, s, false, &ticket), CUDA_SUCCESS);
    fake_.EnqueueTouch(s, a, 2 * kMiB, {});
    fake_.EnqueueTouch(s, b, 2 * kMiB, {});
    ticket.Close();
    ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kDevice);
    EXPECT_EQ(core_->TEST_ResidenceOf(b), Residence::kDevice);
    ++decoded;
    EXPECT_EQ(core_->stats().kernels_decoded_as_kernel, decoded);
  }
  // A function without parameters: cuKernelGetParamInfo refuses the handle,
  // so the ambiguous answer means none.
  const CUfunction no_params = fake_.MakeFunction({});
  ShimCore::Ticket ticket;
  ASSERT_EQ(
      core_->BeforeLaunch(no_params, std::vector<void*>(1).data(), nullptr, s, false, &ticket),
      CUDA_SUCCESS);
  ticket.Close();
  const CoreStats stats = core_->stats();
  EXPECT_EQ(stats.kernels_decoded_as_function, 1u);
  EXPECT_EQ(stats.kernels_undecodable, 0u);
  EXPECT_EQ(stats.opaque_launches, 0u);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, OversubscribedDataSurvivesPagingWithoutFaults) {
  constexpr int kBlocks = 12;  // 24 MiB through an 8 MiB budget
  std::vector<CUdeviceptr> blocks(kBlocks);
  CUstream s = fake_.CreateStream();
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(Write(s, blocks[i], 2 * kMiB, i), CUDA_SUCCESS);
  }
  for (int round = 0; round < 2; ++round) {
    for (int i = kBlocks - 1; i >= 0; --i) {
      uint64_t sum = 0;
      ASSERT_EQ(Read(s, blocks[i], 2 * kMiB, &sum), CUDA_SUCCESS);
      EXPECT_EQ(sum, PatternChecksum(2 * kMiB, i)) << "block " << i;
    }
  }
  const CoreStats st = core_->stats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_GT(st.page_ins, 0u);
  EXPECT_LE(st.device_chunks_in_use, 4u);
  EXPECT_LE(fake_.device_bytes_in_use(), 8 * kMiB);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, LaunchWaitsForPageInOnTheCopyStream) {
  // The copy stream starts held: a launch that needed a fill must not run
  // until the fill ran, although its own stream is free.
  Make(&fake_.driver(), 0, 0);  // reset with defaults first to drop the old core
  fake_.set_hold_new_streams(true);
  Make(&fake_.driver(), 4 * kMiB, 64 * kMiB);
  fake_.set_hold_new_streams(false);
  CUstream copy = fake_.created_streams().back();
  CUstream s = fake_.CreateStream();
  CUdeviceptr a, b, c;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&c, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, a, 2 * kMiB, 1), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, b, 2 * kMiB, 2), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, c, 2 * kMiB, 3), CUDA_SUCCESS);  // evicts a (host waits on the copy)
  EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kHost);
  uint64_t sum = 0;
  ASSERT_EQ(Read(s, a, 2 * kMiB, &sum), CUDA_SUCCESS);  // evicts b, fills a
  EXPECT_EQ(sum, 0u) << "the read ran before its page-in was released";
  fake_.Release(copy);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 1));
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, NeverEvictsChunksOfPendingWork) {
  Make(&fake_.driver(), 4 * kMiB, 64 * kMiB);
  CUstream held = fake_.CreateStream();
  CUstream s = fake_.CreateStream();
  CUdeviceptr a, b, c;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&c, 2 * kMiB), CUDA_SUCCESS);
  fake_.Hold(held);
  ASSERT_EQ(Write(held, a, 2 * kMiB, 11), CUDA_SUCCESS);  // pending on a held stream
  ASSERT_EQ(Write(s, b, 2 * kMiB, 12), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, c, 2 * kMiB, 13), CUDA_SUCCESS);  // needs a victim: b, not a
  EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(b), Residence::kHost);
  fake_.Release(held);
  uint64_t sum = 0;
  ASSERT_EQ(Read(s, a, 2 * kMiB, &sum), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 11));
  ASSERT_EQ(Read(s, b, 2 * kMiB, &sum), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 12));
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, WaitsWhenEveryCandidateIsInFlight) {
  Make(&fake_.driver(), 4 * kMiB, 64 * kMiB);
  CUstream held = fake_.CreateStream();
  CUdeviceptr a, b, c;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&c, 2 * kMiB), CUDA_SUCCESS);
  fake_.Hold(held);
  ASSERT_EQ(Write(held, a, 2 * kMiB, 21), CUDA_SUCCESS);
  ASSERT_EQ(Write(held, b, 2 * kMiB, 22), CUDA_SUCCESS);
  // c needs a chunk; a and b are pending: the shim must wait, not remap them.
  ASSERT_EQ(Write(held, c, 2 * kMiB, 23), CUDA_SUCCESS);
  EXPECT_GT(core_->stats().host_waits, 0u);
  fake_.Release(held);
  ExpectPatterns(held, 2 * kMiB, {{a, 21}, {b, 22}, {c, 23}});
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, OpaqueKernelsReachEveryChunkWithoutFaults) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks(8);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
    if (i < 6) {
      ASSERT_EQ(Write(s, blocks[i], 2 * kMiB, 100 + i), CUDA_SUCCESS);
    }
  }
  // blocks 6, 7 were never touched (unbacked); 0..1 are in the host tier.
  CUfunction opaque = fake_.MakeFunction({}, /*opaque=*/true);
  std::vector<uint64_t> sums(8, 0);
  void* no_args[] = {nullptr};
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeLaunch(opaque, no_args, nullptr, s, false, &ticket), CUDA_SUCCESS);
  for (int i = 0; i < 8; ++i) {
    CUdeviceptr p = blocks[i];
    fake_.EnqueueTouch(s, p, 2 * kMiB,
                       [p, i, &sums] { sums[i] = Checksum(reinterpret_cast<void*>(p), 2 * kMiB); });
  }
  ticket.Close();
  EXPECT_EQ(fake_.faults(), 0u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(sums[i], PatternChecksum(2 * kMiB, 100 + i));
  EXPECT_EQ(core_->stats().opaque_launches, 1u);
}

// Note [graph residency]: an instantiated graph's kernel arguments and
// copy/memset ranges are recorded; each launch makes exactly those resident.
TEST_F(ShimCoreTest, GraphLaunchMakesItsReferencesResident) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks(8);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(Write(s, blocks[i], 2 * kMiB, 200 + i), CUDA_SUCCESS);
  }
  for (int i = 0; i < 4; ++i) ASSERT_EQ(core_->TEST_ResidenceOf(blocks[i]), Residence::kHost) << i;
  CUgraph graph = fake_.MakeGraph();
  fake_.AddKernelNode(graph, Function(2), {blocks[0], 7});  // a pointer and a scalar
  fake_.AddKernelNode(graph, Function(1), {blocks[1] + 4096}, /*via_extra=*/true);
  fake_.AddMemsetNode(graph, blocks[2] + kMiB / 2, kMiB);
  fake_.AddMemcpyNode(graph, blocks[3] + kMiB, blocks[3], kMiB);
  fake_.AddNode(graph, CU_GRAPH_NODE_TYPE_HOST);
  fake_.AddNode(graph, CU_GRAPH_NODE_TYPE_EMPTY);
  const CUgraphExec exec = reinterpret_cast<CUgraphExec>(0x1000);
  core_->OnGraphInstantiate(exec, graph);
  ShimCore::GraphPlanInfo info = core_->TEST_GraphPlanOf(exec);
  ASSERT_TRUE(info.known);
  ASSERT_TRUE(info.decodable);
  EXPECT_EQ(info.nodes, 6u);
  EXPECT_EQ(info.words, 2u);   // the scalar is not in the reservation
  EXPECT_EQ(info.ranges, 3u);  // memset, copy source, copy destination

  uint64_t paged_in = 0;  // the graph's blocks found in host memory by its launches
  for (int round = 0; round < 2; ++round) {
    const CoreStats before = core_->stats();
    uint32_t on_host = 0;
    for (int i = 0; i < 4; ++i) on_host += core_->TEST_ResidenceOf(blocks[i]) == Residence::kHost;
    EXPECT_GT(on_host, 0u) << "reading the other blocks evicted none of the graph's";
    paged_in += on_host;
    ShimCore::Ticket ticket;
    ASSERT_EQ(core_->BeforeGraphLaunch(exec, s, false, &ticket), CUDA_SUCCESS);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(core_->TEST_ResidenceOf(blocks[i]), Residence::kDevice) << i;
    std::vector<uint64_t> sums(4, 0);
    for (int i = 0; i < 4; ++i) {  // the graph's work, as the driver would run it
      CUdeviceptr p = blocks[i];
      fake_.EnqueueTouch(s, p, 2 * kMiB, [p, i, &sums] {
        sums[i] = Checksum(reinterpret_cast<void*>(p), 2 * kMiB);
      });
    }
    ticket.Close();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(sums[i], PatternChecksum(2 * kMiB, 200 + i)) << i;
    const CoreStats after = core_->stats();
    EXPECT_EQ(after.opaque_launches, before.opaque_launches);
    EXPECT_GE(after.page_ins - before.page_ins, on_host);
    // The rest of the data comes back for the next round: the graph's blocks
    // are evicted again (those the policy expects to be used last).
    for (int i = 4; i < 8; ++i) {
      uint64_t sum = 0;
      ASSERT_EQ(Read(s, blocks[i], 2 * kMiB, &sum), CUDA_SUCCESS);
      EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 200 + i));
    }
  }
  info = core_->TEST_GraphPlanOf(exec);
  EXPECT_EQ(info.launches, 2u);
  EXPECT_GE(info.page_ins, paged_in);
  EXPECT_EQ(fake_.faults(), 0u);

  // Forgotten (destroyed or updated): launches are opaque again.
  core_->OnGraphExecForget(exec);
  EXPECT_FALSE(core_->TEST_GraphPlanOf(exec).known);
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeGraphLaunch(exec, s, false, &ticket), CUDA_SUCCESS);
  ticket.Close();
  EXPECT_EQ(core_->stats().opaque_launches, 1u);
}

TEST_F(ShimCoreTest, PrecomputedReferencesAreMadeResident) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks(8);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(Write(s, blocks[i], 2 * kMiB, 300 + i), CUDA_SUCCESS);
  }
  ASSERT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kHost);
  ASSERT_EQ(core_->TEST_ResidenceOf(blocks[1]), Residence::kHost);
  const uint64_t words[] = {blocks[0] + 100, 42};  // an interior pointer and a scalar
  const MemRange ranges[] = {{blocks[1] + kMiB, 16}};
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeReferences(words, 2, ranges, 1, s, false, &ticket), CUDA_SUCCESS);
  ticket.Close();
  EXPECT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(blocks[1] + kMiB), Residence::kDevice);
  uint64_t sum = 0;
  ASSERT_EQ(Read(s, blocks[0], 2 * kMiB, &sum), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 300));
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, GraphsWithUndecodableNodesStayOpaque) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr p;
  ASSERT_EQ(core_->Alloc(&p, 2 * kMiB), CUDA_SUCCESS);
  CUgraph undecodable_kernel = fake_.MakeGraph();
  fake_.AddKernelNode(undecodable_kernel, Function(1), {p});
  fake_.AddKernelNode(undecodable_kernel, fake_.MakeFunction({}, /*opaque=*/true), {p});
  CUgraph batch = fake_.MakeGraph();
  fake_.AddKernelNode(batch, Function(1), {p});
  fake_.AddNode(batch, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  CUgraph child = fake_.MakeGraph();
  fake_.AddNode(child, CU_GRAPH_NODE_TYPE_CONDITIONAL);
  CUgraph parent = fake_.MakeGraph();
  fake_.AddChildGraphNode(parent, child);
  uint64_t opaque = 0;
  for (CUgraph g : {undecodable_kernel, batch, parent}) {
    const CUgraphExec exec = reinterpret_cast<CUgraphExec>(g);
    core_->OnGraphInstantiate(exec, g);
    const ShimCore::GraphPlanInfo info = core_->TEST_GraphPlanOf(exec);
    EXPECT_TRUE(info.known);
    EXPECT_FALSE(info.decodable);
    ShimCore::Ticket ticket;
    ASSERT_EQ(core_->BeforeGraphLaunch(exec, s, false, &ticket), CUDA_SUCCESS);
    ticket.Close();
    EXPECT_EQ(core_->stats().opaque_launches, ++opaque);
  }
  // An exec instantiated before the core knew about it has no record.
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeGraphLaunch(reinterpret_cast<CUgraphExec>(0x2000), s, false, &ticket),
            CUDA_SUCCESS);
  ticket.Close();
  EXPECT_EQ(core_->stats().opaque_launches, ++opaque);
}

TEST_F(ShimCoreTest, ChildGraphsAreWalked) {
  CUdeviceptr a, b;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  CUgraph child = fake_.MakeGraph();
  fake_.AddKernelNode(child, Function(1), {a});
  CUgraph parent = fake_.MakeGraph();
  fake_.AddChildGraphNode(parent, child);
  fake_.AddMemsetNode(parent, b, 64);
  const CUgraphExec exec = reinterpret_cast<CUgraphExec>(0x3000);
  core_->OnGraphInstantiate(exec, parent);
  const ShimCore::GraphPlanInfo info = core_->TEST_GraphPlanOf(exec);
  EXPECT_TRUE(info.decodable);
  EXPECT_EQ(info.nodes, 3u);
  EXPECT_EQ(info.words, 1u);
  EXPECT_EQ(info.ranges, 1u);
  CUstream s = fake_.CreateStream();
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeGraphLaunch(exec, s, false, &ticket), CUDA_SUCCESS);
  ticket.Close();
  EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(b), Residence::kDevice);
  EXPECT_EQ(core_->stats().opaque_launches, 0u);
}

// Note [graph planning outside the lock]: while a graph is walked, other
// threads' calls into the core are served. The walk's first node-type query
// starts an allocation on another thread and waits (up to 20 s) for it to
// return.
std::function<void()> during_node_type_query;
CUresult (*forwarded_node_type_query)(CUgraphNode, CUgraphNodeType*) = nullptr;

CUresult NodeTypeQueryWithHook(CUgraphNode node, CUgraphNodeType* type) {
  // Runs once: taken out before it runs.
  if (std::function<void()> hook = std::exchange(during_node_type_query, nullptr)) hook();
  return forwarded_node_type_query(node, type);
}

TEST_F(ShimCoreTest, GraphPlanningLetsOtherThreadsUseTheCore) {
  static Driver hooked;  // outlives the core, which the fixture destroys last
  hooked = fake_.driver();
  forwarded_node_type_query = hooked.cuGraphNodeGetType;
  hooked.cuGraphNodeGetType = &NodeTypeQueryWithHook;
  Make(&hooked, 8 * kMiB, 64 * kMiB);
  CUdeviceptr a;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  CUgraph graph = fake_.MakeGraph();
  fake_.AddKernelNode(graph, Function(1), {a});
  bool served_during_walk = false;
  CUdeviceptr b = 0;
  std::promise<CUresult> done;
  std::future<CUresult> result = done.get_future();
  std::thread other;  // joined once the walk is over (it waits for the lock if the walk held it)
  during_node_type_query = [&] {
    other = std::thread([&] { done.set_value(core_->Alloc(&b, 2 * kMiB)); });
    served_during_walk = result.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  };
  const CUgraphExec exec = reinterpret_cast<CUgraphExec>(0x4000);
  core_->OnGraphInstantiate(exec, graph);
  during_node_type_query = nullptr;
  if (other.joinable()) other.join();
  EXPECT_TRUE(served_during_walk);
  EXPECT_EQ(result.get(), CUDA_SUCCESS);
  EXPECT_NE(b, 0u);
  const ShimCore::GraphPlanInfo info = core_->TEST_GraphPlanOf(exec);
  EXPECT_TRUE(info.decodable);
  EXPECT_EQ(info.words, 1u);
}

// Note [waits outside the lock]: an operation that must wait for pending
// work waits without the core lock, so another thread can use the core
// meanwhile; the operation then completes with every byte in place.
class ShimCoreWaitTest : public ShimCoreTest {
 protected:
  // Make() over the fake driver with cuEventSynchronize hooked.
  void MakeHooked(uint64_t device_budget, uint64_t host_budget, const char* policy = nullptr) {
    Make(HookEventSync(fake_.driver()), device_budget, host_budget, policy);
  }

  // Allocates `count` 2 MiB blocks and writes them on `held`, which it
  // holds (the writes stay queued); (block, seed) pairs, seeds from
  // `first_seed`.
  std::vector<std::pair<CUdeviceptr, uint64_t>> WriteBlocksOnHeldStream(CUstream held, int count,
                                                                        uint64_t first_seed) {
    std::vector<std::pair<CUdeviceptr, uint64_t>> blocks;
    for (int i = 0; i < count; ++i) {
      CUdeviceptr p = 0;
      EXPECT_EQ(core_->Alloc(&p, 2 * kMiB), CUDA_SUCCESS);
      blocks.push_back({p, first_seed + i});
    }
    fake_.Hold(held);
    for (const auto& [p, seed] : blocks) EXPECT_EQ(Write(held, p, 2 * kMiB, seed), CUDA_SUCCESS);
    return blocks;
  }

  // A 4 MiB handle the application creates and maps in a reservation of its
  // own (*base), written with the pattern of `seed` on `held`, which it
  // holds.
  void WriteAppHandleOnHeldStream(CUstream held, uint64_t seed, CUdeviceptr* base,
                                  CUmemGenericAllocationHandle* handle) {
    ASSERT_NO_FATAL_FAILURE(MapAppHandle(4 * kMiB, base, handle));
    fake_.Hold(held);
    ASSERT_EQ(Write(held, *base, 4 * kMiB, seed), CUDA_SUCCESS);
  }

  // A device of four chunks, each holding a block written on a held stream
  // (*blocks: (block, seed), seeds from `first_seed`); `lower` lowers the
  // device limit to two chunks. Checks that it waited for the held work
  // without the core lock (another thread's cuMemGetInfo ended meanwhile),
  // that the device then holds at most two chunks, and that every block
  // kept its bytes.
  void LowerTheLimitWhileEveryChunkIsInUse(const std::function<void()>& lower, uint64_t first_seed,
                                           std::vector<std::pair<CUdeviceptr, uint64_t>>* blocks);

  struct WaitOutcome {
    CUresult result = CUDA_ERROR_UNKNOWN;        // the waiting operation's
    bool waited = false;                         // it synchronized an event
    bool served_during_wait = false;             // `other` ended within the wait
    CUresult other_result = CUDA_ERROR_UNKNOWN;  // if waited
  };
  // The operation waited for pending work (it synchronized an event), else
  // fails with `not_waited`, and the other thread's call ended, successfully,
  // during that wait: the wait was made without the core lock. Use under
  // ASSERT_NO_FATAL_FAILURE.
  static void ExpectServedDuringWait(const WaitOutcome& w, const char* not_waited) {
    ASSERT_TRUE(w.waited) << not_waited;
    EXPECT_TRUE(w.served_during_wait) << "the wait was made under the core lock";
    EXPECT_EQ(w.other_result, CUDA_SUCCESS);
  }
  // Runs `op` here; at its first event synchronization, starts `other` on
  // another thread and gives it 20 s to end before the wait goes on (with
  // the wait under the core lock, `other` waits for the lock until then).
  // REQUIRES: MakeHooked().
  WaitOutcome RunWithOtherDuringWait(const std::function<CUresult()>& op,
                                     const std::function<CUresult()>& other) {
    WaitOutcome outcome;
    std::promise<CUresult> done;
    std::future<CUresult> result = done.get_future();
    std::thread thread;  // joined after the wait
    during_event_sync = [&] {
      thread = std::thread([&] { done.set_value(other()); });
      outcome.served_during_wait =
          result.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    };
    outcome.result = op();
    during_event_sync = nullptr;
    outcome.waited = thread.joinable();
    if (outcome.waited) {
      thread.join();
      outcome.other_result = result.get();
    }
    return outcome;
  }
};

void ShimCoreWaitTest::LowerTheLimitWhileEveryChunkIsInUse(
    const std::function<void()>& lower, uint64_t first_seed,
    std::vector<std::pair<CUdeviceptr, uint64_t>>* blocks) {
  MakeHooked(8 * kMiB, 64 * kMiB);  // four device chunks
  CUstream held = fake_.CreateStream();
  *blocks = WriteBlocksOnHeldStream(held, 4, first_seed);
  ASSERT_FALSE(HasFailure());
  const uint64_t host_waits = core_->stats().host_waits;
  size_t free_bytes = 0, total_bytes = 0;
  const WaitOutcome w = RunWithOtherDuringWait(
      [&] {
        lower();  // two chunks must go; all four are in use
        return CUDA_SUCCESS;
      },
      [&] { return core_->GetInfo(&free_bytes, &total_bytes); });
  fake_.Release(held);
  ASSERT_NO_FATAL_FAILURE(ExpectServedDuringWait(w, "it did not wait for the pending work"));
  EXPECT_GT(core_->stats().host_waits, host_waits) << "the wait was made outside the lock";
  EXPECT_LE(core_->stats().device_chunks_in_use, 2u);
  ExpectPatterns(held, 2 * kMiB, *blocks);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Host slots given back to the shared host budget (GiveBackHostBytes, asked
// by another core) by moving host chunks into free device chunks: the wait
// for those copies is made without the core lock.
TEST_F(ShimCoreWaitTest, GivingHostSlotsBackWaitsForTheMovesWithoutTheLock) {
  MakeHooked(8 * kMiB, 64 * kMiB);                       // four device chunks
  const CUstream copy = fake_.created_streams().back();  // the core's copy stream
  CUstream s = fake_.CreateStream();
  std::vector<std::pair<CUdeviceptr, uint64_t>> blocks;
  for (int i = 0; i < 6; ++i) {
    CUdeviceptr p = 0;
    ASSERT_EQ(core_->Alloc(&p, 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(Write(s, p, 2 * kMiB, 300 + i), CUDA_SUCCESS);
    blocks.push_back({p, 300 + i});
  }
  // Two blocks on the device are freed: room for the two in host memory.
  std::vector<std::pair<CUdeviceptr, uint64_t>> kept;
  int freed = 0;
  for (const auto& block : blocks) {
    if (freed < 2 && core_->TEST_ResidenceOf(block.first) == Residence::kDevice) {
      ASSERT_EQ(core_->Free(block.first), CUDA_SUCCESS);
      ++freed;
    } else {
      kept.push_back(block);
    }
  }
  ASSERT_EQ(freed, 2);
  const uint32_t host_before = core_->stats().host_slots_in_use;
  ASSERT_EQ(host_before, 2u);
  fake_.Hold(copy);  // the moves' copies stay queued until waited for
  uint64_t given = 0;
  size_t free_bytes = 0, total_bytes = 0;
  const WaitOutcome w = RunWithOtherDuringWait(
      [&] {
        given = core_->GiveBackHostBytes(4 * kMiB);
        return CUDA_SUCCESS;
      },
      [&] { return core_->GetInfo(&free_bytes, &total_bytes); });
  fake_.Release(copy);
  ASSERT_NO_FATAL_FAILURE(ExpectServedDuringWait(w, "it did not wait for the copies"));
  EXPECT_EQ(given, 4 * kMiB);
  EXPECT_EQ(core_->stats().host_slots_in_use, 0u);
  for (const auto& [p, seed] : kept) {
    EXPECT_EQ(core_->TEST_ResidenceOf(p), Residence::kDevice) << seed;
  }
  ExpectPatterns(s, 2 * kMiB, kept);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreWaitTest, EvictionWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(4 * kMiB, 64 * kMiB);
  CUstream held = fake_.CreateStream();
  CUdeviceptr a, b, c;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&c, 2 * kMiB), CUDA_SUCCESS);
  fake_.Hold(held);
  ASSERT_EQ(Write(held, a, 2 * kMiB, 31), CUDA_SUCCESS);
  ASSERT_EQ(Write(held, b, 2 * kMiB, 32), CUDA_SUCCESS);
  const uint64_t launches = core_->stats().launches;
  CUdeviceptr d = 0;
  // c needs a chunk; a and b are pending on the held stream: the launch waits
  // (the fake runs held work when an event on it is synchronized).
  const WaitOutcome w = RunWithOtherDuringWait([&] { return Write(held, c, 2 * kMiB, 33); },
                                               [&] { return core_->Alloc(&d, 2 * kMiB); });
  ASSERT_EQ(w.result, CUDA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(
      ExpectServedDuringWait(w, "the launch did not wait for the pending work"));
  EXPECT_NE(d, 0u);
  const CoreStats stats = core_->stats();
  EXPECT_EQ(stats.launches, launches + 1) << "a repeated launch counts once";
  EXPECT_GT(stats.host_waits, 0u);
  fake_.Release(held);
  ExpectPatterns(held, 2 * kMiB, {{a, 31}, {b, 32}, {c, 33}});
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for an allocation whose new chunk can be backed (Note [backed
// from allocation]) only by evicting a chunk still in use: the repeat backs
// the block the first attempt allocated, which is allocated once.
TEST_F(ShimCoreWaitTest, AllocationBackingWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(4 * kMiB, 64 * kMiB);  // two device chunks
  CUstream held = fake_.CreateStream();
  CUdeviceptr a, b;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  fake_.Hold(held);
  ASSERT_EQ(Write(held, a, 2 * kMiB, 35), CUDA_SUCCESS);
  ASSERT_EQ(Write(held, b, 2 * kMiB, 36), CUDA_SUCCESS);
  const uint64_t host_waits = core_->stats().host_waits;
  size_t free_bytes = 0, total_bytes = 0;
  CUdeviceptr c = 0;
  const WaitOutcome w =
      RunWithOtherDuringWait([&] { return core_->Alloc(&c, 2 * kMiB); },
                             [&] { return core_->GetInfo(&free_bytes, &total_bytes); });
  fake_.Release(held);
  ASSERT_EQ(w.result, CUDA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(
      ExpectServedDuringWait(w, "the allocation did not wait for the chunks in use"));
  EXPECT_GT(core_->stats().host_waits, host_waits) << "the wait was made outside the lock";
  EXPECT_EQ(core_->TEST_ResidenceOf(c), Residence::kDevice) << "backed after the wait";
  EXPECT_EQ(core_->stats().committed_chunks, 3u) << "the repeat allocated nothing more";
  EXPECT_EQ(core_->stats().backed_on_host_at_allocation, 0u);
  ASSERT_EQ(Write(held, c, 2 * kMiB, 37), CUDA_SUCCESS);
  ExpectPatterns(held, 2 * kMiB, {{a, 35}, {b, 36}, {c, 37}});
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for the wait for page-out copies (Note [pipelined page-out]).
TEST_F(ShimCoreWaitTest, PageOutWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(2 * kMiB, 64 * kMiB);
  const CUstream copy = fake_.created_streams().back();  // the new core's copy stream
  CUstream s = fake_.CreateStream();
  CUdeviceptr a, b;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, a, 2 * kMiB, 41), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  fake_.Hold(copy);  // a's page-out copy stays in flight until the host waits for it
  CUdeviceptr d = 0;
  const WaitOutcome w =
      RunWithOtherDuringWait([&] { return Write(s, b, 2 * kMiB, 42); },  // pages a out
                             [&] { return core_->Alloc(&d, 2 * kMiB); });
  fake_.Release(copy);
  ASSERT_EQ(w.result, CUDA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(
      ExpectServedDuringWait(w, "the launch did not wait for the page-out copy"));
  EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kHost);
  ExpectPatterns(s, 2 * kMiB, {{a, 41}, {b, 42}});
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for a synchronous access whose page-in copy is still queued: the
// host waits for the fill without the core lock.
TEST_F(ShimCoreWaitTest, SynchronousAccessFillWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(4 * kMiB, 64 * kMiB);                       // two device chunks
  const CUstream copy = fake_.created_streams().back();  // the new core's copy stream
  CUstream s = fake_.CreateStream();
  CUdeviceptr a, b, c;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, a, 2 * kMiB, 43), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, b, 2 * kMiB, 44), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&c, 2 * kMiB), CUDA_SUCCESS);  // backed by evicting a
  ASSERT_EQ(core_->TEST_ResidenceOf(a), Residence::kHost);
  ASSERT_EQ(core_->Free(c), CUDA_SUCCESS);  // its device chunk is reclaimed without a copy
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  fake_.Hold(copy);  // a's page-in copy stays queued until the host waits for it
  const uint64_t host_waits = core_->stats().host_waits;
  size_t free_bytes = 0, total_bytes = 0;
  const MemRange range{a, 2 * kMiB};
  const WaitOutcome w = RunWithOtherDuringWait(
      [&] {
        ShimCore::Ticket ticket;
        const CUresult r = core_->BeforeAccess(&range, 1, s, false, /*synchronous=*/true, &ticket);
        ticket.Close();
        return r;
      },
      [&] { return core_->GetInfo(&free_bytes, &total_bytes); });
  fake_.Release(copy);
  ASSERT_EQ(w.result, CUDA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(
      ExpectServedDuringWait(w, "the access did not wait for its page-in copy"));
  EXPECT_GT(core_->stats().host_waits, host_waits) << "the wait was made outside the lock";
  EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kDevice);
  EXPECT_EQ(core_->stats().evictions, 1u) << "nothing was paged again";
  ExpectPatterns(s, 2 * kMiB, {{a, 43}, {b, 44}});
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for an allocation that must wait for a stream-ordered free to
// take effect: the free's stream is waited for without the core lock.
TEST_F(ShimCoreWaitTest, PendingFreeWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(16 * kMiB, 16 * kMiB);  // 32 MiB of virtual capacity
  CUstream held = fake_.CreateStream();
  CUdeviceptr a, b;
  ASSERT_EQ(core_->Alloc(&a, 16 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 16 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Write(held, b, 16 * kMiB, 52), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  fake_.Hold(held);
  ASSERT_EQ(Write(held, a, 16 * kMiB, 51), CUDA_SUCCESS);
  ASSERT_EQ(core_->FreeAsync(a, held, /*per_thread=*/false), CUDA_SUCCESS);  // pending
  const uint64_t host_waits = core_->stats().host_waits;
  size_t free_bytes = 0, total_bytes = 0;
  CUdeviceptr c = 0;
  const WaitOutcome w = RunWithOtherDuringWait(
      [&] { return core_->Alloc(&c, 16 * kMiB); },  // waits for the free on `held`
      [&] { return core_->GetInfo(&free_bytes, &total_bytes); });
  fake_.Release(held);
  ASSERT_NO_FATAL_FAILURE(
      ExpectServedDuringWait(w, "the allocation did not wait for the pending free"));
  EXPECT_EQ(total_bytes, 32 * kMiB);
  ASSERT_EQ(w.result, CUDA_SUCCESS);
  EXPECT_GT(core_->stats().host_waits, host_waits) << "the wait was made outside the lock";
  ASSERT_EQ(Write(held, c, 16 * kMiB, 53), CUDA_SUCCESS);
  ExpectPatterns(held, 16 * kMiB, {{b, 52}, {c, 53}});
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for a host slot that a page-in copy still reads: an eviction that
// finds no other host slot waits for that copy without the core lock.
TEST_F(ShimCoreWaitTest, HostSlotWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(4 * kMiB, 4 * kMiB, "lru");                 // two device chunks, two host slots
  const CUstream copy = fake_.created_streams().back();  // the new core's copy stream
  CUstream s = fake_.CreateStream();
  CUdeviceptr a, b, c;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&c, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, a, 2 * kMiB, 61), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, b, 2 * kMiB, 62), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, c, 2 * kMiB, 63), CUDA_SUCCESS);  // pages a out
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_ResidenceOf(a), Residence::kHost);
  fake_.Hold(copy);
  // Pages b out (its copy runs when the page-out waits for it) and a in: a's
  // fill copy stays queued, so a's host slot is released only after it.
  ASSERT_EQ(Write(s, a, 2 * kMiB, 64), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_ResidenceOf(a), Residence::kDevice);
  ASSERT_EQ(core_->TEST_ResidenceOf(b), Residence::kHost);
  const uint64_t host_waits = core_->stats().host_waits;
  size_t free_bytes = 0, total_bytes = 0;
  // b's page-in evicts c, which needs a's host slot.
  const WaitOutcome w =
      RunWithOtherDuringWait([&] { return Write(s, b, 2 * kMiB, 65); },
                             [&] { return core_->GetInfo(&free_bytes, &total_bytes); });
  fake_.Release(copy);
  ASSERT_EQ(w.result, CUDA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(
      ExpectServedDuringWait(w, "the launch did not wait for the page-in copy"));
  EXPECT_EQ(total_bytes, 8 * kMiB);
  EXPECT_GT(core_->stats().host_waits, host_waits) << "the wait was made outside the lock";
  EXPECT_EQ(core_->TEST_ResidenceOf(b), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(c), Residence::kHost);
  ExpectPatterns(s, 2 * kMiB, {{a, 64}, {b, 65}, {c, 63}});
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for a lower device budget from the control plane: the evictions
// that must wait for work still using every chunk wait without the core lock.
TEST_F(ShimCoreWaitTest, BudgetChangeWaitLetsOtherThreadsUseTheCore) {
  std::vector<std::pair<CUdeviceptr, uint64_t>> blocks;
  LowerTheLimitWhileEveryChunkIsInUse([&] { core_->SetDeviceBudget(4 * kMiB); }, 71, &blocks);
  if (HasFatalFailure()) return;
  int on_device = 0;
  for (const auto& [p, seed] : blocks) {
    on_device += core_->TEST_ResidenceOf(p) == Residence::kDevice ? 1 : 0;
  }
  EXPECT_EQ(on_device, 2) << "the device holds what the new budget allows";
}

// The same for physical memory the application creates itself (pinned on
// the device, Note [application VMM] in shim_core_app_vmm.cc): the evictions
// that make room for it wait without the core lock.
TEST_F(ShimCoreWaitTest, AppPhysicalMemoryWaitLetsOtherThreadsUseTheCore) {
  std::vector<std::pair<CUdeviceptr, uint64_t>> blocks;
  LowerTheLimitWhileEveryChunkIsInUse([&] { core_->OnAppPhysicalCreate(/*handle=*/777, 4 * kMiB); },
                                      81, &blocks);
  if (HasFatalFailure()) return;
  EXPECT_EQ(core_->stats().device_chunk_limit, 2u);
  core_->OnAppPhysicalRelease(777);
  EXPECT_EQ(core_->stats().device_chunk_limit, 4u);
}

// The same for work on a stream whose enqueue window another thread holds
// open (its launch is between the core and its driver call, which may run
// for long: a synchronous copy): the eviction waits for the window to close
// without the core lock (Note [enqueue window] in stream_tracker.h).
TEST_F(ShimCoreWaitTest, EnqueueWindowWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(4 * kMiB, 64 * kMiB);  // two device chunks
  CUstream held = fake_.CreateStream();
  CUstream s = fake_.CreateStream();
  CUdeviceptr a, b, c;
  ASSERT_EQ(core_->Alloc(&a, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&c, 2 * kMiB), CUDA_SUCCESS);
  fake_.Hold(held);
  ASSERT_EQ(Write(held, a, 2 * kMiB, 91), CUDA_SUCCESS);
  ASSERT_EQ(Write(held, b, 2 * kMiB, 92), CUDA_SUCCESS);
  // A launch on `held` that reads a, its driver call not yet returned.
  auto window = std::make_unique<ShimCore::Ticket>();
  CUdeviceptr arg = a;
  void* params[] = {&arg};
  ASSERT_EQ(core_->BeforeLaunch(Function(1), params, nullptr, held, false, window.get()),
            CUDA_SUCCESS);
  // Its holder: once the core is usable while the launch below waits for the
  // window (20 s at most), its driver call returns.
  std::atomic<bool> waited_in_window{false};
  bool served_during_wait = false;
  std::thread holder([&] {
    std::future<void> seen = std::async(std::launch::async, [&] {
      while (!waited_in_window) {
        if (core_->stats().window_waits > 0) waited_in_window = true;
        std::this_thread::yield();
      }
      size_t free_bytes = 0, total_bytes = 0;
      EXPECT_EQ(core_->GetInfo(&free_bytes, &total_bytes), CUDA_SUCCESS);
    });
    served_during_wait = seen.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    fake_.EnqueueTouch(held, a, 2 * kMiB, {});
    window.reset();                                    // closes the window
    if (!served_during_wait) waited_in_window = true;  // ends the poll
    seen.get();
  });
  // c needs a chunk; a and b are in use on `held`, whose window is open.
  const CUresult r = Write(s, c, 2 * kMiB, 93);
  holder.join();
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_TRUE(served_during_wait) << "the core was locked while the launch waited for the window";
  EXPECT_GT(core_->stats().window_waits, 0u);
  fake_.Release(held);
  ExpectPatterns(held, 2 * kMiB, {{a, 91}, {b, 92}, {c, 93}});
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for the application's own VMM calls that the driver makes
// synchronous (Note [application VMM] in shim_core_app_vmm.cc): cuMemUnmap of
// a mapping whose work is still queued waits for it without the core lock.
TEST_F(ShimCoreWaitTest, AppUnmapWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(8 * kMiB, 64 * kMiB);
  CUstream held = fake_.CreateStream();
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle handle = 0;
  WriteAppHandleOnHeldStream(held, 95, &base, &handle);
  ASSERT_FALSE(HasFailure());
  CUdeviceptr d = 0;
  const WaitOutcome w = RunWithOtherDuringWait([&] { return core_->AppUnmap(base, 4 * kMiB); },
                                               [&] { return core_->Alloc(&d, 2 * kMiB); });
  fake_.Release(held);
  ASSERT_EQ(w.result, CUDA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(ExpectServedDuringWait(w, "the unmap did not wait for the queued work"));
  EXPECT_EQ(core_->AppUnmap(base, 4 * kMiB), CUDA_ERROR_INVALID_VALUE) << "unmapped once";
  EXPECT_EQ(fake_.faults(), 0u) << "the queued write ran before the range was unmapped";
  ASSERT_EQ(core_->AppRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(core_->AppAddressFree(base, 4 * kMiB), CUDA_SUCCESS);
}

// The same for cuMemMap of a handle whose chunks can be backed (Note [backed
// from allocation]) only by evicting chunks still in use: the repeat backs the
// mapping the first attempt made (a second mapping of the handle would fail).
TEST_F(ShimCoreWaitTest, AppMapBackingWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(4 * kMiB, 64 * kMiB);  // two device chunks
  CUstream held = fake_.CreateStream();
  const auto blocks = WriteBlocksOnHeldStream(held, 2, 41);
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(core_->AppReserve(4 * kMiB, 0, &base), CUDA_SUCCESS);
  ASSERT_EQ(core_->AppCreate(4 * kMiB, AppProp(), &handle), CUDA_SUCCESS);
  const uint64_t host_waits = core_->stats().host_waits;
  size_t free_bytes = 0, total_bytes = 0;
  const WaitOutcome w =
      RunWithOtherDuringWait([&] { return core_->AppMap(base, 4 * kMiB, 0, handle); },
                             [&] { return core_->GetInfo(&free_bytes, &total_bytes); });
  fake_.Release(held);
  ASSERT_EQ(w.result, CUDA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(
      ExpectServedDuringWait(w, "the mapping did not wait for the chunks in use"));
  EXPECT_GT(core_->stats().host_waits, host_waits) << "the wait was made outside the lock";
  EXPECT_EQ(core_->stats().backed_on_host_at_allocation, 0u);
  EXPECT_EQ(core_->TEST_ResidenceOf(base), Residence::kDevice) << "backed after the wait";
  EXPECT_EQ(core_->AppMap(base, 4 * kMiB, 0, handle), CUDA_ERROR_INVALID_VALUE) << "mapped once";
  ASSERT_EQ(Write(held, base, 4 * kMiB, 43), CUDA_SUCCESS);
  ExpectPatterns(held, 2 * kMiB, {{blocks[0].first, 41}, {blocks[1].first, 42}});
  ExpectPatterns(held, 4 * kMiB, {{base, 43}});
  EXPECT_EQ(fake_.faults(), 0u);
  ASSERT_EQ(core_->AppUnmap(base, 4 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->AppRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(core_->AppAddressFree(base, 4 * kMiB), CUDA_SUCCESS);
}

// The same for an export (Note [exported handles]): the handle's bytes move
// to driver memory after the work using them, waited for without the lock.
TEST_F(ShimCoreWaitTest, AppExportWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(8 * kMiB, 64 * kMiB);
  CUstream held = fake_.CreateStream();
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle handle = 0;
  WriteAppHandleOnHeldStream(held, 96, &base, &handle);
  ASSERT_FALSE(HasFailure());
  int fd = -1;
  size_t free_bytes = 0, total_bytes = 0;
  const WaitOutcome w = RunWithOtherDuringWait(
      [&] { return core_->AppExport(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0); },
      [&] { return core_->GetInfo(&free_bytes, &total_bytes); });
  fake_.Release(held);
  ASSERT_EQ(w.result, CUDA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(ExpectServedDuringWait(w, "the export did not wait for the queued work"));
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ExportedChecksum(fd, 4 * kMiB), PatternChecksum(4 * kMiB, 96)) << "the queued write";
  EXPECT_TRUE(core_->IsForeign(base, 4 * kMiB));
  EXPECT_EQ(core_->stats().device_chunk_limit, 2u) << "pinned in the device budget";
  EXPECT_EQ(fake_.faults(), 0u);
}

// Note [exports in flight]: the export's own copies into driver memory are
// waited for without the lock too; a write that another thread launches on
// the handle meanwhile waits for the export and lands in the driver memory.
TEST_F(ShimCoreWaitTest, AppExportCopyWaitLetsOtherThreadsUseTheCore) {
  MakeHooked(8 * kMiB, 64 * kMiB);
  const CUstream copy = fake_.created_streams().back();  // the new core's copy stream
  CUstream s = fake_.CreateStream();
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_NO_FATAL_FAILURE(MapAppHandle(4 * kMiB, &base, &handle));
  ASSERT_EQ(Write(s, base, 4 * kMiB, 97), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);  // nothing but the copies to wait for
  fake_.Hold(copy);
  // The other thread's write runs only once the export copied: without the
  // wait for the export it would land in the memory the export replaces.
  CUstream later = fake_.CreateStream();
  fake_.Hold(later);
  const uint64_t host_waits = core_->stats().host_waits;
  int fd = -1;
  const WaitOutcome w = RunWithOtherDuringWait(
      [&] { return core_->AppExport(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0); },
      [&] { return Write(later, base, 4 * kMiB, 98); });
  fake_.Release(copy);
  fake_.Release(later);
  ASSERT_EQ(w.result, CUDA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(ExpectServedDuringWait(w, "the export did not wait for its copies"));
  EXPECT_GT(core_->stats().host_waits, host_waits) << "the wait was made outside the lock";
  EXPECT_TRUE(core_->IsForeign(base, 4 * kMiB));
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ExportedChecksum(fd, 4 * kMiB), PatternChecksum(4 * kMiB, 98))
      << "the write made during the export is in the exported memory";
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for an opaque or fenced launch, which finishes the look-ahead
// page-outs in flight first (Note [pipelined page-out]).
class ShimCoreLookaheadWaitTest : public ShimCoreWaitTest {
 protected:
  // Pages block 0 out and leaves block 1's page-out in flight, then runs
  // `launch` on a stream while another thread allocates: the allocation must
  // complete while the launch waits for the page-out copy.
  void ExpectWaitWithoutTheLock(
      const std::function<CUresult(CUstream, ShimCore::Ticket*)>& launch) {
    lookahead_min_chunks_ = 16;  // one-chunk batches and look-ahead at 16 chunks
    MakeHooked(32 * kMiB, 96 * kMiB, "lru");
    const CUstream copy = fake_.created_streams().back();  // the new core's copy stream
    CUstream s = fake_.CreateStream();
    constexpr int kBlocks = 17;
    std::vector<std::pair<CUdeviceptr, uint64_t>> blocks;
    for (int i = 0; i < kBlocks; ++i) {
      CUdeviceptr p;
      ASSERT_EQ(core_->Alloc(&p, 2 * kMiB), CUDA_SUCCESS);
      ASSERT_EQ(Write(s, p, 2 * kMiB, 700 + i), CUDA_SUCCESS);
      blocks.push_back({p, 700 + i});
      // The eviction for the last block pages block 0 out and starts block
      // 1's page-out, which stays in flight.
      if (i == kBlocks - 2) fake_.Hold(copy);
    }
    ASSERT_EQ(core_->TEST_ResidenceOf(blocks[0].first), Residence::kHost);
    CUdeviceptr d = 0;
    const WaitOutcome w = RunWithOtherDuringWait(
        [&] {
          ShimCore::Ticket ticket;
          const CUresult launched = launch(s, &ticket);
          if (launched == CUDA_SUCCESS) ticket.Close();
          return launched;
        },
        [&] { return core_->Alloc(&d, 2 * kMiB); });
    fake_.Release(copy);
    ASSERT_EQ(w.result, CUDA_SUCCESS);
    ASSERT_NO_FATAL_FAILURE(
        ExpectServedDuringWait(w, "the launch did not wait for the page-out copy"));
    ExpectPatterns(s, 2 * kMiB, blocks);
    EXPECT_EQ(fake_.faults(), 0u);
  }
};

TEST_F(ShimCoreLookaheadWaitTest, OpaqueLaunch) {
  CUfunction opaque = fake_.MakeFunction({}, /*opaque=*/true);
  ExpectWaitWithoutTheLock([&](CUstream s, ShimCore::Ticket* ticket) {
    void* no_args[] = {nullptr};
    return core_->BeforeLaunch(opaque, no_args, nullptr, s, false, ticket);
  });
  EXPECT_EQ(core_->stats().opaque_launches, 1u);
}

TEST_F(ShimCoreLookaheadWaitTest, FencedLaunch) {
  // A 128-byte parameter without a plain address (Note [hidden reach]).
  CUfunction f = fake_.MakeFunction({128});
  unsigned char tensor_map[128] = {};
  ExpectWaitWithoutTheLock([&](CUstream s, ShimCore::Ticket* ticket) {
    void* args[] = {tensor_map};
    return core_->BeforeLaunch(f, args, nullptr, s, false, ticket);
  });
  EXPECT_EQ(core_->stats().fenced_launches, 1u);
  EXPECT_EQ(core_->stats().opaque_launches, 0u);
}

// Note [eviction]: the policy's first choice is taken although its last
// write is still queued, when that write is on the stream of the launch that
// needs the room (the launch runs after it anyway; the host waits for it),
// and not when it is on another stream: then an idle chunk goes instead.
TEST_F(ShimCoreTest, AVictimStillInUseOnTheLaunchStreamIsTaken) {
  for (const bool same_stream : {true, false}) {
    SCOPED_TRACE(same_stream ? "same stream" : "other stream");
    Make(&fake_.driver(), 8 * kMiB, 64 * kMiB, "lru");  // four device chunks
    CUstream s = fake_.CreateStream(), other = fake_.CreateStream(), idle = fake_.CreateStream();
    CUstream queued = same_stream ? s : other;
    std::vector<CUdeviceptr> blocks(5);
    for (CUdeviceptr& b : blocks) ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
    fake_.Hold(queued);
    ASSERT_EQ(Write(queued, blocks[0], 2 * kMiB, 60), CUDA_SUCCESS);  // least recently used
    for (int i = 1; i < 4; ++i) ASSERT_EQ(Write(idle, blocks[i], 2 * kMiB, 60 + i), CUDA_SUCCESS);
    fake_.Hold(s);
    ASSERT_EQ(Write(s, blocks[4], 2 * kMiB, 64), CUDA_SUCCESS);  // needs a victim
    EXPECT_EQ(core_->TEST_ResidenceOf(blocks[0]),
              same_stream ? Residence::kHost : Residence::kDevice);
    EXPECT_EQ(core_->TEST_ResidenceOf(blocks[1]),
              same_stream ? Residence::kDevice : Residence::kHost);
    fake_.Release(s);
    fake_.Release(other);
    std::vector<std::pair<CUdeviceptr, uint64_t>> expected;
    for (int i = 0; i < 5; ++i) expected.push_back({blocks[i], 60 + i});
    ExpectPatterns(idle, 2 * kMiB, expected);
    EXPECT_EQ(fake_.faults(), 0u);
  }
}

// Note [fenced page-outs] (shim_core_hidden_reach.cc): a launch with hidden
// reach that evicts for its own chunks starts no look-ahead page-out, which
// it would have to wait for under the lock before its kernel may run; a
// decoded launch in the same state starts one.
TEST_F(ShimCoreTest, AFencedLaunchStartsNoLookAheadPageOut) {
  lookahead_min_chunks_ = 16;  // one-chunk batches and look-ahead at 16 chunks
  Make(&fake_.driver(), 32 * kMiB, 96 * kMiB, "lru");
  CUstream s = fake_.CreateStream();
  std::vector<std::pair<CUdeviceptr, uint64_t>> blocks;
  for (int i = 0; i < 18; ++i) {
    CUdeviceptr p;
    ASSERT_EQ(core_->Alloc(&p, 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(Write(s, p, 2 * kMiB, 800 + i), CUDA_SUCCESS);
    blocks.push_back({p, 800 + i});
  }
  uint64_t sum = 0;
  // Pages a host block in on a full device with `launch`: the evictions.
  auto evictions_to_page_in = [&](const std::function<CUresult(CUdeviceptr)>& launch) {
    EXPECT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);  // finishes the page-outs in flight
    CUdeviceptr on_host = 0;
    for (const auto& [p, seed] : blocks) {
      if (core_->TEST_ResidenceOf(p) != Residence::kHost) continue;
      const CoreStats now = core_->stats();
      if (now.device_chunks_in_use < now.device_chunk_limit) {
        EXPECT_EQ(Read(s, p, 2 * kMiB, &sum), CUDA_SUCCESS);  // fills the room left
      } else {
        on_host = p;
      }
    }
    EXPECT_NE(on_host, 0u);
    EXPECT_EQ(core_->stats().device_chunks_in_use, core_->stats().device_chunk_limit);
    const uint64_t before = core_->stats().evictions;
    EXPECT_EQ(launch(on_host), CUDA_SUCCESS);
    EXPECT_EQ(core_->TEST_ResidenceOf(on_host), Residence::kDevice);
    EXPECT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    return core_->stats().evictions - before;
  };
  EXPECT_EQ(evictions_to_page_in([&](CUdeviceptr p) { return Read(s, p, 2 * kMiB, &sum); }), 2u)
      << "the decoded launch evicts one chunk and pages one more out ahead";
  // Its address, and a 128-byte parameter without one (Note [hidden reach]).
  CUfunction fenced = fake_.MakeFunction({8, 128});
  unsigned char tensor_map[128] = {};
  EXPECT_EQ(evictions_to_page_in([&](CUdeviceptr p) {
              void* args[] = {&p, tensor_map};
              ShimCore::Ticket ticket;
              return core_->BeforeLaunch(fenced, args, nullptr, s, false, &ticket);
            }),
            1u);
  EXPECT_EQ(core_->stats().fenced_launches, 1u);
  ExpectPatterns(s, 2 * kMiB, blocks);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, AllocationBeyondVirtualCapacityFailsCleanly) {
  std::vector<CUdeviceptr> blocks;
  CUdeviceptr p;
  while (core_->Alloc(&p, 8 * kMiB) == CUDA_SUCCESS) blocks.push_back(p);
  EXPECT_EQ(blocks.size(), 9u);  // 72 MiB of capacity
  EXPECT_EQ(core_->Alloc(&p, 8 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  CUstream s = fake_.CreateStream();
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_EQ(Write(s, blocks[i], 8 * kMiB, i), CUDA_SUCCESS);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    uint64_t sum;
    ASSERT_EQ(Read(s, blocks[i], 8 * kMiB, &sum), CUDA_SUCCESS);
    EXPECT_EQ(sum, PatternChecksum(8 * kMiB, i));
  }
  ASSERT_EQ(core_->Free(blocks[0]), CUDA_SUCCESS);
  EXPECT_EQ(core_->Alloc(&p, 8 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Note [host tier preconditions]: the tier is off from the start and the
// capacity is the device budget; data within it is paged as usual.
void ExpectDeviceBudgetIsTheCapacity(
    ShimCore* core, testing::FakeDriver* fake,
    const std::function<CUresult(CUstream, CUdeviceptr, uint64_t, uint64_t*)>& read,
    const std::function<CUresult(CUstream, CUdeviceptr, uint64_t, uint64_t)>& write) {
  size_t free = 0, total = 0;
  ASSERT_EQ(core->GetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 8 * kMiB);  // the device budget only
  EXPECT_EQ(core->stats().host_slot_limit, 0u);
  std::vector<CUdeviceptr> blocks(2);
  for (CUdeviceptr& b : blocks) ASSERT_EQ(core->Alloc(&b, 4 * kMiB), CUDA_SUCCESS);
  CUdeviceptr more;
  EXPECT_EQ(core->Alloc(&more, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  CUstream s = fake->CreateStream();
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_EQ(write(s, blocks[i], 4 * kMiB, i + 1), CUDA_SUCCESS);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    uint64_t sum = 0;
    ASSERT_EQ(read(s, blocks[i], 4 * kMiB, &sum), CUDA_SUCCESS);
    EXPECT_EQ(sum, PatternChecksum(4 * kMiB, i + 1));
  }
  ASSERT_EQ(core->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(core->stats().evictions, 0u);
  ASSERT_EQ(core->Free(blocks[0]), CUDA_SUCCESS);
  EXPECT_EQ(core->Alloc(&more, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fake->faults(), 0u);
}

TEST_F(ShimCoreTest, WithoutHostNumaSupportTheHostTierIsOff) {
  fake_.set_host_numa_supported(false);
  Make(&fake_.driver(), 8 * kMiB, 64 * kMiB);
  ExpectDeviceBudgetIsTheCapacity(
      core_.get(), &fake_,
      [this](CUstream s, CUdeviceptr p, uint64_t b, uint64_t* sum) { return Read(s, p, b, sum); },
      [this](CUstream s, CUdeviceptr p, uint64_t b, uint64_t seed) {
        return Write(s, p, b, seed);
      });
}

TEST_F(ShimCoreTest, HostSlotThatCannotBeCreatedAtInitializationTurnsTheTierOff) {
  testing::FaultInjector* faults = NewFaultInjector();
  faults->FailMemCreate(1);  // the first cuMemCreate is the host tier's first slot
  Make(&faults->driver(), 8 * kMiB, 64 * kMiB);
  Disarm();
  ExpectDeviceBudgetIsTheCapacity(
      core_.get(), &fake_,
      [this](CUstream s, CUdeviceptr p, uint64_t b, uint64_t* sum) { return Read(s, p, b, sum); },
      [this](CUstream s, CUdeviceptr p, uint64_t b, uint64_t seed) {
        return Write(s, p, b, seed);
      });
}

// Note [peer access]: a driver with three devices, of which only device 1 can
// access device 0's memory. Every cuMemSetAccess of the core (device 0) names
// device 0 and device 1, read/write, and nothing else.
std::vector<std::vector<int>>* g_access_lists = nullptr;
const Driver* g_access_base = nullptr;

CUresult RecordingSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                            size_t count) {
  std::vector<int> devices;
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ(desc[i].location.type, CU_MEM_LOCATION_TYPE_DEVICE);
    EXPECT_EQ(desc[i].flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    devices.push_back(desc[i].location.id);
  }
  g_access_lists->push_back(devices);
  return g_access_base->cuMemSetAccess(ptr, size, desc, count);
}

CUresult ThreeDevices(int* count) {
  *count = 3;
  return CUDA_SUCCESS;
}

CUresult OnlyDeviceOneReachesDeviceZero(int* can, CUdevice device, CUdevice peer) {
  *can = device == 1 && peer == 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

TEST_F(ShimCoreTest, MappingsGrantAccessToTheDevicesThatCanAccessThisOne) {
  std::vector<std::vector<int>> lists;
  g_access_lists = &lists;
  g_access_base = &fake_.driver();
  Driver driver = fake_.driver();
  driver.cuMemSetAccess = &RecordingSetAccess;
  driver.cuDeviceGetCount = &ThreeDevices;
  driver.cuDeviceCanAccessPeer = &OnlyDeviceOneReachesDeviceZero;
  Make(&driver, 4 * kMiB, 64 * kMiB);
  std::vector<CUdeviceptr> blocks(4);
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(Write(nullptr, blocks[i], 2 * kMiB, i), CUDA_SUCCESS);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {  // paged back in from the host tier
    uint64_t sum = 0;
    ASSERT_EQ(Read(nullptr, blocks[i], 2 * kMiB, &sum), CUDA_SUCCESS);
    ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    EXPECT_EQ(sum, PatternChecksum(2 * kMiB, i));
  }
  EXPECT_GT(core_->stats().page_ins, 0u);
  core_.reset();  // before the driver table it uses
  ASSERT_FALSE(lists.empty());
  for (const std::vector<int>& devices : lists) EXPECT_EQ(devices, (std::vector<int>{0, 1}));
  g_access_lists = nullptr;
}

TEST_F(ShimCoreTest, FreedChunksAreReclaimedWithoutCopies) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr a, guard, b;
  ASSERT_EQ(core_->Alloc(&a, 6 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&guard, 2 * kMiB), CUDA_SUCCESS);  // keeps a's range apart
  ASSERT_EQ(Write(s, a, 6 * kMiB, 5), CUDA_SUCCESS);        // a and guard fill the budget
  ASSERT_EQ(core_->Free(a), CUDA_SUCCESS);
  // Backed at allocation (Note [backed from allocation]): b takes a's three
  // dead chunks without a copy, then the live guard's chunk.
  ASSERT_EQ(core_->Alloc(&b, 10 * kMiB), CUDA_SUCCESS);  // does not fit in a's range
  ASSERT_NE(b, a);
  ASSERT_EQ(Write(s, b, 6 * kMiB, 6), CUDA_SUCCESS);
  const CoreStats st = core_->stats();
  EXPECT_GE(st.drops, 3u);
  EXPECT_LE(st.evictions, 1u);  // dead data is never copied out: only the guard's chunk
  uint64_t sum;
  ASSERT_EQ(Read(s, b, 6 * kMiB, &sum), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(6 * kMiB, 6));
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, FreeAsyncDefersReuseUntilTheStreamPassedIt) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr a;
  ASSERT_EQ(core_->Alloc(&a, 4096), CUDA_SUCCESS);
  fake_.Hold(s);
  ASSERT_EQ(Write(s, a, 4096, 1), CUDA_SUCCESS);
  ASSERT_EQ(core_->FreeAsync(a, s, false), CUDA_SUCCESS);
  CUdeviceptr b;
  ASSERT_EQ(core_->Alloc(&b, 4096), CUDA_SUCCESS);
  EXPECT_NE(a, b);  // a's pending work has not run yet
  fake_.Release(s);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  CUdeviceptr c;
  ASSERT_EQ(core_->Alloc(&c, 4096), CUDA_SUCCESS);
  EXPECT_EQ(c, a);
}

TEST_F(ShimCoreTest, FreeDefersReuseWhileWorkUsesTheBlock) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr a;
  ASSERT_EQ(core_->Alloc(&a, 4 * kMiB), CUDA_SUCCESS);
  fake_.Hold(s);
  ASSERT_EQ(Write(s, a, 4 * kMiB, 1), CUDA_SUCCESS);
  ASSERT_EQ(core_->Free(a), CUDA_SUCCESS);
  EXPECT_EQ(core_->Free(a), CUDA_ERROR_INVALID_VALUE);  // double free
  CUdeviceptr b;
  ASSERT_EQ(core_->Alloc(&b, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_NE(a, b);
  fake_.Release(s);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  CUdeviceptr c;
  ASSERT_EQ(core_->Alloc(&c, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(c, a);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, ChunkTouchedWhileItsPageOutIsInFlightKeepsItsData) {
  // 16 device chunks with the look-ahead page-out on (Note [eviction
  // batches]: one-chunk batches at this budget), LRU: the eviction for block
  // 16 pages out block 0 and starts the page-out of block 1 without waiting
  // (Note [pipelined page-out]). Rewriting 1..15 then must cancel it.
  lookahead_min_chunks_ = 16;
  Make(&fake_.driver(), 32 * kMiB, 96 * kMiB, "lru");
  CUstream s = fake_.CreateStream();
  constexpr int kBlocks = 24;
  CUdeviceptr b[kBlocks];
  uint64_t seed[kBlocks];
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_EQ(core_->Alloc(&b[i], 2 * kMiB), CUDA_SUCCESS);
    seed[i] = 100 + i;
  }
  for (int i = 0; i <= 16; ++i) ASSERT_EQ(Write(s, b[i], 2 * kMiB, seed[i]), CUDA_SUCCESS);
  for (int i = 1; i < 16; ++i) {
    seed[i] = 300 + i;
    ASSERT_EQ(Write(s, b[i], 2 * kMiB, seed[i]), CUDA_SUCCESS);
  }
  EXPECT_GT(core_->stats().cancelled_page_outs, 0u);
  for (int i = 17; i < kBlocks; ++i) ASSERT_EQ(Write(s, b[i], 2 * kMiB, seed[i]), CUDA_SUCCESS);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kBlocks; ++i) {
      uint64_t sum = 0;
      ASSERT_EQ(Read(s, b[i], 2 * kMiB, &sum), CUDA_SUCCESS);
      EXPECT_EQ(sum, PatternChecksum(2 * kMiB, seed[i])) << "block " << i;
    }
  }
  EXPECT_GT(core_->stats().evictions, 0u);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST(EvictionSizingTest, SpeculationStaysWithinASixteenthOfTheBudget) {
  for (uint32_t budget = 0; budget <= 8192; ++budget) {
    for (bool sustained : {false, true}) {
      const EvictionSizing size = SizeEviction(budget, sustained);
      ASSERT_GE(size.batch, 1u) << budget;
      // Beyond the one chunk a miss needs: the rest of the batch and the
      // look-ahead page-outs.
      EXPECT_LE(size.batch - 1 + size.lookahead, budget / kSpeculationShare)
          << "budget " << budget << (sustained ? ", sustained" : "");
      if (budget < 2 * kSpeculationShare) {
        EXPECT_EQ(size.batch, 1u) << budget;
      }
      EXPECT_EQ(size.lookahead > 0, budget >= kLookaheadMinChunks) << budget;
    }
  }
  // Large budgets keep the amortizing batches.
  EXPECT_EQ(SizeEviction(256, false).batch, kFirstBatchMax);
  EXPECT_EQ(SizeEviction(256, true).batch, kSustainedBatchMax);
  EXPECT_EQ(SizeEviction(4096, true).lookahead, kSustainedBatchMax);
}

TEST_F(ShimCoreTest, SmallBudgetMissWritesBackOnlyTheChunkItNeeds) {
  // 8 device chunks, below the smallest budget with speculative victims
  // (Note [eviction batches]): every miss on the full device evicts exactly
  // one chunk and starts no look-ahead page-out, so the only copies are that
  // page-out and the miss's own page-in.
  Make(&fake_.driver(), 16 * kMiB, 96 * kMiB, "lru");
  CUstream s = fake_.CreateStream();
  constexpr int kBlocks = 20;
  std::vector<CUdeviceptr> blocks(kBlocks);
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(Write(s, blocks[i], 2 * kMiB, 500 + i), CUDA_SUCCESS);
  }
  uint64_t misses = 0;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kBlocks; ++i) {
      const bool miss = core_->TEST_ResidenceOf(blocks[i]) != Residence::kDevice;
      const CoreStats before = core_->stats();
      const uint64_t copies_before = fake_.copies();
      uint64_t sum = 0;
      ASSERT_EQ(Read(s, blocks[i], 2 * kMiB, &sum), CUDA_SUCCESS);
      EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 500 + i)) << "block " << i;
      const CoreStats after = core_->stats();
      const uint64_t evicted = after.evictions - before.evictions;
      const uint64_t filled = after.page_ins - before.page_ins;
      EXPECT_EQ(evicted, miss ? 1u : 0u) << "round " << round << " block " << i;
      EXPECT_EQ(fake_.copies() - copies_before, evicted + filled)
          << "a page-out beyond the one needed, round " << round << " block " << i;
      misses += miss;
    }
  }
  const CoreStats st = core_->stats();
  EXPECT_EQ(misses, 2u * kBlocks);  // cyclic reads through LRU order: every read misses
  EXPECT_EQ(st.cancelled_page_outs, 0u);
  EXPECT_LE(st.device_chunks_peak, 8u);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, CopiesAndMemsetsMakeTheirRangesResident) {
  CUdeviceptr blocks[6];
  CUstream s = fake_.CreateStream();
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(Write(s, blocks[i], 2 * kMiB, 40 + i), CUDA_SUCCESS);
  }
  ASSERT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kHost);
  MemRange range{blocks[0] + 100, 1000};
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeAccess(&range, 1, s, false, /*synchronous=*/true, &ticket), CUDA_SUCCESS);
  ticket.Close();
  EXPECT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kDevice);
  EXPECT_EQ(Checksum(reinterpret_cast<void*>(blocks[0]), 2 * kMiB), PatternChecksum(2 * kMiB, 40));
}

// Note [copy ranges]: a range starting in the reservation must lie within
// one live block; anything else is refused before any paging.
TEST_F(ShimCoreTest, CopyRangesOutsideOneLiveBlockAreRefused) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr large, small, freed;
  ASSERT_EQ(core_->Alloc(&large, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&small, 4096), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&freed, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Free(freed), CUDA_SUCCESS);
  auto check = [&](MemRange range) {
    ShimCore::Ticket ticket;
    const CUresult r = core_->BeforeAccess(&range, 1, s, false, /*synchronous=*/true, &ticket);
    return r;
  };
  EXPECT_EQ(check({large, 2 * kMiB}), CUDA_SUCCESS);
  EXPECT_EQ(check({large + kMiB, kMiB}), CUDA_SUCCESS);
  EXPECT_EQ(check({small, 4096}), CUDA_SUCCESS);
  EXPECT_EQ(check({large + 2 * kMiB - 4096, 8192}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(check({small + 2048, 4096}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(check({large, ~uint64_t{0}}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(check({large, ~uint64_t{0} - large + 4097}), CUDA_ERROR_INVALID_VALUE);  // wraps
  EXPECT_EQ(check({freed, 4096}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(check({core_->base() + core_->va_bytes() - 4096, 4096}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(check({large, 0}), CUDA_SUCCESS);  // nothing to touch
  // Both ranges of a copy are checked.
  MemRange pair[2] = {{large, 4096}, {small + 4000, 4096}};
  ShimCore::Ticket ticket;
  EXPECT_EQ(core_->BeforeAccess(pair, 2, s, false, true, &ticket), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, ExtraBufferArgumentsAreDecoded) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr blocks[6];
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(Write(s, blocks[i], 2 * kMiB, 60 + i), CUDA_SUCCESS);
  }
  ASSERT_EQ(core_->TEST_ResidenceOf(blocks[1]), Residence::kHost);
  struct {
    int n;
    int pad;
    CUdeviceptr p;
  } args = {7, 0, blocks[1] + 64};
  size_t size = sizeof(args);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeLaunch(Function(0), nullptr, extra, s, false, &ticket), CUDA_SUCCESS);
  ticket.Close();
  EXPECT_EQ(core_->TEST_ResidenceOf(blocks[1]), Residence::kDevice);
  EXPECT_EQ(core_->stats().opaque_launches, 0u);
}

// Found by tests/fuzz/shim_launch_args_fuzzer: CU_LAUNCH_PARAM_BUFFER_SIZE with a null size
// pointer was dereferenced. Such a list is not decodable: the launch is opaque (every block is
// made resident) and the driver judges the list.
TEST_F(ShimCoreTest, ExtraSizeWithoutPointerIsOpaque) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr block;
  ASSERT_EQ(core_->Alloc(&block, 2 * kMiB), CUDA_SUCCESS);
  CUdeviceptr args = block;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, nullptr,
                   CU_LAUNCH_PARAM_END};
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeLaunch(Function(0), nullptr, extra, s, false, &ticket), CUDA_SUCCESS);
  ticket.Close();
  EXPECT_EQ(core_->stats().opaque_launches, 1u);
  EXPECT_EQ(core_->TEST_ResidenceOf(block), Residence::kDevice);
}

// Note [scan block range]: a word just past the previous hit's block, and
// words into other blocks, are each looked up; scalars and null pointers are
// skipped.
TEST_F(ShimCoreTest, ArgumentScanSeparatesAdjacentBlocks) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr b, c, a, e;
  ASSERT_EQ(core_->Alloc(&b, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&c, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(c, b + 2 * kMiB) << "the test needs adjacent blocks";
  ASSERT_EQ(core_->Alloc(&a, 4 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(core_->Alloc(&e, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, c, 2 * kMiB, 1), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, b, 2 * kMiB, 2), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, a, 4 * kMiB, 3), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, e, 2 * kMiB, 4), CUDA_SUCCESS);  // 5 chunks in a budget of 4
  ASSERT_EQ(core_->TEST_ResidenceOf(c), Residence::kHost);
  // b's last word, then c's first byte; a's second chunk before its first.
  CUdeviceptr words[] = {b + 2 * kMiB - 8, c, 42, a + 3 * kMiB, b, a, 0, b + 8};
  std::vector<void*> params;
  for (CUdeviceptr& w : words) params.push_back(&w);
  params.push_back(nullptr);  // an absent parameter pointer is skipped too
  ShimCore::Ticket ticket;
  ASSERT_EQ(core_->BeforeLaunch(Function(params.size()), params.data(), nullptr, s, false, &ticket),
            CUDA_SUCCESS);
  ticket.Close();
  EXPECT_EQ(core_->TEST_ResidenceOf(b), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(c), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(a), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(a + 2 * kMiB), Residence::kDevice);
  EXPECT_EQ(core_->TEST_ResidenceOf(e), Residence::kHost);  // the launch's chunks fill the budget
  EXPECT_EQ(core_->stats().opaque_launches, 0u);
  uint64_t sum = 0;
  ASSERT_EQ(Read(s, c, 2 * kMiB, &sum), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 1));
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreTest, AppVmmMemoryShrinksTheDeviceBudget) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr a;
  ASSERT_EQ(core_->Alloc(&a, 8 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Write(s, a, 8 * kMiB, 9), CUDA_SUCCESS);
  EXPECT_EQ(core_->stats().device_chunks_in_use, 4u);
  core_->OnAppPhysicalCreate(/*handle=*/12345, 4 * kMiB);
  EXPECT_EQ(core_->stats().device_chunk_limit, 2u);
  EXPECT_LE(core_->stats().device_chunks_in_use, 2u);
  core_->OnAppPhysicalRelease(12345);
  EXPECT_EQ(core_->stats().device_chunk_limit, 4u);
  uint64_t sum;
  ASSERT_EQ(Read(s, a, 8 * kMiB, &sum), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(8 * kMiB, 9));
}

TEST_F(ShimCoreTest, ConcurrentStreamsFromManyThreadsKeepData) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  std::atomic<int> errors{0};
  Function(1);  // created up front: the helper's cache is not thread-safe
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      CUstream s = fake_.CreateStream();
      std::mt19937_64 rng(t);
      for (int iter = 0; iter < 60; ++iter) {
        CUdeviceptr p;
        const uint64_t bytes = (1 + rng() % 3) * kMiB;
        if (core_->Alloc(&p, bytes) != CUDA_SUCCESS) {
          ++errors;
          continue;
        }
        const uint64_t seed = rng();
        if (Write(s, p, bytes, seed) != CUDA_SUCCESS) ++errors;
        uint64_t sum = 0;
        if (Read(s, p, bytes, &sum) != CUDA_SUCCESS) ++errors;
        core_->TEST_Synchronize();
        if (sum != PatternChecksum(bytes, seed)) ++mismatches;
        if (core_->Free(p) != CUDA_SUCCESS) ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(fake_.faults(), 0u);
}

}  // namespace
}  // namespace memvirt::shim
