#include "memvirt/policy/time_bound.h"

#include <gtest/gtest.h>

namespace memvirt::policy {
namespace {

// 1 GB/s = 1000 bytes/us.
trace::Trace TwoWeights() {
  trace::Trace t;
  t.tensors = {{0, 4000, "weight", true}, {1, 4000, "weight", true}};
  t.kernels = {{0, "k0", 1, {0}, {}}, {1, "k1", 1, {1}, {}}};
  return t;
}

TEST(TimeBoundTest, FittingTraceIsBoundByCompute) {
  EXPECT_DOUBLE_EQ(TimeLowerBoundUs(TwoWeights(), 8000, 1 << 20, 1, 1), 2);
}

TEST(TimeBoundTest, DataBeyondTheDeviceCrossesTheLink) {
  // Both kernels together read 8000 bytes with room for 4000: 4000 bytes at
  // 1000 B/us take 4 us, more than the 2 us of compute.
  EXPECT_DOUBLE_EQ(TimeLowerBoundUs(TwoWeights(), 4000, 1 << 20, 1, 1), 4);
  // Without host memory the other 4000 come from SSD at 500 B/us: 8 us.
  EXPECT_DOUBLE_EQ(TimeLowerBoundUs(TwoWeights(), 4000, 0, 1, 0.5), 8);
}

TEST(TimeBoundTest, WindowsSeeDataWrittenBeforeThem) {
  // k0 writes X; k1 reads weight Y; k2 reads X (4000 bytes each, room for
  // 4000). The window k1..k2 reads 8000 bytes that hold data, so 4000 cross
  // the link during it (4 us): bound 1 + 4. (Were X's birth in k0 not seen,
  // k1..k2 would need nothing and the bound would be the 3 us of compute.)
  trace::Trace t;
  t.tensors = {{0, 4000, "activation", false}, {1, 4000, "weight", true}};
  t.kernels = {{0, "k0", 1, {}, {0}}, {1, "k1", 1, {1}, {}}, {2, "k2", 1, {0}, {}}};
  EXPECT_DOUBLE_EQ(TimeLowerBoundUs(t, 4000, 1 << 20, 1, 1), 5);
}

TEST(TimeBoundTest, DataWrittenAndReadLaterMustLeaveTheDevice) {
  // k0 writes X, k1 writes Y, k2 computes, k3 reads X, k4 reads Y (4000
  // bytes each, room for 4000, 1 us per kernel). At k1's end 8000 bytes are
  // still to be read and only 4000 fit: 4000 were written back during
  // k0..k1 (4 us); k2 takes 1 us; k3..k4 then fetch 4000 (4 us). Bound 9.
  trace::Trace t;
  t.tensors = {{0, 4000, "activation", false}, {1, 4000, "activation", false}};
  t.kernels = {{0, "k0", 1, {}, {0}},
               {1, "k1", 1, {}, {1}},
               {2, "k2", 1, {}, {}},
               {3, "k3", 1, {0}, {}},
               {4, "k4", 1, {1}, {}}};
  EXPECT_DOUBLE_EQ(TimeLowerBoundUs(t, 4000, 1 << 20, 1, 1), 9);
  // Data never read again needs no write back: without k3's read of X,
  // everything fits and the bound is the compute time.
  t.kernels[3].reads = {};
  EXPECT_DOUBLE_EQ(TimeLowerBoundUs(t, 4000, 1 << 20, 1, 1), 5);
}

}  // namespace
}  // namespace memvirt::policy
