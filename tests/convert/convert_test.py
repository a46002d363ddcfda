#!/usr/bin/python3
"""`switchyard convert` and `switchyard inspect` end to end (issue 17: native, Hugging Face, GGUF).

Usage: /usr/bin/python3 convert_test.py SWITCHYARD WORK_DIR EXAMPLE_TRAIN_CONFIG

1. Round trips, bit-exact per tensor (CRC-32C from `inspect --checksums --json`, and dtypes):
   for each family of hf_moe_oracle.py (mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek, in their
   F32 / F16 / BF16, single-file and sharded forms) and each attention-bias variant:
     hf -> native -> hf       every tensor, config.json's keys and values, and the side files
     native -> hf -> native   every parameter
     hf -> gguf -> hf         every tensor (F32, F16 and BF16 kept as they are)
     native -> gguf -> native every parameter
   and `generate --model x.gguf` gives the source's greedy tokens (each family);
   and for a model trained by `switchyard train`: native -> hf -> native (parameters), and
   native -> native with the optimizer moments m and v, and --shard-mib sharding;
   native -> gguf -> native and its greedy tokens; --dtype q8_0 / q4_0 GGUF exports that quantize
   attention and expert matrices and keep routers and norms F32, and generate runs on them.
   `inspect` on a GGUF: its stored tensors (name, type, shape, bytes) and every metadata key and
   value equal what gguf-py's GGUFReader finds (skipped, saying so, without the gguf package).
2. transformers (skipped, saying so, when it is not installed): AutoModelForCausalLM loads the
   trained model's HF export with no missing or unexpected tensor, and its logits equal
   `switchyard generate --dump-logits` on the native checkpoint within 1e-4 relative, with the
   same greedy tokens; for the families transformers implements, its own save_pretrained of our
   config.json writes the same keys and values.
3. Bad input: a truncated safetensors file, a header length past the end, a wrong dtype, a
   missing tensor and an index entry escaping the directory each fail with an error naming the
   file and the tensor, and leave no output (nor a staging directory) behind. The same for a GGUF:
   truncated, a tensor offset past the end, a wrong tensor type, a missing tensor, converted to
   each of native, hf and gguf.
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
try:
    import gguf  # gguf-py, llama.cpp's own reader (pinned in scripts/install-deps.sh)
except ImportError:
    gguf = None
FAILURES = []
PROMPT = [3, 7, 1, 9, 4, 2, 8]


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


def params(report):
    return {k: v for k, v in by_name(report, "switchyard_name").items()
            if not k.startswith("optim/")}


def greedy(binary, model, steps=6):
    r = run(binary, "generate", "--model", model, "--prompt-ids", ",".join(map(str, PROMPT)),
            "--max-tokens", str(steps))
    if r.returncode != 0:
        check(False, f"generate --model {model}: {r.stderr.strip()[-200:]}")
        return None
    return [int(x) for x in r.stdout.strip().split(",")]


GGUF_PY_TYPES = {"UINT8": "u8", "INT8": "i8", "UINT16": "u16", "INT16": "i16", "UINT32": "u32",
                 "INT32": "i32", "FLOAT32": "f32", "BOOL": "bool", "STRING": "string",
                 "UINT64": "u64", "INT64": "i64", "FLOAT64": "f64"}


def inspect_gguf_vs_gguf_py(binary, what, path):
    """`inspect --json` of a GGUF against gguf-py's GGUFReader: stored tensors and metadata."""
    if gguf is None:
        print(f"skip {what}: inspect against gguf-py (the gguf package is not installed)")
        return
    ours = inspect(binary, path)
    if ours is None:
        return
    r = gguf.GGUFReader(path)
    stored = {t["name"]: (t["type"], t["shape"], t["bytes"]) for t in ours["stored_tensors"]}
    theirs = {t.name: (t.tensor_type.name, [int(x) for x in reversed(list(t.shape))],
                       int(t.n_bytes)) for t in r.tensors}
    check(stored == theirs and len(stored) > 0,
          f"{what}: inspect's {len(stored)} stored tensors (name, type, shape, bytes) = gguf-py's "
          f"{[k for k in set(stored) | set(theirs) if stored.get(k) != theirs.get(k)][:3]}")
    meta = {m["key"]: m for m in ours["metadata"]}
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    bad = sorted(set(meta) ^ set(fields))
    for key in set(meta) & set(fields):
        f, m = fields[key], meta[key]
        names = [GGUF_PY_TYPES.get(t.name, t.name) for t in f.types]
        want_type = f"array[{names[1]}]" if names[0] == "ARRAY" else names[0]
        value = f.contents()
        if names[0] == "ARRAY" and len(value) > 64:
            same = m["value"] is None and m.get("count") == len(value)
        elif names[0] in ("f32", "f64"):
            same = np.float32(m["value"]) == np.float32(value)
        else:
            same = m["value"] == value
        if m["type"] != want_type or not same:
            bad.append(f"{key}: {m['type']} {m['value']!r} vs {want_type} {value!r}")
    check(not bad and len(meta) > 0,
          f"{what}: inspect's {len(meta)} metadata keys and values = gguf-py's {bad[:3]}")


def gguf_round_trip(binary, work, what, model_dir, native, tokens):
    """hf -> gguf -> hf and native -> gguf -> native, bit-exact; greedy tokens of the GGUF."""
    g, back = os.path.join(work, what + ".gguf"), os.path.join(work, what + "-gguf-hf")
    ng, native3 = os.path.join(work, what + "-n.gguf"), os.path.join(work, what + "-3.h5")
    if not (convert(binary, model_dir, g) and convert(binary, g, back, "--to", "hf")
            and convert(binary, native, ng, "--to", "gguf") and convert(binary, ng, native3)):
        return
    a, b = inspect(binary, model_dir), inspect(binary, back)
    n1, n3, gi = inspect(binary, native), inspect(binary, native3), inspect(binary, g)
    if None in (a, b, n1, n3, gi):
        return
    ta, tb = by_name(a, "name"), by_name(b, "name")
    check(ta == tb and len(ta) > 0,
          f"{what}: hf -> gguf -> hf keeps all {len(ta)} tensors bit for bit "
          f"({sorted(set(ta) ^ set(tb))[:3] or [k for k in ta if ta[k] != tb.get(k)][:3]})")
    check(params(n1) == params(n3) and len(params(n1)) > 0,
          f"{what}: native -> gguf -> native keeps all {len(params(n1))} parameters bit for bit")
    check(gi["format"] == "gguf" and gi["architecture"] == a["architecture"],
          f"{what}: inspect reads the GGUF as {gi['format']} {gi['architecture']}")
    if tokens:
        want, got = greedy(binary, model_dir), greedy(binary, g)
        check(want is not None and got == want,
              f"{what}: generate --model x.gguf gives the source's greedy tokens {got} = {want}")


def hf_round_trip(binary, work, what, model_dir, tokens=False):
    """hf -> native -> hf and native -> hf -> native, bit-exact; then gguf_round_trip."""
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
    # GLM-4.5's multi-token-prediction layers are left out (the forward does not run them), so
    # the written config.json has none.
    if want.get("num_nextn_predict_layers"):
        want = dict(want, num_nextn_predict_layers=0)
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
    gguf_round_trip(binary, work, what, model_dir, native, tokens)


def family_round_trips(binary, work):
    for fam, (config, dtype, shards) in oracle.CASES.items():
        rng = np.random.default_rng(sum(map(ord, fam)))
        model_dir = os.path.join(work, "src-" + fam)
        oracle.write_model(model_dir, config, oracle.make_tensors(fam, config, rng), dtype, shards)
        # A tokenizer file rides along.
        with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
            json.dump({"model_max_length": 128, "family": fam}, f)
        hf_round_trip(binary, work, f"{fam} ({dtype}, {shards} file(s))", model_dir,
                      tokens=True)
        inspect_gguf_vs_gguf_py(binary, fam, os.path.join(
            work, f"{fam} ({dtype}, {shards} file(s)).gguf"))
    for what, fam, _, model_dir, _ in oracle.bias_variant_dirs(os.path.join(work, "bias")):
        hf_round_trip(binary, work, what.replace(" ", "_"), model_dir, tokens=True)


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
    trained_gguf(binary, work, ckpt, params)
    return ckpt, hf


def trained_gguf(binary, work, ckpt, want):
    """The trained model through GGUF: bit-exact back to native, same greedy tokens, quantized."""
    g, back = os.path.join(work, "trained.gguf"), os.path.join(work, "trained-gguf-2.h5")
    if not (convert(binary, ckpt, g) and convert(binary, g, back)):
        return
    n = inspect(binary, back)
    if n is None:
        return
    check(params(n) == want, f"trained: native -> gguf -> native keeps all {len(want)} "
                             f"parameters bit for bit")
    tokens = greedy(binary, ckpt)
    check(tokens is not None and greedy(binary, g) == tokens,
          f"trained: generate --model trained.gguf gives the checkpoint's greedy tokens {tokens}")
    inspect_gguf_vs_gguf_py(binary, "trained", g)
    for q in ("q8_0", "q4_0"):
        qg = os.path.join(work, f"trained-{q}.gguf")
        if not convert(binary, ckpt, qg, "--dtype", q):
            continue
        rep = inspect(binary, qg)
        if rep is None:
            continue
        types = {t["name"]: t["type"] for t in rep["stored_tensors"]}
        quantized = [k for k in types if "attn_" in k and k.endswith(".weight")
                     and "norm" not in k or "_exps" in k]
        kept = [k for k in types if "norm" in k or "ffn_gate_inp" in k]
        check(quantized and kept and all(types[k] == q.upper() for k in quantized)
              and all(types[k] == "F32" for k in kept),
              f"trained: --dtype {q} quantizes the {len(quantized)} attention and expert matrices "
              f"and keeps {len(kept)} norms and routers F32")
        inspect_gguf_vs_gguf_py(binary, f"trained {q}", qg)
        check(greedy(binary, qg) is not None, f"trained: generate runs on the {q} GGUF")
    r = run(binary, "convert", "--in", ckpt, "--out", os.path.join(work, "q8-hf"), "--dtype",
            "q8_0")
    check(r.returncode != 0 and "q8_0" in r.stderr and "hf" in r.stderr
          and not os.path.exists(os.path.join(work, "q8-hf")),
          f"--dtype q8_0 to hf is refused: {r.stderr.strip()[:150]}")


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
    bad_gguf_inputs(binary, work)
    # An existing output is never overwritten.
    out = os.path.join(work, "exists")
    os.makedirs(out, exist_ok=True)
    r = run(binary, "convert", "--in", os.path.join(work, "src-mixtral"), "--out", out)
    check(r.returncode != 0 and "exists" in r.stderr and not os.listdir(out),
          "an existing --out is refused and left untouched")


def bad_gguf_inputs(binary, work):
    if gguf is None:
        print("skip bad GGUF input: the gguf package (to write the cases) is not installed")
        return
    config, _, _ = oracle.CASES["mixtral"]
    src = os.path.join(work, "bad-gguf-src")
    oracle.write_model(src, config, oracle.make_tensors("mixtral", config,
                                                        np.random.default_rng(6)), "F32", 1)
    good_path = os.path.join(work, "good.gguf")
    if not convert(binary, src, good_path):
        return
    with open(good_path, "rb") as f:
        good = f.read()

    def info_at(name):
        """Offset of a tensor info's n_dims field (after its name)."""
        key = struct.pack("<Q", len(name)) + name.encode()
        return good.index(key) + len(key)

    reader = gguf.GGUFReader(good_path)
    last = reader.tensors[-1].name  # its bytes end the file
    cases = [("truncated", good[:-64], last, "")]
    bad = bytearray(good)
    at = info_at(last)
    n_dims = struct.unpack_from("<I", bad, at)[0]
    struct.pack_into("<Q", bad, at + 4 + 8 * n_dims + 4, 1 << 40)
    cases.append(("offset past the end", bytes(bad), last, ""))
    bad = bytearray(good)
    at = info_at("blk.0.attn_k.weight")
    struct.pack_into("<I", bad, at + 4 + 16, 26)  # I32: as big as F32, not a weight type
    cases.append(("wrong type", bytes(bad), "blk.0.attn_k.weight", "I32"))
    path = os.path.join(work, "missing-tensor.gguf")
    w = gguf.GGUFWriter(path, "llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_array(key, field.contents())
        else:
            w.add_key_value(key, field.contents(), field.types[0])
    for t in reader.tensors:
        if t.name != "blk.1.attn_v.weight":
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(path, "rb") as f:
        cases.append(("missing tensor", f.read(), "model.layers.1.self_attn.v_proj.weight",
                      "missing"))
    for what, blob, tensor, needle in cases:
        name = "bad-" + what.replace(" ", "_") + ".gguf"
        p = os.path.join(work, name)
        with open(p, "wb") as f:
            f.write(blob)
        for to, out in (("native", "gguf-out-" + what.replace(" ", "_") + ".h5"),
                        ("hf", "gguf-out-" + what.replace(" ", "_")),
                        ("gguf", "gguf-out-" + what.replace(" ", "_") + ".gguf")):
            r = run(binary, "convert", "--in", p, "--out", os.path.join(work, out), "--to", to)
            leftovers = [x for x in os.listdir(work) if x.startswith(out)]
            ok = (r.returncode != 0 and name in r.stderr and tensor in r.stderr
                  and needle in r.stderr and not leftovers)
            check(ok, f"bad GGUF, {what} -> {to}: {r.stderr.strip()[:200]} "
                      f"(left behind: {leftovers})")
        r = run(binary, "inspect", p)
        check(r.returncode != 0 and tensor in r.stderr, f"inspect rejects a GGUF, {what}")


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
