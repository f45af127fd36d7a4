#include "shim/core/alloc_event_log.h"

#include <gtest/gtest.h>

namespace memvirt::shim {
namespace {

TEST(AllocEventLogTest, RecordsNothingUntilTheFirstReport) {
  AllocEventLog log;
  log.Record(1, 4096, false);
  UsageReport first;
  log.TakeInto(&first);
  EXPECT_TRUE(first.alloc_events.empty());
  EXPECT_EQ(first.dropped_alloc_events, 0u);

  log.Record(2, 8192, false);
  log.Record(2, 8192, true);
  UsageReport second;
  log.TakeInto(&second);
  ASSERT_EQ(second.alloc_events.size(), 2u);
  EXPECT_EQ(second.alloc_events[0].alloc_id, 2u);
  EXPECT_EQ(second.alloc_events[0].bytes, 8192u);
  EXPECT_FALSE(second.alloc_events[0].freed);
  EXPECT_TRUE(second.alloc_events[1].freed);
  UsageReport third;
  log.TakeInto(&third);
  EXPECT_TRUE(third.alloc_events.empty());  // each event is reported once
}

TEST(AllocEventLogTest, BeyondTheBoundEventsAreCountedAsDropped) {
  AllocEventLog log;
  UsageReport report;
  log.TakeInto(&report);
  for (size_t i = 0; i < AllocEventLog::kMaxEvents + 5; ++i) log.Record(i, 256, false);
  log.TakeInto(&report);
  EXPECT_EQ(report.alloc_events.size(), AllocEventLog::kMaxEvents);
  EXPECT_EQ(report.dropped_alloc_events, 5u);
  log.Record(7, 256, true);
  log.TakeInto(&report);
  EXPECT_EQ(report.alloc_events.size(), 1u);
  EXPECT_EQ(report.dropped_alloc_events, 5u);  // cumulative
}

}  // namespace
}  // namespace memvirt::shim
