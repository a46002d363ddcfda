#!/usr/bin/python3
"""`switchyard convert` and `switchyard inspect` end to end (issue 17, native and Hugging Face).

Usage: /usr/bin/python3 convert_test.py SWITCHYARD WORK_DIR EXAMPLE_TRAIN_CONFIG

1. Round trips, bit-exact per tensor (CRC-32C from `inspect --checksums --json`, and dtypes):
   for each family of hf_moe_oracle.py (mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek, in their
   F32 / F16 / BF16, single-file and sharded forms) and each attention-bias variant:
     hf -> native -> hf       every tensor, config.json's keys and values, and the side files
     native -> hf -> native   every parameter
   and for a model trained by `switchyard train`: native -> hf -> native (parameters), and
   native -> native with the optimizer moments m and v, and --shard-mib sharding.
2. transformers (skipped, saying so, when it is not installed): AutoModelForCausalLM loads the
   trained model's HF export with no missing or unexpected tensor, and its logits equal
   `switchyard generate --dump-logits` on the native checkpoint within 1e-4 relative, with the
   same greedy tokens; for the families transformers implements, its own save_pretrained of our
   config.json writes the same keys and values.
3. Bad input: a truncated safetensors file, a header length past the end, a wrong dtype, a
   missing tensor and an index entry escaping the directory each fail with an error naming the
   file and the tensor, and leave no output (nor a staging directory) behind.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "inference"))
import hf_moe_oracle as oracle  # exits 77 without numpy / torch  # noqa: E402

np = oracle.np
FAILURES = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        FAILURES.append(what)
    return ok


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True)


def convert(binary, src, dst, *extra):
    r = run(binary, "convert", "--in", src, "--out", dst, *extra)
    if r.returncode != 0:
        check(False, f"convert {src} -> {dst}: {r.stderr.strip()}")
        return False
    return True


def inspect(binary, path):
    r = run(binary, "inspect", "--checksums", "--json", path)
    if r.returncode != 0:
        check(False, f"inspect {path}: {r.stderr.strip()}")
        return None
    return json.loads(r.stdout)


def by_name(report, key):
    """{switchyard name or file name: (dtype, shape, crc32c)}."""
    return {t[key]: (t["dtype"], t["shape"], t["crc32c"]) for t in report["tensors"]}


def hf_round_trip(binary, work, what, model_dir):
    """hf -> native -> hf and native -> hf -> native, bit-exact."""
    native, back = os.path.join(work, what + ".h5"), os.path.join(work, what + "-hf")
    native2 = os.path.join(work, what + "-2.h5")
    if not (convert(binary, model_dir, native) and convert(binary, native, back)
            and convert(binary, back, native2)):
        return
    a, b = inspect(binary, model_dir), inspect(binary, back)
    n1, n2 = inspect(binary, native), inspect(binary, native2)
    if None in (a, b, n1, n2):
        return
    ta, tb = by_name(a, "name"), by_name(b, "name")
    check(ta == tb and len(ta) > 0,
          f"{what}: hf -> native -> hf keeps all {len(ta)} tensors bit for bit "
          f"({sorted(set(ta) ^ set(tb))[:3] or [k for k in ta if ta[k] != tb.get(k)][:3]})")
    p1 = {k: v for k, v in by_name(n1, "switchyard_name").items() if not k.startswith("optim/")}
    p2 = {k: v for k, v in by_name(n2, "switchyard_name").items() if not k.startswith("optim/")}
    check(p1 == p2, f"{what}: native -> hf -> native keeps all {len(p1)} parameters bit for bit")
    with open(os.path.join(model_dir, "config.json")) as f:
        want = json.load(f)
    with open(os.path.join(back, "config.json")) as f:
        got = json.load(f)
    # torch_dtype follows the tensors written (the bias variants' configs name float16 over F32
    # files); transformers itself writes sliding_window null when use_sliding_window is false.
    normalised = {"torch_dtype"}
    if want.get("use_sliding_window") is False:
        normalised.add("sliding_window")
    missing = {k: v for k, v in want.items()
               if k not in normalised and got.get(k, "<absent>") != v}
    check(not missing, f"{what}: config.json keeps every key and value of the source {missing}")
    side = sorted(x for x in os.listdir(model_dir) if not x.endswith(".safetensors")
                  and not x.endswith(".index.json"))
    for name in side:
        with open(os.path.join(model_dir, name), "rb") as f1, \
                open(os.path.join(back, name), "rb") as f2:
            if name != "config.json":
                check(f1.read() == f2.read(), f"{what}: side file {name} comes back unchanged")


def family_round_trips(binary, work):
    for fam, (config, dtype, shards) in oracle.CASES.items():
        rng = np.random.default_rng(sum(map(ord, fam)))
        model_dir = os.path.join(work, "src-" + fam)
        oracle.write_model(model_dir, config, oracle.make_tensors(fam, config, rng), dtype, shards)
        # A tokenizer file rides along.
        with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
            json.dump({"model_max_length": 128, "family": fam}, f)
        hf_round_trip(binary, work, f"{fam} ({dtype}, {shards} file(s))", model_dir)
    for what, fam, _, model_dir, _ in oracle.bias_variant_dirs(os.path.join(work, "bias")):
        hf_round_trip(binary, work, what.replace(" ", "_"), model_dir)


def trained(binary, work, train_config):
    run_dir = os.path.join(work, "run")
    r = run(binary, "train", "--config", train_config, "--set", "train.steps=3", "--set",
            "train.eval_every=0", "--set", f"checkpoint.dir={run_dir}", "--set",
            "log.progress=none", "--set", "model.hidden_size=128")  # > 1 MiB: --shard-mib 1
    if not check(r.returncode == 0, f"switchyard train: {r.stderr.strip()[-300:]}"):
        return None
    ckpt = [os.path.join(run_dir, x) for x in sorted(os.listdir(run_dir)) if x.endswith(".h5")][0]
    hf, back, copy = (os.path.join(work, x) for x in ("trained-hf", "trained-2.h5",
                                                       "trained-copy.h5"))
    sharded = os.path.join(work, "trained-hf-sharded")
    if not (convert(binary, ckpt, hf, "--to", "hf") and convert(binary, hf, back)
            and convert(binary, ckpt, copy, "--to", "native")
            and convert(binary, ckpt, sharded, "--shard-mib", "1")):
        return None
    src, n2, cp = inspect(binary, ckpt), inspect(binary, back), inspect(binary, copy)
    h, hs = inspect(binary, hf), inspect(binary, sharded)
    if None in (src, n2, cp, h, hs):
        return None
    check(src["architecture"].startswith("Switchyard MoE (exports as Mixtral"),
          f"trained model exports as {src['architecture']}")
    ts = by_name(src, "switchyard_name")
    params = {k: v for k, v in ts.items() if not k.startswith("optim/")}
    moments = [k for k in ts if k.startswith("optim/m/") or k.startswith("optim/v/")]
    got = {k: v for k, v in by_name(n2, "switchyard_name").items() if not k.startswith("optim/")}
    check(params == got, f"trained: native -> hf -> native keeps all {len(params)} parameters")
    check(ts == by_name(cp, "switchyard_name") and len(moments) == 2 * len(params),
          f"trained: native -> native keeps every tensor, {len(moments)} optimizer moments "
          f"included")
    check(by_name(h, "name") == by_name(hs, "name"),
          "trained: a sharded export holds the same tensors as a single-file one")
    shard_files = [x for x in os.listdir(sharded) if x.endswith(".safetensors")]
    check(len(shard_files) > 1 and os.path.exists(
        os.path.join(sharded, "model.safetensors.index.json")),
        f"trained: --shard-mib 1 writes {len(shard_files)} shards and an index")
    r = run(binary, "inspect", ckpt)
    check(r.returncode == 0 and "total:" in r.stdout and "optimizer-state" in r.stdout,
          "inspect prints a text report with totals")
    return ckpt, hf


def transformers_checks(binary, work, trained_paths):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except ImportError as e:
        print(f"skip transformers checks: {e}")
        return
    if trained_paths is not None:
        ckpt, hf = trained_paths
        model, info = AutoModelForCausalLM.from_pretrained(
            hf, torch_dtype=torch.float64, attn_implementation="eager", output_loading_info=True)
        problems = [f"{k}: {v}" for k, v in info.items() if v]
        if check(not problems, f"transformers {transformers.__version__} loads the trained "
                               f"model's export as {type(model).__name__} {problems}"):
            prompt = [3, 7, 1, 9, 4, 2, 8]
            with torch.no_grad():
                ref = model(torch.tensor([prompt])).logits[0]
            out = os.path.join(work, "trained.logits")
            r = run(binary, "generate", "--model", ckpt, "--prompt-ids",
                    ",".join(map(str, prompt)), "--dump-logits", out)
            if check(r.returncode == 0, f"generate --dump-logits on the native checkpoint "
                                        f"{r.stderr.strip()[-200:]}"):
                ours = oracle.read_logits(out)
                scale = max(1.0, float(ref.abs().max()))
                err = float((ours - ref).abs().max()) if ours.shape == ref.shape else 1e9
                check(err <= oracle.TOL * scale,
                      f"trained: transformers' logits on our HF export = switchyard's on the "
                      f"native checkpoint (max abs err {err:.3e}, tolerance "
                      f"{oracle.TOL * scale:.3e})")
                steps = 6
                r = run(binary, "generate", "--model", ckpt, "--prompt-ids",
                        ",".join(map(str, prompt)), "--max-tokens", str(steps))
                ids = prompt[:]
                with torch.no_grad():
                    for _ in range(steps):
                        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
                want = ids[len(prompt):]
                got = [int(x) for x in r.stdout.strip().split(",")] if r.returncode == 0 else []
                check(got == want, f"trained: greedy tokens {got} = transformers' {want}")
    # transformers' own save_pretrained of our config.json writes the same keys and values.
    for fam in oracle.CASES:
        path = os.path.join(work, f"{fam} ({oracle.CASES[fam][1]}, {oracle.CASES[fam][2]} "
                                  f"file(s))-hf")
        if fam not in CONFIG_MAPPING_NAMES or not os.path.isdir(path):
            print(f"skip {fam} config.json check: not in transformers "
                  f"{transformers.__version__}")
            continue
        ours = json.load(open(os.path.join(path, "config.json")))
        saved = os.path.join(work, "saved-" + fam)
        AutoConfig.from_pretrained(path).save_pretrained(saved)
        theirs = json.load(open(os.path.join(saved, "config.json")))
        theirs.pop("_name_or_path", None)  # the path it was loaded from, not a model key
        diff = {k: (ours.get(k, "<absent>"), theirs.get(k, "<absent>"))
                for k in set(ours) | set(theirs) if ours.get(k, "<absent>") !=
                theirs.get(k, "<absent>")}
        check(not diff, f"{fam}: config.json is what transformers' save_pretrained writes {diff}")


def bad_inputs(binary, work):
    config, _, _ = oracle.CASES["mixtral"]
    base = oracle.make_tensors("mixtral", config, np.random.default_rng(5))
    cases = []

    def model(name, tensors, shards=1):
        d = os.path.join(work, "bad-" + name)
        oracle.write_model(d, config, tensors, "F32", shards)
        return d

    d = model("truncated", base)
    path = os.path.join(d, "model.safetensors")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)
    cases.append(("truncated file", d, "model.safetensors", "truncated"))
    d = model("header", base)
    path = os.path.join(d, "model.safetensors")
    with open(path, "r+b") as f:
        f.write(struct.pack("<Q", os.path.getsize(path) + 1000))
    cases.append(("header past the end", d, "model.safetensors", "past the end"))
    d = model("dtype", base)
    path = os.path.join(d, "model.safetensors")
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header["model.layers.0.self_attn.k_proj.weight"]["dtype"] = "I32"  # same size as F32
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (n - len(text))
    blob[8:8 + n] = text
    with open(path, "wb") as f:
        f.write(blob)
    cases.append(("wrong dtype", d, "model.layers.0.self_attn.k_proj.weight", "I32"))
    missing = [t for t in base if t[0] != "model.layers.1.block_sparse_moe.experts.2.w3.weight"]
    d = model("missing", missing)
    cases.append(("missing tensor", d, "model.layers.1.block_sparse_moe.experts.2.w3.weight",
                  "missing"))
    d = model("escape", base, shards=2)
    index = os.path.join(d, "model.safetensors.index.json")
    with open(index) as f:
        idx = json.load(f)
    idx["weight_map"]["model.norm.weight"] = "../bad-missing/model.safetensors"
    with open(index, "w") as f:
        json.dump(idx, f)
    cases.append(("index escaping the directory", d, "model.norm.weight", ".."))
    for what, d, needle1, needle2 in cases:
        for to, out in (("native", os.path.join(work, "out-" + what.replace(" ", "_") + ".h5")),
                        ("hf", os.path.join(work, "out-" + what.replace(" ", "_")))):
            r = run(binary, "convert", "--in", d, "--out", out, "--to", to)
            leftovers = [x for x in os.listdir(work) if x.startswith(os.path.basename(out))]
            ok = (r.returncode != 0 and needle1 in r.stderr and needle2 in r.stderr
                  and not leftovers)
            check(ok, f"bad input, {what} -> {to}: {r.stderr.strip()[:200]} "
                      f"(left behind: {leftovers})")
        r = run(binary, "inspect", d)
        check(r.returncode != 0 and needle1 in r.stderr, f"inspect rejects {what}")
    # An existing output is never overwritten.
    out = os.path.join(work, "exists")
    os.makedirs(out, exist_ok=True)
    r = run(binary, "convert", "--in", os.path.join(work, "src-mixtral"), "--out", out)
    check(r.returncode != 0 and "exists" in r.stderr and not os.listdir(out),
          "an existing --out is refused and left untouched")


def main():
    binary, work, train_config = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    family_round_trips(binary, work)
    trained_paths = trained(binary, work, train_config)
    transformers_checks(binary, work, trained_paths)
    bad_inputs(binary, work)
    if FAILURES:
        print("\nFAILED:\n  " + "\n  ".join(FAILURES))
        return 1
    print("\nall conversion checks pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
