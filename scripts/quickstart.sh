#!/usr/bin/env bash
# Installs the dependencies, builds Switchyard and runs its main job end to end on the embedded
# defaults: the backend self-check on every device this machine has (cpu, sim, and cuda if a GPU
# is present), then trains the tiny MoE config on the built-in synthetic tasks (about a minute on
# 2 cores), saves an HDF5 checkpoint under runs/tiny/ and generates from it (copy and reverse).
# No network beyond the package registries, no GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/switchyard --version
build/switchyard selftest
build/switchyard train --config examples/configs/tiny.json \
  --set checkpoint.dir=runs/tiny --set log.metrics=runs/tiny/metrics.jsonl
ls -l runs/tiny
# Copy, then reverse, 19 23 16 27 with the model just trained (prints 19,23,16,27,2 and
# 27,16,23,19,2).
build/switchyard generate --model runs/tiny --prompt-ids 8,19,23,16,27,1 --max-tokens 8 --stop-tokens 2
build/switchyard generate --model runs/tiny --prompt-ids 9,19,23,16,27,1 --max-tokens 8 --stop-tokens 2
