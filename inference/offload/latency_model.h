// ExpertLatencyModel: what one routed expert costs on this machine, measured at start-up, and the
// placement rules built on it (docs/offload.md, "cpu-compute", "hot-cold"; papers/DIGEST.md).
//
// Three costs, each a function of s, the rows (tokens) routed to the expert:
//   cpu(s)     the CPU path: copy the s rows device -> host, run the expert on the
//              CpuExpertExecutor, copy the s results back (Fiddler's "move activations")
//   device(s)  the expert on the device from a device slot (RunSwigluExpert), weights resident
//   transfer   one expert's weights host -> a device slot through the TransferEngine
// cpu and device are piecewise linear through measured points (sorted by rows; linear
// extrapolation past the last two points, the first point's value below the first).
//
// Rules:
//   FiddlerPlacement   resident -> device; else cpu(s) > device(s) + transfer -> fetch, run on
//                      the device; else -> CPU.
//   HotColdCount       MoNDE: H = alpha * BW_link / (BW_cpu + BW_link) * active, rounded, in
//                      [0, active]; BW_link = expert bytes / transfer, BW_cpu = expert bytes /
//                      cpu(1) (the rate the CPU streams an expert's weights through its kernels).
//   ReplayHotCold      the modelled time of recorded batches under a given alpha: per batch,
//                      max(sum over the top H of (transfer + device(s)), sum over the rest of
//                      cpu(s)) (both sides run concurrently; copies and device compute of one
//                      side are counted serially, an upper bound).
//   TuneHotColdAlpha   the alpha of a grid that minimises ReplayHotCold (ties: the one nearest 1).
//
// CalibrateLatencyModel measures the three costs on a real expert of the host tier with a
// one-slot device cache of its own, so it runs before the policy's own cache exists.
//
// Ownership: ExpertLatencyModel is a value type; CalibrateLatencyModel borrows what it is given.
// Thread-safety: the model is a value type; CalibrateLatencyModel drives the backend's compute
// stream (one thread, the provider's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "inference/offload/cpu_expert_executor.h"
#include "inference/offload/expert_layout.h"
#include "inference/offload/host_experts.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"

namespace sy::offload {

// Where one activated expert of a layer runs.
enum class ExpertPlacement : uint8_t {
  kResident,  // already in a device slot: run there
  kFetch,     // copy its weights to a device slot (HIGH), run there
  kCpu,       // move its rows to the host, run on the CpuExpertExecutor, move the results back
};
const char* ExpertPlacementName(ExpertPlacement placement);  // "resident", "fetch", "cpu"

struct LatencyPoint {
  int64_t rows = 0;
  double seconds = 0.0;
};

struct ExpertLatencyModel {
  std::vector<LatencyPoint> cpu;     // cpu(s) points, rows ascending. Required, non-empty
  std::vector<LatencyPoint> device;  // device(s) points, rows ascending. Required, non-empty
  double transfer_seconds = 0.0;     // one expert host -> device
  size_t expert_bytes = 0;           // the bytes one transfer moves (for the bandwidths)

  double CpuSeconds(int64_t rows) const;
  double DeviceSeconds(int64_t rows) const;
  double TransferSeconds() const { return transfer_seconds; }
  // expert_bytes / transfer_seconds; expert_bytes / CpuSeconds(1). Bytes per second.
  double LinkBytesPerSecond() const;
  double CpuBytesPerSecond() const;
  // One line: "transfer 1.23 ms (3.4 GB/s); cpu(1) 0.5 ms ... ; device(1) ...".
  std::string ToString() const;
};

// Fiddler's rule for one expert with `rows` tokens (see the top).
ExpertPlacement FiddlerPlacement(const ExpertLatencyModel& model, int64_t rows, bool resident);

// MoNDE's H for `active` experts (see the top). alpha >= 0.
int HotColdCount(double alpha, double link_bytes_per_second, double cpu_bytes_per_second,
                 int active);

// The modelled seconds of `batches` (each a layer's rows per expert; 0 = not active) with the
// top HotColdCount experts on the device and the rest on the CPU.
double ReplayHotCold(const ExpertLatencyModel& model, double alpha,
                     std::span<const std::vector<int64_t>> batches);

// The alpha of `grid` (default: 0, 0.25, ..., 4 and the alpha that puts every expert on the
// device) with the least ReplayHotCold; ties go to the one nearest 1. 1 when `batches` is empty.
double TuneHotColdAlpha(const ExpertLatencyModel& model,
                        std::span<const std::vector<int64_t>> batches,
                        std::span<const double> grid = {});

struct CalibrationOptions {
  // The s values measured. Default: 1, 2, 4, 8, 16, 32, 64
  std::vector<int64_t> rows = {1, 2, 4, 8, 16, 32, 64};
  int repeats = 3;  // measurements per point; the median is kept. Default: 3
  ExpertKey key{};  // the expert measured. Default: MoE layer 0, expert 0
};

// Measures the model on `backend` (see the top): a one-slot device cache, a TransferEngine over
// `host`, and `cpu` (an executor over the same host tier). Allocates [max rows, H] activations on
// the device and in pinned host memory for the duration. ResourceExhausted past the device
// budget; the host source's error when the expert cannot be read.
Result<ExpertLatencyModel> CalibrateLatencyModel(Backend& backend, HostExpertSource& host,
                                                 CpuExpertExecutor& cpu,
                                                 const CalibrationOptions& options = {});

}  // namespace sy::offload
