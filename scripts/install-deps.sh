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
  libxxhash-dev
  fio
  python3 python3-numpy python3-torch python3-h5py python3-pip
)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done

# The Hugging Face tokenizers library, the tokenizer test's oracle (not in Debian). Optional and
# best effort: without PyPI the test says it is skipped. --no-deps: the library itself needs
# nothing else, and its hub dependencies would replace Debian's Python packages.
install_tokenizers() {
  /usr/bin/python3 -c "import tokenizers" >/dev/null 2>&1 && return 0
  if ! timeout 300 $SUDO /usr/bin/python3 -m pip install -q --break-system-packages --no-deps \
      "tokenizers==0.23.3" >/dev/null 2>&1; then
    echo "install-deps: could not install tokenizers from PyPI;" \
         "inference_hf_tokenizer_oracle_test will be skipped"
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  install_tokenizers
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
install_tokenizers
