#!/usr/bin/env bash
# Installs every Debian 12 package that Switchyard's build, tests and benchmarks need.
# Idempotent and non-interactive: packages already present are skipped by apt.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang clang-format clang-tidy libclang-rt-14-dev
  libopenmpi-dev openmpi-bin
  liburing-dev libpmem2-dev libhdf5-dev
  libopenblas-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libsentencepiece-dev libicu-dev
  libxxhash-dev libmicrohttpd-dev libpng-dev
  fio curl iproute2
  python3 python3-numpy python3-torch python3-h5py python3-pip
  python3-yaml python3-requests python3-typing-extensions python3-jinja2
  python3-dev python3-venv python3-pytest python3-protobuf python3-jsonschema
)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done

# Hugging Face `tokenizers` and `transformers`, the oracles of the tokenizer and model tests, and
# the `openai` client (not in Debian). Optional and best effort: without PyPI those tests say they are skipped. Pinned and
# --no-deps, each dependency named, so that pip never replaces Debian's torch, numpy, yaml or
# requests. transformers 4.49.0 is the last release that runs on Debian's torch 1.13 (4.50 imports
# torch.distributed.tensor, torch >= 2); it requires tokenizers >= 0.21, < 0.22.
hf_tokenizers=(tokenizers==0.21.4)
hf_transformers=(transformers==4.49.0 huggingface-hub==0.30.2 safetensors==0.5.3
                 regex==2024.11.6 packaging==24.2 filelock==3.16.1 tqdm==4.67.1)
# The official `openai` client, which drives `switchyard serve` in its test. openai 1.54.4 needs
# httpx < 0.28 (0.28 dropped the `proxies` argument it passes) and pydantic 1.9+ (2.9.2 with its
# exact pydantic-core); every dependency is pinned and pure or wheel-built for CPython 3.11.
openai_client=(openai==1.54.4 httpx==0.27.2 httpcore==1.0.7 h11==0.14.0 anyio==4.6.2.post1
               sniffio==1.3.1 idna==3.10 certifi==2024.8.30 distro==1.9.0 jiter==0.7.1
               pydantic==2.9.2 pydantic-core==2.23.4 annotated-types==0.7.0
               typing-extensions==4.12.2 tqdm==4.67.1)

# gguf-py (llama.cpp's GGUF library), the oracle of inference_gguf_oracle_test: pure Python over
# numpy, Debian's python3-yaml and tqdm.
gguf_py=(gguf==0.17.1 tqdm==4.67.1)

# The Python package's build (python/, pyproject.toml): nanobind and scikit-build-core, so that the
# repository's build makes the package and `pip install --no-build-isolation .` works offline; and
# tensorboardX, which examples/python/train_tensorboard.py writes with in its test (over Debian's
# protobuf).
python_package=(nanobind==2.9.2 scikit-build-core==0.11.6 pathspec==0.12.1 packaging==24.2
                tensorboardX==2.6.2.2)

pip_pinned() {  # pip_pinned TEST_NAME PACKAGE==VERSION...
  local test_name=$1
  shift
  local have
  have=$(/usr/bin/python3 -m pip list --format=freeze 2>/dev/null | tr 'A-Z_' 'a-z-' || true)
  local want=()
  for p in "$@"; do
    grep -qx "$(echo "$p" | tr 'A-Z_' 'a-z-')" <<<"$have" || want+=("$p")
  done
  [ ${#want[@]} -eq 0 ] && return 0
  if ! timeout 300 $SUDO /usr/bin/python3 -m pip install -q --break-system-packages --no-deps \
      "${want[@]}" >/dev/null 2>&1; then
    echo "install-deps: could not install ${want[*]} from PyPI; $test_name will be skipped"
  fi
}

install_hf_python() {
  pip_pinned "the Python package (python/)" "${python_package[@]}"
  pip_pinned inference_hf_tokenizer_oracle_test "${hf_tokenizers[@]}"
  pip_pinned inference_hf_transformers_oracle_test "${hf_tokenizers[@]}" "${hf_transformers[@]}"
  pip_pinned serve_openai_test "${openai_client[@]}"
  pip_pinned inference_gguf_oracle_test "${gguf_py[@]}"
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  install_hf_python
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
install_hf_python
