// Issue 46, findings 3, 6 and 7, on the real file system (posix and io_uring):
//   - a symbolic link planted where a store file goes is never followed: the file it points to
//     keeps its bytes, and the store is created beside it or refused with an error naming it;
//   - two processes creating the same store race to one winner: the other is told, at once, and
//     no temporary is left;
//   - a FIFO in place of a store file is refused by name instead of hanging the open.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "storage/fs/file_system.h"
#include "storage/store/expert_store.h"
#include "tests/temp_dir.h"

namespace sy::storage {
namespace {

using sy::testing::TempDir;

StoreLayout Layout() {
  StoreLayout layout;
  layout.num_layers = 2;
  layout.num_experts = 4;
  layout.checksum = ChecksumKind::kCrc32c;
  layout.kinds.push_back(KindSpec{ExtentKind::kWeights, {4096}, -1});
  return layout;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class StoreSafetyTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<FileSystem>> fs = MakeFileSystem(GetParam());
    if (!fs.ok()) GTEST_SKIP() << GetParam() << ": " << fs.status().message();
    fs_ = std::move(*fs);
  }
  std::unique_ptr<FileSystem> fs_;
};

TEST_P(StoreSafetyTest, APlantedLinkIsNeverFollowed) {
  TempDir dir("store-safety");
  const std::string victim = dir / "victim";
  std::ofstream(victim) << "precious";
  // A dangling link where the store goes: "something is there", and opening it is refused.
  const std::string store = dir / "rank-0.store";
  ASSERT_EQ(::symlink((dir / "elsewhere").c_str(), store.c_str()), 0);
  Result<std::unique_ptr<ExpertStore>> created = ExpertStore::Create(fs_.get(), store, Layout());
  EXPECT_EQ(created.status().code(), StatusCode::kAlreadyExists) << created.status().ToString();
  Result<std::unique_ptr<ExpertStore>> opened = ExpertStore::Open(fs_.get(), store);
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(opened.status().message().find(store + " is a symbolic link"), std::string::npos)
      << opened.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dir / "elsewhere"));

  // A link to another file where a file is opened or created: refused, naming it.
  const std::string link = dir / "planted";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  OpenOptions create;
  create.create = true;
  create.truncate = true;
  Result<std::unique_ptr<File>> file = fs_->Open(link, create);
  EXPECT_EQ(file.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(file.status().message().find(link + " is a symbolic link"), std::string::npos)
      << file.status().ToString();
  create.exclusive = true;
  EXPECT_EQ(fs_->Open(link, create).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(fs_->Open(link, OpenOptions{}).status().code(), StatusCode::kFailedPrecondition);
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "precious");

  // The store itself, once the link is gone: the temporaries it staged are gone too.
  ASSERT_EQ(::unlink(store.c_str()), 0);
  created = ExpertStore::Create(fs_.get(), store, Layout());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  created->reset();
  EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{"planted", "rank-0.store", "victim"}));
}

TEST_P(StoreSafetyTest, TwoCreatorsRaceToOneStore) {
  for (int round = 0; round < 5; ++round) {
    TempDir dir("store-safety");
    const std::string store = dir / "rank-0.store";
    std::atomic<bool> go{false};
    auto create = [&] {
      while (!go.load()) std::this_thread::yield();
      Result<std::unique_ptr<ExpertStore>> made = ExpertStore::Create(fs_.get(), store, Layout());
      return made.ok() ? Status::Ok() : made.status();
    };
    std::future<Status> a = std::async(std::launch::async, create);
    std::future<Status> b = std::async(std::launch::async, create);
    go = true;
    const Status first = a.get(), second = b.get();
    EXPECT_NE(first.ok(), second.ok()) << first.ToString() << " / " << second.ToString();
    const Status& lost = first.ok() ? second : first;
    EXPECT_EQ(lost.code(), StatusCode::kAlreadyExists) << lost.ToString();
    EXPECT_NE(lost.message().find(store), std::string::npos) << lost.ToString();
    EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"rank-0.store"});
    Result<std::unique_ptr<ExpertStore>> reopened = ExpertStore::Open(fs_.get(), store);
    EXPECT_TRUE(reopened.ok()) << reopened.status().ToString();
  }
}

TEST_P(StoreSafetyTest, AFifoInPlaceOfTheStoreIsRefusedByName) {
  TempDir dir("store-safety");
  const std::string fifo = dir / "rank-0.store";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::future<Status> opened = std::async(std::launch::async, [&] {
    Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(fs_.get(), fifo);
    return store.ok() ? Status::Ok() : store.status();
  });
  if (opened.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "opening a FIFO as the store hung";
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
  }
  const Status s = opened.get();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(fifo + " is a FIFO (named pipe), not a regular file"),
            std::string::npos)
      << s.ToString();
}

INSTANTIATE_TEST_SUITE_P(RealFileSystems, StoreSafetyTest, ::testing::Values("posix", "io_uring"));

}  // namespace
}  // namespace sy::storage
