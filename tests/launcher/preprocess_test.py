#!/usr/bin/python3
"""`switchyard preprocess` (issue 45): a JSONL corpus and a text corpus become train.bin and
validation.bin whose token ids equal Hugging Face `tokenizers`' encoding of each document, each
followed by the end-of-sequence id, with every 100th document held out; preprocess.json's data
block trains with `switchyard train` unchanged. An existing --out and a FIFO in place of the
corpus are refused by name, and nothing is left behind.

    preprocess_test.py SWITCHYARD WORK_DIR
"""
import array
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "inference"))
sys.path.insert(0, os.path.join(HERE, ".."))
import tiny_tokenizer  # noqa: E402
from tiny_checkpoint import TINY  # noqa: E402

try:
    from tokenizers import Tokenizer
except ImportError as e:
    print(f"SKIP: Hugging Face tokenizers is not installed ({e}); scripts/install-deps.sh "
          "installs it")
    sys.exit(77)

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def read_u16(path):
    a = array.array("H")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a.tolist()


def main():
    binary, work = sys.argv[1], os.path.abspath(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(work, "tok")
    tiny_tokenizer.write(model)
    eos = tiny_tokenizer.special_id("<|im_end|>")
    with open(os.path.join(model, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": eos}, f)
    docs = [f"Document {i}: héllo wörld, {'ab' * (i % 7)} 世界 {i * i}" for i in range(300)]
    jsonl = os.path.join(work, "corpus.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d, "id": 1}, ensure_ascii=False) + "\n")
    text = os.path.join(work, "corpus.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n\n".join(docs) + "\n")  # empty lines are skipped

    hf = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    want_train, want_validation = [], []
    for i, d in enumerate(docs):
        ids = hf.encode(d, add_special_tokens=False).ids + [eos]
        (want_validation if i % 100 == 99 else want_train).extend(ids)

    for corpus in (jsonl, text):
        out = os.path.join(work, os.path.basename(corpus) + ".out")
        r = subprocess.run([binary, "preprocess", "-m", model, "--input", corpus, "--out", out,
                            "-t", "2"], capture_output=True, text=True, timeout=300)
        if not check(r.returncode == 0, f"preprocess {os.path.basename(corpus)}: "
                                        f"{r.stderr.strip()[-200:]}"):
            continue
        train, validation = read_u16(f"{out}/train.bin"), read_u16(f"{out}/validation.bin")
        summary = json.load(open(f"{out}/preprocess.json"))
        check(train == want_train and validation == want_validation,
              f"{os.path.basename(corpus)}: {len(train)} + {len(validation)} tokens equal "
              f"tokenizers' encoding with EOS after each document, every 100th held out")
        check(summary["documents"] == 300 and summary["validation_documents"] == 3 and
              summary["data"]["token_dtype"] == "u16",
              f"preprocess.json: {summary['documents']} documents, "
              f"{summary['validation_documents']} held out")
    # The data block trains as it is.
    data = json.load(open(f"{work}/corpus.jsonl.out/preprocess.json"))["data"]
    args = [binary, "train", "--config", TINY]
    for k, v in data.items():
        args += ["--set", f"data.{k}={v}"]
    for s in ("train.steps=2", "train.eval_every=0", f"checkpoint.dir={work}/ckpt",
              "log.progress=none"):
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"switchyard train on preprocess.json's data block: "
                             f"{r.stderr.strip()[-200:]}")

    # Refusals: an existing --out, a FIFO as the corpus; nothing left behind.
    r = subprocess.run([binary, "preprocess", "-m", model, "--input", jsonl, "--out",
                        f"{work}/corpus.jsonl.out"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "exists" in r.stderr, f"an existing --out: {r.stderr.strip()}")
    fifo = os.path.join(work, "fifo.jsonl")
    os.mkfifo(fifo)
    r = subprocess.run([binary, "preprocess", "-m", model, "--input", fifo, "--out",
                        f"{work}/never"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "FIFO" in r.stderr and not os.path.exists(f"{work}/never"),
          f"a FIFO as the corpus: {r.stderr.strip()[-120:]}")
    left = [n for n in os.listdir(work) if ".tmp." in n]
    check(not left, f"no temporary left behind: {left}")

    if failures:
        print(f"FAIL: {len(failures)} checks failed")
        return 1
    print("PASS: preprocess")
    return 0


if __name__ == "__main__":
    sys.exit(main())
