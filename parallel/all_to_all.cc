#include "parallel/all_to_all.h"

#include <fmt/format.h>

#include <numeric>
#include <utility>

#include "parallel/all_to_all_schedule.h"

namespace sy {
namespace {

constexpr size_t kWorkspaceAlignment = 256;

std::vector<size_t> PrefixSums(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), size_t{0});
  return displs;
}

std::vector<size_t> Scaled(std::span<const size_t> values, size_t factor) {
  std::vector<size_t> out(values.begin(), values.end());
  for (size_t& v : out) v *= factor;
  return out;
}

std::string_view BufferName(AllToAllBuffer buffer) {
  switch (buffer) {
    case AllToAllBuffer::kInput:
      return "input";
    case AllToAllBuffer::kOutput:
      return "output";
    case AllToAllBuffer::kWork0:
      return "work0";
    case AllToAllBuffer::kWork1:
      return "work1";
  }
  return "?";
}

std::string_view GroupName(AllToAllGroup group) {
  switch (group) {
    case AllToAllGroup::kWorld:
      return "world";
    case AllToAllGroup::kIntraNode:
      return "intra-node";
    case AllToAllGroup::kInterNode:
      return "inter-node";
  }
  return "?";
}

}  // namespace

std::string_view AllToAllAlgorithmName(AllToAllAlgorithm algorithm) {
  switch (algorithm) {
    case AllToAllAlgorithm::kFlat:
      return "flat";
    case AllToAllAlgorithm::kHierarchical:
      return "hierarchical";
  }
  return "unknown";
}

Result<AllToAllAlgorithm> ParseAllToAllAlgorithm(std::string_view text) {
  if (text == "flat") return AllToAllAlgorithm::kFlat;
  if (text == "hierarchical") return AllToAllAlgorithm::kHierarchical;
  return InvalidArgumentError(fmt::format(
      "all_to_all algorithm '{}' is not known; use \"flat\" or \"hierarchical\"", text));
}

std::ostream& operator<<(std::ostream& os, const AllToAllStep& step) {
  switch (step.kind) {
    case AllToAllStep::Kind::kExchange:
      return os << "exchange(" << GroupName(step.group) << ") " << BufferName(step.src) << " -> "
                << BufferName(step.dst);
    case AllToAllStep::Kind::kCopy:
      return os << "copy(" << step.copies.size() << " blocks) " << BufferName(step.src) << " -> "
                << BufferName(step.dst);
  }
  return os;
}

size_t AllToAllPlan::count(int src, int dst) const {
  SY_CHECK(src >= 0 && src < size_ && dst >= 0 && dst < size_)
      << "count(" << src << ", " << dst << ") outside a " << size_ << "-rank plan";
  return counts_[static_cast<size_t>(src) * size_ + dst];
}

Result<AllToAllPlan> AllToAllPlan::Build(AllToAllAlgorithm algorithm, const NodeLayout& layout,
                                         int rank, std::span<const size_t> counts,
                                         size_t elem_bytes) {
  const int P = layout.size();
  SY_CHECK(rank >= 0 && rank < P) << "rank " << rank << " outside a layout of " << P;
  if (counts.size() != static_cast<size_t>(P) * P) {
    return InvalidArgumentError(fmt::format(
        "all-to-all plan: the count matrix has {} entries; a {}-rank job needs {} x {} = {}",
        counts.size(), P, P, P, static_cast<size_t>(P) * P));
  }
  if (elem_bytes == 0) {
    return InvalidArgumentError("all-to-all plan: elem_bytes is 0; pass the size of one element");
  }
  if (algorithm == AllToAllAlgorithm::kHierarchical && !layout.uniform()) {
    return FailedPreconditionError(fmt::format(
        "the hierarchical all-to-all needs the same number of ranks on every node, but the job "
        "runs {}; launch an equal number of ranks per node or use all_to_all = \"flat\"",
        layout.ToString()));
  }

  AllToAllPlan plan;
  plan.algorithm_ = algorithm;
  plan.rank_ = rank;
  plan.size_ = P;
  plan.elem_bytes_ = elem_bytes;
  plan.counts_.assign(counts.begin(), counts.end());
  plan.send_counts_.resize(P);
  plan.recv_counts_.resize(P);
  for (int p = 0; p < P; ++p) {
    plan.send_counts_[p] = plan.count(rank, p);
    plan.recv_counts_[p] = plan.count(p, rank);
  }
  plan.send_displs_ = PrefixSums(plan.send_counts_);
  plan.recv_displs_ = PrefixSums(plan.recv_counts_);
  plan.send_elements_ =
      std::accumulate(plan.send_counts_.begin(), plan.send_counts_.end(), size_t{0});
  plan.recv_elements_ =
      std::accumulate(plan.recv_counts_.begin(), plan.recv_counts_.end(), size_t{0});

  switch (algorithm) {
    case AllToAllAlgorithm::kFlat: {
      AllToAllStep step;
      step.kind = AllToAllStep::Kind::kExchange;
      step.group = AllToAllGroup::kWorld;
      step.src = AllToAllBuffer::kInput;
      step.dst = AllToAllBuffer::kOutput;
      step.send_counts = Scaled(plan.send_counts_, elem_bytes);
      step.send_displs = Scaled(plan.send_displs_, elem_bytes);
      step.recv_counts = Scaled(plan.recv_counts_, elem_bytes);
      step.recv_displs = Scaled(plan.recv_displs_, elem_bytes);
      plan.steps_.push_back(std::move(step));
      break;
    }
    case AllToAllAlgorithm::kHierarchical: {
      const std::vector<size_t> byte_counts = Scaled(counts, elem_bytes);
      internal::Schedule schedule = internal::BuildHierarchicalSchedule(layout, rank, byte_counts);
      plan.steps_ = std::move(schedule.steps);
      if (schedule.work0_bytes + schedule.work1_bytes > 0) {
        plan.work1_offset_ = (schedule.work0_bytes + kWorkspaceAlignment - 1) /
                             kWorkspaceAlignment * kWorkspaceAlignment;
        plan.workspace_bytes_ = plan.work1_offset_ + schedule.work1_bytes;
      }
      break;
    }
  }
  return plan;
}

AllToAll::AllToAll(AllToAllAlgorithm algorithm, NodeLayout layout, Communicator* world,
                   Communicator* intra, Communicator* inter)
    : algorithm_(algorithm),
      layout_(std::move(layout)),
      world_(world),
      intra_(intra),
      inter_(inter) {}

AllToAll AllToAll::Flat(Communicator& world) {
  std::vector<int> one_node(static_cast<size_t>(world.size()), 0);
  return AllToAll(AllToAllAlgorithm::kFlat, NodeLayout::FromNodeKeys(one_node), &world, nullptr,
                  nullptr);
}

Result<AllToAll> AllToAll::Create(const Topology& topology, AllToAllAlgorithm algorithm) {
  if (algorithm == AllToAllAlgorithm::kHierarchical && !topology.layout().uniform()) {
    return FailedPreconditionError(fmt::format(
        "the hierarchical all-to-all needs the same number of ranks on every node, but the job "
        "runs {}; launch an equal number of ranks per node or use all_to_all = \"flat\"",
        topology.layout().ToString()));
  }
  return AllToAll(algorithm, topology.layout(), &topology.world(), &topology.intra_node(),
                  &topology.inter_node());
}

Result<AllToAllPlan> AllToAll::MakePlan(std::span<const size_t> send_counts, size_t elem_bytes) {
  const int P = world_->size();
  SY_CHECK_EQ(send_counts.size(), static_cast<size_t>(P))
      << "MakePlan: send_counts needs one entry per rank";
  std::vector<int64_t> mine(send_counts.begin(), send_counts.end());
  std::vector<int64_t> all(static_cast<size_t>(P) * P);
  SY_RETURN_IF_ERROR(world_->host().AllGather<int64_t>(mine, all).WithContext(
      "all-to-all plan: exchanging the send counts"));
  std::vector<size_t> counts(all.begin(), all.end());
  return AllToAllPlan::Build(algorithm_, layout_, world_->rank(), counts, elem_bytes);
}

Communicator& AllToAll::GroupComm(AllToAllGroup group) const {
  switch (group) {
    case AllToAllGroup::kWorld:
      return *world_;
    case AllToAllGroup::kIntraNode:
      SY_CHECK(intra_ != nullptr) << "a flat AllToAll has no intra-node communicator";
      return *intra_;
    case AllToAllGroup::kInterNode:
      SY_CHECK(inter_ != nullptr) << "a flat AllToAll has no inter-node communicator";
      return *inter_;
  }
  SY_CHECK(false) << "unknown AllToAllGroup";
  return *world_;
}

Status AllToAll::Run(const AllToAllPlan& plan, const void* input, void* output, void* workspace,
                     bool reverse, Stream* stream) {
  SY_CHECK_EQ(plan.size(), world_->size()) << "the plan was built for another communicator";
  SY_CHECK_EQ(plan.rank(), world_->rank()) << "the plan was built for another rank";
  SY_CHECK(plan.algorithm() == algorithm_)
      << "a " << AllToAllAlgorithmName(plan.algorithm()) << " plan run by a "
      << AllToAllAlgorithmName(algorithm_) << " AllToAll";
  SY_CHECK(workspace != nullptr || plan.workspace_bytes() == 0)
      << "this plan needs " << plan.workspace_bytes() << " bytes of workspace";
  // Forward reads its input and writes its output; Reverse runs the steps backwards from its
  // input (Forward's output layout) to its output (Forward's input layout).
  auto address = [&](AllToAllBuffer buffer) -> void* {
    switch (buffer) {
      case AllToAllBuffer::kInput:
        return reverse ? output : const_cast<void*>(input);
      case AllToAllBuffer::kOutput:
        return reverse ? const_cast<void*>(input) : output;
      case AllToAllBuffer::kWork0:
        return workspace;
      case AllToAllBuffer::kWork1:
        return static_cast<std::byte*>(workspace) + plan.work1_offset();
    }
    return nullptr;
  };
  const std::vector<AllToAllStep>& steps = plan.steps();
  for (size_t k = 0; k < steps.size(); ++k) {
    const AllToAllStep& step = reverse ? steps[steps.size() - 1 - k] : steps[k];
    const void* src = address(reverse ? step.dst : step.src);
    void* dst = address(reverse ? step.src : step.dst);
    switch (step.kind) {
      case AllToAllStep::Kind::kExchange: {
        Communicator& comm = GroupComm(step.group);
        std::span<const size_t> sc = reverse ? step.recv_counts : step.send_counts;
        std::span<const size_t> sd = reverse ? step.recv_displs : step.send_displs;
        std::span<const size_t> rc = reverse ? step.send_counts : step.recv_counts;
        std::span<const size_t> rd = reverse ? step.send_displs : step.recv_displs;
        Status status = stream == nullptr
                            ? comm.AllToAllV(src, sc, sd, dst, rc, rd, DType::kU8)
                            : comm.AllToAllVAsync(src, sc, sd, dst, rc, rd, DType::kU8, *stream);
        SY_RETURN_IF_ERROR(status.WithContext(
            fmt::format("{} all-to-all {}, {} stage", AllToAllAlgorithmName(algorithm_),
                        reverse ? "reverse" : "forward", GroupName(step.group))));
        break;
      }
      case AllToAllStep::Kind::kCopy: {
        std::vector<BlockCopy> copies = step.copies;
        if (reverse) {
          for (BlockCopy& b : copies) std::swap(b.src_offset, b.dst_offset);
        }
        SY_RETURN_IF_ERROR(stream == nullptr ? world_->CopyBlocks(src, dst, copies)
                                             : world_->CopyBlocksAsync(src, dst, copies, *stream));
        break;
      }
    }
  }
  return Status::Ok();
}

Status AllToAll::Forward(const AllToAllPlan& plan, const void* send, void* recv, void* workspace) {
  return Run(plan, send, recv, workspace, /*reverse=*/false, nullptr);
}

Status AllToAll::Reverse(const AllToAllPlan& plan, const void* recv_side, void* send_side,
                         void* workspace) {
  return Run(plan, recv_side, send_side, workspace, /*reverse=*/true, nullptr);
}

Status AllToAll::ForwardAsync(const AllToAllPlan& plan, const void* send, void* recv,
                              void* workspace, Stream& stream) {
  return Run(plan, send, recv, workspace, /*reverse=*/false, &stream);
}

Status AllToAll::ReverseAsync(const AllToAllPlan& plan, const void* recv_side, void* send_side,
                              void* workspace, Stream& stream) {
  return Run(plan, recv_side, send_side, workspace, /*reverse=*/true, &stream);
}

}  // namespace sy
