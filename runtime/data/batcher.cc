#include "runtime/data/batcher.h"

#include <span>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/data/sample_rng.h"

namespace sy {
namespace {

using nlohmann::json;

constexpr std::string_view kPositionFormat = "switchyard-data-position";
constexpr int kPositionVersion = 1;
constexpr uint64_t kPermutationSalt = 0x7065726dull;  // "perm"

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

Result<Batcher> Batcher::Create(Dataset* dataset, const BatcherOptions& options) {
  SY_CHECK(dataset != nullptr);
  if (options.batch_size < 1) {
    return InvalidArgumentError("batcher: batch size must be at least 1, got " +
                                std::to_string(options.batch_size));
  }
  if (options.num_shards < 1 || options.shard < 0 || options.shard >= options.num_shards) {
    return InvalidArgumentError("batcher: shard " + std::to_string(options.shard) + " of " +
                                std::to_string(options.num_shards) +
                                " is out of range; need 0 <= shard < num_shards");
  }
  const int64_t size = dataset->size(options.split);
  if (size == 0) {
    return InvalidArgumentError("batcher: the " + std::string(SplitName(options.split)) +
                                " split of " + dataset->name() +
                                " is empty; raise data.eval_fraction (eval) or use more data");
  }
  Batcher batcher(dataset, options);
  batcher.size_ = size;
  return batcher;
}

void Batcher::Rewind() {
  epoch_ = 0;
  cursor_ = 0;
}

void Batcher::BuildPermutation() {
  permutation_.resize(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) permutation_[i] = i;
  SampleRng rng(MixSeed(MixSeed(options_.seed, kPermutationSalt), static_cast<uint64_t>(epoch_)));
  for (int64_t i = size_ - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(i + 1)));
    std::swap(permutation_[i], permutation_[j]);
  }
  permutation_epoch_ = epoch_;
}

int64_t Batcher::NextIndex() {
  if (size_ == Dataset::kUnbounded) return cursor_++;
  if (cursor_ >= size_) {
    ++epoch_;
    cursor_ = 0;
  }
  int64_t index = cursor_;
  if (options_.shuffle) {
    if (permutation_epoch_ != epoch_) BuildPermutation();
    index = permutation_[cursor_];
  }
  ++cursor_;
  return index;
}

Status Batch::Reshape(int64_t rows, int64_t seq_len) {
  if (batch_size() == rows && this->seq_len() == seq_len && targets.defined() &&
      task_ids.defined() && targets.shape() == Shape{rows, seq_len} &&
      task_ids.shape() == Shape{rows}) {
    return Status::Ok();
  }
  SY_ASSIGN_OR_RETURN(tokens, Tensor::TryHost(DType::kI32, Shape{rows, seq_len}));
  SY_ASSIGN_OR_RETURN(targets, Tensor::TryHost(DType::kI32, Shape{rows, seq_len}));
  SY_ASSIGN_OR_RETURN(task_ids, Tensor::TryHost(DType::kI32, Shape{rows}));
  return Status::Ok();
}

Status Batcher::Next(Batch* batch) {
  const int64_t rows = options_.batch_size;
  const int64_t seq_len = dataset_->seq_len();
  SY_RETURN_IF_ERROR(batch->Reshape(rows, seq_len));
  int32_t* tokens = batch->tokens.data<int32_t>();
  int32_t* targets = batch->targets.data<int32_t>();
  int32_t* task_ids = batch->task_ids.data<int32_t>();

  // Every shard walks the whole global batch so that all shards keep the same position.
  const int64_t first = options_.shard * rows;
  const int64_t global_rows = rows * options_.num_shards;
  for (int64_t g = 0; g < global_rows; ++g) {
    const int64_t index = NextIndex();
    if (g < first || g >= first + rows) continue;
    const int64_t r = g - first;
    std::span<int32_t> row_tokens(tokens + r * seq_len, static_cast<size_t>(seq_len));
    std::span<int32_t> row_targets(targets + r * seq_len, static_cast<size_t>(seq_len));
    SY_ASSIGN_OR_RETURN(task_ids[r], dataset_->Get(options_.split, index, row_tokens, row_targets));
  }
  return Status::Ok();
}

std::string Batcher::SavePosition() const {
  const json position = {{"format", kPositionFormat},
                         {"version", kPositionVersion},
                         {"split", SplitName(options_.split)},
                         {"seed", options_.seed},
                         {"shuffle", options_.shuffle},
                         {"epoch", epoch_},
                         {"cursor", cursor_},
                         {"dataset", dataset_->Fingerprint()},
                         {"dataset_state", dataset_->State()}};
  return Dump(position);
}

Status Batcher::RestorePosition(std::string_view saved) {
  json position;
  try {
    position = json::parse(saved.begin(), saved.end());
  } catch (const json::exception& e) {
    return InvalidArgumentError(std::string("data position: not valid JSON (") + e.what() +
                                "); the checkpoint's data position is corrupt");
  }
  const auto bad = [](const std::string& why) {
    return InvalidArgumentError("data position: " + why);
  };
  if (!position.is_object() || position.value("format", json()) != kPositionFormat) {
    return bad("not a Switchyard data position (no \"format\": \"" + std::string(kPositionFormat) +
               "\")");
  }
  if (position.value("version", json()) != kPositionVersion) {
    return bad("version " + Dump(position.value("version", json())) + " is not supported (this " +
               "build reads version " + std::to_string(kPositionVersion) + ")");
  }
  for (const char* key : {"epoch", "cursor", "seed"}) {
    if (!position.contains(key) || !position[key].is_number_integer() ||
        (position[key].is_number_integer() && !position[key].is_number_unsigned() &&
         position[key].get<int64_t>() < 0)) {
      return bad(std::string("\"") + key + "\" must be a non-negative integer, got " +
                 Dump(position.value(key, json())));
    }
  }
  if (position.value("split", json()) != SplitName(options_.split)) {
    return bad("saved for the " + Dump(position.value("split", json())) +
               " split, but this batcher reads the " + std::string(SplitName(options_.split)) +
               " split");
  }
  if (position["seed"].get<uint64_t>() != options_.seed) {
    return bad("saved with data seed " + Dump(position["seed"]) + ", but this run has seed " +
               std::to_string(options_.seed) + "; resume with the same data.seed");
  }
  if (position.value("shuffle", json()) != options_.shuffle) {
    return bad("saved with shuffle " + Dump(position.value("shuffle", json())) +
               ", but this run has shuffle " + (options_.shuffle ? "true" : "false"));
  }
  const json fingerprint = dataset_->Fingerprint();
  const json saved_fingerprint = position.value("dataset", json());
  if (saved_fingerprint != fingerprint) {
    std::string differences;
    if (saved_fingerprint.is_object()) {
      for (const auto& [key, value] : fingerprint.items()) {
        const json old_value = saved_fingerprint.value(key, json());
        if (old_value != value) {
          differences += (differences.empty() ? "" : ", ") + key + " " + Dump(old_value) + " -> " +
                         Dump(value);
        }
      }
      for (const auto& [key, value] : saved_fingerprint.items()) {
        if (!fingerprint.contains(key)) {
          differences += (differences.empty() ? "" : ", ") + key + " " + Dump(value) + " -> none";
        }
      }
    } else {
      differences = "saved " + Dump(saved_fingerprint);
    }
    return bad("saved for a different dataset than " + dataset_->name() + " (" + differences +
               "); resume with the data settings and files of the saved run");
  }
  const int64_t epoch = position["epoch"].get<int64_t>();
  const int64_t cursor = position["cursor"].get<int64_t>();
  if (size_ != Dataset::kUnbounded && cursor > size_) {
    return bad("cursor " + std::to_string(cursor) + " is past the " + std::to_string(size_) +
               " examples of the split");
  }
  SY_RETURN_IF_ERROR(dataset_->RestoreState(position.value("dataset_state", json())));
  epoch_ = epoch;
  cursor_ = cursor;
  return Status::Ok();
}

}  // namespace sy
