"""switchyard.convert and switchyard.inspect, checked against the `gguf` package (llama.cpp's
gguf-py) reading the converted file, and by loading each converted model: the same logits."""
import os
import re

import numpy as np
import pytest

import switchyard

from conftest import THREADS

PROMPT = [8, 19, 23, 16, 27, 1]


def test_convert_to_gguf_and_hf_keeps_the_model(tiny_run, tmp_path):
    run = str(tiny_run[0])
    lines = []
    done = switchyard.convert(run, str(tmp_path / "tiny.gguf"), progress=lines.append)
    assert done["to"] == "gguf" and done["tensors"] > 0 and lines
    hf = switchyard.convert(run, str(tmp_path / "tiny-hf"), dtype="f32", progress=None)
    assert hf["to"] == "hf"

    report = switchyard.inspect(str(tmp_path / "tiny.gguf"))
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(tmp_path / "tiny.gguf"))
    # inspect lists a stacked expert tensor once per expert, "name[e]".
    ours = {re.sub(r"\[\d+\]$", "", t["name"]) for t in report["tensors"]}
    assert ours == {t.name for t in reader.tensors}

    want = switchyard.Model.load(run, threads=THREADS).logits(PROMPT)
    for converted in ("tiny-hf", "tiny.gguf"):
        got = switchyard.Model.load(str(tmp_path / converted), threads=THREADS).logits(PROMPT)
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max()), converted


def test_a_failing_progress_callback_is_raised_after_the_conversion(tiny_run, tmp_path):
    def fail(line):
        raise RuntimeError("progress bar broke")

    with pytest.raises(RuntimeError, match="progress bar broke"):
        switchyard.convert(str(tiny_run[0]), str(tmp_path / "out.gguf"), progress=fail)
    assert os.path.exists(tmp_path / "out.gguf")  # the conversion itself finished


def test_inspect_reports_and_checks(tiny_run, tmp_path):
    checkpoint = sorted(p for p in os.listdir(tiny_run[0]) if p.endswith(".h5"))[-1]
    report = switchyard.inspect(os.path.join(tiny_run[0], checkpoint), checksums=True)
    assert report["format"] == "native" and report["tensors"]
    with pytest.raises(FileNotFoundError):
        switchyard.inspect(str(tmp_path / "absent.gguf"))
    with pytest.raises(switchyard.Error, match="must not exist|exists") as raised:
        switchyard.convert(str(tiny_run[0]), str(tiny_run[0]), progress=None)
    assert raised.value.code == "AlreadyExists"
