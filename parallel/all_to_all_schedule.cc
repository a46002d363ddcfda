#include "parallel/all_to_all_schedule.h"

#include <algorithm>
#include <map>

#include "runtime/core/check.h"

namespace sy::internal {
namespace {

bool IsIdentity(const std::vector<BlockCopy>& copies) {
  return std::all_of(copies.begin(), copies.end(), [](const BlockCopy& b) {
    return b.bytes == 0 || b.src_offset == b.dst_offset;
  });
}

}  // namespace

Schedule FinishSchedule(std::vector<ChainStep> chain, std::span<const size_t> sizes) {
  SY_CHECK_GE(sizes.size(), 2u) << "a schedule needs an input and an output";
  const int output = static_cast<int>(sizes.size()) - 1;

  // An identity copy from the input lets later steps read the input itself; any other identity
  // copy lets the step that produced its source write straight into its destination. A copy from
  // the input to the output is real work and stays.
  for (size_t i = 0; i < chain.size();) {
    const ChainStep& c = chain[i];
    const bool drop = c.step.kind == AllToAllStep::Kind::kCopy && IsIdentity(c.step.copies) &&
                      !(c.src == 0 && c.dst == output);
    if (!drop) {
      ++i;
      continue;
    }
    SY_CHECK_EQ(sizes[c.src], sizes[c.dst]) << "an identity copy must keep the buffer size";
    const int from = c.src;
    const int to = c.dst;
    chain.erase(chain.begin() + static_cast<std::ptrdiff_t>(i));
    if (from == 0) {
      for (size_t j = i; j < chain.size(); ++j) {
        SY_CHECK_NE(chain[j].dst, to) << "logical buffer written twice";
        if (chain[j].src == to) chain[j].src = from;
      }
    } else {
      for (size_t j = 0; j < i; ++j) {
        SY_CHECK_NE(chain[j].src, from) << "logical buffer read twice";
        if (chain[j].dst == from) chain[j].dst = to;
      }
    }
  }

  Schedule schedule;
  std::map<int, AllToAllBuffer> physical{{0, AllToAllBuffer::kInput},
                                         {output, AllToAllBuffer::kOutput}};
  for (ChainStep& c : chain) {
    auto src = physical.find(c.src);
    SY_CHECK(src != physical.end()) << "step reads logical buffer " << c.src << " before a write";
    SY_CHECK(src->second != AllToAllBuffer::kOutput) << "a schedule never reads its output";
    auto dst = physical.find(c.dst);
    if (dst == physical.end()) {
      const AllToAllBuffer work =
          src->second == AllToAllBuffer::kWork0 ? AllToAllBuffer::kWork1 : AllToAllBuffer::kWork0;
      dst = physical.emplace(c.dst, work).first;
      size_t& bytes = work == AllToAllBuffer::kWork0 ? schedule.work0_bytes : schedule.work1_bytes;
      bytes = std::max(bytes, sizes[c.dst]);
    }
    SY_CHECK(dst->second != AllToAllBuffer::kInput) << "a schedule never writes its input";
    SY_CHECK(dst->second != src->second) << "a step cannot read and write one buffer";
    c.step.src = src->second;
    c.step.dst = dst->second;
    schedule.steps.push_back(std::move(c.step));
  }
  SY_CHECK(!schedule.steps.empty() && schedule.steps.back().dst == AllToAllBuffer::kOutput)
      << "a schedule must end in its output";
  return schedule;
}

}  // namespace sy::internal
