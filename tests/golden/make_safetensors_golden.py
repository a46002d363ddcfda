#!/usr/bin/env python3
"""Writes tests/golden/tiny.safetensors with Hugging Face's own safetensors library, the reference
implementation of the format, so that safetensors_golden_test.cc checks our reader against a file
we did not write. Deterministic: run it again and the bytes are the same (README.md).

    /usr/bin/python3 tests/golden/make_safetensors_golden.py   # needs torch and safetensors
"""
import os
import sys

import torch
from safetensors.torch import save_file

# Every value is exact in its dtype; safetensors_golden_test.cc states the same numbers.
TENSORS = {
    "embed.weight": torch.tensor([[-1.5, 0.0, 0.25], [1.0, 2.5, -3.0]], dtype=torch.float32),
    "norm.weight": torch.tensor([1.0, -2.0, 0.5, 3.140625], dtype=torch.bfloat16),
    "proj.weight": torch.tensor([[0.5, -0.25], [65504.0, 2.0 ** -10]], dtype=torch.float16),
    "scale": torch.tensor([0.1], dtype=torch.float64),
    "steps": torch.tensor([-1, 0, 1 << 40], dtype=torch.int64),
    "flags": torch.tensor([0, 1, 2, 254, 255], dtype=torch.uint8),
}
METADATA = {"format": "pt", "source": "switchyard tests/golden"}


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny.safetensors")
    save_file(TENSORS, out, metadata=METADATA)
    print("wrote", out, os.path.getsize(out), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
