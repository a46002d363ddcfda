#include "parallel/expert_parallel_compute.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy {

int ExpertOwner(int global_expert, int num_experts, int ep_size) {
  SY_CHECK(ep_size > 0 && num_experts % ep_size == 0)
      << num_experts << " experts over an EP group of " << ep_size;
  SY_CHECK(global_expert >= 0 && global_expert < num_experts)
      << "expert " << global_expert << " of " << num_experts;
  return global_expert / (num_experts / ep_size);
}

Result<ExpertParallelGroups> MakeExpertParallelGroups(Communicator& world, int ep_size) {
  const int w = world.size();
  if (ep_size <= 0 || w % ep_size != 0) {
    return InvalidArgumentError("expert parallelism: ep_size " + std::to_string(ep_size) +
                                " does not divide the world of " + std::to_string(w) + " ranks");
  }
  const int me = world.rank();
  ExpertParallelGroups groups;
  SY_ASSIGN_OR_RETURN(groups.ep, world.Split(me / ep_size, me));
  SY_ASSIGN_OR_RETURN(groups.expert_dp, world.Split(me % ep_size, me));
  return groups;
}

Status AllReduceExpertGradients(Backend& backend, ParameterStore& store, Communicator& expert_dp) {
  if (expert_dp.size() == 1) return Status::Ok();
  // One all-reduce over all expert gradients, packed in registration order.
  std::vector<Parameter*> params;
  std::vector<float> packed;
  for (Parameter& p : store) {
    if (!p.is_expert || !p.grad.defined()) continue;
    SY_ASSIGN_OR_RETURN(std::vector<float> grad, DownloadF32(backend, p.grad));
    packed.insert(packed.end(), grad.begin(), grad.end());
    params.push_back(&p);
  }
  SY_RETURN_IF_ERROR(expert_dp.host().AllReduceInPlace<float>(packed, Reduction::kSum));
  size_t at = 0;
  for (Parameter* p : params) {
    const size_t n = static_cast<size_t>(p->grad.numel());
    SY_RETURN_IF_ERROR(
        CopyFromHost(backend, std::span<const float>(packed.data() + at, n), p->grad));
    at += n;
  }
  return Status::Ok();
}

Result<std::unique_ptr<ExpertParallelCompute>> ExpertParallelCompute::Create(
    Backend& backend, ParameterStore& store, const Topology& topology,
    const ExpertParallelOptions& options, int layer, DType weight_dtype, bool with_grad) {
  Communicator& comm = topology.world();
  const int p = comm.size();
  if (options.num_experts <= 0 || options.num_experts % p != 0) {
    return InvalidArgumentError("expert parallelism: " + std::to_string(options.num_experts) +
                                " experts do not divide over an EP group of " + std::to_string(p) +
                                " ranks");
  }
  if (!comm.host_buffers()) {
    return InvalidArgumentError(
        "expert parallelism needs a communicator that moves host memory, "
        "not '" +
        std::string(comm.kind()) + "'");
  }
  SY_ASSIGN_OR_RETURN(AllToAll a2a, AllToAll::Create(topology, options.algorithm));
  std::unique_ptr<ExpertParallelCompute> ep(new ExpertParallelCompute(std::move(a2a), &comm));
  ep->num_experts_ = options.num_experts;
  ep->num_local_ = options.num_experts / p;
  ep->first_expert_ = comm.rank() * ep->num_local_;
  SY_CHECK_EQ(ExpertOwner(ep->first_expert_, options.num_experts, p), comm.rank());
  ep->hidden_ = options.hidden;
  if (options.bound_experts) {
    ep->local_ = LocalExpertCompute::CreateBound(layer, ep->num_local_, ep->first_expert_);
    return ep;
  }
  SY_ASSIGN_OR_RETURN(
      ep->local_,
      LocalExpertCompute::Create(backend, store, layer, ep->num_local_, options.hidden,
                                 options.intermediate, ExpertMatrixDTypes::All(weight_dtype),
                                 with_grad, ep->first_expert_));
  return ep;
}

ExpertComputeFactory ExpertParallelCompute::Factory(const Topology& topology,
                                                    const ModelConfig& config,
                                                    AllToAllAlgorithm algorithm,
                                                    bool bound_experts) {
  const ExpertParallelOptions options{.num_experts = config.num_experts,
                                      .hidden = config.hidden_size,
                                      .intermediate = config.moe_intermediate_size,
                                      .algorithm = algorithm,
                                      .bound_experts = bound_experts};
  const Topology* t = &topology;
  return [t, options](Backend& backend, ParameterStore& store, int layer, DType weight_dtype,
                      bool with_grad) -> Result<std::unique_ptr<ExpertCompute>> {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertParallelCompute> ep,
                        Create(backend, store, *t, options, layer, weight_dtype, with_grad));
    return std::unique_ptr<ExpertCompute>(std::move(ep));
  };
}

Status ExpertParallelCompute::Forward(Backend& backend, const Tensor& xs,
                                      std::span<const int64_t> group_rows, const Tensor& ys) {
  const int p = comm_->size();
  SY_CHECK_EQ(static_cast<int64_t>(group_rows.size()), num_experts_) << "group count";
  SY_CHECK_EQ(std::accumulate(group_rows.begin(), group_rows.end(), int64_t{0}), xs.dim(0))
      << "group rows do not add up to the rows of " << xs.ToString();
  SY_CHECK_EQ(xs.dim(1), hidden_) << "hidden size of " << xs.ToString();

  // 1. Per-expert counts: block p of group_rows (p's experts) goes to rank p.
  recv_counts_.assign(static_cast<size_t>(p) * num_local_, 0);
  SY_RETURN_IF_ERROR(comm_->host().AllToAll(group_rows.data(), recv_counts_.data(),
                                            static_cast<size_t>(num_local_), DType::kI64));
  local_rows_.assign(num_local_, 0);
  std::vector<size_t> send_rows(p, 0);
  for (int r = 0; r < p; ++r) {
    for (int j = 0; j < num_local_; ++j) {
      local_rows_[j] += recv_counts_[r * num_local_ + j];
      send_rows[r] += static_cast<size_t>(group_rows[r * num_local_ + j]);
    }
  }
  recv_rows_ = std::accumulate(local_rows_.begin(), local_rows_.end(), int64_t{0});

  // 2. The row plan (one small all-gather), shared by all four exchanges of this step; rows in the
  // activations' dtype.
  SY_CHECK(IsFloatingPoint(xs.dtype()) && xs.dtype() != DType::kF64)
      << "ExpertParallelCompute: rows " << xs.ToString() << " must be f32, bf16 or f16";
  row_dtype_ = xs.dtype();
  SY_ASSIGN_OR_RETURN(AllToAllPlan plan, a2a_.MakePlan(send_rows, row_bytes()));
  SY_CHECK_EQ(static_cast<int64_t>(plan.recv_elements()), recv_rows_)
      << "the row plan disagrees with the exchanged per-expert counts";
  plan_.emplace(std::move(plan));
  have_plan_ = true;
  return Exchange(backend, xs, ys, /*backward=*/false);
}

Status ExpertParallelCompute::Backward(Backend& backend, const Tensor& d_ys, const Tensor& d_xs) {
  SY_CHECK(have_plan_) << "ExpertParallelCompute::Backward without a Forward";
  return Exchange(backend, d_ys, d_xs, /*backward=*/true);
}

void ExpertParallelCompute::Regroup(const std::vector<std::byte>& src, std::vector<std::byte>& dst,
                                    bool to_expert_order) const {
  const int p = comm_->size();
  const size_t row = row_bytes();
  // Offsets of block (source s, local expert j) in source order and in expert order.
  std::vector<size_t> by_source(static_cast<size_t>(p) * num_local_);
  std::vector<size_t> by_expert(by_source.size());
  size_t at = 0;
  for (int s = 0; s < p; ++s) {
    for (int j = 0; j < num_local_; ++j) {
      by_source[s * num_local_ + j] = at;
      at += static_cast<size_t>(recv_counts_[s * num_local_ + j]);
    }
  }
  at = 0;
  for (int j = 0; j < num_local_; ++j) {
    for (int s = 0; s < p; ++s) {
      by_expert[s * num_local_ + j] = at;
      at += static_cast<size_t>(recv_counts_[s * num_local_ + j]);
    }
  }
  for (size_t b = 0; b < by_source.size(); ++b) {
    const size_t rows = static_cast<size_t>(recv_counts_[b]);
    if (rows == 0) continue;
    const size_t from = to_expert_order ? by_source[b] : by_expert[b];
    const size_t to = to_expert_order ? by_expert[b] : by_source[b];
    std::memcpy(dst.data() + to * row, src.data() + from * row, rows * row);
  }
}

Status ExpertParallelCompute::Exchange(Backend& backend, const Tensor& in, const Tensor& out,
                                       bool backward) {
  const AllToAllPlan& plan = *plan_;
  SY_CHECK_EQ(in.numel(), out.numel())
      << "ExpertParallelCompute: " << in.ToString() << " -> " << out.ToString();
  SY_CHECK(in.dtype() == row_dtype_ && out.dtype() == row_dtype_)
      << "ExpertParallelCompute: " << in.ToString() << " -> " << out.ToString()
      << " in another dtype than the step's rows, " << DTypeName(row_dtype_);
  SY_CHECK_EQ(static_cast<size_t>(in.numel()), plan.send_elements() * hidden_)
      << "ExpertParallelCompute: " << in.ToString() << " does not match the step's rows";
  const size_t row = row_bytes();
  std::vector<std::byte> workspace(plan.workspace_bytes());
  void* work = workspace.empty() ? nullptr : workspace.data();
  // Host rows <-> device tensors of the step's dtype, byte for byte.
  const auto host_view = [this](std::vector<std::byte>& bytes, int64_t rows) {
    return Tensor::Wrap(bytes.data(), row_dtype_, Shape{rows, hidden_});
  };
  const auto copy = [&backend](const Tensor& src, const Tensor& dst) {
    backend.CopyAsync(src, dst, backend.compute_stream());
    backend.SynchronizeStream(backend.compute_stream());
  };

  // Dispatch: rows in xs order (by global expert = by destination rank) -> rows by source.
  std::vector<std::byte> send(static_cast<size_t>(in.numel() / hidden_) * row);
  if (in.numel() > 0) copy(in, host_view(send, in.numel() / hidden_));
  std::vector<std::byte> recv(static_cast<size_t>(recv_rows_) * row);
  SY_RETURN_IF_ERROR(a2a_.Forward(plan, send.data(), recv.data(), work));
  std::vector<std::byte> grouped(recv.size());
  Regroup(recv, grouped, /*to_expert_order=*/true);

  // The local experts, one grouped GEMM per weight over all received rows.
  std::vector<std::byte> result(recv.size());
  if (recv_rows_ > 0) {
    const Shape shape{recv_rows_, hidden_};
    SY_ASSIGN_OR_RETURN(Tensor local_in, backend.Allocate(row_dtype_, shape));
    copy(host_view(grouped, recv_rows_), local_in);
    SY_ASSIGN_OR_RETURN(Tensor local_out, backend.Allocate(row_dtype_, shape));
    if (backward) {
      SY_RETURN_IF_ERROR(local_->Backward(backend, local_in, local_out));
    } else {
      SY_RETURN_IF_ERROR(local_->Forward(backend, local_in, local_rows_, local_out));
      local_xs_ = local_in;  // LocalExpertCompute keeps a view; keep it alive with ours
    }
    copy(local_out, host_view(result, recv_rows_));
  }

  // Combine: rows by local expert -> by source -> back to the ranks that sent them.
  Regroup(result, recv, /*to_expert_order=*/false);
  std::vector<std::byte> back(send.size());
  SY_RETURN_IF_ERROR(a2a_.Reverse(plan, recv.data(), back.data(), work));
  if (out.numel() > 0) copy(host_view(back, out.numel() / hidden_), out);
  return Status::Ok();
}

void ExpertParallelCompute::Release() {
  local_->Release();
  local_xs_ = Tensor();
  have_plan_ = false;
  plan_.reset();
}

}  // namespace sy
