// Fuzzes the data position a checkpoint stores under meta/data_position (runtime/data/batcher.h):
// arbitrary bytes restored into a batcher over the synthetic tasks (whose mutable task weights
// travel in the position), then a batch drawn. Any input must give OK or an error Status; never a
// crash, a hang or an allocation the position alone asks for.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "runtime/data/batcher.h"
#include "runtime/data/synthetic_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<sy::SyntheticDataset> dataset = [] {
    auto made = sy::SyntheticDataset::Create({}, 32, /*seed=*/1, /*eval_fraction=*/0.1,
                                             std::array<double, 5>{1, 1, 1, 2, 1});
    return made.ok() ? std::move(made).value() : nullptr;
  }();
  if (dataset == nullptr) __builtin_trap();
  sy::BatcherOptions options;
  options.batch_size = 2;
  options.seed = 7;
  sy::Result<sy::Batcher> batcher = sy::Batcher::Create(dataset.get(), options);
  if (!batcher.ok()) __builtin_trap();
  std::string_view saved(reinterpret_cast<const char*>(data), size);
  if (batcher->RestorePosition(saved).ok()) {
    sy::Batch batch;
    (void)batcher->Next(&batch);
  }
  // Put the shared dataset back the way every input finds it.
  sy::Result<sy::Batcher> fresh = sy::Batcher::Create(dataset.get(), options);
  if (!fresh.ok() || !fresh->RestorePosition(fresh->SavePosition()).ok()) __builtin_trap();
  return 0;
}
