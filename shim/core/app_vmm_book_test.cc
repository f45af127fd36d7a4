#include "shim/core/app_vmm_book.h"

#include <gtest/gtest.h>

namespace memvirt::shim {
namespace {

constexpr uint64_t kTag = 0x5356ull << 48;

TEST(AppVmmBookTest, HandlesAreTaggedDistinctAndLiveWhileReferenced) {
  AppVmmBook book;
  CUmemAllocationProp prop{};
  prop.location.id = 3;
  const CUmemGenericAllocationHandle a = book.AddHandle(kTag | (3ull << 40), 2, prop);
  const CUmemGenericAllocationHandle b = book.AddHandle(kTag | (3ull << 40), 5, prop);
  EXPECT_NE(a, b);
  EXPECT_EQ(a & ~((1ull << 40) - 1), kTag | (3ull << 40));
  EXPECT_EQ(b & ~((1ull << 40) - 1), kTag | (3ull << 40));
  VirtualHandle* v = book.Live(b);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->chunks, 5u);
  EXPECT_EQ(v->refs, 1u);
  EXPECT_EQ(v->state, std::vector<uint8_t>(5, 0));
  EXPECT_EQ(v->prop.location.id, 3);
  v->refs = 0;  // released, still mapped somewhere
  EXPECT_EQ(book.Live(b), nullptr);
  EXPECT_EQ(book.Find(b), v);
  book.EraseHandle(b);
  EXPECT_EQ(book.Find(b), nullptr);
  EXPECT_NE(book.Live(a), nullptr);
  EXPECT_EQ(book.Find(a ^ 1ull << 20), nullptr) << "an id never handed out";
}

TEST(AppVmmBookTest, ReservationsAreFoundByAnyOfTheirChunks) {
  AppVmmBook book;
  book.AddReservation({10, 4});
  book.AddReservation({20, 1});
  EXPECT_EQ(book.ReservationOf(9).count, 0u);
  for (uint32_t c = 10; c < 14; ++c) {
    EXPECT_EQ(book.ReservationOf(c).first, 10u) << c;
    EXPECT_EQ(book.ReservationOf(c).count, 4u) << c;
  }
  EXPECT_EQ(book.ReservationOf(14).count, 0u) << "just past the first";
  EXPECT_EQ(book.ReservationOf(20).first, 20u);
  EXPECT_EQ(book.ReservationAt(10).count, 4u);
  EXPECT_EQ(book.ReservationAt(11).count, 0u) << "not where one starts";
  book.EraseReservation(10);
  EXPECT_EQ(book.ReservationOf(12).count, 0u);
  EXPECT_EQ(book.ReservationOf(20).count, 1u);
}

TEST(AppVmmBookTest, MappingsAreFoundByChunkTakenOnceAndListedPerHandle) {
  AppVmmBook book;
  const CUmemGenericAllocationHandle h = book.AddHandle(kTag, 4, {});
  const CUmemGenericAllocationHandle other = book.AddHandle(kTag, 1, {});
  book.AddMapping(8, {h, 2, 2});  // the handle's second half first in memory
  book.AddMapping(4, {h, 0, 2});
  book.AddMapping(6, {other, 0, 1});
  uint32_t first = 0;
  const AppMapping* m = book.MappingOf(9, &first);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(first, 8u);
  EXPECT_EQ(m->offset_chunks, 2u);
  EXPECT_EQ(book.MappingOf(7, &first), nullptr) << "a gap between mappings";
  EXPECT_EQ(book.MappingOf(10, &first), nullptr) << "past the last";
  EXPECT_EQ(book.MappingOf(3, &first), nullptr) << "before the first";
  ASSERT_NE(book.MappingAt(6), nullptr);
  EXPECT_EQ(book.MappingAt(6)->handle, other);
  EXPECT_EQ(book.MappingAt(5), nullptr);
  const auto of_h = book.MappingsOf(h);
  ASSERT_EQ(of_h.size(), 2u);
  EXPECT_EQ(of_h[0].first, 4u) << "address order";
  EXPECT_EQ(of_h[1].first, 8u);
  const AppMapping taken = book.TakeMapping(8);
  EXPECT_EQ(taken.handle, h);
  EXPECT_EQ(taken.count, 2u);
  EXPECT_EQ(book.MappingAt(8), nullptr);
  EXPECT_EQ(book.MappingsOf(h).size(), 1u);
}

}  // namespace
}  // namespace memvirt::shim
