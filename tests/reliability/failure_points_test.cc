// Every failure point of the store's durable operations, each failed in turn with EIO, ENOSPC and
// a (torn) crash: tests/reliability/failure_points.h. The counts are printed for
// docs/reliability.md.
#include "tests/reliability/failure_points.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <vector>

#include "storage/cache/expert_cache.h"
#include "storage/store/expert_store.h"
#include "tests/storage/test_util.h"

namespace sy::reliability {
namespace {

using storage::ExpertCache;
using storage::ExpertKey;
using storage::ExpertStore;
using storage::ExtentKind;
using storage::FileSystem;
using storage::testing::ExpertBytes;

constexpr char kStorePath[] = "/run/experts.store";
constexpr uint32_t kLayers = 2;
constexpr uint32_t kExperts = 3;
constexpr ExtentKind kKind = ExtentKind::kTrainState;
// master | m | v of 250 parameters: 3000 bytes, deliberately not 4 KiB-aligned.
const std::vector<uint64_t> kParts = {1000, 1000, 1000};
constexpr uint64_t kPayload = 3000;
// The generation every expert holds after prepare.
constexpr uint64_t kPrepared = 1;

storage::StoreLayout Layout() {
  storage::StoreLayout layout;
  layout.num_layers = kLayers;
  layout.num_experts = kExperts;
  layout.checksum = storage::ChecksumKind::kCrc32c;
  layout.kinds.push_back(storage::KindSpec{kKind, kParts, -1});
  return layout;
}

storage::StoreOptions Options() {
  storage::StoreOptions options;
  options.lock_timeout_ms = 0;  // a store left locked is a bug here, not something to wait for
  return options;
}

std::vector<ExpertKey> AllExperts() {
  std::vector<ExpertKey> keys;
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (uint32_t e = 0; e < kExperts; ++e) keys.push_back(ExpertKey{l, e});
  }
  return keys;
}

// Writes every expert's next generation (its bytes are ExpertBytes of that generation) as one
// write-back batch, the way ExpertCache::Flush does.
Status WriteNextGeneration(ExpertStore& store) {
  std::vector<std::vector<std::byte>> data;
  std::vector<ExpertStore::WriteRequest> requests;
  for (ExpertKey key : AllExperts()) {
    SY_ASSIGN_OR_RETURN(uint64_t generation, store.Generation(key, kKind));
    data.push_back(ExpertBytes(key.layer, key.expert, generation + 1, kPayload));
  }
  std::vector<ExpertKey> keys = AllExperts();
  for (size_t i = 0; i < keys.size(); ++i) requests.push_back({keys[i], kKind, data[i]});
  std::vector<std::promise<Status>> done(requests.size());
  store.WriteBatch(requests, [&](size_t i, Result<uint64_t> generation) {
    done[i].set_value(generation.status());
  });
  Status first;
  for (auto& d : done) {
    Status status = d.get_future().get();
    if (first.ok()) first = status;
  }
  return first;
}

Status Prepare(FileSystem& fs) {
  SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store,
                      ExpertStore::Create(&fs, kStorePath, Layout(), Options()));
  return WriteNextGeneration(*store);
}

// Every expert at generation >= kPrepared holding exactly that generation's bytes: kNew when all
// moved past kPrepared. (The store's promise is per expert: a failed batch may publish some of
// its experts; none may be torn or at a generation it was never given.)
Result<DurableState> VerifyStore(FileSystem& fs) {
  SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store,
                      ExpertStore::Open(&fs, kStorePath, Options()));
  if (!store->corrupt_extents().empty()) {
    return DataLossError(std::to_string(store->corrupt_extents().size()) +
                         " corrupt extents, first " +
                         store->corrupt_extents().front().key.ToString() + ": " +
                         store->corrupt_extents().front().reason);
  }
  bool all_new = true;
  for (ExpertKey key : AllExperts()) {
    SY_ASSIGN_OR_RETURN(uint64_t generation, store->Generation(key, kKind));
    if (generation < kPrepared) {
      return DataLossError(key.ToString() + " went back to generation " +
                           std::to_string(generation));
    }
    all_new = all_new && generation > kPrepared;
    std::vector<std::byte> out(4096);
    SY_RETURN_IF_ERROR(store->Read(key, kKind, out).get());
    out.resize(kPayload);
    if (out != ExpertBytes(key.layer, key.expert, generation, kPayload)) {
      return DataLossError(key.ToString() + " does not hold the bytes of its generation " +
                           std::to_string(generation));
    }
  }
  return all_new ? DurableState::kNew : DurableState::kPrevious;
}

void ExpectEveryPointHolds(const DurableOperation& operation) {
  FailurePointReport report = RunEveryFailurePoint(operation);
  std::printf(
      "[ %s: %d failure points, %d trials, %d not reached, %d recovered as new, %d "
      "failed ]\n",
      operation.name.c_str(), report.points, report.trials, report.not_reached,
      report.recovered_new, report.failures);
  EXPECT_GT(report.points, 0);
  EXPECT_EQ(report.failures, 0);
  for (const std::string& message : report.messages) ADD_FAILURE() << message;
  // A point the faulty run never reached means the runs diverged; a few may (threads order the
  // journal), most must not.
  EXPECT_LE(report.not_reached * 10, report.trials);
}

TEST(FailurePointsTest, StoreCreation) {
  DurableOperation operation;
  operation.name = "store creation";
  operation.file = kStorePath;
  operation.prepare = [](FileSystem&) { return Status::Ok(); };
  operation.run = [](FileSystem& fs) -> Status {
    // The operation is "make sure the store exists": a restart after a failed Create retries it.
    SY_ASSIGN_OR_RETURN(bool exists, fs.Exists(kStorePath));
    if (exists) return Status::Ok();
    return ExpertStore::Create(&fs, kStorePath, Layout(), Options()).status();
  };
  operation.verify = [](FileSystem& fs) -> Result<DurableState> {
    SY_ASSIGN_OR_RETURN(bool exists, fs.Exists(kStorePath));
    if (!exists) return DurableState::kPrevious;
    SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store,
                        ExpertStore::Open(&fs, kStorePath, Options()));
    for (ExpertKey key : AllExperts()) {
      SY_ASSIGN_OR_RETURN(uint64_t generation, store->Generation(key, kKind));
      if (generation != 0) return DataLossError("a new store holds " + key.ToString());
    }
    return DurableState::kNew;
  };
  ExpectEveryPointHolds(operation);
}

TEST(FailurePointsTest, StoreWriteBackAndGenerationCommit) {
  DurableOperation operation;
  operation.name = "store write-back and generation commit";
  operation.file = kStorePath;
  operation.prepare = Prepare;
  operation.run = [](FileSystem& fs) -> Status {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store,
                        ExpertStore::Open(&fs, kStorePath, Options()));
    return WriteNextGeneration(*store);
  };
  operation.verify = VerifyStore;
  ExpectEveryPointHolds(operation);
}

// The store-fed training path: states acquired for writing through the LFU cache, updated in
// their slots, written back by Flush (one batch, one publish).
TEST(FailurePointsTest, ExpertCacheWriteBack) {
  DurableOperation operation;
  operation.name = "expert cache write-back";
  operation.file = kStorePath;
  operation.prepare = Prepare;
  operation.run = [](FileSystem& fs) -> Status {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store,
                        ExpertStore::Open(&fs, kStorePath, Options()));
    storage::CacheOptions options;
    options.num_slots = kLayers * kExperts;
    options.kind = kKind;
    options.register_buffers = false;
    SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertCache> cache,
                        ExpertCache::Create(store.get(), options));
    for (ExpertKey key : AllExperts()) {
      SY_ASSIGN_OR_RETURN(uint64_t generation, store->Generation(key, kKind));
      SY_ASSIGN_OR_RETURN(storage::CacheHandle handle,
                          cache->Acquire(key, storage::AccessMode::kWrite));
      std::vector<std::byte> next = ExpertBytes(key.layer, key.expert, generation + 1, kPayload);
      std::memcpy(handle.data().data(), next.data(), kPayload);
    }
    return cache->Flush();
  };
  operation.verify = VerifyStore;
  ExpectEveryPointHolds(operation);
}

}  // namespace
}  // namespace sy::reliability
