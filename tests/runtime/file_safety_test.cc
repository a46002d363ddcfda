// Issue 46: files that no other user can redirect, and readers that never block.
//   - OpenRegularFile (and ReadFile, MappedFile through it) refuses a FIFO, a directory, a device
//     node and a socket by name, at once; a FIFO never hangs the open.
//   - CreateNewFile, CreateNewDirectory and OpenNoFollow refuse a symbolic link planted where they
//     create, dangling or not, and leave its target untouched.
//   - RenameNoReplace never replaces, even when many renames race for one name.
//   - WriteFileReplacing replaces a link, never writes through it.
//   - TemporaryPathFor's names are new each time and carry their pid.
//   - ScopedTemporary removes its file or directory on destruction and on SIGTERM / SIGINT.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/file_creation.h"
#include "runtime/core/mapped_file.h"
#include "runtime/core/read_file.h"
#include "runtime/core/regular_file.h"
#include "runtime/core/temporary_cleanup.h"
#include "tests/temp_dir.h"

namespace sy {
namespace {

using testing::TempDir;

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Runs `open` on a thread; if it has not returned after 5 s (it hangs on the FIFO), a writer
// opens the FIFO to release it and the test fails.
template <typename Fn>
Status WithoutHanging(const std::string& fifo, Fn open) {
  std::packaged_task<Status()> task([&] { return open(); });
  std::future<Status> done = task.get_future();
  std::thread runner(std::move(task));
  const bool returned = done.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!returned) {
    ADD_FAILURE() << "opening the FIFO " << fifo << " hung";
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
  }
  runner.join();
  return done.get();
}

TEST(RegularFileTest, AFifoIsRefusedAtOnceByEveryReader) {
  TempDir dir("file-safety");
  const std::string fifo = dir / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string want = fifo + " is a FIFO (named pipe), not a regular file";
  Status s = WithoutHanging(fifo, [&] { return OpenRegularFile(fifo).status(); });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), want);
  s = WithoutHanging(fifo, [&] { return OpenRegularFile(fifo, O_RDWR).status(); });
  EXPECT_EQ(s.message(), want);
  s = WithoutHanging(fifo, [&] { return ReadFile(fifo).status(); });
  EXPECT_EQ(s.message(), want);
  s = WithoutHanging(fifo, [&] { return MappedFile::Open(fifo).status(); });
  EXPECT_EQ(s.message(), want);
  s = WithoutHanging(fifo, [&] { return CheckRegularFile(fifo); });
  EXPECT_EQ(s.message(), want);
}

TEST(RegularFileTest, DirectoriesDevicesAndSocketsAreNamed) {
  TempDir dir("file-safety");
  Status s = ReadFile(dir.path()).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), dir.path() + " is a directory, not a regular file");
  s = MappedFile::Open("/dev/null").status();
  EXPECT_EQ(s.message(), "/dev/null is a character device, not a regular file");
  s = ReadFile("/dev/zero").status();  // would otherwise read forever
  EXPECT_EQ(s.message(), "/dev/zero is a character device, not a regular file");

  const std::string socket_path = dir / "s";
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(address.sun_path));
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  s = ReadFile(socket_path).status();
  ::close(sock);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), socket_path + " is a socket, not a regular file");

  const std::string dangling = dir / "dangling";
  ASSERT_EQ(::symlink("nowhere", dangling.c_str()), 0);
  s = ReadFile(dangling).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), dangling + " is a dangling symbolic link (to nowhere)");

  const std::string file = dir / "ok";
  Write(file, "bytes");
  Result<UniqueFd> fd = OpenRegularFile(file);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(::fcntl(fd->get(), F_GETFL) & O_NONBLOCK, 0) << "reads block again once checked";
}

TEST(FileCreationTest, APlantedLinkIsNeverFollowed) {
  TempDir dir("file-safety");
  const std::string victim = dir / "victim";
  Write(victim, "precious");
  const std::string link = dir / "rank-0.store.tmp";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  const std::string dangling = dir / "switchyard.lock";
  const std::string dangling_target = dir / "created-through-the-link";
  ASSERT_EQ(::symlink(dangling_target.c_str(), dangling.c_str()), 0);

  for (const std::string& path : {link, dangling}) {
    Result<UniqueFd> created = CreateNewFile(path);
    EXPECT_EQ(created.status().code(), StatusCode::kFailedPrecondition) << path;
    EXPECT_NE(created.status().message().find(path + " is a symbolic link (to "), std::string::npos)
        << created.status().message();
    EXPECT_NE(created.status().message().find("refusing to follow it"), std::string::npos);
    Result<UniqueFd> opened = OpenNoFollow(path, O_RDWR | O_CREAT | O_TRUNC);
    EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition) << path;
    EXPECT_EQ(CreateNewDirectory(path).code(), StatusCode::kFailedPrecondition) << path;
    Result<UniqueFd> read = OpenRegularFile(path, O_RDWR | O_NOFOLLOW);
    EXPECT_EQ(read.status().code(), StatusCode::kFailedPrecondition) << path;
    EXPECT_NE(read.status().message().find(path + " is a symbolic link"), std::string::npos);
  }
  EXPECT_EQ(Contents(victim), "precious");
  EXPECT_FALSE(std::filesystem::exists(dangling_target));

  const std::string plain = dir / "plain";
  Write(plain, "x");
  EXPECT_EQ(CreateNewFile(plain).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(CreateNewFile(plain).status().message(), plain + " exists");
  Result<UniqueFd> fresh = CreateNewFile(dir / "fresh");
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_TRUE(CreateNewDirectory(dir / "staging").ok());
}

TEST(FileCreationTest, WriteFileReplacingReplacesALinkInsteadOfWritingThroughIt) {
  TempDir dir("file-safety");
  const std::string victim = dir / "victim";
  Write(victim, "precious");
  const std::string report = dir / "bench.json";
  ASSERT_EQ(::symlink(victim.c_str(), report.c_str()), 0);
  ASSERT_TRUE(WriteFileReplacing(report, "{}\n").ok());
  EXPECT_EQ(Contents(victim), "precious");
  EXPECT_FALSE(std::filesystem::is_symlink(report));
  EXPECT_EQ(Contents(report), "{}\n");
  ASSERT_TRUE(WriteFileReplacing(report, "{\"a\": 1}\n").ok());
  EXPECT_EQ(Contents(report), "{\"a\": 1}\n");
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_EQ(names.size(), 2u) << "no temporary is left";
}

TEST(FileCreationTest, RenameNoReplaceNeverReplacesEvenUnderARace) {
  TempDir dir("file-safety");
  const std::string target = dir / "out";
  Write(target, "first");
  const std::string staged = dir / "staged";
  Write(staged, "second");
  Status s = RenameNoReplace(staged, target);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s.message(), target + " exists");
  EXPECT_EQ(Contents(target), "first");
  EXPECT_EQ(Contents(staged), "second");

  // Directories too (an hf conversion's staging directory onto an empty --out directory).
  ASSERT_TRUE(CreateNewDirectory(dir / "dir-out").ok());
  ASSERT_TRUE(CreateNewDirectory(dir / "dir-staged").ok());
  EXPECT_EQ(RenameNoReplace(dir / "dir-staged", dir / "dir-out").code(),
            StatusCode::kAlreadyExists);

  // Eight writers finish at once: exactly one lands, the others are told.
  constexpr int kWriters = 8;
  std::vector<std::string> temps;
  for (int i = 0; i < kWriters; ++i) {
    temps.push_back(TemporaryPathFor(dir / "race"));
    Write(temps.back(), "writer " + std::to_string(i));
  }
  std::atomic<int> landed{0}, refused{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      Status r = RenameNoReplace(temps[static_cast<size_t>(i)], dir / "race");
      if (r.ok()) {
        landed.fetch_add(1);
      } else {
        refused.fetch_add(1);
        EXPECT_EQ(r.code(), StatusCode::kAlreadyExists);
      }
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(landed.load(), 1);
  EXPECT_EQ(refused.load(), kWriters - 1);
}

TEST(FileCreationTest, TemporaryNamesAreNewEachTimeAndCarryThePid) {
  std::set<std::string> names;
  for (int i = 0; i < 100; ++i) names.insert(TemporaryPathFor("/d/model.gguf"));
  EXPECT_EQ(names.size(), 100u);
  const std::string name = *names.begin();
  const std::string prefix = "/d/model.gguf.tmp." + std::to_string(::getpid()) + ".";
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  EXPECT_EQ(name.size(), prefix.size() + 16);
  EXPECT_EQ(TemporaryPathOwner("model.gguf.tmp.4321.00ff00ff00ff00ff"), 4321);
  EXPECT_EQ(TemporaryPathOwner("model.gguf.tmp.4321"), 4321);
  for (const char* other :
       {"model.gguf", "x.tmp.", "x.tmp.12a", "x.tmp.12.", "x.tmp.12.XYZ", ".tmp.12", "x.tmp.0"}) {
    EXPECT_EQ(TemporaryPathOwner(other), -1) << other;
  }
}

TEST(ScopedTemporaryTest, RemovesOnDestructionUnlessReleased) {
  TempDir dir("file-safety");
  {
    ScopedTemporary file(dir / "a.tmp");
    Write(file.path(), "x");
    ScopedTemporary tree(dir / "staging");
    std::filesystem::create_directories(tree.path() + "/sub");
    Write(tree.path() + "/sub/shard", "y");
    ScopedTemporary kept(dir / "kept");
    Write(kept.path(), "z");
    kept.Release();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "a.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir / "staging"));
  EXPECT_TRUE(std::filesystem::exists(dir / "kept"));
}

// A child process registers a temporary file and a staging directory, then is ended by the
// signal: the handler removes both and the child dies by that signal.
TEST(ScopedTemporaryTest, SigtermAndSigintRemoveTheLiveTemporaries) {
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) {
    TempDir dir("file-safety");
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      InstallTemporaryCleanupOnSignals();
      ScopedTemporary file(dir / "model.gguf.tmp.1");
      Write(file.path(), std::string(1 << 20, 'x'));
      ScopedTemporary staging(dir / "hf.tmp.1");
      std::filesystem::create_directories(staging.path() + "/a/b");
      for (int i = 0; i < 300; ++i) Write(staging.path() + "/shard-" + std::to_string(i), "s");
      Write(staging.path() + "/a/b/deep", "d");
      ScopedTemporary released(dir / "done");
      Write(released.path(), "kept");
      released.Release();
      const char byte = 1;
      if (::write(ready[1], &byte, 1) != 1) _exit(3);
      while (true) ::pause();
    }
    ::close(ready[1]);
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    ::close(ready[0]);
    ASSERT_EQ(::kill(child, signal), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal) << "status " << status;
    EXPECT_FALSE(std::filesystem::exists(dir / "model.gguf.tmp.1")) << strsignal(signal);
    EXPECT_FALSE(std::filesystem::exists(dir / "hf.tmp.1")) << strsignal(signal);
    EXPECT_TRUE(std::filesystem::exists(dir / "done"));
  }
}

}  // namespace
}  // namespace sy
