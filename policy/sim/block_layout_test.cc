#include "memvirt/policy/block_layout.h"

#include <gtest/gtest.h>

namespace memvirt::policy {
namespace {

TEST(BlockLayoutTest, SplitsLargeAndRoundsSmallTensors) {
  trace::Trace t;
  t.tensors = {{10, 5 * 1024 * 1024 + 7, "activation", false},  // 3 chunks of 2 MiB
               {11, 100, "weight", true},                       // one 4 KiB block
               {12, 2 * 1024 * 1024, "gradient", false}};       // exactly one chunk
  BlockLayout l = LayoutBlocks(t, 2 << 20, 4096);
  ASSERT_EQ(l.blocks.size(), 5u);
  EXPECT_EQ(l.first, (std::vector<uint64_t>{0, 3, 4}));
  EXPECT_EQ(l.count, (std::vector<uint32_t>{3, 1, 1}));
  uint64_t data = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(l.blocks[i].device_bytes, 2u << 20);
    EXPECT_EQ(l.blocks[i].tensor, 0u);
    data += l.blocks[i].data_bytes;
  }
  EXPECT_EQ(data, t.tensors[0].bytes);  // transfers move exactly the tensor
  EXPECT_EQ(l.blocks[2].data_bytes, 1024u * 1024 + 7);
  EXPECT_EQ(l.blocks[3].device_bytes, 4096u);
  EXPECT_EQ(l.blocks[3].data_bytes, 100u);
  EXPECT_EQ(l.blocks[4].data_bytes, 2u << 20);
}

}  // namespace
}  // namespace memvirt::policy
