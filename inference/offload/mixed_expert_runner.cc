#include "inference/offload/mixed_expert_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <thread>
#include <utility>
#include <vector>

#include "inference/offload/swiglu_expert.h"
#include "runtime/core/check.h"

namespace sy::offload {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string PlacementStats::ToString() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "experts: %lld resident, %lld fetched, %lld cpu; rows: %lld device, %lld cpu; "
                "%.2f MiB activations moved; %.2f ms waiting for the CPU",
                static_cast<long long>(resident_experts), static_cast<long long>(fetched_experts),
                static_cast<long long>(cpu_experts), static_cast<long long>(device_rows),
                static_cast<long long>(cpu_rows), static_cast<double>(activation_bytes) / (1 << 20),
                cpu_wait_seconds * 1e3);
  return buf;
}

int DefaultDeviceSlots(const ExpertLayout& layout) {
  const int64_t all = static_cast<int64_t>(layout.num_layers) * layout.num_experts;
  return static_cast<int>(std::max<int64_t>(1, (all + 3) / 4));
}

MixedExpertRunner::MixedExpertRunner(Backend& backend, DeviceExpertCache* cache,
                                     TransferEngine* engine, CpuExpertExecutor& cpu)
    : backend_(backend),
      cache_(cache),
      engine_(engine),
      cpu_(cpu),
      staging_free_(backend.CreateEvent()) {
  SY_CHECK((cache == nullptr) == (engine == nullptr)) << "MixedExpertRunner: cache and engine";
}

MixedExpertRunner::~MixedExpertRunner() {
  if (staging_pending_) staging_free_->Synchronize();
}

int MixedExpertRunner::FetchSlots() const { return FetchCapacity(0); }

int MixedExpertRunner::FetchCapacity(int64_t resident_pins) const {
  if (cache_ == nullptr) return 0;
  const DeviceExpertCacheOptions& options = cache_->options();
  if (options.policy == DeviceCachePolicy::kStatic) {
    // A resident expert under kStatic is a static one: its pin takes no scratch slot.
    const int num_static =
        std::min(static_cast<int>(options.static_experts.size()), options.num_slots);
    return options.num_slots - num_static;
  }
  return std::max(0, options.num_slots - static_cast<int>(resident_pins));
}

Status MixedExpertRunner::EnsureStaging(int64_t rows, int64_t hidden) {
  if (staging_pending_) {
    staging_free_->Synchronize();
    staging_pending_ = false;
  }
  const bool allocated = host_x_.data() != nullptr;
  if (allocated && host_x_.dim(0) >= rows) return Status::Ok();
  const int64_t capacity = std::max<int64_t>(rows, allocated ? 2 * host_x_.dim(0) : 16);
  SY_ASSIGN_OR_RETURN(host_x_,
                      backend_.AllocatePersistentHost(DType::kF32, Shape{capacity, hidden}));
  SY_ASSIGN_OR_RETURN(host_y_,
                      backend_.AllocatePersistentHost(DType::kF32, Shape{capacity, hidden}));
  return Status::Ok();
}

Status MixedExpertRunner::Run(int moe_index, const Tensor& xs, std::span<const int64_t> group_rows,
                              std::span<const ExpertPlacement> placement, const Tensor& ys) {
  SY_CHECK_EQ(group_rows.size(), placement.size()) << "MixedExpertRunner::Run: placements";
  SY_CHECK(xs.dtype() == DType::kF32 && ys.dtype() == DType::kF32 && xs.rank() == 2)
      << "MixedExpertRunner::Run: xs " << xs.ToString() << ", ys " << ys.ToString();
  struct Item {
    ExpertKey key;
    int64_t begin = 0;  // first row in xs / ys
    int64_t rows = 0;
    int64_t staged = 0;  // CPU: first row in the staging buffers
  };
  std::vector<Item> cpu_items, resident_items, fetch_items;
  int64_t row = 0, cpu_rows = 0;
  for (size_t e = 0; e < group_rows.size(); ++e) {
    const int64_t rows = group_rows[e];
    if (rows == 0) continue;
    Item item{{static_cast<uint32_t>(moe_index), static_cast<uint32_t>(e)}, row, rows, 0};
    row += rows;
    if (placement[e] == ExpertPlacement::kCpu) {
      item.staged = cpu_rows;
      cpu_rows += rows;
      cpu_items.push_back(item);
    } else {
      SY_CHECK(cache_ != nullptr) << "MixedExpertRunner: a device placement without a cache";
      (cache_->Lookup(item.key) >= 0 ? resident_items : fetch_items).push_back(item);
    }
  }
  SY_CHECK_EQ(row, xs.dim(0)) << "MixedExpertRunner::Run: group rows";
  Stream& compute = backend_.compute_stream();

  // 1. CPU experts: rows out, executor started.
  std::vector<std::future<Status>> cpu_results;
  if (!cpu_items.empty()) {
    SY_RETURN_IF_ERROR(EnsureStaging(cpu_rows, xs.dim(1)));
    for (const Item& item : cpu_items) {
      backend_.CopyAsync(xs.Slice(item.begin, item.begin + item.rows),
                         host_x_.Slice(item.staged, item.staged + item.rows), compute);
    }
    backend_.SynchronizeStream(compute);
    for (const Item& item : cpu_items) {
      cpu_results.push_back(cpu_.Run(item.key, host_x_.Slice(item.staged, item.staged + item.rows),
                                     host_y_.Slice(item.staged, item.staged + item.rows)));
    }
  }

  // 2. Device experts, beside the executor.
  auto run_on_slot = [&](const Item& item, const SlotHandle& pin) -> Status {
    SY_RETURN_IF_ERROR(engine_->Wait(pin));
    return RunSwigluExpert(
        backend_, cache_->chunk(pin.slot(), ExpertChunk::kGate),
        cache_->chunk(pin.slot(), ExpertChunk::kUp), cache_->chunk(pin.slot(), ExpertChunk::kDown),
        xs.Slice(item.begin, item.begin + item.rows), ys.Slice(item.begin, item.begin + item.rows));
  };
  auto device_part = [&]() -> Status {
    std::vector<SlotHandle> resident_pins;
    for (const Item& item : resident_items) {
      SY_ASSIGN_OR_RETURN(SlotHandle pin, engine_->Enqueue(TransferPriority::kHigh, item.key));
      resident_pins.push_back(std::move(pin));
    }
    std::deque<std::pair<const Item*, SlotHandle>> in_flight;
    size_t next_fetch = 0;
    auto start_fetches = [&](int capacity) -> Status {
      int retries = 0;
      while (next_fetch < fetch_items.size() && static_cast<int>(in_flight.size()) < capacity) {
        const Item& item = fetch_items[next_fetch];
        Result<SlotHandle> pin = engine_->Enqueue(TransferPriority::kHigh, item.key);
        if (!pin.ok()) {
          // The engine drops its own pin on a slot just after the expert is ready, so a slot
          // released a moment ago may still be pinned: try again after the next expert ran, or
          // shortly when nothing else is in flight.
          if (pin.status().code() != StatusCode::kResourceExhausted) return pin.status();
          if (!in_flight.empty()) return Status::Ok();
          if (++retries > 50000) return pin.status();
          std::this_thread::sleep_for(std::chrono::microseconds(20));
          continue;
        }
        ++next_fetch;
        in_flight.emplace_back(&item, std::move(*pin));
      }
      return Status::Ok();
    };
    SY_RETURN_IF_ERROR(start_fetches(FetchCapacity(static_cast<int64_t>(resident_pins.size()))));
    for (size_t i = 0; i < resident_items.size(); ++i) {
      SY_RETURN_IF_ERROR(run_on_slot(resident_items[i], resident_pins[i]));
      resident_pins[i].Release();
    }
    const int capacity = FetchCapacity(0);
    if (!fetch_items.empty() && capacity < 1) {
      return ResourceExhaustedError(
          "MixedExpertRunner: an expert is to be fetched but the device cache has no slot a "
          "fetch may take (every slot is static); give the policy more device slots");
    }
    SY_RETURN_IF_ERROR(start_fetches(capacity));
    while (!in_flight.empty()) {
      SY_RETURN_IF_ERROR(run_on_slot(*in_flight.front().first, in_flight.front().second));
      in_flight.pop_front();
      SY_RETURN_IF_ERROR(start_fetches(capacity));
    }
    return Status::Ok();
  };
  Status status = device_part();

  // 3. The CPU experts' results (waited for even after an error: they write the staging).
  const auto wait_start = std::chrono::steady_clock::now();
  for (std::future<Status>& result : cpu_results) {
    Status s = result.get();
    if (status.ok() && !s.ok()) status = s;
  }
  stats_.cpu_wait_seconds += Since(wait_start);
  SY_RETURN_IF_ERROR(status);
  for (const Item& item : cpu_items) {
    backend_.CopyAsync(host_y_.Slice(item.staged, item.staged + item.rows),
                       ys.Slice(item.begin, item.begin + item.rows), compute);
  }
  if (!cpu_items.empty()) {
    backend_.RecordEvent(*staging_free_, compute);
    staging_pending_ = true;
  }

  stats_.cpu_experts += static_cast<int64_t>(cpu_items.size());
  stats_.cpu_rows += cpu_rows;
  stats_.activation_bytes += 2 * cpu_rows * xs.dim(1) * static_cast<int64_t>(sizeof(float));
  stats_.resident_experts += static_cast<int64_t>(resident_items.size());
  stats_.fetched_experts += static_cast<int64_t>(fetch_items.size());
  stats_.device_rows += row - cpu_rows;
  return Status::Ok();
}

}  // namespace sy::offload
