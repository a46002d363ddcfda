#!/usr/bin/env bash
# Build llama.cpp from the `llama-cpp-python` source distribution on PyPI (it vendors llama.cpp
# under vendor/llama.cpp), for the comparisons against llama.cpp (docs/formats.md "llama.cpp
# agrees", benchmarks/inference/vs_llamacpp.sh). Needs only PyPI (pip download), cmake and a C++
# compiler. Idempotent: a second run finds the sdist, the source tree and the binaries and does
# nothing.
#
#   scripts/build-llamacpp.sh          # prints the directory holding bin/ and convert_hf_to_gguf.py
#
# Environment: LLAMACPP_CACHE (default ~/.cache/switchyard/llama.cpp), LLAMACPP_PY_VERSION (the
# pinned llama-cpp-python release, default 0.3.36), JOBS (default nproc), LLAMACPP_AMX (1: keep
# llama.cpp's AMX kernels on a CPU that has AMX; default 0, see below), PYTHON (default
# /usr/bin/python3: pip for the download, and the base of the converter's virtual environment).
# convert_hf_to_gguf.py needs numpy, torch and transformers (Debian's, from PYTHON's site
# packages) and sentencepiece (its Llama/Mixtral path imports it even without a tokenizer.model):
# $LLAMACPP_CACHE/venv gets sentencepiece and protobuf from PyPI, pinned, over PYTHON's packages.
#
# Layout of the cache:
#   $LLAMACPP_CACHE/sdist/llama_cpp_python-VERSION.tar.gz    the download
#   $LLAMACPP_CACHE/VERSION/src/                              vendor/llama.cpp, unpacked
#   $LLAMACPP_CACHE/VERSION/build/bin/llama-*                 the tools
#   $LLAMACPP_CACHE/current -> VERSION                        the last complete build
#   $LLAMACPP_CACHE/venv/bin/python                           runs convert_hf_to_gguf.py, through
#                                                             scripts/llamacpp_convert.py (torch 1.13)
# The last line printed on stdout is $LLAMACPP_CACHE/VERSION; everything else goes to stderr.
set -euo pipefail
version=${LLAMACPP_PY_VERSION:-0.3.36}
cache=${LLAMACPP_CACHE:-$HOME/.cache/switchyard/llama.cpp}
jobs=${JOBS:-$(nproc)}
python=${PYTHON:-/usr/bin/python3}
root=$cache/$version
src=$root/src
build=$root/build
tools=(llama-completion llama-cli llama-simple llama-bench llama-perplexity llama-quantize llama-gguf
       llama-tokenize)
log() { echo "[build-llamacpp] $*" >&2; }

mkdir -p "$cache/sdist"
sdist=$(ls "$cache"/sdist/llama_cpp_python-"$version".tar.gz 2>/dev/null || true)
if [[ -z $sdist ]]; then
  log "downloading llama-cpp-python==$version (source distribution) from PyPI"
  # --no-binary for this package only: its build requirements (scikit-build-core) come as wheels,
  # so that preparing the sdist's metadata does not compile them from source.
  "$python" -m pip download --no-binary llama-cpp-python --no-deps --dest "$cache/sdist" \
    "llama-cpp-python==$version" >&2
  sdist=$(ls "$cache"/sdist/llama_cpp_python-"$version".tar.gz)
fi
log "sdist: $sdist"

if [[ ! -f $src/CMakeLists.txt ]]; then
  log "unpacking vendor/llama.cpp into $src"
  rm -rf "$root/unpack" "$src"
  mkdir -p "$root/unpack"
  tar -xzf "$sdist" -C "$root/unpack"
  vendored=$(ls -d "$root"/unpack/*/vendor/llama.cpp)
  mv "$vendored" "$src"
  rm -rf "$root/unpack"
fi

# The stamp holds the tools built last time: a release without one of them (llama-cli needs the
# server there) does not send every later run back through cmake.
stamp=$build/.switchyard-tools
missing=()
for t in "${tools[@]}"; do [[ -x $build/bin/$t ]] || missing+=("$t"); done
if ((${#missing[@]})) && [[ ! -f $stamp || $(cat "$stamp") != "${tools[*]}" ]]; then
  log "configuring llama.cpp (Release, CPU only, native ISA) in $build"
  # LLAMA_CURL=OFF: no network at run time; GGML_NATIVE=ON: the same ISA switchyard's -march=native
  # build uses, so that the comparison is like for like. LLAMA_BUILD_SERVER=OFF leaves out the
  # server and, in recent releases, the chat llama-cli built on it; llama-completion is the
  # classic one-shot CLI there.
  # On a CPU with AMX, GGML_NATIVE compiles llama.cpp's AMX matmul, which in this release dies
  # with SIGSEGV in ggml_backend_amx_mul_mat on Q8_0 and Q4_0 models (an Intel Xeon, 2026-11-28):
  # build without AMX there (its AVX-512 BF16 / VNNI kernels stay), unless LLAMACPP_AMX=1.
  isa_flags=()
  if grep -qw amx_tile /proc/cpuinfo 2>/dev/null && [[ ${LLAMACPP_AMX:-0} != 1 ]]; then
    log "this CPU has AMX: building without it (-mno-amx-*; LLAMACPP_AMX=1 keeps it)"
    isa_flags=(-DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
               -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
  fi
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DGGML_CUDA=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DBUILD_SHARED_LIBS=OFF "${isa_flags[@]}" >"$root/cmake.log" 2>&1 ||
    { cat "$root/cmake.log" >&2; exit 1; }
  # Build only the targets that exist in this release (llama-cli moved to tools/ and some
  # examples were renamed over time).
  # (The list is captured first: grep -q closing the pipe early would fail it under pipefail.)
  known=$(cmake --build "$build" --target help 2>/dev/null)
  targets=()
  for t in "${missing[@]}"; do
    if grep -q "^$t:" <<<"$known"; then targets+=("$t"); fi
  done
  if ((${#targets[@]})); then
    log "building ${targets[*]} with -j$jobs (minutes on a few cores)"
    cmake --build "$build" -j "$jobs" --target "${targets[@]}" >&2
  fi
  echo "${tools[*]}" >"$stamp"
fi
for t in "${tools[@]}"; do
  if [[ -x $build/bin/$t ]]; then log "ok: $build/bin/$t"; else log "absent in this release: $t"; fi
done
[[ -x $build/bin/llama-simple && -x $build/bin/llama-bench && -x $build/bin/llama-quantize ]] ||
  { log "error: llama-simple, llama-bench or llama-quantize did not build"; exit 1; }
[[ -f $src/convert_hf_to_gguf.py ]] || { log "error: $src/convert_hf_to_gguf.py is missing"; exit 1; }
venv=$cache/venv
if ! "$venv/bin/python" -c 'import sentencepiece, google.protobuf' 2>/dev/null; then
  log "creating $venv (sentencepiece, protobuf from PyPI over $python's packages)"
  "$python" -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install -q sentencepiece==0.2.0 protobuf==4.25.3 >&2
fi
"$venv/bin/python" -c 'import numpy, torch, transformers, sentencepiece' ||
  { log "error: $venv/bin/python lacks numpy, torch or transformers, which the converter needs"; exit 1; }
log "ok: $venv/bin/python scripts/llamacpp_convert.py $src/convert_hf_to_gguf.py"
ln -sfn "$version" "$cache/current"
echo "$root"
