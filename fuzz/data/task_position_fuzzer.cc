// Fuzzes the per-task data position a checkpoint of a multi-task run stores (runtime/data/
// task_batches.h, TaskStreams::RestorePosition): arbitrary bytes restored into the task streams
// of a small synthetic dataset, then a step's batch filled and the streams advanced. Any input
// must give OK or an error Status; never a crash, a hang or an allocation the position alone
// asks for.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/data/task_batches.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static sy::DataOptions options = [] {
    sy::DataOptions o;
    o.seq_len = 32;
    o.batch_size = 4;
    o.seed = 7;
    o.tasks.copy.batch_size = 3;
    o.tasks.modadd.grow_at_step = 5;
    o.tasks.modadd.grow_batch_size = 2;
    return o;
  }();
  static std::unique_ptr<sy::SyntheticDataset> dataset = [] {
    auto made = sy::SyntheticDataset::Create({}, options.seq_len, options.seed,
                                             /*eval_fraction=*/0.1, options.tasks.ToArray());
    return made.ok() ? std::move(made).value() : nullptr;
  }();
  if (dataset == nullptr) __builtin_trap();
  sy::Result<sy::TaskStreams> streams = sy::TaskStreams::Create(options, dataset.get());
  if (!streams.ok()) __builtin_trap();
  std::string_view saved(reinterpret_cast<const char*>(data), size);
  if (streams->RestorePosition(saved).ok()) {
    std::vector<sy::TaskSlice> slices;
    for (size_t t = 0; t < streams->rows().size(); ++t) {
      if (streams->rows()[t] > 0) slices.push_back({static_cast<int>(t), 0, streams->rows()[t]});
    }
    sy::Batch batch;
    (void)streams->Fill(slices, &batch);
    streams->Advance();
  }
  return 0;
}
