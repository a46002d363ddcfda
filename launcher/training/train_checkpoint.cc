#include "launcher/training/train_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/core/shape.h"
#include "storage/hdf5/checkpoint_layout.h"
#include "storage/hdf5/checkpoint_set.h"
#include "storage/hdf5/checkpoint_writer.h"
#include "storage/store/checksum.h"

namespace sy::launcher {
namespace {

constexpr std::string_view kStepsTensor = "optim/steps";
constexpr std::string_view kChecksumsKey = "tensor_crc32c";
constexpr std::string_view kLossScalerKey = "loss_scaler";

uint32_t TensorCrc(const std::vector<float>& data) {
  return storage::Crc32c(data.data(), data.size() * sizeof(float));
}

Status AddF32(CheckpointWriter& writer, const std::string& name, const CheckpointTensor& t,
              nlohmann::json* crcs) {
  const Shape shape{std::span<const int64_t>(t.shape)};
  if (shape.numel() != static_cast<int64_t>(t.data.size())) {
    return InternalError("checkpoint tensor '" + name + "': shape " + shape.ToString() +
                         " does not match its " + std::to_string(t.data.size()) + " values");
  }
  (*crcs)[name] = TensorCrc(t.data);
  return writer.AddTensor(name, DType::kF32, shape, t.data.data());
}

Status ReadF32(const CheckpointSet& reader, const std::string& name,
               const std::vector<int64_t>& shape, const nlohmann::json& crcs,
               CheckpointTensor* out) {
  const std::string where = "checkpoint " + reader.FileOf(name) + ": ";
  const CheckpointTensorInfo* info = reader.FindTensor(name);
  if (info == nullptr) {
    return FailedPreconditionError(where + "has no tensor '" + name +
                                   "'; it was written for another model");
  }
  const Shape want{std::span<const int64_t>(shape)};
  if (info->shape != want || info->dtype != DType::kF32) {
    return FailedPreconditionError(where + "tensor '" + name + "' is " +
                                   std::string(DTypeName(info->dtype)) + " " +
                                   info->shape.ToString() + ", the model expects f32 " +
                                   want.ToString() + "; it was written for another model");
  }
  out->name = name;
  out->shape = shape;
  out->data.resize(static_cast<size_t>(want.numel()));
  SY_RETURN_IF_ERROR(reader.ReadTensor(name, DType::kF32, want, out->data.data()));
  auto it = crcs.find(name);
  if (it == crcs.end() || !it->is_number_unsigned()) {
    return DataLossError(where + "no checksum recorded for tensor '" + name +
                         "'; the file is corrupt");
  }
  if (it->get<uint32_t>() != TensorCrc(out->data)) {
    return DataLossError(where + "tensor '" + name +
                         "' fails its checksum; the file is corrupt. Resume from an earlier "
                         "checkpoint");
  }
  return Status::Ok();
}

// Parameter `p` with its moments (those with data).
Status AddParam(CheckpointWriter& writer, const CheckpointTensor& p, const CheckpointTensor* m,
                const CheckpointTensor* v, nlohmann::json* crcs) {
  SY_RETURN_IF_ERROR(AddF32(writer, p.name, p, crcs));
  if (m != nullptr && !m->data.empty()) {
    SY_RETURN_IF_ERROR(AddF32(writer, OptimizerStateName("m", p.name), *m, crcs));
  }
  if (v != nullptr && !v->data.empty()) {
    SY_RETURN_IF_ERROR(AddF32(writer, OptimizerStateName("v", p.name), *v, crcs));
  }
  return Status::Ok();
}

// Everything after the parameters, then the commit.
Status FinishCheckpoint(CheckpointWriter& writer, const TrainCheckpoint& header,
                        const std::vector<int64_t>& optimizer_steps, const nlohmann::json& crcs) {
  SY_RETURN_IF_ERROR(writer.AddTensor(kStepsTensor, DType::kI64,
                                      Shape{static_cast<int64_t>(optimizer_steps.size())},
                                      optimizer_steps.data()));
  writer.SetStep(header.step);
  SY_RETURN_IF_ERROR(writer.SetText(kCheckpointConfigKey, header.config_json));
  uint8_t seed[8];
  for (int i = 0; i < 8; ++i) seed[i] = static_cast<uint8_t>(header.seed >> (8 * i));
  SY_RETURN_IF_ERROR(writer.SetBytes(kCheckpointRngStateKey, seed));
  SY_RETURN_IF_ERROR(writer.SetText(kCheckpointDataPositionKey, header.data_position));
  SY_RETURN_IF_ERROR(writer.SetText(kChecksumsKey, crcs.dump()));
  if (header.loss_scale > 0) {
    const nlohmann::json scaler = {{"scale", header.loss_scale},
                                   {"growth_tracker", header.loss_scale_growth_tracker}};
    SY_RETURN_IF_ERROR(writer.SetText(kLossScalerKey, scaler.dump()));
  }
  return writer.Commit();
}

}  // namespace

Status WriteTrainCheckpoint(const std::string& path, const TrainCheckpoint& ckpt) {
  SY_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointWriter> writer, CheckpointWriter::Create(path));
  nlohmann::json crcs = nlohmann::json::object();
  for (size_t i = 0; i < ckpt.params.size(); ++i) {
    SY_RETURN_IF_ERROR(AddParam(
        *writer, ckpt.params[i], i < ckpt.optimizer_m.size() ? &ckpt.optimizer_m[i] : nullptr,
        i < ckpt.optimizer_v.size() ? &ckpt.optimizer_v[i] : nullptr, &crcs));
  }
  return FinishCheckpoint(*writer, ckpt, ckpt.optimizer_steps, crcs);
}

Status WriteTrainCheckpointStreamed(const std::string& path, const TrainCheckpoint& header,
                                    size_t count,
                                    const std::function<Status(size_t, CheckpointParam*)>& next) {
  SY_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointWriter> writer, CheckpointWriter::Create(path));
  nlohmann::json crcs = nlohmann::json::object();
  std::vector<int64_t> steps(count);
  CheckpointParam param;
  for (size_t i = 0; i < count; ++i) {
    SY_RETURN_IF_ERROR(next(i, &param));
    SY_RETURN_IF_ERROR(AddParam(*writer, param.value, &param.m, &param.v, &crcs));
    steps[i] = param.opt_step;
  }
  return FinishCheckpoint(*writer, header, steps, crcs);
}

Result<TrainCheckpoint> ReadTrainCheckpoint(const std::string& path,
                                            const std::vector<std::string>& param_names,
                                            const std::vector<std::vector<int64_t>>& param_shapes,
                                            bool with_m, bool with_v,
                                            const std::function<void(int64_t, int64_t)>& progress,
                                            const std::function<bool(size_t)>& skip) {
  SY_CHECK_EQ(param_names.size(), param_shapes.size());
  SY_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointSet> reader, CheckpointSet::Open(path));
  const std::string where = "checkpoint " + path + ": ";
  TrainCheckpoint ckpt;
  ckpt.step = reader->step();
  if (ckpt.step < 0) return DataLossError(where + "negative step " + std::to_string(ckpt.step));
  SY_ASSIGN_OR_RETURN(ckpt.config_json, reader->ReadText(kCheckpointConfigKey));
  SY_ASSIGN_OR_RETURN(ckpt.data_position, reader->ReadText(kCheckpointDataPositionKey));
  SY_ASSIGN_OR_RETURN(std::vector<uint8_t> seed, reader->ReadBytes(kCheckpointRngStateKey));
  if (seed.size() != 8) {
    return DataLossError(where + "meta/rng_state holds " + std::to_string(seed.size()) +
                         " bytes, expected 8");
  }
  for (int i = 0; i < 8; ++i) ckpt.seed |= static_cast<uint64_t>(seed[i]) << (8 * i);
  SY_ASSIGN_OR_RETURN(std::string crc_text, reader->ReadText(kChecksumsKey));
  const nlohmann::json crcs = nlohmann::json::parse(crc_text, nullptr, false);
  if (!crcs.is_object()) return DataLossError(where + "meta/tensor_crc32c is not a JSON object");
  if (reader->HasMetadata(kLossScalerKey)) {
    SY_ASSIGN_OR_RETURN(std::string text, reader->ReadText(kLossScalerKey));
    const nlohmann::json scaler = nlohmann::json::parse(text, nullptr, false);
    if (!scaler.is_object() || !scaler.contains("scale") || !scaler["scale"].is_number() ||
        !scaler.contains("growth_tracker") || !scaler["growth_tracker"].is_number_integer()) {
      return DataLossError(where +
                           "meta/loss_scaler is not {\"scale\": number, \"growth_tracker\": "
                           "integer}; the file is corrupt");
    }
    ckpt.loss_scale = scaler["scale"].get<float>();
    ckpt.loss_scale_growth_tracker = scaler["growth_tracker"].get<int64_t>();
  }

  const int64_t n = static_cast<int64_t>(param_names.size());
  const CheckpointTensorInfo* steps = reader->FindTensor(kStepsTensor);
  if (steps == nullptr || steps->dtype != DType::kI64 || steps->shape != Shape{n}) {
    return FailedPreconditionError(where +
                                   "'optim/steps' is missing or does not hold one step "
                                   "count per parameter (" +
                                   std::to_string(n) + "); it was written for another model");
  }
  ckpt.optimizer_steps.resize(static_cast<size_t>(n));
  SY_RETURN_IF_ERROR(
      reader->ReadTensor(kStepsTensor, DType::kI64, Shape{n}, ckpt.optimizer_steps.data()));
  int64_t values_to_read = 0, values_read = 0;
  for (const auto& shape : param_shapes) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    values_to_read += numel;
  }
  for (size_t i = 0; i < param_names.size(); ++i) {
    const std::string& name = param_names[i];
    if (skip && skip(i)) {
      ckpt.params.push_back({name, param_shapes[i], {}});
      ckpt.optimizer_m.emplace_back();
      ckpt.optimizer_v.emplace_back();
      continue;
    }
    CheckpointTensor t;
    SY_RETURN_IF_ERROR(ReadF32(*reader, name, param_shapes[i], crcs, &t));
    values_read += static_cast<int64_t>(t.data.size());
    ckpt.params.push_back(std::move(t));
    CheckpointTensor m, v;
    if (with_m) {
      SY_RETURN_IF_ERROR(
          ReadF32(*reader, OptimizerStateName("m", name), param_shapes[i], crcs, &m));
    }
    if (with_v) {
      SY_RETURN_IF_ERROR(
          ReadF32(*reader, OptimizerStateName("v", name), param_shapes[i], crcs, &v));
    }
    ckpt.optimizer_m.push_back(std::move(m));
    ckpt.optimizer_v.push_back(std::move(v));
    if (progress) progress(values_read, values_to_read);
  }
  return ckpt;
}

struct TrainCheckpointReader::Impl {
  std::unique_ptr<CheckpointSet> reader;
  nlohmann::json crcs;
};

TrainCheckpointReader::TrainCheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TrainCheckpointReader::~TrainCheckpointReader() = default;

Result<std::unique_ptr<TrainCheckpointReader>> TrainCheckpointReader::Open(
    const std::string& path) {
  auto impl = std::make_unique<Impl>();
  SY_ASSIGN_OR_RETURN(impl->reader, CheckpointSet::Open(path));
  SY_ASSIGN_OR_RETURN(std::string crc_text, impl->reader->ReadText(kChecksumsKey));
  impl->crcs = nlohmann::json::parse(crc_text, nullptr, false);
  if (!impl->crcs.is_object()) {
    return DataLossError("checkpoint " + path + ": meta/tensor_crc32c is not a JSON object");
  }
  return std::unique_ptr<TrainCheckpointReader>(new TrainCheckpointReader(std::move(impl)));
}

Status TrainCheckpointReader::Read(const std::string& name, const std::vector<int64_t>& shape,
                                   bool with_m, bool with_v, CheckpointParam* out) const {
  SY_RETURN_IF_ERROR(ReadF32(*impl_->reader, name, shape, impl_->crcs, &out->value));
  out->m = {};
  out->v = {};
  if (with_m) {
    SY_RETURN_IF_ERROR(
        ReadF32(*impl_->reader, OptimizerStateName("m", name), shape, impl_->crcs, &out->m));
  }
  if (with_v) {
    SY_RETURN_IF_ERROR(
        ReadF32(*impl_->reader, OptimizerStateName("v", name), shape, impl_->crcs, &out->v));
  }
  return Status::Ok();
}

Result<std::string> ReadTrainCheckpointConfig(const std::string& path) {
  SY_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointSet> reader, CheckpointSet::Open(path));
  return reader->ReadText(kCheckpointConfigKey);
}

std::string CheckpointPath(const std::string& dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%08lld.h5", static_cast<long long>(step));
  return (std::filesystem::path(dir) / name).string();
}

bool IsCheckpointFileName(const std::string& filename) {
  // step-NNNNNNNN.h5 (more digits past step 99,999,999).
  if (filename.size() < 16 || filename.rfind("step-", 0) != 0) return false;
  if (filename.substr(filename.size() - 3) != ".h5") return false;
  for (size_t i = 5; i + 3 < filename.size(); ++i) {
    if (filename[i] < '0' || filename[i] > '9') return false;
  }
  return true;
}

Result<std::vector<std::string>> ListCheckpoints(const std::string& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    return NotFoundError("checkpoint.dir " + dir + ": cannot list (" + ec.message() +
                         "); check the path, or start without --resume");
  }
  std::vector<std::pair<long long, std::string>> found;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!IsCheckpointFileName(name)) continue;
    found.emplace_back(std::stoll(name.substr(5, name.size() - 8)), entry.path().string());
  }
  if (found.empty()) {
    return NotFoundError("checkpoint.dir " + dir +
                         ": no step-*.h5 checkpoint to resume from; start without --resume");
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

Result<std::string> LatestCheckpoint(const std::string& dir) {
  SY_ASSIGN_OR_RETURN(std::vector<std::string> all, ListCheckpoints(dir));
  return all.front();
}

}  // namespace sy::launcher
