"""Switchyard from Python: MoE inference, training and checkpoint conversion over the C++ core.

    import switchyard
    model = switchyard.Model.load("runs/tiny")        # or an HF directory, a .gguf, ORG/NAME
    print(model.generate([8, 19, 23, 16, 27, 1], max_tokens=8, stop_token_ids=[2]).ids)
    switchyard.train("examples/configs/tiny.json", overrides={"train.steps": 100},
                     on_metrics=print)
    switchyard.convert("runs/tiny", "tiny.gguf")
    print(switchyard.inspect("tiny.gguf")["format"])

Errors raise ValueError, FileNotFoundError or switchyard.Error with Switchyard's message.
"""

from ._switchyard import Error, __version__
from .checkpoints import convert, inspect
from .model import Chunk, Completion, Model
from .training import train

__all__ = ["Chunk", "Completion", "Error", "Model", "convert", "inspect", "train", "__version__"]
