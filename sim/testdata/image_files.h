// Test helper: the nvcc images built from image_kernels.cu (sim/CMakeLists.txt), and the shape of
// its kernels that the tests check against.
#ifndef MEMSIM_TESTDATA_IMAGE_FILES_H_
#define MEMSIM_TESTDATA_IMAGE_FILES_H_

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#ifndef MEMSIM_HAVE_IMAGES
#error "compile with MEMSIM_IMAGE_DEFS (sim/CMakeLists.txt)"
#endif

// Skips the current test when nvcc was not found at configure time.
#define MEMSIM_REQUIRE_IMAGES()                                                \
  do {                                                                         \
    if (!MEMSIM_HAVE_IMAGES) GTEST_SKIP() << "nvcc not found: no nvcc images"; \
  } while (0)

namespace memsim_images {

inline constexpr const char* kScale = "_Z5scalePffi";
inline constexpr const char* kAligned16 = "_Z9aligned16i6float46Bytes37double2c9Aligned16sPd";
inline constexpr const char* kAddValue = "_Z9add_valuePii";
inline constexpr const char* kNoHostImpl = "_Z12no_host_implPi";
inline constexpr const char* kCLinkage = "c_linkage";

inline std::string ImagePath(const std::string& name) {
  return std::string(MEMSIM_IMAGE_DIR) + "/" + name;
}

// The bytes of an image file (empty when missing).
inline std::vector<unsigned char> ReadImage(const std::string& name) {
  std::ifstream in(ImagePath(name), std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in),
                                    std::istreambuf_iterator<char>());
}

}  // namespace memsim_images

#endif  // MEMSIM_TESTDATA_IMAGE_FILES_H_
