// TrainCheckpoint: everything a training run needs to continue, stored as one HDF5 checkpoint
// (storage/hdf5, layout in storage/hdf5/checkpoint_layout.h).
//
// In the file:
//   <param name>                   every model parameter under the model's names, experts under
//                                  their global ids:
//                                  experts/layer{L}/expert{E}/{w_gate,w_up,w_down}
//   optim/m/<name>, optim/v/<name> the optimizer's moments (absent for SGD without momentum)
//   optim/steps                    i64 [params]: each parameter's optimizer step count
//   meta/config                    the effective config JSON of the run that wrote it
//   meta/rng_state                 the run's seed, 8 bytes little-endian (the loop draws no other
//                                  randomness: data order is a pure function of seed and position)
//   meta/data_position             Batcher::SavePosition of the train split
//   meta/tensor_crc32c             JSON {name: crc32c of the tensor's bytes}; HDF5 keeps no
//                                  checksum of raw data, so a flipped bit would otherwise load
//   meta/loss_scaler               JSON {"scale": s, "growth_tracker": n}: the dynamic loss
//                                  scale of train.precision f16 (absent in other precisions)
//   root attribute step            optimizer steps taken
// The parameters are fp32 and are the optimizer's masters in every train.precision (a bf16 or
// f16 run's compute copy is their rounding), so a checkpoint resumes in any precision.
//
// Writes are atomic (CheckpointWriter: temp file, fsync, rename, fsync dir): a crash during a save
// never destroys the previous checkpoint.
//
// Ownership: value types. Thread-safety: the functions are reentrant; no two calls may write the
// same path at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace sy::launcher {

struct CheckpointTensor {
  std::string name;  // "embed_tokens", "experts/layer0/expert3/w_up", ...
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct TrainCheckpoint {
  std::string config_json;    // the effective config of the run that wrote it
  int64_t step = 0;           // optimizer steps taken
  uint64_t seed = 0;          // the run's RNG seed
  std::string data_position;  // Batcher::SavePosition of the train split
  // train.precision f16: the loss scaler's state (DynamicLossScaler::State); scale 0 = none.
  float loss_scale = 0;
  int64_t loss_scale_growth_tracker = 0;
  std::vector<int64_t> optimizer_steps;  // per parameter, in `params` order
  std::vector<CheckpointTensor> params;  // model parameters, by the model's names
  // Same order and names as params; empty vectors when the optimizer keeps no such moment.
  std::vector<CheckpointTensor> optimizer_m, optimizer_v;
};

// One parameter with its optimizer state, for the streamed write and read.
struct CheckpointParam {
  CheckpointTensor value;
  CheckpointTensor m, v;  // empty data when the optimizer keeps no such moment
  int64_t opt_step = 0;
};

// Writes `ckpt` to `path` atomically. Errors name the path.
Status WriteTrainCheckpoint(const std::string& path, const TrainCheckpoint& ckpt);
// The same file, holding one parameter at a time: the header fields of `header` (config, step,
// seed, data position; its parameters, moments and step counts are ignored), and `count`
// parameters that `next(i, &param)` fills, i = 0 .. count - 1 in order. An error from `next`
// abandons the save (the previous file at `path` is untouched).
Status WriteTrainCheckpointStreamed(const std::string& path, const TrainCheckpoint& header,
                                    size_t count,
                                    const std::function<Status(size_t, CheckpointParam*)>& next);
// Reads the checkpoint at `path` (a file, or a sharded checkpoint's directory: CheckpointSet), with
// its parameters in the order of `param_names` (the model's).
// NotFound for a missing file; DataLoss naming the path for a truncated or corrupt one (including
// a tensor whose checksum fails, named); FailedPrecondition naming a parameter the file lacks or
// holds with another shape than `param_shapes` says. `progress(values read, values to read)`,
// when given, runs after each parameter (for a progress line, runtime/core/progress.h).
// Parameters for which `skip(i)` is true are left unread: name and shape set, no data (their
// step counts are read); for TrainCheckpointReader.
Result<TrainCheckpoint> ReadTrainCheckpoint(
    const std::string& path, const std::vector<std::string>& param_names,
    const std::vector<std::vector<int64_t>>& param_shapes, bool with_m, bool with_v,
    const std::function<void(int64_t, int64_t)>& progress = {},
    const std::function<bool(size_t)>& skip = {});

// Reads a checkpoint one parameter at a time (a restore that streams: the experts of training
// on the expert store), with ReadTrainCheckpoint's checks. Not thread-safe.
class TrainCheckpointReader {
 public:
  // Errors as ReadTrainCheckpoint's.
  static Result<std::unique_ptr<TrainCheckpointReader>> Open(const std::string& path);
  ~TrainCheckpointReader();
  // Parameter `name` of `shape` and, when with_m / with_v, its moments (the step count is not
  // read: it is in ReadTrainCheckpoint's optimizer_steps).
  Status Read(const std::string& name, const std::vector<int64_t>& shape, bool with_m, bool with_v,
              CheckpointParam* out) const;

 private:
  struct Impl;
  explicit TrainCheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};
// Reads only the effective config JSON stored in the checkpoint at `path`.
Result<std::string> ReadTrainCheckpointConfig(const std::string& path);

// "<dir>/step-00000120.h5".
std::string CheckpointPath(const std::string& dir, int64_t step);
// True when `filename` (no directory) is a name CheckpointPath makes.
bool IsCheckpointFileName(const std::string& filename);
// The checkpoint with the highest step in `dir`; NotFound when there is none.
Result<std::string> LatestCheckpoint(const std::string& dir);
// Every checkpoint in `dir`, the highest step first; NotFound when there is none.
Result<std::vector<std::string>> ListCheckpoints(const std::string& dir);

}  // namespace sy::launcher
