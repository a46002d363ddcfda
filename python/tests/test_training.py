"""switchyard.train: the same run as `switchyard train` (the CLI's metrics, when SWITCHYARD_BINARY
is set), on_metrics receiving log.metrics' records, a config given as a dict, and a run stopped by
a failing callback or by Ctrl-C leaving a checkpoint that resumes."""
import json
import os
import signal
import subprocess
import threading

import pytest

import switchyard

from conftest import REPO, THREADS

TINY = os.path.join(REPO, "examples", "configs", "tiny.json")


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def timing_free(record):
    """A metrics record without its wall-clock fields, which differ between any two runs."""
    drop = {"tokens_per_s", "step_seconds", "phase_seconds"}
    return {k: v for k, v in record.items() if k not in drop}


def test_on_metrics_receives_the_metrics_file(tiny_run):
    run, metrics, records, final = tiny_run
    lines = read_jsonl(metrics)
    assert records == lines and len(lines) >= 10
    assert final == [r for r in lines if "eval_loss" in r][-1] and final["step"] == 200
    assert any(p.endswith(".h5") for p in os.listdir(run))
    # It learned: the loss fell well below its start (ln 28 = 3.3 for a uniform guess).
    losses = [r["loss"] for r in lines if "loss" in r]
    assert losses[-1] < 0.5 * losses[0]


def test_the_same_run_as_the_cli(tiny_run, tmp_path):
    binary = os.environ.get("SWITCHYARD_BINARY")
    if not binary:
        pytest.skip("SWITCHYARD_BINARY is not set")
    cli = tmp_path / "cli"
    subprocess.run([binary, "train", "--config", TINY, "--set", "train.steps=200",
                    "--set", "train.eval_every=100", "--set", f"train.threads={THREADS}",
                    "--set", f"checkpoint.dir={cli}", "--set", f"log.metrics={cli}/m.jsonl"],
                   capture_output=True, text=True, timeout=300, check=True)
    ours = [timing_free(r) for r in read_jsonl(tiny_run[1])]
    assert ours == [timing_free(r) for r in read_jsonl(cli / "m.jsonl")]


def test_a_config_dict_and_overrides(tmp_path):
    with open(TINY) as f:
        config = json.load(f)
    config["train"]["steps"] = 30
    config["checkpoint"] = {"dir": str(tmp_path / "run"), "every": 0}
    final = switchyard.train(config, overrides={"train.eval_every": 0, "train.threads": THREADS,
                                                "log.progress": "lines"})
    assert final["step"] == 30 and os.path.exists(tmp_path / "run" / "step-00000030.h5")
    with pytest.raises(ValueError, match=r"<dict>.*train\.stepz.*did you mean.*steps"):
        switchyard.train(config, overrides={"train.stepz": 3})
    with pytest.raises(FileNotFoundError, match="nope.json"):
        switchyard.train(str(tmp_path / "nope.json"))


def test_a_failing_callback_stops_the_run_with_a_checkpoint(tmp_path):
    run = tmp_path / "run"

    def fail_at_step_40(record):
        if record.get("step") == 40:
            raise RuntimeError("the dashboard is down")

    overrides = {"train.steps": 100, "checkpoint.dir": str(run), "log.every": 20,
                 "train.threads": THREADS, "log.progress": "lines"}
    with pytest.raises(RuntimeError, match="the dashboard is down"):
        switchyard.train(TINY, overrides=overrides, on_metrics=fail_at_step_40)
    assert sorted(p for p in os.listdir(run) if p.endswith(".h5")) == ["step-00000040.h5"]
    final = switchyard.train(TINY, overrides=overrides, resume=True)
    assert final["step"] == 100


def test_ctrl_c_stops_after_the_step_and_resumes(tmp_path):
    run = tmp_path / "run"
    overrides = {"train.steps": 100000, "checkpoint.dir": str(run), "train.threads": THREADS,
                 "log.progress": "lines", "train.eval_every": 0}
    seen = threading.Event()

    def interrupt_once(record):
        if not seen.is_set():
            seen.set()
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C does

    with pytest.raises(KeyboardInterrupt):
        switchyard.train(TINY, overrides=overrides, on_metrics=interrupt_once)
    saved = sorted(p for p in os.listdir(run) if p.endswith(".h5"))
    assert len(saved) == 1 and saved[0].startswith("step-"), saved
    stopped_at = int(saved[0][5:13])
    assert 1 <= stopped_at < 100000
    # Python's own handler is back: a second Ctrl-C is an ordinary KeyboardInterrupt.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    final = switchyard.train(TINY, resume=True, overrides=dict(overrides, **{
        "train.steps": stopped_at + 5}))
    assert final["step"] == stopped_at + 5
