// Application VMM (Note [application VMM] in shim_core_app_vmm.cc) over the
// fake driver: virtual handles mapped by the application page like blocks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include "shim/core/shim_core_test_fixture.h"

namespace memvirt::shim {
namespace {

class ShimCoreAppVmmTest : public ShimCoreTest {
 protected:
  // Reserves `handles` x `bytes`, creates and maps that many handles in it
  // (adjacent: one block, Note [contiguous mappings]).
  void MapHandles(int handles, uint64_t bytes) {
    ASSERT_EQ(core_->AppReserve(handles * bytes, 0, &base_), CUDA_SUCCESS);
    handles_.resize(handles);
    for (int i = 0; i < handles; ++i) {
      ASSERT_EQ(core_->AppCreate(bytes, AppProp(), &handles_[i]), CUDA_SUCCESS);
      EXPECT_TRUE(ShimCore::IsVirtualHandle(handles_[i]));
      ASSERT_EQ(core_->AppMap(base_ + i * bytes, bytes, 0, handles_[i]), CUDA_SUCCESS);
    }
  }
  // One reservation per handle: separate blocks.
  void MapSeparately(int handles, uint64_t bytes, std::vector<CUdeviceptr>* at) {
    handles_.resize(handles);
    at->resize(handles);
    for (int i = 0; i < handles; ++i) {
      ASSERT_NO_FATAL_FAILURE(MapAppHandle(bytes, &(*at)[i], &handles_[i]));
    }
  }
  void ExpectAFailedExportStepKeepsTheBytes(const std::function<void()>& arm, CUresult expected);
  void ExpectAFailedRemapKeepsEveryMapping(int failed_maps);
  uint64_t FreeBytes() {
    size_t free = 0, total = 0;
    EXPECT_EQ(core_->GetInfo(&free, &total), CUDA_SUCCESS);
    return free;
  }

  CUdeviceptr base_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
};

TEST_F(ShimCoreAppVmmTest, MappedHandlesArePagedLikeAllocations) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> at;
  MapSeparately(8, 4 * kMiB, &at);  // 4x the 8 MiB device budget
  for (int i = 0; i < 8; ++i) ASSERT_EQ(Write(s, at[i], 4 * kMiB, 100 + i), CUDA_SUCCESS);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 8; ++i) {
      uint64_t sum = 0;
      ASSERT_EQ(Read(s, at[i], 4 * kMiB, &sum), CUDA_SUCCESS);
      ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
      EXPECT_EQ(sum, PatternChecksum(4 * kMiB, 100 + i)) << "handle " << i;
    }
  }
  EXPECT_GT(core_->stats().evictions, 0u);
  EXPECT_GT(core_->stats().page_ins, 0u);
  EXPECT_LE(core_->stats().device_chunks_peak, 4u);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreAppVmmTest, AdjacentMappingsAreOneRangeForLaunchesAndCopies) {
  CUstream s = fake_.CreateStream();
  MapHandles(2, 4 * kMiB);
  // A kernel given the first mapping's address writes into the second one.
  ASSERT_EQ(Write(s, base_, 8 * kMiB, 7), CUDA_SUCCESS);
  const MemRange across{base_ + 2 * kMiB, 4 * kMiB};
  ShimCore::Ticket ticket;
  EXPECT_EQ(core_->BeforeAccess(&across, 1, s, false, true, &ticket), CUDA_SUCCESS);
  ticket.Close();
  uint64_t sum = 0;
  ASSERT_EQ(Read(s, base_, 8 * kMiB, &sum), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(8 * kMiB, 7));
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreAppVmmTest, CapacityIsHeldUntilReleasedAndUnmappedInEitherOrder) {
  const uint64_t before = FreeBytes();
  MapHandles(2, 4 * kMiB);
  EXPECT_EQ(FreeBytes(), before - 8 * kMiB);
  // Released first: the mapping keeps the memory.
  ASSERT_EQ(core_->AppRelease(handles_[0]), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before - 8 * kMiB);
  EXPECT_EQ(core_->AppRelease(handles_[0]), CUDA_ERROR_INVALID_VALUE);  // released already
  ASSERT_EQ(core_->AppUnmap(base_, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before - 4 * kMiB);
  // Unmapped first: the handle keeps it.
  ASSERT_EQ(core_->AppUnmap(base_ + 4 * kMiB, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before - 4 * kMiB);
  ASSERT_EQ(core_->AppRelease(handles_[1]), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(core_->stats().device_chunks_in_use, 0u);
  EXPECT_EQ(core_->AppAddressFree(base_, 8 * kMiB), CUDA_SUCCESS);
  // Beyond the virtual capacity: the driver's out-of-memory answer.
  CUmemGenericAllocationHandle big;
  EXPECT_EQ(core_->AppCreate(before + 2 * kMiB, AppProp(), &big), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(ShimCoreAppVmmTest, UnmapTakesWholeMappingsOnly) {
  MapHandles(3, 4 * kMiB);
  EXPECT_EQ(core_->AppUnmap(base_ + 2 * kMiB, 2 * kMiB), CUDA_ERROR_INVALID_VALUE);  // sub-range
  EXPECT_EQ(core_->AppUnmap(base_, 6 * kMiB), CUDA_ERROR_INVALID_VALUE);         // cuts the second
  EXPECT_EQ(core_->AppAddressFree(base_, 12 * kMiB), CUDA_ERROR_INVALID_VALUE);  // still mapped
  EXPECT_EQ(core_->AppUnmap(base_, 8 * kMiB), CUDA_SUCCESS);              // two whole mappings
  EXPECT_EQ(core_->AppUnmap(base_, 4 * kMiB), CUDA_ERROR_INVALID_VALUE);  // nothing mapped
  // The third is one block on its own now.
  CUdeviceptr range_base = 0;
  size_t range_size = 0;
  ASSERT_EQ(core_->GetAddressRange(&range_base, &range_size, base_ + 9 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(range_base, base_ + 8 * kMiB);
  EXPECT_EQ(range_size, 4 * kMiB);
  EXPECT_EQ(core_->GetAddressRange(&range_base, &range_size, base_), CUDA_ERROR_NOT_FOUND);
}

TEST_F(ShimCoreAppVmmTest, AHandlePartIsMappedOnceAndNotAgainAfterItsBytesWereDiscarded) {
  MapHandles(1, 4 * kMiB);
  CUdeviceptr other;
  ASSERT_EQ(core_->AppReserve(4 * kMiB, 0, &other), CUDA_SUCCESS);
  EXPECT_EQ(core_->AppMap(other, 4 * kMiB, 0, handles_[0]), CUDA_ERROR_NOT_SUPPORTED);  // alias
  ASSERT_EQ(core_->AppUnmap(base_, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(core_->AppMap(other, 4 * kMiB, 0, handles_[0]), CUDA_ERROR_NOT_SUPPORTED);  // discarded
  EXPECT_EQ(core_->AppMap(other, 4 * kMiB, 2 * kMiB, handles_[0]), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(core_->AppMap(other + kMiB, 2 * kMiB, 0, handles_[0]), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(core_->AppRelease(handles_[0]), CUDA_SUCCESS);
  EXPECT_EQ(core_->AppMap(other, 4 * kMiB, 0, handles_[0]), CUDA_ERROR_INVALID_VALUE);  // gone
}

TEST_F(ShimCoreAppVmmTest, QueriesAnswerForTheMappingAndTheReservation) {
  MapHandles(2, 4 * kMiB);
  const CUdeviceptr second = base_ + 4 * kMiB;
  CUdeviceptr range_base = 0;
  size_t range_size = 0;
  ASSERT_EQ(core_->GetAddressRange(&range_base, &range_size, second + 100), CUDA_SUCCESS);
  EXPECT_EQ(range_base, second);
  EXPECT_EQ(range_size, 4 * kMiB);
  CUdeviceptr start = 0;
  size_t size = 0;
  unsigned long long types = 0;
  int ipc = 1;
  ASSERT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, &start, second),
            CUDA_SUCCESS);
  ASSERT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_RANGE_SIZE, &size, second), CUDA_SUCCESS);
  ASSERT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, &types, second),
            CUDA_SUCCESS);
  ASSERT_EQ(core_->PointerAttribute(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, &ipc, second),
            CUDA_SUCCESS);
  EXPECT_EQ(start, base_);
  EXPECT_EQ(size, 8 * kMiB);
  EXPECT_EQ(types, static_cast<unsigned long long>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  EXPECT_EQ(ipc, 0);
  CUmemGenericAllocationHandle retained = 0;
  ASSERT_EQ(core_->AppRetain(&retained, second + 3 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(retained, handles_[1]);
  CUmemAllocationProp prop = {};
  ASSERT_EQ(core_->AppProperties(&prop, retained), CUDA_SUCCESS);
  EXPECT_EQ(prop.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  // Two references now: the handle outlives one release and its mapping.
  ASSERT_EQ(core_->AppRelease(handles_[1]), CUDA_SUCCESS);
  ASSERT_EQ(core_->AppUnmap(second, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(core_->AppProperties(&prop, retained), CUDA_SUCCESS);
  ASSERT_EQ(core_->AppRelease(retained), CUDA_SUCCESS);
  EXPECT_EQ(core_->AppProperties(&prop, retained), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(core_->Free(base_), CUDA_ERROR_INVALID_VALUE);  // VMM memory is not cuMemFree'd
  EXPECT_TRUE(core_->IsAppMapped(base_));
  CUmemAccessDesc access = {};
  access.location = AppProp().location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(core_->AppSetAccess(base_, 4 * kMiB, &access, 1), CUDA_SUCCESS);
  EXPECT_EQ(core_->AppSetAccess(base_, 8 * kMiB, &access, 1), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ShimCoreAppVmmTest, ADriverMappingInAReservedRangeIsLeftToTheDriver) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr p;
  ASSERT_EQ(core_->Alloc(&p, 4 * kMiB), CUDA_SUCCESS);  // backs chunks that are then freed
  ASSERT_EQ(Write(s, p, 4 * kMiB, 3), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  ASSERT_EQ(core_->Free(p), CUDA_SUCCESS);
  CUdeviceptr r;
  ASSERT_EQ(core_->AppReserve(4 * kMiB, 0, &r), CUDA_SUCCESS);
  ASSERT_EQ(core_->BeginForeignMap(r, 4 * kMiB), CUDA_SUCCESS);  // frees what the core had there
  EXPECT_TRUE(core_->IsForeign(r, 4 * kMiB));
  EXPECT_EQ(core_->TEST_ResidenceOf(r), Residence::kUnbacked);
  const MemRange inside{r + kMiB, kMiB};
  ShimCore::Ticket ticket;
  EXPECT_EQ(core_->BeforeAccess(&inside, 1, s, false, true, &ticket), CUDA_SUCCESS);
  ticket.Close();
  EXPECT_EQ(core_->TEST_ResidenceOf(r), Residence::kUnbacked);  // never backed by the core
  core_->OnForeignUnmap(r, 4 * kMiB);
  EXPECT_FALSE(core_->IsForeign(r, 4 * kMiB));
  EXPECT_EQ(core_->AppAddressFree(r, 4 * kMiB), CUDA_SUCCESS);
}

// Note [exported handles]: export moves the handle's bytes into driver memory mapped where it
// was; the exported descriptor and the application's addresses hold the same bytes.
TEST_F(ShimCoreAppVmmTest, AnExportedHandleIsPinnedInDriverMemory) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> at;
  MapSeparately(6, 4 * kMiB, &at);  // 3x the device budget: some of it in the host tier
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Write(s, at[i], 4 * kMiB, 50 + i), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  const uint64_t free_before = FreeBytes();
  int fd = -1;
  EXPECT_EQ(core_->AppExport(&fd, handles_[0], CU_MEM_HANDLE_TYPE_FABRIC, 0),
            CUDA_ERROR_INVALID_VALUE);  // not a requested type
  ASSERT_EQ(core_->AppExport(&fd, handles_[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ExportedChecksum(fd, 4 * kMiB), PatternChecksum(4 * kMiB, 50));
  EXPECT_TRUE(core_->IsForeign(at[0], 4 * kMiB));         // the driver's mapping now
  EXPECT_EQ(FreeBytes(), free_before + 4 * kMiB);         // out of the virtual capacity
  EXPECT_EQ(core_->stats().device_chunk_limit, 4u - 2u);  // pinned in the device budget
  uint64_t sum = 0;
  ASSERT_EQ(Read(s, at[0], 4 * kMiB, &sum), CUDA_SUCCESS);  // the application's address
  for (int i = 1; i < 6; ++i) {                             // the others keep paging around it
    uint64_t other = 0;
    ASSERT_EQ(Read(s, at[i], 4 * kMiB, &other), CUDA_SUCCESS);
    ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    EXPECT_EQ(other, PatternChecksum(4 * kMiB, 50 + i)) << "handle " << i;
  }
  EXPECT_EQ(sum, PatternChecksum(4 * kMiB, 50));
  // Exported again: the same driver memory. Released and unmapped: the budget comes back.
  ASSERT_EQ(core_->AppExport(&fd, handles_[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  close(fd);
  ASSERT_EQ(fake_.driver().cuMemUnmap(at[0], 4 * kMiB), CUDA_SUCCESS);
  core_->OnForeignUnmap(at[0], 4 * kMiB);
  ASSERT_EQ(core_->AppRelease(handles_[0]), CUDA_SUCCESS);
  EXPECT_EQ(core_->stats().device_chunk_limit, 4u);
  EXPECT_EQ(core_->AppAddressFree(at[0], 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Note [exports in flight]: a copy into driver memory that fails leaves the
// handle's bytes where they are and the handle paged, gives the pinned size
// back and fails the export; the next export works.
// Each step of moving a handle to driver memory for export that the driver
// fails (`arm` makes it fail, with `expected`) fails the export with that
// error, keeps every handle's bytes where they are, gives the pinned size
// back, and a later export succeeds.
void ShimCoreAppVmmTest::ExpectAFailedExportStepKeepsTheBytes(const std::function<void()>& arm,
                                                              CUresult expected) {
  MakeWithFaults(16 * kMiB, 64 * kMiB);
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> at;
  MapSeparately(3, 4 * kMiB, &at);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Write(s, at[i], 4 * kMiB, 60 + i), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  const uint64_t free_before = FreeBytes();
  for (int h = 0; h < 2; ++h) {
    int fd = -1;
    arm();
    EXPECT_EQ(core_->AppExport(&fd, handles_[h], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              expected);
    Disarm();
    EXPECT_EQ(fd, -1);
    EXPECT_FALSE(core_->IsForeign(at[h], 4 * kMiB)) << "still the core's";
    EXPECT_EQ(core_->stats().device_chunk_limit, 8u) << "the pinned size given back";
    EXPECT_EQ(FreeBytes(), free_before);
  }
  // Every handle kept its bytes and pages on.
  ExpectPatterns(s, 4 * kMiB, {{at[0], 60}, {at[1], 61}, {at[2], 62}});
  int fd = -1;
  ASSERT_EQ(core_->AppExport(&fd, handles_[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ExportedChecksum(fd, 4 * kMiB), PatternChecksum(4 * kMiB, 60));
  EXPECT_TRUE(core_->IsForeign(at[0], 4 * kMiB));
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreAppVmmTest, AFailedExportCopyKeepsTheBytesAndReportsTheError) {
  ExpectAFailedExportStepKeepsTheBytes([&] { faults_->FailCopy(1); },  // the export's first copy
                                       CUDA_ERROR_LAUNCH_FAILED);
}

TEST_F(ShimCoreAppVmmTest, AFailedCreateOfTheDriverMemoryKeepsTheBytes) {
  ExpectAFailedExportStepKeepsTheBytes([&] { faults_->FailMemCreate(1); },
                                       CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(ShimCoreAppVmmTest, AFailedStagingMappingKeepsTheBytes) {
  ExpectAFailedExportStepKeepsTheBytes([&] { faults_->FailMemMap(1); },  // the staging range's
                                       CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(ShimCoreAppVmmTest, AFailedStagingAccessKeepsTheBytes) {
  ExpectAFailedExportStepKeepsTheBytes([&] { faults_->FailSetAccess(1); },
                                       CUDA_ERROR_OUT_OF_MEMORY);
}

// Note [export remap]: a handle mapped in two pieces whose second piece the
// driver refuses to map over keeps both pieces on the core's chunks (none
// maps the released driver memory), fails the export with the driver's
// error and loses no byte; the next export moves both. `failed_maps`: 1, or
// 2 when the first chunk's own remap fails too.
void ShimCoreAppVmmTest::ExpectAFailedRemapKeepsEveryMapping(int failed_maps) {
  MakeWithFaults(16 * kMiB, 64 * kMiB);
  CUstream s = fake_.CreateStream();
  CUdeviceptr piece[2] = {0, 0};
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(core_->AppCreate(8 * kMiB, AppProp(), &handle), CUDA_SUCCESS);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(core_->AppReserve(4 * kMiB, 0, &piece[i]), CUDA_SUCCESS);
    ASSERT_EQ(core_->AppMap(piece[i], 4 * kMiB, i * 4 * kMiB, handle), CUDA_SUCCESS);
    ASSERT_EQ(Write(s, piece[i], 4 * kMiB, 80 + i), CUDA_SUCCESS);
  }
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  const uint64_t free_before = FreeBytes();
  const uint64_t evictions = core_->stats().evictions;
  int fd = -1;
  // The staging mapping and the first piece's move go through; the second
  // piece's fails (and then the first piece's first chunk's remap).
  faults_->FailMemMap(failed_maps, /*after=*/2);
  EXPECT_EQ(core_->AppExport(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_OUT_OF_MEMORY);
  Disarm();
  EXPECT_EQ(fd, -1);
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(core_->IsForeign(piece[i], 4 * kMiB)) << "piece " << i << " moved alone";
  }
  EXPECT_EQ(core_->TEST_ResidenceOf(piece[0]),
            failed_maps == 1 ? Residence::kDevice : Residence::kHost);
  EXPECT_EQ(core_->stats().evictions, evictions + (failed_maps - 1));
  EXPECT_EQ(core_->stats().device_chunk_limit, 8u) << "the pinned size given back";
  EXPECT_EQ(FreeBytes(), free_before);
  ExpectPatterns(s, 4 * kMiB, {{piece[0], 80}, {piece[1], 81}});
  ASSERT_EQ(core_->AppExport(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ExportedChecksum(fd, 4 * kMiB), PatternChecksum(4 * kMiB, 80));
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(core_->IsForeign(piece[i], 4 * kMiB)) << "piece " << i;
  ExpectPatterns(s, 4 * kMiB, {{piece[0], 80}, {piece[1], 81}});  // through the driver memory
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreAppVmmTest, AFailedRemapForAnExportKeepsEveryMappingAsItWas) {
  ExpectAFailedRemapKeepsEveryMapping(1);
}

// A device chunk the driver then refuses to map again at its address moves
// to a host slot with its bytes, mapped there at its next access.
TEST_F(ShimCoreAppVmmTest, AChunkThatCannotBeMappedBackMovesToTheHostWithItsBytes) {
  ExpectAFailedRemapKeepsEveryMapping(2);
}

// Note [segment windows]: a segment four times the device budget, read one
// 2 MiB tensor per kernel, pages about one chunk per kernel instead of the
// device's worth; a kernel reading all of it from its first address sees
// every byte (partly through host mappings), and nothing faults.
TEST_F(ShimCoreAppVmmTest, KernelsPageAWindowOfASegmentNotAllOfIt) {
  CUstream s = fake_.CreateStream();
  constexpr uint64_t kSegment = 32 * kMiB;  // 16 chunks; the device budget holds 4
  MapHandles(1, kSegment);
  ASSERT_EQ(Write(s, base_, kSegment, 11), CUDA_SUCCESS);
  std::vector<uint64_t> pattern(kSegment / 8);
  FillPattern(pattern.data(), kSegment, 11);
  const char* bytes = reinterpret_cast<const char*>(pattern.data());
  const uint64_t page_ins_before = core_->stats().page_ins;
  const uint64_t fallbacks_before = core_->stats().host_fallbacks;
  constexpr int kRounds = 2, kTensors = 16;
  for (int round = 0; round < kRounds; ++round) {
    for (int t = 0; t < kTensors; ++t) {
      uint64_t sum = 0;
      ASSERT_EQ(Read(s, base_ + t * 2 * kMiB, 2 * kMiB, &sum), CUDA_SUCCESS);
      ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
      EXPECT_EQ(sum, Checksum(bytes + t * 2 * kMiB, 2 * kMiB)) << "tensor " << t;
    }
  }
  // One chunk in per kernel at most (the window is one chunk at this budget),
  // and one failed attempt to find it room at most: making the segment
  // resident whole tried (and failed) for every chunk not on the device.
  EXPECT_LE(core_->stats().page_ins - page_ins_before, uint64_t{kRounds * kTensors});
  EXPECT_LE(core_->stats().host_fallbacks - fallbacks_before, uint64_t{kRounds * kTensors});
  uint64_t whole = 0;
  ASSERT_EQ(Read(s, base_, kSegment, &whole), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(whole, Checksum(bytes, kSegment));
  EXPECT_LE(core_->stats().device_chunks_peak, 4u);
  EXPECT_EQ(fake_.faults(), 0u);
}

// A kernel queued on a segment keeps the chunks outside its window: a page-out for
// another stream's kernel waits for it (the fake runs the held stream when
// the core waits for its event) instead of moving them under it.
TEST_F(ShimCoreAppVmmTest, ChunksReachedBeyondTheWindowAreNotPagedOutUnderAQueuedKernel) {
  CUstream s = fake_.CreateStream();
  CUstream t = fake_.CreateStream();
  CUdeviceptr other = 0;
  ASSERT_EQ(core_->Alloc(&other, 8 * kMiB), CUDA_SUCCESS);
  MapHandles(1, 8 * kMiB);  // 4 chunks: the whole device budget
  ASSERT_EQ(Write(s, base_, 8 * kMiB, 5), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  for (uint64_t off = 0; off < 8 * kMiB; off += 2 * kMiB) {
    ASSERT_EQ(core_->TEST_ResidenceOf(base_ + off), Residence::kDevice);  // `other` on the host
  }
  uint64_t sum = 0;
  bool read_ran = false;
  uint64_t maps_when_read = 0;
  fake_.Hold(s);  // given its last chunk, reads all of the segment
  ASSERT_EQ(Launch(s, {base_ + 6 * kMiB}, 2 * kMiB,
                   [&] {
                     sum = Checksum(reinterpret_cast<void*>(base_), 8 * kMiB);
                     maps_when_read = fake_.maps();
                     read_ran = true;
                   }),
            CUDA_SUCCESS);
  const uint64_t maps_before = fake_.maps();
  ASSERT_EQ(Write(t, other, 8 * kMiB, 6), CUDA_SUCCESS);  // needs the segment's room
  ASSERT_TRUE(read_ran) << "the segment was paged out without waiting for its reader";
  EXPECT_EQ(maps_when_read, maps_before) << "chunks were remapped before their reader ran";
  fake_.Release(s);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  std::vector<uint64_t> pattern(8 * kMiB / 8);
  FillPattern(pattern.data(), 8 * kMiB, 5);
  EXPECT_EQ(sum, Checksum(pattern.data(), 8 * kMiB));
  EXPECT_GT(core_->stats().evictions, 0u);
  EXPECT_EQ(fake_.faults(), 0u);
}

}  // namespace
}  // namespace memvirt::shim
