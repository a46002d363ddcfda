#include "parallel/embedding_partition.h"

#include <string>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy {
namespace {

// Copies column block [col, col + cols) of rows [rows, stride] at `src` into dense [rows, cols] at
// `dst`; `to_block` false copies the other way (dense [rows, cols] at `src` into the block of
// `dst`). T: float, or the 16-bit storage of the looked-up rows in mixed precision.
template <typename T>
void CopyColumns(const T* src, T* dst, int64_t rows, int64_t stride, int64_t col, int64_t cols,
                 bool to_block) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      if (to_block) {
        dst[r * cols + j] = src[r * stride + col + j];
      } else {
        dst[r * stride + col + j] = src[r * cols + j];
      }
    }
  }
}

// A device tensor's contents, byte for byte, as `T` (the tensor's element size).
template <typename T>
std::vector<T> Download(Backend& backend, const Tensor& t) {
  SY_CHECK_EQ(DTypeSize(t.dtype()), sizeof(T)) << "download of " << t.ToString();
  std::vector<T> out(static_cast<size_t>(t.numel()));
  backend.CopyAsync(t, Tensor::Wrap(out.data(), t.dtype(), t.shape()), backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());
  return out;
}

Status CheckDivides(int64_t hidden, int size) {
  if (hidden <= 0 || hidden % size != 0) {
    return InvalidArgumentError("embedding partition: hidden_size " + std::to_string(hidden) +
                                " is not a positive multiple of the group size " +
                                std::to_string(size));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<EmbeddingPartition>> EmbeddingPartition::Create(
    Backend& backend, Communicator& comm, int64_t vocab, int64_t hidden, bool with_grad,
    DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return InvalidArgumentError("embedding partition: the table must be f32, bf16 or f16, not " +
                                std::string(DTypeName(dtype)));
  }
  SY_RETURN_IF_ERROR(CheckDivides(hidden, comm.size()));
  if (vocab <= 0) {
    return InvalidArgumentError("embedding partition: vocab_size " + std::to_string(vocab) +
                                " must be positive");
  }
  if (!comm.host_buffers()) {
    return InvalidArgumentError("embedding partition: communicator " + comm.name() + " (" +
                                std::string(comm.kind()) + ") does not move host memory");
  }
  const int64_t cols = hidden / comm.size();
  std::unique_ptr<EmbeddingPartition> e(new EmbeddingPartition(&comm, vocab, cols));
  SY_ASSIGN_OR_RETURN(e->table_, backend.Allocate(dtype, Shape{vocab, cols}));
  if (with_grad) {
    SY_ASSIGN_OR_RETURN(e->dtable_, backend.Allocate(DType::kF32, Shape{vocab, cols}));
  }
  return e;
}

template <typename T>
Status EmbeddingPartition::ExchangeRows(Backend& backend, size_t total, const Tensor& out) {
  const int size = comm_->size(), me = comm_->rank();
  const int64_t n = out.dim(0), h = hidden();
  const size_t c = static_cast<size_t>(cols_);
  const DType dtype = table_.dtype();
  std::vector<T> rows;
  if (total > 0) {
    SY_ASSIGN_OR_RETURN(Tensor rows_dev,
                        backend.Allocate(dtype, Shape{static_cast<int64_t>(total), cols_}));
    backend.EmbeddingGather(table_, all_ids_, rows_dev);
    rows = Download<T>(backend, rows_dev);
  }

  // 3. Rank p's rows go back to p; this rank receives one [n, C] piece per column slice.
  std::vector<size_t> send_counts(static_cast<size_t>(size)),
      send_displs(static_cast<size_t>(size));
  std::vector<size_t> recv_counts(static_cast<size_t>(size)),
      recv_displs(static_cast<size_t>(size));
  for (int p = 0; p < size; ++p) {
    const size_t sp = static_cast<size_t>(p);
    send_counts[sp] = counts_[sp] * c;
    send_displs[sp] = displs_[sp] * c;
    recv_counts[sp] = static_cast<size_t>(n) * c;
    recv_displs[sp] = sp * static_cast<size_t>(n) * c;
    if (p != me) traffic_.forward_bytes += static_cast<int64_t>(send_counts[sp] * sizeof(T));
  }
  std::vector<T> pieces(static_cast<size_t>(size) * static_cast<size_t>(n) * c);
  SY_RETURN_IF_ERROR(comm_->AllToAllV(rows.data(), send_counts, send_displs, pieces.data(),
                                      recv_counts, recv_displs, dtype));
  if (n > 0) {
    std::vector<T> full(static_cast<size_t>(n * h));
    for (int q = 0; q < size; ++q) {
      CopyColumns(pieces.data() + recv_displs[static_cast<size_t>(q)], full.data(), n, h, q * cols_,
                  cols_, /*to_block=*/false);
    }
    // The rows as the table holds them, widened (exactly) where out is f32.
    SY_ASSIGN_OR_RETURN(Tensor assembled, backend.Allocate(dtype, out.shape()));
    backend.CopyAsync(Tensor::Wrap(full.data(), dtype, out.shape()), assembled,
                      backend.compute_stream());
    backend.SynchronizeStream(backend.compute_stream());
    backend.Convert(assembled, out);
  }
  local_tokens_ = n;
  have_forward_ = true;
  return Status::Ok();
}

Status EmbeddingPartition::Forward(Backend& backend, const Tensor& ids, const Tensor& out) {
  Release();
  const int size = comm_->size();
  const int64_t n = ids.numel(), h = hidden();
  SY_CHECK(out.rank() == 2 && out.dim(0) == n && out.dim(1) == h)
      << "EmbeddingPartition::Forward: out " << out.ToString() << " for " << n << " ids";
  std::vector<int32_t> local_ids;
  if (n > 0) {
    SY_ASSIGN_OR_RETURN(local_ids, DownloadI32(backend, ids));
  }

  // 1. Every rank's ids, in rank order.
  std::vector<int64_t> counts(static_cast<size_t>(size));
  const int64_t n64 = n;
  SY_RETURN_IF_ERROR(comm_->AllGather<int64_t>(std::span<const int64_t>(&n64, 1), counts));
  counts_.assign(static_cast<size_t>(size), 0);
  displs_.assign(static_cast<size_t>(size), 0);
  size_t total = 0;
  for (int p = 0; p < size; ++p) {
    counts_[static_cast<size_t>(p)] = static_cast<size_t>(counts[static_cast<size_t>(p)]);
    displs_[static_cast<size_t>(p)] = total;
    total += counts_[static_cast<size_t>(p)];
  }
  std::vector<int32_t> all_ids(total);
  SY_RETURN_IF_ERROR(comm_->AllGatherV<int32_t>(local_ids, all_ids, counts_, displs_));
  traffic_.forward_bytes +=
      static_cast<int64_t>((size - 1) * (sizeof(int64_t) + static_cast<size_t>(n) * 4));

  // 2. The local columns of every gathered id, in the table's dtype (exact: they are its values).
  if (total > 0) {
    SY_ASSIGN_OR_RETURN(all_ids_, UploadI32(backend, all_ids, Shape{static_cast<int64_t>(total)}));
  }
  if (table_.dtype() == DType::kF32) return ExchangeRows<float>(backend, total, out);
  return ExchangeRows<uint16_t>(backend, total, out);
}

Status EmbeddingPartition::Backward(Backend& backend, const Tensor& dout) {
  SY_CHECK(have_forward_) << "EmbeddingPartition::Backward without a Forward";
  SY_CHECK(dtable_.defined()) << "EmbeddingPartition::Backward on a forward-only table";
  const int size = comm_->size(), me = comm_->rank();
  const int64_t n = local_tokens_, h = hidden();
  SY_CHECK(dout.rank() == 2 && dout.dim(0) == n && dout.dim(1) == h)
      << "EmbeddingPartition::Backward: dout " << dout.ToString() << " for " << n << " ids";
  const size_t c = static_cast<size_t>(cols_);

  // 1. Column slice q of this rank's gradient rows goes to rank q.
  std::vector<float> send(static_cast<size_t>(n * h));
  if (n > 0) {
    SY_ASSIGN_OR_RETURN(std::vector<float> d, DownloadF32(backend, dout));
    for (int q = 0; q < size; ++q) {
      float* block = send.data() + static_cast<size_t>(q) * static_cast<size_t>(n) * c;
      CopyColumns(d.data(), block, n, h, q * cols_, cols_, /*to_block=*/true);
    }
    if (prescale_ != 1.0f) {
      for (float& v : send) v *= prescale_;
    }
  }
  std::vector<size_t> send_counts(static_cast<size_t>(size)),
      send_displs(static_cast<size_t>(size));
  std::vector<size_t> recv_counts(static_cast<size_t>(size)),
      recv_displs(static_cast<size_t>(size));
  size_t total = 0;
  for (int p = 0; p < size; ++p) {
    const size_t sp = static_cast<size_t>(p);
    send_counts[sp] = static_cast<size_t>(n) * c;
    send_displs[sp] = sp * static_cast<size_t>(n) * c;
    recv_counts[sp] = counts_[sp] * c;
    recv_displs[sp] = displs_[sp] * c;
    total += counts_[sp];
    if (p != me) traffic_.backward_bytes += static_cast<int64_t>(send_counts[sp] * sizeof(float));
  }
  std::vector<float> drows(total * c);
  SY_RETURN_IF_ERROR(
      comm_->AllToAllV<float>(send, send_counts, send_displs, drows, recv_counts, recv_displs));

  // 2. Into the local gradient slice, in the gathered ids' order.
  if (total > 0) {
    SY_ASSIGN_OR_RETURN(Tensor drows_dev,
                        UploadF32(backend, drows, Shape{static_cast<int64_t>(total), cols_}));
    backend.EmbeddingScatterAdd(drows_dev, all_ids_, dtable_);
  }
  return Status::Ok();
}

void EmbeddingPartition::Release() {
  have_forward_ = false;
  local_tokens_ = 0;
  counts_.clear();
  displs_.clear();
  all_ids_ = Tensor();
}

Result<EmbeddingPartition*> InstallEmbeddingPartition(MoeModel& model, Communicator& comm) {
  const ModelConfig& config = model.config();
  if (config.tie_word_embeddings) {
    return FailedPreconditionError(
        "embedding partition: tie_word_embeddings is set; the LM head would need the whole "
        "[vocab, hidden] table on every rank, which the partition removes");
  }
  Parameter* p = model.parameters().Find("embed_tokens");
  SY_CHECK(p != nullptr) << "the model has no embed_tokens parameter";
  if (p->is_column_shard()) {
    return FailedPreconditionError("embedding partition: embed_tokens is already partitioned");
  }
  Backend& backend = model.backend();
  SY_ASSIGN_OR_RETURN(auto partition, EmbeddingPartition::Create(
                                          backend, comm, config.vocab_size, config.hidden_size,
                                          model.options().with_grad, p->value.dtype()));
  SY_ASSIGN_OR_RETURN(std::vector<float> full, DownloadF32(backend, p->value));
  const std::vector<float> mine =
      TakeColumnShard(comm.rank(), comm.size(), config.vocab_size, config.hidden_size, full);
  SY_RETURN_IF_ERROR(CopyFromHost(backend, mine, partition->table()));
  if (partition->table_grad().defined()) backend.Fill(partition->table_grad(), 0.0f);

  p->value = partition->table();
  p->grad = partition->table_grad();
  p->col_begin = partition->col_begin();
  p->full_cols = config.hidden_size;
  EmbeddingPartition* raw = partition.get();
  // The replaced Embedding held the last views of the whole table: it is freed here.
  model.set_embedding_compute(std::move(partition));
  return raw;
}

Result<std::vector<float>> GatherColumnShards(Communicator& comm, int64_t rows, int64_t full_cols,
                                              std::span<const float> shard) {
  SY_RETURN_IF_ERROR(CheckDivides(full_cols, comm.size()));
  const int64_t cols = full_cols / comm.size();
  SY_CHECK_EQ(shard.size(), static_cast<size_t>(rows * cols))
      << "GatherColumnShards: shard size for [" << rows << ", " << cols << "]";
  std::vector<float> shards(shard.size() * static_cast<size_t>(comm.size()));
  SY_RETURN_IF_ERROR(comm.AllGather<float>(shard, shards));
  std::vector<float> full(static_cast<size_t>(rows * full_cols));
  for (int q = 0; q < comm.size(); ++q) {
    CopyColumns(shards.data() + static_cast<size_t>(q) * shard.size(), full.data(), rows, full_cols,
                q * cols, cols, /*to_block=*/false);
  }
  return full;
}

std::vector<float> TakeColumnShard(int rank, int size, int64_t rows, int64_t full_cols,
                                   std::span<const float> full) {
  SY_CHECK(size > 0 && full_cols % size == 0 && rank >= 0 && rank < size)
      << "TakeColumnShard: rank " << rank << " of " << size << ", " << full_cols << " columns";
  SY_CHECK_EQ(full.size(), static_cast<size_t>(rows * full_cols)) << "TakeColumnShard: size";
  const int64_t cols = full_cols / size;
  std::vector<float> shard(static_cast<size_t>(rows * cols));
  CopyColumns(full.data(), shard.data(), rows, full_cols, rank * cols, cols, /*to_block=*/true);
  return shard;
}

}  // namespace sy
