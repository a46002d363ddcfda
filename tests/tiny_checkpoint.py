"""The one-step checkpoint of examples/configs/tiny.json that the command-line tests generate,
serve and convert from: `train_tiny(binary, ckpt_dir, "model.num_experts=8", ...)` trains it
into ckpt_dir and returns that directory (an AssertionError with the run's stderr otherwise)."""
import os
import subprocess

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TINY = os.path.join(ROOT, "examples", "configs", "tiny.json")


def train_tiny(binary, ckpt_dir, *sets):
    args = [binary, "train", "--config", TINY]
    for s in ("train.steps=1", "train.eval_every=0", "train.eval_batches=1",
              f"checkpoint.dir={ckpt_dir}", "log.progress=none") + sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return ckpt_dir
