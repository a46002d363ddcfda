#!/usr/bin/python3
"""The tokenizer read back from a GGUF's tokenizer.ggml.* metadata (inference/gguf_tokenizer.h,
LoadGgufTokenizer) against the Hugging Face tokenizer the GGUF was made from, for one test
tokenizer per family:

  mixtral    SentencePiece tokenizer.model (hf_moe_oracle.write_spm_tokenizer: two-letter
             pieces; no special-token text, see below)
  qwen2_moe  byte-level BPE trained by `tokenizers`, Qwen2's split regex     (pre "qwen2")
  qwen3_moe  the same, other training text and added tokens                  (pre "qwen2")
  olmoe      byte-level BPE, GPT-2's ByteLevel regex                         (pre "gpt-2")
  deepseek   byte-level BPE, Llama 3's split regex, ignore_merges            (pre "llama-bpe")

For each: `switchyard convert` HF -> GGUF, then
  1. `switchyard tokenize --model x.gguf --texts` gives, for ASCII, accented, CJK, emoji,
     space/newline runs and special-token texts, the ids of the original tokenizer as the
     `tokenizers` library (BPE) or sentencepiece through transformers' LlamaTokenizer (SPM; in a
     Python that has sentencepiece: this one, or llama.cpp's venv of scripts/build-llamacpp.sh,
     else that oracle is skipped, saying so) computes them, and decodes them back to the text;
     the SPM case is also checked against `switchyard tokenize` on the original tokenizer.model;
  2. `switchyard generate --prompt TEXT` on the GGUF prints the same text and dumps the same
     logits as on the Hugging Face directory, and `tokenize --chat` renders the chat template and
     encodes it the same;
  3. GGUF -> GGUF keeps every tokenizer.ggml.* key and tokenizer.chat_template (gguf-py);
  4. GGUF -> HF writes tokenizer files that the tokenizers library / transformers load and that
     give the original's ids.
Then malformed tokenizer metadata (a GGUF written by gguf-py) fails with an error naming the file
and the key: token_type of the wrong length, a bos id past the vocabulary, a merge of a token
that does not exist, duplicate tokens, tokens that are not strings.

Usage: gguf_tokenizer_read_test.py SWITCHYARD WORK_DIR. Exit 77 (skipped) without numpy, torch,
gguf or tokenizers; the SentencePiece case is skipped when the build has no libsentencepiece.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "inference"))
sys.path.insert(0, HERE)
import hf_moe_oracle as oracle  # exits 77 without numpy / torch  # noqa: E402
from gguf_tokenizer_test import fields  # exits 77 without gguf  # noqa: E402

np = oracle.np
try:
    import gguf
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers,
                            trainers)
except ImportError as e:
    print(f"SKIP: {e.name} is not installed")
    sys.exit(77)

FAILURES = []
REGEX = {
    "qwen2": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "llama-bpe": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
                  r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
}
# family -> (pre-tokenizer, special tokens, a non-special added token, training text)
BPE = {
    "qwen2_moe": ("qwen2", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "<tool>",
                  "the quick brown fox jumps over the lazy dog 0123456789 "),
    "qwen3_moe": ("qwen2", ["<|endoftext|>", "<think>", "</think>"], "<tool_call>",
                  "pack my box with five dozen liquor jugs. Héllo wörld, 我想在apple工作 "),
    "olmoe": ("gpt-2", ["<|endoftext|>", "<|padding|>"], "<|user|>",
              "sphinx of black quartz, judge my vow! it's 42 degrees\n\n  indented "),
    "deepseek": ("llama-bpe", ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"], "<｜User｜>",
                 "How vexingly quick daft zebras jump; 1234567 numbers I'm sure "),
}
TEXTS = [
    "Hello world",
    "the quick brown fox jumps over the lazy dog",
    "Héllo wörld, ça va? naïve café",
    "我想在apple工作1314151天～",
    "🚀 (normal) 😶\u200d🌫️ ✅ 🦙🦙",
    "  leading\n\n\ttabs   and   spaces \n ",
    "3 33 333 3333 33333 3.3 I've 'RE 'll",
    "",
]
CHAT = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        FAILURES.append(what)
    return ok


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def write_bpe(d, fam, vocab):
    pre, specials, user, text = BPE[fam]
    tok = Tokenizer(models.BPE(ignore_merges=pre == "llama-bpe"))
    if pre == "gpt-2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(REGEX[pre]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab - 8, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([text * 20, " ".join(TEXTS)], trainer)
    tok.add_tokens([AddedToken(user, special=False, normalized=False)])
    # Reserved specials up to the model's vocabulary, so that every id a random model draws
    # decodes (in the HF directory as in the GGUF).
    tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(vocab - tok.get_vocab_size())])
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": specials[0], "eos_token": specials[-1], "add_bos_token": False,
                   "chat_template": CHAT, "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return [t + specials[-1] + " " + user + "x" for t in TEXTS[:3]] + TEXTS


def model_dir(work, fam):
    config, _, _ = oracle.CASES[fam]
    vocab = 64 if fam == "mixtral" else 384
    config = dict(config, vocab_size=vocab, bos_token_id=1, eos_token_id=2)
    d = os.path.join(work, fam)
    oracle.write_model(d, config, oracle.make_tensors(fam, config, np.random.default_rng(7)),
                       "F32")
    if fam == "mixtral":
        pieces = oracle.write_spm_tokenizer(d, vocab)
        words = ["".join(p for p, _, _ in pieces[k:k + 4]) for k in range(3, 40, 6)]
        # No special-token text: libsentencepiece (ours, on the HF directory as on the GGUF) does
        # not split "<s>" out of a text, transformers' LlamaTokenizer does (docs/formats.md).
        texts = words + [" ".join(words[:3]), words[0] + "\n" + words[1], "Aa?Ab", "我Aa", ""]
        with open(os.path.join(d, "tokenizer_config.json")) as f:
            tc = json.load(f)
        tc["chat_template"] = CHAT
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(tc, f)
        return d, texts
    return d, write_bpe(d, fam, vocab)


def tokenize(switchyard, model, texts, work):
    path = os.path.join(work, "texts.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
    r = run([switchyard, "tokenize", "--model", model, "--texts", path])
    if r.returncode != 0:
        return None, r.stderr.strip()[-500:]
    return json.loads(r.stdout), None


def spm_python():
    """A Python with transformers and sentencepiece, or None."""
    cache = os.environ.get("LLAMACPP_CACHE", os.path.expanduser("~/.cache/switchyard/llama.cpp"))
    for py in ["/usr/bin/python3", os.path.join(cache, "venv", "bin", "python")]:
        if os.path.exists(py) and run([py, "-c", "import sentencepiece, transformers"]
                                      ).returncode == 0:
            return py
    return None


def transformers_ids(py, d, texts, slow):
    """Ids of `texts` by transformers' AutoTokenizer of directory d, without special tokens added."""
    code = ("import json, sys\nfrom transformers import AutoTokenizer\n"
            f"t = AutoTokenizer.from_pretrained(sys.argv[1], use_fast={not slow})\n"
            "print(json.dumps([t.encode(x, add_special_tokens=False) for x in "
            "json.load(open(sys.argv[2]))]))\n")
    path = os.path.join(d, "..", "oracle_texts.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
    r = run([py, "-c", code, d, path])
    if r.returncode != 0:
        return None, r.stderr.strip()[-500:]
    return json.loads(r.stdout), None


def oracle_ids(fam, d, texts, spm_py):
    """(ids, name) of the original tokenizer, or (None, reason)."""
    if fam != "mixtral":
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        return [tok.encode(t, add_special_tokens=False).ids for t in texts], "tokenizers"
    if spm_py is None:
        return None, "no Python with sentencepiece and transformers"
    ids, err = transformers_ids(spm_py, d, texts, slow=True)
    return (ids, "transformers LlamaTokenizer (sentencepiece)") if ids is not None else (None, err)


def tokenizer_keys(path):
    return {k: v for k, v in fields(path).items() if k.startswith("tokenizer.")}


def compare_ids(what, got, want, texts):
    bad = [i for i in range(len(texts)) if got[i] != want[i]]
    return check(not bad, what + (f": text {texts[bad[0]]!r}: {got[bad[0]]} vs {want[bad[0]]}"
                                  if bad else f" ({len(texts)} texts)"))


def generate(switchyard, model, prompt, dump):
    r = run([switchyard, "generate", "--model", model, "--prompt", prompt, "--max-tokens", "6",
             "--dump-logits", dump, "--dtype", "f32"])
    return r.returncode, r.stdout, r.stderr.strip()[-400:]


def family_case(switchyard, work, fam, spm_py):
    d, texts = model_dir(work, fam)
    out = os.path.join(work, fam + ".gguf")
    r = run([switchyard, "convert", "--in", d, "--out", out])
    if fam == "mixtral" and "no libsentencepiece" in r.stderr + r.stdout:
        print(f"SKIP {fam}: this build has no libsentencepiece")
        return
    if not check(r.returncode == 0 and os.path.exists(out), f"{fam}: convert HF -> GGUF" +
                 ("" if r.returncode == 0 else f": {r.stderr.strip()[-300:]}")):
        return
    keys = tokenizer_keys(out)
    check(keys.get("tokenizer.chat_template") == CHAT, f"{fam}: tokenizer.chat_template written")

    # 1. Ids against the original tokenizer.
    ours, err = tokenize(switchyard, out, texts, work)
    if not check(ours is not None, f"{fam}: switchyard tokenize --model {fam}.gguf" +
                 (f": {err}" if err else "")):
        return
    want, name = oracle_ids(fam, d, texts, spm_py)
    if want is None:
        print(f"SKIP {fam}: the transformers oracle ({name})")
    else:
        compare_ids(f"{fam}: ids from the GGUF's metadata equal {name}'s on the original",
                    ours["ids"], want, texts)
    if fam == "mixtral":
        orig, err = tokenize(switchyard, d, texts, work)
        if check(orig is not None, f"{fam}: switchyard tokenize on the original" +
                 (f": {err}" if err else "")):
            compare_ids(f"{fam}: ids from the GGUF's metadata equal libsentencepiece's on the "
                        "original tokenizer.model", ours["ids"], orig["ids"], texts)
    else:
        check(ours["decoded"] == texts, f"{fam}: the ids decode back to the texts")
    check(any(len(i) > 0 for i in ours["ids"]) and len({tuple(i) for i in ours["ids"]}) > 3,
          f"{fam}: the texts give distinct, non-empty id sequences")

    # The chat template and end of sequence come back too: `tokenize --chat` renders and encodes
    # a conversation the same from the GGUF as from the HF directory.
    chat = os.path.join(work, "chat.json")
    with open(chat, "w", encoding="utf-8") as f:
        json.dump({"messages": [{"role": "user", "content": texts[0]},
                                {"role": "assistant", "content": texts[1]}],
                   "add_generation_prompt": True}, f, ensure_ascii=False)
    ra = run([switchyard, "tokenize", "--model", d, "--chat", chat])
    rb = run([switchyard, "tokenize", "--model", out, "--chat", chat])
    check(ra.returncode == 0 and rb.returncode == 0 and ra.stdout == rb.stdout,
          f"{fam}: tokenize --chat renders and encodes the same from the GGUF as from HF" +
          ("" if ra.stdout == rb.stdout else f": {ra.stdout[:120]!r} vs {rb.stdout[:120]!r} "
           f"{rb.stderr.strip()[-200:]}"))

    # 2. generate --prompt: the same on the GGUF as on the HF directory.
    prompt = texts[0]
    a = generate(switchyard, d, prompt, os.path.join(work, fam + ".hf.logits"))
    b = generate(switchyard, out, prompt, os.path.join(work, fam + ".gguf.logits"))
    if check(a[0] == 0 and b[0] == 0, f"{fam}: generate --prompt on the HF directory and the GGUF"
             + ("" if a[0] == 0 and b[0] == 0 else f": {a[2]} / {b[2]}")):
        la = oracle.read_logits(os.path.join(work, fam + ".hf.logits"))
        lb = oracle.read_logits(os.path.join(work, fam + ".gguf.logits"))
        check(a[1] == b[1] and la.shape == lb.shape and bool((la == lb).all()),
              f"{fam}: generate --prompt {prompt!r}: same text ({b[1].strip()!r}) and logits "
              f"{tuple(lb.shape)} on the GGUF as on the HF directory")

    # 3. GGUF -> GGUF keeps the tokenizer.
    again = os.path.join(work, fam + ".again.gguf")
    r = run([switchyard, "convert", "--in", out, "--out", again])
    if check(r.returncode == 0, f"{fam}: convert GGUF -> GGUF" +
             ("" if r.returncode == 0 else f": {r.stderr.strip()[-300:]}")):
        keys2 = tokenizer_keys(again)
        diff = sorted(k for k in set(keys) | set(keys2) if keys.get(k) != keys2.get(k))
        check(not diff and len(keys) >= 6, f"{fam}: GGUF -> GGUF keeps all {len(keys)} "
              f"tokenizer keys" + (f"; differ: {diff}" if diff else ""))

    # 4. GGUF -> HF writes a tokenizer that gives the original's ids.
    hf = os.path.join(work, fam + ".hf")
    r = run([switchyard, "convert", "--in", out, "--out", hf, "--to", "hf"])
    if not check(r.returncode == 0, f"{fam}: convert GGUF -> HF" +
                 ("" if r.returncode == 0 else f": {r.stderr.strip()[-300:]}")):
        return
    if fam == "mixtral":
        check(os.path.exists(os.path.join(hf, "tokenizer.model")), f"{fam}: HF has tokenizer.model")
        if spm_py is None or want is None:
            print(f"SKIP {fam}: transformers on the written tokenizer.model ({name})")
        else:
            got, err = transformers_ids(spm_py, hf, texts, slow=True)
            if check(got is not None, f"{fam}: transformers loads the written tokenizer.model "
                     "(LlamaTokenizer)" + (f": {err}" if err else "")):
                compare_ids(f"{fam}: transformers' LlamaTokenizer on the written tokenizer.model "
                            "gives the original's ids", got, want, texts)
            # Not asserted: transformers' fast conversion rebuilds BPE merges from pairs of
            # pieces, and this two-letter vocabulary has no one-letter pieces (docs/formats.md).
            got, err = transformers_ids(spm_py, hf, texts, slow=False)
            same = got is not None and got == want
            print(f"info {fam}: LlamaTokenizerFast (converted from the written tokenizer.model) "
                  f"{'gives the same ids' if same else 'differs: ' + str(err or got)[:120]}")
    else:
        tok = Tokenizer.from_file(os.path.join(hf, "tokenizer.json"))
        compare_ids(f"{fam}: tokenizers on the written tokenizer.json gives the original's ids",
                    [tok.encode(t, add_special_tokens=False).ids for t in texts], want, texts)
        ids, err = transformers_ids(sys.executable, hf, texts, slow=False)
        if check(ids is not None, f"{fam}: transformers AutoTokenizer loads the written files" +
                 (f": {err}" if err else "")):
            compare_ids(f"{fam}: transformers on the written tokenizer.json gives the original's "
                        "ids", ids, want, texts)
    with open(os.path.join(hf, "tokenizer_config.json")) as f:
        tc = json.load(f)
    check(tc.get("chat_template") == CHAT and tc.get("eos_token"),
          f"{fam}: the written tokenizer_config.json has the chat template and eos_token "
          f"{tc.get('eos_token')!r}")


def bad_metadata(switchyard, work):
    """GGUFs with one defect in their tokenizer keys each: the error names the file and key."""
    tokens = ["a", "b", "ab", "<s>"]

    def write(name, **over):
        path = os.path.join(work, name + ".gguf")
        w = gguf.GGUFWriter(path, "llama")
        kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
              "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": [1, 1, 1, 3],
              "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.bos_token_id": 3}
        kv.update(over)
        for k, v in kv.items():
            if v is None:
                continue
            if isinstance(v, str):
                w.add_string(k, v)
            elif isinstance(v, int):
                w.add_uint32(k, v)
            elif k == "tokenizer.ggml.token_type":
                w.add_array(k, v) if all(isinstance(x, int) for x in v) else None
            else:
                w.add_array(k, v)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    good = write("good")
    r = run([switchyard, "tokenize", "--model", good, "--text", "abab<s>b"])
    check(r.returncode == 0 and r.stdout.strip() == "2,2,3,1",
          f"a hand-written gpt2 GGUF tokenizes 'abab<s>b' as 2,2,3,1 (got {r.stdout.strip()!r} "
          f"{r.stderr.strip()[-200:]})")
    cases = [
        ("types_short", {"tokenizer.ggml.token_type": [1, 1, 1]}, "tokenizer.ggml.token_type"),
        ("bos_past_end", {"tokenizer.ggml.bos_token_id": 9}, "tokenizer.ggml.bos_token_id"),
        ("bad_merge", {"tokenizer.ggml.merges": ["a c"]}, "tokenizer.ggml.merges"),
        ("duplicate", {"tokenizer.ggml.tokens": ["a", "b", "ab", "a"]}, "tokenizer.ggml.tokens"),
        ("no_merges", {"tokenizer.ggml.merges": None}, "tokenizer.ggml.merges"),
        ("model_name", {"tokenizer.ggml.model": "bert"}, "tokenizer.ggml.model"),
        ("pre_name", {"tokenizer.ggml.pre": "deepseek-llm"}, "tokenizer.ggml.pre"),
        ("bad_type", {"tokenizer.ggml.token_type": [1, 1, 9, 3]}, "tokenizer.ggml.token_type"),
        ("tokens_not_strings", {"tokenizer.ggml.tokens": [1, 2, 3, 4]}, "tokenizer.ggml.tokens"),
    ]
    for name, over, key in cases:
        path = write(name, **over)
        r = run([switchyard, "tokenize", "--model", path, "--text", "ab"])
        check(r.returncode != 0 and path in r.stderr and key in r.stderr,
              f"bad tokenizer metadata '{name}': fails naming the file and {key}" +
              ("" if r.returncode != 0 else " (it tokenized)") +
              f": {r.stderr.strip()[-200:]}")


def main():
    switchyard, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    spm_py = spm_python()
    families = sys.argv[3:] or ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek"]
    for fam in families:
        family_case(switchyard, work, fam, spm_py)
    bad_metadata(switchyard, work)
    for p in glob.glob(os.path.join(work, "*.tmp*")):
        check(False, f"no temporary left behind: {p}")
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
