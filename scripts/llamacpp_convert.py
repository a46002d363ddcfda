#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py unchanged under an older torch.

Usage: llamacpp_convert.py PATH/convert_hf_to_gguf.py ARGS...

The converter names torch.float8_e4m3fn and friends (torch >= 2.1) in a dtype table at import
time; Debian's torch 1.13 lacks them. This gives each missing dtype name a placeholder object
that equals nothing else, so the table builds and no tensor ever matches it (a checkpoint with
float8 or uint16-64 tensors cannot be converted this way; ours have none), then runs the script
as __main__ with its own directory on sys.path, as `python convert_hf_to_gguf.py` would.
"""
import os
import runpy
import sys

import torch

for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16",
             "uint32", "uint64"):
    if not hasattr(torch, name):
        setattr(torch, name, type(f"missing_torch_{name}", (), {})())

script = os.path.abspath(sys.argv[1])
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))
runpy.run_path(script, run_name="__main__")
