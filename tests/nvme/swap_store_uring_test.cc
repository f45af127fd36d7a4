// SwapStore over SwapFileSet + UringIoEngine: the stack the daemon runs, on real files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <memory>

#include "memvirt/nvme/fault_injecting_io_engine.h"
#include "memvirt/nvme/swap_file.h"
#include "memvirt/nvme/swap_store.h"
#include "memvirt/nvme/uring_io_engine.h"
#include "test_util.h"
#include "uring_test_util.h"

namespace memvirt::nvme {
namespace {

using testing::AlignedBuffer;
constexpr TenantId kAlice = 101;
constexpr TenantId kBob = 202;
constexpr uint64_t kSwapBytes = 64 << 20;  // 2 files x 16 extents

// One daemon's worth of NVMe tier: files, engine, optional fault wrapper, store.
struct Tier {
  std::unique_ptr<SwapFileSet> files;
  std::unique_ptr<UringIoEngine> engine;
  std::unique_ptr<FaultInjectingIoEngine> faulty;
  std::unique_ptr<SwapStore> store;
};

// Returns a status: Unimplemented/PermissionDenied mean "skip".
absl::Status OpenTier(const std::string& dir, Tier* tier, bool with_faults = false) {
  SwapFileOptions fo;
  fo.dir = dir;
  fo.total_bytes = kSwapBytes;
  fo.file_count = 2;
  fo.allow_buffered = false;
  auto files = SwapFileSet::Open(fo);
  if (!files.ok()) return files.status();
  UringOptions uo;
  uo.queue_depth = 8;
  auto engine = UringIoEngine::Create((*files)->uring_files(), uo);
  if (!engine.ok()) return engine.status();
  tier->files = *std::move(files);
  tier->engine = *std::move(engine);
  IoEngine* top = tier->engine.get();
  if (with_faults) {
    tier->faulty = std::make_unique<FaultInjectingIoEngine>(top);
    top = tier->faulty.get();
  }
  auto store = SwapStore::Create(top, SwapStoreOptions{});
  if (!store.ok()) return store.status();
  tier->store = *std::move(store);
  return absl::OkStatus();
}

class SwapStoreUringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path() + "/swap";
  }
  // Opens the tier or skips the test when io_uring/O_DIRECT is unavailable.
  bool Open(Tier* tier, bool with_faults = false) {
    const absl::Status s = OpenTier(dir_, tier, with_faults);
    if (testing::IsUringUnsupported(s) || absl::IsInvalidArgument(s)) {
      skip_reason_ = s.ToString();
      return false;
    }
    EXPECT_TRUE(s.ok()) << s;
    return s.ok();
  }

  testing::TempDir tmp_;
  std::string dir_;
  std::string skip_reason_;
};

#define OPEN_OR_SKIP(tier, ...)                                \
  do {                                                         \
    if (!Open(&(tier), ##__VA_ARGS__)) {                       \
      if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_; \
      return;                                                  \
    }                                                          \
  } while (0)

TEST_F(SwapStoreUringTest, ManyAsyncSlabsOfTwoTenantsRoundTrip) {
  Tier tier;
  OPEN_OR_SKIP(tier);
  EXPECT_TRUE(tier.store->direct_io());
  constexpr int kSlabs = 12;  // 2..6 MiB each, 48 MiB of the 64
  std::vector<std::unique_ptr<AlignedBuffer>> src, dst;
  std::vector<SlabId> ids(kSlabs);
  std::atomic<int> puts_ok{0}, gets_ok{0};
  for (int i = 0; i < kSlabs; ++i) {
    src.push_back(std::make_unique<AlignedBuffer>((1 + i % 3) * kExtentBytes));
    dst.push_back(std::make_unique<AlignedBuffer>(src.back()->size()));
    testing::FillRandom(src.back()->span(), 1000 + i);
  }
  for (int i = 0; i < kSlabs; ++i) {
    auto id = tier.store->StartPut(i % 2 ? kAlice : kBob, src[i]->span(),
                                   [&](absl::Status s) { puts_ok += s.ok(); });
    ASSERT_TRUE(id.ok()) << id.status();
    ids[i] = *id;
  }
  for (int i = 0; i < 2000 && puts_ok.load() < kSlabs; ++i) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(puts_ok.load(), kSlabs);
  for (int i = 0; i < kSlabs; ++i) {
    ASSERT_TRUE(tier.store
                    ->StartGet(i % 2 ? kAlice : kBob, ids[i], dst[i]->span(),
                               [&](absl::Status s) { gets_ok += s.ok(); })
                    .ok());
  }
  for (int i = 0; i < 2000 && gets_ok.load() < kSlabs; ++i) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(gets_ok.load(), kSlabs);
  for (int i = 0; i < kSlabs; ++i) {
    EXPECT_EQ(testing::Fnv1a(dst[i]->span()), testing::Fnv1a(src[i]->span())) << i;
  }
  const SwapStoreStats s = tier.store->stats();
  EXPECT_EQ(s.slabs, uint64_t{kSlabs});
  EXPECT_EQ(s.crc_mismatches, 0u);
  EXPECT_EQ(tier.store->TenantBytes(kAlice) + tier.store->TenantBytes(kBob), s.used_bytes);
}

TEST_F(SwapStoreUringTest, CorruptionWrittenIntoTheSwapFileIsDataLoss) {
  Tier tier;
  OPEN_OR_SKIP(tier);
  AlignedBuffer slab(2 * kExtentBytes), back(2 * kExtentBytes);
  testing::FillRandom(slab.span(), 7);
  auto id = tier.store->Put(kAlice, slab.span());
  ASSERT_TRUE(id.ok()) << id.status();
  const ExtentRun run = (*tier.store->SlabExtents(kAlice, *id))[0];
  // Flip one 4 KiB block behind the store's back, through a separate descriptor.
  const std::string& path = tier.files->files()[run.file_index].path;
  const int fd = open(path.c_str(), O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0);
  AlignedBuffer garbage(4096);
  testing::FillRandom(garbage.span(), 8);
  const off_t where = static_cast<off_t>(run.offset() + kExtentBytes + 8 * 4096);
  ASSERT_EQ(pwrite(fd, garbage.data(), 4096, where), 4096);
  close(fd);
  const absl::Status s = tier.store->Get(kAlice, *id, back.span());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(tier.store->stats().crc_mismatches, 1u);
}

TEST_F(SwapStoreUringTest, RestartReusesFilesAndStartsEmpty) {
  AlignedBuffer slab(kExtentBytes), back(kExtentBytes);
  testing::FillRandom(slab.span(), 9);
  SlabId old_id = 0;
  {
    Tier tier;
    OPEN_OR_SKIP(tier);
    auto id = tier.store->Put(kAlice, slab.span());
    ASSERT_TRUE(id.ok());
    old_id = *id;
  }
  Tier tier;
  OPEN_OR_SKIP(tier);
  EXPECT_TRUE(tier.files->files()[0].reused);
  EXPECT_EQ(tier.store->stats().used_bytes, 0u);
  EXPECT_EQ(tier.store->Get(kAlice, old_id, back.span()).code(), absl::StatusCode::kNotFound);
  // The old bytes are still on disk, but a new tenant's slab only ever returns its own data.
  AlignedBuffer mine(kExtentBytes);
  testing::FillRandom(mine.span(), 10);
  auto id = tier.store->Put(kBob, mine.span());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(tier.store->Get(kBob, *id, back.span()).ok());
  EXPECT_EQ(testing::Fnv1a(back.span()), testing::Fnv1a(mine.span()));
}

TEST_F(SwapStoreUringTest, DeadTenantSpaceGoesToTheNextTenant) {
  Tier tier;
  OPEN_OR_SKIP(tier);
  AlignedBuffer all(kSwapBytes), back(kSwapBytes);
  testing::FillRandom(all.span(), 11);
  ASSERT_TRUE(tier.store->Put(kAlice, all.span()).ok());
  AlignedBuffer one(kExtentBytes);
  EXPECT_EQ(tier.store->Put(kBob, one.span()).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(tier.store->DiscardAllOf(kAlice), kSwapBytes);
  testing::FillRandom(back.span(), 12);
  const uint64_t bob_sum = testing::Fnv1a(back.span());
  auto id = tier.store->Put(kBob, back.span());
  ASSERT_TRUE(id.ok()) << id.status();
  std::fill(back.data(), back.data() + back.size(), 0);
  ASSERT_TRUE(tier.store->Get(kBob, *id, back.span()).ok());
  EXPECT_EQ(testing::Fnv1a(back.span()), bob_sum);
}

TEST_F(SwapStoreUringTest, InjectedEnospcAndEioOverTheRealEngine) {
  Tier tier;
  OPEN_OR_SKIP(tier, /*with_faults=*/true);
  AlignedBuffer slab(2 * kExtentBytes), back(2 * kExtentBytes);
  testing::FillRandom(slab.span(), 13);
  const uint64_t sum = testing::Fnv1a(slab.span());
  tier.faulty->SetNoSpaceAfter(kExtentBytes);
  EXPECT_EQ(tier.store->Put(kAlice, slab.span()).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(testing::Fnv1a(slab.span()), sum);
  EXPECT_EQ(tier.store->stats().used_bytes, 0u);
  tier.faulty->ClearFaults();
  auto id = tier.store->Put(kAlice, slab.span());
  ASSERT_TRUE(id.ok());
  const ExtentRun run = (*tier.store->SlabExtents(kAlice, *id))[0];
  tier.faulty->AddReadError({run.file_index, run.offset() + kExtentBytes, 4096});
  EXPECT_EQ(tier.store->Get(kAlice, *id, back.span()).code(), absl::StatusCode::kUnavailable);
  tier.faulty->ClearFaults();
  ASSERT_TRUE(tier.store->Get(kAlice, *id, back.span()).ok());
  EXPECT_EQ(testing::Fnv1a(back.span()), sum);
}

}  // namespace
}  // namespace memvirt::nvme
