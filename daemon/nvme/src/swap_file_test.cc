#include "memvirt/nvme/swap_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memvirt/nvme/extent_allocator.h"
#include "test_util.h"

namespace memvirt::nvme {
namespace {

constexpr uint64_t kMiB = 1 << 20;

SwapFileOptions Options(const std::string& dir, uint64_t bytes, int files) {
  SwapFileOptions o;
  o.dir = dir;
  o.total_bytes = bytes;
  o.file_count = files;
  o.allow_buffered = true;
  return o;
}

TEST(SwapFileSetTest, CreatesPrivatePreallocatedFiles) {
  testing::TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  const std::string dir = tmp.path() + "/swap";
  auto set = SwapFileSet::Open(Options(dir, 21 * kMiB, 2));  // 10.5 MiB each -> 10 MiB
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ((*set)->files().size(), 2u);
  EXPECT_EQ((*set)->total_bytes(), 20 * kMiB);
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const SwapFileInfo& f : (*set)->files()) {
    EXPECT_FALSE(f.reused);
    ASSERT_EQ(stat(f.path.c_str(), &st), 0) << f.path;
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f.path;
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), 10 * kMiB);
    if ((*set)->preallocated()) {
      EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 10 * kMiB) << "not preallocated";
    }
  }
}

TEST(SwapFileSetTest, ModeIs0600EvenWithPermissiveUmask) {
  testing::TempDir tmp;
  const mode_t old = umask(0);
  auto set = SwapFileSet::Open(Options(tmp.path(), 4 * kMiB, 1));
  umask(old);
  ASSERT_TRUE(set.ok()) << set.status();
  struct stat st;
  ASSERT_EQ(stat((*set)->files()[0].path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(SwapFileSetTest, ReusesItsOwnFileAfterRestartAndResizes) {
  testing::TempDir tmp;
  {
    auto set = SwapFileSet::Open(Options(tmp.path(), 8 * kMiB, 1));
    ASSERT_TRUE(set.ok()) << set.status();
  }
  auto set = SwapFileSet::Open(Options(tmp.path(), 4 * kMiB, 1));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE((*set)->files()[0].reused);
  struct stat st;
  ASSERT_EQ(stat((*set)->files()[0].path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4 * kMiB);
}

TEST(SwapFileSetTest, RefusesToReuseAFileOthersCanRead) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/" + SwapFileSet::FileName(0);
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  fchmod(fd, 0644);
  close(fd);
  auto set = SwapFileSet::Open(Options(tmp.path(), 4 * kMiB, 1));
  EXPECT_EQ(set.status().code(), absl::StatusCode::kFailedPrecondition) << set.status();
}

TEST(SwapFileSetTest, RefusesASymlink) {
  testing::TempDir tmp;
  const std::string target = tmp.path() + "/elsewhere";
  close(open(target.c_str(), O_CREAT | O_WRONLY, 0600));
  ASSERT_EQ(symlink(target.c_str(), (tmp.path() + "/" + SwapFileSet::FileName(0)).c_str()), 0);
  auto set = SwapFileSet::Open(Options(tmp.path(), 4 * kMiB, 1));
  EXPECT_FALSE(set.ok());
}

TEST(SwapFileSetTest, RejectsSizesBelowOneExtentPerFile) {
  testing::TempDir tmp;
  EXPECT_EQ(SwapFileSet::Open(Options(tmp.path(), 3 * kMiB, 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SwapFileSet::Open(Options(tmp.path(), 4 * kMiB, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SwapFileSetTest, ReportsDirectIoMode) {
  testing::TempDir tmp;
  auto set = SwapFileSet::Open(Options(tmp.path(), 4 * kMiB, 1));
  ASSERT_TRUE(set.ok());
  const int flags = fcntl((*set)->files()[0].fd, F_GETFL);
  EXPECT_EQ((*set)->direct_io(), (flags & O_DIRECT) != 0);
  // /var/tmp is a disk file system on the machines this runs on; tmpfs may lack O_DIRECT.
  SwapFileOptions strict = Options(tmp.path() + "/strict", 4 * kMiB, 1);
  strict.allow_buffered = false;
  auto direct = SwapFileSet::Open(strict);
  if (direct.ok()) {
    EXPECT_TRUE((*direct)->direct_io());
  } else {
    EXPECT_EQ(direct.status().code(), absl::StatusCode::kInvalidArgument) << direct.status();
  }
}

}  // namespace
}  // namespace memvirt::nvme
