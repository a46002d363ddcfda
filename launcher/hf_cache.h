// Hugging Face cache lookup: `--model ORG/NAME` names a model that `huggingface-cli download` (or
// transformers' from_pretrained) has put in the local cache, as transformers and vLLM take it.
//
// The cache is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub (transformers'
// order). A model lives in `models--ORG--NAME`: `refs/main` names the revision whose files are in
// `snapshots/<revision>/`; without refs/main, the one snapshot there. Nothing is downloaded.
//
// Ownership: values. Thread-safety: pure functions (they read the environment and the disk).
#pragma once

#include <string>

#include "runtime/core/status.h"

namespace sy::launcher {

// `model` itself when it exists on disk; else, when it has the form ORG/NAME, the snapshot
// directory of the cached model; else NotFound saying where it looked and how to download it.
Result<std::string> ResolveModelPath(const std::string& model);

}  // namespace sy::launcher
