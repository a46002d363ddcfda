#!/usr/bin/python3
"""Oracle test: `switchyard generate` against Hugging Face `transformers` itself.

Usage: /usr/bin/python3 hf_transformers_oracle.py SWITCHYARD_BINARY WORK_DIR

For each family that the installed transformers implements -- mixtral (MixtralForCausalLM),
qwen2_moe with its gated shared expert (Qwen2MoeForCausalLM), olmoe (OlmoeForCausalLM),
qwen3_moe (Qwen3MoeForCausalLM) and glm4_moe (Glm4MoeForCausalLM, loaded in float32: see load)
-- this writes the tiny random model of hf_moe_oracle.py (same
config.json, same safetensors writer, same dtypes), loads the directory with

  AutoModelForCausalLM.from_pretrained(DIR, torch_dtype=torch.float64, attn_implementation="eager")

which must find every tensor it expects and no other, and compares:
  * the logits of every prompt position with `switchyard generate --dump-logits`;
  * six greedy decode steps: transformers decoding over its own KV cache (past_key_values, one
    token per step) against `switchyard generate --max-tokens 6 --dump-decode-logits`: the same
    token ids, and the logits of every step;
  * the hand-written float64 forward of hf_moe_oracle.py against transformers (the two oracles
    must agree too);
  * (mixtral) greedy decoding with transformers' repetition_penalty against `switchyard generate
    --repeat-penalty`: the same token ids.

Tolerance: max |ours - transformers| <= TOL * max(1, max |transformers|), TOL = 1e-4, as in
hf_moe_oracle.py, which shows that plausible loader bugs move the logits by more than 10 x TOL.
transformers runs in float64 but computes RMSNorm, RoPE's cos/sin and the router softmax in
float32, so it is itself within ~1e-6 of exact.

Not covered here: DeepSeek-MoE v1 is remote code (trust_remote_code), not part of transformers;
it stays on the hand-written oracle. qwen3_moe needs transformers >= 4.51 and glm4_moe >= 4.54,
which need torch >= 2 (modeling_utils imports torch.distributed.tensor); with Debian's torch 1.13
the pinned transformers (scripts/install-deps.sh) lacks them and they are reported as skipped (run
the script with a venv's python holding torch 2 and a recent transformers: docs/inference.md).

Exit 77 (ctest: skipped) when transformers or torch is not installed, saying why.
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only, never the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import hf_moe_oracle as oracle  # exits 77 without torch / numpy

try:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, DynamicCache, RepetitionPenaltyLogitsProcessor
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
except ImportError as e:
    print(f"SKIP: Hugging Face transformers is not usable: {e}; scripts/install-deps.sh installs "
          "transformers==4.49.0 and its pinned dependencies from PyPI")
    sys.exit(77)

FAMILIES = ["mixtral", "qwen2_moe", "olmoe", "qwen3_moe", "glm4_moe"]


def load(model_dir, fam=None, unused_prefix=None):
    """The checkpoint in transformers, and what it found missing or unexpected; unexpected
    tensors under `unused_prefix` are not counted (GLM-4.5's multi-token-prediction layer, which
    transformers' real Glm4MoeForCausalLM skips by name, model.layers.46 / 92)."""
    # GLM-4.5 runs in float32: its MoE block sums the experts into a tensor of the router weights'
    # dtype (float32), which index_add_ refuses to mix with float64 expert outputs. float32 is
    # within ~1e-6 of exact on these O(1) models, far inside TOL.
    dtype = torch.float32 if fam == "glm4_moe" else torch.float64
    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, torch_dtype=dtype, attn_implementation="eager", output_loading_info=True)
    if unused_prefix:
        info["unexpected_keys"] = [k for k in info["unexpected_keys"]
                                   if not k.startswith(unused_prefix)]
    problems = [f"{k}: {v}" for k, v in info.items() if v]
    return model.eval(), problems


@torch.no_grad()
def hf_greedy(model, steps):
    """transformers' own incremental decoding: the prompt once, then one token per step over
    past_key_values. Returns (ids, logits [steps, vocab])."""
    out = model(torch.tensor([oracle.PROMPT]), past_key_values=DynamicCache(), use_cache=True)
    rows, ids = [out.logits[0, -1]], []
    for _ in range(steps):
        ids.append(int(rows[-1].argmax()))
        if len(ids) == steps:
            break
        out = model(torch.tensor([[ids[-1]]]), past_key_values=out.past_key_values,
                    use_cache=True)
        rows.append(out.logits[0, -1])
    return ids, torch.stack(rows)


def check_family(binary, work, fam):
    config, dtype, shards = oracle.CASES[fam]
    rng = oracle.np.random.default_rng(sum(map(ord, fam)))
    model_dir = os.path.join(work, fam)
    values = oracle.write_model(model_dir, config, oracle.make_tensors(fam, config, rng), dtype,
                                shards)
    model, problems = load(model_dir, fam)
    if problems:
        return [f"{fam}: transformers loaded the checkpoint with {'; '.join(problems)}"]
    failures = []
    with torch.no_grad():
        ref = model(torch.tensor([oracle.PROMPT])).logits[0]
    scale = max(1.0, float(ref.abs().max()))
    tol = oracle.TOL * scale

    out_file = os.path.join(work, fam + ".logits")
    r = oracle.run_switchyard(binary, model_dir, out_file)
    if r.returncode != 0:
        return [f"{fam}: switchyard failed: {r.stderr.strip()}"]
    ours = oracle.read_logits(out_file)
    err = float((ours - ref).abs().max()) if ours.shape == ref.shape else float("inf")
    hand = oracle.Family(fam, config, values).forward(oracle.PROMPT)
    hand_err = float((hand - ref).abs().max())
    ok = err <= tol and hand_err <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} {dtype:4s} {type(model).__name__}: prompt logits "
          f"max|logit|={float(ref.abs().max()):.3f} switchyard max abs err={err:.3e}, "
          f"hand-written oracle {hand_err:.3e} (tolerance {tol:.3e})")
    if err > tol:
        failures.append(f"{fam}: prompt logits max abs err {err:.3e} > {tol:.3e}")
    if hand_err > tol:
        failures.append(f"{fam}: hf_moe_oracle.py's forward differs from transformers by "
                        f"{hand_err:.3e} > {tol:.3e}")

    want, ref_steps = hf_greedy(model, oracle.GREEDY_STEPS)
    got, our_steps = oracle.run_greedy(binary, model_dir, os.path.join(work, fam + ".decode"))
    if got is None:
        return failures + [f"{fam}: greedy generation failed: {our_steps}"]
    step_scale = max(1.0, float(ref_steps.abs().max()))
    step_err = float((our_steps - ref_steps).abs().max()) \
        if our_steps.shape == ref_steps.shape else float("inf")
    ok = got == want and step_err <= oracle.TOL * step_scale
    print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} greedy {got} (transformers {want}); decode-step "
          f"logits max abs err={step_err:.3e} (tolerance {oracle.TOL * step_scale:.3e})")
    if not ok:
        failures.append(f"{fam}: greedy {got} vs transformers {want}, decode-step logits err "
                        f"{step_err:.3e}")
    return failures


def penalty_checks(binary, work, fam="mixtral"):
    """Issue 45: greedy decoding with transformers' RepetitionPenaltyLogitsProcessor (over the
    prompt and the answer) gives the tokens of `switchyard generate --repeat-penalty` on the
    model check_family wrote. Penalties that change the greedy path are chosen (1.0 is the
    control)."""
    model_dir = os.path.join(work, fam)
    model, _ = load(model_dir)
    failures = []
    steps = 12
    for penalty in (1.0, 1.5, 3.0):
        # transformers' processor in a greedy loop of its own (model.generate imports
        # torch.distributed, which Debian's torch 1.13 cannot under Python 3.11).
        processor = RepetitionPenaltyLogitsProcessor(penalty)
        ids = list(oracle.PROMPT)
        with torch.no_grad():
            for _ in range(steps):
                scores = model(torch.tensor([ids])).logits[:, -1, :]
                scores = processor(torch.tensor([ids]), scores)
                ids.append(int(scores[0].argmax()))
        want = ids[len(oracle.PROMPT):]
        r = oracle.subprocess.run(
            [binary, "generate", "--model", model_dir, "--prompt-ids",
             ",".join(map(str, oracle.PROMPT)), "-n", str(steps), "--temperature", "0",
             "--repeat-penalty", str(penalty)], capture_output=True, text=True)
        got = [int(x) for x in r.stdout.strip().split(",")] if r.returncode == 0 else None
        ok = got == want
        print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} greedy with repetition_penalty {penalty}: "
              f"{got} (transformers {want})")
        if not ok:
            failures.append(f"{fam}: repetition_penalty {penalty}: {got} vs transformers {want}")
    return failures


def bias_checks(binary, work):
    """Issue 17: the attention_bias variants of hf_moe_oracle.py that this transformers builds
    (OLMoE, and Qwen3-MoE where implemented: a bias on q, k, v and o), loaded by transformers
    with no missing or unexpected tensor, give switchyard's logits. transformers 4.49's Qwen2-MoE
    always has q/k/v biases, so its qkv_bias = false variants stay on hf_moe_oracle.py."""
    failures = []
    for what, fam, config, model_dir, _ in oracle.bias_variant_dirs(os.path.join(work, "bias")):
        if fam not in ("olmoe", "qwen3_moe", "glm4_moe"):
            continue
        if fam not in CONFIG_MAPPING_NAMES:
            print(f"skip {what}: transformers {transformers.__version__} lacks {fam}")
            continue
        unused = None
        if config.get("num_nextn_predict_layers"):
            unused = f"model.layers.{config['num_hidden_layers']}."
        model, problems = load(model_dir, fam, unused)
        if problems:
            failures.append(f"{what}: transformers loaded it with {'; '.join(problems)}")
            continue
        with torch.no_grad():
            ref = model(torch.tensor([oracle.PROMPT])).logits[0]
        out_file = model_dir + ".logits"
        r = oracle.run_switchyard(binary, model_dir, out_file)
        if r.returncode != 0:
            failures.append(f"{what}: switchyard failed: {r.stderr.strip()}")
            continue
        ours = oracle.read_logits(out_file)
        tol = oracle.TOL * max(1.0, float(ref.abs().max()))
        err = float((ours - ref).abs().max()) if ours.shape == ref.shape else float("inf")
        print(f"{'ok  ' if err <= tol else 'FAIL'} {what}: {type(model).__name__} prompt logits "
              f"max abs err={err:.3e} (tolerance {tol:.3e})")
        if err > tol:
            failures.append(f"{what}: prompt logits max abs err {err:.3e} > {tol:.3e}")
    return failures


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    failures, ran = [], 0
    for fam in FAMILIES:
        if fam not in CONFIG_MAPPING_NAMES:
            print(f"skip {fam}: transformers {transformers.__version__} does not implement it "
                  f"(Qwen3-MoE is in transformers >= 4.51 and GLM-4.5 in >= 4.54, which need "
                  f"torch >= 2; torch here is {torch.__version__})")
            continue
        failures += check_family(binary, work, fam)
        ran += 1
        if fam == "mixtral":
            failures += penalty_checks(binary, work, fam)
    failures += bias_checks(binary, work)
    print("skip deepseek: DeepSeek-MoE v1 is remote code, not in transformers; it stays on "
          "hf_moe_oracle.py")
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print(f"\n{ran} families match transformers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
