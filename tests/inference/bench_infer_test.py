#!/usr/bin/python3
"""`switchyard bench infer` on tiny models: resident and ondemand side by side on the sim device.

Usage: /usr/bin/python3 bench_infer_test.py SWITCHYARD_BINARY WORK_DIR

The models are hf_moe_oracle.py's tiny Mixtral (one file) and DeepSeek-MoE (three shards, a dense
first layer, shared experts), written by its writer. For each, at batch 2, f32 weights:
  - the JSON has every field the table reports, for both policies, and the tokens agree;
  - ondemand's model was loaded with its experts on the host: the device held fewer bytes after
    the load than resident's by at least every routed expert's f32 bytes, counted here from the
    safetensors files; resident moved no expert bytes, ondemand moved whole experts;
  - with --store posix:FILE the experts are written to the store on the first run and reused on
    the second, served through a host cache of 3 experts, with the same tokens and a host hit
    rate in [0, 1];
  - an unknown policy is refused with a nonzero exit.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_moe_oracle as oracle  # exits 77 (skipped) without numpy and torch

import numpy as np

EXPERT = re.compile(r"^model\.layers\.(\d+)\..*\.experts\.(\d+)\.")
FIELDS = ["prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms", "stall_seconds",
          "bytes_host_to_device", "device_cache_hit_rate", "host_cache_hit_rate",
          "predictor_accuracy", "peak_device_bytes", "device_bytes_after_load", "tokens",
          "tokens_match_resident", "vs_resident"]


def expert_numel(model_dir):
    total = 0
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            for tensor, value in oracle.read_safetensors(os.path.join(model_dir, name)).items():
                if EXPERT.match(tensor):
                    total += int(np.prod(value.shape))
    return total


def bench(binary, model_dir, out, extra=()):
    cmd = [binary, "bench", "infer", "--model", model_dir, "--policies", "resident,ondemand",
           "--prompt-len", "5", "--gen-len", "4", "--batch", "2", "--device", "sim",
           "--link-gbps", "2", "--device-slots", "2", "--dtype", "f32", "--threads", "2",
           "--seed", "3", "--json-out", out, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    print(r.stdout.strip())
    return r


def check_family(binary, work, fam):
    failures = []
    config, dtype, shards = oracle.CASES[fam]
    model_dir = os.path.join(work, fam)
    oracle.write_model(model_dir, config, oracle.make_tensors(fam, config,
                                                             np.random.default_rng(7)),
                       dtype, shards)
    out = os.path.join(work, fam + ".json")
    r = bench(binary, model_dir, out)
    if r.returncode != 0:
        return [f"{fam}: bench infer failed ({r.returncode}): {r.stderr.strip()}"]
    res = json.load(open(out))
    rows = {row["policy"]: row for row in res["policies"]}
    for policy in ("resident", "ondemand"):
        row = rows.get(policy)
        if row is None or not row["ok"]:
            failures.append(f"{fam}: {policy} missing or failed: {row}")
            continue
        missing = [f for f in FIELDS if f not in row]
        if missing:
            failures.append(f"{fam}: {policy} lacks {missing}")
        if len(row["tokens"]) != 2 or any(len(t) != 4 for t in row["tokens"]):
            failures.append(f"{fam}: {policy} tokens {row['tokens']}, want 2 x 4")
        if row["prefill_tokens_per_s"] <= 0 or row["decode_tokens_per_s"] <= 0:
            failures.append(f"{fam}: {policy} rates {row['prefill_tokens_per_s']}, "
                            f"{row['decode_tokens_per_s']}")
    if failures:
        return failures
    res_row, od = rows["resident"], rows["ondemand"]
    same = od["tokens"] == res_row["tokens"] == res["reference_tokens"] and \
        od["tokens_match_resident"] and not res["mismatches"]
    print(f"{'ok  ' if same else 'FAIL'} {fam}: tokens resident {res_row['tokens']}, "
          f"ondemand {od['tokens']}")
    if not same:
        failures.append(f"{fam}: ondemand tokens {od['tokens']} != resident {res_row['tokens']}")

    experts_f32 = 4 * expert_numel(model_dir)
    saved = res_row["device_bytes_after_load"] - od["device_bytes_after_load"]
    ok = saved >= experts_f32
    print(f"{'ok  ' if ok else 'FAIL'} {fam}: device bytes after load: resident "
          f"{res_row['device_bytes_after_load']}, ondemand {od['device_bytes_after_load']} "
          f"(saved {saved}, experts {experts_f32})")
    if not ok:
        failures.append(f"{fam}: experts_on_host saved {saved} device bytes, experts are "
                        f"{experts_f32}")
    expert_bytes = res["setup"]["expert_bytes"]
    ok = (res_row["bytes_host_to_device"] == 0 and od["bytes_host_to_device"] > 0
          and od["bytes_host_to_device"] % expert_bytes == 0
          and res_row["device_cache_hit_rate"] == 1.0
          and 0.0 <= od["device_cache_hit_rate"] <= 1.0
          and od["host_cache_hit_rate"] is None
          and od["vs_resident"]["decode_tokens_per_s"] is not None)
    print(f"{'ok  ' if ok else 'FAIL'} {fam}: bytes host to device resident "
          f"{res_row['bytes_host_to_device']}, ondemand {od['bytes_host_to_device']} (expert "
          f"{expert_bytes}); device hit rate {od['device_cache_hit_rate']}")
    if not ok:
        failures.append(f"{fam}: counters do not add up: {od}")

    # The expert store: written on the first run, reused on the second.
    store = os.path.join(work, fam + ".store")
    if os.path.exists(store):
        os.remove(store)
    for attempt, word in ((1, "written"), (2, "reused")):
        out = os.path.join(work, f"{fam}.store{attempt}.json")
        r = bench(binary, model_dir, out, ["--store", "posix:" + store,
                                           "--host-cache-experts", "3"])
        if r.returncode != 0:
            failures.append(f"{fam}: bench infer --store failed ({r.returncode}): "
                            f"{r.stderr.strip()}")
            break
        rows = {row["policy"]: row for row in json.load(open(out))["policies"]}
        od = rows["ondemand"]
        ok = (od["tokens"] == res_row["tokens"] and od["store"].startswith(word)
              and od["host_cache_hit_rate"] is not None
              and 0.0 <= od["host_cache_hit_rate"] <= 1.0 and od["host_store_bytes_read"] > 0)
        print(f"{'ok  ' if ok else 'FAIL'} {fam}: store run {attempt}: {od['store']}; host hit "
              f"rate {od['host_cache_hit_rate']}, tokens {od['tokens']}")
        if not ok:
            failures.append(f"{fam}: store run {attempt}: {od}")
    return failures


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failures = []
    for fam in ("mixtral", "deepseek"):
        failures += check_family(binary, work, fam)
    r = subprocess.run([binary, "bench", "infer", "--model", os.path.join(work, "mixtral"),
                        "--policies", "resident,no-such-policy"], capture_output=True, text=True)
    if r.returncode == 0 or "no-such-policy" not in r.stderr:
        failures.append(f"an unknown policy was not refused: {r.returncode} {r.stderr}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
