#!/usr/bin/env bash
# Installs the dependencies, builds Switchyard and runs its main job end to end on the embedded
# defaults: the backend self-check on every device this machine has (cpu, sim, and cuda if a GPU
# is present). No network beyond the package registries, no GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/switchyard --version
build/switchyard selftest
