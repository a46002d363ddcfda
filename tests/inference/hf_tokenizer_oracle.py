#!/usr/bin/env python3
"""Our tokenizer.json BPE against the Hugging Face `tokenizers` library, on tokenizers it trains.

For each pre-tokenizer family (GPT-2's ByteLevel; Qwen2's Split regex + ByteLevel with an NFC
normalizer; Llama 3's Split regex with ignore_merges) it trains a small byte-level BPE with
`tokenizers`, saves tokenizer.json, and has `switchyard tokenize --texts` encode hand-picked
varied UTF-8 (CJK, emoji with ZWJ and skin tones, combining marks, whitespace runs, special
tokens) plus 400 random strings drawn from letters, digits, marks, punctuation, spaces and
newlines of many scripts. Ids must equal the library's exactly, and decode(encode(s)) == s (after
NFC where the normalizer is NFC).

Exit 77 (ctest: skipped) when `tokenizers` is not installed; say so.
usage: hf_tokenizer_oracle.py SWITCHYARD WORKDIR
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

try:
    import tokenizers
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
except ImportError:
    print("SKIP: the Python package `tokenizers` is not installed "
          "(pip install --break-system-packages tokenizers)")
    sys.exit(77)

QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

FIXED = [
    "Hello world", "  leading and trailing  ", "tabs\tand\nnewlines\r\n\n\nend",
    "whitespace runs:     five, then\u3000ideographic", "日本語のテキストと中文字符",
    "emoji 🙂👍🏽 and a family 👨‍👩‍👧", "combining: e\u0301 a\u0308 n\u0303 and é",
    "digits 1234567890 and ١٢٣", "contractions: it's we're they've I'm we'll he'd DON'T",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>", "ab<|endoftext|>cd",
    "Здравствуй, мир! γειά σου κόσμε", "x  \n  y", "   ", "\n", "a'b 'S's", "1234 12345 9",
    # Long words: the merge heap on thousands of symbols (and a quick encode).
    "the" * 3000, "東京北京" * 1500, "ab" * 4000 + " " + "x" * 5000,
]


def corpus():
    rng = random.Random(1)
    words = ("the quick brown fox jumps over the lazy dog it's they're 東京 北京 данные "
             "données 12 345 6789 hello world ok #include <vector> x+=1; naïve café").split()
    return [" ".join(rng.choice(words) for _ in range(12)) + rng.choice(["\n", " ", "  \n"])
            for _ in range(2000)]


def random_texts(n):
    rng = random.Random(2)
    pools = [
        "abcXYZ", "éñüßÆ", "日本語中文", "한국어", "Здрав", "γειά", "مرحبا", "١٢٣0123456789",
        "\u0301\u0308\u0303", "!?.,;:'\"()[]{}<>#$%&*+-=/\\|^_`~", " ", "  ", "\t", "\n", "\r\n",
        "\u3000\u00a0", "🙂👍🏽👨‍👩‍👧", "'s'T'RE'll",
    ]
    out = []
    for _ in range(n):
        s = ""
        for _ in range(rng.randint(1, 12)):
            pool = rng.choice(pools)
            s += "".join(rng.choice(pool) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.2:
            s += rng.choice(SPECIALS) + s[: rng.randint(0, len(s))]
        out.append(s)
    return out


def train(kind):
    model = models.BPE(ignore_merges=True) if kind == "llama3" else models.BPE()
    tok = Tokenizer(model)
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        pattern = QWEN2 if kind == "qwen2" else LLAMA3
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    return tok


def main():
    switchyard, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    texts = FIXED + random_texts(400)
    texts_file = os.path.join(work, "texts.json")
    with open(texts_file, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
    print("tokenizers %s" % tokenizers.__version__)
    failures = 0
    for kind in ["gpt2", "qwen2", "llama3"]:
        d = os.path.join(work, kind)
        os.makedirs(d, exist_ok=True)
        tok = train(kind)
        tok.save(os.path.join(d, "tokenizer.json"))
        p = subprocess.run([switchyard, "tokenize", "--model", d, "--texts", texts_file],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print("FAIL %s: switchyard tokenize exited %d: %s" % (kind, p.returncode, p.stderr))
            failures += 1
            continue
        ours = json.loads(p.stdout)
        bad = 0
        for i, text in enumerate(texts):
            want = tok.encode(text, add_special_tokens=False).ids
            expect_text = unicodedata.normalize("NFC", text) if kind == "qwen2" else text
            if ours["ids"][i] != want or ours["decoded"][i] != expect_text:
                bad += 1
                if bad <= 5:
                    print("FAIL %s: %r\n  ours %s -> %r\n  hf   %s" %
                          (kind, text, ours["ids"][i], ours["decoded"][i], want))
        print("%s %s: %d of %d texts match the library's ids and round-trip" %
              ("ok  " if bad == 0 else "FAIL", kind, len(texts) - bad, len(texts)))
        failures += bad
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
