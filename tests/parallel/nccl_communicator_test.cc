// NcclCommunicator on GPUs, under mpirun (built only when SY_HAVE_NCCL). Device results are
// compared with the same operations done by MPI on the host. Without a GPU per rank the tests
// skip and say why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "parallel/all_to_all.h"
#include "parallel/nccl_communicator.h"
#include "parallel/topology.h"
#include "tests/parallel/all_to_all_checks.h"
#include "tests/parallel/collective_checks.h"
#include "tests/parallel/mpi_test_env.h"

namespace sy {
namespace {

using testing::TestMpi;

// Device memory for one test, filled from and read back to the host.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&data_, bytes == 0 ? 1 : bytes), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  void* get() const { return data_; }
  template <typename T>
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size() * sizeof(T), bytes_);
    ASSERT_EQ(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

#define SY_CREATE_NCCL_OR_SKIP(var)                                                            \
  Result<std::unique_ptr<NcclCommunicator>> var = NcclCommunicator::Create(TestMpi().world()); \
  if (!var.ok() && var.status().code() == StatusCode::kUnavailable) {                          \
    GTEST_SKIP() << var.status().message();                                                    \
  }                                                                                            \
  ASSERT_TRUE(var.ok()) << var.status().ToString()

TEST(NcclCommunicatorTest, CollectivesOnDeviceBuffers) {
  SY_CREATE_NCCL_OR_SKIP(nccl);
  Communicator& comm = **nccl;
  const int P = comm.size();
  const int r = comm.rank();
  EXPECT_FALSE(comm.host_buffers());
  EXPECT_EQ(comm.host().kind(), "mpi");
  ASSERT_TRUE(comm.Barrier().ok());

  std::vector<float> values(9);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float((r + 1) * (i + 1));
  DeviceBytes reduce(values.size() * sizeof(float));
  reduce.Upload(values);
  ASSERT_TRUE(
      comm.AllReduce(reduce.get(), reduce.get(), values.size(), DType::kF32, Reduction::kSum).ok());
  std::vector<float> sum = reduce.Download<float>();
  for (size_t i = 0; i < sum.size(); ++i) EXPECT_EQ(sum[i], float((i + 1) * P * (P + 1) / 2));

  std::vector<int32_t> mine = {r * 10, r * 10 + 1};
  DeviceBytes gather_in(2 * sizeof(int32_t)), gather_out(2 * P * sizeof(int32_t));
  gather_in.Upload(mine);
  ASSERT_TRUE(comm.AllGather(gather_in.get(), 2, gather_out.get(), DType::kI32).ok());
  std::vector<int32_t> gathered = gather_out.Download<int32_t>();
  for (int p = 0; p < P; ++p) {
    EXPECT_EQ(gathered[2 * p], p * 10);
    EXPECT_EQ(gathered[2 * p + 1], p * 10 + 1);
  }
}

TEST(NcclCommunicatorTest, HierarchicalAllToAllOnDeviceMatchesMpiOnHost) {
  SY_CREATE_NCCL_OR_SKIP(nccl);
  const int P = (*nccl)->size();
  const int per_node = P % 2 == 0 ? 2 : 1;
  Result<std::unique_ptr<Topology>> device_topology =
      Topology::Create(**nccl, TopologyOptions{.ranks_per_node = per_node});
  ASSERT_TRUE(device_topology.ok()) << device_topology.status().ToString();
  Result<std::unique_ptr<Topology>> host_topology =
      Topology::Create(TestMpi().world(), TopologyOptions{.ranks_per_node = per_node});
  ASSERT_TRUE(host_topology.ok()) << host_topology.status().ToString();
  Result<AllToAll> device_a2a =
      AllToAll::Create(**device_topology, AllToAllAlgorithm::kHierarchical);
  ASSERT_TRUE(device_a2a.ok());
  AllToAll host_a2a = AllToAll::Flat(TestMpi().world());

  const std::vector<size_t> matrix =
      testing::MakeCountMatrix(P, testing::CountPattern::kRandom, 5, 40);
  const int me = (*nccl)->rank();
  std::vector<size_t> row(matrix.begin() + me * P, matrix.begin() + (me + 1) * P);
  constexpr size_t kElem = 6;
  Result<AllToAllPlan> device_plan = device_a2a->MakePlan(row, kElem);
  ASSERT_TRUE(device_plan.ok()) << device_plan.status().ToString();
  Result<AllToAllPlan> host_plan = host_a2a.MakePlan(row, kElem);
  ASSERT_TRUE(host_plan.ok());

  std::vector<uint8_t> send(device_plan->send_elements() * kElem);
  for (size_t i = 0; i < send.size(); ++i) send[i] = uint8_t(me * 37 + i);
  std::vector<uint8_t> host_recv(host_plan->recv_elements() * kElem);
  ASSERT_TRUE(host_a2a.Forward(*host_plan, send.data(), host_recv.data(), nullptr).ok());

  DeviceBytes d_send(send.size()), d_recv(host_recv.size()), d_back(send.size());
  DeviceBytes d_work(device_plan->workspace_bytes());
  d_send.Upload(send);
  ASSERT_TRUE(device_a2a->Forward(*device_plan, d_send.get(), d_recv.get(), d_work.get()).ok());
  EXPECT_EQ(d_recv.Download<uint8_t>(), host_recv);
  ASSERT_TRUE(device_a2a->Reverse(*device_plan, d_recv.get(), d_back.get(), d_work.get()).ok());
  EXPECT_EQ(d_back.Download<uint8_t>(), send);
}

TEST(NcclCommunicatorTest, AsyncCallsNeedACudaStream) {
  SY_CREATE_NCCL_OR_SKIP(nccl);
  testing::HostTestStream not_cuda;
  Status status = (*nccl)->BarrierAsync(not_cuda);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find("resolve_stream"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace sy
