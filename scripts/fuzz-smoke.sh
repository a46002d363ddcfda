#!/usr/bin/env bash
# Builds every libFuzzer target with clang (ASan+UBSan) and runs each for a short smoke run.
# FUZZ_SECONDS (default 20) per target. Fails if a fuzzer finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-20}
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSY_BUILD_FUZZERS=ON -DSY_BUILD_TESTS=OFF -DSY_BUILD_BENCHMARKS=OFF -DSY_ENABLE_CUDA=OFF \
  -DSY_NATIVE=ON >/dev/null
mapfile -t fuzzers < <(find fuzz -mindepth 2 -name '*_fuzzer.cc' -exec basename {} .cc \; | sort)
if [ ${#fuzzers[@]} -eq 0 ]; then
  echo "fuzz-smoke: no fuzz targets"
  exit 0
fi
cmake --build "$build_dir" -j "$(nproc)" --target "${fuzzers[@]}"
# A crash keeps its input and the whole log under $build_dir/fuzz-artifacts/<target>/.
for f in "${fuzzers[@]}"; do
  src=$(find fuzz -name "$f.cc" | head -1)
  corpus_seed="$(dirname "$src")/corpus"
  work=$(mktemp -d)
  [ -d "$corpus_seed" ] && cp -r "$corpus_seed/." "$work/"
  artifacts="$build_dir/fuzz-artifacts/$f"
  mkdir -p "$artifacts"
  echo "fuzz-smoke: $f for ${seconds}s"
  exe=$(find "$build_dir/fuzz" -type f -name "$f" -perm -u+x | head -1)
  if [ -z "$exe" ]; then
    echo "fuzz-smoke: $f was not built under $build_dir/fuzz (is it in a CMakeLists.txt?)"
    exit 1
  fi
  if ! "$exe" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$artifacts/" \
      "$work" >"$artifacts/log" 2>&1; then
    tail -n 60 "$artifacts/log"
    echo "fuzz-smoke: $f FAILED; the input and the full log are in $artifacts/"
    rm -rf "$work"
    exit 1
  fi
  tail -n 3 "$artifacts/log"
  rm -rf "$work"
done
echo "fuzz-smoke: ${#fuzzers[@]} targets ran clean"
