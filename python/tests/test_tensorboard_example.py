"""examples/python/train_tensorboard.py: the scalars in the TensorBoard event file it writes, read
back with the TFRecord framing and tensorboardX's Event protobuf, are log.metrics' values."""
import glob
import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import REPO, THREADS


def read_scalars(event_file):
    event_pb2 = pytest.importorskip("tensorboardX.proto.event_pb2")
    scalars = {}
    with open(event_file, "rb") as f:
        data = f.read()
    offset = 0
    while offset < len(data):  # TFRecord: u64 length, u32 crc, payload, u32 crc
        (length,) = struct.unpack_from("<Q", data, offset)
        event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
        offset += 12 + length + 4
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_the_example_streams_the_metrics(tmp_path):
    pytest.importorskip("tensorboardX")
    logdir, metrics = tmp_path / "tb", tmp_path / "metrics.jsonl"
    example = os.path.join(REPO, "examples", "python", "train_tensorboard.py")
    subprocess.run([sys.executable, example,
                    "--logdir", str(logdir), "--set", "train.steps=60", "--set",
                    f"log.metrics={metrics}", "--set", f"train.threads={THREADS}",
                    "--set", "train.eval_every=30"],
                   check=True, capture_output=True, text=True, timeout=300)
    scalars = read_scalars(glob.glob(str(logdir / "events.out.tfevents.*"))[0])
    records = [json.loads(line) for line in open(metrics)]
    steps = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_loss" in r]
    assert scalars["train/loss"] == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in steps]
    assert [s for s, _ in scalars["eval/loss"]] == [r["step"] for r in evals] == [30, 60]
    assert scalars["expert_load/layer1/expert3"][-1][1] == steps[-1]["expert_load"][1][3]
