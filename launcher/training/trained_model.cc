#include "launcher/training/trained_model.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "inference/model_loader.h"
#include "launcher/training/train_checkpoint.h"
#include "runtime/config/config.h"
#include "storage/hdf5/checkpoint_layout.h"
#include "storage/hdf5/checkpoint_set.h"

namespace sy::launcher {

bool IsTrainCheckpointPath(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return fs::path(path).extension() == ".h5";
  if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / "config.json", ec)) return false;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (IsCheckpointFileName(entry.path().filename().string())) return true;
  }
  return CheckpointSet::IsShardedCheckpointDir(path);
}

Result<std::string> ResolveTrainCheckpoint(const std::string& path) {
  std::error_code ec;
  if (CheckpointSet::IsShardedCheckpointDir(path)) return path;
  if (std::filesystem::is_directory(path, ec)) return LatestCheckpoint(path);
  if (!std::filesystem::exists(path, ec)) {
    return NotFoundError("checkpoint " + path +
                         " does not exist; pass a step-*.h5 file or the run's checkpoint.dir");
  }
  return path;
}

Result<TrainedModel> LoadTrainedModel(Backend& backend, const std::string& path, DType weight_dtype,
                                      const std::function<void(int64_t, int64_t)>& progress) {
  TrainedModel out;
  SY_ASSIGN_OR_RETURN(out.path, ResolveTrainCheckpoint(path));
  const std::string where = "checkpoint " + out.path;
  int64_t stored_vocab = 0;
  std::string config_json;
  {
    SY_ASSIGN_OR_RETURN(auto reader, CheckpointSet::Open(out.path));
    SY_ASSIGN_OR_RETURN(config_json, reader->ReadText(kCheckpointConfigKey));
    if (const CheckpointTensorInfo* embed = reader->FindTensor("embed_tokens");
        embed != nullptr && embed->shape.rank() == 2) {
      stored_vocab = embed->shape[0];
    }
  }
  SY_ASSIGN_OR_RETURN(Config config, Config::Parse(config_json, where + " meta/config"));
  SY_ASSIGN_OR_RETURN(out.config, LoadTrainConfig(config));
  ModelConfig& model_config = out.config.model;
  if (model_config.vocab_size == 0) {
    if (stored_vocab <= 0) {
      return DataLossError(where +
                           ": model.vocab_size is 0 (the data's) and 'embed_tokens' is "
                           "missing or not 2-D, so the vocabulary is unknown");
    }
    model_config.vocab_size = stored_vocab;
  }
  ModelOptions model_options;
  model_options.with_grad = false;
  model_options.weight_dtype = weight_dtype;
  SY_ASSIGN_OR_RETURN(out.model, MoeModel::Create(backend, model_config, model_options));

  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const Parameter& p : out.model->parameters()) {
    names.push_back(p.name);
    const auto dims = p.value.shape().dims();
    shapes.emplace_back(dims.begin(), dims.end());
  }
  SY_ASSIGN_OR_RETURN(TrainCheckpoint ckpt, ReadTrainCheckpoint(out.path, names, shapes,
                                                                /*with_m=*/false,
                                                                /*with_v=*/false, progress));
  out.step = ckpt.step;
  std::vector<uint16_t> scratch;
  size_t i = 0;
  for (Parameter& p : out.model->parameters()) {
    SY_RETURN_IF_ERROR(UploadParameter(backend, p, ckpt.params[i].data, scratch));
    ckpt.params[i].data = {};  // free as we go
    ++i;
  }
  return out;
}

}  // namespace sy::launcher
