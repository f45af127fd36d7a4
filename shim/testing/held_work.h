// Work that stays pending on the fake driver, for the unit tests of the
// pieces that ask whether work completed (ChunkUses, PendingFrees,
// VictimPicker, FreedChunks), and HeldWorkTest, the fixture of the first
// three: a chunk table, a copy stream tracked by a StreamTracker, ChunkUses
// over both.
#ifndef MEMVIRT_SHIM_TESTING_HELD_WORK_H_
#define MEMVIRT_SHIM_TESTING_HELD_WORK_H_

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "shim/core/chunk_table.h"
#include "shim/core/chunk_uses.h"
#include "shim/core/stream_tracker.h"
#include "shim/testing/fake_driver.h"

namespace memvirt::shim::testing {

// A new stream of the application whose work stays queued until
// fake->Release(stream).
inline CUstream HeldStream(FakeDriver* fake) {
  CUstream s = fake->CreateStream();
  fake->Hold(s);
  return s;
}

// One operation issued on `stream` as `tracker` counts it (enqueued on the
// fake as nothing, so that it completes when the stream runs): the stream's
// index in the tracker and the operation's sequence number.
inline StreamUse IssueOn(FakeDriver* fake, StreamTracker* tracker, CUstream stream) {
  const uint32_t index = tracker->IndexOf(stream, /*per_thread=*/false);
  const uint64_t seq = tracker->Issue(index);
  fake->Enqueue(stream, [] {});
  return {index, seq};
}

// A use of `chunk` (recorded in `uses`) by work queued on a new held
// stream, which it returns.
inline CUstream UseOnHeldStream(FakeDriver* fake, StreamTracker* tracker, ChunkUses* uses,
                                uint32_t chunk) {
  CUstream s = HeldStream(fake);
  const StreamUse op = IssueOn(fake, tracker, s);
  uses->Add(chunk, op.stream, op.seq);
  return s;
}

class HeldWorkTest : public ::testing::Test {
 protected:
  // A table of `chunks` chunks, all free until MakeBlock().
  explicit HeldWorkTest(uint32_t chunks) : table_(/*base=*/1ull << 40, chunks) {
    table_.Materialize(chunks);
    copy_ = fake_.CreateStream();
    tracker_ = std::make_unique<StreamTracker>(&fake_.driver(), /*event_batch=*/1000);
    copy_index_ = tracker_->Adopt(copy_);
    uses_ = std::make_unique<ChunkUses>(&table_, tracker_.get(), copy_index_);
  }
  void TearDown() override {
    for (CUstream s : fake_.created_streams()) fake_.Release(s);
    (void)tracker_->WaitForAll();
  }

  // A device-resident kLarge block of `count` chunks from `first`.
  void MakeBlock(uint32_t first, uint32_t count) {
    for (uint32_t c = first; c < first + count; ++c) {
      table_[c].kind = ChunkKind::kLarge;
      table_[c].owner_first = first;
      table_[c].owner_count = count;
      table_[c].residence = Residence::kDevice;
    }
  }
  CUstream HeldStream() { return testing::HeldStream(&fake_); }
  StreamUse Issue(CUstream stream) { return IssueOn(&fake_, tracker_.get(), stream); }

  FakeDriver fake_{64ull << 20};
  ChunkTable table_;
  CUstream copy_ = nullptr;
  std::unique_ptr<StreamTracker> tracker_;
  uint32_t copy_index_ = 0;
  std::unique_ptr<ChunkUses> uses_;
};

}  // namespace memvirt::shim::testing

#endif  // MEMVIRT_SHIM_TESTING_HELD_WORK_H_
