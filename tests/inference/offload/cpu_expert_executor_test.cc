// CpuExpertExecutor: experts computed on the host equal LocalExpertCompute on the same weights
// (f32 and bf16), Run returns before the work is done, and errors reach the future.
#include "inference/offload/cpu_expert_executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <vector>

#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

void ExpectHostMatchesReference(DType dtype) {
  SCOPED_TRACE(std::string(DTypeName(dtype)));
  const ExpertLayout layout{
      .num_layers = 2, .num_experts = 4, .hidden = 96, .intermediate = 160, .dtype = dtype};
  ReferenceExperts reference(layout, 3);
  auto cpu = std::move(CreateBackend(Device::Cpu()).value());
  auto host = reference.MakeHost(*cpu);
  CpuExpertExecutor executor(*host, {.num_threads = 2});
  EXPECT_EQ(executor.num_threads(), 2);
  struct Job {
    ExpertKey key;
    std::vector<float> x, y;
    std::future<Status> done;
  };
  std::vector<Job> jobs;
  uint32_t seed = 1;
  for (uint32_t m = 0; m < 2; ++m) {
    for (uint32_t e = 0; e < 4; ++e) {
      for (int64_t rows : {1, 3, 17}) {
        Job job;
        job.key = {m, e};
        job.x = RandomRows(rows, layout.hidden, seed++);
        job.y.assign(job.x.size(), 0.0f);
        jobs.push_back(std::move(job));
      }
    }
  }
  // All queued at once: the executor runs them in order while this thread waits.
  for (Job& job : jobs) {
    const Shape shape{static_cast<int64_t>(job.x.size()) / layout.hidden, layout.hidden};
    job.done = executor.Run(job.key, Tensor::Wrap(job.x.data(), DType::kF32, shape),
                            Tensor::Wrap(job.y.data(), DType::kF32, shape));
  }
  for (Job& job : jobs) {
    ASSERT_TRUE(job.done.get().ok());
    EXPECT_LE(MaxRelError(job.y, reference.Forward(job.key, job.x)), 1e-5)
        << job.key.ToString() << " rows " << job.x.size() / layout.hidden;
  }
}

TEST(CpuExpertExecutorTest, HostExpertEqualsLocalExpertComputeF32) {
  ExpectHostMatchesReference(DType::kF32);
}

TEST(CpuExpertExecutorTest, HostExpertEqualsLocalExpertComputeBf16) {
  ExpectHostMatchesReference(DType::kBF16);
}

// A source that holds Get until the test opens a gate, or fails it.
class GatedSource final : public HostExpertSource {
 public:
  explicit GatedSource(HostExperts& inner) : inner_(inner) {}
  const ExpertLayout& layout() const override { return inner_.layout(); }
  Result<HostExpert> Get(ExpertKey key) override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return open_; });
    if (key.expert == 3) return DataLossError("expert 3 is corrupt (test)");
    return inner_.Get(key);
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  HostExperts& inner_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(CpuExpertExecutorTest, RunReturnsBeforeTheExpertIsComputedAndReportsErrors) {
  const ExpertLayout layout{
      .num_layers = 1, .num_experts = 4, .hidden = 32, .intermediate = 48, .dtype = DType::kF32};
  ReferenceExperts reference(layout, 5);
  auto cpu = std::move(CreateBackend(Device::Cpu()).value());
  auto host = reference.MakeHost(*cpu);
  GatedSource gated(*host);
  CpuExpertExecutor executor(gated, {.num_threads = 1});
  std::vector<float> x = RandomRows(2, layout.hidden, 9), y(x.size(), 0.0f), z(x.size(), 0.0f);
  const Shape shape{2, layout.hidden};
  std::future<Status> ok = executor.Run({0, 1}, Tensor::Wrap(x.data(), DType::kF32, shape),
                                        Tensor::Wrap(y.data(), DType::kF32, shape));
  std::future<Status> bad = executor.Run({0, 3}, Tensor::Wrap(x.data(), DType::kF32, shape),
                                         Tensor::Wrap(z.data(), DType::kF32, shape));
  EXPECT_EQ(ok.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  gated.Open();
  ASSERT_TRUE(ok.get().ok());
  EXPECT_LE(MaxRelError(y, reference.Forward({0, 1}, x)), 1e-5);
  const Status failed = bad.get();
  EXPECT_EQ(failed.code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace sy::offload
