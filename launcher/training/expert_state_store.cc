#include "launcher/training/expert_state_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "runtime/core/check.h"
#include "runtime/core/mutex.h"

namespace sy::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMetaBytes = 2 * sizeof(int64_t);
// Initial states written per batch of store writes (each batch publishes with one fdatasync).
constexpr size_t kInitialBatch = 16;
// Prefetcher threads: each waits for its fetch to land before it pins the entry, so this many
// reads are in flight at once.
constexpr int kPrefetchThreads = 4;

}  // namespace

// The next hop of the sparse-axis prefetch: keeps each prefetched entry pinned (read mode) from
// the moment it lands until the trainer takes it (Take) or the step ends (ReleaseAll), so that no
// eviction undoes a prefetch before its use. A pin that lands for an entry already taken or
// released is dropped at once.
class ExpertStateStore::PinHop : public storage::NextHop {
 public:
  // `key` was asked for, at HIGH (the exact set) or LOW (a look-ahead).
  void Expect(uint64_t key, bool high) SY_EXCLUDES(mutex_) {
    MutexLock lock(&mutex_);
    expected_.emplace(key, high);
  }
  bool Expected(uint64_t key) const SY_EXCLUDES(mutex_) {
    MutexLock lock(&mutex_);
    return expected_.count(key) > 0;
  }
  size_t outstanding() const SY_EXCLUDES(mutex_) {
    MutexLock lock(&mutex_);
    return expected_.size();
  }
  // The trainer holds `key` now: its prefetch pin goes.
  void Take(uint64_t key) SY_EXCLUDES(mutex_) {
    storage::CacheHandle drop;
    MutexLock lock(&mutex_);
    expected_.erase(key);
    auto it = held_.find(key);
    if (it == held_.end()) return;
    drop = std::move(it->second);
    held_.erase(it);
    lock.Unlock();
  }
  // Releases every pin; returns the HIGH and LOW entries that were never taken.
  std::pair<size_t, size_t> ReleaseAll() SY_EXCLUDES(mutex_) {
    std::unordered_map<uint64_t, storage::CacheHandle> drop;
    std::pair<size_t, size_t> unused{0, 0};
    MutexLock lock(&mutex_);
    for (const auto& [key, high] : expected_) ++(high ? unused.first : unused.second);
    expected_.clear();
    drop.swap(held_);
    lock.Unlock();
    return unused;
  }
  // A dropped fetch is no longer expected, so it can be asked for again.
  void OnDropped(storage::ExpertKey key) SY_EXCLUDES(mutex_) override {
    MutexLock lock(&mutex_);
    if (held_.count(key.Packed()) == 0) expected_.erase(key.Packed());
  }
  void OnHostReady(storage::CacheHandle handle) SY_EXCLUDES(mutex_) override {
    storage::CacheHandle drop;
    const uint64_t key = handle.key().Packed();
    MutexLock lock(&mutex_);
    if (expected_.count(key) > 0 && held_.count(key) == 0) {
      held_.emplace(key, std::move(handle));
    } else {
      drop = std::move(handle);
    }
    lock.Unlock();
  }

 private:
  mutable Mutex mutex_;
  std::unordered_map<uint64_t, bool> expected_ SY_GUARDED_BY(mutex_);  // key -> HIGH
  std::unordered_map<uint64_t, storage::CacheHandle> held_ SY_GUARDED_BY(mutex_);
};

// Wall time with at least one operation in flight; Start and Stop from any thread.
class ExpertStateStore::BusyClock {
 public:
  void Start() SY_EXCLUDES(mutex_) {
    MutexLock lock(&mutex_);
    if (in_flight_++ == 0) since_ = Clock::now();
  }
  void Stop() SY_EXCLUDES(mutex_) {
    MutexLock lock(&mutex_);
    if (--in_flight_ == 0) busy_ += Clock::now() - since_;
  }
  double seconds() const SY_EXCLUDES(mutex_) {
    MutexLock lock(&mutex_);
    Clock::duration busy = busy_;
    if (in_flight_ > 0) busy += Clock::now() - since_;
    return std::chrono::duration<double>(busy).count();
  }

 private:
  mutable Mutex mutex_;
  int in_flight_ SY_GUARDED_BY(mutex_) = 0;
  Clock::time_point since_ SY_GUARDED_BY(mutex_);
  Clock::duration busy_ SY_GUARDED_BY(mutex_){};
};

double HiddenFraction(double read_seconds, double read_exposed_seconds) {
  if (read_seconds <= 0) return 1.0;
  return std::clamp(1.0 - read_exposed_seconds / read_seconds, 0.0, 1.0);
}

ExpertStateStore::ExpertStateStore(const ExpertStateStoreOptions& options, Optimizer* optimizer,
                                   std::vector<ExpertEntry> entries)
    : options_(options), optimizer_(optimizer), entries_(std::move(entries)) {}

ExpertStateStore::~ExpertStateStore() {
  // The staged reads and writes use the staging extents and the store.
  const Status staged = DrainStaging();
  if (!staged.ok()) spdlog::warn("expert_store: {}", staged.message());
  // The prefetcher borrows the cache and the hop; the hop's pins go before the cache.
  prefetcher_.reset();
  if (hop_) hop_->ReleaseAll();
  // The cache borrows the store and must go first. Its destructor does not write back; the
  // states that matter are in the checkpoints, so a failure here is only logged.
  if (cache_) {
    const Status flushed = cache_->Flush();
    if (!flushed.ok()) {
      spdlog::warn("expert_store: final write-back to {}: {}", options_.path, flushed.message());
    }
  }
  cache_.reset();
  store_.reset();
}

Result<std::unique_ptr<ExpertStateStore>> ExpertStateStore::Create(
    const ExpertStateStoreOptions& options, Optimizer* optimizer,
    std::vector<ExpertEntry> entries) {
  SY_CHECK(options.fs != nullptr) << "ExpertStateStore needs a file system";
  SY_CHECK(optimizer != nullptr) << "ExpertStateStore needs the optimizer";
  SY_CHECK(!entries.empty()) << "ExpertStateStore without experts";
  SY_CHECK(options.resident || options.initial_master)
      << "a working-set ExpertStateStore needs initial_master";
  std::unique_ptr<ExpertStateStore> s(new ExpertStateStore(options, optimizer, std::move(entries)));
  SY_RETURN_IF_ERROR(s->Open());
  s->unwritten_.assign(s->entries_.size(), 1);
  s->unwritten_count_ = s->entries_.size();
  s->restoring_ = options.defer_initial;
  if (!options.defer_initial) SY_RETURN_IF_ERROR(s->WriteInitialStates());
  return s;
}

Status ExpertStateStore::Open() {
  with_m_ = optimizer_->NeedsFirstMoment();
  with_v_ = optimizer_->NeedsSecondMoment();
  // The layout: MoE layers, and per layer the contiguous range of this rank's experts.
  std::map<int, std::vector<size_t>> by_layer;
  int max_decoder_layer = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    by_layer[entries_[i].moe_layer].push_back(i);
    max_decoder_layer = std::max(max_decoder_layer, entries_[i].decoder_layer);
  }
  num_moe_layers_ = static_cast<int>(by_layer.rbegin()->first) + 1;
  experts_per_layer_ = static_cast<int>(by_layer.begin()->second.size());
  first_expert_.assign(static_cast<size_t>(num_moe_layers_), -1);
  decoder_to_moe_.assign(static_cast<size_t>(max_decoder_layer) + 1, -1);
  std::vector<ExpertEntry> ordered(entries_.size());
  size_t largest = 0;
  for (auto& [layer, members] : by_layer) {
    SY_CHECK_EQ(static_cast<int>(members.size()), experts_per_layer_)
        << "every MoE layer needs the same number of local experts";
    int first = entries_[members[0]].expert;
    for (size_t i : members) first = std::min(first, entries_[i].expert);
    first_expert_[static_cast<size_t>(layer)] = first;
    for (size_t i : members) {
      ExpertEntry& e = entries_[i];
      const int local = e.expert - first;
      SY_CHECK(local >= 0 && local < experts_per_layer_) << e.name << ": experts not contiguous";
      decoder_to_moe_[static_cast<size_t>(e.decoder_layer)] = layer;
      ordered[EntryIndex(layer, local)] = std::move(e);
    }
  }
  entries_ = std::move(ordered);
  for (const ExpertEntry& e : entries_) {
    size_t n = 0;
    for (const ExpertPart& p : e.parts) n += p.n;
    SY_CHECK_GT(n, 0u) << e.name << " has no parameters";
    numel_.push_back(n);
    largest = std::max(largest, n);
    SY_CHECK_EQ(n, numel_[0]) << e.name << ": every expert needs the same size";
  }
  zeros_.assign(largest, 0.0f);
  last_update_.assign(entries_.size(), 0);
  activated_.assign(entries_.size(), 0);
  offered_.assign(entries_.size(), std::nullopt);

  const uint64_t part = numel_[0] * sizeof(float);
  storage::KindSpec kind;
  kind.kind = storage::ExtentKind::kTrainState;
  kind.part_bytes.push_back(part);
  if (with_m_) kind.part_bytes.push_back(part);
  if (with_v_) kind.part_bytes.push_back(part);
  kind.part_bytes.push_back(kMetaBytes);
  uint64_t payload = 0;
  for (uint64_t b : kind.part_bytes) payload += b;
  const uint64_t stride = storage::AlignUp(payload, storage::kStoreBlock);
  const size_t budget_slots = options_.cache_bytes / stride;
  if (budget_slots == 0) {
    return ResourceExhaustedError(
        "expert_store.cache_mib: the cache budget of " + std::to_string(options_.cache_bytes) +
        " bytes holds no expert (one expert's state is " + std::to_string(stride) +
        " bytes); raise expert_store.cache_mib to at least " +
        std::to_string(static_cast<double>(stride) / (1 << 20)) + " MiB");
  }
  const int64_t total = static_cast<int64_t>(entries_.size());
  // Staging (below, with a crc32c store) comes out of the cache's budget, which keeps at least
  // one slot; its writes are in flight with the cache's.
  const size_t staging = options_.prefetch && !options_.resident
                             ? std::min(options_.staging_bytes / stride, budget_slots - 1)
                             : 0;
  // A write goes to a spare extent: as many as the writes a step has in flight at once (the
  // cache's write-backs, the staged states'), so none waits for another's publish.
  kind.spare_extents =
      std::min<int64_t>(total, std::max<int64_t>(16, static_cast<int64_t>(budget_slots)));
  storage::StoreLayout layout;
  layout.num_layers = static_cast<uint32_t>(num_moe_layers_);
  layout.num_experts = static_cast<uint32_t>(experts_per_layer_);
  layout.kinds.push_back(kind);

  auto exists = options_.fs->Exists(options_.path);
  bool create = !(exists.ok() && *exists);
  if (!create) {
    Result<std::unique_ptr<storage::ExpertStore>> opened =
        storage::ExpertStore::Open(options_.fs, options_.path);
    if (opened.status().code() == StatusCode::kDataLoss) {
      // The store holds nothing a checkpoint does not (every state is rewritten at creation and
      // restore), so a store damaged beyond its own recovery is replaced.
      spdlog::warn("expert_store: {} cannot be opened ({}); creating it anew", options_.path,
                   opened.status().message());
      SY_RETURN_IF_ERROR(options_.fs->Remove(options_.path));
      create = true;
    } else if (!opened.ok()) {
      return Status(opened.status().code(), "expert_store: " + opened.status().message());
    } else {
      store_ = std::move(*opened);
      Result<storage::KindInfo> info = store_->Kind(storage::ExtentKind::kTrainState);
      const bool same_model = store_->num_layers() == layout.num_layers && info.ok() &&
                              info->part_bytes == kind.part_bytes;
      if (same_model && store_->num_experts() != layout.num_experts) {
        // This model's states at another world size or parallel.ep_size (each rank stores its
        // own experts): the store holds nothing a checkpoint does not, and every state is
        // rewritten below from the initialisation and then the checkpoint, so it is rebuilt.
        spdlog::info(
            "expert_store: {} holds {} experts per layer, written by a run at another world size "
            "or parallel.ep_size; this rank has {}: rebuilding it (every state is rewritten from "
            "the checkpoint, or the initialisation)",
            options_.path, store_->num_experts(), layout.num_experts);
        store_.reset();
        SY_RETURN_IF_ERROR(options_.fs->Remove(options_.path));
        create = true;
      } else if (!same_model) {
        return FailedPreconditionError(
            "expert_store: " + options_.path + " holds another model's expert states (" +
            std::to_string(store_->num_layers()) + " layers x " +
            std::to_string(store_->num_experts()) + " experts, this run needs " +
            std::to_string(layout.num_layers) + " x " + std::to_string(layout.num_experts) +
            " of " + std::to_string(payload) +
            " bytes); delete it or point expert_store.dir elsewhere");
      }
    }
  }
  if (create) {
    Result<std::unique_ptr<storage::ExpertStore>> created =
        storage::ExpertStore::Create(options_.fs, options_.path, layout);
    if (!created.ok()) {
      return Status(created.status().code(), "expert_store: " + created.status().message());
    }
    store_ = std::move(*created);
  }
  if (store_->SplitReads()) staging_slots_ = staging;
  const size_t slots = budget_slots - staging_slots_;
  storage::CacheOptions cache;
  cache.num_slots = slots;
  cache.kind = storage::ExtentKind::kTrainState;
  cache.policy.kind = storage::PolicyKind::kMoESysLfu;
  cache.policy.lfu = options_.lfu;
  cache.update_cycle = 1;
  Result<std::unique_ptr<storage::ExpertCache>> made =
      storage::ExpertCache::Create(store_.get(), cache);
  if (!made.ok()) {
    return Status(made.status().code(), "expert_store: " + made.status().message());
  }
  cache_ = std::move(*made);
  activity_.assign(entries_.size(), 0.0);
  staged_slot_.assign(entries_.size(), -1);
  staged_reads_ = std::make_unique<BusyClock>();
  staged_writes_ = std::make_unique<BusyClock>();
  if (options_.prefetch && slots >= 2) {
    // The trainer holds one entry at a time, so prefetches could pin all the other slots; but
    // each prefetch evicts an entry, and a window of every slot would evict the LFU's resident
    // set at every layer when the step's experts outnumber the slots. Half the slots (at least
    // the reads in flight at once, at most all but one) leave the other half to it.
    window_ = std::min(slots - 1, std::max(static_cast<size_t>(kPrefetchThreads), slots / 2));
    hop_ = std::make_unique<PinHop>();
    storage::PrefetcherOptions prefetch;
    prefetch.threads = kPrefetchThreads;
    prefetch.next_hop = hop_.get();
    // A prefetch never evicts an entry used more than the newcomer it brings (LFU count 1): the
    // resident set the LFU keeps stays, and a fetch that finds no such slot is dropped and asked
    // for again later (Update's read-ahead) or read on demand.
    prefetch.max_victim_count = 1.0;
    prefetcher_ = std::make_unique<storage::Prefetcher>(cache_.get(), prefetch);
  }
  return Status::Ok();
}

size_t ExpertStateStore::EntryIndex(int moe_layer, int local) const {
  return static_cast<size_t>(moe_layer) * static_cast<size_t>(experts_per_layer_) +
         static_cast<size_t>(local);
}

storage::ExpertKey ExpertStateStore::Key(size_t entry) const {
  return {static_cast<uint32_t>(entry / static_cast<size_t>(experts_per_layer_)),
          static_cast<uint32_t>(entry % static_cast<size_t>(experts_per_layer_))};
}

Status ExpertStateStore::Fail(size_t entry, const Status& status) const {
  const ExpertEntry& e = entries_[entry];
  // The store's file could not grow or be written (ENOSPC, EDQUOT): its disk is full.
  const std::string fix = status.code() == StatusCode::kResourceExhausted
                              ? "; free space on the disk that holds it, or point "
                                "expert_store.dir at a larger disk"
                              : "";
  return Status(status.code(), "expert_store: " + e.name + " (layer " +
                                   std::to_string(e.decoder_layer) + " expert " +
                                   std::to_string(e.expert) + ") in " + options_.path + ": " +
                                   status.message() + fix);
}

Status ExpertStateStore::WriteInitialStates() {
  if (unwritten_count_ == 0) return Status::Ok();
  const size_t payload = cache_->payload_bytes();
  const size_t n = numel_[0];
  std::vector<size_t> todo;
  for (size_t e = 0; e < entries_.size(); ++e) {
    if (unwritten_[e]) todo.push_back(e);
  }
  std::vector<std::vector<std::byte>> staging(std::min(kInitialBatch, todo.size()),
                                              std::vector<std::byte>(payload, std::byte{0}));
  for (size_t first = 0; first < todo.size(); first += kInitialBatch) {
    const size_t count = std::min(kInitialBatch, todo.size() - first);
    // The batch's states, generated in parallel (a large store's initial values are billions of
    // normal draws), then written.
    std::vector<std::future<void>> fills;
    for (size_t j = 0; j < count; ++j) {
      fills.push_back(std::async(std::launch::async, [this, &staging, &todo, first, j, n] {
        std::vector<std::byte>& buf = staging[j];
        std::fill(buf.begin(), buf.end(), std::byte{0});
        const ExpertEntry& entry = entries_[todo[first + j]];
        if (options_.initial_master) {
          options_.initial_master(entry, std::span<float>(reinterpret_cast<float*>(buf.data()), n));
          return;
        }
        size_t at = 0;
        for (const ExpertPart& p : entry.parts) {
          std::memcpy(buf.data() + at * sizeof(float), p.value, p.n * sizeof(float));
          at += p.n;
        }
        SY_CHECK_EQ(at, n) << "expert size";
      }));
    }
    for (std::future<void>& f : fills) f.get();
    std::vector<std::future<Result<uint64_t>>> writes;
    for (size_t j = 0; j < count; ++j) {
      writes.push_back(
          store_->Write(Key(todo[first + j]), storage::ExtentKind::kTrainState, staging[j]));
    }
    Status failed = Status::Ok();
    for (size_t j = 0; j < count; ++j) {
      Result<uint64_t> written = writes[j].get();
      const size_t e = todo[first + j];
      if (!written.ok()) {
        if (failed.ok()) failed = Fail(e, written.status());
        continue;
      }
      unwritten_[e] = 0;
      --unwritten_count_;
      last_update_[e] = 0;
    }
    SY_RETURN_IF_ERROR(failed);
  }
  return Status::Ok();
}

Status ExpertStateStore::SettleSlow() {
  SY_RETURN_IF_ERROR(FinishImports(0));
  SY_RETURN_IF_ERROR(WriteInitialStates());
  restoring_ = false;
  return Status::Ok();
}

Status ExpertStateStore::FinishImports(size_t keep) {
  Status failed = Status::Ok();
  while (imports_.size() > keep) {
    DirectImport& front = imports_.front();
    Result<uint64_t> written = front.written.get();
    if (!written.ok()) {
      // Not written: unless a later import of it is on its way, its initial state (or a later
      // Import) writes it.
      const size_t entry = front.entry;
      const bool again = std::any_of(imports_.begin() + 1, imports_.end(),
                                     [entry](const DirectImport& d) { return d.entry == entry; });
      if (!again && !unwritten_[entry]) {
        unwritten_[entry] = 1;
        ++unwritten_count_;
      }
      if (failed.ok()) failed = Fail(entry, written.status());
    }
    imports_.pop_front();
  }
  return failed;
}

Result<storage::CacheHandle> ExpertStateStore::AcquireEntry(size_t entry,
                                                            storage::AccessMode mode) {
  const auto start = Clock::now();
  Result<storage::CacheHandle> handle = cache_->Acquire(Key(entry), mode);
  wait_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  if (hop_) hop_->Take(Key(entry).Packed());
  if (!handle.ok()) return Fail(entry, handle.status());
  return handle;
}

bool ExpertStateStore::PrefetchEntry(size_t entry, storage::PrefetchPriority priority) {
  if (!prefetcher_ || hop_->outstanding() >= window_) return false;
  const storage::ExpertKey key = Key(entry);
  hop_->Expect(key.Packed(), priority == storage::PrefetchPriority::kHigh);
  const uint32_t expert = key.expert;
  prefetcher_->Prefetch(key.layer, std::span<const uint32_t>(&expert, 1), priority);
  return true;
}

void ExpertStateStore::TopUp(const std::vector<size_t>& demand, size_t* cursor) {
  if (!prefetcher_) return;
  while (*cursor < demand.size()) {
    const size_t entry = demand[*cursor];
    const storage::ExpertKey key = Key(entry);
    // A staged entry is read into its staging extent, never into the cache.
    if (staged_slot_[entry] < 0 && !hop_->Expected(key.Packed()) && !cache_->Contains(key) &&
        !PrefetchEntry(entry, storage::PrefetchPriority::kHigh)) {
      return;  // the window is full: continue from here
    }
    ++*cursor;
  }
}

void ExpertStateStore::ReadAhead(const std::vector<size_t>& order, size_t from) {
  if (!prefetcher_) return;
  // Rescanned every time: a fetch dropped for want of a slot it may evict is asked for again
  // once the entries updated before it have made room.
  for (size_t j = from; j < order.size() && j < from + window_; ++j) {
    const storage::ExpertKey key = Key(order[j]);
    if (hop_->Expected(key.Packed()) || cache_->Contains(key)) continue;
    if (!PrefetchEntry(order[j], storage::PrefetchPriority::kHigh)) return;
  }
}

void ExpertStateStore::LookAhead(int moe, const std::function<bool(size_t)>& wanted) {
  if (!prefetcher_ || moe < 0 || moe >= num_moe_layers_) return;
  std::vector<size_t> candidates;
  for (int i = 0; i < experts_per_layer_; ++i) {
    const size_t entry = EntryIndex(moe, i);
    const storage::ExpertKey key = Key(entry);
    // A staged state (its write perhaps in flight) is not read into the cache.
    if (activity_[entry] > 0 && staged_slot_[entry] < 0 && wanted(entry) &&
        !hop_->Expected(key.Packed()) && !cache_->Contains(key)) {
      candidates.push_back(entry);
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [this](size_t a, size_t b) { return activity_[a] > activity_[b]; });
  const size_t budget = std::max<size_t>(1, window_ / 2);
  for (size_t i = 0; i < candidates.size() && i < budget; ++i) {
    if (!PrefetchEntry(candidates[i], storage::PrefetchPriority::kLow)) return;
  }
}

void ExpertStateStore::ReleasePrefetched() {
  if (!hop_) return;
  prefetch_unused_ += hop_->ReleaseAll().first;
}

void ExpertStateStore::Advance(size_t entry, std::span<std::byte> state, int64_t target,
                               const double* lr) {
  const ExpertEntry& e = entries_[entry];
  const size_t n = numel_[entry];
  std::byte* data = state.data();
  float* master = reinterpret_cast<float*>(data);
  float* m = with_m_ ? master + n : nullptr;
  float* v = with_v_ ? master + n * (with_m_ ? 2 : 1) : nullptr;
  std::byte* meta_bytes = data + n * sizeof(float) * (1 + (with_m_ ? 1 : 0) + (with_v_ ? 1 : 0));
  Meta meta;
  std::memcpy(&meta, meta_bytes, sizeof(meta));
  SY_CHECK_EQ(meta.last_update, last_update_[entry]) << e.name << ": state and index disagree";

  std::vector<ParamGroup> groups(e.parts.size());
  std::vector<int64_t> steps(e.parts.size());
  auto step_once = [&](double rate, bool with_grad) {
    size_t at = 0;
    for (size_t k = 0; k < e.parts.size(); ++k) {
      steps[k] = meta.opt_step;
      ParamGroup& g = groups[k];
      g.param = master + at;
      SY_CHECK(!with_grad || e.parts[k].grad != nullptr) << e.name << ": no gradient bound";
      g.grad = with_grad ? e.parts[k].grad : zeros_.data();
      g.m = m != nullptr ? m + at : nullptr;
      g.v = v != nullptr ? v + at : nullptr;
      g.n = e.parts[k].n;
      g.step = &steps[k];
      at += e.parts[k].n;
    }
    optimizer_->Step(groups, rate);
    meta.opt_step = steps[0];
  };
  bool changed = false;
  if (!options_.sparse_adam) {
    SY_CHECK_GE(meta.last_update, lr_base_)
        << e.name << ": its state predates the learning rates this run recorded";
    for (int64_t u = meta.last_update + 1; u <= target; ++u) {
      step_once(lrs_[static_cast<size_t>(u - lr_base_ - 1)], /*with_grad=*/false);
      ++replayed_;
      changed = true;
    }
    meta.last_update = std::max(meta.last_update, target);
  }
  if (lr != nullptr) {
    step_once(*lr, /*with_grad=*/true);
    meta.last_update = updates_;
    changed = true;
  }
  std::memcpy(meta_bytes, &meta, sizeof(meta));
  last_update_[entry] = meta.last_update;
  if (!changed) return;
  WriteValues(entry, state);
}

void ExpertStateStore::WriteValues(size_t entry, std::span<const std::byte> state) const {
  const float* master = reinterpret_cast<const float*>(state.data());
  size_t at = 0;
  for (const ExpertPart& p : entries_[entry].parts) {
    if (p.value != nullptr) std::memcpy(p.value, master + at, p.n * sizeof(float));
    at += p.n;
  }
}

void ExpertStateStore::Bind(size_t entry, std::span<float* const> values,
                            std::span<const float* const> grads) {
  SY_CHECK(!options_.resident) << "Bind on a resident ExpertStateStore";
  SY_CHECK_LT(entry, entries_.size()) << "entry";
  ExpertEntry& e = entries_[entry];
  SY_CHECK_EQ(values.size(), e.parts.size()) << e.name << ": values";
  SY_CHECK(grads.empty() || grads.size() == e.parts.size()) << e.name << ": grads";
  // An offered master's fill reads the memory bound now; it goes before the memory does.
  (void)Withdraw(entry, /*later=*/true);
  for (size_t k = 0; k < e.parts.size(); ++k) {
    e.parts[k].value = values[k];
    e.parts[k].grad = grads.empty() ? nullptr : grads[k];
  }
}

void ExpertStateStore::UnbindAll() {
  if (options_.resident) return;
  for (size_t entry = 0; entry < entries_.size(); ++entry) (void)Withdraw(entry, /*later=*/true);
  for (ExpertEntry& e : entries_) {
    for (ExpertPart& p : e.parts) p.value = nullptr, p.grad = nullptr;
  }
}

size_t ExpertStateStore::Entry(int decoder_layer, int expert) const {
  SY_CHECK(decoder_layer >= 0 && decoder_layer < static_cast<int>(decoder_to_moe_.size()) &&
           decoder_to_moe_[static_cast<size_t>(decoder_layer)] >= 0)
      << "decoder layer " << decoder_layer << " has no experts in the store";
  const int moe = decoder_to_moe_[static_cast<size_t>(decoder_layer)];
  const int local = expert - first_expert_[static_cast<size_t>(moe)];
  SY_CHECK(local >= 0 && local < experts_per_layer_)
      << "expert " << expert << " of decoder layer " << decoder_layer << " is not this rank's";
  return EntryIndex(moe, local);
}

Status ExpertStateStore::BeginStep() {
  SY_RETURN_IF_ERROR(Settle());
  // An evaluation's staged masters (verified by their rest reads), or a failed step's; the last
  // step's writes stay in flight, behind this step's forward.
  if (staging_in_use_ > 0) {
    SY_RETURN_IF_ERROR(RetireStaged([](const Staged& staged) { return !staged.carried; }));
  }
  std::fill(activated_.begin(), activated_.end(), 0);
  activated_order_.clear();
  update_cursor_ = 0;
  cache_->ClearProtected();
  return VerifyWithdrawn();
}

Status ExpertStateStore::ReadMasters(const std::vector<size_t>& entries) {
  if (entries.empty()) return Status::Ok();
  const auto start = Clock::now();
  const size_t bytes = numel_[0] * sizeof(float);
  // Reads in flight at once: the prefetch's, or one at a time without it.
  const size_t depth = prefetcher_ ? static_cast<size_t>(kPrefetchThreads) : 1;
  while (master_buffers_.size() < depth) {
    SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                        AllocateHostBuffer(storage::AlignUp(bytes, storage::kStoreBlock)));
    master_buffers_.push_back(std::move(buffer));
  }
  using Prefix = storage::ExpertStore::ExtentPrefix;
  // Where each master goes: a staging extent (its rest follows), or the buffers in turn.
  std::vector<int> slots(entries.size(), -1);
  for (size_t i = 0; i < entries.size(); ++i) {
    SY_ASSIGN_OR_RETURN(slots[i], StageEntry(entries[i]));
  }
  std::vector<std::future<Result<Prefix>>> reads(entries.size());
  auto buffer_of = [&](size_t i) -> Buffer& {
    return slots[i] >= 0 ? *staging_[static_cast<size_t>(slots[i])].extent
                         : *master_buffers_[i % depth];
  };
  auto read = [&](size_t i) {
    auto promise = std::make_shared<std::promise<Result<Prefix>>>();
    reads[i] = promise->get_future();
    Buffer& buffer = buffer_of(i);
    store_->ReadPrefixAsync(
        Key(entries[i]), storage::ExtentKind::kTrainState, bytes,
        std::span<std::byte>(static_cast<std::byte*>(buffer.data()), buffer.bytes()),
        [promise](Result<Prefix> prefix) { promise->set_value(std::move(prefix)); });
  };
  for (size_t i = 0; i < std::min(depth, entries.size()); ++i) read(i);
  Status status;
  size_t i = 0;
  for (; i < entries.size(); ++i) {
    const size_t entry = entries[i];
    const auto wait_start = Clock::now();
    Result<Prefix> prefix = reads[i].get();
    wait_seconds_ += std::chrono::duration<double>(Clock::now() - wait_start).count();
    if (!prefix.ok()) {
      status = Fail(entry, prefix.status());
      break;
    }
    const auto* master = static_cast<const float*>(buffer_of(i).data());
    size_t at = 0;
    for (const ExpertPart& p : entries_[entry].parts) {
      std::memcpy(p.value, master + at, p.n * sizeof(float));
      at += p.n;
    }
    ++master_reads_;
    if (slots[i] >= 0) {
      // Staged: the rest (m, v, the counts) is read at the end of the forward (IssueRests).
      Staged& staged = staging_[static_cast<size_t>(slots[i])];
      staged.prefix = *prefix;
      staged.rest_pending = true;
      ++staged_;
      if (i + depth < entries.size()) read(i + depth);
      continue;
    }
    offered_[entry] = *prefix;
    cache_->OfferPrefix(Key(entry), *prefix, [this, entry](std::span<std::byte> dst) {
      // The master as read: the forward does not change the bound values.
      size_t at = 0;
      for (const ExpertPart& p : entries_[entry].parts) {
        std::memcpy(dst.data() + at * sizeof(float), p.value, p.n * sizeof(float));
        at += p.n;
      }
    });
    if (i + depth < entries.size()) read(i + depth);
  }
  // After a failure, the reads still in flight use the buffers: wait for them.
  for (size_t j = i + 1; j < std::min(entries.size(), i + depth); ++j) {
    if (reads[j].valid()) (void)reads[j].get();
  }
  master_read_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  return status;
}

Result<int> ExpertStateStore::StageEntry(size_t entry) {
  if (staging_in_use_ >= staging_slots_ || entries_[entry].parts.empty() ||
      entries_[entry].parts[0].grad == nullptr) {
    return -1;
  }
  SY_CHECK_LT(staged_slot_[entry], 0) << entries_[entry].name << ": staged twice";
  size_t slot = 0;
  while (slot < staging_.size() && staging_[slot].used) ++slot;
  if (slot == staging_.size()) {
    SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> extent, AllocateHostBuffer(extent_bytes()));
    // The bytes past the payload are written with it: zero, as a cache slot's.
    std::memset(extent->data(), 0, extent->bytes());
    staging_.emplace_back().extent = std::move(extent);
  }
  Staged& staged = staging_[slot];
  staged.used = true;
  staged.carried = false;
  staged.updated = false;
  staged.rest_pending = false;
  staged.entry = entry;
  staged_slot_[entry] = static_cast<int>(slot);
  ++staging_in_use_;
  return static_cast<int>(slot);
}

void ExpertStateStore::IssueRests() {
  for (Staged& staged : staging_) {
    if (staged.used && staged.rest_pending) IssueRest(staged);
  }
}

void ExpertStateStore::IssueRest(Staged& staged) {
  staged.rest_pending = false;
  auto promise = std::make_shared<std::promise<Status>>();
  staged.rest = promise->get_future();
  BusyClock* clock = staged_reads_.get();
  clock->Start();
  store_->ReadRestAsync(
      Key(staged.entry), storage::ExtentKind::kTrainState, staged.prefix,
      std::span<std::byte>(static_cast<std::byte*>(staged.extent->data()), staged.extent->bytes()),
      [promise, clock, landed = staged_reads_landed_](Status s) {
        clock->Stop();
        promise->set_value(std::move(s));
        // After the value: once an observer counts the read, the trainer finds it ready. Held by
        // the callback, so the count outlives a store destroyed once the value is set.
        landed->fetch_add(1, std::memory_order_release);
      });
}

Status ExpertStateStore::UpdateStaged(size_t entry, double lr) {
  Staged& staged = staging_[static_cast<size_t>(staged_slot_[entry])];
  SY_CHECK(staged.rest.valid() && !staged.updated) << entries_[entry].name << ": not staged";
  if (staged.rest.wait_for(std::chrono::seconds(0)) == std::future_status::ready) ++staged_ready_;
  const auto wait_start = Clock::now();
  Status rest = staged.rest.get();
  if (rest.ok() && staged.written.valid()) {
    // Staged in the last step too: its write reads the extent until it is durable.
    Result<uint64_t> written = staged.written.get();
    if (!written.ok()) rest = written.status();
  }
  const double waited = std::chrono::duration<double>(Clock::now() - wait_start).count();
  wait_seconds_ += waited;
  staged_wait_seconds_ += waited;
  if (!rest.ok()) return Fail(entry, rest);
  Advance(
      entry,
      std::span<std::byte>(static_cast<std::byte*>(staged.extent->data()), cache_->payload_bytes()),
      updates_ - 1, &lr);
  staged.updated = true;
  if (prefetcher_) cache_->Unprotect(Key(entry));
  return Status::Ok();
}

void ExpertStateStore::WriteStaged(size_t entry) {
  Staged& staged = staging_[static_cast<size_t>(staged_slot_[entry])];
  SY_CHECK(staged.updated && !staged.written.valid()) << entries_[entry].name << ": not updated";
  auto promise = std::make_shared<std::promise<Result<uint64_t>>>();
  staged.written = promise->get_future();
  BusyClock* clock = staged_writes_.get();
  clock->Start();
  store_->WriteAsync(
      Key(entry), storage::ExtentKind::kTrainState,
      std::span<const std::byte>(static_cast<const std::byte*>(staged.extent->data()),
                                 staged.extent->bytes()),
      [promise, clock](Result<uint64_t> generation) {
        clock->Stop();
        promise->set_value(std::move(generation));
      });
}

Status ExpertStateStore::RetireStaged(const std::function<bool(const Staged&)>& which) {
  Status failed = Status::Ok();
  for (Staged& staged : staging_) {
    if (!staged.used || !which(staged)) continue;
    if (staged.rest_pending) IssueRest(staged);  // it verifies the master the model used
    if (staged.updated && !staged.written.valid()) WriteStaged(staged.entry);
    // A rest never taken by Update (a skipped step, an evaluation) still verifies the master the
    // model computed with.
    if (staged.rest.valid()) {
      const Status rest = staged.rest.get();
      if (!rest.ok() && failed.ok()) failed = Fail(staged.entry, rest);
    }
    if (staged.written.valid()) {
      const Result<uint64_t> written = staged.written.get();
      if (!written.ok() && failed.ok()) failed = Fail(staged.entry, written.status());
    }
    staged_slot_[staged.entry] = -1;
    staged.used = false;
    --staging_in_use_;
  }
  return failed;
}

Status ExpertStateStore::DrainStaging() {
  if (staging_in_use_ == 0) return Status::Ok();
  return RetireStaged([](const Staged&) { return true; });
}

Status ExpertStateStore::RetireCarried() {
  if (staging_in_use_ == 0) return Status::Ok();
  return RetireStaged([](const Staged& staged) { return staged.carried; });
}

Status ExpertStateStore::Withdraw(size_t entry, bool later) {
  if (!offered_[entry]) return Status::Ok();
  const storage::ExpertStore::ExtentPrefix prefix = *offered_[entry];
  offered_[entry].reset();
  if (!cache_->WithdrawPrefix(Key(entry))) return Status::Ok();  // a load used it: verified
  unverified_.emplace_back(entry, prefix);
  return later ? Status::Ok() : VerifyWithdrawn();
}

Status ExpertStateStore::VerifyWithdrawn() {
  if (unverified_.empty()) return Status::Ok();
  // A master read whose state no load completed (the expert was cached by then, or not updated):
  // the rest of its extent is read into scratch and the whole checked, so every byte the model
  // used was verified.
  SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> scratch, AllocateHostBuffer(extent_bytes()));
  std::vector<std::pair<size_t, storage::ExpertStore::ExtentPrefix>> pending;
  pending.swap(unverified_);
  for (const auto& [entry, prefix] : pending) {
    auto promise = std::make_shared<std::promise<Status>>();
    std::future<Status> done = promise->get_future();
    store_->ReadRestAsync(
        Key(entry), storage::ExtentKind::kTrainState, prefix,
        std::span<std::byte>(static_cast<std::byte*>(scratch->data()), scratch->bytes()),
        [promise](Status s) { promise->set_value(std::move(s)); });
    // Every caller withdraws an expert's master before its state is next written, so the version
    // is still the one read (FailedPrecondition from the store otherwise).
    Status s = done.get();
    if (!s.ok()) return Fail(entry, s);
  }
  return Status::Ok();
}

Status ExpertStateStore::Prepare(int decoder_layer, int first_expert,
                                 std::span<const int64_t> rows) {
  SY_CHECK(decoder_layer >= 0 && decoder_layer < static_cast<int>(decoder_to_moe_.size()) &&
           decoder_to_moe_[static_cast<size_t>(decoder_layer)] >= 0)
      << "decoder layer " << decoder_layer << " has no experts in the store";
  SY_RETURN_IF_ERROR(Settle());
  const int moe = decoder_to_moe_[static_cast<size_t>(decoder_layer)];
  SY_CHECK_EQ(first_expert, first_expert_[static_cast<size_t>(moe)]) << "first expert";
  SY_CHECK_EQ(static_cast<int>(rows.size()), experts_per_layer_) << "local experts";
  // An activated expert staged in the last step keeps its staging extent, which holds its newest
  // state (its write perhaps still in flight: UpdateStaged waits for it before changing it): no
  // read. Below, its values come from there.
  if (staging_in_use_ > 0) {
    for (int i = 0; i < experts_per_layer_; ++i) {
      const size_t entry = EntryIndex(moe, i);
      if (rows[static_cast<size_t>(i)] == 0 || staged_slot_[entry] < 0) continue;
      Staged& staged = staging_[static_cast<size_t>(staged_slot_[entry])];
      if (!staged.carried) continue;
      staged.carried = false;
      staged.updated = false;
      std::promise<Status> in_memory;
      in_memory.set_value(Status::Ok());
      staged.rest = in_memory.get_future();
      ++staged_hits_;
    }
  }
  // Exact mode: the experts behind need a replay now. The working set: every activated expert's
  // values are read (those behind after their replay).
  std::vector<size_t> needed;
  for (int i = 0; i < experts_per_layer_; ++i) {
    if (rows[static_cast<size_t>(i)] == 0) continue;
    const size_t entry = EntryIndex(moe, i);
    if (!activated_[entry]) {
      activated_[entry] = 1;
      activated_order_.push_back(entry);
      activity_[entry] += 1.0;
      // Until its update, no prefetch evicts it (a cached state would be read again).
      if (prefetcher_) cache_->Protect(Key(entry));
    }
    const bool stale = !options_.sparse_adam && last_update_[entry] < updates_;
    if (stale || !options_.resident) needed.push_back(entry);
  }
  // The working set on a crc32c store: an expert not cached (nor on its way) and not behind has
  // only its master read now; its update reads the rest (ReadMasters).
  if (!options_.resident && store_->SplitReads()) {
    std::vector<size_t> masters;
    std::erase_if(needed, [&](size_t entry) {
      if (staged_slot_[entry] >= 0) {
        // Staged earlier in this step (an evaluation's later batch): its master is there.
        const Staged& staged = staging_[static_cast<size_t>(staged_slot_[entry])];
        WriteValues(entry,
                    std::span<const std::byte>(static_cast<const std::byte*>(staged.extent->data()),
                                               staged.prefix.bytes));
        return true;
      }
      const storage::ExpertKey key = Key(entry);
      const bool split = (options_.sparse_adam || last_update_[entry] >= updates_) &&
                         !(hop_ && hop_->Expected(key.Packed())) && cache_->Absent(key);
      if (split) masters.push_back(entry);
      return split;
    });
    SY_RETURN_IF_ERROR(ReadMasters(masters));
  }
  // HIGH: the states needed now, then the updates this step will make.
  size_t cursor = 0;
  TopUp(needed, &cursor);
  for (size_t i = 0; i < needed.size(); ++i) {
    const size_t entry = needed[i];
    const bool stale = !options_.sparse_adam && last_update_[entry] < updates_;
    SY_ASSIGN_OR_RETURN(
        storage::CacheHandle handle,
        AcquireEntry(entry, stale ? storage::AccessMode::kWrite : storage::AccessMode::kRead));
    TopUp(needed, &cursor);
    if (stale) {
      Advance(entry, handle.data(), updates_, nullptr);
    } else {
      WriteValues(entry, handle.data());
    }
  }
  // The staged states' rests, read behind the backward pass: issued at the end of the forward
  // rather than with their masters, so that they do not queue before the next layers' masters,
  // which the forward waits for.
  if (moe == num_moe_layers_ - 1) IssueRests();
  // The update's states, read behind the rest of the forward and the backward pass: from the
  // last MoE layer on, or earlier while the step's experts so far fit the window (before that,
  // their pins would take the slots this forward's own fills need, and the reads be repeated).
  if (moe == num_moe_layers_ - 1 || activated_order_.size() <= window_) {
    TopUp(activated_order_, &update_cursor_);
  }
  // LOW: the next MoE layer's experts that would need a replay, the most active first.
  if (!options_.sparse_adam) {
    LookAhead(moe + 1, [this](size_t e) { return !activated_[e] && last_update_[e] < updates_; });
  }
  return Status::Ok();
}

Status ExpertStateStore::Update(double lr) {
  SY_RETURN_IF_ERROR(Settle());
  // The last step's writes, done behind this step's forward and backward.
  SY_RETURN_IF_ERROR(RetireCarried());
  IssueRests();  // a forward that did not reach the last MoE layer
  const auto start = Clock::now();
  ++updates_;
  lrs_.push_back(lr);
  // An expert replicated over data-parallel ranks gets the gradient summed over its replicas, so
  // it may have one here without rows: it is updated too, exactly as in memory.
  for (size_t e = 0; e < entries_.size(); ++e) {
    if (activated_[e]) continue;
    for (const ExpertPart& p : entries_[e].parts) {
      if (p.grad == nullptr) break;  // working set: not bound, so not computed
      if (std::any_of(p.grad, p.grad + p.n, [](float g) { return g != 0.0f; })) {
        activated_[e] = 1;
        activated_order_.push_back(e);
        break;
      }
    }
  }
  // The staged experts first (their states were read during the backward), while the window
  // reads ahead; then the cached and the prefetched ones (they could be evicted by the others'
  // reads), then the rest. The staged states' writes start at EndStep, after the cache's
  // write-backs are durable: the publishes those wait for (each an fdatasync) are slow with the
  // staged writes in flight.
  std::vector<size_t> order, staged;
  for (size_t e : activated_order_) (staged_slot_[e] >= 0 ? staged : order).push_back(e);
  if (prefetcher_) {
    std::stable_partition(order.begin(), order.end(), [this](size_t e) {
      return cache_->Contains(Key(e)) || hop_->Expected(Key(e).Packed());
    });
  }
  ReadAhead(order, 0);
  for (size_t entry : staged) SY_RETURN_IF_ERROR(UpdateStaged(entry, lr));
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t entry = order[i];
    SY_ASSIGN_OR_RETURN(storage::CacheHandle handle, AcquireEntry(entry));
    // Its master, when read alone at the forward, is verified by now (the load that used it) or
    // here (it was cached meanwhile).
    SY_RETURN_IF_ERROR(Withdraw(entry));
    ReadAhead(order, i + 1);
    Advance(entry, handle.data(), updates_ - 1, &lr);
    handle.Release();
    if (prefetcher_) cache_->Unprotect(Key(entry));
    // Write-behind: this step is done with it; its write overlaps the next experts' updates.
    cache_->WriteBack(Key(entry));
  }
  update_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  return Status::Ok();
}

Status ExpertStateStore::EndStep() {
  SY_RETURN_IF_ERROR(Settle());
  const auto start = Clock::now();
  // The staged states not updated (a skipped step) are verified and dropped; the updated ones'
  // writes stay in flight behind the next step's forward (the last step's are done by now).
  Status staged = RetireCarried();
  const Status current = RetireStaged([](const Staged& s) { return !s.updated; });
  if (staged.ok()) staged = current;
  for (Staged& s : staging_) s.carried = s.used;
  ReleasePrefetched();
  cache_->ClearProtected();
  // The masters read for a step that made no update (a skipped step) are verified now.
  for (size_t entry = 0; entry < entries_.size(); ++entry) (void)Withdraw(entry, /*later=*/true);
  SY_RETURN_IF_ERROR(VerifyWithdrawn());
  storage::ExpertKey failed;
  Status s = cache_->Step(&failed);
  end_step_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  // The step's staged states go to the store now, behind the next step's forward.
  for (Staged& st : staging_) {
    if (st.used && st.updated && !st.written.valid()) WriteStaged(st.entry);
  }
  SY_RETURN_IF_ERROR(staged);
  if (!s.ok()) return WriteBackFailed(failed, s);
  ++steps_;
  if (options_.lfu.decay_every > 0 && steps_ % options_.lfu.decay_every == 0) {
    for (double& a : activity_) a *= options_.lfu.beta;
  }
  // LOW: the next step's first MoE layer, its most active experts not cached.
  LookAhead(0, [](size_t) { return true; });
  return Status::Ok();
}

Status ExpertStateStore::Consolidate() {
  SY_RETURN_IF_ERROR(Settle());
  SY_RETURN_IF_ERROR(DrainStaging());
  SY_RETURN_IF_ERROR(VerifyWithdrawn());
  if (!options_.sparse_adam) {
    std::vector<size_t> stale;
    for (size_t e = 0; e < entries_.size(); ++e) {
      if (last_update_[e] < updates_) stale.push_back(e);
    }
    size_t cursor = 0;
    TopUp(stale, &cursor);
    for (size_t i = 0; i < stale.size(); ++i) {
      SY_ASSIGN_OR_RETURN(storage::CacheHandle handle, AcquireEntry(stale[i]));
      TopUp(stale, &cursor);
      Advance(stale[i], handle.data(), updates_, nullptr);
      handle.Release();
      cache_->WriteBack(Key(stale[i]));
    }
  }
  storage::ExpertKey failed;
  Status s = cache_->Flush(&failed);
  if (!s.ok()) return WriteBackFailed(failed, s);
  return Status::Ok();
}

Status ExpertStateStore::WriteBackFailed(storage::ExpertKey key, const Status& status) const {
  const size_t entry = EntryIndex(static_cast<int>(key.layer), static_cast<int>(key.expert));
  if (entry < entries_.size()) return Fail(entry, status);
  return Status(status.code(),
                "expert_store: write-back to " + options_.path + ": " + status.message());
}

Status ExpertStateStore::Export(size_t entry, std::vector<std::vector<float>>* values,
                                std::vector<std::vector<float>>* m,
                                std::vector<std::vector<float>>* v, int64_t* opt_step) {
  SY_CHECK_LT(entry, entries_.size()) << "entry";
  SY_RETURN_IF_ERROR(Settle());
  SY_RETURN_IF_ERROR(DrainStaging());
  SY_ASSIGN_OR_RETURN(storage::CacheHandle handle, AcquireEntry(entry, storage::AccessMode::kRead));
  const ExpertEntry& e = entries_[entry];
  const size_t n = numel_[entry];
  const float* master = reinterpret_cast<const float*>(handle.data().data());
  const float* sm = with_m_ ? master + n : nullptr;
  const float* sv = with_v_ ? master + n * (with_m_ ? 2 : 1) : nullptr;
  Meta meta;
  std::memcpy(
      &meta, handle.data().data() + n * sizeof(float) * (1 + (with_m_ ? 1 : 0) + (with_v_ ? 1 : 0)),
      sizeof(meta));
  m->assign(e.parts.size(), {});
  v->assign(e.parts.size(), {});
  if (values != nullptr) values->assign(e.parts.size(), {});
  size_t at = 0;
  for (size_t k = 0; k < e.parts.size(); ++k) {
    const size_t pn = e.parts[k].n;
    if (values != nullptr) (*values)[k].assign(master + at, master + at + pn);
    if (sm != nullptr) (*m)[k].assign(sm + at, sm + at + pn);
    if (sv != nullptr) (*v)[k].assign(sv + at, sv + at + pn);
    at += pn;
  }
  *opt_step = meta.opt_step;
  return Status::Ok();
}

void ExpertStateStore::FillState(size_t entry, const std::vector<std::vector<float>>* values,
                                 const std::vector<std::vector<float>>& m,
                                 const std::vector<std::vector<float>>& v, const Meta& meta,
                                 std::byte* state) const {
  const ExpertEntry& e = entries_[entry];
  const size_t n = numel_[entry];
  float* master = reinterpret_cast<float*>(state);
  float* sm = with_m_ ? master + n : nullptr;
  float* sv = with_v_ ? master + n * (with_m_ ? 2 : 1) : nullptr;
  size_t at = 0;
  for (size_t k = 0; k < e.parts.size(); ++k) {
    const size_t pn = e.parts[k].n;
    if (values != nullptr) {
      SY_CHECK_EQ((*values)[k].size(), pn) << e.name << ": value size";
      std::memcpy(master + at, (*values)[k].data(), pn * sizeof(float));
    } else {
      std::memcpy(master + at, e.parts[k].value, pn * sizeof(float));
    }
    if (sm != nullptr) {
      SY_CHECK_EQ(m[k].size(), pn) << e.name << ": m size";
      std::memcpy(sm + at, m[k].data(), pn * sizeof(float));
    }
    if (sv != nullptr) {
      SY_CHECK_EQ(v[k].size(), pn) << e.name << ": v size";
      std::memcpy(sv + at, v[k].data(), pn * sizeof(float));
    }
    at += pn;
  }
  std::memcpy(state + n * sizeof(float) * (1 + (with_m_ ? 1 : 0) + (with_v_ ? 1 : 0)), &meta,
              sizeof(meta));
}

Status ExpertStateStore::Import(size_t entry, const std::vector<std::vector<float>>* values,
                                const std::vector<std::vector<float>>& m,
                                const std::vector<std::vector<float>>& v, int64_t opt_step,
                                int64_t updates) {
  SY_CHECK_LT(entry, entries_.size()) << "entry";
  const ExpertEntry& e = entries_[entry];
  SY_CHECK(values != nullptr || options_.resident) << e.name << ": Import without values";
  SY_CHECK(values == nullptr || values->size() == e.parts.size()) << e.name << ": value parts";
  SY_CHECK_EQ(m.size(), e.parts.size()) << e.name << ": m parts";
  SY_CHECK_EQ(v.size(), e.parts.size()) << e.name << ": v parts";
  const Meta meta{opt_step, updates};
  if (restoring_) {
    // Nothing is cached yet: the state goes straight to the store, without reading the old one.
    // A few writes are in flight at once, so that they share the store's durable publishes.
    SY_RETURN_IF_ERROR(FinishImports(kInitialBatch - 1));
    DirectImport& write = imports_.emplace_back();
    write.entry = entry;
    write.state.assign(cache_->payload_bytes(), std::byte{0});
    FillState(entry, values, m, v, meta, write.state.data());
    write.written = store_->Write(Key(entry), storage::ExtentKind::kTrainState, write.state);
    if (unwritten_[entry]) --unwritten_count_;
    unwritten_[entry] = 0;
  } else {
    SY_RETURN_IF_ERROR(DrainStaging());
    SY_ASSIGN_OR_RETURN(storage::CacheHandle handle, AcquireEntry(entry));
    FillState(entry, values, m, v, meta, handle.data().data());
  }
  last_update_[entry] = updates;
  updates_ = lr_base_ = updates;
  lrs_.clear();
  return Status::Ok();
}

size_t ExpertStateStore::cache_slots() const { return cache_->num_slots(); }
size_t ExpertStateStore::extent_bytes() const { return cache_->slot_bytes(); }
const std::string& ExpertStateStore::path() const { return options_.path; }

ExpertStoreStats ExpertStateStore::stats() const {
  const storage::CacheStats c = cache_->stats();
  const storage::StoreStats s = store_->stats();
  ExpertStoreStats out;
  // The cache counts an Acquire of a prefetched entry as a hit; here it is a store read.
  // A master read alone at the forward (ReadMasters) is a store read for an access too.
  // So is a staged state kept from the last step, a hit.
  const uint64_t accesses = c.hits + c.misses + master_reads_ + staged_hits_;
  out.misses = std::min(accesses, c.misses + c.prefetches_started + master_reads_);
  out.hits = accesses - out.misses;
  out.prefetched = c.prefetches_started;
  out.evictions = c.evictions;
  out.bytes_read = s.bytes_read;
  out.bytes_written = s.bytes_written;
  out.replayed_updates = replayed_;
  out.wait_seconds = wait_seconds_;
  // The forward's master reads (ReadMasters) are waited for: all their time is exposed.
  // The staged reads and writes are timed apart from the cache's and added (their overlap with
  // the cache's counts twice).
  out.read_seconds =
      static_cast<double>(c.read_busy_ns) * 1e-9 + master_read_seconds_ + staged_reads_->seconds();
  out.read_exposed_seconds =
      static_cast<double>(c.read_exposed_ns) * 1e-9 + master_read_seconds_ + staged_wait_seconds_;
  out.write_seconds = static_cast<double>(c.write_busy_ns) * 1e-9 + staged_writes_->seconds();
  out.staged = staged_;
  out.staged_ready = staged_ready_;
  out.staged_reads_landed = staged_reads_landed_->load(std::memory_order_acquire);
  out.update_seconds = update_seconds_;
  out.end_step_seconds = end_step_seconds_;
  out.prefetch_unused = prefetch_unused_;
  out.prefetch_failed = prefetcher_ ? prefetcher_->stats().failed : 0;
  return out;
}

}  // namespace sy::launcher
