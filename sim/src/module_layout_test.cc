#include <gtest/gtest.h>

#include "module.h"

namespace memsim {
namespace {

TEST(SimParamLayout, UsesNaturalAlignmentCappedAtEight) {
  const unsigned sizes[] = {1, 8, 4, 2, 16, 12, 0};
  ParamLayout l = MakeParamLayout(sizes);
  ASSERT_EQ(l.sizes.size(), 6u);
  EXPECT_EQ(l.offsets[0], 0u);   // char
  EXPECT_EQ(l.offsets[1], 8u);   // pointer, aligned to 8
  EXPECT_EQ(l.offsets[2], 16u);  // int
  EXPECT_EQ(l.offsets[3], 20u);  // short
  EXPECT_EQ(l.offsets[4], 24u);  // 16-byte struct, aligned to 8
  EXPECT_EQ(l.offsets[5], 40u);  // 12-byte struct, aligned to 8
  EXPECT_EQ(l.total, 52u);
}

TEST(SimParamLayout, EmptyListMeansNoParameters) {
  const unsigned none[] = {0};
  EXPECT_TRUE(MakeParamLayout(none).sizes.empty());
  EXPECT_EQ(MakeParamLayout(nullptr).total, 0u);
}

}  // namespace
}  // namespace memsim
