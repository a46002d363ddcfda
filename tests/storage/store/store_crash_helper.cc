// The child of store_crash_test: updates experts in a loop until it is killed.
//
//   store_crash_helper <file system> <store path> <log path> <seed>
//
// For every update it appends "W <layer> <expert> <generation>" to the log before submitting the
// write, and "A <layer> <expert> <generation>" after the store acknowledged it (after the durable
// publish). Up to four writes, of distinct experts, are in flight at once. The parent SIGKILLs it
// at a random moment and checks the store against the log.
#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "storage/store/expert_store.h"
#include "tests/storage/test_util.h"

namespace {

void Log(int fd, char tag, uint32_t layer, uint32_t expert, uint64_t generation) {
  std::string line = std::string(1, tag) + " " + std::to_string(layer) + " " +
                     std::to_string(expert) + " " + std::to_string(generation) + "\n";
  // One write(2) per line on an O_APPEND file: lines never interleave, and a SIGKILL cannot lose
  // a line that write returned for.
  if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sy::storage;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <fs> <store> <log> <seed>\n", argv[0]);
    return 2;
  }
  auto fs = MakeFileSystem(argv[1]);
  if (!fs.ok()) return 3;
  StoreOptions options;
  options.verify_on_open = false;  // the parent verifies
  auto store = ExpertStore::Open(fs->get(), argv[2], options);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 4;
  }
  int log = ::open(argv[3], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (log < 0) return 5;
  const uint64_t payload = (*store)->kinds()[0].payload_bytes;
  const uint32_t layers = (*store)->num_layers();
  const uint32_t experts = (*store)->num_experts();
  std::mt19937_64 rng(std::strtoull(argv[4], nullptr, 10));

  std::mutex mutex;
  std::condition_variable cv;
  std::set<uint64_t> in_flight;  // packed keys
  for (;;) {
    ExpertKey key;
    {
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait(lock, [&] { return in_flight.size() < 4; });
      do {
        key = ExpertKey{static_cast<uint32_t>(rng() % layers),
                        static_cast<uint32_t>(rng() % experts)};
      } while (in_flight.count(key.Packed()) > 0);
      in_flight.insert(key.Packed());
    }
    uint64_t generation = *(*store)->Generation(key, ExtentKind::kWeights) + 1;
    auto data = std::make_shared<std::vector<std::byte>>(
        sy::storage::testing::ExpertBytes(key.layer, key.expert, generation, payload));
    Log(log, 'W', key.layer, key.expert, generation);
    (*store)->WriteAsync(key, ExtentKind::kWeights, *data,
                         [&, key, generation, data](sy::Result<uint64_t> result) {
                           if (!result.ok() || *result != generation) {
                             Log(log, 'X', key.layer, key.expert, result.ok() ? *result : 0);
                             std::abort();
                           }
                           Log(log, 'A', key.layer, key.expert, generation);
                           std::lock_guard<std::mutex> lock(mutex);
                           in_flight.erase(key.Packed());
                           cv.notify_all();
                         });
  }
}
