#!/usr/bin/python3
"""The tokenizer metadata (tokenizer.ggml.*) of a GGUF written by `switchyard convert`
(inference/gguf_tokenizer.h), read back by gguf-py (llama.cpp's reader) and compared with values
made independently of Switchyard's tokenizers, by llama.cpp's converter's rules:

1. SentencePiece: a Mixtral model with hf_moe_oracle.write_spm_tokenizer's tokenizer.model (the
   expected pieces, scores and types come from spm_vocabulary, which built the file), fewer pieces
   than the model's vocab_size: tokenizer.ggml.model "llama", pre "default", tokens, scores,
   token_type, the [PADi] padding (unused, -10000), bos/eos/unk ids, add_bos/add_eos from
   tokenizer_config.json, add_space_prefix false.
2. Byte-level BPE: a Qwen2-MoE model with a tokenizer.json trained by the `tokenizers` library
   (Qwen2's split regex, special and non-special added tokens): model "gpt2", pre "qwen2", the
   tokens by id as `tokenizers` numbers them, control / user-defined / normal / unused types,
   the merges in the file's order, the eos id from tokenizer_config.json.
3. A tokenizer with more tokens than the model's vocab_size fails naming tokenizer.model and
   leaves no output.

Usage: gguf_tokenizer_test.py SWITCHYARD WORK_DIR. Exit 77 (skipped) without numpy, torch or gguf;
the BPE case is skipped, saying so, without `tokenizers`, the SentencePiece case when the build
has no libsentencepiece.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "inference"))
import hf_moe_oracle as oracle  # exits 77 without numpy / torch  # noqa: E402

np = oracle.np
try:
    import gguf
except ImportError:
    print("SKIP: the gguf package (gguf-py) is not installed")
    sys.exit(77)
FAILURES = []
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        FAILURES.append(what)
    return ok


def model_dir(work, fam, vocab):
    config, _, _ = oracle.CASES[fam]
    config = dict(config, vocab_size=vocab, bos_token_id=1, eos_token_id=2)
    d = os.path.join(work, fam)
    oracle.write_model(d, config, oracle.make_tensors(fam, config, np.random.default_rng(5)), "F32")
    return d


def convert(binary, src, out):
    if os.path.exists(out):
        os.remove(out)
    return subprocess.run([binary, "convert", "--in", src, "--out", out], capture_output=True,
                          text=True)


def converted(binary, src, out, case, missing_library):
    """Converts; False (saying why) when it fails, or when the build lacks the tokenizer's
    library (the conversion then says `missing_library` and writes no tokenizer: skipped)."""
    r = convert(binary, src, out)
    if missing_library in r.stderr:
        print(f"SKIP {case}: this build has {missing_library}")
        return False
    return check(r.returncode == 0, f"{case}: convert {src}" +
                 ("" if r.returncode == 0 else f": {r.stderr.strip()[-300:]}"))


def fields(path):
    """{key: value}: strings decoded, arrays as lists, scalars as Python numbers."""
    r = gguf.GGUFReader(path)
    out = {}
    for name, f in r.fields.items():
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            vals = [f.parts[i] for i in f.data]
            if f.types[-1] == gguf.GGUFValueType.STRING:
                out[name] = [bytes(v).decode() for v in vals]
            else:
                out[name] = [v[0].item() for v in vals]
        elif f.types[0] == gguf.GGUFValueType.STRING:
            out[name] = bytes(f.parts[f.data[0]]).decode()
        else:
            out[name] = f.parts[f.data[0]][0].item()
    return out


def expect(kv, want, case):
    for key, value in want.items():
        got = kv.get(key)
        if isinstance(value, list) and isinstance(got, list) and len(value) == len(got):
            bad = [i for i in range(len(value)) if got[i] != value[i]]
            check(not bad, f"{case}: {key} ({len(value)} values)" +
                  (f": first difference at {bad[0]}: {got[bad[0]]!r} vs {value[bad[0]]!r}"
                   if bad else ""))
        else:
            check(got == value, f"{case}: {key} = {str(value)[:60]}" +
                  ("" if got == value else f" (got {str(got)[:60]})"))


def spm_case(binary, work):
    vocab, pieces_n = 64, 60
    d = model_dir(work, "mixtral", vocab)
    pieces = oracle.write_spm_tokenizer(d, pieces_n)
    out = os.path.join(work, "spm.gguf")
    if not converted(binary, d, out, "spm", "no libsentencepiece"):
        return
    pad = range(pieces_n, vocab)
    expect(fields(out), {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": [p for p, _, _ in pieces] + [f"[PAD{i}]" for i in pad],
        "tokenizer.ggml.scores": [float(np.float32(s)) for _, s, _ in pieces] +
                                 [-10000.0] * len(pad),
        "tokenizer.ggml.token_type": [t for _, _, t in pieces] + [5] * len(pad),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
        "tokenizer.ggml.add_space_prefix": False,
    }, "spm")
    check("tokenizer.ggml.merges" not in fields(out), "spm: no tokenizer.ggml.merges")

    # More pieces than the model has ids: refused, naming the file, no output.
    small = model_dir(os.path.join(work, "small"), "mixtral", 32)
    oracle.write_spm_tokenizer(small, 40)
    bad = os.path.join(work, "too_many.gguf")
    r = convert(binary, small, bad)
    check(r.returncode != 0 and "tokenizer.model" in r.stderr and "vocab_size 32" in r.stderr
          and not os.path.exists(bad),
          "spm: 40 pieces for a vocab of 32 fail naming tokenizer.model, no output" +
          ("" if r.returncode != 0 else " (it converted)"))


def bpe_case(binary, work):
    try:
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        print("SKIP bpe: the tokenizers package is not installed")
        return
    vocab = 400
    d = model_dir(work, "qwen2_moe", vocab)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog " * 20,
                             "pack my box with five dozen liquor jugs 0123456789"], trainer)
    tok.add_tokens(["<tool>"])  # a non-special added token: user-defined
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|endoftext|>", "add_bos_token": False}, f)
    saved = json.load(open(os.path.join(d, "tokenizer.json")))
    out = os.path.join(work, "bpe.gguf")
    if not converted(binary, d, out, "bpe", "no ICU"):
        return
    by_id = {i: t for t, i in tok.get_vocab(with_added_tokens=True).items()}
    added = {a["id"]: a["special"] for a in saved["added_tokens"]}
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(vocab)]
    types = [5 if i not in by_id else (3 if added[i] else 4) if i in added else 1
             for i in range(vocab)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in saved["model"]["merges"]]
    kv = fields(out)
    expect(kv, {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.eos_token_id": tok.token_to_id("<|endoftext|>"),
        "tokenizer.ggml.bos_token_id": 1,  # config.json's bos_token_id
        "tokenizer.ggml.add_bos_token": False,
    }, "bpe")
    check("tokenizer.ggml.scores" not in kv, "bpe: no tokenizer.ggml.scores")
    check(3 in types and 4 in types and 5 in types, "bpe: the case has control, user-defined "
          "and unused ids")


def main():
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    spm_case(binary, work)
    bpe_case(binary, work)
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
