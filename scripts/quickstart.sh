#!/usr/bin/env bash
# Installs the dependencies, builds Switchyard and runs its main job end to end on the embedded
# defaults: the backend self-check on every device this machine has (cpu, sim, and cuda if a GPU
# is present), then trains the tiny MoE config on the built-in synthetic tasks (about a minute on
# 2 cores) and saves an HDF5 checkpoint under runs/tiny/. No network beyond the package
# registries, no GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/switchyard --version
build/switchyard selftest
build/switchyard train --config examples/configs/tiny.json \
  --set checkpoint.dir=runs/tiny --set log.metrics=runs/tiny/metrics.jsonl
ls -l runs/tiny
