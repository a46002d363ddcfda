#!/usr/bin/python3
"""A tied OLMoE model converted to GGUF loads in llama.cpp, whose olmoe requires output.weight
(found by scripts/llamacpp-agreement.sh): `switchyard convert` writes the embedding again as
output.weight with switchyard.tie_word_embeddings = true, and reading the file ties again.

Checks, with gguf-py (llama.cpp's reader) as the oracle for the file:
  - output.weight is there, with token_embd.weight's type, shape and bytes, and the key is true;
  - GGUF -> HF gives tie_word_embeddings true and no lm_head.weight, every tensor bit for bit as
    the source (inspect --checksums);
  - `switchyard generate` on the GGUF gives the source's greedy tokens;
  - an untied OLMoE keeps its own output.weight and gets no key.

Usage: gguf_tied_output_test.py SWITCHYARD WORK_DIR. Exit 77 without numpy, torch or gguf.
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
KEY = "switchyard.tie_word_embeddings"


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        FAILURES.append(what)
    return ok


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


def checksums(binary, path):
    r = run(binary, "inspect", "--checksums", "--json", path)
    return {t["switchyard_name"]: (t["dtype"], t["shape"], t["crc32c"])
            for t in json.loads(r.stdout)["tensors"]} if r.returncode == 0 else None


def case(binary, work, tied):
    config, _, _ = oracle.CASES["olmoe"]
    config = dict(config, tie_word_embeddings=tied)
    name = "tied" if tied else "untied"
    d = os.path.join(work, name)
    oracle.write_model(d, config, oracle.make_tensors("olmoe", config, np.random.default_rng(3)),
                       "F32")
    out = os.path.join(work, name + ".gguf")
    r = run(binary, "convert", "--in", d, "--out", out)
    if not check(r.returncode == 0, f"{name}: convert -> {out}" +
                 ("" if r.returncode == 0 else f": {r.stderr.strip()[-300:]}")):
        return
    reader = gguf.GGUFReader(out)
    tensors = {t.name: t for t in reader.tensors}
    field = reader.fields.get(KEY)
    if not check("output.weight" in tensors, f"{name}: output.weight is in the file"):
        return
    emb, outw = tensors["token_embd.weight"], tensors["output.weight"]
    same = (emb.tensor_type == outw.tensor_type and list(emb.shape) == list(outw.shape) and
            bytes(emb.data.tobytes()) == bytes(outw.data.tobytes()))
    if tied:
        check(same, f"{name}: output.weight has token_embd.weight's type, shape and bytes")
        check(field is not None and bool(field.parts[field.data[0]][0]), f"{name}: {KEY} = true")
    else:
        check(not same, f"{name}: output.weight is lm_head, not the embedding")
        check(field is None, f"{name}: no {KEY}")
    back = os.path.join(work, name + ".hf")
    r = run(binary, "convert", "--in", out, "--out", back)
    if check(r.returncode == 0, f"{name}: gguf -> hf" +
             ("" if r.returncode == 0 else f": {r.stderr.strip()[-300:]}")):
        cfg = json.load(open(os.path.join(back, "config.json")))
        check(cfg.get("tie_word_embeddings") == tied,
              f"{name}: tie_word_embeddings {tied} after the round trip")
        a, b = checksums(binary, d), checksums(binary, back)
        check(a is not None and a == b, f"{name}: hf -> gguf -> hf: every tensor bit for bit "
              f"({len(a or {})} tensors)")
    g_hf, _ = oracle.run_greedy(binary, d, os.path.join(work, name + ".hf.dl"))
    g_gg, _ = oracle.run_greedy(binary, out, os.path.join(work, name + ".gguf.dl"))
    check(g_hf is not None and g_hf == g_gg,
          f"{name}: generate on the GGUF gives the source's greedy tokens ({g_gg} vs {g_hf})")


def main():
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    case(binary, work, True)
    case(binary, work, False)
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
