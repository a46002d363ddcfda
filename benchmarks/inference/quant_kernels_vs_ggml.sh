#!/usr/bin/env bash
# Switchyard's q4_0 / q8_0 / q4_k / q5_k / q6_k GEMV kernels against ggml's, per weight block, one
# thread (issues 18, 42):
# compiles quant_kernels_vs_ggml.cc against this tree's runtime library and llama.cpp's ggml-cpu
# (scripts/build-llamacpp.sh, cached), then runs it on a GEMV whose weights stay in L2 and on one
# that streams them from DRAM. Runnable by hand; not part of the CI test run.
#
#   benchmarks/inference/quant_kernels_vs_ggml.sh
#
# Environment: BUILD_DIR (default build: its runtime/libsy_runtime.a, so build that target
# first, e.g. `ninja -C build sy_runtime`), SHAPES (default "256x1024 32768x1024"), ROUNDS (7).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
shapes=${SHAPES:-256x1024 32768x1024}
lib=$build/runtime/libsy_runtime.a
[[ -f $lib ]] || { echo "error: $lib is missing: ninja -C $build sy_runtime" >&2; exit 1; }
ll=$(scripts/build-llamacpp.sh | tail -1)
ggml=$ll/build/ggml/src
exe=$build/quant_kernels_vs_ggml
${CXX:-g++} -O2 -march=native -std=c++20 -Wall -Wextra -Werror -I. \
  benchmarks/inference/quant_kernels_vs_ggml.cc "$lib" "$ggml/libggml-cpu.a" "$ggml/libggml-base.a" \
  -fopenmp -lpthread -o "$exe"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
first=1
for s in $shapes; do
  if ((first)); then "$exe" "${s%x*}" "${s#*x}" "${ROUNDS:-7}"; else "$exe" "${s%x*}" "${s#*x}" "${ROUNDS:-7}" | tail -n +3; fi
  first=0
done
