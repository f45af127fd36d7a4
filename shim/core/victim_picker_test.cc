// The candidate rule of Note [eviction], against the fake driver (held
// streams keep uses pending) and a policy that offers chunks in a fixed
// order (ScriptedPolicy).
#include "shim/core/victim_picker.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "shim/testing/fake_driver.h"
#include "shim/testing/held_work.h"
#include "shim/testing/scripted_policy.h"

namespace memvirt::shim {
namespace {

constexpr uint32_t kChunks = 8;

class VictimPickerTest : public testing::HeldWorkTest {
 protected:
  VictimPickerTest() : HeldWorkTest(kChunks) {
    policy_.victim_order = {5, 3, 0, 7, 1, 2, 4, 6};
    for (uint32_t c = 0; c < kChunks; ++c) MakeBlock(c, 1);
    touch_ = std::make_unique<TouchSet>(&table_, nullptr);
    touch_->Begin();
    picker_ = std::make_unique<VictimPicker>(&table_, uses_.get(), &policy_, touch_.get());
  }

  // A use of `chunk` by work queued on `stream`, held until released.
  uint32_t UseOnHeldStream(uint32_t chunk, CUstream stream) {
    const StreamUse op = Issue(stream);
    uses_->Add(chunk, op.stream, op.seq);
    return op.stream;
  }

  testing::ScriptedPolicy policy_;
  std::unique_ptr<TouchSet> touch_;
  std::unique_ptr<VictimPicker> picker_;
};

TEST_F(VictimPickerTest, IdleCandidatesComeInThePolicysOrderEachOnce) {
  std::vector<uint32_t> victims;
  picker_->PickIdle(3, kNoIndex, &victims);
  EXPECT_EQ(victims, (std::vector<uint32_t>{5, 3, 0}));
  for (uint32_t c = 0; c < kChunks; ++c) EXPECT_FALSE(table_[c].picked) << c;
  // The marks are gone: a later eviction may pick them again; it stops when
  // none is left.
  victims.clear();
  picker_->PickIdle(100, kNoIndex, &victims);
  EXPECT_EQ(victims, (std::vector<uint32_t>{5, 3, 0, 7, 1, 2, 4, 6}));
}

TEST_F(VictimPickerTest, TheOperationsPinnedMovingAndNonDeviceChunksAreNoCandidates) {
  touch_->Chunk(5);                            // the operation's
  table_[3].pinned = true;                     // held for an export
  table_[0].evicting = true;                   // page-out in flight
  table_[7].residence = Residence::kHost;      // not on the device
  table_[1].residence = Residence::kUnbacked;  // nothing to page out
  std::vector<uint32_t> victims;
  picker_->PickIdle(kChunks, kNoIndex, &victims);
  EXPECT_EQ(victims, (std::vector<uint32_t>{2, 4, 6}));
  uint32_t v = kNoIndex;
  table_[2].evicting = table_[4].evicting = table_[6].evicting = true;
  EXPECT_FALSE(picker_->PickInUse(&v));
  touch_->Begin();  // a new operation: chunk 5 is a candidate again
  EXPECT_TRUE(picker_->PickInUse(&v));
  EXPECT_EQ(v, 5u);
}

TEST_F(VictimPickerTest, AChunkInUseOnlyOnTheOperationsStreamIsACandidateForIt) {
  CUstream own = HeldStream(), other = HeldStream();
  const uint32_t own_index = UseOnHeldStream(5, own);
  (void)UseOnHeldStream(3, other);
  (void)UseOnHeldStream(0, own);
  (void)UseOnHeldStream(0, other);  // busy on both
  std::vector<uint32_t> victims;
  picker_->PickIdle(2, kNoIndex, &victims);  // idle chunks only
  EXPECT_EQ(victims, (std::vector<uint32_t>{7, 1}));
  victims.clear();
  picker_->PickIdle(2, own_index, &victims);
  EXPECT_EQ(victims, (std::vector<uint32_t>{5, 7}));
  uint32_t v = kNoIndex;
  EXPECT_TRUE(picker_->PickInUse(&v));  // whatever its uses: the policy's first
  EXPECT_EQ(v, 5u);
  fake_.Release(other);
  fake_.Release(own);
  tracker_->CoverAll();
  victims.clear();
  picker_->PickIdle(3, kNoIndex, &victims);
  EXPECT_EQ(victims, (std::vector<uint32_t>{5, 3, 0}));
}

}  // namespace
}  // namespace memvirt::shim
