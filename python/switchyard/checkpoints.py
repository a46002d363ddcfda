"""switchyard.convert and switchyard.inspect: checkpoints between formats, and what one holds, as
`switchyard convert` and `switchyard inspect --json` (docs/formats.md)."""

from __future__ import annotations

import json
import os
import sys
from typing import Callable, Optional

from . import _switchyard


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def convert(
    input: str,
    output: str,
    *,
    to: Optional[str] = None,
    dtype: Optional[str] = None,
    shard_mib: int = 0,
    ep_size: int = 0,
    progress: Optional[Callable[[str], None]] = _stderr_line,
) -> dict:
    """Converts the checkpoint `input` (a step-*.h5 file, a checkpoint directory, a Hugging Face
    directory or a GGUF file) into `output`, which must not exist.

    to: "native", "hf" or "gguf" (default: native for *.h5, gguf for *.gguf, else hf).
    dtype: "f32", "bf16" or "f16"; for gguf also "q8_0" or "q4_0" (default: the input's).
    shard_mib: shard a Hugging Face output into files of at most this many MiB (0: one file).
    ep_size: a native checkpoint laid out for N expert-parallel ranks (0: not asked).
    progress: called with each progress line (default: printed to stderr; None: quiet).

    Returns {"from": format, "to": format, "tensors": count}.
    """
    source, target, tensors = _switchyard.convert(
        input=os.fspath(input),
        output=os.fspath(output),
        to=to or "",
        dtype=dtype or "",
        shard_mib=int(shard_mib),
        ep_size=int(ep_size),
        progress=progress,
    )
    return {"from": source, "to": target, "tensors": tensors}


def inspect(path: str, *, checksums: bool = False) -> dict:
    """What a checkpoint holds: its format, config and tensors (`switchyard inspect --json`);
    with checksums, every tensor is read and its CRC-32C given."""
    return json.loads(_switchyard.inspect(path=os.fspath(path), checksums=bool(checksums)))
