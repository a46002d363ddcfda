// Writes the seed corpus of the storage fuzzers into the directory given: store images made by
// the real store on an in-memory file system (empty, written, updated, two kinds) for
// storage_index_fuzzer, and expert access traces (a routing trace as a model run records it, and a
// small Zipf trace) for storage_trace_fuzzer. Both fuzzers read the one directory.
//
//   storage_fuzz_corpus fuzz/storage/corpus
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "storage/cache/access_trace.h"
#include "storage/store/expert_store.h"
#include "storage/fs/mem_file_system.h"

namespace {

bool Save(sy::storage::MemFileSystem& fs, const std::string& from, const std::string& to) {
  auto bytes = fs.Contents(from);
  if (!bytes.ok()) return false;
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes->data()),
            static_cast<std::streamsize>(bytes->size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sy::storage;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  MemFileSystem fs;
  StoreLayout one;
  one.num_layers = 1;
  one.num_experts = 2;
  one.kinds.push_back(KindSpec{ExtentKind::kWeights, {100, 200, 100}, 1});
  StoreLayout two;
  two.num_layers = 2;
  two.num_experts = 2;
  two.kinds.push_back(KindSpec{ExtentKind::kWeights, {64, 64, 64}, 2});
  two.kinds.push_back(KindSpec{ExtentKind::kTrainState, {256, 256, 256}, 1});
  {
    auto store = ExpertStore::Create(&fs, "/empty", one);
    if (!store.ok()) return 1;
  }
  if (!Save(fs, "/empty", dir + "/empty.store")) return 1;
  {
    auto store = ExpertStore::Create(&fs, "/written", two);
    if (!store.ok()) return 1;
    std::vector<std::byte> data(4096, std::byte{7});
    for (uint32_t e = 0; e < 2; ++e) {
      if (!(*store)->Write({1, e}, ExtentKind::kWeights, data).get().ok()) return 1;
    }
    if (!(*store)->Write({0, 1}, ExtentKind::kTrainState, data).get().ok()) return 1;
  }
  if (!Save(fs, "/written", dir + "/written.store")) return 1;
  {
    auto store = ExpertStore::Open(&fs, "/written");
    if (!store.ok()) return 1;
    std::vector<std::byte> data(4096, std::byte{9});
    if (!(*store)->Write({1, 0}, ExtentKind::kWeights, data).get().ok()) return 1;
  }
  if (!Save(fs, "/written", dir + "/updated.store")) return 1;

  std::ofstream routing(dir + "/routing.trace", std::ios::trunc);
  routing << kTraceHeader << "\n"
          << "layers 2 experts 8\n"
          << "# step layer experts (top-2 over the step's tokens)\n"
          << "0 0 1 5\n0 1 0 2 7\n1 0 5\n1 1 2 3\n3 0 0 1 5 6\n";
  if (!routing) return 1;
  ZipfTraceOptions zipf;
  zipf.num_layers = 2;
  zipf.num_experts = 16;
  zipf.steps = 20;
  zipf.drift_every = 10;
  sy::Result<AccessTrace> trace = GenerateZipfTrace(zipf);
  if (!trace.ok() || !WriteTraceFile(dir + "/zipf.trace", *trace).ok()) return 1;
  return 0;
}
