#include "launcher/convert/native_format.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "launcher/training/train_checkpoint.h"
#include "launcher/training/train_options.h"
#include "launcher/training/trained_model.h"
#include "parallel/expert_parallel_compute.h"
#include "runtime/config/config.h"
#include "runtime/core/file_creation.h"
#include "runtime/core/temporary_cleanup.h"
#include "storage/hdf5/checkpoint_layout.h"
#include "storage/hdf5/checkpoint_set.h"
#include "storage/hdf5/checkpoint_writer.h"
#include "storage/hdf5/durable_replace.h"
#include "storage/store/checksum.h"

namespace sy::convert {
namespace {

constexpr std::string_view kStepsTensor = "optim/steps";
constexpr std::string_view kChecksumsKey = "tensor_crc32c";  // train_checkpoint.h

std::vector<int64_t> Dims(const Shape& shape) {
  const auto d = shape.dims();
  return {d.begin(), d.end()};
}

// A run config whose model block is `model` and every other block its default.
Result<std::string> DefaultRunConfig(const ModelConfig& model) {
  nlohmann::json root = {{"model", launcher::ModelConfigSchema().ToJson(model)}};
  SY_ASSIGN_OR_RETURN(Config config, Config::Parse(root.dump(), "the converted model's config"));
  SY_ASSIGN_OR_RETURN(launcher::TrainConfig train, launcher::LoadTrainConfig(config));
  return train.effective_json;
}

class Native final : public ModelFormat {
 public:
  std::string_view name() const override { return "native"; }

  bool Detect(const std::string& path) const override {
    return launcher::IsTrainCheckpointPath(path);
  }

  Result<ModelImage> Read(const std::string& path) const override {
    ModelImage image;
    image.format = "native";
    SY_ASSIGN_OR_RETURN(image.path, launcher::ResolveTrainCheckpoint(path));
    SY_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointSet> owned, CheckpointSet::Open(image.path));
    std::shared_ptr<CheckpointSet> reader(std::move(owned));
    if (reader->num_shards() > 1) {
      image.notes.push_back("a sharded checkpoint of " + std::to_string(reader->num_shards()) +
                            " expert-parallel shards");
    }
    image.source = reader;
    const std::string where = "checkpoint " + image.path;
    image.step = reader->step();
    SY_ASSIGN_OR_RETURN(image.train_config_json, reader->ReadText(kCheckpointConfigKey));
    if (reader->HasMetadata(kCheckpointDataPositionKey)) {
      SY_ASSIGN_OR_RETURN(image.data_position, reader->ReadText(kCheckpointDataPositionKey));
    }
    if (reader->HasMetadata(kCheckpointRngStateKey)) {
      SY_ASSIGN_OR_RETURN(std::vector<uint8_t> seed, reader->ReadBytes(kCheckpointRngStateKey));
      if (seed.size() == 8) {
        uint64_t s = 0;
        for (int i = 0; i < 8; ++i) s |= static_cast<uint64_t>(seed[i]) << (8 * i);
        image.seed = s;
      }
    }
    for (const std::string& key : reader->MetadataKeys()) {
      if (key.rfind(kHfFileMetaPrefix, 0) != 0) continue;
      SY_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, reader->ReadBytes(key));
      image.hf_files[key.substr(kHfFileMetaPrefix.size())] =
          std::string(bytes.begin(), bytes.end());
    }
    if (reader->HasMetadata(kHfDTypeMetaKey)) {
      SY_ASSIGN_OR_RETURN(std::string name, reader->ReadText(kHfDTypeMetaKey));
      SY_ASSIGN_OR_RETURN(image.hf_dtype, ParseDType(name));
    }
    auto crcs = std::make_shared<nlohmann::json>(nlohmann::json::object());
    if (reader->HasMetadata(kChecksumsKey)) {
      SY_ASSIGN_OR_RETURN(std::string text, reader->ReadText(kChecksumsKey));
      *crcs = nlohmann::json::parse(text, nullptr, false);
      if (!crcs->is_object()) return DataLossError(where + ": meta/tensor_crc32c is corrupt");
    }

    SY_ASSIGN_OR_RETURN(Config config, Config::Parse(image.train_config_json, where));
    SY_ASSIGN_OR_RETURN(launcher::TrainConfig train, launcher::LoadTrainConfig(config));
    image.config = train.model;
    if (image.config.vocab_size == 0) {
      const CheckpointTensorInfo* embed = reader->FindTensor("embed_tokens");
      if (embed == nullptr || embed->shape.rank() != 2) {
        return DataLossError(where +
                             ": model.vocab_size is 0 and tensor 'embed_tokens' is "
                             "missing or not 2-D, so the vocabulary is unknown");
      }
      image.config.vocab_size = embed->shape[0];
    }

    std::set<std::string> used;
    auto add = [&](const std::string& name) {
      const CheckpointTensorInfo* info = reader->FindTensor(name);
      ImageTensor t;
      t.name = t.stored_name = name;
      t.dtype = info->dtype;
      t.shape = Dims(info->shape);
      const DType dtype = info->dtype;
      const Shape shape = info->shape;
      t.read = [reader, crcs, name, dtype, shape](std::span<uint8_t> out) -> Status {
        SY_RETURN_IF_ERROR(reader->ReadTensor(name, dtype, shape, out.data()));
        auto it = crcs->find(name);
        if (it != crcs->end() && it->get<uint32_t>() != storage::Crc32c(out.data(), out.size())) {
          return DataLossError("checkpoint " + reader->FileOf(name) + ": tensor '" + name +
                               "' fails its checksum; the file is corrupt");
        }
        return Status::Ok();
      };
      image.tensors.push_back(std::move(t));
      used.insert(name);
    };
    const std::vector<ParameterSpec> specs = ModelParameterSpecs(image.config);
    for (const ParameterSpec& p : specs) {
      const CheckpointTensorInfo* info = reader->FindTensor(p.name);
      if (info == nullptr) {
        return FailedPreconditionError(where + ": tensor '" + p.name +
                                       "' is missing; the checkpoint does not match its config");
      }
      if (Dims(info->shape) != p.shape || info->dtype != DType::kF32) {
        return FailedPreconditionError(where + ": tensor '" + p.name + "' is " +
                                       std::string(DTypeName(info->dtype)) + " " +
                                       info->shape.ToString() + ", the config implies f32 " +
                                       Shape{std::span<const int64_t>(p.shape)}.ToString());
      }
      add(p.name);
    }
    for (const char* state : {"m", "v"}) {
      for (const ParameterSpec& p : specs) {
        const std::string name = OptimizerStateName(state, p.name);
        const CheckpointTensorInfo* info = reader->FindTensor(name);
        if (info == nullptr) continue;
        if (Dims(info->shape) != p.shape || info->dtype != DType::kF32) {
          return FailedPreconditionError(where + ": tensor '" + name + "' is " +
                                         std::string(DTypeName(info->dtype)) + " " +
                                         info->shape.ToString() + ", its parameter's shape is " +
                                         Shape{std::span<const int64_t>(p.shape)}.ToString());
        }
        add(name);
      }
    }
    if (reader->FindTensor(kStepsTensor) != nullptr) add(std::string(kStepsTensor));
    for (const CheckpointTensorInfo& info : reader->tensors()) {
      if (!used.count(info.name)) {
        return FailedPreconditionError(where + ": unexpected tensor '" + info.name +
                                       "' for this config; the checkpoint does not match it");
      }
    }
    return image;
  }

  Status Write(const ModelImage& image, const std::string& out,
               const WriteOptions& options) const override {
    if (options.dtype && *options.dtype != DType::kF32) {
      return InvalidArgumentError(
          "--dtype " + std::string(DTypeName(*options.dtype)) +
          ": a native checkpoint holds the trainer's f32 master weights; convert to f32, or "
          "write hf for a narrower dtype");
    }
    if (options.shard_bytes > 0) {
      return InvalidArgumentError(
          "--shard-mib: a native checkpoint is one file, or one file per expert-parallel rank "
          "with --ep-size");
    }
    const int ep = std::max(options.ep_size, 1);
    const int experts = image.config.num_experts;
    if (ep > 1 && experts == 0) {
      return InvalidArgumentError("--ep-size " + std::to_string(ep) +
                                  ": the model has no experts to shard; leave --ep-size out");
    }
    if (ep > 1 && experts % ep != 0) {
      std::string divisors;
      for (int d = 1; d <= experts; ++d) {
        if (experts % d == 0) divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
      }
      return InvalidArgumentError("--ep-size " + std::to_string(ep) + " does not divide the " +
                                  std::to_string(experts) +
                                  " experts of each MoE layer (model.num_experts); choose one "
                                  "of " +
                                  divisors);
    }
    SY_RETURN_IF_ERROR(RefuseExistingOutput(out));
    if (ep == 1) {
      SY_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointWriter> writer,
                          CheckpointWriter::Create(out, {.replace_existing = false}));
      std::vector<CheckpointWriter*> writers = {writer.get()};
      return WriteShards(image, out, options, writers);
    }
    // One file per expert-parallel rank in a staging directory renamed to `out` at the end
    // (storage/hdf5/checkpoint_layout.h).
    ScopedTemporary guard(TemporaryPathFor(out));
    const std::string staging = guard.path();
    SY_RETURN_IF_ERROR(CreateNewDirectory(staging).WithContext("the staging directory of " + out));
    std::vector<std::unique_ptr<CheckpointWriter>> owned;
    std::vector<CheckpointWriter*> writers;
    for (int i = 0; i < ep; ++i) {
      SY_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointWriter> w,
                          CheckpointWriter::Create(staging + "/" + CheckpointShardFileName(i, ep),
                                                   {.shard_index = i, .num_shards = ep}));
      writers.push_back(w.get());
      owned.push_back(std::move(w));
    }
    SY_RETURN_IF_ERROR(WriteShards(image, out, options, writers));
    SY_RETURN_IF_ERROR(FsyncParentDirectory(staging + "/" + CheckpointShardFileName(0, ep)));
    if (Status placed = RenameNoReplace(staging, out); !placed.ok()) {
      if (placed.code() == StatusCode::kAlreadyExists) {
        return AlreadyExistsError(out + " appeared while converting; nothing was written there");
      }
      return placed;
    }
    guard.Release();
    return FsyncParentDirectoryAfterRename(out);
  }

 private:
  // The image into `writers`, one per expert-parallel rank (one: a consolidated file): an expert
  // tensor and its moments into its owner's (ExpertOwner, as the trainer places it), everything
  // else into the first; the metadata, with every tensor's checksum, into each; then commits.
  static Status WriteShards(const ModelImage& image, const std::string& out,
                            const WriteOptions& options,
                            const std::vector<CheckpointWriter*>& writers) {
    const int ep = static_cast<int>(writers.size());
    nlohmann::json crcs = nlohmann::json::object();
    size_t params = 0;
    bool has_steps = false;
    std::vector<uint8_t> buffer;
    for (const ImageTensor& t : image.tensors) {
      const bool steps = t.name == kStepsTensor;
      has_steps = has_steps || steps;
      if (t.name.rfind("optim/", 0) != 0) ++params;
      const DType dtype = steps ? t.dtype : DType::kF32;
      buffer.assign(static_cast<size_t>(t.numel()) * DTypeSize(dtype), 0);
      if (Status s = ReadTensorAs(t, dtype, buffer); !s.ok()) {
        return s.WithContext("writing " + out);
      }
      if (dtype == DType::kF32) crcs[t.name] = storage::Crc32c(buffer.data(), buffer.size());
      const int expert = ExpertOfTensorName(t.name);
      if (expert >= image.config.num_experts) {
        return FailedPreconditionError("tensor '" + t.name + "' names expert " +
                                       std::to_string(expert) + " of a model with " +
                                       std::to_string(image.config.num_experts) +
                                       " experts per layer; the source does not match its config");
      }
      const int shard =
          expert < 0 || ep == 1 ? 0 : ExpertOwner(expert, image.config.num_experts, ep);
      SY_RETURN_IF_ERROR(writers[static_cast<size_t>(shard)]->AddTensor(
          t.name, dtype, Shape{std::span<const int64_t>(t.shape)}, buffer.data()));
      if (options.progress && t.bytes() >= (64u << 20)) {
        options.progress("wrote " + t.name + " (" + std::to_string(t.bytes() >> 20) + " MiB)");
      }
    }
    if (!has_steps) {
      const std::vector<int64_t> zeros(params, 0);
      SY_RETURN_IF_ERROR(writers[0]->AddTensor(kStepsTensor, DType::kI64,
                                               Shape{static_cast<int64_t>(params)}, zeros.data()));
    }
    std::string config = image.train_config_json;
    if (config.empty()) {
      SY_ASSIGN_OR_RETURN(config, DefaultRunConfig(image.config));
    }
    const uint64_t seed = image.seed.value_or(1);
    uint8_t seed_bytes[8];
    for (int i = 0; i < 8; ++i) seed_bytes[i] = static_cast<uint8_t>(seed >> (8 * i));
    for (CheckpointWriter* writer : writers) {
      writer->SetStep(image.step);
      SY_RETURN_IF_ERROR(writer->SetText(kCheckpointConfigKey, config));
      SY_RETURN_IF_ERROR(writer->SetBytes(kCheckpointRngStateKey, seed_bytes));
      if (image.data_position.empty()) {
        // No position (a model from another format): an empty bytes value, which readers see
        // as "".
        SY_RETURN_IF_ERROR(writer->SetBytes(kCheckpointDataPositionKey, {}));
      } else {
        SY_RETURN_IF_ERROR(writer->SetText(kCheckpointDataPositionKey, image.data_position));
      }
      SY_RETURN_IF_ERROR(writer->SetText(kChecksumsKey, crcs.dump()));
      if (image.hf_dtype) {
        SY_RETURN_IF_ERROR(writer->SetText(kHfDTypeMetaKey, DTypeName(*image.hf_dtype)));
      }
      for (const auto& [file, text] : image.hf_files) {
        SY_RETURN_IF_ERROR(writer->SetBytes(
            std::string(kHfFileMetaPrefix) + file,
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
      }
    }
    for (CheckpointWriter* writer : writers) SY_RETURN_IF_ERROR(writer->Commit());
    return Status::Ok();
  }
};

}  // namespace

const ModelFormat& NativeFormat() {
  static const Native format;
  return format;
}

}  // namespace sy::convert
