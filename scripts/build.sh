#!/usr/bin/env bash
# Configures and builds Switchyard into BUILD_DIR (default: build). The CUDA backend is compiled
# when nvcc is found (on PATH or in /usr/local/cuda/bin). A new build tree is configured as Release
# (-O3, as llama.cpp builds; RelWithDebInfo for debugging: pass -DCMAKE_BUILD_TYPE=RelWithDebInfo).
# Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$build_dir" "$@"
fi
cmake --build "$build_dir" -j "$(nproc)"
