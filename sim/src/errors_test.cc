#include "errors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

namespace memsim {
namespace {

TEST(SimErrorTable, EveryEntryHasMatchingNameAndText) {
  std::set<int> codes;
  ASSERT_GT(ErrorCount(), 90);
  for (int i = 0; i < ErrorCount(); ++i) {
    const CUresult code = ErrorCodeAt(i);
    EXPECT_TRUE(codes.insert(code).second) << "duplicate code " << code;
    const char* name = ErrorName(code);
    const char* text = ErrorString(code);
    ASSERT_NE(name, nullptr);
    ASSERT_NE(text, nullptr);
    EXPECT_EQ(std::strncmp(name, "CUDA_", 5), 0) << name;
    EXPECT_GT(std::strlen(text), 3u) << name;
  }
  EXPECT_STREQ(ErrorName(CUDA_ERROR_ILLEGAL_ADDRESS), "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_STREQ(ErrorName(CUDA_SUCCESS), "CUDA_SUCCESS");
  EXPECT_EQ(ErrorName(static_cast<CUresult>(123456)), nullptr);
}

}  // namespace
}  // namespace memsim
