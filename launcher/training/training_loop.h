// RunTrainingLoop: the whole run of a Trainer, as `switchyard train` makes it: resume when
// checkpoint.resume, then steps up to train.steps with progress on `out` (a bar rewritten in place
// or plain lines, log.progress), JSON-lines metrics to log.metrics, evaluations every
// train.eval_every and at the end, checkpoints every checkpoint.every and at the end (the newest
// checkpoint.keep kept), the routing trace to log.routing_trace at the end. It ends with the line
// "final step N eval loss L time Ts accuracy: <per-task accuracy>" and returns the final
// evaluation.
//
// The metrics file (docs/training.md): per logged step {"step", "loss", "ce_loss", "aux_loss",
// "lr", "grad_norm", "tokens_per_s", "skipped", "expert_load", "step_seconds", "phase_seconds":
// {"data", "forward", "backward", "optimizer", "communication"}}; per evaluation {"step",
// "eval_loss", "eval_exact_match"}. A step is logged every log.every steps, at the first step and
// at the last.
//
// Errors: InvalidArgument naming the key when checkpoint.resume is set without checkpoint.dir or
// an output cannot be created (checked before the first step); NotFound when there is no
// checkpoint to resume from; the trainer's errors otherwise.
//
// Distributed: collective over the trainer's world. Every rank prints its progress to its `out`
// (the same global numbers); only rank 0 writes metrics, checkpoints and the routing trace, and
// its failures to do so end the call on every rank.
// Ownership: borrows `trainer` and `out` for the call. Thread-safety: the trainer's thread.
#pragma once

#include <cstdio>

#include "launcher/training/trainer.h"

namespace sy::launcher {

Result<EvalReport> RunTrainingLoop(Trainer& trainer, std::FILE* out);

}  // namespace sy::launcher
