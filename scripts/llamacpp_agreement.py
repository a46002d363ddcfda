#!/usr/bin/python3
"""llama.cpp agrees with Switchyard on GGUF files, in both directions (issue 17). Run it through
scripts/llamacpp-agreement.sh, which builds llama.cpp first.

Usage: llamacpp_agreement.py SWITCHYARD LLAMACPP_DIR WORK_DIR [FAMILY...]

LLAMACPP_DIR is what scripts/build-llamacpp.sh prints (build/bin/llama-simple,
src/convert_hf_to_gguf.py); the converter runs under LLAMACPP_DIR/../venv/bin/python through
scripts/llamacpp_convert.py (torch 1.13).

For each family (default: all five of tests/inference/hf_moe_oracle.py) it writes a small random
F32 model in Hugging Face format with a SentencePiece tokenizer whose pieces are two printable
letters (hf_moe_oracle.write_spm_tokenizer), so that a token sequence printed by llama-simple
reads back into ids, and then:
  reference  `switchyard generate --model HF_DIR` greedy on BOS + the prompt
  (a) ours   `switchyard convert --in HF_DIR --out ours.gguf`; llama-simple (greedy) on the
             prompt text: its tokenization of the prompt must be BOS + the prompt ids, and its
             tokens the reference's, up to the first end-of-generation token, where llama-simple
             stops
  (b) theirs llama.cpp's convert_hf_to_gguf.py HF_DIR --outtype f32; `switchyard generate
             --model theirs.gguf` must give the reference's tokens; the tokenizer.ggml.* keys of
             ours.gguf must equal theirs (gguf-py); llama-simple on theirs.gguf, as a control
  tokenize   llama-tokenize (no BOS, special tokens not parsed) and `switchyard tokenize` (the
             tokenizer read back from the GGUF's tokenizer.ggml.* keys) give the same ids for a
             few texts made of the vocabulary's pieces (llama.cpp aborts on a character that no
             piece covers when there are no byte pieces), on ours.gguf and
             on theirs.gguf where llama.cpp's converter wrote a "llama" vocabulary
A divergence is reported with the top-2 margin of Switchyard's logits at that step (a near tie
flips on rounding). Prints one line per check and a Markdown summary table.

The exit status is Switchyard's agreement alone: 1 on any failure of a check on Switchyard's side.
llama.cpp's own tools failing on llama.cpp's own conversion (llama-simple or llama-tokenize on
theirs.gguf exiting non-zero: refusing a `gpt2` vocabulary that its converter wrote without merges,
aborting on a DeepSeek file without add_space_prefix) is no failure of ours: it is printed as
"note llama.cpp's tool failed on its own conversion: ...", counted in the summary, and leaves the
exit status alone.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "inference"))
import hf_moe_oracle as oracle  # noqa: E402

np = oracle.np
VOCAB = 256
STEPS = 24
PROMPT_PIECES = 10
FAILURES = []
LLAMACPP_OWN = []  # llama.cpp's tools failing on llama.cpp's own conversions (not ours)


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        FAILURES.append(what)
    return ok


def llamacpp_own_failure(what, err):
    """A llama.cpp tool that failed on a GGUF llama.cpp's converter wrote: recorded, not ours."""
    # The tool's own error lines (its log before them is the model's metadata).
    said = [l.strip() for l in err.splitlines()
            if re.search(r"error|terminate called|what\(\)|abort", l, re.IGNORECASE)]
    line = f"llama.cpp's tool failed on its own conversion: {what}: " + (
        " / ".join(dict.fromkeys(said)) if said else err.strip()[-300:])
    print(f"note {line}", flush=True)
    LLAMACPP_OWN.append(line)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, **kw)


def config_for(fam):
    config, _, _ = oracle.CASES[fam]
    c = dict(config, vocab_size=VOCAB, torch_dtype="float32", bos_token_id=1, eos_token_id=2)
    # Wider than the unit-test models, so that llama.cpp's kernels see more than one block.
    c["hidden_size"] = 64
    if "head_dim" in c:
        c["head_dim"] = 16
    if fam == "qwen2_moe":  # llama.cpp's qwen2moe has no dense layers
        c.update(decoder_sparse_step=1, mlp_only_layers=[])
    return c


def write_model(fam, model_dir, seed):
    c = config_for(fam)
    tensors = oracle.make_tensors(fam, c, np.random.default_rng(seed))
    oracle.write_model(model_dir, c, tensors, "F32")
    return oracle.write_spm_tokenizer(model_dir, VOCAB)


def switchyard_greedy(switchyard, model, prompt_ids, dump):
    r = run([switchyard, "generate", "--model", model, "--prompt-ids",
             ",".join(map(str, prompt_ids)), "--max-tokens", str(STEPS), "--dump-decode-logits",
             dump], text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()[-600:]
    return [int(x) for x in r.stdout.strip().split(",")], oracle.read_logits(dump)


def llama_simple(bin_dir, gguf, prompt_text, pieces):
    """(prompt ids, generated ids) as llama-simple printed them, or (None, error)."""
    r = run([os.path.join(bin_dir, "llama-simple"), "-m", gguf, "-n", str(STEPS), prompt_text])
    if r.returncode != 0:
        return None, r.stderr.decode(errors="replace").strip()[-800:]
    text = r.stdout.decode(errors="replace").rstrip("\n")
    # What llama_token_to_piece(..., special=true) prints: a piece's text, a control or unknown
    # token's text (some releases print U+2585 for the unknown token).
    shown = {p: i for i, (p, _, t) in enumerate(pieces)}
    shown["\u2585"] = 0
    ids, k = [], 0
    while k < len(text):
        for n in (5, 4, 3, 2, 1):
            if text[k:k + n] in shown:
                ids.append(shown[text[k:k + n]])
                k += n
                break
        else:
            return None, f"cannot read llama-simple's output back into tokens at {text[k:k+20]!r}"
    return ids, None


def llama_tokenize(bin_dir, gguf, text, work):
    """The ids llama-tokenize gives `text` (no BOS, special tokens not parsed), or (None, error)."""
    path = os.path.join(work, "tokenize.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    r = run([os.path.join(bin_dir, "llama-tokenize"), "-m", gguf, "-f", path, "--ids", "--no-bos",
             "--no-parse-special", "--no-escape", "--log-disable"])
    if r.returncode != 0:
        return None, r.stderr.decode(errors="replace").strip()[-400:]
    return json.loads(r.stdout.decode().strip().splitlines()[-1]), None


def switchyard_tokenize(switchyard, gguf, text):
    r = run([switchyard, "tokenize", "--model", gguf, "--text", text])
    if r.returncode != 0:
        return None, r.stderr.decode(errors="replace").strip()[-400:]
    out = r.stdout.decode().strip()
    return [int(x) for x in out.split(",")] if out else [], None


def tokenizers_agree(switchyard, bin_dir, gguf, texts, what, work, theirs=False):
    """Second tokenizer oracle: llama-tokenize and `switchyard tokenize` (the tokenizer read back
    from the GGUF's tokenizer.ggml.* keys) give each text the same ids. Returns "same ids",
    "differs", "llama-tokenize failed", or None when llama-tokenize is not built. With `theirs`
    (a GGUF llama.cpp's converter wrote), llama-tokenize failing is llama.cpp's own failure."""
    if not os.path.exists(os.path.join(bin_dir, "llama-tokenize")):
        print(f"SKIP {what}: no llama-tokenize in {bin_dir}")
        return None
    for text in texts:
        want, err = llama_tokenize(bin_dir, gguf, text, work)
        if want is None and theirs:
            llamacpp_own_failure(f"{what}: llama-tokenize", err)
            return "llama-tokenize failed (llama.cpp's own conversion)"
        if not check(want is not None, f"{what}: llama-tokenize" + (f": {err}" if err else "")):
            return "llama-tokenize failed"
        got, err = switchyard_tokenize(switchyard, gguf, text)
        if not check(got == want, f"{what}: switchyard tokenize = llama-tokenize on {text[:30]!r}"
                     + (f": {err}" if err else f" ({got} vs {want})" if got != want else "")):
            return "differs"
    return "same ids"


def until_eog(ids):
    return ids[:ids.index(2)] if 2 in ids else ids


def compare(what, got, want, logits):
    """got: llama-side ids (already cut at end of generation when cut); want: reference."""
    if got == want:
        return check(True, f"{what}: {len(got)} tokens equal")
    n = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
             min(len(got), len(want)))
    margin = ""
    if logits is not None and n < len(logits):
        top = np.sort(logits[n])[-2:]
        margin = f"; Switchyard's top-2 logit margin there {top[1] - top[0]:.3g}"
    return check(False, f"{what}: first difference at step {n}{margin}: {got} vs {want}")


def gguf_tokenizer_keys(path):
    import gguf
    r = gguf.GGUFReader(path)
    out = {}
    for name, f in r.fields.items():
        if not name.startswith("tokenizer.ggml."):
            continue
        if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            vals = [f.parts[i] for i in f.data]
            if f.types[-1] == gguf.GGUFValueType.STRING:
                out[name] = [bytes(v).decode() for v in vals]
            else:
                out[name] = [float(v[0]) for v in vals]
        elif f.types[0] == gguf.GGUFValueType.STRING:
            out[name] = bytes(f.parts[f.data[0]]).decode()
        else:
            out[name] = f.parts[f.data[0]].tolist()
    return out


def main():
    switchyard, ll, work = sys.argv[1], sys.argv[2], sys.argv[3]
    families = sys.argv[4:] or list(oracle.CASES)
    bin_dir = os.path.join(ll, "build", "bin")
    converter = os.path.join(ll, "src", "convert_hf_to_gguf.py")
    py = os.path.join(os.path.dirname(ll.rstrip("/")), "venv", "bin", "python")
    shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp_convert.py")
    os.makedirs(work, exist_ok=True)
    rows = []
    for seed, fam in enumerate(families, 1):
        d = os.path.join(work, fam)
        pieces = write_model(fam, d, seed)
        rng = np.random.default_rng(100 + seed)
        prompt = [int(x) for x in rng.integers(3, VOCAB, PROMPT_PIECES)]
        prompt_text = "".join(pieces[i][0] for i in prompt)
        ids = [1] + prompt
        ref, ref_logits = switchyard_greedy(switchyard, d, ids, os.path.join(work, fam + ".ref"))
        if ref is None:
            check(False, f"{fam}: switchyard generate --model {d}: {ref_logits}")
            continue
        want = until_eog(ref)
        row = {"family": fam, "reference": len(want)}

        ours = os.path.join(work, fam + ".ours.gguf")
        if os.path.exists(ours):
            os.remove(ours)
        r = run([switchyard, "convert", "--in", d, "--out", ours], text=True)
        row["a"] = "convert failed"
        if check(r.returncode == 0, f"{fam}: switchyard convert -> {ours}" +
                 ("" if r.returncode == 0 else f": {r.stderr.strip()[-400:]}")):
            got, err = llama_simple(bin_dir, ours, prompt_text, pieces)
            row["a"] = "llama-simple failed"
            if check(got is not None, f"{fam}: llama-simple runs ours.gguf" +
                     (f": {err}" if got is None else "")):
                check(got[:len(ids)] == ids,
                      f"{fam}: llama.cpp tokenizes the prompt as BOS + the prompt ids "
                      f"({got[:len(ids)]} vs {ids})")
                ok = compare(f"{fam}: (a) llama-simple on ours.gguf vs switchyard generate",
                             got[len(ids):], want, ref_logits)
                row["a"] = "same tokens" if ok else "differs"

        # Texts made of pieces only: llama.cpp's SentencePiece tokenizer falls back to <0xXX>
        # byte pieces for a character no piece covers and aborts (unordered_map::at) on a
        # vocabulary without them, as this one is.
        texts = [prompt_text, "".join(pieces[i][0] for i in reversed(prompt)),
                 "".join(p for p, _, t in pieces if t == 1)]
        if os.path.exists(ours):
            row["tok"] = tokenizers_agree(switchyard, bin_dir, ours, texts, f"{fam}: ours.gguf",
                                          work) or "n/a"

        theirs = os.path.join(work, fam + ".theirs.gguf")
        r = run([py, shim, converter, d, "--outfile", theirs, "--outtype", "f32"], text=True)
        row["b"] = "llama.cpp's converter failed"
        if not check(r.returncode == 0, f"{fam}: convert_hf_to_gguf.py -> {theirs}" +
                     ("" if r.returncode == 0 else f": {r.stderr.strip()[-600:]}")):
            rows.append(row)
            continue
        got, logits = switchyard_greedy(switchyard, theirs, ids, os.path.join(work, fam + ".b"))
        row["b"] = "switchyard generate failed"
        if check(got is not None, f"{fam}: switchyard generate --model theirs.gguf" +
                 (f": {logits}" if got is None else "")):
            ok = compare(f"{fam}: (b) switchyard generate on theirs.gguf vs on HF", got, ref,
                         ref_logits)
            row["b"] = "same tokens" if ok else "differs"
        if gguf_tokenizer_keys(theirs).get("tokenizer.ggml.model") == "llama":
            tok = tokenizers_agree(switchyard, bin_dir, theirs, texts, f"{fam}: theirs.gguf", work,
                                   theirs=True)
            row["b"] += f"; tokenize: {tok}" if tok else ""
        models = [gguf_tokenizer_keys(g).get("tokenizer.ggml.model") for g in (ours, theirs)]
        if os.path.exists(ours) and models[0] != models[1]:
            # The converter gives Qwen2/Qwen3-MoE and OLMoE a "gpt2" vocabulary whatever the
            # tokenizer (made here from the SentencePiece model's pieces, without merges, which
            # llama.cpp then refuses to load); ours keeps the SentencePiece model.
            print(f"     {fam}: tokenizer keys not compared: ours {models[0]!r}, llama.cpp's "
                  f"converter {models[1]!r}")
        elif os.path.exists(ours):
            a, b = gguf_tokenizer_keys(ours), gguf_tokenizer_keys(theirs)
            # Every key llama.cpp's converter wrote must be in ours with its value; ours may say
            # more (the converter leaves out unknown_token_id when only tokenizer.model has it).
            diff = sorted(k for k in b if a.get(k) != b.get(k))
            extra = sorted(set(a) - set(b))
            if extra:
                print(f"     {fam}: ours.gguf also has {', '.join(f'{k} = {a[k]}' for k in extra)}")
            detail = "; ".join(f"{k}: ours {str(a.get(k))[:60]} theirs {str(b.get(k))[:60]}"
                               for k in diff)
            check(not diff, f"{fam}: the tokenizer.ggml.* keys of ours.gguf equal those of "
                  f"llama.cpp's converter ({len(b)} keys)" + (f"; differ: {detail}" if diff else ""))
        got, err = llama_simple(bin_dir, theirs, prompt_text, pieces)
        if got is None:
            llamacpp_own_failure(f"{fam}: llama-simple on theirs.gguf", err)
        else:
            compare(f"{fam}: (control) llama-simple on theirs.gguf vs switchyard generate",
                    got[len(ids):], want, ref_logits)
        rows.append(row)

    print("\n| family | reference tokens (to EOS) | (a) llama-simple on `switchyard convert` GGUF "
          "| llama-tokenize vs `switchyard tokenize` on it "
          "| (b) `switchyard generate` on convert_hf_to_gguf.py GGUF |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['family']} | {row['reference']} | {row['a']} | {row.get('tok', '-')} "
              f"| {row['b']} |")
    print(f"\n{len(FAILURES)} failure(s) of Switchyard's agreement")
    if LLAMACPP_OWN:
        print(f"{len(LLAMACPP_OWN)} failure(s) of llama.cpp's tools on llama.cpp's own conversions "
              "(not counted):")
        for line in LLAMACPP_OWN:
            print(f"  {line[:300]}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
