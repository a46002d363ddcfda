#include "parallel/zero3.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/core/mutex.h"
#include "runtime/model/host_transfer.h"

namespace sy {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Whole pages of host memory that one owner may drop and re-commit (the reduce-scatter staging).
struct PageRange {
  void* data = nullptr;
  size_t bytes = 0;
};

void ReleasePages(const PageRange& range) {
  if (range.bytes == 0) return;
  // Private anonymous memory: the pages are dropped at once and read back as zeros when touched.
  SY_CHECK(madvise(range.data, range.bytes, MADV_DONTNEED) == 0)
      << "madvise(MADV_DONTNEED) of " << range.bytes << " bytes: " << std::strerror(errno);
}

// The communication thread: runs posted tasks one at a time, in the order they were posted.
class TaskThread {
 public:
  TaskThread() : thread_([this] { Run(); }) {}
  ~TaskThread() {
    {
      MutexLock lock(&mutex_);
      stop_ = true;
    }
    cv_.NotifyAll();
    thread_.join();  // runs what is queued first
  }
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  std::future<Status> Post(std::function<Status()> task) SY_EXCLUDES(mutex_) {
    std::packaged_task<Status()> packaged(std::move(task));
    std::future<Status> done = packaged.get_future();
    {
      MutexLock lock(&mutex_);
      queue_.push_back(std::move(packaged));
    }
    cv_.NotifyOne();
    return done;
  }

 private:
  void Run() SY_EXCLUDES(mutex_) {
    for (;;) {
      std::packaged_task<Status()> task;
      {
        MutexLock lock(&mutex_);
        while (!stop_ && queue_.empty()) cv_.Wait(&mutex_);
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  Mutex mutex_;
  CondVar cv_;
  std::deque<std::packaged_task<Status()>> queue_ SY_GUARDED_BY(mutex_);
  bool stop_ SY_GUARDED_BY(mutex_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

// One dense parameter's place in its unit's flat buffer.
struct Slot {
  Parameter* param = nullptr;
  int64_t offset = 0;  // first element in the unit
  int64_t numel = 0;
};

enum class UnitState : uint8_t { kReleased, kGathering, kPresent };

struct Unit {
  std::vector<Slot> slots;
  // The memory of the full copies (Backend::IsReleasable), each buffer once.
  std::vector<const Buffer*> value_buffers, grad_buffers;
  int64_t value_bytes = 0, grad_bytes = 0;
  int64_t size = 0;                       // D_u
  int64_t padded = 0;                     // P_u, a multiple of the group size
  int64_t shard = 0;                      // S_u = P_u / N
  std::vector<float> master, grad, m, v;  // S_u each (m, v empty when not needed)
  // Mixed precision: the 16-bit dtype of the unit's 16-bit values, and the masters' rounding to
  // it, S_u values of 2 bytes (what the all-gathers move for those parameters); f32 and empty
  // when every value of the unit is f32.
  DType compute_dtype = DType::kF32;
  std::vector<uint16_t> compute;
  int64_t step = 0;
  // Caller thread only.
  UnitState state = UnitState::kReleased;
  std::future<Status> gather;
};

// Whether a unit's full copies of values and gradients hold pages (Zero3::Impl::committed_copies).
struct CommittedCopies {
  bool values = false;
  bool grads = false;
};

// The part of `rank`'s shard [rank * shard, (rank + 1) * shard) that lies in `slot`.
struct ShardPart {
  int64_t in_param = 0;  // first element in the parameter
  int64_t in_shard = 0;  // first element in the shard
  int64_t count = 0;     // 0: the shard and the parameter do not meet
};

ShardPart PartOf(const Slot& slot, int64_t shard, int rank) {
  const int64_t lo = static_cast<int64_t>(rank) * shard;
  const int64_t b = std::max(lo, slot.offset), e = std::min(lo + shard, slot.offset + slot.numel);
  if (b >= e) return ShardPart{};
  return ShardPart{b - slot.offset, b - lo, e - b};
}

// Calls fn(slot, part) for every parameter of `unit` that `rank`'s shard meets.
template <typename Fn>
void ForEachShardPart(const Unit& unit, int rank, Fn&& fn) {
  for (const Slot& s : unit.slots) {
    const ShardPart part = PartOf(s, unit.shard, rank);
    if (part.count > 0) fn(s, part);
  }
}

}  // namespace

struct Zero3::Impl {
  MoeModel* model = nullptr;
  Backend* backend = nullptr;
  std::unique_ptr<Communicator> comm;  // private: used by the communication thread only
  Zero3Options options;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<Unit> units;
  float prescale = 1.0f;
  PageRange staging;  // mmap'd, 4 * max P_u bytes rounded to pages
  // On a device (not host memory): the communication thread's stream for the copies between the
  // staging and the full copies.
  std::unique_ptr<Stream> copy_stream;
  std::vector<std::future<Status>> pending;  // reduce-scatters in flight (caller thread)

  mutable Mutex mutex;
  std::vector<CommittedCopies> committed_copies SY_GUARDED_BY(mutex);  // per unit
  int64_t committed SY_GUARDED_BY(mutex) = 0;
  int64_t peak_committed SY_GUARDED_BY(mutex) = 0;
  int gathered SY_GUARDED_BY(mutex) = 0;
  int peak_gathered SY_GUARDED_BY(mutex) = 0;

  std::unique_ptr<TaskThread> thread;

  ~Impl() {
    thread.reset();  // finishes queued work before the staging memory goes
    if (staging.data != nullptr) munmap(staging.data, staging.bytes);
  }

  int rank() const { return comm->rank(); }
  int world() const { return comm->size(); }

  // ---- accounting (either thread) ----
  void Account(const Unit& u, bool grads, bool commit) SY_EXCLUDES(mutex) {
    const size_t index = static_cast<size_t>(&u - units.data());
    const int64_t bytes = grads ? u.grad_bytes : u.value_bytes;
    const int units_delta = grads ? 0 : 1;
    SY_CHECK_LT(index, units.size()) << "Account of a unit that is not this model's";
    MutexLock lock(&mutex);
    CommittedCopies& copies = committed_copies[index];
    bool& flag = grads ? copies.grads : copies.values;
    if (flag == commit) return;
    flag = commit;
    committed += commit ? bytes : -bytes;
    gathered += commit ? units_delta : -units_delta;
    peak_committed = std::max(peak_committed, committed);
    peak_gathered = std::max(peak_gathered, gathered);
  }
  // Backing for the full copies (a no-op on cpu, where the first write commits the pages).
  Status Restore(const std::vector<const Buffer*>& buffers) {
    for (const Buffer* b : buffers) SY_RETURN_IF_ERROR(backend->RestoreBacking(*b));
    return Status::Ok();
  }
  Status CommitValues(Unit& u) {
    SY_RETURN_IF_ERROR(Restore(u.value_buffers));
    Account(u, /*grads=*/false, /*commit=*/true);
    return Status::Ok();
  }
  Status CommitGrads(Unit& u) {
    SY_RETURN_IF_ERROR(Restore(u.grad_buffers));
    Account(u, /*grads=*/true, /*commit=*/true);
    return Status::Ok();
  }
  void ReleaseValues(Unit& u) {
    for (const Buffer* b : u.value_buffers) backend->ReleaseBacking(*b);
    Account(u, /*grads=*/false, /*commit=*/false);
  }
  void ReleaseGrads(Unit& u) {
    for (const Buffer* b : u.grad_buffers) backend->ReleaseBacking(*b);
    Account(u, /*grads=*/true, /*commit=*/false);
  }
  bool on_device() const { return copy_stream != nullptr; }
  // A host tensor viewing `count` values of `dtype` of the staging from the unit's element
  // `offset` (at 4 bytes an element, whatever the dtype, so the slots never overlap).
  Tensor StagingView(int64_t offset, int64_t count, DType dtype = DType::kF32) const {
    return Tensor::Wrap(static_cast<char*>(staging.data) + offset * sizeof(float), dtype,
                        Shape({count}));
  }
  // The 16-bit copy of u's shard, rounded from its master.
  static void RoundCompute(Unit& u) {
    if (u.compute.empty()) return;
    SY_CHECK_OK(ConvertBuffer(u.master.data(), DType::kF32, u.compute.data(), u.compute_dtype,
                              u.master.size()));
  }

  // ---- communication-thread tasks ----
  // On a device each parameter is gathered into the staging at its offset in the unit, and copied
  // up from there.
  Status GatherUnit(Unit& u) {
    SY_RETURN_IF_ERROR(CommitValues(u));
    const int n = world();
    std::vector<size_t> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
    for (const Slot& s : u.slots) {
      for (int r = 0; r < n; ++r) {
        const ShardPart part = PartOf(s, u.shard, r);
        counts[static_cast<size_t>(r)] = static_cast<size_t>(part.count);
        displs[static_cast<size_t>(r)] = static_cast<size_t>(part.in_param);
      }
      // A 16-bit value gathers the masters' 16-bit rounding: half the bytes.
      const DType dtype = s.param->value.dtype();
      const int64_t at = PartOf(s, u.shard, rank()).in_shard;
      const void* send = dtype == DType::kF32 ? static_cast<const void*>(u.master.data() + at)
                                              : static_cast<const void*>(u.compute.data() + at);
      void* full =
          on_device() ? StagingView(s.offset, s.numel, dtype).data() : s.param->value.data();
      SY_RETURN_IF_ERROR(
          comm->AllGatherV(send, counts[static_cast<size_t>(rank())], full, counts, displs, dtype));
      if (on_device()) {
        const Tensor dst = s.param->value.Reshape(Shape({s.numel}));
        backend->CopyAsync(StagingView(s.offset, s.numel, dtype), dst, *copy_stream);
      }
    }
    if (on_device()) backend->SynchronizeStream(*copy_stream);
    return Status::Ok();
  }

  Status ReduceScatterUnit(Unit& u, float scale) {
    float* flat = static_cast<float*>(staging.data);
    if (on_device()) {
      for (const Slot& s : u.slots) {
        backend->CopyAsync(s.param->grad.Reshape(Shape({s.numel})), StagingView(s.offset, s.numel),
                           *copy_stream);
      }
      backend->SynchronizeStream(*copy_stream);
    }
    for (const Slot& s : u.slots) {
      const float* g = on_device() ? flat + s.offset : s.param->grad.data<float>();
      float* dst = flat + s.offset;
      for (int64_t i = 0; i < s.numel; ++i) dst[i] = scale * g[i];
    }
    std::fill(flat + u.size, flat + u.padded, 0.0f);
    // The owned shard joins the sum through this rank's own block, so the reduce-scatter can
    // write the accumulated result straight into it.
    float* mine = flat + static_cast<int64_t>(rank()) * u.shard;
    for (int64_t i = 0; i < u.shard; ++i) mine[i] += u.grad[static_cast<size_t>(i)];
    Status s = comm->ReduceScatter(flat, u.grad.data(), static_cast<size_t>(u.shard), DType::kF32,
                                   Reduction::kSum);
    ReleasePages(staging);
    ReleaseGrads(u);
    ReleaseValues(u);
    return s;
  }

  // ---- caller thread ----
  void StartGather(Unit& u) {
    if (u.state != UnitState::kReleased) return;
    u.gather = thread->Post([this, &u] { return GatherUnit(u); });
    u.state = UnitState::kGathering;
  }
  Status AwaitGather(Unit& u) {
    if (u.state != UnitState::kGathering) return Status::Ok();
    u.state = UnitState::kPresent;
    return u.gather.get();
  }
  Status Drain() {
    Status first = Status::Ok();
    for (std::future<Status>& f : pending) {
      Status s = f.get();
      if (first.ok() && !s.ok()) first = s;
    }
    pending.clear();
    return first;
  }
  // Waits for everything in flight: afterwards the communication thread is idle.
  Status Quiesce() {
    Status first = Drain();
    for (Unit& u : units) {
      Status s = AwaitGather(u);
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }
  Unit& At(int unit) {
    SY_CHECK(unit >= 0 && unit < static_cast<int>(units.size()))
        << "ZeRO-3: unit " << unit << " outside [0, " << units.size() << ")";
    return units[static_cast<size_t>(unit)];
  }
  Status Gather(int unit, int prefetch_unit) {
    Unit& u = At(unit);
    StartGather(u);
    if (options.prefetch && prefetch_unit >= 0 && prefetch_unit < static_cast<int>(units.size())) {
      StartGather(units[static_cast<size_t>(prefetch_unit)]);
    }
    return AwaitGather(u);
  }
  void ReleaseAll() {
    for (Unit& u : units) {
      if (u.state == UnitState::kPresent) ReleaseValues(u);
      u.state = UnitState::kReleased;
    }
  }
  // This rank's shard of every unit from the model's full values (caller thread).
  Status TakeShards() {
    for (Unit& u : units) {
      std::fill(u.master.begin(), u.master.end(), 0.0f);
      for (const Slot& s : u.slots) {
        const ShardPart part = PartOf(s, u.shard, rank());
        if (part.count == 0) continue;
        SY_ASSIGN_OR_RETURN(std::vector<float> values, DownloadF32(*backend, s.param->value));
        std::copy(values.begin() + part.in_param, values.begin() + part.in_param + part.count,
                  u.master.begin() + part.in_shard);
      }
      RoundCompute(u);
    }
    return Status::Ok();
  }
  // The full padded unit assembled from every rank's `shard` (m or v).
  Status AllGatherState(const Unit& u, const std::vector<float>& shard, std::vector<float>& full) {
    full.assign(static_cast<size_t>(u.padded), 0.0f);
    return comm->AllGather(shard.data(), static_cast<size_t>(u.shard), full.data(), DType::kF32);
  }
};

Zero3::Zero3(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Zero3::~Zero3() {
  if (!impl_) return;
  const Status s = impl_->Quiesce();
  if (!s.ok())
    std::fprintf(stderr, "ZeRO-3: pending work failed at shutdown: %s\n", s.ToString().c_str());
  impl_->model->set_layer_hooks(nullptr);
}

Result<std::unique_ptr<Zero3>> Zero3::Create(MoeModel& model, Communicator& comm,
                                             const Zero3Options& options, ThreadPool* pool) {
  if (!comm.host_buffers()) {
    return InvalidArgumentError("ZeRO-3 needs a host-memory communicator (mpi or local), got '" +
                                std::string(comm.kind()) + "'");
  }
  Backend& backend = model.backend();
  if (!model.options().with_grad) {
    return FailedPreconditionError("ZeRO-3 needs a training model (ModelOptions::with_grad)");
  }
  if (model.config().tie_word_embeddings) {
    return FailedPreconditionError(
        "ZeRO-3 does not support tie_word_embeddings: the table would be read by the embedding "
        "and the head units; untie it (tie_word_embeddings = false)");
  }
  auto impl = std::make_unique<Impl>();
  impl->model = &model;
  impl->backend = &backend;
  impl->options = options;
  SY_ASSIGN_OR_RETURN(impl->optimizer, CreateOptimizer(options.optimizer, pool));

  // Units and the pages each may release. A Buffer may back several dense tensors of one unit,
  // never tensors of two units or a non-dense one.
  impl->units.resize(static_cast<size_t>(model.num_units()));
  {
    MutexLock lock(&impl->mutex);
    impl->committed_copies.resize(impl->units.size());
  }
  std::map<const Buffer*, int> buffer_unit;  // -1: used by a non-dense parameter
  const size_t page = PageSize();
  auto claim = [&](const Tensor& t, int unit, std::vector<const Buffer*>* buffers, int64_t* bytes,
                   const std::string& what) -> Status {
    const Buffer* b = t.buffer().get();
    auto [it, fresh] = buffer_unit.emplace(b, unit);
    if (!fresh) {
      // Expert tensors are views of one stacked tensor per layer; that is fine among themselves.
      if (it->second != unit) {
        return FailedPreconditionError("ZeRO-3: " + what +
                                       " shares its memory with a parameter of another unit");
      }
      return Status::Ok();
    }
    if (unit < 0) return Status::Ok();
    if (!backend.IsReleasable(*b)) {
      return FailedPreconditionError("ZeRO-3: the memory of " + what + " on " + backend.name() +
                                     " cannot be released between uses (build the model with "
                                     "ModelOptions::releasable_parameters)");
    }
    buffers->push_back(b);
    *bytes += static_cast<int64_t>(b->bytes());
    return Status::Ok();
  };
  for (Parameter& p : model.parameters()) {
    if (IsDense(p)) continue;
    SY_RETURN_IF_ERROR(claim(p.value, -1, nullptr, nullptr, p.name));
    if (p.grad.defined()) SY_RETURN_IF_ERROR(claim(p.grad, -1, nullptr, nullptr, p.name));
  }
  for (Parameter& p : model.parameters()) {
    if (!IsDense(p)) continue;
    const DType dtype = p.value.dtype();
    const bool plain = dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
    if (!plain || !p.value.is_contiguous() || !p.grad.defined() || p.grad.dtype() != DType::kF32 ||
        p.value.buffer() == nullptr || p.grad.buffer() == nullptr) {
      return FailedPreconditionError("ZeRO-3: dense parameter " + p.name +
                                     " must be a contiguous f32, bf16 or f16 tensor with an f32 "
                                     "gradient, got " +
                                     p.value.ToString());
    }
    const int unit = model.UnitOf(p);
    Unit& u = impl->units[static_cast<size_t>(unit)];
    if (dtype != DType::kF32) {
      if (u.compute_dtype != DType::kF32 && u.compute_dtype != dtype) {
        return FailedPreconditionError("ZeRO-3: dense parameter " + p.name + " is " +
                                       std::string(DTypeName(dtype)) + " beside " +
                                       std::string(DTypeName(u.compute_dtype)) +
                                       " parameters of its unit; use one 16-bit dtype");
      }
      u.compute_dtype = dtype;
    }
    SY_RETURN_IF_ERROR(claim(p.value, unit, &u.value_buffers, &u.value_bytes, p.name));
    SY_RETURN_IF_ERROR(claim(p.grad, unit, &u.grad_buffers, &u.grad_bytes, p.name + " (grad)"));
    u.slots.push_back(Slot{&p, u.size, p.value.numel()});
    u.size += p.value.numel();
  }

  SY_ASSIGN_OR_RETURN(impl->comm, comm.Split(0, comm.rank()));
  const int n = impl->world();
  // Every rank must shard the same model: compare the unit sizes.
  std::vector<int64_t> sizes;
  for (const Unit& u : impl->units) sizes.push_back(u.size);
  std::vector<int64_t> all(sizes.size() * static_cast<size_t>(n));
  SY_RETURN_IF_ERROR(impl->comm->AllGather(sizes.data(), sizes.size(), all.data(), DType::kI64));
  for (int r = 0; r < n; ++r) {
    if (!std::equal(sizes.begin(), sizes.end(), all.begin() + r * sizes.size())) {
      return InvalidArgumentError("ZeRO-3: rank " + std::to_string(r) +
                                  " has other dense parameter sizes than rank " +
                                  std::to_string(impl->rank()) + "; build the same model");
    }
  }

  int64_t max_padded = 0;
  const bool need_m = impl->optimizer->NeedsFirstMoment();
  const bool need_v = impl->optimizer->NeedsSecondMoment();
  for (Unit& u : impl->units) {
    u.padded = (u.size + n - 1) / n * n;
    u.shard = u.padded / n;
    max_padded = std::max(max_padded, u.padded);
    u.master.assign(static_cast<size_t>(u.shard), 0.0f);
    if (u.compute_dtype != DType::kF32) u.compute.assign(static_cast<size_t>(u.shard), 0);
    u.grad.assign(static_cast<size_t>(u.shard), 0.0f);
    if (need_m) u.m.assign(static_cast<size_t>(u.shard), 0.0f);
    if (need_v) u.v.assign(static_cast<size_t>(u.shard), 0.0f);
  }
  const size_t staging_bytes =
      std::max(page, (static_cast<size_t>(max_padded) * sizeof(float) + page - 1) / page * page);
  void* staging = mmap(nullptr, staging_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (staging == MAP_FAILED) {
    return ResourceExhaustedError("ZeRO-3: mmap of " + std::to_string(staging_bytes) +
                                  " bytes of staging: " + std::strerror(errno));
  }
  impl->staging = PageRange{staging, staging_bytes};
  if (!backend.device().is_host()) impl->copy_stream = backend.CreateStream();
  impl->thread = std::make_unique<TaskThread>();

  backend.Synchronize();
  SY_RETURN_IF_ERROR(impl->TakeShards());
  for (Unit& u : impl->units) {
    // The model allocated and initialised them: their memory is committed but not counted.
    for (const Buffer* b : u.value_buffers) backend.ReleaseBacking(*b);
    for (const Buffer* b : u.grad_buffers) backend.ReleaseBacking(*b);
  }
  std::unique_ptr<Zero3> zero(new Zero3(std::move(impl)));
  model.set_layer_hooks(zero.get());
  return zero;
}

Status Zero3::BeforeForward(int unit) { return impl_->Gather(unit, unit + 1); }

Status Zero3::AfterForward(int unit) {
  Unit& u = impl_->At(unit);
  SY_CHECK(u.state == UnitState::kPresent)
      << "ZeRO-3: AfterForward(" << unit << ") without BeforeForward";
  impl_->backend->Synchronize();
  impl_->ReleaseValues(u);
  u.state = UnitState::kReleased;
  return Status::Ok();
}

Status Zero3::BeforeBackward(int unit) {
  SY_RETURN_IF_ERROR(impl_->Gather(unit, unit - 1));
  Unit& u = impl_->At(unit);
  SY_RETURN_IF_ERROR(impl_->CommitGrads(u));
  for (const Slot& s : u.slots) impl_->backend->Fill(s.param->grad, 0.0f);
  return Status::Ok();
}

Status Zero3::AfterBackward(int unit) {
  Unit& u = impl_->At(unit);
  SY_CHECK(u.state == UnitState::kPresent)
      << "ZeRO-3: AfterBackward(" << unit << ") without BeforeBackward";
  impl_->backend->Synchronize();
  u.state = UnitState::kReleased;  // the reduce-scatter releases the pages
  const float scale = impl_->prescale;
  Impl* impl = impl_.get();
  impl_->pending.push_back(
      impl_->thread->Post([impl, &u, scale] { return impl->ReduceScatterUnit(u, scale); }));
  if (!impl_->options.prefetch || unit == 0) return impl_->Drain();
  return Status::Ok();
}

void Zero3::set_gradient_prescale(float factor) { impl_->prescale = factor; }

void Zero3::ZeroGrads() {
  SY_CHECK_OK(impl_->Quiesce());
  for (Unit& u : impl_->units) std::fill(u.grad.begin(), u.grad.end(), 0.0f);
  for (Parameter& p : impl_->model->parameters()) {
    if (!IsDense(p) && p.grad.defined()) impl_->backend->Fill(p.grad, 0.0f);
  }
}

double Zero3::LocalGradSquaredNorm() const {
  SY_CHECK_OK(impl_->Quiesce());
  double sum = 0.0;
  for (const Unit& u : impl_->units) {
    for (float g : u.grad) sum += static_cast<double>(g) * static_cast<double>(g);
  }
  return sum;
}

void Zero3::ScaleGradients(float factor) {
  SY_CHECK_OK(impl_->Quiesce());
  for (Unit& u : impl_->units) {
    for (float& g : u.grad) g *= factor;
  }
}

Status Zero3::Step(double lr) {
  SY_RETURN_IF_ERROR(impl_->Quiesce());
  impl_->ReleaseAll();
  std::vector<ParamGroup> groups;
  for (Unit& u : impl_->units) {
    if (u.shard == 0) continue;
    ParamGroup g;
    g.param = u.master.data();
    g.grad = u.grad.data();
    g.m = u.m.empty() ? nullptr : u.m.data();
    g.v = u.v.empty() ? nullptr : u.v.data();
    g.n = static_cast<size_t>(u.shard);
    g.step = &u.step;
    // Mixed precision: the 16-bit copy the next gathers move, rounded in the same pass.
    if (!u.compute.empty()) g.compute = {u.compute.data(), u.compute_dtype};
    groups.push_back(g);
  }
  impl_->optimizer->Step(groups, lr);
  return Status::Ok();
}

Status Zero3::LoadMasters(const std::function<std::vector<float>(const Parameter&)>& full_value) {
  SY_RETURN_IF_ERROR(impl_->Quiesce());
  for (Unit& u : impl_->units) {
    std::fill(u.master.begin(), u.master.end(), 0.0f);
    for (const Slot& s : u.slots) {
      const ShardPart part = PartOf(s, u.shard, impl_->rank());
      if (part.count == 0) continue;
      const std::vector<float> values = full_value(*s.param);
      if (static_cast<int64_t>(values.size()) != s.numel) {
        return InvalidArgumentError("ZeRO-3: " + std::to_string(values.size()) +
                                    " master values for " + s.param->name + " of " +
                                    std::to_string(s.numel));
      }
      std::copy(values.begin() + part.in_param, values.begin() + part.in_param + part.count,
                u.master.begin() + part.in_shard);
    }
    Impl::RoundCompute(u);
    if (u.state == UnitState::kPresent) impl_->ReleaseValues(u);
    u.state = UnitState::kReleased;
  }
  return Status::Ok();
}

Status Zero3::GatherFullParameters() {
  SY_RETURN_IF_ERROR(impl_->Quiesce());
  for (Unit& u : impl_->units) impl_->StartGather(u);
  return impl_->Quiesce();
}

void Zero3::ReleaseFullParameters() {
  SY_CHECK_OK(impl_->Quiesce());
  impl_->ReleaseAll();
}

Status Zero3::LoadFullParameters() {
  SY_RETURN_IF_ERROR(impl_->Quiesce());
  impl_->backend->Synchronize();
  SY_RETURN_IF_ERROR(impl_->TakeShards());
  for (Unit& u : impl_->units) {
    impl_->ReleaseValues(u);
    u.state = UnitState::kReleased;
  }
  return Status::Ok();
}

Result<std::vector<DenseOptimizerState>> Zero3::GatherOptimizerState() {
  SY_RETURN_IF_ERROR(impl_->Quiesce());
  std::vector<DenseOptimizerState> states;
  Impl* impl = impl_.get();
  std::future<Status> done = impl_->thread->Post([impl, &states]() -> Status {
    std::vector<float> full_m, full_v, full_master;
    for (Unit& u : impl->units) {
      if (!u.m.empty()) SY_RETURN_IF_ERROR(impl->AllGatherState(u, u.m, full_m));
      if (!u.v.empty()) SY_RETURN_IF_ERROR(impl->AllGatherState(u, u.v, full_v));
      SY_RETURN_IF_ERROR(impl->AllGatherState(u, u.master, full_master));
      for (const Slot& s : u.slots) {
        DenseOptimizerState st;
        st.name = s.param->name;
        st.step = u.step;
        st.master.assign(full_master.begin() + s.offset, full_master.begin() + s.offset + s.numel);
        if (!u.m.empty())
          st.m.assign(full_m.begin() + s.offset, full_m.begin() + s.offset + s.numel);
        if (!u.v.empty())
          st.v.assign(full_v.begin() + s.offset, full_v.begin() + s.offset + s.numel);
        states.push_back(std::move(st));
      }
    }
    return Status::Ok();
  });
  SY_RETURN_IF_ERROR(done.get());
  return states;
}

Status Zero3::LoadOptimizerState(std::span<const DenseOptimizerState> states) {
  SY_RETURN_IF_ERROR(impl_->Quiesce());
  std::unordered_map<std::string_view, const DenseOptimizerState*> by_name;
  for (const DenseOptimizerState& s : states) by_name.emplace(s.name, &s);
  // Validate everything before changing anything.
  for (const Unit& u : impl_->units) {
    const DenseOptimizerState* first = nullptr;
    for (const Slot& s : u.slots) {
      auto it = by_name.find(s.param->name);
      if (it == by_name.end()) {
        return InvalidArgumentError("ZeRO-3: no optimizer state for dense parameter " +
                                    s.param->name);
      }
      const DenseOptimizerState& st = *it->second;
      const auto want = static_cast<size_t>(s.numel);
      if ((u.m.empty() ? !st.m.empty() : st.m.size() != want) ||
          (u.v.empty() ? !st.v.empty() : st.v.size() != want)) {
        return InvalidArgumentError("ZeRO-3: optimizer state of " + s.param->name + " has m/v of " +
                                    std::to_string(st.m.size()) + "/" +
                                    std::to_string(st.v.size()) + " elements, want " +
                                    (u.m.empty() ? "0" : std::to_string(want)) + "/" +
                                    (u.v.empty() ? "0" : std::to_string(want)));
      }
      if (first != nullptr && st.step != first->step) {
        return InvalidArgumentError("ZeRO-3: optimizer steps differ within one unit (" +
                                    first->name + ": " + std::to_string(first->step) + ", " +
                                    st.name + ": " + std::to_string(st.step) + ")");
      }
      if (first == nullptr) first = &st;
    }
  }
  for (Unit& u : impl_->units) {
    std::fill(u.m.begin(), u.m.end(), 0.0f);
    std::fill(u.v.begin(), u.v.end(), 0.0f);
    if (!u.slots.empty()) u.step = by_name.at(u.slots.front().param->name)->step;
    ForEachShardPart(u, impl_->rank(), [&](const Slot& s, const ShardPart& part) {
      const DenseOptimizerState& st = *by_name.at(s.param->name);
      auto take = [&](const std::vector<float>& full, std::vector<float>& shard) {
        if (shard.empty()) return;
        std::copy(full.begin() + part.in_param, full.begin() + part.in_param + part.count,
                  shard.begin() + part.in_shard);
      };
      take(st.m, u.m);
      take(st.v, u.v);
    });
  }
  return Status::Ok();
}

Zero3MemoryReport Zero3::memory() const {
  Zero3MemoryReport r;
  r.rank = impl_->rank();
  r.world = impl_->world();
  r.num_units = static_cast<int>(impl_->units.size());
  for (const Unit& u : impl_->units) {
    r.dense_elements += u.size;
    r.padded_elements += u.padded;
    r.shard_elements += u.shard;
    r.shard_bytes += static_cast<int64_t>(
        (u.master.size() + u.grad.size() + u.m.size() + u.v.size()) * sizeof(float) +
        u.compute.size() * sizeof(uint16_t));
    r.full_copy_bytes += u.value_bytes + u.grad_bytes;
  }
  r.staging_bytes = static_cast<int64_t>(impl_->staging.bytes);
  MutexLock lock(&impl_->mutex);
  r.committed_bytes = impl_->committed;
  r.peak_committed_bytes = impl_->peak_committed;
  r.gathered_units = impl_->gathered;
  r.peak_gathered_units = impl_->peak_gathered;
  return r;
}

void Zero3::ResetPeakMemory() {
  MutexLock lock(&impl_->mutex);
  impl_->peak_committed = impl_->committed;
  impl_->peak_gathered = impl_->gathered;
}

std::string FormatZero3Memory(const Zero3MemoryReport& r) {
  auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  char buf[768];
  std::snprintf(
      buf, sizeof(buf),
      "ZeRO-3 rank %d/%d: %lld dense parameters in %d units (%lld with padding), %lld owned\n"
      "  shards (master + m + v + grad, and a 16-bit copy in mixed precision): %.3f MiB = %.2f B "
      "x D/N\n"
      "  full copies committed: %.3f MiB now, %.3f MiB peak, of %.3f MiB for the whole model;"
      " %d units gathered now, %d peak\n"
      "  reduce-scatter staging: %.3f MiB while a reduce-scatter runs",
      r.rank, r.world, static_cast<long long>(r.dense_elements), r.num_units,
      static_cast<long long>(r.padded_elements), static_cast<long long>(r.shard_elements),
      mib(r.shard_bytes),
      r.dense_elements > 0
          ? static_cast<double>(r.shard_bytes) /
                (static_cast<double>(r.dense_elements) / static_cast<double>(r.world))
          : 0.0,
      mib(r.committed_bytes), mib(r.peak_committed_bytes), mib(r.full_copy_bytes), r.gathered_units,
      r.peak_gathered_units, mib(r.staging_bytes));
  return buf;
}

}  // namespace sy
