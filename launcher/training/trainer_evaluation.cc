// Trainer::Evaluate: the loss and per-task accuracy on the held-out batches (trainer.h).
#include "launcher/training/trainer.h"

#include <algorithm>

namespace sy::launcher {

Result<EvalReport> Trainer::Evaluate() {
  EvalReport report;
  report.step = step_;
  report.accuracy = TaskAccuracy(dataset_->num_tasks());
  eval_batcher_->Rewind();
  Batch batch;
  double loss_sum = 0;
  for (int64_t b = 0; b < config_.train.eval_batches; ++b) {
    SY_RETURN_IF_ERROR(eval_batcher_->Next(&batch));
    SY_ASSIGN_OR_RETURN(LossReport loss, model_->Forward(batch.tokens, batch.targets));
    loss_sum += loss.ce_loss;
    const Tensor& logits = model_->logits();
    Tensor host_logits = logits;
    if (!host_backend()) {
      SY_ASSIGN_OR_RETURN(host_logits, Tensor::TryHost(DType::kF32, logits.shape()));
      backend_->CopyAsync(logits, host_logits, backend_->compute_stream());
    }
    backend_->Synchronize();
    const int64_t rows = host_logits.dim(0), vocab = host_logits.dim(1);
    SY_ASSIGN_OR_RETURN(Tensor predictions, Tensor::TryHost(DType::kI32, batch.targets.shape()));
    const float* l = host_logits.data<float>();
    int32_t* pred = predictions.data<int32_t>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = l + r * vocab;
      pred[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
    report.accuracy.Add(batch, predictions);
    model_->ReleaseActivations();
  }
  report.loss = static_cast<float>(loss_sum / static_cast<double>(config_.train.eval_batches));
  report.summary = report.accuracy.ToString(*dataset_);
  return report;
}

}  // namespace sy::launcher
