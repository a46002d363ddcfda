#!/usr/bin/env bash
# Installs the dependencies, builds Switchyard and runs its main job end to end on the embedded
# defaults: the backend self-check on every device this machine has (cpu, sim, and cuda if a GPU
# is present), then trains the tiny MoE config on the built-in synthetic tasks (about a minute on
# 2 cores), saves an HDF5 checkpoint under runs/tiny/, draws its pictures, generates from it (copy and reverse, and
# copy again from its Q8_0 GGUF) and serves it over the OpenAI API for one curl request.
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
# Its pictures: loss, per-task accuracy, tokens/s, expert load (PNG and SVG in runs/tiny/plots/).
build/switchyard plot runs/tiny
# Copy, then reverse, 19 23 16 27 with the model just trained (prints 19,23,16,27,2 and
# 27,16,23,19,2).
build/switchyard generate --model runs/tiny --prompt-ids 8,19,23,16,27,1 --max-tokens 8 --stop-tokens 2
build/switchyard generate --model runs/tiny --prompt-ids 9,19,23,16,27,1 --max-tokens 8 --stop-tokens 2
# Quantized: a GGUF of Q8_0 blocks; its experts run on the quantized kernels (prints 19,23,16,27,2).
rm -f runs/tiny-q8_0.gguf
build/switchyard convert --in runs/tiny --out runs/tiny-q8_0.gguf --dtype q8_0
build/switchyard generate --model runs/tiny-q8_0.gguf --prompt-ids 8,19,23,16,27,1 --max-tokens 8 \
  --stop-tokens 2
# Serve it (docs/serving.md) and ask the copy prompt over HTTP; SIGTERM drains and stops it.
build/switchyard serve --model runs/tiny --port 8080 2>runs/tiny/serve.log &
server=$!
for _ in $(seq 300); do
  grep -q "listening on" runs/tiny/serve.log && break
  kill -0 "$server" 2>/dev/null || { cat runs/tiny/serve.log; exit 1; }
  sleep 0.1
done
curl -s http://127.0.0.1:8080/v1/completions -H 'Content-Type: application/json' \
  -d '{"prompt": [8, 19, 23, 16, 27, 1], "max_tokens": 8, "temperature": 0, "stop_token_ids": [2]}'
echo
kill -TERM "$server"
wait "$server"
