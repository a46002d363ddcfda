// Crash test: a child process updates experts in a loop while this test SIGKILLs it at random
// moments (0-40 ms after it began writing), 120 times. After each kill the store is reopened
// (through posix, io_uring and pmem in turn) and every expert must be at an acknowledged generation
// (or the one the child was writing), with a valid checksum and exactly the bytes of that
// generation. No acknowledged write is lost.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "storage/store/expert_store.h"
#include "tests/storage/test_util.h"

#ifndef SY_CRASH_HELPER
#error "SY_CRASH_HELPER must name the store_crash_helper binary"
#endif

namespace sy::storage {
namespace {

using testing::ExpertBytes;

constexpr uint32_t kLayers = 2;
constexpr uint32_t kExperts = 8;
constexpr uint64_t kPayload = 3 * 4096;

struct LogState {
  std::map<uint64_t, uint64_t> acked;     // packed key -> highest acknowledged generation
  std::map<uint64_t, uint64_t> intended;  // packed key -> highest generation ever started
  int acks = 0;
  int starts = 0;
  bool mismatch = false;
};

void ReadLog(const std::string& path, LogState* state) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    char tag = 0;
    uint32_t layer = 0;
    uint32_t expert = 0;
    uint64_t generation = 0;
    if (!(fields >> tag >> layer >> expert >> generation)) continue;  // a line cut by the kill
    uint64_t key = ExpertKey{layer, expert}.Packed();
    if (tag == 'W') {
      state->intended[key] = std::max(state->intended[key], generation);
      ++state->starts;
    }
    if (tag == 'A') {
      state->acked[key] = std::max(state->acked[key], generation);
      ++state->acks;
    }
    if (tag == 'X') state->mismatch = true;
  }
}

TEST(StoreCrashTest, SigkillAtRandomMomentsNeverLosesAnAcknowledgedWrite) {
  testing::TempDir dir;
  const std::string path = dir.File("crash.store");
  const std::string log = dir.File("crash.log");
  {
    auto fs = MakeFileSystem("posix");
    ASSERT_TRUE(fs.ok());
    StoreLayout layout;
    layout.num_layers = kLayers;
    layout.num_experts = kExperts;
    layout.kinds.push_back(KindSpec{ExtentKind::kWeights, {4096, 4096, 4096}, 4});
    auto store = ExpertStore::Create(fs->get(), path, layout);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
  }
  const char* file_systems[] = {"posix", "io_uring", "pmem"};
  std::mt19937 rng(2024);
  LogState state;
  constexpr int kKills = 120;
  int kills_with_work = 0;  // the child had started writing
  int kills_mid_write = 0;  // ... and had a write started but not acknowledged
  auto started = std::chrono::steady_clock::now();
  for (int kill_number = 0; kill_number < kKills; ++kill_number) {
    std::remove(log.c_str());
    const char* child_fs = file_systems[kill_number % 3];
    std::string seed = std::to_string(rng());
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execl(SY_CRASH_HELPER, SY_CRASH_HELPER, child_fs, path.c_str(), log.c_str(), seed.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Kill at a random moment 0-40 ms after the child began writing (its first log line), so the
    // kills land mid-update however long the child takes to start (sanitizer builds: ~100 ms).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    struct stat log_stat {};
    while ((::stat(log.c_str(), &log_stat) != 0 || log_stat.st_size == 0) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int wait_status = 0;
    ASSERT_EQ(::waitpid(pid, &wait_status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL)
        << "the helper ended on its own (status " << wait_status << ") at kill " << kill_number;
    int acks_before = state.acks;
    int starts_before = state.starts;
    ReadLog(log, &state);
    ASSERT_FALSE(state.mismatch) << "the store acknowledged an unexpected generation";
    if (state.starts > starts_before) ++kills_with_work;
    if (state.starts - starts_before > state.acks - acks_before) ++kills_mid_write;

    auto fs = MakeFileSystem(file_systems[(kill_number + 1) % 3]);
    ASSERT_TRUE(fs.ok());
    auto store = ExpertStore::Open(fs->get(), path);
    ASSERT_TRUE(store.ok()) << "kill " << kill_number << ": " << store.status().ToString();
    ASSERT_TRUE((*store)->corrupt_extents().empty())
        << "kill " << kill_number << ": " << (*store)->corrupt_extents()[0].reason;
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (uint32_t e = 0; e < kExperts; ++e) {
        uint64_t key = ExpertKey{l, e}.Packed();
        uint64_t generation = *(*store)->Generation({l, e}, ExtentKind::kWeights);
        uint64_t acked = state.acked[key];
        uint64_t highest = std::max(acked, state.intended[key]);
        ASSERT_GE(generation, acked) << "kill " << kill_number << ": layer " << l << " expert " << e
                                     << " lost an acknowledged write";
        ASSERT_LE(generation, highest) << "kill " << kill_number << ": layer " << l << " expert "
                                       << e << " is at a generation nobody wrote";
        if (generation == 0) continue;
        std::vector<std::byte> back(kPayload);
        Status status = (*store)->Read({l, e}, ExtentKind::kWeights, back).get();
        ASSERT_TRUE(status.ok()) << status.ToString();
        ASSERT_EQ(back, ExpertBytes(l, e, generation, kPayload))
            << "kill " << kill_number << ": layer " << l << " expert " << e;
        // What survived is durable from now on: later children build on it.
        state.acked[key] = generation;
      }
    }
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf(
      "[ %d kills in %.1f s; %d acknowledged writes; %d kills after writing began, %d of them "
      "with a write in flight ]\n",
      kKills, seconds, state.acks, kills_with_work, kills_mid_write);
  EXPECT_GE(kills_with_work, kKills * 3 / 4) << "most kills should land while the child writes";
  EXPECT_GE(kills_mid_write, kKills / 2) << "most kills should cut a write short";
}

}  // namespace
}  // namespace sy::storage
