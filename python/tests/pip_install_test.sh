#!/usr/bin/env bash
# `pip install .` in a fresh venv, as a user does from a checkout, then the package from there:
# generate from a tiny training run and from a tiny Hugging Face model with a tokenizer, and the
# whole pytest suite against the installed package. Prints "PASS: " or "FAIL: ".
#
#   pip_install_test.sh SOURCE_DIR WORK_DIR [SWITCHYARD_BINARY]
# ctest (python_pip_install) runs it. The venv sees the system's packages (numpy, torch, pytest,
# scikit-build-core, nanobind: scripts/install-deps.sh), so the install needs no network
# (--no-build-isolation); CUDA is off to keep it short (the libraries build from scratch).
set -euo pipefail
source=$(realpath "$1") work=$(realpath -m "$2") binary=${3:-}
fail() { echo "FAIL: $*"; exit 1; }

rm -rf "$work"
mkdir -p "$work"
/usr/bin/python3 -m venv --system-site-packages "$work/venv" || fail "python3 -m venv"
python=$work/venv/bin/python
# One compile job: ctest runs this beside the other tests on the same cores.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-1}
start=$(date +%s)
"$python" -m pip install --no-build-isolation --no-deps \
    --config-settings=cmake.define.SY_ENABLE_CUDA=OFF \
    --config-settings=build-dir="$work/build" "$source" >"$work/pip.log" 2>&1 ||
  { tail -50 "$work/pip.log"; fail "pip install $source"; }
echo "pip install: $(( $(date +%s) - start )) s"

# Outside the checkout, so that `import switchyard` can only be the installed package.
cd "$work"
where=$("$python" -c "import switchyard; print(switchyard.__file__)")
[[ $where == "$work/venv/"* ]] || fail "import switchyard found $where, not the venv's"

SY_SOURCE=$source "$python" - <<'PY' || fail "generating from the installed package"
import os, sys
sys.path.insert(0, os.path.join(os.environ["SY_SOURCE"], "tests", "inference"))
import switchyard
final = switchyard.train(os.path.join(os.environ["SY_SOURCE"], "examples/configs/tiny.json"),
                         overrides={"train.steps": 100, "checkpoint.dir": "runs/tiny",
                                    "log.progress": "none"})
print("trained runs/tiny: eval loss", round(final["eval_loss"], 4))
tiny = switchyard.Model.load("runs/tiny")
print("runs/tiny:", tiny.generate([8, 19, 23, 16, 27, 1], max_tokens=8, stop_token_ids=[2]).ids)
import tiny_chat_model
tiny_chat_model.write("tiny-qwen3")
hf = switchyard.Model.load("tiny-qwen3")
answer = hf.chat([{"role": "user", "content": "Hello"}], max_tokens=8)
print("tiny-qwen3:", repr(answer.text), answer.ids)
assert answer.ids and answer.text == hf.detokenize(answer.ids)
PY

SWITCHYARD_BINARY=$binary "$python" -m pytest -q -p no:cacheprovider --basetemp="$work/pytest" \
    "$source/python/tests" || fail "the pytest suite against the installed package"
echo "PASS: pip install . in a fresh venv; the installed package generates and passes its tests"
