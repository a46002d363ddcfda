#!/usr/bin/env bash
# llama.cpp agrees with Switchyard on GGUF (issue 17; docs/formats.md "llama.cpp agrees"): builds
# llama.cpp from the llama-cpp-python sdist on PyPI (scripts/build-llamacpp.sh, cached), then runs
# scripts/llamacpp_agreement.py: for each family a small model in Hugging Face format,
#   (a) `switchyard convert` -> GGUF -> llama-simple (greedy): the same tokens as
#       `switchyard generate`;
#   (b) llama.cpp's convert_hf_to_gguf.py -> GGUF -> `switchyard generate`: the same tokens.
# Runnable by hand; not part of the CI test run. Exits 1 only when Switchyard disagrees; llama.cpp's
# tools failing on llama.cpp's own conversions are printed as notes ("llama.cpp's tool failed on
# its own conversion: ...") and do not change the exit status.
#
#   scripts/llamacpp-agreement.sh [FAMILY...]     (mixtral qwen2_moe qwen3_moe olmoe deepseek
#                                                  glm4_moe)
#
# Environment: SWITCHYARD (default build/switchyard), WORK (default
# ${BUILD_DIR:-build}/llamacpp_agreement), LLAMACPP_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
switchyard=${SWITCHYARD:-build/switchyard}
[[ -x $switchyard ]] || { echo "error: $switchyard is not built (scripts/build.sh)" >&2; exit 1; }
ll=$(scripts/build-llamacpp.sh | tail -1)
exec /usr/bin/python3 scripts/llamacpp_agreement.py "$switchyard" "$ll" \
  "${WORK:-${BUILD_DIR:-build}/llamacpp_agreement}" "$@"
