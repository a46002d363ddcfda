#include "storage/store/expert_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "storage/fs/fault_injection_file_system.h"
#include "storage/fs/mem_file_system.h"
#include "tests/storage/test_util.h"

namespace sy::storage {
namespace {

using testing::ExpertBytes;

constexpr uint64_t kPayload = 3 * 1000;  // gate | up | down, deliberately not 4 KiB-aligned

StoreLayout Layout(uint32_t layers, uint32_t experts, int64_t spare = -1) {
  StoreLayout layout;
  layout.num_layers = layers;
  layout.num_experts = experts;
  layout.checksum =
      ChecksumAvailable(ChecksumKind::kXxh3) ? ChecksumKind::kXxh3 : ChecksumKind::kCrc32c;
  layout.kinds.push_back(KindSpec{ExtentKind::kWeights, {1000, 1000, 1000}, spare});
  return layout;
}

std::vector<std::byte> ReadExpert(ExpertStore& store, ExpertKey key, Status* status = nullptr) {
  std::vector<std::byte> out(4096);
  Status s = store.Read(key, ExtentKind::kWeights, out).get();
  if (status != nullptr) *status = s;
  EXPECT_TRUE(status != nullptr || s.ok()) << s.ToString();
  out.resize(kPayload);
  return out;
}

uint64_t WriteExpert(ExpertStore& store, ExpertKey key, uint64_t generation) {
  std::vector<std::byte> data = ExpertBytes(key.layer, key.expert, generation, kPayload);
  Result<uint64_t> written = store.Write(key, ExtentKind::kWeights, data).get();
  EXPECT_TRUE(written.ok()) << written.status().ToString();
  return written.ok() ? *written : 0;
}

class ExpertStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<ExpertStore> Create(FileSystem* fs, StoreLayout layout = Layout(2, 4)) {
    Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Create(fs, "/s/store", layout);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }
  Result<std::unique_ptr<ExpertStore>> Open(FileSystem* fs) {
    return ExpertStore::Open(fs, "/s/store");
  }
  // Overwrites bytes of the store file behind the store's back.
  void Poke(uint64_t offset, uint8_t xor_with) {
    Result<std::unique_ptr<File>> file = mem_.Open("/s/store", OpenOptions{});
    ASSERT_TRUE(file.ok());
    uint8_t byte = 0;
    ASSERT_TRUE((*file)->Read(offset, &byte, 1).ok());
    byte ^= xor_with;
    ASSERT_TRUE((*file)->Write(offset, &byte, 1).ok());
  }

  MemFileSystem mem_{2};
};

TEST_F(ExpertStoreTest, WritesPublishGenerationsAndReadBack) {
  std::unique_ptr<ExpertStore> store = Create(&mem_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->Generation({1, 2}, ExtentKind::kWeights), 0u);
  Status never;
  ReadExpert(*store, {1, 2}, &never);
  EXPECT_EQ(never.code(), StatusCode::kNotFound);
  EXPECT_EQ(WriteExpert(*store, {1, 2}, 1), 1u);
  EXPECT_EQ(WriteExpert(*store, {1, 2}, 2), 2u);
  EXPECT_EQ(WriteExpert(*store, {0, 3}, 1), 1u);
  EXPECT_EQ(ReadExpert(*store, {1, 2}), ExpertBytes(1, 2, 2, kPayload));
  EXPECT_EQ(ReadExpert(*store, {0, 3}), ExpertBytes(0, 3, 1, kPayload));
  StoreStats stats = store->stats();
  EXPECT_EQ(stats.extents_written, 3u);
  EXPECT_EQ(stats.publishes, 3u);
  EXPECT_EQ(store->sequence(), 4u);  // created at 1

  store.reset();
  Result<std::unique_ptr<ExpertStore>> reopened = Open(&mem_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_TRUE((*reopened)->corrupt_extents().empty());
  EXPECT_EQ(*(*reopened)->Generation({1, 2}, ExtentKind::kWeights), 2u);
  EXPECT_EQ(ReadExpert(**reopened, {1, 2}), ExpertBytes(1, 2, 2, kPayload));
  EXPECT_EQ(ReadExpert(**reopened, {0, 3}), ExpertBytes(0, 3, 1, kPayload));
}

TEST_F(ExpertStoreTest, RejectsBadRequestsWithClearErrors) {
  std::unique_ptr<ExpertStore> store = Create(&mem_);
  ASSERT_NE(store, nullptr);
  std::vector<std::byte> small(10);
  Result<uint64_t> w = store->Write({0, 0}, ExtentKind::kWeights, small).get();
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> data(kPayload);
  w = store->Write({5, 0}, ExtentKind::kWeights, data).get();
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("layer 5 expert 0"), std::string::npos);
  w = store->Write({0, 0}, ExtentKind::kTrainState, data).get();
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ExpertStore::Create(&mem_, "/s/store", Layout(1, 1)).status().code(),
            StatusCode::kAlreadyExists);
}

// io_done marks the end of the I/O: it runs once per request, before done, also for a request
// that fails its checksum or is rejected, so a streaming reader can count reads at the device.
TEST_F(ExpertStoreTest, IoDoneRunsOnceBeforeDoneForEveryRead) {
  StoreOptions options;
  options.verify_on_open = false;
  std::unique_ptr<ExpertStore> store = Create(&mem_);
  ASSERT_NE(store, nullptr);
  WriteExpert(*store, {0, 0}, 1);
  WriteExpert(*store, {0, 1}, 1);
  store.reset();
  Result<std::unique_ptr<ExpertStore>> reopened = ExpertStore::Open(&mem_, "/s/store", options);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  Result<std::vector<uint8_t>> image = mem_.Contents("/s/store");
  ASSERT_TRUE(image.ok());
  Result<StoreMetadata> metadata = ParseStoreImage(*image);
  ASSERT_TRUE(metadata.ok());
  Poke(metadata->entries[1].offset + 7, 0x01);  // {0, 1} now fails its checksum

  const std::vector<ExpertKey> keys = {{0, 0}, {0, 1}, {0, 2}, {9, 0}};  // ok, corrupt, unwritten,
                                                                         // out of range
  std::vector<std::vector<std::byte>> buffers(keys.size(), std::vector<std::byte>(4096));
  std::mutex mutex;
  std::vector<int> io_done(keys.size(), 0);
  std::vector<int> done(keys.size(), 0);
  std::vector<bool> io_before_done(keys.size(), false);
  std::vector<std::promise<Status>> results(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    (*reopened)->ReadAsync(
        keys[i], ExtentKind::kWeights, buffers[i],
        [&, i](Status status) {
          {
            std::lock_guard<std::mutex> lock(mutex);
            ++done[i];
            io_before_done[i] = io_done[i] == 1;
          }
          results[i].set_value(std::move(status));
        },
        [&, i] {
          std::lock_guard<std::mutex> lock(mutex);
          ++io_done[i];
        });
  }
  std::vector<Status> statuses;
  for (auto& result : results) statuses.push_back(result.get_future().get());
  EXPECT_TRUE(statuses[0].ok()) << statuses[0].ToString();
  EXPECT_EQ(statuses[1].code(), StatusCode::kDataLoss);
  EXPECT_EQ(statuses[2].code(), StatusCode::kNotFound);
  EXPECT_EQ(statuses[3].code(), StatusCode::kInvalidArgument);
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(io_done[i], 1) << i;
    EXPECT_EQ(done[i], 1) << i;
    EXPECT_TRUE(io_before_done[i]) << i;
  }
}

TEST_F(ExpertStoreTest, CorruptExtentIsReportedWithItsExpertAndNeverUsed) {
  std::unique_ptr<ExpertStore> store = Create(&mem_);
  ASSERT_NE(store, nullptr);
  WriteExpert(*store, {1, 3}, 1);
  WriteExpert(*store, {0, 1}, 1);
  uint64_t pool = store->kinds()[0].pool_offset;
  uint64_t stride = store->kinds()[0].stride;
  store.reset();
  // Find which extent holds (1, 3): flip a byte in each written extent candidate in turn.
  Result<std::vector<uint8_t>> image = mem_.Contents("/s/store");
  ASSERT_TRUE(image.ok());
  Result<StoreMetadata> metadata = ParseStoreImage(*image);
  ASSERT_TRUE(metadata.ok());
  uint64_t offset = metadata->entries[metadata->superblock.EntryIndex(1, 3, 0)].offset;
  ASSERT_GE(offset, pool);
  ASSERT_EQ((offset - pool) % stride, 0u);
  Poke(offset + 1234, 0x01);

  Result<std::unique_ptr<ExpertStore>> reopened = Open(&mem_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  std::vector<CorruptExtent> corrupt = (*reopened)->corrupt_extents();
  ASSERT_EQ(corrupt.size(), 1u);
  EXPECT_EQ(corrupt[0].key, (ExpertKey{1, 3}));
  EXPECT_EQ(corrupt[0].generation, 1u);
  Status status;
  ReadExpert(**reopened, {1, 3}, &status);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("layer 1 expert 3"), std::string::npos) << status.message();
  EXPECT_EQ(ReadExpert(**reopened, {0, 1}), ExpertBytes(0, 1, 1, kPayload));
  // Rewriting the expert heals it.
  EXPECT_EQ(WriteExpert(**reopened, {1, 3}, 2), 2u);
  EXPECT_TRUE((*reopened)->corrupt_extents().empty());
  EXPECT_EQ(ReadExpert(**reopened, {1, 3}), ExpertBytes(1, 3, 2, kPayload));
}

TEST_F(ExpertStoreTest, CorruptionAfterOpenIsCaughtByTheReadChecksum) {
  StoreOptions options;
  options.verify_on_open = false;
  std::unique_ptr<ExpertStore> store = Create(&mem_);
  WriteExpert(*store, {0, 0}, 1);
  store.reset();
  Result<std::unique_ptr<ExpertStore>> reopened = ExpertStore::Open(&mem_, "/s/store", options);
  ASSERT_TRUE(reopened.ok());
  Result<std::vector<uint8_t>> image = mem_.Contents("/s/store");
  Result<StoreMetadata> metadata = ParseStoreImage(*image);
  Poke(metadata->entries[0].offset + 5, 0x80);
  Status status;
  ReadExpert(**reopened, {0, 0}, &status);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
  ASSERT_EQ((*reopened)->corrupt_extents().size(), 1u);
}

// A split read (a prefix, then the rest) reads each byte once and verifies the whole extent: the
// prefix's CRC carries over, so corruption in either part is DataLoss at the rest's read, and a
// rest read of a version that has moved on is refused.
TEST_F(ExpertStoreTest, SplitReadVerifiesTheWholeExtentAcrossItsParts) {
  StoreLayout layout = Layout(1, 2);
  layout.checksum = ChecksumKind::kCrc32c;
  StoreOptions options;
  options.verify_on_open = false;
  std::unique_ptr<ExpertStore> created = Create(&mem_, layout);
  ASSERT_NE(created, nullptr);
  ASSERT_TRUE(created->SplitReads());
  WriteExpert(*created, {0, 0}, 1);
  WriteExpert(*created, {0, 1}, 1);
  created.reset();
  Result<std::unique_ptr<ExpertStore>> opened = ExpertStore::Open(&mem_, "/s/store", options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ExpertStore& store = **opened;
  const std::vector<std::byte> want = ExpertBytes(0, 0, 1, kPayload);
  for (uint64_t split : {uint64_t{1}, uint64_t{1000}, uint64_t{2999}}) {
    SCOPED_TRACE(split);
    const uint64_t read_before = store.stats().bytes_read;
    std::vector<std::byte> prefix_buf(4096), whole(4096);
    std::promise<Result<ExpertStore::ExtentPrefix>> got;
    store.ReadPrefixAsync({0, 0}, ExtentKind::kWeights, split, prefix_buf,
                          [&got](Result<ExpertStore::ExtentPrefix> p) { got.set_value(p); });
    Result<ExpertStore::ExtentPrefix> prefix = got.get_future().get();
    ASSERT_TRUE(prefix.ok()) << prefix.status().ToString();
    EXPECT_EQ(prefix->bytes, split);
    EXPECT_EQ(prefix->generation, *store.Generation({0, 0}, ExtentKind::kWeights));
    EXPECT_EQ(0, std::memcmp(prefix_buf.data(), want.data(), split));
    std::promise<Status> rest;
    store.ReadRestAsync({0, 0}, ExtentKind::kWeights, *prefix, whole,
                        [&rest](Status s) { rest.set_value(s); });
    ASSERT_TRUE(rest.get_future().get().ok());
    EXPECT_EQ(0, std::memcmp(whole.data() + split, want.data() + split, kPayload - split));
    EXPECT_EQ(store.stats().bytes_read - read_before, kPayload);  // each byte once
    // A wrong prefix CRC (the prefix's bytes differed from the extent's) fails the whole.
    ExpertStore::ExtentPrefix bad = *prefix;
    bad.crc ^= 1;
    std::promise<Status> failed;
    store.ReadRestAsync({0, 0}, ExtentKind::kWeights, bad, whole,
                        [&failed](Status s) { failed.set_value(s); });
    Status status = failed.get_future().get();
    EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
    EXPECT_NE(status.message().find("layer 0 expert 0"), std::string::npos) << status.message();
    // That marked the extent corrupt; rewriting it heals it for the next round.
    WriteExpert(store, {0, 0}, 1);
  }
  // Corruption on disk in the rest is caught too.
  std::vector<std::byte> buf(4096);
  std::promise<Result<ExpertStore::ExtentPrefix>> got;
  store.ReadPrefixAsync({0, 1}, ExtentKind::kWeights, 1000, buf,
                        [&got](Result<ExpertStore::ExtentPrefix> p) { got.set_value(p); });
  Result<ExpertStore::ExtentPrefix> prefix = got.get_future().get();
  ASSERT_TRUE(prefix.ok());
  Result<std::vector<uint8_t>> image = mem_.Contents("/s/store");
  ASSERT_TRUE(image.ok());
  Result<StoreMetadata> metadata = ParseStoreImage(*image);
  ASSERT_TRUE(metadata.ok());
  Poke(metadata->entries[metadata->superblock.EntryIndex(0, 1, 0)].offset + 2500, 0x04);
  std::promise<Status> corrupt;
  store.ReadRestAsync({0, 1}, ExtentKind::kWeights, *prefix, buf,
                      [&corrupt](Status s) { corrupt.set_value(s); });
  EXPECT_EQ(corrupt.get_future().get().code(), StatusCode::kDataLoss);
  // A newer version than the prefix's: refused, never mixed.
  WriteExpert(store, {0, 1}, 2);
  std::promise<Status> moved;
  store.ReadRestAsync({0, 1}, ExtentKind::kWeights, *prefix, buf,
                      [&moved](Status s) { moved.set_value(s); });
  EXPECT_EQ(moved.get_future().get().code(), StatusCode::kFailedPrecondition);
}

TEST_F(ExpertStoreTest, TornNewestSuperblockFallsBackToThePreviousPublish) {
  std::unique_ptr<ExpertStore> store = Create(&mem_);
  WriteExpert(*store, {0, 0}, 1);
  WriteExpert(*store, {0, 0}, 2);
  uint64_t sequence = store->sequence();
  store.reset();
  Poke((sequence % 2) * kStoreBlock + 200, 0xFF);  // tear the newest superblock
  Result<std::unique_ptr<ExpertStore>> reopened = Open(&mem_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->sequence(), sequence - 1);
  EXPECT_FALSE((*reopened)->open_note().empty());
  EXPECT_EQ(*(*reopened)->Generation({0, 0}, ExtentKind::kWeights), 1u);
  EXPECT_EQ(ReadExpert(**reopened, {0, 0}), ExpertBytes(0, 0, 1, kPayload));
  // The store keeps working from there.
  EXPECT_EQ(WriteExpert(**reopened, {0, 0}, 2), 2u);
}

// A crash during a publish's single fdatasync can leave its superblock on disk without one of its
// new extents. Open must notice (the extent does not verify) and use the previous publish.
TEST_F(ExpertStoreTest, InterruptedPublishFallsBackToThePreviousOne) {
  std::unique_ptr<ExpertStore> store = Create(&mem_);
  WriteExpert(*store, {0, 0}, 1);
  WriteExpert(*store, {1, 1}, 1);
  uint64_t sequence = store->sequence();
  std::vector<std::byte> next = ExpertBytes(1, 1, 2, kPayload);
  ASSERT_TRUE(store->Write({1, 1}, ExtentKind::kWeights, next).get().ok());
  store.reset();
  Result<StoreMetadata> metadata = ParseStoreImage(*mem_.Contents("/s/store"));
  ASSERT_TRUE(metadata.ok());
  ASSERT_EQ(metadata->superblock.sequence, sequence + 1);
  ASSERT_TRUE(metadata->has_previous);
  Poke(metadata->entries[metadata->superblock.EntryIndex(1, 1, 0)].offset + 17, 0x10);

  Result<std::unique_ptr<ExpertStore>> reopened = Open(&mem_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->sequence(), sequence);
  EXPECT_NE((*reopened)->open_note().find("interrupted"), std::string::npos)
      << (*reopened)->open_note();
  EXPECT_TRUE((*reopened)->corrupt_extents().empty());
  EXPECT_EQ(*(*reopened)->Generation({1, 1}, ExtentKind::kWeights), 1u);
  EXPECT_EQ(ReadExpert(**reopened, {1, 1}), ExpertBytes(1, 1, 1, kPayload));
  EXPECT_EQ(ReadExpert(**reopened, {0, 0}), ExpertBytes(0, 0, 1, kPayload));
  // Writing on from there overwrites the interrupted publish's slot.
  EXPECT_EQ(WriteExpert(**reopened, {1, 1}, 2), 2u);
  reopened->reset();
  Result<std::unique_ptr<ExpertStore>> again = Open(&mem_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ReadExpert(**again, {1, 1}), ExpertBytes(1, 1, 2, kPayload));
}

TEST_F(ExpertStoreTest, BadFilesGiveClearErrors) {
  OpenOptions create;
  create.create = true;
  {
    Result<std::unique_ptr<File>> text = mem_.Open("/s/notes.txt", create);
    std::string words = "these are not experts";
    ASSERT_TRUE((*text)->Write(0, words.data(), words.size()).ok());
  }
  Result<std::unique_ptr<ExpertStore>> opened = ExpertStore::Open(&mem_, "/s/notes.txt");
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(opened.status().message().find("/s/notes.txt"), std::string::npos);

  std::unique_ptr<ExpertStore> store = Create(&mem_);
  WriteExpert(*store, {1, 1}, 1);
  store.reset();
  // Truncate: the index points past the end of the file.
  {
    Result<std::unique_ptr<File>> file = mem_.Open("/s/store", OpenOptions{});
    uint64_t size = *(*file)->Size();
    ASSERT_TRUE((*file)->Truncate(size - 4096).ok());
  }
  opened = Open(&mem_);
  EXPECT_EQ(opened.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(opened.status().message().find("truncated"), std::string::npos)
      << opened.status().message();
  EXPECT_EQ(ExpertStore::Open(&mem_, "/s/missing").status().code(), StatusCode::kNotFound);
}

TEST_F(ExpertStoreTest, UnsupportedVersionIsReported) {
  std::unique_ptr<ExpertStore> store = Create(&mem_);
  store.reset();
  Result<std::vector<uint8_t>> image = mem_.Contents("/s/store");
  Result<StoreMetadata> metadata = ParseStoreImage(*image);
  ASSERT_TRUE(metadata.ok());
  Superblock sb = metadata->superblock;
  sb.version = 9;
  auto bytes = EncodeSuperblock(sb);
  Result<std::unique_ptr<File>> file = mem_.Open("/s/store", OpenOptions{});
  ASSERT_TRUE((*file)->Write((sb.sequence % 2) * kStoreBlock, bytes.data(), bytes.size()).ok());
  Result<std::unique_ptr<ExpertStore>> opened = Open(&mem_);
  EXPECT_EQ(opened.status().code(), StatusCode::kUnimplemented) << opened.status().ToString();
}

TEST_F(ExpertStoreTest, ConcurrentWritersAndReadersSeeOnlyPublishedVersions) {
  std::unique_ptr<ExpertStore> store = Create(&mem_, Layout(2, 8, /*spare=*/3));
  ASSERT_NE(store, nullptr);
  for (uint32_t e = 0; e < 8; ++e) WriteExpert(*store, {0, e}, 1);
  constexpr int kWritesPerThread = 40;
  std::atomic<int> bad_reads{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  // Writers: each owns experts; several writes of one expert may be in flight at once.
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::future<Result<uint64_t>>> futures;
      std::vector<std::vector<std::byte>> buffers;
      buffers.reserve(kWritesPerThread);
      for (int i = 0; i < kWritesPerThread; ++i) {
        ExpertKey key{1, t * 2 + static_cast<uint32_t>(i % 2)};
        // Generation i / 2 + 1 for this key: writes of one key publish in submission order.
        buffers.push_back(ExpertBytes(key.layer, key.expert, i / 2 + 1, kPayload));
        futures.push_back(store->Write(key, ExtentKind::kWeights, buffers.back()));
      }
      for (int i = 0; i < kWritesPerThread; ++i) {
        Result<uint64_t> r = futures[i].get();
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_EQ(*r, static_cast<uint64_t>(i / 2 + 1));
      }
    });
  }
  // Readers: layer 0 never changes after the first writes; layer 1 changes all the time, and
  // every read must verify (a reused extent would fail its checksum).
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      std::mt19937 rng(11);
      while (!stop.load()) {
        ExpertKey key{static_cast<uint32_t>(rng() % 2), static_cast<uint32_t>(rng() % 8)};
        std::vector<std::byte> out(kPayload);
        Status status = store->Read(key, ExtentKind::kWeights, out).get();
        if (status.code() == StatusCode::kNotFound) continue;
        if (!status.ok()) ++bad_reads;
      }
    });
  }
  for (int t = 0; t < 4; ++t) threads[t].join();
  stop = true;
  for (size_t t = 4; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(bad_reads.load(), 0);
  store->Flush();
  for (uint32_t e = 0; e < 8; ++e) {
    EXPECT_EQ(*store->Generation({1, e}, ExtentKind::kWeights),
              static_cast<uint64_t>(kWritesPerThread / 2));
    EXPECT_EQ(ReadExpert(*store, {1, e}), ExpertBytes(1, e, kWritesPerThread / 2, kPayload));
  }
  EXPECT_TRUE(store->corrupt_extents().empty());
}

// Fault injection: EIO / ENOSPC during a write-back gives a clear Status, and the store stays
// consistent and readable at the previous generation, in memory and after reopening.
class StoreFaultTest : public ::testing::TestWithParam<std::tuple<FaultOp, int, int64_t>> {};

TEST_P(StoreFaultTest, FailedPublishKeepsThePreviousGeneration) {
  auto [op, error, skip] = GetParam();
  MemFileSystem mem;
  FaultInjectionFileSystem fs(&mem);
  Result<std::unique_ptr<ExpertStore>> created = ExpertStore::Create(&fs, "/f/store", Layout(1, 2));
  ASSERT_TRUE(created.ok());
  std::unique_ptr<ExpertStore> store = std::move(*created);
  WriteExpert(*store, {0, 0}, 1);
  WriteExpert(*store, {0, 1}, 1);
  // Writes in a publish: data extent, index, superblock; then one sync.
  fs.AddRule(FaultRule{op, FaultKind::kError, error, "store", skip, 1, 0});
  std::vector<std::byte> next = ExpertBytes(0, 0, 2, kPayload);
  Result<uint64_t> failed = store->Write({0, 0}, ExtentKind::kWeights, next).get();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(),
            error == ENOSPC ? StatusCode::kResourceExhausted : StatusCode::kIOError);
  EXPECT_NE(failed.status().message().find("/f/store"), std::string::npos)
      << failed.status().message();
  std::printf("[ %s ]\n", failed.status().ToString().c_str());
  EXPECT_EQ(*store->Generation({0, 0}, ExtentKind::kWeights), 1u);
  EXPECT_EQ(ReadExpert(*store, {0, 0}), ExpertBytes(0, 0, 1, kPayload));
  EXPECT_EQ(ReadExpert(*store, {0, 1}), ExpertBytes(0, 1, 1, kPayload));
  // The failure is not sticky: the next write goes through.
  EXPECT_EQ(WriteExpert(*store, {0, 1}, 2), 2u);
  store.reset();
  Result<std::unique_ptr<ExpertStore>> reopened = ExpertStore::Open(&fs, "/f/store");
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_TRUE((*reopened)->corrupt_extents().empty());
  EXPECT_EQ(ReadExpert(**reopened, {0, 0}), ExpertBytes(0, 0, 1, kPayload));
  EXPECT_EQ(ReadExpert(**reopened, {0, 1}), ExpertBytes(0, 1, 2, kPayload));
}

INSTANTIATE_TEST_SUITE_P(
    EveryStep, StoreFaultTest,
    ::testing::Values(std::make_tuple(FaultOp::kWrite, EIO, 0),     // the data extent
                      std::make_tuple(FaultOp::kWrite, ENOSPC, 0),  // the data extent
                      std::make_tuple(FaultOp::kWrite, EIO, 1),     // the index
                      std::make_tuple(FaultOp::kWrite, ENOSPC, 2),  // the superblock
                      std::make_tuple(FaultOp::kSync, EIO, 0),      // the publish's sync
                      std::make_tuple(FaultOp::kSync, ENOSPC, 0)));

// Power loss at every write or sync of a publish, with unsynced data dropped (cleanly or torn):
// on reopen every expert is at an acknowledged generation, or at the one in flight, with valid
// contents; nothing acknowledged is lost.
TEST(StorePowerLossTest, EveryCrashPointRecoversToADurableGeneration) {
  for (bool tear : {false, true}) {
    for (FaultOp op : {FaultOp::kWrite, FaultOp::kSync}) {
      for (int64_t skip = 0; skip < 8; ++skip) {
        MemFileSystem mem;
        FaultInjectionFileSystem fs(&mem, static_cast<uint64_t>(skip) * 7 + tear);
        StoreLayout layout = Layout(1, 3);
        auto created = ExpertStore::Create(&fs, "/p/store", layout);
        ASSERT_TRUE(created.ok());
        std::unique_ptr<ExpertStore> store = std::move(*created);
        std::map<uint32_t, uint64_t> acked;
        for (uint32_t e = 0; e < 3; ++e) acked[e] = WriteExpert(*store, {0, e}, 1);
        fs.AddRule(
            FaultRule{op, tear && op == FaultOp::kWrite ? FaultKind::kTornWrite : FaultKind::kCrash,
                      EIO, "store", skip, 1, 0});
        std::map<uint32_t, uint64_t> in_flight;
        for (int i = 0; i < 6 && !fs.crashed(); ++i) {
          uint32_t e = static_cast<uint32_t>(i % 3);
          uint64_t generation = acked[e] + 1;
          in_flight[e] = generation;
          std::vector<std::byte> data = ExpertBytes(0, e, generation, kPayload);
          Result<uint64_t> r = store->Write({0, e}, ExtentKind::kWeights, data).get();
          if (r.ok()) acked[e] = *r;
        }
        store.reset();
        ASSERT_TRUE(fs.DropUnsyncedData(tear).ok());
        fs.ClearRules();
        Result<std::unique_ptr<ExpertStore>> reopened = ExpertStore::Open(&fs, "/p/store");
        ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
        EXPECT_TRUE((*reopened)->corrupt_extents().empty()) << "skip " << skip;
        for (uint32_t e = 0; e < 3; ++e) {
          uint64_t generation = *(*reopened)->Generation({0, e}, ExtentKind::kWeights);
          EXPECT_TRUE(generation == acked[e] ||
                      (in_flight.count(e) > 0 && generation == in_flight[e]))
              << "expert " << e << " at generation " << generation << ", acked " << acked[e]
              << " (op " << static_cast<int>(op) << " skip " << skip << " tear " << tear << ")";
          EXPECT_EQ(ReadExpert(**reopened, {0, e}), ExpertBytes(0, e, generation, kPayload));
        }
      }
    }
  }
}

// A WriteBatch is one publish (one fdatasync) once all of it is on the disk, on the asynchronous
// file systems too; with fewer spare extents than writes it publishes in rounds, never stalls.
TEST(ExpertStoreDiskTest, WriteBatchPublishesOnceAndNeverWaitsForMissingSpares) {
  testing::TempDir dir;
  for (std::string name : {"posix", "io_uring"}) {
    for (int64_t spare : {int64_t{-1}, int64_t{2}}) {
      Result<std::unique_ptr<FileSystem>> fs = MakeFileSystem(name);
      ASSERT_TRUE(fs.ok());
      std::string path = dir.File(name + std::to_string(spare) + ".store");
      Result<std::unique_ptr<ExpertStore>> store =
          ExpertStore::Create(fs->get(), path, Layout(1, 8, spare));
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      // Generation 1 of every expert, then generation 2 of four: with 2 spare extents only two
      // of those can be in flight before a publish frees the extents they replace.
      for (uint64_t generation : {1, 2}) {
        uint32_t count = generation == 1 ? 8 : 4;
        std::vector<std::vector<std::byte>> data;
        std::vector<ExpertStore::WriteRequest> requests;
        for (uint32_t e = 0; e < count; ++e)
          data.push_back(ExpertBytes(0, e, generation, kPayload));
        for (uint32_t e = 0; e < count; ++e) {
          requests.push_back({ExpertKey{0, e}, ExtentKind::kWeights, data[e]});
        }
        uint64_t publishes_before = (*store)->stats().publishes;
        std::atomic<int> acknowledged{0};
        (*store)->WriteBatch(requests, [&](size_t, Result<uint64_t> result) {
          EXPECT_TRUE(result.ok()) << result.status().ToString();
          acknowledged.fetch_add(1);
        });
        // Flush returns once the batch is published; its callbacks run just after.
        (*store)->Flush();
        for (int wait = 0; wait < 5000 && acknowledged.load() < static_cast<int>(count); ++wait) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        ASSERT_EQ(acknowledged.load(), static_cast<int>(count));
        uint64_t publishes = (*store)->stats().publishes - publishes_before;
        EXPECT_EQ(publishes, generation == 2 && spare == 2 ? 2u : 1u)
            << name << ", spare " << spare << ", generation " << generation;
        for (uint32_t e = 0; e < count; ++e) EXPECT_EQ(ReadExpert(**store, {0, e}), data[e]);
      }
    }
  }
}

TEST(ExpertStoreDiskTest, RoundTripsOnEveryRealFileSystem) {
  testing::TempDir dir;
  for (std::string name : {"posix", "io_uring", "pmem"}) {
    Result<std::unique_ptr<FileSystem>> fs = MakeFileSystem(name);
    ASSERT_TRUE(fs.ok());
    std::string path = dir.File(name + ".store");
    StoreLayout layout = Layout(2, 3);
    layout.kinds.push_back(KindSpec{ExtentKind::kTrainState, {3 * 8192, 3 * 8192, 3 * 8192}, 2});
    Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Create(fs->get(), path, layout);
    ASSERT_TRUE(store.ok()) << name << ": " << store.status().ToString();
    std::vector<std::byte> state = ExpertBytes(1, 2, 1, 9 * 8192);
    ASSERT_TRUE((*store)->Write({1, 2}, ExtentKind::kTrainState, state).get().ok());
    WriteExpert(**store, {1, 2}, 1);
    store->reset();
    Result<std::unique_ptr<ExpertStore>> reopened = ExpertStore::Open(fs->get(), path);
    ASSERT_TRUE(reopened.ok()) << name << ": " << reopened.status().ToString();
    std::vector<std::byte> back(9 * 8192);
    ASSERT_TRUE((*reopened)->Read({1, 2}, ExtentKind::kTrainState, back).get().ok());
    EXPECT_EQ(back, state) << name;
    EXPECT_EQ(ReadExpert(**reopened, {1, 2}), ExpertBytes(1, 2, 1, kPayload)) << name;
    std::printf("[ %s store ran on '%s' ]\n", name.c_str(), (*fs)->name().c_str());
  }
}

}  // namespace
}  // namespace sy::storage
