#include "physical.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace memsim {
namespace {

constexpr uint64_t kSize = 2ULL << 20;

CUmemAllocationProp HostProp() {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  return prop;
}

// A 2 MiB-aligned, read-write mapping of `phys` at a new address.
char* MapFresh(const Physical& phys, char** region) {
  void* r = mmap(nullptr, 2 * kSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED) return nullptr;
  *region = static_cast<char*>(r);
  const uint64_t at = (reinterpret_cast<uint64_t>(r) + kSize - 1) / kSize * kSize;
  void* p = mmap(reinterpret_cast<void*>(at), kSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                 phys.fd(), 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

// Whether this kernel can move shared mappings and leave the source mapped (Linux >= 5.13).
bool KernelMovesSharedMappings() {
  auto phys = Physical::Create(kSize, HostProp(), nullptr);
  char* region = nullptr;
  char* a = phys ? MapFresh(*phys, &region) : nullptr;
  if (a == nullptr) return false;
  const bool ok = phys->Park(reinterpret_cast<uint64_t>(a), PROT_READ | PROT_WRITE);
  munmap(region, 2 * kSize);
  return ok;
}

// One physical allocation mapped read-write at two fresh addresses `a` and `b`.
class SimPhysical : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!KernelMovesSharedMappings()) GTEST_SKIP() << "no MREMAP_DONTUNMAP for shared mappings";
    phys_ = Physical::Create(kSize, HostProp(), nullptr);
    ASSERT_NE(phys_, nullptr);
    a_ = MapFresh(*phys_, &region_a_);
    b_ = MapFresh(*phys_, &region_b_);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
  }
  void TearDown() override {
    if (region_a_ != nullptr) munmap(region_a_, 2 * kSize);
    if (region_b_ != nullptr) munmap(region_b_, 2 * kSize);
  }

  std::shared_ptr<Physical> phys_;
  char *region_a_ = nullptr, *region_b_ = nullptr;
  char *a_ = nullptr, *b_ = nullptr;
};

TEST_F(SimPhysical, ParkedMappingMovesWithItsBytesToTheNextAddress) {
  std::memset(a_, 0x5a, kSize);
  EXPECT_FALSE(phys_->parked());
  EXPECT_FALSE(phys_->Unpark(reinterpret_cast<uint64_t>(b_), PROT_READ | PROT_WRITE));  // none
  ASSERT_TRUE(phys_->Park(reinterpret_cast<uint64_t>(a_), PROT_READ | PROT_WRITE));
  EXPECT_TRUE(phys_->parked());
  EXPECT_FALSE(phys_->Park(reinterpret_cast<uint64_t>(b_), PROT_READ | PROT_WRITE));  // one only
  ASSERT_TRUE(phys_->Unpark(reinterpret_cast<uint64_t>(b_), PROT_READ | PROT_WRITE));
  EXPECT_FALSE(phys_->parked());
  EXPECT_EQ(b_[0], 0x5a);
  EXPECT_EQ(b_[kSize - 1], 0x5a);
  b_[100] = 1;  // still the allocation's pages: visible through the file
  char byte = 0;
  ASSERT_EQ(pread(phys_->fd(), &byte, 1, 100), 1);
  EXPECT_EQ(byte, 1);
}

TEST_F(SimPhysical, UnparkGrantsTheRequestedProtection) {
  ASSERT_TRUE(phys_->Park(reinterpret_cast<uint64_t>(a_), PROT_READ | PROT_WRITE));
  ASSERT_TRUE(phys_->Unpark(reinterpret_cast<uint64_t>(b_), PROT_READ));
  EXPECT_EQ(b_[0], 0);  // readable
  char* const b = b_;
  // Any death: SIGSEGV, or exit status 1 when a sanitizer's handler reports it.
  EXPECT_DEATH(
      {
        b[0] = 1;
        std::exit(0);
      },
      "");
}

}  // namespace
}  // namespace memsim
