#include "inference/offload/cpu_expert_executor.h"

#include <utility>

#include "inference/offload/swiglu_expert.h"
#include "runtime/core/check.h"

namespace sy::offload {
namespace {

BackendOptions ComputeOptions(const CpuExpertExecutorOptions& options) {
  BackendOptions backend_options;
  backend_options.num_threads = options.num_threads;
  return backend_options;
}

}  // namespace

CpuExpertExecutor::CpuExpertExecutor(HostExpertSource& source,
                                     const CpuExpertExecutorOptions& options)
    : source_(source),
      backend_(std::make_unique<CpuBackend>(ComputeOptions(options))),
      // A pool of 2 counts its caller: one worker thread, fed through Submit.
      dispatcher_(std::make_unique<ThreadPool>(2)) {}

CpuExpertExecutor::~CpuExpertExecutor() { dispatcher_.reset(); }

int CpuExpertExecutor::num_threads() const { return backend_->pool().num_threads(); }

std::future<Status> CpuExpertExecutor::Run(ExpertKey key, Tensor x, Tensor y) {
  const int64_t hidden = source_.layout().hidden;
  for (const Tensor* t : {&x, &y}) {
    SY_CHECK(t->device().is_host() && t->dtype() == DType::kF32 && t->is_contiguous() &&
             t->rank() == 2 && t->dim(1) == hidden)
        << "CpuExpertExecutor::Run: " << t->ToString() << " must be host f32 [s, " << hidden
        << "], contiguous";
  }
  SY_CHECK(x.shape() == y.shape())
      << "CpuExpertExecutor::Run: x " << x.ToString() << ", y " << y.ToString();
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> result = promise->get_future();
  // The returned std::future<void> is not needed: the promise carries the outcome.
  (void)dispatcher_->Submit([this, key, x = std::move(x), y = std::move(y), promise] {
    Result<HostExpert> expert = source_.Get(key);
    if (!expert.ok()) {
      promise->set_value(expert.status());
      return;
    }
    promise->set_value(RunSwigluExpert(*backend_, expert->chunk(ExpertChunk::kGate),
                                       expert->chunk(ExpertChunk::kUp),
                                       expert->chunk(ExpertChunk::kDown), x, y));
  });
  return result;
}

}  // namespace sy::offload
