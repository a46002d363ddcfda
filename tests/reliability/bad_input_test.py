#!/usr/bin/python3
"""Bad input, everywhere: a table of malformed configs, model directories, checkpoints and
generation requests fed to the real `switchyard` commands.

Each row must end with a non-zero exit (not a signal, not a hang), exactly one "error:" line on
stderr that names what the row says it must (the file, the key or the field), and no partial
output left behind (no logits file, no checkpoint temporary). The few rows that are valid input
(marked ok) must exit 0, with the warning the row names.

    bad_input_test.py SWITCHYARD WORK_DIR
"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "inference"))
try:
    import numpy as np
    import hf_moe_oracle as hf  # the tiny Mixtral writer of the loader's oracle test (needs torch)
except ImportError as e:  # ctest reads 77 as "skipped"
    print(f"SKIP: {e}; install Debian's python3-torch and python3-numpy")
    sys.exit(77)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TINY = os.path.join(ROOT, "examples", "configs", "tiny.json")
TIMEOUT = 120


def run(binary, args):
    try:
        return subprocess.run([binary] + args, capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None


class Table:
    def __init__(self, binary, work):
        self.binary, self.work, self.failures, self.rows = binary, work, [], 0

    def check(self, what, args, needles, ok=False, outputs=(), ckpt_dir=None):
        """Runs `switchyard ARGS`; see the module docstring for what must hold."""
        self.rows += 1
        for path in outputs:
            if os.path.exists(path):
                os.remove(path)
        r = run(self.binary, args)
        problems = []
        if r is None:
            problems.append(f"no answer within {TIMEOUT} s")
        elif ok:
            if r.returncode != 0:
                problems.append(f"valid input exited {r.returncode}")
            for needle in needles:  # what a valid but doubtful input must be warned about
                if needle not in r.stderr:
                    problems.append(f"no warning naming {needle!r}")
        else:
            errors = [l for l in r.stderr.splitlines() if l.startswith("error")]
            if r.returncode < 0:
                problems.append(f"killed by signal {-r.returncode}")
            elif r.returncode == 0:
                problems.append("exited 0")
            elif r.returncode >= 128:
                problems.append(f"exit code {r.returncode}")
            if len(errors) != 1:
                problems.append(f"{len(errors)} error lines")
            for needle in needles:
                if not any(needle in l for l in errors):
                    problems.append(f"the error does not name {needle!r}")
            for path in outputs:
                if os.path.exists(path):
                    problems.append(f"left a partial output {path}")
            if ckpt_dir is not None and glob.glob(os.path.join(ckpt_dir, "*.tmp.*")):
                problems.append(f"left a temporary file in {ckpt_dir}")
        # The line a person reads: the error, else a warning or note, else the last line
        # (docs/reliability.md lists them).
        lines = [] if r is None else r.stderr.strip().splitlines()
        shown = ([l for l in lines if l.startswith("error")] or
                 [l for l in lines if l.startswith(("warning", "note"))] or lines[-1:] or [""])[0]
        print(f"{'ok  ' if not problems else 'FAIL'} {what}: {shown}")
        if problems:
            self.failures.append(f"{what}: {'; '.join(problems)}\n    stderr: "
                                 f"{'' if r is None else r.stderr.strip()[-600:]}")


def write(path, data, mode="wb"):
    with open(path, mode) as f:
        f.write(data)
    return path


def config_rows(t):
    work = os.path.join(t.work, "configs")
    os.makedirs(work, exist_ok=True)
    ckpt = os.path.join(work, "ckpt")
    base = json.load(open(TINY))

    def cfg(name, text):
        return write(os.path.join(work, name), text, "w")

    def train(path, *extra):
        return ["train", "--config", path, "--set", "train.steps=2", "--set",
                f"checkpoint.dir={ckpt}", "--set", "log.progress=lines"] + list(extra)

    syntax = cfg("syntax.json", json.dumps(base)[:-20])
    t.check("config: a syntax error", train(syntax), ["syntax.json"], ckpt_dir=ckpt)
    unknown = dict(base, modle={})
    t.check("config: an unknown key", train(cfg("unknown.json", json.dumps(unknown))),
            ["unknown.json", "modle"], ckpt_dir=ckpt)
    wrong_type = json.loads(json.dumps(base))
    wrong_type["model"]["hidden_size"] = "big"
    t.check("config: a wrong type", train(cfg("type.json", json.dumps(wrong_type))),
            ["type.json", "hidden_size"], ckpt_dir=ckpt)
    tiny = cfg("tiny.json", json.dumps(base))
    t.check("config: a negative size", train(tiny, "--set", "model.hidden_size=-64"),
            ["hidden_size"], ckpt_dir=ckpt)
    t.check("config: an absurd size", train(tiny, "--set", "data.batch_size=1099511627776"),
            ["batch_size"], ckpt_dir=ckpt)
    t.check("config: an absurd sequence", train(tiny, "--set", "data.seq_len=16777216"),
            ["seq_len"], ckpt_dir=ckpt)
    t.check("config: top-k above the expert count", train(tiny, "--set", "model.top_k=9"),
            ["top_k"], ckpt_dir=ckpt)
    t.check("config: a missing file", train(os.path.join(work, "absent.json")), ["absent.json"])
    t.check("config: a directory", train(work), [work])


def model_rows(t):
    work = os.path.join(t.work, "models")
    config, _, _ = hf.CASES["mixtral"]
    tensors = hf.make_tensors("mixtral", config, np.random.default_rng(1))
    logits = os.path.join(work, "logits.bin")

    def fresh(name, shards=1):
        d = os.path.join(work, name)
        hf.write_model(d, config, tensors, "F32", shards=shards)
        return d

    def generate(model, *extra):
        return ["generate", "--model", model, "--prompt-ids", "1,2,3", "--max-tokens", "2",
                "--dump-logits", logits] + list(extra)

    good = fresh("good")
    t.check("model: a valid directory", generate(good), [], ok=True)
    st = lambda d: os.path.join(d, "model.safetensors")  # noqa: E731

    d = fresh("no_config")
    os.remove(os.path.join(d, "config.json"))
    t.check("model: a missing config.json", generate(d), ["config.json"], outputs=[logits])
    d = fresh("dir_for_file")
    os.remove(st(d))
    os.mkdir(st(d))
    t.check("model: a directory in place of a file", generate(d), ["model.safetensors"],
            outputs=[logits])
    d = fresh("empty")
    write(st(d), b"")
    t.check("model: an empty file", generate(d), ["model.safetensors"], outputs=[logits])
    d = fresh("garbage")
    write(st(d), bytes(np.random.default_rng(2).integers(0, 256, 4096, dtype=np.uint8)))
    t.check("model: garbage bytes", generate(d), ["model.safetensors"], outputs=[logits])
    d = fresh("truncated")
    raw = open(st(d), "rb").read()
    write(st(d), raw[:len(raw) - 1000])
    t.check("model: a truncated file", generate(d), ["model.safetensors"], outputs=[logits])
    d = fresh("header_past_end")
    write(st(d), struct.pack("<Q", len(raw) * 4) + raw[8:])
    t.check("model: a header past the end", generate(d), ["model.safetensors"],
            outputs=[logits])

    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    names = [k for k in header if k != "__metadata__"]

    def with_header(name, edit):
        d = fresh(name)
        h = json.loads(json.dumps(header))
        edit(h)
        text = json.dumps(h).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        write(st(d), struct.pack("<Q", len(text)) + text + raw[8 + n:])
        return d

    def overlap(h):
        h[names[1]]["data_offsets"] = list(h[names[0]]["data_offsets"])
    # An overlap of tensors of different sizes is caught by the size check; same-size tensors
    # sharing bytes by the overlap check.
    same = [(a, b) for a in names for b in names
            if a < b and header[a]["shape"] == header[b]["shape"]]
    a, b = same[0]

    def overlap_same(h):
        h[b]["data_offsets"] = list(h[a]["data_offsets"])
    t.check("model: overlapping tensors", generate(with_header("overlap", overlap_same)),
            ["model.safetensors", b], outputs=[logits])

    def wrong_dtype(h):
        h[names[0]]["dtype"] = "Q9"
    t.check("model: a wrong dtype", generate(with_header("dtype", wrong_dtype)),
            ["model.safetensors", names[0]], outputs=[logits])
    missing = [x for x in tensors if x[0] != names[0]]
    d = os.path.join(work, "missing")
    hf.write_model(d, config, missing, "F32")
    t.check("model: a missing tensor", generate(d), [names[0]], outputs=[logits])

    d = fresh("escape", shards=2)
    index_path = os.path.join(d, "model.safetensors.index.json")
    index = json.load(open(index_path))
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../good/model.safetensors"
    write(index_path, json.dumps(index), "w")
    t.check("model: an index path with ..", generate(d), ["model.safetensors.index.json",
                                                          "../good/model.safetensors"],
            outputs=[logits])

    huge = dict(config, num_hidden_layers=1000000000)
    d = os.path.join(work, "huge_layers")
    hf.write_model(d, huge, tensors, "F32")
    t.check("model: a config far larger than its tensors", generate(d), ["num_hidden_layers"],
            outputs=[logits])
    return good


def checkpoint_rows(t):
    work = os.path.join(t.work, "checkpoints")
    os.makedirs(work, exist_ok=True)
    ckpt = os.path.join(work, "run")
    r = run(t.binary, ["train", "--config", TINY, "--set", "train.steps=2", "--set",
                       "train.eval_every=0", "--set", f"checkpoint.dir={ckpt}", "--set",
                       "log.progress=lines"])
    if r is None or r.returncode != 0:
        t.failures.append("could not train the checkpoint the rows corrupt")
        return
    good = os.path.join(ckpt, "step-00000002.h5")
    raw = open(good, "rb").read()
    logits = os.path.join(work, "logits.bin")
    cases = [("empty", b""),
             ("garbage", bytes(np.random.default_rng(3).integers(0, 256, 8192, dtype=np.uint8))),
             ("truncated", raw[:len(raw) // 2]),
             ("flipped byte", raw[:len(raw) // 2] + bytes([raw[len(raw) // 2] ^ 0xFF]) +
              raw[len(raw) // 2 + 1:])]
    for what, data in cases:
        path = write(os.path.join(work, f"step-{what.replace(' ', '_')}.h5"), data)
        t.check(f"checkpoint: {what} (generate)",
                ["generate", "--model", path, "--prompt-ids", "1,2", "--max-tokens", "1",
                 "--dump-logits", logits], [os.path.basename(path)], outputs=[logits])
        t.check(f"checkpoint: {what} (train --resume-from)",
                ["train", "--config", TINY, "--set", "train.steps=4", "--set",
                 f"checkpoint.dir={os.path.join(work, 'resumed')}", "--resume-from", path],
                [os.path.basename(path)], ckpt_dir=os.path.join(work, "resumed"))
    as_dir = os.path.join(work, "step-00000009.h5")
    os.makedirs(as_dir, exist_ok=True)
    t.check("checkpoint: a directory in place of the file",
            ["generate", "--model", as_dir, "--prompt-ids", "1", "--max-tokens", "1"],
            ["step-00000009.h5"])


def generation_rows(t, model):
    logits = os.path.join(t.work, "gen_logits.bin")

    def generate(*extra):
        return ["generate", "--model", model, "--dump-logits", logits] + list(extra)

    t.check("generation: an empty prompt", generate("--prompt-ids", ""), ["prompt"],
            outputs=[logits])
    config, _, _ = hf.CASES["mixtral"]
    long_prompt = ",".join(["1"] * (config["max_position_embeddings"] + 1))
    # Valid (RoPE extrapolates), but the user is told.
    t.check("generation: a prompt past the context (valid, with a warning)",
            generate("--prompt-ids", long_prompt), ["warning: the prompt holds"], ok=True)
    t.check("generation: token ids out of range",
            generate("--prompt-ids", f"1,{config['vocab_size']}"), [str(config["vocab_size"])],
            outputs=[logits])
    t.check("generation: ids that are not numbers", generate("--prompt-ids", "1,x"),
            ["prompt-ids"], outputs=[logits])
    t.check("generation: text without a tokenizer", generate("--prompt", "hello"),
            ["tokenizer"], outputs=[logits])
    tok_model = os.path.join(t.work, "with_tokenizer")
    shutil.copytree(model, tok_model, dirs_exist_ok=True)
    import tiny_tokenizer
    tiny_tokenizer.write(tok_model)
    t.check("generation: invalid UTF-8 in the prompt",
            ["generate", "--model", tok_model, "--prompt", "caf\udce9", "--max-tokens", "1"],
            ["--prompt", "UTF-8"])
    t.check("generation: --max-tokens 0 (valid: the prompt only)",
            generate("--prompt-ids", "1,2", "--max-tokens", "0"), [], ok=True)
    t.check("generation: a negative --max-tokens", generate("--prompt-ids", "1",
                                                             "--max-tokens", "-1"),
            ["--max-tokens"], outputs=[logits])


def main():
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    t = Table(binary, work)
    config_rows(t)
    model = model_rows(t)
    checkpoint_rows(t)
    generation_rows(t, model)
    print(f"{t.rows - len(t.failures)} of {t.rows} rows hold")
    for f in t.failures:
        print("FAIL:", f)
    return 1 if t.failures else 0


if __name__ == "__main__":
    sys.exit(main())
