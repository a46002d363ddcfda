"""Fixtures of the Python package's tests: a tiny Switchyard checkpoint trained through
switchyard.train, and a tiny Qwen3-MoE Hugging Face directory (safetensors, tokenizer.json, chat
template, generation_config.json) with its values for the float64 PyTorch oracle of
tests/inference/hf_moe_oracle.py.

The package under test is whatever `import switchyard` finds: the build tree's
(PYTHONPATH=<build>/python, ctest python_api_test) or a pip-installed one (python_pip_install).
SWITCHYARD_BINARY, when set, names the CLI the consistency checks compare with.
"""
import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "inference"))

THREADS = 1


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """runs/tiny, shortened: the quick start's tiny config trained for 200 steps in this process.
    Returns (checkpoint dir, metrics file, the records on_metrics received, the final record)."""
    import switchyard

    run = tmp_path_factory.mktemp("tiny") / "run"
    records = []
    final = switchyard.train(
        os.path.join(REPO, "examples", "configs", "tiny.json"),
        overrides={"train.steps": 200, "train.eval_every": 100, "train.threads": THREADS,
                   "checkpoint.dir": str(run), "log.metrics": str(run / "metrics.jsonl"),
                   "log.progress": "lines"},
        on_metrics=records.append)
    return run, run / "metrics.jsonl", records, final


@pytest.fixture(scope="session")
def oracle():
    return pytest.importorskip("hf_moe_oracle", reason="numpy and torch (python3-torch)")


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory, oracle):
    """A tiny Qwen3-MoE directory with a tokenizer and Qwen3's chat template
    (tests/inference/tiny_chat_model.py). Returns (directory, config, the stored values)."""
    import tiny_chat_model

    model_dir = str(tmp_path_factory.mktemp("hf") / "tiny-qwen3")
    config, values = tiny_chat_model.write(model_dir, max_position_embeddings=256)
    return model_dir, config, values


@pytest.fixture(scope="session")
def qwen3_model(tiny_qwen3):
    import switchyard

    return switchyard.Model.load(tiny_qwen3[0], threads=THREADS)
