// backend_tour: the Backend API in one page. On the simulated device (or cuda:0 with --device),
// it uploads a bf16 "expert" on a copy stream while the compute stream runs a GEMM with another
// expert already resident, orders the two with an event, then runs the uploaded expert.
//
//   build/examples/backend_tour [sim|cpu|cuda:0]
#include <chrono>
#include <cstdio>
#include <random>

#include "runtime/backend/backend.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  sy::Result<sy::Device> device = sy::ParseDevice(argc > 1 ? argv[1] : "sim");
  if (!device.ok()) {
    std::fprintf(stderr, "error: %s\n", device.status().ToString().c_str());
    return 1;
  }
  sy::BackendOptions options;
  options.sim.link_gbps = 8.0;  // a slow link makes the overlap visible
  sy::Result<std::unique_ptr<sy::Backend>> made = sy::CreateBackend(*device, options);
  if (!made.ok()) {
    std::fprintf(stderr, "error: %s\n", made.status().ToString().c_str());
    return 1;
  }
  sy::Backend& backend = **made;
  std::printf("backend: %s\n", backend.name().c_str());

  const int64_t tokens = 64, hidden = 1024, ffn = 4096;
  // Two experts' up-projections in bf16 on the host, as an offloaded model keeps them.
  sy::Tensor host_w = backend.AllocateHost(sy::DType::kBF16, {2, ffn, hidden}).value();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (int64_t i = 0; i < host_w.numel(); ++i)
    host_w.data<sy::BF16>()[i] = sy::F32ToBF16(normal(rng));
  sy::Tensor host_x = backend.AllocateHost(sy::DType::kF32, {tokens, hidden}).value();
  for (int64_t i = 0; i < host_x.numel(); ++i) host_x.data<float>()[i] = normal(rng) * 50;

  sy::Tensor w0 = backend.Allocate(sy::DType::kBF16, {ffn, hidden}).value();
  sy::Tensor w1 = backend.Allocate(sy::DType::kBF16, {ffn, hidden}).value();
  sy::Tensor x = backend.Allocate(sy::DType::kF32, {tokens, hidden}).value();
  sy::Tensor y0 = backend.Allocate(sy::DType::kF32, {tokens, ffn}).value();
  sy::Tensor y1 = backend.Allocate(sy::DType::kF32, {tokens, ffn}).value();
  backend.CopyAsync(host_x, x, backend.compute_stream());
  backend.CopyAsync(host_w.Select(0), w0, backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());

  auto copy_stream = backend.CreateStream();
  auto w1_ready = backend.CreateEvent();
  auto start = std::chrono::steady_clock::now();
  backend.CopyAsync(host_w.Select(1), w1, *copy_stream);  // expert 1 streams in...
  backend.RecordEvent(*w1_ready, *copy_stream);
  for (int i = 0; i < 8; ++i) {
    backend.Gemm(x, w0, y0, {.trans_b = true});  // ...while expert 0 computes
  }
  double compute_done = Seconds(start);
  backend.StreamWaitEvent(backend.compute_stream(), *w1_ready);
  backend.Gemm(x, w1, y1, {.trans_b = true});
  backend.SynchronizeStream(backend.compute_stream());
  double total = Seconds(start);

  sy::Tensor out = backend.AllocateHost(sy::DType::kF32, {tokens, ffn}).value();
  backend.CopyAsync(y1, out, backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());
  std::printf(
      "expert 0 compute: %.1f ms; upload of expert 1 (%.1f MiB bf16) overlapped; "
      "expert 1 done at %.1f ms; y1[0] = %.4f\n",
      compute_done * 1e3, static_cast<double>(w1.nbytes()) / (1 << 20), total * 1e3,
      out.data<float>()[0]);
  sy::MemoryStats stats = backend.memory_stats();
  std::printf("device memory: %.1f MiB in use, peak %.1f MiB\n",
              static_cast<double>(stats.bytes_in_use) / (1 << 20),
              static_cast<double>(stats.peak_bytes_in_use) / (1 << 20));
  return 0;
}
