"""switchyard.train: a training run from Python, the same run as `switchyard train`.

    import switchyard
    final = switchyard.train("examples/configs/tiny.json",
                             overrides={"train.steps": 200, "checkpoint.dir": "runs/tiny"},
                             on_metrics=lambda record: print(record["step"], record.get("loss")))

The run prints its progress, writes log.metrics, checkpoints and evaluations exactly as the CLI
does (docs/training.md). Under `mpirun -np N python script.py` each rank runs its share, as
`mpirun -np N switchyard train` does; MPI is started inside, so a process runs one distributed
train() (a single process may run several one after another).
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping, Optional, Union

from . import _switchyard

Config = Union[str, "os.PathLike[str]", Mapping[str, Any]]


def _override_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)  # bool as true/false, numbers, lists and dicts as JSON


def train(
    config: Config,
    *,
    overrides: Optional[Mapping[str, Any]] = None,
    on_metrics: Optional[Callable[[dict], None]] = None,
    resume: bool = False,
    resume_from: Optional[str] = None,
) -> Optional[dict]:
    """Trains a model and returns the final evaluation record (None when the run made none).

    config: a JSON config file, or the config itself as a dict (docs/training.md).
    overrides: {"train.steps": 100, "checkpoint.dir": "runs/x"}: as `--set key=value`.
    on_metrics: called with each record of log.metrics (a dict: per logged step "step", "loss",
        "lr", "grad_norm", "tokens_per_s", ...; per evaluation "eval_loss", "eval_tasks", ...),
        whether or not log.metrics is set. If it raises, the run stops after the step, writes a
        checkpoint (with checkpoint.dir) and the exception propagates.
    resume: continue from the newest checkpoint in checkpoint.dir; resume_from: from this file.

    Ctrl-C (or SIGTERM) stops the run after the current step with a checkpoint and raises
    KeyboardInterrupt (SIGTERM returns); a second Ctrl-C ends the process at once. One train()
    runs at a time in a process.
    """
    if isinstance(config, Mapping):
        config_path, config_text = "<dict>", json.dumps(config)
    else:
        config_path, config_text = os.fspath(config), ""
    sets = [f"{key}={_override_value(value)}" for key, value in (overrides or {}).items()]
    final = _switchyard.train(
        config_path=config_path,
        config_text=config_text,
        overrides=sets,
        resume=bool(resume),
        resume_from=os.fspath(resume_from) if resume_from else "",
        on_metrics=on_metrics,
    )
    return json.loads(final) if final else None
