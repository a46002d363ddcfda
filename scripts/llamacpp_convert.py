#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py unchanged under an older torch.

Usage: llamacpp_convert.py PATH/convert_hf_to_gguf.py ARGS...

The converter names torch.float8_e4m3fn and friends (torch >= 2.1) in a dtype table at import
time; Debian's torch 1.13 lacks them. This gives each missing dtype name a placeholder object
that equals nothing else, so the table builds and no tensor ever matches it (a checkpoint with
float8 or uint16-64 tensors cannot be converted this way; ours have none), then runs the script
as __main__ with its own directory on sys.path, as `python convert_hf_to_gguf.py` would.

It also names the BPE pre-tokenizer when the converter does not know the tokenizer. The converter
identifies a BPE pre-tokenizer by hashing the ids of a fixed text (get_vocab_base_pre), and its
table holds only released models' tokenizers, so the small synthetic tokenizers of Switchyard's
tests ("BPE pre-tokenizer was not recognized") stop the conversion of Qwen2-MoE, Qwen3-MoE and
OLMoE, which llama.cpp always gives a "gpt2" vocabulary. For those architectures only, an unknown
hash gets the name llama.cpp uses for the family's released models (PRE_BY_ARCH: the hashes of
Qwen1.5-MoE / Qwen3 give "qwen2", OLMoE's "olmo"), and a banner on stderr says so. Any other
architecture, or a converter without the conversion/ package, fails as before.
"""
import os
import runpy
import sys

import torch

for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16",
             "uint32", "uint64"):
    if not hasattr(torch, name):
        setattr(torch, name, type(f"missing_torch_{name}", (), {})())

PRE_BY_ARCH = {
    "Qwen2MoeForCausalLM": "qwen2",
    "Qwen3MoeForCausalLM": "qwen2",
    "OlmoeForCausalLM": "olmo",
}


def name_unknown_pre_tokenizers():
    try:
        from conversion import base
    except ImportError as e:
        print(f"llamacpp_convert.py: no conversion package ({e}); an unknown BPE pre-tokenizer "
              "stays an error", file=sys.stderr)
        return
    recognize = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer):
        try:
            return recognize(self, tokenizer)
        except NotImplementedError:
            arch = (self.hparams.get("architectures") or [None])[0]
            pre = PRE_BY_ARCH.get(arch)
            if pre is None:
                raise
            bar = "!" * 78
            print(f"\n{bar}\n!! llamacpp_convert.py: llama.cpp does not know this tokenizer's "
                  f"pre-tokenizer hash;\n!! {arch} -> tokenizer.ggml.pre = {pre!r}, the name "
                  f"llama.cpp uses for this family's\n!! released models. The tokens and merges "
                  f"are this tokenizer's own; its split rules are\n!! assumed to be the "
                  f"family's (wrong for a tokenizer that splits otherwise).\n{bar}\n",
                  file=sys.stderr, flush=True)
            return pre

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre


script = os.path.abspath(sys.argv[1])
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))
if "NO_LOCAL_GGUF" not in os.environ:  # as the converter does, before importing gguf
    sys.path.insert(1, os.path.join(os.path.dirname(script), "gguf-py"))
name_unknown_pre_tokenizers()
runpy.run_path(script, run_name="__main__")
