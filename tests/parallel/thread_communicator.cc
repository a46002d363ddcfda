#include "tests/parallel/thread_communicator.h"

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace sy::testing {

namespace {

struct Post {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  std::span<const size_t> send_counts, send_displs, recv_counts, recv_displs;
  int color = 0;
  int key = 0;
  std::shared_ptr<ThreadGroupState> new_group;
};

struct Message {
  int tag = 0;
  std::vector<std::byte> bytes;
};

const std::byte* At(const void* p, size_t bytes) {
  return static_cast<const std::byte*>(p) + bytes;
}
std::byte* At(void* p, size_t bytes) { return static_cast<std::byte*>(p) + bytes; }

template <typename T>
void ReduceTyped(const std::vector<Post>& posts, size_t offset, size_t count, Reduction op,
                 void* out) {
  T* result = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(posts[0].send)[offset + i];
    for (size_t r = 1; r < posts.size(); ++r) {
      const T v = static_cast<const T*>(posts[r].send)[offset + i];
      switch (op) {
        case Reduction::kSum:
          acc = acc + v;
          break;
        case Reduction::kMax:
          acc = std::max(acc, v);
          break;
        case Reduction::kMin:
          acc = std::min(acc, v);
          break;
      }
    }
    result[i] = acc;
  }
}

}  // namespace

struct ThreadGroupState {
  ThreadGroupState(std::vector<int> members, std::shared_ptr<const std::vector<int>> machines)
      : world_ranks(std::move(members)),
        machine_of_world_rank(std::move(machines)),
        sync(static_cast<std::ptrdiff_t>(world_ranks.size())),
        posts(world_ranks.size()) {}

  std::vector<int> world_ranks;
  std::shared_ptr<const std::vector<int>> machine_of_world_rank;
  std::barrier<> sync;
  std::vector<Post> posts;
  std::mutex mailbox_mutex;
  std::condition_variable mailbox_cv;
  std::map<std::pair<int, int>, std::deque<Message>> mailboxes;  // (from, to)
};

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<ThreadGroupState> group, int rank,
                                       std::string name)
    : group_(std::move(group)), rank_(rank), name_(std::move(name)) {}

ThreadCommunicator::~ThreadCommunicator() = default;

int ThreadCommunicator::size() const { return static_cast<int>(group_->world_ranks.size()); }

Result<std::unique_ptr<Communicator>> ThreadCommunicator::Split(int color, int key) {
  Post& mine = group_->posts[rank_];
  mine.color = color;
  mine.key = key;
  group_->sync.arrive_and_wait();
  std::vector<int> members;
  for (int r = 0; r < size(); ++r) {
    if (color != kNoGroup && group_->posts[r].color == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return group_->posts[a].key < group_->posts[b].key; });
  const int new_rank =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  if (color != kNoGroup && new_rank == 0) {
    std::vector<int> world;
    for (int r : members) world.push_back(group_->world_ranks[r]);
    mine.new_group = std::make_shared<ThreadGroupState>(world, group_->machine_of_world_rank);
  }
  group_->sync.arrive_and_wait();
  std::shared_ptr<ThreadGroupState> group =
      color == kNoGroup ? nullptr : group_->posts[members[0]].new_group;
  group_->sync.arrive_and_wait();
  mine.new_group.reset();
  if (color == kNoGroup) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(std::make_unique<ThreadCommunicator>(
      group, new_rank, name_ + "/split(color=" + std::to_string(color) + ")"));
}

Result<int> ThreadCommunicator::NodeLeader() {
  group_->sync.arrive_and_wait();
  const std::vector<int>& machine = *group_->machine_of_world_rank;
  const int mine = machine[group_->world_ranks[rank_]];
  int leader = rank_;
  for (int r = 0; r < size(); ++r) {
    if (machine[group_->world_ranks[r]] == mine) leader = std::min(leader, r);
  }
  group_->sync.arrive_and_wait();
  return leader;
}

Status ThreadCommunicator::DoBarrier(Stream*) {
  group_->sync.arrive_and_wait();
  return Status::Ok();
}

Status ThreadCommunicator::DoBroadcast(void* data, size_t count, DType type, int root, Stream*) {
  group_->posts[rank_].recv = data;
  group_->sync.arrive_and_wait();
  if (rank_ != root && count > 0) {
    std::memcpy(data, group_->posts[root].recv, count * DTypeSize(type));
  }
  group_->sync.arrive_and_wait();
  return Status::Ok();
}

void ThreadCommunicator::Reduce(size_t offset, size_t count, DType type, Reduction op,
                                void* out) const {
  switch (type) {
    case DType::kI32:
      return ReduceTyped<int32_t>(group_->posts, offset, count, op, out);
    case DType::kI64:
      return ReduceTyped<int64_t>(group_->posts, offset, count, op, out);
    case DType::kF32:
      return ReduceTyped<float>(group_->posts, offset, count, op, out);
    case DType::kF64:
      return ReduceTyped<double>(group_->posts, offset, count, op, out);
    case DType::kU8:
    case DType::kI8:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
      break;
  }
  SY_CHECK(false) << "reduction on " << DTypeName(type);
}

Status ThreadCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DType type,
                                       Reduction op, Stream*) {
  group_->posts[rank_].send = send;
  group_->sync.arrive_and_wait();
  // Reduce into a private buffer first: with send == recv another rank may still be reading.
  std::vector<std::byte> result(count * DTypeSize(type));
  Reduce(0, count, type, op, result.data());
  group_->sync.arrive_and_wait();
  if (!result.empty()) std::memcpy(recv, result.data(), result.size());
  return Status::Ok();
}

Status ThreadCommunicator::DoAllGather(const void* send, size_t count, void* recv, DType type,
                                       Stream*) {
  group_->posts[rank_].send = send;
  group_->sync.arrive_and_wait();
  const size_t bytes = count * DTypeSize(type);
  for (int r = 0; r < size() && bytes > 0; ++r) {
    std::memcpy(At(recv, r * bytes), group_->posts[r].send, bytes);
  }
  group_->sync.arrive_and_wait();
  return Status::Ok();
}

Status ThreadCommunicator::DoAllGatherV(const void* send, size_t count, void* recv,
                                        std::span<const size_t> recv_counts,
                                        std::span<const size_t> recv_displs, DType type, Stream*) {
  group_->posts[rank_].send = send;
  group_->posts[rank_].count = count;
  group_->sync.arrive_and_wait();
  const size_t elem = DTypeSize(type);
  for (int r = 0; r < size(); ++r) {
    SY_CHECK_EQ(group_->posts[r].count, recv_counts[r]) << "AllGatherV count mismatch";
    if (recv_counts[r] > 0) {
      std::memcpy(At(recv, recv_displs[r] * elem), group_->posts[r].send, recv_counts[r] * elem);
    }
  }
  group_->sync.arrive_and_wait();
  return Status::Ok();
}

Status ThreadCommunicator::DoReduceScatter(const void* send, void* recv, size_t recv_count,
                                           DType type, Reduction op, Stream*) {
  group_->posts[rank_].send = send;
  group_->sync.arrive_and_wait();
  Reduce(static_cast<size_t>(rank_) * recv_count, recv_count, type, op, recv);
  group_->sync.arrive_and_wait();
  return Status::Ok();
}

Status ThreadCommunicator::DoAllToAll(const void* send, void* recv, size_t count, DType type,
                                      Stream*) {
  group_->posts[rank_].send = send;
  group_->sync.arrive_and_wait();
  const size_t bytes = count * DTypeSize(type);
  for (int r = 0; r < size() && bytes > 0; ++r) {
    std::memcpy(At(recv, r * bytes), At(group_->posts[r].send, rank_ * bytes), bytes);
  }
  group_->sync.arrive_and_wait();
  return Status::Ok();
}

Status ThreadCommunicator::DoAllToAllV(const void* send, std::span<const size_t> send_counts,
                                       std::span<const size_t> send_displs, void* recv,
                                       std::span<const size_t> recv_counts,
                                       std::span<const size_t> recv_displs, DType type, Stream*) {
  Post& mine = group_->posts[rank_];
  mine.send = send;
  mine.send_counts = send_counts;
  mine.send_displs = send_displs;
  group_->sync.arrive_and_wait();
  const size_t elem = DTypeSize(type);
  for (int r = 0; r < size(); ++r) {
    const Post& peer = group_->posts[r];
    SY_CHECK_EQ(peer.send_counts[rank_], recv_counts[r])
        << name_ << ": rank " << r << " sends rank " << rank_ << " a different count";
    if (recv_counts[r] > 0) {
      std::memcpy(At(recv, recv_displs[r] * elem), At(peer.send, peer.send_displs[rank_] * elem),
                  recv_counts[r] * elem);
    }
  }
  group_->sync.arrive_and_wait();
  return Status::Ok();
}

Status ThreadCommunicator::DoSend(const void* data, size_t count, DType type, int peer, int tag,
                                  Stream*) {
  Message message;
  message.tag = tag;
  message.bytes.resize(count * DTypeSize(type));
  if (!message.bytes.empty()) std::memcpy(message.bytes.data(), data, message.bytes.size());
  {
    std::lock_guard<std::mutex> lock(group_->mailbox_mutex);
    group_->mailboxes[{rank_, peer}].push_back(std::move(message));
  }
  group_->mailbox_cv.notify_all();
  return Status::Ok();
}

Status ThreadCommunicator::DoRecv(void* data, size_t count, DType type, int peer, int tag,
                                  Stream*) {
  std::unique_lock<std::mutex> lock(group_->mailbox_mutex);
  std::deque<Message>& box = group_->mailboxes[{peer, rank_}];
  auto match = [&] {
    return std::find_if(box.begin(), box.end(), [&](const Message& m) { return m.tag == tag; });
  };
  if (!group_->mailbox_cv.wait_for(lock, options_.timeout, [&] { return match() != box.end(); })) {
    return DeadlineExceededError("Recv on " + name_ + ": no message from rank " +
                                 std::to_string(peer));
  }
  auto it = match();
  SY_CHECK_EQ(it->bytes.size(), count * DTypeSize(type)) << "Recv count mismatch";
  if (!it->bytes.empty()) std::memcpy(data, it->bytes.data(), it->bytes.size());
  box.erase(it);
  return Status::Ok();
}

Status ThreadCommunicator::DoCopyBlocks(const void* src, void* dst,
                                        std::span<const BlockCopy> blocks, Stream*) {
  for (const BlockCopy& b : blocks) {
    if (b.bytes > 0) std::memcpy(At(dst, b.dst_offset), At(src, b.src_offset), b.bytes);
  }
  return Status::Ok();
}

void RunThreadGroup(int size, std::vector<int> machine_of_rank,
                    const std::function<void(Communicator& world)>& body) {
  if (machine_of_rank.empty()) machine_of_rank.assign(static_cast<size_t>(size), 0);
  SY_CHECK_EQ(machine_of_rank.size(), static_cast<size_t>(size));
  std::vector<int> members(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) members[r] = r;
  auto machines = std::make_shared<const std::vector<int>>(std::move(machine_of_rank));
  auto state = std::make_shared<ThreadGroupState>(members, machines);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      ThreadCommunicator world(state, r, "world");
      body(world);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace sy::testing
