#include "memvirt/nvme/swap_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "absl/synchronization/notification.h"
#include "memvirt/nvme/fault_injecting_io_engine.h"
#include "memvirt/nvme/memory_io_engine.h"
#include "test_util.h"

namespace memvirt::nvme {
namespace {

using testing::AlignedBuffer;
constexpr TenantId kAlice = 11;
constexpr TenantId kBob = 22;

class SwapStoreTest : public ::testing::Test {
 protected:
  // Two files of 8 extents each (32 MiB of swap).
  SwapStoreTest() : memory_({8 * kExtentBytes, 8 * kExtentBytes}), faulty_(&memory_) {}

  void SetUp() override {
    auto store = SwapStore::Create(&faulty_, SwapStoreOptions{});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  MemoryIoEngine memory_;
  FaultInjectingIoEngine faulty_;
  std::unique_ptr<SwapStore> store_;
};

TEST_F(SwapStoreTest, PutGetRoundTripsMultiExtentSlab) {
  AlignedBuffer slab(3 * kExtentBytes), back(3 * kExtentBytes);
  testing::FillRandom(slab.span(), 1);
  const uint64_t sum = testing::Fnv1a(slab.span());
  auto id = store_->Put(kAlice, slab.span());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(store_->TenantBytes(kAlice), 3 * kExtentBytes);
  ASSERT_TRUE(store_->Get(kAlice, *id, back.span()).ok());
  EXPECT_EQ(testing::Fnv1a(back.span()), sum);
  EXPECT_EQ(testing::Fnv1a(slab.span()), sum) << "the host copy is never modified";
  const SwapStoreStats s = store_->stats();
  EXPECT_EQ(s.slabs, 1u);
  EXPECT_EQ(s.used_bytes, 3 * kExtentBytes);
  EXPECT_EQ(s.capacity_bytes, 16 * kExtentBytes);
  EXPECT_EQ(s.puts_ok, 1u);
  EXPECT_EQ(s.gets_ok, 1u);
  EXPECT_EQ(s.bytes_written, 3 * kExtentBytes);
}

TEST_F(SwapStoreTest, RejectsBadSizesAndAlignment) {
  AlignedBuffer buf(kExtentBytes + 4096);
  EXPECT_EQ(store_->Put(kAlice, buf.span()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Put(kAlice, buf.span().subspan(1, kExtentBytes)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Put(kNoTenant, buf.span().subspan(0, kExtentBytes)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto id = store_->Put(kAlice, buf.span().subspan(0, kExtentBytes));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(store_->Get(kAlice, *id, buf.span()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->stats().used_bytes, kExtentBytes);
}

TEST_F(SwapStoreTest, OtherTenantCanNeitherReadNorDiscard) {
  AlignedBuffer slab(kExtentBytes), back(kExtentBytes);
  testing::FillRandom(slab.span(), 2);
  auto id = store_->Put(kAlice, slab.span());
  ASSERT_TRUE(id.ok());
  std::fill(back.data(), back.data() + back.size(), 0);
  EXPECT_EQ(store_->Get(kBob, *id, back.span()).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(back.data()[0], 0) << "nothing was read for the wrong tenant";
  EXPECT_EQ(store_->Discard(kBob, *id).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(store_->SlabBytes(kBob, *id).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(store_->Get(kAlice, *id, back.span()).ok());
}

TEST_F(SwapStoreTest, DiscardFreesSpaceAndInvalidatesId) {
  AlignedBuffer slab(2 * kExtentBytes);
  auto id = store_->Put(kAlice, slab.span());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(store_->Discard(kAlice, *id).ok());
  EXPECT_EQ(store_->Get(kAlice, *id, slab.span()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Discard(kAlice, *id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->stats().used_bytes, 0u);
  EXPECT_EQ(store_->TenantBytes(kAlice), 0u);
}

TEST_F(SwapStoreTest, DeadTenantIsFreedAndOthersKeepTheirData) {
  AlignedBuffer a(2 * kExtentBytes), b(kExtentBytes), back(kExtentBytes);
  testing::FillRandom(b.span(), 3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store_->Put(kAlice, a.span()).ok());
  auto bob = store_->Put(kBob, b.span());
  ASSERT_TRUE(bob.ok());
  EXPECT_EQ(store_->DiscardAllOf(kAlice), 6 * kExtentBytes);
  EXPECT_EQ(store_->TenantBytes(kAlice), 0u);
  EXPECT_EQ(store_->stats().used_bytes, kExtentBytes);
  ASSERT_TRUE(store_->Get(kBob, *bob, back.span()).ok());
  EXPECT_EQ(testing::Fnv1a(back.span()), testing::Fnv1a(b.span()));
}

TEST_F(SwapStoreTest, FreedSpaceReusedByAnotherTenantNeverLeaksOldBytes) {
  // Alice fills the whole store, dies; Bob then gets the same extents and reads only his data.
  AlignedBuffer big(16 * kExtentBytes), mine(16 * kExtentBytes), back(16 * kExtentBytes);
  testing::FillRandom(big.span(), 4);
  testing::FillRandom(mine.span(), 5);
  ASSERT_TRUE(store_->Put(kAlice, big.span()).ok());
  store_->DiscardAllOf(kAlice);
  auto id = store_->Put(kBob, mine.span());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(store_->Get(kBob, *id, back.span()).ok());
  EXPECT_EQ(testing::Fnv1a(back.span()), testing::Fnv1a(mine.span()));
}

TEST_F(SwapStoreTest, OutOfSwapSpaceFailsBeforeAnyIo) {
  AlignedBuffer big(17 * kExtentBytes);
  testing::FillRandom(big.span(), 6);
  const uint64_t sum = testing::Fnv1a(big.span());
  auto id = store_->Put(kAlice, big.span());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(testing::Fnv1a(big.span()), sum);
  EXPECT_EQ(store_->stats().used_bytes, 0u);
}

TEST_F(SwapStoreTest, FileSystemEnospcFailsPutKeepsHostCopyAndFreesExtents) {
  AlignedBuffer slab(4 * kExtentBytes);
  testing::FillRandom(slab.span(), 7);
  const uint64_t sum = testing::Fnv1a(slab.span());
  faulty_.SetNoSpaceAfter(2 * kExtentBytes);  // half the slab fits
  auto id = store_->Put(kAlice, slab.span());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
  EXPECT_EQ(testing::Fnv1a(slab.span()), sum);
  const SwapStoreStats s = store_->stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.slabs, 0u);
  EXPECT_EQ(s.puts_failed, 1u);
  EXPECT_EQ(store_->TenantBytes(kAlice), 0u);
  faulty_.ClearFaults();
  EXPECT_TRUE(store_->Put(kAlice, slab.span()).ok());
}

TEST_F(SwapStoreTest, ReadEioIsUnavailableAndSlabStaysForRetry) {
  AlignedBuffer slab(kExtentBytes), back(kExtentBytes);
  testing::FillRandom(slab.span(), 8);
  auto id = store_->Put(kAlice, slab.span());
  ASSERT_TRUE(id.ok());
  const ExtentRun run = (*store_->SlabExtents(kAlice, *id))[0];
  faulty_.AddReadError({run.file_index, run.offset(), run.bytes()});
  EXPECT_EQ(store_->Get(kAlice, *id, back.span()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->stats().gets_failed, 1u);
  faulty_.ClearFaults();
  ASSERT_TRUE(store_->Get(kAlice, *id, back.span()).ok());
  EXPECT_EQ(testing::Fnv1a(back.span()), testing::Fnv1a(slab.span()));
}

TEST_F(SwapStoreTest, CorruptionOnTheMediumIsDataLoss) {
  AlignedBuffer slab(2 * kExtentBytes), back(2 * kExtentBytes);
  testing::FillRandom(slab.span(), 9);
  auto id = store_->Put(kAlice, slab.span());
  ASSERT_TRUE(id.ok());
  const ExtentRun run = (*store_->SlabExtents(kAlice, *id))[0];
  memory_.file_bytes(run.file_index)[run.offset() + kExtentBytes + 12345] ^= 0x10;
  const absl::Status s = store_->Get(kAlice, *id, back.span());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("extent 1"), absl::string_view::npos) << s;
  EXPECT_EQ(store_->stats().crc_mismatches, 1u);
}

TEST_F(SwapStoreTest, WithoutCrcCorruptionGoesUnnoticed) {
  SwapStoreOptions options;
  options.verify_crc = false;
  auto store = SwapStore::Create(&faulty_, options);
  ASSERT_TRUE(store.ok());
  store_.reset();
  AlignedBuffer slab(kExtentBytes), back(kExtentBytes);
  testing::FillRandom(slab.span(), 10);
  auto id = (*store)->Put(kAlice, slab.span());
  ASSERT_TRUE(id.ok());
  const ExtentRun run = (*(*store)->SlabExtents(kAlice, *id))[0];
  memory_.file_bytes(run.file_index)[run.offset()] ^= 1;
  EXPECT_TRUE((*store)->Get(kAlice, *id, back.span()).ok());
  EXPECT_NE(testing::Fnv1a(back.span()), testing::Fnv1a(slab.span()));
}

TEST_F(SwapStoreTest, SilentShortWriteIsCaughtByCrcOnRead) {
  AlignedBuffer slab(kExtentBytes), back(kExtentBytes);
  testing::FillRandom(slab.span(), 12);
  faulty_.SetShortWrites(ShortWriteMode::kSilent, kExtentBytes / 2);
  auto id = store_->Put(kAlice, slab.span());
  ASSERT_TRUE(id.ok()) << "the device lied";
  faulty_.ClearFaults();
  EXPECT_EQ(store_->Get(kAlice, *id, back.span()).code(), absl::StatusCode::kDataLoss);
}

TEST_F(SwapStoreTest, TornWriteFailsThePut) {
  AlignedBuffer slab(2 * kExtentBytes);
  faulty_.SetShortWrites(ShortWriteMode::kReportError, 4096);
  auto id = store_->Put(kAlice, slab.span());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDataLoss) << id.status();
  EXPECT_EQ(store_->stats().used_bytes, 0u);
}

TEST_F(SwapStoreTest, GetBeforePutCompletesIsFailedPrecondition) {
  faulty_.SetLatency(absl::Milliseconds(100));
  AlignedBuffer slab(kExtentBytes), back(kExtentBytes);
  absl::Notification put_done;
  auto id = store_->StartPut(kAlice, slab.span(), [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    put_done.Notify();
  });
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(store_->Get(kAlice, *id, back.span()).code(), absl::StatusCode::kFailedPrecondition);
  put_done.WaitForNotification();
  EXPECT_TRUE(store_->Get(kAlice, *id, back.span()).ok());
}

TEST_F(SwapStoreTest, DiscardDuringIoDefersTheFree) {
  AlignedBuffer slab(2 * kExtentBytes), back(2 * kExtentBytes);
  auto id = store_->Put(kAlice, slab.span());
  ASSERT_TRUE(id.ok());
  faulty_.SetLatency(absl::Milliseconds(100));
  absl::Notification got;
  ASSERT_TRUE(store_
                  ->StartGet(kAlice, *id, back.span(),
                             [&](absl::Status s) {
                               EXPECT_TRUE(s.ok()) << s;
                               got.Notify();
                             })
                  .ok());
  ASSERT_TRUE(store_->Discard(kAlice, *id).ok());
  EXPECT_EQ(store_->TenantBytes(kAlice), 0u);
  EXPECT_EQ(store_->stats().slabs, 0u);
  got.WaitForNotification();
  // The completion thread frees the extents right after the callback's status is final.
  for (int i = 0; i < 1000 && store_->stats().used_bytes != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(store_->stats().used_bytes, 0u);
}

TEST_F(SwapStoreTest, ManyConcurrentAsyncGetsAllComplete) {
  // Prefetch shape: start many Gets at once, wait for all callbacks.
  constexpr int kSlabs = 12;
  std::vector<std::unique_ptr<AlignedBuffer>> src, dst;
  std::vector<SlabId> ids;
  for (int i = 0; i < kSlabs; ++i) {
    src.push_back(std::make_unique<AlignedBuffer>(kExtentBytes));
    dst.push_back(std::make_unique<AlignedBuffer>(kExtentBytes));
    testing::FillRandom(src.back()->span(), 100 + i);
    auto id = store_->Put(i % 2 ? kAlice : kBob, src.back()->span());
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  faulty_.SetLatency(absl::Milliseconds(5));
  std::atomic<int> ok{0}, done{0};
  for (int i = 0; i < kSlabs; ++i) {
    ASSERT_TRUE(store_
                    ->StartGet(i % 2 ? kAlice : kBob, ids[i], dst[i]->span(),
                               [&](absl::Status s) {
                                 ok += s.ok();
                                 ++done;
                               })
                    .ok());
  }
  store_.reset();  // the destructor waits for every callback
  EXPECT_EQ(done.load(), kSlabs);
  EXPECT_EQ(ok.load(), kSlabs);
  for (int i = 0; i < kSlabs; ++i) {
    EXPECT_EQ(testing::Fnv1a(dst[i]->span()), testing::Fnv1a(src[i]->span())) << i;
  }
}

TEST_F(SwapStoreTest, FragmentedFreeSpaceStillStoresLargeSlabs) {
  AlignedBuffer one(kExtentBytes);
  std::vector<SlabId> ids;
  for (int i = 0; i < 16; ++i) ids.push_back(*store_->Put(kAlice, one.span()));
  for (int i = 0; i < 16; i += 2) ASSERT_TRUE(store_->Discard(kAlice, ids[i]).ok());
  EXPECT_GT(store_->stats().extents.fragmentation, 0.5);
  AlignedBuffer big(4 * kExtentBytes), back(4 * kExtentBytes);
  testing::FillRandom(big.span(), 13);
  auto id = store_->Put(kBob, big.span());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(store_->SlabExtents(kBob, *id)->size(), 4u);
  ASSERT_TRUE(store_->Get(kBob, *id, back.span()).ok());
  EXPECT_EQ(testing::Fnv1a(back.span()), testing::Fnv1a(big.span()));
}

// Several client threads (one tenant each) put, get, discard and die at random, concurrently,
// over an engine with latency and occasional read faults; every successful Get must return the
// bytes that were put, and at the end the space accounting must match what is still live.
TEST_F(SwapStoreTest, ConcurrentTenantsStressAgainstModel) {
  faulty_.SetLatency(absl::Microseconds(200));
  constexpr int kThreads = 4;
  constexpr int kSteps = 150;
  std::atomic<int> failures{0};
  std::vector<uint64_t> live_bytes(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const TenantId tenant = 100 + t;
      std::mt19937_64 rng(77 + t);
      struct Live {
        SlabId id;
        uint64_t sum;
        size_t bytes;
      };
      std::vector<Live> live;
      AlignedBuffer src(2 * kExtentBytes), dst(2 * kExtentBytes);
      for (int step = 0; step < kSteps; ++step) {
        const int action = static_cast<int>(rng() % 10);
        if (action < 4) {
          const size_t bytes = (1 + rng() % 2) * kExtentBytes;
          testing::FillRandom(src.span().subspan(0, bytes), rng());
          auto id = store_->Put(tenant, src.span().subspan(0, bytes));
          if (id.ok()) {
            live.push_back({*id, testing::Fnv1a(src.span().subspan(0, bytes)), bytes});
          } else if (!absl::IsResourceExhausted(id.status())) {
            ++failures;
          }
        } else if (action < 8 && !live.empty()) {
          const Live& l = live[rng() % live.size()];
          const absl::Status s = store_->Get(tenant, l.id, dst.span().subspan(0, l.bytes));
          if (!s.ok() || testing::Fnv1a(dst.span().subspan(0, l.bytes)) != l.sum) ++failures;
          // Another tenant never gets it.
          if (store_->Get(tenant + 1000, l.id, dst.span().subspan(0, l.bytes)).code() !=
              absl::StatusCode::kPermissionDenied) {
            ++failures;
          }
        } else if (action < 9 && !live.empty()) {
          const size_t i = rng() % live.size();
          if (!store_->Discard(tenant, live[i].id).ok()) ++failures;
          live.erase(live.begin() + i);
        } else {
          store_->DiscardAllOf(tenant);  // the client died and came back
          live.clear();
        }
      }
      uint64_t total = 0;
      for (const Live& l : live) total += l.bytes;
      live_bytes[t] = total;
      if (store_->TenantBytes(tenant) != total) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  uint64_t total = 0;
  for (uint64_t b : live_bytes) total += b;
  EXPECT_EQ(store_->stats().used_bytes, total);
  EXPECT_EQ(store_->stats().crc_mismatches, 0u);
}

}  // namespace
}  // namespace memvirt::nvme
