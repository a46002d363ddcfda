// The embedding partition over OpenMPI (parallel/embedding_partition.h), run with 2 and 4 ranks.
//
// Checked: (a) the partitioned lookup and its gradient slices against one single-process
// Embedding fed the global ids (ragged token counts, one rank with none, repeated ids), the bytes
// sent, and the gather of the whole table; (b) a small MoeModel with the partitioned embedding
// trained data parallel (each rank its rows of a fixed global batch; the dense gradients prescaled
// by local / global targets and all-reduced here; the embedding's gradient is not all-reduced)
// against the same model trained on the global batch in one process: losses and every parameter
// after 10 AdamW steps; (c) refusals: tied embeddings, hidden_size not a multiple of the ranks.
//
// Tolerances. (a) is exact: the lookup copies rows, and the gradient rows arrive in the global
// batch's order, so each slice is scatter-added in the same order as in one process. (b):
// |dp - ref| <= 2e-5 * max(1, max |ref|) per parameter and |loss - ref| <= 1e-5 * max(1, ref):
// the data-parallel run sums each rank's prescaled gradient where the reference sums over the
// whole batch, so f32 rounding differs in the last bits, which AdamW's division by sqrt(v)
// carries into the parameters (measured errors are printed and in docs/parallel.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "parallel/embedding_partition.h"
#include "parallel/mpi_communicator.h"
#include "runtime/model/embedding.h"
#include "runtime/model/moe_model.h"
#include "runtime/model/parameter_store.h"
#include "tests/model/model_test_util.h"
#include "tests/parallel/mpi_test_env.h"
#include "tests/parallel/train_compare.h"

namespace sy {
namespace {

using testing::TestMpi;

constexpr uint64_t kSeed = 977;
constexpr float kRelTol = 2e-5f;
constexpr int kSteps = 10;
constexpr double kLr = 1e-2;
constexpr int64_t kSeqLen = 6;

using testing::AdamW;
using testing::PlainState;
using testing::PlainStep;
using testing::RelError;
using testing::Values;

// Bytes a ring all-reduce of a [vocab, hidden] f32 gradient sends per rank: 2 (N-1)/N * V*H*4.
double RingAllReduceBytes(int64_t vocab, int64_t hidden, int size) {
  return 2.0 * (size - 1) / size * static_cast<double>(vocab * hidden * 4);
}

// Columns [begin, begin + cols) of a row-major [rows, full_cols] table, written out here (not with
// the code under test).
std::vector<float> Columns(const std::vector<float>& full, int64_t rows, int64_t full_cols,
                           int64_t begin, int64_t cols) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j)
      out.push_back(full[static_cast<size_t>(r * full_cols + begin + j)]);
  }
  return out;
}

// Tokens of rank r in (a): ragged, rank 1 has none.
int64_t TokensOf(int r) { return r == 1 ? 0 : 3 + 4 * r; }

TEST(EmbeddingPartitionMpiTest, LookupAndGradientMatchOneEmbedding) {
  MpiCommunicator& world = TestMpi().world();
  const int size = world.size(), me = world.rank();
  const int64_t vocab = 23, hidden = 8 * size, cols = hidden / size;
  auto backend = testing::MakeBackend(Device::Cpu());

  std::vector<int64_t> first(static_cast<size_t>(size) + 1, 0);
  for (int r = 0; r < size; ++r)
    first[static_cast<size_t>(r) + 1] = first[static_cast<size_t>(r)] + TokensOf(r);
  const int64_t total = first.back(), begin = first[static_cast<size_t>(me)];
  const int64_t n = TokensOf(me);
  // vocab 23 < total ids: ids repeat, so the scatter-add accumulates.
  const std::vector<int32_t> ids = testing::RandomTokens(static_cast<size_t>(total), vocab, 5);
  const std::vector<float> dout =
      testing::RandomNormal(static_cast<size_t>(total * hidden), 6, 1.0f);

  // The reference: one Embedding over the global ids.
  ParameterStore ref_store;
  auto ref = Embedding::Create(*backend, ref_store, vocab, hidden, DType::kF32, true);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  ASSERT_TRUE(ref_store.Initialize(*backend, kSeed, 0.5f).ok());
  ref_store.ZeroGrads(*backend);
  Tensor ref_out = testing::DeviceF32(
      *backend, std::vector<float>(static_cast<size_t>(total * hidden)), Shape{total, hidden});
  ASSERT_TRUE(
      ref->Forward(*backend, testing::DeviceI32(*backend, ids, Shape{total}), ref_out).ok());
  ASSERT_TRUE(
      ref->Backward(*backend, testing::DeviceF32(*backend, dout, Shape{total, hidden})).ok());
  const std::vector<float> ref_rows = testing::ToHost(*backend, ref_out);
  const std::vector<float> ref_table = testing::ToHost(*backend, ref->table());
  const std::vector<float> ref_grad = testing::ToHost(*backend, ref->table_grad());

  auto part = EmbeddingPartition::Create(*backend, world, vocab, hidden, true);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ((*part)->cols(), cols);
  EXPECT_EQ((*part)->col_begin(), me * cols);
  testing::FromHost(*backend, Columns(ref_table, vocab, hidden, me * cols, cols), (*part)->table());
  backend->Fill((*part)->table_grad(), 0.0f);

  // Two steps: the gradient accumulates, and the second runs with a prescale of 0.5.
  for (int step = 0; step < 2; ++step) {
    const std::vector<int32_t> my_ids(ids.begin() + begin, ids.begin() + begin + n);
    Tensor out = testing::DeviceF32(*backend, std::vector<float>(static_cast<size_t>(n * hidden)),
                                    Shape{n, hidden});
    (*part)->set_gradient_prescale(step == 0 ? 1.0f : 0.5f);
    ASSERT_TRUE(
        (*part)->Forward(*backend, testing::DeviceI32(*backend, my_ids, Shape{n}), out).ok());
    const std::vector<float> want(ref_rows.begin() + begin * hidden,
                                  ref_rows.begin() + (begin + n) * hidden);
    EXPECT_EQ(testing::ToHost(*backend, out), want) << "rows of rank " << me << ", step " << step;
    const std::vector<float> my_dout(dout.begin() + begin * hidden,
                                     dout.begin() + (begin + n) * hidden);
    ASSERT_TRUE(
        (*part)->Backward(*backend, testing::DeviceF32(*backend, my_dout, Shape{n, hidden})).ok());
    (*part)->Release();
  }
  // The whole-batch gradient once, plus half of it.
  std::vector<float> want_grad = Columns(ref_grad, vocab, hidden, me * cols, cols);
  for (float& g : want_grad) g += 0.5f * g;
  const float grad_err = RelError(testing::ToHost(*backend, (*part)->table_grad()), want_grad);
  EXPECT_LE(grad_err, 1e-6f) << "gradient slice of rank " << me;

  // Bytes sent for the gradient: this rank's n rows of the other ranks' columns, twice.
  const int64_t grad_bytes = 2 * n * (hidden - cols) * 4;
  EXPECT_EQ((*part)->traffic().backward_bytes, grad_bytes);
  int64_t sent[2] = {grad_bytes / 2, (*part)->traffic().forward_bytes / 2};
  ASSERT_TRUE(world.AllReduce(sent, sent, 2, DType::kI64, Reduction::kMax).ok());
  float worst = grad_err;
  ASSERT_TRUE(world.AllReduce(&worst, &worst, 1, DType::kF32, Reduction::kMax).ok());
  if (me == 0) {
    const double ring = RingAllReduceBytes(vocab, hidden, size);
    std::printf(
        "embedding partition, %d ranks, V=%lld H=%lld, %lld tokens: per step the most any rank "
        "sent is %lld B (gradients) + %lld B (forward); all-reduce of the table: %.0f B per rank; "
        "max gradient rel. error %.3g\n",
        size, static_cast<long long>(vocab), static_cast<long long>(hidden),
        static_cast<long long>(total), static_cast<long long>(sent[0]),
        static_cast<long long>(sent[1]), ring, worst);
  }

  // The whole table from the slices (checkpoints), and a slice back from it.
  auto full = GatherColumnShards(world, vocab, hidden, Values((*part)->table()));
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(*full, ref_table);
  EXPECT_EQ(TakeColumnShard(me, size, vocab, hidden, ref_table),
            Columns(ref_table, vocab, hidden, me * cols, cols));
}

// ---- (b) training ----

ModelConfig PartitionConfig() {
  ModelConfig c = testing::TinyConfig();  // aux and z loss off: they are not per-token means
  c.vocab_size = 48;  // some ids never occur in a batch: their rows must stay as in one process
  c.tie_word_embeddings = false;
  c.capacity_factor = 0.0;  // dropless: capacity would count each rank's own tokens
  c.num_kv_heads = 2;
  return c;
}

std::unique_ptr<MoeModel> MakeModel(Backend& backend, const ModelConfig& config) {
  auto model = MoeModel::Create(backend, config);
  SY_CHECK_OK(model.status());
  SY_CHECK_OK((*model)->InitializeParameters(kSeed));
  return std::move(*model);
}

// Rows (sequences) of rank r: rank 0 holds three, every other rank one.
int64_t RowsOf(int r) { return r == 0 ? 3 : 1; }

TEST(EmbeddingPartitionMpiTest, TrainingMatchesOneProcess) {
  MpiCommunicator& world = TestMpi().world();
  const int size = world.size(), me = world.rank();
  const ModelConfig config = PartitionConfig();
  const int64_t vocab = config.vocab_size, hidden = config.hidden_size, cols = hidden / size;
  auto backend = testing::MakeBackend(Device::Cpu());
  auto ref = MakeModel(*backend, config);
  auto model = MakeModel(*backend, config);

  auto installed = InstallEmbeddingPartition(*model, world);
  ASSERT_TRUE(installed.ok()) << installed.status().ToString();
  EmbeddingPartition* part = *installed;
  Parameter* embed = model->parameters().Find("embed_tokens");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->value.shape(), (Shape{vocab, cols}));
  EXPECT_EQ(embed->grad.shape(), (Shape{vocab, cols}));
  EXPECT_EQ(embed->col_begin, me * cols);
  EXPECT_EQ(embed->full_cols, hidden);
  EXPECT_EQ(model->UnitOf(*embed), 0);
  const std::vector<float> ref_table0 = Values(ref->parameters().Find("embed_tokens")->value);
  EXPECT_EQ(Values(embed->value), Columns(ref_table0, vocab, hidden, me * cols, cols))
      << "the installed slice";
  // Initializing again from the seed gives the shard its columns of the whole table.
  backend->Fill(embed->value, 0.0f);
  ASSERT_TRUE(model->InitializeParameters(kSeed).ok());
  EXPECT_EQ(Values(embed->value), Columns(ref_table0, vocab, hidden, me * cols, cols))
      << "the re-initialised slice";

  int64_t batch = 0, row_begin = 0;
  for (int r = 0; r < size; ++r) {
    if (r < me) row_begin += RowsOf(r);
    batch += RowsOf(r);
  }
  const int64_t rows = RowsOf(me);
  const size_t tok_begin = static_cast<size_t>(row_begin * kSeqLen);
  const size_t tok_end = static_cast<size_t>((row_begin + rows) * kSeqLen);

  auto ref_opt = CreateOptimizer(AdamW(), nullptr);
  auto opt = CreateOptimizer(AdamW(), nullptr);
  ASSERT_TRUE(ref_opt.ok() && opt.ok());
  std::map<std::string, PlainState> ref_states, states;
  double worst_loss = 0.0;
  int64_t grad_bytes = 0;
  for (int step = 0; step < kSteps; ++step) {
    const size_t n = static_cast<size_t>(batch * kSeqLen);
    const std::vector<int32_t> tokens =
        testing::RandomTokens(n, vocab, 300 + static_cast<uint64_t>(step));
    std::vector<int32_t> targets =
        testing::RandomTokens(n, vocab, 400 + static_cast<uint64_t>(step));
    for (size_t i = 0; i < n; ++i) {
      if ((i * 5 + static_cast<size_t>(step)) % 7 == 0) targets[i] = -1;
    }
    ref->ZeroGrads();
    auto ref_loss = ref->Forward(testing::HostI32(tokens, Shape{batch, kSeqLen}),
                                 testing::HostI32(targets, Shape{batch, kSeqLen}));
    ASSERT_TRUE(ref_loss.ok()) << ref_loss.status().ToString();
    ASSERT_TRUE(ref->Backward().ok());
    PlainStep(**ref_opt, *ref, ref_states, kLr, [](const Parameter&) { return true; });

    int64_t local_targets = 0, global_targets = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = targets[i] >= 0 ? 1 : 0;
      global_targets += t;
      if (i >= tok_begin && i < tok_end) local_targets += t;
    }
    const float share = static_cast<float>(local_targets) / static_cast<float>(global_targets);
    model->ZeroGrads();
    part->set_gradient_prescale(share);
    const std::vector<int32_t> my_tokens(tokens.begin() + tok_begin, tokens.begin() + tok_end);
    const std::vector<int32_t> my_targets(targets.begin() + tok_begin, targets.begin() + tok_end);
    const int64_t sent_before = part->traffic().backward_bytes;
    auto loss = model->Forward(testing::HostI32(my_tokens, Shape{rows, kSeqLen}),
                               testing::HostI32(my_targets, Shape{rows, kSeqLen}));
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();
    ASSERT_TRUE(model->Backward().ok());
    grad_bytes = std::max(grad_bytes, part->traffic().backward_bytes - sent_before);
    double global_ce = static_cast<double>(loss->ce_loss) * share;
    ASSERT_TRUE(world.AllReduce(&global_ce, &global_ce, 1, DType::kF64, Reduction::kSum).ok());
    const double loss_err = std::fabs(global_ce - ref_loss->ce_loss);
    EXPECT_LE(loss_err, 1e-5 * std::max(1.0, double(ref_loss->ce_loss))) << "step " << step;
    worst_loss = std::max(worst_loss, loss_err);

    // Data parallelism of everything but the embedding slice, whose gradient is complete.
    for (Parameter& p : model->parameters()) {
      if (p.is_column_shard()) continue;
      float* g = p.grad.data<float>();
      for (int64_t i = 0; i < p.grad.numel(); ++i) g[i] *= share;
      ASSERT_TRUE(world
                      .AllReduceInPlace<float>(
                          std::span<float>(g, static_cast<size_t>(p.grad.numel())), Reduction::kSum)
                      .ok());
    }
    PlainStep(**opt, *model, states, kLr, [](const Parameter&) { return true; });
  }

  double worst_param = 0.0;
  for (Parameter& p : model->parameters()) {
    const Parameter* r = ref->parameters().Find(p.name);
    ASSERT_NE(r, nullptr) << p.name;
    std::vector<float> want = Values(r->value);
    if (p.is_column_shard()) want = Columns(want, vocab, hidden, me * cols, cols);
    const float err = RelError(Values(p.value), want);
    EXPECT_LE(err, kRelTol) << p.name;
    worst_param = std::max<double>(worst_param, err);
  }
  // The checkpoint's view: the whole table, and the optimizer's moments of the slice.
  const std::vector<float> ref_table = Values(ref->parameters().Find("embed_tokens")->value);
  auto full = GatherColumnShards(world, vocab, hidden, Values(embed->value));
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_LE(RelError(*full, ref_table), kRelTol);
  auto full_m = GatherColumnShards(world, vocab, hidden, states.at("embed_tokens").m);
  ASSERT_TRUE(full_m.ok());
  EXPECT_LE(RelError(*full_m, ref_states.at("embed_tokens").m), kRelTol);

  double worst[2] = {worst_param, worst_loss};
  ASSERT_TRUE(world.AllReduce(worst, worst, 2, DType::kF64, Reduction::kMax).ok());
  ASSERT_TRUE(world.AllReduce(&grad_bytes, &grad_bytes, 1, DType::kI64, Reduction::kMax).ok());
  if (me == 0) {
    const double ring = RingAllReduceBytes(vocab, hidden, size);
    std::printf(
        "embedding partition training, %d ranks, %d AdamW steps: max rel. error parameters %.3g, "
        "max |loss - ref| %.3g; table gradient sent per step (most of any rank) %lld B vs %.0f B "
        "for a ring all-reduce of [%lld, %lld]\n",
        size, kSteps, worst[0], worst[1], static_cast<long long>(grad_bytes), ring,
        static_cast<long long>(vocab), static_cast<long long>(hidden));
  }
}

TEST(EmbeddingPartitionMpiTest, Refusals) {
  MpiCommunicator& world = TestMpi().world();
  auto backend = testing::MakeBackend(Device::Cpu());
  ModelConfig tied = PartitionConfig();
  tied.tie_word_embeddings = true;
  auto model = MakeModel(*backend, tied);
  auto installed = InstallEmbeddingPartition(*model, world);
  EXPECT_EQ(installed.status().code(), StatusCode::kFailedPrecondition)
      << installed.status().ToString();
  EXPECT_NE(installed.status().message().find("tie_word_embeddings"), std::string::npos);

  const int64_t hidden = 4 * world.size() + 1;
  auto part = EmbeddingPartition::Create(*backend, world, 10, hidden, true);
  EXPECT_EQ(part.status().code(), StatusCode::kInvalidArgument);
  const std::string msg(part.status().message());
  EXPECT_NE(msg.find("hidden_size " + std::to_string(hidden)), std::string::npos) << msg;
  EXPECT_NE(msg.find("group size " + std::to_string(world.size())), std::string::npos) << msg;
}

}  // namespace
}  // namespace sy
